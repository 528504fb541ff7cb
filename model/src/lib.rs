//! txnsim's exhaustive model: a stateright `ActorModel` whose actors run the engine's sans-io nodes.
//!
//! Actors: one `Broker` (leader of every partition and host of the transaction coordinator) and one
//! actor per transactional `Producer`. The broker also hosts a read_committed and a read_uncommitted
//! reader (engine `Consumer`s assigned every partition from offset 0). Producers run a small script:
//! `initTransactions`, then per transaction an application choice of commit or abort, `beginTransaction`,
//! one `send` per record (record `r` to partition `r % partitions`, values `p0:1.0` = instance p0,
//! transaction 1, record 0), and the chosen end call. The network is stateright's unordered one (or
//! per-connection FIFO), lossy and/or duplicating as the `Bounds` say. Faults are budgeted per run: crashes (a broker restart keeps
//! durable state via `Broker::restart`; a producer crash starts a new instance with the same
//! transactional id, or with `Bounds::restart_producers` off leaves it down for good), lost messages, coordinator timeout aborts, client request timeouts and retry
//! backoffs, coordinator marker resends. Both transaction versions; any one `Mutation`.
//!
//! With `Bounds::brokers` above 1 (the `replicated` config) actor 0 is a cluster: broker 0 (the
//! coordinator's host and the partitions' first leader), the other brokers, each with a replica of every
//! partition, and the controller. Their messages to one another go from actor 0 to itself on the model's
//! network; a broker crash is down, then up (`ModelTimer::BrokerCrash`, `BrokerRestart`); readers read
//! the standing leader (`txnsim_properties::standing_leader`); the replica invariants become properties.
//!
//! With `Bounds::processors` (the `eos` config) actors after the producers are processors
//! (`processor`): the consume-transform-produce loop, each a consumer group member and a transactional
//! producer, reading the producers' topic and writing `out`. The group coordinator's join deadlines and a
//! budgeted session expiry are the broker's model timers; the group and exactly-once invariants become
//! properties.
//!
//! Properties (`verdict`, `model`) come from `txnsim_properties` only: one `always` property per
//! `Invariant` (state invariants over the broker, history invariants over the producers' sends and the
//! readers' polls, the read_uncommitted-superset check over fresh reads, liveness invariants at
//! quiescent states), `sometimes` properties for reachability facts (`Fact`), and `engine-assertions`:
//! an engine `assert!` that fails becomes a counterexample instead of a crashed checker.
//!
//! With `Bounds::reduced` (the standard config), `reductions` prunes further: timeouts fire only for
//! lost requests, and readers poll a partition only right after the broker changed it. With `Bounds::por`
//! (the standard config; FIFO connections only) a partial-order reduction by stubborn sets lets a
//! producer with an answer waiting step before anyone else; `tests/model/por.rs` checks it keeps the terminal
//! states, violations and facts of the graph it reduces.
//!
//! Reductions always on, each sound for what the properties observe:
//! - time never advances (`now_ms = 0`); every timer may fire at any moment the checker chooses;
//! - the readers' fetches are served atomically (a lost fetch is a poll not made, a late answer an
//!   earlier poll), both readers poll a partition together, and a poll that changes nothing is no step;
//! - the engine consumer is rebuilt from its positions after each poll, so request counters do not make
//!   every poll a new state; repeated empty polls are recorded once;
//! - the application's commit-or-abort choice is made before the transaction's sends (the engine holds
//!   EndTxn until the sends are answered, so a later call is a delay the network already models);
//! - the coordinator's periodic timeout scan is a timer per Ongoing transactional id (`TxnTimeout`);
//! - the coordinator's `__transaction_state` append (`TxnLogAppend`, a message the coordinator sends
//!   itself) completes in the step that asks for it: every other step sees the transition either not yet
//!   made or written, never pending. The pending window (CONCURRENT_TRANSACTIONS meanwhile) is explored
//!   by the `network` scenarios, which hold and release the append.
//!
//! With `Bounds::symmetry` (the standard config) states that differ only by a permutation of the
//! producers (slots, names, record values) count once (`symmetry`).
//!
//! `eventually` properties are not used: the model has cycles (idle polls, retries), where stateright's
//! `eventually` is unsound; liveness is judged as `always` at quiescent states instead.

pub mod actors;
pub mod bounds;
pub mod cli;
pub mod counterexample;
pub mod describe;
pub mod model;
pub mod reductions;
pub mod shared;
pub mod state;
pub mod symmetry;
pub mod verdict;

pub use bounds::Bounds;
pub use model::{build, TxnModel};
pub use state::{TxnAction, TxnState};
pub use verdict::{evaluate, Evaluation, Fact};
