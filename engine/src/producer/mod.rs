//! The producer client: Kafka's `KafkaProducer` + `TransactionManager` (its `State` machine, with `Sender`).
//! Calls that Kafka's client would reject at once return `Err` immediately; the rest complete later as a
//! `Completion` once the cluster has answered.

use crate::config::EngineConfig;
use crate::error::KafkaError;
use crate::network_client;
use crate::protocol::group::{CommittedOffset, GroupMessage};
use crate::protocol::metadata::{CoordinatorType, MetadataMessage};
use crate::protocol::NO_LEADER;
use crate::protocol::{Effects, Envelope, Message, NodeId, ProduceAck, Timer};
use crate::record::{increment_sequence, BatchProducer, ProduceBatch};
use crate::rename::{Names, Rename};
use crate::types::{ProducerIdAndEpoch, TimeMs, TopicPartition, TransactionResult, TransactionVersion};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

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

/// `TransactionManager.State`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TxnManagerState {
    Uninitialized,
    Initializing,
    Ready,
    InTransaction,
    CommittingTransaction,
    AbortingTransaction,
    AbortableError,
    FatalError,
}

impl TxnManagerState {
    pub const ALL: [TxnManagerState; 8] = [
        TxnManagerState::Uninitialized,
        TxnManagerState::Initializing,
        TxnManagerState::Ready,
        TxnManagerState::InTransaction,
        TxnManagerState::CommittingTransaction,
        TxnManagerState::AbortingTransaction,
        TxnManagerState::AbortableError,
        TxnManagerState::FatalError,
    ];

    /// Kafka's name for the state (`TransactionManager.State`).
    pub fn name(self) -> &'static str {
        use TxnManagerState::*;
        match self {
            Uninitialized => "UNINITIALIZED",
            Initializing => "INITIALIZING",
            Ready => "READY",
            InTransaction => "IN_TRANSACTION",
            CommittingTransaction => "COMMITTING_TRANSACTION",
            AbortingTransaction => "ABORTING_TRANSACTION",
            AbortableError => "ABORTABLE_ERROR",
            FatalError => "FATAL_ERROR",
        }
    }

    /// `State.isTransitionValid`.
    fn is_transition_valid(self, to: TxnManagerState) -> bool {
        use TxnManagerState::*;
        match to {
            Uninitialized => false,
            Initializing => {
                matches!(self, Uninitialized | Ready | CommittingTransaction | AbortingTransaction | AbortableError)
            }
            Ready => matches!(self, Initializing | CommittingTransaction | AbortingTransaction),
            InTransaction => self == Ready,
            CommittingTransaction => self == InTransaction,
            AbortingTransaction => matches!(self, InTransaction | AbortableError),
            AbortableError => matches!(self, InTransaction | CommittingTransaction | AbortableError | Initializing),
            FatalError => true,
        }
    }
}

/// `TransactionManager.ADD_PARTITIONS_RETRY_BACKOFF_MS`: the retry of an AddPartitions answered CONCURRENT_TRANSACTIONS.
pub const ADD_PARTITIONS_RETRY_BACKOFF_MS: TimeMs = 20;

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

    /// Where a Produce for `partition` goes: its leader as last learned, else the bootstrap broker.
    fn leader_for(&self, partition: &TopicPartition) -> NodeId {
        self.leaders.get(partition).unwrap_or(&self.leader).clone()
    }

    /// `Metadata.requestUpdate` and the `Sender`'s metadata fetch: asks a broker that has not dropped this
    /// client's connection (`NetworkClient.leastLoadedNode`) for the leaders of `partition`'s topic,
    /// unless one such request is already out. Nothing to ask with a single bootstrap broker.
    fn request_metadata(&mut self, partition: &TopicPartition, effects: &mut Effects) {
        let pending = self.in_flight.values().chain(self.backing_off.values());
        if self.bootstrap.len() < 2 || pending.into_iter().any(|f| matches!(f, InFlight::Metadata { .. })) {
            return;
        }
        self.send_metadata(vec![partition.topic.clone()], effects);
    }

    /// `TransactionManager.lookupCoordinator(TRANSACTION)`: the coordinator answered NOT_COORDINATOR or
    /// COORDINATOR_NOT_AVAILABLE, or its connection broke; another broker is asked where it is now (the
    /// failed request is retried meanwhile). Nothing to ask with a single bootstrap broker.
    fn lookup_coordinator(&mut self, effects: &mut Effects) {
        let pending = self.in_flight.values().chain(self.backing_off.values());
        let looking = pending.into_iter().any(|f| matches!(f, InFlight::FindTxnCoordinator { .. }));
        // An idempotent producer's InitProducerId goes to any broker: it has no coordinator to find.
        if self.bootstrap.len() < 2 || self.transactional_id().is_none() || looking {
            return;
        }
        self.send_find_coordinator(effects);
    }

    fn send_find_coordinator(&mut self, effects: &mut Effects) {
        let reachable = |b: &&u32| !self.unreachable.contains(b);
        let broker = *self
            .bootstrap
            .iter()
            .filter(reachable)
            .find(|b| NodeId::Broker(**b) != self.coordinator)
            .or_else(|| self.bootstrap.iter().find(reachable))
            .unwrap_or(&self.bootstrap[0]);
        let message = Message::Metadata(MetadataMessage::FindCoordinatorRequest {
            key_type: CoordinatorType::Transaction,
            keys: vec![self.transactional_id().expect("only a transactional producer has a coordinator").to_string()],
        });
        self.request(NodeId::Broker(broker), message, InFlight::FindTxnCoordinator { broker }, effects);
    }

    fn send_metadata(&mut self, topics: Vec<String>, effects: &mut Effects) {
        let broker = *self.bootstrap.iter().find(|b| !self.unreachable.contains(b)).unwrap_or(&self.bootstrap[0]);
        let message = Message::Metadata(MetadataMessage::MetadataRequest {
            topics: Some(topics.clone()),
            allow_auto_topic_creation: false,
        });
        self.request(NodeId::Broker(broker), message, InFlight::Metadata { broker, topics }, effects);
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

    /// The connection to `broker` broke (`NetworkClient` disconnect): every request on it failed without an
    /// answer, and is retried after `retry.backoff.ms` (`TxnRequestHandler` re-enqueues; the `Sender`
    /// retries a batch as for any retriable error). Whether the broker processed it is unknown here.
    pub fn on_disconnect(&mut self, now_ms: TimeMs, broker: &NodeId) -> Effects {
        self.now_ms = now_ms;
        let mut effects = Effects::default();
        let lost: Vec<u64> =
            self.in_flight.iter().filter(|(_, f)| &self.destination(f) == broker).map(|(corr, _)| *corr).collect();
        let mut refresh = None;
        let mut coordinator_lost = false;
        for corr in lost {
            let in_flight = self.in_flight.remove(&corr).expect("listed above");
            if let InFlight::Produce { partition, .. } = &in_flight {
                refresh = Some(partition.clone());
            }
            coordinator_lost |= Self::goes_to_coordinator(&in_flight);
            self.back_off(now_ms, in_flight, KafkaError::NetworkException, &mut effects);
        }
        if coordinator_lost && self.bootstrap.len() > 1 {
            if let NodeId::Broker(id) = broker {
                self.unreachable.insert(*id);
            }
            self.lookup_coordinator(&mut effects);
        }
        // `NetworkClient.processDisconnection`: a lost leader connection asks for fresh metadata.
        if let (Some(partition), NodeId::Broker(id)) = (refresh, broker) {
            if self.bootstrap.len() > 1 {
                self.unreachable.insert(*id);
            }
            self.request_metadata(&partition, &mut effects);
        }
        effects
    }

    /// The requests a transaction coordinator answers.
    fn goes_to_coordinator(in_flight: &InFlight) -> bool {
        matches!(
            in_flight,
            InFlight::InitProducerId { .. }
                | InFlight::AddPartitions { .. }
                | InFlight::EndTxn { .. }
                | InFlight::AddOffsets(_)
        )
    }

    pub fn is_idle(&self) -> bool {
        self.in_flight.is_empty()
            && self.backing_off.is_empty()
            && self.accumulator.is_empty()
            && self.pending_end.is_none()
    }

    fn transition(&mut self, to: TxnManagerState) {
        assert!(self.state.is_transition_valid(to), "{}: producer state {:?} -> {to:?}", self.id, self.state);
        self.state = to;
    }

    fn fail_fatal(&mut self, error: KafkaError) {
        self.last_error = Some(error);
        self.transition(TxnManagerState::FatalError);
    }

    fn fail_abortable(&mut self, error: KafkaError) {
        // `transitionToAbortableError`: an abort already under way stays under way (and a fatal error stays fatal).
        if matches!(self.state, TxnManagerState::FatalError | TxnManagerState::AbortingTransaction) {
            return;
        }
        self.last_error = Some(error);
        self.transition(TxnManagerState::AbortableError);
        // The sender fails what it never drained once an abortable error is set.
        if !self.config.mutations.has(crate::mutation::Mutation::AbortSendsUndrainedBatches) {
            self.abort_undrained_batches(error);
        }
    }

    /// A batch failed in a way that leaves its sequence unknown: TV1 and idempotent producers bump the epoch
    /// before the next transaction or batch (`maybeTransitionToErrorState`: not while completing one).
    fn sequence_unknown(&mut self) {
        if !matches!(self.state, TxnManagerState::CommittingTransaction | TxnManagerState::AbortingTransaction)
            || self.config.mutations.has(crate::mutation::Mutation::EpochBumpWhileCompleting)
        {
            self.epoch_bump_required = true;
        }
    }

    /// `bumpIdempotentEpochAndResetIdIfNeeded`: an idempotent producer with a broken sequence bumps its own
    /// epoch once nothing is in flight, and restarts every partition's sequence at 0.
    fn maybe_bump_idempotent_epoch(&mut self) {
        if self.kind != ProducerKind::Idempotent || !self.epoch_bump_required || self.in_flight_batches() > 0 {
            return;
        }
        if self.config.mutations.has(crate::mutation::Mutation::NoIdempotentEpochBump) {
            return;
        }
        let Some(pie) = self.producer_id_and_epoch else { return };
        self.set_producer_id_and_epoch(ProducerIdAndEpoch { producer_id: pie.producer_id, epoch: pie.epoch + 1 });
        self.epoch_bump_required = false;
    }

    /// `TransactionManager.isNextSequence`: the batch right after the last acknowledged one.
    fn is_next_sequence(&self, partition: &TopicPartition, base_sequence: i32) -> bool {
        let last = self.last_acked_sequence.get(partition).copied();
        base_sequence == last.map_or(0, |l| increment_sequence(l, 1))
    }

    /// A batch is done: it leaves the delivery-timeout bookkeeping and its outcome reaches the application.
    fn complete_batch(&mut self, op: OpId, result: Result<OpOutput, KafkaError>) {
        self.created_ms.remove(&op);
        self.attempts.remove(&op);
        self.completions.push(Completion { op, result });
    }

    /// A batch failed for good with `e` (`Sender.failBatch`): a transactional producer enters the error
    /// state it calls for.
    fn fail_batch(&mut self, op: OpId, e: KafkaError) {
        if e == KafkaError::OutOfOrderSequence {
            self.sequence_unknown();
        }
        if self.transactional_id().is_some() {
            if e == KafkaError::ProducerFenced {
                self.fail_fatal(e);
            } else {
                self.fail_abortable(e);
            }
        }
        self.complete_batch(op, Err(e));
    }

    /// `maybeFailWithError`: a producer in an error state rejects calls with that error.
    fn check_not_failed(&self) -> Result<(), KafkaError> {
        match self.state {
            TxnManagerState::FatalError | TxnManagerState::AbortableError => {
                Err(self.last_error.expect("error states record their error"))
            }
            _ => Ok(()),
        }
    }

    fn new_op(&mut self) -> OpId {
        self.next_op += 1;
        self.next_op
    }

    fn request(&mut self, to: NodeId, message: Message, in_flight: InFlight, effects: &mut Effects) {
        self.next_correlation_id += 1;
        let corr = self.next_correlation_id;
        self.in_flight.insert(corr, in_flight);
        effects.send(&self.id.clone(), &to, corr, message);
        let due = self.now_ms + self.config.request_timeout_ms;
        effects.timers.push((due, Timer::RequestTimeout { correlation_id: corr }));
    }

    /// Where a request goes: a batch to the partition leader, a TxnOffsetCommit to the group's
    /// coordinator, the rest to the transaction coordinator.
    fn destination(&self, in_flight: &InFlight) -> NodeId {
        match in_flight {
            InFlight::Produce { partition, .. } => self.leader_for(partition),
            InFlight::Metadata { broker, .. } | InFlight::FindTxnCoordinator { broker } => NodeId::Broker(*broker),
            InFlight::TxnOffsetCommit(c) => {
                self.group_coordinators.get(&c.group.group_id).unwrap_or(&self.coordinator).clone()
            }
            _ => self.coordinator.clone(),
        }
    }

    /// Sends the request behind `in_flight` again (after a backoff or a timeout).
    fn resend(&mut self, in_flight: InFlight, effects: &mut Effects) {
        let transactional_id = || self.transactional_id().expect("transactional").to_string();
        let producer = || self.producer_id_and_epoch.expect("initialized");
        let message = match &in_flight {
            InFlight::AddOffsets(c) => Message::AddOffsetsToTxnRequest {
                transactional_id: transactional_id(),
                producer: producer(),
                group_id: c.group.group_id.clone(),
            },
            InFlight::FindGroupCoordinator(c) => Message::Metadata(MetadataMessage::FindCoordinatorRequest {
                key_type: CoordinatorType::Group,
                keys: vec![c.group.group_id.clone()],
            }),
            InFlight::TxnOffsetCommit(c) => Message::Group(GroupMessage::TxnOffsetCommitRequest {
                transactional_id: transactional_id(),
                group_id: c.group.group_id.clone(),
                producer: producer(),
                generation_id: c.group.generation_id,
                member_id: c.group.member_id.clone(),
                offsets: c.offsets.clone(),
                // This producer sends AddOffsetsToTxn first, as TV1 does, so the offsets partition is
                // only verified.
                transaction_version: TransactionVersion::V1,
            }),
            InFlight::InitProducerId { op, after_abort } => {
                let (op, after_abort) = (*op, *after_abort);
                self.send_init(op, after_abort, effects);
                return;
            }
            InFlight::Metadata { topics, .. } => {
                let topics = topics.clone();
                self.send_metadata(topics, effects);
                return;
            }
            InFlight::FindTxnCoordinator { .. } => {
                self.send_find_coordinator(effects);
                return;
            }
            InFlight::EndTxn { result, .. } => Message::EndTxnRequest {
                transactional_id: transactional_id(),
                producer: self.producer_id_and_epoch.expect("initialized"),
                result: *result,
                transaction_version: self.transaction_version(),
            },
            InFlight::AddPartitions { partitions } => Message::AddPartitionsToTxnRequest {
                transactional_id: transactional_id(),
                producer: self.producer_id_and_epoch.expect("initialized"),
                partitions: partitions.clone(),
                verify_only: false,
                transaction_version: self.transaction_version(),
            },
            // The same batch with the same sequence: the leader deduplicates it if the first copy landed.
            InFlight::Produce { partition, batch, .. } => Message::ProduceRequest {
                transactional_id: self.transactional_id().map(str::to_string),
                partition: partition.clone(),
                batch: batch.clone(),
                transaction_version: self.transaction_version(),
            },
        };
        let to = self.destination(&in_flight);
        self.request(to, message, in_flight, effects);
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

    /// The TxnOffsetCommit of a call, through FindCoordinator first if its group's coordinator is unknown.
    fn offsets_commit_step(&self, call: OffsetsCall) -> InFlight {
        if self.group_coordinators.contains_key(&call.group.group_id) {
            InFlight::TxnOffsetCommit(call)
        } else {
            InFlight::FindGroupCoordinator(call)
        }
    }

    /// An offsets call failed for good: the producer enters the error state the error calls for.
    fn fail_offsets(&mut self, op: OpId, error: KafkaError, fatal: bool) {
        if fatal {
            // Batches never drained fail with the fatal error too (as after a fenced AddPartitions).
            self.fail_fatal(error);
            self.abort_undrained_batches(error);
        } else {
            self.fail_abortable(error);
        }
        self.completions.push(Completion { op, result: Err(error) });
    }

    /// `TxnOffsetCommitHandler.handleResponse`: committed partitions are done; a coordinator error forgets
    /// the coordinator and retries, another retriable error retries the failed partitions; a group
    /// mismatch (KIP-447) is abortable, a fenced producer fatal.
    fn on_txn_offset_commit(
        &mut self,
        now_ms: TimeMs,
        mut call: OffsetsCall,
        results: Vec<(TopicPartition, Result<(), KafkaError>)>,
        effects: &mut Effects,
    ) {
        let mut retry = None;
        for (tp, result) in results {
            match result {
                Ok(()) => call.offsets.retain(|(t, _)| *t != tp),
                Err(
                    e
                    @ (KafkaError::CoordinatorNotAvailable | KafkaError::NotCoordinator | KafkaError::RequestTimedOut),
                ) => {
                    self.group_coordinators.remove(&call.group.group_id);
                    retry = Some(e);
                }
                Err(e) if e.is_retriable() => retry = Some(e),
                Err(e @ (KafkaError::UnknownMemberId | KafkaError::IllegalGeneration)) => {
                    return self.fail_offsets(call.op, e, false);
                }
                Err(KafkaError::InvalidProducerEpoch | KafkaError::ProducerFenced) => {
                    return self.fail_offsets(call.op, KafkaError::ProducerFenced, true);
                }
                Err(e) => return self.fail_offsets(call.op, e, true),
            }
        }
        match retry {
            _ if call.offsets.is_empty() => {
                self.completions.push(Completion { op: call.op, result: Ok(OpOutput::OffsetsSent) })
            }
            Some(e) => {
                let step = self.offsets_commit_step(call);
                self.back_off(now_ms, step, e, effects)
            }
            None => unreachable!("offsets left uncommitted without an error"),
        }
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

    fn send_init(&mut self, op: OpId, after_abort: bool, effects: &mut Effects) {
        let message = Message::InitProducerIdRequest {
            transactional_id: self.transactional_id().map(str::to_string),
            transaction_timeout_ms: self.config.transaction_timeout_ms,
            producer_id_and_epoch: if after_abort { self.producer_id_and_epoch } else { None },
        };
        self.request(self.coordinator.clone(), message, InFlight::InitProducerId { op, after_abort }, effects);
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

    /// `Sender.sendProducerData` + `RecordAccumulator.drain`: sends every batch that may go, in order: its
    /// partition is in the transaction (TV1), its `linger.ms` is over (or a commit is flushing), no earlier
    /// batch of the partition waits, and fewer than `max.in.flight.requests.per.connection` are in flight.
    fn drain(&mut self, effects: &mut Effects) {
        let tv1_txn = self.transactional_id().is_some() && !self.transaction_version().supports_epoch_bump();
        let flushing = matches!(self.pending_end, Some((_, TransactionResult::Commit)));
        // A retried batch goes back to the head of its partition's queue: nothing behind it drains first.
        let mut blocked: BTreeSet<TopicPartition> = BTreeSet::new();
        if !self.config.mutations.has(crate::mutation::Mutation::RetriesOvertake) {
            blocked.extend(self.backing_off.values().filter_map(|f| match f {
                InFlight::Produce { partition, .. } => Some(partition.clone()),
                _ => None,
            }));
        }
        let mut k = 0;
        while k < self.accumulator.len() {
            let q = &self.accumulator[k];
            let in_flight = self.in_flight.values().filter(|f| matches!(f, InFlight::Produce { .. })).count();
            let lingering = self.now_ms < self.created_ms[&q.op] + self.config.linger_ms && !flushing;
            let may_go = !blocked.contains(&q.partition)
                && (!tv1_txn || self.partitions_in_txn.contains(&q.partition))
                && !lingering
                && (in_flight as u32) < self.config.max_in_flight_requests_per_connection;
            if may_go {
                let q = self.accumulator.remove(k);
                self.send_batch(q.op, q.partition, q.values, effects);
            } else {
                blocked.insert(q.partition.clone());
                k += 1;
            }
        }
    }

    /// Resends each request whose backoff is over; a retried batch only once no earlier batch of its
    /// partition is unfinished, so retries reach the leader in sequence order (`RecordAccumulator`'s
    /// drain stops while the first in-flight sequence is another batch's, SenderTest#testCorrectHandlingOfOutOfOrderResponses).
    fn send_due_retries(&mut self, effects: &mut Effects) {
        self.due_retries.retain(|c| self.backing_off.contains_key(c));
        let ordered = !self.config.mutations.has(crate::mutation::Mutation::RetriesOvertake);
        while let Some(&corr) =
            self.due_retries.iter().find(|&&c| !ordered || !self.waits_for_earlier(&self.backing_off[&c]))
        {
            self.due_retries.remove(&corr);
            let in_flight = self.backing_off.remove(&corr).expect("due retries are backing off");
            self.resend(in_flight, effects);
        }
    }

    /// Whether `retry` is a batch with an unfinished earlier batch of the same partition and epoch.
    fn waits_for_earlier(&self, retry: &InFlight) -> bool {
        let InFlight::Produce { partition, batch: ProduceBatch { producer: Some(mine), .. }, .. } = retry else {
            return false;
        };
        self.in_flight.values().chain(self.backing_off.values()).any(|f| match f {
            InFlight::Produce { partition: other, batch: ProduceBatch { producer: Some(p), .. }, .. } => {
                other == partition
                    && (p.producer_id, p.epoch) == (mine.producer_id, mine.epoch)
                    && p.base_sequence < mine.base_sequence
            }
            _ => false,
        })
    }

    /// `RecordAccumulator.abortUndrainedBatches`: batches never sent fail with `error`; sent ones are left
    /// to complete (an abort or an abortable error).
    fn abort_undrained_batches(&mut self, error: KafkaError) {
        for q in std::mem::take(&mut self.accumulator) {
            self.created_ms.remove(&q.op);
            self.completions.push(Completion { op: q.op, result: Err(error) });
        }
    }

    fn send_batch(&mut self, op: OpId, partition: TopicPartition, values: Vec<String>, effects: &mut Effects) {
        let producer = self.producer_id_and_epoch.map(|pie| {
            let seq = self.next_sequence.entry(partition.clone()).or_insert(0);
            let base_sequence = *seq;
            *seq = increment_sequence(base_sequence, values.len() as i64);
            BatchProducer { producer_id: pie.producer_id, epoch: pie.epoch, base_sequence }
        });
        let batch = ProduceBatch {
            producer,
            is_transactional: matches!(self.kind, ProducerKind::Transactional { .. }),
            values,
        };
        let message = Message::ProduceRequest {
            transactional_id: self.transactional_id().map(str::to_string),
            partition: partition.clone(),
            batch: batch.clone(),
            transaction_version: self.transaction_version(),
        };
        self.request(self.leader_for(&partition), message, InFlight::Produce { op, partition, batch }, effects);
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

    /// The commit or abort under way, if it is `result`'s (its EndTxn, or TV1's InitProducerId after it).
    fn ending(&self, result: TransactionResult) -> Option<OpId> {
        if let Some((op, r)) = self.pending_end {
            return (r == result).then_some(op);
        }
        self.in_flight.values().chain(self.backing_off.values()).find_map(|f| match f {
            InFlight::EndTxn { op, result: r } if *r == result => Some(*op),
            InFlight::InitProducerId { op, after_abort: true } if result == TransactionResult::Abort => Some(*op),
            _ => None,
        })
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

    fn begin_end(&mut self, result: TransactionResult) -> (OpId, Effects) {
        let op = self.new_op();
        assert!(self.pending_end.is_none(), "{}: one EndTxn at a time", self.id);
        self.pending_end = Some((op, result));
        let mut effects = Effects::default();
        // A commit flushes: lingering batches go now.
        self.drain(&mut effects);
        self.maybe_send_end_txn(&mut effects);
        (op, effects)
    }

    /// EndTxn goes out once every send of the transaction has its answer (`flush` before commit).
    fn maybe_send_end_txn(&mut self, effects: &mut Effects) {
        let busy =
            self.in_flight.values().chain(self.backing_off.values()).any(|f| !matches!(f, InFlight::EndTxn { .. }))
                || !self.accumulator.is_empty();
        if busy {
            return;
        }
        let Some((op, result)) = self.pending_end.take() else {
            return;
        };
        if self.state == TxnManagerState::FatalError {
            // A fatal error (fenced) while flushing: the pending commit or abort fails with it.
            let error = self.last_error.expect("fatal state records its error");
            self.completions.push(Completion { op, result: Err(error) });
            return;
        }
        if result == TransactionResult::Commit && self.state == TxnManagerState::AbortableError {
            // A send failed while committing: the commit fails with that error and the app must abort.
            self.completions.push(Completion { op, result: Err(self.last_error.expect("abortable error recorded")) });
            return;
        }
        if !self.transaction_started {
            // No partition joined: nothing to end at the coordinator.
            self.finish_transaction(op, result);
            return;
        }
        let message = Message::EndTxnRequest {
            transactional_id: self.transactional_id().expect("transactional").to_string(),
            producer: self.producer_id_and_epoch.expect("initialized"),
            result,
            transaction_version: self.transaction_version(),
        };
        self.request(self.coordinator.clone(), message, InFlight::EndTxn { op, result }, effects);
    }

    fn finish_transaction(&mut self, op: OpId, result: TransactionResult) {
        self.transition(TxnManagerState::Ready);
        self.partitions_in_txn.clear();
        self.transaction_started = false;
        let output = match result {
            TransactionResult::Commit => OpOutput::Committed,
            TransactionResult::Abort => OpOutput::Aborted,
        };
        self.completions.push(Completion { op, result: Ok(output) });
    }

    fn set_producer_id_and_epoch(&mut self, pie: ProducerIdAndEpoch) {
        if self.producer_id_and_epoch != Some(pie) {
            // A new epoch starts every partition's sequence at 0 (`ProducerAppendInfo.checkSequence`).
            self.next_sequence.clear();
            self.last_acked_sequence.clear();
        }
        self.producer_id_and_epoch = Some(pie);
    }

    pub fn on_timer(&mut self, now_ms: TimeMs, timer: Timer) -> Effects {
        self.now_ms = now_ms;
        let mut effects = Effects::default();
        match timer {
            Timer::RetryBackoff { correlation_id } => {
                if self.backing_off.contains_key(&correlation_id) {
                    self.due_retries.insert(correlation_id);
                }
            }
            Timer::RequestTimeout { correlation_id } => {
                // `NetworkClient` closes the connection of a timed-out request: it fails unanswered and is
                // retried after `retry.backoff.ms`, as for any disconnect.
                if let Some(in_flight) = self.in_flight.remove(&correlation_id) {
                    if let InFlight::Metadata { broker, .. } | InFlight::FindTxnCoordinator { broker } = &in_flight {
                        self.unreachable.insert(*broker);
                    }
                    let coordinator_lost = Self::goes_to_coordinator(&in_flight);
                    self.back_off(now_ms, in_flight, KafkaError::RequestTimedOut, &mut effects);
                    if coordinator_lost {
                        self.lookup_coordinator(&mut effects);
                    }
                }
            }
            Timer::DeliveryTimeout { op } => self.expire_batch(op),
            Timer::Linger { .. } => {}
            Timer::AbortTimedOutTransactions | Timer::ResendTxnMarkers { .. } | Timer::LoadTransactionLog { .. } => {
                unreachable!("producers set only client timers")
            }
        }
        self.after_event(&mut effects);
        effects
    }

    /// What the sender loop does after any input: drain, bump an idempotent epoch, send a waiting EndTxn.
    fn after_event(&mut self, effects: &mut Effects) {
        self.send_due_retries(effects);
        self.drain(effects);
        self.maybe_bump_idempotent_epoch();
        self.drain(effects);
        self.maybe_send_end_txn(effects);
    }

    /// `delivery.timeout.ms` since the batch's creation has passed (`Sender.getExpiredInflightBatches`,
    /// `RecordAccumulator.expiredBatches`): it fails wherever it is, though a copy may still be in the
    /// network; a batch that was sent leaves its sequence unknown.
    fn expire_batch(&mut self, op: OpId) {
        if !self.created_ms.contains_key(&op) {
            return; // Completed before its delivery timeout.
        }
        let was_sent = |f: &InFlight| matches!(f, InFlight::Produce { op: o, .. } if *o == op);
        let sent_corrs: Vec<u64> = self.in_flight.iter().filter(|(_, f)| was_sent(f)).map(|(c, _)| *c).collect();
        let backing: Vec<u64> = self.backing_off.iter().filter(|(_, f)| was_sent(f)).map(|(c, _)| *c).collect();
        let sent = !sent_corrs.is_empty() || !backing.is_empty();
        if sent && self.config.mutations.has(crate::mutation::Mutation::InFlightBatchesNotExpired) {
            // The bug: Kafka 2.0's Sender expired only batches still in the accumulator.
            return;
        }
        for c in sent_corrs {
            self.in_flight.remove(&c);
        }
        for c in backing {
            self.backing_off.remove(&c);
        }
        self.accumulator.retain(|q| q.op != op);
        if sent {
            self.sequence_unknown();
        }
        if self.transactional_id().is_some() {
            self.fail_abortable(KafkaError::RequestTimedOut);
        }
        self.complete_batch(op, Err(KafkaError::RequestTimedOut));
    }

    /// A request failed with the retriable `cause`: resent after `retry.backoff.ms`, but a batch that has
    /// used up `retries` fails with it (`Sender.canRetry`: `batch.attempts() < retries`).
    fn back_off(&mut self, now_ms: TimeMs, in_flight: InFlight, cause: KafkaError, effects: &mut Effects) {
        if let InFlight::Produce { op, .. } = &in_flight {
            let op = *op;
            let attempts = self.attempts.entry(op).or_default();
            if *attempts >= self.config.retries && !self.config.mutations.has(crate::mutation::Mutation::RetriesIgnored)
            {
                self.fail_batch(op, cause);
                return;
            }
            *attempts += 1;
        }
        self.back_off_for(now_ms, self.config.retry_backoff_ms, in_flight, effects);
    }

    fn back_off_for(&mut self, now_ms: TimeMs, backoff_ms: TimeMs, in_flight: InFlight, effects: &mut Effects) {
        self.next_correlation_id += 1;
        let corr = self.next_correlation_id;
        self.backing_off.insert(corr, in_flight);
        effects.timers.push((now_ms + backoff_ms, Timer::RetryBackoff { correlation_id: corr }));
    }

    pub fn on_message(&mut self, now_ms: TimeMs, env: Envelope) -> Effects {
        self.now_ms = now_ms;
        if network_client::is_refused_request(&env) {
            // Its own request back: the connection it went on failed. One that is no longer in flight
            // went on a connection already failed (or answered since), and fails nothing new.
            if !self.in_flight.contains_key(&env.correlation_id) {
                return Effects::default();
            }
            return self.on_disconnect(now_ms, &env.from);
        }
        let mut effects = Effects::default();
        if let NodeId::Broker(id) = env.from {
            self.unreachable.remove(&id);
        }
        let Some(in_flight) = self.in_flight.remove(&env.correlation_id) else {
            return effects; // A duplicate or late response: the request was already answered.
        };
        let moved = match &env.message {
            Message::InitProducerIdResponse { result: Err(e) }
            | Message::AddPartitionsToTxnResponse { result: Err(e) }
            | Message::AddOffsetsToTxnResponse { result: Err(e) } => Some(*e),
            Message::EndTxnResponse { result: Err(e) } => Some(*e),
            _ => None,
        };
        if let Some(e @ (KafkaError::NotCoordinator | KafkaError::CoordinatorNotAvailable)) = moved {
            if self.bootstrap.len() > 1 && self.transactional_id().is_some() {
                // Each handler's NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE: look the coordinator up, re-enqueue.
                self.lookup_coordinator(&mut effects);
                self.back_off(now_ms, in_flight, e, &mut effects);
                self.after_event(&mut effects);
                return effects;
            }
        }
        match (in_flight, env.message) {
            (InFlight::Metadata { .. }, Message::Metadata(MetadataMessage::MetadataResponse { leaders, .. })) => {
                for (tp, leader, _) in leaders.into_iter().filter(|(_, l, _)| *l != NO_LEADER) {
                    self.leaders.insert(tp, NodeId::Broker(leader));
                }
            }
            (InFlight::InitProducerId { op, after_abort }, Message::InitProducerIdResponse { result }) => {
                match result {
                    Ok(pie) => {
                        self.set_producer_id_and_epoch(pie);
                        self.epoch_bump_required = false;
                        self.transition(TxnManagerState::Ready);
                        let output = if after_abort { OpOutput::Aborted } else { OpOutput::Initialized(pie) };
                        self.completions.push(Completion { op, result: Ok(output) });
                    }
                    Err(e) if e.is_retriable() => {
                        self.back_off(now_ms, InFlight::InitProducerId { op, after_abort }, e, &mut effects)
                    }
                    Err(e) => {
                        self.fail_fatal(e);
                        self.completions.push(Completion { op, result: Err(e) });
                    }
                }
            }
            (InFlight::AddPartitions { partitions }, Message::AddPartitionsToTxnResponse { result }) => match result {
                Ok(()) => {
                    self.partitions_in_txn.extend(partitions.iter().cloned());
                    self.transaction_started = true;
                }
                // `AddPartitionsHandler`: CONCURRENT_TRANSACTIONS retries sooner than `retry.backoff.ms`
                // (`ADD_PARTITIONS_RETRY_BACKOFF_MS`), the previous transaction's markers being nearly done.
                Err(KafkaError::ConcurrentTransactions) => self.back_off_for(
                    now_ms,
                    ADD_PARTITIONS_RETRY_BACKOFF_MS.min(self.config.retry_backoff_ms),
                    InFlight::AddPartitions { partitions },
                    &mut effects,
                ),
                Err(e) if e.is_retriable() => {
                    self.back_off(now_ms, InFlight::AddPartitions { partitions }, e, &mut effects)
                }
                Err(e) => {
                    if e == KafkaError::ProducerFenced {
                        // Batches never drained fail with the fatal error too.
                        self.fail_fatal(e);
                        self.abort_undrained_batches(e);
                    } else {
                        self.fail_abortable(e);
                    }
                }
            },
            (InFlight::Produce { op, partition, batch }, Message::ProduceResponse { result, .. }) => match result {
                Ok(ack) => {
                    if let Some(p) = batch.producer {
                        let last = increment_sequence(p.base_sequence, batch.values.len() as i64 - 1);
                        let acked = self.last_acked_sequence.entry(partition.clone()).or_insert(last);
                        *acked = (*acked).max(last);
                    }
                    self.complete_batch(op, Ok(OpOutput::Sent { partition, ack }))
                }
                // `Sender.canRetry`: a retriable error resends the same batch after the backoff, until its
                // delivery timeout. The leader's KIP-890 verification answers CONCURRENT_TRANSACTIONS while the
                // previous transaction's markers are on their way (KAFKA-18662). OUT_OF_ORDER_SEQUENCE for a
                // batch that is not the next one is an earlier batch's failure showing: retried
                // (`TransactionManager.canRetry`).
                Err(e)
                    if e.is_retriable()
                        || (e == KafkaError::OutOfOrderSequence
                            && !self.config.mutations.has(crate::mutation::Mutation::OutOfOrderNeverRetried)
                            && batch.producer.is_some_and(|p| !self.is_next_sequence(&partition, p.base_sequence))) =>
                {
                    // `Sender.completeBatch`: a stale leader's answer asks for fresh metadata before the retry.
                    if e == KafkaError::NotLeaderOrFollower {
                        self.request_metadata(&partition, &mut effects);
                    }
                    self.back_off(now_ms, InFlight::Produce { op, partition, batch }, e, &mut effects)
                }
                Err(e) => self.fail_batch(op, e),
            },
            (InFlight::EndTxn { op, result: txn_result }, Message::EndTxnResponse { result }) => match result {
                Ok(bumped) => {
                    if let Some(pie) = bumped {
                        self.set_producer_id_and_epoch(pie);
                    }
                    // TV2's answer carries the bumped epoch already: a TV2 client never sends InitProducerId
                    // after an abort (`needToTriggerEpochBumpFromClient` is TV1 only).
                    let client_bump = !self.transaction_version().supports_epoch_bump()
                        || self.config.mutations.has(crate::mutation::Mutation::Tv2InitAfterAbort);
                    if txn_result == TransactionResult::Abort && self.epoch_bump_required && client_bump {
                        // KIP-360: a batch of the aborted transaction timed out or broke its sequence; a new
                        // epoch restarts every sequence at 0 before the next transaction.
                        self.transition(TxnManagerState::Initializing);
                        self.partitions_in_txn.clear();
                        self.transaction_started = false;
                        self.send_init(op, true, &mut effects);
                    } else {
                        self.epoch_bump_required &= bumped.is_none();
                        self.finish_transaction(op, txn_result);
                    }
                }
                Err(e) if e.is_retriable() => {
                    self.back_off(now_ms, InFlight::EndTxn { op, result: txn_result }, e, &mut effects)
                }
                Err(e) => {
                    self.fail_fatal(e);
                    self.completions.push(Completion { op, result: Err(e) });
                }
            },
            (InFlight::AddOffsets(call), Message::AddOffsetsToTxnResponse { result }) => match result {
                Ok(()) => {
                    self.transaction_started = true;
                    let step = self.offsets_commit_step(call);
                    self.resend(step, &mut effects);
                }
                Err(e) if e.is_retriable() || e == KafkaError::CoordinatorNotAvailable => {
                    self.back_off(now_ms, InFlight::AddOffsets(call), e, &mut effects)
                }
                Err(e @ (KafkaError::UnknownProducerId | KafkaError::InvalidProducerIdMapping)) => {
                    self.fail_offsets(call.op, e, false)
                }
                Err(KafkaError::InvalidProducerEpoch | KafkaError::ProducerFenced) => {
                    self.fail_offsets(call.op, KafkaError::ProducerFenced, true)
                }
                Err(e) => self.fail_offsets(call.op, e, true),
            },
            (
                InFlight::FindGroupCoordinator(call),
                Message::Metadata(MetadataMessage::FindCoordinatorResponse { coordinators }),
            ) => {
                let found = coordinators.into_iter().find(|(k, _)| *k == call.group.group_id).map(|(_, r)| r);
                match found.unwrap_or(Err(KafkaError::CoordinatorNotAvailable)) {
                    Ok(id) => {
                        self.group_coordinators.insert(call.group.group_id.clone(), NodeId::Broker(id));
                        self.resend(InFlight::TxnOffsetCommit(call), &mut effects);
                    }
                    Err(e) if e.is_retriable() || e == KafkaError::CoordinatorNotAvailable => {
                        self.back_off(now_ms, InFlight::FindGroupCoordinator(call), e, &mut effects)
                    }
                    Err(e) => self.fail_offsets(call.op, e, true),
                }
            }
            (
                InFlight::FindTxnCoordinator { broker },
                Message::Metadata(MetadataMessage::FindCoordinatorResponse { coordinators }),
            ) => match coordinators
                .into_iter()
                .next()
                .map(|(_, r)| r)
                .unwrap_or(Err(KafkaError::CoordinatorNotAvailable))
            {
                Ok(id) => self.coordinator = NodeId::Broker(id),
                Err(e) => self.back_off(now_ms, InFlight::FindTxnCoordinator { broker }, e, &mut effects),
            },
            (InFlight::TxnOffsetCommit(call), Message::Group(GroupMessage::TxnOffsetCommitResponse { results })) => {
                self.on_txn_offset_commit(now_ms, call, results, &mut effects)
            }
            (in_flight, message) => {
                unreachable!("{}: response {} does not answer {in_flight:?}", self.id, message.api_name())
            }
        }
        self.after_event(&mut effects);
        effects
    }
}
