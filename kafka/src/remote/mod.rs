//! `txnsim sweep --target kafka://HOST:PORT[,HOST:PORT...]|apache-kafka:N`: the sim's workload profiles,
//! drawn from each seed as the sim draws them, run against a real Kafka-protocol cluster through
//! librdkafka, with the faults a client can cause, and on a cluster the harness starts for the sweep
//! (`apache-kafka:N`) with node faults too (`--nemesis`); the recorded history and the logs read back
//! over the wire go through the same history invariants. Exit codes as `sweep`: 0 pass, 1 a violation,
//! 2 bad input (or a cluster that cannot be used).
//!
//! - `exec`: one seed's workload through librdkafka.
//! - `wire`: CreateTopics, and the raw read_uncommitted Fetch that rebuilds the partition logs.
//! - `relay`: the loopback relay through which the drop-connections fault cuts every connection.
//! - `nemesis`: the node faults (kill -9 and restart, SIGSTOP and SIGCONT, a cut link) and their draw.
//! - `file`: the saved history, the invariants checked, and `txnsim check-history`.

pub mod eos;
pub mod exec;
pub mod file;
pub mod nemesis;
pub mod relay;
pub mod wire;

use crate::apache_kafka::{ClusterSpec, Distribution, KafkaCluster};
use file::{HistoryFile, SavedSeed, HISTORY_FORMAT};
use nemesis::{Choice, NodeFault};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};
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
    /// `--nemesis LIST|auto|none` as given: only for an `apache-kafka:N` target.
    pub nemesis: Option<String>,
}

/// What `--target` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetSpec {
    /// A user's cluster, `kafka://HOST:PORT[,...]`: only the faults a client can cause.
    Brokers(Vec<String>),
    /// `apache-kafka:N`: N nodes of Apache Kafka 4.3.1 that the harness starts for the sweep and whose
    /// processes and links the nemesis can fault.
    Harness(usize),
}

/// Where `apache-kafka:N` resolves Kafka's jars (the tests' cache) and starts its nodes, under the
/// current directory: the repository's root, as README runs the binary.
const HARNESS_DIR: &str = "target/tmp";

/// Parses `--target`.
pub fn parse_target(url: &str) -> Result<TargetSpec, String> {
    if let Some(n) = url.strip_prefix("apache-kafka:") {
        return match n {
            "1" => Ok(TargetSpec::Harness(1)),
            "3" => Ok(TargetSpec::Harness(3)),
            _ => Err(format!("--target {url:?}: apache-kafka:N starts a cluster of 1 or 3 nodes")),
        };
    }
    let rest = url
        .strip_prefix("kafka://")
        .ok_or_else(|| format!("--target {url:?}: expected kafka://HOST:PORT[,HOST:PORT...] or apache-kafka:1|3"))?;
    let brokers = rest
        .split(',')
        .map(|addr| {
            let (host, port) =
                addr.rsplit_once(':').ok_or_else(|| format!("--target {url:?}: {addr:?} has no :PORT"))?;
            let port: u16 = port.parse().map_err(|_| format!("--target {url:?}: {port:?} is not a port"))?;
            if host.is_empty() || port == 0 || host.contains('/') {
                return Err(format!("--target {url:?}: {addr:?} is not HOST:PORT"));
            }
            Ok(format!("{host}:{port}"))
        })
        .collect::<Result<_, _>>()?;
    Ok(TargetSpec::Brokers(brokers))
}

#[derive(Serialize)]
struct SeedJson<'a> {
    seed: u64,
    passed: bool,
    faults: Vec<&'static str>,
    /// The node faults, with their times since the seed started.
    nemesis: &'a [NodeFault],
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
    /// Faults injected over the sweep, by kind (client faults and the nemesis's), as the sim counts them.
    faults_by_kind: &'a BTreeMap<String, u64>,
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

/// The nemesis `--nemesis` asks for on `target`; `--nemesis` on a user's cluster, or one kind that
/// cannot run there, is bad input.
fn nemesis_choice(args: &TargetArgs, target: &TargetSpec) -> Result<Choice, String> {
    let Some(flag) = args.nemesis.as_deref() else { return Ok(Choice::None) };
    let choice = Choice::parse(flag)?;
    match target {
        TargetSpec::Brokers(_) => Err(format!(
            "--nemesis needs a cluster the harness starts (--target apache-kafka:3): on {}, a cluster of \
             your own, only the faults a client can cause run",
            args.target
        )),
        TargetSpec::Harness(1) if matches!(&choice, Choice::List(k) if k.contains(&nemesis::NemesisKind::CutLink)) => {
            Err(format!("--nemesis {flag}: apache-kafka:1 has no link between nodes to cut"))
        }
        // The faults are the whole cluster's: two seeds at once would each see the other's.
        TargetSpec::Harness(_) if choice != Choice::None && args.jobs > 1 => {
            Err(format!("--nemesis {flag} runs one seed at a time: --jobs must be 1"))
        }
        TargetSpec::Harness(_) => Ok(choice),
    }
}

/// Starts `apache-kafka:N` for the sweep: in network namespaces when a seed may cut a link (root only;
/// the error says why not), on loopback otherwise.
fn start_harness(nodes: usize, choice: &Choice, run: &str) -> Result<(KafkaCluster, PathBuf), String> {
    // Absolute: each node runs in its own folder, and the classpath names the jars.
    let cache = std::env::current_dir().map_err(|e| format!("the current directory: {e}"))?.join(HARNESS_DIR);
    let dist = Distribution::resolve(&cache)?;
    let dir = cache.join(format!("apache-kafka-target-{run}"));
    let mut spec = ClusterSpec { nodes, netns: nodes > 1 && choice.may_cut_links(), ..ClusterSpec::seed() };
    spec.overrides.push(("replica.lag.time.max.ms".to_string(), nemesis::REPLICA_LAG_TIME_MAX_MS.to_string()));
    let cluster = KafkaCluster::start(&dist, &dir, &spec).map_err(|e| format!("--target apache-kafka:{nodes}: {e}"))?;
    Ok((cluster, dir))
}

pub fn run_target_sweep(args: &TargetArgs) -> ExitCode {
    let target = match parse_target(&args.target) {
        Ok(t) => t,
        Err(e) => return bad_input(&e),
    };
    let choice = match nemesis_choice(args, &target) {
        Ok(c) => c,
        Err(e) => return bad_input(&e),
    };
    let run = run_tag();
    let (brokers, harness) = match target {
        TargetSpec::Brokers(b) => (b, None),
        TargetSpec::Harness(nodes) => match start_harness(nodes, &choice, &run) {
            Ok((cluster, dir)) => (cluster.addresses(), Some((Mutex::new(cluster), dir))),
            Err(e) => return bad_input(&e),
        },
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
    let profile = args.profile;
    let _ = writeln!(
        out,
        "sweep --target {}: profile {profile}, seeds {}..={last}, topics and transactional ids txnsim-{run}-s<seed>-*",
        args.target, args.from
    );
    if let Some((cluster, dir)) = &harness {
        let cluster = cluster.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(
            out,
            "Apache Kafka {} started: {} node(s) at {}, logs under {}; nemesis {}",
            crate::apache_kafka::KAFKA_VERSION,
            cluster.node_count(),
            cluster.bootstrap(),
            dir.display(),
            args.nemesis.as_deref().unwrap_or("none")
        );
    }
    let mut progress = Progress::stderr(args.seeds);
    let mut saved = Vec::new();
    let mut failing = Vec::new();
    let mut seeds_json_data = Vec::new();
    let mut totals = exec::Counts::default();
    let mut by_kind: BTreeMap<String, u64> = BTreeMap::new();
    // Workers take seeds in order; the report takes their results in seed order, whatever finishes first.
    let (next, stop) = (AtomicU64::new(0), AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let failed = std::thread::scope(|scope| {
        for _ in 0..args.jobs.min(args.seeds as usize) {
            let (tx, next, stop, brokers, run) = (tx.clone(), &next, &stop, &brokers, &run);
            let nemesis = harness.as_ref().map(|(cluster, _)| (cluster, &choice));
            scope.spawn(move || loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= args.seeds || stop.load(Ordering::Relaxed) {
                    break;
                }
                let seed = args.from + index;
                let target =
                    exec::Target { brokers, prefix: format!("txnsim-{run}-s{seed}"), settle: args.settle, nemesis };
                let result = exec::run_seed(&target, profile, seed).and_then(|r| {
                    let v = file::check_seed_with(profile, &r.history, &r.logs, r.eos.as_ref())?;
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
                for (kind, n) in &r.by_kind {
                    *by_kind.entry(kind.clone()).or_insert(0) += n;
                }
                let c = &r.counts;
                let faults: Vec<&'static str> = r.faults.iter().map(|f| f.name()).collect();
                let nemesis = if r.nemesis.is_empty() {
                    String::new()
                } else {
                    format!(", nemesis [{}]", r.nemesis.iter().map(NodeFault::describe).collect::<Vec<_>>().join(", "))
                };
                let _ = writeln!(
                    out,
                    "seed {seed}: {} committed, {} aborted by clients, {} timed out, {} fenced, {} polls, faults [{}]{nemesis}, {}",
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
                if let (Some(e), Some(outcome)) = (&c.eos, &r.eos) {
                    let offsets: Vec<String> =
                        outcome.committed.iter().map(|(tp, o)| format!("{}={o}", tp.partition)).collect();
                    let _ = writeln!(
                        out,
                        "  eos seed {seed}: {}; group offsets of {}: [{}]",
                        e.describe(),
                        outcome.input_topic,
                        offsets.join(", ")
                    );
                }
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
                seeds_json_data.push((
                    seed,
                    (r.faults.clone(), r.nemesis.clone()),
                    r.counts.clone(),
                    r.elapsed.as_millis() as u64,
                    found,
                ));
                saved.push(saved_seed);
                progress.update(seed - args.from + 1, failing.len() as u64);
                seed += 1;
            }
        }
        None
    });
    if let Some(e) = failed {
        progress.finish();
        // The cluster's logs are kept: they may say why.
        return bad_input(&e);
    }
    progress.finish();

    let checked: Vec<&'static str> = file::checked(profile).into_iter().map(|i| i.name()).collect();
    let _ = writeln!(out, "checked: {}", checked.join(", "));
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
        "totals: {} seeds, {} committed, {} aborted by clients, {} timed out, {} fenced, {} polls, {} records delivered, {} faults",
        args.seeds, totals.committed, totals.aborted, totals.timed_out, totals.fenced, totals.polls, totals.delivered, totals.faults
    );
    if let Some(e) = &totals.eos {
        let _ = writeln!(out, "eos totals: {}", e.describe());
    }
    for line in txnsim_sim::sweep::fault_lines(&by_kind) {
        let _ = writeln!(out, "{line}");
    }

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
            checked: checked.clone(),
            not_checked: file::not_checked()
                .into_iter()
                .map(|(i, why)| NotCheckedJson { invariant: i.name(), why })
                .collect(),
            seeds: seeds_json_data
                .iter()
                .map(|(seed, (faults, nemesis), counts, elapsed_ms, found)| SeedJson {
                    seed: *seed,
                    passed: found.is_empty(),
                    faults: faults.iter().map(|f| f.name()).collect(),
                    nemesis,
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
            faults_by_kind: &by_kind,
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
        // A passing sweep's cluster leaves nothing behind; a failing one's logs stay, as the report said.
        if let Some((cluster, dir)) = harness {
            drop(cluster);
            std::fs::remove_dir_all(&dir).ok();
        }
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
    if let Some(e) = &c.eos {
        totals.eos.get_or_insert_with(Default::default).add(e);
    }
}
