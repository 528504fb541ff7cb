//! When and which invariants run: the state checks after a broker step whose fingerprint changed, the
//! replica checks after a truncation or a leader change, the coordinator loads that read above the HW,
//! and what counts as quiescent for the final checks.

use super::{Deadline, Found, Shared, World};
use serde_json::json;
use txnsim_engine::topic::transaction_state_partition;
use txnsim_engine::Offset;
use txnsim_properties::{ClusterView, LeaderHighWatermark, MonotonicityChecker, StateChecker, Violation};

/// A coordinator's load that took in records above its log's HW: the last such batch, to look for in
/// the next coordinator's log.
pub(super) struct UncommittedLoad {
    broker: u32,
    leader_epoch: i32,
    high_watermark: Offset,
    log_end: Offset,
    /// The last loaded batch's base offset and leader epoch.
    last_batch: (Offset, i32),
}

impl World {
    /// Healed and settled, so waiting longer changes nothing the final checks read: every delayed message
    /// has arrived, every broker is up and settled (`Broker::is_settled`) with no verification that can
    /// still be answered, every partition has its whole replica set in the ISR, every replica knows the
    /// controller's registration and holds the leader's log end and HW, and every producer is idle.
    pub fn is_quiescent(&self) -> bool {
        // The healed network delivers within 10 ms; a message still missing after this margin was lost.
        const ARRIVED_MS: u64 = 100;
        let now = self.now_ms();
        let arrived = |sent_ms: u64| now > sent_ms.max(self.delays_until_ms) + ARRIVED_MS;
        let idle = self.producers.values().all(|s| s.producer.as_ref().is_none_or(|p| p.is_idle()));
        let settled = self
            .brokers
            .values()
            .all(|b| b.is_settled() && b.replica_manager.newest_verification_ms().is_none_or(arrived));
        if !arrived(0) || !idle || !self.brokers_down.is_empty() || !settled || self.controller_outage.is_some() {
            return false;
        }
        let Some(controller) = &self.controller else { return true };
        controller.partitions.iter().all(|(tp, reg)| {
            // A partition with no leader (`NO_LEADER`) is not settled either.
            let Some(leader) = self.brokers.get(&reg.state.leader).and_then(|b| b.partition(tp)) else { return false };
            let caught_up = |l: &txnsim_engine::PartitionLog| {
                l.log_end_offset() == leader.log_end_offset() && l.high_watermark() == leader.high_watermark()
            };
            // The controller keeps the ISR within the replicas, so equal sizes mean the whole set.
            reg.state.isr.len() == reg.replicas.len()
                && reg.replicas.iter().all(|r| {
                    let b = &self.brokers[r];
                    b.metadata_image.get(tp) == Some(reg) && b.partition(tp).is_some_and(caught_up)
                })
        })
    }

    /// The replica invariants over the live brokers (a crashed broker's frozen state is no replica's
    /// word): after a truncation, a leader change and at the end, not after every step (they read
    /// every replica's whole log).
    pub fn check_replicas(&mut self) {
        let down = &self.brokers_down;
        let live = self.brokers.iter().filter(|(id, _)| !down.contains(id)).map(|(_, b)| b);
        let violations = txnsim_properties::check_replicas(live);
        self.record_all(violations);
    }

    /// Leader changes (the state checkers start afresh on the new leader's log), and the time each
    /// partition's leader has its HW below its LEO.
    pub(super) fn observe_replication(&mut self) {
        if self.view != self.last_leaders {
            let first = self.last_leaders.is_empty();
            self.last_leaders.clone_from(&self.view);
            if !first {
                self.state = StateChecker::default();
                self.mono = MonotonicityChecker::default();
                self.last_fingerprint.clear();
                self.check_replicas();
            }
        }
        for (i, (tp, (id, _))) in self.partitions.iter().zip(&self.view).enumerate() {
            let [leo, hw, ..] = self.summaries[id].logs[i].expect("a leader hosts its log");
            if hw > self.leader_hw_peaks[i] {
                self.leader_hw_peaks[i] = hw;
                let (time_ms, partition) = (self.now_ms(), tp.clone());
                self.history.leader_high_watermarks.push(LeaderHighWatermark {
                    time_ms,
                    partition,
                    high_watermark: hw,
                });
            }
            let lagging = hw < leo;
            match (lagging, self.hw_lag_since.get(tp)) {
                (true, None) => {
                    let now = self.now_ms();
                    self.hw_lag_since.insert(tp.clone(), now);
                }
                (false, Some(&since)) => {
                    self.stats.hw_below_leo_ms += self.now_ms() - since;
                    self.hw_lag_since.remove(tp);
                }
                _ => {}
            }
        }
    }

    /// Ends the HW-below-LEO intervals still open when the run ends.
    pub fn close_hw_lag(&mut self) {
        let now = self.now_ms();
        for (_, since) in std::mem::take(&mut self.hw_lag_since) {
            self.stats.hw_below_leo_ms += now - since;
        }
    }

    /// After a broker step: a log end that moved back is a truncation (checked at once), then the state
    /// checks, and a wake-up for the broker's next replication deadline.
    pub(super) fn after_broker_step(&mut self, shared: &Shared, id: u32, ends_before: &[Offset]) {
        let ends = self.brokers[&id].replica_manager.logs.values().map(|l| l.log_end_offset());
        let truncated = ends.zip(ends_before).filter(|(a, b)| a < *b).count() as u64;
        if truncated > 0 {
            self.stats.truncations += truncated;
            self.check_replicas();
        }
        self.check_broker();
        self.schedule_deadline(shared, id, Deadline::Replication);
        self.schedule_deadline(shared, id, Deadline::Groups);
    }

    /// After broker `id`'s load timer, if it loaded (a stale timer does not): judges the previous load
    /// that took in uncommitted records (does this log have its last batch?), then notes this one if it
    /// reads past its own HW.
    pub(super) fn observe_load(&mut self, id: u32) {
        let b = &self.brokers[&id];
        let Some(epoch) = b.txn_manager.loaded_at else { return };
        if self.loads_seen.insert(id, epoch) == Some(epoch) {
            return;
        }
        let Some(log) = b.replica_manager.logs.get(&transaction_state_partition()) else { return };
        if let Some(u) = self.uncommitted_load.take() {
            let (base, batch_epoch) = u.last_batch;
            let kept = log.batches().any(|b| b.base_offset == base && b.partition_leader_epoch == batch_epoch);
            if !kept {
                self.stats.lost_loads += 1;
                self.lost_load.get_or_insert_with(|| {
                    format!(
                        "broker-{}'s coordinator (leader epoch {}) loaded __transaction_state to its log end {}, \
                         above its HW {} (Kafka's load reads to the log end); broker-{}'s log, loaded next at leader \
                         epoch {epoch}, lacks those records",
                        u.broker, u.leader_epoch, u.log_end, u.high_watermark, id
                    )
                });
            }
        }
        let (high_watermark, log_end) = (log.high_watermark(), log.log_end_offset());
        if high_watermark < log_end {
            self.stats.loads_above_hw += 1;
            let last = log.batches().last().expect("a log end above the HW has a batch");
            self.uncommitted_load = Some(UncommittedLoad {
                broker: id,
                leader_epoch: epoch,
                high_watermark,
                log_end,
                last_batch: (last.base_offset, last.partition_leader_epoch),
            });
        }
    }

    pub fn record(&mut self, invariant: &str, witness: String) {
        let at_ms = self.now_ms();
        if let Some(f) = self.found.iter_mut().find(|f| f.invariant == invariant) {
            f.count += 1;
            return;
        }
        let line = format!("VIOLATION {invariant}: {witness}");
        self.trace_with("checker", "violation", || (line, json!({"invariant": invariant})));
        self.found.push(Found { invariant: invariant.to_string(), witness, at_ms, count: 1 });
    }

    fn record_all(&mut self, violations: Vec<Violation>) {
        for v in violations {
            self.record(v.invariant.name(), v.witness);
        }
    }

    /// A cheap summary of everything the state invariants read: unchanged means nothing to re-check.
    /// Per leader log its LEO, HW, LSO and aborted-index length, then the coordinator's epoch, decisions
    /// (all, completed), pending completions, transitions and partitions; read from `summaries`.
    pub(super) fn fingerprint(&self) -> impl Iterator<Item = u64> + '_ {
        // `observe_replication` ran first: `last_leaders` is current, and a leader change cleared the
        // last fingerprint.
        let logs = self.last_leaders.iter().enumerate();
        logs.flat_map(|(i, (id, _))| self.summaries[id].logs[i].expect("a leader hosts its log"))
            .chain(self.coordinator_fp)
    }

    /// State invariants and LSO/HW monotonicity on the partition leaders' logs and the coordinator,
    /// after a broker step.
    pub fn check_broker(&mut self) {
        self.observe_replication();
        // Compared in place: most steps change nothing the checks read.
        if self.fingerprint().eq(self.last_fingerprint.iter().copied()) {
            return;
        }
        let coordinator = self.coordinator_broker();
        if self.coordinator_fp[..2] != self.checked_coordinator {
            // Another coordinator, or the same one reloaded: its ledger is rebuilt from its own replica
            // of the log, so the decisions are read again from the start.
            self.state = StateChecker::default();
            self.checked_coordinator.copy_from_slice(&self.coordinator_fp[..2]);
        }
        self.last_fingerprint = self.fingerprint().collect();
        let taken = self.take_leader_logs_as_observed();
        // While the newest coordinator loads, none stands: the partitions are checked alone.
        let standing = self.controller.is_none() || self.standing_coordinator().is_some();
        let view = ClusterView {
            partitions: &taken.logs,
            coordinator: standing.then(|| &self.brokers[&coordinator].coordinator),
            mutations: &self.config.mutations,
        };
        let mut violations = self.state.check(&view);
        violations.extend(self.mono.observe(&view));
        if standing {
            violations.extend(txnsim_properties::check_timers(&self.brokers[&coordinator].coordinator));
        }
        self.put_back(taken);
        self.record_all(violations);
    }
}
