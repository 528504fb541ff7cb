//! The controller stand-in: KRaft's `QuorumController` reduced to what partition replication needs in
//! this phase. It places replicas when the cluster starts and when a topic is created at run time (a
//! broker forwards CreateTopics to it, as KRaft brokers do), holds each partition's registration (replicas,
//! leader, leader epoch, ISR, partition epoch), commits the ISR changes leaders ask for with
//! AlterPartition (KIP-497; `ReplicationControlManager.alterPartition`), and elects a new leader when a
//! broker is fenced (`handleBrokerFenced`) or comes back to a partition left without one
//! (`handleBrokerUnfenced`), telling every live broker each event's records as one metadata delta. It is one node with
//! its own id, not a quorum, and it never fails.

use crate::config::EngineConfig;
use crate::error::KafkaError;
use crate::mutation::{Mutation, Mutations};
use crate::protocol::metadata::{LeaderAndIsr, PartitionRegistration};
use crate::protocol::metadata::{MetadataMessage, NewTopic};
use crate::protocol::{Effects, Envelope, Message, NodeId};
use crate::protocol::{CONTROLLER_ID, MAX_BROKERS, NO_LEADER};
use crate::topic::GROUP_METADATA_TOPIC;
use crate::topic::{transaction_state_partition, TRANSACTION_STATE_LOG_REPLICATION_FACTOR, TRANSACTION_STATE_TOPIC};
use crate::types::TopicPartition;
use std::collections::{BTreeMap, BTreeSet};

/// What a partition change asks of `PartitionChangeBuilder`: the target ISR, who may lead, and a broker
/// that shut down uncleanly (it leaves the ELR).
struct ChangeRequest<'a> {
    target_isr: Vec<u32>,
    acceptable: &'a dyn Fn(u32) -> bool,
    unclean_shutdown: Option<u32>,
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
    /// `eligible.leader.replicas.version` 1 (KIP-966; the default of a cluster formatted by Kafka 4.1 and
    /// later): the ISR may empty, and the ELR and the last known leader are kept and electable.
    pub eligible_leader_replicas: bool,
    /// `min.insync.replicas` of the user topics and `__consumer_offsets`, and of `__transaction_state`
    /// (`transaction.state.log.min.isr`): below it a shrinking ISR's members go to the ELR.
    min_insync_replicas: (u32, u32),
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
            eligible_leader_replicas: config.eligible_leader_replicas,
            min_insync_replicas: (config.min_insync_replicas, config.transaction_state_log_min_isr),
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

    /// `ReplicationControlManager.handleBrokerFenced`: every partition with the broker in its ISR is
    /// changed to the ISR without it (`generateLeaderAndIsrUpdates`), and a partition it led gets a new
    /// leader (`PartitionChangeBuilder`), or none. Without ELR the last ISR member stays in the ISR, so
    /// that it may lead again cleanly; with ELR the ISR may empty and its members move to the ELR.
    pub fn broker_fenced(&mut self, broker: u32) -> Effects {
        self.fenced.insert(broker);
        let fenced = self.fenced.clone();
        let acceptable = move |r: u32| r != broker && !fenced.contains(&r);
        let tps = self.partitions_where(|r| r.state.isr.contains(&broker));
        self.generate_updates(tps, Some(broker), None, &acceptable)
    }

    /// A crashed broker starts again: it registers (`ClusterControlManager.registerBroker`: every crash
    /// here is an unclean shutdown), and once it has caught up with the metadata it is unfenced.
    pub fn broker_restarted(&mut self, broker: u32) -> Effects {
        let mut effects = self.broker_registered(broker);
        effects.extend(self.broker_unfenced(broker));
        effects
    }

    /// `handleBrokerUnfenced`: every partition without a leader elects again, the broker now acceptable.
    /// It rejoins the ISRs only by catching up, through its leaders' AlterPartition.
    pub fn broker_unfenced(&mut self, broker: u32) -> Effects {
        self.fenced.remove(&broker);
        let fenced = self.fenced.clone();
        let acceptable = move |r: u32| !fenced.contains(&r);
        let tps = self.partitions_where(|r| r.state.leader == NO_LEADER);
        self.generate_updates(tps, None, None, &acceptable)
    }

    /// `handleBrokerShutdown` for a broker registering after an unclean shutdown, while it is still
    /// fenced: with ELR, out of every ISR and ELR it is in (so a replica that may have lost its unflushed
    /// tail is never elected from the ELR); without, as a fence.
    pub fn broker_registered(&mut self, broker: u32) -> Effects {
        let fenced = self.fenced.clone();
        let acceptable = move |r: u32| r != broker && !fenced.contains(&r);
        if self.eligible_leader_replicas && !self.mutations.has(Mutation::UncleanShutdownStaysInElr) {
            let tps = self.partitions_where(|r| r.state.isr.contains(&broker) || r.elr.contains(&broker));
            self.generate_updates(tps, None, Some(broker), &acceptable)
        } else {
            let tps = self.partitions_where(|r| r.state.isr.contains(&broker));
            self.generate_updates(tps, Some(broker), None, &acceptable)
        }
    }

    fn partitions_where(&self, pick: impl Fn(&PartitionRegistration) -> bool) -> Vec<TopicPartition> {
        self.partitions.iter().filter(|(_, r)| pick(r)).map(|(tp, _)| tp.clone()).collect()
    }

    /// `generateLeaderAndIsrUpdates`: each partition's target ISR is its ISR without `remove` and
    /// `unclean_shutdown`; the changes are committed and told to every live broker as one delta.
    fn generate_updates(
        &mut self,
        mut tps: Vec<TopicPartition>,
        remove: Option<u32>,
        unclean_shutdown: Option<u32>,
        acceptable: &dyn Fn(u32) -> bool,
    ) -> Effects {
        tps.retain(|tp| {
            let gone = [remove, unclean_shutdown];
            let target_isr =
                self.partitions[tp].state.isr.iter().copied().filter(|r| !gone.contains(&Some(*r))).collect();
            self.change(tp, ChangeRequest { target_isr, acceptable, unclean_shutdown })
        });
        let mut effects = Effects::default();
        self.publish(&tps, &mut effects);
        effects
    }

    /// `getTopicEffectiveMinIsr`: the partition's `min.insync.replicas`, capped by its replication factor.
    fn effective_min_isr(&self, tp: &TopicPartition) -> usize {
        let (user, transactions) = self.min_insync_replicas;
        let min_isr = if tp.topic == TRANSACTION_STATE_TOPIC { transactions } else { user };
        (min_isr as usize).min(self.partitions[tp].replicas.len())
    }

    /// `PartitionChangeBuilder.build` without reassignments: the ELR kept (`maybePopulateTargetElr`), a
    /// leader elected (`tryElection`), the ELR, ISR and last known leader written, and the change
    /// committed if anything changed (a new leader bumps the leader epoch, any change the partition
    /// epoch). Returns whether it changed.
    fn change(&mut self, tp: &TopicPartition, request: ChangeRequest<'_>) -> bool {
        let elr_enabled = self.eligible_leader_replicas;
        let min_isr = self.effective_min_isr(tp);
        let reg = &self.partitions[tp];
        let mut isr = request.target_isr;
        let mut elr = reg.elr.clone();
        if elr_enabled {
            elr = Self::target_elr(reg, &isr, &elr, min_isr, request.unclean_shutdown, &self.mutations);
        }
        let (leader, unclean) = self.elect(reg, &isr, &elr, request.acceptable);
        let leader_changed = leader != reg.state.leader;
        let mut isr_written = None;
        if leader_changed {
            if elr.contains(&leader) {
                isr = vec![leader];
                elr.retain(|r| *r != leader);
            }
            if unclean {
                // The new leader alone in the ISR: what only the others held is lost.
                isr_written = Some(vec![leader]);
            }
        }
        if isr_written.is_some() || !elr_enabled {
            elr.clear(); // `maybeUpdateRecordElr`: an unclean election or ELR off keeps none.
        }
        let isr = match isr_written {
            Some(isr) => isr,
            // Without ELR an empty ISR is never written: the last member stays.
            None if isr.is_empty() && !elr_enabled => reg.state.isr.clone(),
            None => isr,
        };
        let mut last_known_elr = reg.last_known_elr.clone();
        if elr_enabled {
            // `maybeUpdateLastKnownLeader`: set when the partition first becomes leaderless, cleared once
            // it has a leader again.
            if leader_changed && leader == NO_LEADER && last_known_elr.is_empty() {
                last_known_elr = vec![reg.state.leader];
            } else if leader_changed && leader != NO_LEADER {
                last_known_elr.clear();
            }
        }
        let reg = self.partitions.get_mut(tp).expect("a registered partition");
        if !leader_changed && isr == reg.state.isr && elr == reg.elr && last_known_elr == reg.last_known_elr {
            return false;
        }
        if leader_changed {
            reg.state.leader_epoch += 1;
        }
        reg.state.leader = leader;
        reg.state.isr = isr;
        reg.elr = elr;
        reg.last_known_elr = last_known_elr;
        reg.state.partition_epoch += 1;
        true
    }

    /// `maybePopulateTargetElr`: at or above `min.insync.replicas` the ISR needs no ELR; below it, the
    /// members leaving the ISR join the ELR, except one that shut down uncleanly.
    fn target_elr(
        reg: &PartitionRegistration,
        target_isr: &[u32],
        elr: &[u32],
        min_isr: usize,
        unclean_shutdown: Option<u32>,
        mutations: &Mutations,
    ) -> Vec<u32> {
        if target_isr.len() >= min_isr {
            return Vec::new();
        }
        if mutations.has(Mutation::ElrNotKept) {
            return elr.to_vec();
        }
        let candidates: BTreeSet<u32> = elr.iter().chain(&reg.state.isr).copied().collect();
        candidates.into_iter().filter(|r| !target_isr.contains(r) && Some(*r) != unclean_shutdown).collect()
    }

    /// `PartitionChangeBuilder.electAnyLeader`: the current leader if it may still lead; else the first
    /// replica in order that is in the ISR, or in the ELR when the ISR is empty, and acceptable (alive);
    /// else the last known leader when the ISR and ELR are empty (an unclean election); else, with
    /// unclean election on, the first acceptable replica (unclean); else none. Returns (leader, unclean).
    fn elect(
        &self,
        reg: &PartitionRegistration,
        isr: &[u32],
        elr: &[u32],
        acceptable: &dyn Fn(u32) -> bool,
    ) -> (u32, bool) {
        let elr_electable = !self.mutations.has(Mutation::ElrMemberNotElected);
        let valid =
            |r: u32| (isr.contains(&r) || (elr_electable && isr.is_empty() && elr.contains(&r))) && acceptable(r);
        if reg.state.leader != NO_LEADER && valid(reg.state.leader) {
            return (reg.state.leader, false);
        }
        if let Some(l) = reg.replicas.iter().copied().find(|r| valid(*r)) {
            return (l, false);
        }
        let last_known = self.eligible_leader_replicas
            && !self.mutations.has(Mutation::LastKnownLeaderNotElected)
            && isr.is_empty()
            && elr.is_empty()
            && reg.last_known_elr.len() == 1
            && acceptable(reg.last_known_elr[0]);
        if last_known {
            return (reg.last_known_elr[0], true);
        }
        match reg.replicas.iter().copied().find(|r| acceptable(*r)) {
            Some(l) if self.unclean_leader_election => (l, true),
            _ => (NO_LEADER, false),
        }
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
        let reg = self.partitions.get(tp).ok_or(KafkaError::UnknownTopicOrPartition)?;
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
        // Through `PartitionChangeBuilder`, so that a shrink below `min.insync.replicas` keeps the ELR
        // and a growth back to it clears the ELR.
        let fenced = self.fenced.clone();
        let acceptable = move |r: u32| !fenced.contains(&r);
        self.change(tp, ChangeRequest { target_isr: new_isr, acceptable: &acceptable, unclean_shutdown: None });
        Ok(self.partitions[tp].state.clone())
    }
}
