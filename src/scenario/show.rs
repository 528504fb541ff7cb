//! `txnsim scenario --show`: a step table a person can read. After each op, every partition's log
//! (offset: value or marker), LEO, HW, LSO, the aborted index, and what fresh readers of both isolation
//! levels deliver from the log start, so "0 vs 3" and the offset gap are visible at a glance.

use super::format::Op;
use super::Scenario;
use std::collections::BTreeMap;
use txnsim_engine::record::BatchBody;
use txnsim_engine::{Cluster, IsolationLevel, TopicPartition};

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

pub fn op_line(i: usize, op: &Op, outcome: &str) -> String {
    format!("[{i}] {}  =>  {outcome}", describe(op))
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

/// The state of every partition, as a few indented lines each.
pub fn partitions(cluster: &mut Cluster, topics: &BTreeMap<String, u32>) -> Vec<String> {
    let mut lines = Vec::new();
    for (topic, count) in topics {
        for p in 0..*count {
            let tp = TopicPartition::new(topic, p);
            lines.extend(partition(cluster, &tp));
        }
    }
    lines
}

fn producer_label(cluster: &Cluster, pid: i64) -> String {
    match cluster.broker.coordinator.transactional_id_of(pid) {
        Some(tid) => tid.to_string(),
        None => format!("pid {pid}"),
    }
}

fn partition(cluster: &mut Cluster, tp: &TopicPartition) -> Vec<String> {
    let mutations = cluster.config.mutations.clone();
    let log = cluster.broker.partition(tp).expect("scenario partition").clone();
    let mut entries = Vec::new();
    let mut segment_bases = Vec::new();
    for (s, segment) in log.segments().iter().enumerate() {
        if s > 0 {
            segment_bases.push(segment.base_offset);
            entries.push(format!("|segment {}|", segment.base_offset));
        }
        for b in &segment.batches {
            match &b.body {
                BatchBody::Data(records) => {
                    for r in records.iter().filter(|r| r.offset >= log.log_start_offset()) {
                        entries.push(format!("{}:{}", r.offset, r.value));
                    }
                }
                BatchBody::Control(marker) if b.base_offset >= log.log_start_offset() => {
                    let who = producer_label(cluster, b.producer_id().expect("markers carry a producer id"));
                    match marker {
                        Some(m) => entries.push(format!("{}:{}({who})", b.base_offset, m.result.name())),
                        None => entries.push(format!("{}:(empty control)", b.base_offset)),
                    }
                }
                BatchBody::Control(_) => {}
            }
        }
    }
    let lso = log.last_stable_offset(&mutations);
    let start = if log.log_start_offset() > 0 { format!(" start {}", log.log_start_offset()) } else { String::new() };
    let mut lines = vec![format!(
        "      {tp}{start}  LEO {}  HW {}  LSO {}  log: {}",
        log.log_end_offset(),
        log.high_watermark(),
        lso,
        if entries.is_empty() { "(empty)".to_string() } else { entries.join("  ") }
    )];
    let index: Vec<String> = log
        .aborted_index()
        .map(|a| {
            format!(
                "({} first {} last {} lso {})",
                producer_label(cluster, a.producer_id),
                a.first_offset,
                a.last_offset,
                a.last_stable_offset
            )
        })
        .collect();
    if !index.is_empty() {
        lines.push(format!("          aborted index: {}", index.join(" ")));
    }
    let from = log.log_start_offset();
    for (label, isolation) in
        [("read_uncommitted", IsolationLevel::ReadUncommitted), ("read_committed  ", IsolationLevel::ReadCommitted)]
    {
        let line = match cluster.read(isolation, tp, from) {
            Ok((records, position)) => {
                let shown: Vec<String> = records.iter().map(|r| format!("{}:{}", r.offset, r.value)).collect();
                format!(
                    "          {label} from {from}: {} record(s) [{}]  position {position}",
                    records.len(),
                    shown.join(" ")
                )
            }
            Err(e) => format!("          {label} from {from}: {e}"),
        };
        lines.push(line);
    }
    lines
}
