//! What a fetch answers per partition (`FetchPartitionData`, `FetchResponse.AbortedTransaction`): a leaf,
//! shared by the log that reads it, the replica manager that serves it and the clients that filter it.

use crate::record::RecordBatch;
use crate::types::{Offset, ProducerId};
use serde::{Deserialize, Serialize};

/// What a fetch response carries per aborted transaction (`FetchResponse.AbortedTransaction`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AbortedTransaction {
    pub producer_id: ProducerId,
    pub first_offset: Offset,
}

/// One partition's fetch result (`FetchPartitionData`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FetchPartitionData {
    pub high_watermark: Offset,
    pub last_stable_offset: Offset,
    pub log_start_offset: Offset,
    pub batches: Vec<RecordBatch>,
    /// `None` for read_uncommitted, as Kafka sends `null`.
    pub aborted_transactions: Option<Vec<AbortedTransaction>>,
}
