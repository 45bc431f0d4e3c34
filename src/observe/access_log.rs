//! The access log: one line per request, appended to a per-worker buffer and handed to a writer
//! thread every second or every 64 KiB. The request path never waits on the file and workers
//! never contend for it (the field report's 4x loss came from unbuffered writes and workers
//! fighting over one file).

use std::cell::RefCell;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::net::IpAddr;
use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::http1::put_decimal;

/// Buffered bytes that trigger a hand-off before the periodic flush.
const FLUSH_AT: usize = 64 * 1024;

/// One finished request, as logged.
#[derive(Debug)]
pub struct Entry<'a> {
    /// Client address.
    pub client: IpAddr,
    /// Request method.
    pub method: &'a str,
    /// Request target.
    pub path: &'a str,
    /// Client's HTTP minor version.
    pub minor_version: u8,
    /// Status sent (499 when the client went away first).
    pub status: u16,
    /// Body bytes sent to the client.
    pub bytes: u64,
    /// Time from head received to response finished, in microseconds.
    pub micros: u64,
    /// Host the request was for.
    pub host: &'a str,
    /// Upstream servers tried, in order (the last one answered, unless all failed).
    pub upstreams: &'a [crate::net::Address],
}

/// The writer thread shared by all workers.
pub struct LogWriter {
    sender: mpsc::Sender<Vec<u8>>,
    thread: JoinHandle<()>,
}

impl LogWriter {
    /// Opens (appends to) `path` and starts the writer thread.
    pub fn open(path: &Path) -> io::Result<LogWriter> {
        let mut file = OpenOptions::new().create(true).append(true).open(path)?;
        let (sender, receiver) = mpsc::channel::<Vec<u8>>();
        let thread = std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || {
                for chunk in receiver {
                    if let Err(e) = file.write_all(&chunk) {
                        tracing::error!("access log write failed: {e}");
                    }
                }
            })?;
        Ok(LogWriter { sender, thread })
    }

    /// A worker-side buffer feeding this writer.
    pub fn buffer(&self) -> AccessLog {
        AccessLog {
            sink: Some(self.sender.clone()),
            buf: RefCell::default(),
            clock: RefCell::new((0, String::new())),
        }
    }

    /// Waits until every buffer has been dropped and everything is written.
    pub fn finish(self) {
        drop(self.sender);
        let _ = self.thread.join();
    }
}

/// A worker's log buffer; disabled when there is no access log.
pub struct AccessLog {
    sink: Option<mpsc::Sender<Vec<u8>>>,
    buf: RefCell<Vec<u8>>,
    /// The formatted current second, cached.
    clock: RefCell<(u64, String)>,
}

impl AccessLog {
    /// A log that records nothing.
    pub fn disabled() -> AccessLog {
        AccessLog {
            sink: None,
            buf: RefCell::default(),
            clock: RefCell::new((0, String::new())),
        }
    }

    /// Whether entries are recorded (callers skip gathering fields otherwise).
    pub fn enabled(&self) -> bool {
        self.sink.is_some()
    }

    /// Appends one line.
    pub fn record(&self, e: &Entry<'_>) {
        if self.sink.is_none() {
            return;
        }
        let mut buf = self.buf.borrow_mut();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut clock = self.clock.borrow_mut();
        if clock.0 != now || clock.1.is_empty() {
            *clock = (now, format_utc(now));
        }
        // Written field by field: this runs once per request, and `write!` with
        // `escape_debug` was a visible share of a small response's CPU.
        let _ = write!(buf, "{}", e.client);
        buf.extend_from_slice(b" [");
        buf.extend_from_slice(clock.1.as_bytes());
        buf.extend_from_slice(b"] \"");
        put_escaped(&mut buf, e.method);
        buf.push(b' ');
        put_escaped(&mut buf, e.path);
        buf.extend_from_slice(b" HTTP/1.");
        put_decimal(&mut buf, u64::from(e.minor_version));
        buf.extend_from_slice(b"\" ");
        put_decimal(&mut buf, u64::from(e.status));
        buf.push(b' ');
        put_decimal(&mut buf, e.bytes);
        buf.push(b' ');
        put_decimal(&mut buf, e.micros / 1000);
        let millis = e.micros % 1000;
        buf.extend_from_slice(&[
            b'.',
            b'0' + (millis / 100) as u8,
            b'0' + (millis / 10 % 10) as u8,
            b'0' + (millis % 10) as u8,
        ]);
        buf.extend_from_slice(b" \"");
        put_escaped(&mut buf, e.host);
        buf.extend_from_slice(b"\" ");
        if e.upstreams.is_empty() {
            buf.push(b'-');
        }
        for (i, u) in e.upstreams.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            let _ = write!(buf, "{sep}{u}");
        }
        buf.push(b'\n');
        if buf.len() >= FLUSH_AT {
            drop(clock);
            self.hand_off(&mut buf);
        }
    }

    /// Hands buffered lines to the writer thread (called every second and at exit).
    pub fn flush(&self) {
        let mut buf = self.buf.borrow_mut();
        self.hand_off(&mut buf);
    }

    fn hand_off(&self, buf: &mut Vec<u8>) {
        if let (Some(sink), false) = (&self.sink, buf.is_empty()) {
            let _ = sink.send(std::mem::take(buf));
        }
    }
}

/// Appends `s` as Rust's `escape_debug` shows it: printable ASCII other than `"` and `\\` as is
/// (the common case, copied at once), everything else escaped.
fn put_escaped(buf: &mut Vec<u8>, s: &str) {
    let plain = |b: &u8| (b' '..=b'~').contains(b) && *b != b'"' && *b != b'\\';
    if s.as_bytes().iter().all(plain) {
        buf.extend_from_slice(s.as_bytes());
    } else {
        let _ = write!(buf, "{}", s.escape_debug());
    }
}

/// `2026-11-22T11:00:00Z` for a Unix time.
fn format_utc(secs: u64) -> String {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn escaping_matches_escape_debug() {
        for s in ["/a/b?c=d", "/q\"x\\y", "/caf\u{e9}", "/tab\there", ""] {
            let mut buf = Vec::new();
            super::put_escaped(&mut buf, s);
            assert_eq!(
                String::from_utf8(buf).unwrap(),
                s.escape_debug().to_string()
            );
        }
    }

    #[test]
    fn utc_format() {
        assert_eq!(super::format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::format_utc(1795345200), "2026-11-22T11:00:00Z");
    }
}
