//! One replicated partition as its broker holds it: Kafka's `cluster.Partition`, with the leader's view of
//! each follower (`Replica`, `ReplicaState`). The leader raises the HW to the least LEO of the maximal ISR
//! (`Partition.maybeIncrementLeaderHW`) and finds the followers that stopped catching up
//! (`getOutOfSyncReplicas`); `ReplicaManager` keeps the log and decides when these run.

use crate::config::EngineConfig;
use crate::error::KafkaError;
use crate::log::PartitionLog;
use crate::mutation::Mutation;
use crate::protocol::metadata::PartitionRegistration;
use crate::topic::TRANSACTION_STATE_TOPIC;
use crate::types::{Offset, TimeMs, TopicPartition};
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
    pub(super) fn update_fetch_state(&mut self, fetch_offset: Offset, now_ms: TimeMs, leader_end: Offset) {
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
    pub(super) leader_epoch_start_offset: Option<Offset>,
    /// Follower only: the correlation id of its fetcher's request in flight that covers this partition.
    pub(super) fetch_in_flight: Option<u64>,
    /// Follower only: after a failed fetch, when this partition is fetched again (`PartitionFetchState.delay`).
    pub(super) fetch_backoff_until_ms: Option<TimeMs>,
    /// Follower only: the epoch of the last batch it fetched (`PartitionFetchState.lastFetchedEpoch`),
    /// sent with each fetch so the leader can tell whether the two logs diverge.
    pub(super) last_fetched_epoch: Option<i32>,
    /// `__transaction_state`, whose `min.insync.replicas` is `transaction.state.log.min.isr`.
    is_transaction_log: bool,
}

impl Partition {
    /// `makeLeader` / `makeFollower` of a new partition: followers in the ISR count as caught up now.
    pub(super) fn new(me: u32, tp: &TopicPartition, reg: &PartitionRegistration, now_ms: TimeMs) -> Self {
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
    pub(super) fn maybe_increment_leader_hw(
        &self,
        log: &mut PartitionLog,
        now_ms: TimeMs,
        config: &EngineConfig,
    ) -> bool {
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
    pub(super) fn check_enough_replicas_reach_offset(
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
    pub(super) fn out_of_sync_replicas(
        &self,
        leader_end: Offset,
        now_ms: TimeMs,
        config: &EngineConfig,
    ) -> BTreeSet<u32> {
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
