use std::future::Future;
use std::io::{IoSlice, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::rc::Rc;
use std::time::Duration;

use super::accept::UringListener;
use super::driver::Driver;
use super::stream::UringSocket;

/// A timeout no test reaches.
const LONG: Duration = Duration::from_secs(60);

/// Runs `test` on a current-thread runtime with a ring driven beside it, as a worker does.
fn on_ring<F: std::future::Future<Output = ()>>(test: impl FnOnce(Rc<Driver>) -> F) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        let Some(driver) = new_ring() else { return };
        tokio::task::spawn_local(driver.clone().drive());
        test(driver).await;
    });
}

/// A ring, or `None` (the test is skipped, and says so) where the kernel refuses one and
/// `SLIPSTREAM_SKIP_URING=1` allows that. Without it a refused ring fails the test: a CI
/// machine whose kernel refuses io_uring must not pass these tests by skipping them.
fn new_ring() -> Option<Rc<Driver>> {
    match Driver::new() {
        Ok(driver) => Some(driver),
        Err(e) if std::env::var_os("SLIPSTREAM_SKIP_URING").is_some_and(|v| v == "1") => {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("skipped (SLIPSTREAM_SKIP_URING=1): the kernel refuses io_uring: {e}");
            }
            None
        }
        Err(e) => panic!(
            "the kernel refuses io_uring ({e}); set SLIPSTREAM_SKIP_URING=1 to skip these tests"
        ),
    }
}

fn pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (b, _) = listener.accept().unwrap();
    (a, b)
}

#[test]
fn bytes_go_both_ways_through_the_ring() {
    on_ring(|driver| async move {
        let (mut peer, socket) = pair();
        let conn = UringSocket::new(socket, driver).unwrap();
        peer.write_all(b"ping").unwrap();
        let mut buf = Vec::with_capacity(64);
        assert_eq!(conn.recv(&mut buf, LONG).await.unwrap(), 4);
        assert_eq!(buf, b"ping");
        let mut parts = [IoSlice::new(b"po"), IoSlice::new(b"ng")];
        conn.send_all(&mut parts, LONG).await.unwrap();
        let mut got = [0u8; 4];
        peer.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"pong");
        drop(peer);
        conn.readable().await.unwrap();
        assert_eq!(conn.recv(&mut buf, LONG).await.unwrap(), 0);
    });
}

#[test]
fn a_read_dropped_in_flight_is_cancelled_and_the_ring_goes_on() {
    on_ring(|driver| async move {
        let (mut peer, socket) = pair();
        let conn = UringSocket::new(socket, driver.clone()).unwrap();
        let mut buf = Vec::with_capacity(64);
        let waited =
            tokio::time::timeout(Duration::from_millis(50), conn.recv(&mut buf, LONG)).await;
        assert!(waited.is_err());
        // The buffer stayed with the cancelled read (freed when it completes).
        assert!(buf.is_empty());
        until(|| driver.in_kernel() == 0).await;
        buf.reserve(64);
        // The cancelled read took nothing: the next one gets the bytes.
        peer.write_all(b"late").unwrap();
        assert_eq!(conn.recv(&mut buf, LONG).await.unwrap(), 4);
        assert_eq!(buf, b"late");
    });
}

#[test]
fn many_connections_share_one_ring() {
    on_ring(|driver| async move {
        let mut tasks = Vec::new();
        for i in 0..64u8 {
            let (mut peer, socket) = pair();
            let conn = UringSocket::new(socket, driver.clone()).unwrap();
            tasks.push(tokio::task::spawn_local(async move {
                let mut buf = Vec::with_capacity(8);
                conn.recv(&mut buf, LONG).await.unwrap();
                conn.send_all(&mut [IoSlice::new(&buf)], LONG)
                    .await
                    .unwrap();
            }));
            peer.write_all(&[i]).unwrap();
            tasks.push(tokio::task::spawn_local(async move {
                let mut got = [0u8; 1];
                tokio::task::spawn_blocking(move || peer.read_exact(&mut got).map(|()| got))
                    .await
                    .unwrap()
                    .map(|g| assert_eq!(g, [i]))
                    .unwrap();
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
}

#[test]
fn a_read_past_its_deadline_times_out_and_the_connection_still_works() {
    on_ring(|driver| async move {
        let (mut peer, socket) = pair();
        let conn = UringSocket::new(socket, driver).unwrap();
        let mut buf = Vec::with_capacity(64);
        let started = std::time::Instant::now();
        let err = conn
            .recv(&mut buf, Duration::from_millis(30))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(30));
        peer.write_all(b"late").unwrap();
        assert_eq!(conn.recv(&mut buf, LONG).await.unwrap(), 4);
        assert_eq!(buf, b"late");
    });
}

#[test]
fn waits_beyond_the_provided_buffers_fall_back_to_readiness() {
    on_ring(|driver| async move {
        // More connections with a request waiting than the ring has provided buffers: each
        // wait that finds none left waits for readiness, and every request is read whole.
        let mut conns = Vec::new();
        for i in 0..300u16 {
            let (mut peer, socket) = pair();
            peer.write_all(format!("request {i}").as_bytes()).unwrap();
            conns.push((peer, UringSocket::new(socket, driver.clone()).unwrap()));
        }
        for (_, conn) in &conns {
            conn.readable().await.unwrap();
            assert!(
                conn.ready_now()
                    || rustix::net::recv(
                        conn.socket(),
                        &mut [0u8; 1],
                        rustix::net::RecvFlags::PEEK
                    )
                    .unwrap()
                    .0 > 0
            );
        }
        for (i, (_peer, conn)) in conns.iter().enumerate() {
            let mut buf = Vec::with_capacity(64);
            conn.recv(&mut buf, LONG).await.unwrap();
            assert_eq!(buf, format!("request {i}").as_bytes());
        }
    });
}

#[test]
fn a_hangup_watch_given_up_early_asks_nothing_of_the_kernel_and_a_kept_one_fires() {
    on_ring(|driver| async move {
        let (peer, socket) = pair();
        let conn = UringSocket::new(socket, driver.clone()).unwrap();
        // Given up at once, as when the response comes within milliseconds.
        let early = tokio::time::timeout(Duration::from_millis(1), conn.hangup()).await;
        assert!(early.is_err());
        assert_eq!(driver.in_kernel(), 0, "the watch submitted an operation");
        // Kept: the pause ends, the watch is armed and fires when the peer closes.
        let watch = conn.hangup();
        let mut watch = std::pin::pin!(watch);
        let before = tokio::time::timeout(Duration::from_millis(50), watch.as_mut()).await;
        assert!(before.is_err(), "fired with the peer still there");
        assert_eq!(
            driver.in_kernel(),
            1,
            "no watch in the kernel after the pause"
        );
        drop(peer);
        tokio::time::timeout(LONG, watch).await.unwrap();
    });
}

#[test]
fn a_deadline_set_after_an_idle_spell_counts_from_now() {
    on_ring(|driver| async move {
        let (mut peer, socket) = pair();
        let conn = UringSocket::new(socket, driver).unwrap();
        // The ring sits idle for longer than the timeout below: no turn of its loop reads the
        // clock meanwhile. Blocking the thread is the point here.
        #[allow(clippy::disallowed_methods)]
        std::thread::sleep(Duration::from_millis(300));
        let reader = async {
            let mut buf = Vec::with_capacity(64);
            let n = conn.recv(&mut buf, Duration::from_millis(200)).await;
            (n.map_err(|e| e.kind()), buf)
        };
        let writer = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            peer.write_all(b"after").unwrap();
        };
        let ((n, buf), ()) = tokio::join!(reader, writer);
        assert_eq!(n, Ok(5), "timed out counting from a stale clock");
        assert_eq!(buf, b"after");
    });
}

/// Waits (without a time limit a test would reach) until `what` holds.
async fn until(what: impl Fn() -> bool) {
    let wait = async {
        while !what() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::time::timeout(LONG, wait)
        .await
        .expect("it never happened");
}

/// A listener bound as a worker's are (non-blocking), whose connections the ring accepts.
fn ring_listener(driver: &Rc<Driver>) -> (UringListener, std::net::SocketAddr) {
    let socket = TcpListener::bind("127.0.0.1:0").unwrap();
    socket.set_nonblocking(true).unwrap();
    let at = socket.local_addr().unwrap();
    (UringListener::new(socket, driver.clone()), at)
}

#[test]
fn one_multishot_accept_takes_every_connection_and_a_dropped_listener_closes_what_it_took() {
    on_ring(|driver| async move {
        let (mut listener, at) = ring_listener(&driver);
        let mut kept = Vec::new();
        for i in 0..5u8 {
            let mut client = TcpStream::connect(at).unwrap();
            let (stream, peer) = tokio::time::timeout(LONG, listener.accept())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(peer, client.local_addr().unwrap());
            let super::accept::Accepted::Ring(conn) = stream else {
                panic!("an accepted connection is not on the ring");
            };
            client.write_all(&[i]).unwrap();
            let mut buf = Vec::with_capacity(8);
            assert_eq!(conn.recv(&mut buf, LONG).await.unwrap(), 1);
            assert_eq!(buf, [i]);
            kept.push((client, conn));
        }
        assert_eq!(driver.in_kernel(), 1, "one entry accepts every connection");
        // A connection the ring may have taken but nobody accepted: dropping the listener
        // must close it, not leak it.
        let mut late = TcpStream::connect(at).unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(listener);
        late.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        match late.read(&mut [0u8; 1]) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("the unaccepted connection was left open: {other:?}"),
        }
        until(|| driver.in_kernel() == 0).await;
        // Accepted connections outlive their listener.
        let (client, conn) = &mut kept[0];
        conn.send_all(&mut [IoSlice::new(b"still here")], LONG)
            .await
            .unwrap();
        let mut got = [0u8; 10];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"still here");
    });
}

#[test]
fn a_paused_listener_leaves_connections_in_the_backlog_until_it_accepts_again() {
    on_ring(|driver| async move {
        let (mut listener, at) = ring_listener(&driver);
        let _first = TcpStream::connect(at).unwrap();
        let _first_conn = tokio::time::timeout(LONG, listener.accept())
            .await
            .unwrap()
            .unwrap();
        listener.pause();
        until(|| driver.in_kernel() == 0).await;
        // Paused: the connection waits in the listener's backlog.
        let second = TcpStream::connect(at).unwrap();
        let (_second_conn, peer) = tokio::time::timeout(LONG, listener.accept())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(peer, second.local_addr().unwrap());
        assert_eq!(driver.in_kernel(), 1, "accepting again");
    });
}

#[test]
fn a_dropped_connection_is_closed_through_the_ring() {
    on_ring(|driver| async move {
        let (mut peer, socket) = pair();
        let conn = UringSocket::new(socket, driver.clone()).unwrap();
        drop(conn);
        // The close goes out with the loop's next turn.
        until(|| driver.in_kernel() == 0).await;
        peer.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        assert_eq!(read_end(&mut peer), 0, "the peer saw no end");
    });
}

#[test]
fn a_close_queued_as_the_ring_goes_away_still_reaches_the_peer() {
    let (mut peer, socket) = pair();
    let mut socket = Some(socket);
    on_ring(|driver| async move {
        let conn = UringSocket::new(socket.take().unwrap(), driver).unwrap();
        // Queued; the test ends (and the ring is dropped) before the loop turns again.
        drop(conn);
    });
    peer.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert_eq!(read_end(&mut peer), 0, "the peer saw no end");
}

/// One read of at most a byte, retried when a signal interrupts it.
fn read_end(peer: &mut TcpStream) -> usize {
    loop {
        match peer.read(&mut [0u8; 1]) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => return r.unwrap(),
        }
    }
}

/// Resets the connection from `peer`'s side (RST, not FIN).
fn reset(peer: TcpStream) {
    socket2::SockRef::from(&peer)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(peer);
}

#[test]
fn a_hangup_watch_fires_when_the_peer_resets_the_connection() {
    on_ring(|driver| async move {
        let (peer, socket) = pair();
        let conn = UringSocket::new(socket, driver).unwrap();
        let watch = conn.hangup();
        let mut watch = std::pin::pin!(watch);
        // The watch is armed (past its pause) before the reset arrives.
        let before = tokio::time::timeout(Duration::from_millis(50), watch.as_mut()).await;
        assert!(before.is_err(), "fired with the peer still there");
        reset(peer);
        tokio::time::timeout(LONG, watch)
            .await
            .expect("a reset peer was never seen as gone");
    });
}

#[test]
fn an_idle_watch_sees_the_peer_close_without_a_system_call() {
    on_ring(|driver| async move {
        let (peer, socket) = pair();
        let conn = UringSocket::new(socket, driver.clone()).unwrap();
        conn.watch_idle();
        conn.watch_idle();
        assert_eq!(driver.in_kernel(), 1, "one watch, armed once");
        assert!(!conn.ready_now());
        drop(peer);
        until(|| conn.ready_now()).await;
        let mut probe = [0u8; 1];
        assert_eq!(conn.try_read(&mut probe).unwrap(), 0);
    });
}

#[test]
fn an_idle_watch_stays_armed_through_responses_and_sees_a_later_reset() {
    on_ring(|driver| async move {
        let (mut peer, socket) = pair();
        let conn = UringSocket::new(socket, driver.clone()).unwrap();
        conn.watch_idle();
        // Taken back into use with the watch armed: the response does not fire it.
        for _ in 0..3 {
            // Two answers, read one after the other: a completion the first one caused is
            // in hand by the time the second is read.
            for answer in [&b"response"[..], b"!"] {
                peer.write_all(answer).unwrap();
                let mut buf = Vec::with_capacity(64);
                assert_eq!(conn.recv(&mut buf, LONG).await.unwrap(), answer.len());
            }
            assert_eq!(driver.in_kernel(), 1, "the watch fired on a response");
            assert!(!conn.ready_now(), "a response counted as a close");
            conn.watch_idle();
        }
        reset(peer);
        until(|| conn.ready_now()).await;
        assert!(conn.try_read(&mut [0u8; 1]).is_err());
    });
}

/// Polls `op` once (it must be waiting on the kernel) and leaks it, as `mem::forget` lets safe
/// code do: whatever it lent the kernel must stay alive without it.
fn leak_while_pending(op: impl Future) {
    let mut op = Box::pin(op);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(op.as_mut().poll(&mut cx).is_pending());
    std::mem::forget(op);
}

#[test]
fn a_leaked_read_keeps_its_buffer_in_the_ring_and_the_kernel_writes_into_that() {
    on_ring(|driver| async move {
        let (mut peer, socket) = pair();
        let conn = UringSocket::new(socket, driver.clone()).unwrap();
        let mut buf = Vec::with_capacity(64);
        // Leaked while the kernel holds the read: the caller's buffer is not lent.
        leak_while_pending(conn.recv(&mut buf, LONG));
        assert_eq!(
            buf.capacity(),
            0,
            "the caller's buffer is lent to a leaked read"
        );
        until(|| driver.in_kernel() == 1).await;
        // The kernel writes into the buffer the ring owns, not into freed memory.
        buf.extend_from_slice(b"mine");
        peer.write_all(b"late").unwrap();
        until(|| driver.in_kernel() == 0).await;
        assert_eq!(buf, b"mine");
        // The ring goes on.
        peer.write_all(b"more").unwrap();
        buf.clear();
        buf.reserve(64);
        assert_eq!(conn.recv(&mut buf, LONG).await.unwrap(), 4);
        assert_eq!(buf, b"more");
    });
}

#[test]
fn a_large_send_goes_out_directly_and_a_small_one_through_the_ring() {
    on_ring(|driver| async move {
        let (mut peer, socket) = pair();
        let conn = UringSocket::new(socket, driver).unwrap();
        let big: Vec<u8> = (0..4 * super::driver::SEND_COPY_MAX)
            .map(|i| i as u8)
            .collect();
        let reader = std::thread::spawn(move || {
            let mut got = vec![0u8; 4 * super::driver::SEND_COPY_MAX + 5];
            peer.read_exact(&mut got).unwrap();
            got
        });
        conn.send_all(&mut [IoSlice::new(&big), IoSlice::new(b"small")], LONG)
            .await
            .unwrap();
        let got = tokio::task::spawn_blocking(move || reader.join().unwrap())
            .await
            .unwrap();
        assert_eq!(&got[..big.len()], &big[..]);
        assert_eq!(&got[big.len()..], b"small");
    });
}

#[test]
fn a_large_send_lends_its_body_to_the_ring_in_pieces_and_gets_it_back_whole() {
    on_ring(|driver| async move {
        let (mut peer, socket) = pair();
        // A small send buffer: the socket takes the send in several pieces.
        socket2::SockRef::from(&socket)
            .set_send_buffer_size(16 * 1024)
            .unwrap();
        let conn = UringSocket::new(socket, driver.clone()).unwrap();
        let body: Vec<u8> = (0..1024 * 1024).map(|i| (i % 251) as u8).collect();
        let range = 7..body.len() - 7;
        let expected = [
            &b"head "[..],
            b"3\r\n",
            &body[range.clone()],
            b"\r\n",
            b"0\r\n\r\n",
        ]
        .concat();
        let wanted = expected.len();
        let reader = std::thread::spawn(move || {
            let mut got = vec![0u8; wanted];
            peer.read_exact(&mut got).unwrap();
            got
        });
        let mut lent = body.clone();
        let (address, capacity) = (lent.as_ptr(), lent.capacity());
        let before = [&b"head "[..], b"3\r\n"];
        let after = [&b"\r\n"[..], b"0\r\n\r\n"];
        conn.send_all_around(before, &mut lent, range, after, LONG)
            .await
            .unwrap();
        assert_eq!(driver.in_kernel(), 0);
        // The very buffer comes back, untouched.
        assert_eq!((lent.as_ptr(), lent.capacity()), (address, capacity));
        assert_eq!(lent, body);
        let got = tokio::task::spawn_blocking(move || reader.join().unwrap())
            .await
            .unwrap();
        assert!(got == expected, "the bytes arrived out of order or changed");
    });
}

#[test]
fn a_leaked_large_send_keeps_its_body_in_the_ring_until_the_kernel_is_done() {
    on_ring(|driver| async move {
        let (mut peer, socket) = pair();
        socket2::SockRef::from(&socket)
            .set_send_buffer_size(16 * 1024)
            .unwrap();
        let conn = UringSocket::new(socket, driver.clone()).unwrap();
        let mut body = vec![b'x'; 1024 * 1024];
        let range = 0..body.len();
        leak_while_pending(conn.send_all_around([&[], &[]], &mut body, range, [&[], &[]], LONG));
        assert_eq!(
            body.capacity(),
            0,
            "the caller's buffer is lent to a leaked send"
        );
        until(|| driver.in_kernel() == 1).await;
        // The kernel reads the buffer the ring owns: what the leaked send
        // got out (one sendmsg's worth; nobody polls for the rest) arrives
        // unchanged, and closing the connection ends the stream.
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            peer.read_to_end(&mut got).unwrap();
            got
        });
        until(|| driver.in_kernel() == 0).await;
        drop(conn);
        let got = tokio::task::spawn_blocking(move || reader.join().unwrap())
            .await
            .unwrap();
        assert!(
            !got.is_empty() && got.iter().all(|&b| b == b'x'),
            "{} bytes",
            got.len()
        );
    });
}

#[test]
fn an_interrupted_or_busy_enter_is_tried_again_and_timeouts_and_closes_go_on() {
    on_ring(|driver| async move {
        let (mut peer, socket) = pair();
        let conn = UringSocket::new(socket, driver.clone()).unwrap();
        driver
            .inject
            .borrow_mut()
            .extend([libc::EINTR, libc::EBUSY, libc::EAGAIN, libc::EINTR]);
        peer.write_all(b"ping").unwrap();
        let mut buf = Vec::with_capacity(64);
        assert_eq!(conn.recv(&mut buf, LONG).await.unwrap(), 4);
        assert!(driver.inject.borrow().is_empty(), "no error was injected");
        driver.inject.borrow_mut().extend([libc::EINTR; 3]);
        let err = conn
            .recv(&mut buf, Duration::from_millis(30))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        driver.inject.borrow_mut().extend([libc::EBUSY; 3]);
        drop(conn);
        until(|| driver.inject.borrow().is_empty() && driver.in_kernel() == 0).await;
        peer.set_read_timeout(Some(LONG)).unwrap();
        assert_eq!(read_end(&mut peer), 0, "the close was lost");
        assert!(!driver.failed());
    });
}

#[test]
fn a_fatal_enter_error_moves_the_worker_to_epoll_logged_and_counted() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        if new_ring().is_none() {
            return;
        }
        let failures = Rc::new(std::cell::Cell::new(0));
        let counted = failures.clone();
        super::start(move |_| counted.set(counted.get() + 1)).unwrap();
        let driver = super::current().unwrap();
        let socket = TcpListener::bind("127.0.0.1:0").unwrap();
        socket.set_nonblocking(true).unwrap();
        let at = socket.local_addr().unwrap();
        let mut listener = super::listener(socket).ok().unwrap();
        let mut first = TcpStream::connect(at).unwrap();
        let (ring_conn, _) = tokio::time::timeout(LONG, listener.accept())
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(ring_conn, super::accept::Accepted::Ring(_)));
        let super::accept::Accepted::Ring(ring_conn) = ring_conn else {
            unreachable!()
        };
        // A read waits in the kernel when the ring is cut off.
        let mut buf = Vec::with_capacity(64);
        let mut read = Box::pin(ring_conn.recv(&mut buf, LONG));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(read.as_mut().poll(&mut cx).is_pending());
        until(|| driver.in_kernel() >= 2).await;
        driver.inject.borrow_mut().push_back(libc::EBADF);
        // Something to submit, so the loop enters (and gets the error).
        let nap = super::stream::UringSocket::new(pair().1, driver.clone()).unwrap();
        drop(nap);
        until(|| failures.get() == 1).await;
        assert!(driver.failed());
        // The read in flight ends with an error instead of hanging; its buffer stays with
        // the ring (the kernel may still write into it).
        assert!(tokio::time::timeout(LONG, read).await.unwrap().is_err());
        assert_eq!(buf.capacity(), 0);
        // The ring's connection fails its next operations rather than hang.
        buf.reserve(64);
        assert!(ring_conn.recv(&mut buf, LONG).await.is_err());
        assert!(ring_conn
            .send_all(&mut [IoSlice::new(b"x")], LONG)
            .await
            .is_err());
        drop(ring_conn);
        first.set_read_timeout(Some(LONG)).unwrap();
        assert_eq!(
            read_end(&mut first),
            0,
            "the ring's connection was not closed"
        );
        // New connections run on epoll: accepted and adopted.
        assert!(super::current().is_none());
        let mut second = TcpStream::connect(at).unwrap();
        let (stream, _) = tokio::time::timeout(LONG, listener.accept())
            .await
            .unwrap()
            .unwrap();
        let super::accept::Accepted::Epoll(tcp) = stream else {
            panic!("a connection after the failure is not on epoll");
        };
        second.write_all(b"epoll").unwrap();
        let mut got = [0u8; 5];
        tokio::io::AsyncReadExt::read_exact(&mut { tcp }, &mut got)
            .await
            .unwrap();
        assert_eq!(&got, b"epoll");
        let adopted = super::adopt(tokio::net::TcpStream::connect(at).await.unwrap()).unwrap();
        assert!(matches!(adopted, super::accept::Accepted::Epoll(_)));
        assert_eq!(failures.get(), 1);
    });
}

/// Queued sends (a TLS connection's records): each write is taken at once and they reach the
/// peer whole and in order, also when the socket fills and the peer drains it only later
/// (short sends are sent again from where they stopped); a flush waits for all of them.
#[test]
fn queued_sends_arrive_whole_and_in_order_through_a_full_socket() {
    on_ring(|driver| async move {
        let (mut peer, socket) = pair();
        socket2::SockRef::from(&socket)
            .set_send_buffer_size(4096)
            .unwrap();
        let conn = UringSocket::new(socket, driver).unwrap();
        let reader = std::thread::spawn(move || {
            // The socket fills before anything is read (a thread of its own, not the ring's).
            #[allow(clippy::disallowed_methods)]
            std::thread::sleep(Duration::from_millis(200));
            let mut got = Vec::new();
            peer.read_to_end(&mut got).unwrap();
            got
        });
        let mut sent = Vec::new();
        for i in 0..200u32 {
            let chunk: Vec<u8> = (0..8000u32).map(|j| ((i * 7 + j) % 251) as u8).collect();
            let n = std::future::poll_fn(|cx| conn.poll_write_queued(cx, &[IoSlice::new(&chunk)]))
                .await
                .unwrap();
            assert_eq!(n, chunk.len(), "a queued write takes all it is given");
            sent.extend_from_slice(&chunk);
        }
        std::future::poll_fn(|cx| conn.poll_sent(cx)).await.unwrap();
        conn.shutdown_write().unwrap();
        drop(conn);
        let got = tokio::task::spawn_blocking(move || reader.join().unwrap())
            .await
            .unwrap();
        assert_eq!(got.len(), sent.len());
        assert!(got == sent, "the bytes arrived in order");
    });
}

#[test]
fn completions_the_kernel_left_for_a_later_turn_are_run_without_a_new_signal() {
    // The kernel runs at most 20 deferred completions per `io_uring_enter` and signals the
    // eventfd only when its list goes from empty to not, so the loop must ask whether it
    // left some. Those that run first here hand out nothing: their bytes were read away
    // before the ring got to them, so each only waits again.
    use std::os::fd::AsRawFd;
    on_ring(|driver| async move {
        let open = |n: usize| -> Vec<(TcpStream, Rc<UringSocket>)> {
            (0..n)
                .map(|_| {
                    let (peer, socket) = pair();
                    let conn = Rc::new(UringSocket::new(socket, driver.clone()).unwrap());
                    (peer, conn)
                })
                .collect()
        };
        let (taken, real) = (open(30), open(10));
        let waits: Vec<_> = taken
            .iter()
            .chain(&real)
            .map(|(_, conn)| {
                let conn = conn.clone();
                tokio::task::spawn_local(async move { conn.readable().await })
            })
            .collect();
        until(|| driver.in_kernel() == 40).await;
        for (peer, conn) in &taken {
            (&*peer).write_all(b"x").unwrap();
            let mut byte = 0u8;
            let fd = conn.socket().as_raw_fd();
            // SAFETY: one byte into a local, on a socket this test owns.
            let n = unsafe { libc::recv(fd, (&raw mut byte).cast(), 1, libc::MSG_DONTWAIT) };
            assert_eq!(n, 1);
        }
        for (peer, _) in &real {
            (&*peer).write_all(b"y").unwrap();
        }
        let mut waits = waits;
        let real_waits = waits.split_off(30);
        let all = async {
            for w in real_waits {
                w.await.unwrap().unwrap();
            }
        };
        tokio::time::timeout(LONG, all)
            .await
            .expect("completions were left in the kernel");
        for w in waits {
            w.abort();
        }
    });
}
