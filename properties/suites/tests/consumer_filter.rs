//! Consumer-filter proptests: random fetch responses (gaps between batches, compacted and empty batches,
//! empty control batches, COMMIT and ABORT markers, aborted lists that match the batches and that do not,
//! a list even at read_uncommitted) through `txnsim_engine::filter_fetch`, against a reference filter
//! written from `CompletedFetch.nextFetchedRecord`: the same delivered records and the same next fetch
//! offset, at both isolation levels.

mod common;

use common::filter::{fetch_case_strategy, reference_filter};
use proptest::prelude::*;
use txnsim_engine::{filter_fetch, Mutations};

proptest! {
    #![proptest_config(common::suite_config(512))]

    #[test]
    fn filter_matches_kafkas_completed_fetch(case in fetch_case_strategy()) {
        let got = filter_fetch(case.isolation, case.fetch_offset, &case.data, &Mutations::none());
        let want = reference_filter(case.isolation, case.fetch_offset, &case.data);
        prop_assert_eq!(
            &got, &want,
            "filter_fetch differs from CompletedFetch.nextFetchedRecord (left: engine, right: reference) for:\n{:?}", case
        );
    }
}

/// The suite bites: with each consumer-side mutation on, a fixed-seed run finds a fetch response the
/// engine filters differently from Kafka's consumer.
#[test]
fn every_consumer_side_mutation_is_caught() {
    use proptest::test_runner::{TestCaseError, TestError};
    use txnsim_engine::Mutation;
    for m in [
        Mutation::NoPositionAdvanceOverControl,
        Mutation::AbortedPidNotClearedOnMarker,
        Mutation::PositionSkipsToHighWatermark,
        Mutation::RedeliverLastRecord,
        Mutation::AbortedListForReadUncommitted,
    ] {
        let mutations = Mutations::one(m);
        let mut runner = common::fixed_runner(2_000);
        let result = runner.run(&fetch_case_strategy(), |case| {
            let got = filter_fetch(case.isolation, case.fetch_offset, &case.data, &mutations);
            let want = reference_filter(case.isolation, case.fetch_offset, &case.data);
            if got == want {
                Ok(())
            } else {
                Err(TestCaseError::fail(format!("engine {got:?}, reference {want:?}")))
            }
        });
        match result {
            Err(TestError::Fail(why, case)) => println!("{} caught: {why}\n{case:?}", m.name()),
            other => panic!(
                "mutation {} went unnoticed by the consumer-filter suite in 2000 fixed-seed cases: {other:?}",
                m.name()
            ),
        }
    }
}
