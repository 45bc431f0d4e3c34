//! Operating a running instance as a service manager and an operator do: `slipstream reload`
//! and `stop` through the pid file, systemd's notifications on a test `NOTIFY_SOCKET`, socket
//! activation with the descriptor passed the way systemd passes it, and the Quick start's
//! `--demo`, stopped by Ctrl-C.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixDatagram;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::support::*;

/// A config routing every request to `upstream`, with its pid file at `pid_file`.
fn config_text(listen: &str, upstream: SocketAddr, pid_file: &std::path::Path) -> String {
    format!(
        "pid_file = \"{}\"\n\n[[listen]]\naddress = \"{listen}\"\n\n[upstreams.app]\n\
         servers = [\"{upstream}\"]\n\n[[sites]]\nroutes = [{{ path = \"/\", upstream = \"app\" }}]\n",
        pid_file.display()
    )
}

/// Runs a control command (`reload`, `stop`, ...) against `config`.
fn control(args: &[&str], config: &std::path::Path) -> Output {
    Command::new(BIN)
        .args(args)
        .args(["--config", config.to_str().unwrap()])
        .output()
        .unwrap()
}

/// A child process killed if the test fails before it exits.
struct Guarded(Child);

impl Drop for Guarded {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Waits for a child to exit (up to five seconds); its exit code.
fn exit_code(child: &mut Child) -> Option<i32> {
    let mut code = None;
    eventually(|| match child.try_wait().unwrap() {
        Some(status) => {
            code = status.code();
            true
        }
        None => false,
    });
    code
}

#[test]
fn reload_reports_the_generation_or_every_error_and_stop_ends_the_process() {
    let upstream = Upstream::ok(b"served");
    let pid_file = temp_path("control/slipstream.pid");
    let mut running = Running::config(
        "control.toml",
        &config_text("{listen}", upstream.addr, &pid_file),
    );
    let path = running.config.clone().unwrap();
    let good = std::fs::read_to_string(&path).unwrap();
    assert!(eventually(|| pid_file.exists()));
    assert_eq!(
        std::fs::read_to_string(&pid_file).unwrap().trim(),
        running.child.id().to_string()
    );

    let out = control(&["reload"], &path);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(text(&out.stdout).contains("generation 1"), "{out:?}");

    // A config with two mistakes: refused with both, with lines and carets; the old one serves.
    let bad = "workers = 0\n".to_string() + &good.replace("servers", "server");
    std::fs::write(&path, &bad).unwrap();
    let out = control(&["reload"], &path);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        err.contains("reload refused; generation 1 keeps serving"),
        "{err}"
    );
    assert!(
        err.contains("control.toml:8:1: unknown key `server`"),
        "{err}"
    );
    assert!(err.contains('^'), "{err}");
    assert!(running.get("a", "/").ends_with(b"served"));

    // A listener change cannot be applied by a reload: refused by the process itself.
    std::fs::write(
        &path,
        good.replace(&running.addr.to_string(), "127.0.0.1:1"),
    )
    .unwrap();
    let out = control(&["reload"], &path);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text(&out.stderr).contains("the listeners changed"),
        "{out:?}"
    );

    std::fs::write(&path, &good).unwrap();
    let out = control(&["reload"], &path);
    assert!(text(&out.stdout).contains("generation 2"), "{out:?}");

    // Graceful, so the exit status does not depend on how soon the drain ends: a plain stop
    // that finds the process still draining ends it at once, exit 1 (tested below), which
    // a loaded machine made happen here.
    let out = control(&["stop", "--graceful"], &path);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(exit_code(&mut running.child), Some(0));
    assert!(!pid_file.exists(), "the pid file is removed at exit");

    // Nothing running: one clear line, exit 1.
    let out = control(&["stop"], &path);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text(&out.stderr).contains("cannot read the pid file"),
        "{out:?}"
    );
}

/// An instance whose one request is held by its upstream until the gate opens; the request
/// is in flight when this returns, on its own thread (its answer, read until close).
fn holding_a_request(name: &str) -> (Running, Gate, Upstream, std::thread::JoinHandle<Vec<u8>>) {
    let gate = Gate::default();
    let held = gate.clone();
    let upstream = Upstream::start(move |_| {
        Reply::AfterGate(
            held.clone(),
            Box::new(Reply::Bytes(response(200, b"finished"))),
        )
    });
    let pid_file = temp_path(&format!("{name}/slipstream.pid"));
    let running = Running::config(
        &format!("{name}.toml"),
        &config_text("{listen}", upstream.addr, &pid_file),
    );
    let addr = running.addr;
    let request = std::thread::spawn(move || {
        exchange_until_close(
            addr,
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        )
    });
    assert!(eventually(|| !upstream.seen().is_empty()));
    (running, gate, upstream, request)
}

#[test]
fn a_graceful_stop_lets_the_request_in_flight_finish_and_a_plain_one_does_not_wait() {
    let (mut running, gate, _upstream, request) = holding_a_request("graceful");
    let (path, addr) = (running.config.clone().unwrap(), running.addr);
    let stop = std::thread::spawn(move || control(&["stop", "--graceful"], &path));
    assert!(eventually(|| TcpStream::connect(addr).is_err()));
    gate.open();
    assert!(request.join().unwrap().ends_with(b"finished"));
    let out = stop.join().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(exit_code(&mut running.child), Some(0));

    // Without --graceful: the process leaves at once (exit 1, its pid file removed) and the
    // request in flight is cut.
    let (mut running, gate, _upstream, request) = holding_a_request("fast");
    let path = running.config.clone().unwrap();
    let out = control(&["stop"], &path);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(exit_code(&mut running.child), Some(1));
    assert!(!temp_path("fast/slipstream.pid").exists());
    assert!(!request.join().unwrap().ends_with(b"finished"));
    gate.open();
}

/// Reads the next notification on `socket` (up to five seconds).
fn next_notification(socket: &UnixDatagram) -> String {
    let mut buf = [0u8; 4096];
    let n = socket.recv(&mut buf).expect("a notification");
    text(&buf[..n])
}

#[test]
fn systemd_hears_ready_reloading_and_stopping_in_order() {
    let upstream = Upstream::ok(b"served");
    let socket_path = temp_path("notify.sock");
    let _ = std::fs::remove_file(&socket_path);
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let pid_file = temp_path("notify/slipstream.pid");
    let listen: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let path = temp_path("notify.toml");
    std::fs::write(
        &path,
        config_text(&listen.to_string(), upstream.addr, &pid_file),
    )
    .unwrap();
    let mut child = Guarded(
        Command::new(BIN)
            .args(["run", "--config", path.to_str().unwrap()])
            .env("NOTIFY_SOCKET", &socket_path)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );

    let ready = next_notification(&socket);
    assert!(ready.starts_with("READY=1\n"), "{ready}");
    assert!(
        ready.contains(&format!("STATUS=listening on {listen}")),
        "{ready}"
    );
    // Ready means serving.
    assert!(TcpStream::connect(listen).is_ok());

    let out = control(&["reload"], &path);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let reloading = next_notification(&socket);
    assert!(
        reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="),
        "{reloading}"
    );
    let usec: u64 = reloading
        .lines()
        .nth(1)
        .and_then(|l| l.strip_prefix("MONOTONIC_USEC="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(usec > 0, "{reloading}");
    let ready = next_notification(&socket);
    assert!(ready.starts_with("READY=1\nSTATUS=generation 1"), "{ready}");

    let out = control(&["stop", "--graceful"], &path);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(next_notification(&socket).starts_with("STOPPING=1\n"));
    assert_eq!(exit_code(&mut child.0), Some(0));
}

#[test]
fn socket_activation_serves_on_the_passed_descriptor() {
    let upstream = Upstream::ok(b"activated");
    // Bound by the "service manager" (here: the test) without SO_REUSEPORT, so a socket
    // slipstream bound itself could not share the address: serving proves it took fd 3.
    let passed = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = passed.local_addr().unwrap();
    let pid_file = temp_path("activation/slipstream.pid");
    let path = temp_path("activation.toml");
    std::fs::write(
        &path,
        config_text(&addr.to_string(), upstream.addr, &pid_file),
    )
    .unwrap();
    // As systemd does: the socket as descriptor 3, LISTEN_FDS=1 and LISTEN_PID the service's
    // own pid (the shell's, which exec keeps).
    let script = "exec 3<&0 0</dev/null; LISTEN_FDS=1 LISTEN_PID=$$; \
                  export LISTEN_FDS LISTEN_PID; exec \"$0\" run --config \"$1\"";
    let mut child = Guarded(
        Command::new("sh")
            .args(["-c", script, BIN, path.to_str().unwrap()])
            .stdin(Stdio::from(std::os::fd::OwnedFd::from(passed)))
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let body = exchange_until_close(
        addr,
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert!(body.ends_with(b"activated"), "{}", text(&body));
    // Graceful: a plain stop hurries a drain still running with a second signal (exit 1), so
    // its exit code would depend on how fast the drain ends.
    let out = control(&["stop", "--graceful"], &path);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(exit_code(&mut child.0), Some(0));
}

#[test]
fn the_quick_start_demo_serves_and_stops_on_ctrl_c_with_nothing_left() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/slipstream.toml");
    let runtime = temp_path("demo-run");
    let start = || {
        Command::new(BIN)
            .args(["run", "--config", example, "--demo"])
            .env("RUNTIME_DIRECTORY", &runtime)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // The example's fixed ports: 8080 (proxy), 9000 (upstream), 9901 (admin).
    let mut demo = Guarded(start());
    let proxy: SocketAddr = ([127, 0, 0, 1], 8080).into();
    assert!(eventually(|| TcpStream::connect(proxy).is_ok()));
    let body = exchange_until_close(
        proxy,
        b"GET /hi HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    );
    assert!(body.ends_with(b"you asked for /hi\n"), "{}", text(&body));

    // A second Quick start: one line naming the port in use, exit 1, nothing started.
    let mut second = start();
    assert_eq!(exit_code(&mut second), Some(1));
    let err = text(&second.wait_with_output().unwrap().stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("127.0.0.1:9000") && err.contains("in use"),
        "{err}"
    );

    let status = Command::new("kill")
        .args(["-INT", &demo.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(exit_code(&mut demo.0), Some(0));
    // Both the proxy and the upstream are gone with the one process.
    assert!(TcpStream::connect(proxy).is_err());
    assert!(TcpStream::connect(("127.0.0.1", 9000)).is_err());
}
