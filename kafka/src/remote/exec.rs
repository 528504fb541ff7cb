//! One seed of a simulation profile's workload against a real cluster through librdkafka (the `rdkafka`
//! crate's synchronous `BaseProducer` and `BaseConsumer`), paced by the wall clock. The workload's
//! choices (who acts, transaction plans, commit or abort, values, seeks, faults) come from the seed's
//! `SimRng` as the sim draws them; what the cluster answers, and when, does not, so a run records its
//! `History` rather than being replayable.

use super::eos::{self, EosCounts, EosOutcome};
use super::nemesis::{self, Choice, NodeFault};
use super::relay::Relay;
use super::wire::{self, WireLog};
use crate::apache_kafka::KafkaCluster;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError as RdError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset as RdOffset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use txnsim_engine::{IsolationLevel, Offset, ProducerKind, TopicPartition};
use txnsim_properties::{CallOutcome, Event, History, LogFacts, ProducerCall};
use txnsim_sim::profile::{ConsumerSpec, FaultKind, ProducerSpec, Profile, ProfileParams};
use txnsim_sim::rng::SimRng;

/// The longest one blocking client call (init, commit, abort, flush, seek) may take.
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(3);
/// librdkafka's floor for `transaction.timeout.ms`; the profile's timeout is capped at `MAX_TXN_TIMEOUT_MS`
/// so that a pause past it fits in a seed of about two seconds.
const MIN_TXN_TIMEOUT_MS: u64 = 1_000;
const MAX_TXN_TIMEOUT_MS: u64 = 1_500;
/// The workload's wall-clock budget; ticks left when it runs out are skipped.
const WORKLOAD_BUDGET: Duration = Duration::from_secs(4);
/// While the nemesis's faults last (seconds each, far longer than the profile's ticks), the workload goes
/// on drawing ticks, so that every fault lands on transactions in flight; never past this.
const NEMESIS_WORKLOAD_LIMIT: Duration = Duration::from_secs(60);
/// Readers poll to the end for at most this long, and stop after this long without a record once
/// they are past everything they should deliver.
const DRAIN_BUDGET: Duration = Duration::from_secs(4);
const DRAIN_QUIET: Duration = Duration::from_millis(150);
/// The `eos` profile: how long the processors go on consuming after the input producers finished, and
/// the most a processor's thread runs.
const EOS_DRAIN: Duration = Duration::from_secs(2);
const EOS_LIMIT: Duration = Duration::from_secs(120);
/// Records one consumer step takes from librdkafka's queue at most.
pub(super) const POLL_BATCH: usize = 64;
/// The fresh readers that read every partition from 0 after the workload (`read-uncommitted-superset`).
pub const FRESH_COMMITTED: &str = "rc-fresh";
pub const FRESH_UNCOMMITTED: &str = "ru-fresh";

/// The faults a client can cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ClientFault {
    /// A transactional producer stops calling anything for longer than its `transaction.timeout.ms`.
    PauseProducer,
    /// A producer process is closed and a new instance started (the same transactional id).
    RestartClient,
    /// A second instance of a transactional id calls `init_transactions`, fencing the running one
    /// (`InitProducerId` bumps the epoch and aborts its open transaction).
    SecondInstance,
    /// Every client connection is closed at once (through the relay), mid-request or not.
    DropConnections,
}

impl ClientFault {
    pub const ALL: [ClientFault; 4] = [
        ClientFault::PauseProducer,
        ClientFault::RestartClient,
        ClientFault::SecondInstance,
        ClientFault::DropConnections,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ClientFault::PauseProducer => "pause-producer",
            ClientFault::RestartClient => "restart-client",
            ClientFault::SecondInstance => "second-instance",
            ClientFault::DropConnections => "drop-connections",
        }
    }

    /// The sim's fault that each stands for, whose switch-on chance in the profile it takes.
    fn sim_kind(self) -> FaultKind {
        match self {
            ClientFault::PauseProducer => FaultKind::PauseProducer,
            ClientFault::RestartClient | ClientFault::SecondInstance => FaultKind::ProducerRestart,
            ClientFault::DropConnections => FaultKind::ClogNode,
        }
    }
}

/// What one seed did, as the application saw it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counts {
    /// Producer calls invoked.
    pub ops: u64,
    /// `commit_transaction` returned ok.
    pub committed: u64,
    /// `abort_transaction` returned ok.
    pub aborted: u64,
    /// Transactions whose producer was paused past its timeout and that did not commit.
    pub timed_out: u64,
    /// Producer instances that failed fatally (fenced) and were restarted.
    pub fenced: u64,
    /// Poll events recorded (one per partition a consumer step delivered from).
    pub polls: u64,
    pub delivered: u64,
    pub faults: u64,
    /// The `eos` profile's processors (absent for the other profiles).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eos: Option<EosCounts>,
}

/// One seed's outcome: the history, the partition logs read back over the wire, the counts.
pub struct SeedRun {
    pub faults: Vec<ClientFault>,
    /// The node faults the nemesis ran, in order.
    pub nemesis: Vec<NodeFault>,
    /// Faults injected, by kind: the client faults and the nemesis's.
    pub by_kind: BTreeMap<String, u64>,
    pub history: History,
    pub logs: Vec<WireLog>,
    pub counts: Counts,
    pub elapsed: Duration,
    /// The `eos` profile's topics and the group's committed offsets after the run.
    pub eos: Option<EosOutcome>,
}

/// The history as calls are invoked and answered; the producers' delivery callbacks write to it too.
pub(super) struct Recorder {
    start: Instant,
    history: History,
    next_call_id: u64,
    /// Calls invoked and not yet answered: call id -> process.
    pending: BTreeMap<u64, String>,
}

pub(super) type Shared = Arc<Mutex<Recorder>>;

pub(super) fn lock(rec: &Shared) -> MutexGuard<'_, Recorder> {
    rec.lock().unwrap_or_else(|e| e.into_inner())
}

impl Recorder {
    pub(super) fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    pub(super) fn invoke(&mut self, process: &str, call: ProducerCall) -> u64 {
        self.next_call_id += 1;
        let call_id = self.next_call_id;
        let time_ms = self.now_ms();
        self.history.push(Event::Invoke { time_ms, process: process.to_string(), call_id, call });
        self.pending.insert(call_id, process.to_string());
        call_id
    }

    /// A call's answer; one for a call already given up on (its process was restarted) is dropped.
    pub(super) fn complete(&mut self, call_id: u64, outcome: CallOutcome) {
        if let Some(process) = self.pending.remove(&call_id) {
            let time_ms = self.now_ms();
            self.history.push(Event::Complete { time_ms, process, call_id, outcome });
        }
    }

    /// The process's unanswered calls end with no answer: they may or may not have taken effect.
    pub(super) fn abandon(&mut self, process: &str) {
        let ids: Vec<u64> = self.pending.iter().filter(|(_, p)| *p == process).map(|(id, _)| *id).collect();
        for id in ids {
            self.complete(id, CallOutcome::Unknown);
        }
    }

    pub(super) fn push(&mut self, e: Event) {
        self.history.push(e);
    }
}

/// Kafka's error name for a librdkafka error (`ProducerFenced` -> `PRODUCER_FENCED`); librdkafka's own
/// codes come out as `MESSAGE_TIMED_OUT`, `PURGE_QUEUE` and the like.
pub(super) fn error_name(e: &RdError) -> String {
    let Some(code) = e.rdkafka_error_code() else { return e.to_string() };
    let mut out = String::new();
    for (i, c) in format!("{code:?}").chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// How a call ended, with librdkafka's classification of its error (what the application does next).
#[derive(Clone, Debug)]
pub(super) struct CallResult {
    pub(super) outcome: CallOutcome,
    /// The instance is unusable (fenced): it is closed and a new one started.
    pub(super) fatal: bool,
    /// The transaction can only be aborted now (`txn_requires_abort`).
    pub(super) requires_abort: bool,
}

impl CallResult {
    pub(super) fn of(result: &Result<(), RdError>, client: &Client) -> CallResult {
        let Err(e) = result else {
            return CallResult { outcome: CallOutcome::Ok, fatal: false, requires_abort: false };
        };
        let (fatal, requires_abort, retriable) = match e {
            RdError::Transaction(t) => {
                (t.is_fatal(), t.txn_requires_abort(), t.is_retriable() || t.code() == RDKafkaErrorCode::State)
            }
            _ => (false, false, false),
        };
        CallResult {
            outcome: CallOutcome::Failed { error: error_name(e) },
            // An error librdkafka does not classify leaves the instance in an unknown state: restart it.
            fatal: fatal || client.client().fatal_error().is_some() || !(requires_abort || retriable),
            requires_abort,
        }
    }
}

/// A blocking call's answer, from the thread that made it.
struct Done {
    slot: usize,
    generation: u64,
    call_id: u64,
    /// `Some(commit)` for commit and abort; `None` for init.
    end: Option<bool>,
    result: CallResult,
}

/// Routes delivery reports into the history: the opaque is the send's call id.
pub(super) struct Ctx {
    pub(super) rec: Shared,
    pub(super) delivered: Mutex<DeliveredOffsets>,
}

impl ClientContext for Ctx {}

impl ProducerContext for Ctx {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, call_id: usize) {
        let outcome = match result {
            Ok(m) => {
                let tp = TopicPartition::new(m.topic(), m.partition() as u32);
                self.delivered.lock().unwrap_or_else(|e| e.into_inner()).outcome(tp, m.offset())
            }
            Err((e, _)) => CallOutcome::Failed { error: error_name(e) },
        };
        lock(&self.rec).complete(call_id as u64, outcome);
    }
}

/// One producer's successful delivery reports as outcomes, in the order librdkafka reports them.
///
/// librdkafka reports success with offset -1001 (`RD_KAFKA_OFFSET_INVALID`) when a retry is answered
/// DUPLICATE_SEQUENCE_NUMBER by a broker that gives no offset (`rd_kafka_handle_Produce_error`). A broker
/// that answers it with base offset -1 makes librdkafka report -1, 0, 1, ... for the batch's records
/// (base plus each record's delta). Either way the records were written earlier, where is unknown: they
/// are recorded as unknown, not as acknowledgements at 2^64 - 1001 or at 0, 1 (which raised false
/// inconsistent-offsets and nonmonotonic-send). A run of offsets -1, 0, 1, ... on one partition is one
/// such batch: its records' real offsets are all above -1 + their index, and a later batch's are above
/// the run's, so a real offset never continues the run.
#[derive(Default)]
pub struct DeliveredOffsets {
    /// Per partition, the last offset of a run that began at -1.
    runs: BTreeMap<TopicPartition, i64>,
}

impl DeliveredOffsets {
    pub fn outcome(&mut self, tp: TopicPartition, offset: i64) -> CallOutcome {
        let continues = offset == -1 || self.runs.get(&tp).is_some_and(|last| offset == last + 1);
        if continues {
            self.runs.insert(tp, offset);
            return CallOutcome::Unknown;
        }
        self.runs.remove(&tp);
        match Offset::try_from(offset) {
            Ok(o) => CallOutcome::Sent { first_offset: o, last_offset: o, duplicate: false },
            Err(_) => CallOutcome::Unknown,
        }
    }
}

pub(super) type Client = Arc<BaseProducer<Ctx>>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TxnState {
    Uninitialized,
    Ready,
    InTransaction,
    /// The last call left the transaction abortable (`txn_requires_abort`).
    MustAbort,
}

use txnsim_sim::workload::TxnPlan as Plan;

struct ProducerSlot {
    spec: ProducerSpec,
    /// The run's transactional id, for transactional producers.
    transactional_id: Option<String>,
    client: Option<Client>,
    state: TxnState,
    plan: Option<Plan>,
    /// The application does nothing before then (a stall, or a pause fault).
    idle_until: Instant,
    /// This transaction was paused past the transaction timeout.
    paused_past_timeout: bool,
    /// An init, commit or abort is in flight: they block the application until they return, as in
    /// the sim; they run on their own thread so the other producers and readers go on.
    busy: bool,
    /// Counts client instances; an answer for an instance since closed is dropped.
    generation: u64,
}

struct ConsumerSlot {
    spec: ConsumerSpec,
    client: BaseConsumer,
    /// The application's position per partition: after the last record delivered, or where it sought.
    position: BTreeMap<TopicPartition, Offset>,
}

/// Where the run is and what it is called there.
pub struct Target<'a> {
    pub brokers: &'a [String],
    /// Prefix of every topic and transactional id of this run: `txnsim-<run>-s<seed>`.
    pub prefix: String,
    /// How long a partition's LSO may take to reach its HW once every transaction ended.
    pub settle: Duration,
    /// The cluster the harness started and the node faults to draw, for `apache-kafka:N` targets.
    pub nemesis: Option<(&'a Mutex<KafkaCluster>, &'a Choice)>,
}

struct Seed<'a> {
    target: &'a Target<'a>,
    /// With the drop-connections fault on, the clients' connections go through it.
    relay: Option<Relay>,
    /// `bootstrap.servers` for the clients: the brokers, or their relay addresses.
    bootstrap: String,
    params: ProfileParams,
    rng: SimRng,
    faults: Vec<ClientFault>,
    fault_rate: f64,
    txn_timeout_ms: u64,
    rec: Shared,
    partitions: Vec<TopicPartition>,
    /// Where the producers write: every partition, or the `eos` profile's input topic's.
    write_partitions: Vec<TopicPartition>,
    producers: Vec<ProducerSlot>,
    consumers: Vec<ConsumerSlot>,
    next_value: BTreeMap<String, u64>,
    counts: Counts,
    by_kind: BTreeMap<String, u64>,
    /// The nemesis has faults left to run or heal.
    faulting: Arc<AtomicBool>,
    done_tx: Sender<Done>,
    done_rx: Receiver<Done>,
}

/// Runs one seed: creates its topics, runs the workload with faults, ends every transaction, reads
/// the logs back, then lets every reader (and two fresh ones) poll to the end.
pub fn run_seed(target: &Target<'_>, profile: Profile, seed: u64) -> Result<SeedRun, String> {
    let started = Instant::now();
    let params = profile.params();
    let mut rng = SimRng::new(seed);
    let faults: Vec<ClientFault> =
        ClientFault::ALL.into_iter().filter(|f| rng.chance(params.fault_enable_prob[f.sim_kind() as usize])).collect();
    let fault_rate = rng.range_f64(params.fault_rate.0, params.fault_rate.1);
    // Drawn after the client faults, so a sweep without a nemesis draws what it drew before there was one.
    let steps = match target.nemesis {
        Some((cluster, choice)) => {
            let nodes = cluster.lock().unwrap_or_else(|e| e.into_inner()).node_count();
            nemesis::draw(choice, &params, nodes, &mut rng)
        }
        None => Vec::new(),
    };
    // Each processor's own choices, drawn last so the other profiles draw what they drew before.
    let processor_seeds: Vec<u64> =
        params.eos.as_ref().map_or(Vec::new(), |e| e.processor_names().map(|_| rng.u64()).collect());
    let topics: Vec<(String, u32)> =
        params.topics.iter().map(|(t, n)| (format!("{}-{t}", target.prefix), *n)).collect();
    wire::create_topics(target.brokers, &topics)?;
    let partitions: Vec<TopicPartition> =
        topics.iter().flat_map(|(t, n)| (0..*n).map(move |p| TopicPartition::new(t, p))).collect();
    let rec = Arc::new(Mutex::new(Recorder {
        start: Instant::now(),
        history: History::default(),
        next_call_id: 0,
        pending: BTreeMap::new(),
    }));
    let txn_timeout_ms = params.txn_timeout_ms.clamp(MIN_TXN_TIMEOUT_MS, MAX_TXN_TIMEOUT_MS);
    let processors: Vec<String> = params.eos.as_ref().map_or(Vec::new(), |e| e.processor_names().collect());
    let write_partitions: Vec<TopicPartition> = match &params.eos {
        Some(e) => {
            let input = format!("{}-{}", target.prefix, e.input_topic);
            partitions.iter().filter(|tp| tp.topic == input).cloned().collect()
        }
        None => partitions.clone(),
    };
    let producers = params
        .producers
        .iter()
        .filter(|spec| !processors.contains(&spec.name))
        .map(|spec| ProducerSlot {
            spec: spec.clone(),
            transactional_id: match &spec.kind {
                ProducerKind::Transactional { transactional_id } => {
                    Some(format!("{}-{transactional_id}", target.prefix))
                }
                _ => None,
            },
            client: None,
            state: TxnState::Uninitialized,
            plan: None,
            idle_until: Instant::now(),
            paused_past_timeout: false,
            busy: false,
            generation: 0,
        })
        .collect();
    let relay = faults.contains(&ClientFault::DropConnections).then(Relay::default);
    let bootstrap = match &relay {
        Some(r) => target.brokers.iter().map(|b| r.route(b)).collect::<Result<Vec<_>, _>>()?.join(","),
        None => target.brokers.join(","),
    };
    let (done_tx, done_rx) = mpsc::channel();
    let mut s = Seed {
        target,
        relay,
        bootstrap,
        params,
        rng,
        faults,
        fault_rate,
        txn_timeout_ms,
        rec,
        partitions,
        write_partitions,
        producers,
        consumers: Vec::new(),
        next_value: BTreeMap::new(),
        counts: Counts::default(),
        by_kind: BTreeMap::new(),
        faulting: Arc::new(AtomicBool::new(!steps.is_empty())),
        done_tx,
        done_rx,
    };
    for spec in s.params.consumers.clone() {
        let slot = s.consumer(spec)?;
        s.consumers.push(slot);
    }
    let (start, faulting) = (lock(&s.rec).start, s.faulting.clone());
    let eos_loop = s.params.eos.clone().map(|params| eos::Loop {
        bootstrap: s.bootstrap.clone(),
        input_topic: format!("{}-{}", target.prefix, params.input_topic),
        output_topic: format!("{}-{}", target.prefix, params.output_topic),
        group: format!("{}-{}", target.prefix, params.group),
        prefix: target.prefix.clone(),
        rec: s.rec.clone(),
        zombies: s.faults.contains(&ClientFault::PauseProducer),
        restarts: s.faults.contains(&ClientFault::RestartClient),
        tick_ms: s.params.tick_ms,
        phase: std::sync::atomic::AtomicU8::new(eos::RUNNING),
        session_ms: std::sync::atomic::AtomicU64::new(params.session_timeout_ms),
        params,
    });
    let (ran, processor_runs) = std::thread::scope(|scope| {
        let nemesis = target.nemesis.filter(|_| !steps.is_empty()).map(|(cluster, _)| {
            scope.spawn(move || {
                let ran = nemesis::run(cluster, &steps, start);
                faulting.store(false, Ordering::Relaxed);
                ran
            })
        });
        let workers: Vec<_> = match &eos_loop {
            Some(lp) => processors
                .iter()
                .zip(&processor_seeds)
                .map(|(name, seed)| scope.spawn(move || eos::run_processor(lp, name, *seed, EOS_LIMIT)))
                .collect(),
            None => Vec::new(),
        };
        s.workload();
        s.finish_producers();
        if let Some(lp) = &eos_loop {
            // The processors consume what is left, then stop and leave the group.
            lp.phase.store(eos::DRAINING, Ordering::Relaxed);
            std::thread::sleep(EOS_DRAIN);
            lp.phase.store(eos::STOPPED, Ordering::Relaxed);
        }
        let runs: Vec<_> = workers.into_iter().filter_map(|w| w.join().ok()).collect();
        // Every fault is healed before the read-back.
        let ran = match nemesis.map(|n| n.join()) {
            Some(Ok(ran)) => ran,
            Some(Err(_)) => Err("the nemesis's thread panicked".to_string()),
            None => Ok(Vec::new()),
        };
        (ran, runs)
    });
    let ran = ran?;
    if processor_runs.len() != processors.len() {
        return Err("a processor's thread panicked".to_string());
    }
    if !processor_runs.is_empty() {
        let mut total = EosCounts::default();
        for r in &processor_runs {
            total.add(&r.counts);
            s.counts.ops += r.ops;
            for (kind, n) in &r.by_kind {
                *s.by_kind.entry(kind.clone()).or_insert(0) += n;
                s.counts.faults += n;
            }
        }
        s.counts.eos = Some(total);
    }
    let eos_outcome = match &eos_loop {
        Some(lp) => {
            let inputs: Vec<TopicPartition> =
                s.partitions.iter().filter(|tp| tp.topic == lp.input_topic).cloned().collect();
            let committed = eos::committed_offsets(&s.bootstrap, &lp.group, &inputs)?;
            Some(EosOutcome {
                input_topic: lp.input_topic.clone(),
                output_topic: lp.output_topic.clone(),
                group: lp.group.clone(),
                committed,
            })
        }
        None => None,
    };
    for f in &ran {
        *s.by_kind.entry(f.kind.name().to_string()).or_insert(0) += 1;
    }
    let logs = wire::read_logs(target.brokers, &s.partitions, target.settle)?;
    for spec in [FRESH_COMMITTED, FRESH_UNCOMMITTED].map(|name| ConsumerSpec {
        name: name.to_string(),
        isolation: if name == FRESH_COMMITTED {
            IsolationLevel::ReadCommitted
        } else {
            IsolationLevel::ReadUncommitted
        },
        seeks: false,
    }) {
        let slot = s.consumer(spec)?;
        s.consumers.push(slot);
    }
    s.drain(&logs)?;
    let history = std::mem::take(&mut lock(&s.rec).history);
    s.counts.polls = history.events.iter().filter(|e| matches!(e, Event::Poll { .. })).count() as u64;
    Ok(SeedRun {
        faults: s.faults,
        nemesis: ran,
        by_kind: s.by_kind,
        history,
        logs,
        counts: s.counts,
        elapsed: started.elapsed(),
        eos: eos_outcome,
    })
}

impl Seed<'_> {
    fn base_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap);
        // After a dropped connection, reconnect soon (librdkafka's default backoff starts at 100 ms).
        c.set("reconnect.backoff.ms", "10");
        // librdkafka logs through the `log` crate; the history, not its log, is the record here.
        c.set("log_level", "0");
        c
    }

    fn new_producer(&self, slot: &ProducerSlot) -> Result<Client, String> {
        let mut c = self.base_config();
        c.set("linger.ms", "0");
        match (&slot.spec.kind, &slot.transactional_id) {
            (ProducerKind::Transactional { .. }, Some(tid)) => {
                c.set("transactional.id", tid);
                c.set("transaction.timeout.ms", self.txn_timeout_ms.to_string());
            }
            (ProducerKind::Idempotent, _) => {
                c.set("enable.idempotence", "true");
            }
            _ => {
                // As the sim's plain producer: one request in flight and no retries, so its writes are
                // neither duplicated nor reordered (both are allowed for it in Kafka).
                c.set("enable.idempotence", "false");
                c.set("retries", "0");
                c.set("max.in.flight.requests.per.connection", "1");
            }
        }
        c.set("retry.backoff.ms", "20");
        c.set("retry.backoff.max.ms", "100");
        let client: BaseProducer<Ctx> = c
            .create_with_context(Ctx { rec: self.rec.clone(), delivered: Mutex::default() })
            .map_err(|e| format!("producer {}: {e}", slot.spec.name))?;
        Ok(Arc::new(client))
    }

    fn consumer(&self, spec: ConsumerSpec) -> Result<ConsumerSlot, String> {
        let mut c = self.base_config();
        let isolation = match spec.isolation {
            IsolationLevel::ReadCommitted => "read_committed",
            IsolationLevel::ReadUncommitted => "read_uncommitted",
        };
        c.set("isolation.level", isolation);
        // `assign`, not `subscribe`: no group, no rebalance delay; offsets are never committed.
        c.set("group.id", format!("{}-{}", self.target.prefix, spec.name));
        c.set("enable.auto.commit", "false");
        c.set("enable.partition.eof", "false");
        c.set("fetch.wait.max.ms", "20");
        let client: BaseConsumer = c.create().map_err(|e| format!("consumer {}: {e}", spec.name))?;
        let mut list = TopicPartitionList::new();
        let mut position = BTreeMap::new();
        let mut rec = lock(&self.rec);
        for tp in &self.partitions {
            list.add_partition_offset(&tp.topic, tp.partition as i32, RdOffset::Offset(0))
                .map_err(|e| format!("consumer {}: {e}", spec.name))?;
            position.insert(tp.clone(), 0);
            let time_ms = rec.now_ms();
            rec.push(Event::Seek { time_ms, consumer: spec.name.clone(), partition: tp.clone(), offset: 0 });
        }
        drop(rec);
        client.assign(&list).map_err(|e| format!("consumer {}: assign: {e}", spec.name))?;
        Ok(ConsumerSlot { spec, client, position })
    }

    fn workload(&mut self) {
        let started = Instant::now();
        for tick in 0.. {
            let faulting = self.faulting.load(Ordering::Relaxed);
            if tick >= self.params.ticks && !faulting {
                break;
            }
            let (lo, hi) = self.params.tick_ms;
            let pause = self.rng.range(lo, hi).max(1);
            std::thread::sleep(Duration::from_millis(pause));
            if started.elapsed() >= if faulting { NEMESIS_WORKLOAD_LIMIT } else { WORKLOAD_BUDGET } {
                break;
            }
            self.collect_done();
            if !self.faults.is_empty() && self.rng.chance(self.fault_rate) {
                self.inject_fault();
            }
            if self.rng.chance(self.params.poll_ratio) {
                let i = self.rng.index(self.consumers.len());
                self.consumer_step(i);
            } else {
                let i = self.rng.index(self.producers.len());
                self.producer_step(i, false);
            }
            for p in &self.producers {
                if let Some(c) = &p.client {
                    c.poll(Duration::ZERO);
                }
            }
        }
    }

    /// Applies the answers of blocking calls that have returned.
    fn collect_done(&mut self) {
        while let Ok(done) = self.done_rx.try_recv() {
            self.apply(done);
        }
    }

    fn apply(&mut self, done: Done) {
        let slot = &mut self.producers[done.slot];
        if done.generation != slot.generation {
            return; // The instance that asked was closed; its calls were given up on then.
        }
        slot.busy = false;
        lock(&self.rec).complete(done.call_id, done.result.outcome.clone());
        if matches!(done.result.outcome, CallOutcome::Ok) {
            match done.end {
                None => slot.state = TxnState::Ready,
                Some(commit) => {
                    if commit {
                        self.counts.committed += 1;
                    } else {
                        self.counts.aborted += 1;
                    }
                    if slot.paused_past_timeout && !commit {
                        self.counts.timed_out += 1;
                    }
                    slot.state = TxnState::Ready;
                    slot.plan = None;
                    slot.paused_past_timeout = false;
                }
            }
            return;
        }
        self.after_error(done.slot, &done.result);
    }

    fn inject_fault(&mut self) {
        let fault = *self.rng.pick(&self.faults);
        let i = self.rng.index(self.producers.len());
        let slot = &mut self.producers[i];
        let transactional = slot.transactional_id.is_some();
        match fault {
            ClientFault::PauseProducer if transactional && slot.state == TxnState::InTransaction => {
                let extra = self.rng.range(100, 400);
                slot.idle_until = Instant::now() + Duration::from_millis(self.txn_timeout_ms + extra);
                slot.paused_past_timeout = true;
            }
            ClientFault::RestartClient if slot.client.is_some() => self.restart(i),
            ClientFault::SecondInstance if transactional && slot.client.is_some() => self.second_instance(i),
            ClientFault::DropConnections => match &self.relay {
                Some(relay) => relay.cut(),
                None => return,
            },
            _ => return,
        }
        self.counts.faults += 1;
        *self.by_kind.entry(fault.name().to_string()).or_insert(0) += 1;
    }

    /// A new instance of producer `i`'s transactional id runs `init_transactions` (on its own thread)
    /// and closes.
    fn second_instance(&mut self, i: usize) {
        let process = format!("{}+second", self.producers[i].spec.name);
        let Ok(client) = self.new_producer(&self.producers[i]) else { return };
        let call_id = lock(&self.rec).invoke(&process, ProducerCall::Init);
        self.counts.ops += 1;
        let rec = self.rec.clone();
        std::thread::spawn(move || {
            let result = client.init_transactions(CALL_TIMEOUT);
            lock(&rec).complete(call_id, CallResult::of(&result, &client).outcome);
        });
    }

    /// Closes producer `i`'s client (its unanswered calls end unknown); the next step starts a new one.
    fn restart(&mut self, i: usize) {
        let slot = &mut self.producers[i];
        lock(&self.rec).abandon(&slot.spec.name);
        if let Some(client) = slot.client.take() {
            // Closed without flushing: what was in flight may or may not have been written.
            client.purge(rdkafka::producer::PurgeConfig::default().queue().inflight());
            client.poll(Duration::ZERO);
            std::thread::spawn(move || drop(client));
        }
        slot.generation += 1;
        slot.busy = false;
        slot.state = TxnState::Uninitialized;
        slot.plan = None;
        if slot.paused_past_timeout {
            self.counts.timed_out += 1;
            slot.paused_past_timeout = false;
        }
    }

    fn next_values(&mut self, name: &str, n: u64) -> Vec<String> {
        let counter = self.next_value.entry(name.to_string()).or_insert(0);
        (0..n)
            .map(|_| {
                *counter += 1;
                format!("{name}-{counter}")
            })
            .collect()
    }

    /// One application step of producer `i`. `closing`: end the open transaction now (the workload is over).
    fn producer_step(&mut self, i: usize, closing: bool) {
        if self.producers[i].busy || (!closing && Instant::now() < self.producers[i].idle_until) {
            return;
        }
        if self.producers[i].client.is_none() {
            match self.new_producer(&self.producers[i]) {
                Ok(c) => {
                    let slot = &mut self.producers[i];
                    slot.client = Some(c);
                    slot.state =
                        if slot.transactional_id.is_some() { TxnState::Uninitialized } else { TxnState::Ready };
                }
                Err(_) => return,
            }
        }
        let name = self.producers[i].spec.name.clone();
        if self.producers[i].transactional_id.is_none() {
            if closing {
                return;
            }
            let tp = self.rng.pick(&self.write_partitions).clone();
            let n = self.rng.range(self.params.values_per_send.0 as u64, self.params.values_per_send.1 as u64);
            let values = self.next_values(&name, n);
            self.send(i, &tp, values);
            return;
        }
        match self.producers[i].state {
            TxnState::Uninitialized => self.blocking(i, None),
            TxnState::Ready if !closing => {
                let client = self.producers[i].client.clone().expect("started");
                let result = client.begin_transaction();
                let call_id = lock(&self.rec).invoke(&name, ProducerCall::Begin);
                self.counts.ops += 1;
                let r = CallResult::of(&result, &client);
                lock(&self.rec).complete(call_id, r.outcome.clone());
                if result.is_ok() {
                    let plan = self.draw_plan();
                    let slot = &mut self.producers[i];
                    slot.plan = Some(plan);
                    slot.state = TxnState::InTransaction;
                    slot.paused_past_timeout = false;
                } else {
                    self.after_error(i, &r);
                }
            }
            TxnState::Ready => {}
            TxnState::InTransaction => {
                let stall = self.rng.chance(self.params.stall_prob);
                let stall_ms = self.rng.range(self.params.stall_ms.0, self.params.stall_ms.1);
                let n = self.rng.range(self.params.values_per_send.0 as u64, self.params.values_per_send.1 as u64);
                let slot = &mut self.producers[i];
                let plan = slot.plan.as_mut().expect("a transaction has a plan");
                if plan.sends_left > 0 && !closing {
                    plan.sends_left -= 1;
                    let tp = plan.partitions[plan.next % plan.partitions.len()].clone();
                    plan.next += 1;
                    if stall {
                        // Stalls stay below the transaction timeout: going past it is the pause fault's.
                        let ms = stall_ms.min(self.txn_timeout_ms / 2);
                        slot.idle_until = Instant::now() + Duration::from_millis(ms);
                    }
                    let values = self.next_values(&name, n);
                    self.send(i, &tp, values);
                } else {
                    let commit = plan.commit;
                    self.blocking(i, Some(commit));
                }
            }
            TxnState::MustAbort => self.blocking(i, Some(false)),
        }
    }

    /// `init_transactions` (`end` None), or the transaction's end: a flush (the sends' answers come
    /// first, as in the sim) then `commit_transaction` or `abort_transaction`, on a thread of its own.
    fn blocking(&mut self, i: usize, end: Option<bool>) {
        let slot = &mut self.producers[i];
        let call = match end {
            None => ProducerCall::Init,
            Some(true) => ProducerCall::Commit,
            Some(false) => ProducerCall::Abort,
        };
        let call_id = lock(&self.rec).invoke(&slot.spec.name, call);
        self.counts.ops += 1;
        slot.busy = true;
        let client = slot.client.clone().expect("started");
        let (tx, generation) = (self.done_tx.clone(), slot.generation);
        std::thread::spawn(move || {
            let result = match end {
                None => client.init_transactions(CALL_TIMEOUT),
                Some(commit) => {
                    let _ = client.flush(CALL_TIMEOUT);
                    if commit {
                        client.commit_transaction(CALL_TIMEOUT)
                    } else {
                        client.abort_transaction(CALL_TIMEOUT)
                    }
                }
            };
            client.poll(Duration::ZERO);
            let result = CallResult::of(&result, &client);
            let _ = tx.send(Done { slot: i, generation, call_id, end, result });
        });
    }

    /// A librdkafka send is one record: each value of the profile's send is its own call, so each
    /// acknowledgement is one offset.
    fn send(&mut self, i: usize, tp: &TopicPartition, values: Vec<String>) {
        let name = self.producers[i].spec.name.clone();
        let client = self.producers[i].client.clone().expect("started");
        for v in values {
            let call = ProducerCall::Send { partition: tp.clone(), values: vec![v.clone()] };
            let call_id = lock(&self.rec).invoke(&name, call);
            self.counts.ops += 1;
            let record: BaseRecord<'_, (), String, usize> =
                BaseRecord::with_opaque_to(&tp.topic, call_id as usize).partition(tp.partition as i32).payload(&v);
            if let Err((e, _)) = client.send(record) {
                let r = CallResult::of(&Err(e), &client);
                lock(&self.rec).complete(call_id, r.outcome.clone());
                if self.producers[i].transactional_id.is_some() {
                    self.after_error(i, &r);
                }
                return;
            }
        }
        client.poll(Duration::ZERO);
    }

    /// What the application does after a failed call: restart a fenced instance, abort an abortable
    /// transaction, or call again at its next step.
    fn after_error(&mut self, i: usize, r: &CallResult) {
        if r.fatal {
            self.counts.fenced += 1;
            self.restart(i);
        } else if r.requires_abort && self.producers[i].state == TxnState::InTransaction {
            self.producers[i].state = TxnState::MustAbort;
        }
    }

    fn draw_plan(&mut self) -> Plan {
        Plan::draw(&self.params, &mut self.rng, &self.write_partitions)
    }

    /// Every producer ends its open transaction as planned (a restarted one first initializes, which
    /// aborts what its previous instance left open), flushes and closes.
    fn finish_producers(&mut self) {
        let deadline = Instant::now() + CALL_TIMEOUT * 3;
        while Instant::now() < deadline {
            self.collect_done();
            let open: Vec<usize> = (0..self.producers.len())
                .filter(|&i| {
                    let p = &self.producers[i];
                    p.busy || (p.transactional_id.is_some() && !(p.client.is_some() && p.state == TxnState::Ready))
                })
                .collect();
            if open.is_empty() {
                break;
            }
            for i in open {
                self.producer_step(i, true);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        for i in 0..self.producers.len() {
            let slot = &mut self.producers[i];
            if let Some(c) = &slot.client {
                let _ = c.flush(CALL_TIMEOUT);
            }
            lock(&self.rec).abandon(&slot.spec.name);
            if slot.paused_past_timeout {
                self.counts.timed_out += 1;
            }
            // Closing an idempotent producer takes librdkafka ~100 ms; nothing waits for it.
            if let Some(c) = slot.client.take() {
                std::thread::spawn(move || drop(c));
            }
            slot.generation += 1;
        }
    }

    /// One consumer step: a seek back now and then (for readers that seek), else a poll of whatever
    /// librdkafka has fetched, recorded as one `Poll` per partition it delivered from.
    fn consumer_step(&mut self, i: usize) {
        let tp = self.rng.pick(&self.partitions).clone();
        let roll = self.rng.f64();
        let slot = &mut self.consumers[i];
        if slot.spec.seeks && roll < 0.04 {
            let position = slot.position.get(&tp).copied().unwrap_or(0);
            let offset = self.rng.range(0, position);
            let slot = &mut self.consumers[i];
            if slot.client.seek(&tp.topic, tp.partition as i32, RdOffset::Offset(offset as i64), CALL_TIMEOUT).is_ok() {
                slot.position.insert(tp.clone(), offset);
                let mut rec = lock(&self.rec);
                let time_ms = rec.now_ms();
                rec.push(Event::Seek { time_ms, consumer: slot.spec.name.clone(), partition: tp, offset });
            }
            return;
        }
        self.poll(i);
    }

    /// Takes what librdkafka has ready. HW and LSO in the history are the HW of the partition's latest
    /// fetch (`rd_kafka_get_watermark_offsets`): librdkafka keeps no LSO for the application, and the
    /// HW only grows, so it bounds the LSO of the fetch that brought these records from above.
    fn poll(&mut self, i: usize) -> u64 {
        let slot = &mut self.consumers[i];
        let mut got: Vec<(TopicPartition, Offset, String)> = Vec::new();
        for _ in 0..POLL_BATCH {
            match slot.client.poll(Duration::ZERO) {
                Some(Ok(m)) => {
                    let value = m.payload().map(|v| String::from_utf8_lossy(v).into_owned()).unwrap_or_default();
                    got.push((TopicPartition::new(m.topic(), m.partition() as u32), m.offset() as Offset, value));
                }
                Some(Err(_)) => {}
                None => break,
            }
        }
        let mut by_partition: BTreeMap<TopicPartition, Vec<(Offset, String)>> = BTreeMap::new();
        for (tp, o, v) in got {
            by_partition.entry(tp).or_default().push((o, v));
        }
        let mut delivered = 0;
        for (tp, records) in by_partition {
            let fetch_offset = slot.position.get(&tp).copied().unwrap_or(0);
            let position_after = records.last().map_or(fetch_offset, |r| r.0 + 1);
            let hw = cached_high_watermark(&slot.client, &tp).unwrap_or(position_after).max(position_after);
            slot.position.insert(tp.clone(), position_after);
            delivered += records.len() as u64;
            let mut rec = lock(&self.rec);
            let time_ms = rec.now_ms();
            rec.push(Event::Poll {
                time_ms,
                consumer: slot.spec.name.clone(),
                isolation: slot.spec.isolation,
                partition: tp,
                fetch_offset,
                high_watermark: hw,
                last_stable_offset: hw,
                records,
                position_after,
            });
        }
        self.counts.delivered += delivered;
        delivered
    }

    /// Every reader polls until it is past the last record its isolation level admits on every
    /// partition (known from the logs just read) and a quiet spell passes, or the budget runs out.
    fn drain(&mut self, logs: &[WireLog]) -> Result<(), String> {
        let mut last_admitted: BTreeMap<(IsolationLevel, TopicPartition), Offset> = BTreeMap::new();
        for log in logs {
            let facts = LogFacts::of(&log.to_partition_log()?);
            let tp = log.topic_partition();
            if let Some((o, _)) = facts.values.iter().next_back() {
                last_admitted.insert((IsolationLevel::ReadUncommitted, tp.clone()), *o);
            }
            if let Some(o) = facts.values.keys().rev().find(|o| facts.is_committed_data(**o)) {
                last_admitted.insert((IsolationLevel::ReadCommitted, tp), *o);
            }
        }
        let deadline = Instant::now() + DRAIN_BUDGET;
        let mut quiet_since = Instant::now();
        while Instant::now() < deadline {
            let mut delivered = 0;
            for i in 0..self.consumers.len() {
                delivered += self.poll(i);
            }
            let caught_up = self.consumers.iter().all(|c| {
                last_admitted
                    .iter()
                    .all(|((iso, tp), last)| *iso != c.spec.isolation || c.position.get(tp).is_some_and(|p| p > last))
            });
            if delivered > 0 {
                quiet_since = Instant::now();
            } else if caught_up && quiet_since.elapsed() >= DRAIN_QUIET {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }
}

/// `rd_kafka_get_watermark_offsets`: the HW of the partition's latest fetch answer, as librdkafka keeps it
/// (rust-rdkafka wraps only `fetch_watermarks`, a round trip to the broker).
pub(super) fn cached_high_watermark<C: rdkafka::consumer::ConsumerContext>(
    c: &BaseConsumer<C>,
    tp: &TopicPartition,
) -> Option<Offset> {
    let topic = std::ffi::CString::new(tp.topic.as_str()).ok()?;
    let (mut lo, mut hi) = (0i64, 0i64);
    // SAFETY: a live client handle and a NUL-terminated topic name; librdkafka writes only the two outputs.
    let err = unsafe {
        rdkafka::bindings::rd_kafka_get_watermark_offsets(
            c.client().native_ptr(),
            topic.as_ptr(),
            tp.partition as i32,
            &mut lo,
            &mut hi,
        )
    };
    (err == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && hi >= 0).then_some(hi as Offset)
}
