//! One active health check of one server: a TCP connect, or an HTTP/1.1 request (over TLS for
//! a TLS group, handshake and verification included) whose status must fall in the expected
//! range, all within the check's timeout. Runs on the control thread;
//! the rise/fall bookkeeping that turns results into up and down is in `control`.

use crate::net::Address;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::connect::{open, open_with};
use crate::config::{HealthCheck, Probe};
use crate::tls::client::UpstreamTls;

/// Most response bytes read to find the status line.
const MAX_CHECK_RESPONSE: usize = 8192;

/// Runs one check; Ok when the server is healthy, else why not.
pub async fn check(
    addr: &Address,
    check: &HealthCheck,
    tls: Option<&UpstreamTls>,
) -> Result<(), String> {
    match tokio::time::timeout(check.timeout, probe(addr, &check.probe, tls)).await {
        Ok(result) => result,
        Err(_) => Err(format!("no answer within {:?}", check.timeout)),
    }
}

async fn probe(addr: &Address, probe: &Probe, tls: Option<&UpstreamTls>) -> Result<(), String> {
    let Probe::Http {
        method,
        path,
        host,
        expect,
    } = probe
    else {
        // A TCP check is a connect, also for a TLS group.
        return open(addr).await.map(drop).map_err(|e| e.to_string());
    };
    let mut stream = open_with(addr, tls).await.map_err(|e| match e.get_ref() {
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
