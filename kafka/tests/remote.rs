//! The real-cluster side's translation of what a client reports into the history.

use txnsim_engine::TopicPartition;
use txnsim_kafka::remote::exec::DeliveredOffsets;
use txnsim_properties::history::CallOutcome;

fn sent(o: u64) -> CallOutcome {
    CallOutcome::Sent { first_offset: o, last_offset: o, duplicate: false }
}

/// librdkafka reports a retry answered DUPLICATE_SEQUENCE_NUMBER as delivered at offset -1001
/// (`RD_KAFKA_OFFSET_INVALID`): that is an unknown outcome, not an acknowledgement at 2^64 - 1001.
#[test]
fn a_delivery_without_an_offset_is_unknown_not_an_acknowledgement() {
    let mut d = DeliveredOffsets::default();
    assert_eq!(d.outcome(TopicPartition::new("t", 0), -1001), CallOutcome::Unknown, "RD_KAFKA_OFFSET_INVALID");
    assert_eq!(d.outcome(TopicPartition::new("t", 0), 7), sent(7));
}

/// A broker that answers DUPLICATE_SEQUENCE_NUMBER with base offset -1 makes librdkafka report the
/// batch's records at -1, 0, 1: all three are unknown; the next batch's real offsets are acknowledgements,
/// and a run on one partition does not touch another's.
#[test]
fn a_batch_reported_from_base_offset_minus_one_is_unknown_throughout() {
    let (t0, t1) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
    let mut d = DeliveredOffsets::default();
    let outcomes: Vec<CallOutcome> = [(&t0, -1), (&t1, 0), (&t0, 0), (&t0, 1), (&t0, 3), (&t0, 4), (&t1, 1)]
        .into_iter()
        .map(|(tp, o)| d.outcome(tp.clone(), o))
        .collect();
    assert_eq!(
        outcomes,
        [CallOutcome::Unknown, sent(0), CallOutcome::Unknown, CallOutcome::Unknown, sent(3), sent(4), sent(1)],
        "t/0's run -1, 0, 1 is one duplicate batch; t/1's offsets are its own"
    );
}

/// A fake broker on loopback that answers every Fetch from `answers` in turn (the last one again once
/// they run out): `true` names the partition (HW 0, nothing to read), `false` answers with no topic at
/// all, as a broker may when it answers early with nothing.
fn fake_fetch_broker(answers: Vec<bool>) -> String {
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::{FetchResponse, RequestHeader, ResponseHeader, TopicName};
    use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let address = listener.local_addr().expect("bound").to_string();
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("the read-back connects");
        let mut answers = answers.into_iter().peekable();
        let mut last = false;
        while let Ok(Some(mut request)) = txnsim_kafka::frame::read_frame(&mut stream) {
            let header = RequestHeader::decode(&mut request, 2).expect("a v2 request header (Fetch v12)");
            last = answers.next().unwrap_or(last);
            let mut response = FetchResponse::default();
            if last {
                let mut p = PartitionData::default();
                p.partition_index = 0;
                let mut t = FetchableTopicResponse::default();
                t.topic = TopicName(StrBytes::from_static_str("t"));
                t.partitions = vec![p];
                response.responses = vec![t];
            }
            let mut body = bytes::BytesMut::new();
            let mut rh = ResponseHeader::default();
            rh.correlation_id = header.correlation_id;
            rh.encode(&mut body, FetchResponse::header_version(12)).expect("encode");
            response.encode(&mut body, 12).expect("encode");
            std::io::Write::write_all(&mut stream, &txnsim_kafka::frame::frame(&body)).expect("answer");
        }
    });
    address
}

/// A broker may answer a Fetch early with nothing: the read-back fetches again, as a consumer does,
/// and only a broker that never names the partition fails it (with how many answers it got).
#[test]
fn a_read_back_fetches_again_after_an_empty_answer() {
    use txnsim_kafka::remote::wire::{fetch_log, Conn, Isolation};
    let tp = TopicPartition::new("t", 0);
    let mut conn = Conn::connect(&fake_fetch_broker(vec![false, false, true])).expect("connect");
    let view = fetch_log(&mut conn, &tp, Isolation::ReadUncommitted).expect("the third answer names t/0");
    assert_eq!((view.high_watermark, view.batches.len()), (0, 0));
    let mut conn = Conn::connect(&fake_fetch_broker(vec![false])).expect("connect");
    let e = fetch_log(&mut conn, &tp, Isolation::ReadUncommitted).expect_err("never a partition");
    assert_eq!(e, "t/0: 50 Fetch answers in a row had no such partition");
}

/// `--nemesis`: a list keeps each kind once, in its order; `auto` and `none` are words; an unknown kind is
/// an error naming the known ones.
#[test]
fn the_nemesis_flag_names_kinds_auto_or_none() {
    use txnsim_kafka::remote::nemesis::{Choice, NemesisKind};
    assert_eq!(Choice::parse("none"), Ok(Choice::None));
    assert_eq!(Choice::parse("auto"), Ok(Choice::Auto));
    assert_eq!(
        Choice::parse("cut-link,kill-node,cut-link"),
        Ok(Choice::List(vec![NemesisKind::CutLink, NemesisKind::KillNode]))
    );
    assert_eq!(
        Choice::parse("kill-node,crash"),
        Err("--nemesis: unknown kind \"crash\"; known: kill-node, pause-node, cut-link, or auto or none".to_string())
    );
    assert!(!Choice::parse("kill-node,pause-node").expect("a list").may_cut_links());
}

/// The nemesis's draw is the seed's: the same seed draws the same faults, a list runs each kind once with
/// nodes of the cluster and holds past the timeout each kind outlasts, and `auto` on one node cuts no link.
#[test]
fn the_nemesis_draw_is_the_seeds() {
    use txnsim_kafka::apache_kafka::BROKER_SESSION_TIMEOUT_MS;
    use txnsim_kafka::remote::nemesis::{draw, Choice, NemesisKind, REPLICA_LAG_TIME_MAX_MS};
    use txnsim_sim::rng::SimRng;
    let params = txnsim_sim::Profile::Standard.params();
    let all = Choice::List(NemesisKind::ALL.to_vec());
    for seed in 0..200 {
        let steps = draw(&all, &params, 3, &mut SimRng::new(seed));
        assert_eq!(steps, draw(&all, &params, 3, &mut SimRng::new(seed)), "seed {seed} draws the same");
        let mut kinds: Vec<NemesisKind> = steps.iter().map(|s| s.kind).collect();
        kinds.sort();
        assert_eq!(kinds, NemesisKind::ALL, "seed {seed}: each kind once");
        for s in &steps {
            assert!(s.nodes.iter().all(|n| *n < 3), "seed {seed}: {s:?}");
            let past = match s.kind {
                NemesisKind::KillNode => 500,
                NemesisKind::PauseNode => BROKER_SESSION_TIMEOUT_MS,
                NemesisKind::CutLink => {
                    assert!(s.nodes.len() == 2 && s.nodes[0] < s.nodes[1], "seed {seed}: a link {s:?}");
                    REPLICA_LAG_TIME_MAX_MS
                }
            };
            assert!(s.hold_ms >= past, "seed {seed}: {s:?} holds past {past} ms");
        }
        let one = draw(&Choice::Auto, &params, 1, &mut SimRng::new(seed));
        assert!(one.iter().all(|s| s.kind != NemesisKind::CutLink && s.nodes == [0]), "seed {seed}: {one:?}");
    }
    // `auto` switches kinds on from the standard profile's fault mix: some seeds run none, some all three.
    let counts: Vec<usize> =
        (0..200).map(|seed| draw(&Choice::Auto, &params, 3, &mut SimRng::new(seed)).len()).collect();
    assert!(counts.contains(&0) && counts.contains(&3), "{counts:?}");
}

/// On a real cluster `duplicate` and `nonmonotonic-send` leave out the plain producer, whose records
/// Kafka may store twice or out of order (a batch answered NOT_LEADER_OR_FOLLOWER after its append is
/// resent by librdkafka whatever `retries` says); an idempotent producer's are still checked.
#[test]
fn a_plain_producers_record_stored_twice_or_out_of_order_is_no_violation_on_a_real_cluster() {
    use serde_json::json;
    use txnsim_kafka::remote::{file::check_seed, wire::WireLog};
    use txnsim_properties::{History, Invariant};
    let log = |values: &[&str]| -> WireLog {
        let batches: Vec<_> = values
            .iter()
            .enumerate()
            .map(|(o, v)| {
                json!({"base_offset": o, "last_offset": o, "producer": null, "is_transactional": false,
                       "body": {"Data": [{"offset": o, "value": v}]}})
            })
            .collect();
        serde_json::from_value(
            json!({"topic": "t", "partition": 0, "high_watermark": values.len(), "batches": batches}),
        )
        .expect("a log")
    };
    let sent = |process: &str, value: &str| -> History {
        serde_json::from_value(json!({"events": [{"type": "invoke", "time_ms": 0, "process": process, "call_id": 1,
            "call": {"call": "send", "partition": {"topic": "t", "partition": 0}, "values": [value]}}]}))
        .expect("a history")
    };
    // The standard profile's n0 is its plain producer, i0 its idempotent one.
    let duplicates = |process: &str, value: &str| -> Vec<String> {
        check_seed(txnsim_sim::Profile::Standard, &sent(process, value), &[log(&[value, "x", value])])
            .expect("checked")
            .into_iter()
            .filter(|v| v.invariant == Invariant::Duplicate)
            .map(|v| v.witness)
            .collect()
    };
    assert_eq!(duplicates("n0", "n0-1"), Vec::<String>::new());
    assert_eq!(duplicates("i0", "i0-1"), ["t/0: value \"i0-1\" stored at offsets 0 and 2"]);
    // Two sends acknowledged out of their order: the plain producer's may be (a resent batch lands behind
    // a later one), the idempotent producer's may not.
    let reordered = |process: &str| -> Vec<String> {
        let call = |id: u64, v: &str| {
            json!({"type": "invoke", "time_ms": id, "process": process, "call_id": id,
                   "call": {"call": "send", "partition": {"topic": "t", "partition": 0}, "values": [v]}})
        };
        let ack = |id: u64, o: u64| {
            json!({"type": "complete", "time_ms": 9, "process": process, "call_id": id,
                   "outcome": {"outcome": "sent", "first_offset": o, "last_offset": o, "duplicate": false}})
        };
        let (a, b) = (format!("{process}-1"), format!("{process}-2"));
        let history: History =
            serde_json::from_value(json!({"events": [call(1, &a), call(2, &b), ack(2, 0), ack(1, 1)]}))
                .expect("a history");
        check_seed(txnsim_sim::Profile::Standard, &history, &[log(&[&b, &a])])
            .expect("checked")
            .into_iter()
            .filter(|v| v.invariant == Invariant::NonmonotonicSend)
            .map(|v| v.witness)
            .collect()
    };
    assert_eq!(reordered("n0"), Vec::<String>::new());
    assert_eq!(reordered("i0"), ["i0 -> t/0: send #2 acknowledged at offset 0, after send #1 at 1"]);
}
