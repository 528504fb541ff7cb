//! `txnsim sweep --target`: the standard profile's workload through librdkafka (the `rdkafka` crate)
//! against `txnsim serve` on a free loopback port, 20 seeds four at a time (`--jobs 4`), each bounded in time; the history it saves
//! matches its schema and `check-history` re-checks it. Against `serve --mutation
//! skip-aborted-index-on-fetch` read_committed readers deliver aborted records, and the sweep must say
//! so with the seed, a witness and a saved history that `check-history` also fails. The wall clock
//! decides how many transactions commit, so per-seed counts are checked for shape, not value; the
//! invariant lines and verdicts are exact. librdkafka speaks transaction version 1: these are TV1 tests.

mod common;

use common::{assert_valid, txnsim, Server};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// 20 seeds of about 2-3 s each, four at a time; far above that something hangs.
const SWEEP_TIMEOUT: Duration = Duration::from_secs(240);

const CHECKED: &str = "checked: aborted-read, precommitted-read, partial-read, lost-write, duplicate, \
inconsistent-offsets, poll-skip, nonmonotonic-poll, nonmonotonic-send, read-uncommitted-superset, \
lso-reaches-high-watermark";

/// The invariants a real cluster cannot be checked for from outside, a line per reason.
const NOT_CHECKED: [&str; 4] = [
    "not checked (needs the brokers' producer state, coordinator and aborted index): lso-bounds, \
lso-is-first-unstable-offset, nothing-undecided-below-lso, marker-matches-decision, one-outcome-per-transaction, \
aborted-index-exact, no-non-transactional-write-in-open-txn, producer-epoch-monotonic, no-duplicate-appends, \
coordinator-epoch-monotonic, valid-coordinator-transitions, decision-irrevocable, partition-coverage, \
epoch-bump-on-fence-and-timeout",
    "not checked (librdkafka does not say which partition an empty poll fetched, so no empty poll is recorded): \
position-reaches-lso",
    "not checked (librdkafka speaks transaction version 1, where KIP-890's late batch and late EndTxn break it, as \
in Kafka): failed-send-committed, committed-writes-committed",
    "not checked (needs the coordinator's state after the run): decided-transactions-complete, \
open-transactions-time-out, reader-catches-up",
];

fn tmp(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// `seed N: C committed, A aborted by clients, T timed out, F fenced, P polls, faults [...], VERDICT` -> the
/// counts. "By clients": the coordinator's aborts (a fenced or timed-out producer's) are not among them, and
/// a violation may cite one in a seed whose clients aborted nothing.
fn seed_line(line: &str, seed: u64) -> (u64, u64, u64, &str) {
    let rest = line.strip_prefix(&format!("seed {seed}: ")).unwrap_or_else(|| panic!("not seed {seed}'s line: {line}"));
    let words: Vec<&str> = rest.split(' ').collect();
    let n = |i: usize| words[i].trim_end_matches(',').parse::<u64>().unwrap_or_else(|_| panic!("no count: {line}"));
    assert_eq!(
        (words[1], words[3], words[4], words[5], words[7], words[8], words[10], words[12]),
        ("committed,", "aborted", "by", "clients,", "timed", "out,", "fenced,", "polls,"),
        "{line}"
    );
    let verdict = rest.rsplit(", ").next().expect("a verdict");
    (n(0), n(2), n(11), verdict)
}

#[test]
fn twenty_seeds_pass_against_serve_and_recheck_offline() {
    let server = Server::start("target-pass", &[]);
    let url = format!("kafka://{}", server.addresses[0]);
    let history = tmp("target-pass.history.json");
    let json = tmp("target-pass.report.json");
    let args =
        ["sweep", "--target", &url, "--seeds", "20", "--jobs", "4", "--history", history.to_str().expect("utf-8")];
    let (code, out, err) = txnsim(&[&args[..], &["--json", json.to_str().expect("utf-8")]].concat(), SWEEP_TIMEOUT);
    assert_eq!(code, 0, "the sweep against an unmutated serve passes:\n{out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    let head = format!("sweep --target {url}: profile standard, seeds 0..=19, topics and transactional ids txnsim-");
    assert!(lines[0].starts_with(&head) && lines[0].ends_with("-s<seed>-*"), "{}", lines[0]);
    let (mut committed, mut aborted, mut polls) = (0, 0, 0);
    for seed in 0..20u64 {
        let (c, a, p, verdict) = seed_line(lines[1 + seed as usize], seed);
        assert_eq!(verdict, "pass", "{}", lines[1 + seed as usize]);
        (committed, aborted, polls) = (committed + c, aborted + a, polls + p);
    }
    assert!(committed > 0 && aborted > 0 && polls > 0, "the workload committed, aborted and polled: {out}");
    assert_eq!(lines[21], CHECKED);
    assert_eq!(&lines[22..26], &NOT_CHECKED[..]);
    let totals = format!("totals: 20 seeds, {committed} committed, {aborted} aborted by clients, ");
    assert!(
        lines[26].starts_with(&totals) && lines[26].contains(&format!(" fenced, {polls} polls, ")),
        "{}",
        lines[26]
    );
    // Then the faults by kind, as the sim's report counts them: every fault injected, once.
    assert_eq!(lines[27], "  faults by kind:");
    let by_kind: Vec<(&str, u64)> = lines[28..lines.len() - 2]
        .iter()
        .map(|l| {
            let (kind, n) = l.strip_prefix("    ").and_then(|l| l.split_once(": ")).unwrap_or_else(|| panic!("{l}"));
            (kind, n.parse().unwrap_or_else(|_| panic!("{l}")))
        })
        .collect();
    let total = by_kind.iter().map(|(_, n)| n).sum::<u64>();
    assert!(lines[26].ends_with(&format!(" records delivered, {total} faults")), "{}", lines[26]);
    assert_eq!(
        &lines[lines.len() - 2..],
        [format!("history: {}", history.display()).as_str(), "PASS: 20 seeds, no violation"]
    );

    let file = assert_valid("target-history.schema.json", &history);
    assert_eq!(file["seeds"].as_array().map(Vec::len), Some(20), "--history keeps every seed");
    let report = assert_valid("target-sweep.schema.json", &json);
    assert_eq!((report["passed"].as_bool(), report["totals"]["committed"].as_u64()), (Some(true), Some(committed)));
    for (kind, n) in &by_kind {
        assert_eq!(report["faults_by_kind"][kind].as_u64(), Some(*n), "{kind} in the JSON as in the text");
    }
    // A cluster of the user's own: no node fault, in the JSON or the history.
    assert!(report["seeds"].as_array().expect("seeds").iter().all(|s| s["nemesis"] == serde_json::json!([])));
    assert!(file["seeds"].as_array().expect("seeds").iter().all(|s| s.get("nemesis").is_none()));

    let (code, out, err) = txnsim(&["check-history", history.to_str().expect("utf-8")], Duration::from_secs(60));
    assert_eq!(code, 0, "the saved history re-checks clean:\n{out}\n{err}");
    assert_eq!(out.lines().last(), Some("PASS: 20 seed(s), no violation"), "{out}");
    server.stop_clean();
    a_damaged_history_is_refused_or_fails(&file);
}

/// `check-history` judges only what the file can show: copies of a clean history with a seed twice, a
/// polled partition's log gone, an offset beyond int64 or a batch overlapping the one before it are
/// refused (exit 2, one line), and a log cut below what a reader delivered is a finding (exit 1).
fn a_damaged_history_is_refused_or_fails(clean: &Value) {
    let polled = |seed: &Value| {
        let events = seed["history"]["events"].as_array().expect("events");
        events.iter().position(|e| e["type"] == "poll" && e["records"].as_array().is_some_and(|r| !r.is_empty()))
    };
    let s = clean["seeds"].as_array().expect("seeds").iter().position(|seed| polled(seed).is_some()).expect("a poll");
    let poll = polled(&clean["seeds"][s]).expect("a poll");
    let partition = clean["seeds"][s]["history"]["events"][poll]["partition"].clone();
    let log = clean["seeds"][s]["logs"]
        .as_array()
        .expect("logs")
        .iter()
        .position(|l| l["topic"] == partition["topic"] && l["partition"] == partition["partition"])
        .expect("the polled partition's log");
    type Damage = fn(&mut Value, usize, usize, usize);
    let damages: [(&str, Damage, i32, &str); 5] = [
        (
            "seed-twice",
            |f, s, _, _| {
                let copy = f["seeds"][s].clone();
                f["seeds"].as_array_mut().expect("seeds").push(copy);
            },
            2,
            "appears twice",
        ),
        (
            "log-gone",
            |f, s, _, l| {
                f["seeds"][s]["logs"].as_array_mut().expect("logs").remove(l);
            },
            2,
            "whose log the file does not hold",
        ),
        (
            "beyond-int64",
            |f, s, p, _| {
                f["seeds"][s]["history"]["events"][p]["records"][0][0] = Value::from(1u64 << 63);
            },
            2,
            "beyond int64",
        ),
        (
            "overlap",
            |f, s, _, l| {
                let batches = f["seeds"][s]["logs"][l]["batches"].as_array_mut().expect("batches");
                let first = batches[0].clone();
                batches.insert(1, first);
            },
            2,
            "overlaps the batch before it",
        ),
        (
            "log-cut",
            |f, s, _, l| {
                f["seeds"][s]["logs"][l]["batches"] = Value::Array(Vec::new());
                f["seeds"][s]["logs"][l]["high_watermark"] = Value::from(0);
            },
            1,
            "the log read back ends at 0",
        ),
    ];
    for (name, damage, want, says) in damages {
        let mut file = clean.clone();
        damage(&mut file, s, poll, log);
        let path = tmp(&format!("damaged-{name}.history.json"));
        std::fs::write(&path, file.to_string()).expect("write the damaged history");
        let (code, out, err) = txnsim(&["check-history", path.to_str().expect("utf-8")], Duration::from_secs(60));
        assert_eq!(code, want, "{name}: exit {want}:\n{out}\n{err}");
        let said = if want == 2 { err.trim().to_string() } else { out.clone() };
        assert!(said.contains(says), "{name}: expected {says:?} in:\n{said}");
        if want == 2 {
            assert_eq!(err.trim().lines().count(), 1, "{name}: one line on stderr: {err}");
            assert!(err.starts_with("error: "), "{name}: {err}");
        }
    }
}

#[test]
fn skip_aborted_index_on_fetch_is_reported_as_aborted_read_with_a_saved_history() {
    let server = Server::start("target-mutation", &["--mutation", "skip-aborted-index-on-fetch"]);
    let url = format!("kafka://{}", server.addresses[0]);
    let json = tmp("target-mutation.report.json");
    let args = ["sweep", "--target", &url, "--seeds", "20", "--jobs", "4", "--json", json.to_str().expect("utf-8")];
    let (code, out, err) = txnsim(&args, SWEEP_TIMEOUT);
    assert_eq!(code, 1, "read_committed readers deliver aborted records, and the sweep must fail:\n{out}\n{err}");
    // Every seed aborts transactions with records in them (commit ratio 0.7) and the fresh
    // read_committed reader reads every partition from 0 after them; the mutation hides each
    // partition's aborted list, so those records are delivered.
    let found: Vec<&str> = out.lines().filter(|l| l.starts_with("VIOLATION seed ")).collect();
    let aborted_read: Vec<&&str> = found.iter().filter(|l| l.contains(": aborted-read (seen ")).collect();
    assert!(!aborted_read.is_empty(), "no seed reported aborted-read:\n{out}");
    for l in &aborted_read {
        assert!(
            l.contains("(read_committed) on txnsim-")
                && l.contains(" of an aborted transaction of producer id ")
                && l.contains("(its ABORT marker at offset "),
            "the witness names the reader, the record and the ABORT marker: {l}"
        );
    }
    assert!(found.iter().all(|l| l.contains(": aborted-read (seen ")), "only aborted-read is violated:\n{out}");
    let path = out
        .lines()
        .find_map(|l| l.strip_prefix("re-check offline: txnsim check-history "))
        .unwrap_or_else(|| panic!("no check-history command printed:\n{out}"));
    assert!(out.lines().any(|l| l == format!("history: {path}")), "the saved history's path is printed:\n{out}");
    assert_valid("target-history.schema.json", Path::new(path));
    let report = assert_valid("target-sweep.schema.json", &json);
    assert_eq!((report["passed"].as_bool(), report["history_file"].as_str()), (Some(false), Some(path)));

    let (code, recheck, err) = txnsim(&["check-history", path], Duration::from_secs(60));
    assert_eq!(code, 1, "check-history finds the same violation offline:\n{recheck}\n{err}");
    let failing = found.iter().map(|l| l.split(':').next().expect("seed")).collect::<Vec<_>>();
    for l in recheck.lines().filter(|l| l.starts_with("VIOLATION seed ")) {
        assert!(l.contains(": aborted-read (seen "), "{l}");
        assert!(failing.contains(&l.split(':').next().expect("seed")), "a seed the sweep did not fail: {l}");
    }
    assert!(recheck.lines().any(|l| aborted_read.contains(&&l)), "the same first witness offline:\n{recheck}");
    std::fs::remove_file(path).ok();
    // The mutation is on the fetch path only: the broker's own state stays consistent.
    server.stop_clean();
}

/// A hanging transaction on any cluster: under `markers-to-subset-of-partitions` serve's coordinator writes
/// a transaction's markers to its first partition only, so on the others it never ends and the LSO stays
/// below the HW. Once `--settle-ms` has passed after the workload, the sweep reports
/// `lso-reaches-high-watermark` with the partition and the producer holding it (it used to give up on the
/// whole run with exit 2), saves the history, and `check-history` finds the same offline. Which seed's
/// transactions span partitions depends on the wall clock here, so three seeds run and one must hang.
#[test]
fn a_hanging_transaction_is_reported_with_the_producer_holding_the_lso() {
    let server = Server::start("target-hanging", &["--mutation", "markers-to-subset-of-partitions"]);
    let url = format!("kafka://{}", server.addresses[0]);
    let history = tmp("target-hanging.history.json");
    let args = ["sweep", "--target", &url, "--seeds", "3", "--jobs", "3", "--settle-ms", "2000"];
    let (code, out, err) =
        txnsim(&[&args[..], &["--history", history.to_str().expect("utf-8")]].concat(), SWEEP_TIMEOUT);
    assert_eq!(code, 1, "a violation, not bad input:\n{out}\n{err}");
    let hanging: Vec<&str> = out.lines().filter(|l| l.contains(": lso-reaches-high-watermark (seen ")).collect();
    assert!(!hanging.is_empty(), "a seed reports its hanging transaction:\n{out}");
    for l in &hanging {
        let witness = l.split("): ").nth(1).expect("a witness");
        assert!(
            witness.contains(": LSO ")
                && witness.contains(" below HW ")
                && witness.contains("holds it with the transaction it opened there"),
            "the witness names the partition, its LSO and HW, and the producer: {witness}"
        );
    }
    let (code, recheck, err) = txnsim(&["check-history", history.to_str().expect("utf-8")], Duration::from_secs(60));
    assert_eq!(code, 1, "check-history finds it offline:\n{recheck}\n{err}");
    assert!(recheck.lines().any(|l| l == hanging[0]), "the same witness offline:\n{recheck}");
    std::fs::remove_file(&history).ok();
    server.stop();
}

/// The same workload against `serve --brokers 3` at replication factor 3 (the sweep's topics take the
/// cluster's default), every broker named in `--target`: four seeds pass, and serve's replica checks too.
#[test]
fn four_seeds_pass_against_three_brokers() {
    let server = Server::start("target-3-brokers", &["--brokers", "3", "--default-replication-factor", "3"]);
    assert_eq!(server.addresses.len(), 3, "serve prints the three brokers' addresses");
    let url = format!("kafka://{}", server.addresses.join(","));
    let (code, out, err) = txnsim(&["sweep", "--target", &url, "--seeds", "4", "--jobs", "4"], SWEEP_TIMEOUT);
    assert_eq!(code, 0, "the sweep against three unmutated brokers passes:\n{out}\n{err}");
    assert_eq!(out.lines().last(), Some("PASS: 4 seeds, no violation"), "{out}");
    server.stop_clean();
}

/// A target that accepts connections and never answers: the sweep says it timed out waiting for the
/// broker (in one line, exit 2), not what the socket's read returned.
#[test]
fn a_target_that_never_answers_is_named_as_timed_out() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let target = format!("kafka://{}", listener.local_addr().expect("an address"));
    // Accepts (so the connect succeeds) and holds every connection open, silent.
    std::thread::spawn(move || {
        let held: Vec<_> = listener.incoming().map_while(Result::ok).collect();
        drop(held);
    });
    let out = Command::new(env!("CARGO_BIN_EXE_txnsim"))
        .args(["sweep", "--target", &target, "--seeds", "1"])
        .output()
        .expect("run txnsim");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.starts_with("sweep: ")).collect();
    assert!(lines.len() == 1 && lines[0].contains("timed out after 10 s waiting for the broker's answer"), "{err}");
}

#[test]
fn a_bad_target_or_history_file_is_one_line_and_exit_2() {
    for (args, want) in [
        (&["sweep", "--target", "http://127.0.0.1:9092", "--seeds", "1"][..], "expected kafka://HOST:PORT"),
        (&["sweep", "--target", "kafka://127.0.0.1:notaport", "--seeds", "1"][..], "is not a port"),
        // Port 1 on loopback: nothing listens there, so the sweep cannot create its topics.
        (&["sweep", "--target", "kafka://127.0.0.1:1", "--seeds", "1"][..], "no bootstrap broker answered"),
        (&["check-history", "/nonexistent/txnsim.history.json"][..], "/nonexistent/txnsim.history.json"),
        // Node faults only on a cluster the sweep starts; each checked before any node starts.
        (&["sweep", "--target", "kafka://127.0.0.1:1", "--nemesis", "kill-node"][..], "--nemesis needs a cluster"),
        (&["sweep", "--target", "apache-kafka:3", "--nemesis", "kill-node,bogus"][..], "unknown kind \"bogus\""),
        (&["sweep", "--target", "apache-kafka:2"][..], "1 or 3 nodes"),
        (&["sweep", "--target", "apache-kafka:3", "--nemesis", "auto", "--jobs", "2"][..], "--jobs must be 1"),
        (&["sweep", "--target", "apache-kafka:1", "--nemesis", "kill-node,cut-link"][..], "no link between nodes"),
    ] {
        let out: Output = Command::new(env!("CARGO_BIN_EXE_txnsim")).args(args).output().expect("run txnsim");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.starts_with("sweep: ")).collect();
        assert!(lines.len() == 1 && lines[0].starts_with("error: ") && lines[0].contains(want), "{args:?}: {err}");
    }
    // A real cluster runs Kafka's own code: neither a mutation nor a proposal can be switched on there.
    for flag in [["--mutation", "no-dedup"], ["--proposal", "load-waits-for-hw"]] {
        let args = [&["sweep", "--target", "kafka://127.0.0.1:1"][..], &flag[..]].concat();
        let out: Output = Command::new(env!("CARGO_BIN_EXE_txnsim")).args(&args).output().expect("run txnsim");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(&format!("'{} <", flag[0])) && err.contains("cannot be used with"), "{args:?}: {err}");
    }
}

/// `sweep --target --profile eos` against serve: processors w0..w2 in one group read the input topic
/// read_committed, write each input's output and commit their offsets in the same transaction, under
/// the profile's zombie pauses, restarts and LeaveGroups. Three seeds, one at a time; every seed passes
/// with the two exactly-once invariants among those checked, the processors committed transactions and
/// outputs, the files match their schemas and `check-history` re-checks the group's offsets offline.
#[test]
fn eos_seeds_pass_against_serve_with_the_exactly_once_invariants() {
    // The profile's 1.5 s sessions need a lower `group.min.session.timeout.ms` than Kafka's 6000, and
    // its group forms at once (as on the harness's clusters).
    let server = Server::start(
        "target-eos",
        &["--group-initial-rebalance-delay-ms", "0", "--group-min-session-timeout-ms", "500"],
    );
    let url = format!("kafka://{}", server.addresses[0]);
    let (history, json) = (tmp("target-eos.history.json"), tmp("target-eos.report.json"));
    let args = [
        "sweep",
        "--target",
        &url,
        "--profile",
        "eos",
        "--seeds",
        "3",
        "--jobs",
        "1",
        "--history",
        history.to_str().expect("utf-8"),
        "--json",
        json.to_str().expect("utf-8"),
    ];
    let (code, out, err) = txnsim(&args, Duration::from_secs(90));
    assert_eq!(code, 0, "the eos sweep against serve passes:\n{out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].contains(": profile eos, seeds 0..=2, "), "{}", lines[0]);
    let checked = format!("{CHECKED}, exactly-once-output, output-of-consumed-input");
    assert!(lines.contains(&checked.as_str()), "the exactly-once invariants ran:\n{out}");
    for seed in 0..3u64 {
        let i = lines.iter().position(|l| l.starts_with(&format!("seed {seed}: "))).expect("a line per seed");
        assert!(lines[i].ends_with(", pass"), "{}", lines[i]);
        assert!(
            lines[i + 1].starts_with(&format!("  eos seed {seed}: "))
                && lines[i + 1].contains(" processor transactions committed, "),
            "the seed's processors: {}",
            lines[i + 1]
        );
    }
    assert_eq!(lines.last(), Some(&"PASS: 3 seeds, no violation"), "{out}");

    let report = assert_valid("target-sweep.schema.json", &json);
    let eos = &report["totals"]["eos"];
    let n = |k: &str| eos[k].as_u64().unwrap_or_else(|| panic!("totals.eos.{k}: {eos}"));
    assert!(n("committed") > 0 && n("outputs_committed") > 0 && n("rebalances") > 0, "the loop ran: {eos}");
    let checked: Vec<&str> = report["checked"].as_array().expect("checked").iter().filter_map(Value::as_str).collect();
    assert!(checked.ends_with(&["exactly-once-output", "output-of-consumed-input"]), "{checked:?}");
    let file = assert_valid("target-history.schema.json", &history);
    for seed in file["seeds"].as_array().expect("seeds") {
        let offsets = seed["eos"]["committed"].as_array().expect("the group's committed offsets are saved");
        assert!(!offsets.is_empty(), "the group committed offsets: {}", seed["eos"]);
    }
    let (code, out, err) = txnsim(&["check-history", history.to_str().expect("utf-8")], Duration::from_secs(60));
    assert_eq!(code, 0, "the saved eos history re-checks clean:\n{out}\n{err}");
    assert_eq!(out.lines().last(), Some("PASS: 3 seed(s), no violation"), "{out}");
    server.stop_clean();
}
