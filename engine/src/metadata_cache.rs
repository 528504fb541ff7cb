//! What a broker knows of the cluster's partitions (`KRaftMetadataCache`): the registrations the
//! controller last sent it, and the partitions it hosts. A single broker has no registrations and leads
//! every partition it has. The requests that read it from a client (Metadata, FindCoordinator) are
//! answered in `metadata.rs`; the coordinators and the produce path look partitions up here.

use crate::coordinator::PartitionLeaders;
use crate::error::KafkaError;
use crate::log::PartitionLog;
use crate::mutation::{Mutation, Mutations};
use crate::protocol::metadata::PartitionRegistration;
use crate::protocol::{NodeId, NO_LEADER};
use crate::topic::{transaction_state_partition, COORDINATOR_BROKER};
use crate::types::TopicPartition;
use std::collections::BTreeMap;

/// A broker's metadata cache as one lookup sees it.
pub struct MetadataCache<'a> {
    me: u32,
    /// The partitions this broker hosts (`ReplicaManager`'s logs).
    hosted: &'a BTreeMap<TopicPartition, PartitionLog>,
    /// Every partition's registration as the controller last told this broker; empty on a single broker.
    image: &'a BTreeMap<TopicPartition, PartitionRegistration>,
    /// Under `hosted-partitions-only`: the registrations are not consulted for a partition's existence.
    hosted_only: bool,
}

/// Partition leaders as this broker's metadata cache has them; on a single broker, itself for every
/// partition it has.
impl PartitionLeaders for MetadataCache<'_> {
    fn leader_of(&self, tp: &TopicPartition) -> Option<NodeId> {
        match self.image.get(tp) {
            Some(r) if r.state.leader == NO_LEADER => None,
            Some(r) => Some(NodeId::Broker(r.state.leader)),
            None => self.hosted.contains_key(tp).then_some(NodeId::Broker(self.me)),
        }
    }
}

impl<'a> MetadataCache<'a> {
    pub fn new(
        me: u32,
        hosted: &'a BTreeMap<TopicPartition, PartitionLog>,
        image: &'a BTreeMap<TopicPartition, PartitionRegistration>,
        mutations: &Mutations,
    ) -> Self {
        MetadataCache { me, hosted, image, hosted_only: mutations.has(Mutation::HostedPartitionsOnly) }
    }

    /// `MetadataCache.contains`: the partition exists in the cluster, whether or not this broker hosts a
    /// replica of it (the coordinators' requests name partitions led elsewhere).
    pub fn contains_partition(&self, tp: &TopicPartition) -> bool {
        self.hosted.contains_key(tp) || !self.hosted_only && self.image.contains_key(tp)
    }

    /// Whether the metadata cache has any partition of `topic`.
    pub fn contains_topic(&self, topic: &str) -> bool {
        self.image.keys().any(|tp| tp.topic == topic)
    }

    /// `ReplicaManager.getPartitionOrError` for a partition this broker hosts no replica of:
    /// NOT_LEADER_OR_FOLLOWER if it exists (the client's metadata is stale), else UNKNOWN_TOPIC_OR_PARTITION.
    pub fn not_hosted(&self, tp: &TopicPartition) -> KafkaError {
        if self.contains_partition(tp) {
            KafkaError::NotLeaderOrFollower
        } else {
            KafkaError::UnknownTopicOrPartition
        }
    }

    /// Where transactional ids are coordinated now, as this broker's metadata cache has it.
    pub fn transaction_coordinator(&self) -> Option<NodeId> {
        match self.image.get(&transaction_state_partition()) {
            Some(r) if r.state.leader == NO_LEADER => None,
            Some(r) => Some(NodeId::Broker(r.state.leader)),
            None => Some(NodeId::Broker(COORDINATOR_BROKER)),
        }
    }
}
