//! txnsim: deterministic simulation and model checking of Kafka's transactional read isolation.
//! This crate holds the command line and the scenario layer; the machinery is in `txnsim-engine`.

pub mod conform;
pub mod html;
pub mod report;
pub mod scenario;
