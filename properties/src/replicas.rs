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
            let committed: BTreeMap<Offset, &RecordBatch> =
                log.batches().filter(|b| b.last_offset < hw).map(|b| (b.base_offset, b)).collect();
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
                let mut held = 0;
                for b in rlog.batches().filter(|b| b.base_offset < hw) {
                    if committed.get(&b.base_offset) != Some(&b) {
                        out.push(Violation::new(
                            Invariant::ReplicaLogMatchesLeader,
                            format!(
                                "{tp}: replica {r}'s batch {}..{} below the HW {hw} is not leader {me}'s batch there",
                                b.base_offset, b.last_offset
                            ),
                        ));
                        break;
                    }
                    held += 1;
                }
                if in_isr && held < committed.len() {
                    out.push(Violation::new(
                        Invariant::ReplicaLogMatchesLeader,
                        format!(
                            "{tp}: ISR member {r} holds {held} of the {} batches below leader {me}'s HW {hw}",
                            committed.len()
                        ),
                    ));
                }
            }
        }
    }
    out
}
