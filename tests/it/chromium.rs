//! Headless Chromium (Debian's `chromium`, installed by `.ci/test-tools`) for the tests that
//! need a real browser: the DOM a page leaves after its scripts ran, and screenshots.

use std::process::Command;

use crate::support::temp_path;

/// Chromium's flags for a machine with no outside network: no sandbox (CI runs as root), no
/// GPU, no background fetches, a fresh profile (in `dir`, which the caller removes).
fn chromium(dir: &std::path::Path) -> Command {
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
    let dir = temp_path(&format!("chromium-dom-{}", fastrand::u64(..)));
    let out = chromium(&dir)
        .arg(format!("--virtual-time-budget={budget_ms}"))
        .arg("--dump-dom")
        .arg(url)
        .output()
        .expect("chromium runs (installed by .ci/test-tools)");
    let _ = std::fs::remove_dir_all(&dir);
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
    let dir = temp_path(&format!("chromium-shot-{}", fastrand::u64(..)));
    let out = chromium(&dir)
        .arg(format!("--virtual-time-budget={budget_ms}"))
        .arg(format!("--window-size={width},{height}"))
        .arg(format!("--screenshot={path}"))
        .arg(url)
        .output()
        .expect("chromium runs (installed by .ci/test-tools)");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success() && std::path::Path::new(path).exists(),
        "chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
