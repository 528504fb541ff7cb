//! Transactional offsets held against the group's `__consumer_offsets` log (KIP-98, KIP-447): an offset a
//! transaction committed (TxnOffsetCommit) is what OffsetFetch answers exactly when that transaction's
//! COMMIT marker is in the log after the offset's batch; before its marker it stays pending, and an
//! ABORT marker drops it.

use crate::catalogue::{Invariant, Violation};
use txnsim_engine::log::PartitionLog;
use txnsim_engine::topic::offsets_partition_for;
use txnsim_engine::{Broker, Offset, ProducerId, TransactionResult};

/// The marker that closed the transaction of `producer_id` whose offsets batch is at `at`: the producer's
/// first marker after it (`None` while the transaction is open).
fn closing_marker(log: Option<&PartitionLog>, producer_id: ProducerId, at: Offset) -> Option<TransactionResult> {
    log?.batches()
        .filter(|b| b.base_offset > at && b.producer_id() == Some(producer_id))
        .find_map(|b| b.marker())
        .map(|m| m.result)
}

/// Every group's committed and pending transactional offsets on `broker`.
pub fn check_group_offsets(broker: &Broker) -> Vec<Violation> {
    let mut out = Vec::new();
    let groups = &broker.groups;
    for (group_id, group) in &groups.groups {
        let log = broker.partition(&offsets_partition_for(group_id));
        for (tp, record) in &group.records {
            let Some((pid, at)) = record.txn else { continue };
            let why = match closing_marker(log, pid, at) {
                Some(TransactionResult::Commit) => continue,
                Some(TransactionResult::Abort) => "its transaction aborted",
                None => "its transaction is still open",
            };
            let offset = group.offsets.get(tp).map_or(-1, |(o, _)| *o);
            out.push(Violation::new(
                Invariant::TxnOffsetsVisibleIffCommitted,
                format!(
                    "group '{group_id}': OffsetFetch answers {tp}@{offset}, committed by producer {pid} (its batch at \
                     {at} in __consumer_offsets), but {why}"
                ),
            ));
        }
    }
    for (pid, pending) in &groups.pending_txn_offsets {
        for ((group_id, tp), p) in pending {
            let Some((_, at)) = p.record.txn else { continue };
            let log = broker.partition(&offsets_partition_for(group_id));
            if let Some(result) = closing_marker(log, *pid, at) {
                out.push(Violation::new(
                    Invariant::TxnOffsetsVisibleIffCommitted,
                    format!(
                        "group '{group_id}': producer {pid}'s offset {tp}@{} is still pending after its transaction's \
                         {} marker",
                        p.offset.0,
                        result.name()
                    ),
                ));
            }
        }
    }
    out
}
