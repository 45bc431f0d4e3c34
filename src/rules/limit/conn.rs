//! `limit_conn`'s zone: requests in flight per key, one 8-byte slot per key
//! (`fingerprint:48 | count:16`) in the window of its home slot, claimed, counted and
//! released by single atomic operations (see the parent module for the design).

use super::*;

/// Why `limit_conn` refused a request; either way the caller answers the limit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnRefused {
    /// The key already has `max` requests in flight.
    OverLimit,
    /// Every slot of the key's window holds a key with requests in flight.
    Full,
}

/// A `limit_conn_zone`: requests in flight per key, shared by every worker (`Send +
/// Sync`; hold it in an `Arc`, which guards keep a clone of).
pub struct ConnZone {
    seed: u64,
    /// `fingerprint << 16 | count`; 0 is an empty slot.
    pub(super) slots: Box<[AtomicU64]>,
    full: AtomicU64,
}

impl fmt::Debug for ConnZone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnZone")
            .field("slots", &self.slots.len())
            .finish_non_exhaustive()
    }
}

/// A conn slot operation's result.
enum Got {
    Held(usize),
    Over,
    Full,
    Rescan,
}

impl ConnZone {
    /// A zone of `bytes` (`zone=NAME:SIZE`): `bytes / 8` slots, at least 8.
    pub fn new(bytes: usize) -> ConnZone {
        let len = (bytes / CONN_SLOT_BYTES).max(WINDOW);
        ConnZone {
            seed: fastrand::u64(..),
            slots: (0..len).map(|_| AtomicU64::new(0)).collect(),
            full: AtomicU64::new(0),
        }
    }

    /// How many keys the zone can hold.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// How many requests were refused with `Full` (a sign the zone is too small).
    pub fn full(&self) -> u64 {
        self.full.load(Relaxed)
    }

    /// The key's requests in flight now, for status pages and tests.
    pub fn in_flight(&self, key: &[u8]) -> u32 {
        let home = home(self.seed, key, self.slots.len(), 64 - COUNT_BITS);
        self.find(home)
            .map_or(0, |idx| (self.slots[idx].load(Acquire) & COUNT_MASK) as u32)
    }

    /// One `limit_conn NAME max` for a request with `key`: counts it in flight until the
    /// guard drops, or refuses it when `max` (capped at [`MAX_CONN`]) are already in
    /// flight. An empty key is not limited (the guard holds nothing). For several
    /// `limit_conn`, keep every guard and drop them all on the first refusal.
    pub fn acquire(self: &Arc<Self>, key: &[u8], max: u32) -> Result<ConnGuard, ConnRefused> {
        if key.is_empty() {
            return Ok(ConnGuard { held: None });
        }
        let max = u64::from(max.min(MAX_CONN));
        if max == 0 {
            return Err(ConnRefused::OverLimit);
        }
        let home = home(self.seed, key, self.slots.len(), 64 - COUNT_BITS);
        for _ in 0..MAX_ATTEMPTS {
            let got = match self.find(home) {
                Some(idx) => self.increment(idx, home.fp, max),
                None => self.claim(home, max),
            };
            match got {
                Got::Held(idx) => {
                    return Ok(ConnGuard {
                        held: Some((Arc::clone(self), idx)),
                    })
                }
                Got::Over => return Err(ConnRefused::OverLimit),
                Got::Full => break,
                Got::Rescan => {}
            }
        }
        self.full.fetch_add(1, Relaxed);
        Err(ConnRefused::Full)
    }

    fn find(&self, home: Home) -> Option<usize> {
        window(home.start, self.slots.len())
            .find(|&idx| self.slots[idx].load(Acquire) >> COUNT_BITS == home.fp)
    }

    /// Counts one more request in the key's slot `idx`, if under `max`.
    fn increment(&self, idx: usize, fp: u64, max: u64) -> Got {
        let slot = &self.slots[idx];
        let mut seen = slot.load(Acquire);
        loop {
            if seen >> COUNT_BITS != fp {
                return Got::Rescan;
            }
            if seen & COUNT_MASK >= max {
                return Got::Over;
            }
            match slot.compare_exchange_weak(seen, seen + 1, AcqRel, Acquire) {
                Ok(_) => return Got::Held(idx),
                Err(actual) => seen = actual,
            }
        }
    }

    /// Gives a new key the first slot with nothing in flight, counting its first request.
    fn claim(&self, home: Home, max: u64) -> Got {
        for idx in window(home.start, self.slots.len()) {
            let slot = &self.slots[idx];
            let seen = slot.load(SeqCst);
            if seen >> COUNT_BITS == home.fp {
                return self.increment(idx, home.fp, max);
            }
            if seen & COUNT_MASK != 0 {
                continue;
            }
            let mine = (home.fp << COUNT_BITS) | 1;
            match slot.compare_exchange(seen, mine, SeqCst, SeqCst) {
                Ok(_) => return self.settle(home, idx),
                Err(actual) if actual >> COUNT_BITS == home.fp => {
                    return self.increment(idx, home.fp, max)
                }
                Err(_) => {}
            }
        }
        Got::Full
    }

    /// After claiming `idx`: if the key is also in another slot (another worker claimed
    /// elsewhere at the same instant), give ours back, emptying it unless someone joined
    /// it, and look again, so the key is counted in one place. Of two such claimers at
    /// least one sees the other (both write, then read, sequentially consistent).
    fn settle(&self, home: Home, idx: usize) -> Got {
        for other in window(home.start, self.slots.len()) {
            let word = self.slots[other].load(SeqCst);
            if other != idx && word >> COUNT_BITS == home.fp {
                let alone = (home.fp << COUNT_BITS) | 1;
                let slot = &self.slots[idx];
                if slot.compare_exchange(alone, 0, SeqCst, SeqCst).is_err() {
                    slot.fetch_sub(1, SeqCst);
                }
                return Got::Rescan;
            }
        }
        Got::Held(idx)
    }
}

/// One request counted in flight by [`ConnZone::acquire`]; dropping it (when the request
/// ends) releases it.
pub struct ConnGuard {
    held: Option<(Arc<ConnZone>, usize)>,
}

impl ConnGuard {
    /// Whether this guard counts anything (false for an empty key).
    pub fn is_counted(&self) -> bool {
        self.held.is_some()
    }
}

impl fmt::Debug for ConnGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnGuard")
            .field("slot", &self.held.as_ref().map(|(_, idx)| *idx))
            .finish()
    }
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        if let Some((zone, idx)) = self.held.take() {
            // The slot cannot change owner while its count is above 0, and ours is in it.
            zone.slots[idx].fetch_sub(1, Release);
        }
    }
}
