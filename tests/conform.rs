//! `txnsim conform` (issue 48): the whole catalogue against librdkafka (the confluent-kafka adapter),
//! kafka-python and Kafka's Java client 4.3.1, every cell's and every read's exact outcome; a deliberately wrong adapter caught at its first wrong
//! delivery with the command that reproduces it; bad input (exit 2, one line) and adapters that break
//! the protocol (an adapter error, exit 2, never a pass).

mod common;

use common::{assert_valid, txnsim, wait_bounded};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// A whole run: the catalogue's reads take seconds; each adapter run is bounded by `--timeout-ms`.
const RUN_LIMIT: Duration = Duration::from_secs(180);
const INSTALL_LIMIT: Duration = Duration::from_secs(300);

/// An adapter's `run`, after its `install` (its pinned client from its registry into target/conform/; a
/// second install is a no-op). A failed install fails the test with its reason.
fn adapter(name: &str) -> String {
    let dir = Path::new(ROOT).join("conform/adapters").join(name);
    let mut install = Command::new(dir.join("install")).spawn().expect("run the adapter's install");
    let status = wait_bounded(&mut install, INSTALL_LIMIT, &format!("conform/adapters/{name}/install"));
    assert!(status.success(), "conform/adapters/{name}/install failed ({status}): see its stderr above");
    dir.join("run").display().to_string()
}

/// The layout names of the catalogue, in order.
fn catalogue() -> Vec<String> {
    let text = std::fs::read_to_string(Path::new(ROOT).join("conform/layouts.txt")).expect("the catalogue reads");
    text.lines().filter_map(|l| l.strip_prefix("## ")).map(str::to_string).collect()
}

/// The gate's clients: adapter directory, the client and version its adapter prints.
const CLIENTS: [(&str, &str, &str); 3] = [
    ("confluent-kafka", "confluent-kafka", "2.16.1 (librdkafka 2.16.0)"),
    ("kafka-python", "kafka-python", "3.0.12"),
    ("java-4.3.1", "kafka-clients", "4.3.1"),
];

/// Each layout's cell for each of `CLIENTS`, in order: every layout passes for all three (records and
/// position). A new layout or client must be added here with its outcome.
const CELLS: [(&str, [&str; 3]); 15] = [
    ("alternating", ["pass", "pass", "pass"]),
    ("start-in-abort", ["pass", "pass", "pass"]),
    ("marker-alone", ["pass", "pass", "pass"]),
    ("overlapping-aborts", ["pass", "pass", "pass"]),
    ("empty-abort", ["pass", "pass", "pass"]),
    ("control-at-end", ["pass", "pass", "pass"]),
    ("open-lso", ["pass", "pass", "pass"]),
    ("non-transactional", ["pass", "pass", "pass"]),
    ("spanning-segments", ["pass", "pass", "pass"]),
    ("deleted-start", ["pass", "pass", "pass"]),
    ("tv1-tv2", ["pass", "pass", "pass"]),
    ("gzip", ["pass", "pass", "pass"]),
    ("snappy", ["pass", "pass", "pass"]),
    ("lz4", ["pass", "pass", "pass"]),
    ("zstd", ["pass", "pass", "pass"]),
];

#[test]
fn gate_clients_read_every_layout_as_kafkas_rules_deliver() {
    let runs: Vec<String> = CLIENTS.iter().map(|(dir, _, _)| adapter(dir)).collect();
    let dir = tempfile::tempdir().expect("a temporary folder");
    let json = dir.path().join("conform.json");
    let html = dir.path().join("conform.html");
    let mut args = vec!["conform", "--jobs", "8", "--timeout-ms", "10000"];
    for run in &runs {
        args.extend(["--client", run]);
    }
    args.extend(["--json", json.to_str().expect("utf-8"), "--html", html.to_str().expect("utf-8")]);
    let (code, out, err) = txnsim(&args, RUN_LIMIT);
    assert_eq!(code, 0, "every layout passes for the gate's clients\nstdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("conform: 45 pass, 0 unsupported, 0 failing, 0 adapter error(s)"), "{out}");
    let report = assert_valid("conform.schema.json", &json);
    let names: Vec<&str> = CELLS.iter().map(|(n, _)| *n).collect();
    assert_eq!(catalogue(), names, "CELLS lists the catalogue's layouts, in order");
    for (i, (_, client, version)) in CLIENTS.iter().enumerate() {
        assert_eq!(
            (report["clients"][i]["client"].as_str(), report["clients"][i]["version"].as_str()),
            (Some(*client), Some(*version))
        );
    }
    let cells = report["cells"].as_array().expect("cells");
    let want = CLIENTS.iter().enumerate().flat_map(|(i, _)| CELLS.iter().map(move |(layout, v)| (i, *layout, v[i])));
    assert_eq!(cells.len(), CLIENTS.len() * CELLS.len(), "one cell per client and layout: {report}");
    for (cell, (client, layout, verdict)) in cells.iter().zip(want) {
        let got = (cell["client"].as_u64(), cell["layout"].as_str(), cell["verdict"].as_str());
        assert_eq!(got, (Some(client as u64), Some(layout), Some(verdict)), "{cell}");
        for read in cell["reads"].as_array().expect("reads") {
            // A pass is exact: the records in order and the position, with no note.
            assert_eq!(read["outcome"]["records"], read["expected"]["records"], "{layout}: {read}");
            assert_eq!(read["outcome"]["position"], read["expected"]["position"], "{layout}: {read}");
            assert_eq!(read["detail"], Value::Null, "{layout}: {read}");
        }
    }
    let reads: usize = cells.iter().map(|c| c["reads"].as_array().map_or(0, Vec::len)).sum();
    assert_eq!(reads, 3 * 40, "20 reads in the catalogue, each at both isolation levels, for each client");
    let page = std::fs::read_to_string(&html).expect("the page was written");
    assert_eq!(page.matches("<td class=\"Pass\">pass</td>").count(), 45, "{page}");
}

/// The adapter prints an aborted record (offset 3 of `alternating`): the cell fails at that record, at
/// read_committed first, and the report gives the command that reruns just that cell.
#[test]
fn a_wrong_adapter_is_caught_at_its_first_wrong_delivery() {
    let client = format!("python3 {ROOT}/tests/conform/wrong_adapter.py");
    let dir = tempfile::tempdir().expect("a temporary folder");
    let json = dir.path().join("conform.json");
    let args = ["conform", "--client", &client, "--only", "alternating", "--json", json.to_str().expect("utf-8")];
    let (code, out, err) = txnsim(&args, RUN_LIMIT);
    assert_eq!(code, 1, "a failing cell exits 1\nstdout:\n{out}\nstderr:\n{err}");
    let want = format!(
        "alternating  FAIL\n\
         [1] alternating: conform-alternating-t/0 from 0 read_committed: extra: offset 3 (\"x1\") delivered, \
         Kafka's rules do not deliver it\n      \
         repro: txnsim conform --client 'python3 {ROOT}/tests/conform/wrong_adapter.py' --only alternating\n\
         conform: 0 pass, 0 unsupported, 1 failing, 0 adapter error(s)\n"
    );
    assert!(out.contains(&want), "want:\n{want}\ngot:\n{out}");
    let report = assert_valid("conform.schema.json", &json);
    let reads = &report["cells"][0]["reads"];
    assert_eq!(
        reads[1]["detail"], "missing: offset 4 (\"x2\") not delivered",
        "read_uncommitted delivers x2 after x1: {reads}"
    );
}

/// Runs conform expecting bad input: exit 2 and exactly one line on stderr; that line.
fn bad_input(args: &[&str]) -> String {
    let (code, out, err) = txnsim(args, RUN_LIMIT);
    assert_eq!(code, 2, "{args:?} is bad input\nstdout:\n{out}\nstderr:\n{err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: one line on stderr, got:\n{err}");
    assert_eq!(out, "", "{args:?}: nothing runs on bad input");
    err.trim_end().to_string()
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let layouts = format!("{ROOT}/conform/layouts.txt");
    assert!(bad_input(&["conform", "--client", "true", "--only", "alternating,nope"])
        .starts_with(&format!("error: --only nope: no such layout in {layouts} (it has alternating, ")));
    let dir = tempfile::tempdir().expect("a temporary folder");
    let unwritable = dir.path().join("no-such-folder/report.json");
    let unwritable = unwritable.to_str().expect("utf-8");
    assert_eq!(
        bad_input(&["conform", "--client", "true", "--json", unwritable]),
        format!("error: {unwritable}: No such file or directory (os error 2)"),
        "an output that cannot be written stops conform before any read"
    );
    let bad = dir.path().join("bad.txt");
    let cases = [
        ("## a\n# tests a\ntopic t 1\nsend p t 0 v\nread t 0 0\n", "4: send p: no producer p is declared above"),
        ("## a\n# tests a\ntopic t 1\nproducer p\nread t 0 0\nsend p t 1 v\n", "6: topic t has 1 partition(s): no partition 1"),
        ("## a\ntopic t 1\n", "2: layout a must say what it tests: a '# ...' line after '## a'"),
        ("## a\n# tests a\nproducer p linger.ms=5\n", "3: linger.ms=5: a producer takes compression.type=none|gzip|snappy|lz4|zstd and (transactional only) transaction.version=1|2"),
        ("## a\n# tests a\ntopic t 1\nfrobnicate t\n", "4: cannot read \"frobnicate t\": steps are topic, producer, plain, init, begin, flush, commit, abort, send, roll, delete-records and read (docs/conform.md)"),
        ("## a\n# tests a\ntopic t 1\n", "1: layout a has no 'read T PART FROM'"),
        // The engine refuses the step: a commit with no transaction begun.
        ("## a\n# tests a\ntopic t 1\nproducer p\ninit p\ncommit p\nread t 0 0\n", "6: layout a: Commit by p: the engine answered InvalidTxnState"),
    ];
    for (text, want) in cases {
        std::fs::write(&bad, text).expect("write the catalogue");
        let line = bad_input(&["conform", "--client", "true", "--layouts", bad.to_str().expect("utf-8")]);
        assert_eq!(line, format!("error: {}:{want}", bad.display()), "for:\n{text}");
    }
}

/// A command that does not exist, or prints what is not the protocol, is an adapter error with its
/// stderr's tail: exit 2, never a pass.
#[test]
fn an_adapter_that_breaks_the_protocol_is_an_adapter_error() {
    let cases = [
        ("no-such-adapter-command", "adapter error: printed nothing (exit 127)", "not found"),
        ("echo not json; echo oops >&2", "adapter error: stdout line 1: not a JSON object: \"not json\"", "oops"),
        (
            "echo '{\"client\":\"c\",\"version\":\"1\"}'",
            "adapter error: no final {\"position\":...} line (exit 0, 0 record line(s))",
            "",
        ),
    ];
    for (command, want, stderr) in cases {
        let (code, out, err) = txnsim(&["conform", "--client", command, "--only", "open-lso"], RUN_LIMIT);
        assert_eq!(code, 2, "{command}: an adapter error exits 2\nstdout:\n{out}\nstderr:\n{err}");
        let line = format!("[1] open-lso: conform-open-lso-t/0 from 0 read_committed: {want}\n");
        assert!(out.contains(&line), "{command}: want {line}got:\n{out}");
        assert!(out.contains("open-lso  ADAPTER ERROR\n"), "{out}");
        assert!(out.contains(stderr), "{command}: the stderr tail is shown: {out}");
    }
}

/// A client whose API cannot tell its position says so (`"position":null`): its records are still held
/// to the reference (read_committed passes, read_uncommitted misses o1), and the report says the position
/// was not compared instead of passing it silently.
#[test]
fn a_position_the_client_cannot_tell_is_noted_not_compared() {
    let client = r#"head -1 >/dev/null; echo '{"client":"c","version":"1"}'; echo '{"offset":0,"value":"c1"}'; echo '{"position":null,"why":"no API"}'"#;
    let dir = tempfile::tempdir().expect("a temporary folder");
    let json = dir.path().join("conform.json");
    let args = ["conform", "--client", client, "--only", "open-lso", "--json", json.to_str().expect("utf-8")];
    let (code, out, err) = txnsim(&args, RUN_LIMIT);
    assert_eq!(code, 1, "read_uncommitted misses a record\nstdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("[1] position not compared in 2 read(s): no API\n"), "{out}");
    let report = assert_valid("conform.schema.json", &json);
    let reads = &report["cells"][0]["reads"];
    assert_eq!(
        (reads[0]["verdict"].as_str(), reads[0]["detail"].as_str()),
        (Some("pass"), Some("position not reported: no API"))
    );
    assert_eq!(reads[1]["detail"], "missing: offset 2 (\"o1\") not delivered");
}
