//! From a request target to what answers it, like nginx's `root`/`alias`, `index` and
//! `try_files`: a file, a directory listing, a redirect to the slash-terminated directory, a
//! status, an upstream group, or a refusal. The target is decoded and normalized once
//! ([`super::path`]); `try_files` candidates are built from the decoded path and never decoded
//! again.

use std::fs::File;
use std::path::Path;
use std::rc::Rc;
use std::time::Instant;

use super::cache::{CachedFile, FileCache, Found};
use super::open::OpenError;
use super::path::{normalize, resolve, RelativePath};
use crate::config::{Fallback, FileRoute, FilesSettings};
use crate::observe::metrics::Shard;
use crate::routing::UpstreamTarget;

/// What answers a static-file request.
#[derive(Debug)]
pub enum Resolution {
    /// A file.
    File(Rc<CachedFile>),
    /// A directory without an index file, on a route that lists directories.
    Listing {
        /// The directory.
        dir: File,
        /// Its normalized URI, for the title.
        uri: String,
        /// Served for another URI (a `try_files` candidate or fallback): its links must be
        /// absolute, where a listing at its own URI links relative to it as nginx's does.
        elsewhere: bool,
    },
    /// `301` to this location (a directory asked for without its trailing slash).
    Redirect(String),
    /// A status from `try_files` (`"=404"`).
    Status(u16),
    /// The request goes to an upstream group (`try_files` ending in `"@name"`).
    Upstream(UpstreamTarget),
    /// The request goes on at the site's named location with this route index.
    Location(usize),
    /// The request is refused.
    Refused(Refusal),
}

/// Why a static-file request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The target is malformed, or climbs out of its route (400).
    BadPath,
    /// Nothing to serve (404).
    NotFound,
    /// Not to be served (403).
    Forbidden,
    /// The file system failed (500).
    Failed,
}

impl From<OpenError> for Refusal {
    fn from(e: OpenError) -> Refusal {
        match e {
            OpenError::NotFound => Refusal::NotFound,
            OpenError::Forbidden => Refusal::Forbidden,
            OpenError::Failed => Refusal::Failed,
        }
    }
}

/// Everything one lookup reads.
pub struct Lookup<'a> {
    /// The worker's open-file cache.
    pub cache: &'a FileCache,
    /// The route.
    pub route: &'a FileRoute,
    /// Process-wide settings.
    pub settings: &'a FilesSettings,
    /// The time of the request.
    pub now: Instant,
    /// The worker's counters.
    pub counters: &'a Shard,
    /// The rules changed the path: a `root` route serves it wherever it leads, as nginx does
    /// (only an `alias` route needs it under its prefix).
    pub rewritten: bool,
}

impl Lookup<'_> {
    /// Resolves a request target (`/a/b?q`).
    pub fn resolve(&self, target: &str) -> Resolution {
        let Ok(rel) = resolve(target) else {
            return Resolution::Refused(Refusal::BadPath);
        };
        let uri = uri_of(&rel);
        // A target like `/static/../app.php` routed by its raw prefix must not be served from
        // this route once normalized.
        if !uri.starts_with(&self.route.prefix) && (self.route.alias || !self.rewritten) {
            return Resolution::Refused(Refusal::BadPath);
        }
        if rel.hidden && !self.route.dotfiles {
            return Resolution::Refused(Refusal::Forbidden);
        }
        let Some(try_files) = &self.route.try_files else {
            return self.serve(&rel, &uri, target);
        };
        for candidate in &try_files.candidates {
            let Ok(c) = normalize(candidate.replace("$uri", &uri).as_bytes()) else {
                continue;
            };
            let Some(fs) = self.fs_path(&c) else { continue };
            if c.directory {
                if let Ok(Found::Directory(_)) = self.find(fs) {
                    if !rel.directory && uri_of(&c) == format!("{uri}/") {
                        return Resolution::Redirect(location(&uri, target));
                    }
                    return elsewhere(self.index_or_listing(fs, &uri_of(&c)), &uri);
                }
            } else if let Ok(Found::File(e)) = self.find(fs) {
                return Resolution::File(e);
            }
        }
        match &try_files.fallback {
            Fallback::Status(s) => Resolution::Status(*s),
            Fallback::Upstream(u) => Resolution::Upstream(*u),
            Fallback::Location(route) => Resolution::Location(*route),
            Fallback::Uri(u) => match normalize(u.replace("$uri", &uri).as_bytes()) {
                Ok(c) => match self.serve(&c, &uri_of(&c), target) {
                    Resolution::Redirect(_) => Resolution::Refused(Refusal::NotFound),
                    r => elsewhere(r, &uri),
                },
                Err(_) => Resolution::Refused(Refusal::NotFound),
            },
        }
    }

    /// A normalized path without `try_files`: the file, or the directory's index or listing,
    /// or a redirect when a directory was asked for without its slash.
    fn serve(&self, rel: &RelativePath, uri: &str, target: &str) -> Resolution {
        let Some(fs) = self.fs_path(rel) else {
            return Resolution::Refused(Refusal::NotFound);
        };
        if rel.directory {
            return self.index_or_listing(fs, uri);
        }
        match self.find(fs) {
            Ok(Found::File(e)) => Resolution::File(e),
            Ok(Found::Directory(_)) => Resolution::Redirect(location(uri, target)),
            Err(e) => Resolution::Refused(e.into()),
        }
    }

    fn index_or_listing(&self, dir: &Path, uri: &str) -> Resolution {
        for name in &self.route.index {
            match self.find(&dir.join(name)) {
                Ok(Found::File(e)) => return Resolution::File(e),
                Ok(Found::Directory(_)) | Err(OpenError::NotFound) => {}
                Err(e) => return Resolution::Refused(e.into()),
            }
        }
        match self.find(dir) {
            Ok(Found::Directory(d)) if self.route.list_directories => Resolution::Listing {
                dir: d,
                uri: uri.to_string(),
                elsewhere: false,
            },
            Ok(Found::Directory(_)) => Resolution::Refused(Refusal::Forbidden),
            Ok(Found::File(_)) => Resolution::Refused(Refusal::NotFound),
            Err(e) => Resolution::Refused(e.into()),
        }
    }

    fn find(&self, fs: &Path) -> Result<Found, OpenError> {
        self.cache
            .lookup(self.route, self.settings, fs, self.now, self.counters)
    }

    /// The path under the route's directory: the whole path under `root`, the part after the
    /// prefix under `alias` (`None` when it is not under the prefix).
    fn fs_path<'r>(&self, rel: &'r RelativePath) -> Option<&'r Path> {
        let prefix = self.route.prefix.trim_matches('/');
        if !self.route.alias || prefix.is_empty() {
            return Some(&rel.path);
        }
        rel.path.strip_prefix(prefix).ok()
    }
}

/// Marks a listing of a folder other than the request's own (`own`, with or without its
/// trailing slash) as served elsewhere.
fn elsewhere(r: Resolution, own: &str) -> Resolution {
    match r {
        Resolution::Listing { dir, uri, .. } => {
            let other = uri != own && uri.strip_suffix('/') != Some(own);
            Resolution::Listing {
                dir,
                uri,
                elsewhere: other,
            }
        }
        r => r,
    }
}

/// The normalized URI of a path: `/a/b`, with a trailing slash when a directory was named.
fn uri_of(rel: &RelativePath) -> String {
    let path = rel.path.to_string_lossy();
    if rel.directory && !path.is_empty() {
        format!("/{path}/")
    } else {
        format!("/{path}")
    }
}

/// The `Location` of the redirect to a directory: its normalized URI with a slash, encoded
/// again, then the target's query. Built from the normalized path, so it always starts with a
/// single `/` and cannot point to another host.
fn location(uri: &str, target: &str) -> String {
    let mut out = String::with_capacity(uri.len() + 8);
    for &b in uri.as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~!$&'()*+,;=:@".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out.push('/');
    if let Some((_, query)) = target.split_once('?') {
        out.push('?');
        out.push_str(query);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_locations_stay_on_this_host() {
        assert_eq!(location("/a b", "/a%20b?x=1"), "/a%20b/?x=1");
        assert_eq!(location("/docs", "/docs"), "/docs/");
        assert_eq!(location("/é", "/%C3%A9"), "/%C3%A9/");
    }
}
