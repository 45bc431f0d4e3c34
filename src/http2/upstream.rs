//! [`H2Upstream`]: one request to an HTTP/2 server (h2 over TLS, or h2c) as an upstream
//! connection carrying one request, the mirror of [`super::stream::H2Stream`], so balancing,
//! retries, timeouts, logs and every client protocol work unchanged. The request is handed
//! over as a value built from the message model ([`request_from_head`]: HEADERS without the
//! connection-specific fields, the host as `:authority`), then its body is written (DATA, and
//! trailers from a chunked body). Reading gives any interim (1xx) heads as HTTP/1.1 bytes;
//! the final head waits as a value ([`UpstreamResponse`], read into the model's
//! `ResponseHead` with no text in between); then its body, chunked unless it has a length,
//! with the server's trailers (gRPC's `grpc-status`). A gRPC-Web call is translated to gRPC on
//! its way and back ([`crate::grpc::web`]).
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
use crate::http1::{parse_content_length, put_field, Framing, ResponseError, MAX_HEADERS};
use crate::message::{ConnectionTokens, Field, RequestHead, ResponseHead};

/// One request stream to an HTTP/2 server: the request and the response head as values, the
/// bodies as HTTP/1.1 bytes.
pub struct H2Upstream {
    writer: RequestWriter,
    reader: Reader,
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
    /// Not sent: the connection's handle to open the stream with.
    Head(SendRequest<Bytes>),
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
    /// The final head arrived and waits to be taken as a value; reads give nothing until it is.
    Head(UpstreamResponse, Inbound),
    /// The body, as HTTP/1.1 bytes.
    Body(Inbound),
}

impl H2Upstream {
    /// A request to be opened on `send`'s connection.
    pub fn new(send: SendRequest<Bytes>) -> H2Upstream {
        H2Upstream {
            writer: RequestWriter::Head(send),
            reader: Reader::NotSent,
            is_head: false,
            web: None,
        }
    }

    /// Whether the final response head has arrived and waits to be taken.
    pub fn response_waiting(&self) -> bool {
        matches!(self.reader, Reader::Head(..))
    }

    /// The final response head, once it has arrived (reads then give its body).
    pub fn take_response(&mut self) -> Option<UpstreamResponse> {
        if !self.response_waiting() {
            return None;
        }
        let Reader::Head(head, body) = std::mem::replace(&mut self.reader, Reader::NotSent) else {
            unreachable!()
        };
        self.reader = Reader::Body(body);
        Some(head)
    }

    /// Sends a request given as a value (HEADERS); what is written after it is its body.
    /// Ready once the connection has taken it.
    pub(crate) fn poll_send(
        &mut self,
        cx: &mut Context<'_>,
        request: &mut Option<ConvertedRequest>,
    ) -> Poll<io::Result<()>> {
        let RequestWriter::Head(send) = &mut self.writer else {
            return Poll::Ready(Err(invalid("a request was already sent")));
        };
        if let Err(e) = ready!(send.poll_ready(cx)) {
            return Poll::Ready(Err(h2_error(e)));
        }
        let converted = request.take().ok_or_else(|| invalid("no request"))?;
        Poll::Ready(self.open_stream(converted))
    }

    /// Opens the stream with the request's HEADERS (its connection is ready).
    fn open_stream(&mut self, converted: ConvertedRequest) -> io::Result<()> {
        let RequestWriter::Head(send) = &mut self.writer else {
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
            Reader::Body(_) | Reader::Head(..) | Reader::Interim(..) => true,
            Reader::Waiting(future) => match Pin::new(future).poll(cx) {
                Poll::Ready(Ok(response)) => {
                    self.reader = arrived(response, self.is_head, self.web);
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
                    self.reader = arrived(response, self.is_head, self.web);
                }
                // Nothing read: the head is to be taken first.
                Reader::Head(..) => return Poll::Ready(Ok(())),
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
    /// A gRPC-Web call (its content type is now gRPC's).
    pub(crate) web: Option<web::Encoding>,
}

/// The names of the fields the proxy adds, made once (a name built from a `&str` at each
/// insert would be copied into a fresh allocation, and again at each copy of the request).
static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// The request from its parts once its fields are in HTTP/2's form: gRPC-Web made gRPC, TE
/// for gRPC, the target as `:scheme`, `:authority` and `:path` (both slices of the request's
/// one copy of its values, so copies of the request share them).
fn finish(
    mut fields: http::HeaderMap,
    (method, path, authority): (&str, Bytes, Bytes),
    framing: Framing,
    scheme: &'static str,
) -> io::Result<ConvertedRequest> {
    let web = grpc_web(&mut fields)?;
    if crate::grpc::is_grpc(&fields) && !fields.contains_key(http::header::TE) {
        // HTTP/1.1 drops TE as hop-by-hop; gRPC servers want it (as nginx's grpc_pass sends).
        fields.insert(http::header::TE, HeaderValue::from_static("trailers"));
    }
    let target = |_| invalid("request target HTTP/2 cannot carry");
    let mut parts = http::uri::Parts::default();
    parts.scheme = Some(match scheme {
        "https" => http::uri::Scheme::HTTPS,
        _ => http::uri::Scheme::HTTP,
    });
    parts.authority = Some(http::uri::Authority::from_maybe_shared(authority).map_err(target)?);
    parts.path_and_query = Some(http::uri::PathAndQuery::from_maybe_shared(path).map_err(target)?);
    let uri =
        http::Uri::from_parts(parts).map_err(|_| invalid("request target HTTP/2 cannot carry"))?;
    let mut request = Request::new(());
    *request.method_mut() =
        http::Method::from_bytes(method.as_bytes()).map_err(|_| invalid("bad method"))?;
    *request.uri_mut() = uri;
    *request.headers_mut() = fields;
    Ok(ConvertedRequest {
        request,
        framing,
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
    let authority = head.host.ok_or_else(|| invalid("request without Host"))?;
    // Every value, the authority and the path are slices of one copy (one allocation, not one
    // per field).
    let mut text = Vec::with_capacity(256 + head.path.len());
    let mut wants_trailers = false;
    let mut forwarded = 0;
    for h in head.headers {
        if h.name.eq_ignore_ascii_case("te") {
            wants_trailers |=
                crate::http1::list_elements(h.value).any(|t| t.eq_ignore_ascii_case(b"trailers"));
        }
        if head.forwards(h.name) {
            text.extend_from_slice(h.value);
            forwarded += 1;
        }
    }
    let forwarded_for = text.len();
    for value in head.forwarded_for() {
        text.extend_from_slice(value);
        text.extend_from_slice(b", ");
    }
    text.extend_from_slice(fwd.client);
    let forwarded_for = forwarded_for..text.len();
    let host = text.len()..text.len() + authority.len();
    text.extend_from_slice(authority);
    let path = text.len()..text.len() + head.path.len();
    text.extend_from_slice(head.path.as_bytes());
    let shared = Bytes::from(text);
    let value = |r: std::ops::Range<usize>| {
        HeaderValue::from_maybe_shared(shared.slice(r)).map_err(|_| invalid("bad field value"))
    };
    let mut fields = http::HeaderMap::with_capacity(forwarded + 6);
    // The same walk again: each forwarded value is the next stretch of `text`.
    let mut at = 0;
    for h in head.headers.iter().filter(|h| head.forwards(h.name)) {
        // Lower-cased by `from_bytes` (without allocating for the common names).
        let name =
            HeaderName::from_bytes(h.name.as_bytes()).map_err(|_| invalid("bad field name"))?;
        fields.append(name, value(at..at + h.value.len())?);
        at += h.value.len();
    }
    if wants_trailers {
        fields.insert(http::header::TE, HeaderValue::from_static("trailers"));
    }
    fields.insert(X_FORWARDED_FOR.clone(), value(forwarded_for)?);
    let proto = match fwd.proto {
        "https" => HeaderValue::from_static("https"),
        _ => HeaderValue::from_static("http"),
    };
    fields.insert(X_FORWARDED_PROTO.clone(), proto);
    fields.insert(X_FORWARDED_HOST.clone(), value(host.clone())?);
    if let Framing::Length(n) = head.framing {
        fields.insert(http::header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    finish(
        fields,
        (head.method, shared.slice(path), shared.slice(host)),
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
    let reason = status.canonical_reason().unwrap_or("");
    crate::http1::response::put_status_line(&mut head, 1, status.as_u16(), Some(reason));
    head
}

/// Where the server's final response goes: its head waits to be read into the message model
/// ([`H2Upstream::take_response`]); its body is read as HTTP/1.1 bytes, chunked with the
/// trailers unless the server gave a length. A gRPC-Web call's gets the gRPC-Web content type
/// and its trailers as the body's last frame.
fn arrived(
    response: Response<h2::RecvStream>,
    is_head: bool,
    web: Option<web::Encoding>,
) -> Reader {
    let (mut parts, recv) = response.into_parts();
    // Only a gRPC answer is translated: another (a 404 page, say) passes as it is.
    let web = web.filter(|_| crate::grpc::is_grpc(&parts.headers));
    if let Some(encoding) = web {
        // The trailers' frame (and base64) make the body longer than the server's.
        parts.headers.remove(http::header::CONTENT_LENGTH);
        if let Some(grpc) = parts.headers.get(http::header::CONTENT_TYPE) {
            let web_type = web::response_type(grpc.as_bytes(), encoding);
            if let Ok(value) = HeaderValue::from_bytes(&web_type) {
                parts.headers.insert(http::header::CONTENT_TYPE, value);
            }
        }
    }
    let has_length = parts.headers.contains_key(http::header::CONTENT_LENGTH);
    let status = parts.status.as_u16();
    let no_body = crate::message::has_no_body(status, is_head);
    let ended = recv.is_end_stream();
    let chunked = !ended && !has_length && !no_body;
    let mut inbound = Inbound::new(Bytes::new(), recv, !ended && !no_body, chunked);
    if let (Some(encoding), true) = (web, chunked) {
        inbound.as_grpc_web(encoding);
    }
    let response = UpstreamResponse {
        parts,
        ended,
        is_head,
    };
    Reader::Head(response, inbound)
}

/// An HTTP/2 server's final response head, as `h2` decoded it.
#[derive(Debug)]
pub struct UpstreamResponse {
    parts: http::response::Parts,
    /// It came with END_STREAM: no body follows.
    ended: bool,
    /// It answers a HEAD request.
    is_head: bool,
}

impl UpstreamResponse {
    /// The head in the message model, its fields borrowed from the decoded ones (`storage`
    /// holds them). More than `MAX_HEADERS` fields, or fields that as HTTP/1.1 would take
    /// more than `max_head` bytes, are a head too large, as from an HTTP/1.1 server. A body
    /// without a length is chunked, as the body reads give it; one that ended with the head
    /// has length 0.
    pub fn head<'h, 'b>(
        &'b self,
        storage: &'h mut crate::http1::request::HeaderStorage<'b>,
        max_head: usize,
    ) -> Result<ResponseHead<'h, 'b>, ResponseError> {
        let fields = &self.parts.headers;
        if fields.len() > MAX_HEADERS {
            return Err(ResponseError::TooLarge);
        }
        let built = &mut storage.built;
        built.clear();
        built.reserve(fields.len());
        let mut length = None;
        for (name, value) in fields {
            if name == http::header::CONTENT_LENGTH {
                length = Some(
                    parse_content_length(value.as_bytes(), length)
                        .ok_or(ResponseError::Malformed("invalid Content-Length"))?,
                );
            }
            built.push(Field {
                name: name.as_str(),
                value: value.as_bytes(),
            });
        }
        let status = self.parts.status;
        let code = status.as_u16();
        if !(100..=599).contains(&code) {
            return Err(ResponseError::Malformed("invalid status code"));
        }
        let bodyless = crate::message::has_no_body(code, self.is_head);
        let framing = match length {
            _ if bodyless => Framing::Empty,
            Some(n) => Framing::Length(n),
            None if self.ended => Framing::Length(0),
            None => Framing::Chunked,
        };
        let headers: &'h [Field<'b>] = built;
        let head = ResponseHead {
            status: code,
            reason: status.canonical_reason().unwrap_or(""),
            framing,
            declared_length: length,
            reusable: true,
            connection: ConnectionTokens::default(),
            headers,
            head_len: 0,
        };
        if head.fields_size() > max_head {
            return Err(ResponseError::TooLarge);
        }
        Ok(head)
    }
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
            // Only a request given as a value (`poll_send`) has a head HTTP/2 can carry.
            RequestWriter::Head(..) => Poll::Ready(Err(invalid("request HTTP/2 cannot carry"))),
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
    use crate::http1::parse_request;
    use crate::http1::request::header_storage;

    fn convert(text: &[u8], scheme: &'static str) -> io::Result<ConvertedRequest> {
        let mut storage = header_storage();
        let head = parse_request(text, &mut storage, 8192).unwrap().unwrap();
        let fwd = ForwardedFor {
            client: b"192.0.2.9",
            proto: "http",
        };
        request_from_head(&head, fwd, scheme)
    }

    #[test]
    fn a_request_head_loses_its_connection_fields_and_keeps_te_trailers() {
        let head = b"POST /echo.Echo/Say?x=1 HTTP/1.1\r\nHost: api.test:8080\r\n\
            Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: 5\r\n\
            TE: trailers, deflate\r\nTransfer-Encoding: chunked\r\n\
            Content-Type: application/grpc\r\nX-Forwarded-For: 10.0.0.1\r\n\r\nrest";
        let c = convert(head, "http").unwrap();
        assert_eq!(c.framing, Framing::Chunked);
        assert_eq!(c.request.uri(), "http://api.test:8080/echo.Echo/Say?x=1");
        let names: Vec<&str> = c
            .request
            .headers()
            .keys()
            .map(http::HeaderName::as_str)
            .collect();
        let want = [
            "content-type",
            "te",
            "x-forwarded-for",
            "x-forwarded-proto",
            "x-forwarded-host",
        ];
        assert_eq!(names, want);
        assert_eq!(c.request.headers()["te"], "trailers");
        assert_eq!(
            c.request.headers()["x-forwarded-for"],
            "10.0.0.1, 192.0.2.9"
        );
    }

    #[test]
    fn lengths_and_upgrades() {
        let head = b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n";
        let c = convert(head, "https").unwrap();
        assert_eq!(c.framing, Framing::Length(0));
        assert_eq!(c.request.uri().scheme_str(), Some("https"));
        let upgrade = b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\
            Connection: upgrade\r\n\r\n";
        assert!(convert(upgrade, "http").is_err());
    }

    fn response(builder: http::response::Builder, ended: bool, is_head: bool) -> UpstreamResponse {
        let (parts, ()) = builder.body(()).unwrap().into_parts();
        UpstreamResponse {
            parts,
            ended,
            is_head,
        }
    }

    #[test]
    fn a_response_head_is_read_into_the_model_from_its_parts() {
        let r = response(
            Response::builder()
                .status(200)
                .header("content-type", "text/plain")
                .header("set-cookie", "a")
                .header("set-cookie", "b"),
            false,
            false,
        );
        let mut storage = header_storage();
        let head = r.head(&mut storage, 8192).unwrap();
        assert_eq!((head.status, head.reason), (200, "OK"));
        // No length: the body reads come chunked.
        assert_eq!(head.framing, Framing::Chunked);
        assert!(head.reusable);
        let fields: Vec<(&str, &[u8])> = head.headers.iter().map(|h| (h.name, h.value)).collect();
        let want: [(&str, &[u8]); 3] = [
            ("content-type", b"text/plain"),
            ("set-cookie", b"a"),
            ("set-cookie", b"b"),
        ];
        assert_eq!(fields, want);
    }

    #[test]
    fn a_response_head_frames_its_body_as_http1_would() {
        let mut storage = header_storage();
        let sized = response(
            Response::builder().header("content-length", "12"),
            false,
            false,
        );
        assert_eq!(
            sized.head(&mut storage, 8192).unwrap().framing,
            Framing::Length(12)
        );
        let ended = response(Response::builder().status(404), true, false);
        assert_eq!(
            ended.head(&mut storage, 8192).unwrap().framing,
            Framing::Length(0)
        );
        let head = response(
            Response::builder().header("content-length", "9"),
            false,
            true,
        );
        let h = head.head(&mut storage, 8192).unwrap();
        assert_eq!((h.framing, h.declared_length), (Framing::Empty, Some(9)));
        let not_modified = response(Response::builder().status(304), false, false);
        assert_eq!(
            not_modified.head(&mut storage, 8192).unwrap().framing,
            Framing::Empty
        );
        let bad = response(
            Response::builder().header("content-length", "x"),
            false,
            false,
        );
        assert!(bad.head(&mut storage, 8192).is_err());
        let odd = response(Response::builder().status(700), true, false);
        assert!(odd.head(&mut storage, 8192).is_err());
        // As from an HTTP/1.1 server, a head beyond the limit is refused (the client gets 502).
        let big = response(
            Response::builder().header("set-cookie", "x".repeat(9000)),
            true,
            false,
        );
        assert_eq!(
            big.head(&mut storage, 8192).unwrap_err(),
            ResponseError::TooLarge
        );
    }
}
