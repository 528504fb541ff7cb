//! `txnsim check` and `txnsim explore`.

use crate::bounds::Bounds;
use crate::counterexample::{path_lines, readable, step_texts};
use crate::model::{build, TxnModel, ENGINE_ASSERTIONS};
use crate::symmetry;
use crate::verdict::{broker_of, evaluate, Fact};
use clap::Args;
use stateright::{Checker, Expectation, HasDiscoveries, Model};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use txnsim_engine::{Broker, Mutation, TransactionVersion};
use txnsim_properties::Invariant;

/// The model's bounds, as flags over a named config.
#[derive(Args, Debug, Clone)]
pub struct BoundsArgs {
    /// Start from this config: small (the gate's), medium (2 producers x 1 txn x 1 record on 1 partition
    /// with the standard's loss, crash and recovery timers, 1 poll per reader: finishes in minutes) or standard (2
    /// producers x 2 txns x 2 records, lossy FIFO connections, 1 crash, reduced: about 3 x 10^11 states, it
    /// does not finish on 2 cores, so give it --time-limit; BENCHMARKS.md has the estimate) or replicated
    /// (one transaction of one record on a partition with a replica on each of 2 brokers, one broker
    /// crash: leader changes and truncation) or eos (the sim's eos profile at model size: one input
    /// record, one processor consuming it read_committed and committing output and offset in one
    /// transaction, TV2, a loss, a crash and a session expiry).
    #[arg(long, default_value = "small", value_parser = ["small", "medium", "standard", "replicated", "eos"])]
    pub config: String,
    /// Brokers, each with a replica of every partition (1 to 3; above 1 a controller elects leaders).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=3))]
    pub brokers: Option<usize>,
    /// Transactional producers.
    #[arg(long)]
    pub producers: Option<usize>,
    /// Transactions per producer.
    #[arg(long)]
    pub txns: Option<usize>,
    /// Records per transaction (record r goes to partition r mod partitions).
    #[arg(long)]
    pub records: Option<usize>,
    #[arg(long)]
    pub partitions: Option<usize>,
    /// The network may lose messages (`--lossy=false` to turn off).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub lossy: Option<bool>,
    /// Messages the lossy network may lose in a run.
    #[arg(long)]
    pub losses: Option<usize>,
    /// The network may deliver a message more than once.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub duplicating: Option<bool>,
    /// Per-connection FIFO delivery instead of unordered.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub ordered: Option<bool>,
    /// Crash-restarts in a run (broker or producer, see --crash).
    #[arg(long)]
    pub crashes: Option<usize>,
    /// Which nodes may crash.
    #[arg(long, value_parser = ["any", "broker", "producers"])]
    pub crash: Option<String>,
    /// A crashed producer restarts as a new instance (`--restart-producers=false`: it stays down, and only
    /// the coordinator's timeout ends its transaction).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub restart_producers: Option<bool>,
    /// transaction.version: 1 (classic) or 2 (KIP-890).
    #[arg(long = "tv", value_parser = parse_tv)]
    pub transaction_version: Option<TransactionVersion>,
    /// Inject one historical bug (see `txnsim mutations`).
    #[arg(long, value_parser = parse_mutation)]
    pub mutation: Option<Mutation>,
    /// Coordinator timeout aborts allowed in a run.
    #[arg(long)]
    pub txn_timeouts: Option<usize>,
    /// request.timeout.ms firings allowed per producer instance.
    #[arg(long)]
    pub request_timeouts: Option<usize>,
    /// retry.backoff.ms firings allowed per producer instance.
    #[arg(long)]
    pub backoff_retries: Option<usize>,
    /// Coordinator marker resends allowed in a run.
    #[arg(long)]
    pub marker_resends: Option<usize>,
    /// Sends of one batch before the producer gives up on it.
    #[arg(long)]
    pub delivery_attempts: Option<u32>,
    /// Polls the readers may make in a run (0: no readers; 255: unbounded).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=255))]
    pub polls: Option<usize>,
    /// Explore only the reduced interleavings: timeouts fire for lost requests only, readers poll right
    /// after a partition changes
    /// (`--reduced=false` to explore every interleaving).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub reduced: Option<bool>,
    /// Partial-order reduction: a producer with an answer waiting steps first (needs --ordered;
    /// `--por=false` to turn off).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub por: Option<bool>,
    /// Symmetry reduction over the producers: one state per permutation of them (at most 4 producers;
    /// `--symmetry=false` to turn off).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub symmetry: Option<bool>,
    /// Processors of the consume-transform-produce loop (0 to 2; the eos config has 1).
    #[arg(long)]
    pub processors: Option<usize>,
    /// Transactions each processor begins in a run.
    #[arg(long)]
    pub processor_txns: Option<usize>,
    /// Requests each processor instance's consumer may send from its polls.
    #[arg(long)]
    pub member_polls: Option<usize>,
    /// Times the group coordinator's clock may pass its members' session timeout in a run.
    #[arg(long)]
    pub session_expiries: Option<usize>,
}

fn parse_tv(s: &str) -> Result<TransactionVersion, String> {
    s.parse::<u8>()
        .ok()
        .and_then(TransactionVersion::from_number)
        .ok_or_else(|| format!("transaction version must be 1 or 2, got '{s}'"))
}

fn parse_mutation(s: &str) -> Result<Mutation, String> {
    Mutation::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = Mutation::ALL.iter().map(|m| m.name()).collect();
        format!("unknown mutation '{s}'; known: {}", names.join(", "))
    })
}

impl BoundsArgs {
    pub fn bounds(&self) -> Result<Bounds, String> {
        let mut b = Bounds::by_name(&self.config).ok_or_else(|| format!("unknown config '{}'", self.config))?;
        macro_rules! set {
            ($($field:ident <- $arg:ident),*) => { $(if let Some(v) = self.$arg.clone() { b.$field = v; })* };
        }
        set!(producers <- producers, txns_per_producer <- txns, records_per_txn <- records, partitions <- partitions,
             brokers <- brokers,
             lossy <- lossy, losses <- losses, duplicating <- duplicating, ordered <- ordered, crashes <- crashes,
             transaction_version <- transaction_version, txn_timeouts <- txn_timeouts,
             request_timeouts <- request_timeouts, backoff_retries <- backoff_retries,
             marker_resends <- marker_resends, delivery_attempts <- delivery_attempts, polls_per_reader <- polls,
             reduced <- reduced, restart_producers <- restart_producers, por <- por, symmetry <- symmetry,
             processors <- processors, processor_txns <- processor_txns, member_polls <- member_polls,
             session_expiries <- session_expiries);
        if let Some(m) = self.mutation {
            b.mutation = Some(m);
        }
        if let Some(c) = &self.crash {
            (b.crash_broker, b.crash_producers) = match c.as_str() {
                "broker" => (true, false),
                "producers" => (false, true),
                _ => (true, true),
            };
        }
        b.validate()?;
        Ok(b)
    }
}

#[derive(Args, Debug, Clone)]
pub struct CheckArgs {
    #[command(flatten)]
    pub bounds: BoundsArgs,
    /// Checker threads (BFS paths are shortest only with 1).
    #[arg(long, default_value_t = 1, value_parser = thread_count)]
    pub threads: usize,
    /// Depth-first instead of breadth-first (less memory, longer counterexamples).
    #[arg(long)]
    pub dfs: bool,
    /// Keep exploring after the first violation (every property gets its verdict).
    #[arg(long)]
    pub all: bool,
    /// Print the steps of each `sometimes` example too.
    #[arg(long)]
    pub examples: bool,
    /// Stop after this many seconds (the report then says the check is incomplete).
    #[arg(long)]
    pub time_limit: Option<u64>,
    /// Give up (report incomplete, exit) when the process's resident memory passes this many GiB: a
    /// breadth-first frontier of large bounds outgrows any machine (depth-first needs little memory).
    #[arg(long, default_value_t = 8.0)]
    pub max_memory_gb: f64,
    /// Print the report as JSON (txnsim-check-report/v1, schemas/check.schema.json) instead.
    #[arg(long)]
    pub json: bool,
    /// Also write each counterexample as one self-contained HTML page, as `scenario --show --html` does:
    /// each partition's log after every step, HW and LSO, what fresh readers of both levels deliver.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct ExploreArgs {
    #[command(flatten)]
    pub bounds: BoundsArgs,
    /// Where the Explorer listens.
    #[arg(long, default_value = "127.0.0.1:3000")]
    pub addr: String,
    #[arg(long, default_value_t = 1, value_parser = thread_count)]
    pub threads: usize,
}

/// The most checker threads a run may ask for, as `sweep --jobs`: each is an OS thread, and stateright
/// aborts the process when it cannot spawn one.
pub const MAX_THREADS: usize = 1024;

fn thread_count(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("at least one thread is needed".into()),
        Ok(n) if n > MAX_THREADS => Err(format!("{n} threads is too many: give 1 to {MAX_THREADS}")),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("not a thread count: {e}")),
    }
}

/// Set by the binary's Ctrl-C handler: a running check stops and reports what it has so far, as at a
/// time limit (a long run is worth its partial figures).
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// The outcome of one check, for the CLI and the main job.
pub struct Report {
    pub lines: Vec<String>,
    pub violated: bool,
    pub complete: bool,
    /// A memory or time limit stopped the wait; the checker threads are still running.
    pub abandoned: bool,
    /// The same report as JSON (`CHECK_FORMAT`).
    pub json: serde_json::Value,
    /// Each counterexample's steps with the broker after each (with `--html` only).
    pub counterexamples: Vec<Counterexample>,
}

/// A counterexample as `--html` draws it: the violated property, its steps as the report words them
/// (step 0 is the start) with the broker after each, and the witness lines printed under them.
pub struct Counterexample {
    pub property: String,
    pub steps: Vec<(String, Broker)>,
    pub notes: Vec<String>,
}

/// Renders the check's HTML page (the binary's `txnsim::html`, which this crate cannot reach).
pub type PageFn<'a> = &'a dyn Fn(&Bounds, &Report) -> String;

pub const CHECK_FORMAT: &str = "txnsim-check-report/v1";

/// Runs the checker on `bounds` and writes the report as it goes (progress to `progress`).
pub fn check(bounds: &Bounds, args: &CheckArgs, progress: &mut dyn Write) -> Report {
    // Depth-first, stateright applies the representative itself, faster than the model can.
    let dfs_symmetry = args.dfs && bounds.symmetry;
    let model = if dfs_symmetry { build(bounds).without_canonical_states() } else { build(bounds) };
    let mut lines = vec![format!("model: {bounds}")];
    let _ = writeln!(progress, "{}", lines[0]);
    let finish = if args.all { HasDiscoveries::All } else { HasDiscoveries::AnyFailures };
    let mut builder = model.clone().checker().threads(args.threads).finish_when(finish);
    if dfs_symmetry {
        builder = builder.symmetry_fn(symmetry::representative);
    }
    if let Some(secs) = args.time_limit {
        builder = builder.timeout(Duration::from_secs(secs));
    }
    let start = Instant::now();
    let checker: Box<dyn Checker<TxnModel>> =
        if args.dfs { Box::new(builder.spawn_dfs()) } else { Box::new(builder.spawn_bfs()) };
    // indicatif draws on stderr only when it is a terminal: logs and pipes get the report alone.
    let spinner = indicatif::ProgressBar::new_spinner();
    let mut abandoned = None;
    while !checker.is_done() {
        std::thread::sleep(Duration::from_millis(10));
        if INTERRUPTED.load(Ordering::Relaxed) {
            abandoned = Some("interrupted".into());
            break;
        }
        if resident_gb().is_some_and(|gb| gb > args.max_memory_gb) {
            abandoned = Some(format!("memory limit {} GiB; try --dfs", args.max_memory_gb));
            break;
        }
        // stateright applies its timeout only when a thread asks for more work, which a lone thread
        // with work of its own never does: past a grace second, stop waiting.
        if args.time_limit.is_some_and(|t| start.elapsed() > Duration::from_secs(t + 1)) {
            abandoned = Some("time limit".into());
            break;
        }
        spinner.set_message(format!(
            "{:.0} s  states {}  unique {}  depth {}",
            start.elapsed().as_secs_f64(),
            checker.state_count(),
            checker.unique_state_count(),
            checker.max_depth()
        ));
        spinner.tick();
    }
    spinner.finish_and_clear();
    if abandoned.is_none() && args.time_limit.is_some_and(|t| start.elapsed() >= Duration::from_secs(t)) {
        // Closed by the timeout, though a thread may still be busy (see above): do not wait for it.
        abandoned = Some("time limit".into());
    }
    let secs = start.elapsed().as_secs_f64();
    // An abandoned checker may still be running (stateright cannot stop it; the CLI's exit does):
    // its counts and discoveries are read as they stand.
    let checker = if abandoned.is_none() { join(checker) } else { checker };
    let discoveries = checker.discoveries();
    let violated =
        model.properties().iter().any(|p| p.expectation == Expectation::Always && discoveries.contains_key(p.name));
    let timed_out = abandoned.is_some();
    // Everything reachable was visited: no time limit hit, and no early stop at a violation.
    let complete = !timed_out && (!violated || args.all);
    lines.push(format!(
        "states {}, unique states {}{}, depth {}, {:.2} s, {:.0} states/s ({:.0} unique/s){}",
        checker.state_count(),
        checker.unique_state_count(),
        // Under symmetry each unique state stands for its class of producer permutations.
        if bounds.symmetry { " (classes under --symmetry)" } else { "" },
        checker.max_depth(),
        secs,
        checker.state_count() as f64 / secs.max(1e-9),
        checker.unique_state_count() as f64 / secs.max(1e-9),
        match (&abandoned, complete) {
            (Some(why), _) => format!(", INCOMPLETE ({why})"),
            (None, false) => ", stopped at the first violation".into(),
            (None, true) => ", complete".into(),
        }
    ));
    let mut json_properties = Vec::new();
    let mut json_paths = Vec::new();
    let mut counterexamples = Vec::new();
    lines.push("properties:".into());
    for p in model.properties() {
        let found = discoveries.get(p.name);
        let expectation = match p.expectation {
            Expectation::Always => "always",
            Expectation::Eventually => "eventually",
            Expectation::Sometimes => "sometimes",
        };
        let status = match (p.expectation, found) {
            (Expectation::Always | Expectation::Eventually, Some(_)) => "VIOLATED".to_string(),
            (Expectation::Always | Expectation::Eventually, None) if complete => "holds".to_string(),
            (Expectation::Always | Expectation::Eventually, None) => "not violated so far".to_string(),
            (Expectation::Sometimes, Some(path)) => {
                format!("example found ({} steps)", path.clone().into_actions().len())
            }
            (Expectation::Sometimes, None) if complete => "UNREACHED".to_string(),
            (Expectation::Sometimes, None) => "not reached so far".to_string(),
        };
        lines.push(format!("  {:<9} {:<40} {status}", kind(p.name), p.name));
        json_properties.push(serde_json::json!({
            "name": p.name,
            "kind": kind(p.name),
            "expectation": expectation,
            "status": status.split(" (").next().unwrap_or(&status).to_lowercase().replace(' ', "_"),
        }));
    }
    for p in model.properties() {
        let Some(path) = discoveries.get(p.name) else { continue };
        let counterexample = p.expectation != Expectation::Sometimes;
        if !counterexample && !args.examples {
            continue;
        }
        let title = if counterexample { "counterexample" } else { "example" };
        lines.push(String::new());
        lines.push(format!("{title} for {} ({} steps):", p.name, path.clone().into_actions().len()));
        let steps = path_lines(&model, path);
        lines.extend(steps.iter().cloned());
        let first_note_line = lines.len();
        if counterexample {
            let shown = readable(&model, path);
            let last = shown.last_state();
            if p.name == ENGINE_ASSERTIONS {
                for a in &last.actor_states {
                    if let Some(m) = a.panic_message() {
                        lines.push(format!("  engine assertion: {m}"));
                    }
                }
            } else {
                for v in evaluate(&model.cfg.ctx, last).violations.iter().filter(|v| v.invariant.name() == p.name) {
                    lines.push(format!("  violation: {v}"));
                }
            }
        }
        // Depth-first under symmetry the path is of the states as stepped, which the Explorer shows with
        // `--symmetry=false` (it keeps canonical states otherwise).
        let opens_with = if dfs_symmetry { " (open it with --symmetry=false)" } else { "" };
        // The violation's witness (or the engine assertion), as printed under the steps.
        let notes: Vec<String> = lines[first_note_line..].iter().map(|l| l.trim().to_string()).collect();
        lines.push(format!("  action index path{opens_with}: {}", path.encode(&model)));
        if counterexample && args.html.is_some() {
            let texts = std::iter::once("start".to_string()).chain(step_texts(&model, path));
            let brokers = readable(&model, path).into_vec().into_iter().map(|(s, _)| (*broker_of(&s).broker).clone());
            counterexamples.push(Counterexample {
                property: p.name.to_string(),
                steps: texts.zip(brokers).collect(),
                notes: notes.clone(),
            });
        }
        json_paths.push(serde_json::json!({
            "property": p.name,
            "kind": title,
            "steps": steps.iter().map(|l| l.trim()).collect::<Vec<_>>(),
            "notes": notes,
            "action_index_path": path.encode(&model),
        }));
    }
    let json = serde_json::json!({
        "format": CHECK_FORMAT,
        "model": bounds.to_string(),
        "mutation": bounds.mutation.map(|m| m.name()),
        "states": checker.state_count(),
        "unique_states": checker.unique_state_count(),
        "max_depth": checker.max_depth(),
        "seconds": secs,
        "complete": complete,
        "incomplete_reason": abandoned,
        "violated": violated,
        "properties": json_properties,
        "paths": json_paths,
    });
    Report { lines, violated, complete, abandoned: abandoned.is_some(), json, counterexamples }
}

/// Resident memory of this process, from /proc (Linux); `None` elsewhere.
fn resident_gb() -> Option<f64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: f64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096.0 / (1u64 << 30) as f64)
}

fn join(mut checker: Box<dyn Checker<TxnModel>>) -> Box<dyn Checker<TxnModel>> {
    for h in checker.handles() {
        h.join().expect("checker thread");
    }
    checker
}

/// The kind column: which part of the catalogue a property comes from.
fn kind(name: &str) -> &'static str {
    if name == ENGINE_ASSERTIONS {
        return "engine";
    }
    if Fact::ALL.iter().any(|f| f.name() == name) {
        return "sometimes";
    }
    match Invariant::from_name(name).map(|i| i.kind()) {
        Some(txnsim_properties::Kind::State) => "state",
        Some(txnsim_properties::Kind::History) => "history",
        Some(txnsim_properties::Kind::Liveness) => "liveness",
        None => "?",
    }
}

/// What a mutation's bug needs to happen at all. With bounds that rule it out the check passes trivially,
/// so `check` says so first.
#[derive(Clone, Copy)]
enum Needs {
    /// The broker (and its coordinator) restarts: `--crashes` >= 1 with `--crash broker` or `any`.
    BrokerCrash,
    /// The coordinator aborts a transaction on its timeout: `--txn-timeouts` >= 1.
    TimeoutAbort,
    /// A second instance of one transactional id fences the first: a producer crash with restart.
    SecondInstance,
    /// An older epoch of a producer is still writing: a second instance, or a timeout abort's bump.
    StaleEpoch,
    /// Readers poll, so the fetch path and the consumer run: `--polls` >= 1.
    Readers,
}

/// Every mutation whose bug has a precondition the bounds can switch off; the others need nothing more
/// than a transaction.
const NEEDS: [(Mutation, Needs); 14] = [
    (Mutation::DropPendingMarkersOnRestart, Needs::BrokerCrash),
    (Mutation::RestartAbortsPreparedCommits, Needs::BrokerCrash),
    (Mutation::TimeoutAbortSameEpoch, Needs::TimeoutAbort),
    (Mutation::NoTimeoutAbort, Needs::TimeoutAbort),
    (Mutation::FenceAbortSameEpoch, Needs::SecondInstance),
    (Mutation::SkipProducerEpochCheck, Needs::StaleEpoch),
    (Mutation::ReadCommittedBoundedByHw, Needs::Readers),
    (Mutation::LsoInclusive, Needs::Readers),
    (Mutation::SkipAbortedIndexOnFetch, Needs::Readers),
    (Mutation::NoPositionAdvanceOverControl, Needs::Readers),
    (Mutation::AbortedPidNotClearedOnMarker, Needs::Readers),
    (Mutation::PositionSkipsToHighWatermark, Needs::Readers),
    (Mutation::RedeliverLastRecord, Needs::Readers),
    (Mutation::AbortedListForReadUncommitted, Needs::Readers),
];

impl Needs {
    fn met(self, b: &Bounds) -> bool {
        let second_instance = b.crashes > 0 && b.crash_producers && b.restart_producers;
        match self {
            Needs::BrokerCrash => b.crashes > 0 && b.crash_broker,
            Needs::TimeoutAbort => b.txn_timeouts > 0,
            Needs::SecondInstance => second_instance,
            Needs::StaleEpoch => second_instance || b.txn_timeouts > 0,
            Needs::Readers => b.polls_per_reader > 0,
        }
    }

    fn what(self) -> &'static str {
        match self {
            Needs::BrokerCrash => "a broker restart (--crashes 1 --crash broker)",
            Needs::TimeoutAbort => "a coordinator timeout abort (--txn-timeouts 1)",
            Needs::SecondInstance => "a second producer instance to fence the first (--crashes 1 --crash producers)",
            Needs::StaleEpoch => {
                "an older producer epoch still writing (--crashes 1 --crash producers, or --txn-timeouts 1)"
            }
            Needs::Readers => "readers that poll (--polls 1)",
        }
    }
}

/// The warning for a mutation these bounds cannot reach, if it is one.
pub fn unreachable_mutation(b: &Bounds) -> Option<String> {
    let m = b.mutation?;
    let (_, needs) = NEEDS.iter().find(|(n, needs)| *n == m && !needs.met(b))?;
    Some(format!(
        "mutation {} needs {}, which these bounds rule out: the check cannot catch it",
        m.name(),
        needs.what()
    ))
}

pub fn run_check(args: &CheckArgs, page: PageFn<'_>) -> ExitCode {
    let bounds = match args.bounds.bounds() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // Opened before the check (which may run for hours), so a path that cannot be written fails first.
    let html = match &args.html {
        None => None,
        Some(p) => match std::fs::File::create(p) {
            Ok(f) => Some((p, f)),
            Err(e) => {
                eprintln!("error: --html {}: {e}", p.display());
                return ExitCode::from(2);
            }
        },
    };
    if let Some(w) = unreachable_mutation(&bounds) {
        eprintln!("warning: {w}");
    }
    let report = if args.json {
        let report = check(&bounds, args, &mut std::io::sink());
        println!("{:#}", report.json);
        report
    } else {
        let report = check(&bounds, args, &mut std::io::stdout());
        for line in &report.lines[1..] {
            println!("{line}");
        }
        report
    };
    if let Some((path, mut file)) = html {
        if let Err(e) = file.write_all(page(&bounds, &report).as_bytes()) {
            eprintln!("error: --html {}: {e}", path.display());
            return ExitCode::from(2);
        }
        if !args.json {
            println!("wrote {}", path.display());
        }
    }
    if report.abandoned {
        // Returning from main ends the still-running checker threads.
        return ExitCode::from(if report.violated { 1 } else { 3 });
    }
    if report.violated {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

pub fn run_explore(args: &ExploreArgs) -> ExitCode {
    let bounds = match args.bounds.bounds() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // stateright's `serve` unwraps its bind; binding here first turns a bad or busy address into one
    // line and exit 2 (the listener is released just before the Explorer takes the address).
    if let Err(e) = std::net::TcpListener::bind(args.addr.as_str()) {
        eprintln!("error: --addr {}: cannot listen there: {e}", args.addr);
        return ExitCode::from(2);
    }
    println!("model: {bounds}");
    println!("Explorer: http://{}/", args.addr);
    println!("(a counterexample path from `txnsim check` opens as http://{}/#/steps/<action index path>)", args.addr);
    if bounds.symmetry {
        println!(
            "(symmetry reduction is on: each state shown is its class's representative, so producers may swap \
names from one step to the next; --symmetry=false keeps them)"
        );
    }
    let _ = build(&bounds).checker().threads(args.threads).serve(args.addr.as_str());
    ExitCode::SUCCESS
}

/// The model checks the main job (`txnsim run`) runs, the small config under both transaction versions
/// and the eos config's small variant: `Ok(report lines)` if every property held.
pub fn main_job() -> Result<Vec<String>, Vec<String>> {
    let args = CheckArgs {
        bounds: BoundsArgs {
            config: "small".into(),
            producers: None,
            txns: None,
            records: None,
            partitions: None,
            brokers: None,
            lossy: None,
            losses: None,
            duplicating: None,
            ordered: None,
            crashes: None,
            crash: None,
            restart_producers: None,
            transaction_version: None,
            mutation: None,
            txn_timeouts: None,
            request_timeouts: None,
            backoff_retries: None,
            marker_resends: None,
            delivery_attempts: None,
            polls: None,
            reduced: None,
            por: None,
            symmetry: None,
            processors: None,
            processor_txns: None,
            member_polls: None,
            session_expiries: None,
        },
        threads: 1,
        dfs: false,
        all: false,
        examples: false,
        time_limit: None,
        max_memory_gb: 8.0,
        json: false,
        html: None,
    };
    let mut lines = Vec::new();
    let mut ok = true;
    let small = [TransactionVersion::V1, TransactionVersion::V2].map(|tv| Bounds::small().with_version(tv));
    for (bounds, name) in small.into_iter().zip(["TV1", "TV2"]).chain([(Bounds::eos_small(), "eos (small, TV2)")]) {
        let report = check(&bounds, &args, &mut std::io::sink());
        ok &= !report.violated && report.complete;
        if report.violated {
            lines.extend(report.lines);
        } else {
            lines.push(format!("{name}: {}", report.lines[1]));
        }
    }
    if ok {
        Ok(lines)
    } else {
        Err(lines)
    }
}
