//! Kafka's internal topics (`Topic`) and where they live: their names, partition counts and replication
//! factors, the partition a transactional id or group maps to, and the broker that hosts the coordinators
//! on a single broker. A leaf: the coordinators, the controller and the metadata handler all name these.

use crate::types::TopicPartition;

/// `Topic.TRANSACTION_STATE_TOPIC_NAME`. A replicated cluster has one partition of it (Kafka's
/// `transaction.state.log.num.partitions` is 50), whose leader coordinates every transactional id.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";
/// `transaction.state.log.replication.factor` (default 3), capped by the broker count.
pub const TRANSACTION_STATE_LOG_REPLICATION_FACTOR: u32 = 3;

/// The `__transaction_state` partition every transactional id maps to (`partitionFor`).
pub fn transaction_state_partition() -> TopicPartition {
    TopicPartition::new(TRANSACTION_STATE_TOPIC, 0)
}

/// `Topic.GROUP_METADATA_TOPIC_NAME`.
pub const GROUP_METADATA_TOPIC: &str = "__consumer_offsets";
/// `offsets.topic.num.partitions` (Kafka's default).
pub const OFFSETS_TOPIC_NUM_PARTITIONS: u32 = 50;
/// `offsets.topic.replication.factor` (Kafka's default).
pub const OFFSETS_TOPIC_REPLICATION_FACTOR: u32 = 3;

/// The `__consumer_offsets` partition of a group (`GroupCoordinatorService.partitionFor`: the absolute
/// value of Java's `String.hashCode` of the id, modulo the partition count; `Utils.abs` maps MIN to 0).
pub fn offsets_partition_for(group_id: &str) -> TopicPartition {
    let hash = group_id.encode_utf16().fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32));
    let abs = if hash == i32::MIN { 0 } else { hash.unsigned_abs() };
    TopicPartition::new(GROUP_METADATA_TOPIC, abs % OFFSETS_TOPIC_NUM_PARTITIONS)
}

/// The broker of a single-broker cluster, which coordinates every transactional id and group (in a
/// replicated cluster the coordinators move with their partitions' leadership).
pub const COORDINATOR_BROKER: u32 = 0;
