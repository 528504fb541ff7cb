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
    // Timeout decisions are rare: look only at them, not at every id's history.
    for (i, d) in c.decisions.iter().enumerate().filter(|(_, d)| d.cause == DecisionCause::Timeout) {
        let tid = &d.transactional_id;
        let Some(meta) = c.txns.get(tid) else { continue };
        let t = &meta.transitions;
        // The k-th Prepare* record of an id is its k-th decision (a decision is made once its record is written).
        let k = c.decisions[..i].iter().filter(|e| &e.transactional_id == tid).count();
        let mut prepares = t
            .iter()
            .enumerate()
            .filter(|(_, r)| matches!(r.state, TransactionState::PrepareCommit | TransactionState::PrepareAbort));
        let Some((at, prepare)) = prepares.nth(k) else { continue };
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
    out
}
