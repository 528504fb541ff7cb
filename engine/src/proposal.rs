//! Departures from Kafka 4.3 made on purpose, to try a fix Kafka has not made: the opposite of a
//! `Mutation`, which restores a bug Kafka fixed. Off by default; a sweep with one on shows whether the
//! failures it was meant to remove are gone, and what it costs.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Proposal {
    LoadWaitsForHw,
}

impl Proposal {
    pub const ALL: [Proposal; 1] = [Proposal::LoadWaitsForHw];

    /// The kebab-case name used on the command line and in seed files.
    pub fn name(self) -> &'static str {
        match self {
            Proposal::LoadWaitsForHw => "load-waits-for-hw",
        }
    }

    pub fn from_name(name: &str) -> Option<Proposal> {
        Proposal::ALL.into_iter().find(|p| p.name() == name)
    }

    /// What the engine does instead of Kafka, and why, in one line.
    pub fn mechanism(self) -> &'static str {
        match self {
            Proposal::LoadWaitsForHw => {
                "a new transaction coordinator stays COORDINATOR_LOAD_IN_PROGRESS until __transaction_state's HW reaches \
                 its log end, so it never acts on a record a clean election may lose (Kafka 4.3's \
                 TransactionStateManager loads to FetchIsolation.LOG_END; the group coordinator runtime holds loaded \
                 state back until the HW passes it, CoordinatorLoaderImpl, KAFKA-15910)"
            }
        }
    }
}
