//! Injectable historical bugs (KAFKA_SEMANTICS.md section 3). Each is one small, marked branch in the
//! engine, off by default; they exist only to prove that the suite's checkers catch the bug.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Mutation {
    /// M3 (Redpanda #3036, generalised): read_committed fetches are bounded by the high watermark, not the LSO.
    ReadCommittedBoundedByHw,
    /// M3: the LSO is read as the last readable offset, so the batch starting at the LSO leaks to read_committed.
    LsoInclusive,
    /// M7: the first unstable offset ignores ongoing transactions.
    LsoIgnoresOngoingTxns,
    /// M7: the first unstable offset ignores decided transactions whose marker is not yet below the HW.
    LsoIgnoresUnreplicatedTxns,
    /// M7/M20: the LSO is not clamped to the high watermark (visibility computed from the log end).
    LsoNotClampedToHw,
    /// M5 (KAFKA-5376): a fetch does not consult the aborted-transaction index.
    SkipAbortedIndexOnFetch,
    /// M6/M14 (KAFKA-13727, KAFKA-7866): an aborted transaction gets no index entry.
    NoAbortedIndexEntry,
    /// KAFKA_SEMANTICS 1.1 step 5 dropped: non-transactional data from a producer with an open transaction is appended.
    AllowNonTxnWriteInOpenTxn,
    /// Idempotence off at the leader: a retried batch (same epoch and sequences as a retained one) is appended again.
    NoDedup,
    /// A detected duplicate is answered with the log end instead of the original batch's offsets.
    DuplicateReturnsWrongOffsets,
    /// Zombie fencing off at the leader: batches with an epoch below the producer's current one are appended.
    SkipProducerEpochCheck,
    /// KAFKA-9144 family: markers from a stale coordinator epoch are accepted.
    SkipCoordinatorEpochCheck,
    /// M16: the coordinator writes markers to the first partition only, then completes the transaction.
    MarkersToSubsetOfPartitions,
    /// M11 (KAFKA-10080): a late marker acknowledgement writes Complete* again, unchecked, over whatever state the id is in.
    DoubleComplete,
    /// M8 (KAFKA-6119): a timeout abort keeps the producer's epoch.
    TimeoutAbortSameEpoch,
    /// M9 (KAFKA-5231): an InitProducerId fence aborts with the old epoch.
    FenceAbortSameEpoch,
    /// The coordinator's timeout scan never aborts anything: a dead producer's transaction hangs.
    NoTimeoutAbort,
    /// M12 (KAFKA-16352): a restarted coordinator does not resend the markers of PrepareCommit/PrepareAbort transactions.
    DropPendingMarkersOnRestart,
    /// KIP-98 decision irrevocability broken on failover: a reloaded coordinator resends a PrepareCommit's markers as ABORT.
    RestartAbortsPreparedCommits,
    /// M1 (KIP-890 motivation): the leader appends a transactional batch without asking the coordinator.
    NoTxnVerification,
    /// M15 (KAFKA-12980): the consumer's position does not move past control batches and skipped aborted batches.
    NoPositionAdvanceOverControl,
    /// The consumer keeps a producer in its aborted set after that producer's ABORT marker, dropping its later batches.
    AbortedPidNotClearedOnMarker,
    /// The consumer moves its position to the response's high watermark, past records it never delivered.
    PositionSkipsToHighWatermark,
    /// The consumer sets its position to the last delivered offset instead of the one after it.
    RedeliverLastRecord,
    /// M21: the broker attaches the aborted list at read_uncommitted and the consumer filters with it.
    AbortedListForReadUncommitted,
    /// The pre-4.0 TV2 EndTxn table: an ABORT at the current epoch of a completed or empty transaction keeps
    /// the epoch (NONE or INVALID_TXN_STATE), so a late batch of the aborted send joins the next transaction.
    Tv2AbortKeepsEpoch,
    /// KIP-360 retry lost: an InitProducerId naming the epoch the coordinator bumped from (its first answer
    /// was lost) is fenced instead of answered with the current epoch.
    Kip360RetryFenced,
    /// The TV1 client policy under TV2: after an abort with a failed batch the client sends a KIP-360
    /// InitProducerId though the EndTxn answer already bumped its epoch (`needToTriggerEpochBumpFromClient`).
    Tv2InitAfterAbort,
    /// The coordinator's `__transaction_state` append completes the moment a transition is prepared: no
    /// pending window, so nothing can meet a transition whose record is not yet written.
    TxnLogAppendSynchronous,
    /// KAFKA-18464 undone: a TV2 EndTxn checks the epoch before the pending transition, so an empty abort
    /// sent right after a commit's answer (one epoch up, markers still out) is fenced.
    EndTxnEpochBeforePending,
    /// KAFKA-19367 undone (Kafka 4.0.0): under TV2 the abort after a fence or timeout bumps the epoch again.
    Tv2FenceAbortBumpsTwice,
    /// KIP-890's `VerificationStateEntry` without its sequence: a later batch of a producer being verified
    /// may be appended before an earlier one (the earlier then fails OUT_OF_ORDER_SEQUENCE).
    VerificationIgnoresLowestSequence,
    /// A `VerificationStateEntry` whose answer never came stays forever (no `producer.id.expiration.ms`).
    VerificationEntryNeverExpires,
}

impl Mutation {
    pub const ALL: [Mutation; 33] = [
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
        Mutation::TxnLogAppendSynchronous,
        Mutation::EndTxnEpochBeforePending,
        Mutation::Tv2FenceAbortBumpsTwice,
        Mutation::VerificationIgnoresLowestSequence,
        Mutation::VerificationEntryNeverExpires,
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
            Mutation::TxnLogAppendSynchronous => "txn-log-append-synchronous",
            Mutation::EndTxnEpochBeforePending => "end-txn-epoch-before-pending",
            Mutation::Tv2FenceAbortBumpsTwice => "tv2-fence-abort-bumps-twice",
            Mutation::VerificationIgnoresLowestSequence => "verification-ignores-lowest-sequence",
            Mutation::VerificationEntryNeverExpires => "verification-entry-never-expires",
        }
    }

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
