//! The stateright model: actors that run the engine's nodes over a nondeterministic network.
//! (Being built: see issue 4.)

pub mod cli;
