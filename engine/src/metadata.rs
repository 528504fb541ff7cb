//! What a client asks a broker about the cluster before it produces or fetches: topics created at run
//! time (CreateTopics, and Metadata's auto-creation under `auto.create.topics.enable=true`, Kafka's
//! default), topic layouts (Metadata), coordinator lookup (FindCoordinator) and the log start offset
//! (ListOffsets EARLIEST). Kafka's `KafkaApis.handleTopicMetadataRequest`, `ControllerApis.createTopics`
//! and `handleFindCoordinatorRequest`, on a single broker that leads every partition and hosts every
//! coordinator. Only the wire driver sends these; the sim, the model and the scenarios never do. Also
//! AlterPartition, which a partition leader sends the controller (`controller/`) to change its ISR.

use crate::error::KafkaError;
use crate::log::PartitionLog;
use crate::protocol::metadata::PartitionRegistration;
use crate::protocol::metadata::{CoordinatorType, MetadataMessage, NewTopic};
use crate::types::TopicPartition;
use std::collections::BTreeMap;

/// A bound of ours on partitions per topic, so a request cannot make the broker allocate without limit.
pub const MAX_PARTITIONS_PER_TOPIC: u32 = 1024;
/// `Topic.MAX_NAME_LENGTH`.
pub const MAX_TOPIC_NAME_LENGTH: usize = 249;

/// `Topic.validate`: 1 to 249 characters of `[a-zA-Z0-9._-]`, and not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), KafkaError> {
    let legal = name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if name.is_empty() || name.len() > MAX_TOPIC_NAME_LENGTH || name == "." || name == ".." || !legal {
        return Err(KafkaError::InvalidTopicException);
    }
    Ok(())
}

/// Partition counts per topic, from the broker's partition map.
pub fn topic_partition_counts(partitions: &BTreeMap<TopicPartition, PartitionLog>) -> BTreeMap<&str, u32> {
    let mut counts = BTreeMap::new();
    for tp in partitions.keys() {
        *counts.entry(tp.topic.as_str()).or_insert(0) += 1;
    }
    counts
}

/// The broker's answer to one metadata request; `None` for a response (the broker sends none of these).
/// `image` is the broker's metadata cache of a replicated cluster (empty on a single broker, which leads
/// every partition it has). A `controller_managed` broker creates no topic itself: the controller does
/// (`Broker` forwards CreateTopics), and a topic auto-created by Metadata is LEADER_NOT_AVAILABLE until
/// its records arrive (`AutoTopicCreationManager`).
pub fn handle(
    broker_id: u32,
    num_partitions: u32,
    partitions: &mut BTreeMap<TopicPartition, PartitionLog>,
    image: &BTreeMap<TopicPartition, PartitionRegistration>,
    (controller_managed, groups_replicated): (bool, bool),
    request: MetadataMessage,
) -> Option<MetadataMessage> {
    let reply = match request {
        MetadataMessage::CreateTopicsRequest { topics, validate_only } => {
            let mut results = Vec::new();
            for t in &topics {
                let exists = topic_partition_counts(partitions).contains_key(t.name.as_str());
                let result = check_new_topic(exists, t, num_partitions, 1, 1).map(|(n, _)| n);
                if let (Ok(n), false) = (result, validate_only) {
                    create_topic(partitions, &t.name, n);
                }
                results.push((t.name.clone(), result));
            }
            MetadataMessage::CreateTopicsResponse { results }
        }
        MetadataMessage::MetadataRequest { topics, allow_auto_topic_creation } => {
            // The topics of the metadata cache, and those this broker keeps alone (`__consumer_offsets`).
            let mut cached: BTreeMap<&str, u32> = BTreeMap::new();
            for tp in image.keys() {
                *cached.entry(tp.topic.as_str()).or_insert(0) += 1;
            }
            let mut counts = topic_partition_counts(partitions);
            counts.extend(cached);
            let names: Vec<String> = match topics {
                Some(names) => names,
                None => counts.keys().map(|t| t.to_string()).collect(),
            };
            let counts: BTreeMap<String, u32> = counts.into_iter().map(|(t, n)| (t.to_string(), n)).collect();
            let mut out = Vec::new();
            let mut leaders = Vec::new();
            for name in names {
                let result = match counts.get(&name).copied() {
                    Some(n) => Ok(n),
                    None => match validate_topic_name(&name) {
                        Err(e) => Err(e),
                        Ok(()) if allow_auto_topic_creation && controller_managed => {
                            Err(KafkaError::LeaderNotAvailable)
                        }
                        // Auto-creation, as `auto.create.topics.enable=true` does on a Metadata request.
                        Ok(()) if allow_auto_topic_creation => {
                            create_topic(partitions, &name, num_partitions);
                            Ok(num_partitions)
                        }
                        Ok(()) => Err(KafkaError::UnknownTopicOrPartition),
                    },
                };
                for p in 0..*result.as_ref().unwrap_or(&0) {
                    let tp = TopicPartition::new(&name, p);
                    let (leader, epoch) =
                        image.get(&tp).map_or((broker_id, 0), |r| (r.state.leader, r.state.leader_epoch));
                    leaders.push((tp, leader, epoch));
                }
                out.push((name, result));
            }
            MetadataMessage::MetadataResponse { topics: out, leaders }
        }
        MetadataMessage::FindCoordinatorRequest { key_type, keys } => {
            // A key's coordinator is the leader of its `__transaction_state` or `__consumer_offsets` partition
            // (COORDINATOR_NOT_AVAILABLE while it has none, or, in a cluster, while the topic does not exist
            // yet); on a single broker, broker 0.
            let coordinators = keys
                .into_iter()
                .map(|k| {
                    let tp = match key_type {
                        CoordinatorType::Transaction => crate::topic::transaction_state_partition(),
                        CoordinatorType::Group => crate::topic::offsets_partition_for(&k),
                    };
                    let result = match image.get(&tp) {
                        Some(r) if r.state.leader == crate::protocol::NO_LEADER => {
                            Err(KafkaError::CoordinatorNotAvailable)
                        }
                        Some(r) => Ok(r.state.leader),
                        None if groups_replicated && key_type == CoordinatorType::Group => {
                            Err(KafkaError::CoordinatorNotAvailable)
                        }
                        None => Ok(crate::topic::COORDINATOR_BROKER),
                    };
                    (k, result)
                })
                .collect();
            MetadataMessage::FindCoordinatorResponse { coordinators }
        }
        MetadataMessage::EarliestOffsetRequest { partition } => {
            let result = match partitions.get(&partition) {
                Some(log) => Ok(log.log_start_offset()),
                None => Err(KafkaError::UnknownTopicOrPartition),
            };
            MetadataMessage::EarliestOffsetResponse { partition, result }
        }
        // The controller answers AlterPartition (`controller/`); a leader takes its answer (`ReplicaManager`).
        MetadataMessage::CreateTopicsResponse { .. }
        | MetadataMessage::MetadataResponse { .. }
        | MetadataMessage::FindCoordinatorResponse { .. }
        | MetadataMessage::EarliestOffsetResponse { .. }
        | MetadataMessage::AlterPartitionRequest { .. }
        | MetadataMessage::AlterPartitionResponse { .. }
        | MetadataMessage::PartitionChanges { .. } => return None,
    };
    Some(reply)
}

/// `ControllerApis.createTopics`' checks: a legal new name, a partition count in bounds, and a
/// replication factor (`default.replication.factor` if none is asked) the live brokers can host.
/// Returns the partition count and the replication factor.
pub fn check_new_topic(
    exists: bool,
    t: &NewTopic,
    num_partitions: u32,
    default_replication_factor: u32,
    live_brokers: u32,
) -> Result<(u32, u32), KafkaError> {
    validate_topic_name(&t.name)?;
    if exists {
        return Err(KafkaError::TopicAlreadyExists);
    }
    let n = match t.num_partitions {
        None => num_partitions,
        Some(n) if n >= 1 && n as u32 <= MAX_PARTITIONS_PER_TOPIC => n as u32,
        Some(_) => return Err(KafkaError::InvalidPartitions),
    };
    match t.replication_factor.map_or(default_replication_factor as i32, i32::from) {
        rf if rf >= 1 && rf as u32 <= live_brokers => Ok((n, rf as u32)),
        _ => Err(KafkaError::InvalidReplicationFactor),
    }
}

fn create_topic(partitions: &mut BTreeMap<TopicPartition, PartitionLog>, name: &str, n: u32) {
    for p in 0..n {
        let previous = partitions.insert(TopicPartition::new(name, p), PartitionLog::new());
        assert!(previous.is_none(), "{name}/{p} created twice");
    }
}
