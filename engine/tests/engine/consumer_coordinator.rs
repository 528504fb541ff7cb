//! The consumer's group membership (`ConsumerCoordinator`) against the engine's group coordinator, in the
//! in-process cluster: FindCoordinator, KIP-394's second join, the leader's range assignment, the start
//! at the committed offsets, heartbeats, a rebalance when a member leaves, and `groupMetadata()`.

use std::collections::{BTreeMap, BTreeSet};
use txnsim_engine::consumer::{Consumer, GroupRebalanceConfig, MemberState};
use txnsim_engine::protocol::group::GroupMessage;
use txnsim_engine::protocol::{Effects, Message, NodeId};
use txnsim_engine::{Cluster, EngineConfig, IsolationLevel, TopicPartition};

const GROUP: &str = "g";

fn cluster() -> Cluster {
    let topics = BTreeMap::from([("in".to_string(), 3)]);
    Cluster::new(&topics, EngineConfig::default())
}

fn join(cluster: &mut Cluster, name: &str) {
    let mut c = Consumer::new(name, IsolationLevel::ReadCommitted, cluster.broker_id(), cluster.config.clone());
    c.subscribe(GROUP, BTreeMap::from([("in".to_string(), 3)]), GroupRebalanceConfig::default());
    cluster.consumers.insert(name.to_string(), c);
}

/// One `poll()` of every named member, then the cluster runs until quiet.
fn poll(cluster: &mut Cluster, names: &[&str]) {
    for name in names {
        let now = cluster.now_ms;
        let effects = cluster.consumers.get_mut(*name).expect("joined").poll_member(now);
        cluster.apply(&NodeId::Client(name.to_string()), effects);
    }
    cluster.run_until_quiet();
}

fn assignment(cluster: &Cluster, name: &str) -> BTreeSet<String> {
    cluster.consumers[name].group().expect("a member").assignment().iter().map(|tp| tp.to_string()).collect()
}

fn state(cluster: &Cluster, name: &str) -> (MemberState, i32) {
    let group = cluster.consumers[name].group().expect("a member");
    (group.state, group.generation.generation_id)
}

/// Polls every member until each is Stable with its offsets fetched (at most `rounds` rounds, 1 s apart).
fn settle(cluster: &mut Cluster, names: &[&str], rounds: usize) {
    for _ in 0..rounds {
        poll(cluster, names);
        cluster.advance_time(1_000);
    }
}

/// As `RangeAssignorTest#testTwoConsumersOneTopicThreePartitions` has it: the first member takes two.
#[test]
fn two_members_split_three_partitions_by_range() {
    let mut cluster = cluster();
    join(&mut cluster, "a");
    join(&mut cluster, "b");
    settle(&mut cluster, &["a", "b"], 8);
    assert_eq!(state(&cluster, "a"), (MemberState::Stable, 1), "a is in the first generation");
    assert_eq!(state(&cluster, "b"), (MemberState::Stable, 1), "b is in the first generation");
    let (a, b) = (assignment(&cluster, "a"), assignment(&cluster, "b"));
    // Member ids are "client-N" in join order: a's sorts first and takes the extra partition.
    assert_eq!(a, BTreeSet::from(["in/0".to_string(), "in/1".to_string()]), "RangeAssignor: a takes 0..2");
    assert_eq!(b, BTreeSet::from(["in/2".to_string()]), "RangeAssignor: b takes the rest");
    let meta = cluster.consumers["a"].group_metadata().expect("a member");
    assert_eq!((meta.group_id.as_str(), meta.generation_id), (GROUP, 1), "groupMetadata() names the generation");
    assert!(!meta.member_id.is_empty(), "and the member id the coordinator gave (KIP-394)");
    let group = &cluster.broker.groups.groups[GROUP];
    assert!(group.has_member(&meta.member_id), "the coordinator knows the member");
    for name in ["a", "b"] {
        for tp in assignment(&cluster, name) {
            let (topic, n) = tp.split_once('/').expect("topic/partition");
            let position = cluster.consumers[name].position(&TopicPartition::new(topic, n.parse().unwrap()));
            assert_eq!(position, Some(0), "{name}'s {tp} starts at the log start: the group committed nothing");
        }
    }
}

#[test]
fn a_member_starts_from_the_committed_offset() {
    let mut cluster = cluster();
    let commit = GroupMessage::OffsetCommitRequest {
        group_id: GROUP.into(),
        generation_id: -1,
        member_id: String::new(),
        offsets: vec![(TopicPartition::new("in", 1), (4, None))],
    };
    let admin = NodeId::Client("admin".into());
    let mut effects = Effects::default();
    effects.send(&admin, &cluster.broker_id(), 1, Message::Group(commit));
    cluster.apply(&admin, effects);
    cluster.run_until_quiet();
    join(&mut cluster, "a");
    settle(&mut cluster, &["a"], 6);
    assert_eq!(state(&cluster, "a"), (MemberState::Stable, 1), "a alone in the first generation");
    assert_eq!(cluster.consumers["a"].position(&TopicPartition::new("in", 1)), Some(4), "in/1 at its committed 4");
    assert_eq!(cluster.consumers["a"].position(&TopicPartition::new("in", 0)), Some(0), "in/0 from the start");
}

#[test]
fn a_leave_rebalances_the_rest_into_the_next_generation() {
    let mut cluster = cluster();
    join(&mut cluster, "a");
    join(&mut cluster, "b");
    settle(&mut cluster, &["a", "b"], 8);
    let now = cluster.now_ms;
    let effects = cluster.consumers.get_mut("b").expect("joined").close(now);
    cluster.apply(&NodeId::Client("b".into()), effects);
    cluster.run_until_quiet();
    // a learns of the rebalance from its next heartbeat (REBALANCE_IN_PROGRESS) and rejoins.
    settle(&mut cluster, &["a"], 10);
    assert_eq!(state(&cluster, "a"), (MemberState::Stable, 2), "a alone in generation 2");
    let all: BTreeSet<String> = (0..3).map(|p| format!("in/{p}")).collect();
    assert_eq!(assignment(&cluster, "a"), all, "a takes every partition");
    assert_eq!(cluster.broker.groups.groups[GROUP].member_ids().count(), 1, "b left the group");
}
