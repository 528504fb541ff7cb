//! `txnsim scenario --show`: a step table a person can read. After each op, every partition's log
//! (offset: value or marker), LEO, HW, LSO, the aborted index, and what fresh readers of both isolation
//! levels deliver from the log start, so "0 vs 3" and the offset gap are visible at a glance. The steps
//! are data (`crate::html::Step`); the text table and the HTML page (`--html`) are both drawn from them.

use super::format::Op;
use super::network::{self, NetOp, NetworkRunner};
use super::Scenario;
use crate::html::{AbortedEntry, Cell, CellKind, PartitionView, Reading, ReplicaView, Step, Story, TxnStatus};
use std::collections::BTreeMap;
use txnsim_engine::coordinator::TransactionCoordinator;
use txnsim_engine::log::PartitionLog;
use txnsim_engine::record::{BatchBody, CompressionType};
use txnsim_engine::{Broker, Cluster, EngineConfig, IsolationLevel, TopicPartition, TransactionResult};
use txnsim_sim::trace::ReplicaSnapshot;

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

/// A producer's `compression.type` where a scenario sets one other than none.
fn codec_note(compression: &Option<CompressionType>) -> String {
    match compression {
        Some(c) if !c.is_none() => format!(" (compression.type {})", c.name()),
        _ => String::new(),
    }
}

fn describe(op: &Op) -> String {
    let tp = |topic: &Option<String>, p: &u32| format!("{}/{p}", topic.as_deref().unwrap_or("t"));
    match op {
        Op::InitProducer { producer, transactional_id, compression, .. } => match transactional_id {
            Some(t) => format!("init_producer {producer} (transactional.id {t}){}", codec_note(compression)),
            None => format!("init_producer {producer}{}", codec_note(compression)),
        },
        Op::Begin { producer, .. } => format!("begin {producer}"),
        Op::Commit { producer, .. } => format!("commit {producer}"),
        Op::Abort { producer, .. } => format!("abort {producer}"),
        Op::Produce { producer, topic, partition, values, .. } => {
            format!("produce {producer} -> {} {values:?}", tp(topic, partition))
        }
        Op::ProduceNontxn { producer, topic, partition, values, compression, .. } => format!(
            "produce_nontxn {} -> {} {values:?}{}",
            producer.as_deref().unwrap_or("(plain)"),
            tp(topic, partition),
            codec_note(compression)
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
            "deliver_fetch {} at {fetch_offset}: {} batch(es), {} aborted",
            IsolationLevel::from(*isolation).name(),
            batches.len(),
            aborted_transactions.len()
        ),
        Op::Read { isolation, topic, partition, from_offset, .. } => {
            format!("read {} {} from {from_offset}", IsolationLevel::from(*isolation).name(), tp(topic, partition))
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
    Step { index: i, op: describe(op), outcome: outcome.to_string(), differs, partitions, in_flight: Vec::new() }
}

/// A step of a run that is no scenario (a replay's event, a counterexample's step): the broker as it
/// stood then, every partition drawn as a scenario's are, read by fresh consumers through a cluster
/// of its own (so reading leaves the snapshot as it was).
/// `replicas` are a replay's replicas of each replicated partition, drawn under its leader's log.
pub fn broker_step(
    index: usize,
    (op, outcome): (String, String),
    differs: bool,
    broker: &Broker,
    replicas: &BTreeMap<TopicPartition, Vec<ReplicaSnapshot>>,
) -> Step {
    // A replay's coordinator broker follows the partitions others lead, and its fetch path refuses them:
    // the readers read each partition as a consumer reads it from its leader.
    let logs = broker.replica_manager.logs.clone();
    let mut cluster = reading_cluster(broker.config.clone(), broker.coordinator.clone(), logs);
    let partitions = broker
        .replica_manager
        .logs
        .keys()
        .map(|tp| {
            let mut view = partition(&mut cluster, tp);
            view.replicas = replicas.get(tp).into_iter().flatten().map(|r| replica_view(&cluster, r)).collect();
            view
        })
        .collect();
    Step { index, op, outcome, differs, partitions, in_flight: Vec::new() }
}

fn replica_view(cluster: &Cluster, r: &ReplicaSnapshot) -> ReplicaView {
    ReplicaView {
        broker: r.broker,
        leader: r.leader,
        in_isr: r.in_isr,
        down: r.down,
        log_end_offset: r.log.log_end_offset(),
        high_watermark: r.log.high_watermark(),
        cells: cells(cluster, &r.log),
    }
}

/// A network scenario's step: every partition as its leader holds it (and each replica on a replicated
/// cluster), read by fresh consumers from a copy of each leader's log, so that reading neither delivers
/// the messages in flight nor fires a timer; and the messages in flight, then those held.
pub fn network_step(index: usize, op: &NetOp, outcome: &str, differs: bool, runner: &NetworkRunner) -> Step {
    let cluster = runner.cluster();
    let tps: Vec<TopicPartition> = runner
        .topics()
        .iter()
        .flat_map(|(topic, count)| (0..*count).map(move |p| TopicPartition::new(topic, p)))
        .collect();
    let led = tps.iter().filter(|tp| cluster.leader_of(tp).is_some_and(|id| !cluster.down.contains(&id)));
    let logs = led.map(|tp| (tp.clone(), cluster.leader_log(tp).expect("a scenario partition").clone())).collect();
    let mut reader = reading_cluster(cluster.config.clone(), cluster.coordinator().clone(), logs);
    let partitions = tps
        .iter()
        .map(|tp| {
            let start = cluster.leader_log(tp).expect("a scenario partition").log_start_offset();
            let readings = if reader.broker.replica_manager.logs.contains_key(tp) {
                [IsolationLevel::ReadUncommitted, IsolationLevel::ReadCommitted]
                    .map(|i| reading(&mut reader, i, tp, start))
            } else {
                let none = || Reading {
                    from: start,
                    offsets: vec![],
                    values: vec![],
                    position: None,
                    error: Some("no leader".into()),
                };
                [none(), none()]
            };
            view(cluster, tp, readings)
        })
        .collect();
    let in_flight = cluster.in_flight().map(|e| e.short().to_string());
    let held = runner.held().iter().map(|e| format!("held: {}", e.short()));
    Step {
        index,
        op: network::describe_op(op),
        outcome: outcome.to_string(),
        differs,
        partitions,
        in_flight: in_flight.chain(held).collect(),
    }
}

/// One broker that leads every partition of `logs`, with `coordinator` for the producers' names.
fn reading_cluster(
    config: EngineConfig,
    coordinator: TransactionCoordinator,
    logs: BTreeMap<TopicPartition, PartitionLog>,
) -> Cluster {
    let mut topics: BTreeMap<String, u32> = BTreeMap::new();
    for tp in logs.keys() {
        let count = topics.entry(tp.topic.clone()).or_insert(0);
        *count = (*count).max(tp.partition + 1);
    }
    let mut cluster = Cluster::new(&topics, config);
    cluster.broker.replica_manager.logs = logs;
    cluster.broker.coordinator = coordinator;
    cluster
}

/// The step's lines of the text table (`txnsim scenario --show`).
pub fn step_lines(step: &Step) -> Vec<String> {
    let mut lines = vec![format!("[{}] {}  =>  {}", step.index, step.op, step.outcome)];
    if !step.in_flight.is_empty() {
        lines.push(format!("      in flight: {}", step.in_flight.join("; ")));
    }
    lines.extend(step.partitions.iter().flat_map(partition_lines));
    lines
}

/// The whole run as the HTML page draws it: the scenario's header, its steps and its verdict.
pub fn story(sc: &Scenario, steps: Vec<Step>, verdict: String, passed: bool) -> Story {
    Story { title: header(sc).remove(0), file: sc.file.clone(), source: sc.source.clone(), steps, verdict, passed }
}

fn producer_label(cluster: &Cluster, pid: i64) -> String {
    match cluster.coordinator().transactional_id_of(pid) {
        Some(tid) => tid.to_string(),
        None => format!("pid {pid}"),
    }
}

/// A partition as its leader holds it, read by fresh consumers of both levels from its log start.
fn partition(cluster: &mut Cluster, tp: &TopicPartition) -> PartitionView {
    let start = cluster.leader_log(tp).expect("scenario partition").log_start_offset();
    let readings =
        [IsolationLevel::ReadUncommitted, IsolationLevel::ReadCommitted].map(|i| reading(cluster, i, tp, start));
    view(cluster, tp, readings)
}

/// What a fresh consumer of `isolation` delivers reading `tp` from `from` to its end.
fn reading(cluster: &mut Cluster, isolation: IsolationLevel, tp: &TopicPartition, from: u64) -> Reading {
    match cluster.read(isolation, tp, from) {
        Ok((records, position)) => Reading {
            from,
            offsets: records.iter().map(|r| r.offset).collect(),
            values: records.into_iter().map(|r| r.value).collect(),
            position: Some(position),
            error: None,
        },
        Err(e) => Reading { from, offsets: vec![], values: vec![], position: None, error: Some(e.to_string()) },
    }
}

/// The leader's log of `tp` (numbers, cells, aborted index) with the readers' deliveries, and each
/// replica on a replicated cluster.
fn view(cluster: &Cluster, tp: &TopicPartition, [read_uncommitted, read_committed]: [Reading; 2]) -> PartitionView {
    let log = cluster.leader_log(tp).expect("scenario partition");
    let aborted_index = log
        .aborted_index()
        .map(|a| AbortedEntry {
            producer: producer_label(cluster, a.producer_id),
            first_offset: a.first_offset,
            last_offset: a.last_offset,
            last_stable_offset: a.last_stable_offset,
        })
        .collect();
    PartitionView {
        name: tp.to_string(),
        log_start_offset: log.log_start_offset(),
        log_end_offset: log.log_end_offset(),
        high_watermark: log.high_watermark(),
        last_stable_offset: log.last_stable_offset(&cluster.config.mutations),
        segment_bases: log.segments().iter().skip(1).map(|s| s.base_offset).collect(),
        cells: cells(cluster, log),
        aborted_index,
        read_uncommitted,
        read_committed,
        replicas: replicas(cluster, tp),
    }
}

/// Every replica of `tp` when it has more than one: who leads, who is in the ISR, who is down, and each
/// one's own log and HW (a follower learns the HW on its next fetch; truncation shows as cells lost).
fn replicas(cluster: &Cluster, tp: &TopicPartition) -> Vec<ReplicaView> {
    let Some(registration) = cluster.controller.partitions.get(tp).filter(|r| r.replicas.len() > 1) else {
        return Vec::new();
    };
    let state = &registration.state;
    let brokers: Vec<&Broker> = cluster.brokers().collect();
    registration
        .replicas
        .iter()
        .filter_map(|&id| {
            let log = brokers.get(id as usize)?.partition(tp)?;
            Some(ReplicaView {
                broker: id,
                leader: state.leader == id,
                in_isr: state.isr.contains(&id),
                down: cluster.down.contains(&id),
                log_end_offset: log.log_end_offset(),
                high_watermark: log.high_watermark(),
                cells: cells(cluster, log),
            })
        })
        .collect()
}

/// A log as offset cells from its start: each data record with its transaction and that transaction's
/// fate (the producer's next marker on this partition, `ProducerStateManager`'s view), each marker.
fn cells(cluster: &Cluster, log: &PartitionLog) -> Vec<Cell> {
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
                        compression: (!b.compression.is_none()).then(|| b.compression.name()),
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
                        compression: None,
                    });
                }
            }
        }
    }
    cells
}

/// A log's cells as the text table writes them (`0:a  1:COMMIT(p)  |segment 2|`).
fn log_text(cells: &[Cell], segment_bases: &[u64]) -> String {
    let mut entries = Vec::new();
    let mut bases = segment_bases.iter().peekable();
    for c in cells {
        while let Some(base) = bases.next_if(|b| **b <= c.offset) {
            entries.push(format!("|segment {base}|"));
        }
        entries.push(match c.kind {
            CellKind::Data => {
                let codec = c.compression.map(|name| format!("[{name}]")).unwrap_or_default();
                format!("{}:{}{codec}", c.offset, c.value.as_deref().unwrap_or_default())
            }
            CellKind::Commit => format!("{}:COMMIT({})", c.offset, c.producer.as_deref().unwrap_or_default()),
            CellKind::Abort => format!("{}:ABORT({})", c.offset, c.producer.as_deref().unwrap_or_default()),
            CellKind::EmptyControl => format!("{}:(empty control)", c.offset),
        });
    }
    entries.extend(bases.map(|base| format!("|segment {base}|")));
    if entries.is_empty() {
        "(empty)".to_string()
    } else {
        entries.join("  ")
    }
}

fn partition_lines(p: &PartitionView) -> Vec<String> {
    let start = if p.log_start_offset > 0 { format!(" start {}", p.log_start_offset) } else { String::new() };
    let mut lines = vec![format!(
        "      {}{start}  LEO {}  HW {}  LSO {}  log: {}",
        p.name,
        p.log_end_offset,
        p.high_watermark,
        p.last_stable_offset,
        log_text(&p.cells, &p.segment_bases)
    )];
    for r in &p.replicas {
        let role = if r.leader { "leader" } else { "follower" };
        let isr = if r.in_isr { "in the ISR" } else { "out of the ISR" };
        let down = if r.down { ", down" } else { "" };
        lines.push(format!(
            "          broker {} ({role}, {isr}{down})  LEO {}  HW {}  log: {}",
            r.broker,
            r.log_end_offset,
            r.high_watermark,
            log_text(&r.cells, &[])
        ));
    }
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
