//! The per-worker cache of compressed static files: a hot, compressible file is compressed
//! once per coding, not per request. A copy is keyed by the open-file cache's entry (which is
//! replaced when the file changes, so a copy never outlives its file's version) and coding;
//! the cache holds at most `static_cache` bytes, the least recently used copy going first.
//! Nothing here is shared between threads.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::{Rc, Weak};

use super::cache::CachedFile;
use crate::compress::Coding;

/// One compressed copy.
struct Copy {
    /// The entry it was made from: alive while the file's version is current. Holding it
    /// weakly keeps its address from being reused by another entry.
    entry: Weak<CachedFile>,
    bytes: Rc<[u8]>,
    last_used: Cell<u64>,
}

/// Compressed copies of static files, by entry address and coding.
#[derive(Default)]
pub struct CompressedCache {
    copies: RefCell<HashMap<(usize, Coding), Copy>>,
    bytes: Cell<usize>,
    clock: Cell<u64>,
}

/// What storing a copy did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    /// Copies dropped to make room.
    pub evicted: u64,
}

impl CompressedCache {
    /// The compressed copy of `entry` in `coding`, if kept.
    pub fn get(&self, entry: &Rc<CachedFile>, coding: Coding) -> Option<Rc<[u8]>> {
        let copies = self.copies.borrow();
        let copy = copies.get(&(key(entry), coding))?;
        if !copy.entry.upgrade().is_some_and(|e| Rc::ptr_eq(&e, entry)) {
            return None;
        }
        copy.last_used.set(self.tick());
        Some(copy.bytes.clone())
    }

    /// Keeps a compressed copy, dropping the least recently used (and the stale) to stay
    /// within `budget` bytes; a copy larger than a quarter of the budget is not kept.
    pub fn put(
        &self,
        entry: &Rc<CachedFile>,
        coding: Coding,
        bytes: Rc<[u8]>,
        budget: usize,
    ) -> Stored {
        let mut stored = Stored::default();
        if bytes.len() > budget / 4 {
            return stored;
        }
        let mut copies = self.copies.borrow_mut();
        copies.retain(|_, c| {
            let live = c.entry.strong_count() > 0;
            if !live {
                self.bytes.set(self.bytes.get() - c.bytes.len());
            }
            live
        });
        while self.bytes.get() + bytes.len() > budget {
            let Some(oldest) = copies
                .iter()
                .min_by_key(|(_, c)| c.last_used.get())
                .map(|(k, _)| *k)
            else {
                break;
            };
            if let Some(c) = copies.remove(&oldest) {
                self.bytes.set(self.bytes.get() - c.bytes.len());
                stored.evicted += 1;
            }
        }
        self.bytes.set(self.bytes.get() + bytes.len());
        let copy = Copy {
            entry: Rc::downgrade(entry),
            bytes,
            last_used: Cell::new(self.tick()),
        };
        if let Some(old) = copies.insert((key(entry), coding), copy) {
            self.bytes.set(self.bytes.get() - old.bytes.len());
        }
        stored
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes.get()
    }

    fn tick(&self) -> u64 {
        self.clock.set(self.clock.get() + 1);
        self.clock.get()
    }
}

fn key(entry: &Rc<CachedFile>) -> usize {
    Rc::as_ptr(entry) as usize
}
