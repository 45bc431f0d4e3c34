//! Choosing an upstream server within a group. Round-robin per worker: each worker keeps its own
//! cursor, so there is no shared state to contend on.

use std::cell::Cell;

/// A worker's round-robin cursor.
#[derive(Debug, Default)]
pub struct RoundRobin {
    next: Cell<usize>,
}

impl RoundRobin {
    /// A cursor starting at `start` (workers start at different offsets to spread load).
    pub fn starting_at(start: usize) -> Self {
        RoundRobin {
            next: Cell::new(start),
        }
    }

    /// The index of the next server among `count`.
    pub fn pick(&self, count: usize) -> usize {
        let n = self.next.get();
        self.next.set(n.wrapping_add(1));
        n % count.max(1)
    }
}
