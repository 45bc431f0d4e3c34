//! The ring's bookkeeping, without the ring: which operation each slot (an entry's
//! `user_data`) holds, who waits for it, the memory it lends the kernel, and its deadline. No
//! system call and no `unsafe` here, so Miri runs its tests.
//!
//! Ownership: memory the kernel reads or writes for an operation ([`Lent`]) is moved into its
//! slot when the operation is queued and leaves it only with the operation's own completion.
//! A future that gives up early (dropped, or leaked with `mem::forget`) leaves it there: a
//! dropped one turns its slot into an orphan that frees it on completion; a leaked one keeps
//! it until the ring is dropped. Either way nothing the kernel may still touch is freed.

use std::collections::VecDeque;
use std::task::{Context, Poll, Waker};

/// How an operation ended: its result (a count, or a negated errno) and the completion's
/// flags (which provided buffer a read filled, whether a multishot entry stays).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// A count, or a negated errno.
    pub result: i32,
    /// `IORING_CQE_F_*` bits; for a read into a provided buffer, also its id.
    pub flags: u32,
}

/// `IORING_CQE_F_BUFFER`: the read filled a provided buffer, whose id is in the high bits.
const F_BUFFER: u32 = 1;
/// `IORING_CQE_F_MORE`: a multishot entry stays in the kernel.
const F_MORE: u32 = 2;

impl Completion {
    /// The provided buffer the completion filled, if it filled one.
    pub fn provided(self) -> Option<u16> {
        (self.flags & F_BUFFER != 0).then_some((self.flags >> 16) as u16)
    }

    /// Whether its (multishot) entry stays in the kernel.
    pub fn more(self) -> bool {
        self.flags & F_MORE != 0
    }
}

/// What an operation that was never queued, lost its slot, or was cut off by a failed ring
/// completes with.
pub const CANCELED: Completion = Completion {
    result: -libc::ECANCELED,
    flags: 0,
};

/// Memory an operation lends the kernel, owned by its slot while the kernel may use it.
#[derive(Debug, Default)]
pub enum Lent {
    /// Nothing (a wait, a cancel, a close).
    #[default]
    Nothing,
    /// A read into this buffer's spare capacity; handed back with the count.
    Read(Vec<u8>),
    /// A send of this buffer's bytes; recycled by the driver after the completion.
    Write(Vec<u8>),
    /// A send gathered from a caller's buffer and a few bytes around it; handed back with
    /// the count.
    Gather(Box<Gather>),
    /// A read into one of the ring's provided buffers (which the ring owns): the ring must
    /// not free them while this is in the kernel.
    Provided,
}

/// A send of `around[..split]`, then `body[range]`, then `around[split..]` (a head, a body,
/// a chunk's end), from byte `sent` on: all the memory it reads, owned together while the
/// kernel may read it. `iov` and `msg` describe it to the kernel; the driver points them into
/// the buffers (which do not move with the box) just before each send.
pub struct Gather {
    /// The bytes before and after the body, copied (they are small).
    pub around: Vec<u8>,
    /// Where the bytes after the body start in `around`.
    pub split: usize,
    /// The caller's buffer, lent whole and handed back.
    pub body: Vec<u8>,
    /// The part of `body` to send.
    pub range: std::ops::Range<usize>,
    /// How many of the bytes have gone out in earlier sends.
    pub sent: usize,
    /// The pieces left to send, for the kernel.
    pub iov: [libc::iovec; 3],
    /// The message header naming `iov`.
    pub msg: libc::msghdr,
}

impl Gather {
    /// A send of `around[..split]`, `body[range]` and `around[split..]`, nothing sent yet.
    pub fn new(
        around: Vec<u8>,
        split: usize,
        body: Vec<u8>,
        range: std::ops::Range<usize>,
    ) -> Gather {
        let empty = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        let msg = libc::msghdr {
            msg_name: std::ptr::null_mut(),
            msg_namelen: 0,
            msg_iov: std::ptr::null_mut(),
            msg_iovlen: 0,
            msg_control: std::ptr::null_mut(),
            msg_controllen: 0,
            msg_flags: 0,
        };
        Gather {
            around,
            split,
            body,
            range,
            sent: 0,
            iov: [empty; 3],
            msg,
        }
    }

    /// How many bytes the whole send is.
    pub fn total(&self) -> usize {
        self.around.len() + self.range.len()
    }

    /// The parts still to send, in order (some may be empty).
    pub fn rest(&self) -> [&[u8]; 3] {
        let (before, after) = self.around.split_at(self.split);
        let mut parts = [before, &self.body[self.range.clone()], after];
        let mut skip = self.sent;
        for part in &mut parts {
            let cut = skip.min(part.len());
            *part = &part[cut..];
            skip -= cut;
        }
        parts
    }

    /// Points `iov` at the parts still to send and `msg` at `iov`, for one sendmsg, called
    /// just before each send: the pointers aim into the vectors' heap memory and into the
    /// box's own allocation, neither of which moves when the box is moved into a slot.
    pub fn describe(&mut self) -> *const libc::msghdr {
        let rest = self.rest().map(|p| (p.as_ptr(), p.len()));
        let mut count = 0;
        for (start, len) in rest.into_iter().filter(|&(_, len)| len > 0) {
            self.iov[count] = libc::iovec {
                iov_base: start.cast_mut().cast(),
                iov_len: len,
            };
            count += 1;
        }
        self.msg.msg_iov = self.iov.as_mut_ptr();
        self.msg.msg_iovlen = count;
        &self.msg
    }
}

impl std::fmt::Debug for Gather {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gather")
            .field("total", &self.total())
            .field("sent", &self.sent)
            .finish()
    }
}

/// The state of one slot.
enum OpSlot {
    Free,
    /// In flight; the waker of the task awaiting it.
    Waiting(Option<Waker>, Lent),
    /// Completed, not yet taken.
    Done(Completion, Lent),
    /// In flight with nobody waiting (given up, a cancel request, a close): freed, with what
    /// it lends, when it completes.
    Orphan(Lent),
    /// Not in the kernel at all: a pause that ends at its deadline.
    Napping(Option<Waker>),
    /// A multishot accept: each completion is a new connection (or an error).
    Accepting(Box<Accepting>),
    /// A multishot accept whose listener let go of it: connections it still brings are
    /// closed, and the slot is freed with its last completion.
    AcceptGivenUp,
}

/// What a multishot accept has brought that its listener has not taken yet.
#[derive(Default)]
struct Accepting {
    got: VecDeque<Completion>,
    waker: Option<Waker>,
    /// Its last completion has arrived: it is no longer in the kernel.
    ended: bool,
}

/// What the driver must do after a completion was recorded.
#[derive(Debug, Default)]
pub struct Aftermath {
    /// An orphaned read filled this provided buffer: give it back.
    pub provided: Option<u16>,
    /// Memory an orphaned operation lent, no longer in the kernel's hands.
    pub released: Lent,
    /// A connection a given-up accept brought: close it.
    pub close: Option<i32>,
}

/// What giving up an operation (its future dropped) requires.
#[derive(Debug, PartialEq, Eq)]
pub enum GiveUp {
    /// Nothing: it had completed (its slot is freed) or was never in the kernel.
    Nothing,
    /// It is in the kernel: queue a cancel for this slot.
    Cancel,
}

/// A deadline whose operation has been cancelled for passing it.
const TIMED_OUT: u64 = u64::MAX;

/// Every slot of one ring.
#[derive(Default)]
pub struct Slots {
    slots: Vec<OpSlot>,
    free: Vec<usize>,
    /// Per slot: when its operation times out (driver clock, ms); 0 for none, `TIMED_OUT`
    /// once it has been cancelled for it.
    deadlines: Vec<u64>,
    /// Operations with a deadline.
    timed: usize,
    /// Memory of operations the ring was cut off from (see [`Slots::fail_all`]): the kernel
    /// may still hold it, so it is kept until the ring is gone.
    stranded: Vec<Lent>,
}

impl Slots {
    fn take(&mut self, state: OpSlot) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = state;
                i
            }
            None => {
                self.slots.push(state);
                self.slots.len() - 1
            }
        }
    }

    fn release(&mut self, index: usize) {
        self.slots[index] = OpSlot::Free;
        self.free.push(index);
        self.clear_deadline(index);
    }

    /// A slot for an operation going into the kernel with `lent`; its index (the entry's
    /// `user_data`).
    pub fn start(&mut self, lent: Lent) -> usize {
        self.take(OpSlot::Waiting(None, lent))
    }

    /// A slot for an operation nobody waits for (a cancel, a close): freed on completion.
    pub fn start_orphan(&mut self) -> usize {
        self.take(OpSlot::Orphan(Lent::Nothing))
    }

    /// A slot for a pause that asks nothing of the kernel; it ends at its deadline.
    pub fn start_nap(&mut self) -> usize {
        self.take(OpSlot::Napping(None))
    }

    /// A slot for a multishot accept.
    pub fn start_accepting(&mut self) -> usize {
        self.take(OpSlot::Accepting(Box::default()))
    }

    /// Records the kernel's completion of slot `index`: wakes its waiter, or frees an
    /// orphan and says what it leaves behind.
    pub fn complete(&mut self, index: usize, done: Completion) -> Aftermath {
        let mut after = Aftermath::default();
        let Some(slot) = self.slots.get_mut(index) else {
            return after;
        };
        match slot {
            OpSlot::Accepting(accepting) => {
                accepting.ended = !done.more();
                accepting.got.push_back(done);
                if let Some(w) = accepting.waker.take() {
                    w.wake();
                }
                return after;
            }
            OpSlot::AcceptGivenUp => {
                after.close = (done.result >= 0).then_some(done.result);
                if !done.more() {
                    self.release(index);
                }
                return after;
            }
            _ => {}
        }
        match std::mem::replace(slot, OpSlot::Free) {
            OpSlot::Waiting(waker, lent) => {
                *slot = OpSlot::Done(done, lent);
                if let Some(w) = waker {
                    w.wake();
                }
            }
            OpSlot::Orphan(lent) => {
                after.provided = done.provided();
                after.released = lent;
                self.release(index);
            }
            // Not in flight: a stray completion changes nothing.
            old => *slot = old,
        }
        after
    }

    /// The result of slot `index` and the memory it lent, if it completed (the slot is then
    /// freed); else the waker is kept for its completion. A cancel for its deadline reads as
    /// `ETIMEDOUT`.
    pub fn poll(&mut self, index: usize, cx: &mut Context<'_>) -> Poll<(Completion, Lent)> {
        match &mut self.slots[index] {
            OpSlot::Done(..) => {
                let OpSlot::Done(mut done, lent) =
                    std::mem::replace(&mut self.slots[index], OpSlot::Free)
                else {
                    unreachable!("matched above")
                };
                self.free.push(index);
                if self.clear_deadline(index) && done.result == -libc::ECANCELED {
                    done.result = -libc::ETIMEDOUT;
                }
                Poll::Ready((done, lent))
            }
            OpSlot::Waiting(w, _) | OpSlot::Napping(w) => {
                if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    *w = Some(cx.waker().clone());
                }
                Poll::Pending
            }
            OpSlot::Free | OpSlot::Orphan(_) | OpSlot::Accepting(_) | OpSlot::AcceptGivenUp => {
                Poll::Ready((CANCELED, Lent::Nothing))
            }
        }
    }

    /// Whether slot `index` holds a completion not yet taken.
    pub fn is_done(&self, index: usize) -> bool {
        matches!(self.slots.get(index), Some(OpSlot::Done(..)))
    }

    /// Gives up the operation in slot `index` (its future was dropped): a completed one is
    /// freed now (what it lent and any provided buffer it filled are returned), one in the
    /// kernel becomes an orphan that keeps what it lent until its own completion.
    pub fn give_up(&mut self, index: usize) -> (GiveUp, Aftermath) {
        let mut after = Aftermath::default();
        let Some(slot) = self.slots.get_mut(index) else {
            return (GiveUp::Nothing, after);
        };
        match std::mem::replace(slot, OpSlot::Free) {
            OpSlot::Done(done, lent) => {
                after.provided = done.provided();
                after.released = lent;
                self.release(index);
                (GiveUp::Nothing, after)
            }
            OpSlot::Napping(_) => {
                self.release(index);
                (GiveUp::Nothing, after)
            }
            OpSlot::Waiting(_, lent) => {
                *slot = OpSlot::Orphan(lent);
                (GiveUp::Cancel, after)
            }
            old => {
                *slot = old;
                (GiveUp::Nothing, after)
            }
        }
    }

    /// The next completion of the multishot accept in slot `index`; `None` once it has
    /// ended and every completion has been taken (the slot is then freed).
    pub fn poll_accept(&mut self, index: usize, cx: &mut Context<'_>) -> Poll<Option<Completion>> {
        let OpSlot::Accepting(accepting) = &mut self.slots[index] else {
            return Poll::Ready(None);
        };
        if let Some(done) = accepting.got.pop_front() {
            return Poll::Ready(Some(done));
        }
        if accepting.ended {
            self.release(index);
            return Poll::Ready(None);
        }
        if !accepting
            .waker
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            accepting.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    /// Lets go of the multishot accept in slot `index`: the connections it brought that were
    /// not taken (to close), and whether it is still in the kernel (to cancel).
    pub fn give_up_accepting(&mut self, index: usize) -> (Vec<Completion>, GiveUp) {
        let OpSlot::Accepting(accepting) =
            std::mem::replace(&mut self.slots[index], OpSlot::AcceptGivenUp)
        else {
            return (Vec::new(), GiveUp::Nothing);
        };
        let got = accepting.got.into_iter().collect();
        if accepting.ended {
            self.release(index);
            return (got, GiveUp::Nothing);
        }
        (got, GiveUp::Cancel)
    }

    /// Gives slot `index` a deadline `timeout_ms` after `now`; whether it is the only one
    /// (the driver must then start sweeping).
    pub fn set_deadline(&mut self, index: usize, now: u64, timeout_ms: u64) -> bool {
        if self.deadlines.len() <= index {
            self.deadlines.resize(index + 1, 0);
        }
        if self.deadlines[index] == 0 {
            self.timed += 1;
        }
        self.deadlines[index] = now.saturating_add(timeout_ms.max(1)).min(TIMED_OUT - 1);
        self.timed == 1
    }

    /// Clears slot `index`'s deadline; whether its operation was cancelled for passing it.
    fn clear_deadline(&mut self, index: usize) -> bool {
        match self.deadlines.get_mut(index) {
            Some(d) if *d != 0 => {
                let timed_out = *d == TIMED_OUT;
                *d = 0;
                self.timed -= 1;
                timed_out
            }
            _ => false,
        }
    }

    /// How many operations have a deadline.
    pub fn timed(&self) -> usize {
        self.timed
    }

    /// Ends every pause past its deadline (woken with `ETIMEDOUT`) and returns the slots in
    /// the kernel past theirs, marked as cancelled for it: the driver queues their cancels.
    pub fn overdue(&mut self, now: u64) -> Vec<usize> {
        let mut found = Vec::new();
        for (index, deadline) in self.deadlines.iter_mut().enumerate() {
            if *deadline == 0 || *deadline == TIMED_OUT || *deadline > now {
                continue;
            }
            match self.slots.get_mut(index) {
                Some(OpSlot::Waiting(..)) => {
                    *deadline = TIMED_OUT;
                    found.push(index);
                }
                Some(slot @ OpSlot::Napping(_)) => {
                    *deadline = TIMED_OUT;
                    let woke = OpSlot::Done(
                        Completion {
                            result: -libc::ETIMEDOUT,
                            flags: 0,
                        },
                        Lent::Nothing,
                    );
                    if let OpSlot::Napping(Some(w)) = std::mem::replace(slot, woke) {
                        w.wake();
                    }
                }
                _ => {}
            }
        }
        found
    }

    /// The ring is cut off (a fatal `io_uring_enter` error): every waiter is woken with
    /// `ECANCELED`, and the memory of every operation still in the kernel is kept aside,
    /// never freed while the ring exists, since the kernel may yet write into it.
    pub fn fail_all(&mut self) {
        for slot in &mut self.slots {
            match std::mem::replace(slot, OpSlot::Free) {
                OpSlot::Waiting(waker, lent) => {
                    if !matches!(lent, Lent::Nothing) {
                        self.stranded.push(lent);
                    }
                    *slot = OpSlot::Done(CANCELED, Lent::Nothing);
                    if let Some(w) = waker {
                        w.wake();
                    }
                }
                OpSlot::Orphan(lent) => {
                    if !matches!(lent, Lent::Nothing) {
                        self.stranded.push(lent);
                    }
                    *slot = OpSlot::Orphan(Lent::Nothing);
                }
                OpSlot::Napping(waker) => {
                    *slot = OpSlot::Done(CANCELED, Lent::Nothing);
                    if let Some(w) = waker {
                        w.wake();
                    }
                }
                OpSlot::Accepting(mut accepting) => {
                    accepting.ended = true;
                    if let Some(w) = accepting.waker.take() {
                        w.wake();
                    }
                    *slot = OpSlot::Accepting(accepting);
                }
                old => *slot = old,
            }
        }
    }

    /// How many operations the kernel holds.
    pub fn in_kernel(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| match s {
                OpSlot::Waiting(..) | OpSlot::Orphan(_) | OpSlot::AcceptGivenUp => true,
                OpSlot::Accepting(accepting) => !accepting.ended,
                OpSlot::Free | OpSlot::Done(..) | OpSlot::Napping(_) => false,
            })
            .count()
    }

    /// Whether an operation still in the kernel may write into memory (its own or the ring's
    /// provided buffers).
    pub fn lends_memory(&self) -> bool {
        !self.stranded.is_empty()
            || self.slots.iter().any(|s| {
                matches!(s, OpSlot::Waiting(_, l) | OpSlot::Orphan(l) if !matches!(l, Lent::Nothing))
            })
    }

    /// Whether an accept is still in the kernel: it holds its listening socket open (and
    /// taking connections) until its last completion, whatever the process closed.
    pub fn holds_a_listener(&self) -> bool {
        self.slots
            .iter()
            .any(|s| matches!(s, OpSlot::Accepting(_) | OpSlot::AcceptGivenUp))
    }

    /// Moves out every buffer the kernel may still use (to leak when the ring cannot be
    /// confirmed to have let go of them).
    pub fn take_lent(&mut self) -> Vec<Lent> {
        let mut lent = std::mem::take(&mut self.stranded);
        for slot in &mut self.slots {
            if let OpSlot::Waiting(_, l) | OpSlot::Orphan(l) = slot {
                lent.push(std::mem::take(l));
            }
        }
        lent.retain(|l| !matches!(l, Lent::Nothing));
        lent
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn waker() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }

    fn ok(n: i32) -> Completion {
        Completion {
            result: n,
            flags: 0,
        }
    }

    #[test]
    fn a_read_buffer_goes_in_with_the_operation_and_comes_back_with_its_completion() {
        let mut slots = Slots::default();
        let mut buf = Vec::with_capacity(16);
        buf.extend_from_slice(b"ab");
        let index = slots.start(Lent::Read(buf));
        let (woken, w) = waker();
        let mut cx = Context::from_waker(&w);
        assert!(slots.poll(index, &mut cx).is_pending());
        slots.complete(index, ok(3));
        assert_eq!(woken.0.load(Ordering::Relaxed), 1);
        let Poll::Ready((done, Lent::Read(back))) = slots.poll(index, &mut cx) else {
            panic!("the buffer did not come back");
        };
        assert_eq!(done.result, 3);
        assert_eq!(back, b"ab");
        assert_eq!(slots.in_kernel(), 0);
        // The slot is reused.
        assert_eq!(slots.start(Lent::Nothing), index);
    }

    #[test]
    fn a_given_up_operation_keeps_its_buffer_until_its_own_completion() {
        let mut slots = Slots::default();
        let index = slots.start(Lent::Read(vec![7; 8]));
        assert_eq!(slots.give_up(index).0, GiveUp::Cancel);
        // The cancel's completion lands in a slot of its own and releases nothing.
        let cancel = slots.start_orphan();
        let after = slots.complete(cancel, ok(0));
        assert!(matches!(after.released, Lent::Nothing));
        assert_eq!(slots.in_kernel(), 1, "the read is still the kernel's");
        let after = slots.complete(index, CANCELED);
        assert!(matches!(after.released, Lent::Read(ref b) if b == &[7; 8]));
        assert_eq!(slots.in_kernel(), 0);
    }

    #[test]
    fn a_leaked_future_leaves_its_buffer_in_the_slot() {
        let mut slots = Slots::default();
        let index = slots.start(Lent::Write(vec![1, 2, 3]));
        // The future is forgotten: nobody polls or gives up; the completion still lands.
        slots.complete(index, ok(3));
        let lent = slots.take_lent();
        assert!(lent.is_empty(), "a completed operation lends nothing more");
        let index = slots.start(Lent::Write(vec![4]));
        let lent = slots.take_lent();
        assert!(matches!(lent.as_slice(), [Lent::Write(b)] if b == &[4]));
        let _ = index;
    }

    #[test]
    fn only_operations_that_lend_memory_hold_the_ring_back() {
        let mut slots = Slots::default();
        let wait = slots.start(Lent::Nothing);
        slots.start_accepting();
        assert!(!slots.lends_memory());
        let read = slots.start(Lent::Provided);
        assert!(slots.lends_memory());
        slots.give_up(read);
        assert!(
            slots.lends_memory(),
            "an orphaned read may still fill a provided buffer"
        );
        slots.complete(read, CANCELED);
        slots.give_up(wait);
        assert!(!slots.lends_memory());
    }

    #[test]
    fn an_orphaned_read_into_a_provided_buffer_gives_the_buffer_back() {
        let mut slots = Slots::default();
        let index = slots.start(Lent::Provided);
        slots.give_up(index);
        let filled = Completion {
            result: 5,
            flags: F_BUFFER | (9 << 16),
        };
        assert_eq!(slots.complete(index, filled).provided, Some(9));
        // Given up after it completed: freed at once, the buffer returned too.
        let index = slots.start(Lent::Provided);
        slots.complete(index, filled);
        let (give_up, after) = slots.give_up(index);
        assert_eq!(give_up, GiveUp::Nothing);
        assert_eq!(after.provided, Some(9));
    }

    #[test]
    fn deadlines_cancel_what_is_in_the_kernel_and_end_naps() {
        let mut slots = Slots::default();
        let op = slots.start(Lent::Nothing);
        let nap = slots.start_nap();
        assert!(slots.set_deadline(op, 100, 30));
        assert!(!slots.set_deadline(nap, 100, 10));
        assert!(slots.overdue(105).is_empty());
        assert_eq!(slots.overdue(115), Vec::<usize>::new());
        assert!(slots.is_done(nap));
        assert_eq!(slots.overdue(130), vec![op]);
        assert!(slots.overdue(200).is_empty(), "cancelled once");
        slots.complete(op, CANCELED);
        let (w, waker) = waker();
        let mut cx = Context::from_waker(&waker);
        let Poll::Ready((done, _)) = slots.poll(op, &mut cx) else {
            panic!("not done");
        };
        assert_eq!(done.result, -libc::ETIMEDOUT);
        let Poll::Ready((done, _)) = slots.poll(nap, &mut cx) else {
            panic!("not done");
        };
        assert_eq!(done.result, -libc::ETIMEDOUT);
        assert_eq!(slots.timed(), 0);
        assert_eq!(w.0.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_multishot_accept_hands_out_each_connection_and_closes_them_once_given_up() {
        let mut slots = Slots::default();
        let index = slots.start_accepting();
        let (_, w) = waker();
        let mut cx = Context::from_waker(&w);
        assert!(slots.poll_accept(index, &mut cx).is_pending());
        let more = |fd| Completion {
            result: fd,
            flags: F_MORE,
        };
        slots.complete(index, more(10));
        slots.complete(index, more(11));
        assert_eq!(
            slots.poll_accept(index, &mut cx),
            Poll::Ready(Some(more(10)))
        );
        let (left, give_up) = slots.give_up_accepting(index);
        assert_eq!(left, vec![more(11)]);
        assert_eq!(give_up, GiveUp::Cancel);
        assert_eq!(slots.complete(index, more(12)).close, Some(12));
        assert_eq!(slots.in_kernel(), 1);
        assert_eq!(slots.complete(index, CANCELED).close, None);
        assert_eq!(slots.in_kernel(), 0);
    }

    #[test]
    fn a_failed_ring_wakes_every_waiter_and_keeps_what_the_kernel_may_hold() {
        let mut slots = Slots::default();
        let read = slots.start(Lent::Read(vec![0; 4]));
        let orphan = slots.start(Lent::Write(vec![1]));
        slots.give_up(orphan);
        let accept = slots.start_accepting();
        let (woken, w) = waker();
        let mut cx = Context::from_waker(&w);
        assert!(slots.poll(read, &mut cx).is_pending());
        assert!(slots.poll_accept(accept, &mut cx).is_pending());
        slots.fail_all();
        assert_eq!(woken.0.load(Ordering::Relaxed), 2);
        let Poll::Ready((done, Lent::Nothing)) = slots.poll(read, &mut cx) else {
            panic!("the buffer was handed back while the kernel may hold it");
        };
        assert_eq!(done, CANCELED);
        assert_eq!(slots.poll_accept(accept, &mut cx), Poll::Ready(None));
        assert_eq!(slots.take_lent().len(), 2);
    }

    /// The bytes a described message names, read back through its pointers.
    fn described(g: &mut Gather) -> Vec<u8> {
        let msg = g.describe();
        let mut out = Vec::new();
        // SAFETY: `describe` points at `g.iov`, whose entries point into `g`'s vectors;
        // nothing touches `g` until these reads are done.
        unsafe {
            let iov = std::slice::from_raw_parts((*msg).msg_iov, (*msg).msg_iovlen);
            for piece in iov {
                out.extend_from_slice(std::slice::from_raw_parts(
                    piece.iov_base.cast::<u8>(),
                    piece.iov_len,
                ));
            }
        }
        out
    }

    #[test]
    fn a_gathered_send_names_what_is_left_of_the_head_the_body_and_the_tail() {
        let body = b"..BODY..".to_vec();
        let mut g = Box::new(Gather::new(b"HEADtail".to_vec(), 4, body, 2..6));
        assert_eq!(g.total(), 12);
        assert_eq!(described(&mut g), b"HEADBODYtail");
        g.sent = 2;
        assert_eq!(described(&mut g), b"ADBODYtail");
        g.sent = 4;
        assert_eq!(described(&mut g), b"BODYtail");
        assert_eq!(unsafe { (*g.describe()).msg_iovlen }, 2, "no empty pieces");
        g.sent = 9;
        assert_eq!(described(&mut g), b"ail");
        // The box moves into a slot and back: the description still holds.
        let mut slots = Slots::default();
        let index = slots.start(Lent::Gather(g));
        slots.complete(index, ok(3));
        let (_, w) = waker();
        let Poll::Ready((_, Lent::Gather(mut g))) = slots.poll(index, &mut Context::from_waker(&w))
        else {
            panic!("the gathered send did not come back")
        };
        assert_eq!(described(&mut g), b"ail");
        assert_eq!(g.body, b"..BODY..", "the body comes back whole");
    }
}
