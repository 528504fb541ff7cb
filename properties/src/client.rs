//! The one interpreter of client ops: each `ProducerCall` (what a history records a client asked for) as
//! the engine producer's call, `KafkaProducer.initTransactions`, `beginTransaction`, `send`,
//! `sendOffsetsToTransaction`, `commitTransaction` and `abortTransaction`; and the processor's
//! deterministic transform of an input record (`transform`), which the consume-transform-produce loop writes. The scenario runner's log and coordinator layers
//! (`src/scenario/runner.rs`), its network layer (`src/scenario/network.rs`) and the proptest harness
//! (`properties/suites/tests/common/producer.rs`) run their client ops through `exec`; what differs is
//! their `Layer`: how a started call's requests reach the broker (a direct call run until the cluster is
//! quiet, requests left in flight for the ops to deliver, a network a fault mode drives) and what the layer
//! records of the call (nothing, a history's invocation and completion, an expectation checked). The
//! markers a call wrote, which the runner's expectations and the proptests' reference both check, are read
//! here too (`log_ends`, `markers_since`).
//!
//! It lives in this crate because all three can reach it (the root crate and the proptest suites both
//! depend on it) and because it speaks the histories' vocabulary (`ProducerCall`), which the engine does
//! not know.

use crate::history::ProducerCall;
use std::collections::BTreeMap;
use txnsim_engine::producer::{OpId, OpOutput, Producer};
use txnsim_engine::protocol::Effects;
use txnsim_engine::{Cluster, KafkaError, Offset, TimeMs, TopicPartition};

/// A call answered by the client alone: `beginTransaction` sends nothing (`TransactionManager`).
pub type Local<'a> = &'a mut dyn FnMut(&mut Producer) -> Result<(), KafkaError>;
/// A call that sends requests: starts it on the producer at the given time.
pub type Start<'a> = &'a mut dyn FnMut(&mut Producer, TimeMs) -> Result<(OpId, Effects), KafkaError>;

/// How a layer takes a call to the broker, and what it records of it.
pub trait Layer {
    /// What a call comes to in this layer.
    type Answer;
    /// Runs a call the client answers alone, on `producer`.
    fn local(&mut self, producer: &str, call: &ProducerCall, run: Local<'_>) -> Self::Answer;
    /// Starts a call on `producer` and takes its requests to the broker.
    fn request(&mut self, producer: &str, call: &ProducerCall, start: Start<'_>) -> Self::Answer;
}

/// Runs `call` from `producer` in `layer`.
pub fn exec<L: Layer>(layer: &mut L, producer: &str, call: &ProducerCall) -> L::Answer {
    match call {
        ProducerCall::Init => layer.request(producer, call, &mut |p, now| p.init_transactions(now)),
        ProducerCall::Begin => layer.local(producer, call, &mut |p| p.begin_transaction()),
        ProducerCall::Send { partition, values } => {
            layer.request(producer, call, &mut |p, now| p.send(now, partition.clone(), values.clone()))
        }
        ProducerCall::Commit => layer.request(producer, call, &mut |p, now| p.commit_transaction(now)),
        ProducerCall::Abort => layer.request(producer, call, &mut |p, now| p.abort_transaction(now)),
        ProducerCall::SendOffsets { group, offsets } => {
            let offsets: Vec<_> = offsets.iter().map(|(tp, o)| (tp.clone(), (*o, None))).collect();
            layer.request(producer, call, &mut |p, now| {
                p.send_offsets_to_transaction(now, offsets.clone(), group.clone())
            })
        }
    }
}

/// The processor's output for one input record: a deterministic function of its value, so that a checker
/// can tell which input an output came from.
pub fn transform(value: &str) -> String {
    format!("{value}'")
}

/// The direct layer (the scenario runner's log and coordinator layers): a call runs until the cluster is
/// quiet (`Cluster::call_producer`); its answer, or none if the cluster lost it; nothing is recorded.
impl Layer for Cluster {
    type Answer = Result<Option<OpOutput>, KafkaError>;

    fn local(&mut self, producer: &str, _: &ProducerCall, run: Local<'_>) -> Self::Answer {
        run(self.producers.get_mut(producer).expect("a live producer")).map(|()| None)
    }

    fn request(&mut self, producer: &str, _: &ProducerCall, start: Start<'_>) -> Self::Answer {
        self.call_producer(producer, start)
    }
}

/// Each partition's log end on its leader, before a call whose markers `markers_since` then reads.
pub fn log_ends(cluster: &Cluster) -> BTreeMap<TopicPartition, Offset> {
    let partitions = cluster.broker.replica_manager.logs.keys();
    partitions.map(|tp| (tp.clone(), cluster.leader_log(tp).expect("a known partition").log_end_offset())).collect()
}

/// Markers appended since `before` for producer ids of `transactional_id`: the last one per partition.
pub fn markers_since(
    cluster: &Cluster,
    before: &BTreeMap<TopicPartition, Offset>,
    transactional_id: &str,
) -> BTreeMap<TopicPartition, Offset> {
    let mut out = BTreeMap::new();
    for tp in cluster.broker.replica_manager.logs.keys() {
        let log = cluster.leader_log(tp).expect("a known partition");
        let from = before.get(tp).copied().unwrap_or(0);
        // From the log's end back to `from` only: the op's appends, not the whole log. The last
        // marker is the one reported.
        let appended = log.segments().iter().rev().flat_map(|s| s.batches.iter().rev());
        for b in appended.take_while(|b| b.base_offset >= from).filter(|b| b.marker().is_some()) {
            let pid = b.producer_id().expect("markers carry a producer id");
            if cluster.coordinator().transactional_id_of(pid) == Some(transactional_id) {
                out.entry(tp.clone()).or_insert(b.base_offset);
            }
        }
    }
    out
}
