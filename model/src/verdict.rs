//! What the properties see in a state. Every invariant comes from `txnsim_properties`: the state
//! invariants from `check_state` over the broker, the history invariants from `check_history` over the
//! producers' sends and the readers' polls (with the current logs as the run's final logs), the
//! read_uncommitted-superset check from `check_read_superset` over two fresh reads, and the liveness
//! invariants from `check_liveness` at quiescent states (nothing left to happen but reader polls and
//! faults: the model's form of "after healing"). The model adds only reachability facts (`Fact`).

use crate::actors::processor::{self, ProcessorNode};
use crate::actors::{reader_name, BrokerNode, Ctx, ModelTimer, NodeState, Phase, ProducerNode, RetriedApi, Stop};
use crate::shared::{digest, DigestMap, CACHE_ENTRIES_MAX};
use crate::state::TxnState;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use txnsim_engine::coordinator::{DecisionCause, TransactionState};
use txnsim_engine::{read_to_end, IsolationLevel, Offset, PartitionLog, TopicPartition, TransactionResult};
use txnsim_properties::{
    acked_writes, check_acked_writes, check_committed_sends, check_failed_sends, check_history, check_liveness,
    check_read_superset, check_replicas, check_state, intent_claimed, ClusterView, History, Invariant, Violation,
};
use txnsim_properties::{check_exactly_once, check_group_offsets, EosView};

/// Reachability facts from the seed document and the issue, checked as `sometimes` properties.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fact {
    UncommittedReadsAhead,
    CommittedOffsetGap,
    Commit,
    Abort,
    TimeoutAbort,
    FenceAbort,
    InitProducerIdAnswerLostThenRetried,
    EndTxnAnswerLostThenRetried,
    LeaderChangeMidTransaction,
    MarkerTruncatedThenRewritten,
    ProcessorCommit,
    ProcessorRetry,
    ZombieFenced,
}

impl Fact {
    pub const ALL: [Fact; 13] = [
        Fact::UncommittedReadsAhead,
        Fact::CommittedOffsetGap,
        Fact::Commit,
        Fact::Abort,
        Fact::TimeoutAbort,
        Fact::FenceAbort,
        Fact::InitProducerIdAnswerLostThenRetried,
        Fact::EndTxnAnswerLostThenRetried,
        Fact::LeaderChangeMidTransaction,
        Fact::MarkerTruncatedThenRewritten,
        Fact::ProcessorCommit,
        Fact::ProcessorRetry,
        Fact::ZombieFenced,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fact::UncommittedReadsAhead => "ru-delivers-what-rc-cannot-yet",
            Fact::CommittedOffsetGap => "rc-offsets-have-a-gap",
            Fact::Commit => "commit-completes",
            Fact::Abort => "abort-completes",
            Fact::TimeoutAbort => "timeout-abort",
            Fact::FenceAbort => "fence-abort",
            Fact::InitProducerIdAnswerLostThenRetried => "init-producer-id-answer-lost-then-retried",
            Fact::EndTxnAnswerLostThenRetried => "end-txn-answer-lost-then-retried",
            Fact::LeaderChangeMidTransaction => "leader-changes-mid-transaction",
            Fact::MarkerTruncatedThenRewritten => "marker-truncated-then-rewritten",
            Fact::ProcessorCommit => "processor-commits-output-and-offset",
            Fact::ProcessorRetry => "processor-retries-its-input",
            Fact::ZombieFenced => "zombie-processor-fenced",
        }
    }

    pub fn statement(self) -> &'static str {
        match self {
            Fact::UncommittedReadsAhead => {
                "the read_uncommitted reader has delivered a record at or above its partition's LSO"
            }
            Fact::CommittedOffsetGap => "the read_committed reader's delivered offsets on a partition skip an offset",
            Fact::Commit => "a client commit completes (markers on every partition)",
            Fact::Abort => "a client abort completes",
            Fact::TimeoutAbort => "the coordinator aborts a transaction on timeout",
            Fact::FenceAbort => "a new producer instance fences and aborts its predecessor's transaction",
            Fact::InitProducerIdAnswerLostThenRetried => {
                "the network loses a producer's InitProducerId answer and the producer retries the request"
            }
            Fact::EndTxnAnswerLostThenRetried => {
                "the network loses a producer's EndTxn answer and the producer retries the request"
            }
            Fact::LeaderChangeMidTransaction => {
                "the controller elects a new leader for a partition while a transaction on it is open"
            }
            Fact::MarkerTruncatedThenRewritten => {
                "a marker written on the old leader is truncated from its log and written again by the coordinator's resend"
            }
            Fact::ProcessorCommit => {
                "a processor's transaction commits: the group's offset passes an input whose output is committed"
            }
            Fact::ProcessorRetry => {
                "a processor begins a second transaction over input its first took (that one did not commit: its \
                 member rewound to the group's offset, or a new instance started)"
            }
            Fact::ZombieFenced => {
                "a processor's call is refused for its stale generation, member id or producer epoch (a zombie)"
            }
        }
    }

    /// Reachable only on a replicated cluster: a property only there.
    pub fn needs_replicas(self) -> bool {
        matches!(self, Fact::LeaderChangeMidTransaction | Fact::MarkerTruncatedThenRewritten)
    }

    /// Reachable only with processors: a property only there.
    pub fn needs_processors(self) -> bool {
        matches!(self, Fact::ProcessorCommit | Fact::ProcessorRetry | Fact::ZombieFenced)
    }

    fn bit(self) -> u32 {
        1 << Fact::ALL.iter().position(|f| *f == self).expect("listed")
    }
}

/// A state's property values as bits: invariant `i` of `model_invariants` violated, fact `j` of `Fact::ALL` seen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    pub violated: u64,
    pub facts: u32,
}

/// Everything the properties found in one state, with witnesses, for reports.
#[derive(Clone, Debug, Default)]
pub struct Evaluation {
    pub violations: Vec<Violation>,
    pub facts: Vec<Fact>,
    /// The state is quiescent, so the liveness invariants were judged.
    pub quiescent: bool,
}

impl Evaluation {
    pub fn verdict(&self) -> Verdict {
        let mut v = Verdict::default();
        for violation in &self.violations {
            v.violated |= 1 << invariant_index(violation.invariant);
        }
        for f in &self.facts {
            v.facts |= f.bit();
        }
        v
    }
}

/// The invariants the model's properties judge: the catalogue's main list, then the replica invariants
/// (properties only on a replicated cluster, where they can fail), then the group and exactly-once
/// invariants (properties only with processors).
pub fn model_invariants() -> impl Iterator<Item = Invariant> {
    Invariant::ALL.into_iter().chain(Invariant::REPLICA).chain(Invariant::GROUP).chain(Invariant::EOS)
}

pub fn invariant_index(i: Invariant) -> usize {
    model_invariants().position(|x| x == i).expect("listed")
}

pub fn broker_of(s: &TxnState) -> &crate::actors::BrokerNode {
    s.actor_states[0].broker().expect("actor 0 is the broker")
}

/// The run's history so far: every producer instance's sends, then each reader's polls.
pub fn history(s: &TxnState) -> History {
    let mut h = History::default();
    for a in &s.actor_states[1..] {
        h.events.extend(a.events().expect("actors after the broker are clients").iter().cloned());
    }
    for r in &broker_of(s).readers.list {
        h.events.extend(r.polls.iter().cloned());
    }
    h
}

/// Nothing can happen any more except reader polls and faults: no producer choice open, no timer but
/// crashes and polls, no message in flight but those addressed to crashed instances.
/// Liveness is judged only there, and only if no coordinator timer was withheld for want of budget.
pub fn quiescent(ctx: &Ctx, s: &TxnState) -> bool {
    if !ctx.bounds.checks_liveness() {
        return false;
    }
    if s.random_choices.iter().any(|r| !r.map.is_empty()) {
        return false;
    }
    for timers in &s.timers_set {
        let fault_or_poll = |t: &ModelTimer| {
            matches!(
                t,
                ModelTimer::Crash | ModelTimer::BrokerCrash(_) | ModelTimer::Poll { .. } | ModelTimer::SessionExpiry
            )
        };
        if timers.iter().any(|t| !fault_or_poll(t)) {
            return false;
        }
    }
    // A producer that crashed for good waits on nothing.
    let waits = |p: &ProducerNode| p.starved && p.phase != Phase::Done(Stop::Crashed);
    let processor_waits = |p: &ProcessorNode| p.starved && !p.is_crashed();
    if broker_of(s).starved
        || s.actor_states[1..]
            .iter()
            .any(|a| a.producer().is_some_and(waits) || a.processor().is_some_and(processor_waits))
    {
        return false;
    }
    for env in s.network.iter_deliverable() {
        let dst = &s.actor_states[usize::from(env.dst)];
        let dead_producer =
            dst.producer().is_some_and(|p| env.msg.to != p.producer.id || p.phase == Phase::Done(Stop::Crashed));
        if dead_producer || dst.processor().is_some_and(|p| !p.is_addressee(&env.msg.to)) {
            continue;
        }
        return false;
    }
    true
}

/// The view the state invariants read: the standing leaders' logs and broker 0's coordinator.
fn view<'a>(node: &'a BrokerNode, logs: &'a BTreeMap<&TopicPartition, &PartitionLog>) -> ClusterView<'a> {
    ClusterView {
        partitions: logs,
        coordinator: Some(&node.broker.coordinator),
        mutations: &node.broker.config.mutations,
    }
}

/// With processors: the group's offsets against its `__consumer_offsets` log in every state
/// (`txn-offsets-visible-iff-committed`), and once no transaction is between its decision and its last
/// marker, the output and the group's offsets against the input (`exactly-once-output`,
/// `output-of-consumed-input`), where exactly-once is claimed (TV2, as the sim claims it).
fn eos_violations(node: &BrokerNode) -> Vec<Violation> {
    let broker = &node.broker;
    let mut out = check_group_offsets(broker);
    if !intent_claimed(broker.config.transaction_version) || !settled(broker) {
        return out;
    }
    let group = broker.groups.groups.get(processor::GROUP);
    let committed: BTreeMap<TopicPartition, i64> =
        group.iter().flat_map(|g| g.offsets.iter().map(|(tp, (o, _))| (tp.clone(), *o))).collect();
    let logs = node.leader_logs();
    let view = EosView {
        logs: &logs,
        input_topic: crate::bounds::TOPIC,
        output_topic: processor::OUTPUT_TOPIC,
        committed: &committed,
    };
    out.extend(check_exactly_once(&view));
    out
}

/// Every transaction decision has its markers written: no commit is half visible.
fn settled(broker: &txnsim_engine::Broker) -> bool {
    let c = &broker.coordinator;
    let preparing = |s: TransactionState| matches!(s, TransactionState::PrepareCommit | TransactionState::PrepareAbort);
    c.decisions.iter().all(|d| d.completed) && !c.txns.values().any(|m| preparing(m.state))
}

/// The state invariants, the read_uncommitted-superset check and on a replicated cluster the replica
/// invariants over the live brokers: functions of the brokers alone.
fn broker_violations(node: &BrokerNode, processors: bool) -> Vec<Violation> {
    let mutations = &node.broker.config.mutations;
    let logs = node.leader_logs();
    let mut violations = check_state(&view(node, &logs));
    for (tp, log) in logs.iter() {
        let (ru, _) = read_to_end(log, IsolationLevel::ReadUncommitted, 0, mutations);
        let (rc, _) = read_to_end(log, IsolationLevel::ReadCommitted, 0, mutations);
        violations.extend(check_read_superset(tp, 0, &ru, &rc));
    }
    if node.replication.is_some() {
        violations.extend(check_replicas(live_brokers(node)));
    }
    if processors {
        violations.extend(eos_violations(node));
    }
    violations
}

/// The brokers up now: a crashed broker's frozen state is no replica's word (as the sim has it).
fn live_brokers(node: &BrokerNode) -> impl Iterator<Item = &txnsim_engine::Broker> {
    node.brokers().into_iter().filter(|b| !node.is_down(b.id))
}

/// The liveness invariants, judged at a quiescent state: the read_committed reader keeps polling from
/// where it is, as the check assumes.
fn liveness_violations(s: &TxnState) -> Vec<Violation> {
    let node = broker_of(s);
    let mutations = &node.broker.config.mutations;
    let logs = node.leader_logs();
    let mut readers = Vec::new();
    for r in node.readers.list.iter().filter(|r| r.consumer.isolation == IsolationLevel::ReadCommitted) {
        for (tp, log) in logs.iter() {
            let from = r.consumer.position(tp).expect("assigned");
            let (_, end) = read_to_end(log, IsolationLevel::ReadCommitted, from, mutations);
            readers.push((reader_name(IsolationLevel::ReadCommitted).to_string(), (*tp).clone(), end));
        }
    }
    let mut out = check_liveness(&view(node, &logs), &readers);
    if intent_claimed(node.broker.config.transaction_version) {
        out.extend(check_committed_sends(&history(s), &logs));
    }
    out
}

/// The history invariants, with the client-intent one where it is claimed (`intent_claimed`).
fn history_violations(history: &History, node: &BrokerNode) -> Vec<Violation> {
    let logs = node.leader_logs();
    let mut out = check_history(history, &logs);
    if node.replication.is_some() {
        out.extend(check_acked_writes(&acked_writes(history), live_brokers(node)));
    }
    if intent_claimed(node.broker.config.transaction_version) {
        out.extend(check_failed_sends(history, &logs));
    }
    out
}

/// Evaluates every property on one state, with witnesses (no caching; see `verdict`).
pub fn evaluate(ctx: &Ctx, s: &TxnState) -> Evaluation {
    let node = broker_of(s);
    let mut violations = broker_violations(node, ctx.bounds.processors > 0);
    violations.extend(history_violations(&history(s), node));
    let quiescent = quiescent(ctx, s);
    if quiescent {
        violations.extend(liveness_violations(s));
    }
    Evaluation { violations, facts: facts(s), quiescent }
}

fn facts(s: &TxnState) -> Vec<Fact> {
    let node = broker_of(s);
    let broker = &node.broker;
    let logs = node.leader_logs();
    let mut out = Vec::new();
    for r in &node.readers.list {
        match r.consumer.isolation {
            IsolationLevel::ReadUncommitted => {
                let ahead = r.delivered().any(|(tp, o, _)| {
                    logs.get(tp).is_some_and(|log| o >= log.last_stable_offset(&broker.config.mutations))
                });
                if ahead {
                    out.push(Fact::UncommittedReadsAhead);
                }
            }
            IsolationLevel::ReadCommitted => {
                let mut next: std::collections::BTreeMap<&TopicPartition, Offset> = Default::default();
                let gap = r.delivered().any(|(tp, o, _)| {
                    let expected = next.insert(tp, o + 1).unwrap_or(0);
                    o > expected
                });
                if gap {
                    out.push(Fact::CommittedOffsetGap);
                }
            }
        }
    }
    let decisions = &broker.coordinator.decisions;
    let any = |f: &dyn Fn(&txnsim_engine::coordinator::TxnDecision) -> bool| decisions.iter().any(f);
    if any(&|d| d.completed && d.cause == DecisionCause::Client && d.result == TransactionResult::Commit) {
        out.push(Fact::Commit);
    }
    if any(&|d| d.completed && d.cause == DecisionCause::Client && d.result == TransactionResult::Abort) {
        out.push(Fact::Abort);
    }
    if any(&|d| d.cause == DecisionCause::Timeout) {
        out.push(Fact::TimeoutAbort);
    }
    if any(&|d| d.cause == DecisionCause::Fence) {
        out.push(Fact::FenceAbort);
    }
    let retried =
        |api| s.actor_states[1..].iter().any(|a| a.producer().is_some_and(|p| p.retried_after_lost.contains(&api)));
    if retried(RetriedApi::InitProducerId) {
        out.push(Fact::InitProducerIdAnswerLostThenRetried);
    }
    if retried(RetriedApi::EndTxn) {
        out.push(Fact::EndTxnAnswerLostThenRetried);
    }
    let processors = s.actor_states[1..].iter().filter_map(|a| a.processor());
    if processors.clone().any(|p| processor::fenced(&p.events)) {
        out.push(Fact::ZombieFenced);
    }
    if processors.clone().count() > 0 && processor_committed(node) {
        out.push(Fact::ProcessorCommit);
    }
    if processors.clone().any(|p| p.begun >= 2) {
        out.push(Fact::ProcessorRetry);
    }
    if let Some(r) = &node.replication {
        if r.leader_changed_mid_txn {
            out.push(Fact::LeaderChangeMidTransaction);
        }
        if r.marker_rewritten(&node.brokers()) {
            out.push(Fact::MarkerTruncatedThenRewritten);
        }
    }
    out
}

/// The group's committed offset has passed an input, and an output is committed.
fn processor_committed(node: &BrokerNode) -> bool {
    let broker = &node.broker;
    let offset = broker.groups.groups.get(processor::GROUP).and_then(|g| g.offsets.values().map(|(o, _)| *o).max());
    let out = TopicPartition::new(processor::OUTPUT_TOPIC, 0);
    let mutations = &broker.config.mutations;
    let output = broker
        .partition(&out)
        .is_some_and(|l| !read_to_end(l, IsolationLevel::ReadCommitted, 0, mutations).0.is_empty());
    offset.is_some_and(|o| o > 0) && output
}

fn bits(violations: &[Violation]) -> u64 {
    violations.iter().fold(0, |bits, v| bits | 1 << invariant_index(v.invariant))
}

/// Caches by content digest (64-bit, as the checker's own state fingerprints): many states share a
/// broker, or a broker and the whole history, and differ only in messages, timers or client internals.
struct Caches {
    broker: DigestMap<u64>,
    history: DigestMap<u64>,
    /// The last state this thread evaluated, by the identity of its actor states (held, so an address
    /// cannot be reused while cached): the checker asks every property of a state in a row.
    last: Option<(Vec<Arc<NodeState>>, bool, Verdict)>,
}

thread_local! {
    static CACHES: RefCell<Caches> =
        RefCell::new(Caches { broker: DigestMap::default(), history: DigestMap::default(), last: None });
}

/// The state's verdict, evaluated once per state however many properties ask.
pub fn verdict(ctx: &Ctx, s: &TxnState) -> Verdict {
    let quiescent = quiescent(ctx, s);
    CACHES.with(|cell| {
        let mut guard = cell.borrow_mut();
        let c = &mut *guard;
        if let Some((arcs, q, v)) = &c.last {
            if *q == quiescent
                && arcs.len() == s.actor_states.len()
                && arcs.iter().zip(&s.actor_states).all(|(a, b)| Arc::ptr_eq(a, b))
            {
                return *v;
            }
        }
        let node = broker_of(s);
        let brokers = digest(&(node.broker.digest(), node.replication.as_ref().map(|r| r.digest())));
        let processors = ctx.bounds.processors > 0;
        let mut violated = *c.broker.entry(brokers).or_insert_with(|| bits(&broker_violations(node, processors)));
        let key = digest(&(
            brokers,
            node.readers.digest(),
            s.actor_states[1..].iter().map(|a| a.events().map(|e| e.digest())).collect::<Vec<_>>(),
        ));
        violated |= *c.history.entry(key).or_insert_with(|| bits(&history_violations(&history(s), node)));
        if quiescent {
            violated |= bits(&liveness_violations(s));
        }
        let facts = facts(s).iter().fold(0, |f, x| f | x.bit());
        let v = Verdict { violated, facts };
        for map in [&mut c.broker, &mut c.history] {
            if map.len() > CACHE_ENTRIES_MAX {
                map.clear();
            }
        }
        c.last = Some((s.actor_states.clone(), quiescent, v));
        v
    })
}
