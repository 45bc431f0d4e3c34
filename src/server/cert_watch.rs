//! Watching certificate files: every two seconds the running config's certificate and key
//! files are looked at (size, mtime and inode, through symlinks and of the links themselves, so
//! certbot's and Kubernetes' symlink swaps are seen); a change wakes the owner of the server,
//! which reads them again ([`super::Server::reload_certificates`]).

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::Notify;

use crate::config::SharedConfig;

/// How often the files are looked at.
const PERIOD: Duration = Duration::from_secs(2);

/// What identifies a file's content without reading it.
type Signature = Vec<Option<(u64, i64, i64, u64)>>;

fn signature(shared: &SharedConfig) -> Signature {
    use std::os::unix::fs::MetadataExt;
    let config = shared.current();
    let Some(tls) = &config.tls else {
        return Vec::new();
    };
    let mut sig = Vec::new();
    for s in &tls.sources {
        for path in [&s.cert, &s.key] {
            for m in [std::fs::metadata(path), std::fs::symlink_metadata(path)] {
                sig.push(
                    m.ok()
                        .map(|m| (m.len(), m.mtime(), m.mtime_nsec(), m.ino())),
                );
            }
            // The folder too: a swapped `..data` symlink changes it.
            let dir = path.parent().and_then(|d| std::fs::metadata(d).ok());
            sig.push(dir.map(|m| (0, m.mtime(), m.mtime_nsec(), m.ino())));
        }
    }
    sig
}

/// Starts the watcher; it stops when `stop`'s sender is dropped.
pub(super) fn spawn(
    shared: Arc<SharedConfig>,
    changed: Arc<Notify>,
    stop: Receiver<()>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("cert-watch".into())
        .spawn(move || {
            let mut last = signature(&shared);
            loop {
                match stop.recv_timeout(PERIOD) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
                let now = signature(&shared);
                if now != last {
                    last = now;
                    changed.notify_one();
                }
            }
        })
}
