//! The consumer filter: random fetch responses (offset gaps between batches, compacted records inside
//! batches, empty control batches, COMMIT/ABORT markers, aborted lists that do and do not match the
//! batches) through `txnsim_engine::filter_fetch`, against a reference filter written here straight from
//! Kafka's `CompletedFetch.nextFetchedRecord`.

use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use txnsim_engine::record::{BatchBody, BatchProducer, CompressionType, EndTxnMarker, Record, RecordBatch};
use txnsim_engine::{
    AbortedTransaction, FetchPartitionData, FetchedRecords, IsolationLevel, Offset, ProducerId, TransactionResult,
};

/// One batch of a generated response, before offsets are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchSpec {
    /// `keep`: bit k set keeps record k (compaction removes the others; all may go).
    Data { gap: u8, pid: Option<u8>, txn: bool, n: u8, keep: u8 },
    /// `marker: None` is an empty control batch (its record compacted away, KAFKA-10702).
    Control { gap: u8, pid: u8, marker: Option<bool> },
}

#[derive(Clone)]
pub struct FetchCase {
    pub isolation: IsolationLevel,
    pub fetch_offset: Offset,
    pub data: FetchPartitionData,
}

impl fmt::Debug for FetchCase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} fetch from {} (HW {}, LSO {}), aborted list {}",
            self.isolation.name(),
            self.fetch_offset,
            self.data.high_watermark,
            self.data.last_stable_offset,
            match &self.data.aborted_transactions {
                None => "null".to_string(),
                Some(l) => format!(
                    "[{}]",
                    l.iter()
                        .map(|a| format!("pid {} from {}", a.producer_id, a.first_offset))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        )?;
        for b in &self.data.batches {
            writeln!(f, "  {}", render_batch(b))?;
        }
        Ok(())
    }
}

pub fn render_batch(b: &RecordBatch) -> String {
    let who = match b.producer {
        Some(p) => format!("pid {} epoch {}", p.producer_id, p.epoch),
        None => "no pid".to_string(),
    };
    match &b.body {
        BatchBody::Control(Some(m)) => {
            format!("{}..{} control {} ({who})", b.base_offset, b.last_offset, m.result.name())
        }
        BatchBody::Control(None) => format!("{}..{} empty control batch ({who})", b.base_offset, b.last_offset),
        BatchBody::Data(records) => format!(
            "{}..{} {} data ({who}) records [{}]",
            b.base_offset,
            b.last_offset,
            if b.is_transactional { "transactional" } else { "plain" },
            records.iter().map(|r| format!("{}:{}", r.offset, r.value)).collect::<Vec<_>>().join(" ")
        ),
    }
}

fn batch_spec() -> impl Strategy<Value = BatchSpec> {
    prop_oneof![
        5 => (0..3u8, prop_oneof![4 => (1..=3u8).prop_map(Some), 1 => Just(None)], any::<bool>(), 1..=4u8, prop_oneof![3 => Just(0xffu8), 1 => any::<u8>()])
            .prop_map(|(gap, pid, txn, n, keep)| BatchSpec::Data { gap, pid, txn: txn && pid.is_some(), n, keep }),
        2 => (0..3u8, 1..=3u8, prop_oneof![3 => Just(Some(true)), 3 => Just(Some(false)), 1 => Just(None)])
            .prop_map(|(gap, pid, marker)| BatchSpec::Control { gap, pid, marker }),
    ]
}

/// Lays the batches out from `start`, then picks a fetch offset inside the first batch and an aborted
/// list: mostly the real first offsets of transactional runs, sometimes arbitrary (pid, offset) pairs.
pub fn fetch_case_strategy() -> BoxedStrategy<FetchCase> {
    (
        prop_oneof![Just(IsolationLevel::ReadCommitted), Just(IsolationLevel::ReadUncommitted)],
        0..4u64,
        proptest::collection::vec(batch_spec(), 0..8),
        any::<u8>(),
        proptest::collection::vec((1..=3u8, any::<u8>(), any::<bool>()), 0..4),
        0..3u64,
        any::<bool>(),
    )
        .prop_map(|(isolation, start, specs, pick, aborted, beyond, ru_list)| {
            let batches = lay_out(start, &specs);
            let end = batches.last().map(|b| b.next_offset()).unwrap_or(start);
            let fetch_offset = match batches.first() {
                Some(b) => b.base_offset + pick as Offset % (b.last_offset - b.base_offset + 1),
                None => start,
            };
            // Candidate first offsets: where each producer's transactional batches begin.
            let firsts: Vec<(ProducerId, Offset)> = batches
                .iter()
                .filter(|b| b.is_transactional && !b.is_control())
                .filter_map(|b| b.producer_id().map(|p| (p, b.base_offset)))
                .collect();
            let list: Vec<AbortedTransaction> = aborted
                .iter()
                .map(|&(pid, at, real)| {
                    if real && !firsts.is_empty() {
                        let (producer_id, first_offset) = firsts[at as usize % firsts.len()];
                        AbortedTransaction { producer_id, first_offset }
                    } else {
                        AbortedTransaction {
                            producer_id: pid as ProducerId,
                            first_offset: start + at as Offset % (end - start + 2),
                        }
                    }
                })
                .collect();
            // Kafka sends the list only at read_committed; read_uncommitted sometimes gets one anyway, to
            // show the consumer ignores it there.
            let aborted_transactions = match isolation {
                IsolationLevel::ReadCommitted => Some(list),
                IsolationLevel::ReadUncommitted => ru_list.then_some(list),
            };
            let data = FetchPartitionData {
                high_watermark: end + beyond,
                last_stable_offset: end,
                log_start_offset: 0,
                batches,
                aborted_transactions,
            };
            FetchCase { isolation, fetch_offset, data }
        })
        .boxed()
}

fn lay_out(start: Offset, specs: &[BatchSpec]) -> Vec<RecordBatch> {
    let mut next = start;
    let mut out = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        match *spec {
            BatchSpec::Data { gap, pid, txn, n, keep } => {
                let base = next + gap as Offset;
                let last = base + n as Offset - 1;
                let records = (0..n)
                    .filter(|k| keep & (1 << k) != 0)
                    .map(|k| Record { offset: base + k as Offset, value: format!("{i}{}", (b'a' + k) as char) })
                    .collect();
                out.push(RecordBatch {
                    base_offset: base,
                    last_offset: last,
                    producer: pid.map(|p| BatchProducer { producer_id: p as ProducerId, epoch: 0, base_sequence: 0 }),
                    is_transactional: txn,
                    body: BatchBody::Data(records),
                    partition_leader_epoch: 0,
                    compression: CompressionType::None,
                });
                next = last + 1;
            }
            BatchSpec::Control { gap, pid, marker } => {
                let base = next + gap as Offset;
                let marker = marker.map(|commit| EndTxnMarker {
                    result: if commit { TransactionResult::Commit } else { TransactionResult::Abort },
                    coordinator_epoch: 0,
                });
                out.push(RecordBatch {
                    base_offset: base,
                    last_offset: base,
                    producer: Some(BatchProducer { producer_id: pid as ProducerId, epoch: 0, base_sequence: -1 }),
                    is_transactional: true,
                    body: BatchBody::Control(marker),
                    partition_leader_epoch: 0,
                    compression: CompressionType::None,
                });
                next = base + 1;
            }
        }
    }
    out
}

/// `CompletedFetch.nextFetchedRecord`, paraphrased line by line:
/// ```text
/// aborted := min-heap of (pid, firstOffset) by firstOffset; abortedPids := {}
/// for batch in fetched batches:
///   if batch.hasProducerId:                                   (read_committed only)
///      while aborted.peek.firstOffset <= batch.lastOffset: abortedPids += aborted.pop.pid
///      if batch is control && first record type == ABORT: abortedPids -= batch.pid
///      elif batch.isTransactional && batch.pid in abortedPids: nextFetchOffset = batch.lastOffset+1; skip batch
///   for record in batch with offset >= nextFetchOffset:
///      if batch.isControl: nextFetchOffset = record.offset+1   (never delivered, any isolation level)
///      else deliver record; nextFetchOffset = record.offset+1
/// after last batch: nextFetchOffset = lastBatch.nextOffset()
/// ```
pub fn reference_filter(isolation: IsolationLevel, fetch_offset: Offset, data: &FetchPartitionData) -> FetchedRecords {
    let read_committed = isolation == IsolationLevel::ReadCommitted;
    // The min-heap as an ordered multiset keyed by (first offset, pid).
    let mut heap: BTreeMap<(Offset, ProducerId), usize> = BTreeMap::new();
    if read_committed {
        for a in data.aborted_transactions.iter().flatten() {
            *heap.entry((a.first_offset, a.producer_id)).or_insert(0) += 1;
        }
    }
    let mut aborted_pids: BTreeSet<ProducerId> = BTreeSet::new();
    let mut next_fetch_offset = fetch_offset;
    let mut records = Vec::new();
    for batch in &data.batches {
        if read_committed {
            if let Some(pid) = batch.producer.map(|p| p.producer_id) {
                while let Some((&(first, apid), _)) = heap.iter().next() {
                    if first > batch.last_offset {
                        break;
                    }
                    aborted_pids.insert(apid);
                    let count = heap.get_mut(&(first, apid)).expect("peeked");
                    *count -= 1;
                    if *count == 0 {
                        heap.remove(&(first, apid));
                    }
                }
                let first_record_is_abort = matches!(
                    batch.body,
                    BatchBody::Control(Some(EndTxnMarker { result: TransactionResult::Abort, .. }))
                );
                if batch.is_control() && first_record_is_abort {
                    aborted_pids.remove(&pid);
                } else if batch.is_transactional && aborted_pids.contains(&pid) {
                    next_fetch_offset = batch.last_offset + 1;
                    continue;
                }
            }
        }
        match &batch.body {
            BatchBody::Control(Some(_)) => {
                // The control record sits at the batch's base offset.
                if batch.base_offset >= next_fetch_offset {
                    next_fetch_offset = batch.base_offset + 1;
                }
            }
            BatchBody::Control(None) => {}
            BatchBody::Data(rs) => {
                for r in rs {
                    if r.offset >= next_fetch_offset {
                        records.push((r.offset, r.value.clone()));
                        next_fetch_offset = r.offset + 1;
                    }
                }
            }
        }
    }
    if let Some(last) = data.batches.last() {
        next_fetch_offset = last.next_offset();
    }
    FetchedRecords { records, next_fetch_offset }
}
