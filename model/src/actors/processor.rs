//! The `eos` config's processors: the consume-transform-produce loop of KIP-98 with KIP-447's group
//! fencing, at model size (the sim's `eos` profile, sim/src/world/processors.rs, at full size). A
//! processor `wN` is a member `wN.in` of group `g` (the engine's `ConsumerCoordinator`, read_committed,
//! `require_stable` OffsetFetch) and a transactional producer `wN` of id `tx-wN`. Once its member is
//! Stable and has fetched input, it begins a transaction, sends each input's output
//! (`exactly_once::output_value`) to `out`, sends the offsets with the member's group metadata
//! (`sendOffsetsToTransaction`) and commits or aborts (the application's choice, made up front as the
//! producers make theirs). A transaction that did not commit rewinds the member to the group's committed
//! offsets (`Consumer::reset_to_committed`). Calls go through the one interpreter `client::exec`.
//!
//! The model's time stands still: the member's answers are handled at 0 and its polls at
//! `retry.backoff.ms`, so a poll always comes after any backoff, and no heartbeat falls due. The member
//! polls after each of its steps while its budget (`Bounds::member_polls`) lasts, only between
//! transactions and only when the application has no records to process, as the application's loop does.

use super::{delivered, ModelTimer, Node, NodeKind, NodeState, Stop, NOW_MS, O};
use crate::bounds::TOPIC;
use crate::shared::Shared;
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use txnsim_engine::consumer::{ConsumerRecord, GroupRebalanceConfig, MemberState};
use txnsim_engine::producer::{Completion, OpId, Producer};
use txnsim_engine::protocol::{Effects, Envelope, NodeId, Timer};
use txnsim_engine::{Consumer, IsolationLevel, KafkaError, ProducerKind, TopicPartition, TransactionResult};
use txnsim_engine::{TimeMs, TxnManagerState};
use txnsim_properties::client::{exec, Layer, Local, Start};
use txnsim_properties::exactly_once::{is_fencing, output_value};
use txnsim_properties::{CallOutcome, Event, ProducerCall};

/// The topic the processors write.
pub const OUTPUT_TOPIC: &str = "out";
/// The processors' consumer group.
pub const GROUP: &str = "g";

/// The member's session, rebalance and heartbeat settings: Kafka's consumer defaults. Labels only, as
/// the model's time stands still; the group coordinator's deadlines fire when the checker chooses.
const REBALANCE: GroupRebalanceConfig =
    GroupRebalanceConfig { session_timeout_ms: 45_000, rebalance_timeout_ms: 300_000, heartbeat_interval_ms: 3_000 };

/// Processor `index`'s instance name after `incarnation` restarts: `w0`, `w0'`.
pub fn processor_name(index: usize, incarnation: u8) -> String {
    format!("w{index}{}", "'".repeat(incarnation as usize))
}

/// The member of processor instance `name`.
pub fn member_name(name: &str) -> String {
    format!("{name}.in")
}

/// The processor `index` a client name (`w0'`, `w0'.in`) belongs to.
pub fn processor_index(client: &str) -> Option<usize> {
    let digits: String = client.strip_prefix('w')?.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProcessorNode {
    pub member: Consumer,
    pub producer: Producer,
    pub incarnation: u8,
    pub restarts: u8,
    pub stage: Stage,
    /// Records the member fetched and no transaction has taken yet, with the generation they were
    /// fetched in (the eager protocol revokes every partition at a rebalance: they are dropped).
    pub inputs: Vec<ConsumerRecord>,
    pub generation: i32,
    /// Transactions begun over every instance (the application's workload, `Bounds::processor_txns`).
    pub begun: u8,
    /// Calls and completions of every instance, for the history invariants.
    pub events: Shared<Vec<Event>>,
    /// Model timers this instance armed (its producer's as `Engine`, its member's as `Member`).
    pub timers: BTreeSet<ModelTimer>,
    pub request_timeouts_left: u8,
    pub backoffs_left: u8,
    pub polls_left: u8,
    /// A timer the run may need was left unarmed for want of budget: liveness is not judged.
    pub starved: bool,
}

/// Where a processor's loop is.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    Initializing,
    /// Between transactions: polling until inputs arrive.
    Polling,
    /// The application's commit-or-abort choice for the next transaction is open.
    Choosing,
    InTransaction(Txn),
    Done(Stop),
}

/// One transaction of the loop: what it still waits for.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Txn {
    pub attempt: String,
    pub commit: bool,
    pub sends: BTreeSet<OpId>,
    pub offsets: Option<OpId>,
    pub end: Option<OpId>,
    /// Every call so far succeeded.
    pub ok: bool,
}

impl ProcessorNode {
    pub fn is_crashed(&self) -> bool {
        self.stage == Stage::Done(Stop::Crashed)
    }

    /// Whether `to` is this instance (its producer or its member): a crashed or older instance's
    /// connections are gone.
    pub fn is_addressee(&self, to: &NodeId) -> bool {
        !self.is_crashed() && (*to == self.producer.id || *to == self.member.id)
    }
}

/// The one interpreter's layer in the model: a call starts on the processor's producer at time 0, its
/// requests go out with the step's effects, and its invocation is recorded for the history.
struct Calls<'a> {
    producer: &'a mut Producer,
    invoked: &'a mut Vec<Event>,
    fx: &'a mut Effects,
}

impl Layer for Calls<'_> {
    type Answer = Result<OpId, KafkaError>;

    fn local(&mut self, process: &str, call: &ProducerCall, run: Local<'_>) -> Self::Answer {
        run(self.producer)?;
        // Call id 0, as the producers' begin: it never completes asynchronously (op ids start at 1).
        self.invoked.push(Event::Invoke { time_ms: NOW_MS, process: process.into(), call_id: 0, call: call.clone() });
        Ok(0)
    }

    fn request(&mut self, process: &str, call: &ProducerCall, start: Start<'_>) -> Self::Answer {
        let (op, effects) = start(self.producer, NOW_MS)?;
        self.invoked.push(Event::Invoke { time_ms: NOW_MS, process: process.into(), call_id: op, call: call.clone() });
        self.fx.extend(effects);
        Ok(op)
    }
}

impl Node {
    /// A poll's time: `retry.backoff.ms` after the answers (handled at 0), so no backoff holds it back.
    fn poll_ms(&self) -> TimeMs {
        self.ctx.config.retry_backoff_ms
    }

    pub(crate) fn processor_start(&self, index: usize, o: &mut O) -> ProcessorNode {
        let b = &self.ctx.bounds;
        let mut node = ProcessorNode {
            member: self.new_member(index, 0),
            producer: self.new_processor_producer(index, 0),
            incarnation: 0,
            restarts: 0,
            stage: Stage::Initializing,
            inputs: Vec::new(),
            generation: -1,
            begun: 0,
            events: Shared::new(Vec::new()),
            timers: BTreeSet::new(),
            request_timeouts_left: b.request_timeouts as u8,
            backoffs_left: b.backoff_retries as u8,
            polls_left: b.member_polls as u8,
            starved: false,
        };
        let mut fx = Effects::default();
        self.init_processor(&mut node, &mut fx, o);
        self.processor_effects(&mut node, fx, o);
        node
    }

    fn new_member(&self, index: usize, incarnation: u8) -> Consumer {
        let name = member_name(&processor_name(index, incarnation));
        let mut member =
            Consumer::new(&name, IsolationLevel::ReadCommitted, NodeId::Broker(0), self.ctx.config.clone());
        let topics = BTreeMap::from([(TOPIC.to_string(), self.ctx.bounds.partitions as u32)]);
        member.subscribe(GROUP, topics, REBALANCE);
        member
    }

    fn new_processor_producer(&self, index: usize, incarnation: u8) -> Producer {
        let kind = ProducerKind::Transactional { transactional_id: format!("tx-w{index}") };
        Producer::new(&processor_name(index, incarnation), kind, NodeId::Broker(0), self.ctx.config.clone())
    }

    fn init_processor(&self, n: &mut ProcessorNode, fx: &mut Effects, o: &mut O) {
        n.stage = Stage::Initializing;
        self.processor_call(n, &ProducerCall::Init, fx).expect("a new producer can initialize");
        if self.may_crash(n.restarts) {
            o.set_timer(ModelTimer::Crash, stateright::actor::model_timeout());
        }
    }

    /// Runs `call` through `client::exec` on the processor's producer.
    fn processor_call(&self, n: &mut ProcessorNode, call: &ProducerCall, fx: &mut Effects) -> Result<OpId, KafkaError> {
        let mut invoked = Vec::new();
        let process = n.producer.id.to_string();
        let answer = exec(&mut Calls { producer: &mut n.producer, invoked: &mut invoked, fx }, &process, call);
        n.events.update(|events| events.extend(invoked));
        answer
    }

    /// One step of processor `index`: `step` runs on a copy, then the loop moves on as far as it can and
    /// the effects go out.
    fn processor_step(
        &self,
        state: &mut Cow<NodeState>,
        o: &mut O,
        step: impl FnOnce(&Self, &mut ProcessorNode, &mut Effects, &mut O),
    ) {
        let NodeKind::Processor(before) = state.node() else { unreachable!("a processor's actor") };
        let mut after = before.clone();
        let mut fx = Effects::default();
        step(self, &mut after, &mut fx, o);
        self.advance(&mut after, &mut fx, o);
        self.processor_effects(&mut after, fx, o);
        let engine = after.timers.iter().filter_map(|t| match t {
            ModelTimer::Engine(t) => Some(t),
            _ => None,
        });
        for t in delivered(&after.producer, engine) {
            let t = ModelTimer::Engine(t);
            after.timers.remove(&t);
            o.cancel_timer(t);
        }
        if !o.is_empty() || after != *before {
            *state = Cow::Owned(Shared::new(NodeKind::Processor(after)));
        }
    }

    pub(crate) fn processor_msg(&self, state: &mut Cow<NodeState>, env: Envelope, o: &mut O) {
        let NodeKind::Processor(p) = state.node() else { unreachable!("a processor's actor") };
        if !p.is_addressee(&env.to) {
            return;
        }
        let to_member = env.to == p.member.id;
        self.processor_step(state, o, |me, n, fx, o| {
            let timer = Timer::RequestTimeout { correlation_id: env.correlation_id };
            let answered = if to_member { ModelTimer::Member(timer) } else { ModelTimer::Engine(timer) };
            if n.timers.remove(&answered) {
                o.cancel_timer(answered);
            }
            if to_member {
                let effects = n.member.on_message(NOW_MS, env);
                me.member_effects(n, effects, o);
            } else {
                fx.extend(n.producer.on_message(NOW_MS, env));
            }
        });
    }

    pub(crate) fn processor_timeout(&self, index: usize, state: &mut Cow<NodeState>, timer: &ModelTimer, o: &mut O) {
        match timer {
            ModelTimer::Engine(t) | ModelTimer::Member(t) => self.processor_step(state, o, |me, n, fx, o| {
                n.timers.remove(timer);
                let is_timeout = !matches!(t, Timer::RetryBackoff { .. });
                let left = if is_timeout { &mut n.request_timeouts_left } else { &mut n.backoffs_left };
                *left -= 1;
                if *left == 0 {
                    // The budget is spent: this kind's other armed timers go (their requests just wait).
                    let spent: Vec<ModelTimer> = n
                        .timers
                        .iter()
                        .filter(|x| matches!(x, ModelTimer::Engine(Timer::RetryBackoff { .. })) != is_timeout)
                        .cloned()
                        .collect();
                    for x in spent {
                        n.timers.remove(&x);
                        if let ModelTimer::Engine(t) | ModelTimer::Member(t) = &x {
                            n.starved |= me.needs(t);
                        }
                        o.cancel_timer(x);
                    }
                }
                match timer {
                    ModelTimer::Member(_) => {
                        let effects = n.member.on_timer(NOW_MS, t.clone());
                        me.member_effects(n, effects, o);
                    }
                    _ => fx.extend(n.producer.on_timer(NOW_MS, t.clone())),
                }
            }),
            ModelTimer::Crash => self.processor_step(state, o, |me, n, fx, o| {
                // The process dies with its member, its producer, their connections and timers; a new
                // instance joins as a new member and fences the old producer.
                for t in std::mem::take(&mut n.timers) {
                    o.cancel_timer(t);
                }
                o.remove_random("end");
                n.restarts += 1;
                n.inputs.clear();
                if !me.ctx.bounds.restart_producers {
                    n.stage = Stage::Done(Stop::Crashed);
                    return;
                }
                n.incarnation += 1;
                n.member = me.new_member(index, n.incarnation);
                n.producer = me.new_processor_producer(index, n.incarnation);
                n.request_timeouts_left = me.ctx.bounds.request_timeouts as u8;
                n.backoffs_left = me.ctx.bounds.backoff_retries as u8;
                n.polls_left = me.ctx.bounds.member_polls as u8;
                me.init_processor(n, fx, o);
            }),
            other => unreachable!("not a processor timer: {other:?}"),
        }
    }

    pub(crate) fn processor_random(&self, state: &mut Cow<NodeState>, choice: TransactionResult, o: &mut O) {
        self.processor_step(state, o, |me, n, fx, _| {
            if n.stage == Stage::Choosing {
                me.begin_processing(n, choice == TransactionResult::Commit, fx);
            }
        });
    }

    /// Sends go out; client timers are armed while their budget lasts.
    fn processor_effects(&self, n: &mut ProcessorNode, fx: Effects, o: &mut O) {
        self.send_all(fx.sends, o);
        for (_, timer) in fx.timers {
            let budget = match timer {
                Timer::RetryBackoff { .. } => n.backoffs_left,
                _ => n.request_timeouts_left,
            };
            if budget == 0 {
                n.starved |= self.needs(&timer);
                continue;
            }
            n.timers.insert(ModelTimer::Engine(timer.clone()));
            o.set_timer(ModelTimer::Engine(timer), stateright::actor::model_timeout());
        }
    }

    /// The loop: completions first, then the member's fetched records, then the next call or poll.
    fn advance(&self, n: &mut ProcessorNode, fx: &mut Effects, o: &mut O) {
        for c in n.producer.take_completions() {
            self.processor_completion(n, c);
        }
        self.take_inputs(n);
        if matches!(n.stage, Stage::Done(_) | Stage::Choosing | Stage::Initializing) {
            return;
        }
        if n.producer.state == TxnManagerState::FatalError {
            let error = n.producer.last_error.expect("a fatal state records its error");
            n.stage = Stage::Done(Stop::Failed(error));
            o.remove_random("end");
            return;
        }
        if let Stage::InTransaction(txn) = &n.stage {
            let txn = txn.clone();
            return self.continue_txn(n, txn, fx);
        }
        // The application's poll returns the records it has; it polls again only when it has none.
        let stable = n.member.group().is_some_and(|g| g.state == MemberState::Stable);
        if stable && !n.inputs.is_empty() {
            if (n.begun as usize) < self.ctx.bounds.processor_txns {
                n.stage = Stage::Choosing;
                o.choose_random("end", vec![TransactionResult::Commit, TransactionResult::Abort]);
            }
            return;
        }
        self.poll_member(n, o);
    }

    /// `KafkaConsumer.poll` of the member, while its budget lasts: group work, then fetches.
    fn poll_member(&self, n: &mut ProcessorNode, o: &mut O) {
        if n.polls_left == 0 || n.member.group().is_some_and(|g| g.fatal.is_some()) {
            return;
        }
        let effects = n.member.poll_member(self.poll_ms());
        if !effects.sends.is_empty() {
            n.polls_left -= 1;
            self.member_effects(n, effects, o);
        }
    }

    /// The member's sends go out; its request timeouts are armed as `Member` timers, told apart from its
    /// producer's (both count correlation ids from 1), on the same budget.
    fn member_effects(&self, n: &mut ProcessorNode, effects: Effects, o: &mut O) {
        self.send_all(effects.sends, o);
        for (_, timer) in effects.timers {
            if n.request_timeouts_left == 0 {
                n.starved |= self.needs(&timer);
                continue;
            }
            n.timers.insert(ModelTimer::Member(timer.clone()));
            o.set_timer(ModelTimer::Member(timer), stateright::actor::model_timeout());
        }
    }

    /// Records the member fetched go to the loop, dropped when a rebalance came between.
    fn take_inputs(&self, n: &mut ProcessorNode) {
        let delivered = n.member.take_delivered();
        let Some(group) = n.member.group() else { return };
        let generation = group.generation.generation_id;
        if n.generation != generation {
            n.inputs.clear();
            n.generation = generation;
        }
        let assigned = group.assignment().clone();
        n.inputs.extend(delivered);
        n.inputs.retain(|r| assigned.contains(&r.partition));
    }

    /// `beginTransaction`, an output per input, then `sendOffsetsToTransaction` with the group metadata of
    /// the read.
    fn begin_processing(&self, n: &mut ProcessorNode, commit: bool, fx: &mut Effects) {
        let group = n.member.group_metadata().expect("a member");
        let inputs = std::mem::take(&mut n.inputs);
        n.begun += 1;
        let attempt = format!("{}.{}", n.producer.id, n.begun);
        let mut txn = Txn { attempt, commit, sends: BTreeSet::new(), offsets: None, end: None, ok: true };
        if let Err(e) = self.processor_call(n, &ProducerCall::Begin, fx) {
            n.stage = Stage::Done(Stop::Failed(e));
            return;
        }
        let outputs: Vec<TopicPartition> = self.ctx.output_partitions();
        let mut offsets: BTreeMap<TopicPartition, i64> = BTreeMap::new();
        for r in &inputs {
            let partition = outputs[r.partition.partition as usize % outputs.len()].clone();
            let values = vec![output_value(&r.value, &txn.attempt)];
            match self.processor_call(n, &ProducerCall::Send { partition, values }, fx) {
                Ok(op) => drop(txn.sends.insert(op)),
                Err(_) => txn.ok = false,
            }
            offsets.insert(r.partition.clone(), r.offset as i64 + 1);
        }
        let call = ProducerCall::SendOffsets { group, offsets: offsets.into_iter().collect() };
        match self.processor_call(n, &call, fx) {
            Ok(op) => txn.offsets = Some(op),
            Err(_) => txn.ok = false,
        }
        n.stage = Stage::InTransaction(txn.clone());
        self.continue_txn(n, txn, fx);
    }

    /// Once `sendOffsetsToTransaction` returned: commit, or abort (after the sends completed, as the
    /// producers' aborts wait, or at once after an error).
    fn continue_txn(&self, n: &mut ProcessorNode, mut txn: Txn, fx: &mut Effects) {
        if txn.offsets.is_some() || txn.end.is_some() {
            n.stage = Stage::InTransaction(txn);
            return;
        }
        let failed = !txn.ok || n.producer.state == TxnManagerState::AbortableError;
        if !failed && !txn.commit && !txn.sends.is_empty() {
            n.stage = Stage::InTransaction(txn);
            return;
        }
        let call = if failed || !txn.commit { ProducerCall::Abort } else { ProducerCall::Commit };
        txn.commit &= !failed;
        match self.processor_call(n, &call, fx) {
            Ok(op) => {
                txn.end = Some(op);
                n.stage = Stage::InTransaction(txn);
            }
            Err(e) => n.stage = Stage::Done(Stop::Failed(e)),
        }
    }

    fn processor_completion(&self, n: &mut ProcessorNode, c: Completion) {
        let process = n.producer.id.to_string();
        let outcome = CallOutcome::of(&c.result);
        n.events.update(|events| events.push(Event::Complete { time_ms: NOW_MS, process, call_id: c.op, outcome }));
        match &mut n.stage {
            Stage::Initializing => match c.result {
                Ok(_) => n.stage = Stage::Polling,
                Err(e) => n.stage = Stage::Done(Stop::Failed(e)),
            },
            Stage::InTransaction(txn) => {
                txn.ok &= c.result.is_ok();
                txn.sends.remove(&c.op);
                if txn.offsets == Some(c.op) {
                    txn.offsets = None;
                }
                if txn.end == Some(c.op) {
                    let committed = txn.commit && txn.ok;
                    if c.result.is_err() && n.producer.state == TxnManagerState::AbortableError {
                        // The commit failed: abort instead.
                        txn.end = None;
                        txn.commit = false;
                        return;
                    }
                    n.stage = Stage::Polling;
                    if !committed {
                        n.member.reset_to_committed();
                        n.inputs.clear();
                    }
                }
            }
            _ => {}
        }
    }
}

/// Whether a processor's history shows it fenced as a zombie: a call refused for its stale generation,
/// member or producer epoch.
pub fn fenced(events: &[Event]) -> bool {
    events
        .iter()
        .any(|e| matches!(e, Event::Complete { outcome: CallOutcome::Failed { error }, .. } if is_fencing(error)))
}
