//! Kafka's `Sender`: the producer's request loop. It sends requests (draining the `RecordAccumulator`),
//! handles their answers and disconnects, retries after backoffs, expires batches on their timers, and
//! looks up partition leaders (Metadata) and the transaction coordinator (FindCoordinator).

use super::{
    Completion, InFlight, OpId, OpOutput, Producer, ProducerKind, TxnManagerState, ADD_PARTITIONS_RETRY_BACKOFF_MS,
};
use crate::error::KafkaError;
use crate::network_client;
use crate::protocol::group::GroupMessage;
use crate::protocol::metadata::{CoordinatorType, MetadataMessage};
use crate::protocol::NO_LEADER;
use crate::protocol::{Effects, Envelope, Message, NodeId, Timer};
use crate::record::{increment_sequence, BatchProducer, ProduceBatch};
use crate::types::{TimeMs, TopicPartition, TransactionResult, TransactionVersion};
use std::collections::BTreeSet;

impl Producer {
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

    pub(super) fn request(&mut self, to: NodeId, message: Message, in_flight: InFlight, effects: &mut Effects) {
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
    pub(super) fn resend(&mut self, in_flight: InFlight, effects: &mut Effects) {
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
            InFlight::TxnOffsetCommit(c) if self.config.mutations.has(crate::mutation::Mutation::OffsetsOutsideTxn) => {
                // The bug: the offsets go out as a plain OffsetCommit, the group's as soon as it is written.
                Message::Group(GroupMessage::OffsetCommitRequest {
                    group_id: c.group.group_id.clone(),
                    generation_id: c.group.generation_id,
                    member_id: c.group.member_id.clone(),
                    offsets: c.offsets.clone(),
                })
            }
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

    /// `Sender.sendProducerData` + `RecordAccumulator.drain`: sends every batch that may go, in order: its
    /// partition is in the transaction (TV1), its `linger.ms` is over (or a commit is flushing), no earlier
    /// batch of the partition waits, and fewer than `max.in.flight.requests.per.connection` are in flight.
    pub(super) fn drain(&mut self, effects: &mut Effects) {
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
    pub(super) fn abort_undrained_batches(&mut self, error: KafkaError) {
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
            compression: self.config.compression_type,
        };
        let message = Message::ProduceRequest {
            transactional_id: self.transactional_id().map(str::to_string),
            partition: partition.clone(),
            batch: batch.clone(),
            transaction_version: self.transaction_version(),
        };
        self.request(self.leader_for(&partition), message, InFlight::Produce { op, partition, batch }, effects);
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
    pub(super) fn back_off(&mut self, now_ms: TimeMs, in_flight: InFlight, cause: KafkaError, effects: &mut Effects) {
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
            (InFlight::TxnOffsetCommit(call), Message::Group(GroupMessage::TxnOffsetCommitResponse { results }))
            | (InFlight::TxnOffsetCommit(call), Message::Group(GroupMessage::OffsetCommitResponse { results })) => {
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
