//! Exactly-once processing (KIP-98's consume-transform-produce loop, KIP-447's group fencing): processors
//! read an input topic at read_committed, write each input's output and commit their input offsets in the
//! same transaction. Judged at the end of a run on the final logs and the group's committed offsets (what
//! OffsetFetch answers): every input below the committed offset has exactly one committed output
//! (`exactly-once-output`), and every committed output is of an input that is committed data below it
//! (`output-of-consumed-input`). Kafka's EOS system test checks the same after its bounces
//! (`tests/kafkatest/tests/core/transactions_test.py`: the output holds every input exactly once).
//!
//! An output's value is its input's value through `client::transform`, then `@` and the attempt (the
//! processor instance and its transaction) that wrote it: the payload is a function of the input, the tag
//! says which transaction wrote each copy, so a retried attempt's records are never the same value twice.

use crate::catalogue::{Invariant, Violation};
use crate::client::transform;
use crate::log_facts::LogFacts;
use crate::state::Logs;
use std::collections::BTreeMap;
use txnsim_engine::{KafkaError, Offset, TopicPartition};

/// Errors that tell a processor it is a zombie: its generation, its member id or its producer epoch is
/// stale (KIP-447's group fencing, KIP-98's producer fencing).
pub const FENCING: [KafkaError; 4] = [
    KafkaError::IllegalGeneration,
    KafkaError::UnknownMemberId,
    KafkaError::ProducerFenced,
    KafkaError::InvalidProducerEpoch,
];

/// Whether the error a history names (`KafkaError::name`) is one of `FENCING`.
pub fn is_fencing(error: &str) -> bool {
    FENCING.iter().any(|f| f.name() == error)
}

/// The value a processor writes for `input` in the transaction named `attempt` (`w0.3`: processor w0's
/// third transaction).
pub fn output_value(input: &str, attempt: &str) -> String {
    format!("{}@{attempt}", transform(input))
}

/// The input value and attempt an output value was written for; `None` for a value no processor wrote.
pub fn input_of(output: &str) -> Option<(&str, &str)> {
    let (payload, attempt) = output.rsplit_once('@')?;
    Some((payload.strip_suffix('\'')?, attempt))
}

/// What the loop read and wrote, and where its group's offsets stand.
pub struct EosView<'a> {
    pub logs: &'a dyn Logs,
    pub input_topic: &'a str,
    pub output_topic: &'a str,
    /// The group's committed offset per input partition (OffsetFetch's answer; absent: none committed).
    pub committed: &'a BTreeMap<TopicPartition, i64>,
}

/// A committed output: where it is and which attempt wrote it.
struct Output {
    at: (TopicPartition, Offset),
    attempt: String,
}

/// Both invariants over the final logs; each witness names the input, its offset, the group's offset and
/// every committed copy of its output. An input value stored more than once (a plain producer's resent
/// batch, which Kafka may append twice) is an input per copy: it is owed one output per copy below the
/// group's offset.
pub fn check_exactly_once(view: &EosView<'_>) -> Vec<Violation> {
    let mut outputs: BTreeMap<String, Vec<Output>> = BTreeMap::new();
    let mut inputs: BTreeMap<String, Vec<(TopicPartition, Offset)>> = BTreeMap::new();
    for (tp, log) in view.logs.logs() {
        let facts = LogFacts::of(log);
        let committed = facts.values.iter().filter(|(o, _)| facts.is_committed_data(**o));
        if tp.topic == view.input_topic {
            for (o, v) in committed {
                inputs.entry(v.clone()).or_default().push((tp.clone(), *o));
            }
        } else if tp.topic == view.output_topic {
            for (o, v) in committed {
                let Some((input, attempt)) = input_of(v) else { continue };
                let output = Output { at: (tp.clone(), *o), attempt: attempt.to_string() };
                outputs.entry(input.to_string()).or_default().push(output);
            }
        }
    }
    let mut out = Vec::new();
    let offset_of = |tp: &TopicPartition| view.committed.get(tp).copied().unwrap_or(-1);
    for (value, copies) in &inputs {
        let below: Vec<&(TopicPartition, Offset)> =
            copies.iter().filter(|(tp, o)| (*o as i64) < offset_of(tp)).collect();
        let written = outputs.get(value).map_or(&[][..], Vec::as_slice);
        if written.len() == below.len() {
            continue;
        }
        let at = |(tp, o): &(TopicPartition, Offset)| format!("{tp}@{o} (group offset {})", offset_of(tp));
        let copies_text: Vec<String> = copies.iter().map(at).collect();
        let what = if written.is_empty() { "no committed output".to_string() } else { shown(written) };
        let (invariant, owed) = if written.len() > below.len() && below.len() < copies.len() {
            (Invariant::OutputOfConsumedInput, "at or past")
        } else {
            (Invariant::ExactlyOnceOutput, "below")
        };
        out.push(Violation::new(
            invariant,
            format!(
                "input {value:?} at {}: {} of its copies {owed} the group's committed offset, and it has {what}",
                copies_text.join(", "),
                if owed == "below" { below.len() } else { copies.len() - below.len() }
            ),
        ));
    }
    for (value, copies) in outputs.iter().filter(|(v, _)| !inputs.contains_key(*v)) {
        out.push(Violation::new(
            Invariant::OutputOfConsumedInput,
            format!("{} of input {value:?}, which is not committed data of {}", shown(copies), view.input_topic),
        ));
    }
    out
}

/// "1 committed output (out/0@4 by w0.3)".
fn shown(copies: &[Output]) -> String {
    let each: Vec<String> = copies.iter().map(|c| format!("{}@{} by {}", c.at.0, c.at.1, c.attempt)).collect();
    let noun = if copies.len() == 1 { "output" } else { "outputs" };
    format!("{} committed {noun} ({})", copies.len(), each.join(", "))
}
