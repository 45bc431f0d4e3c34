//! The admin listener's keys: `admin` (where it listens) and `admin_token_file` (the switch and
//! the credential for the requests that change state, such as purges).

use std::net::SocketAddr;
use std::sync::Arc;

use toml::Spanned;

use super::Validator;

impl Validator<'_> {
    /// The admin listener's address: a bare port binds to loopback (the admin pages are for
    /// this host).
    pub(super) fn admin_addr(&mut self, value: Option<&Spanned<String>>) -> Option<SocketAddr> {
        let value = value?;
        match value.get_ref().parse::<u16>() {
            Ok(port) => Some(SocketAddr::from(([127, 0, 0, 1], port))),
            Err(_) => self.socket_addr(value),
        }
    }

    /// The token that state-changing admin requests must carry (`Authorization: Bearer`): the
    /// first line of `admin_token_file`, at least 16 characters. Without the key such requests
    /// are refused.
    pub(super) fn admin_token(&mut self, value: Option<&Spanned<String>>) -> Option<Arc<str>> {
        let value = value?;
        let at = value.span().start;
        let path = self.relative(value.get_ref());
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) => {
                self.error(at, format!("{}: {e}", path.display()));
                return None;
            }
        };
        let token = text.lines().next().unwrap_or("").trim();
        if token.len() < 16 || !token.bytes().all(|b| b.is_ascii_graphic()) {
            let reason = "its first line must be a token of at least 16 printable characters \
                          without spaces (for example: openssl rand -hex 32)";
            self.error(at, format!("{}: {reason}", path.display()));
            return None;
        }
        readable_by_others(&path);
        Some(token.into())
    }
}

/// Warns when the token file can be read by every user of the host.
fn readable_by_others(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(path) {
        if meta.permissions().mode() & 0o004 != 0 {
            tracing::warn!(
                "{}: the admin token can be read by every user of this host (chmod 600 it)",
                path.display()
            );
        }
    }
}
