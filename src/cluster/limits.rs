//! Fleet-wide rate limits: the fleet's hashing secret, and the counts instances exchange.
//!
//! Each instance limits on its own buckets ([`crate::rules::limit::fleet`]). Once a second the
//! sync thread takes the counts of the keys busy here (at least the zone's rate over the fleet
//! size in the last second, or any count for a key another instance reported lately) and puts
//! them in one record, `PREFIX/limits/counts/NAME-PID-RANDOM`, under the registration lease. The
//! watcher hands the others' records to [`received`]; the charging thread adds each count to the
//! key's bucket here in tenths over as long as it was counted over, one sender's records one
//! after another, so each instance's requests are charged at the pace they came.
//! One etcd write per instance per second at most, none while nothing is busy; etcd down, each
//! instance limits alone. The record is binary (`encode`/[`decode`]) and fuzzed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
const MAGIC: &[u8; 5] = b"slrc3";
/// How often the charging thread adds the next part of each record: the requests a record counts
/// came over one period (or more), and charged at once they would overflow a bucket that had
/// drained meanwhile, refusing clients under the rate.
const PIECES: u32 = 10;
/// The most charging time one turn of the charging thread may pass, in tenths of a piece: a turn
/// that comes late (the machine was busy) moves the charges in flight on by at most this, so
/// they are stretched, not caught up. Caught up at once, the backlog would land in buckets that
/// drained meanwhile and refuse clients under the rate.
const TURN_MAX: u32 = 15;
/// The most records being charged at once; past it, records are ignored (and counted).
const MAX_CHARGING: usize = 2_000_000;
/// The longest span a batch is charged over (a sender's turn that took longer than this is
/// charged over this).
const MAX_SPAN_MS: u64 = 60_000;
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
    /// How long the counts were taken over, in ms (a period, or longer when the sender's turn
    /// came late): receivers charge them over as long.
    pub span_ms: u32,
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

/// The batch as published: `slrc3`, u64 sent_ms, u32 span_ms, a u16 zone count, then per zone
/// a u8 name length, the name, u64 seed check, u32 slots, u32 records, and per record u32
/// home, u64 fingerprint, u32 word (count:27, periods-1:4, busy:1; all little-endian). Names
/// over 255 bytes are not shared ([`collect`] leaves such zones out).
pub fn encode(batch: &Batch) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&batch.sent_ms.to_le_bytes());
    out.extend_from_slice(&batch.span_ms.to_le_bytes());
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
    let span_ms = u32::from_le_bytes(r.array()?);
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
        span_ms,
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

/// Another instance's records for one zone, being charged here: each over as long as it was
/// counted over, from a start on the charging clock.
struct Charging {
    zone: String,
    slots: u32,
    check: u64,
    /// How long one period of counts is charged over (its batch's span), in ms.
    span: u64,
    /// Each record being charged.
    records: Vec<Part>,
}

/// One record being charged: from when on the charging clock ([`CLOCK`]), and the
/// thousandths already charged.
struct Part {
    tally: Tally,
    start: u64,
    charged: u64,
}

/// A key of one sender's zone, for [`Queue::tails`]: a hash of the sender and the zone's name,
/// and the key's home slot and fingerprint.
type KeyOf = (u64, u32, u64);

/// The records being charged; per sender where on the charging clock its last batch's
/// period ends: the next batch from it starts there, so one sender's batches do not overlap (a
/// watch that delivers two at once must not charge that sender's requests twice as fast); and
/// per key whose last record runs past its batch's period (a count kept over earlier periods),
/// where it ends: that key's next record starts there, not on top of it.
#[derive(Default)]
struct Queue {
    batches: Vec<Charging>,
    ends: HashMap<String, u64>,
    tails: HashMap<KeyOf, u64>,
}

static CHARGING: Mutex<Option<Queue>> = Mutex::new(None);

/// The charging clock, in ms: it runs with the wall clock, but a turn of the charging thread
/// moves it on at most `TURN_MAX` tenths of a piece, so a late turn stretches the charges in
/// flight rather than adding them in a lump. (Kept in µs by the thread, so it does not fall
/// behind the senders' clocks by the rounding of every turn.)
static CLOCK: AtomicU64 = AtomicU64::new(0);

fn charging<T>(f: impl FnOnce(&mut Queue) -> T) -> T {
    let mut guard = CHARGING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    f(guard.get_or_insert_with(Queue::default))
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

/// The charging thread's loop: every tenth of a period, the charging clock moves on (by the
/// time passed, at most `TURN_MAX` tenths of a piece) and each record queued is charged up to
/// the share of its count that much time is due. The queue is taken out while charging: the
/// watcher never waits on it. A record for a zone a reload replaced is charged to the new zone
/// of that name. It ends when the run loop has gone.
pub(super) fn charge(s: &Arc<Setup>) {
    let piece = PERIOD / PIECES;
    let mut last = Instant::now();
    let mut micros = CLOCK.load(Relaxed) * 1000;
    while !s.updates.is_closed() {
        pause(piece);
        let now = Instant::now();
        micros += (now - last).min(piece * TURN_MAX / 10).as_micros() as u64;
        last = now;
        let clock = micros / 1000;
        CLOCK.store(clock, Relaxed);
        let mut work = charging(|q| std::mem::take(&mut q.batches));
        if let Some(zones) = live() {
            let now = zones.since.elapsed().as_millis() as u64;
            for c in &mut work {
                let Some(zone) = zone_for(&zones, &c.zone, c.slots, c.check) else {
                    c.records.clear();
                    continue;
                };
                for p in &mut c.records {
                    let elapsed = clock.saturating_sub(p.start);
                    let whole = u64::from(p.tally.count) * 1000;
                    let span = c.span * u64::from(p.tally.periods.max(1));
                    let due = (u128::from(whole) * u128::from(elapsed.min(span)) / u128::from(span))
                        as u64;
                    if due > p.charged {
                        zone.zone.add_remote(&p.tally, due - p.charged, now);
                        p.charged = due;
                    }
                }
                c.records
                    .retain(|p| p.charged < u64::from(p.tally.count) * 1000);
            }
            work.retain(|c| !c.records.is_empty());
        }
        charging(|q| q.batches.extend(work));
    }
}

/// Another instance's counts (`from` is its origin), queued to be charged to the buckets here
/// over as long as they were counted over, after that sender's batch before. Zones not shared
/// here, of another size or seed, or unknown are skipped (counted as ignored), as are records
/// older than `STALE_MS` and records past `MAX_CHARGING` in the queue.
pub(super) fn received(from: &[u8], value: &[u8]) {
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
    let span = u64::from(batch.span_ms).clamp(PERIOD.as_millis() as u64, MAX_SPAN_MS);
    charging(|q| {
        let clock = CLOCK.load(Relaxed);
        let lane = start_of(&mut q.ends, from, clock, span);
        q.tails.retain(|_, end| *end > clock);
        let mut queued: usize = q.batches.iter().map(|c| c.records.len()).sum();
        for counts in batch.zones {
            let known = zone_for(&zones, &counts.name, counts.slots, counts.check).is_some();
            if !known || queued + counts.records.len() > MAX_CHARGING {
                standing::limit_records(0, records(&counts));
                continue;
            }
            standing::limit_records(records(&counts), 0);
            queued += counts.records.len();
            let sender =
                xxhash_rust::xxh3::xxh3_64(&[from, b"\0", counts.name.as_bytes()].concat());
            let records = counts.records.into_iter().map(|tally| {
                let key = (sender, tally.home, tally.fingerprint);
                let periods = u64::from(tally.periods.max(1));
                Part {
                    start: record_start(&mut q.tails, key, lane, span, periods),
                    tally,
                    charged: 0,
                }
            });
            q.batches.push(Charging {
                zone: counts.name,
                slots: counts.slots,
                check: counts.check,
                span,
                records: records.collect(),
            });
        }
    });
}

/// Where on the charging clock a batch from `from` counted over `span` starts (its lane):
/// where that sender's last batch's period ends, but never in the past nor more than a span
/// ahead (a sender whose batches come faster than its spans say, such as a watch replaying
/// several after a reconnect, is charged overlapping, not ever later). Senders whose last
/// batch ended long ago are forgotten.
fn start_of(ends: &mut HashMap<String, u64>, from: &[u8], clock: u64, span: u64) -> u64 {
    let from = String::from_utf8_lossy(from).into_owned();
    let start = ends
        .get(&from)
        .map_or(clock, |&end| end.clamp(clock, clock + span));
    ends.retain(|_, end| *end + STALE_MS > clock);
    ends.insert(from, start + span);
    start
}

/// Where one record of a batch on `lane` starts: on the lane, or where that key's last record
/// ends when that runs past the lane (at most a span later), so a key's records never overlap
/// (a count kept over earlier periods is charged over as many, and the next period's count
/// follows it). A record that runs past its batch's period leaves its end for the key's next.
fn record_start(
    tails: &mut HashMap<KeyOf, u64>,
    key: KeyOf,
    lane: u64,
    span: u64,
    periods: u64,
) -> u64 {
    let start = tails
        .get(&key)
        .map_or(lane, |&end| end.clamp(lane, lane + span));
    let end = start + span * periods;
    if end > lane + span {
        tails.insert(key, end);
    } else {
        tails.remove(&key);
    }
    start
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// This period's counts of every shared zone, taken over `span` (since the last turn), for a
/// fleet of `size` instances. The zones are taken from a varying first one, so a full batch
/// does not always leave out the same zone.
fn collect(zones: &Zones, size: u64, span: Duration) -> Batch {
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
        span_ms: span.as_millis().min(u128::from(u32::MAX)) as u32,
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
    let mut taken = Instant::now();
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
        let batch = collect(&zones, size, taken.elapsed());
        taken = Instant::now();
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
            span_ms: 1_000,
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
    fn one_senders_batches_are_charged_one_after_another() {
        let mut ends = HashMap::new();
        // Two batches from a delivered together: the second starts where the first ends.
        assert_eq!(start_of(&mut ends, b"a", 10_000, 1_000), 10_000);
        assert_eq!(start_of(&mut ends, b"a", 10_000, 1_200), 11_000);
        // Another sender is not held back by a's.
        assert_eq!(start_of(&mut ends, b"b", 10_050, 1_000), 10_050);
        // A third at once from a starts at most a span ahead.
        assert_eq!(start_of(&mut ends, b"a", 10_100, 1_000), 11_100);
        // Once a's last batch has ended, the next starts now.
        assert_eq!(start_of(&mut ends, b"a", 20_000, 1_000), 20_000);
        // b, silent for longer than STALE_MS, was forgotten.
        assert!(!ends.contains_key("b"));
    }

    #[test]
    fn a_keys_records_never_overlap_whatever_the_lane() {
        let mut tails = HashMap::new();
        let (x, y) = ((1, 7, 9), (1, 8, 9));
        // The lane already a span ahead of the clock (the reviewer's case): x's count kept
        // over two periods runs [25 000, 27 000); the next batch's lane starts at 26 000, and
        // x's next record waits for 27 000 while y stays on the lane.
        assert_eq!(record_start(&mut tails, x, 25_000, 1_000, 2), 25_000);
        assert_eq!(record_start(&mut tails, y, 26_000, 1_000, 1), 26_000);
        assert_eq!(record_start(&mut tails, x, 26_000, 1_000, 1), 27_000);
        // x stays a span behind its lane while it keeps coming, then catches up.
        assert_eq!(record_start(&mut tails, x, 27_000, 1_000, 1), 28_000);
        assert_eq!(record_start(&mut tails, x, 28_500, 1_000, 1), 29_000);
        assert_eq!(record_start(&mut tails, x, 30_000, 1_000, 1), 30_000);
        assert!(tails.is_empty());
        // A record far behind is held at most a span after its lane.
        assert_eq!(record_start(&mut tails, x, 40_000, 1_000, 16), 40_000);
        assert_eq!(record_start(&mut tails, x, 41_000, 1_000, 1), 42_000);
    }

    #[test]
    fn counts_records_read_back_and_refuse_what_does_not_fit() {
        let bytes = encode(&batch());
        assert_eq!(decode(&bytes), Ok(batch()));
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode(&[bytes.as_slice(), b"x"].concat()).is_err());
        // The first version's records (no clock, no seed check) are not taken for these.
        assert!(decode(b"slrc1\0\0").is_err());
        assert!(decode(b"slrc2\0\0\0\0\0\0\0\0\0\0").is_err());
        let empty = Batch {
            sent_ms: 0,
            span_ms: 0,
            zones: vec![],
        };
        assert_eq!(decode(&encode(&empty)), Ok(empty));
        // A record count larger than what follows is refused before anything is allocated.
        let mut huge = MAGIC.to_vec();
        huge.extend_from_slice(&0u64.to_le_bytes());
        huge.extend_from_slice(&1_000u32.to_le_bytes());
        huge.extend_from_slice(&1u16.to_le_bytes());
        huge.extend_from_slice(&[1, b'z']);
        huge.extend_from_slice(&0u64.to_le_bytes());
        huge.extend_from_slice(&8u32.to_le_bytes());
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&huge).unwrap_err().contains("do not fit"));
    }
}
