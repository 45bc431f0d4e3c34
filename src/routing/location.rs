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

    /// The path of a prefix or exact location (empty for the others).
    pub fn path(&self) -> &str {
        match self {
            Match::Prefix(p) | Match::PrefixStop(p) | Match::Exact(p) => p,
            _ => "",
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
    /// Every location, in config order (a nested one right after its parent's earlier
    /// children).
    pub matches: Vec<Match>,
    /// Whether each may answer nginx's auto-redirect (a prefix ending in `/` that proxies).
    pub redirects: Vec<bool>,
    /// The location each is nested in.
    parents: Vec<Option<usize>>,
    /// The level holding each location's nested locations.
    nested: Vec<Option<usize>>,
    /// The site's own locations first, then one level per location with nested ones.
    levels: Vec<Level>,
}

/// Locations side by side: the site's own, or those nested in one location.
#[derive(Debug, Clone, Default)]
struct Level {
    /// Prefix locations, longest first.
    prefixes: Vec<usize>,
    /// Regex locations, in config order.
    regexes: Vec<usize>,
    /// Exact locations.
    exact: Vec<usize>,
    /// Every regex location of the level in one set, when the `regex` crate takes them all:
    /// one pass over the path finds which match, and only the first is run for its groups.
    set: Option<regex::RegexSet>,
}

/// The location chosen for a path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chosen {
    /// Its index in config order.
    pub index: Option<usize>,
    /// The groups of the regex location that matched.
    pub captures: Option<Captures>,
    /// The path is the name of the proxying prefix location `index` without its final `/`:
    /// answer 301.
    pub redirect_to_slash: bool,
    /// A backtracking regex ran past its step limit: refuse the request (500).
    pub failed: bool,
}

/// How the search of one level ended (nginx's `NGX_OK`/`NGX_DONE` against `NGX_AGAIN`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Search {
    /// An exact or regex location, a redirect or a failure: nothing else is tried.
    Done,
    /// A prefix location or nothing: the enclosing level's regexes may still win.
    Again,
}

impl Locations {
    /// Adds a location of the site itself; returns its index.
    pub fn push(&mut self, matcher: Match, redirects: bool) -> usize {
        if self.levels.is_empty() {
            self.levels.push(Level::default());
        }
        self.add(0, None, matcher, redirects)
    }

    /// Adds a location nested in `parent`, refused as nginx refuses it: nothing nests in an
    /// exact or named location, a named location is never nested, and a nested prefix or
    /// exact location must start with its parent's prefix.
    pub fn push_within(
        &mut self,
        parent: usize,
        matcher: Match,
        redirects: bool,
    ) -> Result<usize, String> {
        let outer = &self.matches[parent];
        let (inner, outer_label) = (matcher.label(), outer.label());
        match (outer, &matcher) {
            (Match::Exact(_) | Match::Named(_), _) => {
                return Err(format!(
                    "location {inner:?} cannot be inside location {outer_label:?}"
                ))
            }
            (_, Match::Named(_)) => {
                return Err(format!(
                    "named location {inner:?} can be on the site's level only"
                ))
            }
            (_, Match::Regex(_)) => {}
            (Match::Prefix(p) | Match::PrefixStop(p), m) if m.path().starts_with(p.as_str()) => {}
            _ => {
                return Err(format!(
                    "location {inner:?} is outside location {outer_label:?}"
                ))
            }
        }
        let level = match self.nested[parent] {
            Some(level) => level,
            None => {
                self.levels.push(Level::default());
                self.nested[parent] = Some(self.levels.len() - 1);
                self.levels.len() - 1
            }
        };
        Ok(self.add(level, Some(parent), matcher, redirects))
    }

    fn add(&mut self, level: usize, parent: Option<usize>, m: Match, redirects: bool) -> usize {
        let i = self.matches.len();
        let l = &mut self.levels[level];
        match &m {
            Match::Prefix(_) | Match::PrefixStop(_) => l.prefixes.push(i),
            Match::Regex(_) => l.regexes.push(i),
            Match::Exact(_) => l.exact.push(i),
            Match::Named(_) => {}
        }
        self.matches.push(m);
        self.redirects.push(redirects);
        self.parents.push(parent);
        self.nested.push(None);
        i
    }

    /// The locations beside one nested in `parent` (the site's own for `None`).
    pub fn siblings(&self, parent: Option<usize>) -> impl Iterator<Item = &Match> {
        self.matches
            .iter()
            .zip(&self.parents)
            .filter(move |(_, p)| **p == parent)
            .map(|(m, _)| m)
    }

    /// Sorts each level's prefixes longest first (stable: among equals, the first written
    /// wins), and puts its regexes in one set when they are more than one and all linear.
    pub fn finish(&mut self) {
        let matches = &self.matches;
        for level in &mut self.levels {
            level
                .prefixes
                .sort_by_key(|&i| std::cmp::Reverse(matches[i].prefix().map_or(0, str::len)));
            let sources: Option<Vec<String>> = level
                .regexes
                .iter()
                .map(|&i| match &matches[i] {
                    Match::Regex(p) => p.linear_source(),
                    _ => None,
                })
                .collect();
            level.set = sources.filter(|s| s.len() > 1).and_then(|s| {
                regex::RegexSetBuilder::new(s)
                    .size_limit(1 << 24)
                    .build()
                    .ok()
            });
        }
    }

    /// Whether only plain prefixes are configured, none nested (routing is then a prefix
    /// test).
    pub fn only_prefixes(&self) -> bool {
        let Some(top) = self.levels.first() else {
            return true;
        };
        self.levels.len() == 1
            && top.regexes.is_empty()
            && top.exact.is_empty()
            && top.prefixes.len() == self.matches.len()
            && self.redirects.iter().all(|r| !r)
            && self.matches.iter().all(|m| matches!(m, Match::Prefix(_)))
    }

    /// The longest prefix location of the site's own that `path` starts with (plain
    /// prefixes only: the fast path).
    pub fn longest_prefix(&self, path: &str) -> Option<usize> {
        self.levels
            .first()
            .and_then(|l| self.longest_prefix_in(l, path))
    }

    fn longest_prefix_in(&self, level: &Level, path: &str) -> Option<usize> {
        level.prefixes.iter().copied().find(|&i| {
            self.matches[i]
                .prefix()
                .is_some_and(|p| path.starts_with(p))
        })
    }

    /// Chooses the location for the normalised path `uri`, in nginx's order.
    pub fn choose(&self, uri: &str) -> Chosen {
        let mut chosen = Chosen::default();
        if !self.levels.is_empty() {
            self.search(0, uri, &mut chosen);
        }
        chosen
    }

    /// nginx's search of one level: an exact location ends it; the longest prefix is taken
    /// and the locations nested in it searched; unless that prefix is `^~`, the level's
    /// first matching regex then wins over both, and the locations nested in it are
    /// searched in turn.
    fn search(&self, level: usize, uri: &str, chosen: &mut Chosen) -> Search {
        let l = &self.levels[level];
        let exact = l.exact.iter().copied();
        if let Some(i) = exact.clone().find(|&i| self.matches[i].path() == uri) {
            *chosen = Chosen::at(i, None);
            return Search::Done;
        }
        // A prefix location named exactly the path is found first (nginx's tree stops at
        // the equal node), so no redirect then.
        let equal = l
            .prefixes
            .iter()
            .any(|&i| self.matches[i].prefix() == Some(uri));
        let redirecting = l.prefixes.iter().copied().find(|&i| {
            self.redirects[i]
                && self.matches[i]
                    .prefix()
                    .is_some_and(|p| p.len() == uri.len() + 1 && p.starts_with(uri))
        });
        if let Some(i) = redirecting.filter(|_| !equal) {
            // The redirect is that location's answer (its fields, its figures).
            *chosen = Chosen {
                redirect_to_slash: true,
                ..Chosen::at(i, None)
            };
            return Search::Done;
        }
        let prefix = self.longest_prefix_in(l, uri);
        if let Some(i) = prefix {
            *chosen = Chosen::at(i, None);
            if let Some(inner) = self.nested[i] {
                if self.search(inner, uri, chosen) == Search::Done {
                    return Search::Done;
                }
            }
            if matches!(self.matches[i], Match::PrefixStop(_)) {
                return Search::Again;
            }
        }
        match self.first_regex(l, uri) {
            Err(()) => *chosen = Chosen::failed(),
            Ok(None) => return Search::Again,
            Ok(Some((i, captures))) => {
                *chosen = Chosen::at(i, Some(captures));
                if let Some(inner) = self.nested[i] {
                    self.search(inner, uri, chosen);
                }
            }
        }
        Search::Done
    }

    /// The level's first regex location matching `uri`, with its groups: found by the set in
    /// one pass, else one by one. `Err` when a backtracking regex ran past its step limit.
    fn first_regex(&self, l: &Level, uri: &str) -> Result<Option<(usize, Captures)>, ()> {
        let mut first = None;
        match &l.set {
            Some(set) => first = set.matches(uri).iter().next().map(|n| l.regexes[n]),
            None => {
                for &i in &l.regexes {
                    if let Match::Regex(p) = &self.matches[i] {
                        if p.try_is_match(uri).map_err(|_| ())? {
                            first = Some(i);
                            break;
                        }
                    }
                }
            }
        }
        let Some(i) = first else { return Ok(None) };
        let Match::Regex(pattern) = &self.matches[i] else {
            return Ok(None);
        };
        Ok(pattern.try_captures(uri).map_err(|_| ())?.map(|c| (i, c)))
    }

    /// The named location `name`.
    pub fn named(&self, name: &str) -> Option<usize> {
        self.matches
            .iter()
            .position(|m| matches!(m, Match::Named(n) if n == name))
    }
}

impl Chosen {
    fn at(index: usize, captures: Option<Captures>) -> Chosen {
        Chosen {
            index: Some(index),
            captures,
            ..Chosen::default()
        }
    }

    fn failed() -> Chosen {
        Chosen {
            failed: true,
            ..Chosen::default()
        }
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
        assert!(linear.levels[0].set.is_some());
        let mixed = locations(&["/", "~ ^/a(?!z)", "~* ^/A/b", "~ b$"], &[]);
        assert!(mixed.levels[0].set.is_none());
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
        assert_eq!(c.index, Some(1));
        assert_eq!(l.choose("/api/x").index, Some(2));
        let l = locations(&["= /api", "/api/"], &[false, true]);
        assert_eq!(l.choose("/api").index, Some(0));
        // A prefix named exactly the path takes it: no redirect.
        let l = locations(&["/api", "/api/"], &[false, true]);
        assert_eq!(l.choose("/api").index, Some(0));
        assert!(!l.choose("/api").redirect_to_slash);
    }

    /// nginx's nested search (ngx_http_core_find_location): the longest prefix's nested
    /// locations are searched first, and a nested exact or regex location wins outright; a
    /// nested prefix only stands until the enclosing level's regexes are tried; a regex
    /// location's nested regexes override it.
    #[test]
    fn nested_locations_are_searched_as_nginx_does() {
        let mut l = Locations::default();
        let m = |t: &str| Match::parse(t).unwrap();
        let root = l.push(m("/"), false); // 0
        let app = l.push(m("/app/"), false); // 1
        let php = l.push(m("~ \\.php$"), false); // 2
        let app_exact = l.push_within(app, m("= /app/x"), false).unwrap(); // 3
        let app_static = l.push_within(app, m("/app/static/"), false).unwrap(); // 4
        let app_css = l.push_within(app, m("~ \\.css$"), false).unwrap(); // 5
        let stop = l.push(m("^~ /stop/"), false); // 6
        let stop_js = l.push_within(stop, m("~ \\.js$"), false).unwrap(); // 7
        let php_admin = l.push_within(php, m("~ ^/admin/"), false).unwrap(); // 8
        l.finish();
        let pick = |uri: &str| l.choose(uri).index;
        assert_eq!(pick("/x"), Some(root));
        assert_eq!(pick("/app/y"), Some(app));
        assert_eq!(pick("/app/x"), Some(app_exact));
        assert_eq!(pick("/app/static/a.png"), Some(app_static));
        // A nested regex wins over the nested prefix and over the site's regexes.
        assert_eq!(pick("/app/static/a.css"), Some(app_css));
        // The site's regex wins over a nested prefix when no nested regex matches.
        assert_eq!(pick("/app/static/a.php"), Some(php));
        assert_eq!(pick("/app/a.php"), Some(php));
        // `^~` stops the site's regexes, not its own nested ones.
        assert_eq!(pick("/stop/a.js"), Some(stop_js));
        assert_eq!(pick("/stop/a.php"), Some(stop));
        // A regex location's nested regexes override it; others leave it chosen.
        assert_eq!(pick("/admin/a.php"), Some(php_admin));
        assert_eq!(pick("/b/a.php"), Some(php));
        assert!(!l.only_prefixes());
        // nginx's refusals.
        let exact = l.push(m("= /e"), false);
        assert!(l.push_within(exact, m("~ x"), false).is_err());
        assert!(l.push_within(app, m("/other/"), false).is_err());
        assert!(l.push_within(app, m("@named"), false).is_err());
        assert!(l.push_within(php, m("/app/z"), false).is_err());
        assert_eq!(l.siblings(Some(app)).count(), 3);
    }

    #[test]
    fn bad_locations_are_refused() {
        for bad in ["~ (", "= x", "@", "x", "^~ x"] {
            assert!(Match::parse(bad).is_err(), "{bad}");
        }
        assert!(locations(&["/", "/a/"], &[]).only_prefixes());
    }
}
