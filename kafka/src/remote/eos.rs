//! The `eos` profile's consume-transform-produce loop against a real cluster (KIP-98, KIP-447): each
//! processor `wN` is a librdkafka consumer in the run's group (classic protocol, eager assignment,
//! read_committed, no auto-commit) subscribed to the input topic, and a transactional producer of its own
//! id `tx-wN`. A processor step polls; for what it got it begins a transaction, writes each input's
//! output (`output_value(v, attempt)`) to the output partition of the input's partition mod 2, sends the
//! offsets after the last record of each partition with the group metadata it polled under, then
//! commits, or aborts with the profile's chance; after an abort or any error it rewinds to the group's
//! committed offsets. A processor runs on a thread of its own, paced by the wall clock, its choices
//! drawn from a `SimRng` seeded from the seed's: when it acts, commit or abort, and its faults (a pause
//! past `max.poll.interval.ms` mid-transaction that makes it a zombie the group's generation fences, a
//! restart of both clients, a LeaveGroup and rejoin). Its producer calls and its member's polls and
//! seeks go into the seed's history as the other clients' do.

use super::exec::{error_name, lock, CallResult, Client, Ctx, Shared, CALL_TIMEOUT, POLL_BATCH};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError as RdError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset as RdOffset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use txnsim_engine::producer::ConsumerGroupMetadata;
use txnsim_engine::{IsolationLevel, Offset, TopicPartition};
use txnsim_properties::exactly_once::output_value;
use txnsim_properties::{CallOutcome, Event, ProducerCall};
use txnsim_sim::profile::EosParams;
use txnsim_sim::rng::SimRng;

/// Kafka's default `group.min.session.timeout.ms`: the session a processor falls back to when the
/// cluster refuses the profile's shorter one (INVALID_SESSION_TIMEOUT).
pub const KAFKA_MIN_SESSION_TIMEOUT_MS: u64 = 6_000;
/// A processor's `transaction.timeout.ms`: longer than a zombie's pause, so the group's generation, not
/// the coordinator's timeout, is what fences the zombie.
const PROCESSOR_TXN_TIMEOUT_MS: u64 = 10_000;
/// Chance per processor transaction, with the pause fault on, that the processor stops between its
/// writes and its offsets for longer than `max.poll.interval.ms` (librdkafka then leaves the group).
const ZOMBIE_PROB: f64 = 0.08;
/// Chance per processor step, with the restart fault on, that both its clients are closed and a new
/// instance of the processor starts.
const RESTART_PROB: f64 = 0.004;
/// The longest the application waits for one producer call (each is given `CALL_TIMEOUT`).
const CALL_LIMIT: Duration = Duration::from_secs(10);
/// How long the first poll of a step may wait (rebalance callbacks are served there).
const POLL_WAIT: Duration = Duration::from_millis(20);
/// A processor's steps are `STEP_TICKS` of the profile's ticks apart (each of the sim's ticks is one
/// client's step, shared by all), and at least `MIN_STEP_MS`.
const STEP_TICKS: u64 = 3;
const MIN_STEP_MS: u64 = 5;
/// How long the group's committed offsets may take to be read back (stable) after the run.
const OFFSETS_BUDGET: Duration = Duration::from_secs(20);
/// Errors that say a processor's transaction belonged to a member or instance since replaced.
const FENCING_ERRORS: [&str; 5] =
    ["ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "FENCED_INSTANCE_ID", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"];

/// The loop's phases, as the seed's main thread moves them.
pub const RUNNING: u8 = 0;
/// The workload is over: the processors consume what is left, without faults.
pub const DRAINING: u8 = 1;
pub const STOPPED: u8 = 2;

/// What the processors did over a seed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EosCounts {
    /// Processor transactions whose `commit_transaction` returned ok.
    pub committed: u64,
    /// Processor transactions aborted by the processor (`abort_transaction` returned ok).
    pub aborted: u64,
    /// Assignments the members received (each rebalance a member went through).
    pub rebalances: u64,
    /// `send_offsets_to_transaction` or `commit_transaction` failing with a fencing error (ILLEGAL_GENERATION,
    /// UNKNOWN_MEMBER_ID, PRODUCER_FENCED, ...): a zombie's transaction refused.
    pub zombies_fenced: u64,
    /// Outputs of the transactions committed.
    pub outputs_committed: u64,
    /// Processor instances closed and started anew (restart fault, or an error only a restart clears).
    pub restarts: u64,
}

impl EosCounts {
    pub fn add(&mut self, c: &EosCounts) {
        self.committed += c.committed;
        self.aborted += c.aborted;
        self.rebalances += c.rebalances;
        self.zombies_fenced += c.zombies_fenced;
        self.outputs_committed += c.outputs_committed;
        self.restarts += c.restarts;
    }

    pub fn describe(&self) -> String {
        format!(
            "{} processor transactions committed, {} aborted, {} rebalances, {} zombies fenced, {} restarts, {} outputs committed",
            self.committed, self.aborted, self.rebalances, self.zombies_fenced, self.restarts, self.outputs_committed
        )
    }
}

/// What the exactly-once check needs beyond the logs: the run's topic names and the group's committed
/// offsets after the run (OffsetFetch with require_stable).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EosOutcome {
    pub input_topic: String,
    pub output_topic: String,
    pub group: String,
    /// Per input partition with a committed offset.
    pub committed: Vec<(TopicPartition, i64)>,
}

/// What every processor of a seed shares.
pub(super) struct Loop {
    pub(super) params: EosParams,
    pub(super) bootstrap: String,
    /// The run's names: `<prefix>-in`, `<prefix>-out`, `<prefix>-g`, `<prefix>-tx-wN`.
    pub(super) input_topic: String,
    pub(super) output_topic: String,
    pub(super) group: String,
    pub(super) prefix: String,
    pub(super) rec: Shared,
    /// The pause and restart faults are on for this seed.
    pub(super) zombies: bool,
    pub(super) restarts: bool,
    pub(super) tick_ms: (u64, u64),
    /// RUNNING, DRAINING or STOPPED.
    pub(super) phase: AtomicU8,
    /// The session timeout in force: the profile's, or Kafka's minimum once the cluster refused it.
    pub(super) session_ms: AtomicU64,
}

impl Loop {
    fn session_ms(&self) -> u64 {
        self.session_ms.load(Ordering::Relaxed)
    }

    /// `max.poll.interval.ms`: the rebalance timeout, at least the session timeout (librdkafka's rule).
    fn max_poll_ms(&self) -> u64 {
        self.params.rebalance_timeout_ms.max(self.session_ms())
    }
}

/// The member's view, kept by its consumer's context: where each assigned partition's next record is.
struct MemberCtx {
    rec: Shared,
    member: String,
    position: Mutex<BTreeMap<TopicPartition, Offset>>,
    assignments: AtomicU64,
    /// An assignment whose start offsets could not be read: the consumer is replaced before its records
    /// are used (where librdkafka starts is then unknown).
    unknown_start: AtomicBool,
    /// The cluster refused the session timeout.
    invalid_session: AtomicBool,
    /// The consumer is being closed (on a thread of its own): an assignment is no longer the member's.
    closing: AtomicBool,
}

impl ClientContext for MemberCtx {
    fn error(&self, error: RdError, _reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::InvalidSessionTimeout) {
            self.invalid_session.store(true, Ordering::Relaxed);
        }
    }
}

impl ConsumerContext for MemberCtx {
    /// Eager assignment, with the start of each assigned partition read from the group (OffsetFetch with
    /// require_stable: librdkafka asks for stable offsets at read_committed) and assigned explicitly, so
    /// the history's seek says where the member starts.
    fn rebalance(&self, base: &BaseConsumer<Self>, err: RDKafkaRespErr, tpl: &mut TopicPartitionList) {
        let mut position = self.position.lock().unwrap_or_else(|e| e.into_inner());
        position.clear();
        if err != RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS || self.closing.load(Ordering::Relaxed) {
            let _ = base.unassign();
            return;
        }
        self.assignments.fetch_add(1, Ordering::Relaxed);
        let starts = base.committed_offsets(tpl.clone(), CALL_TIMEOUT).ok().and_then(|list| {
            list.elements()
                .iter()
                .map(|e| {
                    e.error().ok()?;
                    let o = match e.offset() {
                        RdOffset::Offset(n) if n >= 0 => n as Offset,
                        // No offset committed: `auto.offset.reset=earliest`, and nothing is ever deleted.
                        RdOffset::Invalid | RdOffset::Beginning => 0,
                        _ => return None,
                    };
                    Some((TopicPartition::new(e.topic(), e.partition() as u32), o))
                })
                .collect::<Option<Vec<_>>>()
        });
        let Some(starts) = starts else {
            self.unknown_start.store(true, Ordering::Relaxed);
            let _ = base.assign(tpl);
            return;
        };
        let mut list = TopicPartitionList::new();
        for (tp, o) in &starts {
            if list.add_partition_offset(&tp.topic, tp.partition as i32, RdOffset::Offset(*o as i64)).is_err() {
                self.unknown_start.store(true, Ordering::Relaxed);
            }
        }
        if base.assign(&list).is_err() {
            self.unknown_start.store(true, Ordering::Relaxed);
            return;
        }
        let mut rec = lock(&self.rec);
        for (tp, o) in starts {
            let time_ms = rec.now_ms();
            rec.push(Event::Seek { time_ms, consumer: self.member.clone(), partition: tp.clone(), offset: o });
            position.insert(tp, o);
        }
    }
}

type Member = BaseConsumer<MemberCtx>;

/// One processor and its clients.
struct Processor<'a> {
    lp: &'a Loop,
    name: String,
    member: String,
    transactional_id: String,
    rng: SimRng,
    /// Instances started so far; attempts are named `wN.i<instance>.<transaction>`.
    instance: u64,
    txns: u64,
    producer: Option<Client>,
    consumer: Option<Member>,
    counts: EosCounts,
    ops: u64,
    by_kind: BTreeMap<String, u64>,
}

/// What one processor's thread hands back.
pub struct ProcessorRun {
    pub counts: EosCounts,
    pub ops: u64,
    pub by_kind: BTreeMap<String, u64>,
}

/// Runs processor `name` until the loop stops (or `limit` passes), then closes its clients.
pub(super) fn run_processor(lp: &Loop, name: &str, seed: u64, limit: Duration) -> ProcessorRun {
    let mut p = Processor {
        lp,
        name: name.to_string(),
        member: EosParams::member_of(name),
        transactional_id: format!("{}-tx-{name}", lp.prefix),
        rng: SimRng::new(seed),
        instance: 1,
        txns: 0,
        producer: None,
        consumer: None,
        counts: EosCounts::default(),
        ops: 0,
        by_kind: BTreeMap::new(),
    };
    let started = Instant::now();
    while lp.phase.load(Ordering::Relaxed) != STOPPED && started.elapsed() < limit {
        let pause = (p.rng.range(lp.tick_ms.0, lp.tick_ms.1) * STEP_TICKS).max(MIN_STEP_MS);
        std::thread::sleep(Duration::from_millis(pause));
        p.step(lp.phase.load(Ordering::Relaxed) == RUNNING);
    }
    p.close();
    ProcessorRun { counts: p.counts, ops: p.ops, by_kind: p.by_kind }
}

impl Processor<'_> {
    fn fault(&mut self, kind: &str) {
        *self.by_kind.entry(kind.to_string()).or_insert(0) += 1;
    }

    fn step(&mut self, faults: bool) {
        if faults && self.lp.restarts && self.rng.chance(RESTART_PROB) {
            self.fault("restart-client");
            self.restart();
            return;
        }
        if faults && self.consumer.is_some() && self.rng.chance(self.lp.params.leave_prob) {
            // LeaveGroup (librdkafka's close), and a new member some time later.
            let ms = self.rng.range(self.lp.params.leave_ms.0, self.lp.params.leave_ms.1);
            self.fault("leave-group");
            self.drop_consumer();
            std::thread::sleep(Duration::from_millis(ms));
            return;
        }
        // The producer first: a new instance's InitProducerId ends what the last one left open, before
        // the member asks for stable offsets.
        if self.producer.is_none() && !self.start_producer() {
            return;
        }
        if self.consumer.is_none() {
            match self.new_consumer() {
                Ok(c) => self.consumer = Some(c),
                Err(_) => return,
            }
        }
        let records = self.poll();
        if records.is_empty() {
            return;
        }
        self.transaction(records, faults);
    }

    fn new_consumer(&self) -> Result<Member, String> {
        let lp = self.lp;
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &lp.bootstrap);
        c.set("reconnect.backoff.ms", "10");
        c.set("log_level", "0");
        c.set("group.id", &lp.group);
        c.set("group.protocol", "classic");
        // Eager: a rebalance revokes everything, and each member reads its new partitions' offsets.
        c.set("partition.assignment.strategy", "range");
        c.set("isolation.level", "read_committed");
        c.set("enable.auto.commit", "false");
        c.set("enable.auto.offset.store", "false");
        c.set("auto.offset.reset", "earliest");
        c.set("enable.partition.eof", "false");
        c.set("fetch.wait.max.ms", "20");
        let session = lp.session_ms();
        c.set("session.timeout.ms", session.to_string());
        c.set("heartbeat.interval.ms", lp.params.heartbeat_interval_ms.min(session / 3).max(1).to_string());
        c.set("max.poll.interval.ms", lp.max_poll_ms().to_string());
        let ctx = MemberCtx {
            rec: lp.rec.clone(),
            member: self.member.clone(),
            position: Mutex::default(),
            assignments: AtomicU64::new(0),
            unknown_start: AtomicBool::new(false),
            invalid_session: AtomicBool::new(false),
            closing: AtomicBool::new(false),
        };
        let consumer: Member =
            c.create_with_context(ctx).map_err(|e| format!("processor {}'s consumer: {e}", self.name))?;
        consumer.subscribe(&[&lp.input_topic]).map_err(|e| format!("processor {}: subscribe: {e}", self.name))?;
        Ok(consumer)
    }

    /// A new producer instance and its `init_transactions`, recorded as the other producers' are.
    fn start_producer(&mut self) -> bool {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.lp.bootstrap);
        c.set("reconnect.backoff.ms", "10");
        c.set("log_level", "0");
        c.set("linger.ms", "0");
        c.set("transactional.id", &self.transactional_id);
        c.set("transaction.timeout.ms", PROCESSOR_TXN_TIMEOUT_MS.to_string());
        c.set("retry.backoff.ms", "20");
        c.set("retry.backoff.max.ms", "100");
        let Ok(client) = c.create_with_context(Ctx { rec: self.lp.rec.clone(), delivered: Mutex::default() }) else {
            return false;
        };
        let client: Client = Arc::new(client);
        let r = self.call(&client, ProducerCall::Init, |p| p.init_transactions(CALL_TIMEOUT));
        if !matches!(r.outcome, CallOutcome::Ok) {
            // Closed unused; the next step tries a new instance.
            lock(&self.lp.rec).abandon(&self.name);
            std::thread::spawn(move || drop(client));
            return false;
        }
        self.producer = Some(client);
        true
    }

    /// Takes what librdkafka has ready, recorded as one `Poll` per partition; nothing when the member's
    /// start is unknown (the consumer is replaced) or the cluster refused its session timeout.
    fn poll(&mut self) -> Vec<(TopicPartition, Offset, String)> {
        let Some(c) = &self.consumer else { return Vec::new() };
        let mut got: Vec<(TopicPartition, Offset, String)> = Vec::new();
        for i in 0..POLL_BATCH {
            match c.poll(if i == 0 { POLL_WAIT } else { Duration::ZERO }) {
                Some(Ok(m)) => {
                    let value = m.payload().map(|v| String::from_utf8_lossy(v).into_owned()).unwrap_or_default();
                    got.push((TopicPartition::new(m.topic(), m.partition() as u32), m.offset() as Offset, value));
                }
                Some(Err(e)) => {
                    if e.rdkafka_error_code() == Some(RDKafkaErrorCode::InvalidSessionTimeout) {
                        c.context().invalid_session.store(true, Ordering::Relaxed);
                    }
                }
                None => break,
            }
        }
        let ctx = c.context();
        if ctx.invalid_session.load(Ordering::Relaxed) {
            self.lp.session_ms.fetch_max(KAFKA_MIN_SESSION_TIMEOUT_MS, Ordering::Relaxed);
            self.drop_consumer();
            return Vec::new();
        }
        let mut position = ctx.position.lock().unwrap_or_else(|e| e.into_inner());
        let unknown = ctx.unknown_start.load(Ordering::Relaxed) || got.iter().any(|r| !position.contains_key(&r.0));
        if unknown {
            drop(position);
            self.drop_consumer();
            return Vec::new();
        }
        let mut by_partition: BTreeMap<TopicPartition, Vec<(Offset, String)>> = BTreeMap::new();
        for (tp, o, v) in &got {
            by_partition.entry(tp.clone()).or_default().push((*o, v.clone()));
        }
        for (tp, records) in by_partition {
            let fetch_offset = position.get(&tp).copied().unwrap_or(0);
            let position_after = records.last().map_or(fetch_offset, |r| r.0 + 1);
            let hw = super::exec::cached_high_watermark(c, &tp).unwrap_or(position_after).max(position_after);
            position.insert(tp.clone(), position_after);
            let mut rec = lock(&self.lp.rec);
            let time_ms = rec.now_ms();
            rec.push(Event::Poll {
                time_ms,
                consumer: self.member.clone(),
                isolation: IsolationLevel::ReadCommitted,
                partition: tp,
                fetch_offset,
                high_watermark: hw,
                last_stable_offset: hw,
                records,
                position_after,
            });
        }
        got
    }

    /// One transaction over the records just polled.
    fn transaction(&mut self, records: Vec<(TopicPartition, Offset, String)>, faults: bool) {
        let Some(consumer) = &self.consumer else { return };
        // The group metadata the records were polled under: a zombie sends it after its generation ended.
        let Some(cgm) = consumer.group_metadata() else {
            self.rewind();
            return;
        };
        let group = group_view(consumer, &self.lp.group);
        let Some(producer) = self.producer.clone() else { return };
        self.txns += 1;
        let attempt = format!("{}.i{}.{}", self.name, self.instance, self.txns);
        let r = self.call(&producer, ProducerCall::Begin, |p| p.begin_transaction());
        if !matches!(r.outcome, CallOutcome::Ok) {
            self.recover(&r, false);
            return;
        }
        let mut offsets: BTreeMap<TopicPartition, i64> = BTreeMap::new();
        for (tp, o, v) in &records {
            let out = TopicPartition::new(&self.lp.output_topic, tp.partition % 2);
            let value = output_value(v, &attempt);
            let call = ProducerCall::Send { partition: out.clone(), values: vec![value.clone()] };
            let call_id = lock(&self.lp.rec).invoke(&self.name, call);
            self.ops += 1;
            let record: BaseRecord<'_, (), String, usize> = BaseRecord::with_opaque_to(&out.topic, call_id as usize)
                .partition(out.partition as i32)
                .payload(&value);
            if let Err((e, _)) = producer.send(record) {
                let r = CallResult::of(&Err(e), &producer);
                lock(&self.lp.rec).complete(call_id, r.outcome.clone());
                self.recover(&r, true);
                return;
            }
            offsets.insert(tp.clone(), *o as i64 + 1);
        }
        producer.poll(Duration::ZERO);
        if faults && self.lp.zombies && self.rng.chance(ZOMBIE_PROB) {
            // Past `max.poll.interval.ms`: librdkafka leaves the group, the others take the partitions.
            let ms = self.lp.max_poll_ms() + self.rng.range(300, 800);
            self.fault("pause-producer");
            std::thread::sleep(Duration::from_millis(ms));
        }
        let mut tpl = TopicPartitionList::new();
        for (tp, o) in &offsets {
            if tpl.add_partition_offset(&tp.topic, tp.partition as i32, RdOffset::Offset(*o)).is_err() {
                self.abort_and_rewind();
                return;
            }
        }
        let call = ProducerCall::SendOffsets { group, offsets: offsets.into_iter().collect() };
        let r = self.call(&producer, call, move |p| p.send_offsets_to_transaction(&tpl, &cgm, CALL_TIMEOUT));
        if !matches!(r.outcome, CallOutcome::Ok) {
            self.recover(&r, true);
            return;
        }
        if !self.rng.chance(self.lp.params.commit_ratio) {
            self.abort_and_rewind();
            return;
        }
        let r = self.call(&producer, ProducerCall::Commit, |p| p.commit_transaction(CALL_TIMEOUT));
        if matches!(r.outcome, CallOutcome::Ok) {
            self.counts.committed += 1;
            self.counts.outputs_committed += records.len() as u64;
        } else if r.requires_abort {
            self.recover(&r, true);
        } else {
            // Retriable (a timeout: the commit may yet land) or fatal: a new instance's InitProducerId
            // settles it, and the new member reads the offsets once stable.
            self.count_fencing(&r);
            self.restart();
        }
    }

    /// Invokes one producer call and records its answer. The call runs on a thread of its own and is
    /// waited for `CALL_LIMIT` at most: librdkafka's `send_offsets_to_transaction` waits for its
    /// operation without a bound (`rd_kafka_txn_op_req1(..., RD_POLL_INFINITE)`), and under node faults it
    /// was seen not to return for minutes. A call that does not return is left unanswered (unknown once
    /// the instance is abandoned) and the processor restarts.
    fn call(
        &mut self,
        producer: &Client,
        call: ProducerCall,
        f: impl FnOnce(&Client) -> Result<(), RdError> + Send + 'static,
    ) -> CallResult {
        let call_id = lock(&self.lp.rec).invoke(&self.name, call);
        self.ops += 1;
        let (tx, rx) = std::sync::mpsc::channel();
        let p = producer.clone();
        std::thread::spawn(move || {
            let result = f(&p);
            p.poll(Duration::ZERO);
            let _ = tx.send(CallResult::of(&result, &p));
        });
        match rx.recv_timeout(CALL_LIMIT) {
            Ok(r) => {
                lock(&self.lp.rec).complete(call_id, r.outcome.clone());
                r
            }
            Err(_) => CallResult { outcome: CallOutcome::Unknown, fatal: true, requires_abort: false },
        }
    }

    fn count_fencing(&mut self, r: &CallResult) {
        if let CallOutcome::Failed { error } = &r.outcome {
            if FENCING_ERRORS.iter().any(|f| error == f) {
                self.counts.zombies_fenced += 1;
            }
        }
    }

    /// After a failed call: a fatal error restarts the processor; otherwise the open transaction (if
    /// `open`) is aborted and the member rewinds.
    fn recover(&mut self, r: &CallResult, open: bool) {
        self.count_fencing(r);
        if r.fatal && !r.requires_abort {
            self.restart();
        } else if open || r.requires_abort {
            self.abort_and_rewind();
        } else {
            self.rewind();
        }
    }

    fn abort_and_rewind(&mut self) {
        let Some(producer) = self.producer.clone() else { return };
        // librdkafka's abort purges what is queued (resetting the sequences: a purge of our own would
        // leave a gap, OUT_OF_ORDER_SEQUENCE_NUMBER on the next transaction) and waits until the purged
        // messages' delivery reports are served, which rust-rdkafka's `BaseProducer` does only on poll:
        // another thread polls meanwhile, as librdkafka asks, or the abort times out.
        let r = self.call(&producer, ProducerCall::Abort, |p| {
            let done = AtomicBool::new(false);
            std::thread::scope(|scope| {
                scope.spawn(|| {
                    while !done.load(Ordering::Relaxed) {
                        p.poll(Duration::from_millis(10));
                    }
                });
                let result = p.abort_transaction(CALL_TIMEOUT);
                done.store(true, Ordering::Relaxed);
                result
            })
        });
        if matches!(r.outcome, CallOutcome::Ok) {
            self.counts.aborted += 1;
            self.rewind();
        } else {
            self.count_fencing(&r);
            self.restart();
        }
    }

    /// Seeks every assigned partition back to the group's committed offset (what is buffered is dropped:
    /// librdkafka discards fetched messages older than the seek); a consumer that cannot is replaced.
    fn rewind(&mut self) {
        let Some(c) = &self.consumer else { return };
        let Ok(assignment) = c.assignment() else {
            self.drop_consumer();
            return;
        };
        if assignment.count() == 0 {
            return;
        }
        let Ok(committed) = c.committed_offsets(assignment, CALL_TIMEOUT) else {
            self.drop_consumer();
            return;
        };
        let mut sought = Vec::new();
        for e in committed.elements() {
            let o = match (e.error(), e.offset()) {
                (Ok(()), RdOffset::Offset(n)) if n >= 0 => n as Offset,
                (Ok(()), RdOffset::Invalid | RdOffset::Beginning) => 0,
                _ => {
                    self.drop_consumer();
                    return;
                }
            };
            if c.seek(e.topic(), e.partition(), RdOffset::Offset(o as i64), CALL_TIMEOUT).is_err() {
                self.drop_consumer();
                return;
            }
            sought.push((TopicPartition::new(e.topic(), e.partition() as u32), o));
        }
        let mut position = c.context().position.lock().unwrap_or_else(|e| e.into_inner());
        let mut rec = lock(&self.lp.rec);
        for (tp, o) in sought {
            let time_ms = rec.now_ms();
            rec.push(Event::Seek { time_ms, consumer: self.member.clone(), partition: tp.clone(), offset: o });
            position.insert(tp, o);
        }
    }

    /// Closes the consumer (LeaveGroup); a new member joins at the next step.
    fn drop_consumer(&mut self) {
        if let Some(c) = self.consumer.take() {
            self.counts.rebalances += c.context().assignments.load(Ordering::Relaxed);
            // librdkafka's close (LeaveGroup, then the revocation) may wait on an unreachable coordinator.
            c.context().closing.store(true, Ordering::Relaxed);
            std::thread::spawn(move || drop(c));
        }
    }

    /// Closes both clients (the producer's unanswered calls end unknown); the next step starts a new
    /// instance.
    fn restart(&mut self) {
        self.counts.restarts += 1;
        self.drop_consumer();
        lock(&self.lp.rec).abandon(&self.name);
        if let Some(p) = self.producer.take() {
            p.purge(rdkafka::producer::PurgeConfig::default().queue().inflight());
            p.poll(Duration::ZERO);
            std::thread::spawn(move || drop(p));
        }
        self.instance += 1;
        self.txns = 0;
    }

    fn close(&mut self) {
        self.drop_consumer();
        if let Some(p) = self.producer.take() {
            let _ = p.flush(CALL_TIMEOUT);
            lock(&self.lp.rec).abandon(&self.name);
            std::thread::spawn(move || drop(p));
        }
        lock(&self.lp.rec).abandon(&self.name);
    }
}

/// The member's group metadata as the history records it: librdkafka keeps generation and member id
/// inside an opaque handle, which it serializes as `CGMDv2:`, the generation (int32, host order), then
/// the group and member ids, each NUL-terminated.
fn group_view(c: &Member, group: &str) -> ConsumerGroupMetadata {
    let mut view = ConsumerGroupMetadata { group_id: group.to_string(), generation_id: -1, member_id: String::new() };
    let rk = c.client().native_ptr();
    // SAFETY: a live client handle; the metadata copy and the buffer librdkafka allocates are freed here,
    // and the buffer is read only within the size librdkafka wrote.
    let bytes = unsafe {
        let md = rdkafka::bindings::rd_kafka_consumer_group_metadata(rk);
        if md.is_null() {
            return view;
        }
        let mut buf: *mut std::ffi::c_void = std::ptr::null_mut();
        let mut size: usize = 0;
        let err = rdkafka::bindings::rd_kafka_consumer_group_metadata_write(md, &mut buf, &mut size);
        rdkafka::bindings::rd_kafka_consumer_group_metadata_destroy(md);
        if !err.is_null() {
            rdkafka::bindings::rd_kafka_error_destroy(err);
            return view;
        }
        if buf.is_null() {
            return view;
        }
        let bytes = std::slice::from_raw_parts(buf as *const u8, size).to_vec();
        rdkafka::bindings::rd_kafka_mem_free(rk, buf);
        bytes
    };
    let magic = b"CGMDv2:";
    let Some(rest) = bytes.strip_prefix(&magic[..]) else { return view };
    let Some(generation) = rest.get(..4).and_then(|b| <[u8; 4]>::try_from(b).ok()) else { return view };
    view.generation_id = i32::from_ne_bytes(generation);
    let mut ids = rest[4..].split(|b| *b == 0);
    let _group = ids.next();
    if let Some(member) = ids.next() {
        view.member_id = String::from_utf8_lossy(member).into_owned();
    }
    view
}

/// The group's committed offsets of the input partitions after the run, as OffsetFetch answers with
/// require_stable (a consumer of the group at read_committed that does not join it), retried while an
/// offset commit is still pending (UNSTABLE_OFFSET_COMMIT) or the coordinator moves.
pub fn committed_offsets(
    bootstrap: &str,
    group: &str,
    partitions: &[TopicPartition],
) -> Result<Vec<(TopicPartition, i64)>, String> {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap);
    c.set("log_level", "0");
    c.set("group.id", group);
    c.set("isolation.level", "read_committed");
    c.set("enable.auto.commit", "false");
    let consumer: BaseConsumer = c.create().map_err(|e| format!("the group's offsets: {e}"))?;
    let mut tpl = TopicPartitionList::new();
    for tp in partitions {
        tpl.add_partition(&tp.topic, tp.partition as i32);
    }
    let deadline = Instant::now() + OFFSETS_BUDGET;
    let mut last = String::new();
    while Instant::now() < deadline {
        match consumer.committed_offsets(tpl.clone(), CALL_TIMEOUT) {
            Ok(list) => {
                let mut out = Vec::new();
                let mut failed = None;
                for e in list.elements() {
                    let tp = TopicPartition::new(e.topic(), e.partition() as u32);
                    match (e.error(), e.offset()) {
                        (Err(err), _) => failed = Some(format!("{tp}: {}", error_name(&err))),
                        (Ok(()), RdOffset::Offset(n)) if n >= 0 => out.push((tp, n)),
                        (Ok(()), _) => {}
                    }
                }
                match failed {
                    None => return Ok(out),
                    Some(e) => last = e,
                }
            }
            Err(e) => last = error_name(&e),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(format!("the group {group}'s committed offsets could not be read within {OFFSETS_BUDGET:?}: {last}"))
}
