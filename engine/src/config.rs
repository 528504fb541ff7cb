//! Cluster-wide configuration shared by every node.

use crate::mutation::Mutations;
use crate::proposal::Proposal;
use crate::record::CompressionType;
use crate::types::{TimeMs, TransactionVersion};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EngineConfig {
    pub transaction_version: TransactionVersion,
    /// KIP-890 part 1 (`transaction.partition.verification.enable`, default true since 3.6).
    pub partition_verification: bool,
    /// With one replica the HW follows the log end; a manual HW models a lagging follower.
    pub manual_high_watermark: bool,
    /// Producer `transaction.timeout.ms` (default 60000).
    pub transaction_timeout_ms: TimeMs,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms` (default 10000).
    pub abort_timed_out_cleanup_interval_ms: TimeMs,
    /// Client `retry.backoff.ms` (default 100).
    pub retry_backoff_ms: TimeMs,
    /// Client `request.timeout.ms` (default 30000).
    pub request_timeout_ms: TimeMs,
    /// Producer `delivery.timeout.ms` (default 120000): a batch fails this long after its creation, however
    /// many times it was retried (`ProducerBatch.hasReachedDeliveryTimeout`; `retries` is unbounded).
    pub delivery_timeout_ms: TimeMs,
    /// Producer `retries` (default `Integer.MAX_VALUE`): how often a batch may be re-enqueued; 0 fails a
    /// non-idempotent producer's batch at its first retriable error.
    pub retries: u32,
    /// Producer `linger.ms`: how long a new batch waits in the accumulator before the sender may drain it.
    /// Kafka 4.x's default is 5 (KIP-1030); 0 here keeps every driver's timeline one step shorter.
    pub linger_ms: TimeMs,
    /// Producer `max.in.flight.requests.per.connection` (default 5; at most 5 with idempotence).
    pub max_in_flight_requests_per_connection: u32,
    /// Producer `compression.type` (default none): the codec of every data batch it sends; left out of
    /// serialized configs when none.
    #[serde(default, skip_serializing_if = "CompressionType::is_none")]
    pub compression_type: CompressionType,
    /// `num.partitions`: partitions of a topic created by a client without a count (wire driver only).
    pub num_partitions: u32,
    /// `group.initial.rebalance.delay.ms` (Kafka's default 3000): a new group waits this long for more
    /// members before its first generation (wire driver only).
    pub group_initial_rebalance_delay_ms: TimeMs,
    /// `group.min.session.timeout.ms` (Kafka's default 6000): a JoinGroup asking for a shorter session is
    /// refused with INVALID_SESSION_TIMEOUT. The sim lowers it to its seconds-long runs.
    #[serde(default = "default_group_min_session_timeout_ms", skip_serializing_if = "is_default_min_session")]
    pub group_min_session_timeout_ms: TimeMs,
    /// `min.insync.replicas` (Kafka's default 1): an acks=all write needs this many replicas in the ISR
    /// (capped by the replication factor, `Partition.effectiveMinIsr`), and the HW stands still below it.
    pub min_insync_replicas: u32,
    /// `transaction.state.log.min.isr` (Kafka's default 2): `__transaction_state`'s `min.insync.replicas`,
    /// so a coordinator's record is durable on two replicas before its transition completes.
    pub transaction_state_log_min_isr: u32,
    /// `replica.lag.time.max.ms` (default 30000): a follower not caught up for this long leaves the ISR.
    pub replica_lag_time_max_ms: TimeMs,
    /// `replica.fetch.wait.max.ms` (default 500): how long a follower's fetch waits at the leader for data.
    pub replica_fetch_wait_max_ms: TimeMs,
    /// `replica.socket.timeout.ms` (default 30000): a follower's fetch unanswered this long is given up.
    pub replica_socket_timeout_ms: TimeMs,
    /// `replica.fetch.backoff.ms` (default 1000): a follower's pause after a failed fetch.
    pub replica_fetch_backoff_ms: TimeMs,
    /// `offsets.topic.replication.factor` (Kafka's default 3): replicas of `__consumer_offsets`, which a
    /// cluster's controller creates on the first group lookup. The cluster drivers cap it by the broker
    /// count; at 1 the groups stay on broker 0 with the topic unreplicated, as on a single broker.
    pub offsets_topic_replication_factor: u32,
    /// `unclean.leader.election.enable` (default false): the controller may elect a replica outside the
    /// ISR when no ISR member is alive, and what only the ISR held is lost.
    pub unclean_leader_election_enable: bool,
    /// `eligible.leader.replicas.version` 1 (KIP-966; on in a cluster Kafka 4.1 or later formats, off at 0):
    /// the controller keeps each partition's eligible leader replicas and last known leader, and elects
    /// from the ISR, then the ELR, then the last known leader.
    pub eligible_leader_replicas: bool,
    /// Historical bugs switched on; empty in every normal run.
    pub mutations: Mutations,
    /// A fix Kafka has not made, switched on to try it; `None` in every run that follows Kafka 4.3.
    pub proposal: Option<Proposal>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            transaction_version: TransactionVersion::V1,
            partition_verification: true,
            manual_high_watermark: false,
            transaction_timeout_ms: 60_000,
            abort_timed_out_cleanup_interval_ms: 10_000,
            retry_backoff_ms: 100,
            request_timeout_ms: 30_000,
            delivery_timeout_ms: 120_000,
            retries: i32::MAX as u32,
            linger_ms: 0,
            max_in_flight_requests_per_connection: 5,
            compression_type: CompressionType::None,
            num_partitions: 1,
            group_initial_rebalance_delay_ms: 3_000,
            group_min_session_timeout_ms: default_group_min_session_timeout_ms(),
            min_insync_replicas: 1,
            transaction_state_log_min_isr: 2,
            replica_lag_time_max_ms: 30_000,
            replica_fetch_wait_max_ms: 500,
            replica_socket_timeout_ms: 30_000,
            replica_fetch_backoff_ms: 1_000,
            offsets_topic_replication_factor: crate::topic::OFFSETS_TOPIC_REPLICATION_FACTOR,
            unclean_leader_election_enable: false,
            eligible_leader_replicas: true,
            mutations: Mutations::none(),
            proposal: None,
        }
    }
}

impl EngineConfig {
    /// The producer's config checks (`KafkaProducer.configureDeliveryTimeout`, `ProducerConfig`): a
    /// `ConfigException` message, as Kafka words it, for a combination Kafka refuses.
    pub fn check_producer_config(&self) -> Result<(), String> {
        if self.delivery_timeout_ms < self.linger_ms.saturating_add(self.request_timeout_ms) {
            return Err(format!(
                "delivery.timeout.ms should be equal to or larger than linger.ms + request.timeout.ms ({} < {} + {})",
                self.delivery_timeout_ms, self.linger_ms, self.request_timeout_ms
            ));
        }
        if !(1..=5).contains(&self.max_in_flight_requests_per_connection) {
            return Err(format!(
                "Must set max.in.flight.requests.per.connection to at most 5 (and at least 1) to use the idempotent producer, not {}",
                self.max_in_flight_requests_per_connection
            ));
        }
        Ok(())
    }

    /// The broker's replication checks (`KafkaConfig.validateValues`), in Kafka's words: a follower's
    /// long-poll must end before its socket times out and well inside the ISR's lag bound.
    pub fn check_broker_config(&self) -> Result<(), String> {
        if self.replica_fetch_wait_max_ms > self.replica_socket_timeout_ms {
            return Err(
                "replica.socket.timeout.ms should always be at least replica.fetch.wait.max.ms to prevent unnecessary socket timeouts".into(),
            );
        }
        if self.replica_fetch_wait_max_ms > self.replica_lag_time_max_ms {
            return Err("replica.fetch.wait.max.ms should always be less than or equal to replica.lag.time.max.ms to prevent frequent changes in ISR".into());
        }
        Ok(())
    }
}

/// `GroupCoordinatorConfig.GROUP_MIN_SESSION_TIMEOUT_MS_DEFAULT`.
fn default_group_min_session_timeout_ms() -> TimeMs {
    6_000
}

fn is_default_min_session(ms: &TimeMs) -> bool {
    *ms == default_group_min_session_timeout_ms()
}
