//! A small etcd v3 client over etcd's HTTP/JSON gateway (`/v3/kv/range`, `/v3/watch`, ...):
//! blocking calls for the cluster thread, keys and values as bytes, the endpoints tried in turn.
//! The gateway is part of every etcd since 3.4, so no gRPC stack or `protoc` is needed.

use std::io::{BufRead, BufReader, Read};
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde_json::{json, Value};

use crate::config::cluster::{ClusterSettings, EtcdTls};

/// How long one unary call may take, connect included.
const CALL_TIMEOUT: Duration = Duration::from_secs(3);
/// How long one watch stream is read before it is opened again.
pub const WATCH_LIFETIME: Duration = Duration::from_secs(120);
/// The largest unary response read (a configuration is a few hundred KB at most).
const MAX_RESPONSE: u64 = 16 << 20;

/// A connection-less etcd client: every call tries the endpoint that answered last, then the
/// others.
pub struct Etcd {
    endpoints: Vec<String>,
    credentials: Option<(String, String)>,
    token: Option<String>,
    current: usize,
    unary: ureq::Agent,
    streaming: ureq::Agent,
}

/// One key's value and the revision that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// The key.
    pub key: Vec<u8>,
    /// Its value.
    pub value: Vec<u8>,
    /// The revision of its last write.
    pub mod_revision: i64,
}

/// What a watch reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// The watch is in place.
    Created,
    /// A key was written.
    Put(KeyValue),
    /// A key was deleted, at this revision.
    Delete(Vec<u8>, i64),
    /// The revisions asked for were compacted away: read the keys again, then watch on.
    Compacted(i64),
    /// Every event up to this revision has been delivered (a progress notification).
    Progress(i64),
}

impl Etcd {
    /// A client for a fleet's endpoints, with its credentials and TLS settings.
    pub fn new(settings: &ClusterSettings) -> Etcd {
        let tls = tls_config(settings.tls.as_ref());
        let unary = ureq::Agent::config_builder()
            .timeout_global(Some(CALL_TIMEOUT))
            .http_status_as_error(false)
            .tls_config(tls.clone())
            .build()
            .into();
        // A watch ends after WATCH_LIFETIME and is opened again from the last revision seen, so
        // a connection that died without a word (a host gone, a NAT's table flushed) is found.
        let streaming = ureq::Agent::config_builder()
            .timeout_connect(Some(CALL_TIMEOUT))
            .timeout_recv_body(Some(WATCH_LIFETIME))
            .http_status_as_error(false)
            .tls_config(tls)
            .build()
            .into();
        Etcd {
            endpoints: settings.endpoints.clone(),
            credentials: settings.credentials.clone(),
            token: None,
            current: 0,
            unary,
            streaming,
        }
    }

    /// A unary call on the first endpoint that answers; a refusal by etcd (an error in the
    /// body) is not retried elsewhere.
    fn call(&mut self, path: &str, body: &Value) -> Result<Value, String> {
        let mut last = String::from("no etcd endpoint");
        for i in 0..self.endpoints.len() {
            let at = (self.current + i) % self.endpoints.len();
            match self.call_one(at, path, body) {
                Ok(v) => {
                    self.current = at;
                    return Ok(v);
                }
                Err(Failure::Refused(e)) => return Err(e),
                Err(Failure::Unreachable(e)) => last = format!("{}: {e}", self.endpoints[at]),
            }
        }
        Err(last)
    }

    fn call_one(&mut self, at: usize, path: &str, body: &Value) -> Result<Value, Failure> {
        if self.credentials.is_some() && self.token.is_none() {
            self.authenticate(at)?;
        }
        let value = self.post(at, path, body)?;
        if self.credentials.is_some() && error_text(&value).is_some_and(|e| e.contains("token")) {
            // An expired token: one more try with a new one.
            self.authenticate(at)?;
            return self.post(at, path, body).and_then(refused);
        }
        refused(value)
    }

    fn post(&self, at: usize, path: &str, body: &Value) -> Result<Value, Failure> {
        let url = format!("{}{path}", self.endpoints[at]);
        let mut request = self.unary.post(&url);
        if let Some(t) = &self.token {
            request = request.header("Authorization", t);
        }
        let mut response = request
            .send(body.to_string())
            .map_err(|e| Failure::Unreachable(e.to_string()))?;
        let text = response
            .body_mut()
            .with_config()
            .limit(MAX_RESPONSE)
            .read_to_string()
            .map_err(|e| Failure::Unreachable(e.to_string()))?;
        serde_json::from_str(&text)
            .map_err(|e| Failure::Unreachable(format!("not etcd's JSON: {e}")))
    }

    fn authenticate(&mut self, at: usize) -> Result<(), Failure> {
        let Some((name, password)) = self.credentials.clone() else {
            return Ok(());
        };
        self.token = None;
        let answer = refused(self.post(
            at,
            "/v3/auth/authenticate",
            &json!({"name": name, "password": password}),
        )?)?;
        match answer["token"].as_str() {
            Some(t) => {
                self.token = Some(t.to_string());
                Ok(())
            }
            None => Err(Failure::Refused("etcd gave no token".into())),
        }
    }

    /// The value of `key`, with the store's revision at the time of reading.
    pub fn get(&mut self, key: &str) -> Result<(Option<KeyValue>, i64), String> {
        let answer = self.call("/v3/kv/range", &json!({ "key": B64.encode(key) }))?;
        let kv = answer["kvs"]
            .as_array()
            .and_then(|k| k.first())
            .map(key_value)
            .transpose()?;
        Ok((kv, revision(&answer["header"])))
    }

    /// Every key under `prefix`, in key order.
    pub fn list(&mut self, prefix: &str) -> Result<Vec<KeyValue>, String> {
        let body =
            json!({ "key": B64.encode(prefix), "range_end": B64.encode(prefix_end(prefix)) });
        let answer = self.call("/v3/kv/range", &body)?;
        answer["kvs"]
            .as_array()
            .map_or(Ok(Vec::new()), |k| k.iter().map(key_value).collect())
    }

    /// Writes `value` under `key` (bound to `lease` when not 0) and returns the new revision.
    pub fn put(&mut self, key: &str, value: &[u8], lease: i64) -> Result<i64, String> {
        let mut body = json!({ "key": B64.encode(key), "value": B64.encode(value) });
        if lease != 0 {
            body["lease"] = json!(lease.to_string());
        }
        let answer = self.call("/v3/kv/put", &body)?;
        Ok(revision(&answer["header"]))
    }

    /// Deletes `key`.
    pub fn delete(&mut self, key: &str) -> Result<(), String> {
        self.call("/v3/kv/deleterange", &json!({ "key": B64.encode(key) }))
            .map(drop)
    }

    /// Writes `key` (bound to `lease`) only if it does not exist: `false` when it does.
    pub fn create(&mut self, key: &str, value: &[u8], lease: i64) -> Result<bool, String> {
        let key = B64.encode(key);
        let body = json!({
            "compare": [{ "key": key, "target": "CREATE", "result": "EQUAL", "create_revision": "0" }],
            "success": [{ "request_put": { "key": key, "value": B64.encode(value), "lease": lease.to_string() } }],
        });
        let answer = self.call("/v3/kv/txn", &body)?;
        Ok(answer["succeeded"].as_bool() == Some(true))
    }

    /// Ends `lease` now: the keys written with it go.
    pub fn revoke(&mut self, lease: i64) -> Result<(), String> {
        self.call("/v3/lease/revoke", &json!({ "ID": lease.to_string() }))
            .map(drop)
    }

    /// A lease of `ttl` seconds; keys written with it go when it is not kept alive.
    pub fn grant(&mut self, ttl: u64) -> Result<i64, String> {
        let answer = self.call("/v3/lease/grant", &json!({ "TTL": ttl.to_string() }))?;
        int(&answer["ID"])
            .filter(|id| *id != 0)
            .ok_or_else(|| "etcd granted no lease".to_string())
    }

    /// Renews `lease`; `false` when etcd no longer knows it (it expired).
    pub fn keep_alive(&mut self, lease: i64) -> Result<bool, String> {
        let answer = self.call("/v3/lease/keepalive", &json!({ "ID": lease.to_string() }))?;
        Ok(int(&answer["result"]["TTL"]).unwrap_or(0) > 0)
    }

    /// Watches every key under `prefix` from revision `from` on, calling `each` for every event
    /// until it returns `false` or the stream ends (an error: the caller reconnects).
    pub fn watch(
        &mut self,
        prefix: &str,
        from: i64,
        mut each: impl FnMut(WatchEvent) -> bool,
    ) -> Result<(), String> {
        let body = json!({ "create_request": {
            "key": B64.encode(prefix),
            "range_end": B64.encode(prefix_end(prefix)),
            "start_revision": from.to_string(),
            "progress_notify": true,
        } });
        let mut last = String::from("no etcd endpoint");
        for i in 0..self.endpoints.len() {
            let at = (self.current + i) % self.endpoints.len();
            if self.credentials.is_some() && self.token.is_none() {
                if let Err(e) = self.authenticate(at) {
                    last = e.text();
                    continue;
                }
            }
            let url = format!("{}/v3/watch", self.endpoints[at]);
            let mut request = self.streaming.post(&url);
            if let Some(t) = &self.token {
                request = request.header("Authorization", t);
            }
            let response = match request.send(body.to_string()) {
                Ok(r) => r,
                Err(e) => {
                    last = format!("{}: {e}", self.endpoints[at]);
                    continue;
                }
            };
            self.current = at;
            let reader = response
                .into_body()
                .into_with_config()
                .limit(u64::MAX)
                .reader();
            let result = read_watch(reader, &mut each);
            if result.is_err() && self.credentials.is_some() {
                // An expired token ends a watch too: the next one authenticates again.
                self.token = None;
            }
            return result;
        }
        Err(last)
    }
}

/// rustls on aws-lc-rs (the provider the rest of slipstream uses), checking etcd's certificate
/// against the CA given or the system's roots, with the client certificate if one is given.
fn tls_config(tls: Option<&EtcdTls>) -> ureq::tls::TlsConfig {
    use ureq::tls::{Certificate, ClientCert, PrivateKey, RootCerts, TlsConfig, TlsProvider};
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let roots: Vec<Certificate<'static>> = match tls.and_then(|t| t.ca.as_deref()) {
        Some(pem) => ureq::tls::parse_pem(pem)
            .filter_map(|i| match i {
                Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect(),
        None => rustls_native_certs::load_native_certs()
            .certs
            .iter()
            .map(|c| Certificate::from_der(c.as_ref()).to_owned())
            .collect(),
    };
    let identity = tls
        .and_then(|t| t.identity.as_ref())
        .and_then(|(chain, key)| {
            let chain: Vec<Certificate<'static>> = ureq::tls::parse_pem(chain)
                .filter_map(|i| match i {
                    Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                    _ => None,
                })
                .collect();
            let key = PrivateKey::from_pem(key).ok()?;
            Some(ClientCert::new_with_certs(&chain, key))
        });
    TlsConfig::builder()
        .provider(TlsProvider::Rustls)
        .unversioned_rustls_crypto_provider(provider)
        .root_certs(RootCerts::new_with_certs(&roots))
        .client_cert(identity)
        .build()
}

/// Reads a watch's stream of JSON messages, one per line (network input: fuzzed as
/// `etcd_watch`).
pub(crate) fn read_watch(
    reader: impl Read,
    each: &mut impl FnMut(WatchEvent) -> bool,
) -> Result<(), String> {
    for line in BufReader::new(reader).lines() {
        let line = line.map_err(|e| format!("the watch broke: {e}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let message: Value =
            serde_json::from_str(&line).map_err(|e| format!("not etcd's JSON: {e}"))?;
        if let Some(e) = error_text(&message) {
            return Err(e);
        }
        let result = &message["result"];
        if let Some(compacted) = int(&result["compact_revision"]).filter(|r| *r > 0) {
            each(WatchEvent::Compacted(compacted));
            return Ok(());
        }
        if result["created"].as_bool() == Some(true) && !each(WatchEvent::Created) {
            return Ok(());
        }
        if result["canceled"].as_bool() == Some(true) {
            return Err(format!(
                "etcd cancelled the watch: {}",
                result["cancel_reason"]
            ));
        }
        let events = result["events"].as_array().filter(|e| !e.is_empty());
        if events.is_none() && result["created"].as_bool() != Some(true) {
            let revision = revision(&result["header"]);
            if revision > 0 && !each(WatchEvent::Progress(revision)) {
                return Ok(());
            }
        }
        for event in events.into_iter().flatten() {
            let kv = key_value(&event["kv"])?;
            let event = if event["type"].as_str() == Some("DELETE") {
                WatchEvent::Delete(kv.key, kv.mod_revision)
            } else {
                WatchEvent::Put(kv)
            };
            if !each(event) {
                return Ok(());
            }
        }
    }
    Err("etcd closed the watch".into())
}

/// Why a call failed: etcd said no (not worth another endpoint), or it could not be asked.
enum Failure {
    Refused(String),
    Unreachable(String),
}

impl Failure {
    fn text(self) -> String {
        match self {
            Failure::Refused(e) | Failure::Unreachable(e) => e,
        }
    }
}

/// etcd's error in a gateway answer, if it is one.
fn error_text(answer: &Value) -> Option<String> {
    let e = answer.get("error").or_else(|| answer.get("message"))?;
    Some(
        e.as_str()
            .map_or_else(|| e.to_string(), ToString::to_string),
    )
}

/// etcd's answer, or its error: one that another member may not give (no leader, an election
/// under way, a timeout) is worth another endpoint; others are refusals.
fn refused(answer: Value) -> Result<Value, Failure> {
    const PASSING: [&str; 5] = [
        "leader",
        "timed out",
        "unavailable",
        "too many requests",
        "stopped",
    ];
    match error_text(&answer) {
        Some(e) if PASSING.iter().any(|p| e.to_ascii_lowercase().contains(p)) => {
            Err(Failure::Unreachable(format!("etcd: {e}")))
        }
        Some(e) => Err(Failure::Refused(format!("etcd: {e}"))),
        None => Ok(answer),
    }
}

/// The gateway writes 64-bit integers as strings.
fn int(v: &Value) -> Option<i64> {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| v.as_i64())
}

fn revision(header: &Value) -> i64 {
    int(&header["revision"]).unwrap_or(0)
}

fn key_value(kv: &Value) -> Result<KeyValue, String> {
    let bytes = |field: &str| {
        B64.decode(kv[field].as_str().unwrap_or(""))
            .map_err(|e| format!("etcd sent a bad {field}: {e}"))
    };
    Ok(KeyValue {
        key: bytes("key")?,
        value: bytes("value")?,
        mod_revision: int(&kv["mod_revision"]).unwrap_or(0),
    })
}

/// The end of the key range of everything under `prefix`: the prefix with its last byte one
/// higher.
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_stream_is_read_into_events() {
        let k = B64.encode("/p/config");
        let v = B64.encode("x = 1");
        let stream = format!(
            "{{\"result\":{{\"header\":{{\"revision\":\"4\"}},\"created\":true}}}}\n\
             {{\"result\":{{\"events\":[{{\"kv\":{{\"key\":\"{k}\",\"value\":\"{v}\",\"mod_revision\":\"5\"}}}},\
             {{\"type\":\"DELETE\",\"kv\":{{\"key\":\"{k}\",\"mod_revision\":\"6\"}}}}]}}}}\n\
             {{\"result\":{{\"canceled\":true,\"compact_revision\":\"9\"}}}}\n"
        );
        let mut seen = Vec::new();
        read_watch(stream.as_bytes(), &mut |e| {
            seen.push(e);
            true
        })
        .unwrap();
        assert_eq!(
            seen,
            vec![
                WatchEvent::Created,
                WatchEvent::Put(KeyValue {
                    key: b"/p/config".to_vec(),
                    value: b"x = 1".to_vec(),
                    mod_revision: 5
                }),
                WatchEvent::Delete(b"/p/config".to_vec(), 6),
                WatchEvent::Compacted(9),
            ]
        );
        assert!(read_watch(&b"{\"result\":{\"created\":true}}\n"[..], &mut |_| true).is_err());
    }

    #[test]
    fn a_prefix_range_ends_past_every_key_under_it() {
        assert_eq!(prefix_end("/a/"), b"/a0");
        assert_eq!(prefix_end("/a"), b"/b");
    }
}
