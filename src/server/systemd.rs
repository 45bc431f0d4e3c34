//! systemd integration: readiness, reload and stop notifications (`sd_notify`, for
//! `Type=notify-reload`) and socket activation (listening sockets passed in `LISTEN_FDS`, so
//! ports below 1024 need no privilege in slipstream itself). Both are no-ops outside systemd.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::Mutex;

use sd_notify::NotifyState;

/// Listening sockets passed by the service manager, not yet claimed by a listener.
static INHERITED: Mutex<Vec<TcpListener>> = Mutex::new(Vec::new());

/// Takes the sockets passed by socket activation (`LISTEN_FDS`, `LISTEN_PID`) and clears
/// those variables. Call it first thing in `main`, before any thread starts: it changes the
/// environment. Returns how many were passed.
pub fn adopt_listeners() -> io::Result<usize> {
    let mut passed = listenfd::ListenFd::from_env();
    let mut adopted = Vec::new();
    for index in 0..passed.len() {
        match passed.take_tcp_listener(index)? {
            Some(listener) => adopted.push(listener),
            None => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "socket activation: descriptor {} is not a TCP listener",
                        3 + index
                    ),
                ))
            }
        }
    }
    let count = adopted.len();
    lock().extend(adopted);
    Ok(count)
}

fn lock() -> std::sync::MutexGuard<'static, Vec<TcpListener>> {
    INHERITED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The passed socket bound to `address`, if the service manager passed one.
pub(crate) fn take_inherited(address: SocketAddr) -> Option<TcpListener> {
    let mut inherited = lock();
    let at = inherited
        .iter()
        .position(|l| l.local_addr().ok() == Some(address))?;
    Some(inherited.swap_remove(at))
}

/// Logs (and closes) passed sockets that no `[[listen]]` address claimed.
pub(crate) fn close_unclaimed() {
    for listener in lock().drain(..) {
        let address = listener
            .local_addr()
            .map_or_else(|e| e.to_string(), |a| a.to_string());
        tracing::warn!(
            "socket activation passed a socket for {address} that no [[listen]] names: closed"
        );
    }
}

/// Tells the service manager the server is ready, with a one-line status.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// Tells the service manager a reload has begun (`Type=notify-reload` wants the monotonic
/// time with it); [`ready`] ends it.
pub fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[NotifyState::Reloading, now]),
        Err(_) => send(&[NotifyState::Reloading]),
    }
}

/// Tells the service manager the server is stopping.
pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("draining")]);
}

fn send(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!("cannot notify the service manager (NOTIFY_SOCKET): {e}");
    }
}
