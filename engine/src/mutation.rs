//! Injectable historical bugs (KAFKA_SEMANTICS.md section 3). Each is one small, marked branch in the
//! engine, off by default; they exist only to prove that the suite's checkers catch the bug.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Mutation {
    /// M3 (Redpanda #3036 generalised): read_committed fetches are bounded by the high watermark, not the LSO.
    ReadCommittedBoundedByHw,
    /// M3: the LSO is treated as an inclusive bound, so the batch starting at the LSO is returned.
    LsoInclusive,
    /// M7: the LSO ignores ongoing transactions (first unstable offset taken from unreplicated markers only).
    LsoIgnoresOngoingTxns,
    /// M7: the LSO ignores decided transactions whose marker is not yet below the high watermark.
    LsoIgnoresUnreplicatedTxns,
    /// M5: the fetch path does not consult the aborted-transaction index.
    SkipAbortedIndexOnFetch,
    /// M6/M14: an aborted transaction gets no entry in the aborted-transaction index.
    NoAbortedIndexEntry,
    /// M16: the coordinator writes markers to the first partition only and completes the transaction.
    MarkersToSubsetOfPartitions,
    /// M8 (KAFKA-6119): a timeout abort keeps the producer's epoch.
    TimeoutAbortSameEpoch,
    /// M9 (KAFKA-5231): an InitProducerId fence aborts with the old epoch.
    FenceAbortSameEpoch,
    /// M1: the partition leader appends a transactional batch without KIP-890 verification.
    NoTxnVerification,
    /// M15 (KAFKA-12980): the consumer does not move its position past control batches and aborted batches.
    NoPositionAdvanceOverControl,
    /// M21: the consumer filters aborted batches at read_uncommitted when a list is present, and the
    /// broker attaches the list at read_uncommitted.
    AbortedListForReadUncommitted,
    /// Idempotence: the leader does not detect duplicate batches.
    NoDedup,
    /// Zombie fencing: the leader accepts batches with an epoch below the producer's current one.
    SkipProducerEpochCheck,
    /// M10 (KAFKA-9600): the coordinator accepts EndTxn with any epoch at least the current one... and below.
    EndTxnSkipsEpochCheck,
}

impl Mutation {
    pub const ALL: [Mutation; 15] = [
        Mutation::ReadCommittedBoundedByHw,
        Mutation::LsoInclusive,
        Mutation::LsoIgnoresOngoingTxns,
        Mutation::LsoIgnoresUnreplicatedTxns,
        Mutation::SkipAbortedIndexOnFetch,
        Mutation::NoAbortedIndexEntry,
        Mutation::MarkersToSubsetOfPartitions,
        Mutation::TimeoutAbortSameEpoch,
        Mutation::FenceAbortSameEpoch,
        Mutation::NoTxnVerification,
        Mutation::NoPositionAdvanceOverControl,
        Mutation::AbortedListForReadUncommitted,
        Mutation::NoDedup,
        Mutation::SkipProducerEpochCheck,
        Mutation::EndTxnSkipsEpochCheck,
    ];

    /// The kebab-case name used on the command line and in seed files.
    pub fn name(self) -> &'static str {
        match self {
            Mutation::ReadCommittedBoundedByHw => "read-committed-bounded-by-hw",
            Mutation::LsoInclusive => "lso-inclusive",
            Mutation::LsoIgnoresOngoingTxns => "lso-ignores-ongoing-txns",
            Mutation::LsoIgnoresUnreplicatedTxns => "lso-ignores-unreplicated-txns",
            Mutation::SkipAbortedIndexOnFetch => "skip-aborted-index-on-fetch",
            Mutation::NoAbortedIndexEntry => "no-aborted-index-entry",
            Mutation::MarkersToSubsetOfPartitions => "markers-to-subset-of-partitions",
            Mutation::TimeoutAbortSameEpoch => "timeout-abort-same-epoch",
            Mutation::FenceAbortSameEpoch => "fence-abort-same-epoch",
            Mutation::NoTxnVerification => "no-txn-verification",
            Mutation::NoPositionAdvanceOverControl => "no-position-advance-over-control",
            Mutation::AbortedListForReadUncommitted => "aborted-list-for-read-uncommitted",
            Mutation::NoDedup => "no-dedup",
            Mutation::SkipProducerEpochCheck => "skip-producer-epoch-check",
            Mutation::EndTxnSkipsEpochCheck => "end-txn-skips-epoch-check",
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
