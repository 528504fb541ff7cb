//! The `txnsim` command line.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use txnsim::scenario::{self, RunOptions};
use txnsim_engine::{Mutation, Mutations};
use txnsim_properties::Invariant;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "txnsim",
    version,
    about = "Deterministic simulation and model checking of Kafka's transactional read isolation"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run scenario files (or folders of them); PASS/FAIL per scenario, exit 1 on a failure, 2 on bad input.
    Scenario {
        /// Scenario files or folders (every *.json below).
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Print a step table: each partition's log, LEO, HW, LSO and what fresh readers deliver after every op.
        #[arg(long)]
        show: bool,
        /// Run with one injected historical bug (see `txnsim mutations`).
        #[arg(long, value_parser = parse_mutation)]
        mutation: Option<Mutation>,
    },
    /// The main job: every scenario, a small exhaustive model check and a seed sweep, with one summary.
    Run {
        /// Where the scenario files are.
        #[arg(long, default_value = DEFAULT_SCENARIOS)]
        scenarios: PathBuf,
    },
    /// List the injectable historical bugs.
    Mutations,
    /// List the invariants: name, kind, statement, Kafka source, and the mutation that proves each bites.
    Invariants,
    /// Exhaustively check the stateright model (bounds as flags).
    Check(txnsim_model::cli::CheckArgs),
    /// Serve stateright's Explorer web UI for the model.
    Explore(txnsim_model::cli::ExploreArgs),
    /// Run a seed sweep of the madsim simulation: workloads, faults, history checking.
    Sweep(txnsim_sim::cli::SweepArgs),
    /// Replay one seed as a one-line-per-event timeline.
    Replay(txnsim_sim::cli::ReplayArgs),
    /// Serve the engine as a single Kafka broker on loopback, for real clients.
    Serve(txnsim_kafka::ServeArgs),
}

/// The corpus in this checkout, so `txnsim run` works from any directory.
const DEFAULT_SCENARIOS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/seeds/scenarios");

fn parse_mutation(s: &str) -> Result<Mutation, String> {
    Mutation::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = Mutation::ALL.iter().map(|m| m.name()).collect();
        format!("unknown mutation '{s}'; known: {}", names.join(", "))
    })
}

fn main() -> ExitCode {
    // Die quietly when a pager or `head` closes stdout, as Unix tools do, instead of panicking.
    // SAFETY: resetting a signal disposition to its default before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    match cli.command {
        Command::Scenario { paths, show, mutation } => run_scenarios(&paths, show, mutation),
        Command::Run { scenarios } => main_job(&scenarios),
        Command::Mutations => {
            for m in Mutation::ALL {
                println!("{}", m.name());
            }
            ExitCode::SUCCESS
        }
        Command::Invariants => {
            for i in Invariant::ALL {
                println!("{:<40} {:<9} {}", i.name(), format!("{:?}", i.kind()), i.statement());
                println!("{:<40} {:<9} source: {}; bites with mutation {}", "", "", i.source(), i.mutation().name());
            }
            ExitCode::SUCCESS
        }
        Command::Check(args) => {
            // SAFETY: the handler only stores to an atomic and restores the default disposition (both
            // async-signal-safe), so a second Ctrl-C kills at once; no other thread exists yet.
            unsafe {
                libc::signal(libc::SIGINT, on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t);
            }
            txnsim_model::cli::run_check(&args)
        }
        Command::Explore(args) => txnsim_model::cli::run_explore(&args),
        Command::Sweep(args) => txnsim_sim::cli::run_sweep(&args),
        Command::Replay(args) => txnsim_sim::cli::run_replay(&args),
        Command::Serve(args) => txnsim_kafka::run_serve(&args),
    }
}

/// Ctrl-C during `check`: report the partial run instead of dying silently.
extern "C" fn on_interrupt(_: libc::c_int) {
    txnsim_model::cli::INTERRUPTED.store(true, std::sync::atomic::Ordering::Relaxed);
    // SAFETY: signal() is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
    }
}

fn run_scenarios(paths: &[PathBuf], show: bool, mutation: Option<Mutation>) -> ExitCode {
    let mut files = Vec::new();
    for p in paths {
        match scenario::collect_files(p) {
            Ok(f) => files.extend(f),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if files.is_empty() {
        eprintln!(
            "error: no scenario files (*.json) under {}",
            paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        );
        return ExitCode::from(2);
    }
    // Parse everything first: bad input is reported before anything runs.
    let mut scenarios = Vec::new();
    for f in &files {
        match scenario::load(f) {
            Ok(s) => scenarios.extend(s),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let opts = RunOptions { mutations: mutation.map(Mutations::one).unwrap_or_default(), show };
    let (mut passed, mut failed) = (0, 0);
    for sc in &scenarios {
        let report = scenario::run(sc, &opts);
        if show {
            for line in &report.table {
                println!("{line}");
            }
        }
        match &report.difference {
            None => {
                passed += 1;
                println!("PASS {} ({})", sc.name, sc.file);
            }
            Some(d) => {
                failed += 1;
                println!("FAIL {} ({}): {d}", sc.name, sc.file);
            }
        }
        if show {
            println!();
        }
    }
    let with = mutation.map(|m| format!(" with mutation {}", m.name())).unwrap_or_default();
    println!("scenarios: {passed} passed, {failed} failed{with}");
    if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// `txnsim run`: the three checkers with their defaults, then one summary; exit 1 if any found a problem.
fn main_job(scenarios: &std::path::Path) -> ExitCode {
    let started = std::time::Instant::now();
    println!("== scenarios ({})", scenarios.display());
    let code = run_scenarios(&[scenarios.to_path_buf()], false, None);
    let scenario_line = if code == ExitCode::SUCCESS {
        "scenarios: all passed".to_string()
    } else {
        "scenarios: FAILED (see above)".to_string()
    };
    let mut ok = code == ExitCode::SUCCESS;
    let mut summary = vec![scenario_line];
    for (title, job) in [
        ("model check (small)", txnsim_model::cli::main_job as fn() -> Result<Vec<String>, Vec<String>>),
        ("seed sweep", txnsim_sim::cli::main_job),
    ] {
        println!("== {title}");
        let (passed, lines) = match job() {
            Ok(lines) => (true, lines),
            Err(lines) => (false, lines),
        };
        for l in &lines {
            println!("{l}");
        }
        ok &= passed;
        summary.push(format!("{title}: {}", if passed { "passed" } else { "FAILED" }));
    }
    println!("== summary ({:.1} s)", started.elapsed().as_secs_f64());
    for l in &summary {
        println!("  {l}");
    }
    if ok {
        println!("all checks passed");
        ExitCode::SUCCESS
    } else {
        println!("some checks FAILED");
        ExitCode::from(1)
    }
}
