//! Replication on one broker: Kafka's `ReplicaManager`. It holds the log of every partition the broker
//! hosts, and for those with followers their `Partition` (`partition.rs`); its appends are in `append.rs`,
//! its purgatories in `delayed_produce.rs` and `delayed_fetch.rs`, and a follower's fetching in
//! `replica_fetcher_thread.rs`.
//!
//! Only partitions hosted with more than one replica have a replica state here. A partition this broker
//! hosts alone is its own ISR: its HW follows its log end at once and an acks=all write is complete when it is
//! appended, which is how Kafka's single-replica partition behaves and how the engine behaved before
//! replication, byte for byte.
//!
//! Followers fetch from the leader (`ReplicaFetcherThread`). The leader records each fetch offset as that
//! follower's LEO, moves followers into and out of the ISR through the controller (AlterPartition), and
//! raises the HW to the least LEO of the maximal ISR (`Partition.maybeIncrementLeaderHW`). acks=all writes
//! wait in `DelayedProduce` until the HW passes them.

mod append;
mod delayed_fetch;
mod delayed_produce;
mod partition;
mod replica_fetcher_thread;

pub use append::{ProduceMetadata, ProduceRequest};
pub use delayed_produce::{AckWait, DelayedResponse};
pub use partition::{Partition, ReplicaState};
pub use replica_fetcher_thread::truncation_offset;

use delayed_fetch::DelayedFetch;
use delayed_produce::DelayedProduce;

use crate::config::EngineConfig;
use crate::error::KafkaError;
use crate::log::PartitionLog;
use crate::mutation::Mutation;
use crate::protocol::fetch::FetchPartitionData;
use crate::protocol::metadata::MetadataMessage;
use crate::protocol::metadata::{LeaderAndIsr, PartitionRegistration};
use crate::protocol::{
    Effects, Message, NodeId, ReplicaFetchData, ReplicaFetchPartition, ReplicaFetchPartitionResponse,
};
use crate::protocol::{CONTROLLER_ID, NO_LEADER};
use crate::rename::{Names, Rename};
use crate::types::{Offset, TimeMs, TopicPartition};
use std::collections::{BTreeMap, BTreeSet};

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
        let mut logs = std::mem::take(&mut self.logs);
        let fresh = ReplicaManager::new(me, image, now_ms);
        // A partition created while this broker was down (`__consumer_offsets` on a group's first lookup)
        // starts with an empty log, as one learnt in a delta does (`Broker::apply_delta`).
        for tp in fresh.logs.keys() {
            logs.entry(tp.clone()).or_default();
        }
        *self = ReplicaManager { logs, next_id, ..fresh };
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
        self.tick_fetchers(ctx);
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
