//! A deterministic in-process cluster: brokers (by default one, leader of every partition and host of the
//! coordinator; with a `Topology`, 1 to 5 brokers whose followers replicate broker 0's partitions and
//! take over their leadership when broker 0 crashes), the controller stand-in, and any number of clients. It delivers messages in FIFO order and fires client
//! retry timers until the cluster is quiet. It is the engine's own test harness and the scenario layer's
//! backend; the model and the sim deliver the same messages in other orders.

use crate::broker::Broker;
use crate::config::EngineConfig;
use crate::consumer::{Consumer, ConsumerRecord};
use crate::controller::{Controller, Topology};
use crate::error::KafkaError;
use crate::network_client::{self, Receiver, Undelivered};
use crate::producer::{OpId, OpOutput, Producer, ProducerKind};
use crate::protocol::{Effects, Envelope, NodeId, Timer};
use crate::protocol::{CONTROLLER_ID, NO_LEADER};
use crate::types::{IsolationLevel, Offset, TimeMs, TopicPartition};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Deliveries plus timer firings one `run_until_quiet` may take before the cluster is declared stuck.
pub const MAX_STEPS_PER_RUN: usize = 100_000;

/// One delivered message or fired timer, for traces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Delivered { now_ms: TimeMs, envelope: Envelope },
    Fired { now_ms: TimeMs, node: NodeId, timer: Timer },
}

/// What falls due next: a timer (by its key), a refused request's return (by its key), a broker's
/// replication work or its group coordinator's join phase or session expiry (by broker id).
#[derive(Clone, Copy)]
enum Due {
    Timer((TimeMs, u64)),
    Refusal((TimeMs, u64)),
    Replication(u32),
    Groups(u32),
}

#[derive(Clone, Debug)]
pub struct Cluster {
    pub config: EngineConfig,
    pub now_ms: TimeMs,
    /// Broker 0: the transaction coordinator's host and, in this phase, every partition's leader.
    pub broker: Broker,
    /// Brokers 1 and up, followers of broker 0's partitions.
    pub peers: Vec<Broker>,
    pub controller: Controller,
    /// Crashed brokers, not yet restarted: what is sent to them is refused or lost
    /// (`network_client::undelivered`), and they do nothing.
    pub down: BTreeSet<u32>,
    pub producers: BTreeMap<String, Producer>,
    pub consumers: BTreeMap<String, Consumer>,
    network: VecDeque<Envelope>,
    timers: TimerQueue,
    /// Refused requests on their way back to their senders, by when they arrive.
    refusals: BTreeMap<(TimeMs, u64), Envelope>,
    /// Every step taken, when `record_steps` is on.
    pub steps: Vec<Step>,
    pub record_steps: bool,
}

/// The broker's id in a single-broker cluster, and the leader's in a replicated one.
pub const BROKER_ID: u32 = 0;

impl Cluster {
    pub fn new(topics: &BTreeMap<String, u32>, config: EngineConfig) -> Self {
        Cluster::with_topology(topics, config, &Topology::single())
    }

    /// A cluster of `topology.brokers` brokers hosting `topics` at each topic's replication factor;
    /// `Topology::validate` must have accepted it.
    pub fn with_topology(topics: &BTreeMap<String, u32>, config: EngineConfig, topology: &Topology) -> Self {
        let config = topology.bound(config);
        let controller = Controller::new(topics, topology, &config);
        let mut brokers: Vec<Broker> = (0..topology.brokers)
            .map(|id| Broker::with_registrations(id, &controller.partitions, config.clone()))
            .collect();
        let broker = brokers.remove(0);
        let mut cluster = Cluster {
            config,
            now_ms: 0,
            broker,
            peers: brokers,
            controller,
            down: BTreeSet::new(),
            producers: BTreeMap::new(),
            consumers: BTreeMap::new(),
            network: VecDeque::new(),
            timers: TimerQueue::default(),
            refusals: BTreeMap::new(),
            steps: Vec::new(),
            record_steps: false,
        };
        for id in 0..topology.brokers {
            let start = cluster.broker_mut(id).expect("listed").start_loaded(0);
            cluster.apply(&NodeId::Broker(id), start);
        }
        cluster
    }

    /// Every broker, broker 0 first.
    pub fn brokers(&self) -> impl Iterator<Item = &Broker> + Clone {
        std::iter::once(&self.broker).chain(self.peers.iter())
    }

    pub fn broker_mut(&mut self, id: u32) -> Option<&mut Broker> {
        match id {
            BROKER_ID => Some(&mut self.broker),
            _ => self.peers.get_mut(id as usize - 1),
        }
    }

    /// The coordinator that stands for the cluster's (`broker::standing_coordinator`), broker 0's where
    /// `__transaction_state` is not replicated.
    pub fn coordinator(&self) -> &crate::coordinator::TransactionCoordinator {
        &crate::broker::standing_coordinator(self.brokers()).unwrap_or(&self.broker).coordinator
    }

    pub fn broker_id(&self) -> NodeId {
        NodeId::Broker(BROKER_ID)
    }

    /// Every broker id, broker 0 first.
    pub fn broker_ids(&self) -> Vec<u32> {
        (0..1 + self.peers.len() as u32).collect()
    }

    /// Adds (or replaces, as a process restart does) a producer client, bootstrapped to every broker.
    pub fn add_producer(&mut self, name: &str, kind: ProducerKind) {
        self.add_configured_producer(name, kind, self.config.clone());
    }

    /// `add_producer` with the client's own settings (`compression.type`, ...) in place of the cluster's.
    pub fn add_configured_producer(&mut self, name: &str, kind: ProducerKind, config: EngineConfig) {
        let mut p = Producer::new(name, kind, self.broker_id(), config);
        self.bootstrap(&mut p);
        self.producers.insert(name.to_string(), p);
    }

    /// A new producer of this cluster knows every broker and the current leaders.
    pub fn bootstrap(&self, producer: &mut Producer) {
        producer.set_bootstrap(self.broker_ids());
        let leaders = self.controller.partitions.iter().filter(|(_, r)| r.state.leader != NO_LEADER);
        producer.learn_leaders(leaders.map(|(tp, r)| (tp.clone(), r.state.leader)));
    }

    /// The leader of `tp` as the controller has it (`None` while it has none).
    pub fn leader_of(&self, tp: &TopicPartition) -> Option<u32> {
        match self.controller.partitions.get(tp) {
            Some(r) if r.state.leader == NO_LEADER => None,
            Some(r) => Some(r.state.leader),
            None => Some(BROKER_ID),
        }
    }

    /// The replica of `tp` on its current leader (broker 0's while no broker leads it).
    pub fn leader_log(&self, tp: &TopicPartition) -> Option<&crate::log::PartitionLog> {
        let id = self.leader_of(tp).unwrap_or(BROKER_ID);
        self.brokers().nth(id as usize).and_then(|b| b.partition(tp))
    }

    /// The broker process dies (its log survives on disk): every message to or from it is lost, its
    /// clients' connections break, and the controller fences it (the session timeout, taken as instant),
    /// electing new leaders for what it led. Returns false if it is unknown or already down.
    pub fn crash_broker(&mut self, id: u32) -> bool {
        if self.broker_mut(id).is_none() || !self.down.insert(id) {
            return false;
        }
        let node = NodeId::Broker(id);
        // What it sent died with it; what was on its way to it fails as a request to a dead broker does.
        let (to_it, rest) = self.network.drain(..).filter(|e| e.from != node).partition(|e| e.to == node);
        self.network = rest;
        self.refusals.retain(|_, e| e.to != node);
        for env in to_it {
            self.undeliverable(env, Receiver::Down);
        }
        self.timers.cancel_node(&node);
        self.disconnect_clients(&node);
        let effects = self.controller.broker_fenced(id);
        self.apply(&NodeId::Broker(CONTROLLER_ID), effects);
        true
    }

    /// A crashed broker starts again: the controller registers it after its unclean shutdown (with ELR it
    /// leaves every ISR and ELR) and unfences it (it may lead a partition left without a leader), and it loads its logs and the controller's current image (`Broker::restart_with_image`).
    /// Returns false if it was not down.
    pub fn start_broker(&mut self, id: u32) -> bool {
        if !self.down.remove(&id) {
            return false;
        }
        let effects = self.controller.broker_restarted(id);
        self.apply(&NodeId::Broker(CONTROLLER_ID), effects);
        let now = self.now_ms;
        let image = self.controller.partitions.clone();
        let effects = self.broker_mut(id).expect("a known broker").restart_with_image(now, &image);
        self.apply(&NodeId::Broker(id), effects);
        true
    }

    /// Every producer's connection to `broker` breaks (`Producer::on_disconnect`).
    pub fn disconnect_clients(&mut self, broker: &NodeId) {
        let now = self.now_ms;
        let names: Vec<String> = self.producers.keys().cloned().collect();
        for name in names {
            let p = self.producers.get_mut(&name).expect("listed above");
            let effects = p.on_disconnect(now, broker);
            let node = p.id.clone();
            self.apply(&node, effects);
        }
    }

    /// The process dies: its state is gone, answers to it are dropped, its transaction stays open.
    pub fn crash_producer(&mut self, name: &str) -> bool {
        self.producers.remove(name).is_some()
    }

    pub fn apply(&mut self, node: &NodeId, effects: Effects) {
        self.network.extend(effects.sends);
        for (due, timer) in effects.timers {
            self.timers.insert(due, node.clone(), timer);
        }
    }

    fn deliver(&mut self, env: Envelope) {
        if self.record_steps {
            self.steps.push(Step::Delivered { now_ms: self.now_ms, envelope: env.clone() });
        }
        let to = env.to.clone();
        let now = self.now_ms;
        let effects = match &to {
            NodeId::Broker(CONTROLLER_ID) => self.controller.on_message(env),
            NodeId::Broker(id) if self.down.contains(id) => {
                self.undeliverable(env, Receiver::Down);
                Effects::default()
            }
            NodeId::Broker(id) => match self.broker_mut(*id) {
                Some(b) => b.on_message(now, env),
                None => Effects::default(), // No such broker: the message is lost.
            },
            NodeId::Client(name) => {
                if let Some(p) = self.producers.get_mut(name) {
                    p.on_message(self.now_ms, env)
                } else if let Some(c) = self.consumers.get_mut(name) {
                    c.on_message(self.now_ms, env)
                } else {
                    Effects::default() // A crashed client: the answer is lost.
                }
            }
        };
        self.apply(&to, effects);
    }

    /// A message its receiver cannot take: refused back to its sender after the reconnect backoff, or lost.
    fn undeliverable(&mut self, env: Envelope, receiver: Receiver) {
        if let Undelivered::Refused { after_ms, back } = network_client::undelivered(env, receiver) {
            self.timers.next_seq += 1;
            self.refusals.insert((self.now_ms + after_ms, self.timers.next_seq), back);
        }
    }

    fn fire(&mut self, node: NodeId, timer: Timer) {
        if self.record_steps {
            self.steps.push(Step::Fired { now_ms: self.now_ms, node: node.clone(), timer: timer.clone() });
        }
        let now = self.now_ms;
        let effects = match &node {
            NodeId::Broker(id) => {
                self.broker_mut(*id).expect("only brokers of this cluster set timers").on_timer(now, timer)
            }
            NodeId::Client(name) => {
                if let Some(p) = self.producers.get_mut(name) {
                    p.on_timer(self.now_ms, timer)
                } else if let Some(c) = self.consumers.get_mut(name) {
                    c.on_timer(self.now_ms, timer)
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
        if !self.has_client_timer() {
            return false;
        }
        // Time moves to the next client retry: every timer due by then (background ones too, such as a
        // batch's delivery timeout, and the brokers' replication work) fires first, in due order.
        let (_, due) = self.next_due().expect("a client timer is set");
        self.fire_due(due);
        true
    }

    /// The earliest of the timers and the brokers' replication deadlines (a timer first on a tie).
    fn next_due(&self) -> Option<(TimeMs, Due)> {
        let timer = self.timers.first_key().map(|k| (k.0, Due::Timer(k)));
        let refusal = self.refusals.keys().next().map(|k| (k.0, Due::Refusal(*k)));
        let timer = match (timer, refusal) {
            (Some(t), Some(r)) if r.0 < t.0 => Some(r),
            (None, r) => r,
            (t, _) => t,
        };
        let replication = self
            .brokers()
            .filter_map(|b| {
                let up = !self.down.contains(&b.id);
                b.next_replication_deadline_ms().filter(|_| up).map(|t| (t, b.id))
            })
            .min()
            .map(|(t, id)| (t, Due::Replication(id)));
        // The group coordinators' deadlines (`GroupCoordinator::next_deadline_ms`), after the rest on a tie.
        let groups = self
            .brokers()
            .filter(|b| !self.down.contains(&b.id))
            .filter_map(|b| b.groups.next_deadline_ms().map(|t| (t, b.id)))
            .min()
            .map(|(t, id)| (t, Due::Groups(id)));
        let earliest = |a: Option<(TimeMs, Due)>, b: Option<(TimeMs, Due)>| match (a, b) {
            (Some(a), Some(b)) if b.0 < a.0 => Some(b),
            (Some(a), _) => Some(a),
            (None, b) => b,
        };
        earliest(earliest(timer, replication), groups)
    }

    /// Fires what `next_due` found, moving time to it.
    fn fire_due(&mut self, due: Due) {
        match due {
            Due::Timer(key) => {
                let (node, timer) = self.timers.remove(key).expect("found by next_due");
                self.now_ms = self.now_ms.max(key.0);
                self.fire(node, timer);
            }
            Due::Refusal(key) => {
                let back = self.refusals.remove(&key).expect("found by next_due");
                self.now_ms = self.now_ms.max(key.0);
                self.deliver(back);
            }
            Due::Replication(id) => {
                let broker = self.broker_mut(id).expect("found by next_due");
                let at = broker.next_replication_deadline_ms().expect("found by next_due");
                self.now_ms = self.now_ms.max(at);
                let now = self.now_ms;
                let effects = self.broker_mut(id).expect("found by next_due").tick_replication(now);
                self.apply(&NodeId::Broker(id), effects);
            }
            Due::Groups(id) => {
                let broker = self.broker_mut(id).expect("found by next_due");
                let at = broker.groups.next_deadline_ms().expect("found by next_due");
                self.now_ms = self.now_ms.max(at);
                let now = self.now_ms;
                let effects = self.broker_mut(id).expect("found by next_due").tick_groups(now);
                self.apply(&NodeId::Broker(id), effects);
            }
        }
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
    pub fn in_flight(&self) -> impl ExactSizeIterator<Item = &Envelope> {
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
        while let Some((due_ms, due)) = self.next_due() {
            if due_ms > until {
                break;
            }
            self.fire_due(due);
        }
        self.now_ms = self.now_ms.max(until);
    }

    /// Drops every message in flight (a broker restart loses its connections) and returns them.
    pub fn drop_messages(&mut self) -> Vec<Envelope> {
        self.network.drain(..).collect()
    }

    /// Whether a client retry timer is set or a refused request is on its way back (the cluster is not
    /// quiet even with an empty network).
    pub fn has_client_timer(&self) -> bool {
        self.timers.client > 0 || !self.refusals.is_empty()
    }

    /// When the earliest timer of any kind (background ones too) falls due.
    pub fn next_timer_due_ms(&self) -> Option<TimeMs> {
        self.next_due().map(|(t, _)| t)
    }

    /// Fires the earliest timer of any kind (or replication deadline), moving time to it. Returns false if
    /// none is set.
    pub fn fire_next_timer(&mut self) -> bool {
        let Some((_, due)) = self.next_due() else { return false };
        self.fire_due(due);
        true
    }

    /// Moves time forward by `ms`, firing every timer that falls due (background ones too) in order.
    pub fn advance_time(&mut self, ms: TimeMs) -> bool {
        let until = self.now_ms + ms;
        loop {
            if !self.run_until_quiet() {
                return false;
            }
            let Some((due_ms, due)) = self.next_due() else {
                break;
            };
            if due_ms > until {
                break;
            }
            self.fire_due(due);
        }
        self.now_ms = until;
        true
    }

    /// The brokers (broker 0 first), the controller and the brokers' pending timers as (due, broker,
    /// timer), for a wire driver that goes on serving this cluster (`Driver::from_cluster` in txnsim-kafka).
    /// The clients are left behind with their timers and answers; messages still in flight are lost, so
    /// call it once the cluster is quiet.
    pub fn into_brokers(self) -> (Vec<Broker>, Controller, Vec<(TimeMs, u32, Timer)>) {
        let timers = self.timers.by_due.into_iter().filter_map(|((due, _), (node, timer))| match node {
            NodeId::Broker(id) => Some((due, id, timer)),
            NodeId::Client(_) => None,
        });
        let timers = timers.collect();
        (std::iter::once(self.broker).chain(self.peers).collect(), self.controller, timers)
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
        // A new consumer's first metadata lookup finds the partition's current leader.
        let leader = NodeId::Broker(self.leader_of(partition).unwrap_or(BROKER_ID));
        let mut consumer = Consumer::new(READER, isolation, leader, self.config.clone());
        consumer.seek(partition.clone(), from);
        self.consumers.insert(READER.to_string(), consumer);
        let mut delivered = Vec::new();
        let max_polls = self.leader_log(partition).map(|l| l.log_end_offset()).unwrap_or(0) + 2;
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

/// The cluster's timers in due order (ties in the order set), with a count of the client retry timers
/// among them: a long scenario leaves one background request or delivery timeout per request and batch
/// set, as its time never reaches them, so looking for a client timer must not scan them all.
#[derive(Clone, Debug, Default)]
struct TimerQueue {
    by_due: BTreeMap<(TimeMs, u64), (NodeId, Timer)>,
    next_seq: u64,
    /// Timers in `by_due` that are not `Timer::is_background`.
    client: usize,
}

impl TimerQueue {
    fn insert(&mut self, due: TimeMs, node: NodeId, timer: Timer) {
        self.next_seq += 1;
        self.client += usize::from(!timer.is_background());
        self.by_due.insert((due, self.next_seq), (node, timer));
    }

    fn first_key(&self) -> Option<(TimeMs, u64)> {
        self.by_due.keys().next().copied()
    }

    fn remove(&mut self, key: (TimeMs, u64)) -> Option<(NodeId, Timer)> {
        let removed = self.by_due.remove(&key)?;
        self.client -= usize::from(!removed.1.is_background());
        Some(removed)
    }

    /// A crashed node's timers go with it.
    fn cancel_node(&mut self, node: &NodeId) {
        let client = &mut self.client;
        self.by_due.retain(|_, (n, t)| {
            let keep = n != node;
            *client -= usize::from(!keep && !t.is_background());
            keep
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scanned(q: &TimerQueue) -> usize {
        q.by_due.values().filter(|(_, t)| !t.is_background()).count()
    }

    /// The count stands in for a scan of every timer; it must match the scan after each kind of change.
    #[test]
    fn timer_queue_counts_client_timers_through_insert_remove_and_cancel() {
        let mut q = TimerQueue::default();
        let (a, b) = (NodeId::Client("a".into()), NodeId::Client("b".into()));
        q.insert(5, a.clone(), Timer::RetryBackoff { correlation_id: 1 });
        q.insert(5, a.clone(), Timer::RequestTimeout { correlation_id: 2 });
        q.insert(3, b.clone(), Timer::RetryBackoff { correlation_id: 3 });
        assert_eq!((q.client, scanned(&q)), (2, 2), "two retry backoffs were set, one request timeout");
        assert_eq!(q.first_key(), Some((3, 3)), "the earliest due comes first, whatever order it was set in");
        let (node, _) = q.remove((3, 3)).expect("set above");
        assert_eq!((node, q.client, scanned(&q)), (b, 1, 1), "firing b's backoff leaves a's");
        q.cancel_node(&a);
        assert_eq!((q.client, scanned(&q), q.by_due.len()), (0, 0, 0), "a crash cancels all of a's timers");
        assert_eq!(q.remove((5, 1)), None, "a cancelled timer cannot fire");
    }
}
