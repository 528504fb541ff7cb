//! Timer-driven actions against their Kafka timers, for the drivers whose time moves (the scenario runner,
//! the sim, `serve`); the model's time stands still, so it cannot check these. The ground truth is the
//! id's `__transaction_state` history (each record's time and timeout), not the fields the coordinator's
//! timeout scan compares.

use crate::catalogue::{Invariant, Violation};
use txnsim_engine::coordinator::{DecisionCause, TransactionCoordinator, TransactionState, TxnTransition};

/// Whether `t` opened a transaction: an Ongoing record after a state that is not Ongoing.
fn opens(w: &[TxnTransition]) -> bool {
    w[1].state == TransactionState::Ongoing && w[0].state != TransactionState::Ongoing
}

/// `timeout-abort-not-early`: every abort the coordinator decided for a timeout was prepared more than
/// the transaction's `transaction.timeout.ms` after the record that opened it
/// (`TransactionStateManager.timedOutTransactions`: `txnStartTimestamp + txnTimeoutMs < now`).
pub fn check_timers(c: &TransactionCoordinator) -> Vec<Violation> {
    let mut out = Vec::new();
    for (tid, meta) in &c.txns {
        let t = &meta.transitions;
        // The k-th Prepare* record of an id is its k-th decision (a decision is made once its record is written).
        let decisions = c.decisions.iter().filter(|d| &d.transactional_id == tid);
        let prepares = t
            .iter()
            .enumerate()
            .filter(|(_, r)| matches!(r.state, TransactionState::PrepareCommit | TransactionState::PrepareAbort));
        for (d, (at, prepare)) in decisions.zip(prepares) {
            if d.cause != DecisionCause::Timeout {
                continue;
            }
            let Some(open) = t[..=at].windows(2).rev().find(|w| opens(w)).map(|w| w[1]) else { continue };
            let open_for = prepare.timestamp_ms.saturating_sub(open.timestamp_ms);
            if open_for <= open.txn_timeout_ms {
                out.push(Violation::new(
                    Invariant::TimeoutAbortNotEarly,
                    format!(
                        "'{tid}' (producer {}): aborted for its timeout at {} ms, {open_for} ms after its transaction \
                         began at {} ms; transaction.timeout.ms is {}",
                        d.producer_id, prepare.timestamp_ms, open.timestamp_ms, open.txn_timeout_ms
                    ),
                ));
            }
        }
    }
    out
}
