//! The fetch purgatory: Kafka's `DelayedFetch` for followers' fetches. A fetch at the log end of every
//! partition it asked for waits at the leader until one has data, this broker no longer leads one at the
//! epoch asked, or `replica.fetch.wait.max.ms` passes.

use super::{ReplicaCtx, ReplicaManager};
use crate::mutation::Mutation;
use crate::protocol::{Message, NodeId, ReplicaFetchData, ReplicaFetchPartition, ReplicaFetchPartitionResponse};
use crate::types::TimeMs;

/// `DelayedFetch`: a follower's fetch at the log end of every partition it asked for, answered when one
/// has data, when this broker no longer leads one at the epoch asked, or at its max wait.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct DelayedFetch {
    pub(super) follower: NodeId,
    pub(super) correlation_id: u64,
    pub(super) partitions: Vec<ReplicaFetchPartition>,
    pub(super) expires_ms: TimeMs,
}

impl ReplicaManager {
    /// Answers the follower fetches waiting here that can complete (`DelayedFetch.tryComplete` with
    /// `replica.fetch.min.bytes` 1): one of their partitions has data past its fetch offset or is no longer
    /// led here at the epoch asked; with `expired`, also those whose max wait passed.
    pub(super) fn complete_delayed_fetches(&mut self, ctx: &mut ReplicaCtx<'_>, expired: bool) {
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
}
