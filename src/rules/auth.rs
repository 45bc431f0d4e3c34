//! Who may use a site or route beyond its address rules: a subrequest to an authorization
//! service (nginx's `auth_request`: forward auth, as oauth2-proxy, Authelia and the like
//! answer it). Values checked at load; the proxy's phase (`proxy::auth`) asks the service.

/// nginx's `auth_request`: before its content, each request is asked of `upstream` at `path`
/// (the client's method and fields, no body); a 2xx lets it through, 401 and 403 are
/// answered as they are, anything else is a 500.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthRequest {
    /// The group the service is in (an HTTP/1.1 group).
    pub upstream: usize,
    /// The path asked (with its query, if any).
    pub path: String,
    /// Fields of the service's 2xx answer set on the request sent on (lower case; the
    /// client's own fields of these names are always removed): nginx's `auth_request_set`
    /// with `proxy_set_header`.
    pub copy: Vec<String>,
}
