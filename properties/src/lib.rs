//! txnsim's oracle: the one catalogue of invariants (`catalogue`), their checks over cluster snapshots
//! (`state`), over client histories (`history`, `intent`) and after healing (`liveness`), and a deliberately tiny
//! reference model of what each reader must deliver (`reference`), and the replicas held against their
//! leader (`replicas`), transactional offsets against the offsets log (`group_offsets`), and timer-driven
//! actions against their Kafka timers (`timers`); and the one interpreter of client ops the scenario runner
//! and the proptests share (`client`).

pub mod catalogue;
pub mod client;
pub mod exactly_once;
pub mod group_offsets;
pub mod history;
pub mod intent;
pub mod liveness;
pub mod log_facts;
pub mod reference;
pub mod replicas;
pub mod state;
pub mod timers;

pub use catalogue::{Invariant, Kind, Violation};
pub use exactly_once::{check_exactly_once, EosView};
pub use group_offsets::check_group_offsets;
pub use history::{
    check_history, check_history_exempting, check_read_superset, CallOutcome, Event, History, LeaderHighWatermark,
    ProducerCall,
};
pub use intent::{check_committed_sends, check_failed_sends, intent_claimed};
pub use liveness::check_liveness;
pub use log_facts::LogFacts;
pub use reference::ReferenceModel;
pub use replicas::{acked_writes, check_acked_writes, check_replicas, standing_leader, AckedWrite};
pub use state::{check_state, ClusterView, Logs, MonotonicityChecker, StateChecker};
pub use timers::{check_delivery_timeouts, check_timers, Pause};
