//! A blind TCP relay (no HTTP), like ../shared/floor's, built the way slipstream's io_uring
//! path is meant to be: tokio's current-thread runtime drives tasks, and their socket reads and
//! writes are io_uring operations. It measures what that hybrid costs against the pure io_uring
//! loop (`relay_uring`), before slipstream's own path is built on it. For measuring only.
//!
//! - One ring per thread, `SINGLE_ISSUER | DEFER_TASKRUN`: completions are run in batches when
//!   the thread asks for them, not the moment a packet lands (without it, the kernel retries
//!   each recv from task work while the sender's CPU still holds the socket lock, and a quarter
//!   of the CPU went to spinning on it).
//! - The ring tells tokio's epoll that completions wait through a registered eventfd (a ring
//!   fd in epoll is never woken for deferred work). The eventfd is never read: epoll is
//!   edge-triggered and every signal is a new edge.
//! - Operations queue their entries and wake the driver task, which runs after the tasks
//!   already woken: one `io_uring_enter` submits the whole batch and reaps completions.
//!
//! Not handled, since a relay never needs it: an operation dropped while in flight (its buffer
//! must outlive it; slipstream's path will keep such buffers until the completion arrives).
#![allow(unsafe_code)]

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::task::{Poll, Waker};

use io_uring::{opcode, squeue, types, IoUring};
use tokio::io::unix::AsyncFd;

/// The state of one operation in flight.
enum Slot {
    Free,
    Waiting(Option<Waker>),
    Done(i32),
}

/// A thread's ring and its operations.
struct Driver {
    ring: IoUring,
    slots: RefCell<Vec<Slot>>,
    free: RefCell<Vec<usize>>,
    /// Entries are queued that the driver has not submitted yet.
    queued: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

thread_local! {
    static DRIVER: Rc<Driver> = Rc::new(Driver {
        ring: IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(4096)
            .expect("io_uring with DEFER_TASKRUN (Linux 6.1 or later)"),
        slots: RefCell::new(Vec::new()),
        free: RefCell::new(Vec::new()),
        queued: Cell::new(false),
        waker: RefCell::new(None),
    });
}

/// Runs one operation; its result (a count or a negated errno).
async fn op(entry: squeue::Entry) -> i32 {
    let d = DRIVER.with(Rc::clone);
    let index = {
        let mut slots = d.slots.borrow_mut();
        match d.free.borrow_mut().pop() {
            Some(i) => {
                slots[i] = Slot::Waiting(None);
                i
            }
            None => {
                slots.push(Slot::Waiting(None));
                slots.len() - 1
            }
        }
    };
    let entry = entry.user_data(index as u64);
    // SAFETY: the buffers the entry points at belong to the awaiting task, which outlives the
    // operation (see the module comment). This thread is the ring's only user.
    while unsafe { d.ring.submission_shared().push(&entry) }.is_err() {
        d.ring.submit().expect("io_uring_enter");
    }
    if !d.queued.replace(true) {
        if let Some(w) = d.waker.borrow().as_ref() {
            w.wake_by_ref();
        }
    }
    poll_fn(|cx| {
        let mut slots = d.slots.borrow_mut();
        match &mut slots[index] {
            Slot::Done(result) => {
                let result = *result;
                slots[index] = Slot::Free;
                d.free.borrow_mut().push(index);
                Poll::Ready(result)
            }
            Slot::Waiting(w) => {
                *w = Some(cx.waker().clone());
                Poll::Pending
            }
            Slot::Free => unreachable!("a slot in use is never free"),
        }
    })
    .await
}

/// `IORING_ENTER_GETEVENTS`: also run deferred completions.
const GETEVENTS: u32 = 1;

/// The eventfd the ring signals, as tokio sees it.
struct EventFd(RawFd);

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// Submits queued entries and hands out completions, then sleeps until either more entries
/// are queued or the ring signals its eventfd.
async fn drive() {
    let d = DRIVER.with(Rc::clone);
    // SAFETY: eventfd(2) has no memory arguments.
    let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    assert!(efd >= 0, "eventfd");
    d.ring
        .submitter()
        .register_eventfd(efd)
        .expect("register eventfd");
    // SAFETY: the eventfd stays open for the life of the registration (the whole process).
    let signal =
        unsafe { AsyncFd::register_with_interest(EventFd(efd), tokio::io::Interest::READABLE) }
            .map_err(|e| e.into_parts().1)
            .expect("register the eventfd with tokio");
    loop {
        d.queued.set(false);
        let queued = unsafe { d.ring.submission_shared() }.len() as u32;
        // SAFETY: no argument; GETEVENTS runs the deferred completions.
        unsafe {
            let _ = d
                .ring
                .submitter()
                .enter::<libc::sigset_t>(queued, 0, GETEVENTS, None);
        }
        {
            let mut slots = d.slots.borrow_mut();
            // SAFETY: this thread is the ring's only user.
            for cqe in unsafe { d.ring.completion_shared() } {
                let i = cqe.user_data() as usize;
                if let Slot::Waiting(Some(w)) =
                    std::mem::replace(&mut slots[i], Slot::Done(cqe.result()))
                {
                    w.wake();
                }
            }
        }
        poll_fn(|cx| {
            *d.waker.borrow_mut() = Some(cx.waker().clone());
            if d.queued.get() {
                return Poll::Ready(());
            }
            match signal.poll_read_ready(cx) {
                Poll::Ready(Ok(mut ready)) => {
                    ready.clear_ready();
                    Poll::Ready(())
                }
                Poll::Ready(Err(e)) => panic!("eventfd: {e}"),
                Poll::Pending => Poll::Pending,
            }
        })
        .await;
    }
}

/// Copies bytes from one socket to the other until either side ends.
async fn pump(from: RawFd, to: RawFd) {
    let mut buf = vec![0u8; 1 << 17];
    loop {
        let recv = opcode::Recv::new(types::Fd(from), buf.as_mut_ptr(), buf.len() as u32);
        let n = op(recv.build()).await;
        if n <= 0 {
            return;
        }
        let mut sent = 0;
        while sent < n as usize {
            let rest = &buf[sent..n as usize];
            let send = opcode::Send::new(types::Fd(to), rest.as_ptr(), rest.len() as u32);
            let w = op(send.build()).await;
            if w <= 0 {
                return;
            }
            sent += w as usize;
        }
    }
}

fn main() {
    let args: Vec<u16> = std::env::args()
        .skip(1)
        .map(|a| {
            a.parse()
                .expect("usage: hybrid-relay LISTEN_PORT UPSTREAM_PORT")
        })
        .collect();
    let [listen, upstream] = args[..] else {
        panic!("usage: hybrid-relay LISTEN_PORT UPSTREAM_PORT (127.0.0.1 only)");
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        tokio::task::spawn_local(drive());
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", listen))
            .await
            .unwrap();
        loop {
            let (client, _) = listener.accept().await.unwrap();
            let client = client.into_std().unwrap();
            client.set_nonblocking(false).unwrap();
            client.set_nodelay(true).unwrap();
            let server = std::net::TcpStream::connect(("127.0.0.1", upstream)).unwrap();
            server.set_nodelay(true).unwrap();
            let (c, s) = (client.as_raw_fd(), server.as_raw_fd());
            let pair = Rc::new((client, server));
            let held = pair.clone();
            tokio::task::spawn_local(async move {
                pump(c, s).await;
                drop(held);
            });
            tokio::task::spawn_local(async move {
                pump(s, c).await;
                drop(pair);
            });
        }
    });
}
