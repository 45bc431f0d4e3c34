//! The access log: lines are formatted into a per-worker buffer per file and handed to one
//! writer thread every second or every 64 KiB. The request path never waits on a file and
//! workers never contend for one (the field reports' 4x loss came from unbuffered writes and
//! workers fighting over one file). When the writer falls behind by more than
//! [`MAX_PENDING`] bytes (a full disk, a FIFO nobody reads), new lines are dropped and counted
//! instead of blocking requests. SIGUSR1 reopens the files (logrotate); shutdown writes
//! everything buffered.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::log_format::{write_line, Clock, Entry, LogFormat};
use super::metrics::{Counter, Shard};

/// Buffered bytes that trigger a hand-off before the periodic flush.
const FLUSH_AT: usize = 64 * 1024;

/// Bytes handed to the writer and not yet written beyond which new lines are dropped.
pub const MAX_PENDING: usize = 16 * 1024 * 1024;

/// Where a site's lines go, and how they look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessLogTarget {
    /// The file appended to.
    pub path: Arc<Path>,
    /// The line format.
    pub format: LogFormat,
}

enum Message {
    /// A file opened by the server thread (so a bad path fails the start or the reload).
    Open(Arc<Path>, File),
    /// Lines for a file.
    Lines(Arc<Path>, Vec<u8>),
    /// Reopen every file by its path (after logrotate renamed it).
    Reopen,
}

/// The writer thread shared by all workers.
pub struct LogWriter {
    sender: mpsc::Sender<Message>,
    pending: Arc<AtomicUsize>,
    thread: JoinHandle<()>,
}

/// Opens `path` for appending without blocking on a FIFO that has no reader yet; writes then
/// block (on the writer thread only).
fn open_append(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let flags = rustix::fs::fcntl_getfl(&file)?;
    rustix::fs::fcntl_setfl(&file, flags - rustix::fs::OFlags::NONBLOCK)?;
    Ok(file)
}

impl LogWriter {
    /// Starts the writer thread (with no file yet).
    pub fn start() -> io::Result<LogWriter> {
        let (sender, receiver) = mpsc::channel::<Message>();
        let pending = Arc::new(AtomicUsize::new(0));
        let left = pending.clone();
        let thread = std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || write_loop(&receiver, &left))?;
        Ok(LogWriter {
            sender,
            pending,
            thread,
        })
    }

    /// Opens a target's file (if not open already) so its lines can be written; fails if the
    /// file cannot be opened for appending.
    pub fn open(&self, path: &Arc<Path>) -> io::Result<()> {
        let file = open_append(path).map_err(|e| {
            let what = format!("cannot open access log {}: {e}", path.display());
            io::Error::new(e.kind(), what)
        })?;
        let _ = self.sender.send(Message::Open(path.clone(), file));
        Ok(())
    }

    /// Reopens every file by its path: lines written from now on go to a new file when the
    /// old one was renamed.
    pub fn reopen(&self) {
        let _ = self.sender.send(Message::Reopen);
    }

    /// A worker-side buffer feeding this writer.
    pub fn buffer(&self) -> AccessLog {
        AccessLog {
            sink: Some((self.sender.clone(), self.pending.clone())),
            bufs: RefCell::default(),
            clock: RefCell::default(),
        }
    }

    /// Waits until every buffer has been dropped and everything is written, or `limit` has
    /// passed (a log nobody reads must not hold the process up: what is left is lost, and said).
    pub fn finish(self, limit: Duration) {
        drop(self.sender);
        let deadline = Instant::now() + limit;
        while !self.thread.is_finished() {
            if Instant::now() >= deadline {
                let left = self.pending.load(Ordering::Relaxed);
                return tracing::error!(
                    "access log: {left} bytes not written at exit (the file does not take them)"
                );
            }
            std::thread::park_timeout(Duration::from_millis(10));
        }
        let _ = self.thread.join();
    }
}

fn write_loop(receiver: &mpsc::Receiver<Message>, pending: &AtomicUsize) {
    let mut files: HashMap<Arc<Path>, File> = HashMap::new();
    for message in receiver {
        match message {
            Message::Open(path, file) => {
                files.entry(path).or_insert(file);
            }
            Message::Lines(path, lines) => {
                match files.get_mut(&path) {
                    Some(file) => {
                        if let Err(e) = file.write_all(&lines) {
                            tracing::error!("access log {}: write failed: {e}", path.display());
                        }
                    }
                    None => tracing::error!("access log {}: not open", path.display()),
                }
                pending.fetch_sub(lines.len(), Ordering::Relaxed);
            }
            Message::Reopen => {
                for (path, file) in &mut files {
                    match open_append(path) {
                        Ok(f) => *file = f,
                        Err(e) => tracing::error!(
                            "access log {}: reopen failed, still writing the old file: {e}",
                            path.display()
                        ),
                    }
                }
                tracing::info!("access logs reopened");
            }
        }
    }
}

type Sink = (mpsc::Sender<Message>, Arc<AtomicUsize>);

/// A worker's log buffers, one per file; disabled when there is no access log at all.
pub struct AccessLog {
    sink: Option<Sink>,
    bufs: RefCell<Vec<(Arc<Path>, Vec<u8>)>>,
    /// The formatted current second, cached.
    clock: RefCell<Clock>,
}

impl AccessLog {
    /// A log that records nothing.
    pub fn disabled() -> AccessLog {
        AccessLog {
            sink: None,
            bufs: RefCell::default(),
            clock: RefCell::default(),
        }
    }

    /// Whether entries can be recorded (callers skip gathering fields otherwise).
    pub fn enabled(&self) -> bool {
        self.sink.is_some()
    }

    /// Appends one line to `target`'s buffer.
    pub fn record(&self, target: &AccessLogTarget, e: &Entry<'_>, counters: &Shard) {
        if self.sink.is_none() {
            return;
        }
        let mut bufs = self.bufs.borrow_mut();
        let index = match bufs.iter().position(|(p, _)| Arc::ptr_eq(p, &target.path)) {
            Some(i) => i,
            None => match bufs.iter().position(|(p, _)| *p == target.path) {
                // The same file under a new config: keep its buffer, take the new path.
                Some(i) => {
                    bufs[i].0 = target.path.clone();
                    i
                }
                None => {
                    bufs.push((target.path.clone(), Vec::with_capacity(FLUSH_AT + 1024)));
                    bufs.len() - 1
                }
            },
        };
        let mut clock = self.clock.borrow_mut();
        clock.tick();
        let (path, buf) = &mut bufs[index];
        write_line(buf, &target.format, e, &clock);
        counters.inc(Counter::AccessLogLines);
        if buf.len() >= FLUSH_AT {
            self.hand_off(path, buf, counters);
        }
    }

    /// Hands buffered lines to the writer thread (called every second and at exit).
    pub fn flush(&self, counters: &Shard) {
        for (path, buf) in self.bufs.borrow_mut().iter_mut() {
            self.hand_off(path, buf, counters);
        }
    }

    fn hand_off(&self, path: &Arc<Path>, buf: &mut Vec<u8>, counters: &Shard) {
        let Some((sender, pending)) = &self.sink else {
            return;
        };
        if buf.is_empty() {
            return;
        }
        if pending.load(Ordering::Relaxed) + buf.len() > MAX_PENDING {
            let lines = buf.iter().filter(|b| **b == b'\n').count();
            counters.add(Counter::AccessLogLinesDropped, lines as u64);
            buf.clear();
            return;
        }
        pending.fetch_add(buf.len(), Ordering::Relaxed);
        let lines = std::mem::replace(buf, Vec::with_capacity(FLUSH_AT + 1024));
        let _ = sender.send(Message::Lines(path.clone(), lines));
    }
}
