//! The replay timeline: one structured event per step (time, node, kind, fields, and the line a person
//! reads), the node legend, and the text rendering with repeated idle timers folded.

use crate::profile::ProfileParams;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use txnsim_engine::protocol::Timer;
use txnsim_engine::{Broker, PartitionLog, ProducerKind, TopicPartition, TxnManagerState};

/// One timeline event. `fields` holds the values the line is about (partition, offsets, call id, the
/// broker's LEO/HW/LSO), so a tool need not parse `text`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TraceEvent {
    /// Simulated time since the run started, in microseconds.
    pub time_us: u64,
    pub node: String,
    /// What happened; the list is in docs/sim-output.md and schemas/replay.schema.json.
    pub kind: &'static str,
    pub text: String,
    #[serde(skip_serializing_if = "Value::is_null")]
    pub fields: Value,
}

impl TraceEvent {
    pub fn line(&self) -> String {
        let us = self.time_us;
        format!("{:>7}.{:03}ms {:<9} {}", us / 1000, us % 1000, self.node, self.text)
    }
}

/// The kind of a coordinator scan or client timer that changed nothing; runs of them fold in the text.
pub const IDLE_TIMER: &str = "idle-timer";

/// The timeline as text: one line per event, a run of idle timer firings shown once and then counted.
pub fn render(events: &[TraceEvent]) -> Vec<String> {
    let mut out = Vec::with_capacity(events.len());
    let mut folded = 0usize;
    for (i, e) in events.iter().enumerate() {
        let idle_run = e.kind == IDLE_TIMER && i > 0 && events[i - 1].kind == IDLE_TIMER;
        if idle_run {
            folded += 1;
            continue;
        }
        flush_folded(&mut out, &mut folded);
        out.push(e.line());
    }
    flush_folded(&mut out, &mut folded);
    out
}

fn flush_folded(out: &mut Vec<String>, folded: &mut usize) {
    match *folded {
        0 => {}
        1 => out.push("            ... 1 more idle timer firing folded (nothing changed)".into()),
        n => out.push(format!("            ... {n} more idle timer firings folded (nothing changed)")),
    }
    *folded = 0;
}

/// One step of the replay's picture (`replay --html`): the event it shows and the broker after it.
#[derive(Clone, Debug)]
pub struct BrokerStep {
    /// Index into the run's events.
    pub event: usize,
    pub broker: Broker,
    /// Each replicated partition's replicas as the event left them.
    pub replicas: BTreeMap<TopicPartition, Vec<ReplicaSnapshot>>,
}

/// A replica as the run stands, its log borrowed: compared with the last snapshot, and copied only when
/// it differs.
pub struct ReplicaNow<'a> {
    pub broker: u32,
    pub leader: bool,
    pub in_isr: bool,
    pub down: bool,
    pub log: &'a PartitionLog,
}

impl ReplicaNow<'_> {
    fn differs(&self, was: &ReplicaSnapshot) -> bool {
        (self.broker, self.leader, self.in_isr, self.down) != (was.broker, was.leader, was.in_isr, was.down)
            || self.log.high_watermark() != was.log.high_watermark()
            || self.log.log_start_offset() != was.log.log_start_offset()
            || self.log.batches().ne(was.log.batches())
    }

    pub fn snapshot(&self) -> ReplicaSnapshot {
        let Self { broker, leader, in_isr, down, log } = *self;
        ReplicaSnapshot { broker, leader, in_isr, down, log: log.clone() }
    }
}

/// One broker's replica of a partition: its log, whether it leads (the leader whose log the picture
/// draws), whether the leader counts it in the ISR, and whether it is down.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaSnapshot {
    pub broker: u32,
    pub leader: bool,
    pub in_isr: bool,
    pub down: bool,
    pub log: PartitionLog,
}

/// The partition leaders' logs as a broker event left them, kept while tracing whenever an event changed
/// a leader's LEO, HW, LSO or batches. They cannot be rebuilt from the final logs: a new leader may hold
/// less than the old one did, or other batches at the same offsets (an election loses what the ISR lacked).
#[derive(Clone, Debug)]
pub struct LogSnapshot {
    /// Index into the run's events.
    pub event: usize,
    /// The event's `partitions` field: each leader's LEO, HW and LSO.
    pub partitions: Value,
    pub logs: BTreeMap<TopicPartition, PartitionLog>,
    /// Each replicated partition's replicas: a follower's truncation or a marker it holds twice shows
    /// only here.
    pub replicas: BTreeMap<TopicPartition, Vec<ReplicaSnapshot>>,
}

impl LogSnapshot {
    /// Whether `logs`, with numbers `partitions`, and `replicas` show something this snapshot does not.
    pub fn differs<'a>(
        &self,
        partitions: &Value,
        mut logs: impl Iterator<Item = (&'a TopicPartition, &'a PartitionLog)>,
        replicas: &[(&TopicPartition, Vec<ReplicaNow<'_>>)],
    ) -> bool {
        let replica_differs = |(tp, now): &(&TopicPartition, Vec<ReplicaNow<'_>>)| {
            self.replicas
                .get(*tp)
                .is_none_or(|was| was.len() != now.len() || was.iter().zip(now).any(|(w, n)| n.differs(w)))
        };
        self.partitions != *partitions
            || logs.any(|(tp, log)| self.logs.get(tp).is_none_or(|s| s.batches().ne(log.batches())))
            || self.replicas.len() != replicas.len()
            || replicas.iter().any(replica_differs)
    }
}

/// The broker after every event that changed a leader's log, and at every violation: the coordinator's
/// broker as the run left it, with each step's leader logs (before the first snapshot, empty ones).
pub fn broker_steps(events: &[TraceEvent], last: &Broker, snapshots: &[LogSnapshot]) -> Vec<BrokerStep> {
    let empty: BTreeMap<TopicPartition, PartitionLog> =
        last.replica_manager.logs.keys().map(|tp| (tp.clone(), PartitionLog::new())).collect();
    let none = BTreeMap::new();
    let mut snapshots = snapshots.iter().peekable();
    let (mut logs, mut replicas) = (&empty, &none);
    let mut steps = Vec::new();
    for (i, e) in events.iter().enumerate() {
        let snapshot = snapshots.next_if(|s| s.event == i);
        if let Some(s) = snapshot {
            (logs, replicas) = (&s.logs, &s.replicas);
        }
        if snapshot.is_some() || e.kind == "violation" {
            let mut broker = last.clone();
            broker.replica_manager.logs = logs.clone();
            steps.push(BrokerStep { event: i, broker, replicas: replicas.clone() });
        }
    }
    assert!(snapshots.next().is_none(), "every log snapshot names an event of the run");
    steps
}

/// Who each node is: the broker, each producer (and which share a transactional id), each consumer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Legend {
    pub nodes: Vec<NodeRole>,
    /// Transactional ids used by more than one producer: each init bumps the epoch and fences the rest.
    pub shared_transactional_ids: BTreeMap<String, Vec<String>>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeRole {
    pub name: String,
    pub role: String,
}

/// What an offset is, for the text timeline's readers.
pub const OFFSETS: &str = "offsets: a record's position in its partition's log; `5:p1-2` is value p1-2 at \
                           offset 5; a COMMIT or ABORT marker takes an offset too; HW = high watermark, LSO = \
                           last stable offset (read_committed reads stop there)";

impl Legend {
    pub fn of(params: &ProfileParams) -> Legend {
        let role = |name: &str, role: String| NodeRole { name: name.to_string(), role };
        let mut nodes = if params.brokers <= 1 {
            vec![role("broker-0", "the broker, also the transaction coordinator (it writes markers to itself)".into())]
        } else {
            let mut brokers = vec![role(
                "broker-0",
                "broker, leader or follower of each partition; the transaction coordinator while it leads \
                 __transaction_state (at first), and the group coordinator"
                    .into(),
            )];
            for id in 1..params.brokers {
                let what = if id < 3 {
                    "broker: leader or follower of each partition; the transaction coordinator once it leads \
                     __transaction_state"
                } else {
                    "broker: leader or follower of each partition"
                };
                brokers.push(role(&format!("broker-{id}"), what.into()));
            }
            brokers.push(role(
                "controller",
                "elects leaders, commits ISR changes (AlterPartition); broker lines end with the leaders' \
                 LEO/HW/LSO"
                    .into(),
            ));
            brokers
        };
        let mut by_tid: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for p in &params.producers {
            let what = match &p.kind {
                ProducerKind::Plain => "plain producer (no producer id, no retries)".to_string(),
                ProducerKind::Idempotent => "idempotent producer (a producer id, no transactions)".to_string(),
                ProducerKind::Transactional { transactional_id } => {
                    by_tid.entry(transactional_id.clone()).or_default().push(p.name.clone());
                    format!("transactional producer, transactional.id {transactional_id}")
                }
            };
            nodes.push(role(&p.name, what));
        }
        for c in &params.consumers {
            nodes.push(role(&c.name, format!("consumer, isolation.level={}", c.isolation.name())));
        }
        nodes.push(role("net", "network faults: clogged nodes and links, loss, latency, held messages".into()));
        nodes.push(role("sim", "the harness: healing, the final reads, the end".into()));
        nodes.push(role("checker", "invariant violations".into()));
        by_tid.retain(|_, names| names.len() > 1);
        Legend { nodes, shared_transactional_ids: by_tid }
    }

    pub fn lines(&self) -> Vec<String> {
        let mut out: Vec<String> = self.nodes.iter().map(|n| format!("  {:<9} {}", n.name, n.role)).collect();
        for (tid, names) in &self.shared_transactional_ids {
            out.push(format!(
                "  {} share transactional.id {tid}: each init bumps its epoch and fences the others",
                names.join(" and ")
            ));
        }
        out.push(format!("  {OFFSETS}"));
        out
    }
}

/// A timer as Kafka would name the work it triggers.
pub fn timer_name(t: &Timer) -> String {
    match t {
        Timer::AbortTimedOutTransactions => "abort-timed-out-transactions scan".into(),
        Timer::RetryBackoff { correlation_id } => format!("retry backoff of request {correlation_id}"),
        Timer::RequestTimeout { correlation_id } => format!("request timeout of request {correlation_id}"),
        Timer::ResendTxnMarkers { decision } => format!("marker resend for decision {decision}"),
        Timer::LoadTransactionLog { leader_epoch } => {
            format!("load __transaction_state at leader epoch {leader_epoch}")
        }
        Timer::DeliveryTimeout { op } => format!("delivery timeout of batch {op}"),
        Timer::Linger { op } => format!("linger of batch {op} ends"),
    }
}

/// Kafka's `TransactionManager.State` names.
pub fn state_name(s: TxnManagerState) -> &'static str {
    s.name()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: &'static str, text: &str) -> TraceEvent {
        TraceEvent { time_us: 1_000, node: "broker-0".into(), kind, text: text.into(), fields: Value::Null }
    }

    #[test]
    fn a_run_of_idle_timers_prints_once_then_a_count() {
        let events = [
            event("recv", "a"),
            event(IDLE_TIMER, "scan"),
            event(IDLE_TIMER, "scan"),
            event(IDLE_TIMER, "scan"),
            event("recv", "b"),
            event(IDLE_TIMER, "scan"),
        ];
        let lines = render(&events);
        assert_eq!(lines.len(), 5, "three idle timers in a row should become one line and a count: {lines:?}");
        assert!(lines[1].ends_with("broker-0  scan"), "{}", lines[1]);
        assert!(lines[2].contains("... 2 more idle timer firings folded"), "{}", lines[2]);
        assert!(lines[4].ends_with("broker-0  scan"), "a lone idle timer is not folded: {}", lines[4]);
    }
}
