//! The consumer's side of the classic group protocol: Kafka's `AbstractCoordinator` (find the group's
//! coordinator, join, sync, heartbeat, leave) and `ConsumerCoordinator` (the eager revoke before a join,
//! the leader's `RangeAssignor`, the committed offsets an assigned partition starts from, and
//! `groupMetadata()` for `sendOffsetsToTransaction`). Sans-io as the producer is: `poll` and the answers
//! return the requests to send, and time comes in with every call.
//!
//! Kafka's heartbeat thread is the consumer's `poll` here: a member sends a heartbeat from `poll` once
//! `heartbeat.interval.ms` passed since the last (`Heartbeat.timeToNextHeartbeat`). Not modelled: static
//! membership (KIP-345), the cooperative protocol (KIP-429), KIP-848, `max.poll.interval.ms` (the
//! application polls as the driver says) and the client-side session timer.

use super::range_assignor::{self, RANGE_ASSIGNOR_NAME};
use crate::config::EngineConfig;
use crate::error::KafkaError;
use crate::network_client;
use crate::producer::ConsumerGroupMetadata;
use crate::protocol::group::{GroupMessage, JoinRequest, JoinResult, PartitionOffset};
use crate::protocol::metadata::{CoordinatorType, MetadataMessage};
use crate::protocol::{Effects, Envelope, Message, NodeId, Timer};
use crate::types::{Offset, TimeMs, TopicPartition};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// `ConsumerProtocol.PROTOCOL_TYPE`.
pub const PROTOCOL_TYPE: &str = "consumer";

/// `GroupRebalanceConfig`: the member's timeouts, Kafka's consumer defaults unless a driver says otherwise.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GroupRebalanceConfig {
    /// `session.timeout.ms` (45000 since Kafka 3.0, KIP-735).
    pub session_timeout_ms: TimeMs,
    /// `max.poll.interval.ms` (300000), sent as the JoinGroup's rebalance timeout.
    pub rebalance_timeout_ms: TimeMs,
    /// `heartbeat.interval.ms` (3000).
    pub heartbeat_interval_ms: TimeMs,
}

impl Default for GroupRebalanceConfig {
    fn default() -> Self {
        GroupRebalanceConfig { session_timeout_ms: 45_000, rebalance_timeout_ms: 300_000, heartbeat_interval_ms: 3_000 }
    }
}

/// `AbstractCoordinator.MemberState`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum MemberState {
    /// Not in a generation: the next poll joins (`rejoinNeeded`).
    Unjoined,
    /// JoinGroup sent.
    PreparingRebalance,
    /// JoinGroup answered, SyncGroup sent.
    CompletingRebalance,
    /// The assignment arrived.
    Stable,
}

impl MemberState {
    /// Kafka's names, as scenarios write them.
    pub fn name(self) -> &'static str {
        match self {
            MemberState::Unjoined => "UNJOINED",
            MemberState::PreparingRebalance => "PREPARING_REBALANCE",
            MemberState::CompletingRebalance => "COMPLETING_REBALANCE",
            MemberState::Stable => "STABLE",
        }
    }

    pub const ALL: [MemberState; 4] =
        [MemberState::Unjoined, MemberState::PreparingRebalance, MemberState::CompletingRebalance, MemberState::Stable];
}

/// `AbstractCoordinator.Generation`: `NO_GENERATION` is -1 with no member id.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Generation {
    pub generation_id: i32,
    pub member_id: String,
}

impl Generation {
    pub const NO_GENERATION_ID: i32 = -1;

    fn none() -> Self {
        Generation { generation_id: Self::NO_GENERATION_ID, member_id: String::new() }
    }
}

/// A coordinator request awaiting its answer; a join, sync or heartbeat with the generation it was sent
/// in, whose errors count only while the generation is unchanged (`generationUnchanged`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Request {
    FindCoordinator,
    JoinGroup(Generation),
    SyncGroup(Generation),
    Heartbeat(Generation),
    LeaveGroup,
    OffsetFetch,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConsumerCoordinator {
    me: NodeId,
    pub group_id: String,
    config: GroupRebalanceConfig,
    /// The client's `request.timeout.ms` and `retry.backoff.ms`.
    request_timeout_ms: TimeMs,
    retry_backoff_ms: TimeMs,
    /// The subscribed topics with their partition counts, as the member's metadata has them (the leader
    /// assigns from it).
    topics: BTreeMap<String, u32>,
    /// OffsetFetch with `require_stable` (KIP-447): a read_committed consumer waits out pending
    /// transactional offsets instead of starting from the last stable ones.
    require_stable: bool,
    bootstrap: NodeId,
    /// `coordinator`, unknown until FindCoordinator answers and after `markCoordinatorUnknown`.
    coordinator: Option<NodeId>,
    pub state: MemberState,
    pub generation: Generation,
    in_flight: BTreeMap<u64, Request>,
    /// No coordinator request before this: `retry.backoff.ms` after a retriable error.
    backoff_until_ms: TimeMs,
    last_heartbeat_ms: TimeMs,
    /// The partitions of the last SyncGroup, revoked (all of them: the eager protocol) before a rejoin.
    assignment: BTreeSet<TopicPartition>,
    /// Assigned partitions whose committed offset is still to be fetched.
    awaiting_offsets: BTreeSet<TopicPartition>,
    /// A non-retriable error of the group protocol: the application's poll throws it, and it stops.
    pub fatal: Option<KafkaError>,
    /// LeaveGroup was sent (`close()`): nothing more is sent.
    closed: bool,
}

impl ConsumerCoordinator {
    /// A member of `group_id` subscribed to `topics` (with their partition counts), whose client is `me`
    /// with `client`'s timeouts, bootstrapped to `bootstrap`.
    pub fn new(
        (me, client): (NodeId, &EngineConfig),
        group_id: &str,
        topics: BTreeMap<String, u32>,
        config: GroupRebalanceConfig,
        require_stable: bool,
        bootstrap: NodeId,
    ) -> Self {
        ConsumerCoordinator {
            me,
            group_id: group_id.to_string(),
            config,
            request_timeout_ms: client.request_timeout_ms,
            retry_backoff_ms: client.retry_backoff_ms,
            topics,
            require_stable,
            bootstrap,
            coordinator: None,
            state: MemberState::Unjoined,
            generation: Generation::none(),
            in_flight: BTreeMap::new(),
            backoff_until_ms: 0,
            last_heartbeat_ms: 0,
            assignment: BTreeSet::new(),
            awaiting_offsets: BTreeSet::new(),
            fatal: None,
            closed: false,
        }
    }

    /// The partitions this member may fetch: its assignment once Stable, none while it rebalances.
    pub fn assignment(&self) -> &BTreeSet<TopicPartition> {
        &self.assignment
    }

    /// Whether an answer with this correlation id is the coordinator's.
    pub fn owns(&self, correlation_id: u64) -> bool {
        self.in_flight.contains_key(&correlation_id)
    }

    /// `KafkaConsumer.groupMetadata()`: what `sendOffsetsToTransaction` sends for KIP-447's fencing.
    pub fn group_metadata(&self) -> ConsumerGroupMetadata {
        ConsumerGroupMetadata {
            group_id: self.group_id.clone(),
            generation_id: self.generation.generation_id,
            member_id: self.generation.member_id.clone(),
        }
    }

    fn send(&mut self, now_ms: TimeMs, ids: &mut u64, to: NodeId, message: Message, request: Request) -> Effects {
        // A JoinGroup may wait out the whole rebalance: `sendJoinGroupRequest` gives it the rebalance
        // timeout and 5 s more (`JOIN_GROUP_TIMEOUT_LAPSE`), never less than `request.timeout.ms`.
        let timeout = match request {
            Request::JoinGroup(_) => self.request_timeout_ms.max(self.config.rebalance_timeout_ms + 5_000),
            _ => self.request_timeout_ms,
        };
        *ids += 1;
        self.in_flight.insert(*ids, request);
        let mut effects = Effects::default();
        effects.send(&self.me, &to, *ids, message);
        effects.timers.push((now_ms + timeout, Timer::RequestTimeout { correlation_id: *ids }));
        effects
    }

    fn send_group(&mut self, now_ms: TimeMs, ids: &mut u64, message: GroupMessage, request: Request) -> Effects {
        let to = self.coordinator.clone().expect("a group request goes to a known coordinator");
        self.send(now_ms, ids, to, Message::Group(message), request)
    }

    /// `ConsumerCoordinator.poll`: finds the coordinator (`ensureCoordinatorReady`), joins when a rejoin is
    /// needed (`ensureActiveGroup`), fetches the committed offsets of new partitions
    /// (`refreshCommittedOffsetsIfNeeded`), one request at a time; and heartbeats when one is due.
    pub fn poll(&mut self, now_ms: TimeMs, ids: &mut u64) -> Effects {
        let mut effects = Effects::default();
        if self.fatal.is_some() || self.closed {
            return effects;
        }
        let busy = self.in_flight.values().any(|r| !matches!(r, Request::Heartbeat(_)));
        if !busy && now_ms >= self.backoff_until_ms {
            effects.extend(self.next_request(now_ms, ids));
        }
        effects.extend(self.maybe_heartbeat(now_ms, ids));
        effects
    }

    fn next_request(&mut self, now_ms: TimeMs, ids: &mut u64) -> Effects {
        if self.coordinator.is_none() {
            // `AbstractCoordinator.lookupCoordinator`: FindCoordinator(GROUP) to a bootstrap broker.
            let request = MetadataMessage::FindCoordinatorRequest {
                key_type: CoordinatorType::Group,
                keys: vec![self.group_id.clone()],
            };
            return self.send(
                now_ms,
                ids,
                self.bootstrap.clone(),
                Message::Metadata(request),
                Request::FindCoordinator,
            );
        }
        match self.state {
            MemberState::Unjoined => self.join(now_ms, ids),
            MemberState::Stable if !self.awaiting_offsets.is_empty() => {
                // `ConsumerCoordinator.fetchCommittedOffsets`, with `requireStable` as KIP-447 has it.
                let request = GroupMessage::OffsetFetchRequest {
                    group_id: self.group_id.clone(),
                    partitions: Some(self.awaiting_offsets.iter().cloned().collect()),
                    require_stable: self.require_stable,
                };
                self.send_group(now_ms, ids, request, Request::OffsetFetch)
            }
            _ => Effects::default(),
        }
    }

    /// `ConsumerCoordinator.onJoinPrepare` (the eager protocol revokes every partition) and
    /// `AbstractCoordinator.sendJoinGroupRequest` with the range assignor's subscription. The member id is
    /// the generation's (empty for a new member: KIP-394 then answers MEMBER_ID_REQUIRED with one).
    fn join(&mut self, now_ms: TimeMs, ids: &mut u64) -> Effects {
        self.assignment.clear();
        self.awaiting_offsets.clear();
        self.state = MemberState::PreparingRebalance;
        let topics: BTreeSet<String> = self.topics.keys().cloned().collect();
        let join = JoinRequest {
            member_id: self.generation.member_id.clone(),
            require_known_member_id: true,
            protocol_type: PROTOCOL_TYPE.to_string(),
            protocols: vec![(RANGE_ASSIGNOR_NAME.to_string(), range_assignor::encode_subscription(&topics))],
            session_timeout_ms: self.config.session_timeout_ms,
            rebalance_timeout_ms: self.config.rebalance_timeout_ms,
        };
        let request = GroupMessage::JoinGroupRequest { group_id: self.group_id.clone(), join };
        self.send_group(now_ms, ids, request, Request::JoinGroup(self.generation.clone()))
    }

    /// The heartbeat thread's send (`AbstractCoordinator.HeartbeatThread`): only in a generation
    /// (`hasNotJoinedGroup` is false), one at a time, `heartbeat.interval.ms` after the last.
    fn maybe_heartbeat(&mut self, now_ms: TimeMs, ids: &mut u64) -> Effects {
        let in_generation = matches!(self.state, MemberState::CompletingRebalance | MemberState::Stable);
        let due = now_ms >= self.last_heartbeat_ms + self.config.heartbeat_interval_ms;
        if !in_generation
            || !due
            || self.coordinator.is_none()
            || self.in_flight.values().any(|r| matches!(r, Request::Heartbeat(_)))
        {
            return Effects::default();
        }
        self.last_heartbeat_ms = now_ms;
        let request = GroupMessage::HeartbeatRequest {
            group_id: self.group_id.clone(),
            generation_id: self.generation.generation_id,
            member_id: self.generation.member_id.clone(),
        };
        self.send_group(now_ms, ids, request, Request::Heartbeat(self.generation.clone()))
    }

    /// Every assigned partition starts again from the group's committed offset, fetched by the next poll
    /// (`KafkaConsumer.committed` then `seek`, as a processor does after an abort).
    pub fn refetch_committed_offsets(&mut self) {
        if self.state == MemberState::Stable {
            self.awaiting_offsets = self.assignment.clone();
        }
    }

    /// `close()` → `maybeLeaveGroup`: a member in a generation (or joining with an id) sends LeaveGroup,
    /// and forgets its generation (`resetGenerationOnLeaveGroup`).
    pub fn close(&mut self, now_ms: TimeMs, ids: &mut u64) -> Effects {
        let mut effects = Effects::default();
        if self.closed {
            return effects;
        }
        if self.coordinator.is_some() && !self.generation.member_id.is_empty() && self.state != MemberState::Unjoined {
            let request = GroupMessage::LeaveGroupRequest {
                group_id: self.group_id.clone(),
                member_ids: vec![self.generation.member_id.clone()],
            };
            effects = self.send_group(now_ms, ids, request, Request::LeaveGroup);
        }
        self.closed = true;
        self.reset_generation(false);
        effects
    }

    /// `resetStateAndRejoin`: out of the generation; the member id is kept (ILLEGAL_GENERATION: it may still
    /// be valid) or forgotten, and the next join is as a new member.
    fn reset_generation(&mut self, keep_member_id: bool) {
        let member_id = if keep_member_id { std::mem::take(&mut self.generation.member_id) } else { String::new() };
        self.generation = Generation { generation_id: Generation::NO_GENERATION_ID, member_id };
        self.request_rejoin();
    }

    /// `requestRejoin`: the next poll joins again (with the member id it has).
    fn request_rejoin(&mut self) {
        self.state = MemberState::Unjoined;
        self.assignment.clear();
        self.awaiting_offsets.clear();
    }

    /// `markCoordinatorUnknown`: the next poll looks the coordinator up again; a join or sync under way is
    /// abandoned and retried (`AbstractCoordinator.JoinGroupResponseHandler`'s NOT_COORDINATOR).
    fn mark_coordinator_unknown(&mut self, now_ms: TimeMs) {
        self.coordinator = None;
        // Its connection is closed (`client.disconnectAsync`): what was in flight there fails.
        self.in_flight.retain(|_, r| *r == Request::FindCoordinator);
        self.backoff_until_ms = now_ms + self.retry_backoff_ms;
        if matches!(self.state, MemberState::PreparingRebalance | MemberState::CompletingRebalance) {
            self.request_rejoin();
        }
    }

    /// A request that timed out or whose connection failed: `RequestFutureCompletionHandler.onFailure` marks
    /// the coordinator unknown (`coordinatorDead`); a join or sync is retried from the start.
    pub fn on_failure(&mut self, now_ms: TimeMs, correlation_id: u64) {
        if self.in_flight.remove(&correlation_id).is_some() {
            self.mark_coordinator_unknown(now_ms);
        }
    }

    fn back_off(&mut self, now_ms: TimeMs) {
        self.backoff_until_ms = now_ms + self.retry_backoff_ms;
    }

    /// An answer to one of the coordinator's requests: the requests it leads to, and the committed offsets
    /// to start partitions from (an OffsetFetch's answer), which the consumer seeks to.
    pub fn on_message(
        &mut self,
        now_ms: TimeMs,
        ids: &mut u64,
        env: Envelope,
    ) -> (Effects, Vec<(TopicPartition, Offset)>) {
        let mut seeks = Vec::new();
        let Some(request) = self.in_flight.remove(&env.correlation_id) else {
            return (Effects::default(), seeks);
        };
        if network_client::is_refused_request(&env) {
            self.mark_coordinator_unknown(now_ms);
            return (Effects::default(), seeks);
        }
        let effects = match (request, env.message) {
            (
                Request::FindCoordinator,
                Message::Metadata(MetadataMessage::FindCoordinatorResponse { coordinators }),
            ) => {
                let found = coordinators.into_iter().find(|(k, _)| *k == self.group_id).map(|(_, r)| r);
                match found.unwrap_or(Err(KafkaError::CoordinatorNotAvailable)) {
                    Ok(id) => self.coordinator = Some(NodeId::Broker(id)),
                    // `FindCoordinatorResponseHandler.onFailure`: retried after the backoff.
                    Err(_) => self.back_off(now_ms),
                }
                Effects::default()
            }
            (Request::JoinGroup(sent), Message::Group(GroupMessage::JoinGroupResponse { member_id, result })) => {
                self.on_join(now_ms, ids, (sent, member_id), result)
            }
            (Request::SyncGroup(sent), Message::Group(GroupMessage::SyncGroupResponse { result })) => {
                self.on_sync(now_ms, sent, result);
                Effects::default()
            }
            (Request::Heartbeat(sent), Message::Group(GroupMessage::HeartbeatResponse { result })) => {
                self.on_heartbeat(now_ms, sent, result);
                Effects::default()
            }
            (Request::LeaveGroup, Message::Group(GroupMessage::LeaveGroupResponse { .. })) => Effects::default(),
            (Request::OffsetFetch, Message::Group(GroupMessage::OffsetFetchResponse { offsets })) => {
                seeks = self.on_offset_fetch(now_ms, offsets);
                Effects::default()
            }
            (request, message) => unreachable!("{}: {} does not answer {request:?}", self.me, message.api_name()),
        };
        (effects, seeks)
    }

    /// `JoinGroupResponseHandler.handle`; the leader's or a follower's SyncGroup follows a success.
    fn on_join(
        &mut self,
        now_ms: TimeMs,
        ids: &mut u64,
        (sent, member_id): (Generation, String),
        result: Result<JoinResult, KafkaError>,
    ) -> Effects {
        if self.state != MemberState::PreparingRebalance || self.closed {
            return Effects::default(); // Reset meanwhile: the answer is stale.
        }
        match result {
            Ok(join) => {
                self.generation = Generation { generation_id: join.generation_id, member_id: member_id.clone() };
                self.state = MemberState::CompletingRebalance;
                // `onJoinLeader` runs the assignor over the members' subscriptions; `onJoinFollower` sends none.
                let assignments =
                    if join.leader == member_id { self.perform_assignment(&join.members) } else { Vec::new() };
                let request = GroupMessage::SyncGroupRequest {
                    group_id: self.group_id.clone(),
                    generation_id: join.generation_id,
                    member_id,
                    assignments,
                };
                return self.send_group(now_ms, ids, request, Request::SyncGroup(self.generation.clone()));
            }
            // KIP-394: join again at once with the id the coordinator gave.
            Err(KafkaError::MemberIdRequired) => {
                self.generation = Generation { generation_id: Generation::NO_GENERATION_ID, member_id };
                self.request_rejoin();
            }
            // Only while the generation is the one the join was sent in.
            Err(KafkaError::UnknownMemberId) if sent == self.generation => self.reset_generation(false),
            Err(KafkaError::UnknownMemberId) => self.request_rejoin(),
            // `joinGroupIfNeeded` retries these at once, the rest after `retry.backoff.ms`.
            Err(KafkaError::RebalanceInProgress) => self.request_rejoin(),
            Err(KafkaError::NotCoordinator | KafkaError::CoordinatorNotAvailable) => {
                self.mark_coordinator_unknown(now_ms)
            }
            Err(KafkaError::CoordinatorLoadInProgress) => {
                self.request_rejoin();
                self.back_off(now_ms);
            }
            // INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT, GROUP_MAX_SIZE_REACHED, and any other: thrown
            // to the application, which stops.
            Err(e) => {
                self.request_rejoin();
                self.fatal = Some(e);
            }
        }
        Effects::default()
    }

    /// `ConsumerCoordinator.onLeaderElected` with the `RangeAssignor`: every member's share, by member id.
    fn perform_assignment(&self, members: &[(String, Vec<u8>)]) -> Vec<(String, Vec<u8>)> {
        let subscriptions: BTreeMap<String, BTreeSet<String>> =
            members.iter().map(|(id, md)| (id.clone(), range_assignor::decode_subscription(md))).collect();
        let subscribed: BTreeSet<&String> = subscriptions.values().flatten().collect();
        // The leader's metadata covers the topics it knows; Kafka's leader asks for the rest first.
        let partitions: BTreeMap<String, u32> =
            self.topics.iter().filter(|(t, _)| subscribed.contains(t)).map(|(t, n)| (t.clone(), *n)).collect();
        range_assignor::assign(&partitions, &subscriptions)
            .into_iter()
            .map(|(id, tps)| (id, range_assignor::encode_assignment(&tps)))
            .collect()
    }

    /// `SyncGroupResponseHandler.handle`, then `ConsumerCoordinator.onJoinComplete`: the assignment is
    /// taken and its partitions wait for their committed offsets.
    fn on_sync(&mut self, now_ms: TimeMs, sent: Generation, result: Result<(String, Vec<u8>), KafkaError>) {
        if self.state != MemberState::CompletingRebalance || self.closed {
            return;
        }
        match result {
            Ok((_, bytes)) => {
                self.state = MemberState::Stable;
                self.assignment = range_assignor::decode_assignment(&bytes);
                self.awaiting_offsets = self.assignment.clone();
                // `heartbeat.resetTimeouts()`: the next heartbeat is an interval from now.
                self.last_heartbeat_ms = now_ms;
            }
            Err(KafkaError::RebalanceInProgress) => self.request_rejoin(),
            Err(e @ (KafkaError::UnknownMemberId | KafkaError::IllegalGeneration)) if sent == self.generation => {
                self.reset_generation(e == KafkaError::IllegalGeneration)
            }
            Err(KafkaError::UnknownMemberId | KafkaError::IllegalGeneration) => self.request_rejoin(),
            Err(KafkaError::NotCoordinator | KafkaError::CoordinatorNotAvailable) => {
                self.mark_coordinator_unknown(now_ms)
            }
            Err(e) if e.is_retriable() => {
                self.request_rejoin();
                self.back_off(now_ms);
            }
            Err(e) => {
                self.request_rejoin();
                self.fatal = Some(e);
            }
        }
    }

    /// `HeartbeatResponseHandler.handle`: a rebalance is joined, a lost generation reset, a moved
    /// coordinator looked up again (the generation stays).
    fn on_heartbeat(&mut self, now_ms: TimeMs, sent: Generation, result: Result<(), KafkaError>) {
        if self.closed {
            return;
        }
        match result {
            Ok(()) => {}
            Err(KafkaError::RebalanceInProgress) if self.state == MemberState::Stable => self.request_rejoin(),
            Err(KafkaError::RebalanceInProgress) => {}
            Err(e @ (KafkaError::UnknownMemberId | KafkaError::IllegalGeneration)) if sent == self.generation => {
                self.reset_generation(e == KafkaError::IllegalGeneration)
            }
            // A heartbeat of an older generation: the member has moved on (`generationUnchanged`).
            Err(KafkaError::UnknownMemberId | KafkaError::IllegalGeneration) => {}
            Err(KafkaError::NotCoordinator | KafkaError::CoordinatorNotAvailable) => {
                self.mark_coordinator_unknown(now_ms)
            }
            Err(_) => self.back_off(now_ms),
        }
    }

    /// `OffsetFetchResponseHandler.handle`: each partition starts at its committed offset, or, with none,
    /// at the log's start (`auto.offset.reset=earliest`; Kafka's default is `latest`, and a processor sets
    /// earliest so that no input is skipped). A partition with a transaction's offset pending
    /// (UNSTABLE_OFFSET_COMMIT) is asked for again after the backoff.
    fn on_offset_fetch(
        &mut self,
        now_ms: TimeMs,
        offsets: Result<Vec<PartitionOffset>, KafkaError>,
    ) -> Vec<(TopicPartition, Offset)> {
        let offsets = match offsets {
            Ok(offsets) => offsets,
            Err(KafkaError::NotCoordinator | KafkaError::CoordinatorNotAvailable) => {
                self.mark_coordinator_unknown(now_ms);
                return Vec::new();
            }
            Err(_) => {
                self.back_off(now_ms);
                return Vec::new();
            }
        };
        let mut seeks = Vec::new();
        for (tp, result) in offsets {
            if !self.awaiting_offsets.contains(&tp) {
                continue; // Revoked since the request.
            }
            match result {
                Ok(committed) => {
                    self.awaiting_offsets.remove(&tp);
                    let start = committed.map_or(0, |(o, _)| o.max(0) as Offset);
                    seeks.push((tp, start));
                }
                Err(_) => self.back_off(now_ms),
            }
        }
        seeks
    }
}
