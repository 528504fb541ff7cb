//! The workload's plan of a transaction, drawn from the seed: the simulation's producers and the
//! `sweep --target` workload draw it alike.

use crate::profile::ProfileParams;
use crate::rng::SimRng;
use txnsim_engine::TopicPartition;

/// What a producer means to do in its current transaction.
pub struct TxnPlan {
    pub partitions: Vec<TopicPartition>,
    pub sends_left: u32,
    pub next: usize,
    pub commit: bool,
}

impl TxnPlan {
    /// The profile's next transaction over `partitions`: which partitions, how many sends, commit or
    /// abort (the sim and the target sweep draw it alike from the seed).
    pub fn draw(params: &ProfileParams, rng: &mut SimRng, partitions: &[TopicPartition]) -> TxnPlan {
        let (lo, hi) = params.partitions_per_txn;
        let k = (rng.range(lo as u64, hi as u64) as usize).clamp(1, partitions.len());
        let mut pool = partitions.to_vec();
        let mut chosen = Vec::new();
        for _ in 0..k {
            let i = rng.index(pool.len());
            chosen.push(pool.remove(i));
        }
        let sends = rng.range(params.sends_per_txn.0 as u64, params.sends_per_txn.1 as u64) as u32;
        let commit = rng.chance(params.commit_ratio);
        TxnPlan { sends_left: sends.max(chosen.len() as u32), partitions: chosen, next: 0, commit }
    }
}
