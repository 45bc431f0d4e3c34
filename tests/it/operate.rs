//! First contact, as a new operator meets it: an address another process listens on is
//! refused with one line naming it (unless the listener says `shared = true`); `--workers` is
//! checked like the config key; a one-site config without `default` serves; a missing config
//! file is named without a line number; a misspelt key is met with the nearest key of its table.

use std::net::{SocketAddr, TcpListener};
use std::process::Command;

use crate::support::*;

/// Runs the binary with `args`; it must exit 1 at once. Returns its standard error.
fn fails(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn an_address_in_use_is_refused_with_one_line_naming_the_holder() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let err = fails(&["proxy", "--listen", &addr, "--upstream", "127.0.0.1:9"]);
    let line = err.lines().rfind(|l| l.contains(&addr)).unwrap_or_default();
    assert!(line.contains("address already in use"), "{err}");
    assert!(
        line.contains(&format!("by pid {}", std::process::id())),
        "{err}"
    );
    // Another slipstream on the same address is refused the same way.
    let first = Running::proxy(&["--upstream", "127.0.0.1:9"]);
    let busy = first.addr.to_string();
    let err = fails(&["proxy", "--listen", &busy, "--upstream", "127.0.0.1:9"]);
    assert!(err.contains("address already in use by pid"), "{err}");
    assert!(err.contains("(slipstream)"), "{err}");
    // Sharing on purpose (a second process joining the SO_REUSEPORT group).
    let toml = "[[listen]]\naddress = \"{listen}\"\nshared = true\n[upstreams.app]\n\
                servers = [\"127.0.0.1:9\"]\n[[sites]]\nroutes = [{ path = \"/\", upstream = \"app\" }]\n";
    let a = Running::config("shared-a.toml", toml);
    // The second instance binds the same address: it says it listens, and keeps running.
    let mut b = Running::config_on("shared-b.toml", toml, a.addr);
    assert!(
        b.wait_logged("listening on"),
        "the sharing instance did not start: {:?}",
        b.child.try_wait()
    );
    assert!(
        b.child.try_wait().unwrap().is_none(),
        "the sharing instance exited"
    );
}

#[test]
fn workers_flag_is_checked_like_the_config_key() {
    for n in ["0", "5000", "many"] {
        let out = Command::new(BIN)
            .args([
                "proxy",
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                "127.0.0.1:9",
            ])
            .args(["--workers", n])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "--workers {n}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("workers must be between 1 and 1024"), "{err}");
    }
}

#[test]
fn a_single_site_without_default_serves() {
    let up = Upstream::ok(b"hello");
    let toml = format!(
        "workers = 1\n[[listen]]\naddress = \"{{listen}}\"\n[upstreams.app]\nservers = [\"{}\"]\n\
         [[sites]]\nroutes = [{{ path = \"/\", upstream = \"app\" }}]\n",
        up.addr
    );
    let proxy = Running::config("one-site.toml", &toml);
    let response = proxy.get("anything.example", "/");
    assert_eq!(status_of(&response), 200);
    assert!(response.ends_with(b"hello"));
}

#[test]
fn a_missing_config_is_named_without_a_line() {
    let err = fails(&["check", "--config", "/nonexistent/slipstream.toml"]);
    assert_eq!(
        err.trim(),
        "/nonexistent/slipstream.toml: cannot read the config: No such file or directory (os error 2)"
    );
}

/// nginx's word for a route's path is met with the nearest key of the route table, and nothing
/// more is said of that route (its value read under a wrong key once added a second error).
#[test]
fn a_misspelt_route_key_suggests_the_route_key_and_says_it_once() {
    let path = temp_path("prefix.toml");
    let toml =
        "[[listen]]\naddress = \"127.0.0.1:0\"\n[upstreams.app]\nservers = [\"127.0.0.1:9\"]\n\
                [[sites]]\nroutes = [{ prefix = \"/\", upstream = \"app\" }]\n";
    std::fs::write(&path, toml).unwrap();
    let err = fails(&["check", "--config", path.to_str().unwrap()]);
    let want = format!(
        "{}:6:13: unknown key `prefix`; did you mean `path`? (valid keys: path, location, \
         internal, rules, access, add_headers, add_headers_on_success, client_max_body_size, \
         proxy_set_headers, error_pages, intercept_errors, expires, hide_headers, cors, \
         auth_request, auth_basic, satisfy, limit_req, limit_conn, limit_status, cache, upstream, buffer_response, params, compress, root, alias, index, try_files, cache_control, \
         precompressed, dotfiles, symlinks_out_of_root, list_directories, routes)\n  |\n\
         6 | routes = [{{ prefix = \"/\", upstream = \"app\" }}]\n  |             ^",
        path.display()
    );
    assert_eq!(err.trim_end(), want);
}

#[test]
fn version_verbose_names_the_build() {
    let out = Command::new(BIN)
        .args(["version", "--verbose"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(&format!("slipstream {}\n", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    for field in [
        "commit: ",
        "rustc: rustc 1.",
        "target: ",
        "tls: rustls",
        "built in: ",
    ] {
        assert!(text.contains(field), "{field}: {text}");
    }
}

/// The bundled demo upstream, on a unix socket.
fn unix_upstream(path: &std::path::Path) {
    let _ = std::fs::remove_file(path);
    let listener = std::os::unix::net::UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let reader = stream.try_clone().unwrap();
            std::thread::spawn(move || slipstream::demo::answer(reader, stream));
        }
    });
}

/// A GET through `listen`; the response body.
fn fetch(listen: SocketAddr) -> String {
    assert!(eventually(|| std::net::TcpStream::connect(listen).is_ok()));
    let response = exchange_until_close(
        listen,
        b"GET /form HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    String::from_utf8_lossy(&response).into_owned()
}

/// A child killed when the test ends, however it ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn every_address_form_people_type_works_on_the_command_line_and_in_the_config() {
    let v4 = slipstream::demo::spawn(([127, 0, 0, 1], 0).into()).unwrap();
    let v6 = slipstream::demo::spawn("[::1]:0".parse().unwrap()).unwrap();
    let socket = temp_path("forms.sock");
    unix_upstream(&socket);
    let unix = format!("unix:{}", socket.display());
    let upstreams = [
        (format!("{v4}"), "you asked for /form"),
        (format!("http://{v4}"), "you asked for /form"),
        (format!("http://{v4}/"), "you asked for /form"),
        (format!("localhost:{}", v4.port()), "you asked for /form"),
        (format!("[::1]:{}", v6.port()), "you asked for /form"),
        (format!("http://[::1]:{}", v6.port()), "you asked for /form"),
        (unix.clone(), "you asked for /form"),
    ];
    for (upstream, expect) in &upstreams {
        let running = Running::proxy(&["--upstream", upstream]);
        let answer = fetch(running.addr);
        assert!(answer.contains(expect), "--upstream {upstream}: {answer}");
    }
    // Listener forms: a name, the unspecified addresses of both families.
    for (listen, connect) in [
        ("localhost:{port}", "127.0.0.1:{port}"),
        ("0.0.0.0:{port}", "127.0.0.1:{port}"),
        ("[::]:{port}", "[::1]:{port}"),
        ("[::1]:{port}", "[::1]:{port}"),
    ] {
        let port = free_port().to_string();
        let listen = listen.replace("{port}", &port);
        let child = Command::new(BIN)
            .args(["proxy", "--listen", &listen, "--upstream", &v4.to_string()])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let _child = Killed(child);
        let at: SocketAddr = connect.replace("{port}", &port).parse().unwrap();
        assert!(
            fetch(at).contains("you asked for /form"),
            "--listen {listen}"
        );
    }
    // The same forms in a config file.
    let servers: Vec<String> = upstreams[..6]
        .iter()
        .map(|(u, _)| format!("{u:?}"))
        .collect();
    let toml = format!(
        "[[listen]]\naddress = \"{{listen}}\"\n[upstreams.app]\nservers = [{}]\n\
         [upstreams.unix]\nservers = [{unix:?}]\n[[sites]]\nroutes = [\
         {{ path = \"/\", upstream = \"app\" }}, {{ path = \"/u/\", upstream = \"unix\" }}]\n",
        servers.join(", ")
    );
    let running = Running::config("forms.toml", &toml);
    for _ in 0..12 {
        assert!(fetch(running.addr).contains("you asked for /form"));
    }
    let through_unix = exchange_until_close(
        running.addr,
        b"GET /u/ HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert!(String::from_utf8_lossy(&through_unix).contains("you asked for /u/"));
}

#[test]
fn an_address_that_is_not_one_is_refused_with_an_example() {
    for (flag, value, expected) in [
        (
            "--upstream",
            "ftp://127.0.0.1:21",
            "unsupported scheme \"ftp\"",
        ),
        ("--upstream", "127.0.0.1", "e.g. \"127.0.0.1:9000\""),
        (
            "--upstream",
            "unix:run/app.sock",
            "must be absolute (unix:/run/php/fpm.sock)",
        ),
        (
            "--listen",
            "8080",
            "e.g. 0.0.0.0:8080, [::]:8080 or localhost:8080",
        ),
    ] {
        let mut args = vec![
            "proxy",
            "--listen",
            "127.0.0.1:1",
            "--upstream",
            "127.0.0.1:2",
        ];
        let at = args.iter().position(|a| *a == flag).unwrap();
        args[at + 1] = value;
        let out = Command::new(BIN).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expected), "{flag} {value}: {err}");
    }
    let path = temp_path("bad-forms.toml");
    std::fs::write(
        &path,
        "[[listen]]\naddress = \"8080\"\n[upstreams.app]\nservers = [\"ftp://x:1\"]\n\
         [[sites]]\nroutes = [{ path = \"/\", upstream = \"app\" }]\n",
    )
    .unwrap();
    let err = fails(&["check", "--config", path.to_str().unwrap()]);
    assert!(err.contains("bad-forms.toml:2:11:"), "{err}");
    assert!(
        err.contains("bad-forms.toml:4:12: unsupported scheme"),
        "{err}"
    );
}

#[test]
fn a_low_port_without_privilege_and_a_low_open_file_limit_are_one_clear_line_each() {
    // As an unprivileged user (the test runs as root on CI machines; skipped otherwise, and
    // where that user cannot reach the binary: setpriv then exits 126 or 127).
    if rustix::process::getuid().is_root() {
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN])
            .args([
                "proxy",
                "--listen",
                "127.0.0.1:81",
                "--upstream",
                "127.0.0.1:9",
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        if matches!(out.status.code(), Some(126 | 127)) {
            #[allow(clippy::print_stderr)] // a skipped check says so
            {
                eprintln!("skipped: user 65534 cannot run {BIN}: {err}");
            }
        } else {
            assert_eq!(out.status.code(), Some(1), "{out:?}");
            let line = err
                .lines()
                .rfind(|l| l.contains("127.0.0.1:81"))
                .unwrap_or_default();
            assert!(
                line.contains("cannot listen on 127.0.0.1:81: Permission denied"),
                "{err}"
            );
            assert!(
                line.contains("CAP_NET_BIND_SERVICE") && line.contains("socket activation"),
                "{err}"
            );
        }
    }
    // An open-file limit below what max_connections needs: said once, with the number.
    let port = free_port().to_string();
    let listen = format!("127.0.0.1:{port}");
    let child = Command::new("prlimit")
        .args(["--nofile=256:256", BIN, "proxy", "--listen", &listen])
        .args(["--upstream", "127.0.0.1:9"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Killed(child);
    assert!(eventually(|| std::net::TcpStream::connect(&listen).is_ok()));
    let _ = child.0.kill();
    let out = std::mem::replace(&mut child.0, Command::new("true").spawn().unwrap())
        .wait_with_output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let warned: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("open-file limit"))
        .collect();
    assert_eq!(warned.len(), 1, "{err}");
    assert!(
        warned[0].contains("open-file limit 256 is below the 132096"),
        "{err}"
    );
}

#[test]
fn config_defaults_to_etc_slipstream() {
    let out = Command::new(BIN).arg("check").output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.starts_with("/etc/slipstream/slipstream.toml"),
        "{said}"
    );
}

/// `ipv6only = false` on `[::]:PORT` takes IPv4 clients too, named by their IPv4 address
/// (not `::ffff:127.0.0.1`) in what the upstream is told; IPv6 clients still connect.
#[test]
fn a_dual_stack_listener_takes_ipv4_clients_by_their_ipv4_address() {
    let backend = Upstream::start(|seen| {
        let body = format!("xff={}", seen.header("x-forwarded-for").unwrap_or_default());
        Reply::Bytes(response(200, body.as_bytes()))
    });
    let port = free_port();
    let toml = format!(
        "[[listen]]\naddress = \"[::]:{port}\"\nipv6only = false\n\
         [upstreams.app]\nservers = [\"{}\"]\n\
         [[sites]]\nroutes = [{{ path = \"/\", upstream = \"app\" }}]\n",
        backend.addr
    );
    let v4: SocketAddr = ([127, 0, 0, 1], port).into();
    let _running = Running::config_on("dual-stack.toml", &toml, v4);
    assert!(fetch(v4).ends_with("xff=127.0.0.1"), "{}", fetch(v4));
    let v6: SocketAddr = format!("[::1]:{port}").parse().unwrap();
    assert!(fetch(v6).ends_with("xff=::1"), "{}", fetch(v6));
}
