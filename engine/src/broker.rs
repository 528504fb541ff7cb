//! A broker: leader or follower of its partitions (`ReplicaManager`, `Partition`), and the transaction
//! coordinator while it leads `__transaction_state` (broker 0 on a single broker). A sans-io node: it
//! takes a message and `now`, and returns messages and timers.

use crate::config::EngineConfig;
use crate::coordinator::{Ctx, PartitionLeaders, ReplyTo, TransactionCoordinator, TxnLogValue};
use crate::error::KafkaError;
use crate::group_coordinator::{GroupCoordinator, GroupWrite, OffsetsRecord};
use crate::log::PartitionLog;
use crate::mutation::Mutation;
use crate::producer_state::AppendOrigin;
use crate::proposal::Proposal;
use crate::protocol::group::{CommittedOffset, GroupMessage};
use crate::protocol::metadata::PartitionRegistration;
use crate::protocol::metadata::{CoordinatorType, MetadataMessage, NewTopic};
use crate::protocol::{Effects, Envelope, Message, NodeId, ProduceAck, Timer, TxnMarkerEntry};
use crate::protocol::{CONTROLLER_ID, NO_LEADER};
use crate::record::{BatchProducer, EndTxnMarker, ProduceBatch};
use crate::rename::{Names, Rename};
use crate::replica_manager::{AckWait, DelayedResponse, ReplicaCtx, ReplicaManager};
use crate::topic::COORDINATOR_BROKER;
use crate::topic::{offsets_partition_for, GROUP_METADATA_TOPIC, OFFSETS_TOPIC_NUM_PARTITIONS};
use crate::topic::{transaction_state_partition, TRANSACTION_STATE_TOPIC};
use crate::types::{Offset, ProducerId, ProducerIdAndEpoch, TimeMs, TopicPartition, TransactionVersion};
use std::collections::BTreeMap;

/// A transactional Produce waiting for the coordinator's KIP-890 answer.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct PendingVerification {
    client: NodeId,
    client_correlation_id: u64,
    partition: TopicPartition,
    batch: ProduceBatch,
    /// The `VerificationGuard`: the append is allowed only if this guard is still the partition's current one.
    guard: u64,
    /// When the request went to the coordinator.
    sent_ms: TimeMs,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Broker {
    pub id: NodeId,
    pub config: EngineConfig,
    pub partitions: BTreeMap<TopicPartition, PartitionLog>,
    pub coordinator: TransactionCoordinator,
    /// Consumer groups (the wire driver's clients, and the engine's producers' transactional offsets).
    pub groups: GroupCoordinator,
    /// In a cluster: the `__consumer_offsets` partitions whose groups this broker's coordinator loaded, at
    /// the leader epoch it loaded them (`GroupCoordinatorService.onElection`).
    groups_loaded: BTreeMap<TopicPartition, i32>,
    /// The partitions this broker hosts with followers: their ISR, follower states and purgatories.
    pub replica_manager: ReplicaManager,
    /// Every partition's registration as the controller last told this broker (`KRaftMetadataCache`);
    /// empty on a single broker, which leads every partition it has.
    pub metadata_image: BTreeMap<TopicPartition, PartitionRegistration>,
    /// Where this broker forwards topic creation (KRaft's controller, KIP-590); `None` on a single broker
    /// that keeps its own metadata and creates topics itself.
    pub controller: Option<NodeId>,
    /// CreateTopics requests forwarded to the controller, by correlation id: who asked, under which id.
    forwarded: BTreeMap<u64, (NodeId, u64)>,
    /// Requests this broker sent to a coordinator, by correlation id.
    pending_verifications: BTreeMap<u64, PendingVerification>,
    /// TxnOffsetCommits waiting for a transaction coordinator elsewhere, by correlation id.
    pending_offset_verifications: BTreeMap<u64, PendingOffsetsVerification>,
    next_correlation_id: u64,
    /// On a replicated `__transaction_state`: the leader epoch its coordinator loaded the log at, while
    /// this broker leads it (`TransactionCoordinator.onElection`); `None` while another broker coordinates.
    pub coordinator_loaded_at: Option<i32>,
    /// The leader epoch of `__transaction_state` whose load is scheduled and has not run yet.
    coordinator_loading: Option<i32>,
    /// The leader epoch of `__transaction_state` this broker's replica knows (`None` unreplicated).
    pub transaction_log_epoch: Option<i32>,
}

/// A verification's refusal as the group coordinator answers it: a stale epoch is the zombie's
/// INVALID_PRODUCER_EPOCH.
fn verification_error(e: KafkaError) -> KafkaError {
    match e {
        KafkaError::ProducerFenced => KafkaError::InvalidProducerEpoch,
        e => e,
    }
}

/// A TxnOffsetCommit waiting for the transaction coordinator on another broker to verify the group's
/// offsets partition is in the transaction (`GroupCoordinator` through `AddPartitionsToTxnManager`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct PendingOffsetsVerification {
    client: NodeId,
    client_correlation_id: u64,
    asked: TxnOffsetCommit,
    offsets: Vec<(TopicPartition, CommittedOffset)>,
    /// The answers already known: partitions of unknown topics.
    unknown: Vec<(TopicPartition, Result<(), KafkaError>)>,
}

/// A TxnOffsetCommit's header: who commits, for which group, as which member.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct TxnOffsetCommit {
    transactional_id: String,
    group_id: String,
    producer: ProducerIdAndEpoch,
    generation_id: i32,
    member_id: String,
    transaction_version: TransactionVersion,
}

/// The broker whose coordinator stands for the cluster's: the one that loaded `__transaction_state` at
/// the newest leader epoch any broker knows (a crashed one until another is elected). `None` while the
/// newest leader has not loaded yet (or died before it did), and on a single broker, whose coordinator
/// is the only one.
pub fn standing_coordinator<'a, I>(brokers: I) -> Option<&'a Broker>
where
    I: IntoIterator<Item = &'a Broker>,
    I::IntoIter: Clone,
{
    let brokers = brokers.into_iter();
    let newest = brokers.clone().filter_map(|b| b.transaction_log_epoch).max()?;
    brokers.into_iter().find(|b| b.coordinator_loaded_at == Some(newest))
}

/// Partition leaders as this broker's metadata cache has them; on a single broker, itself for every
/// partition it has.
struct CachedLeaders<'a> {
    id: &'a NodeId,
    partitions: &'a BTreeMap<TopicPartition, PartitionLog>,
    image: &'a BTreeMap<TopicPartition, PartitionRegistration>,
}

impl PartitionLeaders for CachedLeaders<'_> {
    fn leader_of(&self, tp: &TopicPartition) -> Option<NodeId> {
        match self.image.get(tp) {
            Some(r) if r.state.leader == NO_LEADER => None,
            Some(r) => Some(NodeId::Broker(r.state.leader)),
            None => self.partitions.contains_key(tp).then(|| self.id.clone()),
        }
    }
}

impl Rename for Broker {
    fn rename(&mut self, names: Names<'_>) {
        self.partitions.rename(names);
        self.coordinator.rename(names);
        self.replica_manager.rename(names);
        for (client, _) in self.forwarded.values_mut() {
            client.rename(names);
        }
        for pending in self.pending_verifications.values_mut() {
            pending.client.rename(names);
            pending.batch.rename(names);
        }
        for pending in self.pending_offset_verifications.values_mut() {
            pending.client.rename(names);
            names(&mut pending.asked.transactional_id);
        }
    }
}

impl Broker {
    pub fn new(id: u32, topics: &BTreeMap<String, u32>, config: EngineConfig) -> Self {
        let partitions = topics
            .iter()
            .flat_map(|(t, n)| (0..*n).map(move |p| (TopicPartition::new(t, p), PartitionLog::new())))
            .collect();
        Broker {
            id: NodeId::Broker(id),
            config,
            partitions,
            coordinator: TransactionCoordinator::for_broker(id),
            groups: GroupCoordinator::default(),
            groups_loaded: BTreeMap::new(),
            replica_manager: ReplicaManager::default(),
            metadata_image: BTreeMap::new(),
            controller: None,
            forwarded: BTreeMap::new(),
            pending_verifications: BTreeMap::new(),
            pending_offset_verifications: BTreeMap::new(),
            next_correlation_id: 0,
            coordinator_loaded_at: None,
            coordinator_loading: None,
            transaction_log_epoch: None,
        }
    }

    /// A broker of a replicated cluster: it hosts the partitions whose replicas include it, as the
    /// controller registered them.
    pub fn with_registrations(
        id: u32,
        registrations: &BTreeMap<TopicPartition, PartitionRegistration>,
        config: EngineConfig,
    ) -> Self {
        if let Err(e) = config.check_broker_config() {
            panic!("broker {id}: {e}");
        }
        let mut broker = Broker::new(id, &BTreeMap::new(), config);
        broker.partitions = registrations
            .iter()
            .filter(|(_, reg)| reg.replicas.contains(&id))
            .map(|(tp, _)| (tp.clone(), PartitionLog::new()))
            .collect();
        broker.replica_manager = ReplicaManager::new(id, registrations, 0);
        broker.metadata_image = registrations.clone();
        broker.controller = Some(NodeId::Broker(CONTROLLER_ID));
        broker
    }

    /// The coordinator's periodic timeout scan starts with the broker, and so do its replica fetchers.
    pub fn on_start(&mut self, now_ms: TimeMs) -> Effects {
        let mut effects = Effects::default();
        effects
            .timers
            .push((now_ms + self.config.abort_timed_out_cleanup_interval_ms, Timer::AbortTimedOutTransactions));
        self.replicate(now_ms, &mut effects, |rm, ctx| rm.start(ctx));
        self.take_coordinator_role(now_ms, &mut effects);
        effects
    }

    /// A new cluster's first coordinator: its log is empty, so it loads at once.
    pub fn start_loaded(&mut self, now_ms: TimeMs) -> Effects {
        let mut effects = self.on_start(now_ms);
        if let Some(epoch) = self.coordinator_loading {
            self.load_transaction_log(now_ms, epoch, &mut effects);
        }
        effects
    }

    /// Whether `__transaction_state` is replicated here, so the coordinator follows its leadership.
    fn has_transaction_log(&self) -> bool {
        self.replica_manager.is_replicated(&transaction_state_partition())
    }

    /// `TransactionCoordinator.onElection` / `onResignation`: a broker that now leads `__transaction_state`
    /// at a new epoch schedules its load (`Timer::LoadTransactionLog`); one that stopped leading it unloads.
    fn take_coordinator_role(&mut self, now_ms: TimeMs, effects: &mut Effects) {
        let NodeId::Broker(me) = self.id else { unreachable!("a broker's id is a broker id") };
        let tp = transaction_state_partition();
        let Some(p) = self.replica_manager.partitions.get(&tp) else { return };
        self.transaction_log_epoch = Some(p.leader_epoch);
        let leading = (p.leader == me).then_some(p.leader_epoch);
        if leading.is_some() && leading == self.coordinator_loaded_at.or(self.coordinator_loading) {
            return;
        }
        if self.coordinator_loaded_at.take().is_some() {
            self.coordinate(now_ms, effects, |c, ctx| c.unload(ctx));
        }
        self.coordinator_loading = leading;
        if let Some(leader_epoch) = leading {
            effects.timers.push((now_ms, Timer::LoadTransactionLog { leader_epoch }));
        }
    }

    /// The scheduled load runs, unless leadership moved on since (`loadingPartitions` no longer holds it).
    /// Kafka loads to the log end (`FetchIsolation.LOG_END`); under `Proposal::LoadWaitsForHw` a load that
    /// finds HW < LEO is put off by `retry.backoff.ms` instead.
    fn load_transaction_log(&mut self, now_ms: TimeMs, epoch: i32, effects: &mut Effects) {
        if self.coordinator_loading != Some(epoch) {
            return;
        }
        let log = &self.partitions[&transaction_state_partition()];
        if self.config.proposal == Some(Proposal::LoadWaitsForHw) && log.high_watermark() < log.log_end_offset() {
            // The proposal: still loading (COORDINATOR_LOAD_IN_PROGRESS) until the followers have it all.
            effects
                .timers
                .push((now_ms + self.config.retry_backoff_ms, Timer::LoadTransactionLog { leader_epoch: epoch }));
            return;
        }
        self.coordinator_loading = None;
        self.coordinator_loaded_at = Some(epoch);
        let records: Vec<(i32, String)> = log
            .batches()
            .flat_map(|b| b.records().iter().map(move |r| (b.partition_leader_epoch, r.value.clone())))
            .collect();
        let records = records.iter().map(|(e, v)| (*e, v.as_str()));
        self.coordinate(now_ms, effects, |c, ctx| c.load_from_log(epoch, records, ctx));
    }

    /// Where transactional ids are coordinated now, as this broker's metadata cache has it.
    fn transaction_coordinator(&self) -> Option<NodeId> {
        match self.metadata_image.get(&transaction_state_partition()) {
            Some(r) if r.state.leader == NO_LEADER => None,
            Some(r) => Some(NodeId::Broker(r.state.leader)),
            None => Some(NodeId::Broker(COORDINATOR_BROKER)),
        }
    }

    /// `appendTransactionToLog` on a replicated `__transaction_state`: the pending transition's record is
    /// appended as the leader (acks=all, `transaction.state.log.min.isr`) and the transition completes when
    /// the HW passes it, or fails with the append's error.
    fn append_txn_log(&mut self, now_ms: TimeMs, tid: &str, corr: u64, effects: &mut Effects) {
        let Some((value, timeout_ms)) = self.coordinator.txn_log_record(tid, corr) else { return };
        match self.write_transaction_log(now_ms, vec![value], effects) {
            Ok(info) => {
                let response = DelayedResponse::TxnLog { transactional_id: tid.to_string() };
                let (tp, me) = (transaction_state_partition(), self.id.clone());
                self.await_hw(now_ms, tp, info.last_offset + 1, (me, corr), response, timeout_ms, effects);
            }
            Err(e) => self.coordinate(now_ms, effects, |c, ctx| c.on_txn_log_append_failed(tid, corr, e, ctx)),
        }
    }

    /// Appends `values` to `__transaction_state` as its leader (`min.insync.replicas` checked), origin
    /// coordinator.
    fn write_transaction_log(
        &mut self,
        now_ms: TimeMs,
        values: Vec<String>,
        effects: &mut Effects,
    ) -> Result<crate::log::LogAppendInfo, KafkaError> {
        let tp = transaction_state_partition();
        self.replicate(now_ms, effects, |rm, ctx| rm.check_append(&tp, ctx))?;
        let batch = ProduceBatch { producer: None, is_transactional: false, values };
        let log = self.partitions.get_mut(&tp).expect("a replicated partition has a log");
        let info = log.append_data(&batch, AppendOrigin::Coordinator, now_ms, &self.config.mutations)?;
        self.after_leader_append(now_ms, &tp, effects);
        Ok(info)
    }

    /// Runs a replication step with this broker's logs, config and outbox.
    fn replicate<R>(
        &mut self,
        now_ms: TimeMs,
        effects: &mut Effects,
        step: impl FnOnce(&mut ReplicaManager, &mut ReplicaCtx<'_>) -> R,
    ) -> R {
        let NodeId::Broker(me) = self.id else { unreachable!("a broker's id is a broker id") };
        let mut ctx = ReplicaCtx { me, now_ms, config: &self.config, logs: &mut self.partitions, effects };
        step(&mut self.replica_manager, &mut ctx)
    }

    /// When replication next has something to do on its own (a delayed operation expires, the ISR
    /// expiration task runs): drivers call `tick_replication` then.
    pub fn next_replication_deadline_ms(&self) -> Option<TimeMs> {
        self.replica_manager.next_deadline_ms()
    }

    pub fn tick_replication(&mut self, now_ms: TimeMs) -> Effects {
        let mut effects = Effects::default();
        self.replicate(now_ms, &mut effects, |rm, ctx| rm.tick(ctx));
        effects
    }

    /// Runs a coordinator handler with this broker as its context (time, config, leaders, outbox).
    fn coordinate<R>(
        &mut self,
        now_ms: TimeMs,
        effects: &mut Effects,
        handler: impl FnOnce(&mut TransactionCoordinator, &mut Ctx<'_>) -> R,
    ) -> R {
        let leaders = CachedLeaders { id: &self.id, partitions: &self.partitions, image: &self.metadata_image };
        let mut ctx = Ctx { now_ms, config: &self.config, me: &self.id, leaders: &leaders, effects };
        // The transactional-id expiration runs due by now come first (counted, not timed).
        self.coordinator.remove_expired_transactional_ids(&mut ctx);
        let result = handler(&mut self.coordinator, &mut ctx);
        let tombstones = std::mem::take(&mut self.coordinator.tombstones);
        if !tombstones.is_empty() && self.coordinator_loaded_at.is_some() && self.has_transaction_log() {
            // Written without waiting for the HW: nothing waits on a tombstone, and one lost with an
            // unreplicated tail only leaves an id Kafka would expire again.
            let values = tombstones
                .into_iter()
                .map(|transactional_id| TxnLogValue::Tombstone { transactional_id }.encode())
                .collect();
            let _ = self.write_transaction_log(now_ms, values, effects);
        }
        result
    }

    /// Nothing in progress on this broker but KIP-890 verifications (`newest_verification_ms`): its
    /// coordinator is settled (`TransactionCoordinator::is_settled`) and not loading, no forwarded request
    /// waits for the controller, no ISR change is pending, and every partition it leads has LSO = HW = LEO.
    /// What remains is periodic: fetch long-polls and the coordinator's scans.
    pub fn is_settled(&self) -> bool {
        let NodeId::Broker(me) = self.id else { unreachable!("a broker's id is a broker id") };
        let leads = |tp: &TopicPartition| self.replica_manager.partitions.get(tp).is_none_or(|p| p.leader == me);
        self.coordinator.is_settled()
            && self.coordinator_loading.is_none()
            && self.forwarded.is_empty()
            && self.replica_manager.partitions.values().all(|p| p.pending_isr.is_none())
            && self.partitions.iter().filter(|(tp, _)| leads(tp)).all(|(_, log)| {
                let hw = log.high_watermark();
                hw == log.log_end_offset() && log.last_stable_offset(&self.config.mutations) == hw
            })
    }

    /// When the newest verification still waiting for the coordinator's answer was sent. One whose answer
    /// the network lost waits here for good (Kafka's `AddPartitionsToTxnManager` would time it out after
    /// `request.timeout.ms`; not modelled), so a driver that knows its network tells dead from in flight.
    pub fn newest_verification_ms(&self) -> Option<TimeMs> {
        self.pending_verifications.values().map(|p| p.sent_ms).max()
    }

    pub fn partition(&self, tp: &TopicPartition) -> Option<&PartitionLog> {
        self.partitions.get(tp)
    }

    /// `MetadataCache.contains`: the partition exists in the cluster, whether or not this broker hosts a
    /// replica of it (the coordinators' requests name partitions led elsewhere).
    pub fn knows_partition(&self, tp: &TopicPartition) -> bool {
        let cache = !self.config.mutations.has(Mutation::HostedPartitionsOnly);
        self.partitions.contains_key(tp) || cache && self.metadata_image.contains_key(tp)
    }

    /// Whether the metadata cache has any partition of `topic`.
    fn knows_topic(&self, topic: &str) -> bool {
        self.metadata_image.keys().any(|tp| tp.topic == topic)
    }

    /// `ReplicaManager.getPartitionOrError` for a partition this broker hosts no replica of:
    /// NOT_LEADER_OR_FOLLOWER if it exists (the client's metadata is stale), else UNKNOWN_TOPIC_OR_PARTITION.
    fn not_hosted(&self, tp: &TopicPartition) -> KafkaError {
        if self.knows_partition(tp) {
            KafkaError::NotLeaderOrFollower
        } else {
            KafkaError::UnknownTopicOrPartition
        }
    }

    pub fn partition_mut(&mut self, tp: &TopicPartition) -> Option<&mut PartitionLog> {
        self.partitions.get_mut(tp)
    }

    pub fn on_timer(&mut self, now_ms: TimeMs, timer: Timer) -> Effects {
        let mut effects = Effects::default();
        match timer {
            Timer::AbortTimedOutTransactions => {
                self.coordinate(now_ms, &mut effects, |c, ctx| c.abort_timed_out_transactions(ctx));
                effects
                    .timers
                    .push((now_ms + self.config.abort_timed_out_cleanup_interval_ms, Timer::AbortTimedOutTransactions));
            }
            Timer::LoadTransactionLog { leader_epoch } => self.load_transaction_log(now_ms, leader_epoch, &mut effects),
            Timer::ResendTxnMarkers { decision } => {
                self.coordinate(now_ms, &mut effects, |c, ctx| c.on_resend_markers(decision, ctx));
            }
            Timer::RetryBackoff { .. }
            | Timer::RequestTimeout { .. }
            | Timer::DeliveryTimeout { .. }
            | Timer::Linger { .. } => {
                unreachable!("brokers set no client timers")
            }
        }
        effects
    }

    /// Ends the group join phases and member sessions that are due (`GroupCoordinator::next_deadline_ms`).
    pub fn tick_groups(&mut self, now_ms: TimeMs) -> Effects {
        let mut effects = Effects::default();
        self.groups.tick(now_ms, &self.id, &mut effects);
        self.write_groups(now_ms, &mut effects);
        effects
    }

    /// Whether this broker's group coordinator owns `group_id` (`GroupCoordinatorService`): on a single
    /// broker every group is its own; in a cluster, a group whose `__consumer_offsets` partition it leads
    /// and has loaded.
    fn owns_group(&self, group_id: &str) -> bool {
        if self.groups_replicated() {
            self.groups_loaded.contains_key(&offsets_partition_for(group_id))
        } else {
            self.id == NodeId::Broker(COORDINATOR_BROKER)
        }
    }

    /// Whether groups live in a replicated `__consumer_offsets` that the controller creates and their
    /// coordinators follow its leadership; else broker 0 keeps them in a topic of its own.
    fn groups_replicated(&self) -> bool {
        self.controller.is_some() && self.config.offsets_topic_replication_factor > 1
    }

    /// `GroupCoordinatorService.onElection` / `onResignation` for the `__consumer_offsets` partitions among
    /// `tps`: one this broker now leads at a new epoch is loaded, one it stopped leading unloaded.
    fn take_group_roles<'a>(
        &mut self,
        now_ms: TimeMs,
        tps: impl IntoIterator<Item = &'a TopicPartition>,
        effects: &mut Effects,
    ) {
        let NodeId::Broker(me) = self.id else { unreachable!("a broker's id is a broker id") };
        for tp in tps.into_iter().filter(|tp| tp.topic == GROUP_METADATA_TOPIC) {
            let leading = self.replica_manager.partitions.get(tp).filter(|p| p.leader == me).map(|p| p.leader_epoch);
            if leading.is_some() && self.groups_loaded.get(tp) == leading.as_ref() {
                continue;
            }
            if self.groups_loaded.remove(tp).is_some() {
                self.groups.unload(tp, &self.id, effects);
            }
            if let Some(epoch) = leading {
                self.groups.load(tp, &self.partitions[tp], now_ms);
                self.groups_loaded.insert(tp.clone(), epoch);
            }
        }
    }

    /// Appends what the group coordinator wants written (`GroupWrite`) to each group's `__consumer_offsets`
    /// partition. An offset commit's answer, already in `effects`, waits until its records are replicated
    /// (acks=all, `DelayedProduce`) or fails with the write's error.
    fn write_groups(&mut self, now_ms: TimeMs, effects: &mut Effects) {
        let writes = self.groups.take_writes();
        if self.config.mutations.has(Mutation::GroupsKeptInMemory) {
            // The bug: nothing is written, every answer goes at once.
            for w in writes {
                self.groups.replay_offset_commits(&w.records, None);
                if let Some(generation) = w.stored {
                    self.group_stored(now_ms, w.group_id, generation, Ok(()), effects);
                }
            }
            return;
        }
        for GroupWrite { group_id, records, answer, stored } in writes {
            let tp = self.offsets_partition(&group_id);
            let batch = ProduceBatch {
                producer: None,
                is_transactional: false,
                values: records.iter().map(OffsetsRecord::to_value).collect(),
            };
            let appended = self.replicate(now_ms, effects, |rm, ctx| rm.check_append(&tp, ctx)).and_then(|()| {
                let log = self.partitions.get_mut(&tp).expect("the coordinator's partition is hosted");
                log.append_data(&batch, AppendOrigin::Coordinator, now_ms, &self.config.mutations)
            });
            if let Ok(info) = &appended {
                self.groups.replay_offset_commits(&records, Some(info.first_offset));
                self.after_leader_append(now_ms, &tp, effects);
                self.groups.settle(&tp, self.partitions[&tp].high_watermark());
            }
            if let Some(generation) = stored {
                self.store_group(now_ms, &tp, group_id.clone(), generation, appended, effects);
            }
            let Some((client, corr)) = answer else { continue };
            let at = effects.sends.iter().position(|e| e.to == client && e.correlation_id == corr);
            let env = effects.sends.remove(at.expect("the coordinator answered the commit"));
            let Message::Group(answer) = env.message else { unreachable!("a group answer") };
            match appended {
                Err(e) => effects.send(&self.id, &client, corr, Message::Group(answer.failed_write(e))),
                Ok(info) if self.replica_manager.is_replicated(&tp) => {
                    let (response, timeout) = (DelayedResponse::Group { answer }, self.config.request_timeout_ms);
                    self.await_hw(now_ms, tp, info.last_offset + 1, (client, corr), response, timeout, effects);
                }
                Ok(_) => effects.send(&self.id, &client, corr, Message::Group(answer)),
            }
        }
    }

    /// OffsetFetch as the coordinator runtime serves it (`GroupCoordinatorService.fetchOffsets`): a read
    /// operation at the last committed offset, the HW of the group's partition; with `require_stable` a
    /// write operation, which reads every record and is answered once the HW reaches the log end it read.
    fn handle_offset_fetch(
        &mut self,
        now_ms: TimeMs,
        (group_id, partitions, require_stable): (String, Option<Vec<TopicPartition>>, bool),
        (client, corr): (NodeId, u64),
        effects: &mut Effects,
    ) {
        let tp = self.offsets_partition(&group_id);
        let latest = self.config.mutations.has(Mutation::OffsetFetchReadsLatest);
        // The partition's HW and log end. It is missing only under `any-broker-coordinates`, and then the
        // latest state is all there is.
        let ends = self.partitions.get(&tp).filter(|_| !latest).map(|l| (l.high_watermark(), l.log_end_offset()));
        if let Some((hw, _)) = ends {
            self.groups.settle(&tp, hw);
        }
        let at = ends.filter(|_| !require_stable).map(|(hw, _)| hw);
        let offsets = self.groups.fetch_offsets(&group_id, partitions, require_stable, at);
        let answer = GroupMessage::OffsetFetchResponse { offsets: Ok(offsets) };
        let waits_for = ends.filter(|(hw, log_end)| require_stable && hw < log_end).map(|(_, log_end)| log_end);
        if let Some(log_end) = waits_for.filter(|_| self.replica_manager.is_replicated(&tp)) {
            let (response, timeout) = (DelayedResponse::Group { answer }, self.config.request_timeout_ms);
            self.await_hw(now_ms, tp, log_end, (client, corr), response, timeout, effects);
        } else {
            effects.send(&self.id, &client, corr, Message::Group(answer));
        }
    }

    /// A SyncGroup's metadata record: on a replicated partition its outcome comes back to this broker's
    /// group coordinator once the HW passes it (`GroupMessage::GroupStored`); else at once.
    fn store_group(
        &mut self,
        now_ms: TimeMs,
        tp: &TopicPartition,
        group_id: String,
        generation: i32,
        appended: Result<crate::log::LogAppendInfo, KafkaError>,
        effects: &mut Effects,
    ) {
        match appended {
            Ok(info) if self.replica_manager.is_replicated(tp) => {
                let response = DelayedResponse::GroupStored { group_id, generation };
                let (me, timeout) = (self.id.clone(), self.config.request_timeout_ms);
                self.next_correlation_id += 1;
                let to = (me, self.next_correlation_id);
                self.await_hw(now_ms, tp.clone(), info.last_offset + 1, to, response, timeout, effects);
            }
            appended => self.group_stored(now_ms, group_id, generation, appended.map(|_| ()), effects),
        }
    }

    /// Hands a SyncGroup metadata record's outcome to this broker's group coordinator.
    fn group_stored(
        &mut self,
        now_ms: TimeMs,
        group_id: String,
        generation: i32,
        result: Result<(), KafkaError>,
        effects: &mut Effects,
    ) {
        let stored = GroupMessage::GroupStored { group_id, generation, result };
        self.groups.handle(now_ms, &self.config, &self.id, (self.id.clone(), 0), stored, effects);
    }

    /// A crash and restart: logs, producer state (rebuilt from the log in Kafka; identical here) and the
    /// coordinator's `__transaction_state` survive; requests in flight and verification guards do not.
    /// The coordinator reloads under a new epoch and resends the markers of decided transactions.
    pub fn restart(&mut self, now_ms: TimeMs) -> Effects {
        self.pending_verifications.clear();
        self.pending_offset_verifications.clear();
        if self.groups_replicated() {
            // The groups live in `__consumer_offsets`: they are loaded again where this broker leads.
            self.groups = GroupCoordinator::default();
            self.groups_loaded.clear();
        }
        for log in self.partitions.values_mut() {
            log.producer_state.verification_entries.clear();
        }
        if self.has_transaction_log() {
            // The cache died with the process (nobody is answered); leading the log again reloads it.
            self.coordinate(now_ms, &mut Effects::default(), |c, ctx| c.unload(ctx));
            self.coordinator_loaded_at = None;
            self.coordinator_loading = None;
            return self.on_start(now_ms);
        }
        let mut effects = self.on_start(now_ms);
        self.coordinate(now_ms, &mut effects, |c, ctx| c.on_load(ctx));
        effects
    }

    /// The restart of a replicated broker, which loads the controller's current `image`: its replica
    /// states and purgatories are gone, and each partition it hosts takes the role the image gives it.
    pub fn restart_with_image(
        &mut self,
        now_ms: TimeMs,
        image: &BTreeMap<TopicPartition, PartitionRegistration>,
    ) -> Effects {
        let NodeId::Broker(me) = self.id else { unreachable!("a broker's id is a broker id") };
        self.replica_manager.restart(me, image, now_ms, &self.config.mutations);
        self.metadata_image = image.clone();
        let mut effects = self.restart(now_ms);
        self.take_group_roles(now_ms, image.keys(), &mut effects);
        effects
    }

    /// Times out one transactional id now, as the periodic scan would once its timeout passed.
    pub fn expire_transaction(&mut self, transactional_id: &str, now_ms: TimeMs) -> (bool, Effects) {
        let mut effects = Effects::default();
        let expired =
            self.coordinate(now_ms, &mut effects, |c, ctx| c.abort_timed_out_transaction(transactional_id, ctx));
        (expired, effects)
    }

    /// Delivers at once every `__transaction_state` append in `effects` (the `TxnLogAppend`s this broker
    /// sent itself, and on a replicated log their outcomes) and those they lead to. For drivers whose
    /// network loses and reorders messages (the model, the sim): a local call is never lost, so they do not
    /// put it on that network.
    pub fn write_txn_log_now(&mut self, now_ms: TimeMs, mut effects: Effects) -> Effects {
        loop {
            let (appends, sends): (Vec<Envelope>, Vec<Envelope>) = effects.sends.into_iter().partition(|e| {
                matches!(e.message, Message::TxnLogAppendRequest { .. } | Message::TxnLogAppendResponse { .. })
            });
            effects.sends = sends;
            if appends.is_empty() {
                return effects;
            }
            for env in appends {
                effects.extend(self.on_message(now_ms, env));
            }
        }
    }

    pub fn on_message(&mut self, now_ms: TimeMs, env: Envelope) -> Effects {
        let mut effects = Effects::default();
        let reply_to = env.from.clone();
        let corr = env.correlation_id;
        if let Some(refusal) = self.refuse_if_not_coordinator(&env.message) {
            effects.send(&self.id, &reply_to, corr, refusal);
            return effects;
        }
        let reply = match env.message {
            Message::InitProducerIdRequest { transactional_id, transaction_timeout_ms, producer_id_and_epoch } => self
                .coordinate(now_ms, &mut effects, |c, ctx| {
                    let to = ReplyTo { to: reply_to.clone(), correlation_id: corr };
                    c.handle_init_producer_id(
                        transactional_id.as_deref(),
                        transaction_timeout_ms,
                        producer_id_and_epoch,
                        to,
                        ctx,
                    )
                })
                .map(|result| Message::InitProducerIdResponse { result }),
            Message::AddPartitionsToTxnRequest {
                transactional_id,
                producer,
                partitions,
                verify_only,
                transaction_version,
            } => {
                // `KafkaApis.handleAddPartitionsToTxnRequest`: partitions unknown to the metadata cache.
                let result = if partitions.iter().all(|tp| self.knows_partition(tp)) {
                    self.coordinate(now_ms, &mut effects, |c, ctx| {
                        let to = ReplyTo { to: reply_to.clone(), correlation_id: corr };
                        c.handle_add_partitions(
                            &transactional_id,
                            producer,
                            &partitions,
                            verify_only,
                            transaction_version,
                            to,
                            ctx,
                        )
                    })
                } else {
                    Some(Err(KafkaError::UnknownTopicOrPartition))
                };
                result.map(|result| Message::AddPartitionsToTxnResponse { result })
            }
            Message::AddOffsetsToTxnRequest { transactional_id, producer, group_id } => {
                let offsets_partition = self.offsets_partition(&group_id);
                self.coordinate(now_ms, &mut effects, |c, ctx| {
                    let to = ReplyTo { to: reply_to.clone(), correlation_id: corr };
                    c.handle_add_offsets(&transactional_id, producer, &offsets_partition, to, ctx)
                })
                .map(|result| Message::AddOffsetsToTxnResponse { result })
            }
            Message::EndTxnRequest { transactional_id, producer, result, transaction_version } => self
                .coordinate(now_ms, &mut effects, |c, ctx| {
                    let to = ReplyTo { to: reply_to.clone(), correlation_id: corr };
                    c.handle_end_txn(&transactional_id, producer, result, transaction_version, to, ctx)
                })
                .map(|result| Message::EndTxnResponse { result }),
            Message::TxnLogAppendRequest { transactional_id } if self.has_transaction_log() => {
                self.append_txn_log(now_ms, &transactional_id, corr, &mut effects);
                None
            }
            Message::TxnLogAppendRequest { transactional_id } => {
                self.coordinate(now_ms, &mut effects, |c, ctx| c.on_txn_log_append(&transactional_id, corr, ctx));
                None
            }
            Message::TxnLogAppendResponse { transactional_id, result } => {
                self.coordinate(now_ms, &mut effects, |c, ctx| match result {
                    Ok(()) => c.on_txn_log_append(&transactional_id, corr, ctx),
                    Err(e) => c.on_txn_log_append_failed(&transactional_id, corr, e, ctx),
                });
                None
            }
            Message::ProduceRequest { transactional_id, partition, batch, transaction_version } => self
                .handle_produce(
                    now_ms,
                    reply_to.clone(),
                    corr,
                    transactional_id,
                    partition,
                    batch,
                    transaction_version,
                    &mut effects,
                )
                .map(|(partition, result)| Message::ProduceResponse { partition, result }),
            Message::WriteTxnMarkersRequest { markers } => {
                let (results, waits) = self.handle_write_txn_markers(now_ms, &markers, &mut effects);
                if waits.is_empty() {
                    Some(Message::WriteTxnMarkersResponse { results })
                } else {
                    let response = DelayedResponse::Markers { results };
                    let to = reply_to.clone();
                    let timeout = self.config.request_timeout_ms;
                    self.replicate(now_ms, &mut effects, |rm, ctx| {
                        rm.await_acks(to, corr, waits, response, timeout, ctx)
                    });
                    None
                }
            }
            Message::WriteTxnMarkersResponse { results } => {
                self.coordinate(now_ms, &mut effects, |c, ctx| {
                    c.handle_write_txn_markers_response(corr, &results, ctx)
                });
                None
            }
            Message::AddPartitionsToTxnResponse { result } if self.pending_offset_verifications.contains_key(&corr) => {
                let pending = self.pending_offset_verifications.remove(&corr).expect("checked above");
                let written = result.map_err(verification_error).and_then(|()| {
                    self.write_verified_txn_offsets(now_ms, &pending.asked, &pending.offsets, &mut effects)
                });
                let mut results = pending.unknown;
                let result = written.as_ref().map(|_| ()).map_err(|e| *e);
                results.extend(pending.offsets.into_iter().map(|(tp, _)| (tp, result)));
                let to = (pending.client, pending.client_correlation_id);
                self.answer_txn_offsets(now_ms, to, results, written.ok(), &mut effects);
                None
            }
            Message::AddPartitionsToTxnResponse { result } => {
                self.complete_verification(now_ms, corr, result, &mut effects);
                None
            }
            Message::ReplicaFetchRequest { partitions } => {
                let NodeId::Broker(follower) = reply_to else { unreachable!("only brokers fetch as replicas") };
                self.replicate(now_ms, &mut effects, |rm, ctx| {
                    rm.handle_follower_fetch(follower, corr, partitions, ctx)
                });
                None
            }
            Message::ReplicaFetchResponse { partitions } => {
                let NodeId::Broker(leader) = reply_to else { unreachable!("only brokers answer replica fetches") };
                self.replicate(now_ms, &mut effects, |rm, ctx| rm.handle_fetch_response(corr, leader, partitions, ctx));
                None
            }
            Message::Metadata(MetadataMessage::AlterPartitionResponse { partition, result }) => {
                self.replicate(now_ms, &mut effects, |rm, ctx| {
                    rm.handle_alter_partition_response(&partition, result, ctx)
                });
                None
            }
            Message::Metadata(MetadataMessage::PartitionChanges { changes }) => {
                let NodeId::Broker(me) = self.id else { unreachable!("a broker's id is a broker id") };
                for (tp, reg) in &changes {
                    if reg.replicas.contains(&me) && !self.partitions.contains_key(tp) {
                        // A partition created at run time: this broker hosts one of its replicas from now on.
                        self.partitions.insert(tp.clone(), PartitionLog::new());
                    }
                }
                self.replicate(now_ms, &mut effects, |rm, ctx| rm.apply_delta(&changes, ctx));
                let coordinator_log = changes.iter().any(|(tp, _)| *tp == transaction_state_partition());
                let changed: Vec<TopicPartition> = changes.iter().map(|(tp, _)| tp.clone()).collect();
                self.metadata_image.extend(changes);
                // After the whole delta, so that a new coordinator's first markers go to its new leaders.
                if coordinator_log {
                    self.take_coordinator_role(now_ms, &mut effects);
                }
                self.take_group_roles(now_ms, &changed, &mut effects);
                None
            }
            Message::FetchRequest { partition, fetch_offset, isolation, client_metadata } => {
                let any_replica = client_metadata && !self.config.mutations.has(Mutation::FollowerRefusesConsumerFetch);
                let log = if any_replica { self.replica_log(&partition) } else { self.leader_log(&partition) };
                let result = match log {
                    Err(e) => Err(e),
                    Ok(log) => log.read(fetch_offset, isolation, &self.config.mutations),
                };
                Some(Message::FetchResponse { partition, fetch_offset, result })
            }
            Message::ListOffsetsRequest { partition, isolation } => {
                let result =
                    self.leader_log(&partition).map(|log| log.latest_offset(isolation, &self.config.mutations));
                Some(Message::ListOffsetsResponse { partition, result })
            }
            Message::Metadata(MetadataMessage::CreateTopicsRequest { topics, validate_only })
                if self.controller.is_some() =>
            {
                self.forward_create_topics(Some((reply_to.clone(), corr)), topics, validate_only, &mut effects);
                None
            }
            Message::Metadata(MetadataMessage::CreateTopicsResponse { results }) => {
                // The controller's answer to a forwarded CreateTopics; an auto-creation's has nobody waiting.
                let answer = Message::Metadata(MetadataMessage::CreateTopicsResponse { results });
                if let Some((client, client_corr)) = self.forwarded.remove(&corr) {
                    effects.send(&self.id, &client, client_corr, answer);
                }
                None
            }
            Message::Metadata(request) => {
                let NodeId::Broker(id) = self.id else { unreachable!("a broker's id is a broker id") };
                let group_lookup =
                    matches!(request, MetadataMessage::FindCoordinatorRequest { key_type: CoordinatorType::Group, .. });
                if group_lookup && self.groups_replicated() && !self.knows_topic(GROUP_METADATA_TOPIC) {
                    // `KafkaApis.getCoordinator`: the internal topic is created on the first lookup, which is
                    // answered COORDINATOR_NOT_AVAILABLE meanwhile.
                    let offsets = NewTopic {
                        name: GROUP_METADATA_TOPIC.into(),
                        num_partitions: Some(OFFSETS_TOPIC_NUM_PARTITIONS as i32),
                        replication_factor: None,
                    };
                    self.forward_create_topics(None, vec![offsets], false, &mut effects);
                }
                let (image, managed, groups) =
                    (&self.metadata_image, self.controller.is_some(), self.groups_replicated());
                let reply = crate::metadata::handle(
                    id,
                    self.config.num_partitions,
                    &mut self.partitions,
                    image,
                    (managed, groups),
                    request,
                );
                // `AutoTopicCreationManager`: the topics answered LEADER_NOT_AVAILABLE are created by the controller.
                if let Some(MetadataMessage::MetadataResponse { topics, .. }) = &reply {
                    let created: Vec<NewTopic> = topics
                        .iter()
                        .filter(|(_, r)| *r == Err(KafkaError::LeaderNotAvailable))
                        .map(|(name, _)| NewTopic {
                            name: name.clone(),
                            num_partitions: None,
                            replication_factor: None,
                        })
                        .collect();
                    if !created.is_empty() {
                        self.forward_create_topics(None, created, false, &mut effects);
                    }
                }
                reply.map(Message::Metadata)
            }
            Message::Group(GroupMessage::TxnOffsetCommitRequest {
                transactional_id,
                group_id,
                producer,
                generation_id,
                member_id,
                offsets,
                transaction_version,
            }) => {
                let asked = TxnOffsetCommit {
                    transactional_id,
                    group_id,
                    producer,
                    generation_id,
                    member_id,
                    transaction_version,
                };
                self.handle_txn_offset_commit(now_ms, asked, offsets, &reply_to, corr, &mut effects);
                None
            }
            Message::Group(GroupMessage::OffsetFetchRequest { group_id, partitions, require_stable }) => {
                let asked = (group_id, partitions, require_stable);
                self.handle_offset_fetch(now_ms, asked, (reply_to.clone(), corr), &mut effects);
                None
            }
            Message::Group(request) => {
                self.groups.handle(now_ms, &self.config, &self.id, (reply_to.clone(), corr), request, &mut effects);
                self.write_groups(now_ms, &mut effects);
                None
            }
            Message::InitProducerIdResponse { .. }
            | Message::AddOffsetsToTxnResponse { .. }
            | Message::ProduceResponse { .. }
            | Message::EndTxnResponse { .. }
            | Message::FetchResponse { .. }
            | Message::ListOffsetsResponse { .. } => {
                unreachable!("a broker never sent the request behind {:?}", env.message.api_name())
            }
        };
        if let Some(message) = reply {
            effects.send(&self.id, &reply_to, corr, message);
        }
        effects
    }

    /// `TransactionStateManager.getTransactionState`: a broker that does not own the transactional id's
    /// `__transaction_state` partition (or the group's `__consumer_offsets` one) answers NOT_COORDINATOR
    /// (the client looks the coordinator up again). Transactional ids belong to `__transaction_state`'s
    /// loaded leader (`COORDINATOR_BROKER` where the log is not replicated), groups to `COORDINATOR_BROKER`;
    /// an idempotent producer's InitProducerId, with no transactional id, any broker serves.
    fn refuse_if_not_coordinator(&self, message: &Message) -> Option<Message> {
        if self.config.mutations.has(Mutation::AnyBrokerCoordinates) {
            return None;
        }
        let transactions = if self.has_transaction_log() {
            self.coordinator_loaded_at.is_some()
        } else {
            self.id == NodeId::Broker(COORDINATOR_BROKER)
        };
        let refused = match message {
            // The broker's own word to its coordinator: one that no longer owns the group ignores it.
            Message::Group(GroupMessage::GroupStored { .. }) => false,
            Message::Group(request) => !request.group_id().is_some_and(|g| self.owns_group(g)),
            _ => !transactions,
        };
        if !refused {
            return None;
        }
        // `getTransactionState`: COORDINATOR_LOAD_IN_PROGRESS while the partition is in `loadingPartitions`.
        let error = match message {
            Message::Group(_) => KafkaError::NotCoordinator,
            _ if self.coordinator_loading.is_some() => KafkaError::CoordinatorLoadInProgress,
            _ => KafkaError::NotCoordinator,
        };
        match message {
            Message::InitProducerIdRequest { transactional_id: Some(_), .. } => {
                Some(Message::InitProducerIdResponse { result: Err(error) })
            }
            Message::AddPartitionsToTxnRequest { .. } => {
                Some(Message::AddPartitionsToTxnResponse { result: Err(error) })
            }
            Message::AddOffsetsToTxnRequest { .. } => Some(Message::AddOffsetsToTxnResponse { result: Err(error) }),
            Message::EndTxnRequest { .. } => Some(Message::EndTxnResponse { result: Err(error) }),
            // `GroupCoordinatorService`: a group whose `__consumer_offsets` partition this broker does not
            // own gets NOT_COORDINATOR on every request, per partition where the answer has partitions.
            Message::Group(request) => {
                let per_partition = |offsets: &[(TopicPartition, CommittedOffset)]| {
                    offsets.iter().map(|(tp, _)| (tp.clone(), Err(error))).collect()
                };
                Some(Message::Group(match request {
                    GroupMessage::JoinGroupRequest { join, .. } => {
                        GroupMessage::JoinGroupResponse { member_id: join.member_id.clone(), result: Err(error) }
                    }
                    GroupMessage::SyncGroupRequest { .. } => GroupMessage::SyncGroupResponse { result: Err(error) },
                    GroupMessage::HeartbeatRequest { .. } => GroupMessage::HeartbeatResponse { result: Err(error) },
                    GroupMessage::LeaveGroupRequest { member_ids, .. } => GroupMessage::LeaveGroupResponse {
                        results: member_ids.iter().map(|m| (m.clone(), Err(error))).collect(),
                    },
                    GroupMessage::OffsetCommitRequest { offsets, .. } => {
                        GroupMessage::OffsetCommitResponse { results: per_partition(offsets) }
                    }
                    GroupMessage::TxnOffsetCommitRequest { offsets, .. } => {
                        GroupMessage::TxnOffsetCommitResponse { results: per_partition(offsets) }
                    }
                    GroupMessage::OffsetFetchRequest { .. } => {
                        GroupMessage::OffsetFetchResponse { offsets: Err(error) }
                    }
                    _ => return None,
                }))
            }
            _ => None,
        }
    }

    /// Sends CreateTopics to the controller, `num.partitions` filled in where the request left it to the
    /// broker; the answer goes back to `asker` (`ForwardingManager`), or nowhere for an auto-creation.
    fn forward_create_topics(
        &mut self,
        asker: Option<(NodeId, u64)>,
        mut topics: Vec<NewTopic>,
        validate_only: bool,
        effects: &mut Effects,
    ) {
        let controller = self.controller.clone().expect("only a controller-managed broker forwards");
        for t in &mut topics {
            t.num_partitions = t.num_partitions.or(Some(self.config.num_partitions as i32));
        }
        self.next_correlation_id += 1;
        let corr = self.next_correlation_id;
        if let Some(asker) = asker {
            self.forwarded.insert(corr, asker);
        }
        let request = MetadataMessage::CreateTopicsRequest { topics, validate_only };
        effects.send(&self.id, &controller, corr, Message::Metadata(request));
    }

    /// Produce: transactional batches that would begin a transaction on the partition are first verified
    /// with the coordinator (KIP-890 part 1; under transaction version 2 the same call adds the partition).
    #[allow(clippy::too_many_arguments)]
    fn handle_produce(
        &mut self,
        now_ms: TimeMs,
        client: NodeId,
        corr: u64,
        transactional_id: Option<String>,
        partition: TopicPartition,
        batch: ProduceBatch,
        version: TransactionVersion,
        effects: &mut Effects,
    ) -> Option<(TopicPartition, Result<ProduceAck, KafkaError>)> {
        // `ReplicaManager.appendToLocalLog`: a client may not write the coordinators' logs (`Topic.isInternal`).
        let internal = [GROUP_METADATA_TOPIC, TRANSACTION_STATE_TOPIC].contains(&partition.topic.as_str());
        if internal && !self.config.mutations.has(Mutation::InternalTopicsWritable) {
            return Some((partition, Err(KafkaError::InvalidTopicException)));
        }
        let Some(log) = self.partitions.get_mut(&partition) else {
            let error = self.not_hosted(&partition);
            return Some((partition, Err(error)));
        };
        log.producer_state.remove_expired_verification_entries(now_ms, &self.config.mutations);
        let needs_verification = batch.is_transactional
            && self.config.partition_verification
            && !self.config.mutations.has(Mutation::NoTxnVerification)
            && batch.producer.is_some_and(|p| !log.has_ongoing_transaction(p.producer_id, p.epoch));
        if !needs_verification {
            let result = self.append_client_batch(now_ms, &partition, &batch, effects);
            return self.acks_all(now_ms, client, corr, partition, result, effects);
        }
        let (Some(tid), Some(p)) = (transactional_id, batch.producer) else {
            return Some((partition, Err(KafkaError::InvalidRequest)));
        };
        self.next_correlation_id += 1;
        let corr_to_coordinator = self.next_correlation_id;
        // `maybeStartTransactionVerification`: an existing entry's guard is reused, so pipelined batches share it
        // (a marker clears the entry, so a stale verification cannot admit a late batch: KAFKA-14884).
        let guard = log.producer_state.maybe_create_verification_state_entry(
            p.producer_id,
            p.base_sequence,
            p.epoch,
            corr_to_coordinator,
            version.supports_epoch_bump(),
            now_ms,
        );
        // `AddPartitionsToTxnManager`: a Produce v12+ (TV2) adds the partition; an older one only verifies.
        let request = Message::AddPartitionsToTxnRequest {
            transactional_id: tid,
            producer: ProducerIdAndEpoch { producer_id: p.producer_id, epoch: p.epoch },
            partitions: vec![partition.clone()],
            verify_only: !version.supports_epoch_bump(),
            transaction_version: version,
        };
        self.pending_verifications.insert(
            corr_to_coordinator,
            PendingVerification { client, client_correlation_id: corr, partition, batch, guard, sent_ms: now_ms },
        );
        match self.transaction_coordinator() {
            Some(coordinator) => effects.send(&self.id, &coordinator, corr_to_coordinator, request),
            // `AddPartitionsToTxnManager`: no coordinator known, COORDINATOR_NOT_AVAILABLE.
            None => self.complete_verification(
                now_ms,
                corr_to_coordinator,
                Err(KafkaError::CoordinatorNotAvailable),
                effects,
            ),
        }
        None
    }

    /// The log of a partition this broker leads, for a client's read: a follower's copy is not served
    /// (`Partition.localLogWithEpochOrThrow` with `fetchOnlyLeader`).
    fn leader_log(&self, tp: &TopicPartition) -> Result<&PartitionLog, KafkaError> {
        let log = self.replica_log(tp)?;
        let NodeId::Broker(me) = self.id else { unreachable!("a broker's id is a broker id") };
        match self.replica_manager.partitions.get(tp) {
            Some(p) if p.leader != me => Err(KafkaError::NotLeaderOrFollower),
            _ => Ok(log),
        }
    }

    /// The log of a partition this broker hosts a replica of, leader or follower: a read bounded by this
    /// replica's own HW and LSO (`Partition.localLogWithEpochOrThrow` without `fetchOnlyLeader`).
    fn replica_log(&self, tp: &TopicPartition) -> Result<&PartitionLog, KafkaError> {
        self.partitions.get(tp).ok_or_else(|| self.not_hosted(tp))
    }

    fn complete_verification(
        &mut self,
        now_ms: TimeMs,
        corr: u64,
        result: Result<(), KafkaError>,
        effects: &mut Effects,
    ) {
        let Some(pending) = self.pending_verifications.remove(&corr) else {
            return;
        };
        let producer = pending.batch.producer.expect("verified batches are transactional");
        let pid = producer.producer_id;
        let log = self.partitions.get_mut(&pending.partition).expect("verified partitions exist");
        log.producer_state.remove_expired_verification_entries(now_ms, &self.config.mutations);
        let current_guard = log.producer_state.verification_entries.get(&pid).map(|v| v.guard);
        let ongoing = log.has_ongoing_transaction(pid, producer.epoch);
        let result = match result {
            // Only a batch that would begin the transaction here needs its guard (`analyzeAndValidateProducerState`):
            // a pipelined batch verified alongside the first joins the transaction the first one began.
            // A marker since the verification cleared the guard: the transaction it verified is over.
            Ok(()) if !ongoing && current_guard != Some(pending.guard) => Err(KafkaError::InvalidTxnState),
            Ok(()) => self.append_client_batch(now_ms, &pending.partition, &pending.batch, effects),
            // The producer's epoch is stale at the coordinator: a zombie's batch.
            Err(KafkaError::ProducerFenced) => Err(KafkaError::InvalidProducerEpoch),
            // `ReplicaManager.appendRecords`' postVerificationCallback: a coordinator that moved or is loading
            // becomes an error every producer retries without a metadata refresh.
            Err(
                KafkaError::NotCoordinator
                | KafkaError::CoordinatorNotAvailable
                | KafkaError::CoordinatorLoadInProgress
                | KafkaError::NetworkException,
            ) => Err(KafkaError::NotEnoughReplicas),
            Err(e) => Err(e),
        };
        let (client, corr) = (pending.client, pending.client_correlation_id);
        if let Some((partition, result)) =
            self.acks_all(now_ms, client.clone(), corr, pending.partition, result, effects)
        {
            effects.send(&self.id, &client, corr, Message::ProduceResponse { partition, result });
        }
    }

    /// acks=all (every producer here: idempotence requires it): a write to a replicated partition is
    /// answered once the HW passes it (`DelayedProduce`); anything else is the answer now.
    fn acks_all(
        &mut self,
        now_ms: TimeMs,
        client: NodeId,
        corr: u64,
        partition: TopicPartition,
        result: Result<ProduceAck, KafkaError>,
        effects: &mut Effects,
    ) -> Option<(TopicPartition, Result<ProduceAck, KafkaError>)> {
        match result {
            Ok(ack) if self.replica_manager.is_replicated(&partition) => {
                let (tp, timeout) = (partition.clone(), self.config.request_timeout_ms);
                let response = DelayedResponse::Produce { partition, ack };
                self.await_hw(now_ms, tp, ack.last_offset + 1, (client, corr), response, timeout, effects);
                None
            }
            result => Some((partition, result)),
        }
    }

    fn append_client_batch(
        &mut self,
        now_ms: TimeMs,
        partition: &TopicPartition,
        batch: &ProduceBatch,
        effects: &mut Effects,
    ) -> Result<ProduceAck, KafkaError> {
        self.replicate(now_ms, effects, |rm, ctx| rm.check_append(partition, ctx))?;
        let log = self.partitions.get_mut(partition).expect("caller checked the partition");
        let info = log.append_data(batch, AppendOrigin::Client, now_ms, &self.config.mutations)?;
        self.after_leader_append(now_ms, partition, effects);
        Ok(ProduceAck { first_offset: info.first_offset, last_offset: info.last_offset, duplicate: info.duplicate })
    }

    /// A replicated partition's HW waits for its followers; a partition hosted alone follows its log end.
    fn after_leader_append(&mut self, now_ms: TimeMs, tp: &TopicPartition, effects: &mut Effects) {
        if self.replica_manager.is_replicated(tp) {
            self.replicate(now_ms, effects, |rm, ctx| rm.after_leader_append(tp, ctx));
        } else {
            self.advance_high_watermark(tp);
        }
    }

    /// `handleWriteTxnMarkersRequest`: one control batch per partition, origin COORDINATOR, appended with
    /// acks=all; the appends to replicated partitions come back as the HW each must reach.
    #[allow(clippy::type_complexity)]
    fn handle_write_txn_markers(
        &mut self,
        now_ms: TimeMs,
        markers: &[TxnMarkerEntry],
        effects: &mut Effects,
    ) -> (Vec<(ProducerId, TopicPartition, Result<u64, KafkaError>)>, Vec<AckWait>) {
        let mut results = Vec::new();
        let mut waits = Vec::new();
        for m in markers {
            for tp in &m.partitions {
                let marker = EndTxnMarker { result: m.result, coordinator_epoch: m.coordinator_epoch };
                let checked = self.replicate(now_ms, effects, |rm, ctx| rm.check_append(tp, ctx));
                let result = match (checked, self.partitions.get_mut(tp)) {
                    (_, None) => Err(KafkaError::UnknownTopicOrPartition),
                    (Err(e), Some(_)) => Err(e),
                    (Ok(()), Some(log)) => log.append_marker(
                        m.producer_id,
                        m.producer_epoch,
                        marker,
                        AppendOrigin::Coordinator,
                        m.transaction_version,
                        now_ms,
                        &self.config.mutations,
                    ),
                };
                if let Ok(offset) = result {
                    if tp.topic == GROUP_METADATA_TOPIC {
                        // `GroupCoordinator.completeTransaction`: the marker settles the offsets waiting on it.
                        self.groups.complete_transaction(m.producer_id, m.result, tp, offset);
                    }
                    self.after_leader_append(now_ms, tp, effects);
                    if self.replica_manager.is_replicated(tp) {
                        waits.push(AckWait::new(tp.clone(), offset + 1, results.len()));
                    }
                }
                results.push((m.producer_id, tp.clone(), result));
            }
        }
        (results, waits)
    }

    /// The group's `__consumer_offsets` partition. Unreplicated, broker 0 creates the topic the first time
    /// a group needs it; replicated, the controller creates it on the first FindCoordinator for a group
    /// (`KafkaApis.getCoordinator`).
    fn offsets_partition(&mut self, group_id: &str) -> TopicPartition {
        let absent = !self.partitions.keys().any(|tp| tp.topic == GROUP_METADATA_TOPIC);
        if !self.groups_replicated() && absent {
            for p in 0..OFFSETS_TOPIC_NUM_PARTITIONS {
                self.partitions.insert(TopicPartition::new(GROUP_METADATA_TOPIC, p), PartitionLog::new());
            }
        }
        offsets_partition_for(group_id)
    }

    /// TxnOffsetCommit (`GroupCoordinatorService.commitTransactionalOffsets`): partitions of unknown topics
    /// fail alone; the rest are verified with the transaction coordinator (KIP-890: the offsets partition
    /// must be in the ongoing transaction), checked against the group (KIP-447), written to the group's
    /// `__consumer_offsets` partition as a batch of the producer's transaction (origin coordinator: epoch
    /// checked, no client sequence) and held pending until the transaction's marker lands there. Answered
    /// once the batch is replicated (`answer_txn_offsets`), or later if the verification is remote.
    fn handle_txn_offset_commit(
        &mut self,
        now_ms: TimeMs,
        asked: TxnOffsetCommit,
        offsets: Vec<(TopicPartition, CommittedOffset)>,
        reply_to: &NodeId,
        corr: u64,
        effects: &mut Effects,
    ) {
        let (known, unknown): (Vec<_>, Vec<_>) = offsets.into_iter().partition(|(tp, _)| self.knows_partition(tp));
        let mut results: Vec<_> =
            unknown.into_iter().map(|(tp, _)| (tp, Err(KafkaError::UnknownTopicOrPartition))).collect();
        if known.is_empty() {
            return self.answer_txn_offsets(now_ms, (reply_to.clone(), corr), results, None, effects);
        }
        let verify = self.config.partition_verification && !self.config.mutations.has(Mutation::NoTxnVerification);
        // A TV2 add (v5+) may write `__transaction_state`, so it always goes to the coordinator as a request.
        let adds = asked.transaction_version.supports_epoch_bump()
            && !self.config.mutations.has(Mutation::TxnOffsetCommitV5OnlyVerifies);
        let local = !adds && (!self.has_transaction_log() || self.coordinator_loaded_at.is_some());
        let outcome = if asked.group_id.is_empty() {
            Err(KafkaError::InvalidGroupId)
        } else if verify && !local {
            // The transaction coordinator is on another broker: ask it, and answer when it has.
            match self.transaction_coordinator() {
                Some(coordinator) => {
                    let partitions = vec![self.offsets_partition(&asked.group_id)];
                    let request = Message::AddPartitionsToTxnRequest {
                        transactional_id: asked.transactional_id.clone(),
                        producer: asked.producer,
                        partitions,
                        verify_only: !adds,
                        transaction_version: if adds { TransactionVersion::V2 } else { TransactionVersion::V1 },
                    };
                    self.next_correlation_id += 1;
                    let id = self.next_correlation_id;
                    effects.send(&self.id, &coordinator, id, request);
                    let pending = PendingOffsetsVerification {
                        client: reply_to.clone(),
                        client_correlation_id: corr,
                        asked,
                        offsets: known,
                        unknown: results,
                    };
                    self.pending_offset_verifications.insert(id, pending);
                    return;
                }
                None => Err(KafkaError::CoordinatorNotAvailable),
            }
        } else {
            let verified =
                if verify { self.verify_txn_offsets_here(now_ms, &asked, reply_to, corr, effects) } else { Ok(()) };
            verified.and_then(|()| self.write_verified_txn_offsets(now_ms, &asked, &known, effects))
        };
        let result = outcome.as_ref().map(|_| ()).map_err(|e| *e);
        results.extend(known.into_iter().map(|(tp, _)| (tp, result)));
        self.answer_txn_offsets(now_ms, (reply_to.clone(), corr), results, outcome.ok(), effects);
    }

    /// TxnOffsetCommit's answer; with the offsets `written` to a replicated partition (the next offset
    /// after their batch), once the HW passes them, as the coordinator runtime answers a committed write.
    fn answer_txn_offsets(
        &mut self,
        now_ms: TimeMs,
        (client, corr): (NodeId, u64),
        results: Vec<(TopicPartition, Result<(), KafkaError>)>,
        written: Option<(TopicPartition, Offset)>,
        effects: &mut Effects,
    ) {
        let answer = GroupMessage::TxnOffsetCommitResponse { results };
        match written {
            Some((tp, next)) if self.replica_manager.is_replicated(&tp) => {
                let (response, timeout) = (DelayedResponse::Group { answer }, self.config.request_timeout_ms);
                self.await_hw(now_ms, tp, next, (client, corr), response, timeout, effects);
            }
            _ => effects.send(&self.id, &client, corr, Message::Group(answer)),
        }
    }

    /// The verification where this broker's own coordinator owns the transactional id: answered at once.
    fn verify_txn_offsets_here(
        &mut self,
        now_ms: TimeMs,
        asked: &TxnOffsetCommit,
        reply_to: &NodeId,
        corr: u64,
        effects: &mut Effects,
    ) -> Result<(), KafkaError> {
        let offsets_partition = self.offsets_partition(&asked.group_id);
        let verified = self.coordinate(now_ms, effects, |c, ctx| {
            let to = ReplyTo { to: reply_to.clone(), correlation_id: corr };
            let partitions = std::slice::from_ref(&offsets_partition);
            c.handle_add_partitions(
                &asked.transactional_id,
                asked.producer,
                partitions,
                true,
                TransactionVersion::V1,
                to,
                ctx,
            )
        });
        verified.expect("a verification is answered at once").map_err(verification_error)
    }

    /// Once verified: checked against the group (KIP-447), written to the group's `__consumer_offsets`
    /// partition as a batch of the producer's transaction and staged until its marker.
    fn write_verified_txn_offsets(
        &mut self,
        now_ms: TimeMs,
        asked: &TxnOffsetCommit,
        offsets: &[(TopicPartition, CommittedOffset)],
        effects: &mut Effects,
    ) -> Result<(TopicPartition, Offset), KafkaError> {
        let offsets_partition = self.offsets_partition(&asked.group_id);
        self.groups.validate_txn_offset_commit(&asked.group_id, asked.generation_id, &asked.member_id)?;
        let batch = ProduceBatch {
            producer: Some(BatchProducer {
                producer_id: asked.producer.producer_id,
                epoch: asked.producer.epoch,
                // Kafka writes 0 here; no client sequence is meant, and -1 keeps it out of the sequence checks.
                base_sequence: -1,
            }),
            is_transactional: true,
            values: offsets.iter().map(|(tp, o)| OffsetsRecord::offset(&asked.group_id, tp, o).to_value()).collect(),
        };
        let log = self.partitions.get_mut(&offsets_partition).expect("the group's partition is hosted");
        let info = log.append_data(&batch, AppendOrigin::Coordinator, now_ms, &self.config.mutations)?;
        self.after_leader_append(now_ms, &offsets_partition, effects);
        let pid = asked.producer.producer_id;
        self.groups.stage_txn_offsets(&asked.group_id, pid, info.first_offset, offsets, &self.config.mutations);
        Ok((offsets_partition, info.last_offset + 1))
    }

    /// `DelayedProduce` for a write to one replicated partition: `response` goes to `to` once the HW passes
    /// `required_offset` (the batch's last offset + 1), or fails with the write's error or timeout.
    #[allow(clippy::too_many_arguments)]
    fn await_hw(
        &mut self,
        now_ms: TimeMs,
        tp: TopicPartition,
        required_offset: Offset,
        (to, corr): (NodeId, u64),
        response: DelayedResponse,
        timeout_ms: TimeMs,
        effects: &mut Effects,
    ) {
        let waits = vec![AckWait::new(tp, required_offset, 0)];
        self.replicate(now_ms, effects, |rm, ctx| rm.await_acks(to, corr, waits, response, timeout_ms, ctx));
    }

    /// With one replica in the ISR the HW follows the log end at once, unless the scenario moves it by hand.
    pub fn advance_high_watermark(&mut self, tp: &TopicPartition) {
        let log = self.partitions.get_mut(tp).expect("known partition");
        if !self.config.manual_high_watermark {
            let leo = log.log_end_offset();
            log.update_high_watermark(leo, &self.config.mutations);
        }
        log.assert_offsets(&self.config.mutations);
    }
}
