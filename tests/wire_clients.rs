//! Real Kafka clients against `txnsim serve`, in the gate: serve runs on a free loopback port and each
//! client's output must equal the expected lines exactly. The clients are librdkafka (confluent-kafka) and
//! kafka-python, which speak transaction version 1, and Kafka's own Java client 4.3.1, which speaks
//! transaction version 2 (KIP-890: an epoch bump at every transaction's end) against serve's finalized
//! `transaction.version` 2, as a new Kafka 4.3.1 cluster has it.

mod clients;
mod common;

use clients::{java, python, run, spawn, SCRIPT_TIMEOUT, SEED_LINES};
use common::{wait_bounded, Server};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;
use txnsim_engine::record::{BatchBody, CompressionType};
use txnsim_engine::{TopicPartition, TransactionResult};

/// Commit [c-0, c-1] at 0..1 (marker 2), abort [a-0, a-1] at 3..4 (marker 5), commit [c-2] at 6 (marker 7).
const KAFKA_PYTHON_LINES: &str = "\
read_uncommitted from 0: [(0, 'c-0'), (1, 'c-1'), (3, 'a-0'), (4, 'a-1'), (6, 'c-2')]
read_committed from 0: [(0, 'c-0'), (1, 'c-1'), (6, 'c-2')]
";

/// Four input records, two per transaction: the first commits its output and its offset (2), the second
/// aborts both, so the group resumes at `c` and read_committed sees only the first pair.
const CONSUME_TRANSFORM_PRODUCE_LINES: &str = "\
consumed: ['a', 'b']
committed: produced ['A', 'B'], offsets to 2
consumed: ['c', 'd']
aborted: produced ['C', 'D'], offsets to 4
ctp-group committed offsets: [('ctp-in', 0, 2)]
a new member of ctp-group resumes with: ['c', 'd']
read_committed on ctp-out: ['A', 'B']
read_uncommitted on ctp-out: ['A', 'B', 'C', 'D']
";

/// Each case mostly waits (on a client, a server, a timeout): four at a time, or one per core where there
/// are more, unless `--test-threads` says otherwise. Filters and `--list` work as libtest's.
fn main() {
    let mut args = libtest_mimic::Arguments::from_args();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    args.test_threads = args.test_threads.or(Some(cores.max(4)));
    let cases: [(&str, fn()); 16] = [
        ("confluent_kafka_prints_the_seed_documents_lines", confluent_kafka_prints_the_seed_documents_lines),
        (
            "confluent_kafka_prints_the_seed_documents_lines_on_three_brokers",
            confluent_kafka_prints_the_seed_documents_lines_on_three_brokers,
        ),
        (
            "kafkas_java_client_prints_the_seed_documents_lines_on_three_brokers",
            kafkas_java_client_prints_the_seed_documents_lines_on_three_brokers,
        ),
        ("kafka_python_commits_aborts_and_reads_both_levels", kafka_python_commits_aborts_and_reads_both_levels),
        (
            "confluent_kafka_sees_aborted_records_when_fetch_skips_the_index",
            confluent_kafka_sees_aborted_records_when_fetch_skips_the_index,
        ),
        ("serve_reports_a_state_violation_and_exits_1", serve_reports_a_state_violation_and_exits_1),
        (
            "confluent_kafka_consume_transform_produce_commits_offsets_with_the_transaction",
            confluent_kafka_consume_transform_produce_commits_offsets_with_the_transaction,
        ),
        (
            "kafkas_java_client_consume_transform_produce_commits_offsets_with_the_transaction",
            kafkas_java_client_consume_transform_produce_commits_offsets_with_the_transaction,
        ),
        (
            "serve_reports_offsets_visible_before_their_transaction_commits",
            serve_reports_offsets_visible_before_their_transaction_commits,
        ),
        ("confluent_kafka_sees_its_transaction_time_out", confluent_kafka_sees_its_transaction_time_out),
        (
            "confluent_kafka_commits_after_the_partitions_leader_crashes",
            confluent_kafka_commits_after_the_partitions_leader_crashes,
        ),
        (
            "confluent_kafka_commits_after_the_coordinators_broker_crashes",
            confluent_kafka_commits_after_the_coordinators_broker_crashes,
        ),
        (
            "kafkas_java_client_commits_after_the_partitions_leader_crashes",
            kafkas_java_client_commits_after_the_partitions_leader_crashes,
        ),
        (
            "kafkas_java_client_commits_after_the_coordinators_broker_crashes",
            kafkas_java_client_commits_after_the_coordinators_broker_crashes,
        ),
        (
            "a_log_read_back_waits_for_an_open_transactions_marker",
            a_log_read_back_waits_for_an_open_transactions_marker,
        ),
        (
            "confluent_kafka_reads_compressed_transactions_in_their_codec",
            confluent_kafka_reads_compressed_transactions_in_their_codec,
        ),
    ];
    let trials = cases.into_iter().map(|(name, case)| {
        libtest_mimic::Trial::test(name, move || {
            case();
            Ok(())
        })
    });
    libtest_mimic::run(&args, trials.collect()).exit();
}

/// Runs a script from scripts/ against the server; returns its stdout.
fn run_script(script: &str, server: &Server) -> String {
    run(python(script, &server.addresses[0], &[]), script)
}

/// The producer id the coordinator gave the transactional producer, from the timeline.
fn producer_id(timeline: &str) -> String {
    timeline
        .lines()
        .find_map(|l| l.split("InitProducerId resp pid ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the timeline shows an InitProducerId answer")
        .to_string()
}

fn confluent_kafka_prints_the_seed_documents_lines() {
    // Kafka's tests run with no initial rebalance delay too; the default 3 s would add 9 s here.
    let server = Server::start("seed", &["--group-initial-rebalance-delay-ms", "0"]);
    let out = run_script("seed_experiment.py", &server);
    let timeline = server.stop_clean();
    assert_eq!(out, SEED_LINES, "confluent-kafka against txnsim serve must print the seed document's lines");
    let pid = producer_id(&timeline);
    for want in [
        format!("writes COMMIT marker for pid {pid} at tx-demo/0@3"),
        format!("writes ABORT marker for pid {pid} at tx-demo/0@7"),
        format!("aborted index tx-demo/0: pid {pid} first 4 last 7 LSO 8"),
    ] {
        assert!(timeline.contains(&want), "the timeline lacks {want:?}:\n{timeline}");
    }
    // Each consumer subscribed in its own fresh group: one generation each, no committed offset to start.
    for group in ["seed-ru", "seed-rc", "seed-fresh-ru", "seed-fresh-rc"] {
        let joined = timeline.contains(&format!("JoinGroup req {group} member ''"))
            && timeline.contains(&format!("OffsetFetch req {group} tx-demo/0"));
        assert!(joined, "group {group} joined through the classic protocol:\n{timeline}");
    }
}

/// The seed document's own setup: three brokers and `tx-demo` at replication factor 3, led by broker 1
/// (striped placement) while broker 0 hosts the coordinators. The client bootstraps to broker 0 and
/// learns the other two and the leader from Metadata; the same lines come out, and every
/// replica's log holds the markers and the index entry at the leader's offsets (followers rebuild the
/// index from the batches they fetch).
fn confluent_kafka_prints_the_seed_documents_lines_on_three_brokers() {
    let server = Server::start("seed-3-brokers", &SEED_THREE_BROKERS);
    let out = run(python("seed_experiment.py", &server.addresses[0], &["3"]), "seed_experiment.py");
    assert_seed_on_three_brokers(&out, &server.stop_clean());
}

/// The seed document's cluster: three brokers, topics at replication factor 3.
const SEED_THREE_BROKERS: [&str; 6] =
    ["--brokers", "3", "--default-replication-factor", "3", "--group-initial-rebalance-delay-ms", "0"];

/// The seed document's lines, and in serve's timeline the controller's placement of `tx-demo/0` and, on
/// every replica, the markers and the index entry at the leader's offsets.
fn assert_seed_on_three_brokers(out: &str, timeline: &str) {
    assert_eq!(out, SEED_LINES, "the client against serve --brokers 3 must print the seed document's lines");
    assert!(
        timeline.contains("PartitionChange tx-demo/0 leader 1 epoch 0 isr [1, 2, 0] from controller"),
        "the controller registered tx-demo/0 on the three brokers, striped from broker 1:\n{timeline}"
    );
    let pid = producer_id(timeline);
    for broker in 0..3 {
        for want in [
            format!("writes COMMIT marker for pid {pid} at tx-demo/0@3"),
            format!("writes ABORT marker for pid {pid} at tx-demo/0@7"),
            format!("aborted index tx-demo/0: pid {pid} first 4 last 7 LSO 8"),
        ] {
            let line = format!("{:<9} {want}", format!("broker-{broker}"));
            assert!(timeline.contains(&line), "the timeline lacks {line:?} on broker {broker}:\n{timeline}");
        }
    }
}

/// The seed document's experiment in Kafka's own Java client 4.3.1 (whose transaction manager every other
/// client follows), on the seed's three brokers under transaction version 2: the same lines, markers and
/// index.
fn kafkas_java_client_prints_the_seed_documents_lines_on_three_brokers() {
    let server = Server::start("java-seed-3-brokers", &SEED_THREE_BROKERS);
    let out = run(java("seed", &server.addresses[0], &["3"]), "JavaClients.java seed");
    assert_seed_on_three_brokers(&out, &server.stop_clean());
}

fn kafka_python_commits_aborts_and_reads_both_levels() {
    let server = Server::start("kafka-python", &[]);
    let out = run_script("kafka_python_txn.py", &server);
    let timeline = server.stop_clean();
    assert_eq!(out, KAFKA_PYTHON_LINES, "kafka-python's reads of commit, abort, commit");
    let pid = producer_id(&timeline);
    assert!(
        timeline.contains(&format!("aborted index kp-demo/0: pid {pid} first 3 last 5 LSO 6")),
        "the abort left one index entry:\n{timeline}"
    );
}

/// The gate's wire tests can fail: with the fetch ignoring the aborted index (KAFKA-5376's shape), the
/// same script's read_committed consumers deliver the aborted records. No state invariant sees a fetch,
/// so serve itself exits clean; the client's output is the witness.
fn confluent_kafka_sees_aborted_records_when_fetch_skips_the_index() {
    let server = Server::start(
        "seed-skip-index",
        &["--group-initial-rebalance-delay-ms", "0", "--mutation", "skip-aborted-index-on-fetch"],
    );
    let out = run_script("seed_experiment.py", &server);
    server.stop_clean();
    let aborted = "['aborted-0', 'aborted-1', 'aborted-2']";
    let want = SEED_LINES
        .replace("read_committed sees (after abort): []", &format!("read_committed sees (after abort): {aborted}"))
        .replace(
            "sees only:\n  ['inflight-0', 'inflight-1', 'inflight-2']",
            "sees only:\n  ['inflight-0', 'inflight-1', 'inflight-2', 'aborted-0', 'aborted-1', 'aborted-2']",
        );
    assert_eq!(out, want, "read_committed delivers the aborted transaction under the mutation");
}

/// An abort that leaves no index entry breaks a state invariant: serve reports it on stderr the moment
/// the marker is written and exits 1.
fn serve_reports_a_state_violation_and_exits_1() {
    let server = Server::start(
        "seed-no-index-entry",
        &["--group-initial-rebalance-delay-ms", "0", "--mutation", "no-aborted-index-entry"],
    );
    run_script("seed_experiment.py", &server);
    let (status, err, timeline) = server.stop();
    assert_eq!(status.code(), Some(1), "serve exits 1 after a violation: {err}");
    assert!(err.contains("VIOLATION aborted-index-exact"), "stderr names the invariant: {err}");
    assert!(timeline.contains("VIOLATION aborted-index-exact"), "so does the timeline");
}

/// Consume-transform-produce through librdkafka: `send_offsets_to_transaction` reaches the engine as
/// AddOffsetsToTxn and TxnOffsetCommit; the group's offset moves with the committed transaction only, and
/// the consumer's committed() is an OffsetFetch with require_stable (KIP-447). Group `ctp-group` lives on
/// `__consumer_offsets/47`, where the two transactions' offsets and markers land.
fn confluent_kafka_consume_transform_produce_commits_offsets_with_the_transaction() {
    let server = Server::start("ctp", &["--group-initial-rebalance-delay-ms", "0"]);
    let out = run_script("consume_transform_produce.py", &server);
    let timeline = server.stop_clean();
    assert_eq!(out, CONSUME_TRANSFORM_PRODUCE_LINES, "the group's offsets follow the transactions");
    let pid = producer_id(&timeline);
    for want in [
        format!("AddOffsetsToTxn req ctp-producer pid {pid} e0 group ctp-group"),
        format!("TxnOffsetCommit req ctp-group pid {pid} epoch 0 [ctp-in/0@2]"),
    ]
    .into_iter()
    .chain(ctp_offsets_log(&pid))
    {
        assert!(timeline.contains(&want), "the timeline lacks {want:?}:\n{timeline}");
    }
}

/// The lines of `ctp-group`'s partition, `__consumer_offsets/47`, in a consume-transform-produce run by
/// producer `pid`: the group's metadata when generation 1 became Stable at 0, the transactions' offset
/// records (2, then 4) at 1 and 3, each followed by its marker, and the read_committed member's fetch
/// of its offset with KIP-447's require_stable.
fn ctp_offsets_log(pid: &str) -> Vec<String> {
    vec![
        r#"appends [{"Group":{"group":"ctp-group","metadata":{"generation":1,"#.to_string(),
        r#"at __consumer_offsets/47@0..0 pid -1"#.to_string(),
        format!("TxnOffsetCommit req ctp-group pid {pid} epoch 0 [ctp-in/0@2]"),
        format!(r#""offset":2,"metadata":""}}}}] at __consumer_offsets/47@1..1 pid {pid}"#),
        format!("writes COMMIT marker for pid {pid} at __consumer_offsets/47@2"),
        format!(r#""offset":4,"metadata":""}}}}] at __consumer_offsets/47@3..3 pid {pid}"#),
        format!("writes ABORT marker for pid {pid} at __consumer_offsets/47@4"),
        "OffsetFetch req ctp-group ctp-in/0 require_stable".to_string(),
    ]
}

/// Consume-transform-produce in Kafka's Java client 4.3.1: `sendOffsetsToTransaction` with the consumer's
/// group metadata (KIP-447: TxnOffsetCommit carries its generation and member id, which the group checks),
/// the same lines as librdkafka's. Under transaction version 2 it sends no AddOffsetsToTxn: its
/// TxnOffsetCommit v5 adds the offsets partition (KIP-890 part 2), and each transaction's end bumps the
/// epoch, so the aborted transaction's offsets go at epoch 1. Its plain producer is idempotent by default
/// and takes the first producer id, so the transactional one is read off its TxnOffsetCommit.
fn kafkas_java_client_consume_transform_produce_commits_offsets_with_the_transaction() {
    let server = Server::start("java-ctp", &["--group-initial-rebalance-delay-ms", "0"]);
    let out = run(java("ctp", &server.addresses[0], &[]), "JavaClients.java ctp");
    let timeline = server.stop_clean();
    assert_eq!(out, CONSUME_TRANSFORM_PRODUCE_LINES, "the group's offsets follow the transactions");
    let pid = timeline
        .lines()
        .find_map(|l| l.split("TxnOffsetCommit req ctp-group pid ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the timeline shows the transactional producer's TxnOffsetCommit");
    assert!(!timeline.contains("AddOffsetsToTxn req"), "a TV2 client sends no AddOffsetsToTxn:\n{timeline}");
    let second = format!("TxnOffsetCommit req ctp-group pid {pid} epoch 1 [ctp-in/0@4]");
    for want in ctp_offsets_log(pid).into_iter().chain([second]) {
        assert!(timeline.contains(&want), "the timeline lacks {want:?}:\n{timeline}");
    }
}

/// The same script with the transaction's offsets committed at TxnOffsetCommit: the aborted offset 4 is
/// what the group gets, the new member finds nothing left to read, and serve reports the invariant.
fn serve_reports_offsets_visible_before_their_transaction_commits() {
    let server = Server::start(
        "ctp-visible-before-commit",
        &["--group-initial-rebalance-delay-ms", "0", "--mutation", "txn-offsets-visible-before-commit"],
    );
    let out = run_script("consume_transform_produce.py", &server);
    let (status, err, _) = server.stop();
    let want = CONSUME_TRANSFORM_PRODUCE_LINES
        .replace("[('ctp-in', 0, 2)]", "[('ctp-in', 0, 4)]")
        .replace("resumes with: ['c', 'd']", "resumes with: []");
    assert_eq!(out, want, "the aborted transaction's offset is the group's under the mutation");
    assert_eq!(status.code(), Some(1), "serve exits 1 after a violation: {err}");
    assert!(err.contains("VIOLATION txn-offsets-visible-iff-committed"), "stderr names the invariant: {err}");
}

/// `--transaction-abort-timed-out-transaction-cleanup-interval-ms 100`: the producer's transaction
/// (timeout 1 s) is still open 3 s later, so the coordinator's scan has aborted it with an epoch bump (an
/// ABORT marker at 1, an index entry), and the late commit is fenced; read_committed sees nothing.
fn confluent_kafka_sees_its_transaction_time_out() {
    let server = Server::start(
        "tt",
        &[
            "--group-initial-rebalance-delay-ms",
            "0",
            "--transaction-abort-timed-out-transaction-cleanup-interval-ms",
            "100",
        ],
    );
    let out = run_script("transaction_timeout.py", &server);
    let timeline = server.stop_clean();
    let want = "commit: _FENCED (fatal: True)\nread_uncommitted from 0: ['late']\nread_committed from 0: []\n";
    assert_eq!(out, want, "the timed-out transaction is aborted and its producer fenced");
    let pid = producer_id(&timeline);
    for want in [
        format!("writes ABORT marker for pid {pid} at tt-demo/0@1"),
        format!("aborted index tt-demo/0: pid {pid} first 0 last 1 LSO 2"),
        format!("EndTxn req tt-producer COMMIT pid {pid} e0"),
        "EndTxn resp PRODUCER_FENCED".to_string(),
    ] {
        assert!(timeline.contains(&want), "the timeline lacks {want:?}:\n{timeline}");
    }
}

/// `scripts/broker_crash.py`'s lines: broker 1 leads `crash-demo/0` until it crashes, broker 2 after.
const BROKER_CRASH_LINES: &str = "\
leader of crash-demo/0: 1
produced ['c-0', 'c-1'], not committed
committed
leader of crash-demo/0: 2
read_committed sees: ['c-0', 'c-1']
";

/// A client of the broker crash experiment: its program's name, its timeline's name, and how to run it
/// against a server.
type CrashClient = (&'static str, &'static str, fn(&Server) -> Command);

const LIBRDKAFKA_CRASH: CrashClient =
    ("broker_crash.py", "broker-crash", |server| python("broker_crash.py", &server.addresses[0], &[]));
const JAVA_CRASH: CrashClient =
    ("JavaClients.java crash", "java-broker-crash", |server| java("crash", &server.addresses[0], &[]));

/// Runs the broker crash experiment (`scripts/broker_crash.py`, or the same in Kafka's Java client)
/// against `serve --brokers 3`, crashing broker `crash` once its records are acknowledged and restarting
/// it after the client ends. Its output and serve's timeline.
fn broker_crash(crash: u32, (what, name, client): CrashClient) -> (String, String) {
    let flags = ["--brokers", "3", "--group-initial-rebalance-delay-ms", "0"];
    let mut server = Server::start(&format!("{name}-{crash}"), &flags);
    let mut command = client(&server);
    let mut child = spawn(command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()), what);
    let (tx, lines) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok) {
            tx.send(line).ok();
        }
    });
    let mut stderr = child.stderr.take().expect("piped");
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        stderr.read_to_string(&mut s).ok();
        s
    });
    let mut out = String::new();
    let wait_lines = |n: usize, out: &mut String, child: &mut std::process::Child| {
        for _ in 0..n {
            match lines.recv_timeout(Duration::from_secs(30)) {
                Ok(line) => out.push_str(&format!("{line}\n")),
                Err(_) => {
                    child.kill().ok();
                    panic!("{what} printed nothing for 30 s:\n{out}");
                }
            }
        }
    };
    wait_lines(2, &mut out, &mut child);
    assert_eq!(server.command(&format!("crash {crash}")), format!("txnsim serve: broker {crash} crashed"));
    let mut stdin = child.stdin.take().expect("piped");
    std::io::Write::write_all(&mut stdin, b"crashed\n").expect("tell the script");
    drop(stdin);
    let status = wait_bounded(&mut child, SCRIPT_TIMEOUT, what);
    reader.join().expect("stdout");
    out.extend(lines.try_iter().map(|l| format!("{l}\n")));
    let err = err.join().expect("stderr");
    assert!(status.success(), "{what} exited {status}\nstdout:\n{out}\nstderr:\n{err}");
    assert_eq!(server.command(&format!("restart {crash}")), format!("txnsim serve: broker {crash} restarted"));
    (out, server.stop_clean())
}

/// Runs `broker_crash(crash, client)` and checks the client's lines, the controller's election in serve's
/// timeline, and which broker wrote the COMMIT marker of the client's producer.
fn assert_commit_survives(crash: u32, client: CrashClient, lines: &str, election: &[&str], marker_writer: &str) {
    let (out, timeline) = broker_crash(crash, client);
    assert_eq!(out, lines, "the commit completes after crash {crash}; read_committed reads both records");
    // One metadata delta of the controller's: every partition change of the crash.
    let elected =
        timeline.lines().any(|l| l.contains("recv PartitionChange") && election.iter().all(|e| l.contains(e)));
    assert!(elected, "the controller's election ({election:?}) is one line of the timeline:\n{timeline}");
    let pid = producer_id(&timeline);
    let marker = format!("{marker_writer:<9} writes COMMIT marker for pid {pid} at crash-demo/0@2");
    assert!(timeline.contains(&marker), "{marker_writer} wrote the COMMIT marker:\n{timeline}");
}

/// Broker 1's crash in the controller's one delta: it leaves the ISRs of `__transaction_state/0` and of
/// the group's `__consumer_offsets/9`, which broker 2 now leads, and `crash-demo/0` gets leader 2.
const LEADER_ELECTION: [&str; 3] = [
    "__consumer_offsets/9 leader 2 epoch 1 isr [2, 0];",
    "__transaction_state/0 leader 0 epoch 0 isr [0, 2];",
    "crash-demo/0 leader 2 epoch 1 isr [2, 0] from controller",
];

/// Broker 0's: broker 1 takes `__transaction_state/0` over at epoch 1; the group's partition and
/// `crash-demo/0` keep leader 1.
const COORDINATOR_ELECTION: [&str; 3] = [
    "__consumer_offsets/9 leader 1 epoch 0 isr [1, 2];",
    "__transaction_state/0 leader 1 epoch 1 isr [1, 2];",
    "crash-demo/0 leader 1 epoch 0 isr [1, 2] from controller",
];

/// A broker killed over the wire: the script's transaction is on `crash-demo/0`, led by broker 1, as is
/// its consumer's group (`__consumer_offsets/9`); once its records are acknowledged the test sends
/// `crash 1` to serve's stdin, then lets the script commit. The controller elects broker 2 for both, the
/// coordinator's COMMIT marker lands there, the group coordinator moves there, and read_committed reads
/// exactly the two records. Broker 1 restarts and serve reports no violation throughout.
fn confluent_kafka_commits_after_the_partitions_leader_crashes() {
    assert_commit_survives(1, LIBRDKAFKA_CRASH, BROKER_CRASH_LINES, &LEADER_ELECTION, "broker-2");
}

/// The transaction coordinator killed over the wire: broker 0 leads `__transaction_state` and dies with
/// the transaction open. Broker 1 takes the log over at leader epoch 1, so it coordinates; librdkafka
/// finds it (FindCoordinator) and commits there, and broker 1 writes the COMMIT marker to its own
/// `crash-demo/0`; the consumer reads while broker 0 is down.
fn confluent_kafka_commits_after_the_coordinators_broker_crashes() {
    let lines = BROKER_CRASH_LINES.replace("crash-demo/0: 2", "crash-demo/0: 1");
    assert_commit_survives(0, LIBRDKAFKA_CRASH, &lines, &COORDINATOR_ELECTION, "broker-1");
}

/// The partition's leader crashes between the flush and the commit, with Kafka's Java client: the same
/// election, marker and reads as librdkafka's.
fn kafkas_java_client_commits_after_the_partitions_leader_crashes() {
    assert_commit_survives(1, JAVA_CRASH, BROKER_CRASH_LINES, &LEADER_ELECTION, "broker-2");
}

/// The coordinator's broker crashes between the flush and the commit, with Kafka's Java client: it finds
/// the new coordinator, broker 1, whose `__transaction_state` writes wait for broker 2 (its one fetcher to
/// broker 1 takes the log up on its next fetch), and EndTxn is answered once the write is replicated.
fn kafkas_java_client_commits_after_the_coordinators_broker_crashes() {
    let lines = BROKER_CRASH_LINES.replace("crash-demo/0: 2", "crash-demo/0: 1");
    assert_commit_survives(0, JAVA_CRASH, &lines, &COORDINATOR_ELECTION, "broker-1");
}

/// `sweep --target` reads each partition back only once its LSO reaches its HW: Kafka answers EndTxn
/// before it writes the markers, so a log read at once can lack a COMMIT marker that a later read_committed
/// reader has passed (on real Kafka that read raised a false precommitted-read). With a transaction held
/// open the read-back is still waiting a second later, and once the commit is made it holds the marker.
fn a_log_read_back_waits_for_an_open_transactions_marker() {
    let server = Server::start("open-transaction", &[]);
    let what = "open_transaction.py";
    let mut command = python(what, &server.addresses[0], &[]);
    let mut child = spawn(command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()), what);
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).expect("the script's first line");
    assert_eq!(line, "open\n", "{what} holds its transaction open");
    let addresses = server.addresses.clone();
    let reader = std::thread::spawn(move || {
        txnsim_kafka::remote::wire::read_logs(&addresses, &[TopicPartition::new("open-demo", 0)], SCRIPT_TIMEOUT)
    });
    std::thread::sleep(Duration::from_secs(1));
    let early = reader.is_finished();
    std::io::Write::write_all(&mut child.stdin.take().expect("piped"), b"commit\n").expect("tell the script");
    let status = wait_bounded(&mut child, SCRIPT_TIMEOUT, what);
    assert!(status.success(), "{what} exited {status}");
    assert!(!early, "the read-back returned while the transaction was open");
    let logs = reader.join().expect("the read-back").expect("the read-back succeeds");
    assert_eq!(logs[0].last_stable_offset, Some(logs[0].high_watermark), "read once the LSO reached the HW");
    let last = logs[0].batches.last().map(|b| b.body.clone());
    assert!(
        matches!(&last, Some(BatchBody::Control(Some(m))) if m.result == TransactionResult::Commit),
        "the log read back ends with the COMMIT marker: {last:?}"
    );
    server.stop_clean();
}

/// Compressed transactions (issue 48): librdkafka with each `compression.type` commits, aborts and commits
/// on serve, and reads back exactly what it does uncompressed (`KAFKA_PYTHON_LINES`' pattern) at both
/// levels. serve keeps each data batch in the producer's codec (`LogValidator`, topic `compression.type`
/// `producer`) and its Fetch returns it so (the attributes decoded by the log read-back); the markers are
/// uncompressed (`MemoryRecords.withEndTransactionMarker`).
fn confluent_kafka_reads_compressed_transactions_in_their_codec() {
    let codecs = [CompressionType::Gzip, CompressionType::Snappy, CompressionType::Lz4, CompressionType::Zstd];
    let names: Vec<&str> = codecs.iter().map(|c| c.name()).collect();
    let server = Server::start("compressed", &[]);
    let out = run(python("compressed_txn.py", &server.addresses[0], &names), "compressed_txn.py");
    let want: String =
        names.iter().map(|codec| KAFKA_PYTHON_LINES.replace("read_", &format!("{codec} read_"))).collect();
    assert_eq!(out, want, "confluent-kafka's reads of compressed commit, abort, commit");
    let partitions: Vec<TopicPartition> = names.iter().map(|c| TopicPartition::new(&format!("cz-{c}"), 0)).collect();
    let logs = txnsim_kafka::remote::wire::read_logs(&server.addresses, &partitions, SCRIPT_TIMEOUT)
        .expect("serve's logs read back");
    server.stop_clean();
    for (codec, log) in codecs.iter().zip(&logs) {
        let kinds: Vec<(bool, CompressionType)> = log.batches.iter().map(|b| (b.is_control(), b.compression)).collect();
        let data = (false, *codec);
        let marker = (true, CompressionType::None);
        assert_eq!(kinds, [data, marker, data, marker, data, marker], "{}: (control, codec) per batch", log.topic);
    }
}
