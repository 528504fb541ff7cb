//! Kafka's error codes (`org.apache.kafka.common.protocol.Errors`), the subset the transaction APIs use.

use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum KafkaError {
    OffsetOutOfRange,
    UnknownTopicOrPartition,
    NotCoordinator,
    CoordinatorLoadInProgress,
    InvalidRequest,
    OutOfOrderSequence,
    DuplicateSequenceNumber,
    InvalidProducerEpoch,
    InvalidTxnState,
    InvalidProducerIdMapping,
    InvalidTransactionTimeout,
    ConcurrentTransactions,
    TransactionCoordinatorFenced,
    ProducerFenced,
    UnknownProducerId,
    RequestTimedOut,
    /// Client-side for a broken connection (`NetworkException`, NETWORK_EXCEPTION): the request may or
    /// may not have been processed.
    NetworkException,
    CoordinatorNotAvailable,
    InvalidTopicException,
    TopicAlreadyExists,
    InvalidPartitions,
    InvalidReplicationFactor,
    IllegalGeneration,
    InconsistentGroupProtocol,
    InvalidGroupId,
    UnknownMemberId,
    InvalidSessionTimeout,
    RebalanceInProgress,
    GroupMaxSizeReached,
    MemberIdRequired,
    NotLeaderOrFollower,
    NotEnoughReplicas,
    NotEnoughReplicasAfterAppend,
    FencedLeaderEpoch,
    UnknownLeaderEpoch,
    InvalidUpdateVersion,
    /// AlterPartition naming a fenced broker in the new ISR (`ReplicationControlManager.ineligibleReplicasForIsr`).
    IneligibleReplica,
    /// A topic being created has no leader yet (`AutoTopicCreationManager`'s answer to an auto-creating
    /// Metadata request on a controller-managed broker; the client asks again).
    LeaderNotAvailable,
    /// OffsetFetch with `require_stable` (KIP-447) while a transaction's offsets for the partition are pending.
    UnstableOffsetCommit,
    /// Client-side only (`TransactionAbortedException`): a batch never sent, failed by an abort. No wire code.
    TransactionAborted,
    /// KIP-890: the verification of a partition its transaction does not hold (`TransactionAbortableException`);
    /// the client aborts and goes on.
    TransactionAbortable,
}

impl KafkaError {
    /// A coordinator's answer for the failed append of its record (`TransactionStateManager
    /// .appendTransactionToLog`'s callback, `GroupCoordinatorService.handleOperationException`): the log
    /// not available or not replicated in time is COORDINATOR_NOT_AVAILABLE, leadership lost NOT_COORDINATOR.
    pub fn for_coordinator_append(self) -> KafkaError {
        match self {
            KafkaError::UnknownTopicOrPartition
            | KafkaError::NotEnoughReplicas
            | KafkaError::NotEnoughReplicasAfterAppend
            | KafkaError::RequestTimedOut => KafkaError::CoordinatorNotAvailable,
            KafkaError::NotLeaderOrFollower => KafkaError::NotCoordinator,
            other => other,
        }
    }

    pub const ALL: [KafkaError; 41] = [
        KafkaError::OffsetOutOfRange,
        KafkaError::UnknownTopicOrPartition,
        KafkaError::NotCoordinator,
        KafkaError::CoordinatorLoadInProgress,
        KafkaError::InvalidRequest,
        KafkaError::OutOfOrderSequence,
        KafkaError::DuplicateSequenceNumber,
        KafkaError::InvalidProducerEpoch,
        KafkaError::InvalidTxnState,
        KafkaError::InvalidProducerIdMapping,
        KafkaError::InvalidTransactionTimeout,
        KafkaError::ConcurrentTransactions,
        KafkaError::TransactionCoordinatorFenced,
        KafkaError::ProducerFenced,
        KafkaError::UnknownProducerId,
        KafkaError::RequestTimedOut,
        KafkaError::NetworkException,
        KafkaError::TransactionAborted,
        KafkaError::CoordinatorNotAvailable,
        KafkaError::InvalidTopicException,
        KafkaError::TopicAlreadyExists,
        KafkaError::InvalidPartitions,
        KafkaError::InvalidReplicationFactor,
        KafkaError::IllegalGeneration,
        KafkaError::InconsistentGroupProtocol,
        KafkaError::InvalidGroupId,
        KafkaError::UnknownMemberId,
        KafkaError::InvalidSessionTimeout,
        KafkaError::RebalanceInProgress,
        KafkaError::GroupMaxSizeReached,
        KafkaError::MemberIdRequired,
        KafkaError::NotLeaderOrFollower,
        KafkaError::NotEnoughReplicas,
        KafkaError::NotEnoughReplicasAfterAppend,
        KafkaError::FencedLeaderEpoch,
        KafkaError::UnknownLeaderEpoch,
        KafkaError::InvalidUpdateVersion,
        KafkaError::IneligibleReplica,
        KafkaError::LeaderNotAvailable,
        KafkaError::UnstableOffsetCommit,
        KafkaError::TransactionAbortable,
    ];

    /// The wire code from `Errors.java`.
    pub fn code(self) -> i16 {
        match self {
            KafkaError::OffsetOutOfRange => 1,
            KafkaError::RequestTimedOut => 7,
            KafkaError::NetworkException => 13,
            KafkaError::UnknownTopicOrPartition => 3,
            KafkaError::CoordinatorLoadInProgress => 14,
            KafkaError::NotCoordinator => 16,
            KafkaError::InvalidRequest => 42,
            KafkaError::OutOfOrderSequence => 45,
            KafkaError::DuplicateSequenceNumber => 46,
            KafkaError::InvalidProducerEpoch => 47,
            KafkaError::InvalidTxnState => 48,
            KafkaError::InvalidProducerIdMapping => 49,
            KafkaError::InvalidTransactionTimeout => 50,
            KafkaError::ConcurrentTransactions => 51,
            KafkaError::TransactionCoordinatorFenced => 52,
            KafkaError::UnknownProducerId => 59,
            KafkaError::ProducerFenced => 90,
            // Never on the wire: `Errors.UNKNOWN_SERVER_ERROR` if it ever had to be.
            KafkaError::TransactionAborted => -1,
            KafkaError::CoordinatorNotAvailable => 15,
            KafkaError::InvalidTopicException => 17,
            KafkaError::TopicAlreadyExists => 36,
            KafkaError::InvalidPartitions => 37,
            KafkaError::InvalidReplicationFactor => 38,
            KafkaError::IllegalGeneration => 22,
            KafkaError::InconsistentGroupProtocol => 23,
            KafkaError::InvalidGroupId => 24,
            KafkaError::UnknownMemberId => 25,
            KafkaError::InvalidSessionTimeout => 26,
            KafkaError::RebalanceInProgress => 27,
            KafkaError::GroupMaxSizeReached => 81,
            KafkaError::MemberIdRequired => 79,
            KafkaError::NotLeaderOrFollower => 6,
            KafkaError::NotEnoughReplicas => 19,
            KafkaError::NotEnoughReplicasAfterAppend => 20,
            KafkaError::FencedLeaderEpoch => 74,
            KafkaError::UnknownLeaderEpoch => 76,
            KafkaError::InvalidUpdateVersion => 95,
            KafkaError::IneligibleReplica => 107,
            KafkaError::LeaderNotAvailable => 5,
            KafkaError::UnstableOffsetCommit => 88,
            KafkaError::TransactionAbortable => 120,
        }
    }

    /// The name Kafka prints, e.g. `INVALID_TXN_STATE`.
    pub fn name(self) -> &'static str {
        match self {
            KafkaError::OffsetOutOfRange => "OFFSET_OUT_OF_RANGE",
            KafkaError::UnknownTopicOrPartition => "UNKNOWN_TOPIC_OR_PARTITION",
            KafkaError::NotCoordinator => "NOT_COORDINATOR",
            KafkaError::CoordinatorLoadInProgress => "COORDINATOR_LOAD_IN_PROGRESS",
            KafkaError::InvalidRequest => "INVALID_REQUEST",
            KafkaError::OutOfOrderSequence => "OUT_OF_ORDER_SEQUENCE_NUMBER",
            KafkaError::DuplicateSequenceNumber => "DUPLICATE_SEQUENCE_NUMBER",
            KafkaError::InvalidProducerEpoch => "INVALID_PRODUCER_EPOCH",
            KafkaError::InvalidTxnState => "INVALID_TXN_STATE",
            KafkaError::InvalidProducerIdMapping => "INVALID_PRODUCER_ID_MAPPING",
            KafkaError::InvalidTransactionTimeout => "INVALID_TRANSACTION_TIMEOUT",
            KafkaError::ConcurrentTransactions => "CONCURRENT_TRANSACTIONS",
            KafkaError::TransactionCoordinatorFenced => "TRANSACTION_COORDINATOR_FENCED",
            KafkaError::ProducerFenced => "PRODUCER_FENCED",
            KafkaError::UnknownProducerId => "UNKNOWN_PRODUCER_ID",
            KafkaError::RequestTimedOut => "REQUEST_TIMED_OUT",
            KafkaError::NetworkException => "NETWORK_EXCEPTION",
            KafkaError::TransactionAborted => "TRANSACTION_ABORTED",
            KafkaError::CoordinatorNotAvailable => "COORDINATOR_NOT_AVAILABLE",
            KafkaError::InvalidTopicException => "INVALID_TOPIC_EXCEPTION",
            KafkaError::TopicAlreadyExists => "TOPIC_ALREADY_EXISTS",
            KafkaError::InvalidPartitions => "INVALID_PARTITIONS",
            KafkaError::InvalidReplicationFactor => "INVALID_REPLICATION_FACTOR",
            KafkaError::IllegalGeneration => "ILLEGAL_GENERATION",
            KafkaError::InconsistentGroupProtocol => "INCONSISTENT_GROUP_PROTOCOL",
            KafkaError::InvalidGroupId => "INVALID_GROUP_ID",
            KafkaError::UnknownMemberId => "UNKNOWN_MEMBER_ID",
            KafkaError::InvalidSessionTimeout => "INVALID_SESSION_TIMEOUT",
            KafkaError::RebalanceInProgress => "REBALANCE_IN_PROGRESS",
            KafkaError::GroupMaxSizeReached => "GROUP_MAX_SIZE_REACHED",
            KafkaError::MemberIdRequired => "MEMBER_ID_REQUIRED",
            KafkaError::NotLeaderOrFollower => "NOT_LEADER_OR_FOLLOWER",
            KafkaError::NotEnoughReplicas => "NOT_ENOUGH_REPLICAS",
            KafkaError::NotEnoughReplicasAfterAppend => "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
            KafkaError::FencedLeaderEpoch => "FENCED_LEADER_EPOCH",
            KafkaError::UnknownLeaderEpoch => "UNKNOWN_LEADER_EPOCH",
            KafkaError::InvalidUpdateVersion => "INVALID_UPDATE_VERSION",
            KafkaError::IneligibleReplica => "INELIGIBLE_REPLICA",
            KafkaError::LeaderNotAvailable => "LEADER_NOT_AVAILABLE",
            KafkaError::UnstableOffsetCommit => "UNSTABLE_OFFSET_COMMIT",
            KafkaError::TransactionAbortable => "TRANSACTION_ABORTABLE",
        }
    }

    /// Parses a name as scenarios write it. `OUT_OF_ORDER_SEQUENCE` is accepted for Kafka's
    /// `OUT_OF_ORDER_SEQUENCE_NUMBER`, the form docs/scenario-format.md uses.
    pub fn from_name(name: &str) -> Option<KafkaError> {
        if name == "OUT_OF_ORDER_SEQUENCE" {
            return Some(KafkaError::OutOfOrderSequence);
        }
        KafkaError::ALL.into_iter().find(|e| e.name() == name)
    }

    /// Errors a client retries by itself (`RetriableException` subclasses on these APIs; REQUEST_TIMED_OUT
    /// and UNKNOWN_TOPIC_OR_PARTITION too, `TransactionManagerTest#testRetriableErrors`).
    pub fn is_retriable(self) -> bool {
        matches!(
            self,
            KafkaError::ConcurrentTransactions
                | KafkaError::NotCoordinator
                | KafkaError::CoordinatorLoadInProgress
                | KafkaError::RequestTimedOut
                | KafkaError::NetworkException
                | KafkaError::UnknownTopicOrPartition
                | KafkaError::NotLeaderOrFollower
                | KafkaError::LeaderNotAvailable
                | KafkaError::NotEnoughReplicas
                | KafkaError::NotEnoughReplicasAfterAppend
                | KafkaError::UnstableOffsetCommit
        )
    }
}

impl fmt::Display for KafkaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::error::Error for KafkaError {}
