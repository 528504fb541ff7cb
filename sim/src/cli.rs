//! `txnsim sweep` and `txnsim replay`. Exit codes: 0 pass, 1 a checker found a problem, 2 bad input
//! (neither command returns 3, incomplete: both run to the end).

use crate::profile::Profile;
use crate::run::{run_seed, RunReport, RunSpec};
use crate::seeds;
use crate::sweep::{self, SweepResult, SweepSpec};
use crate::trace::{render, Legend, TraceEvent};
use crate::world::{Found, Stats};
use clap::{ArgGroup, Args};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use txnsim_engine::{Mutation, Proposal};
use txnsim_properties::History;

/// The `format` field of `sweep --json` (schemas/sweep.schema.json).
pub const SWEEP_FORMAT: &str = "txnsim-sweep/v1";
/// The `format` field of `replay --json` (schemas/replay.schema.json); v1 was the raw report.
pub const REPLAY_FORMAT: &str = "txnsim-replay/v2";

/// More workers than this only adds threads: each runs one seed at a time on two OS threads.
pub const MAX_JOBS: usize = 1024;

fn parse_profile(s: &str) -> Result<Profile, String> {
    Profile::from_name(s).ok_or_else(|| format!("unknown profile '{s}'; known: {}", Profile::names()))
}

pub fn parse_mutation(s: &str) -> Result<Mutation, String> {
    Mutation::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = Mutation::ALL.iter().map(|m| m.name()).collect();
        format!("unknown mutation '{s}'; known: {}", names.join(", "))
    })
}

pub fn parse_proposal(s: &str) -> Result<Proposal, String> {
    Proposal::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = Proposal::ALL.iter().map(|p| p.name()).collect();
        format!("unknown proposal '{s}'; known: {}", names.join(", "))
    })
}

fn parse_jobs(s: &str) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|_| format!("'{s}' is not a number of workers"))?;
    if n == 0 || n > MAX_JOBS {
        return Err(format!("{n} workers: give 1 to {MAX_JOBS}"));
    }
    Ok(n)
}

/// A sweep of no seeds would pass having checked nothing, so it is refused.
fn parse_seeds(s: &str) -> Result<u64, String> {
    let n: u64 = s.parse().map_err(|_| format!("'{s}' is not a number of seeds"))?;
    if n == 0 {
        return Err("0 seeds checks nothing: give at least 1".into());
    }
    Ok(n)
}

fn default_jobs() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

#[derive(Args, Debug, Clone)]
pub struct SweepArgs {
    /// How many seeds to run (at least 1).
    #[arg(long, default_value_t = 1000, value_parser = parse_seeds)]
    pub seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    pub from: u64,
    /// Workload profile: standard, contention, long-txns, timeouts, atomicity, late-sends, single-broker, eos.
    #[arg(long, default_value = "standard", value_parser = parse_profile)]
    pub profile: Profile,
    /// Run with one injected historical bug (see `txnsim mutations`).
    #[arg(long, value_parser = parse_mutation)]
    pub mutation: Option<Mutation>,
    /// Run with a fix Kafka has not made (load-waits-for-hw: docs/sim-output.md).
    #[arg(long, value_parser = parse_proposal)]
    pub proposal: Option<Proposal>,
    /// Parallel workers, 1 to 1024 (default: the number of cores).
    #[arg(long, value_parser = parse_jobs)]
    pub jobs: Option<usize>,
    /// Write the kept failing seeds as seeds/<mutation>-<profile>-<seed>.toml.
    #[arg(long)]
    pub save: bool,
    /// Where --save writes seed files.
    #[arg(long, default_value = "seeds")]
    pub seeds_dir: PathBuf,
    /// How many failing seeds to print in full.
    #[arg(long, default_value_t = 10)]
    pub show_failures: usize,
    /// How many failing seeds (the lowest) to keep for --save and --json; the counts cover every seed.
    #[arg(long, default_value_t = 100)]
    pub keep_failures: usize,
    /// Fail on Kafka's known anomalies too (failures a --proposal fixes when their seed is replayed with it)
    #[arg(long)]
    pub strict: bool,
    /// Also write the sweep as JSON (format txnsim-sweep/v1) to this file, or to stdout with `-` (the
    /// text summary then goes to stderr).
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
#[command(group(ArgGroup::new("what").required(true).args(["seed", "file"])))]
pub struct ReplayArgs {
    /// A saved seed file (seeds/*.toml): replays its seed, profile and mutation.
    #[arg(conflicts_with_all = ["seed", "profile", "mutation", "proposal"])]
    pub file: Option<PathBuf>,
    /// The seed to replay.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Workload profile: standard, contention, long-txns, timeouts, atomicity, late-sends, single-broker, eos.
    #[arg(long, default_value = "standard", value_parser = parse_profile)]
    pub profile: Profile,
    /// Run with one injected historical bug (see `txnsim mutations`).
    #[arg(long, value_parser = parse_mutation)]
    pub mutation: Option<Mutation>,
    /// Run with a fix Kafka has not made (load-waits-for-hw: docs/sim-output.md).
    #[arg(long, value_parser = parse_proposal)]
    pub proposal: Option<Proposal>,
    /// Also write the run (events, verdict, history) as JSON, format txnsim-replay/v2, to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also write the run as one self-contained HTML page, as `scenario --show --html` does: each
    /// partition's log after every event that moved its LEO, HW or LSO (and at each violation), with what
    /// fresh read_uncommitted and read_committed readers deliver, and a control to step through.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

/// Renders the replay's HTML page (the binary's `txnsim::html`, which this crate cannot reach).
pub type PageFn<'a> = &'a dyn Fn(&RunSpec, &RunReport) -> Result<String, String>;

/// Where JSON goes: opened before the run, so a path that cannot be written fails at once.
enum JsonOut {
    Stdout,
    File(PathBuf, File),
}

impl JsonOut {
    fn open(path: &Path) -> Result<JsonOut, String> {
        if path == Path::new("-") {
            return Ok(JsonOut::Stdout);
        }
        File::create(path)
            .map(|f| JsonOut::File(path.to_path_buf(), f))
            .map_err(|e| format!("--json {}: {e}", path.display()))
    }

    fn write(self, value: &impl Serialize) -> Result<(), String> {
        let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())? + "\n";
        match self {
            JsonOut::Stdout => std::io::stdout().write_all(text.as_bytes()).map_err(|e| format!("stdout: {e}")),
            JsonOut::File(path, mut f) => f.write_all(text.as_bytes()).map_err(|e| format!("{}: {e}", path.display())),
        }
    }
}

fn bad_input(msg: &str) -> ExitCode {
    eprintln!("error: {msg}");
    ExitCode::from(2)
}

/// Sweep progress on stderr: an indicatif bar on a terminal; otherwise (a log, CI) one plain line at each
/// tenth, or each hundredth from `FINE_PROGRESS_SEEDS` seeds on (a tenth of 10,000,000 standard seeds is
/// about 40 minutes), without rates, so two runs write the same lines.
pub enum Progress<W: Write> {
    Bar(ProgressBar),
    Lines { out: W, total: u64, steps: u64, last_step: Option<u64> },
}

/// From this many seeds a log's progress lines come at each hundredth.
pub const FINE_PROGRESS_SEEDS: u64 = 100_000;

impl Progress<std::io::Stderr> {
    pub fn stderr(total: u64) -> Self {
        if !std::io::stderr().is_terminal() {
            return Progress::lines(std::io::stderr(), total);
        }
        Progress::Bar(seed_bar(total))
    }
}

/// The sweep's indicatif bar on stderr (drawn only on a terminal).
fn seed_bar(total: u64) -> ProgressBar {
    let bar = ProgressBar::new(total);
    let style =
        ProgressStyle::with_template("{bar:30} {pos}/{len} seeds, {per_sec}, {msg} [{elapsed} elapsed, {eta} left]")
            .expect("a valid template");
    bar.set_style(style);
    bar.set_message("0 failed");
    bar
}

impl<W: Write> Progress<W> {
    pub fn lines(out: W, total: u64) -> Self {
        let steps = if total >= FINE_PROGRESS_SEEDS { 100 } else { 10 };
        Progress::Lines { out, total, steps, last_step: None }
    }

    pub fn update(&mut self, done: u64, failed: u64) {
        match self {
            Progress::Bar(bar) => {
                bar.set_position(done);
                bar.set_message(format!("{failed} failed"));
            }
            Progress::Lines { out, total, steps, last_step } => {
                let step = (done * *steps).checked_div(*total).unwrap_or(*steps);
                if *last_step != Some(step) {
                    *last_step = Some(step);
                    let percent = (done * 100).checked_div(*total).unwrap_or(100);
                    let _ = writeln!(out, "sweep: {done}/{total} seeds ({percent}%), {failed} failed");
                }
            }
        }
    }

    pub fn finish(self) {
        if let Progress::Bar(bar) = self {
            bar.finish();
        }
    }
}

/// One failing seed in `sweep --json`.
#[derive(Serialize)]
pub struct FailureJson<'a> {
    seed: u64,
    swarm: &'a str,
    found: &'a [Found],
    #[serde(skip_serializing_if = "Option::is_none")]
    lost_load: Option<&'a str>,
    /// The proposal that makes this seed pass (Kafka's known anomaly it fixes), or null: a new failure.
    known_anomaly: Option<&'static str>,
    replay: String,
}

/// `sweep --json`: counts, the verdict and the kept failures (schemas/sweep.schema.json).
#[derive(Serialize)]
pub struct SweepJson<'a> {
    format: &'static str,
    verdict: &'static str,
    exit_code: u8,
    profile: &'static str,
    mutation: Option<&'static str>,
    proposal: Option<&'static str>,
    from: u64,
    seeds: u64,
    /// Seeds run: `seeds`, or fewer when a signal interrupted the sweep (verdict `incomplete`).
    seeds_run: u64,
    jobs: usize,
    failed: u64,
    /// Failing seeds that a proposal makes pass: Kafka's known anomalies, not new failures (unless --strict).
    known_anomalies: u64,
    strict: bool,
    first_failure_index: Option<u64>,
    by_invariant: &'a BTreeMap<String, u64>,
    totals: &'a Stats,
    wall_ms: u64,
    seeds_per_second: f64,
    /// The lowest failing seeds, at most --keep-failures of them.
    failures: Vec<FailureJson<'a>>,
}

fn verdict(passed: bool) -> (&'static str, u8) {
    if passed {
        ("pass", 0)
    } else {
        ("fail", 1)
    }
}

/// A sweep's verdict and exit code: an interrupted one is incomplete (3), whatever it found so far; known
/// anomalies alone pass unless `--strict`.
fn sweep_verdict(r: &SweepResult) -> (&'static str, u8) {
    if r.interrupted() {
        ("incomplete", 3)
    } else {
        verdict(r.unexplained() == 0 && (r.passed() || !r.spec.strict))
    }
}

pub fn sweep_json(r: &SweepResult) -> SweepJson<'_> {
    let s = &r.spec;
    let (verdict, exit_code) = sweep_verdict(r);
    SweepJson {
        format: SWEEP_FORMAT,
        verdict,
        exit_code,
        profile: s.profile.name(),
        mutation: s.mutation.map(|m| m.name()),
        proposal: s.proposal.map(|p| p.name()),
        from: s.from,
        seeds: s.seeds,
        seeds_run: r.ran,
        jobs: s.jobs,
        failed: r.failed,
        known_anomalies: r.known_failed,
        strict: s.strict,
        first_failure_index: r.first_failure_index(),
        by_invariant: &r.by_invariant,
        totals: &r.totals,
        wall_ms: r.wall.as_millis() as u64,
        seeds_per_second: r.seeds_per_second(),
        failures: r
            .failures
            .iter()
            .map(|f| FailureJson {
                seed: f.seed,
                swarm: &f.swarm,
                found: &f.found,
                lost_load: f.lost_load.as_deref(),
                known_anomaly: r.known.get(&f.seed).map(|p| p.name()),
                replay: s.run_spec(f.seed).replay_command(),
            })
            .collect(),
    }
}

/// The sweep `args` ask for, or why they are bad input.
pub fn sweep_spec(args: &SweepArgs) -> Result<SweepSpec, String> {
    // The last seed, u64::MAX, runs as `replay --seed` runs it (and as `sweep --target` takes the range).
    if args.from.checked_add(args.seeds.saturating_sub(1)).is_none() {
        return Err(format!("--from {} with --seeds {} runs past the last seed, {}", args.from, args.seeds, u64::MAX));
    }
    Ok(SweepSpec {
        from: args.from,
        seeds: args.seeds,
        profile: args.profile,
        mutation: args.mutation,
        proposal: args.proposal,
        jobs: args.jobs.unwrap_or_else(default_jobs),
        keep_failures: args.keep_failures.max(args.show_failures),
        strict: args.strict,
    })
}

/// The checked input and the opened JSON output, before anything runs.
fn prepare<S>(spec: Result<S, String>, json: Option<&Path>) -> Result<(S, Option<JsonOut>), String> {
    Ok((spec?, json.map(JsonOut::open).transpose()?))
}

/// Prints the text report: to stdout, or to stderr when the JSON goes to stdout (so stdout parses).
fn text_printer(json: &Option<JsonOut>) -> impl Fn(&str) {
    let to_stderr = matches!(json, Some(JsonOut::Stdout));
    move |line| if to_stderr { eprintln!("{line}") } else { println!("{line}") }
}

pub fn run_sweep(args: &SweepArgs) -> ExitCode {
    let (spec, json) = match prepare(sweep_spec(args), args.json.as_deref()) {
        Ok(x) => x,
        Err(e) => return bad_input(&e),
    };
    // A sweep can run for hours: a seed directory that cannot be made must fail before it, not after.
    if args.save {
        if let Err(e) = std::fs::create_dir_all(&args.seeds_dir) {
            return bad_input(&format!("--seeds-dir {}: {e}", args.seeds_dir.display()));
        }
    }
    let mut progress = Progress::stderr(spec.seeds);
    let result = sweep::run_sweep(&spec, |done, failed| progress.update(done, failed));
    progress.finish();
    let say = text_printer(&json);
    for line in sweep::summary_lines(&result, args.show_failures) {
        say(&line);
    }
    if args.save {
        for f in &result.failures {
            match seeds::save(&args.seeds_dir, f) {
                Ok(p) => say(&format!("saved {} (replay: cargo run --release -- replay {})", p.display(), p.display())),
                Err(e) => return bad_input(&e),
            }
        }
        if result.failed > result.failures.len() as u64 {
            say(&format!(
                "saved the lowest {} of {} failing seeds (--keep-failures)",
                result.failures.len(),
                result.failed
            ));
        }
    }
    if let Some(out) = json {
        if let Err(e) = out.write(&sweep_json(&result)) {
            return bad_input(&e);
        }
    }
    ExitCode::from(sweep_verdict(&result).1)
}

/// `replay --json`: the run as structured events with an explicit verdict.
#[derive(Serialize)]
pub struct ReplayJson<'a> {
    pub format: &'static str,
    pub verdict: &'static str,
    pub exit_code: u8,
    pub seed: u64,
    pub profile: &'a str,
    pub mutation: Option<&'a str>,
    pub proposal: Option<&'a str>,
    pub swarm: &'a str,
    pub replay: String,
    pub legend: Legend,
    pub found: &'a [Found],
    pub stats: &'a Stats,
    pub events: &'a [TraceEvent],
    pub history: Option<&'a History>,
}

impl<'a> ReplayJson<'a> {
    pub fn of(spec: &RunSpec, report: &'a RunReport) -> Self {
        let (verdict, exit_code) = verdict(report.passed());
        ReplayJson {
            format: REPLAY_FORMAT,
            verdict,
            exit_code,
            seed: report.seed,
            profile: &report.profile,
            mutation: report.mutation.as_deref(),
            proposal: report.proposal.as_deref(),
            swarm: &report.swarm,
            replay: spec.replay_command(),
            legend: Legend::of(&spec.profile.params()),
            found: &report.found,
            stats: &report.stats,
            events: &report.events,
            history: report.history.as_ref(),
        }
    }
}

/// What `args` ask to replay: a seed, or a seed file's seed, profile, mutation and proposal.
pub fn replay_spec(args: &ReplayArgs) -> Result<RunSpec, String> {
    let spec = match (&args.file, args.seed) {
        (Some(path), _) => seeds::load_file(path)?.run_spec()?,
        (None, Some(seed)) => RunSpec { proposal: args.proposal, ..RunSpec::new(seed, args.profile, args.mutation) },
        (None, None) => return Err("give --seed S or a seed file".into()),
    };
    Ok(RunSpec { trace: true, keep_history: args.json.is_some(), ..spec })
}

/// The replay as printed: header, legend, timeline, stats and verdict.
pub fn replay_lines(spec: &RunSpec, report: &RunReport) -> Vec<String> {
    let mutation = spec.mutation.map(|m| m.name()).unwrap_or("none");
    let proposal = spec.proposal.map(|p| format!(" proposal {}", p.name())).unwrap_or_default();
    let mut out = vec![format!(
        "replay seed {} profile {} mutation {mutation}{proposal}: {}",
        report.seed, report.profile, report.swarm
    )];
    out.push("nodes:".into());
    out.extend(Legend::of(&spec.profile.params()).lines());
    out.push("columns: simulated time, node, event; broker lines end with LEO/HW/LSO per partition".into());
    out.extend(render(&report.events));
    let s = &report.stats;
    out.push(format!(
        "stats: simulated {} ms, {} ops, {} polls, {} messages, {} faults; committed {}, aborted {}, timed out {}, fenced {}",
        s.sim_ms, s.ops, s.polls, s.messages, s.faults, s.committed, s.aborted, s.timed_out, s.fenced
    ));
    out.extend(crate::sweep::fault_lines(&s.fault_counts));
    if report.passed() {
        out.push(format!("PASS seed {}: no invariant violated", report.seed));
    } else {
        out.push(format!("FAIL seed {}: {} invariant(s) violated", report.seed, report.found.len()));
        for f in &report.found {
            out.push(format!("  {} (first at {} ms, seen {}x): {}", f.invariant, f.at_ms, f.count, f.witness));
        }
    }
    out
}

pub fn run_replay(args: &ReplayArgs, page: PageFn<'_>) -> ExitCode {
    let (spec, json) = match prepare(replay_spec(args), args.json.as_deref()) {
        Ok(x) => x,
        Err(e) => return bad_input(&e),
    };
    // Opened before the run, like the JSON file, so a path that cannot be written fails at once.
    let html = match &args.html {
        None => None,
        Some(p) => match File::create(p) {
            Ok(f) => Some((p, f)),
            Err(e) => return bad_input(&format!("--html {}: {e}", p.display())),
        },
    };
    let report = run_seed(&spec);
    let say = text_printer(&json);
    for line in replay_lines(&spec, &report) {
        say(&line);
    }
    if let Some(out) = json {
        if let Err(e) = out.write(&ReplayJson::of(&spec, &report)) {
            return bad_input(&e);
        }
    }
    if let Some((path, mut file)) = html {
        let written = page(&spec, &report).and_then(|text| file.write_all(text.as_bytes()).map_err(|e| e.to_string()));
        match written {
            Ok(()) => say(&format!("wrote {}", path.display())),
            Err(e) => return bad_input(&format!("--html {}: {e}", path.display())),
        }
    }
    ExitCode::from(verdict(report.passed()).1)
}

/// The default sweep the main job runs: every profile, sized to finish in seconds in release.
pub fn main_job() -> Result<Vec<String>, Vec<String>> {
    let jobs = default_jobs();
    let mut lines = Vec::new();
    let mut ok = true;
    for (profile, seeds) in MAIN_JOB_SEEDS {
        // A bar on a terminal only: the job's log stays its report.
        let mut progress = Progress::<std::io::Stderr>::Bar(seed_bar(seeds));
        let result = sweep::run_sweep(&SweepSpec::new(0, seeds, profile, None, jobs), |done, failed| {
            progress.update(done, failed)
        });
        progress.finish();
        // As `sweep` judges it (the job's sweeps are not --strict): a seed that a stated proposal makes pass
        // is Kafka's known anomaly, reported as such, not a failure of the job.
        ok &= sweep_verdict(&result).1 == 0;
        lines.extend(sweep::summary_lines(&result, 5));
    }
    if ok {
        Ok(lines)
    } else {
        Err(lines)
    }
}

/// Seeds per profile in the main job's sweep, from seed 0: every profile (a test keeps it so). The single
/// broker keeps the sweep it ran before replication.
pub const MAIN_JOB_SEEDS: [(Profile, u64); Profile::ALL.len()] = [
    (Profile::Standard, 2_000),
    (Profile::Contention, 500),
    (Profile::LongTxns, 500),
    (Profile::Timeouts, 500),
    (Profile::Atomicity, 500),
    (Profile::LateSends, 500),
    (Profile::SingleBroker, 2_000),
    (Profile::Eos, 500),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_terminal_progress_is_one_plain_line_per_tenth() {
        let mut buf = Vec::new();
        let mut p = Progress::lines(&mut buf, 40);
        for (done, failed) in [(0, 0), (0, 0), (3, 0), (4, 1), (5, 1), (20, 2), (21, 2), (39, 3), (40, 3), (40, 3)] {
            p.update(done, failed);
        }
        p.finish();
        let text = String::from_utf8(buf).expect("utf-8");
        assert_eq!(
            text,
            "sweep: 0/40 seeds (0%), 0 failed\n\
             sweep: 4/40 seeds (10%), 1 failed\n\
             sweep: 20/40 seeds (50%), 2 failed\n\
             sweep: 39/40 seeds (97%), 3 failed\n\
             sweep: 40/40 seeds (100%), 3 failed\n",
            "a repeated or same-tenth update must not print again, and no line may carry a rate"
        );
    }

    #[test]
    fn a_long_sweeps_log_gets_a_line_per_hundredth() {
        let mut buf = Vec::new();
        let mut p = Progress::lines(&mut buf, 200_000);
        for done in [0, 1_999, 2_000, 3_999, 4_000, 200_000] {
            p.update(done, 0);
        }
        let text = String::from_utf8(buf).expect("utf-8");
        assert_eq!(
            text,
            "sweep: 0/200000 seeds (0%), 0 failed\n\
             sweep: 2000/200000 seeds (1%), 0 failed\n\
             sweep: 4000/200000 seeds (2%), 0 failed\n\
             sweep: 200000/200000 seeds (100%), 0 failed\n",
            "from {FINE_PROGRESS_SEEDS} seeds on, a line at each hundredth and no other"
        );
    }

    #[test]
    fn the_main_job_sweeps_every_profile_once() {
        let swept: Vec<Profile> = MAIN_JOB_SEEDS.iter().map(|(p, _)| *p).collect();
        assert_eq!(swept, Profile::ALL.to_vec(), "txnsim run sweeps each profile, in the order sweep lists them");
    }

    #[test]
    fn jobs_and_seeds_are_refused_at_zero_and_jobs_above_the_cap() {
        assert!(parse_jobs("0").is_err(), "--jobs 0 has no worker to run a seed");
        assert!(parse_jobs("1025").is_err());
        assert_eq!(parse_jobs("2"), Ok(2));
        assert!(parse_jobs("-1").is_err());
        assert!(parse_seeds("0").is_err(), "--seeds 0 would pass having checked nothing");
        assert_eq!(parse_seeds("7"), Ok(7));
    }
}
