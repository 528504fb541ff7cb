//! Kafka's Java client 4.3.1 as `txnsim conform`'s layout player (scripts/ConformLayouts.java, run by
//! conform/adapters/java-4.3.1/layouts) and the Java adapters (conform/adapters/java-4.3.1 and
//! java-3.9.1) on a real 3-node Kafka 4.3.1 cluster of the harness (issue 48 items 2 and 3), behind
//! `--ignored`: `cargo test --test conform_java -- --ignored`. The layouts below use every step of the
//! layout script; at each read the player pauses (`--pause`) while both adapters read the partition at
//! both levels and must deliver what the player's client delivered; then the test checks each read the
//! player printed against Kafka 4.3.1's answer, the segment files each roll made on every node, and the
//! markers' producer epochs of TV1 and TV2 transactions.

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use txnsim_engine::record::BatchBody;
use txnsim_engine::TopicPartition;
use txnsim_kafka::apache_kafka::{run_bounded, ClusterSpec, Distribution, KafkaCluster};
use txnsim_kafka::remote::wire::{fetch_log, Conn, Isolation};

/// Every step kind of the layout script (conform/layouts.txt's syntax). `flush` before `abort` puts the
/// aborted batch in the log (an abort fails what is still lingering, `abortUndrainedBatches`); the player
/// gives every transactional producer a timeout of 15 minutes, so the open transaction is still open when
/// the adapters read.
const LAYOUTS: &str = "\
## alternating
# several transactions of one producer in one fetch, committed and aborted alternating
topic t 1
producer p
init p
begin p
send p t 0 a1
send p t 0 a2
commit p
begin p
send p t 0 b1
flush p
abort p
begin p
send p t 0 c1
commit p
read t 0 0
read t 0 3
read t 0 4

## marker-alone
# the ABORT marker alone in a segment of its own (a fetch reads one segment), gzip batches
topic t 1
producer p compression.type=gzip
init p
begin p
send p t 0 x1
send p t 0 x2
flush p
roll t 0
abort p
roll t 0
begin p
send p t 0 y1
commit p
read t 0 0
read t 0 2

## spanning
# a transaction spanning segments: a roll between two batches of one open transaction, snappy batches
topic t 1 retention.ms=-1
producer p compression.type=snappy
init p
begin p
send p t 0 s1
flush p
roll t 0
send p t 0 s2
commit p
read t 0 0
read t 0 1

## tv1-tv2
# TV1 and TV2 markers in one partition
topic t 1
producer old transaction.version=1
producer new
init old
init new
begin old
send old t 0 o1
commit old
begin new
send new t 0 n1
flush new
abort new
begin old
send old t 0 o2
flush old
abort old
begin new
send new t 0 n2
commit new
read t 0 0

## plain-and-deleted
# non-transactional records between transactional ones, then the log start moved past an aborted transaction (lz4, zstd)
topic t 1
producer p compression.type=lz4
plain q compression.type=zstd
init p
begin p
send p t 0 a
flush p
send q t 0 plain1
flush q
abort p
begin p
send p t 0 b
commit p
read t 0 0
delete-records t 0 2
read t 0 2

## open-holds-lso
# an open transaction holding the LSO with committed data of another producer above it
topic t 1
producer p
producer q
init p
init q
begin p
send p t 0 open1
flush p
begin q
send q t 0 c1
commit q
read t 0 0
";

/// What each read delivers on Kafka 4.3.1: (layout, from, log start, HW, LSO, read_uncommitted's records,
/// read_committed's records), records as `offset:value`; each read's position is its level's end.
const READS: [(&str, i64, i64, i64, i64, &str, &str); 11] = [
    ("alternating", 0, 0, 7, 7, "0:a1 1:a2 3:b1 5:c1", "0:a1 1:a2 5:c1"),
    ("alternating", 3, 0, 7, 7, "3:b1 5:c1", "5:c1"),
    ("alternating", 4, 0, 7, 7, "5:c1", "5:c1"),
    ("marker-alone", 0, 0, 5, 5, "0:x1 1:x2 3:y1", "3:y1"),
    ("marker-alone", 2, 0, 5, 5, "3:y1", "3:y1"),
    ("spanning", 0, 0, 3, 3, "0:s1 1:s2", "0:s1 1:s2"),
    ("spanning", 1, 0, 3, 3, "1:s2", "1:s2"),
    ("tv1-tv2", 0, 0, 8, 8, "0:o1 2:n1 4:o2 6:n2", "0:o1 6:n2"),
    ("plain-and-deleted", 0, 0, 5, 5, "0:a 1:plain1 3:b", "1:plain1 3:b"),
    ("plain-and-deleted", 2, 2, 5, 5, "3:b", "3:b"),
    ("open-holds-lso", 0, 0, 3, 0, "0:open1 1:c1", ""),
];

/// The segments (base offsets) each layout's partition has on every node.
const SEGMENTS: [(&str, &[u64]); 6] = [
    ("alternating", &[0]),
    ("marker-alone", &[0, 2, 3]),
    ("spanning", &[0, 1]),
    ("tv1-tv2", &[0]),
    ("plain-and-deleted", &[0]),
    ("open-holds-lso", &[0]),
];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn records(v: &Value) -> String {
    let list = v["records"].as_array().expect("records");
    let one = |r: &Value| format!("{}:{}", r["offset"], r["value"].as_str().expect("a value"));
    list.iter().map(one).collect::<Vec<_>>().join(" ")
}

/// The base offsets of the segment files of `topic`-0 in node `id`'s log directory.
fn segments(cluster: &KafkaCluster, id: usize, topic: &str) -> Vec<u64> {
    let dir: PathBuf = cluster.node_dir(id).join("data").join(format!("{topic}-0"));
    let mut bases: Vec<u64> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".log")?.parse().ok())
        .collect();
    bases.sort_unstable();
    bases
}

/// One adapter's read: its records as `offset:value` and its position.
fn adapter_read(version: &str, bootstrap: &str, topic: &str, from: i64, isolation: &str, stop: i64) -> (String, i64) {
    let request = serde_json::json!({
        "format": "txnsim-conform/v1", "bootstrap": bootstrap, "topic": topic, "partition": 0,
        "start_offset": from, "isolation": isolation, "stop_offset": stop, "max_records": 1000,
        "timeout_ms": 20000,
    });
    let run = repo().join(format!("conform/adapters/java-{version}/run"));
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("conform-java-request-{version}.json"));
    std::fs::write(&file, format!("{request}\n")).expect("the request");
    // `txnsim conform` runs the adapter through `sh -c`; the request on its stdin.
    let mut sh = Command::new("sh");
    sh.arg("-c").arg("exec \"$0\" < \"$1\"").arg(&run).arg(&file);
    let (status, text, err) = run_bounded(sh, Duration::from_secs(120)).expect("the adapter");
    assert!(status.success(), "java-{version} on {request}: {status}\n{text}{err}");
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    assert_eq!(lines[0], serde_json::json!({"client": "kafka-clients", "version": version}), "{text}");
    let last = lines.last().expect("a position line");
    let got = lines[1..lines.len() - 1]
        .iter()
        .map(|r| format!("{}:{}", r["offset"], r["value"].as_str().expect("a value")))
        .collect::<Vec<_>>()
        .join(" ");
    (got, last["position"].as_i64().unwrap_or_else(|| panic!("a position: {text}")))
}

#[test]
#[ignore]
fn the_java_player_builds_every_layout_on_real_kafka_and_the_java_adapters_read_it() {
    let started = Instant::now();
    let dist = Distribution::resolve(Path::new(env!("CARGO_TARGET_TMPDIR"))).expect("Kafka 4.3.1");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("conform-java-cluster");
    let cluster = KafkaCluster::start(&dist, &dir, &ClusterSpec::seed()).expect("the cluster");
    let bootstrap = cluster.bootstrap();
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join("conform-java-layouts.txt");
    std::fs::write(&file, LAYOUTS).expect("the layouts");

    // The player stops at each read (--pause) while both adapters read the partition at both levels,
    // stopping at the level's end, and must deliver what the player's own client delivered there.
    let mut player = Command::new(repo().join("conform/adapters/java-4.3.1/layouts"));
    player.arg("--pause").arg(&bootstrap).arg(&file);
    let mut child =
        player.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the player");
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok) {
            tx.send(line).ok();
        }
    });
    let mut stderr = child.stderr.take().expect("piped");
    let trace = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut s).ok();
        s
    });
    let mut stdin = child.stdin.take().expect("piped");
    let deadline = Instant::now() + Duration::from_secs(900);
    let mut lines: Vec<Value> = Vec::new();
    let mut adapter_reads = 0;
    loop {
        let line = match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => line,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                child.kill().ok();
                panic!("the player did not finish in 900 s: {lines:#?}");
            }
        };
        let read: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
        if read.get("read").is_some() {
            let topic = read["topic"].as_str().expect("a topic");
            let from = read["from"].as_i64().expect("from");
            for version in ["4.3.1", "3.9.1"] {
                for (level, end) in [("read_uncommitted", "high_watermark"), ("read_committed", "last_stable_offset")] {
                    let stop = read[end].as_i64().expect("an end");
                    let (got, position) = adapter_read(version, &bootstrap, topic, from, level, stop);
                    let want = (records(&read[level]), stop);
                    assert_eq!((got, position), want, "java-{version} {level} {read}");
                    adapter_reads += 1;
                }
            }
            writeln!(stdin).expect("answer the player");
        }
        lines.push(read);
    }
    drop(stdin);
    let status = child.wait().expect("the player");
    let trace = trace.join().expect("its stderr");
    let out: String = lines.iter().map(|l| format!("{l}\n")).collect();
    assert!(status.success(), "the player exited {status}:\n{out}\n{trace}");
    assert!(lines.iter().all(|l| l.get("error").is_none()), "{out}");
    writeln!(
        std::io::stderr(),
        "the player built {} layouts, {adapter_reads} adapter reads agreeing, in {:.1} s",
        SEGMENTS.len(),
        started.elapsed().as_secs_f64()
    )
    .ok();

    // Each read: the ends at both levels and the client's delivery, as Kafka 4.3.1 has them.
    let reads: Vec<&Value> = lines.iter().filter(|l| l.get("read").is_some()).collect();
    assert_eq!(reads.len(), READS.len(), "{out}");
    for (read, (layout, from, start, hw, lso, ru, rc)) in reads.iter().zip(READS) {
        let got = (
            read["layout"].as_str().unwrap_or_default(),
            read["from"].as_i64().unwrap_or(-1),
            read["log_start"].as_i64().unwrap_or(-1),
            read["high_watermark"].as_i64().unwrap_or(-1),
            read["last_stable_offset"].as_i64().unwrap_or(-1),
        );
        assert_eq!(got, (layout, from, start, hw, lso), "{read}");
        assert_eq!(records(&read["read_uncommitted"]), ru, "{read}");
        assert_eq!(records(&read["read_committed"]), rc, "{read}");
        assert_eq!(read["read_uncommitted"]["position"].as_i64(), Some(hw), "{read}");
        assert_eq!(read["read_committed"]["position"].as_i64(), Some(lso), "{read}");
    }

    // Each roll started a segment at the offset it printed, and no other one: on every node.
    let rolls: Vec<(String, u64)> = lines
        .iter()
        .filter(|l| l.get("roll").is_some())
        .map(|l| (l["layout"].as_str().expect("a layout").to_string(), l["base_offset"].as_u64().expect("an offset")))
        .collect();
    assert_eq!(rolls, [("marker-alone".to_string(), 2), ("marker-alone".to_string(), 3), ("spanning".to_string(), 1)]);
    for (layout, want) in SEGMENTS {
        for id in 0..cluster.node_count() {
            assert_eq!(segments(&cluster, id, &format!("conform-{layout}-t")), want, "{layout} on node {id}");
        }
    }

    // TV1 markers carry the epoch of their transaction's data, TV2 markers that epoch plus one.
    let mut conn = Conn::connect(&cluster.addresses()[0]).expect("node 0");
    let view = fetch_log(&mut conn, &TopicPartition::new("conform-tv1-tv2-t", 0), Isolation::ReadUncommitted)
        .expect("the tv1-tv2 log");
    let mut epochs = Vec::new();
    for pair in view.batches.chunks(2) {
        let (data, marker) = (&pair[0], &pair[1]);
        assert!(matches!(data.body, BatchBody::Data(_)) && marker.is_control(), "{:?}", view.batches);
        let (d, m) = (data.producer.expect("a producer"), marker.producer.expect("a producer"));
        assert_eq!(d.producer_id, m.producer_id);
        epochs.push(m.epoch - d.epoch);
    }
    assert_eq!(epochs, [0, 1, 0, 1], "o1 (TV1), n1 (TV2), o2 (TV1), n2 (TV2): {:?}", view.batches);

    writeln!(std::io::stderr(), "reads, segments and epochs checked in {:.1} s", started.elapsed().as_secs_f64()).ok();
}
