//! The `[cluster]` section: the etcd endpoints a fleet of instances shares its configuration
//! through, the key prefix of the fleet, this instance's name and where it keeps the last good
//! shared configuration. The section stays in the instance's own file; `cluster/` reads the
//! shared configuration with it.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use super::{ConfigError, ConfigErrors, Validator};

/// Where the last good shared configuration is kept when `state_dir` is not given.
pub const DEFAULT_CLUSTER_STATE_DIR: &str = "/var/lib/slipstream/cluster";

/// The `[cluster]` section as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileCluster {
    etcd: Vec<Spanned<String>>,
    prefix: Spanned<String>,
    name: Option<Spanned<String>>,
    username: Option<String>,
    password: Option<String>,
    state_dir: Option<Spanned<String>>,
    ca: Option<Spanned<String>>,
    cert: Option<Spanned<String>>,
    key: Option<Spanned<String>>,
}

/// A fleet member's settings: how to reach etcd and under which keys the fleet lives.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSettings {
    /// etcd client URLs (`http://host:port`), tried in turn.
    pub endpoints: Vec<String>,
    /// The fleet's key prefix, e.g. `/slipstream/prod` (no trailing `/`).
    pub prefix: String,
    /// This instance's name in the fleet (default: the host name).
    pub name: String,
    /// etcd user and password, when etcd has authentication on.
    pub credentials: Option<(String, String)>,
    /// Where the last good shared configuration is kept, to start and serve while etcd is down.
    pub state_dir: PathBuf,
    /// TLS to etcd (`https://` endpoints), as etcdctl's `--cacert`, `--cert` and `--key`.
    pub tls: Option<EtcdTls>,
}

impl std::fmt::Debug for ClusterSettings {
    /// Everything but the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterSettings")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .field("name", &self.name)
            .field("user", &self.credentials.as_ref().map(|c| &c.0))
            .field("state_dir", &self.state_dir)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// TLS to etcd: the CA to check its certificate against (the system's roots without one) and
/// this instance's client certificate when etcd asks for one (`--client-cert-auth`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdTls {
    /// The CA's PEM.
    pub ca: Option<Vec<u8>>,
    /// The client certificate chain and key, as PEM.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

/// An instance's own file, read for its `[cluster]` section only (the rest is validated with the
/// shared configuration over it).
#[derive(Deserialize)]
struct OwnFile {
    cluster: Option<Spanned<FileCluster>>,
}

/// The `[cluster]` section of the file at `path`, validated (`None`: the file has none, it is a
/// whole configuration by itself).
pub fn read_cluster(path: &Path) -> Result<Option<ClusterSettings>, ConfigErrors> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            file: file.clone(),
            line: 0,
            column: 0,
            message: format!("cannot read the config: {e}"),
            source: String::new(),
        }])
    })?;
    let mut v = Validator::new(&text, &file, super::resolve_system);
    let own: OwnFile = match toml::from_str(&text) {
        Ok(o) => o,
        Err(e) => {
            v.error(e.span().map_or(0, |s| s.start), e.message().trim());
            return Err(ConfigErrors(v.errors));
        }
    };
    let settings = v.build_cluster(own.cluster.as_ref());
    if v.errors.is_empty() {
        Ok(settings)
    } else {
        Err(ConfigErrors(v.errors))
    }
}

impl Validator<'_> {
    /// The cluster settings, when the file has a `[cluster]` section.
    pub(super) fn build_cluster(
        &mut self,
        section: Option<&Spanned<FileCluster>>,
    ) -> Option<ClusterSettings> {
        let section = section?;
        let at = section.span().start;
        let c = section.get_ref();
        if c.etcd.is_empty() {
            self.error(
                at,
                "etcd lists the etcd client URLs, e.g. [\"http://127.0.0.1:2379\"]",
            );
        }
        let mut endpoints = Vec::new();
        for e in &c.etcd {
            let url = e.get_ref().trim_end_matches('/');
            let rest = url
                .strip_prefix("http://")
                .or_else(|| url.strip_prefix("https://"));
            match rest {
                Some(rest) if !rest.is_empty() && !rest.contains('/') => {
                    endpoints.push(url.to_string());
                }
                _ => self.error(
                    e.span().start,
                    "an etcd endpoint is http://HOST:PORT or https://HOST:PORT",
                ),
            }
        }
        let prefix = c.prefix.get_ref().trim_end_matches('/').to_string();
        if !prefix.starts_with('/') || prefix.len() < 2 {
            self.error(
                c.prefix.span().start,
                "prefix is a key path such as \"/slipstream/prod\"",
            );
        }
        let name = match &c.name {
            Some(n) if valid_name(n.get_ref()) => n.get_ref().clone(),
            Some(n) => {
                self.error(n.span().start, "name is letters, digits, '-', '_' and '.'");
                String::new()
            }
            None => host_name(),
        };
        let credentials = match (&c.username, &c.password) {
            (Some(u), Some(p)) => Some((u.clone(), p.clone())),
            (None, None) => None,
            _ => {
                self.error(at, "username and password go together");
                None
            }
        };
        let state_dir = c.state_dir.as_ref().map_or_else(
            || PathBuf::from(DEFAULT_CLUSTER_STATE_DIR),
            |d| self.relative(d.get_ref()),
        );
        let tls = self.etcd_tls(c, &endpoints);
        Some(ClusterSettings {
            endpoints,
            prefix,
            name,
            credentials,
            state_dir,
            tls,
        })
    }
}

impl Validator<'_> {
    /// `ca`, `cert` and `key`, read and checked now (a file that does not read refuses the
    /// config, not the first call to etcd).
    fn etcd_tls(&mut self, c: &FileCluster, endpoints: &[String]) -> Option<EtcdTls> {
        let https = endpoints.iter().any(|e| e.starts_with("https://"));
        let mut pem = |v: &Option<Spanned<String>>, marker: &str| {
            self.read_pem_file(v.as_ref()?, marker)
                .map(|(_, bytes)| bytes)
        };
        let ca = pem(&c.ca, "-----BEGIN CERTIFICATE-----");
        let cert = pem(&c.cert, "-----BEGIN CERTIFICATE-----");
        let key = pem(&c.key, "PRIVATE KEY-----");
        if let (Some(k), Some(at)) = (&key, &c.key) {
            use rustls::pki_types::pem::PemObject;
            if rustls::pki_types::PrivateKeyDer::from_pem_slice(k).is_err() {
                self.error(
                    at.span().start,
                    "the key does not read as a PEM private key",
                );
            }
        }
        let given = c.ca.as_ref().or(c.cert.as_ref()).or(c.key.as_ref());
        if let Some(at) = given.filter(|_| !https) {
            self.error(
                at.span().start,
                "ca, cert and key are for https:// etcd endpoints",
            );
        }
        if c.cert.is_some() != c.key.is_some() {
            let at = c
                .cert
                .as_ref()
                .or(c.key.as_ref())
                .map_or(0, |v| v.span().start);
            self.error(at, "cert and key go together");
        }
        https.then_some(EtcdTls {
            ca,
            identity: cert.zip(key),
        })
    }
}

/// An instance name fit for a key and a metric label.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// The host's name, the default instance name.
fn host_name() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let name = name.trim();
    if valid_name(name) {
        name.to_string()
    } else {
        "slipstream".to_string()
    }
}
