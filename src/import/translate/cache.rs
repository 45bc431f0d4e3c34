//! nginx's response cache as slipstream's: `proxy_cache_path` (and `fastcgi_cache_path`) as
//! `[cache_zones.NAME]` with its disk tier; `proxy_cache` and its companions (and their
//! `fastcgi_` twins, for routes to FastCGI groups) as the `cache` table of a site or route,
//! inherited from http to server to location as nginx does (a level's own value, or its own
//! list, replaces the inherited one). nginx's defaults that slipstream's differ from are
//! written out (`lock = false`, `revalidate = false`) so the cache behaves as it did.

use super::emit::{key, Keys, Val};
use super::settings::{Level, Own, Scope};
use super::values::{duration, size};
use super::{Directive, NoteKind, Translator};

/// slipstream's default key.
const DEFAULT_KEY: &str = "$scheme://$host$request_uri";

/// The memory tier of a zone (nginx has none but the page cache: `max_size` is the disk's).
const DEFAULT_MEMORY: &str = "256m";

/// The lists one level sets for itself: a level with any replaces the inherited list.
#[derive(Debug, Clone, Default)]
pub(super) struct CacheLists {
    /// `proxy_cache_valid`, as `"200 302 10m"`.
    valid: Option<Vec<String>>,
    /// `proxy_cache_use_stale`'s words (`off`: none).
    use_stale: Option<Vec<String>>,
    /// `proxy_cache_bypass`.
    bypass: Option<Conditions>,
    /// `proxy_no_cache`.
    no_store: Option<Conditions>,
    /// `proxy_ignore_headers` slipstream takes.
    ignore_headers: Option<Vec<String>>,
}

impl CacheLists {
    /// This level's lists over the inherited ones.
    fn apply(&self, to: &mut CacheLists) {
        let over = |mine: &Option<Vec<String>>, to: &mut Option<Vec<String>>| {
            if mine.is_some() {
                to.clone_from(mine);
            }
        };
        over(&self.valid, &mut to.valid);
        over(&self.use_stale, &mut to.use_stale);
        over(&self.ignore_headers, &mut to.ignore_headers);
        if self.bypass.is_some() {
            to.bypass.clone_from(&self.bypass);
        }
        if self.no_store.is_some() {
            to.no_store.clone_from(&self.no_store);
        }
    }
}

/// The texts of `proxy_cache_bypass` or `proxy_no_cache`.
#[derive(Debug, Clone, Default)]
struct Conditions {
    /// Each text.
    texts: Vec<String>,
    /// The first one slipstream cannot evaluate: its directive and the variable.
    unknown: Option<(Directive, String)>,
}

/// One family's cache settings in effect at a level (`proxy_cache*` or `fastcgi_cache*`).
#[derive(Debug, Clone, Default)]
pub(super) struct CacheSettings {
    /// `proxy_cache NAME` (the name) or `proxy_cache off` (None), and the directive.
    zone: Option<(Option<String>, Directive)>,
    /// `proxy_cache_key`: the key, or None when slipstream's default stands for it.
    key: Option<Option<String>>,
    /// `proxy_cache_lock`.
    lock: Option<bool>,
    /// `proxy_cache_lock_timeout`, as a slipstream duration.
    lock_timeout: Option<String>,
    /// `proxy_cache_revalidate`.
    revalidate: Option<bool>,
    /// `proxy_cache_background_update`.
    background_update: Option<bool>,
    /// `proxy_cache_min_uses`.
    min_uses: Option<i64>,
    /// The lists.
    lists: CacheLists,
}

/// Both families' settings at a level, and the `cache` slipstream has in effect there.
#[derive(Debug, Clone, Default)]
pub(super) struct Caches {
    /// `proxy_cache*`.
    proxy: CacheSettings,
    /// `fastcgi_cache*`.
    fastcgi: CacheSettings,
    /// The `cache` of the site or of the enclosing route: what a route inherits unless it
    /// writes its own (None: no cache).
    pub(super) written: Option<Val>,
}

/// The cache lists one level sets for itself, per family.
#[derive(Debug, Clone, Default)]
pub(super) struct OwnCaches {
    /// `proxy_` lists.
    proxy: CacheLists,
    /// `fastcgi_` lists.
    fastcgi: CacheLists,
}

impl OwnCaches {
    /// This level's lists over the inherited ones.
    pub(super) fn apply(&self, to: &mut Caches) {
        self.proxy.apply(&mut to.proxy.lists);
        self.fastcgi.apply(&mut to.fastcgi.lists);
    }
}

/// An `on` or `off` argument.
fn flag(args: &[String]) -> Option<bool> {
    match args {
        [a] if a == "on" => Some(true),
        [a] if a == "off" => Some(false),
        _ => None,
    }
}

/// One `proxy_cache_valid [CODE...] TIME` as a `valid` entry (`"200 302 10m"`).
fn valid_entry(args: &[String]) -> Result<String, String> {
    let (time, codes) = args.split_last().ok_or("no time")?;
    let time = duration(time).ok_or_else(|| format!("{time}: not an nginx time"))?;
    for code in codes {
        let status = code.parse::<u16>().ok().filter(|c| (200..=599).contains(c));
        if code != "any" && status.is_none() {
            return Err(format!("{code}: not a status or \"any\""));
        }
    }
    let mut words = codes.to_vec();
    words.push(time);
    Ok(words.join(" "))
}

/// The `use_stale` words slipstream takes (nginx's, but for `http_429` it has them all).
const USE_STALE: &[&str] = &[
    "error",
    "timeout",
    "invalid_header",
    "updating",
    "http_500",
    "http_502",
    "http_503",
    "http_504",
    "http_403",
    "http_404",
    "http_429",
];

/// The `ignore_headers` name slipstream has for an nginx one, or why it has none.
fn ignored_header(name: &str) -> Result<&'static str, &'static str> {
    match name.to_ascii_lowercase().as_str() {
        "cache-control" => Ok("Cache-Control"),
        "expires" => Ok("Expires"),
        "set-cookie" => Ok("Set-Cookie"),
        "vary" => Ok("Vary"),
        n if n.starts_with("x-accel-") => Err("slipstream does not act on X-Accel- fields"),
        _ => Err("not a field nginx ignores"),
    }
}

impl Translator {
    /// The cache directives of both families, and an `add_header` of
    /// `$upstream_cache_status`; true when `d` is one.
    pub(super) fn cache_directive(
        &mut self,
        d: &Directive,
        scope: &mut Scope,
        own: &mut Own,
        level: Level,
    ) -> bool {
        if d.name == "add_header" {
            return self.cache_status_header(d, own);
        }
        let (settings, lists, rest) = match d.name.split_once('_') {
            Some(("proxy", rest)) => (&mut scope.cache.proxy, &mut own.cache.proxy, rest),
            Some(("fastcgi", rest)) => (&mut scope.cache.fastcgi, &mut own.cache.fastcgi, rest),
            _ => return false,
        };
        match rest {
            "cache_path" => self.cache_path(d, level),
            "cache"
            | "cache_key"
            | "cache_lock"
            | "cache_lock_timeout"
            | "cache_revalidate"
            | "cache_min_uses"
            | "cache_background_update" => self.cache_single(d, rest, settings),
            "cache_valid" | "cache_use_stale" | "cache_bypass" | "no_cache" | "ignore_headers" => {
                self.cache_list(d, rest, lists);
            }
            "cache_methods" => {
                for m in d
                    .args
                    .iter()
                    .filter(|m| !matches!(m.as_str(), "GET" | "HEAD"))
                {
                    let reason = format!("{m}: slipstream caches only GET and HEAD");
                    self.not_translated(d, reason);
                }
                if d.args.iter().all(|m| m == "GET" || m == "HEAD") {
                    self.ignore(d, "GET and HEAD are cached, as slipstream does");
                }
            }
            "cache_convert_head" if flag(&d.args) == Some(true) => {
                self.ignore(d, "slipstream asks for a HEAD it caches with GET too");
            }
            _ => return false,
        }
        true
    }

    /// `add_header NAME ...$upstream_cache_status...`: slipstream's `Cache-Status` tells the
    /// same. The level's `add_header` list is its own all the same, as in nginx.
    fn cache_status_header(&mut self, d: &Directive, own: &mut Own) -> bool {
        let [_, value, rest @ ..] = d.args.as_slice() else {
            return false;
        };
        if !value.contains("$upstream_cache_status") || !(rest.is_empty() || rest == ["always"]) {
            return false;
        }
        own.headers.get_or_insert_with(Vec::new);
        let why = "slipstream's answers from its cache carry Cache-Status, RFC 9211, which \
                   tells the same; $upstream_cache_status is not a variable it has";
        self.ignore(d, why);
        true
    }

    /// `proxy_cache_path PATH [levels=..] keys_zone=NAME:SIZE [max_size=SIZE]
    /// [inactive=TIME] ...` as `[cache_zones.NAME]`: the disk tier at PATH holding
    /// `max_size`, and slipstream's default memory tier (the `keys_zone` size counts keys, not
    /// responses). nginx's files there are not slipstream's (noted).
    fn cache_path(&mut self, d: &Directive, level: Level) {
        if level != Level::Http {
            return self.not_translated(d, "only at the http level");
        }
        let Some((path, params)) = d.args.split_first() else {
            return self.not_translated(d, "no path");
        };
        let (mut name, mut disk, mut inactive) = (None, None, None);
        for p in params {
            match p.split_once('=') {
                Some(("keys_zone", zone)) => {
                    name = Some(zone.split_once(':').map_or(zone, |(n, _)| n).to_string());
                }
                Some(("max_size", s)) => match size(s).filter(|(_, bytes)| *bytes >= 1 << 20) {
                    Some((text, _)) => disk = Some(text),
                    None => self.not_translated(d, format!("max_size={s}: at least 1m")),
                },
                Some(("inactive", t)) => match duration(t).filter(|t| t != "0s") {
                    Some(t) => inactive = Some(t),
                    None => self.not_translated(d, format!("inactive={t}: not an nginx time")),
                },
                // levels=, use_temp_path=, min_free=, the loader's, manager's and purger's:
                // how nginx keeps its files.
                _ => {}
            }
        }
        let Some(name) = name.filter(|n| !n.is_empty()) else {
            return self.not_translated(d, "no keys_zone=");
        };
        let mut reason = format!(
            "nginx's files under {path} are not read: slipstream keeps its own there and \
             removes the ones it cannot read, so give it a directory of its own while nginx \
             runs; levels= and the loader's and manager's settings are nginx's own"
        );
        if disk.is_none() {
            reason.push_str("; without max_size, slipstream's disk tier holds 10g");
        }
        self.not_translated(d, reason);
        let mut keys: Keys = vec![
            ("memory".into(), Val::str(DEFAULT_MEMORY)),
            ("path".into(), Val::str(path.as_str())),
        ];
        if let Some(bytes) = disk {
            keys.push(("disk".into(), Val::Str(bytes)));
        }
        if let Some(t) = inactive {
            keys.push(("inactive".into(), Val::Str(t)));
        }
        let section = format!("cache_zones.{}", key(&name));
        self.out.zones.retain(|(s, _)| *s != section);
        self.out.zones.push((section, keys));
    }

    /// The single-valued directives: `proxy_cache`, `_key`, `_lock`, `_lock_timeout`,
    /// `_revalidate`, `_min_uses`.
    fn cache_single(&mut self, d: &Directive, rest: &str, s: &mut CacheSettings) {
        let arg = match d.args.as_slice() {
            [arg] => arg.as_str(),
            _ => return self.not_translated(d, "one argument"),
        };
        match rest {
            "cache" if arg == "off" => s.zone = Some((None, d.clone())),
            "cache" if arg.contains('$') => {
                self.not_translated(d, "a zone named by variables is not supported yet");
            }
            "cache" => s.zone = Some((Some(arg.to_string()), d.clone())),
            "cache_key" if arg.contains("$proxy_host") => {
                // nginx's own default, written out: slipstream's default stands for it.
                s.key = Some(None);
                let why = format!("$proxy_host is the upstream's name: {}", key_difference());
                self.not_translated(d, why);
            }
            "cache_key" => match self.unknown_variable(arg) {
                Some(var) => {
                    s.key = Some(None);
                    let why = format!("{var} is not supported yet: the key is {DEFAULT_KEY}");
                    self.not_translated(d, why);
                }
                None => s.key = Some(Some(arg.to_string())),
            },
            "cache_lock_timeout" => match duration(arg) {
                Some(t) => s.lock_timeout = Some(t),
                None => self.not_translated(d, "not an nginx time"),
            },
            "cache_min_uses" => match arg.parse::<i64>() {
                Ok(n) if n >= 1 => s.min_uses = Some(n),
                _ => self.not_translated(d, "not a number of at least 1"),
            },
            _ => match (flag(&d.args), rest) {
                (Some(on), "cache_lock") => s.lock = Some(on),
                (Some(on), "cache_background_update") => s.background_update = Some(on),
                (Some(on), _) => s.revalidate = Some(on),
                (None, _) => self.not_translated(d, "on or off"),
            },
        }
    }

    /// The listed directives: `proxy_cache_valid`, `_use_stale`, `_bypass`,
    /// `proxy_no_cache`, `proxy_ignore_headers`, each adding to its level's list.
    fn cache_list(&mut self, d: &Directive, rest: &str, lists: &mut CacheLists) {
        match rest {
            "cache_valid" => match valid_entry(&d.args) {
                Ok(entry) => lists.valid.get_or_insert_with(Vec::new).push(entry),
                Err(reason) => self.not_translated(d, reason),
            },
            "cache_use_stale" => {
                let list = lists.use_stale.get_or_insert_with(Vec::new);
                for word in &d.args {
                    if word == "off" {
                        list.clear();
                        break;
                    } else if USE_STALE.contains(&word.as_str()) {
                        list.push(word.clone());
                    } else {
                        self.not_translated(d, format!("{word} is not supported yet"));
                    }
                }
            }
            "cache_bypass" | "no_cache" => {
                let which = match rest {
                    "cache_bypass" => &mut lists.bypass,
                    _ => &mut lists.no_store,
                };
                let list = which.get_or_insert_with(Conditions::default);
                for text in &d.args {
                    match self.unknown_variable(text) {
                        Some(var) if list.unknown.is_none() => {
                            list.unknown = Some((d.clone(), var));
                        }
                        Some(_) => {}
                        None => list.texts.push(text.clone()),
                    }
                }
            }
            _ => {
                let list = lists.ignore_headers.get_or_insert_with(Vec::new);
                for name in &d.args {
                    match ignored_header(name) {
                        Ok(n) if !list.iter().any(|x| x == n) => list.push(n.to_string()),
                        Ok(_) => {}
                        Err(reason) => self.note_at(
                            d.file,
                            d.line,
                            &d.name,
                            format!("{name}: {reason}"),
                            NoteKind::Ignored,
                        ),
                    }
                }
            }
        }
    }

    /// The site's `cache`: its `proxy_cache` (routes to other groups write their own).
    pub(super) fn site_cache(&mut self, scope: &Scope) -> Option<Val> {
        self.cache_value(&scope.cache.proxy, "proxy")
    }

    /// The `cache` a route writes, if any (where it differs from the one it inherits), and
    /// the one in effect in it: a route that passes to a group has its family's (gRPC none,
    /// as nginx has no `grpc_cache`); any other inherits.
    pub(super) fn route_cache(
        &mut self,
        pass: Option<&Directive>,
        outer: &Scope,
        scope: &Scope,
    ) -> (Option<Val>, Option<Val>) {
        let mine = match pass.map(|p| p.name.as_str()) {
            Some("proxy_pass") => self.cache_value(&scope.cache.proxy, "proxy"),
            Some("fastcgi_pass") => self.cache_value(&scope.cache.fastcgi, "fastcgi"),
            Some(_) => None,
            None => return (None, outer.cache.written.clone()),
        };
        let write = (mine != outer.cache.written).then(|| mine.clone().unwrap_or(Val::Bool(false)));
        (write, mine)
    }

    /// The `cache` table for one family's settings; None when it caches nothing.
    fn cache_value(&mut self, s: &CacheSettings, prefix: &str) -> Option<Val> {
        let (Some(zone), at) = s.zone.as_ref()? else {
            return None;
        };
        let lists = &s.lists;
        for c in [&lists.bypass, &lists.no_store].into_iter().flatten() {
            if let Some((d, var)) = &c.unknown {
                let why = format!(
                    "{var} is not supported yet: the cache is left out where it applies, so \
                     nothing is cached that nginx would not cache"
                );
                self.not_translated(d, why);
                return None;
            }
        }
        self.known_zone(zone, at, prefix);
        let mut keys: Keys = vec![("zone".into(), Val::str(zone.as_str()))];
        match &s.key {
            Some(Some(k)) => keys.push(("key".into(), Val::str(k.as_str()))),
            Some(None) => {}
            None => {
                let why = match prefix {
                    "proxy" => format!(
                        "nginx's default, $scheme$proxy_host$request_uri, keys by the \
                         upstream's name: {}",
                        key_difference()
                    ),
                    _ => format!("none (nginx requires one): the key is {DEFAULT_KEY}"),
                };
                let name = format!("{prefix}_cache_key");
                self.note_at(at.file, at.line, &name, why, NoteKind::NotTranslated);
            }
        }
        push_list(&mut keys, "valid", lists.valid.as_deref());
        push_list(&mut keys, "use_stale", lists.use_stale.as_deref());
        // nginx's defaults where slipstream's differ: no lock, no revalidation.
        if s.lock == Some(true) {
            if let Some(t) = &s.lock_timeout {
                keys.push(("lock_timeout".into(), Val::str(t.as_str())));
            }
        } else {
            keys.push(("lock".into(), Val::Bool(false)));
        }
        if s.revalidate != Some(true) {
            keys.push(("revalidate".into(), Val::Bool(false)));
        }
        if s.background_update == Some(true) {
            keys.push(("background_update".into(), Val::Bool(true)));
        }
        if let Some(n) = s.min_uses.filter(|n| *n > 1) {
            keys.push(("min_uses".into(), Val::Int(n)));
        }
        let texts = |c: &Option<Conditions>| c.as_ref().map(|c| c.texts.clone());
        push_list(&mut keys, "bypass", texts(&lists.bypass).as_deref());
        push_list(&mut keys, "no_store", texts(&lists.no_store).as_deref());
        push_list(&mut keys, "ignore_headers", lists.ignore_headers.as_deref());
        Some(Val::Table(keys))
    }

    /// Makes sure `[cache_zones.NAME]` is written: a zone no `proxy_cache_path` read
    /// declares (it is in a file not read) gets slipstream's defaults, noted.
    fn known_zone(&mut self, name: &str, at: &Directive, prefix: &str) {
        let section = format!("cache_zones.{}", key(name));
        if self.out.zones.iter().any(|(s, _)| *s == section) {
            return;
        }
        self.out.zones.push((section, Keys::new()));
        let why = format!(
            "no {prefix}_cache_path declares {name} in the files read: [cache_zones.{name}] \
             has slipstream's defaults, memory 256m and inactive 10m"
        );
        self.not_translated(at, why);
    }
}

/// `name = [items]`, unless there are none.
fn push_list(keys: &mut Keys, name: &str, items: Option<&[String]>) {
    if let Some(items) = items.filter(|i| !i.is_empty()) {
        keys.push((name.into(), Val::strs(items)));
    }
}

/// How slipstream's default key differs from nginx's.
fn key_difference() -> String {
    format!(
        "slipstream's default key, {DEFAULT_KEY}, has the client's Host instead, so virtual \
         hosts never share entries"
    )
}

#[cfg(test)]
mod tests;
