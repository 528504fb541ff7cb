//! The `eos` profile's processors: the consume-transform-produce loop of KIP-98 with KIP-447's group
//! fencing, as Kafka Streams' exactly-once runs it. A processor `wN` is a member `wN.in` of the profile's
//! consumer group (read_committed) and a transactional producer `wN` of its own id. It takes the records
//! its member fetched, begins a transaction, writes each one's output (`exactly_once::output_value`),
//! sends its offsets with the member's group metadata as of the read (`sendOffsetsToTransaction`) and
//! commits, or aborts. After an abort or any failed call it rewinds its member to the group's committed
//! offsets (`Consumer::reset_to_committed`, which waits out pending transactional offsets): that is always
//! safe, as the committed offsets say what the transactions that committed consumed.

use super::{Outgoing, Shared, World};
use crate::profile::EosParams;
use madsim::runtime::Handle;
use std::collections::{BTreeMap, BTreeSet};
use txnsim_engine::consumer::{ConsumerRecord, GroupRebalanceConfig, MemberState};
use txnsim_engine::producer::ConsumerGroupMetadata;
use txnsim_engine::protocol::{Effects, Message, NodeId};
use txnsim_engine::topic::offsets_partition_for;
use txnsim_engine::PartitionLog;
use txnsim_engine::{Consumer, IsolationLevel, Offset, TopicPartition, TxnManagerState};
use txnsim_properties::exactly_once::{is_fencing, output_value};
use txnsim_properties::{check_exactly_once, check_group_offsets, intent_claimed, EosView, LogFacts, Violation};
use txnsim_properties::{CallOutcome, Event, ProducerCall};

/// A processor's state beside its producer (in `World::producers`) and its member (in `World::consumers`).
#[derive(Default)]
pub struct ProcessorSlot {
    /// Records the member fetched and the processor has not yet taken into a transaction, with the
    /// generation they were fetched in (a rebalance revokes every partition: they are dropped).
    pub inputs: Vec<ConsumerRecord>,
    pub generation: i32,
    pub txn: Option<ProcessorTxn>,
    /// Transactions begun, over every instance: names each attempt (`wN.k`).
    pub begun: u32,
    /// The member left its group (LeaveGroup) and rejoins as a new member at this time.
    pub rejoin_at_ms: Option<u64>,
}

/// One transaction of the loop, as planned at its begin.
pub struct ProcessorTxn {
    pub attempt: String,
    /// Outputs still to send, in input order.
    pub outputs: Vec<(TopicPartition, String)>,
    pub offsets: Vec<(TopicPartition, i64)>,
    /// `groupMetadata()` when the inputs were read: a rebalance since makes it stale, and KIP-447's
    /// generation check fences the transaction's offsets.
    pub group: ConsumerGroupMetadata,
    pub offsets_sent: bool,
    pub commit: bool,
    /// The history's length at the begin: the transaction's calls complete after it.
    pub events_at: usize,
    pub calls: BTreeSet<u64>,
}

impl World {
    fn eos(&self) -> &EosParams {
        self.params.eos.as_ref().expect("a processor runs in the eos profile")
    }

    /// A fresh member for processor `name`, subscribed to the input topic.
    pub(super) fn new_member(&self, name: &str) -> Consumer {
        let eos = self.eos();
        let member = EosParams::member_of(name);
        let broker = NodeId::Broker(super::BROKER);
        let mut consumer = Consumer::new(&member, IsolationLevel::ReadCommitted, broker, self.config.clone());
        let partitions = self.partitions.iter().filter(|tp| tp.topic == eos.input_topic).count() as u32;
        let config = GroupRebalanceConfig {
            session_timeout_ms: eos.session_timeout_ms,
            rebalance_timeout_ms: eos.rebalance_timeout_ms,
            heartbeat_interval_ms: eos.heartbeat_interval_ms,
        };
        consumer.subscribe(&eos.group, BTreeMap::from([(eos.input_topic.clone(), partitions)]), config);
        consumer
    }

    /// The processor a member belongs to.
    pub fn processor_of_member(&self, member: &str) -> Option<String> {
        let name = member.strip_suffix(".in")?;
        self.processors.contains_key(name).then(|| name.to_string())
    }

    /// Whether processor `name` runs now: not paused, not between a leave and its rejoin, its process up.
    fn processor_runs(&self, name: &str) -> bool {
        !self.paused.contains(name)
            && self.processors[name].rejoin_at_ms.is_none()
            && self.producers[name].producer.is_some()
    }

    /// `KafkaConsumer.poll` of processor `name`'s member: the group's work (join, sync, heartbeat, the
    /// committed offsets) and a fetch of each assigned partition.
    pub fn member_step(&mut self, shared: &Shared, member: &str) -> Vec<Outgoing> {
        let Some(name) = self.processor_of_member(member) else { return Vec::new() };
        let now = self.now_ms();
        if let Some(at) = self.processors[&name].rejoin_at_ms {
            if now >= at {
                self.processors.get_mut(&name).expect("known").rejoin_at_ms = None;
                self.restart_member(&name, "rejoins as a new member");
            }
            return Vec::new();
        }
        if !self.processor_runs(&name) {
            return Vec::new();
        }
        let slot = self.consumers.get_mut(member).expect("a member");
        let effects = slot.consumer.poll_member(now);
        for env in &effects.sends {
            if let Message::FetchRequest { partition, fetch_offset, .. } = &env.message {
                slot.polls.insert(env.correlation_id, (partition.clone(), *fetch_offset));
            }
        }
        self.dispatch(shared, member, effects)
    }

    /// Group answers move a member's positions (the committed offsets of its new partitions): each is a
    /// seek in the history, where its delivered sequence restarts.
    pub(super) fn member_message(
        &mut self,
        member: &str,
        effects_of: impl FnOnce(&mut Consumer) -> Effects,
    ) -> Effects {
        let now = self.now_ms();
        let inputs: Vec<TopicPartition> =
            self.partitions.iter().filter(|tp| tp.topic == self.eos().input_topic).cloned().collect();
        let consumer = &mut self.consumers.get_mut(member).expect("a member").consumer;
        let before: Vec<Option<Offset>> = inputs.iter().map(|tp| consumer.position(tp)).collect();
        let effects = effects_of(consumer);
        let generation = consumer.group().map_or(-1, |g| g.generation.generation_id);
        let after: Vec<Option<Offset>> = inputs.iter().map(|tp| consumer.position(tp)).collect();
        self.stats.rebalances = self.stats.rebalances.max(generation.max(0) as u64);
        for ((tp, was), now_at) in inputs.iter().zip(before).zip(after) {
            if let (Some(offset), true) = (now_at, now_at != was) {
                let (consumer, partition) = (member.to_string(), tp.clone());
                self.push_history(Event::Seek { time_ms: now, consumer, partition, offset });
                self.trace(member, "seek", || format!("position {tp} -> {offset} (the group's committed offset)"));
            }
        }
        effects
    }

    /// Records a member's fetch delivered go to its processor, dropped when a rebalance came between.
    pub(super) fn buffer_inputs(&mut self, member: &str, partition: &TopicPartition, records: &[(Offset, String)]) {
        let Some(name) = self.processor_of_member(member) else { return };
        let generation = self.consumers[member].consumer.group().map_or(-1, |g| g.generation.generation_id);
        let slot = self.processors.get_mut(&name).expect("known");
        if slot.generation != generation {
            slot.inputs.clear();
            slot.generation = generation;
        }
        let taken = records.iter().map(|(offset, value)| ConsumerRecord {
            partition: partition.clone(),
            offset: *offset,
            value: value.clone(),
        });
        slot.inputs.extend(taken);
    }

    /// One application step of processor `name`.
    pub fn processor_step(&mut self, shared: &Shared, name: &str) -> Vec<Outgoing> {
        if !self.processor_runs(name) {
            return Vec::new();
        }
        let p = self.producers[name].producer.as_ref().expect("runs");
        if self.producers[name].pending.values().any(|(_, blocking)| *blocking) {
            return Vec::new();
        }
        match p.state {
            TxnManagerState::Uninitialized => {
                self.invoke(shared, name, ProducerCall::Init, |p, now| p.init_transactions(now))
            }
            TxnManagerState::FatalError => {
                self.restart_producer(name, "fatal error");
                Vec::new()
            }
            TxnManagerState::Ready => self.processor_ready(shared, name),
            TxnManagerState::InTransaction => self.processor_continue(shared, name),
            TxnManagerState::AbortableError => self.processor_abort(shared, name),
            _ => Vec::new(), // Waiting for an answer.
        }
    }

    /// Between transactions: the last one's end is judged (rewind unless it committed), then the member's
    /// inputs start the next, or the member leaves its group now and then.
    fn processor_ready(&mut self, shared: &Shared, name: &str) -> Vec<Outgoing> {
        if let Some(txn) = self.processors.get_mut(name).expect("known").txn.take() {
            self.end_of_transaction(name, txn);
        }
        let leave = self.rng.chance(self.eos().leave_prob);
        let member = EosParams::member_of(name);
        let group = self.consumers[&member].consumer.group().expect("a member");
        if group.state != MemberState::Stable {
            return Vec::new();
        }
        if leave {
            return self.leave_group(shared, name);
        }
        let (generation, assigned) = (group.generation.generation_id, group.assignment().clone());
        let metadata = group.group_metadata();
        let slot = self.processors.get_mut(name).expect("known");
        if slot.generation != generation {
            slot.inputs.clear();
            slot.generation = generation;
        }
        slot.inputs.retain(|r| assigned.contains(&r.partition));
        if slot.inputs.is_empty() {
            return Vec::new();
        }
        let inputs = std::mem::take(&mut slot.inputs);
        slot.begun += 1;
        let attempt = format!("{name}.{}", slot.begun);
        let outputs = self.outputs_of(&inputs, &attempt);
        let mut offsets: BTreeMap<TopicPartition, i64> = BTreeMap::new();
        for r in &inputs {
            offsets.insert(r.partition.clone(), r.offset as i64 + 1);
        }
        let commit = self.rng.chance(self.eos().commit_ratio);
        let result = self.producers.get_mut(name).and_then(|s| s.producer.as_mut()).expect("runs").begin_transaction();
        let events_at = self.history.events.len();
        let txn = ProcessorTxn {
            attempt,
            outputs,
            offsets: offsets.into_iter().collect(),
            group: metadata,
            offsets_sent: false,
            commit,
            events_at,
            calls: BTreeSet::new(),
        };
        if result.is_ok() {
            self.processors.get_mut(name).expect("known").txn = Some(txn);
        }
        self.invoke_sync(name, ProducerCall::Begin, result);
        Vec::new()
    }

    /// Each input's output on the output partition of the same index, modulo the output's partitions.
    fn outputs_of(&self, inputs: &[ConsumerRecord], attempt: &str) -> Vec<(TopicPartition, String)> {
        let out_topic = &self.eos().output_topic;
        let outs: Vec<&TopicPartition> = self.partitions.iter().filter(|tp| &tp.topic == out_topic).collect();
        let place = |r: &ConsumerRecord| outs[r.partition.partition as usize % outs.len()].clone();
        inputs.iter().map(|r| (place(r), output_value(&r.value, attempt))).collect()
    }

    /// Inside a transaction: the next outputs, then the offsets, then the commit (or the abort).
    fn processor_continue(&mut self, shared: &Shared, name: &str) -> Vec<Outgoing> {
        let (lo, hi) = self.eos().outputs_per_send;
        let k = self.rng.range(lo as u64, hi as u64) as usize;
        let Some(txn) = self.processors.get_mut(name).expect("known").txn.as_mut() else {
            return self.processor_abort(shared, name);
        };
        let call = if let Some((tp, _)) = txn.outputs.first().cloned() {
            let n = txn.outputs.iter().take(k).take_while(|(p, _)| *p == tp).count();
            let values: Vec<String> = txn.outputs.drain(..n).map(|(_, v)| v).collect();
            ProducerCall::Send { partition: tp, values }
        } else if !txn.offsets_sent {
            txn.offsets_sent = true;
            ProducerCall::SendOffsets { group: txn.group.clone(), offsets: txn.offsets.clone() }
        } else if txn.commit {
            ProducerCall::Commit
        } else {
            return self.processor_abort(shared, name);
        };
        self.processor_call(shared, name, call)
    }

    fn processor_abort(&mut self, shared: &Shared, name: &str) -> Vec<Outgoing> {
        if let Some(txn) = self.processors.get_mut(name).expect("known").txn.as_mut() {
            txn.commit = false;
        }
        self.processor_call(shared, name, ProducerCall::Abort)
    }

    /// Runs `call` through the one interpreter of client ops, noting its history id in the transaction.
    fn processor_call(&mut self, shared: &Shared, name: &str, call: ProducerCall) -> Vec<Outgoing> {
        let out = self.invoke_call(shared, name, call);
        let id = self.last_call_id();
        if let Some(txn) = self.processors.get_mut(name).expect("known").txn.as_mut() {
            txn.calls.insert(id);
        }
        out
    }

    /// At the end of a run: the group's committed offsets on its coordinator (what OffsetFetch answers)
    /// held against the logs (`exactly-once-output`, `output-of-consumed-input`), and its offsets against
    /// its `__consumer_offsets` log (`txn-offsets-visible-iff-committed`: an aborted transaction's
    /// offsets never become the group's).
    pub fn check_processing(&mut self, logs: &BTreeMap<TopicPartition, PartitionLog>) -> Vec<Violation> {
        let Some(eos) = self.params.eos.clone() else { return Vec::new() };
        let broker = &self.brokers[&self.view_broker(&offsets_partition_for(&eos.group))];
        let group = broker.groups.groups.get(&eos.group);
        let committed: BTreeMap<TopicPartition, i64> =
            group.iter().flat_map(|g| g.offsets.iter().map(|(tp, (o, _))| (tp.clone(), *o))).collect();
        let mut found = check_group_offsets(broker);
        // Under TV1 a late EndTxn retry of one transaction commits the next at the same epoch before its
        // offsets are sent (KIP-890's motivation; seeds/scenarios/network/late_end_txn.json): the loop's
        // outputs then pass its offsets. Exactly-once is claimed where the client intent is (TV2).
        if intent_claimed(self.config.transaction_version) {
            let view =
                EosView { logs, input_topic: &eos.input_topic, output_topic: &eos.output_topic, committed: &committed };
            found.extend(check_exactly_once(&view));
        }
        for (tp, log) in logs {
            let facts = LogFacts::of(log);
            let committed_data = facts.values.iter().filter(|(o, _)| facts.is_committed_data(**o));
            if tp.topic == eos.output_topic {
                self.stats.outputs += committed_data.count() as u64;
            } else if tp.topic == eos.input_topic {
                let below = committed.get(tp).copied().unwrap_or(0);
                self.stats.inputs_consumed += committed_data.filter(|(o, _)| (**o as i64) < below).count() as u64;
            }
        }
        found
    }

    /// The transaction ended (its producer is Ready again): its calls' outcomes say whether it committed.
    /// Anything short of a commit told Ok rewinds the member; a fenced call counts a zombie.
    fn end_of_transaction(&mut self, name: &str, txn: ProcessorTxn) {
        let mut committed = false;
        let mut failed = false;
        let mut fenced = false;
        for e in &self.history.events[txn.events_at..] {
            let Event::Complete { process, call_id, outcome, .. } = e else { continue };
            if process != name || !txn.calls.contains(call_id) {
                continue;
            }
            match outcome {
                CallOutcome::Failed { error } => {
                    failed = true;
                    fenced |= is_fencing(error);
                }
                CallOutcome::Unknown => failed = true,
                CallOutcome::Ok if txn.commit => committed = true,
                _ => {}
            }
        }
        if fenced {
            self.stats.zombies_fenced += 1;
        }
        if committed && !failed {
            self.stats.processor_commits += 1;
            return;
        }
        self.stats.processor_aborts += 1;
        self.rewind(name, &txn.attempt);
    }

    /// Back to the group's committed offsets: the buffered inputs go, positions are fetched again.
    fn rewind(&mut self, name: &str, attempt: &str) {
        self.processors.get_mut(name).expect("known").inputs.clear();
        let member = EosParams::member_of(name);
        self.consumers.get_mut(&member).expect("a member").consumer.reset_to_committed();
        let text = format!("{attempt} did not commit: rewind to the group's committed offsets");
        self.trace(name, "rewind", || text);
    }

    /// `close()` of the member: LeaveGroup now, a new member later.
    fn leave_group(&mut self, shared: &Shared, name: &str) -> Vec<Outgoing> {
        let now = self.now_ms();
        let (lo, hi) = self.eos().leave_ms;
        let at = now + self.rng.range(lo, hi);
        let member = EosParams::member_of(name);
        let effects = self.consumers.get_mut(&member).expect("a member").consumer.close(now);
        let slot = self.processors.get_mut(name).expect("known");
        slot.rejoin_at_ms = Some(at);
        slot.inputs.clear();
        self.stats.leaves += 1;
        self.trace(&member, "leave", || format!("leaves the group (LeaveGroup); rejoins at {at} ms"));
        self.dispatch(shared, &member, effects)
    }

    /// A processor crashed with its producer (`restart_producer`): its member's process dies too, and
    /// starts as a new member; the old one's session times out.
    pub(super) fn crash_processor(&mut self, name: &str) {
        let slot = self.processors.get_mut(name).expect("known");
        slot.txn = None;
        slot.inputs.clear();
        slot.rejoin_at_ms = None;
        self.restart_member(name, "its processor crashed");
    }

    fn restart_member(&mut self, name: &str, why: &str) {
        let member = EosParams::member_of(name);
        let Some(id) = self.nodes[&member].id else { return };
        let text = format!("restart process ({why})");
        self.trace(&member, "restart", || text);
        let handle = Handle::current();
        handle.kill(id);
        let slot = self.consumers.get_mut(&member).expect("a member");
        slot.polls.clear();
        self.nodes.get_mut(&member).expect("known").endpoint = None;
        handle.restart(id);
    }
}
