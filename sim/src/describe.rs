//! The timeline's words for the clients' calls and their outcomes, and the fields a trace event keeps
//! of a message. A message's own line is the engine's (`Message`'s `Display`).

use serde_json::{json, Value};
use txnsim_engine::protocol::{Envelope, Message};
use txnsim_properties::{CallOutcome, ProducerCall};

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

pub fn show_call(call: &ProducerCall) -> String {
    match call {
        ProducerCall::Init => "init".into(),
        ProducerCall::Begin => "begin".into(),
        ProducerCall::Send { partition, values } => format!("send {partition} [{}]", values.join(",")),
        ProducerCall::Commit => "commit".into(),
        ProducerCall::Abort => "abort".into(),
        ProducerCall::SendOffsets { group, offsets } => {
            let offsets: Vec<String> = offsets.iter().map(|(tp, o)| format!("{tp}@{o}")).collect();
            format!("send_offsets {} gen {} [{}]", group.group_id, group.generation_id, offsets.join(","))
        }
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
