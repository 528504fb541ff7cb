//! The madsim harness: engine nodes as simulated hosts on madsim's network, a seeded workload with a
//! swarm of faults, the `properties` invariants checked during and after each run, seed sweeps and
//! seed replay (issue 5).
//!
//! - `profile`: workload profiles and the fault mix each seed draws.
//! - `world`: the shared state each madsim task steps: engine nodes, history, trace; in layers (its
//!   `nodes`, `network`, `replicas`, `checks`, `controller` and `clients`).
//! - `workload`: the transaction plan the sim's producers and `sweep --target` draw alike.
//! - `describe`: the timeline's words for the clients' calls (a message's are the engine's `Display`).
//! - `run`: one seed on its own runtime and thread: hosts, workload, faults, healing, checks.
//! - `sweep`: many seeds, in parallel jobs, with a summary.
//! - `trace`: the replay timeline's events, legend and text rendering.
//! - `seeds`: the `seeds/*.toml` regression corpus.
//! - `cli`: `txnsim sweep` and `txnsim replay`.
//! - `files`: reading a user's files with a size cap.

#[cfg(not(madsim))]
compile_error!("build with --cfg madsim (see .cargo/config.toml); a RUSTFLAGS variable replaces it");

pub mod cli;
pub mod describe;
pub mod files;
pub mod profile;
pub mod rng;
pub mod run;
pub mod seeds;
pub mod sweep;
pub mod trace;
pub mod workload;
pub mod world;

pub use profile::Profile;
pub use run::{run_seed, RunReport, RunSpec};
