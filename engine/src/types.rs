//! Identifiers shared by every node: topic-partitions, producer ids and epochs, offsets.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A log offset. Kafka uses `i64` with `-1` sentinels; here absence is an `Option`.
pub type Offset = u64;
/// A producer id assigned by `InitProducerId` (`RecordBatch.NO_PRODUCER_ID` is modelled as `None`).
pub type ProducerId = i64;
/// A producer epoch: Kafka's `short`, so `ProducerEpoch::MAX` is `Short.MAX_VALUE`, the last epoch there
/// is; the coordinator keeps it for fencing (`coordinator::is_epoch_exhausted`) and a bump past it panics
/// (`coordinator::bumped`). `-1` (`RecordBatch.NO_PRODUCER_EPOCH`) only appears in new `TransactionMetadata`.
pub type ProducerEpoch = i16;
/// The epoch of the transaction coordinator (the leader epoch of its `__transaction_state` partition).
pub type CoordinatorEpoch = i32;
/// Simulated milliseconds; the engine never reads a clock, it is handed `now_ms`.
pub type TimeMs = u64;

pub const NO_PRODUCER_EPOCH: ProducerEpoch = -1;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: u32,
}

impl TopicPartition {
    pub fn new(topic: &str, partition: u32) -> Self {
        TopicPartition { topic: topic.to_string(), partition }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// (pid, epoch): the identity a producer session stamps on its batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ProducerIdAndEpoch {
    pub producer_id: ProducerId,
    pub epoch: ProducerEpoch,
}

/// `isolation.level` of a consumer, plus the follower's `LOG_END` bound (`FetchIsolation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IsolationLevel {
    ReadUncommitted,
    ReadCommitted,
}

impl IsolationLevel {
    pub fn name(self) -> &'static str {
        match self {
            IsolationLevel::ReadUncommitted => "read_uncommitted",
            IsolationLevel::ReadCommitted => "read_committed",
        }
    }
}

/// COMMIT or ABORT: the `TransactionResult` of `EndTxn` and `WriteTxnMarkers`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransactionResult {
    Commit,
    Abort,
}

impl TransactionResult {
    pub fn name(self) -> &'static str {
        match self {
            TransactionResult::Commit => "COMMIT",
            TransactionResult::Abort => "ABORT",
        }
    }
}

/// `transaction.version`: 1 is classic, 2 is KIP-890 (epoch bump per transaction, partition verification).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TransactionVersion {
    V1,
    V2,
}

impl TransactionVersion {
    pub fn from_number(v: u8) -> Option<Self> {
        match v {
            1 => Some(TransactionVersion::V1),
            2 => Some(TransactionVersion::V2),
            _ => None,
        }
    }
    pub fn number(self) -> u8 {
        match self {
            TransactionVersion::V1 => 1,
            TransactionVersion::V2 => 2,
        }
    }
    /// KIP-890 part 2: `TransactionVersion.supportsEpochBump`.
    pub fn supports_epoch_bump(self) -> bool {
        self == TransactionVersion::V2
    }
}
