//! The classic consumer group protocol (`GroupMetadataManager`'s classic groups): JoinGroup, SyncGroup,
//! Heartbeat and LeaveGroup as a consumer's `subscribe()` uses them, and the append callback of a
//! generation's metadata record. Members join, the coordinator waits (`group.initial.rebalance.delay.ms`
//! for a new group, then until every known member rejoined or the rebalance timeout passed), picks a
//! leader and a protocol, the leader's SyncGroup hands out the assignment; heartbeats keep a member,
//! silence past `session.timeout.ms` removes it. Static membership (KIP-345) and KIP-848 are not modelled.

use super::classic_group::{complete_join, member_left, propagate_assignment, Member};
use super::{answer, Group, GroupCoordinator, GroupState};
use crate::config::EngineConfig;
use crate::error::KafkaError;
use crate::mutation::Mutation;
use crate::protocol::group::{GroupMessage, JoinRequest};
use crate::protocol::{Effects, NodeId};
use crate::types::TimeMs;
use std::collections::BTreeMap;

/// `group.max.session.timeout.ms` (Kafka's default; the minimum is `EngineConfig::group_min_session_timeout_ms`).
pub const MAX_SESSION_TIMEOUT_MS: TimeMs = 1_800_000;
/// A bound of ours on members per group, so joins cannot grow the state without limit.
pub const MAX_MEMBERS_PER_GROUP: usize = 1024;

impl GroupCoordinator {
    /// The append callback of a SyncGroup's metadata record (`GroupMetadataManager`, classic groups): if the
    /// group still waits for that generation's write, it is Stable and the members get their assignments;
    /// if the write failed, each waiting member gets its error (`appendGroupMetadataErrorToResponseError`),
    /// the assignment is dropped (`resetAndPropagateAssignmentWithError`) and the group rebalances.
    pub(super) fn complete_store(
        &mut self,
        now_ms: TimeMs,
        me: &NodeId,
        group_id: &str,
        generation: i32,
        result: Result<(), KafkaError>,
        effects: &mut Effects,
    ) {
        let Some(group) = self.groups.get_mut(group_id) else { return };
        let current = group.state == GroupState::CompletingRebalance && group.generation_id == generation;
        if !current || group.storing != Some(generation) {
            return; // The group moved on while the record was written.
        }
        group.storing = None;
        match result {
            Ok(()) => {
                let protocol = group.protocol_name.clone().unwrap_or_default();
                propagate_assignment(group, &protocol, me, effects);
            }
            Err(e) => {
                let e = e.for_coordinator_append();
                for m in group.members.values_mut() {
                    m.assignment = Vec::new();
                    if let Some((to, c)) = m.sync_waiter.take() {
                        answer(effects, me, &to, c, GroupMessage::SyncGroupResponse { result: Err(e) });
                    }
                }
                group.prepare_rebalance(now_ms, effects, me);
            }
        }
    }

    /// The member of a group at this generation, or Kafka's error for why not.
    pub(super) fn group_member(
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
    pub(super) fn join(
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
        if !(config.group_min_session_timeout_ms..=MAX_SESSION_TIMEOUT_MS).contains(&join.session_timeout_ms) {
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

    /// SyncGroup: `(generation, member, assignments)`, the assignments from the leader only.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn sync(
        &mut self,
        now_ms: TimeMs,
        config: &EngineConfig,
        me: &NodeId,
        (from, corr): (&NodeId, u64),
        group_id: &str,
        (generation_id, member_id, assignments): (i32, &str, Vec<(String, Vec<u8>)>),
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
                if group.storing == Some(group.generation_id) {
                    return Ok(()); // The leader again: its assignment is being written already.
                }
                // The leader's assignment completes the generation once its metadata record is written.
                let mut given: BTreeMap<String, Vec<u8>> = assignments.into_iter().collect();
                for (id, m) in group.members.iter_mut() {
                    m.assignment = given.remove(id).unwrap_or_default();
                }
                group.changed = true;
                if config.mutations.has(Mutation::SyncAnsweredBeforeStored) {
                    // The bug: Stable and answered now, before the record is replicated.
                    propagate_assignment(group, &protocol, me, effects);
                } else {
                    group.storing = Some(group.generation_id);
                }
                Ok(())
            }
        }
    }

    /// Heartbeat: the member's session goes on; during a rebalance it is told to rejoin.
    pub(super) fn heartbeat(
        &mut self,
        now_ms: TimeMs,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
    ) -> Result<(), KafkaError> {
        self.group_member(group_id, generation_id, member_id).and_then(|(group, member)| {
            member.expires_ms = now_ms + member.session_timeout_ms;
            match group {
                GroupState::PreparingRebalance => Err(KafkaError::RebalanceInProgress),
                _ => Ok(()),
            }
        })
    }

    /// LeaveGroup: the members named leave; the rest rebalance.
    pub(super) fn leave(
        &mut self,
        now_ms: TimeMs,
        me: &NodeId,
        group_id: &str,
        member_ids: Vec<String>,
        effects: &mut Effects,
    ) -> Vec<(String, Result<(), KafkaError>)> {
        match self.groups.get_mut(group_id) {
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
        }
    }
}
