//! The FastCGI codec against a real PHP-FPM (Debian's `php-fpm`, started here with its own pools
//! on a temporary unix socket and a TCP port): records written by `fastcgi::record` are
//! understood, and what PHP-FPM answers reads back through the record reader and the CGI head
//! parser, twice on one kept connection. [`PhpFpm`] serves the proxy tests too.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use slipstream::fastcgi::cgi::cgi_storage;
use slipstream::fastcgi::cgi::parse_cgi_head;
use slipstream::fastcgi::record::{
    parse_record, put_begin_request, put_params, put_record, Record, RecordType,
};

use crate::support::{eventually, free_port, temp_path};

/// A PHP-FPM master with two static pools of `children` each, one on a unix socket and one on
/// a TCP port, stopped on drop.
pub(crate) struct PhpFpm {
    child: Child,
    /// The unix pool's socket.
    pub(crate) socket: PathBuf,
    /// The TCP pool's address.
    pub(crate) tcp: std::net::SocketAddr,
    /// The document root (empty; tests write their scripts).
    pub(crate) root: PathBuf,
}

impl PhpFpm {
    pub(crate) fn start(name: &str) -> PhpFpm {
        PhpFpm::with_children(name, 2)
    }

    pub(crate) fn with_children(name: &str, children: usize) -> PhpFpm {
        let binary = std::fs::read_dir("/usr/sbin")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("php-fpm"))
            })
            .expect("php-fpm is not installed (apt-get install php-fpm; .ci/run does)");
        let dir = temp_path(&format!("fpm-{name}"));
        let _ = std::fs::remove_dir_all(&dir);
        let root = dir.join("www");
        std::fs::create_dir_all(&root).unwrap();
        let socket = dir.join("fpm.sock");
        let conf = dir.join("fpm.conf");
        let tcp: std::net::SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let pool = |name: &str, listen: &str| {
            format!(
                "[{name}]\nlisten = {listen}\npm = static\npm.max_children = {children}\n\
                 catch_workers_output = yes\n"
            )
        };
        std::fs::write(
            &conf,
            format!(
                "[global]\nerror_log = {d}/error.log\npid = {d}/fpm.pid\ndaemonize = no\n{}{}",
                pool("unix", &socket.display().to_string()),
                pool("tcp", &tcp.to_string()),
                d = dir.display(),
            ),
        )
        .unwrap();
        let child = Command::new(binary)
            .args(["-F", "-R", "-y", conf.to_str().unwrap()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let fpm = PhpFpm {
            child,
            socket,
            tcp,
            root,
        };
        let up = || UnixStream::connect(&fpm.socket).is_ok() && TcpStream::connect(tcp).is_ok();
        assert!(eventually(up), "php-fpm did not start");
        fpm
    }

    /// Writes a script (or any file) under the root.
    pub(crate) fn script(&self, rel: &str, text: &str) {
        let path = self.root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// Stops PHP-FPM and its children (SIGTERM: the master ends them at once), then waits.
    pub(crate) fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let exited = eventually(|| matches!(self.child.try_wait(), Ok(Some(_))));
        if !exited {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Drop for PhpFpm {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Sends one request on `conn` and returns the status, the field names and the body.
fn request(
    conn: &mut UnixStream,
    script: &Path,
    query: &str,
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    let mut out = Vec::new();
    put_begin_request(&mut out, true);
    let script = script.to_str().unwrap();
    let length = body.len().to_string();
    let params: [(&[u8], &[u8]); 7] = [
        (b"SCRIPT_FILENAME", script.as_bytes()),
        (
            b"REQUEST_METHOD",
            if body.is_empty() { b"GET" } else { b"POST" },
        ),
        (b"QUERY_STRING", query.as_bytes()),
        (b"CONTENT_LENGTH", length.as_bytes()),
        (b"CONTENT_TYPE", b"application/octet-stream"),
        (b"SERVER_PROTOCOL", b"HTTP/1.1"),
        (b"HTTP_X_TEST", b"from the test"),
    ];
    put_params(&mut out, params);
    for chunk in body.chunks(65535) {
        put_record(&mut out, RecordType::Stdin, chunk);
    }
    put_record(&mut out, RecordType::Stdin, &[]);
    conn.write_all(&out).unwrap();
    let mut buf = Vec::new();
    let mut stdout = Vec::new();
    loop {
        match parse_record(&buf).unwrap() {
            Some((Record::Stdout { start, len }, used)) => {
                stdout.extend_from_slice(&buf[start..start + len]);
                buf.drain(..used);
            }
            Some((Record::Stderr { .. }, used)) => {
                buf.drain(..used);
            }
            Some((
                Record::End {
                    protocol_status, ..
                },
                used,
            )) => {
                assert_eq!(protocol_status, 0);
                buf.drain(..used);
                break;
            }
            None => {
                let mut chunk = [0u8; 65536];
                let n = conn.read(&mut chunk).unwrap();
                assert!(n > 0, "php-fpm closed the kept connection");
                buf.extend_from_slice(&chunk[..n]);
            }
        }
    }
    assert!(buf.is_empty());
    let mut storage = cgi_storage();
    let head = parse_cgi_head(&stdout, &mut storage, 16 * 1024)
        .unwrap()
        .expect("a whole CGI head");
    let names: Vec<String> = head.headers.iter().map(|h| h.name.to_string()).collect();
    (
        head.status,
        names.join(","),
        stdout[head.head_len..].to_vec(),
    )
}

#[test]
fn records_and_cgi_heads_interoperate_with_php_fpm() {
    let fpm = PhpFpm::start("codec");
    let script = fpm.root.join("echo.php");
    std::fs::write(
        &script,
        r#"<?php
if (isset($_GET['missing'])) { http_response_code(404); header('X-Why: missing'); exit; }
$body = file_get_contents('php://input');
echo 'q=', $_GET['name'] ?? '', ' h=', $_SERVER['HTTP_X_TEST'] ?? '', ' len=', strlen($body), ' md5=', md5($body);
"#,
    )
    .unwrap();
    let mut conn = UnixStream::connect(&fpm.socket).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (status, names, body) = request(&mut conn, &script, "name=slip", b"");
    assert_eq!(status, 200);
    assert!(names.contains("Content-type"), "{names}");
    let empty_md5 = "d41d8cd98f00b204e9800998ecf8427e";
    assert_eq!(
        String::from_utf8(body).unwrap(),
        format!("q=slip h=from the test len=0 md5={empty_md5}")
    );
    // The same connection again (KEEP_CONN), with a body spanning several STDIN records.
    let upload: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let (status, _, body) = request(&mut conn, &script, "name=again", &upload);
    assert_eq!(status, 200);
    let body = String::from_utf8(body).unwrap();
    assert!(
        body.starts_with("q=again h=from the test len=200000 md5="),
        "{body}"
    );
    let (status, names, _) = request(&mut conn, &script, "missing=1", b"");
    assert_eq!(status, 404);
    assert!(
        names.contains("X-Why") && names.contains("Status"),
        "{names}"
    );
}
