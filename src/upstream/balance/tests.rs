//! The algorithms on one worker's state, without sockets (the integration tests drive them
//! through real ones).

use std::collections::HashMap;
use std::time::Duration;

use super::*;
use crate::config::{HashKey, ServerSpec};
use crate::net::Address;

fn local(port: u16) -> Address {
    Address::Tcp(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
}

fn member(port: u16, weight: u32) -> Member {
    Member {
        addr: local(port),
        weight,
        backup: false,
        slow_start: Duration::ZERO,
        up: true,
    }
}

fn group(balance: Balance) -> UpstreamGroup {
    let mut g = UpstreamGroup::new("g", Vec::<ServerSpec>::new());
    g.balance = balance;
    g
}

fn balancer(balance: Balance, members: &[Member]) -> Balancer {
    Balancer::new(&group(balance), 0, members, &StatsRegistry::default())
}

/// Picks `n` times, finishing each request at once; counts per port.
fn spread(b: &Balancer, n: usize) -> HashMap<u16, usize> {
    let mut counts = HashMap::new();
    for _ in 0..n {
        let lease = b.pick(None, &[]).unwrap();
        *counts
            .entry(lease.addr().tcp().unwrap().port())
            .or_default() += 1;
        lease.succeeded();
    }
    counts
}

#[test]
fn smooth_round_robin_follows_weights_without_runs() {
    let b = balancer(
        Balance::RoundRobin,
        &[member(1, 5), member(2, 1), member(3, 1)],
    );
    let order: Vec<u16> = (0..7)
        .map(|_| {
            let l = b.pick(None, &[]).unwrap();
            let port = l.addr().tcp().unwrap().port();
            l.succeeded();
            port
        })
        .collect();
    assert_eq!(order, [1, 1, 2, 1, 3, 1, 1]);
    let counts = spread(&b, 7000);
    assert_eq!((counts[&1], counts[&2], counts[&3]), (5000, 1000, 1000));
}

#[test]
fn least_conn_prefers_the_idle_server_per_weight() {
    let b = balancer(Balance::LeastConn, &[member(1, 1), member(2, 2)]);
    // Hold requests open: the weight-2 server takes two for each one of the other.
    let held: Vec<Lease> = (0..30).map(|_| b.pick(None, &[]).unwrap()).collect();
    let on2 = held
        .iter()
        .filter(|l| l.addr().tcp().unwrap().port() == 2)
        .count();
    assert_eq!(on2, 20);
}

#[test]
fn p2c_avoids_a_slow_server() {
    let members: Vec<Member> = (1..=4).map(|p| member(p, 1)).collect();
    let b = balancer(Balance::P2c, &members);
    let mut counts: HashMap<u16, usize> = HashMap::new();
    for _ in 0..4000 {
        let l = b.pick(None, &[]).unwrap();
        let port = l.addr().tcp().unwrap().port();
        let ms = if port == 4 { 50 } else { 1 };
        l.observe_latency(Duration::from_millis(ms));
        *counts.entry(port).or_default() += 1;
        l.succeeded();
    }
    // The slow server is only chosen when both random picks... cannot both be it.
    assert!(counts.get(&4).copied().unwrap_or(0) < 20, "{counts:?}");
}

/// One P2C request at virtual time: picks, answers in `took(port)`, then lets 200 µs pass.
async fn p2c_step(b: &Balancer, took: impl Fn(u16) -> Duration) -> u16 {
    let l = b.pick(None, &[]).unwrap();
    let port = l.addr().tcp().unwrap().port();
    l.observe_latency(took(port));
    l.succeeded();
    tokio::time::advance(Duration::from_micros(200)).await;
    port
}

fn shares(ports: &[u16]) -> [f64; 3] {
    let n = ports.len() as f64;
    [1, 2, 3].map(|p| ports.iter().filter(|&&q| q == p).count() as f64 / n)
}

#[tokio::test(start_paused = true)]
async fn p2c_follows_the_weights_of_equally_fast_servers() {
    let b = balancer(Balance::P2c, &[member(1, 1), member(2, 2), member(3, 3)]);
    let mut ports = Vec::new();
    for _ in 0..3000 {
        ports.push(p2c_step(&b, |_| Duration::from_micros(100)).await);
    }
    let [a, b2, c] = shares(&ports);
    assert!((a - 1.0 / 6.0).abs() < 0.01, "{a} {b2} {c}");
    assert!((b2 - 2.0 / 6.0).abs() < 0.01, "{a} {b2} {c}");
    assert!((c - 3.0 / 6.0).abs() < 0.01, "{a} {b2} {c}");
}

/// A stall of a few requests makes a fast server look slow; passed over, it gets no new
/// samples, so only a probe brings it back: within a few hundred milliseconds, not the
/// seconds the average takes to fade.
#[tokio::test(start_paused = true)]
async fn p2c_probes_a_server_passed_over_after_a_stall() {
    let b = balancer(Balance::P2c, &[member(1, 1), member(2, 2), member(3, 3)]);
    let fast = |_| Duration::from_micros(100);
    for _ in 0..500 {
        p2c_step(&b, fast).await;
    }
    let mut stalled = 0;
    while stalled < 4 {
        let port = p2c_step(&b, |p| Duration::from_millis(if p == 3 { 20 } else { 0 })).await;
        stalled += usize::from(port == 3);
    }
    // Right after the stall the server is passed over...
    let mut after = Vec::new();
    for _ in 0..100 {
        after.push(p2c_step(&b, fast).await);
    }
    assert!(shares(&after)[2] < 0.1, "{:?}", shares(&after));
    // ...and from 200 ms on it has its share back.
    for _ in 0..1000 {
        p2c_step(&b, fast).await;
    }
    let mut later = Vec::new();
    for _ in 0..3000 {
        later.push(p2c_step(&b, fast).await);
    }
    let c = shares(&later)[2];
    assert!((c - 0.5).abs() < 0.02, "{:?}", shares(&later));
}

/// A server that really is slow gets one probe per 20 times its
/// latency (a second at 50 ms), not a share.
#[tokio::test(start_paused = true)]
async fn p2c_probes_a_slow_server_rarely() {
    let members: Vec<Member> = (1..=4).map(|p| member(p, 1)).collect();
    let b = balancer(Balance::P2c, &members);
    let took = |p| Duration::from_millis(if p == 4 { 50 } else { 1 });
    for _ in 0..5000 {
        p2c_step(&b, took).await; // 1 s of virtual time: it learns the slow one
    }
    let mut ports = Vec::new();
    for _ in 0..25_000 {
        ports.push(p2c_step(&b, took).await); // 5 s
    }
    let slow = ports.iter().filter(|&&p| p == 4).count();
    assert!((3..=7).contains(&slow), "{slow} requests in 5 s");
}

/// A server that hangs (its requests never answer) is passed over for its requests in flight
/// and gets no probes: those requests will bring a sample when they end.
#[tokio::test(start_paused = true)]
async fn p2c_does_not_probe_a_server_with_requests_in_flight() {
    let b = balancer(Balance::P2c, &[member(1, 1), member(2, 1)]);
    for _ in 0..500 {
        p2c_step(&b, |_| Duration::from_micros(100)).await;
    }
    let mut hung = Vec::new();
    for _ in 0..5000 {
        let l = b.pick(None, &[]).unwrap();
        if l.addr().tcp().unwrap().port() == 2 {
            hung.push(l); // 1 s of virtual time
        } else {
            l.observe_latency(Duration::from_micros(100));
            l.succeeded();
        }
        tokio::time::advance(Duration::from_micros(200)).await;
    }
    assert!(
        hung.len() <= 16,
        "{} requests sent to a server that hangs",
        hung.len()
    );
}

#[test]
fn hashing_is_sticky_and_load_is_bounded() {
    let members: Vec<Member> = (1..=4).map(|p| member(p, 1)).collect();
    let b = balancer(Balance::Hash(HashKey::Uri), &members);
    let key = crate::upstream::ring::hash_key(b"/hot");
    let first = b.pick(Some(key), &[]).unwrap();
    let home = first.addr().clone();
    first.succeeded();
    for _ in 0..10 {
        let l = b.pick(Some(key), &[]).unwrap();
        assert_eq!(*l.addr(), home);
        l.succeeded();
    }
    // Held open, one key cannot pile more than its bounded share on its home server.
    let held: Vec<Lease> = (0..40).map(|_| b.pick(Some(key), &[]).unwrap()).collect();
    let at_home = held.iter().filter(|l| *l.addr() == home).count();
    assert!(at_home <= 13, "{at_home} of 40 on one server");
    assert!(at_home >= 10);
}

#[tokio::test(start_paused = true)]
async fn refused_ejects_at_once_then_one_trial() {
    let mut g = group(Balance::RoundRobin);
    g.fail_timeout = Duration::from_millis(50);
    let b = Balancer::new(
        &g,
        0,
        &[member(1, 1), member(2, 1)],
        &StatsRegistry::default(),
    );
    let bad = local(1);
    loop {
        let l = b.pick(None, &[]).unwrap();
        if *l.addr() == bad {
            assert!(l.failed(Kind::ConnectRefused));
            break;
        }
        l.succeeded();
    }
    assert!(!spread(&b, 10).contains_key(&1), "ejected server picked");
    tokio::time::advance(Duration::from_millis(60)).await;
    // One trial request goes to it; while it is out, nothing else does.
    let held: Vec<Lease> = (0..6).map(|_| b.pick(None, &[]).unwrap()).collect();
    let trials: Vec<&Lease> = held.iter().filter(|l| *l.addr() == bad).collect();
    assert_eq!(trials.len(), 1);
    for l in held {
        l.succeeded();
    }
    assert_eq!(
        spread(&b, 10)[&1],
        5,
        "a server back after its trial gets its share"
    );
}

#[test]
fn failures_eject_after_max_fails_within_the_window() {
    let b = balancer(Balance::RoundRobin, &[member(1, 1)]);
    let addr = local(1);
    for i in 0..3 {
        let l = b.pick(None, &[]).unwrap();
        assert_eq!(l.failed(Kind::UpstreamClosed), i == 2);
    }
    // Every server ejected: the balancer still tries one rather than fail for certain.
    assert_eq!(*b.pick(None, &[]).unwrap().addr(), addr);
    assert!(
        b.pick(None, &[addr]).is_none(),
        "excluded servers are never picked"
    );
}

#[test]
fn backups_only_when_every_primary_is_down() {
    let mut backup = member(3, 1);
    backup.backup = true;
    let mut members = vec![member(1, 1), member(2, 1), backup];
    let stats = StatsRegistry::default();
    let b = Balancer::new(&group(Balance::RoundRobin), 0, &members, &stats);
    assert!(!spread(&b, 100).contains_key(&3));
    members[0].up = false;
    b.sync(&members, &stats, true);
    assert_eq!(spread(&b, 100)[&2], 100);
    members[1].up = false;
    b.sync(&members, &stats, true);
    assert_eq!(spread(&b, 100)[&3], 100);
    members[2].up = false;
    b.sync(&members, &stats, true);
    assert!(b.pick(None, &[]).is_none(), "all down: no server");
}

#[test]
fn slow_start_ramps_a_recovered_server() {
    let mut m = member(2, 1);
    m.slow_start = Duration::from_secs(3600);
    let stats = StatsRegistry::default();
    let b = Balancer::new(&group(Balance::RoundRobin), 0, &[member(1, 1)], &stats);
    b.sync(&[member(1, 1), m], &stats, true);
    // At the start of its ramp a server gets the floor weight, 1% of its full weight.
    let counts = spread(&b, 1000);
    assert!(counts.get(&2).copied().unwrap_or(0) <= 12, "{counts:?}");
}

#[test]
fn retry_budget_is_a_fraction_of_requests_plus_a_floor() {
    let budget = RetryBudget::new(0.2);
    let now = Instant::now();
    for _ in 0..100 {
        budget.note_request(now);
    }
    let allowed = (0..100).filter(|_| budget.try_spend(now)).count();
    assert_eq!(allowed, 30);
    // Two windows later, the history is gone but the floor remains.
    let later = now + 2 * BUDGET_WINDOW;
    assert_eq!((0..100).filter(|_| budget.try_spend(later)).count(), 10);
}
