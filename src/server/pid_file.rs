//! The pid file, and the state file beside it: how `slipstream reload` and `slipstream stop`
//! find the running process, and how a reload's outcome (the new generation, or the errors)
//! gets back to the command that asked for it.
//!
//! The pid file holds the process id alone, as service managers and `kill $(cat ...)` expect.
//! The state file (`slipstream.state` next to it) is rewritten whole (write, then rename) after
//! every reload attempt and when draining starts.

use std::io;
use std::path::{Path, PathBuf};

/// Where the pid file goes when the config names none: systemd's `RuntimeDirectory`, else
/// `/run/slipstream/` for root, else the user's runtime directory (or `/tmp`).
pub fn default_path() -> PathBuf {
    if let Some(dir) = std::env::var_os("RUNTIME_DIRECTORY") {
        // systemd may pass several, separated by ':'; the first is ours.
        let dir = dir
            .to_string_lossy()
            .split(':')
            .next()
            .unwrap_or("")
            .to_string();
        if !dir.is_empty() {
            return Path::new(&dir).join("slipstream.pid");
        }
    }
    let uid = rustix::process::getuid();
    if uid.is_root() {
        return PathBuf::from("/run/slipstream/slipstream.pid");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) if !dir.is_empty() => Path::new(&dir).join("slipstream/slipstream.pid"),
        _ => PathBuf::from(format!("/tmp/slipstream-{}/slipstream.pid", uid.as_raw())),
    }
}

/// The state file that goes with a pid file.
pub fn state_path(pid_file: &Path) -> PathBuf {
    pid_file.with_extension("state")
}

/// What the running process last reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedState {
    /// The process id.
    pub pid: u32,
    /// The config file it reloads from (absolute; empty without one).
    pub config: String,
    /// The config generation in force (0 at start, one more per accepted reload).
    pub generation: u64,
    /// Reloads attempted so far, accepted or refused.
    pub attempts: u64,
    /// Whether the process is draining (stopping).
    pub draining: bool,
    /// Why the last reload was refused (`None`: it was accepted, or none was tried).
    pub refused: Option<String>,
}

impl SavedState {
    fn render(&self) -> String {
        let mut text = format!(
            "pid {}\nconfig {}\ngeneration {}\nattempts {}\nphase {}\n",
            self.pid,
            self.config,
            self.generation,
            self.attempts,
            if self.draining { "draining" } else { "running" }
        );
        match &self.refused {
            None => text.push_str("last accepted\n"),
            Some(why) => {
                text.push_str("last refused\n");
                text.push_str(why);
                text.push('\n');
            }
        }
        text
    }

    /// Reads a state file's text; `None` when it is not one.
    pub fn parse(text: &str) -> Option<SavedState> {
        let mut lines = text.lines();
        let mut field = |name: &str| -> Option<String> {
            let line = lines.next()?;
            line.strip_prefix(name)?
                .strip_prefix(' ')
                .map(str::to_string)
        };
        let pid = field("pid")?.parse().ok()?;
        let config = field("config")?;
        let generation = field("generation")?.parse().ok()?;
        let attempts = field("attempts")?.parse().ok()?;
        let draining = field("phase")? == "draining";
        let refused = match field("last")?.as_str() {
            "accepted" => None,
            _ => Some(lines.collect::<Vec<_>>().join("\n")),
        };
        Some(SavedState {
            pid,
            config,
            generation,
            attempts,
            draining,
            refused,
        })
    }
}

/// The pid and state files of this process; both are removed when it is dropped (if they
/// still name this process).
pub struct PidFile {
    path: PathBuf,
}

impl PidFile {
    /// Writes this process's id to `path`, creating its directory if need be.
    pub fn create(path: &Path) -> io::Result<PidFile> {
        let fail =
            |e: io::Error| io::Error::new(e.kind(), format!("pid file {}: {e}", path.display()));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(fail)?;
        }
        write_whole(path, &format!("{}\n", std::process::id())).map_err(fail)?;
        Ok(PidFile {
            path: path.to_path_buf(),
        })
    }

    /// The pid file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Rewrites the state file; a failure is logged, never fatal.
    pub fn record(&self, state: &SavedState) {
        let path = state_path(&self.path);
        if let Err(e) = write_whole(&path, &state.render()) {
            tracing::warn!("cannot write the state file {}: {e}", path.display());
        }
    }
}

impl PidFile {
    /// Removes both files if they still name this process (also done on drop; call it before
    /// exiting without unwinding).
    pub fn remove(&self) {
        if read_pid(&self.path).ok() == Some(std::process::id()) {
            let _ = std::fs::remove_file(state_path(&self.path));
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Writes a file whole: to a temporary name, then renamed over the old one, so a reader never
/// sees half of it.
fn write_whole(path: &Path, text: &str) -> io::Result<()> {
    let temporary = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, path)
}

/// The process id in a pid file.
pub fn read_pid(path: &Path) -> io::Result<u32> {
    let text = std::fs::read_to_string(path)?;
    text.trim().parse().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not a process id: {:?}", path.display(), text.trim()),
        )
    })
}

/// The state file of a pid file, if there is a readable one.
pub fn read_state(pid_file: &Path) -> Option<SavedState> {
    SavedState::parse(&std::fs::read_to_string(state_path(pid_file)).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips() {
        let refused = SavedState {
            pid: 42,
            config: "/etc/slipstream/slipstream.toml".into(),
            generation: 3,
            attempts: 5,
            draining: false,
            refused: Some("a.toml:2:1: unknown key\n  |\n2 | x = 1".into()),
        };
        assert_eq!(SavedState::parse(&refused.render()), Some(refused.clone()));
        let accepted = SavedState {
            refused: None,
            draining: true,
            ..refused
        };
        assert_eq!(SavedState::parse(&accepted.render()), Some(accepted));
        assert_eq!(SavedState::parse("pid x\n"), None);
    }
}
