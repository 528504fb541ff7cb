//! `txnsim serve` as a child process for the wire tests: on a free loopback port, stopped with SIGINT,
//! every wait bounded.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Waits for `child` up to `limit`; kills it and fails if it takes longer.
pub fn wait_bounded(child: &mut Child, limit: Duration, what: &str) -> std::process::ExitStatus {
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

#[allow(dead_code)] // tests/conform.rs starts no server: `txnsim conform` serves its own cluster.
pub struct Server {
    child: Child,
    /// Every broker's `127.0.0.1:PORT`, broker 0 first (more than one with `--brokers`).
    pub addresses: Vec<String>,
    timeline: PathBuf,
    /// serve's stdin, for `command`; its stdout lines after the first (each test binary compiles this
    /// module, and only `wire_clients` sends commands).
    #[allow(dead_code)]
    stdin: ChildStdin,
    #[allow(dead_code)]
    lines: mpsc::Receiver<String>,
}

#[allow(dead_code)] // As above.
impl Server {
    /// `txnsim serve` on a free port with its timeline in target/tmp/NAME-timeline.txt, plus `extra` flags.
    pub fn start(name: &str, extra: &[&str]) -> Server {
        let timeline = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-timeline.txt"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_txnsim"))
            .args(["serve", "--addr", "127.0.0.1:0", "--timeline"])
            .arg(&timeline)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start txnsim serve");
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = mpsc::channel();
        // Every stdout line, read until serve exits, so that serve never writes to a closed pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let line = rx.recv_timeout(Duration::from_secs(30)).expect("serve prints its address within 30 s");
        let ports: Vec<u16> = line
            .split_whitespace()
            .filter_map(|w| w.strip_prefix("127.0.0.1:"))
            .filter_map(|p| p.parse().ok())
            .collect();
        assert!(!ports.is_empty(), "no 127.0.0.1:PORT in serve's first line {line:?}");
        let addresses = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let stdin = child.stdin.take().expect("piped");
        Server { child, addresses, timeline, stdin, lines: rx }
    }

    /// One line on serve's stdin (`crash N`, `restart N`); the line serve prints for it, within 10 s.
    #[allow(dead_code)]
    pub fn command(&mut self, line: &str) -> String {
        writeln!(self.stdin, "{line}").expect("write to serve's stdin");
        self.lines.recv_timeout(Duration::from_secs(10)).unwrap_or_else(|e| panic!("serve answers {line:?}: {e}"))
    }

    /// Stops the server with SIGINT; returns its exit status (1 = a state invariant was violated while
    /// it ran), its stderr and the timeline.
    pub fn stop(mut self) -> (std::process::ExitStatus, String, String) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGINT);
        }
        let status = wait_bounded(&mut self.child, Duration::from_secs(30), "txnsim serve after SIGINT");
        let mut err = String::new();
        self.child.stderr.take().expect("piped").read_to_string(&mut err).ok();
        let timeline = std::fs::read_to_string(&self.timeline).expect("serve wrote its timeline");
        (status, err, timeline)
    }

    /// Stops the server and requires a clean exit: no state invariant was violated.
    pub fn stop_clean(self) -> String {
        let (status, err, timeline) = self.stop();
        assert!(status.success(), "serve exited {status} (1 = a state invariant was violated): {err}");
        timeline
    }
}

/// Runs txnsim with a bounded wait; its exit code, stdout and stderr.
#[allow(dead_code)] // Each test binary compiles this module; the client-only ones run no txnsim command.
pub fn txnsim(args: &[&str], limit: Duration) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_txnsim"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run txnsim");
    // Drain the pipes on threads so a long report cannot block the child.
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut s).ok();
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut s).ok();
        s
    });
    let status = wait_bounded(&mut child, limit, &format!("txnsim {}", args.join(" ")));
    (status.code().unwrap_or(-1), out.join().expect("stdout"), err.join().expect("stderr"))
}

/// Reads a JSON file and validates it against `schemas/<schema>`.
#[allow(dead_code)] // Only the target sweeps' tests read their reports.
pub fn assert_valid(schema: &str, path: &Path) -> serde_json::Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let schema_value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("schemas").join(schema)).expect("reads"))
            .expect("schema is JSON");
    let file: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).expect("the file reads"))
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    let validator = jsonschema::validator_for(&schema_value).expect("a schema");
    let errors: Vec<String> = validator.iter_errors(&file).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "{} does not match {schema}:\n{}", path.display(), errors.join("\n"));
    file
}
