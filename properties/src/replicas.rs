//! Replica invariants: each replica's own log held against the leader's log and HW. Nothing here reads
//! the leader's bookkeeping of its followers (their LEOs as the leader last saw them); only which
//! replicas are in the ISR comes from the leader's partition state.

use crate::catalogue::{Invariant, Violation};
use std::collections::BTreeMap;
use txnsim_engine::protocol::NodeId;
use txnsim_engine::record::RecordBatch;
use txnsim_engine::{Broker, Offset};

/// Checks every replicated partition's followers against its leader. Partitions hosted alone have no
/// followers, so a single-broker cluster has nothing to check.
pub fn check_replicas<'a>(brokers: impl IntoIterator<Item = &'a Broker>) -> Vec<Violation> {
    let brokers: BTreeMap<u32, &Broker> = brokers
        .into_iter()
        .map(|b| {
            let NodeId::Broker(id) = b.id else { unreachable!("a broker's id is a broker id") };
            (id, b)
        })
        .collect();
    let mut out = Vec::new();
    for (&me, leader) in &brokers {
        for (tp, p) in leader.replica_manager.partitions.iter().filter(|(_, p)| p.leader == me) {
            let Some(log) = leader.partition(tp) else { continue };
            let hw = log.high_watermark();
            let batches: BTreeMap<Offset, &RecordBatch> = log.batches().map(|b| (b.base_offset, b)).collect();
            let committed = batches.values().filter(|b| b.last_offset < hw).count();
            for r in p.replicas.iter().filter(|r| **r != me) {
                let Some(rlog) = brokers.get(r).and_then(|b| b.partition(tp)) else { continue };
                let in_isr = p.isr.contains(r);
                if in_isr && rlog.log_end_offset() < hw {
                    out.push(Violation::new(
                        Invariant::HwWithinIsrLogEnds,
                        format!(
                            "{tp}: leader {me}'s HW is {hw}, but ISR member {r}'s log ends at {}",
                            rlog.log_end_offset()
                        ),
                    ));
                }
                // An ISR member's log agrees below the leader's HW; one outside the ISR (a follower yet
                // to truncate a suffix it alone holds, a crashed broker) only below its own HW, which
                // marks what was committed when it last heard from a leader.
                let bound = if in_isr { hw } else { rlog.high_watermark() };
                let mut held = 0;
                for b in rlog.batches().filter(|b| b.base_offset < bound) {
                    if batches.get(&b.base_offset) != Some(&b) {
                        out.push(Violation::new(
                            Invariant::ReplicaLogMatchesLeader,
                            format!(
                                "{tp}: replica {r}'s batch {}..{} below the HW {bound} is not leader {me}'s batch there",
                                b.base_offset, b.last_offset
                            ),
                        ));
                        break;
                    }
                    held += 1;
                }
                if in_isr && held < committed {
                    out.push(Violation::new(
                        Invariant::ReplicaLogMatchesLeader,
                        format!("{tp}: ISR member {r} holds {held} of the {committed} batches below leader {me}'s HW {hw}"),
                    ));
                }
            }
        }
    }
    out
}
