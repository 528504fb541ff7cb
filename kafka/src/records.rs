//! Record batches between the wire and the engine. The engine stores what transactional reads depend on
//! (offsets, producer id, epoch, sequence, the transactional and control flags, the value as text); the
//! driver keeps what the engine does not model (key, value bytes, headers, timestamp) per (partition,
//! offset), so a fetch returns what was produced. Codecs are kafka-protocol's `records` module, with its
//! four compression codecs: a batch keeps the producer's codec in the engine and goes back out in it.

use bytes::{BufMut, Bytes, BytesMut};
use indexmap::IndexMap;
use kafka_protocol::messages::EndTxnMarker as WireEndTxnMarker;
use kafka_protocol::protocol::{Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, NO_TIMESTAMP,
};
use std::collections::BTreeMap;
use txnsim_engine::record::{increment_sequence, BatchBody, BatchProducer, CompressionType, ProduceBatch, RecordBatch};
use txnsim_engine::{Offset, TopicPartition, TransactionResult};

/// What the engine does not keep of a produced record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredRecord {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: IndexMap<StrBytes, Option<Bytes>>,
    pub timestamp: i64,
}

/// One produced batch, split into what the engine appends and what the driver stores beside it.
#[derive(Clone, Debug)]
pub struct DecodedBatch {
    pub batch: ProduceBatch,
    pub stored: Vec<StoredRecord>,
}

/// Why a Produce partition's records were refused before reaching the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordsError {
    Corrupt,
    /// zstd in a Produce request below v7 (KIP-110); every codec is decoded otherwise.
    UnsupportedCompression,
    /// A client may not write control batches (`INVALID_RECORD`, `LogValidator`).
    ControlFromClient,
}

/// The engine's name for a wire batch's codec (attributes bits 0-2, `CompressionType` ids 0-4).
pub fn engine_compression(c: Compression) -> CompressionType {
    match c {
        Compression::None => CompressionType::None,
        Compression::Gzip => CompressionType::Gzip,
        Compression::Snappy => CompressionType::Snappy,
        Compression::Lz4 => CompressionType::Lz4,
        Compression::Zstd => CompressionType::Zstd,
    }
}

fn wire_compression(c: CompressionType) -> Compression {
    match c {
        CompressionType::None => Compression::None,
        CompressionType::Gzip => Compression::Gzip,
        CompressionType::Snappy => Compression::Snappy,
        CompressionType::Lz4 => Compression::Lz4,
        CompressionType::Zstd => Compression::Zstd,
    }
}

/// Decodes a Produce partition's record bytes (magic v2 only, any codec), one `DecodedBatch` per batch;
/// `version` is the Produce request's.
pub fn decode_produce(records: &Bytes, version: i16) -> Result<Vec<DecodedBatch>, RecordsError> {
    let mut buf = records.clone();
    let infos = RecordBatchDecoder::decode_batch_info(&mut buf.clone()).map_err(|_| RecordsError::Corrupt)?;
    // `ProduceRequest.validateRecords` (KIP-110): zstd needs Produce v7 or later.
    if version < 7 && infos.iter().any(|i| i.compression == Compression::Zstd) {
        return Err(RecordsError::UnsupportedCompression);
    }
    if infos.iter().any(|i| i.control) {
        return Err(RecordsError::ControlFromClient);
    }
    let mut out = Vec::new();
    while !buf.is_empty() {
        let set = RecordBatchDecoder::decode(&mut buf).map_err(|_| RecordsError::Corrupt)?;
        let Some(first) = set.records.first() else { continue };
        let producer = (first.producer_id != NO_PRODUCER_ID).then_some(BatchProducer {
            producer_id: first.producer_id,
            epoch: first.producer_epoch,
            base_sequence: first.sequence,
        });
        let values = set
            .records
            .iter()
            .map(|r| r.value.as_ref().map(|v| String::from_utf8_lossy(v).into_owned()).unwrap_or_default())
            .collect();
        let stored = set
            .records
            .iter()
            .map(|r| StoredRecord {
                key: r.key.clone(),
                value: r.value.clone(),
                headers: r.headers.clone(),
                timestamp: r.timestamp,
            })
            .collect();
        out.push(DecodedBatch {
            batch: ProduceBatch {
                producer,
                is_transactional: first.transactional,
                values,
                compression: engine_compression(set.compression),
            },
            stored,
        });
    }
    Ok(out)
}

/// `ControlRecordType`: ABORT is 0, COMMIT is 1, in a key of (version 0, type).
fn control_key(result: TransactionResult) -> Bytes {
    let mut key = BytesMut::with_capacity(4);
    key.put_i16(0);
    key.put_i16(match result {
        TransactionResult::Abort => 0,
        TransactionResult::Commit => 1,
    });
    key.freeze()
}

/// `EndTransactionMarker`'s value: a version prefix, then the generated `EndTxnMarker` v0.
fn control_value(coordinator_epoch: i32) -> Bytes {
    let mut marker = WireEndTxnMarker::default();
    marker.coordinator_epoch = coordinator_epoch;
    let mut value = BytesMut::new();
    value.put_i16(0);
    marker.encode(&mut value, 0).expect("EndTxnMarker v0 encodes");
    value.freeze()
}

/// Encodes engine batches for a Fetch response, each as its own wire batch in its own codec (Kafka returns
/// a batch as the log stores it), stopping once `max_bytes` is reached (the first batch always goes, as
/// Kafka returns at least one batch to make progress).
pub fn encode_fetch(
    tp: &TopicPartition,
    batches: &[RecordBatch],
    stored: &BTreeMap<(TopicPartition, Offset), StoredRecord>,
    max_bytes: usize,
) -> Bytes {
    let mut buf = BytesMut::new();
    for batch in batches {
        if !buf.is_empty() && buf.len() >= max_bytes {
            break;
        }
        let records = wire_records(tp, batch, stored);
        let options = RecordEncodeOptions { version: 2, compression: wire_compression(batch.compression) };
        RecordBatchEncoder::encode(&mut buf, &records, &options).expect("a v2 batch encodes in any codec");
    }
    buf.freeze()
}

fn wire_records(
    tp: &TopicPartition,
    batch: &RecordBatch,
    stored: &BTreeMap<(TopicPartition, Offset), StoredRecord>,
) -> Vec<Record> {
    let (producer_id, producer_epoch, base_sequence) = match batch.producer {
        Some(p) => (p.producer_id, p.epoch, p.base_sequence),
        None => (NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE),
    };
    let template = |offset: Offset, i: usize| Record {
        transactional: batch.is_transactional,
        control: batch.is_control(),
        delete_horizon: false,
        partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
        producer_id,
        producer_epoch,
        timestamp_type: TimestampType::Creation,
        offset: offset as i64,
        // The encoder derives the batch's base sequence from the first record and keeps records with
        // consecutive sequences in one batch; `NO_SEQUENCE` batches get -1, 0, 1, ... for the same effect.
        sequence: increment_sequence(base_sequence, i as i64),
        timestamp: NO_TIMESTAMP,
        key: None,
        value: None,
        headers: IndexMap::new(),
    };
    match &batch.body {
        BatchBody::Control(marker) => {
            let mut r = template(batch.base_offset, 0);
            if let Some(m) = marker {
                r.key = Some(control_key(m.result));
                r.value = Some(control_value(m.coordinator_epoch));
            }
            vec![r]
        }
        BatchBody::Data(records) => records
            .iter()
            .enumerate()
            .map(|(i, rec)| {
                let mut r = template(rec.offset, i);
                match stored.get(&(tp.clone(), rec.offset)) {
                    Some(s) => {
                        r.key = s.key.clone();
                        r.value = s.value.clone();
                        r.headers = s.headers.clone();
                        r.timestamp = s.timestamp;
                    }
                    None => r.value = Some(Bytes::from(rec.value.clone().into_bytes())),
                }
                r
            })
            .collect(),
    }
}
