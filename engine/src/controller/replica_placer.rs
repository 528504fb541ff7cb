//! Kafka's `StripedReplicaPlacer` and the cluster's shape: the `Topology` (brokers, replication factors)
//! and the `Placement` of each partition's replicas, when the cluster starts and when a topic is created.

use crate::config::EngineConfig;
use crate::protocol::MAX_BROKERS;
use crate::topic::TRANSACTION_STATE_LOG_REPLICATION_FACTOR;
use crate::types::TopicPartition;
use std::collections::{BTreeMap, BTreeSet};

/// How the controller places a new partition's replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Placement {
    /// Broker 0 leads every partition (as a manual replica assignment may place them), and the followers
    /// of partition `p` are the next brokers from `1 + p`, round the others. The in-process `Cluster`'s:
    /// its replicated scenarios crash broker 0 to move every partition's leadership at once, and their
    /// expectations are written for that.
    LeaderZero,
    /// Kafka's `StripedReplicaPlacer` on one rack: the usable (unfenced) brokers sorted by id, partition
    /// `i` placed on `rf` consecutive brokers of that list starting `i + 1` along it, so leaders spread
    /// and a one-partition topic is led by a broker other than the coordinator's. Kafka starts each
    /// CreateTopics at a random offset (and shuffles racks); here the start is fixed and `i` counts every
    /// partition the controller placed before, so placement is deterministic and keeps spreading.
    Striped,
}

impl Placement {
    /// The replicas of partition `p` of a topic at replication factor `rf` (at most the unfenced
    /// brokers), on a cluster of `brokers`, when `placed` partitions were placed before it.
    pub(super) fn replicas(self, p: u32, placed: usize, rf: u32, brokers: u32, fenced: &BTreeSet<u32>) -> Vec<u32> {
        match self {
            Placement::LeaderZero => {
                let followers = (0..rf.saturating_sub(1)).map(|k| 1 + (p + k) % (brokers - 1));
                std::iter::once(0).chain(followers).collect()
            }
            Placement::Striped => {
                let usable: Vec<u32> = (0..brokers).filter(|b| !fenced.contains(b)).collect();
                (0..rf as usize).map(|k| usable[(placed + 1 + k) % usable.len()]).collect()
            }
        }
    }
}

/// How many brokers the cluster has, each topic's replication factor (capped by the broker count), and
/// how replicas are placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    pub brokers: u32,
    pub replication_factor: u32,
    /// Topics whose replication factor differs from `replication_factor`.
    pub per_topic: BTreeMap<String, u32>,
    pub placement: Placement,
    /// `transaction.state.log.replication.factor` (Kafka's 3, capped by the broker count). Above 1 the
    /// coordinator lives on `__transaction_state`'s leader and fails over with it; at 1 it stays on broker
    /// 0 with its log unreplicated, as on a single broker.
    pub transaction_log_replication_factor: u32,
}

impl Topology {
    /// One broker, every partition a single replica: the engine as it was before replication.
    pub fn single() -> Self {
        Topology::new(1, 1)
    }

    /// Broker 0 leading every partition (`Placement::LeaderZero`).
    pub fn new(brokers: u32, replication_factor: u32) -> Self {
        Topology {
            brokers,
            replication_factor,
            per_topic: BTreeMap::new(),
            placement: Placement::LeaderZero,
            transaction_log_replication_factor: TRANSACTION_STATE_LOG_REPLICATION_FACTOR.min(brokers),
        }
    }

    /// Kafka's striped placement (`Placement::Striped`).
    pub fn striped(brokers: u32, replication_factor: u32) -> Self {
        Topology { placement: Placement::Striped, ..Topology::new(brokers, replication_factor) }
    }

    /// `config` with the broker settings the cluster's size bounds: `offsets.topic.replication.factor`,
    /// at most the broker count (a one-broker cluster keeps its groups unreplicated on broker 0).
    pub fn bound(&self, mut config: EngineConfig) -> EngineConfig {
        config.offsets_topic_replication_factor = config.offsets_topic_replication_factor.min(self.brokers);
        config
    }

    /// Rejects what the cluster cannot host: 1..=5 brokers and a replication factor of at least 1.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=MAX_BROKERS).contains(&self.brokers) {
            return Err(format!("brokers must be 1..={MAX_BROKERS}, got {}", self.brokers));
        }
        if let Some((t, _)) = self.per_topic.iter().find(|(_, rf)| **rf == 0) {
            return Err(format!("the replication factor of topic '{t}' must be at least 1"));
        }
        if self.replication_factor == 0 {
            return Err("replication_factor must be at least 1".into());
        }
        if self.transaction_log_replication_factor == 0 {
            return Err("transaction_log_replication_factor must be at least 1".into());
        }
        Ok(())
    }

    pub fn replication_factor_of(&self, topic: &str) -> u32 {
        self.per_topic.get(topic).copied().unwrap_or(self.replication_factor).min(self.brokers)
    }

    /// Where each partition's replicas go when the cluster starts (every broker usable), topics in name
    /// order, as `placement` places them.
    pub fn assignment(&self, topics: &BTreeMap<String, u32>) -> BTreeMap<TopicPartition, Vec<u32>> {
        let mut out = BTreeMap::new();
        for (topic, partitions) in topics {
            let rf = self.replication_factor_of(topic);
            for p in 0..*partitions {
                let replicas = self.placement.replicas(p, out.len(), rf, self.brokers, &BTreeSet::new());
                out.insert(TopicPartition::new(topic, p), replicas);
            }
        }
        out
    }
}
