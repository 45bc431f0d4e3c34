//! nginx's `error_page` as values: which answer codes a site or route replaces, with what (a
//! path served in its place by an internal redirect, a named location, or a redirect to a
//! URL), and with which status. Checked at load ([`ErrorPage::new`]); the proxy's error-page
//! phase (`proxy::error_page`) looks an answer up ([`find`]) and serves the page.

/// One `error_page` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorPage {
    /// The answer codes it replaces (300 to 599, not 499).
    pub codes: Vec<u16>,
    /// What is served instead.
    pub target: ErrorTarget,
    /// The status the client gets.
    pub status: ErrorStatus,
}

/// What an error page serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorTarget {
    /// A path on this site (`/50x.html`, with an optional `?query`), served as a `GET` (a
    /// `HEAD` stays one) after routing it again like a rewritten path.
    Path {
        /// The path.
        path: String,
        /// Its query, if the entry gives one.
        query: Option<String>,
    },
    /// A named location of the site (`@name`, kept without its `@`), reached with the
    /// request's method and path.
    Named(String),
    /// Anything else is a URL the client is redirected to (302, or the 3xx given).
    Redirect(String),
}

/// Which status the replaced answer goes out with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorStatus {
    /// The original code (nginx's default).
    Keep,
    /// This code (nginx's `=404`).
    Set(u16),
    /// Whatever the page's own answer says (nginx's bare `=`).
    Page,
}

impl ErrorPage {
    /// An entry for `codes`, served from `to`, with `status` (`Some(0)`: the page's own
    /// status, nginx's bare `=`), or why it cannot be one.
    pub fn new(codes: &[u16], to: &str, status: Option<u16>) -> Result<ErrorPage, String> {
        if codes.is_empty() {
            return Err("list the codes it replaces (codes = [404])".into());
        }
        for &code in codes {
            if !(300..=599).contains(&code) || code == 499 || code == 304 {
                return Err(format!(
                    "code {code}: error pages replace codes 300 to 599 (not 304 or 499)"
                ));
            }
        }
        let target = if let Some(name) = to.strip_prefix('@') {
            if name.is_empty() {
                return Err("\"@\" names no location".into());
            }
            ErrorTarget::Named(name.to_string())
        } else if to.starts_with('/') {
            if to.bytes().any(|b| b.is_ascii_control() || b == b' ') {
                return Err(format!("{to:?}: a path has no spaces or control bytes"));
            }
            match to.split_once('?') {
                Some((path, query)) => ErrorTarget::Path {
                    path: path.to_string(),
                    query: Some(query.to_string()),
                },
                None => ErrorTarget::Path {
                    path: to.to_string(),
                    query: None,
                },
            }
        } else if to.is_empty() || to.bytes().any(|b| b.is_ascii_control() || b == b' ') {
            return Err(format!(
                "{to:?}: a page is a path (/x), a named location (@x) or a URL"
            ));
        } else {
            ErrorTarget::Redirect(to.to_string())
        };
        let status = match status {
            None => ErrorStatus::Keep,
            Some(0) => ErrorStatus::Page,
            // A page has a body: not under a status that has none.
            Some(code) if !(200..=599).contains(&code) || code == 204 || code == 304 => {
                return Err(format!(
                    "status {code}: a page goes out with 200 to 599 (not 204 or 304)"
                ));
            }
            Some(code) => ErrorStatus::Set(code),
        };
        if let (ErrorTarget::Redirect(_), ErrorStatus::Set(code)) = (&target, status) {
            if !matches!(code, 301 | 302 | 303 | 307 | 308) {
                return Err(format!(
                    "status {code}: a redirect to a URL is 301, 302, 303, 307 or 308"
                ));
            }
        }
        Ok(ErrorPage {
            codes: codes.to_vec(),
            target,
            status,
        })
    }

    /// The status the client gets when this page replaces an answer of `code` and the page's
    /// own answer is `page`.
    pub fn status_for(&self, code: u16, page: u16) -> u16 {
        match self.status {
            ErrorStatus::Keep => code,
            ErrorStatus::Set(s) => s,
            ErrorStatus::Page => page,
        }
    }
}

/// The entry that replaces answers of `code`, if any (the first listed wins, as in nginx).
pub fn find(pages: &[ErrorPage], code: u16) -> Option<&ErrorPage> {
    pages.iter().find(|p| p.codes.contains(&code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_told_apart() {
        let p = ErrorPage::new(&[404], "/404.html", None).unwrap();
        assert_eq!(
            p.target,
            ErrorTarget::Path {
                path: "/404.html".into(),
                query: None
            }
        );
        let p = ErrorPage::new(&[500, 502], "/50x.html?from=err", Some(200)).unwrap();
        assert_eq!(
            p.target,
            ErrorTarget::Path {
                path: "/50x.html".into(),
                query: Some("from=err".into())
            }
        );
        assert_eq!(p.status_for(502, 404), 200);
        let p = ErrorPage::new(&[404], "@fallback", Some(0)).unwrap();
        assert_eq!(p.target, ErrorTarget::Named("fallback".into()));
        assert_eq!(p.status_for(404, 200), 200);
        let p = ErrorPage::new(&[403], "https://example.com/no", None).unwrap();
        assert_eq!(
            p.target,
            ErrorTarget::Redirect("https://example.com/no".into())
        );
        assert_eq!(p.status_for(403, 302), 403);
    }

    #[test]
    fn bad_entries_are_refused() {
        assert!(ErrorPage::new(&[], "/x", None).is_err());
        assert!(ErrorPage::new(&[200], "/x", None).is_err());
        assert!(ErrorPage::new(&[499], "/x", None).is_err());
        assert!(ErrorPage::new(&[600], "/x", None).is_err());
        assert!(ErrorPage::new(&[404], "@", None).is_err());
        assert!(ErrorPage::new(&[404], "", None).is_err());
        assert!(ErrorPage::new(&[404], "/a b", None).is_err());
        assert!(ErrorPage::new(&[404], "http://x/", Some(200)).is_err());
        assert!(ErrorPage::new(&[404], "http://x/", Some(301)).is_ok());
        assert!(ErrorPage::new(&[404], "/x", Some(1000)).is_err());
        assert!(ErrorPage::new(&[404], "/x", Some(204)).is_err());
        assert!(ErrorPage::new(&[404], "/x", Some(101)).is_err());
        assert!(ErrorPage::new(&[304], "/x", None).is_err());
    }

    #[test]
    fn the_first_entry_for_a_code_wins() {
        let pages = vec![
            ErrorPage::new(&[404, 500], "/a", None).unwrap(),
            ErrorPage::new(&[404], "/b", None).unwrap(),
        ];
        assert_eq!(
            find(&pages, 404).map(|p| &p.target),
            Some(&ErrorTarget::Path {
                path: "/a".into(),
                query: None
            })
        );
        assert!(find(&pages, 502).is_none());
    }
}
