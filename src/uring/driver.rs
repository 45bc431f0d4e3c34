//! One io_uring per worker thread, driven from its tokio runtime.
//!
//! - `SINGLE_ISSUER | DEFER_TASKRUN`: completions are run in batches when the thread asks for
//!   them, not the moment a packet lands (without it, the kernel retries each recv from task
//!   work while the sending CPU still holds the socket lock). The kernel runs a bounded batch
//!   per `io_uring_enter` (20 since 6.13) and says when it left some (`TASKRUN_FLAG`): the
//!   loop enters again at once then, since leftovers signal no eventfd.
//! - A registered eventfd sits in tokio's epoll: the ring signals it when completions wait (a
//!   ring fd in epoll is never woken for deferred work). It is never read: epoll is
//!   edge-triggered and every signal is a new edge.
//! - Operations queue their entries and wake the driver task, which runs after the tasks
//!   already woken: one `io_uring_enter` submits a whole tick's entries and reaps completions.
//! - An `io_uring_enter` that fails with `EINTR`, `EAGAIN` or `EBUSY` is tried again on the
//!   next turn. Any other error cuts the ring off for good ([`Driver::failed`]): every waiting
//!   operation ends with `ECANCELED`, later ones fail at once, and the worker carries on with
//!   epoll (see [`super::start`]).
//!
//! Soundness: memory the kernel reads or writes for an operation is owned by its slot
//! ([`super::slots::Lent`]): a read's buffer is moved in and handed back with the completion;
//! a send's bytes are copied into a buffer of the driver's. A future dropped early leaves the
//! memory there until the operation's own completion (its cancel is queued, not waited for),
//! and a future leaked with `mem::forget` leaves it for good, so no future can free memory the
//! kernel still uses. Memory the kernel may hold when the ring goes is leaked, not freed.

use std::cell::{Cell, RefCell, UnsafeCell};
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use io_uring::{opcode, squeue, IoUring};
use tokio::io::unix::AsyncFd;

use super::buf_ring::BufRing;
pub use super::slots::Completion;
use super::slots::{Aftermath, Gather, GiveUp, Lent, Slots};

mod accepting;
use accepting::close_accepted;
mod queued;

/// Entries in a ring's submission queue.
const ENTRIES: u32 = 4096;

/// `IORING_ENTER_GETEVENTS`: also run deferred completions.
const GETEVENTS: u32 = 1;

/// Buffers the kernel picks from when a waiting read completes (`IOSQE_BUFFER_SELECT`): an
/// idle connection holds none; bytes land in one only when they arrive, and the connection
/// copies them out and hands it back at once.
pub const PROVIDED_SIZE: usize = 4096;
/// How many provided buffers a ring has (1 MiB); a read that finds none left waits for
/// readiness instead.
pub(super) const PROVIDED_COUNT: u16 = 256;
/// The provided buffers' group id.
const GROUP: u16 = 0;

/// Sends of up to this many bytes (a head and a small body: about a microsecond of copying)
/// are copied into a buffer the driver owns and go out with the turn's submission; larger
/// ones are sent directly (copying them would cost more than the system call the ring saves),
/// waiting on the ring only when the socket is full. The kernel copies every byte sent either
/// way.
pub const SEND_COPY_MAX: usize = 16 * 1024;
/// Send buffers kept for reuse.
const SPARE_SENDS: usize = 64;

/// How often in-flight operations are checked against their deadlines while any has one: a
/// timeout fires up to this late.
const SWEEP_MS: u64 = 10;
/// `io_uring_enter` failing with a retryable error this many times in a row cuts the ring off.
const MAX_RETRIES: u32 = 10_000;

/// Whether an `io_uring_enter` error is worth another try: interrupted by a signal
/// (`EINTR`), short of memory for requests for now (`EAGAIN`), or the completion queue full
/// with overflowed entries waiting (`EBUSY`: the turn reaps them, making room).
pub fn retryable(errno: i32) -> bool {
    matches!(errno, libc::EINTR | libc::EAGAIN | libc::EBUSY)
}

/// A worker thread's ring and the operations in flight on it.
pub struct Driver {
    /// Declared first so that it is dropped first: the ring is closed before the provided
    /// buffers are freed.
    ring: IoUring,
    /// The provided buffers, `PROVIDED_COUNT` of `PROVIDED_SIZE` bytes.
    provided: Box<[UnsafeCell<u8>]>,
    /// The buffer ring registered with the kernel (`PROVIDED_COUNT` entries, page-aligned):
    /// giving a buffer back is a write here, no operation.
    buf_ring: BufRing,
    book: RefCell<Slots>,
    /// Entries are queued that have not been submitted.
    queued: Cell<bool>,
    /// The driver task's waker.
    waker: RefCell<Option<Waker>>,
    /// Milliseconds since `started`, read once per turn of the driver loop: the time
    /// deadlines are set from, so an operation reads no clock.
    now_ms: Cell<u64>,
    started: std::time::Instant,
    /// Send buffers for reuse.
    spare: RefCell<Vec<Vec<u8>>>,
    /// Why the ring was cut off, once it was: nothing is submitted after that.
    failure: RefCell<Option<io::Error>>,
    /// Retryable `io_uring_enter` errors in a row.
    retries: Cell<u32>,
    /// Errors the next `io_uring_enter` calls return instead of entering (tests).
    #[cfg(test)]
    pub(super) inject: RefCell<std::collections::VecDeque<i32>>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Driver")
    }
}

impl Driver {
    /// A ring for this thread, or why the kernel refused one (too old, or io_uring disabled
    /// by `kernel.io_uring_disabled` or a seccomp profile): the caller falls back to epoll.
    pub fn new() -> io::Result<Rc<Driver>> {
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
            .build(ENTRIES)?;
        let size = PROVIDED_SIZE * usize::from(PROVIDED_COUNT);
        let provided = (0..size).map(|_| UnsafeCell::new(0)).collect();
        let buf_ring = BufRing::new()?;
        // SAFETY: the ring memory is page-aligned, zeroed, `PROVIDED_COUNT` entries long, and
        // lives until it is unregistered (in `Driver::drop`) or is leaked.
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                buf_ring.base as u64,
                PROVIDED_COUNT,
                GROUP,
                0,
            )?;
        }
        let driver = Rc::new(Driver {
            ring,
            provided,
            buf_ring,
            book: RefCell::new(Slots::default()),
            queued: Cell::new(false),
            waker: RefCell::new(None),
            now_ms: Cell::new(0),
            started: std::time::Instant::now(),
            spare: RefCell::new(Vec::new()),
            failure: RefCell::new(None),
            retries: Cell::new(0),
            #[cfg(test)]
            inject: RefCell::default(),
        });
        for id in 0..PROVIDED_COUNT {
            driver.give_back(id);
        }
        Ok(driver)
    }

    /// Submits queued entries and hands out completions, then waits until more entries are
    /// queued or the ring signals; runs for the life of the worker. Returns the error that cut
    /// the ring off, if one does.
    pub async fn drive(self: Rc<Driver>) -> io::Result<()> {
        use rustix::event::EventfdFlags;
        let efd = rustix::event::eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?;
        self.ring.submitter().register_eventfd(efd.as_raw_fd())?;
        // SAFETY: the eventfd is owned by the registration and closed only with it.
        let signal = unsafe { AsyncFd::register_with_interest(efd, tokio::io::Interest::READABLE) }
            .map_err(|e| e.into_parts().1)?;
        let mut sweep = Box::pin(tokio::time::sleep(std::time::Duration::ZERO));
        let mut next_sweep = 0;
        loop {
            self.queued.set(false);
            self.enter(0);
            if let Some(e) = self.failure.borrow().as_ref() {
                return Err(io::Error::new(e.kind(), e.to_string()));
            }
            let now = self.started.elapsed().as_millis() as u64;
            self.now_ms.set(now);
            if self.book.borrow().timed() > 0 && now >= next_sweep {
                self.cancel_overdue(now);
                next_sweep = now + SWEEP_MS;
                let at = tokio::time::Instant::from_std(self.started)
                    + std::time::Duration::from_millis(next_sweep);
                sweep.as_mut().reset(at);
            }
            if self.work_left() || self.retries.get() > 0 {
                tokio::task::yield_now().await;
                continue;
            }
            std::future::poll_fn(|cx| {
                if self.book.borrow().timed() > 0 && sweep.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(());
                }
                self.wait(cx, &signal)
            })
            .await;
        }
    }

    /// Whether the kernel holds deferred completions it has not run (`IORING_SQ_TASKRUN`): a
    /// turn runs a bounded batch, and what it leaves signals no eventfd (the kernel signals
    /// only when its list of deferred work stops being empty).
    fn work_left(&self) -> bool {
        // SAFETY: this thread is the ring's only user (`SINGLE_ISSUER`), and no other borrow
        // of its queues is alive.
        unsafe { self.ring.submission_shared() }.taskrun()
    }

    /// Whether the ring has been cut off by a fatal `io_uring_enter` error.
    pub fn failed(&self) -> bool {
        self.failure.borrow().is_some()
    }

    /// Cancels every operation in flight past its deadline: it completes with `ETIMEDOUT`.
    fn cancel_overdue(&self, now: u64) {
        let overdue = self.book.borrow_mut().overdue(now);
        for index in overdue {
            self.cancel(index);
        }
    }

    /// Queues a cancel of the operation in slot `index`; its own completion is an orphan's.
    fn cancel(&self, index: usize) {
        let cancel = opcode::AsyncCancel::new(index as u64).build();
        // SAFETY: a cancel entry points at no memory.
        unsafe { self.queue(cancel, None) };
    }

    /// Gives slot `index` a deadline `timeout` from now.
    fn set_deadline(&self, index: usize, timeout: std::time::Duration) {
        if self.book.borrow().timed() == 0 {
            // No sweep has been running, so the loop may not have turned (nor read the
            // clock) for a long while: a deadline counted from then could be past already.
            self.now_ms.set(self.started.elapsed().as_millis() as u64);
        }
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX / 2);
        let first = self
            .book
            .borrow_mut()
            .set_deadline(index, self.now_ms.get(), ms);
        // A sweep must be scheduled: wake the loop if no deadline was pending.
        if first {
            if let Some(w) = self.waker.borrow().as_ref() {
                w.wake_by_ref();
            }
        }
    }

    /// One `io_uring_enter`, or the error injected in its place (tests).
    fn enter_kernel(&self, queued: u32, want: u32) -> io::Result<usize> {
        #[cfg(test)]
        if let Some(errno) = self.inject.borrow_mut().pop_front() {
            return Err(io::Error::from_raw_os_error(errno));
        }
        // SAFETY: no signal mask argument; every entry queued points at memory its slot owns.
        unsafe {
            self.ring
                .submitter()
                .enter::<libc::sigset_t>(queued, want, GETEVENTS, None)
        }
    }

    /// Submits what is queued, waits for `want` completions, and hands out every completion.
    /// A retryable error leaves the entries queued for the next turn; a fatal one
    /// cuts the ring off ([`Driver::fail`]).
    fn enter(&self, want: u32) {
        if self.failed() {
            return;
        }
        // SAFETY: this thread is the ring's only user (`SINGLE_ISSUER`), and no other borrow
        // of its queues is alive.
        let queued = unsafe { self.ring.submission_shared() }.len() as u32;
        match self.enter_kernel(queued, want) {
            Ok(_) => self.retries.set(0),
            Err(e) if e.raw_os_error().is_some_and(retryable) => {
                let retries = self.retries.get() + 1;
                self.retries.set(retries);
                if retries >= MAX_RETRIES {
                    self.fail(e);
                    return;
                }
                tracing::debug!("io_uring_enter: {e}; tried again next turn");
                // What was not submitted is still queued: the loop turns again for it.
                self.queued.set(true);
            }
            Err(e) => {
                self.fail(e);
                return;
            }
        }
        // SAFETY: as above.
        for cqe in unsafe { self.ring.completion_shared() } {
            let done = Completion {
                result: cqe.result(),
                flags: cqe.flags(),
            };
            let after = self
                .book
                .borrow_mut()
                .complete(cqe.user_data() as usize, done);
            self.settle(after);
        }
    }

    /// Cuts the ring off after a fatal error: every waiter ends with `ECANCELED`, and the
    /// memory of operations still in the kernel stays owned (see [`Slots::fail_all`]).
    fn fail(&self, e: io::Error) {
        self.book.borrow_mut().fail_all();
        *self.failure.borrow_mut() = Some(e);
        if let Some(w) = self.waker.borrow().as_ref() {
            w.wake_by_ref();
        }
    }

    /// Does what a completion or a given-up operation leaves to do.
    fn settle(&self, after: Aftermath) {
        if let Some(id) = after.provided {
            self.give_back(id);
        }
        if let Lent::Write(buf) = after.released {
            self.recycle(buf);
        }
        if let Some(fd) = after.close {
            close_accepted(fd);
        }
    }

    /// Ready when entries are queued or the ring has signalled.
    fn wait(&self, cx: &mut Context<'_>, signal: &AsyncFd<OwnedFd>) -> Poll<()> {
        *self.waker.borrow_mut() = Some(cx.waker().clone());
        if self.queued.get() || self.failed() {
            return Poll::Ready(());
        }
        match signal.poll_read_ready(cx) {
            Poll::Ready(Ok(mut ready)) => {
                ready.clear_ready();
                Poll::Ready(())
            }
            // The eventfd cannot fail; if it did, polling again is all there is to do.
            Poll::Ready(Err(_)) => Poll::Ready(()),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Queues `entry` under a new slot that owns `lent` (an orphan's when `lent` is `None`);
    /// its index. On a failed ring nothing is queued and the slot is already done
    /// (`ECANCELED`, the memory handed back).
    ///
    /// # Safety
    /// Memory the entry points at must be `lent`'s (which the slot keeps until the entry's
    /// completion) or memory that lives as long as the ring.
    unsafe fn queue(&self, entry: squeue::Entry, lent: Option<Lent>) -> usize {
        let failed = self.failed();
        let index = {
            let mut book = self.book.borrow_mut();
            match lent {
                Some(lent) => book.start(lent),
                None => book.start_orphan(),
            }
        };
        if failed {
            self.book
                .borrow_mut()
                .complete(index, super::slots::CANCELED);
            return index;
        }
        let entry = entry.user_data(index as u64);
        // SAFETY: the caller keeps the entry's memory valid; this thread is the only user.
        while unsafe { self.ring.submission_shared().push(&entry) }.is_err() {
            // The queue is full: submit what it holds (completions are handed out too).
            self.enter(0);
            if self.failed() {
                self.book
                    .borrow_mut()
                    .complete(index, super::slots::CANCELED);
                return index;
            }
        }
        if !self.queued.replace(true) {
            if let Some(w) = self.waker.borrow().as_ref() {
                w.wake_by_ref();
            }
        }
        index
    }

    /// Gives up the operation in slot `index` (its future is gone): a completed one is freed
    /// now; one in the kernel keeps its memory until its own completion, and is cancelled.
    fn give_up(&self, index: usize) {
        let (give_up, after) = self.book.borrow_mut().give_up(index);
        self.settle(after);
        if give_up == GiveUp::Cancel {
            self.cancel(index);
        }
    }
}

/// One operation in flight: a future of its completion and the memory it lent. It borrows
/// nothing the kernel uses; dropped early, it queues a cancel and its slot keeps the memory
/// until the operation completes.
pub struct Op<'a> {
    driver: &'a Driver,
    index: Option<usize>,
}

impl Future for Op<'_> {
    type Output = (Completion, Lent);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<(Completion, Lent)> {
        let Some(index) = self.index else {
            return Poll::Ready((super::slots::CANCELED, Lent::Nothing));
        };
        let result = std::task::ready!(self.driver.book.borrow_mut().poll(index, cx));
        self.index = None;
        Poll::Ready(result)
    }
}

impl Drop for Op<'_> {
    fn drop(&mut self) {
        if let Some(index) = self.index.take() {
            self.driver.give_up(index);
        }
    }
}

impl Driver {
    /// Queues `entry`, whose memory is `lent`'s, as an [`Op`] that fails with `ETIMEDOUT` if
    /// it has not completed within `timeout` (checked every 10 ms by the driver loop; no
    /// clock read or timer here).
    ///
    /// # Safety
    /// Everything the entry points at must be `lent`'s memory (or the ring's own).
    unsafe fn op_within(
        &self,
        entry: squeue::Entry,
        lent: Lent,
        timeout: std::time::Duration,
    ) -> Op<'_> {
        // SAFETY: the caller's promise, passed on.
        let index = unsafe { self.queue(entry, Some(lent)) };
        self.set_deadline(index, timeout);
        Op {
            driver: self,
            index: Some(index),
        }
    }

    /// A read from `fd` into the spare capacity of `buf`, which the operation owns until it
    /// completes: the future hands it back, `len` grown by the count read.
    pub(super) async fn recv_owned(
        &self,
        fd: io_uring::types::Fd,
        mut buf: Vec<u8>,
        timeout: std::time::Duration,
    ) -> (io::Result<usize>, Option<Vec<u8>>) {
        let spare = buf.spare_capacity_mut();
        let room = u32::try_from(spare.len()).unwrap_or(u32::MAX);
        let entry = opcode::Recv::new(fd, spare.as_mut_ptr().cast(), room).build();
        // SAFETY: the entry points at `buf`'s heap memory, which does not move when `buf`
        // moves into the slot, and which the slot owns until the read completes.
        let op = unsafe { self.op_within(entry, Lent::Read(buf), timeout) };
        let (done, lent) = op.await;
        let Lent::Read(mut buf) = lent else {
            return (result(done), None);
        };
        if let Ok(n) = result(done) {
            let n = n.min(buf.capacity() - buf.len());
            // SAFETY: the kernel initialized the first `n` bytes of the spare capacity (it
            // writes no more than the `room` it was given).
            unsafe { buf.set_len(buf.len() + n) };
        }
        (result(done), Some(buf))
    }

    /// A send of `parts` (together at most [`SEND_COPY_MAX`] bytes) on `fd`, copied into a
    /// buffer the operation owns; how many bytes the socket took.
    pub(super) async fn send_copied(
        &self,
        fd: io_uring::types::Fd,
        parts: &[std::io::IoSlice<'_>],
        timeout: std::time::Duration,
    ) -> io::Result<usize> {
        let mut buf = self.spare.borrow_mut().pop().unwrap_or_default();
        buf.clear();
        for part in parts {
            buf.extend_from_slice(part);
        }
        let len = u32::try_from(buf.len()).unwrap_or(u32::MAX);
        let entry = opcode::Send::new(fd, buf.as_ptr(), len)
            .flags(libc::MSG_NOSIGNAL)
            .build();
        // SAFETY: the entry points at `buf`'s heap memory, owned by the slot until the send
        // completes.
        let op = unsafe { self.op_within(entry, Lent::Write(buf), timeout) };
        let (done, lent) = op.await;
        if let Lent::Write(buf) = lent {
            self.recycle(buf);
        }
        result(done)
    }

    /// One send of what is left of `g`, in an operation that owns all of it; how many bytes
    /// the socket took, and `g` back (`None` if the ring failed first).
    pub(super) async fn send_gather(
        &self,
        fd: io_uring::types::Fd,
        mut g: Box<Gather>,
        timeout: std::time::Duration,
    ) -> (io::Result<usize>, Option<Box<Gather>>) {
        let entry = opcode::SendMsg::new(fd, g.describe())
            .flags(libc::MSG_NOSIGNAL as u32)
            .build();
        // SAFETY: the entry points at `g.msg`, which points at `g.iov`, which points into
        // `g.around` and `g.body`: all inside the box or on the heap of its vectors, none of
        // which moves when the box moves into the slot, which owns it until the completion.
        let op = unsafe { self.op_within(entry, Lent::Gather(g), timeout) };
        let (done, lent) = op.await;
        match lent {
            Lent::Gather(g) => (result(done), Some(g)),
            _ => (result(done), None),
        }
    }

    /// Keeps a send buffer for reuse.
    fn recycle(&self, buf: Vec<u8>) {
        let mut spare = self.spare.borrow_mut();
        if spare.len() < SPARE_SENDS && buf.capacity() <= SEND_COPY_MAX {
            spare.push(buf);
        }
    }

    /// A read of up to [`PROVIDED_SIZE`] bytes from `fd` into a provided buffer, waiting for
    /// bytes without holding any memory of its own. Completes with `-ENOBUFS` when every
    /// provided buffer is in use. A filled buffer given up with the future goes back to the
    /// kernel.
    pub(super) async fn recv_provided(&self, fd: io_uring::types::Fd) -> Completion {
        let entry = opcode::Recv::new(fd, std::ptr::null_mut(), PROVIDED_SIZE as u32)
            .buf_group(GROUP)
            .build()
            .flags(squeue::Flags::BUFFER_SELECT);
        // SAFETY: the kernel writes into a provided buffer, which lives as long as the ring
        // (or is leaked with it while such a read may be in the kernel).
        let index = unsafe { self.queue(entry, Some(Lent::Provided)) };
        let op = Op {
            driver: self,
            index: Some(index),
        };
        op.await.0
    }

    /// Gives provided buffer `id` to the kernel (again, once its bytes have been copied
    /// out): an entry at the buffer ring's tail, then the tail moved past it.
    pub(super) fn give_back(&self, id: u16) {
        assert!(id < PROVIDED_COUNT);
        let addr = self.provided[usize::from(id) * PROVIDED_SIZE].get();
        let tail = self.buf_ring.tail.get();
        let index = usize::from(tail & (PROVIDED_COUNT - 1));
        // SAFETY: `index` is within the ring's `PROVIDED_COUNT` entries; the kernel reads only
        // entries before the published tail, and this one is past it until the store below.
        unsafe {
            let entry = &mut *self.buf_ring.base.add(index);
            entry.set_addr(addr as u64);
            entry.set_len(PROVIDED_SIZE as u32);
            entry.set_bid(id);
        }
        let next = tail.wrapping_add(1);
        self.buf_ring.tail.set(next);
        // SAFETY: the tail field is a u16 inside the ring's first entry, which the kernel
        // reads with acquire ordering; this release store publishes the entry written above.
        unsafe {
            let tail = io_uring::types::BufRingEntry::tail(self.buf_ring.base)
                .cast::<std::sync::atomic::AtomicU16>();
            (*tail).store(next, std::sync::atomic::Ordering::Release);
        }
    }

    /// Appends bytes `from..to` of provided buffer `id` to `out`, as many as its spare
    /// capacity holds; how many.
    pub(super) fn copy_out(&self, id: u16, from: usize, to: usize, out: &mut Vec<u8>) -> usize {
        let n = (to - from).min(out.capacity() - out.len());
        out.extend_from_slice(self.provided_bytes(id, from, from + n));
        n
    }

    /// Copies bytes `from..to` of provided buffer `id` into `out`; how many.
    pub(super) fn copy_into(&self, id: u16, from: usize, to: usize, out: &mut [u8]) -> usize {
        let n = (to - from).min(out.len());
        out[..n].copy_from_slice(self.provided_bytes(id, from, from + n));
        n
    }

    /// Bytes `from..to` of provided buffer `id`, which a completed read filled.
    fn provided_bytes(&self, id: u16, from: usize, to: usize) -> &[u8] {
        assert!(from <= to && to <= PROVIDED_SIZE && id < PROVIDED_COUNT);
        let start = usize::from(id) * PROVIDED_SIZE + from;
        let cells = &self.provided[start..start + (to - from)];
        // SAFETY: the kernel wrote these bytes before the read completed (the buffer was
        // zeroed before that, so they are initialized either way) and does not touch the
        // buffer again until it is given back, which its holder does only after copying;
        // `UnsafeCell<u8>` has `u8`'s layout.
        unsafe { std::slice::from_raw_parts(cells.as_ptr().cast::<u8>(), cells.len()) }
    }

    /// Queues a wait for `events` on `fd` that lends no memory, so it may be left behind
    /// without waiting ([`Driver::forget`]); its slot, to poll with [`Driver::poll_wait`].
    pub(super) fn queue_wait(&self, fd: io_uring::types::Fd, events: u32) -> usize {
        let entry = opcode::PollAdd::new(fd, events).build();
        // SAFETY: a poll entry points at no memory.
        unsafe { self.queue(entry, Some(Lent::Nothing)) }
    }

    /// A pause of about `length` (rounded up to the next sweep) that asks nothing of the
    /// kernel: given up before it ends ([`Driver::forget`]), it has cost a slot and no
    /// system call. Its slot, to poll with [`Driver::poll_wait`].
    pub(super) fn nap(&self, length: std::time::Duration) -> usize {
        let index = self.book.borrow_mut().start_nap();
        if self.failed() {
            // No loop turns to end it: it ends at once.
            self.book.borrow_mut().fail_all();
            return index;
        }
        self.set_deadline(index, length);
        index
    }

    /// Closes `fd` with the next turn's submission rather than a system call of its own. The
    /// descriptor stays open (its number taken) until the kernel runs the close. On a failed
    /// ring it is closed at once.
    pub(super) fn close(&self, fd: OwnedFd) {
        if self.failed() {
            return drop(fd);
        }
        use std::os::fd::IntoRawFd;
        let entry = opcode::Close::new(io_uring::types::Fd(fd.into_raw_fd())).build();
        // SAFETY: a close entry points at no memory; the descriptor is the entry's to close.
        unsafe { self.queue(entry, None) };
    }

    /// How many operations the kernel holds (for tests: what a future left behind).
    #[cfg(test)]
    pub(super) fn in_kernel(&self) -> usize {
        self.book.borrow().in_kernel()
    }

    /// Whether the operation in slot `index` has completed, without taking its result.
    pub(super) fn fired(&self, index: usize) -> bool {
        self.book.borrow().is_done(index)
    }

    /// The completion of the wait in slot `index` once it has fired (the slot is then freed).
    pub(super) fn poll_wait(&self, index: usize, cx: &mut Context<'_>) -> Poll<Completion> {
        self.book.borrow_mut().poll(index, cx).map(|(done, _)| done)
    }

    /// Gives up the wait in slot `index`: cancelled, and its slot freed when the kernel says
    /// so (a wait holds the socket open until then).
    pub(super) fn forget(&self, index: usize) {
        self.give_up(index);
    }

    /// A readiness wait for `events` on `fd` that ends with `ETIMEDOUT` after `timeout`.
    pub(super) async fn wait_within(
        &self,
        fd: io_uring::types::Fd,
        events: u32,
        timeout: std::time::Duration,
    ) -> io::Result<()> {
        let entry = opcode::PollAdd::new(fd, events).build();
        // SAFETY: a poll entry points at no memory.
        let op = unsafe { self.op_within(entry, Lent::Nothing, timeout) };
        result(op.await.0).map(|_| ())
    }
}

/// A result of an operation as `io::Result`.
pub(super) fn result(done: Completion) -> io::Result<usize> {
    let r = done.result;
    if r < 0 {
        Err(io::Error::from_raw_os_error(-r))
    } else {
        Ok(r as usize)
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if !self.failed() {
            // Entries queued since the loop's last turn (the closes of the connections
            // dropped with the worker, the cancels of their reads) still go out: unsubmitted,
            // their descriptors would leak.
            let _ = self.ring.submit();
            self.drain();
        }
        // Closing the ring does not wait for the kernel to drop what it still holds: memory
        // lent to operations it has not completed is leaked rather than freed under it.
        let lent = self.book.get_mut().take_lent();
        let provided_in_use = lent.iter().any(|l| matches!(l, Lent::Provided));
        lent.into_iter().for_each(std::mem::forget);
        if provided_in_use || self.ring.submitter().unregister_buf_ring(GROUP).is_err() {
            std::mem::forget(std::mem::take(&mut self.provided));
            self.buf_ring.base = std::ptr::null_mut();
        }
    }
}

impl Driver {
    /// Waits a little (at most a few hundred milliseconds in all) for the operations still
    /// in the kernel that may write into memory, cancelled by their futures' drops, to
    /// complete, and for cancelled accepts, whose listening sockets stay open (and take
    /// connections nobody will answer) until then. Waits lend nothing and are not waited for.
    fn drain(&mut self) {
        let wait = io_uring::types::Timespec::new().nsec(50_000_000);
        let args = io_uring::types::SubmitArgs::new().timespec(&wait);
        for _ in 0..6 {
            let book = self.book.get_mut();
            if !book.lends_memory() && !book.holds_a_listener() {
                return;
            }
            let entered = self.ring.submitter().submit_with_args(1, &args);
            // SAFETY: this thread is the ring's only user.
            for cqe in unsafe { self.ring.completion_shared() } {
                let done = Completion {
                    result: cqe.result(),
                    flags: cqe.flags(),
                };
                let after = self.book.get_mut().complete(cqe.user_data() as usize, done);
                if let Some(fd) = after.close {
                    close_accepted(fd);
                }
            }
            if matches!(&entered, Err(e) if !e.raw_os_error().is_some_and(|n| retryable(n) || n == libc::ETIME))
            {
                return;
            }
        }
    }
}
