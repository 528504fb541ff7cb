//! The classic group protocol's requests and responses, between the wire and the engine's
//! `GroupCoordinator`, in every version the server advertises.

use bytes::Bytes;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::offset_fetch_response::{OffsetFetchResponsePartition, OffsetFetchResponseTopic};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use std::collections::BTreeMap;
use txnsim_engine::protocol::group::{GroupMessage, JoinRequest};
use txnsim_engine::{KafkaError, TimeMs, TopicPartition};

use crate::api::code;

fn timeout_ms(ms: i32) -> TimeMs {
    ms.max(0) as TimeMs
}

/// A wire group request as the engine's message, or (for what the engine does not model) the answer.
pub(super) fn request(version: i16, request: RequestKind) -> Result<GroupMessage, Box<ResponseKind>> {
    Ok(match request {
        RequestKind::JoinGroup(r) => {
            if r.group_instance_id.is_some() {
                // Static membership (KIP-345) is not modelled.
                let mut response = JoinGroupResponse::default();
                response.error_code = code::INVALID_REQUEST;
                response.generation_id = -1;
                return Err(Box::new(ResponseKind::JoinGroup(response)));
            }
            GroupMessage::JoinGroupRequest {
                group_id: r.group_id.0.to_string(),
                join: JoinRequest {
                    member_id: r.member_id.to_string(),
                    require_known_member_id: version >= 4,
                    protocol_type: r.protocol_type.to_string(),
                    protocols: r.protocols.into_iter().map(|p| (p.name.to_string(), p.metadata.to_vec())).collect(),
                    session_timeout_ms: timeout_ms(r.session_timeout_ms),
                    // v0 has no rebalance timeout: the session timeout serves for both.
                    rebalance_timeout_ms: timeout_ms(if version >= 1 {
                        r.rebalance_timeout_ms
                    } else {
                        r.session_timeout_ms
                    }),
                },
            }
        }
        RequestKind::SyncGroup(r) => GroupMessage::SyncGroupRequest {
            group_id: r.group_id.0.to_string(),
            generation_id: r.generation_id,
            member_id: r.member_id.to_string(),
            assignments: r.assignments.into_iter().map(|a| (a.member_id.to_string(), a.assignment.to_vec())).collect(),
        },
        RequestKind::Heartbeat(r) => GroupMessage::HeartbeatRequest {
            group_id: r.group_id.0.to_string(),
            generation_id: r.generation_id,
            member_id: r.member_id.to_string(),
        },
        RequestKind::LeaveGroup(r) => GroupMessage::LeaveGroupRequest {
            group_id: r.group_id.0.to_string(),
            member_ids: if version >= 3 {
                r.members.into_iter().map(|m| m.member_id.to_string()).collect()
            } else {
                vec![r.member_id.to_string()]
            },
        },
        RequestKind::OffsetCommit(r) => {
            let mut offsets = Vec::new();
            let mut refused = Vec::new();
            for t in &r.topics {
                for p in &t.partitions {
                    if p.partition_index < 0 || p.committed_offset < 0 {
                        refused.push((t.name.clone(), p.partition_index));
                        continue;
                    }
                    let tp = TopicPartition::new(&t.name.0, p.partition_index as u32);
                    offsets.push((tp, (p.committed_offset, p.committed_metadata.as_ref().map(|m| m.to_string()))));
                }
            }
            if !refused.is_empty() {
                let mut response = OffsetCommitResponse::default();
                for (name, index) in refused {
                    let mut t = OffsetCommitResponseTopic::default();
                    t.name = name;
                    let mut p = OffsetCommitResponsePartition::default();
                    p.partition_index = index;
                    p.error_code = code::INVALID_REQUEST;
                    t.partitions.push(p);
                    response.topics.push(t);
                }
                return Err(Box::new(ResponseKind::OffsetCommit(response)));
            }
            GroupMessage::OffsetCommitRequest {
                group_id: r.group_id.0.to_string(),
                generation_id: r.generation_id_or_member_epoch,
                member_id: r.member_id.to_string(),
                offsets,
            }
        }
        RequestKind::OffsetFetch(r) => GroupMessage::OffsetFetchRequest {
            group_id: r.group_id.0.to_string(),
            partitions: r.topics.map(|ts| {
                ts.iter()
                    .flat_map(|t| {
                        t.partition_indexes
                            .iter()
                            .filter(|p| **p >= 0)
                            .map(|p| TopicPartition::new(&t.name.0, *p as u32))
                            .collect::<Vec<_>>()
                    })
                    .collect()
            }),
            // v7+ (KIP-447): a consumer with read_committed isolation asks for stable offsets only.
            require_stable: version >= 7 && r.require_stable,
        },
        other => unreachable!("not a group request: {other:?}"),
    })
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

fn code_of<T>(r: &Result<T, KafkaError>) -> i16 {
    r.as_ref().err().map_or(0, |e| e.code())
}

/// The engine's answer in the request's wire version.
pub(super) fn response(version: i16, answer: GroupMessage) -> ResponseKind {
    match answer {
        GroupMessage::JoinGroupResponse { member_id, result } => {
            let mut r = JoinGroupResponse::default();
            r.error_code = code_of(&result);
            r.member_id = str_bytes(&member_id);
            match result {
                Ok(j) => {
                    r.generation_id = j.generation_id;
                    r.protocol_name = Some(str_bytes(&j.protocol_name));
                    if version >= 7 {
                        r.protocol_type = Some(StrBytes::from_static_str("consumer"));
                    }
                    r.leader = str_bytes(&j.leader);
                    r.members = j
                        .members
                        .into_iter()
                        .map(|(id, metadata)| {
                            let mut m = JoinGroupResponseMember::default();
                            m.member_id = str_bytes(&id);
                            m.metadata = Bytes::from(metadata);
                            m
                        })
                        .collect();
                }
                Err(_) => {
                    r.generation_id = -1;
                    r.protocol_name = if version >= 7 { None } else { Some(StrBytes::default()) };
                }
            }
            ResponseKind::JoinGroup(r)
        }
        GroupMessage::SyncGroupResponse { result } => {
            let mut r = SyncGroupResponse::default();
            r.error_code = code_of(&result);
            if let Ok((protocol, assignment)) = result {
                if version >= 5 {
                    r.protocol_type = Some(StrBytes::from_static_str("consumer"));
                    r.protocol_name = Some(str_bytes(&protocol));
                }
                r.assignment = Bytes::from(assignment);
            }
            ResponseKind::SyncGroup(r)
        }
        GroupMessage::HeartbeatResponse { result } => {
            let mut r = HeartbeatResponse::default();
            r.error_code = code_of(&result);
            ResponseKind::Heartbeat(r)
        }
        GroupMessage::LeaveGroupResponse { results } => {
            let mut r = LeaveGroupResponse::default();
            if version >= 3 {
                r.members = results
                    .iter()
                    .map(|(id, result)| {
                        let mut m = MemberResponse::default();
                        m.member_id = str_bytes(id);
                        m.error_code = code_of(result);
                        m
                    })
                    .collect();
            } else {
                r.error_code = results.first().map_or(0, |(_, result)| code_of(result));
            }
            ResponseKind::LeaveGroup(r)
        }
        GroupMessage::OffsetCommitResponse { results } => {
            let mut r = OffsetCommitResponse::default();
            let mut by_topic: BTreeMap<String, Vec<OffsetCommitResponsePartition>> = BTreeMap::new();
            for (tp, result) in results {
                let mut p = OffsetCommitResponsePartition::default();
                p.partition_index = tp.partition as i32;
                p.error_code = code_of(&result);
                by_topic.entry(tp.topic).or_default().push(p);
            }
            for (name, partitions) in by_topic {
                let mut t = OffsetCommitResponseTopic::default();
                t.name = str_bytes(&name).into();
                t.partitions = partitions;
                r.topics.push(t);
            }
            ResponseKind::OffsetCommit(r)
        }
        GroupMessage::OffsetFetchResponse { offsets: Err(e) } => {
            let mut r = OffsetFetchResponse::default();
            r.error_code = e.code();
            ResponseKind::OffsetFetch(r)
        }
        GroupMessage::OffsetFetchResponse { offsets: Ok(offsets) } => {
            let mut r = OffsetFetchResponse::default();
            let mut by_topic: BTreeMap<String, Vec<OffsetFetchResponsePartition>> = BTreeMap::new();
            for (tp, committed) in offsets {
                let mut p = OffsetFetchResponsePartition::default();
                p.partition_index = tp.partition as i32;
                p.error_code = code_of(&committed);
                // No committed offset (or an unstable one): -1 and empty metadata (`INVALID_OFFSET`, `NO_METADATA`).
                let (offset, metadata) = committed.ok().flatten().unwrap_or((-1, None));
                p.committed_offset = offset;
                p.metadata = Some(str_bytes(metadata.as_deref().unwrap_or("")));
                by_topic.entry(tp.topic).or_default().push(p);
            }
            for (name, partitions) in by_topic {
                let mut t = OffsetFetchResponseTopic::default();
                t.name = str_bytes(&name).into();
                t.partitions = partitions;
                r.topics.push(t);
            }
            ResponseKind::OffsetFetch(r)
        }
        request => unreachable!("the coordinator answers, it does not ask: {request}"),
    }
}
