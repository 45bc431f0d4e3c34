//! Per-worker pool of I/O buffers. A connection borrows a buffer only while a request is in
//! flight and gives it back when idle, so an idle keep-alive connection holds no buffer, and busy
//! connections reuse memory instead of allocating per request.

use std::cell::RefCell;

/// Most buffers a worker keeps for reuse; more are freed when returned.
const MAX_POOLED: usize = 64;

/// A worker's buffer pool (single-threaded).
#[derive(Debug, Default)]
pub struct BufferPool {
    free: RefCell<Vec<Vec<u8>>>,
}

impl BufferPool {
    /// An empty buffer with at least `capacity` bytes of room.
    pub fn take(&self, capacity: usize) -> Vec<u8> {
        let mut buf = self.free.borrow_mut().pop().unwrap_or_default();
        if buf.capacity() < capacity {
            buf.reserve_exact(capacity);
        }
        buf
    }

    /// Returns a buffer for reuse; buffers beyond `max_capacity` are freed.
    pub fn give(&self, mut buf: Vec<u8>, max_capacity: usize) {
        let mut free = self.free.borrow_mut();
        if free.len() < MAX_POOLED && buf.capacity() > 0 && buf.capacity() <= max_capacity {
            buf.clear();
            free.push(buf);
        }
    }
}
