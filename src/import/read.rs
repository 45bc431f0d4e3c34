//! Reading an nginx config from disk: the file, then every `include` in it, in place, as
//! nginx does. A relative include is found from the main file's folder (nginx's conf
//! prefix when run with `-c`); a pattern with `*`, `?` or `[` takes every file it matches in
//! byte order, none being fine; a named file that is missing is reported and skipped (nginx
//! would stop; an import goes on and says so).

use std::path::{Path, PathBuf};

use super::syntax::{parse, Directive, SyntaxError};

/// Includes nested deeper than this are refused: an include that includes itself.
const MAX_INCLUDE_DEPTH: usize = 32;

/// A config read with its includes.
#[derive(Debug)]
pub struct Config {
    /// The files read, the main one first; directives name theirs by index.
    pub files: Vec<PathBuf>,
    /// The directives, includes replaced by what they include.
    pub directives: Vec<Directive>,
    /// What could not be read and was skipped (missing includes), as `FILE:LINE: reason`.
    pub skipped: Vec<String>,
}

/// Why a config cannot be read: a file that cannot be opened or is not nginx syntax.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadError(pub String);

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ReadError {}

/// Reads the config at `path` and everything it includes.
pub fn read_config(path: &Path) -> Result<Config, ReadError> {
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut reader = Reader {
        base,
        files: Vec::new(),
        skipped: Vec::new(),
    };
    let directives = reader.read_file(path, 0)?;
    Ok(Config {
        files: reader.files,
        directives,
        skipped: reader.skipped,
    })
}

struct Reader {
    /// The folder relative includes are found from.
    base: PathBuf,
    files: Vec<PathBuf>,
    skipped: Vec<String>,
}

impl Reader {
    fn read_file(&mut self, path: &Path, depth: usize) -> Result<Vec<Directive>, ReadError> {
        let text = std::fs::read(path)
            .map_err(|e| ReadError(format!("{}: cannot read: {e}", path.display())))?;
        let file = self.files.len();
        self.files.push(path.to_path_buf());
        let directives = parse(&text, file).map_err(|SyntaxError { line, reason }| {
            ReadError(format!("{}:{line}: {reason}", path.display()))
        })?;
        self.expand(directives, depth)
    }

    /// Replaces each `include` in `directives` (and in their blocks) by what it names.
    fn expand(
        &mut self,
        directives: Vec<Directive>,
        depth: usize,
    ) -> Result<Vec<Directive>, ReadError> {
        let mut out = Vec::with_capacity(directives.len());
        for mut d in directives {
            if d.name == "include" && d.args.len() == 1 && d.block.is_none() {
                let at = format!("{}:{}", self.files[d.file].display(), d.line);
                if depth == MAX_INCLUDE_DEPTH {
                    return Err(ReadError(format!("{at}: includes nested too deep")));
                }
                for path in self.matches(&d.args[0], &at)? {
                    out.extend(self.read_file(&path, depth + 1)?);
                }
                continue;
            }
            if let Some(block) = d.block.take() {
                d.block = Some(self.expand(block, depth)?);
            }
            out.push(d);
        }
        Ok(out)
    }

    /// The files an include names: the one file, or a pattern's matches in byte order.
    fn matches(&mut self, name: &str, at: &str) -> Result<Vec<PathBuf>, ReadError> {
        let path = self.base.join(name);
        if !name.contains(['*', '?', '[']) {
            if path.is_file() {
                return Ok(vec![path]);
            }
            let why = format!("{at}: include {}: no such file (skipped)", path.display());
            self.skipped.push(why);
            return Ok(Vec::new());
        }
        let pattern = path.to_string_lossy().into_owned();
        let found =
            glob::glob(&pattern).map_err(|e| ReadError(format!("{at}: include {pattern}: {e}")))?;
        let mut files: Vec<PathBuf> = found
            .filter_map(Result::ok)
            .filter(|p| p.is_file())
            .collect();
        files.sort_by(|a, b| {
            a.as_os_str()
                .as_encoded_bytes()
                .cmp(b.as_os_str().as_encoded_bytes())
        });
        Ok(files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("slipstream-import-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("conf.d")).unwrap();
        dir
    }

    #[test]
    fn includes_are_read_in_place_patterns_in_byte_order_and_missing_files_skipped() {
        let dir = folder("includes");
        std::fs::write(
            dir.join("nginx.conf"),
            "events {}\nhttp {\n  include mime.types;\n  include conf.d/*.conf;\n  include gone.conf;\n  include none/*.conf;\n}\n",
        )
        .unwrap();
        std::fs::write(dir.join("mime.types"), "types { text/html html; }\n").unwrap();
        std::fs::write(dir.join("conf.d/b.conf"), "server { listen 81; }\n").unwrap();
        std::fs::write(dir.join("conf.d/a.conf"), "server { listen 80; }\n").unwrap();
        std::fs::write(dir.join("conf.d/skip.txt"), "not a match;\n").unwrap();
        let c = read_config(&dir.join("nginx.conf")).unwrap();
        let http = c.directives[1].block.as_ref().unwrap();
        let names: Vec<&str> = http.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["types", "server", "server"]);
        let listen = |i: usize| http[i].block.as_ref().unwrap()[0].args[0].clone();
        assert_eq!((listen(1), listen(2)), ("80".to_string(), "81".to_string()));
        assert_eq!(c.files.len(), 4);
        assert!(c.files[http[1].file].ends_with("conf.d/a.conf"));
        assert_eq!(c.skipped.len(), 1);
        assert!(
            c.skipped[0].contains("nginx.conf:5: include"),
            "{:?}",
            c.skipped
        );
        assert!(c.skipped[0].ends_with("gone.conf: no such file (skipped)"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_include_of_itself_and_a_broken_included_file_are_refused_with_their_place() {
        let dir = folder("loops");
        std::fs::write(dir.join("nginx.conf"), "include nginx.conf;\n").unwrap();
        let e = read_config(&dir.join("nginx.conf")).unwrap_err();
        assert!(
            e.0.ends_with("nginx.conf:1: includes nested too deep"),
            "{e}"
        );
        std::fs::write(
            dir.join("nginx.conf"),
            "http {\n include conf.d/x.conf;\n}\n",
        )
        .unwrap();
        std::fs::write(dir.join("conf.d/x.conf"), "server {\n").unwrap();
        let e = read_config(&dir.join("nginx.conf")).unwrap_err();
        assert!(
            e.0.ends_with("conf.d/x.conf:2: unexpected end of file, expecting \"}\""),
            "{e}"
        );
        let e = read_config(&dir.join("missing.conf")).unwrap_err();
        assert!(e.0.contains("missing.conf: cannot read"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
