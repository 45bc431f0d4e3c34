//! Sending a FastCGI request: a pooled connection to the chosen server (waiting in line when
//! the server is at `max_conns`) or a new one, the records in one write, the rest of the body
//! read from the client and streamed as STDIN records, then the wait for the first response
//! bytes. A pooled connection found dead is replaced by a fresh one once, as for HTTP.

use std::time::Duration;

use tokio::io::AsyncReadExt;

use super::Request;
use crate::config::UpstreamGroup;
use crate::error::{Error, Kind};
use crate::fastcgi::record::{put_header, put_record, RecordType, MAX_CONTENT};
use crate::net::io::{read_some, write_all, write_continue};
use crate::proxy::exchange::on_connection;
use crate::proxy::{Client, Conn, Ctx};
use crate::upstream::Lease;

/// The first response read: room for the largest record (64 KiB content, 255 padding).
pub(super) const RESPONSE_BUFFER: usize = 72 * 1024;

/// One server's try: sends the request and waits for the first response bytes; returns the
/// connection and the upstream buffer holding them.
pub(super) async fn attempt(
    cx: &Ctx<'_>,
    group: &UpstreamGroup,
    lease: &Lease,
    client: &mut Client,
    request: &Request,
) -> Result<(Conn, Vec<u8>), Error> {
    let send =
        async |client: &mut Client, conn: &mut Conn| send(cx, group, client, request, conn).await;
    on_connection(cx, group, lease, client, request.in_hand(), send).await
}

/// Writes the records, streams the rest of the body, and reads the first response bytes.
async fn send(
    cx: &Ctx<'_>,
    group: &UpstreamGroup,
    client: &mut Client,
    request: &Request,
    conn: &mut Conn,
) -> Result<Vec<u8>, Error> {
    let p = cx.request;
    let limits = &cx.config().limits;
    write_all(&mut conn.stream, &[&request.records], group.send_timeout)
        .await
        .map_err(|e| Error::no_response(&e))?;
    if !request.in_hand() {
        if p.expect_continue && p.minor_version == 1 {
            write_continue(&mut client.stream, limits.client_body_timeout)
                .await
                .map_err(|_| Error::client_write())?;
        }
        stream_body(cx, group, client, conn, request.body_left).await?;
    }
    let mut ubuf = cx.worker.buffers.take(RESPONSE_BUFFER);
    let read = tokio::select! {
        r = read_some(&mut conn.stream, &mut ubuf, RESPONSE_BUFFER, group.read_timeout) => r,
        _ = client.stream.hangup() => Err(std::io::ErrorKind::ConnectionAborted.into()),
    };
    match read {
        Ok(n) if n > 0 => Ok(ubuf),
        Ok(_) => {
            cx.worker.buffers.give(ubuf, RESPONSE_BUFFER);
            Err(Error::no_response(
                &std::io::ErrorKind::UnexpectedEof.into(),
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionAborted => {
            cx.worker.buffers.give(ubuf, RESPONSE_BUFFER);
            Err(Error::new(Kind::ClientClosed))
        }
        Err(e) => {
            cx.worker.buffers.give(ubuf, RESPONSE_BUFFER);
            Err(Error::no_response(&e))
        }
    }
}

/// Reads the `left` body bytes still with the client and sends them as STDIN records, each
/// written before the next read (the upstream's pace bounds memory), then the empty record.
async fn stream_body(
    cx: &Ctx<'_>,
    group: &UpstreamGroup,
    client: &mut Client,
    conn: &mut Conn,
    mut left: u64,
) -> Result<(), Error> {
    let read_timeout = cx.config().limits.client_body_timeout;
    let mut chunk = cx.worker.buffers.take(MAX_CONTENT);
    chunk.resize(MAX_CONTENT, 0);
    let mut header = Vec::with_capacity(8);
    let result = async {
        while left > 0 {
            let want = left.min(MAX_CONTENT as u64) as usize;
            let n = read_client(client, &mut chunk[..want], read_timeout).await?;
            header.clear();
            let padding = put_header(&mut header, RecordType::Stdin, n);
            let parts = [&header[..], &chunk[..n], &[0u8; 8][..padding]];
            write_all(&mut conn.stream, &parts, group.send_timeout)
                .await
                .map_err(|e| Error::upstream_io(&e))?;
            left -= n as u64;
        }
        header.clear();
        put_record(&mut header, RecordType::Stdin, &[]);
        write_all(&mut conn.stream, &[&header], group.send_timeout)
            .await
            .map_err(|e| Error::upstream_io(&e))
    }
    .await;
    cx.worker.buffers.give(chunk, RESPONSE_BUFFER);
    result
}

/// One read of request body bytes: a client that closes or stops sending fails the request.
async fn read_client(
    client: &mut Client,
    into: &mut [u8],
    timeout: Duration,
) -> Result<usize, Error> {
    match tokio::time::timeout(timeout, client.stream.read(into)).await {
        Ok(Ok(0)) => Err(Error::new(Kind::ClientClosed)),
        Ok(Ok(n)) => Ok(n),
        Ok(Err(e)) => Err(Error::client_read(&e)),
        Err(_) => Err(Error::new(Kind::ClientTimeout)),
    }
}
