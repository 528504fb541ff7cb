//! Client-intent invariants: what the application was told against what the log and readers hold. They
//! need no broker internals, so they run wherever a history and the final logs exist (KIP-890's
//! motivation: a late batch of an aborted or failed send must never be committed).

use crate::catalogue::{Invariant, Violation};
use crate::history::{CallOutcome, Event, History, ProducerCall};
use crate::log_facts::LogFacts;
use crate::state::Logs;
use std::collections::{BTreeMap, BTreeSet};
use txnsim_engine::{IsolationLevel, TopicPartition, TransactionVersion};

/// Whether the client-intent invariants are claimed under `version`. KIP-890's motivation names a TV1
/// race that breaks each in Kafka itself: a late batch of an aborted send joins the next transaction at
/// the same epoch (`failed-send-committed`), and a late EndTxn completes the next transaction at the same
/// epoch (`committed-writes-committed`). TV2's epoch bump on every transaction fences both; under TV1 the
/// network scenarios `late_batch.json` and `late_end_txn.json` show each race instead.
pub fn intent_claimed(version: TransactionVersion) -> bool {
    version.supports_epoch_bump()
}

/// What became of one transaction's sends, as the application saw it.
#[derive(Default)]
struct Txn {
    /// `(partition, values, acknowledged)` of every send invoked inside it.
    sends: Vec<(TopicPartition, Vec<String>, Option<bool>)>,
    /// `Some(true)` commit told ok, `Some(false)` abort told ok.
    committed: Option<bool>,
}

/// Splits each process's calls into transactions (begin .. commit/abort) with their sends' outcomes. A
/// transaction's sends all complete before its commit or abort does (the client flushes first).
fn transactions(history: &History) -> Vec<Txn> {
    let mut open: BTreeMap<&str, Txn> = BTreeMap::new();
    let mut ending: BTreeMap<(&str, u64), bool> = BTreeMap::new();
    let mut sends: BTreeMap<(&str, u64), usize> = BTreeMap::new();
    let mut done: Vec<Txn> = Vec::new();
    for e in &history.events {
        match e {
            Event::Invoke { process, call_id, call, .. } => match call {
                ProducerCall::Begin | ProducerCall::Init => {
                    // A new transaction, or a new instance: whatever was open ends with no outcome told.
                    done.extend(open.remove(process.as_str()));
                    if matches!(call, ProducerCall::Begin) {
                        open.insert(process, Txn::default());
                    }
                }
                ProducerCall::Send { partition, values } => {
                    if let Some(t) = open.get_mut(process.as_str()) {
                        t.sends.push((partition.clone(), values.clone(), None));
                        sends.insert((process, *call_id), t.sends.len() - 1);
                    }
                }
                ProducerCall::Commit | ProducerCall::Abort => {
                    ending.insert((process, *call_id), matches!(call, ProducerCall::Commit));
                }
                ProducerCall::SendOffsets { .. } => {}
            },
            Event::Complete { process, call_id, outcome, .. } => {
                let t = open.get_mut(process.as_str());
                if let (Some(k), Some(t)) = (sends.remove(&(process.as_str(), *call_id)), t) {
                    t.sends[k].2 = match outcome {
                        CallOutcome::Sent { .. } => Some(true),
                        CallOutcome::Failed { .. } => Some(false),
                        CallOutcome::Ok | CallOutcome::Unknown => None,
                    };
                }
                if let Some(commit) = ending.remove(&(process.as_str(), *call_id)) {
                    if matches!(outcome, CallOutcome::Ok) {
                        if let Some(mut t) = open.remove(process.as_str()) {
                            t.committed = Some(commit);
                            done.push(t);
                        }
                    }
                }
            }
            Event::Poll { .. } | Event::Seek { .. } => {}
        }
    }
    done.extend(open.into_values());
    done
}

/// `failed-send-committed`: no record of a send the application was told failed, or of a transaction it
/// was told aborted, is committed in the log or delivered by a read_committed consumer (see `intent_claimed`).
pub fn check_failed_sends(history: &History, logs: &dyn Logs) -> Vec<Violation> {
    let mut abandoned: BTreeMap<(TopicPartition, String), &'static str> = BTreeMap::new();
    for t in transactions(history) {
        for (tp, values, acked) in &t.sends {
            let why = match (acked, t.committed) {
                (_, Some(false)) => "its transaction was aborted",
                (Some(false), _) => "its send was told failed",
                _ => continue,
            };
            for v in values {
                abandoned.insert((tp.clone(), v.clone()), why);
            }
        }
    }
    let mut out = Vec::new();
    for (tp, log) in logs.logs() {
        let facts = LogFacts::of(log);
        for (o, v) in &facts.values {
            if let Some(why) = abandoned.get(&(tp.clone(), v.clone())) {
                if facts.is_committed_data(*o) {
                    out.push(Violation::new(
                        Invariant::FailedSendCommitted,
                        format!("{tp} offset {o} ({v:?}) is committed, yet {why}"),
                    ));
                    return out;
                }
            }
        }
    }
    for e in &history.events {
        if let Event::Poll { consumer, isolation: IsolationLevel::ReadCommitted, partition, records, .. } = e {
            for (o, v) in records {
                if let Some(why) = abandoned.get(&(partition.clone(), v.clone())) {
                    out.push(Violation::new(
                        Invariant::FailedSendCommitted,
                        format!("{consumer} (read_committed) on {partition} delivered offset {o} ({v:?}), yet {why}"),
                    ));
                    return out;
                }
            }
        }
    }
    out
}

/// `committed-writes-committed` (after healing): every acknowledged send of a transaction the application
/// was told committed is committed data in the final log (see `intent_claimed`).
pub fn check_committed_sends(history: &History, logs: &dyn Logs) -> Vec<Violation> {
    let facts: BTreeMap<&TopicPartition, LogFacts> = logs.logs().map(|(tp, l)| (tp, LogFacts::of(l))).collect();
    let committed: BTreeMap<&TopicPartition, BTreeSet<&String>> = facts
        .iter()
        .map(|(tp, f)| (*tp, f.values.iter().filter(|(o, _)| f.is_committed_data(**o)).map(|(_, v)| v).collect()))
        .collect();
    for t in transactions(history).iter().filter(|t| t.committed == Some(true)) {
        for (tp, values, acked) in &t.sends {
            if *acked != Some(true) {
                continue;
            }
            if let Some(v) = values.iter().find(|v| !committed.get(tp).is_some_and(|c| c.contains(v))) {
                return vec![Violation::new(
                    Invariant::CommittedWritesCommitted,
                    format!("{tp}: {v:?} was acknowledged in a transaction told committed, but is not committed data"),
                )];
            }
        }
    }
    Vec::new()
}
