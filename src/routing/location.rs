//! nginx's locations: how a route's `location` is written (`= /x`, `^~ /x`, `~ re`, `~* re`,
//! `@name`, `/x`) and how one is chosen for a path, in nginx's order:
//!
//! 1. an exact location equal to the path wins outright;
//! 2. otherwise the longest prefix location is remembered; a prefix location ending in `/`
//!    that proxies, named by the path plus `/`, answers a 301 to it (nginx's auto-redirect);
//! 3. unless the remembered prefix is `^~`, regex locations are tried in config order and
//!    the first that matches wins (its groups become `$1..$9` and named variables);
//! 4. otherwise the remembered prefix wins; with none, no route.
//!
//! Named locations are never chosen by path: only `try_files` fallbacks and rules reach them.

use crate::rules::pattern::{Captures, Pattern};

/// How a route matches paths.
#[derive(Debug, Clone, PartialEq)]
pub enum Match {
    /// `/x`: paths starting with it; the longest wins, regexes may override it.
    Prefix(String),
    /// `^~ /x`: as `Prefix`, and when it is the longest no regex is tried.
    PrefixStop(String),
    /// `= /x`: only this path, before anything else.
    Exact(String),
    /// `~ re` (or `~* re`, compiled caseless): in config order after the prefixes.
    Regex(Pattern),
    /// `@name`: only by name.
    Named(String),
}

impl Match {
    /// Parses a `location` value.
    pub fn parse(text: &str) -> Result<Match, String> {
        let text = text.trim();
        let (modifier, rest) = match text.split_once(char::is_whitespace) {
            Some((m, r)) if matches!(m, "=" | "^~" | "~" | "~*") => (m, r.trim_start()),
            _ => match text.strip_prefix('=') {
                // nginx also reads `=/x`.
                Some(r) if r.starts_with('/') => ("=", r),
                _ => ("", text),
            },
        };
        let path = |p: &str| -> Result<String, String> {
            if p.starts_with('/') {
                Ok(p.to_string())
            } else {
                Err(format!("location {text:?}: a path must start with '/'"))
            }
        };
        Ok(match modifier {
            "=" => Match::Exact(path(rest)?),
            "^~" => Match::PrefixStop(path(rest)?),
            "~" | "~*" => Match::Regex(
                Pattern::new(rest, modifier == "~*")
                    .map_err(|e| format!("location {text:?}: {e}"))?,
            ),
            _ => match rest.strip_prefix('@') {
                Some(name) if !name.is_empty() => Match::Named(name.to_string()),
                Some(_) => return Err(format!("location {text:?}: a named location needs a name")),
                None => Match::Prefix(path(rest)?),
            },
        })
    }

    /// The location as a label (metrics, logs): the way it was written.
    pub fn label(&self) -> String {
        match self {
            Match::Prefix(p) => p.clone(),
            Match::PrefixStop(p) => format!("^~ {p}"),
            Match::Exact(p) => format!("= {p}"),
            Match::Regex(r) => format!("~ {}", r.source()),
            Match::Named(n) => format!("@{n}"),
        }
    }

    /// The prefix of a prefix location.
    pub fn prefix(&self) -> Option<&str> {
        match self {
            Match::Prefix(p) | Match::PrefixStop(p) => Some(p),
            _ => None,
        }
    }
}

/// The locations of one site, indexed for choosing.
#[derive(Debug, Clone, Default)]
pub struct Locations {
    /// Every location, in config order.
    pub matches: Vec<Match>,
    /// Whether each may answer nginx's auto-redirect (a prefix ending in `/` that proxies).
    pub redirects: Vec<bool>,
    /// Prefix locations, longest first.
    prefixes: Vec<usize>,
    /// Regex locations, in config order.
    regexes: Vec<usize>,
    /// Exact locations.
    exact: Vec<usize>,
    /// Every regex location in one set, when the `regex` crate takes them all: one pass over
    /// the path finds which match, and only the first is run for its groups.
    set: Option<regex::RegexSet>,
}

/// The location chosen for a path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chosen {
    /// Its index in config order.
    pub index: Option<usize>,
    /// The groups of the regex location that matched.
    pub captures: Option<Captures>,
    /// The path is a proxying prefix location's name without its final `/`: answer 301.
    pub redirect_to_slash: bool,
    /// A backtracking regex ran past its step limit: refuse the request (500).
    pub failed: bool,
}

impl Chosen {
    fn failed() -> Chosen {
        Chosen {
            failed: true,
            ..Chosen::default()
        }
    }
}

impl Locations {
    /// Adds a location; `redirects` when it may answer the auto-redirect.
    pub fn push(&mut self, matcher: Match, redirects: bool) {
        let i = self.matches.len();
        match &matcher {
            Match::Prefix(_) | Match::PrefixStop(_) => self.prefixes.push(i),
            Match::Regex(_) => self.regexes.push(i),
            Match::Exact(_) => self.exact.push(i),
            Match::Named(_) => {}
        }
        self.matches.push(matcher);
        self.redirects.push(redirects);
    }

    /// Sorts the prefixes longest first (stable: among equals, the first written wins), and
    /// puts the regexes in one set when they are more than one and all linear.
    pub fn finish(&mut self) {
        let matches = &self.matches;
        self.prefixes
            .sort_by_key(|&i| std::cmp::Reverse(matches[i].prefix().map_or(0, str::len)));
        let sources: Option<Vec<String>> = self
            .regexes
            .iter()
            .map(|&i| match &matches[i] {
                Match::Regex(p) => p.linear_source(),
                _ => None,
            })
            .collect();
        self.set = sources.filter(|s| s.len() > 1).and_then(|s| {
            regex::RegexSetBuilder::new(s)
                .size_limit(1 << 24)
                .build()
                .ok()
        });
    }

    /// Whether only plain prefixes are configured (routing is then a prefix test).
    pub fn only_prefixes(&self) -> bool {
        self.regexes.is_empty()
            && self.exact.is_empty()
            && self.prefixes.len() == self.matches.len()
            && self.redirects.iter().all(|r| !r)
            && self.matches.iter().all(|m| matches!(m, Match::Prefix(_)))
    }

    /// The longest prefix location `path` starts with (plain prefixes only: the fast path).
    pub fn longest_prefix(&self, path: &str) -> Option<usize> {
        self.prefixes.iter().copied().find(|&i| {
            self.matches[i]
                .prefix()
                .is_some_and(|p| path.starts_with(p))
        })
    }

    /// Chooses the location for the normalised path `uri`, in nginx's order.
    pub fn choose(&self, uri: &str) -> Chosen {
        if let Some(&i) = self
            .exact
            .iter()
            .find(|&&i| matches!(&self.matches[i], Match::Exact(p) if p == uri))
        {
            return Chosen {
                index: Some(i),
                ..Chosen::default()
            };
        }
        // A prefix location named exactly the path is found first (nginx's tree stops at
        // the equal node), so no redirect then.
        let equal = self
            .prefixes
            .iter()
            .any(|&i| self.matches[i].prefix() == Some(uri));
        let redirect_to_slash = !equal
            && self.prefixes.iter().any(|&i| {
                self.redirects[i]
                    && self.matches[i]
                        .prefix()
                        .is_some_and(|p| p.len() == uri.len() + 1 && p.starts_with(uri))
            });
        if redirect_to_slash {
            return Chosen {
                redirect_to_slash,
                ..Chosen::default()
            };
        }
        let prefix = self.longest_prefix(uri);
        if let Some(i) = prefix {
            if matches!(self.matches[i], Match::PrefixStop(_)) {
                return Chosen {
                    index: Some(i),
                    ..Chosen::default()
                };
            }
        }
        // The first regex that matches: found by the set in one pass, else one by one.
        let mut first = None;
        match &self.set {
            Some(set) => first = set.matches(uri).iter().next().map(|n| self.regexes[n]),
            None => {
                for &i in &self.regexes {
                    if let Match::Regex(p) = &self.matches[i] {
                        match p.try_is_match(uri) {
                            Ok(true) => {
                                first = Some(i);
                                break;
                            }
                            Ok(false) => {}
                            Err(_) => return Chosen::failed(),
                        }
                    }
                }
            }
        }
        if let Some(i) = first {
            if let Match::Regex(pattern) = &self.matches[i] {
                match pattern.try_captures(uri) {
                    Ok(Some(captures)) => {
                        return Chosen {
                            index: Some(i),
                            captures: Some(captures),
                            ..Chosen::default()
                        }
                    }
                    Ok(None) => {}
                    Err(_) => return Chosen::failed(),
                }
            }
        }
        Chosen {
            index: prefix,
            ..Chosen::default()
        }
    }

    /// The named location `name`.
    pub fn named(&self, name: &str) -> Option<usize> {
        self.matches
            .iter()
            .position(|m| matches!(m, Match::Named(n) if n == name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locations(list: &[&str], proxied: &[bool]) -> Locations {
        let mut l = Locations::default();
        for (i, text) in list.iter().enumerate() {
            l.push(
                Match::parse(text).unwrap(),
                proxied.get(i).copied().unwrap_or(false),
            );
        }
        l.finish();
        l
    }

    /// http_location.t's order: exact, then `^~`, then regexes in order, then the longest
    /// prefix; case matters except for `~*`.
    #[test]
    fn nginx_selection_order() {
        let l = locations(
            &[
                "= /",
                "/",
                "/images/",
                "^~ /static/",
                "~ \\.(gif|jpg)$",
                "~* \\.PNG$",
                "/documents/",
                "~ ^/documents/(?<doc>.+)\\.pdf$",
                "@fallback",
                "=/exact",
            ],
            &[],
        );
        let pick = |uri: &str| l.choose(uri).index;
        assert_eq!(pick("/"), Some(0));
        assert_eq!(pick("/index.html"), Some(1));
        assert_eq!(pick("/images/a.txt"), Some(2));
        assert_eq!(pick("/images/a.gif"), Some(4));
        assert_eq!(pick("/static/a.gif"), Some(3));
        assert_eq!(pick("/x/a.png"), Some(5));
        assert_eq!(pick("/x/a.PnG"), Some(5));
        assert_eq!(pick("/x/a.GIF"), Some(1));
        assert_eq!(pick("/documents/a.gif"), Some(4));
        let c = l.choose("/documents/report.pdf");
        assert_eq!(c.index, Some(7));
        assert_eq!(c.captures.unwrap().named("doc"), Some("report"));
        assert_eq!(pick("/exact"), Some(9));
        assert_eq!(pick("/exact/"), Some(1));
        assert_eq!(l.named("fallback"), Some(8));
        assert!(!l.only_prefixes());
    }

    /// All-linear regexes are tried as one set, a backtracking one makes them be tried one
    /// by one: either way the first written that matches wins.
    #[test]
    fn regex_order_holds_with_and_without_the_set() {
        let linear = locations(&["/", "~ ^/a", "~* ^/A/b", "~ b$"], &[]);
        assert!(linear.set.is_some());
        let mixed = locations(&["/", "~ ^/a(?!z)", "~* ^/A/b", "~ b$"], &[]);
        assert!(mixed.set.is_none());
        for l in [&linear, &mixed] {
            assert_eq!(l.choose("/a/b").index, Some(1));
            assert_eq!(l.choose("/x/b").index, Some(3));
            assert_eq!(l.choose("/x").index, Some(0));
        }
        assert_eq!(linear.choose("/az/b").index, Some(1));
        assert_eq!(mixed.choose("/az/b").index, Some(3));
        assert_eq!(linear.choose("/A/B").index, Some(2));
        // Past the backtracking engine's step limit the choice fails (the request gets 500)
        // instead of skipping the location.
        let slow = locations(&["/", "~ ^/(a*)*(?!a)\\1$x", "~ ^/x"], &[]);
        let chosen = slow.choose(&format!("/{}", "a".repeat(40)));
        assert!(chosen.failed && chosen.index.is_none());
        assert_eq!(slow.choose("/x").index, Some(2));
    }

    #[test]
    fn auto_redirect_for_proxying_prefixes() {
        let l = locations(&["/", "/api/", "~ ^/api"], &[false, true, false]);
        let c = l.choose("/api");
        assert!(c.redirect_to_slash);
        assert_eq!(c.index, None);
        assert_eq!(l.choose("/api/x").index, Some(2));
        let l = locations(&["= /api", "/api/"], &[false, true]);
        assert_eq!(l.choose("/api").index, Some(0));
        // A prefix named exactly the path takes it: no redirect.
        let l = locations(&["/api", "/api/"], &[false, true]);
        assert_eq!(l.choose("/api").index, Some(0));
        assert!(!l.choose("/api").redirect_to_slash);
    }

    #[test]
    fn bad_locations_are_refused() {
        for bad in ["~ (", "= x", "@", "x", "^~ x"] {
            assert!(Match::parse(bad).is_err(), "{bad}");
        }
        assert!(locations(&["/", "/a/"], &[]).only_prefixes());
    }
}
