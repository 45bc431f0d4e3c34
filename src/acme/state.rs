//! The ACME state directory: per ACME directory (CA) a folder with the account's credentials
//! and, per certificate, its chain and key in one PEM file (`certs/NAME.pem`, named by the
//! certificate's first name; the chain first, then the key), and the pending HTTP-01 answers
//! (`http-01/TOKEN`) that other instances sharing the folder serve too. Files are written
//! 0600 and atomically (a temporary file, synced, renamed over the old one), so a crash never
//! leaves a key beside another chain; a file that does not read back is refused with its path
//! and never overwritten. A lock file per certificate keeps several instances sharing the
//! directory from ordering the same names at once.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::sign::CertifiedKey;

/// One CA's folder under the state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
    /// The CA's folder name: also the keys' prefix in a fleet's shared store.
    folder: String,
}

/// A certificate's lock, held while it is ordered: the state directory's lock file, and the
/// fleet's lock when there is a fleet. Released when dropped.
pub struct Lock {
    _file: File,
    release: Option<super::shared::Release>,
}

impl Drop for Lock {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            release();
        }
    }
}

/// A certificate read back from the state directory.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The chain and key, ready to serve.
    pub key: Arc<CertifiedKey>,
    /// The start of its validity, in seconds since the epoch.
    pub not_before: i64,
    /// Its expiry, in seconds since the epoch.
    pub not_after: i64,
    /// The names it covers (its DNS subject alternative names).
    pub names: Vec<String>,
    /// Its ARI identifier (RFC 9773: authority key id "." serial), when it has an AKI.
    pub ari_id: Option<String>,
}

impl StateDir {
    /// The folder for `directory` (the CA's directory URL) under `state_dir`, created 0700.
    pub fn open(state_dir: &Path, directory: &str) -> Result<StateDir, String> {
        let folder = folder_name(directory);
        let root = state_dir.join(&folder);
        let mut dirs = std::fs::DirBuilder::new();
        dirs.recursive(true).mode(0o700);
        dirs.create(root.join("certs"))
            .and_then(|()| dirs.create(root.join("http-01")))
            .map_err(|e| {
                format!(
                    "cannot create the ACME state directory {}: {e}",
                    root.display()
                )
            })?;
        Ok(StateDir { root, folder })
    }

    /// Where the account's credentials are kept.
    pub fn account_path(&self) -> PathBuf {
        self.root.join("account.json")
    }

    /// The file of the certificate whose first name is `name`: its chain, then its key.
    pub fn cert_path(&self, name: &str) -> PathBuf {
        self.root.join("certs").join(format!("{name}.pem"))
    }

    /// The folder of pending HTTP-01 answers, one file per token.
    pub fn tokens_dir(&self) -> PathBuf {
        self.root.join("http-01")
    }

    /// The stored account credentials (JSON), `None` when there is none yet; a file that
    /// cannot be read back is an error naming it.
    pub fn read_account(&self) -> Result<Option<instant_acme::AccountCredentials>, String> {
        let path = self.account_path();
        // The fleet's account is the one: every instance uses the first one created.
        super::shared::mirror(&format!("{}/account.json", self.folder), &path, |_, _| true)?;
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                format!(
                    "{}: not ACME account credentials ({e}); move it away to create a new account",
                    path.display()
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    /// Saves the account credentials.
    pub fn write_account(
        &self,
        credentials: &instant_acme::AccountCredentials,
    ) -> Result<(), String> {
        let json = serde_json::to_vec_pretty(credentials).map_err(|e| e.to_string())?;
        write_atomically(&self.account_path(), &json)?;
        super::shared::publish(&format!("{}/account.json", self.folder), &json);
        Ok(())
    }

    /// The stored certificate named `name`: `None` when there is none; an error naming the
    /// file when one does not read back (a broken chain, a key that is not its key).
    pub fn read_cert(&self, name: &str) -> Result<Option<Stored>, String> {
        let path = self.cert_path(name);
        super::shared::mirror(&self.cert_key(name), &path, later_expiry)?;
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        from_pem(&text, &text).map(Some).map_err(|e| {
            format!(
                "{}: {e}; move it away to order a new certificate",
                path.display()
            )
        })
    }

    /// Saves a certificate's chain and key, in one file.
    pub fn write_cert(&self, name: &str, chain_pem: &str, key_pem: &str) -> Result<(), String> {
        let mut both = String::with_capacity(chain_pem.len() + key_pem.len() + 1);
        both.push_str(chain_pem.trim_end());
        both.push('\n');
        both.push_str(key_pem);
        write_atomically(&self.cert_path(name), both.as_bytes())?;
        super::shared::publish(&self.cert_key(name), both.as_bytes());
        Ok(())
    }

    /// The certificate's key in a fleet's shared store.
    fn cert_key(&self, name: &str) -> String {
        format!("{}/certs/{name}.pem", self.folder)
    }

    /// The HTTP-01 answer's key in a fleet's shared store.
    pub fn token_key(&self, token: &str) -> String {
        format!("{}/http-01/{token}", self.folder)
    }

    /// Takes the lock of the certificate named `name` without waiting: the lock file, then the
    /// fleet's lock; `None` while another process or instance holds either. Released when the
    /// returned lock is dropped.
    pub fn try_lock(&self, name: &str) -> Result<Option<Lock>, String> {
        let Some(file) = self.try_lock_file(name)? else {
            return Ok(None);
        };
        let release = super::shared::lock(&format!("{}/locks/{name}", self.folder))?;
        Ok(release.map(|r| Lock {
            _file: file,
            release: Some(r),
        }))
    }

    fn try_lock_file(&self, name: &str) -> Result<Option<File>, String> {
        let path = self.root.join(format!("{name}.lock"));
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Some(file)),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }
}

/// What a served certificate says of itself.
pub fn describe(key: Arc<CertifiedKey>, leaf: &CertificateDer<'_>) -> Result<Stored, String> {
    use x509_parser::prelude::*;
    let (_, parsed) =
        parse_x509_certificate(leaf.as_ref()).map_err(|e| format!("not a certificate: {e}"))?;
    let validity = parsed.validity();
    let mut names = Vec::new();
    if let Ok(Some(san)) = parsed.subject_alternative_name() {
        for n in &san.value.general_names {
            if let GeneralName::DNSName(d) = n {
                names.push(d.to_ascii_lowercase());
            }
        }
    }
    let ari_id = instant_acme::CertificateIdentifier::try_from(leaf)
        .ok()
        .map(|id| id.to_string());
    Ok(Stored {
        key,
        not_before: validity.not_before.timestamp(),
        not_after: validity.not_after.timestamp(),
        names,
        ari_id,
    })
}

/// A chain and key in PEM, checked (the key is the leaf's) and described.
pub fn from_pem(chain_pem: &str, key_pem: &str) -> Result<Stored, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the certificate chain does not read: {e}"))?;
    let leaf = chain.first().cloned().ok_or("no certificate in it")?;
    let private = rustls::pki_types::PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| format!("the private key does not read: {e}"))?;
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    let key = CertifiedKey::from_der(chain, private, &provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => "the key is not the certificate's".to_string(),
        e => e.to_string(),
    })?;
    describe(Arc::new(key), &leaf)
}

/// Whether the certificate file `a` expires after `b`. Neither is later when one does not read
/// back: a broken file is refused with its path, never replaced.
fn later_expiry(a: &[u8], b: &[u8]) -> bool {
    let expiry = |pem: &[u8]| {
        let text = String::from_utf8_lossy(pem);
        from_pem(&text, &text).ok().map(|s| s.not_after)
    };
    match (expiry(a), expiry(b)) {
        (Some(a), Some(b)) => a > b,
        (Some(_), None) => false,
        (None, _) => false,
    }
}

/// The folder of one CA: its directory URL without the scheme, every character other than a
/// letter, digit, dot or dash made `_` (`acme-v02.api.letsencrypt.org_directory`).
pub fn folder_name(directory: &str) -> String {
    let rest = directory.split_once("://").map_or(directory, |(_, r)| r);
    let name: String = rest
        .trim_end_matches('/')
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.bytes().all(|b| b == b'.') {
        // Never `.` or `..`: the folder stays inside the state directory.
        return name.replace('.', "_");
    }
    name
}

/// Writes `bytes` to `path` through a synced temporary file renamed over it, mode 0600.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    // Unique per call: two threads may write the same file at once (the last rename wins whole).
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp{}-{n}", std::process::id()));
    let fail = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(fail)?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(fail)?;
    std::fs::rename(&tmp, path).map_err(fail)?;
    if let Some(dir) = path.parent() {
        let _ = File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_are_named_after_the_directory_url() {
        assert_eq!(
            folder_name("https://acme-v02.api.letsencrypt.org/directory"),
            "acme-v02.api.letsencrypt.org_directory"
        );
        assert_eq!(
            folder_name("https://127.0.0.1:14000/dir"),
            "127.0.0.1_14000_dir"
        );
        assert_eq!(folder_name("https://.."), "__");
    }

    #[test]
    fn files_are_private_and_a_broken_one_is_refused_not_replaced() {
        use std::os::unix::fs::PermissionsExt;
        let dir =
            std::env::temp_dir().join(format!("slipstream-acme-state-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let state = StateDir::open(&dir, "https://ca.test/dir").unwrap();
        assert!(state.read_account().unwrap().is_none());
        assert!(state.read_cert("a.test").unwrap().is_none());
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["a.test".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        state
            .write_cert("a.test", &cert.pem(), &key.serialize_pem())
            .unwrap();
        let stored = state.read_cert("a.test").unwrap().unwrap();
        assert_eq!(stored.names, ["a.test"]);
        assert!(stored.not_after > stored.not_before);
        let crt = state.cert_path("a.test");
        let mode = std::fs::metadata(&crt).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(&crt, "garbage").unwrap();
        let err = state.read_cert("a.test").unwrap_err();
        assert!(err.contains(&crt.display().to_string()), "{err}");
        assert_eq!(std::fs::read(&crt).unwrap(), b"garbage");
        std::fs::write(state.account_path(), "{").unwrap();
        assert!(state.read_account().err().unwrap().contains("account.json"));
        let first = state.try_lock("a.test").unwrap();
        assert!(first.is_some());
        // flock is per open file: a second open (as another process would) is refused.
        assert!(state.try_lock("a.test").unwrap().is_none());
        drop(first);
        assert!(state.try_lock("a.test").unwrap().is_some());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
