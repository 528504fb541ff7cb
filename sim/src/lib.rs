//! The madsim harness: seeded workloads, faults, history checking and seed replay.
//! (Being built: see issue 5.)

#[cfg(not(madsim))]
compile_error!("build with --cfg madsim (see .cargo/config.toml); a RUSTFLAGS variable replaces it");

pub mod cli;
