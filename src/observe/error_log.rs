//! The error log: one line per event (text or JSON) with its level, thread, connection id and
//! peer, written with one write(2) to a file or standard error. A message repeated within a
//! second on the same thread is written once; the rest are counted and summed up in one line
//! ("... (repeated 812 times)") when the second is over, so a failing upstream under load
//! cannot flood the disk. Counting is per thread: no lock on the request path.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// How much the error log says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Faults that lose requests.
    Error,
    /// Faults worked around (a retry, an ejection) and traps hit.
    Warn,
    /// Lifecycle: start, reload, shutdown (the default).
    Info,
    /// Every refused request and closed connection.
    Debug,
}

impl Level {
    /// Its name in the config and in lines.
    pub fn name(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }

    /// The level named `s`.
    pub fn parse(s: &str) -> Option<Level> {
        [Level::Error, Level::Warn, Level::Info, Level::Debug]
            .into_iter()
            .find(|l| l.name() == s)
    }
}

/// Where the error log goes and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorLog {
    /// A file to append to; standard error when `None`.
    pub path: Option<PathBuf>,
    /// Least severe level written.
    pub level: Level,
    /// One JSON object per line instead of text.
    pub json: bool,
}

impl Default for ErrorLog {
    fn default() -> Self {
        ErrorLog {
            path: None,
            level: Level::Info,
            json: false,
        }
    }
}

/// How long a repeated message stays quiet after it was written.
const WINDOW: Duration = Duration::from_secs(1);
/// Distinct messages tracked per thread; beyond this the oldest counts are written out.
const MAX_TRACKED: usize = 256;

/// Where lines go: a file reopened by path on SIGUSR1, or standard error.
struct Sink {
    path: Option<PathBuf>,
    file: ArcSwap<File>,
    json: bool,
}

static SINK: OnceLock<Arc<Sink>> = OnceLock::new();

/// Installs the error log as the process's `tracing` subscriber. `SLIPSTREAM_LOG` (a filter
/// such as `debug` or `slipstream=debug`) overrides the configured level.
pub fn init(config: &ErrorLog) -> std::io::Result<()> {
    let file = match &config.path {
        Some(path) => open(path)?,
        None => File::from(std::io::stderr().as_fd().try_clone_to_owned()?),
    };
    let sink = Arc::new(Sink {
        path: config.path.clone(),
        file: ArcSwap::from_pointee(file),
        json: config.json,
    });
    let _ = SINK.set(sink.clone());
    let level = config.level.name();
    let filter = EnvFilter::try_from_env("SLIPSTREAM_LOG").unwrap_or_else(|_| {
        EnvFilter::new(format!("{level},hickory_proto=warn,hickory_resolver=warn"))
    });
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(ErrorLogLayer { sink })
        .try_init();
    Ok(())
}

fn open(path: &std::path::Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| {
            let what = format!("cannot open error log {}: {e}", path.display());
            std::io::Error::new(e.kind(), what)
        })
}

/// Reopens the error-log file by its path (SIGUSR1, after logrotate renamed it).
pub fn reopen() {
    let Some(sink) = SINK.get() else { return };
    let Some(path) = &sink.path else { return };
    match open(path) {
        Ok(f) => sink.file.store(Arc::new(f)),
        Err(e) => tracing::error!("{e}; still writing the old file"),
    }
}

/// Writes the summaries of messages whose quiet second is over (each worker calls this once
/// a second, for its own thread's counts).
pub fn flush_repeats() {
    let Some(sink) = SINK.get() else { return };
    let due = REPEATS.with(|r| r.borrow_mut().expired(Instant::now()));
    for (line, n) in due {
        sink.write_summary(&line, n);
    }
}

thread_local! {
    static REPEATS: RefCell<Repeats> = RefCell::new(Repeats::default());
}

/// Counts of messages repeated within [`WINDOW`], by message (one thread's).
#[derive(Debug, Default)]
pub struct Repeats {
    seen: HashMap<String, (Instant, u64)>,
}

/// What to do with an event.
#[derive(Debug, PartialEq, Eq)]
pub enum Admit {
    /// Write it, after a summary of this many earlier suppressed repeats (if not zero).
    Write(u64),
    /// Count it: the same message was written less than a second ago.
    Suppress,
}

impl Repeats {
    /// Decides about one event with message `key` at `now`.
    pub fn admit(&mut self, key: &str, now: Instant) -> Admit {
        if let Some((since, count)) = self.seen.get_mut(key) {
            if now.duration_since(*since) < WINDOW {
                *count += 1;
                return Admit::Suppress;
            }
            let earlier = std::mem::take(count);
            *since = now;
            return Admit::Write(earlier);
        }
        if self.seen.len() >= MAX_TRACKED {
            self.seen.retain(|_, (_, n)| *n > 0);
        }
        if self.seen.len() < MAX_TRACKED {
            self.seen.insert(key.to_string(), (now, 0));
        }
        Admit::Write(0)
    }

    /// Messages whose window ended with repeats counted, and forgets quiet ones.
    pub fn expired(&mut self, now: Instant) -> Vec<(String, u64)> {
        let mut due = Vec::new();
        self.seen.retain(|key, (since, count)| {
            if now.duration_since(*since) < WINDOW {
                return true;
            }
            if *count > 0 {
                due.push((key.clone(), *count));
            }
            false
        });
        due
    }
}

struct ErrorLogLayer {
    sink: Arc<Sink>,
}

/// An event's fields: the message, then the rest in order.
#[derive(Default)]
struct EventFields {
    message: String,
    /// `conn` and `peer`: shown, but not part of what makes two messages "the same".
    context: Vec<(&'static str, String)>,
    other: Vec<(&'static str, String)>,
}

impl Visit for EventFields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let text = format!("{value:?}");
        self.put(field.name(), text);
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field.name(), value.to_string());
    }
}

impl EventFields {
    fn put(&mut self, name: &'static str, value: String) {
        match name {
            "message" => self.message = value,
            "conn" | "peer" => self.context.push((name, value)),
            _ => self.other.push((name, value)),
        }
    }

    /// The message with its non-context fields: equal keys are repeats.
    fn key(&self, level: &tracing::Level) -> String {
        let mut key = format!("{level} {}", self.message);
        for (name, value) in &self.other {
            let _ = write!(key, " {name}={value}");
        }
        key
    }
}

impl<S: Subscriber> Layer<S> for ErrorLogLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = EventFields::default();
        event.record(&mut fields);
        let level = event.metadata().level();
        let key = fields.key(level);
        let admit = REPEATS.with(|r| r.borrow_mut().admit(&key, Instant::now()));
        let Admit::Write(earlier) = admit else {
            return;
        };
        if earlier > 0 {
            self.sink.write_summary(&key, earlier);
        }
        let line = self.sink.format(level, &fields);
        self.sink.write(line.as_bytes());
    }
}

impl Sink {
    fn write(&self, line: &[u8]) {
        let file = self.file.load();
        let _ = (&**file).write_all(line);
    }

    /// `... (repeated N times)` for a suppressed message, `key` being "LEVEL message fields".
    fn write_summary(&self, key: &str, n: u64) {
        let (level, rest) = key.split_once(' ').unwrap_or(("WARN", key));
        let mut fields = EventFields {
            message: format!("{rest} (repeated {n} times)"),
            ..EventFields::default()
        };
        fields.other.clear();
        let level = level.parse().unwrap_or(tracing::Level::WARN);
        let line = self.format(&level, &fields);
        self.write(line.as_bytes());
    }

    fn format(&self, level: &tracing::Level, f: &EventFields) -> String {
        let time = chrono::Local::now().format("%Y-%m-%dT%H:%M:%S%.3f%:z");
        let thread = std::thread::current();
        let thread = thread.name().unwrap_or("main");
        let level = level.as_str().to_ascii_lowercase();
        if self.json {
            let mut map = serde_json::Map::new();
            map.insert("time".into(), time.to_string().into());
            map.insert("level".into(), level.into());
            map.insert("thread".into(), thread.into());
            map.insert("msg".into(), f.message.clone().into());
            for (name, value) in f.context.iter().chain(&f.other) {
                map.insert((*name).into(), value.clone().into());
            }
            let mut line = serde_json::Value::Object(map).to_string();
            line.push('\n');
            return line;
        }
        let mut line = format!("{time} {level} [{thread}]");
        for (name, value) in f.context.iter().chain(&f.other) {
            let _ = write!(line, " {name}={value}");
        }
        let _ = writeln!(line, " {}", f.message);
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_within_a_second_are_counted_then_summed_up() {
        let mut r = Repeats::default();
        let t0 = Instant::now();
        assert_eq!(r.admit("warn refused", t0), Admit::Write(0));
        for i in 0..812 {
            let at = t0 + Duration::from_micros(i);
            assert_eq!(r.admit("warn refused", at), Admit::Suppress);
        }
        assert_eq!(r.admit("warn other", t0), Admit::Write(0));
        assert!(r.expired(t0 + Duration::from_millis(500)).is_empty());
        let due = r.expired(t0 + Duration::from_millis(1500));
        assert_eq!(due, vec![("warn refused".to_string(), 812)]);
        // Both forgotten: the next one is written at once.
        assert_eq!(
            r.admit("warn refused", t0 + Duration::from_secs(2)),
            Admit::Write(0)
        );
    }

    #[test]
    fn a_repeat_after_the_window_carries_the_count() {
        let mut r = Repeats::default();
        let t0 = Instant::now();
        r.admit("k", t0);
        r.admit("k", t0);
        r.admit("k", t0);
        assert_eq!(r.admit("k", t0 + WINDOW), Admit::Write(2));
    }
}
