//! Request rate and concurrency limits, nginx's `limit_req` and `limit_conn`: the state and
//! its arithmetic, socket-free and clock-injected (every call takes `now_ms`, any monotonic
//! millisecond clock, e.g. the worker's cached loop time). Wiring it into the request path
//! (status codes, `Retry-After`, sleeping a delayed request, dry run) is the caller's.
//!
//! # Semantics (nginx 1.2x `ngx_http_limit_req_module.c`, `ngx_http_limit_conn_module.c`)
//!
//! - A rate zone keeps, per key, `excess` in thousandths of a request and `last` in ms; the
//!   zone's rate is nginx's integer `rate` ([`Rate::per_ms_milli`]: `10r/s` is 10 000,
//!   `30r/m` is 500). A request computes `excess - rate * ms / 1000 + 1000`, floored at 0,
//!   where `ms = now - last` (a clock up to 60 s behind counts as 0; nginx's `ms = 1` for
//!   one further behind is not ported: the clock is monotonic, and on the 36-bit clock
//!   that reads as time forward). Over `burst * 1000` it
//!   is rejected and **nothing is stored**; otherwise the new excess is stored and `last`
//!   moves to now when `ms != 0`. The first request of a key stores excess 0 and passes.
//! - An accepted request whose excess is over `delay * 1000` waits
//!   `(excess - delay * 1000) * 1000 / rate` ms (integer, so a wait that rounds to 0 is
//!   none); `nodelay` never waits; nginx's default (no `delay=`) is `delay=0`.
//! - Several `limit_req` on one request: [`check_many`] looks all up in order without
//!   storing, stops at the first that rejects (then no state changed anywhere), else
//!   commits all; the longest delay wins. An empty key is not limited (nginx skips it).
//! - A conn zone counts requests in flight per key; at `max` another is refused. Release
//!   is the [`ConnGuard`]'s drop. Several `limit_conn`: acquire in order, keep the guards;
//!   on a refusal drop the ones already held (nginx's `cleanup_all`).
//! - Unlike nginx, keys of any length are limited: nginx skips keys over 65 535 (req) or
//!   255 (conn) bytes, which nginx-tests marks as a bug to fix; no key bytes are stored here.
//!
//! In a fleet (`[cluster]`) a zone of scope `"fleet"` is shared with the other instances:
//! [`fleet`] seeds its hash from the fleet, counts what each key is admitted and adds the
//! others' counts to its buckets.
//!
//! # One table per zone, shared by all workers
//!
//! With `SO_REUSEPORT` one client's connections land on several workers, so per-worker
//! buckets would hand a client N times its rate. Each zone is one fixed array of slots
//! (`Send + Sync`, held in an `Arc` by the config snapshot) updated with compare-exchange
//! loops on `AtomicU64`s: no lock. A key hashes (xxh3-128 with a random per-zone seed, so
//! clients cannot aim at slots or collisions) to a home slot; it may live in that slot or
//! the next seven (wrapping): its window. The high 64 bits pick the home, the low 64 give
//! the fingerprint stored in the slot (62 bits for rate zones, 48 for conn zones).
//!
//! - Rate slot, 16 bytes: `key = fingerprint:62 | gen:2`, `state = gen:2 | excess:26 |
//!   last:36`. Every request is one compare-exchange of `state` from the exact value it
//!   read to the value nginx's arithmetic gives, so one key is exact across all threads
//!   (its requests are linearised by that word, like nginx's mutex). `gen` counts the slot's
//!   owners mod 4: the state belongs to the key only when its gen equals the key word's;
//!   one behind means a new owner has not written its first state yet (anyone with that
//!   key finishes it, so no one waits). Excess saturates at 2^26-1 thousandths, so bursts
//!   are capped at [`MAX_BURST`]; time is `now_ms mod 2^36` and only differences are read,
//!   so the origin does not matter and it wraps after 2^36 ms (795 days).
//! - Conn slot, 8 bytes: `fingerprint:48 | count:16` in one word (nginx caps limits at
//!   65 535), so claiming, counting and releasing are single atomic operations; a slot
//!   with count > 0 is never taken, which is what lets a guard release by slot index.
//!
//! Claiming: a key not in its window takes the first slot that is empty or whose state
//! is idle (rate: the next request would store excess 0, exactly a new key's state, so
//! reuse loses nothing; conn: count 0). The key word is compare-exchanged first (so two
//! workers claiming one slot for different keys: one wins, the other sees a foreign key
//! and looks again, writing nothing; for the same key: the loser joins the winner's slot).
//!
//! Full window. Rate zones do as nginx does when its zone is full and evict a state
//! (counted in [`RateZone::evictions`]): the window's slot with the least left to drain
//! (the oldest of equals), whose key then starts over as new and so gains at most that
//! remainder plus one request. Under a flood of distinct keys limits loosen instead of
//! every new client being refused. nginx evicts its least recently used node, bumping a
//! node on every lookup, rejected ones included; `last` here moves only on accepted
//! requests, so oldest-`last` would evict a client hammering while rejected, while
//! least-to-drain keeps it. Conn zones cannot evict (in-flight requests hold their slots)
//! and answer [`ConnRefused::Full`], as nginx answers its limit status when it cannot
//! allocate a node. [`RateVerdict::Full`] only comes when a claim kept losing races for
//! [`MAX_ATTEMPTS`] rescans.
//!
//! # Sizing and memory per key
//!
//! Rate zones take `bytes / 16` slots, conn zones `bytes / 8` (at least 8): a 1m zone holds
//! 65 536 rate keys or 131 072 conn keys (nginx: about 16 000 64-byte states per megabyte).
//! Windows start filling past about half occupancy (a window is full with probability about
//! `load^8`), so plan on half the slots for keys active at once; idle keys cost nothing.
//!
//! # Worst cases (all need two workers inside the same few instructions)
//!
//! - A key whose idle slot is taken by another key at the very moment it comes back: its
//!   racing request is judged on its own (idle) state, then that accounting is lost, so
//!   the key can get one request per racing worker more than nginx would give.
//! - Two workers creating the same new key while its window changes under them (a slot
//!   turning idle between their two scans) can put it in two slots: each first request
//!   passes, later lookups settle on the first slot, the other goes idle. Rate zones: one
//!   extra request per racing worker, once. Conn zones check for this after claiming:
//!   whoever sees another copy empties its slot and looks again (of two, at least one
//!   sees the other), so the limit holds unless a third request joined the slot being
//!   given back in that same instant: then the key is over its limit by that request
//!   until it ends.
//! - Two keys sharing a fingerprint in one window share a bucket: per new key about
//!   8 / 2^62 (rate) or 8 / 2^48 (conn), and the seed makes it unaimable.
//! - A thread stalled mid-update while its slot changes owner a multiple of 4 times and its
//!   exact state word reappears could apply one request to the new owner; not reachable
//!   in practice (the full 64-bit state, including `last`, must repeat).
//! - A key silent for exactly a multiple of 795 days reads its old state as recent.
//! - Shared zones ([`fleet`]): a request joining a new key's slot while it is being claimed
//!   may go uncounted for the fleet, and a slot taken from an idle key drops that key's count
//!   not yet published (under the threshold, so at most a second's share).

use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use std::sync::Arc;
use std::time::Duration;

use xxhash_rust::xxh3::xxh3_128_with_seed;

/// How many slots a key may live in: its home slot and the next seven.
const WINDOW: usize = 8;
/// Rescans (after losing a claim race) before a check gives up with `Full`.
pub const MAX_ATTEMPTS: usize = 8;
/// The largest `burst` honoured: larger ones act as this (the excess field's width).
pub const MAX_BURST: u32 = 65_535;
/// The largest `limit_conn` honoured (nginx refuses larger ones at load).
pub const MAX_CONN: u32 = 65_535;
/// The largest rate [`parse_rate`] accepts, in [`Rate::per_ms_milli`] units (10^9 r/s).
const MAX_RATE: u64 = 1_000_000_000_000;

const RATE_SLOT_BYTES: usize = 16;
const CONN_SLOT_BYTES: usize = 8;
const LAST_BITS: u32 = 36;
const LAST_MASK: u64 = (1 << LAST_BITS) - 1;
const EXCESS_BITS: u32 = 26;
const EXCESS_MAX: u64 = (1 << EXCESS_BITS) - 1;
const GEN_SHIFT: u32 = LAST_BITS + EXCESS_BITS;
const GEN_MASK: u64 = 3;
const GEN_BITS: u32 = 2;
const COUNT_BITS: u32 = 16;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// nginx reads a clock up to this far behind a state's `last` as no time passed.
const SKEW_MS: u64 = 60_000;

/// A zone's rate, in nginx's own integer unit, so its arithmetic can be ported as is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// nginx's `rate`: requests per second × 1000 (thousandths of a request per ms,
    /// × 1000): `10r/s` is 10 000, `30r/m` is 500 (integer division, like nginx). Over
    /// `ms` milliseconds a bucket drains `per_ms_milli * ms / 1000` thousandths.
    pub per_ms_milli: u64,
}

impl Rate {
    /// `N r/s`.
    pub fn per_second(n: u64) -> Rate {
        Rate {
            per_ms_milli: n.saturating_mul(1000),
        }
    }

    /// `N r/m`.
    pub fn per_minute(n: u64) -> Rate {
        Rate {
            per_ms_milli: n.saturating_mul(1000) / 60,
        }
    }
}

/// Parses `limit_req_zone`'s `rate=` value: `10r/s`, `30r/m`, or a bare number (per second,
/// as nginx reads it). The number must be a positive decimal.
pub fn parse_rate(text: &str) -> Result<Rate, String> {
    let (digits, per_minute) = if let Some(d) = text.strip_suffix("r/s") {
        (d, false)
    } else if let Some(d) = text.strip_suffix("r/m") {
        (d, true)
    } else {
        (text, false)
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "invalid rate {text:?}: expected a number of requests per second or minute, like \"10r/s\" or \"30r/m\""
        ));
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("invalid rate {text:?}: too large"))?;
    if n == 0 {
        return Err(format!("invalid rate {text:?}: must be above 0"));
    }
    let rate = if per_minute {
        Rate::per_minute(n)
    } else {
        Rate::per_second(n)
    };
    if rate.per_ms_milli > MAX_RATE {
        return Err(format!("invalid rate {text:?}: too large"));
    }
    Ok(rate)
}

/// When an accepted request over the rate is served (`limit_req`'s `nodelay` / `delay=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delay {
    /// `nodelay`: everything within the burst is served at once.
    NoDelay,
    /// `delay=N` (nginx's default is 0): the first N requests over the rate are served at
    /// once, later ones wait until they would fit.
    After(u32),
}

/// One `limit_req` directive's own parameters (the zone brings the rate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateRule {
    /// `burst=N`: requests over the rate accepted (served or delayed) before rejecting.
    pub burst: u32,
    /// `nodelay` or `delay=N`.
    pub delay: Delay,
}

impl Default for RateRule {
    /// nginx's `limit_req zone=NAME`: no burst, every excess request delayed.
    fn default() -> RateRule {
        RateRule {
            burst: 0,
            delay: Delay::After(0),
        }
    }
}

impl RateRule {
    fn burst_milli(&self) -> u64 {
        u64::from(self.burst.min(MAX_BURST)) * 1000
    }

    fn delay_milli(&self) -> u64 {
        match self.delay {
            Delay::NoDelay => u64::MAX,
            Delay::After(n) => u64::from(n) * 1000,
        }
    }
}

/// What `limit_req` says about one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateVerdict {
    /// Serve now.
    Pass,
    /// Serve after this wait (the request is already counted).
    Delay(Duration),
    /// Over the burst: answer the limit status (nginx: 503 by default). Nothing was counted.
    Reject {
        /// When one more request would fit, rounded up to whole seconds, at least 1 s:
        /// ready for a `Retry-After` header.
        retry_after: Duration,
    },
    /// No slot could be had for the key (see the module notes): answer the limit status,
    /// as nginx does when it cannot allocate a node.
    Full,
}

/// One `limit_req` of a request, for [`check_many`].
#[derive(Debug, Clone, Copy)]
pub struct RateLimit<'a> {
    /// The directive's zone.
    pub zone: &'a RateZone,
    /// The zone's key evaluated for this request (empty: this limit does not apply).
    pub key: &'a [u8],
    /// The directive's burst and delay.
    pub rule: &'a RateRule,
}

/// [`check_many`]'s answer, and which limit gave it (for nginx's "by zone" log line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManyVerdict {
    /// The request's verdict.
    pub verdict: RateVerdict,
    /// The index in the list of the limit that rejected, was full or set the (longest)
    /// delay; `None` for `Pass`.
    pub by: Option<usize>,
}

/// Applies every `limit_req` of a request the way nginx does: each limit with a key is
/// looked up in order without storing anything; the first over its burst rejects and then
/// no zone has changed. Otherwise the last is checked and stored in one step and the
/// earlier ones are stored (recomputed, without a burst check, as nginx's account step
/// does); the longest delay wins. One zone should appear at most once (nginx refuses
/// duplicates at load). `limit_req_dry_run` needs nothing here: treat `Reject` and
/// `Delay` as `Pass`; the stored state is what nginx's dry run stores.
pub fn check_many(limits: &[RateLimit<'_>], now_ms: u64) -> ManyVerdict {
    let pass = ManyVerdict {
        verdict: RateVerdict::Pass,
        by: None,
    };
    let Some(last) = limits.iter().rposition(|l| !l.key.is_empty()) else {
        return pass;
    };
    for (i, l) in limits[..last].iter().enumerate() {
        if l.key.is_empty() {
            continue;
        }
        if let Outcome::Rejected(ms) = l.zone.run(l.key, now_ms, Mode::Peek(l.rule.burst_milli())) {
            return rejected(ms, i);
        }
    }
    let l = &limits[last];
    let mut longest = match l.zone.run(l.key, now_ms, Mode::Check(l.rule.burst_milli())) {
        Outcome::Accepted(excess) => delay_ms(excess, l.rule, l.zone.rate),
        Outcome::Rejected(ms) => return rejected(ms, last),
        Outcome::Full => {
            return ManyVerdict {
                verdict: RateVerdict::Full,
                by: Some(last),
            }
        }
    };
    let mut by = last;
    for (i, l) in limits[..last].iter().enumerate().rev() {
        if l.key.is_empty() {
            continue;
        }
        // A `Full` here (practically unreachable) leaves that limit uncounted.
        if let Outcome::Accepted(excess) = l.zone.run(l.key, now_ms, Mode::Commit) {
            let ms = delay_ms(excess, l.rule, l.zone.rate);
            if ms > longest {
                longest = ms;
                by = i;
            }
        }
    }
    if longest == 0 {
        return pass;
    }
    ManyVerdict {
        verdict: RateVerdict::Delay(Duration::from_millis(longest)),
        by: Some(by),
    }
}

fn rejected(retry_ms: u64, by: usize) -> ManyVerdict {
    ManyVerdict {
        verdict: RateVerdict::Reject {
            retry_after: retry_after(retry_ms),
        },
        by: Some(by),
    }
}

/// `Retry-After` from an exact wait: whole seconds, rounded up, at least one.
fn retry_after(ms: u64) -> Duration {
    Duration::from_secs(ms.div_ceil(1000).max(1))
}

/// nginx's wait for an accepted request with this excess.
fn delay_ms(excess: u64, rule: &RateRule, rate: u64) -> u64 {
    let free = rule.delay_milli();
    if excess <= free {
        0
    } else {
        (excess - free) * 1000 / rate
    }
}

/// Where a key lives in a zone: its home slot and its fingerprint (never 0: 0 is empty).
#[derive(Debug, Clone, Copy)]
struct Home {
    start: usize,
    fp: u64,
}

fn home(seed: u64, key: &[u8], slots: usize, fp_bits: u32) -> Home {
    let h = xxh3_128_with_seed(key, seed);
    let start = (((h >> 64) * slots as u128) >> 64) as usize;
    let fp = ((h as u64) >> (64 - fp_bits)).max(1);
    Home { start, fp }
}

/// A key's window: its home slot and the next `WINDOW - 1`, wrapping (`len >= WINDOW`).
fn window(start: usize, len: usize) -> impl Iterator<Item = usize> {
    (start..start + WINDOW).map(move |i| if i >= len { i - len } else { i })
}

/// Milliseconds from `last` to `now` on the 36-bit clock; a clock up to 60 s behind
/// (another worker's older cached time) reads as 0, as in nginx.
fn elapsed(now: u64, last: u64) -> u64 {
    let diff = now.wrapping_sub(last) & LAST_MASK;
    if diff > LAST_MASK - SKEW_MS {
        0
    } else {
        diff
    }
}

/// One rate slot's state word, unpacked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bucket {
    gen: u64,
    excess: u64,
    last: u64,
}

impl Bucket {
    fn unpack(word: u64) -> Bucket {
        Bucket {
            gen: word >> GEN_SHIFT,
            excess: (word >> LAST_BITS) & EXCESS_MAX,
            last: word & LAST_MASK,
        }
    }

    fn pack(self) -> u64 {
        ((self.gen & GEN_MASK) << GEN_SHIFT)
            | (self.excess.min(EXCESS_MAX) << LAST_BITS)
            | (self.last & LAST_MASK)
    }

    /// nginx's step for a request at `now`: the excess it would store, and `ms`.
    fn step(self, now: u64, rate: u64) -> (u64, u64) {
        let ms = elapsed(now, self.last);
        let drained = rate.saturating_mul(ms) / 1000;
        ((self.excess + 1000).saturating_sub(drained), ms)
    }

    /// [`Mode::Add`]'s step: the excess drained to `now`, plus `add`; and `ms`.
    fn drain(self, now: u64, rate: u64, add: u64) -> (u64, u64) {
        let ms = elapsed(now, self.last);
        let drained = rate.saturating_mul(ms) / 1000;
        (self.excess.saturating_sub(drained).saturating_add(add), ms)
    }

    /// Milliseconds from `now` until a request would fit within `burst` (at least 1).
    fn retry_ms(self, now: u64, rate: u64, burst: u64) -> u64 {
        let owed = (self.excess + 1000).saturating_sub(burst);
        let since_last = (owed * 1000).div_ceil(rate);
        since_last.saturating_sub(elapsed(now, self.last)).max(1)
    }
}

/// What a rate lookup does with the state it finds (bursts in thousandths).
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// Compare with the burst, store nothing (an earlier limit of several).
    Peek(u64),
    /// Compare with the burst and store if within it (one limit, or the last of several).
    Check(u64),
    /// Store unconditionally (an earlier limit, once all have passed).
    Commit,
    /// Add requests other fleet members admitted (`milli` thousandths), after draining to
    /// now: no burst check, nothing counted as admitted here; `busy` (the sender found the key
    /// over its threshold) makes the key hot here.
    Add { milli: u64, busy: bool },
}

impl Mode {
    /// The thousandths a new key's first state starts with.
    fn added(self) -> u64 {
        match self {
            Mode::Add { milli, .. } => milli,
            _ => 0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Within the burst, with this excess (stored unless peeking).
    Accepted(u64),
    /// Over the burst; a request fits again in this many ms.
    Rejected(u64),
    Full,
}

/// A slot operation's result: done, or the slot changed owner and the window must be
/// looked at again.
enum Step {
    Done(Outcome),
    Rescan,
}

/// Where a new key goes.
enum Choice {
    /// The key appeared meanwhile (another worker claimed it): use that slot.
    Join(usize, u64),
    /// Take this slot, seen with this key word and state.
    Take {
        idx: usize,
        key: u64,
        state: u64,
        evict: bool,
    },
    /// Every slot is changing owner right now.
    Busy,
}

#[derive(Default)]
struct RateSlot {
    /// `fingerprint << 2 | gen`; 0 is an empty slot.
    key: AtomicU64,
    /// [`Bucket`], packed.
    state: AtomicU64,
}

/// A `limit_req_zone`: the buckets of all its keys, shared by every worker and every
/// location using the zone (`Send + Sync`; hold it in an `Arc`).
pub struct RateZone {
    rate: u64,
    seed: u64,
    slots: Box<[RateSlot]>,
    /// Per slot, in a zone shared with a fleet ([`fleet`]): requests admitted since the last
    /// sync, where the key's home is, and how long to keep publishing it. Empty otherwise.
    counts: Box<[AtomicU64]>,
    evictions: AtomicU64,
    full: AtomicU64,
}

impl fmt::Debug for RateZone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateZone")
            .field("rate", &self.rate)
            .field("slots", &self.slots.len())
            .finish_non_exhaustive()
    }
}

impl RateZone {
    /// A zone of `bytes` (`zone=NAME:SIZE`): `bytes / 16` slots, at least 8.
    pub fn new(rate: Rate, bytes: usize) -> RateZone {
        RateZone::with_slots(rate, bytes / RATE_SLOT_BYTES, fastrand::u64(..), false)
    }

    /// A zone of `len` slots (at least 8) hashing with `seed`; `counted`: with a count word
    /// per slot, for a fleet ([`fleet`]).
    fn with_slots(rate: Rate, len: usize, seed: u64, counted: bool) -> RateZone {
        let len = len.max(WINDOW);
        RateZone {
            rate: rate.per_ms_milli.max(1),
            seed,
            slots: (0..len).map(|_| RateSlot::default()).collect(),
            counts: (0..if counted { len } else { 0 })
                .map(|_| AtomicU64::new(0))
                .collect(),
            evictions: AtomicU64::new(0),
            full: AtomicU64::new(0),
        }
    }

    /// The zone's rate.
    pub fn rate(&self) -> Rate {
        Rate {
            per_ms_milli: self.rate,
        }
    }

    /// How many keys the zone can hold.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// How many keys lost their state to make room (a sign the zone is too small).
    pub fn evictions(&self) -> u64 {
        self.evictions.load(Relaxed)
    }

    /// How many checks answered `Full`.
    pub fn full(&self) -> u64 {
        self.full.load(Relaxed)
    }

    /// One `limit_req` for a request with `key` at `now_ms`: checks, and counts the
    /// request unless rejected. An empty key is not limited.
    pub fn check(&self, key: &[u8], now_ms: u64, rule: &RateRule) -> RateVerdict {
        if key.is_empty() {
            return RateVerdict::Pass;
        }
        match self.run(key, now_ms, Mode::Check(rule.burst_milli())) {
            Outcome::Accepted(excess) => match delay_ms(excess, rule, self.rate) {
                0 => RateVerdict::Pass,
                ms => RateVerdict::Delay(Duration::from_millis(ms)),
            },
            Outcome::Rejected(ms) => RateVerdict::Reject {
                retry_after: retry_after(ms),
            },
            Outcome::Full => RateVerdict::Full,
        }
    }

    fn run(&self, key: &[u8], now: u64, mode: Mode) -> Outcome {
        self.run_at(
            home(self.seed, key, self.slots.len(), 64 - GEN_BITS),
            now,
            mode,
        )
    }

    fn run_at(&self, home: Home, now: u64, mode: Mode) -> Outcome {
        for _ in 0..MAX_ATTEMPTS {
            let step = match self.find(home) {
                Some((idx, key)) => self.update(idx, key, now, mode),
                // A key with no state is a new key: it would pass.
                None if matches!(mode, Mode::Peek(_)) => Step::Done(Outcome::Accepted(0)),
                None => self.claim(home, now, mode),
            };
            if let Step::Done(outcome) = step {
                return outcome;
            }
        }
        self.full.fetch_add(1, Relaxed);
        Outcome::Full
    }

    /// The first slot of the window holding the key, with its key word.
    fn find(&self, home: Home) -> Option<(usize, u64)> {
        window(home.start, self.slots.len()).find_map(|idx| {
            let key = self.slots[idx].key.load(Acquire);
            (key >> GEN_BITS == home.fp).then_some((idx, key))
        })
    }

    /// Applies one request to the key's slot `idx`, last seen with key word `key`.
    fn update(&self, idx: usize, key: u64, now: u64, mode: Mode) -> Step {
        let slot = &self.slots[idx];
        let gen = key & GEN_MASK;
        let mut seen = slot.state.load(Acquire);
        loop {
            if slot.key.load(Acquire) != key {
                return Step::Rescan;
            }
            let old = Bucket::unpack(seen);
            let new = if old.gen == gen {
                let (excess, ms) = match mode {
                    Mode::Add { milli, .. } => old.drain(now, self.rate, milli),
                    _ => old.step(now, self.rate),
                };
                match mode {
                    Mode::Peek(burst) | Mode::Check(burst) if excess > burst => {
                        let retry = old.retry_ms(now, self.rate, burst);
                        return Step::Done(Outcome::Rejected(retry));
                    }
                    Mode::Peek(_) => return Step::Done(Outcome::Accepted(excess)),
                    Mode::Check(_) | Mode::Commit | Mode::Add { .. } => {}
                }
                let last = if ms == 0 { old.last } else { now };
                Bucket { gen, excess, last }
            } else if old.gen == (gen + GEN_MASK) & GEN_MASK {
                // Claimed for this key, first state not written yet: this request is the
                // key's first.
                if let Mode::Peek(_) = mode {
                    return Step::Done(Outcome::Accepted(0));
                }
                Bucket {
                    gen,
                    excess: mode.added(),
                    last: now,
                }
            } else {
                return Step::Rescan;
            };
            let word = new.pack();
            if word == seen {
                self.counted(idx, mode);
                return Step::Done(Outcome::Accepted(new.excess));
            }
            match slot
                .state
                .compare_exchange_weak(seen, word, AcqRel, Acquire)
            {
                Ok(_) => {
                    self.counted(idx, mode);
                    return Step::Done(Outcome::Accepted(new.excess));
                }
                Err(actual) => seen = actual,
            }
        }
    }

    /// Gives a new key a slot and counts its first request there.
    fn claim(&self, home: Home, now: u64, mode: Mode) -> Step {
        let (idx, key, mut seen, evict) = match self.choose(home, now) {
            Choice::Join(idx, key) => return self.update(idx, key, now, mode),
            Choice::Busy => return Step::Rescan,
            Choice::Take {
                idx,
                key,
                state,
                evict,
            } => (idx, key, state, evict),
        };
        let slot = &self.slots[idx];
        let gen = (key + 1) & GEN_MASK;
        let mine = (home.fp << GEN_BITS) | gen;
        if let Err(actual) = slot.key.compare_exchange(key, mine, SeqCst, SeqCst) {
            if actual >> GEN_BITS == home.fp {
                return self.update(idx, actual, now, mode);
            }
            return Step::Rescan;
        }
        if evict {
            self.evictions.fetch_add(1, Relaxed);
        }
        self.claimed(idx, home);
        let first = Bucket {
            gen,
            excess: mode.added(),
            last: now,
        };
        loop {
            match slot
                .state
                .compare_exchange(seen, first.pack(), SeqCst, SeqCst)
            {
                Ok(_) => {
                    self.counted(idx, mode);
                    return Step::Done(Outcome::Accepted(first.excess));
                }
                // Another worker with this key wrote the first state: count ours after it.
                Err(actual) if Bucket::unpack(actual).gen == gen => {
                    return self.update(idx, mine, now, mode)
                }
                // The previous owner's last update, racing the claim: overwritten.
                Err(actual) if Bucket::unpack(actual).gen == key & GEN_MASK => seen = actual,
                Err(_) => return Step::Rescan,
            }
        }
    }

    /// Picks the slot for a new key: the first empty or idle one, else (evicted) the one
    /// with the least left to drain, the oldest of those: the state whose loss gives its
    /// key the fewest free requests.
    fn choose(&self, home: Home, now: u64) -> Choice {
        let mut seen = [(0usize, 0u64, 0u64); WINDOW];
        for (i, idx) in window(home.start, self.slots.len()).enumerate() {
            let slot = &self.slots[idx];
            let key = slot.key.load(SeqCst);
            if key >> GEN_BITS == home.fp {
                return Choice::Join(idx, key);
            }
            seen[i] = (idx, key, slot.state.load(SeqCst));
        }
        // (index in `seen`, (excess a request would store now, time not used, reversed))
        let mut cheapest: Option<(usize, (u64, u64))> = None;
        for (i, &(idx, key, state)) in seen.iter().enumerate() {
            let b = Bucket::unpack(state);
            if b.gen != key & GEN_MASK {
                continue;
            }
            let left = b.step(now, self.rate).0;
            if key == 0 || left == 0 {
                return Choice::Take {
                    idx,
                    key,
                    state,
                    evict: false,
                };
            }
            let rank = (left, u64::MAX - elapsed(now, b.last));
            if cheapest.is_none_or(|(_, r)| rank < r) {
                cheapest = Some((i, rank));
            }
        }
        match cheapest {
            Some((i, _)) => Choice::Take {
                idx: seen[i].0,
                key: seen[i].1,
                state: seen[i].2,
                evict: true,
            },
            None => Choice::Busy,
        }
    }

    /// The key's stored (excess, last), for tests.
    #[cfg(test)]
    fn bucket(&self, key: &[u8]) -> Option<(u64, u64)> {
        let home = home(self.seed, key, self.slots.len(), 64 - GEN_BITS);
        let (idx, _) = self.find(home)?;
        let b = Bucket::unpack(self.slots[idx].state.load(SeqCst));
        Some((b.excess, b.last))
    }
}

mod conn;
pub mod fleet;
pub use conn::{ConnGuard, ConnRefused, ConnZone};

#[cfg(test)]
mod tests;
