//! TLS termination through real sockets with a rustls client and curl: SNI (exact, wildcard,
//! default), TLS 1.2 and 1.3, ALPN, resumption across connections and workers, plain HTTP to a
//! TLS port, stalled and garbage handshakes, refused certificate files.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection};
use slipstream::observe::metrics::Counter;
use slipstream::tls::client::NoVerification;

use crate::support::*;

/// A test CA and certificates it signed, written as PEM files in a temp directory.
pub(crate) struct TestPki {
    pub(crate) dir: PathBuf,
    pub(crate) ca_pem: String,
}

impl TestPki {
    pub(crate) fn new(name: &str) -> TestPki {
        let dir = temp_path(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "slipstream test CA");
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let ca_pem = ca.pem();
        std::fs::write(dir.join("ca.pem"), &ca_pem).unwrap();
        // Leaves are signed now and kept as files: `leaf` reads them back by name.
        for (file, names) in [
            ("exact", vec!["a.test".to_string()]),
            ("wild", vec!["*.w.test".to_string()]),
            ("default", vec!["default.test".to_string()]),
            ("localhost", vec!["localhost".to_string()]),
        ] {
            let key = KeyPair::generate().unwrap();
            let mut params = CertificateParams::new(names.clone()).unwrap();
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, names[0].as_str());
            let cert = params.signed_by(&key, &ca).unwrap();
            std::fs::write(dir.join(format!("{file}.pem")), cert.pem()).unwrap();
            std::fs::write(dir.join(format!("{file}.key")), key.serialize_pem()).unwrap();
        }
        TestPki { dir, ca_pem }
    }

    pub(crate) fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }

    /// The DER of a leaf written by `new`.
    fn der(&self, name: &str) -> CertificateDer<'static> {
        use rustls::pki_types::pem::PemObject;
        CertificateDer::from_pem_file(self.dir.join(format!("{name}.pem"))).unwrap()
    }
}

pub(crate) fn client_config(
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<ClientConfig> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut c = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(NoVerification))
        .with_no_client_auth();
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(c)
}

/// [`client_config`] offering `h2` first, as browsers do.
pub(crate) fn h2_client_config(
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<ClientConfig> {
    let mut c = (*client_config(versions)).clone();
    c.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(c)
}

/// What one TLS request saw.
pub(crate) struct Seen {
    pub(crate) cert: CertificateDer<'static>,
    pub(crate) version: rustls::ProtocolVersion,
    pub(crate) alpn: Option<Vec<u8>>,
    pub(crate) resumed: bool,
    pub(crate) response: Vec<u8>,
}

/// One request over a new TLS connection, with `name` as SNI (an IP: no SNI).
pub(crate) fn tls_get(
    addr: SocketAddr,
    name: &str,
    config: &Arc<ClientConfig>,
    host: &str,
) -> Seen {
    let server_name = ServerName::try_from(name.to_string()).unwrap();
    let conn = ClientConnection::new(config.clone(), server_name).unwrap();
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    write!(
        tls,
        "GET /tls HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = Vec::new();
    let _ = tls.read_to_end(&mut response);
    let c = &tls.conn;
    Seen {
        cert: c.peer_certificates().unwrap()[0].clone().into_owned(),
        version: c.protocol_version().unwrap(),
        alpn: c.alpn_protocol().map(<[u8]>::to_vec),
        resumed: c.handshake_kind() == Some(rustls::HandshakeKind::Resumed),
        response,
    }
}

pub(crate) fn tls_config(
    pki: &TestPki,
    upstream: SocketAddr,
    workers: usize,
    extra: &str,
) -> String {
    format!(
        r#"
workers = {workers}
{extra}
[[listen]]
address = "127.0.0.1:0"
tls = true
[upstreams.app]
servers = ["{upstream}"]
[[sites]]
hosts = ["a.test"]
cert = "{exact}"
key = "{exact_key}"
routes = [{{ path = "/", upstream = "app" }}]
[[sites]]
hosts = ["*.w.test"]
cert = "{wild}"
key = "{wild_key}"
routes = [{{ path = "/", upstream = "app" }}]
[[sites]]
default = true
cert = "{default}"
key = "{default_key}"
routes = [{{ path = "/", upstream = "app" }}]
"#,
        exact = pki.path("exact.pem"),
        exact_key = pki.path("exact.key"),
        wild = pki.path("wild.pem"),
        wild_key = pki.path("wild.key"),
        default = pki.path("default.pem"),
        default_key = pki.path("default.key"),
    )
}

#[test]
fn sni_picks_exact_wildcard_and_default_certificates() {
    let pki = TestPki::new("tls-sni");
    let upstream = Upstream::ok(b"hello");
    let proxy = proxy(&tls_config(&pki, upstream.addr, 1, ""));
    let addr = proxy.local_addrs()[0];
    let config = client_config(&[&rustls::version::TLS13]);
    for (sni, want) in [
        ("a.test", "exact"),
        ("x.w.test", "wild"),
        ("unknown.test", "default"),
        ("127.0.0.1", "default"),
    ] {
        let seen = tls_get(addr, sni, &config, "a.test");
        assert_eq!(seen.cert, pki.der(want), "{sni}");
        assert_eq!(status_of(&seen.response), 200, "{sni}");
        assert!(seen.response.ends_with(b"hello"));
    }
    // The upstream learns the request came over TLS.
    let forwarded = upstream.seen();
    assert_eq!(forwarded[0].header("x-forwarded-proto"), Some("https"));
    proxy.shutdown();
}

#[test]
fn tls_12_and_13_alpn_and_the_version_in_the_log() {
    let pki = TestPki::new("tls-versions");
    let upstream = Upstream::ok(b"hello");
    let log = temp_path("tls-versions.log");
    let _ = std::fs::remove_file(&log);
    let extra = format!(
        "access_log = {:?}\naccess_log_format = \"$ssl_protocol $status\"",
        log.display().to_string()
    );
    let proxy = proxy(&tls_config(&pki, upstream.addr, 1, &extra));
    let addr = proxy.local_addrs()[0];
    let v12 = tls_get(
        addr,
        "a.test",
        &client_config(&[&rustls::version::TLS12]),
        "a",
    );
    assert_eq!(v12.version, rustls::ProtocolVersion::TLSv1_2);
    let v13 = tls_get(
        addr,
        "a.test",
        &client_config(&[&rustls::version::TLS13]),
        "a",
    );
    assert_eq!(v13.version, rustls::ProtocolVersion::TLSv1_3);
    assert_eq!(v13.alpn.as_deref(), Some(&b"http/1.1"[..]));
    proxy.shutdown();
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "TLSv1.2 200\nTLSv1.3 200\n"
    );
}

#[test]
fn tls13_only_refuses_tls12() {
    let pki = TestPki::new("tls13-only");
    let upstream = Upstream::ok(b"hello");
    let text = tls_config(&pki, upstream.addr, 1, "")
        .replace("[[listen]]", "[tls]\nmin_version = \"1.3\"\n[[listen]]");
    let proxy = proxy(&text);
    let addr = proxy.local_addrs()[0];
    let config = client_config(&[&rustls::version::TLS12]);
    let conn = ClientConnection::new(config, ServerName::try_from("a.test").unwrap()).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, TcpStream::connect(addr).unwrap());
    assert!(tls
        .write_all(b"GET / HTTP/1.1\r\n\r\n")
        .and_then(|()| tls.flush())
        .is_err());
    assert!(eventually(|| proxy
        .metrics()
        .total(Counter::TlsIncompatible)
        == 1));
    proxy.shutdown();
}

#[test]
fn sessions_resume_across_connections_and_workers() {
    let pki = TestPki::new("tls-resume");
    let upstream = Upstream::ok(b"hello");
    let proxy = proxy(&tls_config(&pki, upstream.addr, 2, ""));
    let addr = proxy.local_addrs()[0];
    for versions in [
        &[&rustls::version::TLS13][..],
        &[&rustls::version::TLS12][..],
    ] {
        // One client config: it keeps the tickets it is given.
        let config = client_config(versions);
        let first = tls_get(addr, "a.test", &config, "a");
        assert!(!first.resumed);
        // Twenty new connections spread over both workers (SO_REUSEPORT hashes the ports).
        for _ in 0..20 {
            let again = tls_get(addr, "a.test", &config, "a");
            assert!(again.resumed, "{versions:?}");
            assert_eq!(status_of(&again.response), 200);
        }
    }
    assert_eq!(proxy.metrics().total(Counter::TlsResumed), 40);
    proxy.shutdown();
}

#[test]
fn plain_http_stalls_and_garbage_are_closed_and_counted() {
    let pki = TestPki::new("tls-bad-input");
    let upstream = Upstream::ok(b"hello");
    let text = tls_config(&pki, upstream.addr, 1, "").replace(
        "[[listen]]",
        "[tls]\nhandshake_timeout = \"500ms\"\n[[listen]]",
    );
    let proxy = proxy(&text);
    let addr = proxy.local_addrs()[0];
    let plain = exchange_until_close(addr, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(status_of(&plain), 400);
    assert!(String::from_utf8_lossy(&plain).contains("HTTPS"));
    // Silent, and a ClientHello cut short: both closed after the timeout.
    for bytes in [&b""[..], &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00][..]] {
        let mut s = connect(addr);
        s.write_all(bytes).unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(s.read(&mut buf).unwrap(), 0);
    }
    // A record that is no ClientHello.
    let garbage = exchange_until_close(addr, &[0x16, 0x03, 0x01, 0x00, 0x05, 9, 9, 9, 9, 9]);
    assert!(!garbage.starts_with(b"HTTP"));
    let m = proxy.metrics();
    assert!(eventually(|| m.total(Counter::TlsBadHello) == 1));
    assert_eq!(m.total(Counter::TlsPlainHttp), 1);
    assert_eq!(m.total(Counter::TlsHandshakeTimeouts), 2);
    assert_eq!(m.total(Counter::TlsHandshakes), 0);
    // It still serves real clients.
    let ok = tls_get(
        addr,
        "a.test",
        &client_config(&[&rustls::version::TLS13]),
        "a",
    );
    assert_eq!(status_of(&ok.response), 200);
    proxy.shutdown();
}

#[test]
fn broken_or_mismatched_certificates_are_refused_with_their_line() {
    let pki = TestPki::new("tls-refused");
    let upstream = "127.0.0.1:1".parse().unwrap();
    let good = tls_config(&pki, upstream, 1, "");
    // The key of another certificate.
    let mismatched = good.replacen(&pki.path("exact.key"), &pki.path("wild.key"), 1);
    let e = slipstream::Config::parse(&mismatched, "t.toml").unwrap_err();
    assert_eq!(e.0.len(), 1, "{e}");
    assert!(e.0[0].message.contains("does not match"), "{e}");
    assert_eq!(e.0[0].line, 11, "{e}");
    std::fs::write(
        pki.dir.join("broken.pem"),
        "-----BEGIN CERTIFICATE-----\nnot base64\n",
    )
    .unwrap();
    let broken = good.replacen(&pki.path("exact.pem"), &pki.path("broken.pem"), 1);
    assert!(slipstream::Config::parse(&broken, "t.toml").is_err());
    let no_cert = good.replace(&format!("cert = \"{}\"", pki.path("default.pem")), "");
    let e = slipstream::Config::parse(&no_cert, "t.toml").unwrap_err();
    assert!(e.to_string().contains("needs cert too"), "{e}");
}

#[test]
fn curl_reaches_the_proxy_with_the_test_ca() {
    let pki = TestPki::new("tls-curl");
    let upstream = Upstream::ok(b"hello");
    let proxy = proxy(&tls_config(&pki, upstream.addr, 1, ""));
    let port = proxy.local_addrs()[0].port();
    let out = std::process::Command::new("curl")
        .args(["-sS", "--cacert", &pki.path("ca.pem"), "--resolve"])
        .arg(format!("a.test:{port}:127.0.0.1"))
        .arg(format!("https://a.test:{port}/"))
        .output()
        .unwrap();
    assert_eq!(
        out.stdout,
        b"hello",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!pki.ca_pem.is_empty());
    proxy.shutdown();
}

/// Points `link` at `target`, replacing it atomically (as certbot and Kubernetes do).
fn swap_symlink(target: &str, link: &std::path::Path) {
    let tmp = link.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp).unwrap();
    std::fs::rename(&tmp, link).unwrap();
}

#[test]
fn certificates_rotate_on_file_change_and_sighup_and_bad_files_are_refused() {
    let pki = TestPki::new("tls-rotate");
    let upstream = Upstream::ok(b"hello");
    let (cert, key) = (pki.dir.join("live.pem"), pki.dir.join("live.key"));
    swap_symlink(&pki.path("exact.pem"), &cert);
    swap_symlink(&pki.path("exact.key"), &key);
    let up = format!("127.0.0.1:{}", upstream.addr.port());
    let running = Running::proxy(&[
        "--upstream",
        &up,
        "--workers",
        "2",
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    // A new client each time: a resumed session shows the certificate of its first handshake.
    let served = || {
        let fresh = client_config(&[&rustls::version::TLS13]);
        tls_get(running.addr, "a.test", &fresh, "a")
    };
    let returning = client_config(&[&rustls::version::TLS13]);
    assert!(!tls_get(running.addr, "a.test", &returning, "a").resumed);
    assert_eq!(served().cert, pki.der("exact"));
    // The files change under the running proxy: it serves the new pair without a signal.
    swap_symlink(&pki.path("wild.pem"), &key.with_file_name("live.pem"));
    swap_symlink(&pki.path("wild.key"), &key);
    assert!(eventually(|| served().cert == pki.der("wild")));
    // Sessions made before the rotation still resume.
    assert!(tls_get(running.addr, "a.test", &returning, "a").resumed);
    // A mismatched pair is refused; the old certificate keeps serving.
    swap_symlink(&pki.path("default.pem"), &cert);
    assert!(eventually(|| running.logged("refused")));
    assert_eq!(served().cert, pki.der("wild"));
    // Fixed, and applied by SIGHUP (the watcher may be first: either way it is served).
    swap_symlink(&pki.path("default.key"), &key);
    running.signal("-HUP");
    assert!(eventually(|| served().cert == pki.der("default")));
}

#[test]
fn plain_http_listener_redirects_to_https() {
    let pki = TestPki::new("tls-redirect");
    let upstream = Upstream::ok(b"hello");
    let plain: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let up = upstream.addr.to_string();
    let running = Running::proxy(&[
        "--upstream",
        &up,
        "--tls-cert",
        &pki.path("exact.pem"),
        "--tls-key",
        &pki.path("exact.key"),
        "--redirect-http",
        &plain.to_string(),
    ]);
    assert!(eventually(|| TcpStream::connect(plain).is_ok()));
    let raw = exchange_until_close(plain, b"GET /a/b?c=d HTTP/1.1\r\nHost: a.test:8080\r\n\r\n");
    let text = String::from_utf8_lossy(&raw);
    assert_eq!(status_of(&raw), 308, "{text}");
    let port = running.addr.port();
    assert!(
        text.contains(&format!("Location: https://a.test:{port}/a/b?c=d\r\n")),
        "{text}"
    );
    let seen = tls_get(
        running.addr,
        "a.test",
        &client_config(&[&rustls::version::TLS13]),
        "a",
    );
    assert_eq!(status_of(&seen.response), 200);
}

/// A TLS-terminating slipstream in front of `origin`, serving `localhost`'s certificate: the
/// https upstream of the upstream-TLS tests.
pub(crate) fn https_terminator(pki: &TestPki, origin: SocketAddr) -> slipstream::server::Server {
    proxy(
        &tls_config(pki, origin, 1, "")
            .replace("hosts = [\"a.test\"]", "hosts = [\"localhost\"]")
            .replace("exact.", "localhost."),
    )
}

/// A group sending to `upstream` over TLS, trusting `ca`, with `extra` keys.
pub(crate) fn https_group_config(upstream: SocketAddr, ca: &str, extra: &str) -> String {
    format!(
        r#"
workers = 1
[[listen]]
address = "127.0.0.1:0"
[upstreams.app]
servers = ["https://{upstream}"]
tls_ca = "{ca}"
tls_server_name = "localhost"
retries = 0
{extra}
[[sites]]
default = true
routes = [{{ path = "/", upstream = "app" }}]
"#
    )
}

#[test]
fn https_upstreams_are_verified_pooled_and_refused_with_a_wrong_ca() {
    let pki = TestPki::new("tls-upstream");
    let origin = Upstream::ok(b"over tls");
    let terminator = https_terminator(&pki, origin.addr);
    let tls_addr = terminator.local_addrs()[0];
    let direct = tls_get(
        tls_addr,
        "localhost",
        &client_config(&[&rustls::version::TLS13]),
        "a",
    );
    assert_eq!(status_of(&direct.response), 200);
    assert_eq!(direct.cert, pki.der("localhost"));
    let front = proxy(&https_group_config(tls_addr, &pki.path("ca.pem"), ""));
    let mut client = connect(front.local_addrs()[0]);
    let mut reader = std::io::BufReader::new(client.try_clone().unwrap());
    for _ in 0..5 {
        client
            .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        let r = read_response(&mut reader, false).unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"over tls"[..]));
    }
    // One handshake from the front (and the direct one above): its connection was pooled.
    assert_eq!(terminator.metrics().total(Counter::TlsHandshakes), 2);
    assert_eq!(front.metrics().total(Counter::UpstreamReused), 4);
    front.shutdown();
    // Another CA: the server's certificate is not trusted.
    let other = TestPki::new("tls-upstream-other");
    let wrong = proxy(&https_group_config(tls_addr, &other.path("ca.pem"), ""));
    let raw = exchange_until_close(
        wrong.local_addrs()[0],
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status_of(&raw), 502);
    assert!(eventually(|| terminator
        .metrics()
        .total(Counter::TlsAlertReceived)
        == 1));
    // Unless verification is turned off, said explicitly.
    let unverified = proxy(&https_group_config(
        tls_addr,
        &other.path("ca.pem"),
        "tls_verify = false",
    ));
    let raw = exchange_until_close(
        unverified.local_addrs()[0],
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status_of(&raw), 200);
}

#[test]
fn mtls_to_an_upstream_that_requires_a_client_certificate() {
    let pki = TestPki::new("tls-mtls");
    let port = free_port();
    let mut server = std::process::Command::new("openssl")
        .args(["s_server", "-quiet", "-www", "-Verify", "1", "-accept"])
        .arg(port.to_string())
        .args([
            "-cert",
            &pki.path("localhost.pem"),
            "-key",
            &pki.path("localhost.key"),
        ])
        .args(["-CAfile", &pki.path("ca.pem")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    assert!(eventually(|| TcpStream::connect(addr).is_ok()));
    let keys = format!(
        "tls_client_cert = \"{}\"\ntls_client_key = \"{}\"",
        pki.path("exact.pem"),
        pki.path("exact.key")
    );
    let with_cert = proxy(&https_group_config(addr, &pki.path("ca.pem"), &keys));
    let raw = exchange_until_close(
        with_cert.local_addrs()[0],
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status_of(&raw), 200, "{}", String::from_utf8_lossy(&raw));
    let without = proxy(&https_group_config(addr, &pki.path("ca.pem"), ""));
    let raw = exchange_until_close(
        without.local_addrs()[0],
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status_of(&raw), 502);
    let _ = server.kill();
    let _ = server.wait();
}
