//! Config validation: good files parse, and every bad key is refused with its line.

use super::*;

/// `e` holds exactly the expected errors, each on its line.
fn assert_errors(e: &ConfigErrors, expect: &[(usize, &str)]) {
    assert_eq!(e.0.len(), expect.len(), "{e}");
    for (line, message) in expect {
        assert!(
            e.0.iter()
                .any(|x| x.line == *line && x.message.contains(message)),
            "line {line}: {message}: got\n{e}"
        );
    }
}

const GOOD: &str = r#"
[[listen]]
address = "127.0.0.1:8080"

[upstreams.app]
servers = ["127.0.0.1:9000"]

[[sites]]
default = true
routes = [{ path = "/", upstream = "app" }]
"#;

#[test]
fn good_config_parses() {
    let c = Config::parse(GOOD, "t.toml").unwrap();
    assert_eq!(c.listeners[0].address, "127.0.0.1:8080".parse().unwrap());
    assert_eq!(c.upstreams[0].servers.len(), 1);
}

#[test]
fn unknown_key_names_nearest() {
    let text = GOOD.replace("servers =", "keepalive_pool = 3\nservers =");
    let e = Config::parse(&text, "t.toml").unwrap_err();
    assert_eq!(e.0[0].line, 6);
    assert!(
        e.0[0].message.contains("did you mean `keepalive`"),
        "{}",
        e.0[0].message
    );
}

/// A misspelt key is read as the nearest key of its table whose type its value fits; the value
/// is never reported as the wrong type for a key it was only guessed to be.
#[test]
fn a_misspelt_key_is_read_as_a_near_key_its_value_fits() {
    let route = "routes = [{ path = \"/\", upstream = \"app\" }]";
    // `path` and `index` are equally near: the string is a path, the list an index.
    let text = GOOD.replace(route, "routes = [{ prefix = \"/\", upstream = \"app\" }]");
    let e = Config::parse(&text, "t.toml").unwrap_err();
    assert_errors(&e, &[(10, "unknown key `prefix`; did you mean `path`?")]);
    let text = GOOD.replace(
        route,
        "routes = [{ root = \"/srv\", indexes = [\"home.html\"] }]",
    );
    let e = Config::parse(&text, "t.toml").unwrap_err();
    assert_errors(
        &e,
        &[
            (10, "unknown key `indexes`; did you mean `index`?"),
            (10, "a route needs path (a prefix) or location"),
        ],
    );
    // No near key takes a string: the key is named, its value not (reading stops there).
    let text = GOOD
        .replace("servers =", "servrs =")
        .replace("[\"127.0.0.1:9000\"]", "\"127.0.0.1:9000\"");
    let e = Config::parse(&text, "t.toml").unwrap_err();
    assert_errors(&e, &[(6, "unknown key `servrs`; did you mean `servers`?")]);
}

#[test]
fn semantic_errors_are_all_reported_with_lines() {
    let text = GOOD
        .replace("upstream = \"app\"", "upstream = \"apq\"")
        .replace("127.0.0.1:9000", "nonsense");
    let e = Config::parse(&text, "t.toml").unwrap_err();
    assert_eq!(e.0.len(), 2, "{e}");
    assert!(e
        .0
        .iter()
        .any(|x| x.line == 6 && x.message.contains("invalid address")));
    assert!(e
        .0
        .iter()
        .any(|x| x.line == 10 && x.message.contains("did you mean \"app\"")));
}

/// Each bad upstream setting is refused, all at once, each on its own line.
#[test]
fn bad_balancing_settings_are_refused_with_lines() {
    let text = r#"
[[listen]]
address = "127.0.0.1:8080"
[upstreams.app]
servers = ["127.0.0.1:9000 weight=0", "127.0.0.1:9001"]
balance = "random"
[upstreams.hashed]
servers = ["127.0.0.1:9002"]
balance = "hash"
[upstreams.empty]
servers = []
[upstreams.checked]
servers = ["127.0.0.1:9003"]
[upstreams.checked.health]
path = "health"
[[sites]]
default = true
routes = [{ path = "/", upstream = "app" }]
"#;
    let e = Config::parse(text, "t.toml").unwrap_err();
    let expect = [
        (5, "invalid weight"),
        (6, "unknown balance \"random\""),
        (9, "needs hash_key"),
        (11, "has no servers"),
        (15, "must start with '/'"),
    ];
    assert_errors(&e, &expect);
}

#[test]
fn balancing_settings_parse() {
    let text = GOOD.replace(
        "servers = [\"127.0.0.1:9000\"]",
        "servers = [\"127.0.0.1:9000 weight=3\", \"127.0.0.1:9001 backup\"]\nbalance = \"hash\"\nhash_key = \"cookie:sid\"\nretries = 1\n[upstreams.app.health]\ntype = \"tcp\"\ninterval = \"1s\"",
    );
    let c = Config::parse(&text, "t.toml").unwrap();
    let g = &c.upstreams[0];
    assert_eq!(g.balance, Balance::Hash(HashKey::Cookie("sid".into())));
    assert_eq!((g.servers[0].weight, g.servers[1].backup), (3, true));
    assert_eq!(g.retries, 1);
    let h = g.health.as_ref().unwrap();
    assert_eq!(
        (&h.probe, h.interval),
        (&Probe::Tcp, Duration::from_secs(1))
    );
}

/// Static-file routes: each bad key refused with its line; a good one parsed.
#[test]
fn file_routes_are_validated_with_lines() {
    let text = r#"
[[listen]]
address = "127.0.0.1:8080"
[upstreams.app]
servers = ["127.0.0.1:9000"]
[[sites]]
default = true
routes = [
  { path = "/a/", root = "/nonexistent-slipstream-dir" },
  { path = "/b/", root = "/tmp", upstream = "app" },
  { path = "/c/", root = "/tmp", try_files = ["$uri", "@nope"] },
  { path = "/d/", root = "/tmp", alias = "/tmp" },
  { path = "/e/", index = ["i.html"] },
  { path = "/f/", root = "/tmp", buffer_response = "1MB" },
]
"#;
    let e = Config::parse(text, "t.toml").unwrap_err();
    let expect = [
        (9, "cannot use \"/nonexistent-slipstream-dir\""),
        (10, "either upstream or root/alias"),
        (11, "try_files names no location or upstream group \"nope\""),
        (12, "either root or alias"),
        (13, "need root or alias"),
        (14, "buffer_response applies to upstream routes"),
    ];
    assert_errors(&e, &expect);
    let good = text.lines().take(8).collect::<Vec<_>>().join("\n")
        + "\n  { path = \"/\", root = \"/tmp\", try_files = [\"$uri\", \"$uri/\", \"@app\"], cache_control = \"no-cache\" },\n]\n[files]\ncache_entries = 10\ncache_valid = \"5s\"\n";
    let c = Config::parse(&good, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    let r = &c.file_routes[0];
    assert_eq!(r.try_files.as_ref().unwrap().candidates, ["$uri", "$uri/"]);
    assert_eq!(r.cache_control.as_deref(), Some("no-cache"));
    assert_eq!(
        (c.files.cache_entries, c.files.cache_valid),
        (10, Duration::from_secs(5))
    );
}

#[test]
fn sizes_and_durations() {
    assert_eq!(parse_size("16KB"), Some(16384));
    assert_eq!(parse_size("1m"), Some(1 << 20));
    assert_eq!(parse_size("x"), None);
    assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
    assert_eq!(parse_duration("5m"), Some(Duration::from_secs(300)));
    assert_eq!(parse_duration("5"), None);
}

#[test]
fn fastcgi_groups_and_their_errors() {
    let root = std::env::temp_dir();
    let text = format!(
        r#"
[[listen]]
address = "127.0.0.1:8080"
[upstreams.php]
protocol = "fastcgi"
servers = ["unix:/run/php/fpm.sock", "127.0.0.1:9000"]
root = "{}"
params = {{ A = "group", B = "group" }}
[upstreams.web]
servers = ["127.0.0.1:8000"]
[[sites]]
default = true
routes = [{{ path = "/", upstream = "php", params = {{ B = "route" }} }}]
"#,
        root.display()
    );
    let c = Config::parse(&text, "t.toml").unwrap();
    let php = &c.upstreams[0];
    assert_eq!((php.protocol, php.max_conns), (Protocol::FastCgi, 5));
    assert_eq!(php.fastcgi.as_ref().unwrap().index, "index.php");
    // The route's variables replace the group's of the same name, once, at load.
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    assert_eq!(c.route_params, [pairs(&[("A", "group"), ("B", "route")])]);
    let bad = text
        .replace("root = ", "front_controller = \"index.php\"\nroot = ")
        .replace(
            "servers = [\"127.0.0.1:8000\"]",
            "servers = [\"127.0.0.1:8000\"]\nindex = \"x.php\"",
        )
        .replace("upstream = \"php\",", "upstream = \"web\",");
    let e = Config::parse(&bad, "t.toml").unwrap_err();
    assert_errors(
        &e,
        &[
            (7, "front_controller is a script path"),
            (12, "need protocol = \"fastcgi\""),
            (15, "params applies to routes to a FastCGI upstream"),
        ],
    );
}

#[test]
fn log_keys_are_checked_with_their_lines() {
    let text = format!(
        "access_log = \"/tmp/a.log\"\naccess_log_format = \"$remote_addr $nope\"\n\
         error_log_level = \"loud\"\nerror_log_format = \"xml\"\n{GOOD}"
    );
    let e = Config::parse(&text, "t.toml").unwrap_err();
    assert_errors(
        &e,
        &[
            (2, "unknown access log field $nope"),
            (3, "error_log_level is one of"),
            (4, "error_log_format is"),
        ],
    );
    let text = GOOD.replace(
        "default = true",
        "default = true\naccess_log = \"off\"\nname = \"main\"",
    );
    let c = Config::parse(&format!("access_log = \"/tmp/a.log\"\n{text}"), "t.toml").unwrap();
    assert!(c.access_log.is_some());
    assert_eq!(c.access_log_for(Some(0)), None);
    assert_eq!(c.router.site_name(0), "main");
    assert_eq!(c.access_log_paths().len(), 1);
}

#[test]
fn http2_settings_parse_and_their_errors_have_lines() {
    let c = Config::parse(GOOD, "t.toml").unwrap();
    assert!(c.http2.enabled);
    assert_eq!(c.http2.max_concurrent_streams, 128);
    assert_eq!(c.http2.max_header_list_size, 16 * 1024);
    assert!(!c.listeners[0].h2c);
    let text = format!(
        "{}\n[http2]\nenabled = false\nmax_concurrent_streams = 10\nbody_preread = 0\n\
         max_pings_per_second = 5\nmax_header_block = \"8KB\"\n",
        GOOD.replace(
            "address = \"127.0.0.1:8080\"",
            "address = \"127.0.0.1:8080\"\nh2c = true"
        )
    );
    let c = Config::parse(&text, "t.toml").unwrap();
    assert!(!c.http2.enabled && c.listeners[0].h2c);
    assert_eq!(c.http2.max_concurrent_streams, 10);
    assert_eq!(c.http2.body_preread, 0);
    assert_eq!(c.http2.flood.pings_per_sec, 5);
    assert_eq!(c.http2.flood.max_header_block, 8192);
    let bad = format!(
        "{GOOD}\n[http2]\nmax_concurrent_streams = 0\nmax_frame_size = \"1KB\"\n\
         initial_window_size = \"4GB\"\nmax_resets_per_second = 0\n"
    );
    let e = Config::parse(&bad, "t.toml").unwrap_err();
    assert_errors(
        &e,
        &[
            (13, "max_concurrent_streams must be at least 1"),
            (14, "max_frame_size must be between 16384"),
            (15, "initial_window_size must be between"),
            (16, "at least 1 per second"),
        ],
    );
}

#[test]
fn tunnel_idle_timeout_parses_and_zero_is_refused() {
    let c = Config::parse(GOOD, "t.toml").unwrap();
    assert_eq!(c.limits.tunnel_idle_timeout, Duration::from_secs(3600));
    let text = format!("{GOOD}\n[limits]\ntunnel_idle_timeout = \"90s\"\n");
    let c = Config::parse(&text, "t.toml").unwrap();
    assert_eq!(c.limits.tunnel_idle_timeout, Duration::from_secs(90));
    let bad = format!("{GOOD}\n[limits]\ntunnel_idle_timeout = \"0s\"\n");
    let e = Config::parse(&bad, "t.toml").unwrap_err();
    assert_errors(&e, &[(13, "tunnel_idle_timeout must be more than 0")]);
}

#[test]
fn compression_settings_parse_and_their_errors_have_lines() {
    let c = Config::parse(GOOD, "t.toml").unwrap();
    assert_eq!(c.compression, crate::compress::Settings::default());
    let routed = |c: &Config| c.router.route_request(None, "/").compress;
    assert!(!routed(&c), "compression is off unless a route asks for it");
    let text =
        format!(
        "{}\n[compression]\nalgorithms = [\"gzip\", \"zstd\"]\ngzip_level = 6\nbrotli_level = 0\n\
         min_length = 0\ntypes = [\"Text/HTML\", \"application/*+json\"]\nstatic_cache = 0\n",
        GOOD.replace("upstream = \"app\" }", "upstream = \"app\", compress = true }")
    );
    let c = Config::parse(&text, "t.toml").unwrap();
    assert!(routed(&c));
    let s = &c.compression;
    use crate::compress::Coding;
    assert_eq!(s.order, [Coding::Gzip, Coding::Zstd]);
    assert_eq!(
        (s.gzip_level, s.brotli_level, s.min_length, s.static_cache),
        (6, 0, 0, 0)
    );
    assert_eq!(s.types, ["text/html", "application/*+json"]);
    let bad = format!(
        "{GOOD}\n[compression]\nalgorithms = [\"deflate\"]\ngzip_level = 0\nzstd_level = 22\n\
         types = [\"html\"]\n"
    );
    let e = Config::parse(&bad, "t.toml").unwrap_err();
    assert_errors(
        &e,
        &[
            (13, "unknown algorithm \"deflate\""),
            (14, "level must be 1 to 9"),
            (15, "level must be 1 to 19"),
            (16, "invalid media type \"html\""),
        ],
    );
}

#[test]
fn every_mistake_is_reported_in_one_pass_with_the_line_and_a_caret() {
    let text = r#"
workers = 1
[limits]
drain_timeout = 30
keepalive_timout = "5 seconds"

[[listen]]
address = "127.0.0.1:8080"
backlg = 10

[upstreams.app]
servers = ["127.0.0.1:9000"]
connect_timeout = "5 seconds"

[[sites]]
default = true
routes = [{ path = "/", upstrem = "ap" }]
"#;
    let e = Config::parse(text, "t.toml").unwrap_err();
    assert_errors(
        &e,
        &[
            (4, "write it in quotes, e.g. \"30s\" for a duration"),
            (5, "did you mean `keepalive_timeout`?"),
            (5, "invalid duration \"5 seconds\""),
            (9, "did you mean `backlog`?"),
            (13, "invalid duration \"5 seconds\""),
            (17, "did you mean `upstream`?"),
            (17, "unknown upstream \"ap\"; did you mean \"app\"?"),
        ],
    );
    let shown = e.to_string();
    assert!(
        shown.contains("t.toml:9:1: unknown key `backlg`; did you mean `backlog`?")
            && shown.contains("\n  |\n9 | backlg = 10\n  | ^\n"),
        "{shown}"
    );
}

#[test]
fn the_first_site_is_the_default_when_none_says_so() {
    let one = GOOD.replace("default = true\n", "");
    let c = Config::parse(&one, "t.toml").unwrap();
    assert!(c.router.route(Some(b"any.example"), "/").is_some());
    // A second site without hosts cannot be reached: still refused.
    let two = format!("{one}\n[[sites]]\nroutes = [{{ path = \"/\", upstream = \"app\" }}]\n");
    let e = Config::parse(&two, "t.toml").unwrap_err();
    assert!(e.to_string().contains("nothing can reach it"), "{e}");
}

#[test]
fn an_unreadable_file_is_named_without_a_line() {
    let e = Config::load(Path::new("/nonexistent/slipstream.toml")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "/nonexistent/slipstream.toml: cannot read the config: No such file or directory (os error 2)"
    );
}

/// Every key the format accepts, by section, as the unknown-key error lists them.
fn keys_of(section: &str) -> Vec<String> {
    let e = Config::parse(section, "t.toml").unwrap_err().to_string();
    let Some((_, list)) = e.split_once("(valid keys: ") else {
        panic!("no key list for {section:?}: {e}");
    };
    let list = &list[..list.find(')').unwrap()];
    list.split(", ").map(str::to_string).collect()
}

#[test]
fn the_example_config_and_the_readme_show_every_key() {
    let sections = [
        "zzzz = 1\n",
        "[limits]\nzzzz = 1\n",
        "[[listen]]\naddress = \"127.0.0.1:1\"\nzzzz = 1\n",
        "[upstreams.a]\nservers = [\"127.0.0.1:1\"]\nzzzz = 1\n",
        "[upstreams.a]\nservers = [\"127.0.0.1:1\"]\n[upstreams.a.health]\nzzzz = 1\n",
        "[[sites]]\nzzzz = 1\n",
        "[[sites]]\nroutes = [{ path = \"/\", zzzz = 1 }]\n",
        "[files]\nzzzz = 1\n",
        "[tls]\nzzzz = 1\n",
        "[http2]\nzzzz = 1\n",
        "[compression]\nzzzz = 1\n",
        "[cluster]\netcd = []\nprefix = \"/p\"\nzzzz = 1\n",
    ];
    let root = env!("CARGO_MANIFEST_DIR");
    let example = std::fs::read_to_string(format!("{root}/examples/slipstream.toml")).unwrap();
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    // The reference table's first cells: `key`, `limits.key`, `[[listen]] key`, route `key`...
    let cells: Vec<&str> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("| ")?.split(" | ").next())
        .collect();
    let word = |text: &str, key: &str| {
        text.match_indices(key).any(|(at, _)| {
            let before = text[..at].chars().next_back();
            let after = text[at + key.len()..].chars().next();
            let edge = |c: Option<char>| !c.is_some_and(|c| c.is_alphanumeric() || c == '_');
            edge(before) && edge(after)
        })
    };
    let mut missing = Vec::new();
    for section in sections {
        for key in keys_of(section) {
            let is_table = [
                format!("[{key}]"),
                format!("[[{key}]]"),
                format!(".{key}]"),
                format!("[{key}."),
            ]
            .iter()
            .any(|t| example.contains(t.as_str()));
            if is_table {
                continue;
            }
            let shown = example.lines().any(|l| {
                let l = l.trim_start_matches(['#', ' ']);
                l.starts_with(&format!("{key} ="))
                    || [" ", "{", ","].iter().any(|p| {
                        l.contains(&format!("{p} {key} = ")) || l.contains(&format!("{p}{key} = "))
                    })
            });
            if !shown {
                missing.push(format!("examples/slipstream.toml lacks {key}"));
            }
            if !cells.iter().any(|c| word(c, &key)) {
                missing.push(format!("README.md's reference lacks {key}"));
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn http2_groups_and_their_errors() {
    let text = r#"
[[listen]]
address = "127.0.0.1:8080"
[upstreams.grpc]
protocol = "h2c"
servers = ["127.0.0.1:50051"]
health = { type = "grpc", service = "echo.Echo" }
[upstreams.tls]
protocol = "h2"
servers = ["localhost:8443"]
[[sites]]
default = true
routes = [{ path = "/", upstream = "grpc" }, { path = "/t", upstream = "tls" }]
"#;
    let c = Config::parse(text, "t.toml").unwrap();
    let (grpc, tls) = (&c.upstreams[0], &c.upstreams[1]);
    assert_eq!(grpc.protocol, Protocol::H2c);
    assert!(grpc.tls.is_none());
    let check = grpc.health.as_ref().unwrap();
    assert_eq!(
        check.probe,
        Probe::Grpc {
            service: "echo.Echo".into()
        }
    );
    // "h2" is TLS (ALPN h2) without saying `tls = true`.
    assert_eq!(tls.protocol, Protocol::H2);
    assert!(tls.tls.is_some());
    let bad = text
        .replace("protocol = \"h2c\"", "protocol = \"h2c\"\ntls = true")
        .replace(
            "protocol = \"h2\"\n",
            "protocol = \"h3\"\nhealth = { type = \"grpc\" }\n",
        );
    let e = Config::parse(&bad, "t.toml").unwrap_err();
    assert_errors(
        &e,
        &[
            (4, "protocol = \"h2c\" is HTTP/2 without TLS"),
            (10, "unknown protocol \"h3\""),
            (11, "a grpc health check needs protocol"),
        ],
    );
}

/// A field `auth_request` copies must not reach a group that gets the client's fields as
/// they are: a route's own group, or its files' fallback.
#[test]
fn auth_copies_only_reach_http_groups() {
    let text = r#"
[[listen]]
address = "127.0.0.1:0"
[upstreams.auth]
servers = ["127.0.0.1:9"]
[upstreams.php]
protocol = "fastcgi"
servers = ["127.0.0.1:9000"]
root = "/tmp"
[[sites]]
auth_request = { upstream = "auth", path = "/check", copy = ["X-User"] }
routes = [{ path = "/", root = "/tmp", try_files = ["$uri", "@php"] }]
"#;
    let e = Config::parse(text, "t.toml").unwrap_err().to_string();
    assert!(e.contains("auth_request copy"), "{e}");
    let without_copy = text.replace(", copy = [\"X-User\"]", "");
    assert!(Config::parse(&without_copy, "t.toml").is_ok());
}

/// Nested routes load under their parent; nginx's refused nestings are refused with their
/// line, and a nested route inherits its parent's policy without its rules.
#[test]
fn nested_routes_load_and_bad_nestings_are_refused() {
    let text = r#"
[[listen]]
address = "127.0.0.1:8080"
[upstreams.app]
servers = ["127.0.0.1:9000"]
[[sites]]
[[sites.routes]]
location = "/app/"
upstream = "app"
add_headers = { X-Level = "parent" }
rules = [{ rewrite = "^", to = "/x" }]
[[sites.routes.routes]]
location = '~ \.css$'
upstream = "app"
[[sites.routes.routes]]
location = "/app/own/"
upstream = "app"
add_headers = { X-Own = "own" }
[[sites.routes]]
location = "/bad/"
upstream = "app"
[[sites.routes.routes]]
location = "/elsewhere/"
upstream = "app"
[[sites.routes]]
location = "= /exact"
upstream = "app"
routes = [{ location = "~ x", upstream = "app" }]
"#;
    let e = Config::parse(text, "t.toml").unwrap_err();
    assert_errors(
        &e,
        &[
            (23, "location \"/elsewhere/\" is outside location \"/bad/\""),
            (
                28,
                "location \"~ x\" cannot be inside location \"= /exact\"",
            ),
        ],
    );
    let good = text
        .split("[[sites.routes]]\nlocation = \"/bad/\"")
        .next()
        .unwrap();
    let c = Config::parse(good, "t.toml").unwrap();
    let r = &c.router;
    let css = r.choose(0, "/app/a.css").index.unwrap();
    assert_eq!(css, 1);
    let policy = r.route_policy(0, css);
    assert!(policy.rules.is_empty());
    assert_eq!(policy.headers, b"X-Level: parent\r\n");
    assert_eq!(r.route_policy(0, 2).headers, b"X-Own: own\r\n");
    assert_eq!(r.route_rules(0, 0).len(), 1);
}

/// `ipv6only` applies to IPv6 addresses, and a dual-stack `[::]:PORT` cannot sit beside an
/// IPv4 listener of that port.
#[test]
fn ipv6only_is_checked() {
    let text = "[[listen]]\naddress = \"[::]:8080\"\nipv6only = false\n\
                [[listen]]\naddress = \"127.0.0.1:8080\"\n\
                [[listen]]\naddress = \"127.0.0.1:8081\"\nipv6only = true\n\
                [[listen]]\naddress = \"[::]:8082\"\n\
                [upstreams.app]\nservers = [\"127.0.0.1:9000\"]\n\
                [[sites]]\nroutes = [{ path = \"/\", upstream = \"app\" }]\n";
    let e = Config::parse(text, "t.toml").unwrap_err();
    let clash = "127.0.0.1:8080 clashes with the listener on [::]:8080 with ipv6only = false, \
                 which takes IPv4 connections on that port too";
    assert_errors(
        &e,
        &[
            (5, clash),
            (8, "ipv6only applies to IPv6 addresses ([::]:PORT)"),
        ],
    );
    let good = text.replace("127.0.0.1:8080", "127.0.0.1:8083");
    let good = good.replace("ipv6only = true\n", "");
    let c = Config::parse(&good, "t.toml").unwrap();
    assert!(!c.listeners[0].ipv6only);
    assert!(c.listeners[3].ipv6only);
}

/// An `add_headers` value with variables is rendered per request (the site leaves the plain
/// fast path); an unknown variable is refused with its line.
#[test]
fn header_values_with_variables() {
    let text = "[[listen]]\naddress = \"127.0.0.1:8080\"\n\
                [upstreams.app]\nservers = [\"127.0.0.1:9000\"]\n\
                [[sites]]\nadd_headers = { X-Host = \"$host\", X-Fixed = \"a$\" }\n\
                routes = [{ path = \"/\", upstream = \"app\" }]\n";
    let e = Config::parse(text, "t.toml").unwrap_err();
    assert_eq!(e.0[0].line, 6, "{e}");
    let good = text.replace(", X-Fixed = \"a$\"", ", X-Fixed = \"a\"");
    let c = Config::parse(&good, "t.toml").unwrap();
    let policy = c.router.site_policy(0);
    assert_eq!(policy.headers, b"X-Fixed: a\r\n");
    assert_eq!(policy.dynamic_headers.len(), 1);
    assert!(!c.router.is_plain(0));
}
