//! First contact, as a new operator meets it: an address another process listens on is
//! refused with one line naming it (unless the listener says `shared = true`); `--workers` is
//! checked like the config key; a one-site config without `default` serves; a missing config
//! file is named without a line number.

use std::net::TcpListener;
use std::process::Command;

use crate::support::*;

/// Runs the binary with `args`; it must exit 1 at once. Returns its standard error.
fn fails(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn an_address_in_use_is_refused_with_one_line_naming_the_holder() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let err = fails(&["proxy", "--listen", &addr, "--upstream", "127.0.0.1:9"]);
    let line = err.lines().rfind(|l| l.contains(&addr)).unwrap_or_default();
    assert!(line.contains("address already in use"), "{err}");
    assert!(
        line.contains(&format!("by pid {}", std::process::id())),
        "{err}"
    );
    // Another slipstream on the same address is refused the same way.
    let first = Running::proxy(&["--upstream", "127.0.0.1:9"]);
    let busy = first.addr.to_string();
    let err = fails(&["proxy", "--listen", &busy, "--upstream", "127.0.0.1:9"]);
    assert!(err.contains("address already in use by pid"), "{err}");
    assert!(err.contains("(slipstream)"), "{err}");
    // Sharing on purpose (a second process joining the SO_REUSEPORT group).
    let toml = "[[listen]]\naddress = \"{listen}\"\nshared = true\n[upstreams.app]\n\
                servers = [\"127.0.0.1:9\"]\n[[sites]]\nroutes = [{ path = \"/\", upstream = \"app\" }]\n";
    let a = Running::config("shared-a.toml", toml);
    let path = temp_path("shared-b.toml");
    std::fs::write(&path, toml.replace("{listen}", &a.addr.to_string())).unwrap();
    let mut b = Command::new(BIN)
        .args(["run", "--config", path.to_str().unwrap()])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        b.try_wait().unwrap().is_none(),
        "the sharing instance exited"
    );
    let _ = b.kill();
    let _ = b.wait();
}

#[test]
fn workers_flag_is_checked_like_the_config_key() {
    for n in ["0", "5000", "many"] {
        let out = Command::new(BIN)
            .args([
                "proxy",
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                "127.0.0.1:9",
            ])
            .args(["--workers", n])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "--workers {n}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("workers must be between 1 and 1024"), "{err}");
    }
}

#[test]
fn a_single_site_without_default_serves() {
    let up = Upstream::ok(b"hello");
    let toml = format!(
        "workers = 1\n[[listen]]\naddress = \"{{listen}}\"\n[upstreams.app]\nservers = [\"{}\"]\n\
         [[sites]]\nroutes = [{{ path = \"/\", upstream = \"app\" }}]\n",
        up.addr
    );
    let proxy = Running::config("one-site.toml", &toml);
    let response = proxy.get("anything.example", "/");
    assert_eq!(status_of(&response), 200);
    assert!(response.ends_with(b"hello"));
}

#[test]
fn a_missing_config_is_named_without_a_line() {
    let err = fails(&["check", "--config", "/nonexistent/slipstream.toml"]);
    assert_eq!(
        err.trim(),
        "/nonexistent/slipstream.toml: cannot read the config: No such file or directory (os error 2)"
    );
}

#[test]
fn version_verbose_names_the_build() {
    let out = Command::new(BIN)
        .args(["version", "--verbose"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(&format!("slipstream {}\n", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    for field in [
        "commit: ",
        "rustc: rustc 1.",
        "target: ",
        "tls: rustls",
        "built in: ",
    ] {
        assert!(text.contains(field), "{field}: {text}");
    }
}
