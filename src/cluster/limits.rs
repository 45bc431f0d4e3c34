//! Fleet-wide rate limits: the fleet's hashing secret, and the counts instances exchange.
//!
//! Each instance limits on its own buckets ([`crate::rules::limit::fleet`]). Once a second the
//! sync thread takes the counts of the keys busy here (at least the zone's rate over the fleet
//! size in the last second, or any count for a key another instance reported lately) and puts
//! them in one record, `PREFIX/limits/counts/NAME-PID-RANDOM`, under the registration lease. The
//! watcher hands the others' records to [`received`]; the charging thread adds each count to the
//! key's bucket here in tenths over the next second, as the requests came.
//! One etcd write per instance per second at most, none while nothing is busy; etcd down, each
//! instance limits alone. The record is binary (`encode`/[`decode`]) and fuzzed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::agent::{pause, Setup};
use super::etcd::Etcd;
use crate::config::cluster::ClusterSettings;
use crate::observe::cluster as standing;
use crate::rules::limit::fleet::{Tally, MAX_TALLY};
use crate::rules::zones::Zones;

/// How often counts are published: the delay term of the error bound.
pub const PERIOD: Duration = Duration::from_secs(1);
/// The most records one put carries (16 bytes each, under etcd's 1.5 MiB request limit once
/// base64 encoded); the rest wait for the next period.
const MAX_RECORDS: usize = 60_000;
const MAGIC: &[u8; 5] = b"slrc2";
/// How often the charging thread adds the next part of each record: the requests a record counts
/// came over one period (or more), and charged at once they would overflow a bucket that had
/// drained meanwhile, refusing clients under the rate.
const PIECES: u32 = 10;
/// The most records being charged at once; past it, records are ignored (and counted).
const MAX_CHARGING: usize = 2_000_000;
/// A record older than this (by its sender's clock) is not applied: a watch replaying history
/// after a reconnect must not charge old requests now. Fleets keep their clocks in NTP sync.
const STALE_MS: u64 = 5_000;

/// The limit zones of the configuration served now.
static LIVE: Mutex<Option<Zones>> = Mutex::new(None);

/// The configuration now served has these limit zones.
pub(super) fn serve(zones: Zones) {
    *LIVE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(zones);
}

fn live() -> Option<Zones> {
    LIVE.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// The key under which an instance publishes its counts.
pub(super) fn counts_prefix(settings: &ClusterSettings) -> String {
    format!("{}/limits/counts/", settings.prefix)
}

/// The fleet's hashing secret: created in etcd by the first instance to ask, kept in the state
/// directory for a start while etcd is down (`reachable` false: etcd is not asked). With
/// neither, a secret of this process's own (the others ignore its records, and it theirs, until
/// it restarts with etcd up).
pub(super) fn secret(
    etcd: &mut Etcd,
    settings: &ClusterSettings,
    reachable: bool,
    notes: &mut Vec<String>,
) -> u64 {
    let key = format!("{}/limits/secret", settings.prefix);
    let path = settings.state_dir.join("limits-secret");
    let proposed = format!("{:016x}", fastrand::u64(..));
    let created = if reachable {
        etcd.create(&key, proposed.as_bytes(), 0)
    } else {
        Err("etcd is unreachable".into())
    };
    let from_etcd = match created {
        Ok(true) => Ok(parse_secret(proposed.as_bytes())),
        Ok(false) => etcd
            .get(&key)
            .map(|(kv, _)| kv.and_then(|kv| parse_secret(&kv.value))),
        Err(e) => Err(e),
    };
    match from_etcd {
        Ok(Some(secret)) => {
            let kept = std::fs::create_dir_all(&settings.state_dir).map_err(|e| e.to_string());
            let kept = kept.and_then(|()| {
                crate::acme::state::write_atomically(&path, format!("{secret:016x}").as_bytes())
            });
            if let Err(e) = kept {
                notes.push(format!(
                    "cluster: cannot keep the limits secret in {}: {e}",
                    path.display()
                ));
            }
            return secret;
        }
        Ok(None) => notes.push(format!("cluster: {key} does not hold a secret")),
        Err(_) => {}
    }
    if let Some(secret) = std::fs::read(&path).ok().and_then(|b| parse_secret(&b)) {
        return secret;
    }
    notes.push(
        "cluster: the fleet's limits secret could not be read: rate limits stay this instance's own until a restart with etcd up".into(),
    );
    fastrand::u64(..)
}

fn parse_secret(bytes: &[u8]) -> Option<u64> {
    u64::from_str_radix(std::str::from_utf8(bytes).ok()?.trim(), 16).ok()
}

/// A published batch: when it was taken, and each zone's records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// The sender's wall clock when it took the counts, in ms since the Unix epoch.
    pub sent_ms: u64,
    /// The zones with busy keys.
    pub zones: Vec<ZoneCounts>,
}

/// One zone's records in a published batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneCounts {
    /// The zone's name.
    pub name: String,
    /// The zone's [`crate::rules::limit::RateZone::seed_check`]: records of a zone hashed
    /// with another secret are not applied.
    pub check: u64,
    /// Its slot count: records only apply to a zone of the same size.
    pub slots: u32,
    /// Its busy keys' counts.
    pub records: Vec<Tally>,
}

/// The batch as published: `slrc2`, u64 sent_ms, a u16 zone count, then per zone a u8 name
/// length, the name, u64 seed check, u32 slots, u32 records, and per record u32 home, u64
/// fingerprint, u32 count (all little-endian). Names over 255 bytes are not shared
/// ([`collect`] leaves such zones out).
pub fn encode(batch: &Batch) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&batch.sent_ms.to_le_bytes());
    let zones = &batch.zones[..batch.zones.len().min(usize::from(u16::MAX))];
    out.extend_from_slice(&(zones.len() as u16).to_le_bytes());
    for z in zones {
        let name = &z.name.as_bytes()[..z.name.len().min(255)];
        out.push(name.len() as u8);
        out.extend_from_slice(name);
        out.extend_from_slice(&z.check.to_le_bytes());
        out.extend_from_slice(&z.slots.to_le_bytes());
        out.extend_from_slice(&(z.records.len() as u32).to_le_bytes());
        for r in &z.records {
            out.extend_from_slice(&r.home.to_le_bytes());
            out.extend_from_slice(&r.fingerprint.to_le_bytes());
            let periods = u32::from(r.periods.saturating_sub(1).min(15));
            let word = (r.count & MAX_TALLY) | (periods << 27) | (u32::from(r.busy) << 31);
            out.extend_from_slice(&word.to_le_bytes());
        }
    }
    out
}

/// Reads a published batch; anything malformed or truncated is an error.
pub fn decode(bytes: &[u8]) -> Result<Batch, String> {
    let mut r = Reader(bytes);
    if r.take(MAGIC.len())? != MAGIC {
        return Err("not a counts record of this version".into());
    }
    let sent_ms = u64::from_le_bytes(r.array()?);
    let zones = u16::from_le_bytes(r.array()?);
    let mut out = Vec::new();
    for _ in 0..zones {
        let len = usize::from(r.take(1)?[0]);
        let name = String::from_utf8(r.take(len)?.to_vec()).map_err(|_| "zone name not UTF-8")?;
        let check = u64::from_le_bytes(r.array()?);
        let slots = u32::from_le_bytes(r.array()?);
        let n = u32::from_le_bytes(r.array()?) as usize;
        if n > r.0.len() / 16 {
            return Err(format!("zone {name}: {n} records do not fit"));
        }
        let mut records = Vec::with_capacity(n);
        for _ in 0..n {
            let home = u32::from_le_bytes(r.array()?);
            let fingerprint = u64::from_le_bytes(r.array()?);
            let word = u32::from_le_bytes(r.array()?);
            records.push(Tally {
                home,
                fingerprint,
                count: word & MAX_TALLY,
                busy: word >> 31 == 1,
                periods: ((word >> 27) & 0xf) as u8 + 1,
            });
        }
        out.push(ZoneCounts {
            name,
            check,
            slots,
            records,
        });
    }
    if !r.0.is_empty() {
        return Err("bytes after the last zone".into());
    }
    Ok(Batch {
        sent_ms,
        zones: out,
    })
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("truncated counts record".into());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
}

/// Another instance's records for one zone, being charged here: each over as many periods as
/// it was counted over, from when it arrived.
struct Charging {
    zone: String,
    slots: u32,
    check: u64,
    arrived: std::time::Instant,
    /// Each record, with the thousandths already charged.
    records: Vec<(Tally, u64)>,
}

static CHARGING: Mutex<Vec<Charging>> = Mutex::new(Vec::new());

fn charging() -> std::sync::MutexGuard<'static, Vec<Charging>> {
    CHARGING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The zone of the configuration served that a record is for (by name, size and seed).
fn zone_for<'a>(
    zones: &'a Zones,
    name: &str,
    slots: u32,
    check: u64,
) -> Option<&'a crate::rules::zones::RateZoneOf> {
    zones.rate.iter().map(|z| &**z).find(|z| {
        z.name == name
            && z.zone.is_shared()
            && z.zone.capacity() == slots as usize
            && z.zone.seed_check() == check
    })
}

/// The charging thread's loop: every tenth of a period, each record queued is charged up to
/// the share of its count its time so far is due (so a slow turn catches up, never runs
/// behind). The queue is taken out while charging: the watcher never waits on it. A record
/// for a zone a reload replaced is charged to the new zone of that name. It ends when the run
/// loop has gone.
pub(super) fn charge(s: &Arc<Setup>) {
    while !s.updates.is_closed() {
        pause(PERIOD / PIECES);
        let mut work = std::mem::take(&mut *charging());
        if let Some(zones) = live() {
            let now = zones.since.elapsed().as_millis() as u64;
            for c in &mut work {
                let Some(zone) = zone_for(&zones, &c.zone, c.slots, c.check) else {
                    c.records.clear();
                    continue;
                };
                let elapsed = c.arrived.elapsed().as_millis();
                for (t, charged) in &mut c.records {
                    let whole = u64::from(t.count) * 1000;
                    let span = PERIOD.as_millis() * u128::from(t.periods.max(1));
                    let due = (u128::from(whole) * elapsed.min(span) / span) as u64;
                    if due > *charged {
                        zone.zone.add_remote(t, due - *charged, now);
                        *charged = due;
                    }
                }
                c.records
                    .retain(|(t, charged)| *charged < u64::from(t.count) * 1000);
            }
            work.retain(|c| !c.records.is_empty());
        }
        charging().extend(work);
    }
}

/// Another instance's counts, queued to be charged to the buckets here over the next period
/// (or as many as each was counted over). Zones not shared here, of another size or seed, or
/// unknown are skipped (counted as ignored), as are records older than `STALE_MS` and records
/// past `MAX_CHARGING` in the queue.
pub(super) fn received(value: &[u8]) {
    let Some(zones) = live() else {
        return;
    };
    let batch = match decode(value) {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!("cluster: a limits record was not read: {e}");
            return;
        }
    };
    let records = |z: &ZoneCounts| z.records.len() as u64;
    if unix_ms().saturating_sub(batch.sent_ms) > STALE_MS {
        standing::limit_records(0, batch.zones.iter().map(records).sum());
        return;
    }
    let mut queue = charging();
    let mut queued: usize = queue.iter().map(|c| c.records.len()).sum();
    for counts in batch.zones {
        let known = zone_for(&zones, &counts.name, counts.slots, counts.check).is_some();
        if !known || queued + counts.records.len() > MAX_CHARGING {
            standing::limit_records(0, records(&counts));
            continue;
        }
        standing::limit_records(records(&counts), 0);
        queued += counts.records.len();
        queue.push(Charging {
            zone: counts.name,
            slots: counts.slots,
            check: counts.check,
            arrived: std::time::Instant::now(),
            records: counts.records.into_iter().map(|t| (t, 0)).collect(),
        });
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// This period's counts of every shared zone, for a fleet of `size` instances. The zones are
/// taken from a varying first one, so a full batch does not always leave out the same zone.
fn collect(zones: &Zones, size: u64) -> Batch {
    let mut batch = Vec::new();
    let mut room = MAX_RECORDS;
    let shared: Vec<_> = zones
        .rate
        .iter()
        .filter(|z| z.zone.is_shared() && z.name.len() <= 255)
        .collect();
    let first = fastrand::usize(..shared.len().max(1));
    for z in shared.iter().cycle().skip(first).take(shared.len()) {
        let per_period = z.zone.per_second() * PERIOD.as_secs();
        let threshold = (per_period / size.max(1)).clamp(1, u64::from(u32::MAX)) as u32;
        let mut records = Vec::new();
        let from = fastrand::usize(..z.zone.capacity());
        z.zone.tally(threshold, room, from, &mut records);
        room -= records.len();
        if !records.is_empty() {
            batch.push(ZoneCounts {
                name: z.name.clone(),
                check: z.zone.seed_check(),
                slots: z.zone.capacity() as u32,
                records,
            });
        }
    }
    Batch {
        sent_ms: unix_ms(),
        zones: batch,
    }
}

/// The sync thread's loop: every period, the busy keys' counts published under the
/// registration lease. Counts are taken every period, published or not, so none build up while
/// the instance is unregistered or leaving. It ends when the run loop has gone.
pub(super) fn sync(s: &Arc<Setup>) {
    let mut etcd = Etcd::new(&s.settings);
    // By process, not name: two instances may share a name (it defaults to the host's).
    let key = format!("{}{}", counts_prefix(&s.settings), s.origin);
    let instances = format!("{}/instances/", s.settings.prefix);
    let mut size = 1;
    let mut warned = false;
    loop {
        pause(PERIOD);
        if s.updates.is_closed() {
            return;
        }
        let Some(zones) = live() else { continue };
        if !zones.rate.iter().any(|z| z.zone.is_shared()) {
            continue;
        }
        let lease = {
            let served = super::lock(&s.served);
            (!served.leaving && served.lease != 0).then_some(served.lease)
        };
        if lease.is_some() {
            // Read every period: instances starting one after another change the threshold.
            if let Ok(list) = etcd.list(&instances) {
                size = (list.len() as u64).max(1);
            }
        }
        let batch = collect(&zones, size);
        let Some(lease) = lease else { continue };
        if batch.zones.is_empty() {
            continue;
        }
        let records: usize = batch.zones.iter().map(|z| z.records.len()).sum();
        match etcd.put(&key, &encode(&batch), lease) {
            Ok(_) => {
                standing::limit_sent(records as u64);
                warned = false;
            }
            Err(e) => {
                if !warned {
                    tracing::warn!("cluster: rate limit counts not published ({e}): limits hold per instance until etcd answers");
                    warned = true;
                }
                standing::limit_unsent(records as u64);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> Batch {
        Batch {
            sent_ms: 1_764_000_000_000,
            zones: vec![
                ZoneCounts {
                    name: "perip".into(),
                    check: 0x0123_4567_89ab_cdef,
                    slots: 43_690,
                    records: vec![
                        Tally {
                            home: 7,
                            fingerprint: 0x3fff_ffff_ffff_fff0,
                            count: 12,
                            busy: true,
                            periods: 1,
                        },
                        Tally {
                            home: 43_689,
                            fingerprint: 1,
                            count: 1,
                            busy: false,
                            periods: 16,
                        },
                    ],
                },
                ZoneCounts {
                    name: "api".into(),
                    check: 2,
                    slots: 8,
                    records: vec![],
                },
            ],
        }
    }

    #[test]
    fn counts_records_read_back_and_refuse_what_does_not_fit() {
        let bytes = encode(&batch());
        assert_eq!(decode(&bytes), Ok(batch()));
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode(&[bytes.as_slice(), b"x"].concat()).is_err());
        // The first version's records (no clock, no seed check) are not taken for these.
        assert!(decode(b"slrc1\0\0").is_err());
        let empty = Batch {
            sent_ms: 0,
            zones: vec![],
        };
        assert_eq!(decode(&encode(&empty)), Ok(empty));
        // A record count larger than what follows is refused before anything is allocated.
        let mut huge = MAGIC.to_vec();
        huge.extend_from_slice(&0u64.to_le_bytes());
        huge.extend_from_slice(&1u16.to_le_bytes());
        huge.extend_from_slice(&[1, b'z']);
        huge.extend_from_slice(&0u64.to_le_bytes());
        huge.extend_from_slice(&8u32.to_le_bytes());
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&huge).unwrap_err().contains("do not fit"));
    }
}
