//! The admin listener's dashboard: one self-contained page (`/`, with its script at
//! `/dashboard.js`; no outside assets, so it works offline) that polls `/api/stats` every two
//! seconds and draws per site and per upstream server the request rate, the status mix, p50
//! and p99 latency with small charts of the last minutes, health, in-flight requests and pools;
//! the connections, the last reload, the certificates' expiry and doctor's findings.
//! `/api/stats` is built on the admin thread when asked, from the same sums `/metrics` serves:
//! the workers do nothing more for it. The page only reads; it changes no state.

/// The page (HTML and its style).
pub const PAGE: &str = include_str!("page.html");
/// The page's script: polling, rates and percentiles from counter deltas, the charts.
pub const SCRIPT: &str = include_str!("dashboard.js");
/// The page's `Content-Security-Policy`: its own script and inline style, fetches to this
/// listener only, no frames.
pub const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; \
     connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// The `/api/stats` document: `time_ms`, `version`, `metrics` (every sample of the Prometheus
/// exposition, by family: `[{"labels": {...}, "value": N}]`), `status` (`/status?format=json`)
/// `doctor` (findings, worst first) and `checks` (each checked server's last failed active
/// health check: `group`, `server`, `reason`, `at_ms`).
pub fn stats(
    exposition: &str,
    status: serde_json::Value,
    doctor: Vec<serde_json::Value>,
    checks: Vec<serde_json::Value>,
) -> String {
    let time_ms = crate::observe::unix_millis();
    let mut text = serde_json::json!({
        "time_ms": time_ms,
        "version": env!("CARGO_PKG_VERSION"),
        "metrics": samples(exposition),
        "status": status,
        "doctor": doctor,
        "checks": checks,
    })
    .to_string();
    text.push('\n');
    text
}

/// The exposition's samples by family name (histograms' `_bucket`, `_sum` and `_count` are
/// families of their own). Lines that do not read as samples are skipped.
pub fn samples(exposition: &str) -> serde_json::Map<String, serde_json::Value> {
    let mut families = serde_json::Map::new();
    for line in exposition.lines() {
        let Some((name, labels, value)) = sample(line) else {
            continue;
        };
        let entry = families
            .entry(name.to_string())
            .or_insert_with(|| serde_json::Value::Array(Vec::new()));
        if let serde_json::Value::Array(list) = entry {
            list.push(serde_json::json!({ "labels": labels, "value": value }));
        }
    }
    families
}

/// One sample line: `name{a="x",b="y"} value` or `name value`.
fn sample(line: &str) -> Option<(&str, serde_json::Map<String, serde_json::Value>, f64)> {
    if line.starts_with('#') || line.trim().is_empty() {
        return None;
    }
    let end = line.find(['{', ' '])?;
    let name = &line[..end];
    let mut labels = serde_json::Map::new();
    let mut rest = &line[end..];
    if let Some(inner) = rest.strip_prefix('{') {
        rest = inner;
        loop {
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let eq = rest.find("=\"")?;
            let key = rest[..eq].trim_start_matches(',');
            let (value, used) = label_value(&rest[eq + 2..])?;
            labels.insert(key.to_string(), serde_json::Value::String(value));
            rest = &rest[eq + 2 + used..];
        }
    }
    let value = match rest.trim() {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some((name, labels, value))
}

/// A quoted label value's text (escapes `\\`, `\"`, `\n` undone), and the bytes it took with
/// its closing quote.
fn label_value(s: &str) -> Option<(String, usize)> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, i + 1)),
            '\\' => match chars.next()?.1 {
                'n' => out.push('\n'),
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_reads_back_as_families_of_samples() {
        let text = "# HELP x y\n# TYPE x counter\nslipstream_requests_total 42\n\
             slipstream_upstream_server_state{upstream=\"app\",server=\"127.0.0.1:1\",state=\"up\"} 1\n\
             slipstream_route_request_duration_seconds_bucket{site=\"a\\\"b\",route=\"/\",le=\"+Inf\"} 7\n\
             garbage line\n";
        let m = samples(text);
        assert_eq!(m["slipstream_requests_total"][0]["value"], 42.0);
        let up = &m["slipstream_upstream_server_state"][0]["labels"];
        assert_eq!(
            (up["upstream"].as_str(), up["state"].as_str()),
            (Some("app"), Some("up"))
        );
        let bucket = &m["slipstream_route_request_duration_seconds_bucket"][0]["labels"];
        assert_eq!(
            (bucket["site"].as_str(), bucket["le"].as_str()),
            (Some("a\"b"), Some("+Inf"))
        );
        assert!(!m.contains_key("garbage"));
        assert_eq!(sample("x{a=\"unterminated} 1"), None);
    }

    #[test]
    fn the_stats_document_holds_every_part() {
        let doc: serde_json::Value = serde_json::from_str(&stats(
            "slipstream_requests_total 3\n",
            serde_json::json!({"config": {"generation": 2}}),
            vec![serde_json::json!({"severity": "ok"})],
            vec![serde_json::json!({"reason": "HTTP status 503"})],
        ))
        .unwrap();
        assert_eq!(doc["metrics"]["slipstream_requests_total"][0]["value"], 3.0);
        assert_eq!(doc["status"]["config"]["generation"], 2);
        assert_eq!(doc["doctor"][0]["severity"], "ok");
        assert_eq!(doc["checks"][0]["reason"], "HTTP status 503");
        assert!(doc["time_ms"].as_u64().unwrap() > 0);
    }
}
