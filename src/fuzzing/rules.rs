//! The property of the `request_rules` fuzz target: nginx-style rules compiled from fuzzed
//! text and run over a fuzzed request never panic, and whatever they produce can be sent:
//! a normalised path is canonical, an escaped target or Location holds no control byte,
//! space or non-ASCII byte.

use crate::message::Field;
use crate::routing::location::{Locations, Match};
use crate::rules::template::{Current, Facts};
use crate::rules::{run, uri, Rule, RuleSpec, Step};

/// Input lines: a location (or nested ones, `A | B`), a rewrite regex, its replacement, an `if` condition, a return
/// text; the rest is the request target.
pub fn request_rules(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.splitn(6, '\n');
    let mut next = || lines.next().unwrap_or_default();
    let (location, regex, replacement, condition, returned, target) =
        (next(), next(), next(), next(), next(), next());
    // Request targets in origin form start with `/` (the parser refuses others but `*`).
    if !target.starts_with('/') {
        return;
    }
    let Ok(path) = uri::normalize(target) else {
        return;
    };
    assert_canonical(&path);
    // `A | B | C`: B nested in A, C in B (where nginx allows it).
    let mut locations = Locations::default();
    let mut names: Vec<String> = Vec::new();
    let mut parent = None;
    for written in location.split(" | ") {
        let Ok(m) = Match::parse(written) else { break };
        if let Match::Regex(p) = &m {
            names.extend(p.group_names().map(str::to_string));
        }
        parent = match parent {
            None => Some(locations.push(m, true)),
            Some(p) => match locations.push_within(p, m, true) {
                Ok(i) => Some(i),
                Err(_) => break,
            },
        };
    }
    locations.finish();
    let chosen = locations.choose(&path);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let specs = [
        RuleSpec {
            condition: Some(condition),
            rewrite: Some(regex),
            to: Some(replacement),
            flag: Some("break"),
            ..RuleSpec::default()
        },
        RuleSpec {
            rewrite: Some(regex),
            to: Some(replacement),
            ..RuleSpec::default()
        },
        RuleSpec {
            status: Some(302),
            to: Some(returned),
            ..RuleSpec::default()
        },
    ];
    let rules: Vec<Rule> = specs
        .iter()
        .filter_map(|s| Rule::compile(s, &names, &[]).ok())
        .collect();
    let headers = [Field {
        name: "X-Fuzz",
        value: condition.as_bytes(),
    }];
    let port = || 8080;
    let facts = Facts {
        method: "GET",
        request_uri: target,
        host: "example.com",
        scheme: "http",
        server_name: "example.com",
        server_port: &port,
        remote_addr: "127.0.0.1",
        headers: &headers,
        maps: &[],
        host_captures: None,
        tls_client: None,
    };
    let mut current = Current {
        uri: path.to_string(),
        args: target.split_once('?').map_or("", |(_, q)| q).to_string(),
        captures: chosen.captures,
        rewrites: 0,
    };
    let mut sent = String::new();
    match run(&rules, &facts, &mut current) {
        Step::Answer(answer) => {
            if let Some(location) = &answer.location {
                uri::escape_query(location, &mut sent);
            }
        }
        _ => {
            uri::escape(&current.uri, &mut sent);
            sent.push('?');
            uri::escape_query(&current.args, &mut sent);
        }
    }
    assert!(
        sent.bytes().all(|b| b > b' ' && b < 0x7f),
        "unsafe byte in {sent:?}"
    );
}

/// A normalised path starts with `/` and has no empty, `.` or `..` segment inside.
fn assert_canonical(path: &str) {
    assert!(path.starts_with('/'), "{path:?}");
    let inner = path.strip_suffix('/').unwrap_or(path);
    for segment in inner.split('/').skip(1) {
        assert!(
            !segment.is_empty() && segment != "." && segment != "..",
            "segment {segment:?} in {path:?}"
        );
    }
}
