//! State invariants: checks over a snapshot of the cluster's nodes, each returning minimal witnesses.

use crate::catalogue::{Invariant, Violation};
use crate::log_facts::{LogFactsBuilder, MarkerAt};
use std::collections::{BTreeMap, BTreeSet};
use txnsim_engine::coordinator::{DecisionCause, TransactionCoordinator, TransactionState};
use txnsim_engine::log::LogSegment;
use txnsim_engine::record::RecordBatch;
use txnsim_engine::{
    Broker, CoordinatorEpoch, Mutations, Offset, PartitionLog, ProducerEpoch, ProducerId, TopicPartition,
    TransactionResult,
};

/// The partition leaders' logs, read where they are: a broker's own map, or a map of references to the
/// standing leaders' replicas, so a checker never copies a log to build a view (the model checks every
/// state of a replicated cluster this way).
pub trait Logs {
    fn log(&self, tp: &TopicPartition) -> Option<&PartitionLog>;
    /// Every partition and its log, topics by name then partition numbers.
    fn logs(&self) -> Box<dyn Iterator<Item = (&TopicPartition, &PartitionLog)> + '_>;
}

impl Logs for BTreeMap<TopicPartition, PartitionLog> {
    fn log(&self, tp: &TopicPartition) -> Option<&PartitionLog> {
        self.get(tp)
    }
    fn logs(&self) -> Box<dyn Iterator<Item = (&TopicPartition, &PartitionLog)> + '_> {
        Box::new(self.iter())
    }
}

impl Logs for BTreeMap<&TopicPartition, &PartitionLog> {
    fn log(&self, tp: &TopicPartition) -> Option<&PartitionLog> {
        self.get(tp).copied()
    }
    fn logs(&self) -> Box<dyn Iterator<Item = (&TopicPartition, &PartitionLog)> + '_> {
        Box::new(self.iter().map(|(tp, log)| (*tp, *log)))
    }
}

/// What the state invariants look at: the partition leaders' logs and, where there is one, the
/// transaction coordinator. The log layer has no coordinator.
#[derive(Clone, Copy)]
pub struct ClusterView<'a> {
    pub partitions: &'a dyn Logs,
    pub coordinator: Option<&'a TransactionCoordinator>,
    /// The engine's configured mutations: the LSO is read as the engine computes it.
    pub mutations: &'a Mutations,
}

impl<'a> ClusterView<'a> {
    pub fn of_broker(broker: &'a Broker) -> Self {
        ClusterView {
            partitions: &broker.replica_manager.logs,
            coordinator: Some(&broker.coordinator),
            mutations: &broker.config.mutations,
        }
    }
}

/// Checks every state invariant on a snapshot. Stateless, so the model can call it on any state.
pub fn check_state(view: &ClusterView) -> Vec<Violation> {
    StateChecker::default().check(view)
}

/// `check_state` for a driver that checks every state of one cluster as it evolves (the scenario runner,
/// after every op of scenarios of 100,000 ops): the same violations in the same order, from reading only
/// what changed since the last call. What the engine only appends is read once: log batches and
/// aborted-index entries, decisions (frozen once completed: a marker's acknowledgement is taken only
/// while its decision is pending), coordinator transitions (cut back only by a coordinator reload, which
/// bumps the coordinator epoch). A log that lost its first segment (DeleteRecords) or shrank, an HW
/// that moved back, a reload, or fewer decisions than before is read again from the start.
#[derive(Clone, Debug, Default)]
pub struct StateChecker {
    partitions: BTreeMap<TopicPartition, PartitionState>,
    /// Decisions read so far, and those that may still change (not completed when last read).
    decisions_read: usize,
    open_decisions: BTreeSet<usize>,
    /// Each transactional id's latest decision.
    last_decision: BTreeMap<String, usize>,
    /// Completed decisions' own violations (one outcome, epoch bump), by decision.
    completed_violations: BTreeMap<usize, Vec<Violation>>,
    /// The coordinator epoch the transitions were read under, and per id: how many transitions were
    /// found valid pairwise, and the first invalid pair.
    coordinator_epoch: Option<CoordinatorEpoch>,
    transitions: BTreeMap<String, (usize, Option<(TransactionState, TransactionState)>)>,
}

/// What one partition's log has shown so far.
#[derive(Clone, Debug, Default)]
struct PartitionState {
    /// The first segment's base offset when reading began: a dropped segment changes it.
    first_segment: Offset,
    /// Where reading stopped: (segment, batches of it read), and the same for index entries.
    batches_at: (usize, usize),
    index_at: (usize, usize),
    /// Decisions have been read against this partition (else all are, the first time).
    decisions_seen: bool,
    facts: LogFactsBuilder,
    /// Every marker, by offset.
    markers: BTreeMap<Offset, MarkerAt>,
    /// Transactions not decided below `peak`: the only ones the LSO rules can object to.
    unsettled: BTreeSet<usize>,
    /// The log's highest HW since its producer state was rebuilt, when last checked.
    peak: Offset,
    index: IndexMatch,
    sequences: BTreeMap<ProducerId, Seen>,
    sequence_violations: Vec<Violation>,
    /// Closing markers by producer; each producer's latest closing transaction; offsets acknowledged
    /// by decisions of one (producer, commit?, marker epoch); closing markers not yet explained by one.
    closing_offsets: BTreeMap<ProducerId, BTreeSet<Offset>>,
    last_close: BTreeMap<ProducerId, usize>,
    acknowledged: BTreeMap<(ProducerId, bool, ProducerEpoch), BTreeSet<Offset>>,
    unexplained: BTreeSet<usize>,
    /// Decisions whose acknowledged marker here is not theirs.
    mismatches: BTreeMap<usize, Violation>,
}

/// A producer as `check_producer_sequences` has seen it so far in log order.
#[derive(Clone, Debug)]
struct Seen {
    epoch: i16,
    epoch_at: Offset,
    coordinator_epoch: Option<(i32, Offset)>,
    last_seq: Option<(i16, i32, Offset)>,
    /// `(epoch, first sequence, last sequence)` -> where it was first appended.
    ranges: BTreeMap<(i16, i32, i32), Offset>,
}

/// `(producer, first offset, marker offset, index lso)`, an aborted-index entry's fields.
type Entry = (ProducerId, Offset, Offset, Offset);

/// An expected entry: its transaction, the entry, and whether the transaction began in a dropped segment.
type Expected = (usize, Entry, bool);

/// The aborted transactions of the log against the index entries, matched as they appear. An expected
/// entry's transaction may have begun in a dropped segment (`truncated`): its first offset and LSO are
/// then unknown here, and any entry of that producer and marker at or before its first offset matches.
#[derive(Clone, Debug, Default)]
struct IndexMatch {
    /// By producer and marker offset (`same` needs both equal): each expected entry with its
    /// transaction and `truncated`, each actual one with its index position.
    expected: BTreeMap<(ProducerId, Offset), Vec<Expected>>,
    actual: BTreeMap<(ProducerId, Offset), Vec<(usize, Entry)>>,
    expected_count: usize,
    actual_count: usize,
    /// Those nothing on the other side matches: by transaction (the log's order), by index position.
    unmatched_expected: BTreeMap<usize, Entry>,
    unmatched_actual: BTreeMap<usize, Entry>,
}

fn same(e: Entry, truncated: bool, a: Entry) -> bool {
    e.0 == a.0 && e.2 == a.2 && (e.1 == a.1 || (truncated && a.1 <= e.1)) && (e.3 == a.3 || truncated)
}

impl IndexMatch {
    fn add_expected(&mut self, txn: usize, e: Entry, truncated: bool) {
        let key = (e.0, e.2);
        let mut matched = false;
        for &(pos, a) in self.actual.get(&key).into_iter().flatten() {
            if same(e, truncated, a) {
                matched = true;
                self.unmatched_actual.remove(&pos);
            }
        }
        if !matched {
            self.unmatched_expected.insert(txn, e);
        }
        self.expected.entry(key).or_default().push((txn, e, truncated));
        self.expected_count += 1;
    }

    fn add_actual(&mut self, a: Entry) {
        let (pos, key) = (self.actual_count, (a.0, a.2));
        let mut matched = false;
        for &(txn, e, truncated) in self.expected.get(&key).into_iter().flatten() {
            if same(e, truncated, a) {
                matched = true;
                self.unmatched_expected.remove(&txn);
            }
        }
        if !matched {
            self.unmatched_actual.insert(pos, a);
        }
        self.actual.entry(key).or_default().push((pos, a));
        self.actual_count += 1;
    }
}

impl StateChecker {
    /// The state invariants of `view`, which must be a later state of the cluster last checked.
    pub fn check(&mut self, view: &ClusterView) -> Vec<Violation> {
        let mut out = Vec::new();
        self.partitions.retain(|tp, _| view.partitions.log(tp).is_some());
        // Decisions read since the last call and those that could have changed since.
        let fresh: BTreeSet<usize> = match view.coordinator {
            Some(c) => self.read_decisions(c),
            None => BTreeSet::new(),
        };
        for (tp, log) in view.partitions.logs() {
            let state = self.partitions.entry(tp.clone()).or_default();
            state.read(tp, log);
            check_lso(tp, log, state, view.mutations, &mut out);
            check_aborted_index(tp, log, state, &mut out);
            out.extend(state.sequence_violations.iter().cloned());
            if let Some(c) = view.coordinator {
                check_partition_coverage(tp, log, &state.facts, c, &mut out);
            }
        }
        if let Some(c) = view.coordinator {
            let mut decisions = Vec::new();
            for (tp, log) in view.partitions.logs() {
                let state = self.partitions.get_mut(tp).expect("read above");
                check_decisions(tp, log, state, c, &fresh, &mut decisions);
            }
            out.extend(decisions);
            out.extend(self.completed_violations.values().flatten().cloned());
            self.check_coordinator_states(c, &mut out);
        }
        out
    }

    /// Reads new decisions and the completions since the last call; the decisions to look at again.
    fn read_decisions(&mut self, c: &TransactionCoordinator) -> BTreeSet<usize> {
        if c.decisions.len() < self.decisions_read {
            *self = StateChecker::default();
        }
        let mut fresh = std::mem::take(&mut self.open_decisions);
        fresh.extend(self.decisions_read..c.decisions.len());
        for (i, d) in c.decisions.iter().enumerate().skip(self.decisions_read) {
            self.last_decision.insert(d.transactional_id.clone(), i);
        }
        self.decisions_read = c.decisions.len();
        for &i in &fresh {
            let d = &c.decisions[i];
            if !d.completed {
                self.open_decisions.insert(i);
                continue;
            }
            let mut found = Vec::new();
            if let Some(tp) = d.partitions.iter().find(|tp| !d.markers.contains_key(*tp)) {
                found.push(Violation::new(
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
                found.push(Violation::new(
                    Invariant::EpochBumpOnFenceAndTimeout,
                    format!(
                        "'{}' {:?} abort wrote markers with epoch {}, the fenced producer's epoch was {}",
                        d.transactional_id, d.cause, d.marker_epoch, d.data_epoch
                    ),
                ));
            }
            if !found.is_empty() {
                self.completed_violations.insert(i, found);
            }
        }
        fresh
    }

    fn check_coordinator_states(&mut self, c: &TransactionCoordinator, out: &mut Vec<Violation>) {
        if self.coordinator_epoch != Some(c.coordinator_epoch) {
            // A reload puts back each id's metadata as last written: its transitions may be fewer.
            self.transitions.clear();
            self.coordinator_epoch = Some(c.coordinator_epoch);
        }
        for (tid, meta) in &c.txns {
            let t = &meta.transitions;
            let (valid, invalid) = self.transitions.entry(tid.clone()).or_insert((0, None));
            if t.len() < *valid {
                (*valid, *invalid) = (0, None);
            }
            if invalid.is_none() {
                let from = valid.saturating_sub(1);
                *invalid = t[from..]
                    .windows(2)
                    .find(|w| !TransactionState::is_valid_transition(w[0].state, w[1].state))
                    .map(|w| (w[0].state, w[1].state));
                *valid = t.len();
            }
            if let Some((from, to)) = *invalid {
                out.push(Violation::new(
                    Invariant::ValidCoordinatorTransitions,
                    format!("'{tid}': {} -> {} is not a transition Kafka allows", from.name(), to.name()),
                ));
            }
            let Some(&last) = self.last_decision.get(tid) else { continue };
            let last = &c.decisions[last];
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
}

/// Whether reading stopped at `at` (segment, items of it read) in a part of the log that is still there.
fn still_there<T>(segments: &[LogSegment], at: (usize, usize), items: impl Fn(&LogSegment) -> &[T]) -> bool {
    segments.get(at.0).is_some_and(|s| items(s).len() >= at.1)
}

/// Every item of `segments` from `at` on, and where reading them stops.
fn read_from<'a, T: 'a>(
    segments: &'a [LogSegment],
    at: (usize, usize),
    items: impl Fn(&'a LogSegment) -> &'a [T],
    mut read: impl FnMut(&'a T),
) -> (usize, usize) {
    let (mut seg, mut pos) = at;
    loop {
        let here = items(&segments[seg]);
        here[pos..].iter().for_each(&mut read);
        if seg + 1 == segments.len() {
            return (seg, here.len());
        }
        (seg, pos) = (seg + 1, 0);
    }
}

impl PartitionState {
    /// Reads the batches and index entries appended since the last call (all of them the first time, or
    /// when the log lost its first segment or shrank).
    fn read(&mut self, tp: &TopicPartition, log: &PartitionLog) {
        let segments = log.segments();
        let first = segments[0].base_offset;
        let intact = first == self.first_segment
            && still_there(segments, self.batches_at, |s| &s.batches)
            && still_there(segments, self.index_at, |s| &s.txn_index);
        let mut txns_before = self.facts.facts.txns.len();
        if !intact {
            let facts = self.facts.carried_below(first);
            *self = PartitionState { first_segment: first, facts, ..PartitionState::default() };
            txns_before = 0;
        }
        self.batches_at = read_from(segments, self.batches_at, |s| &s.batches, |b| self.read_batch(tp, b));
        self.unsettled.extend(txns_before..self.facts.facts.txns.len());
        let index = &mut self.index;
        self.index_at = read_from(
            segments,
            self.index_at,
            |s| &s.txn_index,
            |a| index.add_actual((a.producer_id, a.first_offset, a.last_offset, a.last_stable_offset)),
        );
    }

    fn read_batch(&mut self, tp: &TopicPartition, b: &RecordBatch) {
        let closed = self.facts.push(b);
        let marker = MarkerAt::of(b);
        if let Some(m) = marker {
            self.markers.insert(m.offset, m);
        }
        self.read_sequences(tp, b, marker);
        let Some(idx) = closed else { return };
        let t = &self.facts.facts.txns[idx];
        let m = t.marker.expect("a closed transaction has its marker");
        if m.result == TransactionResult::Abort && m.offset >= self.first_segment {
            // A transaction may have begun in a dropped segment: its first offset is then unknown here.
            let truncated = self.first_segment > 0 && t.first_of_producer;
            let entry = (t.producer_id, t.first_offset, m.offset, t.index_lso.expect("closed txns have one"));
            self.index.add_expected(idx, entry, truncated);
        }
        self.closing_offsets.entry(m.producer_id).or_default().insert(m.offset);
        // The producer's previous closing marker now has a next one, which bounds what explains it.
        if let Some(previous) = self.last_close.insert(m.producer_id, idx) {
            self.unexplained.insert(previous);
        }
        self.unexplained.insert(idx);
    }

    /// Epochs, coordinator epochs and sequences per producer, in log order.
    fn read_sequences(&mut self, tp: &TopicPartition, b: &RecordBatch, marker: Option<MarkerAt>) {
        let Some(p) = b.producer else { return };
        let out = &mut self.sequence_violations;
        let s = self.sequences.entry(p.producer_id).or_insert(Seen {
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
        if let Some(m) = marker {
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
            return;
        }
        let Some(last_seq) = b.last_sequence() else { return };
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

fn check_lso(
    tp: &TopicPartition,
    log: &PartitionLog,
    state: &mut PartitionState,
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
    let txns = &state.facts.facts.txns;
    // A transaction is settled once its marker is below the HW, and stays so if the HW moves back
    // (`ProducerStateManager.removeUnreplicatedTransactions` restores nothing); only a rebuild of
    // producer state, which lowers the peak to the HW of that moment, unsettles it again.
    let peak = log.high_watermark_peak();
    if peak < state.peak {
        state.unsettled = (0..txns.len()).collect();
    }
    state.peak = peak;
    state.unsettled.retain(|&i| txns[i].marker.is_none_or(|m| m.offset >= peak));
    let unsettled = || state.unsettled.iter().map(|&i| &txns[i]);
    // A transaction whose first batches went with deleted segments began before the log start.
    let began_before_start = |pid: ProducerId| {
        log.producer_state.entry(pid).and_then(|e| e.current_txn_first_offset).is_some_and(|o| o < start)
    };
    let first_unstable = unsettled()
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
        let below = if peak == hw { "the HW".to_string() } else { format!("the HW's peak {peak}") };
        let why = match first_unstable {
            Some(o) => format!("the earliest transaction without a marker below {below} starts at {o}"),
            None => format!("every transaction has its marker below {below}"),
        };
        out.push(Violation::new(
            Invariant::LsoIsFirstUnstableOffset,
            format!("{tp}: LSO {lso}, expected {expected}: {why}, HW {hw}"),
        ));
    }
    for t in unsettled() {
        // Batches wholly below the log start are deleted; only what a reader can still fetch counts.
        if let Some(&(base, last)) = t.batches.iter().find(|(base, last)| (*base).max(start) < lso && *last >= start) {
            let state = match t.marker {
                Some(m) => format!("its {} marker at {} is not below the HW's peak {peak}", m.result.name(), m.offset),
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

fn check_aborted_index(tp: &TopicPartition, log: &PartitionLog, state: &PartitionState, out: &mut Vec<Violation>) {
    let index = &state.index;
    let show =
        |e: (ProducerId, Offset, Offset, Offset)| format!("(pid {} first {} last {} lso {})", e.0, e.1, e.2, e.3);
    if let Some(missing) = index.unmatched_expected.values().next() {
        let actual: Vec<String> = log
            .aborted_index()
            .map(|a| show((a.producer_id, a.first_offset, a.last_offset, a.last_stable_offset)))
            .collect();
        out.push(Violation::new(
            Invariant::AbortedIndexExact,
            format!(
                "{tp}: aborted transaction {} has no matching index entry; index holds [{}]",
                show(*missing),
                actual.join(" ")
            ),
        ));
    } else if let Some(extra) = index.unmatched_actual.values().next() {
        out.push(Violation::new(
            Invariant::AbortedIndexExact,
            format!("{tp}: index entry {} matches no aborted transaction in the log", show(*extra)),
        ));
    } else if index.actual_count != index.expected_count {
        out.push(Violation::new(
            Invariant::AbortedIndexExact,
            format!("{tp}: {} index entries for {} aborted transactions", index.actual_count, index.expected_count),
        ));
    }
    for (offset, pid) in &state.facts.facts.nontxn_in_open_txn {
        out.push(Violation::new(
            Invariant::NoNonTransactionalWriteInOpenTxn,
            format!("{tp}: non-transactional batch at {offset} from producer {pid}, whose transaction is open"),
        ));
    }
}
fn check_partition_coverage(
    tp: &TopicPartition,
    log: &PartitionLog,
    facts: &LogFactsBuilder,
    c: &TransactionCoordinator,
    out: &mut Vec<Violation>,
) {
    for t in facts.open_txns().into_iter().map(|i| &facts.facts.txns[i]) {
        if t.first_offset >= log.high_watermark() {
            // Uncommitted: a failover may truncate it, and lose the `__transaction_state` record that
            // added the partition with it.
            continue;
        }
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

/// Holds one partition's markers against the coordinator's decisions. A decision's acknowledged marker
/// must be in the log as that decision's; every marker that closes a transaction must be some matching
/// decision's marker, written first there and acknowledged as it or as a later resend. A marker that
/// closes nothing (a resend) decides nothing. `fresh`: the decisions that may have changed.
fn check_decisions(
    tp: &TopicPartition,
    log: &PartitionLog,
    state: &mut PartitionState,
    c: &TransactionCoordinator,
    fresh: &BTreeSet<usize>,
    out: &mut Vec<Violation>,
) {
    let first_retained = log.segments().first().map(|s| s.base_offset).unwrap_or(0);
    // A mismatch may yet resolve (the marker written later), so mismatched decisions are read again.
    let look: BTreeSet<usize> = if state.decisions_seen {
        fresh.iter().chain(state.mismatches.keys()).copied().collect()
    } else {
        (0..c.decisions.len()).collect()
    };
    state.decisions_seen = true;
    for i in look {
        let d = &c.decisions[i];
        state.mismatches.remove(&i);
        let Some(&offset) = d.markers.get(tp) else { continue };
        let commit = d.result == TransactionResult::Commit;
        state.acknowledged.entry((d.producer_id, commit, d.marker_epoch)).or_default().insert(offset);
        let found = state.markers.get(&offset);
        let ok =
            found.is_some_and(|m| m.producer_id == d.producer_id && m.result == d.result && m.epoch == d.marker_epoch);
        if !ok && offset >= first_retained {
            let what = match found {
                Some(m) => format!("{} for producer {} epoch {}", m.result.name(), m.producer_id, m.epoch),
                None => "no marker".to_string(),
            };
            let v = Violation::new(
                Invariant::MarkerMatchesDecision,
                format!(
                    "{tp}: decision #{i} ('{}' {} epoch {}) was acknowledged at offset {offset}, which holds {what}",
                    d.transactional_id,
                    d.result.name(),
                    d.marker_epoch
                ),
            );
            state.mismatches.insert(i, v);
        }
    }
    out.extend(state.mismatches.values().cloned());
    let txns = &state.facts.facts.txns;
    let mut explained_now = Vec::new();
    for &idx in &state.unexplained {
        let m = txns[idx].marker.expect("only closing markers wait to be explained");
        if c.transactional_id_of(m.producer_id).is_none() {
            continue; // A producer this coordinator never knew (log-layer writes).
        }
        if m.offset >= log.high_watermark() {
            continue; // Not committed yet: a leader change may still truncate it.
        }
        if m.coordinator_epoch < c.loaded_at_epoch {
            // An earlier coordinator's marker: a new coordinator loads `__transaction_state` to its log end
            // (`loadTransactionMetadata`), so its predecessor may have acted on a record a later failover
            // lost. Its ledger holds only what the log kept; the outcome is the atomicity invariants' to hold.
            continue;
        }
        // Acknowledged at or after the marker, before this producer's next transaction closed.
        let next_close = state.closing_offsets[&m.producer_id].range(m.offset + 1..).next().copied();
        let explained = state
            .acknowledged
            .get(&(m.producer_id, m.result == TransactionResult::Commit, m.epoch))
            .and_then(|offsets| offsets.range(m.offset..).next())
            .is_some_and(|&o| next_close.is_none_or(|next| o < next));
        // Or an abandoned decision wrote it: another leader answered that decision with a fencing error
        // and the coordinator dropped the rest of its markers, this one's answer with them
        // (`TransactionMarkerRequestCompletionHandler`, INVALID_PRODUCER_EPOCH).
        let abandoned = || {
            c.decisions.iter().any(|d| {
                d.abandoned
                    && d.producer_id == m.producer_id
                    && d.result == m.result
                    && d.marker_epoch == m.epoch
                    && d.partitions.contains(tp)
            })
        };
        if explained || abandoned() {
            // Acknowledgements are never taken back, nor is abandoning; only a next close could bound an
            // acknowledgement (see `read_batch`).
            explained_now.push(idx);
            continue;
        }
        let pending = c.pending_completions.get(&m.producer_id).map(|p| &c.decisions[p.decision]);
        // A pending decision's marker may be in the log before its acknowledgement arrives.
        let in_flight =
            pending.is_some_and(|d| d.result == m.result && d.marker_epoch == m.epoch && !d.markers.contains_key(tp));
        if !in_flight {
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
    for idx in explained_now {
        state.unexplained.remove(&idx);
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
        for (tp, log) in view.partitions.logs() {
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
