//! Real Kafka clients against `txnsim serve`, in the gate. A virtualenv under target/ gets pinned
//! clients from PyPI (a failed install fails the test: nothing here is skipped), the server runs on a
//! free loopback port, each client script runs bounded in time, and its output must equal the expected
//! lines exactly. Both clients speak transaction.version 1 (neither librdkafka nor kafka-python has
//! KIP-890's TV2 client side), so these are TV1 tests.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

/// The clients under test. The seed document ran confluent-kafka; kafka-python is independent of it
/// (its own protocol code) and supports transactions.
const PINS: [&str; 2] = ["confluent-kafka==2.16.1", "kafka-python==3.0.12"];
/// Each client script ends within this (its own reads are bounded at 10 s each).
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);
const INSTALL_TIMEOUT: Duration = Duration::from_secs(300);

/// The seed document's printed lines (its English output, verbatim).
const SEED_LINES: &str = "\
read_uncommitted sees (before commit): ['inflight-0', 'inflight-1', 'inflight-2']
read_committed sees (before commit): []
read_committed sees (after commit): ['inflight-0', 'inflight-1', 'inflight-2']
read_uncommitted sees (before abort, transiently): ['aborted-0', 'aborted-1', 'aborted-2']
read_committed sees (after abort): []  (should be empty)

fresh read_uncommitted consumer reading from offset 0 sees ALL raw records:
  ['inflight-0', 'inflight-1', 'inflight-2', 'aborted-0', 'aborted-1', 'aborted-2']
fresh read_committed consumer reading from offset 0 sees only:
  ['inflight-0', 'inflight-1', 'inflight-2']
";

/// Commit [c-0, c-1] at 0..1 (marker 2), abort [a-0, a-1] at 3..4 (marker 5), commit [c-2] at 6 (marker 7).
const KAFKA_PYTHON_LINES: &str = "\
read_uncommitted from 0: [(0, 'c-0'), (1, 'c-1'), (3, 'a-0'), (4, 'a-1'), (6, 'c-2')]
read_committed from 0: [(0, 'c-0'), (1, 'c-1'), (6, 'c-2')]
";

static VENV: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Waits for `child` up to `limit`; kills it and fails if it takes longer.
fn wait_bounded(child: &mut Child, limit: Duration, what: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > deadline {
            child.kill().ok();
            child.wait().ok();
            panic!("{what} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The virtualenv with the pinned clients, made once per pin set and reused across runs.
fn venv() -> PathBuf {
    let mut guard = VENV.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(v) = guard.as_ref() {
        return v.clone();
    }
    let key: String = PINS.join("_").chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("wire-venv-{key}"));
    let ready = dir.join(".installed");
    if !ready.exists() {
        let status = Command::new("python3").args(["-m", "venv", "--clear"]).arg(&dir).status();
        assert!(
            status.as_ref().is_ok_and(|s| s.success()),
            "python3 -m venv {} failed ({status:?}): the wire tests need Python 3 with venv",
            dir.display()
        );
        let mut pip = Command::new(dir.join("bin/pip"))
            .args(["install", "--disable-pip-version-check", "--quiet"])
            .args(PINS)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run pip");
        let status = wait_bounded(&mut pip, INSTALL_TIMEOUT, "pip install");
        let mut err = String::new();
        pip.stderr.take().expect("piped").read_to_string(&mut err).ok();
        assert!(status.success(), "pip install {} failed ({status}): {err}", PINS.join(" "));
        std::fs::write(&ready, PINS.join("\n")).expect("mark the venv ready");
    }
    *guard = Some(dir.clone());
    dir
}

struct Server {
    child: Child,
    port: u16,
    timeline: PathBuf,
}

impl Server {
    fn start(name: &str) -> Server {
        let timeline = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-timeline.txt"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_txnsim"))
            .args(["serve", "--addr", "127.0.0.1:0", "--timeline"])
            .arg(&timeline)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start txnsim serve");
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            BufReader::new(stdout).read_line(&mut line).ok();
            tx.send(line).ok();
        });
        let line = rx.recv_timeout(Duration::from_secs(30)).expect("serve prints its address within 30 s");
        let port = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("127.0.0.1:"))
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no 127.0.0.1:PORT in serve's first line {line:?}"));
        Server { child, port, timeline }
    }

    /// Stops the server with SIGINT; returns its stderr and the timeline. Exit 0 means no state
    /// invariant was violated while the client ran.
    fn stop(mut self) -> (String, String) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGINT);
        }
        let status = wait_bounded(&mut self.child, Duration::from_secs(30), "txnsim serve after SIGINT");
        let mut err = String::new();
        self.child.stderr.take().expect("piped").read_to_string(&mut err).ok();
        assert!(status.success(), "serve exited {status} (1 = a state invariant was violated): {err}");
        let timeline = std::fs::read_to_string(&self.timeline).expect("serve wrote its timeline");
        (err, timeline)
    }
}

/// Runs a script from scripts/ against the server; returns its stdout.
fn run_script(script: &str, server: &Server) -> String {
    let python = venv().join("bin/python");
    let mut child = Command::new(python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts").join(script))
        .arg(format!("127.0.0.1:{}", server.port))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the client script");
    // Drain both pipes while waiting, so a chatty client cannot block on a full pipe.
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            r.read_to_string(&mut s).ok();
            s
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("piped")));
    let err = drain(Box::new(child.stderr.take().expect("piped")));
    let status = wait_bounded(&mut child, SCRIPT_TIMEOUT, script);
    let (out, err) = (out.join().expect("stdout"), err.join().expect("stderr"));
    assert!(status.success(), "{script} exited {status}\nstdout:\n{out}\nstderr:\n{err}");
    out
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

#[test]
fn confluent_kafka_prints_the_seed_documents_lines() {
    let server = Server::start("seed");
    let out = run_script("seed_experiment.py", &server);
    let (_, timeline) = server.stop();
    assert_eq!(out, SEED_LINES, "confluent-kafka against txnsim serve must print the seed document's lines");
    let pid = producer_id(&timeline);
    for want in [
        format!("writes COMMIT marker for pid {pid} at tx-demo/0@3"),
        format!("writes ABORT marker for pid {pid} at tx-demo/0@7"),
        format!("aborted index tx-demo/0: pid {pid} first 4 last 7 LSO 8"),
    ] {
        assert!(timeline.contains(&want), "the timeline lacks {want:?}:\n{timeline}");
    }
}

#[test]
fn kafka_python_commits_aborts_and_reads_both_levels() {
    let server = Server::start("kafka-python");
    let out = run_script("kafka_python_txn.py", &server);
    let (_, timeline) = server.stop();
    assert_eq!(out, KAFKA_PYTHON_LINES, "kafka-python's reads of commit, abort, commit");
    let pid = producer_id(&timeline);
    assert!(
        timeline.contains(&format!("aborted index kp-demo/0: pid {pid} first 3 last 5 LSO 6")),
        "the abort left one index entry:\n{timeline}"
    );
}
