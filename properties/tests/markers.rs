//! `marker-matches-decision` and a decision its coordinator abandoned. When one leader answers a
//! decision's WriteTxnMarkers with INVALID_PRODUCER_EPOCH (or TRANSACTION_COORDINATOR_FENCED), the
//! coordinator stops sending that decision's markers and drops the answers still to come
//! (`TransactionMarkerRequestCompletionHandler`: `removeMarkersForTxn`;
//! `TransactionMarkerRequestCompletionHandlerTest#shouldCompleteDelayedOperationWhenInvalidProducerEpoch`).
//! A marker another leader wrote first is that decision's all the same. The sim found the checker
//! calling it a marker no decision wrote (standard seeds 4006943 and 4464540 of the 10,000,000 sweep).

use std::collections::{BTreeMap, BTreeSet};
use txnsim_engine::coordinator::{
    DecisionCause, TransactionCoordinator, TransactionMetadata, TransactionState, TxnDecision,
};
use txnsim_engine::record::{BatchBody, BatchProducer, CompressionType, EndTxnMarker, Record, RecordBatch};
use txnsim_engine::{Mutations, PartitionLog, TopicPartition, TransactionResult};
use txnsim_properties::{check_state, ClusterView, Invariant};

const PID: i64 = 1000;

/// t/2's log: the transaction's two records at 0..1, its ABORT marker (epoch 0) at 2, HW past it.
fn t2() -> PartitionLog {
    let none = Mutations::none();
    let producer = Some(BatchProducer { producer_id: PID, epoch: 0, base_sequence: 0 });
    let mut log = PartitionLog::new();
    let records = (0..2).map(|offset| Record { offset, value: format!("v{offset}") }).collect();
    let data = RecordBatch {
        base_offset: 0,
        last_offset: 1,
        producer,
        is_transactional: true,
        body: BatchBody::Data(records),
        partition_leader_epoch: 0,
        compression: CompressionType::None,
    };
    log.append_as_follower(&data, 0, &none);
    let marker = EndTxnMarker { result: TransactionResult::Abort, coordinator_epoch: 0 };
    let control = RecordBatch {
        base_offset: 2,
        last_offset: 2,
        producer,
        is_transactional: true,
        body: BatchBody::Control(Some(marker)),
        partition_leader_epoch: 0,
        compression: CompressionType::None,
    };
    log.append_as_follower(&control, 0, &none);
    log.update_high_watermark(3, &none);
    log
}

/// The coordinator decided ABORT at epoch 0 over t/1 and t/2, acknowledged on neither; `abandoned` says
/// whether t/1's leader answered INVALID_PRODUCER_EPOCH. It never completes (`PrepareAbort` stays).
fn coordinator(decisions: Vec<TxnDecision>) -> TransactionCoordinator {
    let mut c = TransactionCoordinator::new();
    let mut meta = TransactionMetadata::new("tx-s", PID, 60_000, 0);
    meta.state = TransactionState::PrepareAbort;
    c.txns.insert("tx-s".to_string(), meta);
    c.decisions = decisions;
    c
}

fn decision(result: TransactionResult, abandoned: bool) -> TxnDecision {
    TxnDecision {
        transactional_id: "tx-s".to_string(),
        producer_id: PID,
        data_epoch: 0,
        marker_epoch: 0,
        result,
        partitions: BTreeSet::from([TopicPartition::new("t", 1), TopicPartition::new("t", 2)]),
        cause: DecisionCause::Client,
        coordinator_epoch: 0,
        completed: false,
        markers: BTreeMap::new(),
        abandoned,
    }
}

/// The `marker-matches-decision` witnesses over t/2 with the coordinator holding `decisions`.
fn unmatched(decisions: Vec<TxnDecision>) -> Vec<String> {
    let partitions = BTreeMap::from([(TopicPartition::new("t", 2), t2())]);
    let c = coordinator(decisions);
    let view = ClusterView { partitions: &partitions, coordinator: Some(&c), mutations: &Mutations::none() };
    check_state(&view)
        .into_iter()
        .filter(|v| v.invariant == Invariant::MarkerMatchesDecision)
        .map(|v| v.witness)
        .collect()
}

#[test]
fn an_abandoned_decisions_marker_is_that_decisions() {
    let found = unmatched(vec![decision(TransactionResult::Abort, true)]);
    assert!(found.is_empty(), "t/2's ABORT marker was written by the abandoned epoch-0 abort: {found:?}");
}

#[test]
fn a_marker_no_decision_wrote_is_still_found() {
    let found = unmatched(vec![]);
    assert_eq!(found.len(), 1, "no decision at all: {found:?}");
    assert!(found[0].contains("ABORT marker at 2 for producer 1000 epoch 0"), "{found:?}");
}

#[test]
fn only_an_abandoned_decision_of_the_markers_outcome_explains_it() {
    let found = unmatched(vec![decision(TransactionResult::Commit, true)]);
    assert_eq!(found.len(), 1, "a COMMIT decision does not write an ABORT marker: {found:?}");
    let found = unmatched(vec![decision(TransactionResult::Abort, false)]);
    assert_eq!(found.len(), 1, "a decision neither pending nor abandoned has no answer to come: {found:?}");
}
