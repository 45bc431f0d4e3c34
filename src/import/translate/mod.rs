//! nginx directives as slipstream's TOML, for `slipstream import`: a whole `nginx.conf` or a
//! file meant for `http { include ...; }` (top-level `server`, `upstream`, `map`). Each
//! directive is translated, left out because it means nothing for slipstream (an "ignored"
//! note), or reported as not translated with the reason. nginx's inheritance (http, server,
//! location) is resolved here: each site and route gets the values in effect for it.

mod auth;
mod cache;
mod emit;
mod limits;
mod location;
mod rules;
mod server;
mod settings;
mod upstream;
mod values;

use std::path::PathBuf;

use super::read::Config;
use super::syntax::Directive;
use emit::Output;
use settings::{Level, Own, Scope};

/// A translated config: the TOML text and what was not translated.
#[derive(Debug, Clone)]
pub struct Translation {
    /// The slipstream config.
    pub toml: String,
    /// One note per directive not translated or ignored, in reading order.
    pub notes: Vec<Note>,
}

impl Translation {
    /// How many directives were not translated.
    pub fn untranslated(&self) -> usize {
        self.notes
            .iter()
            .filter(|n| n.kind == NoteKind::NotTranslated)
            .count()
    }
}

/// What became of a directive that has no place in the TOML.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoteKind {
    /// slipstream has (or does not yet have) no equivalent: the config means something else.
    NotTranslated,
    /// Needless for slipstream (it does the same by itself, or it is nginx's own business).
    Ignored,
}

/// A directive left out of the translation, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The file it was read from: an index into `Config::files`.
    pub file: usize,
    /// Its line.
    pub line: usize,
    /// The directive's name.
    pub directive: String,
    /// Why it was left out.
    pub reason: String,
    /// Not translated, or ignored.
    pub kind: NoteKind,
}

impl Note {
    /// `FILE:LINE: not translated: DIRECTIVE (reason)` (or `ignored:`), FILE from `files`.
    pub fn render(&self, files: &[PathBuf]) -> String {
        let file = files
            .get(self.file)
            .map_or_else(|| "?".to_string(), |f| f.display().to_string());
        let kind = match self.kind {
            NoteKind::NotTranslated => "not translated",
            NoteKind::Ignored => "ignored",
        };
        format!(
            "{file}:{}: {kind}: {} ({})",
            self.line, self.directive, self.reason
        )
    }
}

/// Translates a config read with its includes.
pub fn translate(config: &Config) -> Translation {
    let mut t = Translator::default();
    t.declare_upstreams(&config.directives);
    t.http(&config.directives, &Scope::default(), true);
    let (listens, sites) = t.finish_sites();
    t.out.listens = listens;
    t.out.sites = sites;
    t.out.groups = t.groups_out();
    let source = config
        .files
        .first()
        .map_or_else(String::new, |f| f.display().to_string());
    // One line per directive and kind: its reasons together, each once.
    let mut notes: Vec<Note> = Vec::with_capacity(t.notes.len());
    for n in t.notes {
        let same = |m: &&mut Note| {
            (m.file, m.line, m.kind, &m.directive) == (n.file, n.line, n.kind, &n.directive)
        };
        match notes.iter_mut().find(same) {
            Some(m) if m.reason.split("; ").any(|r| r == n.reason) => {}
            Some(m) => {
                m.reason.push_str("; ");
                m.reason.push_str(&n.reason);
            }
            None => notes.push(n),
        }
    }
    notes.sort_by_key(|n| (n.file, n.line));
    Translation {
        toml: t.out.render(&source),
        notes,
    }
}

/// The translation's state.
#[derive(Default)]
struct Translator {
    /// What was left out so far.
    notes: Vec<Note>,
    /// The process-wide keys and sections; listeners, groups and sites at the end.
    out: Output,
    /// The upstream groups, declared and made.
    groups: Vec<upstream::Group>,
    /// The servers read.
    sites: Vec<server::SiteDraft>,
    /// `log_format`s by name: the format slipstream writes for it, None when it has none.
    log_formats: Vec<(String, Option<String>)>,
    /// The named groups of the location being read (its rules may use them).
    location_groups: Vec<String>,
    /// The named groups of the regex names of the server being read (all its rules may).
    server_groups: Vec<String>,
    /// The `location` blocks of the server being read (`auth_request` names one).
    server_locations: Vec<Directive>,
}

/// `map $http_upgrade $connection_upgrade { ... }`: what slipstream does by itself.
fn is_upgrade_idiom(d: &Directive) -> bool {
    d.args.len() == 2 && d.args[0] == "$http_upgrade" && d.args[1] == "$connection_upgrade"
}

impl Translator {
    /// The http level (or the top of a file: a whole config or a file for `http`): its
    /// settings first, as nginx applies them to every server whatever their order, then its
    /// servers.
    fn http(&mut self, directives: &[Directive], outer: &Scope, top: bool) {
        let mut scope = outer.clone();
        let mut own = Own::default();
        for d in directives.iter().filter(|d| d.name == "log_format") {
            self.log_format(d);
        }
        for d in directives {
            match d.name.as_str() {
                "server" | "upstream" => {}
                "http" if top && d.block.is_some() => {}
                "map" if d.block.is_some() && !is_upgrade_idiom(d) => self.map(d),
                _ => self.setting(d, &mut scope, &mut own, Level::Http),
            }
        }
        own.apply(&mut scope);
        if let Some(log) = &own.access_log {
            let d = directives
                .iter()
                .find(|d| d.name == "access_log")
                .expect("an access_log");
            self.set_global(None, "access_log", emit::Val::str(log.path.as_str()), d);
            if let Some(format) = &log.format {
                self.set_global(
                    None,
                    "access_log_format",
                    emit::Val::str(format.as_str()),
                    d,
                );
            }
        }
        for d in directives {
            match (d.name.as_str(), &d.block) {
                ("http", Some(block)) if top => self.http(block, &scope, false),
                ("server", Some(_)) => self.server(d, &scope),
                ("server", None) => self.not_translated(d, "a server without a block"),
                _ => {}
            }
        }
    }

    /// A directive nothing translates: ignored, not supported yet, or unknown.
    fn other(&mut self, d: &Directive) {
        if let Some(reason) = values::ignored(d) {
            self.ignore(d, reason);
        } else if values::known_unsupported(&d.name) {
            self.not_translated(d, "not supported yet");
        } else {
            self.not_translated(d, "unknown directive");
        }
    }

    /// Notes `d` as not translated.
    fn not_translated(&mut self, d: &Directive, reason: impl Into<String>) {
        self.note_at(
            d.file,
            d.line,
            &d.name,
            reason.into(),
            NoteKind::NotTranslated,
        );
    }

    /// Notes `d` as ignored.
    /// `map SOURCE $NAME { ... }` as `[maps.NAME]`: exact and regex keys in order, `default`;
    /// `hostnames` masks are not translated.
    fn map(&mut self, d: &Directive) {
        let (Some(source), Some(name)) = (d.args.first(), d.args.get(1)) else {
            return self.not_translated(d, "a map needs a source and a variable");
        };
        let Some(name) = name.strip_prefix('$').filter(|n| !n.is_empty()) else {
            return self.not_translated(d, "the map's variable must start with $");
        };
        let mut entries = Vec::new();
        let mut default = None;
        for entry in d.block.as_deref().unwrap_or_default() {
            match (entry.name.as_str(), entry.args.as_slice()) {
                ("volatile", []) => self.ignore(entry, "maps are evaluated for every use"),
                ("hostnames", []) => {
                    return self.not_translated(entry, "hostnames maps are not supported yet")
                }
                ("default", [value]) => default = Some(value.clone()),
                (key, [value]) => entries.push(emit::Val::List(vec![
                    emit::Val::str(key),
                    emit::Val::str(value.as_str()),
                ])),
                _ => self.not_translated(entry, "a map entry is a key and a value"),
            }
        }
        let mut keys = vec![("source".to_string(), emit::Val::str(source.as_str()))];
        keys.push(("entries".into(), emit::Val::List(entries)));
        if let Some(default) = default {
            keys.push(("default".into(), emit::Val::str(default.as_str())));
        }
        self.out.maps.retain(|(n, _)| n != name);
        self.out.maps.push((name.to_string(), keys));
    }

    fn ignore(&mut self, d: &Directive, reason: &str) {
        self.note_at(d.file, d.line, &d.name, reason.into(), NoteKind::Ignored);
    }

    /// Notes the directive `name` at `file:line`.
    fn note_at(&mut self, file: usize, line: usize, name: &str, reason: String, kind: NoteKind) {
        self.notes.push(Note {
            file,
            line,
            directive: name.to_string(),
            reason,
            kind,
        });
    }
}
