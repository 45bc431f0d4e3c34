//! `slipstream doctor`: checks this host, a config and a running slipstream against the traps
//! of the field reports (file limits, listen queues, ephemeral ports, TIME_WAIT, conntrack,
//! kernel drop counters, the proxy's own trap counters) and names each finding with its
//! evidence and the exact fix. Reads only files under a proc root (injectable for tests) and
//! the admin listener's `/status?format=json`.

pub mod procfs;

mod checks;

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Loses connections or requests now, or will under load.
    Critical,
    /// Costs throughput or will bite at a larger scale.
    Warning,
    /// Checked and fine.
    Ok,
}

impl Severity {
    fn name(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Warning => "warning",
            Severity::Ok => "ok",
        }
    }
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// How bad it is.
    pub severity: Severity,
    /// A stable id: `nofile`, `somaxconn`, `syn_backlog`, `port_range`, `tw_reuse`,
    /// `conntrack`, `listen_overflows`, `syncookies`, `tcp_memory`, `time_wait`, and `live_*`
    /// for a running slipstream's counters.
    pub check: &'static str,
    /// What was found.
    pub title: String,
    /// The numbers behind it and where they were read.
    pub evidence: String,
    /// The exact change that removes it (empty when fine).
    pub fix: String,
}

/// What a config asks of the host, the limits are sized against (`Config::demand`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Demand {
    /// Client connections at once, over all listeners.
    pub connections: u64,
    /// The largest listen backlog asked.
    pub backlog: u64,
    /// Idle upstream connections kept per server, over all workers.
    pub pool_per_server: u64,
    /// Some upstream is neither loopback nor a unix socket.
    pub remote_upstreams: bool,
    /// There are upstreams at all.
    pub upstreams: bool,
}

impl Demand {
    /// Open files the connections may need: a client and an upstream connection each, plus
    /// 1024 for files, pipes and the rest (the `LimitNOFILE=` to ask for).
    pub fn descriptors(&self) -> u64 {
        self.connections.saturating_mul(2) + 1024
    }
}

/// What `doctor` looks at.
#[derive(Debug)]
pub struct Inputs {
    /// Where `/proc` is (`/proc`, or a test's directory).
    pub proc_root: PathBuf,
    /// What the config asks of the host.
    pub demand: Demand,
    /// A running slipstream's admin address.
    pub admin: Option<SocketAddr>,
    /// How long to watch the kernel's counters move.
    pub sample: Duration,
}

/// Runs every check; findings sorted worst first.
pub fn examine(inputs: &Inputs) -> Vec<Finding> {
    let mut findings = checks::host(inputs);
    if let Some(admin) = inputs.admin {
        findings.extend(checks::live(admin));
    }
    findings.sort_by_key(|f| f.severity);
    findings
}

/// The findings the admin listener's dashboard shows: this host's checks against `demand`
/// (the kernel's counters read once, not sampled), and the trap counters of `status` (this
/// process's `/status?format=json`); worst first.
pub fn for_dashboard(demand: Demand, status: &serde_json::Value) -> Vec<Finding> {
    let inputs = Inputs {
        proc_root: PathBuf::from("/proc"),
        demand,
        admin: None,
        sample: Duration::ZERO,
    };
    let mut findings = checks::host(&inputs);
    findings.extend(checks::live_from("this process", status));
    findings.sort_by_key(|f| f.severity);
    findings
}

/// Findings as JSON values (the form `doctor --json` prints).
pub fn to_values(findings: &[Finding]) -> Vec<serde_json::Value> {
    findings
        .iter()
        .map(|f| {
            serde_json::json!({
                "severity": f.severity.name(),
                "check": f.check,
                "title": f.title,
                "evidence": f.evidence,
                "fix": f.fix,
            })
        })
        .collect()
}

/// Whether any finding is critical (the exit status is 1 then).
pub fn is_critical(findings: &[Finding]) -> bool {
    findings.iter().any(|f| f.severity == Severity::Critical)
}

/// The findings as text, worst first.
pub fn to_text(findings: &[Finding]) -> String {
    let mut out = String::new();
    for f in findings {
        let _ = writeln!(
            out,
            "{:<8}  {:<16}  {}",
            f.severity.name().to_uppercase(),
            f.check,
            f.title
        );
        if !f.evidence.is_empty() {
            let _ = writeln!(out, "{:28}evidence: {}", "", f.evidence);
        }
        if !f.fix.is_empty() {
            let _ = writeln!(out, "{:28}fix: {}", "", f.fix);
        }
    }
    let critical = findings
        .iter()
        .filter(|f| f.severity == Severity::Critical)
        .count();
    let warnings = findings
        .iter()
        .filter(|f| f.severity == Severity::Warning)
        .count();
    let _ = writeln!(out, "{critical} critical, {warnings} warnings");
    out
}

/// The findings as a JSON array.
pub fn to_json(findings: &[Finding]) -> String {
    serde_json::Value::Array(to_values(findings)).to_string()
}
