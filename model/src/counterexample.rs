//! A counterexample path for people: renamed back from symmetry reduction, one numbered line per step
//! with the state after it (`describe` words each step and state).

use crate::bounds::Bounds;
use crate::describe::{snapshot, step};
use crate::model::{build, TxnModel};
use crate::state::{TxnAction, TxnState};
use crate::symmetry;
use stateright::Path;

/// The path as a person follows it: under symmetry reduction, the plain model's path with the same
/// steps, in which every producer keeps its name (`symmetry::unpermuted`).
pub fn readable(model: &TxnModel, path: &Path<TxnState, TxnAction>) -> Path<TxnState, TxnAction> {
    let bounds = &model.cfg.ctx.bounds;
    if !bounds.symmetry {
        return path.clone();
    }
    symmetry::unpermuted(&build(&Bounds { symmetry: false, por: false, ..bounds.clone() }), path)
}

/// The path as numbered lines (step 0 is the initial state), as `readable` gives it.
pub fn path_lines(model: &TxnModel, path: &Path<TxnState, TxnAction>) -> Vec<String> {
    let steps = readable(model, path).into_vec();
    let mut lines = vec![format!("  0. start  ‖ {}", snapshot(&steps[0].0))];
    for (i, pair) in steps.windows(2).enumerate() {
        let (prev, action) = (&pair[0].0, pair[0].1.as_ref().expect("every step but the last has an action"));
        let next = &pair[1].0;
        lines.push(format!("{:>3}. {}  ‖ {}", i + 1, step(prev, action, next), snapshot(next)));
    }
    lines
}

/// Just the "who did what" of each step, without the state snapshots (tests pin these).
pub fn step_texts(model: &TxnModel, path: &Path<TxnState, TxnAction>) -> Vec<String> {
    readable(model, path)
        .into_vec()
        .windows(2)
        .map(|w| step(&w[0].0, w[0].1.as_ref().expect("an action"), &w[1].0))
        .collect()
}
