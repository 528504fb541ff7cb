//! The engine held against real Apache Kafka 4.3.1 (the harness `txnsim_kafka::apache_kafka`): the seed
//! document's cluster (3 nodes, replication factor 3, `min.insync.replicas` 2) starts once for this test
//! binary; tests run on it side by side, each on topics and transactional ids of its own, and the tests
//! that kill or pause a node run on a cluster of their own. Whatever a client prints and
//! whatever each replica's log holds on real Kafka must be what `txnsim serve` gives for the same program.

mod clients;
mod common;

use clients::{java, java_source, kafka_distribution, python, run, spawn, SEED_LINES};
use common::{txnsim, wait_bounded, Server};
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, ApiKey, ApiVersionsRequest, EndTxnRequest, FindCoordinatorRequest,
    InitProducerIdRequest, MetadataRequest, ProduceRequest, ProducerId, TopicName, TransactionalId,
    TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::StrBytes;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};
use txnsim::scenario::{self, RunOptions};
use txnsim_engine::record::{BatchBody, BatchProducer, CompressionType, Record, RecordBatch};
use txnsim_engine::TopicPartition;
use txnsim_kafka::apache_kafka::{ClusterSpec, KafkaCluster};
use txnsim_kafka::remote::wire::{create_topics, fetch_log, Conn, FetchView, Isolation};

/// A line for the gate's own output, shown for a passing test too: libtest captures `println!`, not a
/// direct write to the process's stderr.
macro_rules! report {
    ($($arg:tt)*) => {
        writeln!(std::io::stderr(), $($arg)*).ok()
    };
}

static SEED_CLUSTER: RwLock<Option<KafkaCluster>> = RwLock::new(None);

/// The seed document's cluster, started on first use and shared by every test (none stops its nodes:
/// the fault scripts and the pause run on a cluster of their own); most of the time a test waits on the
/// network, so side by side the binary takes less time. A test that failed while holding it leaves it
/// running (the poison is cleared): each test's topics are its own.
fn seed_cluster() -> RwLockReadGuard<'static, Option<KafkaCluster>> {
    loop {
        let guard = SEED_CLUSTER.read().unwrap_or_else(|e| e.into_inner());
        if guard.is_some() {
            return guard;
        }
        drop(guard);
        let mut guard = SEED_CLUSTER.write().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("apache-kafka-seed-cluster");
            let started = Instant::now();
            let cluster = KafkaCluster::start(kafka_distribution(), &dir, &ClusterSpec::seed())
                .unwrap_or_else(|e| panic!("the seed's Kafka 4.3.1 cluster did not start: {e}"));
            report!("Kafka 4.3.1's seed cluster resolved and ready in {:.1} s", started.elapsed().as_secs_f64());
            *guard = Some(cluster);
        }
    }
}

/// `txnsim serve` as the seed document's cluster.
const SERVE_SEED_CLUSTER: [&str; 10] = [
    "--brokers",
    "3",
    "--default-replication-factor",
    "3",
    "--min-insync-replicas",
    "2",
    "--group-initial-rebalance-delay-ms",
    "0",
    "--transaction-abort-timed-out-transaction-cleanup-interval-ms",
    "1000",
];

/// One replica's log as a consumer reads it at both levels: each batch (offsets, producer as `P<n>` in
/// order of first appearance, epoch, first sequence, transactional flag, records or marker), then the
/// fetch's HW, LSO and log start, and the aborted list at read_committed.
fn describe(uncommitted: &FetchView, committed: &FetchView) -> Vec<String> {
    let mut pids: Vec<i64> = Vec::new();
    let mut name = |pid: i64| {
        let n = pids.iter().position(|p| *p == pid).unwrap_or_else(|| {
            pids.push(pid);
            pids.len() - 1
        });
        format!("P{n}")
    };
    let mut lines = Vec::new();
    for b in &uncommitted.batches {
        let producer = b.producer.map_or("no producer".to_string(), |p| {
            format!("{} e{} seq {}", name(p.producer_id), p.epoch, p.base_sequence)
        });
        let body = match &b.body {
            BatchBody::Data(records) => {
                records.iter().map(|r| format!("{}:{}", r.offset, r.value)).collect::<Vec<_>>().join(" ")
            }
            BatchBody::Control(Some(m)) => format!("{:?} marker", m.result),
            BatchBody::Control(None) => "empty control batch".to_string(),
        };
        let txn = if b.is_transactional { "transactional" } else { "plain" };
        // A batch's codec where it has one (the batch attributes' CompressionType).
        let codec = if b.compression.is_none() { String::new() } else { format!(" {}", b.compression.name()) };
        lines.push(format!("{}..{} {producer} {txn}{codec} {body}", b.base_offset, b.last_offset));
    }
    for (level, v) in [("read_uncommitted", uncommitted), ("read_committed", committed)] {
        lines.push(format!(
            "{level}: HW {} LSO {} log start {}",
            v.high_watermark, v.last_stable_offset, v.log_start_offset
        ));
    }
    let aborted: Vec<String> =
        committed.aborted.iter().map(|(pid, first)| format!("{} from {first}", name(*pid))).collect();
    lines.push(format!("aborted transactions: [{}]", aborted.join(", ")));
    lines
}

/// Each broker's view of `topic/0` (every broker holds a replica at replication factor 3), read once its
/// HW has reached `end`: followers learn the HW on their next fetch from the leader.
fn replica_logs(addresses: &[String], topic: &str, end: u64) -> Vec<Vec<String>> {
    let tp = TopicPartition::new(topic, 0);
    addresses
        .iter()
        .map(|address| {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let mut conn = Conn::connect(address).unwrap_or_else(|e| panic!("connect to {address}: {e}"));
                let ru = fetch_log(&mut conn, &tp, Isolation::ReadUncommitted);
                let rc = fetch_log(&mut conn, &tp, Isolation::ReadCommitted);
                match (ru, rc) {
                    (Ok(ru), Ok(rc)) if ru.high_watermark == end && rc.last_stable_offset == end => {
                        return describe(&ru, &rc)
                    }
                    (ru, rc) if Instant::now() > deadline => {
                        panic!("{address}'s replica of {tp} did not reach HW and LSO {end} in 10 s: {ru:?} {rc:?}")
                    }
                    _ => std::thread::sleep(Duration::from_millis(100)),
                }
            }
        })
        .collect()
}

/// What the seed experiment leaves on every replica, in the engine's words: the first transaction at
/// 0..2 and its COMMIT marker at 3, the second at 4..6 and its ABORT marker at 7, HW and LSO 8, and at
/// read_committed one aborted transaction from 4.
fn assert_seed_log(system: &str, replica: usize, log: &[String]) {
    let at = |offset: u64| log.iter().find(|l| l.starts_with(&format!("{offset}..{offset} "))).cloned();
    let context = format!("{system} replica {replica}: {log:#?}");
    assert!(at(3).is_some_and(|l| l.ends_with(" Commit marker")), "no COMMIT marker at 3 on {context}");
    assert!(at(7).is_some_and(|l| l.ends_with(" Abort marker")), "no ABORT marker at 7 on {context}");
    assert!(log.contains(&"aborted transactions: [P0 from 4]".to_string()), "one aborted transaction: {context}");
    assert!(log.contains(&"read_committed: HW 8 LSO 8 log start 0".to_string()), "HW and LSO 8: {context}");
}

/// Runs the seed experiment through `client` on real Kafka 4.3.1 and on `txnsim serve`, on topic
/// `topic`: both print the article's lines, every replica of both holds the same log, marker for marker,
/// with the COMMIT at 3, the ABORT at 7 and the aborted transaction listed, and the in-process scenario
/// of the article's cluster ends with the same cells.
fn seed_experiment_on_both(topic: &str, client: fn(&str, &[&str]) -> std::process::Command, what: &str) {
    // Both systems at once: the client waits on the network far more than on the CPU.
    let (serve_topic, serve_what) = (topic.to_string(), what.to_string());
    let serve = std::thread::spawn(move || {
        let server = Server::start(&format!("{serve_topic}-serve"), &SERVE_SEED_CLUSTER);
        let out = run(client(&server.addresses[0], &["3", &serve_topic]), &serve_what);
        let logs = replica_logs(&server.addresses, &serve_topic, 8);
        server.stop_clean();
        (out, logs)
    });
    let guard = seed_cluster();
    let cluster = guard.as_ref().expect("started");
    let out = run(client(&cluster.bootstrap(), &["3", topic]), what);
    assert_eq!(out, SEED_LINES, "{what} against real Kafka 4.3.1 must print the seed document's lines");
    let real = replica_logs(&cluster.addresses(), topic, 8);
    drop(guard);
    let (out, serve) = serve.join().expect("the serve run");
    assert_eq!(out, SEED_LINES, "{what} against txnsim serve --brokers 3 must print the seed document's lines");

    for (replica, log) in real.iter().enumerate() {
        assert_seed_log("real Kafka", replica, log);
        assert_eq!(log, &real[0], "real Kafka's replicas differ");
    }
    for (replica, log) in serve.iter().enumerate() {
        assert_eq!(log, &real[0], "serve's replica {replica} differs from real Kafka's log (left: serve)");
    }
    assert_eq!(scenario_cells(), cells(&real[0]), "the in-process scenario ends with real Kafka's cells");
}

/// `offset kind value` for each record and marker of a described log.
fn cells(log: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for line in log.iter().filter(|l| l.contains("..")) {
        let (range, rest) = line.split_once(' ').expect("a batch line");
        if let Some(kind) = rest.strip_suffix(" marker") {
            let base = range.split("..").next().expect("a range");
            out.push(format!("{base} {}", kind.rsplit(' ').next().expect("a marker name").to_uppercase()));
        } else {
            let records = rest.split(" transactional ").nth(1).unwrap_or_default();
            out.extend(records.split(' ').map(|r| r.replacen(':', " data ", 1)));
        }
    }
    out
}

/// The final cells of the corpus scenario of the article's cluster (3 brokers, replication factor 3).
fn scenario_cells() -> Vec<String> {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/scenarios/seed_experiment_replicated.json");
    let sc = scenario::load(&file)
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .find(|s| s.name == "open-then-commit-then-abort-on-three-brokers")
        .expect("the article's cluster is in the corpus");
    let report = scenario::run(&sc, &RunOptions { show: true, ..RunOptions::default() });
    assert_eq!(report.difference, None, "the scenario passes");
    let last = report.steps.last().expect("the scenario has steps");
    last.partitions[0]
        .cells
        .iter()
        .map(|c| match c.kind {
            txnsim::html::CellKind::Data => format!("{} data {}", c.offset, c.value.clone().unwrap_or_default()),
            kind => format!("{} {}", c.offset, format!("{kind:?}").to_uppercase()),
        })
        .collect()
}

/// The seed document's experiment in librdkafka (confluent-kafka 2.16.1, transaction version 1).
#[test]
fn confluent_kafka_prints_the_seed_documents_lines_on_real_kafka_and_on_serve() {
    seed_experiment_on_both("seed-librdkafka", |b, a| python("seed_experiment.py", b, a), "seed_experiment.py");
}

/// The same in Kafka's own Java client 4.3.1, which speaks transaction version 2 (an epoch bump at each
/// transaction's end: the second transaction's batches and each marker carry a higher epoch).
#[test]
fn kafkas_java_client_prints_the_seed_documents_lines_on_real_kafka_and_on_serve() {
    seed_experiment_on_both("seed-java", |b, a| java("seed", b, a), "JavaClients.java seed");
}

/// A finalized feature: name, min and max level.
type Feature = (String, i16, i16);

/// ApiVersions v3 at `address` with no client name: its error code and how many APIs it lists (Kafka:
/// INVALID_REQUEST and none, `ApiVersionsRequest.isValid`).
fn api_versions_unnamed(address: &str) -> (i16, usize) {
    let mut conn = Conn::connect(address).unwrap_or_else(|e| panic!("connect to {address}: {e}"));
    let r = conn.call(3, &ApiVersionsRequest::default()).unwrap_or_else(|e| panic!("ApiVersions at {address}: {e}"));
    (r.error_code, r.api_keys.len())
}

/// ApiVersions v3 at `address`: each API's served range by key, and the finalized `transaction.version`.
fn api_versions(address: &str) -> (BTreeMap<i16, (i16, i16)>, Vec<Feature>) {
    let mut conn = Conn::connect(address).unwrap_or_else(|e| panic!("connect to {address}: {e}"));
    // v3 names the client; Kafka refuses an empty name with INVALID_REQUEST (`ApiVersionsRequest.isValid`).
    let mut request = ApiVersionsRequest::default();
    request.client_software_name = StrBytes::from_static_str("txnsim");
    request.client_software_version = StrBytes::from_static_str("0.1.0");
    let r = conn.call(3, &request).unwrap_or_else(|e| panic!("ApiVersions at {address}: {e}"));
    assert_eq!(r.error_code, 0, "ApiVersions at {address}");
    let ranges = r.api_keys.iter().map(|k| (k.api_key, (k.min_version, k.max_version))).collect();
    let features =
        r.finalized_features.iter().map(|f| (f.name.to_string(), f.min_version_level, f.max_version_level)).collect();
    (ranges, features)
}

/// What serve advertises is what real Kafka 4.3.1 serves: the same finalized `transaction.version`
/// (a client picks its protocol by it; real Kafka also finalizes `eligible.leader.replicas.version` 1,
/// the engine's default), every API range of serve inside Kafka's, and the versions that
/// carry transaction version 2 (Produce v12, EndTxn v5, TxnOffsetCommit v5: KIP-890 part 2) served by both.
#[test]
fn serve_advertises_the_transaction_version_and_api_versions_of_real_kafka() {
    let ((real, real_features), real_unnamed) = {
        let guard = seed_cluster();
        let address = &guard.as_ref().expect("started").addresses()[0];
        (api_versions(address), api_versions_unnamed(address))
    };
    let server = Server::start("api-versions", &SERVE_SEED_CLUSTER);
    let (serve, serve_features) = api_versions(&server.addresses[0]);
    let serve_unnamed = api_versions_unnamed(&server.addresses[0]);
    server.stop_clean();

    assert_eq!(serve_unnamed, real_unnamed, "ApiVersions v3 without a client name (left: serve)");
    assert_eq!(real_unnamed, (42, 0), "Kafka answers INVALID_REQUEST and lists no API");

    let tv = |f: &[Feature]| f.iter().find(|(n, _, _)| n == "transaction.version").cloned();
    assert_eq!(tv(&serve_features), tv(&real_features), "finalized transaction.version (left: serve)");
    assert_eq!(tv(&real_features).map(|f| f.2), Some(2), "a new 4.3.1 cluster finalizes transaction version 2");
    // The engine's controller keeps KIP-966's eligible leader replicas by default because real Kafka does.
    let elr = real_features.iter().find(|(n, _, _)| n == "eligible.leader.replicas.version").map(|f| f.2);
    assert_eq!(elr, Some(1), "a new 4.3.1 cluster finalizes eligible.leader.replicas.version 1: {real_features:?}");
    for (key, (min, max)) in &serve {
        let (kmin, kmax) = real.get(key).unwrap_or_else(|| panic!("real Kafka does not serve api {key}"));
        assert!(kmin <= min && max <= kmax, "api {key}: serve's v{min}-v{max} is not inside Kafka's v{kmin}-v{kmax}");
    }
    for (key, version) in [(ApiKey::Produce, 12), (ApiKey::EndTxn, 5), (ApiKey::TxnOffsetCommit, 5)] {
        for (system, ranges) in [("real Kafka", &real), ("serve", &serve)] {
            let (_, max) = ranges.get(&(key as i16)).copied().unwrap_or((-1, -1));
            assert!(
                max >= version,
                "{system} must serve {key:?} v{version} (transaction version 2); it serves to v{max}"
            );
        }
    }
}

/// `sweep --target` against the real cluster: two seeds of every profile through librdkafka, each with
/// its own topics and transactional ids. Every seed must pass, and the report must say which invariants
/// ran and why the rest could not.
#[test]
fn two_seeds_of_every_profile_pass_on_real_kafka() {
    let guard = seed_cluster();
    let url = format!("kafka://{}", guard.as_ref().expect("started").addresses().join(","));
    let mut ran = Vec::new();
    for profile in
        ["standard", "contention", "long-txns", "timeouts", "atomicity", "late-sends", "single-broker", "eos"]
    {
        let args = ["sweep", "--target", &url, "--seeds", "2", "--jobs", "2", "--profile", profile];
        let (code, out, err) = txnsim(&args, Duration::from_secs(120));
        assert_eq!(code, 0, "profile {profile} on real Kafka 4.3.1 must pass:\n{out}\n{err}");
        assert_eq!(out.lines().last(), Some("PASS: 2 seeds, no violation"), "profile {profile}:\n{out}");
        assert!(out.lines().any(|l| l.starts_with("checked: aborted-read, ")), "which invariants ran:\n{out}");
        assert!(out.lines().any(|l| l.starts_with("not checked (")), "which did not, and why:\n{out}");
        ran.push(format!("{profile}: {}", out.lines().rev().nth(1).unwrap_or_default()));
    }
    report!("sweep --target on real Kafka 4.3.1:\n{}", ran.join("\n"));
}

/// The nemesis kinds of `sweep --target apache-kafka:N --nemesis` (kafka/src/remote/nemesis.rs).
const NEMESIS_KINDS: [&str; 3] = ["kill-node", "pause-node", "cut-link"];

/// `sweep --target apache-kafka:3 --nemesis kill-node,pause-node,cut-link`: the sweep starts its own
/// Kafka 4.3.1 nodes in network namespaces and, in each of two seeds, kills and restarts a node, pauses
/// one past the session timeout and cuts a link past `replica.lag.time.max.ms`, each once, while the
/// standard workload runs. Both seeds must pass, and the report, its JSON and the saved history must each
/// show every fault once per seed, healed, with the same nodes and times.
#[test]
fn every_nemesis_kind_runs_and_two_seeds_pass_on_real_kafka() {
    kafka_distribution();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let (json, history) = (dir.join("nemesis.report.json"), dir.join("nemesis.history.json"));
    let kinds = NEMESIS_KINDS.join(",");
    let args = [
        "sweep",
        "--target",
        "apache-kafka:3",
        "--nemesis",
        &kinds,
        "--seeds",
        "2",
        "--json",
        json.to_str().expect("utf-8"),
        "--history",
        history.to_str().expect("utf-8"),
    ];
    let started = Instant::now();
    let (code, out, err) = txnsim(&args, Duration::from_secs(300));
    assert_eq!(code, 0, "two seeds under every node fault must pass on real Kafka 4.3.1:\n{out}\n{err}");
    assert_eq!(out.lines().last(), Some("PASS: 2 seeds, no violation"), "{out}");
    let report = common::assert_valid("target-sweep.schema.json", &json);
    let saved = common::assert_valid("target-history.schema.json", &history);
    for (i, seed) in report["seeds"].as_array().expect("seeds").iter().enumerate() {
        let faults = seed["nemesis"].as_array().expect("nemesis");
        let mut ran: Vec<&str> = faults.iter().map(|f| f["kind"].as_str().expect("a kind")).collect();
        ran.sort_unstable();
        assert_eq!(ran, ["cut-link", "kill-node", "pause-node"], "seed {i} runs each kind once:\n{out}");
        for f in faults {
            let (start, healed) = (f["start_ms"].as_u64().expect("ms"), f["healed_ms"].as_u64().expect("ms"));
            // Each is held past its timeout (at least 500 ms for a kill) before it heals.
            assert!(healed >= start + 500, "seed {i}: {f} heals after it is held:\n{out}");
        }
        assert_eq!(&saved["seeds"][i]["nemesis"], &seed["nemesis"], "seed {i}: the history saves the same faults");
        let line = out.lines().find(|l| l.starts_with(&format!("seed {}: ", seed["seed"]))).expect("a seed line");
        assert_eq!(line.matches(" at ").count(), 3, "the seed's line names its three faults: {line}");
    }
    for kind in NEMESIS_KINDS {
        assert_eq!(report["faults_by_kind"][kind], 2, "{kind}: once in each of the two seeds:\n{out}");
        assert!(out.lines().any(|l| l == format!("    {kind}: 2")), "the report counts {kind}:\n{out}");
    }
    report!(
        "sweep --target apache-kafka:3 --nemesis {kinds}: 2 seeds in {:.1} s, {}",
        started.elapsed().as_secs_f64(),
        out.lines().last().unwrap_or_default()
    );
}

/// Deeper, behind `--ignored`: every profile under `--nemesis auto` (the profile's fault mix mapped onto
/// the node faults) on the sweep's own 3-node cluster, `TXNSIM_NEMESIS_SEEDS` seeds each (default 50, about
/// 20 s a seed, so some two hours in all; BENCHMARKS.md has the figures). Every profile must pass; a
/// failing one's history is saved where its report says, for `check-history`.
#[test]
#[ignore]
fn every_profile_passes_under_the_nemesis_on_real_kafka() {
    kafka_distribution();
    let seeds = std::env::var("TXNSIM_NEMESIS_SEEDS").unwrap_or_else(|_| "50".to_string());
    let n: u64 = seeds.parse().unwrap_or_else(|_| panic!("TXNSIM_NEMESIS_SEEDS={seeds:?} is not a number"));
    let mut failed = Vec::new();
    for profile in
        ["standard", "contention", "long-txns", "timeouts", "atomicity", "late-sends", "single-broker", "eos"]
    {
        let args =
            ["sweep", "--target", "apache-kafka:3", "--nemesis", "auto", "--profile", profile, "--seeds", &seeds];
        let started = Instant::now();
        // A seed's faults heal within 90 s (`NEMESIS_LIMIT`) and its read-back settles within 30 s.
        let (code, out, err) = txnsim(&args, Duration::from_secs(120 * n + 120));
        let secs = started.elapsed().as_secs_f64();
        let faults: Vec<&str> = out
            .lines()
            .skip_while(|l| *l != "  faults by kind:")
            .skip(1)
            .take_while(|l| l.starts_with("    "))
            .map(str::trim)
            .collect();
        report!(
            "{profile}: {seeds} seeds in {secs:.0} s ({:.1} s a seed), exit {code}, faults {}: {}",
            secs / n as f64,
            faults.join(", "),
            out.lines().last().unwrap_or_default()
        );
        if code != 0 {
            failed.push(format!("{profile} (exit {code}):\n{out}\n{err}"));
        }
    }
    assert!(failed.is_empty(), "profiles that failed under the nemesis:\n{}", failed.join("\n\n"));
}

/// A cut link needs network namespaces, made with iproute2's `ip`: without it on PATH the sweep stops
/// before any node starts, with one line that says so (exit 2), never a sweep without the fault.
#[test]
fn a_cut_link_without_ip_is_one_line_and_exit_2() {
    kafka_distribution();
    // A PATH with java alone, which the harness needs before it makes the namespaces.
    let bin = Path::new(env!("CARGO_TARGET_TMPDIR")).join("java-only-path");
    std::fs::create_dir_all(&bin).expect("a folder");
    let java = which("java");
    std::fs::remove_file(bin.join("java")).ok();
    std::os::unix::fs::symlink(&java, bin.join("java")).expect("link java");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_txnsim"))
        .args(["sweep", "--target", "apache-kafka:3", "--nemesis", "cut-link", "--seeds", "1"])
        .env("PATH", &bin)
        .output()
        .expect("run txnsim");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines.len() == 1 && lines[0].starts_with("error: ") && lines[0].contains("network namespaces need"),
        "one line naming why:\n{err}"
    );
}

/// The file `name` resolves to on this process's PATH.
fn which(name: &str) -> std::path::PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} is not on PATH"))
}

/// The differential's scripts, played by scripts/Differential.java.
const DIFFERENTIAL_SCRIPTS: &str = "tests/differential/scripts.txt";

/// The differential's client on one system, `workers` scripts at once: each script's printed lines, by
/// script name. `fault` does what a `FAULT ...` line asks (a fault step) and says what to answer.
fn play_scripts(
    (bootstrap, prefix, what): (&str, &str, &str),
    (file, workers): (&str, usize),
    fault: &mut dyn FnMut(&str) -> String,
) -> BTreeMap<String, Vec<String>> {
    let mut command = java_source("Differential.java");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    command.arg(bootstrap).arg(prefix).arg(path).arg(workers.to_string());
    let mut child = spawn(command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()), what);
    let (tx, lines) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().expect("piped");
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok) {
            tx.send(line).ok();
        }
    });
    let mut stderr = child.stderr.take().expect("piped");
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut s).ok();
        s
    });
    let mut stdin = child.stdin.take().expect("piped");
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut out = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => match line.strip_prefix("FAULT ") {
                Some(asked) => writeln!(stdin, "{}", fault(asked)).expect("answer the client"),
                None => out.push(line),
            },
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                child.kill().ok();
                panic!("{what} did not finish in 300 s:\n{}", out.join("\n"));
            }
        }
    }
    drop(stdin);
    let status = wait_bounded(&mut child, Duration::from_secs(30), what);
    let err = err.join().expect("stderr");
    assert!(status.success(), "{what} exited {status} (a step failed or the client broke)\n{}\n{err}", out.join("\n"));
    let mut scripts = BTreeMap::new();
    let mut name = None;
    for line in out {
        match line.strip_prefix("== ") {
            Some(n) => name = Some(n.to_string()),
            None => scripts.entry(name.clone().expect("a script's name first")).or_insert_with(Vec::new).push(line),
        }
    }
    scripts
}

/// The leader of `topic`/`partition` as the broker at `address` names it.
fn leader_of(address: &str, topic: &str, partition: i32) -> i32 {
    let mut conn = Conn::connect(address).unwrap_or_else(|e| panic!("connect to {address}: {e}"));
    let mut t = MetadataRequestTopic::default();
    t.name = Some(TopicName(StrBytes::from_string(topic.to_string())));
    let mut request = MetadataRequest::default();
    request.topics = Some(vec![t]);
    let r = conn.call(9, &request).unwrap_or_else(|e| panic!("Metadata at {address}: {e}"));
    let p = r.topics.iter().flat_map(|t| &t.partitions).find(|p| p.partition_index == partition);
    p.map(|p| p.leader_id.0).unwrap_or_else(|| panic!("{topic}/{partition} has no metadata at {address}"))
}

/// The partitions a script's `topic T N` steps create.
fn script_partitions(file: &str) -> Vec<(String, Vec<(String, u32)>)> {
    let mut out: Vec<(String, Vec<(String, u32)>)> = Vec::new();
    for line in file.lines() {
        if let Some(name) = line.strip_prefix("## ") {
            out.push((name.trim().to_string(), Vec::new()));
        } else if let Some(["topic", t, n]) = line.split_whitespace().collect::<Vec<_>>().get(..3) {
            let n: u32 = n.parse().expect("a partition count");
            out.last_mut().expect("a script").1.extend((0..n).map(|p| (t.to_string(), p)));
        }
    }
    out
}

/// Every replica of `tp` described as `describe` does, once they agree on the HW and the LSO has reached
/// it (followers learn the HW on their next fetch; markers follow EndTxn's answer).
fn stable_replica_logs(addresses: &[String], tp: &TopicPartition) -> Vec<Vec<String>> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let views: Vec<Result<(FetchView, FetchView), String>> = addresses
            .iter()
            .map(|address| {
                let mut conn = Conn::connect(address)?;
                Ok((
                    fetch_log(&mut conn, tp, Isolation::ReadUncommitted)?,
                    fetch_log(&mut conn, tp, Isolation::ReadCommitted)?,
                ))
            })
            .collect();
        let stable = views.iter().all(|v| {
            v.as_ref().is_ok_and(|(ru, rc)| {
                rc.last_stable_offset == ru.high_watermark
                    && views
                        .iter()
                        .all(|w| w.as_ref().is_ok_and(|(other, _)| other.high_watermark == ru.high_watermark))
            })
        });
        if stable {
            return views.into_iter().map(|v| v.map(|(ru, rc)| describe(&ru, &rc)).expect("checked")).collect();
        }
        assert!(Instant::now() < deadline, "{tp}'s replicas did not settle in 20 s: {views:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One script, one system: what the client printed and each partition's log on every replica.
type Observed = (Vec<String>, Vec<(String, Vec<Vec<String>>)>);

fn observe(
    mut played: BTreeMap<String, Vec<String>>,
    partitions: &[(String, Vec<(String, u32)>)],
    addresses: &[String],
    prefix: &str,
) -> Vec<(String, Observed)> {
    partitions
        .iter()
        .map(|(name, tps)| {
            let lines = played.remove(name).unwrap_or_else(|| panic!("script {name} printed nothing"));
            let logs = tps
                .iter()
                .map(|(t, p)| {
                    let tp = TopicPartition::new(&format!("{prefix}-{name}-{t}"), *p);
                    (format!("{t}/{p}"), stable_replica_logs(addresses, &tp))
                })
                .collect();
            (name.clone(), (lines, logs))
        })
        .collect()
}

/// Plays `file` on real Kafka and on `txnsim serve` (both as the seed's cluster), both at once, and
/// returns every difference between them; on each system every replica must hold the same log. A fault
/// step kills the partition's leader (kill -9 on real Kafka, `crash` on serve) or restarts it.
fn differential(file: &str, workers: usize, own: Option<&mut KafkaCluster>) -> (usize, Vec<String>) {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file))
        .unwrap_or_else(|e| panic!("the scripts {file}: {e}"));
    let partitions = script_partitions(&text);
    let run = run_prefix("d");
    let serve_run = run.clone();
    let file_name = file.to_string();
    let serve = std::thread::spawn(move || {
        let mut server = Server::start(&format!("differential-{}", serve_run), &SERVE_SEED_CLUSTER);
        let (bootstrap, addresses) = (server.addresses.join(","), server.addresses.clone());
        let mut crashed = None;
        let mut fault = |asked: &str| -> String {
            let words: Vec<&str> = asked.split(' ').collect();
            match words[..] {
                ["kill-leader", topic, partition] => {
                    let leader = leader_of(&addresses[0], topic, partition.parse().expect("a partition"));
                    let answer = server.command(&format!("crash {leader}"));
                    assert_eq!(answer, format!("txnsim serve: broker {leader} crashed"));
                    crashed = Some(leader);
                    "ok".to_string()
                }
                ["restart-killed"] => {
                    let id = crashed.take().expect("a crashed broker");
                    let answer = server.command(&format!("restart {id}"));
                    assert_eq!(answer, format!("txnsim serve: broker {id} restarted"));
                    "ok".to_string()
                }
                _ => panic!("unknown fault {asked}"),
            }
        };
        let played =
            play_scripts((&bootstrap, &serve_run, "Differential.java on serve"), (&file_name, workers), &mut fault);
        (played, server)
    });
    // Scripts with fault steps kill nodes, so they run on a cluster of their own; the others share the
    // seed cluster.
    let shared = own.is_none().then(seed_cluster);
    let mut own = own;
    let real_addresses = match (&own, &shared) {
        (Some(cluster), _) => cluster.addresses(),
        (None, shared) => shared.as_ref().and_then(|guard| guard.as_ref()).expect("started").addresses(),
    };
    let mut killed: Option<usize> = None;
    let mut fault = |asked: &str| -> String {
        let cluster = own.as_deref_mut().expect("a script with fault steps runs on a cluster of its own");
        let words: Vec<&str> = asked.split(' ').collect();
        match words[..] {
            ["kill-leader", topic, partition] => {
                let leader = leader_of(&real_addresses[0], topic, partition.parse().expect("a partition"));
                let leader = usize::try_from(leader).expect("a leader");
                cluster.kill(leader);
                killed = Some(leader);
                "ok".to_string()
            }
            ["restart-killed"] => match cluster.restart(killed.take().expect("a killed node")) {
                Ok(()) => "ok".to_string(),
                Err(e) => e,
            },
            _ => panic!("unknown fault {asked}"),
        }
    };
    let real =
        play_scripts((&real_addresses.join(","), &run, "Differential.java on real Kafka"), (file, workers), &mut fault);
    let real = observe(real, &partitions, &real_addresses, &run);
    drop(shared);
    let (serve, server) = serve.join().expect("the serve run");
    let serve = observe(serve, &partitions, &server.addresses, &run);
    server.stop_clean();

    assert_eq!(real.len(), partitions.len(), "every script ran on real Kafka");
    let mut differences = Vec::new();
    for ((name, (real_lines, real_logs)), (_, (serve_lines, serve_logs))) in real.iter().zip(&serve) {
        for (tp, replicas) in real_logs {
            assert!(
                replicas.iter().all(|r| r == &replicas[0]),
                "{name}: real Kafka's replicas of {tp} differ: {replicas:#?}"
            );
        }
        if real_lines != serve_lines {
            differences.push(format!("{name}: the client saw\nreal Kafka: {real_lines:#?}\nserve: {serve_lines:#?}"));
        }
        for ((tp, real_replicas), (_, serve_replicas)) in real_logs.iter().zip(serve_logs) {
            for (i, replica) in serve_replicas.iter().enumerate() {
                if replica != &real_replicas[0] {
                    differences.push(format!(
                        "{name}: {tp} on serve's replica {i}\nreal Kafka: {:#?}\nserve: {replica:#?}",
                        real_replicas[0]
                    ));
                }
            }
        }
    }
    (real.len(), differences)
}

/// The differential: every script of tests/differential/scripts.txt through Kafka's Java client 4.3.1 on
/// real Kafka 4.3.1 and on `txnsim serve`, 4 at a time on each. Each script's printed lines (every send's
/// offset or error, every call's outcome, every read's records with their offsets and the position
/// reached, ListOffsets at both levels, the group's committed offsets) and the log of each of its
/// partitions on every replica (batches, producers numbered by first appearance, epochs, sequences,
/// markers, HW, LSO, log start and the aborted list) must be the same on both systems.
#[test]
fn differential_scripts_observe_the_same_on_real_kafka_and_on_serve() {
    let started = Instant::now();
    let (scripts, differences) = differential(DIFFERENTIAL_SCRIPTS, 4, None);
    report!(
        "differential: {scripts} scripts on real Kafka 4.3.1 and serve in {:.1} s, {} differences",
        started.elapsed().as_secs_f64(),
        differences.len()
    );
    assert!(differences.is_empty(), "{} differences:\n{}", differences.len(), differences.join("\n\n"));
}

/// The differential's fault scripts (tests/differential/faults.txt), one at a time: a partition's leader
/// killed mid-transaction and restarted (kill -9 on real Kafka, `crash` and `restart` on serve); then the
/// harness's pause and resume of a node.
#[test]
fn differential_fault_scripts_observe_the_same_on_real_kafka_and_on_serve() {
    let started = Instant::now();
    // A cluster of its own (the seed's spec), so that the other tests go on while it kills and restarts.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("apache-kafka-fault-cluster");
    let mut cluster = KafkaCluster::start(kafka_distribution(), &dir, &ClusterSpec::seed())
        .unwrap_or_else(|e| panic!("the fault scripts' Kafka 4.3.1 cluster did not start: {e}"));
    let (scripts, differences) = differential("tests/differential/faults.txt", 1, Some(&mut cluster));
    // The harness's pause, on this cluster too (the seed cluster's other tests never stop): SIGSTOP stops
    // a node's process and SIGCONT resumes it. (Its kill -9 and restart ran in the fault script, whose
    // output says each restart succeeded.)
    let pid = cluster.pid(1).expect("node 1 runs");
    cluster.pause(1).expect("SIGSTOP");
    let was_stopped = stopped(pid, true);
    cluster.resume(1).expect("SIGCONT");
    assert!(was_stopped, "node 1 is stopped");
    assert!(!stopped(pid, false), "node 1 runs again");
    drop(cluster);
    report!(
        "differential with faults: {scripts} scripts on real Kafka 4.3.1 and serve in {:.1} s, {} differences",
        started.elapsed().as_secs_f64(),
        differences.len()
    );
    assert!(differences.is_empty(), "{} differences:\n{}", differences.len(), differences.join("\n\n"));
}

/// Whether `pid` is stopped (`/proc/PID/stat`'s state `T`), once a signal has had up to 5 s to land.
fn stopped(pid: u32, want: bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let stat =
            std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_else(|e| panic!("/proc/{pid}/stat: {e}"));
        let is = stat.rsplit(") ").next().is_some_and(|rest| rest.starts_with('T'));
        if is == want || Instant::now() > deadline {
            return is;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A corpus scenario as a differential script, or why a client cannot play it. Its topics as `topic`
/// steps; each `init_producer` a new transactional producer instance; `produce` a send per value and a
/// flush (a scenario's produce is answered before the next op); `produce_nontxn` the same through an
/// idempotent (named) or plain producer; `read` and `check` the reads and ListOffsets; `crash_producer` a
/// close with the transaction left open. `aborted_txns` needs no step: every replica's aborted list is
/// compared anyway.
fn corpus_script(scenario: &serde_json::Value) -> Result<Vec<String>, String> {
    if scenario["name"] == "fenced-instance-local-misuse-stays-local" {
        // Two gate runs saw Kafka's Java client answer the same calls differently (a begin after a commit
        // it refused was IllegalStateException in one, ok in the other): its answers to misuse depend on
        // its own timing, so neither system can be compared on them.
        return Err("the Java client answers repeated local misuse by its own timing".to_string());
    }
    let layer = scenario["layer"].as_str().unwrap_or("producer");
    if layer != "producer" {
        return Err(format!("the {layer} layer drives a log or a fetch directly, below any client"));
    }
    if scenario["transaction_version"].as_u64() == Some(1) {
        return Err("transaction version 1: Kafka's Java client 4.3.1 speaks 2".to_string());
    }
    let mut steps = Vec::new();
    let topics = scenario["topics"].as_object().cloned().unwrap_or_default();
    if topics.is_empty() {
        steps.push("topic t 1".to_string());
    }
    for (topic, partitions) in &topics {
        steps.push(format!("topic {topic} {}", partitions.as_u64().expect("a partition count")));
    }
    let mut nontxn = BTreeSet::new();
    for op in scenario["ops"].as_array().expect("ops") {
        let kind = op["op"].as_str().expect("an op");
        let producer = op["producer"].as_str().unwrap_or("plain-producer");
        let topic = op["topic"].as_str().unwrap_or("t");
        let partition = op["partition"].as_u64().unwrap_or(0);
        let values = || -> Result<Vec<String>, String> {
            let values: Vec<String> = op["values"]
                .as_array()
                .expect("values")
                .iter()
                .map(|v| v.as_str().expect("a value").to_string())
                .collect();
            match values.iter().find(|v| v.contains(char::is_whitespace) || v.is_empty()) {
                Some(v) => Err(format!("the value {v:?} is not one word")),
                None => Ok(values),
            }
        };
        match kind {
            "init_producer" => {
                let id = op["transactional_id"].as_str().unwrap_or(producer);
                steps.push(format!("producer {producer} {id}{}", compression_type(op)));
                steps.push(format!("init {producer}"));
            }
            "begin" | "commit" | "abort" => steps.push(format!("{kind} {producer}")),
            "produce" | "produce_nontxn" => {
                if kind == "produce_nontxn" && nontxn.insert(producer.to_string()) {
                    let plain = op["producer"].is_null();
                    let kind = if plain { "plain" } else { "idempotent" };
                    steps.push(format!("{kind} {producer}{}", compression_type(op)));
                }
                steps.extend(values()?.iter().map(|v| format!("send {producer} {topic} {partition} {v}")));
                steps.push(format!("flush {producer}"));
            }
            "read" => {
                let level = if op["isolation"] == "read_committed" { "rc" } else { "ru" };
                let from = op["from_offset"].as_u64().expect("from_offset");
                steps.push(format!("read {level} {topic} {partition} {from}"));
            }
            "check" => steps.push(format!("end {topic} {partition}")),
            "aborted_txns" => {}
            "crash_producer" => steps.push(format!("close {producer}")),
            "expire_txn" => return Err("expire_txn: the coordinator's timeout on the scenario's clock".to_string()),
            other => return Err(format!("{other}: a broker by id (the fault scripts kill a partition's leader)")),
        }
    }
    Ok(steps)
}

/// A scenario producer's `compression` as the Java client's setting (Differential.java's `K=V`).
fn compression_type(op: &serde_json::Value) -> String {
    op["compression"].as_str().map_or(String::new(), |c| format!(" compression.type={c}"))
}

/// Every producer-layer scenario of the corpus (`seeds/scenarios/*.json`) that a client can express,
/// played through Kafka's Java client on both systems: the same lines and the same logs. The others are
/// listed with the reason (printed with `--nocapture`).
#[test]
fn corpus_scenarios_observe_the_same_on_real_kafka_and_on_serve() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/scenarios");
    let mut files: Vec<_> = std::fs::read_dir(&corpus).expect("the corpus").flatten().map(|e| e.path()).collect();
    files.retain(|p| p.extension().is_some_and(|e| e == "json"));
    files.sort();
    let (mut script, mut skipped, mut names) = (String::new(), Vec::new(), BTreeSet::new());
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a corpus file");
        let json: serde_json::Value = serde_json::from_str(&text).expect("corpus JSON");
        for scenario in json["scenarios"].as_array().expect("scenarios") {
            let name = scenario["name"].as_str().expect("a name");
            assert!(names.insert(name.to_string()), "two corpus scenarios are called {name}");
            match corpus_script(scenario) {
                Ok(steps) => script.push_str(&format!("## {name}\n{}\n\n", steps.join("\n"))),
                Err(why) => skipped.push(format!("{name}: {why}")),
            }
        }
    }
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("differential-corpus.txt");
    std::fs::write(&path, &script).expect("write the corpus scripts");
    let started = Instant::now();
    let (played, differences) = differential(path.to_str().expect("utf-8"), 4, None);
    report!(
        "corpus differential: {played} scenarios played on real Kafka 4.3.1 and serve in {:.1} s, {} differences; \
         {} not a client's:\n{}",
        started.elapsed().as_secs_f64(),
        differences.len(),
        skipped.len(),
        skipped.join("\n")
    );
    assert!(played >= 46, "most producer-layer scenarios are a client's; played {played}");
    assert!(differences.is_empty(), "{} differences:\n{}", differences.len(), differences.join("\n\n"));
}

/// A connection to the broker that `address`'s Metadata names `node`.
fn connect_node(address: &str, node: i32) -> Conn {
    let mut conn = Conn::connect(address).unwrap_or_else(|e| panic!("connect to {address}: {e}"));
    let r = conn.call(9, &MetadataRequest::default()).unwrap_or_else(|e| panic!("Metadata at {address}: {e}"));
    let b = r.brokers.iter().find(|b| b.node_id.0 == node).unwrap_or_else(|| panic!("no broker {node}"));
    Conn::connect(&format!("{}:{}", b.host.as_str(), b.port))
        .unwrap_or_else(|e| panic!("connect to broker {node}: {e}"))
}

/// A Produce of one transactional batch to `tp`'s leader at `version` (v12 and up, transaction version 2:
/// the leader adds the partition; below, KIP-890 part 1: it only verifies it): the partition's error code.
fn produce_txn(
    leader: &mut Conn,
    version: i16,
    (tid, tp): (&str, &TopicPartition),
    producer: BatchProducer,
    value: &str,
) -> i16 {
    let batch = RecordBatch {
        base_offset: 0,
        last_offset: 0,
        producer: Some(producer),
        is_transactional: true,
        body: BatchBody::Data(vec![Record { offset: 0, value: value.to_string() }]),
        partition_leader_epoch: 0,
        compression: CompressionType::None,
    };
    let mut p = PartitionProduceData::default();
    p.index = tp.partition as i32;
    p.records = Some(txnsim_kafka::records::encode_fetch(tp, &[batch], &BTreeMap::new(), usize::MAX));
    let mut t = TopicProduceData::default();
    t.name = TopicName(StrBytes::from_string(tp.topic.to_string()));
    t.partition_data = vec![p];
    let mut r = ProduceRequest::default();
    r.transactional_id = Some(TransactionalId(StrBytes::from_string(tid.to_string())));
    r.acks = -1;
    r.timeout_ms = 10_000;
    r.topic_data = vec![t];
    let answer = leader.call(version, &r).unwrap_or_else(|e| panic!("Produce v{version}: {e}"));
    answer.responses[0].partition_responses[0].error_code
}

/// A transactional id's coordinator and a fresh producer id and epoch from it (InitProducerId v5),
/// retried as a client would while a fresh `__transaction_state` is created and its leaders settle
/// (COORDINATOR_LOAD_IN_PROGRESS 14, COORDINATOR_NOT_AVAILABLE 15, NOT_COORDINATOR 16).
fn init_producer_raw(addresses: &[String], tid: &str) -> (Conn, i64, i16) {
    let mut find = FindCoordinatorRequest::default();
    find.key_type = 1;
    find.coordinator_keys = vec![StrBytes::from_string(tid.to_string())];
    let mut init = InitProducerIdRequest::default();
    init.transactional_id = Some(TransactionalId(StrBytes::from_string(tid.to_string())));
    init.transaction_timeout_ms = 60_000;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut conn = Conn::connect(&addresses[0]).expect("connect");
        let found = conn.call(4, &find).expect("FindCoordinator");
        let error = match found.coordinators[0].error_code {
            0 => {
                let mut coordinator = connect_node(&addresses[0], found.coordinators[0].node_id.0);
                let r = coordinator.call(5, &init).expect("InitProducerId");
                if r.error_code == 0 {
                    return (coordinator, r.producer_id.0, r.producer_epoch);
                }
                r.error_code
            }
            e => e,
        };
        assert!([14, 15, 16].contains(&error), "FindCoordinator or InitProducerId: error {error}");
        assert!(Instant::now() < deadline, "no transaction coordinator in 30 s (error {error})");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A name prefix of its own for each run: the real cluster outlives a run (it is the test binary's), and
/// tests run on it side by side (the counter parts two runs of one millisecond).
fn run_prefix(kind: &str) -> String {
    static RUNS: AtomicU32 = AtomicU32::new(0);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("time");
    format!("{kind}{:x}n{}", now.as_millis(), RUNS.fetch_add(1, Ordering::Relaxed))
}

/// `probe` on `serve` (the seed's cluster) and then on real Kafka, with one name prefix: (serve's, real's).
fn on_both<T>(name: &str, probe: fn(&[String], &str) -> T) -> (T, T) {
    let run = run_prefix("r");
    let server = Server::start(name, &SERVE_SEED_CLUSTER);
    let serve = probe(&server.addresses, &run);
    server.stop_clean();
    let guard = seed_cluster();
    let real = probe(&guard.as_ref().expect("started").addresses(), &run);
    (serve, real)
}

/// KIP-890's late batch on the wire, which no client can send: a TV2 transaction's batch, the
/// transaction aborted (EndTxn v5 bumps the epoch), its ABORT marker in, then a second batch at the old
/// epoch, as a retry stuck in the network would arrive. What each step answered (epochs relative to the
/// first) and the partition's log, per replica.
fn late_batch_after_abort(addresses: &[String], run: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let (tid, topic) = (format!("{run}-late-tx"), format!("{run}-late"));
    create_topics(addresses, &[(topic.clone(), 1)]).expect("CreateTopics");
    let (mut coordinator, pid, epoch) = init_producer_raw(addresses, &tid);
    let mut lines = Vec::new();
    let mut leader = connect_node(&addresses[0], leader_of(&addresses[0], &topic, 0));
    let tp = TopicPartition::new(&topic, 0);
    let first = BatchProducer { producer_id: pid, epoch, base_sequence: 0 };
    lines.push(format!("produce at epoch +0: error {}", produce_txn(&mut leader, 12, (&tid, &tp), first, "first")));
    let mut end = EndTxnRequest::default();
    end.transactional_id = TransactionalId(StrBytes::from_string(tid.clone()));
    end.producer_id = ProducerId(pid);
    end.producer_epoch = epoch;
    end.committed = false;
    let r = coordinator.call(5, &end).expect("EndTxn");
    lines.push(format!("abort: error {}, epoch +{}", r.error_code, r.producer_epoch - epoch));
    // The marker in (the HW past it) before the late batch: the race without it is Kafka's, not the rule.
    let deadline = Instant::now() + Duration::from_secs(10);
    while fetch_log(&mut leader, &tp, Isolation::ReadUncommitted).expect("Fetch").high_watermark < 2 {
        assert!(Instant::now() < deadline, "the ABORT marker did not arrive in 10 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    let late = BatchProducer { producer_id: pid, epoch, base_sequence: 1 };
    lines.push(format!("late produce at epoch +0: error {}", produce_txn(&mut leader, 12, (&tid, &tp), late, "late")));
    (lines, stable_replica_logs(addresses, &tp))
}

/// KIP-890's late batch, sent raw to both systems: the answers and every replica's log must agree, and
/// the late batch must not be written.
#[test]
fn a_late_batch_after_a_tv2_abort_is_refused_on_real_kafka_and_on_serve() {
    let (serve, real) = on_both("late-batch", late_batch_after_abort);
    report!("late batch on real Kafka 4.3.1: {:?}", real.0);
    assert_eq!(serve, real, "serve's answers and logs (left) differ from real Kafka's");
    assert!(real.1[0].iter().all(|l| !l.contains(":late")), "the late batch is not in the log: {:#?}", real.1[0]);
}

/// The harness's one-node cluster (its own folder and ports, beside the seed's): the seed experiment
/// through librdkafka at replication factor 1 prints the seed document's lines, and its log holds the
/// COMMIT marker at 3 and the ABORT marker at 7.
#[test]
fn a_one_node_cluster_runs_the_seed_experiment() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("apache-kafka-one-node");
    let spec = ClusterSpec { nodes: 1, ..ClusterSpec::seed() };
    let cluster = KafkaCluster::start(kafka_distribution(), &dir, &spec)
        .unwrap_or_else(|e| panic!("a one-node Kafka 4.3.1 cluster did not start: {e}"));
    let out = run(python("seed_experiment.py", &cluster.bootstrap(), &["1", "seed-one-node"]), "seed_experiment.py");
    assert_eq!(out, SEED_LINES, "the seed experiment on one node");
    let logs = replica_logs(&cluster.addresses(), "seed-one-node", 8);
    assert_eq!(logs.len(), 1, "one replica");
    assert_seed_log("real Kafka, one node", 0, &logs[0]);
}

/// KAFKA-18202 (Kafka 4.1): under transaction version 2 a transactional batch from a producer with no
/// state on the partition must start at sequence 0. A first batch at sequence 5, sent raw (a client
/// starts at 0), then one at 0: what each answers and the log, on both systems.
fn first_batch_at_sequence_5(addresses: &[String], run: &str) -> (Vec<String>, Vec<String>) {
    let (tid, topic) = (format!("{run}-seq-tx"), format!("{run}-seq"));
    create_topics(addresses, &[(topic.clone(), 1)]).expect("CreateTopics");
    let (_, pid, epoch) = init_producer_raw(addresses, &tid);
    let mut leader = connect_node(&addresses[0], leader_of(&addresses[0], &topic, 0));
    let mut lines = Vec::new();
    for (seq, value) in [(5, "five"), (0, "zero")] {
        let batch = BatchProducer { producer_id: pid, epoch, base_sequence: seq };
        lines.push(format!(
            "produce at sequence {seq}: error {}",
            produce_txn(&mut leader, 12, (&tid, &TopicPartition::new(&topic, 0)), batch, value)
        ));
    }
    // The transaction stays open, so the followers' HW may lag: the leader's log is the one compared.
    let ru = fetch_log(&mut leader, &TopicPartition::new(&topic, 0), Isolation::ReadUncommitted).expect("Fetch");
    (lines, describe(&ru, &ru))
}

#[test]
fn a_first_transactional_batch_past_sequence_0_is_refused_on_real_kafka_and_on_serve() {
    let (serve, real) = on_both("first-sequence", first_batch_at_sequence_5);
    report!("first batch at sequence 5 on real Kafka 4.3.1: {:?}", real.0);
    assert_eq!(serve, real, "serve's answers and leader's log (left) differ from real Kafka's");
    assert_eq!(real.0[0], "produce at sequence 5: error 45", "OUT_OF_ORDER_SEQUENCE_NUMBER (KAFKA-18202)");
}

/// KIP-890 part 1 (transaction version 1 requests): a leader verifies a transactional batch's partition
/// with the coordinator (AddPartitionsToTxn v4, verify only) and a group coordinator verifies the offsets
/// partition of a TxnOffsetCommit below v5 the same way. A transaction holding partition 0 only: a
/// Produce v11 to partition 0, one to partition 1 (never added), and a TxnOffsetCommit v3 with no
/// AddOffsetsToTxn before it; then the abort. Each answer, on both systems.
fn verify_only_outside_the_transaction(addresses: &[String], run: &str) -> Vec<String> {
    let (tid, topic, group) = (format!("{run}-vo-tx"), format!("{run}-vo"), format!("{run}-vo-g"));
    create_topics(addresses, &[(topic.clone(), 2)]).expect("CreateTopics");
    let (mut coordinator, pid, epoch) = init_producer_raw(addresses, &tid);
    let mut add = AddPartitionsToTxnRequest::default();
    add.v3_and_below_transactional_id = TransactionalId(StrBytes::from_string(tid.clone()));
    add.v3_and_below_producer_id = ProducerId(pid);
    add.v3_and_below_producer_epoch = epoch;
    let mut t = AddPartitionsToTxnTopic::default();
    t.name = TopicName(StrBytes::from_string(topic.clone()));
    t.partitions = vec![0];
    add.v3_and_below_topics = vec![t];
    let r = coordinator.call(3, &add).expect("AddPartitionsToTxn v3");
    let mut lines = vec![format!(
        "add t/0: error {}",
        r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
    )];
    // Below v11 a client knows no TRANSACTION_ABORTABLE (AddPartitionsToTxnManager's DEFAULT_ERROR).
    for (partition, version) in [(0, 11), (1, 11), (1, 10)] {
        let tp = TopicPartition::new(&topic, partition);
        let mut leader = connect_node(&addresses[0], leader_of(&addresses[0], &topic, partition as i32));
        let batch = BatchProducer { producer_id: pid, epoch, base_sequence: 0 };
        lines.push(format!(
            "produce v{version} to t/{partition}: error {}",
            produce_txn(&mut leader, version, (&tid, &tp), batch, "v")
        ));
    }
    let mut find = FindCoordinatorRequest::default();
    find.key_type = 0;
    find.coordinator_keys = vec![StrBytes::from_string(group.clone())];
    let mut p = TxnOffsetCommitRequestPartition::default();
    p.partition_index = 0;
    p.committed_offset = 1;
    let mut t = TxnOffsetCommitRequestTopic::default();
    t.name = TopicName(StrBytes::from_string(topic.clone()));
    t.partitions = vec![p];
    let mut commit = TxnOffsetCommitRequest::default();
    commit.transactional_id = TransactionalId(StrBytes::from_string(tid.clone()));
    commit.group_id = StrBytes::from_string(group).into();
    commit.producer_id = ProducerId(pid);
    commit.producer_epoch = epoch;
    commit.topics = vec![t];
    // A fresh __consumer_offsets answers COORDINATOR_LOAD_IN_PROGRESS (14), COORDINATOR_NOT_AVAILABLE (15)
    // or NOT_COORDINATOR (16) while its leaders settle: a client finds the coordinator again and retries.
    let deadline = Instant::now() + Duration::from_secs(30);
    for version in [3, 4] {
        let error = loop {
            let found = Conn::connect(&addresses[0]).and_then(|mut c| c.call(4, &find)).expect("FindCoordinator");
            let error = match found.coordinators[0].error_code {
                0 => {
                    let mut groups = connect_node(&addresses[0], found.coordinators[0].node_id.0);
                    let r = groups.call(version, &commit).expect("TxnOffsetCommit");
                    r.topics[0].partitions[0].error_code
                }
                e => e,
            };
            if !matches!(error, 14..=16) {
                break error;
            }
            assert!(Instant::now() < deadline, "the group's coordinator still answers error {error}");
            std::thread::sleep(Duration::from_millis(200));
        };
        lines.push(format!("txn offset commit v{version} without AddOffsetsToTxn: error {error}"));
    }
    let mut end = EndTxnRequest::default();
    end.transactional_id = TransactionalId(StrBytes::from_string(tid));
    end.producer_id = ProducerId(pid);
    end.producer_epoch = epoch;
    end.committed = false;
    lines.push(format!("abort: error {}", coordinator.call(3, &end).expect("EndTxn v3").error_code));
    lines
}

#[test]
fn verify_only_refuses_a_partition_outside_the_transaction_on_real_kafka_and_on_serve() {
    let (serve, real) = on_both("verify-only", verify_only_outside_the_transaction);
    report!("verify-only on real Kafka 4.3.1: {real:?}");
    assert_eq!(serve, real, "serve's answers (left) differ from real Kafka's");
    assert_eq!(
        real[2], "produce v11 to t/1: error 120",
        "TRANSACTION_ABORTABLE: the partition is not in the transaction"
    );
}
