//! The produce purgatory: Kafka's `DelayedProduce`. An acks=all write (a Produce, WriteTxnMarkers, the
//! coordinators' own appends) is answered once the HW of every partition it wrote passes its write, with
//! NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below `min.insync.replicas` meanwhile, or with
//! REQUEST_TIMED_OUT when its timeout expires first.

use super::{ReplicaCtx, ReplicaManager};
use crate::error::KafkaError;
use crate::protocol::group::GroupMessage;
use crate::protocol::{Message, NodeId, ProduceAck};
use crate::types::{Offset, ProducerId, TimeMs, TopicPartition};

/// The answer an acks=all write waits to send.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DelayedResponse {
    Produce {
        partition: TopicPartition,
        ack: ProduceAck,
    },
    Markers {
        results: Vec<(ProducerId, TopicPartition, Result<Offset, KafkaError>)>,
    },
    /// The coordinator's `__transaction_state` append, answered to its own broker.
    TxnLog {
        transactional_id: String,
    },
    /// A group coordinator's answer to an offset commit, sent once its records are replicated.
    Group {
        answer: GroupMessage,
    },
    /// A SyncGroup's metadata record, whose outcome goes to the group coordinator of its own broker.
    GroupStored {
        group_id: String,
        generation: i32,
    },
}

/// One appended partition of a delayed write: the HW it waits for and where its result goes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AckWait {
    pub partition: TopicPartition,
    /// The batch's last offset + 1 (`ProducePartitionStatus.requiredOffset`).
    pub required_offset: Offset,
    /// The index of this partition's entry in a `Markers` response.
    pub result_index: usize,
    outcome: Option<Result<(), KafkaError>>,
}

impl AckWait {
    pub fn new(partition: TopicPartition, required_offset: Offset, result_index: usize) -> Self {
        AckWait { partition, required_offset, result_index, outcome: None }
    }
}

/// `DelayedProduce`: an acks=all Produce or WriteTxnMarkers answered once every partition's HW passed
/// its write, or with REQUEST_TIMED_OUT for those still waiting when its timeout expires.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct DelayedProduce {
    pub(super) reply_to: NodeId,
    correlation_id: u64,
    pub(super) expires_ms: TimeMs,
    waits: Vec<AckWait>,
    response: DelayedResponse,
}

impl ReplicaManager {
    /// `DelayedProduce` for a write to one replicated partition: `response` goes to `to` once the HW passes
    /// `required_offset` (the batch's last offset + 1), or fails with the write's error or timeout.
    pub fn await_hw(
        &mut self,
        (tp, required_offset): (TopicPartition, Offset),
        (to, corr): (NodeId, u64),
        response: DelayedResponse,
        timeout_ms: TimeMs,
        ctx: &mut ReplicaCtx<'_>,
    ) {
        let waits = vec![AckWait::new(tp, required_offset, 0)];
        self.await_acks(to, corr, waits, response, timeout_ms, ctx);
    }

    /// `ReplicaManager.appendRecords` with acks=all: answers now if every partition's HW already passed its
    /// write, else parks the answer in the produce purgatory.
    #[allow(clippy::too_many_arguments)]
    pub fn await_acks(
        &mut self,
        reply_to: NodeId,
        correlation_id: u64,
        waits: Vec<AckWait>,
        response: DelayedResponse,
        timeout_ms: TimeMs,
        ctx: &mut ReplicaCtx<'_>,
    ) {
        let expires_ms = ctx.now_ms + timeout_ms;
        let mut delayed = DelayedProduce { reply_to, correlation_id, expires_ms, waits, response };
        if self.try_complete_produce(&mut delayed, ctx) {
            Self::send_produce_response(delayed, ctx);
        } else {
            let id = self.next_id();
            self.delayed_produces.insert(id, delayed);
        }
    }

    /// Settles each waiting partition the HW has passed; true when none is left waiting.
    fn try_complete_produce(&self, d: &mut DelayedProduce, ctx: &ReplicaCtx<'_>) -> bool {
        for w in d.waits.iter_mut().filter(|w| w.outcome.is_none()) {
            w.outcome = match (self.partitions.get(&w.partition), self.logs.get(&w.partition)) {
                (Some(p), Some(log)) if p.leader == ctx.me => {
                    p.check_enough_replicas_reach_offset(log, w.required_offset, ctx.config)
                }
                // No longer led here.
                _ => Some(Err(KafkaError::NotLeaderOrFollower)),
            };
        }
        d.waits.iter().all(|w| w.outcome.is_some())
    }

    fn send_produce_response(d: DelayedProduce, ctx: &mut ReplicaCtx<'_>) {
        // The write's outcome: the first partition's error, if any.
        let failed = d.waits.iter().find_map(|w| w.outcome.and_then(Result::err));
        let outcome = failed.map_or(Ok(()), Err);
        let message = match d.response {
            DelayedResponse::Produce { partition, ack } => {
                Message::ProduceResponse { partition, result: outcome.map(|()| ack) }
            }
            DelayedResponse::Markers { mut results } => {
                for w in &d.waits {
                    if let Some(Err(e)) = w.outcome {
                        results[w.result_index].2 = Err(e);
                    }
                }
                Message::WriteTxnMarkersResponse { results }
            }
            DelayedResponse::TxnLog { transactional_id } => {
                Message::TxnLogAppendResponse { transactional_id, result: outcome }
            }
            DelayedResponse::GroupStored { group_id, generation } => {
                Message::Group(GroupMessage::GroupStored { group_id, generation, result: outcome })
            }
            DelayedResponse::Group { answer } => match failed {
                Some(e) => Message::Group(answer.failed_write(e)),
                None => Message::Group(answer),
            },
        };
        ctx.send(&d.reply_to, d.correlation_id, message);
    }

    /// `checkAndComplete` on the produce purgatory; with `expired`, those whose timeout passed are
    /// answered too, REQUEST_TIMED_OUT where they still wait.
    pub(super) fn complete_delayed_produces(&mut self, ctx: &mut ReplicaCtx<'_>, expired: bool) {
        let ids: Vec<u64> = self.delayed_produces.keys().copied().collect();
        for id in ids {
            let mut d = self.delayed_produces.remove(&id).expect("listed above");
            let done = self.try_complete_produce(&mut d, ctx);
            if done || (expired && d.expires_ms <= ctx.now_ms) {
                for w in d.waits.iter_mut().filter(|w| w.outcome.is_none()) {
                    w.outcome = Some(Err(KafkaError::RequestTimedOut));
                }
                Self::send_produce_response(d, ctx);
            } else {
                self.delayed_produces.insert(id, d);
            }
        }
    }
}
