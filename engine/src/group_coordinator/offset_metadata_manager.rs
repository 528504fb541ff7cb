//! Committed offsets (`OffsetMetadataManager`): the records of `__consumer_offsets` (`OffsetsRecord`), a
//! commit taking effect as its record is appended (`replay_offset_commits`), and OffsetFetch. What records
//! above the HW changed stays visible only to writes: OffsetFetch reads at the HW (`Uncommitted`,
//! `settle`), as the runtime's reads at the last committed offset do.
//!
//! Transactional offsets (KIP-98, KIP-447): a TxnOffsetCommit is written to the group's
//! `__consumer_offsets` partition as a batch of the producer's transaction (the runtime does that) and
//! held here as pending, per producer id, until the transaction's marker reaches that partition: a COMMIT
//! materializes the offsets, an ABORT drops them. Meanwhile OffsetFetch with `require_stable` answers
//! UNSTABLE_OFFSET_COMMIT for those partitions.

use super::{Group, GroupCoordinator, GroupMetadata, GroupState, GroupWrite, Waiter};
use crate::config::EngineConfig;
use crate::error::KafkaError;
use crate::mutation::Mutation;
use crate::protocol::group::CommittedOffset;
use crate::topic::offsets_partition_for;
use crate::types::{Offset, ProducerId, TimeMs, TopicPartition, TransactionResult};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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

    pub(super) fn group(&self) -> &str {
        match self {
            OffsetsRecord::Offset { group, .. } | OffsetsRecord::Group { group, .. } => group,
        }
    }
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

/// What a committed offset was before a record not yet below its partition's HW changed it: a read at the
/// last committed offset sees `before` until the HW passes `at` (the coordinator runtime's timeline
/// snapshots, `CoordinatorRuntime.scheduleReadOperation`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct Uncommitted {
    at: Offset,
    pub(super) group: String,
    tp: TopicPartition,
    before: Option<CommittedOffset>,
}

impl GroupCoordinator {
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

    pub(super) fn next_record(&mut self, txn: Option<(ProducerId, Offset)>) -> CommitRecord {
        self.records_written += 1;
        CommitRecord { order: self.records_written, txn }
    }

    /// Stores a committed offset; a record older than the one already there loses (`replayEndTransactionMarker`
    /// keeps the most recent commit record when transactional and plain commits mix).
    /// `at`: where the record that commits it is in the group's partition (`None`: nowhere, as under
    /// `groups-kept-in-memory`, so it counts as committed at once).
    pub(super) fn materialize(
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
        mutations: &crate::mutation::Mutations,
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
        if mutations.has(Mutation::TxnOffsetCommitSkipsGenerationCheck) {
            // The bug: any member and generation may commit in a transaction (no KIP-447 fencing).
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
        mutations: &crate::mutation::Mutations,
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
        // The bug `OffsetsOnAbort`: an ABORT marker commits the pending offsets as a COMMIT does.
        if result == TransactionResult::Commit || mutations.has(Mutation::OffsetsOnAbort) {
            for ((group, tp), p) in done {
                self.materialize(&group, &tp, p.offset, p.record, Some(marker_offset));
            }
        }
    }

    /// OffsetCommit (`OffsetMetadataManager.commitOffset`): checked against the group, then written; the
    /// answer waits for the write (`GroupWrite::answer`).
    pub(super) fn commit_offsets(
        &mut self,
        now_ms: TimeMs,
        config: &EngineConfig,
        asker: &Waiter,
        group_id: &str,
        (generation_id, member_id, offsets): (i32, &str, Vec<(TopicPartition, CommittedOffset)>),
    ) -> Vec<(TopicPartition, Result<(), KafkaError>)> {
        let check = if group_id.is_empty() {
            Err(KafkaError::InvalidGroupId)
        } else if generation_id < 0 && member_id.is_empty() {
            // `assign()` consumers commit outside the protocol, only while nobody is a member.
            let group = self.groups.entry(group_id.to_string()).or_insert_with(Group::new);
            if group.members.is_empty() {
                Ok(())
            } else {
                Err(KafkaError::UnknownMemberId)
            }
        } else {
            self.group_member(group_id, generation_id, member_id).and_then(|(state, member)| {
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
            let records = offsets.iter().map(|(tp, o)| OffsetsRecord::offset(group_id, tp, o)).collect();
            let answer = Some(asker.clone());
            self.writes.push(GroupWrite { group_id: group_id.to_string(), records, answer, stored: None });
        }
        offsets.into_iter().map(|(tp, _)| (tp, check)).collect()
    }
}
