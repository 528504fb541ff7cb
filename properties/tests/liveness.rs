//! `decided-transactions-complete` reads the newest decision of each transactional id. A coordinator whose
//! Prepare* append failed decides again at a higher epoch (the fence bumped the epoch in place), and both
//! records can reach the log; a loader keeps the newest record per id
//! (`TransactionStateManager.loadTransactionMetadata` fills a map) and completes only that one. Derived
//! from Kafka's load; no Kafka test shows it. The sim found it (timeouts seed 213): the checker called the
//! superseded PrepareAbort a decision that never completed.

use std::collections::{BTreeMap, BTreeSet};
use txnsim_engine::coordinator::{DecisionCause, TransactionCoordinator, TxnDecision};
use txnsim_engine::{Mutations, TopicPartition, TransactionResult};
use txnsim_properties::{check_liveness, ClusterView, Invariant};

fn decision(tid: &str, marker_epoch: i16, completed: bool) -> TxnDecision {
    TxnDecision {
        transactional_id: tid.to_string(),
        producer_id: 1000,
        data_epoch: marker_epoch - 1,
        marker_epoch,
        result: TransactionResult::Abort,
        partitions: BTreeSet::from([TopicPartition::new("t", 1)]),
        cause: DecisionCause::Fence,
        coordinator_epoch: 0,
        completed,
        markers: BTreeMap::new(),
        abandoned: false,
    }
}

/// The witnesses of `decided-transactions-complete` over a coordinator holding `decisions`.
fn incomplete(decisions: Vec<TxnDecision>) -> Vec<String> {
    let mut c = TransactionCoordinator::new();
    c.decisions = decisions;
    let logs: BTreeMap<TopicPartition, txnsim_engine::PartitionLog> = BTreeMap::new();
    let view = ClusterView { partitions: &logs, coordinator: Some(&c), mutations: &Mutations::none() };
    check_liveness(&view, &[])
        .into_iter()
        .filter(|v| v.invariant == Invariant::DecidedTransactionsComplete)
        .map(|v| v.witness)
        .collect()
}

#[test]
fn a_decision_superseded_by_a_later_one_of_its_id_need_not_complete() {
    let witnesses = incomplete(vec![decision("tx-a", 2, false), decision("tx-a", 3, true)]);
    assert!(
        witnesses.is_empty(),
        "the epoch-2 PrepareAbort was superseded by the completed epoch-3 one: {witnesses:?}"
    );
}

#[test]
fn the_newest_decision_of_an_id_must_complete() {
    let witnesses = incomplete(vec![decision("tx-a", 2, true), decision("tx-a", 3, false)]);
    assert_eq!(witnesses.len(), 1, "the newest decision never completed: {witnesses:?}");
    assert!(witnesses[0].starts_with("decision #1: 'tx-a' ABORT"), "names the newest decision: {witnesses:?}");
}

#[test]
fn only_a_decision_of_the_same_id_supersedes() {
    let witnesses = incomplete(vec![decision("tx-a", 2, false), decision("tx-b", 3, true)]);
    assert_eq!(witnesses.len(), 1, "tx-b's decision says nothing about tx-a's: {witnesses:?}");
    assert!(witnesses[0].starts_with("decision #0: 'tx-a'"), "{witnesses:?}");
}
