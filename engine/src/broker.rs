//! A broker as `KafkaApis` sees it: each message goes to the handler of its API, which hands it to the
//! room that does the work: `ReplicaManager` (partitions, logs, produce, replication), the transaction
//! coordinator with its `TransactionStateManager`, the group coordinator with its runtime, and the
//! controller through `ForwardingManager` (`forwarding_manager.rs`); partitions are looked up in the
//! metadata cache (`metadata_cache.rs`, `KRaftMetadataCache`). A sans-io node: it takes a message and
//! `now`, and returns messages and timers.

use crate::config::EngineConfig;
use crate::coordinator::{has_transaction_log, Ctx, ReplyTo};
use crate::coordinator::{TransactionCoordinator, TransactionStateManager};
use crate::error::KafkaError;
use crate::forwarding_manager::{auto_created_topics, offsets_topic, ForwardingManager};
use crate::group_coordinator::{verification_error, CoordinatorRuntime, GroupCoordinator, GroupCtx};
use crate::group_coordinator::{TxnOffsetCommit, TxnOffsetsVerification};
use crate::log::PartitionLog;
use crate::metadata_cache::MetadataCache;
use crate::mutation::Mutation;
use crate::protocol::group::{CommittedOffset, GroupMessage};
use crate::protocol::metadata::{CoordinatorType, LeaderAndIsr, MetadataMessage, NewTopic, PartitionRegistration};
use crate::protocol::{CorrelationIds, Effects, Envelope, Message, NodeId, Timer, TxnMarkerEntry};
use crate::protocol::{ReplicaFetchPartition, ReplicaFetchPartitionResponse, CONTROLLER_ID};
use crate::record::ProduceBatch;
use crate::rename::{Names, Rename};
use crate::replica_manager::{DelayedResponse, ProduceMetadata, ProduceRequest, ReplicaCtx, ReplicaManager};
use crate::topic::transaction_state_partition;
use crate::topic::COORDINATOR_BROKER;
use crate::topic::GROUP_METADATA_TOPIC;
use crate::types::{IsolationLevel, Offset, ProducerId, ProducerIdAndEpoch, TimeMs, TopicPartition};
use crate::types::{TransactionResult, TransactionVersion};
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Broker {
    pub id: u32,
    pub config: EngineConfig,
    pub coordinator: TransactionCoordinator,
    /// Consumer groups (the wire driver's clients, and the engine's producers' transactional offsets).
    pub groups: GroupCoordinator,
    /// The group coordinator's runtime: the `__consumer_offsets` partitions it loaded, and its writes.
    group_runtime: CoordinatorRuntime,
    /// The partitions this broker hosts: their logs, and for those with followers their ISR, follower
    /// states and purgatories.
    pub replica_manager: ReplicaManager,
    /// Every partition's registration as the controller last told this broker (`KRaftMetadataCache`);
    /// empty on a single broker, which leads every partition it has.
    pub metadata_image: BTreeMap<TopicPartition, PartitionRegistration>,
    /// Where this broker forwards topic creation (KRaft's controller, KIP-590); `None` on a single broker
    /// that keeps its own metadata and creates topics itself.
    pub controller: Option<NodeId>,
    /// CreateTopics requests forwarded to the controller (`ForwardingManager`).
    forwarded: ForwardingManager,
    correlation_ids: CorrelationIds,
    /// The coordinator's `__transaction_state`: its role, load and appends.
    pub txn_manager: TransactionStateManager,
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
    let newest = brokers.clone().filter_map(|b| b.txn_manager.log_epoch).max()?;
    brokers.into_iter().find(|b| b.txn_manager.loaded_at == Some(newest))
}

impl Rename for Broker {
    fn rename(&mut self, names: Names<'_>) {
        self.coordinator.rename(names);
        self.replica_manager.rename(names);
        self.forwarded.rename(names);
        self.group_runtime.rename(names);
    }
}

impl Broker {
    pub fn new(id: u32, topics: &BTreeMap<String, u32>, config: EngineConfig) -> Self {
        let logs = topics
            .iter()
            .flat_map(|(t, n)| (0..*n).map(move |p| (TopicPartition::new(t, p), PartitionLog::new())))
            .collect();
        Broker {
            id,
            config,
            coordinator: TransactionCoordinator::for_broker(id),
            groups: GroupCoordinator::default(),
            group_runtime: CoordinatorRuntime::default(),
            replica_manager: ReplicaManager::unreplicated(logs),
            metadata_image: BTreeMap::new(),
            controller: None,
            forwarded: ForwardingManager::default(),
            correlation_ids: CorrelationIds::default(),
            txn_manager: TransactionStateManager::default(),
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
        if let Some(epoch) = self.txn_manager.loading() {
            self.load_transaction_log(now_ms, epoch, &mut effects);
        }
        effects
    }

    /// `TransactionCoordinator.onElection` / `onResignation`: a broker that now leads `__transaction_state`
    /// at a new epoch schedules its load; one that stopped leading it unloads.
    fn take_coordinator_role(&mut self, now_ms: TimeMs, effects: &mut Effects) {
        let Some((leading, unload)) = self.txn_manager.elect(self.id, &self.replica_manager) else { return };
        if unload {
            self.coordinate(now_ms, effects, |c, ctx| c.unload(ctx));
        }
        self.txn_manager.schedule_load(leading, now_ms, effects);
    }

    /// The scheduled load, if it still stands: the coordinator's cache is rebuilt from the log.
    fn load_transaction_log(&mut self, now_ms: TimeMs, epoch: i32, effects: &mut Effects) {
        let time = (now_ms, &self.config);
        let Some(records) = self.txn_manager.load(epoch, &self.replica_manager, time, effects) else { return };
        let records = records.iter().map(|(e, v)| (*e, v.as_str()));
        self.coordinate(now_ms, effects, |c, ctx| c.load_from_log(epoch, records, ctx));
    }

    /// The coordinator's pending transition for `tid` goes to the replicated log; a failed append fails it.
    fn append_txn_log(&mut self, now_ms: TimeMs, tid: &str, corr: u64, effects: &mut Effects) {
        let Some(record) = self.coordinator.txn_log_record(tid, corr) else { return };
        let appended = self.replicate(now_ms, effects, |rm, ctx| {
            TransactionStateManager::append_transition((tid, corr), record, rm, ctx)
        });
        if let Err(e) = appended {
            self.coordinate(now_ms, effects, |c, ctx| c.on_txn_log_append_failed(tid, corr, e, ctx));
        }
    }

    /// Runs a replication step with this broker's config and outbox.
    fn replicate<R>(
        &mut self,
        now_ms: TimeMs,
        effects: &mut Effects,
        step: impl FnOnce(&mut ReplicaManager, &mut ReplicaCtx<'_>) -> R,
    ) -> R {
        let mut ctx = ReplicaCtx { me: self.id, now_ms, config: &self.config, effects };
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
        let me = self.node();
        let (hosted, image) = (&self.replica_manager.logs, &self.metadata_image);
        let leaders = MetadataCache::new(self.id, hosted, image, &self.config.mutations);
        let mut ctx = Ctx { now_ms, config: &self.config, me: &me, leaders: &leaders, effects };
        // The transactional-id expiration runs due by now come first (counted, not timed).
        self.coordinator.remove_expired_transactional_ids(&mut ctx);
        let result = handler(&mut self.coordinator, &mut ctx);
        let tombstones = std::mem::take(&mut self.coordinator.tombstones);
        let mut ctx = ReplicaCtx { me: self.id, now_ms, config: &self.config, effects };
        self.txn_manager.write_tombstones(tombstones, &mut self.replica_manager, &mut ctx);
        result
    }

    /// Nothing in progress on this broker but KIP-890 verifications
    /// (`ReplicaManager::newest_verification_ms`): its coordinator is settled
    /// (`TransactionCoordinator::is_settled`) and not loading, no forwarded request waits for the
    /// controller, no ISR change is pending, and every partition it leads has LSO = HW = LEO.
    /// What remains is periodic: fetch long-polls and the coordinator's scans.
    pub fn is_settled(&self) -> bool {
        let leads = |tp: &TopicPartition| self.replica_manager.partitions.get(tp).is_none_or(|p| p.leader == self.id);
        self.coordinator.is_settled()
            && self.txn_manager.loading().is_none()
            && self.forwarded.is_empty()
            && self.replica_manager.partitions.values().all(|p| p.pending_isr.is_none())
            && self.replica_manager.logs.iter().filter(|(tp, _)| leads(tp)).all(|(_, log)| {
                let hw = log.high_watermark();
                hw == log.log_end_offset() && log.last_stable_offset(&self.config.mutations) == hw
            })
    }

    /// The broker's node on the network.
    pub fn node(&self) -> NodeId {
        NodeId::Broker(self.id)
    }

    pub fn partition(&self, tp: &TopicPartition) -> Option<&PartitionLog> {
        self.replica_manager.logs.get(tp)
    }

    /// This broker's metadata cache (`KRaftMetadataCache`).
    fn metadata_cache(&self) -> MetadataCache<'_> {
        MetadataCache::new(self.id, &self.replica_manager.logs, &self.metadata_image, &self.config.mutations)
    }

    pub fn partition_mut(&mut self, tp: &TopicPartition) -> Option<&mut PartitionLog> {
        self.replica_manager.logs.get_mut(tp)
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
        self.run_groups(now_ms, &mut effects, |_, ctx| CoordinatorRuntime::tick(ctx));
        effects
    }

    /// Whether groups live in a replicated `__consumer_offsets` that the controller creates and their
    /// coordinators follow its leadership; else broker 0 keeps them in a topic of its own.
    fn groups_replicated(&self) -> bool {
        self.controller.is_some() && self.config.offsets_topic_replication_factor > 1
    }

    /// Runs a group coordinator runtime operation with this broker's groups, replicas, time and outbox.
    fn run_groups<R>(
        &mut self,
        now_ms: TimeMs,
        effects: &mut Effects,
        op: impl FnOnce(&mut CoordinatorRuntime, &mut GroupCtx<'_>) -> R,
    ) -> R {
        let replica = ReplicaCtx { me: self.id, now_ms, config: &self.config, effects };
        let mut ctx = GroupCtx {
            replica,
            replicated: self.groups_replicated(),
            groups: &mut self.groups,
            replicas: &mut self.replica_manager,
            correlation_ids: &mut self.correlation_ids,
        };
        op(&mut self.group_runtime, &mut ctx)
    }

    /// A crash and restart: logs, producer state (rebuilt from the log in Kafka; identical here) and the
    /// coordinator's `__transaction_state` survive; requests in flight and verification guards do not.
    /// The coordinator reloads under a new epoch and resends the markers of decided transactions.
    pub fn restart(&mut self, now_ms: TimeMs) -> Effects {
        self.replica_manager.forget_verifications();
        self.group_runtime.restart(self.groups_replicated(), &mut self.groups);
        if has_transaction_log(&self.replica_manager) {
            // The cache died with the process (nobody is answered); leading the log again reloads it.
            self.coordinate(now_ms, &mut Effects::default(), |c, ctx| c.unload(ctx));
            self.txn_manager.forget();
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
        self.replica_manager.restart(self.id, image, now_ms, &self.config.mutations);
        self.metadata_image = image.clone();
        let mut effects = self.restart(now_ms);
        self.run_groups(now_ms, &mut effects, |rt, ctx| rt.take_roles(image.keys(), ctx));
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

    /// `KafkaApis.handle`: a request the coordinators here do not own is refused; any other message goes
    /// to the handler of its API, whose answer, if it has one now, goes back to the sender.
    pub fn on_message(&mut self, now_ms: TimeMs, env: Envelope) -> Effects {
        let mut effects = Effects::default();
        let (from, corr) = (env.from, env.correlation_id);
        let e = &mut effects;
        let reply = match self.refuse_if_not_coordinator(&env.message) {
            Some(refusal) => Some(refusal),
            None => self.dispatch(now_ms, (&from, corr), env.message, e),
        };
        if let Some(message) = reply {
            effects.send(&self.node(), &from, corr, message);
        }
        effects
    }

    /// One line per API, as `KafkaApis.handle` matches on `ApiKeys`.
    fn dispatch(&mut self, now: TimeMs, from: (&NodeId, u64), message: Message, e: &mut Effects) -> Option<Message> {
        match message {
            Message::InitProducerIdRequest { transactional_id: tid, transaction_timeout_ms, producer_id_and_epoch } => {
                self.handle_init_producer_id(now, from, (tid, transaction_timeout_ms, producer_id_and_epoch), e)
            }
            Message::AddPartitionsToTxnRequest {
                transactional_id,
                producer,
                partitions,
                verify_only,
                transaction_version,
            } => self.handle_add_partitions_to_txn(
                now,
                from,
                (transactional_id, producer, partitions),
                (verify_only, transaction_version),
                e,
            ),
            Message::AddOffsetsToTxnRequest { transactional_id, producer, group_id } => {
                self.handle_add_offsets_to_txn(now, from, (transactional_id, producer, group_id), e)
            }
            Message::EndTxnRequest { transactional_id, producer, result, transaction_version } => {
                self.handle_end_txn(now, from, (transactional_id, producer), (result, transaction_version), e)
            }
            Message::TxnLogAppendRequest { transactional_id } => {
                self.handle_txn_log_append(now, from.1, transactional_id, e)
            }
            Message::TxnLogAppendResponse { transactional_id, result } => {
                self.handle_txn_log_appended(now, from.1, transactional_id, result, e)
            }
            Message::ProduceRequest { transactional_id, partition, batch, transaction_version } => {
                self.handle_produce(now, from, (transactional_id, partition, batch, transaction_version), e)
            }
            Message::WriteTxnMarkersRequest { markers } => self.handle_write_txn_markers(now, from, &markers, e),
            Message::WriteTxnMarkersResponse { results } => {
                self.handle_write_txn_markers_response(now, from.1, &results, e)
            }
            Message::AddPartitionsToTxnResponse { result } => self.handle_verification_answer(now, from.1, result, e),
            Message::ReplicaFetchRequest { partitions } => self.handle_replica_fetch(now, from, partitions, e),
            Message::ReplicaFetchResponse { partitions } => {
                self.handle_replica_fetch_response(now, from, partitions, e)
            }
            Message::Metadata(MetadataMessage::AlterPartitionResponse { partition, result }) => {
                self.handle_alter_partition_response(now, partition, result, e)
            }
            Message::Metadata(MetadataMessage::PartitionChanges { changes }) => self.apply_delta(now, changes, e),
            Message::FetchRequest { partition, fetch_offset, isolation, client_metadata } => {
                self.handle_fetch(partition, fetch_offset, isolation, client_metadata)
            }
            Message::ListOffsetsRequest { partition, isolation } => self.handle_list_offsets(partition, isolation),
            Message::Metadata(MetadataMessage::CreateTopicsRequest { topics, validate_only })
                if self.controller.is_some() =>
            {
                self.handle_create_topics(from, topics, validate_only, e)
            }
            Message::Metadata(MetadataMessage::CreateTopicsResponse { results }) => {
                self.handle_forwarded_response(from.1, results, e)
            }
            Message::Metadata(request) => self.handle_metadata(request, e),
            Message::Group(GroupMessage::TxnOffsetCommitRequest {
                transactional_id,
                group_id,
                producer,
                generation_id,
                member_id,
                offsets,
                transaction_version,
            }) => self.handle_txn_offset_commit(
                now,
                TxnOffsetCommit { transactional_id, group_id, producer, generation_id, member_id, transaction_version },
                offsets,
                from,
                e,
            ),
            Message::Group(GroupMessage::OffsetFetchRequest { group_id, partitions, require_stable }) => {
                self.handle_offset_fetch(now, (group_id, partitions, require_stable), from, e)
            }
            Message::Group(request) => self.handle_group(now, from, request, e),
            message @ (Message::InitProducerIdResponse { .. }
            | Message::AddOffsetsToTxnResponse { .. }
            | Message::ProduceResponse { .. }
            | Message::EndTxnResponse { .. }
            | Message::FetchResponse { .. }
            | Message::ListOffsetsResponse { .. }) => {
                unreachable!("a broker never sent the request behind {:?}", message.api_name())
            }
        }
    }

    /// `handleInitProducerIdRequest`.
    fn handle_init_producer_id(
        &mut self,
        now_ms: TimeMs,
        (client, corr): (&NodeId, u64),
        (tid, timeout_ms, producer): (Option<String>, TimeMs, Option<ProducerIdAndEpoch>),
        effects: &mut Effects,
    ) -> Option<Message> {
        let to = ReplyTo { to: client.clone(), correlation_id: corr };
        self.coordinate(now_ms, effects, |c, ctx| {
            c.handle_init_producer_id(tid.as_deref(), timeout_ms, producer, to, ctx)
        })
        .map(|result| Message::InitProducerIdResponse { result })
    }

    /// `handleAddPartitionsToTxnRequest`: partitions unknown to the metadata cache are refused here.
    fn handle_add_partitions_to_txn(
        &mut self,
        now_ms: TimeMs,
        (client, corr): (&NodeId, u64),
        (tid, producer, partitions): (String, ProducerIdAndEpoch, Vec<TopicPartition>),
        (verify_only, version): (bool, TransactionVersion),
        effects: &mut Effects,
    ) -> Option<Message> {
        let result = if partitions.iter().all(|tp| self.metadata_cache().contains_partition(tp)) {
            let to = ReplyTo { to: client.clone(), correlation_id: corr };
            self.coordinate(now_ms, effects, |c, ctx| {
                c.handle_add_partitions(&tid, producer, &partitions, verify_only, version, to, ctx)
            })
        } else {
            Some(Err(KafkaError::UnknownTopicOrPartition))
        };
        result.map(|result| Message::AddPartitionsToTxnResponse { result })
    }

    /// `handleAddOffsetsToTxnRequest`: the group's `__consumer_offsets` partition joins the transaction.
    fn handle_add_offsets_to_txn(
        &mut self,
        now_ms: TimeMs,
        (client, corr): (&NodeId, u64),
        (tid, producer, group_id): (String, ProducerIdAndEpoch, String),
        effects: &mut Effects,
    ) -> Option<Message> {
        let offsets_partition = self.offsets_partition(&group_id);
        let to = ReplyTo { to: client.clone(), correlation_id: corr };
        self.coordinate(now_ms, effects, |c, ctx| c.handle_add_offsets(&tid, producer, &offsets_partition, to, ctx))
            .map(|result| Message::AddOffsetsToTxnResponse { result })
    }

    /// `handleEndTxnRequest`.
    fn handle_end_txn(
        &mut self,
        now_ms: TimeMs,
        (client, corr): (&NodeId, u64),
        (tid, producer): (String, ProducerIdAndEpoch),
        (result, version): (TransactionResult, TransactionVersion),
        effects: &mut Effects,
    ) -> Option<Message> {
        let to = ReplyTo { to: client.clone(), correlation_id: corr };
        self.coordinate(now_ms, effects, |c, ctx| c.handle_end_txn(&tid, producer, result, version, to, ctx))
            .map(|result| Message::EndTxnResponse { result })
    }

    /// The coordinator's own `__transaction_state` append: through the replicated log where there is
    /// one, else written at once.
    fn handle_txn_log_append(
        &mut self,
        now_ms: TimeMs,
        corr: u64,
        tid: String,
        effects: &mut Effects,
    ) -> Option<Message> {
        if has_transaction_log(&self.replica_manager) {
            self.append_txn_log(now_ms, &tid, corr, effects);
        } else {
            self.coordinate(now_ms, effects, |c, ctx| c.on_txn_log_append(&tid, corr, ctx));
        }
        None
    }

    /// The replicated append's outcome, back to the coordinator.
    fn handle_txn_log_appended(
        &mut self,
        now_ms: TimeMs,
        corr: u64,
        tid: String,
        result: Result<(), KafkaError>,
        effects: &mut Effects,
    ) -> Option<Message> {
        self.coordinate(now_ms, effects, |c, ctx| match result {
            Ok(()) => c.on_txn_log_append(&tid, corr, ctx),
            Err(e) => c.on_txn_log_append_failed(&tid, corr, e, ctx),
        });
        None
    }

    /// `handleProduceRequest`: `ReplicaManager.appendRecords`, with what this broker's metadata cache says.
    fn handle_produce(
        &mut self,
        now_ms: TimeMs,
        (client, correlation_id): (&NodeId, u64),
        (transactional_id, partition, batch, transaction_version): (
            Option<String>,
            TopicPartition,
            ProduceBatch,
            TransactionVersion,
        ),
        effects: &mut Effects,
    ) -> Option<Message> {
        let client = client.clone();
        let request =
            ProduceRequest { client, correlation_id, transactional_id, partition, batch, transaction_version };
        let not_hosted = self.metadata_cache().not_hosted(&request.partition);
        let metadata = ProduceMetadata { not_hosted, coordinator: self.metadata_cache().transaction_coordinator() };
        let ids = &mut self.correlation_ids;
        let mut ctx = ReplicaCtx { me: self.id, now_ms, config: &self.config, effects };
        self.replica_manager
            .handle_produce(request, metadata, ids, &mut ctx)
            .map(|(partition, result)| Message::ProduceResponse { partition, result })
    }

    /// `handleWriteTxnMarkersRequest`: the markers are appended; a marker on `__consumer_offsets` settles
    /// the offsets waiting on it (`GroupCoordinator.completeTransaction`); the answer waits for the HW of
    /// every replicated partition written.
    fn handle_write_txn_markers(
        &mut self,
        now_ms: TimeMs,
        (client, corr): (&NodeId, u64),
        markers: &[TxnMarkerEntry],
        effects: &mut Effects,
    ) -> Option<Message> {
        let (results, waits) = self.replicate(now_ms, effects, |rm, ctx| rm.append_txn_markers(markers, ctx));
        let written = markers.iter().flat_map(|m| m.partitions.iter().map(move |_| m)).zip(&results);
        for (m, (_, tp, result)) in written.filter(|(_, (_, tp, _))| tp.topic == GROUP_METADATA_TOPIC) {
            if let Ok(offset) = result {
                self.groups.complete_transaction(m.producer_id, m.result, tp, *offset, &self.config.mutations);
            }
        }
        if waits.is_empty() {
            return Some(Message::WriteTxnMarkersResponse { results });
        }
        let (response, timeout) = (DelayedResponse::Markers { results }, self.config.request_timeout_ms);
        let to = client.clone();
        self.replicate(now_ms, effects, |rm, ctx| rm.await_acks(to, corr, waits, response, timeout, ctx));
        None
    }

    /// The markers' outcome, back to the coordinator that sent them.
    fn handle_write_txn_markers_response(
        &mut self,
        now_ms: TimeMs,
        corr: u64,
        results: &[(ProducerId, TopicPartition, Result<Offset, KafkaError>)],
        effects: &mut Effects,
    ) -> Option<Message> {
        self.coordinate(now_ms, effects, |c, ctx| c.handle_write_txn_markers_response(corr, results, ctx));
        None
    }

    /// A follower's fetch, answered by `ReplicaManager.fetchMessages`.
    fn handle_replica_fetch(
        &mut self,
        now_ms: TimeMs,
        (from, corr): (&NodeId, u64),
        partitions: Vec<ReplicaFetchPartition>,
        effects: &mut Effects,
    ) -> Option<Message> {
        let NodeId::Broker(follower) = *from else { unreachable!("only brokers fetch as replicas") };
        self.replicate(now_ms, effects, |rm, ctx| rm.handle_follower_fetch(follower, corr, partitions, ctx));
        None
    }

    /// The leader's answer to this broker's fetcher.
    fn handle_replica_fetch_response(
        &mut self,
        now_ms: TimeMs,
        (from, corr): (&NodeId, u64),
        partitions: Vec<ReplicaFetchPartitionResponse>,
        effects: &mut Effects,
    ) -> Option<Message> {
        let NodeId::Broker(leader) = *from else { unreachable!("only brokers answer replica fetches") };
        self.replicate(now_ms, effects, |rm, ctx| rm.handle_fetch_response(corr, leader, partitions, ctx));
        None
    }

    /// The controller's answer to an ISR change this broker proposed.
    fn handle_alter_partition_response(
        &mut self,
        now_ms: TimeMs,
        partition: TopicPartition,
        result: Result<LeaderAndIsr, KafkaError>,
        effects: &mut Effects,
    ) -> Option<Message> {
        self.replicate(now_ms, effects, |rm, ctx| rm.handle_alter_partition_response(&partition, result, ctx));
        None
    }

    /// A coordinator's answer to a verification this broker asked for: a TxnOffsetCommit's, or a Produce's.
    fn handle_verification_answer(
        &mut self,
        now_ms: TimeMs,
        corr: u64,
        result: Result<(), KafkaError>,
        effects: &mut Effects,
    ) -> Option<Message> {
        if self.group_runtime.awaits_verification(corr) {
            self.run_groups(now_ms, effects, |rt, ctx| rt.complete_verification(corr, result, ctx));
        } else {
            self.replicate(now_ms, effects, |rm, ctx| rm.complete_verification(corr, result, ctx));
        }
        None
    }

    /// `ReplicaManager.applyDelta` for one metadata delta: partitions created with a replica here get a
    /// log, then the coordinators follow the leadership of their partitions.
    fn apply_delta(
        &mut self,
        now_ms: TimeMs,
        changes: Vec<(TopicPartition, PartitionRegistration)>,
        effects: &mut Effects,
    ) -> Option<Message> {
        for (tp, reg) in &changes {
            if reg.replicas.contains(&self.id) && !self.replica_manager.logs.contains_key(tp) {
                // A partition created at run time: this broker hosts one of its replicas from now on.
                self.replica_manager.logs.insert(tp.clone(), PartitionLog::new());
            }
        }
        self.replicate(now_ms, effects, |rm, ctx| rm.apply_delta(&changes, ctx));
        let coordinator_log = changes.iter().any(|(tp, _)| *tp == transaction_state_partition());
        let changed: Vec<TopicPartition> = changes.iter().map(|(tp, _)| tp.clone()).collect();
        self.metadata_image.extend(changes);
        // After the whole delta, so that a new coordinator's first markers go to its new leaders.
        if coordinator_log {
            self.take_coordinator_role(now_ms, effects);
        }
        self.run_groups(now_ms, effects, |rt, ctx| rt.take_roles(&changed, ctx));
        None
    }

    /// `handleFetchRequest` from a consumer: its leader's log, or with KIP-392's client metadata any replica's.
    fn handle_fetch(
        &self,
        partition: TopicPartition,
        fetch_offset: Offset,
        isolation: Option<IsolationLevel>,
        client_metadata: bool,
    ) -> Option<Message> {
        let any_replica = client_metadata && !self.config.mutations.has(Mutation::FollowerRefusesConsumerFetch);
        let log = if any_replica { self.replica_log(&partition) } else { self.leader_log(&partition) };
        let result = log.and_then(|log| log.read(fetch_offset, isolation, &self.config.mutations));
        Some(Message::FetchResponse { partition, fetch_offset, result })
    }

    /// `handleListOffsetRequest`.
    fn handle_list_offsets(&self, partition: TopicPartition, isolation: IsolationLevel) -> Option<Message> {
        let result = self.leader_log(&partition).map(|log| log.latest_offset(isolation, &self.config.mutations));
        Some(Message::ListOffsetsResponse { partition, result })
    }

    /// `handleCreateTopicsRequest` on a broker the controller manages: forwarded to it (KIP-590).
    fn handle_create_topics(
        &mut self,
        (client, corr): (&NodeId, u64),
        topics: Vec<NewTopic>,
        validate_only: bool,
        effects: &mut Effects,
    ) -> Option<Message> {
        self.forward_create_topics(Some((client.clone(), corr)), topics, validate_only, effects);
        None
    }

    /// The controller's answer to a forwarded CreateTopics (`ForwardingManager`).
    fn handle_forwarded_response(
        &mut self,
        corr: u64,
        results: Vec<(String, Result<u32, KafkaError>)>,
        effects: &mut Effects,
    ) -> Option<Message> {
        self.forwarded.handle_response(&NodeId::Broker(self.id), corr, results, effects);
        None
    }

    /// Metadata and FindCoordinator (`crate::metadata::handle`), creating through the controller what a
    /// lookup finds missing.
    fn handle_metadata(&mut self, request: MetadataMessage, effects: &mut Effects) -> Option<Message> {
        let group_lookup =
            matches!(request, MetadataMessage::FindCoordinatorRequest { key_type: CoordinatorType::Group, .. });
        if group_lookup && self.groups_replicated() && !self.metadata_cache().contains_topic(GROUP_METADATA_TOPIC) {
            // `KafkaApis.getCoordinator`: the internal topic is created on the first lookup, which is
            // answered COORDINATOR_NOT_AVAILABLE meanwhile.
            self.forward_create_topics(None, vec![offsets_topic()], false, effects);
        }
        let (image, managed, groups) = (&self.metadata_image, self.controller.is_some(), self.groups_replicated());
        let logs = &mut self.replica_manager.logs;
        let reply =
            crate::metadata::handle(self.id, self.config.num_partitions, logs, image, (managed, groups), request);
        let created = auto_created_topics(&reply);
        if !created.is_empty() {
            self.forward_create_topics(None, created, false, effects);
        }
        reply.map(Message::Metadata)
    }

    /// The group coordinator's other requests, then what they write.
    fn handle_group(
        &mut self,
        now_ms: TimeMs,
        (client, corr): (&NodeId, u64),
        request: GroupMessage,
        effects: &mut Effects,
    ) -> Option<Message> {
        self.run_groups(now_ms, effects, |_, ctx| CoordinatorRuntime::handle((client, corr), request, ctx));
        None
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
        let transactions = if has_transaction_log(&self.replica_manager) {
            self.txn_manager.loaded_at.is_some()
        } else {
            self.id == COORDINATOR_BROKER
        };
        let refused = match message {
            // The broker's own word to its coordinator: one that no longer owns the group ignores it.
            Message::Group(GroupMessage::GroupStored { .. }) => false,
            Message::Group(request) => {
                !request.group_id().is_some_and(|g| self.group_runtime.owns_group(g, self.groups_replicated(), self.id))
            }
            _ => !transactions,
        };
        if !refused {
            return None;
        }
        // `getTransactionState`: COORDINATOR_LOAD_IN_PROGRESS while the partition is in `loadingPartitions`.
        let error = match message {
            Message::Group(_) => KafkaError::NotCoordinator,
            _ if self.txn_manager.loading().is_some() => KafkaError::CoordinatorLoadInProgress,
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
            Message::Group(request) => request.error_response(error).map(Message::Group),
            _ => None,
        }
    }

    /// Sends CreateTopics to the controller under a new correlation id (`ForwardingManager`); the answer
    /// goes back to `asker`, or nowhere for an auto-creation.
    fn forward_create_topics(
        &mut self,
        asker: Option<(NodeId, u64)>,
        topics: Vec<NewTopic>,
        validate_only: bool,
        effects: &mut Effects,
    ) {
        let controller = self.controller.clone().expect("only a controller-managed broker forwards");
        let (me, corr, n) = (self.node(), self.correlation_ids.take(), self.config.num_partitions);
        self.forwarded.forward_create_topics((&me, &controller), corr, asker, topics, validate_only, n, effects);
    }

    /// The log of a partition this broker leads, for a client's read: a follower's copy is not served
    /// (`Partition.localLogWithEpochOrThrow` with `fetchOnlyLeader`).
    fn leader_log(&self, tp: &TopicPartition) -> Result<&PartitionLog, KafkaError> {
        let log = self.replica_log(tp)?;
        match self.replica_manager.partitions.get(tp) {
            Some(p) if p.leader != self.id => Err(KafkaError::NotLeaderOrFollower),
            _ => Ok(log),
        }
    }

    /// The log of a partition this broker hosts a replica of, leader or follower: a read bounded by this
    /// replica's own HW and LSO (`Partition.localLogWithEpochOrThrow` without `fetchOnlyLeader`).
    fn replica_log(&self, tp: &TopicPartition) -> Result<&PartitionLog, KafkaError> {
        self.replica_manager.logs.get(tp).ok_or_else(|| self.metadata_cache().not_hosted(tp))
    }

    /// The group's `__consumer_offsets` partition (`CoordinatorRuntime::offsets_partition`).
    fn offsets_partition(&mut self, group_id: &str) -> TopicPartition {
        CoordinatorRuntime::offsets_partition(group_id, self.groups_replicated(), &mut self.replica_manager)
    }

    /// OffsetFetch, served by the group coordinator runtime.
    fn handle_offset_fetch(
        &mut self,
        now_ms: TimeMs,
        asked: (String, Option<Vec<TopicPartition>>, bool),
        (client, corr): (&NodeId, u64),
        effects: &mut Effects,
    ) -> Option<Message> {
        let to = (client.clone(), corr);
        self.run_groups(now_ms, effects, |_, ctx| CoordinatorRuntime::fetch_offsets(asked, to, ctx));
        None
    }

    /// TxnOffsetCommit (`KafkaApis.handleTxnOffsetCommitRequest`): partitions of unknown topics fail alone;
    /// the group coordinator commits the rest (`CoordinatorRuntime::commit_transactional_offsets`), once
    /// verified with the transaction coordinator.
    fn handle_txn_offset_commit(
        &mut self,
        now_ms: TimeMs,
        asked: TxnOffsetCommit,
        offsets: Vec<(TopicPartition, CommittedOffset)>,
        (reply_to, corr): (&NodeId, u64),
        effects: &mut Effects,
    ) -> Option<Message> {
        let cache = self.metadata_cache();
        let (known, unknown): (Vec<_>, Vec<_>) = offsets.into_iter().partition(|(tp, _)| cache.contains_partition(tp));
        let unknown = unknown.into_iter().map(|(tp, _)| (tp, Err(KafkaError::UnknownTopicOrPartition))).collect();
        // Only a commit the group coordinator goes on to write is verified.
        let verification = (!known.is_empty() && !asked.group_id.is_empty())
            .then(|| self.verify_txn_offsets(now_ms, &asked, reply_to, corr, effects));
        let to = (reply_to.clone(), corr);
        self.run_groups(now_ms, effects, |rt, ctx| {
            rt.commit_transactional_offsets(asked, known, unknown, verification, to, ctx)
        });
        None
    }

    /// A TxnOffsetCommit's verification (`CoordinatorRuntime::txn_offsets_verification`): where this
    /// broker's own coordinator owns the transactional id, answered by it at once; else the coordinator on
    /// another broker is asked by the group coordinator runtime.
    fn verify_txn_offsets(
        &mut self,
        now_ms: TimeMs,
        asked: &TxnOffsetCommit,
        reply_to: &NodeId,
        corr: u64,
        effects: &mut Effects,
    ) -> TxnOffsetsVerification {
        let here = !has_transaction_log(&self.replica_manager) || self.txn_manager.loaded_at.is_some();
        let (verify, adds, local) = CoordinatorRuntime::txn_offsets_verification(&self.config, asked, here);
        if verify && !local {
            let coordinator = self.metadata_cache().transaction_coordinator();
            return TxnOffsetsVerification::Remote { coordinator, adds };
        }
        if !verify {
            return TxnOffsetsVerification::Done(Ok(()));
        }
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
        TxnOffsetsVerification::Done(verified.expect("a verification is answered at once").map_err(verification_error))
    }
}
