//! The server table every worker balances over, as the process publishes it: for each group,
//! its members (each address a name resolved to, with weight and role) and whether active
//! health checks hold each one up. The control thread (`control`) is its only writer; workers
//! compare a generation number per request (one atomic load) and copy the table only when it
//! changed, so nothing on the request path takes a lock.

use crate::net::Address;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;

use super::stats::StatsRegistry;
use crate::config::Config;

/// One address of a group, as the workers should treat it.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// Where to connect.
    pub addr: Address,
    /// Relative share of requests.
    pub weight: u32,
    /// Used only when no primary is available.
    pub backup: bool,
    /// Ramp-up time after the server comes back.
    pub slow_start: Duration,
    /// Active health checks hold it up (always true without checks).
    pub up: bool,
}

/// The members of every group, for one config generation.
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// The config generation the groups belong to (indices follow its `upstreams`).
    pub config_generation: u64,
    /// Members by group index.
    pub groups: Vec<Vec<Member>>,
}

impl Table {
    /// The table a config implies before any check or re-resolution: every address found at
    /// load time, up unless its group's checks start servers down.
    pub fn from_config(config: &Config, config_generation: u64) -> Table {
        let groups = config
            .upstreams
            .iter()
            .map(|g| {
                let up = !g.health.as_ref().is_some_and(|h| h.start_down);
                g.servers
                    .iter()
                    .flat_map(|s| {
                        s.addrs.iter().map(move |addr| Member {
                            addr: addr.clone(),
                            weight: s.weight,
                            backup: s.backup,
                            slow_start: s.slow_start,
                            up,
                        })
                    })
                    .collect()
            })
            .collect();
        Table {
            config_generation,
            groups,
        }
    }
}

/// The result of a server's last active check, for `/metrics`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRecord {
    /// Whether checks hold the server up.
    pub up: bool,
    /// Whether the last check passed.
    pub last_ok: bool,
    /// Checks run.
    pub checks: u64,
    /// Checks failed.
    pub failures: u64,
    /// The last failed check's reason and when it ended (ms since the Unix epoch), for the
    /// dashboard.
    pub last_failure: Option<(String, u64)>,
}

/// The published table, with what the admin endpoint reads about servers.
#[derive(Debug)]
pub struct Fleet {
    generation: AtomicU64,
    table: ArcSwap<Table>,
    /// Active-check results by (group name, address); kept across reloads so a server's
    /// health survives them.
    pub checks: Mutex<HashMap<(String, Address), CheckRecord>>,
    /// Every worker's per-server figures.
    pub stats: StatsRegistry,
    /// Every worker's idle pooled connections per address.
    pub pools: super::stats::PoolRegistry,
}

impl Fleet {
    /// A fleet publishing `table`.
    pub fn new(table: Table) -> Fleet {
        Fleet {
            generation: AtomicU64::new(0),
            table: ArcSwap::from_pointee(table),
            checks: Mutex::default(),
            stats: StatsRegistry::default(),
            pools: Default::default(),
        }
    }

    /// Grows by one with each published table.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The table in force.
    pub fn table(&self) -> Arc<Table> {
        self.table.load_full()
    }

    /// Each checked server's last failed check, for the dashboard: `[{"group", "server",
    /// "up", "last_ok", "reason", "at_ms"}]` (servers that never failed a check are left out).
    pub fn check_failures(&self) -> Vec<serde_json::Value> {
        let records = self.checks.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out: Vec<_> = records
            .iter()
            .filter_map(|((group, addr), r)| {
                let (reason, at_ms) = r.last_failure.as_ref()?;
                Some(serde_json::json!({
                    "group": group, "server": addr.to_string(), "up": r.up,
                    "last_ok": r.last_ok, "reason": reason, "at_ms": at_ms,
                }))
            })
            .collect();
        out.sort_by_key(|v| (v["group"].to_string(), v["server"].to_string()));
        out
    }

    /// Publishes a new table.
    pub fn publish(&self, table: Table) {
        self.table.store(Arc::new(table));
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}
