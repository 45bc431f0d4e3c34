//! The control thread: keeps the server table current for one config generation. It re-resolves
//! server names at each group's `resolve_interval`, runs each group's active health checks
//! (once per process, not per worker) with rise/fall, logs each state change once, and
//! publishes a new [`Table`] to the [`Fleet`] whenever something changed. Started with a config
//! and stopped (joined) when it is replaced; health survives the swap through `Fleet::checks`.

use crate::net::Address;
use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::watch;
use tokio::time::Instant;

use super::fleet::{CheckRecord, Fleet, Member, Table};
use super::{health, resolve};
use crate::config::{Config, ServerSpec, UpstreamGroup};

/// A running control thread (or none, when no group needs one).
pub struct Control {
    stop: watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
}

/// What checks have concluded about one address.
#[derive(Debug, Clone, Copy)]
struct Health {
    up: bool,
    successes: u32,
    failures: u32,
}

/// The control thread's knowledge of one group.
struct GroupState {
    /// The addresses each configured server stands for now.
    addrs: Vec<Vec<Address>>,
    health: HashMap<Address, Health>,
}

struct ControlState {
    generation: u64,
    config: Arc<Config>,
    fleet: Arc<Fleet>,
    groups: Vec<GroupState>,
}

impl Control {
    /// Publishes the table of `config` (generation `generation`), with the health known from
    /// before a reload, and starts the thread if any group has checks or names to re-resolve.
    pub fn start(fleet: Arc<Fleet>, config: Arc<Config>, generation: u64) -> io::Result<Control> {
        let state = ControlState::new(fleet, config, generation);
        state.publish();
        let (stop, stop_rx) = watch::channel(false);
        let needed = state.config.upstreams.iter().any(needs_control);
        let unresolved = state.config.upstreams.iter().any(has_unresolved);
        let thread = if needed {
            let (ready, ready_rx) = std::sync::mpsc::channel();
            let thread = std::thread::Builder::new()
                .name("upstream-control".into())
                .spawn(move || run(state, stop_rx, ready))?;
            if unresolved {
                // Names left to the configured DNS servers: wait (a little) for their first
                // answers, so the workers do not start with empty groups.
                let _ = ready_rx.recv_timeout(FIRST_RESOLUTION_WAIT);
            }
            Some(thread)
        } else {
            None
        };
        Ok(Control { stop, thread })
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How long start-up waits for the first DNS answers when names are left to `resolver`.
const FIRST_RESOLUTION_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

fn needs_control(g: &UpstreamGroup) -> bool {
    let resolving = !g.resolve_interval.is_zero() && g.servers.iter().any(ServerSpec::is_name);
    g.health.is_some() || resolving || has_unresolved(g)
}

/// Whether a server name still waits for its first resolution.
fn has_unresolved(g: &UpstreamGroup) -> bool {
    g.servers.iter().any(|s| s.addrs.is_empty())
}

impl ControlState {
    fn new(fleet: Arc<Fleet>, config: Arc<Config>, generation: u64) -> ControlState {
        let known = fleet
            .checks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let groups = config
            .upstreams
            .iter()
            .map(|g| {
                let addrs: Vec<Vec<Address>> = g.servers.iter().map(|s| s.addrs.clone()).collect();
                let mut health = HashMap::new();
                if g.health.is_some() {
                    for a in addrs.iter().flatten() {
                        let up = known.get(&(g.name.clone(), a.clone())).map(|r| r.up);
                        health.insert(a.clone(), initial_health(g, up));
                    }
                }
                GroupState { addrs, health }
            })
            .collect();
        ControlState {
            generation,
            config,
            fleet,
            groups,
        }
    }

    /// Builds the table from what is known and publishes it.
    fn publish(&self) {
        let groups = self
            .config
            .upstreams
            .iter()
            .zip(&self.groups)
            .map(|(g, state)| {
                let mut members = Vec::new();
                for (spec, addrs) in g.servers.iter().zip(&state.addrs) {
                    for addr in addrs {
                        if members.iter().any(|m: &Member| m.addr == *addr) {
                            continue;
                        }
                        members.push(Member {
                            addr: addr.clone(),
                            weight: spec.weight,
                            backup: spec.backup,
                            slow_start: spec.slow_start,
                            up: state.health.get(addr).is_none_or(|h| h.up),
                        });
                    }
                }
                members
            })
            .collect();
        self.fleet.publish(Table {
            config_generation: self.generation,
            groups,
        });
    }
}

fn initial_health(g: &UpstreamGroup, known: Option<bool>) -> Health {
    let up = known.unwrap_or_else(|| !g.health.as_ref().is_some_and(|h| h.start_down));
    Health {
        up,
        successes: 0,
        failures: 0,
    }
}

fn run(state: ControlState, stop: watch::Receiver<bool>, ready: std::sync::mpsc::Sender<()>) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return tracing::error!("upstream control runtime: {e}"),
    };
    let local = tokio::task::LocalSet::new();
    let state = Rc::new(RefCell::new(state));
    local.block_on(&rt, async move {
        let config = state.borrow().config.clone();
        let names = config
            .upstreams
            .iter()
            .flat_map(|g| &g.servers)
            .any(ServerSpec::is_name);
        let resolver = if names {
            resolve::resolver(&config.resolvers).map(Rc::new)
        } else {
            None
        };
        if let Some(resolver) = &resolver {
            let mut changed = false;
            for (index, group) in config.upstreams.iter().enumerate() {
                if has_unresolved(group) {
                    changed |= resolve_group(index, group, &state, resolver).await;
                }
            }
            if changed {
                state.borrow().publish();
            }
        }
        let _ = ready.send(());
        let mut tasks = Vec::new();
        for index in 0..config.upstreams.len() {
            if needs_control(&config.upstreams[index]) {
                let task = group_task(index, state.clone(), resolver.clone(), stop.clone());
                tasks.push(tokio::task::spawn_local(task));
            }
        }
        for t in tasks {
            let _ = t.await;
        }
    });
}

/// Checks and re-resolves one group until stopped.
async fn group_task(
    index: usize,
    state: Rc<RefCell<ControlState>>,
    resolver: Option<Rc<hickory_resolver::TokioResolver>>,
    mut stop: watch::Receiver<bool>,
) {
    let config = state.borrow().config.clone();
    let group = &config.upstreams[index];
    let resolving =
        !group.resolve_interval.is_zero() && group.servers.iter().any(ServerSpec::is_name);
    let mut next_check = Instant::now();
    let mut next_resolve = Instant::now() + group.resolve_interval;
    loop {
        let check_due = group.health.as_ref().map(|_| next_check);
        let resolve_due = resolving.then_some(next_resolve);
        let Some(wake) = check_due.into_iter().chain(resolve_due).min() else {
            return;
        };
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {}
            _ = stop.changed() => return,
        }
        let now = Instant::now();
        // A lookup or a round of checks in progress is dropped when the config is replaced,
        // so a reload never waits for a check's timeout.
        if let (Some(resolver), Some(due)) = (&resolver, resolve_due) {
            if now >= due {
                next_resolve = now + group.resolve_interval;
                tokio::select! {
                    changed = resolve_group(index, group, &state, resolver) => if changed {
                        state.borrow().publish();
                    },
                    _ = stop.changed() => return,
                }
            }
        }
        if let (Some(check), Some(due)) = (&group.health, check_due) {
            if now >= due {
                next_check = now + check.interval;
                tokio::select! {
                    changed = check_group(index, group, &state) => if changed {
                        state.borrow().publish();
                    },
                    _ = stop.changed() => return,
                }
            }
        }
    }
}

/// Resolves every name of the group again; true when an answer changed.
async fn resolve_group(
    index: usize,
    group: &UpstreamGroup,
    state: &Rc<RefCell<ControlState>>,
    resolver: &hickory_resolver::TokioResolver,
) -> bool {
    let mut changed = false;
    for (s, spec) in group
        .servers
        .iter()
        .enumerate()
        .filter(|(_, s)| s.is_name())
    {
        let addrs = match resolve::lookup(resolver, &spec.host, spec.port).await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(group = %group.name, host = %spec.host, "re-resolving failed, keeping the last answer: {e}");
                continue;
            }
        };
        let mut st = state.borrow_mut();
        let gs = &mut st.groups[index];
        let mut old = gs.addrs[s].clone();
        old.sort_unstable();
        if old == addrs {
            continue;
        }
        for a in addrs.iter().filter(|a| !old.contains(a)) {
            tracing::info!(group = %group.name, host = %spec.host, server = %a, "new address: server added");
            if group.health.is_some() {
                gs.health
                    .entry(a.clone())
                    .or_insert_with(|| initial_health(group, None));
            }
        }
        for a in old.iter().filter(|a| !addrs.contains(a)) {
            tracing::info!(group = %group.name, host = %spec.host, server = %a, "address gone: server draining");
        }
        gs.addrs[s] = addrs;
        changed = true;
    }
    changed
}

/// Checks every address of the group at once; true when one went up or down.
async fn check_group(
    index: usize,
    group: &UpstreamGroup,
    state: &Rc<RefCell<ControlState>>,
) -> bool {
    let Some(check) = &group.health else {
        return false;
    };
    let addrs: Vec<Address> = {
        let st = state.borrow();
        let mut a: Vec<Address> = st.groups[index].addrs.iter().flatten().cloned().collect();
        a.sort_unstable();
        a.dedup();
        a
    };
    let mut set = tokio::task::JoinSet::new();
    for addr in addrs {
        let check = check.clone();
        let tls = group.tls.clone();
        let http2 = group.protocol.is_http2();
        set.spawn_local(async move {
            let result = health::check(&addr, &check, tls.as_deref(), http2).await;
            (addr, result)
        });
    }
    let mut changed = false;
    let fleet = state.borrow().fleet.clone();
    while let Some(Ok((addr, result))) = set.join_next().await {
        let mut records = fleet
            .checks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut st = state.borrow_mut();
        let h = st.groups[index]
            .health
            .entry(addr.clone())
            .or_insert_with(|| initial_health(group, None));
        changed |= apply(h, &result, check.rise, check.fall, &group.name, &addr);
        let record = records
            .entry((group.name.clone(), addr))
            .or_insert(CheckRecord {
                up: h.up,
                last_ok: false,
                checks: 0,
                failures: 0,
                last_failure: None,
            });
        record.up = h.up;
        record.last_ok = result.is_ok();
        record.checks += 1;
        if let Err(reason) = &result {
            record.failures += 1;
            record.last_failure = Some((reason.clone(), crate::observe::unix_millis()));
        }
    }
    changed
}

/// Folds one result into the rise/fall counts; true when the server changed state.
fn apply(
    h: &mut Health,
    result: &Result<(), String>,
    rise: u32,
    fall: u32,
    group: &str,
    addr: &Address,
) -> bool {
    match result {
        Ok(()) => {
            h.successes += 1;
            h.failures = 0;
            if !h.up && h.successes >= rise {
                h.up = true;
                tracing::info!(group, server = %addr, "health check passed {rise} times: server up");
                return true;
            }
        }
        Err(reason) => {
            h.failures += 1;
            h.successes = 0;
            if h.up && h.failures >= fall {
                h.up = false;
                tracing::warn!(group, server = %addr, "health check failed {fall} times ({reason}): server down");
                return true;
            }
        }
    }
    false
}
