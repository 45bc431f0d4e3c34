//! [`H2Stream`]: one HTTP/2 stream as a connection carrying one request, so every route kind
//! (proxy, FastCGI, static files) serves HTTP/2 unchanged. Its request head is a value
//! ([`H2Stream::request`], read into the message model by [`super::request`]); reading gives
//! the body, chunked when it has no length, with the client's trailers. The response head is a
//! value too ([`H2Stream::send_head`]: HEADERS, interim 1xx heads as informational HEADERS);
//! writing then gives the body as DATA, and chunked bytes' trailers as trailers.
//!
//! Flow control is the backpressure ([`super::body`]): memory per stream stays within the
//! windows. A response that ends early resets the stream instead of looking complete.

use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::body::{h2_error, invalid, Inbound, Outbound};
use super::request::{BodyKind, H2Request};
use super::response::{encode_fields, to_http2};
use crate::message::{ClientHead, Framing};

/// One HTTP/2 stream: heads as values, bodies as bytes.
pub struct H2Stream {
    /// The request's head, read by the request path as a value (no HTTP/1.1 text).
    request: H2Request,
    reader: Inbound,
    /// Behind a `RefCell`: [`H2Stream::poll_reset`] watches for the client's RST_STREAM
    /// through a shared reference while the request path waits on an upstream.
    writer: RefCell<ResponseWriter>,
    /// The TLS version of the connection (nginx's names), `""` for h2c.
    pub tls_version: &'static str,
    /// The connection's client certificate, when the client sent one.
    pub client_cert: Option<std::rc::Rc<crate::tls::client_auth::ClientCert>>,
    /// The server name (SNI) of the connection's handshake.
    pub tls_sni: Option<std::rc::Rc<str>>,
    /// The local address of the connection.
    pub local: Option<SocketAddr>,
    /// What the stream is reset with if its response does not end: INTERNAL_ERROR, or the
    /// upstream server's own reason ([`H2Stream::abort_with`]).
    abort: Reason,
}

impl std::fmt::Debug for H2Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Stream").finish_non_exhaustive()
    }
}

impl H2Stream {
    /// A stream whose request is `request`, its body `recv`, its response going to `respond`.
    pub fn new(request: H2Request, recv: RecvStream, respond: SendResponse<Bytes>) -> H2Stream {
        let has_body = request.body != BodyKind::None;
        let chunked = request.body == BodyKind::Chunked;
        let tunnel = request.body == BodyKind::Tunnel;
        H2Stream {
            reader: Inbound::new(Bytes::new(), recv, has_body, chunked),
            writer: RefCell::new(ResponseWriter {
                respond,
                out: ResponseState::Head,
                is_head: request.is_head(),
                tunnel,
            }),
            request,
            tls_version: "",
            client_cert: None,
            tls_sni: None,
            local: None,
            abort: Reason::INTERNAL_ERROR,
        }
    }

    /// The request, as a value: reading the stream gives only its body.
    pub fn request(&self) -> &H2Request {
        &self.request
    }

    /// Sends a response head: interim ones as they come, then the final one, after which
    /// writes give the body (framed as the head says; chunked bytes lose their coding).
    pub fn send_head(&mut self, head: &ClientHead) -> io::Result<()> {
        self.writer.get_mut().send_head(head)
    }

    /// Resets the stream with HTTP/2 error `code` (the upstream's reset, passed on) rather
    /// than INTERNAL_ERROR if its response does not end.
    pub fn abort_with(&mut self, code: u32) {
        self.abort = Reason::from(code);
    }

    /// Takes the body that has already arrived, up to `limit` bytes of it (nginx's
    /// `http2_body_preread_size`), without waiting for more: a request that breaks the rules
    /// within it (a length exceeded or not reached, a second HEADERS without END_STREAM) is
    /// then refused before anything is answered or forwarded, and one whose body trickles
    /// (gRPC streaming, a streaming upload) is forwarded at once, each DATA frame as it comes.
    /// Err if the body is malformed or the stream reset.
    pub async fn preread(&mut self, limit: usize) -> io::Result<()> {
        let reader = &mut self.reader;
        std::future::poll_fn(|cx| {
            while reader.pending_data < limit {
                match reader.pull(cx) {
                    Poll::Ready(Ok(true)) => {}
                    Poll::Ready(Ok(false)) | Poll::Pending => break,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                }
            }
            Poll::Ready(Ok(()))
        })
        .await
    }

    /// Ready when the response's body may take bytes: its send queue has room for `want`
    /// (or for a worthwhile part of it) within the client's window; gives how many bytes it
    /// takes without waiting. Before the head is sent, `want` at once.
    pub fn poll_room(&self, cx: &mut Context<'_>, want: usize) -> Poll<io::Result<usize>> {
        match &mut self.writer.borrow_mut().out {
            ResponseState::Body(body) => body.poll_room(cx, want),
            ResponseState::Head => Poll::Ready(Ok(want)),
        }
    }

    /// Ready when the client reset the stream (or the connection went away).
    pub fn poll_reset(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut w = self.writer.borrow_mut();
        match &mut w.out {
            ResponseState::Body(body) => body.poll_reset(cx),
            ResponseState::Head => w.respond.poll_reset(cx).map(|_| ()),
        }
    }
}

impl Drop for H2Stream {
    fn drop(&mut self) {
        let w = self.writer.get_mut();
        // A response that did not end must not be taken for whole.
        match &mut w.out {
            ResponseState::Body(body) if body.is_done() => {}
            ResponseState::Body(body) => body.reset(self.abort),
            ResponseState::Head => w.respond.send_reset(self.abort),
        }
    }
}

/// How far the response has been written.
enum ResponseState {
    /// No final head yet.
    Head,
    /// HEADERS went out; the body follows.
    Body(Outbound),
}

/// The response side.
struct ResponseWriter {
    respond: SendResponse<Bytes>,
    out: ResponseState,
    is_head: bool,
    /// The request is a WebSocket's extended CONNECT: the upstream's 101 is the stream's 200,
    /// and the bytes after it the stream's DATA until either side ends it.
    tunnel: bool,
}

impl ResponseWriter {
    /// Sends `head`: an interim one as informational HEADERS (a 101 not at all: HTTP/2 has no
    /// protocol switch), a final one as the response's HEADERS, the body to follow.
    fn send_head(&mut self, head: &ClientHead) -> io::Result<()> {
        if !matches!(self.out, ResponseState::Head) {
            return Err(invalid("a second response head"));
        }
        let status =
            http::StatusCode::from_u16(head.status).map_err(|_| invalid("invalid status code"))?;
        if !status.is_informational() {
            return self.send_final_head(head, status);
        }
        let mut response = to_http2(head).map_err(invalid)?;
        if self.tunnel && status == http::StatusCode::SWITCHING_PROTOCOLS {
            *response.status_mut() = http::StatusCode::OK;
            // The handshake's proof belongs to HTTP/1.1's Upgrade (RFC 8441 section 5).
            response.headers_mut().remove("sec-websocket-accept");
            let send = self
                .respond
                .send_response(response, false)
                .map_err(h2_error)?;
            self.out = ResponseState::Body(Outbound::new(send, Framing::UntilClose));
            return Ok(());
        }
        if status != http::StatusCode::SWITCHING_PROTOCOLS {
            self.respond
                .send_informational(response)
                .map_err(h2_error)?;
        }
        Ok(())
    }

    /// The final response's HEADERS, its fields encoded straight from the head's text.
    fn send_final_head(&mut self, head: &ClientHead, status: http::StatusCode) -> io::Result<()> {
        // A HEAD request's answer, a 204's and a 304's have no body, whatever the head says.
        let framing = if crate::message::has_no_body(head.status, self.is_head) {
            Framing::Empty
        } else {
            head.framing
        };
        let fields = encode_fields(head).map_err(invalid)?;
        let send = self
            .respond
            .send_response_fields(status, fields, Outbound::is_empty(framing))
            .map_err(h2_error)?;
        self.out = ResponseState::Body(Outbound::new(send, framing));
        Ok(())
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        match &mut self.out {
            ResponseState::Head => Poll::Ready(Err(invalid("a response head is sent as a value"))),
            ResponseState::Body(body) => body.poll_write(cx, buf),
        }
    }

    fn poll_shutdown(&mut self) -> Poll<io::Result<()>> {
        Poll::Ready(match &mut self.out {
            ResponseState::Body(body) => body.shutdown(),
            ResponseState::Head => Err(invalid("response ended early")),
        })
    }
}

impl AsyncRead for H2Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.get_mut().reader.poll_read(cx, buf)
    }
}

impl AsyncWrite for H2Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().writer.get_mut().poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().writer.get_mut().poll_shutdown()
    }
}
