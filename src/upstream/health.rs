//! One active health check of one server: a TCP connect, an HTTP request (HTTP/1.1, or HTTP/2
//! for an `h2`/`h2c` group; over TLS for a TLS group, handshake and verification included)
//! whose status must fall in the expected range, or gRPC's health service answering SERVING,
//! all within the check's timeout. Runs on the control thread;
//! the rise/fall bookkeeping that turns results into up and down is in `control`.

use crate::net::Address;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::connect::{open, open_with};
use crate::config::{HealthCheck, Probe};
use crate::tls::client::UpstreamTls;

/// Most response bytes read to find the status line.
const MAX_CHECK_RESPONSE: usize = 8192;

/// Runs one check; Ok when the server is healthy, else why not.
/// `http2`: the group speaks HTTP/2, and so do its HTTP and gRPC checks.
pub async fn check(
    addr: &Address,
    check: &HealthCheck,
    tls: Option<&UpstreamTls>,
    http2: bool,
) -> Result<(), String> {
    let probe = async {
        match &check.probe {
            Probe::Http { .. } | Probe::Grpc { .. } if http2 => {
                probe_http2(addr, &check.probe, tls).await
            }
            _ => probe(addr, &check.probe, (tls, &check.preface)).await,
        }
    };
    match tokio::time::timeout(check.timeout, probe).await {
        Ok(result) => result,
        Err(_) => Err(format!("no answer within {:?}", check.timeout)),
    }
}

async fn probe(
    addr: &Address,
    probe: &Probe,
    (tls, preface): (Option<&UpstreamTls>, &[u8]),
) -> Result<(), String> {
    let Probe::Http {
        method,
        path,
        host,
        expect,
    } = probe
    else {
        // A TCP check is a connect, also for a TLS group (a gRPC check is HTTP/2 only).
        return open(addr).await.map(drop).map_err(|e| e.to_string());
    };
    let mut stream = open_with(addr, tls, preface)
        .await
        .map_err(|e| match e.get_ref() {
            Some(inner) => format!("TLS: {inner}"),
            None => e.to_string(),
        })?;
    let host = host.clone().unwrap_or_else(|| addr.to_string());
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: slipstream-health-check\r\nConnection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::with_capacity(1024);
    loop {
        let mut chunk = [0u8; 1024];
        let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("closed before a status line".into());
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut response = httparse::Response::new(&mut headers);
        match response.parse(&buf) {
            Ok(httparse::Status::Complete(_)) => {
                let status = response.code.unwrap_or(0);
                if (100..200).contains(&status) {
                    return Err(format!("interim status {status}"));
                }
                return if (expect.0..=expect.1).contains(&status) {
                    Ok(())
                } else {
                    Err(format!(
                        "status {status}, expected {}-{}",
                        expect.0, expect.1
                    ))
                };
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_CHECK_RESPONSE => {}
            Ok(httparse::Status::Partial) => return Err("response head too large".into()),
            Err(e) => return Err(format!("invalid response: {e}")),
        }
    }
}

/// An HTTP or gRPC check over HTTP/2: one request on a new connection, driven beside it.
async fn probe_http2(
    addr: &Address,
    probe: &Probe,
    tls: Option<&UpstreamTls>,
) -> Result<(), String> {
    let stream = open_with(addr, tls, &[])
        .await
        .map_err(|e| match e.get_ref() {
            Some(inner) => format!("TLS: {inner}"),
            None => e.to_string(),
        })?;
    let (send, conn) = h2::client::handshake(stream)
        .await
        .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let exchange = async {
        match probe {
            Probe::Http {
                method,
                path,
                host,
                expect,
            } => {
                let host = host.clone().unwrap_or_else(|| addr.to_string());
                let request = http::Request::builder()
                    .method(method.as_str())
                    .uri(format!("{scheme}://{host}{path}"))
                    .header("user-agent", "slipstream-health-check")
                    .body(())
                    .map_err(|e| e.to_string())?;
                let (status, _, _) = call(send, request, bytes::Bytes::new()).await?;
                if (expect.0..=expect.1).contains(&status) {
                    Ok(())
                } else {
                    Err(format!(
                        "status {status}, expected {}-{}",
                        expect.0, expect.1
                    ))
                }
            }
            Probe::Grpc { service } => grpc_health(send, scheme, addr, service).await,
            Probe::Tcp => Ok(()),
        }
    };
    tokio::select! {
        r = exchange => r,
        r = conn => Err(match r {
            Ok(()) => "connection closed".to_string(),
            Err(e) => e.to_string(),
        }),
    }
}

/// Sends `request` with `body`; the status, the body (up to [`MAX_CHECK_RESPONSE`] bytes)
/// and the trailers (the head's fields for a response without any: gRPC's trailers-only
/// answers).
async fn call(
    send: h2::client::SendRequest<bytes::Bytes>,
    request: http::Request<()>,
    body: bytes::Bytes,
) -> Result<(u16, Vec<u8>, http::HeaderMap), String> {
    let mut send = send.ready().await.map_err(|e| e.to_string())?;
    let (response, mut stream) = send
        .send_request(request, body.is_empty())
        .map_err(|e| e.to_string())?;
    if !body.is_empty() {
        stream.send_data(body, true).map_err(|e| e.to_string())?;
    }
    let response = response.await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let (head, mut recv) = response.into_parts();
    let mut got = Vec::new();
    while let Some(data) = recv.data().await {
        let data = data.map_err(|e| e.to_string())?;
        let _ = recv.flow_control().release_capacity(data.len());
        if got.len() + data.len() > MAX_CHECK_RESPONSE {
            return Err("response too large".into());
        }
        got.extend_from_slice(&data);
    }
    let trailers = recv.trailers().await.map_err(|e| e.to_string())?;
    Ok((status, got, trailers.unwrap_or(head.headers)))
}

/// gRPC's health check: `grpc.health.v1.Health/Check` for `service` must answer status
/// SERVING (1) with grpc-status 0.
async fn grpc_health(
    send: h2::client::SendRequest<bytes::Bytes>,
    scheme: &str,
    addr: &Address,
    service: &str,
) -> Result<(), String> {
    let request = http::Request::post(format!("{scheme}://{addr}/grpc.health.v1.Health/Check"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("user-agent", "slipstream-health-check")
        .body(())
        .map_err(|e| e.to_string())?;
    let (status, body, trailers) =
        call(send, request, crate::grpc::health_request(service)).await?;
    if status != 200 {
        return Err(format!("HTTP status {status}"));
    }
    let grpc_status = trailers
        .get("grpc-status")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    match grpc_status.as_deref() {
        Some("0") => {}
        Some(code) => return Err(format!("grpc-status {code}")),
        None => return Err("no grpc-status".into()),
    }
    match crate::grpc::health_status(&body) {
        Some(1) => Ok(()),
        Some(other) => Err(format!("health status {other} (SERVING is 1)")),
        None => Err("malformed health response".into()),
    }
}
