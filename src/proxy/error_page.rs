//! Phase 8, error pages (nginx's `error_page`): when a request's answer has a code its
//! policy's `error_pages` list (the proxy's own failures, a rule's bare `return`, and with
//! `intercept_errors` the upstream's), a page is served in its place: a path routed again as
//! a `GET` (a `HEAD` stays one; `internal` routes are reachable), a named location with the
//! request's method, or a redirect to a URL. The page goes out under the code it replaces
//! unless its entry says otherwise. One page per request, as nginx without
//! `recursive_error_pages`: a page that fails is answered as any failure is.
//!
//! The page's request is the client's head with the page's path and method, without a body
//! (no Content-Length, Transfer-Encoding or Expect) and without the fields that would make a
//! file answer partial or `304` (`Range`, `If-*`). A body the client sent is never passed to
//! the page; the connection then closes after it, as after any answer whose body was not
//! read. After an upstream was tried the read buffer no longer holds the head, so a route
//! with error pages that may go upstream keeps a copy of it ([`keep_head`]).

use super::request::{head_again, Prepared};
use super::rules::{Answered, Entry};
use super::{Client, Ctx, Outcome, Tried};
use crate::error::{Error, Kind};
use crate::http1::request::header_storage;
use crate::http1::{parse_request, Framing};
use crate::message::RequestHead;
use crate::observe::metrics::Counter;
use crate::rules::error_page::{find, ErrorPage, ErrorStatus, ErrorTarget};
use crate::rules::Answer;

/// The error page replacing an answer of `code` to the request, if any.
pub(super) fn page_for<'c>(cx: &Ctx<'c>, code: u16) -> Option<&'c ErrorPage> {
    let p = cx.request;
    if p.error_page || p.grpc.is_some() {
        return None;
    }
    let policy = cx.snapshot.config.router.policy(p.routed.policy?);
    find(&policy.error_pages, code)
}

/// Whether an upstream's answer of `status` is replaced (`intercept_errors`).
pub(super) fn intercepts(cx: &Ctx<'_>, status: u16) -> bool {
    cx.request.intercepts && page_for(cx, status).is_some()
}

/// The code of a rule's answer that an error page replaces: a bare `return` of 400 or more
/// (with a text or a URL, the rule's answer is the page).
pub(super) fn replaced_answer(cx: &Ctx<'_>, answered: &Answered) -> Option<u16> {
    let a = &answered.answer;
    let bare = a.body.is_none() && a.location.is_none() && a.status >= 400 && a.status != 444;
    (bare && page_for(cx, a.status).is_some()).then_some(a.status)
}

/// The code of a failure an error page could replace: none once a response has started or
/// when the client left.
pub(super) fn failure_code(e: &Error) -> Option<u16> {
    e.answer().send
}

/// A copy of the request's head, for a route with error pages whose content may go upstream
/// (which frees the read buffer); an HTTP/2 stream keeps its request, and needs none.
pub(super) fn keep_head(cx: &Ctx<'_>, client: &Client, buf: &[u8]) -> Option<Vec<u8>> {
    let p = cx.request;
    let policy = cx.snapshot.config.router.policy(p.routed.policy?);
    let config = &cx.snapshot.config;
    let needed = !policy.error_pages.is_empty()
        && (p.upstream.is_some() || super::request::may_go_to_named(config, p.route))
        && !p.error_page
        && client.stream.carried_request().is_none();
    needed.then(|| buf[..p.head_len.min(buf.len())].to_vec())
}

/// Serves `page` in place of an answer of `code`; returns how the request ended and whether
/// the proxy made its status (a failure of the page's own).
pub(super) async fn serve(
    cx: &Ctx<'_>,
    client: &mut Client,
    buf: &mut Vec<u8>,
    tried: &mut Tried,
    (code, page, saved): (u16, &ErrorPage, Option<&[u8]>),
) -> (Outcome, bool) {
    cx.worker.counters.inc(Counter::ErrorPages);
    let p = cx.request;
    // Until an upstream is tried the read buffer starts with the request's head; a request
    // whose body was not read cannot be followed by another on the connection.
    let head_in_buffer = tried.len() == 0;
    let keep_alive = p.keep_alive && p.framing == Framing::Empty && head_in_buffer;
    let page_request = match page_request(cx, client, (buf, saved), page, keep_alive) {
        Ok(r) => r,
        Err(e) => return (super::serve::answer_failure(cx, client, buf, e).await, true),
    };
    let mut page_request = page_request;
    // What the original answer had to say (a challenge, Retry-After, CORS) the page says too.
    let mut fields = p.response_fields.clone();
    fields.extend_from_slice(&page_request.response_fields);
    page_request.response_fields = crate::http1::response::distinct_fields(&fields);
    if let Some(auth) = super::serve::auth_request(cx.snapshot, &page_request) {
        // An internal redirect passes the access phase again, as nginx's does.
        let verdict =
            super::auth::authorize(&cx.for_request(&page_request), client, buf, auth).await;
        verdict.apply(&mut page_request, auth);
    }
    page_request.status_override = match (&page.target, page.status) {
        // A redirect's status is its own (302, or the 3xx given).
        (ErrorTarget::Redirect(_), _) | (_, ErrorStatus::Page) => None,
        (_, ErrorStatus::Keep) => Some(code),
        (_, ErrorStatus::Set(s)) => Some(s),
    };
    let pcx = cx.for_request(&page_request);
    // The page may go to a server the request tried: its tries are its own.
    let mut page_tried = Tried::default();
    let result = match (
        &page_request.refused,
        &page_request.answer,
        page_request.route,
    ) {
        (Some(kind), _, _) => Err(Error::new(*kind)),
        (None, Some(answered), _) => super::rules::send_answer(&pcx, client, buf, answered).await,
        (None, None, route) => {
            super::serve::route_content(&pcx, route, client, buf, &mut page_tried).await
        }
    };
    pcx.end_try(&mut page_tried, result.is_ok());
    tried.append(&page_tried);
    let (outcome, generated) = match result {
        Ok(o) => (o, false),
        Err(e) => (
            super::serve::answer_failure(&pcx, client, buf, e).await,
            true,
        ),
    };
    if outcome.keep_alive {
        // The page's request had no head in the buffer: the client's is drained here.
        buf.drain(..p.head_len.min(buf.len()));
    }
    (outcome, generated)
}

/// The page's request: a redirect to a URL as a rule's answer, else the client's head with
/// the page's path (and `GET`) or for a named location as it was, routed again.
fn page_request(
    cx: &Ctx<'_>,
    client: &Client,
    (buf, saved): (&[u8], Option<&[u8]>),
    page: &ErrorPage,
    keep_alive: bool,
) -> Result<Prepared, Error> {
    let p = cx.request;
    let config = &cx.snapshot.config;
    let source = saved.unwrap_or(buf);
    let head_len = if saved.is_some() {
        source.len()
    } else {
        p.head_len
    };
    let mut storage = header_storage();
    let head = head_again(client, source, head_len, &mut storage)?;
    let (path, method, entry) = match &page.target {
        ErrorTarget::Path { path, query } => {
            let target = match query {
                Some(q) => format!("{path}?{q}"),
                None => path.clone(),
            };
            let method = if head.method == "HEAD" { "HEAD" } else { "GET" };
            (target, method, Entry::Redirect)
        }
        ErrorTarget::Named(name) => {
            let site = p.routed.site.map(usize::from);
            let route = site.and_then(|s| config.router.named(s, name));
            // Checked at load; a site chosen by another Host has no such location.
            let route = route.ok_or(Error::new(Kind::NoRoute))?;
            (head.path.to_string(), head.method, Entry::Named(route))
        }
        // Routed as it came (its fields are its route's); the answer is set below.
        ErrorTarget::Redirect(_) => (head.path.to_string(), head.method, Entry::Redirect),
    };
    let text = page_head_text(&head, &path, method);
    let mut storage = header_storage();
    let Ok(Some(mut page_head)) = parse_request(&text, &mut storage, text.len()) else {
        return Err(Error::new(Kind::BadRequest("error page request")));
    };
    page_head.keep_alive = keep_alive;
    let https = !client.stream.tls_version().is_empty();
    let port = || client.stream.local_addr().map_or(0, |a| a.port());
    let peer = (
        client.peer,
        client.ip_text.as_bytes(),
        client.tls_client.as_deref(),
    );
    let mut prepared = Prepared::new(&page_head, config, peer, (false, https), &port, entry);
    if let ErrorTarget::Redirect(url) = &page.target {
        let status = match page.status {
            ErrorStatus::Set(s) => s,
            _ => 302,
        };
        prepared.refused = None;
        prepared.route = None;
        prepared.answer = Some(Box::new(Answered {
            answer: Answer {
                status,
                location: Some(url.clone()),
                body: None,
            },
            host: String::new(),
            path: String::new(),
        }));
    }
    // The client's head is drained by the caller, once.
    prepared.head_len = 0;
    prepared.page_head = Some(text);
    Ok(prepared)
}

/// The page's request head as HTTP/1.1 text: `method path`, the client's fields but those
/// of a body and of conditional or partial requests, and the host as a field.
fn page_head_text(head: &RequestHead<'_, '_>, path: &str, method: &str) -> Vec<u8> {
    // No body, no conditional or partial answer, no protocol switch.
    const DROPPED: [&str; 8] = [
        "content-length",
        "transfer-encoding",
        "expect",
        "range",
        "host",
        "upgrade",
        "connection",
        "http2-settings",
    ];
    let mut text = Vec::with_capacity(512);
    text.extend_from_slice(method.as_bytes());
    text.push(b' ');
    text.extend_from_slice(path.as_bytes());
    text.extend_from_slice(if head.minor_version == 0 {
        b" HTTP/1.0\r\n"
    } else {
        b" HTTP/1.1\r\n"
    });
    if let Some(host) = head.host {
        text.extend_from_slice(b"Host: ");
        text.extend_from_slice(host);
        text.extend_from_slice(b"\r\n");
    }
    for f in head.headers {
        let dropped = DROPPED.iter().any(|d| f.name.eq_ignore_ascii_case(d))
            || f.name.len() > 3 && f.name[..3].eq_ignore_ascii_case("if-");
        if dropped {
            continue;
        }
        text.extend_from_slice(f.name.as_bytes());
        text.extend_from_slice(b": ");
        text.extend_from_slice(f.value);
        text.extend_from_slice(b"\r\n");
    }
    text.extend_from_slice(b"\r\n");
    text
}
