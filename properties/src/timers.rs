//! Timer-driven actions against their Kafka timers, for the drivers whose time moves (the scenario runner,
//! the sim, `serve`); the model's time stands still, so it cannot check these. The ground truth is the
//! id's `__transaction_state` history (each record's time and timeout), not the fields the coordinator's
//! timeout scan compares, and the application's own calls and answers, not the producer's batches.

use crate::catalogue::{Invariant, Violation};
use crate::history::{CallOutcome, Event, History, ProducerCall};
use std::collections::BTreeMap;
use txnsim_engine::coordinator::{DecisionCause, TransactionCoordinator, TransactionState, TxnTransition};
use txnsim_engine::TimeMs;

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
        let is_prepare =
            |r: &TxnTransition| matches!(r.state, TransactionState::PrepareCommit | TransactionState::PrepareAbort);
        // A decision is made once its record is written, so the id's Prepare* transitions are its last
        // decisions, one each. A loaded coordinator's transitions start at the newest record it loaded,
        // while its decisions come from the whole log: a decision older than that record is not here.
        let k = c.decisions[..i].iter().filter(|e| &e.transactional_id == tid).count();
        let decided = c.decisions.iter().filter(|e| &e.transactional_id == tid).count();
        let Some(j) = (k + t.iter().filter(|r| is_prepare(r)).count()).checked_sub(decided) else { continue };
        let mut prepares = t.iter().enumerate().filter(|(_, r)| is_prepare(r));
        let Some((at, prepare)) = prepares.nth(j) else { continue };
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

/// A stretch in which a process was paused (a GC pause): its timers wait with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pause {
    pub process: String,
    pub from_ms: TimeMs,
    pub to_ms: TimeMs,
}

/// `send-answered-within-delivery-timeout`: every send is answered, acknowledged or failed, at most its
/// producer's `delivery.timeout.ms` (`delivery_timeout_ms` of the process) after the call, not counting
/// the time its process was paused. Batches are created no later than their sends and expire from
/// creation (`ProducerBatch.hasReachedDeliveryTimeout`: `deliveryTimeoutMs <= now - createdMs`), so a
/// send still open at `end_ms` after that long is late; `end_ms` must be a time whose due timers have all
/// fired. One lost with its process (`Unknown`) is late only past the bound: its instant's timers may not
/// have run.
pub fn check_delivery_timeouts(
    history: &History,
    delivery_timeout_ms: &dyn Fn(&str) -> TimeMs,
    pauses: &[Pause],
    end_ms: TimeMs,
) -> Vec<Violation> {
    let mut calls: BTreeMap<(&str, u64), TimeMs> = BTreeMap::new();
    // (process, called, until, answered: Some(outcome) or still open)
    let mut ended: Vec<(&str, TimeMs, TimeMs, Option<&CallOutcome>)> = Vec::new();
    for e in &history.events {
        match e {
            Event::Invoke { time_ms, process, call_id, call: ProducerCall::Send { .. } } => {
                calls.insert((process.as_str(), *call_id), *time_ms);
            }
            Event::Complete { time_ms, process, call_id, outcome } => {
                if let Some(called) = calls.remove(&(process.as_str(), *call_id)) {
                    ended.push((process, called, *time_ms, Some(outcome)));
                }
            }
            _ => {}
        }
    }
    let open = calls.into_iter().map(|((process, _), called)| (process, called, end_ms, None));
    let mut out = Vec::new();
    for (process, called, until, outcome) in ended.into_iter().chain(open) {
        let paused: TimeMs = pauses
            .iter()
            .filter(|p| p.process == process)
            .map(|p| p.to_ms.min(until).saturating_sub(p.from_ms.max(called)))
            .sum();
        let waited = until - called - paused;
        let timeout = delivery_timeout_ms(process);
        let (late, how) = match outcome {
            None => (waited >= timeout, format!("still unanswered at {until} ms")),
            Some(CallOutcome::Unknown) => (waited > timeout, format!("lost unanswered at {until} ms")),
            Some(_) => (waited > timeout, format!("answered at {until} ms")),
        };
        if late {
            out.push(Violation::new(
                Invariant::SendAnsweredWithinDeliveryTimeout,
                format!(
                    "{process}: a send called at {called} ms was {how}, {waited} ms later (not counting {paused} ms \
                     paused); delivery.timeout.ms is {timeout}"
                ),
            ));
        }
    }
    out
}
