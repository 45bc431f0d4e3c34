//! Loading a certificate chain and its private key from PEM files: RSA, ECDSA or Ed25519 keys,
//! chains in order, and a key that does not match the certificate refused with a clear reason.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

/// The certificate chain in `cert` (leaf first) with the private key in `key`.
pub fn load(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, String> {
    let cert_pem = std::fs::read(cert).map_err(|e| format!("{}: {e}", cert.display()))?;
    let key_pem = std::fs::read(key).map_err(|e| format!("{}: {e}", key.display()))?;
    from_pem(&cert_pem, &key_pem).map_err(|reason| match reason {
        PemError::Cert(e) => format!("{}: {e}", cert.display()),
        PemError::Key(e) => format!("{}: {e}", key.display()),
        PemError::Mismatch => format!(
            "the key in {} does not match the certificate in {}",
            key.display(),
            cert.display()
        ),
        PemError::Other(e) => format!("{} with {}: {e}", cert.display(), key.display()),
    })
}

/// Why a certificate and key were refused.
#[derive(Debug, PartialEq, Eq)]
pub enum PemError {
    /// The certificate file: unreadable PEM, or no certificate in it.
    Cert(String),
    /// The key file: unreadable PEM, or no private key in it.
    Key(String),
    /// The key is not the certificate's.
    Mismatch,
    /// Another reason (an unsupported key type).
    Other(String),
}

/// A certificate chain and private key from PEM text.
pub fn from_pem(cert: &[u8], key: &[u8]) -> Result<Arc<CertifiedKey>, PemError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<_, _>>()
        .map_err(|e| PemError::Cert(e.to_string()))?;
    if chain.is_empty() {
        return Err(PemError::Cert("no certificate in the file".into()));
    }
    let private = PrivateKeyDer::from_pem_slice(key).map_err(|e| PemError::Key(e.to_string()))?;
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    let certified = CertifiedKey::from_der(chain, private, &provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => PemError::Mismatch,
        e => PemError::Other(e.to_string()),
    })?;
    Ok(Arc::new(certified))
}
