//! The engine behind Kafka's wire protocol: `txnsim serve`, a cluster of 1 to 5 brokers (each on its
//! own port) that real Kafka clients talk to over loopback. Codecs are the `kafka-protocol` crate's (Kafka 4.1 schemas); `driver` is the
//! sans-io translation between requests and engine messages, `server` owns the sockets and the clock. `apache_kafka` runs the real
//! Kafka 4.3.1 beside it, for the tests that hold the two against each other.

pub mod apache_kafka;
pub mod api;
pub mod driver;
pub mod frame;
pub mod records;
/// `sweep --target`: the workload against a remote cluster (named apart from cargo's `target/`).
pub mod remote;
pub mod server;
pub mod timeline;

pub use driver::{Driver, Output};
pub use server::{run_serve, ServeArgs};
