//! What one worker thread owns: its view of the config, buffer pool, upstream pool, round-robin
//! cursor, counter shard and access-log buffer. Everything here is single-threaded (`Rc`,
//! `RefCell`, `Cell`); the only shared values are read-mostly (the config generation) or
//! written by this worker alone (its counter shard).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::{watch, Notify};

use crate::access_log::AccessLog;
use crate::balance::RoundRobin;
use crate::buffers::BufferPool;
use crate::config::Config;
use crate::forward::MIN_BUFFER;
use crate::metrics::Shard;
use crate::runtime::SharedConfig;
use crate::splice::PipePool;
use crate::upstream::UpstreamPool;

/// First read for a response that will be spliced: room for the head and a little body. Kept
/// small so many concurrent large downloads cost little memory.
const SPLICED_FIRST_READ: usize = 4096;

/// One worker's state.
pub struct Worker {
    /// Worker number, from 0.
    pub id: usize,
    shared: Arc<SharedConfig>,
    config: RefCell<(u64, Rc<Config>)>,
    /// Reusable I/O buffers.
    pub buffers: BufferPool,
    /// Idle upstream connections.
    pub upstreams: UpstreamPool,
    /// Empty pipes for zero-copy body transfer.
    pub pipes: PipePool,
    /// Round-robin cursor.
    pub balance: RoundRobin,
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
            config: RefCell::new((generation, Rc::new(config))),
            buffers: BufferPool::default(),
            upstreams: UpstreamPool::default(),
            pipes: PipePool::new(pipe_size),
            balance: RoundRobin::starting_at(id),
            counters,
            log,
            shutdown,
            active: Cell::new(0),
            connection_closed: Notify::new(),
            response_size: RefCell::default(),
        }
    }

    /// The current config. After a reload the worker takes its own copy once, so reading the
    /// config never touches a reference count shared with other threads.
    pub fn config(&self) -> Rc<Config> {
        let generation = self.shared.generation.load(Ordering::Acquire);
        let mut current = self.config.borrow_mut();
        if current.0 != generation {
            let (generation, config) = self.shared.snapshot();
            *current = (generation, Rc::new(config));
        }
        current.1.clone()
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
