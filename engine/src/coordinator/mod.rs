//! The transaction coordinator (`TransactionCoordinator`): InitProducerId, AddPartitionsToTxn, EndTxn,
//! decisions and timeouts. Its log's role, load and appends are `TransactionStateManager`'s, its markers
//! `TransactionMarkerChannelManager`'s, its record format `TransactionLog`'s: a file each here.

mod transaction_log;
mod transaction_marker_channel_manager;
mod transaction_metadata;
mod transaction_state_manager;

pub use transaction_log::TxnLogValue;
pub use transaction_marker_channel_manager::{PendingCompletion, MARKER_RETRY_MS};
pub use transaction_metadata::{bumped, is_epoch_exhausted, TransactionMetadata, TransactionState, TxnTransition};
pub use transaction_state_manager::{has_transaction_log, TransactionStateManager};

use crate::config::EngineConfig;
use crate::error::KafkaError;
use crate::mutation::Mutation;
use crate::protocol::Timer;
use crate::protocol::MAX_BROKERS;
use crate::protocol::{Effects, Message, NodeId};
use crate::rename::{Names, Rename};
use crate::types::{
    CoordinatorEpoch, Offset, ProducerEpoch, ProducerId, ProducerIdAndEpoch, TimeMs, TopicPartition, TransactionResult,
    TransactionVersion, NO_PRODUCER_EPOCH,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// `transaction.max.timeout.ms` (default 900000).
pub const TRANSACTION_MAX_TIMEOUT_MS: TimeMs = 900_000;
/// The first producer id handed out; ids then increase by one per InitProducerId that needs a new one.
pub const FIRST_PRODUCER_ID: ProducerId = 1000;
/// `transactional.id.expiration.ms` (default 604800000, 7 days): a transactional id whose metadata has not
/// changed for this long, with no transaction open, is removed (`TransactionStateManager.shouldExpire`).
pub const TRANSACTIONAL_ID_EXPIRATION_MS: TimeMs = 604_800_000;
/// `transaction.remove.expired.transaction.cleanup.interval.ms` (default 3600000): how often
/// `removeExpiredTransactionalIds` runs.
pub const TRANSACTION_REMOVE_EXPIRED_TRANSACTION_CLEANUP_INTERVAL_MS: TimeMs = 3_600_000;
/// KIP-730 hands each broker blocks of producer ids from the controller; here broker `b`'s ids start at
/// `FIRST_PRODUCER_ID + b * PRODUCER_ID_BLOCK_STRIDE` and its next block `MAX_BROKERS` strides further on,
/// so coordinators on different brokers never share one.
pub const PRODUCER_ID_BLOCK_STRIDE: ProducerId = 1_000_000;

/// `isEpochExhausted`, or under `EpochExhaustionIgnored` the rule that keeps no epoch back for fencing:
/// only Short.MAX_VALUE itself counts as exhausted, so the coordinator hands that epoch to a client.
fn epoch_exhausted(epoch: ProducerEpoch, config: &EngineConfig) -> bool {
    if config.mutations.has(Mutation::EpochExhaustionIgnored) {
        epoch == ProducerEpoch::MAX
    } else {
        is_epoch_exhausted(epoch)
    }
}

/// Why a transaction was decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum DecisionCause {
    /// EndTxn from the producer.
    Client,
    /// InitProducerId of a new instance fenced the open transaction.
    Fence,
    /// The coordinator's timeout scan.
    Timeout,
}

/// A durable decision (the PrepareCommit / PrepareAbort record of `__transaction_state`), kept as the
/// ground truth the invariants compare partition markers against.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TxnDecision {
    pub transactional_id: String,
    pub producer_id: ProducerId,
    /// The epoch the transaction's data was written with.
    pub data_epoch: ProducerEpoch,
    /// The epoch stamped on the markers (higher after a fence, a timeout, or under TV2).
    pub marker_epoch: ProducerEpoch,
    pub result: TransactionResult,
    /// The coordinator's partition set at decision time: every partition must get a marker.
    pub partitions: BTreeSet<TopicPartition>,
    pub cause: DecisionCause,
    pub coordinator_epoch: CoordinatorEpoch,
    /// CompleteCommit / CompleteAbort has been written.
    pub completed: bool,
    /// Where each partition's leader said it wrote this decision's marker (the first acknowledgement).
    pub markers: BTreeMap<TopicPartition, Offset>,
    /// A leader answered INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED, so the coordinator
    /// stopped sending these markers (`removeMarkersForTxn`): a marker another leader wrote first is
    /// acknowledged to no one. Volatile: a reload decides again from the Prepare* record.
    pub abandoned: bool,
}

/// Where an answer goes once the append it waits for completes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReplyTo {
    pub to: NodeId,
    pub correlation_id: u64,
}

/// The answer a decision owes once its Prepare* record is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum DecisionReply {
    /// EndTxn: NONE, with the (bumped) producer id and epoch under TV2.
    EndTxn { tv2: bool },
    /// The InitProducerId that fenced an Ongoing transaction: CONCURRENT_TRANSACTIONS, retry.
    Fence,
}

/// What runs when an append completes (the callback `appendTransactionToLog` is given).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum AppendCallback {
    /// `sendPidResponseCallback`.
    InitProducerId(ReplyTo),
    /// `handleAddPartitionsToTransaction`'s callback: a client's AddPartitions or a TV2 leader's add.
    AddPartitions(ReplyTo),
    /// The same for AddOffsetsToTxn, whose answer is its own API's.
    AddOffsets(ReplyTo),
    /// `sendTxnMarkersCallback`: the decision is durable; the caller is answered and markers go out.
    Decide {
        result: TransactionResult,
        cause: DecisionCause,
        data_epoch: ProducerEpoch,
        reply: Option<(ReplyTo, DecisionReply)>,
    },
    /// `maybeWriteTxnCompletion`'s append of Complete*.
    Complete { producer_id: ProducerId },
}

/// A transition waiting for its `__transaction_state` record (`TxnTransitMetadata` plus its callback).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PendingAppend {
    correlation_id: u64,
    /// The metadata once the record is written.
    target: TransactionMetadata,
    /// The metadata as the log has it: what a reload finds if the append never completed.
    durable: TransactionMetadata,
    then: AppendCallback,
}

impl Rename for ReplyTo {
    fn rename(&mut self, names: Names<'_>) {
        self.to.rename(names);
    }
}

impl Rename for PendingAppend {
    fn rename(&mut self, names: Names<'_>) {
        names(&mut self.target.transactional_id);
        names(&mut self.durable.transactional_id);
        match &mut self.then {
            AppendCallback::InitProducerId(r) | AppendCallback::AddPartitions(r) | AppendCallback::AddOffsets(r) => {
                r.rename(names)
            }
            AppendCallback::Decide { reply, .. } => {
                if let Some((r, _)) = reply {
                    r.rename(names)
                }
            }
            AppendCallback::Complete { .. } => {}
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TransactionCoordinator {
    pub coordinator_epoch: CoordinatorEpoch,
    next_producer_id: ProducerId,
    /// The end of this broker's producer id block (exclusive).
    producer_id_block_end: ProducerId,
    pub txns: BTreeMap<String, TransactionMetadata>,
    /// Keyed by producer id: WriteTxnMarkers responses name the producer, not the transactional id.
    pub pending_completions: BTreeMap<ProducerId, PendingCompletion>,
    /// Every decision ever made, in order (durable).
    pub decisions: Vec<TxnDecision>,
    /// Transitions whose `__transaction_state` append is in flight, by transactional id (at most one
    /// each: the metadata's `pending_state`). Volatile: a reload finds only the records written.
    appends: BTreeMap<String, PendingAppend>,
    /// WriteTxnMarkers requests in flight: correlation id to decision (volatile; lost on restart).
    marker_requests: BTreeMap<u64, usize>,
    next_correlation_id: u64,
    /// The last `removeExpiredTransactionalIds` run applied (see `remove_expired_transactional_ids`).
    last_expiration_check_ms: TimeMs,
    /// Expired ids whose tombstones the broker still has to write to a replicated `__transaction_state`.
    pub tombstones: Vec<String>,
    /// The coordinator epoch this coordinator loaded `__transaction_state` at (0 if it never did): the
    /// decisions of earlier epochs are those the log kept, and an earlier coordinator may have acted on a
    /// record the log lost (loading reads to the log end, uncommitted records too).
    pub loaded_at_epoch: CoordinatorEpoch,
}

impl Rename for TransactionCoordinator {
    fn rename(&mut self, names: Names<'_>) {
        // Keyed by transactional id: the renamed entries sort anew.
        self.txns = std::mem::take(&mut self.txns)
            .into_values()
            .map(|mut meta| {
                names(&mut meta.transactional_id);
                (meta.transactional_id.clone(), meta)
            })
            .collect();
        self.pending_completions.values_mut().for_each(|p| names(&mut p.transactional_id));
        self.decisions.iter_mut().for_each(|d| names(&mut d.transactional_id));
        self.appends = std::mem::take(&mut self.appends)
            .into_values()
            .map(|mut p| {
                p.rename(names);
                (p.target.transactional_id.clone(), p)
            })
            .collect();
    }
}

impl Default for TransactionCoordinator {
    fn default() -> Self {
        TransactionCoordinator::new()
    }
}

/// Where the coordinator's requests go: the leader of each partition.
pub trait PartitionLeaders {
    fn leader_of(&self, tp: &TopicPartition) -> Option<NodeId>;
}

/// What every coordinator handler needs from its broker: the time, the config, its own id, where each
/// partition leads, and where outgoing messages and timers go.
pub struct Ctx<'a> {
    pub now_ms: TimeMs,
    pub config: &'a EngineConfig,
    pub me: &'a NodeId,
    pub leaders: &'a dyn PartitionLeaders,
    pub effects: &'a mut Effects,
}

impl TransactionCoordinator {
    pub fn new() -> Self {
        TransactionCoordinator {
            coordinator_epoch: 0,
            next_producer_id: FIRST_PRODUCER_ID,
            producer_id_block_end: FIRST_PRODUCER_ID + PRODUCER_ID_BLOCK_STRIDE,
            txns: BTreeMap::new(),
            pending_completions: BTreeMap::new(),
            decisions: Vec::new(),
            appends: BTreeMap::new(),
            marker_requests: BTreeMap::new(),
            next_correlation_id: 0,
            last_expiration_check_ms: 0,
            tombstones: Vec::new(),
            loaded_at_epoch: 0,
        }
    }

    /// The coordinator of broker `id`, handing out producer ids from that broker's block (KIP-730).
    pub fn for_broker(id: u32) -> Self {
        TransactionCoordinator {
            next_producer_id: FIRST_PRODUCER_ID + id as ProducerId * PRODUCER_ID_BLOCK_STRIDE,
            producer_id_block_end: FIRST_PRODUCER_ID + (id as ProducerId + 1) * PRODUCER_ID_BLOCK_STRIDE,
            ..TransactionCoordinator::new()
        }
    }

    /// Metadata as `__transaction_state` would hold it when a coordinator loads it: how a scenario starts
    /// a transactional id far into its life (at a high epoch, say). Ids handed out later are above it.
    pub fn load_transaction(&mut self, meta: TransactionMetadata) {
        assert!(meta.pending_state.is_none(), "{}: a loaded record has no pending transition", meta.transactional_id);
        // An id of this broker's current block was handed out already, so later ones go above it; an id of
        // another block never meets this one's (KIP-730 blocks are disjoint).
        if (self.next_producer_id..self.producer_id_block_end).contains(&meta.producer_id) {
            self.next_producer_id = meta.producer_id + 1;
        }
        self.txns.insert(meta.transactional_id.clone(), meta);
    }

    /// Nothing in progress: every id is Empty or Complete* with no pending transition, no append is in
    /// flight and every decision has its markers (a late answer to a marker request then changes nothing).
    /// Only the periodic scans run from here, and they find nothing to do.
    pub fn is_settled(&self) -> bool {
        self.appends.is_empty()
            && self.pending_completions.is_empty()
            && self.txns.values().all(|m| m.pending_state.is_none() && m.state.is_expiration_allowed())
    }

    fn allocate_producer_id(&mut self) -> ProducerId {
        if self.next_producer_id == self.producer_id_block_end {
            // The block ran out: the controller grants this broker its next one (`ProducerIdManager`). Blocks
            // go round the brokers, so broker b's k-th block starts (b + k * MAX_BROKERS) strides up.
            self.next_producer_id += (MAX_BROKERS as ProducerId - 1) * PRODUCER_ID_BLOCK_STRIDE;
            self.producer_id_block_end = self.next_producer_id + PRODUCER_ID_BLOCK_STRIDE;
        }
        let id = self.next_producer_id;
        self.next_producer_id += 1;
        assert!(id < self.producer_id_block_end, "an id {id} outside the broker's block");
        id
    }

    /// `TxnTransitMetadata`: a copy of `meta` changed by `change` and moved to `to` (Kafka's table checked).
    fn transit(
        meta: &TransactionMetadata,
        to: TransactionState,
        now_ms: TimeMs,
        change: impl FnOnce(&mut TransactionMetadata),
    ) -> TransactionMetadata {
        let mut target = meta.clone();
        target.pending_state = None;
        change(&mut target);
        target.transition_to(to, now_ms);
        target
    }

    /// `prepareTransitionTo` + `appendTransactionToLog`: the transition is pending until its record is
    /// written (the `TxnLogAppend` this sends to itself arrives); meanwhile requests for the id get
    /// CONCURRENT_TRANSACTIONS. `durable` is what the log holds until then.
    fn append(
        &mut self,
        target: TransactionMetadata,
        durable: TransactionMetadata,
        then: AppendCallback,
        ctx: &mut Ctx<'_>,
    ) {
        let tid = target.transactional_id.clone();
        assert!(!self.appends.contains_key(&tid), "{tid}: a second append while one is pending");
        let meta = self.txns.get_mut(&tid).expect("appends are for known transactional ids");
        meta.pending_state = Some(target.state);
        self.next_correlation_id += 1;
        let correlation_id = self.next_correlation_id;
        self.appends.insert(tid.clone(), PendingAppend { correlation_id, target, durable, then });
        if ctx.config.mutations.has(Mutation::TxnLogAppendSynchronous) {
            // The old engine: the record is written the moment the transition is prepared.
            self.on_txn_log_append(&tid, correlation_id, ctx);
            return;
        }
        ctx.effects.send(ctx.me, ctx.me, correlation_id, Message::TxnLogAppendRequest { transactional_id: tid });
    }

    /// The metadata as the log has it now (no pending transition), the `durable` of an append from it.
    fn durable(&self, tid: &str) -> TransactionMetadata {
        let mut meta = self.txns[tid].clone();
        meta.pending_state = None;
        meta
    }

    /// The `TxnLogAppend` arrived: the record is written, the transition completes
    /// (`completeTransitionTo`) and its callback runs. An append from before a reload is gone.
    pub fn on_txn_log_append(&mut self, tid: &str, correlation_id: u64, ctx: &mut Ctx<'_>) {
        if self.appends.get(tid).is_none_or(|p| p.correlation_id != correlation_id) {
            return;
        }
        let p = self.appends.remove(tid).expect("checked above");
        let meta = self.txns.get_mut(tid).expect("appends are for known transactional ids");
        *meta = p.target;
        let pie = ProducerIdAndEpoch { producer_id: meta.producer_id, epoch: meta.producer_epoch };
        let reply = |ctx: &mut Ctx<'_>, r: &ReplyTo, message: Message| {
            ctx.effects.send(ctx.me, &r.to, r.correlation_id, message);
        };
        match p.then {
            AppendCallback::InitProducerId(r) => reply(ctx, &r, Message::InitProducerIdResponse { result: Ok(pie) }),
            AppendCallback::AddPartitions(r) => reply(ctx, &r, Message::AddPartitionsToTxnResponse { result: Ok(()) }),
            AppendCallback::AddOffsets(r) => reply(ctx, &r, Message::AddOffsetsToTxnResponse { result: Ok(()) }),
            AppendCallback::Decide { result, cause, data_epoch, reply: answer } => {
                match answer {
                    Some((r, DecisionReply::EndTxn { tv2 })) => {
                        // A decision that exhausted the epochs answers with the id it rotates to, at epoch 0
                        // (EndTxn v5+: the producer id and epoch `prepareComplete` will leave).
                        let answer = match meta.next_producer_id {
                            Some(producer_id) => ProducerIdAndEpoch { producer_id, epoch: 0 },
                            None => pie,
                        };
                        reply(ctx, &r, Message::EndTxnResponse { result: Ok(tv2.then_some(answer)) })
                    }
                    Some((r, DecisionReply::Fence)) => reply(
                        ctx,
                        &r,
                        Message::InitProducerIdResponse { result: Err(KafkaError::ConcurrentTransactions) },
                    ),
                    None => {}
                }
                self.decided(tid, result, cause, data_epoch, ctx);
            }
            AppendCallback::Complete { producer_id } => {
                let pending = self.pending_completions.remove(&producer_id).expect("a completion being written");
                self.decisions[pending.decision].completed = true;
            }
        }
    }

    /// The record the append with `correlation_id` writes to a replicated `__transaction_state`; `None` if
    /// that append is gone (the coordinator unloaded since).
    pub fn txn_log_record(&self, tid: &str, correlation_id: u64) -> Option<(String, TimeMs)> {
        let p = self.appends.get(tid).filter(|p| p.correlation_id == correlation_id)?;
        let mut metadata = p.target.clone();
        metadata.transitions = metadata.transitions.split_off(metadata.transitions.len().saturating_sub(1));
        let (decided, markers) = match &p.then {
            AppendCallback::Decide { cause, data_epoch, .. } => (Some((*cause, *data_epoch)), Vec::new()),
            AppendCallback::Complete { producer_id } => {
                let decision = &self.decisions[self.pending_completions[producer_id].decision];
                (None, decision.markers.iter().map(|(tp, o)| (tp.clone(), *o)).collect())
            }
            _ => (None, Vec::new()),
        };
        let value = TxnLogValue::Metadata { metadata, decided, markers };
        Some((value.encode(), p.target.txn_timeout_ms))
    }

    /// `appendTransactionToLog`'s callback on an error: the append error becomes the coordinator's
    /// (COORDINATOR_NOT_AVAILABLE for a write that may yet succeed, NOT_COORDINATOR for a lost leadership),
    /// the pending transition is dropped and the caller told. A completion is retried instead
    /// (`TransactionMarkerChannelManager.tryAppendToLog` retries on COORDINATOR_NOT_AVAILABLE), unless
    /// this broker no longer coordinates.
    pub fn on_txn_log_append_failed(&mut self, tid: &str, correlation_id: u64, error: KafkaError, ctx: &mut Ctx<'_>) {
        if self.appends.get(tid).is_none_or(|p| p.correlation_id != correlation_id) {
            return;
        }
        let error = error.for_coordinator_append();
        let p = self.appends.remove(tid).expect("checked above");
        if let AppendCallback::Complete { producer_id } = p.then {
            if error == KafkaError::CoordinatorNotAvailable {
                let pending = self.pending_completions.get_mut(&producer_id).expect("a completion being written");
                pending.completing = false;
                let decision = pending.decision;
                ctx.effects
                    .timers
                    .push((ctx.now_ms + ctx.config.retry_backoff_ms, Timer::ResendTxnMarkers { decision }));
            } else {
                self.pending_completions.remove(&producer_id);
            }
            // The transaction stays Prepare* with Complete* pending, as `prepareComplete` left it.
            return;
        }
        self.txns.get_mut(tid).expect("appends are for known transactional ids").pending_state = None;
        Self::answer_failed(p.then, error, ctx);
    }

    /// Tells the caller of a failed append its error.
    fn answer_failed(then: AppendCallback, error: KafkaError, ctx: &mut Ctx<'_>) {
        let (r, message) = match then {
            AppendCallback::InitProducerId(r) => (r, Message::InitProducerIdResponse { result: Err(error) }),
            AppendCallback::AddPartitions(r) => (r, Message::AddPartitionsToTxnResponse { result: Err(error) }),
            AppendCallback::AddOffsets(r) => (r, Message::AddOffsetsToTxnResponse { result: Err(error) }),
            AppendCallback::Decide { reply: Some((r, DecisionReply::EndTxn { .. })), .. } => {
                (r, Message::EndTxnResponse { result: Err(error) })
            }
            AppendCallback::Decide { reply: Some((r, DecisionReply::Fence)), .. } => {
                (r, Message::InitProducerIdResponse { result: Err(error) })
            }
            AppendCallback::Decide { reply: None, .. } | AppendCallback::Complete { .. } => return,
        };
        ctx.effects.send(ctx.me, &r.to, r.correlation_id, message);
    }

    /// `handleInitProducerId`. `Err(ConcurrentTransactions)` after a fence tells the client to retry.
    /// `expected` is KIP-360's epoch-bump request from a live producer: it must name the current epoch.
    /// `None`: the answer goes to `reply` once its record is written.
    pub fn handle_init_producer_id(
        &mut self,
        transactional_id: Option<&str>,
        txn_timeout_ms: TimeMs,
        expected: Option<ProducerIdAndEpoch>,
        reply: ReplyTo,
        ctx: &mut Ctx<'_>,
    ) -> Option<Result<ProducerIdAndEpoch, KafkaError>> {
        let Some(tid) = transactional_id else {
            // An idempotent-only producer: a fresh id, epoch 0, no coordinator state.
            return Some(Ok(ProducerIdAndEpoch { producer_id: self.allocate_producer_id(), epoch: 0 }));
        };
        if tid.is_empty() {
            return Some(Err(KafkaError::InvalidRequest));
        }
        if txn_timeout_ms > TRANSACTION_MAX_TIMEOUT_MS {
            return Some(Err(KafkaError::InvalidTransactionTimeout));
        }
        if !self.txns.contains_key(tid) {
            let pid = self.allocate_producer_id();
            self.txns.insert(tid.to_string(), TransactionMetadata::new(tid, pid, txn_timeout_ms, ctx.now_ms));
        }
        let meta = &self.txns[tid];
        // `prepareInitProducerIdTransit`: a pending transition first (the caller backs off and retries),
        // then the producer id a KIP-360 caller names; its epoch is judged by `prepareIncrementProducerEpoch`.
        if meta.pending_transition_in_progress() {
            return Some(Err(KafkaError::ConcurrentTransactions));
        }
        // `isValidProducerId`: a new metadata, the current id, or the id this one was rotated from when the
        // caller's epoch is the exhausted one (a retry of the call that rotated it, its answer lost).
        let valid_producer_id = |e: &ProducerIdAndEpoch| {
            meta.producer_epoch == NO_PRODUCER_EPOCH
                || e.producer_id == meta.producer_id
                || (meta.previous_producer_id == Some(e.producer_id) && epoch_exhausted(e.epoch, ctx.config))
        };
        if expected.as_ref().is_some_and(|e| !valid_producer_id(e)) {
            return Some(Err(KafkaError::ProducerFenced));
        }
        match meta.state {
            TransactionState::PrepareCommit | TransactionState::PrepareAbort => {
                Some(Err(KafkaError::ConcurrentTransactions))
            }
            TransactionState::Empty | TransactionState::CompleteCommit | TransactionState::CompleteAbort
                if epoch_exhausted(meta.producer_epoch, ctx.config)
                    && expected.is_none_or(|e| e.epoch == meta.producer_epoch) =>
            {
                // `prepareProducerIdRotation`: no epoch is left for this id, so the session moves to a new
                // producer id at epoch 0; a KIP-360 caller's epoch is kept as the last one.
                let old = ProducerIdAndEpoch { producer_id: meta.producer_id, epoch: meta.producer_epoch };
                let producer_id = self.allocate_producer_id();
                let target = Self::transit(&self.txns[tid], TransactionState::Empty, ctx.now_ms, |t| {
                    t.previous_producer_id = Some(old.producer_id);
                    t.producer_id = producer_id;
                    t.producer_epoch = 0;
                    t.last_producer_epoch = if expected.is_some() { old.epoch } else { NO_PRODUCER_EPOCH };
                    t.txn_timeout_ms = txn_timeout_ms;
                    t.topic_partitions.clear();
                });
                let durable = self.durable(tid);
                self.append(target, durable, AppendCallback::InitProducerId(reply), ctx);
                None
            }
            TransactionState::Empty | TransactionState::CompleteCommit | TransactionState::CompleteAbort => {
                // `prepareIncrementProducerEpoch`: the new session's epoch, answered once the Empty record is written.
                let (epoch, last_epoch) = match expected {
                    None => (bumped(meta.producer_epoch), NO_PRODUCER_EPOCH),
                    Some(e) if meta.producer_epoch == NO_PRODUCER_EPOCH || e.epoch == meta.producer_epoch => {
                        (bumped(meta.producer_epoch), meta.producer_epoch)
                    }
                    // KIP-360: the caller's epoch is the one this coordinator bumped from, so its first call
                    // succeeded and the answer was lost: answer again with the current epoch, no second bump.
                    Some(e)
                        if e.epoch == meta.last_producer_epoch
                            && !ctx.config.mutations.has(Mutation::Kip360RetryFenced) =>
                    {
                        (meta.producer_epoch, meta.last_producer_epoch)
                    }
                    Some(_) => return Some(Err(KafkaError::ProducerFenced)),
                };
                let target = Self::transit(meta, TransactionState::Empty, ctx.now_ms, |t| {
                    t.previous_producer_id = Some(t.producer_id);
                    t.producer_epoch = epoch;
                    t.last_producer_epoch = last_epoch;
                    t.txn_timeout_ms = txn_timeout_ms;
                    t.topic_partitions.clear();
                });
                let durable = self.durable(tid);
                self.append(target, durable, AppendCallback::InitProducerId(reply), ctx);
                None
            }
            TransactionState::Ongoing => {
                // Fence the old instance: bump the epoch, abort its transaction; the caller retries.
                let fence = !ctx.config.mutations.has(Mutation::FenceAbortSameEpoch);
                self.fence_and_abort(tid, fence, DecisionCause::Fence, Some((reply, DecisionReply::Fence)), ctx);
                None
            }
            TransactionState::Dead | TransactionState::PrepareEpochFence => {
                unreachable!("{tid}: {:?} is never a persisted state here", meta.state)
            }
        }
    }

    /// `prepareFenceProducerEpoch` then `endTransaction(ABORT, isFromClient = false)`: used by InitProducerId
    /// fencing and by timeout aborts. The fencing epoch is never returned to a client. As in Kafka the bump
    /// is made in memory before the PrepareAbort record is written; a reload before that forgets it.
    fn fence_and_abort(
        &mut self,
        tid: &str,
        bump_epoch: bool,
        cause: DecisionCause,
        reply: Option<(ReplyTo, DecisionReply)>,
        ctx: &mut Ctx<'_>,
    ) {
        let durable = self.durable(tid);
        let meta = self.txns.get_mut(tid).expect("fence of a known transactional id");
        assert_eq!(meta.state, TransactionState::Ongoing, "{tid}: only an Ongoing transaction is fenced");
        let before = meta.producer_epoch;
        if bump_epoch {
            meta.pending_state = Some(TransactionState::PrepareEpochFence);
            meta.producer_epoch = bumped(meta.producer_epoch);
            meta.last_producer_epoch = -1;
            meta.pending_state = None;
            assert_eq!(meta.producer_epoch, before + 1, "a fence bumps the epoch by one");
        }
        let version = meta.client_transaction_version;
        self.prepare_abort_or_commit(tid, TransactionResult::Abort, cause, before, version, reply, durable, ctx);
    }

    /// `prepareAbortOrCommit`: the Prepare* record is appended; once written, `decided` sends the markers.
    /// Under transaction version 2 the epoch is bumped here, so every transaction has its own epoch.
    #[allow(clippy::too_many_arguments)]
    fn prepare_abort_or_commit(
        &mut self,
        tid: &str,
        result: TransactionResult,
        cause: DecisionCause,
        data_epoch: ProducerEpoch,
        version: TransactionVersion,
        reply: Option<(ReplyTo, DecisionReply)>,
        durable: TransactionMetadata,
        ctx: &mut Ctx<'_>,
    ) {
        let meta = &self.txns[tid];
        let prepare = match result {
            TransactionResult::Commit => TransactionState::PrepareCommit,
            TransactionResult::Abort => TransactionState::PrepareAbort,
        };
        // TV2 bumps once per transaction; a fence or timeout abort has bumped already (KAFKA-19367).
        let bump = version.supports_epoch_bump()
            && (cause == DecisionCause::Client || ctx.config.mutations.has(Mutation::Tv2FenceAbortBumpsTwice));
        // `endTransaction`: a TV2 decision at an exhausted epoch picks the producer id the completion will
        // move to (`nextProducerId`); the markers still go out under the old id. A fence or timeout abort
        // rotates too (KAFKA-20090: the `!isEpochFence` guard left the id one bump short of overflow).
        let fence_keeps_id =
            cause != DecisionCause::Client && ctx.config.mutations.has(Mutation::FenceAbortKeepsExhaustedId);
        let rotate =
            version.supports_epoch_bump() && !fence_keeps_id && epoch_exhausted(meta.producer_epoch, ctx.config);
        let next_producer_id = rotate.then(|| self.allocate_producer_id());
        let meta = &self.txns[tid];
        let target = Self::transit(meta, prepare, ctx.now_ms, |t| {
            t.client_transaction_version = version;
            t.next_producer_id = next_producer_id;
            if bump {
                t.last_producer_epoch = t.producer_epoch;
                t.producer_epoch = bumped(t.producer_epoch);
            }
            if t.topic_partitions.is_empty() {
                // TV2's abort of a transaction that added no partition (`noPartitionAdded`): it starts now.
                t.txn_start_timestamp_ms = ctx.now_ms;
            }
        });
        self.append(target, durable, AppendCallback::Decide { result, cause, data_epoch, reply }, ctx);
    }

    /// `sendTxnMarkersCallback`: the Prepare* record is written, so the decision is durable; `prepareComplete`
    /// makes Complete* the pending transition while the markers are out (`addTxnMarkersToSend`).
    fn decided(
        &mut self,
        tid: &str,
        result: TransactionResult,
        cause: DecisionCause,
        data_epoch: ProducerEpoch,
        ctx: &mut Ctx<'_>,
    ) {
        let meta = self.txns.get_mut(tid).expect("decision on a known transactional id");
        let mut partitions = meta.topic_partitions.clone();
        if ctx.config.mutations.has(Mutation::MarkersToSubsetOfPartitions) {
            // The bug: only the first partition gets a marker, yet the transaction completes.
            partitions = partitions.into_iter().take(1).collect();
        }
        meta.pending_state = Some(match result {
            TransactionResult::Commit => TransactionState::CompleteCommit,
            TransactionResult::Abort => TransactionState::CompleteAbort,
        });
        let producer = ProducerIdAndEpoch { producer_id: meta.producer_id, epoch: meta.producer_epoch };
        self.decisions.push(TxnDecision {
            transactional_id: tid.to_string(),
            producer_id: producer.producer_id,
            data_epoch,
            marker_epoch: producer.epoch,
            result,
            partitions: meta.topic_partitions.clone(),
            cause,
            coordinator_epoch: self.coordinator_epoch,
            completed: false,
            markers: BTreeMap::new(),
            abandoned: false,
        });
        let pending = PendingCompletion {
            transactional_id: tid.to_string(),
            result,
            producer,
            remaining: partitions,
            decision: self.decisions.len() - 1,
            completing: false,
        };
        let previous = self.pending_completions.insert(producer.producer_id, pending);
        assert!(previous.is_none(), "{tid}: two decided transactions of one producer id await markers");
        self.send_markers(producer.producer_id, ctx);
    }

    /// Coordinator failover or broker restart (`loadTransactionsForTxnTopicPartition`): the durable state
    /// (metadata as last written, decisions) is reloaded under a new coordinator epoch, so a transition
    /// whose record was not yet written is forgotten and its caller never answered; Prepare* transactions
    /// get their markers again, with the new epoch, and Complete* pending (`prepareComplete`); Ongoing ones
    /// stay Ongoing (later fenced or timed out).
    pub fn on_load(&mut self, ctx: &mut Ctx<'_>) {
        self.coordinator_epoch += 1;
        self.marker_requests.clear();
        for (tid, p) in std::mem::take(&mut self.appends) {
            self.txns.insert(tid, p.durable);
        }
        let pending: Vec<ProducerId> = self.pending_completions.keys().copied().collect();
        if ctx.config.mutations.has(Mutation::DropPendingMarkersOnRestart) {
            // The bug: the in-memory pending set is gone and nothing rebuilds it.
            self.pending_completions.clear();
            return;
        }
        for pid in pending {
            let p = self.pending_completions.get_mut(&pid).expect("listed above");
            let decision = &self.decisions[p.decision];
            if ctx.config.mutations.has(Mutation::RestartAbortsPreparedCommits) {
                // The bug: the reloaded coordinator treats an unfinished commit as an abort.
                p.result = TransactionResult::Abort;
            }
            // Everything not known to be acknowledged is resent.
            p.remaining = if ctx.config.mutations.has(Mutation::MarkersToSubsetOfPartitions) {
                decision.partitions.iter().take(1).cloned().collect()
            } else {
                decision.partitions.clone()
            };
            p.completing = false;
            let meta = self.txns.get_mut(&p.transactional_id).expect("decided ids have metadata");
            meta.pending_state = Some(match decision.result {
                TransactionResult::Commit => TransactionState::CompleteCommit,
                TransactionResult::Abort => TransactionState::CompleteAbort,
            });
            self.send_markers(pid, ctx);
        }
    }

    /// `maybeWriteTxnCompletion`: Prepare* -> Complete*, exactly once; the decision completes when the
    /// record is written.
    fn complete(&mut self, producer_id: ProducerId, ctx: &mut Ctx<'_>) {
        let pending = self.pending_completions.get_mut(&producer_id).expect("completion of a pending transaction");
        if pending.completing {
            return;
        }
        pending.completing = true;
        let tid = pending.transactional_id.clone();
        // The durable decision names the completion, whatever the markers said.
        let to = match self.decisions[pending.decision].result {
            TransactionResult::Commit => TransactionState::CompleteCommit,
            TransactionResult::Abort => TransactionState::CompleteAbort,
        };
        let target = Self::transit(&self.txns[&tid], to, ctx.now_ms, |t| {
            t.topic_partitions.clear();
            // `prepareComplete`: a TV2 completion records the id it completes under as the previous one, and
            // with the markers written a decision that exhausted the epochs moves the transactional id to its
            // next producer id at epoch 0.
            if t.client_transaction_version.supports_epoch_bump() {
                t.previous_producer_id = Some(t.producer_id);
            }
            if let Some(next) = t.next_producer_id.take() {
                // `prepareComplete` keeps the last epoch `prepareAbortOrCommit` left (Short.MAX_VALUE - 1),
                // which `validProducerEpoch` relies on; the bug records the overflowed one.
                if ctx.config.mutations.has(Mutation::RotationRecordsOverflowedEpoch) {
                    t.last_producer_epoch = t.producer_epoch;
                }
                t.producer_id = next;
                t.producer_epoch = 0;
            }
        });
        let durable = self.durable(&tid);
        self.append(target, durable, AppendCallback::Complete { producer_id }, ctx);
    }

    /// `handleAddPartitionsToTransaction`, and KIP-890's leader verification when `verify_only`.
    /// `None`: the answer goes to `reply` once the Ongoing record is written.
    #[allow(clippy::too_many_arguments)]
    pub fn handle_add_partitions(
        &mut self,
        tid: &str,
        producer: ProducerIdAndEpoch,
        partitions: &[TopicPartition],
        verify_only: bool,
        version: TransactionVersion,
        reply: ReplyTo,
        ctx: &mut Ctx<'_>,
    ) -> Option<Result<(), KafkaError>> {
        let then = AppendCallback::AddPartitions(reply);
        self.add_partitions(tid, producer, partitions, verify_only, Some(version), then, ctx)
    }

    /// AddOffsetsToTxn (`KafkaApis.handleAddOffsetsToTxnRequest`): the group's `__consumer_offsets`
    /// partition is added as `handleAddPartitionsToTransaction` adds any partition (same errors, same
    /// pending-state rules), leaving the transaction's client version as it is.
    /// `None`: the answer goes to `reply` once the Ongoing record is written.
    pub fn handle_add_offsets(
        &mut self,
        tid: &str,
        producer: ProducerIdAndEpoch,
        offsets_partition: &TopicPartition,
        reply: ReplyTo,
        ctx: &mut Ctx<'_>,
    ) -> Option<Result<(), KafkaError>> {
        let then = AppendCallback::AddOffsets(reply);
        self.add_partitions(tid, producer, std::slice::from_ref(offsets_partition), false, None, then, ctx)
    }

    #[allow(clippy::too_many_arguments)]
    fn add_partitions(
        &mut self,
        tid: &str,
        producer: ProducerIdAndEpoch,
        partitions: &[TopicPartition],
        verify_only: bool,
        version: Option<TransactionVersion>,
        then: AppendCallback,
        ctx: &mut Ctx<'_>,
    ) -> Option<Result<(), KafkaError>> {
        if tid.is_empty() {
            return Some(Err(KafkaError::InvalidRequest));
        }
        let Some(meta) = self.txns.get(tid) else {
            return Some(Err(KafkaError::InvalidProducerIdMapping));
        };
        // KAFKA-18660: Kafka 4.0 answers a pending transition before it checks the producer id, so a TV2 client
        // whose commit rotated the producer id and that starts its next transaction under the new id while the
        // markers are still out is told to retry, not refused the id the completion is about to move to. Only
        // that case is ordered so here; a stale id or epoch meeting a pending transition is still refused first.
        let rotating_to = meta.next_producer_id == Some(producer.producer_id);
        let pending_first = !ctx.config.mutations.has(Mutation::AddPartitionsPidBeforePending);
        if pending_first && rotating_to && meta.pending_transition_in_progress() {
            return Some(Err(KafkaError::ConcurrentTransactions));
        }
        if meta.producer_id != producer.producer_id {
            return Some(Err(KafkaError::InvalidProducerIdMapping));
        }
        if meta.producer_epoch != producer.epoch {
            return Some(Err(KafkaError::ProducerFenced));
        }
        if meta.pending_transition_in_progress()
            || matches!(meta.state, TransactionState::PrepareCommit | TransactionState::PrepareAbort)
        {
            return Some(Err(KafkaError::ConcurrentTransactions));
        }
        let all_known = partitions.iter().all(|tp| meta.topic_partitions.contains(tp));
        if verify_only {
            // The leader asks "is this partition in the ongoing transaction?" and appends only if so
            // (`TransactionCoordinator.handleVerifyPartitionsInTransaction`: TRANSACTION_ABORTABLE if not).
            let refused = match ctx.config.mutations.has(Mutation::VerificationRefusedInvalidTxnState) {
                true => KafkaError::InvalidTxnState,
                false => KafkaError::TransactionAbortable,
            };
            return Some(if meta.state == TransactionState::Ongoing && all_known { Ok(()) } else { Err(refused) });
        }
        if meta.state == TransactionState::Ongoing && all_known {
            return Some(Ok(()));
        }
        let now_ms = ctx.now_ms;
        let restart_clock = !ctx.config.mutations.has(Mutation::TxnStartTimestampNotReset);
        let target = Self::transit(meta, TransactionState::Ongoing, now_ms, |t| {
            if t.state != TransactionState::Ongoing {
                assert!(t.is_complete_or_empty(), "{tid}: AddPartitions from {:?}", t.state);
                // `prepareAddPartitions`: a new transaction's timeout counts from now.
                if restart_clock {
                    t.txn_start_timestamp_ms = now_ms;
                }
            }
            t.topic_partitions.extend(partitions.iter().cloned());
            if let Some(v) = version {
                t.client_transaction_version = v;
            }
        });
        let durable = self.durable(tid);
        self.append(target, durable, then, ctx);
        None
    }

    /// `TransactionCoordinator.endTransaction` from a client. Answers once the decision is durable, before
    /// any marker is written. The request's version picks the table: TV1's (`endTransactionWithTV1`) or
    /// TV2's, whose answer carries the bumped epoch and whose retries come one epoch behind.
    /// `None`: the answer goes to `reply` once the Prepare* record is written.
    pub fn handle_end_txn(
        &mut self,
        tid: &str,
        producer: ProducerIdAndEpoch,
        result: TransactionResult,
        version: TransactionVersion,
        reply: ReplyTo,
        ctx: &mut Ctx<'_>,
    ) -> Option<Result<Option<ProducerIdAndEpoch>, KafkaError>> {
        let Some(meta) = self.txns.get(tid) else {
            return Some(Err(KafkaError::InvalidProducerIdMapping));
        };
        let tv2 = version.supports_epoch_bump();
        // `retryOnOverflow`: a TV2 retry of the EndTxn whose bump exhausted the epochs; the id has moved on
        // to the next producer id at epoch 0 since, and the retry names the old id and its last epoch.
        let retry_on_overflow = tv2
            && meta.previous_producer_id == Some(producer.producer_id)
            && producer.epoch == ProducerEpoch::MAX - 1
            && meta.producer_epoch == 0;
        if meta.producer_id != producer.producer_id && !retry_on_overflow {
            return Some(Err(KafkaError::InvalidProducerIdMapping));
        }
        // KAFKA-18464: TV2 checks the pending transition before the epoch, so the empty abort a client sends
        // right after its commit was answered (one epoch up, markers still out) is told to retry, not fenced.
        // TV1 (`endTransactionWithTV1`) keeps the epoch first.
        let pending_first = tv2 && !ctx.config.mutations.has(Mutation::EndTxnEpochBeforePending);
        if pending_first && meta.pending_transition_in_progress() {
            return Some(Err(KafkaError::ConcurrentTransactions));
        }
        let current = meta.producer_epoch == producer.epoch;
        // `endTxnEpochBumped`: the stored epoch is one past the request's, so this retries an EndTxn that bumped.
        let retry = tv2 && meta.producer_epoch == producer.epoch + 1;
        use TransactionState::*;
        let valid_epoch = match meta.state {
            _ if !tv2 => current,
            Ongoing | Empty | Dead | PrepareEpochFence => current,
            PrepareCommit | PrepareAbort => retry,
            CompleteCommit | CompleteAbort => retry || current || retry_on_overflow,
        };
        if !valid_epoch {
            return Some(Err(KafkaError::ProducerFenced));
        }
        if meta.pending_transition_in_progress() {
            return Some(Err(KafkaError::ConcurrentTransactions));
        }
        let stored = ProducerIdAndEpoch { producer_id: meta.producer_id, epoch: meta.producer_epoch };
        let old_tv2_table = ctx.config.mutations.has(Mutation::Tv2AbortKeepsEpoch);
        // TV2's EB cells: an ABORT at the current epoch of a transaction that added no partition (its first
        // send never reached a leader) bumps the epoch with no markers, fencing that send if it lands later.
        let empty_abort = tv2 && !old_tv2_table && current && result == TransactionResult::Abort;
        match (meta.state, result) {
            (Ongoing, _) => {}
            (Empty | CompleteCommit | CompleteAbort, TransactionResult::Abort) if empty_abort => {}
            (PrepareCommit, TransactionResult::Commit) | (PrepareAbort, TransactionResult::Abort) => {
                return Some(Err(KafkaError::ConcurrentTransactions))
            }
            // A retry of the EndTxn that completed this (under TV1 the same epoch is the only kind there is).
            (CompleteCommit, TransactionResult::Commit) | (CompleteAbort, TransactionResult::Abort)
                if retry || retry_on_overflow || !tv2 || old_tv2_table =>
            {
                return Some(Ok(tv2.then_some(stored)));
            }
            _ => return Some(Err(KafkaError::InvalidTxnState)),
        }
        let durable = self.durable(tid);
        let answer = Some((reply, DecisionReply::EndTxn { tv2 }));
        self.prepare_abort_or_commit(tid, result, DecisionCause::Client, producer.epoch, version, answer, durable, ctx);
        None
    }

    /// `abortTimedOutTransactions` for one transactional id: fence (epoch + 1) and abort.
    /// Returns false if the transaction is not Ongoing (nothing to time out).
    pub fn abort_timed_out_transaction(&mut self, tid: &str, ctx: &mut Ctx<'_>) -> bool {
        let Some(meta) = self.txns.get(tid) else {
            return false;
        };
        if meta.state != TransactionState::Ongoing || meta.pending_transition_in_progress() {
            return false;
        }
        if ctx.config.mutations.has(Mutation::NoTimeoutAbort) {
            return false; // the injected bug: the scan finds the transaction and leaves it open
        }
        let bump = !ctx.config.mutations.has(Mutation::TimeoutAbortSameEpoch);
        self.fence_and_abort(tid, bump, DecisionCause::Timeout, None, ctx);
        true
    }

    /// The periodic scan: every Ongoing transaction older than its timeout is aborted.
    pub fn abort_timed_out_transactions(&mut self, ctx: &mut Ctx<'_>) {
        let expired: Vec<String> = self
            .txns
            .values()
            .filter(|m| {
                m.state == TransactionState::Ongoing && m.txn_start_timestamp_ms + m.txn_timeout_ms < ctx.now_ms
            })
            .map(|m| m.transactional_id.clone())
            .collect();
        for tid in expired {
            self.abort_timed_out_transaction(&tid, ctx);
        }
    }

    pub fn transactional_id_of(&self, producer_id: ProducerId) -> Option<&str> {
        self.txns.values().find(|m| m.producer_id == producer_id).map(|m| m.transactional_id.as_str())
    }
}
