//! OCSP stapling against a real responder (`openssl ocsp`): a certificate naming the
//! responder gets its good response stapled (seen by `openssl s_client -status`), a revoked
//! one is never stapled, one without a responder staples nothing, and a staple is withdrawn
//! when it would go stale with the responder gone.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::*;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "openssl {args:?}: {out:?}");
}

/// A CA and leaves for `a.test` (good), `r.test` (revoked) and `n.test` (no responder),
/// each written as a chain (leaf, then the CA) and a key; the responder's index.
fn pki(dir: &Path, responder: u16) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "30",
        "-subj",
        "/CN=OCSP test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    openssl(dir, &ca);
    let mut index = String::new();
    for (name, serial, responder_url) in [
        ("a", "1001", true),
        ("r", "1002", true),
        ("n", "1003", false),
    ] {
        let mut ext = format!("subjectAltName=DNS:{name}.test\n");
        if responder_url {
            ext.push_str(&format!(
                "authorityInfoAccess=OCSP;URI:http://127.0.0.1:{responder}/\n"
            ));
        }
        std::fs::write(dir.join(format!("{name}.ext")), ext).unwrap();
        let mut req = vec!["req"];
        req.extend(ec);
        let (key, csr, subj) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("/CN={name}.test"),
        );
        req.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
        openssl(dir, &req);
        let (pem, ext_file) = (format!("{name}.pem"), format!("{name}.ext"));
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-set_serial",
                &format!("0x{serial}"),
                "-out",
                &pem,
                "-days",
                "30",
                "-extfile",
                &ext_file,
            ],
        );
        let chain = std::fs::read_to_string(dir.join(&pem)).unwrap()
            + &std::fs::read_to_string(dir.join("ca.pem")).unwrap();
        std::fs::write(dir.join(format!("{name}-chain.pem")), chain).unwrap();
        let status = if name == "r" {
            "R\t301231235959Z\t250101000000Z"
        } else {
            "V\t301231235959Z\t"
        };
        index.push_str(&format!("{status}\t{serial}\tunknown\t/CN={name}.test\n"));
    }
    std::fs::write(dir.join("index.txt"), index).unwrap();
}

/// `openssl ocsp` answering on `port`, its responses valid for `minutes`.
fn responder(dir: &Path, port: u16, minutes: u32) -> Killed {
    let child = Command::new("openssl")
        .current_dir(dir)
        .args(["ocsp", "-index", "index.txt", "-port", &port.to_string()])
        .args(["-rsigner", "ca.pem", "-rkey", "ca.key", "-CA", "ca.pem"])
        .args(["-nmin", &minutes.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Not probed with a connection: the responder serves one connection at a time, and one
    // that closes without a request holds it up.
    assert!(eventually(|| listening(port)));
    Killed(child)
}

/// Whether something listens on `port` (from the kernel's socket table).
fn listening(port: u16) -> bool {
    let needle = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines()
                .any(|l| l.contains(&needle) && l.split_whitespace().nth(3) == Some("0A"))
        })
    })
}

/// What `openssl s_client -status` says of the staple for `name`, verified against the CA.
fn staple_seen(addr: SocketAddr, name: &str, ca: &str) -> String {
    let out = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &addr.to_string(),
            "-servername",
            name,
            "-status",
        ])
        .args(["-CAfile", ca])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn site(name: &str, dir: &Path) -> String {
    format!(
        "[[sites]]\nhosts = [\"{name}.test\"]\ncert = \"{chain}\"\nkey = \"{key}\"\nroutes = [{{ path = \"/\", upstream = \"app\" }}]\n",
        chain = dir.join(format!("{name}-chain.pem")).display(),
        key = dir.join(format!("{name}.key")).display(),
    )
}

fn config(dir: &Path, upstream: SocketAddr) -> String {
    format!(
        "admin = \"{{admin}}\"\n[[listen]]\naddress = \"{{listen}}\"\ntls = true\n[upstreams.app]\nservers = [\"{upstream}\"]\n{}{}{}",
        site("a", dir),
        site("r", dir),
        site("n", dir)
    )
}

#[test]
fn good_responses_are_stapled_and_revoked_or_missing_ones_never() {
    let upstream = Upstream::ok(b"app");
    let dir = temp_path("ocsp-pki");
    let port = free_port();
    pki(&dir, port);
    let ocsp = responder(&dir, port, 60);
    let mut running = Running::config("ocsp.toml", &config(&dir, upstream.addr));
    let (addr, ca) = (running.addr, dir.join("ca.pem").display().to_string());
    let good = || {
        let text = staple_seen(addr, "a.test", &ca);
        text.contains("OCSP Response Status: successful") && text.contains("Cert Status: good")
    };
    assert!(within(20, good), "{}", running.log_text());
    assert!(
        within(20, || running.logged("revoked")),
        "the revoked certificate's response is refused and logged"
    );
    for name in ["r.test", "n.test"] {
        let text = staple_seen(running.addr, name, &ca);
        assert!(
            text.contains("OCSP response: no response sent"),
            "{name}: {text}"
        );
        assert!(
            text.contains("Verify return code: 0 (ok)"),
            "{name}: {text}"
        );
    }
    let admin = running.admin.unwrap();
    let metrics = crate::observe::admin_get(admin, "/metrics");
    assert!(
        metrics.contains("slipstream_ocsp_responses_stapled_total 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("slipstream_ocsp_fetch_failures_total"),
        "{metrics}"
    );
    // A reload keeps the staple without asking the responder again.
    drop(ocsp);
    running.signal("-HUP");
    assert!(running.wait_logged("reloaded"), "{}", running.log_text());
    assert!(good(), "{}", staple_seen(running.addr, "a.test", &ca));
}

#[test]
fn a_staple_is_withdrawn_before_it_goes_stale_when_the_responder_is_gone() {
    let upstream = Upstream::ok(b"app");
    let dir = temp_path("ocsp-stale-pki");
    let port = free_port();
    pki(&dir, port);
    // Responses good for one minute.
    let ocsp = responder(&dir, port, 1);
    let running = Running::config("ocsp-stale.toml", &config(&dir, upstream.addr));
    let ca = dir.join("ca.pem").display().to_string();
    let stapled = || staple_seen(running.addr, "a.test", &ca).contains("Cert Status: good");
    assert!(within(20, stapled));
    drop(ocsp);
    let gone =
        || staple_seen(running.addr, "a.test", &ca).contains("OCSP response: no response sent");
    assert!(within(90, gone), "a stale staple was still served");
    assert!(
        running.logged("OCSP: no staple from"),
        "the failed refresh is logged"
    );
}
