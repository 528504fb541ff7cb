//! The consumer client: position per partition, isolation level, and Kafka's `CompletedFetch` filter
//! (`CompletedFetch.nextFetchedRecord`, `FetchCollector.fetchRecords`).

use crate::config::EngineConfig;
use crate::error::KafkaError;
use crate::log::PartitionLog;
use crate::mutation::{Mutation, Mutations};
use crate::network_client;
use crate::protocol::fetch::FetchPartitionData;
use crate::protocol::metadata::MetadataMessage;
use crate::protocol::NO_LEADER;
use crate::protocol::{Effects, Envelope, Message, NodeId, Timer};
use crate::rename::{Names, Rename};
use crate::types::{IsolationLevel, Offset, ProducerId, TimeMs, TopicPartition, TransactionResult};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A record handed to the application.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ConsumerRecord {
    pub partition: TopicPartition,
    pub offset: Offset,
    pub value: String,
}

/// What one fetch response yields: the delivered records and the next fetch offset.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FetchedRecords {
    pub records: Vec<(Offset, String)>,
    pub next_fetch_offset: Offset,
}

/// Reads a partition from `from` to where a reader stops, with the engine's fetch path (`PartitionLog::read`
/// then the consumer's `filter_fetch`): what a fresh, or a catching-up, reader delivers.
pub fn read_to_end(
    log: &PartitionLog,
    isolation: IsolationLevel,
    from: Offset,
    mutations: &Mutations,
) -> (Vec<(Offset, String)>, Offset) {
    let mut position = from;
    let mut records = Vec::new();
    // Each fetch moves the position by at least one offset or ends the read, so LEO + 1 fetches suffice.
    for _ in 0..=log.log_end_offset() + 1 {
        let Ok(data) = log.read(position, Some(isolation), mutations) else { break };
        if data.batches.is_empty() {
            break;
        }
        let fetched = filter_fetch(isolation, position, &data, mutations);
        records.extend(fetched.records);
        if fetched.next_fetch_offset <= position {
            break;
        }
        position = fetched.next_fetch_offset;
    }
    (records, position)
}

/// `CompletedFetch.nextFetchedRecord` over a whole response. read_committed drops batches of aborted
/// transactions (by the response's aborted list) and every control record; read_uncommitted drops only
/// control records. The position moves past everything consumed, delivered or not (KAFKA-12980).
pub fn filter_fetch(
    isolation: IsolationLevel,
    fetch_offset: Offset,
    data: &FetchPartitionData,
    mutations: &Mutations,
) -> FetchedRecords {
    let filter_aborted = isolation == IsolationLevel::ReadCommitted
        || (mutations.has(Mutation::AbortedListForReadUncommitted) && data.aborted_transactions.is_some());
    // The min-heap of aborted transactions by first offset, as a sorted list consumed from the front.
    let mut aborted: Vec<(Offset, ProducerId)> = if filter_aborted {
        data.aborted_transactions.iter().flatten().map(|a| (a.first_offset, a.producer_id)).collect()
    } else {
        Vec::new()
    };
    aborted.sort();
    let mut aborted = aborted.into_iter().peekable();
    let mut aborted_pids: BTreeSet<ProducerId> = BTreeSet::new();
    let mut next_fetch_offset = fetch_offset;
    let mut records = Vec::new();
    let advance_over_skipped = !mutations.has(Mutation::NoPositionAdvanceOverControl);
    let mut last_batch_skipped = false;
    for batch in &data.batches {
        last_batch_skipped = batch.is_control();
        if filter_aborted {
            if let Some(pid) = batch.producer_id() {
                while let Some(&(first, apid)) = aborted.peek() {
                    if first > batch.last_offset {
                        break;
                    }
                    aborted_pids.insert(apid);
                    aborted.next();
                }
                if batch.marker().is_some_and(|m| m.result == TransactionResult::Abort) {
                    if !mutations.has(Mutation::AbortedPidNotClearedOnMarker) {
                        aborted_pids.remove(&pid);
                    }
                } else if batch.is_transactional && aborted_pids.contains(&pid) {
                    last_batch_skipped = true;
                    if advance_over_skipped {
                        next_fetch_offset = next_fetch_offset.max(batch.next_offset());
                    }
                    continue;
                }
            }
        }
        if batch.is_control() {
            // Control records are never delivered, at any isolation level; the marker sits at the base offset.
            if batch.marker().is_some() && batch.base_offset >= next_fetch_offset && advance_over_skipped {
                next_fetch_offset = batch.base_offset + 1;
            }
            continue;
        }
        for record in batch.records() {
            if record.offset >= next_fetch_offset {
                records.push((record.offset, record.value.clone()));
                next_fetch_offset = record.offset + 1;
            }
        }
    }
    // Format v2 keeps a batch's last offset through compaction: after the last batch the position moves to
    // its next offset so the same batch is not fetched again.
    if let Some(last) = data.batches.last() {
        if advance_over_skipped || !last_batch_skipped {
            next_fetch_offset = next_fetch_offset.max(last.next_offset());
        }
    }
    if mutations.has(Mutation::PositionSkipsToHighWatermark) {
        next_fetch_offset = next_fetch_offset.max(data.high_watermark);
    }
    if mutations.has(Mutation::RedeliverLastRecord) {
        if let Some(&(last, _)) = records.last() {
            next_fetch_offset = last;
        }
    }
    FetchedRecords { records, next_fetch_offset }
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
    pub fn on_timer(&mut self, timer: Timer) -> Effects {
        if let Timer::RequestTimeout { correlation_id } = timer {
            self.in_flight.remove(&correlation_id);
        }
        Effects::default()
    }

    pub fn on_message(&mut self, now_ms: TimeMs, env: Envelope) -> Effects {
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
