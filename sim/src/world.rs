//! The simulated cluster's shared state: the engine nodes, what clients observed, the fault state and the
//! trace. Every madsim task (node message loops, timers, the supervisor) locks it for one synchronous step
//! and releases it before awaiting; the engine stays sans-io and the sim only moves `Envelope`s and timers.

use crate::describe::{message_fields, show_call, show_outcome};
use crate::profile::{FaultKind, ProducerSpec, ProfileParams, Swarm};
use crate::rng::SimRng;
use crate::trace::{timer_name, LogSnapshot, ReplicaNow, TraceEvent, IDLE_TIMER};
use crate::workload::TxnPlan;
use madsim::net::Endpoint;
use madsim::runtime::Handle;
use madsim::time::{Duration, Instant};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use txnsim_engine::broker::standing_coordinator;
use txnsim_engine::controller::{Controller, Topology};
use txnsim_engine::producer::{Completion, OpId};
use txnsim_engine::protocol::metadata::PartitionRegistration;
use txnsim_engine::protocol::{Effects, Envelope, Message, NodeId, Timer};
use txnsim_engine::protocol::{CONTROLLER_ID, NO_LEADER};
use txnsim_engine::topic::transaction_state_partition;
use txnsim_engine::topic::COORDINATOR_BROKER;
use txnsim_engine::{
    Broker, Consumer, EngineConfig, IsolationLevel, KafkaError, Offset, PartitionLog, Producer, ProducerKind, TimeMs,
    TopicPartition, TxnManagerState,
};
use txnsim_properties::{
    standing_leader, CallOutcome, ClusterView, Event, History, LeaderHighWatermark, MonotonicityChecker, Pause,
    ProducerCall, StateChecker, Violation,
};

pub type Shared = Arc<Mutex<World>>;

/// Locks the world; a panic elsewhere (an engine assertion) must not hide what was recorded so far.
pub fn lock(shared: &Shared) -> MutexGuard<'_, World> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

pub const PORT: u16 = 9092;
pub const TAG: u64 = 7;
/// The broker clients bootstrap to, and the transaction coordinator's first host (it moves with the
/// leadership of `__transaction_state` on a replicated cluster: `World::coordinator_broker`).
pub const BROKER: u32 = COORDINATOR_BROKER;
/// The controller's node name (`CONTROLLER_ID` in the engine).
pub const CONTROLLER: &str = "controller";

/// What travels over madsim's network: the engine's envelope, plus the incarnation of the receiver it was
/// sent to. A restarted node never sees messages addressed to its previous life (a TCP connection reset).
pub struct Wire {
    pub env: Envelope,
    pub dst_incarnation: u32,
}

/// A send waiting for the lock to be released; `delay` holds it in the network (a fault). The receiver's
/// incarnation is fixed when the message is sent: a held message never reaches the receiver's next life.
pub struct Outgoing {
    pub from: String,
    pub env: Envelope,
    pub dst_incarnation: u32,
    pub delay: Option<Duration>,
    /// A broker's request to a broker that is down: its connection is refused, and the sender hears so
    /// (`Message::disconnected_answer`) after `RECONNECT_BACKOFF`.
    pub refused: bool,
}

/// `reconnect.backoff.ms` (default 50): how soon a refused connection's request fails back to its sender.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(50);

/// Controller traffic's latency: it travels in order and is never lost (`send_all`).
const CONTROLLER_LATENCY: Duration = Duration::from_millis(1);

/// To or from the controller. KRaft brokers replicate the metadata log, and `AlterPartitionManager`
/// retries an unanswered request; the engine's controller sends each record once and its brokers
/// propose an ISR change once, so a lost or reordered message would stall a partition forever: this
/// traffic goes in order and is never lost or held by a fault.
fn is_controller_traffic(env: &Envelope) -> bool {
    env.from == NodeId::Broker(CONTROLLER_ID) || env.to == NodeId::Broker(CONTROLLER_ID)
}

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

/// A coordinator's load that took in records above its log's HW: the last such batch, to look for in
/// the next coordinator's log.
struct UncommittedLoad {
    broker: u32,
    leader_epoch: i32,
    high_watermark: Offset,
    log_end: Offset,
    /// The last loaded batch's base offset and leader epoch.
    last_batch: (Offset, i32),
}

/// What waits for the next controller while none is active (`World::controller_outage`).
enum Held {
    /// A broker's request (AlterPartition), with the sending broker's instance: its channel to the
    /// controller (`NodeToControllerChannelManager`) resends it to the new one unless that broker died.
    Request { env: Envelope, incarnation: u32 },
    /// A broker died: the new controller's fresh heartbeat manager fences it
    /// (`ClusterControlManager.activate`).
    Fenced(u32),
    /// A dead broker's restart: it registers with the new controller and serves only once unfenced.
    Restart(u32),
}

pub struct NodeSlot {
    pub id: Option<madsim::task::NodeId>,
    pub addr: SocketAddr,
    pub incarnation: u32,
    pub endpoint: Option<Endpoint>,
}

pub struct ProducerSlot {
    pub spec: ProducerSpec,
    /// `None` while the process is down (between a kill and its restart).
    pub producer: Option<Producer>,
    /// Calls awaiting their completion: op id of the current instance -> (history call id, whether the
    /// call blocks the application as Kafka's init/commit/abort do).
    pub pending: BTreeMap<OpId, (u64, bool)>,
    pub plan: Option<TxnPlan>,
    /// The application does nothing until then (a stall inside a transaction).
    pub stall_until_ms: u64,
    pub restarts: u32,
}

pub struct ConsumerSlot {
    pub consumer: Consumer,
    pub seeks: bool,
    /// Fetches in flight: correlation id -> (partition, fetch offset).
    pub polls: BTreeMap<u64, (TopicPartition, Offset)>,
}

/// Every partition's leader log, moved out of its broker (`World::take_leader_logs`), and the brokers
/// they came from.
pub struct LeaderLogs {
    pub logs: BTreeMap<TopicPartition, PartitionLog>,
    owners: Vec<u32>,
}

/// What the leader lookups and the state checks' fingerprint read of one broker. Only the broker's own
/// step changes it, so after a step the sim reads that broker's maps once, where it read every broker's
/// for every partition several times (a sixth of a 3-broker sweep's time).
#[derive(Default)]
struct BrokerSummary {
    /// Per partition (in `partitions`' order), where the broker hosts a replicated replica: the leader it
    /// knows and that leader's epoch.
    claims: Vec<Option<(u32, i32)>>,
    /// Per partition, its log's LEO, HW, LSO and aborted-index length, where it hosts one.
    logs: Vec<Option<[u64; 4]>>,
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
    /// Replication deadlines a wake-up task is already waiting for, per broker.
    replication_wakeups: BTreeMap<u32, BTreeSet<u64>>,
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
    pub partitions: Vec<TopicPartition>,
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

fn ip_of(index: usize) -> SocketAddr {
    let ip = std::net::Ipv4Addr::new(10, 0, (index / 200) as u8, (index % 200 + 1) as u8);
    SocketAddr::new(ip.into(), PORT)
}

pub fn broker_name(id: u32) -> String {
    NodeId::Broker(id).to_string()
}

const BROKER_NAMES: [&str; 5] = ["broker-0", "broker-1", "broker-2", "broker-3", "broker-4"];

/// Broker nodes are named `broker-<id>` (NodeId's display), clients by their own name.
pub fn is_broker(name: &str) -> bool {
    name.starts_with("broker-")
}

/// The id of broker node `name`.
pub fn broker_id(name: &str) -> u32 {
    name["broker-".len()..].parse().expect("a broker node's name")
}

/// Producers and consumers: their requests travel under run-wide correlation ids.
fn is_client(name: &str) -> bool {
    !is_broker(name) && name != CONTROLLER
}

/// The node name an engine id travels to, without allocating for clients.
pub fn node_key(id: &NodeId) -> std::borrow::Cow<'_, str> {
    match id {
        NodeId::Client(name) => std::borrow::Cow::Borrowed(name.as_str()),
        NodeId::Broker(CONTROLLER_ID) => std::borrow::Cow::Borrowed(CONTROLLER),
        NodeId::Broker(b) => broker_key(*b),
    }
}

/// `broker_name`, without allocating for the first brokers (a lookup at every replication step).
fn broker_key(id: u32) -> std::borrow::Cow<'static, str> {
    match BROKER_NAMES.get(id as usize) {
        Some(name) => std::borrow::Cow::Borrowed(name),
        None => std::borrow::Cow::Owned(broker_name(id)),
    }
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
            replication_wakeups: BTreeMap::new(),
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
            partitions,
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
        world
    }

    /// Ends `name`'s pause, if it is paused; returns whether it was.
    pub fn resume(&mut self, name: &str) -> bool {
        let now = self.now_ms();
        if let Some(p) = self.pauses.iter_mut().rev().find(|p| p.process == name && p.to_ms == TimeMs::MAX) {
            p.to_ms = now;
        }
        self.paused.remove(name)
    }

    fn runtime(&self) -> &Handle {
        self.runtime.as_ref().expect("the run has not released its tasks")
    }

    pub fn now_ms(&self) -> u64 {
        (self.clock.now_instant() - self.start).as_millis() as u64
    }

    // ---------------------------------------------------------------- trace

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

    // ---------------------------------------------------------------- replicas

    /// The broker whose replica of `tp` stands for the partition (`standing_leader`); on a single
    /// broker, that broker.
    pub fn view_broker(&self, tp: &TopicPartition) -> u32 {
        let id = match self.partitions.binary_search(tp) {
            Ok(i) => self.view[i].0,
            Err(_) => self.scan_view_broker(tp),
        };
        debug_assert_eq!(id, self.scan_view_broker(tp), "the leader cache of {tp} is stale");
        id
    }

    /// `view_broker` read from every broker's replica state (a partition outside `partitions`, and the
    /// check of the cache in debug builds).
    fn scan_view_broker(&self, tp: &TopicPartition) -> u32 {
        let known = self.brokers.values().filter_map(|b| b.replica_manager.partitions.get(tp));
        standing_leader(known.map(|p| (p.leader, p.leader_epoch))).map_or(BROKER, |(leader, _)| leader)
    }

    /// Runs `f` on broker `id` (any change to its state goes through here), then re-reads what its
    /// replica state says of each partition's leader.
    fn step_broker<R>(&mut self, id: u32, f: impl FnOnce(&mut Broker) -> R) -> R {
        let r = f(self.brokers.get_mut(&id).expect("a broker"));
        self.refresh_summary(id);
        r
    }

    /// `summaries` of broker `id` (and the coordinator's part of the fingerprint on its broker), then
    /// `view` if the broker's claims changed.
    fn refresh_summary(&mut self, id: u32) {
        let m = &self.config.mutations;
        let b = &self.brokers[&id];
        let claims =
            self.partitions.iter().map(|tp| b.replica_manager.partitions.get(tp).map(|p| (p.leader, p.leader_epoch)));
        let logs = self.partitions.iter().map(|tp| {
            let log = b.replica_manager.logs.get(tp)?;
            let aborted = log.aborted_index().count() as u64;
            Some([log.log_end_offset(), log.high_watermark(), log.last_stable_offset(m), aborted])
        });
        let coordinator = self.coordinator_broker();
        // Another broker's step leaves the coordinator's state as it was, unless it changed who coordinates.
        if id == coordinator || self.coordinator_fp[0] != coordinator as u64 {
            let host = &self.brokers[&coordinator];
            let c = &host.coordinator;
            self.coordinator_fp = [
                coordinator as u64,
                host.txn_manager.loaded_at.map_or(0, |e| e as u64 + 1),
                c.coordinator_epoch as u64,
                c.decisions.len() as u64,
                c.decisions.iter().filter(|d| d.completed).count() as u64,
                c.pending_completions.values().map(|p| p.remaining.len() as u64 + 1).sum(),
                c.txns.values().map(|t| t.transitions.len() as u64).sum(),
                c.txns.values().map(|t| t.topic_partitions.len() as u64).sum(),
            ];
        }
        let summary = self.summaries.entry(id).or_default();
        summary.logs.clear();
        summary.logs.extend(logs);
        // Compared in place: claims change only with leadership.
        if summary.claims.iter().copied().eq(claims.clone()) && self.view.len() == self.partitions.len() {
            return;
        }
        summary.claims.clear();
        summary.claims.extend(claims);
        // As `scan_view_broker` picks: the leader named at the newest leader epoch any broker knows.
        self.view.clear();
        for i in 0..self.partitions.len() {
            let known = self.summaries.values().filter_map(|s| s.claims.get(i).copied().flatten());
            self.view.push(standing_leader(known).unwrap_or((BROKER, 0)));
        }
    }

    /// The broker whose coordinator stands for the cluster's: the one loaded at the newest
    /// `__transaction_state` leader epoch (a crashed one until another loads), broker `BROKER` on a
    /// single broker, and while none has loaded.
    pub fn coordinator_broker(&self) -> u32 {
        self.standing_coordinator().unwrap_or(BROKER)
    }

    /// `broker::standing_coordinator`'s id: `None` on one broker, and while the newest coordinator loads.
    fn standing_coordinator(&self) -> Option<u32> {
        standing_coordinator(self.brokers.values()).map(|b| b.id)
    }

    /// The leader's log of `tp` (`view_broker`).
    pub fn view_log(&self, tp: &TopicPartition) -> &PartitionLog {
        &self.brokers[&self.view_broker(tp)].replica_manager.logs[tp]
    }

    /// Moves every partition's leader log out of its broker: the state checkers read one map of logs, and
    /// a move costs nothing where a copy would cost the logs' size at every step. `put_back` returns them.
    pub fn take_leader_logs(&mut self) -> LeaderLogs {
        self.observe_replication();
        self.take_leader_logs_as_observed()
    }

    /// `take_leader_logs` right after `observe_replication`.
    fn take_leader_logs_as_observed(&mut self) -> LeaderLogs {
        let owners: Vec<u32> = self.last_leaders.iter().map(|(id, _)| *id).collect();
        let mut logs = BTreeMap::new();
        for (tp, id) in self.partitions.iter().zip(&owners) {
            let log = self
                .brokers
                .get_mut(id)
                .and_then(|b| b.replica_manager.logs.remove(tp))
                .expect("a leader hosts its log");
            logs.insert(tp.clone(), log);
        }
        LeaderLogs { logs, owners }
    }

    pub fn put_back(&mut self, taken: LeaderLogs) {
        // `partitions` is in the map's order: topics by name, then partition numbers.
        for ((tp, log), id) in taken.logs.into_iter().zip(taken.owners) {
            self.brokers.get_mut(&id).expect("taken from it").replica_manager.logs.insert(tp, log);
        }
    }

    /// The coordinator's broker with every partition's leader log in place of its own replicas: what the
    /// replay page rebuilds each step's logs from.
    pub fn leader_snapshot(&self) -> Broker {
        let mut broker = self.brokers[&self.coordinator_broker()].clone();
        broker.replica_manager.logs =
            self.partitions.iter().map(|tp| (tp.clone(), self.view_log(tp).clone())).collect();
        broker
    }

    /// Healed and settled, so waiting longer changes nothing the final checks read: every delayed message
    /// has arrived, every broker is up and settled (`Broker::is_settled`) with no verification that can
    /// still be answered, every partition has its whole replica set in the ISR, every replica knows the
    /// controller's registration and holds the leader's log end and HW, and every producer is idle.
    pub fn is_quiescent(&self) -> bool {
        // The healed network delivers within 10 ms; a message still missing after this margin was lost.
        const ARRIVED_MS: u64 = 100;
        let now = self.now_ms();
        let arrived = |sent_ms: u64| now > sent_ms.max(self.delays_until_ms) + ARRIVED_MS;
        let idle = self.producers.values().all(|s| s.producer.as_ref().is_none_or(|p| p.is_idle()));
        let settled = self
            .brokers
            .values()
            .all(|b| b.is_settled() && b.replica_manager.newest_verification_ms().is_none_or(arrived));
        if !arrived(0) || !idle || !self.brokers_down.is_empty() || !settled || self.controller_outage.is_some() {
            return false;
        }
        let Some(controller) = &self.controller else { return true };
        controller.partitions.iter().all(|(tp, reg)| {
            // A partition with no leader (`NO_LEADER`) is not settled either.
            let Some(leader) = self.brokers.get(&reg.state.leader).and_then(|b| b.partition(tp)) else { return false };
            let caught_up = |l: &txnsim_engine::PartitionLog| {
                l.log_end_offset() == leader.log_end_offset() && l.high_watermark() == leader.high_watermark()
            };
            // The controller keeps the ISR within the replicas, so equal sizes mean the whole set.
            reg.state.isr.len() == reg.replicas.len()
                && reg.replicas.iter().all(|r| {
                    let b = &self.brokers[r];
                    b.metadata_image.get(tp) == Some(reg) && b.partition(tp).is_some_and(caught_up)
                })
        })
    }

    /// Every broker's log ends, to see a truncation.
    fn log_ends(&self, id: u32) -> Vec<Offset> {
        self.brokers[&id].replica_manager.logs.values().map(|l| l.log_end_offset()).collect()
    }

    /// The replica invariants over the live brokers (a crashed broker's frozen state is no replica's
    /// word): after a truncation, a leader change and at the end, not after every step (they read
    /// every replica's whole log).
    pub fn check_replicas(&mut self) {
        let down = &self.brokers_down;
        let live = self.brokers.iter().filter(|(id, _)| !down.contains(id)).map(|(_, b)| b);
        let violations = txnsim_properties::check_replicas(live);
        self.record_all(violations);
    }

    /// Leader changes (the state checkers start afresh on the new leader's log), and the time each
    /// partition's leader has its HW below its LEO.
    fn observe_replication(&mut self) {
        if self.view != self.last_leaders {
            let first = self.last_leaders.is_empty();
            self.last_leaders.clone_from(&self.view);
            if !first {
                self.state = StateChecker::default();
                self.mono = MonotonicityChecker::default();
                self.last_fingerprint.clear();
                self.check_replicas();
            }
        }
        for (i, (tp, (id, _))) in self.partitions.iter().zip(&self.view).enumerate() {
            let [leo, hw, ..] = self.summaries[id].logs[i].expect("a leader hosts its log");
            if hw > self.leader_hw_peaks[i] {
                self.leader_hw_peaks[i] = hw;
                let (time_ms, partition) = (self.now_ms(), tp.clone());
                self.history.leader_high_watermarks.push(LeaderHighWatermark {
                    time_ms,
                    partition,
                    high_watermark: hw,
                });
            }
            let lagging = hw < leo;
            match (lagging, self.hw_lag_since.get(tp)) {
                (true, None) => {
                    let now = self.now_ms();
                    self.hw_lag_since.insert(tp.clone(), now);
                }
                (false, Some(&since)) => {
                    self.stats.hw_below_leo_ms += self.now_ms() - since;
                    self.hw_lag_since.remove(tp);
                }
                _ => {}
            }
        }
    }

    /// Ends the HW-below-LEO intervals still open when the run ends.
    pub fn close_hw_lag(&mut self) {
        let now = self.now_ms();
        for (_, since) in std::mem::take(&mut self.hw_lag_since) {
            self.stats.hw_below_leo_ms += now - since;
        }
    }

    /// After a broker step: a log end that moved back is a truncation (checked at once), then the state
    /// checks, and a wake-up for the broker's next replication deadline.
    fn after_broker_step(&mut self, shared: &Shared, id: u32, ends_before: &[Offset]) {
        let ends = self.brokers[&id].replica_manager.logs.values().map(|l| l.log_end_offset());
        let truncated = ends.zip(ends_before).filter(|(a, b)| a < *b).count() as u64;
        if truncated > 0 {
            self.stats.truncations += truncated;
            self.check_replicas();
        }
        self.check_broker();
        self.schedule_replication(shared, id);
    }

    /// After broker `id`'s load timer, if it loaded (a stale timer does not): judges the previous load
    /// that took in uncommitted records (does this log have its last batch?), then notes this one if it
    /// reads past its own HW.
    fn observe_load(&mut self, id: u32) {
        let b = &self.brokers[&id];
        let Some(epoch) = b.txn_manager.loaded_at else { return };
        if self.loads_seen.insert(id, epoch) == Some(epoch) {
            return;
        }
        let Some(log) = b.replica_manager.logs.get(&transaction_state_partition()) else { return };
        if let Some(u) = self.uncommitted_load.take() {
            let (base, batch_epoch) = u.last_batch;
            let kept = log.batches().any(|b| b.base_offset == base && b.partition_leader_epoch == batch_epoch);
            if !kept {
                self.stats.lost_loads += 1;
                self.lost_load.get_or_insert_with(|| {
                    format!(
                        "broker-{}'s coordinator (leader epoch {}) loaded __transaction_state to its log end {}, \
                         above its HW {} (Kafka's load reads to the log end); broker-{}'s log, loaded next at leader \
                         epoch {epoch}, lacks those records",
                        u.broker, u.leader_epoch, u.log_end, u.high_watermark, id
                    )
                });
            }
        }
        let (high_watermark, log_end) = (log.high_watermark(), log.log_end_offset());
        if high_watermark < log_end {
            self.stats.loads_above_hw += 1;
            let last = log.batches().last().expect("a log end above the HW has a batch");
            self.uncommitted_load = Some(UncommittedLoad {
                broker: id,
                leader_epoch: epoch,
                high_watermark,
                log_end,
                last_batch: (last.base_offset, last.partition_leader_epoch),
            });
        }
    }

    /// Counts what a controller step changed (ISR shrinks and expands, leaders) and sends its records.
    fn controller_step(
        &mut self,
        shared: &Shared,
        before: BTreeMap<TopicPartition, PartitionRegistration>,
        effects: Effects,
    ) -> Vec<Outgoing> {
        let after = &self.controller.as_ref().expect("a replicated cluster").partitions;
        for (tp, old) in &before {
            let new = &after[tp].state;
            if new.leader != old.state.leader {
                self.stats.leader_changes += 1;
                if *tp == transaction_state_partition() && new.leader != NO_LEADER {
                    self.stats.coordinator_moves += 1;
                }
            }
            match new.isr.len().cmp(&old.state.isr.len()) {
                std::cmp::Ordering::Less => self.stats.isr_shrinks += 1,
                std::cmp::Ordering::Greater => self.stats.isr_expands += 1,
                std::cmp::Ordering::Equal => {}
            }
        }
        self.dispatch(shared, CONTROLLER, effects)
    }

    /// Runs the controller's `f` (fencing or unfencing a broker) and sends what it decided.
    pub fn controller_do(&mut self, shared: &Shared, f: impl FnOnce(&mut Controller) -> Effects) -> Vec<Outgoing> {
        let Some(c) = self.controller.as_mut() else { return Vec::new() };
        let before = c.partitions.clone();
        let effects = f(c);
        self.controller_step(shared, before, effects)
    }

    /// A task on the broker's node that runs `tick_replication` when its next deadline falls due (one
    /// task per distinct deadline; they die with the node).
    fn schedule_replication(&mut self, shared: &Shared, id: u32) {
        let Some(due) = self.brokers[&id].next_replication_deadline_ms() else { return };
        if !self.replication_wakeups.entry(id).or_default().insert(due) {
            return;
        }
        let slot = &self.nodes[broker_key(id).as_ref()];
        let Some(handle) = slot.id.and_then(|n| self.runtime().get_node(n)) else { return };
        let incarnation = slot.incarnation;
        let at = self.start + Duration::from_millis(due);
        let shared = shared.clone();
        handle.spawn(async move {
            madsim::time::sleep_until(at).await;
            let out = {
                let mut w = lock(&shared);
                w.on_replication_due(&shared, id, incarnation, due)
            };
            Box::pin(send_all(&shared, out)).await;
        });
    }

    fn on_replication_due(&mut self, shared: &Shared, id: u32, incarnation: u32, due: u64) -> Vec<Outgoing> {
        if let Some(set) = self.replication_wakeups.get_mut(&id) {
            set.remove(&due);
        }
        let name = broker_key(id);
        if self.nodes[name.as_ref()].incarnation != incarnation || self.brokers_down.contains(&id) {
            return Vec::new();
        }
        let now = self.now_ms();
        if self.brokers[&id].next_replication_deadline_ms().is_none_or(|d| d > now) {
            self.schedule_replication(shared, id);
            return Vec::new();
        }
        let ends = self.log_ends(id);
        let before = self.trace.is_some().then(|| self.fingerprint().collect::<Vec<u64>>());
        let effects = self.step_broker(id, |b| b.tick_replication(now));
        let idle = effects.sends.is_empty() && before.is_some_and(|fp| self.fingerprint().eq(fp));
        let kind = if idle { IDLE_TIMER } else { "timer" };
        self.trace_broker(id, kind, || ("replication deadline".to_string(), Value::Null));
        self.after_broker_step(shared, id, &ends);
        self.dispatch(shared, &name, effects)
    }

    /// A broker dies (its log survives): the controller fences it at once (its session timeout, taken as
    /// instant, as `Cluster::crash_broker` does) and every producer's connection to it breaks.
    pub fn crash_broker(&mut self, shared: &Shared, id: u32) -> Vec<Outgoing> {
        let name = broker_name(id);
        Handle::current().kill(self.nodes[&name].id.expect("built"));
        self.brokers_down.insert(id);
        self.replication_wakeups.remove(&id);
        self.nodes.get_mut(&name).expect("known").endpoint = None;
        let mut out = match &mut self.controller_outage {
            Some(held) => {
                held.push(Held::Fenced(id));
                Vec::new()
            }
            None => self.controller_do(shared, |c| c.broker_fenced(id)),
        };
        let now = self.now_ms();
        let names: Vec<String> = self.producers.keys().cloned().collect();
        for p in names {
            let Some(producer) = self.producers.get_mut(&p).and_then(|s| s.producer.as_mut()) else { continue };
            let effects = producer.on_disconnect(now, &NodeId::Broker(id));
            self.collect_completions(&p);
            out.extend(self.dispatch(shared, &p, effects));
        }
        out
    }

    /// Restarts dead broker `id`, or holds its restart for the next controller while none is active.
    pub fn restart_broker(&mut self, id: u32) {
        match &mut self.controller_outage {
            Some(held) => {
                if !held.iter().any(|h| matches!(h, Held::Restart(b) if *b == id)) {
                    held.push(Held::Restart(id));
                }
            }
            None => Handle::current().restart(self.nodes[&broker_name(id)].id.expect("built")),
        }
    }

    /// A failover starts from a whole cluster: a restart already on its way could not wait for it.
    pub fn can_fail_over_controller(&self) -> bool {
        self.controller.is_some() && self.controller_outage.is_none() && self.brokers_down.is_empty()
    }

    /// The active controller dies; `election_ms` later its successor, whose state is the committed
    /// metadata log (all the engine's controller holds), takes over what waited.
    pub fn fail_over_controller(&mut self, shared: &Shared, election_ms: u64) {
        assert!(self.can_fail_over_controller(), "a controller failover during another or with a broker down");
        self.controller_outage = Some(Vec::new());
        self.trace(CONTROLLER, "fault", || format!("FAULT controller fails over; next elected in {election_ms} ms"));
        // Spawned here, not through `later`, which locks the world this step already holds.
        let Some(handle) = self.wire_node.and_then(|id| Handle::current().get_node(id)) else { return };
        let shared = shared.clone();
        handle.spawn(async move {
            madsim::time::sleep(Duration::from_millis(election_ms)).await;
            let out = lock(&shared).controller_elected(&shared);
            send_all(&shared, out).await;
        });
    }

    /// The new controller acts on what waited, in order: requests of brokers still on the instance that
    /// sent them, fencings, then held restarts.
    fn controller_elected(&mut self, shared: &Shared) -> Vec<Outgoing> {
        let held = self.controller_outage.take().expect("an election ends an outage");
        self.stats.controller_failovers += 1;
        self.trace(CONTROLLER, "recover", || format!("controller elected; {} held", held.len()));
        let mut out = Vec::new();
        for h in held {
            match h {
                Held::Request { env, incarnation } => {
                    let NodeId::Broker(from) = env.from else { unreachable!("only brokers ask the controller") };
                    let current = self.nodes[broker_key(from).as_ref()].incarnation;
                    if !self.brokers_down.contains(&from) && current == incarnation {
                        out.extend(self.controller_do(shared, |c| c.on_message(env)));
                    }
                }
                Held::Fenced(id) => out.extend(self.controller_do(shared, |c| c.broker_fenced(id))),
                Held::Restart(id) => self.restart_broker(id),
            }
        }
        out
    }

    /// The broker ids of the live partition leaders other than the coordinator's broker.
    pub fn leader_candidates(&self) -> Vec<u32> {
        let leaders: BTreeSet<u32> = self.partitions.iter().map(|tp| self.view_broker(tp)).collect();
        let coordinator = self.coordinator_broker();
        leaders.into_iter().filter(|id| *id != coordinator && !self.brokers_down.contains(id)).collect()
    }

    /// COMMIT or ABORT, for the marker at `offset` of `tp` (a WriteTxnMarkers answer carries only its
    /// offset).
    fn marker_kind(&self, tp: &TopicPartition, offset: Offset) -> Option<&'static str> {
        let log = self.partitions.contains(tp).then(|| self.view_log(tp))?;
        let batch = log.batches().find(|b| b.base_offset <= offset && offset <= b.last_offset)?;
        batch.marker().map(|m| m.result.name())
    }

    // ---------------------------------------------------------------- findings

    pub fn record(&mut self, invariant: &str, witness: String) {
        let at_ms = self.now_ms();
        if let Some(f) = self.found.iter_mut().find(|f| f.invariant == invariant) {
            f.count += 1;
            return;
        }
        let line = format!("VIOLATION {invariant}: {witness}");
        self.trace_with("checker", "violation", || (line, json!({"invariant": invariant})));
        self.found.push(Found { invariant: invariant.to_string(), witness, at_ms, count: 1 });
    }

    fn record_all(&mut self, violations: Vec<Violation>) {
        for v in violations {
            self.record(v.invariant.name(), v.witness);
        }
    }

    /// A cheap summary of everything the state invariants read: unchanged means nothing to re-check.
    /// Per leader log its LEO, HW, LSO and aborted-index length, then the coordinator's epoch, decisions
    /// (all, completed), pending completions, transitions and partitions; read from `summaries`.
    fn fingerprint(&self) -> impl Iterator<Item = u64> + '_ {
        // `observe_replication` ran first: `last_leaders` is current, and a leader change cleared the
        // last fingerprint.
        let logs = self.last_leaders.iter().enumerate();
        logs.flat_map(|(i, (id, _))| self.summaries[id].logs[i].expect("a leader hosts its log"))
            .chain(self.coordinator_fp)
    }

    /// State invariants and LSO/HW monotonicity on the partition leaders' logs and the coordinator,
    /// after a broker step.
    pub fn check_broker(&mut self) {
        self.observe_replication();
        // Compared in place: most steps change nothing the checks read.
        if self.fingerprint().eq(self.last_fingerprint.iter().copied()) {
            return;
        }
        let coordinator = self.coordinator_broker();
        if self.coordinator_fp[..2] != self.checked_coordinator {
            // Another coordinator, or the same one reloaded: its ledger is rebuilt from its own replica
            // of the log, so the decisions are read again from the start.
            self.state = StateChecker::default();
            self.checked_coordinator.copy_from_slice(&self.coordinator_fp[..2]);
        }
        self.last_fingerprint = self.fingerprint().collect();
        let taken = self.take_leader_logs_as_observed();
        // While the newest coordinator loads, none stands: the partitions are checked alone.
        let standing = self.controller.is_none() || self.standing_coordinator().is_some();
        let view = ClusterView {
            partitions: &taken.logs,
            coordinator: standing.then(|| &self.brokers[&coordinator].coordinator),
            mutations: &self.config.mutations,
        };
        let mut violations = self.state.check(&view);
        violations.extend(self.mono.observe(&view));
        if standing {
            violations.extend(txnsim_properties::check_timers(&self.brokers[&coordinator].coordinator));
        }
        self.put_back(taken);
        self.record_all(violations);
    }

    // ---------------------------------------------------------------- dispatch

    /// Timers start as tasks on the node that set them (so they die and pause with it); sends wait until
    /// the lock is released.
    pub fn dispatch(&mut self, shared: &Shared, from: &str, effects: Effects) -> Vec<Outgoing> {
        // The coordinator's `__transaction_state` appends go to its own broker at once (and, replicated,
        // so does their outcome): the sim's faults (loss, clogs) are for links between nodes, and a local
        // call is never lost; its window is the `network` scenarios' to explore.
        let appends = |e: &Effects| {
            e.sends.iter().any(|s| {
                matches!(s.message, Message::TxnLogAppendRequest { .. } | Message::TxnLogAppendResponse { .. })
            })
        };
        let effects = if is_broker(from) && appends(&effects) {
            let now = self.now_ms();
            self.step_broker(broker_id(from), |b| b.write_txn_log_now(now, effects))
        } else {
            effects
        };
        for (due_ms, timer) in effects.timers {
            self.spawn_timer(shared, from, due_ms, timer);
        }
        let client = is_client(from);
        let incarnation = if client { self.nodes[from].incarnation } else { 0 };
        effects
            .sends
            .into_iter()
            .filter_map(|mut env| {
                if is_controller_traffic(&env) {
                    let dst_incarnation = self.nodes[node_key(&env.to).as_ref()].incarnation;
                    return Some(Outgoing {
                        from: from.to_string(),
                        env,
                        dst_incarnation,
                        delay: None,
                        refused: false,
                    });
                }
                if !client && self.lose_answer(&env) {
                    return None;
                }
                if client {
                    self.next_wire_id += 1;
                    self.wire_requests.insert(self.next_wire_id, (from.to_string(), incarnation, env.correlation_id));
                    env.correlation_id = self.next_wire_id;
                }
                let delay = self.draw_delay(&env);
                if let Some(d) = delay {
                    self.delays_until_ms = self.delays_until_ms.max(self.now_ms() + d.as_millis() as u64);
                    let ms = d.as_millis();
                    self.trace("net", "fault", || format!("FAULT hold {} to {} for {ms} ms", env.message, env.to));
                }
                let dst_incarnation = self.nodes.get(node_key(&env.to).as_ref()).map(|n| n.incarnation).unwrap_or(0);
                let refused = is_broker(from)
                    && matches!(env.to, NodeId::Broker(id) if self.brokers_down.contains(&id) || dst_incarnation == 0)
                    && env.message.disconnected_answer().is_some();
                Some(Outgoing { from: from.to_string(), env, dst_incarnation, delay, refused })
            })
            .collect()
    }

    /// Counts one injected fault under `kind` (the sweep report's per-kind counts).
    pub fn count_fault(&mut self, kind: String) {
        self.stats.faults += 1;
        *self.stats.fault_counts.entry(kind).or_default() += 1;
    }

    /// `LoseAnswer`: the broker processed the request, and its answer never arrives.
    fn lose_answer(&mut self, env: &Envelope) -> bool {
        if self.healing
            || !is_txn_answer(&env.message)
            || !self.swarm.has(FaultKind::LoseAnswer)
            || !self.rng.chance(self.swarm.lose_answer_prob)
        {
            return false;
        }
        self.trace("net", "fault", || format!("FAULT lose {} to {}", env.message, env.to));
        self.count_fault(format!("{} {}", FaultKind::LoseAnswer.name(), env.message.api_name()));
        true
    }

    fn draw_delay(&mut self, env: &Envelope) -> Option<Duration> {
        if self.healing {
            return None;
        }
        if is_txn_answer(&env.message)
            && self.swarm.has(FaultKind::DelayAnswer)
            && self.rng.chance(self.swarm.delay_answer_prob)
        {
            // One to two request timeouts: a client's retry of the same request goes out first.
            let timeout = self.params.request_timeout_ms;
            self.count_fault(format!("{} {}", FaultKind::DelayAnswer.name(), env.message.api_name()));
            return Some(Duration::from_millis(self.rng.range(timeout, 2 * timeout)));
        }
        let txn_produce = matches!(&env.message, Message::ProduceRequest { batch, .. } if batch.is_transactional);
        if txn_produce && self.swarm.has(FaultKind::DelayProduce) && self.rng.chance(self.swarm.delay_produce_prob) {
            // Long enough to land after the transaction ended (and often after the next one began).
            let (lo, hi) =
                self.params.delay_produce_ms.unwrap_or((50, (self.params.txn_timeout_ms * 3 / 2).max(1_500)));
            self.count_fault(FaultKind::DelayProduce.name().to_string());
            return Some(Duration::from_millis(self.rng.range(lo, hi)));
        }
        if self.swarm.has(FaultKind::DelayMessage) && self.rng.chance(self.swarm.delay_message_prob) {
            self.count_fault(FaultKind::DelayMessage.name().to_string());
            return Some(Duration::from_millis(self.rng.range(20, 5_000)));
        }
        None
    }

    fn spawn_timer(&mut self, shared: &Shared, node: &str, due_ms: u64, timer: Timer) {
        let slot = &self.nodes[node];
        let Some(id) = slot.id else { return };
        let Some(handle) = self.runtime().get_node(id) else { return };
        let incarnation = slot.incarnation;
        let at = self.start + Duration::from_millis(due_ms);
        let shared = shared.clone();
        let node = node.to_string();
        handle.spawn(async move {
            madsim::time::sleep_until(at).await;
            let out = {
                let mut w = lock(&shared);
                w.on_timer(&shared, &node, incarnation, timer)
            };
            Box::pin(send_all(&shared, out)).await;
        });
    }

    // ---------------------------------------------------------------- node steps

    /// A node (re)started: a new incarnation with a fresh endpoint.
    pub fn on_node_start(&mut self, shared: &Shared, name: &str, endpoint: Endpoint) -> Vec<Outgoing> {
        let now = self.now_ms();
        let slot = self.nodes.get_mut(name).expect("known node");
        slot.incarnation += 1;
        slot.endpoint = Some(endpoint);
        let incarnation = slot.incarnation;
        if is_broker(name) {
            let id = broker_id(name);
            let ends = self.log_ends(id);
            let mut out = Vec::new();
            let effects = if self.brokers_started.contains(&id) {
                assert!(self.controller_outage.is_none(), "broker {id} restarted with no controller to unfence it");
                self.brokers_down.remove(&id);
                // `Cluster::start_broker`: the controller unfences it, and it loads its logs and the
                // controller's current image.
                out = self.controller_do(shared, |c| c.broker_restarted(id));
                let image = self.controller.as_ref().map(|c| c.partitions.clone());
                let e = self.step_broker(id, |broker| match image {
                    Some(image) => broker.restart_with_image(now, &image),
                    None => broker.restart(now),
                });
                let b = &self.brokers[&id];
                let text = if b.txn_manager.loaded_at.is_some() || id == BROKER && self.controller.is_none() {
                    format!(
                        "restarted (instance {incarnation}); coordinator reloaded at epoch {}",
                        b.coordinator.coordinator_epoch
                    )
                } else {
                    format!("restarted (instance {incarnation})")
                };
                self.trace_broker(id, "restart", || (text, Value::Null));
                e
            } else {
                self.brokers_started.insert(id);
                self.step_broker(id, |b| b.start_loaded(now))
            };
            self.after_broker_step(shared, id, &ends);
            out.extend(self.dispatch(shared, name, effects));
            return out;
        }
        if name == CONTROLLER {
            return Vec::new();
        }
        if let Some(slot) = self.producers.get_mut(name) {
            let config = if slot.spec.kind == ProducerKind::Plain {
                // `retries=0`, `max.in.flight.requests.per.connection=1`: a send that times out or loses its
                // connection fails, never resent (a resend could write it twice: `duplicate` holds it to once).
                EngineConfig { retries: 0, max_in_flight_requests_per_connection: 1, ..self.config.clone() }
            } else {
                self.config.clone()
            };
            let mut p = Producer::new(name, slot.spec.kind.clone(), NodeId::Broker(BROKER), config);
            if let Some(c) = &self.controller {
                // `Cluster::bootstrap`: every broker, and the leaders of the producer's first metadata.
                p.set_bootstrap(self.brokers.keys().copied().collect());
                let leaders = c.partitions.iter().filter(|(_, r)| r.state.leader != NO_LEADER);
                p.learn_leaders(leaders.map(|(tp, r)| (tp.clone(), r.state.leader)));
            }
            slot.producer = Some(p);
            slot.plan = None;
            slot.stall_until_ms = 0;
            if incarnation > 1 {
                self.trace_with(name, "restart", || {
                    (format!("started instance {incarnation}"), json!({"instance": incarnation}))
                });
            }
        }
        Vec::new()
    }

    /// A broker's request that reached a later instance of broker `name` than the one it was sent to: the
    /// connection it was sent on died with that instance, so the sender hears it failed.
    fn reset_connection(&self, name: &str, env: Envelope) -> Option<Outgoing> {
        if !is_broker(name) || !matches!(env.from, NodeId::Broker(_)) {
            return None;
        }
        let back = disconnected(env)?;
        let dst_incarnation = self.nodes[node_key(&back.to).as_ref()].incarnation;
        Some(Outgoing { from: name.to_string(), env: back, dst_incarnation, delay: None, refused: false })
    }

    pub fn on_wire(&mut self, shared: &Shared, name: &str, wire: Wire) -> Vec<Outgoing> {
        let incarnation = self.nodes[name].incarnation;
        if wire.dst_incarnation != incarnation {
            if self.trace.is_none() {
                return self.reset_connection(name, wire.env).into_iter().collect();
            }
            let text =
                format!("drop {} from {} (sent to instance {})", wire.env.message, wire.env.from, wire.dst_incarnation);
            let fields = message_fields(&wire.env);
            self.trace_with(name, "drop", || (text, fields));
            return self.reset_connection(name, wire.env).into_iter().collect();
        }
        let mut env = wire.env;
        let now = self.now_ms();
        if name == CONTROLLER {
            if self.trace.is_some() {
                let text = format!("recv {} from {}", env.message, env.from);
                let fields = message_fields(&env);
                self.trace_with(name, "recv", || (text, fields));
            }
            if let Some(held) = &mut self.controller_outage {
                let incarnation = self.nodes[node_key(&env.from).as_ref()].incarnation;
                held.push(Held::Request { env, incarnation });
                return Vec::new();
            }
            return self.controller_do(shared, |c| c.on_message(env));
        }
        if is_client(name) {
            // An answer to a client: back to the asking instance's own correlation id.
            match self.wire_requests.remove(&env.correlation_id) {
                Some((client, inc, corr)) if client == name && inc == incarnation => env.correlation_id = corr,
                _ => {
                    if self.trace.is_some() {
                        let text = format!("drop {} (asked on a closed connection)", env.message);
                        let fields = message_fields(&env);
                        self.trace_with(name, "drop", || (text, fields));
                    }
                    return Vec::new();
                }
            }
        }
        if is_broker(name) {
            let text = self.trace.is_some().then(|| {
                let what = env.message.with_markers(&|tp, o| self.marker_kind(tp, o)).to_string();
                (format!("recv {what} from {}", env.from), message_fields(&env))
            });
            let id = broker_id(name);
            let ends = self.log_ends(id);
            let effects = self.step_broker(id, |b| b.on_message(now, env));
            self.trace_broker(id, "recv", || text.unwrap_or_default());
            self.after_broker_step(shared, id, &ends);
            return self.dispatch(shared, name, effects);
        }
        if self.producers.contains_key(name) {
            let text = self.trace.is_some().then(|| (format!("recv {}", env.message), message_fields(&env)));
            let slot = self.producers.get_mut(name).expect("checked");
            let Some(p) = slot.producer.as_mut() else { return Vec::new() };
            let effects = p.on_message(now, env);
            if let Some(t) = text {
                self.trace_with(name, "recv", || t);
            }
            self.collect_completions(name);
            return self.dispatch(shared, name, effects);
        }
        let effects = self.consumer_message(name, env);
        self.dispatch(shared, name, effects)
    }

    fn on_timer(&mut self, shared: &Shared, name: &str, incarnation: u32, timer: Timer) -> Vec<Outgoing> {
        if self.nodes[name].incarnation != incarnation {
            return Vec::new();
        }
        let now = self.now_ms();
        if is_broker(name) {
            let id = broker_id(name);
            if self.brokers_down.contains(&id) {
                return Vec::new();
            }
            let text = self.trace.is_some().then(|| format!("timer: {}", timer_name(&timer)));
            let before = self.trace.is_some().then(|| self.fingerprint().collect::<Vec<u64>>());
            let ends = self.log_ends(id);
            let loads = matches!(timer, Timer::LoadTransactionLog { .. });
            let effects = self.step_broker(id, |b| b.on_timer(now, timer));
            // A scan that sent nothing and changed nothing is noise in a long replay: it folds.
            let idle = effects.sends.is_empty() && before.is_some_and(|fp| self.fingerprint().eq(fp));
            let kind = if idle { IDLE_TIMER } else { "timer" };
            self.trace_broker(id, kind, || (text.unwrap_or_default(), Value::Null));
            self.after_broker_step(shared, id, &ends);
            if loads {
                self.observe_load(id);
            }
            return self.dispatch(shared, name, effects);
        }
        if let Some(slot) = self.producers.get_mut(name) {
            let Some(p) = slot.producer.as_mut() else { return Vec::new() };
            let effects = p.on_timer(now, timer);
            if !effects.sends.is_empty() && self.trace.is_some() {
                let text = format!(
                    "timer: resend {}",
                    effects.sends.iter().map(|e| e.message.to_string()).collect::<Vec<_>>().join(", ")
                );
                self.trace(name, "resend", || text);
            }
            self.collect_completions(name);
            return self.dispatch(shared, name, effects);
        }
        if let Some(slot) = self.consumers.get_mut(name) {
            if let Timer::RequestTimeout { correlation_id } = &timer {
                slot.polls.remove(correlation_id);
            }
            let effects = slot.consumer.on_timer(timer);
            return self.dispatch(shared, name, effects);
        }
        Vec::new()
    }

    /// A consumer's answer; what the consumer sends in turn (a Metadata request after
    /// NOT_LEADER_OR_FOLLOWER, with its request timeout).
    fn consumer_message(&mut self, name: &str, env: Envelope) -> Effects {
        let now = self.now_ms();
        let slot = self.consumers.get_mut(name).expect("a consumer");
        let corr = env.correlation_id;
        let Message::FetchResponse { partition, fetch_offset, result } = &env.message else {
            return slot.consumer.on_message(now, env);
        };
        let (partition, fetch_offset) = (partition.clone(), *fetch_offset);
        let accepted = slot.polls.remove(&corr).is_some() && slot.consumer.position(&partition) == Some(fetch_offset);
        let bounds = result.as_ref().ok().map(|d| (d.high_watermark, d.last_stable_offset, d.batches.len()));
        let error = result.as_ref().err().copied();
        let effects = slot.consumer.on_message(now, env);
        if !accepted {
            return effects;
        }
        let isolation = slot.consumer.isolation;
        match bounds {
            Some((high_watermark, last_stable_offset, batches)) => {
                let records: Vec<(Offset, String)> =
                    slot.consumer.take_delivered().into_iter().map(|r| (r.offset, r.value)).collect();
                let position_after = slot.consumer.position(&partition).expect("assigned");
                self.stats.polls += 1;
                self.stats.delivered += records.len() as u64;
                if self.trace.is_some() {
                    let shown: Vec<String> = records.iter().map(|(o, v)| format!("{o}:{v}")).collect();
                    let text = format!(
                        "poll {partition} from offset {fetch_offset}, HW {high_watermark} LSO {last_stable_offset} ({batches} batches) -> [{}], next offset {position_after}",
                        shown.join(" ")
                    );
                    let fields = json!({
                        "partition": partition.to_string(),
                        "isolation": isolation.name(),
                        "fetch_offset": fetch_offset,
                        "hw": high_watermark,
                        "lso": last_stable_offset,
                        "records": records.iter().map(|(o, v)| json!({"offset": o, "value": v})).collect::<Vec<_>>(),
                        "position_after": position_after,
                    });
                    self.trace_with(name, "poll", || (text, fields));
                }
                self.push_history(Event::Poll {
                    time_ms: now,
                    consumer: name.to_string(),
                    isolation,
                    partition,
                    fetch_offset,
                    high_watermark,
                    last_stable_offset,
                    records,
                    position_after,
                });
            }
            None => {
                let _ = slot.consumer.take_errors();
                let error = error.map(|e| e.name()).unwrap_or("no error code");
                let text = format!("poll {partition} from offset {fetch_offset} -> {error}");
                let fields = json!({"partition": partition.to_string(), "fetch_offset": fetch_offset, "error": error});
                self.trace_with(name, "poll", || (text, fields));
            }
        }
        effects
    }

    /// Completions of the producer's calls become history events.
    pub fn collect_completions(&mut self, name: &str) {
        let now = self.now_ms();
        let slot = self.producers.get_mut(name).expect("a producer");
        let Some(p) = slot.producer.as_mut() else { return };
        let done: Vec<Completion> = p.take_completions();
        let mut completed = Vec::new();
        for c in done {
            let Some((call_id, _)) = slot.pending.remove(&c.op) else { continue };
            let outcome = CallOutcome::of(&c.result);
            completed.push((call_id, outcome));
        }
        for (call_id, outcome) in completed {
            self.trace_complete(name, call_id, &outcome);
            self.push_history(Event::Complete { time_ms: now, process: name.to_string(), call_id, outcome });
        }
    }

    // ---------------------------------------------------------------- producer calls

    fn invoke_sync(&mut self, name: &str, call: ProducerCall, result: Result<(), KafkaError>) {
        let now = self.now_ms();
        self.stats.ops += 1;
        self.next_call_id += 1;
        let call_id = self.next_call_id;
        let outcome = match result {
            Ok(()) => CallOutcome::Ok,
            Err(e) => CallOutcome::Failed { error: e.name().to_string() },
        };
        if self.trace.is_some() {
            let text = format!("invoke #{call_id} {} -> {}", show_call(&call), show_outcome(&outcome));
            self.trace_with(name, "invoke", || (text, json!({"call_id": call_id, "outcome": show_outcome(&outcome)})));
        }
        self.push_history(Event::Invoke { time_ms: now, process: name.to_string(), call_id, call });
        self.push_history(Event::Complete { time_ms: now, process: name.to_string(), call_id, outcome });
    }

    /// Invokes an asynchronous producer call and records it; an immediate error completes it at once.
    fn invoke(
        &mut self,
        shared: &Shared,
        name: &str,
        call: ProducerCall,
        f: impl FnOnce(&mut Producer, u64) -> Result<(OpId, Effects), KafkaError>,
    ) -> Vec<Outgoing> {
        let now = self.now_ms();
        self.stats.ops += 1;
        self.next_call_id += 1;
        let call_id = self.next_call_id;
        let blocking = !matches!(call, ProducerCall::Send { .. });
        if self.trace.is_some() {
            let text = format!("invoke #{call_id} {}", show_call(&call));
            self.trace_with(name, "invoke", || (text, json!({"call_id": call_id})));
        }
        self.push_history(Event::Invoke { time_ms: now, process: name.to_string(), call_id, call });
        let slot = self.producers.get_mut(name).expect("a producer");
        let p = slot.producer.as_mut().expect("a running producer");
        match f(p, now) {
            Ok((op, effects)) => {
                slot.pending.insert(op, (call_id, blocking));
                self.collect_completions(name);
                self.dispatch(shared, name, effects)
            }
            Err(e) => {
                let outcome = CallOutcome::Failed { error: e.name().to_string() };
                self.trace_complete(name, call_id, &outcome);
                self.push_history(Event::Complete { time_ms: now, process: name.to_string(), call_id, outcome });
                Vec::new()
            }
        }
    }

    fn trace_complete(&mut self, name: &str, call_id: u64, outcome: &CallOutcome) {
        self.trace_with(name, "complete", || {
            let text = format!("complete #{call_id} {}", show_outcome(outcome));
            (text, json!({"call_id": call_id, "outcome": show_outcome(outcome)}))
        });
    }

    /// Calls still open when their process died or the run ended: they may or may not have happened.
    pub fn abandon_pending(&mut self, name: &str) {
        let now = self.now_ms();
        let slot = self.producers.get_mut(name).expect("a producer");
        let pending = std::mem::take(&mut slot.pending);
        for (_, (call_id, _)) in pending {
            self.trace_complete(name, call_id, &CallOutcome::Unknown);
            self.push_history(Event::Complete {
                time_ms: now,
                process: name.to_string(),
                call_id,
                outcome: CallOutcome::Unknown,
            });
        }
    }

    fn next_values(&mut self, name: &str, n: u32) -> Vec<String> {
        let counter = self.next_value.entry(name.to_string()).or_insert(0);
        (0..n)
            .map(|_| {
                *counter += 1;
                format!("{name}-{counter}")
            })
            .collect()
    }

    /// One application step of producer `name`: what a Kafka application would call next.
    pub fn producer_step(&mut self, shared: &Shared, name: &str) -> Vec<Outgoing> {
        let now = self.now_ms();
        let slot = &self.producers[name];
        let Some(p) = slot.producer.as_ref() else { return Vec::new() };
        if now < slot.stall_until_ms || self.paused.contains(name) {
            return Vec::new();
        }
        // init, commit and abort block the application until they return.
        if slot.pending.values().any(|(_, blocking)| *blocking) {
            return Vec::new();
        }
        let kind = p.kind.clone();
        let state = p.state;
        // The plain producer keeps one request in flight and never retries (see `plain_config`), so its
        // writes are neither duplicated nor reordered: both are allowed for it in Kafka.
        if kind == ProducerKind::Plain && !p.is_idle() {
            return Vec::new();
        }
        match (kind, state) {
            (ProducerKind::Plain, _) | (ProducerKind::Idempotent, TxnManagerState::Ready) => {
                let tp = self.rng.pick(&self.partitions).clone();
                let n =
                    self.rng.range(self.params.values_per_send.0 as u64, self.params.values_per_send.1 as u64) as u32;
                let values = self.next_values(name, n);
                let call = ProducerCall::Send { partition: tp.clone(), values: values.clone() };
                self.invoke(shared, name, call, |p, now| p.send(now, tp, values))
            }
            (_, TxnManagerState::Uninitialized) => {
                self.invoke(shared, name, ProducerCall::Init, |p, now| p.init_transactions(now))
            }
            (_, TxnManagerState::FatalError) => {
                self.restart_producer(name, "fatal error");
                Vec::new()
            }
            (ProducerKind::Idempotent, _) => Vec::new(),
            (ProducerKind::Transactional { .. }, state) => self.txn_step(shared, name, state),
        }
    }

    fn txn_step(&mut self, shared: &Shared, name: &str, state: TxnManagerState) -> Vec<Outgoing> {
        match state {
            TxnManagerState::Ready => {
                if self.rng.chance(0.02) {
                    // API misuse: Kafka answers INVALID_TXN_STATE at once.
                    return self.invoke(shared, name, ProducerCall::Commit, |p, now| p.commit_transaction(now));
                }
                let result = self
                    .producers
                    .get_mut(name)
                    .and_then(|s| s.producer.as_mut())
                    .expect("running")
                    .begin_transaction();
                if result.is_ok() {
                    let plan = self.draw_plan();
                    self.producers.get_mut(name).expect("known").plan = Some(plan);
                }
                self.invoke_sync(name, ProducerCall::Begin, result);
                Vec::new()
            }
            TxnManagerState::InTransaction => {
                let params_values = self.params.values_per_send;
                let stall = self.rng.chance(self.params.stall_prob);
                let stall_ms = self.rng.range(self.params.stall_ms.0, self.params.stall_ms.1);
                let n = self.rng.range(params_values.0 as u64, params_values.1 as u64) as u32;
                let now = self.now_ms();
                let slot = self.producers.get_mut(name).expect("known");
                let plan = slot.plan.get_or_insert_with(|| TxnPlan {
                    partitions: Vec::new(),
                    sends_left: 0,
                    next: 0,
                    commit: false,
                });
                if plan.sends_left > 0 && !plan.partitions.is_empty() {
                    plan.sends_left -= 1;
                    let tp = plan.partitions[plan.next % plan.partitions.len()].clone();
                    plan.next += 1;
                    if stall {
                        slot.stall_until_ms = now + stall_ms;
                        self.trace(name, "stall", || format!("stalls {stall_ms} ms inside its transaction"));
                    }
                    let values = self.next_values(name, n);
                    let call = ProducerCall::Send { partition: tp.clone(), values: values.clone() };
                    return self.invoke(shared, name, call, |p, now| p.send(now, tp, values));
                }
                if plan.commit {
                    self.invoke(shared, name, ProducerCall::Commit, |p, now| p.commit_transaction(now))
                } else {
                    self.invoke(shared, name, ProducerCall::Abort, |p, now| p.abort_transaction(now))
                }
            }
            TxnManagerState::AbortableError => {
                self.invoke(shared, name, ProducerCall::Abort, |p, now| p.abort_transaction(now))
            }
            _ => Vec::new(), // Waiting for an answer.
        }
    }

    fn draw_plan(&mut self) -> TxnPlan {
        TxnPlan::draw(&self.params, &mut self.rng, &self.partitions)
    }

    /// `DisconnectClient`: the producer's requests in flight fail at once and are retried; whatever the
    /// broker answers to them arrives on a closed connection and is dropped.
    pub fn disconnect_producer(&mut self, shared: &Shared, name: &str) -> Vec<Outgoing> {
        let now = self.now_ms();
        let incarnation = self.nodes[name].incarnation;
        self.wire_requests.retain(|_, (client, inc, _)| !(client == name && *inc == incarnation));
        // The connection to the coordinator's broker (every client has one).
        let broker = self.coordinator_broker();
        let slot = self.producers.get_mut(name).expect("a producer");
        let Some(p) = slot.producer.as_mut() else { return Vec::new() };
        let effects = p.on_disconnect(now, &NodeId::Broker(broker));
        self.trace(name, "fault", || format!("FAULT disconnect from {}", broker_name(broker)));
        self.count_fault(FaultKind::DisconnectClient.name().to_string());
        self.collect_completions(name);
        self.dispatch(shared, name, effects)
    }

    /// Kills the producer's process and starts a new instance with the same transactional id.
    pub fn restart_producer(&mut self, name: &str, why: &str) {
        let Some(id) = self.nodes[name].id else { return };
        if self.paused.contains(name) {
            return;
        }
        let text = format!("restart process ({why})");
        self.trace(name, "restart", || text);
        let handle = Handle::current();
        handle.kill(id);
        self.abandon_pending(name);
        let slot = self.producers.get_mut(name).expect("a producer");
        slot.producer = None;
        slot.plan = None;
        slot.restarts += 1;
        // The endpoint of the dead instance must not outlive it.
        self.nodes.get_mut(name).expect("known").endpoint = None;
        handle.restart(id);
    }

    // ---------------------------------------------------------------- consumers

    pub fn consumer_step(&mut self, shared: &Shared, name: &str) -> Vec<Outgoing> {
        let now = self.now_ms();
        let tp = self.rng.pick(&self.partitions).clone();
        let seek_roll = self.rng.f64();
        let slot = self.consumers.get_mut(name).expect("a consumer");
        if slot.seeks && seek_roll < 0.04 {
            let position = slot.consumer.position(&tp).unwrap_or(0);
            let offset = self.rng.range(0, position);
            let slot = self.consumers.get_mut(name).expect("a consumer");
            slot.consumer.seek(tp.clone(), offset);
            self.push_history(Event::Seek { time_ms: now, consumer: name.to_string(), partition: tp.clone(), offset });
            let text = format!("seek {tp} to offset {offset}");
            let fields = json!({"partition": tp.to_string(), "offset": offset});
            self.trace_with(name, "seek", || (text, fields));
            return Vec::new();
        }
        self.poll(shared, name, &tp)
    }

    pub fn poll(&mut self, shared: &Shared, name: &str, tp: &TopicPartition) -> Vec<Outgoing> {
        let now = self.now_ms();
        let slot = self.consumers.get_mut(name).expect("a consumer");
        if slot.consumer.has_fetch_in_flight(tp) {
            return Vec::new();
        }
        let offset = slot.consumer.position(tp).expect("assigned");
        let effects = slot.consumer.poll(now, tp);
        for env in &effects.sends {
            slot.polls.insert(env.correlation_id, (tp.clone(), offset));
        }
        self.dispatch(shared, name, effects)
    }

    /// Where a consumer should end up after healing: the LSO (read_committed) or HW.
    pub fn consumer_bound(&self, isolation: IsolationLevel, tp: &TopicPartition) -> Offset {
        let log = self.view_log(tp);
        match isolation {
            IsolationLevel::ReadCommitted => log.last_stable_offset(&self.config.mutations),
            IsolationLevel::ReadUncommitted => log.high_watermark(),
        }
    }
}

/// Sends what a step produced, through the sender's endpoint on madsim's network. A spawned task awaits
/// it boxed: madsim copies a task's whole future as it spawns it, and this one is most of a timer's size.
pub async fn send_all(shared: &Shared, out: Vec<Outgoing>) {
    for o in out {
        if o.refused {
            refuse(shared, o);
            continue;
        }
        if is_controller_traffic(&o.env) {
            send_reliably(shared, o);
            continue;
        }
        if let Some(delay) = o.delay {
            let wire_node = lock(shared).wire_node;
            let Some(handle) = wire_node.and_then(|id| Handle::current().get_node(id)) else { continue };
            let shared = shared.clone();
            handle.spawn(async move {
                madsim::time::sleep(delay).await;
                Box::pin(send_one(&shared, &o.from, o.env, o.dst_incarnation)).await;
            });
            continue;
        }
        send_one(shared, &o.from, o.env, o.dst_incarnation).await;
    }
}

/// A refused connection: `RECONNECT_BACKOFF` later the sender's request fails back to it, unless the
/// sender died meanwhile.
fn refuse(shared: &Shared, o: Outgoing) {
    later(shared, RECONNECT_BACKOFF, move |w, shared| {
        let back = disconnected(o.env).expect("only such requests are refused");
        let sender = &w.nodes[o.from.as_str()];
        if sender.endpoint.is_none() {
            return Vec::new();
        }
        let dst_incarnation = sender.incarnation;
        w.on_wire(shared, &o.from, Wire { env: back, dst_incarnation })
    });
}

/// The answer a broker's request comes back as when its connection fails (`Message::disconnected_answer`).
fn disconnected(env: Envelope) -> Option<Envelope> {
    let message = env.message.disconnected_answer()?;
    Some(Envelope { from: env.to, to: env.from, correlation_id: env.correlation_id, message })
}

/// Runs `step` on the world `delay` from now on the network's host, and sends what it returns.
fn later(shared: &Shared, delay: Duration, step: impl FnOnce(&mut World, &Shared) -> Vec<Outgoing> + Send + 'static) {
    let handle = {
        let w = lock(shared);
        w.wire_node.and_then(|id| w.runtime().get_node(id))
    };
    let Some(handle) = handle else { return };
    let shared = shared.clone();
    handle.spawn(async move {
        madsim::time::sleep(delay).await;
        let out = step(&mut lock(&shared), &shared);
        Box::pin(send_all(&shared, out)).await;
    });
}

/// Controller traffic: delivered after `CONTROLLER_LATENCY` from the network's host, in the order sent,
/// unless its receiver died meanwhile (`is_controller_traffic`).
fn send_reliably(shared: &Shared, o: Outgoing) {
    later(shared, CONTROLLER_LATENCY, move |w, shared| {
        let to = node_key(&o.env.to).into_owned();
        if is_broker(&to) && w.brokers_down.contains(&broker_id(&to)) {
            return Vec::new();
        }
        w.stats.messages += 1;
        w.on_wire(shared, &to, Wire { env: o.env, dst_incarnation: o.dst_incarnation })
    });
}

async fn send_one(shared: &Shared, from: &str, env: Envelope, dst_incarnation: u32) {
    let (endpoint, dst, wire) = {
        let mut w = lock(shared);
        let Some(endpoint) = w.nodes[from].endpoint.clone() else { return };
        let Some(dst) = w.nodes.get(node_key(&env.to).as_ref()) else { return };
        let addr = dst.addr;
        w.stats.messages += 1;
        (endpoint, addr, Wire { env, dst_incarnation })
    };
    let _ = endpoint.send_to_raw(dst, TAG, Box::new(wire)).await;
}

/// The answers `LoseAnswer` and `DelayAnswer` act on: those of the transactional write path.
fn is_txn_answer(m: &Message) -> bool {
    matches!(
        m,
        Message::InitProducerIdResponse { .. }
            | Message::AddPartitionsToTxnResponse { .. }
            | Message::ProduceResponse { .. }
            | Message::EndTxnResponse { .. }
            | Message::WriteTxnMarkersResponse { .. }
    )
}
