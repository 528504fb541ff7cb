//! A follower's fetching from its leaders: Kafka's `ReplicaFetcherThread` and `AbstractFetcherThread`, one
//! fetch at a time per leader broker covering every partition followed there (`ReplicaFetcherManager`
//! with `num.replica.fetchers` 1). A fetch with nothing new waits at the leader (`DelayedFetch`) until data
//! arrives for one of them or `replica.fetch.wait.max.ms` passes, so an idle cluster sends nothing. The
//! answer's batches are appended and the leader's HW taken; a diverging epoch truncates the log first.

use super::{Partition, ReplicaCtx, ReplicaManager};
use crate::log::PartitionLog;
use crate::mutation::Mutation;
use crate::protocol::NO_LEADER;
use crate::protocol::{Message, NodeId, ReplicaFetchData, ReplicaFetchPartition, ReplicaFetchPartitionResponse};
use crate::types::{Offset, TimeMs, TopicPartition};
use std::collections::BTreeSet;

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

impl ReplicaManager {
    /// `maybeFetch` for every leader this broker follows a partition of.
    pub(super) fn maybe_fetch_all(&mut self, ctx: &mut ReplicaCtx<'_>) {
        let leaders: BTreeSet<u32> = self.partitions.values().map(|p| p.leader).collect();
        for leader in leaders {
            self.maybe_fetch(leader, ctx);
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

    /// A fetch unanswered for `replica.socket.timeout.ms` is given up (its partitions fetch again after
    /// their backoff), then idle fetchers fetch the partitions whose backoff ended.
    pub(super) fn tick_fetchers(&mut self, ctx: &mut ReplicaCtx<'_>) {
        let now = ctx.now_ms;
        let given_up: Vec<(u32, u64)> =
            self.fetchers.iter().filter(|(_, (_, t))| *t <= now).map(|(leader, (id, _))| (*leader, *id)).collect();
        for (leader, id) in given_up {
            self.fetchers.remove(&leader);
            self.end_fetch(id, true, now, ctx.config.replica_fetch_backoff_ms);
        }
        self.maybe_fetch_all(ctx);
    }
}
