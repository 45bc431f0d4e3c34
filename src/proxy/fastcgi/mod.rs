//! The FastCGI phase, in place of [`super::exchange`] and [`super::response`] for a group with
//! `protocol = "fastcgi"` (PHP-FPM):
//!
//! 1. here: the request head is read again from the client buffer, its script found beneath
//!    the document root (`fastcgi::script`; nothing is sent for a path naming no script), and
//!    the request becomes BEGIN_REQUEST (keep the connection), PARAMS and, when the body is in
//!    hand, STDIN records; a server is picked as for HTTP, with the same retries;
//! 2. [`send`]: a pooled connection (at most `max_conns` per server, requests beyond it wait)
//!    or a new one, the records in one write, the rest of the body streamed as STDIN records;
//! 3. [`receive`]: STDOUT records become the client's response (a CGI head, then the body,
//!    sent whole with a `Content-Length` when it all came at once, else chunked), STDERR lines
//!    go to the error log (rate-limited), and after END_REQUEST the connection returns to the
//!    pool.

mod receive;
mod send;

use std::net::SocketAddr;
use std::time::Instant;

use super::exchange::{pick, settle, try_elsewhere};
use super::{Client, Ctx, Outcome, Tried};
use crate::config::{FastCgi, UpstreamGroup};
use crate::error::{Error, Kind};
use crate::fastcgi::params::{put_cgi_params, CgiRequest, ScriptPath};
use crate::fastcgi::record::{put_begin_request, put_record, RecordType, MAX_CONTENT};
use crate::fastcgi::script::{ScriptError, Scripts};
use crate::http1::request::header_storage;
use crate::http1::{BodyReader, Framing};
use crate::net::io::read_some;
use crate::routing::UpstreamTarget;

/// A request as FastCGI records, with what is left of its body.
struct Request {
    /// BEGIN_REQUEST, PARAMS and the STDIN records of the body bytes in hand (with the empty
    /// STDIN record that ends the body, once all of it is).
    records: Vec<u8>,
    /// Body bytes still to be read from the client and streamed.
    body_left: u64,
    /// Client bytes the records took from the buffer (head and body).
    used: usize,
}

impl Request {
    /// The whole body is in the records: the request can be sent again.
    fn in_hand(&self) -> bool {
        self.body_left == 0
    }
}

/// Sends the request to the route's FastCGI group and relays the response.
pub(super) async fn exchange(
    cx: &Ctx<'_>,
    route: UpstreamTarget,
    client: &mut Client,
    buf: &mut Vec<u8>,
    tried: &mut Tried,
) -> Result<Outcome, Error> {
    let group = &cx.config().upstreams[route.upstream];
    let Some(settings) = &group.fastcgi else {
        return Err(Error::new(Kind::NoRoute));
    };
    let p = cx.request;
    // A chunked body is read whole first: PHP needs CONTENT_LENGTH.
    let chunked = match p.framing {
        Framing::Chunked => Some(read_chunked(cx, settings, client, buf).await?),
        _ => None,
    };
    if client.local.is_none() {
        client.local = client.stream.local_addr();
    }
    let request = build(cx, route, settings, client, buf, chunked.as_ref())?;
    // What follows the request in the buffer is the next request.
    match &chunked {
        Some((_, rest)) => {
            buf.clear();
            buf.extend_from_slice(rest);
        }
        None => {
            buf.drain(..request.used.min(buf.len()));
        }
    }
    loop {
        let lease = pick(cx, route, tried)?;
        let attempt = send::attempt(cx, group, &lease, client, &request).await;
        let (conn, ubuf) = match attempt {
            Ok(ok) => ok,
            Err(e) => {
                try_elsewhere(cx, route, lease, tried, e, request.in_hand())?;
                continue;
            }
        };
        let server = conn.server.clone();
        let result = receive::relay(cx, group, client, conn, ubuf).await;
        return settle(cx, group, lease, &server, result);
    }
}

/// Reads a chunked request body whole (up to the group's `max_chunked_body`); returns the
/// payload and the bytes that followed it. A body past the limit is refused (413) as soon as
/// it passes: the rest is not read, and the connection closes.
async fn read_chunked(
    cx: &Ctx<'_>,
    settings: &FastCgi,
    client: &mut Client,
    buf: &[u8],
) -> Result<(Vec<u8>, Vec<u8>), Error> {
    let p = cx.request;
    let limits = &cx.config().limits;
    let mut reader = BodyReader::new(Framing::Chunked);
    let mut body = Vec::new();
    // Fails as soon as the body passes the limit.
    let mut feed = |reader: &mut BodyReader, input: &[u8]| {
        let mut too_large = false;
        let used = reader
            .feed_data(input, |data| {
                too_large |= body.len() + data.len() > settings.max_chunked_body;
                if !too_large {
                    body.extend_from_slice(data);
                }
            })
            .map_err(|_| Error::new(Kind::BadRequest("invalid chunked body")))?;
        if too_large {
            return Err(Error::new(Kind::BodyTooLarge));
        }
        Ok(used)
    };
    let used = feed(&mut reader, &buf[p.head_len..])?;
    let mut rest = buf[p.head_len + used..].to_vec();
    if !reader.is_done() && p.expect_continue && p.minor_version == 1 {
        let timeout = limits.client_body_timeout;
        crate::net::io::write_continue(&mut client.stream, timeout)
            .await
            .map_err(|_| Error::client_write())?;
    }
    let mut chunk = Vec::new();
    let mut used = 0;
    while !reader.is_done() {
        chunk.clear();
        let n = read_some(
            &mut client.stream,
            &mut chunk,
            limits.max_buffer,
            limits.client_body_timeout,
        )
        .await
        .map_err(|e| Error::client_read(&e))?;
        if n == 0 {
            return Err(Error::new(Kind::ClientClosed));
        }
        used = feed(&mut reader, &chunk)?;
    }
    if !chunk.is_empty() {
        rest = chunk[used..].to_vec();
    }
    Ok((body, rest))
}

/// The request's records: its script, its variables, and the body bytes in hand.
fn build(
    cx: &Ctx<'_>,
    route: UpstreamTarget,
    settings: &FastCgi,
    client: &Client,
    buf: &[u8],
    chunked: Option<&(Vec<u8>, Vec<u8>)>,
) -> Result<Request, Error> {
    let p = cx.request;
    let mut storage = header_storage();
    let mut head = match &p.page_head {
        Some(text) => crate::http1::parse_request(text, &mut storage, text.len())?
            .ok_or(Error::new(Kind::BadRequest("error page request")))?,
        None => super::request::head_again(client, buf, p.head_len, &mut storage)?,
    };
    if let Some(target) = &p.rewritten {
        // The rules changed the path: the script is found from the new one.
        head.path = std::borrow::Cow::Owned(target.clone());
    }
    let scripts = Scripts {
        settings,
        cache: &cx.worker.files,
        files: &cx.config().files,
        now: Instant::now(),
        counters: &cx.worker.counters,
    };
    let script = scripts.find(&head.path).map_err(script_error)?;
    let (in_hand, content_length): (&[u8], Option<u64>) = match (chunked, head.framing) {
        (Some((body, _)), _) => (body, Some(body.len() as u64)),
        (None, Framing::Length(n)) => {
            let have = (buf.len() - p.head_len).min(n as usize);
            (&buf[p.head_len..p.head_len + have], Some(n))
        }
        _ => (&[], None),
    };
    let extra = match route.params {
        Some(i) => &cx.config().route_params[usize::from(i)],
        None => &settings.params,
    };
    let local = client
        .local
        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
    let host = head.host.and_then(|h| std::str::from_utf8(h).ok());
    // Without a Host field, the server's name is the address the client reached.
    let local_ip = match host {
        Some(_) => String::new(),
        None => local.ip().to_string(),
    };
    let vars = CgiRequest {
        document_root: &settings.document_root,
        script: ScriptPath {
            script_name: &script.script_name,
            path_info: &script.path_info,
        },
        request_uri: &head.path,
        method: head.method,
        protocol: client.stream.protocol_name(head.minor_version),
        content_length,
        remote: p.real_ip.map_or(client.peer, |ip| {
            std::net::SocketAddr::new(ip, client.peer.port())
        }),
        local,
        server_name: host.map_or(local_ip.as_str(), strip_port),
        https: cx.request.https,
    };
    let mut records = Vec::with_capacity(1024 + in_hand.len() + in_hand.len() / 8);
    put_begin_request(&mut records, true);
    match p
        .cache
        .as_deref()
        .filter(|c| c.method == crate::cache::Method::Get)
    {
        Some(c) => {
            let (headers, extra) = for_cache(head.headers, extra, &c.validators.borrow());
            put_cgi_params(&mut records, &vars, &headers, &extra);
        }
        None => put_cgi_params(&mut records, &vars, head.headers, extra),
    }
    for piece in in_hand.chunks(MAX_CONTENT) {
        put_record(&mut records, RecordType::Stdin, piece);
    }
    let body_left = content_length.unwrap_or(0) - in_hand.len() as u64;
    if body_left == 0 {
        put_record(&mut records, RecordType::Stdin, &[]);
    }
    Ok(Request {
        records,
        body_left,
        used: p.head_len + if chunked.is_some() { 0 } else { in_hand.len() },
    })
}

/// The request fields and extra variables of a request the cache answers, as nginx's
/// `fastcgi_cache` has them: the client's conditionals and Range do not reach the script (the
/// cache answers them from the whole response it stores), and a stale entry's `validators`
/// (field lines, when the cache revalidates) go as `HTTP_IF_NONE_MATCH` and
/// `HTTP_IF_MODIFIED_SINCE`.
fn for_cache<'h>(
    headers: &[httparse::Header<'h>],
    extra: &[(String, String)],
    validators: &[u8],
) -> (Vec<httparse::Header<'h>>, Vec<(String, String)>) {
    const ANSWERED_BY_THE_CACHE: [&str; 6] = [
        "if-modified-since",
        "if-unmodified-since",
        "if-none-match",
        "if-match",
        "range",
        "if-range",
    ];
    let kept = headers
        .iter()
        .filter(|h| {
            !ANSWERED_BY_THE_CACHE
                .iter()
                .any(|n| h.name.eq_ignore_ascii_case(n))
        })
        .copied()
        .collect();
    let mut extra = extra.to_vec();
    for (name, value) in crate::cache::entry::fields_of_lines(validators) {
        let name = String::from_utf8_lossy(name)
            .to_ascii_uppercase()
            .replace('-', "_");
        extra.push((
            format!("HTTP_{name}"),
            String::from_utf8_lossy(value).into_owned(),
        ));
    }
    (kept, extra)
}

/// `example.com:8080` without its port (`[::1]:80` keeps its brackets).
fn strip_port(host: &str) -> &str {
    match host.rfind(':') {
        Some(i) if !host[i..].contains(']') => &host[..i],
        _ => host,
    }
}

fn script_error(e: ScriptError) -> Error {
    Error::new(match e {
        ScriptError::BadPath => Kind::BadRequest("invalid path"),
        ScriptError::NotFound => Kind::FileNotFound,
        ScriptError::Forbidden => Kind::FileForbidden,
        ScriptError::Failed => Kind::FileFailed,
    })
}

/// Whether requests to `group` take this phase.
pub(super) fn handles(group: &UpstreamGroup) -> bool {
    group.fastcgi.is_some()
}

#[cfg(test)]
mod tests {
    #[test]
    fn ports_come_off_hosts() {
        assert_eq!(super::strip_port("example.com:8080"), "example.com");
        assert_eq!(super::strip_port("example.com"), "example.com");
        assert_eq!(super::strip_port("[::1]:80"), "[::1]");
        assert_eq!(super::strip_port("[::1]"), "[::1]");
    }
}
