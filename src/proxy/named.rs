//! A `try_files` fallback to a named location (`@name`), nginx's internal redirect: the
//! request is prepared again for that location of its site, with the client's head and its
//! body still unread, and answered by that location's content. The location's own rules,
//! access, `auth_request` and fields apply; the site's rules, the choice of location and the
//! limits do not run again (the limits count a request once).

use super::request::{head_again, Prepared};
use super::rules::Entry;
use super::{Client, Ctx, Outcome, Tried};
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
    let config = &cx.snapshot.config;
    let mut named = {
        let mut storage = header_storage();
        let head = head_again(client, buf, p.head_len, &mut storage)?;
        let https = !client.stream.tls_version().is_empty();
        let port = || client.stream.local_addr().map_or(0, |a| a.port());
        let peer = (client.peer, client.ip_text.as_bytes());
        let entry = Entry::Named(route);
        Prepared::new(&head, config, peer, (false, https), &port, entry)
    };
    named.named_hops = p.named_hops + 1;
    named.status_override = p.status_override;
    named.error_page = p.error_page;
    let mut fields = p.response_fields.clone();
    fields.extend_from_slice(&named.response_fields);
    named.response_fields = crate::http1::response::distinct_fields(&fields);
    if let Some(auth) = super::serve::auth_request(cx.snapshot, &named) {
        // An internal redirect passes the access phase again, as nginx's does.
        let verdict = super::auth::authorize(&cx.for_request(&named), client, buf, auth).await;
        verdict.apply(&mut named, auth);
    }
    let ncx = cx.for_request(&named);
    let mut own_tried = Tried::default();
    let result = match (&named.refused, &named.answer, named.route) {
        (Some(kind), _, _) => Err(Error::new(*kind)),
        (None, Some(answered), _) => super::rules::send_answer(&ncx, client, buf, answered).await,
        (None, None, route) => {
            super::serve::route_content(&ncx, route, client, buf, &mut own_tried).await
        }
    };
    ncx.end_try(&mut own_tried, result.is_ok());
    tried.append(&own_tried);
    result
}
