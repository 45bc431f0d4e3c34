//! The rules on request facts, as nginx's rewrite module behaves (rewrite.t cases among them).

use super::*;

fn rule(spec: RuleSpec<'_>) -> Rule {
    Rule::compile(&spec, &[], &[]).unwrap()
}

fn facts_run(rules: &[Rule], target: &str, method: &str) -> (Step, Current) {
    let port = || 8080;
    let headers = [crate::message::Field {
        name: "X-Test",
        value: b"yes",
    }];
    let facts = Facts {
        method,
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
    let (path, args) = target.split_once('?').unwrap_or((target, ""));
    let mut current = Current {
        uri: path.to_string(),
        args: args.to_string(),
        captures: None,
        rewrites: 0,
    };
    let step = run(rules, &facts, &mut current);
    (step, current)
}

#[test]
fn rewrite_flags_and_query_rules() {
    let rewrite = |re, to, flag| {
        rule(RuleSpec {
            rewrite: Some(re),
            to: Some(to),
            flag,
            ..RuleSpec::default()
        })
    };
    // rewrite.t: a replacement with its own query gets the original after '&'; a trailing
    // '?' drops it.
    let (step, c) = facts_run(
        &[rewrite("^/add$", "/x?c=d", Some("last"))],
        "/add?a=b",
        "GET",
    );
    assert_eq!(
        (step, c.uri.as_str(), c.args.as_str()),
        (Step::Last, "/x", "c=d&a=b")
    );
    let (_, c) = facts_run(
        &[rewrite("^/no$", "/x?c=d?", Some("break"))],
        "/no?a=b",
        "GET",
    );
    assert_eq!((c.uri.as_str(), c.args.as_str()), ("/x", "c=d"));
    let (step, c) = facts_run(&[rewrite("^/(.*)$", "/new/$1", None)], "/old?q=1", "GET");
    assert_eq!(
        (step, c.uri.as_str(), c.args.as_str()),
        (Step::Done, "/new/old", "q=1")
    );
    // A URL replacement redirects whatever the flag, keeping the query.
    let (step, _) = facts_run(
        &[rewrite("^/(.*)$", "https://$host/$1", Some("last"))],
        "/p?q=1",
        "GET",
    );
    assert_eq!(
        step,
        Step::Answer(Answer {
            status: 302,
            location: Some("https://example.com/p?q=1".into()),
            body: None
        })
    );
    let (step, _) = facts_run(
        &[rewrite("^/old/(.*)$", "/new/$1", Some("permanent"))],
        "/old/a",
        "GET",
    );
    assert!(
        matches!(step, Step::Answer(Answer { status: 301, location: Some(l), .. }) if l == "/new/a")
    );
    // Rewrites chain; a regex that fails clears the captures of the one before.
    let chain = [
        rewrite("^/(a)$", "/b", None),
        rewrite("^/zzz(.)$", "/c", None),
        rule(RuleSpec {
            status: Some(200),
            body: Some("[$1]$uri"),
            ..RuleSpec::default()
        }),
    ];
    let (step, _) = facts_run(&chain, "/a", "GET");
    assert!(matches!(step, Step::Answer(Answer { body: Some(b), .. }) if b == "[]/b"));
}

#[test]
fn return_and_if_conditions() {
    let ret = |cond, status, to: Option<&'static str>, body: Option<&'static str>| {
        rule(RuleSpec {
            condition: cond,
            status: Some(status),
            to,
            body,
            ..RuleSpec::default()
        })
    };
    let rules = [
        ret(Some("$request_method = POST"), 405, None, None),
        ret(Some("($http_x_test ~* ^Y(e)s$)"), 200, None, Some("got $1")),
        ret(None, 301, Some("https://$host$request_uri"), None),
    ];
    let (step, _) = facts_run(&rules, "/a", "POST");
    assert!(matches!(step, Step::Answer(Answer { status: 405, .. })));
    let (step, c) = facts_run(&rules, "/a", "GET");
    assert!(
        matches!(step, Step::Answer(Answer { status: 200, body: Some(ref b), .. }) if b == "got e")
    );
    assert_eq!(c.captures.unwrap().group(1), "e");
    let rules = [
        ret(Some("$http_x_none"), 403, None, None),
        ret(Some("$http_x_test != yes"), 403, None, None),
        ret(Some("$uri !~ ^/a"), 403, None, None),
        ret(None, 301, Some("https://$host$request_uri"), None),
    ];
    let (step, _) = facts_run(&rules, "/a?x=1", "GET");
    assert!(
        matches!(step, Step::Answer(Answer { status: 301, location: Some(ref l), .. }) if l == "https://example.com/a?x=1")
    );
}

#[test]
fn bad_rules_are_refused_with_reasons() {
    let bad = [
        RuleSpec {
            status: Some(301),
            body: Some("x"),
            ..RuleSpec::default()
        },
        RuleSpec {
            status: Some(200),
            to: Some("/x"),
            ..RuleSpec::default()
        },
        RuleSpec {
            status: Some(1000),
            ..RuleSpec::default()
        },
        RuleSpec {
            rewrite: Some("("),
            to: Some("/x"),
            ..RuleSpec::default()
        },
        RuleSpec {
            rewrite: Some("^/"),
            to: Some("/$nosuch"),
            ..RuleSpec::default()
        },
        RuleSpec {
            rewrite: Some("^/"),
            to: Some("/x"),
            flag: Some("lst"),
            ..RuleSpec::default()
        },
        RuleSpec {
            condition: Some("-f $request_filename"),
            status: Some(404),
            ..RuleSpec::default()
        },
        RuleSpec::default(),
    ];
    for spec in bad {
        assert!(Rule::compile(&spec, &[], &[]).is_err(), "{spec:?}");
    }
    // Named groups of the rewrite's own regex are variables of its replacement.
    let named = RuleSpec {
        rewrite: Some("^/u/(?<user>[a-z]+)$"),
        to: Some("/users?name=$user"),
        flag: Some("last"),
        ..RuleSpec::default()
    };
    let (_, c) = facts_run(&[Rule::compile(&named, &[], &[]).unwrap()], "/u/bob", "GET");
    assert_eq!(c.args, "name=bob");
}
