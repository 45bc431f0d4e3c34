//! The running config as the process shares it: replaced whole on reload, read by every worker
//! without a lock. Workers compare a generation number (one atomic load) and copy the config
//! only when it changed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use super::Config;

/// The active config and its generation.
pub struct SharedConfig {
    /// The generation in force, for the workers' one-load check.
    generation: AtomicU64,
    /// The config with the generation it was published as: read together, so a worker never
    /// pairs a generation with another generation's config (a cache hit's kept head is
    /// reused by generation).
    current: ArcSwap<Published>,
    /// Held while a config is published (a reload and a certificate change may race).
    publishing: Mutex<()>,
}

/// A config and its generation, published as one.
struct Published {
    generation: u64,
    config: Arc<Config>,
}

impl SharedConfig {
    /// Shares `config` as generation 0.
    pub fn new(config: Config) -> SharedConfig {
        SharedConfig {
            generation: AtomicU64::new(0),
            current: ArcSwap::from_pointee(Published {
                generation: 0,
                config: Arc::new(config),
            }),
            publishing: Mutex::new(()),
        }
    }

    /// The generation now in force; it grows by one with each reload.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The config in force.
    pub fn current(&self) -> Arc<Config> {
        self.current.load().config.clone()
    }

    /// The generation and a copy of the config it names.
    pub fn snapshot(&self) -> (u64, Config) {
        let published = self.current.load();
        (published.generation, Config::clone(&published.config))
    }

    /// Makes `config` the one in force; returns its generation.
    pub fn replace(&self, config: Config) -> u64 {
        let _one_at_a_time = self
            .publishing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let generation = self.generation() + 1;
        self.current.store(Arc::new(Published {
            generation,
            config: Arc::new(config),
        }));
        self.generation.store(generation, Ordering::Release);
        generation
    }
}
