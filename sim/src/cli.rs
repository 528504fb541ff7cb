//! `txnsim sweep` and `txnsim replay`.

use clap::Args;
use std::process::ExitCode;

#[derive(Args, Debug, Clone)]
pub struct SweepArgs {}

#[derive(Args, Debug, Clone)]
pub struct ReplayArgs {}

pub fn run_sweep(_args: &SweepArgs) -> ExitCode {
    eprintln!("error: txnsim sweep is not built yet (issue 5)");
    ExitCode::from(2)
}

pub fn run_replay(_args: &ReplayArgs) -> ExitCode {
    eprintln!("error: txnsim replay is not built yet (issue 5)");
    ExitCode::from(2)
}

/// The default sweep the main job (`txnsim run`) runs: `Ok(report lines)` if no seed failed.
pub fn main_job() -> Result<Vec<String>, Vec<String>> {
    Err(vec!["sweep: not built yet (issue 5)".to_string()])
}
