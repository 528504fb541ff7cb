//! The exactly-once checker's rules on logs written by hand (an in-process broker, a plain producer): one
//! committed output per input below the group's committed offset, none for inputs past it or never
//! committed, and one per copy of an input stored twice.

use std::collections::BTreeMap;
use txnsim_engine::producer::OpOutput;
use txnsim_engine::{Cluster, EngineConfig, ProducerKind, TopicPartition};
use txnsim_properties::exactly_once::output_value;
use txnsim_properties::{check_exactly_once, EosView, Invariant};

fn tp(topic: &str) -> TopicPartition {
    TopicPartition::new(topic, 0)
}

/// `in/0` holds `inputs` and `out/0` holds `outputs`, all plain (committed) records.
fn cluster(inputs: &[&str], outputs: &[String]) -> Cluster {
    let topics: BTreeMap<String, u32> = [("in".to_string(), 1), ("out".to_string(), 1)].into_iter().collect();
    let mut c = Cluster::new(&topics, EngineConfig::default());
    c.add_producer("n", ProducerKind::Plain);
    for (topic, values) in [("in", inputs.iter().map(|v| v.to_string()).collect::<Vec<_>>()), ("out", outputs.to_vec())]
    {
        if values.is_empty() {
            continue;
        }
        let r = c.call_producer("n", |p, now| p.send(now, tp(topic), values.clone()));
        assert!(matches!(r, Ok(Some(OpOutput::Sent { .. }))), "the {topic} records are written: {r:?}");
    }
    c
}

/// The invariants that fire, with the group's committed offset of `in/0` at `offset`.
fn verdict(c: &Cluster, offset: i64) -> Vec<Invariant> {
    let committed = BTreeMap::from([(tp("in"), offset)]);
    let view =
        EosView { logs: &c.broker.replica_manager.logs, input_topic: "in", output_topic: "out", committed: &committed };
    check_exactly_once(&view).into_iter().map(|v| v.invariant).collect()
}

fn out(input: &str, attempt: &str) -> String {
    output_value(input, attempt)
}

#[test]
fn one_output_per_input_below_the_offset_holds() {
    let c = cluster(&["a", "b", "c"], &[out("a", "w0.1"), out("b", "w1.1")]);
    assert_eq!(verdict(&c, 2), vec![], "a and b below offset 2 each have one output; c past it has none");
}

#[test]
fn an_input_below_the_offset_without_output_is_lost() {
    let c = cluster(&["a", "b"], &[out("a", "w0.1")]);
    assert_eq!(verdict(&c, 2), vec![Invariant::ExactlyOnceOutput], "b is below offset 2 with no output");
}

#[test]
fn an_input_written_twice_is_a_duplicate() {
    let c = cluster(&["a"], &[out("a", "w0.1"), out("a", "w1.1")]);
    assert_eq!(verdict(&c, 1), vec![Invariant::ExactlyOnceOutput], "a has two committed outputs");
}

#[test]
fn an_output_of_an_input_past_the_offset_is_refused() {
    let c = cluster(&["a", "b"], &[out("a", "w0.1"), out("b", "w0.1")]);
    assert_eq!(verdict(&c, 1), vec![Invariant::OutputOfConsumedInput], "b is at offset 1, not below the offset 1");
}

#[test]
fn an_output_of_an_input_never_committed_is_refused() {
    let c = cluster(&["a"], &[out("a", "w0.1"), out("z", "w0.1")]);
    assert_eq!(verdict(&c, 1), vec![Invariant::OutputOfConsumedInput], "z is no input at all");
}

#[test]
fn an_input_stored_twice_is_owed_an_output_per_copy() {
    let c = cluster(&["a", "a"], &[out("a", "w0.1"), out("a", "w0.1")]);
    assert_eq!(verdict(&c, 2), vec![], "two copies below the offset, two outputs");
    let c = cluster(&["a", "a"], &[out("a", "w0.1")]);
    assert_eq!(verdict(&c, 2), vec![Invariant::ExactlyOnceOutput], "two copies below the offset, one output");
    let c = cluster(&["a", "a"], &[out("a", "w0.1"), out("a", "w0.2")]);
    assert_eq!(verdict(&c, 1), vec![Invariant::OutputOfConsumedInput], "one copy past the offset has an output");
}
