//! The engine's messages in words, one line each: the API, its direction and what it carries (as
//! Kafka's `RequestChannel` request log names a request by its API and fields). The simulator's
//! timeline, the wire driver's and the model's counterexamples all print them so, and replays pin the
//! text byte for byte. `Envelope::short` is the step table's view: the API, direction and both ends.

use super::{Envelope, Message};
use crate::error::KafkaError;
use crate::types::{Offset, TopicPartition};
use std::fmt;

/// Names the marker (COMMIT/ABORT) a WriteTxnMarkers answer wrote at an offset: the answer carries only
/// the offset, the log that took the marker knows its kind.
pub type MarkerKind<'a> = &'a dyn Fn(&TopicPartition, Offset) -> Option<&'static str>;

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_message(self, f, &|_, _| None)
    }
}

/// A message as `Display` prints it, with each WriteTxnMarkers answer's marker named (`Message::with_markers`).
pub struct WithMarkers<'a> {
    message: &'a Message,
    marker: MarkerKind<'a>,
}

impl fmt::Display for WithMarkers<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_message(self.message, f, self.marker)
    }
}

/// `"EndTxn request p -> broker-0"`: the API, direction and both ends (`Envelope::short`).
pub struct Short<'a>(&'a Envelope);

impl fmt::Display for Short<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let env = self.0;
        let kind = if env.message.is_request() { "request" } else { "response" };
        write!(f, "{} {kind} {} -> {}", env.message.api_name(), env.from, env.to)
    }
}

impl Message {
    /// `Display`, with `marker(tp, offset)` naming the marker (COMMIT/ABORT) a WriteTxnMarkers answer wrote.
    pub fn with_markers<'a>(&'a self, marker: MarkerKind<'a>) -> WithMarkers<'a> {
        WithMarkers { message: self, marker }
    }
}

impl Envelope {
    /// One line per message for a step table: `"EndTxn request p -> broker-0"`.
    pub fn short(&self) -> Short<'_> {
        Short(self)
    }
}

fn write_message(m: &Message, f: &mut fmt::Formatter<'_>, marker: MarkerKind<'_>) -> fmt::Result {
    let api = m.api_name();
    match m {
        Message::InitProducerIdRequest { transactional_id, .. } => {
            write!(f, "{api} req {}", transactional_id.as_deref().unwrap_or("(idempotent)"))
        }
        Message::InitProducerIdResponse { result } => match result {
            Ok(p) => write!(f, "{api} resp pid {} epoch {}", p.producer_id, p.epoch),
            Err(e) => write!(f, "{api} resp {e}"),
        },
        Message::AddPartitionsToTxnRequest { transactional_id, producer, partitions, verify_only, .. } => write!(
            f,
            "{api} req {transactional_id} pid {} e{} [{}]{}",
            producer.producer_id,
            producer.epoch,
            partitions.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(","),
            if *verify_only { " verify-only" } else { "" }
        ),
        Message::AddPartitionsToTxnResponse { result } | Message::AddOffsetsToTxnResponse { result } => {
            write!(f, "{api} resp {}", unit_result(result))
        }
        Message::AddOffsetsToTxnRequest { transactional_id, producer, group_id } => {
            write!(f, "{api} req {transactional_id} pid {} e{} group {group_id}", producer.producer_id, producer.epoch)
        }
        Message::ProduceRequest { partition, batch, .. } => {
            let who = batch
                .producer
                .map(|p| format!("pid {} e{} seq {}", p.producer_id, p.epoch, p.base_sequence))
                .unwrap_or_else(|| "no pid".into());
            write!(
                f,
                "{api} req {partition} {who}{} [{}]",
                if batch.is_transactional { " txn" } else { "" },
                batch.values.join(",")
            )
        }
        Message::ProduceResponse { partition, result } => match result {
            Ok(a) => write!(
                f,
                "{api} resp {partition} offsets {}..{}{}",
                a.first_offset,
                a.last_offset,
                if a.duplicate { " (duplicate)" } else { "" }
            ),
            Err(e) => write!(f, "{api} resp {partition} {e}"),
        },
        Message::EndTxnRequest { transactional_id, producer, result, .. } => {
            write!(f, "{api} req {transactional_id} {} pid {} e{}", result.name(), producer.producer_id, producer.epoch)
        }
        Message::EndTxnResponse { result } => match result {
            Ok(Some(p)) => write!(f, "{api} resp ok (now pid {} e{})", p.producer_id, p.epoch),
            Ok(None) => write!(f, "{api} resp ok"),
            Err(e) => write!(f, "{api} resp {e}"),
        },
        Message::WriteTxnMarkersRequest { markers } => {
            let parts: Vec<String> = markers
                .iter()
                .map(|m| {
                    format!(
                        "{} pid {} e{} ce{} [{}]",
                        m.result.name(),
                        m.producer_id,
                        m.producer_epoch,
                        m.coordinator_epoch,
                        m.partitions.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(",")
                    )
                })
                .collect();
            write!(f, "{api} req {}", parts.join("; "))
        }
        Message::TxnLogAppendRequest { transactional_id } => write!(f, "{api} {transactional_id}"),
        Message::TxnLogAppendResponse { transactional_id, result } => match result {
            Ok(()) => write!(f, "{api} {transactional_id} written"),
            Err(e) => write!(f, "{api} {transactional_id} {e}"),
        },
        Message::WriteTxnMarkersResponse { results } => {
            let parts: Vec<String> = results
                .iter()
                .map(|(pid, tp, r)| match r {
                    Ok(o) => {
                        let kind = marker(tp, *o).map(|k| format!("{k} ")).unwrap_or_default();
                        format!("pid {pid} {tp} {kind}marker at offset {o}")
                    }
                    Err(e) => format!("pid {pid} {tp} {e}"),
                })
                .collect();
            write!(f, "{api} resp {}", parts.join("; "))
        }
        Message::FetchRequest { partition, fetch_offset, isolation, .. } => {
            let reader = isolation.map(|i| i.name()).unwrap_or("replica");
            write!(f, "{api} req {partition} from offset {fetch_offset} {reader}")
        }
        Message::FetchResponse { partition, fetch_offset, result } => match result {
            Ok(d) => write!(f, "{api} resp {partition} from offset {fetch_offset}: {} batches", d.batches.len()),
            Err(e) => write!(f, "{api} resp {partition} from offset {fetch_offset}: {e}"),
        },
        Message::ReplicaFetchRequest { partitions } => {
            let parts: Vec<String> =
                partitions.iter().map(|p| format!("{} from offset {}", p.partition, p.fetch_offset)).collect();
            write!(f, "{api} req replica {}", parts.join(", "))
        }
        Message::ReplicaFetchResponse { partitions } => {
            let parts: Vec<String> = partitions
                .iter()
                .map(|p| match &p.result {
                    Ok(r) => {
                        format!("{} from offset {}: {} batches", p.partition, p.fetch_offset, r.data.batches.len())
                    }
                    Err(e) => format!("{} from offset {}: {e}", p.partition, p.fetch_offset),
                })
                .collect();
            write!(f, "{api} resp replica {}", parts.join(", "))
        }
        Message::ListOffsetsRequest { partition, isolation } => write!(f, "{api} req {partition} {}", isolation.name()),
        Message::ListOffsetsResponse { partition, result } => match result {
            Ok(o) => write!(f, "{api} resp {partition} offset {o}"),
            Err(e) => write!(f, "{api} resp {partition} {e}"),
        },
        Message::Metadata(m) => write!(f, "{m}"),
        Message::Group(m) => write!(f, "{m}"),
    }
}

fn unit_result(r: &Result<(), KafkaError>) -> &'static str {
    match r {
        Ok(()) => "ok",
        Err(e) => e.name(),
    }
}
