//! `TransactionStateManager`: which leader epoch of a replicated `__transaction_state` this broker's
//! coordinator loaded or is loading, the log's appends (a transition's record, tombstones) through
//! `ReplicaManager`, and the jobs on the transaction metadata cache (which `TransactionCoordinator` holds
//! here): loading it from the log, unloading it, and expiring transactional ids.

use super::{Ctx, PendingCompletion, TransactionCoordinator, TransactionMetadata, TransactionState, TxnDecision};
use super::{TxnLogValue, TRANSACTIONAL_ID_EXPIRATION_MS, TRANSACTION_REMOVE_EXPIRED_TRANSACTION_CLEANUP_INTERVAL_MS};
use crate::config::EngineConfig;
use crate::error::KafkaError;
use crate::log::LogAppendInfo;
use crate::mutation::Mutation;
use crate::proposal::Proposal;
use crate::protocol::{Effects, Timer};
use crate::record::{CompressionType, ProduceBatch};
use crate::replica_manager::{DelayedResponse, ReplicaCtx, ReplicaManager};
use crate::topic::transaction_state_partition;
use crate::types::{ProducerIdAndEpoch, TimeMs, TransactionResult, NO_PRODUCER_EPOCH};
use std::collections::BTreeMap;

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
        // `__transaction_state` records are written uncompressed (`TransactionLog.EnforcedCompression`).
        let batch =
            ProduceBatch { producer: None, is_transactional: false, values, compression: CompressionType::None };
        replicas.append_as_coordinator(&transaction_state_partition(), &batch, ctx)
    }
}

impl TransactionCoordinator {
    /// `removeExpiredTransactionalIds`, run every `transaction.remove.expired.transaction.cleanup.interval.ms`
    /// from time 0. Like `producer.id.expiration.check.interval.ms` in `producer_state`, the runs are counted,
    /// not timed: the broker calls this before every coordinator step, and the last run due then is applied
    /// once, to the metadata as it was at that run (nothing touched it since). An id expires at the first
    /// run at least `transactional.id.expiration.ms` after its last update, if it is Empty or Complete* with
    /// no pending transition; its tombstone is written at once and the metadata removed from the cache.
    pub fn remove_expired_transactional_ids(&mut self, ctx: &mut Ctx<'_>) {
        let check = ctx.now_ms - ctx.now_ms % TRANSACTION_REMOVE_EXPIRED_TRANSACTION_CLEANUP_INTERVAL_MS;
        if check <= self.last_expiration_check_ms {
            return;
        }
        let expired: Vec<String> = self
            .txns
            .values()
            .filter(|m| self.expires_at(m, check, ctx.config))
            .map(|m| m.transactional_id.clone())
            .collect();
        self.last_expiration_check_ms = check;
        for tid in expired {
            self.txns.remove(&tid);
            self.tombstones.push(tid);
        }
    }

    /// `TransactionStateManager.shouldExpire` at the run at `check_ms`, if that run is still to be applied.
    fn expires_at(&self, meta: &TransactionMetadata, check_ms: TimeMs, config: &EngineConfig) -> bool {
        check_ms > self.last_expiration_check_ms
            && meta.pending_state.is_none()
            && meta.state.is_expiration_allowed()
            && meta.txn_last_update_timestamp_ms + TRANSACTIONAL_ID_EXPIRATION_MS <= check_ms
            && !config.mutations.has(Mutation::TransactionalIdsNeverExpire)
    }

    /// `getTransactionState` at `now_ms`: the metadata of `tid`, unless the expiration run due by then
    /// removes it (what a reader of the coordinator sees without stepping it).
    pub fn transaction_state(&self, tid: &str, now_ms: TimeMs, config: &EngineConfig) -> Option<&TransactionMetadata> {
        let check = now_ms - now_ms % TRANSACTION_REMOVE_EXPIRED_TRANSACTION_CLEANUP_INTERVAL_MS;
        self.txns.get(tid).filter(|m| !self.expires_at(m, check, config))
    }

    /// `removeTransactionsForTxnTopicPartition` on becoming a follower of `__transaction_state`: the cache
    /// and the markers to send are dropped, and appends still waiting are answered NOT_COORDINATOR.
    pub fn unload(&mut self, ctx: &mut Ctx<'_>) {
        for (_, p) in std::mem::take(&mut self.appends) {
            Self::answer_failed(p.then, KafkaError::NotCoordinator, ctx);
        }
        self.txns.clear();
        self.pending_completions.clear();
        self.decisions.clear();
        self.marker_requests.clear();
        self.tombstones.clear();
    }

    /// `loadTransactionsForTxnTopicPartition` on becoming the leader of `__transaction_state` at
    /// `leader_epoch`, the coordinator epoch from now on: the cache is rebuilt from the log up to its end
    /// (`FetchIsolation.LOG_END`), each record `(its leader epoch, value)`, and every Prepare* transaction
    /// gets its markers with the new epoch and Complete* pending (`prepareComplete`).
    pub fn load_from_log<'r>(
        &mut self,
        leader_epoch: i32,
        records: impl Iterator<Item = (i32, &'r str)>,
        ctx: &mut Ctx<'_>,
    ) {
        self.unload(ctx);
        let mut last_written_epoch = 0;
        for (written_epoch, value) in records {
            last_written_epoch = written_epoch;
            let (metadata, decided, markers) = match TxnLogValue::decode(value) {
                TxnLogValue::Tombstone { transactional_id } => {
                    self.txns.remove(&transactional_id);
                    continue;
                }
                TxnLogValue::Metadata { mut metadata, decided, markers } => {
                    // Kafka 4.3.1's TransactionLogValue has no field for it: TransactionLog.read loads
                    // NO_PRODUCER_EPOCH (KAFKA-20357, which persists it, came after 4.3.1).
                    if !ctx.config.mutations.has(Mutation::LastProducerEpochPersisted) {
                        metadata.last_producer_epoch = NO_PRODUCER_EPOCH;
                    }
                    (metadata, decided, markers)
                }
            };
            let tid = metadata.transactional_id.clone();
            match metadata.state {
                TransactionState::PrepareCommit | TransactionState::PrepareAbort => {
                    let (cause, data_epoch) = decided.expect("a Prepare* record says why it was decided");
                    self.decisions.push(TxnDecision {
                        transactional_id: tid.clone(),
                        producer_id: metadata.producer_id,
                        data_epoch,
                        marker_epoch: metadata.producer_epoch,
                        result: if metadata.state == TransactionState::PrepareCommit {
                            TransactionResult::Commit
                        } else {
                            TransactionResult::Abort
                        },
                        partitions: metadata.topic_partitions.clone(),
                        cause,
                        coordinator_epoch: written_epoch,
                        completed: false,
                        markers: BTreeMap::new(),
                        abandoned: false,
                    });
                }
                TransactionState::CompleteCommit | TransactionState::CompleteAbort => {
                    if let Some(d) = self.decisions.iter_mut().rev().find(|d| d.transactional_id == tid) {
                        d.completed = true;
                        d.markers = markers.into_iter().collect();
                    }
                }
                _ => {}
            }
            self.txns.insert(tid, metadata);
        }
        self.set_loaded_epoch(leader_epoch, last_written_epoch, ctx);
        self.prepare_complete_loaded(ctx);
    }

    /// The coordinator epoch from now on: the leader epoch it loaded at.
    fn set_loaded_epoch(&mut self, leader_epoch: i32, last_written_epoch: i32, ctx: &Ctx<'_>) {
        self.coordinator_epoch = if ctx.config.mutations.has(Mutation::FailoverKeepsCoordinatorEpoch) {
            // The bug: the new coordinator goes on under the epoch its predecessor wrote with.
            last_written_epoch
        } else {
            leader_epoch
        };
        self.loaded_at_epoch = self.coordinator_epoch;
    }

    /// `prepareComplete` for each loaded Prepare* transaction: Complete* pending and its markers sent.
    fn prepare_complete_loaded(&mut self, ctx: &mut Ctx<'_>) {
        // The cache keeps each id's newest record (`loadTransactionMetadata`), so a loaded Prepare* state is
        // the id's newest decision. An older one left undecided was superseded: its append failed with its
        // record in the log, and the coordinator decided again, at the same epoch after a timeout's fence.
        let newest: BTreeMap<&str, usize> =
            self.decisions.iter().enumerate().map(|(i, d)| (d.transactional_id.as_str(), i)).collect();
        let resend_superseded = ctx.config.mutations.has(Mutation::LoadResendsSupersededDecisions);
        let prepared: Vec<(String, usize)> = self
            .decisions
            .iter()
            .enumerate()
            .filter(|(i, d)| !d.completed && (resend_superseded || newest[d.transactional_id.as_str()] == *i))
            .map(|(i, d)| (d.transactional_id.clone(), i))
            .filter(|(tid, _)| {
                self.txns.get(tid).is_some_and(|m| {
                    matches!(m.state, TransactionState::PrepareCommit | TransactionState::PrepareAbort)
                })
            })
            .collect();
        for (tid, decision) in prepared {
            let d = &self.decisions[decision];
            let meta = self.txns.get_mut(&tid).expect("filtered above");
            let loaded = (meta.producer_id, meta.producer_epoch, meta.state == TransactionState::PrepareCommit);
            let decided = (d.producer_id, d.marker_epoch, d.result == TransactionResult::Commit);
            if resend_superseded {
                // The bug: every undecided decision whose producer and epoch match the loaded state gets
                // markers, a superseded commit beside the abort that replaced it.
                if (loaded.0, loaded.1) != (decided.0, decided.1) {
                    continue;
                }
            } else {
                assert_eq!(loaded, decided, "{tid}: the loaded Prepare* state is its newest decision");
            }
            meta.pending_state = Some(match d.result {
                TransactionResult::Commit => TransactionState::CompleteCommit,
                TransactionResult::Abort => TransactionState::CompleteAbort,
            });
            let producer = ProducerIdAndEpoch { producer_id: d.producer_id, epoch: d.marker_epoch };
            let mut pending = PendingCompletion {
                transactional_id: tid.clone(),
                result: d.result,
                producer,
                remaining: d.partitions.clone(),
                decision,
                completing: false,
            };
            if ctx.config.mutations.has(Mutation::MarkersToSubsetOfPartitions) {
                pending.remaining = pending.remaining.into_iter().take(1).collect();
            }
            if ctx.config.mutations.has(Mutation::RestartAbortsPreparedCommits) {
                pending.result = TransactionResult::Abort;
            }
            self.pending_completions.insert(producer.producer_id, pending);
            if ctx.config.mutations.has(Mutation::NoMarkerResendOnFailover) {
                // The bug: the loaded transaction waits for markers nobody sends.
                continue;
            }
            self.send_markers(producer.producer_id, ctx);
        }
    }
}
