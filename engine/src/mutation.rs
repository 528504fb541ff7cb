//! Injectable historical bugs (Kafka JIRAs such as KAFKA-6119, KAFKA-13194). Each is one small, marked branch in the
//! engine, off by default; they exist only to prove that the suite's checkers catch the bug. What each
//! one breaks is `Mutation::mechanism`, where Kafka (or a Kafka-compatible broker) had it is
//! `Mutation::kafka`; `txnsim mutations` prints both with the invariants that catch it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Mutation {
    ReadCommittedBoundedByHw,
    LsoInclusive,
    LsoIgnoresOngoingTxns,
    LsoIgnoresUnreplicatedTxns,
    LsoNotClampedToHw,
    SkipAbortedIndexOnFetch,
    NoAbortedIndexEntry,
    AllowNonTxnWriteInOpenTxn,
    NoDedup,
    DuplicateReturnsWrongOffsets,
    SkipProducerEpochCheck,
    SkipCoordinatorEpochCheck,
    MarkersToSubsetOfPartitions,
    DoubleComplete,
    TimeoutAbortSameEpoch,
    FenceAbortSameEpoch,
    NoTimeoutAbort,
    DropPendingMarkersOnRestart,
    RestartAbortsPreparedCommits,
    NoTxnVerification,
    NoPositionAdvanceOverControl,
    AbortedPidNotClearedOnMarker,
    PositionSkipsToHighWatermark,
    RedeliverLastRecord,
    AbortedListForReadUncommitted,
    Tv2AbortKeepsEpoch,
    Kip360RetryFenced,
    Tv2InitAfterAbort,
    AbortSendsUndrainedBatches,
    EpochBumpWhileCompleting,
    NoIdempotentEpochBump,
    OutOfOrderNeverRetried,
    TxnLogAppendSynchronous,
    EndTxnEpochBeforePending,
    Tv2FenceAbortBumpsTwice,
    VerificationIgnoresLowestSequence,
    VerificationEntryNeverExpires,
    RetriesIgnored,
    HwFromLeaderLeo,
    TxnOffsetsVisibleBeforeCommit,
    TruncateToOwnLeo,
    NoRebuildAfterTruncation,
    OffsetCommitRefusedWhilePreparingRebalance,
    TxnStartTimestampNotReset,
    EpochCacheKeptOnNoopTruncation,
    InFlightBatchesNotExpired,
    FetchIdsReusedAfterRestart,
    IsrExpansionBelowLeaderEpochStart,
    FencedReplicaJoinsIsr,
    EpochExhaustionIgnored,
    TransactionalIdsNeverExpire,
    AddPartitionsPidBeforePending,
    MarkerRetryResendsAllPartitions,
    HostedPartitionsOnly,
    AnyBrokerCoordinates,
    IsrChangeToldToLeaderOnly,
    FenceAbortKeepsExhaustedId,
    NoMarkerResendOnFailover,
    FailoverKeepsCoordinatorEpoch,
    FencedReplicaHoldsHw,
    DelayedFetchIgnoresLeaderChange,
    DelayedAnswerTimedOut,
    GroupsKeptInMemory,
    InternalTopicsWritable,
    SyncAnsweredBeforeStored,
    LoadResendsSupersededDecisions,
    OffsetFetchReadsLatest,
    FollowerRefusesConsumerFetch,
    TxnOffsetCommitV5OnlyVerifies,
    Tv2FirstSequenceUnchecked,
    ApiVersionsNamesUnchecked,
    BatchStraddlingBoundReturned,
    LogStartDropsOpenTransactions,
    LastProducerEpochPersisted,
    RotationRecordsOverflowedEpoch,
    RetriesOvertake,
    VerificationRefusedInvalidTxnState,
}

impl Mutation {
    pub const ALL: [Mutation; 77] = [
        Mutation::ReadCommittedBoundedByHw,
        Mutation::LsoInclusive,
        Mutation::LsoIgnoresOngoingTxns,
        Mutation::LsoIgnoresUnreplicatedTxns,
        Mutation::LsoNotClampedToHw,
        Mutation::SkipAbortedIndexOnFetch,
        Mutation::NoAbortedIndexEntry,
        Mutation::AllowNonTxnWriteInOpenTxn,
        Mutation::NoDedup,
        Mutation::DuplicateReturnsWrongOffsets,
        Mutation::SkipProducerEpochCheck,
        Mutation::SkipCoordinatorEpochCheck,
        Mutation::MarkersToSubsetOfPartitions,
        Mutation::DoubleComplete,
        Mutation::TimeoutAbortSameEpoch,
        Mutation::FenceAbortSameEpoch,
        Mutation::NoTimeoutAbort,
        Mutation::DropPendingMarkersOnRestart,
        Mutation::RestartAbortsPreparedCommits,
        Mutation::NoTxnVerification,
        Mutation::NoPositionAdvanceOverControl,
        Mutation::AbortedPidNotClearedOnMarker,
        Mutation::PositionSkipsToHighWatermark,
        Mutation::RedeliverLastRecord,
        Mutation::AbortedListForReadUncommitted,
        Mutation::Tv2AbortKeepsEpoch,
        Mutation::Kip360RetryFenced,
        Mutation::Tv2InitAfterAbort,
        Mutation::AbortSendsUndrainedBatches,
        Mutation::EpochBumpWhileCompleting,
        Mutation::NoIdempotentEpochBump,
        Mutation::OutOfOrderNeverRetried,
        Mutation::TxnLogAppendSynchronous,
        Mutation::EndTxnEpochBeforePending,
        Mutation::Tv2FenceAbortBumpsTwice,
        Mutation::VerificationIgnoresLowestSequence,
        Mutation::VerificationEntryNeverExpires,
        Mutation::RetriesIgnored,
        Mutation::HwFromLeaderLeo,
        Mutation::TxnOffsetsVisibleBeforeCommit,
        Mutation::TruncateToOwnLeo,
        Mutation::NoRebuildAfterTruncation,
        Mutation::OffsetCommitRefusedWhilePreparingRebalance,
        Mutation::TxnStartTimestampNotReset,
        Mutation::EpochCacheKeptOnNoopTruncation,
        Mutation::InFlightBatchesNotExpired,
        Mutation::FetchIdsReusedAfterRestart,
        Mutation::IsrExpansionBelowLeaderEpochStart,
        Mutation::FencedReplicaJoinsIsr,
        Mutation::EpochExhaustionIgnored,
        Mutation::TransactionalIdsNeverExpire,
        Mutation::AddPartitionsPidBeforePending,
        Mutation::MarkerRetryResendsAllPartitions,
        Mutation::HostedPartitionsOnly,
        Mutation::AnyBrokerCoordinates,
        Mutation::IsrChangeToldToLeaderOnly,
        Mutation::FenceAbortKeepsExhaustedId,
        Mutation::NoMarkerResendOnFailover,
        Mutation::FailoverKeepsCoordinatorEpoch,
        Mutation::FencedReplicaHoldsHw,
        Mutation::DelayedFetchIgnoresLeaderChange,
        Mutation::DelayedAnswerTimedOut,
        Mutation::GroupsKeptInMemory,
        Mutation::InternalTopicsWritable,
        Mutation::SyncAnsweredBeforeStored,
        Mutation::LoadResendsSupersededDecisions,
        Mutation::OffsetFetchReadsLatest,
        Mutation::FollowerRefusesConsumerFetch,
        Mutation::TxnOffsetCommitV5OnlyVerifies,
        Mutation::Tv2FirstSequenceUnchecked,
        Mutation::ApiVersionsNamesUnchecked,
        Mutation::BatchStraddlingBoundReturned,
        Mutation::LogStartDropsOpenTransactions,
        Mutation::LastProducerEpochPersisted,
        Mutation::RotationRecordsOverflowedEpoch,
        Mutation::RetriesOvertake,
        Mutation::VerificationRefusedInvalidTxnState,
    ];

    /// The kebab-case name used on the command line and in seed files.
    pub fn name(self) -> &'static str {
        match self {
            Mutation::ReadCommittedBoundedByHw => "read-committed-bounded-by-hw",
            Mutation::LsoInclusive => "lso-inclusive",
            Mutation::LsoIgnoresOngoingTxns => "lso-ignores-ongoing-txns",
            Mutation::LsoIgnoresUnreplicatedTxns => "lso-ignores-unreplicated-txns",
            Mutation::LsoNotClampedToHw => "lso-not-clamped-to-hw",
            Mutation::SkipAbortedIndexOnFetch => "skip-aborted-index-on-fetch",
            Mutation::NoAbortedIndexEntry => "no-aborted-index-entry",
            Mutation::AllowNonTxnWriteInOpenTxn => "allow-non-txn-write-in-open-txn",
            Mutation::NoDedup => "no-dedup",
            Mutation::DuplicateReturnsWrongOffsets => "duplicate-returns-wrong-offsets",
            Mutation::SkipProducerEpochCheck => "skip-producer-epoch-check",
            Mutation::SkipCoordinatorEpochCheck => "skip-coordinator-epoch-check",
            Mutation::MarkersToSubsetOfPartitions => "markers-to-subset-of-partitions",
            Mutation::DoubleComplete => "double-complete",
            Mutation::TimeoutAbortSameEpoch => "timeout-abort-same-epoch",
            Mutation::FenceAbortSameEpoch => "fence-abort-same-epoch",
            Mutation::NoTimeoutAbort => "no-timeout-abort",
            Mutation::DropPendingMarkersOnRestart => "drop-pending-markers-on-restart",
            Mutation::RestartAbortsPreparedCommits => "restart-aborts-prepared-commits",
            Mutation::NoTxnVerification => "no-txn-verification",
            Mutation::NoPositionAdvanceOverControl => "no-position-advance-over-control",
            Mutation::AbortedPidNotClearedOnMarker => "aborted-pid-not-cleared-on-marker",
            Mutation::PositionSkipsToHighWatermark => "position-skips-to-high-watermark",
            Mutation::RedeliverLastRecord => "redeliver-last-record",
            Mutation::AbortedListForReadUncommitted => "aborted-list-for-read-uncommitted",
            Mutation::Tv2AbortKeepsEpoch => "tv2-abort-keeps-epoch",
            Mutation::Kip360RetryFenced => "kip360-retry-fenced",
            Mutation::Tv2InitAfterAbort => "tv2-init-after-abort",
            Mutation::AbortSendsUndrainedBatches => "abort-sends-undrained-batches",
            Mutation::EpochBumpWhileCompleting => "epoch-bump-while-completing",
            Mutation::NoIdempotentEpochBump => "no-idempotent-epoch-bump",
            Mutation::OutOfOrderNeverRetried => "out-of-order-never-retried",
            Mutation::TxnLogAppendSynchronous => "txn-log-append-synchronous",
            Mutation::EndTxnEpochBeforePending => "end-txn-epoch-before-pending",
            Mutation::Tv2FenceAbortBumpsTwice => "tv2-fence-abort-bumps-twice",
            Mutation::VerificationIgnoresLowestSequence => "verification-ignores-lowest-sequence",
            Mutation::VerificationEntryNeverExpires => "verification-entry-never-expires",
            Mutation::RetriesIgnored => "retries-ignored",
            Mutation::HwFromLeaderLeo => "hw-from-leader-leo",
            Mutation::TxnOffsetsVisibleBeforeCommit => "txn-offsets-visible-before-commit",
            Mutation::TruncateToOwnLeo => "truncate-to-own-leo",
            Mutation::NoRebuildAfterTruncation => "no-rebuild-after-truncation",
            Mutation::OffsetCommitRefusedWhilePreparingRebalance => "offset-commit-refused-while-preparing-rebalance",
            Mutation::TxnStartTimestampNotReset => "txn-start-timestamp-not-reset",
            Mutation::EpochCacheKeptOnNoopTruncation => "epoch-cache-kept-on-noop-truncation",
            Mutation::InFlightBatchesNotExpired => "in-flight-batches-not-expired",
            Mutation::FetchIdsReusedAfterRestart => "fetch-ids-reused-after-restart",
            Mutation::IsrExpansionBelowLeaderEpochStart => "isr-expansion-below-leader-epoch-start",
            Mutation::FencedReplicaJoinsIsr => "fenced-replica-joins-isr",
            Mutation::IsrChangeToldToLeaderOnly => "isr-change-told-to-leader-only",
            Mutation::FenceAbortKeepsExhaustedId => "fence-abort-keeps-exhausted-id",
            Mutation::NoMarkerResendOnFailover => "no-marker-resend-on-failover",
            Mutation::FailoverKeepsCoordinatorEpoch => "failover-keeps-coordinator-epoch",
            Mutation::FencedReplicaHoldsHw => "fenced-replica-holds-hw",
            Mutation::DelayedFetchIgnoresLeaderChange => "delayed-fetch-ignores-leader-change",
            Mutation::DelayedAnswerTimedOut => "delayed-answer-timed-out",
            Mutation::GroupsKeptInMemory => "groups-kept-in-memory",
            Mutation::InternalTopicsWritable => "internal-topics-writable",
            Mutation::SyncAnsweredBeforeStored => "sync-answered-before-stored",
            Mutation::LoadResendsSupersededDecisions => "load-resends-superseded-decisions",
            Mutation::OffsetFetchReadsLatest => "offset-fetch-reads-latest",
            Mutation::FollowerRefusesConsumerFetch => "follower-refuses-consumer-fetch",
            Mutation::TxnOffsetCommitV5OnlyVerifies => "txn-offset-commit-v5-only-verifies",
            Mutation::Tv2FirstSequenceUnchecked => "tv2-first-sequence-unchecked",
            Mutation::ApiVersionsNamesUnchecked => "api-versions-names-unchecked",
            Mutation::BatchStraddlingBoundReturned => "batch-straddling-bound-returned",
            Mutation::LogStartDropsOpenTransactions => "log-start-drops-open-transactions",
            Mutation::LastProducerEpochPersisted => "last-producer-epoch-persisted",
            Mutation::RotationRecordsOverflowedEpoch => "rotation-records-overflowed-epoch",
            Mutation::RetriesOvertake => "retries-overtake",
            Mutation::VerificationRefusedInvalidTxnState => "verification-refused-invalid-txn-state",
            Mutation::MarkerRetryResendsAllPartitions => "marker-retry-resends-all-partitions",
            Mutation::EpochExhaustionIgnored => "epoch-exhaustion-ignored",
            Mutation::TransactionalIdsNeverExpire => "transactional-ids-never-expire",
            Mutation::AddPartitionsPidBeforePending => "add-partitions-pid-before-pending",
            Mutation::HostedPartitionsOnly => "hosted-partitions-only",
            Mutation::AnyBrokerCoordinates => "any-broker-coordinates",
        }
    }

    pub fn from_name(name: &str) -> Option<Mutation> {
        Mutation::ALL.into_iter().find(|m| m.name() == name)
    }

    /// What the injected bug does, in one line.
    pub fn mechanism(self) -> &'static str {
        match self {
            Mutation::ReadCommittedBoundedByHw => {
                "read_committed fetches are bounded by the high watermark, not the LSO: an open transaction's records are delivered"
            }
            Mutation::LsoInclusive => {
                "the LSO is read as the last readable offset, so the batch starting at the LSO leaks to read_committed"
            }
            Mutation::LsoIgnoresOngoingTxns => "the first unstable offset ignores ongoing transactions",
            Mutation::LsoIgnoresUnreplicatedTxns => {
                "the first unstable offset ignores decided transactions whose marker is not yet below the HW"
            }
            Mutation::LsoNotClampedToHw => {
                "the LSO is not clamped to the high watermark: visibility is computed from the log end"
            }
            Mutation::SkipAbortedIndexOnFetch => {
                "a fetch does not consult the aborted-transaction index, so read_committed gets no aborted list"
            }
            Mutation::NoAbortedIndexEntry => "an aborted transaction gets no entry in the aborted-transaction index",
            Mutation::AllowNonTxnWriteInOpenTxn => {
                "non-transactional data from a producer with an open transaction on the partition is appended"
            }
            Mutation::NoDedup => {
                "idempotence off at the leader: a retried batch (same epoch and sequences as a retained one) is appended again"
            }
            Mutation::DuplicateReturnsWrongOffsets => {
                "a detected duplicate is answered with the log end instead of the original batch's offsets"
            }
            Mutation::SkipProducerEpochCheck => {
                "zombie fencing off at the leader: batches with an epoch below the producer's current one are appended"
            }
            Mutation::SkipCoordinatorEpochCheck => "markers from a stale coordinator epoch are accepted",
            Mutation::MarkersToSubsetOfPartitions => {
                "the coordinator writes markers to the first partition only, then completes the transaction"
            }
            Mutation::DoubleComplete => {
                "a late marker acknowledgement writes Complete* again, unchecked, over whatever state the id is in"
            }
            Mutation::TimeoutAbortSameEpoch => {
                "a timeout abort keeps the producer's epoch, so the timed-out producer is not fenced"
            }
            Mutation::FenceAbortSameEpoch => {
                "an InitProducerId fence aborts the old instance's transaction with the old epoch"
            }
            Mutation::NoTimeoutAbort => {
                "the coordinator's timeout scan never aborts anything: a dead producer's transaction hangs"
            }
            Mutation::DropPendingMarkersOnRestart => {
                "a restarted coordinator does not resend the markers of PrepareCommit/PrepareAbort transactions"
            }
            Mutation::RestartAbortsPreparedCommits => {
                "a reloaded coordinator resends a PrepareCommit's markers as ABORT: the decision is not irrevocable"
            }
            Mutation::NoTxnVerification => {
                "the leader appends a transactional batch without asking the coordinator whether the partition is in the transaction"
            }
            Mutation::NoPositionAdvanceOverControl => {
                "the consumer's position does not move past control batches and skipped aborted batches"
            }
            Mutation::AbortedPidNotClearedOnMarker => {
                "the consumer keeps a producer in its aborted set after that producer's ABORT marker, dropping its later batches"
            }
            Mutation::PositionSkipsToHighWatermark => {
                "the consumer moves its position to the response's high watermark, past records it never delivered"
            }
            Mutation::RedeliverLastRecord => {
                "the consumer sets its position to the last delivered offset instead of the one after it"
            }
            Mutation::AbortedListForReadUncommitted => {
                "the broker attaches the aborted list at read_uncommitted and the consumer filters with it"
            }
            Mutation::Tv2AbortKeepsEpoch => "The pre-4.0 TV2 EndTxn table: an ABORT at the current epoch of a completed or empty transaction keeps the epoch (NONE or INVALID_TXN_STATE), so a late batch of the aborted send joins the next transaction.",
            Mutation::Kip360RetryFenced => "KIP-360 retry lost: an InitProducerId naming the epoch the coordinator bumped from (its first answer was lost) is fenced instead of answered with the current epoch.",
            Mutation::Tv2InitAfterAbort => "The TV1 client policy under TV2: after an abort with a failed batch the client sends a KIP-360 InitProducerId though the EndTxn answer already bumped its epoch (`needToTriggerEpochBumpFromClient`).",
            Mutation::AbortSendsUndrainedBatches => "`abortUndrainedBatches` missing: batches not yet sent when the application aborts (or an abortable error strikes) are sent anyway instead of failing with TransactionAbortedException.",
            Mutation::EpochBumpWhileCompleting => "A batch that fails while a commit or abort is completing still sets the KIP-360 epoch bump.",
            Mutation::NoIdempotentEpochBump => "An idempotent producer never bumps its epoch after a sequence gap or an expired batch.",
            Mutation::OutOfOrderNeverRetried => "OUT_OF_ORDER_SEQUENCE is final even for a batch that is not the next sequence (an earlier one's failure).",
            Mutation::TxnLogAppendSynchronous => "The coordinator's `__transaction_state` append completes the moment a transition is prepared: no pending window, so nothing can meet a transition whose record is not yet written.",
            Mutation::EndTxnEpochBeforePending => "KAFKA-18464 undone: a TV2 EndTxn checks the epoch before the pending transition, so an empty abort sent right after a commit's answer (one epoch up, markers still out) is fenced.",
            Mutation::Tv2FenceAbortBumpsTwice => "KAFKA-19367 undone (Kafka 4.0.0): under TV2 the abort after a fence or timeout bumps the epoch again.",
            Mutation::VerificationIgnoresLowestSequence => "KIP-890's `VerificationStateEntry` without its sequence: a later batch of a producer being verified may be appended before an earlier one (the earlier then fails OUT_OF_ORDER_SEQUENCE).",
            Mutation::VerificationEntryNeverExpires => "A `VerificationStateEntry` whose answer never came stays forever (no `producer.id.expiration.ms`).",
            Mutation::RetriesIgnored => "The producer's `retries` is ignored: a plain producer with `retries=0` resends a batch after a disconnect, and a batch the broker had written is written twice.",
            Mutation::TxnOffsetsVisibleBeforeCommit => "A TxnOffsetCommit's offsets are committed when the request is written, not when the transaction's COMMIT marker reaches `__consumer_offsets`: OffsetFetch shows them while the transaction is open and keeps them after it aborts.",
            Mutation::HwFromLeaderLeo => "The leader's high watermark is its own log end offset, whatever its in-sync followers hold: an acks=all write is acknowledged and made visible before any follower has it.",
            Mutation::TruncateToOwnLeo => "A follower told its last fetched epoch diverges from the new leader's log truncates to its own log end instead of the diverging epoch's end offset, and fetches on from there as if reconciled: its unreplicated suffix stays under the leader's later batches.",
            Mutation::InFlightBatchesNotExpired => "A batch that has been sent does not expire at its delivery timeout, as before KIP-91: only batches still in the accumulator do. A sent batch waits for its answer and is retried, so its send can stay unanswered long past delivery.timeout.ms.",
            Mutation::EpochCacheKeptOnNoopTruncation => "A truncation at or past the log end leaves the leader-epoch cache as it was: a broker that became leader, recorded its epoch at its log end and was replaced before appending keeps fetching with that epoch, the new leader answers a diverging epoch that truncates nothing, and the follower never rejoins the ISR.",
            Mutation::TxnStartTimestampNotReset => "A new transaction keeps the txnStartTimestamp of the producer's InitProducerId (or of its previous transaction), so the coordinator's timeout scan aborts a transaction open for less than transaction.timeout.ms.",
            Mutation::OffsetCommitRefusedWhilePreparingRebalance => "A classic group's plain OffsetCommit is refused with REBALANCE_IN_PROGRESS while the group prepares a rebalance, accepted while the generation's assignment is still being synced, and does not extend the member's session.",
            Mutation::FetchIdsReusedAfterRestart => "A restarted follower numbers its fetches from the start again, so the leader's answer to a fetch its previous life sent is taken for its own: a diverging epoch computed for the old log end truncates an ISR member below the HW.",
            Mutation::IsrExpansionBelowLeaderEpochStart => "A follower joins the ISR once it reaches the leader's HW, even below the offset the leader's epoch began at: a new leader whose HW lags what its predecessor committed takes a follower holding less than its log into the ISR, which may then lead without the committed writes.",
            Mutation::FenceAbortKeepsExhaustedId => "Kafka 4.x before KAFKA-20090: a TV2 fence or timeout abort at an exhausted epoch allocates no next producer id, so the transactional id completes at Short.MAX_VALUE - 1 or above under its old id, one bump short of overflow (a delayed EndTxn then finds it a retry, and the transaction can hang).",
            Mutation::FencedReplicaHoldsHw => "A leader keeps waiting for a follower the controller fenced and took out of the ISR, as one caught up and about to rejoin: the HW (and every acks=all write, the coordinator's __transaction_state appends too) stands still until replica.lag.time.max.ms has passed since the dead broker last caught up.",
            Mutation::DelayedFetchIgnoresLeaderChange => "A follower's fetch parked at a broker that stops leading one of its partitions waits out replica.fetch.wait.max.ms instead of being answered NOT_LEADER_OR_FOLLOWER at once: the follower's other partitions on that broker wait with it.",
            Mutation::DelayedAnswerTimedOut => "The wire driver answers REQUEST_TIMED_OUT to a request the engine has not answered by the end of the request's own deliveries (an acks=all Produce waiting for the HW, a coordinator's __transaction_state write waiting for its followers) instead of holding the connection until the engine answers: the write goes on and completes while the client, told it timed out, retries it (CONCURRENT_TRANSACTIONS until it completes; a retried InitProducerId bumps the epoch a second time).",
            Mutation::GroupsKeptInMemory => "The group coordinator writes no plain offset commit and no group metadata to __consumer_offsets and answers at once: a coordinator that takes a group over after a crash loads neither its committed offsets nor its members, so consumers restart from their reset policy and rejoin.",
            Mutation::InternalTopicsWritable => "A client's Produce to __transaction_state or __consumer_offsets is appended like any other: a wire client can write records the coordinators never wrote into their logs, and the next coordinator to load the log reads them as its own.",
            Mutation::SyncAnsweredBeforeStored => "The leader's SyncGroup makes the group Stable and answers every member at once, before the group's metadata record is replicated: a coordinator that takes the group over after a crash may know an older generation than its members were told, and a failed write is never reported to them.",
            Mutation::LoadResendsSupersededDecisions => "A loading coordinator resends the markers of every undecided Prepare* record whose producer id and epoch match the id's loaded state, not only its newest: a PrepareCommit whose append timed out (its record still in the log) and the PrepareAbort the timeout scan wrote after it at the same TV2 epoch both get markers, so one transaction is committed on some partitions and aborted on others.",
            Mutation::FollowerRefusesConsumerFetch => "A follower refuses every consumer's Fetch with NOT_LEADER_OR_FOLLOWER, as before KIP-392: a Fetch v11+, which carries the client's metadata, is not served from the follower's own log bounded by its own HW and LSO, so a client that reads a partition's replicas one by one (as the real-Kafka test does) cannot.",
            Mutation::TxnOffsetCommitV5OnlyVerifies => "A TxnOffsetCommit v5 (transaction version 2) only verifies that the group's offsets partition is in the transaction, as v4 does, instead of adding it: a TV2 client, which sends no AddOffsetsToTxn, has its offsets refused with TRANSACTION_ABORTABLE.",
            Mutation::Tv2FirstSequenceUnchecked => "KAFKA-18202 undone: under transaction version 2 a transactional batch from a producer with no batches on the partition is appended whatever its first sequence, so a reordered second batch lands at the partition's first offset and the first one is then refused.",
            Mutation::ApiVersionsNamesUnchecked => "An ApiVersions v3+ request is answered in full whatever the client's software name and version, where Kafka answers INVALID_REQUEST with no API listed for an empty or malformed one.",
            Mutation::BatchStraddlingBoundReturned => "A read bounded inside a batch (a high watermark or LSO that falls between a batch's first and last offsets) returns that batch whole, records above the bound included, where Kafka stops before it.",
            Mutation::LogStartDropsOpenTransactions => "DeleteRecords forgets every open transaction that began below the new log start: the LSO jumps past it to the HW, so read_committed consumers read the rest of a transaction that has not ended, and its ABORT marker writes no aborted-index entry.",
            Mutation::LastProducerEpochPersisted => "A coordinator that loads __transaction_state after a move keeps each id's last producer epoch, as KAFKA-20357 (after Kafka 4.3.1) makes it: a KIP-360 InitProducerId retried after the failover gets its answer again, where Kafka 4.3.1 loads no last epoch and fences it with PRODUCER_FENCED.",
            Mutation::RotationRecordsOverflowedEpoch => "A TV2 completion that moves an exhausted id to its next producer id records the overflowed epoch (Short.MAX_VALUE) as the last one, where Kafka keeps Short.MAX_VALUE - 1 from prepareAbortOrCommit: a KIP-360 InitProducerId retried with the client's last epoch is then fenced.",
            Mutation::RetriesOvertake => "A retried batch is resent as soon as its backoff is over, whatever earlier batch of its partition is still unanswered, and new batches of the partition drain past it: the leader gets the partition's sequences out of order and answers OUT_OF_ORDER_SEQUENCE_NUMBER again, until the earlier batch lands.",
            Mutation::VerificationRefusedInvalidTxnState => "The coordinator refuses a KIP-890 verification of a partition the transaction does not hold with INVALID_TXN_STATE whatever the client's request version, where Kafka answers TRANSACTION_ABORTABLE to Produce v11+ and TxnOffsetCommit v4+ and keeps INVALID_TXN_STATE for older clients.",
            Mutation::OffsetFetchReadsLatest => "The group coordinator answers every OffsetFetch from its latest state, at once: an offset whose record is not yet replicated (a commit just appended, or one a new coordinator loaded from its log end) is handed to a consumer, though an election may still lose it, and a stable fetch does not wait for it.",
            Mutation::NoMarkerResendOnFailover => "A broker that becomes the leader of __transaction_state loads its transactions but sends no markers for those it finds PrepareCommit or PrepareAbort: the decision its predecessor made is never written to the partitions it has not reached, and they stay open, blocking the LSO, until something else ends them.",
            Mutation::FailoverKeepsCoordinatorEpoch => "A coordinator that loads __transaction_state after a failover takes the coordinator epoch its predecessor wrote with instead of the partition's new leader epoch: partition leaders cannot tell the old coordinator's late markers from its own, so a retry of an old decision can close the producer's next transaction.",
            Mutation::IsrChangeToldToLeaderOnly => "The controller answers a committed AlterPartition to the leader alone and writes no PartitionChangeRecord: every broker's metadata cache (the leader's too; only its partition state takes the answer) keeps the old ISR, so Metadata answers name replicas that left it, or miss those that rejoined.",
            Mutation::FencedReplicaJoinsIsr => "The controller commits an ISR expansion naming a fenced broker: a fetch sent before its broker died, answered after, puts the dead broker back in the ISR, where it counts toward acks=all and the HW while holding nothing new, and may be elected with less than was acknowledged.",
            Mutation::MarkerRetryResendsAllPartitions => "One leader's retriable WriteTxnMarkers error sends the markers of every unacknowledged partition again, including those still in flight to other leaders: the resend is acknowledged, the transaction completes, the producer begins its next one at the same epoch (TV1), and the first request, arriving late, writes a COMMIT marker that closes it half-written.",
            Mutation::NoRebuildAfterTruncation => "A follower that truncates its log keeps its producer state, open transactions and aborted index as they were: transactions and index entries of the dropped batches outlive them.",
            Mutation::EpochExhaustionIgnored => "The coordinator counts only Short.MAX_VALUE as an exhausted epoch, keeping none back for fencing: an InitProducerId or a TV2 commit at Short.MAX_VALUE - 1 hands Short.MAX_VALUE itself to the client, which then can never be fenced, instead of a new producer id at epoch 0.",
            Mutation::TransactionalIdsNeverExpire => "The coordinator never expires a transactional id: one idle for transactional.id.expiration.ms keeps its producer id and epoch, and its next InitProducerId bumps that epoch instead of starting a new producer id.",
            Mutation::AddPartitionsPidBeforePending => "KAFKA-18660 undone: AddPartitionsToTxn checks the producer id and epoch before the pending transition, so after a TV2 commit that rotated the producer id, the next transaction's partitions, sent under the new id while the markers are still out, are refused INVALID_PRODUCER_ID_MAPPING.",
            Mutation::HostedPartitionsOnly => "A broker knows only the partitions it hosts a replica of, not its metadata cache: the coordinator refuses AddPartitionsToTxn and TxnOffsetCommit of a partition led elsewhere with UNKNOWN_TOPIC_OR_PARTITION, and a Produce or Fetch sent to a broker outside the partition's replicas is told the partition does not exist instead of NOT_LEADER_OR_FOLLOWER.",
            Mutation::AnyBrokerCoordinates => "Every broker serves coordinator requests from its own coordinators' state: a client that sends InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn or EndTxn, or a group request, to a broker other than the coordinator's gets a second coordinator for the same transactional id or group (its own producer id and epoch, its own members and offsets) instead of NOT_COORDINATOR.",
        }
    }

    /// The Kafka JIRA, KIP or Kafka-compatible broker's issue the bug comes from, or the Kafka class whose
    /// check it removes.
    pub fn kafka(self) -> &'static str {
        match self {
            Mutation::ReadCommittedBoundedByHw => "Redpanda PR #3036, generalised (KIP-98 fetch isolation)",
            Mutation::LsoInclusive => "Redpanda PR #3036 (the LSO is an exclusive bound)",
            Mutation::LsoIgnoresOngoingTxns => "KAFKA-13194 family (ProducerStateManager.firstUnstableOffset)",
            Mutation::LsoIgnoresUnreplicatedTxns => "KAFKA-13194 family (ProducerStateManager.unreplicatedTxns)",
            Mutation::LsoNotClampedToHw => "KAFKA-13194, Redpanda #5090",
            Mutation::SkipAbortedIndexOnFetch => "KAFKA-5376",
            Mutation::NoAbortedIndexEntry => "KAFKA-13727, KAFKA-7866",
            Mutation::AllowNonTxnWriteInOpenTxn => "KIP-98 (ProducerAppendInfo.appendDataBatch)",
            Mutation::NoDedup => "KIP-98 idempotence (ProducerStateEntry.findDuplicateBatch)",
            Mutation::DuplicateReturnsWrongOffsets => "KIP-98 idempotence (ProducerStateEntry.findDuplicateBatch)",
            Mutation::SkipProducerEpochCheck => "KIP-98 fencing (ProducerAppendInfo.checkProducerEpoch)",
            Mutation::SkipCoordinatorEpochCheck => "KAFKA-9144 family, KIP-664",
            Mutation::MarkersToSubsetOfPartitions => "TransactionMarkerRequestCompletionHandler, KAFKA-5202",
            Mutation::DoubleComplete => "KAFKA-10080",
            Mutation::TimeoutAbortSameEpoch => "KAFKA-6119",
            Mutation::FenceAbortSameEpoch => "KAFKA-5231",
            Mutation::NoTimeoutAbort => {
                "KIP-98 transaction.timeout.ms (TransactionCoordinator.abortTimedOutTransactions)"
            }
            Mutation::DropPendingMarkersOnRestart => "KAFKA-16352",
            Mutation::RestartAbortsPreparedCommits => "KIP-98 (TransactionStateManager.loadTransactions)",
            Mutation::NoTxnVerification => "KIP-890 motivation, KAFKA-14402",
            Mutation::NoPositionAdvanceOverControl => "KAFKA-12980, KAFKA-6607",
            Mutation::AbortedPidNotClearedOnMarker => "CompletedFetch.nextFetchedRecord (abortedProducerIds)",
            Mutation::PositionSkipsToHighWatermark => "CompletedFetch / FetchCollector (nextFetchOffset)",
            Mutation::RedeliverLastRecord => "KAFKA-6607 (offset + 1)",
            Mutation::AbortedListForReadUncommitted => "Redpanda #6630, PR #18852, franz-go PR #758",
            Mutation::Tv2AbortKeepsEpoch => {
                "KIP-890 / Kafka 4.0: TransactionCoordinator.endTransaction, the TV2 table's EB cells"
            }
            Mutation::Kip360RetryFenced => {
                "KIP-360: TransactionMetadata.prepareIncrementProducerEpoch (expected epoch == lastProducerEpoch)"
            }
            Mutation::Tv2InitAfterAbort => {
                "KAFKA-17898 / PR #17849: TransactionManager.needToTriggerEpochBumpFromClient"
            }
            Mutation::AbortSendsUndrainedBatches => {
                "Sender.maybeSendAndPollTransactionalRequest, RecordAccumulator.abortUndrainedBatches"
            }
            Mutation::EpochBumpWhileCompleting => "TransactionManager.maybeTransitionToErrorState (!isCompleting())",
            Mutation::NoIdempotentEpochBump => "TransactionManager.bumpIdempotentEpochAndResetIdIfNeeded",
            Mutation::OutOfOrderNeverRetried => {
                "TransactionManager.canRetry (OUT_OF_ORDER_SEQUENCE_NUMBER, isNextSequence)"
            }
            Mutation::TxnLogAppendSynchronous => "TransactionStateManager.appendTransactionToLog (the transition completes only once its record is written)",
            Mutation::EndTxnEpochBeforePending => "KAFKA-18464 (PR #18467): TV2 EndTxn checks the pending transition before the epoch",
            Mutation::Tv2FenceAbortBumpsTwice => "KAFKA-19367 (PR #19910), in Kafka 4.0.0",
            Mutation::VerificationIgnoresLowestSequence => "KIP-890 part 1: VerificationStateEntry.lowestSequence (ProducerStateManagerTest#testThrowOutOfOrderSequenceWithVerificationSequenceCheck)",
            Mutation::VerificationEntryNeverExpires => "KIP-890 part 1: VerificationStateEntry expiry by producer.id.expiration.ms",
            Mutation::RetriesIgnored => "Sender.canRetry (batch.attempts() < retries; SenderTest#testRetries)",
            Mutation::TxnOffsetsVisibleBeforeCommit => "KIP-98 (OffsetMetadataManager.replayEndTransactionMarker: pending transactional offsets)",
            Mutation::HwFromLeaderLeo => "Partition.maybeIncrementLeaderHW (the HW is the minimum LEO over the maximal ISR; KIP-497, KIP-101)",
            Mutation::TruncateToOwnLeo => "KIP-101 / KIP-279: AbstractFetcherThread.getOffsetTruncationState (min of the epoch end offsets and the LEO)",
            Mutation::EpochCacheKeptOnNoopTruncation => "UnifiedLog.truncateTo (UnifiedLogTest#testTruncateToEndOffsetClearsEpochCache)",
            Mutation::InFlightBatchesNotExpired => "KIP-91 (Sender.getExpiredInflightBatches; SenderTest#testInflightBatchesExpireOnDeliveryTimeout)",
            Mutation::TxnStartTimestampNotReset => "TransactionMetadata.prepareAddPartitions (txnStartTimestamp when leaving Empty or Complete*), TransactionStateManager.timedOutTransactions",
            Mutation::OffsetCommitRefusedWhilePreparingRebalance => "ClassicGroup.validateOffsetCommit, OffsetMetadataManager.commitOffset (OffsetMetadataManagerTest#testGenericGroupOffsetCommitWhileInCompletingRebalanceState)",
            Mutation::FetchIdsReusedAfterRestart => "NetworkClient / SocketServer: an answer goes back on its request's connection, which a crash closes (AbstractFetcherThread matches no answer across a restart)",
            Mutation::IsrExpansionBelowLeaderEpochStart => "KIP-101 / KAFKA-7128: Partition.isFollowerInSync (leaderEpochStartOffsetOpt; PartitionTest#testFollowerDoesNotJoinISRUntilCaughtUpToOffsetWithinCurrentLeaderEpoch)",
            Mutation::FenceAbortKeepsExhaustedId => "KAFKA-20090 (PR #21506): TransactionCoordinator.endTransaction's TV2 completion rotates the producer id for epoch-fence aborts too",
            Mutation::FencedReplicaHoldsHw => "KIP-841: Partition.maybeIncrementLeaderHW waits for a replica outside the ISR only if isReplicaIsrEligible (not fenced, not shutting down); PartitionTest#testHighWatermarkIncreasesWithFencedOrShutdownFollower",
            Mutation::DelayedFetchIgnoresLeaderChange => "ReplicaManager.completeDelayedOperationsWhenNotPartitionLeader checks the fetch purgatory, and DelayedFetch.tryComplete completes a fetch of a partition no longer led here (DelayedFetchTest#testNotLeaderOrFollower)",
            Mutation::DelayedAnswerTimedOut => "KafkaApis answers a Produce from DelayedProduce (replicated, or REQUEST_TIMED_OUT only when the request's timeout expires: DelayedProduce.onExpiration) and a coordinator request from the append callback of TransactionStateManager.appendTransactionToLog, which waits with acks=-1; SocketServer keeps the connection muted meanwhile",
            Mutation::GroupsKeptInMemory => "GroupMetadataManager writes an OffsetCommit record for each commit and a GroupMetadata record when a classic group's generation becomes Stable or the group Empty, and CoordinatorLoaderImpl replays them on election (GroupCoordinatorShard.replay and onLoaded; GroupCoordinatorShardTest#testReplayOffsetCommit, #testOnLoaded)",
            Mutation::InternalTopicsWritable => "ReplicaManager.appendToLocalLog refuses an append to an internal topic (Topic.isInternal) from any client but the admin client with InvalidTopicException, \"Cannot append to internal topic\" (from the code; no test of Kafka's ported)",
            Mutation::SyncAnsweredBeforeStored => "GroupMetadataManager's classic SyncGroup appends the group's metadata record and, in its append callback, propagates the assignment and transitions to Stable, or on an error answers every member it (appendGroupMetadataErrorToResponseError) and rebalances (resetAndPropagateAssignmentWithError)",
            Mutation::LoadResendsSupersededDecisions => "TransactionStateManager.loadTransactionMetadata puts each record into the cache by transactional id, so only the newest survives (TransactionStateManagerTest#testLoadAndRemoveTransactionsForPartition: the loaded metadata equals the latest status), and loadTransactionsForTxnTopicPartition completes that one state's transaction (#shouldWriteTxnMarkersForTransactionInPreparedAbortState); a failed append leaves its record in the log while the cache reverts (#testAppendFailToCoordinatorNotAvailableError)",
            Mutation::FollowerRefusesConsumerFetch => "KIP-392: FetchParams.fetchOnlyLeader is false for a consumer's fetch with clientMetadata, which KafkaApis.handleFetchRequest sets from Fetch v11; Partition.localLogWithEpochOrThrow then serves a follower's log (checked against a real Kafka 4.3.1 cluster in tests/apache_kafka.rs)",
            Mutation::TxnOffsetCommitV5OnlyVerifies => "KIP-890 part 2: CoordinatorPartitionWriter.maybeStartTransactionVerification asks ReplicaManager for TransactionSupportedOperation addPartition from TxnOffsetCommit v5, and TransactionManager.sendOffsetsToTransaction skips AddOffsetsToTxn under TV2 (Kafka's Java client 4.3.1 against serve, tests/wire_clients.rs)",
            Mutation::Tv2FirstSequenceUnchecked => "KAFKA-18202 (Kafka 4.1): ProducerAppendInfo.checkSequence refuses a non-zero first sequence when the VerificationStateEntry supports epoch bump and the producer's entry is empty (checked against a real Kafka 4.3.1 cluster in tests/apache_kafka.rs)",
            Mutation::ApiVersionsNamesUnchecked => "KIP-511: ApiVersionsRequest.isValid (SOFTWARE_NAME_VERSION_PATTERN) and KafkaApis.handleApiVersionsRequest's INVALID_REQUEST (checked against a real Kafka 4.3.1 cluster in tests/apache_kafka.rs)",
            Mutation::BatchStraddlingBoundReturned => "UnifiedLog.fetchHighWatermarkMetadata and LogSegment.translateOffset turn the bound into the position of the batch holding it, and LocalLog.read reads up to that position",
            Mutation::LogStartDropsOpenTransactions => "ProducerStateManager.onLogStartOffsetIncremented removes only completed transactions (removeUnreplicatedTransactions); UnifiedLog.maybeIncrementFirstUnstableOffset clamps the first unstable offset to the log start",
            Mutation::LastProducerEpochPersisted => "Kafka 4.3.1: TransactionLogValue has no last-epoch field and TransactionLog.read sets lastProducerEpoch to NO_PRODUCER_EPOCH; TransactionMetadata.prepareIncrementProducerEpoch then finds the retried epoch neither current nor last (KAFKA-20357 persists it, after 4.3.1)",
            Mutation::RotationRecordsOverflowedEpoch => "TransactionMetadata.prepareComplete keeps lastProducerEpoch as prepareAbortOrCommit left it (Short.MAX_VALUE - 1; its comment says validProducerEpoch relies on it), Kafka 4.3.1",
            Mutation::RetriesOvertake => "RecordAccumulator.reenqueue puts a retried batch back at the head of its partition's queue (insertInSequenceOrder) and shouldStopDrainBatchesForPartition holds it while TransactionManager.firstInFlightSequence is another batch's (SenderTest#testCorrectHandlingOfOutOfOrderResponses)",
            Mutation::VerificationRefusedInvalidTxnState => "TransactionCoordinator.handleVerifyPartitionsInTransaction answers TRANSACTION_ABORTABLE per missing partition; AddPartitionsToTxnManager turns it into INVALID_TXN_STATE only for DEFAULT_ERROR clients (Produce up to v10, TxnOffsetCommit up to v3), checked against a real Kafka 4.3.1 cluster in tests/apache_kafka.rs",
            Mutation::OffsetFetchReadsLatest => "GroupCoordinatorService.fetchOffsets: without requireStable a read operation at the last committed offset (CoordinatorRuntime.scheduleReadOperation; OffsetMetadataManagerTest#testFetchOffsetsAtDifferentCommittedOffset), with it a write operation answered once the HW reaches the last written offset (#testFetchOffsetsWithPendingTransactionalOffsets)",
            Mutation::NoMarkerResendOnFailover => "TransactionStateManager.loadTransactionsForTxnTopicPartition sends the markers of every PrepareCommit/PrepareAbort it loads (TransactionStateManagerTest#testLoadAndRemoveTransactionsForPartition, TransactionMarkerChannelManagerTest#shouldNotLoseTxnCompletionAfterLoad)",
            Mutation::FailoverKeepsCoordinatorEpoch => "TransactionCoordinator.onElection(txnTopicPartitionId, coordinatorEpoch): the coordinator epoch is the __transaction_state partition's leader epoch, and leaders fence markers of a lower one (ProducerStateManager, TRANSACTION_COORDINATOR_FENCED)",
            Mutation::IsrChangeToldToLeaderOnly => "ReplicationControlManager.alterPartition returns the change as a PartitionChangeRecord, which every broker replays into its metadata cache (ReplicationControlManagerTest's sendAlterPartition replays result.records())",
            Mutation::FencedReplicaJoinsIsr => "KIP-841: ReplicationControlManager.validateAlterPartitionData answers INELIGIBLE_REPLICA (ReplicationControlManagerTest#testAlterPartitionShouldRejectFencedBrokers)",
            Mutation::MarkerRetryResendsAllPartitions => "TransactionMarkerRequestCompletionHandler.onComplete re-queues only the failed partitions (TransactionMarkerRequestCompletionHandlerTest#verifyRetriesPartitionOnError: addTxnMarkersToBrokerQueue with the failed partition only)",
            Mutation::NoRebuildAfterTruncation => "KAFKA-12153, KAFKA-13727: UnifiedLog.truncateTo rebuilds producer state and truncates the transaction index",
            Mutation::EpochExhaustionIgnored => "TransactionMetadata.isEpochExhausted, prepareProducerIdRotation, prepareComplete (nextProducerId); TransactionCoordinatorTest#shouldGenerateNewProducerIdIfEpochsExhausted",
            Mutation::TransactionalIdsNeverExpire => "TransactionStateManager.removeExpiredTransactionalIds (transactional.id.expiration.ms); TransactionStateManagerTest#shouldRemoveCompleteCommitExpiredTransactionalIds",
            Mutation::AddPartitionsPidBeforePending => "KAFKA-18660 (PR #18730, Kafka 4.0): TransactionCoordinator.handleAddPartitionsToTransaction checks the pending transition first",
            Mutation::HostedPartitionsOnly => "MetadataCache.contains: KafkaApis.handleAddPartitionsToTxnRequest and handleTxnOffsetCommitRequest, ReplicaManager.getPartitionOrError (NOT_LEADER_OR_FOLLOWER for a partition the cache has and the broker does not host)",
            Mutation::AnyBrokerCoordinates => "TransactionStateManager.getTransactionState and GroupCoordinatorService answer NOT_COORDINATOR for a transactional id or group whose __transaction_state or __consumer_offsets partition the broker does not own (TransactionCoordinatorTest#shouldRespondWithNotCoordinatorOnInitPidWhenNotCoordinator, #shouldRespondWithNotCoordinatorOnAddPartitionsWhenNotCoordinator, #shouldRespondWithNotCoordinatorOnEndTxnWhenIsNotCoordinatorForId)",
        }
    }
}

/// The set of mutations switched on; empty in every normal run.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Mutations(BTreeSet<Mutation>);

impl Mutations {
    pub fn none() -> Self {
        Mutations::default()
    }
    pub fn one(m: Mutation) -> Self {
        Mutations([m].into_iter().collect())
    }
    pub fn has(&self, m: Mutation) -> bool {
        self.0.contains(&m)
    }
    pub fn iter(&self) -> impl Iterator<Item = Mutation> + '_ {
        self.0.iter().copied()
    }
}
