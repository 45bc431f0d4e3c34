//! After `101 Switching Protocols` (WebSocket and other upgrades): the 101 head goes to the
//! client, then bytes pass both ways until either side closes, or until neither has sent a
//! byte for `limits.tunnel_idle_timeout` (then both are closed, and it is counted). Neither
//! connection is reused.

use std::cell::Cell;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use super::{Client, Conn, Ctx, Outcome};
use crate::config::UpstreamGroup;
use crate::error::Error;
use crate::message::ClientHead;
use crate::net::io::{write_all, write_head};
use crate::net::Stream;
use crate::observe::metrics::Counter;

/// Sends the 101 head `out` and the upstream's `early` bytes to the client, the client's
/// `pending` bytes (sent after its request head) to the upstream, then tunnels.
pub(super) async fn switch(
    cx: &Ctx<'_>,
    group: &UpstreamGroup,
    client: &mut Client,
    pending: &mut Vec<u8>,
    mut up: Conn,
    out: &ClientHead,
    early: &[u8],
) -> Result<Outcome, Error> {
    let limits = &cx.config().limits;
    let timeout = limits.client_body_timeout;
    write_head(&mut client.stream, out, &[early], timeout)
        .await
        .map_err(|_| Error::client_write())?;
    // Bytes the client sent after its request head belong to the new protocol.
    write_all(&mut up.stream, &[pending], group.send_timeout)
        .await
        .map_err(|e| Error::upstream_io(&e).after_head(101))?;
    pending.clear();
    let last = Cell::new(Instant::now());
    let mut from_client = Watched {
        stream: &mut client.stream,
        last: &last,
    };
    let mut from_upstream = Watched {
        stream: &mut up.stream,
        last: &last,
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut from_client, &mut from_upstream) => {}
        () = idle(&last, limits.tunnel_idle_timeout) => {
            cx.worker.counters.inc(Counter::TunnelIdleTimeouts);
            tracing::debug!(peer = %client.peer, "tunnel idle for {:?}: closed", limits.tunnel_idle_timeout);
        }
    }
    // Returning drops the upstream connection and, the response not being keep-alive, closes
    // the client's.
    Ok(Outcome {
        status: 101,
        body_bytes: 0,
        keep_alive: false,
    })
}

/// Resolves once `last` (the time of the tunnel's last byte) is `timeout` in the past.
async fn idle(last: &Cell<Instant>, timeout: Duration) {
    loop {
        let deadline = last.get() + timeout;
        if Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep_until(deadline).await;
    }
}

/// One side of a tunnel, noting in `last` when a byte was read from it or written to it.
struct Watched<'a> {
    stream: &'a mut Stream,
    last: &'a Cell<Instant>,
}

impl Watched<'_> {
    /// Notes progress when `moved` bytes went either way.
    fn note<T>(&self, moved: bool, r: Poll<T>) -> Poll<T> {
        if moved {
            self.last.set(Instant::now());
        }
        r
    }
}

impl AsyncRead for Watched<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut *this.stream).poll_read(cx, buf);
        this.note(buf.filled().len() > before, r)
    }
}

impl AsyncWrite for Watched<'_> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut *this.stream).poll_write(cx, buf);
        let moved = matches!(r, Poll::Ready(Ok(n)) if n > 0);
        this.note(moved, r)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().stream).poll_shutdown(cx)
    }
}
