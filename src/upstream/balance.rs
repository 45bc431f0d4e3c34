//! Choosing a server within a group. Each worker keeps one [`Balancer`] per group with its own
//! state and no locks; [`Balancer::pick`] returns a [`Lease`] that must be told how the request
//! ended (a dropped lease only releases its slot).
//!
//! Which servers may be chosen, in order: available primaries (up by active checks, not
//! ejected by this worker's passive health); else available backups; else, rather than fail
//! for certain, any server the checks hold up (ejections ignored). Requests that already failed
//! on a server exclude it, so a retry goes elsewhere.
//!
//! Fairness across workers: every worker balances only the requests it accepted. Round robin
//! and hashing need nothing more (each worker follows the weights exactly, and the ring is the
//! same in every worker, so a key maps to the same server in all of them). Least connections
//! and P2C see only their own worker's in-flight requests: with W workers each decides on a
//! 1/W sample of the load, which is unbiased as long as the kernel spreads connections evenly
//! across workers (SO_REUSEPORT does). Each worker learns a slow server's latency on its own,
//! so a slow server gets one probe per worker, not one per process.

use crate::net::Address;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use tokio::time::Instant;

use super::fleet::Member;
use super::peer::{PassiveHealth, Peer};
use super::ring::Ring;
use super::stats::{Failure, StatsRegistry};
use crate::config::{Balance, UpstreamGroup};
use crate::error::Kind;

/// How the servers are chosen from: see the module comment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tier {
    Primary,
    Backup,
    Panic,
}

/// One worker's state for one upstream group.
#[derive(Debug)]
pub struct Balancer {
    group: String,
    worker: usize,
    balance: Balance,
    load_factor: f64,
    health: PassiveHealth,
    peers: RefCell<Vec<Rc<Peer>>>,
    ring: RefCell<Ring>,
    rng: RefCell<fastrand::Rng>,
    budget: RetryBudget,
}

impl Balancer {
    /// A balancer for `group` in worker `worker`, over `members`.
    pub fn new(
        group: &UpstreamGroup,
        worker: usize,
        members: &[Member],
        stats: &StatsRegistry,
    ) -> Balancer {
        let b = Balancer {
            group: group.name.clone(),
            worker,
            balance: group.balance.clone(),
            load_factor: group.hash_load_factor,
            health: PassiveHealth {
                max_fails: group.max_fails,
                fail_timeout: group.fail_timeout,
            },
            peers: RefCell::default(),
            ring: RefCell::default(),
            rng: RefCell::new(fastrand::Rng::with_seed(0x5eed_u64 ^ worker as u64)),
            budget: RetryBudget::new(group.retry_budget),
        };
        b.sync(members, stats, false);
        // Workers start their round-robin sequence at different places.
        for _ in 0..worker % members.len().max(1) {
            if let Some(lease) = b.pick(None, &[]) {
                lease.abandoned();
            }
        }
        b
    }

    /// Takes a newly published member list: known servers keep their state, new ones start
    /// (with slow start when `recovered`), removed ones are dropped (requests in flight on them
    /// finish). Returns the addresses no longer to be used, whose pooled connections should go.
    pub fn sync(&self, members: &[Member], stats: &StatsRegistry, recovered: bool) -> Vec<Address> {
        let now = Instant::now();
        let mut peers = self.peers.borrow_mut();
        let mut gone: Vec<Address> = peers
            .iter()
            .filter(|p| !members.iter().any(|m| m.addr == p.addr))
            .map(|p| p.addr.clone())
            .collect();
        let new: Vec<Rc<Peer>> = members
            .iter()
            .map(|m| match peers.iter().find(|p| p.addr == m.addr) {
                Some(p) => {
                    p.update(m, now);
                    if !m.up {
                        gone.push(m.addr.clone());
                    }
                    p.clone()
                }
                None => {
                    let s = stats.get(self.worker, &self.group, &m.addr);
                    Rc::new(Peer::new(m, s, now, recovered))
                }
            })
            .collect();
        *peers = new;
        if matches!(self.balance, Balance::Hash(_)) {
            let primaries = peers.iter().enumerate().filter(|(_, p)| !p.backup.get());
            *self.ring.borrow_mut() =
                Ring::new(primaries.map(|(i, p)| (i, &p.addr, p.weight.get())));
        }
        gone
    }

    /// Chooses a server for a request, skipping `exclude` (servers this request already
    /// failed on); `key` is the request's hash for consistent hashing. None when no server
    /// may take it. A first try (`exclude` empty) counts toward the retry budget.
    pub fn pick(&self, key: Option<u64>, exclude: &[Address]) -> Option<Lease> {
        let now = Instant::now();
        if exclude.is_empty() {
            self.budget.note_request(now);
        }
        let peers = self.peers.borrow();
        let tier = [Tier::Primary, Tier::Backup, Tier::Panic]
            .into_iter()
            .find(|&t| peers.iter().any(|p| eligible(p, t, now, exclude)))?;
        let ok = |p: &Peer| eligible(p, tier, now, exclude);
        let index = match (&self.balance, key) {
            (Balance::RoundRobin, _) => self.round_robin(&peers, now, ok),
            (Balance::LeastConn, _) => self.least_conn(&peers, now, ok),
            (Balance::Hash(_), Some(key)) if tier == Tier::Primary => {
                self.hashed(&peers, key, now, ok)
            }
            _ => self.p2c(&peers, now, ok),
        }?;
        let peer = peers[index].clone();
        peer.start(now);
        Some(Lease {
            peer,
            health: self.health,
            done: false,
        })
    }

    /// Nginx's smooth weighted round robin: every candidate gains its weight, the richest is
    /// chosen and pays the total. Spreads a 5:1:1 split as a,a,b,a,c,a,a rather than in runs.
    fn round_robin(
        &self,
        peers: &[Rc<Peer>],
        now: Instant,
        ok: impl Fn(&Peer) -> bool,
    ) -> Option<usize> {
        let mut total = 0i64;
        let mut best: Option<usize> = None;
        for (i, p) in peers.iter().enumerate().filter(|(_, p)| ok(p)) {
            let w = p.effective_weight(now) as i64;
            p.current.set(p.current.get() + w);
            total += w;
            if best.is_none_or(|b| p.current.get() > peers[b].current.get()) {
                best = Some(i);
            }
        }
        let b = best?;
        peers[b].current.set(peers[b].current.get() - total);
        Some(b)
    }

    /// Fewest requests in flight per unit of weight; ties (as when requests come one at a
    /// time) are settled by smooth weighted round robin, so weights hold at any load.
    fn least_conn(
        &self,
        peers: &[Rc<Peer>],
        now: Instant,
        ok: impl Fn(&Peer) -> bool,
    ) -> Option<usize> {
        let mut best: Option<(u64, u64)> = None;
        for p in peers.iter().filter(|p| ok(p)) {
            let (load, w) = (u64::from(p.in_flight()), p.effective_weight(now));
            // load/w < best_load/best_w, without division
            if best.is_none_or(|(bl, bw)| load * bw < bl * w) {
                best = Some((load, w));
            }
        }
        let (bl, bw) = best?;
        self.round_robin(peers, now, |p| {
            ok(p) && u64::from(p.in_flight()) * bw == bl * p.effective_weight(now)
        })
    }

    /// Power of two choices: the weighted round-robin choice and one other candidate at
    /// random; the other is taken only when its load is clearly lower (by [`P2C_MARGIN`]), so
    /// weights hold while servers are equally loaded and a slow or busy server is passed over.
    /// One passed over for a while gets a probe request (see `Peer::passed_over`).
    fn p2c(&self, peers: &[Rc<Peer>], now: Instant, ok: impl Fn(&Peer) -> bool) -> Option<usize> {
        let first = self.round_robin(peers, now, |p| ok(p))?;
        let others = peers.iter().filter(|p| ok(p)).count() - 1;
        if others == 0 {
            return Some(first);
        }
        let n = self.rng.borrow_mut().usize(..others);
        let other = peers
            .iter()
            .enumerate()
            .filter(|&(i, p)| i != first && ok(p))
            .nth(n)
            .map_or(first, |(i, _)| i);
        let (a, b) = (p2c_load(&peers[first], now), p2c_load(&peers[other], now));
        let (chosen, passed) = if b < P2C_MARGIN * a {
            (other, Some(first))
        } else {
            (first, (a < P2C_MARGIN * b).then_some(other))
        };
        // A server clearly worse than the other is passed over; after a while it is probed.
        match passed {
            Some(p) if peers[p].passed_over(now) => {
                peers[p].probe();
                Some(p)
            }
            _ => Some(chosen),
        }
    }

    /// Consistent hashing with bounded load: the key's server on the ring, unless it already
    /// carries more than `load_factor` times its weighted share of the requests in flight; then
    /// the next one on the ring that does not.
    fn hashed(
        &self,
        peers: &[Rc<Peer>],
        key: u64,
        now: Instant,
        ok: impl Fn(&Peer) -> bool,
    ) -> Option<usize> {
        let (mut load, mut weight) = (0u64, 0u64);
        for p in peers.iter().filter(|p| ok(p)) {
            load += u64::from(p.in_flight());
            weight += p.effective_weight(now);
        }
        let ring = self.ring.borrow();
        let fits = |p: &Peer| {
            let share = (load + 1) as f64 * p.effective_weight(now) as f64 / weight.max(1) as f64;
            f64::from(p.in_flight() + 1) <= (self.load_factor * share).ceil()
        };
        let found = ring
            .walk(key)
            .find(|&i| peers.get(i).is_some_and(|p| ok(p) && fits(p)));
        found.or_else(|| self.least_conn(peers, now, ok))
    }

    /// Whether the choice uses measured latency (P2C, or hashing's fallback to it) and there
    /// is a choice to make: only then is the time to the response head measured.
    pub fn wants_latency(&self) -> bool {
        matches!(self.balance, Balance::P2c | Balance::Hash(_)) && self.peers.borrow().len() > 1
    }

    /// Whether one more retry fits the budget (and spends it).
    pub fn allow_retry(&self) -> bool {
        self.budget.try_spend(Instant::now())
    }
}

/// How much lower the random candidate's load must be to win over the round-robin choice.
const P2C_MARGIN: f64 = 0.8;
/// Added to every cost (in microseconds): latency differences well under this are noise, not
/// a reason to move load, so equally good servers keep their weighted shares; a server tens of
/// milliseconds slower, or with a queue of requests, still stands out.
const P2C_NOISE_FLOOR_US: f64 = 5000.0;

/// P2C's cost of sending one more request to a server: its latency times one plus its
/// in-flight requests per unit of weight (the time the request may wait), plus the noise
/// floor. The latency average already reflects the server's speed under the current load.
fn p2c_load(p: &Peer, now: Instant) -> f64 {
    let weight = p.effective_weight(now) as f64 / 100.0;
    p.latency(now) * (1.0 + f64::from(p.in_flight()) / weight) + P2C_NOISE_FLOOR_US
}

fn eligible(p: &Peer, tier: Tier, now: Instant, exclude: &[Address]) -> bool {
    !exclude.contains(&p.addr)
        && match tier {
            Tier::Primary => !p.backup.get() && p.available(now),
            Tier::Backup => p.backup.get() && p.available(now),
            Tier::Panic => p.up.get(),
        }
}

/// A request's hold on a server: counted in flight until it is reported or dropped.
#[derive(Debug)]
pub struct Lease {
    peer: Rc<Peer>,
    health: PassiveHealth,
    done: bool,
}

impl Lease {
    /// The chosen server.
    pub fn addr(&self) -> &Address {
        &self.peer.addr
    }

    /// Requests this worker has in flight to the chosen server, this one included.
    pub fn in_flight(&self) -> usize {
        self.peer.in_flight() as usize
    }

    /// This worker's figures for the chosen server.
    pub fn stats(&self) -> &super::stats::ServerStats {
        &self.peer.stats
    }

    /// Records the time the server took to start answering (feeds P2C).
    pub fn observe_latency(&self, took: Duration) {
        self.peer.observe_latency(took, Instant::now());
    }

    /// The server answered.
    pub fn succeeded(mut self) {
        self.peer.succeeded();
        self.release();
    }

    /// The request failed with `kind`; returns true when the server was ejected by it. A
    /// failure that is not the server's (the client left) counts as abandoned.
    pub fn failed(mut self, kind: Kind) -> bool {
        let ejected = match Failure::of(kind) {
            Some(f) => self.peer.failed(f, self.health, Instant::now()),
            None => {
                self.peer.abandoned();
                false
            }
        };
        self.release();
        ejected
    }

    /// The server answered with a 5xx that the group counts as a failure.
    pub fn failed_status(mut self) -> bool {
        let ejected = self
            .peer
            .failed(Failure::Status5xx, self.health, Instant::now());
        self.release();
        ejected
    }

    /// The request ended for a reason that says nothing of the server.
    pub fn abandoned(mut self) {
        self.peer.abandoned();
        self.release();
    }

    fn release(&mut self) {
        if !self.done {
            self.done = true;
            self.peer.finish();
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.done {
            self.peer.abandoned();
        }
        self.release();
    }
}

/// Retries allowed per group and worker: at most `ratio` of the requests of the last ten
/// seconds, plus a few, so a failing fleet sees at most that much extra load.
#[derive(Debug)]
struct RetryBudget {
    ratio: f64,
    window_start: Cell<Option<Instant>>,
    /// This window's and the previous window's counts.
    requests: [Cell<u32>; 2],
    retries: [Cell<u32>; 2],
}

/// The budget counts two windows this long.
const BUDGET_WINDOW: Duration = Duration::from_secs(5);
/// Retries always allowed per two windows, so a quiet group can still retry.
const BUDGET_MIN_RETRIES: f64 = 10.0;

impl RetryBudget {
    fn new(ratio: f64) -> RetryBudget {
        RetryBudget {
            ratio,
            window_start: Cell::new(None),
            requests: Default::default(),
            retries: Default::default(),
        }
    }

    fn rotate(&self, now: Instant) {
        let start = *self.window_start.get().get_or_insert(now);
        let age = now.saturating_duration_since(start);
        if age < BUDGET_WINDOW {
            self.window_start.set(Some(start));
            return;
        }
        let keep = age < 2 * BUDGET_WINDOW;
        for c in [&self.requests, &self.retries] {
            c[1].set(if keep { c[0].get() } else { 0 });
            c[0].set(0);
        }
        self.window_start.set(Some(now));
    }

    fn note_request(&self, now: Instant) {
        self.rotate(now);
        self.requests[0].set(self.requests[0].get().saturating_add(1));
    }

    fn try_spend(&self, now: Instant) -> bool {
        self.rotate(now);
        let sum = |c: &[Cell<u32>; 2]| f64::from(c[0].get()) + f64::from(c[1].get());
        let allowed = BUDGET_MIN_RETRIES + self.ratio * sum(&self.requests);
        if sum(&self.retries) + 1.0 > allowed {
            return false;
        }
        self.retries[0].set(self.retries[0].get() + 1);
        true
    }
}

#[cfg(test)]
mod tests;
