//! nginx's limits as slipstream's: `limit_req_zone` and `limit_conn_zone` as
//! `[rate_zones.NAME]` and `[conn_zones.NAME]`, `limit_req` and `limit_conn` as the lists of
//! the same names.

use super::emit::Val;
use super::settings::Own;
use super::{Directive, Translator};

/// `limit_req zone=NAME [burst=N] [nodelay | delay=N]` as a `limit_req` entry.
fn limit_req(args: &[String]) -> Result<Val, &'static str> {
    let mut entry = Vec::new();
    for arg in args {
        match arg.split_once('=') {
            Some(("zone", name)) => entry.push(("zone".to_string(), Val::str(name))),
            Some(("burst", n)) => {
                let n = n.parse::<i64>().map_err(|_| "burst is a number")?;
                entry.push(("burst".into(), Val::Int(n)));
            }
            Some(("delay", n)) => {
                let n = n.parse::<i64>().map_err(|_| "delay is a number")?;
                entry.push(("delay".into(), Val::Int(n)));
            }
            None if arg == "nodelay" => entry.push(("nodelay".into(), Val::Bool(true))),
            _ => return Err("only zone=, burst=, nodelay and delay="),
        }
    }
    if !entry.iter().any(|(k, _)| k == "zone") {
        return Err("no zone=");
    }
    Ok(Val::Table(entry))
}

impl Translator {
    /// `limit_req`, `limit_conn` and their zones; true when `d` is one of them.
    pub(super) fn limits(&mut self, d: &Directive, own: &mut Own) -> bool {
        match (d.name.as_str(), d.args.as_slice()) {
            ("limit_req", [_, ..]) => match limit_req(&d.args) {
                Ok(entry) => own.limit_req.get_or_insert_with(Vec::new).push(entry),
                Err(reason) => self.not_translated(d, reason),
            },
            ("limit_conn", [zone, max]) => match max.parse::<i64>() {
                Ok(max) => own
                    .limit_conn
                    .get_or_insert_with(Vec::new)
                    .push(Val::Table(vec![
                        ("zone".into(), Val::str(zone.as_str())),
                        ("max".into(), Val::Int(max)),
                    ])),
                Err(_) => self.not_translated(d, "not a number"),
            },
            ("limit_req_zone" | "limit_conn_zone", [key, ..]) => self.limit_zone(d, key),
            _ => return false,
        }
        true
    }

    /// `limit_req_zone KEY zone=NAME:SIZE rate=R` and `limit_conn_zone KEY zone=NAME:SIZE`
    /// as `[rate_zones.NAME]` and `[conn_zones.NAME]`.
    fn limit_zone(&mut self, d: &Directive, key: &str) {
        let rate = d.name == "limit_req_zone";
        let mut keys = vec![("key".to_string(), Val::str(key))];
        let mut name = None;
        for arg in &d.args[1..] {
            match arg.split_once('=') {
                Some(("zone", zone)) => match zone.split_once(':') {
                    Some((n, size)) => {
                        name = Some(n.to_string());
                        keys.push(("size".into(), Val::str(size)));
                    }
                    None => name = Some(zone.to_string()),
                },
                Some(("rate", r)) if rate => keys.push(("rate".into(), Val::str(r))),
                _ => return self.not_translated(d, format!("{arg}: not supported yet")),
            }
        }
        let Some(name) = name else {
            return self.not_translated(d, "no zone=");
        };
        if crate::rules::template::Template::parse(key, &[]).is_err() {
            return self.not_translated(d, format!("{key} is not supported yet"));
        }
        let section = if rate { "rate_zones" } else { "conn_zones" };
        let section = format!("{section}.{}", super::emit::key(&name));
        self.out.zones.retain(|(s, _)| *s != section);
        self.out.zones.push((section, keys));
    }
}
