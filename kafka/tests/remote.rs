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
