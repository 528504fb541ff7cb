//! `TransactionStateManager`'s log role: which leader epoch of a replicated `__transaction_state` this
//! broker's coordinator loaded or is loading, the load itself, and the log's appends (a transition's
//! record, tombstones) through `ReplicaManager`.

use super::TxnLogValue;
use crate::config::EngineConfig;
use crate::error::KafkaError;
use crate::log::LogAppendInfo;
use crate::proposal::Proposal;
use crate::protocol::{Effects, Timer};
use crate::record::ProduceBatch;
use crate::replica_manager::{DelayedResponse, ReplicaCtx, ReplicaManager};
use crate::topic::transaction_state_partition;
use crate::types::TimeMs;

#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TransactionStateManager {
    /// On a replicated `__transaction_state`: the leader epoch its coordinator loaded the log at, while
    /// this broker leads it (`TransactionCoordinator.onElection`); `None` while another broker coordinates.
    pub loaded_at: Option<i32>,
    /// The leader epoch of `__transaction_state` whose load is scheduled and has not run yet
    /// (`loadingPartitions`).
    loading: Option<i32>,
    /// The leader epoch of `__transaction_state` this broker's replica knows (`None` unreplicated).
    pub log_epoch: Option<i32>,
}

/// Whether `__transaction_state` is replicated here, so the coordinator follows its leadership.
pub fn has_transaction_log(replicas: &ReplicaManager) -> bool {
    replicas.is_replicated(&transaction_state_partition())
}

impl TransactionStateManager {
    /// The leader epoch whose scheduled load has not run yet.
    pub fn loading(&self) -> Option<i32> {
        self.loading
    }

    /// A crash: the loaded cache and any scheduled load die with the process.
    pub fn forget(&mut self) {
        self.loaded_at = None;
        self.loading = None;
    }

    /// `onElection` / `onResignation`, first half: `None` if this broker's role is unchanged; else the leader
    /// epoch it now leads at, if any, and whether the cache it had loaded must be unloaded.
    pub fn elect(&mut self, me: u32, replicas: &ReplicaManager) -> Option<(Option<i32>, bool)> {
        let p = replicas.partitions.get(&transaction_state_partition())?;
        self.log_epoch = Some(p.leader_epoch);
        let leading = (p.leader == me).then_some(p.leader_epoch);
        if leading.is_some() && leading == self.loaded_at.or(self.loading) {
            return None;
        }
        Some((leading, self.loaded_at.take().is_some()))
    }

    /// Second half: a new leader epoch's load is scheduled (`Timer::LoadTransactionLog`).
    pub fn schedule_load(&mut self, leading: Option<i32>, now_ms: TimeMs, effects: &mut Effects) {
        self.loading = leading;
        if let Some(leader_epoch) = leading {
            effects.timers.push((now_ms, Timer::LoadTransactionLog { leader_epoch }));
        }
    }

    /// The scheduled load runs, unless leadership moved on since (`loadingPartitions` no longer holds it):
    /// the log's records with their leader epochs. Kafka loads to the log end (`FetchIsolation.LOG_END`);
    /// under `Proposal::LoadWaitsForHw` a load that finds HW < LEO is put off by `retry.backoff.ms` instead.
    pub fn load(
        &mut self,
        epoch: i32,
        replicas: &ReplicaManager,
        (now_ms, config): (TimeMs, &EngineConfig),
        effects: &mut Effects,
    ) -> Option<Vec<(i32, String)>> {
        if self.loading != Some(epoch) {
            return None;
        }
        let log = &replicas.logs[&transaction_state_partition()];
        if config.proposal == Some(Proposal::LoadWaitsForHw) && log.high_watermark() < log.log_end_offset() {
            // The proposal: still loading (COORDINATOR_LOAD_IN_PROGRESS) until the followers have it all.
            effects.timers.push((now_ms + config.retry_backoff_ms, Timer::LoadTransactionLog { leader_epoch: epoch }));
            return None;
        }
        self.loading = None;
        self.loaded_at = Some(epoch);
        let records = log
            .batches()
            .flat_map(|b| b.records().iter().map(move |r| (b.partition_leader_epoch, r.value.clone())))
            .collect();
        Some(records)
    }

    /// `appendTransactionToLog` on a replicated `__transaction_state`: the pending transition's record is
    /// appended as the leader (acks=all, `transaction.state.log.min.isr`) and its outcome comes back to this
    /// broker (`TxnLogAppendResponse`) once the HW passes it; an append that fails is the error now.
    pub fn append_transition(
        (tid, corr): (&str, u64),
        (value, timeout_ms): (String, TimeMs),
        replicas: &mut ReplicaManager,
        ctx: &mut ReplicaCtx<'_>,
    ) -> Result<(), KafkaError> {
        let info = Self::append(vec![value], replicas, ctx)?;
        let response = DelayedResponse::TxnLog { transactional_id: tid.to_string() };
        let required = (transaction_state_partition(), info.last_offset + 1);
        let me = ctx.me();
        replicas.await_hw(required, (me, corr), response, timeout_ms, ctx);
        Ok(())
    }

    /// The expired transactional ids' tombstones, written by the loaded leader of a replicated log without
    /// waiting for the HW: nothing waits on a tombstone, and one lost with an unreplicated tail only leaves
    /// an id Kafka would expire again.
    pub fn write_tombstones(&self, tombstones: Vec<String>, replicas: &mut ReplicaManager, ctx: &mut ReplicaCtx<'_>) {
        if tombstones.is_empty() || self.loaded_at.is_none() || !has_transaction_log(replicas) {
            return;
        }
        let values = tombstones
            .into_iter()
            .map(|transactional_id| TxnLogValue::Tombstone { transactional_id }.encode())
            .collect();
        let _ = Self::append(values, replicas, ctx);
    }

    /// Appends `values` to `__transaction_state` as its leader (`min.insync.replicas` checked), origin
    /// coordinator.
    fn append(
        values: Vec<String>,
        replicas: &mut ReplicaManager,
        ctx: &mut ReplicaCtx<'_>,
    ) -> Result<LogAppendInfo, KafkaError> {
        let batch = ProduceBatch { producer: None, is_transactional: false, values };
        replicas.append_as_coordinator(&transaction_state_partition(), &batch, ctx)
    }
}
