//! Kafka's `RangeAssignor` (the classic consumer's default assignor, `partition.assignment.strategy`),
//! which the group leader runs over every member's subscription, and the bytes its subscriptions and
//! assignments travel in (`ConsumerProtocol`, here a plain text form: the coordinator never reads them).

use crate::types::TopicPartition;
use std::collections::{BTreeMap, BTreeSet};

/// The protocol name a member offers in JoinGroup (`RangeAssignor.RANGE_ASSIGNOR_NAME`).
pub const RANGE_ASSIGNOR_NAME: &str = "range";

/// `ConsumerProtocol.serializeSubscription`: the topics a member subscribes to.
pub fn encode_subscription(topics: &BTreeSet<String>) -> Vec<u8> {
    topics.iter().cloned().collect::<Vec<_>>().join(",").into_bytes()
}

/// `ConsumerProtocol.deserializeSubscription`; bytes this module did not write subscribe to nothing.
pub fn decode_subscription(bytes: &[u8]) -> BTreeSet<String> {
    let text = String::from_utf8_lossy(bytes);
    text.split(',').filter(|t| !t.is_empty()).map(str::to_string).collect()
}

/// `ConsumerProtocol.serializeAssignment`: a member's partitions as `topic/partition` items.
pub fn encode_assignment(partitions: &BTreeSet<TopicPartition>) -> Vec<u8> {
    partitions.iter().map(|tp| tp.to_string()).collect::<Vec<_>>().join(",").into_bytes()
}

/// `ConsumerProtocol.deserializeAssignment`; an item that is not `topic/partition` is skipped.
pub fn decode_assignment(bytes: &[u8]) -> BTreeSet<TopicPartition> {
    let text = String::from_utf8_lossy(bytes);
    text.split(',')
        .filter_map(|item| {
            let (topic, n) = item.rsplit_once('/')?;
            Some(TopicPartition::new(topic, n.parse().ok()?))
        })
        .collect()
}

/// `RangeAssignor.assign`: per topic, its members in member-id order each take a contiguous range of
/// `partitions / members` partitions, the first `partitions % members` one more. A topic the leader has no
/// partition count for (`partitions_per_topic`, its metadata) is not assigned.
pub fn assign(
    partitions_per_topic: &BTreeMap<String, u32>,
    subscriptions: &BTreeMap<String, BTreeSet<String>>,
) -> BTreeMap<String, BTreeSet<TopicPartition>> {
    let mut out: BTreeMap<String, BTreeSet<TopicPartition>> =
        subscriptions.keys().map(|m| (m.clone(), BTreeSet::new())).collect();
    for (topic, &count) in partitions_per_topic {
        let members: Vec<&String> = subscriptions.iter().filter(|(_, t)| t.contains(topic)).map(|(m, _)| m).collect();
        if members.is_empty() {
            continue;
        }
        let (per, extra) = (count as usize / members.len(), count as usize % members.len());
        for (i, member) in members.into_iter().enumerate() {
            let start = per * i + i.min(extra);
            let len = per + usize::from(i < extra);
            let taken = (start..start + len).map(|p| TopicPartition::new(topic, p as u32));
            out.get_mut(member).expect("listed above").extend(taken);
        }
    }
    out
}
