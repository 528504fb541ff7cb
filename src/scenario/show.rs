//! `txnsim scenario --show`: a step table a person can read. After each op, every partition's log
//! (offset: value or marker), LEO, HW, LSO, the aborted index, and what fresh readers of both isolation
//! levels deliver from the log start, so "0 vs 3" and the offset gap are visible at a glance. The steps
//! are data (`crate::html::Step`); the text table and the HTML page (`--html`) are both drawn from them.

use super::format::Op;
use super::Scenario;
use crate::html::{AbortedEntry, Cell, CellKind, PartitionView, Reading, Step, Story, TxnStatus};
use std::collections::BTreeMap;
use txnsim_engine::record::BatchBody;
use txnsim_engine::{Broker, Cluster, IsolationLevel, TopicPartition, TransactionResult};

pub fn header(sc: &Scenario) -> Vec<String> {
    let mut lines = vec![format!(
        "scenario {} ({} layer, transaction.version {}){}",
        sc.name,
        sc.layer.name(),
        sc.transaction_version.number(),
        if sc.manual_high_watermark { ", manual high watermark" } else { "" }
    )];
    if let Some(source) = &sc.source {
        lines.push(format!("  source: {source}"));
    }
    lines
}

fn describe(op: &Op) -> String {
    let tp = |topic: &Option<String>, p: &u32| format!("{}/{p}", topic.as_deref().unwrap_or("t"));
    match op {
        Op::InitProducer { producer, transactional_id, .. } => match transactional_id {
            Some(t) => format!("init_producer {producer} (transactional.id {t})"),
            None => format!("init_producer {producer}"),
        },
        Op::Begin { producer, .. } => format!("begin {producer}"),
        Op::Commit { producer, .. } => format!("commit {producer}"),
        Op::Abort { producer, .. } => format!("abort {producer}"),
        Op::Produce { producer, topic, partition, values, .. } => {
            format!("produce {producer} -> {} {values:?}", tp(topic, partition))
        }
        Op::ProduceNontxn { producer, topic, partition, values, .. } => format!(
            "produce_nontxn {} -> {} {values:?}",
            producer.as_deref().unwrap_or("(plain)"),
            tp(topic, partition)
        ),
        Op::CrashProducer { producer } => format!("crash_producer {producer}"),
        Op::CrashBroker { broker } => format!("crash_broker {broker}"),
        Op::StartBroker { broker } => format!("start_broker {broker}"),
        Op::ExpireTxn { producer, .. } => format!("expire_txn {producer}"),
        Op::AppendBatch { topic, partition, producer_id, epoch, base_sequence, transactional, values, .. } => {
            let who = match producer_id {
                Some(pid) => format!("pid {pid} epoch {} seq {}", epoch.unwrap_or(-1), base_sequence.unwrap_or(-1)),
                None => "plain".to_string(),
            };
            let kind = if *transactional { "transactional" } else { "non-transactional" };
            format!("append_batch {} {who} {kind} {values:?}", tp(topic, partition))
        }
        Op::AppendMarker { topic, partition, producer_id, epoch, marker_type, coordinator_epoch, .. } => format!(
            "append_marker {} pid {producer_id} epoch {epoch} {marker_type:?} coordinator_epoch {coordinator_epoch}",
            tp(topic, partition)
        ),
        Op::RollSegment { topic, partition } => format!("roll_segment {}", tp(topic, partition)),
        Op::SetHighWatermark { topic, partition, offset } => {
            format!("set_high_watermark {} {offset}", tp(topic, partition))
        }
        Op::DeleteRecords { topic, partition, before_offset, .. } => {
            format!("delete_records {} before {before_offset}", tp(topic, partition))
        }
        Op::DeliverFetch { isolation, fetch_offset, batches, aborted_transactions, .. } => format!(
            "deliver_fetch {isolation:?} at {fetch_offset}: {} batch(es), {} aborted",
            batches.len(),
            aborted_transactions.len()
        ),
        Op::Read { isolation, topic, partition, from_offset, .. } => {
            format!("read {isolation:?} {} from {from_offset}", tp(topic, partition))
        }
        Op::Check { topic, partition, .. } => format!("check {}", tp(topic, partition)),
        Op::AbortedTxns { topic, partition, from_offset, upper_bound, .. } => {
            format!("aborted_txns {} from {from_offset} upper bound {upper_bound}", tp(topic, partition))
        }
    }
}

/// One op's row of the step table: the op, its outcome, and every partition as it is afterwards.
pub fn step(i: usize, op: &Op, outcome: &str, differs: bool, cluster: Option<&mut Cluster>, sc: &Scenario) -> Step {
    let partitions = match cluster {
        Some(cluster) => sc
            .topics
            .iter()
            .flat_map(|(topic, count)| (0..*count).map(move |p| TopicPartition::new(topic, p)))
            .map(|tp| partition(cluster, &tp))
            .collect(),
        None => Vec::new(),
    };
    Step { index: i, op: describe(op), outcome: outcome.to_string(), differs, partitions }
}

/// A step of a run that is no scenario (a replay's event, a counterexample's step): the broker as it
/// stood then, every partition drawn as a scenario's are, read by fresh consumers through a cluster
/// of its own (so reading leaves the snapshot as it was).
pub fn broker_step(index: usize, op: String, outcome: String, differs: bool, broker: &Broker) -> Step {
    let mut topics: BTreeMap<String, u32> = BTreeMap::new();
    for tp in broker.replica_manager.logs.keys() {
        let count = topics.entry(tp.topic.clone()).or_insert(0);
        *count = (*count).max(tp.partition + 1);
    }
    // A broker of its own that leads every partition, holding `broker`'s logs and coordinator: the readers
    // read each partition as a consumer reads it from its leader, whichever broker `broker` was (a replay's
    // coordinator broker follows the partitions others lead, and its fetch path refuses them).
    let mut cluster = Cluster::new(&topics, broker.config.clone());
    cluster.broker.replica_manager.logs = broker.replica_manager.logs.clone();
    cluster.broker.coordinator = broker.coordinator.clone();
    let partitions = broker.replica_manager.logs.keys().map(|tp| partition(&mut cluster, tp)).collect();
    Step { index, op, outcome, differs, partitions }
}

/// The step's lines of the text table (`txnsim scenario --show`).
pub fn step_lines(step: &Step) -> Vec<String> {
    let mut lines = vec![format!("[{}] {}  =>  {}", step.index, step.op, step.outcome)];
    lines.extend(step.partitions.iter().flat_map(partition_lines));
    lines
}

/// The whole run as the HTML page draws it: the scenario's header, its steps and its verdict.
pub fn story(sc: &Scenario, steps: Vec<Step>, verdict: String) -> Story {
    Story { title: header(sc).remove(0), file: sc.file.clone(), source: sc.source.clone(), steps, verdict }
}

fn producer_label(cluster: &Cluster, pid: i64) -> String {
    match cluster.coordinator().transactional_id_of(pid) {
        Some(tid) => tid.to_string(),
        None => format!("pid {pid}"),
    }
}

/// A partition's log as offset cells: each data record with its transaction and that transaction's fate
/// (the producer's next marker on this partition, `ProducerStateManager`'s view), each marker, and the
/// readers' deliveries from the log start.
fn partition(cluster: &mut Cluster, tp: &TopicPartition) -> PartitionView {
    let mutations = cluster.config.mutations.clone();
    let log = cluster.leader_log(tp).expect("scenario partition").clone();
    let start = log.log_start_offset();
    let batches: Vec<_> = log.segments().iter().flat_map(|s| s.batches.iter()).collect();
    let mut cells = Vec::new();
    // Transactions a producer has ended on this partition so far: its next transaction's ordinal.
    let mut ended: BTreeMap<i64, usize> = BTreeMap::new();
    for (k, b) in batches.iter().enumerate() {
        let pid = b.producer_id();
        let who = pid.map(|pid| producer_label(cluster, pid));
        match &b.body {
            BatchBody::Data(records) => {
                let (txn, status) = match pid.filter(|_| b.is_transactional) {
                    Some(pid) => {
                        let fate = batches[k + 1..].iter().find_map(|later| match later.marker() {
                            Some(m) if later.producer_id() == Some(pid) => Some(m.result),
                            _ => None,
                        });
                        let status = match fate {
                            Some(TransactionResult::Commit) => TxnStatus::Committed,
                            Some(TransactionResult::Abort) => TxnStatus::Aborted,
                            None => TxnStatus::Open,
                        };
                        let ordinal = ended.get(&pid).copied().unwrap_or(0) + 1;
                        (Some(format!("{} #{ordinal}", who.clone().unwrap_or_default())), status)
                    }
                    None => (None, TxnStatus::NonTransactional),
                };
                for r in records.iter().filter(|r| r.offset >= start) {
                    cells.push(Cell {
                        offset: r.offset,
                        kind: CellKind::Data,
                        value: Some(r.value.clone()),
                        producer: who.clone(),
                        txn: txn.clone(),
                        status: Some(status),
                    });
                }
            }
            BatchBody::Control(marker) => {
                if let (Some(pid), Some(_)) = (pid, marker) {
                    *ended.entry(pid).or_insert(0) += 1;
                }
                if b.base_offset >= start {
                    let kind = match marker.map(|m| m.result) {
                        Some(TransactionResult::Commit) => CellKind::Commit,
                        Some(TransactionResult::Abort) => CellKind::Abort,
                        None => CellKind::EmptyControl,
                    };
                    let who = Some(producer_label(cluster, pid.expect("markers carry a producer id")));
                    cells.push(Cell {
                        offset: b.base_offset,
                        kind,
                        value: None,
                        producer: who,
                        txn: None,
                        status: None,
                    });
                }
            }
        }
    }
    let aborted_index = log
        .aborted_index()
        .map(|a| AbortedEntry {
            producer: producer_label(cluster, a.producer_id),
            first_offset: a.first_offset,
            last_offset: a.last_offset,
            last_stable_offset: a.last_stable_offset,
        })
        .collect();
    let mut read = |isolation| match cluster.read(isolation, tp, start) {
        Ok((records, position)) => Reading {
            from: start,
            offsets: records.iter().map(|r| r.offset).collect(),
            values: records.into_iter().map(|r| r.value).collect(),
            position: Some(position),
            error: None,
        },
        Err(e) => Reading { from: start, offsets: vec![], values: vec![], position: None, error: Some(e.to_string()) },
    };
    let read_uncommitted = read(IsolationLevel::ReadUncommitted);
    let read_committed = read(IsolationLevel::ReadCommitted);
    PartitionView {
        name: tp.to_string(),
        log_start_offset: start,
        log_end_offset: log.log_end_offset(),
        high_watermark: log.high_watermark(),
        last_stable_offset: log.last_stable_offset(&mutations),
        segment_bases: log.segments().iter().skip(1).map(|s| s.base_offset).collect(),
        cells,
        aborted_index,
        read_uncommitted,
        read_committed,
    }
}

fn partition_lines(p: &PartitionView) -> Vec<String> {
    let mut entries = Vec::new();
    let mut bases = p.segment_bases.iter().peekable();
    for c in &p.cells {
        while let Some(base) = bases.next_if(|b| **b <= c.offset) {
            entries.push(format!("|segment {base}|"));
        }
        entries.push(match c.kind {
            CellKind::Data => format!("{}:{}", c.offset, c.value.as_deref().unwrap_or_default()),
            CellKind::Commit => format!("{}:COMMIT({})", c.offset, c.producer.as_deref().unwrap_or_default()),
            CellKind::Abort => format!("{}:ABORT({})", c.offset, c.producer.as_deref().unwrap_or_default()),
            CellKind::EmptyControl => format!("{}:(empty control)", c.offset),
        });
    }
    entries.extend(bases.map(|base| format!("|segment {base}|")));
    let start = if p.log_start_offset > 0 { format!(" start {}", p.log_start_offset) } else { String::new() };
    let mut lines = vec![format!(
        "      {}{start}  LEO {}  HW {}  LSO {}  log: {}",
        p.name,
        p.log_end_offset,
        p.high_watermark,
        p.last_stable_offset,
        if entries.is_empty() { "(empty)".to_string() } else { entries.join("  ") }
    )];
    let index: Vec<String> = p
        .aborted_index
        .iter()
        .map(|a| {
            format!("({} first {} last {} lso {})", a.producer, a.first_offset, a.last_offset, a.last_stable_offset)
        })
        .collect();
    if !index.is_empty() {
        lines.push(format!("          aborted index: {}", index.join(" ")));
    }
    for (label, r) in [("read_uncommitted", &p.read_uncommitted), ("read_committed  ", &p.read_committed)] {
        lines.push(match (&r.error, r.position) {
            (None, Some(position)) => {
                let shown: Vec<String> = r.offsets.iter().zip(&r.values).map(|(o, v)| format!("{o}:{v}")).collect();
                format!(
                    "          {label} from {}: {} record(s) [{}]  position {position}",
                    r.from,
                    r.offsets.len(),
                    shown.join(" ")
                )
            }
            (e, _) => format!("          {label} from {}: {}", r.from, e.as_deref().unwrap_or_default()),
        });
    }
    lines
}
