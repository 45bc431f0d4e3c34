//! Static-file routes in the config (`root` or `alias`, `index`, `try_files`, ...) and the
//! process-wide `[files]` settings (the open-file cache, the type map). Parsed and validated
//! here; serving lives in `crate::files`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::{Size, Validator};
use crate::routing::UpstreamTarget;

/// Process-wide settings of static serving.
#[derive(Debug, Clone, PartialEq)]
pub struct FilesSettings {
    /// Most files each worker keeps open in its open-file cache.
    pub cache_entries: usize,
    /// How long a cached file is trusted before it is checked again (zero: every request).
    pub cache_valid: Duration,
    /// Files up to this size are kept in memory by the cache and sent with one write.
    pub memory_max_file: u64,
    /// Content types by lower-case extension, over the built-in map.
    pub types: BTreeMap<String, String>,
    /// The type of a file whose extension is unknown.
    pub default_type: String,
}

impl Default for FilesSettings {
    fn default() -> Self {
        FilesSettings {
            cache_entries: 1024,
            cache_valid: Duration::from_secs(1),
            memory_max_file: 16 * 1024,
            types: BTreeMap::new(),
            default_type: "application/octet-stream".to_string(),
        }
    }
}

/// A route served from a directory.
#[derive(Debug, Clone, PartialEq)]
pub struct FileRoute {
    /// The route's path prefix, as configured.
    pub prefix: String,
    /// The directory.
    pub dir: PathBuf,
    /// `alias`: the prefix is replaced by the directory. Otherwise (`root`) the whole request
    /// path is looked up under it.
    pub alias: bool,
    /// Files tried, in order, for a request that names a directory.
    pub index: Vec<String>,
    /// `try_files`: candidates tried in order, then the fallback.
    pub try_files: Option<TryFiles>,
    /// `Cache-Control` sent with files.
    pub cache_control: Option<String>,
    /// Serve `file.br`, `file.zst`, `file.gz` to clients that accept them.
    pub precompressed: bool,
    /// Serve names starting with a dot (`/.well-known/` is always served).
    pub dotfiles: bool,
    /// Follow symlinks that lead out of the directory.
    pub symlinks_out_of_root: bool,
    /// Answer a directory without an index file with an HTML listing.
    pub list_directories: bool,
}

/// nginx's `try_files`: URIs tried in order (`$uri` stands for the request's path), then what
/// to do when none exists.
#[derive(Debug, Clone, PartialEq)]
pub struct TryFiles {
    /// Candidate URIs; one ending in `/` matches a directory.
    pub candidates: Vec<String>,
    /// What answers when no candidate exists.
    pub fallback: Fallback,
}

/// The last element of `try_files`.
#[derive(Debug, Clone, PartialEq)]
pub enum Fallback {
    /// `"/index.html"`: this URI, which must exist (404 otherwise).
    Uri(String),
    /// `"=404"`: this status.
    Status(u16),
    /// `"@app"`: the request goes to this upstream group.
    Upstream(UpstreamTarget),
    /// `"@name"` naming a location of the site: the request goes on there, by its route
    /// index (nginx's internal redirect to a named location).
    Location(usize),
}

/// A `[files]` section.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileFilesSection {
    cache_entries: Option<usize>,
    cache_valid: Option<Spanned<String>>,
    memory_max_file: Option<Spanned<Size>>,
    #[serde(default)]
    types: BTreeMap<String, String>,
    default_type: Option<String>,
}

/// A route as written: an upstream route (`upstream`, `buffer_response`) or a static-file
/// route (the other keys).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RouteSection {
    pub(super) path: Option<Spanned<String>>,
    /// nginx's location forms: `= /x`, `^~ /x`, `~ re`, `~* re`, `@name`, `/x`.
    pub(super) location: Option<Spanned<String>>,
    pub(super) internal: Option<bool>,
    pub(super) rules: Option<Vec<Spanned<super::policy::FileRule>>>,
    pub(super) access: Option<Spanned<Vec<String>>>,
    pub(super) add_headers: Option<Spanned<BTreeMap<String, String>>>,
    pub(super) add_headers_on_success: Option<Spanned<BTreeMap<String, String>>>,
    pub(super) client_max_body_size: Option<Spanned<Size>>,
    pub(super) proxy_set_headers: Option<Spanned<BTreeMap<String, String>>>,
    pub(super) error_pages: Option<Vec<Spanned<super::policy::FileErrorPage>>>,
    pub(super) intercept_errors: Option<bool>,
    pub(super) expires: Option<Spanned<String>>,
    pub(super) hide_headers: Option<Spanned<Vec<String>>>,
    pub(super) cors: Option<Spanned<super::policy::FileCors>>,
    pub(super) auth_request: Option<Spanned<super::policy::FileAuthRequest>>,
    pub(super) auth_basic: Option<Spanned<super::policy::FileAuthBasic>>,
    pub(super) satisfy: Option<Spanned<String>>,
    pub(super) limit_req: Option<Spanned<Vec<super::zones::FileLimitReq>>>,
    pub(super) limit_conn: Option<Spanned<Vec<super::zones::FileLimitConn>>>,
    pub(super) limit_status: Option<Spanned<u16>>,
    pub(super) cache: Option<Spanned<super::cache::FileCache>>,
    pub(super) upstream: Option<Spanned<String>>,
    pub(super) buffer_response: Option<Spanned<Size>>,
    pub(super) params: Option<std::collections::BTreeMap<String, String>>,
    pub(super) compress: Option<bool>,
    pub(super) root: Option<Spanned<String>>,
    pub(super) alias: Option<Spanned<String>>,
    index: Option<Vec<String>>,
    try_files: Option<Spanned<Vec<String>>>,
    cache_control: Option<String>,
    precompressed: Option<bool>,
    dotfiles: Option<bool>,
    symlinks_out_of_root: Option<bool>,
    list_directories: Option<bool>,
    /// Routes nested in this one (nginx's nested `location`s), `[[sites.routes.routes]]`.
    #[serde(default)]
    pub(super) routes: Vec<RouteSection>,
}

impl RouteSection {
    /// Where the route starts in the file (for its errors).
    pub(super) fn at(&self) -> usize {
        self.path
            .as_ref()
            .or(self.location.as_ref())
            .or(self.upstream.as_ref())
            .or(self.root.as_ref())
            .or(self.alias.as_ref())
            .map_or(0, |p| p.span().start)
    }

    /// Its policy keys.
    pub(super) fn policy_keys(&self) -> super::policy::PolicyKeys<'_> {
        super::policy::PolicyKeys {
            rules: self.rules.as_ref(),
            access: self.access.as_ref(),
            add_headers: self.add_headers.as_ref(),
            add_headers_on_success: self.add_headers_on_success.as_ref(),
            client_max_body_size: self.client_max_body_size.as_ref(),
            proxy_set_headers: self.proxy_set_headers.as_ref(),
            error_pages: self.error_pages.as_ref(),
            intercept_errors: self.intercept_errors,
            expires: self.expires.as_ref(),
            hide_headers: self.hide_headers.as_ref(),
            cors: self.cors.as_ref(),
            auth_request: self.auth_request.as_ref(),
            auth_basic: self.auth_basic.as_ref(),
            satisfy: self.satisfy.as_ref(),
            limit_req: self.limit_req.as_ref(),
            limit_conn: self.limit_conn.as_ref(),
            limit_status: self.limit_status.as_ref(),
            cache: self.cache.as_ref(),
        }
    }

    /// Whether any static-file key is set (so the route must be a file route).
    pub(super) fn any(&self) -> bool {
        self.root.is_some()
            || self.alias.is_some()
            || self.index.is_some()
            || self.try_files.is_some()
            || self.cache_control.is_some()
            || self.precompressed.is_some()
            || self.dotfiles.is_some()
            || self.symlinks_out_of_root.is_some()
            || self.list_directories.is_some()
    }
}

impl FileRoute {
    /// The scripts of a FastCGI group under `dir`: opened only to check they exist beneath it.
    pub fn for_scripts(dir: PathBuf) -> FileRoute {
        FileRoute {
            precompressed: false,
            ..FileRoute::for_root(dir, false)
        }
    }

    /// A route serving `dir` for every path, with the defaults (`slipstream serve`).
    pub fn for_root(dir: PathBuf, list_directories: bool) -> FileRoute {
        FileRoute {
            prefix: "/".to_string(),
            dir,
            alias: false,
            index: vec!["index.html".to_string()],
            try_files: None,
            cache_control: None,
            precompressed: true,
            dotfiles: false,
            symlinks_out_of_root: false,
            list_directories,
        }
    }
}

impl Validator<'_> {
    pub(super) fn build_files_settings(&mut self, raw: &FileFilesSection) -> FilesSettings {
        let d = FilesSettings::default();
        let mut types = BTreeMap::new();
        for (ext, ty) in &raw.types {
            types.insert(ext.trim_start_matches('.').to_ascii_lowercase(), ty.clone());
        }
        FilesSettings {
            cache_entries: raw.cache_entries.unwrap_or(d.cache_entries),
            cache_valid: self.duration(&raw.cache_valid, d.cache_valid),
            memory_max_file: self.size(&raw.memory_max_file, d.memory_max_file as usize) as u64,
            types,
            default_type: raw.default_type.clone().unwrap_or(d.default_type),
        }
    }

    /// Validates the static-file keys of a route with path `prefix`; `upstream_named` finds an
    /// upstream group for `@name` fallbacks.
    pub(super) fn build_file_route(
        &mut self,
        prefix: &str,
        keys: &RouteSection,
        upstream_named: &dyn Fn(&str) -> Option<usize>,
    ) -> Option<FileRoute> {
        let (dir, alias) = match (&keys.root, &keys.alias) {
            (Some(r), None) => (r, false),
            (None, Some(a)) => (a, true),
            (Some(_), Some(a)) => {
                self.error(a.span().start, "a route has either root or alias, not both");
                return None;
            }
            (None, None) => {
                self.error(keys.at(), "static-file keys need root or alias");
                return None;
            }
        };
        let path = self.directory(dir);
        let try_files = keys
            .try_files
            .as_ref()
            .and_then(|t| self.build_try_files(t, upstream_named));
        Some(FileRoute {
            prefix: prefix.to_string(),
            dir: path,
            alias,
            index: keys
                .index
                .clone()
                .unwrap_or_else(|| vec!["index.html".to_string()]),
            try_files,
            cache_control: keys.cache_control.clone(),
            precompressed: keys.precompressed.unwrap_or(true),
            dotfiles: keys.dotfiles.unwrap_or(false),
            symlinks_out_of_root: keys.symlinks_out_of_root.unwrap_or(false),
            list_directories: keys.list_directories.unwrap_or(false),
        })
    }

    fn build_try_files(
        &mut self,
        list: &Spanned<Vec<String>>,
        upstream_named: &dyn Fn(&str) -> Option<usize>,
    ) -> Option<TryFiles> {
        let at = list.span().start;
        let Some((last, candidates)) = list.get_ref().split_last() else {
            self.error(at, "try_files needs at least one element");
            return None;
        };
        for c in candidates {
            if !c.starts_with('/') && !c.starts_with("$uri") {
                self.error(
                    at,
                    format!("try_files candidate {c:?} must start with '/' or $uri"),
                );
            }
        }
        let fallback = if let Some(code) = last.strip_prefix('=') {
            match code.parse::<u16>() {
                Ok(s) if (200..600).contains(&s) => Fallback::Status(s),
                _ => {
                    self.error(
                        at,
                        format!("invalid try_files status {last:?}: use e.g. \"=404\""),
                    );
                    return None;
                }
            }
        } else if let Some(name) = last.strip_prefix('@') {
            let location = self.named_locations.iter().find(|(n, _)| n == name);
            match (location, upstream_named(name)) {
                (Some((_, route)), _) => Fallback::Location(*route),
                (None, Some(group)) => Fallback::Upstream(UpstreamTarget::to(group)),
                (None, None) => {
                    let message = format!("try_files names no location or upstream group {name:?}");
                    self.error(at, message);
                    return None;
                }
            }
        } else if last.starts_with('/') || last.starts_with("$uri") {
            Fallback::Uri(last.clone())
        } else {
            let message =
                format!("try_files must end with a URI, \"=CODE\" or \"@upstream\", not {last:?}");
            self.error(at, message);
            return None;
        };
        Some(TryFiles {
            candidates: candidates.to_vec(),
            fallback,
        })
    }
}
