//! Which script a request runs, decided before anything is sent to the application: the path
//! is normalized like a static file's, split after its first `.php` segment (the rest is
//! `PATH_INFO`), and the script must be a regular file beneath the document root, opened there
//! by the kernel (`RESOLVE_BENEATH`, through the worker's open-file cache). A path naming no
//! script goes to the front controller when the group has one, else 404. So
//! `/uploads/evil.jpg/x.php` never runs `evil.jpg`: `x.php` is not a file under the root.

use std::path::Path;
use std::time::Instant;

use super::params::split_script;
use crate::config::{FastCgi, FilesSettings};
use crate::files::cache::{FileCache, Found};
use crate::files::open::OpenError;
use crate::files::path::resolve;
use crate::observe::metrics::Shard;

/// The script a request runs and the path after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    /// `/app/index.php` (decoded, normalized).
    pub script_name: String,
    /// `/extra/path` (empty when nothing follows).
    pub path_info: String,
}

/// Why no script runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptError {
    /// The path is malformed or climbs above the root (400).
    BadPath,
    /// No script at this path and no front controller (404).
    NotFound,
    /// A dotfile path, or a script the proxy may not open (403).
    Forbidden,
    /// The file system failed (500).
    Failed,
}

/// Where scripts are looked up.
pub struct Scripts<'a> {
    /// The group's settings.
    pub settings: &'a FastCgi,
    /// The worker's open-file cache.
    pub cache: &'a FileCache,
    /// Cache validity and the like.
    pub files: &'a FilesSettings,
    /// Now, for the cache.
    pub now: Instant,
    /// The worker's counters.
    pub counters: &'a Shard,
}

impl Scripts<'_> {
    /// The script for request target `target` (`/index.php/x?a=1`).
    pub fn find(&self, target: &str) -> Result<Script, ScriptError> {
        let rel = resolve(target).map_err(|_| ScriptError::BadPath)?;
        if rel.hidden {
            return Err(ScriptError::Forbidden);
        }
        let mut path = String::with_capacity(rel.path.as_os_str().len() + 2);
        path.push('/');
        path.push_str(&rel.path.to_string_lossy());
        if rel.directory && path.len() > 1 {
            path.push('/');
        }
        if let Some(split) = split_script(&path, ".php") {
            if self.is_script(split.script_name)? {
                return Ok(Script {
                    script_name: split.script_name.to_string(),
                    path_info: split.path_info.to_string(),
                });
            }
        } else if path.ends_with('/') {
            let index = format!("{path}{}", self.settings.index);
            if self.is_script(&index)? {
                return Ok(Script {
                    script_name: index,
                    path_info: String::new(),
                });
            }
        }
        match &self.settings.front_controller {
            Some(front) if self.is_script(front)? => Ok(Script {
                script_name: front.clone(),
                path_info: String::new(),
            }),
            _ => Err(ScriptError::NotFound),
        }
    }

    /// Whether `script` (absolute, normalized) is a regular file beneath the root.
    fn is_script(&self, script: &str) -> Result<bool, ScriptError> {
        let rel = Path::new(script.trim_start_matches('/'));
        let found = self.cache.lookup(
            &self.settings.scripts,
            self.files,
            rel,
            self.now,
            self.counters,
        );
        match found {
            Ok(Found::File(_)) => Ok(true),
            Ok(Found::Directory(_)) | Err(OpenError::NotFound) => Ok(false),
            Err(OpenError::Forbidden) => Err(ScriptError::Forbidden),
            Err(OpenError::Failed) => Err(ScriptError::Failed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FileRoute;

    fn settings(root: &Path, front: Option<&str>) -> FastCgi {
        FastCgi {
            document_root: root.to_string_lossy().into_owned(),
            scripts: FileRoute::for_scripts(root.to_path_buf()),
            index: "index.php".into(),
            front_controller: front.map(str::to_string),
            params: Vec::new(),
            max_chunked_body: 1 << 20,
        }
    }

    #[test]
    fn scripts_path_info_index_front_controller_and_the_upload_exploit() {
        let root = std::env::temp_dir().join(format!("slipstream-scripts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("uploads")).unwrap();
        std::fs::create_dir_all(root.join("app")).unwrap();
        for f in ["index.php", "app/index.php", "uploads/evil.jpg", "info.php"] {
            std::fs::write(root.join(f), "<?php").unwrap();
        }
        let cache = FileCache::default();
        let files = FilesSettings::default();
        let counters = Shard::default();
        let find = |target: &str, front: Option<&str>| {
            let settings = settings(&root, front);
            let scripts = Scripts {
                settings: &settings,
                cache: &cache,
                files: &files,
                now: Instant::now(),
                counters: &counters,
            };
            scripts.find(target).map(|s| (s.script_name, s.path_info))
        };
        let ok = |s: &str, p: &str| Ok((s.to_string(), p.to_string()));
        assert_eq!(find("/info.php?x=1", None), ok("/info.php", ""));
        assert_eq!(find("/info.php/a/b", None), ok("/info.php", "/a/b"));
        assert_eq!(find("/app/", None), ok("/app/index.php", ""));
        assert_eq!(find("/", None), ok("/index.php", ""));
        assert_eq!(find("/%69nfo.php", None), ok("/info.php", ""));
        // The classic exploit: no script runs, with or without a front controller.
        assert_eq!(
            find("/uploads/evil.jpg/x.php", None),
            Err(ScriptError::NotFound)
        );
        assert_eq!(find("/uploads/evil.jpg", None), Err(ScriptError::NotFound));
        assert_eq!(
            find("/uploads/evil.jpg/x.php", Some("/index.php")),
            ok("/index.php", "")
        );
        assert_eq!(find("/missing.php", None), Err(ScriptError::NotFound));
        assert_eq!(
            find("/blog/post-1", Some("/index.php")),
            ok("/index.php", "")
        );
        assert_eq!(find("/../etc/passwd.php", None), Err(ScriptError::BadPath));
        assert_eq!(find("/.git/x.php", None), Err(ScriptError::Forbidden));
        let _ = std::fs::remove_dir_all(&root);
    }
}
