//! The running config as the process shares it: replaced whole on reload, read by every worker
//! without a lock. Workers compare a generation number (one atomic load) and copy the config
//! only when it changed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::Config;

/// The active config and its generation.
pub struct SharedConfig {
    generation: AtomicU64,
    current: ArcSwap<Config>,
}

impl SharedConfig {
    /// Shares `config` as generation 0.
    pub fn new(config: Config) -> SharedConfig {
        SharedConfig {
            generation: AtomicU64::new(0),
            current: ArcSwap::from_pointee(config),
        }
    }

    /// The generation now in force; it grows by one with each reload.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The config in force.
    pub fn current(&self) -> Arc<Config> {
        self.current.load_full()
    }

    /// The generation and a copy of the config it names.
    pub fn snapshot(&self) -> (u64, Config) {
        let generation = self.generation();
        (generation, Config::clone(&self.current.load()))
    }

    /// Makes `config` the one in force; returns its generation.
    pub fn replace(&self, config: Config) -> u64 {
        self.current.store(Arc::new(config));
        self.generation.fetch_add(1, Ordering::AcqRel) + 1
    }
}
