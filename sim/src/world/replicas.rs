//! Which broker stands for each partition (`standing_leader`) and for the coordinator
//! (`broker::standing_coordinator`), kept current after each broker step from a per-broker summary; the
//! leaders' logs, taken out for the checkers and put back.

use super::{World, BROKER};
use std::collections::{BTreeMap, BTreeSet};
use txnsim_engine::broker::standing_coordinator;
use txnsim_engine::{Broker, Offset, PartitionLog, TopicPartition};
use txnsim_properties::standing_leader;

/// Every partition's leader log, moved out of its broker (`World::take_leader_logs`), and the brokers
/// they came from.
pub struct LeaderLogs {
    pub logs: BTreeMap<TopicPartition, PartitionLog>,
    owners: Vec<u32>,
}

/// What the leader lookups and the state checks' fingerprint read of one broker. Only the broker's own
/// step changes it, so after a step the sim reads that broker's maps once, where it read every broker's
/// for every partition several times (a sixth of a 3-broker sweep's time).
#[derive(Default)]
pub(super) struct BrokerSummary {
    /// Per partition (in `partitions`' order), where the broker hosts a replicated replica: the leader it
    /// knows and that leader's epoch.
    pub(super) claims: Vec<Option<(u32, i32)>>,
    /// Per partition, its log's LEO, HW, LSO and aborted-index length, where it hosts one.
    pub(super) logs: Vec<Option<[u64; 4]>>,
}

impl World {
    /// The broker whose replica of `tp` stands for the partition (`standing_leader`); on a single
    /// broker, that broker.
    pub fn view_broker(&self, tp: &TopicPartition) -> u32 {
        let id = match self.partitions.binary_search(tp) {
            Ok(i) => self.view[i].0,
            Err(_) => self.scan_view_broker(tp),
        };
        debug_assert_eq!(id, self.scan_view_broker(tp), "the leader cache of {tp} is stale");
        id
    }

    /// `view_broker` read from every broker's replica state (a partition outside `partitions`, and the
    /// check of the cache in debug builds).
    fn scan_view_broker(&self, tp: &TopicPartition) -> u32 {
        let known = self.brokers.values().filter_map(|b| b.replica_manager.partitions.get(tp));
        standing_leader(known.map(|p| (p.leader, p.leader_epoch))).map_or(BROKER, |(leader, _)| leader)
    }

    /// Runs `f` on broker `id` (any change to its state goes through here), then re-reads what its
    /// replica state says of each partition's leader.
    pub(super) fn step_broker<R>(&mut self, id: u32, f: impl FnOnce(&mut Broker) -> R) -> R {
        let r = f(self.brokers.get_mut(&id).expect("a broker"));
        self.refresh_summary(id);
        r
    }

    /// `summaries` of broker `id` (and the coordinator's part of the fingerprint on its broker), then
    /// `view` if the broker's claims changed.
    pub(super) fn refresh_summary(&mut self, id: u32) {
        let m = &self.config.mutations;
        let b = &self.brokers[&id];
        let claims =
            self.partitions.iter().map(|tp| b.replica_manager.partitions.get(tp).map(|p| (p.leader, p.leader_epoch)));
        let logs = self.partitions.iter().map(|tp| {
            let log = b.replica_manager.logs.get(tp)?;
            let aborted = log.aborted_index().count() as u64;
            Some([log.log_end_offset(), log.high_watermark(), log.last_stable_offset(m), aborted])
        });
        let coordinator = self.coordinator_broker();
        // Another broker's step leaves the coordinator's state as it was, unless it changed who coordinates.
        if id == coordinator || self.coordinator_fp[0] != coordinator as u64 {
            let host = &self.brokers[&coordinator];
            let c = &host.coordinator;
            self.coordinator_fp = [
                coordinator as u64,
                host.txn_manager.loaded_at.map_or(0, |e| e as u64 + 1),
                c.coordinator_epoch as u64,
                c.decisions.len() as u64,
                c.decisions.iter().filter(|d| d.completed).count() as u64,
                c.pending_completions.values().map(|p| p.remaining.len() as u64 + 1).sum(),
                c.txns.values().map(|t| t.transitions.len() as u64).sum(),
                c.txns.values().map(|t| t.topic_partitions.len() as u64).sum(),
            ];
        }
        let summary = self.summaries.entry(id).or_default();
        summary.logs.clear();
        summary.logs.extend(logs);
        // Compared in place: claims change only with leadership.
        if summary.claims.iter().copied().eq(claims.clone()) && self.view.len() == self.partitions.len() {
            return;
        }
        summary.claims.clear();
        summary.claims.extend(claims);
        // As `scan_view_broker` picks: the leader named at the newest leader epoch any broker knows.
        self.view.clear();
        for i in 0..self.partitions.len() {
            let known = self.summaries.values().filter_map(|s| s.claims.get(i).copied().flatten());
            self.view.push(standing_leader(known).unwrap_or((BROKER, 0)));
        }
    }

    /// The broker whose coordinator stands for the cluster's: the one loaded at the newest
    /// `__transaction_state` leader epoch (a crashed one until another loads), broker `BROKER` on a
    /// single broker, and while none has loaded.
    pub fn coordinator_broker(&self) -> u32 {
        self.standing_coordinator().unwrap_or(BROKER)
    }

    /// `broker::standing_coordinator`'s id: `None` on one broker, and while the newest coordinator loads.
    pub(super) fn standing_coordinator(&self) -> Option<u32> {
        standing_coordinator(self.brokers.values()).map(|b| b.id)
    }

    /// The leader's log of `tp` (`view_broker`).
    pub fn view_log(&self, tp: &TopicPartition) -> &PartitionLog {
        &self.brokers[&self.view_broker(tp)].replica_manager.logs[tp]
    }

    /// Moves every partition's leader log out of its broker: the state checkers read one map of logs, and
    /// a move costs nothing where a copy would cost the logs' size at every step. `put_back` returns them.
    pub fn take_leader_logs(&mut self) -> LeaderLogs {
        self.observe_replication();
        self.take_leader_logs_as_observed()
    }

    /// `take_leader_logs` right after `observe_replication`.
    pub(super) fn take_leader_logs_as_observed(&mut self) -> LeaderLogs {
        let owners: Vec<u32> = self.last_leaders.iter().map(|(id, _)| *id).collect();
        let mut logs = BTreeMap::new();
        for (tp, id) in self.partitions.iter().zip(&owners) {
            let log = self
                .brokers
                .get_mut(id)
                .and_then(|b| b.replica_manager.logs.remove(tp))
                .expect("a leader hosts its log");
            logs.insert(tp.clone(), log);
        }
        LeaderLogs { logs, owners }
    }

    pub fn put_back(&mut self, taken: LeaderLogs) {
        // `partitions` is in the map's order: topics by name, then partition numbers.
        for ((tp, log), id) in taken.logs.into_iter().zip(taken.owners) {
            self.brokers.get_mut(&id).expect("taken from it").replica_manager.logs.insert(tp, log);
        }
    }

    /// The coordinator's broker with every partition's leader log in place of its own replicas: what the
    /// replay page rebuilds each step's logs from.
    pub fn leader_snapshot(&self) -> Broker {
        let mut broker = self.brokers[&self.coordinator_broker()].clone();
        broker.replica_manager.logs =
            self.partitions.iter().map(|tp| (tp.clone(), self.view_log(tp).clone())).collect();
        broker
    }

    /// Every broker's log ends, to see a truncation.
    pub(super) fn log_ends(&self, id: u32) -> Vec<Offset> {
        self.brokers[&id].replica_manager.logs.values().map(|l| l.log_end_offset()).collect()
    }

    /// The broker ids of the live partition leaders other than the coordinator's broker.
    pub fn leader_candidates(&self) -> Vec<u32> {
        let leaders: BTreeSet<u32> = self.partitions.iter().map(|tp| self.view_broker(tp)).collect();
        let coordinator = self.coordinator_broker();
        leaders.into_iter().filter(|id| *id != coordinator && !self.brokers_down.contains(id)).collect()
    }

    /// COMMIT or ABORT, for the marker at `offset` of `tp` (a WriteTxnMarkers answer carries only its
    /// offset).
    pub(super) fn marker_kind(&self, tp: &TopicPartition, offset: Offset) -> Option<&'static str> {
        let log = self.partitions.contains(tp).then(|| self.view_log(tp))?;
        let batch = log.batches().find(|b| b.base_offset <= offset && offset <= b.last_offset)?;
        batch.marker().map(|m| m.result.name())
    }
}
