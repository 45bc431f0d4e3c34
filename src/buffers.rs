//! Per-worker pool of I/O buffers. A connection borrows a buffer only while a request is in
//! flight and gives it back when idle, so an idle keep-alive connection holds no buffer, and busy
//! connections reuse memory instead of allocating per request.
//!
//! Small buffers (request heads) and large ones (whole responses) are pooled apart: handing a
//! small buffer to a large response would mean reallocating, and touching fresh pages, per
//! request.

use std::cell::RefCell;

/// Smallest read buffer handed out.
pub const MIN_BUFFER: usize = 16 * 1024;

/// Buffers a worker keeps for reuse in each size class at least; while more are lent out at
/// once (many HTTP/2 streams in flight), as many as are out, so the concurrency of the moment
/// reuses memory instead of going through malloc for every request. [`BufferPool::trim`]
/// gives the surplus back once a second.
const MAX_POOLED: usize = 64;

/// Buffers up to this capacity are "small".
const SMALL: usize = 32 * 1024;

/// Whether a buffer of `capacity` comes from the pool's large class.
pub fn is_large(capacity: usize) -> bool {
    capacity > SMALL
}

/// A worker's buffer pool (single-threaded).
#[derive(Debug, Default)]
pub struct BufferPool {
    small: RefCell<Vec<Vec<u8>>>,
    large: RefCell<Vec<Vec<u8>>>,
    /// Buffers taken and not given back.
    lent: std::cell::Cell<usize>,
    /// Bytes of surplus buffers freed since malloc last gave pages back.
    freed: std::cell::Cell<usize>,
}

/// Surplus buffer bytes freed past which [`BufferPool::trim`] asks malloc to give free pages
/// back.
const RELEASE_AFTER: usize = 1024 * 1024;

impl BufferPool {
    fn class(&self, capacity: usize) -> &RefCell<Vec<Vec<u8>>> {
        if is_large(capacity) {
            &self.large
        } else {
            &self.small
        }
    }

    /// An empty buffer with at least `capacity` bytes of room.
    pub fn take(&self, capacity: usize) -> Vec<u8> {
        self.lent.set(self.lent.get() + 1);
        let mut buf = self.class(capacity).borrow_mut().pop().unwrap_or_default();
        if buf.capacity() < capacity {
            buf.reserve_exact(capacity);
        }
        buf
    }

    /// Returns a buffer for reuse; buffers beyond `max_capacity` are freed, and so is the
    /// surplus of a burst (more pooled than [`MAX_POOLED`] and what is lent out).
    pub fn give(&self, mut buf: Vec<u8>, max_capacity: usize) {
        self.lent.set(self.lent.get().saturating_sub(1));
        let capacity = buf.capacity();
        if capacity == 0 || capacity > max_capacity {
            return;
        }
        let mut free = self.class(capacity).borrow_mut();
        if free.len() < MAX_POOLED.max(self.lent.get()) {
            buf.clear();
            free.push(buf);
        } else {
            self.freed.set(self.freed.get() + capacity);
        }
    }

    /// Frees pooled buffers beyond what is lent out now (at least [`MAX_POOLED`] stay). When
    /// no buffer is lent and more than [`RELEASE_AFTER`] bytes of surplus were freed since
    /// malloc last gave pages back, asks it to give its free pages back to the kernel (the
    /// worker calls this once a second, so at most once a second): the buffers freed between
    /// the allocations of the connections that stay (each keep-alive connection's task)
    /// would otherwise stay resident as holes in the heap after a burst. Returns whether it
    /// asked.
    pub fn trim(&self) -> bool {
        let keep = MAX_POOLED.max(self.lent.get());
        for class in [&self.small, &self.large] {
            let mut class = class.borrow_mut();
            let surplus: usize = class.iter().skip(keep).map(Vec::capacity).sum();
            self.freed.set(self.freed.get() + surplus);
            class.truncate(keep);
        }
        if self.lent.get() > 0 || self.freed.get() < RELEASE_AFTER {
            return false;
        }
        self.freed.set(0);
        release_free_memory();
        true
    }
}

/// Gives the free pages of malloc's heaps back to the kernel (glibc's `malloc_trim`, which
/// also releases whole free pages inside a heap, not only at its top).
#[cfg(all(target_os = "linux", target_env = "gnu", not(miri)))]
#[allow(unsafe_code)]
fn release_free_memory() {
    // SAFETY: malloc_trim takes no pointer and only changes malloc's own state.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Elsewhere (and under Miri, which cannot call into libc) there is no such call; freed
/// memory stays with the allocator.
#[cfg(not(all(target_os = "linux", target_env = "gnu", not(miri))))]
fn release_free_memory() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_back_buffer_is_reused_from_its_own_size_class() {
        let pool = BufferPool::default();
        let mut small = pool.take(MIN_BUFFER);
        small.extend_from_slice(b"request");
        let small_at = small.as_ptr();
        let large = pool.take(SMALL + 1);
        assert!(is_large(large.capacity()));
        let large_at = large.as_ptr();
        pool.give(small, SMALL);
        pool.give(large, 4 * SMALL);
        let again = pool.take(MIN_BUFFER);
        assert_eq!(again.as_ptr(), small_at, "the small buffer was not reused");
        assert!(again.is_empty(), "a reused buffer kept its bytes");
        let large_again = pool.take(SMALL + 1);
        assert_eq!(large_again.as_ptr(), large_at);
    }

    #[test]
    fn buffers_beyond_the_limit_or_the_surplus_are_freed() {
        let pool = BufferPool::default();
        let big = pool.take(SMALL * 4);
        pool.give(big, SMALL * 2);
        assert!(
            pool.large.borrow().is_empty(),
            "kept a buffer past max_capacity"
        );
        let many: Vec<Vec<u8>> = (0..MAX_POOLED + 8).map(|_| pool.take(64)).collect();
        for buf in many {
            pool.give(buf, SMALL);
        }
        // Given back as the lent count falls: the surplus goes at once.
        assert_eq!(pool.small.borrow().len(), MAX_POOLED);
        assert!(!pool.trim(), "a few bytes freed asked malloc to trim");
        assert_eq!(pool.small.borrow().len(), MAX_POOLED);
    }

    #[test]
    fn a_burst_of_freed_buffers_gives_memory_back() {
        let pool = BufferPool::default();
        let burst: Vec<Vec<u8>> = (0..MAX_POOLED + 80)
            .map(|_| pool.take(MIN_BUFFER))
            .collect();
        for buf in burst {
            pool.give(buf, SMALL);
        }
        // 80 buffers of 16 KiB went back to malloc: more than a MiB.
        assert!(pool.trim(), "the burst's buffers were not given back");
        assert!(!pool.trim(), "trimmed again with nothing freed since");
    }

    #[test]
    fn no_trim_while_a_burst_is_in_flight_or_for_oversized_buffers() {
        let pool = BufferPool::default();
        let mut gone: Vec<Vec<u8>> = (0..400).map(|_| pool.take(MIN_BUFFER)).collect();
        // 300 come back (100 of them freed as surplus, 1.6 MB), 100 stay lent.
        let held = gone.split_off(300);
        for buf in gone {
            pool.give(buf, SMALL);
        }
        // Fewer than the surplus came back: the burst goes on.
        assert!(pool.lent.get() > MAX_POOLED);
        assert!(!pool.trim(), "trimmed in the middle of a burst");
        let mut held = held;
        let last = held.pop().unwrap();
        for buf in held {
            pool.give(buf, SMALL);
        }
        assert!(!pool.trim(), "trimmed with a request in flight");
        pool.give(last, SMALL);
        assert!(pool.trim(), "the burst ended");
        // Buffers past max_capacity are freed one by one in steady traffic: never a trim.
        let quiet = BufferPool::default();
        for _ in 0..200 {
            let big = quiet.take(SMALL * 4);
            quiet.give(big, SMALL * 2);
        }
        assert!(!quiet.trim(), "oversized buffers asked malloc to trim");
    }
}
