//! A group coordinator taking a `__consumer_offsets` partition over loads its groups from the log, ported
//! from the Scala coordinator's `GroupMetadataManagerTest` (before 4.0; the 4.x runtime replays the same
//! records): `testLoadOffsetsAndGroup`, `testLoadGroupAndOffsetsFromDifferentSegments` and
//! `testUnloadOffsetsAndGroup`. The records are what this engine writes (`OffsetsRecord`).

use std::collections::BTreeSet;
use txnsim_engine::group_coordinator::{GroupCoordinator, GroupMetadata, GroupState, OffsetsRecord, StoredMember};
use txnsim_engine::log::PartitionLog;
use txnsim_engine::producer_state::AppendOrigin;
use txnsim_engine::protocol::{Effects, NodeId};
use txnsim_engine::record::{CompressionType, ProduceBatch};
use txnsim_engine::topic::offsets_partition_for;
use txnsim_engine::{Mutations, TopicPartition};

const GROUP: &str = "foo";

/// The source's `buildStableGroupRecordWithMember`: a Stable generation whose one member leads.
fn stable_group(generation: i32, member: &str) -> OffsetsRecord {
    let member = StoredMember {
        id: member.into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 60_000,
        protocols: vec![("range".into(), Vec::new())],
        assignment: Vec::new(),
    };
    let metadata = GroupMetadata {
        generation,
        protocol_type: Some("consumer".into()),
        protocol: Some("range".into()),
        leader: Some(member.id.clone()),
        members: vec![member],
    };
    OffsetsRecord::Group { group: GROUP.into(), metadata }
}

/// The source's `createCommittedOffsetRecords`.
fn commits(offsets: &[(&str, u32, i64)]) -> Vec<OffsetsRecord> {
    offsets.iter().map(|(t, p, o)| OffsetsRecord::offset(GROUP, &TopicPartition::new(t, *p), &(*o, None))).collect()
}

/// The group's partition with `batches` of records appended in order, as the coordinator writes them.
fn log_of(batches: &[Vec<OffsetsRecord>]) -> PartitionLog {
    let mut log = PartitionLog::new();
    for records in batches {
        let batch = ProduceBatch {
            producer: None,
            is_transactional: false,
            values: records.iter().map(OffsetsRecord::to_value).collect(),
            compression: CompressionType::None,
        };
        log.append_data(&batch, AppendOrigin::Coordinator, 0, &Mutations::default()).expect("appended");
    }
    log
}

fn offsets_of(groups: &GroupCoordinator) -> Vec<(String, i64)> {
    groups.groups[GROUP].offsets.iter().map(|(tp, (o, _))| (tp.to_string(), *o)).collect()
}

#[test]
fn offsets_and_a_stable_group_are_loaded() {
    let tp = offsets_partition_for(GROUP);
    let log = log_of(&[
        commits(&[("foo", 0, 23), ("foo", 1, 455), ("bar", 0, 8992)]),
        vec![stable_group(935, "98098230493")],
    ]);
    let mut groups = GroupCoordinator::default();
    groups.load(&tp, &log, 100, &Mutations::none());
    let group = &groups.groups[GROUP];
    assert_eq!((group.state, group.generation_id), (GroupState::Stable, 935), "the group as its record left it");
    let members: BTreeSet<&String> = group.member_ids().collect();
    assert_eq!(members, BTreeSet::from([&"98098230493".to_string()]), "its one member");
    assert_eq!(
        offsets_of(&groups),
        vec![("bar/0".into(), 8992), ("foo/0".into(), 23), ("foo/1".into(), 455)],
        "every committed offset"
    );
    assert_eq!(groups.next_deadline_ms(), Some(100 + 10_000), "the member's session restarts at the load");
}

#[test]
fn later_records_override_earlier_ones() {
    let tp = offsets_partition_for(GROUP);
    let log = log_of(&[
        commits(&[("foo", 0, 23), ("foo", 1, 455), ("xxx", 0, 42)]),
        vec![stable_group(293, "a")],
        commits(&[("foo", 0, 33), ("bar", 0, 8992), ("xxx", 0, 10)]),
        vec![stable_group(293, "b")],
    ]);
    let mut groups = GroupCoordinator::default();
    groups.load(&tp, &log, 0, &Mutations::none());
    let members: Vec<&String> = groups.groups[GROUP].member_ids().collect();
    assert_eq!(members, vec!["b"], "the second group record's member is the only member");
    assert_eq!(
        offsets_of(&groups),
        vec![("bar/0".into(), 8992), ("foo/0".into(), 33), ("foo/1".into(), 455), ("xxx/0".into(), 10)],
        "the second segment's offsets override the first's for the same partitions"
    );
}

#[test]
fn unloading_removes_the_partitions_groups() {
    let tp = offsets_partition_for(GROUP);
    let log = log_of(&[commits(&[("foo", 0, 23)]), vec![stable_group(2, "m")]]);
    let mut groups = GroupCoordinator::default();
    groups.load(&tp, &log, 0, &Mutations::none());
    let mut effects = Effects::default();
    groups.unload(&TopicPartition::new("__consumer_offsets", tp.partition + 1), &NodeId::Broker(0), &mut effects);
    assert!(groups.groups.contains_key(GROUP), "another partition's unload leaves the group");
    groups.unload(&tp, &NodeId::Broker(0), &mut effects);
    assert!(!groups.groups.contains_key(GROUP), "removed group remained in cache");
    assert!(effects.sends.is_empty(), "nobody was waiting for a join or a sync");
}

/// `OffsetMetadataManagerTest#testFetchOffsetsAtDifferentCommittedOffset`: five commits, one record each
/// at offsets 0 to 4 of the group's partition; a fetch at committed offset `k` sees the first `k`, and a
/// stable fetch (every record, as a write operation reads) sees all five.
#[test]
fn offsets_are_fetched_as_of_a_committed_offset() {
    let tp = offsets_partition_for(GROUP);
    let log = log_of(&[
        commits(&[("foo", 0, 100)]),
        commits(&[("foo", 1, 110)]),
        commits(&[("bar", 0, 200)]),
        commits(&[("foo", 1, 111)]),
        commits(&[("bar", 1, 210)]),
    ]);
    let mut groups = GroupCoordinator::default();
    groups.load(&tp, &log, 0, &Mutations::none());
    let partitions = ["foo/0", "foo/1", "bar/0", "bar/1"].map(|p| {
        let (t, n) = p.split_once('/').unwrap();
        TopicPartition::new(t, n.parse().unwrap())
    });
    let at_of = |groups: &GroupCoordinator, committed: Option<u64>| -> Vec<Option<i64>> {
        groups
            .fetch_offsets(GROUP, Some(partitions.to_vec()), false, committed)
            .into_iter()
            .map(|(_, r)| r.expect("no error").map(|(o, _)| o))
            .collect()
    };
    let at = |committed| at_of(&groups, committed);
    assert_eq!(at(Some(0)), [None, None, None, None], "nothing committed at 0");
    assert_eq!(at(Some(1)), [Some(100), None, None, None], "foo-0 at 1");
    assert_eq!(at(Some(2)), [Some(100), Some(110), None, None], "foo-1 at 2");
    assert_eq!(at(Some(3)), [Some(100), Some(110), Some(200), None], "bar-0 at 3");
    assert_eq!(at(Some(4)), [Some(100), Some(111), Some(200), None], "foo-1 moved at 4");
    assert_eq!(at(Some(5)), [Some(100), Some(111), Some(200), Some(210)], "bar-1 at 5");
    assert_eq!(at(None), [Some(100), Some(111), Some(200), Some(210)], "every record");
    groups.settle(&tp, 5);
    assert_eq!(at_of(&groups, Some(0)), [Some(100), Some(111), Some(200), Some(210)], "all below the HW: committed");
}
