//! Access-log line formats: nginx's `combined` (byte for byte, so goaccess and existing parsers
//! read it), `json` (one object per line, nginx's variable names as keys) and templates of
//! named fields (`$remote_addr`, `$status`, ...). Socket-free: an [`Entry`] in, bytes out.

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::IpAddr;

use crate::http1::put_decimal;
use crate::net::Address;

/// The `combined` format as nginx defines it.
pub const COMBINED: &str = "$remote_addr - $remote_user [$time_local] \"$request\" $status \
                            $body_bytes_sent \"$http_referer\" \"$http_user_agent\"";

/// A field a log line can show; named after nginx's variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::EnumIter)]
pub enum Field {
    /// Client address.
    RemoteAddr,
    /// Authenticated user: always `-` (slipstream does not authenticate).
    RemoteUser,
    /// `23/Nov/2026:09:30:00 +0000`, local time.
    TimeLocal,
    /// `2026-11-23T09:30:00+00:00`, local time.
    TimeIso8601,
    /// The request line: `GET /path?q HTTP/1.1`.
    Request,
    /// The method.
    RequestMethod,
    /// The request target as sent.
    RequestUri,
    /// `HTTP/1.1`.
    ServerProtocol,
    /// Status sent (499 when the client left first).
    Status,
    /// Response body bytes sent.
    BodyBytesSent,
    /// Seconds from head received to response end, millisecond resolution.
    RequestTime,
    /// Upstream servers tried, in order, `, `-separated.
    UpstreamAddr,
    /// Seconds to obtain a connection to each server tried.
    UpstreamConnectTime,
    /// Seconds to each server's response head.
    UpstreamHeaderTime,
    /// Seconds to each server's response end.
    UpstreamResponseTime,
    /// The Host header.
    Host,
    /// The User-Agent header.
    HttpUserAgent,
    /// The Referer header.
    HttpReferer,
    /// A random 32-hex-digit id, unique per request.
    RequestId,
    /// The site's name.
    Site,
    /// The client connection's id (`worker-serial`), as the error log shows it.
    Connection,
    /// The TLS version (`TLSv1.3`), empty for plain HTTP.
    SslProtocol,
    /// How a cached route answered: `HIT`, `MISS`, `EXPIRED`, `STALE`, `UPDATING`,
    /// `REVALIDATED`, `BYPASS` (nginx's `$upstream_cache_status`); `-` elsewhere.
    UpstreamCacheStatus,
}

impl Field {
    /// Its name in templates (without `$`) and as a JSON key.
    pub fn name(self) -> &'static str {
        match self {
            Field::RemoteAddr => "remote_addr",
            Field::RemoteUser => "remote_user",
            Field::TimeLocal => "time_local",
            Field::TimeIso8601 => "time_iso8601",
            Field::Request => "request",
            Field::RequestMethod => "request_method",
            Field::RequestUri => "request_uri",
            Field::ServerProtocol => "server_protocol",
            Field::Status => "status",
            Field::BodyBytesSent => "body_bytes_sent",
            Field::RequestTime => "request_time",
            Field::UpstreamAddr => "upstream_addr",
            Field::UpstreamConnectTime => "upstream_connect_time",
            Field::UpstreamHeaderTime => "upstream_header_time",
            Field::UpstreamResponseTime => "upstream_response_time",
            Field::Host => "host",
            Field::HttpUserAgent => "http_user_agent",
            Field::HttpReferer => "http_referer",
            Field::RequestId => "request_id",
            Field::Site => "site",
            Field::UpstreamCacheStatus => "upstream_cache_status",
            Field::Connection => "connection",
            Field::SslProtocol => "ssl_protocol",
        }
    }

    fn is_number(self) -> bool {
        matches!(
            self,
            Field::Status | Field::BodyBytesSent | Field::RequestTime
        )
    }
}

/// Fields of the `json` format, in order.
const JSON_FIELDS: [Field; 19] = [
    Field::TimeIso8601,
    Field::RemoteAddr,
    Field::Connection,
    Field::RequestId,
    Field::Site,
    Field::Host,
    Field::RequestMethod,
    Field::RequestUri,
    Field::ServerProtocol,
    Field::SslProtocol,
    Field::Status,
    Field::BodyBytesSent,
    Field::RequestTime,
    Field::UpstreamAddr,
    Field::UpstreamConnectTime,
    Field::UpstreamHeaderTime,
    Field::UpstreamResponseTime,
    Field::HttpReferer,
    Field::HttpUserAgent,
];

/// A piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Copied as is.
    Text(String),
    /// A field's value, escaped as nginx does (`-` when empty).
    Field(Field),
}

/// How lines are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogFormat {
    /// A template: `combined` is the template [`COMBINED`].
    Template(Vec<Piece>),
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    /// The default format: nginx's `combined`.
    pub fn combined() -> LogFormat {
        LogFormat::Template(parse_template(COMBINED).unwrap_or_default())
    }

    /// `combined`, `json`, or a template with `$field`s.
    pub fn parse(s: &str) -> Result<LogFormat, String> {
        match s {
            "combined" => Ok(LogFormat::combined()),
            "json" => Ok(LogFormat::Json),
            t if t.contains('$') => parse_template(t).map(LogFormat::Template),
            _ => Err(format!(
                "unknown access_log_format {s:?}: use \"combined\", \"json\" or a template of $fields"
            )),
        }
    }

    /// Whether a line shows `field` (the request id is made only when one does).
    pub fn uses(&self, field: Field) -> bool {
        match self {
            LogFormat::Json => JSON_FIELDS.contains(&field),
            LogFormat::Template(pieces) => pieces.contains(&Piece::Field(field)),
        }
    }
}

/// Parses a template: `$name` or `${name}` for fields, everything else literal.
pub fn parse_template(s: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut rest = s;
    while let Some(at) = rest.find('$') {
        text.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, next) = match after.strip_prefix('{') {
            Some(inner) => {
                let end = inner.find('}').ok_or("unclosed ${ in access_log_format")?;
                (&inner[..end], &inner[end + 1..])
            }
            None => {
                let end = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..end], &after[end..])
            }
        };
        let field = <Field as strum::IntoEnumIterator>::iter()
            .find(|f| f.name() == name)
            .ok_or_else(|| format!("unknown access log field ${name}"))?;
        if !text.is_empty() {
            pieces.push(Piece::Text(std::mem::take(&mut text)));
        }
        pieces.push(Piece::Field(field));
        rest = next;
    }
    text.push_str(rest);
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(pieces)
}

/// One server's timings for a request, in microseconds (`None`: that step was not reached).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UpstreamTimes {
    /// To a connection (pooled or new).
    pub connect: Option<u64>,
    /// To the response head.
    pub header: Option<u64>,
    /// To the response end.
    pub response: Option<u64>,
}

/// One finished request, as logged.
#[derive(Debug)]
pub struct Entry<'a> {
    /// Client address.
    pub client: IpAddr,
    /// Request method (`-` when the head was refused).
    pub method: &'a [u8],
    /// Request target.
    pub target: &'a [u8],
    /// The client's protocol as nginx's `$server_protocol` names it (`HTTP/1.1`, `HTTP/2.0`).
    pub protocol: &'a str,
    /// Status sent (499 when the client went away first).
    pub status: u16,
    /// Body bytes sent to the client.
    pub bytes: u64,
    /// Time from head received to response finished, in microseconds.
    pub micros: u64,
    /// The Host header.
    pub host: &'a [u8],
    /// The User-Agent header.
    pub user_agent: &'a [u8],
    /// The Referer header.
    pub referer: &'a [u8],
    /// Upstream servers tried, in order.
    pub upstreams: &'a [Address],
    /// Each tried server's timings, in the same order.
    pub upstream_times: &'a [UpstreamTimes],
    /// The site's name.
    pub site: &'a str,
    /// The request id (empty unless the format shows it).
    pub request_id: &'a str,
    /// The client connection's id.
    pub connection: (usize, u64),
    /// The TLS version, empty for plain HTTP.
    pub tls_version: &'a str,
    /// The cache status on a cached route, else empty.
    pub cache_status: &'a str,
}

/// The current second in the two formats lines use, cached by the caller.
#[derive(Debug, Default, Clone)]
pub struct Clock {
    second: i64,
    /// `23/Nov/2026:09:30:00 +0000`.
    pub local: String,
    /// `2026-11-23T09:30:00+00:00`.
    pub iso8601: String,
}

impl Clock {
    /// Brings the formatted times to the current second (formats once per second).
    pub fn tick(&mut self) {
        // The second from the vDSO clock; the time zone is looked up only when it changes.
        let second = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        if second != self.second || self.local.is_empty() {
            let now = chrono::Local::now();
            self.second = second;
            self.local = now.format("%d/%b/%Y:%H:%M:%S %z").to_string();
            self.iso8601 = now.format("%Y-%m-%dT%H:%M:%S%:z").to_string();
        }
    }
}

/// Appends one line for `e` in `format`.
pub fn write_line(out: &mut Vec<u8>, format: &LogFormat, e: &Entry<'_>, clock: &Clock) {
    match format {
        LogFormat::Template(pieces) => {
            for piece in pieces {
                match piece {
                    Piece::Text(t) => out.extend_from_slice(t.as_bytes()),
                    Piece::Field(f) => {
                        let start = out.len();
                        write_field(out, *f, e, clock, Escape::Nginx);
                        if out.len() == start {
                            out.push(b'-');
                        }
                    }
                }
            }
        }
        LogFormat::Json => {
            out.push(b'{');
            for (i, f) in JSON_FIELDS.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.push(b'"');
                out.extend_from_slice(f.name().as_bytes());
                out.extend_from_slice(b"\":");
                let quoted = !f.is_number();
                if quoted {
                    out.push(b'"');
                }
                write_field(out, *f, e, clock, Escape::Json);
                if quoted {
                    out.push(b'"');
                }
            }
            out.push(b'}');
        }
    }
    out.push(b'\n');
}

#[derive(Clone, Copy)]
enum Escape {
    Nginx,
    Json,
}

fn write_field(out: &mut Vec<u8>, f: Field, e: &Entry<'_>, clock: &Clock, esc: Escape) {
    let text = |out: &mut Vec<u8>, s: &[u8]| put_escaped(out, s, esc);
    match f {
        Field::RemoteAddr => {
            let _ = write!(out, "{}", e.client);
        }
        Field::RemoteUser => {
            if matches!(esc, Escape::Nginx) {
                out.push(b'-');
            }
        }
        Field::TimeLocal => out.extend_from_slice(clock.local.as_bytes()),
        Field::TimeIso8601 => out.extend_from_slice(clock.iso8601.as_bytes()),
        Field::Request => {
            text(out, e.method);
            out.push(b' ');
            text(out, e.target);
            out.push(b' ');
            out.extend_from_slice(e.protocol.as_bytes());
        }
        Field::RequestMethod => text(out, e.method),
        Field::RequestUri => text(out, e.target),
        Field::ServerProtocol => out.extend_from_slice(e.protocol.as_bytes()),
        Field::Status => put_decimal(out, u64::from(e.status)),
        Field::BodyBytesSent => put_decimal(out, e.bytes),
        Field::RequestTime => put_seconds(out, e.micros),
        Field::UpstreamAddr => {
            for (i, u) in e.upstreams.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b", ");
                }
                let mut s = String::new();
                let _ = write!(s, "{u}");
                text(out, s.as_bytes());
            }
        }
        Field::UpstreamConnectTime => put_times(out, e.upstream_times, |t| t.connect),
        Field::UpstreamHeaderTime => put_times(out, e.upstream_times, |t| t.header),
        Field::UpstreamResponseTime => put_times(out, e.upstream_times, |t| t.response),
        Field::Host => text(out, e.host),
        Field::HttpUserAgent => text(out, e.user_agent),
        Field::HttpReferer => text(out, e.referer),
        Field::RequestId => text(out, e.request_id.as_bytes()),
        Field::Site => text(out, e.site.as_bytes()),
        Field::SslProtocol => text(out, e.tls_version.as_bytes()),
        Field::UpstreamCacheStatus => text(out, e.cache_status.as_bytes()),
        Field::Connection => {
            put_decimal(out, e.connection.0 as u64);
            out.push(b'-');
            put_decimal(out, e.connection.1);
        }
    }
}

/// `1.234` seconds from microseconds (milliseconds shown, as nginx does).
fn put_seconds(out: &mut Vec<u8>, micros: u64) {
    let millis = micros / 1000;
    put_decimal(out, millis / 1000);
    let frac = millis % 1000;
    out.extend_from_slice(&[
        b'.',
        b'0' + (frac / 100) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ]);
}

/// Each server's time, `, `-separated; `-` for a step a server did not reach.
fn put_times(out: &mut Vec<u8>, times: &[UpstreamTimes], pick: fn(&UpstreamTimes) -> Option<u64>) {
    for (i, t) in times.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        match pick(t) {
            Some(us) => put_seconds(out, us),
            None => out.push(b'-'),
        }
    }
}

/// Appends `s` escaped: nginx's way (`"`, `\`, control and non-ASCII bytes as `\xHH`) or as a
/// JSON string body (invalid UTF-8 replaced).
fn put_escaped(out: &mut Vec<u8>, s: &[u8], esc: Escape) {
    let plain = |b: &u8| (b' '..=b'~').contains(b) && *b != b'"' && *b != b'\\';
    if s.iter().all(plain) {
        out.extend_from_slice(s);
        return;
    }
    match esc {
        Escape::Nginx => {
            for &b in s {
                if plain(&b) {
                    out.push(b);
                } else {
                    let _ = write!(out, "\\x{b:02X}");
                }
            }
        }
        Escape::Json => {
            let mut t = String::new();
            for c in String::from_utf8_lossy(s).chars() {
                match c {
                    '"' => t.push_str("\\\""),
                    '\\' => t.push_str("\\\\"),
                    '\n' => t.push_str("\\n"),
                    '\r' => t.push_str("\\r"),
                    '\t' => t.push_str("\\t"),
                    c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                        let _ = write!(t, "\\u{:04x}", c as u32);
                    }
                    c => t.push(c),
                }
            }
            out.extend_from_slice(t.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry<'a>(upstreams: &'a [Address], times: &'a [UpstreamTimes]) -> Entry<'a> {
        Entry {
            client: "10.1.2.3".parse().unwrap(),
            method: b"GET",
            target: b"/a?b=\"c\"",
            protocol: "HTTP/1.1",
            status: 200,
            bytes: 1234,
            micros: 1_234_567,
            host: b"example.com",
            user_agent: b"curl/8.0 \xff",
            referer: b"",
            upstreams,
            upstream_times: times,
            site: "shop",
            request_id: "",
            connection: (1, 7),
            tls_version: "",
            cache_status: "",
        }
    }

    fn clock() -> Clock {
        Clock {
            second: 1,
            local: "23/Nov/2026:09:30:00 +0000".into(),
            iso8601: "2026-11-23T09:30:00+00:00".into(),
        }
    }

    #[test]
    fn combined_escapes_like_nginx() {
        let mut out = Vec::new();
        write_line(&mut out, &LogFormat::combined(), &entry(&[], &[]), &clock());
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "10.1.2.3 - - [23/Nov/2026:09:30:00 +0000] \"GET /a?b=\\x22c\\x22 HTTP/1.1\" 200 \
             1234 \"-\" \"curl/8.0 \\xFF\"\n"
        );
    }

    #[test]
    fn json_lines_parse_with_times_per_server() {
        let ups = [
            Address::Tcp("127.0.0.1:1".parse().unwrap()),
            Address::Tcp("127.0.0.1:2".parse().unwrap()),
        ];
        let times = [
            UpstreamTimes {
                connect: Some(1000),
                header: None,
                response: None,
            },
            UpstreamTimes {
                connect: Some(0),
                header: Some(2500),
                response: Some(3000),
            },
        ];
        let mut out = Vec::new();
        write_line(&mut out, &LogFormat::Json, &entry(&ups, &times), &clock());
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["status"], 200);
        assert_eq!(v["request_uri"], "/a?b=\"c\"");
        assert_eq!(v["upstream_addr"], "127.0.0.1:1, 127.0.0.1:2");
        assert_eq!(v["upstream_header_time"], "-, 0.002");
        assert_eq!(v["request_time"], 1.234);
        assert_eq!(v["http_user_agent"], "curl/8.0 \u{fffd}");
    }

    #[test]
    fn templates_name_fields() {
        let f = LogFormat::parse("$remote_addr ${status}ms $request_time").unwrap();
        let mut out = Vec::new();
        write_line(&mut out, &f, &entry(&[], &[]), &clock());
        assert_eq!(out, b"10.1.2.3 200ms 1.234\n");
        assert!(LogFormat::parse("$nope").unwrap_err().contains("$nope"));
        assert!(LogFormat::parse("plain").is_err());
        assert!(f.uses(Field::Status) && !f.uses(Field::RequestId));
    }
}
