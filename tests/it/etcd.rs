//! The fleet tests' harness: an etcd cluster of real members on loopback (started, killed,
//! restarted on their data directories, spoken to through the JSON gateway), a fleet's own
//! files and pushes through `slipstream config push`, and wrk's load and its report.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{free_port, http_client, temp_path, Running, BIN};

/// An etcd cluster of members on loopback, each with its own data directory.
pub(crate) struct Etcd {
    members: Vec<EtcdMember>,
    token: String,
    /// Client TLS flags for every member (`--cert-file ...`), with `https` client URLs.
    tls: Vec<String>,
}

struct EtcdMember {
    name: String,
    client: u16,
    peer: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Etcd {
    /// `n` members, started and answering.
    pub(crate) fn start(n: usize) -> Etcd {
        Etcd::start_with(n, Vec::new())
    }

    /// `n` members serving clients over TLS with `tls` flags (not waited for: the test's own
    /// client speaks plain HTTP).
    pub(crate) fn start_with(n: usize, tls: Vec<String>) -> Etcd {
        let token = format!("it-{}-{}", std::process::id(), free_port());
        let members = (0..n)
            .map(|i| EtcdMember {
                name: format!("m{i}"),
                client: free_port(),
                peer: free_port(),
                dir: temp_path(&format!("etcd-{token}-{i}")),
                child: None,
            })
            .collect();
        let mut etcd = Etcd {
            members,
            token,
            tls,
        };
        for i in 0..n {
            etcd.run(i, "new");
        }
        if etcd.tls.is_empty() {
            for i in 0..n {
                etcd.wait_healthy(i);
            }
        }
        etcd
    }

    pub(crate) fn run(&mut self, i: usize, state: &str) {
        let cluster: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect();
        let m = &mut self.members[i];
        let scheme = if self.tls.is_empty() { "http" } else { "https" };
        let client = format!("{scheme}://127.0.0.1:{}", m.client);
        let peer = format!("http://127.0.0.1:{}", m.peer);
        let child = Command::new("etcd")
            .args(["--name", &m.name, "--data-dir", m.dir.to_str().unwrap()])
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &cluster.join(",")])
            .args(["--initial-cluster-token", &self.token])
            .args(["--initial-cluster-state", state])
            .args(&self.tls)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd is not installed (apt-get install etcd-server; .ci/test-tools does)");
        m.child = Some(child);
    }

    /// Member `i` answers /health with a leader.
    pub(crate) fn wait_healthy(&self, i: usize) {
        let url = format!("{}/health", self.url(i));
        let healthy = (0..200).any(|_| {
            let ok = http_client()
                .get(&url)
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_to_string().ok())
                .is_some_and(|b| b.contains("\"health\":\"true\""));
            if !ok {
                std::thread::sleep(Duration::from_millis(100));
            }
            ok
        });
        assert!(healthy, "etcd member {i} did not become healthy");
    }

    /// SIGKILLs member `i`.
    pub(crate) fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts member `i` again on its data directory.
    pub(crate) fn restart(&mut self, i: usize) {
        self.run(i, "existing");
    }

    pub(crate) fn url(&self, i: usize) -> String {
        let scheme = if self.tls.is_empty() { "http" } else { "https" };
        format!("{scheme}://127.0.0.1:{}", self.members[i].client)
    }

    /// The `etcd = [...]` value naming the members `which`.
    pub(crate) fn endpoints(&self, which: &[usize]) -> String {
        let urls: Vec<String> = which
            .iter()
            .map(|i| format!("\"{}\"", self.url(*i)))
            .collect();
        format!("[{}]", urls.join(", "))
    }

    /// A JSON call to member `i`'s gateway.
    pub(crate) fn call(&self, i: usize, path: &str, body: &str) -> serde_json::Value {
        let mut r = http_client()
            .post(&format!("{}{path}", self.url(i)))
            .send(body)
            .unwrap();
        serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap()
    }

    /// Writes `value` under `key` without any validation (as a careless tool would).
    pub(crate) fn put_raw(&self, i: usize, key: &str, value: &str) {
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let body = format!("{{\"key\":\"{}\",\"value\":\"{}\"}}", b64(key), b64(value));
        self.call(i, "/v3/kv/put", &body);
    }

    /// The value under `key`, if any.
    pub(crate) fn get(&self, i: usize, key: &str) -> Option<String> {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD;
        let body = format!("{{\"key\":\"{}\"}}", b64.encode(key));
        let answer = self.call(i, "/v3/kv/range", &body);
        let value = answer["kvs"].as_array()?.first()?["value"]
            .as_str()?
            .to_string();
        Some(String::from_utf8(b64.decode(value).unwrap()).unwrap())
    }

    /// How many keys start with `prefix`.
    pub(crate) fn count(&self, i: usize, prefix: &str) -> usize {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut end = prefix.as_bytes().to_vec();
        *end.last_mut().unwrap() += 1;
        let body = format!(
            "{{\"key\":\"{}\",\"range_end\":\"{}\",\"count_only\":true}}",
            b64.encode(prefix),
            b64.encode(end)
        );
        let answer = self.call(i, "/v3/kv/range", &body);
        answer["count"].as_str().map_or(0, |c| c.parse().unwrap())
    }

    /// The store's current revision.
    pub(crate) fn revision(&self, i: usize) -> i64 {
        let answer = self.call(i, "/v3/kv/range", "{\"key\":\"AA==\"}");
        answer["header"]["revision"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    }
}

impl Drop for Etcd {
    /// Stops every member and removes its data directory (about 120 MB each: its WAL is
    /// preallocated), so a run of the suite leaves no gigabytes behind in the temp folder.
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
            let _ = std::fs::remove_dir_all(&self.members[i].dir);
        }
    }
}

/// A fleet's files: the own-file text of each instance, and a config to push from.
pub(crate) struct Fleet {
    pub(crate) prefix: String,
    endpoints: String,
    /// More lines for each `[cluster]` section (credentials, TLS files).
    pub(crate) extra: String,
    /// More listeners for each own file, after `{listen}`'s.
    pub(crate) listeners: String,
}

impl Fleet {
    pub(crate) fn new(etcd: &Etcd, which: &[usize]) -> Fleet {
        Fleet {
            prefix: format!("/slipstream/it-{}", free_port()),
            endpoints: etcd.endpoints(which),
            extra: String::new(),
            listeners: String::new(),
        }
    }

    /// An own file: this instance's listener and admin (state changes allowed with the tests'
    /// token), and the `[cluster]` section.
    pub(crate) fn own(&self, name: &str, endpoints: &str) -> String {
        let state = temp_path(&format!(
            "cluster-state-{}-{name}",
            self.prefix.replace('/', "_")
        ));
        format!(
            "admin = \"{{admin}}\"\n{}[[listen]]\naddress = \"{{listen}}\"\n{}[cluster]\netcd = {endpoints}\nprefix = \"{}\"\nname = \"{name}\"\nstate_dir = \"{}\"\n{}",
            crate::support::admin_token_line(),
            self.listeners,
            self.prefix,
            state.display(),
            self.extra
        )
    }

    /// Starts instance `name` against the etcd members `endpoints`.
    pub(crate) fn instance(&self, name: &str, endpoints: &str) -> Running {
        Running::config(
            &format!("own-{name}-{}.toml", free_port()),
            &self.own(name, endpoints),
        )
    }

    /// `slipstream config push` of a config answering every request with `body`; its output.
    pub(crate) fn push_answering(&self, body: &str) -> std::process::Output {
        self.push(&format!(
            "[[sites]]\ndefault = true\nrules = [{{ return = 200, body = \"{body}\" }}]\n"
        ))
    }

    pub(crate) fn push(&self, shared: &str) -> std::process::Output {
        let own = temp_path(&format!("pusher-{}.toml", free_port()));
        let text = self
            .own("pusher", &self.endpoints)
            .replace("{admin}", "127.0.0.1:1")
            .replace("{listen}", "127.0.0.1:1");
        std::fs::write(&own, text).unwrap();
        let file = temp_path(&format!("shared-{}.toml", free_port()));
        std::fs::write(&file, shared).unwrap();
        Command::new(BIN)
            .args([
                "config",
                "push",
                "-c",
                own.to_str().unwrap(),
                file.to_str().unwrap(),
            ])
            .output()
            .unwrap()
    }

    pub(crate) fn config_key(&self) -> String {
        format!("{}/config", self.prefix)
    }
}

/// The body one GET gets from `addr` ("" when it gets nothing).
pub(crate) fn body_at(addr: SocketAddr) -> String {
    let raw = crate::support::exchange_until_close(
        addr,
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    let text = String::from_utf8_lossy(&raw).into_owned();
    text.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default()
}

/// Waits (up to 20 s) until every instance answers `body`; how long it took.
pub(crate) fn all_serve(instances: &[&Running], body: &str) -> Duration {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        if instances.iter().all(|i| body_at(i.addr) == body) {
            return start.elapsed();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!(
        "not every instance serves {body:?}: {:?}",
        instances
            .iter()
            .map(|i| body_at(i.addr))
            .collect::<Vec<_>>()
    );
}

pub(crate) fn pushed(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "push failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// wrk against `addr` for `secs` seconds, in the background.
pub(crate) fn wrk(addr: SocketAddr, secs: u64) -> Child {
    Command::new("wrk")
        .args([
            "-t1",
            "-c8",
            &format!("-d{secs}s"),
            &format!("http://{addr}/"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("wrk is not installed (apt-get install wrk; .ci/test-tools does)")
}

/// wrk's report: requests done, and every failure it saw (non-2xx answers, socket errors).
pub(crate) fn wrk_result(child: Child) -> (u64, String) {
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let requests = text
        .lines()
        .find(|l| l.contains("requests in"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let failures = text
        .lines()
        .filter(|l| l.contains("Non-2xx") || l.contains("Socket errors"))
        .collect::<Vec<_>>()
        .join("; ");
    (requests, failures)
}

/// A CA, etcd's server certificate (for 127.0.0.1) and a client certificate, as PEM files.
pub(crate) fn etcd_pki() -> PathBuf {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let dir = temp_path(&format!("etcd-pki-{}", free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "etcd test CA");
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    for (name, san) in [("server", "127.0.0.1"), ("client", "slipstream")] {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec![san.to_string()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, san);
        let cert = params.signed_by(&key, &ca).unwrap();
        std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
    }
    dir
}
