//! nginx's config syntax read as nginx reads it, against Debian's nginx itself: for each
//! config, `nginx -t` and `slipstream::import` accept it alike, or refuse it with the same
//! reason on the same line. Then realistic configs translated: the TOML's keys, the notes
//! of what is left out, `slipstream import`'s exit codes, and the output loading as a
//! slipstream config.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::temp_path;

/// nginx's verdict on the config at `path`: Ok, or the reason and line of its error.
fn nginx_verdict(dir: &Path, path: &Path) -> Result<(), (String, usize)> {
    let out = Command::new("/usr/sbin/nginx")
        .args(["-t", "-q", "-e", "stderr", "-p"])
        .arg(dir)
        .arg("-c")
        .arg(path)
        .output()
        .expect("nginx is installed (.ci/test-tools installs it)");
    if out.status.success() {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&out.stderr).to_string();
    let line = text
        .lines()
        .find(|l| l.contains("[emerg]"))
        .unwrap_or_else(|| panic!("no [emerg] line: {text}"));
    // `... [emerg] PID#TID: REASON in FILE:LINE`
    let message = line.split_once(": ").expect("a message").1;
    let (reason, place) = message.rsplit_once(" in ").expect("a place");
    let number = place.rsplit_once(':').expect("a line").1;
    Err((reason.to_string(), number.parse().unwrap()))
}

#[test]
fn configs_are_accepted_or_refused_as_nginx_does() {
    let cases = [
        "events {}\nhttp { server { location / { return 200 \"a;b {c}\"; } } }\n",
        "events {}\nhttp {\n  map $http_x $y { default 0; ~^a 1; }\n  server {\n    set $a ${host}x;\n    \
         add_header X a#b; # a comment\n    if ($host = \"a.example\") { return 404; }\n    \
         location = /x { return 200 'it\\'s'; }\n  }\n}\n",
        "events {}\nhttp {\n  log_format main\n    '$remote_addr'\n    '$status';\n  \
         server { return 200 a}b; }\n}\n",
        "events {}\nhttp { server {\n  if ($host = \"b\"){ return 404; }\n  \
         return 200 a\"b\";# a comment after a semicolon\n  set $x \"${host}\";\n} }\n",
        "events {}\nhttp {\n",
        "events {}\n}\n",
        "events {}\nhttp { server { return 200 \"a\"b; } }\n",
        "events {}\nhttp { }\nworker_processes 1",
        "events {}\n;\n",
        "events {\n}\nhttp {\n  server {\n    location / {\n      return 200 \"unterminated;\n    }\n  }\n}\n",
    ];
    let dir = temp_path("import-syntax");
    std::fs::create_dir_all(dir.join("logs")).unwrap();
    let mut refused = 0;
    for (i, text) in cases.iter().enumerate() {
        let path = dir.join(format!("case{i}.conf"));
        std::fs::write(&path, text).unwrap();
        let ours = slipstream::import::parse(text.as_bytes(), 0).map_err(|e| (e.reason, e.line));
        let theirs = nginx_verdict(&dir, &path);
        assert_eq!(
            ours.is_ok(),
            theirs.is_ok(),
            "case {i}: {text}\nnginx: {theirs:?}"
        );
        if let (Err(ours), Err(theirs)) = (&ours, &theirs) {
            assert_eq!(ours, theirs, "case {i}: {text}");
            refused += 1;
        }
        // What is read is what the file says: read from disk, the same directives.
        if let Ok(directives) = &ours {
            let config = slipstream::import::read_config(&path).unwrap();
            assert_eq!(&config.directives, directives);
        }
    }
    assert_eq!(refused, 6, "the refused cases are refused by both");
}

// === Translation: nginx directives as slipstream's TOML ===

/// The translation of `files` (name and text, written into a fresh folder; the first is the
/// config read): the TOML as a table, the notes' lines, and the main file's path.
fn translate(case: &str, files: &[(&str, &str)]) -> (toml::Table, Vec<String>, PathBuf) {
    let (translation, config, path) = translation(case, files);
    let table: toml::Table = translation
        .toml
        .parse()
        .unwrap_or_else(|e| panic!("{e}\n{}", translation.toml));
    let notes = translation
        .notes
        .iter()
        .map(|n| n.render(&config.files))
        .collect();
    (table, notes, path)
}

fn translation(
    case: &str,
    files: &[(&str, &str)],
) -> (
    slipstream::import::Translation,
    slipstream::import::Config,
    PathBuf,
) {
    let dir = temp_path(&format!("import-{case}"));
    let _ = std::fs::remove_dir_all(&dir);
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let path = dir.join(files[0].0);
    let config = slipstream::import::read_config(&path).unwrap();
    (slipstream::import::translate(&config), config, path)
}

/// The route of `site` whose `path` or `location` is `at`.
fn route<'t>(site: &'t toml::Value, at: &str) -> &'t toml::Value {
    site["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r.get("path").or(r.get("location")).and_then(|v| v.as_str()) == Some(at))
        .unwrap_or_else(|| panic!("no route {at}: {site}"))
}

fn strings(v: &toml::Value) -> Vec<&str> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect()
}

/// A sites-available file: an SPA, an API behind an upstream block, a health check, a
/// `^~` and an `=` location, headers, an access list and a rewrite.
const APP_SITE: &str = r#"upstream backend {
    least_conn;
    server 10.0.0.1:8080 max_fails=2 fail_timeout=20s;
    server 10.0.0.2:8080 weight=2 max_fails=2 fail_timeout=20s;
    server 10.0.0.3:8080 backup max_fails=2 fail_timeout=20s;
    keepalive 16;
}

server {
    listen 80 default_server;
    server_name app.example.com .example.org;
    root ROOT;
    rewrite ^/old/(.*)$ /new/$1 last;
    add_header X-Frame-Options DENY always;
    add_header Cache-Control no-cache;

    location / {
        try_files $uri $uri/ /index.html;
    }
    location /api/ {
        proxy_pass http://backend/v2/;
        proxy_http_version 1.1;
        proxy_set_header Upgrade $http_upgrade;
        proxy_set_header Connection "upgrade";
        proxy_set_header Host $host;
        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        proxy_read_timeout 90s;
        client_max_body_size 25m;
    }
    location = /healthz {
        return 200 "ok";
    }
    location ^~ /assets/ {
        expires 7d;
        add_header X-Assets 1 always;
    }
    location /internal/ {
        allow 10.0.0.0/8;
        allow ::1;
        deny all;
        proxy_pass http://127.0.0.1:9000;
    }
    location /legacy/ {
        proxy_pass http://127.0.0.1:9000;
    }
}
"#;

#[test]
fn a_sites_file_becomes_a_site_with_routes_and_groups() {
    let text = APP_SITE.replace("ROOT", "/srv/app/dist");
    let (t, notes, _) = translate("app", &[("app.conf", &text)]);
    let notes: Vec<&String> = notes
        .iter()
        .filter(|n| n.contains("not translated"))
        .collect();
    assert!(notes.is_empty(), "{notes:?}");

    let backend = &t["upstreams"]["backend"];
    assert_eq!(
        strings(&backend["servers"]),
        [
            "10.0.0.1:8080",
            "10.0.0.2:8080 weight=2",
            "10.0.0.3:8080 backup"
        ]
    );
    assert_eq!(backend["balance"].as_str(), Some("least_conn"));
    assert_eq!(backend["keepalive"].as_integer(), Some(16));
    assert_eq!(backend["max_fails"].as_integer(), Some(2));
    assert_eq!(backend["fail_timeout"].as_str(), Some("20s"));
    assert_eq!(backend["read_timeout"].as_str(), Some("90s"));
    // One group for the address both locations pass to.
    assert_eq!(t["upstreams"].as_table().unwrap().len(), 2);
    assert_eq!(
        strings(&t["upstreams"]["127.0.0.1:9000"]["servers"]),
        ["127.0.0.1:9000"]
    );
    assert_eq!(t["listen"][0]["address"].as_str(), Some("0.0.0.0:80"));

    let site = &t["sites"][0];
    assert_eq!(
        strings(&site["hosts"]),
        ["app.example.com", "example.org", "*.example.org"]
    );
    assert_eq!(site["default"].as_bool(), Some(true));
    assert_eq!(site["client_max_body_size"].as_str(), Some("1m"));
    assert_eq!(
        site["add_headers"]["X-Frame-Options"].as_str(),
        Some("DENY")
    );
    assert_eq!(
        site["add_headers_on_success"]["Cache-Control"].as_str(),
        Some("no-cache")
    );
    let rewrite = &site["rules"][0];
    assert_eq!(rewrite["rewrite"].as_str(), Some("^/old/(.*)$"));
    assert_eq!(rewrite["to"].as_str(), Some("/new/$1"));
    assert_eq!(rewrite["flag"].as_str(), Some("last"));

    let spa = route(site, "/");
    assert_eq!(spa["root"].as_str(), Some("/srv/app/dist"));
    assert_eq!(strings(&spa["try_files"]), ["$uri", "$uri/", "/index.html"]);

    let api = route(site, "/api/");
    assert_eq!(api["upstream"].as_str(), Some("backend"));
    assert_eq!(api["client_max_body_size"].as_str(), Some("25m"));
    let uri = &api["rules"][0];
    assert_eq!(uri["rewrite"].as_str(), Some("^/api/(.*)$"));
    assert_eq!(uri["to"].as_str(), Some("/v2/$1"));
    assert_eq!(uri["flag"].as_str(), Some("break"));

    let health = route(site, "= /healthz");
    assert_eq!(health["rules"][0]["return"].as_integer(), Some(200));
    assert_eq!(health["rules"][0]["body"].as_str(), Some("ok"));
    assert!(health.get("upstream").is_none() && health.get("root").is_none());
    assert!(health.get("client_max_body_size").is_none());

    // A location with add_header has only its own (nginx's all-or-nothing inheritance).
    let assets = route(site, "^~ /assets/");
    assert_eq!(assets["root"].as_str(), Some("/srv/app/dist"));
    assert_eq!(assets["expires"].as_str(), Some("7d"));
    assert_eq!(assets["add_headers"]["X-Assets"].as_str(), Some("1"));
    assert!(assets["add_headers_on_success"]
        .as_table()
        .unwrap()
        .is_empty());

    let internal = route(site, "/internal/");
    assert_eq!(
        strings(&internal["access"]),
        ["allow 10.0.0.0/8", "allow ::1", "deny all"]
    );
    assert_eq!(internal["upstream"].as_str(), Some("127.0.0.1:9000"));
    let legacy = route(site, "/legacy/");
    assert_eq!(legacy["upstream"].as_str(), Some("127.0.0.1:9000"));
    assert!(legacy.get("access").is_none() && legacy.get("add_headers").is_none());
}

#[test]
fn plain_servers_that_send_their_names_to_https_become_redirects() {
    let tls = "server {
    listen 443 ssl;
    listen [::]:443 ssl;
    server_name example.com www.example.com;
    ssl_certificate /etc/ssl/example.pem;
    ssl_certificate_key /etc/ssl/example.key;
    location / { proxy_pass http://127.0.0.1:3000; }
}
";
    let redirect = "server {
    listen 80;
    listen [::]:80;
    server_name example.com www.example.com;
    return 301 https://$host$request_uri;
}
";
    let (t, notes, path) = translate("redirect", &[("site.conf", &format!("{redirect}{tls}"))]);
    let listen = t["listen"].as_array().unwrap();
    let plain = |a: &str| {
        listen
            .iter()
            .find(|l| l["address"].as_str() == Some(a))
            .unwrap()
    };
    assert_eq!(plain("0.0.0.0:80")["redirect_https"].as_bool(), Some(true));
    assert_eq!(plain("[::]:80")["redirect_https"].as_bool(), Some(true));
    assert_eq!(plain("0.0.0.0:443")["tls"].as_bool(), Some(true));
    let sites = t["sites"].as_array().unwrap();
    assert_eq!(sites.len(), 1);
    assert_eq!(sites[0]["cert"].as_str(), Some("/etc/ssl/example.pem"));
    assert_eq!(sites[0]["key"].as_str(), Some("/etc/ssl/example.key"));
    assert!(sites[0].get("rules").is_none());
    assert_eq!(
        notes,
        [format!(
            "{}:5: ignored: return (301: the listener's redirect_https answers 308)",
            path.display()
        )]
    );

    // Another plain server on port 80 serves pages: the redirect becomes the TLS site's
    // rule for plain requests, with nginx's own status.
    let other =
        "server {\n    listen 80;\n    server_name static.example.com;\n    root /srv/static;\n}\n";
    let (t, notes, _) = translate(
        "redirect-merged",
        &[("site.conf", &format!("{redirect}{tls}{other}"))],
    );
    assert!(notes.is_empty(), "{notes:?}");
    assert!(t["listen"][0].get("redirect_https").is_none());
    let sites = t["sites"].as_array().unwrap();
    assert_eq!(sites.len(), 2);
    let rule = &sites[0]["rules"][0];
    assert_eq!(rule["if"].as_str(), Some("$scheme = http"));
    assert_eq!(rule["return"].as_integer(), Some(301));
    assert_eq!(rule["to"].as_str(), Some("https://$host$request_uri"));
    assert_eq!(strings(&sites[1]["hosts"]), ["static.example.com"]);
    assert_eq!(route(&sites[1], "/")["root"].as_str(), Some("/srv/static"));
}

/// A PHP application behind PHP-FPM, as Debian's snippets write it.
const PHP_SITE: &str = r#"server {
    listen 8080;
    server_name shop.example.com;
    root ROOT;
    index index.php index.html;
    client_max_body_size 64m;

    location / {
        try_files $uri $uri/ /index.php?$query_string;
    }
    location ~ \.php$ {
        include snippets/fastcgi-php.conf;
        fastcgi_pass unix:/run/php/php8.2-fpm.sock;
        fastcgi_param APP_ENV prod;
        fastcgi_read_timeout 120;
    }
    location ~ /\.ht {
        deny all;
    }
}
"#;

const FASTCGI_PHP: &str = "fastcgi_split_path_info ^(.+?\\.php)(/.*)$;\n\
    try_files $fastcgi_script_name =404;\n\
    set $path_info $fastcgi_path_info;\n\
    fastcgi_param PATH_INFO $path_info;\n\
    fastcgi_index index.php;\n\
    include fastcgi.conf;\n";

const FASTCGI_CONF: &str = "fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;\n\
    fastcgi_param QUERY_STRING $query_string;\n\
    fastcgi_param REQUEST_METHOD $request_method;\n\
    fastcgi_param CONTENT_TYPE $content_type;\n\
    fastcgi_param CONTENT_LENGTH $content_length;\n\
    fastcgi_param REQUEST_URI $request_uri;\n\
    fastcgi_param GATEWAY_INTERFACE CGI/1.1;\n\
    fastcgi_param SERVER_SOFTWARE nginx/$nginx_version;\n\
    fastcgi_param HTTPS $https if_not_empty;\n\
    fastcgi_param REDIRECT_STATUS 200;\n";

#[test]
fn a_php_fpm_site_becomes_a_fastcgi_group_with_its_front_controller() {
    let site = PHP_SITE.replace("ROOT", "/var/www/shop/public");
    let (t, notes, _) = translate(
        "php",
        &[
            ("shop.conf", &site),
            ("snippets/fastcgi-php.conf", FASTCGI_PHP),
            ("fastcgi.conf", FASTCGI_CONF),
        ],
    );
    assert!(notes.iter().all(|n| n.contains(": ignored: ")), "{notes:?}");
    let name = "unix:/run/php/php8.2-fpm.sock";
    let group = &t["upstreams"][name];
    assert_eq!(strings(&group["servers"]), [name]);
    assert_eq!(group["protocol"].as_str(), Some("fastcgi"));
    assert_eq!(group["root"].as_str(), Some("/var/www/shop/public"));
    assert_eq!(group["front_controller"].as_str(), Some("/index.php"));
    assert_eq!(group["read_timeout"].as_str(), Some("2m"));
    assert!(group.get("index").is_none(), "index.php is the default");

    let site = &t["sites"][0];
    assert_eq!(site["client_max_body_size"].as_str(), Some("64m"));
    let php = route(site, "~ \\.php$");
    assert_eq!(php["upstream"].as_str(), Some(name));
    // Only what slipstream does not set itself.
    let params = php["params"].as_table().unwrap();
    assert_eq!(params.len(), 1, "{params:?}");
    assert_eq!(params["APP_ENV"].as_str(), Some("prod"));
    // Files first, then the application; never a PHP file as a static one.
    let front = route(site, "/");
    assert_eq!(
        strings(&front["try_files"]),
        ["$uri", "$uri/", &format!("@{name}")]
    );
    assert!(front.get("index").is_none(), "{front}");
    let hidden = route(site, "~ /\\.ht");
    assert_eq!(strings(&hidden["access"]), ["deny all"]);
}

#[test]
fn a_whole_nginx_conf_gives_process_settings_and_what_servers_inherit() {
    let main = r#"user www-data;
worker_processes auto;
error_log /var/log/nginx/error.log warn;
events {
    worker_connections 1024;
}
http {
    include mime.types;
    default_type application/octet-stream;
    sendfile on;
    keepalive_timeout 65;
    client_max_body_size 8m;
    gzip on;
    gzip_types text/css application/json;
    ssl_protocols TLSv1.2 TLSv1.3;
    log_format timing '$remote_addr "$request" $status $request_time';
    access_log /var/log/nginx/access.log timing;
    add_header X-Content-Type-Options nosniff always;
    deny 192.0.2.1;
    include conf.d/*.conf;
}
"#;
    let a = "server {\n    listen 80;\n    server_name a.example;\n    root /srv/a;\n}\n";
    let b =
        "server {\n    listen 80;\n    server_name b.example;\n    client_max_body_size 0;\n    \
             add_header X-B yes always;\n    allow 10.0.0.0/8;\n    deny all;\n    \
             location /big/ { client_max_body_size 1g; proxy_pass http://127.0.0.1:8000; }\n    \
             location /small/ { client_max_body_size 0; proxy_pass http://127.0.0.1:8000; }\n}\n";
    let (t, notes, path) = translate(
        "whole",
        &[
            ("nginx.conf", main),
            ("mime.types", "types {\n    text/html html;\n}\n"),
            ("conf.d/a.conf", a),
            ("conf.d/b.conf", b),
        ],
    );
    assert!(notes.iter().all(|n| n.contains(": ignored: ")), "{notes:?}");
    assert!(notes.contains(&format!(
        "{}:2: ignored: worker_processes (slipstream sizes its workers itself)",
        path.display()
    )));
    assert_eq!(t["error_log"].as_str(), Some("/var/log/nginx/error.log"));
    assert_eq!(t["error_log_level"].as_str(), Some("warn"));
    assert_eq!(t["access_log"].as_str(), Some("/var/log/nginx/access.log"));
    assert_eq!(
        t["access_log_format"].as_str(),
        Some("$remote_addr \"$request\" $status $request_time")
    );
    assert_eq!(t["limits"]["keepalive_timeout"].as_str(), Some("65s"));
    assert_eq!(t["tls"]["min_version"].as_str(), Some("1.2"));
    assert_eq!(t["listen"].as_array().unwrap().len(), 1);

    // The http level's values, in effect on a server that sets none of its own.
    let a = &t["sites"][0];
    assert_eq!(strings(&a["hosts"]), ["a.example"]);
    assert_eq!(a["client_max_body_size"].as_str(), Some("8m"));
    assert_eq!(
        a["add_headers"]["X-Content-Type-Options"].as_str(),
        Some("nosniff")
    );
    assert_eq!(strings(&a["access"]), ["deny 192.0.2.1"]);
    let files = route(a, "/");
    assert_eq!(files["root"].as_str(), Some("/srv/a"));
    assert_eq!(files["compress"].as_bool(), Some(true));

    // A server with its own headers and access list has only its own.
    let b = &t["sites"][1];
    assert_eq!(b["client_max_body_size"].as_str(), Some("0"));
    assert_eq!(b["add_headers"].as_table().unwrap().len(), 1);
    assert_eq!(b["add_headers"]["X-B"].as_str(), Some("yes"));
    assert_eq!(strings(&b["access"]), ["allow 10.0.0.0/8", "deny all"]);
    assert_eq!(
        route(b, "/big/")["client_max_body_size"].as_str(),
        Some("1g")
    );
    assert!(route(b, "/small/").get("client_max_body_size").is_none());
}

#[test]
fn what_is_not_translated_is_listed_with_its_file_and_line() {
    let site = r#"server {
    listen 80 quic;
    server_name www.example.* example.com;
    sub_filter a b;
    more_set_headers "X-A: b";
    if ($http_user_agent ~* bot) {
        return 403;
    }
    if (!-f $request_filename) {
        rewrite ^ /index.html break;
    }
    location / {
        proxy_pass http://127.0.0.1:8000;
        proxy_set_header X-Request-Id $request_id;
        error_page 502 /$uri.html;
        location @nested { return 404; }
    }
    location /x/ {
        return 301 https://$hostname$request_uri;
    }
}
"#;
    let (translation, config, path) = translation("notes", &[("site.conf", site)]);
    let f = path.display();
    let lines: Vec<String> = translation
        .notes
        .iter()
        .filter(|n| n.kind == slipstream::import::NoteKind::NotTranslated)
        .map(|n| n.render(&config.files))
        .collect();
    assert_eq!(
        lines,
        [
            format!("{f}:2: not translated: listen (HTTP/3 is not supported yet)"),
            format!(
                "{f}:3: not translated: server_name \
                 (www.example.*: only exact names and *. wildcards)"
            ),
            format!("{f}:4: not translated: sub_filter (not supported yet)"),
            format!("{f}:5: not translated: more_set_headers (unknown directive)"),
            format!("{f}:9: not translated: if (file tests are not supported)"),
            format!("{f}:14: not translated: proxy_set_header ($request_id is not supported yet)"),
            format!("{f}:15: not translated: error_page (variables in error pages are not supported yet)"),
            format!(
                "{f}:16: not translated: location \
                 (named location \"@nested\" can be on the site's level only)"
            ),
            format!("{f}:19: not translated: return ($hostname is not supported yet)"),
        ]
    );
    assert_eq!(translation.untranslated(), lines.len());
    // What was translated is there: the condition with its rule.
    let t: toml::Table = translation.toml.parse().unwrap();
    let site = &t["sites"][0];
    assert_eq!(strings(&site["hosts"]), ["example.com"]);
    assert_eq!(
        site["rules"][0]["if"].as_str(),
        Some("$http_user_agent ~* bot")
    );
    assert_eq!(site["rules"][0]["return"].as_integer(), Some(403));
    assert_eq!(site["rules"].as_array().unwrap().len(), 1);
}

/// `slipstream import` on `path`: exit code, stdout, stderr.
fn import(args: &[&str], path: &Path) -> (i32, String, String) {
    let out = Command::new(crate::support::BIN)
        .arg("import")
        .args(args)
        .arg(path)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn import_exits_0_and_1_on_a_broken_config_or_under_strict_with_anything_left_out() {
    let dir = temp_path("import-cli");
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.conf");
    std::fs::write(
        &good,
        "server {\n    listen 8080;\n    sendfile on;\n    location / { return 200 ok; }\n}\n",
    )
    .unwrap();
    let (code, stdout, stderr) = import(&[], &good);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stderr, "");
    let t: toml::Table = stdout.parse().unwrap();
    assert_eq!(t["listen"][0]["address"].as_str(), Some("0.0.0.0:8080"));
    let (code, _, stderr) = import(&["--verbose", "--strict"], &good);
    assert_eq!(code, 0, "ignored directives do not fail --strict");
    assert_eq!(
        stderr,
        format!(
            "{}:3: ignored: sendfile (slipstream sets its sockets up itself)\n",
            good.display()
        )
    );

    let partial = dir.join("partial.conf");
    std::fs::write(
        &partial,
        "server {\n    listen 8080;\n    include missing.conf;\n    sub_filter a b;\n    \
         root /srv;\n}\n",
    )
    .unwrap();
    let (code, stdout, stderr) = import(&[], &partial);
    assert_eq!(code, 0);
    assert!(stdout.contains("[[sites]]"), "{stdout}");
    let f = partial.display();
    assert_eq!(
        stderr,
        format!(
            "{f}:3: include {}: no such file (skipped)\n\
             {f}:4: not translated: sub_filter (not supported yet)\n",
            dir.join("missing.conf").display()
        )
    );
    let (code, stdout, _) = import(&["--strict"], &partial);
    assert_eq!(code, 1);
    assert!(
        stdout.contains("[[sites]]"),
        "the TOML is written all the same"
    );

    let broken = dir.join("broken.conf");
    std::fs::write(&broken, "server {\n    listen 80;\n").unwrap();
    let (code, stdout, stderr) = import(&[], &broken);
    assert_eq!(code, 1);
    assert_eq!(stdout, "");
    assert_eq!(
        stderr,
        format!(
            "{}:3: unexpected end of file, expecting \"}}\"\n",
            broken.display()
        )
    );
}

#[test]
fn translated_configs_load_as_slipstream_configs() {
    let dir = temp_path("import-load");
    let root = dir.join("www");
    std::fs::create_dir_all(&root).unwrap();
    let root = root.display().to_string();
    let app = APP_SITE.replace("ROOT", &root);
    let php = PHP_SITE.replace("ROOT", &root);
    let cases = [
        ("app.conf", vec![("app.conf", app.as_str())]),
        (
            "shop.conf",
            vec![
                ("shop.conf", php.as_str()),
                ("snippets/fastcgi-php.conf", FASTCGI_PHP),
                ("fastcgi.conf", FASTCGI_CONF),
            ],
        ),
    ];
    for (name, files) in cases {
        let (translation, _, _) = translation(&format!("load-{name}"), &files);
        let toml_path = dir.join(format!("{name}.toml"));
        std::fs::write(&toml_path, &translation.toml).unwrap();
        if let Err(e) = slipstream::config::Config::load(&toml_path) {
            panic!("{name}: {e}\n{}", translation.toml);
        }
    }
}

#[test]
fn named_fallbacks_internal_locations_listings_and_grpc_translate() {
    let site = r#"server {
    listen 443 ssl;
    http2 on;
    server_name grpc.example.com;
    ssl_certificate /etc/ssl/g.pem;
    ssl_certificate_key /etc/ssl/g.key;
    root /srv/www;
    location / {
        try_files $uri $uri/index.html @app;
    }
    location @app {
        proxy_pass http://127.0.0.1:3000;
        proxy_set_header Host $host;
        expires 1h;
    }
    location /downloads/ {
        autoindex on;
        gzip on;
    }
    location /private/ {
        internal;
        alias /srv/private/;
    }
    location /helloworld.Greeter/ {
        grpc_pass grpc://127.0.0.1:50051;
        grpc_read_timeout 1h;
    }
}
"#;
    let (t, notes, path) = translate("named", &[("grpc.conf", site)]);
    assert!(
        !notes.iter().any(|n| n.contains("not translated")),
        "{notes:?} {}",
        path.display()
    );
    let site = &t["sites"][0];
    let front = route(site, "/");
    assert_eq!(
        strings(&front["try_files"]),
        ["$uri", "$uri/index.html", "@app"]
    );
    assert_eq!(
        route(site, "@app")["upstream"].as_str(),
        Some("127.0.0.1:3000")
    );
    assert_eq!(route(site, "@app")["expires"].as_str(), Some("1h"));
    let downloads = route(site, "/downloads/");
    assert_eq!(downloads["root"].as_str(), Some("/srv/www"));
    assert_eq!(downloads["list_directories"].as_bool(), Some(true));
    assert_eq!(downloads["compress"].as_bool(), Some(true));
    let private = route(site, "/private/");
    assert_eq!(private["internal"].as_bool(), Some(true));
    assert_eq!(private["alias"].as_str(), Some("/srv/private/"));
    let grpc = &t["upstreams"]["127.0.0.1:50051"];
    assert_eq!(grpc["protocol"].as_str(), Some("h2c"));
    assert_eq!(grpc["read_timeout"].as_str(), Some("1h"));
    assert_eq!(
        route(site, "/helloworld.Greeter/")["upstream"].as_str(),
        Some("127.0.0.1:50051")
    );
    assert_eq!(t["listen"][0]["tls"].as_bool(), Some(true));
}

/// `listen [::]:PORT ipv6only=off` becomes a dual-stack listener.
#[test]
fn ipv6only_off_becomes_a_dual_stack_listener() {
    let site = "server {\n    listen [::]:8080 ipv6only=off;\n    return 200 \"ok\";\n}\n";
    let (t, notes, _) = translate("dual-stack", &[("dual.conf", site)]);
    assert!(
        notes.iter().all(|n| !n.contains("not translated")),
        "{notes:?}"
    );
    assert_eq!(t["listen"][0]["address"].as_str(), Some("[::]:8080"));
    assert_eq!(t["listen"][0]["ipv6only"].as_bool(), Some(false));
}

/// A microcache in front of an application, as a sites file included from `http`: the zone
/// with its disk tier, the server's cache table with nginx's defaults where slipstream's differ, a
/// location that turns it off, and the notes of what differs.
const MICROCACHE_SITE: &str = r#"proxy_cache_path CACHE levels=1:2 keys_zone=microcache:10m max_size=512m inactive=10m use_temp_path=off;

upstream app {
    server 127.0.0.1:3000;
}

server {
    listen 8080;
    server_name shop.example.com;

    proxy_cache microcache;
    proxy_cache_valid 200 301 302 1s;
    proxy_cache_valid 404 10s;
    proxy_cache_use_stale updating error timeout http_500 http_502 http_503 http_504;
    proxy_cache_lock on;
    proxy_cache_lock_timeout 2s;
    proxy_cache_bypass $cookie_session $arg_nocache;
    proxy_no_cache $cookie_session;
    add_header X-Cache-Status $upstream_cache_status;

    location / {
        proxy_pass http://app;
        proxy_set_header Host $host;
    }

    location /account/ {
        proxy_cache off;
        proxy_pass http://app;
    }
}
"#;

#[test]
fn a_microcache_becomes_a_cache_zone_and_a_cache_table_that_load() {
    let dir = temp_path("import-microcache");
    let cache_dir = dir.join("cache");
    let site = MICROCACHE_SITE.replace("CACHE", &cache_dir.display().to_string());
    let main = "events {}\nhttp {\n    include sites/*.conf;\n}\n";
    let (translation, config, path) = translation(
        "microcache",
        &[("nginx.conf", main), ("sites/shop.conf", &site)],
    );
    // A config nginx takes as it is.
    std::fs::create_dir_all(dir.join("logs")).unwrap();
    assert_eq!(nginx_verdict(&dir, &path), Ok(()));

    let t: toml::Table = translation.toml.parse().unwrap();
    let zone = &t["cache_zones"]["microcache"];
    assert_eq!(zone["memory"].as_str(), Some("256m"));
    assert_eq!(
        zone["path"].as_str(),
        Some(cache_dir.display().to_string().as_str())
    );
    assert_eq!(zone["disk"].as_str(), Some("512m"), "max_size");
    assert_eq!(zone["inactive"].as_str(), Some("10m"));
    let site = &t["sites"][0];
    let cache = &site["cache"];
    assert_eq!(cache["zone"].as_str(), Some("microcache"));
    assert!(cache.get("key").is_none(), "slipstream's default key");
    assert_eq!(strings(&cache["valid"]), ["200 301 302 1s", "404 10s"]);
    assert_eq!(
        strings(&cache["use_stale"]),
        ["updating", "error", "timeout", "http_500", "http_502", "http_503", "http_504"]
    );
    assert!(cache.get("lock").is_none(), "on, as slipstream's default");
    assert_eq!(cache["lock_timeout"].as_str(), Some("2s"));
    assert_eq!(
        cache["revalidate"].as_bool(),
        Some(false),
        "nginx's default"
    );
    assert_eq!(
        strings(&cache["bypass"]),
        ["$cookie_session", "$arg_nocache"]
    );
    assert_eq!(strings(&cache["no_store"]), ["$cookie_session"]);
    assert!(site.get("add_headers").is_none() && site.get("add_headers_on_success").is_none());
    assert!(route(site, "/").get("cache").is_none(), "the site's");
    assert_eq!(route(site, "/account/")["cache"].as_bool(), Some(false));

    // What differs from nginx, with its file and line.
    let f = config.files[1].display();
    let notes: Vec<String> = translation
        .notes
        .iter()
        .map(|n| n.render(&config.files))
        .collect();
    let untranslated: Vec<&String> = notes
        .iter()
        .filter(|n| n.contains(": not translated: "))
        .collect();
    assert_eq!(
        untranslated,
        [
            &format!(
                "{f}:1: not translated: proxy_cache_path (nginx's files under {} are not read: \
                 slipstream keeps its own there and removes the ones it cannot read, so give it \
                 a directory of its own while nginx runs; levels= and the loader's and \
                 manager's settings are nginx's own)",
                cache_dir.display()
            ),
            &format!(
                "{f}:11: not translated: proxy_cache_key (nginx's default, \
                 $scheme$proxy_host$request_uri, keys by the upstream's name: slipstream's \
                 default key, $scheme://$host$request_uri, has the client's Host instead, so \
                 virtual hosts never share entries)"
            ),
        ]
    );
    assert_eq!(translation.untranslated(), 2);
    let ignored = format!(
        "{f}:19: ignored: add_header (slipstream's answers from its cache carry Cache-Status, \
         RFC 9211, which tells the same; $upstream_cache_status is not a variable it has)"
    );
    assert!(notes.contains(&ignored), "{notes:?}");

    // slipstream's own loader takes it: one zone, its sizes, its disk tier where nginx's was.
    let toml_path = dir.join("slipstream.toml");
    std::fs::write(&toml_path, &translation.toml).unwrap();
    let loaded = slipstream::config::Config::load(&toml_path)
        .unwrap_or_else(|e| panic!("{e}\n{}", translation.toml));
    assert_eq!(loaded.cache_zones.len(), 1);
    let zone = &loaded.cache_zones[0];
    assert_eq!(zone.name, "microcache");
    assert_eq!(zone.settings.memory, 256 << 20);
    assert_eq!(zone.settings.inactive, std::time::Duration::from_secs(600));
    assert_eq!(zone.settings.disk, Some((cache_dir.clone(), 512 << 20)));
}
