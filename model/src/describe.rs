//! Counterexamples for people: one line per step saying who did what and what came of it (a message in
//! the engine's words, its `Display`, as the sim's and the wire's timelines print it), then the
//! partition logs with HW and LSO, the coordinator's transactions and what each reader has delivered.

use crate::actors::{BrokerNode, ModelTimer, NodeKind, Phase, ProducerNode, Stop};
use crate::state::{TxnAction, TxnState};
use crate::verdict::broker_of;
use stateright::actor::{ActorModelAction, Id};
use txnsim_engine::coordinator::TransactionState;
use txnsim_engine::group_coordinator::OffsetsRecord;
use txnsim_engine::protocol::{NodeId, Timer};
use txnsim_engine::record::BatchBody;
use txnsim_engine::topic::GROUP_METADATA_TOPIC;
use txnsim_engine::{Broker, TopicPartition, TransactionResult};
use txnsim_properties::{CallOutcome, Event, ProducerCall};

fn actor_name(s: &TxnState, id: Id) -> String {
    match s.actor_states[usize::from(id)].node() {
        NodeKind::Broker(_) => "broker".into(),
        NodeKind::Producer(p) => p.producer.id.to_string(),
        NodeKind::Processor(p) => p.producer.id.to_string(),
        NodeKind::Panicked { .. } => unreachable!("node() unwraps"),
    }
}

/// Broker 0 is "broker", as on a single broker; a replicated cluster's others are "broker-1", ...
pub fn node_name(n: &NodeId) -> String {
    match n {
        NodeId::Broker(0) => "broker".into(),
        NodeId::Broker(_) => n.to_string(),
        NodeId::Client(c) => c.clone(),
    }
}

/// Who did what, and what it led to.
pub fn step(prev: &TxnState, action: &TxnAction, next: &TxnState) -> String {
    let (what, id) = match action {
        ActorModelAction::Deliver { dst, msg, .. } => {
            (format!("{} → {}: {}", node_name(&msg.from), node_name(&msg.to), msg.message), Some(*dst))
        }
        ActorModelAction::Drop(env) => (
            format!("network loses {} → {}: {}", node_name(&env.msg.from), node_name(&env.msg.to), env.msg.message),
            None,
        ),
        ActorModelAction::Timeout(id, timer) => {
            (format!("{}: {}", actor_name(prev, *id), timer_text(timer)), Some(*id))
        }
        ActorModelAction::SelectRandom { actor, random, .. } => {
            let txn = match prev.actor_states[usize::from(*actor)].producer().map(|p| &p.phase) {
                Some(Phase::Choosing { txn }) => format!(" transaction {txn}"),
                _ => String::new(),
            };
            (
                format!("{}: the application runs{txn} and will {}", actor_name(prev, *actor), verb(*random)),
                Some(*actor),
            )
        }
        ActorModelAction::Crash(id) | ActorModelAction::Recover(id) => {
            (format!("{action:?} {}", actor_name(prev, *id)), Some(*id))
        }
    };
    let Some(id) = id else { return what };
    let (before, after) = (&prev.actor_states[usize::from(id)], &next.actor_states[usize::from(id)]);
    let mut effects = Vec::new();
    if let Some(message) = after.panic_message() {
        effects.push(format!("ENGINE ASSERTION FAILED: {message}"));
    } else {
        match (before.node(), after.node()) {
            (NodeKind::Broker(b0), NodeKind::Broker(b1)) => broker_changes(b0, b1, &mut effects),
            (NodeKind::Producer(p0), NodeKind::Producer(p1)) => producer_changes(p0, p1, &mut effects),
            _ => {}
        }
    }
    if effects.is_empty() {
        what
    } else {
        format!("{what} ⇒ {}", effects.join("; "))
    }
}

fn verb(r: TransactionResult) -> &'static str {
    match r {
        TransactionResult::Commit => "commit",
        TransactionResult::Abort => "abort",
    }
}

pub fn timer_text(t: &ModelTimer) -> String {
    match t {
        ModelTimer::Engine(Timer::RequestTimeout { correlation_id }) => format!("request #{correlation_id} times out"),
        ModelTimer::Engine(Timer::RetryBackoff { correlation_id }) => {
            format!("retry backoff ends, resends #{correlation_id}")
        }
        ModelTimer::Engine(Timer::DeliveryTimeout { op }) => format!("batch #{op}'s delivery timeout"),
        ModelTimer::Engine(Timer::Linger { op }) => format!("batch #{op}'s linger ends"),
        ModelTimer::Engine(Timer::ResendTxnMarkers { decision }) => format!("marker retry for decision #{decision}"),
        ModelTimer::Engine(Timer::AbortTimedOutTransactions) => "timeout scan".into(),
        ModelTimer::Engine(Timer::LoadTransactionLog { leader_epoch }) => {
            format!("coordinator loads at epoch {leader_epoch}")
        }
        ModelTimer::Member(Timer::RequestTimeout { correlation_id }) => {
            format!("its member's request #{correlation_id} times out")
        }
        ModelTimer::Member(t) => format!("its member's {t:?}"),
        ModelTimer::GroupDeadline => "the group's join phase ends".into(),
        ModelTimer::SessionExpiry => "the group's member sessions expire (no heartbeat came)".into(),
        ModelTimer::TxnTimeout(tid) => format!("coordinator times out '{tid}'"),
        ModelTimer::Crash => "CRASH".into(),
        ModelTimer::BrokerCrash(id) => format!("CRASH of {}", node_name(&NodeId::Broker(*id))),
        ModelTimer::BrokerRestart(id) => format!("{} restarts", node_name(&NodeId::Broker(*id))),
        ModelTimer::Poll { partition } => format!("readers poll t/{partition}"),
    }
}

fn broker_changes(b0: &BrokerNode, b1: &BrokerNode, out: &mut Vec<String>) {
    let replicated = b1.replication.is_some();
    if b1.restarts > b0.restarts && !replicated {
        out.push(format!("broker restarted (coordinator epoch {})", b1.broker.coordinator.coordinator_epoch));
    }
    let (old, new) = (b0.brokers(), b1.brokers());
    for (i, (was, now)) in old.iter().zip(&new).enumerate() {
        let who = if replicated { format!("{} ", node_name(&NodeId::Broker(i as u32))) } else { String::new() };
        match (b0.is_down(i as u32), b1.is_down(i as u32)) {
            (false, true) => out.push(format!("{who}is down; the controller fences it")),
            (true, false) => out.push(format!("{who}is up (coordinator epoch {})", now.coordinator.coordinator_epoch)),
            _ => {}
        }
        log_changes(&who, was, now, out);
    }
    for (tid, m1) in &b1.broker.coordinator.txns {
        let was = b0.broker.coordinator.txns.get(tid).map(|m| (m.state, m.producer_epoch));
        if was != Some((m1.state, m1.producer_epoch)) {
            let from = was.map(|(s, e)| format!("{} e{e} → ", s.name())).unwrap_or_default();
            out.push(format!("'{tid}' {from}{} e{}", m1.state.name(), m1.producer_epoch));
        }
    }
    for (r0, r1) in b0.readers.list.iter().zip(&b1.readers.list) {
        for e in r1.polls.iter().skip(r0.polls.len()) {
            if let Event::Poll { consumer, partition, fetch_offset, records, position_after, .. } = e {
                let got = records.iter().map(|(o, v)| format!("{o}:{v}")).collect::<Vec<_>>().join(" ");
                out.push(format!(
                    "{consumer} polls {partition} from {fetch_offset}: [{got}] → position {position_after}"
                ));
            }
        }
    }
}

/// What one broker's step appended to its logs, or cut from them.
fn log_changes(who: &str, was: &Broker, now: &Broker, out: &mut Vec<String>) {
    for (tp, log) in &now.replica_manager.logs {
        let old = was.replica_manager.logs.get(tp).map(|l| l.log_end_offset()).unwrap_or(0);
        if log.log_end_offset() < old {
            out.push(format!("{who}truncates {tp} to {}", log.log_end_offset()));
        }
        for b in log.batches().filter(|b| b.base_offset >= old) {
            match &b.body {
                BatchBody::Data(records) => out.push(format!(
                    "{who}appends {} at {tp}@{}",
                    records.iter().map(|r| record_text(tp, &r.value)).collect::<Vec<_>>().join(","),
                    b.base_offset
                )),
                BatchBody::Control(m) => out.push(format!(
                    "{who}writes {} marker for pid {} at {tp}@{}",
                    m.map(|m| m.result.name()).unwrap_or("empty"),
                    b.producer_id().unwrap_or(-1),
                    b.base_offset
                )),
            }
        }
    }
}

/// A record's value, a `__consumer_offsets` record in short: `offset g t/0@1`, `group g generation 1`.
fn record_text(tp: &TopicPartition, value: &str) -> String {
    if tp.topic != GROUP_METADATA_TOPIC {
        return value.to_string();
    }
    match serde_json::from_str::<OffsetsRecord>(value) {
        Ok(OffsetsRecord::Offset { group, partition, offset, .. }) => format!("offset {group} {partition}@{offset}"),
        Ok(OffsetsRecord::Group { group, metadata }) => format!("group {group} generation {}", metadata.generation),
        Err(_) => value.to_string(),
    }
}

fn producer_changes(p0: &ProducerNode, p1: &ProducerNode, out: &mut Vec<String>) {
    if p1.incarnation > p0.incarnation {
        out.push(format!("{} crashed; new instance {} calls initTransactions", p0.producer.id, p1.producer.id));
    }
    for e in p1.events.iter().skip(p0.events.len()) {
        match e {
            Event::Invoke { call: ProducerCall::Send { partition, values }, .. } => {
                out.push(format!("send {} → {partition}", values.join(",")))
            }
            Event::Complete { call_id, outcome, .. } => {
                // A commit's or abort's completion is told by the phase change below.
                let Some(value) = p1.events.iter().find_map(|x| match x {
                    Event::Invoke { call_id: c, call: ProducerCall::Send { values, .. }, .. } if c == call_id => {
                        Some(values.join(","))
                    }
                    _ => None,
                }) else {
                    continue;
                };
                out.push(match outcome {
                    CallOutcome::Sent { first_offset, duplicate, .. } => {
                        format!(
                            "send of {value} acknowledged @{first_offset}{}",
                            if *duplicate { " (duplicate)" } else { "" }
                        )
                    }
                    CallOutcome::Failed { error } => format!("send of {value} failed: {error}"),
                    other => format!("send of {value}: {other:?}"),
                })
            }
            _ => {}
        }
    }
    if p1.phase != p0.phase {
        out.push(match &p1.phase {
            Phase::Initializing => "initializing".into(),
            Phase::Choosing { txn } => format!("ready for transaction {txn}"),
            Phase::Sending { awaiting, .. } => format!("will abort once {awaiting} send(s) complete"),
            Phase::Ending { result, .. } => format!(
                "{} called",
                if *result == TransactionResult::Commit { "commitTransaction()" } else { "abortTransaction()" }
            ),
            Phase::Done(Stop::Finished) => "script done".into(),
            Phase::Done(Stop::Failed(e)) => format!("stops: {}", e.name()),
            Phase::Done(Stop::Crashed) => "crashed; stays down".into(),
        });
    }
    if p1.producer.state != p0.producer.state {
        out.push(format!("client {:?} → {:?}", p0.producer.state, p1.producer.state));
    }
}

/// One replica's log (offset:value, markers by result and pid) with its HW and LSO.
fn log_text(broker: &Broker, tp: &TopicPartition) -> String {
    let Some(log) = broker.partition(tp) else { return "not hosted".into() };
    let entries: Vec<String> = log
        .batches()
        .flat_map(|b| match &b.body {
            BatchBody::Data(records) => records.iter().map(|r| format!("{}:{}", r.offset, r.value)).collect::<Vec<_>>(),
            BatchBody::Control(m) => vec![format!(
                "{}:{}({})",
                b.base_offset,
                m.map(|m| m.result.name()).unwrap_or("EMPTY"),
                b.producer_id().unwrap_or(-1)
            )],
        })
        .collect();
    format!(
        "[{}] HW {} LSO {}",
        entries.join(" "),
        log.high_watermark(),
        log.last_stable_offset(&broker.config.mutations)
    )
}

/// The partition logs (offset:value, markers by result and pid) with HW and LSO, the coordinator's
/// transactions, and each reader's deliveries per partition.
pub fn snapshot(s: &TxnState) -> String {
    let node = broker_of(s);
    let broker: &Broker = &node.broker;
    let mut parts = Vec::new();
    for tp in node.leader_logs().keys().copied() {
        if node.replication.is_none() {
            parts.push(format!("{tp} {}", log_text(broker, tp)));
            continue;
        }
        // Each replica, the standing leader's marked, a dead broker's as it was when it died.
        let leader = node.leader_of(tp).id;
        for b in node.brokers() {
            let role = if b.id == leader { " (leader)" } else { "" };
            let down = if node.is_down(b.id) { " (down)" } else { "" };
            parts.push(format!("{tp} on {}{role}{down} {}", node_name(&b.node()), log_text(b, tp)));
        }
    }
    let txns: Vec<String> = broker
        .coordinator
        .txns
        .values()
        .map(|m| {
            let parts = if m.state == TransactionState::Ongoing || !m.topic_partitions.is_empty() {
                format!(" [{}]", m.topic_partitions.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(","))
            } else {
                String::new()
            };
            format!("'{}' pid {} e{} {}{parts}", m.transactional_id, m.producer_id, m.producer_epoch, m.state.name())
        })
        .collect();
    if !txns.is_empty() {
        parts.push(txns.join(", "));
    }
    for (id, g) in &broker.groups.groups {
        let offsets: Vec<String> = g.offsets.iter().map(|(tp, (o, _))| format!("{tp}@{o}")).collect();
        let pending: Vec<String> = broker
            .groups
            .pending_txn_offsets
            .iter()
            .flat_map(|(pid, p)| p.iter().map(move |((_, tp), o)| format!("{tp}@{} (pid {pid})", o.offset.0)))
            .collect();
        let pending = if pending.is_empty() { String::new() } else { format!(", pending {}", pending.join(" ")) };
        parts.push(format!(
            "group {id} {:?} gen {}, committed [{}]{pending}",
            g.state,
            g.generation_id,
            offsets.join(" ")
        ));
    }
    for r in &node.readers.list {
        let per_tp: Vec<String> = broker
            .replica_manager
            .logs
            .keys()
            .map(|tp| {
                let offsets: Vec<String> =
                    r.delivered().filter(|(p, _, _)| *p == tp).map(|(_, o, _)| o.to_string()).collect();
                format!("{tp} [{}]", offsets.join(","))
            })
            .collect();
        parts.push(format!("{} read {}", r.consumer.id, per_tp.join(" ")));
    }
    parts.join(" | ")
}
