//! The bounds of one model: how many producers, transactions, records and partitions, which faults,
//! which transaction version, which injected bug. Everything the exploration depends on is here.

use std::fmt;
use txnsim_engine::{EngineConfig, Mutation, Mutations, TopicPartition, Topology, TransactionVersion};

/// The topic every producer writes and every reader reads.
pub const TOPIC: &str = "t";

/// The most producers `--symmetry` takes: it tries every permutation, and 4! = 24 copies a state.
pub const MAX_PRODUCERS: usize = 4;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Bounds {
    /// Transactional producers, each with its own transactional id (`tx-p0`, `tx-p1`, ...).
    pub producers: usize,
    /// Transactions each producer's script runs (a crashed instance's open one counts as used).
    pub txns_per_producer: usize,
    /// Records per transaction, one send each; record `r` goes to partition `r % partitions`.
    pub records_per_txn: usize,
    pub partitions: usize,
    /// Brokers (1..=3). Above 1 every partition has a replica on each broker, broker 0 leads them at the
    /// start, a controller elects leaders, and `__transaction_state` stays on broker 0 unreplicated (its
    /// coordinator never moves): the leader changes are the data partitions'. A broker crash is then two
    /// steps, down and up, as `Cluster::crash_broker` and `Cluster::start_broker` have it.
    pub brokers: usize,
    /// The network may drop any message (stateright's lossy network)...
    pub lossy: bool,
    /// ...up to this many in a run (unbounded on a duplicating network, where a drop only ends redelivery).
    pub losses: usize,
    /// The network may deliver any message again (stateright's unordered duplicating network).
    pub duplicating: bool,
    /// Per-connection FIFO (stateright's ordered network) instead of unordered delivery.
    pub ordered: bool,
    /// Crash-restarts in a whole run: the broker (durable state kept) or a producer (a new instance).
    pub crashes: usize,
    pub crash_broker: bool,
    pub crash_producers: bool,
    /// A crashed producer comes back as a new instance with the same transactional id (which fences the
    /// old one). Off, it stays down: only the coordinator's timeout can end its open transaction.
    pub restart_producers: bool,
    pub transaction_version: TransactionVersion,
    pub mutation: Option<Mutation>,
    /// Timeout aborts the coordinator may make in a run (its scan finds an Ongoing transaction expired).
    pub txn_timeouts: usize,
    /// `request.timeout.ms` firings allowed per producer instance (each resends or fails a request).
    pub request_timeouts: usize,
    /// `retry.backoff.ms` firings allowed per producer instance (CONCURRENT_TRANSACTIONS retries).
    pub backoff_retries: usize,
    /// Marker resends the coordinator may make (its retry timer after a lost WriteTxnMarkers).
    pub marker_resends: usize,
    /// `delivery.timeout.ms` as a multiple of `request.timeout.ms` (linger 0): 1 fails a batch when its
    /// first request times out (the delivery timeout, set first, fires first at that instant).
    pub delivery_attempts: u32,
    /// Fetches each reader may send in a run (0: no readers).
    pub polls_per_reader: usize,
    /// Explore only the interleavings `reductions` keeps: a timeout fires only for a request that is
    /// lost, not merely slow; readers poll a partition right after the broker changed it. Off, every
    /// action is explored whenever it is enabled.
    pub reduced: bool,
    /// Partial-order reduction (`reductions::stubborn_set`): a producer with an answer waiting takes its
    /// steps before anyone else's. Needs per-connection FIFO.
    pub por: bool,
    /// Symmetry reduction (`symmetry`): every state is replaced by its class's representative under
    /// permutations of the producers, so states that differ only in which producer is which count once.
    pub symmetry: bool,
    /// Processors of the consume-transform-produce loop (`processor`): each a member of group `g` reading
    /// the producers' topic read_committed and a transactional producer writing `out`. 0: none.
    pub processors: usize,
    /// Transactions each processor begins in a run, over all its instances.
    pub processor_txns: usize,
    /// Requests each processor instance's member may send from its polls (FindCoordinator, JoinGroup,
    /// OffsetFetch, Fetch): a poll that finds nothing new would otherwise repeat without end.
    pub member_polls: usize,
    /// Times in a run the group coordinator's clock passes the members' session timeout (no heartbeat
    /// came: a paused or partitioned member), removing them from the group.
    pub session_expiries: usize,
}

impl Bounds {
    /// The gate's config: one producer, one transaction over two partitions, no faults but timeouts.
    pub fn small() -> Self {
        Bounds {
            producers: 1,
            txns_per_producer: 1,
            records_per_txn: 2,
            partitions: 2,
            brokers: 1,
            lossy: false,
            losses: 1,
            duplicating: false,
            ordered: false,
            crashes: 0,
            crash_broker: true,
            crash_producers: true,
            restart_producers: true,
            transaction_version: TransactionVersion::V1,
            mutation: None,
            txn_timeouts: 1,
            request_timeouts: 0,
            backoff_retries: 1,
            marker_resends: 0,
            delivery_attempts: 1,
            polls_per_reader: 2,
            reduced: false,
            por: false,
            symmetry: false,
            processors: 0,
            processor_txns: 0,
            member_polls: 0,
            session_expiries: 0,
        }
    }

    /// The standard config: 2 producers x 2 transactions x 2 records, 2 partitions, a lossy
    /// network and one crash. Connections are FIFO, as Kafka's TCP connections are, and the reductions
    /// are on: the unordered, unreduced interleavings are the small config's.
    pub fn standard() -> Self {
        Bounds {
            producers: 2,
            txns_per_producer: 2,
            records_per_txn: 2,
            partitions: 2,
            lossy: true,
            duplicating: false,
            ordered: true,
            crashes: 1,
            request_timeouts: 1,
            marker_resends: 1,
            reduced: true,
            por: true,
            symmetry: true,
            ..Bounds::small()
        }
    }

    /// The config of record for exhaustive checks: two producers with a loss and a crash, the standard's
    /// network and recovery timers, one transaction of one record each on one partition, one poll per
    /// reader, no timeout abort. A depth-first check finishes on two cores in minutes (BENCHMARKS.md); with
    /// the client of Kafka 4.x (accumulator, delivery timeouts, backoffs) two records over two partitions
    /// no longer do (`--records 2 --partitions 2` explores that space).
    pub fn medium() -> Self {
        Bounds {
            txns_per_producer: 1,
            records_per_txn: 1,
            partitions: 1,
            polls_per_reader: 1,
            txn_timeouts: 0,
            ..Bounds::standard()
        }
    }

    /// Two replicas of one partition: one producer's transaction of one record (commit or abort), one
    /// broker crash (either broker, down then up), lossless FIFO delivery, one poll per reader. The
    /// cluster's nodes share actor 0, so what they send one another is one FIFO: fewer interleavings than
    /// Kafka's connection per pair of nodes, a subset of its behaviours (unordered, `--ordered=false`,
    /// does not finish in minutes). It
    /// reaches a leader change mid-transaction and a marker written on the old leader, truncated when it
    /// rejoins as a follower, and written again by the coordinator's resend (`Fact`).
    pub fn replicated() -> Self {
        Bounds {
            records_per_txn: 1,
            partitions: 1,
            brokers: 2,
            ordered: true,
            crashes: 1,
            crash_producers: false,
            backoff_retries: 1,
            request_timeouts: 1,
            marker_resends: 1,
            txn_timeouts: 0,
            polls_per_reader: 1,
            reduced: true,
            ..Bounds::small()
        }
    }

    /// The sim's `eos` profile at model size: one producer's transaction of one record is the input, one
    /// processor (a group member and a transactional producer) consumes it read_committed, writes its
    /// output and commits its offset in the same transaction, or aborts (the application's choice) and
    /// runs a second transaction from the group's committed offset. TV2
    /// (where exactly-once is claimed), a lossy FIFO network with one loss, one crash (producer or
    /// processor: the processor restarts as a new member and a new instance that fences the old), one
    /// session expiry (the member, paused, is removed from the group and becomes a zombie). No readers:
    /// the exactly-once invariants read the logs and the group's offsets.
    pub fn eos() -> Self {
        Bounds {
            producers: 1,
            txns_per_producer: 1,
            records_per_txn: 1,
            partitions: 1,
            transaction_version: TransactionVersion::V2,
            crash_broker: false,
            txn_timeouts: 0,
            polls_per_reader: 0,
            symmetry: false,
            processors: 1,
            processor_txns: 2,
            member_polls: 7,
            session_expiries: 1,
            ..Bounds::standard()
        }
    }

    /// The eos config without its loss and its crash (the session expiry stays, so a zombie is fenced):
    /// what the gate and the main job check, in a second.
    pub fn eos_small() -> Self {
        Bounds { lossy: false, crashes: 0, ..Bounds::eos() }
    }

    pub fn by_name(name: &str) -> Option<Self> {
        match name {
            "small" => Some(Bounds::small()),
            "medium" => Some(Bounds::medium()),
            "standard" => Some(Bounds::standard()),
            "replicated" => Some(Bounds::replicated()),
            "eos" => Some(Bounds::eos()),
            _ => None,
        }
    }

    pub fn with_mutation(mut self, m: Mutation) -> Self {
        self.mutation = Some(m);
        self
    }

    pub fn with_version(mut self, v: TransactionVersion) -> Self {
        self.transaction_version = v;
        self
    }

    pub fn partitions(&self) -> Vec<TopicPartition> {
        (0..self.partitions as u32).map(|p| TopicPartition::new(TOPIC, p)).collect()
    }

    /// The cluster's layout: `brokers` brokers, every partition replicated on each, the coordinator's
    /// log on broker 0 alone.
    pub fn topology(&self) -> Topology {
        let brokers = self.brokers as u32;
        Topology { transaction_log_replication_factor: 1, ..Topology::new(brokers, brokers) }
    }

    pub fn replicated_cluster(&self) -> bool {
        self.brokers > 1
    }

    /// The engine config every node of the model shares. Time never advances in the model, so the
    /// durations only matter as the engine's labels; timers fire when the checker chooses.
    pub fn engine_config(&self) -> EngineConfig {
        EngineConfig {
            transaction_version: self.transaction_version,
            // A group's first join completes when the model fires its deadline, with no delay to wait out.
            group_initial_rebalance_delay_ms: if self.processors > 0 {
                0
            } else {
                EngineConfig::default().group_initial_rebalance_delay_ms
            },
            delivery_timeout_ms: self.delivery_attempts as u64 * EngineConfig::default().request_timeout_ms,
            mutations: self.mutation.map(Mutations::one).unwrap_or_default(),
            ..EngineConfig::default()
        }
    }

    /// Liveness is judged at quiescent states; a duplicating network never empties, so it is off there.
    pub fn checks_liveness(&self) -> bool {
        !self.duplicating
    }

    /// Rejects bounds the model cannot represent (u8 counters, at least one of each thing), naming the
    /// flag that sets the bound.
    pub fn validate(&self) -> Result<(), String> {
        let small = |flag: &str, v: usize, max: usize| {
            if v == 0 || v > max {
                Err(format!("{flag} must be 1..={max}, got {v}"))
            } else {
                Ok(())
            }
        };
        small("--producers", self.producers, 9)?;
        small("--txns", self.txns_per_producer, 9)?;
        small("--records", self.records_per_txn, 9)?;
        small("--partitions", self.partitions, 9)?;
        small("--brokers", self.brokers, 3)?;
        let counts = [
            ("--crashes", self.crashes),
            ("--losses", self.losses),
            ("--txn-timeouts", self.txn_timeouts),
            ("--request-timeouts", self.request_timeouts),
            ("--backoff-retries", self.backoff_retries),
            ("--marker-resends", self.marker_resends),
        ];
        if let Some((flag, v)) = counts.iter().find(|(_, v)| *v > 9) {
            return Err(format!("{flag} must be at most 9, got {v}"));
        }
        if self.symmetry && self.producers > MAX_PRODUCERS {
            return Err(format!(
                "symmetry reduction takes at most {} producers ({}! permutations per state); got {}",
                MAX_PRODUCERS, MAX_PRODUCERS, self.producers
            ));
        }
        let eos = [
            ("--processors", self.processors, 2),
            ("--member-polls", self.member_polls, 20),
            ("--processor-txns", self.processor_txns, 9),
            ("--session-expiries", self.session_expiries, 9),
        ];
        if let Some((flag, v, max)) = eos.iter().find(|(_, v, max)| v > max) {
            return Err(format!("{flag} must be at most {max}, got {v}"));
        }
        if self.processors > 0 && (self.symmetry || self.replicated_cluster()) {
            return Err("processors run on one broker, without symmetry reduction (they are not producers)".into());
        }
        if self.por && !self.ordered {
            return Err("the partial-order reduction needs per-connection FIFO (--ordered)".into());
        }
        if self.delivery_attempts == 0 {
            return Err("--delivery-attempts must be at least 1".into());
        }
        Ok(())
    }
}

impl fmt::Display for Bounds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} producer(s) x {} txn(s) x {} record(s), {} partition(s){}, TV{}, network {}{}{}, {} crash(es){}{}, txn timeouts {}, \
             request timeouts {}/producer, backoff retries {}/producer, marker resends {}, delivery attempts {}, \
             {} polls/reader{}, {}{}{}, mutation {}",
            self.producers,
            self.txns_per_producer,
            self.records_per_txn,
            self.partitions,
            if self.brokers > 1 { format!(" on {} brokers", self.brokers) } else { String::new() },
            self.transaction_version.number(),
            if self.lossy { format!("lossy ({} loss(es))", self.losses) } else { "lossless".to_string() },
            if self.duplicating { "+duplicating" } else { "" },
            if self.ordered { " per-connection FIFO" } else { " unordered" },
            self.crashes,
            match (self.crash_broker, self.crash_producers) {
                (true, true) => " (broker or producer)",
                (true, false) => " (broker only)",
                (false, true) => " (producers only)",
                (false, false) => " (no target)",
            },
            if self.restart_producers { "" } else { ", crashed producers stay down" },
            self.txn_timeouts,
            self.request_timeouts,
            self.backoff_retries,
            self.marker_resends,
            self.delivery_attempts,
            self.polls_per_reader,
            if self.processors > 0 {
                format!(
                    ", {} processor(s) x {} txn(s), {} member polls, {} session expiries",
                    self.processors, self.processor_txns, self.member_polls, self.session_expiries
                )
            } else {
                String::new()
            },
            if self.reduced { "reduced interleavings" } else { "every interleaving" },
            if self.por { " + partial-order reduction" } else { "" },
            if self.symmetry { " + symmetry" } else { "" },
            self.mutation.map(|m| m.name()).unwrap_or("none"),
        )
    }
}
