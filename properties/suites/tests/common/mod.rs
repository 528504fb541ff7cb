//! Shared by the proptest suites of txnsim-properties: op types with one-line renderings, the harnesses
//! that drive the engine and mirror it in an expectation, and fixed-seed runner helpers.
//!
//! - `producer`: transactional / idempotent / plain producers and consumers against `txnsim_engine::Cluster`,
//!   mirrored in `txnsim_properties::ReferenceModel`, with fault ops (held, duplicated and lost messages,
//!   broker restart, time) for the mutation bite proofs.
//! - `log`: raw appends, markers, segment rolls, HW moves and DeleteRecords against one `PartitionLog`,
//!   mirrored in an expectation written here from `ProducerAppendInfo`, `ProducerStateManager`, `TransactionIndex`.
//! - `replication`: a plain producer against a 3-broker, replication factor 3 cluster, messages delivered
//!   or lost in order and time moved, checked by the replica invariants.
//! - `filter`: random fetch responses through `txnsim_engine::filter_fetch` and a reference filter written
//!   here from `CompletedFetch.nextFetchedRecord`.
#![allow(dead_code)]

pub mod filter;
pub mod log;
pub mod producer;
pub mod replication;

use proptest::test_runner::{Config, FileFailurePersistence, RngAlgorithm, TestRng, TestRunner};
use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

/// The case count of a suite: `PROPTEST_CASES` if set, else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// The suites' config: `cases` (see `cases`), failures persisted beside the test file as
/// `tests/<file>.proptest-regressions` (committed), generous shrinking.
pub fn suite_config(default_cases: u32) -> Config {
    Config {
        cases: cases(default_cases),
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        max_shrink_iters: 4096,
        ..Config::default()
    }
}

/// The fixed seed of every bite proof and of the no-mutation run of the same generators.
pub const BITE_SEED: [u8; 32] = *b"txnsim bite proofs, fixed seed 1";

/// A runner with a fixed ChaCha seed, no failure persistence and `cases` cases: the same cases on every
/// machine and every run.
pub fn fixed_runner(cases: u32) -> TestRunner {
    let config = Config {
        cases,
        rng_algorithm: RngAlgorithm::ChaCha,
        failure_persistence: None,
        max_shrink_iters: 4096,
        ..Config::default()
    };
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &BITE_SEED))
}

thread_local! {
    static QUIET: Cell<bool> = const { Cell::new(false) };
}
static HOOK: Once = Once::new();

/// Runs `f`, turning a panic into `Err(message)` without printing it: a mutated engine may trip its own
/// assertions, and the harness reports that as part of the case instead of as noise on stderr.
pub fn catch_quietly<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !QUIET.with(|q| q.get()) {
                previous(info);
            }
        }));
    });
    QUIET.with(|q| q.set(true));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(false));
    result.map_err(|payload| {
        if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else if let Some(s) = payload.downcast_ref::<&str>() {
            s.to_string()
        } else {
            "a panic without a message".to_string()
        }
    })
}

/// Record values are short and globally unique: the op's index and a letter per record (`7a`, `7b`).
pub fn values_of(op_index: usize, n: u8) -> Vec<String> {
    (0..n).map(|k| format!("{op_index}{}", (b'a' + k) as char)).collect()
}

/// A high watermark a follower could report: the current HW or the end of a batch above it (followers
/// copy whole batches, so Kafka's HW never splits one), chosen by `pick`.
pub fn pick_batch_boundary(log: &txnsim_engine::PartitionLog, pick: u8) -> txnsim_engine::Offset {
    let hw = log.high_watermark();
    let mut choices = vec![hw];
    choices.extend(log.batches().map(|b| b.next_offset()).filter(|o| *o > hw));
    choices[pick as usize % choices.len()]
}
