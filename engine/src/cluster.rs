//! A deterministic in-process cluster: one broker (single replica, leader of every partition and host of
//! the coordinator) and any number of clients. It delivers messages in FIFO order and fires client retry
//! timers until the cluster is quiet. It is the engine's own test harness and the scenario layer's backend;
//! the model and the sim deliver the same messages in other orders.

use crate::broker::Broker;
use crate::config::EngineConfig;
use crate::consumer::{Consumer, ConsumerRecord};
use crate::error::KafkaError;
use crate::producer::{OpId, OpOutput, Producer, ProducerKind};
use crate::protocol::{Effects, Envelope, NodeId, Timer};
use crate::types::{IsolationLevel, Offset, TimeMs, TopicPartition};
use std::collections::{BTreeMap, VecDeque};

/// Deliveries plus timer firings one `run_until_quiet` may take before the cluster is declared stuck.
pub const MAX_STEPS_PER_RUN: usize = 100_000;

/// One delivered message or fired timer, for traces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Delivered { now_ms: TimeMs, envelope: Envelope },
    Fired { now_ms: TimeMs, node: NodeId, timer: Timer },
}

#[derive(Clone, Debug)]
pub struct Cluster {
    pub config: EngineConfig,
    pub now_ms: TimeMs,
    pub broker: Broker,
    pub producers: BTreeMap<String, Producer>,
    pub consumers: BTreeMap<String, Consumer>,
    network: VecDeque<Envelope>,
    timers: BTreeMap<(TimeMs, u64), (NodeId, Timer)>,
    next_timer_seq: u64,
    /// Every step taken, when `record_steps` is on.
    pub steps: Vec<Step>,
    pub record_steps: bool,
}

/// The broker's id in a single-broker cluster.
pub const BROKER_ID: u32 = 0;

impl Cluster {
    pub fn new(topics: &BTreeMap<String, u32>, config: EngineConfig) -> Self {
        let mut broker = Broker::new(BROKER_ID, topics, config.clone());
        let start = broker.on_start(0);
        let mut cluster = Cluster {
            config,
            now_ms: 0,
            broker,
            producers: BTreeMap::new(),
            consumers: BTreeMap::new(),
            network: VecDeque::new(),
            timers: BTreeMap::new(),
            next_timer_seq: 0,
            steps: Vec::new(),
            record_steps: false,
        };
        cluster.apply(&NodeId::Broker(BROKER_ID), start);
        cluster
    }

    pub fn broker_id(&self) -> NodeId {
        NodeId::Broker(BROKER_ID)
    }

    /// Adds (or replaces, as a process restart does) a producer client.
    pub fn add_producer(&mut self, name: &str, kind: ProducerKind) {
        let p = Producer::new(name, kind, self.broker_id(), self.config.clone());
        self.producers.insert(name.to_string(), p);
    }

    /// The process dies: its state is gone, answers to it are dropped, its transaction stays open.
    pub fn crash_producer(&mut self, name: &str) -> bool {
        self.producers.remove(name).is_some()
    }

    pub fn apply(&mut self, node: &NodeId, effects: Effects) {
        self.network.extend(effects.sends);
        for (due, timer) in effects.timers {
            self.next_timer_seq += 1;
            self.timers.insert((due, self.next_timer_seq), (node.clone(), timer));
        }
    }

    fn deliver(&mut self, env: Envelope) {
        if self.record_steps {
            self.steps.push(Step::Delivered { now_ms: self.now_ms, envelope: env.clone() });
        }
        let to = env.to.clone();
        let effects = match &to {
            NodeId::Broker(_) => self.broker.on_message(self.now_ms, env),
            NodeId::Client(name) => {
                if let Some(p) = self.producers.get_mut(name) {
                    p.on_message(self.now_ms, env)
                } else if let Some(c) = self.consumers.get_mut(name) {
                    c.on_message(env)
                } else {
                    Effects::default() // A crashed client: the answer is lost.
                }
            }
        };
        self.apply(&to, effects);
    }

    fn fire(&mut self, node: NodeId, timer: Timer) {
        if self.record_steps {
            self.steps.push(Step::Fired { now_ms: self.now_ms, node: node.clone(), timer: timer.clone() });
        }
        let effects = match &node {
            NodeId::Broker(_) => self.broker.on_timer(self.now_ms, timer),
            NodeId::Client(name) => {
                if let Some(p) = self.producers.get_mut(name) {
                    p.on_timer(self.now_ms, timer)
                } else if let Some(c) = self.consumers.get_mut(name) {
                    c.on_timer(timer)
                } else {
                    Effects::default()
                }
            }
        };
        self.apply(&node, effects);
    }

    /// Delivers every message and fires every client retry timer (advancing time to it) until nothing is
    /// left but background timers. Returns false if the bound was hit: the cluster keeps itself busy.
    pub fn run_until_quiet(&mut self) -> bool {
        for _ in 0..MAX_STEPS_PER_RUN {
            if !self.step() {
                return true;
            }
        }
        false
    }

    /// One step of `run_until_quiet`: delivers the next message in flight, or else, while a client retry
    /// timer is set, fires the earliest timer (moving time to it). Returns false if there was nothing to do.
    pub fn step(&mut self) -> bool {
        if let Some(env) = self.network.pop_front() {
            self.deliver(env);
            return true;
        }
        if !self.timers.values().any(|(_, t)| !t.is_background()) {
            return false;
        }
        // Time moves to the next client retry: every timer due by then (background ones too, such as a
        // batch's delivery timeout) fires first, in due order.
        let key = *self.timers.keys().next().expect("a client timer is set");
        let (node, timer) = self.timers.remove(&key).expect("found above");
        self.now_ms = self.now_ms.max(key.0);
        self.fire(node, timer);
        true
    }

    /// The message `step` would deliver next, if any (drivers that delay, drop or duplicate look first).
    pub fn peek_message(&self) -> Option<&Envelope> {
        self.network.front()
    }

    /// Takes the next message off the network without delivering it: lost, or held back by the driver.
    pub fn take_message(&mut self) -> Option<Envelope> {
        self.network.pop_front()
    }

    /// Puts a message at the back of the network: a held message released, or a duplicate.
    pub fn inject(&mut self, env: Envelope) {
        self.network.push_back(env);
    }

    /// Every message in flight, oldest first: the network scenario layer picks one by API and endpoints.
    pub fn in_flight(&self) -> impl Iterator<Item = &Envelope> {
        self.network.iter()
    }

    /// Takes the `index`-th message in flight off the network (to deliver, drop or hold it).
    pub fn remove_in_flight(&mut self, index: usize) -> Option<Envelope> {
        self.network.remove(index)
    }

    /// Delivers one message now, whatever else is in flight; what its receiver sends stays in flight.
    pub fn deliver_message(&mut self, env: Envelope) {
        self.deliver(env);
    }

    /// Fires every timer due by `until`, in due order (timers due at the same instant fire in the order
    /// they were set), without delivering any message they send; then time is `until`.
    pub fn fire_timers_until(&mut self, until: TimeMs) {
        while let Some((&key, _)) = self.timers.iter().next() {
            if key.0 > until {
                break;
            }
            let (node, timer) = self.timers.remove(&key).expect("found above");
            self.now_ms = self.now_ms.max(key.0);
            self.fire(node, timer);
        }
        self.now_ms = self.now_ms.max(until);
    }

    /// Drops every message in flight (a broker restart loses its connections) and returns them.
    pub fn drop_messages(&mut self) -> Vec<Envelope> {
        self.network.drain(..).collect()
    }

    /// Whether a client retry timer is set (the cluster is not quiet even with an empty network).
    pub fn has_client_timer(&self) -> bool {
        self.timers.values().any(|(_, t)| !t.is_background())
    }

    /// When the earliest timer of any kind (background ones too) falls due.
    pub fn next_timer_due_ms(&self) -> Option<TimeMs> {
        self.timers.keys().next().map(|k| k.0)
    }

    /// Fires the earliest timer of any kind, moving time to it. Returns false if no timer is set.
    pub fn fire_next_timer(&mut self) -> bool {
        let Some((&key, _)) = self.timers.iter().next() else { return false };
        let (node, timer) = self.timers.remove(&key).expect("found above");
        self.now_ms = self.now_ms.max(key.0);
        self.fire(node, timer);
        true
    }

    /// Moves time forward by `ms`, firing every timer that falls due (background ones too) in order.
    pub fn advance_time(&mut self, ms: TimeMs) -> bool {
        let until = self.now_ms + ms;
        loop {
            if !self.run_until_quiet() {
                return false;
            }
            let Some((&key, _)) = self.timers.iter().next() else {
                break;
            };
            if key.0 > until {
                break;
            }
            let (node, timer) = self.timers.remove(&key).expect("found above");
            self.now_ms = self.now_ms.max(key.0);
            self.fire(node, timer);
        }
        self.now_ms = until;
        true
    }

    /// Runs one producer call to completion. `Err` is an immediate client-side rejection or the cluster's
    /// answer; `Ok(None)` means the call never completed (the cluster stayed busy or the answer was lost).
    pub fn call_producer(
        &mut self,
        name: &str,
        call: impl FnOnce(&mut Producer, TimeMs) -> Result<(OpId, Effects), KafkaError>,
    ) -> Result<Option<OpOutput>, KafkaError> {
        let now = self.now_ms;
        let producer = self.producers.get_mut(name).unwrap_or_else(|| panic!("no producer named {name}"));
        let (op, effects) = call(producer, now)?;
        let node = producer.id.clone();
        self.apply(&node, effects);
        self.run_until_quiet();
        let Some(producer) = self.producers.get_mut(name) else {
            return Ok(None);
        };
        let completions = producer.take_completions();
        match completions.into_iter().find(|c| c.op == op) {
            Some(c) => c.result.map(Some),
            None => Ok(None),
        }
    }

    /// A fresh consumer assigned to `partition` at `from`, polled until a fetch returns nothing: what a
    /// reader of that isolation level delivers, and its position afterwards.
    pub fn read(
        &mut self,
        isolation: IsolationLevel,
        partition: &TopicPartition,
        from: Offset,
    ) -> Result<(Vec<ConsumerRecord>, Offset), KafkaError> {
        const READER: &str = "__reader";
        let mut consumer = Consumer::new(READER, isolation, self.broker_id(), self.config.clone());
        consumer.seek(partition.clone(), from);
        self.consumers.insert(READER.to_string(), consumer);
        let mut delivered = Vec::new();
        let max_polls = self.broker.partition(partition).map(|l| l.log_end_offset()).unwrap_or(0) + 2;
        let mut result = None;
        let mut position = from;
        for _ in 0..max_polls {
            let now = self.now_ms;
            let effects = self.consumers.get_mut(READER).expect("reader").poll(now, partition);
            self.apply(&NodeId::Client(READER.to_string()), effects);
            self.run_until_quiet();
            let c = self.consumers.get_mut(READER).expect("reader");
            delivered.extend(c.take_delivered());
            if let Some((_, e)) = c.take_errors().into_iter().next() {
                result = Some(Err(e));
                break;
            }
            position = c.position(partition).expect("assigned");
            if c.is_caught_up(partition) {
                break;
            }
        }
        self.consumers.remove(READER);
        // A reader that never caught up (its position stuck) reports what it delivered so far.
        result.unwrap_or(Ok((delivered, position)))
    }
}
