//! One worker's view of one server: requests in flight, latency, smooth-round-robin weight,
//! passive health (failures counted in a window, ejection, one trial request afterwards) and
//! slow start. Single-threaded (`Cell`s); its [`ServerStats`] mirror what `/metrics` shows.

use crate::net::Address;
use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::fleet::Member;
use super::stats::{Failure, ServerStats};

/// How fast an unrefreshed latency average fades toward zero (halving about every 7 s).
const LATENCY_DECAY: Duration = Duration::from_secs(10);
/// A server P2C has passed over for this long, or for [`PROBE_AFTER_LATENCIES`] times its
/// latency average if that is longer, gets the next request it is compared for: a probe whose
/// answer replaces the average. A stall (a descheduled thread, a GC pause) inflates a fast
/// server's average, and a server that is passed over gets no new samples, so without probes it
/// stayed out until the average decayed (seconds), its weighted share going to the others.
const PROBE_AFTER: Duration = Duration::from_millis(100);
/// Spaces the probes of a server that really is slow: a 50 ms server gets one a second.
const PROBE_AFTER_LATENCIES: u32 = 20;
/// The weight of a new latency sample in the average.
const LATENCY_ALPHA: f64 = 0.3;
/// A sample counts for at most this multiple of the average (or [`LATENCY_MIN_CAP_US`]), so
/// one stall (a GC pause, a descheduled thread) cannot make a good server look slow for long,
/// while a server that really turned slow reaches its true latency within a few requests
/// (the average can nearly double with each).
const LATENCY_SPIKE_CAP: f64 = 4.0;
/// The cap on a sample while the average is still tiny (or not yet known), in microseconds.
const LATENCY_MIN_CAP_US: f64 = 1000.0;

/// Passive health settings of the server's group.
#[derive(Debug, Clone, Copy)]
pub struct PassiveHealth {
    /// Failures within `fail_timeout` that eject (0: never).
    pub max_fails: u32,
    /// Window and ejection time.
    pub fail_timeout: Duration,
}

/// A server as one worker sees it.
#[derive(Debug)]
pub struct Peer {
    /// Where to connect.
    pub addr: Address,
    pub(super) weight: Cell<u32>,
    pub(super) backup: Cell<bool>,
    slow_start: Cell<Duration>,
    /// Active checks hold it up.
    pub(super) up: Cell<bool>,
    in_flight: Cell<u32>,
    /// Smooth weighted round robin's running weight.
    pub(super) current: Cell<i64>,
    /// Moving average of the time to the response head, in microseconds.
    latency_us: Cell<f64>,
    latency_at: Cell<Instant>,
    /// Since when P2C has been choosing the other server over this one (None: it was chosen
    /// since, or never compared).
    passed_over_since: Cell<Option<Instant>>,
    /// A probe request is out: its latency replaces the average instead of joining it.
    probing: Cell<bool>,
    fails: Cell<u32>,
    window_start: Cell<Instant>,
    ejected_until: Cell<Option<Instant>>,
    trial_in_flight: Cell<bool>,
    /// When it last came back (slow start ramps from here).
    recovered_at: Cell<Option<Instant>>,
    /// Its figures in `/metrics`.
    pub stats: Arc<ServerStats>,
}

impl Peer {
    /// A peer for `member`; `recovered` starts its slow start now (a server that appeared or
    /// came up after start).
    pub fn new(member: &Member, stats: Arc<ServerStats>, now: Instant, recovered: bool) -> Peer {
        Peer {
            addr: member.addr.clone(),
            weight: Cell::new(member.weight.max(1)),
            backup: Cell::new(member.backup),
            slow_start: Cell::new(member.slow_start),
            up: Cell::new(member.up),
            in_flight: Cell::new(0),
            current: Cell::new(0),
            latency_us: Cell::new(0.0),
            latency_at: Cell::new(now),
            passed_over_since: Cell::new(None),
            probing: Cell::new(false),
            fails: Cell::new(0),
            window_start: Cell::new(now),
            ejected_until: Cell::new(None),
            trial_in_flight: Cell::new(false),
            recovered_at: Cell::new(recovered.then_some(now)),
            stats,
        }
    }

    /// Takes the published settings of `member`; a server that comes up starts its slow start.
    /// (The control thread logs the change, once for the process.)
    pub fn update(&self, member: &Member, now: Instant) {
        if member.up && !self.up.get() {
            self.recovered_at.set(Some(now));
        }
        self.weight.set(member.weight.max(1));
        self.backup.set(member.backup);
        self.slow_start.set(member.slow_start);
        self.up.set(member.up);
    }

    /// Requests picked for this server and not yet finished.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.get()
    }

    /// Whether a new request may go here: up, and not ejected (or ejected long enough that one
    /// trial request may test it, and none is out yet).
    pub fn available(&self, now: Instant) -> bool {
        self.up.get()
            && match self.ejected_until.get() {
                None => true,
                Some(until) => now >= until && !self.trial_in_flight.get(),
            }
    }

    /// Whether this worker has the server ejected (trial pending or not).
    pub fn ejected(&self) -> bool {
        self.ejected_until.get().is_some()
    }

    /// The weight now, reduced during slow start (in hundredths, at least 1).
    pub fn effective_weight(&self, now: Instant) -> u64 {
        let full = u64::from(self.weight.get()) * 100;
        let ramp = self.slow_start.get();
        match self.recovered_at.get() {
            Some(at) if !ramp.is_zero() => {
                let elapsed = now.saturating_duration_since(at);
                if elapsed >= ramp {
                    self.recovered_at.set(None);
                    full
                } else {
                    (full as f64 * elapsed.as_secs_f64() / ramp.as_secs_f64()).max(1.0) as u64
                }
            }
            _ => full,
        }
    }

    /// The latency average as of `now` (it decays toward zero while nothing is measured).
    pub fn latency(&self, now: Instant) -> f64 {
        let age = now.saturating_duration_since(self.latency_at.get());
        self.latency_us.get() * (-age.as_secs_f64() / LATENCY_DECAY.as_secs_f64()).exp()
    }

    /// Adds a latency sample to the moving average, capped against spikes. A probe's sample
    /// replaces the average, which was stale.
    pub fn observe_latency(&self, sample: Duration, now: Instant) {
        let current = self.latency(now);
        let cap = (current * LATENCY_SPIKE_CAP).max(LATENCY_MIN_CAP_US);
        let sample = (sample.as_secs_f64() * 1e6).min(cap);
        let probe = self.probing.replace(false);
        let new = if self.latency_us.get() == 0.0 || probe {
            sample
        } else {
            current * (1.0 - LATENCY_ALPHA) + sample * LATENCY_ALPHA
        };
        self.latency_us.set(new);
        self.latency_at.set(now);
    }

    /// P2C compared this server with another and chose the other. Returns true when it has
    /// been passed over long enough (see [`PROBE_AFTER`]) that this request should probe it,
    /// and has nothing in flight (a request in flight brings a sample anyway; a server that
    /// hangs is not sent more).
    pub(super) fn passed_over(&self, now: Instant) -> bool {
        let since = self.passed_over_since.get().unwrap_or(now);
        self.passed_over_since.set(Some(since));
        let scaled = self.latency(now) * f64::from(PROBE_AFTER_LATENCIES) / 1e6;
        let wait = PROBE_AFTER.max(Duration::try_from_secs_f64(scaled).unwrap_or(Duration::MAX));
        self.in_flight.get() == 0 && now.saturating_duration_since(since) >= wait
    }

    /// This request probes the server (see [`Peer::passed_over`]).
    pub(super) fn probe(&self) {
        self.probing.set(true);
    }

    /// Counts a request as started here.
    pub(super) fn start(&self, now: Instant) {
        self.passed_over_since.set(None);
        if self.ejected_until.get().is_some_and(|until| now >= until) {
            self.trial_in_flight.set(true);
        }
        self.in_flight.set(self.in_flight.get() + 1);
        self.stats.set_in_flight(self.in_flight.get());
        ServerStats::bump(&self.stats.requests);
    }

    /// Counts a request as finished (whatever its outcome).
    pub(super) fn finish(&self) {
        self.in_flight.set(self.in_flight.get().saturating_sub(1));
        self.stats.set_in_flight(self.in_flight.get());
    }

    /// The request answered: a server on trial is back.
    pub(super) fn succeeded(&self) {
        self.fails.set(0);
        if self.trial_in_flight.get() {
            let now = Instant::now();
            self.trial_in_flight.set(false);
            self.ejected_until.set(None);
            self.stats.ejected.store(false, Ordering::Relaxed);
            self.recovered_at.set(Some(now));
            tracing::info!(server = %self.addr, "upstream server is back after a trial request");
        }
    }

    /// The request failed this way. Returns true when this failure ejected the server.
    pub(super) fn failed(&self, failure: Failure, health: PassiveHealth, now: Instant) -> bool {
        ServerStats::bump(&self.stats.failures[failure as usize]);
        if failure == Failure::AddrNotAvail {
            return false; // the local host ran out of ports: not the server's fault
        }
        let on_trial = self.trial_in_flight.replace(false);
        if self.ejected_until.get().is_some() && !on_trial {
            return false; // already out; a late failure from before the ejection
        }
        if now.saturating_duration_since(self.window_start.get()) > health.fail_timeout {
            self.window_start.set(now);
            self.fails.set(0);
        }
        self.fails.set(self.fails.get() + 1);
        let eject = on_trial
            || failure == Failure::Refused
            || (health.max_fails > 0 && self.fails.get() >= health.max_fails);
        if eject && health.max_fails > 0 {
            self.ejected_until.set(Some(now + health.fail_timeout));
            self.fails.set(0);
            self.stats.ejected.store(true, Ordering::Relaxed);
            ServerStats::bump(&self.stats.ejections);
            tracing::warn!(
                server = %self.addr,
                "upstream server ejected for {:?} after {} ({})",
                health.fail_timeout,
                if on_trial { "a failed trial request" } else { "failures" },
                failure.label()
            );
            return true;
        }
        false
    }

    /// A request ended without saying anything of the server (the client left).
    pub(super) fn abandoned(&self) {
        self.trial_in_flight.set(false);
    }
}
