//! What a request brings to its route's cache, gathered while its head is in hand: the key,
//! the fields `Vary` and the conditionals read, its `Cache-Control`, the `bypass` and
//! `no_store` conditions; and the request sent upstream made fit to be stored (no client
//! conditionals or Range, HEAD asked as GET: the cache answers those itself).

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use crate::cache::control::Directives;
use crate::cache::zone::hash_key;
use crate::cache::{CacheRequest, CacheRule, Method};
use crate::message::RequestHead;
use crate::rules::template::{Current, Facts};

/// The client's fields the cache answers itself: never sent upstream on a cached route.
const ANSWERED_HERE: [&str; 6] = [
    "if-none-match",
    "if-modified-since",
    "if-match",
    "if-unmodified-since",
    "if-range",
    "range",
];

/// Who is asking, as the key's variables see it.
pub(in crate::proxy) struct Asker<'a> {
    pub(in crate::proxy) https: bool,
    pub(in crate::proxy) ip_text: &'a str,
    pub(in crate::proxy) server_name: &'a str,
    pub(in crate::proxy) local_port: &'a dyn Fn() -> u16,
    pub(in crate::proxy) maps: &'a [crate::rules::map::Map],
    pub(in crate::proxy) tls_client: Option<&'a crate::tls::client_auth::ClientCert>,
}

/// For an unsafe method under a key with `$request_method` in it (nginx's WordPress idiom):
/// the keys a GET and a HEAD of the target were stored under, which its success invalidates.
fn keys_of_safe_methods(
    rule: &CacheRule,
    key: &str,
    facts: &Facts<'_>,
    current: &Current,
) -> Vec<String> {
    let mut keys = Vec::new();
    if let (Some(t), Method::Unsafe) = (&rule.key, Method::of(facts.method)) {
        for method in ["GET", "HEAD"] {
            let safe = Facts { method, ..*facts };
            let k = t.to_string(&safe, current);
            if k != key && !keys.contains(&k) {
                keys.push(k);
            }
        }
    }
    keys
}

/// The default key, `$scheme://$host$request_uri`, made without formatting.
fn default_key(scheme: &str, host: &str, target: &str) -> String {
    let parts = [scheme, "://", host, target];
    let mut key = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    parts.iter().for_each(|p| key.push_str(p));
    key
}

/// The request's side of caching under `rule`.
pub(in crate::proxy) fn cache_request(
    head: &RequestHead<'_, '_>,
    rule: &Arc<CacheRule>,
    asker: &Asker<'_>,
) -> Box<CacheRequest> {
    let mut host_buf = [0u8; 256];
    let host = head
        .host
        .and_then(|h| crate::routing::normalize_host(h, &mut host_buf))
        .unwrap_or("");
    let facts = Facts {
        method: head.method,
        request_uri: &head.path,
        host,
        scheme: if asker.https { "https" } else { "http" },
        server_name: asker.server_name,
        server_port: asker.local_port,
        remote_addr: asker.ip_text,
        headers: head.headers,
        maps: asker.maps,
        host_captures: None,
        tls_client: asker.tls_client,
    };
    let (path, args) = head.path.split_once('?').unwrap_or((&head.path, ""));
    // Made only for a rule whose texts have variables (the default key has none).
    let current = std::cell::LazyCell::new(|| Current {
        uri: path.to_string(),
        args: args.to_string(),
        captures: None,
        rewrites: 0,
    });
    let key = match &rule.key {
        Some(t) => t.to_string(&facts, &current),
        None => default_key(facts.scheme, host, &head.path),
    };
    let origin_len = rule
        .key
        .is_none()
        .then(|| facts.scheme.len() + 3 + host.len());
    let stored_as = keys_of_safe_methods(rule, &key, &facts, &current);
    let holds = |list: &[crate::rules::template::Template]| {
        list.iter().any(|t| {
            let v = t.to_string(&facts, &current);
            !v.is_empty() && v != "0"
        })
    };
    let mut fields = Vec::with_capacity(256);
    fields.extend_from_slice(b"GET / HTTP/1.1\r\n");
    let mut cache_control = Vec::new();
    let mut authorization = false;
    let mut pragma_no_cache = false;
    let mut asks_part_or_validation = false;
    for h in head.headers {
        asks_part_or_validation |= answered_here(h.name);
        fields.extend_from_slice(h.name.as_bytes());
        fields.extend_from_slice(b": ");
        fields.extend_from_slice(h.value);
        fields.extend_from_slice(b"\r\n");
        if h.name.eq_ignore_ascii_case("cache-control") {
            cache_control.push(h.value);
        } else if h.name.eq_ignore_ascii_case("authorization") {
            authorization = true;
        } else if h.name.eq_ignore_ascii_case("pragma") {
            pragma_no_cache |=
                crate::message::list_elements(h.value).any(|e| e.eq_ignore_ascii_case(b"no-cache"));
        }
    }
    let mut directives = if rule.request_directives {
        Directives::parse(cache_control.iter().copied())
    } else {
        Directives::default()
    };
    // `Pragma: no-cache` counts only without a Cache-Control (RFC 9111 section 5.4).
    if rule.request_directives && cache_control.is_empty() && pragma_no_cache {
        directives.no_cache = true;
    }
    let method = match Method::of(head.method) {
        Method::Head if !rule.head => Method::Other,
        // A protocol switch (WebSocket) is never stored, nor waits behind another.
        _ if head.upgrade.is_some() => Method::Other,
        m => m,
    };
    Box::new(CacheRequest {
        rule: rule.clone(),
        hash: hash_key(&key),
        key,
        fields,
        asks_part_or_validation,
        directives,
        method,
        authorization,
        bypass: holds(&rule.bypass),
        no_store: holds(&rule.no_store),
        capture: Cell::new(false),
        validators: RefCell::new(Vec::new()),
        stale: RefCell::new(None),
        request_time: Cell::new(0),
        status: Cell::new(None),
        committed: Cell::new(false),
        unstored: Cell::new(false),
        background: Cell::new(false),
        fetch: RefCell::new(None),
        origin_len,
        stored_as,
    })
}

/// Makes the HTTP/1.1 head sent upstream fit to be stored: the client's conditionals and
/// Range go (the cache answers them from the whole response), and a HEAD is asked as a GET.
pub(in crate::proxy) fn upstream_head_for_cache(head: &mut Vec<u8>, names_any: bool) {
    if names_any {
        crate::http1::response::remove_fields(head, 0, &ANSWERED_HERE);
    }
    if head.starts_with(b"HEAD ") {
        head.splice(..4, *b"GET");
    }
}

/// Whether `name` is one of the fields the cache answers itself (the usual request has none:
/// its parsed names are looked at, and the head's text is scanned only when one is there).
pub(in crate::proxy) fn answered_here(name: &str) -> bool {
    ANSWERED_HERE.iter().any(|a| name.eq_ignore_ascii_case(a))
}

/// The same for a request to an HTTP/2 server, sent as a value.
pub(in crate::proxy) fn upstream_request_for_cache(request: &mut http::Request<()>) {
    for name in ANSWERED_HERE {
        request.headers_mut().remove(name);
    }
    if request.method() == http::Method::HEAD {
        *request.method_mut() = http::Method::GET;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upstream_head_loses_conditionals_and_head_becomes_get() {
        let mut head = b"HEAD /x HTTP/1.1\r\nHost: a\r\nIf-None-Match: \"a\"\r\nRange: bytes=0-1\r\nAccept: */*\r\n\r\n".to_vec();
        upstream_head_for_cache(&mut head, true);
        assert_eq!(head, b"GET /x HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\n");
    }
}
