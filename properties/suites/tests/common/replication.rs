//! A replicated cluster (3 brokers, replication factor 3) under a plain producer's sends, with the
//! network's next message delivered or lost and time moved by the case: the ground for the replica
//! invariants (`txnsim_properties::check_replicas`) and their bite proofs. A lost fetch leaves its
//! follower behind until it gives the fetch up (30 s) and retries, so the ISR shrinks, the HW waits and
//! the ISR grows again as the case goes.

use proptest::prelude::*;
use std::collections::BTreeMap;
use txnsim_engine::protocol::NodeId;
use txnsim_engine::{Cluster, EngineConfig, Mutations, ProducerKind, TimeMs, TopicPartition, Topology};
use txnsim_properties::{check_replicas, Invariant, Violation};

#[derive(Clone, Debug)]
pub enum ReplicaOp {
    /// The producer sends this many records to partition 0.
    Send(u8),
    /// The oldest message in flight is delivered.
    Deliver,
    /// The oldest message in flight is lost.
    Lose,
    /// Time moves this many seconds (fetch waits end, the ISR check runs, writes time out).
    Advance(u8),
}

impl ReplicaOp {
    fn render(&self) -> String {
        match self {
            ReplicaOp::Send(n) => format!("send {n} record(s)"),
            ReplicaOp::Deliver => "deliver the oldest message".into(),
            ReplicaOp::Lose => "lose the oldest message".into(),
            ReplicaOp::Advance(s) => format!("advance {s} s"),
        }
    }
}

pub fn replica_case_strategy(max_ops: usize) -> impl Strategy<Value = Vec<ReplicaOp>> {
    let op = prop_oneof![
        2 => (1u8..4).prop_map(ReplicaOp::Send),
        6 => Just(ReplicaOp::Deliver),
        1 => Just(ReplicaOp::Lose),
        1 => (1u8..40).prop_map(ReplicaOp::Advance),
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

pub fn run_replica_case(case: &[ReplicaOp], mutations: Mutations) -> ReplicaReport {
    let topics: BTreeMap<String, u32> = [("t".to_string(), 1)].into_iter().collect();
    let config = EngineConfig { mutations, ..EngineConfig::default() };
    let mut c = Cluster::with_topology(&topics, config, &Topology::new(3, 3));
    c.add_producer("p", ProducerKind::Plain);
    let tp = TopicPartition::new("t", 0);
    let mut violations: Vec<(usize, Violation)> = Vec::new();
    for (i, op) in case.iter().enumerate() {
        match op {
            ReplicaOp::Send(n) => {
                let values = super::values_of(i, *n);
                let now = c.now_ms;
                if let Ok((_, effects)) = c.producers.get_mut("p").expect("added").send(now, tp.clone(), values) {
                    c.apply(&NodeId::Client("p".into()), effects);
                }
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
        }
        for v in check_replicas(c.brokers()) {
            if !violations.iter().any(|(_, seen)| seen.invariant == v.invariant) {
                violations.push((i, v));
            }
        }
    }
    ReplicaReport { violations }
}
