//! Client certificates (mutual TLS) through real sockets with curl: a site that requires one,
//! a site where one is optional and a site that asks for none, on one listener; certificates
//! from another CA, expired or revoked (a CRL) are refused; the verified certificate's
//! subject, SANs, fingerprint and verification reach the upstream as `$ssl_client_*`.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use rcgen::{
    BasicConstraints, CertificateParams, CertificateRevocationListParams, CertifiedIssuer, IsCa,
    KeyIdMethod, KeyPair, KeyUsagePurpose, RevokedCertParams, SerialNumber,
};

use crate::support::*;
use crate::tls::TestPki;

/// A client CA, and client certificates written as PEM files: `good`, `expired`, `revoked`
/// (listed in `crl.pem`), and `stranger` (from another CA).
fn client_pki(dir: &Path) {
    let ca = |cn: &str| {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
    };
    let clients = ca("client CA");
    let other = ca("other CA");
    std::fs::write(dir.join("client-ca.pem"), clients.pem()).unwrap();
    let issue = |name: &str, serial: u64, expired: bool, issuer: &CertifiedIssuer<'_, KeyPair>| {
        let mut params = CertificateParams::new(vec![format!("{name}.client.test")]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "Example");
        params.serial_number = Some(SerialNumber::from(serial));
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, issuer).unwrap();
        std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
    };
    // A serial whose DER needs a sign byte (0x00A1B2), printed without it as OpenSSL does.
    issue("good", 0xA1B2, false, &clients);
    issue("expired", 1002, true, &clients);
    issue("revoked", 1003, false, &clients);
    issue("stranger", 1004, false, &other);
    let crl = CertificateRevocationListParams {
        this_update: rcgen::date_time_ymd(2025, 1, 1),
        next_update: rcgen::date_time_ymd(2035, 1, 1),
        crl_number: SerialNumber::from(1u64),
        issuing_distribution_point: None,
        revoked_certs: vec![RevokedCertParams {
            serial_number: SerialNumber::from(1003u64),
            revocation_time: rcgen::date_time_ymd(2025, 6, 1),
            reason_code: Some(rcgen::RevocationReason::KeyCompromise),
            invalidity_date: None,
        }],
        key_identifier_method: KeyIdMethod::Sha256,
    }
    .signed_by(&clients)
    .unwrap();
    std::fs::write(dir.join("crl.pem"), crl.pem().unwrap()).unwrap();
}

/// curl to `https://NAME:PORT/` with the test CA and, when given, a client certificate: the
/// body, or `None` when the TLS handshake (or anything else) failed.
fn curl(pki: &TestPki, addr: SocketAddr, name: &str, client: Option<&str>) -> Option<String> {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--max-time", "10", "--cacert", &pki.path("ca.pem")])
        .args(["--resolve", &format!("{name}:{}:127.0.0.1", addr.port())]);
    if let Some(c) = client {
        cmd.args(["--cert", &pki.path(&format!("{c}.pem"))])
            .args(["--key", &pki.path(&format!("{c}.key"))]);
    }
    let out = cmd
        .arg(format!("https://{name}:{}/", addr.port()))
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn openssl_sha1(pem: &str) -> String {
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha1", "-in", pem])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = text.trim().rsplit('=').next().unwrap();
    hex.replace(':', "").to_ascii_lowercase()
}

/// Three sites on one TLS listener: `a.test` requires a client certificate (with a CRL),
/// `*.w.test` takes one optionally, the default asks for none; each forwards the variables.
fn mtls_config(pki: &TestPki, upstream: std::net::SocketAddr) -> String {
    let forward = r#"proxy_set_headers = { "X-Client-Verify" = "$ssl_client_verify", "X-Client-DN" = "$ssl_client_s_dn", "X-Client-Issuer" = "$ssl_client_i_dn", "X-Client-SAN" = "$ssl_client_san", "X-Client-Fingerprint" = "$ssl_client_fingerprint", "X-Client-Serial" = "$ssl_client_serial" }"#;
    format!(
        r#"
[[listen]]
address = "{{listen}}"
tls = true
[upstreams.app]
servers = ["{upstream}"]
[[sites]]
hosts = ["a.test"]
cert = "{exact}"
key = "{exact_key}"
client_ca = "{ca}"
client_crl = ["{crl}"]
{forward}
routes = [{{ path = "/", upstream = "app" }}]
[[sites]]
hosts = ["*.w.test"]
cert = "{wild}"
key = "{wild_key}"
client_ca = "{ca}"
verify_client = "optional"
{forward}
routes = [{{ path = "/", upstream = "app" }}]
[[sites]]
default = true
cert = "{default}"
key = "{default_key}"
{forward}
routes = [{{ path = "/", upstream = "app" }}]
"#,
        upstream = upstream,
        exact = pki.path("exact.pem"),
        exact_key = pki.path("exact.key"),
        wild = pki.path("wild.pem"),
        wild_key = pki.path("wild.key"),
        default = pki.path("default.pem"),
        default_key = pki.path("default.key"),
        ca = pki.path("client-ca.pem"),
        crl = pki.path("crl.pem"),
    )
}

/// A connection made for a site that asks for nothing cannot carry a request for one that
/// requires a certificate (nor the other way round): 421, over HTTP/1.1 and HTTP/2.
fn misdirected_requests_are_421(pki: &TestPki, addr: SocketAddr) {
    for version in ["--http1.1", "--http2"] {
        for (sni, host) in [
            ("default.test", "a.test"),
            ("x.w.test", "a.test"),
            ("a.test", "default.test"),
        ] {
            let mut cmd = Command::new("curl");
            cmd.args([
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                version,
                "--cacert",
                &pki.path("ca.pem"),
            ])
            .args(["--resolve", &format!("{sni}:{}:127.0.0.1", addr.port())])
            .args(["-H", &format!("Host: {host}")]);
            if sni == "a.test" {
                cmd.args([
                    "--cert",
                    &pki.path("good.pem"),
                    "--key",
                    &pki.path("good.key"),
                ]);
            }
            let out = cmd
                .arg(format!("https://{sni}:{}/", addr.port()))
                .output()
                .unwrap();
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                "421",
                "{version} {sni} -> {host}: {out:?}"
            );
        }
    }
}

#[test]
fn client_certificates_required_optional_or_not_asked_per_site() {
    let upstream = Upstream::ok(b"app");
    let pki = TestPki::new("mtls-pki");
    client_pki(&pki.dir);
    let config = mtls_config(&pki, upstream.addr);
    let running = Running::config("mtls.toml", &config);
    let addr = running.addr;
    let last = || upstream.seen().last().cloned().unwrap();

    // Required: the good certificate passes and its details reach the upstream.
    assert_eq!(
        curl(&pki, addr, "a.test", Some("good")).as_deref(),
        Some("app")
    );
    let seen = last();
    assert_eq!(seen.header("x-client-verify"), Some("SUCCESS"));
    assert_eq!(seen.header("x-client-dn"), Some("O=Example,CN=good"));
    assert_eq!(seen.header("x-client-issuer"), Some("CN=client CA"));
    assert_eq!(seen.header("x-client-san"), Some("DNS:good.client.test"));
    assert_eq!(seen.header("x-client-serial"), Some("A1B2"));
    let fingerprint = openssl_sha1(&pki.path("good.pem"));
    assert_eq!(
        seen.header("x-client-fingerprint"),
        Some(fingerprint.as_str())
    );
    let before = upstream.seen().len();
    for refused in [None, Some("expired"), Some("revoked"), Some("stranger")] {
        assert_eq!(curl(&pki, addr, "a.test", refused), None, "{refused:?}");
    }
    assert_eq!(
        upstream.seen().len(),
        before,
        "nothing refused reached the upstream"
    );

    // Optional: served without a certificate (NONE), verified with one; a bad one refused.
    assert_eq!(curl(&pki, addr, "x.w.test", None).as_deref(), Some("app"));
    assert_eq!(last().header("x-client-verify"), Some("NONE"));
    assert_eq!(last().header("x-client-dn"), None);
    assert_eq!(
        curl(&pki, addr, "x.w.test", Some("good")).as_deref(),
        Some("app")
    );
    assert_eq!(last().header("x-client-verify"), Some("SUCCESS"));
    assert_eq!(curl(&pki, addr, "x.w.test", Some("stranger")), None);

    misdirected_requests_are_421(&pki, addr);
    assert_eq!(
        upstream.seen().len(),
        before + 2,
        "no misdirected request reached the upstream"
    );

    // A site that asks for none: served either way, never SUCCESS.
    assert_eq!(
        curl(&pki, addr, "default.test", None).as_deref(),
        Some("app")
    );
    assert_eq!(last().header("x-client-verify"), Some("NONE"));
    assert_eq!(
        curl(&pki, addr, "default.test", Some("good")).as_deref(),
        Some("app")
    );
    assert_eq!(last().header("x-client-verify"), Some("NONE"));
}

#[test]
fn a_client_ca_that_does_not_read_is_refused_with_its_line() {
    let pki = TestPki::new("mtls-bad-pki");
    let not_pem = pki.path("exact.key");
    let text = format!(
        "[[listen]]\naddress = \"127.0.0.1:1\"\ntls = true\n[upstreams.app]\nservers = [\"127.0.0.1:2\"]\n[[sites]]\nhosts = [\"a.test\"]\ncert = \"{}\"\nkey = \"{}\"\nclient_ca = \"{not_pem}\"\nroutes = [{{ path = \"/\", upstream = \"app\" }}]\n",
        pki.path("exact.pem"),
        pki.path("exact.key"),
    );
    let (code, err) = check_config("mtls-bad.toml", &text);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("mtls-bad.toml:10"), "{err}");
    assert!(err.contains("no CA certificate"), "{err}");
}
