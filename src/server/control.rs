//! `slipstream reload` and `slipstream stop`: find the running process by its pid file, signal
//! it, and wait for what it reports in its state file (see [`super::pid_file`]).

use std::path::Path;
use std::time::{Duration, Instant};

use rustix::process::{kill_process, Pid, Signal};

use super::pid_file::{read_pid, read_state};

/// How often the state file and the process are looked at while waiting.
const POLL: Duration = Duration::from_millis(20);

/// A reload the running process accepted.
#[derive(Debug)]
pub struct Reloaded {
    /// The process.
    pub pid: u32,
    /// The config file it read again.
    pub config: String,
    /// The generation now in force.
    pub generation: u64,
}

/// Asks the process of `pid_file` to reload its config (SIGHUP) and waits up to `wait` for its
/// answer: the new generation, or the errors that made it refuse (the old config keeps
/// serving).
pub fn reload(pid_file: &Path, wait: Duration) -> Result<Reloaded, String> {
    let pid = running_pid(pid_file)?;
    let before = read_state(pid_file).filter(|s| s.pid == pid.as_raw_nonzero().get() as u32);
    signal(pid, Signal::HUP)?;
    let Some(before) = before else {
        return Err(format!(
            "sent SIGHUP to pid {}, but it keeps no state file beside {} to say whether the \
             reload was accepted: see its error log",
            pid.as_raw_nonzero(),
            pid_file.display()
        ));
    };
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        pause();
        let Some(now) = read_state(pid_file) else {
            continue;
        };
        if now.attempts > before.attempts {
            return match now.refused {
                None => Ok(Reloaded {
                    pid: now.pid,
                    config: now.config,
                    generation: now.generation,
                }),
                Some(why) => Err(format!(
                    "reload refused; generation {} keeps serving:\n{why}",
                    now.generation
                )),
            };
        }
        if !alive(pid) {
            return Err(format!(
                "pid {} exited during the reload",
                pid.as_raw_nonzero()
            ));
        }
    }
    Err(format!(
        "pid {} did not answer the reload within {} s: see its error log",
        pid.as_raw_nonzero(),
        wait.as_secs()
    ))
}

/// Stops the process of `pid_file` and waits up to `wait` for it to exit. `graceful` lets
/// in-flight requests finish (within its `drain_timeout`); otherwise a second SIGTERM, once it
/// has begun draining, stops it at once.
pub fn stop(pid_file: &Path, graceful: bool, wait: Duration) -> Result<u32, String> {
    let pid = running_pid(pid_file)?;
    signal(pid, Signal::TERM)?;
    let deadline = Instant::now() + wait;
    let mut hurried = graceful;
    while Instant::now() < deadline {
        if !alive(pid) {
            return Ok(pid.as_raw_nonzero().get() as u32);
        }
        pause();
        if !hurried && read_state(pid_file).is_none_or(|s| s.draining) {
            // The first signal was taken (or there is no state to tell): the second one ends
            // the drain.
            signal(pid, Signal::TERM)?;
            hurried = true;
        }
    }
    Err(format!(
        "pid {} is still running after {} s",
        pid.as_raw_nonzero(),
        wait.as_secs()
    ))
}

/// The live slipstream process a pid file names.
fn running_pid(pid_file: &Path) -> Result<Pid, String> {
    let raw = read_pid(pid_file).map_err(|e| {
        format!(
            "cannot read the pid file {}: {e} (is slipstream running with this config? \
             `pid_file` in the config names it)",
            pid_file.display()
        )
    })?;
    let pid = i32::try_from(raw)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| format!("{}: {raw} is not a process id", pid_file.display()))?;
    let comm = std::fs::read_to_string(format!("/proc/{raw}/comm")).unwrap_or_default();
    if !alive(pid) || !comm.trim().starts_with("slipstream") {
        return Err(format!(
            "the pid file {} names pid {raw}, which is not a running slipstream (a stale pid \
             file: remove it)",
            pid_file.display()
        ));
    }
    Ok(pid)
}

fn signal(pid: Pid, signal: Signal) -> Result<(), String> {
    kill_process(pid, signal)
        .map_err(|e| format!("cannot signal pid {}: {e}", pid.as_raw_nonzero()))
}

/// Waits between two looks; this runs in the `reload` and `stop` commands, never on a worker.
#[allow(clippy::disallowed_methods)]
fn pause() {
    std::thread::sleep(POLL);
}

/// Whether a process runs (a zombie, exited but not yet reaped, does not).
fn alive(pid: Pid) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_nonzero()));
    // The state follows the command name, which is in parentheses.
    stat.ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}
