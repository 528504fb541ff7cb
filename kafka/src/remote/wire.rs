//! The sweep's own wire calls, with kafka-protocol's codecs: CreateTopics for each run's topics, and at
//! the end a read_uncommitted Fetch of every partition from offset 0, decoded batch by batch (producer
//! ids, epochs, the transactional and control flags, COMMIT/ABORT markers), so the log-based history
//! invariants get the partition logs as the brokers hold them.

use crate::frame;
use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    BrokerId, CreateTopicsRequest, FetchRequest, MetadataRequest, MetadataResponse, RequestHeader, ResponseHeader,
    TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use kafka_protocol::records::RecordBatchDecoder;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;
use txnsim_engine::producer_state::AppendOrigin;
use txnsim_engine::record::{BatchBody, BatchProducer, EndTxnMarker, ProduceBatch, Record, RecordBatch};
use txnsim_engine::{Mutations, Offset, PartitionLog, TopicPartition, TransactionResult, TransactionVersion};

/// Versions the sweep speaks: the first flexible ones of each API (Kafka 2.4 to 2.7), which Kafka 4.x
/// and `txnsim serve` still serve.
const METADATA_VERSION: i16 = 9;
const CREATE_TOPICS_VERSION: i16 = 5;
/// Fetch v12: topics by name, the log start offset and the aborted list; isolation level 0.
const FETCH_VERSION: i16 = 12;
/// How long a broker may take to answer one call.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Per-partition bytes asked for in one Fetch; a partial batch at the end is fetched again.
const FETCH_BYTES: i32 = 4 << 20;
/// `TOPIC_ALREADY_EXISTS`: a re-run of the same seed and run tag finds its topics there.
const TOPIC_ALREADY_EXISTS: i16 = 36;
/// `OFFSET_OUT_OF_RANGE`: a fetch below the log start.
const OFFSET_OUT_OF_RANGE: i16 = 1;

/// One connection to one broker, one call at a time.
pub struct Conn {
    addr: String,
    stream: TcpStream,
    next_id: i32,
}

impl Conn {
    pub fn connect(addr: &str) -> Result<Conn, String> {
        let sock = addr
            .to_socket_addrs()
            .map_err(|e| format!("{addr}: {e}"))?
            .next()
            .ok_or_else(|| format!("{addr}: no address"))?;
        let stream = TcpStream::connect_timeout(&sock, IO_TIMEOUT).map_err(|e| format!("{addr}: {e}"))?;
        stream.set_read_timeout(Some(IO_TIMEOUT)).ok();
        stream.set_write_timeout(Some(IO_TIMEOUT)).ok();
        stream.set_nodelay(true).ok();
        Ok(Conn { addr: addr.to_string(), stream, next_id: 0 })
    }

    /// Sends one request and decodes its answer.
    pub fn call<R: Request>(&mut self, version: i16, request: &R) -> Result<R::Response, String> {
        self.next_id += 1;
        let mut header = RequestHeader::default();
        header.request_api_key = R::KEY;
        header.request_api_version = version;
        header.correlation_id = self.next_id;
        header.client_id = Some(StrBytes::from_static_str("txnsim-sweep-target"));
        let mut body = BytesMut::new();
        let fail = |e: String| format!("{}: encoding api {} v{version}: {e}", self.addr, R::KEY);
        header.encode(&mut body, R::header_version(version)).map_err(|e| fail(e.to_string()))?;
        request.encode(&mut body, version).map_err(|e| fail(e.to_string()))?;
        self.stream.write_all(&frame::frame(&body)).map_err(|e| format!("{}: {e}", self.addr))?;
        let mut answer = frame::read_frame(&mut self.stream)
            .map_err(|e| match &e {
                // The read timeout: the broker accepted the connection but never answered.
                frame::FrameError::Io(io)
                    if matches!(io.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
                {
                    format!(
                        "{}: timed out after {} s waiting for the broker's answer (api {} v{version})",
                        self.addr,
                        IO_TIMEOUT.as_secs(),
                        R::KEY
                    )
                }
                _ => format!("{}: {e}", self.addr),
            })?
            .ok_or_else(|| format!("{}: the broker closed the connection (api {} v{version})", self.addr, R::KEY))?;
        let decode_fail = |what: &str, e: String| format!("{}: api {} v{version}: bad {what}: {e}", self.addr, R::KEY);
        let rh = ResponseHeader::decode(&mut answer, R::Response::header_version(version))
            .map_err(|e| decode_fail("response header", e.to_string()))?;
        if rh.correlation_id != header.correlation_id {
            return Err(format!(
                "{}: answer to request {} for {}",
                self.addr, rh.correlation_id, header.correlation_id
            ));
        }
        R::Response::decode(&mut answer, version).map_err(|e| decode_fail("response", e.to_string()))
    }
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// Connects to the first bootstrap address that answers.
pub fn bootstrap(addrs: &[String]) -> Result<Conn, String> {
    let mut errors = Vec::new();
    for a in addrs {
        match Conn::connect(a) {
            Ok(c) => return Ok(c),
            Err(e) => errors.push(e),
        }
    }
    Err(format!("no bootstrap broker answered: {}", errors.join("; ")))
}

/// Creates the run's topics (replication factor: the cluster's default). A topic that already exists is
/// an error: its old records would mix with this run's.
pub fn create_topics(addrs: &[String], topics: &[(String, u32)]) -> Result<(), String> {
    let mut conn = bootstrap(addrs)?;
    let mut request = CreateTopicsRequest::default();
    request.timeout_ms = 10_000;
    request.topics = topics
        .iter()
        .map(|(name, n)| {
            let mut t = CreatableTopic::default();
            t.name = TopicName(str_bytes(name));
            t.num_partitions = *n as i32;
            t.replication_factor = -1;
            t
        })
        .collect();
    let response = conn.call(CREATE_TOPICS_VERSION, &request)?;
    for t in response.topics {
        if t.error_code != 0 {
            let why = if t.error_code == TOPIC_ALREADY_EXISTS { " (already exists)" } else { "" };
            let message = t.error_message.map(|m| format!(": {}", m.as_str())).unwrap_or_default();
            return Err(format!("CreateTopics {}: error code {}{why}{message}", t.name.0.as_str(), t.error_code));
        }
    }
    Ok(())
}

/// One partition as read over the wire: its high watermark, its LSO once it settled, and every batch
/// below the HW.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireLog {
    pub topic: String,
    pub partition: u32,
    pub high_watermark: Offset,
    /// None in a history file saved before the LSO was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_stable_offset: Option<Offset>,
    pub batches: Vec<RecordBatch>,
}

impl WireLog {
    pub fn topic_partition(&self) -> TopicPartition {
        TopicPartition::new(&self.topic, self.partition)
    }

    /// The engine's `PartitionLog` holding these batches, appended as a follower does (no epoch or
    /// sequence checks: the leader made them), so the history invariants read it as the sim's logs.
    pub fn to_partition_log(&self) -> Result<PartitionLog, String> {
        let mut log = PartitionLog::new();
        let none = Mutations::none();
        let tp = self.topic_partition();
        for b in &self.batches {
            let end = log.log_end_offset();
            if b.base_offset < end {
                return Err(format!(
                    "{tp}: batch at {} overlaps the batch before it, which ends at {end}",
                    b.base_offset
                ));
            }
            if b.base_offset > end {
                return Err(format!("{tp}: batch at {} after log end {end} (a gap)", b.base_offset));
            }
            let refused = |e: txnsim_engine::KafkaError| format!("{tp}: batch at {}: {}", b.base_offset, e.name());
            match &b.body {
                BatchBody::Data(records) => {
                    let batch = ProduceBatch {
                        producer: b.producer,
                        is_transactional: b.is_transactional,
                        values: records.iter().map(|r| r.value.clone()).collect(),
                        compression: b.compression,
                    };
                    log.append_data(&batch, AppendOrigin::Replication, 0, &none).map_err(refused)?;
                }
                BatchBody::Control(Some(marker)) => {
                    let p = b
                        .producer
                        .ok_or_else(|| format!("{tp}: control batch at {} has no producer", b.base_offset))?;
                    log.append_marker(
                        p.producer_id,
                        p.epoch,
                        *marker,
                        AppendOrigin::Replication,
                        TransactionVersion::V1,
                        0,
                        &none,
                    )
                    .map_err(refused)?;
                }
                BatchBody::Control(None) => return Err(format!("{tp}: empty control batch at {}", b.base_offset)),
            }
            if log.log_end_offset() != b.next_offset() {
                return Err(format!("{tp}: batch at {} does not end at {}", b.base_offset, b.last_offset));
            }
        }
        log.update_high_watermark(self.high_watermark, &none);
        Ok(log)
    }
}

/// Reads every given partition from offset 0 to its high watermark at read_uncommitted, each from its
/// leader.
pub fn read_logs(addrs: &[String], partitions: &[TopicPartition], settle: Duration) -> Result<Vec<WireLog>, String> {
    let mut conn = bootstrap(addrs)?;
    let mut request = MetadataRequest::default();
    let mut topics: Vec<&str> = partitions.iter().map(|tp| tp.topic.as_str()).collect();
    topics.dedup();
    request.topics = Some(
        topics
            .iter()
            .map(|t| {
                let mut mt = MetadataRequestTopic::default();
                mt.name = Some(TopicName(str_bytes(t)));
                mt
            })
            .collect(),
    );
    let metadata = conn.call(METADATA_VERSION, &request)?;
    // One wait for the whole run: a hanging transaction costs it once, not once per partition.
    let deadline = std::time::Instant::now() + settle;
    let mut leaders: BTreeMap<BrokerId, Conn> = BTreeMap::new();
    let mut out = Vec::new();
    for tp in partitions {
        let leader = leader_of(&metadata, tp)?;
        let conn = match leaders.entry(leader) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                let b = metadata
                    .brokers
                    .iter()
                    .find(|b| b.node_id == leader)
                    .ok_or_else(|| format!("{tp}: leader {} is not among the brokers", leader.0))?;
                e.insert(Conn::connect(&format!("{}:{}", b.host.as_str(), b.port))?)
            }
        };
        out.push(read_partition(conn, tp, deadline)?);
    }
    Ok(out)
}

fn leader_of(metadata: &MetadataResponse, tp: &TopicPartition) -> Result<BrokerId, String> {
    let topic = metadata
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == tp.topic))
        .ok_or_else(|| format!("{tp}: not in the metadata"))?;
    let p = topic
        .partitions
        .iter()
        .find(|p| p.partition_index == tp.partition as i32)
        .ok_or_else(|| format!("{tp}: no such partition (error code {})", topic.error_code))?;
    if p.error_code != 0 || p.leader_id.0 < 0 {
        return Err(format!("{tp}: no leader (error code {})", p.error_code));
    }
    Ok(p.leader_id)
}

/// Reads `tp` once its LSO has reached its HW, or with its LSO below the HW at `deadline` (a hanging
/// transaction, for `lso-reaches-high-watermark`; `sweep --target --settle-ms`): every transaction has ended by now,
/// but Kafka answers EndTxn once the Prepare record is durable and writes the markers after it
/// (`TransactionCoordinator.endTransaction`), so a log read at once can lack a marker a later reader sees.
fn read_partition(conn: &mut Conn, tp: &TopicPartition, deadline: std::time::Instant) -> Result<WireLog, String> {
    let view = loop {
        let view = fetch_log(conn, tp, Isolation::ReadUncommitted)?;
        if view.last_stable_offset >= view.high_watermark || std::time::Instant::now() > deadline {
            break view;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if view.log_start_offset > 0 {
        return Err(format!("{tp}: log starts at {}, records were deleted", view.log_start_offset));
    }
    Ok(WireLog {
        topic: tp.topic.clone(),
        partition: tp.partition,
        high_watermark: view.high_watermark,
        last_stable_offset: Some(view.last_stable_offset.min(view.high_watermark)),
        batches: view.batches,
    })
}

/// A Fetch's isolation level (`IsolationLevel`: 0 read_uncommitted, 1 read_committed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    ReadUncommitted = 0,
    ReadCommitted = 1,
}

/// What one broker's Fetch answers said of a partition read from its log start to its end (the HW at
/// read_uncommitted, the LSO at read_committed): the whole batches below that end, and the last answer's
/// HW, LSO, log start and, at read_committed, every aborted transaction the answers listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchView {
    pub high_watermark: Offset,
    pub last_stable_offset: Offset,
    pub log_start_offset: Offset,
    /// `(producer id, first offset)` of each aborted transaction the answers listed, in order, once each.
    pub aborted: Vec<(i64, Offset)>,
    pub batches: Vec<RecordBatch>,
}

/// The pause before fetching again after an answer without data (a consumer's `retry.backoff.ms` is 100).
const EMPTY_FETCH_BACKOFF: Duration = Duration::from_millis(100);
/// Fetch answers in a row without data before a read-back gives up (about 5 s of backoff).
const EMPTY_FETCHES: u32 = 50;

/// Reads `tp` on the broker behind `conn` at `isolation`, from its log start to the end its answers give,
/// as a consumer's Fetch (replica id -1; v12, whose consumer fetches a follower also answers, KIP-392).
pub fn fetch_log(conn: &mut Conn, tp: &TopicPartition, isolation: Isolation) -> Result<FetchView, String> {
    let mut view = FetchView {
        high_watermark: 0,
        last_stable_offset: 0,
        log_start_offset: 0,
        aborted: Vec::new(),
        batches: Vec::new(),
    };
    let mut next: Offset = 0;
    // A broker may answer a Fetch early with nothing (no partition, or no whole batch yet): a consumer
    // fetches again, after a backoff; a read that gets nothing that many times in a row fails. (Each Fetch
    // asks for an answer at once: a read that has reached the end must not wait for data.)
    let mut empty = 0;
    loop {
        let mut partition = FetchPartition::default();
        partition.partition = tp.partition as i32;
        partition.fetch_offset = next as i64;
        partition.partition_max_bytes = FETCH_BYTES;
        let mut topic = FetchTopic::default();
        topic.topic = TopicName(str_bytes(&tp.topic));
        topic.partitions = vec![partition];
        let mut request = FetchRequest::default();
        request.replica_id = BrokerId(-1);
        request.max_wait_ms = 0;
        request.min_bytes = 0;
        request.max_bytes = FETCH_BYTES;
        request.isolation_level = isolation as i8;
        request.session_epoch = -1;
        request.topics = vec![topic];
        let response = conn.call(FETCH_VERSION, &request)?;
        let Some(data) = response
            .responses
            .into_iter()
            .flat_map(|t| t.partitions)
            .find(|p| p.partition_index == tp.partition as i32)
        else {
            empty += 1;
            if empty >= EMPTY_FETCHES {
                return Err(format!("{tp}: {EMPTY_FETCHES} Fetch answers in a row had no such partition"));
            }
            std::thread::sleep(EMPTY_FETCH_BACKOFF);
            continue;
        };
        if data.error_code == OFFSET_OUT_OF_RANGE && next == 0 && data.log_start_offset > 0 {
            next = data.log_start_offset as Offset; // the log starts later: read from there
            continue;
        }
        if data.error_code != 0 {
            return Err(format!("{tp}: Fetch from {next}: error code {}", data.error_code));
        }
        view.high_watermark = data.high_watermark.max(0) as Offset;
        view.last_stable_offset = data.last_stable_offset.max(0) as Offset;
        view.log_start_offset = data.log_start_offset.max(0) as Offset;
        for a in data.aborted_transactions.unwrap_or_default() {
            let entry = (a.producer_id.0, a.first_offset.max(0) as Offset);
            if !view.aborted.contains(&entry) {
                view.aborted.push(entry);
            }
        }
        let end = match isolation {
            Isolation::ReadUncommitted => view.high_watermark,
            Isolation::ReadCommitted => view.last_stable_offset,
        };
        if next >= end {
            return Ok(view);
        }
        let before = next;
        for batch in decode_batches(tp, data.records.unwrap_or_default())? {
            if batch.base_offset < next {
                continue; // Kafka may answer from the start of the batch holding the fetch offset.
            }
            if batch.base_offset >= end {
                break;
            }
            next = batch.next_offset();
            view.batches.push(batch);
        }
        if next == before {
            empty += 1;
            if empty >= EMPTY_FETCHES {
                return Err(format!(
                    "{tp}: {EMPTY_FETCHES} Fetches from {next} returned no complete batch below {end}"
                ));
            }
            std::thread::sleep(EMPTY_FETCH_BACKOFF);
        } else {
            empty = 0;
        }
    }
}

/// Splits a Fetch answer's records into whole v2 batches (`baseOffset` i64, `batchLength` i32 ahead of
/// each); a trailing partial batch, which Kafka may return, is left for the next Fetch.
fn decode_batches(tp: &TopicPartition, mut records: Bytes) -> Result<Vec<RecordBatch>, String> {
    let mut out = Vec::new();
    while records.len() >= 12 {
        let length = i32::from_be_bytes(records[8..12].try_into().expect("four bytes"));
        let total = 12 + usize::try_from(length).map_err(|_| format!("{tp}: negative batch length {length}"))?;
        if records.len() < total {
            break;
        }
        let mut one = records.split_to(total);
        let info = RecordBatchDecoder::decode_batch_info(&mut one.clone())
            .map_err(|e| format!("{tp}: bad batch header: {e}"))?;
        let info = info.first().ok_or_else(|| format!("{tp}: a batch that is not magic v2"))?.clone();
        let set = RecordBatchDecoder::decode(&mut one).map_err(|e| format!("{tp}: bad batch: {e}"))?;
        let base = info.min_offset as Offset;
        let producer = (info.producer_id >= 0).then_some(BatchProducer {
            producer_id: info.producer_id,
            epoch: info.producer_epoch,
            base_sequence: info.base_sequence,
        });
        let last = base + (info.record_count.max(1) as u64) - 1;
        let body = if info.control {
            let r = set.records.first().ok_or_else(|| format!("{tp}: control batch at {base} with no record"))?;
            BatchBody::Control(Some(control_marker(tp, base, r)?))
        } else {
            BatchBody::Data(
                set.records
                    .iter()
                    .map(|r| Record {
                        offset: r.offset as Offset,
                        value: r.value.as_ref().map(|v| String::from_utf8_lossy(v).into_owned()).unwrap_or_default(),
                    })
                    .collect(),
            )
        };
        let last = set.records.last().map_or(last, |r| (r.offset as Offset).max(last));
        let partition_leader_epoch = set.records.first().map_or(0, |r| r.partition_leader_epoch);
        out.push(RecordBatch {
            base_offset: base,
            last_offset: last,
            producer,
            is_transactional: info.transactional,
            body,
            partition_leader_epoch,
            compression: crate::records::engine_compression(info.compression),
        });
    }
    Ok(out)
}

/// `ControlRecordType` in the key (version i16, type i16: ABORT 0, COMMIT 1) and the coordinator epoch
/// in `EndTransactionMarker`'s value (version i16, epoch i32).
fn control_marker(
    tp: &TopicPartition,
    offset: Offset,
    r: &kafka_protocol::records::Record,
) -> Result<EndTxnMarker, String> {
    let bad = || format!("{tp}: control record at {offset} is not a COMMIT/ABORT marker");
    let mut key = r.key.clone().ok_or_else(bad)?;
    let mut value = r.value.clone().ok_or_else(bad)?;
    if key.len() < 4 || value.len() < 6 {
        return Err(bad());
    }
    let _version = key.get_i16();
    let result = match key.get_i16() {
        0 => TransactionResult::Abort,
        1 => TransactionResult::Commit,
        _ => return Err(bad()),
    };
    let _version = value.get_i16();
    Ok(EndTxnMarker { result, coordinator_epoch: value.get_i32() })
}
