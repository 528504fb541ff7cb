//! `timeout-abort-not-early` pairs each timeout decision with its Prepare* transition. A coordinator that
//! loaded `__transaction_state` holds decisions from the whole log but transitions only from the newest
//! record of each id it loaded (`TransactionStateManager.loadTransactionMetadata` keeps one metadata per
//! id), so the pairing counts from the newest decision back. Derived from Kafka's load; the sim found the
//! miscount (timeouts seed 3440): a timeout abort loaded from the log was paired with a later fence's
//! PrepareAbort, 615 ms into an 800 ms timeout.

use std::collections::{BTreeMap, BTreeSet};
use txnsim_engine::coordinator::{
    DecisionCause, TransactionCoordinator, TransactionMetadata, TransactionState, TxnDecision, TxnTransition,
};
use txnsim_engine::{TopicPartition, TransactionResult};
use txnsim_properties::check_timers;

const TIMEOUT_MS: u64 = 800;

fn decision(cause: DecisionCause, marker_epoch: i16) -> TxnDecision {
    TxnDecision {
        transactional_id: "tx-a".to_string(),
        producer_id: 1000,
        data_epoch: marker_epoch - 1,
        marker_epoch,
        result: TransactionResult::Abort,
        partitions: BTreeSet::from([TopicPartition::new("t", 1)]),
        cause,
        coordinator_epoch: 0,
        completed: true,
        markers: BTreeMap::new(),
        abandoned: false,
    }
}

/// The witnesses over 'tx-a' with `decisions` and `transitions` (state, time).
fn witnesses(decisions: Vec<TxnDecision>, transitions: &[(TransactionState, u64)]) -> Vec<String> {
    let mut c = TransactionCoordinator::new();
    c.decisions = decisions;
    let mut meta = TransactionMetadata::new("tx-a", 1000, TIMEOUT_MS, 0);
    meta.transitions = transitions
        .iter()
        .map(|&(state, timestamp_ms)| TxnTransition { state, timestamp_ms, txn_timeout_ms: TIMEOUT_MS })
        .collect();
    c.txns.insert("tx-a".to_string(), meta);
    check_timers(&c).into_iter().map(|v| v.witness).collect()
}

use TransactionState::{CompleteAbort, Empty, Ongoing, PrepareAbort};

#[test]
fn a_loaded_timeout_decision_is_not_paired_with_a_later_fence() {
    // Seed 3440: the loaded log held a timeout abort (completed at 1250 ms); the new coordinator's history
    // starts there, and the fence at 2080 ms is its only Prepare*.
    let history = [(CompleteAbort, 1250), (Empty, 1348), (Ongoing, 1465), (PrepareAbort, 2080), (CompleteAbort, 2129)];
    let found = witnesses(vec![decision(DecisionCause::Timeout, 1), decision(DecisionCause::Fence, 3)], &history);
    assert!(found.is_empty(), "the 2080 ms abort was the fence's, not the timeout's: {found:?}");
}

#[test]
fn an_early_timeout_abort_is_still_found() {
    let history = [(Empty, 0), (Ongoing, 1000), (PrepareAbort, 1500), (CompleteAbort, 1510)];
    let found = witnesses(vec![decision(DecisionCause::Timeout, 1)], &history);
    assert_eq!(found.len(), 1, "aborted 500 ms into an 800 ms timeout: {found:?}");
    assert!(found[0].contains("500 ms after its transaction began at 1000 ms"), "{found:?}");
}

#[test]
fn a_loaded_coordinators_own_early_timeout_abort_is_found() {
    // A decision loaded from the log, then this coordinator's own early timeout abort.
    let history = [(CompleteAbort, 1250), (Empty, 1348), (Ongoing, 1465), (PrepareAbort, 2000), (CompleteAbort, 2010)];
    let found = witnesses(vec![decision(DecisionCause::Fence, 1), decision(DecisionCause::Timeout, 3)], &history);
    assert_eq!(found.len(), 1, "aborted 535 ms into an 800 ms timeout: {found:?}");
    assert!(found[0].contains("535 ms after its transaction began at 1465 ms"), "{found:?}");
}
