//! Moving bodies between the client and the upstream with bounded memory.
//!
//! A response that fits the buffer is read whole and sent with one (vectored) write together with
//! its rewritten head; a larger one streams through the buffer, each write waiting for the
//! client, so a slow client slows the upstream read instead of filling memory.

use std::future::poll_fn;
use std::io::{self, IoSlice};
use std::task::Poll;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::http1::response::Relay;
use crate::http1::BodyReader;
use crate::metrics::{Counter, Shard};
use crate::splice::{self, PipePool, SpliceError, SPLICE_MIN};

/// Smallest read buffer handed out.
pub const MIN_BUFFER: usize = 16 * 1024;

/// Writes all `parts` with as few syscalls as possible (one `writev` when the socket takes it
/// all), failing if a write makes no progress within `timeout`.
pub async fn write_all(
    stream: &mut TcpStream,
    parts: &[&[u8]],
    timeout: Duration,
) -> io::Result<()> {
    let mut iov = [IoSlice::new(&[]); 6];
    let mut count = 0;
    for p in parts.iter().filter(|p| !p.is_empty()) {
        iov[count] = IoSlice::new(p);
        count += 1;
    }
    let mut slices = &mut iov[..count];
    while !slices.is_empty() {
        let n = match tokio::time::timeout(timeout, stream.write_vectored(slices)).await {
            Ok(r) => r?,
            Err(_) => return Err(io::ErrorKind::TimedOut.into()),
        };
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut slices, n);
    }
    Ok(())
}

/// Reads into the spare capacity of `buf`, growing it first if it has less than 4 KiB spare
/// (never beyond `max`). `Ok(0)` is end of stream.
pub async fn read_some(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    max: usize,
    timeout: Duration,
) -> io::Result<usize> {
    if buf.capacity() - buf.len() < 4096 {
        let grow = buf
            .len()
            .max(MIN_BUFFER)
            .min(max.saturating_sub(buf.len()))
            .max(4096);
        buf.reserve(grow);
    }
    match tokio::time::timeout(timeout, stream.read_buf(buf)).await {
        Ok(r) => r,
        Err(_) => Err(io::ErrorKind::TimedOut.into()),
    }
}

/// True if the reactor already knows the socket is readable, so a read now would not block.
/// Costs no syscall.
async fn ready_now(stream: &TcpStream) -> bool {
    poll_fn(|cx| Poll::Ready(stream.poll_read_ready(cx).is_ready())).await
}

/// Why a body relay stopped early.
#[derive(Debug)]
pub enum RelayError {
    /// The upstream failed, sent bad framing, or closed before the end.
    Upstream(io::Error),
    /// The upstream sent nothing within the read timeout.
    UpstreamTimeout,
    /// The client went away or stopped reading.
    Client(io::Error),
    /// The client sent nothing within the body timeout.
    ClientTimeout,
    /// The client's body framing was invalid.
    Malformed,
}

impl RelayError {
    /// The status for an upstream failure: 504 when it timed out, else 502.
    pub fn gateway_status(&self) -> u16 {
        match self {
            RelayError::UpstreamTimeout => 504,
            _ => 502,
        }
    }
}

/// A response body to carry from the upstream to the client.
pub struct ResponseBody<'a> {
    /// Upstream connection.
    pub upstream: &'a mut TcpStream,
    /// Client connection.
    pub client: &'a mut TcpStream,
    /// Upstream read buffer: the response head (already parsed) then the first body bytes.
    pub buf: &'a mut Vec<u8>,
    /// Length of the upstream head at the start of `buf`.
    pub head_len: usize,
    /// The head to send the client, written together with the first body bytes.
    pub head_out: &'a [u8],
    /// Framing tracker for the body.
    pub reader: BodyReader,
    /// How the framing changes on the way.
    pub relay: Relay,
    /// Wait for the whole body before writing (set when it is length-delimited and fits).
    pub wait_whole: bool,
    /// Largest the buffer may grow.
    pub max_buffer: usize,
    /// Upstream read timeout.
    pub read_timeout: Duration,
    /// Client write timeout.
    pub send_timeout: Duration,
    /// Pipes for zero-copy transfer of body bytes beyond the first buffer, when enabled.
    pub pipes: Option<&'a PipePool>,
    /// The worker's counters.
    pub counters: &'a Shard,
}

/// How a relayed response ended.
#[derive(Debug, Clone, Copy)]
pub struct Relayed {
    /// Body bytes written to the client (framing excluded).
    pub body_bytes: u64,
    /// The message ended exactly where its framing said, so the upstream connection may be
    /// reused.
    pub clean_end: bool,
}

/// Sends the head and carries the body to the client. `head_sent` tells, on error, whether the
/// client may have received anything (if not, it can still get an error status).
pub async fn relay_response(
    r: ResponseBody<'_>,
    head_sent: &mut bool,
) -> Result<Relayed, RelayError> {
    let ResponseBody {
        upstream,
        client,
        buf,
        head_len,
        head_out,
        mut reader,
        relay,
        wait_whole,
        max_buffer,
        read_timeout,
        send_timeout,
        pipes,
        counters,
    } = r;
    // Splicing needs the bytes unchanged on the way.
    let mut pipes = pipes.filter(|_| relay == Relay::Pass);
    let mut head = Some(head_out);
    let mut out_start = head_len;
    let mut scanned = head_len;
    let mut eof = false;
    let mut extra = false;
    let mut sent = 0u64;
    let mut decoded = Vec::new();
    loop {
        if scanned < buf.len() {
            let input = &buf[scanned..];
            let taken = if relay == Relay::DecodeChunked {
                reader.feed_data(input, |d| decoded.extend_from_slice(d))
            } else {
                reader.feed(input)
            }
            .map_err(|e| {
                RelayError::Upstream(io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
            })?;
            if taken < input.len() {
                extra = true;
                buf.truncate(scanned + taken);
            }
            scanned += taken;
        }
        let complete = reader.is_done() || eof;
        if !complete {
            let pending = head.is_some() || scanned > out_start || !decoded.is_empty();
            let room = buf.len() < max_buffer;
            // With a long opaque run ahead, flush now and splice the rest instead of copying it;
            // a response that fits the buffer is still collected whole and written once.
            let splice_next = !wait_whole && pipes.is_some() && reader.opaque_len() >= SPLICE_MIN;
            if !pending || (room && !splice_next && (wait_whole || ready_now(upstream).await)) {
                let n = upstream_read(upstream, buf, max_buffer, read_timeout).await?;
                if n == 0 {
                    if !matches!(reader, BodyReader::UntilClose) {
                        return Err(RelayError::Upstream(io::ErrorKind::UnexpectedEof.into()));
                    }
                    eof = true;
                }
                continue;
            }
        }
        let data: &[u8] = if relay == Relay::DecodeChunked {
            &decoded
        } else {
            &buf[out_start..scanned]
        };
        let mut size_line = [0u8; 20];
        let (prefix, suffix): (&[u8], &[u8]) = if relay == Relay::EncodeChunked && !data.is_empty()
        {
            (chunk_size_line(data.len(), &mut size_line), b"\r\n")
        } else {
            (&[], &[])
        };
        let terminator: &[u8] = if relay == Relay::EncodeChunked && eof {
            b"0\r\n\r\n"
        } else {
            &[]
        };
        *head_sent = true;
        let parts = [
            head.take().unwrap_or_default(),
            prefix,
            data,
            suffix,
            terminator,
        ];
        write_all(client, &parts, send_timeout)
            .await
            .map_err(RelayError::Client)?;
        sent += data.len() as u64;
        if complete {
            return Ok(Relayed {
                body_bytes: sent,
                clean_end: !extra && !eof,
            });
        }
        if let Some(pool) = pipes {
            let opaque = reader.opaque_len();
            if opaque >= SPLICE_MIN {
                // The buffer is not needed while bytes bypass user space: a long, slow download
                // holds no buffer memory.
                *buf = Vec::new();
                let spliced = splice_run(
                    pool,
                    counters,
                    upstream,
                    client,
                    opaque,
                    read_timeout,
                    send_timeout,
                )
                .await;
                match spliced {
                    Ok((moved, end)) => {
                        reader.skip(moved.min(opaque));
                        sent += moved;
                        if end && !matches!(reader, BodyReader::UntilClose) {
                            return Err(RelayError::Upstream(io::ErrorKind::UnexpectedEof.into()));
                        }
                        if end || reader.is_done() {
                            return Ok(Relayed {
                                body_bytes: sent,
                                clean_end: !end,
                            });
                        }
                    }
                    Err(SpliceError::Unsupported) => pipes = None,
                    Err(SpliceError::Source(e)) => return Err(RelayError::Upstream(e)),
                    Err(SpliceError::SourceTimeout) => return Err(RelayError::UpstreamTimeout),
                    Err(SpliceError::Destination(e)) => return Err(RelayError::Client(e)),
                }
            }
        }
        buf.clear();
        decoded.clear();
        out_start = 0;
        scanned = 0;
    }
}

fn chunk_size_line(n: usize, out: &mut [u8; 20]) -> &[u8] {
    let len = format_hex(n, out);
    out[len] = b'\r';
    out[len + 1] = b'\n';
    &out[..len + 2]
}

/// Writes `n` in lower-case hex at the start of `out`; returns the digit count.
fn format_hex(n: usize, out: &mut [u8; 20]) -> usize {
    let mut tmp = [0u8; 16];
    let mut i = tmp.len();
    let mut n = n;
    loop {
        i -= 1;
        tmp[i] = b"0123456789abcdef"[n & 15];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    let len = tmp.len() - i;
    out[..len].copy_from_slice(&tmp[i..]);
    len
}

/// Reads a response body whole into `buf` (which already holds `head_len` bytes of head and the
/// first body bytes), up to `limit` bytes in all. `Some(end)` when the body ends at `end` within
/// the limit; `None` when it is larger (what was read stays in `buf`, to be streamed).
pub async fn read_whole(
    upstream: &mut TcpStream,
    buf: &mut Vec<u8>,
    head_len: usize,
    framing: crate::http1::Framing,
    limit: usize,
    read_timeout: Duration,
) -> Result<Option<usize>, RelayError> {
    if let crate::http1::Framing::Length(n) = framing {
        if head_len as u64 + n > limit as u64 {
            return Ok(None);
        }
    }
    if framing == crate::http1::Framing::UntilClose {
        return Ok(None);
    }
    let mut reader = BodyReader::new(framing);
    let mut scanned = head_len;
    loop {
        let taken = reader.feed(&buf[scanned..]).map_err(|e| {
            RelayError::Upstream(io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
        })?;
        scanned += taken;
        if reader.is_done() {
            return Ok(Some(scanned));
        }
        if buf.len() >= limit {
            return Ok(None);
        }
        if upstream_read(upstream, buf, limit, read_timeout).await? == 0 {
            return Err(RelayError::Upstream(io::ErrorKind::UnexpectedEof.into()));
        }
    }
}

/// [`read_some`] on the upstream side, with its failures as relay errors.
async fn upstream_read(
    upstream: &mut TcpStream,
    buf: &mut Vec<u8>,
    max: usize,
    timeout: Duration,
) -> Result<usize, RelayError> {
    read_some(upstream, buf, max, timeout)
        .await
        .map_err(|e| match e.kind() {
            io::ErrorKind::TimedOut => RelayError::UpstreamTimeout,
            _ => RelayError::Upstream(e),
        })
}

/// A request body still to be read from the client and sent upstream.
pub struct RequestBody<'a> {
    /// Client connection.
    pub client: &'a mut TcpStream,
    /// Upstream connection.
    pub upstream: &'a mut TcpStream,
    /// Client read buffer, empty on entry; holds pipelined bytes after the body on return.
    pub buf: &'a mut Vec<u8>,
    /// Framing tracker for the body.
    pub reader: &'a mut BodyReader,
    /// Largest the buffer may grow.
    pub max_buffer: usize,
    /// Time allowed between two client reads.
    pub read_timeout: Duration,
    /// Time allowed for an upstream write.
    pub send_timeout: Duration,
    /// Pipes for zero-copy transfer, when enabled.
    pub pipes: Option<&'a PipePool>,
    /// The worker's counters.
    pub counters: &'a Shard,
}

/// Streams the rest of a request body to the upstream, one buffer at a time.
pub async fn relay_request_body(r: RequestBody<'_>) -> Result<(), RelayError> {
    let max = r.max_buffer.min(64 * 1024);
    let mut pipes = r.pipes;
    while !r.reader.is_done() {
        if let Some(pool) = pipes {
            let opaque = r.reader.opaque_len();
            if opaque >= SPLICE_MIN {
                let spliced = splice_run(
                    pool,
                    r.counters,
                    r.client,
                    r.upstream,
                    opaque,
                    r.read_timeout,
                    r.send_timeout,
                )
                .await;
                match spliced {
                    Ok((_, true)) => {
                        return Err(RelayError::Client(io::ErrorKind::UnexpectedEof.into()))
                    }
                    Ok((moved, false)) => r.reader.skip(moved),
                    Err(SpliceError::Unsupported) => pipes = None,
                    Err(SpliceError::Source(e)) => return Err(RelayError::Client(e)),
                    Err(SpliceError::SourceTimeout) => return Err(RelayError::ClientTimeout),
                    Err(SpliceError::Destination(e)) => return Err(RelayError::Upstream(e)),
                }
                continue;
            }
        }
        match read_some(r.client, r.buf, max, r.read_timeout).await {
            Ok(0) => return Err(RelayError::Client(io::ErrorKind::UnexpectedEof.into())),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::TimedOut => return Err(RelayError::ClientTimeout),
            Err(e) => return Err(RelayError::Client(e)),
        }
        let body = r.reader.feed(r.buf).map_err(|_| RelayError::Malformed)?;
        write_all(r.upstream, &[&r.buf[..body]], r.send_timeout)
            .await
            .map_err(RelayError::Upstream)?;
        r.buf.drain(..body);
    }
    Ok(())
}

/// Splices up to `len` bytes through a pooled pipe; the pipe goes back only if it is empty.
async fn splice_run(
    pipes: &PipePool,
    counters: &Shard,
    from: &TcpStream,
    to: &TcpStream,
    len: u64,
    read_timeout: Duration,
    send_timeout: Duration,
) -> Result<(u64, bool), SpliceError> {
    let Ok(pipe) = pipes.take() else {
        // No pipe to be had (descriptor limit): copy instead.
        return Err(SpliceError::Unsupported);
    };
    let result = splice::transfer(from, to, &pipe, len, read_timeout, send_timeout).await;
    if let Ok((moved, _)) = result {
        counters.add(Counter::SplicedBytes, moved);
        pipes.give(pipe);
    }
    result
}

/// Passes bytes both ways until either side closes (after a 101 Switching Protocols).
pub async fn tunnel(client: &mut TcpStream, upstream: &mut TcpStream) {
    let _ = tokio::io::copy_bidirectional(client, upstream).await;
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_sizes() {
        let mut out = [0u8; 20];
        assert_eq!(super::chunk_size_line(0x1f3, &mut out), b"1f3\r\n");
        assert_eq!(super::chunk_size_line(0, &mut out), b"0\r\n");
    }
}
