//! The group coordinator's side of OffsetCommit and TxnOffsetCommit for classic groups (KIP-447), ported
//! from `OffsetMetadataManagerTest @ 1eb7644349cb`, the offsets partition a group id maps to, and a
//! SyncGroup completing only once the group's metadata record is stored.

use txnsim_engine::group_coordinator::{GroupCoordinator, GroupState};

use txnsim_engine::topic::offsets_partition_for;

use txnsim_engine::protocol::group::{GroupMessage, JoinRequest};
use txnsim_engine::protocol::{Effects, Message, NodeId};
use txnsim_engine::{EngineConfig, KafkaError, Mutation, Mutations, TopicPartition};

/// The source's 5000 is below the broker's `group.min.session.timeout.ms` (6000); the halves are what count.
const SESSION_TIMEOUT_MS: u64 = 10_000;

fn join_request(member_id: &str) -> JoinRequest {
    JoinRequest {
        member_id: member_id.into(),
        require_known_member_id: false,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Vec::new())],
        session_timeout_ms: SESSION_TIMEOUT_MS,
        rebalance_timeout_ms: 10_000,
    }
}

/// A classic group "foo" with one member at generation 1 (`group.initNextGeneration()` in the source),
/// joined through JoinGroup and the initial rebalance delay; returns the member id.
fn group_at_generation_one(groups: &mut GroupCoordinator) -> String {
    let config = EngineConfig::default();
    let me = NodeId::Broker(0);
    let join = join_request("");
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
    assert_eq!(
        groups.validate_txn_offset_commit("foo", 1, &member, &Mutations::none()),
        Ok(()),
        "the member at generation 1"
    );
    assert_eq!(
        groups.validate_txn_offset_commit("foo", 100, &member, &Mutations::none()),
        Err(KafkaError::IllegalGeneration),
        "assertThrows(IllegalGenerationException.class, ...) at generation 100"
    );
    assert_eq!(
        groups.validate_txn_offset_commit("foo", 1, "not-a-member", &Mutations::none()),
        Err(KafkaError::UnknownMemberId),
        "an id the group does not know"
    );
    // A producer that gives only the group id (TxnOffsetCommit v0-v2) is not checked against members.
    assert_eq!(groups.validate_txn_offset_commit("foo", -1, "", &Mutations::none()), Ok(()), "no group metadata given");
}

/// `testGenericGroupTransactionalOffsetCommitWithUnknownGroupId`: an unknown group with a generation is
/// ILLEGAL_GENERATION; without one (-1) it is created as a simple group and accepted.
#[test]
fn unknown_group_with_a_generation_is_an_illegal_generation() {
    let mut groups = GroupCoordinator::default();
    assert_eq!(
        groups.validate_txn_offset_commit("foo", 10, "member", &Mutations::none()),
        Err(KafkaError::IllegalGeneration)
    );
    assert!(!groups.groups.contains_key("foo"), "a refused commit creates no group");
    assert_eq!(groups.validate_txn_offset_commit("foo", -1, "", &Mutations::none()), Ok(()));
    assert!(groups.groups.contains_key("foo"), "the simple group exists now");
    assert_eq!(groups.validate_txn_offset_commit("", -1, "", &Mutations::none()), Err(KafkaError::InvalidGroupId));
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

/// A plain OffsetCommit of offset 100 for bar-0 by `member` at `generation`, at `now_ms`.
fn commit(
    groups: &mut GroupCoordinator,
    config: &EngineConfig,
    now_ms: u64,
    generation: i32,
    member: &str,
) -> Result<(), KafkaError> {
    let mut effects = Effects::default();
    let offsets = vec![(TopicPartition::new("bar", 0), (100, None))];
    let request = GroupMessage::OffsetCommitRequest {
        group_id: "foo".into(),
        generation_id: generation,
        member_id: member.into(),
        offsets,
    };
    groups.handle(now_ms, config, &NodeId::Broker(0), (NodeId::Client("c".into()), 2), request, &mut effects);
    let answer = effects.sends.iter().find_map(|e| match &e.message {
        Message::Group(GroupMessage::OffsetCommitResponse { results }) => Some(results[0].1),
        _ => None,
    });
    answer.expect("OffsetCommit is answered at once")
}

/// The broker's part after a SyncGroup: the group's metadata record is written and replicated, and its
/// outcome handed back (`GroupStored`), which completes the generation.
fn stored(groups: &mut GroupCoordinator, config: &EngineConfig, now_ms: u64, effects: &mut Effects) {
    let me = NodeId::Broker(0);
    for w in groups.take_writes() {
        if let Some(generation) = w.stored {
            let done = GroupMessage::GroupStored { group_id: w.group_id, generation, result: Ok(()) };
            groups.handle(now_ms, config, &me, (me.clone(), 0), done, effects);
        }
    }
}

/// What the two ports below observe, under `mutations`: the commit right after the first generation's
/// JoinGroup answer, then (the generation synced) whether the member outlives one session timeout that a
/// commit in its middle restarted, and the commit of the first member while a second joins.
fn offset_commit_outcomes(mutations: Mutations) -> (Result<(), KafkaError>, bool, Result<(), KafkaError>) {
    let config = EngineConfig { mutations, ..EngineConfig::default() };
    let me = NodeId::Broker(0);
    let mut groups = GroupCoordinator::default();
    let member = group_at_generation_one(&mut groups);
    let t0 = config.group_initial_rebalance_delay_ms;
    // testGenericGroupOffsetCommitWhileInCompletingRebalanceState: generation 1, not yet synced.
    let completing = commit(&mut groups, &config, t0, 1, &member);
    let mut effects = Effects::default();
    let sync = GroupMessage::SyncGroupRequest {
        group_id: "foo".into(),
        generation_id: 1,
        member_id: member.clone(),
        assignments: vec![(member.clone(), vec![1])],
    };
    groups.handle(t0, &config, &me, (NodeId::Client("c".into()), 3), sync, &mut effects);
    stored(&mut groups, &config, t0, &mut effects);
    // testGenericGroupOffsetCommitMaintainsSession: commit half way through the session, sleep the other half.
    let _ = commit(&mut groups, &config, t0 + SESSION_TIMEOUT_MS / 2, 1, &member);
    groups.tick(t0 + SESSION_TIMEOUT_MS, &me, &mut effects);
    let kept = groups.groups["foo"].has_member(&member);
    // A second member's JoinGroup sends the group to PreparingRebalance; the first member's generation 1
    // is still current, and `OffsetMetadataManager.commitOffset` accepts (and keeps its session) there.
    let join = GroupMessage::JoinGroupRequest { group_id: "foo".into(), join: join_request("") };
    groups.handle(t0 + SESSION_TIMEOUT_MS, &config, &me, (NodeId::Client("d".into()), 4), join, &mut effects);
    let preparing = commit(&mut groups, &config, t0 + SESSION_TIMEOUT_MS, 1, &member);
    (completing, kept, preparing)
}

/// `testGenericGroupOffsetCommitWhileInCompletingRebalanceState` ("assertThrows(RebalanceInProgressException
/// ...)" at generation 1 right after `initNextGeneration`), `testGenericGroupOffsetCommitMaintainsSession`
/// ("assertEquals(Collections.emptyList(), context.sleep(5000 / 2))" after the commit), and the
/// PreparingRebalance branch of `OffsetMetadataManager.commitOffset` (derived from the source: no test of
/// Kafka's commits in that state).
#[test]
fn plain_offset_commit_follows_the_classic_group_state_as_kafka() {
    let (completing, kept, preparing) = offset_commit_outcomes(Mutations::default());
    assert_eq!(completing, Err(KafkaError::RebalanceInProgress), "a commit before the generation is synced");
    assert!(
        kept,
        "the commit half way through the session restarts it: the member is still there a session after the sync"
    );
    assert_eq!(preparing, Ok(()), "a member at the current generation commits while the group prepares a rebalance");
}

/// The mutation restoring the engine's old rules is caught by the ported expectations above, each of them.
#[test]
fn offset_commit_refused_while_preparing_rebalance_is_caught_by_the_ports() {
    let m = Mutation::OffsetCommitRefusedWhilePreparingRebalance;
    let (completing, kept, preparing) = offset_commit_outcomes(Mutations::one(m));
    assert_eq!(
        completing,
        Ok(()),
        "under {}: accepted before the sync, where Kafka says REBALANCE_IN_PROGRESS",
        m.name()
    );
    assert!(
        !kept,
        "under {}: the commit does not extend the session, so the member expires a session after the sync",
        m.name()
    );
    // The member expired above, so this commit names no member.
    assert_eq!(preparing, Err(KafkaError::UnknownMemberId), "under {}: the expired member's commit", m.name());
}

/// A SyncGroup's answer: the protocol and the member's assignment.
type SyncAnswer = Result<(String, Vec<u8>), KafkaError>;

/// The leader's SyncGroup of generation 1, then the broker's word on its metadata record (`outcome`:
/// `None` while it is not replicated yet), under `mutations`: the SyncGroup answers sent by then, and the
/// group's state.
fn sync_then_store(mutations: Mutations, outcome: Option<Result<(), KafkaError>>) -> (Vec<SyncAnswer>, GroupState) {
    let config = EngineConfig { mutations, ..EngineConfig::default() };
    let me = NodeId::Broker(0);
    let mut groups = GroupCoordinator::default();
    let member = group_at_generation_one(&mut groups);
    let t0 = config.group_initial_rebalance_delay_ms;
    let mut effects = Effects::default();
    let sync = GroupMessage::SyncGroupRequest {
        group_id: "foo".into(),
        generation_id: 1,
        member_id: member.clone(),
        assignments: vec![(member.clone(), vec![7])],
    };
    groups.handle(t0, &config, &me, (NodeId::Client("c".into()), 3), sync, &mut effects);
    let writes = groups.take_writes();
    assert_eq!(writes.len(), 1, "one metadata record for the new assignment");
    if let Some(result) = outcome {
        let generation = writes[0].stored.expect("the record completes generation 1");
        let done = GroupMessage::GroupStored { group_id: "foo".into(), generation, result };
        groups.handle(t0, &config, &me, (me.clone(), 0), done, &mut effects);
    }
    let answers = effects
        .sends
        .iter()
        .filter_map(|e| match &e.message {
            Message::Group(GroupMessage::SyncGroupResponse { result }) => Some(result.clone()),
            _ => None,
        })
        .collect();
    (answers, groups.groups["foo"].state)
}

/// `GroupMetadataManager`'s classic SyncGroup: the leader's assignment is appended as the group's
/// metadata record, and only its append callback propagates it and makes the group Stable; a failed
/// append is answered to every waiting member (`appendGroupMetadataErrorToResponseError`:
/// NOT_ENOUGH_REPLICAS becomes COORDINATOR_NOT_AVAILABLE) and the group rebalances. Derived from the
/// source's callback; no test of Kafka's ported.
#[test]
fn a_sync_is_answered_once_the_groups_metadata_is_stored() {
    let waiting = sync_then_store(Mutations::default(), None);
    assert_eq!(waiting, (vec![], GroupState::CompletingRebalance), "nothing answered before the write");
    let stored = sync_then_store(Mutations::default(), Some(Ok(())));
    assert_eq!(stored, (vec![Ok(("range".into(), vec![7]))], GroupState::Stable), "then the assignment");
    let failed = sync_then_store(Mutations::default(), Some(Err(KafkaError::NotEnoughReplicas)));
    assert_eq!(
        failed,
        (vec![Err(KafkaError::CoordinatorNotAvailable)], GroupState::PreparingRebalance),
        "a failed write is the members' error, and they rejoin"
    );
}

/// Under `sync-answered-before-stored` the assignment goes out with the SyncGroup; the first expectation
/// above catches it.
#[test]
fn sync_answered_before_stored_is_caught_by_the_port() {
    let got = sync_then_store(Mutations::one(Mutation::SyncAnsweredBeforeStored), None);
    assert_eq!(got, (vec![Ok(("range".into(), vec![7]))], GroupState::Stable), "answered before the write");
}
