//! Liveness, checked once at the end of a run after healing (TigerBeetle style): faults off, producers
//! stopped, time advanced past the transaction timeout, consumers polled to the end.

use crate::catalogue::{Invariant, Violation};
use crate::state::ClusterView;
use std::collections::BTreeMap;
use txnsim_engine::coordinator::{TransactionState, TxnDecision};
use txnsim_engine::{Offset, TopicPartition};

/// `readers`: each read_committed consumer that kept polling, with the partition and its final position.
pub fn check_liveness(view: &ClusterView, readers: &[(String, TopicPartition, Offset)]) -> Vec<Violation> {
    let mut out = Vec::new();
    if let Some(c) = view.coordinator {
        // A decision followed by a later one of the same transactional id was superseded: its Prepare*
        // record's append failed and the coordinator decided again, and a loader keeps only the newest
        // record per id (`TransactionStateManager.loadTransactionMetadata`), as the engine's load does.
        let newest: BTreeMap<&str, usize> =
            c.decisions.iter().enumerate().map(|(i, d)| (d.transactional_id.as_str(), i)).collect();
        let live = |i: usize, d: &TxnDecision| !d.completed && newest[d.transactional_id.as_str()] == i;
        for (i, d) in c.decisions.iter().enumerate().filter(|(i, d)| live(*i, d)) {
            out.push(Violation::new(
                Invariant::DecidedTransactionsComplete,
                format!(
                    "decision #{i}: '{}' {} over {:?} never completed",
                    d.transactional_id,
                    d.result.name(),
                    d.partitions.iter().map(|p| p.to_string()).collect::<Vec<_>>()
                ),
            ));
        }
        for (tid, meta) in &c.txns {
            if meta.state == TransactionState::Ongoing {
                out.push(Violation::new(
                    Invariant::OpenTransactionsTimeOut,
                    format!(
                        "'{tid}' is still Ongoing since {} ms (timeout {} ms)",
                        meta.txn_start_timestamp_ms, meta.txn_timeout_ms
                    ),
                ));
            }
        }
    }
    for (tp, log) in view.partitions.logs() {
        let (lso, hw) = (log.last_stable_offset(view.mutations), log.high_watermark());
        if lso != hw {
            let holder = log
                .producer_state
                .ongoing_txns
                .values()
                .next()
                .map(|t| format!(": producer {}'s transaction open from {}", t.producer_id, t.first_offset))
                .unwrap_or_default();
            out.push(Violation::new(
                Invariant::LsoReachesHighWatermark,
                format!("{tp}: LSO {lso} below HW {hw}{holder}"),
            ));
        }
    }
    for (consumer, tp, position) in readers {
        let Some(log) = view.partitions.log(tp) else { continue };
        let (lso, hw) = (log.last_stable_offset(view.mutations), log.high_watermark());
        if *position != lso || lso != hw {
            out.push(Violation::new(
                Invariant::ReaderCatchesUp,
                format!("{consumer} on {tp}: position {position}, LSO {lso}, HW {hw}"),
            ));
        }
    }
    out
}
