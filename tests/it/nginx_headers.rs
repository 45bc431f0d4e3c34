//! `add_header` values with variables, differentially: the same site under nginx and,
//! through `slipstream import`, under slipstream (see `nginx_parity` for what is compared).

use crate::nginx_parity::{compare, get, get_with};

const HEADERS: &str = r#"
upstream app { server {backend}; }
map $http_user_agent $agent { default other; ~*bot robot; }
server {
    listen {listen};
    add_header X-Host "$host:$server_port" always;
    add_header X-Seen "$request_method $uri $arg_a|$agent";
    location / { proxy_pass http://app; }
    location ~ ^/cap/(?<word>[a-z]+)$ {
        add_header X-Word "word=$word first=$1";
        return 200 "cap";
    }
    location /missing { return 404; }
    location /origin/ {
        add_header X-Origin $http_origin always;
        proxy_pass http://app;
    }
}
"#;

/// Values rendered per request (request facts, a map, regex groups, request fields), on
/// proxied answers and the proxy's own; without `always` only on successful ones.
#[test]
fn header_values_with_variables_as_nginx() {
    let from = |path| {
        get_with(
            "Origin: https://a.example\r\nUser-Agent: somebot/1\r\n",
            path,
        )
    };
    let asks = [
        get("/x?a=1"),
        get("/cap/hello"),
        get("/missing"),
        get("/status/404"),
        from("/origin/y"),
        from("/x?a=%41"),
    ];
    let fields = ["x-seen", "x-word", "x-origin"];
    compare("parity-headers", HEADERS, &asks, &fields);
}
