//! Headless Chromium (Debian's `chromium`, installed by `.ci/test-tools`) for the tests that
//! need a real browser: the DOM a page leaves after its scripts ran, and screenshots.

use std::process::Command;

use crate::support::temp_path;

/// Chromium's flags for a machine with no outside network: no sandbox (CI runs as root), no
/// GPU, no background fetches, a fresh profile.
fn chromium(profile: &str) -> Command {
    let dir = temp_path(&format!("chromium-{profile}-{}", fastrand::u64(..)));
    let mut c = Command::new("chromium");
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
    ])
    .arg(format!("--user-data-dir={}", dir.display()));
    c
}

/// The DOM of `url` once loaded and its scripts had `budget_ms` of (virtual) time to run.
pub(crate) fn rendered_dom(url: &str, budget_ms: u32) -> String {
    let out = chromium("dom")
        .arg(format!("--virtual-time-budget={budget_ms}"))
        .arg("--dump-dom")
        .arg(url)
        .output()
        .expect("chromium runs (installed by .ci/test-tools)");
    assert!(
        out.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A screenshot of `url` at `width`x`height`, written to `path`, once its scripts had
/// `budget_ms` of (virtual) time to run.
pub(crate) fn screenshot(url: &str, width: u32, height: u32, budget_ms: u32, path: &str) {
    let out = chromium("shot")
        .arg(format!("--virtual-time-budget={budget_ms}"))
        .arg(format!("--window-size={width},{height}"))
        .arg(format!("--screenshot={path}"))
        .arg(url)
        .output()
        .expect("chromium runs (installed by .ci/test-tools)");
    assert!(
        out.status.success() && std::path::Path::new(path).exists(),
        "chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
