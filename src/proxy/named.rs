//! A `try_files` fallback to a named location (`@name`), nginx's internal redirect: the
//! request is prepared again for that location of its site, with the client's head (its
//! path as the rules left it) and its body still unread, and answered by that location's
//! content. The location's own rules, access, `auth_request`, fields and error pages apply;
//! the site's rules, the choice of location and the limits do not run again (the limits
//! count a request once). An error page's request (which has its own head, no body) goes
//! the same way.

use super::request::{head_again, Prepared};
use super::rules::Entry;
use super::{error_page, Client, Ctx, Outcome, Tried};
use crate::error::{Error, Kind};
use crate::http1::request::header_storage;

/// Fallbacks to named locations one request may take (nginx's limit on internal
/// redirects); the next is a 500.
const MAX_HOPS: u8 = 10;

/// Answers the request at the named location with route index `route` of its site.
pub(super) async fn serve(
    cx: &Ctx<'_>,
    route: usize,
    client: &mut Client,
    buf: &mut Vec<u8>,
    tried: &mut Tried,
) -> Result<Outcome, Error> {
    let p = cx.request;
    if p.named_hops >= MAX_HOPS {
        return Err(Error::new(Kind::RewriteFailed));
    }
    let mut named = prepare(cx, route, client, buf)?;
    if let Some(auth) = super::serve::auth_request(cx.snapshot, &named) {
        // An internal redirect passes the access phase again, as nginx's does.
        let verdict = super::auth::authorize(&cx.for_request(&named), client, buf, auth).await;
        verdict.apply(&mut named, auth);
    }
    let ncx = cx.for_request(&named);
    let saved_head = error_page::keep_head(&ncx, client, buf);
    let mut own_tried = Tried::default();
    let result = match (&named.refused, &named.answer, named.route) {
        (Some(kind), _, _) => Err(Error::new(*kind)),
        (None, Some(answered), _) => super::rules::send_answer(&ncx, client, buf, answered).await,
        (None, None, route) => {
            super::serve::route_content(&ncx, route, client, buf, &mut own_tried).await
        }
    };
    ncx.end_try(&mut own_tried, result.is_ok());
    // The named location's error pages answer its failures (nginx's, not the first
    // location's).
    let page = result.as_ref().err().and_then(|e| {
        let code = error_page::failure_code(e)?;
        Some((code, error_page::page_for(&ncx, code)?))
    });
    let result = match page {
        Some((code, page)) => {
            let pending = (code, page, saved_head.as_deref());
            let (outcome, _) = error_page::serve(&ncx, client, buf, &mut own_tried, pending).await;
            Ok(outcome)
        }
        None => result,
    };
    tried.append(&own_tried);
    result
}

/// The request prepared for the named location: from the error page's head when it is one,
/// else the client's (in the read buffer, or carried by its HTTP/2 stream), with the path
/// the rules rewrote it to.
fn prepare(cx: &Ctx<'_>, route: usize, client: &Client, buf: &[u8]) -> Result<Prepared, Error> {
    let p = cx.request;
    let config = &cx.snapshot.config;
    let mut storage = header_storage();
    let head = match &p.page_head {
        Some(page) => crate::http1::parse_request(page, &mut storage, page.len())?
            .ok_or(Error::new(Kind::BadRequest("error page request")))?,
        None => head_again(client, buf, p.head_len, &mut storage)?,
    };
    let mut head = head;
    if let Some(target) = &p.rewritten {
        head.path = std::borrow::Cow::Owned(target.clone());
    }
    let https = !client.stream.tls_version().is_empty();
    let port = || client.stream.local_addr().map_or(0, |a| a.port());
    let peer = (
        client.peer,
        client.ip_text.as_bytes(),
        client.tls_client.as_deref(),
    );
    let entry = Entry::Named(route);
    let mut named = Prepared::new(&head, config, peer, (false, https), &port, entry);
    named.named_hops = p.named_hops + 1;
    named.status_override = p.status_override;
    named.error_page = p.error_page;
    if p.page_head.is_some() {
        // The client's head is drained by the error page's caller, once.
        named.head_len = 0;
        named.page_head = p.page_head.clone();
        named.keep_alive = p.keep_alive;
    }
    let mut fields = p.response_fields.clone();
    fields.extend_from_slice(&named.response_fields);
    named.response_fields = crate::http1::response::distinct_fields(&fields);
    Ok(named)
}
