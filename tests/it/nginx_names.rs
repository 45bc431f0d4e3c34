//! Server names, differentially: the same site under nginx and, through `slipstream
//! import`, under slipstream (see `nginx_parity` for what is compared).

use crate::nginx_parity::{compare, get_with};

const NAMES: &str = r#"
server {
    listen {listen} default_server;
    server_name example.com;
    location / { return 200 "default $host"; }
}
server {
    listen {listen};
    server_name ~^(?<sub>[a-z]+)\.apps\.example$ ~^www\.(?<rest>.+)$;
    location / { return 200 "regex sub=$sub rest=$rest host=$host"; }
    location ~ ^/(?<sub>x)/ { return 200 "location sub=$sub"; }
}
server {
    listen {listen};
    server_name exact.apps.example *.wild.example;
    location / { return 200 "exact $host"; }
}
server {
    listen {listen};
    server_name ~^Caps\.(?<c>[a-z]+)$;
    location / { return 200 "caps $c"; }
}
"#;

/// Regex server names with named captures as variables, after exact and wildcard names,
/// and a location's group of the same name taking over.
#[test]
fn regex_server_names_as_nginx() {
    let on = get_with;
    let asks = [
        on("Host: shop.apps.example\r\n", "/"),
        on("Host: SHOP.Apps.Example\r\n", "/"),
        on("Host: exact.apps.example\r\n", "/"),
        on("Host: a.wild.example\r\n", "/"),
        on("Host: www.other.test\r\n", "/"),
        on("Host: shop.apps.example\r\n", "/x/y"),
        on("Host: 9.apps.example\r\n", "/"),
        on("Host: nothing.test\r\n", "/"),
        // A regex name with a capital letter is caseless (nginx).
        on("Host: caps.one\r\n", "/"),
        on("Host: CAPS.TWO\r\n", "/"),
    ];
    compare("parity-names", NAMES, &asks, &[]);
}
