//! Symmetry reduction over the producers (`--symmetry`, `txnsim_model::symmetry`). It is sound only if
//! permuting the producers commutes with every step of the model and every property is blind to the
//! permutation; these tests check both on walks small enough to take without it, and that the
//! representative is one per class.

use super::common::{caught_mutation, two_producers, walk, walk_visiting};
use stateright::{Checker, HasDiscoveries, Model};
use std::collections::BTreeSet;
use txnsim_engine::{Mutation, TransactionVersion};
use txnsim_model::counterexample::readable;
use txnsim_model::shared::digest;
use txnsim_model::symmetry::{canonical, permuted};
use txnsim_model::verdict::verdict;
use txnsim_model::{build, Bounds, TxnModel, TxnState};

const SWAP: [usize; 2] = [1, 0];

fn successors(model: &TxnModel, s: &TxnState) -> Vec<TxnState> {
    let mut actions = Vec::new();
    model.actions(s, &mut actions);
    actions.into_iter().filter_map(|a| model.next_state(s, a)).collect()
}

/// For a deterministic eighth of the reachable states (all of them take minutes in a debug build; the
/// full walks, and one over 2 partitions x 2 records with a crash, passed in release): the successors of the swapped state are the swapped successors, the
/// swapped state has the same verdict (every invariant and fact is blind to names), and both share a
/// representative. A name the renaming misses (a record value, a transactional id in a message or a
/// timer) breaks the first: the swapped producer writes its own name where the copy kept the old one.
fn swapping_commutes(bounds: Bounds) -> usize {
    let reach = walk_visiting(&bounds, usize::MAX, |model, s| {
        if digest(s) % 8 != 0 {
            return;
        }
        let swapped = permuted(s, &SWAP);
        let expected: BTreeSet<u64> = successors(model, s).iter().map(|n| digest(&permuted(n, &SWAP))).collect();
        let actual: BTreeSet<u64> = successors(model, &swapped).iter().map(digest).collect();
        assert_eq!(actual, expected, "{bounds}: swapping the producers does not commute with the steps from\n{s:#?}");
        let ctx = &model.cfg.ctx;
        assert_eq!(
            verdict(ctx, &swapped),
            verdict(ctx, s),
            "{bounds}: a property sees the producers' names in\n{s:#?}"
        );
        assert_eq!(
            digest(&canonical(swapped.clone())),
            digest(&canonical(s.clone())),
            "{bounds}: a state and its swap have different representatives:\n{s:#?}"
        );
        assert_eq!(digest(&permuted(&swapped, &SWAP)), digest(s), "{bounds}: swapping twice is not the identity");
    });
    reach.unique
}

/// A coordinator timeout abort (its timer names the transactional id) and a reader poll (its records
/// name their producers); no partial-order reduction, whose choice of producer is by slot (and sound
/// on its own from any state). 116,483 states: 87,675 before KIP-890's `VerificationStateEntry` kept the
/// lowest sequence and epoch it verified (two producers' pipelined batches can now meet it, and a later
/// batch verified first is refused OUT_OF_ORDER_SEQUENCE) and before the asynchronous log's rules.
#[test]
fn swapping_producers_commutes_with_a_timeout_and_a_poll() {
    let unique = swapping_commutes(Bounds { por: false, ..two_producers() });
    // 123,441 with this wave's Kafka 4.x client (accumulator, delivery timeout, backoff, aborts after sends).
    assert_eq!(unique, 123_441, "the walk's size changed: update this and BENCHMARKS.md");
}

/// A crash of the broker or of either producer (and its restart as a new instance, `p0'`), TV2: the
/// instance names and the coordinator's transactional ids move with it. 78,840 states: 63,824 before the
/// verification entry's sequence and the asynchronous log's TV2 rules (Complete* pending while markers
/// are out and after a reload, checked before the epoch by a TV2 EndTxn).
#[test]
fn swapping_producers_commutes_with_a_crash() {
    let bounds = Bounds { crashes: 1, txn_timeouts: 0, polls_per_reader: 0, por: false, ..two_producers() }
        .with_version(TransactionVersion::V2);
    // 120,152 with this wave's Kafka 4.x client (accumulator, delivery timeout, backoff, aborts after sends).
    assert_eq!(swapping_commutes(bounds), 120_152, "the walk's size changed");
}

/// Three producers: every one of the six permutations of a reachable state has the same representative
/// (the first 3,000 states of the walk; the whole space, 278,797 states with `--por`, reduces to 46,479
/// classes with `--symmetry`).
#[test]
fn three_producers_have_one_representative_per_class() {
    let bounds = Bounds { producers: 3, polls_per_reader: 0, txn_timeouts: 0, ..two_producers() };
    let perms = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];
    let reach = walk_visiting(&bounds, 3_000, |_, s| {
        let rep = digest(&canonical(s.clone()));
        for p in &perms {
            assert_eq!(digest(&canonical(permuted(s, p))), rep, "{bounds}: permutation {p:?} of\n{s:#?}");
        }
    });
    assert_eq!(reach.unique, 3_000, "{bounds}: the walk ended early");
}

/// The symmetric model (`Bounds::symmetry`) keeps every violation, fact and terminal class of
/// the full walk, and visits about half the states.
fn same_outcomes(bounds: Bounds) {
    let full = walk(&bounds);
    let sym = walk(&Bounds { symmetry: true, ..bounds.clone() });
    assert!(
        sym.unique * 2 <= full.unique + 2,
        "{bounds}: two producers should halve the states, got {} -> {}",
        full.unique,
        sym.unique
    );
    assert_eq!(sym.violated, full.violated, "{bounds}: symmetry changed which invariants are violated");
    assert_eq!(sym.facts, full.facts, "{bounds}: symmetry changed which facts are reached");
    assert!(sym.terminal_classes == full.terminal_classes, "{bounds}: symmetry lost or made terminal states");
}

/// Losses and request timeouts, with the partial-order reduction on, as `--config standard --symmetry`
/// runs.
#[test]
fn symmetry_keeps_outcomes_with_por() {
    same_outcomes(Bounds { lossy: true, request_timeouts: 1, txn_timeouts: 0, polls_per_reader: 0, ..two_producers() });
}

/// A mutation's violation survives.
#[test]
fn symmetry_keeps_a_mutations_violation() {
    same_outcomes(caught_mutation());
}

/// A counterexample of the symmetric model as it is printed: `readable` renames the steps back wherever
/// canonicalizing swapped the producers, and every printed state is a permutation of the checked one.
#[test]
fn readable_paths_undo_the_swaps() {
    let bounds = Bounds::by_name("medium").expect("a named config").with_mutation(Mutation::ReadCommittedBoundedByHw);
    assert!(bounds.symmetry);
    let model = build(&bounds);
    let checker = model.clone().checker().finish_when(HasDiscoveries::AnyFailures).spawn_bfs().join();
    let path = checker.discoveries().remove("precommitted-read").expect("the mutation's read past the LSO");
    let checked = path.clone().into_states();
    let shown = readable(&model, &path).into_states();
    assert_eq!(shown.len(), checked.len(), "the printed path has other steps than the checked one");
    for (i, (s, c)) in shown.iter().zip(&checked).enumerate() {
        assert_eq!(
            digest(&canonical(s.clone())),
            digest(c),
            "printed step {i} is not a permutation of the checked one"
        );
    }
    assert!(
        shown.iter().zip(&checked).any(|(s, c)| digest(s) != digest(c)),
        "the printed path is the checked one step for step: `readable` renamed no swapped step back (or this \
         path has none, and another mutation's path must show it)"
    );
}
