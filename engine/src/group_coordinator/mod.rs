//! The group coordinator (`GroupCoordinatorShard`; one per `__consumer_offsets` partition in Kafka, one per
//! broker here) and its entry points: a request (`handle`), a partition's load and unload (`load`,
//! `unload`), the timers (`tick`) and the records to write (`take_writes`). It hands the work to Kafka's
//! rooms: the classic group protocol to `group_metadata_manager.rs` (`GroupMetadataManager`) with its
//! groups in `classic_group.rs` (`ClassicGroup`), committed and transactional offsets to
//! `offset_metadata_manager.rs` (`OffsetMetadataManager`); `runtime.rs` (`CoordinatorRuntime`) writes the
//! records to `__consumer_offsets` and holds the answers until they are replicated.
//!
//! What a group must keep across a coordinator move is written to its `__consumer_offsets` partition as
//! `OffsetsRecord`s (`GroupCoordinatorRecordHelpers`): each plain offset commit, and the group's metadata
//! when the leader hands out a generation's assignment (the generation is Stable, and its members answered,
//! once that record is replicated: `complete_store`) or the group becomes Empty. A broker that comes to lead the partition
//! replays it (`load`, to its log end), one that stops unloads its groups (`unload`); the broker holds an
//! OffsetCommit's answer until the record is replicated, as the coordinator runtime's write future does.
//!
//! Answers may be deferred (a JoinGroup waits for the rebalance): handlers send them through `Effects`.
//! Time-based transitions are driven by `tick`, which the driver calls by `next_deadline_ms`.

mod classic_group;
mod group_metadata_manager;
mod offset_metadata_manager;
mod runtime;

pub use classic_group::{Group, GroupMetadata, GroupState, StoredMember};
pub use group_metadata_manager::{MAX_MEMBERS_PER_GROUP, MAX_SESSION_TIMEOUT_MS};
pub use offset_metadata_manager::{CommitRecord, OffsetsRecord, PendingOffset};
pub use runtime::TxnOffsetsVerification;
pub use runtime::{verification_error, CoordinatorRuntime, GroupCtx, PendingOffsetsVerification, TxnOffsetCommit};

use classic_group::{complete_join, member_left};
use offset_metadata_manager::Uncommitted;

use crate::config::EngineConfig;
use crate::error::KafkaError;
use crate::log::PartitionLog;
use crate::mutation::Mutations;
use crate::protocol::group::GroupMessage;
use crate::protocol::{Effects, Message, NodeId};
use crate::topic::offsets_partition_for;
use crate::types::{ProducerId, TimeMs, TopicPartition};
use std::collections::BTreeMap;

/// Records the coordinator wants appended to a group's `__consumer_offsets` partition; `answer` is the
/// request whose answer (already in the effects) must wait until they are replicated.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupWrite {
    pub group_id: String,
    pub records: Vec<OffsetsRecord>,
    pub answer: Option<Waiter>,
    /// The generation whose leader's SyncGroup waits for this metadata record (`complete_store`).
    pub stored: Option<i32>,
}

/// A request waiting for its answer: who asked, under which correlation id.
pub type Waiter = (NodeId, u64);

#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupCoordinator {
    pub groups: BTreeMap<String, Group>,
    next_member_id: u64,
    /// `pendingTransactionalOffsets`: per producer id, per (group, partition), the offset its open
    /// transaction committed.
    pub pending_txn_offsets: BTreeMap<ProducerId, BTreeMap<(String, TopicPartition), PendingOffset>>,
    /// Commit records written so far (each commit's `CommitRecord::order`).
    records_written: u64,
    /// Offset commits to write, taken by the broker after each call (`take_writes`).
    writes: Vec<GroupWrite>,
    /// Committed offsets changed by records above their partition's HW, in log order (`settle` drops them).
    uncommitted: Vec<Uncommitted>,
}

fn answer(effects: &mut Effects, me: &NodeId, to: &NodeId, corr: u64, message: GroupMessage) {
    effects.send(me, to, corr, Message::Group(message));
}

impl GroupCoordinator {
    /// When `tick` must next run: a join phase's end or a member's session expiry.
    pub fn next_deadline_ms(&self) -> Option<TimeMs> {
        self.next_join_deadline_ms().into_iter().chain(self.next_session_expiry_ms()).min()
    }

    /// The earliest end of a join phase (the initial delay, or the rebalance timeout).
    pub fn next_join_deadline_ms(&self) -> Option<TimeMs> {
        self.groups.values().filter_map(|g| g.join_deadline_ms).min()
    }

    /// Whether a JoinGroup or SyncGroup of `waiter` is held here, to be answered when its phase ends.
    pub fn holds(&self, waiter: &Waiter) -> bool {
        let members = self.groups.values().flat_map(|g| g.members.values());
        members.into_iter().any(|m| m.join_waiter.as_ref() == Some(waiter) || m.sync_waiter.as_ref() == Some(waiter))
    }

    /// The earliest session expiry of a member not waiting in a join.
    pub fn next_session_expiry_ms(&self) -> Option<TimeMs> {
        let expiries = self.groups.values().flat_map(|g| g.members.values());
        expiries.filter(|m| m.join_waiter.is_none()).map(|m| m.expires_ms).min()
    }

    /// The records to append since the last call: offset commits, then the metadata of each group whose
    /// generation became Stable or that became Empty.
    pub fn take_writes(&mut self) -> Vec<GroupWrite> {
        let mut writes = std::mem::take(&mut self.writes);
        for (id, group) in self.groups.iter_mut().filter(|(_, g)| g.changed) {
            group.changed = false;
            let records = vec![OffsetsRecord::Group { group: id.clone(), metadata: group.metadata() }];
            writes.push(GroupWrite { group_id: id.clone(), records, answer: None, stored: group.storing });
        }
        writes
    }

    /// The coordinator runtime's load of `offsets_partition` (`CoordinatorLoaderImpl`, to the log end, as
    /// `GroupMetadataManager.replay` takes each record): committed offsets, each group's last metadata, and
    /// the offsets of transactions, pending until their marker follows in the log.
    pub fn load(
        &mut self,
        offsets_partition: &TopicPartition,
        log: &PartitionLog,
        now_ms: TimeMs,
        mutations: &Mutations,
    ) {
        for batch in log.batches() {
            if let (Some(marker), Some(pid)) = (batch.marker(), batch.producer_id()) {
                self.complete_transaction(pid, marker.result, offsets_partition, batch.base_offset, mutations);
                continue;
            }
            let txn = batch.producer_id().filter(|_| batch.is_transactional).map(|pid| (pid, batch.base_offset));
            for (at, r) in (batch.base_offset..).zip(batch.records()) {
                let record: OffsetsRecord = serde_json::from_str(&r.value).expect("a record the coordinator wrote");
                assert_eq!(offsets_partition_for(record.group()), *offsets_partition, "a group in its own partition");
                match record {
                    OffsetsRecord::Offset { group, partition, offset, metadata } => {
                        let commit = self.next_record(txn);
                        match txn {
                            Some((pid, _)) => {
                                let pending = PendingOffset { offset: (offset, metadata), record: commit };
                                self.pending_txn_offsets.entry(pid).or_default().insert((group, partition), pending);
                            }
                            None => self.materialize(&group, &partition, (offset, metadata), commit, Some(at)),
                        }
                    }
                    OffsetsRecord::Group { group, metadata } => {
                        self.groups.entry(group).or_insert_with(Group::new).restore(metadata, now_ms);
                    }
                }
            }
        }
    }

    /// `onUnloaded`: the groups of `offsets_partition` leave this coordinator; members waiting for a join
    /// or a sync answer are told NOT_COORDINATOR, and look the coordinator up again.
    pub fn unload(&mut self, offsets_partition: &TopicPartition, me: &NodeId, effects: &mut Effects) {
        let here = |group: &str| offsets_partition_for(group) == *offsets_partition;
        let gone: Vec<String> = self.groups.keys().filter(|g| here(g)).cloned().collect();
        let error = KafkaError::NotCoordinator;
        for id in gone {
            for (member_id, m) in self.groups.remove(&id).expect("listed above").members {
                if let Some((to, corr)) = m.join_waiter {
                    answer(effects, me, &to, corr, GroupMessage::JoinGroupResponse { member_id, result: Err(error) });
                } else if let Some((to, corr)) = m.sync_waiter {
                    answer(effects, me, &to, corr, GroupMessage::SyncGroupResponse { result: Err(error) });
                }
            }
        }
        for pending in self.pending_txn_offsets.values_mut() {
            pending.retain(|(group, _), _| !here(group));
        }
        self.pending_txn_offsets.retain(|_, p| !p.is_empty());
        self.writes.retain(|w| !here(&w.group_id));
        self.uncommitted.retain(|u| !here(&u.group));
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
                let sync = (generation_id, member_id.as_str(), assignments);
                match self.sync(now_ms, config, me, (from, corr), &group_id, sync, effects) {
                    Ok(()) => return,
                    Err(e) => GroupMessage::SyncGroupResponse { result: Err(e) },
                }
            }
            GroupMessage::HeartbeatRequest { group_id, generation_id, member_id } => {
                GroupMessage::HeartbeatResponse { result: self.heartbeat(now_ms, &group_id, generation_id, &member_id) }
            }
            GroupMessage::LeaveGroupRequest { group_id, member_ids } => {
                GroupMessage::LeaveGroupResponse { results: self.leave(now_ms, me, &group_id, member_ids, effects) }
            }
            GroupMessage::OffsetCommitRequest { group_id, generation_id, member_id, offsets } => {
                let commit = (generation_id, member_id.as_str(), offsets);
                GroupMessage::OffsetCommitResponse {
                    results: self.commit_offsets(now_ms, config, &asker, &group_id, commit),
                }
            }
            GroupMessage::OffsetFetchRequest { .. } => {
                unreachable!("the broker reads OffsetFetch at its partition's HW (`Broker::handle_offset_fetch`)")
            }
            GroupMessage::TxnOffsetCommitRequest { .. } => {
                unreachable!(
                    "the broker writes a TxnOffsetCommit to its log first (`Broker::handle_txn_offset_commit`)"
                )
            }
            GroupMessage::GroupStored { group_id, generation, result } => {
                self.complete_store(now_ms, me, &group_id, generation, result, effects);
                return;
            }
            GroupMessage::JoinGroupResponse { .. }
            | GroupMessage::SyncGroupResponse { .. }
            | GroupMessage::HeartbeatResponse { .. }
            | GroupMessage::LeaveGroupResponse { .. }
            | GroupMessage::OffsetCommitResponse { .. }
            | GroupMessage::OffsetFetchResponse { .. }
            | GroupMessage::TxnOffsetCommitResponse { .. } => return,
        };
        answer(effects, me, from, corr, reply);
    }
}
