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
    ];
    compare("parity-nested", NESTED, &asks, &["x-level", "x-own"]);
}
