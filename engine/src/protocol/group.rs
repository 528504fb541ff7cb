//! The group coordinator's messages (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
//! TxnOffsetCommit, OffsetFetch) and the types they carry: a leaf, so that the modules that handle them and
//! the ones that route them need not import each other.

use crate::error::KafkaError;
use crate::types::*;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A committed offset with its metadata string.
pub type CommittedOffset = (i64, Option<String>);

/// What a completed join tells a member; `members` (id, protocol metadata) only for the leader.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct JoinResult {
    pub generation_id: i32,
    pub protocol_name: String,
    pub leader: String,
    pub members: Vec<(String, Vec<u8>)>,
}

/// A JoinGroup's parameters. `member_id` is empty for a new member; `protocols` are (name, metadata) in
/// the member's preference; `require_known_member_id` (JoinGroup v4+, KIP-394): a new member first gets
/// MEMBER_ID_REQUIRED with its id and must join again with it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct JoinRequest {
    pub member_id: String,
    pub require_known_member_id: bool,
    pub protocol_type: String,
    pub protocols: Vec<(String, Vec<u8>)>,
    pub session_timeout_ms: TimeMs,
    pub rebalance_timeout_ms: TimeMs,
}

/// One partition's answer to an OffsetFetch: its committed offset, if any, or its error.
pub type PartitionOffset = (TopicPartition, Result<Option<CommittedOffset>, KafkaError>);

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum GroupMessage {
    JoinGroupRequest {
        group_id: String,
        join: JoinRequest,
    },
    /// `member_id` is the asker's (new, under MEMBER_ID_REQUIRED).
    JoinGroupResponse {
        member_id: String,
        result: Result<JoinResult, KafkaError>,
    },
    /// `assignments` come from the leader: (member id, assignment).
    SyncGroupRequest {
        group_id: String,
        generation_id: i32,
        member_id: String,
        assignments: Vec<(String, Vec<u8>)>,
    },
    /// The protocol name and this member's assignment.
    SyncGroupResponse {
        result: Result<(String, Vec<u8>), KafkaError>,
    },
    HeartbeatRequest {
        group_id: String,
        generation_id: i32,
        member_id: String,
    },
    HeartbeatResponse {
        result: Result<(), KafkaError>,
    },
    LeaveGroupRequest {
        group_id: String,
        member_ids: Vec<String>,
    },
    LeaveGroupResponse {
        results: Vec<(String, Result<(), KafkaError>)>,
    },
    /// `generation_id < 0` with an empty member id is a commit from outside the group protocol
    /// (`assign()` consumers), allowed while the group has no members.
    OffsetCommitRequest {
        group_id: String,
        generation_id: i32,
        member_id: String,
        offsets: Vec<(TopicPartition, CommittedOffset)>,
    },
    OffsetCommitResponse {
        results: Vec<(TopicPartition, Result<(), KafkaError>)>,
    },
    /// `partitions: None` asks for every committed offset of the group. `require_stable` (OffsetFetch v7+,
    /// KIP-447): a partition with a transaction's offset pending answers UNSTABLE_OFFSET_COMMIT.
    OffsetFetchRequest {
        group_id: String,
        partitions: Option<Vec<TopicPartition>>,
        require_stable: bool,
    },
    /// `Ok(None)` for a partition with no committed offset; a group-level error (NOT_COORDINATOR) for all.
    OffsetFetchResponse {
        offsets: Result<Vec<PartitionOffset>, KafkaError>,
    },
    /// TxnOffsetCommit (KIP-98): offsets of the producer's transaction; `generation_id`/`member_id` are
    /// KIP-447's consumer group metadata (-1 and empty from a producer that does not give them).
    TxnOffsetCommitRequest {
        transactional_id: String,
        group_id: String,
        producer: ProducerIdAndEpoch,
        generation_id: i32,
        member_id: String,
        offsets: Vec<(TopicPartition, CommittedOffset)>,
        /// TxnOffsetCommit v5+ is TV2: the group's broker adds the offsets partition to the transaction
        /// (`TransactionSupportedOperation.addPartition`, KIP-890 part 2); older versions only verify it.
        transaction_version: TransactionVersion,
    },
    TxnOffsetCommitResponse {
        results: Vec<(TopicPartition, Result<(), KafkaError>)>,
    },
    /// The broker to its own group coordinator: the metadata record of `generation`, written for its
    /// leader's SyncGroup, is replicated, or its append failed.
    GroupStored {
        group_id: String,
        generation: i32,
        result: Result<(), KafkaError>,
    },
}

impl GroupMessage {
    pub fn api_name(&self) -> &'static str {
        match self {
            GroupMessage::JoinGroupRequest { .. } | GroupMessage::JoinGroupResponse { .. } => "JoinGroup",
            GroupMessage::SyncGroupRequest { .. } | GroupMessage::SyncGroupResponse { .. } => "SyncGroup",
            GroupMessage::HeartbeatRequest { .. } | GroupMessage::HeartbeatResponse { .. } => "Heartbeat",
            GroupMessage::LeaveGroupRequest { .. } | GroupMessage::LeaveGroupResponse { .. } => "LeaveGroup",
            GroupMessage::OffsetCommitRequest { .. } | GroupMessage::OffsetCommitResponse { .. } => "OffsetCommit",
            GroupMessage::OffsetFetchRequest { .. } | GroupMessage::OffsetFetchResponse { .. } => "OffsetFetch",
            GroupMessage::TxnOffsetCommitRequest { .. } | GroupMessage::TxnOffsetCommitResponse { .. } => {
                "TxnOffsetCommit"
            }
            GroupMessage::GroupStored { .. } => "GroupStored",
        }
    }

    /// The group a request is for.
    pub fn group_id(&self) -> Option<&str> {
        match self {
            GroupMessage::JoinGroupRequest { group_id, .. }
            | GroupMessage::SyncGroupRequest { group_id, .. }
            | GroupMessage::HeartbeatRequest { group_id, .. }
            | GroupMessage::LeaveGroupRequest { group_id, .. }
            | GroupMessage::OffsetCommitRequest { group_id, .. }
            | GroupMessage::OffsetFetchRequest { group_id, .. }
            | GroupMessage::TxnOffsetCommitRequest { group_id, .. }
            | GroupMessage::GroupStored { group_id, .. } => Some(group_id),
            _ => None,
        }
    }

    /// An offset commit's answer when its record could not be written, or a stable OffsetFetch's when the HW
    /// did not reach what it read: the write's error as the coordinator answers it, which a client retries.
    pub fn failed_write(self, e: KafkaError) -> GroupMessage {
        let e = e.for_coordinator_append();
        let fail = |results: Vec<(TopicPartition, Result<(), KafkaError>)>| {
            results.into_iter().map(|(tp, r)| (tp, r.and(Err(e)))).collect()
        };
        match self {
            GroupMessage::OffsetCommitResponse { results } => {
                GroupMessage::OffsetCommitResponse { results: fail(results) }
            }
            GroupMessage::TxnOffsetCommitResponse { results } => {
                GroupMessage::TxnOffsetCommitResponse { results: fail(results) }
            }
            GroupMessage::OffsetFetchResponse { .. } => GroupMessage::OffsetFetchResponse { offsets: Err(e) },
            other => unreachable!("only offset commits and stable fetches wait for the HW, not {other:?}"),
        }
    }

    /// A request's answer with `error` in every place it has one (`AbstractRequest.getErrorResponse`);
    /// `None` for the answers and the broker's own `GroupStored`.
    pub fn error_response(&self, error: KafkaError) -> Option<GroupMessage> {
        let per_partition = |offsets: &[(TopicPartition, CommittedOffset)]| {
            offsets.iter().map(|(tp, _)| (tp.clone(), Err(error))).collect()
        };
        Some(match self {
            GroupMessage::JoinGroupRequest { join, .. } => {
                GroupMessage::JoinGroupResponse { member_id: join.member_id.clone(), result: Err(error) }
            }
            GroupMessage::SyncGroupRequest { .. } => GroupMessage::SyncGroupResponse { result: Err(error) },
            GroupMessage::HeartbeatRequest { .. } => GroupMessage::HeartbeatResponse { result: Err(error) },
            GroupMessage::LeaveGroupRequest { member_ids, .. } => GroupMessage::LeaveGroupResponse {
                results: member_ids.iter().map(|m| (m.clone(), Err(error))).collect(),
            },
            GroupMessage::OffsetCommitRequest { offsets, .. } => {
                GroupMessage::OffsetCommitResponse { results: per_partition(offsets) }
            }
            GroupMessage::TxnOffsetCommitRequest { offsets, .. } => {
                GroupMessage::TxnOffsetCommitResponse { results: per_partition(offsets) }
            }
            GroupMessage::OffsetFetchRequest { .. } => GroupMessage::OffsetFetchResponse { offsets: Err(error) },
            _ => return None,
        })
    }

    pub fn is_request(&self) -> bool {
        matches!(
            self,
            GroupMessage::JoinGroupRequest { .. }
                | GroupMessage::SyncGroupRequest { .. }
                | GroupMessage::HeartbeatRequest { .. }
                | GroupMessage::LeaveGroupRequest { .. }
                | GroupMessage::OffsetCommitRequest { .. }
                | GroupMessage::OffsetFetchRequest { .. }
                | GroupMessage::TxnOffsetCommitRequest { .. }
        )
    }
}

fn unit(r: &Result<(), KafkaError>) -> String {
    r.map_or_else(|e| e.name().to_string(), |()| "ok".to_string())
}

/// One line for timelines.
impl fmt::Display for GroupMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let api = self.api_name();
        match self {
            GroupMessage::JoinGroupRequest { group_id, join } => {
                let names: Vec<&str> = join.protocols.iter().map(|(n, _)| n.as_str()).collect();
                write!(f, "{api} req {group_id} member '{}' [{}]", join.member_id, names.join(","))
            }
            GroupMessage::JoinGroupResponse { member_id, result: Ok(j) } => write!(
                f,
                "{api} resp gen {} {} leader {} member {member_id} ({} members listed)",
                j.generation_id,
                j.protocol_name,
                j.leader,
                j.members.len()
            ),
            GroupMessage::JoinGroupResponse { member_id, result: Err(e) } => {
                write!(f, "{api} resp {e} member '{member_id}'")
            }
            GroupMessage::SyncGroupRequest { group_id, generation_id, member_id, assignments } => write!(
                f,
                "{api} req {group_id} gen {generation_id} member {member_id} ({} assignments)",
                assignments.len()
            ),
            GroupMessage::SyncGroupResponse { result } => match result {
                Ok((p, a)) => write!(f, "{api} resp {p} ({} bytes)", a.len()),
                Err(e) => write!(f, "{api} resp {e}"),
            },
            GroupMessage::HeartbeatRequest { group_id, generation_id, member_id } => {
                write!(f, "{api} req {group_id} gen {generation_id} member {member_id}")
            }
            GroupMessage::HeartbeatResponse { result } => write!(f, "{api} resp {}", unit(result)),
            GroupMessage::LeaveGroupRequest { group_id, member_ids } => {
                write!(f, "{api} req {group_id} [{}]", member_ids.join(","))
            }
            GroupMessage::LeaveGroupResponse { results } => {
                let parts: Vec<String> = results.iter().map(|(m, r)| format!("{m} {}", unit(r))).collect();
                write!(f, "{api} resp [{}]", parts.join(", "))
            }
            GroupMessage::OffsetCommitRequest { group_id, offsets, .. } => {
                let parts: Vec<String> = offsets.iter().map(|(tp, (o, _))| format!("{tp}@{o}")).collect();
                write!(f, "{api} req {group_id} [{}]", parts.join(", "))
            }
            GroupMessage::TxnOffsetCommitRequest { group_id, producer, offsets, .. } => {
                let parts: Vec<String> = offsets.iter().map(|(tp, (o, _))| format!("{tp}@{o}")).collect();
                write!(
                    f,
                    "{api} req {group_id} pid {} epoch {} [{}]",
                    producer.producer_id,
                    producer.epoch,
                    parts.join(", ")
                )
            }
            GroupMessage::OffsetCommitResponse { results } | GroupMessage::TxnOffsetCommitResponse { results } => {
                let parts: Vec<String> = results.iter().map(|(tp, r)| format!("{tp} {}", unit(r))).collect();
                write!(f, "{api} resp [{}]", parts.join(", "))
            }
            GroupMessage::OffsetFetchRequest { group_id, partitions, require_stable } => write!(
                f,
                "{api} req {group_id} {}{}",
                partitions.as_ref().map_or("all".into(), |p| p
                    .iter()
                    .map(|tp| tp.to_string())
                    .collect::<Vec<_>>()
                    .join(",")),
                if *require_stable { " require_stable" } else { "" },
            ),
            GroupMessage::GroupStored { group_id, generation, result } => {
                write!(f, "{api} {group_id} gen {generation} {}", unit(result))
            }
            GroupMessage::OffsetFetchResponse { offsets: Err(e) } => write!(f, "{api} resp {e}"),
            GroupMessage::OffsetFetchResponse { offsets: Ok(offsets) } => {
                let parts: Vec<String> = offsets
                    .iter()
                    .map(|(tp, o)| match o {
                        Ok(o) => format!("{tp}@{}", o.as_ref().map_or("none".into(), |(o, _)| o.to_string())),
                        Err(e) => format!("{tp} {e}"),
                    })
                    .collect();
                write!(f, "{api} resp [{}]", parts.join(", "))
            }
        }
    }
}
