//! `txnsim sweep` and `txnsim replay`.

use crate::profile::Profile;
use crate::run::{run_seed, RunSpec};
use crate::seeds;
use crate::sweep::{self, SweepSpec};
use clap::Args;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use txnsim_engine::Mutation;

fn parse_profile(s: &str) -> Result<Profile, String> {
    Profile::from_name(s).ok_or_else(|| format!("unknown profile '{s}'; known: {}", Profile::names()))
}

pub fn parse_mutation(s: &str) -> Result<Mutation, String> {
    Mutation::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = Mutation::ALL.iter().map(|m| m.name()).collect();
        format!("unknown mutation '{s}'; known: {}", names.join(", "))
    })
}

fn default_jobs() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

#[derive(Args, Debug, Clone)]
pub struct SweepArgs {
    /// How many seeds to run.
    #[arg(long, default_value_t = 1000)]
    pub seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    pub from: u64,
    /// Workload profile: standard, contention, long-txns, timeouts, atomicity.
    #[arg(long, default_value = "standard", value_parser = parse_profile)]
    pub profile: Profile,
    /// Run with one injected historical bug (see `txnsim mutations`).
    #[arg(long, value_parser = parse_mutation)]
    pub mutation: Option<Mutation>,
    /// Parallel workers (default: the number of cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Write each failing seed as seeds/<mutation>-<profile>-<seed>.toml.
    #[arg(long)]
    pub save: bool,
    /// Where --save writes seed files.
    #[arg(long, default_value = "seeds")]
    pub seeds_dir: PathBuf,
    /// How many failing seeds to print in full.
    #[arg(long, default_value_t = 10)]
    pub show_failures: usize,
}

#[derive(Args, Debug, Clone)]
pub struct ReplayArgs {
    /// The seed to replay.
    #[arg(long)]
    pub seed: u64,
    /// Workload profile: standard, contention, long-txns, timeouts, atomicity.
    #[arg(long, default_value = "standard", value_parser = parse_profile)]
    pub profile: Profile,
    /// Run with one injected historical bug (see `txnsim mutations`).
    #[arg(long, value_parser = parse_mutation)]
    pub mutation: Option<Mutation>,
    /// Also write the run (timeline, history, verdict) as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// A progress line on stderr: redrawn in place on a terminal, every tenth otherwise.
fn progress_printer(total: u64) -> impl FnMut(u64, u64) {
    let tty = std::io::stderr().is_terminal();
    let started = std::time::Instant::now();
    let mut last_tenth = u64::MAX;
    move |done, failed| {
        let width = 30u64;
        let filled = (done * width).checked_div(total).unwrap_or(width).min(width);
        let rate = done as f64 / started.elapsed().as_secs_f64().max(1e-9);
        let line = format!(
            "[{}{}] {done}/{total} seeds, {rate:.0} seeds/s, {failed} failed",
            "#".repeat(filled as usize),
            ".".repeat((width - filled) as usize)
        );
        let mut err = std::io::stderr();
        if tty {
            let _ = write!(err, "\r{line}");
            if done >= total {
                let _ = writeln!(err);
            }
        } else {
            let tenth = (done * 10).checked_div(total).unwrap_or(10);
            if tenth != last_tenth {
                last_tenth = tenth;
                let _ = writeln!(err, "{line}");
            }
        }
    }
}

pub fn run_sweep(args: &SweepArgs) -> ExitCode {
    let spec = SweepSpec {
        from: args.from,
        seeds: args.seeds,
        profile: args.profile,
        mutation: args.mutation,
        jobs: args.jobs.unwrap_or_else(default_jobs),
    };
    let result = sweep::run_sweep(&spec, progress_printer(spec.seeds));
    for line in sweep::summary_lines(&result, args.show_failures) {
        println!("{line}");
    }
    if args.save {
        for f in &result.failures {
            match seeds::save(&args.seeds_dir, f) {
                Ok(p) => println!("saved {}", p.display()),
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            }
        }
    }
    if result.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

pub fn run_replay(args: &ReplayArgs) -> ExitCode {
    let spec = RunSpec {
        seed: args.seed,
        profile: args.profile,
        mutation: args.mutation,
        trace: true,
        keep_history: args.json.is_some(),
    };
    let report = run_seed(&spec);
    let mutation = args.mutation.map(|m| m.name()).unwrap_or("none");
    println!("replay seed {} profile {} mutation {mutation}: {}", report.seed, report.profile, report.swarm);
    println!("columns: simulated time, node, event; broker lines end with LEO/HW/LSO per partition");
    for line in &report.timeline {
        println!("{line}");
    }
    let s = &report.stats;
    println!(
        "stats: simulated {} ms, {} ops, {} polls, {} messages, {} faults; committed {}, aborted {}, timed out {}, fenced {}",
        s.sim_ms, s.ops, s.polls, s.messages, s.faults, s.committed, s.aborted, s.timed_out, s.fenced
    );
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report).expect("the report serializes");
        if let Err(e) = std::fs::write(path, text) {
            eprintln!("error: {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    if report.passed() {
        println!("PASS seed {}: no invariant violated", report.seed);
        ExitCode::SUCCESS
    } else {
        println!("FAIL seed {}: {} invariant(s) violated", report.seed, report.found.len());
        for f in &report.found {
            println!("  {} (first at {} ms, seen {}x): {}", f.invariant, f.at_ms, f.count, f.witness);
        }
        ExitCode::from(1)
    }
}

/// The default sweep the main job runs: every profile, sized to finish in seconds in release.
pub fn main_job() -> Result<Vec<String>, Vec<String>> {
    let jobs = default_jobs();
    let mut lines = Vec::new();
    let mut ok = true;
    for (profile, seeds) in MAIN_JOB_SEEDS {
        let spec = SweepSpec { from: 0, seeds, profile, mutation: None, jobs };
        let result = sweep::run_sweep(&spec, |_, _| {});
        ok &= result.passed();
        lines.extend(sweep::summary_lines(&result, 5));
    }
    if ok {
        Ok(lines)
    } else {
        Err(lines)
    }
}

/// Seeds per profile in the main job's sweep.
pub const MAIN_JOB_SEEDS: [(Profile, u64); 5] = [
    (Profile::Standard, 2_000),
    (Profile::Contention, 500),
    (Profile::LongTxns, 500),
    (Profile::Timeouts, 500),
    (Profile::Atomicity, 500),
];
