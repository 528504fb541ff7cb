//! The group coordinator's runtime (`CoordinatorRuntime` with its `CoordinatorPartitionWriter`): which
//! `__consumer_offsets` partitions this broker's coordinator loaded, the group state machine's writes to
//! them through `ReplicaManager` with answers held until they are replicated, OffsetFetch read at the HW,
//! and TxnOffsetCommit (`GroupCoordinatorService.commitTransactionalOffsets`): verified with the
//! transaction coordinator (KIP-890; one on another broker by request, as `AddPartitionsToTxnManager` does),
//! then written as a batch of the producer's transaction.

use super::{GroupCoordinator, GroupWrite, OffsetsRecord};
use crate::config::EngineConfig;
use crate::error::KafkaError;
use crate::log::{LogAppendInfo, PartitionLog};
use crate::mutation::Mutation;
use crate::producer_state::AppendOrigin;
use crate::protocol::group::{CommittedOffset, GroupMessage};
use crate::protocol::{CorrelationIds, Message, NodeId};
use crate::record::{BatchProducer, CompressionType, ProduceBatch};
use crate::rename::{Names, Rename};
use crate::replica_manager::{DelayedResponse, ReplicaCtx, ReplicaManager};
use crate::topic::{offsets_partition_for, COORDINATOR_BROKER, GROUP_METADATA_TOPIC, OFFSETS_TOPIC_NUM_PARTITIONS};
use crate::types::{Offset, ProducerIdAndEpoch, TopicPartition, TransactionVersion};
use std::collections::BTreeMap;

/// A TxnOffsetCommit's header: who commits, for which group, as which member.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TxnOffsetCommit {
    pub transactional_id: String,
    pub group_id: String,
    pub producer: ProducerIdAndEpoch,
    pub generation_id: i32,
    pub member_id: String,
    pub transaction_version: TransactionVersion,
}

/// A TxnOffsetCommit waiting for the transaction coordinator on another broker to verify the group's
/// offsets partition is in the transaction (`GroupCoordinator` through `AddPartitionsToTxnManager`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PendingOffsetsVerification {
    pub client: NodeId,
    pub client_correlation_id: u64,
    pub asked: TxnOffsetCommit,
    pub offsets: Vec<(TopicPartition, CommittedOffset)>,
    /// The answers already known: partitions of unknown topics.
    pub unknown: Vec<(TopicPartition, Result<(), KafkaError>)>,
}

/// A verification's refusal as the group coordinator answers it: a stale epoch is the zombie's
/// INVALID_PRODUCER_EPOCH.
pub fn verification_error(e: KafkaError) -> KafkaError {
    match e {
        KafkaError::ProducerFenced => KafkaError::InvalidProducerEpoch,
        e => e,
    }
}

/// How a TxnOffsetCommit was verified with the transaction coordinator (KIP-890: the offsets partition must
/// be in the ongoing transaction).
pub enum TxnOffsetsVerification {
    /// Not at all, or by this broker's own coordinator at once: the outcome.
    Done(Result<(), KafkaError>),
    /// To be asked of the coordinator on another broker (`None`: none is known now), which under TV2 `adds`
    /// the partition to the transaction.
    Remote { coordinator: Option<NodeId>, adds: bool },
}

/// What the runtime takes from its broker for one operation.
pub struct GroupCtx<'a> {
    /// The time, the config, this broker and its outbox, as the partition writer's `ReplicaManager` takes them.
    pub replica: ReplicaCtx<'a>,
    /// Whether groups live in a replicated `__consumer_offsets` that the controller creates and their
    /// coordinators follow its leadership; else broker 0 keeps them in a topic of its own.
    pub replicated: bool,
    pub groups: &'a mut GroupCoordinator,
    pub replicas: &'a mut ReplicaManager,
    pub correlation_ids: &'a mut CorrelationIds,
}

impl GroupCtx<'_> {
    /// Runs a step of the partition writer's `ReplicaManager`.
    fn replicate<R>(&mut self, step: impl FnOnce(&mut ReplicaManager, &mut ReplicaCtx<'_>) -> R) -> R {
        step(&mut *self.replicas, &mut self.replica)
    }

    /// `DelayedProduce` for a group write: `response` goes to `to` once the HW passes `required`.
    fn await_hw(&mut self, required: (TopicPartition, Offset), to: (NodeId, u64), response: DelayedResponse) {
        let timeout = self.replica.config.request_timeout_ms;
        self.replicate(|rm, ctx| rm.await_hw(required, to, response, timeout, ctx));
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CoordinatorRuntime {
    /// In a cluster: the `__consumer_offsets` partitions whose groups this broker's coordinator loaded, at
    /// the leader epoch it loaded them (`GroupCoordinatorService.onElection`).
    loaded: BTreeMap<TopicPartition, i32>,
    /// TxnOffsetCommits waiting for a transaction coordinator elsewhere, by correlation id.
    pending_offset_verifications: BTreeMap<u64, PendingOffsetsVerification>,
}

impl Rename for CoordinatorRuntime {
    fn rename(&mut self, names: Names<'_>) {
        for pending in self.pending_offset_verifications.values_mut() {
            pending.client.rename(names);
            names(&mut pending.asked.transactional_id);
        }
    }
}

impl CoordinatorRuntime {
    /// Whether this broker's group coordinator owns `group_id` (`GroupCoordinatorService`): on a single
    /// broker every group is its own; in a cluster, a group whose `__consumer_offsets` partition it leads
    /// and has loaded.
    pub fn owns_group(&self, group_id: &str, replicated: bool, me: u32) -> bool {
        if replicated {
            self.loaded.contains_key(&offsets_partition_for(group_id))
        } else {
            me == COORDINATOR_BROKER
        }
    }

    /// A crash: the requests in flight are gone, and replicated groups are loaded again where this broker
    /// leads their partitions.
    pub fn restart(&mut self, replicated: bool, groups: &mut GroupCoordinator) {
        self.pending_offset_verifications.clear();
        if replicated {
            *groups = GroupCoordinator::default();
            self.loaded.clear();
        }
    }

    /// `GroupCoordinatorService.onElection` / `onResignation` for the `__consumer_offsets` partitions among
    /// `tps`: one this broker now leads at a new epoch is loaded, one it stopped leading unloaded.
    pub fn take_roles<'a>(&mut self, tps: impl IntoIterator<Item = &'a TopicPartition>, ctx: &mut GroupCtx<'_>) {
        for tp in tps.into_iter().filter(|tp| tp.topic == GROUP_METADATA_TOPIC) {
            let leading =
                ctx.replicas.partitions.get(tp).filter(|p| p.leader == ctx.replica.me).map(|p| p.leader_epoch);
            if leading.is_some() && self.loaded.get(tp) == leading.as_ref() {
                continue;
            }
            if self.loaded.remove(tp).is_some() {
                let me = ctx.replica.me();
                ctx.groups.unload(tp, &me, ctx.replica.effects);
            }
            if let Some(epoch) = leading {
                ctx.groups.load(tp, &ctx.replicas.logs[tp], ctx.replica.now_ms, &ctx.replica.config.mutations);
                self.loaded.insert(tp.clone(), epoch);
            }
        }
    }

    /// The group coordinator's requests, then what they write.
    pub fn handle((client, corr): (&NodeId, u64), request: GroupMessage, ctx: &mut GroupCtx<'_>) {
        let me = ctx.replica.me();
        ctx.groups.handle(
            ctx.replica.now_ms,
            ctx.replica.config,
            &me,
            (client.clone(), corr),
            request,
            ctx.replica.effects,
        );
        Self::write(ctx);
    }

    /// Ends the group join phases and member sessions that are due, then writes what they changed.
    pub fn tick(ctx: &mut GroupCtx<'_>) {
        let me = ctx.replica.me();
        ctx.groups.tick(ctx.replica.now_ms, &me, ctx.replica.effects);
        Self::write(ctx);
    }

    /// The group's `__consumer_offsets` partition. Unreplicated, broker 0 creates the topic the first time
    /// a group needs it; replicated, the controller creates it on the first FindCoordinator for a group
    /// (`KafkaApis.getCoordinator`).
    pub fn offsets_partition(group_id: &str, replicated: bool, replicas: &mut ReplicaManager) -> TopicPartition {
        let logs = &mut replicas.logs;
        if !replicated && !logs.keys().any(|tp| tp.topic == GROUP_METADATA_TOPIC) {
            for p in 0..OFFSETS_TOPIC_NUM_PARTITIONS {
                logs.insert(TopicPartition::new(GROUP_METADATA_TOPIC, p), PartitionLog::new());
            }
        }
        offsets_partition_for(group_id)
    }

    /// The partition writer: appends what the group coordinator wants written (`GroupWrite`) to each
    /// group's `__consumer_offsets` partition. An offset commit's answer, already in `effects`, waits until
    /// its records are replicated (acks=all, `DelayedProduce`) or fails with the write's error.
    fn write(ctx: &mut GroupCtx<'_>) {
        let writes = ctx.groups.take_writes();
        if ctx.replica.config.mutations.has(Mutation::GroupsKeptInMemory) {
            // The bug: nothing is written, every answer goes at once.
            for w in writes {
                ctx.groups.replay_offset_commits(&w.records, None);
                if let Some(generation) = w.stored {
                    Self::group_stored(w.group_id, generation, Ok(()), ctx);
                }
            }
            return;
        }
        for write in writes {
            Self::write_one(write, ctx);
        }
    }

    /// One `GroupWrite`: its records appended and replayed, a SyncGroup's outcome and a commit's answer
    /// held until they are replicated.
    fn write_one(GroupWrite { group_id, records, answer, stored }: GroupWrite, ctx: &mut GroupCtx<'_>) {
        let tp = Self::offsets_partition(&group_id, ctx.replicated, ctx.replicas);
        let values = records.iter().map(OffsetsRecord::to_value).collect();
        // `offsets.topic.compression.codec` defaults to none.
        let batch =
            ProduceBatch { producer: None, is_transactional: false, values, compression: CompressionType::None };
        let appended = ctx.replicate(|rm, rctx| rm.append_as_coordinator(&tp, &batch, rctx));
        if let Ok(info) = &appended {
            ctx.groups.replay_offset_commits(&records, Some(info.first_offset));
            ctx.groups.settle(&tp, ctx.replicas.logs[&tp].high_watermark());
        }
        if let Some(generation) = stored {
            Self::store_group(&tp, group_id.clone(), generation, appended, ctx);
        }
        let Some((client, corr)) = answer else { return };
        let at = ctx.replica.effects.sends.iter().position(|e| e.to == client && e.correlation_id == corr);
        let env = ctx.replica.effects.sends.remove(at.expect("the coordinator answered the commit"));
        let Message::Group(answer) = env.message else { unreachable!("a group answer") };
        match appended {
            Err(e) => ctx.replica.send(&client, corr, Message::Group(answer.failed_write(e))),
            Ok(info) if ctx.replicas.is_replicated(&tp) => {
                ctx.await_hw((tp, info.last_offset + 1), (client, corr), DelayedResponse::Group { answer });
            }
            Ok(_) => ctx.replica.send(&client, corr, Message::Group(answer)),
        }
    }

    /// A SyncGroup's metadata record: on a replicated partition its outcome comes back to this broker's
    /// group coordinator once the HW passes it (`GroupMessage::GroupStored`); else at once.
    fn store_group(
        tp: &TopicPartition,
        group_id: String,
        generation: i32,
        appended: Result<LogAppendInfo, KafkaError>,
        ctx: &mut GroupCtx<'_>,
    ) {
        match appended {
            Ok(info) if ctx.replicas.is_replicated(tp) => {
                let to = (ctx.replica.me(), ctx.correlation_ids.take());
                let response = DelayedResponse::GroupStored { group_id, generation };
                ctx.await_hw((tp.clone(), info.last_offset + 1), to, response);
            }
            appended => Self::group_stored(group_id, generation, appended.map(|_| ()), ctx),
        }
    }

    /// Hands a SyncGroup metadata record's outcome to this broker's group coordinator.
    fn group_stored(group_id: String, generation: i32, result: Result<(), KafkaError>, ctx: &mut GroupCtx<'_>) {
        let stored = GroupMessage::GroupStored { group_id, generation, result };
        let me = ctx.replica.me();
        ctx.groups.handle(ctx.replica.now_ms, ctx.replica.config, &me, (me.clone(), 0), stored, ctx.replica.effects);
    }

    /// OffsetFetch as the coordinator runtime serves it (`GroupCoordinatorService.fetchOffsets`): a read
    /// operation at the last committed offset, the HW of the group's partition; with `require_stable` a
    /// write operation, which reads every record and is answered once the HW reaches the log end it read.
    pub fn fetch_offsets(
        (group_id, partitions, require_stable): (String, Option<Vec<TopicPartition>>, bool),
        (client, corr): (NodeId, u64),
        ctx: &mut GroupCtx<'_>,
    ) {
        let tp = Self::offsets_partition(&group_id, ctx.replicated, ctx.replicas);
        let latest = ctx.replica.config.mutations.has(Mutation::OffsetFetchReadsLatest);
        // The partition's HW and log end. It is missing only under `any-broker-coordinates`, and then the
        // latest state is all there is.
        let ends = ctx.replicas.logs.get(&tp).filter(|_| !latest).map(|l| (l.high_watermark(), l.log_end_offset()));
        if let Some((hw, _)) = ends {
            ctx.groups.settle(&tp, hw);
        }
        let at = ends.filter(|_| !require_stable).map(|(hw, _)| hw);
        let offsets = ctx.groups.fetch_offsets(&group_id, partitions, require_stable, at);
        let answer = GroupMessage::OffsetFetchResponse { offsets: Ok(offsets) };
        let waits_for = ends.filter(|(hw, log_end)| require_stable && hw < log_end).map(|(_, log_end)| log_end);
        match waits_for.filter(|_| ctx.replicas.is_replicated(&tp)) {
            Some(log_end) => ctx.await_hw((tp, log_end), (client, corr), DelayedResponse::Group { answer }),
            None => ctx.replica.send(&client, corr, Message::Group(answer)),
        }
    }

    /// How a TxnOffsetCommit is verified (`CoordinatorPartitionWriter.maybeStartTransactionVerification`):
    /// whether at all, whether the coordinator adds the partition (a TV2 add, v5+, may write
    /// `__transaction_state`, so it always goes to the coordinator as a request), and whether this broker's
    /// own coordinator, if it owns transactional ids `here`, can answer it at once.
    pub fn txn_offsets_verification(config: &EngineConfig, asked: &TxnOffsetCommit, here: bool) -> (bool, bool, bool) {
        let verify = config.partition_verification && !config.mutations.has(Mutation::NoTxnVerification);
        let adds = asked.transaction_version.supports_epoch_bump()
            && !config.mutations.has(Mutation::TxnOffsetCommitV5OnlyVerifies);
        let local = !adds && here;
        (verify, adds, local)
    }

    /// TxnOffsetCommit (`GroupCoordinatorService.commitTransactionalOffsets`) for the partitions of known
    /// topics, with the answers already known for the rest: verified, then written
    /// (`write_txn_offsets`) and answered; `verification` is `None` only where nothing is to be written.
    pub fn commit_transactional_offsets(
        &mut self,
        asked: TxnOffsetCommit,
        known: Vec<(TopicPartition, CommittedOffset)>,
        mut results: Vec<(TopicPartition, Result<(), KafkaError>)>,
        verification: Option<TxnOffsetsVerification>,
        to: (NodeId, u64),
        ctx: &mut GroupCtx<'_>,
    ) {
        if known.is_empty() {
            return Self::answer_txn_offsets(to, results, None, ctx);
        }
        let outcome = match verification {
            _ if asked.group_id.is_empty() => Err(KafkaError::InvalidGroupId),
            Some(TxnOffsetsVerification::Remote { coordinator: Some(coordinator), adds }) => {
                // The transaction coordinator is on another broker: ask it, and answer when it has.
                let (client, client_correlation_id) = to;
                let (offsets, unknown) = (known, results);
                let pending = PendingOffsetsVerification { client, client_correlation_id, asked, offsets, unknown };
                return self.verify_remotely(&coordinator, adds, pending, ctx);
            }
            Some(TxnOffsetsVerification::Remote { coordinator: None, .. }) => Err(KafkaError::CoordinatorNotAvailable),
            Some(TxnOffsetsVerification::Done(verified)) => {
                verified.and_then(|()| Self::write_txn_offsets(&asked, &known, ctx))
            }
            None => unreachable!("a commit with a group and partitions is verified"),
        };
        let result = outcome.as_ref().map(|_| ()).map_err(|e| *e);
        results.extend(known.into_iter().map(|(tp, _)| (tp, result)));
        Self::answer_txn_offsets(to, results, outcome.ok(), ctx);
    }

    /// Asks the transaction coordinator on another broker to verify (or, under TV2, `adds`) the group's
    /// offsets partition in the producer's transaction; the commit waits for its answer.
    fn verify_remotely(
        &mut self,
        coordinator: &NodeId,
        adds: bool,
        pending: PendingOffsetsVerification,
        ctx: &mut GroupCtx<'_>,
    ) {
        let partitions = vec![Self::offsets_partition(&pending.asked.group_id, ctx.replicated, ctx.replicas)];
        let request = Message::AddPartitionsToTxnRequest {
            transactional_id: pending.asked.transactional_id.clone(),
            producer: pending.asked.producer,
            partitions,
            verify_only: !adds,
            transaction_version: if adds { TransactionVersion::V2 } else { TransactionVersion::V1 },
        };
        let id = ctx.correlation_ids.take();
        ctx.replica.send(coordinator, id, request);
        self.pending_offset_verifications.insert(id, pending);
    }

    /// Whether `corr` is a TxnOffsetCommit's verification this runtime waits for.
    pub fn awaits_verification(&self, corr: u64) -> bool {
        self.pending_offset_verifications.contains_key(&corr)
    }

    /// A TxnOffsetCommit's verification answered: the offsets are written, or fail with its error.
    pub fn complete_verification(&mut self, corr: u64, result: Result<(), KafkaError>, ctx: &mut GroupCtx<'_>) {
        let pending = self.pending_offset_verifications.remove(&corr).expect("checked by the caller");
        let written = result
            .map_err(verification_error)
            .and_then(|()| Self::write_txn_offsets(&pending.asked, &pending.offsets, ctx));
        let mut results = pending.unknown;
        let result = written.as_ref().map(|_| ()).map_err(|e| *e);
        results.extend(pending.offsets.into_iter().map(|(tp, _)| (tp, result)));
        let to = (pending.client, pending.client_correlation_id);
        Self::answer_txn_offsets(to, results, written.ok(), ctx);
    }

    /// TxnOffsetCommit's answer; with the offsets `written` to a replicated partition (the next offset
    /// after their batch), once the HW passes them, as the coordinator runtime answers a committed write.
    fn answer_txn_offsets(
        (client, corr): (NodeId, u64),
        results: Vec<(TopicPartition, Result<(), KafkaError>)>,
        written: Option<(TopicPartition, Offset)>,
        ctx: &mut GroupCtx<'_>,
    ) {
        let answer = GroupMessage::TxnOffsetCommitResponse { results };
        match written {
            Some(required) if ctx.replicas.is_replicated(&required.0) => {
                ctx.await_hw(required, (client, corr), DelayedResponse::Group { answer });
            }
            _ => ctx.replica.send(&client, corr, Message::Group(answer)),
        }
    }

    /// Once verified: checked against the group (KIP-447), written to the group's `__consumer_offsets`
    /// partition as a batch of the producer's transaction (origin coordinator: epoch checked, no client
    /// sequence) and staged until its marker. Returns the partition and the offset after the batch.
    fn write_txn_offsets(
        asked: &TxnOffsetCommit,
        offsets: &[(TopicPartition, CommittedOffset)],
        ctx: &mut GroupCtx<'_>,
    ) -> Result<(TopicPartition, Offset), KafkaError> {
        let offsets_partition = Self::offsets_partition(&asked.group_id, ctx.replicated, ctx.replicas);
        let mutations = &ctx.replica.config.mutations;
        ctx.groups.validate_txn_offset_commit(&asked.group_id, asked.generation_id, &asked.member_id, mutations)?;
        let batch = ProduceBatch {
            producer: Some(BatchProducer {
                producer_id: asked.producer.producer_id,
                epoch: asked.producer.epoch,
                // Kafka writes 0 here; no client sequence is meant, and -1 keeps it out of the sequence checks.
                base_sequence: -1,
            }),
            is_transactional: true,
            values: offsets.iter().map(|(tp, o)| OffsetsRecord::offset(&asked.group_id, tp, o).to_value()).collect(),
            compression: CompressionType::None,
        };
        let (now_ms, config) = (ctx.replica.now_ms, ctx.replica.config);
        let info = ctx.replicate(|rm, rctx| {
            rm.append_to_log(&offsets_partition, rctx, |log| {
                log.append_data(&batch, AppendOrigin::Coordinator, now_ms, &config.mutations)
            })
        })?;
        let pid = asked.producer.producer_id;
        ctx.groups.stage_txn_offsets(&asked.group_id, pid, info.first_offset, offsets, &config.mutations);
        Ok((offsets_partition, info.last_offset + 1))
    }
}
