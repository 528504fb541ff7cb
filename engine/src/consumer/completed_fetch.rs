//! Kafka's `CompletedFetch` and `FetchCollector.fetchRecords`: the read_committed filter over one fetch
//! response, and a read of a partition to where a reader stops with it.

use crate::log::PartitionLog;
use crate::mutation::{Mutation, Mutations};
use crate::protocol::fetch::FetchPartitionData;
use crate::types::{IsolationLevel, Offset, ProducerId, TransactionResult};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// What one fetch response yields: the delivered records and the next fetch offset.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FetchedRecords {
    pub records: Vec<(Offset, String)>,
    pub next_fetch_offset: Offset,
}

/// Reads a partition from `from` to where a reader stops, with the engine's fetch path (`PartitionLog::read`
/// then the consumer's `filter_fetch`): what a fresh, or a catching-up, reader delivers.
pub fn read_to_end(
    log: &PartitionLog,
    isolation: IsolationLevel,
    from: Offset,
    mutations: &Mutations,
) -> (Vec<(Offset, String)>, Offset) {
    let mut position = from;
    let mut records = Vec::new();
    // Each fetch moves the position by at least one offset or ends the read, so LEO + 1 fetches suffice.
    for _ in 0..=log.log_end_offset() + 1 {
        let Ok(data) = log.read(position, Some(isolation), mutations) else { break };
        if data.batches.is_empty() {
            break;
        }
        let fetched = filter_fetch(isolation, position, &data, mutations);
        records.extend(fetched.records);
        if fetched.next_fetch_offset <= position {
            break;
        }
        position = fetched.next_fetch_offset;
    }
    (records, position)
}

/// `CompletedFetch.nextFetchedRecord` over a whole response. read_committed drops batches of aborted
/// transactions (by the response's aborted list) and every control record; read_uncommitted drops only
/// control records. The position moves past everything consumed, delivered or not (KAFKA-12980).
pub fn filter_fetch(
    isolation: IsolationLevel,
    fetch_offset: Offset,
    data: &FetchPartitionData,
    mutations: &Mutations,
) -> FetchedRecords {
    let filter_aborted = isolation == IsolationLevel::ReadCommitted
        || (mutations.has(Mutation::AbortedListForReadUncommitted) && data.aborted_transactions.is_some());
    // The min-heap of aborted transactions by first offset, as a sorted list consumed from the front.
    let mut aborted: Vec<(Offset, ProducerId)> = if filter_aborted {
        data.aborted_transactions.iter().flatten().map(|a| (a.first_offset, a.producer_id)).collect()
    } else {
        Vec::new()
    };
    aborted.sort();
    let mut aborted = aborted.into_iter().peekable();
    let mut aborted_pids: BTreeSet<ProducerId> = BTreeSet::new();
    let mut next_fetch_offset = fetch_offset;
    let mut records = Vec::new();
    let advance_over_skipped = !mutations.has(Mutation::NoPositionAdvanceOverControl);
    let mut last_batch_skipped = false;
    for batch in &data.batches {
        last_batch_skipped = batch.is_control();
        if filter_aborted {
            if let Some(pid) = batch.producer_id() {
                while let Some(&(first, apid)) = aborted.peek() {
                    if first > batch.last_offset {
                        break;
                    }
                    aborted_pids.insert(apid);
                    aborted.next();
                }
                if batch.marker().is_some_and(|m| m.result == TransactionResult::Abort) {
                    if !mutations.has(Mutation::AbortedPidNotClearedOnMarker) {
                        aborted_pids.remove(&pid);
                    }
                } else if batch.is_transactional && aborted_pids.contains(&pid) {
                    last_batch_skipped = true;
                    if advance_over_skipped {
                        next_fetch_offset = next_fetch_offset.max(batch.next_offset());
                    }
                    continue;
                }
            }
        }
        if batch.is_control() {
            // Control records are never delivered, at any isolation level; the marker sits at the base offset.
            if batch.marker().is_some() && batch.base_offset >= next_fetch_offset && advance_over_skipped {
                next_fetch_offset = batch.base_offset + 1;
            }
            continue;
        }
        for record in batch.records() {
            if record.offset >= next_fetch_offset {
                records.push((record.offset, record.value.clone()));
                next_fetch_offset = record.offset + 1;
            }
        }
    }
    // Format v2 keeps a batch's last offset through compaction: after the last batch the position moves to
    // its next offset so the same batch is not fetched again.
    if let Some(last) = data.batches.last() {
        if advance_over_skipped || !last_batch_skipped {
            next_fetch_offset = next_fetch_offset.max(last.next_offset());
        }
    }
    if mutations.has(Mutation::PositionSkipsToHighWatermark) {
        next_fetch_offset = next_fetch_offset.max(data.high_watermark);
    }
    if mutations.has(Mutation::RedeliverLastRecord) {
        if let Some(&(last, _)) = records.last() {
            next_fetch_offset = last;
        }
    }
    FetchedRecords { records, next_fetch_offset }
}
