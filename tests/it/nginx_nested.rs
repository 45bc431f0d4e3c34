//! nginx's nested locations, differentially: the same site under nginx and, through
//! `slipstream import`, under slipstream (see `nginx_parity` for what is compared).

use crate::nginx_parity::{compare, get};

const NESTED: &str = r#"
upstream app { server {backend}; }
server {
    listen {listen};
    location / { proxy_pass http://app; }
    location /app/ {
        add_header X-Level parent always;
        location = /app/exact { return 200 "app exact"; }
        location /app/static/ { return 200 "app static $uri"; }
        location ~ \.css$ { return 200 "app css"; }
        location /app/inherit/ { proxy_pass http://app; }
        location /app/own/ { add_header X-Own own always; return 200 "own"; }
        location /app/api/ { proxy_pass http://app; }
        return 200 "app $uri";
    }
    location ~ \.gif$ {
        location ~ ^/admin/ { return 200 "admin gif"; }
        return 200 "gif $uri";
    }
    location ^~ /stop/ {
        location ~ \.css$ { return 200 "stop css"; }
        return 200 "stop";
    }
    location /private/ {
        deny all;
        location /private/open/ { allow all; proxy_pass http://app; }
        location /private/closed/ { proxy_pass http://app; }
    }
    location /hidden/ {
        internal;
        location ~ \.json$ { return 200 "json"; }
        return 200 "hidden";
    }
    location /rw/ {
        rewrite ^ /elsewhere;
        location /rw/inner/ { return 200 "inner $uri"; }
        return 200 "rw $uri";
    }
}
"#;

/// nginx's search (a nested exact or regex location wins; a nested prefix stands only until
/// the site's regexes are tried; `^~` stops the site's regexes, not its nested ones; a regex
/// location's nested regexes override it), inheritance (fields and access pass down
/// all-or-nothing; rewrite rules and `proxy_pass` do not), and the auto-redirect of a nested
/// proxying prefix.
#[test]
fn nested_locations_as_nginx() {
    let asks = [
        get("/app/x"),
        get("/app/exact"),
        get("/app/static/a.png"),
        get("/app/static/a.css"),
        get("/app/static/a.gif"),
        get("/app/a.css"),
        get("/app/inherit/x?q=1"),
        get("/app/own/x"),
        get("/app/api"),
        get("/admin/a.gif"),
        get("/b/a.gif"),
        get("/stop/a.css"),
        get("/stop/a.gif"),
        get("/private/x"),
        get("/private/open/x"),
        get("/private/closed/x"),
        get("/rw/x"),
        get("/rw/inner/x"),
        get("/other"),
        get("/hidden/x.json"),
        get("/hidden/x"),
    ];
    compare("parity-nested", NESTED, &asks, &["x-level", "x-own"]);
}

const NAMED: &str = r#"
upstream app { server {backend}; }
server {
    listen {listen};
    root {www};
    location / { try_files $uri $uri/index.html @app; }
    location /guarded/ { try_files $uri @guarded; }
    location /post/ { try_files $uri @app; }
    location /rw/ { try_files $uri @rewritten; }
    location @app { add_header X-Named app always; proxy_pass http://app; }
    location @guarded { deny all; proxy_pass http://app; }
    location @rewritten { rewrite ^/rw/(.*)$ /api/$1 break; proxy_pass http://app; }
    location /alt/ { rewrite ^/alt/(.*)$ /$1 break; }
    location /gone/ { error_page 404 = /404.html; return 404; }
    location /moved/ { rewrite ^/moved/(.*)$ /m/$1 break; try_files $uri @app; }
    location /inter/ { try_files $uri @inter; }
    location @inter {
        proxy_intercept_errors on;
        error_page 503 =200 /here.txt;
        proxy_pass http://app;
    }
}
"#;

/// `try_files` falling back to a named location: the request goes on there with its method
/// and body, under that location's fields, access and rules.
#[test]
fn try_files_reaches_named_locations_as_nginx() {
    let www = crate::support::temp_path("named-www");
    let _ = std::fs::remove_dir_all(&www);
    std::fs::create_dir_all(www.join("dir")).unwrap();
    std::fs::write(www.join("here.txt"), "a file\n").unwrap();
    std::fs::write(www.join("dir/index.html"), "an index\n").unwrap();
    let site = NAMED.replace("{www}", www.to_str().unwrap());
    let post = crate::nginx_parity::Ask {
        method: "POST",
        path: "/post/form?x=1",
        fields: "Content-Type: text/plain\r\n",
        body: "a body",
    };
    let asks = [
        get("/here.txt"),
        get("/dir/"),
        get("/missing?q=1"),
        get("/guarded/x"),
        post,
        get("/rw/thing"),
        // An error page's request falling back to a named location.
        get("/gone/x"),
        // The path the rules rewrote is the one the named location gets.
        get("/moved/x?q=1"),
        // The named location's error pages answer its failures.
        get("/inter/status/503"),
        get("/inter/status/502"),
        // A root route serves the rewritten path wherever it leads.
        get("/alt/here.txt"),
    ];
    compare("parity-named", &site, &asks, &["x-named"]);
}
