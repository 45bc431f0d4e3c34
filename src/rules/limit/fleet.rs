//! Rate zones shared by a fleet (`[cluster]`): each instance keeps limiting on its own
//! buckets, counts what it admits per key, and every sync period publishes the counts of busy
//! keys; the others add them to their own buckets ([`RateZone::add_remote`]). So a client
//! spread over N instances gets the zone's rate, not N times it, give or take what crosses
//! the fleet late (the bound is in `docs/fleet.md`).
//!
//! Two instances can only name the same key if they hash it alike: in a fleet a zone's seed
//! comes from a secret the fleet keeps in etcd ([`share_seeds`]) and the zone's name, so it is
//! the same on every instance and still unknown to clients. A count record names a key by its
//! home slot and fingerprint, which locate it in any zone of the same seed and size.
//!
//! # The count word (one per slot, only in shared zones)
//!
//! `count:32 | home offset:3 | hot:8 | age:4` (bits 0, 32, 40 and 48): requests admitted here
//! since the last sync (one relaxed add on the request path), how far the slot is from the key's
//! home, for how many more periods the key is published whatever its count (set when it is
//! busy here or a record says it is busy elsewhere: once one instance finds a key busy, all
//! report it), and over how many earlier periods a count under the threshold was kept (so a
//! receiver spreads its charge over as many seconds).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::OnceLock;

use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::{window, Home, Mode, Rate, RateZone, EXCESS_MAX, GEN_BITS, RATE_SLOT_BYTES};

const COUNT_MASK: u64 = 0xffff_ffff;
const OFFSET_SHIFT: u32 = 32;
const OFFSET_MASK: u64 = 0b111;
const HOT_SHIFT: u32 = 40;
const AGE_SHIFT: u32 = 48;
const AGE_MASK: u64 = 0xf;
/// The largest count a record carries (27 bits: the record's count field also holds the periods
/// and the busy flag).
pub const MAX_TALLY: u32 = (1 << 27) - 1;
const HOT_MASK: u64 = 0xff;
/// Sync periods a key stays published after it was last found busy.
pub const HOT_PERIODS: u64 = 10;

static SECRET: OnceLock<u64> = OnceLock::new();

/// This process is a fleet member whose rate zones hash keys with `secret` (the fleet's):
/// zones built from now on with the fleet scope are shared. Only the first call counts.
pub fn share_seeds(secret: u64) {
    let _ = SECRET.set(secret);
}

/// The seed of the zone `name` when it is shared with a fleet (`None` outside one).
pub fn seed_for(name: &str) -> Option<u64> {
    SECRET
        .get()
        .map(|secret| xxh3_64_with_seed(name.as_bytes(), *secret))
}

/// One key's requests admitted by one instance over one sync period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// The key's home slot.
    pub home: u32,
    /// The key's fingerprint in the zone (62 bits).
    pub fingerprint: u64,
    /// Requests admitted (at most [`MAX_TALLY`]).
    pub count: u32,
    /// The count reached the sender's threshold: receivers turn the key hot.
    pub busy: bool,
    /// The sync periods the count was taken over (1 to 16): receivers spread its charge over
    /// as many.
    pub periods: u8,
}

impl RateZone {
    /// A zone whose keys hash with `seed` (the fleet's, by [`seed_for`]) and whose admitted
    /// requests are counted per key for the fleet: `bytes / 24` slots, at least 8.
    pub fn shared(rate: Rate, bytes: usize, seed: u64) -> RateZone {
        RateZone::with_slots(rate, bytes / (RATE_SLOT_BYTES + 8), seed, true)
    }

    /// A check value of the zone's seed: records hashed with another seed (an instance that
    /// could not read the fleet's secret) name other keys and must not be applied.
    pub fn seed_check(&self) -> u64 {
        xxh3_64_with_seed(b"slipstream fleet zone", self.seed)
    }

    /// Whether the zone is shared with a fleet.
    pub fn is_shared(&self) -> bool {
        !self.counts.is_empty()
    }

    /// The requests a key may take here per second: [`Rate::per_ms_milli`] / 1000.
    pub fn per_second(&self) -> u64 {
        self.rate / 1000
    }

    /// Takes this period's counts: every key that admitted at least `threshold` requests here,
    /// or any while it is hot, goes to `out` (up to `max` records; the rest keep their counts
    /// for the next period). Scanning starts at `from` (vary it, so a full batch does not
    /// always leave out the same slots).
    pub fn tally(&self, threshold: u32, max: usize, from: usize, out: &mut Vec<Tally>) {
        let len = self.counts.len();
        for i in 0..len {
            if out.len() >= max {
                return;
            }
            let idx = (from + i) % len;
            let counts = &self.counts[idx];
            let word = counts.load(Relaxed);
            if word & COUNT_MASK == 0 && hot(word) == 0 {
                continue;
            }
            let key = self.slots[idx].key.load(Relaxed);
            // A count under the threshold of a key not hot stays for the next period (so
            // what is never published stays under the threshold); a published one is taken.
            let Ok(word) = counts.fetch_update(Relaxed, Relaxed, |w| {
                let count = w & COUNT_MASK;
                let publish = count > 0 && (count >= u64::from(threshold) || hot(w) > 0);
                let hot = if count >= u64::from(threshold) {
                    HOT_PERIODS
                } else {
                    hot(w).saturating_sub(1)
                };
                let (kept, age) = match (publish, count) {
                    (false, 1..) => (count, (age(w) + 1).min(AGE_MASK)),
                    _ => (0, 0),
                };
                Some(
                    (w & (OFFSET_MASK << OFFSET_SHIFT))
                        | (hot << HOT_SHIFT)
                        | (age << AGE_SHIFT)
                        | kept,
                )
            }) else {
                continue;
            };
            let count = (word & COUNT_MASK) as u32;
            if count == 0 || (count < threshold && hot(word) == 0) {
                continue;
            }
            // A slot that changed owner meanwhile: the count is dropped, not given to the
            // new key with the old one's home.
            if key == 0 || self.slots[idx].key.load(Relaxed) != key {
                continue;
            }
            let offset = ((word >> OFFSET_SHIFT) & OFFSET_MASK) as usize;
            out.push(Tally {
                home: ((idx + len - offset) % len) as u32,
                fingerprint: key >> GEN_BITS,
                count: count.min(MAX_TALLY),
                busy: count >= threshold,
                periods: age(word) as u8 + 1,
            });
        }
    }

    /// Part of another instance's count for a key, `milli` thousandths of a request: added to
    /// the key's bucket here (drained to `now_ms` first, no burst check); a busy key is
    /// published from here for a while. `false` when the record names a slot outside the zone
    /// or no slot could be had.
    pub fn add_remote(&self, tally: &Tally, milli: u64, now_ms: u64) -> bool {
        let start = tally.home as usize;
        if start >= self.slots.len() || milli == 0 {
            return false;
        }
        let fp = (tally.fingerprint & ((1 << (64 - GEN_BITS)) - 1)).max(1);
        let mode = Mode::Add {
            milli: milli.min(EXCESS_MAX),
            busy: tally.busy,
        };
        self.run_at(Home { start, fp }, now_ms, mode) != super::Outcome::Full
    }

    /// A new key took slot `idx`: its counts start over, with where its home is.
    pub(super) fn claimed(&self, idx: usize, home: Home) {
        if let Some(counts) = self.counts.get(idx) {
            let len = self.slots.len();
            let offset = window(home.start, len)
                .position(|i| i == idx)
                .unwrap_or_default() as u64;
            counts.store(offset << OFFSET_SHIFT, Relaxed);
        }
    }

    /// A request admitted in slot `idx` (counted), or another instance's count added there
    /// (the key turns hot).
    pub(super) fn counted(&self, idx: usize, mode: Mode) {
        let Some(counts) = self.counts.get(idx) else {
            return;
        };
        match mode {
            Mode::Check(_) | Mode::Commit => {
                counts.fetch_add(1, Relaxed);
            }
            Mode::Add { busy: false, .. } | Mode::Peek(_) => {}
            Mode::Add { busy: true, .. } => {
                let _ = counts.fetch_update(Relaxed, Relaxed, |w| {
                    Some((w & !(HOT_MASK << HOT_SHIFT)) | (HOT_PERIODS << HOT_SHIFT))
                });
            }
        }
    }
}

fn hot(word: u64) -> u64 {
    (word >> HOT_SHIFT) & HOT_MASK
}

fn age(word: u64) -> u64 {
    (word >> AGE_SHIFT) & AGE_MASK
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::limit::{Delay, RateRule, RateVerdict};

    const SEED: u64 = 0x5eed;

    fn nodelay(burst: u32) -> RateRule {
        RateRule {
            burst,
            delay: Delay::NoDelay,
        }
    }

    /// Another instance's record charged here whole, at `now`.
    #[test]
    fn a_count_kept_over_periods_says_so() {
        let a = RateZone::shared(Rate::per_second(100), 1 << 16, SEED);
        let rule = nodelay(1000);
        for period in 0..3 {
            for _ in 0..10 {
                a.check(b"slow", period * 1000, &rule);
            }
            if period < 2 {
                assert!(tallies(&a, 25).is_empty());
            }
        }
        // 30 over three periods, published once the threshold is reached, as three periods'.
        let sent = tallies(&a, 25);
        assert_eq!(
            (sent[0].count, sent[0].periods, sent[0].busy),
            (30, 3, true)
        );
        // The next count starts a period of its own.
        a.check(b"slow", 3000, &rule);
        assert_eq!(tallies(&a, 25)[0].periods, 1);
    }

    fn charge(zone: &RateZone, t: &Tally, now: u64) -> bool {
        zone.add_remote(t, u64::from(t.count) * 1000, now)
    }

    fn tallies(zone: &RateZone, threshold: u32) -> Vec<Tally> {
        let mut out = Vec::new();
        zone.tally(threshold, usize::MAX, 0, &mut out);
        out
    }

    #[test]
    fn another_instances_count_fills_the_bucket_here() {
        let a = RateZone::shared(Rate::per_second(1), 1 << 16, SEED);
        let b = RateZone::shared(Rate::per_second(1), 1 << 16, SEED);
        assert!(a.is_shared() && !RateZone::new(Rate::per_second(1), 1 << 16).is_shared());
        for _ in 0..5 {
            assert_eq!(a.check(b"client", 0, &nodelay(10)), RateVerdict::Pass);
        }
        let sent = tallies(&a, 1);
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].count, 5);
        // Taken: the next period starts from nothing.
        assert!(tallies(&a, 1).iter().all(|t| t.count == 0));
        assert!(charge(&b, &sent[0], 0));
        assert_eq!(b.bucket(b"client").map(|(excess, _)| excess), Some(5000));
        // 5 admitted elsewhere (each counted whole: a key's first request is not free here):
        // with burst 6, this instance has one request left now.
        assert_eq!(b.check(b"client", 0, &nodelay(6)), RateVerdict::Pass);
        assert!(matches!(
            b.check(b"client", 0, &nodelay(6)),
            RateVerdict::Reject { .. }
        ));
        // A zone hashing with another seed holds the key elsewhere.
        let other = RateZone::shared(Rate::per_second(1), 1 << 16, SEED + 1);
        charge(&other, &sent[0], 0);
        assert_eq!(other.bucket(b"client"), None);
    }

    #[test]
    fn a_remote_count_is_added_to_the_bucket_drained_to_now() {
        let zone = RateZone::shared(Rate::per_second(10), 1 << 16, SEED);
        let rule = nodelay(100);
        for _ in 0..11 {
            zone.check(b"k", 1_000, &rule);
        }
        assert_eq!(zone.bucket(b"k"), Some((10_000, 1_000)));
        let sent = tallies(&zone, 1);
        // 500 ms later 5 requests have drained; 3 came elsewhere.
        // Charged in two pieces (as the charging thread does, in tenths).
        zone.add_remote(&sent[0], 1_000, 1_500);
        zone.add_remote(&sent[0], 2_000, 1_500);
        assert_eq!(zone.bucket(b"k"), Some((8_000, 1_500)));
    }

    #[test]
    fn quiet_keys_are_published_only_once_another_instance_reports_them() {
        let a = RateZone::shared(Rate::per_second(100), 1 << 16, SEED);
        let b = RateZone::shared(Rate::per_second(100), 1 << 16, SEED);
        let rule = nodelay(1000);
        for _ in 0..3 {
            a.check(b"quiet", 0, &rule);
        }
        for _ in 0..40 {
            b.check(b"quiet", 0, &rule);
        }
        // Under the threshold: nothing from a; 40 from b, which makes the key hot on a.
        assert!(tallies(&a, 30).is_empty());
        let from_b = tallies(&b, 30);
        assert_eq!(from_b.len(), 1);
        charge(&a, &from_b[0], 0);
        for _ in 0..2 {
            a.check(b"quiet", 0, &rule);
        }
        let from_a = tallies(&a, 30);
        assert_eq!(from_a.len(), 1);
        // The 3 under the threshold were kept, not dropped.
        assert_eq!(from_a[0].count, 5);
        assert_eq!(
            (from_a[0].home, from_a[0].fingerprint),
            (from_b[0].home, from_b[0].fingerprint)
        );
        // b published it, so b goes on reporting it below the threshold too.
        b.check(b"quiet", 0, &rule);
        assert_eq!(tallies(&b, 30)[0].count, 1);
    }

    #[test]
    fn records_find_keys_away_from_their_home_slot() {
        // Eight slots: every key's window is the whole zone, so most keys sit off their home.
        let a = RateZone::shared(Rate::per_second(1), 0, SEED);
        let b = RateZone::shared(Rate::per_second(1), 0, SEED);
        let keys: Vec<String> = (0..6).map(|i| format!("key{i}")).collect();
        // b holds them in another order, so they sit in other slots there.
        for k in keys.iter().rev() {
            b.check(k.as_bytes(), 0, &nodelay(100));
        }
        for (i, k) in keys.iter().enumerate() {
            for _ in 0..=i {
                a.check(k.as_bytes(), 0, &nodelay(100));
            }
        }
        for t in tallies(&a, 1) {
            charge(&b, &t, 0);
        }
        for (i, k) in keys.iter().enumerate() {
            // b's own first request (excess 0) plus a's i + 1.
            assert_eq!(
                b.bucket(k.as_bytes()).map(|(e, _)| e),
                Some((i as u64 + 1) * 1000),
                "{k}"
            );
        }
        let outside = Tally {
            home: 8,
            fingerprint: 1,
            count: 1,
            busy: true,
            periods: 1,
        };
        assert!(!charge(&b, &outside, 0));
    }
}
