//! `TransactionMarkerChannelManager`: a decided transaction's markers, one WriteTxnMarkers per partition
//! leader, resent until every partition has answered, and its completion handler
//! (`TransactionMarkerRequestCompletionHandler`).

use super::{Ctx, TransactionCoordinator, TransactionState, TxnTransition};
use crate::error::KafkaError;
use crate::mutation::Mutation;
use crate::protocol::{Message, NodeId, Timer, TxnMarkerEntry};
use crate::types::{ProducerId, ProducerIdAndEpoch, TimeMs, TopicPartition, TransactionResult};
use std::collections::{BTreeMap, BTreeSet};

/// How long the marker channel waits for WriteTxnMarkers answers before resending (`request.timeout.ms`).
pub const MARKER_RETRY_MS: TimeMs = 30_000;

/// Markers of one decided transaction still to be acknowledged by partition leaders.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PendingCompletion {
    pub transactional_id: String,
    pub result: TransactionResult,
    pub producer: ProducerIdAndEpoch,
    pub remaining: BTreeSet<TopicPartition>,
    /// Index into `decisions`.
    pub decision: usize,
    /// Every marker is acknowledged and the Complete* record is being appended.
    pub completing: bool,
}

impl TransactionCoordinator {
    /// `TransactionMarkerChannelManager.addTxnMarkersToSend`: one WriteTxnMarkers per leader.
    pub(super) fn send_markers(&mut self, producer_id: ProducerId, ctx: &mut Ctx<'_>) {
        let pending = self.pending_completions.get(&producer_id).expect("markers of a pending completion");
        let remaining = pending.remaining.clone();
        self.send_markers_for(producer_id, &remaining, ctx);
    }

    /// The markers of `partitions` (all still unacknowledged), one WriteTxnMarkers per leader.
    fn send_markers_for(&mut self, producer_id: ProducerId, partitions: &BTreeSet<TopicPartition>, ctx: &mut Ctx<'_>) {
        let pending = self.pending_completions.get(&producer_id).expect("markers of a pending completion").clone();
        if pending.remaining.is_empty() {
            self.complete(producer_id, ctx);
            return;
        }
        let mut by_leader: BTreeMap<NodeId, Vec<TopicPartition>> = BTreeMap::new();
        for tp in partitions {
            // An unknown leader keeps the partition pending; it is retried with the next resend.
            if let Some(leader) = ctx.leaders.leader_of(tp) {
                by_leader.entry(leader).or_default().push(tp.clone());
            }
        }
        for (leader, partitions) in by_leader {
            self.next_correlation_id += 1;
            self.marker_requests.insert(self.next_correlation_id, pending.decision);
            let entry = TxnMarkerEntry {
                producer_id,
                producer_epoch: pending.producer.epoch,
                result: pending.result,
                partitions,
                coordinator_epoch: self.coordinator_epoch,
                transaction_version: self.txns[&pending.transactional_id].client_transaction_version,
            };
            ctx.effects.send(
                ctx.me,
                &leader,
                self.next_correlation_id,
                Message::WriteTxnMarkersRequest { markers: vec![entry] },
            );
        }
        // The marker channel retries until every partition has answered (lost requests, dead ctx.leaders).
        ctx.effects.timers.push((ctx.now_ms + MARKER_RETRY_MS, Timer::ResendTxnMarkers { decision: pending.decision }));
    }
    /// The decision an outstanding WriteTxnMarkers request (by correlation id) is for, if it is still
    /// awaited: drivers use it to tell which marker messages in flight belong to which decision.
    pub fn marker_request_decision(&self, correlation_id: u64) -> Option<usize> {
        self.marker_requests.get(&correlation_id).copied()
    }

    /// A marker retry timer: resend what is still unacknowledged for that decision.
    pub fn on_resend_markers(&mut self, decision: usize, ctx: &mut Ctx<'_>) {
        let pid = self.decisions.get(decision).map(|d| d.producer_id);
        let Some(pid) = pid else { return };
        if self.pending_completions.get(&pid).is_some_and(|p| p.decision == decision && !p.completing) {
            self.send_markers(pid, ctx);
        }
    }

    /// `TransactionMarkerRequestCompletionHandler`: acknowledged partitions leave the pending set; a retriable
    /// error resends; a fencing error cancels the rest. When nothing remains, Complete* is written. Like
    /// Kafka's per-request callback, an answer only counts for the decision its request carried.
    pub fn handle_write_txn_markers_response(
        &mut self,
        correlation_id: u64,
        results: &[(ProducerId, TopicPartition, Result<u64, KafkaError>)],
        ctx: &mut Ctx<'_>,
    ) {
        let Some(decision) = self.marker_requests.remove(&correlation_id) else {
            return; // Sent before a restart: that request died with the old coordinator.
        };
        let pid = self.decisions[decision].producer_id;
        if self.pending_completions.get(&pid).is_none_or(|p| p.decision != decision || p.completing) {
            // An answer to a resend that crossed the first answer: the decision already completed.
            if ctx.config.mutations.has(Mutation::DoubleComplete) {
                self.write_completion_again(decision, ctx.now_ms);
            }
            return;
        }
        let pending = self.pending_completions.get_mut(&pid).expect("checked above");
        let mut retry = BTreeSet::new();
        for (rpid, tp, result) in results {
            assert_eq!(*rpid, pid, "a WriteTxnMarkers answer names the producer its request did");
            match result {
                Ok(offset) => {
                    pending.remaining.remove(tp);
                    self.decisions[decision].markers.entry(tp.clone()).or_insert(*offset);
                }
                Err(KafkaError::InvalidProducerEpoch | KafkaError::TransactionCoordinatorFenced) => {
                    // A newer coordinator owns this producer now: stop sending, complete nothing
                    // (`removeMarkersForTxn`); that coordinator finishes the transaction.
                    self.pending_completions.remove(&pid);
                    self.decisions[decision].abandoned = true;
                    return;
                }
                Err(_) => {
                    retry.insert(tp.clone());
                }
            }
        }
        if pending.remaining.is_empty() {
            self.complete(pid, ctx);
        } else if ctx.config.mutations.has(Mutation::MarkerRetryResendsAllPartitions) && !retry.is_empty() {
            // The bug: partitions whose markers are still in flight to other leaders are sent again, and
            // the first request, arriving late, can close the producer's next transaction (TV1).
            self.send_markers(pid, ctx);
        } else if !retry.is_empty() {
            // `TransactionMarkerRequestCompletionHandler`: only this answer's failed partitions go back on
            // the queue; the others' requests are still in flight on their own connections.
            self.send_markers_for(pid, &retry, ctx);
        }
    }

    /// The `DoubleComplete` bug: a second completion write for an already completed decision, unchecked,
    /// over whatever state the transactional id is in now (possibly a newer Ongoing transaction).
    fn write_completion_again(&mut self, decision: usize, now_ms: TimeMs) {
        let d = &self.decisions[decision];
        let to = match d.result {
            TransactionResult::Commit => TransactionState::CompleteCommit,
            TransactionResult::Abort => TransactionState::CompleteAbort,
        };
        let meta = self.txns.get_mut(&d.transactional_id).expect("decided ids have metadata");
        meta.state = to;
        meta.txn_last_update_timestamp_ms = now_ms;
        meta.transitions.push(TxnTransition { state: to, timestamp_ms: now_ms, txn_timeout_ms: meta.txn_timeout_ms });
        meta.topic_partitions.clear();
    }
}
