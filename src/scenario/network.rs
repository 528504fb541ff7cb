//! The `network` layer: the cluster does not run to quiescence. Every request and response waits in flight
//! until an op delivers, drops, duplicates or holds it, so a scenario can lose or delay one message the way
//! Kafka's `MockClient`-driven tests (`TransactionManagerTest`, `SenderTest`) do, and time moves only when
//! an op advances it. Client calls only enqueue requests; their outcomes are checked by name.

use super::format::{Isolation, ReadExpect};
use super::ScenarioError;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use txnsim_engine::consumer::{Consumer, ConsumerRecord, GroupRebalanceConfig, MemberState};
use txnsim_engine::coordinator::{TransactionMetadata, TransactionState};
use txnsim_engine::log::PartitionLog;
use txnsim_engine::producer::ConsumerGroupMetadata;
use txnsim_engine::producer::{OpId, OpOutput, Producer};
use txnsim_engine::protocol::group::GroupMessage;
use txnsim_engine::protocol::Message;
use txnsim_engine::protocol::NO_LEADER;
use txnsim_engine::protocol::{Envelope, NodeId};
use txnsim_engine::record::{BatchBody, CompressionType};
use txnsim_engine::topic::offsets_partition_for;
use txnsim_engine::{
    read_to_end, Cluster, EngineConfig, IsolationLevel, KafkaError, Mutations, ProducerKind, TimeMs, TopicPartition,
    TransactionVersion, TxnManagerState,
};
use txnsim_properties::{client, CallOutcome, Event, History, ProducerCall};

/// The longest span of time a network scenario may name (about 31 years): every clock sum stays far from
/// overflow.
pub const MAX_SCENARIO_MS: TimeMs = 1_000_000_000_000;

/// Which message in flight an op means: its API, sender and receiver, and which of the matches (1-based,
/// oldest first). `kind` tells a request from a response where both go the same way (broker to itself).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pick {
    pub api: String,
    pub from: String,
    pub to: String,
    pub occurrence: Option<usize>,
    pub kind: Option<MessageKind>,
    /// With `hold`: every matching message, now and until `release` with `every` (a clogged link for that
    /// API); with `release`: every held match, and the clog ends.
    #[serde(default)]
    pub every: bool,
}

impl Pick {
    fn matches(&self, e: &Envelope) -> bool {
        e.message.api_name() == self.api
            && e.from.to_string() == self.from
            && e.to.to_string() == self.to
            && self.kind.is_none_or(|k| (k == MessageKind::Request) == e.message.is_request())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageKind {
    Request,
    Response,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetAction {
    /// Deliver it now; what its receiver sends stays in flight.
    Deliver,
    /// Lose it.
    Drop,
    /// Put a copy at the back of the network (a retransmission the receiver sees twice).
    Duplicate,
    /// Set it aside; `release` puts it back in flight, delayed past everything sent meanwhile.
    Hold,
    Release,
}

/// Which client `init_producer` starts: Kafka's `TransactionManager` with or without a transactional id,
/// or a producer with idempotence off (no producer id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientKind {
    Transactional,
    Idempotent,
    Plain,
}

/// Producer settings a scenario may override (Kafka's names with `_` for `.`); the rest are Kafka's defaults.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProducerConfig {
    pub request_timeout_ms: Option<TimeMs>,
    pub delivery_timeout_ms: Option<TimeMs>,
    pub retry_backoff_ms: Option<TimeMs>,
    pub linger_ms: Option<TimeMs>,
    pub max_in_flight_requests_per_connection: Option<u32>,
    pub transaction_timeout_ms: Option<TimeMs>,
    pub retries: Option<u32>,
    pub compression_type: Option<CompressionType>,
}

impl ProducerConfig {
    pub fn apply(&self, base: &EngineConfig) -> EngineConfig {
        let mut c = base.clone();
        c.request_timeout_ms = self.request_timeout_ms.unwrap_or(c.request_timeout_ms);
        c.delivery_timeout_ms = self.delivery_timeout_ms.unwrap_or(c.delivery_timeout_ms);
        c.retry_backoff_ms = self.retry_backoff_ms.unwrap_or(c.retry_backoff_ms);
        c.linger_ms = self.linger_ms.unwrap_or(c.linger_ms);
        c.max_in_flight_requests_per_connection =
            self.max_in_flight_requests_per_connection.unwrap_or(c.max_in_flight_requests_per_connection);
        c.transaction_timeout_ms = self.transaction_timeout_ms.unwrap_or(c.transaction_timeout_ms);
        c.retries = self.retries.unwrap_or(c.retries);
        c.compression_type = self.compression_type.unwrap_or(c.compression_type);
        c
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitProducer {
    pub producer: String,
    pub transactional_id: Option<String>,
    /// Default `transactional`; an `idempotent` one has no transactional id, a `plain` one no producer id.
    pub kind: Option<ClientKind>,
    #[serde(default)]
    pub config: ProducerConfig,
    /// The highest transaction version the client speaks (default 2); the scenario's version caps it.
    pub client_transaction_version: Option<u8>,
    /// The producer's `transaction.timeout.ms` (sent in its InitProducerId), when not the default.
    pub transaction_timeout_ms: Option<TimeMs>,
    #[serde(rename = "as")]
    pub name: Option<String>,
    pub expect_error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientCall {
    pub producer: String,
    #[serde(rename = "as")]
    pub name: Option<String>,
    pub expect_error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Send {
    pub producer: String,
    pub topic: Option<String>,
    pub partition: u32,
    pub values: Vec<String>,
    #[serde(rename = "as")]
    pub name: Option<String>,
    pub expect_error: Option<String>,
}

/// `sendOffsetsToTransaction`: `offsets` as `{"topic/partition": offset}`; `generation_id` and
/// `member_id` are the consumer's group metadata (KIP-447), absent for a producer that names only the group.
/// With `consumer` instead of `group`, the group metadata is that consumer's `groupMetadata()` and the
/// offsets, unless given, its positions.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SendOffsets {
    pub producer: String,
    pub group: Option<String>,
    pub consumer: Option<String>,
    pub offsets: Option<BTreeMap<String, i64>>,
    pub generation_id: Option<i32>,
    pub member_id: Option<String>,
    #[serde(rename = "as")]
    pub name: Option<String>,
    pub expect_error: Option<String>,
}

/// `subscribe`: a new consumer of `isolation` that joins `group` for `topics` (`KafkaConsumer.subscribe`);
/// it sends nothing until polled. The timeouts are Kafka's consumer defaults unless given.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Subscribe {
    pub consumer: String,
    pub group: String,
    pub topics: Vec<String>,
    pub isolation: Isolation,
    pub session_timeout_ms: Option<TimeMs>,
    pub rebalance_timeout_ms: Option<TimeMs>,
    pub heartbeat_interval_ms: Option<TimeMs>,
}

/// `poll` or `close_consumer` of a consumer that subscribed.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsumerCall {
    pub consumer: String,
}

/// One pass of the consume-transform-produce loop over what `consumer` delivered since the last pass:
/// `producer` begins a transaction, sends each record's transform to `topic` (the input's partition
/// number, modulo `topic`'s partitions) and sends the consumer's positions with its `groupMetadata()`;
/// `as` names the offsets call. The commit is the scenario's next `commit` op.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Process {
    pub consumer: String,
    pub producer: String,
    pub topic: String,
    #[serde(rename = "as")]
    pub name: Option<String>,
}

/// A plain OffsetCommit from outside the group protocol (an `assign()` consumer or an admin client:
/// generation -1, no member), sent from client `client` (default `admin`), answered to nobody.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitOffsets {
    pub client: Option<String>,
    pub group: String,
    pub offsets: BTreeMap<String, i64>,
}

/// What OffsetFetch answers for a group: per `"topic/partition"`, the committed offset, `null` for none,
/// or the error (`UNSTABLE_OFFSET_COMMIT` under `require_stable` while a transaction's offset is pending).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupOffsetsExpect {
    pub group: String,
    #[serde(default)]
    pub require_stable: bool,
    pub offsets: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Disconnect {
    pub client: String,
    pub broker: u32,
    /// Whether the broker had processed the requests before the connection broke (both cases exist in
    /// Kafka's `MockClient` tests): processed requests take effect, and their answers are lost.
    pub processed: bool,
}

/// `crash_broker` / `start_broker` of a replicated cluster.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrokerFault {
    pub broker: u32,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdvanceTime {
    pub ms: TimeMs,
}

/// A `__transaction_state` record the coordinator loads before the first op (`transactional_ids`): a
/// transactional id already far into its life, as Kafka's coordinator tests build a `TransactionMetadata`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadedTransaction {
    pub transactional_id: String,
    pub producer_id: i64,
    pub epoch: i16,
    #[serde(default = "no_epoch")]
    pub last_epoch: i16,
    /// `Empty`, `CompleteCommit` or `CompleteAbort`: a state with no transaction open.
    pub state: String,
    /// `txnLastUpdateTimestamp` (default 0, the scenario's start).
    #[serde(default)]
    pub last_update_timestamp_ms: TimeMs,
}

fn no_epoch() -> i16 {
    -1
}

impl LoadedTransaction {
    /// The metadata as a coordinator reads it from the record; `None` for a state the field does not take.
    pub fn metadata(&self) -> Option<TransactionMetadata> {
        let state = [TransactionState::Empty, TransactionState::CompleteCommit, TransactionState::CompleteAbort]
            .into_iter()
            .find(|s| s.name() == self.state)?;
        let timeout = EngineConfig::default().transaction_timeout_ms;
        let mut meta =
            TransactionMetadata::new(&self.transactional_id, self.producer_id, timeout, self.last_update_timestamp_ms);
        meta.producer_epoch = self.epoch;
        meta.last_producer_epoch = self.last_epoch;
        meta.state = state;
        meta.transitions[0].state = state;
        Some(meta)
    }
}

/// What a `TransactionManager` holds, as Kafka's tests assert it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProducerExpect {
    pub name: String,
    /// Kafka's `TransactionManager.State` name: `READY`, `IN_TRANSACTION`, `ABORTABLE_ERROR`, ...
    pub state: Option<String>,
    pub producer_id: Option<i64>,
    pub epoch: Option<i16>,
    /// `{"topic/partition": next sequence}`.
    pub next_sequence: Option<BTreeMap<String, i32>>,
    pub in_flight_batches: Option<usize>,
    /// The error behind ABORTABLE_ERROR or FATAL_ERROR.
    pub last_error: Option<String>,
}

/// What a `TransactionMetadata` holds, as Kafka's coordinator tests assert it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoordinatorExpect {
    pub transactional_id: String,
    /// Kafka's state name: `Empty`, `Ongoing`, `PrepareCommit`, `CompleteAbort`, ..., or null for an id the
    /// coordinator holds no metadata for (never initialised, or expired).
    #[serde(default, deserialize_with = "nullable")]
    pub state: Option<Option<String>>,
    pub producer_id: Option<i64>,
    pub epoch: Option<i16>,
    pub last_epoch: Option<i16>,
    /// The pending transition's state name, or null for none.
    #[serde(default, deserialize_with = "nullable")]
    pub pending: Option<Option<String>>,
    pub partitions: Option<Vec<String>>,
    /// `txnStartTimestamp`: when the transaction began (its first partition, or a TV2 empty abort).
    pub txn_start_timestamp_ms: Option<TimeMs>,
}

/// A consumer as the application and its coordinator see it; each field given must match.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsumerExpect {
    pub name: String,
    /// `AbstractCoordinator.MemberState`: `UNJOINED`, `PREPARING_REBALANCE`, `COMPLETING_REBALANCE`, `STABLE`.
    pub state: Option<String>,
    pub generation_id: Option<i32>,
    pub member_id: Option<String>,
    /// The assigned partitions, as `"topic/partition"`, ascending.
    pub assignment: Option<Vec<String>>,
    /// `position()` per assigned partition that has one.
    pub positions: Option<BTreeMap<String, u64>>,
    /// Every value the consumer delivered so far, in order.
    pub consumed: Option<Vec<String>>,
    /// The error the group protocol threw, or null.
    #[serde(default, deserialize_with = "nullable")]
    pub fatal: Option<Option<String>>,
}

/// A partition's registration at the controller (`PartitionRegistration`): each field given must match.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistrationExpect {
    pub topic: Option<String>,
    pub partition: u32,
    /// The leader's broker id, or -1 for none (Kafka's `NO_LEADER`).
    pub leader: Option<i64>,
    pub leader_epoch: Option<i32>,
    pub isr: Option<Vec<u32>>,
    pub elr: Option<Vec<u32>>,
    pub last_known_elr: Option<Vec<u32>>,
}

/// A partition's log: each offset as its record's value or its marker (`COMMIT`, `ABORT`), and offsets.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogExpect {
    pub topic: Option<String>,
    pub partition: u32,
    /// Whose replica of the partition (default broker 0, its leader).
    pub broker: Option<u32>,
    /// That broker's committed ISR of the partition (`partitionState.isr`), ascending.
    pub isr: Option<Vec<u32>>,
    pub records: Option<Vec<String>>,
    pub lso: Option<u64>,
    pub high_watermark: Option<u64>,
    pub log_end_offset: Option<u64>,
}

/// A leader's KIP-890 `VerificationStateEntry` for one producer on one partition.
#[derive(Clone, Debug, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct VerificationExpect {
    pub topic: Option<String>,
    pub partition: u32,
    pub producer_id: i64,
    pub lowest_sequence: i32,
    pub epoch: i16,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Read {
    pub isolation: Isolation,
    pub topic: Option<String>,
    pub partition: u32,
    pub from_offset: u64,
    pub expect: ReadExpect,
}

/// Everything an `expect` op (or the scenario's final `expect`) may pin down; absent fields are not checked.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// Every message in flight, oldest first, as `"EndTxn request p -> broker-0"`.
    pub in_flight: Option<Vec<String>>,
    pub held: Option<Vec<String>>,
    pub producers: Option<Vec<ProducerExpect>>,
    pub consumers: Option<Vec<ConsumerExpect>>,
    pub coordinator: Option<Vec<CoordinatorExpect>>,
    /// Each named call's outcome as the application sees it: `pending`, `ok`, or a Kafka error name.
    pub outcomes: Option<BTreeMap<String, String>>,
    pub logs: Option<Vec<LogExpect>>,
    /// The controller's registration of these partitions (leader, ISR, KIP-966's ELR).
    pub registrations: Option<Vec<RegistrationExpect>>,
    pub reads: Option<Vec<Read>>,
    pub now_ms: Option<TimeMs>,
    /// The client-intent invariants (`failed-send-committed`, `committed-writes-committed`) the history so
    /// far violates, checked whatever the transaction version: under TV1 KIP-890's late batch is Kafka's
    /// real behaviour, and this is how a scenario shows it.
    pub intent_violations: Option<Vec<String>>,
    /// Every leader's verification entries, by partition then producer id.
    pub verification_entries: Option<Vec<VerificationExpect>>,
    /// What OffsetFetch answers for these groups and partitions.
    pub group_offsets: Option<Vec<GroupOffsetsExpect>>,
}

/// A field that may be given as `null`: absent is `None`, `null` is `Some(None)`.
fn nullable<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

#[derive(Clone, Debug, PartialEq)]
pub enum NetOp {
    InitProducer(InitProducer),
    Begin(ClientCall),
    Send(Send),
    Commit(ClientCall),
    Abort(ClientCall),
    SendOffsets(SendOffsets),
    CommitOffsets(CommitOffsets),
    Subscribe(Subscribe),
    /// `KafkaConsumer.poll` of a group member: its coordinator's requests and its fetches go in flight.
    Poll(ConsumerCall),
    /// `KafkaConsumer.close`: LeaveGroup.
    CloseConsumer(ConsumerCall),
    /// A processor's rewind after an abort: every assigned partition restarts from the committed offset.
    ResetToCommitted(ConsumerCall),
    Process(Process),
    Net(NetAction, Pick),
    Disconnect(Disconnect),
    AdvanceTime(AdvanceTime),
    /// Deliver every message in flight, oldest first, until none is left (held ones stay held; no timer fires).
    Run,
    /// The broker crashes and restarts (`Broker::restart`): what was in flight is lost, every client's
    /// connection to it breaks, the coordinator reloads `__transaction_state` under a new epoch.
    RestartBroker,
    /// A replicated cluster's broker dies, its log kept (`Cluster::crash_broker`): the controller elects
    /// new leaders for what it led.
    CrashBroker(BrokerFault),
    /// A crashed broker starts again from its log (`Cluster::start_broker`).
    StartBroker(BrokerFault),
    Expect(Box<Expect>),
}

impl NetOp {
    pub fn name(&self) -> &'static str {
        match self {
            NetOp::InitProducer(_) => "init_producer",
            NetOp::Begin(_) => "begin",
            NetOp::Send(_) => "send",
            NetOp::Commit(_) => "commit",
            NetOp::Abort(_) => "abort",
            NetOp::SendOffsets(_) => "send_offsets",
            NetOp::CommitOffsets(_) => "commit_offsets",
            NetOp::Subscribe(_) => "subscribe",
            NetOp::Poll(_) => "poll",
            NetOp::CloseConsumer(_) => "close_consumer",
            NetOp::ResetToCommitted(_) => "reset_to_committed",
            NetOp::Process(_) => "process",
            NetOp::Net(NetAction::Deliver, _) => "deliver",
            NetOp::Net(NetAction::Drop, _) => "drop",
            NetOp::Net(NetAction::Duplicate, _) => "duplicate",
            NetOp::Net(NetAction::Hold, _) => "hold",
            NetOp::Net(NetAction::Release, _) => "release",
            NetOp::Disconnect(_) => "disconnect",
            NetOp::AdvanceTime(_) => "advance_time",
            NetOp::Run => "run",
            NetOp::RestartBroker => "restart_broker",
            NetOp::CrashBroker(_) => "crash_broker",
            NetOp::StartBroker(_) => "start_broker",
            NetOp::Expect(_) => "expect",
        }
    }
}

fn from_value<T: DeserializeOwned>(v: Value) -> Result<T, (Option<String>, String)> {
    super::deserialize(v)
}

/// Parses one op of a network scenario; the error names the field and says what is wrong.
pub fn parse_op(value: Value) -> Result<NetOp, (Option<String>, String)> {
    let Value::Object(mut map) = value else {
        return Err((None, "an op is a JSON object".into()));
    };
    let name = match map.remove("op") {
        Some(Value::String(s)) => s,
        Some(other) => return Err((Some("op".into()), format!("must be a string, found {other}"))),
        None => return Err((Some("op".into()), "missing field".into())),
    };
    let rest = Value::Object(map);
    let net = |a| from_value(rest.clone()).map(|p| NetOp::Net(a, p));
    match name.as_str() {
        "init_producer" => from_value(rest).map(NetOp::InitProducer),
        "begin" => from_value(rest).map(NetOp::Begin),
        "send" => from_value(rest).map(NetOp::Send),
        "commit" => from_value(rest).map(NetOp::Commit),
        "abort" => from_value(rest).map(NetOp::Abort),
        "send_offsets" => from_value(rest).map(NetOp::SendOffsets),
        "commit_offsets" => from_value(rest).map(NetOp::CommitOffsets),
        "subscribe" => from_value(rest).map(NetOp::Subscribe),
        "poll" => from_value(rest).map(NetOp::Poll),
        "close_consumer" => from_value(rest).map(NetOp::CloseConsumer),
        "reset_to_committed" => from_value(rest).map(NetOp::ResetToCommitted),
        "process" => from_value(rest).map(NetOp::Process),
        "deliver" => net(NetAction::Deliver),
        "drop" => net(NetAction::Drop),
        "duplicate" => net(NetAction::Duplicate),
        "hold" => net(NetAction::Hold),
        "release" => net(NetAction::Release),
        "disconnect" => from_value(rest).map(NetOp::Disconnect),
        "advance_time" => from_value(rest).map(NetOp::AdvanceTime),
        "crash_broker" => from_value(rest).map(NetOp::CrashBroker),
        "start_broker" => from_value(rest).map(NetOp::StartBroker),
        "expect" => from_value(rest).map(|e| NetOp::Expect(Box::new(e))),
        "run" | "restart_broker" => match rest.as_object().and_then(|m| m.keys().next()) {
            Some(k) => Err((Some(k.clone()), "unknown field".into())),
            None if name == "run" => Ok(NetOp::Run),
            None => Ok(NetOp::RestartBroker),
        },
        other => Err((
            Some("op".into()),
            format!(
                "unknown op '{other}' for the network layer (init_producer, begin, send, commit, abort, \
                 send_offsets, commit_offsets, subscribe, poll, close_consumer, reset_to_committed, process, \
                 deliver, drop, duplicate, hold, release, disconnect, advance_time, \
                 run, restart_broker, crash_broker, start_broker, expect)"
            ),
        )),
    }
}

/// Checks before running what needs no engine: error names, state names, producer names.
pub fn validate(
    ops: &[NetOp],
    expect: Option<&Expect>,
    err: &dyn Fn(Option<usize>, &str, String) -> ScenarioError,
) -> Result<(), ScenarioError> {
    let error_name = |at, field: &str, n: &Option<String>| match n {
        Some(n) if KafkaError::from_name(n).is_none() => {
            Err(err(at, field, format!("'{n}' is not a Kafka error name this engine knows")))
        }
        _ => Ok(()),
    };
    let mut producers: BTreeSet<&str> = BTreeSet::new();
    let mut consumers: BTreeSet<&str> = BTreeSet::new();
    let mut names: BTreeSet<&str> = BTreeSet::new();
    let consumer_known = |consumers: &BTreeSet<&str>, at, c: &str| {
        if consumers.contains(c) {
            Ok(())
        } else {
            Err(err(at, "consumer", format!("no consumer '{c}': it needs a subscribe first")))
        }
    };
    for (i, op) in ops.iter().enumerate() {
        let at = Some(i);
        let (producer, name, expect_error) = match op {
            NetOp::InitProducer(o) => {
                if let Some(v) = o.client_transaction_version {
                    if TransactionVersion::from_number(v).is_none() {
                        return Err(err(at, "client_transaction_version", format!("must be 1 or 2, found {v}")));
                    }
                }
                let c = &o.config;
                let times = [
                    c.request_timeout_ms,
                    c.delivery_timeout_ms,
                    c.retry_backoff_ms,
                    c.linger_ms,
                    c.transaction_timeout_ms,
                    o.transaction_timeout_ms,
                ];
                if let Some(ms) = times.into_iter().flatten().find(|ms| *ms > MAX_SCENARIO_MS) {
                    return Err(err(at, "config", format!("{ms} ms is more than a scenario's {MAX_SCENARIO_MS} ms")));
                }
                // Kafka refuses such a producer at construction (`ConfigException`).
                o.config.apply(&EngineConfig::default()).check_producer_config().map_err(|e| err(at, "config", e))?;
                if o.kind != Some(ClientKind::Plain) && o.config.retries == Some(0) {
                    // `ProducerConfig.postProcessAndValidateIdempotenceConfigs`.
                    let why = "Must set retries to non-zero when using the idempotent producer".to_string();
                    return Err(err(at, "config", why));
                }
                if o.kind.is_some_and(|k| k != ClientKind::Transactional) && o.transactional_id.is_some() {
                    return Err(err(at, "transactional_id", "only a transactional producer has one".into()));
                }
                if consumers.contains(o.producer.as_str()) {
                    return Err(err(at, "producer", format!("'{}' is a consumer's name", o.producer)));
                }
                producers.insert(&o.producer);
                (&o.producer, &o.name, &o.expect_error)
            }
            NetOp::Begin(o) | NetOp::Commit(o) | NetOp::Abort(o) => (&o.producer, &o.name, &o.expect_error),
            NetOp::Send(o) => (&o.producer, &o.name, &o.expect_error),
            NetOp::SendOffsets(o) => {
                for k in o.offsets.iter().flat_map(|o| o.keys()) {
                    partition_key(k).map_err(|e| err(at, "offsets", e))?;
                }
                match (&o.group, &o.consumer) {
                    (Some(_), None) if o.offsets.is_none() => {
                        return Err(err(at, "offsets", "a send_offsets naming a group gives its offsets".into()))
                    }
                    (Some(_), None) => {}
                    (None, Some(c)) => {
                        consumer_known(&consumers, at, c)?;
                        if o.generation_id.is_some() || o.member_id.is_some() {
                            let why = "the consumer's groupMetadata() gives the generation and member".into();
                            return Err(err(at, "consumer", why));
                        }
                    }
                    _ => return Err(err(at, "group", "give exactly one of group and consumer".into())),
                }
                (&o.producer, &o.name, &o.expect_error)
            }
            NetOp::Subscribe(o) => {
                if consumers.contains(o.consumer.as_str()) || producers.contains(o.consumer.as_str()) {
                    return Err(err(at, "consumer", format!("the name '{}' is taken", o.consumer)));
                }
                let times = [o.session_timeout_ms, o.rebalance_timeout_ms, o.heartbeat_interval_ms];
                if let Some(ms) = times.into_iter().flatten().find(|ms| *ms > MAX_SCENARIO_MS) {
                    return Err(err(at, "ms", format!("{ms} ms is more than a scenario's {MAX_SCENARIO_MS} ms")));
                }
                consumers.insert(&o.consumer);
                continue;
            }
            NetOp::Poll(c) | NetOp::CloseConsumer(c) | NetOp::ResetToCommitted(c) => {
                consumer_known(&consumers, at, &c.consumer)?;
                continue;
            }
            NetOp::Process(o) => {
                consumer_known(&consumers, at, &o.consumer)?;
                if let Some(n) = &o.name {
                    if !names.insert(n) {
                        return Err(err(at, "as", format!("the name '{n}' is already taken by an earlier op")));
                    }
                }
                (&o.producer, &None, &None)
            }
            NetOp::CommitOffsets(o) => {
                for k in o.offsets.keys() {
                    partition_key(k).map_err(|e| err(at, "offsets", e))?;
                }
                continue;
            }
            NetOp::Disconnect(d) => {
                if !producers.contains(d.client.as_str()) {
                    return Err(err(at, "client", format!("no producer '{}' yet", d.client)));
                }
                continue;
            }
            NetOp::Expect(e) => {
                validate_expect(e, at, err)?;
                continue;
            }
            NetOp::AdvanceTime(t) => {
                if t.ms > MAX_SCENARIO_MS {
                    return Err(err(at, "ms", format!("{} is more than a scenario's {MAX_SCENARIO_MS} ms", t.ms)));
                }
                continue;
            }
            NetOp::Net(..) | NetOp::Run | NetOp::RestartBroker | NetOp::CrashBroker(_) | NetOp::StartBroker(_) => {
                continue
            }
        };
        if !producers.contains(producer.as_str()) {
            return Err(err(at, "producer", format!("no producer '{producer}': it needs an init_producer first")));
        }
        if let Some(n) = name {
            if !names.insert(n) {
                return Err(err(at, "as", format!("the name '{n}' is already taken by an earlier op")));
            }
        }
        error_name(at, "expect_error", expect_error)?;
    }
    if let Some(e) = expect {
        validate_expect(e, None, err)?;
    }
    Ok(())
}

fn validate_expect(
    e: &Expect,
    at: Option<usize>,
    err: &dyn Fn(Option<usize>, &str, String) -> ScenarioError,
) -> Result<(), ScenarioError> {
    // An `expect` op's fields are the op's own; the scenario's final ones sit under its `expect` key.
    let err = |at: Option<usize>, field: &str, why: String| match at {
        Some(_) => err(at, field, why),
        None => err(at, &format!("expect.{field}"), why),
    };
    for (k, c) in e.consumers.iter().flatten().enumerate() {
        if let Some(s) = &c.state {
            if !MemberState::ALL.iter().any(|m| m.name() == s) {
                return Err(err(at, &format!("consumers[{k}].state"), format!("'{s}' is not a MemberState")));
            }
        }
        for key in c.assignment.iter().flatten().chain(c.positions.iter().flat_map(|p| p.keys())) {
            partition_key(key).map_err(|e| err(at, &format!("consumers[{k}]"), e))?;
        }
        if let Some(Some(e)) = &c.fatal {
            if KafkaError::from_name(e).is_none() {
                let why = format!("'{e}' is not a Kafka error name this engine knows");
                return Err(err(at, &format!("consumers[{k}].fatal"), why));
            }
        }
    }
    for (k, p) in e.producers.iter().flatten().enumerate() {
        if let Some(s) = &p.state {
            if client_state(s).is_none() {
                return Err(err(
                    at,
                    &format!("producers[{k}].state"),
                    format!("'{s}' is not a TransactionManager state"),
                ));
            }
        }
    }
    for (k, name) in e.intent_violations.iter().flatten().enumerate() {
        if txnsim_properties::Invariant::from_name(name).is_none() {
            let why = format!("'{name}' is not an invariant of the catalogue");
            return Err(err(at, &format!("intent_violations[{k}]"), why));
        }
    }
    for (k, c) in e.coordinator.iter().flatten().enumerate() {
        let other = c.producer_id.is_some()
            || c.epoch.is_some()
            || c.last_epoch.is_some()
            || c.pending.is_some()
            || c.partitions.is_some()
            || c.txn_start_timestamp_ms.is_some();
        if c.state == Some(None) && other {
            let why = "an id with no metadata (state null) has no other fields to expect".to_string();
            return Err(err(at, &format!("coordinator[{k}]"), why));
        }
    }
    for (k, g) in e.group_offsets.iter().flatten().enumerate() {
        for (key, v) in &g.offsets {
            let field = format!("group_offsets[{k}].offsets");
            partition_key(key).map_err(|e| err(at, &field, e))?;
            let ok =
                v.is_null() || v.as_u64().is_some() || v.as_str().is_some_and(|n| KafkaError::from_name(n).is_some());
            if !ok {
                let field = format!("{field}.{key}");
                return Err(err(at, &field, format!("{v} is neither an offset (0 or more), null nor a Kafka error")));
            }
        }
    }
    for (name, outcome) in e.outcomes.iter().flatten() {
        if !matches!(outcome.as_str(), "ok" | "pending") && KafkaError::from_name(outcome).is_none() {
            return Err(err(
                at,
                &format!("outcomes.{name}"),
                format!("'{outcome}' is neither ok, pending nor a Kafka error"),
            ));
        }
    }
    Ok(())
}

/// `"topic/partition"` as the partition it names.
fn partition_key(key: &str) -> Result<TopicPartition, String> {
    let bad = || format!("'{key}' is not \"topic/partition\"");
    let (topic, n) = key.rsplit_once('/').ok_or_else(bad)?;
    let n: u32 = n.parse().map_err(|_| bad())?;
    if topic.is_empty() {
        return Err(bad());
    }
    Ok(TopicPartition::new(topic, n))
}

/// Offsets keyed by `"topic/partition"` (checked by `validate`).
fn offsets_of(offsets: &BTreeMap<String, i64>) -> Vec<(TopicPartition, i64)> {
    offsets.iter().map(|(k, o)| (partition_key(k).expect("validated"), *o)).collect()
}

/// A consumer's positions on its assigned partitions: the offsets a processor commits.
fn positions_of(consumer: &Consumer) -> Vec<(TopicPartition, i64)> {
    let assigned = consumer.group().map(|g| g.assignment().iter().cloned().collect::<Vec<_>>()).unwrap_or_default();
    assigned.into_iter().filter_map(|tp| consumer.position(&tp).map(|o| (tp, o as i64))).collect()
}

fn client_state(name: &str) -> Option<TxnManagerState> {
    TxnManagerState::ALL.into_iter().find(|s| s.name() == name)
}

/// An op as the step table names it: its name and what it acts on.
pub fn describe_op(op: &NetOp) -> String {
    let name = op.name();
    let offsets = |o: &BTreeMap<String, i64>| o.iter().map(|(k, v)| format!("{k}: {v}")).collect::<Vec<_>>().join(", ");
    match op {
        NetOp::InitProducer(p) => match &p.transactional_id {
            Some(t) => format!("{name} {} (transactional.id {t})", p.producer),
            None => format!("{name} {}", p.producer),
        },
        NetOp::Begin(c) | NetOp::Commit(c) | NetOp::Abort(c) => format!("{name} {}", c.producer),
        NetOp::Send(s) => format!("{name} {} -> {} {:?}", s.producer, tp(&s.topic, s.partition), s.values),
        NetOp::SendOffsets(s) => {
            let group = match (&s.group, &s.consumer) {
                (Some(g), _) => format!("group {g}"),
                (None, c) => format!("consumer {}'s group", c.as_deref().unwrap_or_default()),
            };
            let given = s.offsets.as_ref().map_or("positions".into(), |o| format!("{{{}}}", offsets(o)));
            format!("{name} {} {group} {given}", s.producer)
        }
        NetOp::Subscribe(s) => format!("{name} {} to {:?} in group {}", s.consumer, s.topics, s.group),
        NetOp::Poll(c) | NetOp::CloseConsumer(c) | NetOp::ResetToCommitted(c) => format!("{name} {}", c.consumer),
        NetOp::Process(p) => format!("{name} {}'s input by {} into {}", p.consumer, p.producer, p.topic),
        NetOp::CommitOffsets(c) => format!("{name} group {} {{{}}}", c.group, offsets(&c.offsets)),
        NetOp::Net(_, p) => {
            let kind = p.kind.map(|k| if k == MessageKind::Request { " request" } else { " response" });
            let nth = p.occurrence.map(|n| format!(" (match {n})")).unwrap_or_default();
            let every = if p.every { " (every one)" } else { "" };
            format!("{name} {}{} {} -> {}{nth}{every}", p.api, kind.unwrap_or_default(), p.from, p.to)
        }
        NetOp::Disconnect(d) => {
            let processed = if d.processed { "processed" } else { "not processed" };
            format!("{name} {} from broker-{} (requests {processed})", d.client, d.broker)
        }
        NetOp::AdvanceTime(t) => format!("{name} {} ms", t.ms),
        NetOp::CrashBroker(b) | NetOp::StartBroker(b) => format!("{name} {}", b.broker),
        NetOp::Run | NetOp::RestartBroker | NetOp::Expect(_) => name.to_string(),
    }
}

/// The difference a network scenario ran into: the op, the field and both values.
pub struct NetDifference {
    pub op_index: Option<usize>,
    pub op: String,
    pub field: String,
    pub expected: String,
    pub actual: String,
}

/// A misnamed message is the scenario's fault, not the engine's: exit 2, not a difference.
pub enum Failure {
    Differs(NetDifference),
    Input(usize, String, String),
}

pub struct NetworkRunner<'a> {
    cluster: Cluster,
    held: Vec<Envelope>,
    /// Named calls: name to (producer, op id); unnamed calls are tracked too, so completions are drained.
    calls: BTreeMap<String, (String, OpId)>,
    outcomes: BTreeMap<(String, OpId), Result<OpOutput, KafkaError>>,
    /// Requests whose connection broke after the broker took them: their answers are lost on arrival.
    dead: BTreeSet<(NodeId, u64)>,
    /// Standing holds (`hold` with `every`): matching messages are set aside as soon as they are sent.
    clogs: Vec<Pick>,
    /// What the application saw, as the sim records it, for the client-intent checks.
    history: History,
    /// The history's call id of each call, by (producer, op).
    call_ids: BTreeMap<(String, OpId), u64>,
    /// The call the op being run invoked, until it starts an op (or completes at once).
    pending_call: Option<(String, u64)>,
    /// Each send's values, by (producer, op), until it completes; then, if acknowledged, in `acked`.
    send_values: BTreeMap<(String, OpId), (TopicPartition, Vec<String>)>,
    acked: Vec<txnsim_properties::AckedWrite>,
    /// Every record each consumer delivered, in order, and how many of them `process` has taken.
    consumed: BTreeMap<String, (Vec<ConsumerRecord>, usize)>,
    topics: &'a BTreeMap<String, u32>,
}

fn tp(topic: &Option<String>, partition: u32) -> TopicPartition {
    TopicPartition::new(topic.as_deref().unwrap_or("t"), partition)
}

fn json<T: serde::Serialize>(v: T) -> String {
    serde_json::to_value(v).expect("plain data serializes").to_string()
}

impl<'a> NetworkRunner<'a> {
    pub fn new(sc: &'a super::Scenario, mutations: Mutations) -> Self {
        let config = EngineConfig {
            transaction_version: sc.transaction_version,
            min_insync_replicas: sc.min_insync_replicas,
            eligible_leader_replicas: sc.eligible_leader_replicas,
            proposal: sc.proposal,
            mutations,
            ..EngineConfig::default()
        };
        let topics = &sc.topics;
        let mut cluster = Cluster::with_topology(topics, config, &sc.topology);
        let script = sc.network.as_ref().expect("a network scenario has its script");
        for t in &script.transactional_ids {
            cluster.broker.coordinator.load_transaction(t.metadata().expect("validated when parsed"));
        }
        NetworkRunner {
            cluster,
            held: Vec::new(),
            calls: BTreeMap::new(),
            outcomes: BTreeMap::new(),
            dead: BTreeSet::new(),
            clogs: Vec::new(),
            history: History::default(),
            call_ids: BTreeMap::new(),
            pending_call: None,
            send_values: BTreeMap::new(),
            acked: Vec::new(),
            consumed: BTreeMap::new(),
            topics,
        }
    }

    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The messages `hold` set aside, oldest first.
    pub fn held(&self) -> &[Envelope] {
        &self.held
    }

    /// Collects every producer's completed calls and loses answers to broken connections.
    fn settle(&mut self) {
        self.settle_from(0);
    }

    /// `settle`, judging against clogs and dead links only the messages in flight from index `judged` on:
    /// those before it were judged already, and clogs and dead links change only between ops. Timers and
    /// deliveries only append to the network, so a long `advance_time` or `run` stays linear in what it sends.
    fn settle_from(&mut self, judged: usize) {
        let now = self.cluster.now_ms;
        for (name, p) in self.cluster.producers.iter_mut() {
            for c in p.take_completions() {
                if let (Ok(OpOutput::Sent { ack, .. }), Some((partition, values))) =
                    (&c.result, self.send_values.remove(&(name.clone(), c.op)))
                {
                    self.acked.push(txnsim_properties::AckedWrite {
                        partition,
                        first_offset: ack.first_offset,
                        values,
                    });
                }
                if let Some(&call_id) = self.call_ids.get(&(name.clone(), c.op)) {
                    let outcome = CallOutcome::of(&c.result);
                    self.history.push(Event::Complete { time_ms: now, process: name.clone(), call_id, outcome });
                }
                self.outcomes.insert((name.clone(), c.op), c.result);
            }
        }
        for (name, c) in self.cluster.consumers.iter_mut() {
            self.consumed.entry(name.clone()).or_default().0.extend(c.take_delivered());
        }
        if !self.clogs.is_empty() {
            let clogged: Vec<usize> = self
                .cluster
                .in_flight()
                .enumerate()
                .skip(judged)
                .filter(|(_, e)| self.clogs.iter().any(|c| c.matches(e)))
                .map(|(i, _)| i)
                .collect();
            let mut envs: Vec<Envelope> =
                clogged.into_iter().rev().map(|i| self.cluster.remove_in_flight(i).expect("listed above")).collect();
            envs.reverse();
            self.held.extend(envs);
        }
        if !self.dead.is_empty() {
            let dead: Vec<usize> = self
                .cluster
                .in_flight()
                .enumerate()
                .skip(judged)
                .filter(|(_, e)| !e.message.is_request() && self.dead.contains(&(e.to.clone(), e.correlation_id)))
                .map(|(i, _)| i)
                .collect();
            for i in dead.into_iter().rev() {
                let env = self.cluster.remove_in_flight(i).expect("listed above");
                self.dead.remove(&(env.to, env.correlation_id));
            }
        }
    }

    /// A live follower's fetch it gave up on: lost with the connection its socket timeout closed
    /// (`NetworkClient.handleTimedOutRequests`), so the leader never answers it with its log's tail.
    fn abandoned_fetch(&self, env: &Envelope) -> bool {
        let (NodeId::Broker(f), NodeId::Broker(leader), Message::ReplicaFetchRequest { .. }) =
            (&env.from, &env.to, &env.message)
        else {
            return false;
        };
        !self.cluster.down.contains(f)
            && self
                .cluster
                .brokers()
                .find(|b| b.node() == env.from)
                .is_some_and(|b| !b.replica_manager.awaits_fetch(*leader, env.correlation_id))
    }

    fn producer(&mut self, name: &str) -> &mut Producer {
        self.cluster.producers.get_mut(name).expect("validated: init_producer came first")
    }

    fn record(&mut self, producer: &str, name: &Option<String>, op: OpId) {
        let key = name.clone().unwrap_or_else(|| format!("#{producer}:{op}"));
        self.calls.insert(key, (producer.to_string(), op));
    }

    /// A call as the history records it, the op's pending call; its completion is recorded when it completes.
    fn invoke(&mut self, producer: &str, call: &ProducerCall) {
        let call_id = self.history.events.len() as u64 + 1;
        let time_ms = self.cluster.now_ms;
        self.history.push(Event::Invoke { time_ms, process: producer.to_string(), call_id, call: call.clone() });
        self.pending_call = Some((producer.to_string(), call_id));
    }

    /// Runs a client call of op `i` through the interpreter (`txnsim_properties::client`) in this layer.
    fn call(
        &mut self,
        (i, op): (usize, &NetOp),
        producer: &str,
        name: &Option<String>,
        expect_error: &Option<String>,
        call: ProducerCall,
    ) -> Result<(), Failure> {
        client::exec(&mut NetCall { runner: self, i, op: op.name(), name, expect_error }, producer, &call)
    }

    fn immediate<T>(
        i: usize,
        op: &str,
        result: &Result<T, KafkaError>,
        expect_error: &Option<String>,
    ) -> Result<bool, Failure> {
        let differs = |expected: &str, actual: &str| {
            Failure::Differs(NetDifference {
                op_index: Some(i),
                op: op.into(),
                field: "expect_error".into(),
                expected: json(expected),
                actual: json(actual),
            })
        };
        match (expect_error, result) {
            (Some(e), Err(a)) if e == a.name() || KafkaError::from_name(e) == Some(*a) => Ok(false),
            (Some(e), Err(a)) => Err(differs(e, a.name())),
            (Some(e), Ok(_)) => Err(differs(e, "accepted")),
            (None, Err(a)) => Err(differs("accepted", a.name())),
            (None, Ok(_)) => Ok(true),
        }
    }

    fn pick(&self, i: usize, action: NetAction, p: &Pick) -> Result<usize, Failure> {
        let pool: Vec<&Envelope> =
            if action == NetAction::Release { self.held.iter().collect() } else { self.cluster.in_flight().collect() };
        let matches: Vec<usize> = pool.iter().enumerate().filter(|(_, e)| p.matches(e)).map(|(k, _)| k).collect();
        let listing = || pool.iter().map(|e| e.short().to_string()).collect::<Vec<_>>().join("; ");
        let name = format!("{} {} -> {}", p.api, p.from, p.to);
        let place = if action == NetAction::Release { "held" } else { "in flight" };
        match (p.occurrence, matches.len()) {
            (_, 0) => Err(Failure::Input(i, "api".into(), format!("no {name} {place} (now: [{}])", listing()))),
            (None, 1) => Ok(matches[0]),
            (None, n) => Err(Failure::Input(
                i,
                "occurrence".into(),
                format!("{n} messages match {name}: say which with 'occurrence' (1 = oldest)"),
            )),
            (Some(k), n) if k == 0 || k > n => {
                Err(Failure::Input(i, "occurrence".into(), format!("{k} is out of range: {n} messages match {name}")))
            }
            (Some(k), _) => Ok(matches[k - 1]),
        }
    }

    pub fn exec(&mut self, i: usize, op: &NetOp) -> Result<(), Failure> {
        let now = self.cluster.now_ms;
        let result = self.exec_op(i, op, now);
        // A call that started an op completes when the op does (`started`); the rest complete now.
        if let Some((producer, call_id)) = self.pending_call.take() {
            let outcome = match (op, &result) {
                (NetOp::Begin(o), Ok(())) if o.expect_error.is_none() => CallOutcome::Ok,
                _ => CallOutcome::Failed { error: "refused by the client".into() },
            };
            self.history.push(Event::Complete { time_ms: now, process: producer, call_id, outcome });
        }
        result
    }

    fn exec_op(&mut self, i: usize, op: &NetOp, now: TimeMs) -> Result<(), Failure> {
        match op {
            NetOp::InitProducer(o) => {
                let kind = match o.kind.unwrap_or(ClientKind::Transactional) {
                    ClientKind::Transactional => ProducerKind::Transactional {
                        transactional_id: o.transactional_id.clone().unwrap_or_else(|| o.producer.clone()),
                    },
                    ClientKind::Idempotent => ProducerKind::Idempotent,
                    ClientKind::Plain => ProducerKind::Plain,
                };
                let mut config = o.config.apply(&self.cluster.config);
                if let Some(ms) = o.transaction_timeout_ms {
                    config.transaction_timeout_ms = ms;
                }
                let mut producer = Producer::new(&o.producer, kind.clone(), self.cluster.broker_id(), config);
                self.cluster.bootstrap(&mut producer);
                if let Some(v) = o.client_transaction_version.and_then(TransactionVersion::from_number) {
                    producer.client_transaction_version = v;
                }
                self.cluster.producers.insert(o.producer.clone(), producer);
                if kind != ProducerKind::Plain {
                    self.call((i, op), &o.producer, &o.name, &o.expect_error, ProducerCall::Init)?;
                }
            }
            NetOp::Begin(o) => self.call((i, op), &o.producer, &o.name, &o.expect_error, ProducerCall::Begin)?,
            NetOp::Send(o) => {
                let call = ProducerCall::Send { partition: tp(&o.topic, o.partition), values: o.values.clone() };
                self.call((i, op), &o.producer, &o.name, &o.expect_error, call)?;
            }
            NetOp::Commit(o) => self.call((i, op), &o.producer, &o.name, &o.expect_error, ProducerCall::Commit)?,
            NetOp::Abort(o) => self.call((i, op), &o.producer, &o.name, &o.expect_error, ProducerCall::Abort)?,
            NetOp::SendOffsets(o) => {
                let call = match (&o.group, &o.consumer) {
                    (Some(group), _) => ProducerCall::SendOffsets {
                        group: ConsumerGroupMetadata {
                            group_id: group.clone(),
                            generation_id: o.generation_id.unwrap_or(-1),
                            member_id: o.member_id.clone().unwrap_or_default(),
                        },
                        offsets: offsets_of(o.offsets.as_ref().expect("validated: a group's offsets are given")),
                    },
                    (None, c) => {
                        let consumer = &self.cluster.consumers[c.as_deref().expect("validated: group or consumer")];
                        let offsets = match &o.offsets {
                            Some(given) => offsets_of(given),
                            None => positions_of(consumer),
                        };
                        let group = consumer.group_metadata().expect("validated: a consumer that subscribed");
                        ProducerCall::SendOffsets { group, offsets }
                    }
                };
                self.call((i, op), &o.producer, &o.name, &o.expect_error, call)?;
            }
            NetOp::Subscribe(o) => {
                let mut topics = BTreeMap::new();
                for t in &o.topics {
                    let Some(n) = self.topics.get(t) else {
                        return Err(Failure::Input(i, "topics".into(), format!("no topic '{t}' in the scenario")));
                    };
                    topics.insert(t.clone(), *n);
                }
                let defaults = GroupRebalanceConfig::default();
                let config = GroupRebalanceConfig {
                    session_timeout_ms: o.session_timeout_ms.unwrap_or(defaults.session_timeout_ms),
                    rebalance_timeout_ms: o.rebalance_timeout_ms.unwrap_or(defaults.rebalance_timeout_ms),
                    heartbeat_interval_ms: o.heartbeat_interval_ms.unwrap_or(defaults.heartbeat_interval_ms),
                };
                let isolation = IsolationLevel::from(o.isolation);
                let mut consumer =
                    Consumer::new(&o.consumer, isolation, self.cluster.broker_id(), self.cluster.config.clone());
                consumer.subscribe(&o.group, topics, config);
                self.cluster.consumers.insert(o.consumer.clone(), consumer);
            }
            NetOp::Poll(c) => {
                let consumer = self.cluster.consumers.get_mut(&c.consumer).expect("validated: subscribed");
                let effects = consumer.poll_member(now);
                self.cluster.apply(&NodeId::Client(c.consumer.clone()), effects);
            }
            NetOp::CloseConsumer(c) => {
                let consumer = self.cluster.consumers.get_mut(&c.consumer).expect("validated: subscribed");
                let effects = consumer.close(now);
                self.cluster.apply(&NodeId::Client(c.consumer.clone()), effects);
            }
            NetOp::ResetToCommitted(c) => {
                self.cluster.consumers.get_mut(&c.consumer).expect("validated: subscribed").reset_to_committed();
            }
            NetOp::Process(o) => self.process(i, op, o)?,
            NetOp::CommitOffsets(o) => {
                let client = NodeId::Client(o.client.clone().unwrap_or_else(|| "admin".into()));
                let request = GroupMessage::OffsetCommitRequest {
                    group_id: o.group.clone(),
                    generation_id: -1,
                    member_id: String::new(),
                    offsets: offsets_of(&o.offsets).into_iter().map(|(tp, o)| (tp, (o, None))).collect(),
                };
                let mut effects = txnsim_engine::protocol::Effects::default();
                effects.send(&client, &self.cluster.broker_id(), 0, Message::Group(request));
                self.cluster.apply(&client, effects);
            }
            NetOp::Net(NetAction::Hold, p) if p.every => self.clogs.push(p.clone()),
            NetOp::Net(NetAction::Release, p) if p.every => {
                self.clogs.retain(|c| c != &Pick { every: true, ..p.clone() });
                let (release, keep): (Vec<Envelope>, Vec<Envelope>) =
                    std::mem::take(&mut self.held).into_iter().partition(|e| p.matches(e));
                self.held = keep;
                for env in release {
                    self.cluster.inject(env);
                }
            }
            NetOp::Net(action, p) => {
                let k = self.pick(i, *action, p)?;
                match action {
                    NetAction::Release => {
                        let env = self.held.remove(k);
                        self.cluster.inject(env);
                    }
                    _ => {
                        let env = self.cluster.remove_in_flight(k).expect("picked");
                        match action {
                            NetAction::Deliver => self.cluster.deliver_message(env),
                            NetAction::Drop => {}
                            NetAction::Duplicate => {
                                self.cluster.inject(env.clone());
                                self.cluster.inject(env);
                            }
                            NetAction::Hold => self.held.push(env),
                            NetAction::Release => unreachable!("handled above"),
                        }
                    }
                }
            }
            NetOp::Disconnect(d) => {
                let client = NodeId::Client(d.client.clone());
                let broker = NodeId::Broker(d.broker);
                let on_link: Vec<usize> = self
                    .cluster
                    .in_flight()
                    .enumerate()
                    .filter(|(_, e)| (e.from == client && e.to == broker) || (e.from == broker && e.to == client))
                    .map(|(k, _)| k)
                    .collect();
                let mut requests = Vec::new();
                for k in on_link.into_iter().rev() {
                    let env = self.cluster.remove_in_flight(k).expect("listed above");
                    if env.message.is_request() {
                        requests.push(env);
                    }
                }
                if d.processed {
                    for env in requests.into_iter().rev() {
                        self.dead.insert((env.from.clone(), env.correlation_id));
                        self.cluster.deliver_message(env);
                    }
                }
                let effects = self.producer(&d.client).on_disconnect(now, &broker);
                self.cluster.apply(&client, effects);
            }
            NetOp::AdvanceTime(t) => {
                // Settled timer by timer: a call a timer completes is recorded at that timer's instant.
                let until = now + t.ms;
                self.settle();
                let mut judged = self.cluster.in_flight().len();
                while self.cluster.next_timer_due_ms().is_some_and(|due| due <= until) {
                    self.cluster.fire_next_timer();
                    self.settle_from(judged);
                    judged = self.cluster.in_flight().len();
                }
                self.cluster.fire_timers_until(until);
            }
            NetOp::Run => {
                // Each delivery answers or forwards; a cluster with nothing held goes quiet well inside this.
                let mut judged = 0;
                for _ in 0..txnsim_engine::cluster::MAX_STEPS_PER_RUN {
                    self.settle_from(judged);
                    judged = self.cluster.in_flight().len();
                    let Some(env) = self.cluster.remove_in_flight(0) else { break };
                    judged -= 1;
                    if !self.abandoned_fetch(&env) {
                        self.cluster.deliver_message(env);
                    }
                }
            }
            NetOp::RestartBroker => {
                let broker = self.cluster.broker_id();
                self.cluster.drop_messages();
                let effects = self.cluster.broker.restart(now);
                self.cluster.apply(&broker, effects);
                let names: Vec<String> = self.cluster.producers.keys().cloned().collect();
                for name in names {
                    let effects = self.producer(&name).on_disconnect(now, &broker);
                    let node = self.producer(&name).id.clone();
                    self.cluster.apply(&node, effects);
                }
            }
            NetOp::CrashBroker(b) => {
                self.cluster.crash_broker(b.broker);
                let node = NodeId::Broker(b.broker);
                self.held.retain(|e| e.from != node && e.to != node);
            }
            NetOp::StartBroker(b) => {
                self.cluster.start_broker(b.broker);
            }
            NetOp::Expect(e) => {
                self.settle();
                return self.check(Some(i), op.name(), e).map_err(Failure::Differs);
            }
        }
        self.settle();
        Ok(())
    }

    fn started(
        &mut self,
        i: usize,
        op: &str,
        producer: &str,
        name: &Option<String>,
        expect_error: &Option<String>,
        result: Result<(OpId, txnsim_engine::protocol::Effects), KafkaError>,
    ) -> Result<(), Failure> {
        if Self::immediate(i, op, &result, expect_error)? {
            let (id, effects) = result.expect("accepted");
            if let Some((p, call_id)) = self.pending_call.take() {
                self.call_ids.insert((p, id), call_id);
            }
            let node = self.producer(producer).id.clone();
            self.cluster.apply(&node, effects);
            self.record(producer, name, id);
        }
        Ok(())
    }

    pub fn check(&self, i: Option<usize>, op: &str, e: &Expect) -> Result<(), NetDifference> {
        let diff = |field: String, expected: String, actual: String| NetDifference {
            op_index: i,
            op: op.to_string(),
            field,
            expected,
            actual,
        };
        let cmp = |field: String, expected: String, actual: String| {
            if expected == actual {
                Ok(())
            } else {
                Err(diff(field, expected, actual))
            }
        };
        if let Some(want) = &e.now_ms {
            cmp("now_ms".into(), json(want), json(self.cluster.now_ms))?;
        }
        if let Some(want) = &e.in_flight {
            let got: Vec<String> = self.cluster.in_flight().map(|e| e.short().to_string()).collect();
            cmp("in_flight".into(), json(want), json(got))?;
        }
        if let Some(want) = &e.held {
            let got: Vec<String> = self.held.iter().map(|e| e.short().to_string()).collect();
            cmp("held".into(), json(want), json(got))?;
        }
        for (k, p) in e.producers.iter().flatten().enumerate() {
            let f = |name: &str| format!("producers[{k}].{name}");
            let Some(prod) = self.cluster.producers.get(&p.name) else {
                return Err(diff(f("name"), json(&p.name), "no such producer".into()));
            };
            if let Some(s) = &p.state {
                cmp(f("state"), json(s), json(prod.state.name()))?;
            }
            if let Some(pid) = p.producer_id {
                cmp(f("producer_id"), json(pid), json(prod.producer_id_and_epoch.map(|x| x.producer_id)))?;
            }
            if let Some(epoch) = p.epoch {
                cmp(f("epoch"), json(epoch), json(prod.producer_id_and_epoch.map(|x| x.epoch)))?;
            }
            for (part, want) in p.next_sequence.iter().flatten() {
                let (topic, n) = part.rsplit_once('/').unwrap_or((part, "0"));
                let got = prod.next_sequence(&TopicPartition::new(topic, n.parse().unwrap_or(0)));
                cmp(f(&format!("next_sequence.{part}")), json(want), json(got))?;
            }
            if let Some(n) = p.in_flight_batches {
                cmp(f("in_flight_batches"), json(n), json(prod.in_flight_batches()))?;
            }
            if let Some(err) = &p.last_error {
                cmp(f("last_error"), json(err), json(prod.last_error.map(|x| x.name())))?;
            }
        }
        for (k, c) in e.consumers.iter().flatten().enumerate() {
            let f = |name: &str| format!("consumers[{k}].{name}");
            let Some(consumer) = self.cluster.consumers.get(&c.name) else {
                return Err(diff(f("name"), json(&c.name), "no such consumer".into()));
            };
            let group = consumer.group().expect("scenario consumers subscribe");
            if let Some(s) = &c.state {
                cmp(f("state"), json(s), json(group.state.name()))?;
            }
            if let Some(g) = c.generation_id {
                cmp(f("generation_id"), json(g), json(group.generation.generation_id))?;
            }
            if let Some(m) = &c.member_id {
                cmp(f("member_id"), json(m), json(&group.generation.member_id))?;
            }
            if let Some(a) = &c.assignment {
                let got: Vec<String> = group.assignment().iter().map(|tp| tp.to_string()).collect();
                cmp(f("assignment"), json(a), json(got))?;
            }
            if let Some(p) = &c.positions {
                let got: BTreeMap<String, i64> =
                    positions_of(consumer).into_iter().map(|(tp, o)| (tp.to_string(), o)).collect();
                cmp(f("positions"), json(p), json(got))?;
            }
            if let Some(v) = &c.consumed {
                let got: Vec<&String> =
                    self.consumed.get(&c.name).map(|(r, _)| r.iter().map(|r| &r.value).collect()).unwrap_or_default();
                cmp(f("consumed"), json(v), json(got))?;
            }
            if let Some(want) = &c.fatal {
                cmp(f("fatal"), json(want), json(group.fatal.map(|e| e.name())))?;
            }
        }
        for (k, c) in e.coordinator.iter().flatten().enumerate() {
            let f = |name: &str| format!("coordinator[{k}].{name}");
            let coordinator = self.cluster.coordinator();
            let found = coordinator.transaction_state(&c.transactional_id, self.cluster.now_ms, &self.cluster.config);
            if c.state == Some(None) {
                cmp(f("state"), json(None::<&str>), json(found.map(|m| m.state.name())))?;
                continue;
            }
            let Some(meta) = found else {
                return Err(diff(
                    f("transactional_id"),
                    json(&c.transactional_id),
                    "unknown to the coordinator".into(),
                ));
            };
            check_metadata(meta, c, &f, &cmp)?;
        }
        for (name, want) in e.outcomes.iter().flatten() {
            let got = match self.calls.get(name) {
                None => return Err(diff(format!("outcomes.{name}"), json(want), "no call has this name".into())),
                Some(key) => match self.outcomes.get(key) {
                    None => "pending".to_string(),
                    Some(Ok(_)) => "ok".to_string(),
                    Some(Err(err)) => err.name().to_string(),
                },
            };
            cmp(format!("outcomes.{name}"), json(want), json(got))?;
        }
        for (k, r) in e.registrations.iter().flatten().enumerate() {
            let f = |name: &str| format!("registrations[{k}].{name}");
            let Some(reg) = self.cluster.controller.partitions.get(&tp(&r.topic, r.partition)) else {
                return Err(diff(f("partition"), json(r.partition), "the controller has no such partition".into()));
            };
            let leader = if reg.state.leader == NO_LEADER { -1 } else { i64::from(reg.state.leader) };
            let fields = [
                ("isr", r.isr.as_ref(), &reg.state.isr),
                ("elr", r.elr.as_ref(), &reg.elr),
                ("last_known_elr", r.last_known_elr.as_ref(), &reg.last_known_elr),
            ];
            if let Some(want) = r.leader {
                cmp(f("leader"), json(want), json(leader))?;
            }
            if let Some(want) = r.leader_epoch {
                cmp(f("leader_epoch"), json(want), json(reg.state.leader_epoch))?;
            }
            for (name, want, got) in fields {
                if let Some(want) = want {
                    cmp(f(name), json(want), json(got))?;
                }
            }
        }
        let mutations = &self.cluster.config.mutations;
        for (k, l) in e.logs.iter().flatten().enumerate() {
            let f = |name: &str| format!("logs[{k}].{name}");
            let id = l.broker.unwrap_or(0);
            let partition = tp(&l.topic, l.partition);
            let Some(broker) = self.cluster.brokers().nth(id as usize) else {
                return Err(diff(f("broker"), json(id), "no such broker".into()));
            };
            let Some(log) = broker.partition(&partition) else {
                return Err(diff(f("partition"), json(l.partition), "no such partition".into()));
            };
            if let Some(want) = &l.isr {
                let got: Vec<u32> = match broker.replica_manager.partitions.get(&partition) {
                    Some(p) => p.isr.iter().copied().collect(),
                    None => vec![id], // Hosted alone: its own ISR.
                };
                cmp(f("isr"), json(want), json(got))?;
            }
            if let Some(want) = &l.records {
                let got: Vec<String> = log
                    .batches()
                    .flat_map(|b| match &b.body {
                        BatchBody::Data(records) => records.iter().map(|r| r.value.clone()).collect(),
                        BatchBody::Control(m) => vec![m.map(|m| m.result.name()).unwrap_or("EMPTY").to_string()],
                    })
                    .collect();
                cmp(f("records"), json(want), json(got))?;
            }
            let offsets = [
                ("lso", l.lso, log.last_stable_offset(mutations)),
                ("high_watermark", l.high_watermark, log.high_watermark()),
                ("log_end_offset", l.log_end_offset, log.log_end_offset()),
            ];
            for (name, want, got) in offsets {
                if let Some(w) = want {
                    cmp(f(name), json(w), json(got))?;
                }
            }
        }
        if let Some(want) = &e.intent_violations {
            let logs = &self.cluster.broker.replica_manager.logs;
            let mut got: Vec<&str> = txnsim_properties::check_failed_sends(&self.history, logs)
                .into_iter()
                .chain(txnsim_properties::check_committed_sends(&self.history, logs))
                .map(|v| v.invariant.name())
                .collect();
            got.sort();
            got.dedup();
            cmp("intent_violations".into(), json(want), json(got))?;
        }
        if let Some(want) = &e.verification_entries {
            let got: Vec<VerificationExpect> = self
                .cluster
                .broker
                .replica_manager
                .logs
                .iter()
                .flat_map(|(tp, log)| {
                    log.producer_state.live_verification_entries(self.cluster.now_ms, mutations).map(|(pid, v)| {
                        VerificationExpect {
                            topic: Some(tp.topic.clone()),
                            partition: tp.partition,
                            producer_id: *pid,
                            lowest_sequence: v.lowest_sequence,
                            epoch: v.epoch,
                        }
                    })
                })
                .collect();
            let want: Vec<VerificationExpect> = want
                .iter()
                .map(|v| VerificationExpect { topic: Some(v.topic.clone().unwrap_or_else(|| "t".into())), ..v.clone() })
                .collect();
            cmp("verification_entries".into(), json(&want), json(&got))?;
        }
        for (k, g) in e.group_offsets.iter().flatten().enumerate() {
            let partitions: Vec<TopicPartition> =
                g.offsets.keys().map(|key| partition_key(key).expect("validated")).collect();
            let broker = &self.cluster.broker;
            // As OffsetFetch reads: at the HW of the group's partition, or every record when stable.
            let committed = broker.partition(&offsets_partition_for(&g.group)).map(|log| log.high_watermark());
            let got: BTreeMap<String, Value> = broker
                .groups
                .fetch_offsets(&g.group, Some(partitions), g.require_stable, committed.filter(|_| !g.require_stable))
                .into_iter()
                .map(|(tp, r)| {
                    let v = match r {
                        Ok(Some((o, _))) => Value::from(o),
                        Ok(None) => Value::Null,
                        Err(e) => Value::from(e.name()),
                    };
                    (format!("{}/{}", tp.topic, tp.partition), v)
                })
                .collect();
            cmp(format!("group_offsets[{k}].offsets"), json(&g.offsets), json(got))?;
        }
        for (k, r) in e.reads.iter().flatten().enumerate() {
            let f = |name: &str| format!("reads[{k}].{name}");
            let Some(log) = self.cluster.broker.partition(&tp(&r.topic, r.partition)) else {
                return Err(diff(f("partition"), json(r.partition), "no such partition".into()));
            };
            let isolation = IsolationLevel::from(r.isolation);
            let (records, position) = read_to_end(log, isolation, r.from_offset, mutations);
            let values: Vec<&String> = records.iter().map(|(_, v)| v).collect();
            let offsets: Vec<u64> = records.iter().map(|(o, _)| *o).collect();
            cmp(f("values"), json(&r.expect.values), json(values))?;
            cmp(f("offsets"), json(&r.expect.offsets), json(offsets))?;
            cmp(f("end_position"), json(r.expect.end_position), json(position))?;
        }
        Ok(())
    }

    /// One pass of the consume-transform-produce loop (`process`): begin, a send of each new input's
    /// transform, then the consumer's positions with its group metadata.
    fn process(&mut self, i: usize, op: &NetOp, o: &Process) -> Result<(), Failure> {
        let Some(&out_partitions) = self.topics.get(&o.topic) else {
            return Err(Failure::Input(i, "topic".into(), format!("no topic '{}' in the scenario", o.topic)));
        };
        let (records, taken) = self.consumed.entry(o.consumer.clone()).or_default();
        let inputs: Vec<ConsumerRecord> = records[*taken..].to_vec();
        *taken = records.len();
        self.call((i, op), &o.producer, &None, &None, ProducerCall::Begin)?;
        // `beginTransaction` answers at once: its completion is recorded here, before the sends.
        if let Some((producer, call_id)) = self.pending_call.take() {
            let time_ms = self.cluster.now_ms;
            self.history.push(Event::Complete { time_ms, process: producer, call_id, outcome: CallOutcome::Ok });
        }
        for r in inputs {
            let partition = TopicPartition::new(&o.topic, r.partition.partition % out_partitions);
            let call = ProducerCall::Send { partition, values: vec![client::transform(&r.value)] };
            self.call((i, op), &o.producer, &None, &None, call)?;
        }
        let consumer = &self.cluster.consumers[&o.consumer];
        let group = consumer.group_metadata().expect("validated: a consumer that subscribed");
        let call = ProducerCall::SendOffsets { group, offsets: positions_of(consumer) };
        self.call((i, op), &o.producer, &o.name, &None, call)
    }

    /// Every state invariant of the catalogue over the cluster as it is now: what breaks.
    pub fn state_violations(&self) -> Vec<txnsim_properties::Violation> {
        let broker = &self.cluster.broker;
        // A replicated cluster's partitions as their leaders hold them, as the coordinator that stands sees
        // them (the leaders move with a crash); one broker's are its own.
        let led: BTreeMap<&TopicPartition, &PartitionLog>;
        let partitions: &dyn txnsim_properties::Logs = if self.cluster.peers.is_empty() {
            &broker.replica_manager.logs
        } else {
            let leader_log = |tp| self.cluster.leader_log(tp).map(|l| (tp, l));
            led = broker.replica_manager.logs.keys().filter_map(leader_log).collect();
            &led
        };
        let view = txnsim_properties::ClusterView {
            partitions,
            coordinator: Some(self.cluster.coordinator()),
            mutations: &broker.config.mutations,
        };
        let replicas = txnsim_properties::check_replicas(self.cluster.brokers());
        let groups = txnsim_properties::check_group_offsets(broker);
        let acked = txnsim_properties::check_acked_writes(&self.acked, self.cluster.brokers());
        let timers = txnsim_properties::check_timers(self.cluster.coordinator());
        let producers = &self.cluster.producers;
        let delivery_timeout = |name: &str| {
            producers.get(name).map_or(self.cluster.config.delivery_timeout_ms, |p| p.config().delivery_timeout_ms)
        };
        // Nothing pauses a process here: a send's wait is the time the ops advanced.
        let sends =
            txnsim_properties::check_delivery_timeouts(&self.history, &delivery_timeout, &[], self.cluster.now_ms);
        let found = txnsim_properties::check_state(&view).into_iter().chain(replicas).chain(groups).chain(acked);
        found.chain(timers).chain(sends).collect()
    }

    pub fn topics(&self) -> &BTreeMap<String, u32> {
        self.topics
    }
}

fn check_metadata(
    meta: &TransactionMetadata,
    c: &CoordinatorExpect,
    f: &dyn Fn(&str) -> String,
    cmp: &dyn Fn(String, String, String) -> Result<(), NetDifference>,
) -> Result<(), NetDifference> {
    if let Some(Some(s)) = &c.state {
        cmp(f("state"), json(s), json(meta.state.name()))?;
    }
    if let Some(pid) = c.producer_id {
        cmp(f("producer_id"), json(pid), json(meta.producer_id))?;
    }
    if let Some(e) = c.epoch {
        cmp(f("epoch"), json(e), json(meta.producer_epoch))?;
    }
    if let Some(e) = c.last_epoch {
        cmp(f("last_epoch"), json(e), json(meta.last_producer_epoch))?;
    }
    if let Some(p) = &c.pending {
        cmp(f("pending"), json(p), json(meta.pending_state.map(|s| s.name())))?;
    }
    if let Some(ps) = &c.partitions {
        let got: Vec<String> = meta.topic_partitions.iter().map(|t| t.to_string()).collect();
        cmp(f("partitions"), json(ps), json(got))?;
    }
    if let Some(t) = c.txn_start_timestamp_ms {
        cmp(f("txn_start_timestamp_ms"), json(t), json(meta.txn_start_timestamp_ms))?;
    }
    Ok(())
}

/// The network layer's view of one client call: it only enqueues the call's requests (the ops deliver
/// them), records the invocation in the history and each send's values, and checks the client's immediate
/// answer against the op's `expect_error`.
struct NetCall<'r, 'a> {
    runner: &'r mut NetworkRunner<'a>,
    i: usize,
    op: &'static str,
    name: &'r Option<String>,
    expect_error: &'r Option<String>,
}

impl client::Layer for NetCall<'_, '_> {
    type Answer = Result<(), Failure>;

    fn local(&mut self, producer: &str, call: &ProducerCall, run: client::Local<'_>) -> Self::Answer {
        self.runner.invoke(producer, call);
        let result = run(self.runner.producer(producer));
        NetworkRunner::immediate(self.i, self.op, &result, self.expect_error).map(|_| ())
    }

    fn request(&mut self, producer: &str, call: &ProducerCall, start: client::Start<'_>) -> Self::Answer {
        self.runner.invoke(producer, call);
        let now = self.runner.cluster.now_ms;
        let result = start(self.runner.producer(producer), now);
        if let (ProducerCall::Send { partition, values }, Ok((id, _))) = (call, &result) {
            self.runner.send_values.insert((producer.to_string(), *id), (partition.clone(), values.clone()));
        }
        self.runner.started(self.i, self.op, producer, self.name, self.expect_error, result)
    }
}
