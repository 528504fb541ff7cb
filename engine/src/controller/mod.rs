//! The controller stand-in: KRaft's `QuorumController` reduced to what partition replication needs in
//! this phase. It places replicas when the cluster starts and when a topic is created at run time (a
//! broker forwards CreateTopics to it, as KRaft brokers do), holds each partition's registration (replicas,
//! leader, leader epoch, ISR, partition epoch), commits the ISR changes leaders ask for with
//! AlterPartition (KIP-497; `ReplicationControlManager.alterPartition`), and elects a new leader when a
//! broker is fenced (`handleBrokerFenced`) or comes back to a partition left without one
//! (`handleBrokerUnfenced`), telling every live broker each event's records as one metadata delta. It is one node with
//! its own id, not a quorum, and it never fails.
//! Its `ReplicationControlManager`, `PartitionChangeBuilder` and replica placer are a file each here.

mod partition_change_builder;
mod replica_placer;
mod replication_control_manager;

use crate::config::EngineConfig;
use crate::error::KafkaError;
use crate::mutation::{Mutation, Mutations};
use crate::protocol::metadata::PartitionRegistration;
use crate::protocol::metadata::{MetadataMessage, NewTopic};
use crate::protocol::{Effects, Envelope, Message, NodeId};
use crate::protocol::{CONTROLLER_ID, NO_LEADER};
use crate::topic::GROUP_METADATA_TOPIC;
use crate::topic::{transaction_state_partition, TRANSACTION_STATE_TOPIC};
use crate::types::TopicPartition;
use std::collections::{BTreeMap, BTreeSet};

pub use replica_placer::{Placement, Topology};

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
}
