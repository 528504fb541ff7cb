//! A replicated cluster (3 brokers, replication factor 3) under a plain producer's sends and a
//! transactional producer's transactions, with the network's next message delivered or lost, time moved
//! and brokers crashed and restarted by the case: the ground for the replica invariants
//! (`txnsim_properties::check_replicas`, `check_acked_writes`) and their bite proofs. A lost fetch leaves
//! its follower behind until it gives the fetch up (30 s) and retries, so the ISR shrinks, the HW waits
//! and the ISR grows again; a leader that dies then leaves a suffix only it held, which it truncates when
//! it comes back as a follower of the leader the controller elected.

use proptest::prelude::*;
use std::collections::BTreeMap;
use txnsim_engine::producer::{OpId, OpOutput};
use txnsim_engine::protocol::{Effects, NodeId};
use txnsim_engine::{Cluster, EngineConfig, KafkaError, Mutations, ProducerKind, TimeMs, TopicPartition, Topology};
use txnsim_properties::{check_acked_writes, check_replicas, AckedWrite, Invariant, Violation};

#[derive(Clone, Debug)]
pub enum ReplicaOp {
    /// The plain producer sends this many records to partition 0.
    Send(u8),
    /// The transactional producer sends this many records in its transaction (begun if none is open).
    TxnSend(u8),
    /// The transactional producer commits (true) or aborts its transaction.
    EndTxn(bool),
    /// The oldest message in flight is delivered.
    Deliver,
    /// The oldest message in flight is lost.
    Lose,
    /// Time moves this many seconds (fetch waits end, the ISR check runs, writes time out).
    Advance(u8),
    /// This broker crashes (a no-op if it is down).
    Crash(u8),
    /// This broker starts again (a no-op if it is up).
    Start(u8),
}

impl ReplicaOp {
    fn render(&self) -> String {
        match self {
            ReplicaOp::Send(n) => format!("send {n} record(s)"),
            ReplicaOp::TxnSend(n) => format!("send {n} record(s) in the transaction"),
            ReplicaOp::EndTxn(commit) => (if *commit { "commit" } else { "abort" }).into(),
            ReplicaOp::Deliver => "deliver the oldest message".into(),
            ReplicaOp::Lose => "lose the oldest message".into(),
            ReplicaOp::Advance(s) => format!("advance {s} s"),
            ReplicaOp::Crash(b) => format!("crash broker {b}"),
            ReplicaOp::Start(b) => format!("start broker {b}"),
        }
    }
}

pub fn replica_case_strategy(max_ops: usize) -> impl Strategy<Value = Vec<ReplicaOp>> {
    let op = prop_oneof![
        2 => (1u8..4).prop_map(ReplicaOp::Send),
        2 => (1u8..3).prop_map(ReplicaOp::TxnSend),
        1 => any::<bool>().prop_map(ReplicaOp::EndTxn),
        6 => Just(ReplicaOp::Deliver),
        1 => Just(ReplicaOp::Lose),
        1 => (1u8..40).prop_map(ReplicaOp::Advance),
        1 => (0u8..3).prop_map(ReplicaOp::Crash),
        2 => (0u8..3).prop_map(ReplicaOp::Start),
    ];
    proptest::collection::vec(op, 1..max_ops)
}

/// The first violation of each replica invariant, with the op after which it was found.
pub struct ReplicaReport {
    pub violations: Vec<(usize, Violation)>,
}

impl ReplicaReport {
    pub fn has(&self, inv: Invariant) -> bool {
        self.violations.iter().any(|(_, v)| v.invariant == inv)
    }

    pub fn render(&self, case: &[ReplicaOp]) -> String {
        let mut out: String = case.iter().enumerate().map(|(i, op)| format!("  #{i} {}\n", op.render())).collect();
        for (i, v) in &self.violations {
            out.push_str(&format!("  after #{i}: {v}\n"));
        }
        out
    }
}

/// Applies a client call's effects; an immediate refusal (a call the client's state does not allow
/// now) sends nothing.
fn start(
    c: &mut Cluster,
    name: &str,
    call: Result<(OpId, Effects), KafkaError>,
    sends: &mut BTreeMap<(String, OpId), Vec<String>>,
    values: Option<Vec<String>>,
) {
    if let Ok((op, effects)) = call {
        c.apply(&NodeId::Client(name.into()), effects);
        if let Some(v) = values {
            sends.insert((name.to_string(), op), v);
        }
    }
}

/// 3 brokers, one partition `t/0` with replication factor 3, a plain producer `q` and an initialized
/// transactional producer `p`.
fn three_brokers(mutations: Mutations) -> (Cluster, TopicPartition) {
    let topics: BTreeMap<String, u32> = [("t".to_string(), 1)].into_iter().collect();
    let config = EngineConfig { mutations, ..EngineConfig::default() };
    let mut c = Cluster::with_topology(&topics, config, &Topology::new(3, 3));
    c.add_producer("q", ProducerKind::Plain);
    c.add_producer("p", ProducerKind::Transactional { transactional_id: "p".into() });
    c.call_producer("p", |p, now| p.init_transactions(now)).expect("a fresh cluster initializes a producer");
    (c, TopicPartition::new("t", 0))
}

pub fn run_replica_case(case: &[ReplicaOp], mutations: Mutations) -> ReplicaReport {
    let (mut c, tp) = three_brokers(mutations);
    let mut sends: BTreeMap<(String, OpId), Vec<String>> = BTreeMap::new();
    let mut acked: Vec<AckedWrite> = Vec::new();
    let mut violations: Vec<(usize, Violation)> = Vec::new();
    for (i, op) in case.iter().enumerate() {
        let now = c.now_ms;
        match op {
            ReplicaOp::Send(n) => {
                let call = c.producers.get_mut("q").expect("added").send(now, tp.clone(), super::values_of(i, *n));
                start(&mut c, "q", call, &mut sends, Some(super::values_of(i, *n)));
            }
            ReplicaOp::TxnSend(n) => {
                let p = c.producers.get_mut("p").expect("added");
                let _ = p.begin_transaction();
                let call = p.send(now, tp.clone(), super::values_of(i, *n));
                start(&mut c, "p", call, &mut sends, Some(super::values_of(i, *n)));
            }
            ReplicaOp::EndTxn(commit) => {
                let p = c.producers.get_mut("p").expect("added");
                let call = if *commit { p.commit_transaction(now) } else { p.abort_transaction(now) };
                start(&mut c, "p", call, &mut sends, None);
            }
            ReplicaOp::Deliver => {
                if let Some(env) = c.take_message() {
                    c.deliver_message(env);
                }
            }
            ReplicaOp::Lose => {
                c.take_message();
            }
            ReplicaOp::Advance(s) => {
                let until: TimeMs = c.now_ms + *s as TimeMs * 1000;
                c.fire_timers_until(until);
            }
            ReplicaOp::Crash(b) => {
                c.crash_broker(*b as u32);
            }
            ReplicaOp::Start(b) => {
                c.start_broker(*b as u32);
            }
        }
        for (name, p) in c.producers.iter_mut() {
            for done in p.take_completions() {
                if let (Ok(OpOutput::Sent { partition, ack }), Some(values)) =
                    (done.result, sends.remove(&(name.clone(), done.op)))
                {
                    acked.push(AckedWrite { partition, first_offset: ack.first_offset, values });
                }
            }
        }
        for v in check_replicas(c.brokers()).into_iter().chain(check_acked_writes(&acked, c.brokers())) {
            if !violations.iter().any(|(_, seen)| seen.invariant == v.invariant) {
                violations.push((i, v));
            }
        }
    }
    ReplicaReport { violations }
}

/// A leader failover in one shape: `records` of an open transaction replicated or not, then what only
/// the leader comes to hold before it dies (`tail`), then `after` plain records on the new leader before
/// the old one returns as a follower and truncates.
#[derive(Clone, Debug)]
pub struct FailoverCase {
    pub records: u8,
    /// 0: the transaction's records; 1: its COMMIT marker; 2: its ABORT marker.
    pub tail: u8,
    pub after: u8,
}

impl FailoverCase {
    pub fn render(&self) -> String {
        let tail = ["the open transaction's records", "its COMMIT marker", "its ABORT marker"][self.tail as usize];
        format!(
            "  {} record(s) in a transaction; only broker 0 holds {tail}; broker 0 dies; {} plain record(s) on the new leader; broker 0 returns\n",
            self.records, self.after
        )
    }
}

pub fn failover_case_strategy() -> impl Strategy<Value = FailoverCase> {
    (1u8..4, 0u8..3, 0u8..4).prop_map(|(records, tail, after)| FailoverCase { records, tail, after })
}

/// Runs until quiet, losing `tp`'s part of every fetch answer broker 0 sends (the follower takes it as a
/// failed partition and backs off): what broker 0 appends there stays its own, while the coordinator's
/// `__transaction_state`, in the same fetches, still replicates.
fn run_cut_off(c: &mut Cluster, tp: &TopicPartition) {
    use txnsim_engine::protocol::Message;
    loop {
        let cut = match c.peek_message() {
            None => break,
            Some(e) => {
                e.from == NodeId::Broker(0)
                    && matches!(&e.message, Message::ReplicaFetchResponse { partitions }
                        if partitions.iter().any(|p| &p.partition == tp && p.result.is_ok()))
            }
        };
        if cut {
            let mut env = c.take_message().expect("peeked");
            let Message::ReplicaFetchResponse { partitions } = &mut env.message else { unreachable!("peeked") };
            for p in partitions.iter_mut().filter(|p| &p.partition == tp) {
                p.result = Err(txnsim_engine::KafkaError::NetworkException);
            }
            c.deliver_message(env);
        } else {
            c.step();
        }
    }
}

/// Delivers what is in flight until nothing is, firing no timer.
fn run_messages(c: &mut Cluster) {
    while let Some(env) = c.take_message() {
        c.deliver_message(env);
    }
}

pub fn run_failover_case(case: &FailoverCase, mutations: Mutations) -> ReplicaReport {
    let (mut c, tp) = three_brokers(mutations);
    let p = c.producers.get_mut("p").expect("added");
    p.begin_transaction().expect("a ready producer begins");
    let now = c.now_ms;
    let (_, effects) = p.send(now, tp.clone(), super::values_of(0, case.records)).expect("in a transaction");
    c.apply(&NodeId::Client("p".into()), effects);
    if case.tail == 0 {
        run_cut_off(&mut c, &tp);
    } else {
        c.run_until_quiet();
        let now = c.now_ms;
        let p = c.producers.get_mut("p").expect("added");
        let call = if case.tail == 1 { p.commit_transaction(now) } else { p.abort_transaction(now) };
        let (_, effects) = call.expect("a transaction with an acknowledged send ends");
        c.apply(&NodeId::Client("p".into()), effects);
        run_cut_off(&mut c, &tp);
    }
    let mut violations: Vec<(usize, Violation)> = Vec::new();
    let check = |c: &Cluster, phase: usize, violations: &mut Vec<(usize, Violation)>| {
        for v in check_replicas(c.brokers()) {
            if !violations.iter().any(|(_, seen)| seen.invariant == v.invariant) {
                violations.push((phase, v));
            }
        }
    };
    check(&c, 0, &mut violations);
    // Until broker 0 is back, no time passes: p's retries (of the requests the crash failed) wait, so
    // the new leader holds only what the case puts there.
    c.crash_broker(0);
    run_messages(&mut c);
    // A new plain client: its first metadata names the new leader.
    c.add_producer("q", ProducerKind::Plain);
    for k in 0..case.after {
        let now = c.now_ms;
        let q = c.producers.get_mut("q").expect("added");
        let (_, effects) = q.send(now, tp.clone(), super::values_of(1 + k as usize, 1)).expect("a plain send");
        c.apply(&NodeId::Client("q".into()), effects);
        run_messages(&mut c);
    }
    check(&c, 1, &mut violations);
    c.start_broker(0);
    run_messages(&mut c);
    check(&c, 2, &mut violations);
    // The transactional producer's send, lost with broker 0, is retried once its request times out.
    for _ in 0..3 {
        c.advance_time(31_000);
        check(&c, 3, &mut violations);
    }
    ReplicaReport { violations }
}
