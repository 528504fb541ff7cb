//! The producer client, Kafka's `KafkaProducer`: the `Producer`, its types and its API. Calls that Kafka's
//! client would reject at once return `Err` immediately; the rest complete later as a `Completion` once the
//! cluster has answered. Its `TransactionManager` and its `Sender` are a file each here.

mod sender;
mod transaction_manager;

use crate::config::EngineConfig;
use crate::error::KafkaError;
use crate::protocol::group::CommittedOffset;
use crate::protocol::{Effects, Message, NodeId, ProduceAck, Timer};
use crate::record::ProduceBatch;
use crate::rename::{Names, Rename};
use crate::types::{ProducerIdAndEpoch, TimeMs, TopicPartition, TransactionResult, TransactionVersion};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

pub use transaction_manager::{TxnManagerState, ADD_PARTITIONS_RETRY_BACKOFF_MS};

/// Which kind of producer this is.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ProducerKind {
    /// No producer id: batches carry no sequence and are never deduplicated.
    Plain,
    /// `enable.idempotence=true` without a transactional id.
    Idempotent,
    Transactional {
        transactional_id: String,
    },
}

/// Identifies one asynchronous call on this producer.
pub type OpId = u64;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum OpOutput {
    Initialized(ProducerIdAndEpoch),
    Sent {
        partition: TopicPartition,
        ack: ProduceAck,
    },
    /// `sendOffsetsToTransaction` is done: the group coordinator holds the offsets for the transaction.
    OffsetsSent,
    Committed,
    Aborted,
}

/// `ConsumerGroupMetadata`: the group and, for KIP-447's fencing, the member and generation the offsets
/// come from (-1 and empty when the application gives only the group id).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ConsumerGroupMetadata {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
}

/// One `sendOffsetsToTransaction` call: its group and the offsets still to be committed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct OffsetsCall {
    op: OpId,
    group: ConsumerGroupMetadata,
    offsets: Vec<(TopicPartition, CommittedOffset)>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Completion {
    pub op: OpId,
    pub result: Result<OpOutput, KafkaError>,
}

/// A request awaiting its response, kept so a retriable error can resend it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum InFlight {
    /// `after_abort`: KIP-360's epoch bump that completes an abort whose batches may have broken sequences.
    InitProducerId {
        op: OpId,
        after_abort: bool,
    },
    AddPartitions {
        partitions: Vec<TopicPartition>,
    },
    Produce {
        op: OpId,
        partition: TopicPartition,
        batch: ProduceBatch,
    },
    EndTxn {
        op: OpId,
        result: TransactionResult,
    },
    /// `AddOffsetsToTxnHandler`, then FindCoordinator(GROUP) unless the group's coordinator is known,
    /// then `TxnOffsetCommitHandler`.
    AddOffsets(OffsetsCall),
    FindGroupCoordinator(OffsetsCall),
    TxnOffsetCommit(OffsetsCall),
    /// A Metadata request for the partitions' leaders, sent to `broker`.
    Metadata {
        broker: u32,
        topics: Vec<String>,
    },
    /// `FindCoordinatorHandler` for the transactional id, sent to `broker`.
    FindTxnCoordinator {
        broker: u32,
    },
}

/// A batch in the `RecordAccumulator`, not yet drained: waiting for its partition to join the transaction
/// (TV1's AddPartitionsToTxn first), for `linger.ms`, or for room under `max.in.flight.requests.per.connection`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct QueuedSend {
    op: OpId,
    partition: TopicPartition,
    values: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Producer {
    pub id: NodeId,
    pub kind: ProducerKind,
    coordinator: NodeId,
    /// The bootstrap broker, taken for every partition's leader until metadata says otherwise.
    leader: NodeId,
    /// Partition leaders learned from Metadata answers (`Metadata.cluster`).
    leaders: BTreeMap<TopicPartition, NodeId>,
    /// `bootstrap.servers`: the brokers a Metadata request may go to. With one there is nothing to learn
    /// (it leads everything), and no Metadata request is ever sent.
    bootstrap: Vec<u32>,
    /// Brokers whose connection broke and that have not answered since: Metadata goes elsewhere.
    unreachable: BTreeSet<u32>,
    config: EngineConfig,
    pub state: TxnManagerState,
    /// The error that put the producer in `AbortableError` or `FatalError`.
    pub last_error: Option<KafkaError>,
    pub producer_id_and_epoch: Option<ProducerIdAndEpoch>,
    /// Next sequence number per partition; reset when the epoch changes.
    next_sequence: BTreeMap<TopicPartition, i32>,
    /// Partitions the coordinator has acknowledged for the current transaction.
    partitions_in_txn: BTreeSet<TopicPartition>,
    /// Whether any partition joined the transaction; an empty one ends without an EndTxn (`transactionStarted`).
    transaction_started: bool,
    /// Undrained batches in send order; the sender drains them (`RecordAccumulator.drain`).
    accumulator: Vec<QueuedSend>,
    /// An EndTxn waiting for in-flight sends to finish (commit and abort flush first).
    pending_end: Option<(OpId, TransactionResult)>,
    in_flight: BTreeMap<u64, InFlight>,
    /// Requests waiting out `retry.backoff.ms`, by the correlation id of their retry timer.
    backing_off: BTreeMap<u64, InFlight>,
    /// Retried batches whose backoff is over but which wait for an earlier batch of their partition to
    /// finish (`RecordAccumulator.shouldStopDrainBatchesForPartition`): keys of `backing_off`.
    due_retries: BTreeSet<u64>,
    next_correlation_id: u64,
    next_op: OpId,
    completions: Vec<Completion>,
    /// When each incomplete batch was created: it fails `delivery.timeout.ms` later (`ProducerBatch.createdMs`).
    created_ms: BTreeMap<OpId, TimeMs>,
    /// Times each batch was re-enqueued (`ProducerBatch.attempts`), against `retries`.
    attempts: BTreeMap<OpId, u32>,
    /// The last sequence a leader acknowledged per partition (`TxnPartitionEntry.lastAckedSequence`).
    last_acked_sequence: BTreeMap<TopicPartition, i32>,
    /// The time of the latest input; requests' timeouts count from it.
    now_ms: TimeMs,
    /// A batch failed in a way that leaves its sequence unknown: the next abort bumps the epoch (KIP-360).
    epoch_bump_required: bool,
    /// The highest `transaction.version` this client speaks; the cluster's finalized feature caps it
    /// (`TransactionManager.isTransactionV2Enabled`).
    pub client_transaction_version: TransactionVersion,
    /// Group coordinators found so far, by group id (FindCoordinator's answers).
    group_coordinators: BTreeMap<String, NodeId>,
}

impl Rename for InFlight {
    fn rename(&mut self, names: Names<'_>) {
        match self {
            InFlight::Produce { batch, .. } => batch.rename(names),
            InFlight::InitProducerId { .. }
            | InFlight::AddPartitions { .. }
            | InFlight::EndTxn { .. }
            | InFlight::AddOffsets(_)
            | InFlight::FindGroupCoordinator(_)
            | InFlight::TxnOffsetCommit(_)
            | InFlight::Metadata { .. }
            | InFlight::FindTxnCoordinator { .. } => {}
        }
    }
}

impl Rename for Producer {
    fn rename(&mut self, names: Names<'_>) {
        self.id.rename(names);
        match &mut self.kind {
            ProducerKind::Transactional { transactional_id } => names(transactional_id),
            ProducerKind::Plain | ProducerKind::Idempotent => {}
        }
        self.accumulator.iter_mut().for_each(|q| q.values.rename(names));
        self.in_flight.rename(names);
        self.backing_off.rename(names);
    }
}

impl Producer {
    /// A producer whose coordinator and partition leader is `broker` (one broker for now).
    pub fn new(name: &str, kind: ProducerKind, broker: NodeId, config: EngineConfig) -> Self {
        // `ProducerConfig.postProcessAndValidateIdempotenceConfigs` refuses this combination.
        assert!(
            kind == ProducerKind::Plain || config.retries > 0,
            "Must set retries to non-zero when using the idempotent producer"
        );
        let state = match kind {
            ProducerKind::Plain => TxnManagerState::Ready,
            _ => TxnManagerState::Uninitialized,
        };
        Producer {
            id: NodeId::Client(name.to_string()),
            kind,
            coordinator: broker.clone(),
            bootstrap: match &broker {
                NodeId::Broker(id) => vec![*id],
                NodeId::Client(_) => Vec::new(),
            },
            leader: broker,
            leaders: BTreeMap::new(),
            unreachable: BTreeSet::new(),
            config,
            state,
            last_error: None,
            producer_id_and_epoch: None,
            next_sequence: BTreeMap::new(),
            partitions_in_txn: BTreeSet::new(),
            transaction_started: false,
            accumulator: Vec::new(),
            pending_end: None,
            in_flight: BTreeMap::new(),
            backing_off: BTreeMap::new(),
            due_retries: BTreeSet::new(),
            next_correlation_id: 0,
            next_op: 0,
            completions: Vec::new(),
            created_ms: BTreeMap::new(),
            attempts: BTreeMap::new(),
            last_acked_sequence: BTreeMap::new(),
            now_ms: 0,
            epoch_bump_required: false,
            client_transaction_version: TransactionVersion::V2,
            group_coordinators: BTreeMap::new(),
        }
    }

    /// `bootstrap.servers`: every broker of a replicated cluster, where leaders move.
    pub fn set_bootstrap(&mut self, brokers: Vec<u32>) {
        self.bootstrap = brokers;
    }

    /// The leaders a new client's first Metadata answer gives it (`KafkaProducer` waits for metadata
    /// before its first send); drivers hand them over instead of staging that request.
    pub fn learn_leaders(&mut self, leaders: impl IntoIterator<Item = (TopicPartition, u32)>) {
        self.leaders.extend(leaders.into_iter().map(|(tp, l)| (tp, NodeId::Broker(l))));
    }

    /// The version this client's requests speak: its own highest, capped by the cluster's finalized one.
    pub fn transaction_version(&self) -> TransactionVersion {
        self.client_transaction_version.min(self.config.transaction_version)
    }

    pub fn transactional_id(&self) -> Option<&str> {
        match &self.kind {
            ProducerKind::Transactional { transactional_id } => Some(transactional_id),
            _ => None,
        }
    }

    /// Completed calls since the last take, in completion order.
    pub fn take_completions(&mut self) -> Vec<Completion> {
        std::mem::take(&mut self.completions)
    }

    /// The sequence the next batch to `partition` gets (`TransactionManager.sequenceNumber`).
    pub fn next_sequence(&self, partition: &TopicPartition) -> i32 {
        self.next_sequence.get(partition).copied().unwrap_or(0)
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Whether batch `op` is still incomplete (its delivery timeout can still fail it).
    pub fn batch_incomplete(&self, op: OpId) -> bool {
        self.created_ms.contains_key(&op)
    }

    /// The batch a Produce request in flight carries (drivers reason about which timers can still matter).
    pub fn batch_of_request(&self, correlation_id: u64) -> Option<OpId> {
        match self.in_flight.get(&correlation_id) {
            Some(InFlight::Produce { op, .. }) => Some(*op),
            _ => None,
        }
    }

    /// The requests in flight that carry batch `op`.
    pub fn requests_of_batch(&self, op: OpId) -> Vec<u64> {
        self.in_flight
            .iter()
            .filter(|(_, f)| matches!(f, InFlight::Produce { op: o, .. } if *o == op))
            .map(|(c, _)| *c)
            .collect()
    }

    /// Batches sent and not yet answered, or waiting out a backoff before their resend.
    pub fn in_flight_batches(&self) -> usize {
        self.in_flight
            .values()
            .chain(self.backing_off.values())
            .filter(|f| matches!(f, InFlight::Produce { .. }))
            .count()
    }

    pub fn is_idle(&self) -> bool {
        self.in_flight.is_empty()
            && self.backing_off.is_empty()
            && self.accumulator.is_empty()
            && self.pending_end.is_none()
    }

    fn new_op(&mut self) -> OpId {
        self.next_op += 1;
        self.next_op
    }

    /// `sendOffsetsToTransaction(offsets, groupMetadata)`: the offsets commit with the transaction. First
    /// AddOffsetsToTxn puts the group's offsets partition in the transaction, then the group's coordinator
    /// is looked up and sent TxnOffsetCommit; the call completes when that is answered.
    pub fn send_offsets_to_transaction(
        &mut self,
        now_ms: TimeMs,
        offsets: Vec<(TopicPartition, CommittedOffset)>,
        group: ConsumerGroupMetadata,
    ) -> Result<(OpId, Effects), KafkaError> {
        self.now_ms = now_ms;
        self.check_not_failed()?;
        if self.transactional_id().is_none() || self.state != TxnManagerState::InTransaction {
            return Err(KafkaError::InvalidTxnState);
        }
        let op = self.new_op();
        let mut effects = Effects::default();
        self.resend(InFlight::AddOffsets(OffsetsCall { op, group, offsets }), &mut effects);
        Ok((op, effects))
    }

    /// `initTransactions()` (or the idempotent producer's InitProducerId).
    pub fn init_transactions(&mut self, now_ms: TimeMs) -> Result<(OpId, Effects), KafkaError> {
        self.now_ms = now_ms;
        self.check_not_failed()?;
        if self.kind == ProducerKind::Plain {
            return Err(KafkaError::InvalidRequest);
        }
        if self.state != TxnManagerState::Uninitialized {
            return Err(KafkaError::InvalidTxnState);
        }
        self.transition(TxnManagerState::Initializing);
        let op = self.new_op();
        let mut effects = Effects::default();
        self.send_init(op, false, &mut effects);
        Ok((op, effects))
    }

    /// `beginTransaction()`: client-side only; the coordinator learns of the transaction on its first partition.
    pub fn begin_transaction(&mut self) -> Result<(), KafkaError> {
        self.check_not_failed()?;
        if self.transactional_id().is_none() || self.state != TxnManagerState::Ready {
            return Err(KafkaError::InvalidTxnState);
        }
        self.transition(TxnManagerState::InTransaction);
        self.partitions_in_txn.clear();
        self.transaction_started = false;
        Ok(())
    }

    /// `send()` of one batch of `values` to `partition`.
    pub fn send(
        &mut self,
        now_ms: TimeMs,
        partition: TopicPartition,
        values: Vec<String>,
    ) -> Result<(OpId, Effects), KafkaError> {
        self.now_ms = now_ms;
        self.check_not_failed()?;
        let mut effects = Effects::default();
        match self.kind {
            ProducerKind::Transactional { .. } if self.state != TxnManagerState::InTransaction => {
                return Err(KafkaError::InvalidTxnState)
            }
            ProducerKind::Idempotent if self.state != TxnManagerState::Ready => {
                return Err(KafkaError::InvalidTxnState)
            }
            _ => {}
        }
        let op = self.new_op();
        let tv1_txn = self.transactional_id().is_some() && !self.transaction_version().supports_epoch_bump();
        if self.transactional_id().is_some() && !tv1_txn {
            // Under TV2 the partition leader adds the partition itself (KIP-890 part 2): the transaction
            // counts as started at its first send, even if that batch never reaches a leader.
            self.transaction_started = true;
        }
        let needs_add = tv1_txn
            && !self.partitions_in_txn.contains(&partition)
            && !self.accumulator.iter().any(|q| q.partition == partition);
        self.accumulator.push(QueuedSend { op, partition: partition.clone(), values });
        self.created_ms.insert(op, now_ms);
        effects.timers.push((now_ms + self.config.delivery_timeout_ms, Timer::DeliveryTimeout { op }));
        if self.config.linger_ms > 0 {
            effects.timers.push((now_ms + self.config.linger_ms, Timer::Linger { op }));
        }
        if needs_add {
            let message = Message::AddPartitionsToTxnRequest {
                transactional_id: self.transactional_id().expect("transactional").to_string(),
                producer: self.producer_id_and_epoch.expect("in a transaction after init"),
                partitions: vec![partition.clone()],
                verify_only: false,
                transaction_version: self.transaction_version(),
            };
            let in_flight = InFlight::AddPartitions { partitions: vec![partition] };
            self.request(self.coordinator.clone(), message, in_flight, &mut effects);
        }
        self.drain(&mut effects);
        Ok((op, effects))
    }

    /// `commitTransaction()`.
    pub fn commit_transaction(&mut self, now_ms: TimeMs) -> Result<(OpId, Effects), KafkaError> {
        self.now_ms = now_ms;
        self.check_not_failed()?;
        if let Some(op) = self.ending(TransactionResult::Commit) {
            // The application retries a commit whose call timed out: the same pending result
            // (`TransactionManagerTest#testRetryCommitTransaction`).
            return Ok((op, Effects::default()));
        }
        if self.transactional_id().is_none() || self.state != TxnManagerState::InTransaction {
            return Err(KafkaError::InvalidTxnState);
        }
        self.transition(TxnManagerState::CommittingTransaction);
        Ok(self.begin_end(TransactionResult::Commit))
    }

    /// `abortTransaction()`: allowed after an abortable error.
    pub fn abort_transaction(&mut self, now_ms: TimeMs) -> Result<(OpId, Effects), KafkaError> {
        self.now_ms = now_ms;
        if self.state == TxnManagerState::FatalError {
            return Err(self.last_error.expect("fatal state records its error"));
        }
        if let Some(op) = self.ending(TransactionResult::Abort) {
            return Ok((op, Effects::default()));
        }
        if self.transactional_id().is_none()
            || !matches!(self.state, TxnManagerState::InTransaction | TxnManagerState::AbortableError)
        {
            return Err(KafkaError::InvalidTxnState);
        }
        self.transition(TxnManagerState::AbortingTransaction);
        if !self.config.mutations.has(crate::mutation::Mutation::AbortSendsUndrainedBatches) {
            self.abort_undrained_batches(KafkaError::TransactionAborted);
        }
        Ok(self.begin_end(TransactionResult::Abort))
    }
}
