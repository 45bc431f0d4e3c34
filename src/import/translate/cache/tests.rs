//! The cache directives translated: zones, inheritance, each directive family, the notes,
//! and every output loading as a slipstream config.

use super::*;

/// `text` (as `t.conf`) translated: the TOML, checked to load as a slipstream config, as
/// a table, and the notes.
fn run(text: &str) -> (toml::Table, Vec<String>) {
    let config = crate::import::Config {
        files: vec!["t.conf".into()],
        directives: crate::import::parse(text.as_bytes(), 0).unwrap(),
        skipped: Vec::new(),
    };
    let t = crate::import::translate(&config);
    if let Err(e) = crate::config::Config::parse(&t.toml, "t.toml") {
        panic!("{e}\n{}", t.toml);
    }
    let table = t.toml.parse().unwrap();
    let notes = t.notes.iter().map(|n| n.render(&config.files)).collect();
    (table, notes)
}

fn strings(v: &toml::Value) -> Vec<&str> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect()
}

/// The site's route at `location`.
fn route<'t>(t: &'t toml::Table, location: &str) -> &'t toml::Value {
    t["sites"][0]["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["location"].as_str() == Some(location))
        .unwrap_or_else(|| panic!("no route {location}: {t}"))
}

const PATH: &str = "proxy_cache_path /var/cache/a levels=1:2 keys_zone=a:10m";

/// An http level with `http`, one server with `server` and a location `/` with
/// `location` proxying to 127.0.0.1:8080.
fn site(http: &str, server: &str, location: &str) -> String {
    format!(
        "http {{\n{PATH};\n{http}\nserver {{\nlisten 8080;\n{server}\nlocation / {{\n\
         proxy_pass http://127.0.0.1:8080;\n{location}\n}}\n}}\n}}\n"
    )
}

#[test]
fn cache_paths_become_zones_with_a_disk_tier() {
    let text = "http {\n\
        proxy_cache_path /var/cache/a levels=1:2 keys_zone=a:10m max_size=1G inactive=60m \
        use_temp_path=off;\n\
        fastcgi_cache_path /var/cache/b keys_zone=b:100m;\n\
        proxy_cache_path /var/cache/c levels=1:2;\n\
        server { listen 8080; proxy_cache_path /x keys_zone=d:1m; return 200; }\n}\n";
    let (t, notes) = run(text);
    let a = &t["cache_zones"]["a"];
    assert_eq!(
        a["memory"].as_str(),
        Some("256m"),
        "keys_zone's size is not the data"
    );
    assert_eq!(a["path"].as_str(), Some("/var/cache/a"));
    assert_eq!(a["disk"].as_str(), Some("1g"), "max_size");
    assert_eq!(a["inactive"].as_str(), Some("1h"));
    let b = &t["cache_zones"]["b"];
    assert_eq!(b["path"].as_str(), Some("/var/cache/b"));
    assert!(b.get("disk").is_none() && b.get("inactive").is_none());
    assert_eq!(t["cache_zones"].as_table().unwrap().len(), 2);
    assert_eq!(
        notes[0],
        "t.conf:2: not translated: proxy_cache_path (nginx's files under /var/cache/a are not \
         read: slipstream keeps its own there and removes the ones it cannot read, so give it a \
         directory of its own while nginx runs; levels= and the loader's and manager's settings \
         are nginx's own)"
    );
    assert!(notes[1].starts_with("t.conf:3: not translated: fastcgi_cache_path (nginx's files"));
    assert!(
        notes[1].ends_with("; without max_size, slipstream's disk tier holds 10g)"),
        "{}",
        notes[1]
    );
    assert_eq!(
        notes[2..],
        [
            "t.conf:4: not translated: proxy_cache_path (no keys_zone=)",
            "t.conf:5: not translated: proxy_cache_path (only at the http level)",
        ]
    );
}

#[test]
fn proxy_cache_inherits_and_a_lower_level_replaces_it() {
    let text = format!(
        "http {{\n{PATH};\nproxy_cache a;\nproxy_cache_valid 200 302 10m;\n\
         proxy_cache_valid 404 1m;\nproxy_cache_key $scheme$host$request_uri;\n\
         server {{\nlisten 8080;\n\
         location / {{ proxy_pass http://127.0.0.1:8080; }}\n\
         location /api/ {{ proxy_cache off; proxy_pass http://127.0.0.1:8080; }}\n\
         location /img/ {{ proxy_cache_valid any 1h; proxy_pass http://127.0.0.1:8080; }}\n\
         location /docs/ {{\nproxy_cache off;\n\
         location /docs/v2/ {{ proxy_pass http://127.0.0.1:8080; }}\n\
         location /docs/v3/ {{ proxy_cache a; proxy_pass http://127.0.0.1:8080; }}\n}}\n\
         }}\n}}\n"
    );
    let (t, notes) = run(&text);
    assert!(
        notes.iter().all(|n| n.contains("proxy_cache_path")),
        "{notes:?}"
    );
    let cache = &t["sites"][0]["cache"];
    assert_eq!(cache["zone"].as_str(), Some("a"));
    assert_eq!(cache["key"].as_str(), Some("$scheme$host$request_uri"));
    assert_eq!(strings(&cache["valid"]), ["200 302 10m", "404 1m"]);
    // nginx's defaults where slipstream's differ.
    assert_eq!(cache["lock"].as_bool(), Some(false));
    assert_eq!(cache["revalidate"].as_bool(), Some(false));
    assert!(route(&t, "/").get("cache").is_none(), "the site's applies");
    assert_eq!(route(&t, "/api/")["cache"].as_bool(), Some(false));
    // A level's valid list replaces the inherited one as a whole.
    let img = &route(&t, "/img/")["cache"];
    assert_eq!(strings(&img["valid"]), ["any 1h"]);
    assert_eq!(img["key"].as_str(), Some("$scheme$host$request_uri"));
    // A location without a pass hands its value to the ones inside it; in slipstream
    // they inherit the site's unless they write theirs.
    let docs = route(&t, "/docs/");
    assert!(docs.get("cache").is_none());
    let (v2, v3) = (&docs["routes"][0], &docs["routes"][1]);
    assert_eq!(v2["location"].as_str(), Some("/docs/v2/"));
    assert_eq!(v2["cache"].as_bool(), Some(false));
    assert!(v3.get("cache").is_none(), "{v3}");
}

#[test]
fn lock_revalidate_min_uses_and_use_stale_translate() {
    let text = site(
        "proxy_cache a;\nproxy_cache_lock on;\nproxy_cache_lock_timeout 3s;\n\
         proxy_cache_revalidate on;\nproxy_cache_min_uses 2;",
        "proxy_cache_use_stale error timeout;\nproxy_cache_use_stale updating http_503;",
        "",
    );
    let (t, _) = run(&text);
    let cache = &t["sites"][0]["cache"];
    assert!(cache.get("lock").is_none(), "slipstream's default: on");
    assert!(
        cache.get("revalidate").is_none(),
        "slipstream's default: on"
    );
    assert_eq!(cache["lock_timeout"].as_str(), Some("3s"));
    assert_eq!(cache["min_uses"].as_integer(), Some(2));
    assert_eq!(
        strings(&cache["use_stale"]),
        ["error", "timeout", "updating", "http_503"]
    );
    // `off` below an inherited list: none.
    let text = site(
        "proxy_cache a;\nproxy_cache_use_stale updating;",
        "",
        "proxy_cache_use_stale off;",
    );
    let (t, _) = run(&text);
    assert_eq!(strings(&t["sites"][0]["cache"]["use_stale"]), ["updating"]);
    assert!(route(&t, "/")["cache"].get("use_stale").is_none());
}

#[test]
fn keys_are_kept_or_noted_as_slipstream_s_default() {
    let (t, notes) = run(&site("proxy_cache a;", "", ""));
    assert!(t["sites"][0]["cache"].get("key").is_none());
    assert!(
        notes.contains(
            &"t.conf:3: not translated: proxy_cache_key (nginx's default, \
              $scheme$proxy_host$request_uri, keys by the upstream's name: slipstream's \
              default key, $scheme://$host$request_uri, has the client's Host instead, so \
              virtual hosts never share entries)"
                .to_string()
        ),
        "{notes:?}"
    );
    let (t, notes) = run(&site(
        "proxy_cache a;",
        "proxy_cache_key $scheme$proxy_host$request_uri;",
        "",
    ));
    assert!(t["sites"][0]["cache"].get("key").is_none());
    assert!(
        notes.iter().any(|n| n.starts_with(
            "t.conf:6: not translated: proxy_cache_key ($proxy_host is the upstream's name"
        )),
        "{notes:?}"
    );
    let (t, notes) = run(&site(
        "proxy_cache a;",
        "proxy_cache_key $host$request_id;",
        "",
    ));
    assert!(t["sites"][0]["cache"].get("key").is_none());
    assert!(
        notes
            .iter()
            .any(|n| n.contains("proxy_cache_key ($request_id is not supported yet")),
        "{notes:?}"
    );
    assert!(
        !notes.iter().any(|n| n.starts_with("t.conf:3:")),
        "{notes:?}"
    );
}

#[test]
fn bypass_no_store_ignore_headers_and_methods_translate() {
    let text = site(
        "proxy_cache a;",
        "proxy_cache_bypass $cookie_session $arg_nocache;\nproxy_cache_bypass $http_pragma;\n\
         proxy_no_cache $cookie_session;\n\
         proxy_ignore_headers Cache-Control expires X-Accel-Expires;\n\
         proxy_cache_methods GET HEAD POST;\nproxy_cache_background_update on;\n\
         proxy_cache_convert_head on;",
        "",
    );
    let (t, notes) = run(&text);
    let cache = &t["sites"][0]["cache"];
    assert_eq!(
        strings(&cache["bypass"]),
        ["$cookie_session", "$arg_nocache", "$http_pragma"]
    );
    assert_eq!(strings(&cache["no_store"]), ["$cookie_session"]);
    assert_eq!(
        strings(&cache["ignore_headers"]),
        ["Cache-Control", "Expires"]
    );
    assert!(
        cache.get("methods").is_none(),
        "GET and HEAD, as slipstream"
    );
    assert_eq!(cache["background_update"].as_bool(), Some(true));
    let expected = [
        "t.conf:9: ignored: proxy_ignore_headers (X-Accel-Expires: slipstream does not act \
         on X-Accel- fields)",
        "t.conf:10: not translated: proxy_cache_methods (POST: slipstream caches only GET \
         and HEAD)",
        "t.conf:12: ignored: proxy_cache_convert_head (slipstream asks for a HEAD it caches \
         with GET too)",
    ];
    for line in expected {
        assert!(notes.contains(&line.to_string()), "{line}\n{notes:?}");
    }
}

#[test]
fn a_condition_slipstream_cannot_evaluate_leaves_the_cache_out() {
    let text = site("proxy_cache a;", "", "proxy_cache_bypass $skip_cache;");
    let (t, notes) = run(&text);
    assert_eq!(route(&t, "/")["cache"].as_bool(), Some(false));
    assert!(
        notes.iter().any(|n| n.starts_with(
            "t.conf:9: not translated: proxy_cache_bypass ($skip_cache is not supported yet"
        )),
        "{notes:?}"
    );
}

#[test]
fn cache_status_headers_are_dropped_for_cache_status() {
    let text = site(
        "proxy_cache a;",
        "add_header X-Frame-Options DENY;",
        "add_header X-Cache-Status $upstream_cache_status always;",
    );
    let (t, notes) = run(&text);
    assert!(
        notes.contains(
            &"t.conf:9: ignored: add_header (slipstream's answers from its cache carry \
              Cache-Status, RFC 9211, which tells the same; $upstream_cache_status is not a \
              variable it has)"
                .to_string()
        ),
        "{notes:?}"
    );
    // The location's add_header list is its own, as in nginx: the server's is not sent.
    let r = route(&t, "/");
    assert!(
        r["add_headers_on_success"].as_table().unwrap().is_empty(),
        "{r}"
    );
}

#[test]
fn fastcgi_twins_go_to_the_fastcgi_route() {
    let text = format!(
        "http {{\n{PATH};\nfastcgi_cache_path /var/cache/wp keys_zone=wp:10m;\n\
         fastcgi_cache_key $scheme$request_method$host$request_uri;\nproxy_cache a;\n\
         server {{\nlisten 8080;\nroot /tmp;\n\
         location ~ \\.php$ {{\nfastcgi_pass 127.0.0.1:9000;\nfastcgi_cache wp;\n\
         fastcgi_cache_valid 200 60m;\nfastcgi_cache_use_stale updating;\n\
         fastcgi_cache_lock on;\nfastcgi_cache_bypass $cookie_wordpress_logged_in;\n\
         fastcgi_no_cache $cookie_wordpress_logged_in;\nfastcgi_cache_min_uses 3;\n\
         fastcgi_cache_revalidate on;\nfastcgi_ignore_headers Set-Cookie;\n}}\n\
         location /app/ {{ fastcgi_pass 127.0.0.1:9000; }}\n\
         location /g/ {{ grpc_pass grpc://127.0.0.1:50051; }}\n}}\n}}\n"
    );
    let (t, notes) = run(&text);
    let php = &route(&t, "~ \\.php$")["cache"];
    assert_eq!(php["zone"].as_str(), Some("wp"));
    assert_eq!(
        php["key"].as_str(),
        Some("$scheme$request_method$host$request_uri")
    );
    assert_eq!(strings(&php["valid"]), ["200 1h"]);
    assert_eq!(strings(&php["use_stale"]), ["updating"]);
    assert!(php.get("lock").is_none() && php.get("revalidate").is_none());
    assert_eq!(php["min_uses"].as_integer(), Some(3));
    assert_eq!(strings(&php["bypass"]), ["$cookie_wordpress_logged_in"]);
    assert_eq!(strings(&php["no_store"]), ["$cookie_wordpress_logged_in"]);
    assert_eq!(strings(&php["ignore_headers"]), ["Set-Cookie"]);
    // proxy_cache is not fastcgi_cache, nor gRPC's.
    assert_eq!(t["sites"][0]["cache"]["zone"].as_str(), Some("a"));
    assert_eq!(route(&t, "/app/")["cache"].as_bool(), Some(false));
    assert_eq!(route(&t, "/g/")["cache"].as_bool(), Some(false));
    assert!(
        !notes.iter().any(|n| n.contains("fastcgi_cache_key")),
        "{notes:?}"
    );
}

#[test]
fn a_zone_declared_in_a_file_not_read_gets_slipstream_s_defaults() {
    let text = "server {\nlisten 8080;\nproxy_cache main;\nproxy_cache_key $host$uri;\n\
                location / { proxy_pass http://127.0.0.1:8080; }\n}\n";
    let (t, notes) = run(text);
    assert!(t["cache_zones"]["main"].as_table().unwrap().is_empty());
    assert_eq!(t["sites"][0]["cache"]["zone"].as_str(), Some("main"));
    assert_eq!(
        notes,
        [
            "t.conf:3: not translated: proxy_cache (no proxy_cache_path declares main in the \
          files read: [cache_zones.main] has slipstream's defaults, memory 256m and \
          inactive 10m)"
        ]
    );
}

#[test]
fn nginx_values_are_read_as_nginx_does() {
    let words = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
    assert_eq!(
        valid_entry(&words("200 302 10m")).as_deref(),
        Ok("200 302 10m")
    );
    assert_eq!(valid_entry(&words("any 90")).as_deref(), Ok("any 90s"));
    assert_eq!(valid_entry(&words("1h30m")).as_deref(), Ok("90m"));
    assert!(valid_entry(&words("20x 1m")).is_err());
    assert!(valid_entry(&words("200 soon")).is_err());
    assert_eq!(ignored_header("set-cookie"), Ok("Set-Cookie"));
    assert!(ignored_header("X-Accel-Redirect").is_err());
    assert_eq!(flag(&words("on")), Some(true));
    assert_eq!(flag(&words("yes")), None);
}
