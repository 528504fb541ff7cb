//! `TransactionLog`: the format of `__transaction_state`'s record values.

use super::{DecisionCause, TransactionMetadata};
use crate::types::{Offset, ProducerEpoch, TopicPartition};
use serde::{Deserialize, Serialize};

/// One `__transaction_state` record value (`TransactionLog.valueToBytes`, as JSON). It also carries what
/// the checkers' decision ledger needs and Kafka's format has no field for: why a Prepare* was decided
/// and the epoch its data was written with, and where a Complete*'s markers were acknowledged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnLogValue {
    Metadata {
        /// As the transition leaves it, its history cut to that one transition.
        metadata: TransactionMetadata,
        decided: Option<(DecisionCause, ProducerEpoch)>,
        markers: Vec<(TopicPartition, Offset)>,
    },
    /// `removeExpiredTransactionalIds`: the id's tombstone.
    Tombstone { transactional_id: String },
}

impl TxnLogValue {
    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("a transaction log value serializes")
    }

    pub fn decode(value: &str) -> TxnLogValue {
        serde_json::from_str(value).expect("only the coordinator writes __transaction_state")
    }
}
