//! Per-partition producer state: Kafka's `ProducerStateManager`, `ProducerStateEntry` and
//! `ProducerAppendInfo` (`appendDataBatch`, `appendEndTxnMarker`; `firstUnstableOffset`).

use crate::error::KafkaError;
use crate::mutation::{Mutation, Mutations};
use crate::record::{BatchProducer, EndTxnMarker, RecordBatch};
use crate::types::{
    CoordinatorEpoch, Offset, ProducerEpoch, ProducerId, TimeMs, TransactionResult, TransactionVersion,
    NO_PRODUCER_EPOCH,
};
use std::collections::{BTreeMap, VecDeque};

/// `ProducerStateEntry.NUM_BATCHES_TO_RETAIN`: dedup covers the last five batches, matching
/// `max.in.flight.requests.per.connection <= 5`.
pub const NUM_BATCHES_TO_RETAIN: usize = 5;

/// Who is appending: the checks differ (`AppendOrigin`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppendOrigin {
    /// A producer's Produce request: full epoch, sequence and duplicate checks.
    Client,
    /// A WriteTxnMarkers request from the transaction coordinator: epoch checks only.
    Coordinator,
    /// A follower copying the leader: no checks (Kafka only warns).
    Replication,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BatchMetadata {
    pub first_seq: i32,
    pub last_seq: i32,
    pub first_offset: Offset,
    pub last_offset: Offset,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProducerStateEntry {
    pub producer_id: ProducerId,
    /// `NO_PRODUCER_EPOCH` until the first batch or marker.
    pub producer_epoch: ProducerEpoch,
    /// `-1` until the first marker.
    pub coordinator_epoch: CoordinatorEpoch,
    pub last_timestamp_ms: TimeMs,
    pub current_txn_first_offset: Option<Offset>,
    pub batch_metadata: VecDeque<BatchMetadata>,
}

impl ProducerStateEntry {
    fn empty(producer_id: ProducerId) -> Self {
        ProducerStateEntry {
            producer_id,
            producer_epoch: NO_PRODUCER_EPOCH,
            coordinator_epoch: -1,
            last_timestamp_ms: 0,
            current_txn_first_offset: None,
            batch_metadata: VecDeque::new(),
        }
    }

    pub fn last_seq(&self) -> Option<i32> {
        self.batch_metadata.back().map(|b| b.last_seq)
    }

    /// `maybeUpdateProducerEpoch`: a new epoch clears the retained batches, so dedup works within one epoch.
    fn maybe_update_producer_epoch(&mut self, epoch: ProducerEpoch) {
        if self.producer_epoch != epoch {
            self.batch_metadata.clear();
            self.producer_epoch = epoch;
        }
    }

    fn add_batch(&mut self, meta: BatchMetadata) {
        self.batch_metadata.push_back(meta);
        if self.batch_metadata.len() > NUM_BATCHES_TO_RETAIN {
            self.batch_metadata.pop_front();
        }
    }

    fn find_duplicate(&self, epoch: ProducerEpoch, first_seq: i32, last_seq: i32) -> Option<BatchMetadata> {
        if epoch != self.producer_epoch {
            return None;
        }
        self.batch_metadata.iter().find(|b| b.first_seq == first_seq && b.last_seq == last_seq).copied()
    }
}

/// `producer.id.expiration.ms` (default 86400000): an idle `VerificationStateEntry` is dropped after this.
pub const PRODUCER_ID_EXPIRATION_MS: TimeMs = 86_400_000;
/// `producer.id.expiration.check.interval.ms` (default 600000): how often `removeExpiredProducers` runs.
pub const PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS: TimeMs = 600_000;

/// KIP-890's `VerificationStateEntry`: made when the leader starts verifying a producer's first
/// transactional batch on this partition, shared by every verification until that producer's next
/// transactional append or marker here. While it exists, no batch of the producer may start above the
/// lowest sequence verified at the entry's epoch, so a later batch cannot land before an earlier one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VerificationStateEntry {
    pub timestamp_ms: TimeMs,
    /// The `VerificationGuard`: an append needs the guard its verification was started with.
    pub guard: u64,
    pub lowest_sequence: i32,
    pub epoch: ProducerEpoch,
    /// Made for a transaction version 2 write (Produce v12+): such a producer with no state here must
    /// start at sequence 0 (KAFKA-18202, `VerificationStateEntry.supportsEpochBump`).
    pub supports_epoch_bump: bool,
}

impl VerificationStateEntry {
    /// `maybeUpdateLowestSequenceAndEpoch`: a higher epoch restarts the entry's sequence; the same
    /// epoch keeps the lowest; a lower epoch changes nothing.
    fn maybe_update_lowest_sequence_and_epoch(&mut self, sequence: i32, epoch: ProducerEpoch) {
        if epoch > self.epoch {
            self.lowest_sequence = sequence;
            self.epoch = epoch;
        } else if epoch == self.epoch {
            self.lowest_sequence = self.lowest_sequence.min(sequence);
        }
    }
}

/// An open (or decided but not yet stable) transaction on this partition (`TxnMetadata`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TxnMetadata {
    pub producer_id: ProducerId,
    pub first_offset: Offset,
    /// The marker offset, once the marker is in the log.
    pub last_offset: Option<Offset>,
}

/// A transaction closed by a marker on this partition (`CompletedTxn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CompletedTxn {
    pub producer_id: ProducerId,
    pub first_offset: Offset,
    pub last_offset: Offset,
    pub is_aborted: bool,
}

/// The leader's verdict on a batch before offsets are assigned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppendCheck {
    Append,
    /// Same (epoch, first seq, last seq) as a retained batch: nothing is appended, the original offsets are returned.
    Duplicate(BatchMetadata),
}

#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProducerStateManager {
    pub producers: BTreeMap<ProducerId, ProducerStateEntry>,
    /// Transactions with data in the log and no marker, keyed by first offset.
    pub ongoing_txns: BTreeMap<Offset, TxnMetadata>,
    /// Transactions whose marker is in the log but not yet below the high watermark, keyed by first offset.
    pub unreplicated_txns: BTreeMap<Offset, TxnMetadata>,
    /// In memory only (a restart loses them): one per producer with a verification under way here.
    pub verification_entries: BTreeMap<ProducerId, VerificationStateEntry>,
}

/// `ProducerAppendInfo.inSequence`.
fn in_sequence(last_seq: i32, next_seq: i32) -> bool {
    next_seq as i64 == last_seq as i64 + 1 || (next_seq == 0 && last_seq == i32::MAX)
}

impl ProducerStateManager {
    pub fn entry(&self, producer_id: ProducerId) -> Option<&ProducerStateEntry> {
        self.producers.get(&producer_id)
    }

    /// Validates a data batch from `origin` (`UnifiedLog.analyzeAndValidateProducerState` and
    /// `ProducerAppendInfo.append`): duplicate first, then epoch, sequence and transaction state.
    pub fn check_data_batch(
        &self,
        producer: &BatchProducer,
        is_transactional: bool,
        record_count: u64,
        origin: AppendOrigin,
        mutations: &Mutations,
    ) -> Result<AppendCheck, KafkaError> {
        assert!(record_count > 0, "a data batch holds at least one record");
        let empty = ProducerStateEntry::empty(producer.producer_id);
        let entry = self.producers.get(&producer.producer_id).unwrap_or(&empty);
        let first_seq = producer.base_sequence;
        let last_seq = crate::record::increment_sequence(first_seq, record_count as i64 - 1);
        if origin == AppendOrigin::Client {
            if let Some(dup) = entry.find_duplicate(producer.epoch, first_seq, last_seq) {
                if mutations.has(Mutation::NoDedup) {
                    // The bug: a retried batch is taken for a new one and appended again.
                    return Ok(AppendCheck::Append);
                }
                return Ok(AppendCheck::Duplicate(dup));
            }
        }
        if origin != AppendOrigin::Replication {
            self.check_producer_epoch(entry, producer.epoch, mutations)?;
        }
        if origin == AppendOrigin::Client {
            // `checkSequence`: a batch that would begin the transaction here may not start above the lowest
            // sequence under verification. Once a transaction is open here the entry is a stale one (a
            // fenced zombie's verification) and guards nothing (derived: the proptests' zombie case).
            let verifying = self.verification_entries.get(&producer.producer_id);
            if verifying.is_some_and(|v| first_seq > v.lowest_sequence)
                && entry.current_txn_first_offset.is_none()
                && !mutations.has(Mutation::VerificationIgnoresLowestSequence)
            {
                return Err(KafkaError::OutOfOrderSequence);
            }
            // KAFKA-18202 (Kafka 4.1): a TV2 producer with no batches here must start at sequence 0.
            if verifying.is_some_and(|v| v.supports_epoch_bump)
                && first_seq != 0
                && entry.last_seq().is_none()
                && !mutations.has(Mutation::Tv2FirstSequenceUnchecked)
            {
                return Err(KafkaError::OutOfOrderSequence);
            }
            if producer.epoch != entry.producer_epoch {
                if first_seq != 0 && entry.producer_epoch != NO_PRODUCER_EPOCH {
                    return Err(KafkaError::OutOfOrderSequence);
                }
            } else {
                let last = entry.last_seq().unwrap_or(-1);
                if !in_sequence(last, first_seq) {
                    return Err(KafkaError::OutOfOrderSequence);
                }
            }
        }
        // `appendDataBatch`: no non-transactional data from a producer with an open transaction.
        if !is_transactional
            && entry.current_txn_first_offset.is_some()
            && !mutations.has(Mutation::AllowNonTxnWriteInOpenTxn)
        {
            return Err(KafkaError::InvalidTxnState);
        }
        Ok(AppendCheck::Append)
    }

    /// Validates a marker (`ProducerAppendInfo.appendEndTxnMarker`).
    pub fn check_marker(
        &self,
        producer_id: ProducerId,
        epoch: ProducerEpoch,
        marker: &EndTxnMarker,
        origin: AppendOrigin,
        version: TransactionVersion,
        mutations: &Mutations,
    ) -> Result<(), KafkaError> {
        let Some(entry) = self.producers.get(&producer_id) else {
            return Ok(());
        };
        if origin != AppendOrigin::Replication {
            self.check_producer_epoch(entry, epoch, mutations)?;
            // KIP-1228: a TV2 marker carries the bumped epoch, so one at the epoch of a transaction still
            // open here is a late copy of the previous decision. At that epoch with nothing open it is a
            // retried marker, accepted as before (KAFKA-19999).
            if version.supports_epoch_bump()
                && epoch == entry.producer_epoch
                && entry.current_txn_first_offset.is_some()
                && !mutations.has(Mutation::SkipProducerEpochCheck)
            {
                return Err(KafkaError::InvalidProducerEpoch);
            }
            if entry.coordinator_epoch > marker.coordinator_epoch && !mutations.has(Mutation::SkipCoordinatorEpochCheck)
            {
                return Err(KafkaError::TransactionCoordinatorFenced);
            }
        }
        Ok(())
    }

    /// `checkProducerEpoch`: a lower epoch is a zombie (INVALID_PRODUCER_EPOCH since Kafka 2.7); a higher one is accepted.
    fn check_producer_epoch(
        &self,
        entry: &ProducerStateEntry,
        epoch: ProducerEpoch,
        mutations: &Mutations,
    ) -> Result<(), KafkaError> {
        if epoch < entry.producer_epoch && !mutations.has(Mutation::SkipProducerEpochCheck) {
            return Err(KafkaError::InvalidProducerEpoch);
        }
        Ok(())
    }

    /// Records an appended data batch; returns true if it began a transaction on this partition.
    pub fn update_data(&mut self, batch: &RecordBatch, now_ms: TimeMs) -> bool {
        let producer = batch.producer.expect("only batches with a producer id have producer state");
        let entry = self
            .producers
            .entry(producer.producer_id)
            .or_insert_with(|| ProducerStateEntry::empty(producer.producer_id));
        entry.maybe_update_producer_epoch(producer.epoch);
        entry.last_timestamp_ms = now_ms;
        if batch.is_transactional {
            // Verified and appended: the entry has done its job (`UnifiedLog.updateProducers`).
            self.verification_entries.remove(&producer.producer_id);
        }
        if producer.base_sequence >= 0 {
            entry.add_batch(BatchMetadata {
                first_seq: producer.base_sequence,
                last_seq: batch.last_sequence().expect("sequenced batch"),
                first_offset: batch.base_offset,
                last_offset: batch.last_offset,
            });
        }
        if batch.is_transactional && entry.current_txn_first_offset.is_none() {
            entry.current_txn_first_offset = Some(batch.base_offset);
            let previous = self.ongoing_txns.insert(
                batch.base_offset,
                TxnMetadata { producer_id: producer.producer_id, first_offset: batch.base_offset, last_offset: None },
            );
            assert!(previous.is_none(), "two transactions start at offset {}", batch.base_offset);
            return true;
        }
        false
    }

    /// Records an appended marker; returns the transaction it closed, if this producer had one open here
    /// (a marker for an empty transaction closes nothing: KAFKA-10702).
    pub fn update_marker(&mut self, batch: &RecordBatch, now_ms: TimeMs) -> Option<CompletedTxn> {
        let producer = batch.producer.expect("markers carry a producer id");
        let marker = batch.marker().expect("update_marker takes a control batch with a marker");
        let entry = self
            .producers
            .entry(producer.producer_id)
            .or_insert_with(|| ProducerStateEntry::empty(producer.producer_id));
        entry.maybe_update_producer_epoch(producer.epoch);
        self.verification_entries.remove(&producer.producer_id);
        entry.coordinator_epoch = marker.coordinator_epoch;
        entry.last_timestamp_ms = now_ms;
        let first_offset = entry.current_txn_first_offset.take()?;
        Some(CompletedTxn {
            producer_id: producer.producer_id,
            first_offset,
            last_offset: batch.base_offset,
            is_aborted: marker.result == TransactionResult::Abort,
        })
    }

    /// `maybeCreateVerificationStateEntry`: the producer's entry, made with `guard` if it has none; either
    /// way the verified batch's sequence and epoch are folded in. Returns the entry's guard.
    pub fn maybe_create_verification_state_entry(
        &mut self,
        producer_id: ProducerId,
        sequence: i32,
        epoch: ProducerEpoch,
        guard: u64,
        supports_epoch_bump: bool,
        now_ms: TimeMs,
    ) -> u64 {
        let entry = self.verification_entries.entry(producer_id).or_insert(VerificationStateEntry {
            timestamp_ms: now_ms,
            guard,
            lowest_sequence: sequence,
            epoch,
            supports_epoch_bump,
        });
        entry.maybe_update_lowest_sequence_and_epoch(sequence, epoch);
        entry.guard
    }

    /// `removeExpiredProducers` for verification entries, run every
    /// `producer.id.expiration.check.interval.ms` from the broker's start: an entry goes at the first
    /// check at least `producer.id.expiration.ms` after it was made. The checks are counted, not timed, so
    /// this is exact whenever it is called (the broker calls it before it touches the entries).
    pub fn remove_expired_verification_entries(&mut self, now_ms: TimeMs, mutations: &Mutations) {
        self.verification_entries.retain(|_, v| !Self::verification_expired(v, now_ms, mutations));
    }

    /// The entries a check at `now_ms` would keep (what a reader of the broker's state sees).
    pub fn live_verification_entries<'a>(
        &'a self,
        now_ms: TimeMs,
        mutations: &'a Mutations,
    ) -> impl Iterator<Item = (&'a ProducerId, &'a VerificationStateEntry)> + 'a {
        self.verification_entries.iter().filter(move |(_, v)| !Self::verification_expired(v, now_ms, mutations))
    }

    fn verification_expired(v: &VerificationStateEntry, now_ms: TimeMs, mutations: &Mutations) -> bool {
        let last_check = now_ms - now_ms % PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS;
        last_check >= v.timestamp_ms + PRODUCER_ID_EXPIRATION_MS
            && !mutations.has(Mutation::VerificationEntryNeverExpires)
    }

    /// `ProducerStateManager.lastStableOffset(completedTxn)`: the first offset of the earliest other producer's
    /// ongoing transaction, else the marker offset + 1. Stored in the `AbortedTxn` index entry.
    pub fn last_stable_offset_for(&self, completed: &CompletedTxn) -> Offset {
        self.ongoing_txns
            .values()
            .find(|t| t.producer_id != completed.producer_id)
            .map(|t| t.first_offset)
            .unwrap_or(completed.last_offset + 1)
    }

    /// `completeTxn`: the transaction leaves `ongoing_txns` and waits in `unreplicated_txns` until its
    /// marker is below the high watermark.
    pub fn complete_txn(&mut self, completed: &CompletedTxn) {
        let txn = self.ongoing_txns.remove(&completed.first_offset).expect("a completed transaction was ongoing");
        assert_eq!(
            txn.producer_id, completed.producer_id,
            "ongoing txn at {} belongs to another producer",
            completed.first_offset
        );
        self.unreplicated_txns
            .insert(completed.first_offset, TxnMetadata { last_offset: Some(completed.last_offset), ..txn });
    }

    /// Mutation `log-start-drops-open-transactions`: forgets the open transactions that began below the new
    /// log start, as if they had never started; Kafka keeps them (`onLogStartOffsetIncremented`).
    pub fn forget_open_transactions_below(&mut self, log_start: Offset) {
        let kept = self.ongoing_txns.split_off(&log_start);
        for txn in std::mem::replace(&mut self.ongoing_txns, kept).into_values() {
            if let Some(entry) = self.producers.get_mut(&txn.producer_id) {
                entry.current_txn_first_offset = None;
            }
        }
    }

    /// `onHighWatermarkUpdated` / `removeUnreplicatedTransactions`: markers below `offset` are stable.
    pub fn remove_unreplicated_transactions(&mut self, offset: Offset) {
        self.unreplicated_txns.retain(|_, t| t.last_offset.expect("unreplicated txns have markers") >= offset);
    }

    /// `firstUnstableOffset`: the earliest first offset of an ongoing or not yet replicated transaction.
    pub fn first_unstable_offset(&self, mutations: &Mutations) -> Option<Offset> {
        // Both LSO mutations bend this one function; everything else derives from it.
        let ongoing = if mutations.has(Mutation::LsoIgnoresOngoingTxns) {
            None
        } else {
            self.ongoing_txns.keys().next().copied()
        };
        let unreplicated = if mutations.has(Mutation::LsoIgnoresUnreplicatedTxns) {
            None
        } else {
            self.unreplicated_txns.keys().next().copied()
        };
        match (ongoing, unreplicated) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
