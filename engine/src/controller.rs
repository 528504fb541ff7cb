//! The controller stand-in: KRaft's `QuorumController` reduced to what partition replication needs in
//! this phase. It places replicas when the cluster starts, holds each partition's registration (replicas,
//! leader, leader epoch, ISR, partition epoch) and commits the ISR changes leaders ask for with
//! AlterPartition (KIP-497; `ReplicationControlManager.alterPartition`). It is one node with its own id,
//! not a quorum, and it never fails; leader election is not modelled yet.

use crate::error::KafkaError;
use crate::metadata::MetadataMessage;
use crate::protocol::{Effects, Envelope, Message, NodeId};
use crate::types::TopicPartition;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The controller's node id: KRaft controllers share the broker id space, and no broker uses this one.
pub const CONTROLLER_ID: u32 = 3000;

/// The most brokers a cluster here may have.
pub const MAX_BROKERS: u32 = 5;

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

/// How many brokers the cluster has and each topic's replication factor (capped by the broker count).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    pub brokers: u32,
    pub replication_factor: u32,
    /// Topics whose replication factor differs from `replication_factor`.
    pub per_topic: BTreeMap<String, u32>,
}

impl Topology {
    /// One broker, every partition a single replica: the engine as it was before replication.
    pub fn single() -> Self {
        Topology::new(1, 1)
    }

    pub fn new(brokers: u32, replication_factor: u32) -> Self {
        Topology { brokers, replication_factor, per_topic: BTreeMap::new() }
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
        Ok(())
    }

    pub fn replication_factor_of(&self, topic: &str) -> u32 {
        self.per_topic.get(topic).copied().unwrap_or(self.replication_factor).min(self.brokers)
    }

    /// Where each partition's replicas go. Broker 0 leads every partition (as a manual replica assignment
    /// may place them; clients here bootstrap to broker 0 and have no metadata refresh yet), and the
    /// followers of partition `p` are the next brokers from `1 + p`, round the others (Kafka's striped
    /// placement, without its random start).
    pub fn assignment(&self, topics: &BTreeMap<String, u32>) -> BTreeMap<TopicPartition, Vec<u32>> {
        let mut out = BTreeMap::new();
        for (topic, partitions) in topics {
            let rf = self.replication_factor_of(topic);
            for p in 0..*partitions {
                let followers = (0..rf.saturating_sub(1)).map(|k| 1 + (p + k) % (self.brokers - 1));
                let replicas: Vec<u32> = std::iter::once(0).chain(followers).collect();
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
}

impl Controller {
    /// Registers every partition with its whole assignment in the ISR (a new topic's replicas are in
    /// sync: they are all empty), the first replica leading at epoch 0.
    pub fn new(topics: &BTreeMap<String, u32>, topology: &Topology) -> Self {
        let partitions = topology
            .assignment(topics)
            .into_iter()
            .map(|(tp, replicas)| {
                let state =
                    LeaderAndIsr { leader: replicas[0], leader_epoch: 0, isr: replicas.clone(), partition_epoch: 0 };
                (tp, PartitionRegistration { replicas, state })
            })
            .collect();
        Controller { id: NodeId::Broker(CONTROLLER_ID), partitions }
    }

    pub fn on_message(&mut self, env: Envelope) -> Effects {
        let mut effects = Effects::default();
        let Message::Metadata(MetadataMessage::AlterPartitionRequest {
            broker,
            partition,
            leader_epoch,
            partition_epoch,
            new_isr,
        }) = env.message
        else {
            return effects; // The controller serves AlterPartition only.
        };
        let result = self.alter_partition(broker, &partition, leader_epoch, partition_epoch, new_isr);
        let reply = Message::Metadata(MetadataMessage::AlterPartitionResponse { partition, result });
        effects.send(&self.id, &env.from, env.correlation_id, reply);
        effects
    }

    /// `ReplicationControlManager.alterPartition`'s checks: the partition exists, the sender is its leader
    /// at the current leader epoch, the partition epoch is current, and the new ISR is within the replicas
    /// and keeps the leader.
    fn alter_partition(
        &mut self,
        broker: u32,
        tp: &TopicPartition,
        leader_epoch: i32,
        partition_epoch: i32,
        new_isr: Vec<u32>,
    ) -> Result<LeaderAndIsr, KafkaError> {
        let reg = self.partitions.get_mut(tp).ok_or(KafkaError::UnknownTopicOrPartition)?;
        if broker != reg.state.leader {
            return Err(KafkaError::NotLeaderOrFollower);
        }
        if leader_epoch != reg.state.leader_epoch {
            return Err(KafkaError::FencedLeaderEpoch);
        }
        if partition_epoch != reg.state.partition_epoch {
            return Err(KafkaError::InvalidUpdateVersion);
        }
        if !new_isr.contains(&broker) || new_isr.iter().any(|r| !reg.replicas.contains(r)) {
            return Err(KafkaError::InvalidRequest);
        }
        reg.state.isr = new_isr;
        reg.state.partition_epoch += 1;
        Ok(reg.state.clone())
    }
}
