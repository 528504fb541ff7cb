//! Replication in the in-process cluster: followers copy the leader's log through long-polled fetches,
//! the HW waits for the ISR (`Partition.maybeIncrementLeaderHW`), acks=all writes wait for the HW
//! (`DelayedProduce`), and the ISR shrinks and expands through the controller (AlterPartition).

use std::collections::BTreeMap;
use txnsim_engine::producer::OpOutput;
use txnsim_engine::producer_state::AppendOrigin;
use txnsim_engine::protocol::metadata::MetadataMessage;
use txnsim_engine::protocol::metadata::{LeaderAndIsr, PartitionRegistration};
use txnsim_engine::protocol::{Envelope, Message, NodeId, ReplicaFetchPartition};
use txnsim_engine::record::{CompressionType, ProduceBatch};
use txnsim_engine::{
    Cluster, Controller, EngineConfig, KafkaError, Mutation, Mutations, ProducerKind, TopicPartition, Topology,
};

fn tp() -> TopicPartition {
    TopicPartition::new("t", 0)
}

fn cluster(brokers: u32, rf: u32, config: EngineConfig) -> Cluster {
    let topics: BTreeMap<String, u32> = [("t".to_string(), 1)].into_iter().collect();
    let topology = Topology::new(brokers, rf);
    topology.validate().expect("a valid topology");
    Cluster::with_topology(&topics, config, &topology)
}

fn init(c: &mut Cluster, name: &str) {
    c.add_producer(name, ProducerKind::Transactional { transactional_id: name.to_string() });
    let r = c.call_producer(name, |p, now| p.init_transactions(now));
    assert!(matches!(r, Ok(Some(OpOutput::Initialized(_)))), "init of {name} succeeds: {r:?}");
}

fn offsets(c: &Cluster, broker: usize) -> (u64, u64) {
    let b = c.brokers().nth(broker).expect("broker exists");
    let log = b.partition(&tp()).expect("hosted");
    (log.log_end_offset(), log.high_watermark())
}

/// Runs until quiet, taking `t-0` out of every fetch broker `lost` sends or is sent (a follower cut off
/// the leader for that partition): the coordinator's `__transaction_state`, fetched in the same requests,
/// keeps its quorum.
fn run_isolating(c: &mut Cluster, lost: u32) {
    loop {
        let cut = match c.peek_message() {
            None => break,
            Some(e) => {
                let data = match &e.message {
                    Message::ReplicaFetchRequest { partitions } => partitions.iter().any(|p| p.partition == tp()),
                    Message::ReplicaFetchResponse { partitions } => partitions.iter().any(|p| p.partition == tp()),
                    _ => false,
                };
                data && (e.from == NodeId::Broker(lost) || e.to == NodeId::Broker(lost))
            }
        };
        if cut {
            let mut env = c.take_message().expect("peeked");
            match &mut env.message {
                Message::ReplicaFetchRequest { partitions } => partitions.retain(|p| p.partition != tp()),
                Message::ReplicaFetchResponse { partitions } => partitions.retain(|p| p.partition != tp()),
                _ => unreachable!("peeked"),
            }
            c.deliver_message(env);
        } else {
            c.step();
        }
    }
}

#[test]
fn a_committed_transaction_reaches_every_replica_and_the_idle_cluster_is_quiet() {
    let mut c = cluster(3, 3, EngineConfig::default());
    init(&mut c, "p");
    c.producers.get_mut("p").unwrap().begin_transaction().unwrap();
    let r = c.call_producer("p", |p, now| p.send(now, tp(), vec!["a".into(), "b".into()]));
    assert!(matches!(r, Ok(Some(OpOutput::Sent { .. }))), "acks=all send is answered once replicated: {r:?}");
    assert_eq!(offsets(&c, 0), (2, 2), "the leader's HW passed the batch before the answer");
    let r = c.call_producer("p", |p, now| p.commit_transaction(now));
    assert_eq!(r, Ok(Some(OpOutput::Committed)), "the commit completes");
    assert_eq!(offsets(&c, 0), (3, 3), "the marker is below the leader's HW");
    for b in 1..3 {
        assert_eq!(offsets(&c, b).0, 3, "follower {b} has the leader's log end");
        let leader: Vec<_> = c.broker.partition(&tp()).unwrap().batches().cloned().collect();
        let mine: Vec<_> = c.brokers().nth(b).unwrap().partition(&tp()).unwrap().batches().cloned().collect();
        assert_eq!(mine, leader, "follower {b} holds the leader's batches");
    }
    assert!(!c.has_client_timer() && c.peek_message().is_none(), "an idle cluster sends nothing");
    // A follower learns the HW from its next fetch answer: data, or the leader's max wait (500 ms).
    assert!(c.advance_time(500));
    for b in 1..3 {
        assert_eq!(offsets(&c, b), (3, 3), "follower {b} took the leader's HW from a fetch answer");
        let log = c.brokers().nth(b).unwrap().partition(&tp()).unwrap();
        assert_eq!(log.last_stable_offset(&c.config.mutations), 3, "follower {b}'s LSO from its own log");
    }
}

#[test]
fn one_broker_hosts_alone_and_answers_at_once() {
    let mut c = cluster(1, 3, EngineConfig::default());
    assert_eq!(c.peers.len(), 0, "one broker");
    assert!(!c.broker.replica_manager.is_replicated(&tp()), "the replication factor is capped at one");
    init(&mut c, "p");
    c.producers.get_mut("p").unwrap().begin_transaction().unwrap();
    let r = c.call_producer("p", |p, now| p.send(now, tp(), vec!["a".into()]));
    assert!(matches!(r, Ok(Some(OpOutput::Sent { .. }))), "{r:?}");
    assert_eq!(offsets(&c, 0), (1, 1), "a sole replica's HW is its log end");
}

/// A follower cut off from the leader of `t-0` while a transactional send waits for it, until the ISR
/// expiration task drops it at 45 s; the cluster then, and the send's id.
fn cut_off_follower(config: EngineConfig) -> Cluster {
    let mut c = cluster(3, 3, config);
    init(&mut c, "p");
    c.producers.get_mut("p").unwrap().begin_transaction().unwrap();
    let (op, effects) = c.producers.get_mut("p").unwrap().send(0, tp(), vec!["a".into()]).unwrap();
    let node = NodeId::Client("p".into());
    c.apply(&node, effects);
    run_isolating(&mut c, 2);
    assert_eq!(offsets(&c, 0), (1, 0), "broker 2 is in the ISR and lacks the batch: the HW stays");
    let done = c.producers.get_mut("p").unwrap().take_completions();
    assert!(done.iter().all(|d| d.op != op), "the acks=all send is not answered: {done:?}");
    // Not caught up for more than `replica.lag.time.max.ms` (30 s): the ISR expiration task (every 15 s)
    // drops broker 2 at 45 s.
    while c.now_ms < 45_000 {
        assert!(c.fire_next_timer());
        run_isolating(&mut c, 2);
    }
    c
}

/// Each broker's metadata cache's ISR of `t-0` (what its Metadata answers say).
fn cached_isrs(c: &Cluster) -> Vec<Vec<u32>> {
    c.brokers().map(|b| b.metadata_image[&tp()].state.isr.clone()).collect()
}

#[test]
fn a_cut_off_follower_holds_the_hw_until_it_leaves_the_isr() {
    let c = cut_off_follower(EngineConfig::default());
    let isr: Vec<u32> = c.broker.replica_manager.partitions[&tp()].isr.iter().copied().collect();
    assert_eq!(isr, vec![0, 1], "broker 2 left the ISR through the controller");
    assert_eq!(c.controller.partitions[&tp()].state.isr, vec![0, 1], "the controller committed it");
    // KRaft: the change is a PartitionChangeRecord every broker replays, not only the leader's answer.
    assert_eq!(cached_isrs(&c), vec![vec![0, 1]; 3], "every broker's metadata cache has the new ISR");
    assert_eq!(offsets(&c, 0), (1, 1), "the HW moved with the smaller ISR");
}

/// Under `isr-change-told-to-leader-only` every cache keeps the old ISR (the leader's too: only its
/// partition state takes the answer), so the test above fails.
#[test]
fn an_isr_change_told_to_the_leader_only_is_caught() {
    let config =
        EngineConfig { mutations: Mutations::one(Mutation::IsrChangeToldToLeaderOnly), ..EngineConfig::default() };
    let c = cut_off_follower(config);
    assert_eq!(c.controller.partitions[&tp()].state.isr, vec![0, 1], "the controller committed the shrink");
    assert_eq!(cached_isrs(&c), vec![vec![0, 1, 2]; 3], "no metadata cache heard of it");
}

#[test]
fn min_insync_replicas_refuses_writes_once_the_isr_is_too_small() {
    let config = EngineConfig { min_insync_replicas: 3, ..EngineConfig::default() };
    let mut c = cluster_with_broker_2_out_of_the_isr(config);
    assert_eq!(offsets(&c, 0), (1, 0), "under min.insync.replicas the HW stands still (KAFKA-15583)");
    c.add_producer("plain", ProducerKind::Plain);
    let (_, effects) = c.producers.get_mut("plain").unwrap().send(c.now_ms, tp(), vec!["b".into()]).unwrap();
    c.apply(&NodeId::Client("plain".into()), effects);
    let mut answer = None;
    while let Some(env) = c.take_message() {
        if let Message::ProduceResponse { result, .. } = &env.message {
            answer = Some(*result);
            break;
        }
        c.deliver_message(env);
    }
    assert_eq!(answer.map(|r| r.err()), Some(Some(KafkaError::NotEnoughReplicas)), "refused before appending");
    assert_eq!(offsets(&c, 0).0, 1, "nothing more was appended");
}

#[test]
fn a_follower_back_from_a_cut_catches_up_and_rejoins_the_isr() {
    let mut c = cluster(3, 3, EngineConfig::default());
    c.add_producer("plain", ProducerKind::Plain);
    let (_, effects) = c.producers.get_mut("plain").unwrap().send(0, tp(), vec!["a".into()]).unwrap();
    c.apply(&NodeId::Client("plain".into()), effects);
    run_isolating(&mut c, 2);
    while c.now_ms < 45_000 {
        assert!(c.fire_next_timer());
        run_isolating(&mut c, 2);
    }
    assert_eq!(c.controller.partitions[&tp()].state.isr, vec![0, 1], "broker 2 left the ISR");
    assert_eq!(offsets(&c, 2).0, 0, "broker 2 missed the record");
    // The cut heals: broker 2's next retry (replica.socket.timeout.ms, then replica.fetch.backoff.ms)
    // reaches the leader, it copies the record, and its fetch at the HW adds it back.
    let until = c.now_ms + 32_000;
    c.fire_timers_until(until);
    c.run_until_quiet();
    // The plain producer's send timed out waiting for broker 2 and was sent again (no idempotence).
    assert_eq!(offsets(&c, 0).0, 2, "the leader holds the record twice");
    assert_eq!(offsets(&c, 2).0, 2, "broker 2 caught up to the leader's log end");
    assert_eq!(c.controller.partitions[&tp()].state.isr, vec![0, 1, 2], "broker 2 rejoined the ISR");
    let isr: Vec<u32> = c.broker.replica_manager.partitions[&tp()].isr.iter().copied().collect();
    assert_eq!(isr, vec![0, 1, 2], "the leader took the controller's answer");
}

/// Broker 2 cut off until it leaves the ISR: a record lands on the leader while broker 2's fetches are
/// lost, so it is no longer caught up, and the ISR check drops it at 45 s; brokers 0 and 1 hold the record.
fn cluster_with_broker_2_out_of_the_isr(config: EngineConfig) -> Cluster {
    let mut c = cluster(3, 3, config);
    c.run_until_quiet();
    let batch = ProduceBatch {
        producer: None,
        is_transactional: false,
        values: vec!["a".into()],
        compression: CompressionType::None,
    };
    let log = c.broker.partition_mut(&tp()).unwrap();
    log.append_data(&batch, AppendOrigin::Client, 0, &Mutations::none()).expect("a plain append");
    while c.now_ms < 45_000 {
        assert!(c.fire_next_timer());
        run_isolating(&mut c, 2);
    }
    assert_eq!(c.controller.partitions[&tp()].state.isr, vec![0, 1], "broker 2 left the ISR");
    c
}

/// `PartitionChangeBuilder.electLeader` without ELR (`eligible.leader.replicas.version=0`): a dead leader
/// is replaced by the first live ISR member at the next leader epoch; with no live ISR member the
/// partition has no leader (the last member stays in the ISR), and a returning replica outside the ISR
/// does not lead it: only the last ISR member does. (With ELR, eligible_leader_replicas.rs.)
#[test]
fn a_clean_election_takes_only_isr_members() {
    let config = EngineConfig { eligible_leader_replicas: false, ..EngineConfig::default() };
    let mut c = cluster_with_broker_2_out_of_the_isr(config);
    c.crash_broker(0);
    let state = &c.controller.partitions[&tp()].state;
    assert_eq!((state.leader, state.leader_epoch, state.isr.clone()), (1, 1, vec![1]), "broker 1 leads at epoch 1");
    // Before broker 2 can catch up with broker 1 and rejoin the ISR, broker 1 dies too.
    c.crash_broker(1);
    c.run_until_quiet();
    assert_eq!(c.leader_of(&tp()), None, "no live ISR member: no leader");
    assert_eq!(c.controller.partitions[&tp()].state.isr, vec![1], "the last ISR member stays in the ISR");
    c.start_broker(2);
    c.run_until_quiet();
    assert_eq!(c.leader_of(&tp()), None, "broker 2, outside the ISR, is not elected");
    c.start_broker(1);
    c.run_until_quiet();
    let state = &c.controller.partitions[&tp()].state;
    assert_eq!((state.leader, state.leader_epoch), (1, 3), "the returning ISR member leads again, at epoch 3");
    assert_eq!(offsets(&c, 1).0, 1, "with the record it held");
    assert_eq!(offsets(&c, 2).0, 1, "which broker 2 now fetches from it");
}

/// KIP-966 in the cluster: at `min.insync.replicas` 3 the HW stands still once broker 2 falls behind (its
/// record at 0 is never committed), and broker 2 leaves the ISR into the ELR holding everything committed.
/// When brokers 0 and 1 die the ISR empties and broker 2, alive, leads from the ELR; without ELR the
/// partition has no leader.
#[test]
fn an_elr_member_leads_when_the_isr_dies() {
    for elr in [true, false] {
        let config = EngineConfig { min_insync_replicas: 3, eligible_leader_replicas: elr, ..EngineConfig::default() };
        let mut c = cluster_with_broker_2_out_of_the_isr(config);
        let eligible = if elr { vec![2] } else { vec![] };
        assert_eq!(c.controller.partitions[&tp()].elr, eligible, "broker 2 left an ISR below min ISR (ELR {elr})");
        assert_eq!(offsets(&c, 0), (1, 0), "the HW stood still below min ISR");
        c.crash_broker(0);
        c.crash_broker(1);
        c.run_until_quiet();
        let leader = c.leader_of(&tp());
        let reg = &c.controller.partitions[&tp()];
        if elr {
            assert_eq!((leader, reg.state.isr.clone()), (Some(2), vec![2]), "broker 2 leads from the ELR");
            assert_eq!(offsets(&c, 2), (0, 0), "it lost only what was never committed");
        } else {
            assert_eq!((leader, reg.state.isr.clone()), (None, vec![1]), "no leader; the last ISR member stays");
        }
    }
}

/// `unclean.leader.election.enable`: with no live ISR member, a live replica outside the ISR leads alone,
/// and the record only the ISR held is lost to it.
#[test]
fn an_unclean_election_takes_a_replica_outside_the_isr() {
    let config = EngineConfig { unclean_leader_election_enable: true, ..EngineConfig::default() };
    let mut c = cluster_with_broker_2_out_of_the_isr(config);
    c.crash_broker(0);
    c.crash_broker(1);
    c.run_until_quiet();
    let state = &c.controller.partitions[&tp()].state;
    assert_eq!((state.leader, state.isr.clone()), (2, vec![2]), "broker 2 leads, alone in the ISR");
    assert_eq!(offsets(&c, 2), (0, 0), "and lacks the record brokers 0 and 1 held");
}

/// A follower's fetch of `t-0` alone.
fn fetch(fetch_offset: u64, current_leader_epoch: i32, last_fetched_epoch: Option<i32>) -> Vec<ReplicaFetchPartition> {
    vec![ReplicaFetchPartition { partition: tp(), fetch_offset, current_leader_epoch, last_fetched_epoch }]
}

/// The leader's view of follower 1 in `PartitionTest#testFollowerDoesNotJoinISRUntilCaughtUpToOffsetWithinCurrentLeaderEpoch`
/// (KAFKA-7128): broker 0 leads at epoch 8 with ISR [0, 2], appends two batches (offsets 0..1, 2..4), and
/// follower 2's fetches move the HW to 1; it follows at epoch 9 and leads again at epoch 10 from offset
/// 5, appends a third batch, and follower 1 fetches at 0, at 1 (the HW), then at 5. Returns the proposed
/// ISR (the pending AlterPartition) after each of follower 1's fetches.
fn isr_proposals_of_a_follower_below_the_epoch_start(mutations: Mutations) -> Vec<Option<Vec<u32>>> {
    use txnsim_engine::protocol::metadata::{LeaderAndIsr, PartitionRegistration};
    use txnsim_engine::protocol::Effects;
    use txnsim_engine::replica_manager::{ReplicaCtx, ReplicaManager};
    let config = EngineConfig { mutations: mutations.clone(), ..EngineConfig::default() };
    let reg = |leader, leader_epoch, partition_epoch| {
        let state = LeaderAndIsr { leader, leader_epoch, isr: vec![0, 2], partition_epoch };
        PartitionRegistration { replicas: vec![0, 1, 2], state, elr: vec![], last_known_elr: vec![] }
    };
    let mut effects = Effects::default();
    let mut rm = ReplicaManager::new(0, &BTreeMap::from([(tp(), reg(0, 8, 1))]), 0);
    let mut ctx = ReplicaCtx { me: 0, now_ms: 0, config: &config, effects: &mut effects };
    rm.start(&mut ctx);
    let append = |rm: &mut ReplicaManager, values: &[&str]| {
        let batch = ProduceBatch {
            producer: None,
            is_transactional: false,
            values: values.iter().map(|v| v.to_string()).collect(),
            compression: CompressionType::None,
        };
        let log = rm.logs.get_mut(&tp()).expect("hosted");
        log.append_data(&batch, AppendOrigin::Client, 0, &mutations).expect("a plain append");
    };
    append(&mut rm, &["k1", "k2"]);
    append(&mut rm, &["k3", "k4", "k5"]);
    rm.handle_follower_fetch(2, 1, fetch(0, 8, None), &mut ctx);
    rm.handle_follower_fetch(2, 2, fetch(1, 8, Some(8)), &mut ctx);
    assert_eq!(rm.logs[&tp()].high_watermark(), 1, "follower 2 in the ISR moved the HW below the LEO");
    rm.apply_delta(&[(tp(), reg(2, 9, 2))], &mut ctx);
    rm.apply_delta(&[(tp(), reg(0, 10, 3))], &mut ctx);
    assert_eq!(rm.logs[&tp()].log_end_offset(), 5, "the leader epoch 10 starts at offset 5");
    append(&mut rm, &["k6", "k7"]);
    [(0, None), (1, Some(8)), (5, Some(8))]
        .into_iter()
        .enumerate()
        .map(|(k, (offset, last_epoch))| {
            rm.handle_follower_fetch(1, 10 + k as u64, fetch(offset, 10, last_epoch), &mut ctx);
            rm.partitions[&tp()].pending_isr.as_ref().map(|isr| isr.iter().copied().collect())
        })
        .collect()
}

/// PartitionTest#testFollowerDoesNotJoinISRUntilCaughtUpToOffsetWithinCurrentLeaderEpoch @ 1eb7644349cb:
/// "fetch from follower not in ISR from log start offset should not add this follower to ISR", nor from
/// the HW below the epoch start; from the start offset of the current leader epoch it is proposed.
#[test]
fn a_follower_does_not_join_the_isr_until_caught_up_to_the_current_leader_epoch() {
    let proposals = isr_proposals_of_a_follower_below_the_epoch_start(Mutations::none());
    assert_eq!(proposals, vec![None, None, Some(vec![0, 1, 2])], "only the fetch at offset 5 proposes follower 1");
}

/// Under `isr-expansion-below-leader-epoch-start` the fetch at the lagging HW already proposes it: the
/// port above catches it.
#[test]
fn isr_expansion_below_the_leader_epoch_start_is_caught_by_the_port() {
    let m = Mutations::one(Mutation::IsrExpansionBelowLeaderEpochStart);
    let proposals = isr_proposals_of_a_follower_below_the_epoch_start(m);
    assert_eq!(proposals[1], Some(vec![0, 1, 2]), "follower 1 at offset 1 is proposed: {proposals:?}");
}

/// The controller's answer to broker 1's AlterPartition adding broker 3 back to `foo-0`'s ISR, first
/// while broker 3 is fenced, then after it is unfenced, on a controller of five brokers with `foo-0` on
/// replicas 1, 2, 3, 4 led by 1 (the setup of the Kafka test below).
fn alter_partition_answers_around_a_fenced_broker(config: EngineConfig) -> Vec<MetadataMessage> {
    let mut controller = Controller::new(&BTreeMap::new(), &Topology::new(5, 4), &config);
    let foo_0 = TopicPartition::new("foo", 0);
    let replicas = vec![1, 2, 3, 4];
    let state = LeaderAndIsr { leader: 1, leader_epoch: 0, isr: replicas.clone(), partition_epoch: 0 };
    controller
        .partitions
        .insert(foo_0.clone(), PartitionRegistration { replicas, state, elr: vec![], last_known_elr: vec![] });
    controller.broker_fenced(3);
    let committed = &controller.partitions[&foo_0].state;
    assert_eq!((committed.isr.clone(), committed.leader, committed.partition_epoch), (vec![1, 2, 4], 1, 1));
    let ask = |controller: &mut Controller| {
        let request = MetadataMessage::AlterPartitionRequest {
            broker: 1,
            partition: foo_0.clone(),
            leader_epoch: 0,
            partition_epoch: 1,
            new_isr: vec![1, 2, 3, 4],
        };
        let env = Envelope {
            from: NodeId::Broker(1),
            to: controller.id.clone(),
            correlation_id: 7,
            message: Message::Metadata(request),
        };
        let mut sends = controller.on_message(env).sends;
        let answer = sends.pop().expect("an answer to the leader");
        assert_eq!((answer.to, answer.correlation_id), (NodeId::Broker(1), 7), "the answer goes last: {sends:?}");
        // A committed change is also a PartitionChangeRecord to every live broker (the metadata log).
        let committed =
            matches!(answer.message, Message::Metadata(MetadataMessage::AlterPartitionResponse { result: Ok(_), .. }));
        let records: Vec<&NodeId> = sends
            .iter()
            .filter(|e| matches!(e.message, Message::Metadata(MetadataMessage::PartitionChanges { .. })))
            .map(|e| &e.to)
            .collect();
        let live: Vec<NodeId> = (0..5).filter(|b| !controller.fenced.contains(b)).map(NodeId::Broker).collect();
        let expected: Vec<&NodeId> = if committed { live.iter().collect() } else { Vec::new() };
        assert_eq!(
            (records, sends.len()),
            (expected.clone(), expected.len()),
            "the records besides the answer: {sends:?}"
        );
        match answer.message {
            Message::Metadata(answer) => answer,
            other => panic!("the controller answers AlterPartition with AlterPartition: {other:?}"),
        }
    };
    let fenced = ask(&mut controller);
    controller.broker_unfenced(3);
    vec![fenced, ask(&mut controller)]
}

/// ReplicationControlManagerTest#testAlterPartitionShouldRejectFencedBrokers @ 1eb7644349cb (AlterPartition
/// v2+): "expectedError = ... INELIGIBLE_REPLICA" while broker 3 is fenced; once unfenced, the same request
/// commits "setIsr(asList(1, 2, 3, 4)).setPartitionEpoch(2)" with leader 1 at leader epoch 0.
#[test]
fn alter_partition_rejects_a_fenced_broker_in_the_new_isr() {
    let answers = alter_partition_answers_around_a_fenced_broker(EngineConfig::default());
    let foo = TopicPartition::new("foo", 0);
    let committed = LeaderAndIsr { leader: 1, leader_epoch: 0, isr: vec![1, 2, 3, 4], partition_epoch: 2 };
    assert_eq!(
        answers,
        vec![
            MetadataMessage::AlterPartitionResponse {
                partition: foo.clone(),
                result: Err(KafkaError::IneligibleReplica)
            },
            MetadataMessage::AlterPartitionResponse { partition: foo, result: Ok(committed) },
        ],
        "INELIGIBLE_REPLICA while broker 3 is fenced, then the ISR 1, 2, 3, 4 at partition epoch 2"
    );
}

/// Under `fenced-replica-joins-isr` the fenced broker is committed at once: the port above catches it.
#[test]
fn a_fenced_replica_joining_the_isr_is_caught_by_the_port() {
    let config = EngineConfig { mutations: Mutations::one(Mutation::FencedReplicaJoinsIsr), ..EngineConfig::default() };
    let answers = alter_partition_answers_around_a_fenced_broker(config);
    let MetadataMessage::AlterPartitionResponse { result, .. } = &answers[0] else { panic!("{answers:?}") };
    assert_eq!(result.as_ref().map(|s| s.isr.clone()), Ok(vec![1, 2, 3, 4]), "broker 3 joined while fenced");
}

/// Fetch requests from broker 2 in flight.
fn fetches_from_broker_2(c: &Cluster) -> usize {
    let from = NodeId::Broker(2);
    c.in_flight().filter(|e| e.from == from && matches!(e.message, Message::ReplicaFetchRequest { .. })).count()
}

/// Broker 2's first fetch waits in leader 0's purgatory when broker 2 restarts at 300 ms and fetches
/// again; at 500 ms the first fetch's wait ends and leader 0 answers it. How many fetches broker 2 has
/// in flight once that answer is delivered.
fn fetches_after_a_previous_lifes_answer(config: EngineConfig) -> usize {
    let mut c = cluster(3, 3, config);
    c.run_until_quiet();
    assert_eq!(fetches_from_broker_2(&c), 0, "broker 2's first fetch waits at the leader");
    assert!(c.advance_time(300));
    assert!(c.crash_broker(2) && c.start_broker(2));
    c.run_until_quiet();
    c.fire_timers_until(500);
    // Broker 1's fetch expires with it; its answer and what follows are delivered too.
    while let Some(env) = c.take_message() {
        let to_broker_2 = env.to == NodeId::Broker(2);
        assert!(!to_broker_2 || matches!(env.message, Message::ReplicaFetchResponse { .. }), "{env:?}");
        c.deliver_message(env);
        if to_broker_2 {
            return fetches_from_broker_2(&c);
        }
    }
    panic!("leader 0 never answered the first life's fetch")
}

/// In Kafka an answer comes back on the connection its request went out on, and a crash closes them all
/// (`NetworkClient`): the restarted broker 2 ignores the answer to its previous process's fetch and
/// keeps waiting for its own, which is still in leader 0's purgatory.
#[test]
fn a_restarted_follower_ignores_the_answer_to_its_previous_lifes_fetch() {
    assert_eq!(fetches_after_a_previous_lifes_answer(EngineConfig::default()), 0, "no new fetch: still waiting");
}

/// Under `fetch-ids-reused-after-restart` the new fetch has the old one's id, takes its answer, and broker
/// 2 fetches again while its real fetch is still parked: the test above fails.
#[test]
fn fetch_ids_reused_after_a_restart_are_caught() {
    let config =
        EngineConfig { mutations: Mutations::one(Mutation::FetchIdsReusedAfterRestart), ..EngineConfig::default() };
    assert_eq!(fetches_after_a_previous_lifes_answer(config), 1, "the stale answer was taken for the new fetch");
}

/// `PartitionTest#testHighWatermarkIncreasesWithFencedOrShutdownFollower`: follower 2 caught up, then its
/// broker is fenced; the next write's HW advances with the ISR that is left, without waiting for it.
fn write_after_a_follower_is_fenced(config: EngineConfig) -> Cluster {
    let mut c = cluster(3, 3, config);
    c.add_producer("plain", ProducerKind::Plain);
    let r = c.call_producer("plain", |p, now| p.send(now, tp(), vec!["a".into()]));
    assert!(matches!(r, Ok(Some(OpOutput::Sent { .. }))), "the first write is replicated everywhere: {r:?}");
    assert!(c.crash_broker(2), "broker 2 crashes");
    c.run_until_quiet();
    assert_eq!(c.controller.partitions[&tp()].state.isr, vec![0, 1], "the controller fenced it out of the ISR");
    let (_, effects) = c.producers.get_mut("plain").unwrap().send(c.now_ms, tp(), vec!["b".into()]).unwrap();
    c.apply(&NodeId::Client("plain".into()), effects);
    c.run_until_quiet();
    c
}

#[test]
fn a_fenced_follower_holds_no_high_watermark() {
    let c = write_after_a_follower_is_fenced(EngineConfig::default());
    assert_eq!(offsets(&c, 0), (2, 2), "the HW passes the write once broker 1 has it");
}

#[test]
fn fenced_replica_holds_hw_is_caught() {
    let config = EngineConfig { mutations: Mutations::one(Mutation::FencedReplicaHoldsHw), ..EngineConfig::default() };
    let c = write_after_a_follower_is_fenced(config);
    assert_eq!(offsets(&c, 0), (2, 1), "the dead follower, caught up 0 ms ago, holds the HW");
}

/// Follower 1's fetch of `t-0` from its log end waits in leader 0's purgatory (epoch 10, nothing new);
/// then the controller's delta makes broker 2 the leader at epoch 11. The answers broker 0 sends
/// broker 1 from then on, as (correlation id, `t-0`'s result).
fn answers_to_a_parked_fetch_when_leadership_moves(config: EngineConfig) -> Vec<(u64, Result<(), KafkaError>)> {
    use txnsim_engine::protocol::metadata::{LeaderAndIsr, PartitionRegistration};
    use txnsim_engine::protocol::Effects;
    use txnsim_engine::replica_manager::{ReplicaCtx, ReplicaManager};
    let reg = |leader, leader_epoch, partition_epoch| {
        let state = LeaderAndIsr { leader, leader_epoch, isr: vec![0, 1, 2], partition_epoch };
        PartitionRegistration { replicas: vec![0, 1, 2], state, elr: vec![], last_known_elr: vec![] }
    };
    let mut effects = Effects::default();
    let mut rm = ReplicaManager::new(0, &BTreeMap::from([(tp(), reg(0, 10, 1))]), 0);
    let mut ctx = ReplicaCtx { me: 0, now_ms: 0, config: &config, effects: &mut effects };
    rm.start(&mut ctx);
    rm.handle_follower_fetch(1, 7, fetch(0, 10, None), &mut ctx);
    assert!(ctx.effects.sends.iter().all(|e| e.to != NodeId::Broker(1)), "nothing to return yet: the fetch waits");
    rm.apply_delta(&[(tp(), reg(2, 11, 2))], &mut ctx);
    effects
        .sends
        .iter()
        .filter(|e| e.to == NodeId::Broker(1))
        .map(|e| {
            let Message::ReplicaFetchResponse { partitions } = &e.message else { panic!("not a fetch answer: {e:?}") };
            let [p] = partitions.as_slice() else { panic!("one partition asked, one answered: {partitions:?}") };
            (e.correlation_id, p.result.as_ref().map(|_| ()).map_err(|e| *e))
        })
        .collect()
}

/// `DelayedFetchTest#testNotLeaderOrFollower` @ 1eb7644349cb: a delayed follower fetch of a partition this
/// broker no longer leads completes with NOT_LEADER_OR_FOLLOWER; the broker checks the fetch purgatory as
/// it becomes a follower (`ReplicaManager.completeDelayedOperationsWhenNotPartitionLeader`), so broker 1
/// hears at once instead of after `replica.fetch.wait.max.ms`.
#[test]
fn a_parked_fetch_is_answered_not_leader_when_leadership_moves() {
    let answers = answers_to_a_parked_fetch_when_leadership_moves(EngineConfig::default());
    assert_eq!(answers, vec![(7, Err(KafkaError::NotLeaderOrFollower))], "answered at the leader change");
}

/// Under `delayed-fetch-ignores-leader-change` the fetch stays parked until its max wait: the port above
/// catches it.
#[test]
fn delayed_fetch_ignoring_the_leader_change_is_caught_by_the_port() {
    let m = Mutations::one(Mutation::DelayedFetchIgnoresLeaderChange);
    let answers =
        answers_to_a_parked_fetch_when_leadership_moves(EngineConfig { mutations: m, ..EngineConfig::default() });
    assert_eq!(answers, vec![], "still parked after the leader change");
}

/// `ReplicaFetcherManager` with `num.replica.fetchers` 1 runs one fetcher per leader broker, and each of
/// its requests covers every partition it follows there (`AbstractFetcherThread.maybeFetch`): a new
/// cluster of three brokers, where broker 0 leads `t-0`..`t-2` and `__transaction_state-0`, sends two
/// fetches, not eight, each naming all four partitions.
#[test]
fn a_follower_sends_one_fetch_per_leader_for_all_its_partitions() {
    let topics: BTreeMap<String, u32> = [("t".to_string(), 3)].into_iter().collect();
    let c = Cluster::with_topology(&topics, EngineConfig::default(), &Topology::new(3, 3));
    let fetches: Vec<(NodeId, NodeId, Vec<String>)> = c
        .in_flight()
        .filter_map(|e| match &e.message {
            Message::ReplicaFetchRequest { partitions } => Some((
                e.from.clone(),
                e.to.clone(),
                partitions.iter().map(|p| format!("{}@{}", p.partition, p.fetch_offset)).collect(),
            )),
            _ => None,
        })
        .collect();
    let all: Vec<String> =
        ["__transaction_state/0@0", "t/0@0", "t/1@0", "t/2@0"].into_iter().map(String::from).collect();
    let expected =
        vec![(NodeId::Broker(1), NodeId::Broker(0), all.clone()), (NodeId::Broker(2), NodeId::Broker(0), all)];
    assert_eq!(fetches, expected, "one fetch per follower and leader, covering all its partitions");
}
