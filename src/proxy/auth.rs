//! Phase 2c, forward auth (nginx's `auth_request`): before a route's content, the request is
//! asked of an authorization service: a `GET` of the configured path carrying the client's
//! fields (cookies, Authorization) but no body, and `X-Original-URI`, `X-Original-Method`
//! and `X-Forwarded-*` saying what was asked. A 2xx lets the request through, with the
//! fields the route copies from the answer set on the request sent on; 401 (with the
//! service's `WWW-Authenticate`) and 403 are answered as they are; anything else, or a
//! service that cannot be reached, is a 500. The service's connections are pooled like any
//! upstream's.

use super::exchange::{on_connection, pick};
use super::request::{head_again, Prepared};
use super::{Client, Ctx, Tried};
use crate::error::{Error, Kind};
use crate::http1::request::header_storage;
use crate::http1::{parse_response, Framing};
use crate::message::RequestHead;
use crate::net::io::{read_some, write_all};
use crate::observe::metrics::Counter;
use crate::routing::UpstreamTarget;
use crate::rules::auth::AuthRequest;

/// The fields the subrequest sets itself (besides Host and X-Forwarded-For, -Proto, -Host,
/// which no client's field reaches).
const OWN_FIELDS: [&str; 4] = [
    "x-original-uri",
    "x-original-method",
    "x-forwarded-method",
    "x-forwarded-uri",
];

/// The largest answer body read to keep the service's connection (a longer one closes it).
const KEPT_BODY: u64 = 64 * 1024;

/// Asks the service whether `request` may go on, and marks it: refused (with the fields the
/// client gets), or with the copied fields set on its upstream head.
pub(super) async fn authorize(
    cx: &Ctx<'_>,
    client: &mut Client,
    buf: &[u8],
    auth: &AuthRequest,
) -> Verdict {
    match ask(cx, client, buf, auth).await {
        Ok(v) => v,
        Err(e) => {
            let conn = super::serve::ConnId(cx.worker.id, client.id);
            tracing::warn!(%conn, peer = %client.peer, "auth_request failed: {e}");
            cx.worker.counters.inc(Counter::AuthFailures);
            Verdict::Refused(Kind::AuthFailed, Vec::new())
        }
    }
}

/// What the service said.
pub(super) enum Verdict {
    /// Go on, with these field lines set on the request sent on.
    Pass(Vec<u8>),
    /// Refused: the failure to answer, and field lines for the answer.
    Refused(Kind, Vec<u8>),
}

impl Verdict {
    /// Applies the verdict to the request.
    pub(super) fn apply(self, request: &mut Prepared, auth: &AuthRequest) {
        match self {
            Verdict::Pass(lines) => {
                // The client never sets what the service vouches for.
                let names: Vec<&str> = auth.copy.iter().map(|c| c.to.as_str()).collect();
                let head = &mut request.upstream_head;
                if !head.is_empty() {
                    crate::http1::response::remove_fields(head, 0, &names);
                    crate::http1::response::add_fields(head, 0, &lines);
                }
            }
            Verdict::Refused(Kind::AccessDenied, _) if !request.challenge.is_empty() => {
                // `satisfy any`: the users asked for credentials; a 401 is not replaced by a
                // later 403 (nginx).
                request.refused = Some(Kind::Unauthorized);
                let challenge = std::mem::take(&mut request.challenge);
                request.response_fields.extend_from_slice(&challenge);
            }
            Verdict::Refused(kind, lines) => {
                request.refused = Some(kind);
                request.response_fields.extend_from_slice(&lines);
            }
        }
    }
}

/// The field lines the service's answer passes on: a 2xx's copies, under the names they go
/// on under (one field may be copied twice), or a 401's challenge.
fn answer_fields(head: &crate::message::ResponseHead<'_, '_>, auth: &AuthRequest) -> Vec<u8> {
    let wanted = |name: &str| -> Vec<&str> {
        match head.status {
            200..=299 => auth
                .copy
                .iter()
                .filter(|c| name.eq_ignore_ascii_case(&c.from))
                .map(|c| c.to.as_str())
                .collect(),
            401 if name.eq_ignore_ascii_case("www-authenticate") => vec!["WWW-Authenticate"],
            _ => Vec::new(),
        }
    };
    let mut lines = Vec::new();
    let copies = head
        .headers
        .iter()
        .flat_map(|f| wanted(f.name).into_iter().map(move |name| (f, name)));
    for (f, name) in copies {
        lines.extend_from_slice(name.as_bytes());
        lines.extend_from_slice(b": ");
        lines.extend_from_slice(f.value);
        lines.extend_from_slice(b"\r\n");
    }
    lines
}

async fn ask(
    cx: &Ctx<'_>,
    client: &mut Client,
    buf: &[u8],
    auth: &AuthRequest,
) -> Result<Verdict, Error> {
    let group = &cx.config().upstreams[auth.upstream];
    let text = {
        let mut storage = header_storage();
        // An error page's request reads its own head.
        let head = match &cx.request.page_head {
            Some(page) => crate::http1::parse_request(page, &mut storage, page.len())?
                .ok_or(Error::new(Kind::BadRequest("error page request")))?,
            None => head_again(client, buf, cx.request.head_len, &mut storage)?,
        };
        subrequest(&head, auth, client, cx.request.real_ip)
    };
    let mut tried = Tried::default();
    let lease = pick(cx, UpstreamTarget::to(auth.upstream), &mut tried)?;
    let max = cx.config().limits.max_request_head.max(8192);
    let (mut conn, mut ubuf) = on_connection(cx, group, &lease, client, true, async |c, conn| {
        write_all(&mut conn.stream, &[&text], group.send_timeout)
            .await
            .map_err(|e| Error::no_response(&e))?;
        let mut ubuf = Vec::with_capacity(4096);
        super::response::read_head(
            &mut conn.stream,
            &mut ubuf,
            &c.stream,
            group.read_timeout,
            max,
        )
        .await?;
        Ok(ubuf)
    })
    .await?;
    let (status, lines, body) = {
        let mut storage = header_storage();
        let Some(head) = parse_response(&ubuf, &mut storage, max, false)? else {
            return Err(Error::new(Kind::BadResponse(
                "auth response head too large",
            )));
        };
        let lines = answer_fields(&head, auth);
        // An interim answer's connection is never kept: its final answer would be the next
        // question's.
        let body = match head.framing {
            _ if head.status < 200 => None,
            Framing::Length(n) if head.reusable && n <= KEPT_BODY => {
                Some(head.head_len + n as usize)
            }
            Framing::Empty if head.reusable => Some(head.head_len),
            _ => None,
        };
        (head.status, lines, body)
    };
    lease.succeeded();
    // The answer's body is read (small) to keep the connection, else the connection closes.
    if let Some(end) = body {
        while ubuf.len() < end {
            let read = read_some(&mut conn.stream, &mut ubuf, end, group.read_timeout).await;
            if !matches!(read, Ok(n) if n > 0) {
                break;
            }
        }
        if ubuf.len() == end {
            conn.reuse(cx.worker, group);
        }
    }
    Ok(match status {
        200..=299 => Verdict::Pass(lines),
        401 | 403 => {
            cx.worker.counters.inc(Counter::AuthRefusals);
            let kind = if status == 401 {
                Kind::Unauthorized
            } else {
                Kind::AccessDenied
            };
            Verdict::Refused(kind, lines)
        }
        other => {
            let conn = super::serve::ConnId(cx.worker.id, client.id);
            tracing::warn!(%conn, peer = %client.peer, status = other, "auth_request: unexpected status");
            cx.worker.counters.inc(Counter::AuthFailures);
            Verdict::Refused(Kind::AuthFailed, Vec::new())
        }
    })
}

/// The service's request: `GET path`, the client's fields but those of a body, a connection
/// or forwarding, and what the client asked.
fn subrequest(
    head: &RequestHead<'_, '_>,
    auth: &AuthRequest,
    client: &Client,
    real_ip: Option<std::net::IpAddr>,
) -> Vec<u8> {
    let mut text = Vec::with_capacity(1024);
    text.extend_from_slice(b"GET ");
    text.extend_from_slice(auth.path.as_bytes());
    text.extend_from_slice(b" HTTP/1.1\r\n");
    let host = head.host.unwrap_or_default();
    let mut field = |name: &str, value: &[u8]| {
        text.extend_from_slice(name.as_bytes());
        text.extend_from_slice(b": ");
        text.extend_from_slice(value);
        text.extend_from_slice(b"\r\n");
    };
    if !host.is_empty() {
        field("Host", host);
    }
    // The fields that say what was asked are the proxy's alone: a client's of the same names
    // would be read first by some services.
    let own = |name: &str| OWN_FIELDS.iter().any(|o| name.eq_ignore_ascii_case(o));
    for f in head
        .headers
        .iter()
        .filter(|f| head.forwards(f.name) && !own(f.name))
    {
        field(f.name, f.value);
    }
    let https = !client.stream.tls_version().is_empty();
    let proto: &[u8] = if https { b"https" } else { b"http" };
    field("X-Original-URI", head.path.as_bytes());
    field("X-Original-Method", head.method.as_bytes());
    field("X-Forwarded-Method", head.method.as_bytes());
    field("X-Forwarded-Uri", head.path.as_bytes());
    field("X-Forwarded-Proto", proto);
    if !host.is_empty() {
        field("X-Forwarded-Host", host);
    }
    match real_ip {
        Some(ip) => field("X-Forwarded-For", ip.to_string().as_bytes()),
        None => field("X-Forwarded-For", client.ip_text.as_bytes()),
    }
    text.extend_from_slice(b"\r\n");
    text
}
