//! Load balancing through real sockets: distribution by weight for each algorithm, consistent
//! hashing, bounded load, passive and active health, retries and their budget, backups, DNS.

use std::collections::HashMap;
use std::io::Read;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use slipstream::observe::metrics::Counter;
use slipstream::Server;

use crate::fleet::{Dns, Killable};
use crate::support::{eventually, free_port, http_client, proxy, temp_path};

/// A one-group config: `servers` are full server lines, `extra` goes in the group.
fn config(servers: &[String], extra: &str, workers: usize) -> String {
    let list: Vec<String> = servers.iter().map(|s| format!("{s:?}")).collect();
    format!(
        r#"
workers = {workers}
[[listen]]
address = "127.0.0.1:0"
[upstreams.app]
servers = [{}]
{extra}
[[sites]]
default = true
routes = [{{ path = "/", upstream = "app" }}]
"#,
        list.join(", ")
    )
}

fn start_all(names: &[&str]) -> Vec<Killable> {
    names
        .iter()
        .map(|n| Killable::start(n, "127.0.0.1:0", Duration::ZERO))
        .collect()
}

fn lines(ups: &[Killable], options: &[&str]) -> Vec<String> {
    ups.iter()
        .zip(options.iter().chain(std::iter::repeat(&"")))
        .map(|(u, o)| format!("{} {o}", u.addr).trim().to_string())
        .collect()
}

/// One GET; the status and body (status 0: the connection failed).
fn get(
    agent: &ureq::Agent,
    proxy: &Server,
    path: &str,
    header: Option<(&str, &str)>,
) -> (u16, String) {
    let url = format!("http://{}{path}", proxy.local_addrs()[0]);
    let mut req = agent.get(&url);
    if let Some((n, v)) = header {
        req = req.header(n, v);
    }
    match req.call() {
        Ok(mut r) => (
            r.status().as_u16(),
            r.body_mut().read_to_string().unwrap_or_default(),
        ),
        Err(_) => (0, String::new()),
    }
}

/// Clients sending GETs in a loop until stopped; counts answers that are not 200.
struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Load {
    fn start(proxy: SocketAddr, clients: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(AtomicUsize::new(0));
        let threads = (0..clients)
            .map(|_| {
                let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
                thread::spawn(move || {
                    let agent = http_client();
                    let url = format!("http://{proxy}/load");
                    while !stop.load(Ordering::SeqCst) {
                        match agent.get(&url).call() {
                            Ok(r) if r.status() == 200 => ok.fetch_add(1, Ordering::SeqCst),
                            _ => failed.fetch_add(1, Ordering::SeqCst),
                        };
                    }
                })
            })
            .collect();
        Load {
            stop,
            ok,
            failed,
            threads,
        }
    }

    fn ok(&self) -> usize {
        self.ok.load(Ordering::SeqCst)
    }

    /// Stops the clients; (answered 200, failed).
    fn finish(self) -> (usize, usize) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads {
            t.join().unwrap();
        }
        (
            self.ok.load(Ordering::SeqCst),
            self.failed.load(Ordering::SeqCst),
        )
    }
}

/// The addresses of the first group in the table the workers balance over now.
fn members(proxy: &Server) -> Vec<String> {
    let table = proxy.fleet().table();
    table.groups[0].iter().map(|m| m.addr.to_string()).collect()
}

/// Whether the table the workers balance over now holds `addr` up.
fn up_in_table(proxy: &Server, addr: SocketAddr) -> bool {
    let table = proxy.fleet().table();
    let addr = addr.to_string();
    table.groups[0]
        .iter()
        .any(|m| m.up && m.addr.to_string() == addr)
}

/// Sends `n` requests from `clients` concurrent clients; counts answers by body.
fn spread(proxy: &Server, clients: usize, n: usize) -> HashMap<String, usize> {
    let counts = Arc::new(std::sync::Mutex::new(HashMap::new()));
    let addr = proxy.local_addrs()[0];
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let counts = counts.clone();
            thread::spawn(move || {
                let agent = http_client();
                for _ in 0..n / clients {
                    let mut r = agent.get(&format!("http://{addr}/")).call().unwrap();
                    assert_eq!(r.status(), 200);
                    let body = r.body_mut().read_to_string().unwrap();
                    *counts.lock().unwrap().entry(body).or_insert(0) += 1;
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    Arc::try_unwrap(counts).unwrap().into_inner().unwrap()
}

/// Weights 1:2:3 give shares of 1/6, 2/6, 3/6, held within 2 points. Round robin holds them
/// at any concurrency. Least connections and P2C hold them while servers are equally loaded
/// (requests one at a time); when load differs they follow it, which is their purpose (see
/// `p2c_avoids_a_slow_server`). P2C also weighs latency: a stall on this busy test machine
/// makes a server look slow and passes it over until its probe, 100 ms later, which can move
/// a share by several points: with CI's 340 tests in parallel one run moved c's by 5.7. So
/// P2C is held within 10 points, still well short of the 16.7 an even split would be off by,
/// and its shares must keep the weights' order. The exact split between equally fast servers
/// is checked on virtual time, without the machine's noise
/// (`upstream::balance::tests::p2c_follows_the_weights_of_equally_fast_servers`).
#[test]
fn distribution_follows_weights_for_each_algorithm() {
    let ups = start_all(&["a", "b", "c"]);
    let servers = lines(&ups, &["weight=1", "weight=2", "weight=3"]);
    let cases = [
        ("round_robin", 4, 0.02),
        ("least_conn", 1, 0.02),
        ("p2c", 1, 0.10),
    ];
    for (balance, clients, tolerance) in cases {
        let proxy = proxy(&config(&servers, &format!("balance = {balance:?}"), 1));
        let counts = spread(&proxy, clients, 1200);
        let total: usize = counts.values().sum();
        for (name, want) in [("a", 1.0 / 6.0), ("b", 2.0 / 6.0), ("c", 3.0 / 6.0)] {
            let share = counts.get(name).copied().unwrap_or(0) as f64 / total as f64;
            assert!(
                (share - want).abs() <= tolerance,
                "{balance}: {name} got {share:.3}, want {want:.3}: {counts:?}"
            );
        }
        let share = |name: &str| counts.get(name).copied().unwrap_or(0);
        assert!(
            share("a") < share("b") && share("b") < share("c"),
            "{balance}: shares out of the weights' order: {counts:?}"
        );
        proxy.shutdown();
    }
}

/// Consistent hashing spreads distinct keys by weight: 1:2:3 within 6 points over 6000 keys.
/// The ring's own placement (160 points per weight) varies a share by about 1.6 points from
/// run to run (its addresses change), the sampling of keys by 0.6: 6 points is over 3.5 sigma.
#[test]
fn hashing_spreads_keys_by_weight() {
    let ups = start_all(&["a", "b", "c"]);
    let servers = lines(&ups, &["weight=1", "weight=2", "weight=3"]);
    let proxy = proxy(&config(
        &servers,
        "balance = \"hash\"\nhash_key = \"header:X-User\"",
        1,
    ));
    let agent = http_client();
    let mut counts: HashMap<String, usize> = HashMap::new();
    for k in 0..6000 {
        let (_, name) = get(&agent, &proxy, "/", Some(("X-User", &format!("user-{k}"))));
        *counts.entry(name).or_insert(0) += 1;
    }
    for (name, want) in [("a", 1.0 / 6.0), ("b", 2.0 / 6.0), ("c", 3.0 / 6.0)] {
        let share = counts.get(name).copied().unwrap_or(0) as f64 / 6000.0;
        assert!(
            (share - want).abs() <= 0.06,
            "{name}: {share:.3}: {counts:?}"
        );
    }
    proxy.shutdown();
}

/// The default (P2C over latency and in-flight load) sends almost nothing to a server that
/// answers 50 ms late, where round robin sends it a quarter.
#[test]
fn p2c_avoids_a_slow_server() {
    let mut ups = start_all(&["a", "b", "c"]);
    ups.push(Killable::start(
        "slow",
        "127.0.0.1:0",
        Duration::from_millis(50),
    ));
    let proxy = proxy(&config(&lines(&ups, &[]), "", 1));
    let counts = spread(&proxy, 4, 800);
    let slow = counts.get("slow").copied().unwrap_or(0);
    assert!(slow <= 16, "{counts:?}");
    proxy.shutdown();
}

/// Two workers each balance on their own; the process-wide split still follows the weights
/// (within 5 points over 400 requests on fresh connections, which land on either worker).
/// P2C weighs latency as well as weight, so a busy test machine that slows one server moves
/// its share; there the split must lean the weights' way (b well above half) and leave the
/// lighter server a share (a at least 5%), without an exact figure.
#[test]
fn two_workers_together_follow_the_weights() {
    let ups = start_all(&["a", "b"]);
    let servers = lines(&ups, &["weight=1", "weight=3"]);
    for balance in ["round_robin", "least_conn", "p2c"] {
        let proxy = proxy(&config(&servers, &format!("balance = {balance:?}"), 2));
        let addr = proxy.local_addrs()[0];
        let mut counts: HashMap<String, usize> = HashMap::new();
        for _ in 0..400 {
            let raw = crate::support::exchange_until_close(
                addr,
                b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            );
            let body = String::from_utf8_lossy(&raw);
            let name = body.rsplit("\r\n\r\n").next().unwrap().to_string();
            *counts.entry(name).or_insert(0) += 1;
        }
        let b = counts.get("b").copied().unwrap_or(0) as f64 / 400.0;
        let follows = if balance == "p2c" {
            (0.6..=0.95).contains(&b)
        } else {
            (b - 0.75).abs() <= 0.05
        };
        assert!(follows, "{balance}: {counts:?}");
        proxy.shutdown();
    }
}

/// A server back from an ejection with `slow_start` gets a small share at first, where
/// without it it would get half at once.
#[test]
fn slow_start_ramps_a_recovered_server() {
    let mut ups = start_all(&["a", "b"]);
    let extra = "balance = \"round_robin\"\nfail_timeout = \"200ms\"\nslow_start = \"60s\"";
    let proxy = proxy(&config(&lines(&ups, &[]), extra, 1));
    let agent = http_client();
    ups[1].kill();
    for _ in 0..10 {
        assert_eq!(get(&agent, &proxy, "/", None).0, 200);
    }
    ups[1].revive();
    // Its trial request brings it back, at the start of its ramp.
    assert!(eventually(|| get(&agent, &proxy, "/", None).1 == "b"));
    let counts = spread(&proxy, 1, 200);
    let b = counts.get("b").copied().unwrap_or(0);
    assert!(b <= 10, "{counts:?}");
    proxy.shutdown();
}

/// Adding a fifth server to four moves about a fifth of the keys, all of them to the new one.
#[test]
fn consistent_hashing_moves_one_share_when_a_server_is_added() {
    let ups = start_all(&["a", "b", "c", "d", "e"]);
    let all = lines(&ups, &[]);
    let hash = "balance = \"hash\"\nhash_key = \"header:X-User\"";
    let four = proxy(&config(&all[..4], hash, 1));
    let five = proxy(&config(&all, hash, 1));
    let agent = http_client();
    let keys = 500;
    let (mut moved, mut on_new) = (0, 0);
    for k in 0..keys {
        let user = format!("user-{k}");
        let (_, before) = get(&agent, &four, "/", Some(("X-User", &user)));
        let (_, again) = get(&agent, &four, "/", Some(("X-User", &user)));
        assert_eq!(before, again, "a key must stick to its server");
        let (_, after) = get(&agent, &five, "/", Some(("X-User", &user)));
        if before != after {
            moved += 1;
            assert_eq!(after, "e", "a key moved between old servers");
        }
        if after == "e" {
            on_new += 1;
        }
    }
    // Only the new server's keys moved. Its share depends on where its (random) port puts its
    // points: 0.124-0.282 over 2,000 simulated port sets, so the bounds here are loose; the
    // ring's spread is pinned exactly by its unit test on fixed addresses.
    assert_eq!(
        moved, on_new,
        "every key on the new server came from an old one"
    );
    let share = f64::from(moved) / f64::from(keys);
    assert!((0.08..=0.35).contains(&share), "moved {share}");
}

/// A hot key held open on its server spills over once that server carries its bounded share
/// (1.25 x the average); the spill goes elsewhere, and the key comes home afterwards.
#[test]
fn bounded_load_caps_a_hot_key() {
    let ups: Vec<Killable> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| Killable::start(n, "127.0.0.1:0", Duration::from_millis(300)))
        .collect();
    let hash = "balance = \"hash\"\nhash_key = \"uri\"";
    let proxy = proxy(&config(&lines(&ups, &[]), hash, 1));
    let addr = proxy.local_addrs()[0];
    let (_, home) = get(&http_client(), &proxy, "/hot", None);
    let threads: Vec<_> = (0..16)
        .map(|_| {
            thread::spawn(move || {
                let mut r = http_client()
                    .get(&format!("http://{addr}/hot"))
                    .call()
                    .unwrap();
                r.body_mut().read_to_string().unwrap()
            })
        })
        .collect();
    let mut counts: HashMap<String, usize> = HashMap::new();
    for t in threads {
        *counts.entry(t.join().unwrap()).or_insert(0) += 1;
    }
    // 16 at once over 4 servers: the home server takes at most ceil(1.25 x 16 / 4) = 5, give
    // or take the requests that finished before the last ones started.
    assert!(counts[&home] <= 6, "{counts:?}");
    assert!(counts.len() >= 3, "{counts:?}");
    let (_, alone) = get(&http_client(), &proxy, "/hot", None);
    assert_eq!(alone, home);
}

/// The kill test: under load, one of two servers is killed; it is ejected passively and no
/// client sees an error, as every request caught on it is retried on the other.
#[test]
fn killed_server_is_ejected_without_client_errors() {
    let ups = start_all(&["a", "b"]);
    let proxy = proxy(&config(&lines(&ups, &[]), "", 2));
    let load = Load::start(proxy.local_addrs()[0], 8);
    assert!(eventually(|| load.ok() > 500));
    ups[1].kill();
    let served_at_kill = ups[1].served();
    let before = load.ok();
    assert!(eventually(|| load.ok() > before + 2000));
    let (ok, failed) = load.finish();
    assert_eq!(failed, 0, "{failed} failed of {}", ok + failed);
    assert_eq!(ups[1].served(), served_at_kill);
    assert!(proxy.metrics().total(Counter::UpstreamEjections) >= 1);
    proxy.shutdown();
}

/// A server that failed gets one trial request after `fail_timeout`, then its share again.
#[test]
fn recovered_server_gets_traffic_again() {
    let mut ups = start_all(&["a", "b"]);
    let extra = "balance = \"round_robin\"\nfail_timeout = \"300ms\"";
    let proxy = proxy(&config(&lines(&ups, &[]), extra, 1));
    let agent = http_client();
    ups[1].kill();
    for _ in 0..20 {
        assert_eq!(get(&agent, &proxy, "/", None), (200, "a".into()));
    }
    ups[1].revive();
    assert!(eventually(|| get(&agent, &proxy, "/", None).1 == "b"));
    let counts = spread(&proxy, 1, 100);
    assert_eq!(counts.get("b"), Some(&50), "{counts:?}");
    proxy.shutdown();
}

/// A failing health endpoint takes a server out within interval x fall, with no client error;
/// passing checks (rise) bring it back.
#[test]
fn active_health_check_ejects_and_restores() {
    let ups = start_all(&["a", "b"]);
    let extra = "[upstreams.app.health]\npath = \"/health\"\ninterval = \"100ms\"\ntimeout = \"1s\"\nrise = 2\nfall = 2";
    let proxy = proxy(&config(&lines(&ups, &[]), extra, 2));
    let load = Load::start(proxy.local_addrs()[0], 4);
    assert!(eventually(|| ups[1].served() > 50));
    ups[1].set_health(503);
    // Within about fall x interval the checks take it down; from then on the workers send it
    // no new request: only those already on their way (one per client at most) reach it.
    assert!(eventually(|| !up_in_table(&proxy, ups[1].addr)));
    let served = ups[1].served();
    let before = load.ok();
    assert!(eventually(|| load.ok() > before + 300));
    assert!(
        ups[1].served() <= served + 4,
        "a server marked down got new requests: {} after {served}",
        ups[1].served()
    );
    ups[1].set_health(200);
    assert!(eventually(|| ups[1].served() > served + 50));
    let (_, failed) = load.finish();
    assert_eq!(failed, 0);
    // The checks go on, and hold both up.
    let checks = || proxy.fleet().checks.lock().unwrap().clone();
    assert!(
        eventually(|| checks().values().all(|c| c.up && c.checks > 5)),
        "{:?}",
        checks()
    );
    proxy.shutdown();
}

/// Servers can start down until their checks pass.
#[test]
fn servers_may_start_down_until_checked() {
    let ups = start_all(&["a"]);
    ups[0].set_health(500);
    let extra = "[upstreams.app.health]\npath = \"/health\"\ninterval = \"50ms\"\nrise = 1\nstart_down = true";
    let proxy = proxy(&config(&lines(&ups, &[]), extra, 1));
    let agent = http_client();
    assert_eq!(get(&agent, &proxy, "/", None).0, 503);
    ups[0].set_health(200);
    assert!(eventually(|| get(&agent, &proxy, "/", None).0 == 200));
    proxy.shutdown();
}

/// A POST whose body reached a server that then failed is not sent again; a POST that could
/// not connect anywhere is, as nothing was sent.
#[test]
fn a_sent_post_is_not_retried() {
    let dead = "127.0.0.1:1".to_string(); // nothing listens on port 1
    let closer = crate::support::Upstream::start(|_| crate::support::Reply::Close);
    let good = start_all(&["good"]);
    let servers = vec![closer.addr.to_string(), good[0].addr.to_string()];
    let proxy = proxy(&config(&servers, "balance = \"round_robin\"", 1));
    let url = format!("http://{}/form", proxy.local_addrs()[0]);
    let agent = http_client();
    // Round robin starts with the closer: the POST reaches it, then the connection drops.
    let r = agent.post(&url).send("field=1").unwrap();
    assert_eq!(r.status(), 502);
    assert_eq!(closer.seen().len(), 1);
    assert_eq!(good[0].other_methods(), 0, "the POST was sent twice");

    let proxy = crate::support::proxy(&config(
        &[dead, good[0].addr.to_string()],
        "balance = \"round_robin\"",
        1,
    ));
    let url = format!("http://{}/form", proxy.local_addrs()[0]);
    let mut r = agent.post(&url).send("field=1").unwrap();
    assert_eq!(
        (r.status().as_u16(), r.body_mut().read_to_string().unwrap()),
        (200, "good".into())
    );
    assert_eq!(good[0].other_methods(), 1);
}

/// When every server fails, retries stay within the budget: 20% of requests plus 10.
#[test]
fn retry_budget_caps_retries_when_every_server_fails() {
    let closers: Vec<crate::support::Upstream> = (0..3)
        .map(|_| crate::support::Upstream::start(|_| crate::support::Reply::Close))
        .collect();
    let servers: Vec<String> = closers.iter().map(|u| u.addr.to_string()).collect();
    // max_fails = 0: no ejection, so every request meets failing servers.
    let proxy = proxy(&config(&servers, "max_fails = 0", 1));
    let agent = http_client();
    let requests = 200;
    for _ in 0..requests {
        assert_eq!(get(&agent, &proxy, "/", None).0, 502);
    }
    let retries = proxy.metrics().total(Counter::UpstreamRetries);
    let refused = proxy.metrics().total(Counter::UpstreamRetryBudgetExhausted);
    let sent: usize = closers.iter().map(|u| u.seen().len()).sum();
    assert!(retries <= 10 + requests / 5, "{retries} retries");
    assert!(retries >= 10, "{retries} retries");
    assert!(refused > 0);
    assert_eq!(
        sent as u64,
        requests + retries,
        "each try reached a server once"
    );
}

/// Backups take no traffic while a primary is available, and all of it when none is.
#[test]
fn backup_takes_over_only_when_all_primaries_are_down() {
    let ups = start_all(&["a", "b", "backup"]);
    let proxy = proxy(&config(&lines(&ups, &["", "", "backup"]), "", 1));
    let counts = spread(&proxy, 2, 200);
    assert!(!counts.contains_key("backup"), "{counts:?}");
    ups[0].kill();
    let counts = spread(&proxy, 2, 200);
    assert_eq!(counts.get("b"), Some(&200), "{counts:?}");
    ups[1].kill();
    let counts = spread(&proxy, 2, 200);
    assert_eq!(counts.get("backup"), Some(&200), "{counts:?}");
    proxy.shutdown();
}

/// A changed DNS answer adds a server and drains a removed one, without a restart.
#[test]
fn dns_changes_add_and_drain_servers() {
    let port = free_port();
    let a = Killable::start("a", &format!("127.0.0.2:{port}"), Duration::ZERO);
    let b = Killable::start("b", &format!("127.0.0.3:{port}"), Duration::ZERO);
    let dns = Dns::start(&[[127, 0, 0, 2]]);
    let text = config(
        &[format!("svc.test:{port}")],
        "resolve_interval = \"100ms\"\nbalance = \"round_robin\"",
        1,
    );
    let text = format!("resolver = [\"{}\"]\n{text}", dns.addr);
    let proxy = proxy(&text);
    let counts = spread(&proxy, 1, 20);
    assert_eq!(counts.get("a"), Some(&20), "{counts:?}");
    dns.set(&[[127, 0, 0, 2], [127, 0, 0, 3]]);
    assert!(eventually(|| spread(&proxy, 1, 10).contains_key("b")));
    dns.set(&[[127, 0, 0, 3]]);
    // Once the new answer is published, the next requests go to b only.
    assert!(eventually(|| members(&proxy) == [b.addr.to_string()]));
    let served = a.served();
    let counts = spread(&proxy, 1, 20);
    assert_eq!(counts.get("b"), Some(&20), "{counts:?}");
    assert_eq!(a.served(), served);
    drop(b);
    proxy.shutdown();
}

/// `/metrics` shows each server's state, requests and failures by kind; the access log lists
/// every server a request tried.
#[test]
fn per_server_metrics_and_tried_servers_in_the_log() {
    let dead = "127.0.0.1:1".to_string(); // nothing listens on port 1
    let good = start_all(&["good"]);
    let log = temp_path("balancing-access.log");
    let _ = std::fs::remove_file(&log); // left by an earlier run whose process id this one has
    let text = config(
        &[dead.clone(), good[0].addr.to_string()],
        "balance = \"round_robin\"",
        1,
    );
    let text = format!(
        "access_log = {:?}\naccess_log_format = \"$status $upstream_addr\"\nadmin = \"127.0.0.1:0\"\n{text}",
        log.display().to_string()
    );
    let proxy = proxy(&text);
    let agent = http_client();
    assert_eq!(get(&agent, &proxy, "/", None), (200, "good".into()));
    let admin = proxy.admin_addr().unwrap();
    let mut metrics = String::new();
    agent
        .get(&format!("http://{admin}/metrics"))
        .call()
        .unwrap()
        .body_mut()
        .as_reader()
        .read_to_string(&mut metrics)
        .unwrap();
    let labels = format!("group=\"app\",server=\"{dead}\"");
    for line in [
        format!("slipstream_upstream_server_state{{{labels},state=\"ejected\"}} 1"),
        format!("slipstream_upstream_server_failures_total{{{labels},kind=\"refused\"}} 1"),
        format!("slipstream_upstream_server_requests_total{{{labels}}} 1"),
        format!(
            "slipstream_upstream_server_state{{group=\"app\",server=\"{}\",state=\"up\"}} 1",
            good[0].addr
        ),
    ] {
        assert!(metrics.contains(&line), "{line} missing from\n{metrics}");
    }
    proxy.shutdown();
    let written = std::fs::read_to_string(&log).unwrap();
    assert_eq!(written, format!("200 {dead}, {}\n", good[0].addr));
}

/// Active health survives a reload: a server the checks hold down stays down under the new
/// config until it has passed `rise` checks, instead of starting up again.
#[test]
fn health_survives_a_reload() {
    let ups = start_all(&["a", "b"]);
    ups[1].set_health(500);
    let health = |timeout: &str| {
        format!("[upstreams.app.health]\npath = \"/health\"\ninterval = \"1s\"\ntimeout = \"{timeout}\"\nrise = 5\nfall = 1")
    };
    let proxy = proxy(&config(&lines(&ups, &[]), &health("900ms"), 1));
    let down = |proxy: &Server| {
        let checks = proxy.fleet().checks.lock().unwrap().clone();
        checks
            .iter()
            .any(|((_, addr), c)| addr.tcp() == Some(ups[1].addr) && !c.up)
    };
    assert!(eventually(|| down(&proxy)));
    ups[1].set_health(200);
    let text = config(&lines(&ups, &[]), &health("800ms"), 1);
    proxy
        .reload(slipstream::config::Config::parse(&text, "reload.toml").unwrap())
        .unwrap();
    let counts = spread(&proxy, 1, 50);
    assert_eq!(counts.get("a"), Some(&50), "{counts:?}");
    proxy.shutdown();
}
