//! txnsim's engine: Kafka's transaction machinery, sans-io and deterministic.
//!
//! Nodes (`Broker`, `Producer`, `Consumer`) take a message or timer and `now_ms` and return `Effects`; they
//! never read a clock, draw randomness or do I/O. The stateright model, the madsim harness, the proptests
//! and the scenario runner all drive this same code. Names follow Kafka's classes (`ProducerStateManager`,
//! `TransactionMetadata`, `AbortedTxn`, ...) so a reader of Kafka's source finds its rules here.

pub mod broker;
pub mod cluster;
pub mod config;
pub mod consumer;
pub mod controller;
pub mod coordinator;
pub mod error;
pub mod forwarding_manager;
pub mod group_coordinator;
pub mod leader_epoch_cache;
pub mod log;
pub mod metadata;
pub mod metadata_cache;
pub mod mutation;
pub mod network_client;
pub mod producer;
pub mod producer_state;
pub mod proposal;
pub mod protocol;
pub mod record;
pub mod rename;
pub mod replica_manager;
pub mod topic;
pub mod types;

pub use broker::Broker;
pub use cluster::Cluster;
pub use config::EngineConfig;
pub use consumer::{filter_fetch, read_to_end, Consumer, ConsumerRecord, FetchedRecords};
pub use controller::{Controller, Topology};
pub use error::KafkaError;
pub use log::{AbortedTxn, PartitionLog};
pub use mutation::{Mutation, Mutations};
pub use producer::{Producer, ProducerKind, TxnManagerState};
pub use proposal::Proposal;
pub use protocol::{AbortedTransaction, FetchPartitionData};
pub use rename::{Names, Rename};
pub use types::*;
