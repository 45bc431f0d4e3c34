//! After `101 Switching Protocols` (WebSocket and other upgrades): the 101 head goes to the
//! client, then bytes pass both ways until either side closes. Neither connection is reused.

use super::{Client, Conn, Ctx, Outcome};
use crate::config::UpstreamGroup;
use crate::error::Error;
use crate::net::io::write_all;

/// Sends the 101 head `out` and the upstream's `early` bytes to the client, the client's
/// `pending` bytes (sent after its request head) to the upstream, then tunnels.
pub(super) async fn switch(
    cx: &Ctx<'_>,
    group: &UpstreamGroup,
    client: &mut Client,
    pending: &mut Vec<u8>,
    mut up: Conn,
    out: &[u8],
    early: &[u8],
) -> Result<Outcome, Error> {
    let timeout = cx.config().limits.client_body_timeout;
    write_all(&mut client.stream, &[out, early], timeout)
        .await
        .map_err(|_| Error::client_write())?;
    // Bytes the client sent after its request head belong to the new protocol.
    write_all(&mut up.stream, &[pending], group.send_timeout)
        .await
        .map_err(|e| Error::upstream_io(&e).after_head(101))?;
    pending.clear();
    let _ = tokio::io::copy_bidirectional(&mut client.stream, &mut up.stream).await;
    Ok(Outcome {
        status: 101,
        body_bytes: 0,
        keep_alive: false,
    })
}
