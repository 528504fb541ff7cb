//! The timeline's words for the engine's messages and the clients' calls: one line per message (its API,
//! direction and what it carries), the fields a trace event keeps, and what a call and its outcome read
//! as. The wire driver's timeline uses them too.

use serde_json::{json, Value};
use txnsim_engine::protocol::{Envelope, Message};
use txnsim_engine::{KafkaError, Offset, TopicPartition};
use txnsim_properties::{CallOutcome, ProducerCall};

pub fn describe(env: &Envelope) -> String {
    describe_with(env, &|_, _| None)
}

/// `describe`, with `marker(tp, offset)` naming the marker (COMMIT/ABORT) a WriteTxnMarkers answer wrote.
pub fn describe_with(env: &Envelope, marker: &dyn Fn(&TopicPartition, Offset) -> Option<&'static str>) -> String {
    let api = env.message.api_name();
    match &env.message {
        Message::InitProducerIdRequest { transactional_id, .. } => {
            format!("{api} req {}", transactional_id.as_deref().unwrap_or("(idempotent)"))
        }
        Message::InitProducerIdResponse { result } => match result {
            Ok(p) => format!("{api} resp pid {} epoch {}", p.producer_id, p.epoch),
            Err(e) => format!("{api} resp {e}"),
        },
        Message::AddPartitionsToTxnRequest { transactional_id, producer, partitions, verify_only, .. } => format!(
            "{api} req {transactional_id} pid {} e{} [{}]{}",
            producer.producer_id,
            producer.epoch,
            partitions.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(","),
            if *verify_only { " verify-only" } else { "" }
        ),
        Message::AddPartitionsToTxnResponse { result } | Message::AddOffsetsToTxnResponse { result } => {
            format!("{api} resp {}", unit_result(result))
        }
        Message::AddOffsetsToTxnRequest { transactional_id, producer, group_id } => {
            format!("{api} req {transactional_id} pid {} e{} group {group_id}", producer.producer_id, producer.epoch)
        }
        Message::ProduceRequest { partition, batch, .. } => {
            let who = batch
                .producer
                .map(|p| format!("pid {} e{} seq {}", p.producer_id, p.epoch, p.base_sequence))
                .unwrap_or_else(|| "no pid".into());
            format!(
                "{api} req {partition} {who}{} [{}]",
                if batch.is_transactional { " txn" } else { "" },
                batch.values.join(",")
            )
        }
        Message::ProduceResponse { partition, result } => match result {
            Ok(a) => format!(
                "{api} resp {partition} offsets {}..{}{}",
                a.first_offset,
                a.last_offset,
                if a.duplicate { " (duplicate)" } else { "" }
            ),
            Err(e) => format!("{api} resp {partition} {e}"),
        },
        Message::EndTxnRequest { transactional_id, producer, result, .. } => {
            format!("{api} req {transactional_id} {} pid {} e{}", result.name(), producer.producer_id, producer.epoch)
        }
        Message::EndTxnResponse { result } => match result {
            Ok(Some(p)) => format!("{api} resp ok (now pid {} e{})", p.producer_id, p.epoch),
            Ok(None) => format!("{api} resp ok"),
            Err(e) => format!("{api} resp {e}"),
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
            format!("{api} req {}", parts.join("; "))
        }
        Message::TxnLogAppendRequest { transactional_id } => format!("{api} {transactional_id}"),
        Message::TxnLogAppendResponse { transactional_id, result } => match result {
            Ok(()) => format!("{api} {transactional_id} written"),
            Err(e) => format!("{api} {transactional_id} {e}"),
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
            format!("{api} resp {}", parts.join("; "))
        }
        Message::FetchRequest { partition, fetch_offset, isolation, .. } => {
            let reader = isolation.map(|i| i.name()).unwrap_or("replica");
            format!("{api} req {partition} from offset {fetch_offset} {reader}")
        }
        Message::FetchResponse { partition, fetch_offset, result } => match result {
            Ok(d) => format!("{api} resp {partition} from offset {fetch_offset}: {} batches", d.batches.len()),
            Err(e) => format!("{api} resp {partition} from offset {fetch_offset}: {e}"),
        },
        Message::ReplicaFetchRequest { partitions } => {
            let parts: Vec<String> =
                partitions.iter().map(|p| format!("{} from offset {}", p.partition, p.fetch_offset)).collect();
            format!("{api} req replica {}", parts.join(", "))
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
            format!("{api} resp replica {}", parts.join(", "))
        }
        Message::ListOffsetsRequest { partition, isolation } => format!("{api} req {partition} {}", isolation.name()),
        Message::ListOffsetsResponse { partition, result } => match result {
            Ok(o) => format!("{api} resp {partition} offset {o}"),
            Err(e) => format!("{api} resp {partition} {e}"),
        },
        Message::Metadata(m) => m.to_string(),
        Message::Group(m) => m.to_string(),
    }
}

/// What a trace event says about a message: its API, direction and the two ends.
pub fn message_fields(env: &Envelope) -> Value {
    let direction = if is_request(&env.message) { "request" } else { "response" };
    json!({"api": env.message.api_name(), "direction": direction, "from": env.from.to_string(), "to": env.to.to_string()})
}

fn is_request(m: &Message) -> bool {
    matches!(
        m,
        Message::InitProducerIdRequest { .. }
            | Message::AddPartitionsToTxnRequest { .. }
            | Message::ProduceRequest { .. }
            | Message::EndTxnRequest { .. }
            | Message::WriteTxnMarkersRequest { .. }
            | Message::FetchRequest { .. }
            | Message::ListOffsetsRequest { .. }
    )
}

fn unit_result(r: &Result<(), KafkaError>) -> String {
    match r {
        Ok(()) => "ok".into(),
        Err(e) => e.name().into(),
    }
}

pub fn show_call(call: &ProducerCall) -> String {
    match call {
        ProducerCall::Init => "init".into(),
        ProducerCall::Begin => "begin".into(),
        ProducerCall::Send { partition, values } => format!("send {partition} [{}]", values.join(",")),
        ProducerCall::Commit => "commit".into(),
        ProducerCall::Abort => "abort".into(),
    }
}

pub fn show_outcome(o: &CallOutcome) -> String {
    match o {
        CallOutcome::Ok => "ok".into(),
        CallOutcome::Sent { first_offset, last_offset, duplicate } => {
            format!("sent at offsets {first_offset}..{last_offset}{}", if *duplicate { " (duplicate)" } else { "" })
        }
        CallOutcome::Failed { error } => format!("failed {error}"),
        CallOutcome::Unknown => "unknown".into(),
    }
}
