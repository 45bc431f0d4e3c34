//! Who may use a site or route beyond its address rules: users of an htpasswd file (nginx's
//! `auth_basic`), a subrequest to an authorization service (nginx's `auth_request`: forward
//! auth, as oauth2-proxy, Authelia and the like answer it), and how they combine with the
//! address rules (`satisfy`). Values checked at load; the rules phase checks the users
//! ([`basic_allows`]), the proxy's phase (`proxy::auth`) asks the service.

use std::cell::RefCell;
use std::sync::Arc;

use super::htpasswd::{basic_credentials, Htpasswd, VerifiedCache};

/// nginx's `auth_basic` with `auth_basic_user_file`.
#[derive(Debug, Clone)]
pub struct AuthBasic {
    /// The realm named in `WWW-Authenticate`.
    pub realm: String,
    /// The users, read at load (and at each reload).
    pub users: Arc<Htpasswd>,
}

impl AuthBasic {
    /// The `WWW-Authenticate` field line of a 401.
    pub fn challenge(&self) -> Vec<u8> {
        let realm = self.realm.replace(['"', '\\'], "");
        format!("WWW-Authenticate: Basic realm=\"{realm}\"\r\n").into_bytes()
    }
}

thread_local! {
    /// Each worker's memo of credentials verified (bcrypt is slow by design).
    static VERIFIED: RefCell<VerifiedCache> = RefCell::new(VerifiedCache::default());
}

/// Whether the `Authorization` value names a user of `auth` with the right password.
pub fn basic_allows(auth: &AuthBasic, authorization: Option<&[u8]>) -> bool {
    let Some((user, password)) = authorization.and_then(basic_credentials) else {
        return false;
    };
    VERIFIED.with(|v| v.borrow_mut().verify(&auth.users, &user, &password))
}

/// nginx's `auth_request`: before its content, each request is asked of `upstream` at `path`
/// (the client's method and fields, no body); a 2xx lets it through, 401 and 403 are
/// answered as they are, anything else is a 500.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthRequest {
    /// The group the service is in (an HTTP/1.1 group).
    pub upstream: usize,
    /// The path asked (with its query, if any).
    pub path: String,
    /// Fields of the service's 2xx answer set on the request sent on (the client's own
    /// fields of those names are always removed): nginx's `auth_request_set` with
    /// `proxy_set_header`.
    pub copy: Vec<Copied>,
}

/// One field `auth_request` copies from the service's answer onto the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copied {
    /// The answer's field, lower case.
    pub from: String,
    /// The request's field, as written.
    pub to: String,
}
