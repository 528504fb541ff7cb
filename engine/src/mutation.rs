//! Injectable historical bugs (Kafka JIRAs such as KAFKA-6119, KAFKA-13194). Each is one small, marked branch in the
//! engine, off by default; they exist only to prove that the suite's checkers catch the bug. What each
//! one breaks is `Mutation::mechanism`, where Kafka (or a Kafka-compatible broker) had it is
//! `Mutation::kafka`; `txnsim mutations` prints both with the invariants that catch it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// Declares every mutation once: its variant, its kebab-case name (the command line's and the seed files'),
/// what the injected bug does in one line, and the Kafka JIRA, KIP, Kafka-compatible broker's issue or
/// Kafka class it comes from. `Mutation`, `Mutation::ALL` and the three lookups are generated from the list,
/// so none can miss a variant.
macro_rules! mutations {
    ($($variant:ident => $name:literal, $mechanism:literal, $kafka:literal;)+) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub enum Mutation {
            $($variant,)+
        }

        impl Mutation {
            pub const ALL: [Mutation; [$(stringify!($variant)),+].len()] = [$(Mutation::$variant),+];

            /// The kebab-case name used on the command line and in seed files.
            pub fn name(self) -> &'static str {
                match self {
                    $(Mutation::$variant => $name,)+
                }
            }

            /// What the injected bug does, in one line.
            pub fn mechanism(self) -> &'static str {
                match self {
                    $(Mutation::$variant => $mechanism,)+
                }
            }

            /// The Kafka JIRA, KIP or Kafka-compatible broker's issue the bug comes from, or the Kafka class
            /// whose check it removes.
            pub fn kafka(self) -> &'static str {
                match self {
                    $(Mutation::$variant => $kafka,)+
                }
            }
        }
    };
}

mutations! {
    ReadCommittedBoundedByHw => "read-committed-bounded-by-hw",
        "read_committed fetches are bounded by the high watermark, not the LSO: an open transaction's records are delivered",
        "Redpanda PR #3036, generalised (KIP-98 fetch isolation)";
    LsoInclusive => "lso-inclusive",
        "the LSO is read as the last readable offset, so the batch starting at the LSO leaks to read_committed",
        "Redpanda PR #3036 (the LSO is an exclusive bound)";
    LsoIgnoresOngoingTxns => "lso-ignores-ongoing-txns",
        "the first unstable offset ignores ongoing transactions",
        "KAFKA-13194 family (ProducerStateManager.firstUnstableOffset)";
    LsoIgnoresUnreplicatedTxns => "lso-ignores-unreplicated-txns",
        "the first unstable offset ignores decided transactions whose marker is not yet below the HW",
        "KAFKA-13194 family (ProducerStateManager.unreplicatedTxns)";
    LsoNotClampedToHw => "lso-not-clamped-to-hw",
        "the LSO is not clamped to the high watermark: visibility is computed from the log end",
        "KAFKA-13194, Redpanda #5090";
    SkipAbortedIndexOnFetch => "skip-aborted-index-on-fetch",
        "a fetch does not consult the aborted-transaction index, so read_committed gets no aborted list",
        "KAFKA-5376";
    NoAbortedIndexEntry => "no-aborted-index-entry",
        "an aborted transaction gets no entry in the aborted-transaction index",
        "KAFKA-13727, KAFKA-7866";
    AllowNonTxnWriteInOpenTxn => "allow-non-txn-write-in-open-txn",
        "non-transactional data from a producer with an open transaction on the partition is appended",
        "KIP-98 (ProducerAppendInfo.appendDataBatch)";
    NoDedup => "no-dedup",
        "idempotence off at the leader: a retried batch (same epoch and sequences as a retained one) is appended again",
        "KIP-98 idempotence (ProducerStateEntry.findDuplicateBatch)";
    DuplicateReturnsWrongOffsets => "duplicate-returns-wrong-offsets",
        "a detected duplicate is answered with the log end instead of the original batch's offsets",
        "KIP-98 idempotence (ProducerStateEntry.findDuplicateBatch)";
    SkipProducerEpochCheck => "skip-producer-epoch-check",
        "zombie fencing off at the leader: batches with an epoch below the producer's current one are appended",
        "KIP-98 fencing (ProducerAppendInfo.checkProducerEpoch)";
    SkipCoordinatorEpochCheck => "skip-coordinator-epoch-check",
        "markers from a stale coordinator epoch are accepted",
        "KAFKA-9144 family, KIP-664";
    MarkersToSubsetOfPartitions => "markers-to-subset-of-partitions",
        "the coordinator writes markers to the first partition only, then completes the transaction",
        "TransactionMarkerRequestCompletionHandler, KAFKA-5202";
    DoubleComplete => "double-complete",
        "a late marker acknowledgement writes Complete* again, unchecked, over whatever state the id is in",
        "KAFKA-10080";
    TimeoutAbortSameEpoch => "timeout-abort-same-epoch",
        "a timeout abort keeps the producer's epoch, so the timed-out producer is not fenced",
        "KAFKA-6119";
    FenceAbortSameEpoch => "fence-abort-same-epoch",
        "an InitProducerId fence aborts the old instance's transaction with the old epoch",
        "KAFKA-5231";
    NoTimeoutAbort => "no-timeout-abort",
        "the coordinator's timeout scan never aborts anything: a dead producer's transaction hangs",
        "KIP-98 transaction.timeout.ms (TransactionCoordinator.abortTimedOutTransactions)";
    DropPendingMarkersOnRestart => "drop-pending-markers-on-restart",
        "a restarted coordinator does not resend the markers of PrepareCommit/PrepareAbort transactions",
        "KAFKA-16352";
    RestartAbortsPreparedCommits => "restart-aborts-prepared-commits",
        "a reloaded coordinator resends a PrepareCommit's markers as ABORT: the decision is not irrevocable",
        "KIP-98 (TransactionStateManager.loadTransactions)";
    NoTxnVerification => "no-txn-verification",
        "the leader appends a transactional batch without asking the coordinator whether the partition is in the transaction",
        "KIP-890 motivation, KAFKA-14402";
    NoPositionAdvanceOverControl => "no-position-advance-over-control",
        "the consumer's position does not move past control batches and skipped aborted batches",
        "KAFKA-12980, KAFKA-6607";
    AbortedPidNotClearedOnMarker => "aborted-pid-not-cleared-on-marker",
        "the consumer keeps a producer in its aborted set after that producer's ABORT marker, dropping its later batches",
        "CompletedFetch.nextFetchedRecord (abortedProducerIds)";
    PositionSkipsToHighWatermark => "position-skips-to-high-watermark",
        "the consumer moves its position to the response's high watermark, past records it never delivered",
        "CompletedFetch / FetchCollector (nextFetchOffset)";
    RedeliverLastRecord => "redeliver-last-record",
        "the consumer sets its position to the last delivered offset instead of the one after it",
        "KAFKA-6607 (offset + 1)";
    AbortedListForReadUncommitted => "aborted-list-for-read-uncommitted",
        "the broker attaches the aborted list at read_uncommitted and the consumer filters with it",
        "Redpanda #6630, PR #18852, franz-go PR #758";
    Tv2AbortKeepsEpoch => "tv2-abort-keeps-epoch",
        "The pre-4.0 TV2 EndTxn table: an ABORT at the current epoch of a completed or empty transaction keeps the epoch (NONE or INVALID_TXN_STATE), so a late batch of the aborted send joins the next transaction.",
        "KIP-890 / Kafka 4.0: TransactionCoordinator.endTransaction, the TV2 table's EB cells";
    Kip360RetryFenced => "kip360-retry-fenced",
        "KIP-360 retry lost: an InitProducerId naming the epoch the coordinator bumped from (its first answer was lost) is fenced instead of answered with the current epoch.",
        "KIP-360: TransactionMetadata.prepareIncrementProducerEpoch (expected epoch == lastProducerEpoch)";
    Tv2InitAfterAbort => "tv2-init-after-abort",
        "The TV1 client policy under TV2: after an abort with a failed batch the client sends a KIP-360 InitProducerId though the EndTxn answer already bumped its epoch (`needToTriggerEpochBumpFromClient`).",
        "KAFKA-17898 / PR #17849: TransactionManager.needToTriggerEpochBumpFromClient";
    AbortSendsUndrainedBatches => "abort-sends-undrained-batches",
        "`abortUndrainedBatches` missing: batches not yet sent when the application aborts (or an abortable error strikes) are sent anyway instead of failing with TransactionAbortedException.",
        "Sender.maybeSendAndPollTransactionalRequest, RecordAccumulator.abortUndrainedBatches";
    EpochBumpWhileCompleting => "epoch-bump-while-completing",
        "A batch that fails while a commit or abort is completing still sets the KIP-360 epoch bump.",
        "TransactionManager.maybeTransitionToErrorState (!isCompleting())";
    NoIdempotentEpochBump => "no-idempotent-epoch-bump",
        "An idempotent producer never bumps its epoch after a sequence gap or an expired batch.",
        "TransactionManager.bumpIdempotentEpochAndResetIdIfNeeded";
    OutOfOrderNeverRetried => "out-of-order-never-retried",
        "OUT_OF_ORDER_SEQUENCE is final even for a batch that is not the next sequence (an earlier one's failure).",
        "TransactionManager.canRetry (OUT_OF_ORDER_SEQUENCE_NUMBER, isNextSequence)";
    TxnLogAppendSynchronous => "txn-log-append-synchronous",
        "The coordinator's `__transaction_state` append completes the moment a transition is prepared: no pending window, so nothing can meet a transition whose record is not yet written.",
        "TransactionStateManager.appendTransactionToLog (the transition completes only once its record is written)";
    EndTxnEpochBeforePending => "end-txn-epoch-before-pending",
        "KAFKA-18464 undone: a TV2 EndTxn checks the epoch before the pending transition, so an empty abort sent right after a commit's answer (one epoch up, markers still out) is fenced.",
        "KAFKA-18464 (PR #18467): TV2 EndTxn checks the pending transition before the epoch";
    Tv2FenceAbortBumpsTwice => "tv2-fence-abort-bumps-twice",
        "KAFKA-19367 undone (Kafka 4.0.0): under TV2 the abort after a fence or timeout bumps the epoch again.",
        "KAFKA-19367 (PR #19910), in Kafka 4.0.0";
    VerificationIgnoresLowestSequence => "verification-ignores-lowest-sequence",
        "KIP-890's `VerificationStateEntry` without its sequence: a later batch of a producer being verified may be appended before an earlier one (the earlier then fails OUT_OF_ORDER_SEQUENCE).",
        "KIP-890 part 1: VerificationStateEntry.lowestSequence (ProducerStateManagerTest#testThrowOutOfOrderSequenceWithVerificationSequenceCheck)";
    VerificationEntryNeverExpires => "verification-entry-never-expires",
        "A `VerificationStateEntry` whose answer never came stays forever (no `producer.id.expiration.ms`).",
        "KIP-890 part 1: VerificationStateEntry expiry by producer.id.expiration.ms";
    RetriesIgnored => "retries-ignored",
        "The producer's `retries` is ignored: a plain producer with `retries=0` resends a batch after a disconnect, and a batch the broker had written is written twice.",
        "Sender.canRetry (batch.attempts() < retries; SenderTest#testRetries)";
    HwFromLeaderLeo => "hw-from-leader-leo",
        "The leader's high watermark is its own log end offset, whatever its in-sync followers hold: an acks=all write is acknowledged and made visible before any follower has it.",
        "Partition.maybeIncrementLeaderHW (the HW is the minimum LEO over the maximal ISR; KIP-497, KIP-101)";
    TxnOffsetsVisibleBeforeCommit => "txn-offsets-visible-before-commit",
        "A TxnOffsetCommit's offsets are committed when the request is written, not when the transaction's COMMIT marker reaches `__consumer_offsets`: OffsetFetch shows them while the transaction is open and keeps them after it aborts.",
        "KIP-98 (OffsetMetadataManager.replayEndTransactionMarker: pending transactional offsets)";
    TruncateToOwnLeo => "truncate-to-own-leo",
        "A follower told its last fetched epoch diverges from the new leader's log truncates to its own log end instead of the diverging epoch's end offset, and fetches on from there as if reconciled: its unreplicated suffix stays under the leader's later batches.",
        "KIP-101 / KIP-279: AbstractFetcherThread.getOffsetTruncationState (min of the epoch end offsets and the LEO)";
    NoRebuildAfterTruncation => "no-rebuild-after-truncation",
        "A follower that truncates its log keeps its producer state, open transactions and aborted index as they were: transactions and index entries of the dropped batches outlive them.",
        "KAFKA-12153, KAFKA-13727: UnifiedLog.truncateTo rebuilds producer state and truncates the transaction index";
    OffsetCommitRefusedWhilePreparingRebalance => "offset-commit-refused-while-preparing-rebalance",
        "A classic group's plain OffsetCommit is refused with REBALANCE_IN_PROGRESS while the group prepares a rebalance, accepted while the generation's assignment is still being synced, and does not extend the member's session.",
        "ClassicGroup.validateOffsetCommit, OffsetMetadataManager.commitOffset (OffsetMetadataManagerTest#testGenericGroupOffsetCommitWhileInCompletingRebalanceState)";
    TxnStartTimestampNotReset => "txn-start-timestamp-not-reset",
        "A new transaction keeps the txnStartTimestamp of the producer's InitProducerId (or of its previous transaction), so the coordinator's timeout scan aborts a transaction open for less than transaction.timeout.ms.",
        "TransactionMetadata.prepareAddPartitions (txnStartTimestamp when leaving Empty or Complete*), TransactionStateManager.timedOutTransactions";
    EpochCacheKeptOnNoopTruncation => "epoch-cache-kept-on-noop-truncation",
        "A truncation at or past the log end leaves the leader-epoch cache as it was: a broker that became leader, recorded its epoch at its log end and was replaced before appending keeps fetching with that epoch, the new leader answers a diverging epoch that truncates nothing, and the follower never rejoins the ISR.",
        "UnifiedLog.truncateTo (UnifiedLogTest#testTruncateToEndOffsetClearsEpochCache)";
    InFlightBatchesNotExpired => "in-flight-batches-not-expired",
        "A batch that has been sent does not expire at its delivery timeout, as before KIP-91: only batches still in the accumulator do. A sent batch waits for its answer and is retried, so its send can stay unanswered long past delivery.timeout.ms.",
        "KIP-91 (Sender.getExpiredInflightBatches; SenderTest#testInflightBatchesExpireOnDeliveryTimeout)";
    FetchIdsReusedAfterRestart => "fetch-ids-reused-after-restart",
        "A restarted follower numbers its fetches from the start again, so the leader's answer to a fetch its previous life sent is taken for its own: a diverging epoch computed for the old log end truncates an ISR member below the HW.",
        "NetworkClient / SocketServer: an answer goes back on its request's connection, which a crash closes (AbstractFetcherThread matches no answer across a restart)";
    IsrExpansionBelowLeaderEpochStart => "isr-expansion-below-leader-epoch-start",
        "A follower joins the ISR once it reaches the leader's HW, even below the offset the leader's epoch began at: a new leader whose HW lags what its predecessor committed takes a follower holding less than its log into the ISR, which may then lead without the committed writes.",
        "KIP-101 / KAFKA-7128: Partition.isFollowerInSync (leaderEpochStartOffsetOpt; PartitionTest#testFollowerDoesNotJoinISRUntilCaughtUpToOffsetWithinCurrentLeaderEpoch)";
    FencedReplicaJoinsIsr => "fenced-replica-joins-isr",
        "The controller commits an ISR expansion naming a fenced broker: a fetch sent before its broker died, answered after, puts the dead broker back in the ISR, where it counts toward acks=all and the HW while holding nothing new, and may be elected with less than was acknowledged.",
        "KIP-841: ReplicationControlManager.validateAlterPartitionData answers INELIGIBLE_REPLICA (ReplicationControlManagerTest#testAlterPartitionShouldRejectFencedBrokers)";
    EpochExhaustionIgnored => "epoch-exhaustion-ignored",
        "The coordinator counts only Short.MAX_VALUE as an exhausted epoch, keeping none back for fencing: an InitProducerId or a TV2 commit at Short.MAX_VALUE - 1 hands Short.MAX_VALUE itself to the client, which then can never be fenced, instead of a new producer id at epoch 0.",
        "TransactionMetadata.isEpochExhausted, prepareProducerIdRotation, prepareComplete (nextProducerId); TransactionCoordinatorTest#shouldGenerateNewProducerIdIfEpochsExhausted";
    TransactionalIdsNeverExpire => "transactional-ids-never-expire",
        "The coordinator never expires a transactional id: one idle for transactional.id.expiration.ms keeps its producer id and epoch, and its next InitProducerId bumps that epoch instead of starting a new producer id.",
        "TransactionStateManager.removeExpiredTransactionalIds (transactional.id.expiration.ms); TransactionStateManagerTest#shouldRemoveCompleteCommitExpiredTransactionalIds";
    AddPartitionsPidBeforePending => "add-partitions-pid-before-pending",
        "KAFKA-18660 undone: AddPartitionsToTxn checks the producer id and epoch before the pending transition, so after a TV2 commit that rotated the producer id, the next transaction's partitions, sent under the new id while the markers are still out, are refused INVALID_PRODUCER_ID_MAPPING.",
        "KAFKA-18660 (PR #18730, Kafka 4.0): TransactionCoordinator.handleAddPartitionsToTransaction checks the pending transition first";
    MarkerRetryResendsAllPartitions => "marker-retry-resends-all-partitions",
        "One leader's retriable WriteTxnMarkers error sends the markers of every unacknowledged partition again, including those still in flight to other leaders: the resend is acknowledged, the transaction completes, the producer begins its next one at the same epoch (TV1), and the first request, arriving late, writes a COMMIT marker that closes it half-written.",
        "TransactionMarkerRequestCompletionHandler.onComplete re-queues only the failed partitions (TransactionMarkerRequestCompletionHandlerTest#verifyRetriesPartitionOnError: addTxnMarkersToBrokerQueue with the failed partition only)";
    HostedPartitionsOnly => "hosted-partitions-only",
        "A broker knows only the partitions it hosts a replica of, not its metadata cache: the coordinator refuses AddPartitionsToTxn and TxnOffsetCommit of a partition led elsewhere with UNKNOWN_TOPIC_OR_PARTITION, and a Produce or Fetch sent to a broker outside the partition's replicas is told the partition does not exist instead of NOT_LEADER_OR_FOLLOWER.",
        "MetadataCache.contains: KafkaApis.handleAddPartitionsToTxnRequest and handleTxnOffsetCommitRequest, ReplicaManager.getPartitionOrError (NOT_LEADER_OR_FOLLOWER for a partition the cache has and the broker does not host)";
    AnyBrokerCoordinates => "any-broker-coordinates",
        "Every broker serves coordinator requests from its own coordinators' state: a client that sends InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn or EndTxn, or a group request, to a broker other than the coordinator's gets a second coordinator for the same transactional id or group (its own producer id and epoch, its own members and offsets) instead of NOT_COORDINATOR.",
        "TransactionStateManager.getTransactionState and GroupCoordinatorService answer NOT_COORDINATOR for a transactional id or group whose __transaction_state or __consumer_offsets partition the broker does not own (TransactionCoordinatorTest#shouldRespondWithNotCoordinatorOnInitPidWhenNotCoordinator, #shouldRespondWithNotCoordinatorOnAddPartitionsWhenNotCoordinator, #shouldRespondWithNotCoordinatorOnEndTxnWhenIsNotCoordinatorForId)";
    IsrChangeToldToLeaderOnly => "isr-change-told-to-leader-only",
        "The controller answers a committed AlterPartition to the leader alone and writes no PartitionChangeRecord: every broker's metadata cache (the leader's too; only its partition state takes the answer) keeps the old ISR, so Metadata answers name replicas that left it, or miss those that rejoined.",
        "ReplicationControlManager.alterPartition returns the change as a PartitionChangeRecord, which every broker replays into its metadata cache (ReplicationControlManagerTest's sendAlterPartition replays result.records())";
    FenceAbortKeepsExhaustedId => "fence-abort-keeps-exhausted-id",
        "Kafka 4.x before KAFKA-20090: a TV2 fence or timeout abort at an exhausted epoch allocates no next producer id, so the transactional id completes at Short.MAX_VALUE - 1 or above under its old id, one bump short of overflow (a delayed EndTxn then finds it a retry, and the transaction can hang).",
        "KAFKA-20090 (PR #21506): TransactionCoordinator.endTransaction's TV2 completion rotates the producer id for epoch-fence aborts too";
    NoMarkerResendOnFailover => "no-marker-resend-on-failover",
        "A broker that becomes the leader of __transaction_state loads its transactions but sends no markers for those it finds PrepareCommit or PrepareAbort: the decision its predecessor made is never written to the partitions it has not reached, and they stay open, blocking the LSO, until something else ends them.",
        "TransactionStateManager.loadTransactionsForTxnTopicPartition sends the markers of every PrepareCommit/PrepareAbort it loads (TransactionStateManagerTest#testLoadAndRemoveTransactionsForPartition, TransactionMarkerChannelManagerTest#shouldNotLoseTxnCompletionAfterLoad)";
    FailoverKeepsCoordinatorEpoch => "failover-keeps-coordinator-epoch",
        "A coordinator that loads __transaction_state after a failover takes the coordinator epoch its predecessor wrote with instead of the partition's new leader epoch: partition leaders cannot tell the old coordinator's late markers from its own, so a retry of an old decision can close the producer's next transaction.",
        "TransactionCoordinator.onElection(txnTopicPartitionId, coordinatorEpoch): the coordinator epoch is the __transaction_state partition's leader epoch, and leaders fence markers of a lower one (ProducerStateManager, TRANSACTION_COORDINATOR_FENCED)";
    FencedReplicaHoldsHw => "fenced-replica-holds-hw",
        "A leader keeps waiting for a follower the controller fenced and took out of the ISR, as one caught up and about to rejoin: the HW (and every acks=all write, the coordinator's __transaction_state appends too) stands still until replica.lag.time.max.ms has passed since the dead broker last caught up.",
        "KIP-841: Partition.maybeIncrementLeaderHW waits for a replica outside the ISR only if isReplicaIsrEligible (not fenced, not shutting down); PartitionTest#testHighWatermarkIncreasesWithFencedOrShutdownFollower";
    DelayedFetchIgnoresLeaderChange => "delayed-fetch-ignores-leader-change",
        "A follower's fetch parked at a broker that stops leading one of its partitions waits out replica.fetch.wait.max.ms instead of being answered NOT_LEADER_OR_FOLLOWER at once: the follower's other partitions on that broker wait with it.",
        "ReplicaManager.completeDelayedOperationsWhenNotPartitionLeader checks the fetch purgatory, and DelayedFetch.tryComplete completes a fetch of a partition no longer led here (DelayedFetchTest#testNotLeaderOrFollower)";
    DelayedAnswerTimedOut => "delayed-answer-timed-out",
        "The wire driver answers REQUEST_TIMED_OUT to a request the engine has not answered by the end of the request's own deliveries (an acks=all Produce waiting for the HW, a coordinator's __transaction_state write waiting for its followers) instead of holding the connection until the engine answers: the write goes on and completes while the client, told it timed out, retries it (CONCURRENT_TRANSACTIONS until it completes; a retried InitProducerId bumps the epoch a second time).",
        "KafkaApis answers a Produce from DelayedProduce (replicated, or REQUEST_TIMED_OUT only when the request's timeout expires: DelayedProduce.onExpiration) and a coordinator request from the append callback of TransactionStateManager.appendTransactionToLog, which waits with acks=-1; SocketServer keeps the connection muted meanwhile";
    GroupsKeptInMemory => "groups-kept-in-memory",
        "The group coordinator writes no plain offset commit and no group metadata to __consumer_offsets and answers at once: a coordinator that takes a group over after a crash loads neither its committed offsets nor its members, so consumers restart from their reset policy and rejoin.",
        "GroupMetadataManager writes an OffsetCommit record for each commit and a GroupMetadata record when a classic group's generation becomes Stable or the group Empty, and CoordinatorLoaderImpl replays them on election (GroupCoordinatorShard.replay and onLoaded; GroupCoordinatorShardTest#testReplayOffsetCommit, #testOnLoaded)";
    InternalTopicsWritable => "internal-topics-writable",
        "A client's Produce to __transaction_state or __consumer_offsets is appended like any other: a wire client can write records the coordinators never wrote into their logs, and the next coordinator to load the log reads them as its own.",
        "ReplicaManager.appendToLocalLog refuses an append to an internal topic (Topic.isInternal) from any client but the admin client with InvalidTopicException, \"Cannot append to internal topic\" (from the code; no test of Kafka's ported)";
    SyncAnsweredBeforeStored => "sync-answered-before-stored",
        "The leader's SyncGroup makes the group Stable and answers every member at once, before the group's metadata record is replicated: a coordinator that takes the group over after a crash may know an older generation than its members were told, and a failed write is never reported to them.",
        "GroupMetadataManager's classic SyncGroup appends the group's metadata record and, in its append callback, propagates the assignment and transitions to Stable, or on an error answers every member it (appendGroupMetadataErrorToResponseError) and rebalances (resetAndPropagateAssignmentWithError)";
    LoadResendsSupersededDecisions => "load-resends-superseded-decisions",
        "A loading coordinator resends the markers of every undecided Prepare* record whose producer id and epoch match the id's loaded state, not only its newest: a PrepareCommit whose append timed out (its record still in the log) and the PrepareAbort the timeout scan wrote after it at the same TV2 epoch both get markers, so one transaction is committed on some partitions and aborted on others.",
        "TransactionStateManager.loadTransactionMetadata puts each record into the cache by transactional id, so only the newest survives (TransactionStateManagerTest#testLoadAndRemoveTransactionsForPartition: the loaded metadata equals the latest status), and loadTransactionsForTxnTopicPartition completes that one state's transaction (#shouldWriteTxnMarkersForTransactionInPreparedAbortState); a failed append leaves its record in the log while the cache reverts (#testAppendFailToCoordinatorNotAvailableError)";
    OffsetFetchReadsLatest => "offset-fetch-reads-latest",
        "The group coordinator answers every OffsetFetch from its latest state, at once: an offset whose record is not yet replicated (a commit just appended, or one a new coordinator loaded from its log end) is handed to a consumer, though an election may still lose it, and a stable fetch does not wait for it.",
        "GroupCoordinatorService.fetchOffsets: without requireStable a read operation at the last committed offset (CoordinatorRuntime.scheduleReadOperation; OffsetMetadataManagerTest#testFetchOffsetsAtDifferentCommittedOffset), with it a write operation answered once the HW reaches the last written offset (#testFetchOffsetsWithPendingTransactionalOffsets)";
    FollowerRefusesConsumerFetch => "follower-refuses-consumer-fetch",
        "A follower refuses every consumer's Fetch with NOT_LEADER_OR_FOLLOWER, as before KIP-392: a Fetch v11+, which carries the client's metadata, is not served from the follower's own log bounded by its own HW and LSO, so a client that reads a partition's replicas one by one (as the real-Kafka test does) cannot.",
        "KIP-392: FetchParams.fetchOnlyLeader is false for a consumer's fetch with clientMetadata, which KafkaApis.handleFetchRequest sets from Fetch v11; Partition.localLogWithEpochOrThrow then serves a follower's log (checked against a real Kafka 4.3.1 cluster in tests/apache_kafka.rs)";
    TxnOffsetCommitV5OnlyVerifies => "txn-offset-commit-v5-only-verifies",
        "A TxnOffsetCommit v5 (transaction version 2) only verifies that the group's offsets partition is in the transaction, as v4 does, instead of adding it: a TV2 client, which sends no AddOffsetsToTxn, has its offsets refused with TRANSACTION_ABORTABLE.",
        "KIP-890 part 2: CoordinatorPartitionWriter.maybeStartTransactionVerification asks ReplicaManager for TransactionSupportedOperation addPartition from TxnOffsetCommit v5, and TransactionManager.sendOffsetsToTransaction skips AddOffsetsToTxn under TV2 (Kafka's Java client 4.3.1 against serve, tests/wire_clients.rs)";
    Tv2FirstSequenceUnchecked => "tv2-first-sequence-unchecked",
        "KAFKA-18202 undone: under transaction version 2 a transactional batch from a producer with no batches on the partition is appended whatever its first sequence, so a reordered second batch lands at the partition's first offset and the first one is then refused.",
        "KAFKA-18202 (Kafka 4.1): ProducerAppendInfo.checkSequence refuses a non-zero first sequence when the VerificationStateEntry supports epoch bump and the producer's entry is empty (checked against a real Kafka 4.3.1 cluster in tests/apache_kafka.rs)";
    ApiVersionsNamesUnchecked => "api-versions-names-unchecked",
        "An ApiVersions v3+ request is answered in full whatever the client's software name and version, where Kafka answers INVALID_REQUEST with no API listed for an empty or malformed one.",
        "KIP-511: ApiVersionsRequest.isValid (SOFTWARE_NAME_VERSION_PATTERN) and KafkaApis.handleApiVersionsRequest's INVALID_REQUEST (checked against a real Kafka 4.3.1 cluster in tests/apache_kafka.rs)";
    BatchStraddlingBoundReturned => "batch-straddling-bound-returned",
        "A read bounded inside a batch (a high watermark or LSO that falls between a batch's first and last offsets) returns that batch whole, records above the bound included, where Kafka stops before it.",
        "UnifiedLog.fetchHighWatermarkMetadata and LogSegment.translateOffset turn the bound into the position of the batch holding it, and LocalLog.read reads up to that position";
    LogStartDropsOpenTransactions => "log-start-drops-open-transactions",
        "DeleteRecords forgets every open transaction that began below the new log start: the LSO jumps past it to the HW, so read_committed consumers read the rest of a transaction that has not ended, and its ABORT marker writes no aborted-index entry.",
        "ProducerStateManager.onLogStartOffsetIncremented removes only completed transactions (removeUnreplicatedTransactions); UnifiedLog.maybeIncrementFirstUnstableOffset clamps the first unstable offset to the log start";
    LastProducerEpochPersisted => "last-producer-epoch-persisted",
        "A coordinator that loads __transaction_state after a move keeps each id's last producer epoch, as KAFKA-20357 (after Kafka 4.3.1) makes it: a KIP-360 InitProducerId retried after the failover gets its answer again, where Kafka 4.3.1 loads no last epoch and fences it with PRODUCER_FENCED.",
        "Kafka 4.3.1: TransactionLogValue has no last-epoch field and TransactionLog.read sets lastProducerEpoch to NO_PRODUCER_EPOCH; TransactionMetadata.prepareIncrementProducerEpoch then finds the retried epoch neither current nor last (KAFKA-20357 persists it, after 4.3.1)";
    RotationRecordsOverflowedEpoch => "rotation-records-overflowed-epoch",
        "A TV2 completion that moves an exhausted id to its next producer id records the overflowed epoch (Short.MAX_VALUE) as the last one, where Kafka keeps Short.MAX_VALUE - 1 from prepareAbortOrCommit: a KIP-360 InitProducerId retried with the client's last epoch is then fenced.",
        "TransactionMetadata.prepareComplete keeps lastProducerEpoch as prepareAbortOrCommit left it (Short.MAX_VALUE - 1; its comment says validProducerEpoch relies on it), Kafka 4.3.1";
    RetriesOvertake => "retries-overtake",
        "A retried batch is resent as soon as its backoff is over, whatever earlier batch of its partition is still unanswered, and new batches of the partition drain past it: the leader gets the partition's sequences out of order and answers OUT_OF_ORDER_SEQUENCE_NUMBER again, until the earlier batch lands.",
        "RecordAccumulator.reenqueue puts a retried batch back at the head of its partition's queue (insertInSequenceOrder) and shouldStopDrainBatchesForPartition holds it while TransactionManager.firstInFlightSequence is another batch's (SenderTest#testCorrectHandlingOfOutOfOrderResponses)";
    VerificationRefusedInvalidTxnState => "verification-refused-invalid-txn-state",
        "The coordinator refuses a KIP-890 verification of a partition the transaction does not hold with INVALID_TXN_STATE whatever the client's request version, where Kafka answers TRANSACTION_ABORTABLE to Produce v11+ and TxnOffsetCommit v4+ and keeps INVALID_TXN_STATE for older clients.",
        "TransactionCoordinator.handleVerifyPartitionsInTransaction answers TRANSACTION_ABORTABLE per missing partition; AddPartitionsToTxnManager turns it into INVALID_TXN_STATE only for DEFAULT_ERROR clients (Produce up to v10, TxnOffsetCommit up to v3), checked against a real Kafka 4.3.1 cluster in tests/apache_kafka.rs";
    ElrNotKept => "elr-not-kept",
        "An ISR shrinking below min.insync.replicas keeps no eligible leader replicas: once its last member dies the partition has no leader until that broker returns, though a live replica holds everything committed.",
        "KIP-966: PartitionChangeBuilder.maybePopulateTargetElr (ReplicationControlManagerTest#testEligibleLeaderReplicas_CleanElection)";
    UncleanShutdownStaysInElr => "unclean-shutdown-stays-in-elr",
        "A broker registering after an unclean shutdown stays in the ISR and ELR it was in, so it may be elected from the ELR though its log may have lost its unflushed tail.",
        "KIP-966: ReplicationControlManager.handleBrokerShutdown (ReplicationControlManagerTest#testEligibleLeaderReplicas_UncleanShutdown)";
    LastKnownLeaderNotElected => "last-known-leader-not-elected",
        "With the ISR and the ELR empty, the partition's last leader coming back is not elected: the partition stays without a leader.",
        "KIP-966: PartitionChangeBuilder.canElectLastKnownLeader (PartitionChangeBuilderTest#testEligibleLeaderReplicas_ElectLastKnownLeader)";
    ElrMemberNotElected => "elr-member-not-elected",
        "With the ISR empty, a live eligible leader replica is not elected: the partition waits for a dead ISR member though a replica holding everything committed is alive.",
        "KIP-966: PartitionChangeBuilder.isValidNewLeader (ReplicationControlManagerTest#testEligibleLeaderReplicas_CleanElection)";
    HwAdvancesUnderMinIsr => "hw-advances-under-min-isr",
        "The leader advances its high watermark while its ISR is below min.insync.replicas: records not on an eligible leader replica become visible, and an election from the ELR loses them.",
        "KAFKA-15583: Partition.maybeIncrementLeaderHW returns while isUnderMinIsr (PartitionTest#testHighWatermarkAdvanceShouldNotAdvanceWhenUnderMinISR)";
    ProcessorReadsUncommitted => "processor-reads-uncommitted",
        "A consumer that subscribes to a group reads its input at read_uncommitted whatever isolation it was given: a consume-transform-produce processor delivers an open transaction's records and commits their output, which stays committed when the input's transaction aborts.",
        "KIP-98 / KIP-129: the processor's consumer must set ConsumerConfig isolation.level=read_committed (StreamsConfig.CONSUMER_EOS_OVERRIDES sets it, which getCommonConsumerConfigs applies under exactly_once_v2; TransactionsTest#testSendOffsetsWithGroupMetadata's consumer reads read_committed)";
    TxnOffsetCommitSkipsGenerationCheck => "txn-offset-commit-skips-generation-check",
        "The group coordinator accepts a TxnOffsetCommit whatever member and generation it names: a zombie of an old generation, or a member the group expelled, commits its offsets in its transaction.",
        "KIP-447: OffsetMetadataManager.validateTransactionalOffsetCommit with ClassicGroup.validateOffsetCommit(isTransactional=true) answers UNKNOWN_MEMBER_ID and ILLEGAL_GENERATION (OffsetMetadataManagerTest#testGenericGroupTransactionalOffsetCommitWithIllegalGenerationId)";
    OffsetsOnAbort => "offsets-on-abort",
        "The group coordinator commits a transaction's pending offsets on its ABORT marker too: the offsets of an aborted transaction become the group's, and its input is skipped though its output was never committed.",
        "KIP-98: OffsetMetadataManager.replayEndTransactionMarker drops the pending offsets on TransactionResult.ABORT (OffsetMetadataManagerTest#testReplayTransactionEndMarkerWithCommit, whose abort half drops them)";
    OffsetsOutsideTxn => "offsets-outside-txn",
        "The producer's sendOffsetsToTransaction commits the offsets with a plain OffsetCommit, the group's once written, instead of a TxnOffsetCommit that waits for the transaction's marker: a transaction that aborts after sending its offsets still moves the group past its input.",
        "KIP-98: TransactionManager.sendOffsetsToTransaction sends AddOffsetsToTxn, then TxnOffsetCommitHandler's TxnOffsetCommit, whose offsets the group coordinator holds pending until the COMMIT marker";
}

impl Mutation {
    pub fn from_name(name: &str) -> Option<Mutation> {
        Mutation::ALL.into_iter().find(|m| m.name() == name)
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
