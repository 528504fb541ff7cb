//! The cluster metadata messages (CreateTopics, Metadata, FindCoordinator, ListOffsets EARLIEST,
//! AlterPartition, and the controller's partition changes) and the registrations they carry: a leaf, so
//! that the controller, the metadata handler and the replica manager need not import each other.

use crate::error::KafkaError;
use crate::types::{Offset, TopicPartition};
use serde::{Deserialize, Serialize};
use std::fmt;

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
    /// KIP-966's eligible leader replicas, ascending: members that left the ISR while it was below
    /// `min.insync.replicas` (so the HW stood still and they hold everything committed) and that have
    /// not shut down uncleanly since; electable when the ISR is empty.
    pub elr: Vec<u32>,
    /// `lastKnownElr` as Kafka 4.3 keeps it (`useLastKnownLeaderInBalancedRecovery`): the leader the
    /// partition had when it last became leaderless, electable (uncleanly) once the ISR and ELR are empty.
    pub last_known_elr: Vec<u32>,
}

impl PartitionRegistration {
    /// A new partition: its whole assignment in the ISR (the replicas are all empty), the first leading
    /// at epoch 0.
    pub(crate) fn new(replicas: Vec<u32>) -> Self {
        let state = LeaderAndIsr { leader: replicas[0], leader_epoch: 0, isr: replicas.clone(), partition_epoch: 0 };
        PartitionRegistration { replicas, state, elr: Vec::new(), last_known_elr: Vec::new() }
    }
}

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
                    let leader = super::leader_name(r.state.leader);
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
