//! The TLS handshake of an accepted connection: plain HTTP sent to the TLS port gets a 400 and
//! a close (as nginx answers), a handshake that stalls is closed after the timeout, and every
//! failure is counted by kind and logged at debug level only (scanners probe all day).

use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

use super::client_auth::ByName;
use crate::net::tls_socket::TlsSocket;
use crate::observe::metrics::{Counter, Shard};

/// The answer to plain HTTP on a TLS port, around its `Date` field.
const PLAIN_HTTP: [&[u8]; 2] = [
    b"HTTP/1.1 400 Bad Request\r\nDate: ",
    b"\r\nContent-Type: text/plain\r\nContent-Length: 48\r\nConnection: close\r\n\r\nThis port speaks HTTPS: use https:// to reach it\n",
];

/// Runs the handshake with `config`, or with the config `by_name` has for the client's SNI
/// (a site asking for client certificates); `None` when it failed (counted).
pub async fn handshake(
    tcp: TcpStream,
    (config, by_name): (Arc<ServerConfig>, Option<Arc<ByName>>),
    timeout: Duration,
    counters: &Shard,
) -> Option<TlsStream<TlsSocket>> {
    let deadline = tokio::time::Instant::now() + timeout;
    // A TLS record starts with 0x16 (handshake); a letter is an HTTP method.
    let mut first = [0u8; 1];
    match tokio::time::timeout_at(deadline, tcp.peek(&mut first)).await {
        Ok(Ok(1..)) if first[0].is_ascii_uppercase() => {
            counters.inc(Counter::TlsPlainHttp);
            let mut tcp = tcp;
            let answer = [
                PLAIN_HTTP[0],
                &crate::http1::date::http_date_now(),
                PLAIN_HTTP[1],
            ]
            .concat();
            let _ = tokio::time::timeout_at(deadline, tcp.write_all(&answer)).await;
            return None;
        }
        Ok(Ok(1..)) => {}
        Ok(_) => {
            counters.inc(Counter::TlsTruncated);
            return None;
        }
        Err(_) => {
            counters.inc(Counter::TlsHandshakeTimeouts);
            return None;
        }
    }
    let accept = accept(TlsSocket::Epoll(tcp), config, by_name);
    match tokio::time::timeout_at(deadline, accept).await {
        Ok(Ok(mut stream)) => {
            if stream.get_ref().1.alpn_protocol() == Some(crate::acme::ACME_TLS_ALPN) {
                // A TLS-ALPN-01 check (RFC 8737): the handshake was the answer; it ends here.
                let _ = tokio::time::timeout_at(deadline, stream.shutdown()).await;
                return None;
            }
            counters.inc(Counter::TlsHandshakes);
            if stream.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
                counters.inc(Counter::TlsResumed);
            }
            Some(stream)
        }
        Ok(Err(e)) => {
            let kind = failure(&e);
            counters.inc(kind);
            tracing::debug!("TLS handshake failed ({}): {e}", kind.name());
            None
        }
        Err(_) => {
            counters.inc(Counter::TlsHandshakeTimeouts);
            None
        }
    }
}

/// The handshake itself: with a site's own config when `by_name` has one for the SNI; a
/// client chain longer than the site's verification depth fails it.
async fn accept(
    tcp: TlsSocket,
    config: Arc<ServerConfig>,
    by_name: Option<Arc<ByName>>,
) -> std::io::Result<TlsStream<TlsSocket>> {
    let Some(by_name) = by_name else {
        return tokio_rustls::TlsAcceptor::from(config).accept(tcp).await;
    };
    let acceptor = rustls::server::Acceptor::default();
    let start = tokio_rustls::LazyConfigAcceptor::new(acceptor, tcp).await?;
    let site = {
        let hello = start.client_hello();
        let mut offered = hello.alpn().into_iter().flatten().peekable();
        let acme_check =
            offered.peek().is_some() && offered.all(|p| p == crate::acme::ACME_TLS_ALPN);
        // A CA's TLS-ALPN-01 check is answered without asking it for a certificate.
        if acme_check {
            None
        } else {
            by_name.find(hello.server_name())
        }
    };
    let Some((site_config, depth)) = site else {
        return start.into_stream(config).await;
    };
    let stream = start.into_stream(site_config).await?;
    let chain = stream.get_ref().1.peer_certificates().unwrap_or_default();
    if !super::client_auth::within_depth(chain, depth) {
        return Err(std::io::Error::other(rustls::Error::General(format!(
            "the client's chain is longer than verify_depth {depth}"
        ))));
    }
    Ok(stream)
}

/// The counter of a failed handshake.
fn failure(e: &std::io::Error) -> Counter {
    let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) else {
        return Counter::TlsTruncated;
    };
    match tls {
        rustls::Error::InvalidMessage(_)
        | rustls::Error::InappropriateHandshakeMessage { .. }
        | rustls::Error::InappropriateMessage { .. } => Counter::TlsBadHello,
        rustls::Error::PeerIncompatible(_)
        | rustls::Error::NoCertificatesPresented
        | rustls::Error::General(_) => Counter::TlsIncompatible,
        rustls::Error::AlertReceived(_) => Counter::TlsAlertReceived,
        _ => Counter::TlsOtherFailures,
    }
}
