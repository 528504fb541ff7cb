//! The actors: stateright wrappers around the engine's sans-io nodes. Each handler copies the node, hands
//! it the message or timer with `now_ms = 0` (time never advances; timers fire when the checker chooses)
//! and maps the returned `Effects` to stateright's `Out`: sends go on the network, engine timers become
//! stateright timers. Nothing here decides Kafka behaviour; that is all engine code.

use crate::bounds::Bounds;
pub mod processor;

use crate::shared::Shared;
use processor::ProcessorNode;
use stateright::actor::{model_timeout, Actor, Id, Out};
use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::Arc;
use txnsim_engine::coordinator::TransactionState;
use txnsim_engine::network_client::{self, Receiver, Undelivered};
use txnsim_engine::producer::{Completion, OpId, OpOutput};
use txnsim_engine::protocol::CONTROLLER_ID;
use txnsim_engine::protocol::{Effects, Envelope, Message, NodeId, Timer};
use txnsim_engine::topic::GROUP_METADATA_TOPIC;
use txnsim_engine::{
    filter_fetch, Broker, Consumer, Controller, EngineConfig, IsolationLevel, KafkaError, Offset, PartitionLog,
    Producer, ProducerId, ProducerKind, TopicPartition, TransactionResult, TxnManagerState,
};
use txnsim_properties::{CallOutcome, Event, ProducerCall};

/// The engine's clock in the model: always zero, so no timestamp ever distinguishes two states.
pub const NOW_MS: u64 = 0;

/// The readers the broker hosts, in order.
pub const READERS: [IsolationLevel; 2] = [IsolationLevel::ReadCommitted, IsolationLevel::ReadUncommitted];

/// `Bounds::polls_per_reader` at this value means no budget.
pub const UNLIMITED: usize = u8::MAX as usize;

/// What every actor needs to know about the model it lives in.
#[derive(Debug)]
pub struct Ctx {
    pub bounds: Bounds,
    pub config: EngineConfig,
    pub partitions: Vec<TopicPartition>,
}

impl Ctx {
    pub fn new(bounds: &Bounds) -> Self {
        Ctx { bounds: bounds.clone(), config: bounds.engine_config(), partitions: bounds.partitions() }
    }

    /// Actor index layout: the broker (with the readers it hosts), then the producers.
    pub fn id_of(&self, node: &NodeId) -> Id {
        match node {
            NodeId::Broker(_) => Id::from(0),
            NodeId::Client(name) => {
                Id::from(self.index_of_client(name).unwrap_or_else(|| panic!("unknown client {name}")))
            }
        }
    }

    /// Producers (`p0'`) come after the broker, then processors (`w0'` and its member `w0'.in`).
    fn index_of_client(&self, name: &str) -> Option<usize> {
        if let Some(i) = processor::processor_index(name) {
            return (i < self.bounds.processors).then_some(1 + self.bounds.producers + i);
        }
        let digits: String = name.strip_prefix('p')?.chars().take_while(|c| c.is_ascii_digit()).collect();
        digits.parse::<usize>().ok().filter(|i| *i < self.bounds.producers).map(|i| 1 + i)
    }

    pub fn actor_count(&self) -> usize {
        1 + self.bounds.producers + self.bounds.processors
    }

    /// The partitions the processors write: one.
    pub fn output_partitions(&self) -> Vec<TopicPartition> {
        vec![TopicPartition::new(processor::OUTPUT_TOPIC, 0)]
    }

    fn timeouts_modelled(&self) -> bool {
        self.bounds.txn_timeouts > 0
    }
}

/// Producer `i`'s instance name after `incarnation` restarts: `p0`, `p0'`, `p0''`. Symmetry reduction
/// renames producers by these forms (`symmetry::rename_producer`), as it does `transactional_id`'s.
pub fn producer_name(index: usize, incarnation: u8) -> String {
    format!("p{index}{}", "'".repeat(incarnation as usize))
}

pub fn transactional_id(index: usize) -> String {
    format!("tx-p{index}")
}

pub fn reader_name(isolation: IsolationLevel) -> &'static str {
    match isolation {
        IsolationLevel::ReadCommitted => "rc",
        IsolationLevel::ReadUncommitted => "ru",
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Broker,
    Producer(usize),
    Processor(usize),
}

#[derive(Clone)]
pub struct Node {
    pub role: Role,
    pub ctx: Arc<Ctx>,
}

/// Messages: engine envelopes, shared so the checker's copies of the network are cheap.
pub type Msg = Shared<Envelope>;

/// Stateright timer ids. Engine timers keep their engine value; the rest are the model's faults and
/// the readers' polls.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ModelTimer {
    Engine(Timer),
    /// A processor's member's client timer (its producer's are `Engine`).
    Member(Timer),
    /// The group coordinator's join phase ends (`tick_groups` at its deadline).
    GroupDeadline,
    /// The group coordinator's clock passes its members' session timeout: no heartbeat came (bounded by
    /// `Bounds::session_expiries`).
    SessionExpiry,
    /// The coordinator's timeout scan finds this transactional id's transaction past its timeout. It
    /// replaces the engine's periodic `AbortTimedOutTransactions`, whose firing would depend on a clock.
    TxnTimeout(String),
    /// Crash and restart this node (bounded by `Bounds::crashes` over the whole run).
    Crash,
    /// On a replicated cluster: broker `broker` dies (its log survives) and the controller fences it...
    BrokerCrash(u32),
    /// ...and later starts again, loading the controller's image.
    BrokerRestart(u32),
    /// The readers poll `partition`.
    Poll {
        partition: u32,
    },
}

/// An actor's state, hashed once when made.
pub type NodeState = Shared<NodeKind>;

// Boxing the producer would save nothing: a node state lives behind `Shared`'s `Arc` already.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NodeKind {
    Broker(BrokerNode),
    Producer(ProducerNode),
    Processor(ProcessorNode),
    /// An engine assertion failed in this node's last step: `last` is the state it failed from. The
    /// node stops; the `engine-assertions` property reports the path here.
    Panicked {
        message: String,
        last: NodeState,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BrokerNode {
    pub broker: Shared<Broker>,
    /// The read_committed and read_uncommitted readers, co-located: see `Node::reader_poll`.
    pub readers: Shared<Readers>,
    pub restarts: u8,
    pub marker_resends_left: u8,
    pub timeouts_left: u8,
    pub session_expiries_left: u8,
    /// A coordinator timer the engine needed was left unarmed because its budget is spent: from here on
    /// the run is not "healed", so liveness is not judged.
    pub starved: bool,
    /// Bit `p`: the broker's last engine step changed partition `p` (its end, HW or LSO). Under
    /// `Bounds::reduced` the readers poll a partition only then (see `reductions`).
    pub fresh: u16,
    /// On a replicated cluster (`Bounds::brokers` > 1): the other brokers and the controller. `broker`
    /// is then broker 0, the coordinator's host and the partitions' first leader.
    pub replication: Option<Shared<Replication>>,
}

/// The rest of a replicated cluster. Messages between its nodes go over the model's network, from actor 0
/// to itself, so every interleaving of replication, markers and metadata is explored.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Replication {
    /// Brokers 1 and up.
    pub peers: Vec<Broker>,
    pub controller: Controller,
    /// Crashed brokers not yet restarted: what reaches them is lost (a broker's request comes back to its
    /// sender disconnected, a client's is refused), and what they sent before dying is lost too.
    pub down: BTreeSet<u32>,
    /// Control markers a replica's truncation removed: (partition, producer id, result).
    pub truncated_markers: BTreeSet<(TopicPartition, ProducerId, TransactionResult)>,
    /// A partition's leader changed while the coordinator had a transaction on it open.
    pub leader_changed_mid_txn: bool,
}

impl Replication {
    /// Whether a marker some truncation removed is in a replica's log again.
    pub fn marker_rewritten(&self, brokers: &[&Broker]) -> bool {
        self.truncated_markers.iter().any(|(tp, pid, result)| {
            brokers.iter().any(|b| b.partition(tp).is_some_and(|log| markers(log).any(|m| m == (*pid, *result))))
        })
    }
}

/// The control markers of a log: (producer id, result).
fn markers(log: &PartitionLog) -> impl Iterator<Item = (ProducerId, TransactionResult)> + '_ {
    log.batches().filter_map(|b| Some((b.producer_id()?, b.marker()?.result)))
}

impl BrokerNode {
    /// Every broker, broker 0 first.
    pub fn brokers(&self) -> Vec<&Broker> {
        let mut all = vec![&*self.broker];
        if let Some(r) = &self.replication {
            all.extend(r.peers.iter());
        }
        all
    }

    pub fn is_down(&self, id: u32) -> bool {
        self.replication.as_ref().is_some_and(|r| r.down.contains(&id))
    }

    /// The broker whose replica of `tp` stands for the partition (`txnsim_properties::standing_leader`,
    /// as the sim reads it): broker 0 on a single broker.
    pub fn leader_of(&self, tp: &TopicPartition) -> &Broker {
        let brokers = self.brokers();
        if brokers.len() == 1 {
            return brokers[0];
        }
        let known = brokers.iter().filter_map(|b| b.replica_manager.partitions.get(tp));
        let id = txnsim_properties::standing_leader(known.map(|p| (p.leader, p.leader_epoch))).map_or(0, |(l, _)| l);
        brokers[id as usize]
    }

    /// The standing leaders' logs of the workload's topics, which the state and history invariants read
    /// where they are. `__consumer_offsets` is the group coordinator's (its own invariant reads it): a
    /// retried TxnOffsetCommit stores its record twice there, as Kafka's does.
    pub fn leader_logs(&self) -> std::collections::BTreeMap<&TopicPartition, &PartitionLog> {
        let logs = self.broker.replica_manager.logs.keys().filter(|tp| tp.topic != GROUP_METADATA_TOPIC);
        if self.replication.is_none() {
            return logs.map(|tp| (tp, &self.broker.replica_manager.logs[tp])).collect();
        }
        logs.filter_map(|tp| Some((tp, self.leader_of(tp).partition(tp)?))).collect()
    }
}

/// The readers (`READERS` order; none when `Bounds::polls_per_reader` is 0) and their poll budget.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Readers {
    pub list: Vec<ReaderNode>,
    pub polls_left: u8,
}

/// A reader: an engine consumer assigned every partition from offset 0, and what its polls delivered.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReaderNode {
    pub consumer: Consumer,
    /// Poll events (with HW and LSO from the response), for the history invariants.
    pub polls: Vec<Event>,
}

/// Where a producer's script is.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    Initializing,
    /// Between transactions: the application's commit-or-abort choice for transaction `txn` is open.
    Choosing {
        txn: u8,
    },
    /// An abort waits for the transaction's sends to complete: called at once, it would fail them all
    /// undrained (`abortUndrainedBatches`) and no aborted data would ever reach a log.
    Sending {
        txn: u8,
        awaiting: u8,
    },
    Ending {
        txn: u8,
        result: TransactionResult,
        op: OpId,
    },
    Done(Stop),
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stop {
    Finished,
    Failed(KafkaError),
    /// Crashed and not restarted (`Bounds::restart_producers` off).
    Crashed,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProducerNode {
    pub producer: Producer,
    pub incarnation: u8,
    pub restarts: u8,
    /// The next transaction of the script; survives a crash (the application resumes its workload).
    pub next_txn: u8,
    pub phase: Phase,
    /// Send invocations and completions of every instance, for the history invariants.
    pub events: Shared<Vec<Event>>,
    /// Engine timers this instance has set, so a crash can cancel them and budgets can retire them.
    pub timers: BTreeSet<Timer>,
    pub request_timeouts_left: u8,
    pub backoffs_left: u8,
    /// A client timer the run may need was left unarmed because its budget is spent (see `Node::needs`):
    /// the run may never heal, so liveness is not judged (as `BrokerNode::starved`).
    pub starved: bool,
    /// The network lost this instance's answer to its request `correlation_id` (set by the model's
    /// `next_state`, which sees drops): its request timeout will be a retry of a processed request.
    pub lost_answer: Option<(u64, RetriedApi)>,
    /// APIs this producer retried after losing an answer, for the `*-answer-lost-then-retried` facts.
    pub retried_after_lost: BTreeSet<RetriedApi>,
}

/// The requests whose lost answers the model's facts follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RetriedApi {
    InitProducerId,
    EndTxn,
}

impl NodeKind {
    /// The node's state, or the one it was in when an assertion stopped it.
    pub fn node(&self) -> &NodeKind {
        match self {
            NodeKind::Panicked { last, .. } => last.node(),
            other => other,
        }
    }
    pub fn broker(&self) -> Option<&BrokerNode> {
        match self.node() {
            NodeKind::Broker(b) => Some(b),
            _ => None,
        }
    }
    pub fn producer(&self) -> Option<&ProducerNode> {
        match self.node() {
            NodeKind::Producer(p) => Some(p),
            _ => None,
        }
    }
    pub fn panic_message(&self) -> Option<&str> {
        match self {
            NodeKind::Panicked { message, .. } => Some(message),
            _ => None,
        }
    }
    pub fn processor(&self) -> Option<&ProcessorNode> {
        match self.node() {
            NodeKind::Processor(p) => Some(p),
            _ => None,
        }
    }
    /// A client's calls and their completions: a producer's or a processor's.
    pub fn events(&self) -> Option<&Shared<Vec<Event>>> {
        match self.node() {
            NodeKind::Producer(p) => Some(&p.events),
            NodeKind::Processor(p) => Some(&p.events),
            _ => None,
        }
    }
    pub fn restarts(&self) -> usize {
        match self.node() {
            NodeKind::Broker(b) => b.restarts as usize,
            NodeKind::Producer(p) => p.restarts as usize,
            NodeKind::Processor(p) => p.restarts as usize,
            NodeKind::Panicked { .. } => unreachable!("node() unwraps"),
        }
    }
}

impl ReaderNode {
    /// `(partition, offset, value)` of every record delivered, in delivery order.
    pub fn delivered(&self) -> impl Iterator<Item = (&TopicPartition, Offset, &str)> {
        self.polls.iter().flat_map(|e| match e {
            Event::Poll { partition, records, .. } => {
                records.iter().map(move |(o, v)| (partition, *o, v.as_str())).collect()
            }
            _ => Vec::new(),
        })
    }
}

pub(crate) type O = Out<Node>;

impl Node {
    pub(crate) fn send_all(&self, sends: Vec<Envelope>, o: &mut O) {
        for env in sends {
            o.send(self.ctx.id_of(&env.to), Shared::new(env));
        }
    }

    pub(crate) fn may_crash(&self, restarts: u8) -> bool {
        let b = &self.ctx.bounds;
        let target = match self.role {
            Role::Broker => b.crash_broker,
            Role::Producer(_) | Role::Processor(_) => b.crash_producers,
        };
        target && (restarts as usize) < b.crashes
    }

    /// Whether a marker request may fail and need the coordinator's resend: lost on a lossy network, or
    /// sent to a dead leader on a replicated cluster (its disconnected answer waits for the resend).
    fn markers_can_fail(&self) -> bool {
        self.ctx.bounds.lossy || self.ctx.bounds.replicated_cluster()
    }

    // ---------------------------------------------------------------- broker

    fn broker_start(&self, o: &mut O) -> BrokerNode {
        let mut topics: std::collections::BTreeMap<String, u32> =
            [(crate::bounds::TOPIC.to_string(), self.ctx.bounds.partitions as u32)].into_iter().collect();
        if self.ctx.bounds.processors > 0 {
            topics.insert(processor::OUTPUT_TOPIC.to_string(), self.ctx.output_partitions().len() as u32);
        }
        let (broker, replication) = if self.ctx.bounds.replicated_cluster() {
            let (broker, replication) = self.cluster_start(&topics, o);
            (broker, Some(Shared::new(replication)))
        } else {
            let mut broker = Broker::new(0, &topics, self.ctx.config.clone());
            // Its only effect is the periodic timeout scan, which `ModelTimer::TxnTimeout` replaces.
            let _ = broker.on_start(NOW_MS);
            (broker, None)
        };
        if self.may_crash(0) {
            match &replication {
                None => o.set_timer(ModelTimer::Crash, model_timeout()),
                Some(_) => {
                    for id in 0..self.ctx.bounds.brokers as u32 {
                        o.set_timer(ModelTimer::BrokerCrash(id), model_timeout());
                    }
                }
            }
        }
        let readers = Shared::new(self.readers_start(o));
        BrokerNode {
            broker: Shared::new(broker),
            readers,
            restarts: 0,
            marker_resends_left: self.ctx.bounds.marker_resends as u8,
            timeouts_left: if self.ctx.timeouts_modelled() { self.ctx.bounds.txn_timeouts as u8 } else { 0 },
            session_expiries_left: self.ctx.bounds.session_expiries as u8,
            starved: false,
            fresh: 0,
            replication,
        }
    }

    /// A replicated cluster as `Cluster::with_topology` starts one: the controller's registrations, each
    /// broker started on them (followers send their first fetches).
    fn cluster_start(&self, topics: &std::collections::BTreeMap<String, u32>, o: &mut O) -> (Broker, Replication) {
        let topology = self.ctx.bounds.topology();
        let config = &topology.bound(self.ctx.config.clone());
        let controller = Controller::new(topics, &topology, config);
        let mut brokers: Vec<Broker> = (0..self.ctx.bounds.brokers as u32)
            .map(|id| Broker::with_registrations(id, &controller.partitions, config.clone()))
            .collect();
        for b in &mut brokers {
            let effects = b.start_loaded(NOW_MS);
            // The timers are the coordinator's periodic scan (`ModelTimer::TxnTimeout` replaces it); the
            // replication deadlines are not timers the model fires (`on_msg`).
            self.send_all(effects.sends, o);
        }
        let broker = brokers.remove(0);
        let replication = Replication {
            peers: brokers,
            controller,
            down: BTreeSet::new(),
            truncated_markers: BTreeSet::new(),
            leader_changed_mid_txn: false,
        };
        (broker, replication)
    }

    /// Maps a broker step's effects, and keeps the model's timers in step with the coordinator: a timeout
    /// timer per Ongoing transactional id while the budget lasts, marker-resend timers retired once their
    /// decision completes or the budget is spent.
    fn broker_effects(&self, before: &Broker, after: &Broker, node: &mut BrokerNode, effects: Effects, o: &mut O) {
        self.send_all(effects.sends, o);
        for (_, timer) in effects.timers {
            match timer {
                Timer::AbortTimedOutTransactions => {} // replaced by TxnTimeout timers
                Timer::ResendTxnMarkers { .. } if node.marker_resends_left > 0 => {
                    o.set_timer(ModelTimer::Engine(timer), model_timeout())
                }
                Timer::ResendTxnMarkers { .. } => node.starved |= self.markers_can_fail(),
                Timer::RetryBackoff { .. }
                | Timer::RequestTimeout { .. }
                | Timer::DeliveryTimeout { .. }
                | Timer::Linger { .. } => unreachable!("brokers set no client timers"),
                Timer::LoadTransactionLog { .. } => unreachable!("the model's __transaction_state is not replicated"),
            }
        }
        let (was, now) = (ongoing(before), ongoing(after));
        if node.timeouts_left > 0 {
            for tid in now.difference(&was) {
                o.set_timer(ModelTimer::TxnTimeout(tid.clone()), model_timeout());
            }
            for tid in was.difference(&now) {
                o.cancel_timer(ModelTimer::TxnTimeout(tid.clone()));
            }
        } else if self.ctx.timeouts_modelled() && !now.is_empty() {
            node.starved = true;
        }
        let pending = |b: &Broker, d: usize| b.coordinator.decisions.get(d).is_some_and(|x| !x.completed);
        for d in 0..after.coordinator.decisions.len() {
            let retire = node.marker_resends_left == 0 || !pending(after, d);
            if retire && (pending(before, d) || d >= before.coordinator.decisions.len()) {
                o.cancel_timer(ModelTimer::Engine(Timer::ResendTxnMarkers { decision: d }));
            }
        }
        if node.timeouts_left == 0 {
            for tid in &was {
                o.cancel_timer(ModelTimer::TxnTimeout(tid.clone()));
            }
        }
        if self.ctx.bounds.processors > 0 {
            group_timers(after, node, o);
        }
    }

    /// One step of broker 0's engine code; `step` may also touch the model's counters in `node`.
    fn broker_step(
        &self,
        state: &mut Cow<NodeState>,
        o: &mut O,
        step: impl FnOnce(&mut Broker, &mut BrokerNode) -> Effects,
    ) {
        self.broker_step_on(state, o, 0, step)
    }

    /// One step of broker `id`'s engine code.
    fn broker_step_on(
        &self,
        state: &mut Cow<NodeState>,
        o: &mut O,
        id: u32,
        step: impl FnOnce(&mut Broker, &mut BrokerNode) -> Effects,
    ) {
        let before = state.broker().expect("actor 0 is the broker");
        let mut node = before.clone();
        let old = before.brokers()[id as usize];
        let mut broker = old.clone();
        // The coordinator's `__transaction_state` appends complete within the step that makes them (see
        // the crate docs): a local write is never lost, and its window is the network scenarios' to explore.
        let effects = step(&mut broker, &mut node);
        let effects = broker.write_txn_log_now(NOW_MS, effects);
        self.broker_effects(old, &broker, &mut node, effects, o);
        if broker != *old {
            if let Some(r) = &mut node.replication {
                r.update(|r| note_truncated_markers(old, &broker, r));
            }
            match id {
                0 => node.broker = Shared::new(broker),
                _ => node.replication.as_mut().expect("a peer").update(|r| r.peers[id as usize - 1] = broker),
            }
        }
        if self.ctx.bounds.reduced {
            node.fresh = changed_partitions(before, &node);
        }
        if !o.is_empty() || node != *before {
            *state = Cow::Owned(Shared::new(NodeKind::Broker(node)));
        }
    }

    /// One step of the controller's; a leader change while the coordinator has a transaction open on
    /// the partition is noted for the `leader-changes-mid-transaction` fact.
    fn controller_step(&self, state: &mut Cow<NodeState>, o: &mut O, step: impl FnOnce(&mut Replication) -> Effects) {
        let before = state.broker().expect("actor 0 is the broker");
        let mut node = before.clone();
        let coordinator = &before.broker.coordinator;
        node.replication.as_mut().expect("a replicated cluster").update(|r| {
            let was = r.controller.partitions.clone();
            let effects = step(r);
            let moved = r
                .controller
                .partitions
                .iter()
                .filter(|(tp, reg)| was.get(*tp).is_some_and(|w| w.state.leader_epoch != reg.state.leader_epoch));
            let open = |tp: &TopicPartition| {
                coordinator.txns.values().any(|m| {
                    matches!(
                        m.state,
                        TransactionState::Ongoing | TransactionState::PrepareCommit | TransactionState::PrepareAbort
                    ) && m.topic_partitions.contains(tp)
                })
            };
            if moved.map(|(tp, _)| tp).any(open) {
                r.leader_changed_mid_txn = true;
            }
            self.send_all(effects.sends, o);
        });
        if self.ctx.bounds.reduced {
            node.fresh = changed_partitions(before, &node);
        }
        if !o.is_empty() || node != *before {
            *state = Cow::Owned(Shared::new(NodeKind::Broker(node)));
        }
    }

    /// A message to a node of a replicated cluster, as `Cluster` delivers it: to the controller or a live
    /// broker. What a dead broker sent died with its connections. A request to a dead broker fails as the
    /// engine's `network_client::undelivered` says, its reconnect backoff taken as instant (the model has
    /// no time): a broker's comes back to it as its disconnected answer, stepped at once; a client's
    /// returns to the client, which takes it as a disconnect.
    fn cluster_msg(&self, state: &mut Cow<NodeState>, env: Envelope, o: &mut O) {
        let node = state.broker().expect("actor 0 is the broker");
        let NodeId::Broker(to) = env.to else { unreachable!("actor 0 hosts brokers and the controller") };
        if matches!(env.from, NodeId::Broker(from) if node.is_down(from)) {
            return;
        }
        if to == CONTROLLER_ID {
            return self.controller_step(state, o, |r| r.controller.on_message(env));
        }
        if !node.is_down(to) {
            return self.broker_step_on(state, o, to, |b, _| b.on_message(NOW_MS, env));
        }
        let Undelivered::Refused { back, .. } = network_client::undelivered(env, Receiver::Down) else { return };
        match back.to {
            NodeId::Client(_) => o.send(self.ctx.id_of(&back.to), Shared::new(back)),
            NodeId::Broker(from) => self.broker_step_on(state, o, from, |b, _| b.on_message(NOW_MS, back)),
        }
    }

    /// A broker of a replicated cluster dies: the controller fences it at once (its session timeout,
    /// taken as instant, as `Cluster::crash_broker` does) and its restart is armed. The coordinator's
    /// model timers stop with broker 0; its restart arms them again.
    fn cluster_crash(&self, state: &mut Cow<NodeState>, id: u32, o: &mut O) {
        let before = state.broker().expect("actor 0 is the broker");
        let restarts = before.restarts + 1;
        if id == 0 {
            for d in 0..before.broker.coordinator.decisions.len() {
                o.cancel_timer(ModelTimer::Engine(Timer::ResendTxnMarkers { decision: d }));
            }
            for tid in ongoing(&before.broker) {
                o.cancel_timer(ModelTimer::TxnTimeout(tid));
            }
        }
        if !self.may_crash(restarts) {
            for b in 0..self.ctx.bounds.brokers as u32 {
                o.cancel_timer(ModelTimer::BrokerCrash(b));
            }
        }
        o.set_timer(ModelTimer::BrokerRestart(id), model_timeout());
        self.controller_step(state, o, |r| {
            r.down.insert(id);
            r.controller.broker_fenced(id)
        });
        let mut node = state.broker().expect("actor 0 is the broker").clone();
        node.restarts = restarts;
        *state = Cow::Owned(Shared::new(NodeKind::Broker(node)));
    }

    /// A crashed broker starts again: the controller unfences it, and it loads its logs and the
    /// controller's image (`Cluster::start_broker`).
    fn cluster_restart(&self, state: &mut Cow<NodeState>, id: u32, o: &mut O) {
        self.controller_step(state, o, |r| {
            r.down.remove(&id);
            r.controller.broker_restarted(id)
        });
        let node = state.broker().expect("actor 0 is the broker");
        let image = node.replication.as_ref().expect("a replicated cluster").controller.partitions.clone();
        let again = self.may_crash(node.restarts);
        self.broker_step_on(state, o, id, |b, _| b.restart_with_image(NOW_MS, &image));
        if again {
            o.set_timer(ModelTimer::BrokerCrash(id), model_timeout());
        }
    }

    fn broker_timeout(&self, state: &mut Cow<NodeState>, timer: &ModelTimer, o: &mut O) {
        match timer {
            ModelTimer::Engine(t @ Timer::ResendTxnMarkers { .. }) => self.broker_step(state, o, |broker, node| {
                node.marker_resends_left -= 1;
                let effects = broker.on_timer(NOW_MS, t.clone());
                if node.marker_resends_left == 0 && broker.coordinator.decisions.iter().any(|d| !d.completed) {
                    node.starved |= self.markers_can_fail(); // a failed marker may now never be resent
                }
                effects
            }),
            // A scan that leaves the transaction open (`NoTimeoutAbort`) spends no budget; the fired timer is
            // gone all the same, so the run reaches quiescence and liveness is judged.
            ModelTimer::TxnTimeout(tid) => self.broker_step(state, o, |broker, node| {
                let (expired, effects) = broker.expire_transaction(tid, NOW_MS);
                node.timeouts_left -= u8::from(expired);
                effects
            }),
            ModelTimer::Crash => {
                let mut again = false;
                self.broker_step(state, o, |broker, node| {
                    node.restarts += 1;
                    again = self.may_crash(node.restarts);
                    broker.restart(NOW_MS)
                });
                if again {
                    o.set_timer(ModelTimer::Crash, model_timeout());
                }
            }
            ModelTimer::GroupDeadline => self.broker_step(state, o, |broker, _| {
                let at = broker.groups.next_join_deadline_ms().expect("armed while a join phase runs");
                broker.tick_groups(at)
            }),
            ModelTimer::SessionExpiry => self.broker_step(state, o, |broker, node| {
                node.session_expiries_left -= 1;
                let at = broker.groups.next_session_expiry_ms().expect("armed while a member has a session");
                broker.tick_groups(at)
            }),
            ModelTimer::BrokerCrash(id) => self.cluster_crash(state, *id, o),
            ModelTimer::BrokerRestart(id) => self.cluster_restart(state, *id, o),
            ModelTimer::Poll { partition } => {
                let before = state.broker().expect("actor 0 is the broker");
                let leader = before.leader_of(&self.ctx.partitions[*partition as usize]);
                let leader_id = leader.id;
                // A dead leader answers no fetch: the poll waits, as an idle one does.
                if before.is_down(leader_id) || self.polls_idle(leader, &before.readers, *partition) {
                    // Nothing new for any reader: re-arming the timer alone makes this a no-op.
                    o.set_timer(ModelTimer::Poll { partition: *partition }, model_timeout());
                    return;
                }
                let mut readers = before.readers.clone();
                readers.update(|r| self.readers_poll(leader, r, *partition, o));
                // An idle poll that re-arms only itself changes nothing: stateright drops the step.
                if readers != before.readers {
                    let node = BrokerNode { readers, ..before.clone() };
                    *state = Cow::Owned(Shared::new(NodeKind::Broker(node)));
                }
            }
            ModelTimer::Engine(t) | ModelTimer::Member(t) => unreachable!("broker timer {t:?}"),
        }
    }

    // ---------------------------------------------------------------- producers

    fn producer_start(&self, index: usize, o: &mut O) -> ProducerNode {
        let b = &self.ctx.bounds;
        let mut node = ProducerNode {
            producer: self.new_producer(index, 0),
            incarnation: 0,
            restarts: 0,
            next_txn: 0,
            phase: Phase::Initializing,
            events: Shared::new(Vec::new()),
            timers: BTreeSet::new(),
            request_timeouts_left: b.request_timeouts as u8,
            backoffs_left: b.backoff_retries as u8,
            starved: false,
            lost_answer: None,
            retried_after_lost: BTreeSet::new(),
        };
        self.init_instance(&mut node, o);
        node
    }

    fn new_producer(&self, index: usize, incarnation: u8) -> Producer {
        let kind = ProducerKind::Transactional { transactional_id: transactional_id(index) };
        let mut p = Producer::new(&producer_name(index, incarnation), kind, NodeId::Broker(0), self.ctx.config.clone());
        if self.ctx.bounds.replicated_cluster() {
            // It knows every broker, so it can ask another for metadata or its coordinator (`Cluster::bootstrap`).
            p.set_bootstrap((0..self.ctx.bounds.brokers as u32).collect());
        }
        p
    }

    fn init_instance(&self, node: &mut ProducerNode, o: &mut O) {
        node.phase = Phase::Initializing;
        let (_, effects) = node.producer.init_transactions(NOW_MS).expect("a new producer can initialize");
        self.producer_effects(node, effects, o);
        if self.may_crash(node.restarts) {
            o.set_timer(ModelTimer::Crash, model_timeout());
        }
    }

    /// Sends go out; client timers are armed only while their budget lasts.
    fn producer_effects(&self, node: &mut ProducerNode, effects: Effects, o: &mut O) {
        self.send_all(effects.sends, o);
        for (_, timer) in effects.timers {
            let budget = match timer {
                // A delivery timeout spends the request-timeout budget: both fire for a request that is lost.
                Timer::RequestTimeout { .. } | Timer::DeliveryTimeout { .. } => node.request_timeouts_left,
                Timer::RetryBackoff { .. } => node.backoffs_left,
                Timer::Linger { .. } => unreachable!("the model's producers do not linger (linger.ms = 0)"),
                _ => unreachable!("producers set only client timers"),
            };
            if budget > 0 {
                node.timers.insert(timer.clone());
                o.set_timer(ModelTimer::Engine(timer), model_timeout());
            } else {
                node.starved |= self.needs(&timer);
            }
        }
    }

    /// Whether leaving this client timer unarmed may stall the run: a backoff retry always resends a
    /// request the broker answered CONCURRENT_TRANSACTIONS; a request timeout matters only where requests
    /// can be lost (a lossy network, or a broker crash that drops what it held).
    pub(crate) fn needs(&self, timer: &Timer) -> bool {
        let b = &self.ctx.bounds;
        match timer {
            Timer::RetryBackoff { .. } => true,
            _ => b.lossy || (b.crashes > 0 && b.crash_broker),
        }
    }

    fn producer_step(
        &self,
        state: &mut Cow<NodeState>,
        o: &mut O,
        step: impl FnOnce(&Self, &mut ProducerNode, &mut Effects, &mut O),
    ) {
        let before = state.producer().expect("actors after the broker are producers");
        let mut after = before.clone();
        let mut effects = Effects::default();
        step(self, &mut after, &mut effects, o);
        self.drive(&mut after, &mut effects, o);
        self.producer_effects(&mut after, effects, o);
        for t in delivered(&after.producer, after.timers.iter()) {
            after.timers.remove(&t);
            o.cancel_timer(ModelTimer::Engine(t));
        }
        if !o.is_empty() || after != *before {
            *state = Cow::Owned(Shared::new(NodeKind::Producer(after)));
        }
    }

    fn producer_msg(&self, state: &mut Cow<NodeState>, env: Envelope, o: &mut O) {
        let p = state.producer().expect("a producer");
        if env.to != p.producer.id || p.phase == Phase::Done(Stop::Crashed) {
            return; // Addressed to a crashed instance: its connection is gone.
        }
        self.producer_step(state, o, |_, n, fx, o| {
            let answered = Timer::RequestTimeout { correlation_id: env.correlation_id };
            if n.timers.remove(&answered) {
                o.cancel_timer(ModelTimer::Engine(answered));
            }
            // Its own request refused by a dead broker (`cluster_msg`) is a disconnect to the producer.
            fx.extend(n.producer.on_message(NOW_MS, env));
        });
    }

    fn producer_timeout(&self, index: usize, state: &mut Cow<NodeState>, timer: &ModelTimer, o: &mut O) {
        match timer {
            ModelTimer::Engine(t) => self.producer_step(state, o, |me, n, fx, o| {
                n.timers.remove(t);
                let is_timeout = matches!(t, Timer::RequestTimeout { .. } | Timer::DeliveryTimeout { .. });
                let left = if is_timeout { &mut n.request_timeouts_left } else { &mut n.backoffs_left };
                *left -= 1;
                if *left == 0 {
                    // The budget is spent: retire this kind's armed timers (the requests then just wait).
                    let spent: Vec<Timer> = n
                        .timers
                        .iter()
                        .filter(|x| {
                            matches!(x, Timer::RequestTimeout { .. } | Timer::DeliveryTimeout { .. }) == is_timeout
                        })
                        .cloned()
                        .collect();
                    for x in spent {
                        n.timers.remove(&x);
                        o.cancel_timer(ModelTimer::Engine(x.clone()));
                        n.starved |= me.needs(&x);
                    }
                }
                fx.extend(n.producer.on_timer(NOW_MS, t.clone()));
            }),
            ModelTimer::Crash => self.producer_step(state, o, |me, n, _, o| {
                // The process dies with its connections and timers; a new instance with the same
                // transactional id starts and runs the rest of the script.
                for t in std::mem::take(&mut n.timers) {
                    o.cancel_timer(ModelTimer::Engine(t));
                }
                o.remove_random("end");
                n.restarts += 1;
                if !me.ctx.bounds.restart_producers {
                    n.phase = Phase::Done(Stop::Crashed);
                    return;
                }
                n.incarnation += 1;
                n.lost_answer = None;
                n.request_timeouts_left = me.ctx.bounds.request_timeouts as u8;
                n.backoffs_left = me.ctx.bounds.backoff_retries as u8;
                n.producer = me.new_producer(index, n.incarnation);
                me.init_instance(n, o);
            }),
            ModelTimer::TxnTimeout(_)
            | ModelTimer::Poll { .. }
            | ModelTimer::Member(_)
            | ModelTimer::GroupDeadline
            | ModelTimer::SessionExpiry
            | ModelTimer::BrokerCrash(_)
            | ModelTimer::BrokerRestart(_) => unreachable!("not a producer timer: {timer:?}"),
        }
    }

    fn producer_random(&self, index: usize, state: &mut Cow<NodeState>, choice: TransactionResult, o: &mut O) {
        self.producer_step(state, o, |me, n, fx, o| {
            if let Phase::Choosing { txn } = n.phase {
                me.run_txn(index, n, txn, choice, fx, o);
            }
        });
    }

    /// The application: reacts to completed calls by moving through its script.
    fn drive(&self, n: &mut ProducerNode, fx: &mut Effects, o: &mut O) {
        // Each round handles the completions the previous one caused; a script step causes at most one.
        for _ in 0..4 {
            let completions = n.producer.take_completions();
            if completions.is_empty() {
                return;
            }
            for c in completions {
                self.on_completion(n, c, fx, o);
            }
        }
        assert!(n.producer.take_completions().is_empty(), "completions settle within a step");
    }

    fn on_completion(&self, n: &mut ProducerNode, c: Completion, fx: &mut Effects, o: &mut O) {
        let process = n.producer.id.to_string();
        let is_send = n
            .events
            .iter()
            .any(|e| matches!(e, Event::Invoke { process: p, call_id, call: ProducerCall::Send { .. }, .. } if *p == process && *call_id == c.op));
        if is_send {
            let outcome = match c.result {
                Ok(OpOutput::Sent { ack, .. }) => CallOutcome::Sent {
                    first_offset: ack.first_offset,
                    last_offset: ack.last_offset,
                    duplicate: ack.duplicate,
                },
                Err(e) => CallOutcome::Failed { error: e.name().to_string() },
                Ok(other) => unreachable!("a send completed with {other:?}"),
            };
            n.events.update(|events| events.push(Event::Complete { time_ms: NOW_MS, process, call_id: c.op, outcome }));
            if let Phase::Sending { txn, awaiting } = n.phase {
                if awaiting > 1 {
                    n.phase = Phase::Sending { txn, awaiting: awaiting - 1 };
                } else {
                    self.end_txn(n, txn, TransactionResult::Abort, fx, o);
                }
            }
            return;
        }
        if let Phase::Ending { op, .. } = n.phase {
            if op == c.op {
                let outcome = match &c.result {
                    Ok(_) => CallOutcome::Ok,
                    Err(e) => CallOutcome::Failed { error: e.name().to_string() },
                };
                let process = process.clone();
                n.events
                    .update(|events| events.push(Event::Complete { time_ms: NOW_MS, process, call_id: op, outcome }));
            }
        }
        match (&n.phase, c.result) {
            (Phase::Initializing, Ok(OpOutput::Initialized(_))) => self.begin_next(n, o),
            (Phase::Initializing, Err(e)) => stop(n, Stop::Failed(e), o),
            (Phase::Ending { op, .. }, Ok(OpOutput::Committed | OpOutput::Aborted)) if *op == c.op => {
                self.begin_next(n, o)
            }
            (&Phase::Ending { op, txn, .. }, Err(e)) if op == c.op => {
                if n.producer.state == TxnManagerState::AbortableError {
                    self.end_txn(n, txn, TransactionResult::Abort, fx, o); // the commit failed: abort instead
                } else {
                    stop(n, Stop::Failed(e), o);
                }
            }
            (phase, result) => unreachable!("{process}: completion {result:?} in {phase:?}"),
        }
    }

    /// Offers the choice for the next transaction, or finishes the script.
    fn begin_next(&self, n: &mut ProducerNode, o: &mut O) {
        if n.next_txn as usize >= self.ctx.bounds.txns_per_producer {
            return stop(n, Stop::Finished, o);
        }
        n.phase = Phase::Choosing { txn: n.next_txn };
        n.next_txn += 1;
        o.choose_random("end", vec![TransactionResult::Commit, TransactionResult::Abort]);
    }

    /// `beginTransaction()`, one `send()` per record, then `commitTransaction()` at once (it flushes) or
    /// `abortTransaction()` once every send has completed (an abort at once would fail them undrained).
    /// The choice is made up front.
    fn run_txn(
        &self,
        index: usize,
        n: &mut ProducerNode,
        txn: u8,
        choice: TransactionResult,
        fx: &mut Effects,
        o: &mut O,
    ) {
        let b = &self.ctx.bounds;
        if let Err(e) = n.producer.begin_transaction() {
            return stop(n, Stop::Failed(e), o);
        }
        let process = n.producer.id.to_string();
        // The client-intent checks split a history into transactions at each begin (call id 0: it never
        // completes asynchronously, and op ids start at 1).
        let mut invoked =
            vec![Event::Invoke { time_ms: NOW_MS, process: process.clone(), call_id: 0, call: ProducerCall::Begin }];
        for r in 0..b.records_per_txn {
            let partition = self.ctx.partitions[r % b.partitions].clone();
            let values = vec![format!("{}:{txn}.{r}", producer_name(index, n.incarnation))];
            match n.producer.send(NOW_MS, partition.clone(), values.clone()) {
                Ok((op, effects)) => {
                    let call = ProducerCall::Send { partition, values };
                    invoked.push(Event::Invoke { time_ms: NOW_MS, process: process.clone(), call_id: op, call });
                    fx.extend(effects);
                }
                Err(_) => break, // the producer is failed; the end call will say so
            }
        }
        let awaiting = invoked.len() as u8 - 1;
        n.events.update(|events| events.extend(invoked));
        if choice == TransactionResult::Abort && awaiting > 0 {
            n.phase = Phase::Sending { txn, awaiting };
        } else {
            self.end_txn(n, txn, choice, fx, o);
        }
    }

    fn end_txn(&self, n: &mut ProducerNode, txn: u8, result: TransactionResult, fx: &mut Effects, o: &mut O) {
        let called = match result {
            TransactionResult::Commit => n.producer.commit_transaction(NOW_MS),
            TransactionResult::Abort => n.producer.abort_transaction(NOW_MS),
        };
        match called {
            Ok((op, effects)) => {
                n.phase = Phase::Ending { txn, result, op };
                let call = match result {
                    TransactionResult::Commit => ProducerCall::Commit,
                    TransactionResult::Abort => ProducerCall::Abort,
                };
                let process = n.producer.id.to_string();
                n.events.update(|events| events.push(Event::Invoke { time_ms: NOW_MS, process, call_id: op, call }));
                fx.extend(effects);
            }
            Err(_) if result == TransactionResult::Commit && n.producer.state == TxnManagerState::AbortableError => {
                self.end_txn(n, txn, TransactionResult::Abort, fx, o)
            }
            Err(e) => stop(n, Stop::Failed(e), o),
        }
    }

    // ---------------------------------------------------------------- readers

    fn fresh_consumer(&self, isolation: IsolationLevel, positions: &[Offset]) -> Consumer {
        let mut c = Consumer::new(reader_name(isolation), isolation, NodeId::Broker(0), self.ctx.config.clone());
        for (tp, pos) in self.ctx.partitions.iter().zip(positions) {
            c.seek(tp.clone(), *pos);
        }
        c
    }

    fn readers_start(&self, o: &mut O) -> Readers {
        let polls_left = self.ctx.bounds.polls_per_reader.min(UNLIMITED) as u8;
        let zeros = vec![0; self.ctx.partitions.len()];
        if polls_left > 0 {
            for partition in 0..self.ctx.partitions.len() as u32 {
                o.set_timer(ModelTimer::Poll { partition }, model_timeout());
            }
        }
        let list = READERS
            .into_iter()
            .filter(|_| polls_left > 0)
            .map(|isolation| ReaderNode { consumer: self.fresh_consumer(isolation, &zeros), polls: Vec::new() })
            .collect();
        Readers { list, polls_left }
    }

    /// Both readers poll `partition` together, each from its own position. Every single reader's history
    /// is still reachable (the other just tags along), with one interleaving to explore instead of two.
    fn readers_poll(&self, broker: &Broker, readers: &mut Readers, partition: u32, o: &mut O) {
        let mut progressed = false;
        for r in &mut readers.list {
            progressed |= self.reader_poll(broker, r, partition);
        }
        // Polls that changed nothing cost no budget, so they stay no-ops for the checker.
        if progressed && readers.polls_left as usize != UNLIMITED {
            readers.polls_left -= 1;
        }
        if readers.polls_left > 0 {
            o.set_timer(ModelTimer::Poll { partition }, model_timeout());
        } else {
            for p in 0..self.ctx.partitions.len() as u32 {
                o.cancel_timer(ModelTimer::Poll { partition: p });
            }
        }
    }

    /// Whether every reader's poll of `partition` would deliver nothing, not move and record a poll it
    /// already has. It runs the engine's read and the consumer's `filter_fetch` on the answer, as the
    /// poll would, without copying the readers: most polls in a run are such repeats.
    fn polls_idle(&self, broker: &Broker, readers: &Readers, partition: u32) -> bool {
        let tp = &self.ctx.partitions[partition as usize];
        let Some(log) = broker.partition(tp) else { return false };
        let mutations = &broker.config.mutations;
        readers.list.iter().all(|r| {
            let isolation = r.consumer.isolation;
            let fetch_offset = r.consumer.position(tp).expect("assigned");
            let Ok(data) = log.read(fetch_offset, Some(isolation), mutations) else { return false };
            let fetched = filter_fetch(isolation, fetch_offset, &data, mutations);
            fetched.records.is_empty()
                && fetched.next_fetch_offset == fetch_offset
                && r.polls.iter().any(|e| {
                    matches!(e, Event::Poll { partition: p, fetch_offset: f, high_watermark, last_stable_offset, records, position_after, .. }
                        if p == tp && *f == fetch_offset && *high_watermark == data.high_watermark
                            && *last_stable_offset == data.last_stable_offset && records.is_empty() && *position_after == fetch_offset)
                })
        })
    }

    /// One poll, served at once: the consumer's fetch goes straight to the broker's log and the answer
    /// straight back to the consumer. A lost fetch is a poll not made and a late answer is an earlier
    /// poll, so this loses no reader behaviour and spares two messages in flight per poll. The answer is
    /// built as `Broker::on_message` builds it for a Fetch (which needs `&mut Broker`; reads change nothing).
    /// Returns whether the reader's history changed.
    fn reader_poll(&self, broker: &Broker, r: &mut ReaderNode, partition: u32) -> bool {
        let tp = &self.ctx.partitions[partition as usize];
        let isolation = r.consumer.isolation;
        let fetch_offset = r.consumer.position(tp).expect("assigned");
        let mut request = r.consumer.poll(NOW_MS, tp);
        assert_eq!(request.sends.len(), 1, "one fetch per poll");
        let request = request.sends.pop().expect("one fetch");
        let Message::FetchRequest { partition: asked, fetch_offset: from, isolation: level, .. } = &request.message
        else {
            unreachable!("a consumer polls with a fetch")
        };
        let result = match broker.partition(asked) {
            None => Err(KafkaError::UnknownTopicOrPartition),
            Some(log) => log.read(*from, *level, &broker.config.mutations),
        };
        let bounds = result.as_ref().ok().map(|d| (d.high_watermark, d.last_stable_offset));
        let message = Message::FetchResponse { partition: asked.clone(), fetch_offset: *from, result };
        let response = Envelope { from: request.to, to: request.from, correlation_id: request.correlation_id, message };
        let _ = r.consumer.on_message(NOW_MS, response);
        let records: Vec<(Offset, String)> =
            r.consumer.take_delivered().into_iter().map(|c| (c.offset, c.value)).collect();
        let position_after = r.consumer.position(tp).expect("assigned");
        // Rebuilt from its positions, the consumer's request counter does not make every poll a new state.
        let positions: Vec<Offset> =
            self.ctx.partitions.iter().map(|tp| r.consumer.position(tp).expect("assigned")).collect();
        r.consumer = self.fresh_consumer(isolation, &positions);
        let Some((high_watermark, last_stable_offset)) = bounds else { return false };
        let idle = position_after == fetch_offset && records.is_empty();
        let event = Event::Poll {
            time_ms: NOW_MS,
            consumer: reader_name(isolation).to_string(),
            isolation,
            partition: tp.clone(),
            fetch_offset,
            high_watermark,
            last_stable_offset,
            records,
            position_after,
        };
        // A poll that changed nothing is kept once, so repeated empty polls form a cycle, not a path.
        if idle && r.polls.contains(&event) {
            return false;
        }
        r.polls.push(event);
        true
    }

    /// Runs one step; an engine assertion that fails in it stops this node in a `Panicked` state (with
    /// no output) instead of killing the checker, so the path to it becomes a counterexample.
    pub(crate) fn guarded(
        &self,
        state: &mut Cow<NodeState>,
        o: &mut O,
        step: impl FnOnce(&mut Cow<NodeState>, &mut O),
    ) {
        if state.panic_message().is_some() {
            return;
        }
        let mut next = state.clone();
        let mut out = Out::new();
        quiet_panics();
        IN_STEP.with(|f| f.set(true));
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| step(&mut next, &mut out)));
        IN_STEP.with(|f| f.set(false));
        match result {
            Ok(()) => {
                *state = next;
                o.append(&mut out);
            }
            Err(payload) => {
                let message = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "panic".to_string());
                let last = (**state).clone();
                *state = Cow::Owned(Shared::new(NodeKind::Panicked { message, last }));
            }
        }
    }
}

/// The delivery timers among `timers` whose batch completed: they cannot fire any more, and go.
pub(crate) fn delivered<'a>(producer: &Producer, timers: impl Iterator<Item = &'a Timer>) -> Vec<Timer> {
    let done = |t: &&Timer| matches!(t, Timer::DeliveryTimeout { op } if !producer.batch_incomplete(*op));
    timers.filter(done).cloned().collect()
}

fn stop(n: &mut ProducerNode, why: Stop, o: &mut O) {
    n.phase = Phase::Done(why);
    o.remove_random("end");
}

/// Bit `p` set when the readers' partition `p`'s log end, high watermark or LSO differs on its standing
/// leader: what a fetch can see.
fn changed_partitions(before: &BrokerNode, after: &BrokerNode) -> u16 {
    let view = |n: &BrokerNode, tp: &TopicPartition| {
        let m = &n.broker.config.mutations;
        let log = n.leader_of(tp).partition(tp)?;
        Some((log.log_end_offset(), log.high_watermark(), log.last_stable_offset(m)))
    };
    let read = after.broker.replica_manager.logs.keys().filter(|tp| tp.topic == crate::bounds::TOPIC);
    read.filter(|tp| view(before, tp) != view(after, tp)).fold(0, |bits, tp| bits | 1 << tp.partition)
}

/// Markers a step's truncation removed from a replica (`Replication::truncated_markers`).
fn note_truncated_markers(before: &Broker, after: &Broker, r: &mut Replication) {
    for (tp, was) in &before.replica_manager.logs {
        let Some(end) = after.partition(tp).map(|l| l.log_end_offset()) else { continue };
        if end >= was.log_end_offset() {
            continue;
        }
        for b in was.batches().filter(|b| b.base_offset >= end) {
            if let (Some(pid), Some(marker)) = (b.producer_id(), b.marker()) {
                r.truncated_markers.insert((tp.clone(), pid, marker.result));
            }
        }
    }
}

/// The group coordinator's deadlines as model timers: a join phase's end whenever one runs, a session
/// expiry while the budget lasts and a member has a session.
fn group_timers(broker: &Broker, node: &BrokerNode, o: &mut O) {
    let groups = &broker.groups;
    match groups.next_join_deadline_ms() {
        Some(_) => o.set_timer(ModelTimer::GroupDeadline, model_timeout()),
        None => o.cancel_timer(ModelTimer::GroupDeadline),
    }
    match groups.next_session_expiry_ms() {
        Some(_) if node.session_expiries_left > 0 => o.set_timer(ModelTimer::SessionExpiry, model_timeout()),
        _ => o.cancel_timer(ModelTimer::SessionExpiry),
    }
}

/// Transactional ids the timeout scan could abort now.
fn ongoing(broker: &Broker) -> BTreeSet<String> {
    broker
        .coordinator
        .txns
        .values()
        .filter(|m| m.state == TransactionState::Ongoing && m.pending_state.is_none())
        .map(|m| m.transactional_id.clone())
        .collect()
}

thread_local! {
    /// Set while a node step runs under `guarded`, whose panics become states, not messages.
    static IN_STEP: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Installs (once) a panic hook that keeps quiet about panics `guarded` turns into states: the checker
/// may reach the same failed assertion along thousands of paths. Other panics print as before.
fn quiet_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !IN_STEP.with(|f| f.get()) {
                previous(info);
            }
        }));
    });
}

impl Actor for Node {
    type Msg = Msg;
    type State = NodeState;
    type Timer = ModelTimer;
    type Random = TransactionResult;
    type Storage = ();

    fn on_start(&self, _id: Id, _storage: &Option<()>, o: &mut Out<Self>) -> NodeState {
        Shared::new(match self.role {
            Role::Broker => NodeKind::Broker(self.broker_start(o)),
            Role::Producer(i) => NodeKind::Producer(self.producer_start(i, o)),
            Role::Processor(i) => NodeKind::Processor(self.processor_start(i, o)),
        })
    }

    fn on_msg(&self, _id: Id, state: &mut Cow<NodeState>, _src: Id, msg: Msg, o: &mut Out<Self>) {
        let env = (*msg).clone();
        self.guarded(state, o, |state, o| match self.role {
            Role::Broker if self.ctx.bounds.replicated_cluster() => self.cluster_msg(state, env, o),
            Role::Broker => self.broker_step(state, o, |broker, _| broker.on_message(NOW_MS, env)),
            Role::Producer(_) => self.producer_msg(state, env, o),
            Role::Processor(_) => self.processor_msg(state, env, o),
        })
    }

    fn on_timeout(&self, _id: Id, state: &mut Cow<NodeState>, timer: &ModelTimer, o: &mut Out<Self>) {
        self.guarded(state, o, |state, o| match self.role {
            Role::Broker => self.broker_timeout(state, timer, o),
            Role::Producer(i) => self.producer_timeout(i, state, timer, o),
            Role::Processor(i) => self.processor_timeout(i, state, timer, o),
        })
    }

    fn on_random(&self, _id: Id, state: &mut Cow<NodeState>, random: &TransactionResult, o: &mut Out<Self>) {
        self.guarded(state, o, |state, o| match self.role {
            Role::Producer(i) => self.producer_random(i, state, *random, o),
            Role::Processor(_) => self.processor_random(state, *random, o),
            Role::Broker => {}
        })
    }

    fn name(&self) -> String {
        match self.role {
            Role::Broker => "broker".into(),
            Role::Producer(i) => format!("p{i}"),
            Role::Processor(i) => format!("w{i}"),
        }
    }
}
