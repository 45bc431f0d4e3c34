//! The limit zones of a config (nginx's `limit_req_zone` and `limit_conn_zone`): each zone's
//! key (a text with variables, evaluated per request) and its state, shared by every worker
//! ([`super::limit`]); and what a site's or route's `limit_req` and `limit_conn` ask of them.
//! The rules phase evaluates the keys and checks the zones ([`Zones::check`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::limit::{check_many, ConnGuard, ConnZone, RateLimit, RateRule, RateVerdict, RateZone};
use super::template::{Current, Facts, Template};

/// A rate zone: its key and its state.
#[derive(Debug)]
pub struct RateZoneOf {
    /// The zone's name, for logs.
    pub name: String,
    /// What the zone counts by (`$remote_addr`).
    pub key: Template,
    /// Its state, shared by every worker.
    pub zone: RateZone,
}

/// A connection zone: its key and its state.
#[derive(Debug)]
pub struct ConnZoneOf {
    /// The zone's name, for logs.
    pub name: String,
    /// What the zone counts by.
    pub key: Template,
    /// Its state, shared by every worker.
    pub zone: Arc<ConnZone>,
}

/// Every zone of a config.
#[derive(Debug, Clone)]
pub struct Zones {
    /// The rate zones, by index.
    pub rate: Vec<Arc<RateZoneOf>>,
    /// The connection zones, by index.
    pub conn: Vec<Arc<ConnZoneOf>>,
    /// The rate zones' clock origin.
    pub since: Instant,
}

impl Default for Zones {
    fn default() -> Zones {
        Zones {
            rate: Vec::new(),
            conn: Vec::new(),
            since: Instant::now(),
        }
    }
}

/// One `limit_req` of a site or route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitReq {
    /// Its zone.
    pub zone: usize,
    /// Its burst and delay.
    pub rule: RateRule,
}

/// One `limit_conn` of a site or route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitConn {
    /// Its zone.
    pub zone: usize,
    /// Requests in flight allowed per key.
    pub max: u32,
}

/// What the limits make of a request.
#[derive(Debug, Default)]
pub struct Limited {
    /// Refused: when one more request would fit (`Retry-After`), if a rate said so.
    pub refused: Option<Option<Duration>>,
    /// Served after this wait.
    pub delay: Option<Duration>,
    /// Held until the request ends: its places in the connection zones.
    pub guards: Vec<ConnGuard>,
}

impl Zones {
    /// The verdict of a request's `limit_req` list.
    fn rates(&self, req: &[LimitReq], facts: &Facts<'_>, current: &Current) -> RateVerdict {
        let now = || self.since.elapsed().as_millis() as u64;
        if let [one] = req {
            // One limit (the usual case): checked straight, its key in one small buffer.
            let zone = &self.rate[one.zone];
            let mut key = String::with_capacity(48);
            zone.key.render(facts, current, &mut key);
            if key.is_empty() {
                return RateVerdict::Pass;
            }
            return zone.zone.check(key.as_bytes(), now(), &one.rule);
        }
        if req.is_empty() {
            return RateVerdict::Pass;
        }
        let keys: Vec<String> = req
            .iter()
            .map(|l| self.rate[l.zone].key.to_string(facts, current))
            .collect();
        let limits: Vec<RateLimit<'_>> = req
            .iter()
            .zip(&keys)
            .map(|(l, key)| RateLimit {
                zone: &self.rate[l.zone].zone,
                key: key.as_bytes(),
                rule: &l.rule,
            })
            .collect();
        check_many(&limits, now()).verdict
    }

    /// Checks a request's `limit_req` then `limit_conn` (nginx's order); keys are evaluated
    /// over the request's facts. An empty key is not limited.
    pub fn check(
        &self,
        (req, conn): (&[LimitReq], &[LimitConn]),
        facts: &Facts<'_>,
        current: &Current,
    ) -> Limited {
        let mut limited = Limited::default();
        let verdict = self.rates(req, facts, current);
        match verdict {
            RateVerdict::Pass => {}
            RateVerdict::Delay(d) => limited.delay = Some(d),
            RateVerdict::Reject { retry_after } => {
                limited.refused = Some(Some(retry_after));
                return limited;
            }
            RateVerdict::Full => {
                limited.refused = Some(None);
                return limited;
            }
        }
        for l in conn {
            let zone = &self.conn[l.zone];
            let key = zone.key.to_string(facts, current);
            if key.is_empty() {
                continue;
            }
            match zone.zone.acquire(key.as_bytes(), l.max) {
                Ok(guard) => limited.guards.push(guard),
                Err(_) => {
                    // Places already taken are given back when the guards drop.
                    limited.guards.clear();
                    limited.refused = Some(None);
                    return limited;
                }
            }
        }
        limited
    }
}
