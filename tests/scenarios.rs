//! Every scenario under seeds/scenarios passes on the engine, and the CLI rejects bad input with a
//! one-line error (exit 2) instead of a panic.

use std::path::Path;
use std::process::Command;
use txnsim::scenario::{self, RunOptions};
use txnsim_engine::{Mutation, Mutations};
use txnsim_properties::catalogue::ENGINE_TEST_CAUGHT;

fn corpus() -> Vec<scenario::Scenario> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/scenarios");
    let files = scenario::collect_files(&root).expect("seeds/scenarios is readable");
    assert!(!files.is_empty(), "no scenario files under {}", root.display());
    files.iter().flat_map(|f| scenario::load(f).unwrap_or_else(|e| panic!("{e}"))).collect()
}

#[test]
fn every_corpus_scenario_passes() {
    let scenarios = corpus();
    assert!(
        scenarios.len() >= 31,
        "the corpus holds the seed experiment and at least 30 more, found {}",
        scenarios.len()
    );
    let failures: Vec<String> = scenarios
        .iter()
        .filter_map(|sc| {
            scenario::run(sc, &RunOptions::default()).difference.map(|d| format!("{} ({}): {d}", sc.name, sc.file))
        })
        .collect();
    assert!(failures.is_empty(), "scenarios departed from their expectations:\n{}", failures.join("\n"));
}

#[test]
fn seed_experiment_table_shows_both_readers() {
    let sc = corpus()
        .into_iter()
        .find(|s| s.name == "open-then-commit-then-abort")
        .expect("the seed experiment is in the corpus");
    let report = scenario::run(&sc, &RunOptions { show: true, ..RunOptions::default() });
    assert_eq!(report.difference, None);
    let table = report.table.join("\n");
    // While the first transaction is open: read_uncommitted 3 records, read_committed 0 ("0 vs 3").
    assert!(
        table.contains("read_uncommitted from 0: 3 record(s) [0:inflight-0 1:inflight-1 2:inflight-2]  position 3"),
        "{table}"
    );
    assert!(table.contains("read_committed   from 0: 0 record(s) []  position 0"), "{table}");
    // After the abort: the offset gap and the index entry (4, 7).
    assert!(table.contains("aborted index: (p first 4 last 7 lso 8)"), "{table}");
    assert!(
        table.contains("read_committed   from 0: 3 record(s) [0:inflight-0 1:inflight-1 2:inflight-2]  position 8"),
        "{table}"
    );
    assert!(
        table.contains("read_uncommitted from 0: 6 record(s) [0:inflight-0 1:inflight-1 2:inflight-2 4:aborted-0 5:aborted-1 6:aborted-2]  position 8"),
        "{table}"
    );
}

fn run_cli(file_text: &str) -> (i32, String, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("case.json");
    std::fs::write(&path, file_text).expect("write temp scenario");
    let out = Command::new(env!("CARGO_BIN_EXE_txnsim")).arg("scenario").arg(&path).output().expect("run txnsim");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn assert_input_error(text: &str, must_contain: &[&str]) {
    let (code, _, stderr) = run_cli(text);
    assert_eq!(code, 2, "bad input must exit 2; stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "bad input must not panic: {stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line of error: {stderr}");
    for needle in must_contain {
        assert!(stderr.contains(needle), "error should mention {needle:?}: {stderr}");
    }
}

const HEAD: &str = r#"{"format": "txnsim-scenario/v1", "scenarios": [{"name": "s", "layer": "producer", "ops": "#;

#[test]
fn malformed_json_is_an_input_error() {
    assert_input_error("{\"format\": ", &["malformed JSON"]);
}

#[test]
fn unknown_op_is_an_input_error() {
    assert_input_error(
        &format!("{HEAD}[{{\"op\": \"teleport\"}}]}}]}}"),
        &["scenario 's'", "op 0", "field 'op'", "teleport"],
    );
}

#[test]
fn unknown_field_is_an_input_error() {
    let text = format!("{HEAD}[{{\"op\": \"init_producer\", \"producer\": \"p\", \"colour\": 1}}]}}]}}");
    assert_input_error(&text, &["op 0", "field 'colour'"]);
}

#[test]
fn missing_producer_name_is_an_input_error() {
    let text = format!("{HEAD}[{{\"op\": \"init_producer\", \"producer\": \"p\"}}, {{\"op\": \"begin\"}}]}}]}}");
    assert_input_error(&text, &["op 1", "field 'producer'"]);
}

#[test]
fn unknown_topic_is_an_input_error() {
    let text = format!(
        "{HEAD}[{{\"op\": \"init_producer\", \"producer\": \"p\"}}, {{\"op\": \"begin\", \"producer\": \"p\"}}, \
         {{\"op\": \"produce\", \"producer\": \"p\", \"topic\": \"nope\", \"partition\": 0, \"values\": [\"v\"]}}]}}]}}"
    );
    assert_input_error(&text, &["op 2", "field 'topic'", "unknown topic 'nope'"]);
}

#[test]
fn a_consumer_op_before_its_subscribe_is_an_input_error() {
    let head = HEAD.replace("\"producer\"", "\"network\"");
    let text = format!("{head}[{{\"op\": \"poll\", \"consumer\": \"c\"}}]}}]}}");
    assert_input_error(&text, &["op 0", "field 'consumer'", "no consumer 'c': it needs a subscribe first"]);
    let both = format!(
        "{head}[{{\"op\": \"subscribe\", \"consumer\": \"c\", \"group\": \"g\", \"topics\": [\"t\"], \
         \"isolation\": \"read_committed\"}}, {{\"op\": \"init_producer\", \"producer\": \"p\"}}, \
         {{\"op\": \"send_offsets\", \"producer\": \"p\", \"group\": \"g\", \"consumer\": \"c\"}}]}}]}}"
    );
    assert_input_error(&both, &["op 2", "field 'group'", "give exactly one of group and consumer"]);
}

#[test]
fn op_on_a_crashed_producer_is_an_input_error() {
    let text = format!(
        "{HEAD}[{{\"op\": \"init_producer\", \"producer\": \"p\"}}, {{\"op\": \"crash_producer\", \"producer\": \"p\"}}, \
         {{\"op\": \"begin\", \"producer\": \"p\"}}]}}]}}"
    );
    assert_input_error(&text, &["op 2", "crashed"]);
}

#[test]
fn a_wrong_expectation_fails_with_exit_1_and_names_the_difference() {
    let text = format!(
        "{HEAD}[{{\"op\": \"init_producer\", \"producer\": \"p\"}}, {{\"op\": \"begin\", \"producer\": \"p\"}}, \
         {{\"op\": \"produce\", \"producer\": \"p\", \"partition\": 0, \"values\": [\"v\"], \"expect\": {{\"first_offset\": 1, \"last_offset\": 1}}}}]}}]}}"
    );
    let (code, stdout, _) = run_cli(&text);
    assert_eq!(code, 1, "a failing scenario exits 1: {stdout}");
    assert!(stdout.contains("FAIL s"), "{stdout}");
    assert!(stdout.contains("op 2 (produce): expect.first_offset: expected 1, actual 0"), "{stdout}");
}

/// Mutations only faults reach (a marker answer that crosses its resend's answer, an old coordinator's
/// marker landing after its successor's, a commit's append timing out before a timeout abort at the same
/// epoch and a failover, brokers acting on an ISR the controller changed); the scenario layer stages none,
/// so other suites prove these bite (`sim/tests/sim.rs`, REPLICATION_CATCHERS and the seed corpus).
const NEEDS_FAULTS: [Mutation; 4] = [
    Mutation::DoubleComplete,
    Mutation::FailoverKeepsCoordinatorEpoch,
    Mutation::LoadResendsSupersededDecisions,
    Mutation::IsrChangeToldToLeaderOnly,
];

/// The departures from Kafka 4.x fixed on the coordinator and leader side, each with the ported Kafka
/// test whose exact expectation catches it: the scenario must fail with a difference (not an input error).
const CATCHERS: [(Mutation, &str, &str); 35] = [
    (Mutation::NoMarkerResendOnFailover, "a-new-coordinator-completes-a-prepared-commit", "coordinator[0].state"),
    (
        Mutation::FenceAbortKeepsExhaustedId,
        "coordinator-tv2-timeout-abort-at-the-last-epoch-rotates-the-producer-id",
        "coordinator[0].producer_id",
    ),
    (Mutation::TxnLogAppendSynchronous, "coordinator-init-producer-id-waits-for-a-pending-commit-tv1", "in_flight"),
    (
        Mutation::EndTxnEpochBeforePending,
        "coordinator-tv2-empty-abort-while-the-commit-markers-are-out",
        "producers[0].state",
    ),
    (
        Mutation::Tv2FenceAbortBumpsTwice,
        "coordinator-init-producer-id-fences-an-ongoing-transaction-tv2",
        "coordinator[0].epoch",
    ),
    (
        Mutation::VerificationIgnoresLowestSequence,
        "producer-state-verification-holds-a-later-batch-behind-the-lowest-sequence-tv1",
        "logs[0].records",
    ),
    (Mutation::VerificationEntryNeverExpires, "producer-state-verification-entry-expires-tv2", "verification_entries"),
    (
        Mutation::DropPendingMarkersOnRestart,
        "txn-state-manager-reload-resends-markers-of-a-prepared-commit-tv1",
        "invariant partition-coverage",
    ),
    (
        Mutation::RestartAbortsPreparedCommits,
        "txn-state-manager-reload-resends-markers-of-a-prepared-commit-tv2",
        "invariant marker-matches-decision",
    ),
    (Mutation::Kip360RetryFenced, "coordinator-kip360-retry-gets-the-current-epoch-tv1", "producers[0].state"),
    (Mutation::RetriesIgnored, "snd-retries-bounded-by-retries", "outcomes"),
    (Mutation::HwFromLeaderLeo, "partition-maybe-shrink-isr", "invariant hw-within-isr-log-ends"),
    (
        Mutation::TxnOffsetsVisibleBeforeCommit,
        "omm-end-marker-commit-materializes-abort-drops",
        "invariant txn-offsets-visible-iff-committed",
    ),
    (
        Mutation::TxnStartTimestampNotReset,
        "txn-state-manager-timeout-counts-from-the-transaction-start-tv1",
        "invariant timeout-abort-not-early",
    ),
    (
        Mutation::InFlightBatchesNotExpired,
        "snd-in-flight-batch-expires-on-delivery-timeout",
        "invariant send-answered-within-delivery-timeout",
    ),
    (Mutation::TruncateToOwnLeo, "follower-truncates-to-the-diverging-epoch-after-leader-failover", "logs[0].records"),
    (
        Mutation::NoRebuildAfterTruncation,
        "follower-truncates-to-the-diverging-epoch-after-leader-failover",
        "invariant replica-txn-state-from-own-log",
    ),
    (
        Mutation::EpochExhaustionIgnored,
        "coordinator-exhausted-epoch-rotates-the-producer-id-on-init-tv1",
        "producers[0].producer_id",
    ),
    (
        Mutation::TransactionalIdsNeverExpire,
        "txn-state-manager-removes-expired-empty-and-complete-ids",
        "coordinator[0].state",
    ),
    (
        Mutation::AddPartitionsPidBeforePending,
        "coordinator-tv2-next-transaction-under-the-rotated-id-waits-for-the-markers",
        "producers[0].state",
    ),
    (Mutation::MarkerRetryResendsAllPartitions, "marker-retry-resends-only-the-failed-partition", "expect.held"),
    (
        Mutation::BatchStraddlingBoundReturned,
        "read-bounded-inside-a-batch-returns-nothing-of-that-batch",
        "expect.values",
    ),
    (
        Mutation::LogStartDropsOpenTransactions,
        "delete-records-that-drops-an-open-transactions-segment-keeps-it-open",
        "invariant lso-is-first-unstable-offset",
    ),
    (
        Mutation::LastProducerEpochPersisted,
        "a-kip360-init-retried-after-a-coordinator-failover-is-fenced",
        "producers[0].state",
    ),
    (
        Mutation::RotationRecordsOverflowedEpoch,
        "coordinator-tv2-commit-at-the-last-epoch-rotates-the-producer-id",
        "coordinator[0].last_epoch",
    ),
    (Mutation::RetriesOvertake, "snd-retries-keep-their-order-behind-an-unanswered-batch", "in_flight"),
    (Mutation::ElrNotKept, "elr-member-leads-when-the-isr-dies", "registrations[0].elr"),
    (
        Mutation::UncleanShutdownStaysInElr,
        "last-known-leader-elected-after-every-replica-crashed",
        "registrations[0].leader",
    ),
    (
        Mutation::LastKnownLeaderNotElected,
        "last-known-leader-elected-after-every-replica-crashed",
        "registrations[0].leader",
    ),
    (Mutation::ElrMemberNotElected, "elr-member-leads-when-the-isr-dies", "registrations[0].leader"),
    (Mutation::HwAdvancesUnderMinIsr, "partition-hw-does-not-advance-under-min-isr", "high_watermark"),
    (
        Mutation::ProcessorReadsUncommitted,
        "processor-reading-uncommitted-commits-output-of-aborted-input",
        "consumers[1].positions",
    ),
    (
        Mutation::TxnOffsetCommitSkipsGenerationCheck,
        "kip447-member-of-an-old-generation-is-a-fenced-zombie",
        "outcomes.zombie",
    ),
    (Mutation::OffsetsOnAbort, "tt-send-offsets-with-group-metadata", "invariant txn-offsets-visible-iff-committed"),
    (Mutation::OffsetsOutsideTxn, "tt-send-offsets-with-group-metadata", "group_offsets[0].offsets"),
];

#[test]
fn each_fixed_departure_is_caught_by_its_ported_kafka_test() {
    let scenarios = corpus();
    for (m, name, field) in CATCHERS {
        let sc = scenarios.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no scenario {name}"));
        assert_eq!(scenario::run(sc, &RunOptions::default()).difference, None, "{name} passes unmutated");
        let report = scenario::run(sc, &RunOptions { mutations: Mutations::one(m), show: false, progress: None });
        assert_eq!(report.input_error, None, "{name} under {}: a misnamed message is not a catch", m.name());
        let difference = report.difference.unwrap_or_else(|| panic!("{name} does not catch {}", m.name()));
        let text = difference.to_string();
        assert!(text.contains(field), "{name} catches {} at {field}, but the difference is: {text}", m.name());
    }
}

#[test]
fn every_scenario_reachable_mutation_fails_some_scenario() {
    let scenarios = corpus();
    let staged = |m: &Mutation| !NEEDS_FAULTS.contains(m) && !ENGINE_TEST_CAUGHT.iter().any(|(c, _)| c == m);
    for m in Mutation::ALL.into_iter().filter(staged) {
        let opts = RunOptions { mutations: Mutations::one(m), ..RunOptions::default() };
        let caught = scenarios.iter().find(|sc| scenario::run(sc, &opts).difference.is_some());
        assert!(caught.is_some(), "mutation {} passes every scenario: the corpus does not bite it", m.name());
    }
    for m in NEEDS_FAULTS {
        let opts = RunOptions { mutations: Mutations::one(m), ..RunOptions::default() };
        let caught = scenarios.iter().find(|sc| scenario::run(sc, &opts).difference.is_some());
        assert!(
            caught.is_none(),
            "mutation {} now fails scenario {:?}: move it out of NEEDS_FAULTS",
            m.name(),
            caught.map(|s| &s.name)
        );
    }
}

/// A scenario without ops is refused, and so are a key given twice (JSON readers keep one of the two
/// silently) and an invariant name the catalogue lacks.
#[test]
fn an_empty_scenario_and_a_doubled_key_are_refused() {
    assert_input_error(&format!("{HEAD}[]}}]}}"), &["field 'ops'", "a scenario needs at least one op"]);
    let doubled = r#"{"format": "txnsim-scenario/v1", "scenarios": [{"name": "s", "name": "t", "layer": "producer", "ops": [{"op": "init_producer", "producer": "p"}]}]}"#;
    assert_input_error(doubled, &["duplicate key 'name'"]);
    let unknown = r#"{"format": "txnsim-scenario/v1", "scenarios": [{"name": "s", "layer": "network", "ops": [{"op": "init_producer", "producer": "p"}], "expect": {"intent_violations": ["nope"]}}]}"#;
    assert_input_error(unknown, &["field 'expect.intent_violations[0]'", "'nope' is not an invariant"]);
}

#[test]
fn a_negative_offset_names_the_field_and_the_value_apart() {
    let text = format!("{HEAD}[{{\"op\": \"init_producer\", \"producer\": \"p\"}}, {{\"op\": \"set_high_watermark\", \"partition\": 0, \"offset\": -5}}]}}]}}");
    assert_input_error(&text, &["op 1", "field 'offset'", "found integer -5, expected u64"]);
}

#[test]
fn a_string_partition_names_the_field() {
    let text = format!(
        "{HEAD}[{{\"op\": \"init_producer\", \"producer\": \"p\"}}, {{\"op\": \"begin\", \"producer\": \"p\"}}, \
         {{\"op\": \"produce\", \"producer\": \"p\", \"partition\": \"0\", \"values\": [\"v\"]}}]}}]}}"
    );
    assert_input_error(&text, &["op 2", "field 'partition'", "found string \"0\", expected u32"]);
}

#[test]
fn a_nested_bad_value_names_its_path() {
    let text = r#"{"format": "txnsim-scenario/v1", "scenarios": [{"name": "s", "layer": "consumer_fetch", "ops": [
        {"op": "deliver_fetch", "isolation": "read_committed", "partition": 0, "fetch_offset": 0, "high_watermark": 1,
         "last_stable_offset": 1, "batches": [{"base_offset": 0, "last_offset": 0, "transactional": false,
         "records": [[0, 7]]}], "aborted_transactions": [], "expect": {"values": [], "offsets": [], "end_position": 0}}]}]}"#;
    assert_input_error(text, &["op 0", "field 'batches[0].records[0][1]'", "found integer 7"]);
}

#[test]
fn an_unknown_codec_or_a_changed_one_is_an_input_error() {
    let text = format!("{HEAD}[{{\"op\": \"init_producer\", \"producer\": \"p\", \"compression\": \"brotli\"}}]}}]}}");
    assert_input_error(&text, &["op 0", "field 'compression'", "unknown variant brotli", "gzip"]);
    // `compression.type` is a producer's setting, fixed when the plain producer is made by its first op.
    let text = format!(
        "{HEAD}[{{\"op\": \"produce_nontxn\", \"partition\": 0, \"values\": [\"a\"], \"compression\": \"gzip\"}}, \
         {{\"op\": \"produce_nontxn\", \"partition\": 0, \"values\": [\"b\"], \"compression\": \"lz4\"}}]}}]}}"
    );
    assert_input_error(&text, &["op 1", "field 'compression'", "made with compression 'gzip'"]);
}

/// `txnsim scenario` on `args`, from a fresh temp folder holding one passing scenario file.
fn run_in_folder(name: &str, args: impl Fn(&Path) -> Vec<std::path::PathBuf>) -> (i32, String, String) {
    let temp = tempfile::Builder::new().prefix(&format!("txnsim-{name}-")).tempdir().expect("temp dir");
    let dir = temp.path();
    std::fs::create_dir_all(dir.join("sub")).expect("temp dir");
    let text = format!("{HEAD}[{{\"op\": \"init_producer\", \"producer\": \"p\"}}]}}]}}");
    std::fs::write(dir.join("sub/one.json"), text).expect("write scenario");
    let out = Command::new(env!("CARGO_BIN_EXE_txnsim")).arg("scenario").args(args(dir)).output().expect("run txnsim");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn a_file_named_twice_or_through_a_symlink_loop_runs_once() {
    let (code, stdout, stderr) = run_in_folder("dedupe", |dir| {
        // sub/again -> sub: a loop a naive walk would follow until the path is too long.
        std::os::unix::fs::symlink(dir.join("sub"), dir.join("sub/again")).expect("symlink");
        vec![dir.to_path_buf(), dir.join("sub/one.json"), dir.join("sub/again/one.json"), dir.to_path_buf()]
    });
    assert_eq!(code, 0, "stdout: {stdout} stderr: {stderr}");
    assert_eq!(stdout.matches("PASS s").count(), 1, "the one file runs once: {stdout}");
    assert!(stdout.contains("scenarios: 1 passed, 0 failed"), "{stdout}");
}

#[test]
fn a_dangling_path_is_an_input_error() {
    let (code, _, stderr) = run_in_folder("dangling", |dir| vec![dir.join("sub/one.json"), dir.join("missing.json")]);
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line of error: {stderr}");
    assert!(stderr.contains("missing.json: cannot read"), "{stderr}");
}

#[test]
fn run_with_a_bad_scenarios_path_stops_before_the_model_check() {
    let out = Command::new(env!("CARGO_BIN_EXE_txnsim"))
        .args(["run", "--scenarios", "/nonexistent/txnsim-scenarios"])
        .output()
        .expect("run txnsim");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "bad input exits 2: {stderr}");
    assert!(stdout.is_empty(), "nothing runs, not even the scenario header: {stdout}");
    assert!(stderr.contains("/nonexistent/txnsim-scenarios: cannot read"), "{stderr}");
}

#[test]
fn a_cluster_the_engine_cannot_host_is_an_input_error() {
    let head = |extra: &str, layer: &str| {
        format!(r#"{{"format": "txnsim-scenario/v1", "scenarios": [{{"name": "s", "layer": "{layer}", {extra} "ops": "#)
    };
    assert_input_error(
        &format!("{}[]}}]}}", head(r#""brokers": 6,"#, "producer")),
        &["field 'brokers'", "1..=5, got 6"],
    );
    assert_input_error(
        &format!("{}[]}}]}}", head(r#""brokers": 3, "replication_factor": 0,"#, "producer")),
        &["field 'replication_factor'", "at least 1"],
    );
    assert_input_error(&format!("{}[]}}]}}", head(r#""brokers": 2,"#, "log")), &["field 'brokers'", "log layer"]);
    assert_input_error(
        &format!(
            "{}[{{\"op\": \"restart_broker\"}}]}}]}}",
            head(r#""brokers": 3, "replication_factor": 3,"#, "network")
        ),
        &["op 0", "restart_broker needs one broker"],
    );
}

#[test]
fn a_topic_too_large_to_build_is_an_input_error() {
    // Once accepted: 2^32 - 1 partitions, each built up front, ran out of time and memory.
    for layer in ["producer", "log", "network"] {
        let text = format!(
            r#"{{"format": "txnsim-scenario/v1", "scenarios": [{{"name": "s", "layer": "{layer}", "topics": {{"t": 4294967295}}, "ops": []}}]}}"#
        );
        assert_input_error(&text, &["field 'topics.t'", "4294967295 partitions", "1..=1024"]);
    }
}

#[test]
fn a_fetched_batch_whose_next_offset_is_no_int64_is_an_input_error() {
    // Once a panic: the filter computes the batch's next offset, last_offset + 1.
    let text = format!(
        r#"{{"format": "txnsim-scenario/v1", "scenarios": [{{"name": "s", "layer": "consumer_fetch", "ops": [{{"op": "deliver_fetch", "isolation": "read_committed", "partition": 0, "fetch_offset": 0, "high_watermark": 1, "last_stable_offset": 1, "batches": [{{"base_offset": 0, "last_offset": {}, "transactional": false, "records": [[0, "a"]]}}], "aborted_transactions": [], "expect": {{"values": ["a"], "offsets": [0], "end_position": 1}}}}]}}]}}"#,
        u64::MAX
    );
    assert_input_error(
        &text,
        &["op 0", "field 'batches[0].last_offset'", "18446744073709551615 is not below 9223372036854775807"],
    );
}

#[test]
fn a_wait_longer_than_kafkas_longest_timeout_is_an_input_error() {
    let text = r#"{"format": "txnsim-scenario/v1", "scenarios": [{"name": "s", "layer": "network", "ops": [{"op": "advance_time", "ms": 4294967296}]}]}"#;
    assert_input_error(text, &["op 0", "field 'ms'", "4294967296 is above 2147483647"]);
}

#[test]
fn a_bad_offset_in_the_final_expectation_names_its_path_under_expect() {
    // Found by `scenario_fuzz`: the scenario's own `expect` named the field as an `expect` op would.
    let text = r#"{"format": "txnsim-scenario/v1", "scenarios": [{"name": "s", "layer": "network", "ops": [
        {"op": "init_producer", "producer": "p"}],
        "expect": {"group_offsets": [{"group": "g", "offsets": {"t/0": 1e300}}]}}]}"#;
    assert_input_error(text, &["field 'expect.group_offsets[0].offsets.t/0'", "neither an offset"]);
}

#[test]
fn a_loaded_transaction_with_an_open_state_is_an_input_error() {
    // `transactional_ids` loads only states with no transaction open: an Ongoing record would need its
    // partitions and data, which the field does not carry.
    let text = r#"{"format": "txnsim-scenario/v1", "scenarios": [{"name": "s", "layer": "network",
        "transactional_ids": [{"transactional_id": "p", "producer_id": 1000, "epoch": 5, "state": "Ongoing"}],
        "ops": [{"op": "init_producer", "producer": "p"}]}]}"#;
    assert_input_error(text, &["scenario 's'", "field 'transactional_ids[0].state'", "found 'Ongoing'"]);
}

#[test]
fn loaded_transactions_belong_to_the_network_layer() {
    let text = format!(
        "{}\"transactional_ids\": [], \"ops\": [{{\"op\": \"init_producer\", \"producer\": \"p\"}}]}}]}}",
        HEAD.trim_end_matches("\"ops\": ")
    );
    assert_input_error(&text, &["scenario 's'", "field 'transactional_ids'", "only the network layer"]);
}

#[test]
fn an_absent_transactional_id_has_no_fields_to_expect() {
    let text = r#"{"format": "txnsim-scenario/v1", "scenarios": [{"name": "s", "layer": "network",
        "ops": [{"op": "expect", "coordinator": [{"transactional_id": "p", "state": null, "epoch": 0}]}]}]}"#;
    assert_input_error(text, &["scenario 's'", "op 0", "field 'coordinator[0]'", "state null"]);
}

/// `shows_violations`: a shown invariant that never breaks fails the scenario (exit 1), a name outside
/// the catalogue is bad input (exit 2), and outside the network layer the field is refused.
#[test]
fn a_shown_violation_must_break() {
    let net = |shows: &str| {
        format!(
            r#"{{"format": "txnsim-scenario/v1", "scenarios": [{{"name": "s", "layer": "network", "shows_violations": [{shows}], "ops": [{{"op": "init_producer", "producer": "p"}}, {{"op": "run"}}]}}]}}"#
        )
    };
    let (code, stdout, _) = run_cli(&net("\"partition-coverage\""));
    assert_eq!(code, 1, "a violation shown but never broken fails: {stdout}");
    assert!(
        stdout.contains("shows_violations: expected partition-coverage breaks, actual it held after every op"),
        "{stdout}"
    );
    assert_input_error(&net("\"no-such-invariant\""), &["field 'shows_violations[0]'", "not an invariant"]);
    let producer = format!(
        r#"{HEAD}[{{"op": "init_producer", "producer": "p"}}], "shows_violations": ["partition-coverage"]}}]}}"#
    );
    assert_input_error(&producer, &["field 'shows_violations'", "only the network layer"]);
}
