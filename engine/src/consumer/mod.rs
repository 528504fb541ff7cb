//! The consumer client, Kafka's `KafkaConsumer`: the `Consumer`, its position per partition and isolation
//! level, its fetches and their answers. Its `CompletedFetch` filter (`CompletedFetch.nextFetchedRecord`,
//! `FetchCollector.fetchRecords`) is a file here, and so are its group membership (`ConsumerCoordinator`,
//! for a consumer that `subscribe`s) and the leader's `RangeAssignor`.

mod completed_fetch;
mod consumer_coordinator;
mod range_assignor;

use crate::config::EngineConfig;
use crate::error::KafkaError;
use crate::mutation::Mutation;
use crate::network_client;
use crate::producer::ConsumerGroupMetadata;
use crate::protocol::metadata::MetadataMessage;
use crate::protocol::NO_LEADER;
use crate::protocol::{Effects, Envelope, Message, NodeId, Timer};
use crate::rename::{Names, Rename};
use crate::types::{IsolationLevel, Offset, TimeMs, TopicPartition};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

pub use completed_fetch::{filter_fetch, read_to_end, FetchedRecords};
pub use consumer_coordinator::{ConsumerCoordinator, Generation, GroupRebalanceConfig, MemberState};

/// A record handed to the application.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ConsumerRecord {
    pub partition: TopicPartition,
    pub offset: Offset,
    pub value: String,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Consumer {
    pub id: NodeId,
    pub isolation: IsolationLevel,
    /// The bootstrap broker, taken for every partition's leader until metadata says otherwise.
    broker: NodeId,
    /// Partition leaders learned after a NOT_LEADER_OR_FOLLOWER (`Fetcher`'s metadata update).
    leaders: BTreeMap<TopicPartition, NodeId>,
    config: EngineConfig,
    /// `position()` per assigned partition.
    positions: BTreeMap<TopicPartition, Offset>,
    in_flight: BTreeMap<u64, TopicPartition>,
    next_correlation_id: u64,
    delivered: Vec<ConsumerRecord>,
    errors: Vec<(TopicPartition, KafkaError)>,
    /// Fetches answered with no batches: the consumer has caught up to the bound.
    caught_up: BTreeSet<TopicPartition>,
    /// A consumer that `subscribe`d: its group membership, which decides its partitions. An `assign()`
    /// consumer has none.
    group: Option<ConsumerCoordinator>,
}

impl Rename for Consumer {
    fn rename(&mut self, names: Names<'_>) {
        self.id.rename(names);
        self.delivered.iter_mut().for_each(|r| names(&mut r.value));
    }
}

impl Consumer {
    pub fn new(name: &str, isolation: IsolationLevel, broker: NodeId, config: EngineConfig) -> Self {
        Consumer {
            id: NodeId::Client(name.to_string()),
            isolation,
            broker,
            leaders: BTreeMap::new(),
            config,
            positions: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            next_correlation_id: 0,
            delivered: Vec::new(),
            errors: Vec::new(),
            caught_up: BTreeSet::new(),
            group: None,
        }
    }

    /// `subscribe(topics)` in group `group_id`: the consumer's partitions are those the group assigns it,
    /// each starting at the group's committed offset. `topics` carries each topic's partition count, as the
    /// consumer's metadata would.
    pub fn subscribe(&mut self, group_id: &str, topics: BTreeMap<String, u32>, config: GroupRebalanceConfig) {
        if self.config.mutations.has(Mutation::ProcessorReadsUncommitted) {
            // The bug: the group member reads its input at read_uncommitted.
            self.isolation = IsolationLevel::ReadUncommitted;
        }
        let require_stable = self.isolation == IsolationLevel::ReadCommitted;
        let me = (self.id.clone(), &self.config);
        let coordinator = ConsumerCoordinator::new(me, group_id, topics, config, require_stable, self.broker.clone());
        self.group = Some(coordinator);
    }

    /// The group membership of a consumer that subscribed.
    pub fn group(&self) -> Option<&ConsumerCoordinator> {
        self.group.as_ref()
    }

    /// `KafkaConsumer.groupMetadata()`.
    pub fn group_metadata(&self) -> Option<ConsumerGroupMetadata> {
        self.group.as_ref().map(ConsumerCoordinator::group_metadata)
    }

    /// `KafkaConsumer.poll` of a group member: the coordinator's work first (`updateAssignmentMetadataIfNeeded`),
    /// then a fetch for every assigned partition with a position and no fetch in flight (`sendFetches`).
    pub fn poll_member(&mut self, now_ms: TimeMs) -> Effects {
        let group = self.group.as_mut().expect("poll_member of a consumer that subscribed");
        let mut effects = group.poll(now_ms, &mut self.next_correlation_id);
        self.keep_assigned();
        let ready: Vec<TopicPartition> =
            self.positions.keys().filter(|tp| !self.has_fetch_in_flight(tp)).cloned().collect();
        for tp in ready {
            effects.extend(self.poll(now_ms, &tp));
        }
        effects
    }

    /// A processor's rewind after an aborted transaction: every assigned partition loses its position until
    /// the group's committed offset for it is fetched again.
    pub fn reset_to_committed(&mut self) {
        if let Some(group) = self.group.as_mut() {
            group.refetch_committed_offsets();
            self.positions.clear();
            self.caught_up.clear();
        }
    }

    /// `close()`: a member leaves its group (LeaveGroup); nothing is fetched after.
    pub fn close(&mut self, now_ms: TimeMs) -> Effects {
        let effects = match self.group.as_mut() {
            Some(group) => group.close(now_ms, &mut self.next_correlation_id),
            None => Effects::default(),
        };
        self.keep_assigned();
        effects
    }

    /// Positions of partitions the group no longer assigns are dropped (`SubscriptionState.assignFromSubscribed`);
    /// a fetch answer for one is then stale and dropped too.
    fn keep_assigned(&mut self) {
        if let Some(group) = &self.group {
            let assigned = group.assignment();
            self.positions.retain(|tp, _| assigned.contains(tp));
            self.caught_up.retain(|tp| assigned.contains(tp));
        }
    }

    /// `assign` + `seek`.
    pub fn seek(&mut self, partition: TopicPartition, offset: Offset) {
        self.caught_up.remove(&partition);
        self.positions.insert(partition, offset);
    }

    pub fn position(&self, partition: &TopicPartition) -> Option<Offset> {
        self.positions.get(partition).copied()
    }

    pub fn is_caught_up(&self, partition: &TopicPartition) -> bool {
        self.caught_up.contains(partition)
    }

    pub fn take_delivered(&mut self) -> Vec<ConsumerRecord> {
        std::mem::take(&mut self.delivered)
    }

    pub fn take_errors(&mut self) -> Vec<(TopicPartition, KafkaError)> {
        std::mem::take(&mut self.errors)
    }

    pub fn is_idle(&self) -> bool {
        self.in_flight.is_empty()
    }

    pub fn has_fetch_in_flight(&self, partition: &TopicPartition) -> bool {
        self.in_flight.values().any(|p| p == partition)
    }

    /// One fetch at the current position of `partition`, answered or timed out before the next.
    pub fn poll(&mut self, now_ms: TimeMs, partition: &TopicPartition) -> Effects {
        let mut effects = Effects::default();
        let offset = *self.positions.get(partition).expect("poll of an assigned partition");
        self.next_correlation_id += 1;
        let corr = self.next_correlation_id;
        self.in_flight.insert(corr, partition.clone());
        let message = Message::FetchRequest {
            partition: partition.clone(),
            fetch_offset: offset,
            isolation: Some(self.isolation),
            // This consumer fetches leader-only, as before Fetch v11: a stale leader answers
            // NOT_LEADER_OR_FOLLOWER and the consumer refreshes its metadata.
            client_metadata: false,
        };
        let leader = self.leaders.get(partition).unwrap_or(&self.broker).clone();
        effects.send(&self.id, &leader, corr, message);
        effects.timers.push((now_ms + self.config.request_timeout_ms, Timer::RequestTimeout { correlation_id: corr }));
        effects
    }

    /// A fetch that got no answer in `request.timeout.ms` is forgotten; the next poll sends a new one.
    pub fn on_timer(&mut self, now_ms: TimeMs, timer: Timer) -> Effects {
        if let Timer::RequestTimeout { correlation_id } = timer {
            self.in_flight.remove(&correlation_id);
            if let Some(group) = self.group.as_mut() {
                group.on_failure(now_ms, correlation_id);
                self.keep_assigned();
            }
        }
        Effects::default()
    }

    pub fn on_message(&mut self, now_ms: TimeMs, env: Envelope) -> Effects {
        if let Some(group) = self.group.as_mut().filter(|g| g.owns(env.correlation_id)) {
            let (effects, seeks) = group.on_message(now_ms, &mut self.next_correlation_id, env);
            self.keep_assigned();
            for (tp, offset) in seeks {
                self.seek(tp, offset);
            }
            return effects;
        }
        let mut effects = Effects::default();
        let Some(partition) = self.in_flight.remove(&env.correlation_id) else {
            return effects;
        };
        if network_client::is_refused_request(&env) {
            return effects; // Its connection failed: forgotten as on a timeout; the next poll sends anew.
        }
        let (fetch_offset, result) = match env.message {
            Message::FetchResponse { fetch_offset, result, .. } => (fetch_offset, result),
            Message::Metadata(MetadataMessage::MetadataResponse { leaders, .. }) => {
                for (tp, leader, _) in leaders.into_iter().filter(|(_, l, _)| *l != NO_LEADER) {
                    self.leaders.insert(tp, NodeId::Broker(leader));
                }
                return effects;
            }
            _ => unreachable!("{}: consumers send only Fetch and Metadata", self.id),
        };
        if self.positions.get(&partition) != Some(&fetch_offset) {
            return effects; // The position moved (seek) since the fetch: drop the stale answer.
        }
        match result {
            // `FetchCollector.handleInitializeErrors`: a stale leader asks for fresh metadata; the next
            // poll fetches from the leader it names.
            Err(KafkaError::NotLeaderOrFollower) => {
                self.next_correlation_id += 1;
                self.in_flight.insert(self.next_correlation_id, partition.clone());
                let request = MetadataMessage::MetadataRequest {
                    topics: Some(vec![partition.topic.clone()]),
                    allow_auto_topic_creation: false,
                };
                effects.send(&self.id, &env.from, self.next_correlation_id, Message::Metadata(request));
                // `NetworkClient` times out every request, this one too: a lost answer would hold the
                // partition forever.
                let timeout = Timer::RequestTimeout { correlation_id: self.next_correlation_id };
                effects.timers.push((now_ms + self.config.request_timeout_ms, timeout));
            }
            Err(e) => self.errors.push((partition, e)),
            Ok(data) => {
                if data.batches.is_empty() {
                    self.caught_up.insert(partition.clone());
                }
                let fetched = filter_fetch(self.isolation, fetch_offset, &data, &self.config.mutations);
                assert!(fetched.next_fetch_offset >= fetch_offset, "the position never moves back");
                for (offset, value) in fetched.records {
                    self.delivered.push(ConsumerRecord { partition: partition.clone(), offset, value });
                }
                self.positions.insert(partition, fetched.next_fetch_offset);
            }
        }
        effects
    }
}
