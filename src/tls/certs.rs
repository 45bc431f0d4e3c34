//! Loading a certificate chain and its private key from PEM files: RSA, ECDSA or Ed25519 keys,
//! chains in order, and a key that does not match the certificate refused with a clear reason.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

/// The certificate chain in `cert` (leaf first) with the private key in `key`.
pub fn load(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("{}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!("{}: no certificate in the file", cert.display()));
    }
    let private =
        PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{}: {e}", key.display()))?;
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    let certified = CertifiedKey::from_der(chain, private, &provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => format!(
            "the key in {} does not match the certificate in {}",
            key.display(),
            cert.display()
        ),
        e => format!("{} with {}: {e}", cert.display(), key.display()),
    })?;
    Ok(Arc::new(certified))
}
