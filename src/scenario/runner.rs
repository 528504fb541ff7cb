//! Runs one scenario against the engine and reports the first difference from its expectations.

use super::format::{
    AbortedTxnExpect, ControlType, FinalRead, MarkerType, Op, PartitionExpect, ReadExpect, WriteExpect,
};
use super::show;
use super::{Layer, Scenario};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use txnsim_engine::log::LogAppendInfo;
use txnsim_engine::producer::OpOutput;
use txnsim_engine::producer_state::AppendOrigin;
use txnsim_engine::protocol::leader_name;
use txnsim_engine::protocol::ProduceAck;
use txnsim_engine::record::{
    BatchBody, BatchProducer, CompressionType, EndTxnMarker, ProduceBatch, Record, RecordBatch,
};
use txnsim_engine::{
    filter_fetch, AbortedTransaction, AbortedTxn, Cluster, EngineConfig, FetchPartitionData, IsolationLevel,
    KafkaError, Mutations, Offset, PartitionLog, ProducerKind, TopicPartition, TransactionResult,
};
use txnsim_properties::{client, ProducerCall};

#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    pub mutations: Mutations,
    /// Collect the step table (`txnsim scenario --show`).
    pub show: bool,
    /// Advanced by one per op run (the CLI's bar; indicatif draws it only on a terminal).
    pub progress: Option<indicatif::ProgressBar>,
}

/// The first place a run departs from the scenario: which op (none for the final expectation), which
/// field, and both values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    pub op_index: Option<usize>,
    pub op: String,
    pub field: String,
    pub expected: String,
    pub actual: String,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.op_index {
            Some(i) => write!(f, "op {i} ({})", self.op)?,
            None => write!(f, "final expectation")?,
        }
        write!(f, ": {}: expected {}, actual {}", self.field, self.expected, self.actual)
    }
}

/// What a run found, and the step table when asked for (as lines, and as the data they are drawn from).
#[derive(Clone, Debug)]
pub struct RunReport {
    pub difference: Option<Difference>,
    pub table: Vec<String>,
    pub steps: Vec<crate::html::Step>,
    /// The scenario itself is wrong (a network op names no message in flight, or several): exit 2.
    pub input_error: Option<String>,
}

struct Instance {
    transactional_id: String,
    /// A newer instance of the same transactional id exists, or the coordinator timed this one out.
    superseded: bool,
}

struct Runner<'a> {
    sc: &'a Scenario,
    cluster: Cluster,
    instances: BTreeMap<String, Instance>,
    idempotent: BTreeSet<String>,
    table: Option<Vec<String>>,
    steps: Vec<crate::html::Step>,
    /// Checks every state invariant after each op, reading only what the op changed.
    state: txnsim_properties::StateChecker,
    /// Every acknowledged send, for `acked-write-survives-election`.
    acked: Vec<txnsim_properties::AckedWrite>,
}

const PLAIN_PRODUCER: &str = "__plain";

pub fn run(sc: &Scenario, opts: &RunOptions) -> RunReport {
    if let Some(script) = &sc.network {
        return run_network(sc, script, opts);
    }
    let config = EngineConfig {
        transaction_version: sc.transaction_version,
        manual_high_watermark: sc.manual_high_watermark,
        min_insync_replicas: sc.min_insync_replicas,
        eligible_leader_replicas: sc.eligible_leader_replicas,
        proposal: sc.proposal,
        mutations: opts.mutations.clone(),
        ..EngineConfig::default()
    };
    let mut runner = Runner {
        sc,
        cluster: Cluster::with_topology(&sc.topics, config, &sc.topology),
        instances: BTreeMap::new(),
        idempotent: BTreeSet::new(),
        table: opts.show.then(Vec::new),
        steps: Vec::new(),
        state: txnsim_properties::StateChecker::default(),
        acked: Vec::new(),
    };
    if let Some(t) = runner.table.as_mut() {
        t.extend(show::header(sc));
    }
    let mut difference = None;
    for (i, op) in sc.ops.iter().enumerate() {
        let outcome = runner.exec(i, op);
        if let Some(bar) = &opts.progress {
            bar.inc(1);
        }
        if let Some(t) = runner.table.as_mut() {
            let summary = match &outcome {
                Ok(s) => s.clone(),
                Err(d) => {
                    format!("{} <-- DIFFERS: {}: expected {}, actual {}", d.actual, d.field, d.expected, d.actual)
                }
            };
            let cluster = (sc.layer != Layer::ConsumerFetch).then_some(&mut runner.cluster);
            let step = show::step(i, op, &summary, outcome.is_err(), cluster, sc);
            t.extend(show::step_lines(&step));
            runner.steps.push(step);
        }
        if let Err(d) = outcome {
            difference = Some(d);
            break;
        }
        // Every state invariant holds after every op, or the scenario fails there.
        if let Some(v) = runner.state_violations().into_iter().next() {
            difference = Some(Difference {
                op_index: Some(i),
                op: op.name().to_string(),
                field: format!("invariant {}", v.invariant.name()),
                expected: "holds".into(),
                actual: v.witness,
            });
            break;
        }
    }
    if difference.is_none() {
        if let Some(expect) = &sc.expect {
            for p in expect.partitions() {
                if let Err(d) = runner.check_final(p) {
                    difference = Some(d);
                    break;
                }
            }
        }
    }
    if let (Some(t), Some(d)) = (runner.table.as_mut(), &difference) {
        t.push(format!("FAIL {d}"));
    }
    RunReport { difference, table: runner.table.unwrap_or_default(), steps: runner.steps, input_error: None }
}

/// A network scenario: its ops, every state invariant after each, then its final expectation.
fn run_network(sc: &Scenario, script: &super::NetworkScript, opts: &RunOptions) -> RunReport {
    use super::network::{Failure, NetworkRunner};
    let mut runner = NetworkRunner::new(sc, opts.mutations.clone());
    let mut table = if opts.show { show::header(sc) } else { Vec::new() };
    let mut steps = Vec::new();
    let mut difference = None;
    let mut input_error = None;
    // The violations the scenario shows, as they break.
    let mut seen = std::collections::BTreeSet::new();
    for (i, op) in script.ops.iter().enumerate() {
        let outcome = runner.exec(i, op);
        if let Some(bar) = &opts.progress {
            bar.inc(1);
        }
        let mut shows_now = Vec::new();
        let found = match outcome {
            Ok(()) => {
                let (shown, breaking): (Vec<_>, Vec<_>) =
                    runner.state_violations().into_iter().partition(|v| script.shows.contains(&v.invariant));
                shows_now.extend(shown.iter().map(|v| v.invariant.name()));
                seen.extend(shown.into_iter().map(|v| v.invariant));
                breaking.into_iter().next().map(|v| Difference {
                    op_index: Some(i),
                    op: op.name().to_string(),
                    field: format!("invariant {}", v.invariant.name()),
                    expected: "holds".into(),
                    actual: v.witness,
                })
            }
            Err(Failure::Differs(d)) => Some(Difference {
                op_index: d.op_index,
                op: d.op,
                field: d.field,
                expected: d.expected,
                actual: d.actual,
            }),
            Err(Failure::Input(i, field, message)) => {
                input_error = Some(format!("{}: scenario '{}': op {i}: field '{field}': {message}", sc.file, sc.name));
                break;
            }
        };
        if opts.show {
            let summary = match &found {
                Some(d) => format!("<-- DIFFERS: {}: expected {}, actual {}", d.field, d.expected, d.actual),
                None if shows_now.is_empty() => "ok".to_string(),
                None => format!("ok, shows {} breaking", shows_now.join(", ")),
            };
            let step = show::network_step(i, op, &summary, found.is_some(), &runner);
            table.extend(show::step_lines(&step));
            steps.push(step);
        }
        if found.is_some() {
            difference = found;
            break;
        }
    }
    if difference.is_none() {
        if let Some(e) = &script.expect {
            difference = runner.check(None, "final", e).err().map(|d| Difference {
                op_index: None,
                op: d.op,
                field: format!("expect.{}", d.field),
                expected: d.expected,
                actual: d.actual,
            });
        }
    }
    if difference.is_none() && input_error.is_none() {
        difference = script.shows.iter().find(|inv| !seen.contains(*inv)).map(|inv| Difference {
            op_index: None,
            op: "final".into(),
            field: "shows_violations".into(),
            expected: format!("{} breaks", inv.name()),
            actual: "it held after every op".into(),
        });
    }
    if let Some(d) = &difference {
        table.push(format!("FAIL {d}"));
    }
    RunReport { difference, table, steps, input_error }
}

fn error_name(e: KafkaError) -> String {
    e.name().to_string()
}

/// For a fenced send Kafka answers PRODUCER_FENCED or INVALID_PRODUCER_EPOCH (since 2.7); both count.
fn errors_match(expected: KafkaError, actual: KafkaError, is_send: bool) -> bool {
    let fenced = |e| matches!(e, KafkaError::ProducerFenced | KafkaError::InvalidProducerEpoch);
    expected == actual || (is_send && fenced(expected) && fenced(actual))
}

fn to_value<T: serde::Serialize>(v: T) -> Value {
    serde_json::to_value(v).expect("plain data serializes")
}

impl Runner<'_> {
    fn tp(&self, topic: &Option<String>, partition: u32) -> TopicPartition {
        TopicPartition::new(topic.as_deref().unwrap_or("t"), partition)
    }

    fn diff(
        &self,
        i: Option<usize>,
        op: &str,
        field: &str,
        expected: impl serde::Serialize,
        actual: impl serde::Serialize,
    ) -> Difference {
        Difference {
            op_index: i,
            op: op.to_string(),
            field: field.to_string(),
            expected: to_value(expected).to_string(),
            actual: to_value(actual).to_string(),
        }
    }

    fn state_violations(&mut self) -> Vec<txnsim_properties::Violation> {
        let broker = &self.cluster.broker;
        let view = txnsim_properties::ClusterView {
            partitions: &broker.replica_manager.logs,
            // Log-layer writes bypass the coordinator, so its decisions say nothing about them.
            coordinator: (self.sc.layer == Layer::Producer).then(|| self.cluster.coordinator()),
            mutations: &broker.config.mutations,
        };
        let mut found = self.state.check(&view);
        found.extend(txnsim_properties::check_replicas(self.cluster.brokers()));
        found.extend(txnsim_properties::check_acked_writes(&self.acked, self.cluster.brokers()));
        found
    }

    fn mutations(&self) -> &Mutations {
        &self.cluster.config.mutations
    }

    /// A new producer's settings: the cluster's, with the op's `compression.type`.
    fn producer_config(&self, compression: Option<CompressionType>) -> EngineConfig {
        EngineConfig { compression_type: compression.unwrap_or_default(), ..self.cluster.config.clone() }
    }

    /// Compares an op's result with `expect_error` (or, with none, demands success).
    fn check_result<T>(
        &self,
        i: usize,
        op: &Op,
        result: &Result<T, KafkaError>,
        expected_error: Option<&str>,
        is_send: bool,
    ) -> Result<bool, Difference> {
        let expected = expected_error.map(|n| KafkaError::from_name(n).expect("validated error name"));
        match (expected, result) {
            (Some(e), Err(a)) if errors_match(e, *a, is_send) => Ok(false),
            (Some(e), Err(a)) => Err(self.diff(Some(i), op.name(), "expect_error", e.name(), a.name())),
            (Some(e), Ok(_)) => Err(self.diff(Some(i), op.name(), "expect_error", e.name(), "success")),
            (None, Err(a)) => Err(self.diff(Some(i), op.name(), "result", "success", a.name())),
            (None, Ok(_)) => Ok(true),
        }
    }

    fn exec(&mut self, i: usize, op: &Op) -> Result<String, Difference> {
        match op {
            Op::InitProducer { producer, transactional_id, compression, expect, expect_error } => {
                let tid = transactional_id.clone().unwrap_or_else(|| producer.clone());
                let before = client::log_ends(&self.cluster);
                let kind = ProducerKind::Transactional { transactional_id: tid.clone() };
                self.cluster.add_configured_producer(producer, kind, self.producer_config(*compression));
                let result = client::exec(&mut self.cluster, producer, &ProducerCall::Init);
                let result = self.completed(i, op, result)?;
                if self.check_result(i, op, &result, expect_error.as_deref(), false)? {
                    for (name, inst) in self.instances.iter_mut() {
                        if inst.transactional_id == tid && name != producer {
                            inst.superseded = true;
                        }
                    }
                    self.instances
                        .insert(producer.clone(), Instance { transactional_id: tid.clone(), superseded: false });
                }
                let markers = self.markers_since(&before, &tid);
                let pie = match &result {
                    Ok(OpOutput::Initialized(pie)) => Some(*pie),
                    _ => None,
                };
                if let (Some(e), Some(pie)) = (expect, pie) {
                    if let Some(pid) = e.producer_id {
                        if pid != pie.producer_id {
                            return Err(self.diff(Some(i), op.name(), "expect.producer_id", pid, pie.producer_id));
                        }
                    }
                    if let Some(epoch) = e.epoch {
                        if epoch != pie.epoch {
                            return Err(self.diff(Some(i), op.name(), "expect.epoch", epoch, pie.epoch));
                        }
                    }
                    if let Some(m) = &e.marker_offsets {
                        if *m != markers {
                            return Err(self.diff(Some(i), op.name(), "expect.marker_offsets", m, &markers));
                        }
                    }
                }
                Ok(match (pie, result) {
                    (Some(pie), _) => {
                        format!("producer_id {} epoch {}{}", pie.producer_id, pie.epoch, markers_note(&markers))
                    }
                    (None, Err(e)) => error_name(e),
                    (None, Ok(_)) => unreachable!("init completes with Initialized"),
                })
            }
            Op::Begin { producer, expect_error } => {
                // Client side only (`TransactionManager.beginTransaction`): a fenced instance that has not
                // heard of it yet begins as usual (TransactionsTest#testFencingOnAddPartitions).
                let result = client::exec(&mut self.cluster, producer, &ProducerCall::Begin);
                let result = self.fenced_view(producer, result);
                self.check_result(i, op, &result, expect_error.as_deref(), false)?;
                Ok(result.map(|_| "ok".to_string()).unwrap_or_else(error_name))
            }
            Op::Commit { producer, expect, expect_error } | Op::Abort { producer, expect, expect_error } => {
                let commit = matches!(op, Op::Commit { .. });
                let tid = self.instances[producer].transactional_id.clone();
                let before = client::log_ends(&self.cluster);
                let call = if commit { ProducerCall::Commit } else { ProducerCall::Abort };
                let result = client::exec(&mut self.cluster, producer, &call);
                let result = self.fenced_view(producer, self.completed(i, op, result)?);
                self.check_result(i, op, &result, expect_error.as_deref(), false)?;
                let markers = self.markers_since(&before, &tid);
                self.check_markers(i, op, expect.as_ref().map(|e| &e.marker_offsets), &markers)?;
                Ok(result.map(|_| format!("ok{}", markers_note(&markers))).unwrap_or_else(error_name))
            }
            Op::ExpireTxn { producer, expect, expect_error } => {
                let tid = self.instances[producer].transactional_id.clone();
                let before = client::log_ends(&self.cluster);
                let now = self.cluster.now_ms;
                let (expired, effects) = self.cluster.broker.expire_transaction(&tid, now);
                let broker = self.cluster.broker_id();
                self.cluster.apply(&broker, effects);
                self.cluster.run_until_quiet();
                if expired {
                    self.instances.get_mut(producer).expect("validated").superseded = true;
                }
                let result: Result<(), KafkaError> = Ok(());
                self.check_result(i, op, &result, expect_error.as_deref(), false)?;
                let markers = self.markers_since(&before, &tid);
                self.check_markers(i, op, expect.as_ref().map(|e| &e.marker_offsets), &markers)?;
                Ok(format!("{}{}", if expired { "expired" } else { "nothing to expire" }, markers_note(&markers)))
            }
            Op::CrashProducer { producer } => {
                self.cluster.crash_producer(producer);
                Ok("crashed".into())
            }
            Op::CrashBroker { broker } => {
                self.cluster.crash_broker(*broker);
                self.cluster.run_until_quiet();
                Ok(format!("broker {broker} down{}", self.leaders_note()))
            }
            Op::StartBroker { broker } => {
                self.cluster.start_broker(*broker);
                self.cluster.run_until_quiet();
                Ok(format!("broker {broker} up{}", self.leaders_note()))
            }
            Op::Produce { producer, topic, partition, values, expect, expect_error } => {
                let tp = self.tp(topic, *partition);
                let send = ProducerCall::Send { partition: tp.clone(), values: values.clone() };
                let result = client::exec(&mut self.cluster, producer, &send);
                let result = self.fenced_view(producer, self.completed(i, op, result)?);
                self.note_ack(&tp, &result, values);
                self.check_write(i, op, result.map(sent_ack), expect.as_ref(), expect_error.as_deref(), true)
            }
            Op::ProduceNontxn { producer, topic, partition, values, compression, expect, expect_error } => {
                let tp = self.tp(topic, *partition);
                let name = producer.clone().unwrap_or_else(|| PLAIN_PRODUCER.to_string());
                if !self.cluster.producers.contains_key(&name) {
                    let kind = if producer.is_some() { ProducerKind::Idempotent } else { ProducerKind::Plain };
                    self.cluster.add_configured_producer(&name, kind, self.producer_config(*compression));
                    if producer.is_some() {
                        let init = client::exec(&mut self.cluster, &name, &ProducerCall::Init);
                        if let Err(d) = self
                            .completed(i, op, init)
                            .and_then(|r| self.check_result(i, op, &r, None, false).map(|_| ()))
                        {
                            return Err(Difference { field: "init (idempotent producer)".into(), ..d });
                        }
                        self.idempotent.insert(name.clone());
                    }
                }
                let send = ProducerCall::Send { partition: tp.clone(), values: values.clone() };
                let result = client::exec(&mut self.cluster, &name, &send);
                let result = self.completed(i, op, result)?;
                self.note_ack(&tp, &result, values);
                self.check_write(i, op, result.map(sent_ack), expect.as_ref(), expect_error.as_deref(), true)
            }
            Op::AppendBatch {
                topic,
                partition,
                producer_id,
                epoch,
                base_sequence,
                transactional,
                values,
                expect,
                expect_error,
            } => {
                let tp = self.tp(topic, *partition);
                let batch = ProduceBatch {
                    producer: producer_id.map(|pid| BatchProducer {
                        producer_id: pid,
                        epoch: epoch.expect("validated"),
                        base_sequence: base_sequence.expect("validated"),
                    }),
                    is_transactional: *transactional,
                    values: values.clone(),
                    compression: CompressionType::None,
                };
                let now = self.cluster.now_ms;
                let mutations = self.mutations().clone();
                let log = self.cluster.broker.partition_mut(&tp).expect("validated partition");
                let result = log.append_data(&batch, AppendOrigin::Client, now, &mutations);
                self.cluster.broker.replica_manager.advance_high_watermark(&tp, &self.cluster.broker.config);
                let result = result.map(|info: LogAppendInfo| ProduceAck {
                    first_offset: info.first_offset,
                    last_offset: info.last_offset,
                    duplicate: info.duplicate,
                });
                self.check_write(i, op, result, expect.as_ref(), expect_error.as_deref(), false)
            }
            Op::AppendMarker {
                topic,
                partition,
                producer_id,
                epoch,
                marker_type,
                coordinator_epoch,
                expect,
                expect_error,
            } => {
                let tp = self.tp(topic, *partition);
                let marker = EndTxnMarker {
                    result: match marker_type {
                        MarkerType::Commit => TransactionResult::Commit,
                        MarkerType::Abort => TransactionResult::Abort,
                    },
                    coordinator_epoch: *coordinator_epoch,
                };
                let now = self.cluster.now_ms;
                let mutations = self.mutations().clone();
                let version = self.cluster.config.transaction_version;
                let log = self.cluster.broker.partition_mut(&tp).expect("validated partition");
                let result = log.append_marker(
                    *producer_id,
                    *epoch,
                    marker,
                    AppendOrigin::Coordinator,
                    version,
                    now,
                    &mutations,
                );
                self.cluster.broker.replica_manager.advance_high_watermark(&tp, &self.cluster.broker.config);
                let expected_error = expect_error.clone().or(expect.as_ref().and_then(|e| e.error.clone()));
                self.check_result(i, op, &result, expected_error.as_deref(), false)?;
                if let (Ok(offset), Some(want)) = (&result, expect.as_ref().and_then(|e| e.offset)) {
                    if *offset != want {
                        return Err(self.diff(Some(i), op.name(), "expect.offset", want, offset));
                    }
                }
                Ok(result.map(|o| format!("offset {o}")).unwrap_or_else(error_name))
            }
            Op::RollSegment { topic, partition } => {
                let tp = self.tp(topic, *partition);
                self.cluster.broker.partition_mut(&tp).expect("validated partition").roll_segment();
                Ok("rolled".into())
            }
            Op::SetHighWatermark { topic, partition, offset } => {
                let tp = self.tp(topic, *partition);
                let mutations = self.mutations().clone();
                let log = self.cluster.broker.partition_mut(&tp).expect("validated partition");
                log.update_high_watermark(*offset, &mutations);
                Ok(format!("high watermark {}", log.high_watermark()))
            }
            Op::DeleteRecords { topic, partition, before_offset, expect, expect_error } => {
                let tp = self.tp(topic, *partition);
                let mutations = self.mutations().clone();
                let log = self.cluster.broker.partition_mut(&tp).expect("validated partition");
                let result = log.delete_records(*before_offset, &mutations);
                let expected_error = expect_error.clone().or(expect.as_ref().and_then(|e| e.error.clone()));
                self.check_result(i, op, &result, expected_error.as_deref(), false)?;
                if let (Ok(start), Some(want)) = (&result, expect.as_ref().and_then(|e| e.log_start_offset)) {
                    if *start != want {
                        return Err(self.diff(Some(i), op.name(), "expect.log_start_offset", want, start));
                    }
                }
                Ok(result.map(|o| format!("log start offset {o}")).unwrap_or_else(error_name))
            }
            // The partition only names the fetch: the filter reads the response alone.
            Op::DeliverFetch {
                isolation,
                fetch_offset,
                high_watermark,
                last_stable_offset,
                batches,
                aborted_transactions,
                expect,
                ..
            } => {
                let data = FetchPartitionData {
                    high_watermark: *high_watermark,
                    last_stable_offset: *last_stable_offset,
                    log_start_offset: 0,
                    batches: batches.iter().map(fetch_batch).collect(),
                    aborted_transactions: Some(
                        aborted_transactions
                            .iter()
                            .map(|a| AbortedTransaction { producer_id: a.producer_id, first_offset: a.first_offset })
                            .collect(),
                    ),
                };
                let fetched = filter_fetch(IsolationLevel::from(*isolation), *fetch_offset, &data, self.mutations());
                let values: Vec<String> = fetched.records.iter().map(|r| r.1.clone()).collect();
                let offsets: Vec<u64> = fetched.records.iter().map(|r| r.0).collect();
                self.check_read(Some(i), op.name(), "expect", expect, &values, &offsets, fetched.next_fetch_offset)?;
                Ok(read_summary(&values, &offsets, fetched.next_fetch_offset))
            }
            Op::Read { isolation, topic, partition, from_offset, expect, expect_error } => {
                let tp = self.tp(topic, *partition);
                let result = self.cluster.read(IsolationLevel::from(*isolation), &tp, *from_offset);
                if self.check_result(i, op, &result, expect_error.as_deref(), false)? {
                    let (records, position) = result.expect("checked above");
                    let values: Vec<String> = records.iter().map(|r| r.value.clone()).collect();
                    let offsets: Vec<u64> = records.iter().map(|r| r.offset).collect();
                    if let Some(e) = expect {
                        self.check_read(Some(i), op.name(), "expect", e, &values, &offsets, position)?;
                    }
                    return Ok(read_summary(&values, &offsets, position));
                }
                Ok(result.map(|_| String::new()).unwrap_or_else(error_name))
            }
            Op::Check { topic, partition, expect } => {
                let tp = self.tp(topic, *partition);
                let pe = PartitionExpect {
                    lso: expect.lso,
                    high_watermark: expect.high_watermark,
                    log_end_offset: expect.log_end_offset,
                    log_start_offset: expect.log_start_offset,
                    ..PartitionExpect::default()
                };
                self.check_offsets(Some(i), op.name(), "expect", &tp, &pe)?;
                if let Some(want) = &expect.batch_compression {
                    let actual = batch_compression(self.leader_log(&tp));
                    if *want != actual {
                        return Err(self.diff(Some(i), op.name(), "expect.batch_compression", want, &actual));
                    }
                }
                Ok(self.offsets_summary(&tp))
            }
            Op::AbortedTxns { topic, partition, from_offset, upper_bound, expect } => {
                let tp = self.tp(topic, *partition);
                let actual = self.leader_log(&tp).collect_aborted_txns(*from_offset, *upper_bound);
                self.check_aborted(Some(i), op.name(), "expect", expect, &actual)?;
                Ok(format!("{} entr{}", actual.len(), if actual.len() == 1 { "y" } else { "ies" }))
            }
        }
    }

    /// An op that never completed is itself a difference: the cluster stayed busy or lost the answer.
    fn completed(
        &self,
        i: usize,
        op: &Op,
        result: Result<Option<OpOutput>, KafkaError>,
    ) -> Result<Result<OpOutput, KafkaError>, Difference> {
        match result {
            Ok(Some(out)) => Ok(Ok(out)),
            Err(e) => Ok(Err(e)),
            Ok(None) => Err(self.diff(
                Some(i),
                op.name(),
                "completion",
                "the call completes",
                "no answer once the cluster went quiet",
            )),
        }
    }

    /// A superseded instance learns of its fence from a broker: a partition leader's INVALID_PRODUCER_EPOCH
    /// and the coordinator's PRODUCER_FENCED count as one (docs/scenario-format.md). Local refusals stay as
    /// the client gives them (`TransactionsTest#testFencingOnSend`, `#testFencingOnCommit`).
    fn fenced_view<T>(&self, producer: &str, result: Result<T, KafkaError>) -> Result<T, KafkaError> {
        match result {
            Err(KafkaError::InvalidProducerEpoch) if self.instances.get(producer).is_some_and(|i| i.superseded) => {
                Err(KafkaError::ProducerFenced)
            }
            other => other,
        }
    }

    fn check_write(
        &self,
        i: usize,
        op: &Op,
        result: Result<ProduceAck, KafkaError>,
        expect: Option<&WriteExpect>,
        expect_error: Option<&str>,
        is_send: bool,
    ) -> Result<String, Difference> {
        let expected_error = expect_error.or(expect.and_then(|e| e.error.as_deref()));
        if self.check_result(i, op, &result, expected_error, is_send)? {
            let ack = result.expect("checked above");
            if let Some(e) = expect {
                let fields = [
                    ("first_offset", e.first_offset, ack.first_offset),
                    ("last_offset", e.last_offset, ack.last_offset),
                ];
                for (field, want, got) in fields {
                    if let Some(w) = want {
                        if w != got {
                            return Err(self.diff(Some(i), op.name(), &format!("expect.{field}"), w, got));
                        }
                    }
                }
                let want_dup = e.duplicate.unwrap_or(false);
                if want_dup != ack.duplicate {
                    return Err(self.diff(Some(i), op.name(), "expect.duplicate", want_dup, ack.duplicate));
                }
            }
            let dup = if ack.duplicate { " (duplicate)" } else { "" };
            return Ok(format!("offsets {}..{}{dup}", ack.first_offset, ack.last_offset));
        }
        Ok(result.map(|_| String::new()).unwrap_or_else(error_name))
    }

    fn check_markers(
        &self,
        i: usize,
        op: &Op,
        expect: Option<&BTreeMap<String, u64>>,
        actual: &BTreeMap<String, u64>,
    ) -> Result<(), Difference> {
        match expect {
            Some(want) if want != actual => Err(self.diff(Some(i), op.name(), "expect.marker_offsets", want, actual)),
            _ => Ok(()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn check_read(
        &self,
        i: Option<usize>,
        op: &str,
        prefix: &str,
        expect: &ReadExpect,
        values: &[String],
        offsets: &[u64],
        position: Offset,
    ) -> Result<(), Difference> {
        if expect.values != values {
            return Err(self.diff(i, op, &format!("{prefix}.values"), &expect.values, values));
        }
        if expect.offsets != offsets {
            return Err(self.diff(i, op, &format!("{prefix}.offsets"), &expect.offsets, offsets));
        }
        if expect.end_position != position {
            return Err(self.diff(i, op, &format!("{prefix}.end_position"), expect.end_position, position));
        }
        Ok(())
    }

    fn check_offsets(
        &self,
        i: Option<usize>,
        op: &str,
        prefix: &str,
        tp: &TopicPartition,
        e: &PartitionExpect,
    ) -> Result<(), Difference> {
        let log = self.leader_log(tp);
        let fields = [
            ("lso", e.lso, log.last_stable_offset(self.mutations())),
            ("high_watermark", e.high_watermark, log.high_watermark()),
            ("log_end_offset", e.log_end_offset, log.log_end_offset()),
            ("log_start_offset", e.log_start_offset, log.log_start_offset()),
        ];
        for (field, want, got) in fields {
            if let Some(w) = want {
                if w != got {
                    return Err(self.diff(i, op, &format!("{prefix}.{field}"), w, got));
                }
            }
        }
        Ok(())
    }

    fn offsets_summary(&self, tp: &TopicPartition) -> String {
        let log = self.leader_log(tp);
        format!(
            "log start {} LSO {} HW {} LEO {}",
            log.log_start_offset(),
            log.last_stable_offset(self.mutations()),
            log.high_watermark(),
            log.log_end_offset()
        )
    }

    /// Renders index entries the way the expectation names producers, so the two compare as data.
    fn check_aborted(
        &self,
        i: Option<usize>,
        op: &str,
        field: &str,
        expect: &[AbortedTxnExpect],
        actual: &[AbortedTxn],
    ) -> Result<(), Difference> {
        let want: Vec<Value> = expect
            .iter()
            .map(|e| {
                let mut v = json!({"first_offset": e.first_offset, "last_offset": e.last_offset});
                match (&e.producer, e.producer_id) {
                    (Some(name), _) => v["producer"] = json!(name),
                    (None, Some(pid)) => v["producer_id"] = json!(pid),
                    (None, None) => unreachable!("validated"),
                }
                if let Some(lso) = e.last_stable_offset {
                    v["last_stable_offset"] = json!(lso);
                }
                v
            })
            .collect();
        let got: Vec<Value> = actual
            .iter()
            .enumerate()
            .map(|(k, a)| {
                let style = expect.get(k);
                let mut v = json!({"first_offset": a.first_offset, "last_offset": a.last_offset});
                let tid = self.cluster.coordinator().transactional_id_of(a.producer_id);
                match (style.map(|s| s.producer.is_some()).unwrap_or(self.sc.layer == Layer::Producer), tid) {
                    (true, Some(tid)) => v["producer"] = json!(tid),
                    _ => v["producer_id"] = json!(a.producer_id),
                }
                if style.is_some_and(|s| s.last_stable_offset.is_some()) {
                    v["last_stable_offset"] = json!(a.last_stable_offset);
                }
                v
            })
            .collect();
        if want != got {
            return Err(self.diff(i, op, field, &want, &got));
        }
        Ok(())
    }

    fn check_final(&mut self, e: &PartitionExpect) -> Result<(), Difference> {
        let tp = self.tp(&e.topic, e.partition_number());
        let prefix = if matches!(self.sc.expect, Some(super::Expectation::Many(_))) {
            format!("expect[{tp}]")
        } else {
            "expect".to_string()
        };
        let reads = [
            ("read_committed", &e.read_committed, IsolationLevel::ReadCommitted),
            ("read_uncommitted", &e.read_uncommitted, IsolationLevel::ReadUncommitted),
        ];
        for (name, read, isolation) in reads {
            let Some(r) = read else { continue };
            let rtp = TopicPartition::new(&tp.topic, r.partition.unwrap_or(tp.partition));
            let field = format!("{prefix}.{name}");
            match self.cluster.read(isolation, &rtp, r.from_offset) {
                Err(err) => return Err(self.diff(None, "final", &field, "a read", err.name())),
                Ok((records, position)) => {
                    let values: Vec<String> = records.iter().map(|x| x.value.clone()).collect();
                    let offsets: Vec<u64> = records.iter().map(|x| x.offset).collect();
                    self.check_read(None, "final", &field, &final_read(r), &values, &offsets, position)?;
                }
            }
        }
        self.check_offsets(None, "final", &prefix, &tp, e)?;
        if let Some(want) = &e.aborted_txns {
            let actual: Vec<AbortedTxn> = self.leader_log(&tp).aborted_index().copied().collect();
            self.check_aborted(None, "final", &format!("{prefix}.aborted_txns"), want, &actual)?;
        }
        Ok(())
    }

    /// Remembers an acknowledged send's offsets and values.
    fn note_ack(&mut self, tp: &TopicPartition, result: &Result<OpOutput, KafkaError>, values: &[String]) {
        if let Ok(OpOutput::Sent { ack, .. }) = result {
            let w = txnsim_properties::AckedWrite {
                partition: tp.clone(),
                first_offset: ack.first_offset,
                values: values.to_vec(),
            };
            self.acked.push(w);
        }
    }

    /// The partition's replica on its current leader: where a client's read and the checks look.
    fn leader_log(&self, tp: &TopicPartition) -> &PartitionLog {
        self.cluster.leader_log(tp).expect("validated partition")
    }

    /// Where leadership stands after a broker fault, partition by partition.
    fn leaders_note(&self) -> String {
        let leaders: Vec<String> = self
            .cluster
            .controller
            .partitions
            .iter()
            .map(|(tp, r)| format!("{tp} leader {} epoch {}", leader_name(r.state.leader), r.state.leader_epoch))
            .collect();
        format!("; {}", leaders.join(", "))
    }

    /// `client::markers_since`, as `{"topic/partition": offset}`.
    fn markers_since(
        &self,
        before: &BTreeMap<TopicPartition, Offset>,
        transactional_id: &str,
    ) -> BTreeMap<String, u64> {
        let markers = client::markers_since(&self.cluster, before, transactional_id);
        markers.into_iter().map(|(tp, offset)| (tp.to_string(), offset)).collect()
    }
}

fn sent_ack(out: OpOutput) -> ProduceAck {
    match out {
        OpOutput::Sent { ack, .. } => ack,
        other => unreachable!("a send completes with Sent, not {other:?}"),
    }
}

fn markers_note(markers: &BTreeMap<String, u64>) -> String {
    if markers.is_empty() {
        String::new()
    } else {
        let list: Vec<String> = markers.iter().map(|(k, v)| format!("{k}@{v}")).collect();
        format!(", markers {}", list.join(" "))
    }
}

fn read_summary(values: &[String], offsets: &[u64], position: Offset) -> String {
    format!("{} record(s) {:?} at {:?}, position {position}", values.len(), values, offsets)
}

fn final_read(r: &FinalRead) -> ReadExpect {
    ReadExpect { values: r.values.clone(), offsets: r.offsets.clone(), end_position: r.end_position }
}

fn fetch_batch(b: &super::format::FetchBatch) -> RecordBatch {
    let producer = b.producer_id.map(|pid| BatchProducer {
        producer_id: pid,
        epoch: b.epoch.unwrap_or(0),
        base_sequence: if b.control.is_some() { -1 } else { 0 },
    });
    let body = match b.control {
        None => BatchBody::Data(b.records.iter().map(|(o, v)| Record { offset: *o, value: v.clone() }).collect()),
        Some(ControlType::Empty) => BatchBody::Control(None),
        Some(c) => BatchBody::Control(Some(EndTxnMarker {
            result: if c == ControlType::Commit { TransactionResult::Commit } else { TransactionResult::Abort },
            coordinator_epoch: 0,
        })),
    };
    RecordBatch {
        base_offset: b.base_offset,
        last_offset: b.last_offset,
        producer,
        is_transactional: b.transactional || b.control.is_some(),
        body,
        partition_leader_epoch: 0,
        compression: CompressionType::None,
    }
}

/// Each batch's codec, in log order.
fn batch_compression(log: &PartitionLog) -> Vec<CompressionType> {
    log.segments().iter().flat_map(|s| &s.batches).map(|b| b.compression).collect()
}
