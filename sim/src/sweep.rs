//! Many seeds, each on its own thread and runtime, in `jobs` parallel workers; then one summary.

use crate::profile::Profile;
use crate::run::{run_seed, RunReport, RunSpec};
use crate::world::Stats;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use txnsim_engine::{Mutation, Proposal};

#[derive(Clone, Debug)]
pub struct SweepSpec {
    pub from: u64,
    pub seeds: u64,
    pub profile: Profile,
    pub mutation: Option<Mutation>,
    pub proposal: Option<Proposal>,
    pub jobs: usize,
    /// How many failing runs (the lowest seeds) to keep in full; the counts cover every seed.
    pub keep_failures: usize,
    /// Known anomalies fail the sweep too (`--strict`).
    pub strict: bool,
}

impl SweepSpec {
    /// A sweep of `seeds` seeds from `from`, keeping the first ten failures.
    pub fn new(from: u64, seeds: u64, profile: Profile, mutation: Option<Mutation>, jobs: usize) -> Self {
        SweepSpec { from, seeds, profile, mutation, proposal: None, jobs, keep_failures: 10, strict: false }
    }

    /// One seed of this sweep.
    pub fn run_spec(&self, seed: u64) -> RunSpec {
        RunSpec { proposal: self.proposal, ..RunSpec::new(seed, self.profile, self.mutation) }
    }
}

#[derive(Clone, Debug)]
pub struct SweepResult {
    pub spec: SweepSpec,
    /// The lowest failing seeds, at most `spec.keep_failures`, in seed order.
    pub failures: Vec<RunReport>,
    /// Every failing seed, kept or not.
    pub failed: u64,
    /// The lowest failing seed.
    pub first_failure: Option<u64>,
    pub totals: Stats,
    /// Wall clock for the whole sweep (only for the summary's rates).
    pub wall: Duration,
    /// Failing seeds per invariant (a seed counts once for each invariant it violated).
    pub by_invariant: BTreeMap<String, u64>,
    /// Failing seeds where a coordinator acted on loaded records the next coordinator's log lacked.
    pub failed_after_lost_load: u64,
    /// Seeds run: `spec.seeds`, or fewer when the sweep was interrupted (always `from..from + ran`).
    pub ran: u64,
    /// Failing seeds that pass when replayed with a proposal (Kafka's known anomaly it fixes), all of them.
    pub known_failed: u64,
    /// The proposal that fixes each kept failure that is a known anomaly.
    pub known: BTreeMap<u64, Proposal>,
}

impl SweepResult {
    pub fn passed(&self) -> bool {
        self.failed == 0
    }

    /// Failing seeds that no proposal explains: new failures.
    pub fn unexplained(&self) -> u64 {
        self.failed - self.known_failed
    }

    /// A signal stopped the sweep before its last seed; its counts cover the seeds run.
    pub fn interrupted(&self) -> bool {
        self.ran < self.spec.seeds
    }

    /// Index (from `spec.from`) of the first failing seed: time-to-detect.
    pub fn first_failure_index(&self) -> Option<u64> {
        self.first_failure.map(|seed| seed - self.spec.from)
    }

    pub fn seeds_per_second(&self) -> f64 {
        self.ran as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// What the workers fold each run into: counts, and only the lowest failing seeds in full, so a sweep's
/// memory does not grow with its number of seeds.
#[derive(Default)]
struct Tally {
    totals: Stats,
    failed: u64,
    first_failure: Option<u64>,
    by_invariant: BTreeMap<String, u64>,
    failed_after_lost_load: u64,
    kept: BTreeMap<u64, RunReport>,
    known_failed: u64,
    known: BTreeMap<u64, Proposal>,
}

impl Tally {
    fn add(&mut self, report: RunReport, keep: usize, known: Option<Proposal>) {
        add_stats(&mut self.totals, &report.stats);
        if report.passed() {
            return;
        }
        self.failed += 1;
        self.known_failed += u64::from(known.is_some());
        if let Some(p) = known {
            self.known.insert(report.seed, p);
        }
        self.failed_after_lost_load += u64::from(report.lost_load.is_some());
        self.first_failure = Some(self.first_failure.map_or(report.seed, |s| s.min(report.seed)));
        for f in &report.found {
            *self.by_invariant.entry(f.invariant.clone()).or_insert(0) += 1;
        }
        self.kept.insert(report.seed, report);
        if self.kept.len() > keep {
            if let Some((seed, _)) = self.kept.pop_last() {
                self.known.remove(&seed);
            }
        }
    }
}

/// Set by a SIGINT or SIGTERM handler: each worker finishes the seed in hand and takes no other, so the
/// seeds run are `from..from + ran` and the summary covers exactly them.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Runs the sweep; `progress(done, failed)` is called from the calling thread about ten times a second.
pub fn run_sweep(spec: &SweepSpec, mut progress: impl FnMut(u64, u64)) -> SweepResult {
    let started = Instant::now();
    let next = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let failed = AtomicU64::new(0);
    let tally: Mutex<Tally> = Mutex::new(Tally::default());
    let jobs = spec.jobs.max(1);
    let stopped = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                if INTERRUPTED.load(Ordering::Relaxed) {
                    stopped.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= spec.seeds {
                    break;
                }
                let report = run_seed(&spec.run_spec(spec.from + i));
                let known = (!report.passed()).then(|| known_anomaly(spec, &report)).flatten();
                if !report.passed() {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                tally.lock().unwrap_or_else(|e| e.into_inner()).add(report, spec.keep_failures, known);
                done.fetch_add(1, Ordering::Relaxed);
            });
        }
        loop {
            let d = done.load(Ordering::Relaxed);
            progress(d, failed.load(Ordering::Relaxed));
            if d >= spec.seeds || stopped.load(Ordering::Relaxed) == jobs as u64 {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let tally = tally.into_inner().unwrap_or_else(|e| e.into_inner());
    SweepResult {
        spec: spec.clone(),
        failures: tally.kept.into_values().collect(),
        failed: tally.failed,
        first_failure: tally.first_failure,
        totals: tally.totals,
        wall: started.elapsed(),
        by_invariant: tally.by_invariant,
        failed_after_lost_load: tally.failed_after_lost_load,
        ran: done.into_inner(),
        known_failed: tally.known_failed,
        known: tally.known,
    }
}

/// The proposal whose fix makes a failing seed pass, replayed with the same mutation: Kafka's known anomaly
/// that proposal names, judged per seed (a mutation's own failure is not one, even on the same invariant).
/// Only a seed that met the anomaly (a lost load) is replayed, so a mutation sweep whose seeds mostly fail
/// does not run each twice. Under a mutation the seed must also fail without it: a mutation whose bug
/// needs a lost load to show (a coordinator keeping its predecessor's epoch) is caught there, not excused.
fn known_anomaly(spec: &SweepSpec, report: &RunReport) -> Option<Proposal> {
    if spec.proposal.is_some() || report.lost_load.is_none() {
        return None;
    }
    let seed = report.seed;
    if spec.mutation.is_some() && run_seed(&RunSpec { mutation: None, ..spec.run_spec(seed) }).passed() {
        return None;
    }
    Proposal::ALL.into_iter().find(|&p| run_seed(&RunSpec { proposal: Some(p), ..spec.run_spec(seed) }).passed())
}

fn add_stats(total: &mut Stats, s: &Stats) {
    total.ops += s.ops;
    total.polls += s.polls;
    total.delivered += s.delivered;
    total.messages += s.messages;
    total.committed += s.committed;
    total.aborted += s.aborted;
    total.timed_out += s.timed_out;
    total.fenced += s.fenced;
    total.faults += s.faults;
    for (kind, n) in &s.fault_counts {
        *total.fault_counts.entry(kind.clone()).or_default() += n;
    }
    total.sim_ms += s.sim_ms;
    total.isr_shrinks += s.isr_shrinks;
    total.isr_expands += s.isr_expands;
    total.leader_changes += s.leader_changes;
    total.coordinator_moves += s.coordinator_moves;
    total.truncations += s.truncations;
    total.hw_below_leo_ms += s.hw_below_leo_ms;
    total.controller_failovers += s.controller_failovers;
    total.loads_above_hw += s.loads_above_hw;
    total.lost_loads += s.lost_loads;
    total.rebalances += s.rebalances;
    total.processor_commits += s.processor_commits;
    total.processor_aborts += s.processor_aborts;
    total.zombies_fenced += s.zombies_fenced;
    total.leaves += s.leaves;
    total.outputs += s.outputs;
    total.inputs_consumed += s.inputs_consumed;
}

/// The eos profile's loop, summed over the seeds (none for the other profiles).
pub fn processing_line(t: &Stats) -> Option<String> {
    (t.processor_commits + t.processor_aborts > 0).then(|| {
        format!(
            "  processing: {} processor transactions committed, {} not (aborted, failed or fenced), {} zombies fenced, {} rebalances (generations), {} members left; {} inputs consumed below the group's offsets, {} committed outputs",
            t.processor_commits, t.processor_aborts, t.zombies_fenced, t.rebalances, t.leaves, t.inputs_consumed, t.outputs
        )
    })
}

/// The replication activity per 1000 seeds.
pub fn replication_line(t: &Stats, seeds: u64) -> String {
    let per_k = |n: u64| n as f64 * 1000.0 / seeds.max(1) as f64;
    format!(
        "  replication per 1000 seeds: ISR shrinks {:.0}, ISR expands {:.0}, leader changes {:.0}, truncations \
         {:.0}, coordinator moves {:.0}, controller failovers {:.0}, HW < LEO for {} (summed over partitions)",
        per_k(t.isr_shrinks),
        per_k(t.isr_expands),
        per_k(t.leader_changes),
        per_k(t.truncations),
        per_k(t.coordinator_moves),
        per_k(t.controller_failovers),
        human_ms(per_k(t.hw_below_leo_ms) as u64)
    )
}

fn human_ms(ms: u64) -> String {
    let s = ms / 1000;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}.{:03}s", s, ms % 1000)
    }
}

/// The faults injected, one line per kind; an answer fault lists its count per API.
pub fn fault_lines(counts: &BTreeMap<String, u64>) -> Vec<String> {
    let mut by_kind: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (key, n) in counts {
        match key.split_once(' ') {
            Some((kind, api)) => by_kind.entry(kind).or_default().push(format!("{api} {n}")),
            None => by_kind.entry(key).or_default().push(n.to_string()),
        }
    }
    let mut out = vec![if by_kind.is_empty() { "  faults by kind: none".into() } else { "  faults by kind:".into() }];
    out.extend(by_kind.into_iter().map(|(kind, parts)| format!("    {kind}: {}", parts.join(", "))));
    out
}

/// The summary, then each failure with its witness and replay command (at most `max_failures` shown).
pub fn summary_lines(r: &SweepResult, max_failures: usize) -> Vec<String> {
    let s = &r.spec;
    let t = &r.totals;
    let mut mutation = s.mutation.map(|m| format!("mutation {}", m.name())).unwrap_or_else(|| "no mutation".into());
    if let Some(p) = s.proposal {
        mutation.push_str(&format!(", proposal {}", p.name()));
    }
    let wall_s = r.wall.as_secs_f64();
    let ratio = t.sim_ms as f64 / 1000.0 / wall_s.max(1e-9);
    let mut out = vec![
        format!(
            "sweep {}: seeds {}..{} ({} seeds), {mutation}, {} jobs",
            s.profile.name(),
            s.from,
            u128::from(s.from) + u128::from(r.ran), // One past u64::MAX after the last seed.
            r.ran,
            s.jobs.max(1)
        ),
        format!(
            "  wall {wall_s:.2} s, {:.0} seeds/s; simulated {} ({ratio:.0}x wall)",
            r.seeds_per_second(),
            human_ms(t.sim_ms)
        ),
        format!(
            "  ops {} (producer calls), polls {} ({} records delivered), messages {}, faults {}",
            t.ops, t.polls, t.delivered, t.messages, t.faults
        ),
        format!(
            "  transactions: committed {}, aborted {} (by clients), timed out {}, fenced {}",
            t.committed, t.aborted, t.timed_out, t.fenced
        ),
    ];
    out.push(replication_line(t, r.ran));
    out.extend(processing_line(t));
    out.extend(fault_lines(&t.fault_counts));
    if r.by_invariant.is_empty() {
        out.push("  violations: none".into());
    } else {
        let parts: Vec<String> = r.by_invariant.iter().map(|(k, v)| format!("{k} {v}")).collect();
        out.push(format!(
            "  violations: {} of {} seeds failed (first at index {}); by invariant: {}",
            r.failed,
            r.ran,
            r.first_failure_index().unwrap_or(0),
            parts.join(", ")
        ));
        if r.known_failed > 0 {
            let verdict = if s.strict { "--strict: they fail the sweep" } else { "not new failures" };
            out.push(format!(
                "  {} of the {} failing seeds are a known anomaly of Kafka's: each passes replayed with the proposal \
                 that fixes it (docs/sim-output.md, \"--proposal\"); {verdict}",
                r.known_failed, r.failed
            ));
        }
        if r.failed_after_lost_load > 0 {
            out.push(format!(
                "  {} of the {} failing seeds had a coordinator load __transaction_state records above its HW \
                 that the next coordinator's log lacked (Kafka's load reads to the log end; docs/sim-output.md)",
                r.failed_after_lost_load, r.failed
            ));
        }
    }
    for f in r.failures.iter().take(max_failures) {
        let spec = s.run_spec(f.seed);
        match r.known.get(&f.seed) {
            Some(p) => out.push(format!("KNOWN seed {} ({}): passes with --proposal {}", f.seed, f.swarm, p.name())),
            None => out.push(format!("FAIL seed {} ({})", f.seed, f.swarm)),
        }
        for v in &f.found {
            out.push(format!("  {}: {}", v.invariant, v.witness));
        }
        if let Some(lost) = &f.lost_load {
            out.push(format!("  after: {lost}"));
        }
        out.push(format!("  replay: {}", spec.replay_command()));
    }
    let shown = r.failures.len().min(max_failures) as u64;
    if r.failed > shown {
        out.push(format!("... and {} more failing seeds", r.failed - shown));
    }
    if r.interrupted() {
        out.push(format!(
            "INCOMPLETE: interrupted after {} of {} seeds (seeds {}..{}); the counts above cover those",
            r.ran,
            s.seeds,
            s.from,
            u128::from(s.from) + u128::from(r.ran)
        ));
    }
    out
}
