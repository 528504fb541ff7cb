//! The simulated cluster's shared state: the engine nodes, what clients observed, the fault state and the
//! trace. Every madsim task (node message loops, timers, the supervisor) locks it for one synchronous step
//! and releases it before awaiting; the engine stays sans-io and the sim only moves `Envelope`s and timers.
//!
//! In layers, as TigerBeetle's simulator is (`testing/cluster`, `cluster/network`, its checkers):
//! - `nodes`: the hosts' lifecycle (start, crash, restart, incarnations) and each node's step on a
//!   message or timer.
//! - `network`: what a step sends (`Outgoing`), its path over madsim's network, and the faults that act
//!   per message (lost answers, delays) and refused connections.
//! - `replicas`: which broker's replica stands for each partition and the coordinator (`standing_leader`).
//! - `checks`: when and which invariants run (after a broker step, a truncation, a leader change).
//! - `controller`: the KRaft controller's steps and its outage during a failover.
//! - `clients`: the workload's producers and consumers, their calls recorded in the history.

use crate::profile::{EosParams, ProfileParams, Swarm};
use crate::rng::SimRng;
use crate::trace::{LogSnapshot, ReplicaNow, TraceEvent};
use madsim::runtime::Handle;
use madsim::time::Instant;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use txnsim_engine::controller::{Controller, Topology};
use txnsim_engine::protocol::NodeId;
use txnsim_engine::topic::COORDINATOR_BROKER;
use txnsim_engine::{Broker, Consumer, EngineConfig, Offset, TopicPartition};
use txnsim_properties::{Event, History, MonotonicityChecker, Pause, StateChecker};

mod checks;
mod clients;
mod controller;
mod network;
mod nodes;
mod processors;
mod replicas;

use checks::UncommittedLoad;
pub use clients::{ConsumerSlot, ProducerSlot};
use controller::Held;
pub use network::{send_all, Outgoing, Wire, TAG};
pub use nodes::{broker_id, broker_name, is_broker, node_key, NodeSlot, PORT};
use nodes::{broker_key, ip_of, is_client, Deadline};
pub use processors::ProcessorSlot;
use replicas::BrokerSummary;
pub use replicas::LeaderLogs;

pub type Shared = Arc<Mutex<World>>;

/// Locks the world; a panic elsewhere (an engine assertion) must not hide what was recorded so far.
pub fn lock(shared: &Shared) -> MutexGuard<'_, World> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// The broker clients bootstrap to, and the transaction coordinator's first host (it moves with the
/// leadership of `__transaction_state` on a replicated cluster: `World::coordinator_broker`).
pub const BROKER: u32 = COORDINATOR_BROKER;

/// The controller's node name (`CONTROLLER_ID` in the engine).
pub const CONTROLLER: &str = "controller";

/// One violated invariant (or an engine panic), first occurrence, with how many times it was seen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Found {
    pub invariant: String,
    pub witness: String,
    pub at_ms: u64,
    pub count: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Producer calls invoked.
    pub ops: u64,
    pub polls: u64,
    pub delivered: u64,
    pub messages: u64,
    /// Coordinator decisions by kind, read at the end of the run.
    pub committed: u64,
    pub aborted: u64,
    pub timed_out: u64,
    pub fenced: u64,
    pub faults: u64,
    /// Faults injected, by kind; answer faults by kind and API ("lose-answer EndTxn").
    pub fault_counts: BTreeMap<String, u64>,
    pub sim_ms: u64,
    /// Replication activity: ISR changes the controller committed, leader changes, follower
    /// truncations (a log end that moved back), and the time partitions spent with their leader's HW
    /// below its LEO (summed over partitions).
    pub isr_shrinks: u64,
    pub isr_expands: u64,
    pub leader_changes: u64,
    /// The eos profile's loop: the group's highest generation (each one a rebalance), processor
    /// transactions that committed and that did not (aborted, failed or fenced), those fenced as zombies
    /// (a stale generation or producer epoch), members that left their group, and at the end the
    /// committed outputs and the committed inputs below the group's offsets.
    #[serde(skip_serializing_if = "is_zero")]
    pub rebalances: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub processor_commits: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub processor_aborts: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub zombies_fenced: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub leaves: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub outputs: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub inputs_consumed: u64,
    /// Leader changes of `__transaction_state`: the coordinator moved to another broker.
    pub coordinator_moves: u64,
    pub truncations: u64,
    pub hw_below_leo_ms: u64,
    /// Controllers elected after the active one failed (`controller-failover`).
    pub controller_failovers: u64,
    /// Coordinator loads that took in `__transaction_state` records above the log's HW: Kafka loads to
    /// the log end (`TransactionStateManager.loadTransactionMetadata`, `FetchIsolation.LOG_END`).
    pub loads_above_hw: u64,
    /// Of those, loads whose records the next coordinator's log did not have: whatever the coordinator
    /// did on them rested on records never committed (the hanging transactions' family, docs/sim-output.md).
    pub lost_loads: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

pub struct World {
    pub params: ProfileParams,
    pub swarm: Swarm,
    pub config: EngineConfig,
    pub rng: SimRng,
    /// The runtime's clock, read directly: `Instant::now` reaches it through madsim's `clock_gettime`
    /// hook, which looks up the runtime and clones its handle on every call.
    clock: madsim::time::TimeHandle,
    /// The runtime, kept while the run lasts (`Handle::current` clones it from a thread-local on every
    /// call). `release_tasks` drops it: the runtime's tasks hold the world, so keeping it would leak both.
    pub runtime: Option<Handle>,
    pub start: Instant,
    pub nodes: BTreeMap<String, NodeSlot>,
    /// Every broker by id; `coordinator_broker` names the transaction coordinator's.
    pub brokers: BTreeMap<u32, Broker>,
    /// The controller of a replicated cluster (none on a single broker, which leads all it has).
    pub controller: Option<Controller>,
    /// While no controller is active (a failover's election), what waits for the next one, in order.
    controller_outage: Option<Vec<Held>>,
    pub brokers_started: BTreeSet<u32>,
    pub brokers_down: BTreeSet<u32>,
    /// Deadlines a wake-up task is already waiting for, per broker and kind.
    wakeups: BTreeMap<(u32, Deadline), BTreeSet<u64>>,
    /// What the checks read of each broker, re-read after each of its steps (`step_broker`).
    summaries: BTreeMap<u32, BrokerSummary>,
    /// The coordinator's part of `fingerprint` (its broker and load epoch first), re-read after each
    /// broker step.
    coordinator_fp: [u64; 8],
    /// The coordinator (broker, load epoch) the state checker last read.
    checked_coordinator: [u64; 2],
    /// Each partition's view broker and its leader epoch there (`view_broker`), from `summaries`.
    view: Vec<(u32, i32)>,
    /// Each partition's leader and leader epoch as the checkers last read them (in `partitions`'
    /// order): a change starts the state checkers afresh on the new leader's log (its HW may lag the old
    /// leader's, as in Kafka).
    last_leaders: Vec<(u32, i32)>,
    /// Per partition, since when its leader's HW has been below its LEO.
    hw_lag_since: BTreeMap<TopicPartition, u64>,
    /// Per partition (in `partitions`' order), the highest HW its leaders reached, as the history's
    /// `leader_high_watermarks` last recorded it.
    leader_hw_peaks: Vec<Offset>,
    /// Each broker's coordinator load as last seen (`TransactionStateManager::loaded_at`).
    loads_seen: BTreeMap<u32, i32>,
    /// The newest load that took in records above the HW, until the next load judges it.
    uncommitted_load: Option<UncommittedLoad>,
    /// The first load whose uncommitted records the next coordinator's log lacked, in words.
    pub lost_load: Option<String>,
    pub producers: BTreeMap<String, ProducerSlot>,
    pub consumers: BTreeMap<String, ConsumerSlot>,
    /// The eos profile's processors, by name (each also a producer and, as `wN.in`, a consumer).
    pub processors: BTreeMap<String, ProcessorSlot>,
    pub partitions: Vec<TopicPartition>,
    /// The partitions the workload's producers write: the eos profile's input topic, else all.
    pub workload_partitions: Vec<TopicPartition>,
    pub history: History,
    next_call_id: u64,
    next_value: BTreeMap<String, u64>,
    pub found: Vec<Found>,
    mono: MonotonicityChecker,
    /// The state invariants read incrementally: re-checking every log from offset 0 after each broker
    /// step was a tenth of a sweep's time.
    state: StateChecker,
    last_fingerprint: Vec<u64>,
    pub stats: Stats,
    pub trace: Option<Vec<TraceEvent>>,
    /// With a trace: for each history event, how many trace events preceded it (to flag a history
    /// violation at the event where it happened).
    pub history_marks: Vec<usize>,
    /// While tracing: the leaders' logs after each broker event that changed them (`replay --html`).
    pub log_snapshots: Vec<LogSnapshot>,
    pub healing: bool,
    pub wire_node: Option<madsim::task::NodeId>,
    pub clogged_nodes: BTreeSet<String>,
    pub clogged_links: BTreeSet<(String, String)>,
    pub paused: BTreeSet<String>,
    /// Every pause so far, for `send-answered-within-delivery-timeout` (an open one ends at `TimeMs::MAX`).
    pub pauses: Vec<Pause>,
    /// Generation of the network-wide config fault, so an old restore does not undo a newer fault.
    pub net_fault_generation: u64,
    /// Client requests travel under a run-wide correlation id: wire id -> (client, its instance, the
    /// client's own id). A client's ids restart with each instance; on the wire they never repeat, so an
    /// answer reaches only the instance (connection) that asked.
    wire_requests: BTreeMap<u64, (String, u32, u64)>,
    next_wire_id: u64,
    /// When the last message a fault delayed arrives (healing delays none, so none arrives later).
    delays_until_ms: u64,
}

impl World {
    pub fn new(params: ProfileParams, swarm: Swarm, config: EngineConfig, rng: SimRng, trace: bool) -> World {
        let topics: BTreeMap<String, u32> = params.topics.iter().cloned().collect();
        let (brokers, controller) = if params.brokers <= 1 {
            (BTreeMap::from([(BROKER, Broker::new(BROKER, &topics, config.clone()))]), None)
        } else {
            // Kafka's striped placement: leaders spread, and a one-partition topic is led by a broker
            // other than the coordinator's.
            let topology = Topology::striped(params.brokers, params.replication_factor);
            let config = topology.bound(config.clone());
            let controller = Controller::new(&topics, &topology, &config);
            let brokers = (0..params.brokers)
                .map(|id| (id, Broker::with_registrations(id, &controller.partitions, config.clone())))
                .collect();
            (brokers, Some(controller))
        };
        let partitions: Vec<TopicPartition> =
            topics.iter().flat_map(|(t, n)| (0..*n).map(move |p| TopicPartition::new(t, p))).collect();
        let mut names: Vec<String> = brokers.keys().map(|id| broker_name(*id)).collect();
        if controller.is_some() {
            names.push(CONTROLLER.to_string());
        }
        names.extend(params.producers.iter().map(|p| p.name.clone()));
        names.extend(params.consumers.iter().map(|c| c.name.clone()));
        let processors: Vec<String> = params.eos.iter().flat_map(|e| e.processor_names()).collect();
        names.extend(processors.iter().map(|p| EosParams::member_of(p)));
        let workload_partitions = match &params.eos {
            Some(eos) => partitions.iter().filter(|tp| tp.topic == eos.input_topic).cloned().collect(),
            None => partitions.clone(),
        };
        let nodes = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), NodeSlot { id: None, addr: ip_of(i), incarnation: 0, endpoint: None }))
            .collect();
        let producers = params
            .producers
            .iter()
            .map(|s| {
                let slot = ProducerSlot {
                    spec: s.clone(),
                    producer: None,
                    pending: BTreeMap::new(),
                    plan: None,
                    stall_until_ms: 0,
                    restarts: 0,
                };
                (s.name.clone(), slot)
            })
            .collect();
        let mut history = History::default();
        let mut consumers = BTreeMap::new();
        for c in &params.consumers {
            let mut consumer = Consumer::new(&c.name, c.isolation, NodeId::Broker(BROKER), config.clone());
            for tp in &partitions {
                consumer.seek(tp.clone(), 0);
                history.push(Event::Seek { time_ms: 0, consumer: c.name.clone(), partition: tp.clone(), offset: 0 });
            }
            consumers.insert(c.name.clone(), ConsumerSlot { consumer, seeks: c.seeks, polls: BTreeMap::new() });
        }
        let initial_events = history.events.len();
        let clock = madsim::time::TimeHandle::current();
        let mut world = World {
            params,
            swarm,
            config,
            rng,
            start: clock.now_instant(),
            clock,
            runtime: Some(Handle::current()),
            nodes,
            brokers,
            controller,
            controller_outage: None,
            brokers_started: BTreeSet::new(),
            brokers_down: BTreeSet::new(),
            delays_until_ms: 0,
            wakeups: BTreeMap::new(),
            summaries: BTreeMap::new(),
            coordinator_fp: [0; 8],
            checked_coordinator: [0; 2],
            view: Vec::new(),
            last_leaders: Vec::new(),
            hw_lag_since: BTreeMap::new(),
            leader_hw_peaks: vec![0; partitions.len()],
            loads_seen: BTreeMap::new(),
            uncommitted_load: None,
            lost_load: None,
            producers,
            consumers,
            processors: processors.iter().map(|p| (p.clone(), ProcessorSlot::default())).collect(),
            partitions,
            workload_partitions,
            history,
            next_call_id: 0,
            next_value: BTreeMap::new(),
            found: Vec::new(),
            mono: MonotonicityChecker::default(),
            state: StateChecker::default(),
            last_fingerprint: Vec::new(),
            stats: Stats::default(),
            trace: trace.then(Vec::new),
            history_marks: if trace { vec![0; initial_events] } else { Vec::new() },
            log_snapshots: Vec::new(),
            healing: false,
            wire_node: None,
            clogged_nodes: BTreeSet::new(),
            clogged_links: BTreeSet::new(),
            paused: BTreeSet::new(),
            pauses: Vec::new(),
            net_fault_generation: 0,
            wire_requests: BTreeMap::new(),
            next_wire_id: 0,
        };
        for id in world.brokers.keys().copied().collect::<Vec<u32>>() {
            world.refresh_summary(id);
        }
        for p in processors {
            let consumer = world.new_member(&p);
            world
                .consumers
                .insert(EosParams::member_of(&p), ConsumerSlot { consumer, seeks: false, polls: BTreeMap::new() });
        }
        world
    }

    fn runtime(&self) -> &Handle {
        self.runtime.as_ref().expect("the run has not released its tasks")
    }

    pub fn now_ms(&self) -> u64 {
        (self.clock.now_instant() - self.start).as_millis() as u64
    }

    pub fn trace(&mut self, node: &str, kind: &'static str, text: impl FnOnce() -> String) {
        self.trace_with(node, kind, || (text(), Value::Null));
    }

    /// A trace event with fields; `event` runs only when tracing.
    pub fn trace_with(&mut self, node: &str, kind: &'static str, event: impl FnOnce() -> (String, Value)) {
        let Some(trace) = self.trace.as_mut() else { return };
        let time_us = (self.clock.now_instant() - self.start).as_micros() as u64;
        let (text, fields) = event();
        trace.push(TraceEvent { time_us, node: node.to_string(), kind, text, fields });
    }

    /// Appends to the history, remembering where in the trace it happened.
    pub fn push_history(&mut self, e: Event) {
        if let Some(trace) = &self.trace {
            self.history_marks.push(trace.len());
        }
        self.history.push(e);
    }

    /// `t/0 LEO/HW/LSO` for every partition (its leader's log), as broker lines end, and the same as
    /// fields.
    pub fn partitions_summary(&self) -> (String, Value) {
        let m = &self.config.mutations;
        let mut text = Vec::new();
        let mut fields = serde_json::Map::new();
        for tp in &self.partitions {
            let log = self.view_log(tp);
            let (leo, hw, lso) = (log.log_end_offset(), log.high_watermark(), log.last_stable_offset(m));
            text.push(format!("{tp} {leo}/{hw}/{lso}"));
            fields.insert(tp.to_string(), json!({"leo": leo, "hw": hw, "lso": lso}));
        }
        (text.join(" "), Value::Object(fields))
    }

    /// Every replica of each partition with more than one, as the leader the picture draws sees them:
    /// its assignment and ISR, each replica's own log (borrowed), and which brokers are down.
    fn replicas_now(&self) -> Vec<(&TopicPartition, Vec<ReplicaNow<'_>>)> {
        let mut out = Vec::new();
        for tp in &self.partitions {
            let leader = self.view_broker(tp);
            let Some(state) = self.brokers[&leader].replica_manager.partitions.get(tp) else { continue };
            if state.replicas.len() < 2 {
                continue;
            }
            let replicas = state.replicas.iter().filter_map(|&id| {
                let log = self.brokers.get(&id)?.partition(tp)?;
                let (in_isr, down) = (state.isr.contains(&id), self.brokers_down.contains(&id));
                Some(ReplicaNow { broker: id, leader: id == leader, in_isr, down, log })
            });
            out.push((tp, replicas.collect()));
        }
        out
    }

    fn trace_broker(&mut self, id: u32, kind: &'static str, what: impl FnOnce() -> (String, Value)) {
        if self.trace.is_none() {
            return;
        }
        let (summary, partitions) = self.partitions_summary();
        let replicas = self.replicas_now();
        let changed = self.log_snapshots.last().is_none_or(|s| {
            s.differs(&partitions, self.partitions.iter().map(|tp| (tp, self.view_log(tp))), &replicas)
        });
        if changed {
            let event = self.trace.as_ref().map_or(0, Vec::len);
            let logs = self.partitions.iter().map(|tp| (tp.clone(), self.view_log(tp).clone())).collect();
            let replicas =
                replicas.into_iter().map(|(tp, r)| (tp.clone(), r.iter().map(ReplicaNow::snapshot).collect()));
            let replicas = replicas.collect();
            self.log_snapshots.push(LogSnapshot { event, partitions: partitions.clone(), logs, replicas });
        }
        let (text, mut fields) = what();
        if fields.is_null() {
            fields = json!({});
        }
        fields["partitions"] = partitions;
        self.trace_with(&broker_name(id), kind, move || (format!("{text} | LEO/HW/LSO {summary}"), fields));
    }

    /// Counts one injected fault under `kind` (the sweep report's per-kind counts).
    pub fn count_fault(&mut self, kind: String) {
        self.stats.faults += 1;
        *self.stats.fault_counts.entry(kind).or_default() += 1;
    }
}
