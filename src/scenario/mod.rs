//! Scenario files: scripted experiments with exact expected outcomes (docs/scenario-format.md).
//! `load` parses and validates strictly; `run` drives the engine and returns the first difference.

mod format;
pub mod network;
mod runner;
mod show;

pub use format::{Layer, Op, DESCRIPTIVE_FIELDS, FORMAT};
pub use runner::{run, Difference, RunOptions, RunReport};
pub use show::{broker_step, story};

use format::{strip_descriptive, MultiExpect, PartitionExpect, ScenarioHeader};
use serde::de::{self, DeserializeOwned, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_path_to_error::Segment;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use txnsim_engine::metadata::MAX_PARTITIONS_PER_TOPIC;
use txnsim_engine::record::CompressionType;
use txnsim_engine::{KafkaError, Proposal, TimeMs, Topology, TransactionVersion};

/// Bad input: the file, scenario, op and field it is about, and what is wrong. Exit code 2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioError {
    pub file: String,
    pub scenario: Option<String>,
    pub op_index: Option<usize>,
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(s) = &self.scenario {
            write!(f, ": scenario '{s}'")?;
        }
        if let Some(i) = self.op_index {
            write!(f, ": op {i}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ": field '{field}'")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ScenarioError {}

/// The scenario-level expectation: one partition, or several.
#[derive(Clone, Debug, PartialEq)]
pub enum Expectation {
    One(Box<PartitionExpect>),
    Many(Vec<PartitionExpect>),
}

impl Expectation {
    pub fn partitions(&self) -> Vec<&PartitionExpect> {
        match self {
            Expectation::One(p) => vec![p.as_ref()],
            Expectation::Many(ps) => ps.iter().collect(),
        }
    }
}

/// A parsed and validated scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    pub file: String,
    pub name: String,
    pub source: Option<String>,
    pub layer: Layer,
    pub topics: BTreeMap<String, u32>,
    pub manual_high_watermark: bool,
    pub transaction_version: TransactionVersion,
    /// Brokers and replication factor (`brokers`, `replication_factor`), and `min_insync_replicas`.
    pub topology: Topology,
    pub min_insync_replicas: u32,
    /// `eligible.leader.replicas.version` 1 (the default): the controller keeps KIP-966's ELR.
    pub eligible_leader_replicas: bool,
    /// A fix Kafka has not made, run in place of Kafka's behaviour (`proposal`).
    pub proposal: Option<Proposal>,
    pub ops: Vec<Op>,
    pub expect: Option<Expectation>,
    /// The network layer's ops and final expectation (its ops are not the other layers').
    pub network: Option<NetworkScript>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct NetworkScript {
    /// What `__transaction_state` holds before the first op (`transactional_ids`).
    pub transactional_ids: Vec<network::LoadedTransaction>,
    /// The state invariants the scenario shows breaking (`shows_violations`).
    pub shows: Vec<txnsim_properties::Invariant>,
    pub ops: Vec<network::NetOp>,
    pub expect: Option<network::Expect>,
}

impl Scenario {
    fn error(&self, op_index: Option<usize>, field: &str, message: impl Into<String>) -> ScenarioError {
        ScenarioError {
            file: self.file.clone(),
            scenario: Some(self.name.clone()),
            op_index,
            field: Some(field.to_string()),
            message: message.into(),
        }
    }
}

/// The scenario files under `path`: the file itself, or every `*.json` below a folder, sorted.
pub fn collect_files(path: &Path) -> Result<Vec<PathBuf>, ScenarioError> {
    collect_all(std::slice::from_ref(&path.to_path_buf()))
}

/// The scenario files under every path, each file once however many paths or symlinks reach it (by
/// canonical path, first naming kept), and each folder walked once, so a symlink loop ends.
pub fn collect_all(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ScenarioError> {
    let mut seen_files = BTreeSet::new();
    let mut seen_dirs = BTreeSet::new();
    let mut out = Vec::new();
    for path in paths {
        let unreadable = |message: String| ScenarioError {
            file: path.display().to_string(),
            scenario: None,
            op_index: None,
            field: None,
            message,
        };
        let canonical = path.canonicalize().map_err(|e| unreadable(format!("cannot read: {e}")))?;
        if !canonical.is_dir() {
            if seen_files.insert(canonical) {
                out.push(path.clone());
            }
            continue;
        }
        let mut files = Vec::new();
        let mut stack = vec![(path.clone(), canonical)];
        while let Some((dir, canonical_dir)) = stack.pop() {
            if !seen_dirs.insert(canonical_dir) {
                continue;
            }
            let listing_error = |e: std::io::Error| unreadable(format!("cannot list {}: {e}", dir.display()));
            let mut entries = Vec::new();
            for entry in std::fs::read_dir(&dir).map_err(listing_error)? {
                entries.push(entry.map_err(listing_error)?.path());
            }
            // Sorted, so which of two names of one file is kept does not depend on the file system.
            entries.sort();
            for p in entries {
                // A dangling or looping symlink has no canonical path; as a *.json it fails to load below.
                let canonical = p.canonicalize().ok();
                match canonical {
                    Some(c) if c.is_dir() => stack.push((p, c)),
                    _ if p.extension().is_some_and(|e| e == "json")
                        && seen_files.insert(canonical.unwrap_or_else(|| p.clone())) =>
                    {
                        files.push(p);
                    }
                    _ => {}
                }
            }
        }
        files.sort();
        out.extend(files);
    }
    Ok(out)
}

/// Reads and validates every scenario of one file.
pub fn load(path: &Path) -> Result<Vec<Scenario>, ScenarioError> {
    let file = path.display().to_string();
    let text = txnsim_sim::files::read_capped(path, txnsim_sim::files::INPUT_CAP).map_err(|e| ScenarioError {
        file: file.clone(),
        scenario: None,
        op_index: None,
        field: None,
        message: format!("cannot read: {e}"),
    })?;
    parse(&file, &text)
}

fn file_error(file: &str, field: Option<&str>, message: impl Into<String>) -> ScenarioError {
    ScenarioError {
        file: file.to_string(),
        scenario: None,
        op_index: None,
        field: field.map(str::to_string),
        message: message.into(),
    }
}

/// Parses a scenario file's text; `file` names it in errors.
pub fn parse(file: &str, text: &str) -> Result<Vec<Scenario>, ScenarioError> {
    serde_json::from_str::<NoDuplicateKeys>(text)
        .map_err(|e| file_error(file, None, format!("malformed JSON: {e}")))?;
    let mut root: Value =
        serde_json::from_str(text).map_err(|e| file_error(file, None, format!("malformed JSON: {e}")))?;
    strip_descriptive(&mut root);
    let Value::Object(mut map) = root else {
        return Err(file_error(file, None, "the file must be a JSON object with 'format' and 'scenarios'"));
    };
    match map.remove("format") {
        Some(Value::String(f)) if f == FORMAT => {}
        Some(other) => return Err(file_error(file, Some("format"), format!("expected \"{FORMAT}\", found {other}"))),
        None => return Err(file_error(file, Some("format"), "missing field")),
    }
    let Some(Value::Array(scenarios)) = map.remove("scenarios") else {
        return Err(file_error(file, Some("scenarios"), "missing or not a list"));
    };
    if let Some(extra) = map.keys().next() {
        return Err(file_error(file, Some(extra), "unknown field"));
    }
    let mut out = Vec::new();
    let mut names = BTreeSet::new();
    for (i, value) in scenarios.into_iter().enumerate() {
        let label = value.get("name").and_then(Value::as_str).map(str::to_string).unwrap_or(format!("#{i}"));
        let header: ScenarioHeader = deserialize(value).map_err(|(field, message)| ScenarioError {
            file: file.to_string(),
            scenario: Some(label.clone()),
            op_index: None,
            field,
            message,
        })?;
        if !names.insert(header.name.clone()) {
            return Err(ScenarioError {
                file: file.to_string(),
                scenario: Some(header.name),
                op_index: None,
                field: Some("name".into()),
                message: "two scenarios in one file have this name".into(),
            });
        }
        out.push(build(file, header)?);
    }
    if out.is_empty() {
        return Err(file_error(file, Some("scenarios"), "the list is empty"));
    }
    Ok(out)
}

/// Deserializes `value`, splitting an error into the field it is about (a path such as
/// `batches[0].base_offset`, from serde_path_to_error) and what is wrong with the value there, so a
/// value is never reported as a field's name.
pub(crate) fn deserialize<T: DeserializeOwned>(value: Value) -> Result<T, (Option<String>, String)> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let mut parts: Vec<String> = e
            .path()
            .iter()
            .filter_map(|segment| match segment {
                Segment::Seq { index } => Some(format!("[{index}]")),
                Segment::Map { key } => Some(key.clone()),
                // An op's variant is its `op` tag, reported on its own; nothing else is an enum with fields.
                Segment::Enum { .. } | Segment::Unknown => None,
            })
            .collect();
        let serde_message = e.into_inner().to_string();
        let mut message = serde_message.replace('`', "");
        // serde names an unknown or missing field in backquotes (a missing one at its parent's path):
        // the name goes to the path and the message keeps only what is wrong.
        let named = serde_message.starts_with("unknown field") || serde_message.starts_with("missing field");
        if let Some(name) = serde_message.split('`').nth(1).filter(|_| named) {
            if parts.last().map(String::as_str) != Some(name) {
                parts.push(name.to_string());
            }
            message = match serde_message.split_once(", ") {
                Some((_, known)) => format!("unknown field, {}", known.replace('`', "")),
                None if serde_message.starts_with("missing") => "missing".to_string(),
                None => "unknown field".to_string(),
            };
        } else if let Some(rest) =
            message.strip_prefix("invalid type: ").or_else(|| message.strip_prefix("invalid value: "))
        {
            message = format!("found {rest}");
        }
        let mut path = String::new();
        for part in parts {
            if !path.is_empty() && !part.starts_with('[') {
                path.push('.');
            }
            path.push_str(&part);
        }
        ((!path.is_empty()).then_some(path), message)
    })
}

/// Parses one op: its `op` tag names the variant, and the other fields are that variant's
/// (deserialized as an externally tagged enum, which keeps serde_path_to_error's field paths).
fn parse_op(value: Value) -> Result<Op, (Option<String>, String)> {
    let op_field = Some("op".to_string());
    let Value::Object(mut fields) = value else {
        return Err((None, format!("an op must be an object with an 'op' field, found {value}")));
    };
    let tag = match fields.remove("op") {
        Some(Value::String(tag)) => tag,
        Some(other) => return Err((op_field, format!("must be a string naming the op, found {other}"))),
        None => return Err((op_field, "missing field".into())),
    };
    let mut tagged = serde_json::Map::new();
    tagged.insert(tag, Value::Object(fields));
    deserialize(Value::Object(tagged)).map_err(|(field, message)| {
        // An unknown tag has no path; an unknown value of a field (`isolation`, `compression`) keeps its own.
        if message.starts_with("unknown variant") && field.is_none() {
            (op_field, message)
        } else {
            (field, message)
        }
    })
}

fn build(file: &str, h: ScenarioHeader) -> Result<Scenario, ScenarioError> {
    let transaction_version = match h.transaction_version {
        None => TransactionVersion::V1,
        Some(v) => TransactionVersion::from_number(v).ok_or_else(|| ScenarioError {
            file: file.to_string(),
            scenario: Some(h.name.clone()),
            op_index: None,
            field: Some("transaction_version".into()),
            message: format!("must be 1 or 2, found {v}"),
        })?,
    };
    let eligible_leader_replicas = match h.eligible_leader_replicas_version {
        None | Some(1) => true,
        Some(0) => false,
        Some(v) => {
            return Err(ScenarioError {
                file: file.to_string(),
                scenario: Some(h.name.clone()),
                op_index: None,
                field: Some("eligible_leader_replicas_version".into()),
                message: format!("must be 0 or 1, found {v}"),
            })
        }
    };
    let proposal = match h.proposal.as_deref() {
        None => None,
        Some(name) => Some(Proposal::from_name(name).ok_or_else(|| ScenarioError {
            file: file.to_string(),
            scenario: Some(h.name.clone()),
            op_index: None,
            field: Some("proposal".into()),
            message: format!("'{name}' is not a proposal (`txnsim replay --help` lists them)"),
        })?),
    };
    let mut sc = Scenario {
        file: file.to_string(),
        name: h.name,
        source: h.source,
        layer: h.layer,
        topics: h.topics.unwrap_or_else(|| [("t".to_string(), 1)].into_iter().collect()),
        manual_high_watermark: h.manual_high_watermark,
        transaction_version,
        topology: {
            let mut t = Topology::new(h.brokers.unwrap_or(1), h.replication_factor.unwrap_or(1));
            if let Some(rf) = h.transaction_log_replication_factor {
                t.transaction_log_replication_factor = rf;
            }
            t
        },
        min_insync_replicas: h.min_insync_replicas.unwrap_or(1),
        eligible_leader_replicas,
        proposal,
        ops: Vec::new(),
        expect: None,
        network: None,
    };
    check_topology(&sc)?;
    if h.ops.is_empty() {
        return Err(sc.error(None, "ops", "a scenario needs at least one op"));
    }
    if sc.layer == Layer::Network {
        return build_network(
            sc,
            h.transactional_ids.unwrap_or_default(),
            h.shows_violations.unwrap_or_default(),
            h.ops,
            h.expect,
        );
    }
    if h.shows_violations.is_some() {
        return Err(sc.error(None, "shows_violations", "only the network layer shows violations"));
    }
    if h.transactional_ids.is_some() {
        return Err(sc.error(None, "transactional_ids", "only the network layer starts with coordinator records"));
    }
    for (i, value) in h.ops.into_iter().enumerate() {
        let op = parse_op(value).map_err(|(field, message)| ScenarioError {
            file: file.to_string(),
            scenario: Some(sc.name.clone()),
            op_index: Some(i),
            field,
            message,
        })?;
        sc.ops.push(op);
    }
    if let Some(value) = h.expect {
        let in_expect = |(field, message): (Option<String>, String)| {
            let field = field.map_or("expect".to_string(), |f| format!("expect.{f}"));
            sc.error(None, &field, message)
        };
        let expectation = if value.get("partitions").is_some() {
            Expectation::Many(deserialize::<MultiExpect>(value).map_err(in_expect)?.partitions)
        } else {
            Expectation::One(Box::new(deserialize::<PartitionExpect>(value).map_err(in_expect)?))
        };
        sc.expect = Some(expectation);
    }
    validate(&sc)?;
    Ok(sc)
}

fn build_network(
    mut sc: Scenario,
    loaded: Vec<Value>,
    shows: Vec<String>,
    ops: Vec<Value>,
    expect: Option<Value>,
) -> Result<Scenario, ScenarioError> {
    let mut script = NetworkScript { transactional_ids: Vec::new(), shows: Vec::new(), ops: Vec::new(), expect: None };
    for (i, name) in shows.into_iter().enumerate() {
        let invariant = txnsim_properties::Invariant::from_name(&name).ok_or_else(|| {
            sc.error(None, &format!("shows_violations[{i}]"), format!("'{name}' is not an invariant of the catalogue"))
        })?;
        script.shows.push(invariant);
    }
    for (i, value) in loaded.into_iter().enumerate() {
        let field =
            |f: Option<String>| format!("transactional_ids[{i}]{}", f.map(|f| format!(".{f}")).unwrap_or_default());
        let t: network::LoadedTransaction =
            deserialize(value).map_err(|(f, message)| sc.error(None, &field(f), message))?;
        if t.metadata().is_none() {
            let message = format!("must be Empty, CompleteCommit or CompleteAbort, found '{}'", t.state);
            return Err(sc.error(None, &field(Some("state".into())), message));
        }
        if t.producer_id < 0 || t.epoch < 0 {
            return Err(sc.error(None, &field(None), "producer_id and epoch are at least 0"));
        }
        if script.transactional_ids.iter().any(|o| o.transactional_id == t.transactional_id) {
            return Err(sc.error(None, &field(Some("transactional_id".into())), "named twice"));
        }
        script.transactional_ids.push(t);
    }
    let mut down = BTreeSet::new();
    for (i, value) in ops.into_iter().enumerate() {
        let op = network::parse_op(value).map_err(|(field, message)| ScenarioError {
            file: sc.file.clone(),
            scenario: Some(sc.name.clone()),
            op_index: Some(i),
            field,
            message,
        })?;
        // A replicated cluster's brokers crash and start one at a time (`crash_broker`, `start_broker`).
        if matches!(op, network::NetOp::RestartBroker) && sc.topology.brokers > 1 {
            return Err(sc.error(
                Some(i),
                "op",
                "restart_broker needs one broker: a replicated cluster's brokers crash_broker and start_broker",
            ));
        }
        match &op {
            network::NetOp::CrashBroker(b) => check_broker_fault(&sc, i, b.broker, true, &mut down)?,
            network::NetOp::StartBroker(b) => check_broker_fault(&sc, i, b.broker, false, &mut down)?,
            // Kafka's timeouts are int32 milliseconds: a longer wait reaches no timer a shorter one misses,
            // and while it lasts every resend stays in flight.
            network::NetOp::AdvanceTime(t) if t.ms > i32::MAX as TimeMs => {
                return Err(sc.error(
                    Some(i),
                    "ms",
                    format!("{} is above {}, Kafka's longest timeout", t.ms, i32::MAX),
                ));
            }
            _ => {}
        }
        script.ops.push(op);
    }
    if let Some(value) = expect {
        let e: network::Expect = deserialize(value)
            .map_err(|(field, message)| sc.error(None, &format!("expect.{}", field.unwrap_or_default()), message))?;
        script.expect = Some(e);
    }
    network::validate(&script.ops, script.expect.as_ref(), &|at, field, message| sc.error(at, field, message))?;
    sc.network = Some(script);
    Ok(sc)
}

/// `crash_broker` names a live broker of a replicated cluster, `start_broker` a crashed one.
fn check_broker_fault(
    sc: &Scenario,
    i: usize,
    broker: u32,
    crash: bool,
    down: &mut BTreeSet<u32>,
) -> Result<(), ScenarioError> {
    let name = if crash { "crash_broker" } else { "start_broker" };
    if sc.topology.brokers < 2 || sc.topology.replication_factor < 2 {
        return Err(sc.error(
            Some(i),
            "op",
            format!("{name} needs a replicated cluster (brokers and replication_factor above 1)"),
        ));
    }
    if broker >= sc.topology.brokers {
        return Err(sc.error(
            Some(i),
            "broker",
            format!("no broker {broker}: the cluster has {}", sc.topology.brokers),
        ));
    }
    let ok = if crash { down.insert(broker) } else { down.remove(&broker) };
    if !ok {
        let why = if crash { "is already down" } else { "is not down" };
        return Err(sc.error(Some(i), "broker", format!("broker {broker} {why}")));
    }
    Ok(())
}

fn check_error_name(sc: &Scenario, i: Option<usize>, field: &str, name: Option<&str>) -> Result<(), ScenarioError> {
    match name {
        Some(n) if KafkaError::from_name(n).is_none() => {
            Err(sc.error(i, field, format!("'{n}' is not a Kafka error name this engine knows")))
        }
        _ => Ok(()),
    }
}

/// Every layer's cluster can be built: topics of 1..=1024 partitions, brokers the engine can host.
/// Replication runs where clients do (the producer and network layers);
/// a hand-moved HW stands for a follower outside the engine, so it needs partitions hosted alone.
fn check_topology(sc: &Scenario) -> Result<(), ScenarioError> {
    for (t, n) in &sc.topics {
        // The same bound as `txnsim serve --partitions`: a scenario's cluster is built whole, up front.
        if !(1..=MAX_PARTITIONS_PER_TOPIC).contains(n) {
            return Err(sc.error(
                None,
                &format!("topics.{t}"),
                format!("topic '{t}' has {n} partitions; a topic has 1..={MAX_PARTITIONS_PER_TOPIC}"),
            ));
        }
    }
    let t = &sc.topology;
    let field = if t.replication_factor == 0 {
        "replication_factor"
    } else if t.transaction_log_replication_factor == 0 {
        "transaction_log_replication_factor"
    } else {
        "brokers"
    };
    t.validate().map_err(|e| sc.error(None, field, e))?;
    let replicated = t.brokers > 1 && t.replication_factor > 1;
    if t.brokers > 1 && !matches!(sc.layer, Layer::Producer | Layer::Network) {
        return Err(sc.error(None, "brokers", format!("the {} layer runs on one broker", sc.layer.name())));
    }
    if replicated && sc.manual_high_watermark {
        return Err(sc.error(None, "manual_high_watermark", "a hand-moved HW needs replication_factor 1"));
    }
    if sc.min_insync_replicas == 0 {
        return Err(sc.error(None, "min_insync_replicas", "must be at least 1"));
    }
    Ok(())
}

/// Checks what can be checked before running: layers, topics, producer lifecycles, error names.
fn validate(sc: &Scenario) -> Result<(), ScenarioError> {
    let check_partition = |i: Option<usize>, topic: Option<&str>, partition: u32| -> Result<(), ScenarioError> {
        let topic = topic.unwrap_or("t");
        match sc.topics.get(topic) {
            None => Err(sc.error(
                i,
                "topic",
                format!("unknown topic '{topic}' (topics: {:?})", sc.topics.keys().collect::<Vec<_>>()),
            )),
            Some(n) if partition >= *n => {
                Err(sc.error(i, "partition", format!("topic '{topic}' has {n} partition(s), no partition {partition}")))
            }
            Some(_) => Ok(()),
        }
    };
    #[derive(PartialEq)]
    enum Life {
        Live,
        Crashed,
    }
    let mut transactional: BTreeMap<&str, Life> = BTreeMap::new();
    let mut idempotent: BTreeSet<&str> = BTreeSet::new();
    // Non-transactional producers (the plain one as "") by the `compression.type` they were made with.
    let mut nontxn_compression: BTreeMap<&str, CompressionType> = BTreeMap::new();
    let mut down = BTreeSet::new();
    for (i, op) in sc.ops.iter().enumerate() {
        let at = Some(i);
        if !op.allowed_in(sc.layer) {
            return Err(sc.error(at, "op", format!("'{}' is not an op of the {} layer", op.name(), sc.layer.name())));
        }
        if let Some((topic, partition)) = op.partition() {
            check_partition(at, topic, partition)?;
        }
        check_error_name(sc, at, "expect_error", op.expect_error())?;
        match op {
            Op::InitProducer { producer, .. } => {
                if idempotent.contains(producer.as_str()) {
                    return Err(sc.error(at, "producer", format!("'{producer}' already names an idempotent producer")));
                }
                transactional.insert(producer, Life::Live);
            }
            Op::Begin { producer, .. }
            | Op::Commit { producer, .. }
            | Op::Abort { producer, .. }
            | Op::Produce { producer, .. }
            | Op::CrashProducer { producer } => match transactional.get(producer.as_str()) {
                None => {
                    return Err(sc.error(
                        at,
                        "producer",
                        format!("no producer '{producer}': it needs an init_producer first"),
                    ))
                }
                Some(Life::Crashed) => {
                    return Err(sc.error(
                        at,
                        "producer",
                        format!("'{producer}' crashed: only init_producer or expire_txn may name it"),
                    ))
                }
                Some(Life::Live) => {
                    if matches!(op, Op::CrashProducer { .. }) {
                        transactional.insert(producer, Life::Crashed);
                    }
                }
            },
            Op::CrashBroker { broker } => check_broker_fault(sc, i, *broker, true, &mut down)?,
            Op::StartBroker { broker } => check_broker_fault(sc, i, *broker, false, &mut down)?,
            Op::ExpireTxn { producer, .. } if !transactional.contains_key(producer.as_str()) => {
                return Err(sc.error(
                    at,
                    "producer",
                    format!("no producer '{producer}': it needs an init_producer first"),
                ));
            }
            Op::ProduceNontxn { producer, compression, .. } => {
                if let Some(p) = producer {
                    if transactional.contains_key(p.as_str()) {
                        return Err(sc.error(
                            at,
                            "producer",
                            format!("'{p}' names a transactional producer; idempotent ones need their own names"),
                        ));
                    }
                    idempotent.insert(p);
                }
                let made = *nontxn_compression
                    .entry(producer.as_deref().unwrap_or_default())
                    .or_insert(compression.unwrap_or_default());
                if compression.is_some_and(|c| c != made) {
                    return Err(sc.error(
                        at,
                        "compression",
                        format!("the producer was made with compression '{}'; a producer's is fixed", made.name()),
                    ));
                }
            }
            Op::AppendBatch { producer_id, epoch, base_sequence, transactional: txn, expect, .. } => {
                if producer_id.is_some() != epoch.is_some() || producer_id.is_some() != base_sequence.is_some() {
                    return Err(sc.error(at, "producer_id", "producer_id, epoch and base_sequence go together"));
                }
                if *txn && producer_id.is_none() {
                    return Err(sc.error(at, "transactional", "a transactional batch needs a producer_id"));
                }
                check_error_name(sc, at, "expect.error", expect.as_ref().and_then(|e| e.error.as_deref()))?;
            }
            Op::AppendMarker { expect, .. } => {
                check_error_name(sc, at, "expect.error", expect.as_ref().and_then(|e| e.error.as_deref()))?
            }
            Op::DeleteRecords { expect, .. } => {
                check_error_name(sc, at, "expect.error", expect.as_ref().and_then(|e| e.error.as_deref()))?
            }
            Op::DeliverFetch { batches, .. } => {
                for (b, batch) in batches.iter().enumerate() {
                    let field = format!("batches[{b}]");
                    // Kafka's offsets are int64, and a batch's next offset must be one too.
                    if batch.last_offset >= i64::MAX as u64 {
                        return Err(sc.error(
                            at,
                            &format!("{field}.last_offset"),
                            format!("{} is not below {}, so its next offset is no int64", batch.last_offset, i64::MAX),
                        ));
                    }
                    if batch.last_offset < batch.base_offset {
                        return Err(sc.error(at, &field, "last_offset is below base_offset"));
                    }
                    if batch.control.is_some() && !batch.records.is_empty() {
                        return Err(sc.error(
                            at,
                            &field,
                            "a control batch lists no records (its marker sits at base_offset)",
                        ));
                    }
                    if matches!(batch.control, Some(format::ControlType::Commit | format::ControlType::Abort))
                        && batch.producer_id.is_none()
                    {
                        return Err(sc.error(at, &field, "a COMMIT/ABORT control batch needs a producer_id"));
                    }
                    if batch.records.iter().any(|(o, _)| *o < batch.base_offset || *o > batch.last_offset) {
                        return Err(sc.error(at, &field, "a record offset lies outside [base_offset, last_offset]"));
                    }
                    if batch.records.windows(2).any(|w| w[0].0 >= w[1].0) {
                        return Err(sc.error(at, &field, "record offsets must increase"));
                    }
                }
            }
            Op::AbortedTxns { expect, .. } => validate_aborted(sc, at, "expect", expect)?,
            _ => {}
        }
    }
    if let Some(expect) = &sc.expect {
        for p in expect.partitions() {
            check_partition(None, p.topic.as_deref(), p.partition_number()).map_err(|mut e| {
                e.field = Some(format!("expect.{}", e.field.unwrap_or_default()));
                e
            })?;
            if let Some(entries) = &p.aborted_txns {
                validate_aborted(sc, None, "expect.aborted_txns", entries)?;
            }
        }
    }
    Ok(())
}

fn validate_aborted(
    sc: &Scenario,
    at: Option<usize>,
    field: &str,
    entries: &[format::AbortedTxnExpect],
) -> Result<(), ScenarioError> {
    for (k, e) in entries.iter().enumerate() {
        if e.producer.is_some() == e.producer_id.is_some() {
            return Err(sc.error(
                at,
                &format!("{field}[{k}]"),
                "name the producer by exactly one of 'producer' or 'producer_id'",
            ));
        }
        if e.producer.is_some() && sc.layer != Layer::Producer {
            return Err(sc.error(
                at,
                &format!("{field}[{k}].producer"),
                "only producer-layer scenarios have named producers; use producer_id",
            ));
        }
    }
    Ok(())
}

/// A JSON document in which no object has a key twice: `serde_json::Value` keeps the last of two silently,
/// so a scenario file's duplicate key is refused before the file is read as values.
struct NoDuplicateKeys;

impl<'de> de::Deserialize<'de> for NoDuplicateKeys {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NoDuplicateKeys)
    }
}

impl<'de> Visitor<'de> for NoDuplicateKeys {
    type Value = NoDuplicateKeys;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self, A::Error> {
        let mut seen = BTreeSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format!("duplicate key '{key}'")));
            }
            map.next_value::<NoDuplicateKeys>()?;
        }
        Ok(NoDuplicateKeys)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<NoDuplicateKeys>()?.is_some() {}
        Ok(NoDuplicateKeys)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_unit<E>(self) -> Result<Self, E> {
        Ok(NoDuplicateKeys)
    }
}
