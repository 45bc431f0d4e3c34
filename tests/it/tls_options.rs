//! The `[tls]` options through real sockets: HSTS on every kind of response over TLS (and
//! none in plain HTTP), `require_sni`, `resumption = false`, and the server's cipher order.

use std::net::TcpStream;

use rustls::pki_types::ServerName;
use rustls::ClientConnection;
use slipstream::observe::metrics::Counter;

use crate::support::*;
use crate::tls::{client_config, tls_config, tls_get, TestPki};

/// The value of `name` in a raw response head.
fn field<'r>(response: &'r [u8], name: &str) -> Option<&'r str> {
    let text = std::str::from_utf8(response).ok()?;
    let head = &text[..text.find("\r\n\r\n")?];
    head.lines().find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

#[test]
fn hsts_is_added_to_every_response_over_tls_and_only_there() {
    let pki = TestPki::new("tls-hsts");
    let upstream = Upstream::ok(b"hello");
    let www = temp_path("tls-hsts-www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("f.txt"), "file").unwrap();
    let text = format!(
        r#"
[tls]
hsts = "max-age=600; includeSubDomains"
[[listen]]
address = "127.0.0.1:0"
tls = true
[[listen]]
address = "127.0.0.1:{plain}"
[upstreams.app]
servers = ["{up}"]
[upstreams.gone]
servers = ["127.0.0.1:1"]
[[sites]]
default = true
cert = "{cert}"
key = "{key}"
routes = [
  {{ path = "/static/", alias = "{www}/" }},
  {{ path = "/down", upstream = "gone" }},
  {{ path = "/", upstream = "app" }},
]
"#,
        up = upstream.addr,
        cert = pki.path("exact.pem"),
        key = pki.path("exact.key"),
        www = www.display(),
        plain = free_port(),
    );
    let proxy = proxy(&text);
    let (tls, plain) = (proxy.local_addrs()[0], proxy.local_addrs()[1]);
    let config = client_config(&[&rustls::version::TLS13]);
    let want = Some("max-age=600; includeSubDomains");
    for (path, status) in [
        ("/tls", 200),
        ("/static/f.txt", 200),
        ("/static/missing", 404),
        ("/down", 502),
    ] {
        let seen = tls_get_path(tls, &config, path);
        assert_eq!(status_of(&seen), status, "{path}");
        assert_eq!(field(&seen, "strict-transport-security"), want, "{path}");
        let once = String::from_utf8_lossy(&seen)
            .matches("Strict-Transport-Security")
            .count();
        assert_eq!(once, 1, "{path}");
    }
    // Plain HTTP never gets it (browsers ignore it there, and it would be a lie).
    let raw = exchange_until_close(
        plain,
        b"GET /tls HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status_of(&raw), 200);
    assert_eq!(field(&raw, "strict-transport-security"), None);
    proxy.shutdown();
}

/// A TLS connection to `addr` with `name` as SNI.
fn tls_connect(
    addr: std::net::SocketAddr,
    config: std::sync::Arc<rustls::ClientConfig>,
    name: &str,
) -> rustls::StreamOwned<ClientConnection, TcpStream> {
    let name = ServerName::try_from(name.to_string()).unwrap();
    let conn = ClientConnection::new(config, name).unwrap();
    rustls::StreamOwned::new(conn, TcpStream::connect(addr).unwrap())
}

/// One GET of `path` over a new TLS connection (SNI a.test).
fn tls_get_path(
    addr: std::net::SocketAddr,
    config: &std::sync::Arc<rustls::ClientConfig>,
    path: &str,
) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut tls = tls_connect(addr, config.clone(), "a.test");
    write!(
        tls,
        "GET {path} HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = Vec::new();
    let _ = tls.read_to_end(&mut response);
    response
}

#[test]
fn an_upstream_hsts_field_is_not_doubled() {
    let pki = TestPki::new("tls-hsts-upstream");
    let upstream = Upstream::start(|_| {
        Reply::Bytes(
            b"HTTP/1.1 200 OK\r\nStrict-Transport-Security: max-age=5\r\nContent-Length: 2\r\n\r\nok"
                .to_vec(),
        )
    });
    let text = tls_config(&pki, upstream.addr, 1, "")
        .replace("[[listen]]", "[tls]\nhsts = \"max-age=600\"\n[[listen]]");
    let proxy = proxy(&text);
    let config = client_config(&[&rustls::version::TLS13]);
    let seen = tls_get_path(proxy.local_addrs()[0], &config, "/");
    assert_eq!(status_of(&seen), 200);
    assert_eq!(field(&seen, "strict-transport-security"), Some("max-age=5"));
    assert_eq!(String::from_utf8_lossy(&seen).matches("max-age").count(), 1);
    proxy.shutdown();
}

#[test]
fn a_bad_hsts_value_is_refused_with_its_line() {
    let pki = TestPki::new("tls-hsts-bad");
    let upstream = Upstream::ok(b"hello");
    let text = tls_config(&pki, upstream.addr, 1, "")
        .replace("[[listen]]", "[tls]\nhsts = \"max-age=soon\"\n[[listen]]");
    let e = slipstream::Config::parse(&text, "t.toml").unwrap_err();
    assert_eq!(e.0.len(), 1, "{e}");
    assert!(
        e.0[0].message.contains("hsts starts with max-age=SECONDS"),
        "{e}"
    );
    assert_eq!(e.0[0].line, 5, "{e}");
}

#[test]
fn require_sni_refuses_clients_without_sni_and_counts_them() {
    let pki = TestPki::new("tls-require-sni");
    let upstream = Upstream::ok(b"hello");
    let text = tls_config(&pki, upstream.addr, 1, "")
        .replace("[[listen]]", "[tls]\nrequire_sni = true\n[[listen]]");
    let proxy = proxy(&text);
    let addr = proxy.local_addrs()[0];
    let config = client_config(&[&rustls::version::TLS13]);
    // With SNI (known or not) the certificates are chosen as before.
    assert_eq!(
        status_of(&tls_get(addr, "a.test", &config, "a").response),
        200
    );
    assert_eq!(
        status_of(&tls_get(addr, "other.test", &config, "a").response),
        200
    );
    // An IP address as the server name: rustls sends no SNI.
    let mut tls = tls_connect(addr, config, "127.0.0.1");
    use std::io::Write;
    let failed = tls
        .write_all(b"GET / HTTP/1.1\r\n\r\n")
        .and_then(|()| tls.flush());
    assert!(failed.is_err());
    assert!(eventually(|| proxy
        .metrics()
        .total(Counter::TlsIncompatible)
        == 1));
    assert!(upstream.seen().len() == 2);
    proxy.shutdown();
}

#[test]
fn resumption_off_makes_every_handshake_full() {
    let pki = TestPki::new("tls-no-resume");
    let upstream = Upstream::ok(b"hello");
    let text = tls_config(&pki, upstream.addr, 1, "")
        .replace("[[listen]]", "[tls]\nresumption = false\n[[listen]]");
    let proxy = proxy(&text);
    let addr = proxy.local_addrs()[0];
    for versions in [
        &[&rustls::version::TLS13][..],
        &[&rustls::version::TLS12][..],
    ] {
        let config = client_config(versions);
        for _ in 0..3 {
            let seen = tls_get(addr, "a.test", &config, "a");
            assert_eq!(status_of(&seen.response), 200);
            assert!(!seen.resumed, "{versions:?}");
        }
    }
    assert_eq!(proxy.metrics().total(Counter::TlsResumed), 0);
    assert_eq!(proxy.metrics().total(Counter::TlsHandshakes), 6);
    proxy.shutdown();
}

#[test]
fn the_server_prefers_aes_128_gcm_whatever_the_client_lists_first() {
    let pki = TestPki::new("tls-suites");
    let upstream = Upstream::ok(b"hello");
    let proxy = proxy(&tls_config(&pki, upstream.addr, 1, ""));
    let addr = proxy.local_addrs()[0];
    // A client that lists AES-256 first (as OpenSSL does).
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider.cipher_suites.sort_by_key(|s| {
        !matches!(
            s.suite(),
            rustls::CipherSuite::TLS13_AES_256_GCM_SHA384
                | rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
        )
    });
    for (version, want) in [
        (
            &rustls::version::TLS13,
            rustls::CipherSuite::TLS13_AES_128_GCM_SHA256,
        ),
        (
            &rustls::version::TLS12,
            rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        ),
    ] {
        let config = rustls::ClientConfig::builder_with_provider(provider.clone().into())
            .with_protocol_versions(&[version])
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(std::sync::Arc::new(
                slipstream::tls::client::NoVerification,
            ))
            .with_no_client_auth();
        let mut tls = tls_connect(addr, config.into(), "a.test");
        use std::io::{Read, Write};
        tls.write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut response = Vec::new();
        let _ = tls.read_to_end(&mut response);
        assert_eq!(status_of(&response), 200);
        assert_eq!(tls.conn.negotiated_cipher_suite().unwrap().suite(), want);
    }
    proxy.shutdown();
}

#[test]
fn upstream_tls_sessions_resume_on_new_connections() {
    let pki = TestPki::new("tls-upstream-resume");
    let origin = Upstream::ok(b"over tls");
    let terminator = crate::tls::https_terminator(&pki, origin.addr);
    let tls_addr = terminator.local_addrs()[0];
    // No idle connections kept: every request opens a new TLS connection to the upstream.
    let front = proxy(&crate::tls::https_group_config(
        tls_addr,
        &pki.path("ca.pem"),
        "keepalive = 0",
    ));
    for _ in 0..5 {
        let raw = exchange_until_close(
            front.local_addrs()[0],
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(status_of(&raw), 200);
    }
    let m = terminator.metrics();
    assert_eq!(m.total(Counter::TlsHandshakes), 5);
    // The first handshake is full; the others resume with the ticket the previous one got.
    assert_eq!(m.total(Counter::TlsResumed), 4);
    assert_eq!(front.metrics().total(Counter::UpstreamReused), 0);
    front.shutdown();
    terminator.shutdown();
}

#[test]
fn idle_tls_keep_alive_connections_wait_without_reading() {
    use std::io::{BufReader, Write};
    let pki = TestPki::new("tls-idle");
    let upstream = Upstream::ok(b"hello");
    let proxy = proxy(&tls_config(&pki, upstream.addr, 1, ""));
    let config = client_config(&[&rustls::version::TLS13]);
    let mut tls = tls_connect(proxy.local_addrs()[0], config, "a.test");
    for round in 0..2 {
        tls.write_all(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
            .unwrap();
        let mut reader = BufReader::new(&mut tls);
        let r = read_response(&mut reader, false).unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]));
        // Between requests the connection waits on the socket (stub_status "waiting"), holding
        // no read buffer, instead of sitting in a read as "reading".
        assert!(
            eventually(|| {
                let c = proxy.metrics().connections();
                (c.active, c.reading, c.waiting) == (1, 0, 1)
            }),
            "round {round}: {:?}",
            proxy.metrics().connections()
        );
    }
    proxy.shutdown();
}

#[test]
fn connections_end_with_close_notify() {
    use std::io::{Read, Write};
    let pki = TestPki::new("tls-close-notify");
    let upstream = Upstream::ok(b"hello");
    let proxy = proxy(&tls_config(&pki, upstream.addr, 1, ""));
    let config = client_config(&[&rustls::version::TLS13]);
    let mut tls = tls_connect(proxy.local_addrs()[0], config, "a.test");
    tls.write_all(b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut response = Vec::new();
    // rustls reports a connection closed without close_notify as UnexpectedEof (a truncation
    // the client could not tell from a short body).
    tls.read_to_end(&mut response).unwrap();
    assert!(response.ends_with(b"hello"));
    proxy.shutdown();
}

#[test]
fn http_health_checks_speak_tls_to_tls_groups() {
    let pki = TestPki::new("tls-health");
    let origin = Upstream::ok(b"over tls");
    let terminator = crate::tls::https_terminator(&pki, origin.addr);
    let tls_addr = terminator.local_addrs()[0];
    let health = "[upstreams.app.health]\npath = \"/health\"\ninterval = \"50ms\"\nrise = 1\nstart_down = true";
    let checked = |ca: &str| {
        proxy(
            &crate::tls::https_group_config(tls_addr, ca, "")
                .replace("[[sites]]", &format!("{health}\n[[sites]]")),
        )
    };
    // Trusted: the checks pass over TLS and the server comes up.
    let good = checked(&pki.path("ca.pem"));
    assert!(eventually(|| {
        let r = exchange_until_close(
            good.local_addrs()[0],
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        );
        status_of(&r) == 200
    }));
    assert!(origin.seen().iter().any(|s| s.path() == "/health"));
    let checks = good.fleet().checks.lock().unwrap().clone();
    assert!(checks.values().all(|c| c.up), "{checks:?}");
    good.shutdown();
    // Another CA: every check fails its handshake, so the server never comes up.
    let other = TestPki::new("tls-health-other");
    let bad = checked(&other.path("ca.pem"));
    assert!(eventually(|| bad
        .fleet()
        .checks
        .lock()
        .unwrap()
        .values()
        .any(|c| c.checks >= 3)));
    let checks = bad.fleet().checks.lock().unwrap().clone();
    assert!(checks.values().all(|c| !c.up), "{checks:?}");
    let r = exchange_until_close(
        bad.local_addrs()[0],
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status_of(&r), 503);
    bad.shutdown();
    terminator.shutdown();
}
