//! Kafka's `TransactionManager`: the producer's `State` machine and its transitions, its producer id, epoch
//! and sequences (KIP-360's epoch bumps), and the transaction's requests: InitProducerId, EndTxn once the
//! sends are flushed, and `sendOffsetsToTransaction`'s TxnOffsetCommit after AddOffsetsToTxn.

use super::{Completion, InFlight, OffsetsCall, OpId, OpOutput, Producer, ProducerKind};
use crate::error::KafkaError;
use crate::protocol::{Effects, Message};
use crate::record::increment_sequence;
use crate::types::{ProducerIdAndEpoch, TimeMs, TopicPartition, TransactionResult};
use serde::{Deserialize, Serialize};

/// `TransactionManager.State`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TxnManagerState {
    Uninitialized,
    Initializing,
    Ready,
    InTransaction,
    CommittingTransaction,
    AbortingTransaction,
    AbortableError,
    FatalError,
}

impl TxnManagerState {
    pub const ALL: [TxnManagerState; 8] = [
        TxnManagerState::Uninitialized,
        TxnManagerState::Initializing,
        TxnManagerState::Ready,
        TxnManagerState::InTransaction,
        TxnManagerState::CommittingTransaction,
        TxnManagerState::AbortingTransaction,
        TxnManagerState::AbortableError,
        TxnManagerState::FatalError,
    ];

    /// Kafka's name for the state (`TransactionManager.State`).
    pub fn name(self) -> &'static str {
        use TxnManagerState::*;
        match self {
            Uninitialized => "UNINITIALIZED",
            Initializing => "INITIALIZING",
            Ready => "READY",
            InTransaction => "IN_TRANSACTION",
            CommittingTransaction => "COMMITTING_TRANSACTION",
            AbortingTransaction => "ABORTING_TRANSACTION",
            AbortableError => "ABORTABLE_ERROR",
            FatalError => "FATAL_ERROR",
        }
    }

    /// `State.isTransitionValid`.
    fn is_transition_valid(self, to: TxnManagerState) -> bool {
        use TxnManagerState::*;
        match to {
            Uninitialized => false,
            Initializing => {
                matches!(self, Uninitialized | Ready | CommittingTransaction | AbortingTransaction | AbortableError)
            }
            Ready => matches!(self, Initializing | CommittingTransaction | AbortingTransaction),
            InTransaction => self == Ready,
            CommittingTransaction => self == InTransaction,
            AbortingTransaction => matches!(self, InTransaction | AbortableError),
            AbortableError => matches!(self, InTransaction | CommittingTransaction | AbortableError | Initializing),
            FatalError => true,
        }
    }
}

/// `TransactionManager.ADD_PARTITIONS_RETRY_BACKOFF_MS`: the retry of an AddPartitions answered CONCURRENT_TRANSACTIONS.
pub const ADD_PARTITIONS_RETRY_BACKOFF_MS: TimeMs = 20;

impl Producer {
    pub(super) fn transition(&mut self, to: TxnManagerState) {
        assert!(self.state.is_transition_valid(to), "{}: producer state {:?} -> {to:?}", self.id, self.state);
        self.state = to;
    }

    pub(super) fn fail_fatal(&mut self, error: KafkaError) {
        self.last_error = Some(error);
        self.transition(TxnManagerState::FatalError);
    }

    pub(super) fn fail_abortable(&mut self, error: KafkaError) {
        // `transitionToAbortableError`: an abort already under way stays under way (and a fatal error stays fatal).
        if matches!(self.state, TxnManagerState::FatalError | TxnManagerState::AbortingTransaction) {
            return;
        }
        self.last_error = Some(error);
        self.transition(TxnManagerState::AbortableError);
        // The sender fails what it never drained once an abortable error is set.
        if !self.config.mutations.has(crate::mutation::Mutation::AbortSendsUndrainedBatches) {
            self.abort_undrained_batches(error);
        }
    }

    /// A batch failed in a way that leaves its sequence unknown: TV1 and idempotent producers bump the epoch
    /// before the next transaction or batch (`maybeTransitionToErrorState`: not while completing one).
    pub(super) fn sequence_unknown(&mut self) {
        if !matches!(self.state, TxnManagerState::CommittingTransaction | TxnManagerState::AbortingTransaction)
            || self.config.mutations.has(crate::mutation::Mutation::EpochBumpWhileCompleting)
        {
            self.epoch_bump_required = true;
        }
    }

    /// `bumpIdempotentEpochAndResetIdIfNeeded`: an idempotent producer with a broken sequence bumps its own
    /// epoch once nothing is in flight, and restarts every partition's sequence at 0.
    pub(super) fn maybe_bump_idempotent_epoch(&mut self) {
        if self.kind != ProducerKind::Idempotent || !self.epoch_bump_required || self.in_flight_batches() > 0 {
            return;
        }
        if self.config.mutations.has(crate::mutation::Mutation::NoIdempotentEpochBump) {
            return;
        }
        let Some(pie) = self.producer_id_and_epoch else { return };
        self.set_producer_id_and_epoch(ProducerIdAndEpoch { producer_id: pie.producer_id, epoch: pie.epoch + 1 });
        self.epoch_bump_required = false;
    }

    /// `TransactionManager.isNextSequence`: the batch right after the last acknowledged one.
    pub(super) fn is_next_sequence(&self, partition: &TopicPartition, base_sequence: i32) -> bool {
        let last = self.last_acked_sequence.get(partition).copied();
        base_sequence == last.map_or(0, |l| increment_sequence(l, 1))
    }

    /// `maybeFailWithError`: a producer in an error state rejects calls with that error.
    pub(super) fn check_not_failed(&self) -> Result<(), KafkaError> {
        match self.state {
            TxnManagerState::FatalError | TxnManagerState::AbortableError => {
                Err(self.last_error.expect("error states record their error"))
            }
            _ => Ok(()),
        }
    }

    /// The TxnOffsetCommit of a call, through FindCoordinator first if its group's coordinator is unknown.
    pub(super) fn offsets_commit_step(&self, call: OffsetsCall) -> InFlight {
        if self.group_coordinators.contains_key(&call.group.group_id) {
            InFlight::TxnOffsetCommit(call)
        } else {
            InFlight::FindGroupCoordinator(call)
        }
    }

    /// An offsets call failed for good: the producer enters the error state the error calls for.
    pub(super) fn fail_offsets(&mut self, op: OpId, error: KafkaError, fatal: bool) {
        if fatal {
            // Batches never drained fail with the fatal error too (as after a fenced AddPartitions).
            self.fail_fatal(error);
            self.abort_undrained_batches(error);
        } else {
            self.fail_abortable(error);
        }
        self.completions.push(Completion { op, result: Err(error) });
    }

    /// `TxnOffsetCommitHandler.handleResponse`: committed partitions are done; a coordinator error forgets
    /// the coordinator and retries, another retriable error retries the failed partitions; a group
    /// mismatch (KIP-447) is abortable, a fenced producer fatal.
    pub(super) fn on_txn_offset_commit(
        &mut self,
        now_ms: TimeMs,
        mut call: OffsetsCall,
        results: Vec<(TopicPartition, Result<(), KafkaError>)>,
        effects: &mut Effects,
    ) {
        let mut retry = None;
        for (tp, result) in results {
            match result {
                Ok(()) => call.offsets.retain(|(t, _)| *t != tp),
                Err(
                    e
                    @ (KafkaError::CoordinatorNotAvailable | KafkaError::NotCoordinator | KafkaError::RequestTimedOut),
                ) => {
                    self.group_coordinators.remove(&call.group.group_id);
                    retry = Some(e);
                }
                Err(e) if e.is_retriable() => retry = Some(e),
                Err(e @ (KafkaError::UnknownMemberId | KafkaError::IllegalGeneration)) => {
                    return self.fail_offsets(call.op, e, false);
                }
                Err(KafkaError::InvalidProducerEpoch | KafkaError::ProducerFenced) => {
                    return self.fail_offsets(call.op, KafkaError::ProducerFenced, true);
                }
                Err(e) => return self.fail_offsets(call.op, e, true),
            }
        }
        match retry {
            _ if call.offsets.is_empty() => {
                self.completions.push(Completion { op: call.op, result: Ok(OpOutput::OffsetsSent) })
            }
            Some(e) => {
                let step = self.offsets_commit_step(call);
                self.back_off(now_ms, step, e, effects)
            }
            None => unreachable!("offsets left uncommitted without an error"),
        }
    }

    pub(super) fn send_init(&mut self, op: OpId, after_abort: bool, effects: &mut Effects) {
        let message = Message::InitProducerIdRequest {
            transactional_id: self.transactional_id().map(str::to_string),
            transaction_timeout_ms: self.config.transaction_timeout_ms,
            producer_id_and_epoch: if after_abort { self.producer_id_and_epoch } else { None },
        };
        self.request(self.coordinator.clone(), message, InFlight::InitProducerId { op, after_abort }, effects);
    }

    /// The commit or abort under way, if it is `result`'s (its EndTxn, or TV1's InitProducerId after it).
    pub(super) fn ending(&self, result: TransactionResult) -> Option<OpId> {
        if let Some((op, r)) = self.pending_end {
            return (r == result).then_some(op);
        }
        self.in_flight.values().chain(self.backing_off.values()).find_map(|f| match f {
            InFlight::EndTxn { op, result: r } if *r == result => Some(*op),
            InFlight::InitProducerId { op, after_abort: true } if result == TransactionResult::Abort => Some(*op),
            _ => None,
        })
    }

    pub(super) fn begin_end(&mut self, result: TransactionResult) -> (OpId, Effects) {
        let op = self.new_op();
        assert!(self.pending_end.is_none(), "{}: one EndTxn at a time", self.id);
        self.pending_end = Some((op, result));
        let mut effects = Effects::default();
        // A commit flushes: lingering batches go now.
        self.drain(&mut effects);
        self.maybe_send_end_txn(&mut effects);
        (op, effects)
    }

    /// EndTxn goes out once every send of the transaction has its answer (`flush` before commit).
    pub(super) fn maybe_send_end_txn(&mut self, effects: &mut Effects) {
        let busy =
            self.in_flight.values().chain(self.backing_off.values()).any(|f| !matches!(f, InFlight::EndTxn { .. }))
                || !self.accumulator.is_empty();
        if busy {
            return;
        }
        let Some((op, result)) = self.pending_end.take() else {
            return;
        };
        if self.state == TxnManagerState::FatalError {
            // A fatal error (fenced) while flushing: the pending commit or abort fails with it.
            let error = self.last_error.expect("fatal state records its error");
            self.completions.push(Completion { op, result: Err(error) });
            return;
        }
        if result == TransactionResult::Commit && self.state == TxnManagerState::AbortableError {
            // A send failed while committing: the commit fails with that error and the app must abort.
            self.completions.push(Completion { op, result: Err(self.last_error.expect("abortable error recorded")) });
            return;
        }
        if !self.transaction_started {
            // No partition joined: nothing to end at the coordinator.
            self.finish_transaction(op, result);
            return;
        }
        let message = Message::EndTxnRequest {
            transactional_id: self.transactional_id().expect("transactional").to_string(),
            producer: self.producer_id_and_epoch.expect("initialized"),
            result,
            transaction_version: self.transaction_version(),
        };
        self.request(self.coordinator.clone(), message, InFlight::EndTxn { op, result }, effects);
    }

    pub(super) fn finish_transaction(&mut self, op: OpId, result: TransactionResult) {
        self.transition(TxnManagerState::Ready);
        self.partitions_in_txn.clear();
        self.transaction_started = false;
        let output = match result {
            TransactionResult::Commit => OpOutput::Committed,
            TransactionResult::Abort => OpOutput::Aborted,
        };
        self.completions.push(Completion { op, result: Ok(output) });
    }

    pub(super) fn set_producer_id_and_epoch(&mut self, pie: ProducerIdAndEpoch) {
        if self.producer_id_and_epoch != Some(pie) {
            // A new epoch starts every partition's sequence at 0 (`ProducerAppendInfo.checkSequence`).
            self.next_sequence.clear();
            self.last_acked_sequence.clear();
        }
        self.producer_id_and_epoch = Some(pie);
    }
}
