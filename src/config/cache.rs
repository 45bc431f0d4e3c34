//! The cache keys: `[cache_zones.NAME]` (nginx's `proxy_cache_path`) and a site's or route's
//! `cache` table (nginx's `proxy_cache` and its companions), every problem reported with its
//! line.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::{Size, Validator};
use crate::cache::entry::Ignore;
use crate::cache::freshness::Fallbacks;
use crate::cache::zone::{self, Zone, ZoneSettings};
use crate::cache::{CacheRule, UseStale};
use crate::rules::template::Template;

/// `[cache_zones.NAME]`: `memory`, `max_object`, `inactive`, and for a disk tier `path` and
/// `disk`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileCacheZone {
    memory: Option<Size>,
    max_object: Option<Size>,
    inactive: Option<String>,
    path: Option<String>,
    disk: Option<Size>,
}

/// A site's or route's `cache`: `false`, or a table naming its zone.
#[derive(Deserialize, Clone)]
#[serde(untagged)]
pub(super) enum FileCache {
    Off(bool),
    On(Box<FileCacheRule>),
}

/// The `cache` table.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct FileCacheRule {
    zone: String,
    key: Option<String>,
    #[serde(default)]
    valid: Vec<String>,
    #[serde(default)]
    use_stale: Vec<String>,
    lock: Option<bool>,
    lock_timeout: Option<String>,
    revalidate: Option<bool>,
    background_update: Option<bool>,
    min_uses: Option<u32>,
    methods: Option<Vec<String>>,
    #[serde(default)]
    bypass: Vec<String>,
    #[serde(default)]
    no_store: Vec<String>,
    #[serde(default)]
    ignore_headers: Vec<String>,
    heuristic: Option<bool>,
    request_directives: Option<bool>,
    status_field: Option<bool>,
}

const DEFAULT_MEMORY: u64 = 256 << 20;
const DEFAULT_MAX_OBJECT: u64 = 8 << 20;
const DEFAULT_DISK: u64 = 10 << 30;
const DEFAULT_INACTIVE: Duration = Duration::from_secs(600);

impl Validator<'_> {
    /// The zones, by name.
    pub(super) fn build_cache_zones(
        &mut self,
        raw: &BTreeMap<Spanned<String>, FileCacheZone>,
    ) -> Vec<Arc<Zone>> {
        let mut zones = Vec::new();
        for (name, z) in raw {
            let at = name.span().start;
            let size = |s: &Option<Size>, default: u64| match s {
                None => Some(default),
                Some(Size::Bytes(n)) => Some(*n),
                Some(Size::Text(t)) => super::text::parse_size(t),
            };
            let memory = size(&z.memory, DEFAULT_MEMORY).filter(|n| *n >= 1 << 16);
            let max_object = size(&z.max_object, DEFAULT_MAX_OBJECT).filter(|n| *n <= 1 << 30);
            let inactive = match &z.inactive {
                None => Some(DEFAULT_INACTIVE),
                Some(t) => super::text::parse_duration(t).filter(|d| !d.is_zero()),
            };
            let zone_name = name.get_ref();
            let (Some(memory), Some(max_object), Some(inactive)) = (memory, max_object, inactive)
            else {
                self.error(at, format!("cache_zones.{zone_name}: memory is at least \"64k\", max_object at most \"1g\", inactive a duration (\"10m\")"));
                continue;
            };
            let disk_bytes = size(&z.disk, DEFAULT_DISK).filter(|n| *n >= 1 << 20);
            let disk = match (&z.path, disk_bytes) {
                (None, _) if z.disk.is_some() => {
                    self.error(at, format!("cache_zones.{zone_name}: disk needs a path"));
                    None
                }
                (None, _) => None,
                (Some(p), Some(bytes)) => Some((self.relative(p), bytes)),
                (Some(_), None) => {
                    self.error(
                        at,
                        format!("cache_zones.{zone_name}: disk is at least \"1m\""),
                    );
                    None
                }
            };
            if let Some((dir, _)) = &disk {
                let shared = zones
                    .iter()
                    .any(|z: &Arc<Zone>| z.settings.disk.as_ref().is_some_and(|(d, _)| d == dir));
                if shared {
                    self.error(
                        at,
                        format!(
                            "cache_zones.{zone_name}: another zone has the path {}",
                            dir.display()
                        ),
                    );
                    continue;
                }
            }
            let settings = ZoneSettings {
                memory,
                max_object: max_object.min(memory) as usize,
                inactive,
                disk,
            };
            zones.push(zone::shared(zone_name, settings));
        }
        zones
    }

    /// A level's `cache`: its own, `false` (none), or its parent's.
    pub(super) fn cache_rule(
        &mut self,
        value: Option<&Spanned<FileCache>>,
        parent: Option<&crate::routing::Policy>,
    ) -> Option<Arc<CacheRule>> {
        let Some(value) = value else {
            return parent.and_then(|p| p.cache.clone());
        };
        let at = value.span().start;
        match value.get_ref() {
            FileCache::Off(false) => None,
            FileCache::Off(true) => {
                self.error(
                    at,
                    "cache: a table naming its zone (cache = { zone = \"main\" }), or false",
                );
                None
            }
            FileCache::On(rule) => self.cache_table(at, rule).map(Arc::new),
        }
    }

    fn cache_table(&mut self, at: usize, f: &FileCacheRule) -> Option<CacheRule> {
        let Some(zone) = self.cache_zones.iter().find(|z| z.name == f.zone).cloned() else {
            self.error(at, format!("cache: no [cache_zones.{}]", f.zone));
            return None;
        };
        let template =
            |v: &mut Self, text: &str| match Template::parse_with(text, &[], &v.map_names) {
                Ok(t) => Some(t),
                Err(e) => {
                    v.error(at, format!("cache: {text:?}: {e}"));
                    None
                }
            };
        let key = f.key.as_deref().and_then(|k| template(self, k));
        let bypass = f.bypass.iter().filter_map(|t| template(self, t)).collect();
        let no_store = f
            .no_store
            .iter()
            .filter_map(|t| template(self, t))
            .collect();
        let valid = f
            .valid
            .iter()
            .flat_map(|v| self.cache_valid(at, v))
            .collect();
        let ignore = self.cache_ignore(at, &f.ignore_headers);
        let use_stale = self.use_stale(at, &f.use_stale);
        let lock_timeout = match &f.lock_timeout {
            None => Duration::from_secs(5),
            Some(t) => super::text::parse_duration(t).unwrap_or_else(|| {
                self.error(at, format!("cache: lock_timeout {t:?} is not a duration"));
                Duration::from_secs(5)
            }),
        };
        let head = match &f.methods {
            None => true,
            Some(list) => {
                for m in list
                    .iter()
                    .filter(|m| !matches!(m.as_str(), "GET" | "HEAD"))
                {
                    self.error(
                        at,
                        format!("cache: methods {m:?}: only \"GET\" and \"HEAD\" are cached"),
                    );
                }
                list.iter().any(|m| m == "HEAD")
            }
        };
        Some(CacheRule {
            zone,
            key,
            fallbacks: Fallbacks {
                valid,
                store_set_cookie: ignore.set_cookie,
                heuristic: f.heuristic.unwrap_or(false),
            },
            ignore,
            use_stale,
            lock: f.lock.unwrap_or(true),
            lock_timeout,
            revalidate: f.revalidate.unwrap_or(true),
            background_update: f.background_update.unwrap_or(false),
            min_uses: f.min_uses.unwrap_or(1).max(1),
            head,
            bypass,
            no_store,
            request_directives: f.request_directives.unwrap_or(true),
            status_field: f.status_field.unwrap_or(true),
        })
    }

    /// One `valid` entry: `"200 302 10m"`, `"404 1m"`, `"any 5s"`, or just `"10m"` (200, 301
    /// and 302, as nginx).
    fn cache_valid(&mut self, at: usize, text: &str) -> Vec<(u16, u64)> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let Some((time, codes)) = words.split_last() else {
            self.error(at, "cache: an empty valid entry");
            return Vec::new();
        };
        let Some(seconds) = super::text::parse_duration(time).map(|d| d.as_secs()) else {
            self.error(
                at,
                format!("cache: valid {text:?}: {time:?} is not a duration"),
            );
            return Vec::new();
        };
        if codes.is_empty() {
            return vec![(200, seconds), (301, seconds), (302, seconds)];
        }
        let mut out = Vec::new();
        for code in codes {
            match (*code, code.parse::<u16>()) {
                ("any", _) => out.push((0, seconds)),
                (_, Ok(c)) if (200..=599).contains(&c) => out.push((c, seconds)),
                _ => self.error(
                    at,
                    format!("cache: valid {text:?}: {code:?} is not a status or \"any\""),
                ),
            }
        }
        out
    }

    fn cache_ignore(&mut self, at: usize, names: &[String]) -> Ignore {
        let mut ignore = Ignore::default();
        for name in names {
            match name.to_ascii_lowercase().as_str() {
                "cache-control" => ignore.cache_control = true,
                "expires" => ignore.expires = true,
                "set-cookie" => ignore.set_cookie = true,
                "vary" => ignore.vary = true,
                _ => self.error(at, format!("cache: ignore_headers {name:?}: one of Cache-Control, Expires, Set-Cookie, Vary")),
            }
        }
        ignore
    }

    fn use_stale(&mut self, at: usize, words: &[String]) -> UseStale {
        let mut u = UseStale::default();
        for word in words {
            match word.as_str() {
                "error" | "invalid_header" => u.error = true,
                "timeout" => u.timeout = true,
                "updating" => u.updating = true,
                "http_500" | "http_502" | "http_503" | "http_504" | "http_403" | "http_404"
                | "http_429" => u.statuses.push(word[5..].parse().unwrap_or(500)),
                "off" => {}
                _ => self.error(at, format!("cache: use_stale {word:?}: error, timeout, updating, http_500, http_502, http_503, http_504, http_403, http_404, http_429 or off")),
            }
        }
        u
    }
}
