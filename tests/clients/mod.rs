//! Real Kafka clients for the tests that run them: a virtualenv under target/ with pinned clients from
//! PyPI, and Kafka's own Java client 4.3.1 from the Maven resolve of the real-Kafka harness. A failed
//! install or resolve fails the test and says why: nothing here is skipped. Every client runs bounded in
//! time, against any bootstrap address (`txnsim serve` or real Kafka).

use crate::common::wait_bounded;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;
use txnsim_kafka::apache_kafka::{run_bounded, Distribution};

/// The Python clients. The seed document ran confluent-kafka; kafka-python is independent of it (its own
/// protocol code) and supports transactions.
const PINS: [&str; 2] = ["confluent-kafka==2.16.1", "kafka-python==3.0.12"];
/// Each client program ends within this (its own reads are bounded at 10 s each).
pub const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);
const INSTALL_TIMEOUT: Duration = Duration::from_secs(300);

/// The seed document's printed lines (its English output, verbatim).
pub const SEED_LINES: &str = "\
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

static VENV: Mutex<Option<PathBuf>> = Mutex::new(None);

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
            "python3 -m venv {} failed ({status:?}): the client tests need Python 3 with venv",
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

/// Kafka 4.3.1's jars, resolved by Maven once per test process into target/tmp (the harness caches them
/// there across runs); a failed resolve fails the caller with Maven's reason.
pub fn kafka_distribution() -> &'static Distribution {
    static DIST: OnceLock<Result<Distribution, String>> = OnceLock::new();
    DIST.get_or_init(|| Distribution::resolve(Path::new(env!("CARGO_TARGET_TMPDIR"))))
        .as_ref()
        .unwrap_or_else(|e| panic!("Kafka 4.3.1 could not be resolved: {e}"))
}

/// `python` running `script` from scripts/ in the venv against `bootstrap`, with `args` after.
pub fn python(script: &str, bootstrap: &str, args: &[&str]) -> Command {
    let mut command = Command::new(venv().join("bin/python"));
    command
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts").join(script))
        .arg(bootstrap)
        .args(args)
        // The scripts import scripts/clients.py: no bytecode cache is left in the source tree.
        .env("PYTHONDONTWRITEBYTECODE", "1");
    command
}

/// Kafka's own Java client 4.3.1 running `experiment` of scripts/JavaClients.java (a single source file,
/// JEP 330) against `bootstrap`, with `args` after.
pub fn java(experiment: &str, bootstrap: &str, args: &[&str]) -> Command {
    let mut command = java_source("JavaClients.java");
    command.arg(experiment).arg(bootstrap).args(args);
    command
}

/// `java` running scripts/`source` (a single source file) with Kafka's Java client 4.3.1 on its classpath.
pub fn java_source(source: &str) -> Command {
    let classpath = kafka_distribution().client_classpath().unwrap_or_else(|e| panic!("Kafka's Java client: {e}"));
    let mut command = Command::new("java");
    command
        .args(txnsim_kafka::apache_kafka::QUICK_JVM)
        .args(["-cp", &classpath])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts").join(source));
    command
}

/// Starts a client; a missing `java` is named with what the test needs.
pub fn spawn(command: &mut Command, what: &str) -> Child {
    command.spawn().unwrap_or_else(|e| {
        let program = command.get_program().to_string_lossy().into_owned();
        let need = if program == "java" { ": the Java client tests need a JDK 17 or newer on PATH" } else { "" };
        panic!("cannot run {what} ({program}: {e}){need}")
    })
}

/// Runs a client to its end, bounded in time; returns its stdout, and fails with both streams if it
/// exits other than 0.
pub fn run(command: Command, what: &str) -> String {
    let (status, out, err) = output(command, what, SCRIPT_TIMEOUT);
    assert!(status.success(), "{what} exited {status}\nstdout:\n{out}\nstderr:\n{err}");
    out
}

/// Runs a client to its end within `limit` (it is killed and the test fails past it): its exit status,
/// stdout and stderr.
pub fn output(command: Command, what: &str, limit: Duration) -> (ExitStatus, String, String) {
    let program = command.get_program().to_string_lossy().into_owned();
    run_bounded(command, limit).unwrap_or_else(|e| {
        let need = if program == "java" { ": the Java client tests need a JDK 17 or newer on PATH" } else { "" };
        panic!("{what} ({program}): {e}{need}")
    })
}
