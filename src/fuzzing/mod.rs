//! The properties the fuzz targets (`fuzz/`) check, kept in the library so that a plain
//! `cargo test` replays every committed seed and every crash kept as a regression seed
//! (`tests/it/fuzz_seeds.rs`). Each function panics when a property fails. HTTP/2 and
//! gRPC's are in `http2.rs`.

mod cache;
pub mod htpasswd;
mod http2;
mod proxy_protocol;
mod rules;

use http2::http2_request_is_clean;
pub use http2::{grpc, http2_convert, http2_frames, http2_server};

/// See [`cache::cache_entry`]; the fuzz target ignores its answer (whether the head was
/// storable).
pub fn cache_entry(data: &[u8]) {
    cache::cache_entry(data);
}
pub use proxy_protocol::proxy_protocol;
pub use rules::request_rules;

use std::net::SocketAddr;

use crate::config::{Config, HashKey};
use crate::fastcgi::cgi::parse_cgi_head;
use crate::fastcgi::record::{parse_pairs, parse_record, put_params, Record};
use crate::files::conditional::{
    evaluate, if_range_allows, Conditions, Precondition as ConditionalOutcome, Validators,
};
use crate::files::path::resolve as resolve_path;
use crate::files::range::{parse_range, Ranges, MAX_RANGES};
use crate::http1::accept::{accepted_codings, Coding};
use crate::http1::request::{header_storage, ForwardedFor};
use crate::http1::{
    parse_request, parse_response, BodyReader, ChunkedReader, Framing, MAX_HEADERS,
};
use crate::upstream::ring::request_key;

/// Fields the proxy may add to a head it forwards (X-Forwarded-*, framing, Connection): a head
/// within this many of the field limit is not expected to parse again under the same limit.
const ADDED_FIELDS: usize = 4;

/// An h2c listener's look at a connection's first bytes, as they arrive in pieces of any size:
/// it never panics (a partial line once did), it decides once a line has ended, and once it
/// has decided on a first line, more bytes do not change the protocol it chose.
fn h2c_sniff(data: &[u8]) {
    use crate::server::worker_thread::{first_bytes_decide, speaks_http2};
    const ROOM: usize = 1024;
    let data = &data[..data.len().min(ROOM)];
    let mut chosen = None;
    for n in 0..=data.len() {
        let seen = &data[..n];
        if !first_bytes_decide(seen, ROOM) {
            assert!(!seen.contains(&b'\n'), "an ended line left undecided");
            continue;
        }
        let http2 = speaks_http2(seen);
        if n > 0 && (seen.starts_with(b"PRI ") || seen.contains(&b'\n')) {
            assert_eq!(
                *chosen.get_or_insert(http2),
                http2,
                "more bytes changed the protocol"
            );
        }
    }
}

/// Asserts the head has CRLF line ends only and one empty line, at its end.
fn assert_clean_head(out: &[u8]) {
    assert!(
        out.ends_with(b"\r\n\r\n"),
        "head does not end with CRLF CRLF"
    );
    let first_blank = out.windows(4).position(|w| w == b"\r\n\r\n");
    assert_eq!(
        first_blank,
        Some(out.len() - 4),
        "empty line inside the head"
    );
    assert!(
        !out.windows(2).any(|w| w[1] == b'\n' && w[0] != b'\r'),
        "bare LF in a written head"
    );
}

/// A request head: parsing never panics; an accepted head is rewritten into a clean HTTP/1.1
/// head that (when it has room under the field limit) parses again with the same method,
/// target and body framing.
pub fn request_head(data: &[u8]) {
    h2c_sniff(data);
    let mut storage = header_storage();
    let Ok(Some(head)) = parse_request(data, &mut storage, 8192) else {
        return;
    };
    assert!(head.head_len <= data.len());
    let mut out = Vec::new();
    head.write_upstream_head(
        &mut out,
        ForwardedFor {
            client: b"192.0.2.1",
            proto: "http",
        },
    );
    assert_clean_head(&out);
    http2_request_is_clean(&head);
    for key in [
        HashKey::ClientIp,
        HashKey::Uri,
        HashKey::Header("x-user".into()),
        HashKey::Cookie("sid".into()),
    ] {
        let _ = request_key(&head, &key, SocketAddr::from(([192, 0, 2, 1], 1)));
    }
    if head.headers.len() + ADDED_FIELDS > MAX_HEADERS {
        return;
    }
    let mut again = header_storage();
    let reparsed = parse_request(&out, &mut again, out.len() + 1);
    let Ok(Some(re)) = reparsed else {
        panic!("forwarded head does not parse: {reparsed:?}");
    };
    assert_eq!(re.head_len, out.len());
    assert_eq!((re.method, re.path), (head.method, head.path));
    assert_eq!(re.framing, head.framing);
    let mut body = BodyReader::new(head.framing);
    if let Ok(n) = body.feed(&data[head.head_len..]) {
        assert!(n <= data.len() - head.head_len);
    }
}

/// A response head: the first byte chooses whether the request was HEAD and the client's HTTP
/// version. An accepted head is rewritten into a clean head that parses again with the same
/// status.
pub fn response_head(data: &[u8]) {
    let Some((&flags, data)) = data.split_first() else {
        return;
    };
    let (was_head, client_minor) = (flags & 1 == 1, (flags >> 1) & 1);
    let mut storage = header_storage();
    let Ok(Some(head)) = parse_response(data, &mut storage, 8192, was_head) else {
        return;
    };
    assert!(head.head_len <= data.len());
    // The quick test for a whole head, run before each parse, never says "wait" for one.
    assert!(crate::http1::head_complete(data));
    let relay = head.relay(client_minor);
    let mut out = Vec::new();
    head.write_client_head(&mut out, relay, flags & 4 == 4, client_minor);
    assert_clean_head(&out);
    if flags & 8 == 8 {
        // HSTS over TLS: added once, before the blank line, whatever the upstream sent; a
        // CORS `Vary: Origin` merged into the upstream's own `Vary`.
        let added = b"Strict-Transport-Security: max-age=1\r\nVary: Origin\r\n";
        crate::http1::response::add_fields(&mut out, 0, added);
        assert_clean_head(&out);
        let text = String::from_utf8_lossy(&out).to_ascii_lowercase();
        assert!(text.contains("\nstrict-transport-security:"));
        assert!(text.contains("\nvary:"));
    }
    if head.headers.len() + ADDED_FIELDS + 2 > MAX_HEADERS {
        return;
    }
    let mut again = header_storage();
    let reparsed = parse_response(&out, &mut again, out.len() + 1, was_head);
    let Ok(Some(re)) = reparsed else {
        panic!("client head does not parse: {reparsed:?}");
    };
    assert_eq!(re.status, head.status);
    if head.framing == Framing::Chunked {
        let _ = ChunkedReader::new().feed(&data[head.head_len..], |_| {});
    }
}

/// Chunked decoding: the first two bytes choose where to split the rest; feeding it in two
/// parts must give exactly what feeding it at once gives (bytes taken, payload, end, error).
pub fn chunked(data: &[u8]) {
    let Some((split, body)) = data.split_first_chunk::<2>() else {
        return;
    };
    let at = usize::from(u16::from_le_bytes(*split)) % (body.len() + 1);
    let mut whole = ChunkedReader::new();
    let mut whole_data = Vec::new();
    let whole_result = whole.feed(body, |d| whole_data.extend_from_slice(d));

    let mut parts = ChunkedReader::new();
    let mut parts_data = Vec::new();
    let first = parts.feed(&body[..at], |d| parts_data.extend_from_slice(d));
    let parts_result = match first {
        Ok(n) if n < at => Ok(n),
        Ok(n) => parts
            .feed(&body[at..], |d| parts_data.extend_from_slice(d))
            .map(|m| n + m),
        Err(e) => Err(e),
    };
    match (&whole_result, &parts_result) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a, b, "bytes taken differ when split at {at}");
            assert_eq!(whole_data, parts_data, "payload differs when split at {at}");
            assert_eq!(whole.is_done(), parts.is_done());
            assert!(*a <= body.len());
        }
        (Err(_), Err(_)) => {}
        _ => panic!("split at {at}: {whole_result:?} at once, {parts_result:?} in parts"),
    }
    chunked_in_place(body, at, whole_result.is_ok() && whole.is_done());
}

/// The trailer filter of [`chunked`]'s input, strict (a request's) and lenient (a response's):
/// two reads split at `at` give what one read gives; what goes on is a body a strict reader
/// takes whole, and no forbidden field is left in its trailers. `valid` says a strict reader
/// took the input whole, so the strict filter must too.
fn chunked_in_place(body: &[u8], at: usize, valid: bool) {
    for lenient in [false, true] {
        let reader = || {
            if lenient {
                ChunkedReader::lenient()
            } else {
                ChunkedReader::new()
            }
        };
        let once = relay_in_place(reader(), body, body.len());
        let split = relay_in_place(reader(), body, at);
        match (&once, &split) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "lenient {lenient}: split at {at} differs"),
            (Err(_), Err(_)) => {}
            _ => panic!("lenient {lenient}, split at {at}: {once:?} at once, {split:?} in parts"),
        }
        if valid && !lenient {
            assert!(matches!(once, Ok((_, true))), "{once:?}");
        }
        let Ok((out, true)) = once else { continue };
        let mut check = ChunkedReader::new();
        let mut trailers = Vec::new();
        for (i, b) in out.iter().enumerate() {
            if check.in_trailers() {
                trailers.push(*b);
            }
            let fed = check.feed(&out[i..=i], |_| {});
            assert_eq!(fed, Ok(1), "{:?}", String::from_utf8_lossy(&out));
        }
        assert!(check.is_done());
        for line in trailers.split(|b| *b == b'\n') {
            let name = line.split(|b| *b == b':').next().unwrap_or_default();
            assert!(
                !crate::http1::chunked::is_forbidden_trailer(name),
                "{line:?}"
            );
        }
    }
}

/// Feeds `body` to `reader` in place the way the relay does, in two reads split at `at`
/// (what is not yet the body's stays in front): what goes on, and whether the body ended.
fn relay_in_place(
    mut reader: ChunkedReader,
    body: &[u8],
    at: usize,
) -> Result<(Vec<u8>, bool), crate::http1::ChunkError> {
    let mut buf = body[..at].to_vec();
    let n = reader.feed_in_place(&mut buf, 0)?;
    let mut out = buf[..n].to_vec();
    if !reader.is_done() {
        buf.drain(..n);
        buf.extend_from_slice(&body[at..]);
        let n = reader.feed_in_place(&mut buf, 0)?;
        out.extend_from_slice(&buf[..n]);
    }
    Ok((out, reader.is_done()))
}

/// A resolver that never leaves the process: address literals, and `localhost`.
fn resolve_offline(s: &str) -> Vec<SocketAddr> {
    if let Ok(a) = s.parse() {
        return vec![a];
    }
    let port = s.strip_prefix("localhost:").and_then(|p| p.parse().ok());
    port.map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
        .into_iter()
        .collect()
}

/// Config text: validation never panics, and every error it reports has a position.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(errors) = Config::parse_with(text, "fuzz.toml", resolve_offline) {
        assert!(!errors.0.is_empty());
        for e in &errors.0 {
            assert!(
                e.line >= 1 && e.column >= 1,
                "error without a position: {e}"
            );
            assert!(!e.message.is_empty());
        }
    }
}

/// A `Range` header against a length (the first 8 bytes, little-endian, capped at 1 TiB):
/// never panics; every range lies inside the file; several ranges are sorted, disjoint, not
/// touching, and at most [`MAX_RANGES`].
pub fn range(data: &[u8]) {
    let Some((len, header)) = data.split_first_chunk::<8>() else {
        return;
    };
    let len = u64::from_le_bytes(*len) % (1 << 40);
    match parse_range(header, len) {
        Ranges::Whole | Ranges::Unsatisfiable => {}
        Ranges::One(r) => assert!(r.start <= r.end && r.end < len, "{r:?} of {len}"),
        Ranges::Many(ranges) => {
            assert!((2..=MAX_RANGES).contains(&ranges.len()));
            for r in &ranges {
                assert!(r.start <= r.end && r.end < len, "{r:?} of {len}");
            }
            for pair in ranges.windows(2) {
                assert!(pair[0].end + 1 < pair[1].start, "{pair:?}");
            }
        }
    }
}

/// A request target as a static file path: never panics, an accepted path is relative, has no
/// `..`, `.` or empty segment, and holds no NUL or backslash; and `normalize`'s fast path
/// agrees with the segment-by-segment one.
pub fn static_path(data: &[u8]) {
    let Ok(target) = std::str::from_utf8(data) else {
        listing(data, "");
        return;
    };
    listing(data, target);
    // The fast path for paths already in normal form agrees with the general one.
    if data.first() == Some(&b'/') && !data.iter().any(|&b| b == 0 || b == b'\\') {
        assert_eq!(
            crate::files::path::normalize(data),
            crate::files::path::normalize_segments(data),
            "{target:?}"
        );
    }
    let Ok(resolved) = resolve_path(target) else {
        return;
    };
    let bytes = resolved.path.as_os_str().as_encoded_bytes();
    assert!(
        !bytes.contains(&0) && !bytes.contains(&b'\\'),
        "{resolved:?}"
    );
    if bytes.is_empty() {
        return;
    }
    for segment in bytes.split(|&b| b == b'/') {
        assert!(
            !matches!(segment, b"" | b"." | b".."),
            "{resolved:?} from {target:?}"
        );
    }
}

/// Conditional header values (split at 0xFF into If-Match, If-None-Match, If-Modified-Since,
/// If-Unmodified-Since and If-Range): evaluation never panics, and a request whose only
/// condition is `If-None-Match` naming the file's own tag gets 304.
pub fn conditional(data: &[u8]) {
    let v = Validators::new(data.len() as u64, std::time::UNIX_EPOCH);
    let mut parts = data.split(|&b| b == 0xff);
    let mut next = || parts.next().filter(|p| !p.is_empty());
    let c = Conditions {
        if_match: next(),
        if_none_match: next(),
        if_modified_since: next(),
        if_unmodified_since: next(),
    };
    let _ = evaluate(&c, &v, true);
    let _ = evaluate(&c, &v, false);
    if let Some(if_range) = next() {
        let _ = if_range_allows(if_range, &v);
    }
    let own = Conditions {
        if_none_match: Some(v.etag.as_bytes()),
        ..Conditions::default()
    };
    assert_eq!(evaluate(&own, &v, true), ConditionalOutcome::NotModified);
}

/// An `Accept-Encoding` value: never panics; the same list split over two fields means the
/// same; the best coding has the highest q-value; refusing every coding at the end leaves
/// none to choose.
pub fn accept_encoding(data: &[u8]) {
    let whole = accepted_codings([data]);
    if let Some(comma) = data.iter().position(|&b| b == b',') {
        let split = accepted_codings([&data[..comma], &data[comma + 1..]]);
        assert_eq!(whole, split, "{:?}", String::from_utf8_lossy(data));
    }
    if let Some(best) = whole.best(&Coding::ALL) {
        assert!(Coding::ALL.iter().all(|&c| whole.q(c) <= whole.q(best)));
        assert!(whole.accepts(best.name()));
    }
    let mut refused = data.to_vec();
    refused.extend_from_slice(b", br;q=0, zstd;q=0, gzip;q=0");
    let refused = accepted_codings([refused.as_slice()]);
    assert_eq!(refused.best(&Coding::ALL), None);
}

/// A response head (from an upstream, a CGI script or the static-file path) as compression
/// sees it: deciding never panics; a compressed head has one Content-Encoding, no length or
/// Accept-Ranges, strong ETags made weak, and varies on Accept-Encoding; adding only Vary twice
/// changes nothing the second time.
pub fn compress_head(data: &[u8]) {
    use crate::compress::head::{rewrite, CompressedBody};
    use crate::compress::{eligible, Settings};
    let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
    // Field lines as the proxy writes them: no bare CR or LF inside one, CRLF after each.
    for line in data.split(|&b| b == b'\n') {
        let line: Vec<u8> = line.iter().copied().filter(|&b| b != b'\r').collect();
        head.extend_from_slice(&line);
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    let head = crate::message::ClientHead::new(200, crate::message::Framing::Length(9), head);
    let _ = eligible(&head, &Settings::default(), false);
    let out = rewrite(&head, Some(Coding::Gzip), CompressedBody::Chunked);
    assert_eq!(out.framing, crate::message::Framing::Chunked);
    let text = String::from_utf8_lossy(&out.text).to_ascii_lowercase();
    let fields: Vec<(&str, &str)> = text
        .split("\r\n")
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n, v.trim_ascii()))
        .collect();
    let named = |name: &'static str| fields.iter().filter(move |(n, _)| *n == name);
    assert_eq!(named("content-length").count(), 0, "{text:?}");
    assert_eq!(named("accept-ranges").count(), 0, "{text:?}");
    assert_eq!(named("transfer-encoding").count(), 1, "{text:?}");
    assert!(
        named("content-encoding").any(|(_, v)| *v == "gzip"),
        "{text:?}"
    );
    assert!(named("etag").all(|(_, v)| !v.starts_with('"')), "{text:?}");
    assert!(
        named("vary").any(|(_, v)| v.contains("accept-encoding") || v.contains('*')),
        "{text:?}"
    );
    let vary_only = rewrite(&head, None, CompressedBody::Chunked);
    assert_eq!(
        rewrite(&vary_only, None, CompressedBody::Chunked),
        vary_only
    );
}

/// Any bytes as an nginx config (for `slipstream import`): reading never panics, and a config
/// that reads, written back ([`crate::import::syntax::write`]), reads as the same directives;
/// and its translation ([`crate::import::translate`]) never panics and is TOML.
pub fn nginx_conf(data: &[u8]) {
    use crate::import::syntax::{parse, write, Directive};
    fn shape(d: &[Directive]) -> Vec<(String, Vec<String>, Option<Vec<u8>>)> {
        d.iter()
            .map(|d| {
                let block = d
                    .block
                    .as_ref()
                    .map(|b| format!("{:?}", shape(b)).into_bytes());
                (d.name.clone(), d.args.clone(), block)
            })
            .collect()
    }
    let Ok(first) = parse(data, 0) else {
        return;
    };
    let mut text = String::new();
    write(&first, 0, &mut text);
    let again = parse(text.as_bytes(), 0).expect("what was written reads");
    assert_eq!(shape(&first), shape(&again), "{text}");
    // Whatever the directives, the translation never panics and is TOML.
    let config = crate::import::read::Config {
        files: vec!["fuzz.conf".into()],
        directives: first,
        skipped: Vec::new(),
    };
    let translation = crate::import::translate::translate(&config);
    if let Err(e) = translation.toml.parse::<toml::Table>() {
        panic!("{e}\n{}", translation.toml);
    }
}

/// Bytes from a FastCGI server: reading records one after another never panics, and every
/// record read lies inside the bytes. The same bytes split at 0xFF into names and values
/// survive a PARAMS round trip.
pub fn fastcgi_records(data: &[u8]) {
    let mut at = 0;
    while let Ok(Some((record, used))) = parse_record(&data[at..]) {
        assert!(used >= 8 && at + used <= data.len());
        if let Record::Stdout { start, len } | Record::Stderr { start, len } = record {
            assert!(start + len <= used);
        }
        at += used;
    }
    let parts: Vec<&[u8]> = data.split(|&b| b == 0xff).collect();
    let pairs: Vec<(&[u8], &[u8])> = parts
        .chunks(2)
        .map(|c| (c[0], *c.get(1).unwrap_or(&&[][..])))
        .collect();
    let mut out = Vec::new();
    put_params(&mut out, pairs.iter().copied());
    let mut content = Vec::new();
    let mut rest = out.as_slice();
    while rest.len() >= 8 {
        let len = usize::from(u16::from_be_bytes([rest[4], rest[5]]));
        let padding = usize::from(rest[6]);
        content.extend_from_slice(&rest[8..8 + len]);
        rest = &rest[8 + len + padding..];
    }
    assert!(rest.is_empty());
    assert_eq!(parse_pairs(&content), Some(pairs));
}

/// A CGI response head from a script: never panics; an accepted head has a status from 100 to
/// 599 and lies within the bytes.
pub fn cgi_head(data: &[u8]) {
    let mut storage = crate::fastcgi::cgi::cgi_storage();
    if let Ok(Some(head)) = parse_cgi_head(data, &mut storage, 16 * 1024) {
        assert!((100..=599).contains(&head.status));
        assert!(head.head_len <= data.len());
    }
}

/// A request head as FastCGI variables: for any head the HTTP parser accepts, the PARAMS
/// records decode back, name each variable once, never carry `HTTP_PROXY` (httpoxy), and
/// carry every other header as `HTTP_*` (except `Content-Length` and names with `_`).
pub fn fastcgi_params(data: &[u8]) {
    use crate::fastcgi::params::{put_cgi_params, split_script, CgiRequest};
    use crate::fastcgi::record::params_content;
    let mut storage = header_storage();
    let Ok(Some(head)) = parse_request(data, &mut storage, 64 * 1024) else {
        return;
    };
    let path = head.path.split('?').next().unwrap_or_default();
    let Some(script) = split_script(path, ".php") else {
        return;
    };
    let req = CgiRequest {
        document_root: "/srv/www",
        script,
        request_uri: &head.path,
        method: head.method,
        protocol: "HTTP/1.1",
        content_length: None,
        remote: SocketAddr::from(([127, 0, 0, 1], 1)),
        local: SocketAddr::from(([127, 0, 0, 1], 2)),
        server_name: "x",
        https: false,
    };
    let mut records = Vec::new();
    put_cgi_params(&mut records, &req, head.headers, &[]);
    let content = params_content(&records);
    let pairs = parse_pairs(&content).expect("PARAMS decode");
    let mut names: Vec<&[u8]> = pairs.iter().map(|(n, _)| *n).collect();
    names.sort_unstable();
    let count = names.len();
    names.dedup();
    assert_eq!(names.len(), count, "a variable named twice");
    assert!(!names.contains(&&b"HTTP_PROXY"[..]));
    for h in head.headers {
        if h.name.contains('_')
            || h.name.eq_ignore_ascii_case("content-length")
            || h.name.eq_ignore_ascii_case("proxy")
            || h.name.eq_ignore_ascii_case("content-type")
        {
            continue;
        }
        let var = format!("HTTP_{}", h.name.to_ascii_uppercase().replace('-', "_"));
        assert!(names.contains(&var.as_bytes()), "{var} missing");
    }
}

/// An access-log format and request fields: a format string parses or is refused with a reason;
/// every line written is one line (the only newline ends it), and a `json` line parses as JSON
/// whatever bytes the request held. The data is the format, a NUL, then the field bytes.
pub fn log_format(data: &[u8]) {
    use crate::observe::log_format::{write_line, Clock, Entry, LogFormat};
    let (format, fields) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(format) = std::str::from_utf8(format) else {
        return;
    };
    let mut parts = fields.splitn(4, |b| *b == b'\n');
    let mut next = || parts.next().unwrap_or_default();
    let (method, target, agent, referer) = (next(), next(), next(), next());
    let entry = Entry {
        client: std::net::Ipv4Addr::LOCALHOST.into(),
        method,
        target,
        protocol: "HTTP/1.1",
        status: 200,
        bytes: fields.len() as u64,
        micros: u64::from(fields.first().copied().unwrap_or(0)) * 12345,
        host: referer,
        user_agent: agent,
        referer,
        upstreams: &[],
        upstream_times: &[],
        site: "fuzz",
        request_id: "",
        connection: (0, 1),
        tls_version: "TLSv1.3",
        cache_status: "HIT",
    };
    let mut clock = Clock::default();
    clock.tick();
    let formats = match LogFormat::parse(format) {
        Ok(f) => vec![f, LogFormat::Json, LogFormat::combined()],
        Err(reason) => {
            assert!(!reason.is_empty());
            vec![LogFormat::Json, LogFormat::combined()]
        }
    };
    for f in formats {
        let mut out = Vec::new();
        write_line(&mut out, &f, &entry, &clock);
        let newline = out.iter().position(|b| *b == b'\n');
        // A template's own text may hold newlines; values never add one.
        if !format.contains('\n') || f != LogFormat::parse(format).unwrap_or(LogFormat::Json) {
            assert_eq!(
                newline,
                Some(out.len() - 1),
                "{:?}",
                String::from_utf8_lossy(&out)
            );
        }
        if f == LogFormat::Json {
            let v: serde_json::Value = serde_json::from_slice(&out).expect("json line parses");
            assert!(v.is_object());
        }
    }
}

/// The kernel files doctor reads: never panic, and a port range read is ordered. The first
/// byte picks the parser.
pub fn proc_files(data: &[u8]) {
    use crate::observe::doctor::procfs;
    let Some((which, text)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(text);
    match which % 5 {
        0 => {
            let _ = procfs::open_files_limit(&text);
        }
        1 => {
            let _ = procfs::netstat(&text);
        }
        2 => {
            let _ = procfs::time_wait(&text);
        }
        3 => {
            if let Some((lo, hi)) = procfs::port_range(&text) {
                assert!(lo <= hi);
            }
        }
        _ => {
            let _ = procfs::number(&text);
        }
    }
}

/// A certificate file and a key file (the data split at the first NUL): never panics; a pair
/// accepted has a certificate chain. The same bytes as an ACME state file, and the first part
/// as a client certificate's DER for the `$ssl_client_*` variables.
pub fn tls_pem(data: &[u8]) {
    let (cert, key) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, data),
    };
    if let Ok(certified) = crate::tls::certs::from_pem(cert, key) {
        assert!(!certified.cert.is_empty());
    }
    // An ACME state file (chain and key in one file) reads back or is refused.
    let text = String::from_utf8_lossy(data);
    if let Ok(stored) = crate::acme::state::from_pem(&text, &text) {
        assert!(!stored.key.cert.is_empty());
    }
    // A client certificate's DER (whatever a client sends) gives the variables or blanks.
    let der = rustls::pki_types::CertificateDer::from(cert);
    let client = crate::tls::client_auth::ClientCert::of(Some(std::slice::from_ref(&der)));
    assert_eq!(client.verify, "SUCCESS");
    assert_eq!(client.fingerprint.len(), 40);
}

/// An OCSP responder's answer (network input) checked for a fixed certificate: never panics;
/// a response accepted is the bytes given, current, for a window that has a length.
pub fn ocsp_response(data: &[u8]) {
    static TARGET: std::sync::OnceLock<crate::tls::ocsp::Target> = std::sync::OnceLock::new();
    let target = TARGET.get_or_init(|| {
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "fuzz CA");
        let issuer = rcgen::CertifiedIssuer::self_signed(ca, ca_key).expect("CA");
        let leaf_key = rcgen::KeyPair::generate().expect("key");
        let leaf = rcgen::CertificateParams::new(vec!["a.test".to_string()])
            .expect("params")
            .signed_by(&leaf_key, &issuer)
            .expect("leaf");
        crate::tls::ocsp::target_with(leaf.der(), issuer.der(), "http://127.0.0.1/")
            .expect("target")
    });
    let now = chrono::Utc::now().timestamp();
    if let Ok(staple) = crate::tls::ocsp::check(target, data, now) {
        assert_eq!(staple.der, data);
        assert!(staple.next_update > now);
        assert!(staple.withdraw_at() <= staple.next_update);
    }
}

/// A watch stream from etcd's JSON gateway (network input): never panics, and what it reports
/// is consistent: the stream ends at a compaction, and a watch that ends without a compaction
/// or a stop is an error (the caller reconnects).
pub fn etcd_watch(data: &[u8]) {
    use crate::cluster::etcd::WatchEvent;
    let mut events = Vec::new();
    let result = crate::cluster::etcd::read_watch(data, &mut |e| {
        events.push(e);
        true
    });
    if let Some(i) = events
        .iter()
        .position(|e| matches!(e, WatchEvent::Compacted(_)))
    {
        assert_eq!(i + 1, events.len(), "events after a compaction");
        assert!(result.is_ok());
    } else {
        assert!(result.is_err(), "a stream that ended was taken as complete");
    }
}

/// A fleet member's rate limit counts record (`cluster::limits::decode`): no input panics, and
/// whatever it reads encodes back to the same bytes.
pub fn fleet_counts(data: &[u8]) {
    if let Ok(batch) = crate::cluster::limits::decode(data) {
        assert_eq!(crate::cluster::limits::encode(&batch), data);
    }
}

/// A directory listing of one entry named by the input, sorted as a query in it says: the
/// name is escaped in text (no markup characters), encoded in its link, adds no markup to
/// the page, and reads back from the JSON form; no time a file system may give panics.
fn listing(name: &[u8], target: &str) {
    use crate::files::listing::{self, Entry, Kind, Order};
    let order = Order::from_query(target.split_once('?').map_or("", |(_, q)| q));
    let text = listing::escape_html(name);
    assert!(!text.contains(['<', '>', '"', '\'']), "{text}");
    let href = listing::encode_href(name);
    assert!(
        href.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~%".contains(&b)),
        "{href}"
    );
    // The directory's URI as a link: only unreserved characters, `%XX` and its slashes.
    let dir = format!("/{}/", String::from_utf8_lossy(name));
    let base = listing::encode_uri(&dir);
    assert!(base.starts_with('/') && base.ends_with('/'), "{base}");
    assert!(
        base.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~%/".contains(&b)),
        "{base}"
    );
    let mut word = [0u8; 8];
    let n = name.len().min(8);
    word[..n].copy_from_slice(&name[..n]);
    let entry = |name: &[u8], kind| Entry {
        name: name.to_vec(),
        kind,
        size: name.len() as u64,
        mtime: i64::from_le_bytes(word),
    };
    for kind in [Kind::File, Kind::Directory, Kind::Other] {
        let json: serde_json::Value = serde_json::from_slice(&listing::json(&[entry(name, kind)]))
            .expect("the listing's JSON reads back");
        assert_eq!(json[0]["name"], String::from_utf8_lossy(name).as_ref());
        let markup = |page: Vec<u8>| page.iter().filter(|&&b| b == b'<').count();
        assert_eq!(
            markup(listing::html(&[entry(name, kind)], "/", order, false)),
            markup(listing::html(&[entry(b"x", kind)], "/", order, false)),
        );
        // The folder's name adds no markup either: the same page as for a harmless name with
        // the same steps.
        let plain: String = dir
            .chars()
            .map(|c| if c == '/' { '/' } else { 'x' })
            .collect();
        assert_eq!(
            markup(listing::html(&[entry(b"x", kind)], &dir, order, true)),
            markup(listing::html(&[entry(b"x", kind)], &plain, order, true)),
        );
    }
}
