//! Client rules: API misuse gets Kafka's error code (never a panic), recovery follows KIP-360, and the engine's own
//! assertions guard its invariants.

use std::collections::BTreeMap;
use txnsim_engine::cluster::Step;
use txnsim_engine::coordinator::{TransactionMetadata, TransactionState};
use txnsim_engine::producer::OpOutput;
use txnsim_engine::producer_state::AppendOrigin;
use txnsim_engine::protocol::{Message, NodeId};
use txnsim_engine::record::{BatchProducer, CompressionType, EndTxnMarker, ProduceBatch};
use txnsim_engine::{
    Cluster, EngineConfig, KafkaError, Mutations, PartitionLog, ProducerKind, TopicPartition, TransactionResult,
    TransactionVersion, TxnManagerState,
};

fn cluster() -> Cluster {
    let topics: BTreeMap<String, u32> = [("t".to_string(), 2)].into_iter().collect();
    Cluster::new(&topics, EngineConfig::default())
}

fn init(c: &mut Cluster, name: &str) {
    c.add_producer(name, ProducerKind::Transactional { transactional_id: name.to_string() });
    let r = c.call_producer(name, |p, now| p.init_transactions(now));
    assert!(matches!(r, Ok(Some(OpOutput::Initialized(_)))), "init of {name} succeeds: {r:?}");
}

fn tp(p: u32) -> TopicPartition {
    TopicPartition::new("t", p)
}

#[test]
fn produce_outside_a_transaction_is_invalid_txn_state() {
    let mut c = cluster();
    init(&mut c, "p");
    let r = c.call_producer("p", |p, now| p.send(now, tp(0), vec!["v".into()]));
    assert_eq!(r, Err(KafkaError::InvalidTxnState), "a transactional producer must begin before it sends");
    assert_eq!(KafkaError::InvalidTxnState.code(), 48, "Kafka's wire code for INVALID_TXN_STATE");
    assert_eq!(c.broker.partition(&tp(0)).unwrap().log_end_offset(), 0, "a rejected send writes nothing");
}

#[test]
fn commit_and_abort_without_a_transaction_are_invalid_txn_state() {
    let mut c = cluster();
    init(&mut c, "p");
    assert_eq!(c.call_producer("p", |p, now| p.commit_transaction(now)), Err(KafkaError::InvalidTxnState));
    assert_eq!(c.call_producer("p", |p, now| p.abort_transaction(now)), Err(KafkaError::InvalidTxnState));
}

#[test]
fn begin_inside_a_transaction_is_invalid_txn_state_and_keeps_it_open() {
    let mut c = cluster();
    init(&mut c, "p");
    c.producers.get_mut("p").unwrap().begin_transaction().expect("first begin");
    assert_eq!(c.producers.get_mut("p").unwrap().begin_transaction(), Err(KafkaError::InvalidTxnState));
    let r = c.call_producer("p", |p, now| p.send(now, tp(0), vec!["v".into()]));
    assert!(matches!(r, Ok(Some(OpOutput::Sent { .. }))), "the transaction is still open: {r:?}");
}

#[test]
fn calls_before_init_are_rejected() {
    let mut c = cluster();
    c.add_producer("p", ProducerKind::Transactional { transactional_id: "p".into() });
    assert_eq!(c.producers.get_mut("p").unwrap().begin_transaction(), Err(KafkaError::InvalidTxnState));
    assert_eq!(c.call_producer("p", |p, now| p.send(now, tp(0), vec!["v".into()])), Err(KafkaError::InvalidTxnState));
}

#[test]
fn idempotent_producer_cannot_begin() {
    let mut c = cluster();
    c.add_producer("i", ProducerKind::Idempotent);
    assert!(matches!(c.call_producer("i", |p, now| p.init_transactions(now)), Ok(Some(OpOutput::Initialized(_)))));
    assert_eq!(c.producers.get_mut("i").unwrap().begin_transaction(), Err(KafkaError::InvalidTxnState));
}

/// `TransactionManagerTest#testRetriableErrors(UNKNOWN_TOPIC_OR_PARTITION)`: an AddPartitionsToTxn answered
/// UNKNOWN_TOPIC_OR_PARTITION is retried after `retry.backoff.ms`, not failed; the batch waits undrained.
#[test]
fn add_partitions_unknown_topic_or_partition_is_retried() {
    let mut c = cluster();
    init(&mut c, "p");
    c.producers.get_mut("p").unwrap().begin_transaction().unwrap();
    let (op, effects) =
        c.producers.get_mut("p").unwrap().send(0, TopicPartition::new("nope", 0), vec!["v".into()]).unwrap();
    c.apply(&NodeId::Client("p".into()), effects);
    c.record_steps = true;
    for _ in 0..40 {
        c.step();
    }
    let adds = c
        .steps
        .iter()
        .filter(|s| matches!(s, Step::Delivered { envelope, .. } if matches!(envelope.message, Message::AddPartitionsToTxnRequest { .. })))
        .count();
    assert!(adds >= 5, "the AddPartitionsToTxn is retried every retry.backoff.ms; delivered {adds} times in 40 steps");
    let p = c.producers.get_mut("p").unwrap();
    assert_eq!(p.state, TxnManagerState::InTransaction, "a retriable error leaves the transaction as it was");
    assert!(p.take_completions().iter().all(|x| x.op != op), "the send neither succeeded nor failed yet");
    assert_eq!(p.in_flight_batches(), 0, "the batch was never drained: its partition is not in the transaction");
}

#[test]
fn non_transactional_write_while_a_transaction_is_open_is_invalid_txn_state() {
    let mut log = PartitionLog::new();
    let m = Mutations::none();
    let txn = ProduceBatch {
        producer: Some(BatchProducer { producer_id: 7, epoch: 0, base_sequence: 0 }),
        is_transactional: true,
        values: vec!["a".into()],
        compression: CompressionType::None,
    };
    log.append_data(&txn, AppendOrigin::Client, 0, &m).expect("a transaction begins");
    let plain = ProduceBatch {
        producer: Some(BatchProducer { producer_id: 7, epoch: 0, base_sequence: 1 }),
        is_transactional: false,
        values: vec!["b".into()],
        compression: CompressionType::None,
    };
    assert_eq!(log.append_data(&plain, AppendOrigin::Client, 0, &m), Err(KafkaError::InvalidTxnState));
    assert_eq!(log.log_end_offset(), 1, "the rejected batch took no offset");
}

/// KIP-1228 with KAFKA-19999: under TV2 a marker carries the bumped epoch, so one at the epoch of the
/// transaction open on the partition is a late copy of the previous decision and is refused; the same
/// marker with nothing open is a retry and is accepted. TV1 cannot tell them apart and accepts both.
#[test]
fn tv2_leader_refuses_a_marker_at_the_open_transactions_epoch() {
    let m = Mutations::none();
    let abort = EndTxnMarker { result: TransactionResult::Abort, coordinator_epoch: 0 };
    let open_at = |log: &mut PartitionLog, epoch, seq| {
        let batch = ProduceBatch {
            producer: Some(BatchProducer { producer_id: 7, epoch, base_sequence: seq }),
            is_transactional: true,
            values: vec!["a".into()],
            compression: CompressionType::None,
        };
        log.append_data(&batch, AppendOrigin::Client, 0, &m).expect("a transaction begins");
    };
    for (version, late_marker) in
        [(TransactionVersion::V2, Err(KafkaError::InvalidProducerEpoch)), (TransactionVersion::V1, Ok(4))]
    {
        let mut log = PartitionLog::new();
        open_at(&mut log, 0, 0);
        let marker = |log: &mut PartitionLog| log.append_marker(7, 1, abort, AppendOrigin::Coordinator, version, 0, &m);
        assert_eq!(marker(&mut log), Ok(1), "{version:?}: the bumped-epoch marker closes the epoch-0 transaction");
        assert_eq!(
            marker(&mut log),
            Ok(2),
            "{version:?}: a retried marker with nothing open is accepted (KAFKA-19999)"
        );
        open_at(&mut log, 1, 0);
        assert_eq!(marker(&mut log), late_marker, "{version:?}: the late copy meets the epoch-1 transaction");
        log.update_high_watermark(log.log_end_offset(), &m);
        let open = log.last_stable_offset(&m) < log.log_end_offset();
        assert_eq!(open, late_marker.is_err(), "{version:?}: the epoch-1 transaction is still open only if refused");
    }
}

#[test]
fn empty_produce_is_invalid_request() {
    let mut log = PartitionLog::new();
    let batch =
        ProduceBatch { producer: None, is_transactional: false, values: vec![], compression: CompressionType::None };
    assert_eq!(log.append_data(&batch, AppendOrigin::Client, 0, &Mutations::none()), Err(KafkaError::InvalidRequest));
}

#[test]
fn every_error_name_round_trips() {
    for e in KafkaError::ALL {
        assert_eq!(KafkaError::from_name(e.name()), Some(e), "{} parses back", e.name());
    }
    assert_eq!(
        KafkaError::from_name("OUT_OF_ORDER_SEQUENCE"),
        Some(KafkaError::OutOfOrderSequence),
        "docs/scenario-format.md's short form"
    );
}

#[test]
#[should_panic(expected = "invalid transition Empty -> PrepareCommit")]
fn coordinator_asserts_kafkas_transition_table() {
    let mut meta = TransactionMetadata::new("t", 1, 60_000, 0);
    meta.transition_to(TransactionState::PrepareCommit, 1);
}

/// Runs the cluster until quiet while the network loses every Produce request.
fn run_losing_produces(c: &mut Cluster) {
    loop {
        match c.peek_message().map(|e| &e.message) {
            Some(txnsim_engine::protocol::Message::ProduceRequest { .. }) => {
                c.take_message();
            }
            Some(_) => {
                c.step();
            }
            None => break,
        }
    }
}

#[test]
fn abort_after_a_timed_out_batch_bumps_the_epoch_so_the_next_transaction_works() {
    let topics: BTreeMap<String, u32> = [("t".to_string(), 1)].into_iter().collect();
    // A transaction timeout past the client's delivery timeout, so only the client gives up.
    let mut c = Cluster::new(&topics, EngineConfig { transaction_timeout_ms: 300_000, ..EngineConfig::default() });
    init(&mut c, "p");
    c.producers.get_mut("p").unwrap().begin_transaction().unwrap();
    let now = c.now_ms;
    let (op, effects) = c.producers.get_mut("p").unwrap().send(now, tp(0), vec!["lost".into()]).unwrap();
    let node = c.producers["p"].id.clone();
    c.apply(&node, effects);
    // Every attempt is lost; the client gives up after `delivery_attempts_max` request timeouts.
    let mut done = Vec::new();
    for _ in 0..100 {
        run_losing_produces(&mut c);
        done.extend(c.producers.get_mut("p").unwrap().take_completions());
        if !done.is_empty() || !c.fire_next_timer() {
            break;
        }
    }
    assert!(
        done.iter().any(|d| d.op == op && d.result == Err(KafkaError::RequestTimedOut)),
        "the send gives up with REQUEST_TIMED_OUT: {done:?}"
    );
    let epoch_before = c.producers["p"].producer_id_and_epoch.unwrap().epoch;
    let aborted = c.call_producer("p", |p, now| p.abort_transaction(now));
    assert_eq!(aborted, Ok(Some(OpOutput::Aborted)), "the abort completes after its epoch bump");
    let epoch_after = c.producers["p"].producer_id_and_epoch.unwrap().epoch;
    assert_eq!(epoch_after, epoch_before + 1, "KIP-360: the abort bumps the epoch so sequences restart at 0");
    c.producers.get_mut("p").unwrap().begin_transaction().unwrap();
    let r = c.call_producer("p", |p, now| p.send(now, tp(0), vec!["next".into()]));
    assert!(matches!(r, Ok(Some(OpOutput::Sent { .. }))), "the next transaction's send is in sequence: {r:?}");
    assert!(matches!(c.call_producer("p", |p, now| p.commit_transaction(now)), Ok(Some(OpOutput::Committed))));
}

/// `UnifiedLog.hasOngoingTransaction` compares epochs: under TV2 the next transaction's first batch carries
/// the bumped epoch, so while the previous transaction's markers are still on their way it is verified,
/// not appended into the transaction still open on the partition. The coordinator answers
/// CONCURRENT_TRANSACTIONS until the markers land; then the batch goes in after the COMMIT marker.
#[test]
fn tv2_batch_at_the_bumped_epoch_waits_for_the_previous_markers() {
    let topics: BTreeMap<String, u32> = [("t".to_string(), 2)].into_iter().collect();
    let config = EngineConfig { transaction_version: TransactionVersion::V2, ..EngineConfig::default() };
    let mut c = Cluster::new(&topics, config);
    init(&mut c, "p");
    let is_marker = |env: &txnsim_engine::protocol::Envelope| {
        matches!(env.message, txnsim_engine::protocol::Message::WriteTxnMarkersRequest { .. })
    };
    let mut held = Vec::new();
    // Steps the cluster with every WriteTxnMarkers request held back.
    let mut run_holding_markers = |c: &mut Cluster, steps: usize| {
        for _ in 0..steps {
            if c.peek_message().is_some_and(is_marker) {
                held.push(c.take_message().expect("peeked"));
            } else if !c.step() {
                break;
            }
        }
    };
    c.producers.get_mut("p").unwrap().begin_transaction().expect("begin");
    let sent = c.call_producer("p", |p, now| p.send(now, tp(0), vec!["a".into()]));
    assert!(matches!(sent, Ok(Some(OpOutput::Sent { .. }))), "the first transaction's batch: {sent:?}");
    let (op, effects) = c.producers.get_mut("p").unwrap().commit_transaction(c.now_ms).expect("commit");
    c.apply(&NodeId::Client("p".into()), effects);
    run_holding_markers(&mut c, 50);
    let done = c.producers.get_mut("p").unwrap().take_completions();
    assert!(done.iter().any(|d| d.op == op && d.result.is_ok()), "EndTxn answered before the markers: {done:?}");

    c.producers.get_mut("p").unwrap().begin_transaction().expect("begin the next transaction");
    let (_, effects) = c.producers.get_mut("p").unwrap().send(c.now_ms, tp(0), vec!["b".into()]).expect("send");
    c.apply(&NodeId::Client("p".into()), effects);
    run_holding_markers(&mut c, 12);
    let log = c.broker.partition(&tp(0)).unwrap();
    assert_eq!(log.log_end_offset(), 1, "the bumped-epoch batch waits: it must not join the open transaction");
    assert!(!held.is_empty(), "the markers were held back");

    for env in held.drain(..) {
        c.inject(env);
    }
    assert!(c.run_until_quiet(), "the cluster settles once the markers land");
    let done = c.producers.get_mut("p").unwrap().take_completions();
    assert!(done.iter().all(|d| d.result.is_ok()), "b's send succeeds: {done:?}");
    let log = c.broker.partition(&tp(0)).unwrap();
    assert_eq!(log.log_end_offset(), 3, "a, the COMMIT marker, then b");
    let (records, _) = c.read(txnsim_engine::IsolationLevel::ReadUncommitted, &tp(0), 0).expect("read");
    let values: Vec<&str> = records.iter().map(|r| r.value.as_str()).collect();
    assert_eq!(values, ["a", "b"], "b went in after the marker that closed a's transaction");
}
