//! The `txnsim-scenario/v1` file format (docs/scenario-format.md), parsed strictly: an unknown field or op is
//! an error naming it. Descriptive fields (`notes`, `asserted_by_source`) are allowed and ignored.

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use txnsim_engine::record::CompressionType;
use txnsim_engine::IsolationLevel;

pub const FORMAT: &str = "txnsim-scenario/v1";
/// Fields any object in a scenario file may carry for people; the runner ignores them.
pub const DESCRIPTIVE_FIELDS: [&str; 2] = ["notes", "asserted_by_source"];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    Producer,
    Log,
    ConsumerFetch,
    /// Every message waits in flight until an op moves it (`network.rs`).
    Network,
}

impl Layer {
    pub fn name(self) -> &'static str {
        match self {
            Layer::Producer => "producer",
            Layer::Log => "log",
            Layer::ConsumerFetch => "consumer_fetch",
            Layer::Network => "network",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    ReadCommitted,
    ReadUncommitted,
}

impl From<Isolation> for IsolationLevel {
    fn from(i: Isolation) -> IsolationLevel {
        match i {
            Isolation::ReadCommitted => IsolationLevel::ReadCommitted,
            Isolation::ReadUncommitted => IsolationLevel::ReadUncommitted,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkerType {
    Commit,
    Abort,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlType {
    Commit,
    Abort,
    Empty,
}

/// A scenario's header; its ops and expectations are parsed one by one so errors can name the op.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioHeader {
    pub name: String,
    #[serde(default)]
    pub source: Option<String>,
    pub layer: Layer,
    #[serde(default)]
    pub topics: Option<BTreeMap<String, u32>>,
    #[serde(default)]
    pub manual_high_watermark: bool,
    #[serde(default)]
    pub transaction_version: Option<u8>,
    /// Brokers in the cluster (1..=5, default 1); broker 0 leads every partition.
    #[serde(default)]
    pub brokers: Option<u32>,
    /// Replicas per partition of every topic (default 1; capped by `brokers`).
    #[serde(default)]
    pub replication_factor: Option<u32>,
    /// `min.insync.replicas` (default 1).
    #[serde(default)]
    pub min_insync_replicas: Option<u32>,
    /// `eligible.leader.replicas.version` (KIP-966): 1, the default of Kafka 4.1 and later, keeps the
    /// eligible leader replicas; 0 turns them off.
    #[serde(default)]
    pub eligible_leader_replicas_version: Option<u8>,
    /// `__transaction_state`'s replicas (default Kafka's 3, capped by `brokers`; 1 keeps the coordinator
    /// on broker 0 with its log unreplicated).
    #[serde(default)]
    pub transaction_log_replication_factor: Option<u32>,
    /// Network layer: `__transaction_state` records the coordinator starts with.
    #[serde(default)]
    pub transactional_ids: Option<Vec<Value>>,
    /// A fix Kafka has not made (`Proposal::name`, e.g. `load-waits-for-hw`), as `replay --proposal` runs it.
    #[serde(default)]
    pub proposal: Option<String>,
    /// Network layer: state invariants this scenario shows Kafka's behaviour breaking. They do not fail
    /// an op, and each must break at least once.
    #[serde(default)]
    pub shows_violations: Option<Vec<String>>,
    pub ops: Vec<Value>,
    #[serde(default)]
    pub expect: Option<Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteExpect {
    pub first_offset: Option<u64>,
    pub last_offset: Option<u64>,
    pub duplicate: Option<bool>,
    pub error: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MarkersExpect {
    pub marker_offsets: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitExpect {
    pub producer_id: Option<i64>,
    pub epoch: Option<i16>,
    pub marker_offsets: Option<BTreeMap<String, u64>>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MarkerExpect {
    pub offset: Option<u64>,
    pub error: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogStartExpect {
    pub log_start_offset: Option<u64>,
    pub error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadExpect {
    pub values: Vec<String>,
    pub offsets: Vec<u64>,
    pub end_position: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckExpect {
    pub lso: Option<u64>,
    pub high_watermark: Option<u64>,
    pub log_end_offset: Option<u64>,
    pub log_start_offset: Option<u64>,
    /// Every batch's codec, in log order (markers included, which are always `none`).
    pub batch_compression: Option<Vec<CompressionType>>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AbortedTxnExpect {
    pub producer: Option<String>,
    pub producer_id: Option<i64>,
    pub first_offset: u64,
    pub last_offset: u64,
    pub last_stable_offset: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FetchBatch {
    pub base_offset: u64,
    pub last_offset: u64,
    pub producer_id: Option<i64>,
    pub epoch: Option<i16>,
    pub transactional: bool,
    pub control: Option<ControlType>,
    pub records: Vec<(u64, String)>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FetchAborted {
    pub producer_id: i64,
    pub first_offset: u64,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
/// Each variant is one `op` tag; `parse_op` in mod.rs moves the tag out so field paths survive.
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    InitProducer {
        producer: String,
        transactional_id: Option<String>,
        /// The producer's `compression.type` (default none).
        compression: Option<CompressionType>,
        expect: Option<InitExpect>,
        expect_error: Option<String>,
    },
    Begin {
        producer: String,
        expect_error: Option<String>,
    },
    Commit {
        producer: String,
        expect: Option<MarkersExpect>,
        expect_error: Option<String>,
    },
    Abort {
        producer: String,
        expect: Option<MarkersExpect>,
        expect_error: Option<String>,
    },
    Produce {
        producer: String,
        topic: Option<String>,
        partition: u32,
        values: Vec<String>,
        expect: Option<WriteExpect>,
        expect_error: Option<String>,
    },
    ProduceNontxn {
        producer: Option<String>,
        topic: Option<String>,
        partition: u32,
        values: Vec<String>,
        /// The producer's `compression.type`, set by the op that makes it (default none).
        compression: Option<CompressionType>,
        expect: Option<WriteExpect>,
        expect_error: Option<String>,
    },
    CrashProducer {
        producer: String,
    },
    /// The broker process dies; its log survives (`Cluster::crash_broker`).
    CrashBroker {
        broker: u32,
    },
    /// A crashed broker starts again from its log (`Cluster::start_broker`).
    StartBroker {
        broker: u32,
    },
    ExpireTxn {
        producer: String,
        expect: Option<MarkersExpect>,
        expect_error: Option<String>,
    },
    AppendBatch {
        topic: Option<String>,
        partition: u32,
        producer_id: Option<i64>,
        epoch: Option<i16>,
        base_sequence: Option<i32>,
        transactional: bool,
        values: Vec<String>,
        expect: Option<WriteExpect>,
        expect_error: Option<String>,
    },
    AppendMarker {
        topic: Option<String>,
        partition: u32,
        producer_id: i64,
        epoch: i16,
        #[serde(rename = "type")]
        marker_type: MarkerType,
        coordinator_epoch: i32,
        expect: Option<MarkerExpect>,
        expect_error: Option<String>,
    },
    RollSegment {
        topic: Option<String>,
        partition: u32,
    },
    SetHighWatermark {
        topic: Option<String>,
        partition: u32,
        offset: u64,
    },
    DeleteRecords {
        topic: Option<String>,
        partition: u32,
        before_offset: u64,
        expect: Option<LogStartExpect>,
        expect_error: Option<String>,
    },
    DeliverFetch {
        isolation: Isolation,
        partition: u32,
        fetch_offset: u64,
        high_watermark: u64,
        last_stable_offset: u64,
        batches: Vec<FetchBatch>,
        aborted_transactions: Vec<FetchAborted>,
        expect: ReadExpect,
    },
    Read {
        isolation: Isolation,
        topic: Option<String>,
        partition: u32,
        from_offset: u64,
        expect: Option<ReadExpect>,
        expect_error: Option<String>,
    },
    Check {
        topic: Option<String>,
        partition: u32,
        expect: CheckExpect,
    },
    AbortedTxns {
        topic: Option<String>,
        partition: u32,
        from_offset: u64,
        upper_bound: u64,
        expect: Vec<AbortedTxnExpect>,
    },
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::InitProducer { .. } => "init_producer",
            Op::Begin { .. } => "begin",
            Op::Commit { .. } => "commit",
            Op::Abort { .. } => "abort",
            Op::Produce { .. } => "produce",
            Op::ProduceNontxn { .. } => "produce_nontxn",
            Op::CrashProducer { .. } => "crash_producer",
            Op::CrashBroker { .. } => "crash_broker",
            Op::StartBroker { .. } => "start_broker",
            Op::ExpireTxn { .. } => "expire_txn",
            Op::AppendBatch { .. } => "append_batch",
            Op::AppendMarker { .. } => "append_marker",
            Op::RollSegment { .. } => "roll_segment",
            Op::SetHighWatermark { .. } => "set_high_watermark",
            Op::DeleteRecords { .. } => "delete_records",
            Op::DeliverFetch { .. } => "deliver_fetch",
            Op::Read { .. } => "read",
            Op::Check { .. } => "check",
            Op::AbortedTxns { .. } => "aborted_txns",
        }
    }

    /// Which layers may use this op. Partition administration works under the producer layer too
    /// (`set_high_watermark` is how a producer scenario with `manual_high_watermark` moves the HW).
    pub fn allowed_in(&self, layer: Layer) -> bool {
        match self {
            Op::InitProducer { .. }
            | Op::Begin { .. }
            | Op::Commit { .. }
            | Op::Abort { .. }
            | Op::Produce { .. }
            | Op::ProduceNontxn { .. }
            | Op::CrashProducer { .. }
            | Op::CrashBroker { .. }
            | Op::StartBroker { .. }
            | Op::ExpireTxn { .. } => layer == Layer::Producer,
            Op::AppendBatch { .. } | Op::AppendMarker { .. } => layer == Layer::Log,
            Op::RollSegment { .. } | Op::SetHighWatermark { .. } | Op::DeleteRecords { .. } => {
                layer != Layer::ConsumerFetch
            }
            Op::DeliverFetch { .. } => layer == Layer::ConsumerFetch,
            Op::Read { .. } | Op::Check { .. } | Op::AbortedTxns { .. } => layer != Layer::ConsumerFetch,
        }
    }

    /// The `(topic, partition)` this op names, if any.
    pub fn partition(&self) -> Option<(Option<&str>, u32)> {
        match self {
            Op::Produce { topic, partition, .. }
            | Op::ProduceNontxn { topic, partition, .. }
            | Op::AppendBatch { topic, partition, .. }
            | Op::AppendMarker { topic, partition, .. }
            | Op::RollSegment { topic, partition }
            | Op::SetHighWatermark { topic, partition, .. }
            | Op::DeleteRecords { topic, partition, .. }
            | Op::Read { topic, partition, .. }
            | Op::Check { topic, partition, .. }
            | Op::AbortedTxns { topic, partition, .. } => Some((topic.as_deref(), *partition)),
            _ => None,
        }
    }

    pub fn expect_error(&self) -> Option<&str> {
        match self {
            Op::InitProducer { expect_error, .. }
            | Op::Begin { expect_error, .. }
            | Op::Commit { expect_error, .. }
            | Op::Abort { expect_error, .. }
            | Op::Produce { expect_error, .. }
            | Op::ProduceNontxn { expect_error, .. }
            | Op::ExpireTxn { expect_error, .. }
            | Op::AppendBatch { expect_error, .. }
            | Op::AppendMarker { expect_error, .. }
            | Op::DeleteRecords { expect_error, .. }
            | Op::Read { expect_error, .. } => expect_error.as_deref(),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FinalRead {
    pub partition: Option<u32>,
    #[serde(default)]
    pub from_offset: u64,
    pub values: Vec<String>,
    pub offsets: Vec<u64>,
    pub end_position: u64,
}

/// The scenario-level expectation for one partition.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionExpect {
    pub topic: Option<String>,
    pub partition: Option<u32>,
    pub read_committed: Option<FinalRead>,
    pub read_uncommitted: Option<FinalRead>,
    pub lso: Option<u64>,
    pub high_watermark: Option<u64>,
    pub log_end_offset: Option<u64>,
    pub log_start_offset: Option<u64>,
    pub aborted_txns: Option<Vec<AbortedTxnExpect>>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MultiExpect {
    pub partitions: Vec<PartitionExpect>,
}

impl PartitionExpect {
    /// The partition this expectation is about: its own field, else its reads', else 0.
    pub fn partition_number(&self) -> u32 {
        self.partition
            .or(self.read_committed.as_ref().and_then(|r| r.partition))
            .or(self.read_uncommitted.as_ref().and_then(|r| r.partition))
            .unwrap_or(0)
    }
}

/// Removes the descriptive fields people may add to any object, recursively; maps keyed by data
/// (`topics`, `marker_offsets`) are left as they are, since a topic may be called `notes`.
pub fn strip_descriptive(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for f in DESCRIPTIVE_FIELDS {
                map.remove(f);
            }
            for (k, v) in map.iter_mut() {
                if k != "topics" && k != "marker_offsets" {
                    strip_descriptive(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip_descriptive),
        _ => {}
    }
}
