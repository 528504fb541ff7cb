//! The classic consumer group protocol (`GroupCoordinator`, `GroupMetadata`, `ClassicGroupState`):
//! JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit and OffsetFetch, as a consumer's
//! `subscribe()` uses them. Members join, the coordinator waits (`group.initial.rebalance.delay.ms` for
//! a new group, then until every known member rejoined or the rebalance timeout passed), picks a leader
//! and a protocol, the leader's SyncGroup hands out the assignment; heartbeats keep a member, silence
//! past `session.timeout.ms` removes it. Static membership (KIP-345) and KIP-848 are not modelled.
//!
//! What a group must keep across a coordinator move is written to its `__consumer_offsets` partition as
//! `OffsetsRecord`s (`GroupCoordinatorRecordHelpers`): each plain offset commit, and the group's metadata
//! when the leader hands out a generation's assignment (the generation is Stable, and its members answered,
//! once that record is replicated: `complete_store`) or the group becomes Empty. A broker that comes to lead the partition
//! replays it (`load`, to its log end), one that stops unloads its groups (`unload`); the broker holds an
//! OffsetCommit's answer until the record is replicated, as the coordinator runtime's write future does.
//! A commit takes effect as its record is appended (`replay_offset_commits`), and what records above the
//! HW changed stays visible only to writes: OffsetFetch reads at the HW (`Uncommitted`, `settle`), as the
//! runtime's reads at the last committed offset do.
//!
//! Transactional offsets (KIP-98, KIP-447; `OffsetMetadataManager`): a TxnOffsetCommit is written to the
//! group's `__consumer_offsets` partition as a batch of the producer's transaction (the runtime does that)
//! and held here as pending, per producer id, until the transaction's marker reaches that partition: a
//! COMMIT materializes the offsets, an ABORT drops them. Meanwhile OffsetFetch with `require_stable`
//! answers UNSTABLE_OFFSET_COMMIT for those partitions.
//!
//! Answers may be deferred (a JoinGroup waits for the rebalance): handlers send them through `Effects`.
//! Time-based transitions are driven by `tick`, which the driver calls by `next_deadline_ms`.

mod runtime;

pub use runtime::{verification_error, CoordinatorRuntime, GroupCtx, PendingOffsetsVerification, TxnOffsetCommit};

use crate::config::EngineConfig;
use crate::error::KafkaError;
use crate::log::PartitionLog;
use crate::mutation::Mutation;
use crate::protocol::group::{CommittedOffset, GroupMessage, JoinRequest, JoinResult};
use crate::protocol::{Effects, Message, NodeId};
use crate::topic::offsets_partition_for;
use crate::types::{Offset, ProducerId, TimeMs, TopicPartition, TransactionResult};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// `group.min.session.timeout.ms` and `group.max.session.timeout.ms` (Kafka's defaults).
pub const MIN_SESSION_TIMEOUT_MS: TimeMs = 6_000;
pub const MAX_SESSION_TIMEOUT_MS: TimeMs = 1_800_000;
/// A bound of ours on members per group, so joins cannot grow the state without limit.
pub const MAX_MEMBERS_PER_GROUP: usize = 1024;

/// A record of a group's `__consumer_offsets` partition, as JSON in the record's value: an offset commit
/// (in a transaction's batch for TxnOffsetCommit) or the group's metadata (`GroupMetadataValue`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum OffsetsRecord {
    Offset { group: String, partition: TopicPartition, offset: i64, metadata: Option<String> },
    Group { group: String, metadata: GroupMetadata },
}

impl OffsetsRecord {
    pub fn offset(group: &str, tp: &TopicPartition, (offset, metadata): &CommittedOffset) -> Self {
        OffsetsRecord::Offset {
            group: group.into(),
            partition: tp.clone(),
            offset: *offset,
            metadata: metadata.clone(),
        }
    }

    pub fn to_value(&self) -> String {
        serde_json::to_string(self).expect("a record serializes")
    }

    fn group(&self) -> &str {
        match self {
            OffsetsRecord::Offset { group, .. } | OffsetsRecord::Group { group, .. } => group,
        }
    }
}

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

/// Where a committed offset's record is: its place in the order of all commit records (`recordOffset`,
/// which decides between a transactional and a plain commit), and for a transactional one the producer
/// and the offset of its batch in the group's `__consumer_offsets` partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CommitRecord {
    pub order: u64,
    pub txn: Option<(ProducerId, Offset)>,
}

/// A transaction's offset for one partition, waiting for its marker.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PendingOffset {
    pub offset: CommittedOffset,
    pub record: CommitRecord,
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
    /// Where each committed offset's record is.
    pub records: BTreeMap<TopicPartition, CommitRecord>,
    /// The metadata to write changed: a generation's assignment came, or the group became Empty.
    changed: bool,
    /// CompletingRebalance: the generation whose assignment is being written; the group is Stable and the
    /// members get their assignments once the record is replicated (`complete_store`).
    storing: Option<i32>,
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
            records: BTreeMap::new(),
            changed: false,
            storing: None,
        }
    }

    fn metadata(&self) -> GroupMetadata {
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
    fn restore(&mut self, m: GroupMetadata, now_ms: TimeMs) {
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
        self.storing = None;
        self.state = GroupState::PreparingRebalance;
        self.join_deadline_ms = Some(now_ms + timeout);
    }
}

/// What a committed offset was before a record not yet below its partition's HW changed it: a read at the
/// last committed offset sees `before` until the HW passes `at` (the coordinator runtime's timeline
/// snapshots, `CoordinatorRuntime.scheduleReadOperation`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Uncommitted {
    at: Offset,
    group: String,
    tp: TopicPartition,
    before: Option<CommittedOffset>,
}

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
        self.groups
            .values()
            .flat_map(|g| {
                let expiries = g.members.values().filter(|m| m.join_waiter.is_none()).map(|m| m.expires_ms);
                g.join_deadline_ms.into_iter().chain(expiries)
            })
            .min()
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

    /// The append callback of a SyncGroup's metadata record (`GroupMetadataManager`, classic groups): if the
    /// group still waits for that generation's write, it is Stable and the members get their assignments;
    /// if the write failed, each waiting member gets its error (`appendGroupMetadataErrorToResponseError`),
    /// the assignment is dropped (`resetAndPropagateAssignmentWithError`) and the group rebalances.
    fn complete_store(
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

    /// The coordinator runtime's load of `offsets_partition` (`CoordinatorLoaderImpl`, to the log end, as
    /// `GroupMetadataManager.replay` takes each record): committed offsets, each group's last metadata, and
    /// the offsets of transactions, pending until their marker follows in the log.
    pub fn load(&mut self, offsets_partition: &TopicPartition, log: &PartitionLog, now_ms: TimeMs) {
        for batch in log.batches() {
            if let (Some(marker), Some(pid)) = (batch.marker(), batch.producer_id()) {
                self.complete_transaction(pid, marker.result, offsets_partition, batch.base_offset);
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
                    self.group_member(&group_id, generation_id, &member_id).and_then(|(state, member)| {
                        if config.mutations.has(Mutation::OffsetCommitRefusedWhilePreparingRebalance) {
                            // The old engine: refused while preparing, accepted while completing, no session.
                            return match state {
                                GroupState::PreparingRebalance => Err(KafkaError::RebalanceInProgress),
                                _ => Ok(()),
                            };
                        }
                        // `ClassicGroup.validateOffsetCommit`: a member that has its generation's JoinGroup
                        // answer but not its assignment is told to finish the rebalance first; in Stable and
                        // PreparingRebalance the commit keeps its session alive (`OffsetMetadataManager
                        // .commitOffset`).
                        match state {
                            GroupState::CompletingRebalance => Err(KafkaError::RebalanceInProgress),
                            GroupState::Stable | GroupState::PreparingRebalance => {
                                member.expires_ms = now_ms + member.session_timeout_ms;
                                Ok(())
                            }
                            GroupState::Empty => Ok(()),
                        }
                    })
                };
                if check.is_ok() {
                    // The commits take effect as the broker appends them (`replay_offset_commits`).
                    let records = offsets.iter().map(|(tp, o)| OffsetsRecord::offset(&group_id, tp, o)).collect();
                    let answer = Some(asker.clone());
                    self.writes.push(GroupWrite { group_id: group_id.clone(), records, answer, stored: None });
                }
                GroupMessage::OffsetCommitResponse { results: offsets.into_iter().map(|(tp, _)| (tp, check)).collect() }
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

    /// `fetchOffsets` / `fetchAllOffsets` at `committed_offset` of the group's partition (`None`: every
    /// record, as a write operation sees them): each partition's committed offset, or
    /// UNSTABLE_OFFSET_COMMIT under `require_stable` while a transaction's offset for it is pending (KIP-447).
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        partitions: Option<Vec<TopicPartition>>,
        require_stable: bool,
        committed_offset: Option<Offset>,
    ) -> Vec<(TopicPartition, Result<Option<CommittedOffset>, KafkaError>)> {
        let latest = self.groups.get(group_id).map(|g| &g.offsets);
        let all = partitions.is_none();
        let tps: Vec<TopicPartition> = match partitions {
            Some(ps) => ps,
            None => latest.into_iter().flatten().map(|(tp, _)| tp.clone()).collect(),
        };
        tps.into_iter()
            .map(|tp| {
                let o = if require_stable && self.has_pending(group_id, &tp) {
                    Err(KafkaError::UnstableOffsetCommit)
                } else {
                    Ok(match committed_offset {
                        Some(at) => self.committed_at(group_id, &tp, at),
                        None => latest.and_then(|c| c.get(&tp)).cloned(),
                    })
                };
                (tp, o)
            })
            // `fetchAllOffsets` lists only the partitions with an offset at that point.
            .filter(|(_, o)| !(all && matches!(o, Ok(None))))
            .collect()
    }

    fn next_record(&mut self, txn: Option<(ProducerId, Offset)>) -> CommitRecord {
        self.records_written += 1;
        CommitRecord { order: self.records_written, txn }
    }

    /// Stores a committed offset; a record older than the one already there loses (`replayEndTransactionMarker`
    /// keeps the most recent commit record when transactional and plain commits mix).
    /// `at`: where the record that commits it is in the group's partition (`None`: nowhere, as under
    /// `groups-kept-in-memory`, so it counts as committed at once).
    fn materialize(
        &mut self,
        group_id: &str,
        tp: &TopicPartition,
        offset: CommittedOffset,
        record: CommitRecord,
        at: Option<Offset>,
    ) {
        let group = self.groups.entry(group_id.to_string()).or_insert_with(Group::new);
        if group.records.get(tp).is_some_and(|r| r.order > record.order) {
            return;
        }
        if let Some(at) = at {
            let before = group.offsets.get(tp).cloned();
            self.uncommitted.push(Uncommitted { at, group: group_id.to_string(), tp: tp.clone(), before });
        }
        group.offsets.insert(tp.clone(), offset);
        group.records.insert(tp.clone(), record);
    }

    /// The broker appended `records` at `first` of their group's partition (`None`: not written, under
    /// `groups-kept-in-memory`): the offset commits among them take effect, each at its record's offset.
    /// A commit whose append failed never does (the runtime reverts its state to the last written offset).
    pub fn replay_offset_commits(&mut self, records: &[OffsetsRecord], first: Option<Offset>) {
        for (i, r) in records.iter().enumerate() {
            if let OffsetsRecord::Offset { group, partition, offset, metadata } = r {
                let record = self.next_record(None);
                let at = first.map(|f| f + i as Offset);
                self.materialize(group, partition, (*offset, metadata.clone()), record, at);
            }
        }
    }

    /// `offsets_partition`'s HW reached `high_watermark`: what its records below it changed is committed.
    pub fn settle(&mut self, offsets_partition: &TopicPartition, high_watermark: Offset) {
        self.uncommitted.retain(|u| u.at >= high_watermark || offsets_partition_for(&u.group) != *offsets_partition);
    }

    /// The offset committed for `tp` as of `committed_offset` of the group's partition: the value before
    /// the first change at or above it, or the latest.
    fn committed_at(&self, group_id: &str, tp: &TopicPartition, committed_offset: Offset) -> Option<CommittedOffset> {
        match self.uncommitted.iter().find(|u| u.at >= committed_offset && u.group == group_id && u.tp == *tp) {
            Some(u) => u.before.clone(),
            None => self.groups.get(group_id).and_then(|g| g.offsets.get(tp)).cloned(),
        }
    }

    /// `hasPendingTransactionalOffsets`.
    pub fn has_pending(&self, group_id: &str, tp: &TopicPartition) -> bool {
        let key = (group_id.to_string(), tp.clone());
        self.pending_txn_offsets.values().any(|p| p.contains_key(&key))
    }

    /// `validateTransactionalOffsetCommit` with `ClassicGroup.validateOffsetCommit(isTransactional=true)`:
    /// an unknown group is created as a simple group for a commit without generation (-1), else
    /// ILLEGAL_GENERATION; a commit that names a member or a generation must match them; the group's
    /// state is not enforced.
    pub fn validate_txn_offset_commit(
        &mut self,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
    ) -> Result<(), KafkaError> {
        if group_id.is_empty() {
            return Err(KafkaError::InvalidGroupId);
        }
        let Some(group) = self.groups.get(group_id) else {
            if generation_id < 0 {
                self.groups.insert(group_id.to_string(), Group::new());
                return Ok(());
            }
            return Err(KafkaError::IllegalGeneration);
        };
        if generation_id < 0 && group.state == GroupState::Empty {
            return Ok(());
        }
        if generation_id >= 0 || !member_id.is_empty() {
            if !group.members.contains_key(member_id) {
                return Err(KafkaError::UnknownMemberId);
            }
            if generation_id != group.generation_id {
                return Err(KafkaError::IllegalGeneration);
            }
        }
        Ok(())
    }

    /// A TxnOffsetCommit's batch is in the log at `log_offset` of the group's `__consumer_offsets` partition:
    /// its offsets wait for the transaction's marker (`replay` of a transactional offset commit record).
    pub fn stage_txn_offsets(
        &mut self,
        group_id: &str,
        producer_id: ProducerId,
        log_offset: Offset,
        offsets: &[(TopicPartition, CommittedOffset)],
        mutations: &crate::mutation::Mutations,
    ) {
        for (tp, o) in offsets {
            let record = self.next_record(Some((producer_id, log_offset)));
            if mutations.has(Mutation::TxnOffsetsVisibleBeforeCommit) {
                // The bug: the offsets are committed at once, before the transaction is decided.
                self.materialize(group_id, tp, o.clone(), record, Some(log_offset));
                continue;
            }
            let pending = PendingOffset { offset: o.clone(), record };
            self.pending_txn_offsets
                .entry(producer_id)
                .or_default()
                .insert((group_id.to_string(), tp.clone()), pending);
        }
    }

    /// `replayEndTransactionMarker`: the marker of `producer_id` was written to `offsets_partition` at
    /// `marker_offset`; the pending offsets of the groups that partition holds are committed or dropped.
    pub fn complete_transaction(
        &mut self,
        producer_id: ProducerId,
        result: TransactionResult,
        offsets_partition: &TopicPartition,
        marker_offset: Offset,
    ) {
        let Some(pending) = self.pending_txn_offsets.get_mut(&producer_id) else { return };
        let (done, rest): (BTreeMap<_, _>, BTreeMap<_, _>) = std::mem::take(pending)
            .into_iter()
            .partition(|((group, _), _)| offsets_partition_for(group) == *offsets_partition);
        if rest.is_empty() {
            self.pending_txn_offsets.remove(&producer_id);
        } else {
            self.pending_txn_offsets.insert(producer_id, rest);
        }
        if result == TransactionResult::Commit {
            for ((group, tp), p) in done {
                self.materialize(&group, &tp, p.offset, p.record, Some(marker_offset));
            }
        }
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

    /// SyncGroup: `(generation, member, assignments)`, the assignments from the leader only.
    #[allow(clippy::too_many_arguments)]
    fn sync(
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
}

/// `setAndPropagateAssignment`: the group is Stable, and each member waiting on SyncGroup gets its share.
fn propagate_assignment(group: &mut Group, protocol: &str, me: &NodeId, effects: &mut Effects) {
    group.state = GroupState::Stable;
    for m in group.members.values_mut() {
        if let Some((to, c)) = m.sync_waiter.take() {
            let result = Ok((protocol.to_string(), m.assignment.clone()));
            answer(effects, me, &to, c, GroupMessage::SyncGroupResponse { result });
        }
    }
}

/// A member left or expired: the rest must rebalance, or the group is empty.
fn member_left(group: &mut Group, now_ms: TimeMs, me: &NodeId, effects: &mut Effects) {
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
