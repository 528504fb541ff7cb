//! The saved history of a target sweep (`--history FILE`, and every failing sweep): each seed's history
//! and the partition logs read back over the wire, so `txnsim check-history FILE` re-runs the same
//! invariants offline (a wall-clock run cannot be replayed). Schema: schemas/target-history.schema.json.

use super::eos::EosOutcome;
use super::exec::{ClientFault, Counts, SeedRun, FRESH_COMMITTED, FRESH_UNCOMMITTED};
use super::nemesis::NodeFault;
use super::wire::WireLog;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use txnsim_engine::{Offset, PartitionLog, ProducerKind, TopicPartition};
use txnsim_properties::exactly_once::{check_exactly_once, EosView};
use txnsim_properties::{
    check_history_exempting, check_read_superset, Event, History, Invariant, Kind, LogFacts, ProducerCall, Violation,
};
use txnsim_sim::Profile;

/// The `format` field of a history file.
pub const HISTORY_FORMAT: &str = "txnsim-target-history/v1";

#[derive(Serialize, Deserialize)]
pub struct HistoryFile {
    pub format: String,
    /// The `--target` the sweep ran against: a `kafka://` URL or `apache-kafka:N`.
    pub target: String,
    pub profile: String,
    pub seeds: Vec<SavedSeed>,
}

#[derive(Serialize, Deserialize)]
pub struct SavedSeed {
    pub seed: u64,
    pub faults: Vec<String>,
    /// The node faults of `--nemesis`, with their times on the history's clock.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nemesis: Vec<NodeFault>,
    pub counts: Counts,
    pub history: History,
    pub logs: Vec<WireLog>,
    /// The `eos` profile's topics and the group's committed offsets after the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eos: Option<EosOutcome>,
}

impl SavedSeed {
    pub fn of(seed: u64, run: &SeedRun) -> SavedSeed {
        SavedSeed {
            seed,
            faults: run.faults.iter().map(|f| ClientFault::name(*f).to_string()).collect(),
            nemesis: run.nemesis.clone(),
            counts: run.counts.clone(),
            history: run.history.clone(),
            logs: run.logs.clone(),
            eos: run.eos.clone(),
        }
    }
}

/// The invariants a target sweep checks: the history invariants over what the application and readers
/// saw, judged against the logs read back, and the client-intent check that needs no broker internals.
pub const CHECKED: [Invariant; 11] = [
    Invariant::AbortedRead,
    Invariant::PrecommittedRead,
    Invariant::PartialRead,
    Invariant::LostWrite,
    Invariant::Duplicate,
    Invariant::InconsistentOffsets,
    Invariant::PollSkip,
    Invariant::NonmonotonicPoll,
    Invariant::NonmonotonicSend,
    Invariant::UncommittedSupersetOfCommitted,
    Invariant::LsoReachesHighWatermark,
];

/// The `eos` profile's invariants, checked besides `CHECKED` on the final logs and the group's offsets.
pub const EOS_CHECKED: [Invariant; 2] = Invariant::EOS;

/// The invariants a target sweep of `profile` checks.
pub fn checked(profile: Profile) -> Vec<Invariant> {
    let mut out = CHECKED.to_vec();
    if profile.params().eos.is_some() {
        out.extend(EOS_CHECKED);
    }
    out
}

/// Why each invariant outside `CHECKED` cannot run against a real cluster (`Invariant::ALL`: the
/// `eos` profile's, outside it, are checked where it runs).
pub fn not_checked() -> Vec<(Invariant, &'static str)> {
    Invariant::ALL
        .into_iter()
        .filter(|i| !CHECKED.contains(i))
        .map(|i| {
            let why = match (i, i.kind()) {
                (Invariant::PositionReachesLso, _) => {
                    "librdkafka does not say which partition an empty poll fetched, so no empty poll is recorded"
                }
                (Invariant::FailedSendCommitted | Invariant::CommittedWritesCommitted, _) => {
                    "librdkafka speaks transaction version 1, where KIP-890's late batch and late EndTxn break it, as in Kafka"
                }
                (_, Kind::State) => "needs the brokers' producer state, coordinator and aborted index",
                (_, _) => "needs the coordinator's state after the run",
            };
            (i, why)
        })
        .collect()
}

/// What a reader delivered from one partition, in order.
fn delivered(history: &History, consumer: &str, tp: &TopicPartition) -> Vec<(Offset, String)> {
    let mut out = Vec::new();
    for e in &history.events {
        if let Event::Poll { consumer: c, partition, records, .. } = e {
            if c == consumer && partition == tp {
                out.extend(records.iter().cloned());
            }
        }
    }
    out
}

/// Runs every invariant in `CHECKED` on one seed's history and logs, from a sweep of `profile`.
pub fn check_seed(profile: Profile, history: &History, wire_logs: &[WireLog]) -> Result<Vec<Violation>, String> {
    check_seed_with(profile, history, wire_logs, None)
}

/// `check_seed`, and for the `eos` profile the exactly-once invariants over the logs and the group's
/// committed offsets (a seed of that profile without them is refused: it cannot be judged).
pub fn check_seed_with(
    profile: Profile,
    history: &History,
    wire_logs: &[WireLog],
    eos: Option<&EosOutcome>,
) -> Result<Vec<Violation>, String> {
    let logs: BTreeMap<TopicPartition, PartitionLog> =
        wire_logs.iter().map(|l| Ok((l.topic_partition(), l.to_partition_log()?))).collect::<Result<_, String>>()?;
    // `duplicate` and `nonmonotonic-send` leave out the plain producer: without idempotence Kafka may
    // store a record twice or out of order, and librdkafka resends a batch answered NOT_LEADER_OR_FOLLOWER
    // whatever `retries` says (`rd_kafka_handle_Produce_error`), behind later ones, which Kafka answers
    // to an acks=all batch already appended when the leadership moves
    // (`Partition.checkEnoughReplicasReachOffset`); docs/real-kafka.md.
    let params = profile.params();
    let plain: Vec<&str> =
        params.producers.iter().filter(|p| p.kind == ProducerKind::Plain).map(|p| p.name.as_str()).collect();
    let mut out = check_history_exempting(history, &logs, &plain);
    // The eos profile's inputs a plain producer stored twice, and what their processors rightly wrote
    // twice: judged per copy below, not as `duplicate` outputs.
    let twice = match eos.filter(|_| params.eos.is_some()) {
        Some(e) => inputs_stored_twice(history, &logs, &plain, &e.input_topic),
        None => BTreeMap::new(),
    };
    if let Some(e) = eos.filter(|_| !twice.is_empty()) {
        out.retain(|v| {
            let of_twice = twice.keys().any(|i| v.witness.contains(&format!("value \"{i}'@")));
            !(v.invariant == Invariant::Duplicate && v.witness.starts_with(&format!("{}/", e.output_topic)) && of_twice)
        });
    }
    // A record a reader delivered beyond the log read back: the log holds no value where the poll saw one.
    for e in &history.events {
        let Event::Poll { consumer, partition, records, .. } = e else { continue };
        let end = logs.get(partition).map_or(0, |l| l.log_end_offset());
        if let Some((offset, value)) = records.iter().find(|r| r.0 >= end) {
            out.push(Violation::new(
                Invariant::InconsistentOffsets,
                format!("{partition} offset {offset}: {consumer} delivered {value:?}, the log read back ends at {end}"),
            ));
        }
    }
    out.extend(wire_logs.iter().filter_map(hanging));
    for tp in logs.keys() {
        // The two fresh readers started from 0 after the last write; read_committed's records are
        // compared below the point read_uncommitted reached.
        let ru = delivered(history, FRESH_UNCOMMITTED, tp);
        let reached = ru.last().map_or(0, |r| r.0 + 1);
        let rc: Vec<(Offset, String)> =
            delivered(history, FRESH_COMMITTED, tp).into_iter().filter(|r| r.0 < reached).collect();
        out.extend(check_read_superset(tp, 0, &ru, &rc));
    }
    if profile.params().eos.is_some() {
        let eos = eos.ok_or("an eos seed without the group's committed offsets cannot be judged")?;
        let committed: BTreeMap<TopicPartition, i64> = eos.committed.iter().cloned().collect();
        let found = check_exactly_once(&EosView {
            logs: &logs,
            input_topic: &eos.input_topic,
            output_topic: &eos.output_topic,
            committed: &committed,
        });
        // An input stored twice is judged per copy there (`check_exactly_once`).
        out.extend(found);
    }
    Ok(out)
}

/// Where each input value a plain producer stored more than once sits, as committed data of the eos
/// profile's input topic. A non-idempotent producer's batch resent after NOT_LEADER_OR_FOLLOWER may have
/// been appended already (docs/real-kafka.md): each copy is an input record of its own, and the
/// processors rightly write an output for each, equal when one transaction read both.
fn inputs_stored_twice(
    history: &History,
    logs: &BTreeMap<TopicPartition, PartitionLog>,
    plain: &[&str],
    input_topic: &str,
) -> BTreeMap<String, Vec<(TopicPartition, Offset)>> {
    let mut sent_plain = std::collections::BTreeSet::new();
    for e in &history.events {
        if let Event::Invoke { process, call: ProducerCall::Send { values, .. }, .. } = e {
            if plain.contains(&process.as_str()) {
                sent_plain.extend(values.iter().map(String::as_str));
            }
        }
    }
    let mut at: BTreeMap<String, Vec<(TopicPartition, Offset)>> = BTreeMap::new();
    for (tp, log) in logs.iter().filter(|(tp, _)| tp.topic == input_topic) {
        let facts = LogFacts::of(log);
        for (o, v) in
            facts.values.iter().filter(|(o, v)| facts.is_committed_data(**o) && sent_plain.contains(v.as_str()))
        {
            at.entry(v.clone()).or_default().push((tp.clone(), *o));
        }
    }
    at.retain(|_, copies| copies.len() > 1);
    at
}

/// `lso-reaches-high-watermark` on a real cluster: after every transaction ended and the coordinator's
/// timeout aborts had time to run, the LSO still stands below the HW. The transaction holding it is the
/// producer's whose batch starts at the LSO (the first offset of the earliest open transaction).
fn hanging(log: &WireLog) -> Option<Violation> {
    let lso = log.last_stable_offset.filter(|lso| *lso < log.high_watermark)?;
    let holder = log.batches.iter().find(|b| b.base_offset == lso).and_then(|b| b.producer).map_or_else(
        || "no batch starts there".to_string(),
        |p| format!("producer id {} (epoch {}) holds it with the transaction it opened there", p.producer_id, p.epoch),
    );
    Some(Violation::new(
        Invariant::LsoReachesHighWatermark,
        format!(
            "{}: LSO {lso} below HW {} after every transaction ended and the coordinator's timeout had passed: {holder}",
            log.topic_partition(),
            log.high_watermark
        ),
    ))
}

/// One line per violated invariant: its first witness and how many times it was seen.
pub struct Found {
    pub invariant: Invariant,
    pub witness: String,
    pub count: usize,
}

pub fn summarize(violations: &[Violation]) -> Vec<Found> {
    let mut out: Vec<Found> = Vec::new();
    for v in violations {
        match out.iter_mut().find(|f| f.invariant == v.invariant) {
            Some(f) => f.count += 1,
            None => out.push(Found { invariant: v.invariant, witness: v.witness.clone(), count: 1 }),
        }
    }
    out
}

pub fn save(path: &Path, file: &HistoryFile) -> Result<(), String> {
    let text = serde_json::to_string(file).map_err(|e| e.to_string())? + "\n";
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

pub fn load(path: &Path) -> Result<HistoryFile, String> {
    let text = txnsim_sim::files::read_capped(path, txnsim_sim::files::HISTORY_CAP)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    // Which format the file is, before its fields: another of txnsim's files is named as what it is.
    let what = "check-history reads what `sweep --target --history` writes";
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("{}: not a history file: not JSON ({e}); {what}", path.display()))?;
    match value.get("format").and_then(serde_json::Value::as_str) {
        Some(HISTORY_FORMAT) => {}
        Some(other) => {
            return Err(format!("{}: a {other} file, not a history ({HISTORY_FORMAT}); {what}", path.display()))
        }
        None => return Err(format!("{}: not a history file: no \"format\" field; {what}", path.display())),
    }
    let file: HistoryFile = serde_json::from_value(value).map_err(|e| format!("{}: {e}", path.display()))?;
    validate(&file).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(file)
}

/// What `check-history` can judge: each seed once, Kafka's offsets (int64), and a log read back for every
/// partition a reader polled. A file that fails is refused, never passed: a history checked against logs
/// the file does not hold proves nothing. (A delivered record beyond the log read back is a finding,
/// `check_seed`'s, not bad input: a broker can lose what a reader saw.)
fn validate(file: &HistoryFile) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    for s in &file.seeds {
        if !seen.insert(s.seed) {
            return Err(format!("seed {} appears twice", s.seed));
        }
        let beyond_int64 = |o: Offset| o > i64::MAX as Offset;
        for l in &s.logs {
            let last = l.batches.last().map_or(0, |b| b.next_offset());
            if beyond_int64(last) || beyond_int64(l.high_watermark) {
                return Err(format!("seed {}: log {} has an offset beyond int64", s.seed, l.topic_partition()));
            }
        }
        for e in &s.history.events {
            let Event::Poll { consumer, partition, records, fetch_offset, position_after, .. } = e else { continue };
            let offsets = records.iter().map(|r| r.0).chain([*fetch_offset, *position_after]);
            if offsets.clone().any(beyond_int64) {
                return Err(format!("seed {}: {consumer} polled {partition} at an offset beyond int64", s.seed));
            }
            if !s.logs.iter().any(|l| l.topic_partition() == *partition) {
                return Err(format!(
                    "seed {}: {consumer} polled {partition}, whose log the file does not hold",
                    s.seed
                ));
            }
        }
    }
    Ok(())
}

/// `txnsim check-history FILE`: exit 0 if every seed passes, 1 on a violation, 2 on a file it cannot read.
pub fn run_check_history(path: &Path) -> ExitCode {
    let file = match load(path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(profile) = Profile::from_name(&file.profile) else {
        eprintln!("error: {}: profile {:?} is none of {}", path.display(), file.profile, Profile::names());
        return ExitCode::from(2);
    };
    println!(
        "check-history {}: {} seed(s) of profile {} against {}",
        path.display(),
        file.seeds.len(),
        file.profile,
        file.target
    );
    let mut failed = 0;
    for s in &file.seeds {
        match check_seed_with(profile, &s.history, &s.logs, s.eos.as_ref()) {
            Ok(violations) if violations.is_empty() => println!("seed {}: pass{}", s.seed, nemesis_note(&s.nemesis)),
            Ok(violations) => {
                failed += 1;
                if !s.nemesis.is_empty() {
                    println!("seed {}: fail{}", s.seed, nemesis_note(&s.nemesis));
                }
                for f in summarize(&violations) {
                    println!(
                        "VIOLATION seed {}: {} (seen {} times): {}",
                        s.seed,
                        f.invariant.name(),
                        f.count,
                        f.witness
                    );
                }
            }
            Err(e) => {
                eprintln!("error: seed {}: {e}", s.seed);
                return ExitCode::from(2);
            }
        }
    }
    if failed > 0 {
        println!("FAIL: {failed} of {} seed(s) violated an invariant", file.seeds.len());
        ExitCode::from(1)
    } else {
        println!("PASS: {} seed(s), no violation", file.seeds.len());
        ExitCode::SUCCESS
    }
}

/// ` under kill-node 2 at 812..9345 ms, ...` for a seed the nemesis ran faults in; empty otherwise.
fn nemesis_note(faults: &[NodeFault]) -> String {
    if faults.is_empty() {
        return String::new();
    }
    format!(" under {}", faults.iter().map(NodeFault::describe).collect::<Vec<_>>().join(", "))
}
