//! State invariants: checks over a snapshot of the cluster's nodes, each returning minimal witnesses.

use crate::catalogue::{Invariant, Violation};
use crate::log_facts::{LogFacts, MarkerAt};
use std::collections::{BTreeMap, BTreeSet};
use txnsim_engine::coordinator::{DecisionCause, TransactionCoordinator, TransactionState};
use txnsim_engine::{
    Broker, Mutations, Offset, PartitionLog, ProducerEpoch, ProducerId, TopicPartition, TransactionResult,
};

/// What the state invariants look at: the partition leaders' logs and, where there is one, the
/// transaction coordinator. The log layer has no coordinator.
#[derive(Clone, Copy)]
pub struct ClusterView<'a> {
    pub partitions: &'a BTreeMap<TopicPartition, PartitionLog>,
    pub coordinator: Option<&'a TransactionCoordinator>,
    /// The engine's configured mutations: the LSO is read as the engine computes it.
    pub mutations: &'a Mutations,
}

impl<'a> ClusterView<'a> {
    pub fn of_broker(broker: &'a Broker) -> Self {
        ClusterView {
            partitions: &broker.partitions,
            coordinator: Some(&broker.coordinator),
            mutations: &broker.config.mutations,
        }
    }
}

/// Checks every state invariant on a snapshot. Stateless, so the model can call it on any state.
pub fn check_state(view: &ClusterView) -> Vec<Violation> {
    let mut out = Vec::new();
    // Read once per partition: the checks below are linear in it, as the scenario runner calls this after
    // every op of scenarios of 100,000 ops.
    let facts: BTreeMap<&TopicPartition, LogFacts> =
        view.partitions.iter().map(|(tp, log)| (tp, LogFacts::of(log))).collect();
    for (tp, log) in view.partitions {
        let facts = &facts[tp];
        check_lso(tp, log, facts, view.mutations, &mut out);
        check_aborted_index(tp, log, facts, &mut out);
        check_producer_sequences(tp, log, facts, &mut out);
        if let Some(c) = view.coordinator {
            check_partition_coverage(tp, facts, c, &mut out);
        }
    }
    if let Some(c) = view.coordinator {
        check_decisions(view.partitions, &facts, c, &mut out);
        check_coordinator_states(c, &mut out);
    }
    out
}

fn check_lso(
    tp: &TopicPartition,
    log: &PartitionLog,
    facts: &LogFacts,
    mutations: &Mutations,
    out: &mut Vec<Violation>,
) {
    let (start, lso, hw, leo) =
        (log.log_start_offset(), log.last_stable_offset(mutations), log.high_watermark(), log.log_end_offset());
    if !(start <= lso && lso <= hw && hw <= leo) {
        out.push(Violation::new(
            Invariant::LsoBounds,
            format!("{tp}: log start {start}, LSO {lso}, HW {hw}, LEO {leo} (want start <= LSO <= HW <= LEO)"),
        ));
    }
    // A transaction whose first batches went with deleted segments began before the log start.
    let began_before_start = |pid: ProducerId| {
        log.producer_state.entry(pid).and_then(|e| e.current_txn_first_offset).is_some_and(|o| o < start)
    };
    let first_unstable = facts
        .txns
        .iter()
        .filter(|t| t.marker.is_none_or(|m| m.offset >= hw))
        .map(|t| {
            if t.marker.is_none() && t.first_of_producer && began_before_start(t.producer_id) {
                start
            } else {
                t.first_offset.max(start)
            }
        })
        .min();
    let expected = match first_unstable {
        Some(o) if o < hw => o,
        _ => hw,
    };
    if lso != expected {
        let why = match first_unstable {
            Some(o) => format!("the earliest transaction without a marker below the HW starts at {o}"),
            None => "every transaction has its marker below the HW".to_string(),
        };
        out.push(Violation::new(
            Invariant::LsoIsFirstUnstableOffset,
            format!("{tp}: LSO {lso}, expected {expected}: {why}, HW {hw}"),
        ));
    }
    for t in &facts.txns {
        let decided_below_hw = t.marker.is_some_and(|m| m.offset < hw);
        // Batches wholly below the log start are deleted; only what a reader can still fetch counts.
        if let Some(&(base, last)) = t.batches.iter().find(|(base, last)| (*base).max(start) < lso && *last >= start) {
            if !decided_below_hw {
                let state = match t.marker {
                    Some(m) => format!("its {} marker at {} is not below the HW {hw}", m.result.name(), m.offset),
                    None => "it has no marker".to_string(),
                };
                out.push(Violation::new(
                    Invariant::NothingUndecidedBelowLso,
                    format!(
                        "{tp}: batch {base}..{last} of producer {} lies below the LSO {lso} but {state}",
                        t.producer_id
                    ),
                ));
            }
        }
    }
}

fn check_aborted_index(tp: &TopicPartition, log: &PartitionLog, facts: &LogFacts, out: &mut Vec<Violation>) {
    // Entries live in the segment holding the marker; markers in dropped segments took theirs along.
    let first_segment = log.segments().first().map(|s| s.base_offset).unwrap_or(0);
    let expected: Vec<(ProducerId, Offset, Offset, Offset, bool)> = facts
        .txns
        .iter()
        .filter_map(|t| {
            let m = t.marker?;
            // A transaction may have begun in a dropped segment: its first offset is then unknown here.
            let maybe_truncated = first_segment > 0 && t.first_of_producer;
            (m.result == txnsim_engine::TransactionResult::Abort && m.offset >= first_segment).then(|| {
                (t.producer_id, t.first_offset, m.offset, t.index_lso.expect("closed txns have one"), maybe_truncated)
            })
        })
        .collect();
    let actual: Vec<(ProducerId, Offset, Offset, Offset)> =
        log.aborted_index().map(|a| (a.producer_id, a.first_offset, a.last_offset, a.last_stable_offset)).collect();
    let same = |e: &(ProducerId, Offset, Offset, Offset, bool), a: &(ProducerId, Offset, Offset, Offset)| {
        e.0 == a.0 && e.2 == a.2 && (e.1 == a.1 || (e.4 && a.1 <= e.1)) && (e.3 == a.3 || e.4)
    };
    let show =
        |e: (ProducerId, Offset, Offset, Offset)| format!("(pid {} first {} last {} lso {})", e.0, e.1, e.2, e.3);
    // `same` needs the producer and the marker offset equal: candidates are looked up by those.
    let mut actual_by_key: BTreeMap<(ProducerId, Offset), Vec<(ProducerId, Offset, Offset, Offset)>> = BTreeMap::new();
    for a in &actual {
        actual_by_key.entry((a.0, a.2)).or_default().push(*a);
    }
    let mut expected_by_key: BTreeMap<(ProducerId, Offset), Vec<(ProducerId, Offset, Offset, Offset, bool)>> =
        BTreeMap::new();
    for e in &expected {
        expected_by_key.entry((e.0, e.2)).or_default().push(*e);
    }
    let matched_actual = |e: &(ProducerId, Offset, Offset, Offset, bool)| {
        actual_by_key.get(&(e.0, e.2)).is_some_and(|c| c.iter().any(|a| same(e, a)))
    };
    let matched_expected = |a: &(ProducerId, Offset, Offset, Offset)| {
        expected_by_key.get(&(a.0, a.2)).is_some_and(|c| c.iter().any(|e| same(e, a)))
    };
    if let Some(missing) = expected.iter().find(|e| !matched_actual(e)) {
        out.push(Violation::new(
            Invariant::AbortedIndexExact,
            format!(
                "{tp}: aborted transaction {} has no matching index entry; index holds [{}]",
                show((missing.0, missing.1, missing.2, missing.3)),
                actual.iter().map(|a| show(*a)).collect::<Vec<_>>().join(" ")
            ),
        ));
    } else if let Some(extra) = actual.iter().find(|a| !matched_expected(a)) {
        out.push(Violation::new(
            Invariant::AbortedIndexExact,
            format!("{tp}: index entry {} matches no aborted transaction in the log", show(*extra)),
        ));
    } else if actual.len() != expected.len() {
        out.push(Violation::new(
            Invariant::AbortedIndexExact,
            format!("{tp}: {} index entries for {} aborted transactions", actual.len(), expected.len()),
        ));
    }
    for (offset, pid) in &facts.nontxn_in_open_txn {
        out.push(Violation::new(
            Invariant::NoNonTransactionalWriteInOpenTxn,
            format!("{tp}: non-transactional batch at {offset} from producer {pid}, whose transaction is open"),
        ));
    }
}

/// Epochs, coordinator epochs and sequences per producer, in log order.
fn check_producer_sequences(tp: &TopicPartition, log: &PartitionLog, facts: &LogFacts, out: &mut Vec<Violation>) {
    let markers: BTreeMap<Offset, MarkerAt> = facts.markers().into_iter().map(|m| (m.offset, m)).collect();
    struct Seen {
        epoch: i16,
        epoch_at: Offset,
        coordinator_epoch: Option<(i32, Offset)>,
        last_seq: Option<(i16, i32, Offset)>,
        /// `(epoch, first sequence, last sequence)` -> where it was first appended.
        ranges: BTreeMap<(i16, i32, i32), Offset>,
    }
    let mut seen: BTreeMap<ProducerId, Seen> = BTreeMap::new();
    for b in log.batches() {
        let Some(p) = b.producer else { continue };
        let s = seen.entry(p.producer_id).or_insert(Seen {
            epoch: p.epoch,
            epoch_at: b.base_offset,
            coordinator_epoch: None,
            last_seq: None,
            ranges: BTreeMap::new(),
        });
        if p.epoch < s.epoch {
            out.push(Violation::new(
                Invariant::ProducerEpochMonotonic,
                format!(
                    "{tp}: producer {} wrote epoch {} at {} after epoch {} at {}",
                    p.producer_id, p.epoch, b.base_offset, s.epoch, s.epoch_at
                ),
            ));
        } else {
            s.epoch = p.epoch;
            s.epoch_at = b.base_offset;
        }
        if let Some(m) = markers.get(&b.base_offset) {
            if let Some((ce, at)) = s.coordinator_epoch {
                if m.coordinator_epoch < ce {
                    out.push(Violation::new(
                        Invariant::CoordinatorEpochMonotonic,
                        format!(
                            "{tp}: marker at {} for producer {} has coordinator epoch {} after {ce} at {at}",
                            m.offset, m.producer_id, m.coordinator_epoch
                        ),
                    ));
                }
            }
            s.coordinator_epoch = Some((m.coordinator_epoch, m.offset));
            continue;
        }
        let Some(last_seq) = b.last_sequence() else { continue };
        let first_seq = p.base_sequence;
        if let Some(&at) = s.ranges.get(&(p.epoch, first_seq, last_seq)) {
            out.push(Violation::new(
                Invariant::NoDuplicateAppends,
                format!(
                    "{tp}: producer {} epoch {} sequences {first_seq}..{last_seq} appended at {at} and again at {}",
                    p.producer_id, p.epoch, b.base_offset
                ),
            ));
        } else if let Some((epoch, prev_last, at)) = s.last_seq {
            let contiguous = first_seq as i64 == prev_last as i64 + 1 || (first_seq == 0 && prev_last == i32::MAX);
            if epoch == p.epoch && !contiguous {
                out.push(Violation::new(
                    Invariant::NoDuplicateAppends,
                    format!(
                        "{tp}: producer {} epoch {} sequence {first_seq} at {} does not follow {prev_last} at {at}",
                        p.producer_id, p.epoch, b.base_offset
                    ),
                ));
            }
        }
        s.ranges.entry((p.epoch, first_seq, last_seq)).or_insert(b.base_offset);
        s.last_seq = Some((p.epoch, last_seq, b.base_offset));
    }
}

fn check_partition_coverage(
    tp: &TopicPartition,
    facts: &LogFacts,
    c: &TransactionCoordinator,
    out: &mut Vec<Violation>,
) {
    for t in facts.txns.iter().filter(|t| t.marker.is_none()) {
        let Some(tid) = c.transactional_id_of(t.producer_id) else { continue };
        let meta = &c.txns[tid];
        let pending = c.pending_completions.get(&t.producer_id).map(|p| &c.decisions[p.decision]);
        let covered = match meta.state {
            TransactionState::Ongoing => meta.topic_partitions.contains(tp),
            TransactionState::PrepareCommit | TransactionState::PrepareAbort => {
                pending.is_some_and(|d| d.partitions.contains(tp))
            }
            _ => false,
        };
        if !covered {
            out.push(Violation::new(
                Invariant::PartitionCoverage,
                format!(
                    "{tp}: transaction of '{tid}' (producer {}) open from offset {} but the coordinator has it {} with partitions {:?}",
                    t.producer_id,
                    t.first_offset,
                    meta.state.name(),
                    meta.topic_partitions.iter().map(|p| p.to_string()).collect::<Vec<_>>()
                ),
            ));
        }
    }
}

/// Holds each partition's markers against the coordinator's decisions. A decision's acknowledged marker
/// must be in the log as that decision's; every marker that closes a transaction must be some matching
/// decision's marker, written first there and acknowledged as it or as a later resend. A marker that
/// closes nothing (a resend) decides nothing.
fn check_decisions(
    partitions: &BTreeMap<TopicPartition, PartitionLog>,
    facts: &BTreeMap<&TopicPartition, LogFacts>,
    c: &TransactionCoordinator,
    out: &mut Vec<Violation>,
) {
    for (tp, log) in partitions {
        let facts = &facts[tp];
        let markers: BTreeMap<Offset, MarkerAt> = facts.markers().into_iter().map(|m| (m.offset, m)).collect();
        let first_retained = log.segments().first().map(|s| s.base_offset).unwrap_or(0);
        for (i, d) in c.decisions.iter().enumerate() {
            let Some(&offset) = d.markers.get(tp) else { continue };
            let found = markers.get(&offset);
            let ok = found
                .is_some_and(|m| m.producer_id == d.producer_id && m.result == d.result && m.epoch == d.marker_epoch);
            if !ok && offset >= first_retained {
                let what = match found {
                    Some(m) => format!("{} for producer {} epoch {}", m.result.name(), m.producer_id, m.epoch),
                    None => "no marker".to_string(),
                };
                out.push(Violation::new(
                    Invariant::MarkerMatchesDecision,
                    format!(
                        "{tp}: decision #{i} ('{}' {} epoch {}) was acknowledged at offset {offset}, which holds {what}",
                        d.transactional_id,
                        d.result.name(),
                        d.marker_epoch
                    ),
                ));
            }
        }
        let closing: Vec<MarkerAt> = facts.txns.iter().filter_map(|t| t.marker).collect();
        // Each producer's closing marker offsets, and the offsets acknowledged on this partition by
        // decisions of one producer, outcome and marker epoch: lookups instead of scans, as the scenario
        // runner checks logs of thousands of transactions after every op.
        let mut closing_offsets: BTreeMap<ProducerId, BTreeSet<Offset>> = BTreeMap::new();
        for m in &closing {
            closing_offsets.entry(m.producer_id).or_default().insert(m.offset);
        }
        let mut acknowledged: BTreeMap<(ProducerId, bool, ProducerEpoch), BTreeSet<Offset>> = BTreeMap::new();
        for d in &c.decisions {
            if let Some(&o) = d.markers.get(tp) {
                let commit = d.result == TransactionResult::Commit;
                acknowledged.entry((d.producer_id, commit, d.marker_epoch)).or_default().insert(o);
            }
        }
        for m in &closing {
            if c.transactional_id_of(m.producer_id).is_none() {
                continue; // A producer this coordinator never knew (log-layer writes).
            }
            // Acknowledged at or after the marker, before this producer's next transaction closed.
            let next_close = closing_offsets[&m.producer_id].range(m.offset + 1..).next().copied();
            let explained = acknowledged
                .get(&(m.producer_id, m.result == TransactionResult::Commit, m.epoch))
                .and_then(|offsets| offsets.range(m.offset..).next())
                .is_some_and(|&o| next_close.is_none_or(|next| o < next));
            let pending = c.pending_completions.get(&m.producer_id).map(|p| &c.decisions[p.decision]);
            // A pending decision's marker may be in the log before its acknowledgement arrives.
            let in_flight = pending
                .is_some_and(|d| d.result == m.result && d.marker_epoch == m.epoch && !d.markers.contains_key(tp));
            if !explained && !in_flight {
                out.push(Violation::new(
                    Invariant::MarkerMatchesDecision,
                    format!(
                        "{tp}: {} marker at {} for producer {} epoch {} closes a transaction, but no decision of that outcome and epoch wrote it",
                        m.result.name(),
                        m.offset,
                        m.producer_id,
                        m.epoch
                    ),
                ));
            }
        }
    }
    for (i, d) in c.decisions.iter().enumerate().filter(|(_, d)| d.completed) {
        if let Some(tp) = d.partitions.iter().find(|tp| !d.markers.contains_key(*tp)) {
            out.push(Violation::new(
                Invariant::OneOutcomePerTransaction,
                format!(
                    "decision #{i}: '{}' (producer {}) completed its {} over {:?} but {tp} never acknowledged its marker",
                    d.transactional_id,
                    d.producer_id,
                    d.result.name(),
                    d.partitions.iter().map(|p| p.to_string()).collect::<Vec<_>>()
                ),
            ));
        }
        if matches!(d.cause, DecisionCause::Fence | DecisionCause::Timeout) && d.marker_epoch <= d.data_epoch {
            out.push(Violation::new(
                Invariant::EpochBumpOnFenceAndTimeout,
                format!(
                    "'{}' {:?} abort wrote markers with epoch {}, the fenced producer's epoch was {}",
                    d.transactional_id, d.cause, d.marker_epoch, d.data_epoch
                ),
            ));
        }
    }
}

fn check_coordinator_states(c: &TransactionCoordinator, out: &mut Vec<Violation>) {
    for (tid, meta) in &c.txns {
        if let Some(w) = meta.transitions.windows(2).find(|w| !TransactionState::is_valid_transition(w[0], w[1])) {
            out.push(Violation::new(
                Invariant::ValidCoordinatorTransitions,
                format!("'{tid}': {} -> {} is not a transition Kafka allows", w[0].name(), w[1].name()),
            ));
        }
        let Some(last) = c.decisions.iter().rev().find(|d| &d.transactional_id == tid) else { continue };
        let (prepare, complete) = match last.result {
            txnsim_engine::TransactionResult::Commit => {
                (TransactionState::PrepareCommit, TransactionState::CompleteCommit)
            }
            txnsim_engine::TransactionResult::Abort => {
                (TransactionState::PrepareAbort, TransactionState::CompleteAbort)
            }
        };
        let ok = if last.completed {
            // After completion the id may move on (Empty, Ongoing), never to the other outcome or a
            // Prepare* without a new decision.
            let opposite = if complete == TransactionState::CompleteCommit {
                TransactionState::CompleteAbort
            } else {
                TransactionState::CompleteCommit
            };
            !matches!(meta.state, TransactionState::PrepareCommit | TransactionState::PrepareAbort)
                && meta.state != opposite
        } else {
            meta.state == prepare
        };
        if !ok {
            out.push(Violation::new(
                Invariant::DecisionIrrevocable,
                format!(
                    "'{tid}': last decision {} ({}) but the state is {}",
                    last.result.name(),
                    if last.completed { "completed" } else { "pending" },
                    meta.state.name()
                ),
            ));
        }
    }
}

/// Remembers the last LSO and HW per partition to check they never go back (invariant 1's second half).
#[derive(Clone, Debug, Default)]
pub struct MonotonicityChecker {
    last: BTreeMap<TopicPartition, (Offset, Offset)>,
}

impl MonotonicityChecker {
    pub fn observe(&mut self, view: &ClusterView) -> Vec<Violation> {
        let mut out = Vec::new();
        for (tp, log) in view.partitions {
            let now = (log.last_stable_offset(view.mutations), log.high_watermark());
            if let Some(&(lso, hw)) = self.last.get(tp) {
                if now.0 < lso || now.1 < hw {
                    out.push(Violation::new(
                        Invariant::LsoBounds,
                        format!("{tp}: LSO/HW went from {lso}/{hw} back to {}/{}", now.0, now.1),
                    ));
                }
            }
            self.last.insert(tp.clone(), now);
        }
        out
    }
}
