//! [`H2Upstream`]: one request to an HTTP/2 server (h2 over TLS, or h2c) as the byte stream of
//! an upstream connection carrying one HTTP/1.1 request, the mirror of
//! [`super::stream::H2Stream`]: the proxy writes the request it would send any server and
//! reads an HTTP/1.1 response, so balancing, retries, timeouts, logs and every client
//! protocol work unchanged. Writing takes the head (sent as HEADERS once whole, without the
//! connection-specific fields, Host as `:authority`) and the body (DATA, and trailers from a
//! chunked body); reading gives any interim (1xx) heads, the response head, its body chunked
//! unless it has a length, and the server's trailers in the chunked body (gRPC's
//! `grpc-status`). A gRPC-Web call is translated to gRPC on its way and back
//! ([`crate::grpc::web`]).
//!
//! A stream the server never processed (RST_STREAM REFUSED_STREAM, or above the last stream
//! id of its GOAWAY) fails with `ConnectionRefused` ([`super::body::h2_error`]), which the
//! request path may send anywhere again.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use h2::client::{ResponseFuture, SendRequest};
use h2::Reason;
use http::header::{HeaderName, HeaderValue};
use http::{Request, Response};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::body::{h2_error, invalid, is_stop_sending, Inbound, Outbound};
use crate::grpc::web;
use crate::http1::request::ForwardedFor;
use crate::http1::{put_field, Framing, MAX_HEADERS};
use crate::message::RequestHead;

/// One request stream to an HTTP/2 server, written and read as HTTP/1.1 bytes.
pub struct H2Upstream {
    writer: RequestWriter,
    reader: Reader,
    /// `https` over TLS, else `http`: the request's `:scheme`.
    scheme: &'static str,
    max_head: usize,
    /// The request is HEAD (its response has no body, whatever its length says).
    is_head: bool,
    /// A gRPC-Web call, translated to gRPC on its way and back.
    web: Option<web::Encoding>,
}

impl std::fmt::Debug for H2Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Upstream").finish_non_exhaustive()
    }
}

/// The request side.
enum RequestWriter {
    /// Head bytes so far, and the connection's handle to open the stream with.
    Head(SendRequest<Bytes>, Vec<u8>),
    /// HEADERS went out; the body follows.
    Body(Outbound),
    /// The server answered and reset the stream with NO_ERROR: the rest of the body is
    /// dropped, the response stands.
    Stopped,
}

/// The response side.
enum Reader {
    /// The request has not been sent.
    NotSent,
    /// Waiting for the response head.
    Waiting(ResponseFuture),
    /// An interim (1xx) response's head being read, then waiting again.
    Interim(ResponseFuture, Bytes),
    /// The head, then the body, as HTTP/1.1 bytes.
    Body(Inbound),
}

impl H2Upstream {
    /// A request to be opened on `send`'s connection; `tls` gives the scheme, request heads
    /// may take `max_head` bytes.
    pub fn new(send: SendRequest<Bytes>, tls: bool, max_head: usize) -> H2Upstream {
        H2Upstream {
            writer: RequestWriter::Head(send, Vec::new()),
            reader: Reader::NotSent,
            scheme: if tls { "https" } else { "http" },
            max_head,
            is_head: false,
            web: None,
        }
    }

    fn write_head(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let RequestWriter::Head(send, acc) = &mut self.writer else {
            unreachable!()
        };
        if let Err(e) = ready!(send.poll_ready(cx)) {
            return Poll::Ready(Err(h2_error(e)));
        }
        let before = acc.len();
        let take = buf.len().min(self.max_head.saturating_sub(before).max(1));
        acc.extend_from_slice(&buf[..take]);
        let Some(converted) = to_http2(acc, self.scheme)? else {
            if acc.len() >= self.max_head {
                return Poll::Ready(Err(invalid("request head too large")));
            }
            return Poll::Ready(Ok(take));
        };
        let used = converted.head_len - before;
        self.open_stream(converted)?;
        Poll::Ready(Ok(used))
    }

    /// Sends a request given as a value (HEADERS); what is written after it is its body.
    /// Ready once the connection has taken it.
    pub(crate) fn poll_send(
        &mut self,
        cx: &mut Context<'_>,
        request: &mut Option<ConvertedRequest>,
    ) -> Poll<io::Result<()>> {
        let RequestWriter::Head(send, acc) = &mut self.writer else {
            return Poll::Ready(Err(invalid("a request was already sent")));
        };
        debug_assert!(acc.is_empty());
        if let Err(e) = ready!(send.poll_ready(cx)) {
            return Poll::Ready(Err(h2_error(e)));
        }
        let converted = request.take().ok_or_else(|| invalid("no request"))?;
        Poll::Ready(self.open_stream(converted))
    }

    /// Opens the stream with the request's HEADERS (its connection is ready).
    fn open_stream(&mut self, converted: ConvertedRequest) -> io::Result<()> {
        let RequestWriter::Head(send, _) = &mut self.writer else {
            unreachable!()
        };
        self.is_head = converted.request.method() == http::Method::HEAD;
        self.web = converted.web;
        let ended = Outbound::is_empty(converted.framing);
        let (response, stream) = send
            .send_request(converted.request, ended)
            .map_err(h2_error)?;
        self.reader = Reader::Waiting(response);
        let mut body = Outbound::new(stream, converted.framing);
        if converted.web == Some(web::Encoding::Text) {
            body.decode_base64();
        }
        self.writer = RequestWriter::Body(body);
        Ok(())
    }

    /// The server reset the stream with NO_ERROR while the body was being sent. After an
    /// answer (RFC 9113 section 8.1) that means: stop sending; the rest of the body is dropped
    /// and the answer stands. Without one (a GOAWAY that left this stream out gives the same
    /// reason), `e` is the failure.
    fn stop_sending(&mut self, cx: &mut Context<'_>, e: io::Error) -> io::Result<()> {
        let answered = match &mut self.reader {
            Reader::Body(_) | Reader::Interim(..) => true,
            Reader::Waiting(future) => match Pin::new(future).poll(cx) {
                Poll::Ready(Ok(response)) => {
                    self.reader = Reader::Body(from_http2(response, self.is_head, self.web));
                    true
                }
                _ => false,
            },
            Reader::NotSent => false,
        };
        if !answered {
            return Err(e);
        }
        self.writer = RequestWriter::Stopped;
        Ok(())
    }

    fn poll_read_inner(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            match &mut self.reader {
                Reader::NotSent => return Poll::Ready(Err(invalid("no request sent"))),
                Reader::Interim(_, head) => {
                    let n = buf.remaining().min(head.len());
                    buf.put_slice(&head.split_to(n));
                    if head.is_empty() {
                        let Reader::Interim(future, _) =
                            std::mem::replace(&mut self.reader, Reader::NotSent)
                        else {
                            unreachable!()
                        };
                        self.reader = Reader::Waiting(future);
                    }
                    return Poll::Ready(Ok(()));
                }
                Reader::Waiting(future) => {
                    // Interim responses (103 Early Hints, 100) come first, as HTTP/1.1 heads
                    // the request path forwards as it does an HTTP/1.1 server's.
                    if let Poll::Ready(Some(interim)) = future.poll_informational(cx) {
                        let head = interim_head(&interim.map_err(h2_error)?);
                        let Reader::Waiting(future) =
                            std::mem::replace(&mut self.reader, Reader::NotSent)
                        else {
                            unreachable!()
                        };
                        self.reader = Reader::Interim(future, head);
                        continue;
                    }
                    let response = ready!(Pin::new(future).poll(cx)).map_err(h2_error)?;
                    self.reader = Reader::Body(from_http2(response, self.is_head, self.web));
                }
                Reader::Body(inbound) => return inbound.poll_read(cx, buf),
            }
        }
    }
}

impl Drop for H2Upstream {
    fn drop(&mut self) {
        let RequestWriter::Body(out) = &mut self.writer else {
            return;
        };
        let response_read = matches!(&self.reader, Reader::Body(r) if r.is_done());
        // A request given up midway stops the server's work on it.
        if !out.is_done() || !response_read {
            out.reset(Reason::CANCEL);
        }
    }
}

/// A request head converted.
pub(crate) struct ConvertedRequest {
    pub(crate) request: Request<()>,
    pub(crate) framing: Framing,
    pub(crate) head_len: usize,
    /// A gRPC-Web call (its content type is now gRPC's).
    pub(crate) web: Option<web::Encoding>,
}

/// The HTTP/1.1 request head at the start of `buf` (as the proxy wrote it) as an HTTP/2
/// request; `Ok(None)` while it is incomplete.
pub(crate) fn to_http2(buf: &[u8], scheme: &'static str) -> io::Result<Option<ConvertedRequest>> {
    let mut storage = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut storage);
    let head_len = match parsed.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(invalid("malformed request head")),
    };
    let (Some(method), Some(path)) = (parsed.method, parsed.path) else {
        return Err(invalid("malformed request head"));
    };
    let mut connection = crate::http1::ConnectionTokens::default();
    for h in parsed.headers.iter() {
        if h.name.eq_ignore_ascii_case("connection") {
            connection.add(h.value);
        }
    }
    let mut framing = Framing::Empty;
    let mut authority = None;
    let mut fields = http::HeaderMap::with_capacity(parsed.headers.len());
    for h in parsed.headers.iter() {
        let name =
            HeaderName::from_bytes(h.name.as_bytes()).map_err(|_| invalid("bad field name"))?;
        let value = h.value.trim_ascii();
        match name.as_str() {
            "host" => {
                authority = Some(value);
                continue;
            }
            "transfer-encoding" => framing = Framing::Chunked,
            "content-length" if framing != Framing::Chunked => {
                let n = std::str::from_utf8(value)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| invalid("bad content-length"))?;
                framing = Framing::Length(n);
            }
            "te" => {
                // Only `trailers` may cross into HTTP/2 (RFC 9113 section 8.2.2).
                let wants = value
                    .split(|b| *b == b',')
                    .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"trailers"));
                if wants {
                    fields.append(name, HeaderValue::from_static("trailers"));
                }
                continue;
            }
            "upgrade" => return Err(io::Error::from(io::ErrorKind::Unsupported)),
            // The proxy answers `100-continue` itself.
            "expect" => continue,
            _ => {}
        }
        if super::is_connection_specific(name.as_str()) || connection.names(name.as_str()) {
            continue;
        }
        let value = HeaderValue::from_bytes(value).map_err(|_| invalid("bad field value"))?;
        fields.append(name, value);
    }
    let authority = authority.ok_or_else(|| invalid("request without Host"))?;
    let mut converted = finish(fields, (method, path, authority), framing, scheme)?;
    converted.head_len = head_len;
    Ok(Some(converted))
}

/// The request from its parts once its fields are in HTTP/2's form: gRPC-Web made gRPC, TE
/// for gRPC, the target as `:scheme`, `:authority` and `:path`.
fn finish(
    mut fields: http::HeaderMap,
    (method, path, authority): (&str, &str, &[u8]),
    framing: Framing,
    scheme: &'static str,
) -> io::Result<ConvertedRequest> {
    let web = grpc_web(&mut fields)?;
    if crate::grpc::is_grpc(&fields) && !fields.contains_key(http::header::TE) {
        // HTTP/1.1 drops TE as hop-by-hop; gRPC servers want it (as nginx's grpc_pass sends).
        fields.insert(http::header::TE, HeaderValue::from_static("trailers"));
    }
    let uri = http::Uri::builder()
        .scheme(scheme)
        .authority(authority)
        .path_and_query(path)
        .build()
        .map_err(|_| invalid("request target HTTP/2 cannot carry"))?;
    let mut request = Request::new(());
    *request.method_mut() =
        http::Method::from_bytes(method.as_bytes()).map_err(|_| invalid("bad method"))?;
    *request.uri_mut() = uri;
    *request.headers_mut() = fields;
    Ok(ConvertedRequest {
        request,
        framing,
        head_len: 0,
        web,
    })
}

/// The request to send an HTTP/2 server, straight from the message model (no HTTP/1.1 text):
/// the fields every upstream gets ([`RequestHead::forwards`]), `te: trailers` when the client
/// asked for trailers, the proxy's X-Forwarded fields, the length from the framing.
pub(crate) fn request_from_head(
    head: &RequestHead<'_, '_>,
    fwd: ForwardedFor<'_>,
    scheme: &'static str,
) -> io::Result<ConvertedRequest> {
    if head.upgrade.is_some() {
        return Err(io::Error::from(io::ErrorKind::Unsupported));
    }
    // Every value is a slice of one copy (one allocation, not one per field).
    let mut text = Vec::with_capacity(256);
    let mut ranges = Vec::with_capacity(head.headers.len());
    let mut wants_trailers = false;
    for h in head.headers {
        if h.name.eq_ignore_ascii_case("te") {
            wants_trailers |=
                crate::http1::list_elements(h.value).any(|t| t.eq_ignore_ascii_case(b"trailers"));
        }
        if head.forwards(h.name) {
            ranges.push((h.name, text.len()..text.len() + h.value.len()));
            text.extend_from_slice(h.value);
        }
    }
    let forwarded_for = text.len();
    for value in head.forwarded_for() {
        text.extend_from_slice(value);
        text.extend_from_slice(b", ");
    }
    text.extend_from_slice(fwd.client);
    let forwarded_for = forwarded_for..text.len();
    let authority = head.host.ok_or_else(|| invalid("request without Host"))?;
    let shared = Bytes::from(text);
    let value = |r: std::ops::Range<usize>| {
        HeaderValue::from_maybe_shared(shared.slice(r)).map_err(|_| invalid("bad field value"))
    };
    let mut fields = http::HeaderMap::with_capacity(ranges.len() + 6);
    for (name, range) in ranges {
        // Lower-cased by `from_bytes` (without allocating for the common names).
        let name =
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid("bad field name"))?;
        fields.append(name, value(range)?);
    }
    if wants_trailers {
        fields.insert(http::header::TE, HeaderValue::from_static("trailers"));
    }
    fields.insert("x-forwarded-for", value(forwarded_for)?);
    let proto = match fwd.proto {
        "https" => HeaderValue::from_static("https"),
        _ => HeaderValue::from_static("http"),
    };
    fields.insert("x-forwarded-proto", proto);
    let host = HeaderValue::from_bytes(authority).map_err(|_| invalid("bad host"))?;
    fields.insert("x-forwarded-host", host);
    if let Framing::Length(n) = head.framing {
        fields.insert(http::header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    finish(
        fields,
        (head.method, &head.path, authority),
        head.framing,
        scheme,
    )
}

impl ConvertedRequest {
    /// A copy to send again (a retry, another server).
    pub(crate) fn copy(&self) -> ConvertedRequest {
        let mut request = Request::new(());
        *request.method_mut() = self.request.method().clone();
        *request.uri_mut() = self.request.uri().clone();
        *request.headers_mut() = self.request.headers().clone();
        ConvertedRequest {
            request,
            framing: self.framing,
            head_len: self.head_len,
            web: self.web,
        }
    }
}

/// A gRPC-Web call's fields as a gRPC call's: the content type, and no length for a `-text`
/// body (decoded, it is shorter).
fn grpc_web(fields: &mut http::HeaderMap) -> io::Result<Option<web::Encoding>> {
    let Some(content_type) = fields.get(http::header::CONTENT_TYPE) else {
        return Ok(None);
    };
    let Some((encoding, grpc)) = web::request_type(content_type.as_bytes()) else {
        return Ok(None);
    };
    let grpc = HeaderValue::from_bytes(&grpc).map_err(|_| invalid("bad field value"))?;
    fields.insert(http::header::CONTENT_TYPE, grpc);
    if encoding == web::Encoding::Text {
        fields.remove(http::header::CONTENT_LENGTH);
    }
    Ok(Some(encoding))
}

/// An interim (1xx) response as an HTTP/1.1 head.
fn interim_head(interim: &Response<()>) -> Bytes {
    let mut head = status_line(interim.status(), interim.headers().len());
    for (name, value) in interim.headers() {
        put_field(&mut head, name.as_str().as_bytes(), value.as_bytes());
    }
    head.extend_from_slice(b"\r\n");
    Bytes::from(head)
}

/// An HTTP/1.1 status line for `status`, with room for `fields` fields after it.
fn status_line(status: http::StatusCode, fields: usize) -> Vec<u8> {
    let mut head = Vec::with_capacity(64 + fields * 40);
    head.extend_from_slice(b"HTTP/1.1 ");
    head.extend_from_slice(status.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    head.extend_from_slice(b"\r\n");
    head
}

/// The response as HTTP/1.1 bytes: its head, then its body (chunked, with the trailers, unless
/// the server gave a length). A gRPC-Web call's gets the gRPC-Web content type and its
/// trailers as the body's last frame.
fn from_http2(
    response: Response<h2::RecvStream>,
    is_head: bool,
    web: Option<web::Encoding>,
) -> Inbound {
    let (parts, recv) = response.into_parts();
    let status = parts.status;
    // Only a gRPC answer is translated: another (a 404 page, say) passes as it is.
    let web = web.filter(|_| crate::grpc::is_grpc(&parts.headers));
    let mut head = status_line(status, parts.headers.len());
    let mut has_length = false;
    for (name, value) in &parts.headers {
        let mut value = value.as_bytes();
        let web_type;
        if let Some(encoding) = web {
            // The trailers' frame (and base64) make the body longer than the server's.
            if name == http::header::CONTENT_LENGTH {
                continue;
            }
            if name == http::header::CONTENT_TYPE {
                web_type = web::response_type(value, encoding);
                value = &web_type;
            }
        }
        has_length |= name == http::header::CONTENT_LENGTH;
        put_field(&mut head, name.as_str().as_bytes(), value);
    }
    let no_body = is_head || status.as_u16() == 204 || status.as_u16() == 304;
    let ended = recv.is_end_stream();
    let chunked = !ended && !has_length && !no_body;
    if chunked {
        head.extend_from_slice(b"transfer-encoding: chunked\r\n");
    } else if ended && !has_length && !no_body {
        // HEADERS with END_STREAM: an empty body (or a gRPC trailers-only response).
        head.extend_from_slice(b"content-length: 0\r\n");
    }
    head.extend_from_slice(b"\r\n");
    let mut inbound = Inbound::new(Bytes::from(head), recv, !ended && !no_body, chunked);
    if let (Some(encoding), true) = (web, chunked) {
        inbound.as_grpc_web(encoding);
    }
    inbound
}

impl AsyncRead for H2Upstream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.get_mut().poll_read_inner(cx, buf)
    }
}

impl AsyncWrite for H2Upstream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        match &mut this.writer {
            RequestWriter::Head(..) => this.write_head(cx, buf),
            RequestWriter::Body(out) => match ready!(out.poll_write(cx, buf)) {
                Err(e) if is_stop_sending(&e) => {
                    Poll::Ready(this.stop_sending(cx, e).map(|()| buf.len()))
                }
                other => Poll::Ready(other),
            },
            RequestWriter::Stopped => Poll::Ready(Ok(buf.len())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        Poll::Ready(match &mut this.writer {
            RequestWriter::Body(out) => match out.shutdown() {
                Err(e) if is_stop_sending(&e) => this.stop_sending(cx, e),
                other => other,
            },
            RequestWriter::Stopped => Ok(()),
            RequestWriter::Head(..) => Err(invalid("request ended early")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_head_loses_its_connection_fields_and_keeps_te_trailers() {
        let head = b"POST /echo.Echo/Say?x=1 HTTP/1.1\r\nHost: api.test:8080\r\n\
            Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: 5\r\n\
            TE: trailers, deflate\r\nTransfer-Encoding: chunked\r\n\
            Content-Type: application/grpc\r\nX-Forwarded-For: 10.0.0.1\r\n\r\nrest";
        let c = to_http2(head, "http").unwrap().unwrap();
        assert_eq!(c.head_len, head.len() - 4);
        assert_eq!(c.framing, Framing::Chunked);
        assert_eq!(c.request.uri(), "http://api.test:8080/echo.Echo/Say?x=1");
        let names: Vec<&str> = c
            .request
            .headers()
            .keys()
            .map(http::HeaderName::as_str)
            .collect();
        assert_eq!(names, ["te", "content-type", "x-forwarded-for"]);
        assert_eq!(c.request.headers()["te"], "trailers");
    }

    #[test]
    fn lengths_and_partial_heads() {
        let head = b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n";
        let c = to_http2(head, "https").unwrap().unwrap();
        assert_eq!(c.framing, Framing::Length(0));
        assert_eq!(c.request.uri().scheme_str(), Some("https"));
        assert!(to_http2(&head[..20], "http").unwrap().is_none());
        assert!(to_http2(b"GET / HTTP/1.1\r\n\r\n", "http").is_err());
        let upgrade = b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n";
        assert!(to_http2(upgrade, "http").is_err());
    }
}
