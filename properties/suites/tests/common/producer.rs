//! The producer layer: random op sequences over 1-3 transactional producers (distinct or shared
//! transactional ids), a plain and an idempotent producer, fresh and long-lived consumers of both
//! isolation levels, against `txnsim_engine::Cluster` driven as `src/scenario/runner.rs` drives it.
//! Every clean op is mirrored in `txnsim_properties::ReferenceModel`; fault ops (held, lost and duplicated
//! messages, a broker restart, time passing) switch the reference off and leave the invariants to judge.

use super::{catch_quietly, values_of};
use proptest::prelude::*;
use proptest::strategy::{BoxedStrategy, Union};
use std::collections::BTreeMap;
use std::fmt;
use txnsim_engine::coordinator::MARKER_RETRY_MS;
use txnsim_engine::producer::{OpId, OpOutput, Producer, TxnManagerState};
use txnsim_engine::protocol::{Effects, Envelope, Message, NodeId};
use txnsim_engine::{
    Cluster, Consumer, EngineConfig, IsolationLevel, KafkaError, Mutations, Offset, ProducerKind, TimeMs,
    TopicPartition, TransactionVersion,
};
use txnsim_properties::reference::Predicted;
use txnsim_properties::{
    check_committed_sends, check_failed_sends, check_history, check_liveness, check_read_superset, check_state, client,
    intent_claimed, CallOutcome, ClusterView, Event, History, Invariant, MonotonicityChecker, ProducerCall,
    ReferenceModel, StateChecker, Violation,
};

/// Which ops a case may hold, and how the engine is configured for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// Only ops the reference model mirrors: the engine is compared with it after every op.
    Clean,
    /// Clean ops plus hand-moved high watermarks (a lagging follower): reads and LSO/HW are judged by the
    /// invariants only, since the reference model's HW is the log end.
    ManualHw,
    /// Clean ops plus faults: delayed and timed-out produces, held / duplicated marker traffic, broker
    /// restarts, time passing. The reference is compared until the first fault, then only invariants judge.
    Faults,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setup {
    pub profile: Profile,
    pub tv: TransactionVersion,
    pub partitions: u8,
    /// Producer slot -> transactional id index (`tx0`, `tx1`, ...); equal indexes share an id.
    pub tids: Vec<u8>,
}

impl Setup {
    pub fn producers(&self) -> u8 {
        self.tids.len() as u8
    }
    pub fn tid(&self, p: u8) -> String {
        format!("tx{}", self.tids[p as usize])
    }
    pub fn config(&self, mutations: Mutations) -> EngineConfig {
        EngineConfig {
            transaction_version: self.tv,
            manual_high_watermark: self.profile == Profile::ManualHw,
            // Long enough that a produce times out at the client (4 x 30 s) before the coordinator aborts.
            transaction_timeout_ms: if self.profile == Profile::Faults { 300_000 } else { 60_000 },
            mutations,
            ..EngineConfig::default()
        }
    }
}

impl fmt::Display for Setup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let producers: Vec<String> = (0..self.producers()).map(|p| format!("P{p}={}", self.tid(p))).collect();
        write!(
            f,
            "{:?} profile, transaction.version {}, partitions t/0..t/{}, producers {}",
            self.profile,
            self.tv.number(),
            self.partitions - 1,
            producers.join(" ")
        )
    }
}

pub fn tp(part: u8) -> TopicPartition {
    TopicPartition::new("t", part as u32)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// A new instance of slot `p` (the old one, if any, dies); fences other instances of its id.
    Init {
        p: u8,
    },
    Begin {
        p: u8,
    },
    /// `retry`: the first answer is lost and the same batch (same sequence) is sent again.
    Send {
        p: u8,
        part: u8,
        n: u8,
        retry: bool,
    },
    Commit {
        p: u8,
    },
    Abort {
        p: u8,
    },
    /// A producer without a producer id.
    Plain {
        part: u8,
        n: u8,
    },
    /// An idempotent, non-transactional producer.
    Idem {
        part: u8,
        n: u8,
        retry: bool,
    },
    Crash {
        p: u8,
    },
    /// The coordinator times out slot `p`'s transactional id now.
    Expire {
        p: u8,
    },
    /// Fresh read_committed and read_uncommitted consumers from the same offset (chosen by `from`).
    Read {
        part: u8,
        from: u8,
    },
    /// One poll of the long-lived consumer of that isolation level on that partition.
    Poll {
        iso: IsolationLevel,
        part: u8,
    },
    /// ManualHw: the HW moves up to a batch boundary (followers copy whole batches), chosen by `pick`.
    SetHw {
        part: u8,
        pick: u8,
    },
    /// Faults: every copy of the batch is held in the network until the client gives up on it.
    SendTimesOut {
        p: u8,
        part: u8,
        n: u8,
    },
    /// Faults: the transaction ends; its WriteTxnMarkers requests are held in the network.
    EndHoldMarkers {
        p: u8,
        commit: bool,
    },
    /// Faults: the transaction ends; each WriteTxnMarkers response is duplicated, the copy held.
    EndDupResponses {
        p: u8,
        commit: bool,
    },
    /// Faults: every held message is delivered: current traffic first; then stale marker traffic (a
    /// duplicated WriteTxnMarkers response, a marker request whose decision is already complete or whose
    /// coordinator epoch is old) only where it cannot land on a later transaction of the same producer id
    /// (no completion pending for it, no transaction of it open on the partition); otherwise it is lost.
    Release,
    /// Every held message in the order held, stale ones included, the cluster run to quiet after each.
    /// Not generated: it exposes the engine's marker-response handling (the ignored tests in
    /// producer_layer.rs).
    ReleaseRaw,
    /// Faults: the broker restarts; `lose_held`: held messages to or from it are lost.
    Restart {
        lose_held: bool,
    },
    AdvanceTime {
        ms: u32,
    },
}

impl Op {
    /// One line, with the record values the op at index `i` writes.
    pub fn render(&self, i: usize) -> String {
        let vals = |n: u8| format!("[{}]", values_of(i, n).join(" "));
        let end = |commit: bool| if commit { "commit" } else { "abort" };
        match *self {
            Op::Init { p } => format!("P{p} init (new instance)"),
            Op::Begin { p } => format!("P{p} begin"),
            Op::Send { p, part, n, retry } => {
                format!(
                    "P{p} send t/{part} {}{}",
                    vals(n),
                    if retry { ", first answer lost, batch resent" } else { "" }
                )
            }
            Op::Commit { p } => format!("P{p} commit"),
            Op::Abort { p } => format!("P{p} abort"),
            Op::Plain { part, n } => format!("plain producer send t/{part} {}", vals(n)),
            Op::Idem { part, n, retry } => {
                format!(
                    "idempotent producer send t/{part} {}{}",
                    vals(n),
                    if retry { ", first answer lost, batch resent" } else { "" }
                )
            }
            Op::Crash { p } => format!("P{p} crash"),
            Op::Expire { p } => format!("coordinator times out P{p}'s transactional id"),
            Op::Read { part, from } => {
                format!("fresh read_committed + read_uncommitted reads of t/{part} from pick {from}")
            }
            Op::Poll { iso, part } => format!("long-lived {} consumer polls t/{part}", iso.name()),
            Op::SetHw { part, pick } => format!("HW of t/{part} moves up (pick {pick})"),
            Op::SendTimesOut { p, part, n } => {
                format!("P{p} send t/{part} {} held in the network until the client times out", vals(n))
            }
            Op::EndHoldMarkers { p, commit } => {
                format!("P{p} {} with its WriteTxnMarkers held in the network", end(commit))
            }
            Op::EndDupResponses { p, commit } => {
                format!("P{p} {} with each WriteTxnMarkers response duplicated (copy held)", end(commit))
            }
            Op::Release => "held messages delivered (stale marker traffic only where harmless)".to_string(),
            Op::ReleaseRaw => "held messages delivered one by one in the order held, stale ones included".to_string(),
            Op::Restart { lose_held } => {
                format!(
                    "broker restarts{}",
                    if lose_held { ", losing held messages" } else { ", held messages stay in flight" }
                )
            }
            Op::AdvanceTime { ms } => format!("time advances {ms} ms"),
        }
    }

    fn is_fault(&self) -> bool {
        matches!(
            self,
            Op::SendTimesOut { .. }
                | Op::EndHoldMarkers { .. }
                | Op::EndDupResponses { .. }
                | Op::Release
                | Op::ReleaseRaw
                | Op::Restart { .. }
                | Op::AdvanceTime { .. }
        )
    }
}

#[derive(Clone)]
pub struct Case {
    pub setup: Setup,
    pub ops: Vec<Op>,
}

/// proptest prints the minimal failing input with `{:?}`: one line per op.
impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.setup)?;
        for (i, op) in self.ops.iter().enumerate() {
            writeln!(f, "  #{i:<3} {}", op.render(i))?;
        }
        Ok(())
    }
}

/// Generators.
pub fn case_strategy(profile: Profile, tv: Option<TransactionVersion>, max_ops: usize) -> BoxedStrategy<Case> {
    let tv = match tv {
        Some(v) => Just(v).boxed(),
        None => prop_oneof![Just(TransactionVersion::V1), Just(TransactionVersion::V2)].boxed(),
    };
    (tv, 1..=3u8, proptest::collection::vec(0..3u8, 1..=3))
        .prop_flat_map(move |(tv, partitions, raw)| {
            // Slot i shares the id of an earlier slot or has its own.
            let tids: Vec<u8> = raw.iter().enumerate().map(|(i, t)| (*t).min(i as u8)).collect();
            let setup = Setup { profile, tv, partitions, tids };
            let ops = proptest::collection::vec(op_strategy(&setup), 1..=max_ops);
            (Just(setup), ops)
        })
        .prop_map(|(setup, ops)| Case { setup, ops })
        .boxed()
}

fn op_strategy(s: &Setup) -> BoxedStrategy<Op> {
    let np = s.producers();
    let npart = s.partitions;
    let p = move || 0..np;
    let part = move || 0..npart;
    let n = || 1..=3u8;
    let iso = || prop_oneof![Just(IsolationLevel::ReadCommitted), Just(IsolationLevel::ReadUncommitted)];
    let mut arms: Vec<(u32, BoxedStrategy<Op>)> = vec![
        (1, p().prop_map(|p| Op::Init { p }).boxed()),
        (1, p().prop_map(|p| Op::Begin { p }).boxed()),
        (8, (p(), part(), n()).prop_map(|(p, part, n)| Op::Send { p, part, n, retry: false }).boxed()),
        (1, (p(), part(), n()).prop_map(|(p, part, n)| Op::Send { p, part, n, retry: true }).boxed()),
        (3, p().prop_map(|p| Op::Commit { p }).boxed()),
        (2, p().prop_map(|p| Op::Abort { p }).boxed()),
        (1, (part(), n()).prop_map(|(part, n)| Op::Plain { part, n }).boxed()),
        (1, (part(), n(), any::<bool>()).prop_map(|(part, n, retry)| Op::Idem { part, n, retry }).boxed()),
        (1, p().prop_map(|p| Op::Crash { p }).boxed()),
        (1, p().prop_map(|p| Op::Expire { p }).boxed()),
        (2, (part(), any::<u8>()).prop_map(|(part, from)| Op::Read { part, from }).boxed()),
        (2, (iso(), part()).prop_map(|(iso, part)| Op::Poll { iso, part }).boxed()),
    ];
    match s.profile {
        Profile::Clean => {}
        Profile::ManualHw => {
            arms.push((3, (part(), any::<u8>()).prop_map(|(part, pick)| Op::SetHw { part, pick }).boxed()))
        }
        Profile::Faults => {
            arms.push((1, (p(), part(), n()).prop_map(|(p, part, n)| Op::SendTimesOut { p, part, n }).boxed()));
            arms.push((2, (p(), any::<bool>()).prop_map(|(p, commit)| Op::EndHoldMarkers { p, commit }).boxed()));
            arms.push((2, (p(), any::<bool>()).prop_map(|(p, commit)| Op::EndDupResponses { p, commit }).boxed()));
            arms.push((2, Just(Op::Release).boxed()));
            arms.push((1, any::<bool>().prop_map(|lose_held| Op::Restart { lose_held }).boxed()));
            arms.push((
                1,
                prop_oneof![Just(1_000u32), Just(30_000), Just(70_000)].prop_map(|ms| Op::AdvanceTime { ms }).boxed(),
            ));
        }
    }
    Union::new_weighted(arms).boxed()
}

/// A violation and where the run was when it was found.
#[derive(Clone, Debug)]
pub struct Found {
    pub at: String,
    pub violation: Violation,
}

/// What one run of a case found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The first violation of each invariant, in the order found.
    pub violations: Vec<Found>,
    /// The first difference between the engine and the reference model.
    pub mismatch: Option<String>,
    pub panic: Option<String>,
    /// What each op did, one line per op.
    pub lines: Vec<String>,
}

impl Report {
    pub fn has(&self, inv: Invariant) -> bool {
        self.violations.iter().any(|f| f.violation.invariant == inv)
    }
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty() && self.mismatch.is_none() && self.panic.is_none()
    }
    /// The invariant names, the witnesses, and the op sequence with what each op did.
    pub fn render(&self, case: &Case) -> String {
        let mut out = String::new();
        for f in &self.violations {
            out.push_str(&format!(
                "invariant {} violated at {}:\n    {}\n",
                f.violation.invariant.name(),
                f.at,
                f.violation.witness
            ));
        }
        if let Some(m) = &self.mismatch {
            out.push_str(&format!("engine and reference model differ at {m}\n"));
        }
        if let Some(p) = &self.panic {
            out.push_str(&format!("the engine panicked at {p}\n"));
        }
        out.push_str(&format!("{}\n", case.setup));
        for (i, op) in case.ops.iter().enumerate() {
            let did = self.lines.get(i).map(String::as_str).unwrap_or("(not run)");
            out.push_str(&format!("  #{i:<3} {:<72} -> {did}\n", op.render(i)));
        }
        out
    }
}

/// Runs one case: every op, the state invariants after every op (after every delivery under faults),
/// the reference comparison while it applies, then healing (faults off, held messages delivered, time past
/// every timeout, readers polled to the end), the liveness checks and the history checks.
pub fn run_case(case: &Case, mutations: Mutations) -> Report {
    let mut h = Harness::new(&case.setup, mutations);
    for (i, op) in case.ops.iter().enumerate() {
        h.at = format!("op #{i} ({})", op.render(i));
        if h.stuck {
            h.report.lines.push("skipped: the cluster never went quiet".into());
            continue;
        }
        match catch_quietly(|| h.exec(i, op)) {
            Ok(line) => h.report.lines.push(line),
            Err(msg) => {
                h.report.panic = Some(format!("{}: {msg}", h.at));
                return h.report;
            }
        }
        h.check_now();
        if h.ref_reads {
            h.compare_offsets();
        }
    }
    let at_end = catch_quietly(|| {
        h.heal();
        let readers = h.final_readers();
        let view = ClusterView::of_broker(&h.cluster.broker);
        let live = check_liveness(&view, &readers);
        h.at = "the liveness check after healing".into();
        h.record(live);
        let mut intent = Vec::new();
        if intent_claimed(h.setup.tv) {
            intent.extend(check_committed_sends(&h.history, &h.cluster.broker.replica_manager.logs));
            intent.extend(check_failed_sends(&h.history, &h.cluster.broker.replica_manager.logs));
        }
        h.at = "the client-intent check after healing".into();
        h.record(intent);
        let hist = check_history(&h.history, &h.cluster.broker.replica_manager.logs);
        h.at = "the history check at the end".into();
        h.record(hist);
    });
    if let Err(msg) = at_end {
        h.report.panic = Some(format!("{}: {msg}", h.at));
    }
    h.report
}

/// How the driver treats the messages of one op.
enum Mode {
    Plain,
    /// The first ProduceResponse to `client` is lost and its request delivered again.
    RetryProduce {
        client: NodeId,
        request: Option<Envelope>,
        done: bool,
    },
    /// Produce requests from `client` are held.
    HoldProduce {
        client: NodeId,
    },
    HoldMarkers,
    DupMarkerResponses,
}

enum Fate {
    Deliver,
    Hold,
    DeliverAndHoldCopy(Envelope),
    /// Drop this message and put `Envelope` on the network instead.
    Replace(Envelope),
}

impl Mode {
    fn fate(&mut self, env: &Envelope) -> Fate {
        match self {
            Mode::Plain => Fate::Deliver,
            Mode::RetryProduce { client, request, done } => {
                if *done {
                    return Fate::Deliver;
                }
                match &env.message {
                    Message::ProduceRequest { .. } if &env.from == client && request.is_none() => {
                        *request = Some(env.clone());
                        Fate::Deliver
                    }
                    Message::ProduceResponse { .. } if &env.to == client => match request.take() {
                        Some(req) if req.correlation_id == env.correlation_id => {
                            *done = true;
                            Fate::Replace(req)
                        }
                        other => {
                            *request = other;
                            Fate::Deliver
                        }
                    },
                    _ => Fate::Deliver,
                }
            }
            Mode::HoldProduce { client } => match &env.message {
                Message::ProduceRequest { .. } if &env.from == client => Fate::Hold,
                _ => Fate::Deliver,
            },
            Mode::HoldMarkers => match &env.message {
                Message::WriteTxnMarkersRequest { .. } => Fate::Hold,
                _ => Fate::Deliver,
            },
            Mode::DupMarkerResponses => match &env.message {
                Message::WriteTxnMarkersResponse { .. } => Fate::DeliverAndHoldCopy(env.clone()),
                _ => Fate::Deliver,
            },
        }
    }
}

/// Deliveries plus timer firings one op may take before the cluster counts as stuck.
const MAX_DRIVE_STEPS: usize = 3_000;
const PLAIN: &str = "plain";
const IDEM: &str = "idem";

struct Harness {
    setup: Setup,
    cluster: Cluster,
    reference: ReferenceModel,
    /// Compare op results, write and marker offsets with the reference.
    ref_writes: bool,
    /// Compare reads, LSO and HW with the reference.
    ref_reads: bool,
    history: History,
    mono: MonotonicityChecker,
    incremental: StateChecker,
    incarnations: Vec<u32>,
    live: Vec<Option<String>>,
    plain_ready: bool,
    idem_ready: bool,
    /// Calls awaiting their completion: (producer, op) -> history call id.
    pending: BTreeMap<(String, OpId), u64>,
    finished: BTreeMap<(String, OpId), Result<OpOutput, KafkaError>>,
    next_call_id: u64,
    /// Messages held back by fault ops, in the order held.
    held: Vec<Envelope>,
    /// HW and LSO of the last fetch response each consumer received.
    last_fetch: BTreeMap<String, (Offset, Offset)>,
    /// Long-lived consumers by (isolation, partition).
    consumers: BTreeMap<(IsolationLevel, u8), String>,
    reads: u64,
    /// Check the state invariants after every delivery, not only after every op.
    fine_checks: bool,
    /// While a client retries, fire background timers (marker resends, timeouts) that fall due, as time
    /// really passes; the clean profile drives exactly as `run_until_quiet` does.
    background_when_busy: bool,
    stuck: bool,
    last_fingerprint: Vec<u64>,
    at: String,
    report: Report,
}

/// The harness's layer of the client interpreter: a call's messages go through the network as `mode` drives
/// them (held, duplicated, resent), then time passes by `then_advance` (a send held until the client gives
/// up on it); the history records the call and its answer.
struct Driven<'h> {
    h: &'h mut Harness,
    mode: &'h mut Mode,
    then_advance: Option<TimeMs>,
}

impl client::Layer for Driven<'_> {
    type Answer = Option<Result<OpOutput, KafkaError>>;

    fn local(&mut self, name: &str, call: &ProducerCall, run: client::Local<'_>) -> Self::Answer {
        let call_id = self.h.invoke(name, call.clone());
        let r = run(self.h.cluster.producers.get_mut(name).expect("live"));
        let r = Some(r.map(|()| OpOutput::Committed));
        self.h.complete_now(name, call_id, &r);
        r
    }

    fn request(&mut self, name: &str, call: &ProducerCall, start: client::Start<'_>) -> Self::Answer {
        match self.h.start(name, call.clone(), start) {
            Err(e) => Some(Err(e)),
            Ok(op) => {
                self.h.drive(self.mode);
                if let Some(ms) = self.then_advance {
                    self.h.advance(ms, self.mode);
                }
                // A call the client finishes by itself (an empty transaction's commit) completes at once.
                self.h.collect_completions();
                self.h.finished.remove(&(name.to_string(), op))
            }
        }
    }
}

fn outcome(r: &Option<Result<OpOutput, KafkaError>>) -> CallOutcome {
    match r {
        None => CallOutcome::Unknown,
        Some(Err(e)) => CallOutcome::Failed { error: e.name().to_string() },
        Some(Ok(OpOutput::Sent { ack, .. })) => {
            CallOutcome::Sent { first_offset: ack.first_offset, last_offset: ack.last_offset, duplicate: ack.duplicate }
        }
        Some(Ok(_)) => CallOutcome::Ok,
    }
}

fn show(r: &Option<Result<OpOutput, KafkaError>>) -> String {
    match r {
        None => "no answer yet".to_string(),
        Some(Err(e)) => e.name().to_string(),
        Some(Ok(OpOutput::Initialized(pie))) => format!("producer {} epoch {}", pie.producer_id, pie.epoch),
        Some(Ok(OpOutput::Sent { ack, .. })) => {
            format!(
                "offsets {}..{}{}",
                ack.first_offset,
                ack.last_offset,
                if ack.duplicate { " (duplicate)" } else { "" }
            )
        }
        Some(Ok(OpOutput::Committed)) => "committed".to_string(),
        Some(Ok(OpOutput::Aborted)) => "aborted".to_string(),
        Some(Ok(OpOutput::OffsetsSent)) => "offsets sent".to_string(),
    }
}

fn show_markers(m: &BTreeMap<TopicPartition, Offset>) -> String {
    if m.is_empty() {
        String::new()
    } else {
        let list: Vec<String> = m.iter().map(|(tp, o)| format!("{tp}@{o}")).collect();
        format!(", markers {}", list.join(" "))
    }
}

fn show_records(r: &[(Offset, String)]) -> String {
    let list: Vec<String> = r.iter().map(|(o, v)| format!("{o}:{v}")).collect();
    format!("[{}]", list.join(" "))
}

type ReadResult = Result<(Vec<(Offset, String)>, Offset), KafkaError>;
/// One poll: delivered records, the position after, and whether the fetch came back empty.
type PollResult = Result<(Vec<(Offset, String)>, Offset, bool), KafkaError>;

fn show_read(r: &ReadResult) -> String {
    match r {
        Ok((records, position)) => format!("{} position {position}", show_records(records)),
        Err(e) => e.name().to_string(),
    }
}

impl Harness {
    fn new(setup: &Setup, mutations: Mutations) -> Self {
        let topics: BTreeMap<String, u32> = [("t".to_string(), setup.partitions as u32)].into_iter().collect();
        let faults = setup.profile == Profile::Faults;
        let n = setup.producers() as usize;
        Harness {
            setup: setup.clone(),
            cluster: Cluster::new(&topics, setup.config(mutations)),
            reference: ReferenceModel::new((0..setup.partitions).map(tp), setup.tv),
            ref_writes: true,
            ref_reads: setup.profile != Profile::ManualHw,
            history: History::default(),
            mono: MonotonicityChecker::default(),
            incremental: StateChecker::default(),
            incarnations: vec![0; n],
            live: vec![None; n],
            plain_ready: false,
            idem_ready: false,
            pending: BTreeMap::new(),
            finished: BTreeMap::new(),
            next_call_id: 0,
            held: Vec::new(),
            last_fetch: BTreeMap::new(),
            consumers: BTreeMap::new(),
            reads: 0,
            fine_checks: faults,
            background_when_busy: faults,
            stuck: false,
            last_fingerprint: Vec::new(),
            at: String::new(),
            report: Report::default(),
        }
    }

    fn record(&mut self, vs: Vec<Violation>) {
        for v in vs {
            if !self.report.violations.iter().any(|f| f.violation.invariant == v.invariant) {
                self.report.violations.push(Found { at: self.at.clone(), violation: v });
            }
        }
    }

    /// The first difference from the reference; the states diverge from there, so comparing stops.
    fn mismatch(&mut self, what: String) {
        if self.report.mismatch.is_none() {
            self.report.mismatch = Some(format!("{}: {what}", self.at));
        }
        self.ref_writes = false;
        self.ref_reads = false;
    }

    fn check_now(&mut self) {
        let view = ClusterView::of_broker(&self.cluster.broker);
        let mut vs = check_state(&view);
        // The scenario runner's incremental checker must find exactly what the stateless one does.
        assert_eq!(self.incremental.check(&view), vs, "{}: StateChecker departs from check_state", self.at);
        vs.extend(self.mono.observe(&view));
        self.record(vs);
    }

    fn compare_offsets(&mut self) {
        let mutations = self.cluster.config.mutations.clone();
        for part in 0..self.setup.partitions {
            let tp = tp(part);
            let log = self.cluster.broker.partition(&tp).expect("known partition");
            let engine = (log.last_stable_offset(&mutations), log.high_watermark(), log.log_end_offset());
            let hw = self.reference.high_watermark(&tp);
            let want = (self.reference.last_stable_offset(&tp), hw, hw);
            if engine != want {
                self.mismatch(format!(
                    "{tp}: engine LSO/HW/LEO {}/{}/{}, reference {}/{}/{}",
                    engine.0, engine.1, engine.2, want.0, want.1, want.2
                ));
                return;
            }
        }
    }

    fn broker_id(&self) -> NodeId {
        self.cluster.broker_id()
    }

    // ---- driving the network ----

    fn drive(&mut self, mode: &mut Mode) {
        for _ in 0..MAX_DRIVE_STEPS {
            let fate = match self.cluster.peek_message() {
                Some(env) => {
                    if let (Message::FetchResponse { result: Ok(data), .. }, NodeId::Client(c)) =
                        (&env.message, &env.to)
                    {
                        self.last_fetch.insert(c.clone(), (data.high_watermark, data.last_stable_offset));
                    }
                    Some(mode.fate(env))
                }
                None => None,
            };
            match fate {
                Some(Fate::Deliver) => {
                    self.cluster.step();
                }
                Some(Fate::Hold) => {
                    let env = self.cluster.take_message().expect("peeked above");
                    self.held.push(env);
                }
                Some(Fate::DeliverAndHoldCopy(copy)) => {
                    self.held.push(copy);
                    self.cluster.step();
                }
                Some(Fate::Replace(with)) => {
                    self.cluster.take_message();
                    self.cluster.inject(with);
                }
                None if self.cluster.has_client_timer() => {
                    if self.background_when_busy {
                        self.cluster.fire_next_timer();
                    } else {
                        self.cluster.step();
                    }
                }
                None => return,
            }
            self.after_step();
        }
        self.stuck = true;
    }

    /// Moves time forward by `ms`, firing every timer that falls due, driving the network between them.
    fn advance(&mut self, ms: TimeMs, mode: &mut Mode) {
        let until = self.cluster.now_ms + ms;
        for _ in 0..MAX_DRIVE_STEPS {
            self.drive(mode);
            if self.stuck {
                return;
            }
            match self.cluster.next_timer_due_ms() {
                Some(due) if due <= until => {
                    self.cluster.fire_next_timer();
                    self.after_step();
                }
                _ => break,
            }
        }
        self.cluster.now_ms = self.cluster.now_ms.max(until);
    }

    fn after_step(&mut self) {
        self.collect_completions();
        if self.fine_checks {
            let now = self.fingerprint();
            if now != self.last_fingerprint {
                self.last_fingerprint = now;
                self.check_now();
            }
        }
    }

    /// A cheap summary of what the state invariants read (logs, HWs, coordinator states and decisions):
    /// fine-grained checks run only when it changes, not on every retry answered CONCURRENT_TRANSACTIONS.
    fn fingerprint(&self) -> Vec<u64> {
        let b = &self.cluster.broker;
        let mut f = Vec::with_capacity(16);
        for log in b.replica_manager.logs.values() {
            f.extend([log.log_start_offset(), log.high_watermark(), log.log_end_offset()]);
        }
        let c = &b.coordinator;
        f.push(c.coordinator_epoch as u64);
        f.push(c.decisions.len() as u64);
        f.push(c.decisions.iter().filter(|d| d.completed).count() as u64);
        f.push(c.pending_completions.values().map(|p| p.remaining.len() as u64 + 1).sum());
        for m in c.txns.values() {
            f.extend([m.transitions.len() as u64, m.producer_epoch as u64, m.topic_partitions.len() as u64]);
        }
        f
    }

    fn collect_completions(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let names: Vec<String> = self.cluster.producers.keys().cloned().collect();
        for name in names {
            let done = self.cluster.producers.get_mut(&name).expect("listed").take_completions();
            for c in done {
                let key = (name.clone(), c.op);
                if let Some(call_id) = self.pending.remove(&key) {
                    let out = outcome(&Some(c.result.clone()));
                    self.history.push(Event::Complete {
                        time_ms: self.cluster.now_ms,
                        process: name.clone(),
                        call_id,
                        outcome: out,
                    });
                }
                self.finished.insert(key, c.result);
            }
        }
    }

    fn invoke(&mut self, name: &str, call: ProducerCall) -> u64 {
        self.next_call_id += 1;
        let call_id = self.next_call_id;
        self.history.push(Event::Invoke { time_ms: self.cluster.now_ms, process: name.to_string(), call_id, call });
        call_id
    }

    fn complete_now(&mut self, name: &str, call_id: u64, r: &Option<Result<OpOutput, KafkaError>>) {
        self.history.push(Event::Complete {
            time_ms: self.cluster.now_ms,
            process: name.to_string(),
            call_id,
            outcome: outcome(r),
        });
    }

    /// Starts a producer call: `Err` is the client's immediate rejection (already in the history).
    fn start(
        &mut self,
        name: &str,
        call: ProducerCall,
        f: impl FnOnce(&mut Producer, TimeMs) -> Result<(OpId, Effects), KafkaError>,
    ) -> Result<OpId, KafkaError> {
        let call_id = self.invoke(name, call);
        let now = self.cluster.now_ms;
        let producer = self.cluster.producers.get_mut(name).expect("a live producer");
        match f(producer, now) {
            Err(e) => {
                self.complete_now(name, call_id, &Some(Err(e)));
                Err(e)
            }
            Ok((op, effects)) => {
                let node = producer.id.clone();
                self.pending.insert((name.to_string(), op), call_id);
                self.cluster.apply(&node, effects);
                Ok(op)
            }
        }
    }

    /// Runs a client call through the interpreter (`txnsim_properties::client`), its messages as `mode`
    /// drives them.
    fn call(&mut self, name: &str, call: ProducerCall, mode: &mut Mode) -> Option<Result<OpOutput, KafkaError>> {
        client::exec(&mut Driven { h: self, mode, then_advance: None }, name, &call)
    }

    fn markers_since(&self, before: &BTreeMap<TopicPartition, Offset>, tid: &str) -> BTreeMap<TopicPartition, Offset> {
        client::markers_since(&self.cluster, before, tid)
    }

    fn compare_end(
        &mut self,
        what: &str,
        predicted: Predicted,
        r: &Option<Result<OpOutput, KafkaError>>,
        markers: &BTreeMap<TopicPartition, Offset>,
    ) {
        match (&predicted, r) {
            (Predicted::Ended { markers: want }, Some(Ok(_))) if want == markers => {}
            (Predicted::Ended { markers: want }, Some(Ok(_))) => {
                let (w, m) = (show_markers(want), show_markers(markers));
                self.mismatch(format!(
                    "{what} succeeded as predicted but wrote markers '{m}', the reference wrote '{w}'"
                ))
            }
            (Predicted::Ok, Some(Ok(_))) | (Predicted::Fails, Some(Err(_))) => {}
            _ => {
                self.mismatch(format!("{what}: the reference predicts {predicted:?}, the engine answered {}", show(r)))
            }
        }
    }

    fn compare_write(
        &mut self,
        what: &str,
        predicted: Predicted,
        r: &Option<Result<OpOutput, KafkaError>>,
        duplicate: bool,
    ) {
        match (&predicted, r) {
            (Predicted::Wrote { first_offset, last_offset }, Some(Ok(OpOutput::Sent { ack, .. })))
                if ack.first_offset == *first_offset
                    && ack.last_offset == *last_offset
                    && ack.duplicate == duplicate => {}
            (Predicted::Fails, Some(Err(_))) => {}
            _ => self.mismatch(format!(
                "{what}: the reference predicts {predicted:?}{}, the engine answered {}",
                if duplicate { " (as a duplicate)" } else { "" },
                show(r)
            )),
        }
    }

    // ---- ops ----

    /// A new instance of slot `p`: the old one (if any) dies; InitProducerId fences other instances of the id.
    fn init_instance(&mut self, p: u8) -> String {
        let tid = self.setup.tid(p);
        if let Some(old) = self.live[p as usize].take() {
            self.cluster.crash_producer(&old);
            if self.ref_writes {
                self.reference.crash(&old);
            }
        }
        self.incarnations[p as usize] += 1;
        let name = format!("P{p}.{}", self.incarnations[p as usize]);
        self.live[p as usize] = Some(name.clone());
        self.cluster.add_producer(&name, ProducerKind::Transactional { transactional_id: tid.clone() });
        let before = client::log_ends(&self.cluster);
        let r = self.call(&name, ProducerCall::Init, &mut Mode::Plain);
        let markers = self.markers_since(&before, &tid);
        if self.ref_writes {
            let predicted = self.reference.init(&name, &tid);
            self.compare_end("init", predicted, &r, &markers);
        }
        format!("{name} of {tid}: {}{}", show(&r), show_markers(&markers))
    }

    /// Ops name producer slots, not instances: an op on a slot with no running instance starts one first
    /// (an implicit init), and a send from an instance outside a transaction begins one first (an implicit
    /// begin). Misuse stays reachable: an explicit begin inside a transaction, commit outside one, ops on a
    /// failed instance. Returns what was done implicitly, for the trace.
    fn exec(&mut self, i: usize, op: &Op) -> String {
        let mut implicit = String::new();
        let slot = match *op {
            Op::Begin { p }
            | Op::Send { p, .. }
            | Op::Commit { p }
            | Op::Abort { p }
            | Op::SendTimesOut { p, .. }
            | Op::EndHoldMarkers { p, .. }
            | Op::EndDupResponses { p, .. } => Some(p),
            _ => None,
        };
        if let Some(p) = slot {
            if self.live[p as usize].is_none() {
                implicit = format!("(implicit init: {}) ", self.init_instance(p));
            }
            let sends = matches!(op, Op::Send { .. } | Op::SendTimesOut { .. });
            let name = self.live[p as usize].clone().expect("running");
            if sends && self.cluster.producers[&name].state == TxnManagerState::Ready {
                implicit.push_str(&format!("(implicit begin: {}) ", self.exec_op(i, &Op::Begin { p })));
            }
        }
        let line = self.exec_op(i, op);
        format!("{implicit}{line}")
    }

    fn exec_op(&mut self, i: usize, op: &Op) -> String {
        if op.is_fault() {
            self.ref_writes = false;
            self.ref_reads = false;
        }
        let live = |h: &Self, p: u8| h.live[p as usize].clone();
        match *op {
            Op::Init { p } => self.init_instance(p),
            Op::Begin { p } => {
                let Some(name) = live(self, p) else { return format!("skipped: P{p} is not running") };
                let r = self.call(&name, ProducerCall::Begin, &mut Mode::Plain);
                if self.ref_writes {
                    let predicted = self.reference.begin(&name);
                    let ok = matches!(r, Some(Ok(_)));
                    if (predicted == Predicted::Ok) != ok {
                        self.mismatch(format!(
                            "begin: the reference predicts {predicted:?}, the engine answered {}",
                            if ok { "ok".into() } else { show(&r) }
                        ));
                    }
                }
                format!("{name}: {}", if matches!(r, Some(Ok(_))) { "ok".to_string() } else { show(&r) })
            }
            Op::Send { p, part, n, retry } => {
                let Some(name) = live(self, p) else { return format!("skipped: P{p} is not running") };
                let (tp, values) = (tp(part), values_of(i, n));
                let mut mode = if retry {
                    Mode::RetryProduce { client: NodeId::Client(name.clone()), request: None, done: false }
                } else {
                    Mode::Plain
                };
                let call = ProducerCall::Send { partition: tp.clone(), values: values.clone() };
                let r = self.call(&name, call, &mut mode);
                let resent = matches!(mode, Mode::RetryProduce { done: true, .. });
                if self.ref_writes {
                    let predicted = self.reference.send(&name, &tp, &values);
                    self.compare_write("send", predicted, &r, resent);
                }
                format!("{name}: {}", show(&r))
            }
            Op::Commit { p } | Op::Abort { p } | Op::EndHoldMarkers { p, .. } | Op::EndDupResponses { p, .. } => {
                let Some(name) = live(self, p) else { return format!("skipped: P{p} is not running") };
                let commit = match *op {
                    Op::Commit { .. } => true,
                    Op::Abort { .. } => false,
                    Op::EndHoldMarkers { commit, .. } | Op::EndDupResponses { commit, .. } => commit,
                    _ => unreachable!(),
                };
                let mut mode = match *op {
                    Op::EndHoldMarkers { .. } => Mode::HoldMarkers,
                    Op::EndDupResponses { .. } => Mode::DupMarkerResponses,
                    _ => Mode::Plain,
                };
                let tid = self.setup.tid(p);
                let before = client::log_ends(&self.cluster);
                let (call, what) =
                    if commit { (ProducerCall::Commit, "commit") } else { (ProducerCall::Abort, "abort") };
                let r = self.call(&name, call, &mut mode);
                let markers = self.markers_since(&before, &tid);
                if self.ref_writes {
                    let predicted = self.reference.end_txn(&name, commit);
                    self.compare_end(what, predicted, &r, &markers);
                }
                let held = match *op {
                    Op::EndHoldMarkers { .. } | Op::EndDupResponses { .. } => {
                        format!(", {} message(s) held", self.held.len())
                    }
                    _ => String::new(),
                };
                format!("{name}: {}{}{held}", show(&r), show_markers(&markers))
            }
            Op::Plain { part, n } | Op::Idem { part, n, .. } => {
                let idem = matches!(op, Op::Idem { .. });
                let retry = matches!(op, Op::Idem { retry: true, .. });
                let name = if idem { IDEM } else { PLAIN };
                let mut note = String::new();
                if idem && !self.idem_ready {
                    self.cluster.add_producer(IDEM, ProducerKind::Idempotent);
                    let r = self.call(IDEM, ProducerCall::Init, &mut Mode::Plain);
                    if !matches!(r, Some(Ok(_))) {
                        self.mismatch(format!("the idempotent producer's init answered {}", show(&r)));
                    }
                    note = format!("init {}; ", show(&r));
                    self.idem_ready = true;
                }
                if !idem && !self.plain_ready {
                    self.cluster.add_producer(PLAIN, ProducerKind::Plain);
                    self.plain_ready = true;
                }
                let (tp, values) = (tp(part), values_of(i, n));
                let mut mode = if retry {
                    Mode::RetryProduce { client: NodeId::Client(name.to_string()), request: None, done: false }
                } else {
                    Mode::Plain
                };
                let call = ProducerCall::Send { partition: tp.clone(), values: values.clone() };
                let r = self.call(name, call, &mut mode);
                let resent = matches!(mode, Mode::RetryProduce { done: true, .. });
                if self.ref_writes {
                    let predicted = self.reference.write_nontxn(&tp, &values);
                    self.compare_write("non-transactional send", predicted, &r, resent);
                }
                format!("{note}{}", show(&r))
            }
            Op::Crash { p } => {
                let Some(name) = self.live[p as usize].take() else { return format!("skipped: P{p} is not running") };
                self.cluster.crash_producer(&name);
                if self.ref_writes {
                    self.reference.crash(&name);
                }
                format!("{name} crashed")
            }
            Op::Expire { p } => {
                let tid = self.setup.tid(p);
                let before = client::log_ends(&self.cluster);
                let now = self.cluster.now_ms;
                let (expired, effects) = self.cluster.broker.expire_transaction(&tid, now);
                let broker = self.broker_id();
                self.cluster.apply(&broker, effects);
                self.drive(&mut Mode::Plain);
                let markers = self.markers_since(&before, &tid);
                if self.ref_writes {
                    let predicted = self.reference.expire(&tid);
                    let engine = Some(Ok(OpOutput::Aborted));
                    self.compare_end("expire", predicted, &engine, &markers);
                }
                format!(
                    "{tid}: {}{}",
                    if expired { "timed out" } else { "nothing to time out" },
                    show_markers(&markers)
                )
            }
            Op::Read { part, from } => {
                let tp = tp(part);
                let leo = self.cluster.broker.partition(&tp).expect("known").log_end_offset();
                // Mostly inside the log, often its start, sometimes just past its end (OFFSET_OUT_OF_RANGE).
                let from = match from {
                    0..=63 => 0,
                    64..=239 => from as Offset % (leo + 1),
                    _ => leo + 1,
                };
                let rc = self.fresh_read(IsolationLevel::ReadCommitted, &tp, from);
                let ru = self.fresh_read(IsolationLevel::ReadUncommitted, &tp, from);
                if let (Ok((c, _)), Ok((u, _))) = (&rc, &ru) {
                    let vs = check_read_superset(&tp, from, u, c);
                    self.record(vs);
                }
                if self.ref_reads {
                    for (iso, got) in [(IsolationLevel::ReadCommitted, &rc), (IsolationLevel::ReadUncommitted, &ru)] {
                        let want = self.reference.read(&tp, iso, from);
                        let same = match (&want, got) {
                            (None, Err(KafkaError::OffsetOutOfRange)) => true,
                            (Some(w), Ok(g)) => w == g,
                            _ => false,
                        };
                        if !same {
                            let w = want.map(|w| show_read(&Ok(w))).unwrap_or_else(|| "OFFSET_OUT_OF_RANGE".into());
                            self.mismatch(format!(
                                "{} read of {tp} from {from}: engine {}, reference {w}",
                                iso.name(),
                                show_read(got)
                            ));
                            break;
                        }
                    }
                }
                format!("from {from}: read_committed {} | read_uncommitted {}", show_read(&rc), show_read(&ru))
            }
            Op::Poll { iso, part } => {
                let tp = tp(part);
                let name = match self.consumers.get(&(iso, part)) {
                    Some(n) => n.clone(),
                    None => {
                        let name = format!("{}-{tp}", if iso == IsolationLevel::ReadCommitted { "rc" } else { "ru" });
                        self.add_consumer(&name, iso, &tp, 0);
                        self.consumers.insert((iso, part), name.clone());
                        name
                    }
                };
                let from = self.cluster.consumers[&name].position(&tp).expect("assigned");
                let got = self.poll_once(&name, iso, &tp).map(|(records, position, _)| (records, position));
                if self.ref_reads {
                    let want = self.reference.read(&tp, iso, from);
                    let same = matches!((&want, &got), (Some(w), Ok(g)) if w == g);
                    if !same {
                        let w = want.map(|w| show_read(&Ok(w))).unwrap_or_else(|| "OFFSET_OUT_OF_RANGE".into());
                        self.mismatch(format!("{name} poll from {from}: engine {}, reference {w}", show_read(&got)));
                    }
                }
                format!("{name} from {from}: {}", show_read(&got))
            }
            Op::SetHw { part, pick } => {
                let tp = tp(part);
                let mutations = self.cluster.config.mutations.clone();
                let log = self.cluster.broker.partition_mut(&tp).expect("known");
                let (hw, leo) = (log.high_watermark(), log.log_end_offset());
                let to = super::pick_batch_boundary(log, pick);
                log.update_high_watermark(to, &mutations);
                format!("HW {hw} -> {} (LEO {leo})", log.high_watermark())
            }
            Op::SendTimesOut { p, part, n } => {
                let Some(name) = live(self, p) else { return format!("skipped: P{p} is not running") };
                let (tp, values) = (tp(part), values_of(i, n));
                let mut mode = Mode::HoldProduce { client: NodeId::Client(name.clone()) };
                let call = ProducerCall::Send { partition: tp.clone(), values: values.clone() };
                let then_advance = Some(self.cluster.config.delivery_timeout_ms + 1);
                let r = client::exec(&mut Driven { h: self, mode: &mut mode, then_advance }, &name, &call);
                format!("{name}: {}, {} message(s) held", show(&r), self.held.len())
            }
            Op::Release => {
                let (delivered, lost) = self.release();
                format!("{delivered} message(s) delivered, {lost} stale one(s) lost")
            }
            Op::ReleaseRaw => {
                let n = self.held.len();
                for env in std::mem::take(&mut self.held) {
                    self.cluster.inject(env);
                    self.drive(&mut Mode::Plain);
                }
                format!("{n} message(s) delivered")
            }
            Op::Restart { lose_held } => {
                let broker = self.broker_id();
                let before = self.held.len();
                if lose_held {
                    self.held.retain(|e| e.from != broker && e.to != broker);
                }
                // Whatever is in flight dies with the broker's connections (the network is quiet between
                // ops, so this is empty unless the last op left the cluster busy).
                let in_flight = self.cluster.drop_messages().len();
                let now = self.cluster.now_ms;
                let effects = self.cluster.broker.restart(now);
                self.cluster.apply(&broker, effects);
                self.drive(&mut Mode::Plain);
                format!(
                    "coordinator epoch now {}; {} held and {in_flight} in-flight message(s) lost",
                    self.cluster.broker.coordinator.coordinator_epoch,
                    before - self.held.len()
                )
            }
            Op::AdvanceTime { ms } => {
                self.advance(ms as TimeMs, &mut Mode::Plain);
                format!("now {} ms", self.cluster.now_ms)
            }
        }
    }

    /// Marker traffic whose transaction is already decided and complete (or decided by an older
    /// coordinator): a duplicated response, or a request the coordinator has since resent.
    fn is_stale(&self, env: &Envelope) -> bool {
        let c = &self.cluster.broker.coordinator;
        match &env.message {
            Message::WriteTxnMarkersResponse { .. } => true,
            Message::WriteTxnMarkersRequest { markers } => markers.iter().any(|m| {
                m.coordinator_epoch < c.coordinator_epoch
                    || !c
                        .pending_completions
                        .get(&m.producer_id)
                        .is_some_and(|p| p.producer.epoch == m.producer_epoch && p.result == m.result)
            }),
            _ => false,
        }
    }

    /// Stale marker traffic is harmless when no completion is pending for its producer id (a response
    /// cannot be credited to a later transaction) and, for a request, the producer has no transaction open
    /// on its partitions (a marker cannot close a later transaction) and the request repeats the producer's
    /// latest decision there (it cannot follow a later decision's marker).
    fn harmless(&self, env: &Envelope) -> bool {
        let c = &self.cluster.broker.coordinator;
        match &env.message {
            Message::WriteTxnMarkersResponse { results } => {
                results.iter().all(|(pid, _, _)| !c.pending_completions.contains_key(pid))
            }
            Message::WriteTxnMarkersRequest { markers } => markers.iter().all(|m| {
                !c.pending_completions.contains_key(&m.producer_id)
                    && m.partitions.iter().all(|tp| {
                        let closes_nothing = self.cluster.broker.partition(tp).is_none_or(|log| {
                            log.producer_state.entry(m.producer_id).is_none_or(|e| e.current_txn_first_offset.is_none())
                        });
                        let latest = c
                            .decisions
                            .iter()
                            .rev()
                            .find(|d| d.producer_id == m.producer_id && d.partitions.contains(tp));
                        let repeats_latest =
                            latest.is_some_and(|d| d.result == m.result && d.marker_epoch == m.producer_epoch);
                        closes_nothing && repeats_latest
                    })
            }),
            _ => true,
        }
    }

    /// `Op::Release`: returns (delivered, lost).
    fn release(&mut self) -> (usize, usize) {
        let held = std::mem::take(&mut self.held);
        let (stale, current): (Vec<Envelope>, Vec<Envelope>) = held.into_iter().partition(|e| self.is_stale(e));
        let mut delivered = current.len();
        for env in current {
            self.cluster.inject(env);
        }
        self.drive(&mut Mode::Plain);
        let mut lost = 0;
        for env in stale {
            if self.harmless(&env) {
                delivered += 1;
                self.cluster.inject(env);
                self.drive(&mut Mode::Plain);
            } else {
                lost += 1;
            }
        }
        (delivered, lost)
    }

    // ---- consumers ----

    fn add_consumer(&mut self, name: &str, iso: IsolationLevel, tp: &TopicPartition, from: Offset) {
        let mut consumer = Consumer::new(name, iso, self.broker_id(), self.cluster.config.clone());
        consumer.seek(tp.clone(), from);
        self.cluster.consumers.insert(name.to_string(), consumer);
        self.history.push(Event::Seek {
            time_ms: self.cluster.now_ms,
            consumer: name.to_string(),
            partition: tp.clone(),
            offset: from,
        });
    }

    /// One fetch and its answer: delivered records, the position after, and whether the fetch was empty.
    fn poll_once(&mut self, name: &str, iso: IsolationLevel, tp: &TopicPartition) -> PollResult {
        let now = self.cluster.now_ms;
        let consumer = self.cluster.consumers.get_mut(name).expect("a consumer");
        let fetch_offset = consumer.position(tp).expect("assigned");
        let effects = consumer.poll(now, tp);
        self.cluster.apply(&NodeId::Client(name.to_string()), effects);
        self.last_fetch.remove(name);
        self.drive(&mut Mode::Plain);
        let c = self.cluster.consumers.get_mut(name).expect("a consumer");
        let records: Vec<(Offset, String)> = c.take_delivered().into_iter().map(|r| (r.offset, r.value)).collect();
        if let Some((_, e)) = c.take_errors().into_iter().next() {
            return Err(e);
        }
        let position = c.position(tp).expect("assigned");
        let caught_up = c.is_caught_up(tp);
        let Some(&(high_watermark, last_stable_offset)) = self.last_fetch.get(name) else {
            return Err(KafkaError::RequestTimedOut);
        };
        self.history.push(Event::Poll {
            time_ms: self.cluster.now_ms,
            consumer: name.to_string(),
            isolation: iso,
            partition: tp.clone(),
            fetch_offset,
            high_watermark,
            last_stable_offset,
            records: records.clone(),
            position_after: position,
        });
        Ok((records, position, caught_up))
    }

    /// A fresh consumer at `from`, polled until a fetch comes back empty (as `Cluster::read` does).
    fn fresh_read(&mut self, iso: IsolationLevel, tp: &TopicPartition, from: Offset) -> ReadResult {
        self.reads += 1;
        let name = format!("{}{}", if iso == IsolationLevel::ReadCommitted { "rc" } else { "ru" }, self.reads);
        self.add_consumer(&name, iso, tp, from);
        let polls_max = self.cluster.broker.partition(tp).expect("known").log_end_offset() + 2;
        let mut delivered = Vec::new();
        let mut result = Ok(());
        let mut position = from;
        for _ in 0..polls_max {
            match self.poll_once(&name, iso, tp) {
                Err(e) => {
                    result = Err(e);
                    break;
                }
                Ok((records, pos, caught_up)) => {
                    delivered.extend(records);
                    position = pos;
                    if caught_up {
                        break;
                    }
                }
            }
        }
        self.cluster.consumers.remove(&name);
        result.map(|()| (delivered, position))
    }

    // ---- the end of a run ----

    fn set_hw_to_leo(&mut self) {
        if self.setup.profile != Profile::ManualHw {
            return;
        }
        let mutations = self.cluster.config.mutations.clone();
        for log in self.cluster.broker.replica_manager.logs.values_mut() {
            let leo = log.log_end_offset();
            log.update_high_watermark(leo, &mutations);
        }
    }

    /// Faults stop: held messages are delivered, followers catch up, time passes every timeout twice.
    fn heal(&mut self) {
        self.ref_writes = false;
        self.ref_reads = false;
        self.at = "healing".into();
        self.stuck = false;
        let config = self.cluster.config.clone();
        let span = config.transaction_timeout_ms
            + config.abort_timed_out_cleanup_interval_ms
            + MARKER_RETRY_MS
            + config.delivery_timeout_ms
            + 1_000;
        for _ in 0..2 {
            self.release();
            self.set_hw_to_leo();
            self.advance(span, &mut Mode::Plain);
            self.set_hw_to_leo();
            self.check_now();
        }
    }

    /// After healing: a fresh read_committed reader per partition drains it, and each long-lived
    /// read_committed consumer keeps polling; their positions are what the liveness check judges.
    fn final_readers(&mut self) -> Vec<(String, TopicPartition, Offset)> {
        let mut out = Vec::new();
        for part in 0..self.setup.partitions {
            let tp = tp(part);
            let start = self.cluster.broker.partition(&tp).expect("known").log_start_offset();
            if let Ok((_, position)) = self.fresh_read(IsolationLevel::ReadCommitted, &tp, start) {
                out.push((format!("rc{}", self.reads), tp.clone(), position));
            }
            if let Some(name) = self.consumers.get(&(IsolationLevel::ReadCommitted, part)).cloned() {
                let polls_max = self.cluster.broker.partition(&tp).expect("known").log_end_offset() + 2;
                let mut position = self.cluster.consumers[&name].position(&tp).expect("assigned");
                for _ in 0..polls_max {
                    match self.poll_once(&name, IsolationLevel::ReadCommitted, &tp) {
                        Ok((_, pos, caught_up)) => {
                            position = pos;
                            if caught_up {
                                break;
                            }
                        }
                        Err(_) => break,
                    }
                }
                out.push((name, tp.clone(), position));
            }
        }
        out
    }
}
