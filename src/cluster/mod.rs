//! A fleet on etcd (`[cluster]`): many instances serving one shared configuration. The
//! instance's own file holds `[cluster]` and its own settings; the shared TOML lives under
//! `PREFIX/config`. Each top-level key of the own file replaces the shared one (its `[[listen]]`,
//! `admin`, `pid_file`, logs), and the result is validated by the same code as a file. Off the
//! workers: `agent.rs` watches the prefix and registers the instance under a lease,
//! `acme_store.rs` keeps the fleet's ACME state and order locks in etcd, `limits.rs` shares
//! rate limit counts, `etcd.rs`
//! speaks etcd's JSON gateway, `commands.rs` is `slipstream config push` and `slipstream fleet`.
//! A validated configuration reaches the run loop, which swaps it in as a reload does; the last
//! one served is kept on disk, so an instance starts and serves while etcd is down.

mod acme_store;
mod agent;
pub mod commands;
pub mod etcd;
pub mod limits;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::config::cluster::ClusterSettings;
use crate::config::Config;
use crate::observe::cluster as standing;

/// The key of the shared configuration under a fleet's prefix.
pub fn config_key(settings: &ClusterSettings) -> String {
    format!("{}/config", settings.prefix)
}

/// The key an instance registers itself under.
pub fn instance_key(settings: &ClusterSettings, name: &str) -> String {
    format!("{}/instances/{name}", settings.prefix)
}

/// The key an instance writes the errors of a refused shared configuration under.
pub fn errors_key(settings: &ClusterSettings, name: &str) -> String {
    format!("{}/errors/{name}", settings.prefix)
}

/// A new revision of the shared configuration, for the run loop to validate (over the own file,
/// on its thread, where the running cache zones are kept) and swap in.
pub struct Update {
    /// The shared text.
    text: String,
    /// Its etcd revision.
    revision: i64,
}

/// What the run loop and the cluster threads share: the shared text served and its revision,
/// and the last refusal (reported to etcd by the registration thread).
#[derive(Default)]
struct Served {
    text: String,
    revision: i64,
    generation: u64,
    refusal: Option<(i64, String)>,
    /// The server runs (the kept copy is written only from then on).
    started: bool,
    /// The last revision refused, tried again first on SIGHUP (the own file may have been
    /// what was wrong).
    pending: Option<(String, i64)>,
    /// What a SIGHUP's reload is trying, until it is known to have taken effect.
    trying: Option<(String, i64)>,
    /// The registration's lease (0: none yet), revoked when the instance leaves.
    lease: i64,
    /// The instance is stopping: the registrar writes nothing more.
    leaving: bool,
}

impl Served {
    /// `text` (revision `revision`) is now served: any refusal before it is over.
    fn commit(&mut self, text: String, revision: i64) {
        tracing::info!("cluster: serving the shared configuration of revision {revision}");
        standing::served(revision);
        self.text = text;
        self.revision = revision;
        self.refusal = None;
        self.pending = None;
    }
}

/// The run loop's side of a fleet member: the updates to swap in, and where it reports how
/// each went.
pub struct Member {
    /// New revisions of the shared configuration, in order.
    pub updates: tokio::sync::mpsc::UnboundedReceiver<Update>,
    /// Purges done by other instances (their admin listener's queries), to run here.
    pub purges: tokio::sync::mpsc::UnboundedReceiver<String>,
    /// What joining found worth a warning, for the error log once it is open.
    pub notes: Vec<String>,
    served: Arc<Mutex<Served>>,
    settings: ClusterSettings,
}

impl Member {
    /// The run loop swapped `update` in (`Ok`, as generation `generation`) or could not.
    pub fn outcome(&self, update: &Update, result: &Result<(), String>, generation: u64) {
        let mut served = lock(&self.served);
        match result {
            Ok(()) => {
                served.generation = generation;
                served.commit(update.text.clone(), update.revision);
            }
            Err(e) => {
                served.refusal = Some((update.revision, e.clone()));
                served.pending = Some((update.text.clone(), update.revision));
                standing::refused(e);
                tracing::error!(
                    "cluster: revision {} refused, the running config stays:\n{e}",
                    update.revision
                );
            }
        }
    }

    /// The configuration `update` makes over the own file as it is now, validated.
    pub fn prepare(&self, update: &Update, path: &Path) -> Result<Config, String> {
        let local = read_file(path)?;
        effective(&update.text, update.revision, &local, path, &self.settings)
    }

    /// SIGHUP: the own file read again over the last revision refused, if it now validates,
    /// else over the shared configuration served.
    pub fn reload_local(&self, path: &Path) -> Result<Config, String> {
        let local = read_file(path)?;
        let mut served = lock(&self.served);
        if let Some((text, revision)) = served.pending.clone() {
            if let Ok(config) = effective(&text, revision, &local, path, &self.settings) {
                served.trying = Some((text, revision));
                return Ok(config);
            }
        }
        served.trying = None;
        effective(&served.text, served.revision, &local, path, &self.settings)
    }

    /// A reload of the own file took effect as `generation`.
    pub fn reloaded(&self, generation: u64) {
        let mut served = lock(&self.served);
        served.generation = generation;
        if let Some((text, revision)) = served.trying.take() {
            served.commit(text, revision);
        }
    }

    /// The instance stops: its record leaves the fleet list now, not when its lease runs out.
    pub fn leave(&self) {
        let lease = {
            let mut served = lock(&self.served);
            served.leaving = true;
            served.lease
        };
        if lease != 0 {
            let _ = etcd::Etcd::new(&self.settings).revoke(lease);
        }
    }

    /// The configuration now served has these rate limit zones (their counts are shared).
    pub fn serving(&self, zones: crate::rules::zones::Zones) {
        limits::serve(zones);
    }

    /// The server runs: from now on the configuration served is kept on disk.
    pub fn started(&self) {
        lock(&self.served).started = true;
    }
}

/// The configuration a fleet member starts with: etcd's shared one over the own file, else the
/// last one served (kept on disk); with neither, it does not start. Starts the
/// cluster threads, which watch from the revision read.
pub fn join(path: &Path, settings: ClusterSettings) -> Result<(Config, Member), String> {
    let local_text = read_file(path)?;
    standing::activate();
    crate::acme::shared::share_with(acme_store::store(settings.clone()));
    let mut etcd = etcd::Etcd::new(&settings);
    let key = config_key(&settings);
    let mut notes = Vec::new();
    let read = etcd.get(&key);
    let secret = limits::secret(&mut etcd, &settings, read.is_ok(), &mut notes);
    crate::rules::limit::fleet::share_seeds(secret);
    let (text, revision, read_at) = match read {
        Ok((Some(kv), at)) => {
            standing::set_connected(true);
            (
                String::from_utf8_lossy(&kv.value).into_owned(),
                kv.mod_revision,
                at,
            )
        }
        Ok((None, at)) => {
            standing::set_connected(true);
            let (text, revision) = kept(&settings).ok_or_else(|| {
                format!(
                    "no shared configuration under {key} yet: push one with `slipstream config push -c {} FILE`",
                    path.display()
                )
            })?;
            (text, revision, at)
        }
        Err(e) => {
            standing::set_connected(false);
            let (text, revision) = kept(&settings).ok_or_else(|| {
                format!(
                    "etcd is unreachable ({e}) and no shared configuration was kept in {}",
                    settings.state_dir.display()
                )
            })?;
            notes.push(format!("cluster: etcd is unreachable ({e}): serving the kept revision {revision} until it answers"));
            (text, revision, revision)
        }
    };
    let config = match effective(&text, revision, &local_text, path, &settings) {
        Ok(c) => c,
        Err(e) => {
            // etcd's is bad: the kept one, if any, serves while the refusal is reported.
            let (kept_text, kept_rev) = kept(&settings).ok_or_else(|| e.clone())?;
            notes.push(format!(
                "cluster: revision {revision} refused, serving the kept revision {kept_rev}:\n{e}"
            ));
            standing::refused(&e);
            let config = effective(&kept_text, kept_rev, &local_text, path, &settings)?;
            standing::served(kept_rev);
            let refused = Refused {
                revision,
                errors: e,
                text,
            };
            return Ok(start(
                settings,
                notes,
                (kept_text, kept_rev),
                Some(refused),
                read_at,
                config,
            ));
        }
    };
    standing::served(revision);
    Ok(start(
        settings,
        notes,
        (text, revision),
        None,
        read_at,
        config,
    ))
}

/// etcd's revision refused at start (the kept copy serves): retried first on SIGHUP.
struct Refused {
    revision: i64,
    errors: String,
    text: String,
}

fn start(
    settings: ClusterSettings,
    notes: Vec<String>,
    (text, revision): (String, i64),
    refused: Option<Refused>,
    watch_from: i64,
    config: Config,
) -> (Config, Member) {
    let served = Arc::new(Mutex::new(Served {
        text,
        revision,
        generation: 0,
        refusal: refused.as_ref().map(|r| (r.revision, r.errors.clone())),
        started: false,
        pending: refused.map(|r| (r.text, r.revision)),
        trying: None,
        lease: 0,
        leaving: false,
    }));
    let (tx, updates) = tokio::sync::mpsc::unbounded_channel();
    let (purge_tx, purges) = tokio::sync::mpsc::unbounded_channel();
    let addresses = config
        .listeners
        .iter()
        .map(|l| l.address.to_string())
        .collect();
    let admin = config.admin.map(|a| a.to_string());
    agent::spawn(agent::Setup {
        settings: settings.clone(),
        watch_from,
        served: served.clone(),
        updates: tx,
        purges: purge_tx,
        addresses,
        admin,
        origin: format!(
            "{}-{}-{:08x}",
            settings.name,
            std::process::id(),
            fastrand::u32(..)
        ),
    });
    (
        config,
        Member {
            updates,
            purges,
            notes,
            served,
            settings,
        },
    )
}

/// The shared text (revision `revision`) with the own file's top-level keys over it, validated.
/// When it does not validate, the shared text is validated as written (with the own file's
/// tables it lacks, such as `[[listen]]`, after it), so errors name its own lines.
pub fn effective(
    shared: &str,
    revision: i64,
    local: &str,
    path: &Path,
    settings: &ClusterSettings,
) -> Result<Config, String> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let shared_name = dir.join(format!(
        "[etcd {} revision {revision}]",
        config_key(settings)
    ));
    let shared_name = shared_name.display().to_string();
    let (merged, supplement) = merge(shared, local).map_err(|e| format!("{shared_name}: {e}"))?;
    match Config::parse(&merged, &path.display().to_string()) {
        Ok(c) => Ok(c),
        Err(errors) => match Config::parse(&format!("{shared}\n{supplement}"), &shared_name) {
            Err(own) => Err(own.to_string()),
            Ok(_) => Err(format!(
                "{} over the shared configuration of revision {revision}:\n{errors}",
                path.display()
            )),
        },
    }
}

/// The shared TOML with each top-level key of the own file put in its place; and, as TOML to
/// put after the shared text, the own file's tables the shared text does not have.
pub fn merge(shared: &str, local: &str) -> Result<(String, String), String> {
    let mut table: toml::Table = shared.parse().map_err(|e: toml::de::Error| e.to_string())?;
    let own: toml::Table = local.parse().map_err(|e: toml::de::Error| e.to_string())?;
    let mut supplement = toml::Table::new();
    for (key, value) in own {
        let is_table = match &value {
            toml::Value::Table(_) => true,
            toml::Value::Array(a) => !a.is_empty() && a.iter().all(toml::Value::is_table),
            _ => false,
        };
        if is_table && !table.contains_key(&key) {
            supplement.insert(key.clone(), value.clone());
        }
        table.insert(key, value);
    }
    let text = |t: &toml::Table| toml::to_string(t).map_err(|e| e.to_string());
    Ok((text(&table)?, text(&supplement)?))
}

/// The first line of the kept copy, before its revision.
const KEPT_HEADER: &str = "# slipstream cluster: the shared configuration of etcd revision ";

/// A config file (an own file or a shared configuration), as text.
pub(crate) fn read_file(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The last shared configuration served, kept in the state directory.
fn kept(settings: &ClusterSettings) -> Option<(String, i64)> {
    let text = std::fs::read_to_string(kept_path(settings)).ok()?;
    let (first, rest) = text.split_once('\n')?;
    let revision = first.strip_prefix(KEPT_HEADER)?.trim().parse().ok()?;
    Some((rest.to_string(), revision))
}

/// Keeps the shared configuration served, with its revision in its first line, in one file
/// written whole and synced before it replaces the last one.
fn keep(settings: &ClusterSettings, text: &str, revision: i64) -> Result<(), String> {
    std::fs::create_dir_all(&settings.state_dir).map_err(|e| e.to_string())?;
    let whole = format!("{KEPT_HEADER}{revision}\n{text}");
    crate::acme::state::write_atomically(&kept_path(settings), whole.as_bytes())
}

fn kept_path(settings: &ClusterSettings) -> PathBuf {
    settings.state_dir.join("config.toml")
}

fn lock(served: &Mutex<Served>) -> std::sync::MutexGuard<'_, Served> {
    served
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_own_files_keys_replace_the_shared_ones_whole() {
        let shared = "workers = 4\nadmin = \"0.0.0.0:9\"\n[[listen]]\naddress = \"0.0.0.0:80\"\n[[sites]]\nhosts = [\"a\"]\n";
        let own = "admin = \"127.0.0.1:9901\"\n[[listen]]\naddress = \"127.0.0.1:8081\"\n[cluster]\netcd = [\"http://127.0.0.1:2379\"]\nprefix = \"/s\"\n";
        let (merged, supplement) = super::merge(shared, own).unwrap();
        let merged: toml::Table = merged.parse().unwrap();
        assert!(supplement.contains("[cluster]") && !supplement.contains("listen"));
        assert_eq!(merged["admin"].as_str(), Some("127.0.0.1:9901"));
        assert_eq!(merged["workers"].as_integer(), Some(4));
        let listen = merged["listen"].as_array().unwrap();
        assert_eq!(listen.len(), 1);
        assert_eq!(listen[0]["address"].as_str(), Some("127.0.0.1:8081"));
        assert!(merged["sites"].is_array() && merged["cluster"].is_table());
    }
}
