//! Reading the file into its TOML structs. A misspelt key stops the TOML reader: it is
//! reported with the valid key of its table nearest to it, read as that key, and the file read
//! again, so one run reports every problem. When the value does not fit the key guessed
//! (`prefix = ["index.html"]` read as `path`, which takes a string), or the table has that key
//! already, an equally near key is guessed instead (`index`); what the reader says of a value
//! under a wrong guess is never reported, since it is about the guess, not the file.

use super::text::{equally_nearest, suggest_nearest, unknown_field, unknown_key_message};
use super::{FileConfig, Validator};

/// Keys read under another name before reading stops (each costs one more read of the file).
const MAX_RENAMED: usize = 50;

/// A misspelt key read under the name of a valid one.
struct Guess {
    /// Where the key starts in the text read.
    at: usize,
    /// The name it is read under now.
    key: String,
    /// Where its value starts in the text read (`None` for a dotted key).
    value: Option<usize>,
    /// Its error in the validator's list, whose suggestion follows the guess.
    error: usize,
    /// The key as written.
    unknown: String,
    /// The table's valid keys.
    valid: Vec<String>,
    /// The nearest key, named when no equally near one takes the value.
    first: String,
    /// Equally near keys not tried yet, the next one last.
    others: Vec<String>,
}

impl<'a> Validator<'a> {
    /// A validator of `text`, named `file` in its errors, resolving host names with `resolve`.
    pub(super) fn new(
        text: &'a str,
        file: &'a str,
        resolve: fn(&str) -> Vec<std::net::SocketAddr>,
    ) -> Validator<'a> {
        Validator {
            text: text.to_string(),
            original: text,
            file,
            resolve,
            dns_at_start: false,
            errors: Vec::new(),
            quiet: Vec::new(),
            edits: Vec::new(),
            map_names: Vec::new(),
            groups: Vec::new(),
            rate_zone_names: Vec::new(),
            conn_zone_names: Vec::new(),
            cache_zones: Vec::new(),
            named_locations: Vec::new(),
        }
    }
}

/// The file's structs, or `None` when reading had to stop (the errors say why).
pub(super) fn read(v: &mut Validator<'_>) -> Option<FileConfig> {
    let mut renamed = Vec::new();
    let mut guess: Option<Guess> = None;
    loop {
        let e = match toml::from_str(&v.text) {
            Ok(raw) => return Some(raw),
            Err(e) => e,
        };
        let span = e.span().unwrap_or(0..0);
        let message = e.message().trim();
        let misfit = |g: &Guess| {
            g.value == Some(span.start)
                || (message.starts_with("duplicate key")
                    && v.text.get(span.clone()) == Some(g.key.as_str()))
        };
        if let Some(mut g) = guess.take().filter(misfit) {
            // The value does not fit the guess, or the table has that key already: the next
            // equally near key, else the first one again.
            let next = g
                .others
                .pop()
                .or_else(|| (g.key != g.first).then(|| g.first.clone()));
            if let Some(next) = next {
                rename(v, &mut g, next);
                guess = Some(g);
                continue;
            }
            if !message.ends_with("expected a string") {
                // No equally near key takes it: the first guess is named, and this error,
                // about the guess, is not reported. Nothing after it can be read.
                return None;
            }
        }
        if renamed.contains(&span.start) {
            // The renamed key clashes with one already there: stop here.
            return None;
        }
        let errors = v.errors.len();
        v.error(span.start, suggest_nearest(message));
        let written = v.text.get(span.clone()).map(|t| t.trim_matches('"'));
        let unknown = unknown_field(message).filter(|(u, valid)| {
            written == Some(*u) && !valid.is_empty() && renamed.len() < MAX_RENAMED
        });
        if let Some((unknown, valid)) = unknown {
            let mut others: Vec<String> = equally_nearest(unknown, &valid)
                .iter()
                .rev()
                .map(ToString::to_string)
                .collect();
            let first = others.pop().unwrap_or_default();
            let mut g = Guess {
                at: span.start,
                key: v.text[span.clone()].to_string(),
                value: None,
                error: errors,
                unknown: unknown.to_string(),
                valid: valid.iter().map(ToString::to_string).collect(),
                first: first.clone(),
                others,
            };
            renamed.push(span.start);
            rename(v, &mut g, first);
            guess = Some(g).filter(|g| g.value.is_some() && g.error < v.errors.len());
        } else if message.ends_with("expected a string")
            && renamed.len() < MAX_RENAMED
            && written.is_some_and(|w| !w.is_empty() && !w.contains('\n'))
        {
            // A number or word where a string belongs (`drain_timeout = 30`): read on with it
            // quoted; what validation then says of it is not repeated.
            let quoted = format!("{:?}", written.unwrap_or_default());
            v.edit(span.clone(), &quoted);
            renamed.push(span.start);
            v.quiet.push(span.start);
        } else {
            return None;
        }
    }
}

/// Reads the guessed key as `key` from now on, and names it in the key's error.
fn rename(v: &mut Validator<'_>, g: &mut Guess, key: String) {
    v.edit(g.at..g.at + g.key.len(), &key);
    if let Some(e) = v.errors.get_mut(g.error) {
        let valid: Vec<&str> = g.valid.iter().map(String::as_str).collect();
        e.message = unknown_key_message(&g.unknown, Some(&key), &valid);
    }
    g.key = key;
    g.value = value_start(&v.text, g.at + g.key.len());
}

/// Where the value of the key ending at `end` starts: past `=` and blanks (`None` for a
/// dotted key, whose value is a table further on).
fn value_start(text: &str, end: usize) -> Option<usize> {
    let rest = text.get(end..)?;
    let after_eq = rest.trim_start_matches([' ', '\t']).strip_prefix('=')?;
    let value = after_eq.trim_start_matches([' ', '\t']);
    Some(text.len() - value.len())
}
