//! One run of an adapter (contract 1 of docs/conform.md, txnsim-conform/v1): `sh -c CMD` gets one JSON
//! request on stdin and prints its client's deliveries, one JSON object a line. Every run is bounded: an
//! adapter still running `GRACE` past its request's `timeout_ms` is killed with its process group.

use serde::Serialize;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub const FORMAT: &str = "txnsim-conform/v1";
/// How long past `timeout_ms` an adapter may take to print and exit (a JVM's or a venv's start included).
const GRACE: Duration = Duration::from_secs(15);
/// How much of an adapter's stderr a report keeps: its last lines, up to this many characters.
const STDERR_TAIL: usize = 600;

#[derive(Clone, Debug, Serialize)]
pub struct Request {
    pub format: &'static str,
    pub bootstrap: String,
    pub topic: String,
    pub partition: u32,
    pub start_offset: u64,
    pub isolation: &'static str,
    pub stop_offset: u64,
    pub max_records: u64,
    pub timeout_ms: u64,
}

/// A record the client handed its application.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Delivered {
    pub offset: u64,
    pub value: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// The client read: its deliveries and its position (`None`, and why, when its API cannot tell).
    Read { records: Vec<Delivered>, position: Option<u64>, position_unknown: Option<String> },
    /// The client cannot read at the requested isolation level.
    Unsupported { why: String },
    /// The client failed the read (`{"error":...}`, exit 1).
    ClientError { error: String },
    /// The adapter broke its contract: it did not start, printed something else, or did not exit in time.
    AdapterError { why: String, stderr: String },
}

/// What an adapter said of its client (`{"client":...,"version":...}`), if it got that far.
pub type ClientName = Option<(String, String)>;

/// Runs `command` once for `request`.
pub fn run(command: &str, request: &Request) -> (ClientName, Outcome) {
    let adapter_error = |why: String, stderr: &str| (None, Outcome::AdapterError { why, stderr: tail(stderr) });
    let mut child = match Command::new("sh")
        .args(["-c", command])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return adapter_error(format!("cannot start sh: {e}"), ""),
    };
    let line = serde_json::to_string(request).expect("a request serializes") + "\n";
    let mut stdin = child.stdin.take().expect("piped");
    let writer = std::thread::spawn(move || {
        // An adapter that exits without reading its request closes the pipe: the write fails and its exit
        // says what went wrong. SIGPIPE is blocked in this thread alone (txnsim keeps the default, to die
        // quietly under `head`), and one still pending when the thread ends goes with it.
        // SAFETY: a signal mask for the calling thread, built with the libc calls meant for it.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGPIPE);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
        stdin.write_all(line.as_bytes()).ok();
    });
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out = std::thread::spawn(move || read_all(&mut stdout));
    let err = std::thread::spawn(move || read_all(&mut stderr));
    let deadline = Instant::now() + Duration::from_millis(request.timeout_ms) + GRACE;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                // SAFETY: kill(2) on the adapter's own process group (process_group(0) above made it).
                unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                child.wait().ok();
                break None;
            }
        }
    };
    writer.join().ok();
    let (stdout, stderr) = (out.join().unwrap_or_default(), err.join().unwrap_or_default());
    let Some(status) = status else {
        let secs = (Duration::from_millis(request.timeout_ms) + GRACE).as_secs();
        return adapter_error(format!("still running {secs} s after it started (killed)"), &stderr);
    };
    match parse(&stdout, status.code()) {
        Ok((client, outcome)) => (Some(client), outcome),
        Err(why) => adapter_error(why, &stderr),
    }
}

fn read_all(r: &mut impl Read) -> String {
    let mut bytes = Vec::new();
    r.read_to_end(&mut bytes).ok();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The last lines of `stderr`, at most `STDERR_TAIL` characters.
fn tail(stderr: &str) -> String {
    let chars: Vec<char> = stderr.trim_end().chars().collect();
    chars[chars.len().saturating_sub(STDERR_TAIL)..].iter().collect()
}

/// An adapter's stdout and exit code, read by the contract; why not, if they break it.
fn parse(stdout: &str, code: Option<i32>) -> Result<((String, String), Outcome), String> {
    let mut lines = stdout.lines().filter(|l| !l.trim().is_empty()).enumerate();
    let json = |(i, l): (usize, &str)| {
        serde_json::from_str::<serde_json::Value>(l)
            .ok()
            .filter(|v| v.is_object())
            .ok_or_else(|| format!("stdout line {}: not a JSON object: {:?}", i + 1, cut(l)))
    };
    let exit = code.map_or("a signal".to_string(), |c| format!("exit {c}"));
    let first = lines.next().ok_or(format!("printed nothing ({exit})"))?;
    let first = json(first)?;
    let client = match (first["client"].as_str(), first["version"].as_str()) {
        (Some(c), Some(v)) => (c.to_string(), v.to_string()),
        _ => return Err(format!("the first line is not {{\"client\":...,\"version\":...}}: {first}")),
    };
    let mut records = Vec::new();
    for line in lines {
        let n = line.0 + 1;
        let v = json(line)?;
        let last = |outcome: Outcome, want: i32| match code == Some(want) {
            true => Ok((client.clone(), outcome)),
            false => Err(format!("stdout line {n}: {v} must end the output with exit {want} ({exit})")),
        };
        if let Some(why) = v.get("unsupported") {
            return last(Outcome::Unsupported { why: text(why) }, 3);
        }
        if let Some(error) = v.get("error") {
            return last(Outcome::ClientError { error: text(error) }, 1);
        }
        if let Some(p) = v.get("position") {
            let (position, position_unknown) = match (p.as_u64(), p.is_null()) {
                (Some(p), _) => (Some(p), None),
                (None, true) => (None, Some(v.get("why").map_or("no reason given".into(), text))),
                _ => return Err(format!("stdout line {n}: position {p} is neither an offset nor null")),
            };
            return last(Outcome::Read { records, position, position_unknown }, 0);
        }
        match (v["offset"].as_u64(), v["value"].as_str()) {
            (Some(offset), Some(value)) => records.push(Delivered { offset, value: value.to_string() }),
            _ => return Err(format!("stdout line {n}: not a record {{\"offset\":N,\"value\":\"...\"}}: {v}")),
        }
    }
    Err(format!("no final {{\"position\":...}} line ({exit}, {} record line(s))", records.len()))
}

fn text(v: &serde_json::Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

fn cut(s: &str) -> String {
    s.chars().take(120).collect()
}
