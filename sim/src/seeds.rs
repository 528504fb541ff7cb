//! The seed corpus: `seeds/*.toml`, each `{seed, profile, mutation, note}` (plus the invariant it
//! caught). A seed must pass on the engine and, when it names a mutation, still fail with it on; a seed
//! that no longer reaches its bug is stale.

use crate::profile::Profile;
use crate::run::{run_seed, RunReport, RunSpec};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use txnsim_engine::{Mutation, Proposal};

/// A seed file's fields: `seed`, `profile` and `note`, and optionally `mutation`, `proposal` and
/// `invariant`; any other key is refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedFile {
    pub seed: u64,
    pub profile: String,
    /// The mutation this seed catches; absent for a plain regression seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mutation: Option<String>,
    /// The fix Kafka has not made that the seed ran with (`--proposal`); absent for Kafka's behaviour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposal: Option<String>,
    pub note: String,
    /// The invariant it violated when found; with the mutation on, a run must still violate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invariant: Option<String>,
}

impl SeedFile {
    pub fn profile(&self) -> Result<Profile, String> {
        Profile::from_name(&self.profile)
            .ok_or_else(|| format!("unknown profile '{}' (known: {})", self.profile, Profile::names()))
    }

    pub fn mutation(&self) -> Result<Option<Mutation>, String> {
        match &self.mutation {
            None => Ok(None),
            Some(m) => Mutation::from_name(m).map(Some).ok_or_else(|| format!("unknown mutation '{m}'")),
        }
    }

    pub fn proposal(&self) -> Result<Option<Proposal>, String> {
        match &self.proposal {
            None => Ok(None),
            Some(p) => Proposal::from_name(p).map(Some).ok_or_else(|| format!("unknown proposal '{p}'")),
        }
    }

    /// The invariant it names, if it names one the catalogue has.
    fn check_invariant(&self) -> Result<(), String> {
        match &self.invariant {
            Some(name) if txnsim_properties::Invariant::from_name(name).is_none() => {
                Err(format!("unknown invariant '{name}' (`txnsim invariants` lists them)"))
            }
            _ => Ok(()),
        }
    }

    /// The run this file replays (its mutation on).
    pub fn run_spec(&self) -> Result<RunSpec, String> {
        Ok(RunSpec { proposal: self.proposal()?, ..RunSpec::new(self.seed, self.profile()?, self.mutation()?) })
    }
}

/// Every `*.toml` directly under `dir`, sorted by file name.
pub fn load_dir(dir: &Path) -> Result<Vec<(PathBuf, SeedFile)>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    paths.sort();
    paths.into_iter().map(|p| load_file(&p).map(|seed| (p, seed))).collect()
}

/// One seed file, checked: its profile and mutation name things that exist.
pub fn load_file(path: &Path) -> Result<SeedFile, String> {
    let text =
        crate::files::read_capped(path, crate::files::INPUT_CAP).map_err(|e| format!("{}: {e}", path.display()))?;
    // toml's message spans lines (it quotes the input); the first line names the problem.
    let seed: SeedFile = toml::from_str(&text).map_err(|e| {
        let msg = e.message().lines().next().unwrap_or("invalid").to_string();
        format!(
            "{}: not a seed file: {msg} (a seed file has seed, profile and note, and may have mutation, proposal \
             and invariant)",
            path.display()
        )
    })?;
    seed.run_spec().map_err(|e| format!("{}: {e}", path.display()))?;
    seed.check_invariant().map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(seed)
}

/// Writes a failing run as a seed file; returns its path.
pub fn save(dir: &Path, report: &RunReport) -> Result<PathBuf, String> {
    let first = report.found.first().ok_or("a passing run is not a seed")?;
    let seed = SeedFile {
        seed: report.seed,
        profile: report.profile.clone(),
        mutation: report.mutation.clone(),
        proposal: report.proposal.clone(),
        note: format!("{}: {}", first.invariant, first.witness),
        invariant: Some(first.invariant.clone()),
    };
    let proposal = report.proposal.as_ref().map(|p| format!("+{p}")).unwrap_or_default();
    let name =
        format!("{}{proposal}-{}-{}.toml", report.mutation.as_deref().unwrap_or("engine"), report.profile, report.seed);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join(name);
    let text = toml::to_string(&seed).map_err(|e| e.to_string())?;
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// What replaying a seed file found: `Ok(())`, or why it is broken or stale.
pub fn check(seed: &SeedFile) -> Result<(), String> {
    let spec = seed.run_spec()?;
    let clean_spec = RunSpec { mutation: None, ..spec.clone() };
    let clean = run_seed(&clean_spec);
    if !clean.passed() {
        let f = &clean.found[0];
        return Err(format!(
            "fails on the engine without a mutation: {}: {} (replay: {})",
            f.invariant,
            f.witness,
            clean_spec.replay_command()
        ));
    }
    let Some(m) = spec.mutation else { return Ok(()) };
    let mutated = run_seed(&spec);
    if mutated.passed() {
        return Err(format!(
            "stale: no longer reaches its bug with mutation {} (replay: {})",
            m.name(),
            spec.replay_command()
        ));
    }
    if let Some(inv) = &seed.invariant {
        if !mutated.found.iter().any(|f| &f.invariant == inv) {
            let got: Vec<&str> = mutated.found.iter().map(|f| f.invariant.as_str()).collect();
            return Err(format!(
                "stale: with mutation {} it now violates [{}], not {inv} (replay: {})",
                m.name(),
                got.join(", "),
                spec.replay_command()
            ));
        }
    }
    Ok(())
}
