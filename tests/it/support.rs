//! Test harness: the proxy started in-process from inline TOML on 127.0.0.1:0, scriptable mock
//! upstreams that record the exact bytes they receive, and raw-socket clients.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use slipstream::config::IoMode;
use slipstream::{Config, Server};

/// A request as the mock upstream saw it.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    /// Request line, e.g. `GET / HTTP/1.1`.
    pub line: String,
    /// Header fields in order, names as sent.
    pub headers: Vec<(String, String)>,
    /// The body with framing removed.
    pub body: Vec<u8>,
    /// The exact bytes of the head and body as received.
    pub raw: Vec<u8>,
    /// Which upstream connection (0-based) carried it.
    pub connection: usize,
}

impl Seen {
    /// First value of a header, by case-insensitive name.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Path of the request line.
    pub(crate) fn path(&self) -> &str {
        self.line.split(' ').nth(1).unwrap_or("")
    }
}

/// What the mock upstream does with a request.
pub(crate) enum Reply {
    /// Write these bytes and keep the connection.
    Bytes(Vec<u8>),
    /// Write these bytes, then close.
    BytesThenClose(Vec<u8>),
    /// Write a head, then `len` bytes of the test pattern, keeping the connection.
    Pattern { head: Vec<u8>, len: u64 },
    /// Wait this long, then answer.
    Delay(Duration, Box<Reply>),
    /// Wait until the gate opens, then answer.
    AfterGate(Gate, Box<Reply>),
    /// Write these bytes, then keep the connection open without a further answer until the
    /// peer closes it.
    BytesThenHold(Vec<u8>),
    /// Write these bytes, then go on with the next reply (a response in parts).
    BytesThen(Vec<u8>, Box<Reply>),
    /// Close without answering.
    Close,
}

/// A gate a test opens when it is ready for a mock to go on: explicit ordering instead of a
/// sleep that races the proxy.
#[derive(Clone, Default)]
pub(crate) struct Gate(Arc<(Mutex<bool>, std::sync::Condvar)>);

impl Gate {
    /// Opens the gate for every waiter, now and later.
    pub(crate) fn open(&self) {
        *self.0 .0.lock().unwrap() = true;
        self.0 .1.notify_all();
    }

    /// Blocks until the gate is open (at most a minute, so a failed test cannot hang).
    pub(crate) fn wait(&self) {
        let guard = self.0 .0.lock().unwrap();
        let (open, _) = self
            .0
             .1
            .wait_timeout_while(guard, Duration::from_secs(60), |open| !*open)
            .unwrap();
        assert!(*open, "gate never opened");
    }
}

type Handler = dyn Fn(&Seen) -> Reply + Send + Sync;

/// A mock upstream server on an ephemeral port.
pub(crate) struct Upstream {
    /// Its address.
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    raw: Arc<Mutex<Vec<u8>>>,
    connections: Arc<AtomicUsize>,
    /// Body bytes written by `Reply::Pattern` so far, over all connections.
    pub written: Arc<std::sync::atomic::AtomicU64>,
}

impl Upstream {
    /// Starts a server answering every request with `handler`.
    pub(crate) fn start(handler: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let raw = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let written = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let handler: Arc<Handler> = Arc::new(handler);
        let (s, r, c, w) = (
            seen.clone(),
            raw.clone(),
            connections.clone(),
            written.clone(),
        );
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let id = c.fetch_add(1, Ordering::SeqCst);
                let (s, r, h, w) = (s.clone(), r.clone(), handler.clone(), w.clone());
                thread::spawn(move || serve_mock(stream, id, s, r, h, w));
            }
        });
        Upstream {
            addr,
            seen,
            raw,
            connections,
            written,
        }
    }

    /// Answers every request with 200 and `body`.
    pub(crate) fn ok(body: &'static [u8]) -> Upstream {
        Upstream::start(move |_| Reply::Bytes(response(200, body)))
    }

    /// Requests received so far.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Every byte received on every connection.
    pub(crate) fn raw(&self) -> Vec<u8> {
        self.raw.lock().unwrap().clone()
    }

    /// Connections accepted so far.
    pub(crate) fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// A plain `200`-style response with Content-Length.
pub(crate) fn response(status: u16, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nX-Upstream: mock\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

/// Byte `i` of a small deterministic pattern.
pub(crate) fn pattern_byte(i: u64) -> u8 {
    (i.wrapping_mul(2654435761) >> 13) as u8
}

const BLOCK: usize = 64 * 1024;

/// The test stream: 64 KiB blocks of a fixed pattern, each stamped with its index in its first
/// 8 bytes, so a lost, repeated or reordered block changes the hash. Fast to generate.
pub(crate) fn fill_pattern(buf: &mut [u8], from: u64) {
    static BASE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let base = BASE.get_or_init(|| (0..BLOCK as u64).map(pattern_byte).collect());
    let mut done = 0;
    while done < buf.len() {
        let pos = from + done as u64;
        let block = pos / BLOCK as u64;
        let offset = (pos % BLOCK as u64) as usize;
        let n = (BLOCK - offset).min(buf.len() - done);
        let out = &mut buf[done..done + n];
        out.copy_from_slice(&base[offset..offset + n]);
        let stamp = block.to_le_bytes();
        for (i, b) in out
            .iter_mut()
            .enumerate()
            .take(8usize.saturating_sub(offset))
        {
            *b = stamp[offset + i];
        }
        done += n;
    }
}

/// The xxh3-128 hash of the first `len` bytes of the test stream.
pub(crate) fn pattern_hash(len: u64) -> u128 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut pos = 0;
    while pos < len {
        let n = (len - pos).min(buf.len() as u64) as usize;
        fill_pattern(&mut buf[..n], pos);
        h.update(&buf[..n]);
        pos += n as u64;
    }
    h.digest128()
}

/// Reads exactly `len` bytes and returns their xxh3-128 hash.
pub(crate) fn hash_exactly(reader: &mut impl Read, len: u64) -> u128 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0;
    while got < len {
        let want = (len - got).min(buf.len() as u64) as usize;
        let n = reader.read(&mut buf[..want]).unwrap();
        assert!(n > 0, "stream ended after {got} of {len} bytes");
        h.update(&buf[..n]);
        got += n as u64;
    }
    h.digest128()
}

fn serve_mock(
    stream: TcpStream,
    id: usize,
    seen: Arc<Mutex<Vec<Seen>>>,
    raw: Arc<Mutex<Vec<u8>>>,
    handler: Arc<Handler>,
    written: Arc<std::sync::atomic::AtomicU64>,
) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let Some(req) = read_request(&mut reader, id) else {
            return;
        };
        raw.lock().unwrap().extend_from_slice(&req.raw);
        seen.lock().unwrap().push(req.clone());
        let mut reply = handler(&req);
        loop {
            match reply {
                Reply::Delay(d, next) => {
                    thread::sleep(d);
                    reply = *next;
                }
                Reply::AfterGate(gate, next) => {
                    gate.wait();
                    reply = *next;
                }
                Reply::BytesThen(b, next) => {
                    if writer.write_all(&b).is_err() {
                        return;
                    }
                    reply = *next;
                }
                Reply::BytesThenHold(b) => {
                    let _ = writer.write_all(&b);
                    let _ = reader.read_to_end(&mut Vec::new());
                    return;
                }
                Reply::Bytes(b) => {
                    if writer.write_all(&b).is_err() {
                        return;
                    }
                    break;
                }
                Reply::BytesThenClose(b) => {
                    let _ = writer.write_all(&b);
                    let _ = writer.shutdown(Shutdown::Both);
                    return;
                }
                Reply::Pattern { head, len } => {
                    if writer.write_all(&head).is_err() {
                        return;
                    }
                    let mut chunk = vec![0u8; 256 * 1024];
                    let mut off = 0u64;
                    while off < len {
                        let n = (len - off).min(chunk.len() as u64) as usize;
                        fill_pattern(&mut chunk[..n], off);
                        if writer.write_all(&chunk[..n]).is_err() {
                            return;
                        }
                        off += n as u64;
                        written.fetch_add(n as u64, Ordering::SeqCst);
                    }
                    break;
                }
                Reply::Close => {
                    let _ = writer.shutdown(Shutdown::Both);
                    return;
                }
            }
        }
    }
}

/// Reads one request (head and body, CL or chunked) from a mock upstream connection.
pub(crate) fn read_request(reader: &mut BufReader<TcpStream>, connection: usize) -> Option<Seen> {
    let mut raw = Vec::new();
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    raw.extend_from_slice(line.as_bytes());
    let request_line = line.trim_end().to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).ok()? == 0 {
            return None;
        }
        raw.extend_from_slice(h.as_bytes());
        let t = h.trim_end();
        if t.is_empty() {
            break;
        }
        let (n, v) = t.split_once(':')?;
        headers.push((n.to_string(), v.trim().to_string()));
    }
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _): &&(String, String)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).ok()?;
            raw.extend_from_slice(size.as_bytes());
            let n = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            if n == 0 {
                // Trailer fields, up to the empty line.
                loop {
                    let mut t = String::new();
                    reader.read_line(&mut t).ok()?;
                    raw.extend_from_slice(t.as_bytes());
                    if t.trim_end().is_empty() {
                        break;
                    }
                }
                break;
            }
            let mut chunk = vec![0u8; n + 2];
            reader.read_exact(&mut chunk).ok()?;
            raw.extend_from_slice(&chunk);
            body.extend_from_slice(&chunk[..n]);
        }
    } else if let Some(n) = find("content-length") {
        let n: usize = n.parse().ok()?;
        body = vec![0u8; n];
        reader.read_exact(&mut body).ok()?;
        raw.extend_from_slice(&body);
    }
    Some(Seen {
        line: request_line,
        headers,
        body,
        raw,
        connection,
    })
}

/// Starts the proxy from TOML text; `{upstream}` is replaced by the mock's address.
pub(crate) fn proxy(toml: &str) -> Server {
    log_to_test_output();
    let config = Config::parse(toml, "test.toml").unwrap_or_else(|e| panic!("{e}"));
    if config.io == IoMode::Uring {
        require_uring();
    }
    Server::start(config).unwrap()
}

/// Sends the in-process proxies' warnings (and how their HTTP/2 upstream connections end) to
/// the test's captured output, which a failing test prints: without them a failure on a CI
/// machine says only which assertion failed. Workers inherit the capture of the test thread
/// that starts them.
fn log_to_test_output() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_ansi(false)
            .with_env_filter("warn,slipstream::upstream::multiplex=debug")
            .try_init();
    });
}

/// Why this kernel refuses an io_uring (`None`: it gives one), asked once per test run the
/// way a worker asks when it starts.
pub(crate) fn ring_refused() -> Option<String> {
    static REFUSED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let probe = || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async {
            slipstream::uring::start(|_| {})
                .err()
                .map(|e| e.to_string())
        })
    };
    REFUSED
        .get_or_init(|| thread::spawn(probe).join().unwrap())
        .clone()
}

/// A proxy asked for io_uring on a kernel that refuses rings would run on epoll, logging and
/// counting it, and an io_uring pass would test epoll without a word: the test fails instead,
/// unless `SLIPSTREAM_SKIP_URING=1`, when the skip is printed and it runs on epoll.
pub(crate) fn require_uring() {
    if let Some(why) = ring_refused() {
        without_uring(&format!("the kernel refuses an io_uring ({why})"));
    }
}

/// Fails the test for `why` (io_uring is missing), unless `SLIPSTREAM_SKIP_URING=1`: then
/// prints the skip (past the test harness's capture, so it shows) and returns.
pub(crate) fn without_uring(why: &str) {
    let skip = std::env::var("SLIPSTREAM_SKIP_URING").is_ok_and(|v| v == "1");
    assert!(
        skip,
        "{why}: the io_uring path cannot be tested here; set SLIPSTREAM_SKIP_URING=1 to skip it"
    );
    let test = thread::current().name().unwrap_or("?").to_string();
    let _ = writeln!(
        std::io::stderr(),
        "skipped io_uring in {test}: {why} (SLIPSTREAM_SKIP_URING=1): it runs on epoll"
    );
}

/// A one-worker proxy with one listener and a single route to `upstream`.
pub(crate) fn simple_proxy(upstream: SocketAddr) -> Server {
    proxy(&simple_config(upstream, ""))
}

/// The TOML of [`simple_proxy`], with `extra` appended to the upstream section.
pub(crate) fn simple_config(upstream: SocketAddr, extra: &str) -> String {
    format!(
        r#"
workers = 1
[[listen]]
address = "127.0.0.1:0"
[upstreams.app]
servers = ["{upstream}"]
{extra}
[[sites]]
default = true
routes = [{{ path = "/", upstream = "app" }}]
"#
    )
}

/// Connects a raw client with a read timeout.
pub(crate) fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Sends raw bytes and reads until the proxy closes the connection.
pub(crate) fn exchange_until_close(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut s = connect(addr);
    s.write_all(request).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

/// A response read off a raw connection.
#[derive(Debug)]
pub(crate) struct RawResponse {
    /// Status code.
    pub status: u16,
    /// Header fields.
    pub headers: Vec<(String, String)>,
    /// Body with framing removed.
    pub body: Vec<u8>,
}

impl RawResponse {
    /// First value of a header, by case-insensitive name.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one response from a connection (interim 1xx responses are returned too). `head` says
/// the request was HEAD, so no body follows.
pub(crate) fn read_response(reader: &mut impl BufRead, head: bool) -> Option<RawResponse> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let status: u16 = line.split(' ').nth(1)?.parse().ok()?;
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let t = h.trim_end();
        if t.is_empty() {
            break;
        }
        let (n, v) = t.split_once(':')?;
        headers.push((n.to_string(), v.trim().to_string()));
    }
    let r = RawResponse {
        status,
        headers,
        body: Vec::new(),
    };
    if head || (100..200).contains(&status) || status == 204 || status == 304 {
        return Some(r);
    }
    let mut r = r;
    if r.header("transfer-encoding") == Some("chunked") {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).ok()?;
            let n = usize::from_str_radix(size.trim(), 16).ok()?;
            let mut chunk = vec![0u8; n + 2];
            reader.read_exact(&mut chunk).ok()?;
            if n == 0 {
                break;
            }
            r.body.extend_from_slice(&chunk[..n]);
        }
    } else if let Some(n) = r.header("content-length") {
        let mut body = vec![0u8; n.parse().ok()?];
        reader.read_exact(&mut body).ok()?;
        r.body = body;
    } else {
        reader.read_to_end(&mut r.body).ok()?;
    }
    Some(r)
}

/// Status code at the start of a raw response.
pub(crate) fn status_of(raw: &[u8]) -> u16 {
    std::str::from_utf8(raw.get(9..12).unwrap_or_default())
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// A ureq agent that returns error statuses as responses.
pub(crate) fn http_client() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

/// Polls `cond` for up to five seconds.
pub(crate) fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    for _ in 0..100 {
        if cond() {
            return true;
        }
        thread::sleep(Duration::from_millis(50));
    }
    false
}

/// The built binary.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_slipstream");

/// A path in this test run's temporary folder.
pub(crate) fn temp_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("slipstream-it-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// The token the tests' admin listeners take for state changes (purges).
pub(crate) const ADMIN_TOKEN: &str = "test-admin-token-0123456789";

/// `admin_token_file = "PATH"` and a newline: the key that allows state changes on the admin
/// listener, naming a file (mode 600) that holds [`ADMIN_TOKEN`].
pub(crate) fn admin_token_line() -> String {
    use std::os::unix::fs::PermissionsExt;
    // A file of its own per call: tests run at once, and one rewriting a shared file would
    // leave it empty for a moment.
    let path = temp_path(&format!("admin-{}.token", fastrand::u64(..)));
    std::fs::write(&path, format!("{ADMIN_TOKEN}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    format!("admin_token_file = {:?}\n", path.display().to_string())
}

/// A free local port: bound, then released for the proxy to take. The port comes from the
/// harness, so no test reads addresses out of the proxy's log.
///
/// Never the same port twice in one run: the kernel may hand a just-released port to the next
/// caller, and two instances started on one port would share it through `SO_REUSEPORT` and
/// answer each other's tests.
pub(crate) fn free_port() -> u16 {
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut given = GIVEN.lock().unwrap();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// The binary running in the background, with its stderr collected.
pub(crate) struct Running {
    /// The process.
    pub child: Child,
    /// Its listener, chosen by the harness.
    pub addr: SocketAddr,
    /// Its admin listener, when the config has one.
    pub admin: Option<SocketAddr>,
    /// The config file it runs from, for `run`.
    pub config: Option<PathBuf>,
    log: Arc<Mutex<Vec<String>>>,
    /// Its standard error reached its end (the process exited, mostly).
    log_ended: Arc<std::sync::atomic::AtomicBool>,
}

impl Running {
    /// Runs `slipstream proxy --listen ADDR` with `args` after it, on a port the harness picks.
    pub(crate) fn proxy(args: &[&str]) -> Running {
        let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let listen = addr.to_string();
        let mut all = vec!["proxy", "--listen", &listen];
        all.extend_from_slice(args);
        Running::spawn(&all, addr, None, None)
    }

    /// Runs `slipstream serve --listen ADDR --root ROOT` with `args` after it.
    pub(crate) fn serve(root: &std::path::Path, args: &[&str]) -> Running {
        let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let listen = addr.to_string();
        let root = root.to_str().unwrap();
        let mut all = vec!["serve", "--listen", &listen, "--root", root];
        all.extend_from_slice(args);
        Running::spawn(&all, addr, None, None)
    }

    /// Runs `slipstream run` on `toml` written to the file `name`; `{listen}` and `{admin}` in
    /// it become addresses the harness picks.
    pub(crate) fn config(name: &str, toml: &str) -> Running {
        Running::config_on(name, toml, ([127, 0, 0, 1], free_port()).into())
    }

    /// [`Running::config`] with `{listen}` set to `addr` (one another instance may share).
    pub(crate) fn config_on(name: &str, toml: &str, addr: SocketAddr) -> Running {
        Running::config_with(name, toml, addr, &|_| {})
    }

    /// [`Running::config_on`], with `customise` applied to the command before it is spawned
    /// (a seccomp filter, say).
    pub(crate) fn config_with(
        name: &str,
        toml: &str,
        addr: SocketAddr,
        customise: &dyn Fn(&mut Command),
    ) -> Running {
        let admin: Option<SocketAddr> = toml
            .contains("{admin}")
            .then(|| ([127, 0, 0, 1], free_port()).into());
        let path = temp_path(name);
        let text = toml.replace("{listen}", &addr.to_string());
        let text = text.replace("{admin}", &admin.map(|a| a.to_string()).unwrap_or_default());
        std::fs::write(&path, text).unwrap();
        let args = ["run", "--config", path.to_str().unwrap()];
        Running::spawn_with(&args, addr, admin, Some(path.clone()), customise)
    }

    /// Runs `slipstream run` on a config file written before (by an earlier instance, say).
    pub(crate) fn spawn_config_file(path: &std::path::Path) -> Running {
        let text = std::fs::read_to_string(path).unwrap();
        let address = |key: &str| -> Option<SocketAddr> {
            let line = text.lines().find(|l| l.trim_start().starts_with(key))?;
            line.split('"').nth(1)?.parse().ok()
        };
        let addr = address("address").unwrap();
        let args = ["run", "--config", path.to_str().unwrap()];
        Running::spawn(&args, addr, address("admin"), Some(path.to_path_buf()))
    }

    fn spawn(
        args: &[&str],
        addr: SocketAddr,
        admin: Option<SocketAddr>,
        config: Option<PathBuf>,
    ) -> Running {
        Running::spawn_with(args, addr, admin, config, &|_| {})
    }

    fn spawn_with(
        args: &[&str],
        addr: SocketAddr,
        admin: Option<SocketAddr>,
        config: Option<PathBuf>,
        customise: &dyn Fn(&mut Command),
    ) -> Running {
        if asks_for_uring(args, config.as_deref()) {
            require_uring();
        }
        // Each instance keeps its default pid file in a folder of its own (two may share a
        // port).
        static STARTED: AtomicUsize = AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, Ordering::SeqCst);
        let runtime = temp_path(&format!("run-{}-{n}", addr.port()));
        let mut command = Command::new(BIN);
        command
            .args(args)
            .env("RUNTIME_DIRECTORY", runtime)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        customise(&mut command);
        let mut child = command.spawn().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        let log_ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ended = log_ended.clone();
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push(line);
            }
            ended.store(true, Ordering::SeqCst);
        });
        let running = Running {
            child,
            addr,
            admin,
            config,
            log,
            log_ended,
        };
        // Ready when every listener accepts.
        let up = |a: SocketAddr| eventually(|| TcpStream::connect(a).is_ok());
        let ready = up(addr) && admin.is_none_or(up);
        assert!(
            ready,
            "proxy did not start: {:?}",
            running.log.lock().unwrap()
        );
        running
    }

    /// Sends the process a signal with kill(1), e.g. `-HUP`.
    pub(crate) fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Its log so far.
    pub(crate) fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Whether a line of its log so far contains `needle`.
    pub(crate) fn logged(&self, needle: &str) -> bool {
        self.log.lock().unwrap().iter().any(|l| l.contains(needle))
    }

    /// Waits until a line of its log contains `needle` (false after a minute, or when the
    /// process has exited without logging it).
    pub(crate) fn wait_logged(&mut self, needle: &str) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            if self.logged(needle) {
                return true;
            }
            if self.log_ended.load(Ordering::SeqCst) {
                // Its standard error is closed: every line it wrote is in.
                return self.logged(needle);
            }
            thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// A GET on a fresh connection, read until the proxy closes it.
    pub(crate) fn get(&self, host: &str, path: &str) -> Vec<u8> {
        exchange_until_close(
            self.addr,
            format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
    }
}

/// Whether the binary run with `args` (and the config file `config`) asks for io_uring: by
/// `--io`, else the config's `io`, else `SLIPSTREAM_IO`, else the default (io_uring).
fn asks_for_uring(args: &[&str], config: Option<&std::path::Path>) -> bool {
    if let Some(i) = args.iter().position(|a| *a == "--io") {
        return args.get(i + 1) == Some(&"uring");
    }
    let text = config
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default();
    let io = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("io = ").map(|v| v.trim_matches('"')))
        .map(str::to_string)
        .or_else(|| std::env::var("SLIPSTREAM_IO").ok());
    io.as_deref() != Some("epoll")
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    /// A field of /proc/PID/status, in kB (VmRSS, VmHWM).
    pub(crate) fn status_kb(&self, field: &str) -> u64 {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = text.lines().find(|l| l.starts_with(field)).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// Bytes this process caused to be written to storage (/proc/PID/io write_bytes).
    pub(crate) fn disk_write_bytes(&self) -> u64 {
        let text = std::fs::read_to_string(format!("/proc/{}/io", self.child.id())).unwrap();
        let line = text.lines().find(|l| l.starts_with("write_bytes")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
}

/// A real nginx in the foreground on a free port, stopped when dropped.
pub(crate) struct Nginx {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its prefix folder (`logs/` inside).
    pub dir: PathBuf,
}

impl Nginx {
    /// Starts nginx with `http` inside its `http` block (beside the temp paths) and `server`
    /// inside its one `server` block.
    pub(crate) fn start(name: &str, http: &str, server: &str) -> Nginx {
        Nginx::start_listening(name, "", http, server)
    }

    /// As [`Nginx::start`], with `flags` after the address on its `listen` line (`http2`: it
    /// speaks HTTP/2 with prior knowledge there).
    pub(crate) fn start_listening(name: &str, flags: &str, http: &str, server: &str) -> Nginx {
        let dir = temp_path(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("logs")).unwrap();
        let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let d = dir.display();
        let conf = format!(
            "daemon off; master_process off; pid {d}/nginx.pid; error_log {d}/logs/error.log info;\n\
             events {{ worker_connections 64; }}\n\
             http {{ {http}\n  client_body_temp_path {d}/cb; proxy_temp_path {d}/pt;\n\
               fastcgi_temp_path {d}/ft; uwsgi_temp_path {d}/ut; scgi_temp_path {d}/st;\n\
               server {{ listen {addr} {flags}; {server} }} }}\n"
        );
        std::fs::write(dir.join("nginx.conf"), conf).unwrap();
        let nginx = ["/usr/sbin/nginx", "nginx"]
            .into_iter()
            .find(|n| Command::new(n).arg("-v").output().is_ok())
            .expect("nginx is installed (.ci/test-tools installs it)");
        let child = Command::new(nginx)
            .args(["-p", &d.to_string(), "-c", &format!("{d}/nginx.conf")])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        assert!(eventually(|| TcpStream::connect(addr).is_ok()));
        Nginx { child, addr, dir }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child process killed when dropped (a failing test leaves nothing running).
pub(crate) struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits up to `secs` for `cond` (for waits longer than [`eventually`]'s five seconds).
pub(crate) fn within(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        thread::sleep(Duration::from_millis(200));
    }
    false
}

/// `slipstream check` of `text` written to the file `name`: its exit code and stderr.
pub(crate) fn check_config(name: &str, text: &str) -> (Option<i32>, String) {
    let path = temp_path(name);
    std::fs::write(&path, text).unwrap();
    let out = Command::new(BIN)
        .args(["check", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
