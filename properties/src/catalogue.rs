//! The one catalogue of invariants. Every checker in txnsim (proptest, the stateright model, the madsim
//! sim, the scenario tests) names invariants from here; none is stated twice. Numbers in the statements
//! ("2.1 #5", "L2") are only labels; `Invariant::source` names the Kafka class, method or KIP behind each.

use serde::{Deserialize, Serialize};
use std::fmt;
use txnsim_engine::Mutation;

/// When an invariant can be checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Kind {
    /// Over a snapshot of the cluster's nodes, at any moment.
    State,
    /// Over what clients observed (the history), with the final logs as ground truth.
    History,
    /// At the end of a run, after faults stop and time passes (TigerBeetle's liveness check).
    Liveness,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Invariant {
    LsoBounds,
    LsoIsFirstUnstableOffset,
    NothingUndecidedBelowLso,
    MarkerMatchesDecision,
    OneOutcomePerTransaction,
    AbortedIndexExact,
    NoNonTransactionalWriteInOpenTxn,
    ProducerEpochMonotonic,
    NoDuplicateAppends,
    CoordinatorEpochMonotonic,
    ValidCoordinatorTransitions,
    DecisionIrrevocable,
    PartitionCoverage,
    EpochBumpOnFenceAndTimeout,
    AbortedRead,
    PrecommittedRead,
    PartialRead,
    LostWrite,
    Duplicate,
    InconsistentOffsets,
    PollSkip,
    NonmonotonicPoll,
    NonmonotonicSend,
    PositionReachesLso,
    UncommittedSupersetOfCommitted,
    FailedSendCommitted,
    DecidedTransactionsComplete,
    LsoReachesHighWatermark,
    OpenTransactionsTimeOut,
    ReaderCatchesUp,
    CommittedWritesCommitted,
    ReplicaLogMatchesLeader,
    HwWithinIsrLogEnds,
    TxnOffsetsVisibleIffCommitted,
    ReplicaTxnStateFromOwnLog,
    AckedWriteSurvivesElection,
    TimeoutAbortNotEarly,
    SendAnsweredWithinDeliveryTimeout,
    ExactlyOnceOutput,
    OutputOfConsumedInput,
}

impl Invariant {
    /// The invariants of one broker's state, the clients' histories and liveness: every checker evaluates
    /// these (the model's property table is indexed by this list).
    pub const ALL: [Invariant; 31] = [
        Invariant::LsoBounds,
        Invariant::LsoIsFirstUnstableOffset,
        Invariant::NothingUndecidedBelowLso,
        Invariant::MarkerMatchesDecision,
        Invariant::OneOutcomePerTransaction,
        Invariant::AbortedIndexExact,
        Invariant::NoNonTransactionalWriteInOpenTxn,
        Invariant::ProducerEpochMonotonic,
        Invariant::NoDuplicateAppends,
        Invariant::CoordinatorEpochMonotonic,
        Invariant::ValidCoordinatorTransitions,
        Invariant::DecisionIrrevocable,
        Invariant::PartitionCoverage,
        Invariant::EpochBumpOnFenceAndTimeout,
        Invariant::AbortedRead,
        Invariant::PrecommittedRead,
        Invariant::PartialRead,
        Invariant::LostWrite,
        Invariant::Duplicate,
        Invariant::InconsistentOffsets,
        Invariant::PollSkip,
        Invariant::NonmonotonicPoll,
        Invariant::NonmonotonicSend,
        Invariant::PositionReachesLso,
        Invariant::UncommittedSupersetOfCommitted,
        Invariant::FailedSendCommitted,
        Invariant::DecidedTransactionsComplete,
        Invariant::LsoReachesHighWatermark,
        Invariant::OpenTransactionsTimeOut,
        Invariant::ReaderCatchesUp,
        Invariant::CommittedWritesCommitted,
    ];

    /// The replica invariants (`replicas.rs`): checked wherever a cluster has followers (the scenario
    /// runner, the replicated proptest, the sim, the model's replicated configs).
    /// Unclean leader election may break `replica-log-matches-leader` and `acked-write-survives-election`.
    pub const REPLICA: [Invariant; 4] = [
        Invariant::ReplicaLogMatchesLeader,
        Invariant::HwWithinIsrLogEnds,
        Invariant::ReplicaTxnStateFromOwnLog,
        Invariant::AckedWriteSurvivesElection,
    ];

    /// The consumer group invariants (`group_offsets.rs`): checked wherever transactions commit offsets
    /// (the scenario runner, `serve`, the sim's eos profile). The model commits none, so it cannot fail there.
    pub const GROUP: [Invariant; 1] = [Invariant::TxnOffsetsVisibleIffCommitted];

    /// The exactly-once processing invariants (`exactly_once.rs`): checked where processors run the
    /// consume-transform-produce loop (the sim's `eos` profile, `sweep --target --profile eos`).
    pub const EOS: [Invariant; 2] = [Invariant::ExactlyOnceOutput, Invariant::OutputOfConsumedInput];

    /// The timer invariants (`timers.rs`): checked where time moves (the scenario runner, the sim,
    /// `serve`). The model's time stands still, so it cannot check them.
    pub const TIMED: [Invariant; 2] = [Invariant::TimeoutAbortNotEarly, Invariant::SendAnsweredWithinDeliveryTimeout];

    /// The whole catalogue: `ALL`, then `REPLICA`, `GROUP`, `TIMED` and `EOS`.
    pub fn catalogue() -> impl Iterator<Item = Invariant> {
        let all = Invariant::ALL.into_iter().chain(Invariant::REPLICA).chain(Invariant::GROUP);
        all.chain(Invariant::TIMED).chain(Invariant::EOS)
    }

    /// The stable name: Jepsen's where one exists.
    pub fn name(self) -> &'static str {
        use Invariant::*;
        match self {
            LsoBounds => "lso-bounds",
            LsoIsFirstUnstableOffset => "lso-is-first-unstable-offset",
            NothingUndecidedBelowLso => "nothing-undecided-below-lso",
            MarkerMatchesDecision => "marker-matches-decision",
            OneOutcomePerTransaction => "one-outcome-per-transaction",
            AbortedIndexExact => "aborted-index-exact",
            NoNonTransactionalWriteInOpenTxn => "no-non-transactional-write-in-open-txn",
            ProducerEpochMonotonic => "producer-epoch-monotonic",
            NoDuplicateAppends => "no-duplicate-appends",
            CoordinatorEpochMonotonic => "coordinator-epoch-monotonic",
            ValidCoordinatorTransitions => "valid-coordinator-transitions",
            DecisionIrrevocable => "decision-irrevocable",
            PartitionCoverage => "partition-coverage",
            EpochBumpOnFenceAndTimeout => "epoch-bump-on-fence-and-timeout",
            AbortedRead => "aborted-read",
            PrecommittedRead => "precommitted-read",
            PartialRead => "partial-read",
            LostWrite => "lost-write",
            Duplicate => "duplicate",
            InconsistentOffsets => "inconsistent-offsets",
            PollSkip => "poll-skip",
            NonmonotonicPoll => "nonmonotonic-poll",
            NonmonotonicSend => "nonmonotonic-send",
            PositionReachesLso => "position-reaches-lso",
            UncommittedSupersetOfCommitted => "read-uncommitted-superset",
            FailedSendCommitted => "failed-send-committed",
            CommittedWritesCommitted => "committed-writes-committed",
            DecidedTransactionsComplete => "decided-transactions-complete",
            LsoReachesHighWatermark => "lso-reaches-high-watermark",
            OpenTransactionsTimeOut => "open-transactions-time-out",
            ReaderCatchesUp => "reader-catches-up",
            ReplicaLogMatchesLeader => "replica-log-matches-leader",
            HwWithinIsrLogEnds => "hw-within-isr-log-ends",
            TxnOffsetsVisibleIffCommitted => "txn-offsets-visible-iff-committed",
            TimeoutAbortNotEarly => "timeout-abort-not-early",
            SendAnsweredWithinDeliveryTimeout => "send-answered-within-delivery-timeout",
            ReplicaTxnStateFromOwnLog => "replica-txn-state-from-own-log",
            AckedWriteSurvivesElection => "acked-write-survives-election",
            ExactlyOnceOutput => "exactly-once-output",
            OutputOfConsumedInput => "output-of-consumed-input",
        }
    }

    pub fn from_name(name: &str) -> Option<Invariant> {
        Invariant::catalogue().find(|i| i.name() == name)
    }

    pub fn kind(self) -> Kind {
        use Invariant::*;
        match self {
            LsoBounds
            | LsoIsFirstUnstableOffset
            | NothingUndecidedBelowLso
            | MarkerMatchesDecision
            | OneOutcomePerTransaction
            | AbortedIndexExact
            | NoNonTransactionalWriteInOpenTxn
            | ProducerEpochMonotonic
            | NoDuplicateAppends
            | CoordinatorEpochMonotonic
            | ValidCoordinatorTransitions
            | DecisionIrrevocable
            | PartitionCoverage
            | EpochBumpOnFenceAndTimeout
            | ReplicaLogMatchesLeader
            | HwWithinIsrLogEnds
            | TxnOffsetsVisibleIffCommitted
            | TimeoutAbortNotEarly
            | ReplicaTxnStateFromOwnLog => Kind::State,
            AbortedRead
            | PrecommittedRead
            | PartialRead
            | LostWrite
            | Duplicate
            | InconsistentOffsets
            | PollSkip
            | NonmonotonicPoll
            | NonmonotonicSend
            | PositionReachesLso
            | UncommittedSupersetOfCommitted
            | FailedSendCommitted
            | SendAnsweredWithinDeliveryTimeout
            | AckedWriteSurvivesElection
            | ExactlyOnceOutput
            | OutputOfConsumedInput => Kind::History,
            DecidedTransactionsComplete
            | LsoReachesHighWatermark
            | OpenTransactionsTimeOut
            | ReaderCatchesUp
            | CommittedWritesCommitted => Kind::Liveness,
        }
    }

    /// One line: what must hold.
    pub fn statement(self) -> &'static str {
        use Invariant::*;
        match self {
            LsoBounds => "log start <= LSO <= HW <= LEO on every partition, and the LSO and HW never go back (2.1 #1)",
            LsoIsFirstUnstableOffset => "LSO = min(HW, first offset of the earliest transaction with no marker below the HW, or below the HW's peak since producer state was rebuilt if the HW moved back) (2.1 #2)",
            NothingUndecidedBelowLso => "every transactional batch below the LSO has its producer's marker after it and below the HW, or below the HW's peak since producer state was rebuilt if the HW moved back (2.1 #3)",
            MarkerMatchesDecision => "every COMMIT/ABORT marker carries the coordinator's durable decision for that transaction (2.1 #4)",
            OneOutcomePerTransaction => "a completed transaction has a marker of its one outcome on every partition it wrote (2.1 #5)",
            AbortedIndexExact => "the aborted index holds exactly one entry per aborted non-empty transaction, with Kafka's fields, and none for others (2.1 #6)",
            NoNonTransactionalWriteInOpenTxn => "no non-transactional batch from a producer with an open transaction on the partition (2.1 #7)",
            ProducerEpochMonotonic => "a producer's epochs on a partition never decrease: zombies are fenced (2.1 #8)",
            NoDuplicateAppends => "a (producer, epoch, sequence range) is appended once, and sequences within an epoch are contiguous (2.1 #9)",
            CoordinatorEpochMonotonic => "a producer's markers on a partition carry non-decreasing coordinator epochs (2.1 #10)",
            ValidCoordinatorTransitions => "every state a transactional id completes into follows Kafka's table (2.2 #11)",
            DecisionIrrevocable => "once Prepare* is durable the transactional id's state is that decision until it completes as it (2.2 #15)",
            PartitionCoverage => "every partition holding an open transaction's data is in the coordinator's partition set for it (2.2 #16)",
            EpochBumpOnFenceAndTimeout => "an abort from a fence or a timeout writes markers with an epoch above the fenced producer's (2.2 #17)",
            AbortedRead => "no read_committed consumer delivers a record of an aborted transaction (2.3 #20, Jepsen G1a)",
            PrecommittedRead => "no read_committed consumer delivers a record before its transaction's COMMIT marker is below the HW (the highest a leader had reached by then, where the driver sees leaders) (2.3 #21)",
            PartialRead => "a read_committed consumer that passes a committed transaction on a partition delivers all of its records there (2.3 #22)",
            LostWrite => "an acknowledged, committed write is delivered by every consumer whose position passes it (2.3 #23)",
            Duplicate => "a value is stored at one offset only (2.3 #24, idempotence)",
            InconsistentOffsets => "each (partition, offset) maps to one value across acks, polls and the log (2.3 #25)",
            PollSkip => "a poll delivers every record its isolation level admits between its fetch offset and its new position (2.3 #26)",
            NonmonotonicPoll => "a consumer's delivered offsets on a partition strictly increase (2.3 #27; gaps allowed)",
            NonmonotonicSend => "a producer's successive acknowledged sends to a partition get increasing offsets (2.3 #28)",
            PositionReachesLso => "a read_committed poll that makes no progress has its position at the LSO (2.3 #30, KAFKA-12980)",
            UncommittedSupersetOfCommitted => "from the same offset and state, read_uncommitted delivers a superset of read_committed (1.9)",
            FailedSendCommitted => "under TV2, no record of a send the application was told failed, or of a transaction it aborted, is committed or read as committed (KIP-890)",
            CommittedWritesCommitted => "under TV2, after healing, every acknowledged send of a transaction the application was told committed is committed data (KIP-890: under TV1 a late EndTxn can abort the next transaction at the same epoch)",
            DecidedTransactionsComplete => "after healing, every decided transaction is complete with markers on all its partitions (L1)",
            LsoReachesHighWatermark => "after healing, producers stopped and timeouts passed, LSO = HW on every partition (L2)",
            OpenTransactionsTimeOut => "after healing and the transaction timeout, no transaction is Ongoing (L3)",
            ReaderCatchesUp => "after healing, a read_committed consumer that keeps polling reaches position = LSO = HW (L6)",
            ReplicaLogMatchesLeader => "every replica's own batches below the leader's HW are the leader's batches at those offsets, and an ISR member holds them all",
            HwWithinIsrLogEnds => "the leader's HW is at most the log end offset of every ISR member's own log",
            SendAnsweredWithinDeliveryTimeout => "every send is answered, acknowledged or failed, at most delivery.timeout.ms after the call, not counting time its process was paused; one still unanswered when the run ends or its process dies is held to the same bound",
            TimeoutAbortNotEarly => "the coordinator aborts a transaction for its timeout only once it has been open longer than its transaction.timeout.ms, counted in the id's __transaction_state records from the one that opened it",
            TxnOffsetsVisibleIffCommitted => "an offset committed in a transaction (TxnOffsetCommit) is what OffsetFetch answers iff that transaction's COMMIT marker is in __consumer_offsets after it: never while the transaction is open, never after it aborted, and no longer pending once its marker is written",
            ReplicaTxnStateFromOwnLog => "every replica's LSO and aborted index are those its own log and HW imply, a marker counting once it is below the HW's peak since the replica last rebuilt producer state (a follower's HW may move back), after truncation too",
            AckedWriteSurvivesElection => "every acknowledged acks=all send is in the current leader's own log at the offsets it was acknowledged at: a clean election loses nothing",
            ExactlyOnceOutput => "under TV2, every committed input record below its consumer group's committed offset has exactly one committed output (no loss, no duplicate): the committed offset never passes an input whose output is not committed",
            OutputOfConsumedInput => "under TV2, every committed output is of an input record that is committed data below the group's committed offset: no output of an aborted input, none of an input past the offset",
        }
    }

    /// Where the rule comes from in Kafka.
    pub fn source(self) -> &'static str {
        use Invariant::*;
        match self {
            LsoBounds | LsoIsFirstUnstableOffset => {
                "UnifiedLog.lastStableOffset, ProducerStateManager.firstUnstableOffset"
            }
            NothingUndecidedBelowLso => "ProducerStateManager.ongoingTxns/unreplicatedTxns; KIP-98",
            MarkerMatchesDecision => "TransactionMarkerChannelManager.addTxnMarkersToSend",
            OneOutcomePerTransaction => "TransactionCoordinator.endTransaction + maybeWriteTxnCompletion; KIP-98",
            AbortedIndexExact => "LogSegment.updateTxnIndex, TransactionIndex.append, AbortedTxn",
            NoNonTransactionalWriteInOpenTxn => "ProducerAppendInfo.appendDataBatch",
            ProducerEpochMonotonic => "ProducerAppendInfo.checkProducerEpoch",
            NoDuplicateAppends => "ProducerStateEntry.findDuplicateBatch, ProducerAppendInfo.checkSequence",
            CoordinatorEpochMonotonic => {
                "ProducerAppendInfo.appendEndTxnMarker (TransactionCoordinatorFencedException)"
            }
            ValidCoordinatorTransitions => {
                "TransactionState.validPreviousStates, TransactionMetadata.completeTransitionTo"
            }
            DecisionIrrevocable => "TransactionMetadata.prepareComplete; TransactionStateManager.loadTransactions",
            PartitionCoverage => "KIP-890 part 1 (AddPartitionsToTxnManager verification)",
            EpochBumpOnFenceAndTimeout => "TransactionMetadata.prepareFenceProducerEpoch (KAFKA-6119, KAFKA-5231)",
            AbortedRead | PrecommittedRead | PartialRead | LostWrite | Duplicate | InconsistentOffsets | PollSkip
            | NonmonotonicPoll | NonmonotonicSend => "jepsen/tests/kafka.clj",
            PositionReachesLso => "CompletedFetch.nextFetchedRecord, FetchCollector (KAFKA-12980)",
            UncommittedSupersetOfCommitted => "UnifiedLog.read (FetchIsolation), CompletedFetch",
            FailedSendCommitted => "KIP-890; TransactionCoordinator.endTransaction (TV2 table, EB cells)",
            CommittedWritesCommitted => "KIP-98: EndTxn(COMMIT) answered only once PrepareCommit is durable; KIP-890's motivation for the TV1 race",
            DecidedTransactionsComplete => "TransactionMarkerChannelManager retries; KAFKA-16352",
            LsoReachesHighWatermark => "KIP-890 (hanging transactions), UnifiedLog.hasLateTransaction",
            OpenTransactionsTimeOut => "TransactionCoordinator.abortTimedOutTransactions",
            ReaderCatchesUp => "CompletedFetch; KAFKA-12980, KAFKA-6607",
            ReplicaLogMatchesLeader => {
                "ReplicaFetcherThread.processPartitionData, UnifiedLog.appendAsFollower; KIP-101"
            }
            HwWithinIsrLogEnds => "Partition.maybeIncrementLeaderHW (the least LEO of the maximal ISR; KIP-497)",
            TxnOffsetsVisibleIffCommitted => {
                "OffsetMetadataManager.replayEndTransactionMarker, hasPendingTransactionalOffsets; KIP-98, KIP-447"
            }
            ReplicaTxnStateFromOwnLog => "UnifiedLog.truncateTo, rebuildProducerState; KAFKA-12153",
            TimeoutAbortNotEarly => {
                "TransactionStateManager.timedOutTransactions (txnStartTimestamp + txnTimeoutMs < now)"
            }
            AckedWriteSurvivesElection => "KIP-101, PartitionChangeBuilder.electLeader (clean election from the ISR)",
            SendAnsweredWithinDeliveryTimeout => {
                "ProducerConfig delivery.timeout.ms (an upper bound on reporting success or failure after send()); KIP-91, Sender.getExpiredInflightBatches"
            }
            ExactlyOnceOutput | OutputOfConsumedInput => {
                "KIP-98 (sendOffsetsToTransaction), KIP-447 (TxnOffsetCommit's generation check), KIP-890 (under TV1 a late EndTxn commits the next transaction); kafkatest transactions_test.py"
            }
        }
    }

    /// The injected bug that proves a checker of this invariant can fire.
    pub fn mutation(self) -> Mutation {
        use Invariant::*;
        match self {
            LsoBounds => Mutation::LsoNotClampedToHw,
            LsoIsFirstUnstableOffset => Mutation::LsoIgnoresUnreplicatedTxns,
            NothingUndecidedBelowLso => Mutation::LsoIgnoresOngoingTxns,
            MarkerMatchesDecision => Mutation::RestartAbortsPreparedCommits,
            OneOutcomePerTransaction => Mutation::MarkersToSubsetOfPartitions,
            AbortedIndexExact => Mutation::NoAbortedIndexEntry,
            NoNonTransactionalWriteInOpenTxn => Mutation::AllowNonTxnWriteInOpenTxn,
            ProducerEpochMonotonic => Mutation::SkipProducerEpochCheck,
            NoDuplicateAppends => Mutation::NoDedup,
            CoordinatorEpochMonotonic => Mutation::SkipCoordinatorEpochCheck,
            ValidCoordinatorTransitions => Mutation::DoubleComplete,
            DecisionIrrevocable => Mutation::DoubleComplete,
            PartitionCoverage => Mutation::NoTxnVerification,
            EpochBumpOnFenceAndTimeout => Mutation::TimeoutAbortSameEpoch,
            AbortedRead => Mutation::SkipAbortedIndexOnFetch,
            PrecommittedRead => Mutation::ReadCommittedBoundedByHw,
            PartialRead => Mutation::PositionSkipsToHighWatermark,
            LostWrite => Mutation::AbortedPidNotClearedOnMarker,
            Duplicate => Mutation::NoDedup,
            InconsistentOffsets => Mutation::DuplicateReturnsWrongOffsets,
            PollSkip => Mutation::PositionSkipsToHighWatermark,
            NonmonotonicPoll => Mutation::RedeliverLastRecord,
            NonmonotonicSend => Mutation::DuplicateReturnsWrongOffsets,
            PositionReachesLso => Mutation::NoPositionAdvanceOverControl,
            UncommittedSupersetOfCommitted => Mutation::LsoNotClampedToHw,
            FailedSendCommitted => Mutation::Tv2AbortKeepsEpoch,
            CommittedWritesCommitted => Mutation::RestartAbortsPreparedCommits,
            DecidedTransactionsComplete => Mutation::DropPendingMarkersOnRestart,
            LsoReachesHighWatermark => Mutation::MarkersToSubsetOfPartitions,
            OpenTransactionsTimeOut => Mutation::NoTimeoutAbort,
            ReaderCatchesUp => Mutation::NoPositionAdvanceOverControl,
            ReplicaLogMatchesLeader | HwWithinIsrLogEnds | AckedWriteSurvivesElection => Mutation::HwFromLeaderLeo,
            ReplicaTxnStateFromOwnLog => Mutation::NoRebuildAfterTruncation,
            TxnOffsetsVisibleIffCommitted => Mutation::TxnOffsetsVisibleBeforeCommit,
            TimeoutAbortNotEarly => Mutation::TxnStartTimestampNotReset,
            SendAnsweredWithinDeliveryTimeout => Mutation::InFlightBatchesNotExpired,
            ExactlyOnceOutput => Mutation::OffsetsOutsideTxn,
            OutputOfConsumedInput => Mutation::ProcessorReadsUncommitted,
        }
    }
}

/// The invariants that catch a mutation: first those whose bite proof uses it (`Invariant::mutation`,
/// proved by `properties/suites/tests/bites.rs`), then those its regression seeds in `seeds/*.toml` or the model
/// tests catch it by (`tests/catalogue.rs` holds this list to the seed corpus).
pub fn caught_by(m: Mutation) -> Vec<Invariant> {
    use Invariant::*;
    let also: &[Invariant] = match m {
        Mutation::LsoInclusive => &[PrecommittedRead],
        Mutation::LsoIgnoresOngoingTxns => &[LsoIsFirstUnstableOffset],
        Mutation::FenceAbortSameEpoch => &[EpochBumpOnFenceAndTimeout],
        Mutation::MarkersToSubsetOfPartitions => &[PartitionCoverage],
        Mutation::AbortedPidNotClearedOnMarker => &[PollSkip],
        Mutation::RedeliverLastRecord => &[ReaderCatchesUp],
        Mutation::AbortedListForReadUncommitted => &[PollSkip],
        // The seed corpus shows the simulator catching it there too (seeds/drop-pending-markers-*.toml).
        Mutation::DropPendingMarkersOnRestart => &[MarkerMatchesDecision],
        // A plain producer told to send once writes twice (seeds/retries-ignored-*.toml).
        Mutation::RetriesIgnored => &[Duplicate],
        // A superseded commit's markers beside the abort that replaced it
        // (seeds/load-resends-superseded-decisions-*.toml).
        Mutation::LoadResendsSupersededDecisions => &[MarkerMatchesDecision],
        // The sim catches these after a coordinator failover (sim/tests/sim.rs REPLICATION_CATCHERS).
        Mutation::NoMarkerResendOnFailover => &[DecidedTransactionsComplete],
        Mutation::FailoverKeepsCoordinatorEpoch => &[MarkerMatchesDecision],
        Mutation::IsrChangeToldToLeaderOnly => &[DecidedTransactionsComplete],
        // The log-start scenarios of seeds/scenarios/log_start.json (tests/scenarios.rs CATCHERS).
        Mutation::LogStartDropsOpenTransactions => &[LsoIsFirstUnstableOffset],
        // The aborted pass of seeds/scenarios/network/exactly_once.json (tests/scenarios.rs CATCHERS), and
        // the sim's eos profile (sim/tests/sim.rs EOS_CATCHERS) for this and the loop's other departures.
        Mutation::OffsetsOnAbort => &[TxnOffsetsVisibleIffCommitted, ExactlyOnceOutput],
        Mutation::TxnOffsetsVisibleBeforeCommit => &[ExactlyOnceOutput],
        Mutation::TxnOffsetCommitSkipsGenerationCheck => &[ExactlyOnceOutput],
        _ => &[],
    };
    let mut found: Vec<Invariant> = Invariant::catalogue().filter(|i| i.mutation() == m).collect();
    found.extend(also.iter().filter(|i| i.mutation() != m));
    found
}

/// What catches `m`, as `txnsim mutations` and `docs/invariants.md` print it: its invariants, or for a
/// departure that costs only extra errors or aborts (no invariant can see it), the ported scenarios'
/// exact expectations (`tests/scenarios.rs` proves every such mutation fails one).
pub fn catchers(m: Mutation) -> Vec<&'static str> {
    let caught: Vec<&str> = caught_by(m).into_iter().map(Invariant::name).collect();
    if !caught.is_empty() {
        caught
    } else if let Some((_, catcher)) = ENGINE_TEST_CAUGHT.iter().find(|(caught, _)| *caught == m) {
        vec![catcher]
    } else {
        vec![SCENARIO_CATCHER]
    }
}

/// The catcher of a mutation no invariant sees.
pub const SCENARIO_CATCHER: &str = "a ported network scenario's exact expectation";

/// Departures that scenarios do not stage, each with the ported Kafka test in `engine/tests/` that drives
/// the engine class directly and catches it: the classic group protocol (scenarios have no JoinGroup or
/// SyncGroup), a log truncated at its end after a leadership that wrote nothing, and an ISR expansion
/// under a new leader whose HW lags (the sim meets it only after crashes), the controller taking a
/// fenced broker into an ISR (it costs availability: the dead member holds the HW until the ISR
/// shrinks), and a broker ignoring its metadata cache, which only the wire driver's striped partitions
/// on brokers outside their replicas meet (the sim and the scenarios put a replica of every partition
/// on broker 0), and a broker other than the coordinator's serving coordinator requests (the engine's
/// clients send them to the coordinator FindCoordinator names; a wire client may not), a restarted
/// follower taking its previous life's fetch answer (the sim met it only while it drew a fetch wait above
/// the lag bound, which Kafka refuses), a fenced follower holding the HW (it costs only time), a parked
/// follower fetch waiting out a leader change (the sim moves leadership only off a dead broker, whose
/// purgatory dies with it; elsewhere it costs only time), and the wire driver answering a waiting write
/// timed out (the sim's clients talk to the engine without it), groups kept in memory only (the sim's
/// workload uses no consumer group), a client's write to an internal topic (the engine's clients never
/// send one), a SyncGroup answered before its metadata record is stored (no consumer group again), and an
/// OffsetFetch answered past the HW (the scenarios read group offsets from the coordinator, not by request).
pub const ENGINE_TEST_CAUGHT: [(Mutation, &str); 19] = [
    (
        Mutation::OffsetCommitRefusedWhilePreparingRebalance,
        "a ported Kafka test's exact expectation (engine/tests/engine/txn_offsets.rs)",
    ),
    (
        Mutation::EpochCacheKeptOnNoopTruncation,
        "a ported Kafka test's exact expectation (engine/tests/engine/leader_epoch.rs)",
    ),
    (
        Mutation::IsrExpansionBelowLeaderEpochStart,
        "a ported Kafka test's exact expectation (engine/tests/engine/replication.rs)",
    ),
    (Mutation::FencedReplicaJoinsIsr, "a ported Kafka test's exact expectation (engine/tests/engine/replication.rs)"),
    (Mutation::FetchIdsReusedAfterRestart, "a restarted follower's fetches (engine/tests/engine/replication.rs)"),
    (Mutation::FencedReplicaHoldsHw, "a ported Kafka test's exact expectation (engine/tests/engine/replication.rs)"),
    (
        Mutation::DelayedFetchIgnoresLeaderChange,
        "a ported Kafka test's exact expectation (engine/tests/engine/replication.rs)",
    ),
    (Mutation::HostedPartitionsOnly, "the wire driver's exact answers (kafka/tests/driver.rs)"),
    (Mutation::FollowerRefusesConsumerFetch, "the wire driver's exact answers (kafka/tests/driver.rs)"),
    (Mutation::TxnOffsetCommitV5OnlyVerifies, "the wire driver's exact answers (kafka/tests/driver.rs)"),
    (Mutation::Tv2FirstSequenceUnchecked, "the wire driver's exact answers (kafka/tests/driver.rs)"),
    (Mutation::ApiVersionsNamesUnchecked, "the wire driver's exact answers (kafka/tests/driver.rs)"),
    (Mutation::VerificationRefusedInvalidTxnState, "the wire driver's exact answers (kafka/tests/driver.rs)"),
    (Mutation::AnyBrokerCoordinates, "the wire driver's exact answers (kafka/tests/driver.rs)"),
    (Mutation::DelayedAnswerTimedOut, "the wire driver's exact answers (kafka/tests/driver.rs)"),
    (Mutation::GroupsKeptInMemory, "the wire driver's exact answers (kafka/tests/driver.rs)"),
    (Mutation::InternalTopicsWritable, "the wire driver's exact answers (kafka/tests/driver.rs)"),
    (
        Mutation::SyncAnsweredBeforeStored,
        "the group coordinator's SyncGroup answers (engine/tests/engine/txn_offsets.rs)",
    ),
    (
        Mutation::OffsetFetchReadsLatest,
        "a ported Kafka test's exact expectation (engine/tests/engine/coordinator_failover.rs)",
    ),
];

/// `txnsim mutations`: every injectable bug with its mechanism, its Kafka source and what catches it.
pub fn mutations_text() -> String {
    let mut out = String::new();
    for m in Mutation::ALL {
        let caught = catchers(m);
        out.push_str(&format!(
            "{}\n    {}\n    kafka: {}\n    caught by: {}\n",
            m.name(),
            m.mechanism(),
            m.kafka(),
            caught.join(", ")
        ));
    }
    out
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A violated invariant and its minimal witness, written for a person (offsets, records, producers).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Violation {
    pub invariant: Invariant,
    pub witness: String,
}

impl Violation {
    pub fn new(invariant: Invariant, witness: impl Into<String>) -> Self {
        Violation { invariant, witness: witness.into() }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.invariant.name(), self.witness)
    }
}
