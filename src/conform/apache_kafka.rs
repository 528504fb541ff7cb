//! `txnsim conform --target apache-kafka:N` (issue 48 item 3): every client also reads every layout on a
//! real Kafka 4.3.1 cluster, so that a failure against `txnsim serve` counts as a finding only when it also
//! happens there. The harness (`txnsim_kafka::apache_kafka`, as `sweep --target apache-kafka:N` uses it)
//! starts N nodes; Kafka's Java client 4.3.1 builds the layouts on them (the player,
//! conform/adapters/java-4.3.1/layouts, scripts/ConformLayouts.java) and stops at each read (`--pause`)
//! while every adapter reads the partition at both isolation levels, up to the read's high watermark
//! (read_uncommitted) or last stable offset (read_committed). Each client's delivery there is held to what
//! the Java client delivered there (Kafka 4.3.1 is the oracle); the same client's delivery on serve was held
//! to the engine's reference (`super::run_all`). The log the player saw is held to the engine's too: a
//! difference is an engine fidelity defect.

use super::adapter::Outcome;
use super::build::Reference;
use super::layouts::Layout;
use super::report::{grid, isolation, judge, shell_quote, Client, Run, Verdict};
use super::ConformArgs;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use txnsim_engine::{Cluster, IsolationLevel, TopicPartition};
use txnsim_kafka::apache_kafka::{spawn_tied, ClusterSpec, Distribution, KafkaCluster, KAFKA_VERSION};
use txnsim_kafka::remote::{parse_target, TargetSpec};

pub const FORMAT: &str = "txnsim-conform-real/v1";
const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// The player: Kafka's Java client 4.3.1 building the layouts (conform/adapters/java-4.3.1/layouts).
const PLAYER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/conform/adapters/java-4.3.1/layouts");
/// How long the player may take to print its next line: a layout's steps (a TV1 producer's feature
/// downgrade and a roll's config waits included), or its first compile of the player.
const PLAYER_STEP_LIMIT: Duration = Duration::from_secs(300);

/// `--target`: the nodes of the cluster to start, or why the flag is bad input.
pub fn parse(target: &str) -> Result<usize, String> {
    match parse_target(target) {
        Ok(TargetSpec::Harness(nodes)) => Ok(nodes),
        Ok(TargetSpec::Brokers(_)) | Err(_) => Err(format!(
            "--target {target:?}: conform starts its own Kafka {KAFKA_VERSION} cluster: apache-kafka:1 or apache-kafka:3"
        )),
    }
}

/// The engine's log at a partition after the build, where every read reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Ends {
    pub log_start: u64,
    pub high_watermark: u64,
    pub last_stable_offset: u64,
}

/// The engine's ends of every partition a reference reads (called before the cluster goes to serve).
pub fn engine_ends(cluster: &Cluster, references: &[Reference]) -> BTreeMap<(String, u32), Ends> {
    let mut ends = BTreeMap::new();
    for r in references {
        let tp = TopicPartition::new(&r.topic, r.partition);
        if let Some(log) = cluster.broker.partition(&tp) {
            let e = Ends {
                log_start: log.log_start_offset(),
                high_watermark: log.high_watermark(),
                last_stable_offset: log.last_stable_offset(&cluster.config.mutations),
            };
            ends.insert((r.topic.clone(), r.partition), e);
        }
    }
    ends
}

/// A read the player made on Kafka: the partition's ends and what the Java client delivered at each level.
#[derive(Clone, Debug)]
struct PlayerRead {
    layout: String,
    topic: String,
    partition: u32,
    from: u64,
    ends: Ends,
    /// The Java client's delivery as a reference: read_committed, then read_uncommitted.
    java: [Reference; 2],
}

/// One client's read of one engine reference: on serve, and on real Kafka (None: the player never
/// reached the read).
struct Confirm<'a> {
    serve: &'a Run,
    real: Option<Real>,
}

struct Real {
    java: Reference,
    outcome: Outcome,
    /// Held to what the Java client delivered on Kafka, the oracle.
    vs_java: (Verdict, Option<String>),
    /// Held to the engine's reference (differs from `vs_java` only where the engine's log does).
    vs_engine: (Verdict, Option<String>),
}

/// A read's (and a cell's, its worst read's) outcome on both, worst last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Confirmation {
    Pass,
    Unsupported,
    /// The client fails on serve and on real Kafka at the same first wrong delivery: a finding.
    Confirmed,
    /// The client fails on both, but its first wrong delivery differs: neither confirmed nor refuted.
    Differs,
    /// The client passes on serve and fails on real Kafka: the catalogue on serve misses it.
    RealOnly,
    /// The client fails on serve and passes on real Kafka: txnsim's defect.
    TxnsimOnly,
    /// The player never reached the read on real Kafka.
    NotRead,
    AdapterError,
}

impl Confirmation {
    fn word(self) -> &'static str {
        match self {
            Confirmation::Pass => "pass",
            Confirmation::Unsupported => "unsupported",
            Confirmation::Confirmed => "CONFIRMED",
            Confirmation::Differs => "FAIL, DIFFERS",
            Confirmation::RealOnly => "REAL-ONLY",
            Confirmation::TxnsimOnly => "TXNSIM-ONLY",
            Confirmation::NotRead => "NOT READ",
            Confirmation::AdapterError => "ADAPTER ERROR",
        }
    }

    /// A read's, from its verdict and first wrong delivery on serve and on real Kafka (None: not read).
    pub fn of(serve: (&Verdict, &Option<String>), real: Option<(&Verdict, &Option<String>)>) -> Confirmation {
        let Some(real) = real else { return Confirmation::NotRead };
        match (serve.0, real.0) {
            (Verdict::AdapterError, _) | (_, Verdict::AdapterError) => Confirmation::AdapterError,
            (Verdict::Fail, Verdict::Fail) if serve.1 == real.1 => Confirmation::Confirmed,
            (Verdict::Fail, Verdict::Fail) => Confirmation::Differs,
            (Verdict::Fail, _) => Confirmation::TxnsimOnly,
            (_, Verdict::Fail) => Confirmation::RealOnly,
            (Verdict::Unsupported, _) | (_, Verdict::Unsupported) => Confirmation::Unsupported,
            (Verdict::Pass, Verdict::Pass) => Confirmation::Pass,
        }
    }
}

impl Confirm<'_> {
    fn verdict(&self) -> Confirmation {
        Confirmation::of(
            (&self.serve.verdict, &self.serve.detail),
            self.real.as_ref().map(|r| (&r.vs_java.0, &r.vs_java.1)),
        )
    }
}

/// What `--target` prints and writes, and its exit code.
pub struct Report {
    pub text: String,
    pub json: String,
    pub html: String,
    pub code: u8,
}

/// The player, killed and reaped on every way out.
struct Player(Child);

impl Drop for Player {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

/// Starts the cluster, plays the layouts on it with every client reading at each read, and reports each
/// cell against serve (`serve`, the runs `txnsim conform` makes without `--target`) and real Kafka.
#[allow(clippy::too_many_arguments)]
pub fn confirm(
    nodes: usize,
    args: &ConformArgs,
    file: &Path,
    layouts: &[Layout],
    clients: &mut [Client],
    serve: &[Run],
    ends: &BTreeMap<(String, u32), Ends>,
) -> Result<Report, String> {
    let target = format!("apache-kafka:{nodes}");
    let cache = Path::new(ROOT).join("target/tmp");
    let dist = Distribution::resolve(&cache).map_err(|e| format!("--target {target}: {e}"))?;
    let dir = cache.join(format!("apache-kafka-conform-{}", std::process::id()));
    let started = Instant::now();
    // Dropped on every way out of this function (and its nodes die with txnsim: PR_SET_PDEATHSIG).
    let cluster = KafkaCluster::start(&dist, &dir, &ClusterSpec { nodes, ..ClusterSpec::seed() })
        .map_err(|e| format!("--target {target}: {e}"))?;
    let bootstrap = cluster.bootstrap();
    // An adapter's request names one address (docs/conform.md, contract 1); the client finds the rest.
    let first = cluster.addresses()[0].clone();
    println!(
        "txnsim conform --target {target}: Kafka {KAFKA_VERSION} ({nodes} node(s)) at {bootstrap}, ready in {:.1} s; \
         Kafka's Java client {KAFKA_VERSION} builds the layouts there (conform/adapters/java-4.3.1/layouts)",
        started.elapsed().as_secs_f64()
    );
    let played = play(args, file, layouts, &bootstrap, &first, &dir);
    drop(cluster);
    std::fs::remove_dir_all(&dir).ok();
    let (reads, real_runs, player_errors) = played?;
    for (client, name) in real_runs.iter().filter_map(|(r, n)| n.clone().map(|n| (r.client, n))) {
        clients[client].name.get_or_insert(name);
    }

    // Each client's read on serve, and the same read on Kafka.
    let mut confirms = Vec::new();
    for run in serve {
        let r = &run.reference;
        let played = reads
            .iter()
            .find(|p| (&p.layout, &p.topic, p.partition, p.from) == (&r.layout, &r.topic, r.partition, r.from));
        let real = played.and_then(|p| {
            let java = p.java.iter().find(|j| j.isolation == r.isolation).expect("both levels").clone();
            let (real, _) = real_runs.iter().find(|(k, _)| {
                k.client == run.client
                    && (&k.reference.topic, k.reference.partition, k.reference.from, k.reference.isolation)
                        == (&r.topic, r.partition, r.from, r.isolation)
            })?;
            let vs_java = judge(&java, &real.outcome);
            let vs_engine = judge(r, &real.outcome);
            Some(Real { java, outcome: real.outcome.clone(), vs_java, vs_engine })
        });
        confirms.push(Confirm { serve: run, real });
    }
    let fidelity = fidelity(layouts, &reads, serve, ends);
    let names: Vec<(String, String)> = layouts.iter().map(|l| (l.name.clone(), l.what.clone())).collect();
    let layouts_arg = args.layouts.as_ref().map(|_| file.display().to_string());
    let matrix = RealMatrix {
        target: &target,
        clients,
        layouts: &names,
        confirms: &confirms,
        fidelity: &fidelity,
        player_errors: &player_errors,
        layouts_arg: layouts_arg.as_deref(),
        reads_played: reads.len(),
    };
    let worst = confirms.iter().map(Confirm::verdict).max().unwrap_or(Confirmation::Pass);
    let code = match worst {
        Confirmation::AdapterError | Confirmation::NotRead => 2,
        _ if !player_errors.is_empty() => 2,
        Confirmation::Confirmed | Confirmation::Differs | Confirmation::RealOnly | Confirmation::TxnsimOnly => 1,
        _ if !fidelity.is_empty() => 1,
        Confirmation::Pass | Confirmation::Unsupported => 0,
    };
    Ok(Report {
        text: matrix.text(),
        json: serde_json::to_string_pretty(&matrix.json()).expect("JSON"),
        html: matrix.html(),
        code,
    })
}

/// The catalogue as the player must play it: a `flush` after every `send`, so each send is its own batch and
/// is in the log before the next step, as in the engine (docs/conform.md, "Steps run in order").
fn flushed(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        out += line;
        out += "\n";
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() == Some(&"send") && words.len() > 1 {
            out += &format!("flush {}\n", words[1]);
        }
    }
    out
}

type RealRuns = Vec<(Run, super::adapter::ClientName)>;

/// Runs the player with `--pause` and, at each read it prints, every client at both levels: the reads, the
/// clients' runs, and the player's errors (a layout not built as written, or the player's own failure).
fn play(
    args: &ConformArgs,
    file: &Path,
    layouts: &[Layout],
    bootstrap: &str,
    first: &str,
    dir: &Path,
) -> Result<(Vec<PlayerRead>, RealRuns, Vec<String>), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("--layouts {}: {e}", file.display()))?;
    let script = dir.join("layouts-flushed.txt");
    std::fs::write(&script, flushed(&text)).map_err(|e| format!("{}: {e}", script.display()))?;
    let trace_path = dir.join("player.stderr");
    let trace = std::fs::File::create(&trace_path).map_err(|e| format!("{}: {e}", trace_path.display()))?;
    let mut command = Command::new(PLAYER);
    command.arg("--pause").arg(bootstrap).arg(&script).args(layouts.iter().map(|l| &l.name));
    command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(trace);
    let mut player = Player(spawn_tied(command).map_err(|e| format!("cannot start {PLAYER}: {e}"))?);
    let stdout = player.0.stdout.take().expect("piped");
    let mut stdin = player.0.stdin.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let (mut reads, mut runs, mut errors) = (Vec::new(), Vec::new(), Vec::new());
    let tail = |path: &Path| {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    };
    loop {
        let line = match rx.recv_timeout(PLAYER_STEP_LIMIT) {
            Ok(line) => line,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                errors.push(format!(
                    "the player printed nothing for {} s (killed); its stderr ends: {}",
                    PLAYER_STEP_LIMIT.as_secs(),
                    tail(&trace_path)
                ));
                return Ok((reads, runs, errors));
            }
        };
        let v: Value = serde_json::from_str(&line).map_err(|_| format!("the player printed {line:?}"))?;
        if let Some(e) = v.get("error") {
            errors.push(format!("{}: {}", v["layout"].as_str().unwrap_or("?"), e.as_str().unwrap_or_default()));
        }
        if v.get("read").is_none() {
            continue;
        }
        let read = player_read(&v).ok_or_else(|| format!("the player printed a read without its fields: {line}"))?;
        let asked: Vec<Reference> = read
            .java
            .iter()
            .map(|j| {
                let stop = match j.isolation {
                    IsolationLevel::ReadCommitted => read.ends.last_stable_offset,
                    IsolationLevel::ReadUncommitted => read.ends.high_watermark,
                };
                Reference { position: stop, ..j.clone() }
            })
            .collect();
        runs.extend(super::run_all(&args.clients, &asked, first, args));
        reads.push(read);
        // The next step may change the log: the player waits for this line.
        if writeln!(stdin).is_err() {
            break;
        }
    }
    drop(stdin);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        match player.0.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            _ => break None,
        }
    };
    match status {
        Some(s) if s.success() => {}
        Some(s) if s.code() == Some(1) && !errors.is_empty() => {}
        Some(s) => errors.push(format!("the player exited {s}; its stderr ends: {}", tail(&trace_path))),
        None => errors.push("the player did not exit 30 s after its last line (killed)".to_string()),
    }
    Ok((reads, runs, errors))
}

fn player_read(v: &Value) -> Option<PlayerRead> {
    let records = |level: &Value| -> Option<Vec<(u64, String)>> {
        let list = level["records"].as_array()?;
        list.iter().map(|r| Some((r["offset"].as_u64()?, r["value"].as_str()?.to_string()))).collect()
    };
    let layout = v["layout"].as_str()?.to_string();
    let topic = v["topic"].as_str()?.to_string();
    let partition = u32::try_from(v["partition"].as_u64()?).ok()?;
    let from = v["from"].as_u64()?;
    let ends = Ends {
        log_start: v["log_start"].as_u64()?,
        high_watermark: v["high_watermark"].as_u64()?,
        last_stable_offset: v["last_stable_offset"].as_u64()?,
    };
    let java = |isolation: IsolationLevel, key: &str| -> Option<Reference> {
        Some(Reference {
            layout: layout.clone(),
            topic: topic.clone(),
            partition,
            from,
            isolation,
            records: records(&v[key])?,
            position: v[key]["position"].as_u64()?,
        })
    };
    let java = [
        java(IsolationLevel::ReadCommitted, "read_committed")?,
        java(IsolationLevel::ReadUncommitted, "read_uncommitted")?,
    ];
    Some(PlayerRead { layout, topic, partition, from, ends, java })
}

/// A read where the log on Kafka differs from the engine's: its ends, or the Java client's delivery.
#[derive(Debug, Serialize)]
struct Fidelity {
    layout: String,
    read: String,
    differences: Vec<String>,
}

fn show(records: &[(u64, String)]) -> String {
    let list: Vec<String> = records.iter().map(|(o, v)| format!("{o}:{v}")).collect();
    format!("[{}]", list.join(" "))
}

fn fidelity(
    layouts: &[Layout],
    reads: &[PlayerRead],
    serve: &[Run],
    ends: &BTreeMap<(String, u32), Ends>,
) -> Vec<Fidelity> {
    let mut out = Vec::new();
    for l in layouts {
        for r in &l.reads {
            let topic = super::layouts::cluster_topic(&l.name, &r.topic);
            let name = format!("{topic}/{} from {}", r.partition, r.from);
            let Some(p) = reads.iter().find(|p| (&p.topic, p.partition, p.from) == (&topic, r.partition, r.from))
            else {
                continue; // reported as NOT READ in every cell
            };
            let mut differences = Vec::new();
            match ends.get(&(topic.clone(), r.partition)) {
                Some(e) if *e != p.ends => differences.push(format!(
                    "log start / high watermark / last stable offset: the engine's {}/{}/{}, Kafka's {}/{}/{}",
                    e.log_start,
                    e.high_watermark,
                    e.last_stable_offset,
                    p.ends.log_start,
                    p.ends.high_watermark,
                    p.ends.last_stable_offset
                )),
                Some(_) => {}
                None => differences.push("the engine has no such partition".to_string()),
            }
            for java in &p.java {
                let engine = serve.iter().map(|run| &run.reference).find(|e| {
                    (&e.topic, e.partition, e.from, e.isolation) == (&topic, r.partition, r.from, java.isolation)
                });
                if let Some(e) = engine {
                    if (&e.records, e.position) != (&java.records, java.position) {
                        differences.push(format!(
                            "{}: the engine's consumer delivers {} and ends at {}, Kafka's Java client delivered {} and ended at {}",
                            isolation(java),
                            show(&e.records),
                            e.position,
                            show(&java.records),
                            java.position
                        ));
                    }
                }
            }
            if !differences.is_empty() {
                out.push(Fidelity { layout: l.name.clone(), read: name, differences });
            }
        }
    }
    out
}

struct RealMatrix<'a> {
    target: &'a str,
    clients: &'a [Client],
    layouts: &'a [(String, String)],
    confirms: &'a [Confirm<'a>],
    fidelity: &'a [Fidelity],
    player_errors: &'a [String],
    layouts_arg: Option<&'a str>,
    reads_played: usize,
}

impl RealMatrix<'_> {
    /// A cell: the worst of its reads, and the first read with that outcome.
    fn cell(&self, client: usize, layout: &str) -> (Confirmation, Option<&Confirm<'_>>) {
        let mine = self.confirms.iter().filter(|c| c.serve.client == client && c.serve.reference.layout == layout);
        let worst = mine.clone().map(Confirm::verdict).max().unwrap_or(Confirmation::Pass);
        (worst, mine.clone().find(|c| c.verdict() == worst && worst != Confirmation::Pass))
    }

    fn repro(&self, client: usize, layout: &str) -> String {
        let file = self.layouts_arg.map_or(String::new(), |f| format!(" --layouts {}", shell_quote(f)));
        format!(
            "txnsim conform --client {}{file} --only {layout} --target {}",
            shell_quote(&self.clients[client].command),
            self.target
        )
    }

    /// One line of a cell's first departing read: what went wrong on serve and on real Kafka.
    fn detail(c: &Confirm<'_>) -> String {
        let serve = c.serve.detail.as_deref().unwrap_or("pass");
        let Some(real) = &c.real else {
            return format!("serve: {serve}; real Kafka: the player never reached this read");
        };
        let kafka = real.vs_java.1.as_deref().unwrap_or("pass");
        match c.verdict() {
            Confirmation::Confirmed => format!("{serve} (the same on serve and on real Kafka)"),
            _ => format!("serve: {serve}; real Kafka: {kafka}"),
        }
    }

    fn counts(&self) -> BTreeMap<Confirmation, usize> {
        let mut counts = BTreeMap::new();
        for i in 0..self.clients.len() {
            for (name, _) in self.layouts {
                *counts.entry(self.cell(i, name).0).or_insert(0) += 1;
            }
        }
        counts
    }

    fn summary(&self) -> String {
        let c = self.counts();
        let n = |v| c.get(&v).copied().unwrap_or(0);
        format!(
            "conform on {}: {} pass, {} unsupported, {} confirmed on real Kafka, {} failing differently, {} txnsim-only, \
             {} real-only, {} not read, {} adapter error(s); {} fidelity difference(s), {} player error(s)",
            self.target,
            n(Confirmation::Pass),
            n(Confirmation::Unsupported),
            n(Confirmation::Confirmed),
            n(Confirmation::Differs),
            n(Confirmation::TxnsimOnly),
            n(Confirmation::RealOnly),
            n(Confirmation::NotRead),
            n(Confirmation::AdapterError),
            self.fidelity.len(),
            self.player_errors.len()
        )
    }

    fn text(&self) -> String {
        let mut out = grid(self.clients, self.layouts, |i, name| self.cell(i, name).0.word());
        for i in 0..self.clients.len() {
            for (name, _) in self.layouts {
                let (verdict, Some(c)) = self.cell(i, name) else { continue };
                out += &format!("[{}] {name}: {}: {}\n", i + 1, c.serve.read_name(), Self::detail(c));
                if verdict == Confirmation::TxnsimOnly {
                    out += &format!(
                        "      TXNSIM DEFECT: the client fails against txnsim serve but passes on real Kafka {KAFKA_VERSION}\n"
                    );
                }
                if let Some(Real { outcome: Outcome::AdapterError { stderr, .. }, .. }) = &c.real {
                    for line in stderr.lines() {
                        out += &format!("      stderr (real Kafka): {line}\n");
                    }
                }
                if verdict != Confirmation::Unsupported {
                    out += &format!("      repro: {}\n", self.repro(i, name));
                }
            }
        }
        for i in 0..self.clients.len() {
            let unknown = |real: bool| -> Vec<&str> {
                self.confirms
                    .iter()
                    .filter(|c| c.serve.client == i)
                    .filter_map(|c| match (real, &c.serve.outcome, c.real.as_ref().map(|r| &r.outcome)) {
                        (false, Outcome::Read { position_unknown: Some(why), .. }, _) => Some(why.as_str()),
                        (true, _, Some(Outcome::Read { position_unknown: Some(why), .. })) => Some(why.as_str()),
                        _ => None,
                    })
                    .collect()
            };
            let (serve, real) = (unknown(false), unknown(true));
            if let Some(why) = serve.first().or(real.first()) {
                out += &format!(
                    "[{}] position not compared in {} read(s) on serve and {} on real Kafka: {why}\n",
                    i + 1,
                    serve.len(),
                    real.len()
                );
            }
        }
        for f in self.fidelity {
            for d in &f.differences {
                out += &format!("ENGINE FIDELITY DEFECT: {}: {}: {d}\n", f.layout, f.read);
            }
        }
        if self.fidelity.is_empty() {
            out += &format!(
                "fidelity: at each of the {} reads played, the log on Kafka (log start, high watermark, last stable \
                 offset) and the Java client's deliveries at both levels are the engine's\n",
                self.reads_played
            );
        }
        for e in self.player_errors {
            out += &format!("player: ERROR {e}\n");
        }
        out + &self.summary() + "\n"
    }

    fn json(&self) -> Value {
        let clients: Vec<Value> = self.clients.iter().map(Client::json).collect();
        let records = |r: &Reference| {
            let list: Vec<Value> = r.records.iter().map(|(o, v)| json!({"offset": o, "value": v})).collect();
            json!({"records": list, "position": r.position})
        };
        let mut cells = Vec::new();
        for i in 0..self.clients.len() {
            for (name, _) in self.layouts {
                let (verdict, first) = self.cell(i, name);
                let reads: Vec<Value> = self
                    .confirms
                    .iter()
                    .filter(|c| c.serve.client == i && &c.serve.reference.layout == name)
                    .map(|c| {
                        let r = &c.serve.reference;
                        let real = c.real.as_ref().map(|k| {
                            json!({
                                "java": records(&k.java),
                                "outcome": k.outcome,
                                "verdict": k.vs_java.0,
                                "detail": k.vs_java.1,
                                "vs_engine": {"verdict": k.vs_engine.0, "detail": k.vs_engine.1},
                            })
                        });
                        json!({
                            "topic": r.topic,
                            "partition": r.partition,
                            "from": r.from,
                            "isolation": isolation(r),
                            "verdict": c.verdict(),
                            "engine": records(r),
                            "serve": {"outcome": c.serve.outcome, "verdict": c.serve.verdict, "detail": c.serve.detail},
                            "real_kafka": real,
                        })
                    })
                    .collect();
                let failing = !matches!(verdict, Confirmation::Pass | Confirmation::Unsupported);
                cells.push(json!({
                    "client": i,
                    "layout": name,
                    "verdict": verdict,
                    "first_wrong": first.map(|c| format!("{}: {}", c.serve.read_name(), Self::detail(c))),
                    "repro": failing.then(|| self.repro(i, name)),
                    "reads": reads,
                }));
            }
        }
        let layouts: Vec<Value> = self.layouts.iter().map(|(n, w)| json!({"name": n, "tests": w})).collect();
        let totals: BTreeMap<String, usize> = self
            .counts()
            .into_iter()
            .map(|(k, v)| (serde_json::to_value(k).expect("a name").as_str().unwrap_or_default().to_string(), v))
            .collect();
        json!({
            "format": FORMAT,
            "target": self.target,
            "kafka_version": KAFKA_VERSION,
            "clients": clients,
            "layouts": layouts,
            "cells": cells,
            "fidelity": self.fidelity,
            "player_errors": self.player_errors,
            "reads_played": self.reads_played,
            "totals": totals,
        })
    }

    fn html(&self) -> String {
        let esc = |s: &str| s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;");
        let mut rows = String::new();
        for (name, what) in self.layouts {
            rows += &format!("<tr><th title=\"{}\">{}</th>", esc(what), esc(name));
            for i in 0..self.clients.len() {
                let (verdict, first) = self.cell(i, name);
                let text = first.map_or(String::new(), |c| {
                    format!("<br><small>{}: {}</small>", esc(&c.serve.read_name()), esc(&Self::detail(c)))
                });
                let repro = match verdict {
                    Confirmation::Pass | Confirmation::Unsupported => String::new(),
                    _ => format!("<br><code>{}</code>", esc(&self.repro(i, name))),
                };
                rows += &format!("<td class=\"{verdict:?}\">{}{text}{repro}</td>", verdict.word());
            }
            rows += "</tr>\n";
        }
        let heads: String = self.clients.iter().map(|c| format!("<th>{}</th>", esc(&c.label()))).collect();
        let mut notes = String::new();
        for f in self.fidelity {
            for d in &f.differences {
                notes += &format!("<li>ENGINE FIDELITY DEFECT: {}: {}: {}</li>", esc(&f.layout), esc(&f.read), esc(d));
            }
        }
        for e in self.player_errors {
            notes += &format!("<li>player: ERROR {}</li>", esc(e));
        }
        format!(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>txnsim conform --target {t}</title><style>\
             body{{font-family:sans-serif}} td,th{{border:1px solid #999;padding:4px;vertical-align:top}} \
             table{{border-collapse:collapse}} .Pass{{background:#cfc}} .Unsupported{{background:#eee}} \
             .Confirmed{{background:#fcc}} .Differs{{background:#fcf}} .RealOnly{{background:#f9c}} .TxnsimOnly{{background:#f66}} \
             .NotRead{{background:#fc9}} .AdapterError{{background:#fc9}}</style></head><body>\n\
             <h1>txnsim conform on txnsim serve and on Kafka {v} ({t})</h1><p>{}</p>\n\
             <p>CONFIRMED: the client fails on txnsim serve and on real Kafka at the same first wrong delivery (a \
             finding). FAIL, DIFFERS: it fails on both, differently. TXNSIM-ONLY: it fails on \
             serve only (txnsim's defect). REAL-ONLY: it fails on real Kafka only.</p>\n\
             <table><tr><th>layout</th>{heads}</tr>\n{rows}</table>\n<ul>{notes}</ul>\n\
             <script type=\"application/json\" id=\"report\">{}</script></body></html>\n",
            esc(&self.summary()),
            self.json().to_string().replace("</", "<\\/"),
            t = esc(self.target),
            v = KAFKA_VERSION,
        )
    }
}
