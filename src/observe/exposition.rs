//! The Prometheus text format's rules in one place, so every family on `/metrics` is written
//! the same way: a `# HELP` and a `# TYPE` line once, before all of the family's samples (a
//! family's samples are never interleaved with another's), and label values escaped.

use std::fmt::Write;

/// A family's type, as its `# TYPE` line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    /// Only goes up (the name ends in `_total`).
    Counter,
    /// Goes up and down.
    Gauge,
    /// `_bucket{le}`, `_sum` and `_count` samples.
    Histogram,
}

/// Writes the `# HELP` and `# TYPE` lines that open the family `name`; its samples follow.
pub fn family(out: &mut String, name: &str, kind: Type, help: &str) {
    debug_assert_eq!(kind == Type::Counter, name.ends_with("_total"), "{name}");
    let kind = match kind {
        Type::Counter => "counter",
        Type::Gauge => "gauge",
        Type::Histogram => "histogram",
    };
    let help = help.replace('\\', "\\\\").replace('\n', "\\n");
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Escapes a label value (`\`, `"` and newlines).
pub fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_and_labels_are_escaped() {
        let mut out = String::new();
        family(&mut out, "x_total", Type::Counter, "a \\ b\nc");
        assert_eq!(out, "# HELP x_total a \\\\ b\\nc\n# TYPE x_total counter\n");
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
