//! What clients observed, as Jepsen records it, and the history invariants over it. The final partition
//! logs are the ground truth for each record's transaction and outcome.

use crate::catalogue::{Invariant, Violation};
use crate::log_facts::LogFacts;
use crate::state::Logs;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use txnsim_engine::producer::{ConsumerGroupMetadata, OpOutput};
use txnsim_engine::{IsolationLevel, KafkaError, Names, Offset, Rename, TimeMs, TopicPartition, TransactionResult};

/// A producer call, as invoked.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum ProducerCall {
    Init,
    Begin,
    Send {
        partition: TopicPartition,
        values: Vec<String>,
    },
    Commit,
    Abort,
    /// `sendOffsetsToTransaction(offsets, groupMetadata)`: the input offsets committed with the
    /// transaction, under KIP-447's consumer group metadata.
    SendOffsets {
        group: ConsumerGroupMetadata,
        offsets: Vec<(TopicPartition, i64)>,
    },
}

/// How a producer call ended.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum CallOutcome {
    Ok,
    /// A send's acknowledgement: where its records went.
    Sent {
        first_offset: Offset,
        last_offset: Offset,
        duplicate: bool,
    },
    /// Kafka's error name.
    Failed {
        error: String,
    },
    /// No answer (the process crashed, or the run ended first): it may or may not have taken effect.
    Unknown,
}

impl CallOutcome {
    /// How the application saw a producer call complete.
    pub fn of(result: &Result<OpOutput, KafkaError>) -> CallOutcome {
        match result {
            Ok(OpOutput::Sent { ack, .. }) => CallOutcome::Sent {
                first_offset: ack.first_offset,
                last_offset: ack.last_offset,
                duplicate: ack.duplicate,
            },
            Ok(_) => CallOutcome::Ok,
            Err(e) => CallOutcome::Failed { error: e.name().to_string() },
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// A producer call began. `call_id` pairs it with its completion.
    Invoke {
        time_ms: TimeMs,
        process: String,
        call_id: u64,
        call: ProducerCall,
    },
    Complete {
        time_ms: TimeMs,
        process: String,
        call_id: u64,
        outcome: CallOutcome,
    },
    /// One consumer poll of one partition: the fetch it answered and what it delivered.
    Poll {
        time_ms: TimeMs,
        consumer: String,
        isolation: IsolationLevel,
        partition: TopicPartition,
        fetch_offset: Offset,
        /// HW and LSO from the fetch response.
        high_watermark: Offset,
        last_stable_offset: Offset,
        /// `(offset, value)` in delivery order.
        records: Vec<(Offset, String)>,
        position_after: Offset,
    },
    /// The consumer was (re)assigned and sought: its delivered sequence restarts here.
    Seek {
        time_ms: TimeMs,
        consumer: String,
        partition: TopicPartition,
        offset: Offset,
    },
}

impl Event {
    pub fn time_ms(&self) -> TimeMs {
        match self {
            Event::Invoke { time_ms, .. }
            | Event::Complete { time_ms, .. }
            | Event::Poll { time_ms, .. }
            | Event::Seek { time_ms, .. } => *time_ms,
        }
    }
}

impl Rename for Event {
    fn rename(&mut self, names: Names<'_>) {
        match self {
            Event::Invoke { process, call, .. } => {
                names(process);
                if let ProducerCall::Send { values, .. } = call {
                    values.rename(names);
                }
            }
            Event::Complete { process, .. } => names(process),
            Event::Poll { consumer, records, .. } => {
                names(consumer);
                records.iter_mut().for_each(|(_, value)| names(value));
            }
            Event::Seek { consumer, .. } => names(consumer),
        }
    }
}

/// A whole run's observations, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    pub events: Vec<Event>,
    /// What a driver that sees the leaders knows and no client saw: each rise of a partition's leader's
    /// HW past every HW before it, in time order. A record below a leader's HW is on every ISR member and
    /// stays committed under a clean election, though a later leader's HW may lag it for a while
    /// (KIP-101): `precommitted-read` counts it from then. Drivers that cannot see the leaders leave it
    /// empty, and the polls' HWs stand in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leader_high_watermarks: Vec<LeaderHighWatermark>,
}

/// A partition's leader's HW reached `high_watermark` at `time_ms` (`History::leader_high_watermarks`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderHighWatermark {
    pub time_ms: TimeMs,
    pub partition: TopicPartition,
    pub high_watermark: Offset,
}

impl History {
    pub fn push(&mut self, e: Event) {
        self.events.push(e);
    }

    /// Acknowledged sends: `(process, partition, values, first_offset, duplicate)`, in completion order.
    fn acks(&self) -> Vec<(String, TopicPartition, Vec<String>, Offset, bool)> {
        let mut invoked: BTreeMap<(String, u64), (TopicPartition, Vec<String>)> = BTreeMap::new();
        let mut out = Vec::new();
        for e in &self.events {
            match e {
                Event::Invoke { process, call_id, call: ProducerCall::Send { partition, values }, .. } => {
                    invoked.insert((process.clone(), *call_id), (partition.clone(), values.clone()));
                }
                Event::Complete {
                    process,
                    call_id,
                    outcome: CallOutcome::Sent { first_offset, duplicate, .. },
                    ..
                } => {
                    if let Some((tp, values)) = invoked.get(&(process.clone(), *call_id)) {
                        out.push((process.clone(), tp.clone(), values.clone(), *first_offset, *duplicate));
                    }
                }
                _ => {}
            }
        }
        out
    }
}

/// Checks every history invariant against the final logs. `logs` are the partition leaders' logs at the end.
pub fn check_history(history: &History, logs: &dyn Logs) -> Vec<Violation> {
    check_history_exempting(history, logs, &[])
}

/// `check_history` with `duplicate` and `nonmonotonic-send` leaving out the producers in `unordered`:
/// producers without idempotence, whose records a real cluster may store twice or out of order (a
/// target sweep's plain producer, docs/real-kafka.md).
pub fn check_history_exempting(history: &History, logs: &dyn Logs, unordered: &[&str]) -> Vec<Violation> {
    let facts: BTreeMap<&TopicPartition, LogFacts> = logs.logs().map(|(tp, l)| (tp, LogFacts::of(l))).collect();
    let exempt_values = sent_values(history, unordered);
    let mut out = Vec::new();
    check_offsets_and_values(history, &facts, &mut out);
    for (tp, f) in &facts {
        out.extend(check_duplicates(tp, f, |v| !exempt_values.contains(v)));
    }
    check_sends(history, unordered, &mut out);
    check_polls(history, &facts, &mut out);
    out
}

/// Every value the producers in `processes` were asked to send.
fn sent_values<'h>(history: &'h History, processes: &[&str]) -> std::collections::BTreeSet<&'h str> {
    let mut out = std::collections::BTreeSet::new();
    for e in &history.events {
        if let Event::Invoke { process, call: ProducerCall::Send { values, .. }, .. } = e {
            if processes.contains(&process.as_str()) {
                out.extend(values.iter().map(String::as_str));
            }
        }
    }
    out
}

/// Who said which value an offset holds, named only when two disagree.
enum Claimant<'a> {
    Log,
    Ack(&'a str),
    Poll(&'a str),
}

impl std::fmt::Display for Claimant<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Claimant::Log => write!(f, "the log"),
            Claimant::Ack(process) => write!(f, "{process}'s ack"),
            Claimant::Poll(consumer) => write!(f, "{consumer}'s poll"),
        }
    }
}

/// A consumer on a partition, as a witness names it (formatted only into a violation).
struct Reader<'a> {
    consumer: &'a str,
    isolation: IsolationLevel,
    partition: &'a TopicPartition,
}

impl std::fmt::Display for Reader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}) on {}", self.consumer, self.isolation.name(), self.partition)
    }
}

/// `duplicate` and `inconsistent-offsets`: one offset per value, one value per offset.
fn check_offsets_and_values(history: &History, facts: &BTreeMap<&TopicPartition, LogFacts>, out: &mut Vec<Violation>) {
    type Claims<'c> = BTreeMap<(TopicPartition, Offset), (String, Claimant<'c>)>;
    fn claim<'c>(
        at: &mut Claims<'c>,
        tp: &TopicPartition,
        offset: Offset,
        value: &str,
        who: Claimant<'c>,
        out: &mut Vec<Violation>,
    ) {
        match at.get(&(tp.clone(), offset)) {
            Some((v, by)) if v != value => out.push(Violation::new(
                Invariant::InconsistentOffsets,
                format!("{tp} offset {offset}: {by} says {v:?}, {who} says {value:?}"),
            )),
            Some(_) => {}
            None => {
                at.insert((tp.clone(), offset), (value.to_string(), who));
            }
        }
    }
    let acks = history.acks();
    let mut at = Claims::new();
    for (tp, f) in facts {
        for (o, v) in &f.values {
            claim(&mut at, tp, *o, v, Claimant::Log, out);
        }
    }
    for (process, tp, values, first, _) in &acks {
        for (i, v) in values.iter().enumerate() {
            claim(&mut at, tp, first + i as u64, v, Claimant::Ack(process), out);
        }
    }
    for e in &history.events {
        if let Event::Poll { consumer, partition, records, .. } = e {
            for (o, v) in records {
                claim(&mut at, partition, *o, v, Claimant::Poll(consumer), out);
            }
        }
    }
}

/// `duplicate` on one partition: the first value stored at two offsets, among the values `counted`
/// keeps (a real cluster's target sweep leaves out a non-idempotent producer's, which Kafka may store
/// twice).
pub fn check_duplicates(tp: &TopicPartition, facts: &LogFacts, counted: impl Fn(&str) -> bool) -> Option<Violation> {
    let mut first_at: BTreeMap<&str, Offset> = BTreeMap::new();
    for (o, v) in facts.values.iter().filter(|(_, v)| counted(v)) {
        if let Some(prev) = first_at.insert(v, *o) {
            return Some(Violation::new(
                Invariant::Duplicate,
                format!("{tp}: value {v:?} stored at offsets {prev} and {o}"),
            ));
        }
    }
    None
}

/// `nonmonotonic-send`: successive acknowledged sends of one producer to one partition, in the order
/// they were invoked, land at increasing offsets; the producers in `unordered` are not held to it.
fn check_sends(history: &History, unordered: &[&str], out: &mut Vec<Violation>) {
    let mut order: Vec<(String, u64, TopicPartition)> = Vec::new();
    let mut acked: BTreeMap<(String, u64), Offset> = BTreeMap::new();
    for e in &history.events {
        match e {
            Event::Invoke { process, call_id, call: ProducerCall::Send { partition, .. }, .. }
                if !unordered.contains(&process.as_str()) =>
            {
                order.push((process.clone(), *call_id, partition.clone()));
            }
            Event::Complete { process, call_id, outcome: CallOutcome::Sent { first_offset, .. }, .. } => {
                acked.insert((process.clone(), *call_id), *first_offset);
            }
            _ => {}
        }
    }
    let mut last: BTreeMap<(String, TopicPartition), (u64, Offset)> = BTreeMap::new();
    for (process, call_id, tp) in order {
        let Some(&offset) = acked.get(&(process.clone(), call_id)) else { continue };
        let key = (process.clone(), tp.clone());
        if let Some(&(prev_call, prev)) = last.get(&key) {
            if offset <= prev {
                out.push(Violation::new(
                    Invariant::NonmonotonicSend,
                    format!("{process} -> {tp}: send #{call_id} acknowledged at offset {offset}, after send #{prev_call} at {prev}"),
                ));
            }
        }
        last.insert(key, (call_id, offset));
    }
}

fn check_polls(history: &History, facts: &BTreeMap<&TopicPartition, LogFacts>, out: &mut Vec<Violation>) {
    // Per consumer and partition: the offsets delivered since the last seek, and where that run began.
    let mut delivered: BTreeMap<(String, TopicPartition), (Offset, Vec<Offset>)> = BTreeMap::new();
    // The highest HW any leader has reported per partition: what is committed stays committed under a
    // clean election, though a new leader's (or a follower's) HW may lag behind it for a while.
    let mut committed: BTreeMap<&TopicPartition, Offset> = BTreeMap::new();
    let mut leader_hws = history.leader_high_watermarks.iter().peekable();
    let empty = LogFacts::default();
    for e in &history.events {
        // The leaders' HWs up to this event's time (a poll's is when its answer arrived).
        let now = e.time_ms();
        while let Some(h) = leader_hws.next_if(|h| h.time_ms <= now) {
            let hw = committed.entry(&h.partition).or_default();
            *hw = (*hw).max(h.high_watermark);
        }
        match e {
            Event::Seek { consumer, partition, offset, .. } => {
                delivered.insert((consumer.clone(), partition.clone()), (*offset, Vec::new()));
            }
            Event::Poll {
                consumer,
                isolation,
                partition,
                fetch_offset,
                high_watermark,
                last_stable_offset,
                records,
                position_after,
                ..
            } => {
                let f = facts.get(partition).unwrap_or(&empty);
                let who = Reader { consumer, isolation: *isolation, partition };
                let hw = committed.entry(partition).or_default();
                *hw = (*hw).max(*high_watermark);
                let committed_hw = *hw;
                let run = delivered.entry((consumer.clone(), partition.clone())).or_insert((*fetch_offset, Vec::new()));
                for (o, v) in records {
                    if let Some(&prev) = run.1.last() {
                        if *o <= prev {
                            out.push(Violation::new(
                                Invariant::NonmonotonicPoll,
                                format!("{who}: delivered offset {o} ({v:?}) after {prev}"),
                            ));
                        }
                    }
                    run.1.push(*o);
                    if *isolation == IsolationLevel::ReadCommitted {
                        check_committed_read(&who, *o, v, committed_hw, *last_stable_offset, f, out);
                    }
                }
                // Everything this isolation level admits between the fetch offset and the new position
                // must have been delivered by this poll.
                let got: BTreeSet<Offset> = records.iter().map(|r| r.0).collect();
                let admits = |o: Offset| match isolation {
                    IsolationLevel::ReadUncommitted => true,
                    IsolationLevel::ReadCommitted => f.is_committed_data(o),
                };
                if let Some((o, v)) =
                    f.values.range(*fetch_offset..*position_after).find(|(o, _)| admits(**o) && !got.contains(o))
                {
                    out.push(Violation::new(
                        Invariant::PollSkip,
                        format!("{who}: poll from {fetch_offset} moved to {position_after} without delivering offset {o} ({v:?})"),
                    ));
                }
                let no_progress = *position_after == *fetch_offset && records.is_empty();
                let bound = match isolation {
                    IsolationLevel::ReadCommitted => *last_stable_offset,
                    IsolationLevel::ReadUncommitted => *high_watermark,
                };
                if no_progress && *fetch_offset < bound {
                    out.push(Violation::new(
                        Invariant::PositionReachesLso,
                        format!("{who}: stuck at position {fetch_offset} below the fetch bound {bound} (HW {high_watermark}, LSO {last_stable_offset})"),
                    ));
                }
            }
            _ => {}
        }
    }
    check_passed_transactions(history, facts, out);
}

/// `aborted-read` and `precommitted-read` for one record a read_committed consumer delivered.
fn check_committed_read(
    who: &Reader,
    offset: Offset,
    value: &str,
    hw: Offset,
    lso: Offset,
    f: &LogFacts,
    out: &mut Vec<Violation>,
) {
    if let Some(t) = f.txn_of(offset) {
        match t.marker {
            Some(m) if m.result == TransactionResult::Abort => out.push(Violation::new(
                Invariant::AbortedRead,
                format!("{who}: delivered offset {offset} ({value:?}) of an aborted transaction of producer id {} (its ABORT marker at offset {})", t.producer_id, m.offset),
            )),
            Some(m) if m.offset >= hw => out.push(Violation::new(
                Invariant::PrecommittedRead,
                format!("{who}: delivered offset {offset} ({value:?}) while its COMMIT marker at {} was not below the HW {hw}", m.offset),
            )),
            None => out.push(Violation::new(
                Invariant::PrecommittedRead,
                format!("{who}: delivered offset {offset} ({value:?}) of producer {}'s transaction, which has no marker", t.producer_id),
            )),
            Some(_) => {}
        }
    }
    if offset >= lso {
        out.push(Violation::new(
            Invariant::PrecommittedRead,
            format!("{who}: delivered offset {offset} ({value:?}) at or above the LSO {lso}"),
        ));
    }
}

/// `partial-read` and `lost-write`: judged over each consumer's whole run on a partition, once its
/// position has passed a transaction or an acknowledged write.
fn check_passed_transactions(history: &History, facts: &BTreeMap<&TopicPartition, LogFacts>, out: &mut Vec<Violation>) {
    // Per consumer and partition: isolation, start offset, furthest position, offsets delivered.
    type Run = (IsolationLevel, Offset, Offset, BTreeSet<Offset>);
    let mut runs: BTreeMap<(String, TopicPartition), Run> = BTreeMap::new();
    let mut finished = Vec::new();
    for e in &history.events {
        match e {
            Event::Seek { consumer, partition, offset, .. } => {
                if let Some(run) = runs.remove(&(consumer.clone(), partition.clone())) {
                    finished.push(((consumer.clone(), partition.clone()), run));
                }
                let _ = offset;
            }
            Event::Poll { consumer, isolation, partition, fetch_offset, records, position_after, .. } => {
                let run = runs.entry((consumer.clone(), partition.clone())).or_insert((
                    *isolation,
                    *fetch_offset,
                    *fetch_offset,
                    BTreeSet::new(),
                ));
                run.2 = run.2.max(*position_after);
                run.3.extend(records.iter().map(|r| r.0));
            }
            _ => {}
        }
    }
    finished.extend(runs);
    let acks = history.acks();
    let empty = LogFacts::default();
    for ((consumer, tp), (isolation, start, end, got)) in finished {
        let f = facts.get(&tp).unwrap_or(&empty);
        let who = Reader { consumer: &consumer, isolation, partition: &tp };
        if isolation == IsolationLevel::ReadCommitted {
            for t in f.txns.iter().filter(|t| t.outcome() == Some(TransactionResult::Commit)) {
                let want: Vec<Offset> = t.record_offsets.iter().copied().filter(|o| *o >= start && *o < end).collect();
                let read = want.iter().filter(|o| got.contains(o)).count();
                if read > 0 && read < want.len() {
                    let missing = want.iter().find(|o| !got.contains(o)).expect("some missing");
                    out.push(Violation::new(
                        Invariant::PartialRead,
                        format!("{who}: delivered {read} of the {} records of producer {}'s committed transaction from {}, not offset {missing}", want.len(), t.producer_id, t.first_offset),
                    ));
                }
            }
        }
        for (process, atp, values, first, _) in acks.iter().filter(|a| a.1 == tp) {
            for (i, v) in values.iter().enumerate() {
                let o = first + i as u64;
                let visible = match isolation {
                    IsolationLevel::ReadCommitted => f.is_committed_data(o),
                    IsolationLevel::ReadUncommitted => f.values.contains_key(&o),
                };
                if o >= start && o < end && visible && f.values.get(&o) == Some(v) && !got.contains(&o) {
                    out.push(Violation::new(
                        Invariant::LostWrite,
                        format!("{who}: passed offset {o} ({v:?}, acknowledged to {process} on {atp}) without delivering it (read {start}..{end})"),
                    ));
                }
            }
        }
    }
}

/// `read-uncommitted-superset`: two fresh reads from the same offset and state.
pub fn check_read_superset(
    tp: &TopicPartition,
    from: Offset,
    uncommitted: &[(Offset, String)],
    committed: &[(Offset, String)],
) -> Vec<Violation> {
    let ru: BTreeSet<&(Offset, String)> = uncommitted.iter().collect();
    match committed.iter().find(|r| !ru.contains(r)) {
        Some((o, v)) => vec![Violation::new(
            Invariant::UncommittedSupersetOfCommitted,
            format!("{tp} from {from}: read_committed delivered offset {o} ({v:?}), read_uncommitted did not"),
        )],
        None => Vec::new(),
    }
}
