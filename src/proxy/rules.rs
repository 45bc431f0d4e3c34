//! Phase 2b, the rules: for a site with nginx-style rules, locations, access or limits, the
//! order nginx runs them in (the site's rewrite rules; the location; its body limit and
//! auto-redirect; the route's rules, choosing the location again after a `last` or a changed
//! path, at most 10 times; then `allow`/`deny`). The outcome is the route, the target to send
//! on when the path or query changed, and an answer when the rules give one. A site of plain
//! prefix routes with no rules takes the longest prefix and nothing else runs.

use crate::error::Kind;
use crate::http1::Framing;
use crate::message::RequestHead;
use crate::routing::{Routed, Router};
use crate::rules::template::{Current, Facts};
use crate::rules::{access, uri, Answer, Step};

/// Changes of path one request may make (nginx's limit: the 11th is a 500).
const MAX_PATH_CHANGES: usize = 10;

/// What the rules decided for a request.
pub(super) struct Decision {
    /// The site and route chosen.
    pub(super) routed: Routed,
    /// The target to send on (path and query), when rules changed either.
    pub(super) target: Option<String>,
    /// An answer the rules gave instead of the route's content.
    pub(super) answer: Option<Box<Answered>>,
    /// A refusal (403, 404 of an internal route, 413, 500 for a cycle, 400 for a bad path).
    pub(super) refused: Option<Kind>,
    /// Request fields to set toward the upstream (`proxy_set_headers`), values rendered; an
    /// empty value removes the field.
    pub(super) request_fields: Vec<(String, String)>,
    /// Field lines this request's answers get besides the policy's (`cors`, a 401's
    /// challenge, `add_headers` values with variables).
    pub(super) response_fields: Vec<u8>,
    /// Field lines its successful answers get (`add_headers_on_success` with variables).
    pub(super) fields_on_success: Vec<u8>,
    /// Under `satisfy any`, the address rules or the users let the request through: the
    /// authorization service is not asked.
    pub(super) satisfied: bool,
    /// `limit_req` serves the request after this wait.
    pub(super) delay: Option<std::time::Duration>,
    /// Its places in `limit_conn` zones, held until it ends.
    pub(super) guards: Vec<crate::rules::limit::ConnGuard>,
    /// The users' challenge when `satisfy any` left the last word to the service.
    pub(super) challenge: Vec<u8>,
}

/// The answer to a CA's HTTP-01 request for a token slipstream is waiting to be checked on.
fn acme_http01(head: &RequestHead<'_, '_>) -> Option<Box<Answered>> {
    if !head.path.starts_with(crate::acme::HTTP01_PREFIX) {
        return None;
    }
    let key_authorization = crate::acme::http01_answer(&head.path)?;
    Some(Box::new(Answered {
        answer: Answer {
            status: 200,
            location: None,
            body: Some(key_authorization),
        },
        host: String::new(),
        path: head.path.to_string(),
    }))
}

/// An answer with what sending it needs of the request.
pub(super) struct Answered {
    pub(super) answer: Answer,
    /// The request's host, lower-cased, without its port (empty if none).
    pub(super) host: String,
    /// The path when the rules answered (its extension types a `return`'s text).
    pub(super) path: String,
}

/// Who is asking, for the variables and access rules.
pub(super) struct Client<'a> {
    /// The client's address.
    pub(super) ip: std::net::IpAddr,
    /// The same as text.
    pub(super) ip_text: &'a str,
    /// The client spoke TLS.
    pub(super) https: bool,
    /// The local port it connected to (read only if a rule needs it).
    pub(super) local_port: &'a dyn Fn() -> u16,
    /// Its certificate, when it sent one (mutual TLS).
    pub(super) tls_client: Option<&'a crate::tls::client_auth::ClientCert>,
}

/// How a request reaches the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Entry {
    /// From the client.
    Client,
    /// By an internal redirect to a path (an error page): `internal` routes are reachable.
    Redirect,
    /// To this named location of the site (an error page `@name`): the site's rules and the
    /// choice of location are skipped.
    Named(usize),
}

impl Decision {
    fn route(routed: Routed) -> Decision {
        Decision {
            routed,
            target: None,
            answer: None,
            refused: None,
            request_fields: Vec::new(),
            response_fields: Vec::new(),
            fields_on_success: Vec::new(),
            satisfied: false,
            delay: None,
            guards: Vec::new(),
            challenge: Vec::new(),
        }
    }
}

/// Runs the rules of the request's site.
pub(super) fn decide(
    router: &Router,
    head: &RequestHead<'_, '_>,
    client: &Client<'_>,
    entry: Entry,
) -> Decision {
    if !client.https && entry == Entry::Client {
        if let Some(answer) = acme_http01(head) {
            // Before routing: a site's rules and access limits never stand in a CA's way.
            let mut d = Decision::route(router.routed(router.site_for(head.host), None));
            d.answer = Some(answer);
            return d;
        }
    }
    let Some(site) = router.site_for(head.host) else {
        return Decision::route(router.routed(None, None));
    };
    if router.is_plain(site) && entry == Entry::Client {
        let route = router.longest_prefix(site, &head.path);
        return Decision::route(router.routed(Some(site), route));
    }
    let path = match uri::normalize(&head.path) {
        Ok(p) => p,
        Err(reason) => {
            let mut d = Decision::route(router.routed(Some(site), None));
            d.refused = Some(Kind::BadRequest(reason));
            return d;
        }
    };
    let args = head.path.split_once('?').map_or("", |(_, q)| q);
    let mut host_buf = [0u8; 256];
    let host = head
        .host
        .and_then(|h| crate::routing::normalize_host(h, &mut host_buf))
        .unwrap_or("");
    let host_captures = if router.has_regex_hosts() {
        router.host_captures(site, host)
    } else {
        None
    };
    let facts = Facts {
        method: head.method,
        request_uri: &head.path,
        host,
        scheme: if client.https { "https" } else { "http" },
        server_name: router.server_name(site),
        server_port: client.local_port,
        remote_addr: client.ip_text,
        headers: head.headers,
        maps: router.maps(),
        host_captures: host_captures.as_ref(),
        tls_client: client.tls_client,
    };
    let mut current = Current {
        uri: path.to_string(),
        args: args.to_string(),
        captures: None,
        rewrites: 0,
    };
    let asked = (site, head, client, entry);
    let mut d = phases(router, asked, (&facts, &mut current), (&path, args));
    dynamic_fields(router, (&facts, &current), &mut d);
    d
}

/// `add_headers` values with variables, rendered for the request's policy once its route
/// is settled (for its answer, refusal or content alike).
fn dynamic_fields(router: &Router, (facts, current): (&Facts<'_>, &Current), d: &mut Decision) {
    let Some(policy) = d.routed.policy.map(|p| router.policy(p)) else {
        return;
    };
    for (name, value, always) in &policy.dynamic_headers {
        let rendered = value.to_string(facts, current);
        // A decoded path or a capture may hold control bytes: never into a field line.
        let safe = rendered.replace(|c: char| c.is_ascii_control() && c != '\t', " ");
        let out = if *always {
            &mut d.response_fields
        } else {
            &mut d.fields_on_success
        };
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(safe.trim().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

/// nginx's phases over the request once its site is known: the location and its rules,
/// CORS, the limits, access, and what it is sent on with.
fn phases(
    router: &Router,
    (site, head, client, entry): (usize, &RequestHead<'_, '_>, &Client<'_>, Entry),
    (facts, current): (&Facts<'_>, &mut Current),
    (path, args): (&str, &str),
) -> Decision {
    let (mut d, mut answer) = locate(router, (site, entry), head, facts, current);
    cors(router, head, &mut d, &mut answer);
    if let Some(mut answer) = answer {
        // A Location carries decoded path bytes and captures: never a control byte or space.
        if let Some(location) = answer.location.take() {
            let mut safe = String::with_capacity(location.len());
            uri::escape_query(&location, &mut safe);
            answer.location = Some(safe);
        }
        d.answer = Some(Box::new(Answered {
            answer,
            host: facts.host.to_string(),
            path: current.uri.clone(),
        }));
        return d;
    }
    if d.refused.is_some() {
        return d;
    }
    if !current.uri.starts_with('/') && current.uri != path {
        // nginx answers an empty rewritten path with 500; one without a leading `/` cannot
        // be sent on either.
        d.refused = Some(Kind::RewriteFailed);
        return d;
    }
    let policy = router.policy(d.routed.policy.unwrap_or_default());
    // Limits count a request once: not again for its error page (nginx's main request).
    if entry == Entry::Client && !limit_phase(router, policy, (facts, current), &mut d) {
        return d;
    }
    let authorization = head.header("authorization");
    if !access(policy, (client.ip, authorization), &mut d) {
        return d;
    }
    send_on(policy, (facts, current), (path, args), &mut d);
    d
}

/// nginx's access phase for the request: false when refused (a 401 with its challenge).
fn access(
    policy: &crate::routing::Policy,
    (ip, authorization): (std::net::IpAddr, Option<&[u8]>),
    d: &mut Decision,
) -> bool {
    match access_phase(policy, ip, authorization) {
        Ok(satisfied) => {
            d.satisfied = satisfied;
            d.challenge = users_challenge(policy, satisfied, authorization);
            true
        }
        Err(kind) => {
            if let (Kind::Unauthorized, Some(basic)) = (kind, &policy.auth_basic) {
                d.response_fields.extend_from_slice(&basic.challenge());
            }
            d.refused = Some(kind);
            false
        }
    }
}

/// What the request is sent on with: the request fields rendered, and the target when the
/// rules changed the path or the query.
fn send_on(
    policy: &crate::routing::Policy,
    (facts, current): (&Facts<'_>, &Current),
    (path, args): (&str, &str),
    d: &mut Decision,
) {
    for (name, value) in &policy.request_fields {
        let rendered = value.to_string(facts, current);
        // A decoded path or a capture may hold control bytes: never into a field line.
        let safe = rendered.replace(|c: char| c.is_ascii_control() && c != '\t', " ");
        d.request_fields
            .push((name.clone(), safe.trim().to_string()));
    }
    if current.uri != path || current.args != args {
        let mut target = String::with_capacity(current.uri.len() + current.args.len() + 1);
        uri::escape(&current.uri, &mut target);
        if !current.args.is_empty() {
            target.push('?');
            uri::escape_query(&current.args, &mut target);
        }
        d.target = Some(target);
    }
}

/// nginx's preaccess phase: `limit_req`, then `limit_conn`. False when the request is
/// refused (429 unless the policy says otherwise, with `Retry-After` when a rate tells).
fn limit_phase(
    router: &Router,
    policy: &crate::routing::Policy,
    (facts, current): (&Facts<'_>, &Current),
    d: &mut Decision,
) -> bool {
    if policy.limit_req.is_empty() && policy.limit_conn.is_empty() {
        return true;
    }
    let lists = (policy.limit_req.as_slice(), policy.limit_conn.as_slice());
    let limited = router.zones().check(lists, facts, current);
    if let Some(retry) = limited.refused {
        if let Some(after) = retry {
            let line = format!("Retry-After: {}\r\n", after.as_secs().max(1));
            d.response_fields.extend_from_slice(line.as_bytes());
        }
        d.refused = Some(Kind::Limited(policy.limit_status));
        return false;
    }
    d.delay = limited.delay;
    d.guards = limited.guards;
    true
}

/// Under `satisfy any` with the service still to ask, the users' challenge when their check
/// failed: a later 403 of the service does not replace its 401.
fn users_challenge(
    policy: &crate::routing::Policy,
    satisfied: bool,
    authorization: Option<&[u8]>,
) -> Vec<u8> {
    match &policy.auth_basic {
        Some(basic)
            if policy.satisfy_any
                && !satisfied
                && policy.auth_request.is_some()
                && !crate::rules::auth::basic_allows(basic, authorization) =>
        {
            basic.challenge()
        }
        _ => Vec::new(),
    }
}

/// nginx's access phase without its subrequest: `allow`/`deny`, then the users of
/// `auth_basic`, combined as `satisfy` says. `Ok(true)`: `satisfy any` is met already (the
/// authorization service need not be asked); `Err`: the refusal, 401 before 403 as nginx.
fn access_phase(
    policy: &crate::routing::Policy,
    ip: std::net::IpAddr,
    authorization: Option<&[u8]>,
) -> Result<bool, Kind> {
    let address = access::verdict(&policy.access, ip);
    let basic = policy
        .auth_basic
        .as_ref()
        .map(|b| crate::rules::auth::basic_allows(b, authorization));
    if !policy.satisfy_any {
        return match (address, basic) {
            (Some(false), _) => Err(Kind::AccessDenied),
            (_, Some(false)) => Err(Kind::Unauthorized),
            _ => Ok(false),
        };
    }
    if address == Some(true) || basic == Some(true) {
        return Ok(true);
    }
    if policy.auth_request.is_some() {
        // The service has the last word.
        return Ok(false);
    }
    match (address, basic) {
        (_, Some(false)) => Err(Kind::Unauthorized),
        (Some(false), _) => Err(Kind::AccessDenied),
        _ => Ok(false),
    }
}

/// The route's CORS rule, if any: its fields for the answer, and a preflight answered (before
/// access and limits: it carries no credentials) unless the rules answered first.
fn cors(
    router: &Router,
    head: &RequestHead<'_, '_>,
    d: &mut Decision,
    answer: &mut Option<Answer>,
) {
    let Some(cors) = &router.policy(d.routed.policy.unwrap_or_default()).cors else {
        return;
    };
    let fields = cors.fields(
        head.method,
        head.header("origin"),
        head.header("access-control-request-method"),
        head.header("access-control-request-headers"),
    );
    d.response_fields = fields.lines;
    if fields.preflight && answer.is_none() && d.refused.is_none() {
        *answer = Some(Answer {
            status: 204,
            location: None,
            body: None,
        });
    }
}

/// The site's rules, then the location and its rules until the path settles: the route, or
/// a refusal, and the answer the rules gave if any.
fn locate(
    router: &Router,
    (site, entry): (usize, Entry),
    head: &RequestHead<'_, '_>,
    facts: &Facts<'_>,
    current: &mut Current,
) -> (Decision, Option<Answer>) {
    let answered = |routed, answer| (Decision::route(routed), Some(answer));
    let refused = |routed, kind| {
        let mut d = Decision::route(routed);
        d.refused = Some(kind);
        (d, None)
    };
    let routed = |r| (Decision::route(r), None);
    let named = match entry {
        Entry::Named(route) => Some(route),
        _ => None,
    };
    if named.is_none() {
        match crate::rules::run(&router.site_policy(site).rules, facts, current) {
            Step::Answer(a) => return answered(router.routed(Some(site), None), a),
            Step::Failed => return refused(router.routed(Some(site), None), Kind::RegexLimit),
            _ => {}
        }
    }
    // nginx marks every rewritten path internal, the site's rewrites too.
    let mut internal = current.rewrites > 0 || entry != Entry::Client;
    for change in 0..=MAX_PATH_CHANGES {
        let chosen = match named {
            Some(route) if change == 0 => crate::routing::location::Chosen {
                index: Some(route),
                ..Default::default()
            },
            _ => router.choose(site, &current.uri),
        };
        if chosen.failed {
            return refused(router.routed(Some(site), None), Kind::RegexLimit);
        }
        if chosen.redirect_to_slash {
            let mut location = format!("{}/", current.uri);
            if !current.args.is_empty() {
                location.push('?');
                location.push_str(&current.args);
            }
            let answer = Answer {
                status: 301,
                location: Some(location),
                body: None,
            };
            return answered(router.routed(Some(site), chosen.index), answer);
        }
        let Some(route) = chosen.index else {
            return routed(router.routed(Some(site), None));
        };
        let chosen_route = router.routed(Some(site), Some(route));
        if router.is_internal(site, route) && !internal {
            return refused(router.routed(Some(site), None), Kind::NoRoute);
        }
        let policy = router.route_policy(site, route);
        if let (Some(max), Framing::Length(n)) = (policy.max_body, head.framing) {
            if n > max {
                return refused(chosen_route, Kind::BodyOverLimit);
            }
        }
        if chosen.captures.is_some() {
            current.captures = chosen.captures;
        }
        let before = current.rewrites;
        match crate::rules::run(router.route_rules(site, route), facts, current) {
            Step::Answer(a) => return answered(chosen_route, a),
            Step::Failed => return refused(chosen_route, Kind::RegexLimit),
            Step::Break => return routed(chosen_route),
            Step::Done if before == current.rewrites => return routed(chosen_route),
            Step::Done | Step::Last => internal = true,
        }
    }
    refused(router.routed(Some(site), None), Kind::RewriteFailed)
}

/// Sends the answer the rules gave: a redirect (its Location made absolute as nginx makes
/// it: the request's host without its port, the connection's local port unless it is the
/// scheme's default), a `return`'s text (typed by the path's extension, else `text/plain`),
/// an empty 2xx, or the proxy's own page for other codes; `444` closes with no answer.
pub(super) async fn send_answer(
    cx: &super::Ctx<'_>,
    client: &mut super::Client,
    buf: &mut Vec<u8>,
    answered: &Answered,
) -> Result<super::Outcome, crate::error::Error> {
    let answer = &answered.answer;
    use crate::http1::response::{put_status_line, reason_phrase, simple_response};
    let p = cx.request;
    cx.worker
        .counters
        .inc(crate::observe::metrics::Counter::RuleAnswers);
    let keep_alive = p.keep_alive && p.framing == Framing::Empty && !cx.worker.shutting_down();
    if answer.status == 444 {
        return Ok(super::Outcome {
            status: 444,
            body_bytes: 0,
            keep_alive: false,
        });
    }
    // An error page goes out with the code it replaces (unless its entry says otherwise).
    let status = p.status_override.unwrap_or(answer.status);
    // 204 and 304 have no body (nor a length): a client reads none.
    let bodiless = matches!(status, 204 | 304);
    let body: Vec<u8> = match &answer.body {
        _ if bodiless => Vec::new(),
        Some(text) => text.clone().into_bytes(),
        None if status >= 300 => simple_response(status, true, false).1,
        None => Vec::new(),
    };
    let mut text = Vec::with_capacity(256);
    put_status_line(&mut text, 1, status, Some(reason_phrase(status)));
    text.extend_from_slice(b"Server: slipstream\r\n");
    crate::http1::date::put_date(&mut text);
    if let Some(location) = &answer.location {
        text.extend_from_slice(b"Location: ");
        text.extend_from_slice(absolute(location, answered, p.https, client).as_bytes());
        text.extend_from_slice(b"\r\n");
    }
    if !body.is_empty() {
        text.extend_from_slice(b"Content-Type: ");
        text.extend_from_slice(content_type(&answered.path).as_bytes());
        text.extend_from_slice(b"\r\n");
    }
    if !bodiless {
        text.extend_from_slice(b"Content-Length: ");
        crate::http1::put_decimal(&mut text, body.len() as u64);
        text.extend_from_slice(b"\r\n");
    }
    if !keep_alive {
        text.extend_from_slice(b"Connection: close\r\n");
    }
    text.extend_from_slice(b"\r\n");
    cx.add_response_fields(&mut text, 0);
    let framing = if bodiless {
        crate::message::Framing::Empty
    } else {
        crate::message::Framing::Length(body.len() as u64)
    };
    let head = crate::message::ClientHead::new(status, framing, text);
    let body: &[u8] = if p.is_head { &[] } else { &body };
    let timeout = cx.config().limits.client_body_timeout;
    crate::net::io::write_head(&mut client.stream, &head, &[body], timeout)
        .await
        .map_err(|_| crate::error::Error::new(Kind::ClientClosed))?;
    if keep_alive {
        // The request is answered: the next one starts after its head (it had no body).
        buf.drain(..p.head_len.min(buf.len()));
    }
    Ok(super::Outcome {
        status,
        body_bytes: body.len() as u64,
        keep_alive,
    })
}

/// A `return`'s body type: by the path's extension, else `text/plain`.
fn content_type(path: &str) -> String {
    mime_guess::from_path(path)
        .first_raw()
        .map_or("text/plain".to_string(), str::to_string)
}

/// A Location starting with `/` made absolute from the request's host and the connection.
fn absolute(location: &str, answered: &Answered, https: bool, client: &super::Client) -> String {
    if !location.starts_with('/') {
        return location.to_string();
    }
    let scheme = if https { "https" } else { "http" };
    let local = client.stream.local_addr();
    let host = match answered.host.as_str() {
        "" => match local {
            Some(std::net::SocketAddr::V6(a)) => format!("[{}]", a.ip()),
            Some(a) => a.ip().to_string(),
            None => "localhost".to_string(),
        },
        h => h.to_string(),
    };
    let port = local.map_or(0, |a| a.port());
    let default = if https { 443 } else { 80 };
    if port == default || port == 0 {
        format!("{scheme}://{host}{location}")
    } else {
        format!("{scheme}://{host}:{port}{location}")
    }
}
