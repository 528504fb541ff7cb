//! The producer client: Kafka's `KafkaProducer` + `TransactionManager` (KAFKA_SEMANTICS 1.4 client side).
//! Calls that Kafka's client would reject at once return `Err` immediately; the rest complete later as a
//! `Completion` once the cluster has answered.

use crate::config::EngineConfig;
use crate::error::KafkaError;
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

/// Identifies one asynchronous call on this producer.
pub type OpId = u64;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum OpOutput {
    Initialized(ProducerIdAndEpoch),
    Sent { partition: TopicPartition, ack: ProduceAck },
    Committed,
    Aborted,
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
}

/// A send waiting for its partition to join the transaction (TV1's AddPartitionsToTxn first).
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
    leader: NodeId,
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
    queued_sends: Vec<QueuedSend>,
    /// An EndTxn waiting for in-flight sends to finish (commit and abort flush first).
    pending_end: Option<(OpId, TransactionResult)>,
    in_flight: BTreeMap<u64, InFlight>,
    /// Requests waiting out `retry.backoff.ms`, by the correlation id of their retry timer.
    backing_off: BTreeMap<u64, InFlight>,
    next_correlation_id: u64,
    next_op: OpId,
    completions: Vec<Completion>,
    /// Sends of each produce op so far, for `delivery_attempts_max`.
    attempts: BTreeMap<OpId, u32>,
    /// The time of the latest input; requests' timeouts count from it.
    now_ms: TimeMs,
    /// A batch failed in a way that leaves its sequence unknown: the next abort bumps the epoch (KIP-360).
    epoch_bump_required: bool,
    /// The highest `transaction.version` this client speaks; the cluster's finalized feature caps it
    /// (`TransactionManager.isTransactionV2Enabled`).
    pub client_transaction_version: TransactionVersion,
}

impl Rename for InFlight {
    fn rename(&mut self, names: Names<'_>) {
        match self {
            InFlight::Produce { batch, .. } => batch.rename(names),
            InFlight::InitProducerId { .. } | InFlight::AddPartitions { .. } | InFlight::EndTxn { .. } => {}
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
        self.queued_sends.iter_mut().for_each(|q| q.values.rename(names));
        self.in_flight.rename(names);
        self.backing_off.rename(names);
    }
}

impl Producer {
    /// A producer whose coordinator and partition leader is `broker` (one broker for now).
    pub fn new(name: &str, kind: ProducerKind, broker: NodeId, config: EngineConfig) -> Self {
        let state = match kind {
            ProducerKind::Plain => TxnManagerState::Ready,
            _ => TxnManagerState::Uninitialized,
        };
        Producer {
            id: NodeId::Client(name.to_string()),
            kind,
            coordinator: broker.clone(),
            leader: broker,
            config,
            state,
            last_error: None,
            producer_id_and_epoch: None,
            next_sequence: BTreeMap::new(),
            partitions_in_txn: BTreeSet::new(),
            transaction_started: false,
            queued_sends: Vec::new(),
            pending_end: None,
            in_flight: BTreeMap::new(),
            backing_off: BTreeMap::new(),
            next_correlation_id: 0,
            next_op: 0,
            completions: Vec::new(),
            attempts: BTreeMap::new(),
            now_ms: 0,
            epoch_bump_required: false,
            client_transaction_version: TransactionVersion::V2,
        }
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
        let lost: Vec<u64> = self
            .in_flight
            .iter()
            .filter(|(_, f)| match f {
                InFlight::Produce { .. } => &self.leader == broker,
                _ => &self.coordinator == broker,
            })
            .map(|(corr, _)| *corr)
            .collect();
        for corr in lost {
            let in_flight = self.in_flight.remove(&corr).expect("listed above");
            self.back_off(now_ms, in_flight, &mut effects);
        }
        effects
    }

    pub fn is_idle(&self) -> bool {
        self.in_flight.is_empty()
            && self.backing_off.is_empty()
            && self.queued_sends.is_empty()
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
        if let InFlight::Produce { op, .. } = &in_flight {
            *self.attempts.entry(*op).or_insert(0) += 1;
        }
        self.in_flight.insert(corr, in_flight);
        effects.send(&self.id.clone(), &to, corr, message);
        let due = self.now_ms + self.config.request_timeout_ms;
        effects.timers.push((due, Timer::RequestTimeout { correlation_id: corr }));
    }

    /// Sends the request behind `in_flight` again (after a backoff or a timeout).
    fn resend(&mut self, in_flight: InFlight, effects: &mut Effects) {
        let transactional_id = || self.transactional_id().expect("transactional").to_string();
        let message = match &in_flight {
            InFlight::InitProducerId { op, after_abort } => {
                let (op, after_abort) = (*op, *after_abort);
                self.send_init(op, after_abort, effects);
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
        let to = match in_flight {
            InFlight::Produce { .. } => self.leader.clone(),
            _ => self.coordinator.clone(),
        };
        self.request(to, message, in_flight, effects);
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
            ProducerKind::Transactional { .. } => {
                if self.state != TxnManagerState::InTransaction {
                    return Err(KafkaError::InvalidTxnState);
                }
                let op = self.new_op();
                let tv2 = self.transaction_version().supports_epoch_bump();
                if tv2 || self.partitions_in_txn.contains(&partition) {
                    // Under TV2 the partition leader adds the partition itself (KIP-890 part 2).
                    self.transaction_started = true;
                    self.send_batch(op, partition, values, &mut effects);
                } else {
                    let adding = self.queued_sends.iter().any(|q| q.partition == partition);
                    self.queued_sends.push(QueuedSend { op, partition: partition.clone(), values });
                    if !adding {
                        let pie = self.producer_id_and_epoch.expect("in a transaction after init");
                        let message = Message::AddPartitionsToTxnRequest {
                            transactional_id: self.transactional_id().expect("transactional").to_string(),
                            producer: pie,
                            partitions: vec![partition.clone()],
                            verify_only: false,
                            transaction_version: self.transaction_version(),
                        };
                        let in_flight = InFlight::AddPartitions { partitions: vec![partition] };
                        self.request(self.coordinator.clone(), message, in_flight, &mut effects);
                    }
                }
                Ok((op, effects))
            }
            ProducerKind::Idempotent if self.state != TxnManagerState::Ready => Err(KafkaError::InvalidTxnState),
            ProducerKind::Idempotent | ProducerKind::Plain => {
                let op = self.new_op();
                self.send_batch(op, partition, values, &mut effects);
                Ok((op, effects))
            }
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
        self.request(self.leader.clone(), message, InFlight::Produce { op, partition, batch }, effects);
    }

    /// `commitTransaction()`.
    pub fn commit_transaction(&mut self, now_ms: TimeMs) -> Result<(OpId, Effects), KafkaError> {
        self.now_ms = now_ms;
        self.check_not_failed()?;
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
        if self.transactional_id().is_none()
            || !matches!(self.state, TxnManagerState::InTransaction | TxnManagerState::AbortableError)
        {
            return Err(KafkaError::InvalidTxnState);
        }
        self.transition(TxnManagerState::AbortingTransaction);
        Ok(self.begin_end(TransactionResult::Abort))
    }

    fn begin_end(&mut self, result: TransactionResult) -> (OpId, Effects) {
        let op = self.new_op();
        assert!(self.pending_end.is_none(), "{}: one EndTxn at a time", self.id);
        self.pending_end = Some((op, result));
        let mut effects = Effects::default();
        self.maybe_send_end_txn(&mut effects);
        (op, effects)
    }

    /// EndTxn goes out once every send of the transaction has its answer (`flush` before commit).
    fn maybe_send_end_txn(&mut self, effects: &mut Effects) {
        let busy =
            self.in_flight.values().chain(self.backing_off.values()).any(|f| !matches!(f, InFlight::EndTxn { .. }))
                || !self.queued_sends.is_empty();
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
            // A new epoch starts every partition's sequence at 0 (KAFKA_SEMANTICS 2.4, 32).
            self.next_sequence.clear();
        }
        self.producer_id_and_epoch = Some(pie);
    }

    pub fn on_timer(&mut self, now_ms: TimeMs, timer: Timer) -> Effects {
        self.now_ms = now_ms;
        let mut effects = Effects::default();
        match timer {
            Timer::RetryBackoff { correlation_id } => {
                if let Some(in_flight) = self.backing_off.remove(&correlation_id) {
                    self.resend(in_flight, &mut effects);
                }
            }
            Timer::RequestTimeout { correlation_id } => {
                let Some(in_flight) = self.in_flight.remove(&correlation_id) else {
                    return effects;
                };
                match in_flight {
                    InFlight::Produce { op, .. }
                        if self.attempts.get(&op).copied().unwrap_or(0) >= self.config.delivery_attempts_max =>
                    {
                        // `delivery.timeout.ms` passed: the batch fails, though a copy may still be in the network.
                        self.attempts.remove(&op);
                        // The batch may or may not be in the log: its sequence is now unknown.
                        self.epoch_bump_required = true;
                        if self.transactional_id().is_some() {
                            self.fail_abortable(KafkaError::RequestTimedOut);
                        }
                        self.completions.push(Completion { op, result: Err(KafkaError::RequestTimedOut) });
                    }
                    other => self.resend(other, &mut effects),
                }
                self.maybe_send_end_txn(&mut effects);
            }
            Timer::AbortTimedOutTransactions | Timer::ResendTxnMarkers { .. } => {
                unreachable!("producers set only client timers")
            }
        }
        effects
    }

    fn back_off(&mut self, now_ms: TimeMs, in_flight: InFlight, effects: &mut Effects) {
        self.next_correlation_id += 1;
        let corr = self.next_correlation_id;
        self.backing_off.insert(corr, in_flight);
        effects.timers.push((now_ms + self.config.retry_backoff_ms, Timer::RetryBackoff { correlation_id: corr }));
    }

    pub fn on_message(&mut self, now_ms: TimeMs, env: Envelope) -> Effects {
        self.now_ms = now_ms;
        let mut effects = Effects::default();
        let Some(in_flight) = self.in_flight.remove(&env.correlation_id) else {
            return effects; // A duplicate or late response: the request was already answered.
        };
        match (in_flight, env.message) {
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
                        self.back_off(now_ms, InFlight::InitProducerId { op, after_abort }, &mut effects)
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
                    let ready: Vec<QueuedSend> = std::mem::take(&mut self.queued_sends);
                    let (go, wait): (Vec<_>, Vec<_>) =
                        ready.into_iter().partition(|q| partitions.contains(&q.partition));
                    self.queued_sends = wait;
                    for q in go {
                        self.send_batch(q.op, q.partition, q.values, &mut effects);
                    }
                }
                Err(e) if e.is_retriable() => {
                    self.back_off(now_ms, InFlight::AddPartitions { partitions }, &mut effects)
                }
                Err(e) => {
                    if e == KafkaError::ProducerFenced {
                        self.fail_fatal(e);
                    } else {
                        self.fail_abortable(e);
                    }
                    let failed: Vec<QueuedSend> = std::mem::take(&mut self.queued_sends);
                    for q in failed {
                        self.completions.push(Completion { op: q.op, result: Err(e) });
                    }
                }
            },
            (InFlight::Produce { op, partition, batch }, Message::ProduceResponse { result, .. }) => match result {
                Ok(ack) => {
                    self.attempts.remove(&op);
                    self.completions.push(Completion { op, result: Ok(OpOutput::Sent { partition, ack }) })
                }
                // `Sender.canRetry`: a retriable error resends the same batch after the backoff. The leader's
                // KIP-890 verification answers CONCURRENT_TRANSACTIONS while the previous transaction's
                // markers are on their way (KAFKA-18662; older clients see NOT_ENOUGH_REPLICAS, also retried).
                Err(e)
                    if e.is_retriable()
                        && self.attempts.get(&op).copied().unwrap_or(0) < self.config.delivery_attempts_max =>
                {
                    self.back_off(now_ms, InFlight::Produce { op, partition, batch }, &mut effects)
                }
                Err(e) => {
                    self.attempts.remove(&op);
                    if e == KafkaError::OutOfOrderSequence {
                        self.epoch_bump_required = true;
                    }
                    if self.transactional_id().is_some() {
                        if e == KafkaError::ProducerFenced {
                            self.fail_fatal(e);
                        } else {
                            self.fail_abortable(e);
                        }
                    }
                    self.completions.push(Completion { op, result: Err(e) });
                }
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
                    self.back_off(now_ms, InFlight::EndTxn { op, result: txn_result }, &mut effects)
                }
                Err(e) => {
                    self.fail_fatal(e);
                    self.completions.push(Completion { op, result: Err(e) });
                }
            },
            (in_flight, message) => {
                unreachable!("{}: response {} does not answer {in_flight:?}", self.id, message.api_name())
            }
        }
        self.maybe_send_end_txn(&mut effects);
        effects
    }
}
