//! What a client asks a broker about the cluster before it produces or fetches: topics created at run
//! time (CreateTopics, and Metadata's auto-creation under `auto.create.topics.enable=true`, Kafka's
//! default), topic layouts (Metadata), coordinator lookup (FindCoordinator) and the log start offset
//! (ListOffsets EARLIEST). Kafka's `KafkaApis.handleTopicMetadataRequest`, `ControllerApis.createTopics`
//! and `handleFindCoordinatorRequest`, on a single broker that leads every partition and hosts every
//! coordinator. Only the wire driver sends these; the sim, the model and the scenarios never do. Also
//! AlterPartition, which a partition leader sends the controller (`controller.rs`) to change its ISR.

use crate::controller::{LeaderAndIsr, PartitionRegistration};
use crate::error::KafkaError;
use crate::log::PartitionLog;
use crate::types::{Offset, TopicPartition};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// A bound of ours on partitions per topic, so a request cannot make the broker allocate without limit.
pub const MAX_PARTITIONS_PER_TOPIC: u32 = 1024;
/// `Topic.MAX_NAME_LENGTH`.
pub const MAX_TOPIC_NAME_LENGTH: usize = 249;

/// `FindCoordinatorRequest.key_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum CoordinatorType {
    Group,
    Transaction,
}

/// One `CreatableTopic`; `None` leaves the count to the broker (`-1` on the wire).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NewTopic {
    pub name: String,
    pub num_partitions: Option<i32>,
    pub replication_factor: Option<i16>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum MetadataMessage {
    /// `validate_only` checks without creating (`CreateTopicsRequest.validateOnly`).
    CreateTopicsRequest {
        topics: Vec<NewTopic>,
        validate_only: bool,
    },
    /// Per topic, in request order: its partition count, or why it was not created.
    CreateTopicsResponse {
        results: Vec<(String, Result<u32, KafkaError>)>,
    },
    /// `topics: None` asks for every topic.
    MetadataRequest {
        topics: Option<Vec<String>>,
        allow_auto_topic_creation: bool,
    },
    /// Per topic: its partition count, or why it has none; and each partition's leader and leader epoch
    /// as this broker's metadata cache holds them (`MetadataResponsePartition.leaderId/leaderEpoch`).
    MetadataResponse {
        topics: Vec<(String, Result<u32, KafkaError>)>,
        leaders: Vec<(TopicPartition, u32, i32)>,
    },
    FindCoordinatorRequest {
        key_type: CoordinatorType,
        keys: Vec<String>,
    },
    /// Per key: the broker id of its coordinator.
    FindCoordinatorResponse {
        coordinators: Vec<(String, Result<u32, KafkaError>)>,
    },
    /// ListOffsets with `EARLIEST_TIMESTAMP`: the log start offset (LATEST is `Message::ListOffsetsRequest`).
    EarliestOffsetRequest {
        partition: TopicPartition,
    },
    EarliestOffsetResponse {
        partition: TopicPartition,
        result: Result<Offset, KafkaError>,
    },
    /// AlterPartition (KIP-497): the ISR a leader proposes, under the leader and partition epochs it holds.
    AlterPartitionRequest {
        broker: u32,
        partition: TopicPartition,
        leader_epoch: i32,
        partition_epoch: i32,
        new_isr: Vec<u32>,
    },
    /// The state the controller committed, or why it refused.
    AlterPartitionResponse {
        partition: TopicPartition,
        result: Result<LeaderAndIsr, KafkaError>,
    },
    /// The partitions the controller created or changed (leader, ISR) in one committed batch of the
    /// metadata log (`PartitionRecord`, `PartitionChangeRecord`), as every broker applies it: whole, as one
    /// `MetadataDelta` (`ReplicaManager.applyDelta`).
    PartitionChanges {
        changes: Vec<(TopicPartition, PartitionRegistration)>,
    },
}

impl MetadataMessage {
    pub fn api_name(&self) -> &'static str {
        match self {
            MetadataMessage::CreateTopicsRequest { .. } | MetadataMessage::CreateTopicsResponse { .. } => {
                "CreateTopics"
            }
            MetadataMessage::MetadataRequest { .. } | MetadataMessage::MetadataResponse { .. } => "Metadata",
            MetadataMessage::FindCoordinatorRequest { .. } | MetadataMessage::FindCoordinatorResponse { .. } => {
                "FindCoordinator"
            }
            MetadataMessage::EarliestOffsetRequest { .. } | MetadataMessage::EarliestOffsetResponse { .. } => {
                "ListOffsets"
            }
            MetadataMessage::AlterPartitionRequest { .. } | MetadataMessage::AlterPartitionResponse { .. } => {
                "AlterPartition"
            }
            MetadataMessage::PartitionChanges { .. } => "PartitionChange",
        }
    }

    pub fn is_request(&self) -> bool {
        matches!(
            self,
            MetadataMessage::CreateTopicsRequest { .. }
                | MetadataMessage::MetadataRequest { .. }
                | MetadataMessage::FindCoordinatorRequest { .. }
                | MetadataMessage::EarliestOffsetRequest { .. }
                | MetadataMessage::AlterPartitionRequest { .. }
                // Pushed by the controller, answered by nothing.
                | MetadataMessage::PartitionChanges { .. }
        )
    }
}

fn results<T: fmt::Display>(f: &mut fmt::Formatter<'_>, rs: &[(String, Result<T, KafkaError>)]) -> fmt::Result {
    let parts: Vec<String> = rs
        .iter()
        .map(|(k, r)| match r {
            Ok(v) => format!("{k}={v}"),
            Err(e) => format!("{k} {e}"),
        })
        .collect();
    write!(f, "[{}]", parts.join(", "))
}

/// One line for timelines (`replay`'s `req`/`resp` style).
impl fmt::Display for MetadataMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let api = self.api_name();
        match self {
            MetadataMessage::CreateTopicsRequest { topics, validate_only } => {
                let names: Vec<String> = topics
                    .iter()
                    .map(|t| format!("{} x{}", t.name, t.num_partitions.map_or("default".into(), |n| n.to_string())))
                    .collect();
                write!(f, "{api} req [{}]{}", names.join(", "), if *validate_only { " validate-only" } else { "" })
            }
            MetadataMessage::MetadataRequest { topics, allow_auto_topic_creation } => write!(
                f,
                "{api} req {}{}",
                topics.as_ref().map_or("all topics".into(), |t| format!("[{}]", t.join(","))),
                if *allow_auto_topic_creation { " auto-create" } else { "" }
            ),
            MetadataMessage::FindCoordinatorRequest { key_type, keys } => {
                write!(f, "{api} req {key_type:?} [{}]", keys.join(","))
            }
            MetadataMessage::EarliestOffsetRequest { partition } => write!(f, "{api} req {partition} earliest"),
            MetadataMessage::CreateTopicsResponse { results: rs }
            | MetadataMessage::MetadataResponse { topics: rs, .. } => {
                write!(f, "{api} resp ")?;
                results(f, rs)
            }
            MetadataMessage::FindCoordinatorResponse { coordinators } => {
                write!(f, "{api} resp ")?;
                results(f, coordinators)
            }
            MetadataMessage::EarliestOffsetResponse { partition, result } => match result {
                Ok(o) => write!(f, "{api} resp {partition} earliest {o}"),
                Err(e) => write!(f, "{api} resp {partition} {e}"),
            },
            MetadataMessage::AlterPartitionRequest { partition, partition_epoch, new_isr, .. } => {
                write!(f, "{api} req {partition} isr {new_isr:?} at partition epoch {partition_epoch}")
            }
            MetadataMessage::AlterPartitionResponse { partition, result } => match result {
                Ok(s) => write!(f, "{api} resp {partition} isr {:?} partition epoch {}", s.isr, s.partition_epoch),
                Err(e) => write!(f, "{api} resp {partition} {e}"),
            },
            MetadataMessage::PartitionChanges { changes } => {
                write!(f, "{api}")?;
                for (i, (partition, r)) in changes.iter().enumerate() {
                    let leader = crate::controller::leader_name(r.state.leader);
                    let sep = if i == 0 { " " } else { "; " };
                    write!(f, "{sep}{partition} leader {leader} epoch {} isr {:?}", r.state.leader_epoch, r.state.isr)?;
                    // KIP-966's state, where there is any.
                    if !r.elr.is_empty() {
                        write!(f, " elr {:?}", r.elr)?;
                    }
                    if let [last] = r.last_known_elr[..] {
                        write!(f, " last known leader {last}")?;
                    }
                }
                Ok(())
            }
        }
    }
}

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
                        CoordinatorType::Transaction => crate::coordinator::transaction_state_partition(),
                        CoordinatorType::Group => crate::group_coordinator::offsets_partition_for(&k),
                    };
                    let result = match image.get(&tp) {
                        Some(r) if r.state.leader == crate::controller::NO_LEADER => {
                            Err(KafkaError::CoordinatorNotAvailable)
                        }
                        Some(r) => Ok(r.state.leader),
                        None if groups_replicated && key_type == CoordinatorType::Group => {
                            Err(KafkaError::CoordinatorNotAvailable)
                        }
                        None => Ok(crate::broker::COORDINATOR_BROKER),
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
        // The controller answers AlterPartition (`controller.rs`); a leader takes its answer (`ReplicaManager`).
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
