//! Log-layer proptests: random client batches (producers 1-3, epochs 0-3 going up and down, sequences in
//! order, from zero, ahead and behind, retries of earlier batches, transactional and not, plain batches
//! without a producer id), coordinator markers with random coordinator epochs, segment rolls, hand-moved
//! high watermarks and DeleteRecords, appended to one `PartitionLog`. After every op the engine's answer
//! (offsets, duplicate, or Kafka's error), log start / LSO / HW / LEO, segments, the aborted index and the
//! producer state equal an expectation written from `ProducerAppendInfo`, `ProducerStateManager` and
//! `TransactionIndex`; every state
//! invariant holds (no coordinator); LSO and HW never go back. At the end the history invariants hold over
//! the appends' acknowledgements.

mod common;

use common::log::{log_case_strategy, run_log_case};
use proptest::prelude::*;
use txnsim_engine::Mutations;

proptest! {
    #![proptest_config(common::suite_config(256))]

    #[test]
    fn appends_follow_kafkas_accept_reject_rules_and_keep_every_invariant(case in log_case_strategy(40)) {
        let report = run_log_case(&case, Mutations::none());
        prop_assert!(report.is_clean(), "the partition log departed from Kafka's rules or broke an invariant:\n{}", report.render(&case));
    }
}

/// The suite bites: with each log-side mutation on, a fixed-seed run finds an op where the log departs
/// from Kafka's rules (including NoDedup, which no invariant can see: the retry is refused with
/// OUT_OF_ORDER_SEQUENCE_NUMBER instead of being answered with its original offsets).
#[test]
fn every_log_side_mutation_departs_from_kafkas_rules() {
    use proptest::test_runner::{TestCaseError, TestError};
    use txnsim_engine::Mutation;
    for m in [
        Mutation::NoDedup,
        Mutation::DuplicateReturnsWrongOffsets,
        Mutation::SkipProducerEpochCheck,
        Mutation::SkipCoordinatorEpochCheck,
        Mutation::AllowNonTxnWriteInOpenTxn,
        Mutation::NoAbortedIndexEntry,
        Mutation::LsoIgnoresOngoingTxns,
        Mutation::LsoIgnoresUnreplicatedTxns,
        Mutation::LsoNotClampedToHw,
    ] {
        let mutations = Mutations::one(m);
        let mut runner = common::fixed_runner(1_000);
        let result = runner.run(&log_case_strategy(40), |case| {
            let report = run_log_case(&case, mutations.clone());
            match &report.mismatch {
                None => Ok(()),
                Some(_) => Err(TestCaseError::fail(report.render(&case))),
            }
        });
        match result {
            Err(TestError::Fail(why, _)) => println!("{} caught:\n{why}", m.name()),
            other => panic!(
                "mutation {} went unnoticed by the log-layer suite in 1000 fixed-seed cases: {other:?}",
                m.name()
            ),
        }
    }
}

/// Regression: DeleteRecords moves the log start into an open transaction's only batch. The LSO is then
/// the log start (Kafka clamps the first unstable offset), and the batch's one readable record sits at
/// the LSO, not below it: nothing-undecided-below-lso must stay quiet (it once judged the whole batch).
#[test]
fn delete_records_into_an_open_transactions_batch() {
    use common::log::{LogCase, LogOp, Seq};
    let case = LogCase {
        manual_hw: false,
        ops: vec![
            LogOp::Append { pid: Some(1), epoch: 0, seq: Seq::Next, txn: true, n: 2 },
            LogOp::DeleteRecords { pick: 1 },
        ],
    };
    let report = run_log_case(&case, Mutations::none());
    assert!(report.is_clean(), "the log start inside an open transaction's batch:\n{}", report.render(&case));
    assert!(
        report.lines[1].contains("before 1 -> 1"),
        "DeleteRecords should move the log start to 1:\n{}",
        report.render(&case)
    );
}

/// Regression: dedup compares sequences, not records, so a client that reuses an acknowledged sequence
/// range for new records gets the original batch's offsets back, as in Kafka.
#[test]
fn new_records_under_an_old_sequence_get_the_original_offsets() {
    use common::log::{LogCase, LogOp, Seq};
    let case = LogCase {
        manual_hw: false,
        ops: vec![
            LogOp::Append { pid: Some(2), epoch: 0, seq: Seq::Next, txn: false, n: 1 },
            LogOp::Append { pid: Some(2), epoch: 0, seq: Seq::Zero, txn: false, n: 1 },
        ],
    };
    let report = run_log_case(&case, Mutations::none());
    assert!(report.is_clean(), "a reused sequence range:\n{}", report.render(&case));
    assert!(
        report.lines[1].contains("first_offset: 0, last_offset: 0, duplicate: true"),
        "the second batch is the first one's duplicate:\n{}",
        report.render(&case)
    );
}
