//! What one worker thread owns: its copy of the config, one balancer per upstream group, the
//! buffer, pipe and upstream pools, its open-file cache, its counter shard and access-log
//! buffer. Everything here is single-threaded (`Rc`, `RefCell`, `Cell`); the only shared values are read-mostly (the config
//! generation) or written by this worker alone (its counter shard).

use crate::net::Address;
use rustc_hash::FxHashMap;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use tokio::sync::{watch, Notify};

use crate::buffers::{BufferPool, MIN_BUFFER};
use crate::config::{Config, SharedConfig};
use crate::files::cache::FileCache;
use crate::net::splice::PipePool;
use crate::observe::access_log::AccessLog;
use crate::observe::metrics::Shard;
use crate::observe::routes::{RouteRegistry, RouteStats};
use crate::upstream::fleet::Table;
use crate::upstream::{Balancer, Fleet, UpstreamPool};

/// First read for a response that will be spliced: room for the head and a little body. Kept
/// small so many concurrent large downloads cost little memory.
const SPLICED_FIRST_READ: usize = 4096;

/// One worker's state.
pub struct Worker {
    /// Worker number, from 0.
    pub id: usize,
    shared: Arc<SharedConfig>,
    /// The published server table and per-server figures.
    pub fleet: Arc<Fleet>,
    current: RefCell<Rc<Snapshot>>,
    /// Reusable I/O buffers.
    pub buffers: BufferPool,
    /// Reusable blocks for request futures.
    pub request_blocks: crate::request_blocks::RequestBlocks,
    /// Idle upstream connections.
    pub upstreams: UpstreamPool,
    /// HTTP/2 upstream connections, each carrying many requests.
    pub h2_upstreams: crate::upstream::multiplex::H2Pool,
    /// Empty pipes for zero-copy body transfer.
    pub pipes: PipePool,
    /// Open static files.
    pub files: FileCache,
    /// Compressed copies of hot static files.
    pub compressed: crate::files::compressed::CompressedCache,
    /// This worker's counters.
    pub counters: Arc<Shard>,
    /// This worker's access-log buffer.
    pub log: AccessLog,
    /// Where per-route figures are kept across config generations.
    routes: Arc<RouteRegistry>,
    /// The published gauges of this worker's idle pooled connections, by address.
    pool_gauges: RefCell<FxHashMap<Address, Arc<std::sync::atomic::AtomicU64>>>,
    /// The serial number of the next client connection (with the worker id, its log id).
    next_connection: Cell<u64>,
    /// Becomes true when the process starts shutting down.
    pub shutdown: watch::Receiver<bool>,
    /// Client connections open on this worker.
    pub active: Cell<usize>,
    /// TLS handshakes in progress on this worker.
    pub handshakes: Cell<usize>,
    /// Signalled when a client connection closes (wakes a paused accept loop).
    pub connection_closed: Notify,
    /// Size of the last response from each server: the first read of the next one uses a buffer
    /// that large, so a response that has arrived whole is read with one read.
    response_size: RefCell<FxHashMap<Address, usize>>,
}

/// The config generation a worker runs, with the per-worker state built from it. A request
/// holds one snapshot from start to end, so its config and balancers always agree.
pub struct Snapshot {
    generation: u64,
    /// The server table generation the balancers last took.
    fleet_generation: Cell<u64>,
    /// The config.
    pub config: Config,
    /// One balancer per upstream group, by the group's index.
    pub balancers: Vec<Balancer>,
    /// This worker's per-route figures, by the router's slot.
    pub route_stats: Vec<Arc<RouteStats>>,
}

impl Snapshot {
    fn new(
        generation: u64,
        config: Config,
        worker: usize,
        fleet: &Fleet,
        routes: &RouteRegistry,
    ) -> Snapshot {
        let route_stats = routes.for_worker(worker, config.router.labels());
        let fleet_generation = fleet.generation();
        let published = fleet.table();
        // The published table is for another generation while a reload is under way.
        let table = if published.config_generation == generation {
            published
        } else {
            Arc::new(Table::from_config(&config, generation))
        };
        let balancers = config
            .upstreams
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let members = table.groups.get(i).map_or(&[][..], Vec::as_slice);
                Balancer::new(g, worker, members, &fleet.stats)
            })
            .collect();
        Snapshot {
            generation,
            fleet_generation: Cell::new(fleet_generation),
            config,
            balancers,
            route_stats,
        }
    }

    /// The config generation it runs.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The figures of a router slot.
    pub fn route_stats(&self, slot: u16) -> Option<&RouteStats> {
        self.route_stats.get(usize::from(slot)).map(|s| &**s)
    }
}

impl Worker {
    /// A worker reading config from `shared`.
    pub fn new(
        id: usize,
        shared: Arc<SharedConfig>,
        fleet: Arc<Fleet>,
        counters: Arc<Shard>,
        log: AccessLog,
        routes: Arc<RouteRegistry>,
        shutdown: watch::Receiver<bool>,
    ) -> Worker {
        let (generation, config) = shared.snapshot();
        let pipe_size = config.limits.max_buffer.max(256 * 1024);
        let snapshot = Snapshot::new(generation, config, id, &fleet, &routes);
        Worker {
            id,
            shared,
            current: RefCell::new(Rc::new(snapshot)),
            fleet,
            buffers: BufferPool::default(),
            request_blocks: Default::default(),
            upstreams: UpstreamPool::default(),
            h2_upstreams: Default::default(),
            pipes: PipePool::new(pipe_size),
            files: FileCache::default(),
            compressed: Default::default(),
            counters,
            log,
            routes,
            next_connection: Cell::new(0),
            pool_gauges: RefCell::default(),
            shutdown,
            active: Cell::new(0),
            handshakes: Cell::new(0),
            connection_closed: Notify::new(),
            response_size: RefCell::default(),
        }
    }

    /// A serial number for a new client connection (the error log's `conn=WORKER-ID`).
    pub fn new_connection_id(&self) -> u64 {
        let id = self.next_connection.get();
        self.next_connection.set(id + 1);
        id
    }

    /// The generation of the config in force (one atomic load): a reload changes it.
    pub fn config_generation(&self) -> u64 {
        self.shared.generation()
    }

    /// The config in force and the state built from it. After a reload the worker copies the
    /// new config once, so reading it never touches a reference count shared with other threads;
    /// balancers start afresh with a new config.
    pub fn snapshot(&self) -> Rc<Snapshot> {
        let mut current = self.current.borrow_mut();
        if current.generation != self.shared.generation() {
            let (generation, config) = self.shared.snapshot();
            let snapshot = Snapshot::new(generation, config, self.id, &self.fleet, &self.routes);
            *current = Rc::new(snapshot);
        }
        let fleet_generation = self.fleet.generation();
        if current.fleet_generation.get() != fleet_generation {
            current.fleet_generation.set(fleet_generation);
            self.take_table(&current);
        }
        current.clone()
    }

    /// Updates the balancers from the published server table; pooled connections to servers
    /// that left or went down are closed.
    fn take_table(&self, snapshot: &Snapshot) {
        let table = self.fleet.table();
        if table.config_generation != snapshot.generation {
            return;
        }
        for (balancer, members) in snapshot.balancers.iter().zip(&table.groups) {
            for gone in balancer.sync(members, &self.fleet.stats, true) {
                self.upstreams.forget(&gone);
                self.h2_upstreams.forget(&gone);
            }
        }
    }

    /// Buffer size to start reading a response from `server` with: the size of its last
    /// response, unless that did not fit the buffer and was spliced (then the buffer only needs
    /// the head and the first bytes).
    pub fn response_buffer_hint(&self, server: &Address, max: usize, zero_copy: bool) -> usize {
        let last = self
            .response_size
            .borrow()
            .get(server)
            .copied()
            .unwrap_or(0);
        if zero_copy && last > max {
            return SPLICED_FIRST_READ;
        }
        (last + 512).clamp(MIN_BUFFER, max)
    }

    /// Records the size of a response from `server` (head plus body as received).
    pub fn note_response_size(&self, server: &Address, size: usize) {
        let mut sizes = self.response_size.borrow_mut();
        match sizes.get_mut(server) {
            Some(s) => *s = size,
            None => {
                sizes.insert(server.clone(), size);
            }
        }
    }

    /// Publishes the idle pooled connections per server (once a second, for `/metrics`).
    pub fn publish_pool(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let counts = self.upstreams.idle_counts();
        let mut gauges = self.pool_gauges.borrow_mut();
        for gauge in gauges.values() {
            gauge.store(0, Relaxed);
        }
        for (addr, n) in counts {
            let gauge = gauges
                .entry(addr)
                .or_insert_with_key(|a| self.fleet.pools.gauge(self.id, a));
            gauge.store(n as u64, Relaxed);
        }
    }

    /// Whether shutdown has begun.
    pub fn shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }
}
