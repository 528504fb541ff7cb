//! The fourth driver of the sans-io engine: Kafka requests in, Kafka responses out, with no sockets and
//! no clock of its own. The server hands it frames per connection and the wall-clock time; it turns each
//! request into engine `Message`s from that connection's client `NodeId` to the broker whose listener
//! accepted the connection, runs the cluster until quiet (KIP-890 verification, WriteTxnMarkers, replica
//! fetches, AlterPartition, the controller's records: all the engine's own messages), fires the brokers'
//! timers and replication deadlines when they fall due, checks every state invariant after every step,
//! and encodes the engine's answers. One broker keeps its own metadata; more get the engine's controller.
//!
//! A connection is served one request at a time, as Kafka's `SocketServer` mutes a channel until its
//! response is sent: a Fetch with nothing to return waits (up to `max_wait_ms`, Kafka's fetch purgatory),
//! a request the engine answers later (an acks=all Produce in `DelayedProduce`, a coordinator's replicated
//! `__transaction_state` write, a JoinGroup) waits for the answer, and the requests behind either on that
//! connection wait with it.

use crate::api::{self, code};
use crate::frame;
use crate::records::{self, RecordsError, StoredRecord};
use crate::timeline::Timeline;
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::fetch_response::{self, FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use txnsim_engine::broker::standing_coordinator;
use txnsim_engine::controller::{Controller, Topology};
use txnsim_engine::network_client::{self, Receiver, Undelivered};
use txnsim_engine::protocol::group::GroupMessage;
use txnsim_engine::protocol::metadata::{CoordinatorType, MetadataMessage, NewTopic};
use txnsim_engine::protocol::{Effects, Envelope, Message, NodeId, Timer};
use txnsim_engine::protocol::{CONTROLLER_ID, NO_LEADER};
use txnsim_engine::topic::GROUP_METADATA_TOPIC;
use txnsim_engine::{
    Broker, EngineConfig, IsolationLevel, KafkaError, Mutation, Offset, ProducerIdAndEpoch, TimeMs, TopicPartition,
    TransactionResult, TransactionVersion,
};
use txnsim_properties::{
    check_group_offsets, check_replicas, check_timers, standing_leader, ClusterView, MonotonicityChecker, StateChecker,
    Violation,
};
use uuid::Uuid;

mod groups;

pub type ConnId = u64;

/// The broker of a one-broker cluster, and in a larger one the transaction coordinator's first (it moves
/// with `__transaction_state`); partitions are led where the controller placed them (`Placement::Striped`).
pub const BROKER_ID: u32 = 0;
/// Deliveries one request may cause before the broker is declared stuck (`Cluster::MAX_STEPS_PER_RUN`).
const MAX_STEPS_PER_REQUEST: usize = txnsim_engine::cluster::MAX_STEPS_PER_RUN;
/// Kafka caps a fetch's wait at the consumer's `fetch.max.wait.ms`; ours also at this bound.
const MAX_FETCH_WAIT_MS: TimeMs = 30_000;
/// Requests queued behind a waiting Fetch on one connection; more and the connection is closed
/// (librdkafka keeps at most `max.in.flight` = 1,000,000 but sends a handful).
const MAX_QUEUED_PER_CONNECTION: usize = 1024;

/// What the server must do on the sockets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    Send(ConnId, Bytes),
    /// Kafka closes a connection whose request it cannot parse (`InvalidRequestException`).
    Close(ConnId, String),
}

/// One Produce partition: its answer before the engine (a decode error), and the engine messages sent for
/// it with the records' unmodelled parts, stored once the engine says where they went.
struct ProducePartition {
    topic_index: usize,
    tp: Option<TopicPartition>,
    index: i32,
    status: Result<(), i16>,
    sent: Vec<(usize, Vec<StoredRecord>)>,
}

/// Builds a request's response from the engine's answers to its messages, in their order; `None` for a
/// request that gets none (`acks=0`).
type Finish = Box<dyn FnOnce(&mut Driver, Vec<Message>) -> Option<ResponseKind>>;

/// A request some of whose engine messages are not answered yet: an acks=all write waiting for the HW
/// (`DelayedProduce`), a coordinator's `__transaction_state` write waiting for its followers, a JoinGroup
/// waiting for the rebalance. The engine answers each in its own time, as Kafka's purgatories do.
struct Pending {
    ids: Vec<u64>,
    finish: Finish,
}

/// Why a connection's current request has no answer yet.
enum Waiting {
    /// A Fetch with nothing to return, until data arrives or its deadline (Kafka's fetch purgatory).
    Fetch { header: RequestHeader, request: Box<FetchRequest>, deadline_ms: TimeMs },
    /// A request the engine answers later.
    Engine { header: RequestHeader, pending: Pending },
}

#[derive(Default)]
struct Connection {
    /// The broker whose listener accepted it: every request on it goes to that broker.
    broker: u32,
    queue: VecDeque<Bytes>,
    waiting: Option<Waiting>,
}

/// What a handler produced for one request.
enum Reply {
    Response(Box<ResponseKind>),
    /// `acks=0` Produce: Kafka sends nothing back.
    Nothing,
    /// A Fetch with nothing to return yet.
    Park(Box<FetchRequest>),
    /// The engine will answer later.
    Wait(Pending),
}

pub struct Driver {
    /// Broker `i` is `brokers[i]`.
    brokers: Vec<Broker>,
    /// The controller of a cluster of more than one broker; a single broker keeps its own metadata.
    controller: Option<Controller>,
    /// Where clients reach each broker, as Metadata and FindCoordinator advertise it.
    addresses: Vec<(StrBytes, i32)>,
    /// The broker the request being served was sent to.
    serving: u32,
    /// Broker timers, with the broker that set each.
    timers: BTreeMap<(TimeMs, u64), (u32, Timer)>,
    /// Requests refused by a crashed broker on their way back to their senders, by when they arrive.
    refusals: BTreeMap<(TimeMs, u64), Envelope>,
    next_timer_seq: u64,
    next_correlation_id: u64,
    stored: BTreeMap<(TopicPartition, Offset), StoredRecord>,
    connections: BTreeMap<ConnId, Connection>,
    monotonicity: MonotonicityChecker,
    /// The state invariants, checked incrementally (a full check at every event costs the size of every
    /// log: long-lived servers slowed to a crawl); started afresh where the sim starts it afresh.
    state: StateChecker,
    /// The standing transaction coordinator and when it loaded, when the state invariants last ran.
    coordinator_checked: (u32, Option<i32>),
    violations: Vec<Violation>,
    unreported: Vec<Violation>,
    /// Engine answers to clients not yet collected, by correlation id.
    answers: BTreeMap<u64, Message>,
    /// `acks=0` produces the engine has not answered yet: no response is due, but their records' keys and
    /// headers are stored when the answers say where the records went.
    unanswered: Vec<Pending>,
    /// `replica_fingerprint` when the replica invariants last ran.
    replicas_checked: Vec<(Offset, Offset, u32, i32, Vec<u32>)>,
    /// Each partition's leader and leader epoch when the state invariants last ran (`leader_of`).
    leaders_checked: BTreeMap<TopicPartition, (u32, i32)>,
    /// Crashed brokers, not yet restarted: what is sent to them is lost, and they do nothing.
    down: std::collections::BTreeSet<u32>,
    pub timeline: Timeline,
}

/// A topic's id, derived from its name (FNV-1a, twice): Kafka draws ids at random; clients need them
/// stable and distinct (Metadata v10+, Fetch v13+, Produce v13 name topics by id).
pub fn topic_id(name: &str) -> Uuid {
    let fnv = |seed: u64| name.bytes().fold(seed, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
    let id = ((fnv(0xcbf2_9ce4_8422_2325) as u128) << 64) | fnv(0x8422_2325_cbf2_9ce4) as u128;
    Uuid::from_u128(id.max(1))
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

fn error_code(result: &Result<impl Sized, KafkaError>) -> i16 {
    result.as_ref().err().map_or(0, |e| e.code())
}

/// `AddPartitionsToTxnManager`'s DEFAULT_ERROR: a client older than Produce v11 or TxnOffsetCommit v4 knows
/// no TRANSACTION_ABORTABLE, so a partition its transaction lacks is INVALID_TXN_STATE to it.
fn for_client(e: KafkaError, knows_abortable: bool) -> KafkaError {
    match e {
        KafkaError::TransactionAbortable if !knows_abortable => KafkaError::InvalidTxnState,
        e => e,
    }
}

impl Driver {
    /// One broker; `host:port` is what Metadata and FindCoordinator advertise: where clients reach it.
    pub fn new(config: EngineConfig, host: &str, port: u16, now_ms: TimeMs) -> Self {
        Driver::cluster(config, &[(host.to_string(), port)], 1, now_ms)
    }

    /// Broker `i` reachable at `addresses[i]` (1 to `MAX_BROKERS` of them); topics created without a
    /// replication factor get `default_replication_factor`. `Topology::validate` must accept the two.
    pub fn cluster(
        config: EngineConfig,
        addresses: &[(String, u16)],
        default_replication_factor: u32,
        now_ms: TimeMs,
    ) -> Self {
        let n = addresses.len() as u32;
        let (brokers, controller) = if n == 1 {
            (vec![Broker::new(BROKER_ID, &BTreeMap::new(), config)], None)
        } else {
            let topology = Topology::striped(n, default_replication_factor);
            let config = topology.bound(config);
            let controller = Controller::new(&BTreeMap::new(), &topology, &config);
            let brokers = (0..n).map(|id| Broker::with_registrations(id, &controller.partitions, config.clone()));
            (brokers.collect(), Some(controller))
        };
        let mut driver = Driver::from_cluster(brokers, controller, Vec::new(), addresses);
        for id in 0..n {
            let start = driver.brokers[id as usize].start_loaded(now_ms);
            driver.run(now_ms, id, start);
        }
        driver
    }

    /// Serves brokers already running, as an engine `Cluster` built them (`Cluster::into_brokers`: the
    /// brokers, their controller and their pending timers), broker `i` reachable at `addresses[i]`: a
    /// log `txnsim conform` wrote through the engine's own producers goes on the wire as it stands.
    pub fn from_cluster(
        brokers: Vec<Broker>,
        controller: Option<Controller>,
        timers: Vec<(TimeMs, u32, Timer)>,
        addresses: &[(String, u16)],
    ) -> Self {
        assert_eq!(brokers.len(), addresses.len(), "one address per broker");
        let next_timer_seq = timers.len() as u64;
        let timers = (0..).zip(timers).map(|(seq, (due, id, timer))| ((due, seq), (id, timer))).collect();
        Driver {
            brokers,
            controller,
            addresses: addresses.iter().map(|(h, p)| (str_bytes(h), *p as i32)).collect(),
            serving: BROKER_ID,
            timers,
            refusals: BTreeMap::new(),
            next_timer_seq,
            next_correlation_id: 0,
            stored: BTreeMap::new(),
            connections: BTreeMap::new(),
            monotonicity: MonotonicityChecker::default(),
            state: StateChecker::default(),
            coordinator_checked: (BROKER_ID, None),
            violations: Vec::new(),
            unreported: Vec::new(),
            answers: BTreeMap::new(),
            unanswered: Vec::new(),
            replicas_checked: Vec::new(),
            leaders_checked: BTreeMap::new(),
            down: Default::default(),
            timeline: Timeline::default(),
        }
    }

    /// Broker 0: the only one, or the coordinators' host.
    pub fn broker(&self) -> &Broker {
        &self.brokers[BROKER_ID as usize]
    }

    pub fn brokers(&self) -> &[Broker] {
        &self.brokers
    }

    /// A connection accepted by broker `broker`'s listener (a connection never announced is broker 0's).
    pub fn on_connect(&mut self, conn: ConnId, broker: u32) {
        self.connections.insert(conn, Connection { broker, ..Connection::default() });
    }

    /// The brokers not crashed.
    fn live_brokers(&self) -> impl Iterator<Item = &Broker> {
        (0..).zip(&self.brokers).filter(|(id, _)| !self.down.contains(id)).map(|(_, b)| b)
    }

    /// Whether broker `id` is crashed: its listener's new connections are to be closed at once.
    pub fn is_down(&self, id: u32) -> bool {
        self.down.contains(&id)
    }

    /// Broker `id` crashes, as `Cluster::crash_broker` crashes one: its timers are dropped, what is sent
    /// to it is lost, its connections close (the returned `Close`s), and the controller fences it
    /// (`handleBrokerFenced`: it leaves the ISRs and its partitions get new leaders). Its logs survive for
    /// `restart_broker`. The transaction coordinator moves with `__transaction_state`'s leadership, and a
    /// group's coordinator with its `__consumer_offsets` partition's.
    pub fn crash_broker(&mut self, now_ms: TimeMs, id: u32) -> Result<Vec<Output>, String> {
        if id as usize >= self.brokers.len() {
            return Err(format!("there is no broker {id} (brokers 0 to {})", self.brokers.len() - 1));
        }
        if !self.down.insert(id) {
            return Err(format!("broker {id} is already down"));
        }
        self.timeline.event(now_ms, &NodeId::Broker(id).to_string(), || "crashed".to_string());
        self.timers.retain(|_, (b, _)| *b != id);
        self.refusals.retain(|_, e| e.to != NodeId::Broker(id));
        let closed: Vec<ConnId> = self.connections.iter().filter(|(_, c)| c.broker == id).map(|(c, _)| *c).collect();
        let mut out = Vec::new();
        for conn in closed {
            self.connections.remove(&conn);
            out.push(Output::Close(conn, format!("broker {id} crashed")));
        }
        // The checkers start afresh on the logs that now stand, as on any leader change.
        self.state = StateChecker::default();
        let controller = self.controller.as_mut().expect("a cluster of several brokers has a controller");
        let effects = controller.broker_fenced(id);
        self.run(now_ms, CONTROLLER_ID, effects);
        self.wake(now_ms, false, &mut out);
        Ok(out)
    }

    /// A crashed broker starts again, as `Cluster::start_broker` starts one: the controller unfences it
    /// (it may lead a partition left without a leader), and it loads its logs and the controller's
    /// current image, then catches up as a follower and rejoins the ISRs through its leaders.
    pub fn restart_broker(&mut self, now_ms: TimeMs, id: u32) -> Result<Vec<Output>, String> {
        if !self.down.remove(&id) {
            return Err(format!("broker {id} is not down"));
        }
        self.timeline.event(now_ms, &NodeId::Broker(id).to_string(), || "restarted".to_string());
        self.state = StateChecker::default();
        let controller = self.controller.as_mut().expect("only a cluster's broker can be down");
        let unfenced = controller.broker_restarted(id);
        let image = controller.partitions.clone();
        let started = self.brokers[id as usize].restart_with_image(now_ms, &image);
        self.run(now_ms, CONTROLLER_ID, unfenced);
        self.run(now_ms, id, started);
        let mut out = Vec::new();
        self.wake(now_ms, false, &mut out);
        Ok(out)
    }

    /// Every violation seen so far, first occurrence of each.
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// Violations not yet handed out (the server prints them at once).
    pub fn take_new_violations(&mut self) -> Vec<Violation> {
        std::mem::take(&mut self.unreported)
    }

    /// When the driver next needs `on_tick`: a broker timer or replication deadline, a group deadline
    /// or a waiting Fetch's.
    pub fn next_deadline_ms(&self) -> Option<TimeMs> {
        let timer = self.timers.keys().chain(self.refusals.keys()).map(|k| k.0).min();
        let brokers = self.live_brokers().filter_map(|b| {
            let replication = b.next_replication_deadline_ms();
            replication.into_iter().chain(b.groups.next_deadline_ms()).min()
        });
        let fetch = self
            .connections
            .values()
            .filter_map(|c| match &c.waiting {
                Some(Waiting::Fetch { deadline_ms, .. }) => Some(*deadline_ms),
                _ => None,
            })
            .min();
        timer.into_iter().chain(fetch).chain(brokers).min()
    }

    pub fn on_disconnect(&mut self, conn: ConnId) {
        self.connections.remove(&conn);
    }

    /// One request frame (the bytes after the size prefix) from `conn`.
    pub fn on_frame(&mut self, now_ms: TimeMs, conn: ConnId, body: Bytes) -> Vec<Output> {
        let broker = self.connections.get(&conn).map_or(BROKER_ID, |c| c.broker);
        if self.down.contains(&broker) {
            // Read before its connection closed with its crashed broker, which serves nothing.
            self.connections.remove(&conn);
            return vec![Output::Close(conn, format!("broker {broker} crashed"))];
        }
        let connection = self.connections.entry(conn).or_default();
        if connection.waiting.is_some() {
            if connection.queue.len() >= MAX_QUEUED_PER_CONNECTION {
                self.connections.remove(&conn);
                return vec![Output::Close(conn, "too many requests queued behind a waiting fetch".into())];
            }
            connection.queue.push_back(body);
            return Vec::new();
        }
        let mut out = Vec::new();
        self.serve(now_ms, conn, body, &mut out);
        self.wake(now_ms, false, &mut out);
        out
    }

    /// Fires the broker timers that are due, then each broker's replication work and group deadlines
    /// that are due (once each: what they set for now is the next tick's), and answers the fetches whose
    /// wait is over.
    pub fn on_tick(&mut self, now_ms: TimeMs) -> Vec<Output> {
        let mut out = Vec::new();
        while let Some((&key, _)) = self.timers.iter().next() {
            if key.0 > now_ms {
                break;
            }
            let (id, timer) = self.timers.remove(&key).expect("found above");
            let line = format!("timer {timer:?}");
            let effects = self.brokers[id as usize].on_timer(now_ms, timer);
            self.after_broker_step(now_ms, id, line);
            self.run(now_ms, id, effects);
        }
        while let Some(entry) = self.refusals.first_entry() {
            if entry.key().0 > now_ms {
                break;
            }
            let back = entry.remove();
            // Only brokers' requests travel between brokers here (clients are on real connections).
            let NodeId::Broker(to) = back.to else { continue };
            self.run(now_ms, to, Effects { sends: vec![back], timers: Vec::new() });
        }
        let live: Vec<u32> = (0..self.brokers.len() as u32).filter(|id| !self.down.contains(id)).collect();
        for id in live {
            let b = &mut self.brokers[id as usize];
            if b.next_replication_deadline_ms().is_some_and(|due| due <= now_ms) {
                let effects = b.tick_replication(now_ms);
                self.after_broker_step(now_ms, id, "replication deadlines".to_string());
                self.run(now_ms, id, effects);
            }
            let b = &mut self.brokers[id as usize];
            if b.groups.next_deadline_ms().is_some_and(|due| due <= now_ms) {
                let effects = b.tick_groups(now_ms);
                self.after_broker_step(now_ms, id, "group deadlines".to_string());
                self.run(now_ms, id, effects);
            }
        }
        self.wake(now_ms, true, &mut out);
        out
    }

    /// Serves one frame, or closes the connection if it cannot be parsed.
    fn serve(&mut self, now_ms: TimeMs, conn: ConnId, body: Bytes, out: &mut Vec<Output>) {
        self.serving = self.connections.get(&conn).map_or(BROKER_ID, |c| c.broker);
        match self.handle(now_ms, conn, body) {
            Ok(Some((header, Reply::Response(response)))) => match encode_response(&header, &response) {
                Ok(bytes) => out.push(Output::Send(conn, bytes)),
                Err(e) => {
                    self.connections.remove(&conn);
                    out.push(Output::Close(conn, format!("cannot encode the response: {e}")));
                }
            },
            Ok(Some((header, Reply::Park(request)))) => {
                let wait = (request.max_wait_ms.max(0) as TimeMs).min(MAX_FETCH_WAIT_MS);
                let waiting = Waiting::Fetch { header, request, deadline_ms: now_ms + wait };
                self.connections.entry(conn).or_default().waiting = Some(waiting);
            }
            Ok(Some((header, Reply::Wait(pending)))) => {
                self.connections.entry(conn).or_default().waiting = Some(Waiting::Engine { header, pending });
            }
            Ok(Some((_, Reply::Nothing))) | Ok(None) => {}
            Err(reason) => {
                self.connections.remove(&conn);
                out.push(Output::Close(conn, reason));
            }
        }
    }

    /// Answers what waited and can be answered now: fetches with data (or, if `expire`, past their
    /// deadline) and requests the engine has answered; then serves what queued behind them.
    fn wake(&mut self, now_ms: TimeMs, expire: bool, out: &mut Vec<Output>) {
        for pending in std::mem::take(&mut self.unanswered) {
            if let Err(pending) = self.complete(pending) {
                self.unanswered.push(pending);
            }
        }
        let waiting: Vec<ConnId> =
            self.connections.iter().filter(|(_, c)| c.waiting.is_some()).map(|(id, _)| *id).collect();
        for conn in waiting {
            let Some(waiting) = self.connections.get_mut(&conn).and_then(|c| c.waiting.take()) else { continue };
            let (header, response) = match waiting {
                Waiting::Fetch { header, request, deadline_ms } => {
                    self.serving = self.connections.get(&conn).map_or(BROKER_ID, |c| c.broker);
                    let (response, has_data) = self.fetch(now_ms, conn, header.request_api_version, &request);
                    if !(has_data || expire && now_ms >= deadline_ms) {
                        let waiting = Waiting::Fetch { header, request, deadline_ms };
                        self.connections.get_mut(&conn).expect("still connected").waiting = Some(waiting);
                        continue;
                    }
                    (header, ResponseKind::Fetch(response))
                }
                Waiting::Engine { header, pending } => match self.complete(pending) {
                    Ok(response) => (header, response.expect("only a request that is answered waits")),
                    Err(pending) => {
                        let waiting = Waiting::Engine { header, pending };
                        self.connections.get_mut(&conn).expect("still connected").waiting = Some(waiting);
                        continue;
                    }
                },
            };
            match encode_response(&header, &response) {
                Ok(bytes) => out.push(Output::Send(conn, bytes)),
                Err(e) => {
                    self.connections.remove(&conn);
                    out.push(Output::Close(conn, format!("cannot encode the response: {e}")));
                    continue;
                }
            }
            // Serve the queue until it is empty or another request waits.
            while let Some(next) =
                self.connections.get_mut(&conn).filter(|c| c.waiting.is_none()).and_then(|c| c.queue.pop_front())
            {
                self.serve(now_ms, conn, next, out);
            }
        }
        // Answers nobody waits for any more (their connection closed) are dropped.
        let waiting = self.connections.values().filter_map(|c| match &c.waiting {
            Some(Waiting::Engine { pending, .. }) => Some(pending),
            _ => None,
        });
        let awaited: BTreeSet<u64> = waiting.chain(&self.unanswered).flat_map(|p| p.ids.iter().copied()).collect();
        self.answers.retain(|id, _| awaited.contains(id));
    }

    /// Parses and dispatches one request. `Err` closes the connection, as Kafka does for a request it
    /// cannot parse: an unknown API key, an API or version it did not advertise, a malformed body.
    fn handle(&mut self, now_ms: TimeMs, conn: ConnId, body: Bytes) -> Result<Option<(RequestHeader, Reply)>, String> {
        if body.len() < 8 {
            return Err(format!("a {}-byte request has no header", body.len()));
        }
        let key_code = i16::from_be_bytes([body[0], body[1]]);
        let version = i16::from_be_bytes([body[2], body[3]]);
        let key = ApiKey::try_from(key_code).map_err(|_| format!("unknown API key {key_code}"))?;
        let mut buf = body;
        if key == ApiKey::ApiVersions && !api::is_served(key, version) {
            // KIP-511: an ApiVersions request of an unknown version is answered at v0 with
            // UNSUPPORTED_VERSION and our ranges, so the client can retry with a version we speak.
            let header = RequestHeader::decode(&mut buf, 1).map_err(|e| format!("bad ApiVersions header: {e}"))?;
            let mut header = header;
            header.request_api_version = 0;
            let response = api::api_versions_response(code::UNSUPPORTED_VERSION);
            return Ok(Some((header, Reply::Response(Box::new(ResponseKind::ApiVersions(response))))));
        }
        if !api::is_served(key, version) {
            return Err(format!("{key:?} v{version} is not served (see ApiVersions)"));
        }
        let header = RequestHeader::decode(&mut buf, key.request_header_version(version))
            .map_err(|e| format!("bad {key:?} v{version} header: {e}"))?;
        let request =
            RequestKind::decode(key, &mut buf, version).map_err(|e| format!("bad {key:?} v{version} body: {e}"))?;
        let node = NodeId::Client(format!("conn-{conn}"));
        let reply = self.dispatch(now_ms, &node, version, request);
        Ok(Some((header, reply)))
    }

    fn dispatch(&mut self, now_ms: TimeMs, node: &NodeId, version: i16, request: RequestKind) -> Reply {
        let response = match request {
            RequestKind::ApiVersions(request) => {
                // `ApiVersionsRequest.isValid`: v3+ names the client, and Kafka refuses a malformed name.
                // Every broker runs with the one config the driver was given.
                let checked = !self.brokers[0].config.mutations.has(Mutation::ApiVersionsNamesUnchecked);
                if version >= 3 && checked && !api::names_valid(&request) {
                    return Reply::Response(Box::new(ResponseKind::ApiVersions(api::invalid_api_versions_request())));
                }
                let mut r = api::api_versions_response(0);
                if version < 3 {
                    // Features are tagged fields of v3+.
                    r.supported_features.clear();
                    r.finalized_features.clear();
                    r.finalized_features_epoch = -1;
                }
                ResponseKind::ApiVersions(r)
            }
            RequestKind::Metadata(r) => ResponseKind::Metadata(self.metadata(now_ms, node, version, r)),
            RequestKind::CreateTopics(r) => ResponseKind::CreateTopics(self.create_topics(now_ms, node, version, r)),
            RequestKind::FindCoordinator(r) => {
                ResponseKind::FindCoordinator(self.find_coordinator(now_ms, node, version, r))
            }
            RequestKind::InitProducerId(r) => return self.init_producer_id(now_ms, node, r),
            RequestKind::AddPartitionsToTxn(r) => return self.add_partitions_to_txn(now_ms, node, r),
            RequestKind::EndTxn(r) => return self.end_txn(now_ms, node, version, r),
            RequestKind::AddOffsetsToTxn(r) => return self.add_offsets_to_txn(now_ms, node, version, r),
            RequestKind::TxnOffsetCommit(r) => return self.txn_offset_commit(now_ms, node, version, r),
            RequestKind::ListOffsets(r) => ResponseKind::ListOffsets(self.list_offsets(now_ms, node, version, r)),
            RequestKind::Produce(r) => return self.produce(now_ms, node, version, r),
            RequestKind::Fetch(r) => {
                let (response, has_data) = self.fetch_as(now_ms, node, version, &r);
                if !has_data && r.max_wait_ms > 0 {
                    return Reply::Park(Box::new(r));
                }
                ResponseKind::Fetch(response)
            }
            RequestKind::JoinGroup(_)
            | RequestKind::SyncGroup(_)
            | RequestKind::Heartbeat(_)
            | RequestKind::LeaveGroup(_)
            | RequestKind::OffsetCommit(_)
            | RequestKind::OffsetFetch(_) => {
                return match groups::request(version, request) {
                    Ok(message) => self.ask(now_ms, node, vec![Message::Group(message)], move |_, mut answers| {
                        match answers.pop() {
                            Some(Message::Group(answer)) => Some(groups::response(version, answer)),
                            other => unreachable!("a group request answered with {other:?}"),
                        }
                    }),
                    Err(response) => Reply::Response(response),
                };
            }
            other => unreachable!("api::SUPPORTED lists only dispatched APIs, not {other:?}"),
        };
        Reply::Response(Box::new(response))
    }

    // ------------------------------------------------------------ the engine

    /// Sends `messages` from `node` to the broker serving the request and runs until quiet; their answers,
    /// as far as there are any yet, are in `answers` under the ids returned.
    fn send(&mut self, now_ms: TimeMs, node: &NodeId, messages: Vec<Message>) -> Vec<u64> {
        let mut effects = Effects::default();
        let mut ids = Vec::new();
        for message in messages {
            self.next_correlation_id += 1;
            ids.push(self.next_correlation_id);
            effects.send(node, &NodeId::Broker(self.serving), self.next_correlation_id, message);
        }
        self.run(now_ms, self.serving, effects);
        ids
    }

    /// For the reads, which the broker answers at once: `send`, and each message's answer.
    fn call(&mut self, now_ms: TimeMs, node: &NodeId, messages: Vec<Message>) -> Vec<Option<Message>> {
        self.send(now_ms, node, messages).into_iter().map(|id| self.answers.remove(&id)).collect()
    }

    /// `send`, then the response `finish` builds from the answers if all have come, else a wait for them.
    fn ask(
        &mut self,
        now_ms: TimeMs,
        node: &NodeId,
        messages: Vec<Message>,
        finish: impl FnOnce(&mut Driver, Vec<Message>) -> Option<ResponseKind> + 'static,
    ) -> Reply {
        let bug = self.brokers[BROKER_ID as usize].config.mutations.has(Mutation::DelayedAnswerTimedOut);
        let timed_out: Vec<Option<Message>> = if bug { messages.iter().map(timed_out).collect() } else { Vec::new() };
        let ids = self.send(now_ms, node, messages);
        for (id, answer) in ids.iter().zip(timed_out) {
            if let Some(answer) = answer {
                self.answers.entry(*id).or_insert(answer);
            }
        }
        match self.complete(Pending { ids, finish: Box::new(finish) }) {
            Ok(Some(response)) => Reply::Response(Box::new(response)),
            Ok(None) => Reply::Nothing,
            Err(pending) => Reply::Wait(pending),
        }
    }

    /// The response of `pending` once every one of its messages is answered, else `pending` back.
    fn complete(&mut self, pending: Pending) -> Result<Option<ResponseKind>, Pending> {
        if !pending.ids.iter().all(|id| self.answers.contains_key(id)) {
            return Err(pending);
        }
        let answers = pending.ids.iter().map(|id| self.answers.remove(id).expect("checked above")).collect();
        Ok((pending.finish)(self, answers))
    }

    /// Delivers messages (between brokers, to and from the controller) until none is left; answers to
    /// clients land in `answers` by correlation id. Timers set by broker `from`'s `effects` and by the
    /// steps after are kept for `on_tick`.
    fn run(&mut self, now_ms: TimeMs, from: u32, effects: Effects) {
        let mut network: VecDeque<Envelope> = VecDeque::new();
        self.absorb(from, effects, &mut network);
        for _ in 0..MAX_STEPS_PER_REQUEST {
            let Some(env) = network.pop_front() else { return };
            match env.to {
                NodeId::Broker(CONTROLLER_ID) => {
                    let line = format!("recv {} from {}", env.message, env.from);
                    self.timeline.event(now_ms, "controller", || line);
                    // Only a cluster of several brokers has a controller, and only its brokers write to it.
                    let controller = self.controller.as_mut().expect("a broker wrote to a cluster's controller");
                    let effects = controller.on_message(env);
                    self.absorb(CONTROLLER_ID, effects, &mut network);
                }
                NodeId::Broker(id) if self.down.contains(&id) => {
                    let what = format!("{} from {} (broker {id} is down)", env.message, env.from);
                    let to = env.to.to_string();
                    match network_client::undelivered(env, Receiver::Down) {
                        Undelivered::Refused { after_ms, back } => {
                            self.timeline.event(now_ms, &to, || format!("refused {what}: back in {after_ms} ms"));
                            self.next_timer_seq += 1;
                            self.refusals.insert((now_ms + after_ms, self.next_timer_seq), back);
                        }
                        Undelivered::Lost => self.timeline.event(now_ms, &to, || format!("lost {what}")),
                    }
                }
                NodeId::Broker(id) => {
                    let line = format!("recv {} from {}", env.message, env.from);
                    // Reads change no log and no coordinator state: the invariants need not look again.
                    let reads =
                        matches!(
                            env.message,
                            Message::FetchRequest { .. } | Message::ListOffsetsRequest { .. } | Message::Group(_)
                        ) && !matches!(env.message, Message::Group(GroupMessage::TxnOffsetCommitRequest { .. }));
                    let effects = self.brokers[id as usize].on_message(now_ms, env);
                    if reads {
                        self.timeline.broker_step(now_ms, &self.brokers[id as usize], line);
                    } else {
                        self.after_broker_step(now_ms, id, line);
                    }
                    self.absorb(id, effects, &mut network);
                }
                NodeId::Client(ref name) => {
                    let line = format!("recv {}", env.message);
                    self.timeline.event(now_ms, name, || line);
                    self.answers.insert(env.correlation_id, env.message);
                }
            }
        }
        panic!("the broker kept itself busy past {MAX_STEPS_PER_REQUEST} deliveries for one request");
    }

    fn absorb(&mut self, from: u32, effects: Effects, network: &mut VecDeque<Envelope>) {
        network.extend(effects.sends);
        for (due, timer) in effects.timers {
            self.next_timer_seq += 1;
            self.timers.insert((due, self.next_timer_seq), (from, timer));
        }
    }

    /// After every step of broker `id`: the timeline line with what changed in its logs, then every state
    /// invariant of the catalogue on the live cluster: each partition's leader's log (`leader_of`) and
    /// the coordinators, and each follower's replicas against its leader's.
    fn after_broker_step(&mut self, now_ms: TimeMs, id: u32, line: String) {
        self.timeline.broker_step(now_ms, &self.brokers[id as usize], line);
        let mut found = Vec::new();
        // The replica invariants read every replica's batches, so they run where the sim runs them: when
        // a leader, leader epoch or ISR changed, or a log end moved back (a truncation), not at every
        // append or HW advance (a long-lived server's checks then cost the size of every log each time).
        let replicas = self.replica_fingerprint();
        let moved = replicas != self.replicas_checked;
        let changed_hands = replicas.len() != self.replicas_checked.len()
            || replicas
                .iter()
                .zip(&self.replicas_checked)
                .any(|(now, was)| now.0 < was.0 || (now.2, now.3, &now.4) != (was.2, was.3, &was.4));
        if changed_hands {
            // A crashed broker's frozen state is no replica's word (the sim's `check_replicas` too).
            found.extend(check_replicas(self.live_brokers()));
        }
        if moved {
            self.replicas_checked = replicas;
        }
        // A step that moved no replica changed no leader's log: only the coordinators' brokers need a look.
        if id == BROKER_ID || id == self.coordinator_id() || moved {
            found.extend(self.check_leaders());
        }
        for v in found {
            if self.violations.iter().any(|seen| seen.invariant == v.invariant) {
                continue;
            }
            self.timeline.event(now_ms, "checker", || format!("VIOLATION {v}"));
            self.violations.push(v.clone());
            self.unreported.push(v);
        }
    }

    /// The broker whose transaction coordinator stands for the cluster's (`standing_coordinator`).
    fn coordinator_id(&self) -> u32 {
        standing_coordinator(&self.brokers).map_or(BROKER_ID, |b| b.id)
    }

    /// The broker whose log of `tp` stands for the partition (`standing_leader`, as the sim picks), else
    /// broker 0 (a partition outside replication: one broker's, or `__consumer_offsets`).
    fn leader_of(&self, tp: &TopicPartition) -> (u32, i32) {
        let known = self.brokers.iter().filter_map(|b| b.replica_manager.partitions.get(tp));
        standing_leader(known.map(|p| (p.leader, p.leader_epoch))).unwrap_or((BROKER_ID, 0))
    }

    /// The state invariants and LSO/HW monotonicity on every partition's leader log, with the transaction
    /// coordinator that stands and every live broker's group coordinator. The logs are moved out of their
    /// brokers for the check and back (a copy would cost their size at every step). A partition whose leader changed starts monotonicity afresh: a new
    /// leader's HW may lag the old one's, as in Kafka.
    fn check_leaders(&mut self) -> Vec<Violation> {
        let tps: std::collections::BTreeSet<TopicPartition> =
            self.brokers.iter().flat_map(|b| b.replica_manager.logs.keys().cloned()).collect();
        let leaders: BTreeMap<TopicPartition, (u32, i32)> = tps
            .into_iter()
            .map(|tp| {
                let leader = self.leader_of(&tp);
                (tp, leader)
            })
            .collect();
        let moved = self.leaders_checked.iter().any(|(tp, l)| leaders.get(tp).is_some_and(|now| now != l));
        if moved {
            self.monotonicity = MonotonicityChecker::default();
        }
        let coordinator_id = self.coordinator_id();
        let coordinator_now = (coordinator_id, self.brokers[coordinator_id as usize].txn_manager.loaded_at);
        if moved || coordinator_now != self.coordinator_checked {
            // A new leader's log, or a coordinator that rebuilt its ledger from its own replica: the
            // decisions and logs are read again from the start.
            self.state = StateChecker::default();
            self.coordinator_checked = coordinator_now;
        }
        let logs: BTreeMap<_, _> = leaders
            .iter()
            .filter_map(|(tp, (id, _))| Some((tp, self.brokers[*id as usize].replica_manager.logs.get(tp)?)))
            .collect();
        let coordinator = &self.brokers[coordinator_id as usize];
        let view = ClusterView {
            partitions: &logs,
            coordinator: Some(&coordinator.coordinator),
            mutations: &coordinator.config.mutations,
        };
        let mut found = self.state.check(&view);
        found.extend(self.monotonicity.observe(&view));
        // Each live broker's group coordinator holds the groups it loaded, against its own log.
        let groups: Vec<Violation> = self.live_brokers().flat_map(check_group_offsets).collect();
        found.extend(groups);
        found.extend(check_timers(&self.brokers[self.coordinator_id() as usize].coordinator));
        self.leaders_checked = leaders;
        found
    }

    /// Per replicated partition on each broker: its log end, HW, leader, leader epoch and ISR.
    fn replica_fingerprint(&self) -> Vec<(Offset, Offset, u32, i32, Vec<u32>)> {
        let hosted =
            self.brokers.iter().flat_map(|b| b.replica_manager.partitions.iter().map(move |(tp, p)| (b, tp, p)));
        hosted
            .map(|(b, tp, p)| {
                let (leo, hw) = b.partition(tp).map_or((0, 0), |l| (l.log_end_offset(), l.high_watermark()));
                (leo, hw, p.leader, p.leader_epoch, p.isr.iter().copied().collect())
            })
            .collect()
    }

    fn metadata_call(&mut self, now_ms: TimeMs, node: &NodeId, request: MetadataMessage) -> MetadataMessage {
        match self.call(now_ms, node, vec![Message::Metadata(request)]).pop().flatten() {
            Some(Message::Metadata(m)) => m,
            other => unreachable!("the broker answers metadata with metadata, not {other:?}"),
        }
    }

    // ------------------------------------------------------------ cluster metadata

    /// The broker serving the request.
    fn serving_broker(&self) -> &Broker {
        &self.brokers[self.serving as usize]
    }

    /// The topic named by `id` among those the serving broker hosts or has in its metadata cache.
    fn topic_name_of(&self, id: Uuid) -> Option<String> {
        let b = self.serving_broker();
        let names = b.replica_manager.logs.keys().chain(b.metadata_image.keys()).map(|tp| &tp.topic);
        names.clone().find(|t| topic_id(t) == id).cloned()
    }

    fn metadata(&mut self, now_ms: TimeMs, node: &NodeId, version: i16, r: MetadataRequest) -> MetadataResponse {
        // v0 asks for every topic with an empty list; v1+ with null.
        let mut by_id_unknown = Vec::new();
        let topics = match r.topics {
            None => None,
            Some(list) if list.is_empty() && version == 0 => None,
            Some(list) => Some(
                list.into_iter()
                    .filter_map(|t| match t.name {
                        Some(name) => Some(name.0.to_string()),
                        None => {
                            let name = self.topic_name_of(t.topic_id);
                            if name.is_none() {
                                by_id_unknown.push(t.topic_id);
                            }
                            name
                        }
                    })
                    .collect(),
            ),
        };
        let request =
            MetadataMessage::MetadataRequest { topics, allow_auto_topic_creation: r.allow_auto_topic_creation };
        let MetadataMessage::MetadataResponse { topics, leaders } = self.metadata_call(now_ms, node, request) else {
            unreachable!("Metadata answers Metadata")
        };
        let mut response = MetadataResponse::default();
        // `KRaftMetadataCache.getAliveBrokerNodes`: a fenced (crashed) broker is not listed.
        response.brokers = (0..)
            .zip(&self.addresses)
            .filter(|(id, _)| !self.down.contains(id))
            .map(|(id, (host, port)): (u32, _)| {
                let mut broker = MetadataResponseBroker::default();
                broker.node_id = (id as i32).into();
                broker.host = host.clone();
                broker.port = *port;
                broker
            })
            .collect();
        // Leader and leader epoch as the engine answered; replicas and ISR from the same metadata cache.
        let leaders: BTreeMap<TopicPartition, (u32, i32)> =
            leaders.into_iter().map(|(tp, leader, epoch)| (tp, (leader, epoch))).collect();
        let wire_id = |b: u32| if b == NO_LEADER { -1 } else { b as i32 };
        if version >= 2 {
            response.cluster_id = Some(StrBytes::from_static_str("txnsim"));
        }
        if version >= 1 {
            response.controller_id = (BROKER_ID as i32).into();
        }
        for (name, result) in topics {
            let mut t = MetadataResponseTopic::default();
            t.error_code = error_code(&result);
            if version >= 10 && result.is_ok() {
                t.topic_id = topic_id(&name);
            }
            // `__consumer_offsets` exists once a transaction committed offsets, and is listed as Kafka lists it.
            t.is_internal = name == GROUP_METADATA_TOPIC;
            t.name = Some(str_bytes(&name).into());
            for p in 0..result.unwrap_or(0) {
                let tp = TopicPartition::new(&name, p);
                let (leader, epoch) = leaders.get(&tp).copied().unwrap_or((self.serving, 0));
                let (replicas, isr) = match self.serving_broker().metadata_image.get(&tp) {
                    Some(reg) => (reg.replicas.clone(), reg.state.isr.clone()),
                    None => (vec![self.serving], vec![self.serving]),
                };
                let mut mp = MetadataResponsePartition::default();
                mp.partition_index = p as i32;
                mp.leader_id = wire_id(leader).into();
                mp.leader_epoch = epoch;
                if leader == NO_LEADER {
                    mp.error_code = KafkaError::LeaderNotAvailable.code();
                }
                mp.replica_nodes = replicas.into_iter().map(|r| wire_id(r).into()).collect();
                mp.isr_nodes = isr.into_iter().map(|r| wire_id(r).into()).collect();
                t.partitions.push(mp);
            }
            response.topics.push(t);
        }
        for id in by_id_unknown {
            let mut t = MetadataResponseTopic::default();
            t.error_code = code::UNKNOWN_TOPIC_ID;
            t.topic_id = id;
            response.topics.push(t);
        }
        response
    }

    fn create_topics(
        &mut self,
        now_ms: TimeMs,
        node: &NodeId,
        version: i16,
        r: CreateTopicsRequest,
    ) -> CreateTopicsResponse {
        let mut manual = Vec::new();
        let mut topics = Vec::new();
        let asked_rf: BTreeMap<String, Option<i16>> = r
            .topics
            .iter()
            .map(|t| (t.name.0.to_string(), (t.replication_factor != -1).then_some(t.replication_factor)))
            .collect();
        for t in r.topics {
            let name = t.name.0.to_string();
            if !t.assignments.is_empty() {
                // Manual replica assignment is not modelled: say so rather than guess.
                manual.push(name);
                continue;
            }
            topics.push(NewTopic {
                name,
                num_partitions: (t.num_partitions != -1).then_some(t.num_partitions),
                replication_factor: (t.replication_factor != -1).then_some(t.replication_factor),
            });
        }
        let request = MetadataMessage::CreateTopicsRequest { topics, validate_only: r.validate_only };
        let MetadataMessage::CreateTopicsResponse { results } = self.metadata_call(now_ms, node, request) else {
            unreachable!("CreateTopics answers CreateTopics")
        };
        let mut response = CreateTopicsResponse::default();
        for (name, result) in results {
            let mut t = CreatableTopicResult::default();
            t.error_code = error_code(&result);
            if version >= 7 && result.is_ok() {
                t.topic_id = topic_id(&name);
            }
            if version >= 5 {
                t.num_partitions = result.map_or(-1, |n| n as i32);
                // As the metadata cache placed it (validate-only: as asked, or 1 where nothing was asked).
                let placed = self.serving_broker().metadata_image.get(&TopicPartition::new(&name, 0));
                let asked = asked_rf.get(&name).copied().flatten().unwrap_or(1);
                let rf = placed.map_or(asked, |r| r.replicas.len() as i16);
                t.replication_factor = if result.is_ok() { rf } else { -1 };
            }
            if let Err(e) = result {
                t.error_message = Some(str_bytes(e.name()));
            }
            t.name = str_bytes(&name).into();
            response.topics.push(t);
        }
        for name in manual {
            let mut t = CreatableTopicResult::default();
            t.name = str_bytes(&name).into();
            t.error_code = code::INVALID_REQUEST;
            t.error_message = Some(StrBytes::from_static_str("manual replica assignment is not supported"));
            response.topics.push(t);
        }
        response
    }

    fn find_coordinator(
        &mut self,
        now_ms: TimeMs,
        node: &NodeId,
        version: i16,
        r: FindCoordinatorRequest,
    ) -> FindCoordinatorResponse {
        let key_type = match r.key_type {
            0 => Some(CoordinatorType::Group),
            1 => Some(CoordinatorType::Transaction),
            _ => None,
        };
        let keys: Vec<String> = if version >= 4 {
            r.coordinator_keys.iter().map(|k| k.to_string()).collect()
        } else {
            vec![r.key.to_string()]
        };
        let answers: Vec<(String, Result<u32, KafkaError>)> = match key_type {
            Some(key_type) => {
                let request = MetadataMessage::FindCoordinatorRequest { key_type, keys };
                let MetadataMessage::FindCoordinatorResponse { coordinators } =
                    self.metadata_call(now_ms, node, request)
                else {
                    unreachable!("FindCoordinator answers FindCoordinator")
                };
                coordinators
            }
            None => keys.into_iter().map(|k| (k, Err(KafkaError::InvalidRequest))).collect(),
        };
        let mut response = FindCoordinatorResponse::default();
        let coordinators: Vec<Coordinator> = answers
            .into_iter()
            .map(|(key, result)| {
                let mut c = Coordinator::default();
                c.key = str_bytes(&key);
                c.error_code = error_code(&result);
                match result {
                    Ok(id) => {
                        let (host, port) = self.addresses[id as usize].clone();
                        c.node_id = (id as i32).into();
                        c.host = host;
                        c.port = port;
                    }
                    Err(e) => {
                        c.node_id = (-1).into();
                        c.port = -1;
                        c.error_message = Some(str_bytes(e.name()));
                    }
                }
                c
            })
            .collect();
        if version >= 4 {
            response.coordinators = coordinators;
        } else if let Some(c) = coordinators.into_iter().next() {
            response.error_code = c.error_code;
            response.node_id = c.node_id;
            response.host = c.host;
            response.port = c.port;
            if version >= 1 {
                response.error_message = c.error_message;
            }
        }
        response
    }

    // ------------------------------------------------------------ transactions

    fn init_producer_id(&mut self, now_ms: TimeMs, node: &NodeId, r: InitProducerIdRequest) -> Reply {
        let respond = |result: Result<ProducerIdAndEpoch, KafkaError>| {
            let mut response = InitProducerIdResponse::default();
            response.error_code = error_code(&result);
            let p = result.unwrap_or(ProducerIdAndEpoch { producer_id: -1, epoch: -1 });
            response.producer_id = p.producer_id.into();
            response.producer_epoch = p.epoch;
            ResponseKind::InitProducerId(response)
        };
        if r.transaction_timeout_ms < 0 && r.transactional_id.is_some() {
            return Reply::Response(Box::new(respond(Err(KafkaError::InvalidTransactionTimeout))));
        }
        let request = Message::InitProducerIdRequest {
            transactional_id: r.transactional_id.map(|t| t.0.to_string()),
            transaction_timeout_ms: r.transaction_timeout_ms.max(0) as TimeMs,
            // KIP-360: a live producer names its current id and epoch to get a bump.
            producer_id_and_epoch: (r.producer_id.0 >= 0 && r.producer_epoch >= 0)
                .then_some(ProducerIdAndEpoch { producer_id: r.producer_id.0, epoch: r.producer_epoch }),
        };
        self.ask(now_ms, node, vec![request], move |_, mut answers| match answers.pop() {
            Some(Message::InitProducerIdResponse { result }) => Some(respond(result)),
            other => unreachable!("InitProducerId answered with {other:?}"),
        })
    }

    fn add_partitions_to_txn(&mut self, now_ms: TimeMs, node: &NodeId, r: AddPartitionsToTxnRequest) -> Reply {
        let mut asked = Vec::new();
        for t in &r.v3_and_below_topics {
            for &p in &t.partitions {
                asked.push((t.name.0.to_string(), p));
            }
        }
        let known: Vec<TopicPartition> =
            asked.iter().filter(|(_, p)| *p >= 0).map(|(t, p)| TopicPartition::new(t, *p as u32)).collect();
        let all_known = known.len() == asked.len();
        let broker = self.serving;
        let respond = move |d: &Driver, result: Result<(), KafkaError>| {
            let mut response = AddPartitionsToTxnResponse::default();
            let mut by_topic: BTreeMap<String, Vec<AddPartitionsToTxnPartitionResult>> = BTreeMap::new();
            for (topic, p) in asked {
                let exists =
                    p >= 0 && d.brokers[broker as usize].partition(&TopicPartition::new(&topic, p as u32)).is_some();
                let code = match result {
                    Ok(()) => 0,
                    // `AddPartitionsToTxnRequest`: the known partitions of a refused request were not attempted.
                    Err(KafkaError::UnknownTopicOrPartition) if exists => code::OPERATION_NOT_ATTEMPTED,
                    Err(e) => e.code(),
                };
                let mut pr = AddPartitionsToTxnPartitionResult::default();
                pr.partition_index = p;
                pr.partition_error_code = code;
                by_topic.entry(topic).or_default().push(pr);
            }
            for (topic, results) in by_topic {
                let mut tr = AddPartitionsToTxnTopicResult::default();
                tr.name = str_bytes(&topic).into();
                tr.results_by_partition = results;
                response.results_by_topic_v3_and_below.push(tr);
            }
            ResponseKind::AddPartitionsToTxn(response)
        };
        if !all_known {
            return Reply::Response(Box::new(respond(self, Err(KafkaError::UnknownTopicOrPartition))));
        }
        let request = Message::AddPartitionsToTxnRequest {
            transactional_id: r.v3_and_below_transactional_id.0.to_string(),
            producer: ProducerIdAndEpoch {
                producer_id: r.v3_and_below_producer_id.0,
                epoch: r.v3_and_below_producer_epoch,
            },
            partitions: known,
            verify_only: false,
            // A client's AddPartitionsToTxn (v0-v3) is TV1; TV2 clients never send one.
            transaction_version: TransactionVersion::V1,
        };
        self.ask(now_ms, node, vec![request], move |d, mut answers| match answers.pop() {
            Some(Message::AddPartitionsToTxnResponse { result }) => Some(respond(d, result)),
            other => unreachable!("AddPartitionsToTxn answered with {other:?}"),
        })
    }

    fn add_offsets_to_txn(&mut self, now_ms: TimeMs, node: &NodeId, version: i16, r: AddOffsetsToTxnRequest) -> Reply {
        let request = Message::AddOffsetsToTxnRequest {
            transactional_id: r.transactional_id.0.to_string(),
            producer: ProducerIdAndEpoch { producer_id: r.producer_id.0, epoch: r.producer_epoch },
            group_id: r.group_id.0.to_string(),
        };
        self.ask(now_ms, node, vec![request], move |_, mut answers| {
            let Some(Message::AddOffsetsToTxnResponse { result }) = answers.pop() else {
                unreachable!("AddOffsetsToTxn answered with something else")
            };
            let mut response = AddOffsetsToTxnResponse::default();
            // `handleAddOffsetsToTxnRequest`: clients before v2 know INVALID_PRODUCER_EPOCH, not PRODUCER_FENCED.
            response.error_code = match result {
                Err(KafkaError::ProducerFenced) if version < 2 => KafkaError::InvalidProducerEpoch.code(),
                r => error_code(&r),
            };
            Some(ResponseKind::AddOffsetsToTxn(response))
        })
    }

    /// TxnOffsetCommit: v0-v2 carry no group metadata (generation -1, no member); the group instance id
    /// (static membership, KIP-345) is not modelled and is ignored.
    fn txn_offset_commit(&mut self, now_ms: TimeMs, node: &NodeId, version: i16, r: TxnOffsetCommitRequest) -> Reply {
        let mut offsets = Vec::new();
        let mut refused = Vec::new();
        for t in &r.topics {
            for p in &t.partitions {
                if p.partition_index < 0 || p.committed_offset < 0 {
                    refused.push((TopicPartition::new(&t.name.0, p.partition_index.max(0) as u32), p.partition_index));
                    continue;
                }
                let tp = TopicPartition::new(&t.name.0, p.partition_index as u32);
                offsets.push((tp, (p.committed_offset, p.committed_metadata.as_ref().map(|m| m.to_string()))));
            }
        }
        let mut results: Vec<(String, i32, i16)> =
            refused.into_iter().map(|(tp, index)| (tp.topic, index, code::INVALID_REQUEST)).collect();
        let mut messages = Vec::new();
        if !offsets.is_empty() {
            let (generation_id, member_id) =
                if version >= 3 { (r.generation_id, r.member_id.to_string()) } else { (-1, String::new()) };
            messages.push(Message::Group(GroupMessage::TxnOffsetCommitRequest {
                transactional_id: r.transactional_id.0.to_string(),
                group_id: r.group_id.0.to_string(),
                producer: ProducerIdAndEpoch { producer_id: r.producer_id.0, epoch: r.producer_epoch },
                generation_id,
                member_id,
                offsets,
                transaction_version: if version >= 5 { TransactionVersion::V2 } else { TransactionVersion::V1 },
            }));
        }
        self.ask(now_ms, node, messages, move |_, answers| {
            for answer in answers {
                let Message::Group(GroupMessage::TxnOffsetCommitResponse { results: answered }) = answer else {
                    unreachable!("TxnOffsetCommit answered with {answer:?}")
                };
                let r = |r: Result<(), KafkaError>| error_code(&r.map_err(|e| for_client(e, version >= 4)));
                results.extend(answered.into_iter().map(|(tp, result)| (tp.topic, tp.partition as i32, r(result))));
            }
            let mut by_topic: BTreeMap<String, Vec<TxnOffsetCommitResponsePartition>> = BTreeMap::new();
            for (topic, index, code) in results {
                let mut p = TxnOffsetCommitResponsePartition::default();
                p.partition_index = index;
                p.error_code = code;
                by_topic.entry(topic).or_default().push(p);
            }
            let mut response = TxnOffsetCommitResponse::default();
            for (name, partitions) in by_topic {
                let mut t = TxnOffsetCommitResponseTopic::default();
                t.name = str_bytes(&name).into();
                t.partitions = partitions;
                response.topics.push(t);
            }
            Some(ResponseKind::TxnOffsetCommit(response))
        })
    }

    fn end_txn(&mut self, now_ms: TimeMs, node: &NodeId, version: i16, r: EndTxnRequest) -> Reply {
        let request = Message::EndTxnRequest {
            transactional_id: r.transactional_id.0.to_string(),
            producer: ProducerIdAndEpoch { producer_id: r.producer_id.0, epoch: r.producer_epoch },
            result: if r.committed { TransactionResult::Commit } else { TransactionResult::Abort },
            // `KafkaApis.handleEndTxnRequest`: EndTxn v5+ is TV2.
            transaction_version: if version > 4 { TransactionVersion::V2 } else { TransactionVersion::V1 },
        };
        self.ask(now_ms, node, vec![request], |_, mut answers| {
            let Some(Message::EndTxnResponse { result }) = answers.pop() else {
                unreachable!("EndTxn answered with something else")
            };
            let mut response = EndTxnResponse::default();
            response.error_code = error_code(&result);
            // EndTxn v5 carries the bumped epoch under transaction version 2 (KIP-890); -1 under TV1.
            if let Ok(Some(p)) = result {
                response.producer_id = p.producer_id.into();
                response.producer_epoch = p.epoch;
            }
            Some(ResponseKind::EndTxn(response))
        })
    }

    // ------------------------------------------------------------ produce and read

    fn resolve_topic(&self, version_uses_ids: bool, name: &str, id: Uuid) -> Option<String> {
        if version_uses_ids {
            self.topic_name_of(id)
        } else {
            Some(name.to_string())
        }
    }

    fn produce(&mut self, now_ms: TimeMs, node: &NodeId, version: i16, r: ProduceRequest) -> Reply {
        let transactional_id = r.transactional_id.as_ref().map(|t| t.0.to_string());
        // Per partition: its answer so far, and the batches sent to the engine for it.
        let mut partitions: Vec<ProducePartition> = Vec::new();
        let mut messages = Vec::new();
        for (ti, topic) in r.topic_data.iter().enumerate() {
            let name = self.resolve_topic(version >= 13, &topic.name.0, topic.topic_id);
            for pd in &topic.partition_data {
                let mut sent = Vec::new();
                let decoded = match (&name, pd.index) {
                    (None, _) => Err(code::UNKNOWN_TOPIC_ID),
                    (Some(_), i) if i < 0 => Err(KafkaError::UnknownTopicOrPartition.code()),
                    (Some(_), _) => match pd.records.as_ref().map(|r| records::decode_produce(r, version)) {
                        None => Err(code::CORRUPT_MESSAGE),
                        Some(Err(RecordsError::Corrupt)) => Err(code::CORRUPT_MESSAGE),
                        Some(Err(RecordsError::UnsupportedCompression)) => Err(code::UNSUPPORTED_COMPRESSION_TYPE),
                        Some(Err(RecordsError::ControlFromClient)) => Err(code::INVALID_RECORD),
                        Some(Ok(batches)) if batches.is_empty() => Err(code::CORRUPT_MESSAGE),
                        Some(Ok(batches)) => Ok(batches),
                    },
                };
                let tp = name.as_ref().filter(|_| pd.index >= 0).map(|n| TopicPartition::new(n, pd.index as u32));
                let status = match (decoded, &tp) {
                    (Ok(batches), Some(tp)) => {
                        for b in batches {
                            sent.push((messages.len(), b.stored));
                            messages.push(Message::ProduceRequest {
                                transactional_id: transactional_id.clone(),
                                partition: tp.clone(),
                                batch: b.batch,
                                // Produce v12+ lets the leader add the partition itself (KIP-890 part 2).
                                transaction_version: if version > 11 {
                                    TransactionVersion::V2
                                } else {
                                    TransactionVersion::V1
                                },
                            });
                        }
                        Ok(())
                    }
                    (Ok(_), None) => unreachable!("decoded only for a resolved partition"),
                    (Err(code), _) => Err(code),
                };
                partitions.push(ProducePartition { topic_index: ti, tp, index: pd.index, status, sent });
            }
        }
        let mut response = ProduceResponse::default();
        response.responses = r
            .topic_data
            .iter()
            .map(|t| {
                let mut tr = TopicProduceResponse::default();
                if version >= 13 {
                    tr.topic_id = t.topic_id;
                } else {
                    tr.name = t.name.clone();
                }
                tr
            })
            .collect();
        let (acks, broker) = (r.acks, self.serving);
        let finish = move |d: &mut Driver, answers: Vec<Message>| {
            for ProducePartition { topic_index: ti, tp, index, status, sent } in partitions {
                let mut pr = PartitionProduceResponse::default();
                pr.index = index;
                let mut first: Option<Result<Offset, KafkaError>> = None;
                for (mi, stored) in sent {
                    let Message::ProduceResponse { partition, result } = &answers[mi] else {
                        unreachable!("Produce answered with {:?}", answers[mi])
                    };
                    if let Ok(ack) = result {
                        if !ack.duplicate {
                            for (i, s) in stored.into_iter().enumerate() {
                                d.stored.insert((partition.clone(), ack.first_offset + i as u64), s);
                            }
                        }
                    }
                    let result = result.map(|a| a.first_offset);
                    // The partition's answer: the first batch's offset, or the first error.
                    first = match (first, result) {
                        (None, r) | (Some(Ok(_)), r @ Err(_)) => Some(r),
                        (keep, _) => keep,
                    };
                }
                match (status, first) {
                    (Err(code), _) => pr.error_code = code,
                    (Ok(()), Some(Ok(offset))) => pr.base_offset = offset as i64,
                    (Ok(()), Some(Err(e))) => pr.error_code = for_client(e, version >= 11).code(),
                    (Ok(()), None) => pr.error_code = code::CORRUPT_MESSAGE,
                }
                if pr.error_code != 0 {
                    pr.base_offset = -1;
                }
                if version >= 5 {
                    let log = tp.and_then(|tp| d.brokers[broker as usize].partition(&tp));
                    pr.log_start_offset = log.map_or(-1, |l| l.log_start_offset() as i64);
                }
                response.responses[ti].partition_responses.push(pr);
            }
            // `acks=0`: the client expects no response (`KafkaApis.handleProduceRequest`).
            (acks != 0).then_some(ResponseKind::Produce(response))
        };
        match self.ask(now_ms, node, messages, finish) {
            // acks=0 waits for nothing: the connection goes on, and the answers are taken when they come.
            Reply::Wait(pending) if acks == 0 => {
                self.unanswered.push(pending);
                Reply::Nothing
            }
            reply => reply,
        }
    }

    fn fetch_as(&mut self, now_ms: TimeMs, node: &NodeId, version: i16, r: &FetchRequest) -> (FetchResponse, bool) {
        let isolation =
            if r.isolation_level == 1 { IsolationLevel::ReadCommitted } else { IsolationLevel::ReadUncommitted };
        let mut messages = Vec::new();
        // Per partition: (topic index, partition index, the engine message's index or an error code).
        let mut slots = Vec::new();
        for (ti, topic) in r.topics.iter().enumerate() {
            let name = self.resolve_topic(version >= 13, &topic.topic.0, topic.topic_id);
            for p in &topic.partitions {
                let slot = match (&name, p.partition, p.fetch_offset) {
                    (None, _, _) => Err(code::UNKNOWN_TOPIC_ID),
                    (_, i, _) if i < 0 => Err(KafkaError::UnknownTopicOrPartition.code()),
                    (_, _, o) if o < 0 => Err(KafkaError::OffsetOutOfRange.code()),
                    (Some(name), i, o) => {
                        messages.push(Message::FetchRequest {
                            partition: TopicPartition::new(name, i as u32),
                            fetch_offset: o as u64,
                            isolation: Some(isolation),
                            client_metadata: version >= 11,
                        });
                        Ok((messages.len() - 1, p.partition_max_bytes.max(0) as usize))
                    }
                };
                slots.push((ti, p.partition, slot));
            }
        }
        let answers = self.call(now_ms, node, messages);
        let mut response = FetchResponse::default();
        response.responses = r
            .topics
            .iter()
            .map(|t| {
                let mut tr = FetchableTopicResponse::default();
                if version >= 13 {
                    tr.topic_id = t.topic_id;
                } else {
                    tr.topic = t.topic.clone();
                }
                tr
            })
            .collect();
        let mut budget = r.max_bytes.max(0) as usize;
        let mut has_data = false;
        for (ti, index, slot) in slots {
            let mut pd = PartitionData::default();
            pd.partition_index = index;
            pd.high_watermark = -1;
            pd.records = Some(Bytes::new());
            pd.aborted_transactions = None;
            let answer = slot.map(|(mi, max)| (answers[mi].clone(), max));
            match answer {
                Err(code) => pd.error_code = code,
                Ok((Some(Message::FetchResponse { partition, result: Ok(data), .. }), max_bytes)) => {
                    pd.high_watermark = data.high_watermark as i64;
                    pd.last_stable_offset = data.last_stable_offset as i64;
                    pd.log_start_offset = data.log_start_offset as i64;
                    pd.aborted_transactions = data.aborted_transactions.map(|list| {
                        list.iter()
                            .map(|a| {
                                let mut at = fetch_response::AbortedTransaction::default();
                                at.producer_id = a.producer_id.into();
                                at.first_offset = a.first_offset as i64;
                                at
                            })
                            .collect()
                    });
                    let bytes = records::encode_fetch(&partition, &data.batches, &self.stored, max_bytes.min(budget));
                    budget = budget.saturating_sub(bytes.len());
                    has_data |= !bytes.is_empty();
                    pd.records = Some(bytes);
                }
                Ok((Some(Message::FetchResponse { result: Err(e), .. }), _)) => pd.error_code = e.code(),
                Ok(_) => pd.error_code = KafkaError::RequestTimedOut.code(),
            }
            response.responses[ti].partitions.push(pd);
        }
        (response, has_data)
    }

    fn fetch(&mut self, now_ms: TimeMs, conn: ConnId, version: i16, r: &FetchRequest) -> (FetchResponse, bool) {
        self.fetch_as(now_ms, &NodeId::Client(format!("conn-{conn}")), version, r)
    }

    fn list_offsets(
        &mut self,
        now_ms: TimeMs,
        node: &NodeId,
        version: i16,
        r: ListOffsetsRequest,
    ) -> ListOffsetsResponse {
        let isolation = if version >= 2 && r.isolation_level == 1 {
            IsolationLevel::ReadCommitted
        } else {
            IsolationLevel::ReadUncommitted
        };
        let mut messages = Vec::new();
        let mut slots = Vec::new();
        for (ti, topic) in r.topics.iter().enumerate() {
            for p in &topic.partitions {
                let partition =
                    (p.partition_index >= 0).then(|| TopicPartition::new(&topic.name.0, p.partition_index as u32));
                let slot = match (partition, p.timestamp) {
                    (None, _) => Err(KafkaError::UnknownTopicOrPartition.code()),
                    // LATEST: the high watermark, or the LSO at read_committed (`Partition.fetchOffsetForTimestamp`).
                    (Some(partition), -1) => Ok(Message::ListOffsetsRequest { partition, isolation }),
                    // EARLIEST, and EARLIEST_LOCAL (KIP-405; no tiered storage here, so the same).
                    (Some(partition), -2 | -4) => {
                        Ok(Message::Metadata(MetadataMessage::EarliestOffsetRequest { partition }))
                    }
                    // Lookups by timestamp and MAX_TIMESTAMP need record times the engine does not keep.
                    (Some(_), _) => Err(code::INVALID_REQUEST),
                };
                let slot = slot.map(|m| {
                    messages.push(m);
                    messages.len() - 1
                });
                slots.push((ti, p.partition_index, slot));
            }
        }
        let answers = self.call(now_ms, node, messages);
        let mut response = ListOffsetsResponse::default();
        response.topics = r
            .topics
            .iter()
            .map(|t| {
                let mut tr = ListOffsetsTopicResponse::default();
                tr.name = t.name.clone();
                tr
            })
            .collect();
        for (ti, index, slot) in slots {
            let mut pr = ListOffsetsPartitionResponse::default();
            pr.partition_index = index;
            let result = slot.map(|mi| match &answers[mi] {
                Some(Message::ListOffsetsResponse { result, .. }) => *result,
                Some(Message::Metadata(MetadataMessage::EarliestOffsetResponse { result, .. })) => *result,
                _ => Err(KafkaError::RequestTimedOut),
            });
            match result {
                Err(code) => pr.error_code = code,
                Ok(Err(e)) => pr.error_code = e.code(),
                Ok(Ok(offset)) => pr.offset = offset as i64,
            }
            response.topics[ti].partitions.push(pr);
        }
        response
    }
}

/// The answer `delayed-answer-timed-out` gives a write the engine has not answered: REQUEST_TIMED_OUT.
/// None for the group requests that wait for a rebalance.
fn timed_out(request: &Message) -> Option<Message> {
    let e = KafkaError::RequestTimedOut;
    Some(match request {
        Message::InitProducerIdRequest { .. } => Message::InitProducerIdResponse { result: Err(e) },
        Message::AddPartitionsToTxnRequest { .. } => Message::AddPartitionsToTxnResponse { result: Err(e) },
        Message::AddOffsetsToTxnRequest { .. } => Message::AddOffsetsToTxnResponse { result: Err(e) },
        Message::EndTxnRequest { .. } => Message::EndTxnResponse { result: Err(e) },
        Message::ProduceRequest { partition, .. } => {
            Message::ProduceResponse { partition: partition.clone(), result: Err(e) }
        }
        Message::Group(GroupMessage::TxnOffsetCommitRequest { offsets, .. }) => {
            let results = offsets.iter().map(|(tp, _)| (tp.clone(), Err(e))).collect();
            Message::Group(GroupMessage::TxnOffsetCommitResponse { results })
        }
        _ => return None,
    })
}

/// A response frame: size, header (correlation id), body, in the versions the request named.
fn encode_response(header: &RequestHeader, response: &ResponseKind) -> Result<Bytes, String> {
    let key = ApiKey::try_from(header.request_api_key).map_err(|_| "unknown API key".to_string())?;
    let version = header.request_api_version;
    let mut buf = BytesMut::new();
    let mut rh = ResponseHeader::default();
    rh.correlation_id = header.correlation_id;
    let header_version = match response {
        // ApiVersions responses always use header v0, so a client that cannot parse them still can.
        ResponseKind::ApiVersions(_) => ApiVersionsResponse::header_version(0),
        _ => key.response_header_version(version),
    };
    rh.encode(&mut buf, header_version).map_err(|e| e.to_string())?;
    response.encode(&mut buf, version).map_err(|e| e.to_string())?;
    Ok(frame::frame(&buf))
}
