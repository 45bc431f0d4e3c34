//! Text helpers of the config: positions of errors, durations and sizes as written, and the
//! nearest valid word for a misspelt key.

use std::time::Duration;

pub(super) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, column)
}

/// Parses `"500ms"`, `"30s"`, `"5m"`, `"1h"`.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().ok()?;
    match unit.trim() {
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" => Some(Duration::from_secs(n * 60)),
        "h" => Some(Duration::from_secs(n * 3600)),
        _ => None,
    }
}

/// Parses `"4096"`, `"16KB"`, `"16k"`, `"1MB"`, `"1GiB"` (units are powers of 1024).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().ok()?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// Turns serde's "unknown field `x`, expected one of `a`, `b`" into a message naming the
/// nearest valid key, and a value of the wrong type into advice on writing it.
pub(super) fn suggest_nearest(message: &str) -> String {
    let message = message.trim();
    if message.starts_with("invalid type") && message.ends_with("expected a string") {
        return format!(
            "{message}: write it in quotes, e.g. \"30s\" for a duration, \"16KB\" for a size, \
             \"127.0.0.1:8080\" for an address"
        );
    }
    match unknown_field(message) {
        Some((unknown, valid)) if !valid.is_empty() => {
            unknown_key_message(unknown, nearest(unknown, &valid), &valid)
        }
        _ => message.to_string(),
    }
}

/// "unknown key `x`; did you mean `n`? (valid keys: ...)".
pub(super) fn unknown_key_message(unknown: &str, nearest: Option<&str>, valid: &[&str]) -> String {
    let valid = valid.join(", ");
    match nearest {
        Some(n) => format!("unknown key `{unknown}`; did you mean `{n}`? (valid keys: {valid})"),
        None => format!("unknown key `{unknown}` (valid keys: {valid})"),
    }
}

/// For serde's "unknown field `x`, expected one of `a`, `b`": `x` and the table's valid keys,
/// in the order the table declares them.
pub(super) fn unknown_field(message: &str) -> Option<(&str, Vec<&str>)> {
    if !message.trim().starts_with("unknown field") {
        return None;
    }
    let names: Vec<&str> = message.split('`').skip(1).step_by(2).collect();
    let (unknown, valid) = names.split_first()?;
    Some((unknown, valid.to_vec()))
}

/// The candidate closest to `word` by edit distance; of equally near ones, the first (a
/// table declares its main keys first: `prefix` in a route is nearer `path` than `index`).
pub(super) fn nearest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    equally_nearest(word, candidates).first().copied()
}

/// Every candidate at the least edit distance from `word`, in their order.
pub(super) fn equally_nearest<'a>(word: &str, candidates: &[&'a str]) -> Vec<&'a str> {
    let distances: Vec<usize> = candidates.iter().map(|c| edit_distance(word, c)).collect();
    let Some(least) = distances.iter().min() else {
        return Vec::new();
    };
    candidates
        .iter()
        .zip(&distances)
        .filter(|(_, d)| *d == least)
        .map(|(c, _)| *c)
        .collect()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}
