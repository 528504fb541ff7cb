//! The controller stand-in: KRaft's `QuorumController` reduced to what partition replication needs in
//! this phase. It places replicas when the cluster starts and when a topic is created at run time (a
//! broker forwards CreateTopics to it, as KRaft brokers do), holds each partition's registration (replicas,
//! leader, leader epoch, ISR, partition epoch), commits the ISR changes leaders ask for with
//! AlterPartition (KIP-497; `ReplicationControlManager.alterPartition`), and elects a new leader when a
//! broker is fenced (`handleBrokerFenced`) or comes back to a partition left without one
//! (`handleBrokerUnfenced`), telling every live broker each event's records as one metadata delta. It is one node with
//! its own id, not a quorum, and it never fails.

use crate::config::EngineConfig;
use crate::coordinator::{
    transaction_state_partition, TRANSACTION_STATE_LOG_REPLICATION_FACTOR, TRANSACTION_STATE_TOPIC,
};
use crate::error::KafkaError;
use crate::group_coordinator::GROUP_METADATA_TOPIC;
use crate::metadata::{MetadataMessage, NewTopic};
use crate::mutation::{Mutation, Mutations};
use crate::protocol::{Effects, Envelope, Message, NodeId};
use crate::types::TopicPartition;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The controller's node id: KRaft controllers share the broker id space, and no broker uses this one.
pub const CONTROLLER_ID: u32 = 3000;

/// The most brokers a cluster here may have.
pub const MAX_BROKERS: u32 = 5;

/// `LeaderConstants.NO_LEADER` (-1 on the wire): no replica may lead the partition now.
pub const NO_LEADER: u32 = u32::MAX;

/// A leader id for people: the broker, or `none`.
pub fn leader_name(leader: u32) -> String {
    if leader == NO_LEADER {
        "none".into()
    } else {
        leader.to_string()
    }
}

/// A partition's leadership and ISR as the controller committed it (`LeaderAndIsr`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LeaderAndIsr {
    pub leader: u32,
    pub leader_epoch: i32,
    pub isr: Vec<u32>,
    /// Bumped by every committed change; an AlterPartition must name the current one.
    pub partition_epoch: i32,
}

/// One partition's `PartitionRegistration`: its assigned replicas (the preferred leader first) and state.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PartitionRegistration {
    pub replicas: Vec<u32>,
    pub state: LeaderAndIsr,
}

impl PartitionRegistration {
    /// A new partition: its whole assignment in the ISR (the replicas are all empty), the first leading
    /// at epoch 0.
    fn new(replicas: Vec<u32>) -> Self {
        let state = LeaderAndIsr { leader: replicas[0], leader_epoch: 0, isr: replicas.clone(), partition_epoch: 0 };
        PartitionRegistration { replicas, state }
    }
}

/// How the controller places a new partition's replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Placement {
    /// Broker 0 leads every partition (as a manual replica assignment may place them), and the followers
    /// of partition `p` are the next brokers from `1 + p`, round the others. The in-process `Cluster`'s:
    /// its replicated scenarios crash broker 0 to move every partition's leadership at once, and their
    /// expectations are written for that.
    LeaderZero,
    /// Kafka's `StripedReplicaPlacer` on one rack: the usable (unfenced) brokers sorted by id, partition
    /// `i` placed on `rf` consecutive brokers of that list starting `i + 1` along it, so leaders spread
    /// and a one-partition topic is led by a broker other than the coordinator's. Kafka starts each
    /// CreateTopics at a random offset (and shuffles racks); here the start is fixed and `i` counts every
    /// partition the controller placed before, so placement is deterministic and keeps spreading.
    Striped,
}

impl Placement {
    /// The replicas of partition `p` of a topic at replication factor `rf` (at most the unfenced
    /// brokers), on a cluster of `brokers`, when `placed` partitions were placed before it.
    fn replicas(self, p: u32, placed: usize, rf: u32, brokers: u32, fenced: &BTreeSet<u32>) -> Vec<u32> {
        match self {
            Placement::LeaderZero => {
                let followers = (0..rf.saturating_sub(1)).map(|k| 1 + (p + k) % (brokers - 1));
                std::iter::once(0).chain(followers).collect()
            }
            Placement::Striped => {
                let usable: Vec<u32> = (0..brokers).filter(|b| !fenced.contains(b)).collect();
                (0..rf as usize).map(|k| usable[(placed + 1 + k) % usable.len()]).collect()
            }
        }
    }
}

/// How many brokers the cluster has, each topic's replication factor (capped by the broker count), and
/// how replicas are placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    pub brokers: u32,
    pub replication_factor: u32,
    /// Topics whose replication factor differs from `replication_factor`.
    pub per_topic: BTreeMap<String, u32>,
    pub placement: Placement,
    /// `transaction.state.log.replication.factor` (Kafka's 3, capped by the broker count). Above 1 the
    /// coordinator lives on `__transaction_state`'s leader and fails over with it; at 1 it stays on broker
    /// 0 with its log unreplicated, as on a single broker.
    pub transaction_log_replication_factor: u32,
}

impl Topology {
    /// One broker, every partition a single replica: the engine as it was before replication.
    pub fn single() -> Self {
        Topology::new(1, 1)
    }

    /// Broker 0 leading every partition (`Placement::LeaderZero`).
    pub fn new(brokers: u32, replication_factor: u32) -> Self {
        Topology {
            brokers,
            replication_factor,
            per_topic: BTreeMap::new(),
            placement: Placement::LeaderZero,
            transaction_log_replication_factor: TRANSACTION_STATE_LOG_REPLICATION_FACTOR.min(brokers),
        }
    }

    /// Kafka's striped placement (`Placement::Striped`).
    pub fn striped(brokers: u32, replication_factor: u32) -> Self {
        Topology { placement: Placement::Striped, ..Topology::new(brokers, replication_factor) }
    }

    /// `config` with the broker settings the cluster's size bounds: `offsets.topic.replication.factor`,
    /// at most the broker count (a one-broker cluster keeps its groups unreplicated on broker 0).
    pub fn bound(&self, mut config: EngineConfig) -> EngineConfig {
        config.offsets_topic_replication_factor = config.offsets_topic_replication_factor.min(self.brokers);
        config
    }

    /// Rejects what the cluster cannot host: 1..=5 brokers and a replication factor of at least 1.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=MAX_BROKERS).contains(&self.brokers) {
            return Err(format!("brokers must be 1..={MAX_BROKERS}, got {}", self.brokers));
        }
        if let Some((t, _)) = self.per_topic.iter().find(|(_, rf)| **rf == 0) {
            return Err(format!("the replication factor of topic '{t}' must be at least 1"));
        }
        if self.replication_factor == 0 {
            return Err("replication_factor must be at least 1".into());
        }
        if self.transaction_log_replication_factor == 0 {
            return Err("transaction_log_replication_factor must be at least 1".into());
        }
        Ok(())
    }

    pub fn replication_factor_of(&self, topic: &str) -> u32 {
        self.per_topic.get(topic).copied().unwrap_or(self.replication_factor).min(self.brokers)
    }

    /// Where each partition's replicas go when the cluster starts (every broker usable), topics in name
    /// order, as `placement` places them.
    pub fn assignment(&self, topics: &BTreeMap<String, u32>) -> BTreeMap<TopicPartition, Vec<u32>> {
        let mut out = BTreeMap::new();
        for (topic, partitions) in topics {
            let rf = self.replication_factor_of(topic);
            for p in 0..*partitions {
                let replicas = self.placement.replicas(p, out.len(), rf, self.brokers, &BTreeSet::new());
                out.insert(TopicPartition::new(topic, p), replicas);
            }
        }
        out
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Controller {
    pub id: NodeId,
    pub partitions: BTreeMap<TopicPartition, PartitionRegistration>,
    /// Brokers whose session ended (crashed, not yet back): no leadership and no ISR membership.
    pub fenced: BTreeSet<u32>,
    /// `unclean.leader.election.enable` (default false): with no live ISR member, a live replica outside
    /// the ISR may lead, losing what only the ISR held.
    pub unclean_leader_election: bool,
    mutations: Mutations,
    /// How many brokers there are, to tell each of them about a change.
    brokers: u32,
    /// `default.replication.factor`: of a topic created without one.
    default_replication_factor: u32,
    /// How the topics created at run time are placed.
    placement: Placement,
    /// `offsets.topic.replication.factor`, for `__consumer_offsets`.
    offsets_topic_replication_factor: u32,
}

impl Controller {
    /// Registers every partition with its whole assignment in the ISR (a new topic's replicas are in
    /// sync: they are all empty), the first replica leading at epoch 0.
    pub fn new(topics: &BTreeMap<String, u32>, topology: &Topology, config: &EngineConfig) -> Self {
        let mut partitions: BTreeMap<TopicPartition, PartitionRegistration> = topology
            .assignment(topics)
            .into_iter()
            .map(|(tp, replicas)| (tp, PartitionRegistration::new(replicas)))
            .collect();
        let rf = topology.transaction_log_replication_factor.min(topology.brokers);
        if rf > 1 {
            // A replicated cluster's coordinator lives on `__transaction_state`'s leader, broker 0 at first.
            partitions.insert(transaction_state_partition(), PartitionRegistration::new((0..rf).collect()));
        }
        Controller {
            id: NodeId::Broker(CONTROLLER_ID),
            partitions,
            fenced: BTreeSet::new(),
            unclean_leader_election: config.unclean_leader_election_enable,
            mutations: config.mutations.clone(),
            brokers: topology.brokers,
            default_replication_factor: topology.replication_factor,
            placement: topology.placement,
            offsets_topic_replication_factor: config.offsets_topic_replication_factor,
        }
    }

    /// `ReplicationControlManager.createTopics`: each topic is checked (`metadata::check_new_topic`, against
    /// the live brokers), placed on the unfenced brokers as the cluster's first topics were (striping on
    /// from the partitions placed so far, as Kafka's placer spreads them over the usable brokers), registered,
    /// and told to every live broker, which creates the replicas it hosts. The forwarding broker has
    /// resolved `num.partitions` already. Per topic, in request order: its partition count or why not.
    fn create_topics(
        &mut self,
        topics: Vec<NewTopic>,
        validate_only: bool,
        effects: &mut Effects,
    ) -> Vec<(String, Result<u32, KafkaError>)> {
        let live = self.brokers - self.fenced.len() as u32;
        let mut results = Vec::new();
        let mut created = Vec::new();
        for t in topics {
            let exists = self.partitions.keys().any(|tp| tp.topic == t.name);
            let internal = t.name == GROUP_METADATA_TOPIC;
            // `offsets.topic.replication.factor` for `__consumer_offsets` (the drivers cap it by the cluster's
            // size, where Kafka would refuse to create the topic on fewer brokers).
            let default_rf =
                if internal { self.offsets_topic_replication_factor } else { self.default_replication_factor };
            let checked = crate::metadata::check_new_topic(exists, &t, 1, default_rf, live);
            if let (Ok((n, rf)), false) = (checked, validate_only) {
                for p in 0..n {
                    let tp = TopicPartition::new(&t.name, p);
                    // The internal topics are placed apart, so they shift no topic's striping; the
                    // partitions of `__consumer_offsets` stripe among themselves.
                    let placed = if internal {
                        p as usize
                    } else {
                        let user = |tp: &&TopicPartition| {
                            ![TRANSACTION_STATE_TOPIC, GROUP_METADATA_TOPIC].contains(&tp.topic.as_str())
                        };
                        self.partitions.keys().filter(user).count()
                    };
                    let replicas = self.placement.replicas(p, placed, rf, self.brokers, &self.fenced);
                    let registration = PartitionRegistration::new(replicas);
                    // Kafka's `PartitionRecord`; brokers apply it as the first change of a partition they lack.
                    self.partitions.insert(tp.clone(), registration);
                    created.push(tp);
                }
            }
            results.push((t.name, checked.map(|(n, _)| n)));
        }
        self.publish(&created, effects);
        results
    }

    /// `ReplicationControlManager.handleBrokerFenced`: the broker leaves every ISR (unless it is the last
    /// member, which stays so that it may lead again cleanly) and every partition it led gets a new leader
    /// from the live ISR (`PartitionChangeBuilder`, `electLeader`), or none. Each change bumps the
    /// partition epoch, a new leader also the leader epoch.
    pub fn broker_fenced(&mut self, broker: u32) -> Effects {
        self.fenced.insert(broker);
        let mut tps: Vec<TopicPartition> =
            self.partitions.iter().filter(|(_, r)| r.replicas.contains(&broker)).map(|(tp, _)| tp.clone()).collect();
        tps.retain(|tp| {
            let reg = &self.partitions[tp];
            let mut isr = reg.state.isr.clone();
            if isr.len() > 1 {
                isr.retain(|r| *r != broker);
            }
            let leader = if reg.state.leader == broker { None } else { Some(reg.state.leader) };
            self.change(tp, leader, isr)
        });
        let mut effects = Effects::default();
        self.publish(&tps, &mut effects);
        effects
    }

    /// `handleBrokerUnfenced`: a returning broker may lead a partition left without a leader if it is
    /// in that partition's ISR (or, with unclean election, a replica of it). It rejoins the other ISRs
    /// only by catching up, through its leaders' AlterPartition.
    pub fn broker_unfenced(&mut self, broker: u32) -> Effects {
        self.fenced.remove(&broker);
        let mut tps: Vec<TopicPartition> = self
            .partitions
            .iter()
            .filter(|(_, r)| r.state.leader == NO_LEADER && r.replicas.contains(&broker))
            .map(|(tp, _)| tp.clone())
            .collect();
        tps.retain(|tp| {
            let isr = self.partitions[tp].state.isr.clone();
            self.change(tp, None, isr)
        });
        let mut effects = Effects::default();
        self.publish(&tps, &mut effects);
        effects
    }

    /// Commits `isr` and a leader (`Some` keeps that one; `None` elects one) if anything changed. Returns
    /// whether it changed.
    fn change(&mut self, tp: &TopicPartition, keep: Option<u32>, isr: Vec<u32>) -> bool {
        let reg = &self.partitions[tp];
        let (leader, isr) = match keep {
            Some(l) => (l, isr),
            None => self.elect(reg, isr),
        };
        let reg = self.partitions.get_mut(tp).expect("a registered partition");
        if leader == reg.state.leader && isr == reg.state.isr {
            return false;
        }
        if leader != reg.state.leader {
            reg.state.leader_epoch += 1;
        }
        reg.state.leader = leader;
        reg.state.isr = isr;
        reg.state.partition_epoch += 1;
        true
    }

    /// Tells every live broker the registrations of `tps` as they now stand, as one committed batch.
    fn publish(&self, tps: &[TopicPartition], effects: &mut Effects) {
        if tps.is_empty() {
            return;
        }
        let changes = tps.iter().map(|tp| (tp.clone(), self.partitions[tp].clone())).collect();
        let record = MetadataMessage::PartitionChanges { changes };
        for b in (0..self.brokers).filter(|b| !self.fenced.contains(b)) {
            effects.send(&self.id, &NodeId::Broker(b), 0, Message::Metadata(record.clone()));
        }
    }

    /// `PartitionChangeBuilder.electLeader`: the first live ISR member in replica order; with unclean
    /// election and no such member, the first live replica, alone in the ISR; else no leader.
    fn elect(&self, reg: &PartitionRegistration, isr: Vec<u32>) -> (u32, Vec<u32>) {
        let live = |r: &&u32| !self.fenced.contains(r);
        if let Some(l) = reg.replicas.iter().filter(live).find(|r| isr.contains(r)) {
            return (*l, isr);
        }
        match reg.replicas.iter().find(live) {
            Some(l) if self.unclean_leader_election => (*l, vec![*l]),
            _ => (NO_LEADER, isr),
        }
    }

    pub fn on_message(&mut self, env: Envelope) -> Effects {
        let mut effects = Effects::default();
        let reply = match env.message {
            Message::Metadata(MetadataMessage::AlterPartitionRequest {
                broker,
                partition,
                leader_epoch,
                partition_epoch,
                new_isr,
            }) => {
                let result = self.alter_partition(broker, &partition, leader_epoch, partition_epoch, new_isr);
                if result.is_ok() && !self.mutations.has(Mutation::IsrChangeToldToLeaderOnly) {
                    // The change is a PartitionChangeRecord in the metadata log, which every broker replays
                    // (`KRaftMetadataCache`): followers' Metadata answers show the new ISR too.
                    self.publish(std::slice::from_ref(&partition), &mut effects);
                }
                MetadataMessage::AlterPartitionResponse { partition, result }
            }
            Message::Metadata(MetadataMessage::CreateTopicsRequest { topics, validate_only }) => {
                let results = self.create_topics(topics, validate_only, &mut effects);
                MetadataMessage::CreateTopicsResponse { results }
            }
            _ => return effects, // The controller serves AlterPartition and CreateTopics only.
        };
        effects.send(&self.id, &env.from, env.correlation_id, Message::Metadata(reply));
        effects
    }

    /// `ReplicationControlManager.validateAlterPartitionData`, in its order: the partition exists, the
    /// leader epoch is current, the sender leads, the partition epoch is current, the new ISR is within
    /// the replicas and keeps the leader, and names no fenced broker (KIP-841: a fetch sent before its
    /// broker died must not bring it back into the ISR).
    fn alter_partition(
        &mut self,
        broker: u32,
        tp: &TopicPartition,
        leader_epoch: i32,
        partition_epoch: i32,
        new_isr: Vec<u32>,
    ) -> Result<LeaderAndIsr, KafkaError> {
        let reg = self.partitions.get_mut(tp).ok_or(KafkaError::UnknownTopicOrPartition)?;
        if leader_epoch != reg.state.leader_epoch {
            return Err(KafkaError::FencedLeaderEpoch);
        }
        if broker != reg.state.leader {
            return Err(KafkaError::InvalidRequest);
        }
        if partition_epoch != reg.state.partition_epoch {
            return Err(KafkaError::InvalidUpdateVersion);
        }
        if !new_isr.contains(&broker) || new_isr.iter().any(|r| !reg.replicas.contains(r)) {
            return Err(KafkaError::InvalidRequest);
        }
        let fenced_member = new_isr.iter().any(|r| self.fenced.contains(r));
        if fenced_member && !self.mutations.has(Mutation::FencedReplicaJoinsIsr) {
            return Err(KafkaError::IneligibleReplica);
        }
        reg.state.isr = new_isr;
        reg.state.partition_epoch += 1;
        Ok(reg.state.clone())
    }
}
