//! Kafka's `ReplicationControlManager`, the controller's partition bookkeeping: AlterPartition's checks,
//! the partitions an event touches, their leader and ISR updates, and a topic's effective min ISR.

use crate::error::KafkaError;
use crate::mutation::Mutation;
use crate::protocol::metadata::{LeaderAndIsr, PartitionRegistration};
use crate::protocol::Effects;
use crate::topic::TRANSACTION_STATE_TOPIC;
use crate::types::TopicPartition;

use super::partition_change_builder::ChangeRequest;
use super::Controller;

impl Controller {
    pub(super) fn partitions_where(&self, pick: impl Fn(&PartitionRegistration) -> bool) -> Vec<TopicPartition> {
        self.partitions.iter().filter(|(_, r)| pick(r)).map(|(tp, _)| tp.clone()).collect()
    }

    /// `generateLeaderAndIsrUpdates`: each partition's target ISR is its ISR without `remove` and
    /// `unclean_shutdown`; the changes are committed and told to every live broker as one delta.
    pub(super) fn generate_updates(
        &mut self,
        mut tps: Vec<TopicPartition>,
        remove: Option<u32>,
        unclean_shutdown: Option<u32>,
        acceptable: &dyn Fn(u32) -> bool,
    ) -> Effects {
        tps.retain(|tp| {
            let gone = [remove, unclean_shutdown];
            let target_isr =
                self.partitions[tp].state.isr.iter().copied().filter(|r| !gone.contains(&Some(*r))).collect();
            self.change(tp, ChangeRequest { target_isr, acceptable, unclean_shutdown })
        });
        let mut effects = Effects::default();
        self.publish(&tps, &mut effects);
        effects
    }

    /// `getTopicEffectiveMinIsr`: the partition's `min.insync.replicas`, capped by its replication factor.
    pub(super) fn effective_min_isr(&self, tp: &TopicPartition) -> usize {
        let (user, transactions) = self.min_insync_replicas;
        let min_isr = if tp.topic == TRANSACTION_STATE_TOPIC { transactions } else { user };
        (min_isr as usize).min(self.partitions[tp].replicas.len())
    }

    /// `ReplicationControlManager.validateAlterPartitionData`, in its order: the partition exists, the
    /// leader epoch is current, the sender leads, the partition epoch is current, the new ISR is within
    /// the replicas and keeps the leader, and names no fenced broker (KIP-841: a fetch sent before its
    /// broker died must not bring it back into the ISR).
    pub(super) fn alter_partition(
        &mut self,
        broker: u32,
        tp: &TopicPartition,
        leader_epoch: i32,
        partition_epoch: i32,
        new_isr: Vec<u32>,
    ) -> Result<LeaderAndIsr, KafkaError> {
        let reg = self.partitions.get(tp).ok_or(KafkaError::UnknownTopicOrPartition)?;
        if leader_epoch != reg.state.leader_epoch {
            return Err(KafkaError::FencedLeaderEpoch);
        }
        if broker != reg.state.leader {
            return Err(KafkaError::InvalidRequest);
        }
        if partition_epoch != reg.state.partition_epoch {
            return Err(KafkaError::InvalidUpdateVersion);
        }
        if !new_isr.contains(&broker) || new_isr.iter().any(|r| !reg.replicas.contains(r)) {
            return Err(KafkaError::InvalidRequest);
        }
        let fenced_member = new_isr.iter().any(|r| self.fenced.contains(r));
        if fenced_member && !self.mutations.has(Mutation::FencedReplicaJoinsIsr) {
            return Err(KafkaError::IneligibleReplica);
        }
        // Through `PartitionChangeBuilder`, so that a shrink below `min.insync.replicas` keeps the ELR
        // and a growth back to it clears the ELR.
        let fenced = self.fenced.clone();
        let acceptable = move |r: u32| !fenced.contains(&r);
        self.change(tp, ChangeRequest { target_isr: new_isr, acceptable: &acceptable, unclean_shutdown: None });
        Ok(self.partitions[tp].state.clone())
    }
}
