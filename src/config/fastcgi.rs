//! The FastCGI keys of an upstream group (`protocol = "fastcgi"`): the document root scripts
//! are found under, the index script, the front controller frameworks route through, and extra
//! CGI variables. Validated here; the request side lives in `crate::proxy::fastcgi`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toml::Spanned;

use super::files::FileRoute;
use super::{Size, Validator};

/// Connections per FastCGI server (whole process) when `max_conns` is not set: the number of
/// children of PHP-FPM's stock pool (`pm.max_children = 5` in Debian's and Docker's `www.conf`).
/// More connections than children would leave the extra ones unserved in FPM's accept queue.
pub const DEFAULT_FASTCGI_MAX_CONNS: usize = 5;

/// Largest chunked request body read into memory to learn its length (PHP needs
/// `CONTENT_LENGTH`) when `max_chunked_body` is not set.
pub const DEFAULT_MAX_CHUNKED_BODY: usize = 16 << 20;

/// What a FastCGI group needs besides its servers.
#[derive(Debug, Clone)]
pub struct FastCgi {
    /// The directory scripts live in, absolute, as the application sees it:
    /// `SCRIPT_FILENAME` is this plus the script's path.
    pub document_root: String,
    /// The same directory as the proxy opens it, to check that a script exists beneath it
    /// before anything is sent (the open-file cache keeps the answer).
    pub scripts: FileRoute,
    /// The script for a path ending in `/` (`index.php`).
    pub index: String,
    /// The script for a path that names none (`/index.php`), as frameworks expect; without
    /// it such a path is 404.
    pub front_controller: Option<String>,
    /// Extra CGI variables, replacing any of the same name.
    pub params: Vec<(String, String)>,
    /// Largest chunked request body accepted (413 beyond).
    pub max_chunked_body: usize,
}

/// The FastCGI keys of a group as written.
#[derive(Default)]
pub(super) struct FileFastCgi {
    pub(super) root: Option<Spanned<String>>,
    pub(super) index: Option<Spanned<String>>,
    pub(super) front_controller: Option<Spanned<String>>,
    pub(super) params: Option<BTreeMap<String, String>>,
    pub(super) max_chunked_body: Option<Spanned<Size>>,
}

impl FileFastCgi {
    /// The first key set, for errors about keys that need `protocol = "fastcgi"`.
    pub(super) fn first_key(&self) -> Option<usize> {
        [&self.root, &self.index, &self.front_controller]
            .into_iter()
            .flatten()
            .map(|k| k.span().start)
            .next()
    }
}

impl Validator<'_> {
    /// A directory named in the config: relative to the config file's folder, and existing.
    pub(super) fn directory(&mut self, dir: &Spanned<String>) -> PathBuf {
        let path = match Path::new(self.file).parent() {
            Some(base) if PathBuf::from(dir.get_ref()).is_relative() => base.join(dir.get_ref()),
            _ => PathBuf::from(dir.get_ref()),
        };
        match std::fs::metadata(&path) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => self.error(
                dir.span().start,
                format!("{:?} is not a directory", dir.get_ref()),
            ),
            Err(e) => self.error(
                dir.span().start,
                format!("cannot use {:?}: {e}", dir.get_ref()),
            ),
        }
        path
    }

    /// The FastCGI settings of group `name`; `at` locates errors about the group itself.
    pub(super) fn build_fastcgi(&mut self, name: &str, at: usize, f: &FileFastCgi) -> FastCgi {
        let root = match &f.root {
            Some(r) => self.directory(r),
            None => {
                let message = format!(
                    "upstream {name:?} has protocol = \"fastcgi\" but no root (the document root, e.g. root = \"/srv/app/public\")"
                );
                self.error(at, message);
                PathBuf::from("/nonexistent")
            }
        };
        let root = std::path::absolute(&root).unwrap_or(root);
        let document_root = root.to_string_lossy().trim_end_matches('/').to_string();
        let index = f.index.as_ref().map_or("index.php".to_string(), |i| {
            if i.get_ref().is_empty() || i.get_ref().contains('/') {
                self.error(i.span().start, "index is a file name such as \"index.php\"");
            }
            i.get_ref().clone()
        });
        let front_controller = f.front_controller.as_ref().map(|c| {
            if !c.get_ref().starts_with('/') || !c.get_ref().ends_with(".php") {
                let message = "front_controller is a script path such as \"/index.php\"";
                self.error(c.span().start, message);
            }
            c.get_ref().clone()
        });
        let params = self.build_params(f.params.as_ref(), at);
        let max_chunked_body = self.size(&f.max_chunked_body, DEFAULT_MAX_CHUNKED_BODY);
        FastCgi {
            document_root,
            scripts: FileRoute::for_scripts(root),
            index,
            front_controller,
            params,
            max_chunked_body,
        }
    }

    /// Extra CGI variables: names of letters, digits and `_`.
    pub(super) fn build_params(
        &mut self,
        params: Option<&BTreeMap<String, String>>,
        at: usize,
    ) -> Vec<(String, String)> {
        let Some(params) = params else {
            return Vec::new();
        };
        for name in params.keys() {
            let valid =
                !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !valid {
                let message = format!("invalid CGI variable name {name:?}: use A-Z, 0-9 and _");
                self.error(at, message);
            }
        }
        params.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}
