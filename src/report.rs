//! Machine-readable reports (`--json`) of the scenario runner and the two catalogues, and the progress
//! bar of long runs. Each report carries a `format` version and is described by a JSON Schema under
//! `schemas/`; docs/exit-codes-and-json.md lists them with the exit codes.

use crate::scenario::{RunReport, Scenario};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};
use std::process::ExitCode;
use txnsim_engine::Mutation;
use txnsim_properties::{Invariant, Kind};

pub const SCENARIO_FORMAT: &str = "txnsim-scenario-report/v1";
pub const INVARIANTS_FORMAT: &str = "txnsim-invariants/v1";
pub const MUTATIONS_FORMAT: &str = "txnsim-mutations/v1";

/// Prints one report as pretty JSON on stdout; the listing commands exit 0.
pub fn print_json(report: &Value) -> ExitCode {
    println!("{report:#}");
    ExitCode::SUCCESS
}

/// A bar over `total` units on stderr; indicatif hides it when stderr is not a terminal, so pipes and
/// test captures see only the report.
pub fn progress_bar(total: u64, unit: &str) -> ProgressBar {
    let bar = ProgressBar::new(total);
    let template = format!("{{bar:40}} {{pos}}/{{len}} {unit} ({{per_sec}}, {{eta}} left)");
    bar.set_style(ProgressStyle::with_template(&template).expect("a constant template parses"));
    bar
}

/// `txnsim scenario --json`: every scenario's verdict and first difference.
pub fn scenarios(scenarios: &[Scenario], runs: &[RunReport], mutation: Option<Mutation>, show: bool) -> Value {
    let entries: Vec<Value> = scenarios
        .iter()
        .zip(runs)
        .map(|(sc, run)| {
            let mut entry = json!({
                "name": sc.name,
                "file": sc.file,
                "layer": sc.layer.name(),
                "source": sc.source,
                "transaction_version": sc.transaction_version.number(),
                "ops": sc.ops.len(),
                "result": if run.difference.is_some() { "fail" } else { "pass" },
                "difference": run.difference.as_ref().map(|d| json!({
                    "op_index": d.op_index,
                    "op": d.op,
                    "field": d.field,
                    // The runner renders both sides as JSON text; they go back to JSON values here.
                    "expected": as_json(&d.expected),
                    "actual": as_json(&d.actual),
                })),
            });
            if show {
                entry["table"] = json!(run.table);
            }
            entry
        })
        .collect();
    let failed = runs.iter().filter(|r| r.difference.is_some()).count();
    json!({
        "format": SCENARIO_FORMAT,
        "mutation": mutation.map(Mutation::name),
        "passed": runs.len() - failed,
        "failed": failed,
        "scenarios": entries,
    })
}

fn as_json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// `txnsim invariants --json`: the catalogue, one entry per invariant.
pub fn invariants() -> Value {
    let entries: Vec<Value> = Invariant::catalogue()
        .map(|i| {
            json!({
                "name": i.name(),
                "kind": kind_name(i.kind()),
                "statement": i.statement(),
                "source": i.source(),
                "mutation": i.mutation().name(),
            })
        })
        .collect();
    json!({ "format": INVARIANTS_FORMAT, "invariants": entries })
}

/// `txnsim mutations --json`: each injectable bug and the invariants whose bite test it is.
pub fn mutations() -> Value {
    let entries: Vec<Value> = Mutation::ALL
        .iter()
        .map(|m| {
            let caught_by: Vec<&str> =
                Invariant::catalogue().filter(|i| i.mutation() == *m).map(|i| i.name()).collect();
            json!({ "name": m.name(), "caught_by": caught_by })
        })
        .collect();
    json!({ "format": MUTATIONS_FORMAT, "mutations": entries })
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::State => "state",
        Kind::History => "history",
        Kind::Liveness => "liveness",
    }
}
