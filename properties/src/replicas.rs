//! Replica invariants: each replica's own log held against the leader's log and HW. Nothing here reads
//! the leader's bookkeeping of its followers (their LEOs as the leader last saw them); only which
//! replicas are in the ISR comes from the leader's partition state.

use crate::catalogue::{Invariant, Violation};
use crate::log_facts::LogFacts;
use std::collections::BTreeMap;
use txnsim_engine::protocol::NO_LEADER;
use txnsim_engine::record::RecordBatch;
use txnsim_engine::{AbortedTxn, Broker, Offset, PartitionLog, TopicPartition, TransactionResult};

/// Whose replica of a partition the state checkers read, from what each broker's replica state knows
/// (its leader and that leader's epoch): the leader named at the newest epoch any broker knows. A crashed
/// leader stands until the controller elected another, and the elected one stands before it has heard.
/// Not the highest epoch a broker claims for itself: a leader restarted as a follower would leave an
/// older claim standing, a long-dead broker's among them, whose log lacks what was committed since.
pub fn standing_leader(known: impl IntoIterator<Item = (u32, i32)>) -> Option<(u32, i32)> {
    known.into_iter().filter(|(leader, _)| *leader != NO_LEADER).max_by_key(|(_, epoch)| *epoch)
}

/// An acknowledged send: where its records went, as the producer was told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AckedWrite {
    pub partition: TopicPartition,
    pub first_offset: Offset,
    pub values: Vec<String>,
}

/// The sends a history's producers were told succeeded, with their acknowledged offsets.
pub fn acked_writes(history: &crate::History) -> Vec<AckedWrite> {
    use crate::history::{CallOutcome, Event, ProducerCall};
    let mut sends: BTreeMap<(&str, u64), (&TopicPartition, &Vec<String>)> = BTreeMap::new();
    let mut acked = Vec::new();
    for e in &history.events {
        match e {
            Event::Invoke { process, call_id, call: ProducerCall::Send { partition, values }, .. } => {
                sends.insert((process, *call_id), (partition, values));
            }
            Event::Complete { process, call_id, outcome: CallOutcome::Sent { first_offset, .. }, .. } => {
                if let Some((partition, values)) = sends.get(&(process.as_str(), *call_id)) {
                    let (partition, values) = ((*partition).clone(), (*values).clone());
                    acked.push(AckedWrite { partition, first_offset: *first_offset, values });
                }
            }
            _ => {}
        }
    }
    acked
}

/// `replica-txn-state-from-own-log`: each replica of a replicated partition holds the LSO and aborted
/// index its own batches and HW give (`LogFacts`, recomputed from nothing else but the HW's peak since
/// its producer state was rebuilt, the one piece of history Kafka's LSO depends on).
fn check_txn_state(b: &Broker, tp: &TopicPartition, log: &PartitionLog, out: &mut Vec<Violation>) {
    let facts = LogFacts::of(log);
    let mutations = &b.config.mutations;
    let lso = log.last_stable_offset(mutations);
    let (hw, peak) = (log.high_watermark(), log.high_watermark_peak());
    let expected = facts.expected_lso(log.log_start_offset(), hw, peak);
    let id = b.id;
    if lso != expected {
        let peak = if peak == hw { String::new() } else { format!(" (peak {peak} since its last rebuild)") };
        let why = format!("{tp}: replica {id}'s LSO is {lso}, but its own log and HW {hw}{peak} give {expected}");
        out.push(Violation::new(Invariant::ReplicaTxnStateFromOwnLog, why));
        return;
    }
    let mut want: Vec<AbortedTxn> = facts
        .txns
        .iter()
        .filter_map(|t| match (t.marker, t.index_lso) {
            (Some(m), Some(lso)) if m.result == TransactionResult::Abort => Some(AbortedTxn {
                producer_id: t.producer_id,
                first_offset: t.first_offset,
                last_offset: m.offset,
                last_stable_offset: lso,
            }),
            _ => None,
        })
        .collect();
    // Compared as sets, in marker order: a leader appends an entry as each marker arrives, `LogFacts`
    // lists transactions by first offset, and a fetch takes every entry overlapping it, so order says
    // nothing (`AbortedIndexCache`).
    let mut got: Vec<AbortedTxn> = log.aborted_index().copied().collect();
    got.sort_by_key(|a| (a.last_offset, a.producer_id));
    want.sort_by_key(|a| (a.last_offset, a.producer_id));
    if got != want && !mutations.has(txnsim_engine::Mutation::NoAbortedIndexEntry) {
        let why = format!("{tp}: replica {id}'s aborted index is {got:?}, but its own log gives {want:?}");
        out.push(Violation::new(Invariant::ReplicaTxnStateFromOwnLog, why));
    }
}

/// `acked-write-survives-election`: every acknowledged send's records are in the current leader's own
/// log at their acknowledged offsets. The leader is the broker leading the partition at the highest
/// leader epoch; while none does (every ISR member down), nothing is checked.
pub fn check_acked_writes<'a>(acked: &[AckedWrite], brokers: impl IntoIterator<Item = &'a Broker>) -> Vec<Violation> {
    let mut leaders: BTreeMap<&TopicPartition, (i32, &PartitionLog)> = BTreeMap::new();
    for b in brokers {
        let id = b.id;
        for (tp, p) in b.replica_manager.partitions.iter().filter(|(_, p)| p.leader == id) {
            let Some(log) = b.partition(tp) else { continue };
            if leaders.get(tp).is_none_or(|(e, _)| *e < p.leader_epoch) {
                leaders.insert(tp, (p.leader_epoch, log));
            }
        }
    }
    for w in acked {
        let Some((epoch, log)) = leaders.get(&w.partition) else { continue };
        let held: BTreeMap<Offset, &str> =
            log.batches().flat_map(|b| b.records().iter().map(|r| (r.offset, r.value.as_str()))).collect();
        for (k, v) in w.values.iter().enumerate() {
            let at = w.first_offset + k as Offset;
            if held.get(&at) != Some(&v.as_str()) {
                let why = format!(
                    "{}: {v:?} was acknowledged at offset {at}, but the leader at epoch {epoch} holds {:?} there",
                    w.partition,
                    held.get(&at)
                );
                return vec![Violation::new(Invariant::AckedWriteSurvivesElection, why)];
            }
        }
    }
    Vec::new()
}

/// Checks every replicated partition's followers against its leader. Partitions hosted alone have no
/// followers, so a single-broker cluster has nothing to check.
pub fn check_replicas<'a>(brokers: impl IntoIterator<Item = &'a Broker>) -> Vec<Violation> {
    let brokers: BTreeMap<u32, &Broker> = brokers
        .into_iter()
        .map(|b| {
            let id = b.id;
            (id, b)
        })
        .collect();
    let mut out = Vec::new();
    for b in brokers.values() {
        for tp in b.replica_manager.partitions.keys() {
            if let Some(log) = b.partition(tp) {
                check_txn_state(b, tp, log, &mut out);
            }
        }
    }
    for (&me, leader) in &brokers {
        for (tp, p) in leader.replica_manager.partitions.iter().filter(|(_, p)| p.leader == me) {
            let Some(log) = leader.partition(tp) else { continue };
            let hw = log.high_watermark();
            let batches: BTreeMap<Offset, &RecordBatch> = log.batches().map(|b| (b.base_offset, b)).collect();
            let committed = batches.values().filter(|b| b.last_offset < hw).count();
            for r in p.replicas.iter().filter(|r| **r != me) {
                let Some(rlog) = brokers.get(r).and_then(|b| b.partition(tp)) else { continue };
                let in_isr = p.isr.contains(r);
                if in_isr && rlog.log_end_offset() < hw {
                    out.push(Violation::new(
                        Invariant::HwWithinIsrLogEnds,
                        format!(
                            "{tp}: leader {me}'s HW is {hw}, but ISR member {r}'s log ends at {}",
                            rlog.log_end_offset()
                        ),
                    ));
                }
                // An ISR member's log agrees below the leader's HW; one outside the ISR (a follower yet
                // to truncate a suffix it alone holds, a crashed broker) only below its own HW, which
                // marks what was committed when it last heard from a leader.
                let bound = if in_isr { hw } else { rlog.high_watermark() };
                let mut held = 0;
                for b in rlog.batches().filter(|b| b.base_offset < bound) {
                    if batches.get(&b.base_offset) != Some(&b) {
                        out.push(Violation::new(
                            Invariant::ReplicaLogMatchesLeader,
                            format!(
                                "{tp}: replica {r}'s batch {}..{} below the HW {bound} is not leader {me}'s batch there",
                                b.base_offset, b.last_offset
                            ),
                        ));
                        break;
                    }
                    held += 1;
                }
                if in_isr && held < committed {
                    out.push(Violation::new(
                        Invariant::ReplicaLogMatchesLeader,
                        format!(
                            "{tp}: ISR member {r} holds {held} of the {committed} batches below leader {me}'s HW {hw}"
                        ),
                    ));
                }
            }
        }
    }
    out
}
