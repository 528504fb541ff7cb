//! A classic consumer group (`ClassicGroup`, `ClassicGroupMember`, `ClassicGroupState`): its members with
//! their protocols and assignments, the generation, and the rebalance steps that every request and timer
//! may take: preparing a rebalance, completing the join phase (`onCompleteJoin`), handing out the
//! assignment (`setAndPropagateAssignment`). Its metadata as `GroupMetadataValue` keeps it
//! (`GroupMetadata`) is what a coordinator move restores (`ClassicGroup.fromRecords`).

use super::{answer, CommitRecord, Waiter};
use crate::error::KafkaError;
use crate::protocol::group::{CommittedOffset, GroupMessage, JoinResult};
use crate::protocol::{Effects, Message, NodeId};
use crate::types::{TimeMs, TopicPartition};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A group's metadata as `GroupMetadataValue` keeps it: its generation and protocol, and each member
/// with its timeouts, protocols and assignment (no members for an Empty group).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GroupMetadata {
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub members: Vec<StoredMember>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct StoredMember {
    pub id: String,
    pub session_timeout_ms: TimeMs,
    pub rebalance_timeout_ms: TimeMs,
    pub protocols: Vec<(String, Vec<u8>)>,
    pub assignment: Vec<u8>,
}

/// `ClassicGroupState` (Dead is not reached: groups are never deleted here).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct Member {
    pub(super) protocols: Vec<(String, Vec<u8>)>,
    pub(super) session_timeout_ms: TimeMs,
    pub(super) rebalance_timeout_ms: TimeMs,
    pub(super) join_waiter: Option<Waiter>,
    pub(super) sync_waiter: Option<Waiter>,
    pub(super) assignment: Vec<u8>,
    /// Heartbeats (and joins, syncs) push this forward by the session timeout.
    pub(super) expires_ms: TimeMs,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Group {
    pub state: GroupState,
    pub generation_id: i32,
    pub(super) protocol_type: Option<String>,
    pub(super) protocol_name: Option<String>,
    pub(super) leader: Option<String>,
    pub(super) members: BTreeMap<String, Member>,
    /// Ids handed out with MEMBER_ID_REQUIRED, not yet joined with (`pendingMembers`).
    pub(super) pending_members: BTreeSet<String>,
    /// PreparingRebalance: when the join phase ends even if members are missing.
    pub(super) join_deadline_ms: Option<TimeMs>,
    /// The first join phase of an empty group waits out the initial delay (`InitialDelayedJoin`).
    pub(super) initial_delay: bool,
    pub offsets: BTreeMap<TopicPartition, CommittedOffset>,
    /// Where each committed offset's record is.
    pub records: BTreeMap<TopicPartition, CommitRecord>,
    /// The metadata to write changed: a generation's assignment came, or the group became Empty.
    pub(super) changed: bool,
    /// CompletingRebalance: the generation whose assignment is being written; the group is Stable and the
    /// members get their assignments once the record is replicated (`complete_store`).
    pub(super) storing: Option<i32>,
}

impl Group {
    pub(super) fn new() -> Self {
        Group {
            state: GroupState::Empty,
            generation_id: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: BTreeMap::new(),
            pending_members: BTreeSet::new(),
            join_deadline_ms: None,
            initial_delay: false,
            offsets: BTreeMap::new(),
            records: BTreeMap::new(),
            changed: false,
            storing: None,
        }
    }

    pub(super) fn metadata(&self) -> GroupMetadata {
        let members = self.members.iter().map(|(id, m)| StoredMember {
            id: id.clone(),
            session_timeout_ms: m.session_timeout_ms,
            rebalance_timeout_ms: m.rebalance_timeout_ms,
            protocols: m.protocols.clone(),
            assignment: m.assignment.clone(),
        });
        GroupMetadata {
            generation: self.generation_id,
            protocol_type: self.protocol_type.clone(),
            protocol: self.protocol_name.clone(),
            leader: self.leader.clone(),
            members: members.collect(),
        }
    }

    /// `ClassicGroup.fromRecords` and `onLoaded`: the group as its metadata record left it, Stable with
    /// its members (each session restarting now) or Empty.
    pub(super) fn restore(&mut self, m: GroupMetadata, now_ms: TimeMs) {
        self.state = if m.members.is_empty() { GroupState::Empty } else { GroupState::Stable };
        self.generation_id = m.generation;
        self.protocol_type = m.protocol_type;
        self.protocol_name = m.protocol;
        self.leader = m.leader;
        self.pending_members.clear();
        self.join_deadline_ms = None;
        self.initial_delay = false;
        self.members = m
            .members
            .into_iter()
            .map(|sm| {
                let member = Member {
                    protocols: sm.protocols,
                    session_timeout_ms: sm.session_timeout_ms,
                    rebalance_timeout_ms: sm.rebalance_timeout_ms,
                    join_waiter: None,
                    sync_waiter: None,
                    assignment: sm.assignment,
                    expires_ms: now_ms + sm.session_timeout_ms,
                };
                (sm.id, member)
            })
            .collect();
    }

    /// `ClassicGroup.hasMember`.
    pub fn has_member(&self, member_id: &str) -> bool {
        self.members.contains_key(member_id)
    }

    pub fn member_ids(&self) -> impl Iterator<Item = &String> {
        self.members.keys()
    }

    /// The first protocol of the leader's list that every member supports (`selectProtocol`, simplified
    /// from Kafka's vote to the leader's preference).
    fn select_protocol(&self, leader: &str) -> Option<String> {
        let prefs = &self.members.get(leader)?.protocols;
        prefs
            .iter()
            .map(|(n, _)| n)
            .find(|n| self.members.values().all(|m| m.protocols.iter().any(|(p, _)| p == *n)))
            .cloned()
    }

    pub(super) fn supports_protocols(&self, protocol_type: &str, protocols: &[(String, Vec<u8>)]) -> bool {
        if self.members.is_empty() {
            return true;
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols.iter().any(|(n, _)| self.members.values().all(|m| m.protocols.iter().any(|(p, _)| p == n)))
    }

    pub(super) fn prepare_rebalance(&mut self, now_ms: TimeMs, effects: &mut Effects, me: &NodeId) {
        // Members waiting on SyncGroup of the abandoned generation are told to rejoin.
        for m in self.members.values_mut() {
            if let Some((to, corr)) = m.sync_waiter.take() {
                let result = Err(KafkaError::RebalanceInProgress);
                effects.send(me, &to, corr, Message::Group(GroupMessage::SyncGroupResponse { result }));
            }
        }
        let timeout = self.members.values().map(|m| m.rebalance_timeout_ms).max().unwrap_or(0);
        self.storing = None;
        self.state = GroupState::PreparingRebalance;
        self.join_deadline_ms = Some(now_ms + timeout);
    }
}

/// `setAndPropagateAssignment`: the group is Stable, and each member waiting on SyncGroup gets its share.
pub(super) fn propagate_assignment(group: &mut Group, protocol: &str, me: &NodeId, effects: &mut Effects) {
    group.state = GroupState::Stable;
    for m in group.members.values_mut() {
        if let Some((to, c)) = m.sync_waiter.take() {
            let result = Ok((protocol.to_string(), m.assignment.clone()));
            answer(effects, me, &to, c, GroupMessage::SyncGroupResponse { result });
        }
    }
}

/// A member left or expired: the rest must rebalance, or the group is empty.
pub(super) fn member_left(group: &mut Group, now_ms: TimeMs, me: &NodeId, effects: &mut Effects) {
    if group.members.is_empty() {
        group.state = GroupState::Empty;
        group.changed = true;
        group.leader = None;
        group.protocol_name = None;
        group.join_deadline_ms = None;
        group.initial_delay = false;
        return;
    }
    if group.state != GroupState::PreparingRebalance {
        group.prepare_rebalance(now_ms, effects, me);
    }
    if !group.initial_delay && group.members.values().all(|m| m.join_waiter.is_some()) {
        complete_join(group, now_ms, me, effects);
    }
}

/// `onCompleteJoin`: members that did not rejoin are dropped, the generation advances, the leader and
/// protocol are chosen and every joined member gets its answer.
pub(super) fn complete_join(group: &mut Group, now_ms: TimeMs, me: &NodeId, effects: &mut Effects) {
    group.members.retain(|_, m| m.join_waiter.is_some());
    group.join_deadline_ms = None;
    if group.members.is_empty() {
        member_left(group, now_ms, me, effects);
        return;
    }
    let leader = match &group.leader {
        Some(l) if group.members.contains_key(l) => l.clone(),
        _ => group.members.keys().next().expect("not empty").clone(),
    };
    let protocol = group.select_protocol(&leader).expect("every member shares a protocol, checked on join");
    group.generation_id += 1;
    group.state = GroupState::CompletingRebalance;
    group.leader = Some(leader.clone());
    group.protocol_name = Some(protocol.clone());
    let listing: Vec<(String, Vec<u8>)> = group
        .members
        .iter()
        .map(|(id, m)| {
            let metadata = m.protocols.iter().find(|(n, _)| *n == protocol).map(|(_, md)| md.clone());
            (id.clone(), metadata.unwrap_or_default())
        })
        .collect();
    for (id, m) in group.members.iter_mut() {
        let (to, corr) = m.join_waiter.take().expect("retained above");
        m.expires_ms = now_ms + m.session_timeout_ms;
        let result = Ok(JoinResult {
            generation_id: group.generation_id,
            protocol_name: protocol.clone(),
            leader: leader.clone(),
            members: if *id == leader { listing.clone() } else { Vec::new() },
        });
        answer(effects, me, &to, corr, GroupMessage::JoinGroupResponse { member_id: id.clone(), result });
    }
}
