//! The real-cluster side's translation of what a client reports into the history.

use txnsim_kafka::remote::exec::delivered_at;
use txnsim_properties::history::CallOutcome;

/// librdkafka reports a retry answered DUPLICATE_SEQUENCE_NUMBER as delivered at offset -1001
/// (`RD_KAFKA_OFFSET_INVALID`): that is an unknown outcome, not an acknowledgement at 2^64 - 1001.
#[test]
fn a_delivery_without_an_offset_is_unknown_not_an_acknowledgement() {
    assert_eq!(delivered_at(-1001), CallOutcome::Unknown, "RD_KAFKA_OFFSET_INVALID");
    assert_eq!(delivered_at(7), CallOutcome::Sent { first_offset: 7, last_offset: 7, duplicate: false });
}
