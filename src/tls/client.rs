//! TLS to upstream servers: the rustls client config of a group (verified against the system
//! roots or a given CA file, or not at all only when `tls_verify = false` says so; an optional
//! client certificate for mTLS; sessions resumed), and the server name each address is greeted
//! with (SNI).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;

use crate::net::Address;

/// A group's TLS client settings.
#[derive(Debug)]
pub struct UpstreamTls {
    config: Arc<ClientConfig>,
    /// The name each known address is greeted with.
    names: HashMap<Address, ServerName<'static>>,
    /// For addresses found later (DNS): the group's name.
    default_name: ServerName<'static>,
}

/// What a group's keys ask for.
#[derive(Debug, Default)]
pub struct ClientSettings<'a> {
    /// PEM file of the CAs to trust instead of the system's.
    pub ca: Option<&'a Path>,
    /// Verify the server's certificate (turned off only explicitly).
    pub verify: bool,
    /// Client certificate and key (PEM) for mTLS.
    pub client_cert: Option<(&'a Path, &'a Path)>,
    /// Offer `h2` instead of `http/1.1` by ALPN (a group with `protocol = "h2"`).
    pub alpn_h2: bool,
}

impl UpstreamTls {
    /// Builds the client config; `names` maps each address to the host it was written as
    /// (`server_name` overrides them all).
    pub fn build(
        settings: &ClientSettings<'_>,
        names: &[(Address, String)],
        server_name: Option<&str>,
    ) -> Result<UpstreamTls, String> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let builder = if settings.verify {
            builder.with_root_certificates(roots(settings.ca)?)
        } else {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoVerification))
        };
        let mut config = match settings.client_cert {
            Some((cert, key)) => {
                let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                    .and_then(Iterator::collect)
                    .map_err(|e| format!("{}: {e}", cert.display()))?;
                let key = rustls::pki_types::PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| format!("{}: {e}", key.display()))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("client certificate: {e}"))?
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = if settings.alpn_h2 {
            vec![b"h2".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        let name = |host: &str| -> Result<ServerName<'static>, String> {
            ServerName::try_from(host.to_string())
                .map_err(|_| format!("{host:?} is no server name"))
        };
        let mut map = HashMap::new();
        for (addr, host) in names {
            map.insert(addr.clone(), name(server_name.unwrap_or(host))?);
        }
        let first = names.first().map_or("localhost", |(_, h)| h.as_str());
        Ok(UpstreamTls {
            config: Arc::new(config),
            names: map,
            default_name: name(server_name.unwrap_or(first))?,
        })
    }

    /// Runs the handshake on a connected socket.
    pub async fn connect(
        &self,
        addr: &Address,
        tcp: TcpStream,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let name = self.names.get(addr).unwrap_or(&self.default_name).clone();
        tokio_rustls::TlsConnector::from(self.config.clone())
            .connect(name, tcp)
            .await
    }
}

/// The CAs in `ca`, or the system's.
fn roots(ca: Option<&Path>) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match ca {
        Some(path) => {
            for cert in CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("{}: {e}", path.display()))?
            {
                let cert = cert.map_err(|e| format!("{}: {e}", path.display()))?;
                store
                    .add(cert)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
            if store.is_empty() {
                return Err(format!("{}: no certificate in the file", path.display()));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(
                    "no system CA certificates found (install ca-certificates, or set tls_ca)"
                        .into(),
                );
            }
        }
    }
    Ok(store)
}

/// `tls_verify = false`: any certificate is accepted (the handshake signatures are still
/// checked). Public for test clients that compare the certificate they get instead.
#[derive(Debug)]
pub struct NoVerification;

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &algorithms())
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &algorithms())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        algorithms().supported_schemes()
    }
}

/// The provider's signature algorithms: the handshake's own signature is still checked.
fn algorithms() -> rustls::crypto::WebPkiSupportedAlgorithms {
    rustls::crypto::aws_lc_rs::default_provider().signature_verification_algorithms
}
