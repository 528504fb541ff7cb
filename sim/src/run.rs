//! One seed: build the madsim hosts, run the seeded workload with its swarm of faults, heal, then check
//! every invariant from `properties` (state invariants after each broker step, history and liveness at
//! the end). Each seed runs its own madsim runtime on a fresh OS thread.

use crate::profile::{FaultKind, Profile, Swarm};
use crate::rng::SimRng;
use crate::trace::{state_name, LogSnapshot, TraceEvent};
use crate::world::{broker_name, is_broker, lock, send_all, Found, Outgoing, Shared, Stats, World};
use madsim::net::{Endpoint, NetSim};
use madsim::runtime::{Handle, Runtime};
use madsim::time::{sleep, Duration};
use serde::Serialize;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, Once};
use txnsim_engine::coordinator::{DecisionCause, MARKER_RETRY_MS};
use txnsim_engine::protocol::NO_LEADER;
use txnsim_engine::{
    read_to_end, Broker, EngineConfig, IsolationLevel, Mutation, Mutations, Offset, PartitionLog, Proposal, TimeMs,
    TopicPartition, TransactionResult,
};
use txnsim_properties::{
    check_committed_sends, check_delivery_timeouts, check_failed_sends, check_history, check_liveness,
    check_read_superset, intent_claimed, ClusterView, History, Pause, Violation,
};

/// What to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunSpec {
    pub seed: u64,
    pub profile: Profile,
    pub mutation: Option<Mutation>,
    /// A fix Kafka has not made, switched on (`--proposal`).
    pub proposal: Option<Proposal>,
    /// Keep the one-line-per-event timeline (replay, determinism test).
    pub trace: bool,
    /// Keep the history in the report (replay --json).
    pub keep_history: bool,
}

impl RunSpec {
    pub fn new(seed: u64, profile: Profile, mutation: Option<Mutation>) -> Self {
        RunSpec { seed, profile, mutation, proposal: None, trace: false, keep_history: false }
    }

    /// The command that replays this run, as it runs when pasted at the repository root.
    pub fn replay_command(&self) -> String {
        let mut cmd = format!("cargo run --release -- replay --seed {} --profile {}", self.seed, self.profile.name());
        if let Some(m) = self.mutation {
            cmd.push_str(&format!(" --mutation {}", m.name()));
        }
        if let Some(p) = self.proposal {
            cmd.push_str(&format!(" --proposal {}", p.name()));
        }
        cmd
    }
}

/// What one seed found.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    pub seed: u64,
    pub profile: String,
    pub mutation: Option<String>,
    pub proposal: Option<String>,
    /// The fault mix and version the seed drew.
    pub swarm: String,
    /// Violated invariants (first witness of each), or `engine-panic`.
    pub found: Vec<Found>,
    pub stats: Stats,
    /// The first coordinator load whose records above the HW the next coordinator's log lacked.
    #[serde(skip)]
    pub lost_load: Option<String>,
    /// The trace (with `RunSpec::trace`), one event per step.
    pub events: Vec<TraceEvent>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history: Option<History>,
    /// The coordinator's broker as the run left it, with the partition leaders' logs (with
    /// `RunSpec::trace`): the replay's page draws each step from it and `log_snapshots` (`trace::broker_steps`).
    #[serde(skip)]
    pub broker: Option<Broker>,
    /// The leaders' logs after each event that changed them (with `RunSpec::trace`).
    #[serde(skip)]
    pub log_snapshots: Vec<LogSnapshot>,
}

impl RunReport {
    pub fn passed(&self) -> bool {
        self.found.is_empty()
    }
}

/// The invariant name a panic is reported under (an engine `assert!` fired).
pub const ENGINE_PANIC: &str = "engine-panic";

thread_local! {
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Seed threads keep their panic message (with its location) for the report instead of printing it.
fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let on_seed_thread = std::thread::current().name().is_some_and(|n| n.starts_with("txnsim-seed-"));
            if !on_seed_thread {
                previous(info);
                return;
            }
            let msg = if let Some(s) = info.payload().downcast_ref::<&str>() {
                s.to_string()
            } else if let Some(s) = info.payload().downcast_ref::<String>() {
                s.clone()
            } else {
                "panic".to_string()
            };
            let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
            LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{msg}{at}")));
        }));
    });
}

/// glibc gives every new thread an arena and trims it when the thread is done; a sweep starts a thread per
/// seed, so a quarter of its time went to page faults re-growing arenas. Keep freed memory instead.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            extern "C" {
                fn mallopt(param: i32, value: i32) -> i32;
            }
            const M_TRIM_THRESHOLD: i32 = -1;
            const M_MMAP_THRESHOLD: i32 = -3;
            // SAFETY: mallopt only tunes glibc's allocator; called once, before the seed threads start.
            unsafe {
                mallopt(M_TRIM_THRESHOLD, 512 << 20);
                mallopt(M_MMAP_THRESHOLD, 64 << 20);
            }
        });
    }
}

/// Runs one seed on a fresh OS thread (madsim needs one per runtime).
pub fn run_seed(spec: &RunSpec) -> RunReport {
    install_panic_hook();
    keep_freed_memory();
    let s = spec.clone();
    let joined = std::thread::Builder::new()
        .name(format!("txnsim-seed-{}", spec.seed))
        .spawn(move || run_on_this_thread(&s).0)
        .expect("spawn a seed thread")
        .join();
    match joined {
        Ok(report) => report,
        Err(_) => RunReport {
            seed: spec.seed,
            profile: spec.profile.name().to_string(),
            mutation: spec.mutation.map(|m| m.name().to_string()),
            proposal: spec.proposal.map(|p| p.name().to_string()),
            swarm: String::new(),
            found: vec![Found {
                invariant: ENGINE_PANIC.into(),
                witness: "the seed thread died".into(),
                at_ms: 0,
                count: 1,
            }],
            stats: Stats::default(),
            lost_load: None,
            events: Vec::new(),
            history: None,
            broker: None,
            log_snapshots: Vec::new(),
        },
    }
}

fn engine_config(spec: &RunSpec, swarm: &Swarm) -> EngineConfig {
    let p = spec.profile.params();
    let defaults = EngineConfig::default();
    EngineConfig {
        transaction_version: swarm.transaction_version,
        transaction_timeout_ms: p.txn_timeout_ms,
        abort_timed_out_cleanup_interval_ms: p.cleanup_interval_ms,
        request_timeout_ms: p.request_timeout_ms,
        retry_backoff_ms: p.retry_backoff_ms,
        delivery_timeout_ms: p.delivery_timeouts * p.request_timeout_ms,
        mutations: spec.mutation.map(Mutations::one).unwrap_or_default(),
        group_min_session_timeout_ms: p
            .eos
            .as_ref()
            .map_or(defaults.group_min_session_timeout_ms, |e| e.min_session_timeout_ms),
        group_initial_rebalance_delay_ms: p
            .eos
            .as_ref()
            .map_or(defaults.group_initial_rebalance_delay_ms, |e| e.initial_rebalance_delay_ms),
        proposal: spec.proposal,
        replica_lag_time_max_ms: swarm.replica_lag_time_max_ms,
        // Kafka's defaults have the socket timeout equal to the lag bound, 60 times the fetch wait; the
        // sim's lag bound is squeezed to a few fetch waits, so an idle long-poll gets the wait on top.
        replica_socket_timeout_ms: swarm.replica_lag_time_max_ms + swarm.replica_fetch_wait_max_ms,
        replica_fetch_wait_max_ms: swarm.replica_fetch_wait_max_ms,
        replica_fetch_backoff_ms: swarm.replica_fetch_backoff_ms,
        min_insync_replicas: swarm.min_insync_replicas,
        ..defaults
    }
}

/// The run's report, and how many clones of the world outlived it (none, unless a madsim task did).
fn run_on_this_thread(spec: &RunSpec) -> (RunReport, usize) {
    let params = spec.profile.params();
    let mut rng = SimRng::new(spec.seed);
    let swarm = Swarm::draw(&params, &mut rng);
    let config = engine_config(spec, &swarm);
    let swarm_text = swarm.describe();
    let rt = Runtime::with_seed_and_config(spec.seed, madsim::Config::default());
    let trace = spec.trace;
    let world = rt.block_on(async move { World::new(params, swarm, config, rng, trace) });
    let shared: Shared = Arc::new(Mutex::new(world));
    LAST_PANIC.with(|p| p.borrow_mut().take());
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| rt.block_on(supervisor(shared.clone()))));
    let panicked = result.is_err();
    let report = {
        let mut w = lock(&shared);
        if panicked {
            let msg = LAST_PANIC.with(|p| p.borrow_mut().take()).unwrap_or_else(|| "panic".into());
            let line = format!("PANIC {msg}");
            w.trace("engine", "panic", || line);
            w.found.push(Found { invariant: ENGINE_PANIC.into(), witness: msg, at_ms: 0, count: 1 });
        }
        RunReport {
            seed: spec.seed,
            profile: spec.profile.name().to_string(),
            mutation: spec.mutation.map(|m| m.name().to_string()),
            proposal: spec.proposal.map(|p| p.name().to_string()),
            swarm: swarm_text,
            found: w.found.clone(),
            stats: w.stats.clone(),
            lost_load: w.lost_load.clone(),
            events: w.trace.take().unwrap_or_default(),
            history: spec.keep_history.then(|| w.history.clone()),
            broker: spec.trace.then(|| w.leader_snapshot()),
            log_snapshots: std::mem::take(&mut w.log_snapshots),
        }
    };
    if panicked {
        // The runtime unwound mid-step: do not run its destructors.
        std::mem::forget(shared);
        std::mem::forget(rt);
        return (report, 0);
    }
    release_tasks(&rt, &shared);
    let world = Arc::downgrade(&shared);
    drop(shared);
    drop(rt);
    (report, world.strong_count())
}

/// Kills every node so their unfinished tasks (message loops, timers not yet due) are dropped. A madsim
/// task's `TaskInfo` holds the task's own waker, so a task still pending when the runtime drops is never
/// freed, and with it its clone of the world: about 275 KB a seed, until a long sweep ran out of memory.
fn release_tasks(rt: &Runtime, shared: &Shared) {
    let ids: Vec<madsim::task::NodeId> = {
        let mut w = lock(shared);
        w.runtime = None;
        w.nodes.values().filter_map(|n| n.id).chain(w.wire_node).collect()
    };
    // Killing wakes each task; the runtime drops a killed node's tasks as it dequeues them, before this
    // `block_on` returns.
    rt.block_on(async move {
        let handle = Handle::current();
        for id in ids {
            handle.kill(id);
        }
    });
}

/// A node's process: bind, start (or restart) the engine node, then deliver every message it receives.
async fn node_main(shared: Shared, name: String) {
    let addr = lock(&shared).nodes[&name].addr;
    let endpoint = Endpoint::bind(addr).await.expect("bind the node's address");
    let out = {
        let mut w = lock(&shared);
        w.on_node_start(&shared, &name, endpoint.clone())
    };
    send_all(&shared, out).await;
    loop {
        let Ok((payload, _from)) = endpoint.recv_from_raw(crate::world::TAG).await else {
            std::future::pending::<()>().await;
            return;
        };
        let wire = *payload.downcast::<crate::world::Wire>().expect("only Wire travels on the sim network");
        let out = {
            let mut w = lock(&shared);
            w.on_wire(&shared, &name, wire)
        };
        send_all(&shared, out).await;
    }
}

async fn supervisor(shared: Shared) {
    let handle = Handle::current();
    let wire = handle.create_node().name("wire").ip([10, 0, 250, 1].into()).build();
    let nodes: Vec<(String, std::net::IpAddr)> = {
        let mut w = lock(&shared);
        w.wire_node = Some(wire.id());
        w.nodes.iter().map(|(n, s)| (n.clone(), s.addr.ip())).collect()
    };
    for (name, ip) in nodes {
        let s = shared.clone();
        let n = name.clone();
        let node = handle.create_node().name(name.clone()).ip(ip).init(move || node_main(s.clone(), n.clone())).build();
        lock(&shared).nodes.get_mut(&name).expect("known").id = Some(node.id());
    }
    sleep(Duration::from_millis(1)).await;

    let ticks = lock(&shared).params.ticks;
    for _ in 0..ticks {
        let pause_ms = {
            let mut w = lock(&shared);
            let (lo, hi) = w.params.tick_ms;
            w.rng.range(lo, hi).max(1)
        };
        sleep(Duration::from_millis(pause_ms)).await;
        let out = {
            let mut w = lock(&shared);
            w.workload_step(&shared)
        };
        send_all(&shared, out).await;
    }
    heal(&shared).await;
    lock(&shared).final_checks();
}

/// Faults off, producers stop, time runs past the transaction timeout, the coordinator's scan and the
/// marker retries; then consumers poll to the end.
async fn heal(shared: &Shared) {
    lock(shared).heal();
    for _ in 0..600 {
        sleep(Duration::from_millis(100)).await;
        let w = lock(shared);
        if w.producers.values().all(|s| s.producer.as_ref().is_none_or(|p| p.is_idle())) {
            break;
        }
    }
    let wait_ms = {
        let w = lock(shared);
        w.params.txn_timeout_ms + 2 * w.params.cleanup_interval_ms + MARKER_RETRY_MS + 6_000
    };
    // A quiescent cluster stops waiting: from there on only periodic no-ops run (idle fetch long-polls
    // were most of a replicated seed's messages), so the final checks would read the same state.
    let mut waited_ms = 0;
    while waited_ms < wait_ms {
        let step = (wait_ms - waited_ms).min(250);
        sleep(Duration::from_millis(step)).await;
        waited_ms += step;
        if lock(shared).is_quiescent() {
            break;
        }
    }
    lock(shared).trace("sim", "phase", || "consumers poll to the end".to_string());
    for _ in 0..400 {
        let (done, out) = {
            let mut w = lock(shared);
            w.poll_to_end(shared)
        };
        if done {
            break;
        }
        send_all(shared, out).await;
        sleep(Duration::from_millis(20)).await;
    }
}

impl World {
    /// One workload step: maybe a fault, then a consumer poll or a producer call.
    fn workload_step(&mut self, shared: &Shared) -> Vec<Outgoing> {
        let mut out = Vec::new();
        if self.rng.chance(self.swarm.fault_rate) {
            out = self.inject_fault(shared);
        }
        if self.rng.chance(self.params.poll_ratio) {
            let names: Vec<String> = self.consumers.keys().cloned().collect();
            let name = self.rng.pick(&names).clone();
            if self.processor_of_member(&name).is_some() {
                out.extend(self.member_step(shared, &name));
            } else {
                out.extend(self.consumer_step(shared, &name));
            }
        } else {
            let names: Vec<String> = self.producers.keys().cloned().collect();
            let name = self.rng.pick(&names).clone();
            if self.processors.contains_key(&name) {
                out.extend(self.processor_step(shared, &name));
            } else {
                out.extend(self.producer_step(shared, &name));
            }
        }
        out
    }

    /// Runs `f` on the world after `delay_ms`, from the network's own host (it outlives node restarts).
    fn schedule(&self, shared: &Shared, delay_ms: u64, f: impl FnOnce(&mut World) + Send + 'static) {
        let Some(handle) = self.wire_node.and_then(|id| Handle::current().get_node(id)) else { return };
        let shared = shared.clone();
        handle.spawn(async move {
            sleep(Duration::from_millis(delay_ms)).await;
            let mut w = lock(&shared);
            f(&mut w);
        });
    }

    fn node_id(&self, name: &str) -> madsim::task::NodeId {
        self.nodes[name].id.expect("nodes are built before the workload")
    }

    /// One fault event, of a kind the seed's swarm enabled, by the function for that kind; what it makes a
    /// node send.
    fn inject_fault(&mut self, shared: &Shared) -> Vec<Outgoing> {
        // Delays and lost answers act per message in `dispatch`; the rest are events.
        let kinds: Vec<FaultKind> = self
            .swarm
            .enabled
            .iter()
            .copied()
            .filter(|k| {
                !matches!(
                    k,
                    FaultKind::DelayProduce | FaultKind::DelayMessage | FaultKind::LoseAnswer | FaultKind::DelayAnswer
                )
            })
            .collect();
        if kinds.is_empty() || self.healing {
            return Vec::new();
        }
        let kind = *self.rng.pick(&kinds);
        match kind {
            FaultKind::BrokerRestart => self.restart_coordinator_broker(shared),
            FaultKind::LeaderRestart => self.restart_partition_leader(shared),
            FaultKind::ControllerFailover => self.fail_over_controller_fault(shared),
            FaultKind::IsolateFollower => self.isolate_follower(shared),
            FaultKind::ClogNode => self.clog_node(shared),
            FaultKind::ClogLink => self.clog_link(shared),
            FaultKind::PacketLoss => self.packet_loss(shared),
            FaultKind::Latency => self.latency(shared),
            FaultKind::PauseProducer => self.pause_producer(shared),
            FaultKind::ProducerRestart => self.kill_producer(),
            FaultKind::DisconnectClient => self.disconnect_client(shared),
            FaultKind::DelayProduce | FaultKind::DelayMessage | FaultKind::LoseAnswer | FaultKind::DelayAnswer => {
                unreachable!("filtered above")
            }
        }
    }

    /// The coordinator's broker killed, restarted after a while (`BrokerRestart`): on one broker it comes
    /// back in place and reloads its transaction log, on a replicated cluster the next leader of
    /// `__transaction_state` loads it and takes over.
    fn restart_coordinator_broker(&mut self, shared: &Shared) -> Vec<Outgoing> {
        let coordinator = self.coordinator_broker();
        if self.brokers_down.contains(&coordinator) {
            return Vec::new();
        }
        self.kill_broker(shared, FaultKind::BrokerRestart, coordinator)
    }

    /// A partition leader on another broker killed, restarted after a while (`LeaderRestart`): the
    /// controller elects a new leader.
    fn restart_partition_leader(&mut self, shared: &Shared) -> Vec<Outgoing> {
        let candidates = self.leader_candidates();
        if candidates.is_empty() {
            return Vec::new();
        }
        let b = *self.rng.pick(&candidates);
        self.kill_broker(shared, FaultKind::LeaderRestart, b)
    }

    /// Broker `b` killed under fault `kind`, restarted after a while unless the run heals first.
    fn kill_broker(&mut self, shared: &Shared, kind: FaultKind, b: u32) -> Vec<Outgoing> {
        let down_ms = self.rng.range(5, 800);
        let broker = broker_name(b);
        self.trace(&broker, "fault", || format!("FAULT kill; restart in {down_ms} ms"));
        self.count_fault(kind.name().to_string());
        self.schedule(shared, down_ms, move |w| {
            if w.brokers_down.contains(&b) && !w.healing {
                w.restart_broker(b);
            }
        });
        self.crash_broker(shared, b)
    }

    /// The controller fails over (`ControllerFailover`).
    fn fail_over_controller_fault(&mut self, shared: &Shared) -> Vec<Outgoing> {
        // KRaft's `controller.quorum.election.timeout.ms` is 1 s; scaled down as the sim's
        // replication timeouts are.
        if !self.can_fail_over_controller() {
            return Vec::new();
        }
        let election_ms = self.rng.range(50, 1_000);
        self.fail_over_controller(shared, election_ms);
        self.count_fault(FaultKind::ControllerFailover.name().to_string());
        Vec::new()
    }

    /// A leader and a follower in its ISR cut off from each other for a while (`IsolateFollower`).
    fn isolate_follower(&mut self, shared: &Shared) -> Vec<Outgoing> {
        let net = NetSim::current();
        // A leader and one follower in its ISR lose each other both ways (a network partition):
        // the follower's fetches stop, so the leader's ISR shrinks once `replica.lag.time.max.ms`
        // passes; after healing it catches up and the ISR expands.
        let Some(c) = &self.controller else { return Vec::new() };
        let pairs: Vec<(u32, u32)> = c
            .partitions
            .values()
            .filter(|r| r.state.leader != NO_LEADER)
            .flat_map(|r| r.state.isr.iter().filter(move |f| **f != r.state.leader).map(|f| (r.state.leader, *f)))
            .filter(|(l, f)| {
                let link = (broker_name(*l), broker_name(*f));
                !self.brokers_down.contains(l) && !self.clogged_links.contains(&link)
            })
            .collect();
        if pairs.is_empty() {
            return Vec::new();
        }
        let (leader, follower) = *self.rng.pick(&pairs);
        let lag = self.config.replica_lag_time_max_ms;
        let ms = self.rng.range(lag / 2, 3 * lag);
        let (l, f) = (broker_name(leader), broker_name(follower));
        for (src, dst) in [(l.clone(), f.clone()), (f.clone(), l.clone())] {
            net.clog_link(self.node_id(&src), self.node_id(&dst));
            self.clogged_links.insert((src, dst));
        }
        let text = format!("FAULT partition leader {l} from follower {f} for {ms} ms");
        self.trace("net", "fault", || text);
        self.schedule(shared, ms, move |w| {
            for (src, dst) in [(l.clone(), f.clone()), (f.clone(), l.clone())] {
                if w.clogged_links.remove(&(src.clone(), dst.clone())) {
                    NetSim::current().unclog_link(w.node_id(&src), w.node_id(&dst));
                }
            }
            let text = format!("heal partition between {l} and {f}");
            w.trace("net", "recover", || text);
        });
        self.count_fault(FaultKind::IsolateFollower.name().to_string());
        Vec::new()
    }

    /// A node's traffic held for a while (`ClogNode`).
    fn clog_node(&mut self, shared: &Shared) -> Vec<Outgoing> {
        let net = NetSim::current();
        let names: Vec<String> = self.nodes.keys().filter(|n| !self.clogged_nodes.contains(*n)).cloned().collect();
        if names.is_empty() {
            return Vec::new();
        }
        let name = self.rng.pick(&names).clone();
        let ms = self.rng.range(10, 1_000);
        net.clog_node(self.node_id(&name));
        self.clogged_nodes.insert(name.clone());
        self.trace(&name, "fault", || format!("FAULT clog node for {ms} ms"));
        self.schedule(shared, ms, move |w| {
            if w.clogged_nodes.remove(&name) {
                NetSim::current().unclog_node(w.node_id(&name));
                w.trace(&name, "recover", || "unclog node".to_string());
            }
        });
        self.count_fault(FaultKind::ClogNode.name().to_string());
        Vec::new()
    }

    /// One direction of a link held for a while (`ClogLink`).
    fn clog_link(&mut self, shared: &Shared) -> Vec<Outgoing> {
        let net = NetSim::current();
        let brokers: Vec<String> = self.nodes.keys().filter(|n| is_broker(n)).cloned().collect();
        let clients: Vec<String> = self.nodes.keys().filter(|n| !is_broker(n)).cloned().collect();
        let client = self.rng.pick(&clients).clone();
        let broker = self.rng.pick(&brokers).clone();
        let roll = self.rng.f64();
        let (src, dst) = if roll < 0.2 {
            // The coordinator's link to a leader (itself on one broker): its markers and KIP-890
            // verifications are lost.
            (broker_name(self.coordinator_broker()), broker)
        } else if roll < 0.6 {
            (client, broker)
        } else {
            (broker, client)
        };
        if self.clogged_links.contains(&(src.clone(), dst.clone())) {
            return Vec::new();
        }
        let ms = self.rng.range(10, 1_000);
        net.clog_link(self.node_id(&src), self.node_id(&dst));
        self.clogged_links.insert((src.clone(), dst.clone()));
        let text = format!("FAULT clog link {src} -> {dst} for {ms} ms");
        self.trace("net", "fault", || text);
        self.schedule(shared, ms, move |w| {
            if w.clogged_links.remove(&(src.clone(), dst.clone())) {
                NetSim::current().unclog_link(w.node_id(&src), w.node_id(&dst));
                let text = format!("unclog link {src} -> {dst}");
                w.trace("net", "recover", || text);
            }
        });
        self.count_fault(FaultKind::ClogLink.name().to_string());
        Vec::new()
    }

    /// The whole network lossy for a while (`PacketLoss`).
    fn packet_loss(&mut self, shared: &Shared) -> Vec<Outgoing> {
        self.degrade_network(shared, FaultKind::PacketLoss, |w, net, ms| {
            let rate = w.rng.range_f64(0.02, 0.3);
            net.update_config(|c| c.packet_loss_rate = rate);
            format!("FAULT packet loss {:.0}% for {ms} ms", rate * 100.0)
        })
    }

    /// The whole network slow for a while (`Latency`).
    fn latency(&mut self, shared: &Shared) -> Vec<Outgoing> {
        self.degrade_network(shared, FaultKind::Latency, |w, net, ms| {
            let hi = w.rng.range(20, 400);
            net.update_config(|c| c.send_latency = Duration::from_millis(1)..Duration::from_millis(hi));
            format!("FAULT latency 1-{hi} ms for {ms} ms")
        })
    }

    /// The network-wide config changed by `degrade` (which says how, in words) for a while, then back to
    /// normal unless a newer such fault or the healing came first.
    fn degrade_network(
        &mut self,
        shared: &Shared,
        kind: FaultKind,
        degrade: impl FnOnce(&mut World, &NetSim, u64) -> String,
    ) -> Vec<Outgoing> {
        let net = NetSim::current();
        self.net_fault_generation += 1;
        let generation = self.net_fault_generation;
        let ms = self.rng.range(50, 1_000);
        let text = degrade(self, &net, ms);
        self.trace("net", "fault", || text);
        self.schedule(shared, ms, move |w| {
            if w.net_fault_generation == generation && !w.healing {
                NetSim::current().update_config(|c| *c = madsim::net::Config::default());
                w.trace("net", "recover", || "network back to normal".to_string());
            }
        });
        self.count_fault(kind.name().to_string());
        Vec::new()
    }

    /// A transactional producer's process paused past its transaction timeout (`PauseProducer`).
    fn pause_producer(&mut self, shared: &Shared) -> Vec<Outgoing> {
        let handle = Handle::current();
        let candidates: Vec<String> = self
            .producers
            .iter()
            .filter(|(n, s)| {
                !self.paused.contains(*n)
                    && s.spec.kind != txnsim_engine::ProducerKind::Plain
                    && s.producer.as_ref().is_some_and(|p| p.transactional_id().is_some())
            })
            .map(|(n, _)| n.clone())
            .collect();
        if candidates.is_empty() {
            return Vec::new();
        }
        let name = self.rng.pick(&candidates).clone();
        let ms = self.params.txn_timeout_ms + self.params.cleanup_interval_ms + self.rng.range(100, 2_000);
        handle.pause(self.node_id(&name));
        self.paused.insert(name.clone());
        self.pauses.push(Pause { process: name.clone(), from_ms: self.now_ms(), to_ms: TimeMs::MAX });
        self.trace(&name, "fault", || format!("FAULT pause process for {ms} ms (past the transaction timeout)"));
        self.schedule(shared, ms, move |w| {
            if w.resume(&name) {
                Handle::current().resume(w.node_id(&name));
                w.trace(&name, "recover", || "resume process".to_string());
            }
        });
        self.count_fault(FaultKind::PauseProducer.name().to_string());
        Vec::new()
    }

    /// A producer killed and restarted (`ProducerRestart`).
    fn kill_producer(&mut self) -> Vec<Outgoing> {
        let Some(name) = self.pick_running_producer() else { return Vec::new() };
        self.restart_producer(&name, "FAULT kill");
        self.count_fault(FaultKind::ProducerRestart.name().to_string());
        Vec::new()
    }

    /// A producer's connections broken (`DisconnectClient`; counted by `disconnect_producer`).
    fn disconnect_client(&mut self, shared: &Shared) -> Vec<Outgoing> {
        let Some(name) = self.pick_running_producer() else { return Vec::new() };
        self.disconnect_producer(shared, &name)
    }

    /// A producer whose process runs and is not paused, drawn from the seed.
    fn pick_running_producer(&mut self) -> Option<String> {
        let candidates: Vec<String> = self
            .producers
            .iter()
            .filter(|(n, s)| !self.paused.contains(*n) && s.producer.is_some())
            .map(|(n, _)| n.clone())
            .collect();
        (!candidates.is_empty()).then(|| self.rng.pick(&candidates).clone())
    }

    fn heal(&mut self) {
        self.healing = true;
        self.trace("sim", "phase", || "HEAL: faults off, producers stop".to_string());
        let net = NetSim::current();
        let handle = Handle::current();
        for name in std::mem::take(&mut self.clogged_nodes) {
            net.unclog_node(self.node_id(&name));
        }
        for (src, dst) in std::mem::take(&mut self.clogged_links) {
            net.unclog_link(self.node_id(&src), self.node_id(&dst));
        }
        net.update_config(|c| *c = madsim::net::Config::default());
        for name in self.paused.clone() {
            self.resume(&name);
            handle.resume(self.node_id(&name));
        }
        for b in self.brokers_down.clone() {
            self.restart_broker(b);
        }
    }

    /// Polls every partition of every consumer that is not yet at its bound; true when all are.
    fn poll_to_end(&mut self, shared: &Shared) -> (bool, Vec<Outgoing>) {
        let mut done = true;
        let mut out = Vec::new();
        // Group members read what their group assigns; the other consumers read every partition to its end.
        let names: Vec<String> =
            self.consumers.keys().filter(|n| self.processor_of_member(n).is_none()).cloned().collect();
        for name in names {
            for tp in self.partitions.clone() {
                let c = &self.consumers[&name].consumer;
                let bound = self.consumer_bound(c.isolation, &tp);
                let at_end = c.position(&tp) == Some(bound) && !c.has_fetch_in_flight(&tp);
                if !at_end {
                    done = false;
                    out.extend(self.poll(shared, &name, &tp));
                }
            }
        }
        (done, out)
    }

    /// Where in the trace a history violation happened: after the history event whose prefix of the
    /// history first shows it (a binary search; a violation, once shown, stays in every longer prefix).
    fn history_violation_at(&self, v: &Violation, logs: &BTreeMap<TopicPartition, PartitionLog>) -> Option<usize> {
        let shows = |k: usize| {
            let prefix = History {
                events: self.history.events[..k].to_vec(),
                leader_high_watermarks: self.history.leader_high_watermarks.clone(),
            };
            check_history(&prefix, logs).iter().any(|p| p.invariant == v.invariant && p.witness == v.witness)
        };
        let (mut lo, mut hi) = (1, self.history.events.len());
        if !shows(hi) {
            return None;
        }
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if shows(mid) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        self.history_marks.get(lo - 1).copied()
    }

    /// A second VIOLATION line for each history violation, at the event where it happened (the first
    /// is at the end, where the history check ran).
    fn flag_history_violations(&mut self, mut flags: Vec<(usize, Violation)>) {
        let Some(trace) = self.trace.as_mut() else { return };
        flags.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
        for (at, v) in flags {
            let time_us = at.checked_sub(1).and_then(|i| trace.get(i)).map_or(0, |e| e.time_us);
            let name = v.invariant.name();
            // The snapshots name events by index: those at or after the inserted line move down one.
            for s in self.log_snapshots.iter_mut().filter(|s| s.event >= at) {
                s.event += 1;
            }
            trace.insert(
                at,
                TraceEvent {
                    time_us,
                    node: "checker".into(),
                    kind: "violation",
                    text: format!(
                        "VIOLATION {name} happened here (found by the history check at the end): {}",
                        v.witness
                    ),
                    fields: serde_json::json!({"invariant": name, "found_at_end": true}),
                },
            );
        }
    }

    fn final_checks(&mut self) {
        let names: Vec<String> = self.producers.keys().cloned().collect();
        for name in &names {
            self.abandon_pending(name);
        }
        self.check_broker();
        self.check_replicas();
        self.close_hw_lag();
        let taken = self.take_leader_logs();
        self.final_checks_on(&taken.logs);
        self.put_back(taken);
    }

    /// The end-of-run checks that read the partitions, on the leaders' logs.
    fn final_checks_on(&mut self, logs: &BTreeMap<TopicPartition, PartitionLog>) {
        let readers: Vec<(String, txnsim_engine::TopicPartition, Offset)> = self
            .consumers
            .iter()
            .filter(|(n, s)| {
                s.consumer.isolation == IsolationLevel::ReadCommitted && self.processor_of_member(n).is_none()
            })
            .flat_map(|(n, s)| {
                self.partitions.iter().map(move |tp| (n.clone(), tp.clone(), s.consumer.position(tp).unwrap_or(0)))
            })
            .collect();
        let view = ClusterView {
            partitions: logs,
            coordinator: Some(&self.brokers[&self.coordinator_broker()].coordinator),
            mutations: &self.config.mutations,
        };
        let mut violations = check_liveness(&view, &readers);
        let from_history = check_history(&self.history, logs);
        let mut flags = Vec::new();
        for v in from_history {
            if let Some(at) = self.trace.is_some().then(|| self.history_violation_at(&v, logs)).flatten() {
                flags.push((at, v.clone()));
            }
            violations.push(v);
        }
        let delivery_timeout = |_: &str| self.config.delivery_timeout_ms;
        violations.extend(check_delivery_timeouts(&self.history, &delivery_timeout, &self.pauses, self.now_ms()));
        if intent_claimed(self.config.transaction_version) {
            violations.extend(check_committed_sends(&self.history, logs));
            violations.extend(check_failed_sends(&self.history, logs));
        }
        for (tp, log) in logs {
            let m = &self.config.mutations;
            let (ru, _) = read_to_end(log, IsolationLevel::ReadUncommitted, log.log_start_offset(), m);
            let (rc, _) = read_to_end(log, IsolationLevel::ReadCommitted, log.log_start_offset(), m);
            violations.extend(check_read_superset(tp, 0, &ru, &rc));
        }
        violations.extend(self.check_processing(logs));
        for v in violations {
            self.record(v.invariant.name(), v.witness);
        }
        self.flag_history_violations(flags);
        let c = &self.brokers[&self.coordinator_broker()].coordinator;
        let count = |f: &dyn Fn(&txnsim_engine::coordinator::TxnDecision) -> bool| {
            c.decisions.iter().filter(|d| f(d)).count() as u64
        };
        self.stats.committed = count(&|d| d.result == TransactionResult::Commit);
        self.stats.aborted = count(&|d| d.result == TransactionResult::Abort && d.cause == DecisionCause::Client);
        self.stats.timed_out = count(&|d| d.cause == DecisionCause::Timeout);
        self.stats.fenced = count(&|d| d.cause == DecisionCause::Fence);
        self.stats.sim_ms = self.now_ms();
        let states: Vec<String> = self
            .producers
            .iter()
            .filter_map(|(n, s)| s.producer.as_ref().map(|p| format!("{n} {}", state_name(p.state))))
            .collect();
        let text = format!(
            "END committed {} aborted {} timed-out {} fenced {}; producers: {}",
            self.stats.committed,
            self.stats.aborted,
            self.stats.timed_out,
            self.stats.fenced,
            states.join(", ")
        );
        self.trace("sim", "end", || text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_task_outlives_its_run_holding_the_world() {
        // Seeds of two profiles, with faults that leave timers and held messages pending at the end.
        for (seed, profile) in [(3, Profile::Standard), (5, Profile::Atomicity)] {
            let spec = RunSpec::new(seed, profile, None);
            let (report, outliving) = std::thread::spawn(move || run_on_this_thread(&spec)).join().expect("runs");
            assert!(report.stats.messages > 0, "seed {seed} {profile} ran nothing");
            assert_eq!(
                outliving, 0,
                "seed {seed} {profile}: madsim tasks kept the world alive (a sweep would leak it)"
            );
        }
    }
}
