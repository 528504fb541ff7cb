//! The workload's clients: each producer's application step (what a Kafka application calls next), each
//! consumer's polls and seeks, and their calls and completions recorded in the history. The transaction
//! plan both they and `sweep --target` draw is `crate::workload`'s.

use super::{broker_name, Outgoing, Shared, World};
use crate::describe::{show_call, show_outcome};
use crate::profile::{FaultKind, ProducerSpec};
use crate::workload::TxnPlan;
use madsim::runtime::Handle;
use serde_json::json;
use std::collections::BTreeMap;
use txnsim_engine::producer::{Completion, OpId};
use txnsim_engine::protocol::{Effects, Envelope, Message, NodeId};
use txnsim_engine::{
    Consumer, IsolationLevel, KafkaError, Offset, Producer, ProducerKind, TopicPartition, TxnManagerState,
};
use txnsim_properties::client::{self, Layer, Local, Start};
use txnsim_properties::{CallOutcome, Event, ProducerCall};

pub struct ProducerSlot {
    pub spec: ProducerSpec,
    /// `None` while the process is down (between a kill and its restart).
    pub producer: Option<Producer>,
    /// Calls awaiting their completion: op id of the current instance -> (history call id, whether the
    /// call blocks the application as Kafka's init/commit/abort do).
    pub pending: BTreeMap<OpId, (u64, bool)>,
    pub plan: Option<TxnPlan>,
    /// The application does nothing until then (a stall inside a transaction).
    pub stall_until_ms: u64,
    pub restarts: u32,
}

pub struct ConsumerSlot {
    pub consumer: Consumer,
    pub seeks: bool,
    /// Fetches in flight: correlation id -> (partition, fetch offset).
    pub polls: BTreeMap<u64, (TopicPartition, Offset)>,
}

impl World {
    /// A consumer's answer; what the consumer sends in turn (a Metadata request after
    /// NOT_LEADER_OR_FOLLOWER, with its request timeout).
    pub(super) fn consumer_message(&mut self, name: &str, env: Envelope) -> Effects {
        let now = self.now_ms();
        let member = !self.processors.is_empty() && self.processor_of_member(name).is_some();
        if member && !matches!(env.message, Message::FetchResponse { .. }) {
            return self.member_message(name, |c| c.on_message(now, env));
        }
        let slot = self.consumers.get_mut(name).expect("a consumer");
        let corr = env.correlation_id;
        let Message::FetchResponse { partition, fetch_offset, result } = &env.message else {
            return slot.consumer.on_message(now, env);
        };
        let (partition, fetch_offset) = (partition.clone(), *fetch_offset);
        let accepted = slot.polls.remove(&corr).is_some() && slot.consumer.position(&partition) == Some(fetch_offset);
        let bounds = result.as_ref().ok().map(|d| (d.high_watermark, d.last_stable_offset, d.batches.len()));
        let error = result.as_ref().err().copied();
        let effects = slot.consumer.on_message(now, env);
        if !accepted {
            return effects;
        }
        let isolation = slot.consumer.isolation;
        match bounds {
            Some((high_watermark, last_stable_offset, batches)) => {
                let records: Vec<(Offset, String)> =
                    slot.consumer.take_delivered().into_iter().map(|r| (r.offset, r.value)).collect();
                let position_after = slot.consumer.position(&partition).expect("assigned");
                self.stats.polls += 1;
                self.stats.delivered += records.len() as u64;
                if self.trace.is_some() {
                    let shown: Vec<String> = records.iter().map(|(o, v)| format!("{o}:{v}")).collect();
                    let text = format!(
                        "poll {partition} from offset {fetch_offset}, HW {high_watermark} LSO {last_stable_offset} ({batches} batches) -> [{}], next offset {position_after}",
                        shown.join(" ")
                    );
                    let fields = json!({
                        "partition": partition.to_string(),
                        "isolation": isolation.name(),
                        "fetch_offset": fetch_offset,
                        "hw": high_watermark,
                        "lso": last_stable_offset,
                        "records": records.iter().map(|(o, v)| json!({"offset": o, "value": v})).collect::<Vec<_>>(),
                        "position_after": position_after,
                    });
                    self.trace_with(name, "poll", || (text, fields));
                }
                if member {
                    self.buffer_inputs(name, &partition, &records);
                }
                self.push_history(Event::Poll {
                    time_ms: now,
                    consumer: name.to_string(),
                    isolation,
                    partition,
                    fetch_offset,
                    high_watermark,
                    last_stable_offset,
                    records,
                    position_after,
                });
            }
            None => {
                let _ = slot.consumer.take_errors();
                let error = error.map(|e| e.name()).unwrap_or("no error code");
                let text = format!("poll {partition} from offset {fetch_offset} -> {error}");
                let fields = json!({"partition": partition.to_string(), "fetch_offset": fetch_offset, "error": error});
                self.trace_with(name, "poll", || (text, fields));
            }
        }
        effects
    }

    /// Completions of the producer's calls become history events.
    pub fn collect_completions(&mut self, name: &str) {
        let now = self.now_ms();
        let slot = self.producers.get_mut(name).expect("a producer");
        let Some(p) = slot.producer.as_mut() else { return };
        let done: Vec<Completion> = p.take_completions();
        let mut completed = Vec::new();
        for c in done {
            let Some((call_id, _)) = slot.pending.remove(&c.op) else { continue };
            let outcome = CallOutcome::of(&c.result);
            completed.push((call_id, outcome));
        }
        for (call_id, outcome) in completed {
            self.trace_complete(name, call_id, &outcome);
            self.push_history(Event::Complete { time_ms: now, process: name.to_string(), call_id, outcome });
        }
    }

    pub(super) fn invoke_sync(&mut self, name: &str, call: ProducerCall, result: Result<(), KafkaError>) {
        let now = self.now_ms();
        self.stats.ops += 1;
        self.next_call_id += 1;
        let call_id = self.next_call_id;
        let outcome = match result {
            Ok(()) => CallOutcome::Ok,
            Err(e) => CallOutcome::Failed { error: e.name().to_string() },
        };
        if self.trace.is_some() {
            let text = format!("invoke #{call_id} {} -> {}", show_call(&call), show_outcome(&outcome));
            self.trace_with(name, "invoke", || (text, json!({"call_id": call_id, "outcome": show_outcome(&outcome)})));
        }
        self.push_history(Event::Invoke { time_ms: now, process: name.to_string(), call_id, call });
        self.push_history(Event::Complete { time_ms: now, process: name.to_string(), call_id, outcome });
    }

    /// Invokes an asynchronous producer call and records it; an immediate error completes it at once.
    pub(super) fn invoke(
        &mut self,
        shared: &Shared,
        name: &str,
        call: ProducerCall,
        f: impl FnOnce(&mut Producer, u64) -> Result<(OpId, Effects), KafkaError>,
    ) -> Vec<Outgoing> {
        let now = self.now_ms();
        self.stats.ops += 1;
        self.next_call_id += 1;
        let call_id = self.next_call_id;
        let blocking = !matches!(call, ProducerCall::Send { .. });
        if self.trace.is_some() {
            let text = format!("invoke #{call_id} {}", show_call(&call));
            self.trace_with(name, "invoke", || (text, json!({"call_id": call_id})));
        }
        self.push_history(Event::Invoke { time_ms: now, process: name.to_string(), call_id, call });
        let slot = self.producers.get_mut(name).expect("a producer");
        let p = slot.producer.as_mut().expect("a running producer");
        match f(p, now) {
            Ok((op, effects)) => {
                slot.pending.insert(op, (call_id, blocking));
                self.collect_completions(name);
                self.dispatch(shared, name, effects)
            }
            Err(e) => {
                let outcome = CallOutcome::Failed { error: e.name().to_string() };
                self.trace_complete(name, call_id, &outcome);
                self.push_history(Event::Complete { time_ms: now, process: name.to_string(), call_id, outcome });
                Vec::new()
            }
        }
    }

    /// Invokes `call` through the one interpreter of client ops (`client::exec`).
    pub(super) fn invoke_call(&mut self, shared: &Shared, name: &str, call: ProducerCall) -> Vec<Outgoing> {
        client::exec(&mut SimLayer { world: self, shared }, name, &call)
    }

    /// The history id of the call invoked last.
    pub(super) fn last_call_id(&self) -> u64 {
        self.next_call_id
    }

    fn trace_complete(&mut self, name: &str, call_id: u64, outcome: &CallOutcome) {
        self.trace_with(name, "complete", || {
            let text = format!("complete #{call_id} {}", show_outcome(outcome));
            (text, json!({"call_id": call_id, "outcome": show_outcome(outcome)}))
        });
    }

    /// Calls still open when their process died or the run ended: they may or may not have happened.
    pub fn abandon_pending(&mut self, name: &str) {
        let now = self.now_ms();
        let slot = self.producers.get_mut(name).expect("a producer");
        let pending = std::mem::take(&mut slot.pending);
        for (_, (call_id, _)) in pending {
            self.trace_complete(name, call_id, &CallOutcome::Unknown);
            self.push_history(Event::Complete {
                time_ms: now,
                process: name.to_string(),
                call_id,
                outcome: CallOutcome::Unknown,
            });
        }
    }

    fn next_values(&mut self, name: &str, n: u32) -> Vec<String> {
        let counter = self.next_value.entry(name.to_string()).or_insert(0);
        (0..n)
            .map(|_| {
                *counter += 1;
                format!("{name}-{counter}")
            })
            .collect()
    }

    /// One application step of producer `name`: what a Kafka application would call next.
    pub fn producer_step(&mut self, shared: &Shared, name: &str) -> Vec<Outgoing> {
        let now = self.now_ms();
        let slot = &self.producers[name];
        let Some(p) = slot.producer.as_ref() else { return Vec::new() };
        if now < slot.stall_until_ms || self.paused.contains(name) {
            return Vec::new();
        }
        // init, commit and abort block the application until they return.
        if slot.pending.values().any(|(_, blocking)| *blocking) {
            return Vec::new();
        }
        let kind = p.kind.clone();
        let state = p.state;
        // The plain producer keeps one request in flight and never retries (see `plain_config`), so its
        // writes are neither duplicated nor reordered: both are allowed for it in Kafka.
        if kind == ProducerKind::Plain && !p.is_idle() {
            return Vec::new();
        }
        match (kind, state) {
            (ProducerKind::Plain, _) | (ProducerKind::Idempotent, TxnManagerState::Ready) => {
                let tp = self.rng.pick(&self.workload_partitions).clone();
                let n =
                    self.rng.range(self.params.values_per_send.0 as u64, self.params.values_per_send.1 as u64) as u32;
                let values = self.next_values(name, n);
                let call = ProducerCall::Send { partition: tp.clone(), values: values.clone() };
                self.invoke(shared, name, call, |p, now| p.send(now, tp, values))
            }
            (_, TxnManagerState::Uninitialized) => {
                self.invoke(shared, name, ProducerCall::Init, |p, now| p.init_transactions(now))
            }
            (_, TxnManagerState::FatalError) => {
                self.restart_producer(name, "fatal error");
                Vec::new()
            }
            (ProducerKind::Idempotent, _) => Vec::new(),
            (ProducerKind::Transactional { .. }, state) => self.txn_step(shared, name, state),
        }
    }

    fn txn_step(&mut self, shared: &Shared, name: &str, state: TxnManagerState) -> Vec<Outgoing> {
        match state {
            TxnManagerState::Ready => {
                if self.rng.chance(0.02) {
                    // API misuse: Kafka answers INVALID_TXN_STATE at once.
                    return self.invoke(shared, name, ProducerCall::Commit, |p, now| p.commit_transaction(now));
                }
                let result = self
                    .producers
                    .get_mut(name)
                    .and_then(|s| s.producer.as_mut())
                    .expect("running")
                    .begin_transaction();
                if result.is_ok() {
                    let plan = self.draw_plan();
                    self.producers.get_mut(name).expect("known").plan = Some(plan);
                }
                self.invoke_sync(name, ProducerCall::Begin, result);
                Vec::new()
            }
            TxnManagerState::InTransaction => {
                let params_values = self.params.values_per_send;
                let stall = self.rng.chance(self.params.stall_prob);
                let stall_ms = self.rng.range(self.params.stall_ms.0, self.params.stall_ms.1);
                let n = self.rng.range(params_values.0 as u64, params_values.1 as u64) as u32;
                let now = self.now_ms();
                let slot = self.producers.get_mut(name).expect("known");
                let plan = slot.plan.get_or_insert_with(|| TxnPlan {
                    partitions: Vec::new(),
                    sends_left: 0,
                    next: 0,
                    commit: false,
                });
                if plan.sends_left > 0 && !plan.partitions.is_empty() {
                    plan.sends_left -= 1;
                    let tp = plan.partitions[plan.next % plan.partitions.len()].clone();
                    plan.next += 1;
                    if stall {
                        slot.stall_until_ms = now + stall_ms;
                        self.trace(name, "stall", || format!("stalls {stall_ms} ms inside its transaction"));
                    }
                    let values = self.next_values(name, n);
                    let call = ProducerCall::Send { partition: tp.clone(), values: values.clone() };
                    return self.invoke(shared, name, call, |p, now| p.send(now, tp, values));
                }
                if plan.commit {
                    self.invoke(shared, name, ProducerCall::Commit, |p, now| p.commit_transaction(now))
                } else {
                    self.invoke(shared, name, ProducerCall::Abort, |p, now| p.abort_transaction(now))
                }
            }
            TxnManagerState::AbortableError => {
                self.invoke(shared, name, ProducerCall::Abort, |p, now| p.abort_transaction(now))
            }
            _ => Vec::new(), // Waiting for an answer.
        }
    }

    fn draw_plan(&mut self) -> TxnPlan {
        TxnPlan::draw(&self.params, &mut self.rng, &self.workload_partitions)
    }

    /// `DisconnectClient`: the producer's requests in flight fail at once and are retried; whatever the
    /// broker answers to them arrives on a closed connection and is dropped.
    pub fn disconnect_producer(&mut self, shared: &Shared, name: &str) -> Vec<Outgoing> {
        let now = self.now_ms();
        let incarnation = self.nodes[name].incarnation;
        self.wire_requests.retain(|_, (client, inc, _)| !(client == name && *inc == incarnation));
        // The connection to the coordinator's broker (every client has one).
        let broker = self.coordinator_broker();
        let slot = self.producers.get_mut(name).expect("a producer");
        let Some(p) = slot.producer.as_mut() else { return Vec::new() };
        let effects = p.on_disconnect(now, &NodeId::Broker(broker));
        self.trace(name, "fault", || format!("FAULT disconnect from {}", broker_name(broker)));
        self.count_fault(FaultKind::DisconnectClient.name().to_string());
        self.collect_completions(name);
        self.dispatch(shared, name, effects)
    }

    /// Kills the producer's process and starts a new instance with the same transactional id.
    pub fn restart_producer(&mut self, name: &str, why: &str) {
        let Some(id) = self.nodes[name].id else { return };
        if self.paused.contains(name) {
            return;
        }
        let text = format!("restart process ({why})");
        self.trace(name, "restart", || text);
        let handle = Handle::current();
        handle.kill(id);
        self.abandon_pending(name);
        let slot = self.producers.get_mut(name).expect("a producer");
        slot.producer = None;
        slot.plan = None;
        slot.restarts += 1;
        // The endpoint of the dead instance must not outlive it.
        self.nodes.get_mut(name).expect("known").endpoint = None;
        handle.restart(id);
        if self.processors.contains_key(name) {
            self.crash_processor(name);
        }
    }

    pub fn consumer_step(&mut self, shared: &Shared, name: &str) -> Vec<Outgoing> {
        let now = self.now_ms();
        let tp = self.rng.pick(&self.partitions).clone();
        let seek_roll = self.rng.f64();
        let slot = self.consumers.get_mut(name).expect("a consumer");
        if slot.seeks && seek_roll < 0.04 {
            let position = slot.consumer.position(&tp).unwrap_or(0);
            let offset = self.rng.range(0, position);
            let slot = self.consumers.get_mut(name).expect("a consumer");
            slot.consumer.seek(tp.clone(), offset);
            self.push_history(Event::Seek { time_ms: now, consumer: name.to_string(), partition: tp.clone(), offset });
            let text = format!("seek {tp} to offset {offset}");
            let fields = json!({"partition": tp.to_string(), "offset": offset});
            self.trace_with(name, "seek", || (text, fields));
            return Vec::new();
        }
        self.poll(shared, name, &tp)
    }

    pub fn poll(&mut self, shared: &Shared, name: &str, tp: &TopicPartition) -> Vec<Outgoing> {
        let now = self.now_ms();
        let slot = self.consumers.get_mut(name).expect("a consumer");
        if slot.consumer.has_fetch_in_flight(tp) {
            return Vec::new();
        }
        let offset = slot.consumer.position(tp).expect("assigned");
        let effects = slot.consumer.poll(now, tp);
        for env in &effects.sends {
            slot.polls.insert(env.correlation_id, (tp.clone(), offset));
        }
        self.dispatch(shared, name, effects)
    }

    /// Where a consumer should end up after healing: the LSO (read_committed) or HW.
    pub fn consumer_bound(&self, isolation: IsolationLevel, tp: &TopicPartition) -> Offset {
        let log = self.view_log(tp);
        match isolation {
            IsolationLevel::ReadCommitted => log.last_stable_offset(&self.config.mutations),
            IsolationLevel::ReadUncommitted => log.high_watermark(),
        }
    }
}

/// The sim as a layer of the one interpreter: a local call completes at once, a request goes out on the
/// sim's network; both are recorded in the history.
struct SimLayer<'a> {
    world: &'a mut World,
    shared: &'a Shared,
}

impl Layer for SimLayer<'_> {
    type Answer = Vec<Outgoing>;

    fn local(&mut self, producer: &str, call: &ProducerCall, run: Local<'_>) -> Vec<Outgoing> {
        let slot = self.world.producers.get_mut(producer).expect("a producer");
        let result = run(slot.producer.as_mut().expect("a running producer"));
        self.world.invoke_sync(producer, call.clone(), result);
        Vec::new()
    }

    fn request(&mut self, producer: &str, call: &ProducerCall, start: Start<'_>) -> Vec<Outgoing> {
        self.world.invoke(self.shared, producer, call.clone(), |p, now| start(p, now))
    }
}
