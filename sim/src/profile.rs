//! Workload profiles (chosen by flag) and the swarm-style fault mix each seed draws for itself.

use crate::rng::SimRng;
use std::fmt;
use txnsim_engine::{IsolationLevel, ProducerKind, TimeMs, TransactionVersion};

/// A named workload shape. Every profile runs the same harness; they differ in topology, pacing and
/// which faults they favour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Profile {
    /// Three partitions, distinct and shared transactional ids, idempotent and plain writers, both readers.
    Standard,
    /// One partition, many producers on few transactional ids: fencing and interleaving on one log.
    Contention,
    /// Few producers, transactions of many sends that stay open long: LSO held back, readers wait.
    LongTxns,
    /// A short `transaction.timeout.ms`, producers that stall and pauses past the timeout: the
    /// coordinator's timeout aborts and the fencing of the stalled producer (seed document: unverified).
    Timeouts,
    /// Two topics, every transaction spans 2-4 partitions, broker restarts between decision and markers:
    /// multi-partition atomicity (seed document: unverified).
    Atomicity,
    /// Short transactions on one partition whose sends are often held in the network past their delivery
    /// timeout, so the application aborts and the late copy lands in a later transaction (KIP-890).
    LateSends,
    /// The standard workload on one broker that leads every partition alone: the sim before replication.
    SingleBroker,
    /// Consume-transform-produce: processors in one consumer group read an input topic read_committed,
    /// write each input's output and commit their offsets in the same transaction (KIP-98, KIP-447), while
    /// members join, leave, crash and pause into zombies.
    Eos,
}

impl Profile {
    pub const ALL: [Profile; 8] = [
        Profile::Standard,
        Profile::Contention,
        Profile::LongTxns,
        Profile::Timeouts,
        Profile::Atomicity,
        Profile::LateSends,
        Profile::SingleBroker,
        Profile::Eos,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Profile::Standard => "standard",
            Profile::Contention => "contention",
            Profile::LongTxns => "long-txns",
            Profile::Timeouts => "timeouts",
            Profile::Atomicity => "atomicity",
            Profile::LateSends => "late-sends",
            Profile::SingleBroker => "single-broker",
            Profile::Eos => "eos",
        }
    }

    pub fn from_name(name: &str) -> Option<Profile> {
        Profile::ALL.into_iter().find(|p| p.name() == name)
    }

    pub fn names() -> String {
        Profile::ALL.iter().map(|p| p.name()).collect::<Vec<_>>().join(", ")
    }

    pub fn params(self) -> ProfileParams {
        let base = ProfileParams {
            topics: vec![("t".to_string(), 3)],
            // The seed experiment's cluster: three brokers, every partition on all three.
            brokers: 3,
            replication_factor: 3,
            // Kafka's replication timeouts scaled to the sim's seconds-long runs: `replica.lag.time.max.ms`
            // (30 s) as long as a few request timeouts, so an isolated follower leaves the ISR and rejoins.
            replica_lag_time_max_ms: (300, 1_500),
            // Kafka's 500 ms at most: an idle follower's long poll is most of an idle cluster's traffic.
            replica_fetch_wait_max_ms: (300, 500),
            replica_fetch_backoff_ms: (20, 100),
            min_insync_replicas: (1, 2),
            producers: vec![
                txn("p0", "tx-a"),
                txn("p1", "tx-b"),
                txn("p2", "tx-s"),
                txn("p3", "tx-s"),
                ProducerSpec { name: "i0".into(), kind: ProducerKind::Idempotent },
                ProducerSpec { name: "n0".into(), kind: ProducerKind::Plain },
            ],
            consumers: vec![
                ConsumerSpec { name: "rc0".into(), isolation: IsolationLevel::ReadCommitted, seeks: false },
                ConsumerSpec { name: "ru0".into(), isolation: IsolationLevel::ReadUncommitted, seeks: false },
                ConsumerSpec { name: "rc1".into(), isolation: IsolationLevel::ReadCommitted, seeks: true },
            ],
            ticks: 160,
            tick_ms: (1, 15),
            sends_per_txn: (1, 4),
            values_per_send: (1, 3),
            partitions_per_txn: (1, 2),
            commit_ratio: 0.7,
            poll_ratio: 0.45,
            stall_prob: 0.03,
            stall_ms: (100, 2_000),
            txn_timeout_ms: 4_000,
            cleanup_interval_ms: 1_000,
            request_timeout_ms: 400,
            delivery_timeouts: 4,
            retry_backoff_ms: 50,
            tv2_prob: 0.5,
            fault_enable_prob: FaultKind::ALL.map(|_| 0.5),
            fault_rate: (0.01, 0.06),
            delay_produce_prob: (0.02, 0.15),
            delay_produce_ms: None,
            eos: None,
        };
        match self {
            Profile::Standard => base,
            Profile::SingleBroker => {
                // One broker has no controller to fail over; a zero chance draws nothing, so the profile's
                // seeds keep the draws they had before the fault existed.
                let mut fault_enable_prob = base.fault_enable_prob;
                fault_enable_prob[FaultKind::ControllerFailover as usize] = 0.0;
                ProfileParams {
                    brokers: 1,
                    replication_factor: 1,
                    min_insync_replicas: (1, 1),
                    fault_enable_prob,
                    ..base
                }
            }
            Profile::Contention => ProfileParams {
                topics: vec![("t".to_string(), 1)],
                producers: vec![
                    txn("p0", "tx-a"),
                    txn("p1", "tx-a"),
                    txn("p2", "tx-a"),
                    txn("p3", "tx-b"),
                    txn("p4", "tx-b"),
                    txn("p5", "tx-c"),
                ],
                consumers: vec![
                    ConsumerSpec { name: "rc0".into(), isolation: IsolationLevel::ReadCommitted, seeks: true },
                    ConsumerSpec { name: "ru0".into(), isolation: IsolationLevel::ReadUncommitted, seeks: false },
                ],
                ticks: 140,
                tick_ms: (0, 6),
                sends_per_txn: (1, 3),
                partitions_per_txn: (1, 1),
                ..base
            },
            Profile::LongTxns => ProfileParams {
                topics: vec![("t".to_string(), 2)],
                producers: vec![
                    txn("p0", "tx-a"),
                    txn("p1", "tx-b"),
                    txn("p2", "tx-c"),
                    ProducerSpec { name: "i0".into(), kind: ProducerKind::Idempotent },
                ],
                ticks: 180,
                tick_ms: (5, 40),
                sends_per_txn: (6, 20),
                partitions_per_txn: (1, 2),
                txn_timeout_ms: 20_000,
                cleanup_interval_ms: 2_000,
                ..base
            },
            Profile::Timeouts => {
                let mut fault_enable_prob = base.fault_enable_prob;
                fault_enable_prob[FaultKind::PauseProducer as usize] = 1.0;
                ProfileParams {
                    topics: vec![("t".to_string(), 2)],
                    producers: vec![
                        txn("p0", "tx-a"),
                        txn("p1", "tx-b"),
                        txn("p2", "tx-a"),
                        ProducerSpec { name: "n0".into(), kind: ProducerKind::Plain },
                    ],
                    ticks: 140,
                    tick_ms: (2, 20),
                    stall_prob: 0.25,
                    stall_ms: (300, 2_500),
                    txn_timeout_ms: 800,
                    cleanup_interval_ms: 200,
                    fault_enable_prob,
                    fault_rate: (0.02, 0.08),
                    ..base
                }
            }
            Profile::Atomicity => {
                let mut fault_enable_prob = base.fault_enable_prob;
                fault_enable_prob[FaultKind::BrokerRestart as usize] = 0.8;
                ProfileParams {
                    topics: vec![("a".to_string(), 2), ("b".to_string(), 2)],
                    producers: vec![txn("p0", "tx-a"), txn("p1", "tx-b"), txn("p2", "tx-a")],
                    sends_per_txn: (2, 6),
                    partitions_per_txn: (2, 4),
                    fault_enable_prob,
                    ..base
                }
            }
            Profile::LateSends => {
                let mut fault_enable_prob = base.fault_enable_prob;
                fault_enable_prob[FaultKind::DelayProduce as usize] = 1.0;
                ProfileParams {
                    topics: vec![("t".to_string(), 1)],
                    producers: vec![txn("p0", "tx-a"), txn("p1", "tx-b")],
                    consumers: vec![
                        ConsumerSpec { name: "rc0".into(), isolation: IsolationLevel::ReadCommitted, seeks: true },
                        ConsumerSpec { name: "ru0".into(), isolation: IsolationLevel::ReadUncommitted, seeks: false },
                    ],
                    sends_per_txn: (1, 2),
                    values_per_send: (1, 1),
                    partitions_per_txn: (1, 1),
                    commit_ratio: 0.5,
                    delay_produce_prob: (0.2, 0.5),
                    // A batch fails at its first request timeout; its copy, held just past it, lands after
                    // the application aborted the send's transaction, as the next one begins.
                    delivery_timeouts: 1,
                    delay_produce_ms: Some((400, 600)),
                    fault_enable_prob,
                    ..base
                }
            }
            Profile::Eos => {
                // Pauses past the session timeout make the zombies KIP-447 fences.
                let mut fault_enable_prob = base.fault_enable_prob;
                fault_enable_prob[FaultKind::PauseProducer as usize] = 0.8;
                fault_enable_prob[FaultKind::ProducerRestart as usize] = 0.8;
                let eos = EosParams::default();
                let mut producers =
                    vec![txn("p0", "tx-in"), ProducerSpec { name: "n0".into(), kind: ProducerKind::Plain }];
                producers.extend(eos.processor_names().map(|w| txn(&w, &format!("tx-{w}"))));
                ProfileParams {
                    topics: vec![(eos.input_topic.clone(), 2), (eos.output_topic.clone(), 2)],
                    producers,
                    consumers: vec![ConsumerSpec {
                        name: "rc0".into(),
                        isolation: IsolationLevel::ReadCommitted,
                        seeks: false,
                    }],
                    // Long enough for groups to form, rebalance after crashes and pauses, and process.
                    ticks: 700,
                    tick_ms: (2, 12),
                    sends_per_txn: (1, 3),
                    partitions_per_txn: (1, 2),
                    txn_timeout_ms: 2_000,
                    cleanup_interval_ms: 500,
                    // Exactly-once is claimed under TV2 (`World::check_processing`): most seeds run it.
                    tv2_prob: 0.8,
                    fault_enable_prob,
                    eos: Some(eos),
                    ..base
                }
            }
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

fn txn(name: &str, tid: &str) -> ProducerSpec {
    ProducerSpec { name: name.to_string(), kind: ProducerKind::Transactional { transactional_id: tid.to_string() } }
}

#[derive(Clone, Debug)]
pub struct ProducerSpec {
    pub name: String,
    pub kind: ProducerKind,
}

#[derive(Clone, Debug)]
pub struct ConsumerSpec {
    pub name: String,
    pub isolation: IsolationLevel,
    /// Seeks back now and then (a fresh read from an earlier offset).
    pub seeks: bool,
}

/// The shape of a profile's workload; all ranges are inclusive.
#[derive(Clone, Debug)]
pub struct ProfileParams {
    pub topics: Vec<(String, u32)>,
    /// Brokers in the cluster (1 or 3: the coordinator's broker must host every partition), and every
    /// topic's replication factor (capped by the broker count).
    pub brokers: u32,
    pub replication_factor: u32,
    /// Ranges each seed draws `replica.lag.time.max.ms`, `replica.fetch.wait.max.ms`,
    /// `replica.fetch.backoff.ms` and `min.insync.replicas` from (`replica.socket.timeout.ms` is the lag
    /// time, as Kafka's defaults have them equal).
    pub replica_lag_time_max_ms: (TimeMs, TimeMs),
    pub replica_fetch_wait_max_ms: (TimeMs, TimeMs),
    pub replica_fetch_backoff_ms: (TimeMs, TimeMs),
    pub min_insync_replicas: (u32, u32),
    pub producers: Vec<ProducerSpec>,
    pub consumers: Vec<ConsumerSpec>,
    /// Workload steps before healing.
    pub ticks: u32,
    /// Simulated time between steps.
    pub tick_ms: (TimeMs, TimeMs),
    pub sends_per_txn: (u32, u32),
    pub values_per_send: (u32, u32),
    pub partitions_per_txn: (u32, u32),
    /// Of finished transactions, the share the producer commits (the rest it aborts).
    pub commit_ratio: f64,
    /// Share of steps that are consumer polls rather than producer calls.
    pub poll_ratio: f64,
    /// Chance that a producer, after a send, goes quiet inside its transaction for `stall_ms`.
    pub stall_prob: f64,
    pub stall_ms: (TimeMs, TimeMs),
    pub txn_timeout_ms: TimeMs,
    pub cleanup_interval_ms: TimeMs,
    pub request_timeout_ms: TimeMs,
    /// `delivery.timeout.ms` in request timeouts: Kafka's default ratio is 4 (120000 / 30000), so a lost
    /// batch is resent about four times before it fails; 1 (Kafka's least) fails it at its first timeout.
    pub delivery_timeouts: TimeMs,
    pub retry_backoff_ms: TimeMs,
    /// Chance that the seed runs transaction.version 2 instead of 1.
    pub tv2_prob: f64,
    /// Per fault kind, the chance a seed switches it on.
    pub fault_enable_prob: [f64; FaultKind::COUNT],
    /// Range of the per-step chance of injecting one of the enabled faults.
    pub fault_rate: (f64, f64),
    /// Range of the chance that a transactional Produce is held back, when `DelayProduce` is on.
    pub delay_produce_prob: (f64, f64),
    /// How long a held Produce waits; `None`: until after its transaction ended, often past the next one's
    /// start (50 ms to 1.5 transaction timeouts).
    pub delay_produce_ms: Option<(TimeMs, TimeMs)>,
    /// The consume-transform-produce loop, in the `eos` profile only.
    pub eos: Option<EosParams>,
}

/// The `eos` profile's loop: its topics, its group and the members' timeouts, scaled to the sim's
/// seconds-long runs as the replication timeouts are.
#[derive(Clone, Debug)]
pub struct EosParams {
    pub input_topic: String,
    pub output_topic: String,
    pub group: String,
    /// Processors `w0`, `w1`, ...: each a member of `group` (its consumer `wN.in`) and a transactional
    /// producer of its own id `tx-wN` (KIP-447: the group's generation fences, not the id).
    pub processors: u32,
    /// `session.timeout.ms`, `heartbeat.interval.ms` and `max.poll.interval.ms` (the rebalance timeout), and
    /// the broker's `group.min.session.timeout.ms` and `group.initial.rebalance.delay.ms`.
    pub session_timeout_ms: TimeMs,
    pub heartbeat_interval_ms: TimeMs,
    pub rebalance_timeout_ms: TimeMs,
    pub min_session_timeout_ms: TimeMs,
    pub initial_rebalance_delay_ms: TimeMs,
    /// Of a processor's transactions, the share it commits (the rest it aborts and rewinds).
    pub commit_ratio: f64,
    /// Outputs per Produce of a processor's transaction.
    pub outputs_per_send: (u32, u32),
    /// Chance per processor step, outside a transaction, that the member leaves its group (LeaveGroup)
    /// and rejoins as a new member `leave_ms` later.
    pub leave_prob: f64,
    pub leave_ms: (TimeMs, TimeMs),
}

impl Default for EosParams {
    fn default() -> Self {
        EosParams {
            input_topic: "in".into(),
            output_topic: "out".into(),
            group: "g".into(),
            processors: 3,
            session_timeout_ms: 1_500,
            heartbeat_interval_ms: 300,
            rebalance_timeout_ms: 2_000,
            min_session_timeout_ms: 500,
            initial_rebalance_delay_ms: 100,
            commit_ratio: 0.85,
            outputs_per_send: (1, 3),
            leave_prob: 0.01,
            leave_ms: (200, 1_500),
        }
    }
}

impl EosParams {
    pub fn processor_names(&self) -> impl Iterator<Item = String> {
        (0..self.processors).map(|i| format!("w{i}"))
    }

    /// The group member of processor `name`.
    pub fn member_of(name: &str) -> String {
        format!("{name}.in")
    }
}

/// The faults the swarm may switch on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// Kill the broker (logs and `__transaction_state` survive) and restart it a little later.
    BrokerRestart,
    /// Clog every link of one node for a while (messages are dropped).
    ClogNode,
    /// Clog one direction of one link for a while.
    ClogLink,
    /// Packet loss on the whole network for a while.
    PacketLoss,
    /// Higher latency on the whole network for a while.
    Latency,
    /// Pause a transactional producer past its transaction timeout (a GC pause), then resume it.
    PauseProducer,
    /// Hold a transactional Produce in the network until after its transaction ended.
    DelayProduce,
    /// Hold any message in the network for a long while (reordering, late duplicates of retries).
    DelayMessage,
    /// Kill a producer process and start a new instance with the same transactional id.
    ProducerRestart,
    /// Lose one answer of InitProducerId, AddPartitionsToTxn, Produce, EndTxn or WriteTxnMarkers: the
    /// request was processed, its asker times out and retries (`NetworkClient`'s request timeout).
    LoseAnswer,
    /// Hold one such answer past its asker's request timeout: it lands after the retry went out.
    DelayAnswer,
    /// Close a producer's connection to the broker (`NetworkClient` disconnect): its requests in flight
    /// fail and are retried, whether or not the broker has processed them; their answers never arrive.
    DisconnectClient,
    /// Kill a partition leader other than the coordinator's broker (its log survives) and restart it: the
    /// controller elects a new leader from the ISR, and the old one returns as a follower and truncates.
    LeaderRestart,
    /// Cut both directions between a partition's leader and one of its followers for a while: the
    /// follower falls out of the ISR and rejoins once healed and caught up.
    IsolateFollower,
    /// The active controller dies and the quorum elects another a little later: until then AlterPartition
    /// requests wait, a broker that dies keeps its leaderships, and a restarted one waits to register.
    ControllerFailover,
}

impl FaultKind {
    pub const COUNT: usize = 15;
    pub const ALL: [FaultKind; FaultKind::COUNT] = [
        FaultKind::BrokerRestart,
        FaultKind::ClogNode,
        FaultKind::ClogLink,
        FaultKind::PacketLoss,
        FaultKind::Latency,
        FaultKind::PauseProducer,
        FaultKind::DelayProduce,
        FaultKind::DelayMessage,
        FaultKind::ProducerRestart,
        FaultKind::LoseAnswer,
        FaultKind::DelayAnswer,
        FaultKind::DisconnectClient,
        FaultKind::LeaderRestart,
        FaultKind::IsolateFollower,
        FaultKind::ControllerFailover,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::BrokerRestart => "broker-restart",
            FaultKind::ClogNode => "clog-node",
            FaultKind::ClogLink => "clog-link",
            FaultKind::PacketLoss => "packet-loss",
            FaultKind::Latency => "latency",
            FaultKind::PauseProducer => "pause-producer",
            FaultKind::DelayProduce => "delay-produce",
            FaultKind::DelayMessage => "delay-message",
            FaultKind::ProducerRestart => "producer-restart",
            FaultKind::LoseAnswer => "lose-answer",
            FaultKind::DelayAnswer => "delay-answer",
            FaultKind::DisconnectClient => "disconnect-client",
            FaultKind::LeaderRestart => "leader-restart",
            FaultKind::IsolateFollower => "isolate-follower",
            FaultKind::ControllerFailover => "controller-failover",
        }
    }
}

/// What one seed drew: the fault mix and a few knobs.
#[derive(Clone, Debug)]
pub struct Swarm {
    pub enabled: Vec<FaultKind>,
    /// Per-step chance of injecting one enabled fault.
    pub fault_rate: f64,
    /// Chance that a transactional Produce is held back (when `DelayProduce` is on).
    pub delay_produce_prob: f64,
    /// Chance that any message is held back (when `DelayMessage` is on).
    pub delay_message_prob: f64,
    /// Chance that one answer of the five transactional APIs is lost (`LoseAnswer`) or held (`DelayAnswer`).
    pub lose_answer_prob: f64,
    pub delay_answer_prob: f64,
    pub transaction_version: TransactionVersion,
    pub replica_lag_time_max_ms: TimeMs,
    pub replica_fetch_wait_max_ms: TimeMs,
    pub replica_fetch_backoff_ms: TimeMs,
    pub min_insync_replicas: u32,
}

impl Swarm {
    pub fn draw(params: &ProfileParams, rng: &mut SimRng) -> Swarm {
        let enabled: Vec<FaultKind> =
            FaultKind::ALL.into_iter().filter(|k| rng.chance(params.fault_enable_prob[*k as usize])).collect();
        let fault_rate = rng.range_f64(params.fault_rate.0, params.fault_rate.1);
        let delay_produce_prob = rng.range_f64(params.delay_produce_prob.0, params.delay_produce_prob.1);
        let delay_message_prob = rng.range_f64(0.002, 0.02);
        let lose_answer_prob = rng.range_f64(0.01, 0.08);
        let delay_answer_prob = rng.range_f64(0.01, 0.06);
        let transaction_version =
            if rng.chance(params.tv2_prob) { TransactionVersion::V2 } else { TransactionVersion::V1 };
        let replica_lag_time_max_ms = rng.range(params.replica_lag_time_max_ms.0, params.replica_lag_time_max_ms.1);
        // Kafka refuses a fetch wait above the lag bound (`EngineConfig::check_broker_config`).
        let replica_fetch_wait_max_ms = rng
            .range(params.replica_fetch_wait_max_ms.0, params.replica_fetch_wait_max_ms.1)
            .min(replica_lag_time_max_ms);
        let replica_fetch_backoff_ms = rng.range(params.replica_fetch_backoff_ms.0, params.replica_fetch_backoff_ms.1);
        let (lo, hi) = params.min_insync_replicas;
        let min_insync_replicas = rng.range(lo as u64, hi as u64) as u32;
        Swarm {
            enabled,
            fault_rate,
            delay_produce_prob,
            delay_message_prob,
            lose_answer_prob,
            delay_answer_prob,
            transaction_version,
            replica_lag_time_max_ms,
            replica_fetch_wait_max_ms,
            replica_fetch_backoff_ms,
            min_insync_replicas,
        }
    }

    pub fn has(&self, k: FaultKind) -> bool {
        self.enabled.contains(&k)
    }

    pub fn describe(&self) -> String {
        let faults = if self.enabled.is_empty() {
            "none".to_string()
        } else {
            self.enabled.iter().map(|k| k.name()).collect::<Vec<_>>().join(",")
        };
        format!(
            "TV{} faults [{faults}] rate {:.3} delay-produce {:.3} delay-message {:.4} lose-answer {:.3} \
             delay-answer {:.3} replica lag {} ms fetch wait {} ms backoff {} ms min.isr {}",
            self.transaction_version.number(),
            self.fault_rate,
            self.delay_produce_prob,
            self.delay_message_prob,
            self.lose_answer_prob,
            self.delay_answer_prob,
            self.replica_lag_time_max_ms,
            self.replica_fetch_wait_max_ms,
            self.replica_fetch_backoff_ms,
            self.min_insync_replicas
        )
    }
}
