//! `TransactionMetadata` and its state machine (`validPreviousStates`, `TransactionMetadata.scala`).

use crate::types::{ProducerEpoch, ProducerId, TimeMs, TopicPartition, TransactionVersion};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TransactionState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    Dead,
    /// Pending-only: never persisted, never completed into.
    PrepareEpochFence,
}

impl TransactionState {
    /// `TransactionState.validPreviousStates`.
    pub fn valid_previous_states(self) -> &'static [TransactionState] {
        use TransactionState::*;
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            // TV2 aborts a transaction that added no partition from a completed or empty state (the EB
            // cells of `TransactionCoordinator.endTransaction`'s table, `noPartitionAdded = true`).
            PrepareAbort => &[Ongoing, PrepareEpochFence, Empty, CompleteCommit, CompleteAbort],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteCommit, CompleteAbort],
            PrepareEpochFence => &[Ongoing],
        }
    }

    /// `isExpirationAllowed`: the states an idle transactional id may expire from (no transaction open).
    pub fn is_expiration_allowed(self) -> bool {
        matches!(self, TransactionState::Empty | TransactionState::CompleteCommit | TransactionState::CompleteAbort)
    }

    pub fn is_valid_transition(from: TransactionState, to: TransactionState) -> bool {
        to.valid_previous_states().contains(&from)
    }

    pub fn name(self) -> &'static str {
        use TransactionState::*;
        match self {
            Empty => "Empty",
            Ongoing => "Ongoing",
            PrepareCommit => "PrepareCommit",
            PrepareAbort => "PrepareAbort",
            CompleteCommit => "CompleteCommit",
            CompleteAbort => "CompleteAbort",
            Dead => "Dead",
            PrepareEpochFence => "PrepareEpochFence",
        }
    }
}

/// One record of an id's `__transaction_state` history: the state completed into, with the record's
/// `txnLastUpdateTimestamp` (the time the transition was prepared) and `txnTimeoutMs`. The timed
/// invariants read when a transaction started and was aborted from these, not from the fields the
/// coordinator's timeout scan compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TxnTransition {
    pub state: TransactionState,
    pub timestamp_ms: TimeMs,
    pub txn_timeout_ms: TimeMs,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TransactionMetadata {
    pub transactional_id: String,
    pub producer_id: ProducerId,
    /// `-1` for a metadata created by the first InitProducerId, before its Empty->Empty bump.
    pub producer_epoch: ProducerEpoch,
    pub last_producer_epoch: ProducerEpoch,
    pub txn_timeout_ms: TimeMs,
    pub state: TransactionState,
    /// At most one transition in flight (`pendingState`); requests meanwhile get CONCURRENT_TRANSACTIONS.
    pub pending_state: Option<TransactionState>,
    pub topic_partitions: BTreeSet<TopicPartition>,
    pub txn_start_timestamp_ms: TimeMs,
    pub txn_last_update_timestamp_ms: TimeMs,
    /// Every state this transactional id has completed into, in order (`__transaction_state` as a history).
    pub transitions: Vec<TxnTransition>,
    /// `clientTransactionVersion`: the version of the request that last added partitions or ended the
    /// transaction; it decides whether the decision bumps the epoch and which marker rule leaders apply.
    pub client_transaction_version: TransactionVersion,
    /// `previousProducerId`: the id this one was rotated from when its epochs ran out, so a retry of the
    /// call that rotated it (which names the old id) is still recognised.
    pub previous_producer_id: Option<ProducerId>,
    /// `nextProducerId`: under TV2, the id a decision that exhausted the epochs moves to once it completes.
    pub next_producer_id: Option<ProducerId>,
}

/// `TransactionMetadata.isEpochExhausted`: `Short.MAX_VALUE` itself is kept back so the coordinator can
/// always fence the last epoch a client was given, so an epoch is exhausted one below it.
pub fn is_epoch_exhausted(epoch: ProducerEpoch) -> bool {
    epoch >= ProducerEpoch::MAX - 1
}

/// An epoch one up. `ProducerEpoch` is Kafka's `short`: past `Short.MAX_VALUE` there is no epoch, and
/// Kafka's coordinator throws rather than wrap (`prepareFenceProducerEpoch`, `prepareIncrementProducerEpoch`).
pub fn bumped(epoch: ProducerEpoch) -> ProducerEpoch {
    epoch.checked_add(1).expect("no producer epoch after Short.MAX_VALUE")
}

impl TransactionMetadata {
    pub fn new(transactional_id: &str, producer_id: ProducerId, txn_timeout_ms: TimeMs, now_ms: TimeMs) -> Self {
        TransactionMetadata {
            transactional_id: transactional_id.to_string(),
            producer_id,
            producer_epoch: -1,
            last_producer_epoch: -1,
            txn_timeout_ms,
            state: TransactionState::Empty,
            pending_state: None,
            topic_partitions: BTreeSet::new(),
            txn_start_timestamp_ms: now_ms,
            txn_last_update_timestamp_ms: now_ms,
            transitions: vec![TxnTransition { state: TransactionState::Empty, timestamp_ms: now_ms, txn_timeout_ms }],
            client_transaction_version: TransactionVersion::V1,
            previous_producer_id: None,
            next_producer_id: None,
        }
    }

    /// `completeTransitionTo`: the only way `state` changes; asserts Kafka's table.
    pub fn transition_to(&mut self, to: TransactionState, now_ms: TimeMs) {
        assert!(
            self.pending_state.is_none(),
            "{}: transition to {to:?} while {:?} is pending",
            self.transactional_id,
            self.pending_state
        );
        assert!(
            TransactionState::is_valid_transition(self.state, to),
            "{}: invalid transition {:?} -> {to:?}",
            self.transactional_id,
            self.state
        );
        assert_ne!(to, TransactionState::PrepareEpochFence, "PrepareEpochFence is never completed into");
        self.state = to;
        self.txn_last_update_timestamp_ms = now_ms;
        self.transitions.push(TxnTransition { state: to, timestamp_ms: now_ms, txn_timeout_ms: self.txn_timeout_ms });
    }

    pub fn pending_transition_in_progress(&self) -> bool {
        self.pending_state.is_some()
    }

    /// A state from which a new transaction or InitProducerId may start (the expirable ones).
    pub fn is_complete_or_empty(&self) -> bool {
        self.state.is_expiration_allowed()
    }
}
