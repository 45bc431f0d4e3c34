//! The HTTP side of a static file, without I/O: which representation (the file or a
//! precompressed sibling), which status (200, 206, 304, 412, 416, 405), the response head, and
//! which bytes make the body. The caller sends what the [`Plan`] says.

use super::cache::{CachedFile, Representation, CODINGS};
use super::conditional::{evaluate, if_range_allows, Conditions, Precondition};
use super::range::{parse_range, ByteRange, Ranges};
use crate::config::FileRoute;
use crate::http1::accept::{accepted_codings, Codings};
pub use crate::http1::date::http_date_now;
use crate::http1::date::put_date;
use crate::http1::put_decimal;
use crate::http1::response::{put_status_line, reason_phrase};
use crate::message::{has_no_body, ClientHead, Framing, RequestHead};

/// A request's method as static serving sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// GET.
    Get,
    /// HEAD: the head of the GET response, no body.
    Head,
    /// Anything else: 405 for a file.
    Other,
}

/// The request fields static serving reads, copied out of the read buffer.
#[derive(Debug, Clone)]
pub struct FileRequest {
    /// The method.
    pub method: Method,
    /// The request target as sent (`/a%20b?q`).
    pub target: String,
    /// `If-Match`.
    pub if_match: Option<Vec<u8>>,
    /// `If-None-Match`.
    pub if_none_match: Option<Vec<u8>>,
    /// `If-Modified-Since`.
    pub if_modified_since: Option<Vec<u8>>,
    /// `If-Unmodified-Since`.
    pub if_unmodified_since: Option<Vec<u8>>,
    /// `Range`.
    pub range: Option<Vec<u8>>,
    /// `If-Range`.
    pub if_range: Option<Vec<u8>>,
    /// The codings of `Accept-Encoding`.
    pub codings: Codings,
    /// HTTP/1.0 client (keep-alive must then be announced).
    pub http10: bool,
    /// `Accept` names `application/json`: a directory listing is sent as JSON.
    pub accept_json: bool,
}

impl FileRequest {
    /// Copies what static serving needs out of a parsed head.
    pub fn from_head(head: &RequestHead<'_, '_>) -> FileRequest {
        let mut r = FileRequest {
            method: match head.method {
                "GET" => Method::Get,
                "HEAD" => Method::Head,
                _ => Method::Other,
            },
            target: head.path.to_string(),
            if_match: None,
            if_none_match: None,
            if_modified_since: None,
            if_unmodified_since: None,
            range: None,
            if_range: None,
            codings: Codings::default(),
            http10: head.minor_version == 0,
            accept_json: false,
        };
        let mut accept = Vec::new();
        for h in head.headers {
            let name = h.name;
            // List fields (If-Match, If-None-Match) combine when repeated; for the others the
            // first is kept.
            let (slot, list) = if name.eq_ignore_ascii_case("range") {
                (&mut r.range, false)
            } else if name.eq_ignore_ascii_case("if-match") {
                (&mut r.if_match, true)
            } else if name.eq_ignore_ascii_case("if-range") {
                (&mut r.if_range, false)
            } else if name.eq_ignore_ascii_case("if-none-match") {
                (&mut r.if_none_match, true)
            } else if name.eq_ignore_ascii_case("if-modified-since") {
                (&mut r.if_modified_since, false)
            } else if name.eq_ignore_ascii_case("if-unmodified-since") {
                (&mut r.if_unmodified_since, false)
            } else {
                if name.eq_ignore_ascii_case("accept-encoding") {
                    accept.push(h.value);
                } else if name.eq_ignore_ascii_case("accept") {
                    r.accept_json |= crate::files::listing::wants_json(Some(h.value));
                }
                continue;
            };
            match slot {
                Some(v) if list => {
                    v.extend_from_slice(b", ");
                    v.extend_from_slice(h.value);
                }
                Some(_) => {}
                None => *slot = Some(h.value.to_vec()),
            }
        }
        r.codings = accepted_codings(accept);
        r
    }
}

/// What to send for a file.
#[derive(Debug)]
pub struct Plan<'e> {
    /// The status.
    pub status: u16,
    /// The whole response head.
    pub head: ClientHead,
    /// The representation the body comes from.
    pub representation: &'e Representation,
    /// The body.
    pub body: Body,
}

/// The body of a file response.
#[derive(Debug)]
pub enum Body {
    /// No body (HEAD, 304, or an empty file).
    Empty,
    /// Bytes made here (the text of 405, 412, 416).
    Text(Vec<u8>),
    /// `len` bytes of the representation from `offset`.
    Range {
        /// First byte.
        offset: u64,
        /// Bytes to send.
        len: u64,
    },
    /// multipart/byteranges: each part's head and range, then the closing delimiter.
    Multipart {
        /// Part heads with their ranges.
        parts: Vec<(Vec<u8>, ByteRange)>,
        /// The closing delimiter.
        tail: Vec<u8>,
    },
}

impl Body {
    /// Bytes the body holds.
    pub fn len(&self) -> u64 {
        match self {
            Body::Empty => 0,
            Body::Text(t) => t.len() as u64,
            Body::Range { len, .. } => *len,
            Body::Multipart { parts, tail } => {
                let parts: u64 = parts.iter().map(|(h, r)| h.len() as u64 + r.len()).sum();
                parts + tail.len() as u64
            }
        }
    }

    /// Whether the body is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How the response head ends: the connection decision.
#[derive(Debug, Clone, Copy)]
pub struct KeepAlive {
    /// The connection stays open.
    pub keep_alive: bool,
    /// The client speaks HTTP/1.0 (keep-alive is then announced).
    pub http10: bool,
}

/// Decides the response for `entry`.
pub fn plan<'e>(
    entry: &'e CachedFile,
    req: &FileRequest,
    route: &FileRoute,
    framing: KeepAlive,
) -> Plan<'e> {
    let rep = choose(entry, req.codings, route.precompressed);
    let vary = route.precompressed && entry.has_siblings();
    let mut h = HeadWriter::new(framing);
    let allowed = matches!(req.method, Method::Get | Method::Head);
    if !allowed {
        let text = h.text(405);
        h.field("Allow", b"GET, HEAD");
        return h.finish_text(text, rep, req);
    }
    let conditions = Conditions {
        if_match: req.if_match.as_deref(),
        if_none_match: req.if_none_match.as_deref(),
        if_modified_since: req.if_modified_since.as_deref(),
        if_unmodified_since: req.if_unmodified_since.as_deref(),
    };
    match evaluate(&conditions, &rep.validators, true) {
        Precondition::Proceed => {}
        Precondition::Failed => {
            let text = h.text(412);
            return h.finish_text(text, rep, req);
        }
        Precondition::NotModified => {
            h.status(304);
            h.raw(&rep.fields);
            h.cache_fields(route, vary);
            return h.finish(rep, Body::Empty);
        }
    }
    let ranges = match (&req.range, req.method) {
        (Some(range), Method::Get) => {
            let applies = req
                .if_range
                .as_deref()
                .is_none_or(|v| if_range_allows(v, &rep.validators));
            if applies {
                parse_range(range, rep.size)
            } else {
                Ranges::Whole
            }
        }
        _ => Ranges::Whole,
    };
    let content_type = entry.content_type.as_bytes();
    let body = match ranges {
        Ranges::Whole => {
            h.status(200);
            h.field("Content-Type", content_type);
            h.length(rep.size);
            Body::Range {
                offset: 0,
                len: rep.size,
            }
        }
        Ranges::One(r) => {
            h.status(206);
            h.field("Content-Type", content_type);
            h.length(r.len());
            h.field("Content-Range", content_range(Some(r), rep.size).as_bytes());
            Body::Range {
                offset: r.start,
                len: r.len(),
            }
        }
        Ranges::Many(list) => {
            let boundary = format!("{:016x}", fastrand::u64(..));
            let body = multipart(&list, &boundary, content_type, rep.size);
            h.status(206);
            let ty = format!("multipart/byteranges; boundary={boundary}");
            h.field("Content-Type", ty.as_bytes());
            h.length(body.len());
            body
        }
        Ranges::Unsatisfiable => {
            let text = h.text(416);
            h.field("Content-Range", content_range(None, rep.size).as_bytes());
            return h.finish_text(text, rep, req);
        }
    };
    h.raw(&rep.fields);
    h.field("Accept-Ranges", b"bytes");
    h.cache_fields(route, vary);
    let body = if req.method == Method::Head || body.is_empty() {
        Body::Empty
    } else {
        body
    };
    h.finish(rep, body)
}

/// The representation to send: the first precompressed sibling the client accepts, else the
/// file.
fn choose(entry: &CachedFile, codings: Codings, precompressed: bool) -> &Representation {
    if precompressed {
        for ((coding, _), sibling) in CODINGS.iter().zip(&entry.siblings) {
            if let Some(s) = sibling {
                if codings.accepts(coding) {
                    return s;
                }
            }
        }
    }
    &entry.identity
}

fn content_range(r: Option<ByteRange>, size: u64) -> String {
    match r {
        Some(r) => format!("bytes {}-{}/{size}", r.start, r.end),
        None => format!("bytes */{size}"),
    }
}

fn multipart(list: &[ByteRange], boundary: &str, content_type: &[u8], size: u64) -> Body {
    let parts = list
        .iter()
        .map(|r| {
            let mut head = Vec::with_capacity(96);
            head.extend_from_slice(b"\r\n--");
            head.extend_from_slice(boundary.as_bytes());
            head.extend_from_slice(b"\r\nContent-Type: ");
            head.extend_from_slice(content_type);
            head.extend_from_slice(b"\r\nContent-Range: ");
            head.extend_from_slice(content_range(Some(*r), size).as_bytes());
            head.extend_from_slice(b"\r\n\r\n");
            (head, *r)
        })
        .collect();
    Body::Multipart {
        parts,
        tail: format!("\r\n--{boundary}--\r\n").into_bytes(),
    }
}

/// Writes a response head.
struct HeadWriter {
    out: Vec<u8>,
    framing: KeepAlive,
    status: u16,
    /// The body's length, once written.
    length: Option<u64>,
}

impl HeadWriter {
    fn new(framing: KeepAlive) -> HeadWriter {
        HeadWriter {
            out: Vec::with_capacity(320),
            framing,
            status: 0,
            length: None,
        }
    }

    fn status(&mut self, status: u16) {
        self.status = status;
        put_status_line(&mut self.out, 1, status, None);
        self.out.extend_from_slice(b"Server: slipstream\r\n");
        put_date(&mut self.out);
    }

    /// A text response of `status`: its status line, type and length; returns the text.
    fn text(&mut self, status: u16) -> Vec<u8> {
        let text = format!("{status} {}\n", reason_phrase(status)).into_bytes();
        self.status(status);
        self.field("Content-Type", b"text/plain");
        self.length(text.len() as u64);
        text
    }

    fn field(&mut self, name: &str, value: &[u8]) {
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(b": ");
        self.out.extend_from_slice(value);
        self.out.extend_from_slice(b"\r\n");
    }

    fn length(&mut self, n: u64) {
        self.length = Some(n);
        self.out.extend_from_slice(b"Content-Length: ");
        put_decimal(&mut self.out, n);
        self.out.extend_from_slice(b"\r\n");
    }

    fn raw(&mut self, fields: &[u8]) {
        self.out.extend_from_slice(fields);
    }

    fn cache_fields(&mut self, route: &FileRoute, vary: bool) {
        if vary {
            self.field("Vary", b"Accept-Encoding");
        }
        if let Some(cc) = &route.cache_control {
            self.field("Cache-Control", cc.as_bytes());
        }
    }

    fn finish_text<'e>(
        self,
        text: Vec<u8>,
        rep: &'e Representation,
        req: &FileRequest,
    ) -> Plan<'e> {
        let body = if req.method == Method::Head {
            Body::Empty
        } else {
            Body::Text(text)
        };
        self.finish(rep, body)
    }

    fn finish<'e>(self, rep: &'e Representation, body: Body) -> Plan<'e> {
        let status = self.status;
        Plan {
            status,
            head: self.finish_head(),
            representation: rep,
            body,
        }
    }

    fn finish_head(mut self) -> ClientHead {
        if !self.framing.keep_alive {
            self.out.extend_from_slice(b"Connection: close\r\n");
        } else if self.framing.http10 {
            self.out.extend_from_slice(b"Connection: keep-alive\r\n");
        }
        self.out.extend_from_slice(b"\r\n");
        let framing = self.length.map_or(Framing::Empty, Framing::Length);
        ClientHead::new(self.status, framing, self.out)
    }
}

/// A response made here rather than from a file (a redirect, a listing, a `try_files`
/// status): its status, extra fields and body, for `method`. Returns the head and the body.
pub fn simple(
    status: u16,
    fields: &[(&str, &[u8])],
    body: Option<(&[u8], Vec<u8>)>,
    method: Method,
    framing: KeepAlive,
) -> (ClientHead, Vec<u8>) {
    let mut h = HeadWriter::new(framing);
    let (content_type, text) = match body {
        Some((ty, text)) => (ty, text),
        None => (
            b"text/plain".as_slice(),
            format!("{status} {}\n", reason_phrase(status)).into_bytes(),
        ),
    };
    h.status(status);
    for (name, value) in fields {
        h.field(name, value);
    }
    if has_no_body(status, false) {
        // A 204 or 304 (`try_files ... =204`): no body, so no length or type either.
        return (h.finish_head(), Vec::new());
    }
    h.field("Content-Type", content_type);
    h.length(text.len() as u64);
    let plan_head = h.finish_head();
    let text = if method == Method::Head {
        Vec::new()
    } else {
        text
    };
    (plan_head, text)
}
