//! The partial-order reduction (`Bounds::por`) against the graph it reduces, searched to the end by a
//! plain breadth-first walk: stubborn sets keep every terminal state, and the argument at
//! `reductions::stubborn_set` says they keep every violation and every fact too. These tests check both
//! claims on configs small enough to walk without the reduction.

use super::common::{caught_mutation, two_producers, walk};
use txnsim_engine::TransactionVersion;
use txnsim_model::Bounds;

/// Walks `bounds` with and without the reduction and requires the same terminal states, violations and
/// facts, and fewer states with it.
fn same_outcomes(bounds: Bounds) {
    let full = walk(&Bounds { por: false, ..bounds.clone() });
    let por = walk(&Bounds { por: true, ..bounds.clone() });
    assert!(por.unique < full.unique, "{bounds}: no reduction ({} vs {} states)", por.unique, full.unique);
    assert_eq!(por.violated, full.violated, "{bounds}: the reduction changed which invariants are violated");
    assert_eq!(por.facts, full.facts, "{bounds}: the reduction changed which facts are reached");
    assert!(
        por.terminal == full.terminal,
        "{bounds}: the reduction lost or made terminal states ({} vs {})",
        por.terminal.len(),
        full.terminal.len()
    );
}

/// Losses and the request timeouts that recover from them (75,673 states unreduced, 38,899 reduced).
#[test]
fn por_keeps_outcomes_with_losses_and_request_timeouts() {
    same_outcomes(Bounds { lossy: true, request_timeouts: 1, txn_timeouts: 0, polls_per_reader: 0, ..two_producers() });
}

/// A crash of the broker or of either producer, under TV2 (63,824 states unreduced, 24,806 reduced).
#[test]
fn por_keeps_outcomes_with_a_crash() {
    same_outcomes(
        Bounds { crashes: 1, txn_timeouts: 0, polls_per_reader: 0, ..two_producers() }
            .with_version(TransactionVersion::V2),
    );
}

/// A mutation's violation (aborted-read, through the reader's poll) survives the reduction.
#[test]
fn por_keeps_a_mutations_violation() {
    same_outcomes(caught_mutation());
}
