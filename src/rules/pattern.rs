//! Regular expressions as nginx configs write them (PCRE syntax), compiled once at load.
//!
//! A pattern the `regex` crate accepts runs there: linear time whatever the input, so a
//! hostile URI cannot make it slow. Only a pattern `regex` refuses (lookaround and
//! backreferences, which some real configs use) runs on `fancy-regex`'s backtracking engine,
//! with a step limit: a match that needs more steps than [`BACKTRACK_LIMIT`] is reported
//! ([`LimitHit`]) and the request is refused with 500, as nginx fails a request when PCRE hits
//! its match limit.

use std::sync::Arc;

/// Steps the backtracking engine may take for one match before it gives up.
pub const BACKTRACK_LIMIT: usize = 200_000;

/// Named groups and their indexes, shared by a pattern and every match it makes.
type GroupNames = Arc<[(Box<str>, usize)]>;

/// A compiled pattern with the names of its groups.
#[derive(Debug, Clone)]
pub struct Pattern {
    source: String,
    /// Compiled caseless (nginx's `~*`).
    caseless: bool,
    engine: Engine,
    /// Named groups and their indexes (shared with every match's captures).
    names: GroupNames,
}

#[derive(Debug, Clone)]
enum Engine {
    Linear(regex::Regex),
    Backtracking(Box<fancy_regex::Regex>),
}

/// The backtracking engine ran past [`BACKTRACK_LIMIT`] steps on one match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitHit;

/// What a match captured: the subject and the span of each group, so `$1..$9` and named
/// groups can be read after the subject itself has changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captures {
    subject: String,
    spans: Vec<Option<(usize, usize)>>,
    names: Option<GroupNames>,
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Pattern) -> bool {
        self.source == other.source
    }
}

impl Pattern {
    /// Compiles `source`; `caseless` for nginx's `~*`. The error says why a pattern is refused.
    pub fn new(source: &str, caseless: bool) -> Result<Pattern, String> {
        let engine = match regex::RegexBuilder::new(source)
            .case_insensitive(caseless)
            .size_limit(1 << 22)
            .build()
        {
            Ok(r) => Engine::Linear(r),
            Err(linear) => {
                let fancy = fancy_regex::RegexBuilder::new(source)
                    .case_insensitive(caseless)
                    .backtrack_limit(BACKTRACK_LIMIT)
                    .build()
                    .map_err(|e| format!("invalid regular expression {source:?}: {e}"))?;
                // A pattern both refuse is reported with the linear engine's clearer words.
                if matches!(linear, regex::Error::CompiledTooBig(_)) {
                    return Err(format!("regular expression {source:?} is too large"));
                }
                Engine::Backtracking(Box::new(fancy))
            }
        };
        let names: Vec<(Box<str>, usize)> = match &engine {
            Engine::Linear(r) => r
                .capture_names()
                .enumerate()
                .filter_map(|(i, n)| n.map(|n| (n.into(), i)))
                .collect(),
            Engine::Backtracking(r) => r
                .capture_names()
                .enumerate()
                .filter_map(|(i, n)| n.map(|n| (n.into(), i)))
                .collect(),
        };
        Ok(Pattern {
            source: source.to_string(),
            caseless,
            engine,
            names: names.into(),
        })
    }

    /// The pattern as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The pattern as the `regex` crate would compile it alone (with `(?i)` when caseless),
    /// for a [`regex::RegexSet`] of several; `None` when only the backtracking engine takes it.
    pub fn linear_source(&self) -> Option<String> {
        match self.engine {
            Engine::Linear(_) if self.caseless => Some(format!("(?i:{})", self.source)),
            Engine::Linear(_) => Some(format!("(?:{})", self.source)),
            Engine::Backtracking(_) => None,
        }
    }

    /// Whether the backtracking engine runs it (the `regex` crate refused it).
    pub fn backtracks(&self) -> bool {
        matches!(self.engine, Engine::Backtracking(_))
    }

    /// The names of its groups.
    pub fn group_names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(|(n, _)| &**n)
    }

    /// Whether `text` matches, capturing nothing (past the step limit: no).
    pub fn is_match(&self, text: &str) -> bool {
        self.try_is_match(text).unwrap_or(false)
    }

    /// Whether `text` matches; `Err` when the backtracking engine ran past its step limit,
    /// so the caller can refuse the request instead of guessing (a rule written to deny must
    /// not be stepped around by a path made to be slow).
    pub fn try_is_match(&self, text: &str) -> Result<bool, LimitHit> {
        match &self.engine {
            Engine::Linear(r) => Ok(r.is_match(text)),
            Engine::Backtracking(r) => r.is_match(text).map_err(|_| LimitHit),
        }
    }

    /// The groups of the first match in `text`, or `None` (past the step limit too).
    pub fn captures(&self, text: &str) -> Option<Captures> {
        self.try_captures(text).ok().flatten()
    }

    /// The groups of the first match in `text`; `Err` past the step limit.
    pub fn try_captures(&self, text: &str) -> Result<Option<Captures>, LimitHit> {
        let spans: Vec<Option<(usize, usize)>> = match &self.engine {
            Engine::Linear(r) => {
                let Some(c) = r.captures(text) else {
                    return Ok(None);
                };
                c.iter().map(|m| m.map(|m| (m.start(), m.end()))).collect()
            }
            Engine::Backtracking(r) => {
                let Some(c) = r.captures(text).map_err(|_| LimitHit)? else {
                    return Ok(None);
                };
                (0..c.len())
                    .map(|i| c.get(i).map(|m| (m.start(), m.end())))
                    .collect()
            }
        };
        Ok(Some(Captures {
            subject: text.to_string(),
            spans,
            names: (!self.names.is_empty()).then(|| self.names.clone()),
        }))
    }
}

impl Captures {
    /// Group `i` (`$1` is 1); empty when it did not take part in the match or does not exist.
    pub fn group(&self, i: usize) -> &str {
        match self.spans.get(i) {
            Some(Some((s, e))) => &self.subject[*s..*e],
            _ => "",
        }
    }

    /// The named group `name`, if the pattern has one by that name.
    pub fn named(&self, name: &str) -> Option<&str> {
        let names = self.names.as_ref()?;
        let (_, i) = names.iter().find(|(n, _)| &**n == name)?;
        Some(self.group(*i))
    }

    /// Number of groups, the whole match included.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether nothing was captured.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_where_it_can_backtracking_where_it_must() {
        let p = Pattern::new(r"^/img/(?<name>[^/]+)\.(png|jpg)$", false).unwrap();
        assert!(!p.backtracks());
        let c = p.captures("/img/cat.png").unwrap();
        assert_eq!(c.group(1), "cat");
        assert_eq!(c.group(2), "png");
        assert_eq!(c.named("name"), Some("cat"));
        assert_eq!(c.group(7), "");
        // Lookahead and backreferences: the regex crate refuses them.
        let p = Pattern::new(r"^/(?!admin)(\w+)/\1$", false).unwrap();
        assert!(p.backtracks());
        assert!(p.is_match("/ab/ab"));
        assert!(!p.is_match("/admin/admin"));
        assert!(!p.is_match("/ab/cd"));
        let p = Pattern::new(r"\.PHP$", true).unwrap();
        assert!(p.is_match("/index.php"));
        assert!(Pattern::new("(", false).is_err());
    }

    #[test]
    fn catastrophic_backtracking_stops_at_the_limit() {
        // Nested repetition with a lookahead and a backreference (which force the
        // backtracking engine) against many a's: the step limit ends it.
        let p = Pattern::new(r"^(a*)*(?!a)\1$x", false).unwrap();
        assert!(p.backtracks());
        let subject = "a".repeat(40);
        assert!(!p.is_match(&subject));
        assert!(p.captures(&subject).is_none());
        assert_eq!(p.try_is_match(&subject), Err(LimitHit));
        assert!(p.try_captures(&subject).is_err());
    }
}
