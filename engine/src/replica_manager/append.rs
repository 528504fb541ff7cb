//! `ReplicaManager.appendRecords`: every leader append, written once (`Partition.appendRecordsToLeader`'s
//! checks, the append, the HW it may move), and the produce path with its KIP-890 verification, whose
//! requests to the coordinator go through `AddPartitionsToTxnManager`.

use super::{AckWait, DelayedResponse, ReplicaCtx, ReplicaManager};
use crate::config::EngineConfig;
use crate::error::KafkaError;
use crate::log::{LogAppendInfo, PartitionLog};
use crate::mutation::Mutation;
use crate::producer_state::AppendOrigin;
use crate::protocol::{CorrelationIds, Message, NodeId, ProduceAck, TxnMarkerEntry};
use crate::record::{EndTxnMarker, ProduceBatch};
use crate::topic::{GROUP_METADATA_TOPIC, TRANSACTION_STATE_TOPIC};
use crate::types::{ProducerId, ProducerIdAndEpoch, TimeMs, TopicPartition, TransactionVersion};

/// A transactional Produce waiting for the coordinator's KIP-890 answer.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct PendingVerification {
    pub(super) client: NodeId,
    client_correlation_id: u64,
    partition: TopicPartition,
    pub(super) batch: ProduceBatch,
    /// The `VerificationGuard`: the append is allowed only if this guard is still the partition's current one.
    guard: u64,
    /// When the request went to the coordinator.
    sent_ms: TimeMs,
}

/// A client's Produce of one batch to one partition.
pub struct ProduceRequest {
    pub client: NodeId,
    pub correlation_id: u64,
    pub transactional_id: Option<String>,
    pub partition: TopicPartition,
    pub batch: ProduceBatch,
    pub transaction_version: TransactionVersion,
}

/// What the broker's metadata cache says for a Produce: the error for a partition hosted nowhere here
/// (`getPartitionOrError`), and where the transactional id's coordinator is.
pub struct ProduceMetadata {
    pub not_hosted: KafkaError,
    pub coordinator: Option<NodeId>,
}

impl ReplicaManager {
    /// `Partition.appendRecordsToLeader`: this broker leads `tp` with enough replicas in sync
    /// (`check_append`), then the append and the HW it may move.
    pub fn append_to_leader<T>(
        &mut self,
        tp: &TopicPartition,
        ctx: &mut ReplicaCtx<'_>,
        append: impl FnOnce(&mut PartitionLog) -> Result<T, KafkaError>,
    ) -> Result<T, KafkaError> {
        self.check_append(tp, ctx)?;
        self.append_to_log(tp, ctx, append)
    }

    /// A coordinator's write to its own partition (origin COORDINATOR), as its leader.
    pub fn append_as_coordinator(
        &mut self,
        tp: &TopicPartition,
        batch: &ProduceBatch,
        ctx: &mut ReplicaCtx<'_>,
    ) -> Result<LogAppendInfo, KafkaError> {
        let (now_ms, config) = (ctx.now_ms, ctx.config);
        self.append_to_leader(tp, ctx, |log| {
            log.append_data(batch, AppendOrigin::Coordinator, now_ms, &config.mutations)
        })
    }

    /// The append without the leader's checks, as the group coordinator writes transactional offsets here.
    pub fn append_to_log<T>(
        &mut self,
        tp: &TopicPartition,
        ctx: &mut ReplicaCtx<'_>,
        append: impl FnOnce(&mut PartitionLog) -> Result<T, KafkaError>,
    ) -> Result<T, KafkaError> {
        let log = self.logs.get_mut(tp).ok_or(KafkaError::UnknownTopicOrPartition)?;
        let appended = append(log)?;
        self.after_leader_append(tp, ctx);
        Ok(appended)
    }

    /// With one replica in the ISR the HW follows the log end at once, unless the scenario moves it by hand.
    pub fn advance_high_watermark(&mut self, tp: &TopicPartition, config: &EngineConfig) {
        let log = self.logs.get_mut(tp).expect("known partition");
        if !config.manual_high_watermark {
            let leo = log.log_end_offset();
            log.update_high_watermark(leo, &config.mutations);
        }
        log.assert_offsets(&config.mutations);
    }

    /// `handleWriteTxnMarkersRequest`: one control batch per partition, origin COORDINATOR, appended with
    /// acks=all; the appends to replicated partitions come back as the HW each must reach.
    #[allow(clippy::type_complexity)]
    pub fn append_txn_markers(
        &mut self,
        markers: &[TxnMarkerEntry],
        ctx: &mut ReplicaCtx<'_>,
    ) -> (Vec<(ProducerId, TopicPartition, Result<u64, KafkaError>)>, Vec<AckWait>) {
        let mut results = Vec::new();
        let mut waits = Vec::new();
        for m in markers {
            for tp in &m.partitions {
                let marker = EndTxnMarker { result: m.result, coordinator_epoch: m.coordinator_epoch };
                let (now_ms, config) = (ctx.now_ms, ctx.config);
                let result = self.append_to_leader(tp, ctx, |log| {
                    let (pid, epoch, origin) = (m.producer_id, m.producer_epoch, AppendOrigin::Coordinator);
                    log.append_marker(pid, epoch, marker, origin, m.transaction_version, now_ms, &config.mutations)
                });
                if let (Ok(offset), true) = (result, self.is_replicated(tp)) {
                    waits.push(AckWait::new(tp.clone(), offset + 1, results.len()));
                }
                results.push((m.producer_id, tp.clone(), result));
            }
        }
        (results, waits)
    }

    /// Produce: transactional batches that would begin a transaction on the partition are first verified
    /// with the coordinator (KIP-890 part 1; under transaction version 2 the same call adds the partition).
    pub fn handle_produce(
        &mut self,
        request: ProduceRequest,
        metadata: ProduceMetadata,
        ids: &mut CorrelationIds,
        ctx: &mut ReplicaCtx<'_>,
    ) -> Option<(TopicPartition, Result<ProduceAck, KafkaError>)> {
        let ProduceRequest { client, correlation_id: corr, transactional_id, partition, batch, transaction_version } =
            request;
        let config = ctx.config;
        let mutations = &config.mutations;
        // `ReplicaManager.appendToLocalLog`: a client may not write the coordinators' logs (`Topic.isInternal`).
        let internal = [GROUP_METADATA_TOPIC, TRANSACTION_STATE_TOPIC].contains(&partition.topic.as_str());
        if internal && !mutations.has(Mutation::InternalTopicsWritable) {
            return Some((partition, Err(KafkaError::InvalidTopicException)));
        }
        let Some(log) = self.logs.get_mut(&partition) else {
            return Some((partition, Err(metadata.not_hosted)));
        };
        log.producer_state.remove_expired_verification_entries(ctx.now_ms, mutations);
        let needs_verification = batch.is_transactional
            && config.partition_verification
            && !mutations.has(Mutation::NoTxnVerification)
            && batch.producer.is_some_and(|p| !log.has_ongoing_transaction(p.producer_id, p.epoch));
        if !needs_verification {
            let result = self.append_client_batch(&partition, &batch, ctx);
            return self.acks_all(client, corr, partition, result, ctx);
        }
        let Some(tid) = transactional_id.filter(|_| batch.producer.is_some()) else {
            return Some((partition, Err(KafkaError::InvalidRequest)));
        };
        let sent_ms = ctx.now_ms;
        let pending = PendingVerification { client, client_correlation_id: corr, partition, batch, guard: 0, sent_ms };
        self.start_verification(tid, pending, transaction_version, metadata.coordinator, ids, ctx);
        None
    }

    /// `maybeStartTransactionVerification`: the batch waits, under the partition's verification guard, for
    /// the coordinator's answer to an AddPartitionsToTxn sent through `AddPartitionsToTxnManager`.
    fn start_verification(
        &mut self,
        tid: String,
        mut pending: PendingVerification,
        transaction_version: TransactionVersion,
        coordinator: Option<NodeId>,
        ids: &mut CorrelationIds,
        ctx: &mut ReplicaCtx<'_>,
    ) {
        let p = pending.batch.producer.expect("checked by handle_produce");
        let corr_to_coordinator = ids.take();
        let log = self.logs.get_mut(&pending.partition).expect("checked by handle_produce");
        // An existing entry's guard is reused, so pipelined batches share it (a marker clears the entry, so a
        // stale verification cannot admit a late batch: KAFKA-14884).
        pending.guard = log.producer_state.maybe_create_verification_state_entry(
            p.producer_id,
            p.base_sequence,
            p.epoch,
            corr_to_coordinator,
            transaction_version.supports_epoch_bump(),
            ctx.now_ms,
        );
        // `AddPartitionsToTxnManager`: a Produce v12+ (TV2) adds the partition; an older one only verifies.
        let request = Message::AddPartitionsToTxnRequest {
            transactional_id: tid,
            producer: ProducerIdAndEpoch { producer_id: p.producer_id, epoch: p.epoch },
            partitions: vec![pending.partition.clone()],
            verify_only: !transaction_version.supports_epoch_bump(),
            transaction_version,
        };
        self.verifications.insert(corr_to_coordinator, pending);
        match coordinator {
            Some(coordinator) => ctx.send(&coordinator, corr_to_coordinator, request),
            // `AddPartitionsToTxnManager`: no coordinator known, COORDINATOR_NOT_AVAILABLE.
            None => self.complete_verification(corr_to_coordinator, Err(KafkaError::CoordinatorNotAvailable), ctx),
        }
    }

    /// When the newest verification still waiting for the coordinator's answer was sent. One whose answer
    /// the network lost waits here for good (Kafka's `AddPartitionsToTxnManager` would time it out after
    /// `request.timeout.ms`; not modelled), so a driver that knows its network tells dead from in flight.
    pub fn newest_verification_ms(&self) -> Option<TimeMs> {
        self.verifications.values().map(|p| p.sent_ms).max()
    }

    /// A crash: the verifications in flight and the partitions' verification guards are gone.
    pub fn forget_verifications(&mut self) {
        self.verifications.clear();
        for log in self.logs.values_mut() {
            log.producer_state.verification_entries.clear();
        }
    }

    /// The coordinator's answer to a verification: the batch is appended if its guard still holds.
    pub fn complete_verification(&mut self, corr: u64, result: Result<(), KafkaError>, ctx: &mut ReplicaCtx<'_>) {
        let Some(pending) = self.verifications.remove(&corr) else {
            return;
        };
        let producer = pending.batch.producer.expect("verified batches are transactional");
        let pid = producer.producer_id;
        let log = self.logs.get_mut(&pending.partition).expect("verified partitions exist");
        log.producer_state.remove_expired_verification_entries(ctx.now_ms, &ctx.config.mutations);
        let current_guard = log.producer_state.verification_entries.get(&pid).map(|v| v.guard);
        let ongoing = log.has_ongoing_transaction(pid, producer.epoch);
        let result = match result {
            // Only a batch that would begin the transaction here needs its guard (`analyzeAndValidateProducerState`):
            // a pipelined batch verified alongside the first joins the transaction the first one began.
            // A marker since the verification cleared the guard: the transaction it verified is over.
            Ok(()) if !ongoing && current_guard != Some(pending.guard) => Err(KafkaError::InvalidTxnState),
            Ok(()) => self.append_client_batch(&pending.partition, &pending.batch, ctx),
            // The producer's epoch is stale at the coordinator: a zombie's batch.
            Err(KafkaError::ProducerFenced) => Err(KafkaError::InvalidProducerEpoch),
            // `ReplicaManager.appendRecords`' postVerificationCallback: a coordinator that moved or is loading
            // becomes an error every producer retries without a metadata refresh.
            Err(
                KafkaError::NotCoordinator
                | KafkaError::CoordinatorNotAvailable
                | KafkaError::CoordinatorLoadInProgress
                | KafkaError::NetworkException,
            ) => Err(KafkaError::NotEnoughReplicas),
            Err(e) => Err(e),
        };
        let (client, corr) = (pending.client, pending.client_correlation_id);
        if let Some((partition, result)) = self.acks_all(client.clone(), corr, pending.partition, result, ctx) {
            ctx.send(&client, corr, Message::ProduceResponse { partition, result });
        }
    }

    /// acks=all (every producer here: idempotence requires it): a write to a replicated partition is
    /// answered once the HW passes it (`DelayedProduce`); anything else is the answer now.
    fn acks_all(
        &mut self,
        client: NodeId,
        corr: u64,
        partition: TopicPartition,
        result: Result<ProduceAck, KafkaError>,
        ctx: &mut ReplicaCtx<'_>,
    ) -> Option<(TopicPartition, Result<ProduceAck, KafkaError>)> {
        match result {
            Ok(ack) if self.is_replicated(&partition) => {
                let (required, timeout) = ((partition.clone(), ack.last_offset + 1), ctx.config.request_timeout_ms);
                let response = DelayedResponse::Produce { partition, ack };
                self.await_hw(required, (client, corr), response, timeout, ctx);
                None
            }
            result => Some((partition, result)),
        }
    }

    fn append_client_batch(
        &mut self,
        partition: &TopicPartition,
        batch: &ProduceBatch,
        ctx: &mut ReplicaCtx<'_>,
    ) -> Result<ProduceAck, KafkaError> {
        let (now_ms, config) = (ctx.now_ms, ctx.config);
        let info = self.append_to_leader(partition, ctx, |log| {
            log.append_data(batch, AppendOrigin::Client, now_ms, &config.mutations)
        })?;
        Ok(ProduceAck { first_offset: info.first_offset, last_offset: info.last_offset, duplicate: info.duplicate })
    }
}
