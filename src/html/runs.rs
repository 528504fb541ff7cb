//! The picture of runs that are not scenarios: a simulation replay (`replay --html`) and the model's
//! counterexamples (`check --html`). Both become the steps the scenario page draws, from broker
//! snapshots (`scenario::broker_step`), so one page shows all three.

use super::Story;
use crate::scenario::broker_step;
use std::collections::BTreeMap;
use txnsim_model::cli::Report;
use txnsim_model::Bounds;
use txnsim_sim::trace::broker_steps;
use txnsim_sim::{RunReport, RunSpec};

/// How broker lines of the replay end (`World::trace_broker`): the numbers become the step's outcome.
const NUMBERS: &str = " | LEO/HW/LSO ";

/// One step per event that moved a partition's LEO, HW or LSO, and one per violation (marked as
/// differing), each with the broker as it stood after the event.
pub fn replay_story(spec: &RunSpec, report: &RunReport) -> Result<Story, String> {
    let broker = report.broker.as_ref().ok_or("the run kept no broker to draw (it ran without a trace)")?;
    let steps = broker_steps(&report.events, broker, &report.log_snapshots)
        .into_iter()
        .enumerate()
        .map(|(k, s)| {
            let e = &report.events[s.event];
            let violation = e.kind == "violation";
            let (what, numbers) = match e.text.rsplit_once(NUMBERS) {
                Some((what, numbers)) => (what, format!("LEO/HW/LSO {numbers}")),
                None => (e.text.as_str(), if violation { "invariant violated".into() } else { String::new() }),
            };
            let us = e.time_us;
            let op = format!("{}.{:03}ms {} {what}", us / 1000, us % 1000, e.node);
            broker_step(k, (op, numbers), violation, &s.broker, &s.replicas)
        })
        .collect();
    let verdict = if report.passed() {
        "PASS: no invariant violated".to_string()
    } else {
        let names: Vec<&str> = report.found.iter().map(|f| f.invariant.as_str()).collect();
        format!("FAIL: {}", names.join(", "))
    };
    Ok(Story {
        title: format!("replay seed {} profile {}", report.seed, report.profile)
            + &report.mutation.as_ref().map(|m| format!(" mutation {m}")).unwrap_or_default(),
        file: spec.replay_command(),
        source: Some(report.swarm.clone()),
        steps,
        verdict,
        passed: report.passed(),
    })
}

/// One story per counterexample, its last step (the violating state) marked as differing; a check
/// that found none gives one story without steps that says so.
pub fn check_stories(bounds: &Bounds, report: &Report) -> Vec<Story> {
    let file = format!("model: {bounds}");
    if report.counterexamples.is_empty() {
        let verdict = report.lines.get(1).cloned().unwrap_or_default();
        // Passed only if nothing was violated and the search finished: a cut-short check proves nothing.
        let passed = !report.violated && report.complete;
        return vec![Story {
            title: "no counterexample".into(),
            file,
            source: None,
            steps: Vec::new(),
            verdict,
            passed,
        }];
    }
    report
        .counterexamples
        .iter()
        .map(|c| {
            let last = c.steps.len() - 1;
            let steps = c
                .steps
                .iter()
                .enumerate()
                .map(|(i, (text, broker))| {
                    // A step reads "who: what ⇒ what came of it".
                    let (op, outcome) = text.split_once(" ⇒ ").unwrap_or((text, ""));
                    broker_step(i, (op.to_string(), outcome.to_string()), i == last, broker, &BTreeMap::new())
                })
                .collect();
            Story {
                title: format!("counterexample for {}", c.property),
                file: file.clone(),
                source: None,
                steps,
                verdict: format!("FAIL {}", c.notes.join("; ")),
                passed: false,
            }
        })
        .collect()
}
