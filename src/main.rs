//! The `txnsim` command line.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use txnsim::report;
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
        /// With --show: also write the steps as one self-contained HTML page (the log as offset cells,
        /// HW and LSO marks, both readers' deliveries, a control to step through the ops).
        #[arg(long, value_name = "FILE", requires = "show")]
        html: Option<PathBuf>,
        /// Run with one injected historical bug (see `txnsim mutations`).
        #[arg(long, value_parser = parse_mutation)]
        mutation: Option<Mutation>,
        /// Print the report as JSON (txnsim-scenario-report/v1, schemas/scenario.schema.json) instead.
        #[arg(long)]
        json: bool,
    },
    /// The main job: every scenario, a small exhaustive model check and a seed sweep, with one summary.
    Run {
        /// Where the scenario files are.
        #[arg(long, default_value = DEFAULT_SCENARIOS)]
        scenarios: PathBuf,
    },
    /// List the injectable historical bugs: mechanism, Kafka JIRA or KIP, and the invariants that catch each.
    Mutations {
        /// Print the list as JSON (txnsim-mutations/v1, schemas/mutations.schema.json).
        #[arg(long)]
        json: bool,
    },
    /// List the invariants: name, kind, statement, Kafka source, and the mutation that proves each bites.
    Invariants {
        /// Print the catalogue as JSON (txnsim-invariants/v1, schemas/invariants.schema.json).
        #[arg(long)]
        json: bool,
    },
    /// Exhaustively check the stateright model (bounds as flags).
    Check(txnsim_model::cli::CheckArgs),
    /// Serve stateright's Explorer web UI for the model.
    Explore(txnsim_model::cli::ExploreArgs),
    /// Run a seed sweep of the madsim simulation: workloads, faults, history checking.
    Sweep(SweepCmd),
    /// Re-check a `sweep --target` history file (its histories and logs) offline: exit 0 pass, 1 a
    /// violation, 2 a file it cannot read.
    CheckHistory {
        /// The file `sweep --target --history FILE` wrote, or the one a failing target sweep printed.
        file: PathBuf,
    },
    /// Replay one seed as a one-line-per-event timeline.
    Replay(txnsim_sim::cli::ReplayArgs),
    /// Serve the engine as Kafka brokers on loopback (one, or a replicated cluster), for real clients.
    Serve(txnsim_kafka::ServeArgs),
    /// Hold Kafka clients' reads to Kafka's rules: each adapter (`--client CMD`) reads every layout of
    /// the catalogue from `txnsim serve` at both isolation levels; a matrix client x layout. Exit 0 all
    /// pass, 1 a failing cell, 2 bad input or an adapter error (docs/conform.md).
    Conform(txnsim::conform::ConformArgs),
}

/// `txnsim sweep`: the madsim sweep, or with `--target` the same workloads against a real cluster.
#[derive(clap::Args)]
struct SweepCmd {
    #[command(flatten)]
    sim: txnsim_sim::cli::SweepArgs,
    /// Run the profile's workload against a real Kafka-protocol cluster through librdkafka instead (topics
    /// and transactional ids `txnsim-<run>-s<seed>-*` are created there; `--jobs` seeds at once, default 1):
    /// a cluster of yours, or `apache-kafka:1|3`, Apache Kafka 4.3.1 nodes started for the sweep (README
    /// "Your own cluster").
    #[arg(long, value_name = "kafka://HOST:PORT[,HOST:PORT...]|apache-kafka:N", conflicts_with_all = ["mutation", "proposal", "save"])]
    target: Option<String>,
    /// With --target apache-kafka:N: node faults drawn from each seed, a comma-separated list of
    /// kill-node, pause-node and cut-link (each runs once per seed), `auto` (the profile's fault mix
    /// chooses) or `none` (the default). cut-link and auto run the nodes in network namespaces: root only.
    #[arg(long, value_name = "LIST|auto|none", requires = "target")]
    nemesis: Option<String>,
    /// With --target: save every seed's history and the logs read back to this file, for `check-history`.
    #[arg(long, value_name = "FILE", requires = "target")]
    history: Option<PathBuf>,
    /// With --target: how long, after every transaction ended, a partition's LSO may take to reach its HW
    /// before the transaction holding it is reported hanging (`lso-reaches-high-watermark`). The default
    /// outlasts the profiles' transaction timeouts and Kafka's 10 s abort scan; raise it for a cluster
    /// whose `transaction.abort.timed.out.transaction.cleanup.interval.ms` is longer.
    #[arg(long, value_name = "MS", default_value_t = 30_000, requires = "target", value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    settle_ms: u64,
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
        Command::Scenario { paths, show, html, mutation, json } => match load_scenarios(&paths) {
            Ok(scenarios) => match html.as_deref().map(|h| (txnsim::html::create(h), h)) {
                Some((Err(e), _)) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
                Some((Ok(page), path)) => {
                    let title = format!("txnsim: {}", paths[0].display());
                    run_scenarios(&scenarios, show, mutation, json, Some((page, path, title))).0
                }
                None => run_scenarios(&scenarios, show, mutation, json, None).0,
            },
            Err(code) => code,
        },
        Command::Run { scenarios } => main_job(&scenarios),
        Command::Mutations { json: true } => report::print_json(&report::mutations()),
        Command::Invariants { json: true } => report::print_json(&report::invariants()),
        Command::Mutations { json: false } => {
            print!("{}", txnsim_properties::catalogue::mutations_text());
            ExitCode::SUCCESS
        }
        Command::Invariants { json: false } => {
            for i in Invariant::catalogue() {
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
            txnsim_model::cli::run_check(&args, &|bounds, report| {
                txnsim::html::render("txnsim check", &txnsim::html::runs::check_stories(bounds, report))
            })
        }
        Command::Explore(args) => txnsim_model::cli::run_explore(&args),
        Command::Sweep(SweepCmd { sim, target: None, .. }) => {
            stop_sweep_on_signals();
            txnsim_sim::cli::run_sweep(&sim)
        }
        Command::Sweep(SweepCmd { sim, target: Some(target), history, settle_ms, nemesis }) => {
            txnsim_kafka::remote::run_target_sweep(&txnsim_kafka::remote::TargetArgs {
                target,
                seeds: sim.seeds,
                from: sim.from,
                profile: sim.profile,
                jobs: sim.jobs.unwrap_or(1),
                history,
                json: sim.json,
                settle: std::time::Duration::from_millis(settle_ms),
                nemesis,
            })
        }
        Command::CheckHistory { file } => txnsim_kafka::remote::file::run_check_history(&file),
        Command::Replay(args) => txnsim_sim::cli::run_replay(&args, &|spec, report| {
            let story = txnsim::html::runs::replay_story(spec, report)?;
            Ok(txnsim::html::render(&format!("txnsim {}", story.title), &[story]))
        }),
        Command::Serve(args) => txnsim_kafka::run_serve(&args),
        Command::Conform(args) => txnsim::conform::run(&args),
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

/// SIGINT or SIGTERM during `sweep`: the workers finish the seeds in hand and the summary says INCOMPLETE
/// (exit 3). A SIGINT the parent set to be ignored (a background job) stays ignored; SIGTERM still stops it.
fn stop_sweep_on_signals() {
    let handler = on_sweep_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic and restores the default disposition (both
    // async-signal-safe), so a second signal kills at once; the sweep's threads do not exist yet.
    unsafe {
        if libc::signal(libc::SIGINT, libc::SIG_IGN) != libc::SIG_IGN {
            libc::signal(libc::SIGINT, handler);
        }
        libc::signal(libc::SIGTERM, handler);
    }
}

extern "C" fn on_sweep_signal(signal: libc::c_int) {
    txnsim_sim::sweep::INTERRUPTED.store(true, std::sync::atomic::Ordering::Relaxed);
    // SAFETY: signal() is async-signal-safe.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
    }
}

/// Every scenario under `paths`, each file once, parsed before anything runs; bad input is one line on
/// stderr and exit 2.
fn load_scenarios(paths: &[PathBuf]) -> Result<Vec<scenario::Scenario>, ExitCode> {
    let input_error = |e: &dyn std::fmt::Display| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    };
    let files = scenario::collect_all(paths).map_err(|e| input_error(&e))?;
    if files.is_empty() {
        let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(input_error(&format!("no scenario files (*.json) under {}", names.join(", "))));
    }
    let mut scenarios = Vec::new();
    for f in &files {
        scenarios.extend(scenario::load(f).map_err(|e| input_error(&e))?);
    }
    Ok(scenarios)
}

/// Where `--html` writes the page: the opened file, its path and the page's title.
type HtmlOut<'a> = (std::fs::File, &'a std::path::Path, String);

/// Runs parsed scenarios and prints the report (text or JSON); the exit code and the summary line.
/// A network scenario that names no message in flight, or several, is bad input: exit 2.
fn run_scenarios(
    scenarios: &[scenario::Scenario],
    show: bool,
    mutation: Option<Mutation>,
    json: bool,
    html: Option<HtmlOut<'_>>,
) -> (ExitCode, String) {
    let total_ops = scenarios.iter().map(|sc| sc.network.as_ref().map_or(sc.ops.len(), |n| n.ops.len()) as u64).sum();
    let progress = report::progress_bar(total_ops, "ops");
    let opts = RunOptions {
        mutations: mutation.map(Mutations::one).unwrap_or_default(),
        show,
        progress: Some(progress.clone()),
    };
    let mut results = Vec::new();
    let mut stories = Vec::new();
    let mut bad = 0;
    for sc in scenarios {
        let run = scenario::run(sc, &opts);
        if let Some(e) = &run.input_error {
            bad += 1;
            progress.suspend(|| eprintln!("error: {e}"));
        }
        if html.is_some() {
            let verdict = run.difference.as_ref().map_or("PASS".to_string(), |d| format!("FAIL {d}"))
                + &mutation.map(|m| format!(" (with mutation {})", m.name())).unwrap_or_default();
            let passed = run.difference.is_none() && run.input_error.is_none();
            stories.push(scenario::story(sc, run.steps.clone(), verdict, passed));
        }
        if !json && run.input_error.is_none() {
            progress.suspend(|| print_scenario(sc, &run, show));
        }
        results.push(run);
    }
    progress.finish_and_clear();
    if let Some((page, path, title)) = html {
        if let Err(e) = txnsim::html::write(page, path, &title, &stories) {
            eprintln!("error: {e}");
            return (ExitCode::from(2), format!("error: {e}"));
        }
        println!("wrote {}", path.display());
    }
    let failed = results.iter().filter(|r| r.difference.is_some()).count();
    let passed = results.len() - failed;
    let with = mutation.map(|m| format!(" with mutation {}", m.name())).unwrap_or_default();
    let summary = format!("scenarios: {passed} passed, {failed} failed{with}");
    if json {
        report::print_json(&report::scenarios(scenarios, &results, mutation, show));
    } else {
        println!("{summary}");
    }
    let code = if bad > 0 {
        ExitCode::from(2)
    } else if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    };
    (code, summary)
}

fn print_scenario(sc: &scenario::Scenario, run: &scenario::RunReport, show: bool) {
    if show {
        for line in &run.table {
            println!("{line}");
        }
    }
    match &run.difference {
        None => println!("PASS {} ({})", sc.name, sc.file),
        Some(d) => println!("FAIL {} ({}): {d}", sc.name, sc.file),
    }
    if show {
        println!();
    }
}

/// `txnsim run`: the three checkers with their defaults, then one summary; exit 1 if any found a problem.
fn main_job(scenarios: &std::path::Path) -> ExitCode {
    let started = std::time::Instant::now();
    // Bad scenario input stops the job before the minutes of model check and sweep.
    let loaded = match load_scenarios(&[scenarios.to_path_buf()]) {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    println!("== scenarios ({})", scenarios.display());
    let (code, scenario_line) = run_scenarios(&loaded, false, None, false, None);
    let mut ok = code == ExitCode::SUCCESS;
    let mut summary = vec![scenario_line];
    type Job = fn() -> Result<Vec<String>, Vec<String>>;
    type Counts = fn(&[String]) -> Vec<String>;
    // Each job with the counts the summary repeats (from its report lines, or its fixed size).
    let jobs: [(&str, Job, Counts); 2] = [
        // A passing model job's lines are its counts: the small config per transaction version, then eos.
        ("model check (small, eos small)", txnsim_model::cli::main_job, |lines| lines.to_vec()),
        ("seed sweep", txnsim_sim::cli::main_job, |_| {
            let seeds: u64 = txnsim_sim::cli::MAIN_JOB_SEEDS.iter().map(|(_, n)| n).sum();
            vec![format!("{seeds} seeds over {} profiles", txnsim_sim::cli::MAIN_JOB_SEEDS.len())]
        }),
    ];
    for (title, job, counts) in jobs {
        println!("== {title}");
        let (passed, lines) = match job() {
            Ok(lines) => (true, lines),
            Err(lines) => (false, lines),
        };
        for l in &lines {
            println!("{l}");
        }
        ok &= passed;
        summary.push(format!("{title}: {}", if passed { "passed" } else { "FAILED (see above)" }));
        if passed {
            summary.extend(counts(&lines).iter().map(|l| format!("  {l}")));
        }
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
