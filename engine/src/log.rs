//! A partition's log: segments of record batches, the high watermark, the last stable offset and the
//! aborted-transaction index (Kafka's `UnifiedLog`, `LocalLog`, `LogSegment`, `TransactionIndex`).

use crate::error::KafkaError;
use crate::leader_epoch_cache::{EpochEndOffset, LeaderEpochFileCache};
use crate::mutation::{Mutation, Mutations};
use crate::producer_state::{AppendCheck, AppendOrigin, CompletedTxn, ProducerStateManager};
use crate::protocol::fetch::{AbortedTransaction, FetchPartitionData};
use crate::record::{BatchBody, BatchProducer, CompressionType, EndTxnMarker, ProduceBatch, Record, RecordBatch};
use crate::rename::{Names, Rename};
use crate::types::{IsolationLevel, Offset, ProducerEpoch, ProducerId, TimeMs, TransactionVersion};
use serde::{Deserialize, Serialize};

/// An aborted-transaction index entry (`AbortedTxn`, 34 bytes on disk).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AbortedTxn {
    pub producer_id: ProducerId,
    /// The transaction's first data offset on this partition.
    pub first_offset: Offset,
    /// The ABORT marker's offset.
    pub last_offset: Offset,
    /// The LSO right after the marker: the first offset of the earliest other ongoing transaction, else
    /// `last_offset + 1`. A fetch may stop scanning the index at an entry with this at or past its upper bound.
    pub last_stable_offset: Offset,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogSegment {
    pub base_offset: Offset,
    pub batches: Vec<RecordBatch>,
    /// This segment's `TransactionIndex`: entries for aborted transactions whose marker is in this segment.
    pub txn_index: Vec<AbortedTxn>,
}

/// What `append` reports (`LogAppendInfo`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogAppendInfo {
    pub first_offset: Offset,
    pub last_offset: Offset,
    /// A retried batch found among the last five: nothing was appended, these are the original offsets.
    pub duplicate: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionLog {
    segments: Vec<LogSegment>,
    log_start_offset: Offset,
    log_end_offset: Offset,
    high_watermark: Offset,
    /// The highest HW since producer state was last rebuilt. `removeUnreplicatedTransactions` has let go
    /// of every transaction whose marker lies below it, and a HW that moves back (a follower taking a
    /// lagging new leader's HW: `UnifiedLog.updateHighWatermarkMetadata` only warns) brings none back.
    high_watermark_peak: Offset,
    pub producer_state: ProducerStateManager,
    /// Which leader epoch began where (`UnifiedLog.leaderEpochCache`).
    pub leader_epoch_cache: LeaderEpochFileCache,
}

impl Rename for PartitionLog {
    fn rename(&mut self, names: Names<'_>) {
        for segment in &mut self.segments {
            segment.batches.rename(names);
        }
    }
}

impl Default for PartitionLog {
    fn default() -> Self {
        PartitionLog::new()
    }
}

impl PartitionLog {
    pub fn new() -> Self {
        PartitionLog {
            segments: vec![LogSegment { base_offset: 0, batches: Vec::new(), txn_index: Vec::new() }],
            log_start_offset: 0,
            log_end_offset: 0,
            high_watermark: 0,
            high_watermark_peak: 0,
            producer_state: ProducerStateManager::default(),
            leader_epoch_cache: LeaderEpochFileCache::default(),
        }
    }

    /// The epoch this log's own appends are written under: the latest its leader recorded (0 before any).
    fn current_leader_epoch(&self) -> i32 {
        self.leader_epoch_cache.latest_epoch().unwrap_or(0)
    }

    /// `UnifiedLog.maybeAssignEpochStartOffset`: this replica leads from `epoch` on, starting at its log end.
    pub fn assign_leader_epoch(&mut self, epoch: i32) {
        self.leader_epoch_cache.assign(epoch, self.log_end_offset);
    }

    /// `UnifiedLog.endOffsetForEpoch`: where `epoch` (or the largest epoch below it) ends in this log.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Option<EpochEndOffset> {
        self.leader_epoch_cache.end_offset_for(epoch, self.log_end_offset)
    }

    /// `Partition.readRecords`' check of a follower's fetch on this leader's log (Fetch v12+): where the
    /// follower's last fetched epoch ends here (`lastOffsetForLeaderEpoch`), if that is before its fetch
    /// offset or only an older epoch is known here; `None` when the follower's log is a prefix of this one.
    pub fn diverging_epoch(
        &self,
        fetch_offset: Offset,
        last_fetched_epoch: Option<i32>,
    ) -> Result<Option<EpochEndOffset>, KafkaError> {
        let Some(fetched) = last_fetched_epoch else { return Ok(None) };
        let end = self.end_offset_for_epoch(fetched).ok_or(KafkaError::OffsetOutOfRange)?;
        if fetch_offset < self.log_start_offset {
            return Err(KafkaError::OffsetOutOfRange);
        }
        Ok((end.epoch < fetched || end.end_offset < fetch_offset).then_some(end))
    }

    pub fn log_start_offset(&self) -> Offset {
        self.log_start_offset
    }
    pub fn log_end_offset(&self) -> Offset {
        self.log_end_offset
    }
    pub fn high_watermark(&self) -> Offset {
        self.high_watermark
    }

    /// The highest HW since producer state was last rebuilt (see the field).
    pub fn high_watermark_peak(&self) -> Offset {
        self.high_watermark_peak
    }
    pub fn segments(&self) -> &[LogSegment] {
        &self.segments
    }
    pub fn batches(&self) -> impl Iterator<Item = &RecordBatch> {
        self.segments.iter().flat_map(|s| s.batches.iter())
    }
    /// Every index entry, oldest segment first.
    pub fn aborted_index(&self) -> impl Iterator<Item = &AbortedTxn> {
        self.segments.iter().flat_map(|s| s.txn_index.iter())
    }

    /// `firstUnstableOffset`, clamped to the log start offset.
    pub fn first_unstable_offset(&self, mutations: &Mutations) -> Option<Offset> {
        self.producer_state.first_unstable_offset(mutations).map(|o| o.max(self.log_start_offset))
    }

    /// `UnifiedLog.lastStableOffset`: the first unstable offset if it is below the high watermark, else the HW.
    pub fn last_stable_offset(&self, mutations: &Mutations) -> Offset {
        if mutations.has(Mutation::LsoNotClampedToHw) {
            // The bug: visibility computed against the log end, as if every append were replicated.
            return self.first_unstable_offset(mutations).unwrap_or(self.log_end_offset);
        }
        match self.first_unstable_offset(mutations) {
            Some(o) if o < self.high_watermark => o,
            _ => self.high_watermark,
        }
    }

    /// Appends a producer's batch as leader (or follower, with `AppendOrigin::Replication`).
    pub fn append_data(
        &mut self,
        batch: &ProduceBatch,
        origin: AppendOrigin,
        now_ms: TimeMs,
        mutations: &Mutations,
    ) -> Result<LogAppendInfo, KafkaError> {
        if batch.values.is_empty() {
            return Err(KafkaError::InvalidRequest);
        }
        let count = batch.values.len() as u64;
        if batch.is_transactional && batch.producer.is_none() {
            return Err(KafkaError::InvalidRequest);
        }
        if let Some(p) = &batch.producer {
            let check = self.producer_state.check_data_batch(p, batch.is_transactional, count, origin, mutations)?;
            if let AppendCheck::Duplicate(meta) = check {
                if mutations.has(Mutation::DuplicateReturnsWrongOffsets) {
                    // The bug answers with where the batch would go now, not where it went.
                    let first = self.log_end_offset;
                    return Ok(LogAppendInfo { first_offset: first, last_offset: first + count - 1, duplicate: true });
                }
                return Ok(LogAppendInfo {
                    first_offset: meta.first_offset,
                    last_offset: meta.last_offset,
                    duplicate: true,
                });
            }
        }
        let base = self.log_end_offset;
        let records = batch
            .values
            .iter()
            .enumerate()
            .map(|(i, v)| Record { offset: base + i as u64, value: v.clone() })
            .collect();
        let rb = RecordBatch {
            base_offset: base,
            last_offset: base + count - 1,
            producer: batch.producer,
            is_transactional: batch.is_transactional,
            body: BatchBody::Data(records),
            partition_leader_epoch: self.current_leader_epoch(),
            // `LogValidator`: with topic `compression.type=producer` (the default) the batch keeps its codec.
            compression: batch.compression,
        };
        if rb.producer.is_some() {
            self.producer_state.update_data(&rb, now_ms);
        }
        let info = LogAppendInfo { first_offset: rb.base_offset, last_offset: rb.last_offset, duplicate: false };
        self.push_batch(rb);
        Ok(info)
    }

    /// `UnifiedLog.hasOngoingTransaction`: this producer has a transaction open here at this epoch. A newer
    /// epoch means the open one may have ended at its coordinator (TV2 bumps the epoch per transaction), so
    /// a batch at a newer epoch is verified like one that begins a transaction.
    pub fn has_ongoing_transaction(&self, producer_id: ProducerId, epoch: ProducerEpoch) -> bool {
        self.producer_state
            .entry(producer_id)
            .is_some_and(|e| e.current_txn_first_offset.is_some() && e.producer_epoch == epoch)
    }

    /// Appends a COMMIT/ABORT control batch (`ProducerAppendInfo.appendEndTxnMarker`, then `UnifiedLog.append`
    /// lines that update the index before completing the transaction, KAFKA-7866).
    // Kafka's `appendAsLeader` takes the same list (origin, transaction version, clock, config).
    #[allow(clippy::too_many_arguments)]
    pub fn append_marker(
        &mut self,
        producer_id: ProducerId,
        epoch: ProducerEpoch,
        marker: EndTxnMarker,
        origin: AppendOrigin,
        version: TransactionVersion,
        now_ms: TimeMs,
        mutations: &Mutations,
    ) -> Result<Offset, KafkaError> {
        self.producer_state.check_marker(producer_id, epoch, &marker, origin, version, mutations)?;
        let offset = self.log_end_offset;
        let rb = RecordBatch {
            base_offset: offset,
            last_offset: offset,
            producer: Some(BatchProducer { producer_id, epoch, base_sequence: -1 }),
            is_transactional: true,
            body: BatchBody::Control(Some(marker)),
            partition_leader_epoch: self.current_leader_epoch(),
            // `MemoryRecords.withEndTransactionMarker` writes a marker uncompressed.
            compression: CompressionType::None,
        };
        let completed = self.producer_state.update_marker(&rb, now_ms);
        self.push_batch(rb);
        if let Some(completed) = completed {
            self.complete_txn(&completed, self.segments.len() - 1, mutations);
        }
        Ok(offset)
    }

    /// `UnifiedLog.appendAsFollower`: a batch fetched from the leader, kept at the leader's offsets. Producer
    /// state, the ongoing transactions and the aborted index are rebuilt from it as the leader built them,
    /// so a follower's LSO and index follow from its own log.
    pub fn append_as_follower(&mut self, batch: &RecordBatch, now_ms: TimeMs, mutations: &Mutations) {
        self.push_batch(batch.clone());
        self.update_producer_state(batch, self.segments.len() - 1, now_ms, mutations);
    }

    /// `ProducerStateManager.update` for a batch already in segment `segment`, as an append or a reload does.
    fn update_producer_state(&mut self, batch: &RecordBatch, segment: usize, now_ms: TimeMs, mutations: &Mutations) {
        let completed = match &batch.body {
            BatchBody::Control(Some(_)) => self.producer_state.update_marker(batch, now_ms),
            BatchBody::Data(_) if batch.producer.is_some() => {
                self.producer_state.update_data(batch, now_ms);
                None
            }
            _ => None,
        };
        if let Some(completed) = completed {
            self.complete_txn(&completed, segment, mutations);
        }
    }

    /// `UnifiedLog.truncateTo`: drops every batch holding `offset` or later (whole batches, so the log may
    /// end below `offset`), the index entries of markers dropped, and the epochs that began there; then
    /// rebuilds producer state, the open and unreplicated transactions and the aborted index from what is
    /// left (`rebuildProducerState`), so the LSO follows from this log alone (KAFKA-12153). Returns whether
    /// anything was dropped.
    pub fn truncate_to(&mut self, offset: Offset, now_ms: TimeMs, mutations: &Mutations) -> bool {
        if offset >= self.log_end_offset {
            // `UnifiedLog.truncateTo`: the epoch cache is truncated even so. A broker that became leader
            // recorded its epoch at its log end and may have been replaced before appending: as a follower
            // it must not keep fetching with that epoch, which the new leader keeps calling diverging.
            if !mutations.has(Mutation::EpochCacheKeptOnNoopTruncation) {
                self.leader_epoch_cache.truncate_from_end(self.log_end_offset);
            }
            return false;
        }
        for segment in &mut self.segments {
            segment.batches.retain(|b| b.last_offset < offset);
        }
        while self.segments.len() > 1 && self.segments.last().is_some_and(|s| s.batches.is_empty()) {
            self.segments.pop();
        }
        let active = self.segments.last().expect("a log keeps one segment");
        self.log_end_offset = active.batches.last().map_or(active.base_offset, RecordBatch::next_offset);
        self.high_watermark = self.high_watermark.min(self.log_end_offset);
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset);
        if !mutations.has(Mutation::NoRebuildAfterTruncation) {
            self.rebuild_producer_state(now_ms, mutations);
        }
        self.assert_offsets(mutations);
        true
    }

    /// `UnifiedLog.rebuildProducerState` from the log start (this engine keeps no snapshots): producer
    /// entries, open and unreplicated transactions, and every segment's aborted index, replayed batch by
    /// batch. Verification entries are the leader's in-memory state and stay.
    fn rebuild_producer_state(&mut self, now_ms: TimeMs, mutations: &Mutations) {
        let verification = std::mem::take(&mut self.producer_state.verification_entries);
        self.producer_state = ProducerStateManager { verification_entries: verification, ..Default::default() };
        for s in 0..self.segments.len() {
            self.segments[s].txn_index.clear();
            for k in 0..self.segments[s].batches.len() {
                let batch = self.segments[s].batches[k].clone();
                self.update_producer_state(&batch, s, now_ms, mutations);
            }
        }
        self.producer_state.remove_unreplicated_transactions(self.high_watermark);
        self.high_watermark_peak = self.high_watermark;
    }

    fn complete_txn(&mut self, completed: &CompletedTxn, segment: usize, mutations: &Mutations) {
        if completed.is_aborted && !mutations.has(Mutation::NoAbortedIndexEntry) {
            let entry = AbortedTxn {
                producer_id: completed.producer_id,
                first_offset: completed.first_offset,
                last_offset: completed.last_offset,
                last_stable_offset: self.producer_state.last_stable_offset_for(completed),
            };
            let segment = &mut self.segments[segment];
            if let Some(prev) = segment.txn_index.last() {
                // `TransactionIndex.append`: last offsets strictly increase.
                assert!(prev.last_offset < entry.last_offset, "aborted index out of order: {prev:?} then {entry:?}");
            }
            segment.txn_index.push(entry);
        }
        self.producer_state.complete_txn(completed);
        self.producer_state.remove_unreplicated_transactions(self.high_watermark);
    }

    fn push_batch(&mut self, rb: RecordBatch) {
        assert_eq!(rb.base_offset, self.log_end_offset, "batches are appended at the log end");
        // `UnifiedLog.append`: each batch's epoch starts at its base offset unless the cache has it already.
        self.leader_epoch_cache.assign(rb.partition_leader_epoch, rb.base_offset);
        self.log_end_offset = rb.next_offset();
        self.segments.last_mut().expect("a log has an active segment").batches.push(rb);
    }

    /// `Partition.maybeIncrementLeaderHW` with a single replica, or a follower's HW from the leader.
    pub fn update_high_watermark(&mut self, offset: Offset, mutations: &Mutations) {
        let hw = offset.clamp(self.log_start_offset, self.log_end_offset);
        self.high_watermark = hw;
        self.high_watermark_peak = self.high_watermark_peak.max(hw);
        self.producer_state.remove_unreplicated_transactions(hw);
        self.assert_offsets(mutations);
    }

    /// `LSO <= HW <= LEO` and `log start <= LSO`, asserted after every change (TigerBeetle style).
    pub fn assert_offsets(&self, mutations: &Mutations) {
        let lso = self.last_stable_offset(mutations);
        assert!(self.log_start_offset <= lso, "log start {} > LSO {lso}", self.log_start_offset);
        // Under the mutation that breaks it on purpose, the invariant checkers must catch it instead.
        if !mutations.has(Mutation::LsoNotClampedToHw) {
            assert!(lso <= self.high_watermark, "LSO {lso} > HW {}", self.high_watermark);
        }
        assert!(self.high_watermark <= self.log_end_offset, "HW {} > LEO {}", self.high_watermark, self.log_end_offset);
        assert!(
            self.high_watermark <= self.high_watermark_peak,
            "HW {} above its peak {}",
            self.high_watermark,
            self.high_watermark_peak
        );
    }

    /// Starts a new active segment at the log end (`UnifiedLog.roll`); a no-op if the active one is empty.
    pub fn roll_segment(&mut self) {
        let active = self.segments.last().expect("a log has an active segment");
        if active.batches.is_empty() {
            return;
        }
        self.segments.push(LogSegment { base_offset: self.log_end_offset, batches: Vec::new(), txn_index: Vec::new() });
    }

    /// DeleteRecords (`UnifiedLog.maybeIncrementLogStartOffset`): raises the log start offset, then drops the
    /// segments wholly below it with their index entries, as retention does.
    pub fn delete_records(&mut self, before_offset: Offset, mutations: &Mutations) -> Result<Offset, KafkaError> {
        if before_offset > self.high_watermark {
            return Err(KafkaError::OffsetOutOfRange);
        }
        if before_offset > self.log_start_offset {
            self.log_start_offset = before_offset;
            // `ProducerStateManager.onLogStartOffsetIncremented` removes completed transactions only: an
            // open one that began below the new start keeps holding the LSO, at the log start.
            self.producer_state.remove_unreplicated_transactions(before_offset);
            if mutations.has(Mutation::LogStartDropsOpenTransactions) {
                self.producer_state.forget_open_transactions_below(before_offset);
            }
        }
        while self.segments.len() > 1 && self.segments[1].base_offset <= self.log_start_offset {
            self.segments.remove(0);
        }
        self.assert_offsets(mutations);
        Ok(self.log_start_offset)
    }

    /// `ListOffsets` LATEST per isolation (`Partition.fetchOffsetForTimestamp`, KAFKA-5522).
    pub fn latest_offset(&self, isolation: IsolationLevel, mutations: &Mutations) -> Offset {
        match isolation {
            IsolationLevel::ReadCommitted => self.last_stable_offset(mutations),
            IsolationLevel::ReadUncommitted => self.high_watermark,
        }
    }

    fn segment_index_for(&self, offset: Offset) -> usize {
        // The floor segment: the last one whose base offset is at or below `offset`.
        self.segments.iter().rposition(|s| s.base_offset <= offset).unwrap_or(0)
    }

    /// `TransactionIndex.collectAbortedTxns` across segments (`LocalLog.collectAbortedTransactions`): entries with
    /// `last_offset >= from` and `first_offset < upper_bound`, stopping at the first entry whose
    /// `last_stable_offset >= upper_bound`.
    pub fn collect_aborted_txns(&self, from: Offset, upper_bound: Offset) -> Vec<AbortedTxn> {
        let mut out = Vec::new();
        for segment in &self.segments[self.segment_index_for(from)..] {
            for entry in &segment.txn_index {
                if entry.last_offset >= from && entry.first_offset < upper_bound {
                    out.push(*entry);
                }
                if entry.last_stable_offset >= upper_bound {
                    return out;
                }
            }
        }
        out
    }

    /// `UnifiedLog.read`: whole batches from the segment holding `fetch_offset`, below the isolation's bound
    /// (HW, LSO, or LEO for a follower when `isolation` is `None`), with the aborted list for read_committed.
    pub fn read(
        &self,
        fetch_offset: Offset,
        isolation: Option<IsolationLevel>,
        mutations: &Mutations,
    ) -> Result<FetchPartitionData, KafkaError> {
        if fetch_offset < self.log_start_offset || fetch_offset > self.log_end_offset {
            return Err(KafkaError::OffsetOutOfRange);
        }
        let lso = self.last_stable_offset(mutations);
        let mut max_offset = match isolation {
            None => self.log_end_offset,
            Some(IsolationLevel::ReadUncommitted) => self.high_watermark,
            Some(IsolationLevel::ReadCommitted) if mutations.has(Mutation::ReadCommittedBoundedByHw) => {
                self.high_watermark
            }
            Some(IsolationLevel::ReadCommitted) => lso,
        };
        if isolation == Some(IsolationLevel::ReadCommitted) && mutations.has(Mutation::LsoInclusive) {
            // The bug reads the LSO as the last readable offset: the batch starting there leaks.
            let at_lso = self.segments.iter().flat_map(|s| &s.batches).find(|b| b.base_offset == max_offset);
            max_offset = at_lso.map_or(max_offset, |b| b.last_offset + 1).min(self.high_watermark);
        }
        // The bound is a position, the start of the batch holding it (`UnifiedLog.fetchHighWatermarkMetadata`,
        // `LogSegment.translateOffset`), so `LocalLog.read` stops before a batch that straddles it.
        let below_bound = |b: &RecordBatch| match mutations.has(Mutation::BatchStraddlingBoundReturned) {
            true => b.base_offset < max_offset,
            false => b.last_offset < max_offset,
        };
        let mut batches = Vec::new();
        let mut upper_bound = self.log_end_offset;
        if fetch_offset < max_offset {
            let first = self.segment_index_for(fetch_offset);
            for (i, segment) in self.segments.iter().enumerate().skip(first) {
                let found: Vec<&RecordBatch> =
                    segment.batches.iter().filter(|b| b.last_offset >= fetch_offset && below_bound(b)).collect();
                if found.is_empty() {
                    continue;
                }
                batches = found.into_iter().cloned().collect();
                upper_bound = self.segments.get(i + 1).map(|s| s.base_offset).unwrap_or(self.log_end_offset);
                break;
            }
        }
        let want_aborted = match isolation {
            Some(IsolationLevel::ReadCommitted) => true,
            Some(IsolationLevel::ReadUncommitted) => mutations.has(Mutation::AbortedListForReadUncommitted),
            None => false,
        };
        let aborted_transactions = want_aborted.then(|| {
            if batches.is_empty() || mutations.has(Mutation::SkipAbortedIndexOnFetch) {
                Vec::new()
            } else {
                let from = fetch_offset.max(self.log_start_offset);
                self.collect_aborted_txns(from, upper_bound)
                    .into_iter()
                    .map(|t| AbortedTransaction { producer_id: t.producer_id, first_offset: t.first_offset })
                    .collect()
            }
        });
        Ok(FetchPartitionData {
            high_watermark: self.high_watermark,
            last_stable_offset: lso,
            log_start_offset: self.log_start_offset,
            batches,
            aborted_transactions,
        })
    }
}
