//! gRPC and HTTP/2 upstreams through real sockets: the project's gRPC test server
//! (`tests/grpc-server`: grpc-go's interop TestService, the health service and reflection)
//! behind slipstream over h2c and over TLS, driven by grpc-go's own interop client (every
//! standard case), by grpcurl, by curl over HTTP/1.1, and by scripted `h2` servers for what a
//! real server will not do on demand (never answering, refusing a stream).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use slipstream::observe::metrics::Counter;

use crate::support::*;
use crate::tls::TestPki;

/// The interop cases grpc-go's client runs: every standard one that needs no second service
/// or credentials.
const INTEROP_CASES: [&str; 14] = [
    "empty_unary",
    "large_unary",
    "client_streaming",
    "server_streaming",
    "ping_pong",
    "empty_stream",
    "cancel_after_begin",
    "cancel_after_first_response",
    "timeout_on_sleeping_server",
    "status_code_and_message",
    "special_status_message",
    "custom_metadata",
    "unimplemented_method",
    "unimplemented_service",
];

/// Where `.ci/test-tools` puts a Go tool.
fn go_tool(path: &str) -> PathBuf {
    let gopath = Command::new("go")
        .args(["env", "GOPATH"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| format!("{}/go", std::env::var("HOME").unwrap_or_default()));
    let tool = PathBuf::from(gopath).join(path);
    assert!(
        tool.exists(),
        "{} is missing: run `. .ci/test-tools` first",
        tool.display()
    );
    tool
}

/// The gRPC test server, stopped when dropped.
pub(crate) struct GrpcServer {
    child: Child,
    pub(crate) addr: SocketAddr,
}

impl GrpcServer {
    /// Starts it on a free port: h2c, or TLS with `cert` (certificate and key files).
    pub(crate) fn start(cert: Option<(String, String)>, extra: &[&str]) -> GrpcServer {
        let mut cmd = Command::new(go_tool("bin/slipstream-grpc-test-server"));
        if let Some((cert, key)) = cert {
            cmd.args(["-cert", &cert, "-key", &key]);
        }
        let mut child = cmd
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: u16 = line.trim().parse().expect("the server prints its port");
        GrpcServer {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Drives a scripted server's connection for a moment, so what is queued on it goes out before
/// a reset that would drop it.
async fn flush_briefly(conn: &mut h2::server::Connection<tokio::net::TcpStream, bytes::Bytes>) {
    let flush = std::future::poll_fn(|cx| conn.poll_closed(cx));
    let _ = tokio::time::timeout(std::time::Duration::from_millis(100), flush).await;
}

/// The `[upstreams.app]` lines of [`grpc_proxy`] for one h2c server.
pub(crate) fn h2c_group(addr: std::net::SocketAddr) -> String {
    format!("servers = [\"{addr}\"]\nprotocol = \"h2c\"")
}

/// A one-worker proxy in front of `group` (the upstream section's keys), with an h2c
/// listener, or a TLS one for `localhost` when `pki` is given.
pub(crate) fn grpc_proxy(group: &str, pki: Option<&TestPki>) -> slipstream::server::Server {
    let listen = match pki {
        Some(pki) => format!(
            "tls = true\n[[sites]]\ndefault = true\ncert = \"{}\"\nkey = \"{}\"\n\
             routes = [{{ path = \"/\", upstream = \"app\" }}]",
            pki.path("localhost.pem"),
            pki.path("localhost.key")
        ),
        None => "h2c = true\n[[sites]]\ndefault = true\n\
                 routes = [{ path = \"/\", upstream = \"app\" }]"
            .to_string(),
    };
    proxy(&format!(
        "workers = 1\n[upstreams.app]\n{group}\n[[listen]]\naddress = \"127.0.0.1:0\"\n{listen}\n"
    ))
}

/// Runs one interop case against `port`; its output when it failed.
fn interop(port: u16, case: &str, tls: Option<&TestPki>) -> Result<(), String> {
    let mut cmd = Command::new(go_tool("grpc-interop/client"));
    cmd.args([
        "-server_host",
        "127.0.0.1",
        "-server_port",
        &port.to_string(),
        "-test_case",
        case,
    ]);
    if let Some(pki) = tls {
        cmd.args([
            "-use_tls",
            "-use_test_ca",
            "-ca_file",
            &pki.path("ca.pem"),
            "-server_host_override",
            "localhost",
        ]);
    }
    let out = cmd.output().unwrap();
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{case}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// Runs grpcurl with `args` against `addr` (plaintext); its status and output.
fn grpcurl(addr: SocketAddr, args: &[&str]) -> (bool, String) {
    let mut cmd = Command::new(go_tool("bin/grpcurl"));
    cmd.arg("-plaintext");
    let (flags, call) = args.split_at(args.iter().position(|a| *a == "--").unwrap_or(0));
    cmd.args(flags).arg(addr.to_string());
    cmd.args(call.iter().skip(1));
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn the_interop_suite_passes_through_an_h2c_upstream_on_one_connection() {
    let server = GrpcServer::start(None, &[]);
    let proxy = grpc_proxy(&h2c_group(server.addr), None);
    let port = proxy.local_addrs()[0].port();
    let failed: Vec<String> = INTEROP_CASES
        .iter()
        .filter_map(|case| interop(port, case, None).err())
        .collect();
    let m = proxy.metrics();
    let figures: Vec<String> = [
        Counter::Http2Floods,
        Counter::Http2ConnectionErrors,
        Counter::UpstreamConnects,
        Counter::UpstreamStaleRetries,
        Counter::UpstreamRetries,
        Counter::BadGateway,
        Counter::GatewayTimeout,
        Counter::ClientClosed,
    ]
    .iter()
    .map(|c| format!("{c:?}={}", m.total(*c)))
    .collect();
    assert!(failed.is_empty(), "{}\n{figures:?}", failed.join("\n"));
    // Every call went through slipstream, all multiplexed on one upstream connection.
    assert!(m.total(Counter::Http2Streams) >= 14, "{m:?}");
    assert_eq!(m.total(Counter::UpstreamConnects), 1);
    assert!(m.total(Counter::UpstreamReused) >= 13);
}

#[test]
fn the_interop_suite_passes_over_tls_to_an_h2_upstream() {
    let pki = TestPki::new("grpc-tls");
    let cert = (pki.path("localhost.pem"), pki.path("localhost.key"));
    let server = GrpcServer::start(Some(cert), &[]);
    let group = format!(
        "servers = [\"localhost:{}\"]\nprotocol = \"h2\"\ntls_ca = \"{}\"",
        server.addr.port(),
        pki.path("ca.pem")
    );
    let proxy = grpc_proxy(&group, Some(&pki));
    let port = proxy.local_addrs()[0].port();
    let failed: Vec<String> = INTEROP_CASES
        .iter()
        .filter_map(|case| interop(port, case, Some(&pki)).err())
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    assert_eq!(proxy.metrics().total(Counter::UpstreamConnects), 1);
}

#[test]
fn grpcurl_lists_calls_and_checks_health_through_the_proxy() {
    let server = GrpcServer::start(None, &["-not_serving", "sleepy"]);
    let proxy = grpc_proxy(&h2c_group(server.addr), None);
    let addr = proxy.local_addrs()[0];
    let (ok, list) = grpcurl(addr, &["--", "list"]);
    assert!(ok, "{list}");
    for service in ["grpc.health.v1.Health", "grpc.testing.TestService"] {
        assert!(list.contains(service), "{list}");
    }
    let (ok, health) = grpcurl(addr, &["--", "grpc.health.v1.Health/Check"]);
    assert!(ok && health.contains("\"SERVING\""), "{health}");
    let sleepy = ["-d", "{\"service\":\"sleepy\"}", "--"];
    let (ok, health) = grpcurl(
        addr,
        &[&sleepy[..], &["grpc.health.v1.Health/Check"]].concat(),
    );
    assert!(ok && health.contains("NOT_SERVING"), "{health}");
    let unary = [
        "-d",
        r#"{"response_size": 5, "payload": {"body": "aGVsbG8="}}"#,
        "--",
    ];
    let call = [&unary[..], &["grpc.testing.TestService/UnaryCall"]].concat();
    let (ok, reply) = grpcurl(addr, &call);
    assert!(ok && reply.contains("\"AAAAAAA=\""), "{reply}");
    // Server streaming: two messages of 3 and 4 bytes.
    let stream = [
        "-d",
        r#"{"response_parameters":[{"size":3},{"size":4}]}"#,
        "--",
    ];
    let call = [
        &stream[..],
        &["grpc.testing.TestService/StreamingOutputCall"],
    ]
    .concat();
    let (ok, reply) = grpcurl(addr, &call);
    assert!(
        ok && reply.contains("\"AAAA\"") && reply.contains("\"AAAAAA==\""),
        "{reply}"
    );
    // The server's own error status passes through untouched.
    let (ok, reply) = grpcurl(addr, &["--", "grpc.testing.TestService/UnimplementedCall"]);
    assert!(!ok && reply.contains("Code: Unimplemented"), "{reply}");
}

#[test]
fn a_busy_grpc_client_is_not_taken_for_a_flood() {
    // grpc-go probes the link with a PING per burst of answers: under load, far more than the
    // PING flood limit per second, on a connection opening thousands of streams.
    let server = GrpcServer::start(None, &[]);
    let proxy = grpc_proxy(&h2c_group(server.addr), None);
    let out = Command::new(go_tool("bin/ghz"))
        .args(["--insecure", "--call", "grpc.testing.TestService/UnaryCall"])
        .args([
            "-d",
            r#"{"response_size":1024,"payload":{"body":"aGVsbG8="}}"#,
        ])
        .args(["-c", "50", "-n", "20000", "--format", "json"])
        .arg(proxy.local_addrs()[0].to_string())
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains(r#""statusCodeDistribution":{"OK":20000}"#),
        "{report}"
    );
    assert_eq!(proxy.metrics().total(Counter::Http2Floods), 0);
}

#[test]
fn failures_are_answered_as_grpc_errors() {
    // No server: UNAVAILABLE (14), as a trailers-only HTTP 200, not an HTTP 502.
    let nobody = free_port();
    let proxy = grpc_proxy(
        &format!("servers = [\"127.0.0.1:{nobody}\"]\nprotocol = \"h2c\"\nretries = 0"),
        None,
    );
    let addr = proxy.local_addrs()[0];
    let (ok, reply) = grpcurl(addr, &["-d", "{}", "-proto", "/dev/null", "--", "x.Y/Z"]);
    assert!(!ok, "{reply}");
    let out = Command::new("curl")
        .args(["-s", "-i", "--http2-prior-knowledge", "-X", "POST"])
        .args(["-H", "content-type: application/grpc"])
        .arg(format!("http://{addr}/grpc.health.v1.Health/Check"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_lowercase();
    assert!(text.starts_with("http/2 200"), "{text}");
    assert!(text.contains("grpc-status: 14\r\n"), "{text}");
    assert!(
        text.contains("grpc-message: upstream refused the connection"),
        "{text}"
    );
    // The same failure for a request that is not gRPC stays an HTTP 502.
    let plain = http_client()
        .get(&format!("http://{addr}/"))
        .call()
        .unwrap();
    assert_eq!(plain.status(), 502);
}

#[test]
fn a_grpc_timeout_shorter_than_read_timeout_bounds_the_wait() {
    // A server that takes the connection and the call, and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let held = std::thread::spawn(move || {
        let (conn, _) = silent.accept().unwrap();
        std::thread::sleep(std::time::Duration::from_secs(5));
        drop(conn);
    });
    let proxy = grpc_proxy(
        &format!("servers = [\"{silent_addr}\"]\nprotocol = \"h2c\"\nread_timeout = \"30s\""),
        None,
    );
    let addr = proxy.local_addrs()[0];
    let started = std::time::Instant::now();
    let out = Command::new("curl")
        .args(["-s", "-i", "--http2-prior-knowledge", "-X", "POST"])
        .args([
            "-H",
            "content-type: application/grpc",
            "-H",
            "grpc-timeout: 300m",
        ])
        .arg(format!("http://{addr}/grpc.testing.TestService/EmptyCall"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_lowercase();
    assert!(text.contains("grpc-status: 4\r\n"), "{text}");
    // Well before the 30 s read timeout (not a timing assertion on the proxy's speed: the
    // answer must come from the deadline, not the timeout).
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    drop(held);
}

#[test]
fn an_http1_client_reaches_an_h2c_upstream_and_gets_its_trailers_chunked() {
    let server = GrpcServer::start(None, &[]);
    let proxy = grpc_proxy(&h2c_group(server.addr), None);
    let addr = proxy.local_addrs()[0];
    // An empty Health/Check request: one gRPC message of length 0.
    let mut request = format!(
        "POST /grpc.health.v1.Health/Check HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/grpc\r\nTE: trailers\r\nContent-Length: 5\r\n\r\n"
    )
    .into_bytes();
    request.extend_from_slice(&[0, 0, 0, 0, 0]);
    let raw = exchange_until_close(addr, &request);
    let text = String::from_utf8_lossy(&raw).to_lowercase();
    assert_eq!(status_of(&raw), 200, "{text}");
    assert!(text.contains("transfer-encoding: chunked\r\n"), "{text}");
    // The message (SERVING: field 1, value 1), then the server's trailers in the last chunk.
    assert!(
        text.contains("\0\0\0\0\x02\x08\x01\r\n0\r\ngrpc-status: 0\r\n"),
        "{text:?}"
    );
}

/// The group of `server` over h2c with the health check `check` (a TOML inline table's keys).
fn checked_group(server: &GrpcServer, check: &str) -> String {
    format!(
        "servers = [\"{}\"]\nprotocol = \"h2c\"\nhealth = {{ interval = \"100ms\", rise = 1, \
         fall = 1, start_down = true, {check} }}",
        server.addr
    )
}

#[test]
fn grpc_health_checks_hold_a_not_serving_service_down() {
    let server = GrpcServer::start(None, &["-not_serving", "sleepy"]);
    let serving = grpc_proxy(
        &checked_group(
            &server,
            "type = \"grpc\", service = \"grpc.testing.TestService\"",
        ),
        None,
    );
    let checks = |p: &slipstream::server::Server| p.fleet().checks.lock().unwrap().clone();
    assert!(
        eventually(|| checks(&serving).values().any(|c| c.up && c.checks >= 2)),
        "{:?}",
        checks(&serving)
    );
    let (ok, reply) = grpcurl(
        serving.local_addrs()[0],
        &["--", "grpc.health.v1.Health/Check"],
    );
    assert!(ok, "{reply}");
    let sleepy = grpc_proxy(
        &checked_group(&server, "type = \"grpc\", service = \"sleepy\""),
        None,
    );
    assert!(
        eventually(|| checks(&sleepy).values().any(|c| !c.up && c.checks >= 3)),
        "{:?}",
        checks(&sleepy)
    );
    let (ok, reply) = grpcurl(sleepy.local_addrs()[0], &["--", "list"]);
    assert!(!ok && reply.contains("no live upstream server"), "{reply}");
}

#[test]
fn http_health_checks_of_an_h2c_group_speak_http2() {
    // grpc-go answers a request that is not gRPC with 415, over HTTP/2 only: a check sent
    // as HTTP/1.1 would get no status at all.
    let server = GrpcServer::start(None, &[]);
    let proxy = grpc_proxy(
        &checked_group(&server, "type = \"http\", path = \"/\", expect = \"415\""),
        None,
    );
    let checks = || proxy.fleet().checks.lock().unwrap().clone();
    assert!(
        eventually(|| checks().values().any(|c| c.up && c.checks >= 2)),
        "{:?}",
        checks()
    );
}

/// What a [`ScriptedH2`] server does with each stream.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Script {
    /// RST_STREAM REFUSED_STREAM.
    Refuse,
    /// `200 ok`, then GOAWAY: every connection carries one request.
    Answer,
    /// `200 ok`, and the connection stays for more.
    AnswerAndStay,
    /// As `Answer`, after a `103 Early Hints` with a `link` field.
    HintThenAnswer,
    /// `200 ok` at once, before the request's body, then RST_STREAM(NO_ERROR): the client
    /// is to stop sending (RFC 9113 section 8.1).
    AnswerAndStop,
    /// `200` and part of a body, then RST_STREAM(CANCEL).
    StartThenCancel,
    /// `200`, the body the request's pseudo-headers and fields as it arrived, one per line,
    /// and the connection stays.
    EchoHead,
}

/// A scripted h2c server on its own thread, doing `script` to every stream. Counts
/// connections and streams.
pub(crate) struct ScriptedH2 {
    pub(crate) addr: SocketAddr,
    connections: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    streams: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl ScriptedH2 {
    pub(crate) fn start(script: Script) -> ScriptedH2 {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let streams = Arc::new(AtomicUsize::new(0));
        let (conns, strs) = (connections.clone(), streams.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                while let Ok((socket, _)) = listener.accept().await {
                    conns.fetch_add(1, Ordering::SeqCst);
                    let strs = strs.clone();
                    tokio::spawn(async move {
                        let Ok(mut conn) = h2::server::handshake(socket).await else {
                            return;
                        };
                        while let Some(Ok((request, mut respond))) = conn.accept().await {
                            strs.fetch_add(1, Ordering::SeqCst);
                            if script == Script::EchoHead {
                                let mut text = format!(
                                    ":method: {}\n:scheme: {}\n:authority: {}\n:path: {}\n",
                                    request.method(),
                                    request.uri().scheme_str().unwrap_or(""),
                                    request.uri().authority().map_or("", |a| a.as_str()),
                                    request.uri().path_and_query().map_or("", |p| p.as_str()),
                                );
                                for (name, value) in request.headers() {
                                    let value = value.to_str().unwrap_or("?");
                                    text.push_str(&format!("{name}: {value}\n"));
                                }
                                let head = http::Response::builder().status(200).body(()).unwrap();
                                let mut body = respond.send_response(head, false).unwrap();
                                body.send_data(bytes::Bytes::from(text), true).unwrap();
                                continue;
                            }
                            if script == Script::Refuse {
                                respond.send_reset(h2::Reason::REFUSED_STREAM);
                                continue;
                            }
                            if script == Script::HintThenAnswer {
                                let hint = http::Response::builder()
                                    .status(103)
                                    .header("link", "</style.css>; rel=preload")
                                    .body(())
                                    .unwrap();
                                respond.send_informational(hint).unwrap();
                            }
                            let head = http::Response::builder().status(200).body(()).unwrap();
                            let mut body = respond.send_response(head, false).unwrap();
                            let cancel = script == Script::StartThenCancel;
                            body.send_data(bytes::Bytes::from_static(b"ok"), !cancel)
                                .unwrap();
                            if cancel {
                                flush_briefly(&mut conn).await;
                                body.send_reset(h2::Reason::CANCEL);
                                let _ = std::future::poll_fn(|cx| conn.poll_closed(cx)).await;
                                return;
                            }
                            if script == Script::AnswerAndStop {
                                // The answer goes out first (a reset drops what is queued).
                                flush_briefly(&mut conn).await;
                                respond.send_reset(h2::Reason::NO_ERROR);
                                // Keep the connection served while the proxy reacts.
                                let _ = std::future::poll_fn(|cx| conn.poll_closed(cx)).await;
                                return;
                            }
                            if script == Script::Answer {
                                conn.graceful_shutdown();
                            }
                        }
                    });
                }
            });
        });
        ScriptedH2 {
            addr,
            connections,
            streams,
        }
    }

    fn count(n: &std::sync::atomic::AtomicUsize) -> usize {
        n.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[test]
fn a_stream_the_server_refused_goes_to_another_server_even_a_post() {
    let refusing = ScriptedH2::start(Script::Refuse);
    let answering = ScriptedH2::start(Script::Answer);
    let proxy = grpc_proxy(
        &format!(
            "servers = [\"{}\", \"{}\"]\nprotocol = \"h2c\"\nbalance = \"round_robin\"",
            refusing.addr, answering.addr
        ),
        None,
    );
    // Head and body in one write: the body is in hand, so the refused POST may be resent.
    for _ in 0..4 {
        let raw = exchange_until_close(
            proxy.local_addrs()[0],
            b"POST /upload HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: 7\r\n\r\npayload",
        );
        assert_eq!(status_of(&raw), 200, "{}", String::from_utf8_lossy(&raw));
        // No length from the server: chunked to the HTTP/1.1 client.
        assert!(raw.ends_with(b"\r\n\r\n2\r\nok\r\n0\r\n\r\n"), "{raw:?}");
    }
    assert!(ScriptedH2::count(&refusing.streams) >= 1);
    assert_eq!(ScriptedH2::count(&answering.streams), 4);
    // From an HTTP/2 client too (a unary gRPC call's shape): its body, already arrived with
    // the head, is in hand.
    let local = tokio::task::LocalSet::new();
    local.block_on(&crate::http2::runtime(), async {
        let client = crate::http2::h2c(proxy.local_addrs()[0]).await;
        for _ in 0..4 {
            let req = http::Request::post("http://a/upload")
                .header("content-length", "7")
                .body(())
                .unwrap();
            let mut ready = client.clone().ready().await.unwrap();
            let (response, mut send) = ready.send_request(req, false).unwrap();
            send.send_data(bytes::Bytes::from_static(b"payload"), true)
                .unwrap();
            let (parts, body) = response.await.unwrap().into_parts();
            assert_eq!(parts.status, 200);
            assert_eq!(crate::http2::body_of(body).await, b"ok");
        }
    });
    assert!(ScriptedH2::count(&refusing.streams) >= 2);
    assert_eq!(ScriptedH2::count(&answering.streams), 8);
}

#[test]
fn a_server_that_sends_goaway_gets_new_requests_on_a_new_connection() {
    let server = ScriptedH2::start(Script::Answer);
    let proxy = grpc_proxy(&h2c_group(server.addr), None);
    let agent = http_client();
    for i in 0..5 {
        let url = format!("http://{}/{i}", proxy.local_addrs()[0]);
        let mut res = agent.get(&url).call().unwrap();
        assert_eq!(res.status(), 200, "request {i}");
        assert_eq!(res.body_mut().read_to_string().unwrap(), "ok");
    }
    // Each connection carried one request and was then told to go away.
    assert_eq!(ScriptedH2::count(&server.streams), 5);
    assert_eq!(ScriptedH2::count(&server.connections), 5);
}

/// A burst of requests that finds no connection open to the server opens one, not one
/// each: the first request opens it and the others wait for it, then share it.
#[test]
fn a_burst_of_requests_on_a_cold_pool_shares_one_new_connection() {
    const BURST: usize = 20;
    let server = ScriptedH2::start(Script::AnswerAndStay);
    let proxy = grpc_proxy(&h2c_group(server.addr), None);
    let addr = proxy.local_addrs()[0];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (send, conn) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(conn);
        let mut send = send.ready().await.unwrap();
        // Every request is sent before any answer can come back: they reach the proxy at once.
        let mut answers = Vec::new();
        for i in 0..BURST {
            let request = http::Request::get(format!("http://a/{i}"))
                .body(())
                .unwrap();
            answers.push(send.send_request(request, true).unwrap().0);
        }
        for answer in answers {
            let answer = answer.await.unwrap();
            assert_eq!(answer.status(), 200);
            let mut body = answer.into_body();
            let mut got = Vec::new();
            while let Some(chunk) = body.data().await {
                got.extend_from_slice(&chunk.unwrap());
            }
            assert_eq!(got, b"ok");
        }
    });
    assert_eq!(ScriptedH2::count(&server.streams), BURST);
    assert_eq!(ScriptedH2::count(&server.connections), 1);
}

#[test]
fn an_interim_response_from_an_http2_server_is_passed_on() {
    let server = ScriptedH2::start(Script::HintThenAnswer);
    let proxy = grpc_proxy(&h2c_group(server.addr), None);
    let raw = exchange_until_close(
        proxy.local_addrs()[0],
        b"GET /page HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    let text = String::from_utf8_lossy(&raw).to_lowercase();
    assert!(text.starts_with("http/1.1 103 early hints\r\n"), "{text}");
    assert!(
        text.contains("\r\nlink: </style.css>; rel=preload\r\n\r\nhttp/1.1 200 ok\r\n"),
        "{text}"
    );
    assert!(text.ends_with("\r\n\r\n2\r\nok\r\n0\r\n\r\n"), "{text}");
}

/// An HTTP/1.1 request reaches an HTTP/2 server with the fields every upstream gets (the
/// same rule as for HTTP/1.1 servers): hop-by-hop ones and those Connection names left out,
/// `te: trailers` kept, the proxy's X-Forwarded fields, Host as `:authority`, the length.
#[test]
fn an_http2_server_gets_the_forwarded_fields_of_http1_and_http2_requests() {
    let server = ScriptedH2::start(Script::EchoHead);
    let proxy = grpc_proxy(&h2c_group(server.addr), None);
    let raw = exchange_until_close(
        proxy.local_addrs()[0],
        b"POST /form?x=1 HTTP/1.1\r\nHost: Example.com:8080\r\nConnection: close, x-secret\r\n\
          X-Secret: 1\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\nAccept: text/plain\r\n\
          X-Forwarded-For: 192.0.2.1\r\nX-Forwarded-Proto: ftp\r\nContent-Length: 3\r\n\r\nabc",
    );
    assert_eq!(status_of(&raw), 200, "{}", String::from_utf8_lossy(&raw));
    let text = String::from_utf8_lossy(&raw);
    let body = &text[text.find("\r\n\r\n").unwrap()..];
    let mut lines: Vec<&str> = body
        .lines()
        .filter(|l| l.contains(": ") && !l.starts_with(char::is_numeric))
        .collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            ":authority: Example.com:8080",
            ":method: POST",
            ":path: /form?x=1",
            ":scheme: http",
            "accept: text/plain",
            "content-length: 3",
            "te: trailers",
            "x-forwarded-for: 192.0.2.1, 127.0.0.1",
            "x-forwarded-host: Example.com:8080",
            "x-forwarded-proto: http",
        ],
        "{text}"
    );
    // An HTTP/2 client's request, read into the message model from its HEADERS, reaches the
    // server the same way: split cookies joined, `te: trailers` kept.
    let local = tokio::task::LocalSet::new();
    local.block_on(&crate::http2::runtime(), async {
        let mut client = crate::http2::h2c(proxy.local_addrs()[0]).await;
        let req = http::Request::get("http://b.example/two")
            .header("te", "trailers")
            .header("cookie", "a=1")
            .header("cookie", "b=2")
            .body(())
            .unwrap();
        let (response, _) = client.send_request(req, true).unwrap();
        let (parts, body) = response.await.unwrap().into_parts();
        assert_eq!(parts.status, 200);
        let text = String::from_utf8(crate::http2::body_of(body).await).unwrap();
        for line in [
            ":authority: b.example",
            ":path: /two",
            "te: trailers",
            "cookie: a=1; b=2",
            "x-forwarded-for: 127.0.0.1",
            "x-forwarded-host: b.example",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in {text}");
        }
    });
}

#[test]
fn a_server_that_answers_and_stops_the_body_is_no_failure() {
    let server = ScriptedH2::start(Script::AnswerAndStop);
    let proxy = grpc_proxy(&h2c_group(server.addr), None);
    // A body far larger than the stream's window: most of it is still to send when the
    // server has answered and reset the stream with NO_ERROR.
    let body = vec![b'x'; 4 << 20];
    let mut request = format!(
        "POST /upload HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(&body);
    let raw = exchange_until_close(proxy.local_addrs()[0], &request);
    assert_eq!(status_of(&raw), 200, "{}", String::from_utf8_lossy(&raw));
    assert!(raw.ends_with(b"\r\n\r\n2\r\nok\r\n0\r\n\r\n"), "{raw:?}");
}

#[test]
fn an_upstream_stream_cancelled_mid_answer_is_cancelled_for_the_client_too() {
    let server = ScriptedH2::start(Script::StartThenCancel);
    let proxy = grpc_proxy(&h2c_group(server.addr), None);
    let addr = proxy.local_addrs()[0];
    let local = tokio::task::LocalSet::new();
    local.block_on(&crate::http2::runtime(), async {
        let client = crate::http2::h2c(addr).await;
        let req = http::Request::get("http://a.test/stream").body(()).unwrap();
        let mut ready = client.ready().await.unwrap();
        let (response, _) = ready.send_request(req, true).unwrap();
        let (parts, mut body) = response.await.unwrap().into_parts();
        assert_eq!(parts.status, 200);
        let mut got = Vec::new();
        let error = loop {
            match body.data().await {
                Some(Ok(d)) => got.extend_from_slice(&d),
                Some(Err(e)) => break e,
                None => panic!("the body ended cleanly: {got:?}"),
            }
        };
        // gRPC reads CANCEL as CANCELLED; INTERNAL_ERROR would be INTERNAL.
        assert_eq!(error.reason(), Some(h2::Reason::CANCEL), "{error}");
        assert_eq!(got, b"ok");
    });
}
