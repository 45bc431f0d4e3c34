//! The one error model of the request path. Every failure is an [`Error`]: what went wrong
//! ([`Kind`]), which side caused it ([`Side`]), whether the request may be sent again
//! ([`Retry`]), and whether part of the response already reached the client.
//!
//! [`Error::answer`] is the only place that turns a failure into a status code, a decision to
//! close the connection, and the counter to bump. No other module writes a status literal for
//! a failure.

use crate::net::Address;
use std::fmt;
use std::io;

use crate::http1::{RequestError, ResponseError};
use crate::observe::metrics::Counter;

/// Who caused a failure: decides whom the logs blame and which timeouts applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client: bad request, timeout, or it went away.
    Client,
    /// An upstream server: refused, reset, timed out or answered badly.
    Upstream,
    /// The proxy's own configuration (no route).
    Local,
}

/// Whether a failed request may be sent again, on another connection or server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// The request never left the proxy (the connection failed): any request may be resent;
    /// nothing of its body was read past what is buffered.
    NotSent,
    /// The request was sent but no response byte came back: only a replayable request
    /// (idempotent, body fully buffered) may be resent.
    NoResponse,
    /// An HTTP/2 server refused the stream unprocessed (REFUSED_STREAM, or above its GOAWAY's
    /// last stream): any method may be resent, if its body is still buffered whole.
    Refused,
    /// Never: the failure is the client's, or a response has started.
    Never,
}

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The request head or body framing is malformed or ambiguous.
    BadRequest(&'static str),
    /// The request line alone exceeds the head limit.
    UriTooLong,
    /// The request head exceeds the head limit or has too many fields.
    HeadTooLarge,
    /// A transfer coding or request form the proxy does not implement.
    NotImplemented(&'static str),
    /// An `Expect` other than `100-continue`.
    ExpectationFailed,
    /// The client stopped sending in the middle of a head or body.
    ClientTimeout,
    /// The client closed, reset, or stopped reading before its response was complete.
    ClientClosed,
    /// No site or route matches the request.
    NoRoute,
    /// The request's Host names a site other than the one its TLS connection was made for,
    /// and one of them asks for client certificates (421: the client connects again).
    Misdirected,
    /// The route's `access` rules refuse the client (or its authorization service, 403).
    AccessDenied,
    /// The route's authorization service asks for credentials (401).
    Unauthorized,
    /// The route's authorization service failed or answered neither 2xx, 401 nor 403.
    AuthFailed,
    /// Over a `limit_req` rate or a `limit_conn` count: answered with this status (429
    /// unless the route says otherwise).
    Limited(u16),
    /// The rules changed the path more than 10 times (nginx's rewrite cycle), or to one that
    /// does not start with `/`.
    RewriteFailed,
    /// The Content-Length exceeds the route's `client_max_body_size`.
    BodyOverLimit,
    /// A regular expression on the backtracking engine ran past its step limit.
    RegexLimit,
    /// A static-file route has nothing at this path.
    FileNotFound,
    /// A static-file route refuses this path (dotfile, symlink out, permissions, special file,
    /// directory without index).
    FileForbidden,
    /// The file system failed while opening or reading a file.
    FileFailed,
    /// A file became shorter than its announced length while it was sent.
    FileTruncated,
    /// An encoder failed to compress a response (it cannot run out of input; this is an
    /// allocation or library failure).
    CompressFailed,
    /// No upstream connection within the connect timeout.
    ConnectTimeout,
    /// The upstream refused the connection (nothing listens there).
    ConnectRefused,
    /// The upstream could not be reached (unreachable, or another connect error).
    ConnectFailed,
    /// No local ephemeral port was free to connect from (EADDRNOTAVAIL): not the server's fault.
    PortsExhausted,
    /// Every server of the group is down (active checks) or the group has none.
    NoLiveServers,
    /// The server was at its `max_conns` and no connection came free within `queue_timeout`.
    QueueTimeout,
    /// A request body larger than the proxy may hold to learn its length.
    BodyTooLarge,
    /// The upstream closed or reset the connection before sending a byte of response.
    UpstreamClosed,
    /// The upstream connection failed after the response began, or while the request was sent.
    UpstreamFailed,
    /// The upstream sent nothing within its read (or send) timeout.
    UpstreamTimeout,
    /// The upstream's response is not valid HTTP/1.x, or its framing is broken.
    BadResponse(&'static str),
    /// The upstream switched protocols although the client did not ask to.
    UnexpectedUpgrade,
    /// An answer of this code that an error page replaces: a rule's `return`, or an
    /// upstream's under `intercept_errors` (its response is discarded).
    Replaced(u16),
    /// The request said `only-if-cached` and its route's cache holds nothing that answers it
    /// (504, RFC 9111 section 5.2.1.7).
    NotCached,
}

impl Kind {
    /// Which side caused this kind of failure.
    pub fn side(self) -> Side {
        match self {
            Kind::BadRequest(_)
            | Kind::UriTooLong
            | Kind::HeadTooLarge
            | Kind::NotImplemented(_)
            | Kind::ExpectationFailed
            | Kind::ClientTimeout
            | Kind::ClientClosed
            | Kind::BodyTooLarge
            | Kind::BodyOverLimit => Side::Client,
            Kind::NoRoute
            | Kind::Misdirected
            | Kind::AccessDenied
            | Kind::Unauthorized
            | Kind::AuthFailed
            | Kind::Limited(_)
            | Kind::RewriteFailed
            | Kind::NotCached
            | Kind::RegexLimit
            | Kind::FileNotFound
            | Kind::FileForbidden
            | Kind::FileFailed
            | Kind::FileTruncated
            | Kind::CompressFailed
            | Kind::Replaced(_) => Side::Local,
            Kind::ConnectTimeout
            | Kind::ConnectRefused
            | Kind::ConnectFailed
            | Kind::PortsExhausted
            | Kind::NoLiveServers
            | Kind::QueueTimeout
            | Kind::UpstreamClosed
            | Kind::UpstreamFailed
            | Kind::UpstreamTimeout
            | Kind::BadResponse(_)
            | Kind::UnexpectedUpgrade => Side::Upstream,
        }
    }

    /// A short reason for logs.
    pub fn reason(self) -> &'static str {
        match self {
            Kind::BadRequest(r) | Kind::NotImplemented(r) | Kind::BadResponse(r) => r,
            Kind::UriTooLong => "request line too long",
            Kind::HeadTooLarge => "request head too large",
            Kind::ExpectationFailed => "unsupported expectation",
            Kind::ClientTimeout => "client timed out",
            Kind::ClientClosed => "client closed the connection",
            Kind::NoRoute => "no route",
            Kind::Misdirected => {
                "Host names another site than the TLS connection's (client certificates)"
            }
            Kind::AccessDenied => "access denied by the route's rules",
            Kind::Unauthorized => "credentials required",
            Kind::AuthFailed => "authorization service failed",
            Kind::Limited(_) => "over a request rate or concurrency limit",
            Kind::NotCached => "only-if-cached and nothing stored answers it",
            Kind::RewriteFailed => {
                "rules changed the path more than 10 times, or to one not starting with '/'"
            }
            Kind::BodyOverLimit => "request body larger than client_max_body_size",
            Kind::RegexLimit => "a regular expression ran past its step limit",
            Kind::FileNotFound => "file not found",
            Kind::FileForbidden => "file access forbidden",
            Kind::FileFailed => "file system error",
            Kind::FileTruncated => "file shrank while being sent",
            Kind::CompressFailed => "compression failed",
            Kind::ConnectTimeout => "upstream connect timed out",
            Kind::ConnectRefused => "upstream refused the connection",
            Kind::ConnectFailed => "upstream connect failed",
            Kind::PortsExhausted => "no local port free to connect upstream (EADDRNOTAVAIL)",
            Kind::NoLiveServers => "no live upstream server",
            Kind::QueueTimeout => "no upstream connection came free within queue_timeout",
            Kind::BodyTooLarge => "request body too large to buffer",
            Kind::UpstreamClosed => "upstream closed before responding",
            Kind::UpstreamFailed => "upstream connection failed",
            Kind::UpstreamTimeout => "upstream timed out",
            Kind::UnexpectedUpgrade => "upstream switched protocols unasked",
            Kind::Replaced(_) => "answer replaced by an error page",
        }
    }
}

/// A failure on the request path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// What went wrong.
    pub kind: Kind,
    /// Whether the request may be sent again.
    pub retry: Retry,
    /// The status already sent to the client when the failure came mid-response; the client
    /// can then get no error status, only a closed connection.
    pub started: Option<u16>,
    /// The upstream server involved, for logs.
    pub server: Option<Address>,
    /// The HTTP/2 error code an upstream stream was reset with, when it means something to the
    /// client too (CANCEL, ENHANCE_YOUR_CALM, INADEQUATE_SECURITY: gRPC reads them as
    /// CANCELLED, RESOURCE_EXHAUSTED and PERMISSION_DENIED): an HTTP/2 client's stream is reset
    /// with it instead of INTERNAL_ERROR.
    pub reset: Option<u32>,
}

/// What the client gets for a failure, and how it is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// The status to send, when the client can still get one.
    pub send: Option<u16>,
    /// The status for the access log and the response counters (499: the client left).
    pub logged: u16,
    /// Whether the connection may stay open afterwards (only when the request was read
    /// whole; the caller checks that).
    pub keep_alive: bool,
    /// The counter that names this failure.
    pub counter: Counter,
}

/// The error code of an upstream HTTP/2 server's reset worth passing on to the client (see
/// [`Error::reset`]); the others (PROTOCOL_ERROR and the like) are the upstream hop's own.
fn passed_on_reset(e: &io::Error) -> Option<u32> {
    let h2 = e.get_ref()?.downcast_ref::<h2::Error>()?;
    let reason = h2.reason().filter(|_| h2.is_reset() && h2.is_remote())?;
    let passed = [
        h2::Reason::CANCEL,
        h2::Reason::ENHANCE_YOUR_CALM,
        h2::Reason::INADEQUATE_SECURITY,
    ];
    passed.contains(&reason).then(|| u32::from(reason))
}

impl Error {
    /// A failure of `kind` that allows no retry.
    pub fn new(kind: Kind) -> Error {
        Error {
            kind,
            retry: Retry::Never,
            started: None,
            server: None,
            reset: None,
        }
    }

    /// A failure to connect: nothing was sent, so the request may go elsewhere.
    pub fn connect(kind: Kind) -> Error {
        Error {
            kind,
            retry: Retry::NotSent,
            started: None,
            server: None,
            reset: None,
        }
    }

    /// Sending the request, or waiting for the first response byte, failed. A closed or reset
    /// connection may be retried (a pooled connection the upstream had just closed); a timeout
    /// is not, as the upstream may still be working on the request.
    pub fn no_response(e: &io::Error) -> Error {
        if let Some(client) = Error::clients_body(e) {
            return client;
        }
        match e.kind() {
            io::ErrorKind::TimedOut => Error::new(Kind::UpstreamTimeout),
            // An HTTP/2 server refused the stream (REFUSED_STREAM, or above its GOAWAY's last
            // stream): it never processed the request, which may go anywhere again.
            io::ErrorKind::ConnectionRefused => Error {
                retry: Retry::Refused,
                ..Error::new(Kind::UpstreamClosed)
            },
            _ => Error {
                retry: Retry::NoResponse,
                ..Error::new(Kind::UpstreamClosed)
            },
        }
    }

    /// Reading from or writing to the upstream failed.
    pub fn upstream_io(e: &io::Error) -> Error {
        if let Some(client) = Error::clients_body(e) {
            return client;
        }
        let kind = match e.kind() {
            io::ErrorKind::TimedOut => Kind::UpstreamTimeout,
            io::ErrorKind::InvalidData => Kind::BadResponse("invalid response body framing"),
            _ => Kind::UpstreamFailed,
        };
        Error {
            reset: passed_on_reset(e),
            ..Error::new(kind)
        }
    }

    /// A request body that failed on its way to the upstream by its own fault: a gRPC-Web
    /// `-text` body that is not base64.
    fn clients_body(e: &io::Error) -> Option<Error> {
        let inner = e.get_ref()?;
        inner
            .is::<crate::grpc::web::NotBase64>()
            .then(|| Error::new(Kind::BadRequest("grpc-web-text body is not base64")))
    }

    /// Reading from the client failed (a timeout is the client's slowness, anything else its
    /// departure).
    pub fn client_read(e: &io::Error) -> Error {
        Error::new(match e.kind() {
            io::ErrorKind::TimedOut => Kind::ClientTimeout,
            _ => Kind::ClientClosed,
        })
    }

    /// Writing to the client failed or timed out: it is gone or not reading.
    pub fn client_write() -> Error {
        Error::new(Kind::ClientClosed)
    }

    /// Names the upstream server involved.
    pub fn at(mut self, server: Address) -> Error {
        self.server = Some(server);
        self
    }

    /// Forbids resending: something of the response already arrived.
    pub fn no_retry(mut self) -> Error {
        self.retry = Retry::Never;
        self
    }

    /// Marks a failure that came after the response head with `status` reached the client.
    pub fn after_head(mut self, status: u16) -> Error {
        self.started = Some(status);
        self.retry = Retry::Never;
        self
    }

    /// Which side caused it.
    pub fn side(&self) -> Side {
        self.kind.side()
    }

    /// Whether the request may be resent: `idempotent` says its method allows repeating it,
    /// `body_in_hand` that its whole body is still buffered.
    pub fn may_retry(&self, idempotent: bool, body_in_hand: bool) -> bool {
        match self.retry {
            Retry::NotSent => true,
            Retry::NoResponse => idempotent && body_in_hand,
            Retry::Refused => body_in_hand,
            Retry::Never => false,
        }
    }

    /// The status, connection decision and counter for this failure. The one mapping from
    /// failures to responses.
    pub fn answer(&self) -> Answer {
        let (status, counter) = match self.kind {
            Kind::BadRequest(_) => (400, Counter::BadRequests),
            Kind::UriTooLong => (414, Counter::BadRequests),
            Kind::HeadTooLarge => (431, Counter::BadRequests),
            Kind::NotImplemented(_) => (501, Counter::BadRequests),
            Kind::ExpectationFailed => (417, Counter::BadRequests),
            Kind::ClientTimeout => (408, Counter::ClientTimeouts),
            Kind::ClientClosed => (499, Counter::ClientClosed),
            Kind::NoRoute => (404, Counter::NoRoute),
            Kind::Misdirected => (421, Counter::AccessDenied),
            Kind::AccessDenied => (403, Counter::AccessDenied),
            Kind::Unauthorized => (401, Counter::AuthRefusals),
            Kind::AuthFailed => (500, Counter::AuthFailures),
            Kind::Limited(status) => (status, Counter::LimitRejects),
            Kind::RewriteFailed => (500, Counter::RewriteFailures),
            Kind::BodyOverLimit => (413, Counter::BadRequests),
            Kind::RegexLimit => (500, Counter::RewriteFailures),
            Kind::FileNotFound => (404, Counter::FilesNotFound),
            Kind::FileForbidden => (403, Counter::FilesForbidden),
            Kind::FileFailed => (500, Counter::FilesErrors),
            Kind::FileTruncated => (500, Counter::FilesTruncated),
            Kind::CompressFailed => (500, Counter::CompressFailures),
            Kind::ConnectTimeout | Kind::UpstreamTimeout | Kind::NotCached => {
                (504, Counter::GatewayTimeout)
            }
            Kind::NoLiveServers => (503, Counter::UpstreamNoLiveServers),
            Kind::QueueTimeout => (503, Counter::UpstreamQueueTimeouts),
            Kind::BodyTooLarge => (413, Counter::BadRequests),
            Kind::ConnectRefused
            | Kind::ConnectFailed
            | Kind::PortsExhausted
            | Kind::UpstreamClosed
            | Kind::UpstreamFailed
            | Kind::BadResponse(_)
            | Kind::UnexpectedUpgrade => (502, Counter::BadGateway),
            Kind::Replaced(code) => (code, Counter::ErrorPages),
        };
        let send = match (self.started, self.kind) {
            (Some(_), _) | (None, Kind::ClientClosed) => None,
            (None, _) => Some(status),
        };
        Answer {
            send,
            logged: self.started.unwrap_or(status),
            keep_alive: matches!(
                self.kind,
                Kind::NoRoute
                    | Kind::FileNotFound
                    | Kind::FileForbidden
                    | Kind::AccessDenied
                    | Kind::Unauthorized
                    | Kind::Limited(_)
            ),
            counter,
        }
    }
}

impl Kind {
    /// The gRPC status a gRPC client gets for this failure (the proxy answers a gRPC request
    /// as gRPC does, HTTP 200 with `grpc-status`, not with an HTTP error its client library
    /// would report as UNKNOWN): UNAVAILABLE when no server could take the call, DEADLINE_EXCEEDED
    /// on a timeout, RESOURCE_EXHAUSTED past a limit; the rest as gRPC's HTTP-to-gRPC table.
    pub fn grpc_status(self) -> u8 {
        use crate::grpc::status::*;
        match self {
            Kind::BadRequest(_) | Kind::ExpectationFailed => INTERNAL,
            Kind::NotImplemented(_) | Kind::NoRoute | Kind::FileNotFound => UNIMPLEMENTED,
            Kind::UriTooLong
            | Kind::HeadTooLarge
            | Kind::BodyTooLarge
            | Kind::BodyOverLimit
            | Kind::Limited(_)
            | Kind::QueueTimeout => RESOURCE_EXHAUSTED,
            Kind::ClientTimeout | Kind::ConnectTimeout | Kind::UpstreamTimeout => DEADLINE_EXCEEDED,
            Kind::NotCached => UNAVAILABLE,
            Kind::ClientClosed => CANCELLED,
            Kind::FileForbidden | Kind::AccessDenied | Kind::Misdirected => PERMISSION_DENIED,
            Kind::Unauthorized => UNAUTHENTICATED,
            Kind::AuthFailed => INTERNAL,
            Kind::RewriteFailed | Kind::RegexLimit | Kind::Replaced(_) => INTERNAL,
            Kind::FileFailed | Kind::FileTruncated | Kind::CompressFailed => INTERNAL,
            Kind::ConnectRefused
            | Kind::ConnectFailed
            | Kind::PortsExhausted
            | Kind::NoLiveServers
            | Kind::UpstreamClosed
            | Kind::UpstreamFailed
            | Kind::BadResponse(_)
            | Kind::UnexpectedUpgrade => UNAVAILABLE,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.reason())?;
        if let Some(status) = self.started {
            write!(f, " (after a {status} response head was sent)")?;
        }
        Ok(())
    }
}

impl From<RequestError> for Error {
    fn from(e: RequestError) -> Error {
        Error::new(match e {
            RequestError::Malformed(r) => Kind::BadRequest(r),
            RequestError::UriTooLong => Kind::UriTooLong,
            RequestError::HeadTooLarge => Kind::HeadTooLarge,
            RequestError::NotImplemented(r) => Kind::NotImplemented(r),
            RequestError::ExpectationFailed => Kind::ExpectationFailed,
        })
    }
}

impl From<ResponseError> for Error {
    fn from(e: ResponseError) -> Error {
        Error::new(match e {
            ResponseError::Malformed(r) => Kind::BadResponse(r),
            ResponseError::TooLarge => Kind::BadResponse("response head too large"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_the_readme() {
        let status = |k| Error::new(k).answer().send;
        assert_eq!(status(Kind::BadRequest("x")), Some(400));
        assert_eq!(status(Kind::HeadTooLarge), Some(431));
        assert_eq!(status(Kind::UriTooLong), Some(414));
        assert_eq!(status(Kind::NotImplemented("x")), Some(501));
        assert_eq!(status(Kind::NoRoute), Some(404));
        assert_eq!(status(Kind::FileNotFound), Some(404));
        assert_eq!(status(Kind::FileForbidden), Some(403));
        assert_eq!(status(Kind::FileFailed), Some(500));
        assert_eq!(status(Kind::ConnectFailed), Some(502));
        assert_eq!(status(Kind::ConnectRefused), Some(502));
        assert_eq!(status(Kind::NoLiveServers), Some(503));
        assert_eq!(status(Kind::ConnectTimeout), Some(504));
        assert_eq!(status(Kind::UpstreamTimeout), Some(504));
        assert_eq!(status(Kind::ClientClosed), None);
        assert_eq!(Error::new(Kind::ClientClosed).answer().logged, 499);
    }

    #[test]
    fn a_started_response_gets_no_second_status() {
        let e = Error::new(Kind::UpstreamTimeout).after_head(200);
        let a = e.answer();
        assert_eq!(a.send, None);
        assert_eq!(a.logged, 200);
        assert_eq!(a.counter, Counter::GatewayTimeout);
        assert!(!e.may_retry(true, true));
    }

    #[test]
    fn retry_needs_a_replayable_request() {
        let refused = Error::connect(Kind::ConnectFailed);
        assert!(refused.may_retry(false, true) && refused.may_retry(false, false));
        let closed = Error::no_response(&io::ErrorKind::ConnectionReset.into());
        assert_eq!(closed.kind, Kind::UpstreamClosed);
        assert!(closed.may_retry(true, true) && !closed.may_retry(false, true));
        assert!(!Error::new(Kind::BadResponse("x")).may_retry(true, true));
        // A stream an HTTP/2 server refused: any method, but only with its body in hand.
        let unprocessed = Error::no_response(&io::ErrorKind::ConnectionRefused.into());
        assert!(unprocessed.may_retry(false, true) && !unprocessed.may_retry(true, false));
        assert_eq!(closed.side(), Side::Upstream);
        assert_eq!(Error::new(Kind::NoRoute).side(), Side::Local);
    }

    #[test]
    fn only_no_route_keeps_the_connection() {
        assert!(Error::new(Kind::NoRoute).answer().keep_alive);
        assert!(!Error::new(Kind::BadRequest("x")).answer().keep_alive);
    }
}
