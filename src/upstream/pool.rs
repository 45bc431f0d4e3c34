//! Each worker's LIFO pool of idle keep-alive upstream connections, per server, and the cap on
//! connections a group may set (`max_conns`). Reusing connections is what keeps ephemeral ports
//! and TIME_WAIT from running out under load.
//!
//! A server keeps `keepalive` idle connections, and more while its load needs them: a
//! connection closed on its return for want of room, followed within a second by a request
//! that finds none idle and opens one, was churn (a close and a connect for nothing, a socket in
//! TIME_WAIT), so the room doubles, up to [`MAX_IDLE`]. HTTP/2 clients make this common: one
//! connection's hundred streams need a hundred upstream connections at once. The extra room
//! halves after each minute without churn; idle connections still close after `idle_timeout`.
//!
//! The cap matters most for FastCGI: a PHP-FPM child serves one connection at a time and stays
//! with a kept connection until it closes, so a proxy holding more connections than the pool has
//! children leaves the extra ones waiting in FPM's accept queue for ever. With a cap, a request
//! that finds every connection busy waits here, in order, for the first one to come back (or to
//! close, freeing a slot to open another).

use std::cell::RefCell;
use std::collections::VecDeque;

use rustc_hash::FxHashMap;
use std::io;
use std::rc::Rc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::net::{Address, Stream};
use crate::observe::metrics::{Counter, Shard};

struct Idle {
    stream: Stream,
    slot: ConnSlot,
    expires: Instant,
}

/// Most idle connections kept per server, per worker, however much the room grows.
pub const MAX_IDLE: usize = 4096;

/// Churn is a connection closed for want of room followed by a connect within this.
const CHURN_WINDOW: Duration = Duration::from_secs(1);

/// Extra room is halved after this long without churn.
const SHRINK_AFTER: Duration = Duration::from_secs(60);

/// One server's idle connections, most recently used last, and its room beyond `keepalive`.
#[derive(Default)]
struct IdleList {
    conns: Vec<Idle>,
    /// Idle connections kept beyond the group's `keepalive`, grown on churn.
    extra: usize,
    /// When a connection was last closed for want of room.
    overflowed: Option<Instant>,
    /// When the room last grew (or was last halved).
    grown: Option<Instant>,
    /// The group's `keepalive` when a connection was last given back.
    cap: usize,
}

/// How a returned connection is kept: the group's `keepalive` and `idle_timeout`, and the
/// worker's counters.
pub struct Keep<'a> {
    /// Idle connections always kept (`keepalive`); 0 keeps none.
    pub cap: usize,
    /// How long an idle connection is kept.
    pub idle_timeout: Duration,
    /// Where a connection closed for want of room is counted.
    pub counters: &'a Shard,
}

impl IdleList {
    /// A request found no idle connection: if one was closed for want of room just before,
    /// that was churn, and the room doubles.
    fn note_miss(&mut self, now: Instant) {
        let cap = self.cap;
        // Without a `keepalive`, no connection is kept: nothing grows.
        let churn = self.overflowed.is_some_and(|t| now - t <= CHURN_WINDOW);
        if churn && cap > 0 {
            let room = (cap + self.extra).saturating_mul(2).min(MAX_IDLE.max(cap));
            self.extra = room - cap;
            self.overflowed = None;
            self.grown = Some(now);
        }
    }

    /// Halves the extra room after [`SHRINK_AFTER`] without churn.
    fn shrink(&mut self, now: Instant) {
        if self.extra > 0 && self.grown.is_some_and(|t| now - t >= SHRINK_AFTER) {
            self.extra /= 2;
            self.grown = Some(now);
        }
    }
}

/// Open connections per capped server, and the requests waiting for one.
#[derive(Default)]
struct ConnSlots {
    open: usize,
    waiters: VecDeque<Waiter>,
}

/// A request waiting for a connection, until its deadline (checked by [`UpstreamPool::sweep`]
/// once a second, so that waiting costs no timer).
struct Waiter {
    tx: oneshot::Sender<Grant>,
    deadline: Instant,
}

type SlotTable = Rc<RefCell<FxHashMap<Address, ConnSlots>>>;

/// The right to hold one open connection to a capped server; dropping it (with its connection)
/// frees the slot for the next waiting request. Servers without a cap get an untracked slot.
pub struct ConnSlot {
    held: Option<(SlotTable, Address)>,
}

impl ConnSlot {
    /// A slot that counts nothing (no cap).
    pub fn untracked() -> ConnSlot {
        ConnSlot { held: None }
    }
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        let Some((table, addr)) = self.held.take() else {
            return;
        };
        let mut grant = Grant::Open(ConnSlot {
            held: Some((table.clone(), addr.clone())),
        });
        // The slot passes to the first request still waiting; else it is freed.
        loop {
            let waiter = table
                .borrow_mut()
                .get_mut(&addr)
                .and_then(|s| s.waiters.pop_front());
            let Some(waiter) = waiter else { break };
            match waiter.tx.send(grant) {
                Ok(()) => return,
                Err(back) => grant = back,
            }
        }
        // Nobody waits: forget the grant's slot without running this again.
        if let Grant::Open(mut slot) = grant {
            slot.held = None;
        }
        let mut slots = table.borrow_mut();
        if let Some(s) = slots.get_mut(&addr) {
            s.open = s.open.saturating_sub(1);
        }
    }
}

/// What a waiting request receives.
enum Grant {
    /// A connection someone finished with.
    Conn(Stream, ConnSlot),
    /// A freed slot: open a new connection.
    Open(ConnSlot),
}

/// A connection to use: pooled, or to be opened under `slot`.
pub enum Obtained {
    /// An idle (or handed-over) connection.
    Reused(Stream, ConnSlot),
    /// None idle: open one, holding this slot.
    Open(ConnSlot),
}

/// A worker's idle upstream connections, keyed by server address. Single-threaded.
#[derive(Default)]
pub struct UpstreamPool {
    idle: RefCell<FxHashMap<Address, IdleList>>,
    slots: SlotTable,
}

impl UpstreamPool {
    /// A connection to `addr`: the most recently used live idle one, or a slot to open one.
    /// With a cap (`max_conns` > 0) and every slot taken, waits in line up to `queue_timeout`
    /// (give or take the second between sweeps); `None` when that ran out.
    pub async fn obtain(
        &self,
        addr: &Address,
        max_conns: usize,
        queue_timeout: Duration,
        counters: &Shard,
    ) -> Option<Obtained> {
        if let Some((stream, slot)) = self.take(addr, counters) {
            return Some(Obtained::Reused(stream, slot));
        }
        if max_conns == 0 {
            return Some(Obtained::Open(ConnSlot::untracked()));
        }
        let rx = {
            let mut table = self.slots.borrow_mut();
            let slots = table.entry(addr.clone()).or_default();
            if slots.open < max_conns {
                slots.open += 1;
                let held = Some((self.slots.clone(), addr.clone()));
                return Some(Obtained::Open(ConnSlot { held }));
            }
            let (tx, rx) = oneshot::channel();
            let deadline = Instant::now() + queue_timeout;
            slots.waiters.push_back(Waiter { tx, deadline });
            rx
        };
        counters.inc(Counter::UpstreamQueued);
        match rx.await {
            Ok(Grant::Conn(stream, slot)) => Some(Obtained::Reused(stream, slot)),
            Ok(Grant::Open(slot)) => Some(Obtained::Open(slot)),
            Err(_) => None,
        }
    }

    /// The most recently used live idle connection to `addr`, if any. Connections the upstream
    /// has closed (or that hold unexpected bytes) are discarded. Finding none may grow the
    /// server's room ([`IdleList::note_miss`]).
    fn take(&self, addr: &Address, counters: &Shard) -> Option<(Stream, ConnSlot)> {
        let mut idle = self.idle.borrow_mut();
        let list = idle.get_mut(addr)?;
        let now = Instant::now();
        while let Some(conn) = list.conns.pop() {
            if conn.expires > now && is_quiet(&conn.stream) {
                return Some((conn.stream, conn.slot));
            }
            counters.inc(Counter::UpstreamStaleDiscarded);
        }
        list.note_miss(now);
        None
    }

    /// Keeps a connection for reuse, up to `cap` idle per server (the group's `keepalive`)
    /// plus the room churn has added; a request waiting for a connection to this server gets
    /// it at once instead.
    pub fn give(&self, addr: &Address, (stream, slot): (Stream, ConnSlot), keep: Keep<'_>) {
        let mut grant = Grant::Conn(stream, slot);
        if slot_is_tracked(&grant) {
            loop {
                let waiter = self
                    .slots
                    .borrow_mut()
                    .get_mut(addr)
                    .and_then(|s| s.waiters.pop_front());
                let Some(waiter) = waiter else { break };
                match waiter.tx.send(grant) {
                    Ok(()) => return,
                    Err(back) => grant = back,
                }
            }
        }
        let Grant::Conn(stream, slot) = grant else {
            return;
        };
        let mut idle = self.idle.borrow_mut();
        let list = idle.entry(addr.clone()).or_default();
        list.cap = keep.cap;
        if keep.cap == 0 {
            // `keepalive = 0`: nothing is kept, whatever room churn once added.
            list.extra = 0;
        }
        let now = Instant::now();
        if list.conns.len() < keep.cap + list.extra {
            stream.watch_idle();
            list.conns.push(Idle {
                stream,
                slot,
                expires: now + keep.idle_timeout,
            });
        } else {
            if keep.cap > 0 {
                list.overflowed = Some(now);
                keep.counters.inc(Counter::UpstreamIdleOverflow);
            }
            drop(idle);
            drop((stream, slot));
        }
    }

    /// Closes every idle connection to `addr` (the server left, went down or was ejected).
    pub fn forget(&self, addr: &Address) {
        let gone = self.idle.borrow_mut().remove(addr);
        drop(gone);
    }

    /// Closes expired connections and those the upstream closed, and ends the wait of
    /// requests past their queue deadline (or whose client left).
    pub fn sweep(&self) {
        let now = Instant::now();
        for slots in self.slots.borrow_mut().values_mut() {
            slots
                .waiters
                .retain(|w| w.deadline > now && !w.tx.is_closed());
        }
        let mut closed = Vec::new();
        {
            let mut idle = self.idle.borrow_mut();
            for list in idle.values_mut() {
                let (keep, gone): (Vec<Idle>, Vec<Idle>) = std::mem::take(&mut list.conns)
                    .into_iter()
                    .partition(|c| c.expires > now && is_quiet(&c.stream));
                list.conns = keep;
                closed.extend(gone);
                list.shrink(now);
                if list.overflowed.is_some_and(|t| now - t > CHURN_WINDOW) {
                    list.overflowed = None;
                }
            }
            // A server's entry stays while it has connections or room to remember.
            idle.retain(|_, l| !l.conns.is_empty() || l.extra > 0 || l.overflowed.is_some());
        }
        // Dropped with no borrow held: a freed slot may go straight to a waiting request.
        drop(closed);
    }

    /// Idle connections held, by server.
    pub fn idle_counts(&self) -> Vec<(Address, usize)> {
        let idle = self.idle.borrow();
        idle.iter()
            .map(|(a, l)| (a.clone(), l.conns.len()))
            .collect()
    }

    /// Idle connections held, over all servers.
    pub fn len(&self) -> usize {
        self.idle.borrow().values().map(|l| l.conns.len()).sum()
    }

    /// True when no idle connection is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Open connections to `addr` counted against its cap (0 without a cap).
    pub fn open_count(&self, addr: &Address) -> usize {
        self.slots.borrow().get(addr).map_or(0, |s| s.open)
    }
}

fn slot_is_tracked(grant: &Grant) -> bool {
    match grant {
        Grant::Conn(_, slot) | Grant::Open(slot) => slot.held.is_some(),
    }
}

/// An idle connection is healthy if the reactor has seen nothing on it (the upstream neither
/// closed it nor sent bytes). This costs no syscall unless readiness is set, in which case one
/// non-blocking read tells a spurious wake-up from a real event.
fn is_quiet(stream: &Stream) -> bool {
    if !stream.ready_now() {
        return true;
    }
    let mut probe = [0u8; 1];
    let quiet =
        matches!(stream.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock);
    if quiet {
        // A spurious wake-up: the probe spent the ring's idle watch, so it is armed again.
        stream.watch_idle();
    }
    quiet
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr() -> Address {
        Address::Tcp("127.0.0.1:9".parse().unwrap())
    }

    #[tokio::test(start_paused = true)]
    async fn a_capped_server_queues_and_freed_slots_pass_in_order() {
        let pool = UpstreamPool::default();
        let counters = Shard::default();
        let wait = Duration::from_secs(5);
        let server = addr();
        let Some(Obtained::Open(first)) = pool.obtain(&server, 1, wait, &counters).await else {
            panic!("the first request opens a connection");
        };
        assert_eq!(pool.open_count(&addr()), 1);
        // The second waits; freeing the first slot hands it over, still counted once.
        let second = pool.obtain(&server, 1, wait, &counters);
        tokio::pin!(second);
        assert!(futures_poll(second.as_mut()).is_none());
        drop(first);
        let Some(Some(Obtained::Open(slot))) = futures_poll(second.as_mut()) else {
            panic!("the waiting request gets the freed slot");
        };
        assert_eq!(pool.open_count(&addr()), 1);
        // A third times out while the slot is held, at the sweep after its deadline.
        let third = pool.obtain(&server, 1, wait, &counters);
        tokio::pin!(third);
        assert!(futures_poll(third.as_mut()).is_none());
        tokio::time::advance(Duration::from_secs(4)).await;
        pool.sweep();
        assert!(
            futures_poll(third.as_mut()).is_none(),
            "not before its deadline"
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        pool.sweep();
        assert!(matches!(futures_poll(third.as_mut()), Some(None)));
        assert_eq!(counters.get(Counter::UpstreamQueued), 2);
        assert_eq!(pool.open_count(&server), 1);
        drop(slot);
        assert_eq!(pool.open_count(&server), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn churn_grows_the_room_and_quiet_minutes_shrink_it() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = Address::Tcp(listener.local_addr().unwrap());
        let mut accepted = Vec::new();
        let mut conns = Vec::new();
        for _ in 0..4 {
            let s = tokio::net::TcpStream::connect(listener.local_addr().unwrap());
            conns.push(Stream::from(s.await.unwrap()));
            accepted.push(listener.accept().await.unwrap());
        }
        let pool = UpstreamPool::default();
        let counters = Shard::default();
        let keep = || Keep {
            cap: 2,
            idle_timeout: Duration::from_secs(3600),
            counters: &counters,
        };
        let wait = Duration::from_secs(1);
        // Three come back to a room of two: one is closed.
        for stream in conns.drain(..3) {
            pool.give(&server, (stream, ConnSlot::untracked()), keep());
        }
        assert_eq!(pool.len(), 2);
        assert_eq!(counters.get(Counter::UpstreamIdleOverflow), 1);
        // Three requests: the third finds none idle just after one was closed (churn).
        for _ in 0..2 {
            let got = pool.obtain(&server, 0, wait, &counters).await;
            assert!(matches!(got, Some(Obtained::Reused(..))));
        }
        let got = pool.obtain(&server, 0, wait, &counters).await;
        assert!(matches!(got, Some(Obtained::Open(_))));
        // The room doubled: four come back and stay.
        let more = (0..4).map(|_| {
            let s = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            s.set_nonblocking(true).unwrap();
            Stream::from(tokio::net::TcpStream::from_std(s).unwrap())
        });
        for stream in more.collect::<Vec<_>>() {
            pool.give(&server, (stream, ConnSlot::untracked()), keep());
        }
        assert_eq!(pool.len(), 4);
        assert_eq!(counters.get(Counter::UpstreamIdleOverflow), 1);
        // A miss with no connection closed just before is not churn: no growth.
        tokio::time::advance(Duration::from_secs(2)).await;
        for _ in 0..5 {
            let _ = pool.obtain(&server, 0, wait, &counters).await;
        }
        assert_eq!(pool.idle.borrow()[&server].extra, 2);
        // A quiet minute halves the extra room.
        tokio::time::advance(Duration::from_secs(60)).await;
        pool.sweep();
        assert_eq!(pool.idle.borrow()[&server].extra, 1);
        // `keepalive = 0` (a reload, or another group on the same server) keeps none.
        assert_eq!(pool.len(), 0);
        let s = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        s.set_nonblocking(true).unwrap();
        let stream = Stream::from(tokio::net::TcpStream::from_std(s).unwrap());
        let off = Keep { cap: 0, ..keep() };
        pool.give(&server, (stream, ConnSlot::untracked()), off);
        assert_eq!(pool.len(), 0);
    }

    fn futures_poll<F: std::future::Future + Unpin>(f: F) -> Option<F::Output> {
        let mut f = f;
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match std::pin::Pin::new(&mut f).poll(&mut cx) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        }
    }
}
