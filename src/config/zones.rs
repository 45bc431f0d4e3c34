//! The limit keys: `[rate_zones.NAME]` and `[conn_zones.NAME]` (nginx's `limit_req_zone` and
//! `limit_conn_zone`), and a site's or route's `limit_req`, `limit_conn` and
//! `limit_status`, every problem reported with its line.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use toml::Spanned;

use super::{Size, Validator};
use crate::rules::limit::{fleet, parse_rate, ConnZone, Delay, RateRule, RateZone};
use crate::rules::template::Template;
use crate::rules::zones::{ConnZoneOf, LimitConn, LimitReq, RateZoneOf, Zones};

/// nginx's smallest useful zone is a few pages; slipstream's default holds ~65k rate keys.
const DEFAULT_ZONE: usize = 1 << 20;

/// `[rate_zones.NAME]`: `key`, `rate` (`"10r/s"`, `"30r/m"`), `size`, `scope` (`"fleet"`, the
/// default, or `"instance"`: in a `[cluster]`, whether the rate holds over the fleet).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileRateZone {
    key: String,
    rate: String,
    size: Option<Size>,
    scope: Option<Spanned<String>>,
}

/// `[conn_zones.NAME]`: `key`, `size`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConnZone {
    key: String,
    size: Option<Size>,
}

/// One `limit_req` entry: `{ zone = "perip", burst = 20, nodelay = true }` or `delay = 8`.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct FileLimitReq {
    zone: String,
    #[serde(default)]
    burst: u32,
    #[serde(default)]
    nodelay: bool,
    delay: Option<u32>,
}

/// One `limit_conn` entry: `{ zone = "addr", max = 10 }`.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct FileLimitConn {
    zone: String,
    max: u32,
}

impl Validator<'_> {
    /// The zones, their names kept for the policies.
    pub(super) fn build_zones(
        &mut self,
        rate: &BTreeMap<Spanned<String>, FileRateZone>,
        conn: &BTreeMap<Spanned<String>, FileConnZone>,
    ) -> Zones {
        let mut zones = Zones::default();
        for (name, z) in rate {
            let at = name.span().start;
            let (Some(key), Some(bytes)) = (self.zone_key(at, &z.key), self.zone_size(at, &z.size))
            else {
                continue;
            };
            let fleet = match z
                .scope
                .as_ref()
                .map(|s| (s.span().start, s.get_ref().as_str()))
            {
                None | Some((_, "fleet")) => true,
                Some((_, "instance")) => false,
                Some((at, other)) => {
                    self.error(
                        at,
                        format!(
                            "rate_zones.{}: scope {other:?}: \"fleet\" or \"instance\"",
                            name.get_ref()
                        ),
                    );
                    continue;
                }
            };
            match parse_rate(&z.rate) {
                Ok(r) => {
                    self.rate_zone_names.push(name.get_ref().clone());
                    let zone = match fleet.then(|| fleet::seed_for(name.get_ref())).flatten() {
                        Some(seed) => RateZone::shared(r, bytes, seed),
                        None => RateZone::new(r, bytes),
                    };
                    zones.rate.push(Arc::new(RateZoneOf {
                        name: name.get_ref().clone(),
                        key,
                        zone,
                    }));
                }
                Err(e) => self.error(at, format!("rate_zones.{}: {e}", name.get_ref())),
            }
        }
        for (name, z) in conn {
            let at = name.span().start;
            let (Some(key), Some(bytes)) = (self.zone_key(at, &z.key), self.zone_size(at, &z.size))
            else {
                continue;
            };
            self.conn_zone_names.push(name.get_ref().clone());
            zones.conn.push(Arc::new(ConnZoneOf {
                name: name.get_ref().clone(),
                key,
                zone: Arc::new(ConnZone::new(bytes)),
            }));
        }
        zones
    }

    fn zone_key(&mut self, at: usize, key: &str) -> Option<Template> {
        match Template::parse_with(key, &[], &self.map_names) {
            Ok(t) => Some(t),
            Err(e) => {
                self.error(at, format!("zone key {key:?}: {e}"));
                None
            }
        }
    }

    fn zone_size(&mut self, at: usize, size: &Option<Size>) -> Option<usize> {
        let bytes = match size {
            None => Some(DEFAULT_ZONE as u64),
            Some(Size::Bytes(n)) => Some(*n),
            Some(Size::Text(t)) => super::text::parse_size(t),
        };
        match bytes {
            Some(n) if (4096..=1 << 32).contains(&n) => Some(n as usize),
            _ => {
                self.error(at, "zone size: from \"4k\" to \"4g\" (e.g. \"10m\")");
                None
            }
        }
    }

    /// A level's `limit_req`, `limit_conn` and `limit_status`, each its own or its parent's.
    pub(super) fn limits(
        &mut self,
        keys: &super::policy::PolicyKeys<'_>,
        parent: Option<&crate::routing::Policy>,
    ) -> (Vec<LimitReq>, Vec<LimitConn>, u16) {
        let req = match keys.limit_req {
            Some(list) => self.limit_req(list),
            None => parent.map_or(Vec::new(), |p| p.limit_req.clone()),
        };
        let conn = match keys.limit_conn {
            Some(list) => self.limit_conn(list),
            None => parent.map_or(Vec::new(), |p| p.limit_conn.clone()),
        };
        let status = match keys.limit_status {
            Some(s) if (400..=599).contains(s.get_ref()) => *s.get_ref(),
            Some(s) => {
                self.error(s.span().start, "limit_status: a code from 400 to 599");
                429
            }
            None => parent.map_or(429, |p| p.limit_status),
        };
        (req, conn, status)
    }

    /// A level's `limit_req` list (its own replaces its parent's, as nginx).
    pub(super) fn limit_req(&mut self, list: &Spanned<Vec<FileLimitReq>>) -> Vec<LimitReq> {
        let at = list.span().start;
        let mut out: Vec<LimitReq> = Vec::new();
        for l in list.get_ref() {
            let Some(zone) = self.rate_zone_names.iter().position(|n| *n == l.zone) else {
                self.error(at, format!("limit_req: no [rate_zones.{}]", l.zone));
                continue;
            };
            if out.iter().any(|o| o.zone == zone) {
                self.error(at, format!("limit_req: zone {:?} listed twice", l.zone));
                continue;
            }
            let delay = match (l.nodelay, l.delay) {
                (true, Some(_)) => {
                    self.error(at, "limit_req: nodelay or delay, not both");
                    continue;
                }
                (true, None) => Delay::NoDelay,
                (false, d) => Delay::After(d.unwrap_or(0)),
            };
            let rule = RateRule {
                burst: l.burst,
                delay,
            };
            out.push(LimitReq { zone, rule });
        }
        out
    }

    /// A level's `limit_conn` list.
    pub(super) fn limit_conn(&mut self, list: &Spanned<Vec<FileLimitConn>>) -> Vec<LimitConn> {
        let at = list.span().start;
        let mut out: Vec<LimitConn> = Vec::new();
        for l in list.get_ref() {
            let Some(zone) = self.conn_zone_names.iter().position(|n| *n == l.zone) else {
                self.error(at, format!("limit_conn: no [conn_zones.{}]", l.zone));
                continue;
            };
            if l.max == 0 || l.max > crate::rules::limit::MAX_CONN {
                self.error(at, "limit_conn: max is 1 to 65535");
                continue;
            }
            out.push(LimitConn { zone, max: l.max });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn zone(scope: &str) -> String {
        format!("[rate_zones.perip]\nkey = \"$remote_addr\"\nrate = \"10r/s\"\n{scope}[[sites]]\ndefault = true\nlimit_req = [{{ zone = \"perip\" }}]\n[[listen]]\naddress = \"127.0.0.1:0\"\n")
    }

    #[test]
    fn a_rate_zones_scope_is_fleet_or_instance() {
        for scope in ["", "scope = \"fleet\"\n", "scope = \"instance\"\n"] {
            let config = Config::parse(&zone(scope), "a.toml").unwrap();
            // Outside a fleet no zone is shared, whatever its scope.
            assert!(!config.router.zones().rate[0].zone.is_shared());
        }
        let e = Config::parse(&zone("scope = \"galaxy\"\n"), "a.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a.toml:4") && e.contains("\"fleet\" or \"instance\""),
            "{e}"
        );
    }
}
