//! The log layer: raw appends to one `PartitionLog` as a partition leader sees them (client batches from
//! producers 1-3 with epochs 0-3, in- and out-of-order sequences, retries of earlier batches; coordinator
//! markers with random coordinator epochs; segment rolls; HW moves; DeleteRecords), checked against an
//! expectation written here, independently of the engine, from Kafka's `ProducerAppendInfo`,
//! `ProducerStateManager` and `TransactionIndex`.

use super::values_of;
use proptest::prelude::*;
use proptest::strategy::{BoxedStrategy, Union};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use txnsim_engine::producer_state::AppendOrigin;
use txnsim_engine::record::{BatchProducer, CompressionType, EndTxnMarker, ProduceBatch};
use txnsim_engine::{
    AbortedTxn, KafkaError, Mutations, Offset, PartitionLog, ProducerEpoch, ProducerId, TopicPartition,
    TransactionResult, TransactionVersion,
};
use txnsim_properties::{
    check_history, check_state, CallOutcome, ClusterView, Event, History, Invariant, MonotonicityChecker, ProducerCall,
    StateChecker, Violation,
};

/// Where a client batch's base sequence comes from, relative to the expectation's next sequence for the
/// producer (its last sequence + 1, or 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seq {
    Next,
    Zero,
    /// `next + 1 + k`: a gap.
    Ahead(u8),
    /// `next - 1 - k` (at least 0): a replay of an old sequence with new records.
    Behind(u8),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogOp {
    /// A client batch. `pid: None` is a plain producer's batch (no producer id).
    Append {
        pid: Option<u8>,
        epoch: u8,
        seq: Seq,
        txn: bool,
        n: u8,
    },
    /// An earlier accepted client batch (number `pick` % count), sent again unchanged: a retry after a
    /// lost answer.
    Retry {
        pick: u8,
    },
    /// A WriteTxnMarkers append, origin COORDINATOR.
    Marker {
        pid: u8,
        epoch: u8,
        commit: bool,
        coordinator_epoch: u8,
    },
    Roll,
    /// Manual HW only: the HW moves up to a batch boundary (followers copy whole batches), chosen by `pick`.
    SetHw {
        pick: u8,
    },
    /// DeleteRecords before `pick` % (LEO + 2), lowered until it splits no transaction (drops the segment
    /// of its first batch but not the one of its marker).
    DeleteRecords {
        pick: u8,
    },
}

impl LogOp {
    pub fn render(&self, i: usize) -> String {
        match *self {
            LogOp::Append { pid, epoch, seq, txn, n } => {
                let seq = match seq {
                    Seq::Next => "next".to_string(),
                    Seq::Zero => "0".to_string(),
                    Seq::Ahead(k) => format!("next+{}", k as u32 + 1),
                    Seq::Behind(k) => format!("next-{}", k as u32 + 1),
                };
                let who = match pid {
                    Some(p) => format!("producer {p} epoch {epoch} seq {seq}"),
                    None => "plain producer".to_string(),
                };
                format!(
                    "append {} batch [{}] from {who}",
                    if txn { "transactional" } else { "non-transactional" },
                    values_of(i, n).join(" ")
                )
            }
            LogOp::Retry { pick } => format!("retry of earlier batch (pick {pick})"),
            LogOp::Marker { pid, epoch, commit, coordinator_epoch } => format!(
                "{} marker for producer {pid} epoch {epoch}, coordinator epoch {coordinator_epoch}",
                if commit { "COMMIT" } else { "ABORT" }
            ),
            LogOp::Roll => "roll segment".to_string(),
            LogOp::SetHw { pick } => format!("HW moves up (pick {pick})"),
            LogOp::DeleteRecords { pick } => format!("DeleteRecords (pick {pick})"),
        }
    }
}

#[derive(Clone)]
pub struct LogCase {
    pub manual_hw: bool,
    pub ops: Vec<LogOp>,
}

impl fmt::Debug for LogCase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "one partition t/0, {}",
            if self.manual_hw { "HW moved by hand" } else { "HW follows the log end" }
        )?;
        for (i, op) in self.ops.iter().enumerate() {
            writeln!(f, "  #{i:<3} {}", op.render(i))?;
        }
        Ok(())
    }
}

pub fn log_case_strategy(max_ops: usize) -> BoxedStrategy<LogCase> {
    any::<bool>()
        .prop_flat_map(move |manual_hw| {
            (Just(manual_hw), proptest::collection::vec(log_op_strategy(manual_hw), 1..=max_ops))
        })
        .prop_map(|(manual_hw, ops)| LogCase { manual_hw, ops })
        .boxed()
}

fn log_op_strategy(manual_hw: bool) -> BoxedStrategy<LogOp> {
    let seq = prop_oneof![
        6 => Just(Seq::Next),
        2 => Just(Seq::Zero),
        1 => (0..3u8).prop_map(Seq::Ahead),
        1 => (0..3u8).prop_map(Seq::Behind),
    ];
    let pid = prop_oneof![6 => (1..=3u8).prop_map(Some), 1 => Just(None)];
    let mut arms: Vec<(u32, BoxedStrategy<LogOp>)> = vec![
        (
            8,
            (pid, 0..4u8, seq, any::<bool>(), 1..=3u8)
                .prop_map(|(pid, epoch, seq, txn, n)| LogOp::Append { pid, epoch, seq, txn, n })
                .boxed(),
        ),
        (2, any::<u8>().prop_map(|pick| LogOp::Retry { pick }).boxed()),
        (
            3,
            (1..=3u8, 0..4u8, any::<bool>(), 0..4u8)
                .prop_map(|(pid, epoch, commit, coordinator_epoch)| LogOp::Marker {
                    pid,
                    epoch,
                    commit,
                    coordinator_epoch,
                })
                .boxed(),
        ),
        (1, Just(LogOp::Roll).boxed()),
        (1, any::<u8>().prop_map(|pick| LogOp::DeleteRecords { pick }).boxed()),
    ];
    if manual_hw {
        arms.push((3, any::<u8>().prop_map(|pick| LogOp::SetHw { pick }).boxed()));
    }
    Union::new_weighted(arms).boxed()
}

// ---- the expectation: Kafka's rules, restated ----

#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    epoch: ProducerEpoch,
    coordinator_epoch: i32,
    /// `(first_seq, last_seq, first_offset, last_offset)` of the last five batches of this epoch.
    retained: VecDeque<(i32, i32, Offset, Offset)>,
    txn_first: Option<Offset>,
}

impl Entry {
    fn new() -> Self {
        Entry { epoch: -1, coordinator_epoch: -1, retained: VecDeque::new(), txn_first: None }
    }
    fn set_epoch(&mut self, epoch: ProducerEpoch) {
        if epoch != self.epoch {
            self.retained.clear();
            self.epoch = epoch;
        }
    }
}

#[derive(Clone, Debug)]
struct Segment {
    base: Offset,
    has_batches: bool,
    index: Vec<AbortedTxn>,
}

#[derive(Clone, Debug)]
struct Expect {
    manual_hw: bool,
    producers: BTreeMap<ProducerId, Entry>,
    leo: Offset,
    hw: Offset,
    start: Offset,
    /// First offset -> producer, of transactions with data and no marker.
    ongoing: BTreeMap<Offset, ProducerId>,
    /// First offset -> marker offset, of transactions whose marker is not below the HW yet.
    unreplicated: BTreeMap<Offset, Offset>,
    /// First offset -> marker offset of every transaction.
    spans: BTreeMap<Offset, Option<Offset>>,
    segments: Vec<Segment>,
}

/// What the expectation says a client append does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Appended {
    New { first: Offset, last: Offset },
    Duplicate { first: Offset, last: Offset },
}

impl Expect {
    fn new(manual_hw: bool) -> Self {
        Expect {
            manual_hw,
            producers: BTreeMap::new(),
            leo: 0,
            hw: 0,
            start: 0,
            ongoing: BTreeMap::new(),
            unreplicated: BTreeMap::new(),
            spans: BTreeMap::new(),
            segments: vec![Segment { base: 0, has_batches: false, index: Vec::new() }],
        }
    }

    /// The sequence a producer's next in-order batch carries.
    fn next_seq(&self, pid: ProducerId) -> i32 {
        self.producers.get(&pid).and_then(|e| e.retained.back()).map(|r| r.1 + 1).unwrap_or(0)
    }

    /// `UnifiedLog.analyzeAndValidateProducerState`, then `ProducerAppendInfo.appendDataBatch`, in Kafka's order:
    /// duplicate first, then epoch, sequence, transaction state.
    fn data(&mut self, batch: &ProduceBatch) -> Result<Appended, KafkaError> {
        let n = batch.values.len() as Offset;
        if batch.is_transactional && batch.producer.is_none() {
            return Err(KafkaError::InvalidRequest);
        }
        if let Some(p) = batch.producer {
            let entry = self.producers.get(&p.producer_id).cloned().unwrap_or_else(Entry::new);
            let last_seq = p.base_sequence + n as i32 - 1;
            if p.epoch == entry.epoch {
                if let Some(r) = entry.retained.iter().find(|r| r.0 == p.base_sequence && r.1 == last_seq) {
                    return Ok(Appended::Duplicate { first: r.2, last: r.3 });
                }
            }
            if p.epoch < entry.epoch {
                return Err(KafkaError::InvalidProducerEpoch);
            }
            if p.epoch != entry.epoch {
                // A new epoch starts at sequence 0, unless the producer is unknown here.
                if p.base_sequence != 0 && entry.epoch != -1 {
                    return Err(KafkaError::OutOfOrderSequence);
                }
            } else {
                let last = entry.retained.back().map(|r| r.1).unwrap_or(-1);
                if p.base_sequence != last + 1 {
                    return Err(KafkaError::OutOfOrderSequence);
                }
            }
            if !batch.is_transactional && entry.txn_first.is_some() {
                return Err(KafkaError::InvalidTxnState);
            }
        }
        let (first, last) = (self.leo, self.leo + n - 1);
        if let Some(p) = batch.producer {
            let entry = self.producers.entry(p.producer_id).or_insert_with(Entry::new);
            entry.set_epoch(p.epoch);
            entry.retained.push_back((p.base_sequence, p.base_sequence + n as i32 - 1, first, last));
            if entry.retained.len() > 5 {
                entry.retained.pop_front();
            }
            if batch.is_transactional && entry.txn_first.is_none() {
                entry.txn_first = Some(first);
                self.ongoing.insert(first, p.producer_id);
            }
            if batch.is_transactional {
                let txn_first = entry.txn_first.expect("set above");
                self.spans.entry(txn_first).or_insert(None);
            }
        }
        self.push(last + 1);
        Ok(Appended::New { first, last })
    }

    /// `ProducerAppendInfo.appendEndTxnMarker`: epoch, then coordinator-epoch check; the marker closes the producer's
    /// open transaction here, if any, and an aborted one gets its index entry.
    fn marker(&mut self, pid: ProducerId, epoch: ProducerEpoch, m: EndTxnMarker) -> Result<Offset, KafkaError> {
        if let Some(e) = self.producers.get(&pid) {
            if epoch < e.epoch {
                return Err(KafkaError::InvalidProducerEpoch);
            }
            if m.coordinator_epoch < e.coordinator_epoch {
                return Err(KafkaError::TransactionCoordinatorFenced);
            }
        }
        let offset = self.leo;
        let entry = self.producers.entry(pid).or_insert_with(Entry::new);
        entry.set_epoch(epoch);
        entry.coordinator_epoch = m.coordinator_epoch;
        if let Some(first) = entry.txn_first.take() {
            self.ongoing.remove(&first);
            *self.spans.get_mut(&first).expect("an open transaction has a span") = Some(offset);
            if m.result == TransactionResult::Abort {
                let lso = self.ongoing.keys().next().copied().unwrap_or(offset + 1);
                let segment = self.segments.last_mut().expect("an active segment");
                segment.index.push(AbortedTxn {
                    producer_id: pid,
                    first_offset: first,
                    last_offset: offset,
                    last_stable_offset: lso,
                });
            }
            self.unreplicated.insert(first, offset);
        }
        self.push(offset + 1);
        Ok(offset)
    }

    fn push(&mut self, new_leo: Offset) {
        self.leo = new_leo;
        self.segments.last_mut().expect("an active segment").has_batches = true;
    }

    fn set_hw(&mut self, hw: Offset) {
        self.hw = hw.clamp(self.start, self.leo);
        let hw = self.hw;
        self.unreplicated.retain(|_, marker| *marker >= hw);
    }

    fn roll(&mut self) {
        if self.segments.last().expect("an active segment").has_batches {
            self.segments.push(Segment { base: self.leo, has_batches: false, index: Vec::new() });
        }
    }

    fn segment_dropped_at(&self, offset: Offset, start: Offset) -> bool {
        let k = self.segments.iter().rposition(|s| s.base <= offset).unwrap_or(0);
        k + 1 < self.segments.len() && self.segments[k + 1].base <= start
    }

    /// Whether DeleteRecords before `start` would split a transaction: drop the segment holding its first
    /// batch but not the one holding its marker (or drop it while it is open). The state checks learn of a
    /// transaction only from the batches left in the log when they first see it: the incremental
    /// `StateChecker` carries what it saw before the drop (`LogFactsBuilder::carried_below`, proved by the
    /// log-start scenarios), but the one-shot `check_state` this harness holds it to cannot know the
    /// first offset or the index LSO of a transaction that began in a dropped segment. The harness deletes
    /// less instead.
    fn would_split_a_transaction(&self, start: Offset) -> bool {
        self.spans.iter().any(|(&first, &marker)| {
            self.segment_dropped_at(first, start) && !marker.is_some_and(|m| self.segment_dropped_at(m, start))
        })
    }

    fn delete_records(&mut self, before: Offset) -> Result<Offset, KafkaError> {
        if before > self.hw {
            return Err(KafkaError::OffsetOutOfRange);
        }
        self.start = self.start.max(before);
        while self.segments.len() > 1 && self.segments[1].base <= self.start {
            self.segments.remove(0);
        }
        Ok(self.start)
    }

    /// `UnifiedLog.lastStableOffset`: the first unstable offset, clamped to the log start, if it is below the HW.
    fn lso(&self) -> Offset {
        let first = [self.ongoing.keys().next(), self.unreplicated.keys().next()].into_iter().flatten().min().copied();
        match first.map(|o| o.max(self.start)) {
            Some(o) if o < self.hw => o,
            _ => self.hw,
        }
    }
}

/// What one log-layer run found.
#[derive(Clone, Debug, Default)]
pub struct LogReport {
    /// The first violation of each invariant, with the op index (`ops.len()` for the end-of-run checks).
    pub violations: Vec<(usize, Violation)>,
    pub mismatch: Option<(usize, String)>,
    pub panic: Option<(usize, String)>,
    pub lines: Vec<String>,
}

impl LogReport {
    pub fn has(&self, inv: Invariant) -> bool {
        self.violations.iter().any(|(_, v)| v.invariant == inv)
    }
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty() && self.mismatch.is_none() && self.panic.is_none()
    }
    pub fn render(&self, case: &LogCase) -> String {
        let at = |i: usize| {
            if i < case.ops.len() {
                format!("op #{i} ({})", case.ops[i].render(i))
            } else {
                "the end-of-run checks".to_string()
            }
        };
        let mut out = String::new();
        for (i, v) in &self.violations {
            out.push_str(&format!("invariant {} violated at {}:\n    {}\n", v.invariant.name(), at(*i), v.witness));
        }
        if let Some((i, m)) = &self.mismatch {
            out.push_str(&format!("engine and Kafka's rules differ at {}: {m}\n", at(*i)));
        }
        if let Some((i, p)) = &self.panic {
            out.push_str(&format!("the engine panicked at {}: {p}\n", at(*i)));
        }
        out.push_str(&format!("{case:?}"));
        out.push_str("what each op did:\n");
        for (i, line) in self.lines.iter().enumerate() {
            out.push_str(&format!("  #{i:<3} {line}\n"));
        }
        out
    }
}

fn show_result<T: fmt::Debug>(r: &Result<T, KafkaError>) -> String {
    match r {
        Ok(v) => format!("{v:?}"),
        Err(e) => e.name().to_string(),
    }
}

/// Runs a log-layer case: each op against the engine and the expectation, the state invariants (no
/// coordinator) and LSO/HW monotonicity after each op, and the history invariants over the appends'
/// acknowledgements at the end.
pub fn run_log_case(case: &LogCase, mutations: Mutations) -> LogReport {
    let tp = TopicPartition::new("t", 0);
    let mut partitions: BTreeMap<TopicPartition, PartitionLog> =
        [(tp.clone(), PartitionLog::new())].into_iter().collect();
    let mut expect = Expect::new(case.manual_hw);
    let mut report = LogReport::default();
    let mut mono = MonotonicityChecker::default();
    let mut incremental = StateChecker::default();
    let mut history = History::default();
    // Accepted client batches so far, with the history call each belongs to: a retry completes it again.
    let mut sent: Vec<(ProduceBatch, u64)> = Vec::new();
    let mut compare = true;
    let record = |report: &mut LogReport, i: usize, vs: Vec<Violation>| {
        for v in vs {
            if !report.violations.iter().any(|(_, f)| f.invariant == v.invariant) {
                report.violations.push((i, v));
            }
        }
    };
    for (i, op) in case.ops.iter().enumerate() {
        let now = i as u64;
        let step = super::catch_quietly(|| {
            let log = partitions.get_mut(&tp).expect("one partition");
            let mut differs: Option<String> = None;
            let line = match *op {
                LogOp::Append { .. } | LogOp::Retry { .. } => {
                    let mut call_id = i as u64;
                    let batch = match *op {
                        LogOp::Append { pid, epoch, seq, txn, n } => {
                            let producer = pid.map(|p| {
                                let pid = p as ProducerId;
                                let next = expect.next_seq(pid);
                                let base_sequence = match seq {
                                    Seq::Next => next,
                                    Seq::Zero => 0,
                                    Seq::Ahead(k) => next + 1 + k as i32,
                                    Seq::Behind(k) => (next - 1 - k as i32).max(0),
                                };
                                BatchProducer { producer_id: pid, epoch: epoch as ProducerEpoch, base_sequence }
                            });
                            ProduceBatch {
                                producer,
                                is_transactional: txn,
                                values: values_of(i, n),
                                compression: CompressionType::None,
                            }
                        }
                        LogOp::Retry { pick } if !sent.is_empty() => {
                            let (batch, original) = sent[pick as usize % sent.len()].clone();
                            call_id = original;
                            batch
                        }
                        _ => return ("skipped: no earlier batch".to_string(), compare_state(log, &expect, &mutations)),
                    };
                    let want = expect.data(&batch);
                    let got = log.append_data(&batch, AppendOrigin::Client, now, &mutations);
                    if !case.manual_hw {
                        let leo = log.log_end_offset();
                        log.update_high_watermark(leo, &mutations);
                    }
                    let same = match (&want, &got) {
                        (Ok(Appended::New { first, last }), Ok(g)) => {
                            !g.duplicate && g.first_offset == *first && g.last_offset == *last
                        }
                        (Ok(Appended::Duplicate { first, last }), Ok(g)) => {
                            g.duplicate && g.first_offset == *first && g.last_offset == *last
                        }
                        (Err(a), Err(b)) => a == b,
                        _ => false,
                    };
                    if !same {
                        differs = Some(format!(
                            "append: Kafka's rules say {}, the engine says {}",
                            show_result(&want),
                            show_result(&got)
                        ));
                    }
                    let process = format!("producer-{}", batch.producer.map(|p| p.producer_id).unwrap_or(0));
                    // Dedup is by sequence, not content: new records under an old sequence range are answered
                    // with the original offsets. Such a client broke the protocol; its call stays out of the
                    // history, which assumes clients that resend only what they sent.
                    let fake_retry = matches!(op, LogOp::Append { .. }) && matches!(&got, Ok(g) if g.duplicate);
                    if fake_retry {
                        // Not recorded.
                    } else if matches!(op, LogOp::Append { .. }) {
                        // Only a batch that may have landed is ever resent (its answer was lost).
                        if batch.producer.is_some() && got.is_ok() {
                            sent.push((batch.clone(), call_id));
                        }
                        history.push(Event::Invoke {
                            time_ms: now,
                            process: process.clone(),
                            call_id,
                            call: ProducerCall::Send { partition: tp.clone(), values: batch.values.clone() },
                        });
                    }
                    let outcome = match &got {
                        Ok(g) => CallOutcome::Sent {
                            first_offset: g.first_offset,
                            last_offset: g.last_offset,
                            duplicate: g.duplicate,
                        },
                        Err(e) => CallOutcome::Failed { error: e.name().to_string() },
                    };
                    if !fake_retry {
                        history.push(Event::Complete { time_ms: now, process, call_id, outcome });
                    }
                    format!("{:?} -> {}", batch.values, show_result(&got))
                }
                LogOp::Marker { pid, epoch, commit, coordinator_epoch } => {
                    let marker = EndTxnMarker {
                        result: if commit { TransactionResult::Commit } else { TransactionResult::Abort },
                        coordinator_epoch: coordinator_epoch as i32,
                    };
                    let (pid, epoch) = (pid as ProducerId, epoch as ProducerEpoch);
                    let want = expect.marker(pid, epoch, marker);
                    // The written-out rules are the classic (TV1) ones; KIP-1228's TV2 rule is tested in engine/tests.
                    let got = log.append_marker(
                        pid,
                        epoch,
                        marker,
                        AppendOrigin::Coordinator,
                        TransactionVersion::V1,
                        now,
                        &mutations,
                    );
                    if !case.manual_hw {
                        let leo = log.log_end_offset();
                        log.update_high_watermark(leo, &mutations);
                    }
                    if want != got {
                        differs = Some(format!(
                            "marker: Kafka's rules say {}, the engine says {}",
                            show_result(&want),
                            show_result(&got)
                        ));
                    }
                    format!("marker -> {}", show_result(&got))
                }
                LogOp::Roll => {
                    log.roll_segment();
                    expect.roll();
                    format!("segments at {:?}", log.segments().iter().map(|s| s.base_offset).collect::<Vec<_>>())
                }
                LogOp::SetHw { pick } => {
                    let hw = log.high_watermark();
                    let to = super::pick_batch_boundary(log, pick);
                    log.update_high_watermark(to, &mutations);
                    format!("HW {hw} -> {}", log.high_watermark())
                }
                LogOp::DeleteRecords { pick } => {
                    let mut before = pick as Offset % (log.log_end_offset() + 2);
                    while before <= expect.hw && before > expect.start && expect.would_split_a_transaction(before) {
                        before -= 1;
                    }
                    if before <= expect.hw && expect.would_split_a_transaction(before.max(expect.start)) {
                        // A roll since the last DeleteRecords made a segment droppable at the current start.
                        return (
                            "skipped: it would split a transaction".to_string(),
                            compare_state(log, &expect, &mutations),
                        );
                    }
                    let want = expect.delete_records(before);
                    let got = log.delete_records(before, &mutations);
                    if want != got {
                        differs = Some(format!(
                            "DeleteRecords before {before}: Kafka's rules say {}, the engine says {}",
                            show_result(&want),
                            show_result(&got)
                        ));
                    }
                    format!("before {before} -> {}", show_result(&got))
                }
            };
            // The expectation's HW follows the engine's (a HW move is an input, not a rule).
            expect.set_hw(log.high_watermark());
            if differs.is_none() {
                differs = compare_state(log, &expect, &mutations);
            }
            (line, differs)
        });
        match step {
            Err(msg) => {
                report.panic = Some((i, msg));
                return report;
            }
            Ok((line, differs)) => {
                let log = &partitions[&tp];
                report.lines.push(format!(
                    "{line}  [LSO {} HW {} LEO {}]",
                    log.last_stable_offset(&mutations),
                    log.high_watermark(),
                    log.log_end_offset()
                ));
                if let (Some(d), true) = (differs, compare) {
                    report.mismatch = Some((i, d));
                    compare = false;
                }
            }
        }
        let view = ClusterView { partitions: &partitions, coordinator: None, mutations: &mutations };
        let mut vs = check_state(&view);
        // The scenario runner's incremental checker must find exactly what the stateless one does.
        assert_eq!(incremental.check(&view), vs, "op {i}: StateChecker departs from check_state");
        vs.extend(mono.observe(&view));
        record(&mut report, i, vs);
    }
    let vs = check_history(&history, &partitions);
    record(&mut report, case.ops.len(), vs);
    report
}

/// Offsets, segments, the aborted index and producer state, engine against expectation.
fn compare_state(log: &PartitionLog, e: &Expect, mutations: &Mutations) -> Option<String> {
    let engine =
        (log.log_start_offset(), log.last_stable_offset(mutations), log.high_watermark(), log.log_end_offset());
    let want = (e.start, e.lso(), e.hw, e.leo);
    if engine != want {
        return Some(format!("log start/LSO/HW/LEO: engine {engine:?}, Kafka's rules {want:?}"));
    }
    let segments: Vec<Offset> = log.segments().iter().map(|s| s.base_offset).collect();
    let want_segments: Vec<Offset> = e.segments.iter().map(|s| s.base).collect();
    if segments != want_segments {
        return Some(format!("segment bases: engine {segments:?}, Kafka's rules {want_segments:?}"));
    }
    let index: Vec<AbortedTxn> = log.aborted_index().copied().collect();
    let want_index: Vec<AbortedTxn> = e.segments.iter().flat_map(|s| s.index.iter().copied()).collect();
    if index != want_index {
        return Some(format!("aborted index: engine {index:?}, Kafka's rules {want_index:?}"));
    }
    for (pid, want) in &e.producers {
        let Some(got) = log.producer_state.entry(*pid) else {
            return Some(format!("producer {pid}: no producer state in the engine"));
        };
        let retained: Vec<(i32, i32, Offset, Offset)> =
            got.batch_metadata.iter().map(|b| (b.first_seq, b.last_seq, b.first_offset, b.last_offset)).collect();
        let want_retained: Vec<(i32, i32, Offset, Offset)> = want.retained.iter().copied().collect();
        let g = (got.producer_epoch, got.coordinator_epoch, got.current_txn_first_offset, retained);
        let w = (want.epoch, want.coordinator_epoch, want.txn_first, want_retained);
        if g != w {
            return Some(format!("producer {pid} state (epoch, coordinator epoch, open txn, retained batches): engine {g:?}, Kafka's rules {w:?}"));
        }
    }
    None
}
