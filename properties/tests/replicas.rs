//! The LSO of a replica whose HW moved back: Kafka lets a follower's HW fall (`UnifiedLog.
//! updateHighWatermarkMetadata` warns "Non-monotonic update of high watermark" and goes on) and never
//! restores the unreplicated transactions an earlier, higher HW removed; only a rebuild of producer state
//! (a truncation) starts again from the HW of that moment. Derived from `UnifiedLog.scala` and
//! `ProducerStateManager.removeUnreplicatedTransactions`; no Kafka test shows it. The sim found it
//! (standard seeds 1292 and 4981, late-sends 488 and 3042, long-txns 5866): a leader killed with its HW
//! past an ABORT marker came back as the follower of a leader whose HW was still below it.

use txnsim_engine::record::{BatchBody, BatchProducer, CompressionType, EndTxnMarker, Record, RecordBatch};
use txnsim_engine::{Mutations, Offset, PartitionLog, TransactionResult};
use txnsim_properties::LogFacts;

const PID: i64 = 7;

fn batch(base_offset: Offset, body: BatchBody) -> RecordBatch {
    let last_offset = match &body {
        BatchBody::Data(records) => base_offset + records.len() as Offset - 1,
        BatchBody::Control(_) => base_offset,
    };
    RecordBatch {
        base_offset,
        last_offset,
        producer: Some(BatchProducer { producer_id: PID, epoch: 0, base_sequence: 0 }),
        is_transactional: true,
        body,
        partition_leader_epoch: 0,
        compression: CompressionType::None,
    }
}

/// A follower's log: a transaction of three records at 0..2, then (if `marker`) its ABORT marker at 3.
fn txn_log(marker: bool) -> PartitionLog {
    let mut log = PartitionLog::new();
    let records = (0..3).map(|offset| Record { offset, value: format!("v{offset}") }).collect();
    log.append_as_follower(&batch(0, BatchBody::Data(records)), 0, &Mutations::none());
    if marker {
        let m = EndTxnMarker { result: TransactionResult::Abort, coordinator_epoch: 0 };
        log.append_as_follower(&batch(3, BatchBody::Control(Some(m))), 0, &Mutations::none());
    }
    log
}

/// The LSO the invariant expects of `log`, from its batches, HW and HW peak.
fn expected(log: &PartitionLog) -> Offset {
    LogFacts::of(log).expected_lso(log.log_start_offset(), log.high_watermark(), log.high_watermark_peak())
}

#[test]
fn a_follower_whose_hw_moves_back_below_a_marker_keeps_the_lso_at_its_hw() {
    let none = Mutations::none();
    let mut log = txn_log(true);
    log.update_high_watermark(3, &none);
    assert_eq!(log.last_stable_offset(&none), 0, "with the marker at the HW the transaction is unstable");
    assert_eq!(expected(&log), 0);

    log.update_high_watermark(4, &none);
    assert_eq!(log.last_stable_offset(&none), 4, "past the marker the transaction leaves the unreplicated set");
    log.update_high_watermark(3, &none);
    assert_eq!(
        (log.last_stable_offset(&none), log.high_watermark_peak()),
        (3, 4),
        "Kafka does not restore a transaction removeUnreplicatedTransactions dropped: the LSO is the HW"
    );
    assert_eq!(expected(&log), 3, "the invariant follows the peak, not the HW alone");
    let mut fresh = txn_log(true);
    fresh.update_high_watermark(3, &none);
    assert_eq!(expected(&fresh), 0, "the same log and HW on a replica whose HW never passed 3 give 0");
}

#[test]
fn a_truncation_rebuilds_producer_state_from_the_hw_of_that_moment() {
    let none = Mutations::none();
    let mut log = txn_log(true);
    log.update_high_watermark(4, &none);
    log.update_high_watermark(2, &none);
    assert!(log.truncate_to(3, 0, &none), "the marker at 3 is dropped");
    assert_eq!((log.high_watermark(), log.high_watermark_peak()), (2, 2), "a rebuild starts the peak again");
    assert_eq!(log.last_stable_offset(&none), 0, "without its marker the transaction is open again");
    assert_eq!(expected(&log), 0);
}

#[test]
fn a_transaction_without_its_marker_bounds_the_lso_whatever_the_hw_did() {
    let mut log = txn_log(false);
    log.update_high_watermark(3, &Mutations::none());
    assert_eq!(expected(&log), 0, "an open transaction at 0 holds every replica's LSO at 0");
    assert_eq!(log.last_stable_offset(&Mutations::none()), 0);
}
