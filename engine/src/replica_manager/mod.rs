//! Replication on one broker: Kafka's `ReplicaManager` with its `Partition`s, the leader's view of each
//! follower (`Replica`, `ReplicaState`) and the two purgatories (`DelayedProduce`, `DelayedFetch`). It
//! holds the log of every partition the broker hosts; its appends are in `append.rs`.
//!
//! Only partitions hosted with more than one replica have a replica state here. A partition this broker
//! hosts alone is its own ISR: its HW follows its log end at once and an acks=all write is complete when it is
//! appended, which is how Kafka's single-replica partition behaves and how the engine behaved before
//! replication, byte for byte.
//!
//! Followers fetch from the leader (`ReplicaFetcherThread`), one fetch at a time per leader broker covering
//! every partition followed there: a fetch with nothing new waits at the leader until data arrives for
//! one of them or `replica.fetch.wait.max.ms` passes, so an idle cluster sends nothing.
//! The leader records each fetch offset as that follower's LEO, moves followers into and out of the ISR
//! through the controller (AlterPartition), and raises the HW to the least LEO of the maximal ISR
//! (`Partition.maybeIncrementLeaderHW`). acks=all writes wait in `DelayedProduce` until the HW passes them.

mod append;

pub use append::{ProduceMetadata, ProduceRequest};

use crate::config::EngineConfig;
use crate::error::KafkaError;
use crate::log::PartitionLog;
use crate::mutation::Mutation;
use crate::protocol::fetch::FetchPartitionData;
use crate::protocol::group::GroupMessage;
use crate::protocol::metadata::MetadataMessage;
use crate::protocol::metadata::{LeaderAndIsr, PartitionRegistration};
use crate::protocol::{
    Effects, Message, NodeId, ProduceAck, ReplicaFetchData, ReplicaFetchPartition, ReplicaFetchPartitionResponse,
};
use crate::protocol::{CONTROLLER_ID, NO_LEADER};
use crate::rename::{Names, Rename};
use crate::topic::TRANSACTION_STATE_TOPIC;
use crate::types::{Offset, ProducerId, TimeMs, TopicPartition};
use std::collections::{BTreeMap, BTreeSet};

/// What the leader knows of one follower, from its fetches (`ReplicaState`).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReplicaState {
    /// The follower's LEO as its last fetch offset says; `None` before its first fetch.
    pub log_end_offset: Option<Offset>,
    /// The leader's LEO when a fetch last arrived (`lastFetchLeaderLogEndOffset`).
    last_fetch_leader_log_end_offset: Option<Offset>,
    last_fetch_time_ms: TimeMs,
    /// The latest time at which the follower had fetched up to the leader's log end of that time; `None`
    /// for a replica outside the ISR that has not fetched from this leader (Kafka's 0, long ago).
    pub last_caught_up_time_ms: Option<TimeMs>,
}

impl ReplicaState {
    /// `ReplicaState.isCaughtUp`.
    fn is_caught_up(&self, leader_end: Offset, now_ms: TimeMs, max_lag_ms: TimeMs) -> bool {
        self.log_end_offset == Some(leader_end)
            || self.last_caught_up_time_ms.is_some_and(|t| now_ms.saturating_sub(t) <= max_lag_ms)
    }

    /// `Replica.updateFetchStateOrThrow`: a fetch at the leader's log end catches the follower up now; one
    /// at the log end the previous fetch saw, as of that fetch.
    fn update_fetch_state(&mut self, fetch_offset: Offset, now_ms: TimeMs, leader_end: Offset) {
        let caught_up = if fetch_offset >= leader_end {
            self.last_caught_up_time_ms.max(Some(now_ms))
        } else if self.last_fetch_leader_log_end_offset.is_none_or(|o| fetch_offset >= o) {
            self.last_caught_up_time_ms.max(Some(self.last_fetch_time_ms))
        } else {
            self.last_caught_up_time_ms
        };
        self.log_end_offset = Some(fetch_offset);
        self.last_fetch_leader_log_end_offset =
            Some(self.last_fetch_leader_log_end_offset.map_or(leader_end, |o| o.max(leader_end)));
        self.last_fetch_time_ms = now_ms;
        self.last_caught_up_time_ms = caught_up;
    }
}

/// One replicated partition as this broker holds it (`Partition`): leader or follower.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Partition {
    pub replicas: Vec<u32>,
    pub leader: u32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    /// The committed ISR (`partitionState.isr`).
    pub isr: BTreeSet<u32>,
    /// The ISR of an AlterPartition in flight (`PendingExpandIsr`, `PendingShrinkIsr`); one at a time.
    pub pending_isr: Option<BTreeSet<u32>>,
    /// Leader only: each follower's state (`remoteReplicasMap`).
    pub remote_replicas: BTreeMap<u32, ReplicaState>,
    /// Leader only: its log end when it took this leader epoch (`leaderEpochStartOffsetOpt`).
    leader_epoch_start_offset: Option<Offset>,
    /// Follower only: the correlation id of its fetcher's request in flight that covers this partition.
    fetch_in_flight: Option<u64>,
    /// Follower only: after a failed fetch, when this partition is fetched again (`PartitionFetchState.delay`).
    fetch_backoff_until_ms: Option<TimeMs>,
    /// Follower only: the epoch of the last batch it fetched (`PartitionFetchState.lastFetchedEpoch`),
    /// sent with each fetch so the leader can tell whether the two logs diverge.
    last_fetched_epoch: Option<i32>,
    /// `__transaction_state`, whose `min.insync.replicas` is `transaction.state.log.min.isr`.
    is_transaction_log: bool,
}

impl Partition {
    /// `makeLeader` / `makeFollower` of a new partition: followers in the ISR count as caught up now.
    fn new(me: u32, tp: &TopicPartition, reg: &PartitionRegistration, now_ms: TimeMs) -> Self {
        let isr: BTreeSet<u32> = reg.state.isr.iter().copied().collect();
        let remote_replicas = if reg.state.leader == me {
            reg.replicas
                .iter()
                .filter(|r| **r != me)
                .map(|r| {
                    let caught_up = isr.contains(r).then_some(now_ms);
                    (*r, ReplicaState { last_caught_up_time_ms: caught_up, ..ReplicaState::default() })
                })
                .collect()
        } else {
            BTreeMap::new()
        };
        Partition {
            replicas: reg.replicas.clone(),
            leader: reg.state.leader,
            leader_epoch: reg.state.leader_epoch,
            partition_epoch: reg.state.partition_epoch,
            isr,
            pending_isr: None,
            remote_replicas,
            leader_epoch_start_offset: None,
            fetch_in_flight: None,
            fetch_backoff_until_ms: None,
            last_fetched_epoch: None,
            is_transaction_log: tp.topic == TRANSACTION_STATE_TOPIC,
        }
    }

    /// The committed ISR plus any replica a pending change adds (KIP-497's "maximal ISR"): the HW waits
    /// for all of them, which is safe whichever way the change goes.
    pub fn maximal_isr(&self) -> BTreeSet<u32> {
        self.isr.union(self.pending_isr.as_ref().unwrap_or(&self.isr)).copied().collect()
    }

    /// `Partition.effectiveMinIsr`: `min.insync.replicas`, capped by the replication factor.
    fn effective_min_isr(&self, config: &EngineConfig) -> usize {
        let min_isr =
            if self.is_transaction_log { config.transaction_state_log_min_isr } else { config.min_insync_replicas };
        (min_isr as usize).min(self.replicas.len())
    }

    pub fn is_under_min_isr(&self, config: &EngineConfig) -> bool {
        self.isr.len() < self.effective_min_isr(config)
    }

    /// `Partition.maybeIncrementLeaderHW`: the least LEO over the maximal ISR and the caught-up followers
    /// about to join it, never below the current HW, and not at all while the ISR is under
    /// `min.insync.replicas` (KAFKA-15583). Returns whether the HW moved.
    fn maybe_increment_leader_hw(&self, log: &mut PartitionLog, now_ms: TimeMs, config: &EngineConfig) -> bool {
        let leader_end = log.log_end_offset();
        let new_hw = if config.mutations.has(Mutation::HwFromLeaderLeo) {
            Some(leader_end) // The bug: the followers are not consulted.
        } else {
            // KIP-966 relies on it: a replica leaving an ISR below min ISR holds all that is committed.
            if self.is_under_min_isr(config) && !config.mutations.has(Mutation::HwAdvancesUnderMinIsr) {
                return false;
            }
            let maximal = self.maximal_isr();
            self.remote_replicas
                .iter()
                .filter(|(id, r)| {
                    maximal.contains(id) || r.is_caught_up(leader_end, now_ms, config.replica_lag_time_max_ms)
                })
                // A follower that has not fetched yet holds the HW where it is.
                .try_fold(leader_end, |hw, (_, r)| r.log_end_offset.map(|o| hw.min(o)))
        };
        match new_hw {
            Some(hw) if hw > log.high_watermark() => {
                log.update_high_watermark(hw, &config.mutations);
                true
            }
            _ => false,
        }
    }

    /// `Partition.checkEnoughReplicasReachOffset`: `None` while the HW is below `required`.
    fn check_enough_replicas_reach_offset(
        &self,
        log: &PartitionLog,
        required: Offset,
        config: &EngineConfig,
    ) -> Option<Result<(), KafkaError>> {
        if log.high_watermark() < required {
            return None;
        }
        // Appended, then the ISR shrank below min.insync.replicas before the HW passed it.
        if self.maximal_isr().len() < self.effective_min_isr(config) {
            return Some(Err(KafkaError::NotEnoughReplicasAfterAppend));
        }
        Some(Ok(()))
    }

    /// `Partition.getOutOfSyncReplicas`: ISR followers not caught up within `replica.lag.time.max.ms`.
    fn out_of_sync_replicas(&self, leader_end: Offset, now_ms: TimeMs, config: &EngineConfig) -> BTreeSet<u32> {
        self.isr
            .iter()
            .filter(|id| {
                self.remote_replicas
                    .get(id)
                    .is_some_and(|r| !r.is_caught_up(leader_end, now_ms, config.replica_lag_time_max_ms))
            })
            .copied()
            .collect()
    }
}

/// `AbstractFetcherThread.getOffsetTruncationState`: where a follower told that its last fetched epoch
/// diverges truncates. If it knows the leader's epoch, to the lesser of the two logs' ends of that epoch;
/// if not, to the end of its own largest epoch below it (the next fetch finds the rest); with no epoch
/// at all, to the leader's offset. Never past its own log end.
pub fn truncation_offset(log: &PartitionLog, diverging: crate::leader_epoch_cache::EpochEndOffset) -> Offset {
    let offset = match log.end_offset_for_epoch(diverging.epoch) {
        Some(own) if own.epoch == diverging.epoch => own.end_offset.min(diverging.end_offset),
        Some(own) => own.end_offset,
        None => diverging.end_offset,
    };
    offset.min(log.log_end_offset())
}

/// The answer an acks=all write waits to send.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DelayedResponse {
    Produce {
        partition: TopicPartition,
        ack: ProduceAck,
    },
    Markers {
        results: Vec<(ProducerId, TopicPartition, Result<Offset, KafkaError>)>,
    },
    /// The coordinator's `__transaction_state` append, answered to its own broker.
    TxnLog {
        transactional_id: String,
    },
    /// A group coordinator's answer to an offset commit, sent once its records are replicated.
    Group {
        answer: GroupMessage,
    },
    /// A SyncGroup's metadata record, whose outcome goes to the group coordinator of its own broker.
    GroupStored {
        group_id: String,
        generation: i32,
    },
}

/// One appended partition of a delayed write: the HW it waits for and where its result goes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AckWait {
    pub partition: TopicPartition,
    /// The batch's last offset + 1 (`ProducePartitionStatus.requiredOffset`).
    pub required_offset: Offset,
    /// The index of this partition's entry in a `Markers` response.
    pub result_index: usize,
    outcome: Option<Result<(), KafkaError>>,
}

impl AckWait {
    pub fn new(partition: TopicPartition, required_offset: Offset, result_index: usize) -> Self {
        AckWait { partition, required_offset, result_index, outcome: None }
    }
}

/// `DelayedProduce`: an acks=all Produce or WriteTxnMarkers answered once every partition's HW passed
/// its write, or with REQUEST_TIMED_OUT for those still waiting when its timeout expires.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct DelayedProduce {
    reply_to: NodeId,
    correlation_id: u64,
    expires_ms: TimeMs,
    waits: Vec<AckWait>,
    response: DelayedResponse,
}

/// `DelayedFetch`: a follower's fetch at the log end of every partition it asked for, answered when one
/// has data, when this broker no longer leads one at the epoch asked, or at its max wait.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct DelayedFetch {
    follower: NodeId,
    correlation_id: u64,
    partitions: Vec<ReplicaFetchPartition>,
    expires_ms: TimeMs,
}

/// What every replication step needs from its broker.
pub struct ReplicaCtx<'a> {
    pub me: u32,
    pub now_ms: TimeMs,
    pub config: &'a EngineConfig,
    pub effects: &'a mut Effects,
}

impl ReplicaCtx<'_> {
    /// This broker's node on the network.
    pub fn me(&self) -> NodeId {
        NodeId::Broker(self.me)
    }

    pub fn send(&mut self, to: &NodeId, correlation_id: u64, message: Message) {
        let me = self.me();
        self.effects.send(&me, to, correlation_id, message);
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReplicaManager {
    /// The log of every partition this broker hosts, replicated or not (`allPartitions` → `Partition.log`).
    pub logs: BTreeMap<TopicPartition, PartitionLog>,
    /// The replica state of those hosted with followers.
    pub partitions: BTreeMap<TopicPartition, Partition>,
    delayed_produces: BTreeMap<u64, DelayedProduce>,
    delayed_fetches: BTreeMap<u64, DelayedFetch>,
    /// Follower side: each leader broker's fetcher request in flight (correlation id, when it is given up),
    /// one at a time (`ReplicaFetcherManager` with `num.replica.fetchers` 1).
    fetchers: BTreeMap<u32, (u64, TimeMs)>,
    next_id: u64,
    /// When the `isr-expiration` task next runs (every `replica.lag.time.max.ms / 2` on a leader).
    next_isr_expiration_ms: Option<TimeMs>,
    /// Produces waiting for the coordinator's KIP-890 answer, by the correlation id of the request
    /// (`AddPartitionsToTxnManager`).
    verifications: BTreeMap<u64, append::PendingVerification>,
}

impl Rename for ReplicaManager {
    fn rename(&mut self, names: Names<'_>) {
        self.logs.rename(names);
        for d in self.delayed_produces.values_mut() {
            d.reply_to.rename(names);
        }
        for pending in self.verifications.values_mut() {
            pending.client.rename(names);
            pending.batch.rename(names);
        }
    }
}

impl ReplicaManager {
    /// The partitions among `registrations` that broker `me` hosts, each with an empty log.
    pub fn new(me: u32, registrations: &BTreeMap<TopicPartition, PartitionRegistration>, now_ms: TimeMs) -> Self {
        let hosted = registrations.iter().filter(|(_, reg)| reg.replicas.contains(&me));
        let logs = hosted.clone().map(|(tp, _)| (tp.clone(), PartitionLog::new())).collect();
        let partitions = hosted
            .filter(|(_, reg)| reg.replicas.len() > 1)
            .map(|(tp, reg)| (tp.clone(), Partition::new(me, tp, reg, now_ms)))
            .collect();
        ReplicaManager { logs, partitions, ..ReplicaManager::default() }
    }

    /// A single broker's partitions: hosted alone, logs only.
    pub fn unreplicated(logs: BTreeMap<TopicPartition, PartitionLog>) -> Self {
        ReplicaManager { logs, ..ReplicaManager::default() }
    }

    /// A restarted broker's replica manager: its logs survive, replica states and purgatories start afresh
    /// from `image`, and its fetch ids go on from the previous life's. In Kafka an answer travels back on
    /// the connection its request came on (`NetworkClient`, `SocketServer`), and a crash closes them all:
    /// a fetch the previous process sent is never answered to this one. Here answers are matched by id
    /// alone, so a reused id would take a stale answer (a diverging epoch for the old log end, say) for the
    /// new fetch.
    pub fn restart(
        &mut self,
        me: u32,
        image: &BTreeMap<TopicPartition, PartitionRegistration>,
        now_ms: TimeMs,
        mutations: &crate::mutation::Mutations,
    ) {
        let next_id = if mutations.has(Mutation::FetchIdsReusedAfterRestart) { 0 } else { self.next_id };
        let logs = std::mem::take(&mut self.logs);
        *self = ReplicaManager { logs, next_id, ..ReplicaManager::new(me, image, now_ms) };
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Every hosted partition takes its role (`makeLeader` / `makeFollower`): followers start fetching, a
    /// leader records its epoch at its log end and starts its ISR expiration task.
    pub fn start(&mut self, ctx: &mut ReplicaCtx<'_>) {
        let tps: Vec<TopicPartition> = self.partitions.keys().cloned().collect();
        for tp in tps {
            self.take_role(&tp, ctx);
        }
        self.maybe_fetch_all(ctx);
    }

    /// `ReplicaManager.applyDelta`: the partition changes of one metadata delta, applied whole; then the
    /// fetchers start on every partition this broker now follows (`addFetcherForPartitions`), so a
    /// failover's new leaders are fetched from in one request each.
    pub fn apply_delta(&mut self, changes: &[(TopicPartition, PartitionRegistration)], ctx: &mut ReplicaCtx<'_>) {
        for (tp, reg) in changes {
            if reg.replicas.len() > 1 && reg.replicas.contains(&ctx.me) && !self.partitions.contains_key(tp) {
                // A partition created at run time: it takes its role as `start` gives every partition its own.
                self.partitions.insert(tp.clone(), Partition::new(ctx.me, tp, reg, ctx.now_ms));
                self.take_role(tp, ctx);
            } else {
                self.apply_partition_change(tp, reg, ctx);
            }
        }
        // `shutdownIdleFetcherThreads`: a fetcher left with no partition to follow goes, and with it the
        // request it waited on; a later leader on that broker gets a new one, which fetches at once.
        let partitions = &self.partitions;
        self.fetchers.retain(|leader, _| partitions.values().any(|p| p.leader == *leader));
        self.maybe_fetch_all(ctx);
    }

    fn maybe_fetch_all(&mut self, ctx: &mut ReplicaCtx<'_>) {
        let leaders: BTreeSet<u32> = self.partitions.values().map(|p| p.leader).collect();
        for leader in leaders {
            self.maybe_fetch(leader, ctx);
        }
    }

    fn take_role(&mut self, tp: &TopicPartition, ctx: &mut ReplicaCtx<'_>) {
        let p = self.partitions.get_mut(tp).expect("a hosted partition");
        let log = self.logs.get_mut(tp).expect("a hosted partition has a log");
        if p.leader == ctx.me {
            p.leader_epoch_start_offset = Some(log.log_end_offset());
            log.assign_leader_epoch(p.leader_epoch);
            if self.next_isr_expiration_ms.is_none() {
                self.next_isr_expiration_ms = Some(ctx.now_ms + ctx.config.replica_lag_time_max_ms / 2);
            }
            // An ISR of one: the HW follows this log at once.
            let p = &self.partitions[tp];
            if p.maybe_increment_leader_hw(log, ctx.now_ms, ctx.config) {
                self.complete_delayed_produces(ctx, false);
            }
        } else if p.leader != NO_LEADER {
            p.last_fetched_epoch = log.leader_epoch_cache.latest_epoch();
            // Kafka 4.x fetchers truncate on fetch (DivergingEpoch) and so never send OffsetsForLeaderEpoch;
            // one with no epoch would truncate to its HW first (AbstractFetcherThread.truncateToHighWatermark),
            // which only a log without data needs: every batch here carries its leader epoch.
            assert!(
                p.last_fetched_epoch.is_some() || log.log_end_offset() == log.log_start_offset(),
                "{tp}: a follower's log holds data up to {} but no leader epoch",
                log.log_end_offset()
            );
        }
    }

    /// `applyDelta` for one partition: a committed ISR change under the same leader replaces
    /// the ISR (and any pending proposal); a new leader epoch makes this broker the leader or a follower of
    /// the new leader, with fresh replica states. Writes waiting here as the old leader fail with
    /// NOT_LEADER_OR_FOLLOWER, and follower fetches waiting here are answered so.
    fn apply_partition_change(&mut self, tp: &TopicPartition, reg: &PartitionRegistration, ctx: &mut ReplicaCtx<'_>) {
        let Some(p) = self.partitions.get_mut(tp) else { return };
        if reg.state.leader_epoch < p.leader_epoch || reg.state.partition_epoch <= p.partition_epoch {
            return; // Already applied, or older than what this broker holds.
        }
        if reg.state.leader_epoch == p.leader_epoch {
            let isr: BTreeSet<u32> = reg.state.isr.iter().copied().collect();
            if !ctx.config.mutations.has(Mutation::FencedReplicaHoldsHw) {
                // KIP-841's `isReplicaIsrEligible`: a replica the controller took out of the ISR (it fenced
                // that broker) holds no HW as "about to join" until it fetches again.
                for gone in p.isr.difference(&isr) {
                    if let Some(r) = p.remote_replicas.get_mut(gone) {
                        r.last_caught_up_time_ms = None;
                    }
                }
            }
            p.isr = isr;
            p.partition_epoch = reg.state.partition_epoch;
            p.pending_isr = None;
            if p.leader == ctx.me {
                let p = &self.partitions[tp];
                let log = self.logs.get_mut(tp).expect("a led partition has a log");
                p.maybe_increment_leader_hw(log, ctx.now_ms, ctx.config);
                self.complete_delayed_produces(ctx, false);
            }
            return;
        }
        *p = Partition::new(ctx.me, tp, reg, ctx.now_ms);
        self.complete_delayed_produces(ctx, false);
        self.complete_delayed_fetches(ctx, false);
        self.take_role(tp, ctx);
    }

    /// `Partition.appendRecordsToLeader`'s checks before an acks=all append: this broker leads the
    /// partition and its ISR is at least `min.insync.replicas`.
    pub fn check_append(&self, tp: &TopicPartition, ctx: &ReplicaCtx<'_>) -> Result<(), KafkaError> {
        let Some(p) = self.partitions.get(tp) else { return Ok(()) };
        if p.leader != ctx.me {
            return Err(KafkaError::NotLeaderOrFollower);
        }
        if p.is_under_min_isr(ctx.config) {
            return Err(KafkaError::NotEnoughReplicas);
        }
        Ok(())
    }

    /// Whether this broker holds `tp` with followers (its writes wait for replication).
    pub fn is_replicated(&self, tp: &TopicPartition) -> bool {
        self.partitions.contains_key(tp)
    }

    /// After the leader appended to `tp`: the HW may move (an ISR of one), and waiting follower fetches
    /// have data now. A partition hosted alone is its own ISR: its HW follows its log end.
    fn after_leader_append(&mut self, tp: &TopicPartition, ctx: &mut ReplicaCtx<'_>) {
        let Some(p) = self.partitions.get(tp) else { return self.advance_high_watermark(tp, ctx.config) };
        let log = self.logs.get_mut(tp).expect("a hosted partition has a log");
        if p.maybe_increment_leader_hw(log, ctx.now_ms, ctx.config) {
            self.complete_delayed_produces(ctx, false);
        }
        self.complete_delayed_fetches(ctx, false);
    }

    /// `ReplicaManager.appendRecords` with acks=all: answers now if every partition's HW already passed its
    /// write, else parks the answer in the produce purgatory.
    #[allow(clippy::too_many_arguments)]
    pub fn await_acks(
        &mut self,
        reply_to: NodeId,
        correlation_id: u64,
        waits: Vec<AckWait>,
        response: DelayedResponse,
        timeout_ms: TimeMs,
        ctx: &mut ReplicaCtx<'_>,
    ) {
        let expires_ms = ctx.now_ms + timeout_ms;
        let mut delayed = DelayedProduce { reply_to, correlation_id, expires_ms, waits, response };
        if self.try_complete_produce(&mut delayed, ctx) {
            Self::send_produce_response(delayed, ctx);
        } else {
            let id = self.next_id();
            self.delayed_produces.insert(id, delayed);
        }
    }

    /// Settles each waiting partition the HW has passed; true when none is left waiting.
    fn try_complete_produce(&self, d: &mut DelayedProduce, ctx: &ReplicaCtx<'_>) -> bool {
        for w in d.waits.iter_mut().filter(|w| w.outcome.is_none()) {
            w.outcome = match (self.partitions.get(&w.partition), self.logs.get(&w.partition)) {
                (Some(p), Some(log)) if p.leader == ctx.me => {
                    p.check_enough_replicas_reach_offset(log, w.required_offset, ctx.config)
                }
                // No longer led here.
                _ => Some(Err(KafkaError::NotLeaderOrFollower)),
            };
        }
        d.waits.iter().all(|w| w.outcome.is_some())
    }

    fn send_produce_response(d: DelayedProduce, ctx: &mut ReplicaCtx<'_>) {
        // The write's outcome: the first partition's error, if any.
        let failed = d.waits.iter().find_map(|w| w.outcome.and_then(Result::err));
        let outcome = failed.map_or(Ok(()), Err);
        let message = match d.response {
            DelayedResponse::Produce { partition, ack } => {
                Message::ProduceResponse { partition, result: outcome.map(|()| ack) }
            }
            DelayedResponse::Markers { mut results } => {
                for w in &d.waits {
                    if let Some(Err(e)) = w.outcome {
                        results[w.result_index].2 = Err(e);
                    }
                }
                Message::WriteTxnMarkersResponse { results }
            }
            DelayedResponse::TxnLog { transactional_id } => {
                Message::TxnLogAppendResponse { transactional_id, result: outcome }
            }
            DelayedResponse::GroupStored { group_id, generation } => {
                Message::Group(GroupMessage::GroupStored { group_id, generation, result: outcome })
            }
            DelayedResponse::Group { answer } => match failed {
                Some(e) => Message::Group(answer.failed_write(e)),
                None => Message::Group(answer),
            },
        };
        ctx.send(&d.reply_to, d.correlation_id, message);
    }

    /// `checkAndComplete` on the produce purgatory; with `expired`, those whose timeout passed are
    /// answered too, REQUEST_TIMED_OUT where they still wait.
    fn complete_delayed_produces(&mut self, ctx: &mut ReplicaCtx<'_>, expired: bool) {
        let ids: Vec<u64> = self.delayed_produces.keys().copied().collect();
        for id in ids {
            let mut d = self.delayed_produces.remove(&id).expect("listed above");
            let done = self.try_complete_produce(&mut d, ctx);
            if done || (expired && d.expires_ms <= ctx.now_ms) {
                for w in d.waits.iter_mut().filter(|w| w.outcome.is_none()) {
                    w.outcome = Some(Err(KafkaError::RequestTimedOut));
                }
                Self::send_produce_response(d, ctx);
            } else {
                self.delayed_produces.insert(id, d);
            }
        }
    }

    /// Answers the follower fetches waiting here that can complete (`DelayedFetch.tryComplete` with
    /// `replica.fetch.min.bytes` 1): one of their partitions has data past its fetch offset or is no longer
    /// led here at the epoch asked; with `expired`, also those whose max wait passed.
    fn complete_delayed_fetches(&mut self, ctx: &mut ReplicaCtx<'_>, expired: bool) {
        let leadership_checked = !ctx.config.mutations.has(Mutation::DelayedFetchIgnoresLeaderChange);
        let due: Vec<u64> = self
            .delayed_fetches
            .iter()
            .filter(|(_, f)| {
                (expired && f.expires_ms <= ctx.now_ms)
                    || f.partitions.iter().any(|r| {
                        (leadership_checked
                            && self.check_leader_epoch(&r.partition, r.current_leader_epoch, ctx).is_err())
                            || self.logs.get(&r.partition).is_some_and(|log| r.fetch_offset < log.log_end_offset())
                    })
            })
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            let f = self.delayed_fetches.remove(&id).expect("listed above");
            let partitions = f
                .partitions
                .into_iter()
                .map(|r| {
                    let result = self
                        .check_leader_epoch(&r.partition, r.current_leader_epoch, ctx)
                        .and_then(|()| self.logs[&r.partition].read(r.fetch_offset, None, &ctx.config.mutations))
                        .map(|data| ReplicaFetchData { data, diverging_epoch: None });
                    ReplicaFetchPartitionResponse { partition: r.partition, fetch_offset: r.fetch_offset, result }
                })
                .collect();
            ctx.send(&f.follower, f.correlation_id, Message::ReplicaFetchResponse { partitions });
        }
    }

    /// `Partition.localLogWithEpochOrThrow`: this broker leads `tp` at exactly the epoch the fetch names.
    fn check_leader_epoch(&self, tp: &TopicPartition, epoch: i32, ctx: &ReplicaCtx<'_>) -> Result<(), KafkaError> {
        match self.partitions.get(tp) {
            Some(p) if p.leader != ctx.me => Err(KafkaError::NotLeaderOrFollower),
            Some(p) if epoch < p.leader_epoch => Err(KafkaError::FencedLeaderEpoch),
            Some(p) if epoch > p.leader_epoch => Err(KafkaError::UnknownLeaderEpoch),
            Some(_) => Ok(()),
            None => Err(KafkaError::NotLeaderOrFollower),
        }
    }

    /// A follower's read: the diverging epoch with no data if its log has left this one
    /// (`PartitionLog::diverging_epoch`), else the batches from its fetch offset to the log end.
    fn read_for_follower(
        &self,
        tp: &TopicPartition,
        fetch_offset: Offset,
        leader_epoch: i32,
        last_fetched_epoch: Option<i32>,
        ctx: &ReplicaCtx<'_>,
    ) -> Result<ReplicaFetchData, KafkaError> {
        self.check_leader_epoch(tp, leader_epoch, ctx)?;
        let log = &self.logs[tp];
        if let Some(end) = log.diverging_epoch(fetch_offset, last_fetched_epoch)? {
            let data = FetchPartitionData {
                high_watermark: log.high_watermark(),
                last_stable_offset: log.last_stable_offset(&ctx.config.mutations),
                log_start_offset: log.log_start_offset(),
                batches: Vec::new(),
                aborted_transactions: None,
            };
            return Ok(ReplicaFetchData { data, diverging_epoch: Some(end) });
        }
        let data = log.read(fetch_offset, None, &ctx.config.mutations)?;
        Ok(ReplicaFetchData { data, diverging_epoch: None })
    }

    /// A follower's fetch at the leader (`ReplicaManager.fetchMessages` from a replica): read every
    /// partition first (the answer carries the HWs from before this fetch), then record each fetch offset as
    /// the follower's LEO, which may add it to the ISR and move the HW. With nothing to return for any
    /// partition, the fetch waits in purgatory.
    pub fn handle_follower_fetch(
        &mut self,
        follower: u32,
        correlation_id: u64,
        partitions: Vec<ReplicaFetchPartition>,
        ctx: &mut ReplicaCtx<'_>,
    ) {
        let from = NodeId::Broker(follower);
        let results: Vec<ReplicaFetchPartitionResponse> = partitions
            .iter()
            .map(|r| {
                let known =
                    self.partitions.get(&r.partition).is_some_and(|p| p.remote_replicas.contains_key(&follower));
                let result = if known {
                    let (epoch, last) = (r.current_leader_epoch, r.last_fetched_epoch);
                    self.read_for_follower(&r.partition, r.fetch_offset, epoch, last, ctx)
                } else {
                    Err(KafkaError::NotLeaderOrFollower)
                };
                ReplicaFetchPartitionResponse { partition: r.partition.clone(), fetch_offset: r.fetch_offset, result }
            })
            .collect();
        let mut data_now = false;
        for r in &results {
            match &r.result {
                // A diverging follower's fetch offset is not its LEO on this log: its state is not updated.
                Ok(d) if d.diverging_epoch.is_none() => {
                    data_now |= !d.data.batches.is_empty();
                    self.update_follower_fetch_state(&r.partition, follower, r.fetch_offset, ctx);
                }
                Ok(_) | Err(_) => data_now = true,
            }
        }
        if data_now {
            ctx.send(&from, correlation_id, Message::ReplicaFetchResponse { partitions: results });
        } else {
            let id = self.next_id();
            let expires_ms = ctx.now_ms + ctx.config.replica_fetch_wait_max_ms;
            let delayed = DelayedFetch { follower: from, correlation_id, partitions, expires_ms };
            self.delayed_fetches.insert(id, delayed);
        }
    }

    /// `Partition.updateFollowerFetchState`, then `maybeExpandIsr` and `maybeIncrementLeaderHW`.
    fn update_follower_fetch_state(
        &mut self,
        tp: &TopicPartition,
        follower: u32,
        fetch_offset: Offset,
        ctx: &mut ReplicaCtx<'_>,
    ) {
        let log = self.logs.get_mut(tp).expect("a led partition has a log");
        let leader_end = log.log_end_offset();
        let p = self.partitions.get_mut(tp).expect("checked by the caller");
        let replica = p.remote_replicas.get_mut(&follower).expect("checked by the caller");
        let moved = replica.log_end_offset != Some(fetch_offset);
        replica.update_fetch_state(fetch_offset, ctx.now_ms, leader_end);
        // `maybeExpandIsr` / `isFollowerInSync`: a follower at or past the HW and at or past where this
        // leader epoch began joins, one change in flight at a time. A new leader's HW may lag what the old
        // one committed, and a follower that truncated below it must not join holding less than this log.
        let epoch_start = if ctx.config.mutations.has(Mutation::IsrExpansionBelowLeaderEpochStart) {
            Some(0)
        } else {
            p.leader_epoch_start_offset
        };
        let in_sync = fetch_offset >= log.high_watermark() && epoch_start.is_some_and(|o| fetch_offset >= o);
        if p.pending_isr.is_none() && !p.isr.contains(&follower) && in_sync {
            let mut proposed = p.isr.clone();
            proposed.insert(follower);
            Self::submit_alter_partition(tp, p, proposed, ctx);
        }
        let p = &self.partitions[tp];
        let log = self.logs.get_mut(tp).expect("a led partition has a log");
        if moved && p.maybe_increment_leader_hw(log, ctx.now_ms, ctx.config) {
            self.complete_delayed_produces(ctx, false);
        }
    }

    /// `Partition.submitAlterPartition`: the proposal is pending until the controller answers.
    fn submit_alter_partition(
        tp: &TopicPartition,
        p: &mut Partition,
        proposed: BTreeSet<u32>,
        ctx: &mut ReplicaCtx<'_>,
    ) {
        let request = MetadataMessage::AlterPartitionRequest {
            broker: ctx.me,
            partition: tp.clone(),
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            new_isr: proposed.iter().copied().collect(),
        };
        p.pending_isr = Some(proposed);
        // One AlterPartition per partition is in flight at a time, and its answer names the partition.
        ctx.send(&NodeId::Broker(CONTROLLER_ID), 0, Message::Metadata(request));
    }

    /// The controller's answer (`handleAlterPartitionUpdate` / `handleAlterPartitionError`): the committed
    /// ISR replaces the old one, which may move the HW; a refusal drops the proposal (it is made again
    /// when its condition still holds).
    pub fn handle_alter_partition_response(
        &mut self,
        tp: &TopicPartition,
        result: Result<LeaderAndIsr, KafkaError>,
        ctx: &mut ReplicaCtx<'_>,
    ) {
        let Some(p) = self.partitions.get_mut(tp) else { return };
        if p.pending_isr.is_none() {
            return;
        }
        p.pending_isr = None;
        if let Ok(state) = result {
            p.isr = state.isr.into_iter().collect();
            p.partition_epoch = state.partition_epoch;
            let p = &self.partitions[tp];
            let log = self.logs.get_mut(tp).expect("a led partition has a log");
            p.maybe_increment_leader_hw(log, ctx.now_ms, ctx.config);
            // A moved HW completes writes; a shrink can also leave them short of min.insync.replicas.
            self.complete_delayed_produces(ctx, false);
        }
    }

    /// Whether this follower still waits for its fetch `correlation_id` from `leader`: one it gave up on
    /// (`replica.socket.timeout.ms`) went with the connection `NetworkClient` closed.
    pub fn awaits_fetch(&self, leader: u32, correlation_id: u64) -> bool {
        self.fetchers.get(&leader).is_some_and(|(id, _)| *id == correlation_id)
    }

    /// Whether `p` is this broker's follower of `leader`'s partition and ready to fetch from it now
    /// (`PartitionFetchState.isReadyForFetch`): not in a fetch already and not delayed after an error.
    fn ready_to_fetch(p: &Partition, leader: u32, now_ms: TimeMs) -> bool {
        p.leader == leader && p.fetch_in_flight.is_none() && p.fetch_backoff_until_ms.is_none_or(|t| t <= now_ms)
    }

    /// `AbstractFetcherThread.maybeFetch`: unless `leader`'s fetcher already waits for an answer, one
    /// request for every partition ready to fetch from it.
    fn maybe_fetch(&mut self, leader: u32, ctx: &mut ReplicaCtx<'_>) {
        if leader == ctx.me || leader == NO_LEADER || self.fetchers.contains_key(&leader) {
            return;
        }
        let now = ctx.now_ms;
        if !self.partitions.values().any(|p| Self::ready_to_fetch(p, leader, now)) {
            return;
        }
        let id = self.next_id();
        let mut partitions = Vec::new();
        for (tp, p) in self.partitions.iter_mut().filter(|(_, p)| Self::ready_to_fetch(p, leader, now)) {
            p.fetch_in_flight = Some(id);
            p.fetch_backoff_until_ms = None;
            partitions.push(ReplicaFetchPartition {
                partition: tp.clone(),
                fetch_offset: self.logs.get(tp).expect("a hosted partition has a log").log_end_offset(),
                current_leader_epoch: p.leader_epoch,
                last_fetched_epoch: p.last_fetched_epoch,
            });
        }
        self.fetchers.insert(leader, (id, now + ctx.config.replica_socket_timeout_ms));
        ctx.send(&NodeId::Broker(leader), id, Message::ReplicaFetchRequest { partitions });
    }

    /// The partitions of `leader`'s fetch `id` leave it; with `failed`, each is fetched again only after
    /// `replica.fetch.backoff.ms` (`AbstractFetcherThread.handlePartitionsWithErrors`).
    fn end_fetch(&mut self, id: u64, failed: bool, now_ms: TimeMs, backoff_ms: TimeMs) -> BTreeSet<TopicPartition> {
        let mut asked = BTreeSet::new();
        for (tp, p) in self.partitions.iter_mut().filter(|(_, p)| p.fetch_in_flight == Some(id)) {
            p.fetch_in_flight = None;
            if failed {
                p.fetch_backoff_until_ms = Some(now_ms + backoff_ms);
            }
            asked.insert(tp.clone());
        }
        asked
    }

    /// The leader's answer to this follower's fetch (`AbstractFetcherThread.processFetchRequest`): for each
    /// partition still in that fetch, `processPartitionData` appends its batches and takes the leader's HW
    /// (capped by this log's end), or truncates to the diverging epoch; a partition with an error is
    /// delayed by `replica.fetch.backoff.ms`. Then the fetcher fetches again.
    pub fn handle_fetch_response(
        &mut self,
        correlation_id: u64,
        leader: u32,
        partitions: Vec<ReplicaFetchPartitionResponse>,
        ctx: &mut ReplicaCtx<'_>,
    ) {
        if !self.awaits_fetch(leader, correlation_id) {
            return; // Not the fetch this follower waits for (a duplicate, or one it gave up).
        }
        self.fetchers.remove(&leader);
        // A partition whose leader changed meanwhile has left the fetch: its part of the answer is stale.
        let asked = self.end_fetch(correlation_id, false, ctx.now_ms, ctx.config.replica_fetch_backoff_ms);
        for r in partitions.into_iter().filter(|r| asked.contains(&r.partition)) {
            let p = self.partitions.get_mut(&r.partition).expect("in the fetch");
            let Ok(ReplicaFetchData { data, diverging_epoch }) = r.result else {
                p.fetch_backoff_until_ms = Some(ctx.now_ms + ctx.config.replica_fetch_backoff_ms);
                continue;
            };
            let log = self.logs.get_mut(&r.partition).expect("a hosted partition has a log");
            let mutations = &ctx.config.mutations;
            if let Some(diverging) = diverging_epoch {
                let offset = if mutations.has(Mutation::TruncateToOwnLeo) {
                    log.log_end_offset()
                } else {
                    truncation_offset(log, diverging)
                };
                log.truncate_to(offset, ctx.now_ms, mutations);
                // The bug takes its own log end for the reconciled point and fetches on without the check.
                p.last_fetched_epoch = if mutations.has(Mutation::TruncateToOwnLeo) {
                    None
                } else {
                    log.leader_epoch_cache.latest_epoch()
                };
            } else {
                for batch in &data.batches {
                    if batch.base_offset >= log.log_end_offset() {
                        log.append_as_follower(batch, ctx.now_ms, mutations);
                        p.last_fetched_epoch = Some(batch.partition_leader_epoch);
                    }
                }
                log.update_high_watermark(data.high_watermark, mutations);
            }
        }
        self.maybe_fetch(leader, ctx);
    }

    /// When the next delayed operation expires, a fetch is given up, a delayed partition is ready to fetch
    /// from an idle fetcher, or the ISR expiration task runs.
    pub fn next_deadline_ms(&self) -> Option<TimeMs> {
        let fetches = self.delayed_fetches.values().map(|f| f.expires_ms);
        let produces = self.delayed_produces.values().map(|d| d.expires_ms);
        let given_up = self.fetchers.values().map(|(_, t)| *t);
        let delayed = self
            .partitions
            .values()
            .filter(|p| !self.fetchers.contains_key(&p.leader))
            .filter_map(|p| p.fetch_backoff_until_ms);
        fetches.chain(produces).chain(given_up).chain(delayed).chain(self.next_isr_expiration_ms).min()
    }

    /// Runs what is due at `now`: expired fetches and writes are answered, a follower gives up a fetch
    /// unanswered for `replica.socket.timeout.ms` (its partitions fetch again after their backoff), idle
    /// fetchers fetch the partitions whose backoff ended, and the ISR expiration task
    /// (`ReplicaManager.maybeShrinkIsr`) proposes dropping followers that stopped catching up.
    pub fn tick(&mut self, ctx: &mut ReplicaCtx<'_>) {
        let now = ctx.now_ms;
        let given_up: Vec<(u32, u64)> =
            self.fetchers.iter().filter(|(_, (_, t))| *t <= now).map(|(leader, (id, _))| (*leader, *id)).collect();
        for (leader, id) in given_up {
            self.fetchers.remove(&leader);
            self.end_fetch(id, true, now, ctx.config.replica_fetch_backoff_ms);
        }
        self.maybe_fetch_all(ctx);
        self.complete_delayed_fetches(ctx, true);
        self.complete_delayed_produces(ctx, true);
        if self.next_isr_expiration_ms.is_some_and(|t| t <= ctx.now_ms) {
            self.next_isr_expiration_ms = Some(ctx.now_ms + ctx.config.replica_lag_time_max_ms / 2);
            let me = ctx.me;
            for (tp, p) in self.partitions.iter_mut().filter(|(_, p)| p.leader == me) {
                let leader_end = self.logs.get(tp).expect("a led partition has a log").log_end_offset();
                let out = p.out_of_sync_replicas(leader_end, ctx.now_ms, ctx.config);
                if p.pending_isr.is_none() && !out.is_empty() {
                    let proposed = p.isr.difference(&out).copied().collect();
                    Self::submit_alter_partition(tp, p, proposed, ctx);
                }
            }
        }
    }
}
