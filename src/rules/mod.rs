//! Request rules, nginx's rewrite module as values: `rewrite`, `return` and `if`, compiled
//! at load ([`Rule::compile`]) and run in order over a request ([`run`]), socket-free. The
//! proxy's rules phase (`proxy::rules`) runs a site's rules, chooses the route, runs the
//! route's, and checks access ([`access`]); this module only says what the rules decide.
//!
//! Owns: [`pattern`] (regular expressions, linear engine first), [`template`] (variables),
//! [`uri`] (the normalised path), [`access`] (allow and deny).

pub mod access;
pub mod auth;
pub mod cors;
pub mod error_page;
pub mod expires;
pub mod htpasswd;
pub mod limit;
pub mod map;
pub mod pattern;
pub mod real_ip;
pub mod template;
pub mod uri;
pub mod zones;

use pattern::Pattern;
use template::{Current, Escape, Facts, Template};

/// One rule: an action, and the condition under which it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// nginx's `if (...)`: the action runs only when it holds.
    pub when: Option<Condition>,
    /// What the rule does.
    pub action: Action,
}

/// What a rule does.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// `return CODE [TEXT]`: answer now.
    Return {
        /// The status (444: close without an answer).
        status: u16,
        /// For a redirect, its Location; otherwise the body.
        text: Option<Template>,
    },
    /// `rewrite REGEX REPLACEMENT [FLAG]`: change the path when the regex matches it.
    Rewrite {
        /// Matched against the current path.
        pattern: Pattern,
        /// The new path (or URL, for a redirect): the replacement before its first literal
        /// `?` (split at load, so a `?` a capture brings is part of the path, not a query).
        to: Template,
        /// The replacement's own query, after that `?`.
        query: Option<Template>,
        /// The replacement ends in `?`: the request's query is dropped.
        drop_args: bool,
        /// What happens after.
        flag: Flag,
    },
}

/// What follows a rewrite that matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flag {
    /// No flag: the next rules run on the new path, then the route is chosen again.
    Continue,
    /// `last`: the rules stop and the route is chosen again for the new path.
    Last,
    /// `break`: the rules stop and the request stays on this route with the new path.
    Break,
    /// `redirect`: a 302 to the new path.
    Redirect,
    /// `permanent`: a 301 to the new path.
    Permanent,
}

/// nginx's `if` conditions.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    /// The left side (a variable, usually).
    pub subject: Template,
    /// The test applied to it.
    pub test: Test,
}

/// How a condition tests its subject.
#[derive(Debug, Clone, PartialEq)]
pub enum Test {
    /// Bare variable: true unless empty or `0`.
    NotEmpty,
    /// `=` (or `!=` with `negate`): exact comparison.
    Equals {
        /// The right side.
        value: Template,
        /// `!=`.
        negate: bool,
    },
    /// `~`, `~*` (or `!~`, `!~*` with `negate`): a regular expression; a match sets captures.
    Matches {
        /// The compiled regex.
        pattern: Pattern,
        /// `!~` / `!~*`.
        negate: bool,
    },
}

/// An answer the rules give instead of the route's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The status; 444 closes the connection without an answer.
    pub status: u16,
    /// The Location of a redirect (made absolute when sent if it starts with `/`).
    pub location: Option<String>,
    /// A body given by `return CODE TEXT`.
    pub body: Option<String>,
}

/// What a list of rules decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Every rule ran; the path may have changed (`Current::uri`).
    Done,
    /// A `last` rewrite: choose the route again.
    Last,
    /// A `break` rewrite: stay on this route.
    Break,
    /// Answer now.
    Answer(Answer),
    /// A backtracking regex ran past its step limit: refuse the request (500).
    Failed,
}

/// Runs `rules` in order over the request.
pub fn run(rules: &[Rule], facts: &Facts<'_>, current: &mut Current) -> Step {
    for rule in rules {
        if let Some(condition) = &rule.when {
            match holds(condition, facts, current) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(_) => return Step::Failed,
            }
        }
        match &rule.action {
            Action::Return { status, text } => {
                return Step::Answer(give(*status, text, facts, current))
            }
            Action::Rewrite {
                pattern,
                to,
                query,
                drop_args,
                flag,
            } => {
                let captures = match pattern.try_captures(&current.uri) {
                    Ok(Some(c)) => c,
                    Ok(None) => {
                        // A regex that fails clears the groups of the one before it (nginx).
                        current.captures = None;
                        continue;
                    }
                    Err(_) => return Step::Failed,
                };
                current.captures = Some(captures);
                let redirect = to.is_url() || matches!(flag, Flag::Redirect | Flag::Permanent);
                // Captures are decoded text: in a redirect's path they are escaped as a path,
                // in a query as a query value, so they cannot add a query or a parameter.
                let mut path = String::new();
                let path_mode = if redirect { Escape::Path } else { Escape::None };
                to.render_escaping(facts, current, path_mode, &mut path);
                let new_query = query.as_ref().map(|q| {
                    let mut out = String::new();
                    q.render_escaping(facts, current, Escape::Query, &mut out);
                    out
                });
                let args = joined_args(new_query, &current.args, *drop_args);
                if redirect {
                    let status = if *flag == Flag::Permanent { 301 } else { 302 };
                    let mut location = path;
                    if !args.is_empty() {
                        location.push('?');
                        location.push_str(&args);
                    }
                    return Step::Answer(Answer {
                        status,
                        location: Some(location),
                        body: None,
                    });
                }
                current.uri = path;
                current.args = args;
                current.rewrites += 1;
                match flag {
                    Flag::Last => return Step::Last,
                    Flag::Break => return Step::Break,
                    _ => {}
                }
            }
        }
    }
    Step::Done
}

/// The answer of `return`.
fn give(status: u16, text: &Option<Template>, facts: &Facts<'_>, current: &Current) -> Answer {
    let rendered = text.as_ref().map(|t| t.to_string(facts, current));
    if matches!(status, 301 | 302 | 303 | 307 | 308) {
        Answer {
            status,
            location: rendered,
            body: None,
        }
    } else {
        Answer {
            status,
            location: None,
            body: rendered,
        }
    }
}

/// The query after a rewrite, as nginx makes it: the replacement's own query with the
/// request's after `&`; the request's alone when the replacement has none; nothing of the
/// request's when the replacement ends in `?`.
fn joined_args(own: Option<String>, request: &str, drop_request: bool) -> String {
    match own {
        Some(q) if drop_request || request.is_empty() => q,
        Some(q) if q.is_empty() => request.to_string(),
        Some(q) => format!("{q}&{request}"),
        None if drop_request => String::new(),
        None => request.to_string(),
    }
}

/// Whether a condition holds; a regex test sets (or clears) the captures.
fn holds(
    condition: &Condition,
    facts: &Facts<'_>,
    current: &mut Current,
) -> Result<bool, pattern::LimitHit> {
    let subject = condition.subject.to_string(facts, current);
    Ok(match &condition.test {
        Test::NotEmpty => !subject.is_empty() && subject != "0",
        Test::Equals { value, negate } => (subject == value.to_string(facts, current)) != *negate,
        Test::Matches { pattern, negate } => {
            current.captures = pattern.try_captures(&subject)?;
            current.captures.is_some() != *negate
        }
    })
}

impl Rule {
    /// A rule from its config form; `names` are the named groups of the route's regex,
    /// `maps` the config's map names (`$NAME` reads that map).
    pub fn compile(spec: &RuleSpec<'_>, names: &[&str], maps: &[String]) -> Result<Rule, String> {
        let when = spec
            .condition
            .map(|c| Condition::parse(c, names, maps))
            .transpose()?;
        let mut names: Vec<&str> = names.to_vec();
        if let Some(Condition {
            test: Test::Matches { pattern, .. },
            ..
        }) = &when
        {
            names.extend(pattern.group_names());
        }
        let action = match (spec.status, spec.rewrite) {
            (Some(_), Some(_)) => {
                return Err("a rule has either return or rewrite, not both".into())
            }
            (None, None) => return Err("a rule needs return or rewrite".into()),
            (Some(status), None) => {
                if spec.flag.is_some() {
                    return Err("flag applies to rewrite rules".into());
                }
                if !(200..=599).contains(&status) && status != 444 {
                    return Err(format!(
                        "return {status}: the status must be 200-599 or 444"
                    ));
                }
                let redirect = matches!(status, 301 | 302 | 303 | 307 | 308);
                let text = match (spec.to, spec.body) {
                    (Some(_), Some(_)) => return Err("a return has either to or body, not both".into()),
                    (Some(_), None) if !redirect => {
                        return Err(format!("return {status}: to (a Location) needs a redirect status (301, 302, 303, 307, 308)"))
                    }
                    (None, Some(_)) if redirect => {
                        return Err(format!("return {status}: a redirect takes to (its Location), not body"))
                    }
                    (Some(t), None) | (None, Some(t)) => Some(Template::parse_with(t, &names, maps)?),
                    (None, None) => None,
                };
                Action::Return { status, text }
            }
            (None, Some(regex)) => {
                let pattern = Pattern::new(regex, false)?;
                let own: Vec<String> = pattern.group_names().map(str::to_string).collect();
                names.extend(own.iter().map(String::as_str));
                let to = spec.to.ok_or("a rewrite needs to (the replacement)")?;
                if spec.body.is_some() {
                    return Err("body applies to return rules".into());
                }
                let flag = match spec.flag {
                    None => Flag::Continue,
                    Some("last") => Flag::Last,
                    Some("break") => Flag::Break,
                    Some("redirect") => Flag::Redirect,
                    Some("permanent") => Flag::Permanent,
                    Some(other) => {
                        return Err(format!(
                            "unknown flag {other:?}: last, break, redirect or permanent"
                        ))
                    }
                };
                let (to, drop_args) = match to.strip_suffix('?') {
                    Some(t) => (t, true),
                    None => (to, false),
                };
                let (path, query) = match to.split_once('?') {
                    Some((p, q)) => (p, Some(Template::parse_with(q, &names, maps)?)),
                    None => (to, None),
                };
                Action::Rewrite {
                    pattern,
                    to: Template::parse_with(path, &names, maps)?,
                    query,
                    drop_args,
                    flag,
                }
            }
        };
        Ok(Rule { when, action })
    }
}

/// A rule as a config file gives it.
#[derive(Debug, Default, Clone, Copy)]
pub struct RuleSpec<'a> {
    /// `if`.
    pub condition: Option<&'a str>,
    /// `return`.
    pub status: Option<u16>,
    /// `rewrite`.
    pub rewrite: Option<&'a str>,
    /// `to`.
    pub to: Option<&'a str>,
    /// `body`.
    pub body: Option<&'a str>,
    /// `flag`.
    pub flag: Option<&'a str>,
}

impl Condition {
    /// Parses nginx's `if` condition without its parentheses: `$v`, `$v = x`, `$v != x`,
    /// `$v ~ re`, `$v ~* re`, `$v !~ re`, `$v !~* re`. File tests are refused.
    pub fn parse(text: &str, names: &[&str], maps: &[String]) -> Result<Condition, String> {
        let text = text.trim();
        let text = text
            .strip_prefix('(')
            .and_then(|t| t.strip_suffix(')'))
            .unwrap_or(text)
            .trim();
        if !text.starts_with('$') {
            return Err(format!(
                "if {text:?}: a condition starts with a variable (file tests such as -f are not supported)"
            ));
        }
        let (subject, rest) = match text.find(char::is_whitespace) {
            Some(at) => (&text[..at], text[at..].trim_start()),
            None => (text, ""),
        };
        let subject = Template::parse_with(subject, names, maps)?;
        if rest.is_empty() {
            return Ok(Condition {
                subject,
                test: Test::NotEmpty,
            });
        }
        let (op, value) = rest
            .split_once(char::is_whitespace)
            .map(|(o, v)| (o, unquote(v.trim())))
            .ok_or_else(|| format!("if {text:?}: an operator needs a value"))?;
        let test = match op {
            "=" | "!=" => Test::Equals {
                value: Template::parse_with(value, names, maps)?,
                negate: op == "!=",
            },
            "~" | "~*" | "!~" | "!~*" => Test::Matches {
                pattern: Pattern::new(value, op.ends_with('*'))?,
                negate: op.starts_with('!'),
            },
            other => return Err(format!("if {text:?}: unknown operator {other:?}")),
        };
        Ok(Condition { subject, test })
    }
}

/// A value without the quotes around it.
fn unquote(v: &str) -> &str {
    for q in ['"', '\''] {
        if let Some(inner) = v.strip_prefix(q).and_then(|v| v.strip_suffix(q)) {
            return inner;
        }
    }
    v
}

#[cfg(test)]
mod tests;
