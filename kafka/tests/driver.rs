//! The wire driver without sockets: requests encoded with kafka-protocol's client codecs go in as
//! frames, responses are decoded back. Exact answers for the transactional path, then bad input over
//! the whole path (frame, decode, dispatch, encode): no input panics, aborts or changes a log.

use bytes::{Bytes, BytesMut};
use indexmap::IndexMap;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::io::Cursor;
use txnsim_engine::{EngineConfig, Mutation, Mutations, PartitionLog, TopicPartition};
use txnsim_kafka::driver::ConnId;
use txnsim_kafka::frame::{self, FrameError, MAX_REQUEST_BYTES};
use txnsim_kafka::{Driver, Output};

// kafka-protocol's array decoder reserves `Vec::with_capacity(count)` from the wire before reading an
// element: under the system allocator a count of 0x7fffffff aborts the process; mimalloc reserves
// address space without touching it, so the decoder fails cleanly (the `txnsim` binary uses it too).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const TOPIC: &str = "t";

fn request<R: Encodable + HeaderVersion>(key: ApiKey, version: i16, corr: i32, body: &R) -> Bytes {
    let mut header = RequestHeader::default();
    header.request_api_key = key as i16;
    header.request_api_version = version;
    header.correlation_id = corr;
    header.client_id = Some(StrBytes::from_static_str("test"));
    let mut buf = BytesMut::new();
    header.encode(&mut buf, R::header_version(version)).expect("header encodes");
    body.encode(&mut buf, version).expect("body encodes");
    buf.freeze()
}

/// The one response a request must get: its body, decoded in the request's version.
fn answer<R: Decodable + HeaderVersion>(outputs: Vec<Output>, conn: ConnId, version: i16) -> R {
    let [Output::Send(to, bytes)] = outputs.as_slice() else { panic!("want one response, got {outputs:?}") };
    assert_eq!(*to, conn, "the response goes to the asking connection");
    let mut body = bytes.slice(4..);
    ResponseHeader::decode(&mut body, R::header_version(version)).expect("response header decodes");
    R::decode(&mut body, version).expect("response body decodes")
}

fn records(pid: i64, epoch: i16, base_sequence: i32, transactional: bool, values: &[&str]) -> Bytes {
    compressed_records(Compression::None, (pid, epoch, base_sequence, transactional), values)
}

/// `records` as one batch in `compression`.
fn compressed_records(compression: Compression, producer: (i64, i16, i32, bool), values: &[&str]) -> Bytes {
    let (pid, epoch, base_sequence, transactional) = producer;
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: pid,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: if pid < 0 { -1 } else { base_sequence + i as i32 },
            timestamp: 1_700_000_000_000 + i as i64,
            key: Some(Bytes::from_static(b"k")),
            value: Some(Bytes::from(v.to_string())),
            headers: IndexMap::from([(StrBytes::from_static_str("h"), Some(Bytes::from_static(b"x")))]),
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions { version: 2, compression };
    RecordBatchEncoder::encode(&mut buf, &records, &options).expect("records encode");
    buf.freeze()
}

fn produce(tid: Option<&str>, records: Bytes) -> ProduceRequest {
    let mut p = produce_request::PartitionProduceData::default();
    p.index = 0;
    p.records = Some(records);
    let mut t = produce_request::TopicProduceData::default();
    t.name = StrBytes::from_static_str(TOPIC).into();
    t.partition_data = vec![p];
    let mut r = ProduceRequest::default();
    r.transactional_id = tid.map(|t| StrBytes::from_string(t.to_string()).into());
    r.acks = -1;
    r.timeout_ms = 1000;
    r.topic_data = vec![t];
    r
}

fn fetch(isolation: i8, offset: i64) -> FetchRequest {
    let mut p = fetch_request::FetchPartition::default();
    p.partition = 0;
    p.fetch_offset = offset;
    p.partition_max_bytes = 1 << 20;
    let mut t = fetch_request::FetchTopic::default();
    t.topic = StrBytes::from_static_str(TOPIC).into();
    t.partitions = vec![p];
    let mut r = FetchRequest::default();
    r.replica_id = (-1).into();
    r.max_wait_ms = 0;
    r.max_bytes = 1 << 20;
    r.isolation_level = isolation;
    r.topics = vec![t];
    r
}

/// CreateTopics for one topic (`-1`: the broker's default).
fn create_topic(name: &'static str, partitions: i32, replication_factor: i16) -> CreateTopicsRequest {
    let mut topic = create_topics_request::CreatableTopic::default();
    topic.name = StrBytes::from_static_str(name).into();
    topic.num_partitions = partitions;
    topic.replication_factor = replication_factor;
    let mut create = CreateTopicsRequest::default();
    create.topics = vec![topic];
    create
}

/// A driver with topic `t` (2 partitions) holding, on partition 0: two plain records (0, 1), a
/// committed transaction (2, 3; marker 4) and an aborted one (5; marker 6).
fn fixture() -> (Driver, i64) {
    let mut d = Driver::new(EngineConfig::default(), "127.0.0.1", 9092, 0);
    let create = create_topic(TOPIC, 2, 1);
    let r: CreateTopicsResponse = answer(d.on_frame(1, 1, request(ApiKey::CreateTopics, 7, 1, &create)), 1, 7);
    assert_eq!(r.topics[0].error_code, 0, "topic created");
    assert_eq!(r.topics[0].num_partitions, 2);

    let r: ProduceResponse = answer(
        d.on_frame(2, 1, request(ApiKey::Produce, 9, 2, &produce(None, records(-1, -1, -1, false, &["p-0", "p-1"])))),
        1,
        9,
    );
    assert_eq!(
        (r.responses[0].partition_responses[0].error_code, r.responses[0].partition_responses[0].base_offset),
        (0, 0)
    );

    let (pid, epoch) = init_transaction(&mut d, 3, 1);
    assert_eq!(epoch, 0);
    for (i, (values, commit)) in [(&["c-0", "c-1"][..], true), (&["a-0"][..], false)].into_iter().enumerate() {
        assert_eq!(add_partition(&mut d, 4, 1, pid, 0), 0, "AddPartitionsToTxn");
        let seq = 2 * i as i32;
        let r: ProduceResponse = answer(
            d.on_frame(5, 1, request(ApiKey::Produce, 9, 5, &produce(Some("tx"), records(pid, 0, seq, true, values)))),
            1,
            9,
        );
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0, "transactional produce");
        assert_eq!(end_txn(&mut d, 6, 1, pid, 0, commit), 0, "EndTxn");
    }
    (d, pid)
}

fn values(records: &Bytes) -> Vec<(i64, String)> {
    let mut buf = records.clone();
    let mut out = Vec::new();
    for set in RecordBatchDecoder::decode_all(&mut buf).expect("fetched records decode") {
        for r in set.records.iter().filter(|r| !r.control) {
            out.push((r.offset, String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap()));
        }
    }
    out
}

#[test]
fn fetch_returns_offsets_watermarks_and_the_aborted_list() {
    let (mut d, pid) = fixture();
    let r: FetchResponse = answer(d.on_frame(10, 2, request(ApiKey::Fetch, 12, 7, &fetch(1, 0))), 2, 12);
    let p = &r.responses[0].partitions[0];
    assert_eq!((p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset), (0, 7, 7, 0));
    let aborted: Vec<(i64, i64)> = p
        .aborted_transactions
        .as_ref()
        .expect("read_committed gets the list")
        .iter()
        .map(|a| (a.producer_id.0, a.first_offset))
        .collect();
    assert_eq!(aborted, vec![(pid, 5)], "one aborted transaction, first offset 5");
    // The broker returns every batch; the consumer drops aborted ones with the list.
    let all = values(p.records.as_ref().unwrap());
    let want: Vec<(i64, String)> =
        [(0, "p-0"), (1, "p-1"), (2, "c-0"), (3, "c-1"), (5, "a-0")].iter().map(|(o, v)| (*o, v.to_string())).collect();
    assert_eq!(all, want);

    let r: FetchResponse = answer(d.on_frame(11, 2, request(ApiKey::Fetch, 12, 8, &fetch(0, 0))), 2, 12);
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.aborted_transactions, None, "read_uncommitted gets null");
    // Keys, headers and timestamps come back as produced.
    let mut buf = p.records.clone().unwrap();
    let first = &RecordBatchDecoder::decode(&mut buf).unwrap().records[0];
    assert_eq!((first.key.as_deref(), first.timestamp), (Some(&b"k"[..]), 1_700_000_000_000));
    assert_eq!(first.headers.get(&StrBytes::from_static_str("h")), Some(&Some(Bytes::from_static(b"x"))));
}

/// A compressed batch is kept in its codec and fetched in it (`LogValidator` keeps the producer's codec
/// under topic `compression.type=producer`); zstd needs Produce v7 (`ProduceRequest.validateRecords`).
#[test]
fn compressed_batches_are_fetched_in_their_codec_and_zstd_needs_produce_v7() {
    let (mut d, _) = fixture();
    let codecs = [Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd];
    for (i, codec) in codecs.into_iter().enumerate() {
        let batch = compressed_records(codec, (-1, -1, -1, false), &["z-0", "z-1"]);
        let r: ProduceResponse =
            answer(d.on_frame(20, 1, request(ApiKey::Produce, 9, 20, &produce(None, batch))), 1, 9);
        let p = &r.responses[0].partition_responses[0];
        assert_eq!((p.error_code, p.base_offset), (0, 7 + 2 * i as i64), "{codec:?} batch appended");
    }
    let zstd = compressed_records(Compression::Zstd, (-1, -1, -1, false), &["old"]);
    let r: ProduceResponse = answer(d.on_frame(21, 1, request(ApiKey::Produce, 6, 21, &produce(None, zstd))), 1, 6);
    assert_eq!(r.responses[0].partition_responses[0].error_code, 76, "UNSUPPORTED_COMPRESSION_TYPE below v7");
    let r: FetchResponse = answer(d.on_frame(22, 2, request(ApiKey::Fetch, 12, 22, &fetch(1, 4))), 2, 12);
    let records = r.responses[0].partitions[0].records.clone().expect("records");
    let infos = RecordBatchDecoder::decode_batch_info(&mut records.clone()).expect("batch headers decode");
    let got: Vec<(i64, Compression, bool)> = infos.iter().map(|b| (b.min_offset, b.compression, b.control)).collect();
    let mut want = vec![(4, Compression::None, true), (5, Compression::None, false), (6, Compression::None, true)];
    // A plain record has no sequence (-1 each), so the request's encoder wrote one batch per record.
    want.extend((7..15).map(|offset| (offset, codecs[(offset as usize - 7) / 2], false)));
    assert_eq!(got, want, "(base offset, codec, control) of each fetched batch");
    let tail: Vec<String> = values(&records).into_iter().skip(1).map(|(_, v)| v).collect();
    assert_eq!(tail, ["z-0", "z-1"].repeat(4), "the values decompress as produced; the v6 zstd batch is absent");
}

/// ListOffsets v7 of partition 0 at `isolation` for `timestamp` (-1 latest, -2 earliest).
fn list_offset(d: &mut Driver, now: u64, isolation: i8, timestamp: i64) -> i64 {
    let mut p = list_offsets_request::ListOffsetsPartition::default();
    p.partition_index = 0;
    p.timestamp = timestamp;
    let mut t = list_offsets_request::ListOffsetsTopic::default();
    t.name = StrBytes::from_static_str(TOPIC).into();
    t.partitions = vec![p];
    let mut r = ListOffsetsRequest::default();
    r.replica_id = (-1).into();
    r.isolation_level = isolation;
    r.topics = vec![t];
    let r: ListOffsetsResponse = answer(d.on_frame(now, 3, request(ApiKey::ListOffsets, 7, 9, &r)), 3, 7);
    r.topics[0].partitions[0].offset
}

#[test]
fn list_offsets_latest_per_isolation_and_earliest() {
    let (mut d, _) = fixture();
    let offsets: Vec<i64> =
        [(0, -1), (1, -1), (0, -2)].into_iter().map(|(i, ts)| list_offset(&mut d, 10, i, ts)).collect();
    assert_eq!(offsets, vec![7, 7, 0], "HW, LSO (no open transaction), log start");
}

/// While a transaction is open its first offset is the LSO (`UnifiedLog.lastStableOffset`): the Fetch
/// answer's `last_stable_offset`, what a read_committed Fetch returns (`FetchIsolation.TXN_COMMITTED`)
/// and ListOffsets LATEST at read_committed (`UnifiedLog.fetchOffsetByTimestamp`, KIP-98) all stop
/// there, while the HW and read_uncommitted go on past it; the commit frees them.
#[test]
fn an_open_transaction_holds_the_lso_in_fetch_and_list_offsets() {
    let (mut d, pid) = fixture();
    assert_eq!(add_partition(&mut d, 20, 1, pid, 0), 0, "AddPartitionsToTxn");
    let open = produce(Some("tx"), records(pid, 0, 3, true, &["o-0"]));
    let r: ProduceResponse = answer(d.on_frame(21, 1, request(ApiKey::Produce, 9, 21, &open)), 1, 9);
    assert_eq!(r.responses[0].partition_responses[0].base_offset, 7, "the open transaction starts at 7");
    let plain = produce(None, records(-1, -1, -1, false, &["p-2"]));
    let r: ProduceResponse = answer(d.on_frame(22, 1, request(ApiKey::Produce, 9, 22, &plain)), 1, 9);
    assert_eq!(r.responses[0].partition_responses[0].base_offset, 8, "a plain record above it");
    let fetched = |d: &mut Driver, now: u64, isolation: i8| {
        let r: FetchResponse = answer(d.on_frame(now, 2, request(ApiKey::Fetch, 12, 7, &fetch(isolation, 0))), 2, 12);
        let p = &r.responses[0].partitions[0];
        let last = values(p.records.as_ref().expect("records")).last().map(|(o, _)| *o);
        (p.high_watermark, p.last_stable_offset, last)
    };
    assert_eq!(fetched(&mut d, 23, 1), (9, 7, Some(5)), "read_committed: HW 9, LSO 7, nothing from 7 on");
    assert_eq!(fetched(&mut d, 24, 0), (9, 7, Some(8)), "read_uncommitted: the same LSO, records to the HW");
    let latest = [0, 1].map(|isolation| list_offset(&mut d, 25, isolation, -1));
    assert_eq!(latest, [9, 7], "ListOffsets LATEST: the HW at read_uncommitted, the LSO at read_committed");
    assert_eq!(end_txn(&mut d, 26, 1, pid, 0, true), 0, "EndTxn");
    assert_eq!(fetched(&mut d, 27, 1), (10, 10, Some(8)), "after the COMMIT at 9 the LSO is the HW again");
    let latest = [0, 1].map(|isolation| list_offset(&mut d, 28, isolation, -1));
    assert_eq!(latest, [10, 10], "ListOffsets LATEST after the commit");
}

#[test]
fn an_empty_fetch_waits_until_data_or_its_deadline() {
    let (mut d, _) = fixture();
    let mut waiting = fetch(0, 7);
    waiting.max_wait_ms = 500;
    assert_eq!(d.on_frame(10, 4, request(ApiKey::Fetch, 12, 1, &waiting)), vec![], "nothing to return: it waits");
    // A request behind it on the same connection waits too (one request at a time per connection).
    assert_eq!(d.on_frame(11, 4, request(ApiKey::ApiVersions, 3, 2, &api_versions_request())), vec![]);
    assert_eq!(d.next_deadline_ms(), Some(510), "the fetch's deadline comes before the broker's timers");
    let out = d.on_tick(510);
    assert_eq!(out.len(), 2, "the fetch is answered (empty), then the queued ApiVersions: {out:?}");
    let r: FetchResponse = answer(vec![out[0].clone()], 4, 12);
    assert_eq!(r.responses[0].partitions[0].records.as_ref().map(|b| b.len()), Some(0));
}

/// ApiVersions as a client sends it from v3: with its software name and version (KIP-511).
fn api_versions_request() -> ApiVersionsRequest {
    let mut r = ApiVersionsRequest::default();
    r.client_software_name = StrBytes::from_static_str("txnsim-test");
    r.client_software_version = StrBytes::from_static_str("1.0");
    r
}

#[test]
fn api_versions_advertises_transaction_version_2_and_answers_unknown_versions_at_v0() {
    let mut d = Driver::new(EngineConfig::default(), "127.0.0.1", 9092, 0);
    let r: ApiVersionsResponse =
        answer(d.on_frame(0, 1, request(ApiKey::ApiVersions, 3, 1, &api_versions_request())), 1, 3);
    assert_eq!(r.error_code, 0);
    assert_eq!(r.api_keys.len(), txnsim_kafka::api::SUPPORTED.len());
    let tv: Vec<_> =
        r.finalized_features.iter().map(|f| (f.name.to_string(), f.min_version_level, f.max_version_level)).collect();
    assert_eq!(
        tv,
        vec![("transaction.version".to_string(), 2, 2)],
        "Kafka 4.3.1 finalizes TV2 (tests/apache_kafka.rs)"
    );
    // Version 99 of ApiVersions: a v0 answer with UNSUPPORTED_VERSION (35), not a closed connection.
    let mut frame = request(ApiKey::ApiVersions, 3, 2, &api_versions_request()).to_vec();
    frame[2..4].copy_from_slice(&99i16.to_be_bytes());
    let r: ApiVersionsResponse = answer(d.on_frame(0, 1, Bytes::from(frame)), 1, 0);
    assert_eq!(r.error_code, 35);
}

#[test]
fn unparseable_requests_close_only_their_connection() {
    let (mut d, _) = fixture();
    let unknown_key = Bytes::from_static(&[0x7f, 0x00, 0, 0, 0, 0, 0, 1, 0xff, 0xff]);
    assert!(matches!(d.on_frame(20, 9, unknown_key).as_slice(), [Output::Close(9, _)]));
    let fetch_v99 = {
        let mut f = request(ApiKey::Fetch, 12, 1, &fetch(0, 0)).to_vec();
        f[2..4].copy_from_slice(&99i16.to_be_bytes());
        Bytes::from(f)
    };
    assert!(matches!(d.on_frame(20, 10, fetch_v99).as_slice(), [Output::Close(10, _)]));
    // Another connection is served as before.
    let r: FetchResponse = answer(d.on_frame(21, 11, request(ApiKey::Fetch, 12, 3, &fetch(0, 0))), 11, 12);
    assert_eq!(r.responses[0].partitions[0].high_watermark, 7);
}

#[test]
fn frame_sizes_are_checked_before_the_body_is_read() {
    for bad in [-1, i32::MIN, MAX_REQUEST_BYTES as i32 + 1, i32::MAX] {
        let mut input = Cursor::new(bad.to_be_bytes().to_vec());
        assert!(matches!(frame::read_frame(&mut input), Err(FrameError::BadSize(n)) if n == bad), "size {bad}");
    }
    // A client that says 100 bytes and disconnects after 3.
    let mut input = Cursor::new([&100i32.to_be_bytes()[..], &[1, 2, 3]].concat());
    assert!(matches!(frame::read_frame(&mut input), Err(FrameError::Io(_))));
    let mut input = Cursor::new(Vec::new());
    assert!(matches!(frame::read_frame(&mut input), Ok(None)), "a clean end between frames");
}

/// The logs of the fixture's partitions; a bad request may create a new topic (Metadata's
/// auto-creation of a name that happens to be legal), never change an existing log.
fn logs(d: &Driver) -> BTreeMap<TopicPartition, PartitionLog> {
    d.broker()
        .replica_manager
        .logs
        .iter()
        .filter(|(tp, _)| tp.topic == TOPIC)
        .map(|(tp, l)| (tp.clone(), l.clone()))
        .collect()
}

/// Valid requests of every served API that cannot append (the fixture has no open transaction, so
/// EndTxn and AddPartitionsToTxn fail or touch only the coordinator), to corrupt.
fn bases() -> Vec<Bytes> {
    let mut metadata = MetadataRequest::default();
    metadata.allow_auto_topic_creation = false;
    let mut find = FindCoordinatorRequest::default();
    find.key = StrBytes::from_static_str("tx");
    find.key_type = 1;
    let mut end = EndTxnRequest::default();
    end.transactional_id = StrBytes::from_static_str("tx").into();
    vec![
        request(ApiKey::ApiVersions, 3, 1, &ApiVersionsRequest::default()),
        request(ApiKey::Metadata, 12, 1, &metadata),
        request(ApiKey::Metadata, 1, 1, &MetadataRequest::default()),
        request(ApiKey::Fetch, 12, 1, &fetch(1, 0)),
        request(ApiKey::Fetch, 4, 1, &fetch(0, 2)),
        request(ApiKey::FindCoordinator, 3, 1, &find),
        request(ApiKey::EndTxn, 3, 1, &end),
        request(ApiKey::CreateTopics, 7, 1, &CreateTopicsRequest::default()),
        request(ApiKey::InitProducerId, 4, 1, &InitProducerIdRequest::default()),
    ]
}

fn produce_frame() -> Bytes {
    request(ApiKey::Produce, 9, 1, &produce(None, records(-1, -1, -1, false, &["x"])))
}

/// A frame for every API key and version we serve, with an array count of 0x7fffffff right after the
/// header: the shape that made the system allocator abort.
fn huge_counts() -> Vec<Bytes> {
    let mut out = Vec::new();
    for &(key, min, max) in txnsim_kafka::api::SUPPORTED.iter() {
        for version in min..=max {
            let mut header = RequestHeader::default();
            header.request_api_key = key as i16;
            header.request_api_version = version;
            let mut buf = BytesMut::new();
            header.encode(&mut buf, key.request_header_version(version)).expect("header encodes");
            buf.extend_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
            out.push(buf.freeze());
        }
    }
    out
}

#[test]
fn preallocating_counts_are_decode_errors() {
    let (mut d, _) = fixture();
    let before = logs(&d);
    for (i, f) in huge_counts().into_iter().enumerate() {
        let out = d.on_frame(30, 100 + i as u64, f);
        assert!(out.len() <= 1, "one answer or one close per frame: {out:?}");
    }
    assert_eq!(logs(&d), before);
}

/// One bad input: arbitrary bytes, a served API's header over arbitrary bytes, a corrupted valid
/// request (bytes flipped), or a truncated one (Produce included: a cut frame never decodes).
fn bad_frame() -> impl Strategy<Value = Bytes> {
    let corruptible = bases();
    let n = corruptible.len();
    let cuttable: Vec<Bytes> = bases().into_iter().chain([produce_frame()]).collect();
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(Bytes::from),
        (0..txnsim_kafka::api::SUPPORTED.len(), -2i16..20, proptest::collection::vec(any::<u8>(), 0..48)).prop_map(
            |(i, v, tail)| {
                let key = txnsim_kafka::api::SUPPORTED[i].0 as i16;
                Bytes::from([&key.to_be_bytes()[..], &v.to_be_bytes(), &[0, 0, 0, 1], &tail].concat())
            }
        ),
        (0..n, proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4)).prop_map(
            move |(i, flips)| {
                let mut f = corruptible[i].to_vec();
                for (at, b) in flips {
                    let at = at.index(f.len());
                    f[at] ^= b | 1;
                }
                Bytes::from(f)
            }
        ),
        (0..n + 1, any::<prop::sample::Index>()).prop_map(move |(i, cut)| {
            let f = &cuttable[i];
            f.slice(..cut.index(f.len()))
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Whatever arrives, the driver answers or closes that one connection, another connection is still
    /// served, and no existing log changes.
    #[test]
    fn bad_input_never_panics_nor_changes_a_log(frames in proptest::collection::vec(bad_frame(), 1..6)) {
        let (mut d, _) = fixture();
        let before = logs(&d);
        for (i, f) in frames.into_iter().enumerate() {
            let conn = 50 + i as u64;
            let out = d.on_frame(40, conn, f);
            prop_assert!(out.iter().all(|o| match o { Output::Send(c, _) | Output::Close(c, _) => *c == conn }), "{out:?}");
            d.on_disconnect(conn);
        }
        prop_assert_eq!(logs(&d), before);
        let r: FetchResponse = answer(d.on_frame(41, 99, request(ApiKey::Fetch, 12, 1, &fetch(0, 0))), 99, 12);
        prop_assert_eq!(r.responses[0].partitions[0].high_watermark, 7);
    }
}

fn join(group: &str, member: &str) -> JoinGroupRequest {
    let mut protocol = join_group_request::JoinGroupRequestProtocol::default();
    protocol.name = StrBytes::from_static_str("range");
    protocol.metadata = Bytes::from_static(b"meta");
    let mut r = JoinGroupRequest::default();
    r.group_id = StrBytes::from_string(group.to_string()).into();
    r.member_id = StrBytes::from_string(member.to_string());
    r.session_timeout_ms = 10_000;
    r.rebalance_timeout_ms = 5_000;
    r.protocol_type = StrBytes::from_static_str("consumer");
    r.protocols = vec![protocol];
    r
}

/// KIP-394 (JoinGroup v4+): a new member's first join gets MEMBER_ID_REQUIRED (79) and its id.
fn member_id(d: &mut Driver, now: u64, conn: ConnId) -> StrBytes {
    let r: JoinGroupResponse = answer(d.on_frame(now, conn, request(ApiKey::JoinGroup, 5, 1, &join("g", ""))), conn, 5);
    assert_eq!((r.error_code, r.generation_id), (79, -1), "MEMBER_ID_REQUIRED first");
    assert!(!r.member_id.is_empty(), "with the id to join with");
    r.member_id
}

fn heartbeat(d: &mut Driver, now: u64, conn: ConnId, generation: i32, member: &StrBytes) -> i16 {
    let mut r = HeartbeatRequest::default();
    r.group_id = StrBytes::from_static_str("g").into();
    r.generation_id = generation;
    r.member_id = member.clone();
    let r: HeartbeatResponse = answer(d.on_frame(now, conn, request(ApiKey::Heartbeat, 3, 1, &r)), conn, 3);
    r.error_code
}

/// The classic protocol as `subscribe()` drives it: the initial delay, a generation per membership
/// change, the leader's assignment handed out, rebalances announced through heartbeats, offsets kept.
#[test]
fn a_group_rebalances_as_members_come_and_go() {
    let (mut d, _) = fixture();
    // A new group waits group.initial.rebalance.delay.ms (3000 by default) before generation 1.
    let id_a = member_id(&mut d, 0, 1);
    assert_eq!(d.on_frame(0, 1, request(ApiKey::JoinGroup, 5, 1, &join("g", &id_a))), vec![]);
    assert_eq!(d.on_tick(2_999), vec![]);
    let a: JoinGroupResponse = answer(d.on_tick(3_000), 1, 5);
    assert_eq!((a.error_code, a.generation_id, a.leader.clone(), a.member_id.clone()), (0, 1, id_a.clone(), id_a));
    assert_eq!(a.members.len(), 1, "the leader sees every member");
    let mut sync = SyncGroupRequest::default();
    sync.group_id = StrBytes::from_static_str("g").into();
    sync.generation_id = 1;
    sync.member_id = a.member_id.clone();
    let mut given = sync_group_request::SyncGroupRequestAssignment::default();
    given.member_id = a.member_id.clone();
    given.assignment = Bytes::from_static(b"all of t");
    sync.assignments = vec![given];
    let s: SyncGroupResponse = answer(d.on_frame(3_001, 1, request(ApiKey::SyncGroup, 3, 2, &sync)), 1, 3);
    assert_eq!((s.error_code, &s.assignment[..]), (0, &b"all of t"[..]));
    assert_eq!(heartbeat(&mut d, 3_002, 1, 1, &a.member_id), 0, "stable");

    // B joins: the group prepares a rebalance; A learns of it from its heartbeat and rejoins.
    let id_b = member_id(&mut d, 3_100, 2);
    assert_eq!(d.on_frame(3_100, 2, request(ApiKey::JoinGroup, 5, 3, &join("g", &id_b))), vec![]);
    assert_eq!(heartbeat(&mut d, 3_101, 1, 1, &a.member_id), 27, "REBALANCE_IN_PROGRESS");
    let out = d.on_frame(3_102, 1, request(ApiKey::JoinGroup, 5, 4, &join("g", &a.member_id)));
    assert_eq!(out.len(), 2, "every member rejoined: both get generation 2 at once: {out:?}");
    let (to_a, to_b): (Vec<Output>, Vec<Output>) = out.into_iter().partition(|o| matches!(o, Output::Send(1, _)));
    let a2: JoinGroupResponse = answer(to_a, 1, 5);
    let b2: JoinGroupResponse = answer(to_b, 2, 5);
    assert_eq!((a2.generation_id, b2.generation_id), (2, 2));
    assert_eq!((a2.leader.clone(), b2.leader.clone()), (a.member_id.clone(), a.member_id.clone()), "the leader stays");
    assert_eq!((a2.members.len(), b2.members.len()), (2, 0));

    // An offset commit of the current generation is kept; a stale generation is refused.
    let commit = |generation: i32, offset: i64| {
        let mut p = offset_commit_request::OffsetCommitRequestPartition::default();
        p.partition_index = 0;
        p.committed_offset = offset;
        let mut t = offset_commit_request::OffsetCommitRequestTopic::default();
        t.name = StrBytes::from_static_str(TOPIC).into();
        t.partitions = vec![p];
        let mut r = OffsetCommitRequest::default();
        r.group_id = StrBytes::from_static_str("g").into();
        r.generation_id_or_member_epoch = generation;
        r.member_id = a.member_id.clone();
        r.topics = vec![t];
        request(ApiKey::OffsetCommit, 7, 5, &r)
    };
    // SyncGroup has not completed generation 2: the member is told to finish the rebalance first
    // (`ClassicGroup.validateOffsetCommit`: REBALANCE_IN_PROGRESS while CompletingRebalance).
    let c: OffsetCommitResponse = answer(d.on_frame(3_103, 1, commit(2, 5)), 1, 7);
    assert_eq!(c.topics[0].partitions[0].error_code, 27, "REBALANCE_IN_PROGRESS before the sync");
    sync.generation_id = 2;
    let s: SyncGroupResponse = answer(d.on_frame(3_103, 1, request(ApiKey::SyncGroup, 3, 20, &sync)), 1, 3);
    assert_eq!(s.error_code, 0, "the leader's assignment completes generation 2");
    let c: OffsetCommitResponse = answer(d.on_frame(3_103, 1, commit(2, 5)), 1, 7);
    assert_eq!(c.topics[0].partitions[0].error_code, 0, "generation 2 is Stable: the commit is kept");
    let c: OffsetCommitResponse = answer(d.on_frame(3_104, 1, commit(1, 6)), 1, 7);
    assert_eq!(c.topics[0].partitions[0].error_code, 22, "ILLEGAL_GENERATION");
    let mut fetch_offsets = OffsetFetchRequest::default();
    fetch_offsets.group_id = StrBytes::from_static_str("g").into();
    let mut t = offset_fetch_request::OffsetFetchRequestTopic::default();
    t.name = StrBytes::from_static_str(TOPIC).into();
    t.partition_indexes = vec![0, 1];
    fetch_offsets.topics = Some(vec![t]);
    let f: OffsetFetchResponse = answer(d.on_frame(3_105, 3, request(ApiKey::OffsetFetch, 5, 6, &fetch_offsets)), 3, 5);
    let got: Vec<(i32, i64)> = f.topics[0].partitions.iter().map(|p| (p.partition_index, p.committed_offset)).collect();
    assert_eq!(got, vec![(0, 5), (1, -1)], "partition 1 has no committed offset");

    // B leaves: A is told to rejoin, and alone it completes generation 3 at once.
    let mut leave = LeaveGroupRequest::default();
    leave.group_id = StrBytes::from_static_str("g").into();
    let mut who = leave_group_request::MemberIdentity::default();
    who.member_id = b2.member_id.clone();
    leave.members = vec![who];
    let l: LeaveGroupResponse = answer(d.on_frame(3_200, 2, request(ApiKey::LeaveGroup, 3, 7, &leave)), 2, 3);
    assert_eq!(l.members[0].error_code, 0);
    assert_eq!(heartbeat(&mut d, 3_201, 1, 2, &a.member_id), 27);
    let a3: JoinGroupResponse =
        answer(d.on_frame(3_202, 1, request(ApiKey::JoinGroup, 5, 8, &join("g", &a.member_id))), 1, 5);
    assert_eq!((a3.generation_id, a3.members.len()), (3, 1));
    // A silent member is removed once its session times out (10 s after its last join).
    assert_eq!(d.on_tick(13_202), vec![]);
    assert_eq!(heartbeat(&mut d, 13_203, 1, 3, &a.member_id), 25, "UNKNOWN_MEMBER_ID: its session expired");
}

/// Three brokers, as `serve --brokers 3 --default-replication-factor 3` runs them: connection 1 on broker
/// 0's listener, connection 2 on broker 1's.
fn three_brokers() -> Driver {
    let addresses: Vec<(String, u16)> = (0..3).map(|i| ("127.0.0.1".to_string(), 9092 + i)).collect();
    let mut d = Driver::cluster(EngineConfig::default(), &addresses, 3, 0);
    d.on_connect(1, 0);
    d.on_connect(2, 1);
    d
}

fn metadata_of(d: &mut Driver, now: u64, conn: ConnId, topic: &str) -> MetadataResponse {
    let mut t = metadata_request::MetadataRequestTopic::default();
    t.name = Some(StrBytes::from_string(topic.to_string()).into());
    let mut r = MetadataRequest::default();
    r.topics = Some(vec![t]);
    r.allow_auto_topic_creation = true;
    answer(d.on_frame(now, conn, request(ApiKey::Metadata, 12, 1, &r)), conn, 12)
}

#[test]
fn three_brokers_list_every_replica_and_refuse_a_produce_to_a_follower() {
    let mut d = three_brokers();
    let create = create_topic(TOPIC, 1, -1);
    let r: CreateTopicsResponse = answer(d.on_frame(1, 2, request(ApiKey::CreateTopics, 7, 1, &create)), 2, 7);
    let t = &r.topics[0];
    assert_eq!(
        (t.error_code, t.num_partitions, t.replication_factor),
        (0, 1, 3),
        "broker 1 forwards to the controller, which places 3 replicas (default.replication.factor 3)"
    );

    // Asked on broker 1: every broker with its own port; the partition as the controller registered it.
    let m = metadata_of(&mut d, 2, 2, TOPIC);
    let brokers: Vec<(i32, String, i32)> =
        m.brokers.iter().map(|b| (b.node_id.0, b.host.to_string(), b.port)).collect();
    let want: Vec<(i32, String, i32)> = (0..3).map(|i| (i, "127.0.0.1".to_string(), 9092 + i)).collect();
    assert_eq!(brokers, want, "Metadata lists the three brokers at their own ports");
    let p = &m.topics[0].partitions[0];
    let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<i32>>();
    assert_eq!(
        (p.error_code, p.leader_id.0, p.leader_epoch, ids(&p.replica_nodes), ids(&p.isr_nodes)),
        (0, 1, 0, vec![1, 2, 0], vec![1, 2, 0]),
        "the first partition placed starts at broker 1 (striped): leader 1 at epoch 0, replicas and ISR 1, 2, 0"
    );

    // FindCoordinator on broker 1 names broker 0 at broker 0's port.
    let mut find = FindCoordinatorRequest::default();
    find.key_type = 1;
    find.coordinator_keys = vec![StrBytes::from_static_str("tx")];
    let r: FindCoordinatorResponse = answer(d.on_frame(3, 2, request(ApiKey::FindCoordinator, 4, 2, &find)), 2, 4);
    let c = &r.coordinators[0];
    assert_eq!((c.error_code, c.node_id.0, c.port), (0, 0, 9092), "the coordinator is broker 0");

    // A produce to follower 0 is refused by its engine; to leader 1 it is acknowledged once both
    // followers have fetched it (acks=all), within the same request.
    let refused: ProduceResponse = answer(
        d.on_frame(4, 1, request(ApiKey::Produce, 9, 3, &produce(None, records(-1, -1, -1, false, &["x"])))),
        1,
        9,
    );
    assert_eq!(refused.responses[0].partition_responses[0].error_code, 6, "NOT_LEADER_OR_FOLLOWER from broker 0");
    let acked: ProduceResponse = answer(
        d.on_frame(5, 2, request(ApiKey::Produce, 9, 4, &produce(None, records(-1, -1, -1, false, &["y"])))),
        2,
        9,
    );
    let pr = &acked.responses[0].partition_responses[0];
    assert_eq!((pr.error_code, pr.base_offset), (0, 0), "broker 1 leads and acknowledges");
    let tp = TopicPartition::new(TOPIC, 0);
    let offsets: Vec<(u64, u64)> = d
        .brokers()
        .iter()
        .map(|b| b.partition(&tp).map(|l| (l.log_end_offset(), l.high_watermark())).expect("every broker hosts it"))
        .collect();
    assert_eq!(offsets[1], (1, 1), "the leader's HW passed the record before the acknowledgement");
    assert_eq!(offsets.iter().map(|o| o.0).collect::<Vec<_>>(), vec![1, 1, 1], "every replica holds the record");
    assert_eq!(d.violations(), &[], "no state or replica invariant broke");
}

/// One partition's Fetch answer: error, HW, LSO and the records' (offset, value).
type FetchAnswer = (i16, i64, i64, Vec<(i64, String)>);

/// Follower 0's answers to a read_uncommitted Fetch from offset 0 at v10 and at v12, after leader 1
/// acknowledged one record at acks=all, then at v12 again once the follower fetched the leader's new HW:
/// (error, HW, LSO, values) of each.
fn follower_fetches(mutations: Mutations) -> Vec<FetchAnswer> {
    let addresses: Vec<(String, u16)> = (0..3).map(|i| ("127.0.0.1".to_string(), 9092 + i)).collect();
    let mut d = Driver::cluster(EngineConfig { mutations, ..EngineConfig::default() }, &addresses, 3, 0);
    d.on_connect(1, 0);
    d.on_connect(2, 1);
    let r: CreateTopicsResponse =
        answer(d.on_frame(1, 2, request(ApiKey::CreateTopics, 7, 1, &create_topic(TOPIC, 1, -1))), 2, 7);
    assert_eq!(r.topics[0].error_code, 0, "topic created, led by broker 1");
    let frame = request(ApiKey::Produce, 9, 2, &produce(None, records(-1, -1, -1, false, &["y"])));
    let acked: ProduceResponse = answer(d.on_frame(2, 2, frame), 2, 9);
    assert_eq!(acked.responses[0].partition_responses[0].error_code, 0, "leader 1 acknowledges");
    [(3, 10), (3, 12), (1_000, 12)]
        .into_iter()
        .map(|(now, version)| {
            while let Some(deadline) = d.next_deadline_ms().filter(|&t| t <= now) {
                d.on_tick(deadline);
            }
            let r: FetchResponse =
                answer(d.on_frame(now, 1, request(ApiKey::Fetch, version, 3, &fetch(0, 0))), 1, version);
            let p = &r.responses[0].partitions[0];
            let got = p.records.as_ref().map(values).unwrap_or_default();
            (p.error_code, p.high_watermark, p.last_stable_offset, got)
        })
        .collect()
}

/// KIP-392: a consumer's Fetch v11+ carries its client metadata, and a follower serves it from its own
/// log (`FetchParams.fetchOnlyLeader`); a v10 fetch is leader-only. Real Kafka 4.3.1 answers the same
/// (tests/apache_kafka.rs reads every replica this way).
#[test]
fn a_follower_serves_a_fetch_v11_from_its_own_log_and_refuses_an_older_one() {
    let answers = follower_fetches(Mutations::default());
    assert_eq!(answers[0], (6, -1, -1, vec![]), "v10 at follower 0: NOT_LEADER_OR_FOLLOWER");
    assert_eq!(answers[1], (0, 0, 0, vec![]), "v12 at follower 0: its own copy, HW 0 until it fetches again");
    assert_eq!(answers[2], (0, 1, 1, vec![(0, "y".to_string())]), "then HW 1 and the record");
}

/// Under `follower-refuses-consumer-fetch` the v12 fetch is refused too: the exact answer catches it.
#[test]
fn follower_refusing_consumer_fetches_is_caught_by_the_exact_answer() {
    let answers = follower_fetches(Mutations::one(Mutation::FollowerRefusesConsumerFetch));
    assert_eq!(answers[1].0, 6, "the mutation refuses the v12 fetch: NOT_LEADER_OR_FOLLOWER");
}

#[test]
fn three_brokers_auto_create_through_the_controller() {
    let mut d = three_brokers();
    let first = metadata_of(&mut d, 1, 2, "auto");
    assert_eq!(first.topics[0].error_code, 5, "LEADER_NOT_AVAILABLE while the controller creates it");
    let second = metadata_of(&mut d, 2, 2, "auto");
    let t = &second.topics[0];
    assert_eq!((t.error_code, t.partitions.len()), (0, 1), "then the topic, one partition (num.partitions 1)");
    assert_eq!(t.partitions[0].replica_nodes.len(), 3, "at default.replication.factor 3");
    // A replication factor above the broker count is refused.
    let create = create_topic("wide", 1, 4);
    let r: CreateTopicsResponse = answer(d.on_frame(3, 1, request(ApiKey::CreateTopics, 7, 3, &create)), 1, 7);
    assert_eq!(r.topics[0].error_code, 38, "INVALID_REPLICATION_FACTOR for 4 replicas on 3 brokers");
}

/// `serve --brokers 3 --partitions 3 --default-replication-factor 1` with `mutations`: connection 1 on
/// broker 0's listener, 2 on broker 1's, 3 on broker 2's.
fn three_brokers_three_partitions(mutations: Mutations) -> Driver {
    let addresses: Vec<(String, u16)> = (0..3).map(|i| ("127.0.0.1".to_string(), 9092 + i)).collect();
    let config = EngineConfig { num_partitions: 3, mutations, ..EngineConfig::default() };
    let mut d = Driver::cluster(config, &addresses, 1, 0);
    for conn in 1..=3 {
        d.on_connect(conn, conn as u32 - 1);
    }
    d
}

/// Each partition's (leader, replicas) as Metadata on `conn` lists them.
fn leaders_of(d: &mut Driver, now: u64, conn: ConnId, topic: &str) -> Vec<(i32, Vec<i32>)> {
    let m = metadata_of(d, now, conn, topic);
    assert_eq!(m.topics[0].error_code, 0, "topic {topic} exists");
    let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<i32>>();
    m.topics[0].partitions.iter().map(|p| (p.leader_id.0, ids(&p.replica_nodes))).collect()
}

#[test]
fn three_brokers_stripe_leaders_and_refuse_a_produce_to_a_non_leader() {
    let mut d = three_brokers_three_partitions(Mutations::default());
    let create = create_topic(TOPIC, -1, -1);
    let r: CreateTopicsResponse = answer(d.on_frame(1, 1, request(ApiKey::CreateTopics, 7, 1, &create)), 1, 7);
    assert_eq!((r.topics[0].error_code, r.topics[0].num_partitions), (0, 3), "num.partitions 3");
    // Striped: partition i of the cluster starts at broker (i + 1) % 3, on every broker's Metadata.
    for conn in 1..=3 {
        let leaders = leaders_of(&mut d, 2, conn, TOPIC);
        assert_eq!(leaders, vec![(1, vec![1]), (2, vec![2]), (0, vec![0])], "t-0 on 1, t-1 on 2, t-2 on 0");
    }
    // Auto-created at run time: striping goes on from the three partitions placed (partition 3: broker 1).
    assert_eq!(metadata_of(&mut d, 3, 3, "later").topics[0].error_code, 5, "LEADER_NOT_AVAILABLE while created");
    assert_eq!(leaders_of(&mut d, 4, 3, "later"), vec![(1, vec![1]), (2, vec![2]), (0, vec![0])]);
    assert_eq!(metadata_of(&mut d, 5, 1, "last").topics[0].error_code, 5);
    let last = leaders_of(&mut d, 6, 1, "last");
    assert_eq!(last, vec![(1, vec![1]), (2, vec![2]), (0, vec![0])], "partitions 6 to 8: brokers 1, 2, 0");

    // t-0 to broker 0, which hosts no replica of it, and to broker 2: NOT_LEADER_OR_FOLLOWER, no log moved.
    let before: Vec<BTreeMap<TopicPartition, PartitionLog>> =
        d.brokers().iter().map(|b| b.replica_manager.logs.clone()).collect();
    for (now, conn) in [(7, 1), (8, 3)] {
        let frame = request(ApiKey::Produce, 9, 2, &produce(None, records(-1, -1, -1, false, &["x"])));
        let refused: ProduceResponse = answer(d.on_frame(now, conn, frame), conn, 9);
        let pr = &refused.responses[0].partition_responses[0];
        assert_eq!((pr.error_code, pr.base_offset), (6, -1), "NOT_LEADER_OR_FOLLOWER on connection {conn}");
    }
    let after: Vec<BTreeMap<TopicPartition, PartitionLog>> =
        d.brokers().iter().map(|b| b.replica_manager.logs.clone()).collect();
    assert!(before == after, "a refused produce changes no broker's log");
    // Its leader takes it, and the invariants read broker 1's log.
    let frame = request(ApiKey::Produce, 9, 3, &produce(None, records(-1, -1, -1, false, &["y"])));
    let acked: ProduceResponse = answer(d.on_frame(9, 2, frame), 2, 9);
    let pr = &acked.responses[0].partition_responses[0];
    assert_eq!((pr.error_code, pr.base_offset), (0, 0), "broker 1 leads t-0 and acknowledges");
    let tp = TopicPartition::new(TOPIC, 0);
    assert_eq!(d.brokers()[1].partition(&tp).map(|l| l.log_end_offset()), Some(1), "the record is on broker 1");

    // A transaction on t-0: the coordinator on broker 0 hosts no replica of it and takes it all the same
    // (Kafka checks the metadata cache), and its COMMIT marker goes to leader 1.
    let (pid, epoch) = init_transaction(&mut d, 10, 1);
    assert_eq!(add_partition(&mut d, 11, 1, pid, epoch), 0, "AddPartitionsToTxn of t-0 at broker 0");
    let frame = request(ApiKey::Produce, 9, 4, &produce(Some("tx"), records(pid, epoch, 0, true, &["z"])));
    let acked: ProduceResponse = answer(d.on_frame(12, 2, frame), 2, 9);
    assert_eq!(acked.responses[0].partition_responses[0].error_code, 0, "leader 1 takes the transaction's batch");
    assert_eq!(end_txn(&mut d, 13, 1, pid, epoch, true), 0, "the commit completes");
    assert_eq!(d.brokers()[1].partition(&tp).map(|l| l.log_end_offset()), Some(3), "record 1 and the marker at 2");
    assert_eq!(d.violations(), &[], "no state or replica invariant broke");
}

/// Under `hosted-partitions-only` the same requests get UNKNOWN_TOPIC_OR_PARTITION (3): the produce to
/// broker 0, which hosts no replica of t-0, and the coordinator's AddPartitionsToTxn of it. The exact
/// answers above (6 and 0) catch it.
#[test]
fn hosted_partitions_only_is_caught_by_the_exact_answers() {
    let mut d = three_brokers_three_partitions(Mutations::one(Mutation::HostedPartitionsOnly));
    let create = create_topic(TOPIC, -1, -1);
    let r: CreateTopicsResponse = answer(d.on_frame(1, 1, request(ApiKey::CreateTopics, 7, 1, &create)), 1, 7);
    assert_eq!(r.topics[0].error_code, 0);
    let frame = request(ApiKey::Produce, 9, 2, &produce(None, records(-1, -1, -1, false, &["x"])));
    let refused: ProduceResponse = answer(d.on_frame(2, 1, frame), 1, 9);
    assert_eq!(refused.responses[0].partition_responses[0].error_code, 3, "UNKNOWN_TOPIC_OR_PARTITION, not 6");
    let (pid, epoch) = init_transaction(&mut d, 3, 1);
    assert_eq!(add_partition(&mut d, 4, 1, pid, epoch), 3, "the coordinator does not know t-0");
}

/// InitProducerId for transactional id `tx` on `conn`: the producer id and epoch.
fn init_transaction(d: &mut Driver, now: u64, conn: ConnId) -> (i64, i16) {
    let mut init = InitProducerIdRequest::default();
    init.transactional_id = Some(StrBytes::from_static_str("tx").into());
    init.transaction_timeout_ms = 60_000;
    let r: InitProducerIdResponse =
        answer(d.on_frame(now, conn, request(ApiKey::InitProducerId, 4, 2, &init)), conn, 4);
    assert_eq!(r.error_code, 0, "InitProducerId");
    (r.producer_id.0, r.producer_epoch)
}

/// AddPartitionsToTxn (v3) of `t-0` to `tx` on `conn`: the partition's error code.
fn add_partition(d: &mut Driver, now: u64, conn: ConnId, pid: i64, epoch: i16) -> i16 {
    let mut add = AddPartitionsToTxnRequest::default();
    add.v3_and_below_transactional_id = StrBytes::from_static_str("tx").into();
    add.v3_and_below_producer_id = pid.into();
    add.v3_and_below_producer_epoch = epoch;
    let mut topic = add_partitions_to_txn_request::AddPartitionsToTxnTopic::default();
    topic.name = StrBytes::from_static_str(TOPIC).into();
    topic.partitions = vec![0];
    add.v3_and_below_topics = vec![topic];
    let r: AddPartitionsToTxnResponse =
        answer(d.on_frame(now, conn, request(ApiKey::AddPartitionsToTxn, 3, 3, &add)), conn, 3);
    r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
}

/// EndTxn (v3) of `tx` on `conn`, committing or aborting: its error code.
fn end_txn(d: &mut Driver, now: u64, conn: ConnId, pid: i64, epoch: i16, commit: bool) -> i16 {
    let mut end = EndTxnRequest::default();
    end.transactional_id = StrBytes::from_static_str("tx").into();
    end.producer_id = pid.into();
    end.producer_epoch = epoch;
    end.committed = commit;
    let r: EndTxnResponse = answer(d.on_frame(now, conn, request(ApiKey::EndTxn, 3, 5, &end)), conn, 3);
    r.error_code
}

/// `crash 1` and `restart 1` on serve's stdin, without sockets: broker 1 leads `t-0` (replicas 1, 2, 0),
/// crashes with a transaction open on it, and the commit completes on the new leader 2.
#[test]
fn a_crashed_leader_hands_over_and_a_transaction_commits_on_the_new_one() {
    let mut d = three_brokers();
    d.on_connect(3, 2);
    let create = create_topic(TOPIC, 1, -1);
    let r: CreateTopicsResponse = answer(d.on_frame(1, 1, request(ApiKey::CreateTopics, 7, 1, &create)), 1, 7);
    assert_eq!(r.topics[0].error_code, 0);
    let (pid, epoch) = init_transaction(&mut d, 2, 1);
    assert_eq!(add_partition(&mut d, 3, 1, pid, epoch), 0, "AddPartitionsToTxn of t-0");
    let frame = request(ApiKey::Produce, 9, 4, &produce(Some("tx"), records(pid, epoch, 0, true, &["a", "b"])));
    let acked: ProduceResponse = answer(d.on_frame(4, 2, frame), 2, 9);
    assert_eq!(acked.responses[0].partition_responses[0].error_code, 0, "leader 1 takes the transaction's batch");

    let closed = d.crash_broker(5, 1).expect("broker 1 crashes");
    assert_eq!(closed, vec![Output::Close(2, "broker 1 crashed".into())], "its one connection closes");
    assert!(d.is_down(1));
    assert_eq!(d.crash_broker(5, 1).unwrap_err(), "broker 1 is already down");
    let m = metadata_of(&mut d, 6, 1, TOPIC);
    let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<i32>>();
    let p = &m.topics[0].partitions[0];
    assert_eq!(m.brokers.iter().map(|b| b.node_id.0).collect::<Vec<_>>(), vec![0, 2], "broker 1 is not listed");
    assert_eq!((p.leader_id.0, p.leader_epoch, ids(&p.isr_nodes)), (2, 1, vec![2, 0]), "broker 2 leads at epoch 1");

    assert_eq!(end_txn(&mut d, 7, 1, pid, epoch, true), 0, "the commit completes: the marker goes to the new leader");
    let r: FetchResponse = answer(d.on_frame(8, 3, request(ApiKey::Fetch, 12, 6, &fetch(1, 0))), 3, 12);
    let pd = &r.responses[0].partitions[0];
    let read = values(pd.records.as_ref().expect("records"));
    assert_eq!((pd.error_code, read), (0, vec![(0, "a".into()), (1, "b".into())]), "read_committed on broker 2");

    d.restart_broker(9, 1).expect("broker 1 restarts");
    assert_eq!(d.restart_broker(9, 1).unwrap_err(), "broker 1 is not down");
    // It catches up as a follower of broker 2: a few fetch rounds, each on the replication deadlines.
    for now in (10..5_000).step_by(100) {
        d.on_tick(now);
    }
    let tp = TopicPartition::new(TOPIC, 0);
    let ends: Vec<u64> = d.brokers().iter().map(|b| b.partition(&tp).expect("hosted").log_end_offset()).collect();
    assert_eq!(ends, vec![3, 3, 3], "every replica holds the two records and the COMMIT marker");
    let isr: Vec<u32> = d.brokers()[2].replica_manager.partitions[&tp].isr.iter().copied().collect();
    assert_eq!(isr, vec![0, 1, 2], "broker 1 rejoined the ISR of leader 2");
    assert_eq!(d.violations(), &[], "no state or replica invariant broke");
}

/// The coordinator APIs sent to broker 1 (connection 2), which owns no `__transaction_state` or
/// `__consumer_offsets` partition: InitProducerId, AddPartitionsToTxn and EndTxn of `tx`, JoinGroup and
/// OffsetFetch (all partitions) of group `g`; their error codes, and the producer id InitProducerId gave.
fn coordinator_answers_on_broker_1(mutations: Mutations) -> ([i16; 5], i64) {
    let addresses: Vec<(String, u16)> = (0..3).map(|i| ("127.0.0.1".to_string(), 9092 + i)).collect();
    let config = EngineConfig { mutations, ..EngineConfig::default() };
    let mut d = Driver::cluster(config, &addresses, 3, 0);
    d.on_connect(2, 1);
    let create = create_topic(TOPIC, 1, 3);
    let r: CreateTopicsResponse = answer(d.on_frame(1, 2, request(ApiKey::CreateTopics, 7, 1, &create)), 2, 7);
    assert_eq!(r.topics[0].error_code, 0, "the topic is created through broker 1");
    let mut init = InitProducerIdRequest::default();
    init.transactional_id = Some(StrBytes::from_static_str("tx").into());
    init.transaction_timeout_ms = 60_000;
    let r: InitProducerIdResponse = answer(d.on_frame(2, 2, request(ApiKey::InitProducerId, 4, 2, &init)), 2, 4);
    let (pid, epoch) = (r.producer_id.0, r.producer_epoch.max(0));
    let (add, end) = (add_partition(&mut d, 3, 2, pid, epoch), end_txn(&mut d, 4, 2, pid, epoch, true));
    let joined: JoinGroupResponse = answer(d.on_frame(5, 2, request(ApiKey::JoinGroup, 5, 6, &join("g", ""))), 2, 5);
    let mut fetch_offsets = OffsetFetchRequest::default();
    fetch_offsets.group_id = StrBytes::from_static_str("g").into();
    let fetched: OffsetFetchResponse =
        answer(d.on_frame(6, 2, request(ApiKey::OffsetFetch, 5, 7, &fetch_offsets)), 2, 5);
    ([r.error_code, add, end, joined.error_code, fetched.error_code], pid)
}

/// TransactionCoordinatorTest#shouldRespondWithNotCoordinatorOnInitPidWhenNotCoordinator,
/// #shouldRespondWithNotCoordinatorOnAddPartitionsWhenNotCoordinator and
/// #shouldRespondWithNotCoordinatorOnEndTxnWhenIsNotCoordinatorForId @ 1eb7644349cb: "Errors.NOT_COORDINATOR"
/// from a broker that is not the transactional id's coordinator (here every broker but 0); the group
/// coordinator answers the same for a group it does not own (`GroupCoordinatorService`).
#[test]
fn a_broker_other_than_the_coordinator_answers_not_coordinator() {
    let (codes, pid) = coordinator_answers_on_broker_1(Mutations::default());
    assert_eq!((codes, pid), ([16; 5], -1), "NOT_COORDINATOR to all five, no producer id");
}

/// Under `any-broker-coordinates` broker 1's own coordinators answer. Its InitProducerId fails where it
/// writes `__transaction_state`, which broker 0 leads (NOT_LEADER_OR_FOLLOWER, NOT_COORDINATOR to the
/// client); knowing no `tx`, it refuses AddPartitionsToTxn and EndTxn with INVALID_PRODUCER_ID_MAPPING;
/// its group coordinator asks the first join for a member id (MEMBER_ID_REQUIRED) and answers
/// OffsetFetch. The exact answers above catch it.
#[test]
fn any_broker_coordinating_is_caught_by_the_exact_answers() {
    let (codes, pid) = coordinator_answers_on_broker_1(Mutations::one(Mutation::AnyBrokerCoordinates));
    assert_eq!((codes, pid), ([16, 49, 49, 79, 0], -1), "broker 1 answers as a coordinator itself");
}

/// The answers on `conn` (decoded as `R`) from `on_tick` every 50 ms after `from`, until the first.
fn first_answer_after<R: Decodable + HeaderVersion>(d: &mut Driver, from: u64, conn: ConnId, version: i16) -> (u64, R) {
    for now in (from..from + 2_000).step_by(50) {
        let out = d.on_tick(now);
        if !out.is_empty() {
            return (now, answer(out, conn, version));
        }
    }
    panic!("no answer within 2 s after {from}");
}

/// Broker 0, the transaction coordinator, crashes. Broker 1 takes `__transaction_state` over with ISR
/// {1, 2}, and its write of `tx`'s epoch bump waits for broker 2, whose one fetcher to broker 1 is parked
/// for `t-0` and takes `__transaction_state` up on its next fetch, once the park ends
/// (`replica.fetch.wait.max.ms`, 500 ms). InitProducerId on broker 1 is answered then, as Kafka's
/// coordinator answers once the append is replicated (`TransactionStateManager.appendTransactionToLog`
/// waits with acks=-1): the time and the answer's error code and epoch.
fn init_producer_id_after_the_coordinator_crashed(mutations: Mutations) -> (u64, i16, i16) {
    let addresses: Vec<(String, u16)> = (0..3).map(|i| ("127.0.0.1".to_string(), 9092 + i)).collect();
    let mut d = Driver::cluster(EngineConfig { mutations, ..EngineConfig::default() }, &addresses, 3, 0);
    d.on_connect(1, 0);
    d.on_connect(2, 1);
    let create = create_topic(TOPIC, 1, -1);
    let r: CreateTopicsResponse = answer(d.on_frame(1, 1, request(ApiKey::CreateTopics, 7, 1, &create)), 1, 7);
    assert_eq!(r.topics[0].error_code, 0);
    assert_eq!(init_transaction(&mut d, 2, 1), (1000, 0), "tx starts at epoch 0 on broker 0");
    d.crash_broker(3, 0).expect("broker 0 crashes");
    assert_eq!(d.on_tick(3), vec![], "broker 1 loads __transaction_state (its load timer is due at once)");
    let mut init = InitProducerIdRequest::default();
    init.transactional_id = Some(StrBytes::from_static_str("tx").into());
    init.transaction_timeout_ms = 60_000;
    let out = d.on_frame(4, 2, request(ApiKey::InitProducerId, 4, 2, &init));
    let (at, r): (u64, InitProducerIdResponse) =
        if out.is_empty() { first_answer_after(&mut d, 5, 2, 4) } else { (4, answer(out, 2, 4)) };
    assert_eq!(d.violations(), &[], "no state or replica invariant broke");
    (at, r.error_code, r.producer_epoch)
}

#[test]
fn a_coordinator_write_waiting_for_its_followers_is_answered_when_they_have_it() {
    let (at, code, epoch) = init_producer_id_after_the_coordinator_crashed(Mutations::default());
    assert_eq!((code, epoch), (0, 1), "tx's epoch bumped to 1 once broker 2 holds the record");
    assert!((500..=600).contains(&at), "answered when broker 2's parked fetch ended and it fetched again, at {at}");
}

/// Under `delayed-answer-timed-out` the driver answers REQUEST_TIMED_OUT at once, though the bump goes on
/// and completes: a client retrying it gets CONCURRENT_TRANSACTIONS, then a second bump. The exact answer
/// above catches it.
#[test]
fn answering_a_waiting_write_timed_out_is_caught_by_the_exact_answer() {
    let got = init_producer_id_after_the_coordinator_crashed(Mutations::one(Mutation::DelayedAnswerTimedOut));
    assert_eq!(got, (4, 7, -1), "REQUEST_TIMED_OUT at once, no epoch");
}

/// Broker 1, leader of `t-0`, crashes; broker 2 leads it with ISR {2, 0}. Broker 0's one fetcher to broker
/// 2 is parked for `t-1`, so an acks=all produce to `t-0` waits for broker 0's next fetch
/// (`DelayedProduce`) and is answered when the HW passes it; an acks=0 one on the same connection right
/// after gets no answer, and its records are kept with their keys once the engine says where they went.
#[test]
fn an_acks_all_produce_waits_for_the_hw_and_acks_0_waits_for_nothing() {
    let mut d = three_brokers();
    d.on_connect(3, 2);
    let create = create_topic(TOPIC, 2, -1);
    let r: CreateTopicsResponse = answer(d.on_frame(1, 1, request(ApiKey::CreateTopics, 7, 1, &create)), 1, 7);
    assert_eq!(r.topics[0].error_code, 0);
    d.crash_broker(2, 1).expect("broker 1 crashes");
    let frame = request(ApiKey::Produce, 9, 3, &produce(None, records(-1, -1, -1, false, &["a"])));
    assert_eq!(d.on_frame(3, 3, frame), vec![], "the produce waits for broker 0 to fetch the record");
    let tp = TopicPartition::new(TOPIC, 0);
    let hw = |d: &Driver| d.brokers()[2].partition(&tp).map(|l| (l.log_end_offset(), l.high_watermark()));
    assert_eq!(hw(&d), Some((1, 0)), "broker 2 appended it; the HW waits");
    let mut zero = produce(None, records(-1, -1, -1, false, &["b"]));
    zero.acks = 0;
    assert_eq!(d.on_frame(4, 3, request(ApiKey::Produce, 9, 4, &zero)), vec![], "acks=0 queues behind it");
    let (at, acked): (u64, ProduceResponse) = first_answer_after(&mut d, 5, 3, 9);
    let pr = &acked.responses[0].partition_responses[0];
    assert_eq!((pr.error_code, pr.base_offset), (0, 0), "acknowledged at offset 0");
    assert!((500..=600).contains(&at), "when broker 0's parked fetch ended and it fetched t-0, at {at}");
    for now in (at + 50..at + 1_000).step_by(50) {
        assert_eq!(d.on_tick(now), vec![], "nothing answers the acks=0 produce");
    }
    assert_eq!(hw(&d), Some((2, 2)), "both records are below the HW");
    let r: FetchResponse = answer(d.on_frame(2_000, 3, request(ApiKey::Fetch, 12, 5, &fetch(0, 0))), 3, 12);
    let pd = &r.responses[0].partitions[0];
    let read = values(pd.records.as_ref().expect("records"));
    assert_eq!(read, vec![(0, "a".into()), (1, "b".into())], "both records, read back from broker 2");
    let mut buf = pd.records.clone().expect("records");
    let keys: Vec<Option<Bytes>> = RecordBatchDecoder::decode_all(&mut buf)
        .expect("fetched records decode")
        .iter()
        .flat_map(|set| set.records.iter().map(|r| r.key.clone()))
        .collect();
    assert_eq!(keys, vec![Some(Bytes::from_static(b"k")); 2], "each record keeps its key, the acks=0 one too");
    assert_eq!(d.violations(), &[], "no state or replica invariant broke");
}

/// FindCoordinator for group `g` on `conn`: its error code and node.
fn find_group_coordinator(d: &mut Driver, now: u64, conn: ConnId) -> (i16, i32) {
    let mut find = FindCoordinatorRequest::default();
    find.key_type = 0;
    find.coordinator_keys = vec![StrBytes::from_static_str("g")];
    let r: FindCoordinatorResponse =
        answer(d.on_frame(now, conn, request(ApiKey::FindCoordinator, 4, 9, &find)), conn, 4);
    (r.coordinators[0].error_code, r.coordinators[0].node_id.0)
}

/// OffsetFetch of group `g` for `t-0` on `conn`: the group's error code and the committed offset.
fn fetch_group_offset(d: &mut Driver, now: u64, conn: ConnId) -> (i16, i64) {
    let mut t = offset_fetch_request::OffsetFetchRequestTopic::default();
    t.name = StrBytes::from_static_str(TOPIC).into();
    t.partition_indexes = vec![0];
    let mut r = OffsetFetchRequest::default();
    r.group_id = StrBytes::from_static_str("g").into();
    r.topics = Some(vec![t]);
    let f: OffsetFetchResponse = answer(d.on_frame(now, conn, request(ApiKey::OffsetFetch, 5, 10, &r)), conn, 5);
    (f.error_code, f.topics.first().map_or(-1, |t| t.partitions[0].committed_offset))
}

/// Group `g` lives on `__consumer_offsets/3`, which the controller creates on the first FindCoordinator
/// for a group (COORDINATOR_NOT_AVAILABLE meanwhile, `KafkaApis.getCoordinator`) and places on brokers 1,
/// 2, 0: broker 1 coordinates. A member joins and syncs (its generation's metadata is written) and commits
/// t-0@5; then broker 1 crashes and broker 2, elected for the partition, loads the group from its replica
/// (`GroupMetadataManager.replay`). Broker 2 is the coordinator now, and broker 0 is not. What broker 2's
/// OffsetFetch (error, offset) and the member's heartbeat there answer.
fn group_after_its_coordinator_crashed(mutations: Mutations) -> ((i16, i64), i16) {
    let addresses: Vec<(String, u16)> = (0..3).map(|i| ("127.0.0.1".to_string(), 9092 + i)).collect();
    let config = EngineConfig { mutations, group_initial_rebalance_delay_ms: 0, ..EngineConfig::default() };
    let mut d = Driver::cluster(config, &addresses, 3, 0);
    for conn in 1..=3 {
        d.on_connect(conn, conn as u32 - 1);
    }
    let create = create_topic(TOPIC, 1, -1);
    let r: CreateTopicsResponse = answer(d.on_frame(1, 1, request(ApiKey::CreateTopics, 7, 1, &create)), 1, 7);
    assert_eq!(r.topics[0].error_code, 0);
    assert_eq!(find_group_coordinator(&mut d, 2, 1), (15, -1), "COORDINATOR_NOT_AVAILABLE while it is created");
    assert_eq!(find_group_coordinator(&mut d, 3, 1), (0, 1), "broker 1 leads __consumer_offsets/3");

    let id = member_id(&mut d, 4, 2);
    assert_eq!(d.on_frame(4, 2, request(ApiKey::JoinGroup, 5, 2, &join("g", &id))), vec![]);
    let joined: JoinGroupResponse = answer(d.on_tick(4), 2, 5);
    assert_eq!((joined.error_code, joined.generation_id), (0, 1), "generation 1 after no initial delay");
    let mut sync = SyncGroupRequest::default();
    sync.group_id = StrBytes::from_static_str("g").into();
    sync.generation_id = 1;
    sync.member_id = id.clone();
    let mut given = sync_group_request::SyncGroupRequestAssignment::default();
    given.member_id = id.clone();
    given.assignment = Bytes::from_static(b"t-0");
    sync.assignments = vec![given];
    // The leader's assignment is answered once the group's metadata record is replicated (followers take
    // the new `__consumer_offsets` partitions up on their next fetch).
    let out = d.on_frame(5, 2, request(ApiKey::SyncGroup, 3, 3, &sync));
    let (_, s): (u64, SyncGroupResponse) =
        if out.is_empty() { first_answer_after(&mut d, 6, 2, 3) } else { (5, answer(out, 2, 3)) };
    assert_eq!(s.error_code, 0, "Stable");
    let mut p = offset_commit_request::OffsetCommitRequestPartition::default();
    p.partition_index = 0;
    p.committed_offset = 5;
    let mut t = offset_commit_request::OffsetCommitRequestTopic::default();
    t.name = StrBytes::from_static_str(TOPIC).into();
    t.partitions = vec![p];
    let mut commit = OffsetCommitRequest::default();
    commit.group_id = StrBytes::from_static_str("g").into();
    commit.generation_id_or_member_epoch = 1;
    commit.member_id = id.clone();
    commit.topics = vec![t];
    let out = d.on_frame(600, 2, request(ApiKey::OffsetCommit, 7, 4, &commit));
    let (_, c): (u64, OffsetCommitResponse) =
        if out.is_empty() { first_answer_after(&mut d, 601, 2, 7) } else { (600, answer(out, 2, 7)) };
    assert_eq!(c.topics[0].partitions[0].error_code, 0, "the commit is acknowledged once replicated");

    d.crash_broker(1_000, 1).expect("broker 1 crashes");
    assert_eq!(find_group_coordinator(&mut d, 1_001, 1), (0, 2), "broker 2 leads __consumer_offsets/3 now");
    assert_eq!(fetch_group_offset(&mut d, 1_002, 1).0, 16, "NOT_COORDINATOR from broker 0");
    // The coordinator runtime reads at the last committed offset, so the fetch waits until broker 0, now
    // broker 2's follower, has fetched from it and broker 2's HW has passed the commit.
    for now in (1_003..1_600).step_by(50) {
        assert_eq!(d.on_tick(now).len(), 0, "nothing is sent to a client while the brokers replicate");
    }
    let fetched = fetch_group_offset(&mut d, 1_600, 3);
    let beat = heartbeat(&mut d, 1_601, 3, 1, &id);
    assert_eq!(d.violations(), &[], "no state or replica invariant broke");
    (fetched, beat)
}

#[test]
fn a_groups_offsets_and_members_survive_its_coordinators_crash() {
    let (fetched, beat) = group_after_its_coordinator_crashed(Mutations::default());
    assert_eq!(fetched, (0, 5), "broker 2 loaded the committed offset from its replica");
    assert_eq!(beat, 0, "and the member at generation 1: its heartbeat is answered, no rebalance");
}

/// Under `groups-kept-in-memory` (the engine before groups were written to `__consumer_offsets`) the new
/// coordinator knows nothing of the group: no offset, and the member is unknown. The exact answers above
/// catch it.
#[test]
fn groups_kept_in_memory_are_caught_by_the_exact_answers() {
    let (fetched, beat) = group_after_its_coordinator_crashed(Mutations::one(Mutation::GroupsKeptInMemory));
    assert_eq!((fetched, beat), ((0, -1), 25), "no committed offset, UNKNOWN_MEMBER_ID");
}

/// A client's Produce to `__transaction_state/0` (broker 0 leads it) and to `t-0`, in one request: the
/// error code per partition and `__transaction_state/0`'s log end after it.
fn produce_to_an_internal_topic(mutations: Mutations) -> ((i16, i16), u64) {
    let addresses: Vec<(String, u16)> = (0..3).map(|i| ("127.0.0.1".to_string(), 9092 + i)).collect();
    let mut d = Driver::cluster(EngineConfig { mutations, ..EngineConfig::default() }, &addresses, 3, 0);
    d.on_connect(1, 0);
    let r: CreateTopicsResponse =
        answer(d.on_frame(1, 1, request(ApiKey::CreateTopics, 7, 1, &create_topic(TOPIC, 1, 1))), 1, 7);
    assert_eq!(r.topics[0].error_code, 0);
    let mut internal = produce(None, records(-1, -1, -1, false, &["forged"]));
    internal.topic_data[0].name = StrBytes::from_static_str("__transaction_state").into();
    let plain = produce(None, records(-1, -1, -1, false, &["x"])).topic_data.remove(0);
    internal.topic_data.push(plain);
    let out = d.on_frame(2, 1, request(ApiKey::Produce, 9, 2, &internal));
    let r: ProduceResponse = answer(out, 1, 9);
    let codes: Vec<i16> = r.responses.iter().map(|t| t.partition_responses[0].error_code).collect();
    let log = d.brokers()[0].partition(&TopicPartition::new("__transaction_state", 0)).expect("broker 0 hosts it");
    ((codes[0], codes[1]), log.log_end_offset())
}

/// `ReplicaManager.appendToLocalLog`: INVALID_TOPIC_EXCEPTION (17) for the internal topic, nothing
/// appended to the coordinator's log; the request's other partition is taken as usual (`t-0` is led by
/// broker 1, so broker 0 answers it NOT_LEADER_OR_FOLLOWER).
#[test]
fn a_client_cannot_write_the_coordinators_logs() {
    let got = produce_to_an_internal_topic(Mutations::default());
    assert_eq!(got, ((17, 6), 0), "INVALID_TOPIC_EXCEPTION, the log untouched; NOT_LEADER_OR_FOLLOWER for t-0");
}

/// Under `internal-topics-writable` the forged record lands in `__transaction_state`, where the next
/// coordinator to load the log would read it as its own. The exact answer above catches it.
#[test]
fn internal_topics_writable_is_caught_by_the_exact_answer() {
    let got = produce_to_an_internal_topic(Mutations::one(Mutation::InternalTopicsWritable));
    assert_eq!(got, ((0, 6), 1), "appended at offset 0");
}

/// A frame the server read from a connection of broker 0 just as broker 0 crashed (the connection's close
/// and the frame raced in the server's loop): broker 0 serves nothing, and its connection closes. serve
/// once answered it from the crashed broker, and a Metadata request there panicked the server.
#[test]
fn a_frame_from_a_crashed_brokers_connection_is_not_served() {
    let mut d = three_brokers();
    let create = create_topic(TOPIC, 1, -1);
    let r: CreateTopicsResponse = answer(d.on_frame(1, 2, request(ApiKey::CreateTopics, 7, 1, &create)), 2, 7);
    assert_eq!(r.topics[0].error_code, 0);
    let closed = d.crash_broker(2, 0).expect("broker 0 crashes");
    assert_eq!(closed, vec![Output::Close(1, "broker 0 crashed".into())], "its one connection closes");
    let mut m = MetadataRequest::default();
    m.topics = None;
    let late = d.on_frame(3, 1, request(ApiKey::Metadata, 12, 9, &m));
    assert_eq!(late, vec![Output::Close(1, "broker 0 crashed".into())], "not served, closed again");
    assert_eq!(metadata_of(&mut d, 4, 2, TOPIC).topics[0].error_code, 0, "broker 1 serves on");
}

/// A TxnOffsetCommit of `tx`'s offset 1 for `t-0` in group `g` (no consumer group metadata).
fn txn_offset_commit(pid: i64, epoch: i16) -> TxnOffsetCommitRequest {
    let mut p = txn_offset_commit_request::TxnOffsetCommitRequestPartition::default();
    p.partition_index = 0;
    p.committed_offset = 1;
    let mut t = txn_offset_commit_request::TxnOffsetCommitRequestTopic::default();
    t.name = StrBytes::from_static_str(TOPIC).into();
    t.partitions = vec![p];
    let mut commit = TxnOffsetCommitRequest::default();
    commit.transactional_id = StrBytes::from_static_str("tx").into();
    commit.group_id = StrBytes::from_static_str("g").into();
    commit.producer_id = pid.into();
    commit.producer_epoch = epoch;
    commit.generation_id = -1;
    commit.topics = vec![t];
    commit
}

/// Under transaction version 2 Kafka's Java client sends no AddOffsetsToTxn: its TxnOffsetCommit v5 has
/// the group's broker add the offsets partition to the transaction (KIP-890 part 2). What a v5 commit of
/// `t-0@1` for group `g`, then EndTxn v5's commit and an OffsetFetch answer on one broker: (TxnOffsetCommit
/// error, EndTxn error, OffsetFetch (error, offset)).
fn txn_offset_commit_v5(mutations: Mutations) -> (i16, i16, (i16, i64)) {
    let mut d = Driver::new(EngineConfig { mutations, ..EngineConfig::default() }, "127.0.0.1", 9092, 0);
    let r: CreateTopicsResponse =
        answer(d.on_frame(1, 1, request(ApiKey::CreateTopics, 7, 1, &create_topic(TOPIC, 1, 1))), 1, 7);
    assert_eq!(r.topics[0].error_code, 0, "topic created");
    let (pid, epoch) = init_transaction(&mut d, 2, 1);
    let commit = txn_offset_commit(pid, epoch);
    let r: TxnOffsetCommitResponse = answer(d.on_frame(3, 1, request(ApiKey::TxnOffsetCommit, 5, 3, &commit)), 1, 5);
    let offsets_error = r.topics[0].partitions[0].error_code;
    let mut end = EndTxnRequest::default();
    end.transactional_id = StrBytes::from_static_str("tx").into();
    end.producer_id = pid.into();
    end.producer_epoch = epoch;
    end.committed = true;
    let e: EndTxnResponse = answer(d.on_frame(4, 1, request(ApiKey::EndTxn, 5, 4, &end)), 1, 5);
    (offsets_error, e.error_code, fetch_group_offset(&mut d, 5, 1))
}

#[test]
fn a_txn_offset_commit_v5_adds_the_offsets_partition_to_the_transaction() {
    assert_eq!(txn_offset_commit_v5(Mutations::default()), (0, 0, (0, 1)), "added, committed, then fetched");
}

/// Under `txn-offset-commit-v5-only-verifies` the v5 commit is refused TRANSACTION_ABORTABLE (120): the
/// partition was never added, so the transaction is empty, a TV2 commit of it is INVALID_TXN_STATE (48),
/// and the group has no offset.
#[test]
fn a_txn_offset_commit_v5_that_only_verifies_is_caught_by_the_exact_answers() {
    let got = txn_offset_commit_v5(Mutations::one(Mutation::TxnOffsetCommitV5OnlyVerifies));
    assert_eq!(got, (120, 48, (0, -1)), "refused, the empty transaction's commit refused, no offset");
}

/// KIP-890 part 1: a transaction holding t-0 only. What a Produce v11 and a v10 to t-1 (never added) and a
/// TxnOffsetCommit v3 and v4 of group `g` (no AddOffsetsToTxn before them) answer, each verified with
/// the coordinator: (v11, v10, commit v3, commit v4).
fn verify_only_outside_the_transaction(mutations: Mutations) -> [i16; 4] {
    let mut d = Driver::new(EngineConfig { mutations, ..EngineConfig::default() }, "127.0.0.1", 9092, 0);
    let r: CreateTopicsResponse =
        answer(d.on_frame(1, 1, request(ApiKey::CreateTopics, 7, 1, &create_topic(TOPIC, 2, 1))), 1, 7);
    assert_eq!(r.topics[0].error_code, 0, "topic created");
    let (pid, epoch) = init_transaction(&mut d, 2, 1);
    assert_eq!(add_partition(&mut d, 3, 1, pid, epoch), 0, "t-0 joins the transaction");
    let mut codes = [0; 4];
    for (i, version) in [11, 10].into_iter().enumerate() {
        let mut r = produce(Some("tx"), records(pid, epoch, 0, true, &["v"]));
        r.topic_data[0].partition_data[0].index = 1;
        let got: ProduceResponse = answer(d.on_frame(4, 1, request(ApiKey::Produce, version, 4, &r)), 1, version);
        codes[i] = got.responses[0].partition_responses[0].error_code;
    }
    let commit = txn_offset_commit(pid, epoch);
    for (i, version) in [3, 4].into_iter().enumerate() {
        let frame = request(ApiKey::TxnOffsetCommit, version, 5, &commit);
        let r: TxnOffsetCommitResponse = answer(d.on_frame(5, 1, frame), 1, version);
        codes[2 + i] = r.topics[0].partitions[0].error_code;
    }
    codes
}

/// TRANSACTION_ABORTABLE (120) to clients that know it, INVALID_TXN_STATE (48) to older ones, as real
/// Kafka 4.3.1 answers (tests/apache_kafka.rs checks the same requests there).
#[test]
fn a_partition_outside_the_transaction_is_refused_per_client_version() {
    assert_eq!(verify_only_outside_the_transaction(Mutations::default()), [120, 48, 48, 120]);
}

/// Under `verification-refused-invalid-txn-state` every client gets INVALID_TXN_STATE.
#[test]
fn verification_refused_invalid_txn_state_is_caught_by_the_exact_answers() {
    let got = verify_only_outside_the_transaction(Mutations::one(Mutation::VerificationRefusedInvalidTxnState));
    assert_eq!(got, [48, 48, 48, 48]);
}

/// KAFKA-18202: a Produce v12 (transaction version 2) of a transactional batch at sequence 5 from a fresh
/// producer, then one at 0: the partition's (error, base offset) of each.
fn tv2_first_batch_at_sequence_5(mutations: Mutations) -> [(i16, i64); 2] {
    let mut d = Driver::new(EngineConfig { mutations, ..EngineConfig::default() }, "127.0.0.1", 9092, 0);
    let r: CreateTopicsResponse =
        answer(d.on_frame(1, 1, request(ApiKey::CreateTopics, 7, 1, &create_topic(TOPIC, 1, 1))), 1, 7);
    assert_eq!(r.topics[0].error_code, 0, "topic created");
    let (pid, epoch) = init_transaction(&mut d, 2, 1);
    [(5, "five"), (0, "zero")].map(|(seq, value)| {
        let frame = request(ApiKey::Produce, 12, 3, &produce(Some("tx"), records(pid, epoch, seq, true, &[value])));
        let r: ProduceResponse = answer(d.on_frame(3, 1, frame), 1, 12);
        let p = &r.responses[0].partition_responses[0];
        (p.error_code, p.base_offset)
    })
}

/// Real Kafka 4.3.1 answers the first OUT_OF_ORDER_SEQUENCE_NUMBER (45) and takes the second at offset 0
/// (tests/apache_kafka.rs).
#[test]
fn a_tv2_producer_with_no_state_must_start_at_sequence_0() {
    assert_eq!(tv2_first_batch_at_sequence_5(Mutations::default()), [(45, -1), (0, 0)]);
}

/// Under `tv2-first-sequence-unchecked` the batch at 5 is appended at offset 0 and the one at 0 refused.
#[test]
fn an_unchecked_tv2_first_sequence_is_caught_by_the_exact_answers() {
    let got = tv2_first_batch_at_sequence_5(Mutations::one(Mutation::Tv2FirstSequenceUnchecked));
    assert_eq!(got, [(0, 0), (45, -1)]);
}

/// ApiVersions v3 with the client's software name and version (KIP-511): (error, APIs listed) for a
/// valid name, an empty one and one ending in a dot.
fn api_versions_v3_by_name(mutations: Mutations) -> Vec<(i16, usize)> {
    let mut d = Driver::new(EngineConfig { mutations, ..EngineConfig::default() }, "127.0.0.1", 9092, 0);
    [("txnsim", "0.1.0"), ("", "0.1.0"), ("txnsim", "0.1.")]
        .map(|(name, version)| {
            let mut r = ApiVersionsRequest::default();
            r.client_software_name = StrBytes::from_static_str(name);
            r.client_software_version = StrBytes::from_static_str(version);
            let a: ApiVersionsResponse = answer(d.on_frame(0, 1, request(ApiKey::ApiVersions, 3, 1, &r)), 1, 3);
            (a.error_code, a.api_keys.len())
        })
        .to_vec()
}

/// Kafka refuses a malformed client name with INVALID_REQUEST (42) and lists nothing
/// (`ApiVersionsRequest.isValid`); real Kafka 4.3.1 answers the empty name so (tests/apache_kafka.rs).
#[test]
fn api_versions_v3_refuses_a_malformed_client_name() {
    let n = txnsim_kafka::api::SUPPORTED.len();
    assert_eq!(api_versions_v3_by_name(Mutations::default()), [(0, n), (42, 0), (42, 0)]);
}

/// Under `api-versions-names-unchecked` every name gets the full answer.
#[test]
fn unchecked_client_names_are_caught_by_the_exact_answers() {
    let n = txnsim_kafka::api::SUPPORTED.len();
    assert_eq!(api_versions_v3_by_name(Mutations::one(Mutation::ApiVersionsNamesUnchecked)), [(0, n); 3]);
}

/// Every batch of a fetched partition as (offset, control), data records one by one.
fn batch_offsets(records: &Bytes) -> Vec<(i64, bool)> {
    let mut buf = records.clone();
    let sets = RecordBatchDecoder::decode_all(&mut buf).expect("fetched records decode");
    sets.iter().flat_map(|s| s.records.iter().map(|r| (r.offset, r.control))).collect()
}

/// A cluster the engine built (`txnsim conform`'s way: `Cluster::into_brokers`, `Driver::from_cluster`)
/// is served as it stands, and a Fetch reads one segment, as `LocalLog.read` returns the first segment
/// holding data at or after the fetch offset and stops at its end: segments [x1 0, x2 1] [ABORT 2]
/// [c1 3, COMMIT 4] come back one per fetch, the first with the aborted list but not its marker.
#[test]
fn a_built_cluster_is_served_and_a_fetch_reads_one_segment() {
    use txnsim_engine::{Cluster, ProducerKind};
    let mut cluster = Cluster::new(&BTreeMap::from([(TOPIC.to_string(), 1)]), EngineConfig::default());
    cluster.add_producer("p", ProducerKind::Transactional { transactional_id: "p".into() });
    let tp = TopicPartition::new(TOPIC, 0);
    let roll = |c: &mut Cluster| c.broker.partition_mut(&tp).expect("t-0").roll_segment();
    let call = |c: &mut Cluster, f: &dyn Fn(&mut txnsim_engine::Producer, u64) -> _| {
        c.call_producer("p", |p, now| f(p, now)).expect("the engine answers").expect("the call completes")
    };
    call(&mut cluster, &|p, now| p.init_transactions(now));
    cluster.producers.get_mut("p").expect("p").begin_transaction().expect("begin");
    for v in ["x1", "x2"] {
        call(&mut cluster, &|p, now| p.send(now, TopicPartition::new(TOPIC, 0), vec![v.to_string()]));
    }
    roll(&mut cluster);
    call(&mut cluster, &|p, now| p.abort_transaction(now));
    roll(&mut cluster);
    cluster.producers.get_mut("p").expect("p").begin_transaction().expect("begin");
    call(&mut cluster, &|p, now| p.send(now, TopicPartition::new(TOPIC, 0), vec!["c1".to_string()]));
    call(&mut cluster, &|p, now| p.commit_transaction(now));
    let now = cluster.now_ms;
    let (brokers, controller, timers) = cluster.into_brokers();
    let mut d = Driver::from_cluster(brokers, Some(controller), timers, &[("127.0.0.1".into(), 9092)]);
    let mut fetched = Vec::new();
    for (corr, offset) in [(1, 0), (2, 2), (3, 3)] {
        let r: FetchResponse = answer(d.on_frame(now, 1, request(ApiKey::Fetch, 12, corr, &fetch(1, offset))), 1, 12);
        let p = &r.responses[0].partitions[0];
        let aborted = p.aborted_transactions.as_ref().expect("read_committed").iter().map(|a| a.first_offset);
        fetched.push((batch_offsets(p.records.as_ref().expect("records")), aborted.collect::<Vec<_>>()));
    }
    let want = vec![
        (vec![(0, false), (1, false)], vec![0]),
        (vec![(2, true)], vec![0]),
        (vec![(3, false), (4, true)], vec![]),
    ];
    assert_eq!(fetched, want, "one segment per fetch, with the aborted transactions overlapping it");
    assert!(d.violations().is_empty(), "{:?}", d.violations());
}
