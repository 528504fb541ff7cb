//! The group coordinator's side of TxnOffsetCommit for classic groups (KIP-447), ported from
//! `OffsetMetadataManagerTest @ 1eb7644349cb`, and the offsets partition a group id maps to.

use txnsim_engine::group_coordinator::{offsets_partition_for, GroupCoordinator, GroupMessage, JoinRequest};
use txnsim_engine::protocol::{Effects, Message, NodeId};
use txnsim_engine::{EngineConfig, KafkaError, TopicPartition};

/// A classic group "foo" with one member at generation 1 (`group.initNextGeneration()` in the source),
/// joined through JoinGroup and the initial rebalance delay; returns the member id.
fn group_at_generation_one(groups: &mut GroupCoordinator) -> String {
    let config = EngineConfig::default();
    let me = NodeId::Broker(0);
    let join = JoinRequest {
        member_id: String::new(),
        require_known_member_id: false,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Vec::new())],
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
    };
    let mut effects = Effects::default();
    let asker = (NodeId::Client("c".into()), 1);
    groups.handle(
        0,
        &config,
        &me,
        asker,
        GroupMessage::JoinGroupRequest { group_id: "foo".into(), join },
        &mut effects,
    );
    groups.tick(config.group_initial_rebalance_delay_ms, &me, &mut effects);
    let joined = effects.sends.iter().find_map(|e| match &e.message {
        Message::Group(GroupMessage::JoinGroupResponse { member_id, result: Ok(j) }) => {
            Some((member_id.clone(), j.generation_id))
        }
        _ => None,
    });
    let (member, generation) = joined.expect("the join completes once the initial delay is over");
    assert_eq!(generation, 1, "the first generation of the group");
    member
}

/// `testGenericGroupTransactionalOffsetCommit`: the member at its generation commits (the group's state is
/// not enforced for transactional commits); `...WithIllegalGenerationId`: generation 100 is refused.
#[test]
fn classic_group_member_commits_only_at_its_generation() {
    let mut groups = GroupCoordinator::default();
    let member = group_at_generation_one(&mut groups);
    assert_eq!(groups.validate_txn_offset_commit("foo", 1, &member), Ok(()), "the member at generation 1");
    assert_eq!(
        groups.validate_txn_offset_commit("foo", 100, &member),
        Err(KafkaError::IllegalGeneration),
        "assertThrows(IllegalGenerationException.class, ...) at generation 100"
    );
    assert_eq!(
        groups.validate_txn_offset_commit("foo", 1, "not-a-member"),
        Err(KafkaError::UnknownMemberId),
        "an id the group does not know"
    );
    // A producer that gives only the group id (TxnOffsetCommit v0-v2) is not checked against members.
    assert_eq!(groups.validate_txn_offset_commit("foo", -1, ""), Ok(()), "no group metadata given");
}

/// `testGenericGroupTransactionalOffsetCommitWithUnknownGroupId`: an unknown group with a generation is
/// ILLEGAL_GENERATION; without one (-1) it is created as a simple group and accepted.
#[test]
fn unknown_group_with_a_generation_is_an_illegal_generation() {
    let mut groups = GroupCoordinator::default();
    assert_eq!(groups.validate_txn_offset_commit("foo", 10, "member"), Err(KafkaError::IllegalGeneration));
    assert!(!groups.groups.contains_key("foo"), "a refused commit creates no group");
    assert_eq!(groups.validate_txn_offset_commit("foo", -1, ""), Ok(()));
    assert!(groups.groups.contains_key("foo"), "the simple group exists now");
    assert_eq!(groups.validate_txn_offset_commit("", -1, ""), Err(KafkaError::InvalidGroupId));
}

/// `GroupCoordinatorService.partitionFor`: |String.hashCode| mod 50 ("foo".hashCode() is 101574).
#[test]
fn group_ids_map_to_offsets_partitions_as_in_kafka() {
    assert_eq!(offsets_partition_for("foo"), TopicPartition::new("__consumer_offsets", 24));
    assert_eq!(offsets_partition_for("g"), TopicPartition::new("__consumer_offsets", 3));
    assert_eq!(offsets_partition_for(""), TopicPartition::new("__consumer_offsets", 0));
    // A hash whose absolute value overflows (Integer.MIN_VALUE) maps to 0, as `Utils.abs` does.
    assert_eq!(offsets_partition_for("polygenelubricants"), TopicPartition::new("__consumer_offsets", 0));
}
