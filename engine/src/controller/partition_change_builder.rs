//! Kafka's `PartitionChangeBuilder`: one partition's change, its ISR, KIP-966's ELR and last known leader,
//! and the leader it elects.

use crate::mutation::{Mutation, Mutations};
use crate::protocol::metadata::PartitionRegistration;
use crate::protocol::NO_LEADER;
use crate::types::TopicPartition;
use std::collections::BTreeSet;

use super::Controller;

/// What a partition change asks of `PartitionChangeBuilder`: the target ISR, who may lead, and a broker
/// that shut down uncleanly (it leaves the ELR).
pub(super) struct ChangeRequest<'a> {
    pub(super) target_isr: Vec<u32>,
    pub(super) acceptable: &'a dyn Fn(u32) -> bool,
    pub(super) unclean_shutdown: Option<u32>,
}

impl Controller {
    /// `PartitionChangeBuilder.build` without reassignments: the ELR kept (`maybePopulateTargetElr`), a
    /// leader elected (`tryElection`), the ELR, ISR and last known leader written, and the change
    /// committed if anything changed (a new leader bumps the leader epoch, any change the partition
    /// epoch). Returns whether it changed.
    pub(super) fn change(&mut self, tp: &TopicPartition, request: ChangeRequest<'_>) -> bool {
        let elr_enabled = self.eligible_leader_replicas;
        let min_isr = self.effective_min_isr(tp);
        let reg = &self.partitions[tp];
        let mut isr = request.target_isr;
        let mut elr = reg.elr.clone();
        if elr_enabled {
            elr = Self::target_elr(reg, &isr, &elr, min_isr, request.unclean_shutdown, &self.mutations);
        }
        let (leader, unclean) = self.elect(reg, &isr, &elr, request.acceptable);
        let leader_changed = leader != reg.state.leader;
        let mut isr_written = None;
        if leader_changed {
            if elr.contains(&leader) {
                isr = vec![leader];
                elr.retain(|r| *r != leader);
            }
            if unclean {
                // The new leader alone in the ISR: what only the others held is lost.
                isr_written = Some(vec![leader]);
            }
        }
        if isr_written.is_some() || !elr_enabled {
            elr.clear(); // `maybeUpdateRecordElr`: an unclean election or ELR off keeps none.
        }
        let isr = match isr_written {
            Some(isr) => isr,
            // Without ELR an empty ISR is never written: the last member stays.
            None if isr.is_empty() && !elr_enabled => reg.state.isr.clone(),
            None => isr,
        };
        let mut last_known_elr = reg.last_known_elr.clone();
        if elr_enabled {
            // `maybeUpdateLastKnownLeader`: set when the partition first becomes leaderless, cleared once
            // it has a leader again.
            if leader_changed && leader == NO_LEADER && last_known_elr.is_empty() {
                last_known_elr = vec![reg.state.leader];
            } else if leader_changed && leader != NO_LEADER {
                last_known_elr.clear();
            }
        }
        let reg = self.partitions.get_mut(tp).expect("a registered partition");
        if !leader_changed && isr == reg.state.isr && elr == reg.elr && last_known_elr == reg.last_known_elr {
            return false;
        }
        if leader_changed {
            reg.state.leader_epoch += 1;
        }
        reg.state.leader = leader;
        reg.state.isr = isr;
        reg.elr = elr;
        reg.last_known_elr = last_known_elr;
        reg.state.partition_epoch += 1;
        true
    }

    /// `maybePopulateTargetElr`: at or above `min.insync.replicas` the ISR needs no ELR; below it, the
    /// members leaving the ISR join the ELR, except one that shut down uncleanly.
    fn target_elr(
        reg: &PartitionRegistration,
        target_isr: &[u32],
        elr: &[u32],
        min_isr: usize,
        unclean_shutdown: Option<u32>,
        mutations: &Mutations,
    ) -> Vec<u32> {
        if target_isr.len() >= min_isr {
            return Vec::new();
        }
        if mutations.has(Mutation::ElrNotKept) {
            return elr.to_vec();
        }
        let candidates: BTreeSet<u32> = elr.iter().chain(&reg.state.isr).copied().collect();
        candidates.into_iter().filter(|r| !target_isr.contains(r) && Some(*r) != unclean_shutdown).collect()
    }

    /// `PartitionChangeBuilder.electAnyLeader`: the current leader if it may still lead; else the first
    /// replica in order that is in the ISR, or in the ELR when the ISR is empty, and acceptable (alive);
    /// else the last known leader when the ISR and ELR are empty (an unclean election); else, with
    /// unclean election on, the first acceptable replica (unclean); else none. Returns (leader, unclean).
    fn elect(
        &self,
        reg: &PartitionRegistration,
        isr: &[u32],
        elr: &[u32],
        acceptable: &dyn Fn(u32) -> bool,
    ) -> (u32, bool) {
        let elr_electable = !self.mutations.has(Mutation::ElrMemberNotElected);
        let valid =
            |r: u32| (isr.contains(&r) || (elr_electable && isr.is_empty() && elr.contains(&r))) && acceptable(r);
        if reg.state.leader != NO_LEADER && valid(reg.state.leader) {
            return (reg.state.leader, false);
        }
        if let Some(l) = reg.replicas.iter().copied().find(|r| valid(*r)) {
            return (l, false);
        }
        let last_known = self.eligible_leader_replicas
            && !self.mutations.has(Mutation::LastKnownLeaderNotElected)
            && isr.is_empty()
            && elr.is_empty()
            && reg.last_known_elr.len() == 1
            && acceptable(reg.last_known_elr[0]);
        if last_known {
            return (reg.last_known_elr[0], true);
        }
        match reg.replicas.iter().copied().find(|r| acceptable(*r)) {
            Some(l) if self.unclean_leader_election => (l, true),
            _ => (NO_LEADER, false),
        }
    }
}
