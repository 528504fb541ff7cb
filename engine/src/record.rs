//! Record batches as a partition log stores them (`DefaultRecordBatch`, `EndTransactionMarker`).

use crate::types::{CoordinatorEpoch, Offset, ProducerEpoch, ProducerId, TransactionResult};
use serde::{Deserialize, Serialize};

/// One data record. Offsets are explicit because compaction leaves gaps inside a batch.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Record {
    pub offset: Offset,
    pub value: String,
}

/// The one record of a control batch: `ControlRecordType` ABORT (0) / COMMIT (1) with the coordinator epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EndTxnMarker {
    pub result: TransactionResult,
    pub coordinator_epoch: CoordinatorEpoch,
}

/// The producer fields of a batch header. A plain producer's batch has none (`NO_PRODUCER_ID`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BatchProducer {
    pub producer_id: ProducerId,
    pub epoch: ProducerEpoch,
    /// `-1` (`NO_SEQUENCE`) on control batches.
    pub base_sequence: i32,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum BatchBody {
    Data(Vec<Record>),
    /// A control batch holds exactly one marker at `base_offset`, or (after compaction, KAFKA-10702's
    /// "empty control batch") none at all.
    Control(Option<EndTxnMarker>),
}

/// A batch's codec, `RecordBatch` attributes bits 0-2 (`CompressionType`: ids 0 to 4). The producer's
/// `compression.type` picks it and the broker keeps it (`LogValidator` with topic `compression.type=producer`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompressionType {
    #[default]
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl CompressionType {
    pub const ALL: [CompressionType; 5] = [Self::None, Self::Gzip, Self::Snappy, Self::Lz4, Self::Zstd];

    /// Kafka's name (`CompressionType.name`), as `compression.type` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Gzip => "gzip",
            Self::Snappy => "snappy",
            Self::Lz4 => "lz4",
            Self::Zstd => "zstd",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == name)
    }

    pub fn is_none(&self) -> bool {
        *self == Self::None
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RecordBatch {
    pub base_offset: Offset,
    /// Inclusive; from the header, so it survives compaction of trailing records.
    pub last_offset: Offset,
    pub producer: Option<BatchProducer>,
    pub is_transactional: bool,
    pub body: BatchBody,
    /// The leader epoch it was written under (`partitionLeaderEpoch`); 0 wherever leadership never moved,
    /// which is left out of serialized traces.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub partition_leader_epoch: i32,
    /// Always none on a control batch (`MemoryRecords.withEndTransactionMarker` writes it uncompressed);
    /// left out of serialized traces when none.
    #[serde(default, skip_serializing_if = "CompressionType::is_none")]
    pub compression: CompressionType,
}

fn is_zero(epoch: &i32) -> bool {
    *epoch == 0
}

impl RecordBatch {
    pub fn is_control(&self) -> bool {
        matches!(self.body, BatchBody::Control(_))
    }
    pub fn next_offset(&self) -> Offset {
        self.last_offset + 1
    }
    pub fn producer_id(&self) -> Option<ProducerId> {
        self.producer.map(|p| p.producer_id)
    }
    pub fn marker(&self) -> Option<EndTxnMarker> {
        match self.body {
            BatchBody::Control(m) => m,
            BatchBody::Data(_) => None,
        }
    }
    pub fn records(&self) -> &[Record] {
        match &self.body {
            BatchBody::Data(r) => r,
            BatchBody::Control(_) => &[],
        }
    }
    /// Inclusive last sequence number, with Kafka's wrap at `i32::MAX` (`DefaultRecordBatch.incrementSequence`).
    pub fn last_sequence(&self) -> Option<i32> {
        let p = self.producer?;
        if p.base_sequence < 0 {
            return None;
        }
        let delta = (self.last_offset - self.base_offset) as i64;
        Some(increment_sequence(p.base_sequence, delta))
    }
}

/// `DefaultRecordBatch.incrementSequence`: sequences wrap from `i32::MAX` to 0.
pub fn increment_sequence(sequence: i32, increment: i64) -> i32 {
    let next = sequence as i64 + increment;
    if next > i32::MAX as i64 {
        (next - i32::MAX as i64 - 1) as i32
    } else {
        next as i32
    }
}

/// What a producer sends: values without offsets (the leader assigns them).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ProduceBatch {
    pub producer: Option<BatchProducer>,
    pub is_transactional: bool,
    pub values: Vec<String>,
    /// The producer's `compression.type`, which the leader keeps on the batch it appends.
    #[serde(default, skip_serializing_if = "CompressionType::is_none")]
    pub compression: CompressionType,
}
