//! nginx's config syntax, socket- and file-free: directives (`name arg ...;`), blocks
//! (`name arg ... { ... }`), `#` comments, quoted and escaped words, read exactly as nginx's
//! own tokenizer reads them (`ngx_conf_read_token` in nginx 1.22): a quote or `#` starts
//! something only at the start of a word; after a closing quote comes whitespace, `;`, `{` or
//! `)`; `${` does not open a block; `\"`, `\'` and `\\` become the bare character and `\t`,
//! `\r`, `\n` control characters in every word, other backslashes stay. `if (...)` keeps its
//! parentheses in its words, as nginx does.

/// One directive: its name, its arguments and its block, where it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directive {
    /// The directive's name (its first word).
    pub name: String,
    /// The words after the name.
    pub args: Vec<String>,
    /// The directives inside its braces, for a block directive.
    pub block: Option<Vec<Directive>>,
    /// The file it was read from: an index into the reader's list of files.
    pub file: usize,
    /// The line of its name, from 1.
    pub line: usize,
}

/// Why a text is not an nginx config, and on which line (nginx's own wording).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    /// The line, from 1.
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

/// Blocks nested deeper than this are refused (nginx has no limit; real configs nest 4-5).
const MAX_DEPTH: usize = 100;

/// Reads a whole config text; its directives get `file` as their file.
pub fn parse(text: &[u8], file: usize) -> Result<Vec<Directive>, SyntaxError> {
    let mut lexer = Lexer {
        text,
        pos: 0,
        line: 1,
    };
    let (directives, end) = parse_block(&mut lexer, file, 0)?;
    match end {
        End::File => Ok(directives),
        End::Brace(line) => Err(SyntaxError {
            line,
            reason: "unexpected \"}\"".into(),
        }),
    }
}

/// How a list of directives ended.
enum End {
    /// At the end of the text.
    File,
    /// At a `}`, on this line.
    Brace(usize),
}

fn parse_block(
    lexer: &mut Lexer<'_>,
    file: usize,
    depth: usize,
) -> Result<(Vec<Directive>, End), SyntaxError> {
    let mut out = Vec::new();
    loop {
        let (words, stop) = lexer.directive()?;
        let directive = |words: Vec<Word>, block| {
            let mut words = words.into_iter();
            let first = words.next().expect("a directive has a name");
            Directive {
                name: first.text,
                line: first.line,
                args: words.map(|w| w.text).collect(),
                block,
                file,
            }
        };
        match stop {
            Stop::Semicolon => out.push(directive(words, None)),
            Stop::OpenBrace => {
                if depth == MAX_DEPTH {
                    return Err(lexer.error("blocks nested too deep"));
                }
                let (inner, end) = parse_block(lexer, file, depth + 1)?;
                if let End::File = end {
                    return Err(lexer.error("unexpected end of file, expecting \"}\""));
                }
                out.push(directive(words, Some(inner)));
            }
            Stop::CloseBrace => return Ok((out, End::Brace(lexer.line))),
            Stop::EndOfFile => return Ok((out, End::File)),
        }
    }
}

/// One word and the line it starts on.
struct Word {
    text: String,
    line: usize,
}

/// What ended a directive's words.
enum Stop {
    Semicolon,
    OpenBrace,
    /// A `}` (with no words before it).
    CloseBrace,
    /// The end of the text (with no words before it).
    EndOfFile,
}

struct Lexer<'t> {
    text: &'t [u8],
    pos: usize,
    line: usize,
}

/// Where the lexer is within a directive.
#[derive(Default)]
struct State {
    /// Between words.
    last_space: bool,
    /// Just after a closing quote.
    need_space: bool,
    /// In a `#` comment.
    comment: bool,
    /// The character after a backslash.
    escaped: bool,
    /// In a `"` or `'` quoted word.
    double_quoted: bool,
    single_quoted: bool,
    /// After a `$`: a `{` is part of the word.
    variable: bool,
}

impl State {
    /// Takes `ch` within a word; true when it ends the word.
    fn ends_word(&mut self, ch: u8) -> bool {
        if ch == b'{' && self.variable {
            return false;
        }
        self.variable = ch == b'$';
        if ch == b'\\' {
            self.escaped = true;
            return false;
        }
        if self.variable {
            return false;
        }
        if self.double_quoted {
            self.double_quoted = ch != b'"';
            self.need_space = ch == b'"';
            self.need_space
        } else if self.single_quoted {
            self.single_quoted = ch != b'\'';
            self.need_space = ch == b'\'';
            self.need_space
        } else {
            self.last_space = matches!(ch, b' ' | b'\t' | b'\r' | b'\n' | b';' | b'{');
            self.last_space
        }
    }
}

impl Lexer<'_> {
    fn error(&self, reason: &str) -> SyntaxError {
        SyntaxError {
            line: self.line,
            reason: reason.to_string(),
        }
    }

    /// The words of the next directive and what ended them.
    fn directive(&mut self) -> Result<(Vec<Word>, Stop), SyntaxError> {
        let mut words = Vec::new();
        let mut s = State {
            last_space: true,
            ..State::default()
        };
        let (mut start, mut start_line) = (self.pos, self.line);
        loop {
            let Some(&ch) = self.text.get(self.pos) else {
                if !words.is_empty() || !s.last_space {
                    return Err(self.error("unexpected end of file, expecting \";\" or \"}\""));
                }
                return Ok((words, Stop::EndOfFile));
            };
            self.pos += 1;
            if ch == b'\n' {
                self.line += 1;
                s.comment = false;
                if s.last_space {
                    continue;
                }
            }
            if s.comment {
                continue;
            }
            if s.escaped {
                s.escaped = false;
                continue;
            }
            if s.need_space {
                match ch {
                    b' ' | b'\t' | b'\r' | b'\n' => {
                        s.last_space = true;
                        s.need_space = false;
                        continue;
                    }
                    b';' => return Ok((words, Stop::Semicolon)),
                    b'{' => return Ok((words, Stop::OpenBrace)),
                    b')' => {
                        s.last_space = true;
                        s.need_space = false;
                    }
                    _ => return Err(self.error(&format!("unexpected \"{}\"", ch as char))),
                }
            }
            if s.last_space {
                (start, start_line) = (self.pos - 1, self.line);
                match ch {
                    b' ' | b'\t' | b'\r' | b'\n' => {}
                    b';' | b'{' if words.is_empty() => {
                        return Err(self.error(&format!("unexpected \"{}\"", ch as char)));
                    }
                    b';' => return Ok((words, Stop::Semicolon)),
                    b'{' => return Ok((words, Stop::OpenBrace)),
                    b'}' if !words.is_empty() => return Err(self.error("unexpected \"}\"")),
                    b'}' => return Ok((words, Stop::CloseBrace)),
                    b'#' => s.comment = true,
                    b'\\' => (s.escaped, s.last_space) = (true, false),
                    b'"' => (start, s.double_quoted, s.last_space) = (start + 1, true, false),
                    b'\'' => (start, s.single_quoted, s.last_space) = (start + 1, true, false),
                    b'$' => (s.variable, s.last_space) = (true, false),
                    _ => s.last_space = false,
                }
                continue;
            }
            if s.ends_word(ch) {
                words.push(Word {
                    text: unescape(&self.text[start..self.pos - 1]),
                    line: start_line,
                });
                match ch {
                    b';' => return Ok((words, Stop::Semicolon)),
                    b'{' => return Ok((words, Stop::OpenBrace)),
                    _ => {}
                }
            }
        }
    }
}

/// A word's text: `\"`, `\'`, `\\` give the bare character, `\t`, `\r`, `\n` the control
/// character; other backslashes stay.
fn unescape(raw: &[u8]) -> String {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'\\' {
            match raw.get(i + 1) {
                Some(&c @ (b'"' | b'\'' | b'\\')) => {
                    out.push(c);
                    i += 2;
                    continue;
                }
                Some(&c @ (b't' | b'r' | b'n')) => {
                    out.push(match c {
                        b't' => b'\t',
                        b'r' => b'\r',
                        _ => b'\n',
                    });
                    i += 2;
                    continue;
                }
                _ => {}
            }
        }
        out.push(raw[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Writes directives back as nginx syntax, every argument quoted: reading the text again
/// gives the same directives (used by the fuzz target, and to show a directive in messages).
pub fn write(directives: &[Directive], depth: usize, out: &mut String) {
    for d in directives {
        out.push_str(&"    ".repeat(depth));
        write_word(&d.name, out);
        for a in &d.args {
            out.push(' ');
            write_word(a, out);
        }
        match &d.block {
            None => out.push_str(";\n"),
            Some(inner) => {
                out.push_str(" {\n");
                write(inner, depth + 1, out);
                out.push_str(&"    ".repeat(depth));
                out.push_str("}\n");
            }
        }
    }
}

fn write_word(word: &str, out: &mut String) {
    out.push('"');
    for c in word.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<(String, Vec<String>)> {
        parse(text.as_bytes(), 0)
            .unwrap()
            .into_iter()
            .map(|d| (d.name, d.args))
            .collect()
    }

    fn error(text: &str) -> (usize, String) {
        let e = parse(text.as_bytes(), 0).unwrap_err();
        (e.line, e.reason)
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_string()).collect()
    }

    #[test]
    fn directives_blocks_and_lines() {
        let text = "user www-data;\n# a comment ; {\nhttp {\n  server {\n    listen 80;\n  }\n}\n";
        let d = parse(text.as_bytes(), 3).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!((d[0].name.as_str(), d[0].line, d[0].file), ("user", 1, 3));
        let http = &d[1];
        assert_eq!((http.name.as_str(), http.line), ("http", 3));
        let server = &http.block.as_ref().unwrap()[0];
        let listen = &server.block.as_ref().unwrap()[0];
        assert_eq!((listen.line, listen.args.clone()), (5, strings(&["80"])));
        assert_eq!(parse(b"", 0).unwrap(), vec![]);
        assert_eq!(parse(b"a{}b;", 0).unwrap().len(), 2);
    }

    #[test]
    fn quotes_escapes_variables_and_comments_as_nginx_reads_them() {
        let got = words(r#"return 200 "a;b {c}" 'it\'s' x\"y a\tb \d;"#);
        assert_eq!(
            got[0].1,
            strings(&["200", "a;b {c}", "it's", "x\"y", "a\tb", "\\d"])
        );
        // `${` stays in the word; a `#` inside a word is not a comment; `}` inside a word is
        // part of it.
        let got = words("set $a ${host}x;\nadd_header X a#b;\nreturn 200 a}b;");
        assert_eq!(got[0].1, strings(&["$a", "${host}x"]));
        assert_eq!(got[1].1, strings(&["X", "a#b"]));
        assert_eq!(got[2].1, strings(&["200", "a}b"]));
        // `if` keeps its parentheses; a quote may be followed by `)`.
        let d = parse(br#"if ($host = "a.example") { return 404; }"#, 0).unwrap();
        assert_eq!(d[0].args, strings(&["($host", "=", "a.example", ")"]));
        assert_eq!(d[0].block.as_ref().unwrap()[0].name, "return");
        // Words of one directive may span lines.
        let d = parse(b"log_format main\n  '$remote_addr'\n  '$status';", 0).unwrap();
        assert_eq!((d[0].line, d[0].args.len()), (1, 3));
    }

    #[test]
    fn broken_configs_are_refused_with_nginx_reasons_and_lines() {
        assert_eq!(
            error("a b"),
            (1, "unexpected end of file, expecting \";\" or \"}\"".into())
        );
        assert_eq!(
            error("http {\n a b;\n"),
            (3, "unexpected end of file, expecting \"}\"".into())
        );
        assert_eq!(error("a;\n}\n"), (2, "unexpected \"}\"".into()));
        assert_eq!(error("a b }"), (1, "unexpected \"}\"".into()));
        assert_eq!(error(";"), (1, "unexpected \";\"".into()));
        assert_eq!(error("{"), (1, "unexpected \"{\"".into()));
        assert_eq!(error("a \"b\"c;"), (1, "unexpected \"c\"".into()));
        assert_eq!(
            error("a \"b;\n"),
            (2, "unexpected end of file, expecting \";\" or \"}\"".into())
        );
        let deep = "a {".repeat(MAX_DEPTH + 1) + &"}".repeat(MAX_DEPTH + 1);
        assert_eq!(error(&deep).1, "blocks nested too deep");
    }

    #[test]
    fn what_is_written_reads_back_the_same() {
        let text = "a \"q\\\"uote\" 'x\\\\y' ${v} \"tab\\there\";\nb {\n c (\"d\") { e; }\n}\n";
        let first = parse(text.as_bytes(), 0).unwrap();
        let mut again = String::new();
        write(&first, 0, &mut again);
        let second = parse(again.as_bytes(), 0).unwrap();
        let strip = |d: Vec<Directive>| -> Vec<(String, Vec<String>)> {
            d.into_iter().map(|d| (d.name, d.args)).collect()
        };
        assert_eq!(strip(first), strip(second));
    }
}
