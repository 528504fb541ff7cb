//! `txnsim check` and `txnsim explore`.

use clap::Args;
use std::process::ExitCode;

#[derive(Args, Debug, Clone)]
pub struct CheckArgs {}

#[derive(Args, Debug, Clone)]
pub struct ExploreArgs {}

pub fn run_check(_args: &CheckArgs) -> ExitCode {
    eprintln!("error: txnsim check is not built yet (issue 4)");
    ExitCode::from(2)
}

pub fn run_explore(_args: &ExploreArgs) -> ExitCode {
    eprintln!("error: txnsim explore is not built yet (issue 4)");
    ExitCode::from(2)
}

/// The small model check the main job (`txnsim run`) runs: `Ok(report lines)` if every property held.
pub fn main_job() -> Result<Vec<String>, Vec<String>> {
    Err(vec!["model check: not built yet (issue 4)".to_string()])
}
