//! nginx's `auth_request`, differentially: the same site under nginx and, through
//! `slipstream import`, under slipstream (see `nginx_parity` for what is compared). The test
//! backend is the service too: `/status/NNN` answers NNN, every answer carries `X-Up: up`.

use crate::nginx_parity::{compare, get, get_with};

const FORWARD_AUTH: &str = r#"
upstream app { server {backend}; }
server {
    listen {listen};
    auth_request_set $up $upstream_http_x_up;
    proxy_set_header X-Custom $up;
    location / { auth_request /auth-ok; proxy_pass http://app; }
    location /unasked/ { auth_request off; proxy_pass http://app; }
    location /denied/ { auth_request /auth-no; proxy_pass http://app; }
    location /forbidden/ { auth_request /auth-forbidden; proxy_pass http://app; }
    location /open/ { proxy_pass http://app; }
    location /prefix/ { auth_request /checks/ok; proxy_pass http://app; }
    location = /auth-ok {
        internal;
        proxy_pass http://app/status/200;
        proxy_pass_request_body off;
        proxy_set_header Content-Length "";
    }
    location = /auth-no { internal; proxy_pass http://app/status/401; }
    location = /auth-forbidden { internal; proxy_pass http://app/status/403; }
    location /checks/ { internal; proxy_pass http://app/status/204/; }
}
"#;

/// The service's 2xx lets the request through with the copied field, 401 and 403 are
/// answered as they are, a route without `auth_request` is not asked, and the asked path
/// follows the auth location's `proxy_pass` URI (exact and prefix locations). A client's
/// own field of a copied name never reaches the upstream, asked or not.
#[test]
fn forward_auth_as_nginx() {
    let forged = |path| get_with("X-Custom: forged\r\n", path);
    let asks = [
        get("/x?q=1"),
        forged("/x"),
        forged("/unasked/x"),
        forged("/open/x"),
        get("/denied/x"),
        get("/forbidden/x"),
        get("/open/x"),
        get("/prefix/x"),
        get("/auth-ok"),
    ];
    compare("parity-forward-auth", FORWARD_AUTH, &asks, &["x-up"]);
}
