//! A CORS rule (the Fetch standard's CORS protocol, as operators write it in nginx with
//! `add_header` and `if ($request_method = OPTIONS) { return 204; }`): which origins may read
//! a site's or route's answers, preflights answered by the proxy with 204, and the fields an
//! allowed origin's answers carry. Checked at load ([`Cors::new`]); the rules phase asks it
//! for the fields of one request ([`Cors::fields`]).

/// A route's CORS rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cors {
    /// Allowed origins: exact (`https://app.example.com`), a subdomain pattern
    /// (`https://*.example.com`), or any (`*`).
    origins: Vec<String>,
    any_origin: bool,
    /// `Access-Control-Allow-Methods`.
    methods: String,
    /// `Access-Control-Allow-Headers`; `None`: the preflight's requested headers are allowed.
    headers: Option<String>,
    /// `Access-Control-Expose-Headers`.
    expose: String,
    credentials: bool,
    /// `Access-Control-Max-Age` in seconds.
    max_age: Option<u64>,
}

/// What one request's CORS makes of it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CorsFields {
    /// A preflight: the proxy answers it with 204 and these fields.
    pub preflight: bool,
    /// Field lines for the answer (`Name: value\r\n`).
    pub lines: Vec<u8>,
}

/// The rule as written in the config.
pub struct CorsSpec<'a> {
    /// Allowed origins.
    pub origins: &'a [String],
    /// Allowed methods (default GET, HEAD, POST).
    pub methods: Option<&'a [String]>,
    /// Allowed request fields (default: those the preflight asks for).
    pub headers: Option<&'a [String]>,
    /// Response fields the page may read.
    pub expose: &'a [String],
    /// Whether credentials (cookies, Authorization) may be sent.
    pub credentials: bool,
    /// How long a browser may keep a preflight's answer, in seconds.
    pub max_age: Option<u64>,
}

impl Cors {
    /// A rule from its spec, or why it cannot be one.
    pub fn new(spec: &CorsSpec<'_>) -> Result<Cors, String> {
        if spec.origins.is_empty() {
            return Err(
                "list the origins allowed (origins = [\"https://app.example\"] or [\"*\"])".into(),
            );
        }
        let token = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        };
        for origin in spec.origins {
            let valid = origin == "*"
                || (origin.starts_with("http://") || origin.starts_with("https://"))
                    && !origin.ends_with('/')
                    && !origin
                        .bytes()
                        .any(|b| b.is_ascii_whitespace() || b.is_ascii_control());
            if !valid {
                return Err(format!(
                    "origin {origin:?}: \"*\" or scheme://host[:port] (no path), \"https://*.example.com\" for subdomains"
                ));
            }
        }
        let any_origin = spec.origins.iter().any(|o| o == "*");
        if any_origin && spec.credentials {
            return Err("credentials cannot go with origin \"*\": list the origins".into());
        }
        let list = |key: &str, items: &[String]| -> Result<String, String> {
            match items.iter().find(|i| !token(i)) {
                Some(bad) => Err(format!("{key}: {bad:?} is not a token")),
                None => Ok(items.join(", ")),
            }
        };
        let default_methods = ["GET".to_string(), "HEAD".into(), "POST".into()];
        Ok(Cors {
            origins: spec.origins.iter().filter(|o| *o != "*").cloned().collect(),
            any_origin,
            methods: list("methods", spec.methods.unwrap_or(&default_methods))?,
            headers: spec.headers.map(|h| list("headers", h)).transpose()?,
            expose: list("expose", spec.expose)?,
            credentials: spec.credentials,
            max_age: spec.max_age,
        })
    }

    /// Whether `origin` may read answers.
    fn allows(&self, origin: &[u8]) -> bool {
        if self.any_origin {
            return true;
        }
        let Ok(origin) = std::str::from_utf8(origin) else {
            return false;
        };
        self.origins
            .iter()
            .any(|allowed| match allowed.split_once("://*.") {
                Some((scheme, suffix)) => origin
                    .strip_prefix(scheme)
                    .and_then(|o| o.strip_prefix("://"))
                    .and_then(|host| host.strip_suffix(suffix))
                    .is_some_and(|sub| sub.ends_with('.') && sub.len() > 1),
                None => allowed == origin,
            })
    }

    /// The CORS of a request with `method`, `Origin` and, for a preflight, the requested
    /// method and headers.
    pub fn fields(
        &self,
        method: &str,
        origin: Option<&[u8]>,
        request_method: Option<&[u8]>,
        request_headers: Option<&[u8]>,
    ) -> CorsFields {
        let mut lines = Vec::new();
        let preflight = method == "OPTIONS" && origin.is_some() && request_method.is_some();
        // Answers differ by Origin unless every origin gets "*".
        let vary = match (self.any_origin, preflight) {
            (true, false) => None,
            (true, true) => Some("Access-Control-Request-Method, Access-Control-Request-Headers"),
            (false, false) => Some("Origin"),
            (false, true) => {
                Some("Origin, Access-Control-Request-Method, Access-Control-Request-Headers")
            }
        };
        if let Some(v) = vary {
            push(&mut lines, "Vary", v.as_bytes());
        }
        let Some(origin) = origin.filter(|o| self.allows(o) && is_field_value(o)) else {
            return CorsFields { preflight, lines };
        };
        if self.any_origin {
            push(&mut lines, "Access-Control-Allow-Origin", b"*");
        } else {
            push(&mut lines, "Access-Control-Allow-Origin", origin);
        }
        if self.credentials {
            push(&mut lines, "Access-Control-Allow-Credentials", b"true");
        }
        if preflight {
            push(
                &mut lines,
                "Access-Control-Allow-Methods",
                self.methods.as_bytes(),
            );
            let asked = request_headers.filter(|h| is_field_value(h) && !h.is_empty());
            match (&self.headers, asked) {
                (Some(h), _) => push(&mut lines, "Access-Control-Allow-Headers", h.as_bytes()),
                (None, Some(h)) => push(&mut lines, "Access-Control-Allow-Headers", h),
                (None, None) => {}
            }
            if let Some(age) = self.max_age {
                push(
                    &mut lines,
                    "Access-Control-Max-Age",
                    age.to_string().as_bytes(),
                );
            }
        } else if !self.expose.is_empty() {
            push(
                &mut lines,
                "Access-Control-Expose-Headers",
                self.expose.as_bytes(),
            );
        }
        CorsFields { preflight, lines }
    }
}

fn push(lines: &mut Vec<u8>, name: &str, value: &[u8]) {
    lines.extend_from_slice(name.as_bytes());
    lines.extend_from_slice(b": ");
    lines.extend_from_slice(value);
    lines.extend_from_slice(b"\r\n");
}

/// A value that can go back into a field line as it is.
fn is_field_value(v: &[u8]) -> bool {
    v.iter().all(|&b| b == b'\t' || (b' '..0x7f).contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(ToString::to_string).collect()
    }

    fn rule(origins: &[&str], credentials: bool) -> Cors {
        let origins = strings(origins);
        let expose = strings(&["X-Total"]);
        Cors::new(&CorsSpec {
            origins: &origins,
            methods: None,
            headers: None,
            expose: &expose,
            credentials,
            max_age: Some(600),
        })
        .unwrap()
    }

    fn text(f: &CorsFields) -> String {
        String::from_utf8(f.lines.clone()).unwrap()
    }

    #[test]
    fn an_allowed_origin_reads_answers_and_others_do_not() {
        let c = rule(&["https://app.example", "https://*.example.org"], true);
        let f = c.fields("GET", Some(b"https://app.example"), None, None);
        assert!(!f.preflight);
        assert_eq!(
            text(&f),
            "Vary: Origin\r\nAccess-Control-Allow-Origin: https://app.example\r\nAccess-Control-Allow-Credentials: true\r\nAccess-Control-Expose-Headers: X-Total\r\n"
        );
        let f = c.fields("GET", Some(b"https://a.b.example.org"), None, None);
        assert!(text(&f).contains("Allow-Origin: https://a.b.example.org\r\n"));
        for denied in [
            &b"https://evil.example"[..],
            b"http://app.example",
            b"https://example.org",
            b"https://.example.org",
            b"https://app.example.evil",
            b"https://xexample.org",
        ] {
            let f = c.fields("GET", Some(denied), None, None);
            assert_eq!(
                text(&f),
                "Vary: Origin\r\n",
                "{}",
                String::from_utf8_lossy(denied)
            );
        }
        assert_eq!(text(&c.fields("GET", None, None, None)), "Vary: Origin\r\n");
    }

    #[test]
    fn preflights_are_answered_with_what_may_be_sent() {
        let c = rule(&["*"], false);
        let f = c.fields(
            "OPTIONS",
            Some(b"https://x.example"),
            Some(b"PUT"),
            Some(b"content-type, x-a"),
        );
        assert!(f.preflight);
        assert_eq!(
            text(&f),
            "Vary: Access-Control-Request-Method, Access-Control-Request-Headers\r\nAccess-Control-Allow-Origin: *\r\nAccess-Control-Allow-Methods: GET, HEAD, POST\r\nAccess-Control-Allow-Headers: content-type, x-a\r\nAccess-Control-Max-Age: 600\r\n"
        );
        // OPTIONS without the preflight fields is an ordinary request.
        assert!(
            !c.fields("OPTIONS", Some(b"https://x.example"), None, None)
                .preflight
        );
        assert!(!c.fields("OPTIONS", None, Some(b"PUT"), None).preflight);
    }

    #[test]
    fn bad_rules_are_refused() {
        let spec = |origins: &[&str], credentials: bool, methods: Option<&[String]>| {
            let origins = strings(origins);
            Cors::new(&CorsSpec {
                origins: &origins,
                methods,
                headers: None,
                expose: &[],
                credentials,
                max_age: None,
            })
        };
        assert!(spec(&[], false, None).is_err());
        assert!(spec(&["*"], true, None).is_err());
        assert!(spec(&["app.example"], false, None).is_err());
        assert!(spec(&["https://app.example/"], false, None).is_err());
        assert!(spec(
            &["https://app.example"],
            false,
            Some(&strings(&["GET POST"]))
        )
        .is_err());
        assert!(spec(&["https://app.example"], true, Some(&strings(&["PUT"]))).is_ok());
    }
}
