//! The logging keys: the access log (file, `off`, format; per site too) and the error log
//! (file or stderr, level, text or JSON).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use toml::Spanned;

use super::{Config, Validator};
use crate::net::Address;
use crate::observe::access_log::AccessLogTarget;
use crate::observe::doctor::Demand;
use crate::observe::error_log::{ErrorLog, Level};
use crate::observe::log_format::LogFormat;

/// The logging keys at the top of the file.
#[derive(Default)]
struct FileLogKeys {
    access_log: Option<Spanned<String>>,
    access_log_format: Option<Spanned<String>>,
    error_log: Option<String>,
    error_log_level: Option<Spanned<String>>,
    error_log_format: Option<Spanned<String>>,
}

/// A site's access-log keys.
#[derive(Default)]
struct FileSiteLog {
    access_log: Option<Spanned<String>>,
    access_log_format: Option<Spanned<String>>,
}

/// A site's access log.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum SiteAccessLog {
    /// The top-level `access_log`.
    #[default]
    Inherit,
    /// Not logged.
    Off,
    /// Its own file or format.
    To(AccessLogTarget),
}

impl Validator<'_> {
    /// The top-level access log, each site's, and the error log.
    pub(super) fn build_logs(
        &mut self,
        raw: &super::FileConfig,
    ) -> (Option<AccessLogTarget>, Vec<SiteAccessLog>, ErrorLog) {
        let keys = FileLogKeys {
            access_log: raw.access_log.clone(),
            access_log_format: raw.access_log_format.clone(),
            error_log: raw.error_log.clone(),
            error_log_level: raw.error_log_level.clone(),
            error_log_format: raw.error_log_format.clone(),
        };
        let access_log = self.build_access_log(&keys);
        let site_access_logs = raw
            .sites
            .iter()
            .map(|s| {
                let site = FileSiteLog {
                    access_log: s.access_log.clone(),
                    access_log_format: s.access_log_format.clone(),
                };
                self.build_site_log(&site, access_log.as_ref())
            })
            .collect();
        let error_log = self.build_error_log(&keys);
        (access_log, site_access_logs, error_log)
    }

    /// The access-log target of `path` (`off`: none) in `format` (or `inherited`).
    fn access_log_target(
        &mut self,
        path: &Spanned<String>,
        format: Option<&Spanned<String>>,
        inherited: Option<&LogFormat>,
    ) -> Option<AccessLogTarget> {
        let format = self.log_format(format, inherited);
        if path.get_ref() == "off" {
            return None;
        }
        if path.get_ref().is_empty() {
            self.error(path.span().start, "access_log is a file path or \"off\"");
            return None;
        }
        Some(AccessLogTarget {
            path: Arc::from(Path::new(path.get_ref())),
            format,
        })
    }

    fn log_format(
        &mut self,
        format: Option<&Spanned<String>>,
        inherited: Option<&LogFormat>,
    ) -> LogFormat {
        match format {
            Some(f) => LogFormat::parse(f.get_ref()).unwrap_or_else(|reason| {
                self.error(f.span().start, reason);
                LogFormat::combined()
            }),
            None => inherited.cloned().unwrap_or_else(LogFormat::combined),
        }
    }

    /// The top-level access log (none when the key is absent or `off`).
    fn build_access_log(&mut self, keys: &FileLogKeys) -> Option<AccessLogTarget> {
        match &keys.access_log {
            Some(path) => self.access_log_target(path, keys.access_log_format.as_ref(), None),
            None => {
                if let Some(f) = &keys.access_log_format {
                    self.log_format(Some(f), None);
                }
                None
            }
        }
    }

    /// A site's access log: `None` when it says nothing (the top-level log applies).
    fn build_site_log(
        &mut self,
        site: &FileSiteLog,
        top: Option<&AccessLogTarget>,
    ) -> SiteAccessLog {
        let inherited = top.map(|t| &t.format);
        let target = match (&site.access_log, &site.access_log_format) {
            (Some(path), format) => self.access_log_target(path, format.as_ref(), inherited),
            (None, Some(format)) => {
                let format = self.log_format(Some(format), inherited);
                top.map(|t| AccessLogTarget {
                    path: t.path.clone(),
                    format,
                })
            }
            (None, None) => return SiteAccessLog::Inherit,
        };
        target.map_or(SiteAccessLog::Off, SiteAccessLog::To)
    }

    /// The error-log keys.
    fn build_error_log(&mut self, keys: &FileLogKeys) -> ErrorLog {
        let level = match &keys.error_log_level {
            Some(l) => Level::parse(l.get_ref()).unwrap_or_else(|| {
                let message = "error_log_level is one of \"error\", \"warn\", \"info\", \"debug\"";
                self.error(l.span().start, message);
                Level::Info
            }),
            None => Level::Info,
        };
        let json = match &keys.error_log_format {
            Some(f) if f.get_ref() == "json" => true,
            Some(f) if f.get_ref() == "text" => false,
            Some(f) => {
                self.error(f.span().start, "error_log_format is \"text\" or \"json\"");
                false
            }
            None => false,
        };
        ErrorLog {
            path: keys
                .error_log
                .as_ref()
                .filter(|p| *p != "stderr")
                .map(PathBuf::from),
            level,
            json,
        }
    }
}

impl Config {
    /// The access log of requests to `site` (`None`: not logged).
    pub fn access_log_for(&self, site: Option<u16>) -> Option<&AccessLogTarget> {
        match site.and_then(|s| self.site_access_logs.get(usize::from(s))) {
            Some(SiteAccessLog::Off) => None,
            Some(SiteAccessLog::To(t)) => Some(t),
            Some(SiteAccessLog::Inherit) | None => self.access_log.as_ref(),
        }
    }

    /// Every access-log file the config writes, each once.
    pub fn access_log_paths(&self) -> Vec<Arc<Path>> {
        let mut paths: Vec<Arc<Path>> = Vec::new();
        let sites = self.site_access_logs.iter().filter_map(|s| match s {
            SiteAccessLog::To(t) => Some(t),
            _ => None,
        });
        let all = self.access_log.iter().chain(sites);
        for t in all {
            if !paths.contains(&t.path) {
                paths.push(t.path.clone());
            }
        }
        paths
    }
}

impl Config {
    /// What this config asks of the host, for `slipstream doctor`.
    pub fn demand(&self) -> Demand {
        let servers = self.upstreams.iter().flat_map(|g| g.servers.iter());
        let remote = servers.clone().any(|s| {
            s.addrs.iter().any(|a| match a {
                Address::Tcp(a) => !a.ip().is_loopback(),
                Address::Unix(_) => false,
            })
        });
        let workers = self.workers.max(1);
        Demand {
            connections: self
                .listeners
                .iter()
                .map(|l| l.max_connections as u64)
                .sum(),
            backlog: self
                .listeners
                .iter()
                .map(|l| u64::from(l.backlog))
                .max()
                .unwrap_or(0),
            pool_per_server: self
                .upstreams
                .iter()
                .map(|g| (g.keepalive * workers) as u64)
                .max()
                .unwrap_or(0),
            remote_upstreams: remote,
            upstreams: servers.count() > 0,
        }
    }

    /// What slipstream asks of the host with no config: one listener with the defaults.
    pub fn default_demand() -> Demand {
        Demand {
            connections: super::DEFAULT_MAX_CONNECTIONS as u64,
            backlog: u64::from(super::DEFAULT_BACKLOG),
            pool_per_server: 0,
            remote_upstreams: false,
            upstreams: false,
        }
    }
}
