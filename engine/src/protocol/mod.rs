//! Messages between nodes: Kafka's APIs by name, each with its Kafka error codes, plus node ids, timers
//! and the `Effects` a handler returns (the engine is sans-io: drivers deliver these).

use crate::error::KafkaError;
use crate::leader_epoch_cache::EpochEndOffset;
use crate::record::ProduceBatch;
use crate::types::{
    CoordinatorEpoch, IsolationLevel, Offset, ProducerEpoch, ProducerId, ProducerIdAndEpoch, TimeMs, TopicPartition,
    TransactionResult, TransactionVersion,
};
use serde::{Deserialize, Serialize};
use std::fmt;

mod display;
pub mod fetch;
pub mod group;
pub mod metadata;

pub use display::{MarkerKind, Short, WithMarkers};
pub use fetch::{AbortedTransaction, FetchPartitionData};
pub use group::GroupMessage;
pub use metadata::MetadataMessage;

/// The controller's node id: KRaft controllers share the broker id space, and no broker uses this one.
pub const CONTROLLER_ID: u32 = 3000;

/// The correlation ids a node gives the requests it sends (`NetworkClient`'s), one sequence per node.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CorrelationIds(u64);

impl CorrelationIds {
    pub fn take(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }
}

/// The most brokers a cluster here may have.
pub const MAX_BROKERS: u32 = 5;

/// `LeaderConstants.NO_LEADER` (-1 on the wire): no replica may lead the partition now.
pub const NO_LEADER: u32 = u32::MAX;

/// A leader id for people: the broker, or `none`.
pub fn leader_name(leader: u32) -> String {
    if leader == NO_LEADER {
        "none".into()
    } else {
        leader.to_string()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum NodeId {
    Broker(u32),
    Client(String),
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeId::Broker(CONTROLLER_ID) => f.write_str("controller"),
            NodeId::Broker(id) => write!(f, "broker-{id}"),
            NodeId::Client(name) => f.write_str(name),
        }
    }
}

/// One `WriteTxnMarkersRequest.WritableTxnMarker`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TxnMarkerEntry {
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub result: TransactionResult,
    pub partitions: Vec<TopicPartition>,
    pub coordinator_epoch: CoordinatorEpoch,
    /// KIP-1228 (WriteTxnMarkers v2): the transaction's version, so the leader knows which epoch rule applies.
    pub transaction_version: TransactionVersion,
}

/// A successful Produce: the batch's offsets, or the original ones for a retried duplicate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ProduceAck {
    pub first_offset: Offset,
    pub last_offset: Offset,
    pub duplicate: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Message {
    /// `producer_id_and_epoch` is KIP-360's: a live producer asking for an epoch bump names its current one.
    InitProducerIdRequest {
        transactional_id: Option<String>,
        transaction_timeout_ms: TimeMs,
        producer_id_and_epoch: Option<ProducerIdAndEpoch>,
    },
    InitProducerIdResponse {
        result: Result<ProducerIdAndEpoch, KafkaError>,
    },
    /// `verify_only` is KIP-890 part 1's leader-to-coordinator check (AddPartitionsToTxn v4).
    AddPartitionsToTxnRequest {
        transactional_id: String,
        producer: ProducerIdAndEpoch,
        partitions: Vec<TopicPartition>,
        verify_only: bool,
        /// The client's transaction version, as Kafka reads it off the request versions (a leader's
        /// v5 add on behalf of a Produce v12+ is TV2; a client's v0-v3 and a v4 verify are TV1).
        transaction_version: TransactionVersion,
    },
    AddPartitionsToTxnResponse {
        result: Result<(), KafkaError>,
    },
    /// AddOffsetsToTxn (KIP-98): the group's `__consumer_offsets` partition joins the transaction, so its
    /// marker reaches the TxnOffsetCommit written there.
    AddOffsetsToTxnRequest {
        transactional_id: String,
        producer: ProducerIdAndEpoch,
        group_id: String,
    },
    AddOffsetsToTxnResponse {
        result: Result<(), KafkaError>,
    },
    ProduceRequest {
        transactional_id: Option<String>,
        partition: TopicPartition,
        batch: ProduceBatch,
        /// Produce v12+ from a client with TV2 enabled: the leader adds the partition to the transaction itself.
        transaction_version: TransactionVersion,
    },
    ProduceResponse {
        partition: TopicPartition,
        result: Result<ProduceAck, KafkaError>,
    },
    EndTxnRequest {
        transactional_id: String,
        producer: ProducerIdAndEpoch,
        result: TransactionResult,
        /// EndTxn v5+ is TV2 (`KafkaApis.handleEndTxnRequest`): the coordinator picks its table by this.
        transaction_version: TransactionVersion,
    },
    /// Under transaction version 2 the response carries the bumped epoch (EndTxn v5, KIP-890).
    EndTxnResponse {
        result: Result<Option<ProducerIdAndEpoch>, KafkaError>,
    },
    WriteTxnMarkersRequest {
        markers: Vec<TxnMarkerEntry>,
    },
    /// The coordinator's append of one transactional id's pending transition to `__transaction_state`
    /// (`TransactionStateManager.appendTransactionToLog`), sent to itself: with one replica its delivery is
    /// the append completing, and until then the transition is pending.
    TxnLogAppendRequest {
        transactional_id: String,
    },
    /// On a replicated `__transaction_state`, the append's outcome once the HW passed its record or it
    /// failed (`DelayedProduce` answering the coordinator's broker itself).
    TxnLogAppendResponse {
        transactional_id: String,
        result: Result<(), KafkaError>,
    },
    WriteTxnMarkersResponse {
        results: Vec<(ProducerId, TopicPartition, Result<Offset, KafkaError>)>,
    },
    /// A consumer's fetch (`isolation: None` reads to the log end, as a replica would).
    FetchRequest {
        partition: TopicPartition,
        fetch_offset: Offset,
        isolation: Option<IsolationLevel>,
        /// Fetch v11+ carries the client's metadata, which lets a follower serve it from its own log
        /// (KIP-392; `FetchParams.fetchOnlyLeader` is false for a consumer with `clientMetadata`).
        client_metadata: bool,
    },
    FetchResponse {
        partition: TopicPartition,
        fetch_offset: Offset,
        result: Result<FetchPartitionData, KafkaError>,
    },
    /// A follower's fetch from one leader (Fetch v12+ with a replica id): one request covers every
    /// partition it follows on that broker, as `ReplicaFetcherThread` builds it.
    ReplicaFetchRequest {
        partitions: Vec<ReplicaFetchPartition>,
    },
    /// The leader's answer, one entry per partition of the request.
    ReplicaFetchResponse {
        partitions: Vec<ReplicaFetchPartitionResponse>,
    },
    ListOffsetsRequest {
        partition: TopicPartition,
        isolation: IsolationLevel,
    },
    ListOffsetsResponse {
        partition: TopicPartition,
        result: Result<Offset, KafkaError>,
    },
    /// Metadata, CreateTopics, FindCoordinator, ListOffsets EARLIEST: only the wire driver sends these.
    Metadata(MetadataMessage),
    /// The classic consumer group protocol: only the wire driver sends these.
    Group(GroupMessage),
}

impl Message {
    /// Whether this is a request (the variant names say so, as Kafka's `ApiKeys` pairs do).
    pub fn is_request(&self) -> bool {
        matches!(
            self,
            Message::InitProducerIdRequest { .. }
                | Message::AddPartitionsToTxnRequest { .. }
                | Message::AddOffsetsToTxnRequest { .. }
                | Message::ProduceRequest { .. }
                | Message::EndTxnRequest { .. }
                | Message::WriteTxnMarkersRequest { .. }
                | Message::TxnLogAppendRequest { .. }
                | Message::FetchRequest { .. }
                | Message::ReplicaFetchRequest { .. }
                | Message::ListOffsetsRequest { .. }
        ) || matches!(self, Message::Group(g) if g.is_request())
            || matches!(self, Message::Metadata(m) if m.is_request())
    }

    /// What a broker's request to another broker comes back as when its connection fails (the receiver
    /// is down or was restarted): `NetworkClient` completes it disconnected, which each sender takes as a
    /// retriable NETWORK_EXCEPTION (`ReplicaFetcherThread`, `TransactionMarkerRequestCompletionHandler`,
    /// `AddPartitionsToTxnManager`). `None` for the requests no broker sends to another.
    pub fn disconnected_answer(&self) -> Option<Message> {
        let e = KafkaError::NetworkException;
        Some(match self {
            Message::ReplicaFetchRequest { partitions } => Message::ReplicaFetchResponse {
                partitions: partitions
                    .iter()
                    .map(|p| ReplicaFetchPartitionResponse {
                        partition: p.partition.clone(),
                        fetch_offset: p.fetch_offset,
                        result: Err(e),
                    })
                    .collect(),
            },
            Message::WriteTxnMarkersRequest { markers } => Message::WriteTxnMarkersResponse {
                results: markers
                    .iter()
                    .flat_map(|m| m.partitions.iter().map(move |tp| (m.producer_id, tp.clone(), Err(e))))
                    .collect(),
            },
            Message::AddPartitionsToTxnRequest { .. } => Message::AddPartitionsToTxnResponse { result: Err(e) },
            _ => return None,
        })
    }

    /// The API name, as Kafka's request logs print it.
    pub fn api_name(&self) -> &'static str {
        match self {
            Message::InitProducerIdRequest { .. } | Message::InitProducerIdResponse { .. } => "InitProducerId",
            Message::AddPartitionsToTxnRequest { .. } | Message::AddPartitionsToTxnResponse { .. } => {
                "AddPartitionsToTxn"
            }
            Message::AddOffsetsToTxnRequest { .. } | Message::AddOffsetsToTxnResponse { .. } => "AddOffsetsToTxn",
            Message::ProduceRequest { .. } | Message::ProduceResponse { .. } => "Produce",
            Message::EndTxnRequest { .. } | Message::EndTxnResponse { .. } => "EndTxn",
            Message::WriteTxnMarkersRequest { .. } | Message::WriteTxnMarkersResponse { .. } => "WriteTxnMarkers",
            Message::TxnLogAppendRequest { .. } | Message::TxnLogAppendResponse { .. } => "TxnLogAppend",
            Message::FetchRequest { .. }
            | Message::FetchResponse { .. }
            | Message::ReplicaFetchRequest { .. }
            | Message::ReplicaFetchResponse { .. } => "Fetch",
            Message::ListOffsetsRequest { .. } | Message::ListOffsetsResponse { .. } => "ListOffsets",
            Message::Metadata(m) => m.api_name(),
            Message::Group(m) => m.api_name(),
        }
    }
}

/// One partition of a follower's fetch (`FetchRequest.FetchPartition`): where the follower's log ends,
/// the leader epoch it follows (`currentLeaderEpoch`) and the epoch of the last batch it holds
/// (`lastFetchedEpoch`), against which the leader checks that the follower's log has not diverged.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ReplicaFetchPartition {
    pub partition: TopicPartition,
    pub fetch_offset: Offset,
    pub current_leader_epoch: i32,
    pub last_fetched_epoch: Option<i32>,
}

/// One partition of a leader's answer to a follower's fetch.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ReplicaFetchPartitionResponse {
    pub partition: TopicPartition,
    pub fetch_offset: Offset,
    pub result: Result<ReplicaFetchData, KafkaError>,
}

/// A leader's answer to one partition of a follower's fetch: the data, or (with no data) where the follower's last fetched
/// epoch ends in the leader's log, when the two logs diverge there (`FetchResponse.DivergingEpoch`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ReplicaFetchData {
    pub data: FetchPartitionData,
    pub diverging_epoch: Option<EpochEndOffset>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Envelope {
    pub from: NodeId,
    pub to: NodeId,
    /// Chosen by the requester; a response carries its request's id.
    pub correlation_id: u64,
    pub message: Message,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Timer {
    /// The coordinator's periodic scan (`transaction.abort.timed.out.transaction.cleanup.interval.ms`).
    AbortTimedOutTransactions,
    /// A client's `retry.backoff.ms` before resending the request it keeps under this correlation id.
    RetryBackoff { correlation_id: u64 },
    /// `request.timeout.ms` of a client request: no answer yet, so the connection closes and it is retried.
    RequestTimeout { correlation_id: u64 },
    /// `delivery.timeout.ms` of a batch, counted from its creation: it fails if still incomplete.
    DeliveryTimeout { op: u64 },
    /// `linger.ms` of a new batch is over: the sender may drain it.
    Linger { op: u64 },
    /// The coordinator's marker channel retry for one decision (index into its decision log).
    ResendTxnMarkers { decision: usize },
    /// `loadTransactionsForTxnTopicPartition`, scheduled when this broker became the leader of
    /// `__transaction_state` at `leader_epoch`: until it runs, requests get COORDINATOR_LOAD_IN_PROGRESS.
    /// `Proposal::LoadWaitsForHw` reschedules it while that partition's HW is below its log end.
    LoadTransactionLog { leader_epoch: i32 },
}

impl Timer {
    /// Work that only matters when messages are lost or time passes: the in-process cluster, which loses
    /// nothing, fires these only when told to advance time. A coordinator's load is not: it is due at once.
    pub fn is_background(&self) -> bool {
        !matches!(self, Timer::RetryBackoff { .. } | Timer::LoadTransactionLog { .. })
    }
}

/// What a handler asks its driver to do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Effects {
    pub sends: Vec<Envelope>,
    /// `(due_ms, timer)`.
    pub timers: Vec<(TimeMs, Timer)>,
}

impl Effects {
    pub fn send(&mut self, from: &NodeId, to: &NodeId, correlation_id: u64, message: Message) {
        self.sends.push(Envelope { from: from.clone(), to: to.clone(), correlation_id, message });
    }
    pub fn extend(&mut self, other: Effects) {
        self.sends.extend(other.sends);
        self.timers.extend(other.timers);
    }
}
