//! The engine held against real Apache Kafka 4.3.1 (the harness `txnsim_kafka::apache_kafka`): the seed
//! document's cluster (3 nodes, replication factor 3, `min.insync.replicas` 2) starts once for this test
//! binary, and each test runs on it alone (a lock), on topics of its own. Whatever a client prints and
//! whatever each replica's log holds on real Kafka must be what `txnsim serve` gives for the same program.

mod clients;
mod common;

use clients::{java, kafka_distribution, python, run, SEED_LINES};
use common::Server;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest};
use kafka_protocol::protocol::StrBytes;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use txnsim::scenario::{self, RunOptions};
use txnsim_engine::record::BatchBody;
use txnsim_engine::TopicPartition;
use txnsim_kafka::apache_kafka::{ClusterSpec, KafkaCluster};
use txnsim_kafka::remote::wire::{fetch_log, Conn, FetchView, Isolation};

static SEED_CLUSTER: Mutex<Option<KafkaCluster>> = Mutex::new(None);

/// The seed document's cluster, started on first use; the guard keeps other tests off it meanwhile. A
/// test that failed while holding it leaves it running (the poison is cleared): each test's topics are its
/// own.
fn seed_cluster() -> MutexGuard<'static, Option<KafkaCluster>> {
    let mut guard = SEED_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    if guard.is_none() {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("apache-kafka-seed-cluster");
        let cluster = KafkaCluster::start(kafka_distribution(), &dir, &ClusterSpec::seed())
            .unwrap_or_else(|e| panic!("the seed's Kafka 4.3.1 cluster did not start: {e}"));
        *guard = Some(cluster);
    }
    guard
}

/// `txnsim serve` as the seed document's cluster.
const SERVE_SEED_CLUSTER: [&str; 8] = [
    "--brokers",
    "3",
    "--default-replication-factor",
    "3",
    "--min-insync-replicas",
    "2",
    "--group-initial-rebalance-delay-ms",
    "0",
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
        lines.push(format!("{}..{} {producer} {txn} {body}", b.base_offset, b.last_offset));
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
    let guard = seed_cluster();
    let cluster = guard.as_ref().expect("started");
    let out = run(client(&cluster.bootstrap(), &["3", topic]), what);
    assert_eq!(out, SEED_LINES, "{what} against real Kafka 4.3.1 must print the seed document's lines");
    let real = replica_logs(&cluster.addresses(), topic, 8);
    drop(guard);

    let server = Server::start(&format!("{topic}-serve"), &SERVE_SEED_CLUSTER);
    let out = run(client(&server.addresses[0], &["3", topic]), what);
    assert_eq!(out, SEED_LINES, "{what} against txnsim serve --brokers 3 must print the seed document's lines");
    let serve = replica_logs(&server.addresses, topic, 8);
    server.stop_clean();

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
/// (a client picks its protocol by it), every API range of serve inside Kafka's, and the versions that
/// carry transaction version 2 (Produce v12, EndTxn v5, TxnOffsetCommit v5: KIP-890 part 2) served by both.
#[test]
fn serve_advertises_the_transaction_version_and_api_versions_of_real_kafka() {
    let (real, real_features) = {
        let guard = seed_cluster();
        api_versions(&guard.as_ref().expect("started").addresses()[0])
    };
    let server = Server::start("api-versions", &SERVE_SEED_CLUSTER);
    let (serve, serve_features) = api_versions(&server.addresses[0]);
    server.stop_clean();

    let tv = |f: &[Feature]| f.iter().find(|(n, _, _)| n == "transaction.version").cloned();
    assert_eq!(tv(&serve_features), tv(&real_features), "finalized transaction.version (left: serve)");
    assert_eq!(tv(&real_features).map(|f| f.2), Some(2), "a new 4.3.1 cluster finalizes transaction version 2");
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
