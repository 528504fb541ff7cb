//! Proof that each invariant bites: for every invariant of the catalogue (`Invariant::catalogue()`), its catalogue mutation
//! (`inv.mutation()`) is switched on and a proptest run with a fixed ChaCha seed and a bounded number of
//! cases must find a case violating exactly that invariant; the shrunk case is re-run, its violations must
//! include the invariant, and it is printed one op a line (`cargo test --test bites -- --nocapture`).
//! The property of a bite run fails only on a violation of the target invariant, so shrinking keeps it.
//!
//! Where the catalogue mutation cannot reach its invariant through these generators, the plan says why;
//! the test then shows the fixed-seed run finds nothing (if it ever does, the plan is stale: make it a
//! bite) and, where one exists, that a labelled substitute mutation bites the invariant's checker.
//! `no_mutation_no_violation` runs the same generators, same seed, with no mutation: nothing fires.

mod common;

use common::log::{log_case_strategy, run_log_case};
use common::producer::{case_strategy, run_case, Profile};
use common::replication::{failover_case_strategy, replica_case_strategy, run_failover_case, run_replica_case};
use proptest::strategy::Strategy;
use proptest::test_runner::{TestCaseError, TestError};
use txnsim_engine::{Mutation, Mutations};
use txnsim_properties::Invariant;

/// Which generators a bite runs.
#[derive(Clone, Copy, Debug)]
enum Suite {
    /// The producer layer with this profile, both transaction versions.
    Producer(Profile),
    /// The log layer.
    Log,
    /// A replicated cluster (the other generators run one broker, where no replica invariant can fail).
    Replicas,
    /// A replicated cluster's leader failover with a suffix only the old leader held: truncation's ground.
    Failover,
    /// No generator here reaches it (it needs a send delayed past its delivery timeout, the abort, and
    /// the late copy delivered into a third transaction); the model does, in the named test of
    /// `model/tests/model/main.rs`, which also shows the space holds without the bug.
    Model(&'static str),
    /// No generator here commits consumer offsets or begins a transaction long after its InitProducerId
    /// (their time barely moves); the named ported scenario does, and `CATCHERS` in `tests/scenarios.rs`
    /// proves the mutation makes it fail on this invariant (and pass without it).
    Scenario(&'static str),
    /// No generator here runs the consume-transform-produce loop; the sim's eos profile does, and
    /// `EOS_CATCHERS` in `sim/tests/sim.rs` proves the mutation makes the named seed fail on this invariant
    /// (and pass without it).
    Sim,
}

/// Bounded cases per bite run (fixed: a bite proof is a claim about this seed and this budget).
const BITE_CASES: u32 = 1_000;
/// Cases of the search that must find nothing: no mutation at all.
const QUIET_CASES: u32 = 200;

/// The suite whose generators reach each invariant's catalogue mutation.
fn suite(inv: Invariant) -> Suite {
    use Invariant::*;
    use Suite::*;
    match inv {
        LsoBounds | LsoIsFirstUnstableOffset | UncommittedSupersetOfCommitted => Producer(Profile::ManualHw),
        NothingUndecidedBelowLso
        | OneOutcomePerTransaction
        | AbortedIndexExact
        | EpochBumpOnFenceAndTimeout
        | AbortedRead
        | PrecommittedRead
        | LostWrite
        | InconsistentOffsets
        | PollSkip
        | NonmonotonicPoll
        | PositionReachesLso
        | LsoReachesHighWatermark
        | OpenTransactionsTimeOut
        | ReaderCatchesUp => Producer(Profile::Clean),
        MarkerMatchesDecision
        | ValidCoordinatorTransitions
        | PartitionCoverage
        | DecidedTransactionsComplete
        | CommittedWritesCommitted => Producer(Profile::Faults),
        FailedSendCommitted => Model("tv2_abort_keeping_its_epoch_commits_a_failed_send"),
        NoNonTransactionalWriteInOpenTxn | ProducerEpochMonotonic | CoordinatorEpochMonotonic => Log,
        NoDuplicateAppends | Duplicate => Log,
        DecisionIrrevocable => Producer(Profile::Faults),
        NonmonotonicSend => Producer(Profile::Clean),
        PartialRead => Producer(Profile::Clean),
        ReplicaLogMatchesLeader | HwWithinIsrLogEnds | AckedWriteSurvivesElection => Replicas,
        ReplicaTxnStateFromOwnLog => Failover,
        TxnOffsetsVisibleIffCommitted => Scenario("omm-end-marker-commit-materializes-abort-drops"),
        TimeoutAbortNotEarly => Scenario("txn-state-manager-timeout-counts-from-the-transaction-start-tv1"),
        SendAnsweredWithinDeliveryTimeout => Scenario("snd-in-flight-batch-expires-on-delivery-timeout"),
        ExactlyOnceOutput | OutputOfConsumedInput => Sim,
    }
}

/// Runs the fixed-seed search with `m` on and returns the shrunk case's rendering if it violates `inv`.
fn search(inv: Invariant, m: Mutation, suite: Suite, cases: u32) -> Option<String> {
    let mutations = Mutations::one(m);
    match suite {
        Suite::Producer(profile) => shrink_to_violation(
            inv,
            m,
            cases,
            case_strategy(profile, None, 30),
            |case| run_case(case, mutations.clone()),
            |report| report.has(inv),
            |report, case| report.render(case),
        ),
        Suite::Model(_) | Suite::Scenario(_) | Suite::Sim => {
            unreachable!("a model, scenario or sim bite has no generator search")
        }
        Suite::Replicas => shrink_to_violation(
            inv,
            m,
            cases,
            replica_case_strategy(40),
            |case| run_replica_case(case, mutations.clone()),
            |report| report.has(inv),
            |report, case| report.render(case),
        ),
        Suite::Failover => shrink_to_violation(
            inv,
            m,
            cases,
            failover_case_strategy(),
            |case| run_failover_case(case, mutations.clone()),
            |report| report.has(inv),
            |report, case| format!("{}{}", case.render(), report.render(&[])),
        ),
        Suite::Log => shrink_to_violation(
            inv,
            m,
            cases,
            log_case_strategy(40),
            |case| run_log_case(case, mutations.clone()),
            |report| report.has(inv),
            |report, case| report.render(case),
        ),
    }
}

/// One suite's search: proptest shrinks a failing case, which is then run again to show it is reproducible.
fn shrink_to_violation<S: Strategy, R>(
    inv: Invariant,
    m: Mutation,
    cases: u32,
    strategy: S,
    run: impl Fn(&S::Value) -> R,
    violates: impl Fn(&R) -> bool,
    render: impl Fn(&R, &S::Value) -> String,
) -> Option<String> {
    let mut runner = common::fixed_runner(cases);
    let result = runner.run(&strategy, |case| {
        if violates(&run(&case)) {
            Err(TestCaseError::fail(format!("{} violated", inv.name())))
        } else {
            Ok(())
        }
    });
    match result {
        Ok(()) => None,
        Err(TestError::Abort(reason)) => panic!("the search for {} under {} aborted: {reason}", inv.name(), m.name()),
        Err(TestError::Fail(_, case)) => {
            let report = run(&case);
            assert!(
                violates(&report),
                "the shrunk case no longer violates {} under {} when run again: the harness is not deterministic\n{}",
                inv.name(),
                m.name(),
                render(&report, &case)
            );
            Some(render(&report, &case))
        }
    }
}

fn prove(inv: Invariant) {
    let suite = suite(inv);
    let m = inv.mutation();
    if let Suite::Model(test) = suite {
        // The generators do not reach it (if they ever do, make it a bite here)...
        let found = search(inv, m, Suite::Producer(Profile::Faults), BITE_CASES);
        assert!(found.is_none(), "{} now bites in the producer layer: make it a Producer bite", inv.name());
        // ...and the model test that proves it exists and names the mutation.
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../model/tests/model/main.rs");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let body = text.split(&format!("fn {test}()")).nth(1).unwrap_or_else(|| panic!("no model test {test}"));
        let body = body.split("\n#[test]").next().expect("split yields one part");
        assert!(
            body.contains(&format!("\"{}\"", inv.name())) && body.contains(&format!("{:?}", m)),
            "model test {test} does not check {} under {}",
            inv.name(),
            m.name()
        );
        return;
    }
    if let Suite::Scenario(name) = suite {
        // The producer generators commit no offsets and keep no transaction waiting, so they cannot reach it...
        let found = search(inv, m, Suite::Producer(Profile::Faults), BITE_CASES);
        assert!(found.is_none(), "{} now bites in the producer layer: make it a Producer bite", inv.name());
        // ...and the ported scenario that catches it is listed with this invariant as its catcher.
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/scenarios.rs");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let entry = format!("Mutation::{m:?},\n        \"{name}\",\n        \"invariant {}\"", inv.name());
        assert!(text.contains(&entry), "tests/scenarios.rs CATCHERS has no entry {entry}");
        return;
    }
    if let Suite::Sim = suite {
        // The producer generators run no consumer group, so they cannot reach it...
        let found = search(inv, m, Suite::Producer(Profile::Faults), BITE_CASES);
        assert!(found.is_none(), "{} now bites in the producer layer: make it a Producer bite", inv.name());
        // ...and the sim's catcher of the mutation is listed with this invariant.
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sim/tests/sim.rs");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let entry = format!("(Mutation::{m:?}, Profile::Eos, ");
        let listed = text.lines().any(|l| l.contains(&entry) && l.contains(&format!("\"{}\")", inv.name())));
        assert!(listed, "sim/tests/sim.rs EOS_CATCHERS has no entry {entry}.., \"{}\")", inv.name());
        return;
    }
    let found = search(inv, m, suite, BITE_CASES).unwrap_or_else(|| {
        panic!(
            "{} did not bite: with mutation {} on, {BITE_CASES} fixed-seed cases of {suite:?} found no violation of it",
            inv.name(),
            m.name()
        )
    });
    println!("{} bites mutation {} ({suite:?}); shrunk case:\n{found}", inv.name(), m.name());
}

macro_rules! bite_tests {
    ($($name:ident => $inv:ident,)*) => {
        $(
            #[test]
            fn $name() {
                prove(Invariant::$inv);
            }
        )*

        /// Every invariant in the catalogue has its test above.
        #[test]
        fn every_invariant_has_a_bite_test() {
            let tested = [$(Invariant::$inv),*];
            for inv in Invariant::catalogue() {
                assert!(tested.contains(&inv), "{} has no bite test in bites.rs", inv.name());
            }
        }
    };
}

bite_tests! {
    lso_bounds => LsoBounds,
    lso_is_first_unstable_offset => LsoIsFirstUnstableOffset,
    nothing_undecided_below_lso => NothingUndecidedBelowLso,
    marker_matches_decision => MarkerMatchesDecision,
    one_outcome_per_transaction => OneOutcomePerTransaction,
    aborted_index_exact => AbortedIndexExact,
    no_non_transactional_write_in_open_txn => NoNonTransactionalWriteInOpenTxn,
    producer_epoch_monotonic => ProducerEpochMonotonic,
    no_duplicate_appends => NoDuplicateAppends,
    coordinator_epoch_monotonic => CoordinatorEpochMonotonic,
    valid_coordinator_transitions => ValidCoordinatorTransitions,
    decision_irrevocable => DecisionIrrevocable,
    partition_coverage => PartitionCoverage,
    epoch_bump_on_fence_and_timeout => EpochBumpOnFenceAndTimeout,
    aborted_read => AbortedRead,
    precommitted_read => PrecommittedRead,
    partial_read => PartialRead,
    lost_write => LostWrite,
    duplicate => Duplicate,
    inconsistent_offsets => InconsistentOffsets,
    poll_skip => PollSkip,
    nonmonotonic_poll => NonmonotonicPoll,
    nonmonotonic_send => NonmonotonicSend,
    position_reaches_lso => PositionReachesLso,
    uncommitted_superset_of_committed => UncommittedSupersetOfCommitted,
    decided_transactions_complete => DecidedTransactionsComplete,
    lso_reaches_high_watermark => LsoReachesHighWatermark,
    open_transactions_time_out => OpenTransactionsTimeOut,
    reader_catches_up => ReaderCatchesUp,
    failed_send_committed => FailedSendCommitted,
    committed_writes_committed => CommittedWritesCommitted,
    replica_log_matches_leader => ReplicaLogMatchesLeader,
    hw_within_isr_log_ends => HwWithinIsrLogEnds,
    replica_txn_state_from_own_log => ReplicaTxnStateFromOwnLog,
    acked_write_survives_election => AckedWriteSurvivesElection,
    txn_offsets_visible_iff_committed => TxnOffsetsVisibleIffCommitted,
    timeout_abort_not_early => TimeoutAbortNotEarly,
    send_answered_within_delivery_timeout => SendAnsweredWithinDeliveryTimeout,
    exactly_once_output => ExactlyOnceOutput,
    output_of_consumed_input => OutputOfConsumedInput,
}

/// The same generators and seed with no mutation: no invariant fires, the engine matches the reference
/// model (until the first fault) and the log matches Kafka's rules.
#[test]
fn no_mutation_no_violation() {
    for profile in [Profile::Clean, Profile::ManualHw, Profile::Faults] {
        let mut runner = common::fixed_runner(QUIET_CASES);
        let result = runner.run(&case_strategy(profile, None, 30), |case| {
            let report = run_case(&case, Mutations::none());
            if report.is_clean() {
                Ok(())
            } else {
                Err(TestCaseError::fail(report.render(&case)))
            }
        });
        if let Err(e) = result {
            panic!("with no mutation the {profile:?} generators found a violation or a difference:\n{e}");
        }
    }
    let mut runner = common::fixed_runner(QUIET_CASES);
    let result = runner.run(&log_case_strategy(40), |case| {
        let report = run_log_case(&case, Mutations::none());
        if report.is_clean() {
            Ok(())
        } else {
            Err(TestCaseError::fail(report.render(&case)))
        }
    });
    if let Err(e) = result {
        panic!("with no mutation the log-layer generators found a violation or a difference:\n{e}");
    }
    let mut runner = common::fixed_runner(QUIET_CASES);
    let result = runner.run(&replica_case_strategy(40), |case| {
        let report = run_replica_case(&case, Mutations::none());
        if report.violations.is_empty() {
            Ok(())
        } else {
            Err(TestCaseError::fail(report.render(&case)))
        }
    });
    if let Err(e) = result {
        panic!("with no mutation the replicated cluster broke a replica invariant:\n{e}");
    }
    let mut runner = common::fixed_runner(QUIET_CASES);
    let result = runner.run(&failover_case_strategy(), |case| {
        let report = run_failover_case(&case, Mutations::none());
        if report.violations.is_empty() {
            Ok(())
        } else {
            Err(TestCaseError::fail(format!("{}{}", case.render(), report.render(&[]))))
        }
    });
    if let Err(e) = result {
        panic!("with no mutation a leader failover broke a replica invariant:\n{e}");
    }
}

/// `precommitted-read` takes a record as committed once its marker is below the highest HW a leader
/// reached (`History::leader_high_watermarks`), not only below the HW a poll saw: a new leader's HW may
/// lag what the old one committed (KIP-101), and its LSO does not (the unreplicated transaction left
/// producer state when the old HW passed it). Standard seeds 155244 and 235074 read so at first.
#[test]
fn a_read_below_a_former_leaders_hw_is_not_precommitted() {
    use txnsim_engine::producer_state::AppendOrigin;
    use txnsim_engine::record::{BatchProducer, CompressionType, EndTxnMarker, ProduceBatch};
    use txnsim_engine::{IsolationLevel, PartitionLog, TopicPartition, TransactionResult, TransactionVersion};
    use txnsim_properties::{check_history, Event, History, LeaderHighWatermark};
    let m = Mutations::none();
    let tp = TopicPartition::new("t", 0);
    let mut log = PartitionLog::new();
    let batch = ProduceBatch {
        producer: Some(BatchProducer { producer_id: 7, epoch: 0, base_sequence: 0 }),
        is_transactional: true,
        values: vec!["a".into()],
        compression: CompressionType::None,
    };
    log.append_data(&batch, AppendOrigin::Client, 0, &m).expect("a transaction begins");
    let commit = EndTxnMarker { result: TransactionResult::Commit, coordinator_epoch: 0 };
    log.append_marker(7, 0, commit, AppendOrigin::Coordinator, TransactionVersion::V1, 0, &m).expect("its marker");
    log.update_high_watermark(2, &m);
    let logs: std::collections::BTreeMap<_, _> = [(tp.clone(), log)].into_iter().collect();
    // The new leader answers with HW 1: the COMMIT at 1 is not below it, though its LSO (1) lets offset 0 out.
    let poll = Event::Poll {
        time_ms: 20,
        consumer: "rc".into(),
        isolation: IsolationLevel::ReadCommitted,
        partition: tp.clone(),
        fetch_offset: 0,
        high_watermark: 1,
        last_stable_offset: 1,
        records: vec![(0, "a".into())],
        position_after: 1,
    };
    let found = |rise_at: Option<u64>| {
        let leader_high_watermarks = rise_at
            .map(|time_ms| LeaderHighWatermark { time_ms, partition: tp.clone(), high_watermark: 2 })
            .into_iter()
            .collect();
        let history = History { events: vec![poll.clone()], leader_high_watermarks };
        check_history(&history, &logs).into_iter().map(|v| v.invariant).collect::<Vec<_>>()
    };
    assert_eq!(found(Some(10)), vec![], "the old leader's HW passed the marker before the poll");
    assert_eq!(found(None), vec![Invariant::PrecommittedRead], "no leader's HW passed the marker");
    assert_eq!(found(Some(30)), vec![Invariant::PrecommittedRead], "the HW passed it only after the poll");
}
