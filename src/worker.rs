//! What one worker thread owns: its copy of the config, one balancer per upstream group, the
//! buffer, pipe and upstream pools, its counter shard and access-log buffer. Everything here is
//! single-threaded (`Rc`, `RefCell`, `Cell`); the only shared values are read-mostly (the config
//! generation) or written by this worker alone (its counter shard).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use tokio::sync::{watch, Notify};

use crate::buffers::{BufferPool, MIN_BUFFER};
use crate::config::{Config, SharedConfig};
use crate::net::splice::PipePool;
use crate::observe::access_log::AccessLog;
use crate::observe::metrics::Shard;
use crate::upstream::{Balancer, UpstreamPool};

/// First read for a response that will be spliced: room for the head and a little body. Kept
/// small so many concurrent large downloads cost little memory.
const SPLICED_FIRST_READ: usize = 4096;

/// One worker's state.
pub struct Worker {
    /// Worker number, from 0.
    pub id: usize,
    shared: Arc<SharedConfig>,
    current: RefCell<Rc<Snapshot>>,
    /// Reusable I/O buffers.
    pub buffers: BufferPool,
    /// Idle upstream connections.
    pub upstreams: UpstreamPool,
    /// Empty pipes for zero-copy body transfer.
    pub pipes: PipePool,
    /// This worker's counters.
    pub counters: Arc<Shard>,
    /// This worker's access-log buffer.
    pub log: AccessLog,
    /// Becomes true when the process starts shutting down.
    pub shutdown: watch::Receiver<bool>,
    /// Client connections open on this worker.
    pub active: Cell<usize>,
    /// Signalled when a client connection closes (wakes a paused accept loop).
    pub connection_closed: Notify,
    /// Size of the last response from each server: the first read of the next one uses a buffer
    /// that large, so a response that has arrived whole is read with one read.
    response_size: RefCell<HashMap<SocketAddr, usize>>,
}

/// The config generation a worker runs, with the per-worker state built from it. A request
/// holds one snapshot from start to end, so its config and balancers always agree.
pub struct Snapshot {
    generation: u64,
    /// The config.
    pub config: Config,
    /// One balancer per upstream group, by the group's index.
    pub balancers: Vec<Balancer>,
}

impl Snapshot {
    fn new(generation: u64, config: Config, worker: usize) -> Snapshot {
        let balancers = config
            .upstreams
            .iter()
            .map(|g| Balancer::new(g.servers.len(), worker))
            .collect();
        Snapshot {
            generation,
            config,
            balancers,
        }
    }
}

impl Worker {
    /// A worker reading config from `shared`.
    pub fn new(
        id: usize,
        shared: Arc<SharedConfig>,
        counters: Arc<Shard>,
        log: AccessLog,
        shutdown: watch::Receiver<bool>,
    ) -> Worker {
        let (generation, config) = shared.snapshot();
        let pipe_size = config.limits.max_buffer.max(256 * 1024);
        Worker {
            id,
            shared,
            current: RefCell::new(Rc::new(Snapshot::new(generation, config, id))),
            buffers: BufferPool::default(),
            upstreams: UpstreamPool::default(),
            pipes: PipePool::new(pipe_size),
            counters,
            log,
            shutdown,
            active: Cell::new(0),
            connection_closed: Notify::new(),
            response_size: RefCell::default(),
        }
    }

    /// The config in force and the state built from it. After a reload the worker copies the
    /// new config once, so reading it never touches a reference count shared with other threads;
    /// balancers start afresh with a new config.
    pub fn snapshot(&self) -> Rc<Snapshot> {
        let mut current = self.current.borrow_mut();
        if current.generation != self.shared.generation() {
            let (generation, config) = self.shared.snapshot();
            *current = Rc::new(Snapshot::new(generation, config, self.id));
        }
        current.clone()
    }

    /// Buffer size to start reading a response from `server` with: the size of its last
    /// response, unless that did not fit the buffer and was spliced (then the buffer only needs
    /// the head and the first bytes).
    pub fn response_buffer_hint(&self, server: SocketAddr, max: usize, zero_copy: bool) -> usize {
        let last = self
            .response_size
            .borrow()
            .get(&server)
            .copied()
            .unwrap_or(0);
        if zero_copy && last > max {
            return SPLICED_FIRST_READ;
        }
        (last + 512).clamp(MIN_BUFFER, max)
    }

    /// Records the size of a response from `server` (head plus body as received).
    pub fn note_response_size(&self, server: SocketAddr, size: usize) {
        self.response_size.borrow_mut().insert(server, size);
    }

    /// Whether shutdown has begun.
    pub fn shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }
}
