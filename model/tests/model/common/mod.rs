//! Helpers the model's test files share: a plain breadth-first walk of a model and the two-producer
//! bounds the reduction tests start from.

use stateright::Model;
use std::collections::{HashSet, VecDeque};
use txnsim_engine::Mutation;
use txnsim_model::shared::digest;
use txnsim_model::symmetry::canonical;
use txnsim_model::verdict::verdict;
use txnsim_model::{build, Bounds, TxnModel, TxnState};

/// What a walk reaches: its unique states and terminal states (by fingerprint), and the union of the
/// verdicts of every state on the way.
pub struct Reach {
    pub unique: usize,
    pub terminal: HashSet<u64>,
    /// The terminal states' classes under permuting the producers (digests of their representatives).
    pub terminal_classes: HashSet<u64>,
    pub violated: u64,
    pub facts: u32,
}

pub fn walk(bounds: &Bounds) -> Reach {
    walk_visiting(bounds, usize::MAX, |_, _| {})
}

/// `walk`, calling `visit` on each state it reaches, stopping after `limit` states.
pub fn walk_visiting(bounds: &Bounds, limit: usize, mut visit: impl FnMut(&TxnModel, &TxnState)) -> Reach {
    let model = build(bounds);
    let ctx = &model.cfg.ctx;
    let mut seen = HashSet::new();
    let mut queue = VecDeque::new();
    for s in model.init_states() {
        if seen.insert(digest(&s)) {
            queue.push_back(s);
        }
    }
    let mut reach =
        Reach { unique: 0, terminal: HashSet::new(), terminal_classes: HashSet::new(), violated: 0, facts: 0 };
    let mut actions = Vec::new();
    while let Some(s) = queue.pop_front() {
        if reach.unique == limit {
            break;
        }
        reach.unique += 1;
        visit(&model, &s);
        let v = verdict(ctx, &s);
        reach.violated |= v.violated;
        reach.facts |= v.facts;
        actions.clear();
        model.actions(&s, &mut actions);
        let mut successors = 0;
        for a in actions.drain(..) {
            let Some(next) = model.next_state(&s, a) else { continue };
            if !model.within_boundary(&next) {
                continue;
            }
            successors += 1;
            if seen.insert(digest(&next)) {
                queue.push_back(next);
            }
        }
        if successors == 0 {
            reach.terminal.insert(digest(&s));
            reach.terminal_classes.insert(digest(&canonical(s.clone())));
        }
    }
    reach
}

/// Two producers with one single-record transaction each on one partition, as the standard config runs
/// them: FIFO connections, the timer reductions, a reader poll.
pub fn two_producers() -> Bounds {
    Bounds {
        producers: 2,
        txns_per_producer: 1,
        records_per_txn: 1,
        partitions: 1,
        ordered: true,
        reduced: true,
        polls_per_reader: 1,
        ..Bounds::small()
    }
}

/// `two_producers` with the skip-aborted-index mutation, whose aborted read (through the reader's poll)
/// the plain walk must catch before a reduction is asked to keep it.
pub fn caught_mutation() -> Bounds {
    let bounds = Bounds { txn_timeouts: 0, ..two_producers() }.with_mutation(Mutation::SkipAbortedIndexOnFetch);
    assert_ne!(walk(&bounds).violated, 0, "{bounds}: the mutation is not caught even without a reduction");
    bounds
}
