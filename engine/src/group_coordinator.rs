//! The classic consumer group protocol (`GroupCoordinator`, `GroupMetadata`, `ClassicGroupState`):
//! JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit and OffsetFetch, as a consumer's
//! `subscribe()` uses them. Members join, the coordinator waits (`group.initial.rebalance.delay.ms` for
//! a new group, then until every known member rejoined or the rebalance timeout passed), picks a leader
//! and a protocol, the leader's SyncGroup hands out the assignment; heartbeats keep a member, silence
//! past `session.timeout.ms` removes it. Only the wire driver sends these. Offsets are kept in memory,
//! not in a `__consumer_offsets` log; static membership (KIP-345) and KIP-848 are not modelled.
//!
//! Answers may be deferred (a JoinGroup waits for the rebalance): handlers send them through `Effects`.
//! Time-based transitions are driven by `tick`, which the driver calls by `next_deadline_ms`.

use crate::config::EngineConfig;
use crate::error::KafkaError;
use crate::protocol::{Effects, Message, NodeId};
use crate::types::{TimeMs, TopicPartition};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// `group.min.session.timeout.ms` and `group.max.session.timeout.ms` (Kafka's defaults).
pub const MIN_SESSION_TIMEOUT_MS: TimeMs = 6_000;
pub const MAX_SESSION_TIMEOUT_MS: TimeMs = 1_800_000;
/// A bound of ours on members per group, so joins cannot grow the state without limit.
pub const MAX_MEMBERS_PER_GROUP: usize = 1024;

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
    /// `partitions: None` asks for every committed offset of the group.
    OffsetFetchRequest {
        group_id: String,
        partitions: Option<Vec<TopicPartition>>,
    },
    /// `None` for a partition with no committed offset.
    OffsetFetchResponse {
        offsets: Vec<(TopicPartition, Option<CommittedOffset>)>,
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
        }
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
            GroupMessage::OffsetCommitResponse { results } => {
                let parts: Vec<String> = results.iter().map(|(tp, r)| format!("{tp} {}", unit(r))).collect();
                write!(f, "{api} resp [{}]", parts.join(", "))
            }
            GroupMessage::OffsetFetchRequest { group_id, partitions } => write!(
                f,
                "{api} req {group_id} {}",
                partitions.as_ref().map_or("all".into(), |p| p
                    .iter()
                    .map(|tp| tp.to_string())
                    .collect::<Vec<_>>()
                    .join(","))
            ),
            GroupMessage::OffsetFetchResponse { offsets } => {
                let parts: Vec<String> = offsets
                    .iter()
                    .map(|(tp, o)| format!("{tp}@{}", o.as_ref().map_or("none".into(), |(o, _)| o.to_string())))
                    .collect();
                write!(f, "{api} resp [{}]", parts.join(", "))
            }
        }
    }
}

/// `ClassicGroupState` (Dead is not reached: groups are never deleted here).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

/// A request waiting for its answer: who asked, under which correlation id.
pub type Waiter = (NodeId, u64);

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Member {
    protocols: Vec<(String, Vec<u8>)>,
    session_timeout_ms: TimeMs,
    rebalance_timeout_ms: TimeMs,
    join_waiter: Option<Waiter>,
    sync_waiter: Option<Waiter>,
    assignment: Vec<u8>,
    /// Heartbeats (and joins, syncs) push this forward by the session timeout.
    expires_ms: TimeMs,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Group {
    pub state: GroupState,
    pub generation_id: i32,
    protocol_type: Option<String>,
    protocol_name: Option<String>,
    leader: Option<String>,
    members: BTreeMap<String, Member>,
    /// Ids handed out with MEMBER_ID_REQUIRED, not yet joined with (`pendingMembers`).
    pending_members: BTreeSet<String>,
    /// PreparingRebalance: when the join phase ends even if members are missing.
    join_deadline_ms: Option<TimeMs>,
    /// The first join phase of an empty group waits out the initial delay (`InitialDelayedJoin`).
    initial_delay: bool,
    pub offsets: BTreeMap<TopicPartition, CommittedOffset>,
}

impl Group {
    fn new() -> Self {
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
        }
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

    fn supports_protocols(&self, protocol_type: &str, protocols: &[(String, Vec<u8>)]) -> bool {
        if self.members.is_empty() {
            return true;
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols.iter().any(|(n, _)| self.members.values().all(|m| m.protocols.iter().any(|(p, _)| p == n)))
    }

    fn prepare_rebalance(&mut self, now_ms: TimeMs, effects: &mut Effects, me: &NodeId) {
        // Members waiting on SyncGroup of the abandoned generation are told to rejoin.
        for m in self.members.values_mut() {
            if let Some((to, corr)) = m.sync_waiter.take() {
                let result = Err(KafkaError::RebalanceInProgress);
                effects.send(me, &to, corr, Message::Group(GroupMessage::SyncGroupResponse { result }));
            }
        }
        let timeout = self.members.values().map(|m| m.rebalance_timeout_ms).max().unwrap_or(0);
        self.state = GroupState::PreparingRebalance;
        self.join_deadline_ms = Some(now_ms + timeout);
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupCoordinator {
    pub groups: BTreeMap<String, Group>,
    next_member_id: u64,
}

fn answer(effects: &mut Effects, me: &NodeId, to: &NodeId, corr: u64, message: GroupMessage) {
    effects.send(me, to, corr, Message::Group(message));
}

impl GroupCoordinator {
    /// When `tick` must next run: a join phase's end or a member's session expiry.
    pub fn next_deadline_ms(&self) -> Option<TimeMs> {
        self.groups
            .values()
            .flat_map(|g| {
                let expiries = g.members.values().filter(|m| m.join_waiter.is_none()).map(|m| m.expires_ms);
                g.join_deadline_ms.into_iter().chain(expiries)
            })
            .min()
    }

    /// Ends join phases whose time is up and removes members whose session expired.
    pub fn tick(&mut self, now_ms: TimeMs, me: &NodeId, effects: &mut Effects) {
        for group in self.groups.values_mut() {
            let expired: Vec<String> = group
                .members
                .iter()
                .filter(|(_, m)| m.join_waiter.is_none() && m.expires_ms <= now_ms)
                .map(|(id, _)| id.clone())
                .collect();
            for id in &expired {
                group.members.remove(id);
            }
            if !expired.is_empty() {
                member_left(group, now_ms, me, effects);
            }
            if group.state == GroupState::PreparingRebalance && group.join_deadline_ms.is_some_and(|d| d <= now_ms) {
                group.initial_delay = false;
                complete_join(group, now_ms, me, effects);
            }
        }
    }

    /// Handles one request from `from`; answers go out through `effects`, some later (by `tick` or by
    /// another member's request).
    pub fn handle(
        &mut self,
        now_ms: TimeMs,
        config: &EngineConfig,
        me: &NodeId,
        asker: Waiter,
        request: GroupMessage,
        effects: &mut Effects,
    ) {
        let (from, corr) = (&asker.0, asker.1);
        let reply = match request {
            GroupMessage::JoinGroupRequest { group_id, join } => {
                let asked = join.member_id.clone();
                match self.join(now_ms, config, me, from, corr, &group_id, join, effects) {
                    Ok(()) => return,
                    Err(e) => GroupMessage::JoinGroupResponse { member_id: asked, result: Err(e) },
                }
            }
            GroupMessage::SyncGroupRequest { group_id, generation_id, member_id, assignments } => {
                match self.sync(now_ms, me, from, corr, &group_id, generation_id, &member_id, assignments, effects) {
                    Ok(()) => return,
                    Err(e) => GroupMessage::SyncGroupResponse { result: Err(e) },
                }
            }
            GroupMessage::HeartbeatRequest { group_id, generation_id, member_id } => {
                let result = self.group_member(&group_id, generation_id, &member_id).and_then(|(group, member)| {
                    member.expires_ms = now_ms + member.session_timeout_ms;
                    match group {
                        GroupState::PreparingRebalance => Err(KafkaError::RebalanceInProgress),
                        _ => Ok(()),
                    }
                });
                GroupMessage::HeartbeatResponse { result }
            }
            GroupMessage::LeaveGroupRequest { group_id, member_ids } => {
                let results = match self.groups.get_mut(&group_id) {
                    None => member_ids.into_iter().map(|m| (m, Err(KafkaError::UnknownMemberId))).collect(),
                    Some(group) => {
                        let results: Vec<_> = member_ids
                            .into_iter()
                            .map(|m| {
                                let r = group.members.remove(&m).map(|_| ()).ok_or(KafkaError::UnknownMemberId);
                                (m, r)
                            })
                            .collect();
                        if results.iter().any(|(_, r)| r.is_ok()) {
                            member_left(group, now_ms, me, effects);
                        }
                        results
                    }
                };
                GroupMessage::LeaveGroupResponse { results }
            }
            GroupMessage::OffsetCommitRequest { group_id, generation_id, member_id, offsets } => {
                let check = if group_id.is_empty() {
                    Err(KafkaError::InvalidGroupId)
                } else if generation_id < 0 && member_id.is_empty() {
                    // `assign()` consumers commit outside the protocol, only while nobody is a member.
                    let group = self.groups.entry(group_id.clone()).or_insert_with(Group::new);
                    if group.members.is_empty() {
                        Ok(())
                    } else {
                        Err(KafkaError::UnknownMemberId)
                    }
                } else {
                    self.group_member(&group_id, generation_id, &member_id).and_then(|(state, _)| match state {
                        GroupState::PreparingRebalance => Err(KafkaError::RebalanceInProgress),
                        _ => Ok(()),
                    })
                };
                if check.is_ok() {
                    let group = self.groups.get_mut(&group_id).expect("checked above");
                    group.offsets.extend(offsets.iter().cloned());
                }
                GroupMessage::OffsetCommitResponse { results: offsets.into_iter().map(|(tp, _)| (tp, check)).collect() }
            }
            GroupMessage::OffsetFetchRequest { group_id, partitions } => {
                let committed = self.groups.get(&group_id).map(|g| &g.offsets);
                let offsets = match partitions {
                    Some(ps) => ps
                        .into_iter()
                        .map(|tp| {
                            let o = committed.and_then(|c| c.get(&tp)).cloned();
                            (tp, o)
                        })
                        .collect(),
                    None => committed.into_iter().flatten().map(|(tp, o)| (tp.clone(), Some(o.clone()))).collect(),
                };
                GroupMessage::OffsetFetchResponse { offsets }
            }
            GroupMessage::JoinGroupResponse { .. }
            | GroupMessage::SyncGroupResponse { .. }
            | GroupMessage::HeartbeatResponse { .. }
            | GroupMessage::LeaveGroupResponse { .. }
            | GroupMessage::OffsetCommitResponse { .. }
            | GroupMessage::OffsetFetchResponse { .. } => return,
        };
        answer(effects, me, from, corr, reply);
    }

    /// The member of a group at this generation, or Kafka's error for why not.
    fn group_member(
        &mut self,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
    ) -> Result<(GroupState, &mut Member), KafkaError> {
        let group = self.groups.get_mut(group_id).ok_or(KafkaError::UnknownMemberId)?;
        let state = group.state;
        let generation = group.generation_id;
        let member = group.members.get_mut(member_id).ok_or(KafkaError::UnknownMemberId)?;
        if generation_id != generation {
            return Err(KafkaError::IllegalGeneration);
        }
        Ok((state, member))
    }

    #[allow(clippy::too_many_arguments)]
    fn join(
        &mut self,
        now_ms: TimeMs,
        config: &EngineConfig,
        me: &NodeId,
        from: &NodeId,
        corr: u64,
        group_id: &str,
        join: JoinRequest,
        effects: &mut Effects,
    ) -> Result<(), KafkaError> {
        if group_id.is_empty() {
            return Err(KafkaError::InvalidGroupId);
        }
        if !(MIN_SESSION_TIMEOUT_MS..=MAX_SESSION_TIMEOUT_MS).contains(&join.session_timeout_ms) {
            return Err(KafkaError::InvalidSessionTimeout);
        }
        let group = self.groups.entry(group_id.to_string()).or_insert_with(Group::new);
        if join.protocols.is_empty() || !group.supports_protocols(&join.protocol_type, &join.protocols) {
            return Err(KafkaError::InconsistentGroupProtocol);
        }
        let member_id = if join.member_id.is_empty() {
            if group.members.len() + group.pending_members.len() >= MAX_MEMBERS_PER_GROUP {
                return Err(KafkaError::GroupMaxSizeReached);
            }
            self.next_member_id += 1;
            let id = format!("{from}-{}", self.next_member_id);
            if join.require_known_member_id {
                // KIP-394: the id first, so a client that times out and retries does not join twice.
                group.pending_members.insert(id.clone());
                let result = Err(KafkaError::MemberIdRequired);
                answer(effects, me, from, corr, GroupMessage::JoinGroupResponse { member_id: id, result });
                return Ok(());
            }
            id
        } else if group.members.contains_key(&join.member_id) || group.pending_members.remove(&join.member_id) {
            join.member_id
        } else {
            return Err(KafkaError::UnknownMemberId);
        };
        let member = Member {
            protocols: join.protocols,
            session_timeout_ms: join.session_timeout_ms,
            rebalance_timeout_ms: join.rebalance_timeout_ms,
            join_waiter: Some((from.clone(), corr)),
            sync_waiter: None,
            assignment: Vec::new(),
            expires_ms: now_ms + join.session_timeout_ms,
        };
        group.protocol_type = Some(join.protocol_type);
        group.members.insert(member_id, member);
        match group.state {
            GroupState::Empty => {
                group.state = GroupState::PreparingRebalance;
                group.initial_delay = true;
                let delay = config.group_initial_rebalance_delay_ms.min(join.rebalance_timeout_ms);
                group.join_deadline_ms = Some(now_ms + delay);
            }
            GroupState::Stable | GroupState::CompletingRebalance => group.prepare_rebalance(now_ms, effects, me),
            GroupState::PreparingRebalance => {}
        }
        if !group.initial_delay && group.members.values().all(|m| m.join_waiter.is_some()) {
            complete_join(group, now_ms, me, effects);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn sync(
        &mut self,
        now_ms: TimeMs,
        me: &NodeId,
        from: &NodeId,
        corr: u64,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        assignments: Vec<(String, Vec<u8>)>,
        effects: &mut Effects,
    ) -> Result<(), KafkaError> {
        let (state, member) = self.group_member(group_id, generation_id, member_id)?;
        member.expires_ms = now_ms + member.session_timeout_ms;
        let group = self.groups.get_mut(group_id).expect("found above");
        let protocol = group.protocol_name.clone().unwrap_or_default();
        match state {
            GroupState::Empty | GroupState::PreparingRebalance => Err(KafkaError::RebalanceInProgress),
            GroupState::Stable => {
                let assignment = group.members[member_id].assignment.clone();
                let result = Ok((protocol, assignment));
                answer(effects, me, from, corr, GroupMessage::SyncGroupResponse { result });
                Ok(())
            }
            GroupState::CompletingRebalance => {
                group.members.get_mut(member_id).expect("found above").sync_waiter = Some((from.clone(), corr));
                if group.leader.as_deref() != Some(member_id) {
                    return Ok(());
                }
                // The leader's assignment completes the generation: every waiting member gets its share.
                let mut given: BTreeMap<String, Vec<u8>> = assignments.into_iter().collect();
                group.state = GroupState::Stable;
                for m in group.members.values_mut() {
                    m.assignment = Vec::new();
                }
                for (id, m) in group.members.iter_mut() {
                    m.assignment = given.remove(id).unwrap_or_default();
                    if let Some((to, c)) = m.sync_waiter.take() {
                        let result = Ok((protocol.clone(), m.assignment.clone()));
                        answer(effects, me, &to, c, GroupMessage::SyncGroupResponse { result });
                    }
                }
                Ok(())
            }
        }
    }
}

/// A member left or expired: the rest must rebalance, or the group is empty.
fn member_left(group: &mut Group, now_ms: TimeMs, me: &NodeId, effects: &mut Effects) {
    if group.members.is_empty() {
        group.state = GroupState::Empty;
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
fn complete_join(group: &mut Group, now_ms: TimeMs, me: &NodeId, effects: &mut Effects) {
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
