//! Test servers for balancing: an upstream that can be killed (its listener and every
//! connection closed at once, as the kernel does for a SIGKILLed process) and brought back on
//! the same address, with a health endpoint whose status the test sets; and a DNS server whose
//! answer the test changes.

use std::io::{BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use crate::support::read_request;

/// An upstream that answers `GET /health` with a settable status and everything else with 200
/// and its name, after an optional delay.
pub(crate) struct Killable {
    pub(crate) addr: SocketAddr,
    name: String,
    delay: Duration,
    state: Arc<KillableState>,
}

#[derive(Default)]
struct KillableState {
    alive: AtomicBool,
    health: AtomicU16,
    /// Requests answered (health checks not counted).
    served: AtomicUsize,
    /// Requests whose method was not GET.
    other_methods: AtomicUsize,
    conns: Mutex<Vec<TcpStream>>,
}

impl Killable {
    /// Starts on `addr` (port 0: any free port on that address).
    pub(crate) fn start(name: &str, addr: &str, delay: Duration) -> Killable {
        let state = Arc::new(KillableState::default());
        state.health.store(200, Ordering::SeqCst);
        let mut k = Killable {
            addr: addr.parse().unwrap(),
            name: name.into(),
            delay,
            state,
        };
        k.revive();
        k
    }

    /// Starts listening again (on the same address).
    pub(crate) fn revive(&mut self) {
        let listener = TcpListener::bind(self.addr).unwrap();
        self.addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        self.state.alive.store(true, Ordering::SeqCst);
        let (state, name, delay) = (self.state.clone(), self.name.clone(), self.delay);
        thread::spawn(move || loop {
            if !state.alive.load(Ordering::SeqCst) {
                return; // drops the listener: new connections are refused
            }
            match listener.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    state.conns.lock().unwrap().push(s.try_clone().unwrap());
                    let (state, name) = (state.clone(), name.clone());
                    thread::spawn(move || serve(s, &state, &name, delay));
                }
                Err(_) => thread::sleep(Duration::from_millis(2)),
            }
        });
    }

    /// Closes the listener and every connection at once.
    pub(crate) fn kill(&self) {
        self.state.alive.store(false, Ordering::SeqCst);
        for c in self.state.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
        // Let the accept loop see the flag and drop the listener.
        thread::sleep(Duration::from_millis(20));
    }

    /// Sets the status `/health` answers with.
    pub(crate) fn set_health(&self, status: u16) {
        self.state.health.store(status, Ordering::SeqCst);
    }

    /// Requests answered so far (not counting health checks).
    pub(crate) fn served(&self) -> usize {
        self.state.served.load(Ordering::SeqCst)
    }

    /// Requests with another method than GET received so far.
    pub(crate) fn other_methods(&self) -> usize {
        self.state.other_methods.load(Ordering::SeqCst)
    }
}

impl Drop for Killable {
    fn drop(&mut self) {
        self.kill();
    }
}

fn serve(stream: TcpStream, state: &KillableState, name: &str, delay: Duration) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    while let Some(req) = read_request(&mut reader, 0) {
        if !state.alive.load(Ordering::SeqCst) {
            return;
        }
        let (status, body) = if req.path() == "/health" {
            (state.health.load(Ordering::SeqCst), "health".to_string())
        } else {
            if !req.line.starts_with("GET ") {
                state.other_methods.fetch_add(1, Ordering::SeqCst);
            }
            if !delay.is_zero() {
                thread::sleep(delay);
            }
            state.served.fetch_add(1, Ordering::SeqCst);
            (200, name.to_string())
        };
        let response = format!(
            "HTTP/1.1 {status} X\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

/// A DNS server on 127.0.0.1 answering every A query with the addresses the test sets (and
/// AAAA queries with none).
pub(crate) struct Dns {
    pub(crate) addr: SocketAddr,
    answer: Arc<Mutex<Vec<[u8; 4]>>>,
}

impl Dns {
    pub(crate) fn start(answer: &[[u8; 4]]) -> Dns {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = socket.local_addr().unwrap();
        let answer = Arc::new(Mutex::new(answer.to_vec()));
        let current = answer.clone();
        thread::spawn(move || {
            let mut buf = [0u8; 512];
            while let Ok((n, from)) = socket.recv_from(&mut buf) {
                if let Some(reply) = dns_reply(&buf[..n], &current.lock().unwrap()) {
                    let _ = socket.send_to(&reply, from);
                }
            }
        });
        Dns { addr, answer }
    }

    /// Changes the addresses given from now on.
    pub(crate) fn set(&self, answer: &[[u8; 4]]) {
        *self.answer.lock().unwrap() = answer.to_vec();
    }
}

/// The reply to one query: its question echoed, and A records for type A.
fn dns_reply(query: &[u8], ips: &[[u8; 4]]) -> Option<Vec<u8>> {
    let mut end = 12;
    while *query.get(end)? != 0 {
        end += 1 + usize::from(query[end]);
    }
    let question_end = end + 5;
    let qtype = u16::from_be_bytes([*query.get(end + 1)?, *query.get(end + 2)?]);
    let answers: &[[u8; 4]] = if qtype == 1 { ips } else { &[] };
    let mut r = Vec::new();
    r.extend_from_slice(&query[..2]); // id
    r.extend_from_slice(&[0x81, 0x80]); // response, recursion desired and available
    r.extend_from_slice(&[0, 1]);
    r.extend_from_slice(&(answers.len() as u16).to_be_bytes());
    r.extend_from_slice(&[0, 0, 0, 0]);
    r.extend_from_slice(query.get(12..question_end)?);
    for ip in answers {
        r.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4]);
        r.extend_from_slice(ip);
    }
    Some(r)
}
