//! Coordinator failover in the in-process cluster: `__transaction_state` is replicated, its leader is the
//! coordinator with the partition's leader epoch as coordinator epoch, and a new leader loads the log
//! (`TransactionStateManager.loadTransactionsForTxnTopicPartition`) and finishes what its predecessor
//! decided.

use std::collections::BTreeMap;
use txnsim_engine::cluster::Step;
use txnsim_engine::coordinator::{
    Ctx, DecisionCause, PartitionLeaders, TransactionCoordinator, TransactionMetadata, TransactionState, TxnLogValue,
};
use txnsim_engine::producer::{ConsumerGroupMetadata, OpOutput};
use txnsim_engine::protocol::group::GroupMessage;
use txnsim_engine::protocol::{Effects, Envelope, Message, NodeId};
use txnsim_engine::topic::transaction_state_partition;
use txnsim_engine::{
    Cluster, EngineConfig, IsolationLevel, KafkaError, Mutation, Mutations, ProducerKind, Proposal, TopicPartition,
    Topology, TransactionVersion,
};

fn tp() -> TopicPartition {
    TopicPartition::new("t", 0)
}

fn cluster(config: EngineConfig) -> Cluster {
    let topics: BTreeMap<String, u32> = [("t".to_string(), 1)].into_iter().collect();
    let topology = Topology::new(3, 3);
    Cluster::with_topology(&topics, config, &topology)
}

/// A producer `p` with one record of an open transaction on `t-0`, replicated everywhere.
fn open_transaction(config: EngineConfig) -> Cluster {
    let mut c = cluster(config);
    c.add_producer("p", ProducerKind::Transactional { transactional_id: "p".into() });
    let r = c.call_producer("p", |p, now| p.init_transactions(now));
    assert!(matches!(r, Ok(Some(OpOutput::Initialized(_)))), "init succeeds: {r:?}");
    c.producers.get_mut("p").unwrap().begin_transaction().unwrap();
    let r = c.call_producer("p", |p, now| p.send(now, tp(), vec!["a".into()]));
    assert!(matches!(r, Ok(Some(OpOutput::Sent { .. }))), "the send is acknowledged: {r:?}");
    c
}

fn committed_values(c: &mut Cluster) -> Vec<String> {
    let (records, _) = c.read(IsolationLevel::ReadCommitted, &tp(), 0).expect("a read_committed read");
    records.into_iter().map(|r| r.value).collect()
}

#[test]
fn the_coordinator_moves_with_the_transaction_log_and_an_open_transaction_commits_there() {
    let mut c = open_transaction(EngineConfig::default());
    assert!(c.crash_broker(0), "broker 0, leader of t-0 and __transaction_state-0, crashes");
    c.run_until_quiet();
    let log = &c.controller.partitions[&transaction_state_partition()];
    assert_eq!((log.state.leader, log.state.leader_epoch), (1, 1), "broker 1 leads the transaction log");
    let new = c.broker_mut(1).unwrap();
    assert_eq!(new.txn_manager.loaded_at, Some(1), "broker 1 loaded the log at its leader epoch");
    assert_eq!(new.coordinator.coordinator_epoch, 1, "the coordinator epoch is the log's leader epoch");
    let meta = &new.coordinator.txns["p"];
    assert_eq!(meta.state, TransactionState::Ongoing, "the open transaction was read back from the log");
    let r = c.call_producer("p", |p, now| p.commit_transaction(now));
    assert!(matches!(r, Ok(Some(OpOutput::Committed))), "the client found the new coordinator: {r:?}");
    assert_eq!(committed_values(&mut c), vec!["a"], "the record is committed on the new leader of t-0");
    let marker = c.leader_log(&tp()).unwrap().batches().find_map(|b| b.marker()).expect("a marker");
    assert_eq!(marker.coordinator_epoch, 1, "written by the new coordinator");
}

/// Broker 0 crashes the moment its PrepareCommit is durable, before any marker is sent.
fn crash_after_prepare_commit(config: EngineConfig) -> Cluster {
    let mut c = open_transaction(config);
    let (_, effects) = c.producers.get_mut("p").unwrap().commit_transaction(c.now_ms).unwrap();
    c.apply(&NodeId::Client("p".into()), effects);
    loop {
        let markers_out = c.peek_message().is_some_and(|e| matches!(e.message, Message::WriteTxnMarkersRequest { .. }));
        if markers_out {
            break;
        }
        assert!(c.step(), "the commit's markers go out");
    }
    assert!(c.crash_broker(0), "broker 0 crashes with its markers unsent");
    c.run_until_quiet();
    c
}

#[test]
fn a_new_coordinator_resends_the_markers_of_a_durable_prepare_commit() {
    let mut c = crash_after_prepare_commit(EngineConfig::default());
    let new = c.broker_mut(1).unwrap();
    assert_eq!(new.coordinator.txns["p"].state, TransactionState::CompleteCommit, "the loaded commit completed");
    assert_eq!(committed_values(&mut c), vec!["a"], "the reloaded decision's marker committed the record");
}

#[test]
fn no_marker_resend_on_failover_leaves_the_transaction_open() {
    let config =
        EngineConfig { mutations: Mutations::one(Mutation::NoMarkerResendOnFailover), ..EngineConfig::default() };
    let mut c = crash_after_prepare_commit(config);
    let new = c.broker_mut(1).unwrap();
    assert_eq!(new.coordinator.txns["p"].state, TransactionState::PrepareCommit, "nobody finishes the commit");
    assert_eq!(committed_values(&mut c), Vec::<String>::new(), "the LSO stays at the open transaction");
}

/// Broker 1 has fetched broker 0's PrepareCommit, but not yet the HW that covers it, when brokers 2 and 0
/// crash: broker 1 leads `__transaction_state` alone, its ISR under `transaction.state.log.min.isr`, and
/// its log holds a record above its HW. Its load has run (`Timer::LoadTransactionLog` fired).
fn prepare_commit_above_the_new_leaders_hw(config: EngineConfig) -> Cluster {
    let mut c = open_transaction(config);
    let log_end = |c: &mut Cluster| {
        c.broker_mut(1).unwrap().replica_manager.logs[&transaction_state_partition()].log_end_offset()
    };
    let before = log_end(&mut c);
    let (_, effects) = c.producers.get_mut("p").unwrap().commit_transaction(c.now_ms).unwrap();
    c.apply(&NodeId::Client("p".into()), effects);
    while log_end(&mut c) == before {
        assert!(c.step(), "broker 1 fetches the PrepareCommit");
    }
    assert!(c.crash_broker(2) && c.crash_broker(0), "brokers 2 and 0 crash");
    while c.peek_message().is_some() {
        c.step();
    }
    c.fire_timers_until(c.now_ms);
    let b = c.broker_mut(1).unwrap();
    assert_eq!(b.txn_manager.log_epoch, Some(1), "broker 1 leads the transaction log at epoch 1");
    let log = &b.replica_manager.logs[&transaction_state_partition()];
    assert!(log.high_watermark() < log.log_end_offset(), "the PrepareCommit is above broker 1's HW");
    c
}

/// Kafka 4.3's `TransactionStateManager` loads to `FetchIsolation.LOG_END` (`TransactionStateManagerTest`
/// stubs every load's read with `LOG_END`): the new coordinator takes in and acts on the PrepareCommit,
/// which a later clean election of broker 2 would lose.
#[test]
fn kafkas_coordinator_loads_records_above_its_hw() {
    let mut c = prepare_commit_above_the_new_leaders_hw(EngineConfig::default());
    let b = c.broker_mut(1).unwrap();
    assert_eq!(b.txn_manager.loaded_at, Some(1), "loaded, its HW below the log end");
    assert_eq!(b.coordinator.txns["p"].state, TransactionState::PrepareCommit, "the unreplicated decision is loaded");
}

/// The `load-waits-for-hw` proposal: the load waits until the HW reaches the log end, so nothing a clean
/// election may lose is acted on; once broker 2 is back and caught up, the commit completes.
#[test]
fn the_load_waits_for_hw_proposal_loads_only_replicated_records() {
    let config = EngineConfig { proposal: Some(Proposal::LoadWaitsForHw), ..EngineConfig::default() };
    let mut c = prepare_commit_above_the_new_leaders_hw(config);
    c.fire_timers_until(c.now_ms + 10_000);
    assert_eq!(c.broker_mut(1).unwrap().txn_manager.loaded_at, None, "still loading: the HW cannot move below min.isr");
    assert!(c.start_broker(2), "broker 2 comes back");
    assert!(c.run_until_quiet(), "the cluster settles");
    let b = c.broker_mut(1).unwrap();
    assert_eq!(b.txn_manager.loaded_at, Some(1), "loaded once broker 2 replicated the log");
    assert_eq!(b.coordinator.txns["p"].state, TransactionState::CompleteCommit, "the replicated commit completed");
    assert_eq!(committed_values(&mut c), vec!["a"], "the resent marker committed the record");
}

/// `UnifiedLogTest#testZombieCoordinatorFenced`, across a failover: the first commit's WriteTxnMarkers
/// from broker 0 (coordinator epoch 0) arrives late at t-0's new leader, after the new coordinator
/// (epoch 1) committed a second transaction there and while a third is open.
fn late_marker_from_the_old_coordinator(config: EngineConfig) -> Cluster {
    let mut c = open_transaction(config);
    let (_, effects) = c.producers.get_mut("p").unwrap().commit_transaction(c.now_ms).unwrap();
    c.apply(&NodeId::Client("p".into()), effects);
    let late = loop {
        if let Some(e) = c.peek_message().filter(|e| matches!(e.message, Message::WriteTxnMarkersRequest { .. })) {
            break e.clone();
        }
        assert!(c.step(), "the first commit's markers go out");
    };
    c.run_until_quiet();
    assert!(c.crash_broker(0), "broker 0 crashes");
    c.run_until_quiet();
    for (value, commit) in [("b", true), ("c", false)] {
        c.producers.get_mut("p").unwrap().begin_transaction().unwrap();
        let r = c.call_producer("p", |p, now| p.send(now, tp(), vec![value.into()]));
        assert!(matches!(r, Ok(Some(OpOutput::Sent { .. }))), "{value} is written on the new leader: {r:?}");
        if commit {
            let r = c.call_producer("p", |p, now| p.commit_transaction(now));
            assert!(matches!(r, Ok(Some(OpOutput::Committed))), "{value}'s transaction commits: {r:?}");
        }
    }
    c.inject(Envelope { to: NodeId::Broker(1), ..late });
    c.run_until_quiet();
    c
}

#[test]
fn a_late_marker_of_the_old_coordinator_is_fenced() {
    let mut c = late_marker_from_the_old_coordinator(EngineConfig::default());
    assert_eq!(committed_values(&mut c), vec!["a", "b"], "the open transaction stays open");
}

#[test]
fn failover_keeps_coordinator_epoch_is_caught() {
    let config =
        EngineConfig { mutations: Mutations::one(Mutation::FailoverKeepsCoordinatorEpoch), ..EngineConfig::default() };
    let mut c = late_marker_from_the_old_coordinator(config);
    assert_eq!(committed_values(&mut c), vec!["a", "b", "c"], "the old coordinator's marker commits it half-written");
}

/// `TransactionCoordinatorTest#shouldRespondWithCoordinatorLoadInProgressOnInitPidWhenCoordinatorLoading`:
/// between its election and its scheduled load (`Timer::LoadTransactionLog`), the new coordinator answers
/// COORDINATOR_LOAD_IN_PROGRESS; once loaded it serves the request.
#[test]
fn a_loading_coordinator_answers_load_in_progress() {
    let mut c = cluster(EngineConfig::default());
    c.crash_broker(0);
    while let Some(env) = c.take_message() {
        c.deliver_message(env);
    }
    let init = |correlation_id| Envelope {
        from: NodeId::Client("q".into()),
        to: NodeId::Broker(1),
        correlation_id,
        message: Message::InitProducerIdRequest {
            transactional_id: Some("q".into()),
            transaction_timeout_ms: 60_000,
            producer_id_and_epoch: None,
        },
    };
    let answer = |c: &mut Cluster| loop {
        let env = c.take_message().expect("broker 1 answers");
        match env.message {
            Message::InitProducerIdResponse { result } => break result,
            _ => c.deliver_message(env),
        }
    };
    c.inject(init(1));
    let env = c.take_message().expect("in flight");
    c.deliver_message(env);
    assert_eq!(answer(&mut c), Err(KafkaError::CoordinatorLoadInProgress), "elected, not loaded yet");
    c.fire_timers_until(c.now_ms);
    c.inject(init(2));
    assert!(answer(&mut c).is_ok(), "loaded, it serves the request");
}

/// `sendOffsetsToTransaction` after the transaction coordinator moved off broker 0, which still hosts the
/// group coordinator: the group coordinator verifies the offsets partition with the coordinator on broker
/// 1 over the network (`AddPartitionsToTxnManager`), and the offsets commit with the transaction.
#[test]
fn transactional_offsets_commit_once_the_coordinator_moved() {
    let mut c = cluster(EngineConfig::default());
    c.crash_broker(0);
    c.run_until_quiet();
    c.start_broker(0);
    c.run_until_quiet();
    c.fire_timers_until(c.now_ms);
    c.run_until_quiet();
    assert_eq!(c.broker_mut(1).unwrap().txn_manager.loaded_at, Some(1), "broker 1 coordinates");
    c.add_producer("p", ProducerKind::Transactional { transactional_id: "p".into() });
    let r = c.call_producer("p", |p, now| p.init_transactions(now));
    assert!(matches!(r, Ok(Some(OpOutput::Initialized(_)))), "init succeeds: {r:?}");
    c.producers.get_mut("p").unwrap().begin_transaction().unwrap();
    let group = ConsumerGroupMetadata { group_id: "g".into(), generation_id: -1, member_id: String::new() };
    let offsets = vec![(tp(), (5, None))];
    let r = c.call_producer("p", |p, now| p.send_offsets_to_transaction(now, offsets, group));
    assert!(matches!(r, Ok(Some(OpOutput::OffsetsSent))), "the group coordinator took the offsets: {r:?}");
    let r = c.call_producer("p", |p, now| p.commit_transaction(now));
    assert!(matches!(r, Ok(Some(OpOutput::Committed))), "the transaction commits: {r:?}");
    let fetched = c.broker_mut(0).unwrap().groups.fetch_offsets("g", Some(vec![tp()]), true, None);
    assert_eq!(fetched, vec![(tp(), Ok(Some((5, None))))], "the COMMIT marker made the offset the group's");
}

/// Producer `p`'s open transaction has sent offset 5 of 'g' for `t/0` to the group coordinator (its first
/// try waits for the controller to create `__consumer_offsets`, its retry is taken).
fn offsets_sent_in_a_transaction(config: EngineConfig) -> Cluster {
    let mut c = cluster(config);
    c.add_producer("p", ProducerKind::Transactional { transactional_id: "p".into() });
    let r = c.call_producer("p", |p, now| p.init_transactions(now));
    assert!(matches!(r, Ok(Some(OpOutput::Initialized(_)))), "init succeeds: {r:?}");
    c.producers.get_mut("p").unwrap().begin_transaction().unwrap();
    let group = ConsumerGroupMetadata { group_id: "g".into(), generation_id: -1, member_id: String::new() };
    let r = c.call_producer("p", |p, now| p.send_offsets_to_transaction(now, vec![(tp(), (5, None))], group));
    assert!(matches!(r, Ok(None)), "FindCoordinator(GROUP) has the controller create the topic first: {r:?}");
    c.advance_time(1_000);
    let done: Vec<_> = c.producers.get_mut("p").unwrap().take_completions().into_iter().map(|d| d.result).collect();
    assert_eq!(done, vec![Ok(OpOutput::OffsetsSent)], "retried, the group coordinator took the offsets");
    c
}

/// A transaction's offsets are written to the group's `__consumer_offsets/3` (led by broker 0, replicas
/// 0, 2, 1) and pending when broker 0, the leader of both `__transaction_state` and the group's partition,
/// crashes. Broker 2 takes the group over and loads the offsets' batch as pending (`replay` of a
/// transactional offset commit: no marker follows it yet); broker 1 takes the transaction over, and the
/// commit's marker reaches broker 2, which makes the offset the group's.
#[test]
fn pending_transactional_offsets_survive_the_group_coordinators_crash() {
    let mut c = offsets_sent_in_a_transaction(EngineConfig::default());
    let offsets = TopicPartition::new("__consumer_offsets", 3);
    let leader = |c: &mut Cluster| c.controller.partitions[&offsets].state.leader;
    assert_eq!(leader(&mut c), 0, "broker 0 coordinates group g");
    c.run_until_quiet();

    c.crash_broker(0);
    c.run_until_quiet();
    c.fire_timers_until(c.now_ms);
    c.run_until_quiet();
    assert_eq!(leader(&mut c), 2, "broker 2 leads the group's partition");
    let pending = c.broker_mut(2).unwrap().groups.fetch_offsets("g", Some(vec![tp()]), true, None);
    assert_eq!(pending, vec![(tp(), Err(KafkaError::UnstableOffsetCommit))], "loaded as pending, not committed");

    let r = c.call_producer("p", |p, now| p.commit_transaction(now));
    assert!(matches!(r, Ok(Some(OpOutput::Committed))), "the transaction commits on broker 1: {r:?}");
    let fetched = c.broker_mut(2).unwrap().groups.fetch_offsets("g", Some(vec![tp()]), true, None);
    assert_eq!(fetched, vec![(tp(), Ok(Some((5, None))))], "the COMMIT marker on broker 2 made it the group's");
}

/// Every partition of the transaction below leads on broker 2.
struct OnBroker2;
impl PartitionLeaders for OnBroker2 {
    fn leader_of(&self, _: &TopicPartition) -> Option<NodeId> {
        Some(NodeId::Broker(2))
    }
}

/// The WriteTxnMarkers a coordinator sends when it loads this `__transaction_state` log: 'tx-a' (TV2, epoch
/// 1, over t/0 and t/1) decided to commit at marker epoch 2, but that append timed out with its record
/// in the log and the cache reverted to Ongoing (`TransactionStateManagerTest#testAppendFailToCoordinatorNotAvailableError`);
/// the timeout scan then fenced the transaction to epoch 2 and decided to abort it there.
fn markers_loaded_after_a_failed_commit_append(mutations: Mutations) -> (TransactionCoordinator, Vec<(String, i16)>) {
    let mut ongoing = TransactionMetadata::new("tx-a", 1000, 60_000, 0);
    ongoing.producer_epoch = 1;
    ongoing.client_transaction_version = TransactionVersion::V2;
    ongoing.state = TransactionState::Ongoing;
    ongoing.topic_partitions = [tp(), TopicPartition::new("t", 1)].into_iter().collect();
    let decided = |state, cause| {
        let metadata = TransactionMetadata { state, producer_epoch: 2, ..ongoing.clone() };
        TxnLogValue::Metadata { metadata, decided: Some((cause, 1)), markers: Vec::new() }.encode()
    };
    let log = [
        TxnLogValue::Metadata { metadata: ongoing.clone(), decided: None, markers: Vec::new() }.encode(),
        decided(TransactionState::PrepareCommit, DecisionCause::Client),
        decided(TransactionState::PrepareAbort, DecisionCause::Timeout),
    ];
    let config = EngineConfig { mutations, ..EngineConfig::default() };
    let mut effects = Effects::default();
    let mut ctx =
        Ctx { now_ms: 0, config: &config, me: &NodeId::Broker(1), leaders: &OnBroker2, effects: &mut effects };
    let mut c = TransactionCoordinator::new();
    c.load_from_log(1, log.iter().map(|v| (0, v.as_str())), &mut ctx);
    let sent = effects
        .sends
        .iter()
        .flat_map(|e| match &e.message {
            Message::WriteTxnMarkersRequest { markers } => markers.clone(),
            other => panic!("only markers go out on a load, not {other:?}"),
        })
        .flat_map(|m| {
            m.partitions.iter().map(move |p| (format!("{} {p}", m.result.name()), m.producer_epoch)).collect::<Vec<_>>()
        })
        .collect();
    (c, sent)
}

/// `TransactionStateManagerTest#testLoadAndRemoveTransactionsForPartition` (the cache holds each id's latest
/// record) and `#shouldWriteTxnMarkersForTransactionInPreparedAbortState`: the load completes the newest
/// decision, the abort, and never sends the superseded commit's markers.
#[test]
fn a_load_completes_only_the_newest_decision_of_an_id() {
    let (c, sent) = markers_loaded_after_a_failed_commit_append(Mutations::none());
    assert_eq!(c.txns["tx-a"].state, TransactionState::PrepareAbort, "the newest record is the loaded state");
    assert_eq!(c.txns["tx-a"].pending_state, Some(TransactionState::CompleteAbort), "its completion is pending");
    assert_eq!(sent, [("ABORT t/0".to_string(), 2), ("ABORT t/1".to_string(), 2)], "ABORT markers only");
}

/// Under `load-resends-superseded-decisions` the superseded PrepareCommit's markers go out too: a COMMIT and
/// an ABORT at the same epoch for one transaction, which the sim's `marker-matches-decision` sees
/// (seeds/load-resends-superseded-decisions-timeouts-2033919.toml).
#[test]
fn load_resends_superseded_decisions_is_caught_by_the_exact_markers() {
    let (_, sent) =
        markers_loaded_after_a_failed_commit_append(Mutations::one(Mutation::LoadResendsSupersededDecisions));
    assert_eq!(
        sent,
        [
            ("COMMIT t/0".to_string(), 2),
            ("COMMIT t/1".to_string(), 2),
            ("ABORT t/0".to_string(), 2),
            ("ABORT t/1".to_string(), 2)
        ],
        "the mutation sends both decisions' markers"
    );
}

/// A transaction committed offset 5 for 'g' on `t/0`; its COMMIT marker has just been appended to the
/// group's `__consumer_offsets/3` on broker 0, which leads it, and no follower has fetched it yet.
fn group_offset_committed_above_the_hw(config: EngineConfig) -> Cluster {
    let mut c = offsets_sent_in_a_transaction(config);
    c.run_until_quiet();
    let offsets = TopicPartition::new("__consumer_offsets", 3);
    let log_end = |c: &mut Cluster| c.broker_mut(0).unwrap().replica_manager.logs[&offsets].log_end_offset();
    let before = log_end(&mut c);
    let (_, effects) = c.producers.get_mut("p").unwrap().commit_transaction(c.now_ms).unwrap();
    c.apply(&NodeId::Client("p".into()), effects);
    while log_end(&mut c) == before {
        assert!(c.step(), "the COMMIT marker reaches the group's partition");
    }
    let log = &c.broker_mut(0).unwrap().replica_manager.logs[&offsets];
    assert!(log.high_watermark() < log.log_end_offset(), "the marker is above the HW");
    c
}

/// What broker 0 answers an OffsetFetch of 'g' for `t/0` at once (nothing: the answer waits).
fn offset_fetch_now(c: &mut Cluster, require_stable: bool) -> Vec<Message> {
    let request = Message::Group(GroupMessage::OffsetFetchRequest {
        group_id: "g".into(),
        partitions: Some(vec![tp()]),
        require_stable,
    });
    let env =
        Envelope { from: NodeId::Client("reader".into()), to: NodeId::Broker(0), correlation_id: 7, message: request };
    let now = c.now_ms;
    let effects = c.broker_mut(0).unwrap().on_message(now, env);
    effects.sends.into_iter().filter(|e| e.to == NodeId::Client("reader".into())).map(|e| e.message).collect()
}

fn fetched(offset: Option<i64>) -> Message {
    Message::Group(GroupMessage::OffsetFetchResponse { offsets: Ok(vec![(tp(), Ok(offset.map(|o| (o, None))))]) })
}

/// `OffsetMetadataManagerTest#testFetchOffsetsAtDifferentCommittedOffset` and
/// `#testFetchOffsetsWithPendingTransactionalOffsets`, served as `GroupCoordinatorService.fetchOffsets`
/// serves them: a fetch without `require_stable` reads at the last committed offset, so the offset the
/// unreplicated marker commits is not there yet; a stable fetch is a write operation, answered with it once
/// the HW passes the marker.
#[test]
fn an_offset_fetch_reads_at_the_hw_and_a_stable_one_waits_for_it() {
    let mut c = group_offset_committed_above_the_hw(EngineConfig::default());
    assert_eq!(offset_fetch_now(&mut c, false), [fetched(None)], "read at the HW: not committed yet");
    assert_eq!(offset_fetch_now(&mut c, true), [], "the stable fetch waits for the HW");
    c.record_steps = true;
    c.run_until_quiet();
    let answered: Vec<&Message> = c
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Delivered { envelope, .. } if envelope.to == NodeId::Client("reader".into()) => {
                Some(&envelope.message)
            }
            _ => None,
        })
        .collect();
    assert_eq!(answered, [&fetched(Some(5))], "the stable fetch is answered once the HW passed the marker");
    assert_eq!(offset_fetch_now(&mut c, false), [fetched(Some(5))], "now committed, the read sees it");
}

/// Under `offset-fetch-reads-latest` both fetches answer the unreplicated offset at once.
#[test]
fn offset_fetch_reads_latest_is_caught_by_the_exact_answers() {
    let mut c = group_offset_committed_above_the_hw(EngineConfig {
        mutations: Mutations::one(Mutation::OffsetFetchReadsLatest),
        ..EngineConfig::default()
    });
    assert_eq!(offset_fetch_now(&mut c, false), [fetched(Some(5))], "the mutation reads past the HW");
    assert_eq!(offset_fetch_now(&mut c, true), [fetched(Some(5))], "and does not wait");
}

/// A broker that restarts with an image holding a partition created while it was down (the controller
/// creates `__consumer_offsets` on a group's first FindCoordinator; the delta to this broker died with it)
/// hosts that partition with a log and takes its role there, as one learnt in a delta does: the sim found
/// a restart that built the replica states from the image but kept only the old logs, and panicked taking
/// the new partition's role.
#[test]
fn a_broker_restarted_after_a_partition_was_created_hosts_its_log() {
    let topics: BTreeMap<String, u32> = [("t".to_string(), 1)].into_iter().collect();
    let config = EngineConfig::default();
    let controller = txnsim_engine::controller::Controller::new(&topics, &Topology::new(3, 3), &config);
    let mut broker = txnsim_engine::Broker::with_registrations(1, &controller.partitions, config);
    let _ = broker.on_start(0);
    let offsets = TopicPartition::new("__consumer_offsets", 3);
    assert!(!broker.replica_manager.logs.contains_key(&offsets), "no group yet: no __consumer_offsets");

    let mut image = controller.partitions.clone();
    // Registered as t/0 is: replicas 0, 1 and 2, broker 0 leading.
    let registration = image[&tp()].clone();
    assert!(registration.replicas.contains(&1), "broker 1 is among the replicas {:?}", registration.replicas);
    image.insert(offsets.clone(), registration);
    let _ = broker.restart_with_image(10, &image);
    assert!(broker.replica_manager.logs.contains_key(&offsets), "broker 1 has a log for {offsets}");
    assert!(broker.replica_manager.partitions.contains_key(&offsets), "and a replica state for it");
    assert!(broker.replica_manager.logs.contains_key(&tp()), "its other logs survive");
}
