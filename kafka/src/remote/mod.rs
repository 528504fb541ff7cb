//! `txnsim sweep --target kafka://HOST:PORT[,HOST:PORT...]`: the sim's workload profiles, drawn from each
//! seed as the sim draws them, run against a real Kafka-protocol cluster through librdkafka, with the
//! faults a client can cause; the recorded history and the logs read back over the wire go through the
//! same history invariants. Exit codes as `sweep`: 0 pass, 1 a violation, 2 bad input (or a cluster
//! that cannot be used).
//!
//! - `exec`: one seed's workload through librdkafka.
//! - `wire`: CreateTopics, and the raw read_uncommitted Fetch that rebuilds the partition logs.
//! - `relay`: the loopback relay through which the drop-connections fault cuts every connection.
//! - `file`: the saved history, the invariants checked, and `txnsim check-history`.

pub mod exec;
pub mod file;
pub mod relay;
pub mod wire;

use file::{HistoryFile, SavedSeed, CHECKED, HISTORY_FORMAT};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use txnsim_sim::cli::Progress;
use txnsim_sim::Profile;

/// The `format` field of `sweep --target --json`.
pub const TARGET_SWEEP_FORMAT: &str = "txnsim-target-sweep/v1";

/// What `sweep --target` was asked to do.
pub struct TargetArgs {
    pub target: String,
    pub seeds: u64,
    pub from: u64,
    pub profile: Profile,
    /// Seeds run at once, each with its own clients, topics and transactional ids.
    pub jobs: usize,
    pub history: Option<PathBuf>,
    /// Also write the report as JSON to this file, or to stdout with `-` (the text then goes to stderr).
    pub json: Option<PathBuf>,
    /// How long the LSO may take to reach the HW after every transaction ended (`--settle-ms`).
    pub settle: std::time::Duration,
}

/// The brokers of a `kafka://HOST:PORT[,HOST:PORT...]` URL.
pub fn parse_target(url: &str) -> Result<Vec<String>, String> {
    let rest = url
        .strip_prefix("kafka://")
        .ok_or_else(|| format!("--target {url:?}: expected kafka://HOST:PORT[,HOST:PORT...]"))?;
    rest.split(',')
        .map(|addr| {
            let (host, port) =
                addr.rsplit_once(':').ok_or_else(|| format!("--target {url:?}: {addr:?} has no :PORT"))?;
            let port: u16 = port.parse().map_err(|_| format!("--target {url:?}: {port:?} is not a port"))?;
            if host.is_empty() || port == 0 || host.contains('/') {
                return Err(format!("--target {url:?}: {addr:?} is not HOST:PORT"));
            }
            Ok(format!("{host}:{port}"))
        })
        .collect()
}

#[derive(Serialize)]
struct SeedJson<'a> {
    seed: u64,
    passed: bool,
    faults: Vec<&'static str>,
    counts: &'a exec::Counts,
    elapsed_ms: u64,
    violations: Vec<ViolationJson>,
}

#[derive(Serialize)]
struct ViolationJson {
    invariant: &'static str,
    /// The first witness; `count` is how many times the invariant was violated in the seed.
    witness: String,
    count: usize,
}

#[derive(Serialize)]
struct NotCheckedJson {
    invariant: &'static str,
    why: &'static str,
}

#[derive(Serialize)]
struct SweepJson<'a> {
    format: &'static str,
    target: &'a str,
    profile: &'static str,
    run: &'a str,
    checked: Vec<&'static str>,
    not_checked: Vec<NotCheckedJson>,
    seeds: Vec<SeedJson<'a>>,
    totals: exec::Counts,
    history_file: Option<String>,
    passed: bool,
}

fn bad_input(msg: &str) -> ExitCode {
    eprintln!("error: {msg}");
    ExitCode::from(2)
}

/// A run's tag: the wall clock in milliseconds, in hex, so topics of two runs never mix.
fn run_tag() -> String {
    let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    format!("{ms:x}")
}

pub fn run_target_sweep(args: &TargetArgs) -> ExitCode {
    let brokers = match parse_target(&args.target) {
        Ok(b) => b,
        Err(e) => return bad_input(&e),
    };
    let Some(last) = args.from.checked_add(args.seeds - 1) else {
        return bad_input("--from + --seeds overflows");
    };
    let mut json_out = match args.json.as_deref().filter(|p| *p != Path::new("-")).map(std::fs::File::create) {
        Some(Err(e)) => return bad_input(&format!("--json: {e}")),
        Some(Ok(f)) => Some(f),
        None => None,
    };
    let json_stdout = args.json.as_deref() == Some(Path::new("-"));
    // The text report goes to stderr when stdout carries the JSON.
    let mut out: Box<dyn Write> = if json_stdout { Box::new(std::io::stderr()) } else { Box::new(std::io::stdout()) };
    let run = run_tag();
    let profile = args.profile;
    let _ = writeln!(
        out,
        "sweep --target {}: profile {profile}, seeds {}..={last}, topics and transactional ids txnsim-{run}-s<seed>-*",
        args.target, args.from
    );
    let mut progress = Progress::stderr(args.seeds);
    let mut saved = Vec::new();
    let mut failing = Vec::new();
    let mut seeds_json_data = Vec::new();
    let mut totals = exec::Counts::default();
    // Workers take seeds in order; the report takes their results in seed order, whatever finishes first.
    let (next, stop) = (AtomicU64::new(0), AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let failed = std::thread::scope(|scope| {
        for _ in 0..args.jobs.min(args.seeds as usize) {
            let (tx, next, stop, brokers, run) = (tx.clone(), &next, &stop, &brokers, &run);
            scope.spawn(move || loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= args.seeds || stop.load(Ordering::Relaxed) {
                    break;
                }
                let seed = args.from + index;
                let target = exec::Target { brokers, prefix: format!("txnsim-{run}-s{seed}"), settle: args.settle };
                let result = exec::run_seed(&target, profile, seed).and_then(|r| {
                    let v = file::check_seed(&r.history, &r.logs)?;
                    Ok((r, v))
                });
                if tx.send((seed, result)).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        let mut ready = std::collections::BTreeMap::new();
        let mut seed = args.from;
        for (s, result) in rx {
            ready.insert(s, result);
            while let Some(result) = ready.remove(&seed) {
                let (r, violations) = match result {
                    Ok(x) => x,
                    Err(e) => {
                        stop.store(true, Ordering::Relaxed);
                        return Some(format!("seed {seed}: {e}"));
                    }
                };
                add(&mut totals, &r.counts);
                let c = &r.counts;
                let faults: Vec<&'static str> = r.faults.iter().map(|f| f.name()).collect();
                let _ = writeln!(
                    out,
                    "seed {seed}: {} committed, {} aborted, {} timed out, {} fenced, {} polls, faults [{}], {}",
                    c.committed,
                    c.aborted,
                    c.timed_out,
                    c.fenced,
                    c.polls,
                    faults.join(","),
                    if violations.is_empty() {
                        "pass".to_string()
                    } else {
                        format!("{} violation(s)", violations.len())
                    },
                );
                let found = file::summarize(&violations);
                for f in &found {
                    let _ = writeln!(
                        out,
                        "VIOLATION seed {seed}: {} (seen {} times): {}",
                        f.invariant.name(),
                        f.count,
                        f.witness
                    );
                }
                let saved_seed = SavedSeed::of(seed, &r);
                if !found.is_empty() {
                    failing.push(seeds_json_data.len());
                }
                seeds_json_data.push((seed, r.faults.clone(), r.counts.clone(), r.elapsed.as_millis() as u64, found));
                saved.push(saved_seed);
                progress.update(seed - args.from + 1, failing.len() as u64);
                seed += 1;
            }
        }
        None
    });
    if let Some(e) = failed {
        progress.finish();
        return bad_input(&e);
    }
    progress.finish();

    let _ = writeln!(out, "checked: {}", CHECKED.map(|i| i.name()).join(", "));
    // One line per reason, naming every invariant it keeps from being checked.
    let mut reasons: Vec<(&str, Vec<&str>)> = Vec::new();
    for (i, why) in file::not_checked() {
        match reasons.iter_mut().find(|(w, _)| *w == why) {
            Some((_, names)) => names.push(i.name()),
            None => reasons.push((why, vec![i.name()])),
        }
    }
    for (why, names) in reasons {
        let _ = writeln!(out, "not checked ({why}): {}", names.join(", "));
    }
    let _ = writeln!(
        out,
        "totals: {} seeds, {} committed, {} aborted, {} timed out, {} fenced, {} polls, {} records delivered, {} faults",
        args.seeds, totals.committed, totals.aborted, totals.timed_out, totals.fenced, totals.polls, totals.delivered, totals.faults
    );

    // Every seed goes to --history; a failing sweep without it saves its failing seeds where it says.
    let history_path = match (&args.history, failing.is_empty()) {
        (Some(p), _) => Some(p.clone()),
        (None, false) => Some(std::env::temp_dir().join(format!("txnsim-target-{run}.history.json"))),
        (None, true) => None,
    };
    if let Some(path) = &history_path {
        let seeds = if args.history.is_some() {
            saved
        } else {
            let keep: Vec<u64> = failing.iter().map(|&k| seeds_json_data[k].0).collect();
            saved.into_iter().filter(|s| keep.contains(&s.seed)).collect()
        };
        let f = HistoryFile {
            format: HISTORY_FORMAT.to_string(),
            target: args.target.clone(),
            profile: profile.name().to_string(),
            seeds,
        };
        if let Err(e) = file::save(path, &f) {
            return bad_input(&format!("--history: {e}"));
        }
        let _ = writeln!(out, "history: {}", path.display());
    }
    let passed = failing.is_empty();
    if passed {
        let _ = writeln!(out, "PASS: {} seeds, no violation", args.seeds);
    } else {
        let seeds: Vec<String> = failing.iter().map(|&k| seeds_json_data[k].0.to_string()).collect();
        let path = history_path.as_ref().expect("a failing sweep saves its history");
        let _ = writeln!(
            out,
            "FAIL: {} of {} seeds violated an invariant (seeds {})",
            failing.len(),
            args.seeds,
            seeds.join(", ")
        );
        let _ = writeln!(out, "re-check offline: txnsim check-history {}", path.display());
    }
    if json_out.is_some() || json_stdout {
        let report = SweepJson {
            format: TARGET_SWEEP_FORMAT,
            target: &args.target,
            profile: profile.name(),
            run: &run,
            checked: CHECKED.map(|i| i.name()).to_vec(),
            not_checked: file::not_checked()
                .into_iter()
                .map(|(i, why)| NotCheckedJson { invariant: i.name(), why })
                .collect(),
            seeds: seeds_json_data
                .iter()
                .map(|(seed, faults, counts, elapsed_ms, found)| SeedJson {
                    seed: *seed,
                    passed: found.is_empty(),
                    faults: faults.iter().map(|f| f.name()).collect(),
                    counts,
                    elapsed_ms: *elapsed_ms,
                    violations: found
                        .iter()
                        .map(|f| ViolationJson {
                            invariant: f.invariant.name(),
                            witness: f.witness.clone(),
                            count: f.count,
                        })
                        .collect(),
                })
                .collect(),
            totals,
            history_file: history_path.map(|p| p.display().to_string()),
            passed,
        };
        let text = serde_json::to_string_pretty(&report).expect("the report serializes") + "\n";
        let written = match json_out.as_mut() {
            Some(f) => f.write_all(text.as_bytes()),
            None => std::io::stdout().write_all(text.as_bytes()),
        };
        if let Err(e) = written {
            return bad_input(&format!("--json: {e}"));
        }
    }
    if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn add(totals: &mut exec::Counts, c: &exec::Counts) {
    totals.ops += c.ops;
    totals.committed += c.committed;
    totals.aborted += c.aborted;
    totals.timed_out += c.timed_out;
    totals.fenced += c.fenced;
    totals.polls += c.polls;
    totals.delivered += c.delivered;
    totals.faults += c.faults;
}
