//! `replica-txn-state-from-own-log` against a replica whose HW moved back: Kafka lets a follower's HW
//! fall (`UnifiedLog.updateHighWatermarkMetadata` warns "Non-monotonic update of high watermark" and
//! goes on) and never restores the unreplicated transactions an earlier, higher HW removed. Derived from
//! `UnifiedLog.scala` and `ProducerStateManager.removeUnreplicatedTransactions`; no Kafka test shows it.
//! The sim found it (standard seed 1292, late-sends seed 488): a leader killed with its HW past an
//! ABORT marker returned as the follower of a leader whose HW was still below it.

use txnsim_engine::record::{BatchBody, BatchProducer, EndTxnMarker, Record, RecordBatch};
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
    }
}

/// A follower's log: a transaction of three records at 0..2, then its ABORT marker at 3.
fn aborted_txn_log() -> PartitionLog {
    let mut log = PartitionLog::new();
    let records = (0..3).map(|offset| Record { offset, value: format!("v{offset}") }).collect();
    log.append_as_follower(&batch(0, BatchBody::Data(records)), 0, &Mutations::none());
    let marker = EndTxnMarker { result: TransactionResult::Abort, coordinator_epoch: 0 };
    log.append_as_follower(&batch(3, BatchBody::Control(Some(marker))), 0, &Mutations::none());
    log
}

#[test]
fn a_follower_whose_hw_moves_back_below_a_marker_keeps_the_lso_at_its_hw() {
    let none = Mutations::none();
    let mut log = aborted_txn_log();
    log.update_high_watermark(3, &none);
    assert_eq!(log.last_stable_offset(&none), 0, "with the marker at the HW the transaction is unstable");
    let facts = LogFacts::of(&log);
    let allowed = facts.lso_range(0, 3);
    assert_eq!(allowed, 0..=3, "a marker at the HW: unstable at the low end, counted at the high end");
    assert!(allowed.contains(&log.last_stable_offset(&none)));

    log.update_high_watermark(4, &none);
    assert_eq!(log.last_stable_offset(&none), 4, "past the marker the transaction leaves the unreplicated set");
    log.update_high_watermark(3, &none);
    assert_eq!(
        log.last_stable_offset(&none),
        3,
        "Kafka does not restore a transaction removeUnreplicatedTransactions dropped: the LSO is the HW"
    );
    assert!(allowed.contains(&log.last_stable_offset(&none)), "the moved-back replica's LSO 3 is Kafka's");
    assert_eq!(facts.lso_range(0, 4), 4..=4, "past the marker every replica's LSO is the HW");
}

#[test]
fn a_transaction_without_its_marker_bounds_the_lso_whatever_the_hw_did() {
    let mut log = PartitionLog::new();
    let records = (0..3).map(|offset| Record { offset, value: format!("v{offset}") }).collect();
    log.append_as_follower(&batch(0, BatchBody::Data(records)), 0, &Mutations::none());
    log.update_high_watermark(3, &Mutations::none());
    let facts = LogFacts::of(&log);
    assert_eq!(facts.lso_range(0, 3), 0..=0, "an open transaction at 0 holds every replica's LSO at 0");
    assert_eq!(log.last_stable_offset(&Mutations::none()), 0);
}
