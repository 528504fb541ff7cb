//! A deliberately tiny reference model of the producer layer: per partition a list of entries tagged
//! with their transaction, per transaction an outcome. No producer state, no index, no batches: it
//! answers "what must each reader deliver from offset o" by definition (`UnifiedLog.lastStableOffset`,
//! `CompletedFetch.nextFetchedRecord`), and
//! which client calls succeed by Kafka's client rules. The proptests compare the engine against it.

use std::collections::{BTreeMap, BTreeSet};
use txnsim_engine::{IsolationLevel, Offset, TopicPartition, TransactionVersion};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Open,
    Committed,
    Aborted,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Entry {
    /// A data record; `txn` is `None` for non-transactional writes.
    Data {
        value: String,
        txn: Option<usize>,
    },
    Marker {
        txn: usize,
    },
}

#[derive(Clone, Debug, Default)]
struct Partition {
    entries: Vec<Entry>,
}

/// Why an instance no longer holds its transactional id's current epoch (the client does not know yet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fence {
    None,
    /// A newer instance of the id initialized.
    Superseded,
    /// The coordinator aborted its transaction on timeout (one epoch bump).
    TimedOut,
}

/// What a failed call on a fenced instance left behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Poison {
    None,
    /// Only `abort` may still succeed (TV2 after a timeout, KIP-890).
    Abortable,
    /// Every call fails.
    Fatal,
}

#[derive(Clone, Debug)]
struct Instance {
    transactional_id: String,
    in_txn: bool,
    /// Partitions the current transaction has written to.
    touched: BTreeSet<TopicPartition>,
    fence: Fence,
    poison: Poison,
}

#[derive(Clone, Debug)]
pub struct ReferenceModel {
    transaction_version: TransactionVersion,
    partitions: BTreeMap<TopicPartition, Partition>,
    outcomes: Vec<Outcome>,
    instances: BTreeMap<String, Instance>,
    /// The transaction the coordinator holds open per transactional id, with its partitions.
    open: BTreeMap<String, (usize, BTreeSet<TopicPartition>)>,
}

/// A call's result as the reference predicts it: success (with offsets for writes) or failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Predicted {
    Ok,
    Wrote {
        first_offset: Offset,
        last_offset: Offset,
    },
    /// The markers written, by partition.
    Ended {
        markers: BTreeMap<TopicPartition, Offset>,
    },
    Fails,
}

impl ReferenceModel {
    pub fn new(partitions: impl IntoIterator<Item = TopicPartition>, transaction_version: TransactionVersion) -> Self {
        ReferenceModel {
            transaction_version,
            partitions: partitions.into_iter().map(|tp| (tp, Partition::default())).collect(),
            outcomes: Vec::new(),
            instances: BTreeMap::new(),
            open: BTreeMap::new(),
        }
    }

    /// Under TV2 an EndTxn(abort) from the epoch just before a timeout's bump reads as a retry of that
    /// abort and succeeds (KIP-890 part 2); any other call from a fenced instance is fenced.
    fn abort_recovers(&self, inst: &Instance) -> bool {
        self.transaction_version == TransactionVersion::V2 && inst.fence == Fence::TimedOut
    }

    fn append(&mut self, tp: &TopicPartition, entry: Entry) -> Offset {
        let p = self.partitions.get_mut(tp).expect("known partition");
        p.entries.push(entry);
        p.entries.len() as Offset - 1
    }

    /// Writes the markers of `tid`'s open transaction and records its outcome.
    fn end(&mut self, tid: &str, outcome: Outcome) -> BTreeMap<TopicPartition, Offset> {
        let Some((txn, touched)) = self.open.remove(tid) else { return BTreeMap::new() };
        self.outcomes[txn] = outcome;
        touched.iter().map(|tp| (tp.clone(), self.append(tp, Entry::Marker { txn }))).collect()
    }

    /// `init_producer`: a new instance named `name`; older instances of the id are fenced and the
    /// coordinator aborts the id's open transaction.
    pub fn init(&mut self, name: &str, tid: &str) -> Predicted {
        let markers = self.end(tid, Outcome::Aborted);
        for inst in self.instances.values_mut().filter(|i| i.transactional_id == tid) {
            inst.fence = Fence::Superseded;
        }
        self.instances.insert(
            name.to_string(),
            Instance {
                transactional_id: tid.to_string(),
                in_txn: false,
                touched: BTreeSet::new(),
                fence: Fence::None,
                poison: Poison::None,
            },
        );
        Predicted::Ended { markers }
    }

    pub fn begin(&mut self, name: &str) -> Predicted {
        let inst = self.instances.get_mut(name).expect("initialized");
        if inst.poison != Poison::None || inst.in_txn {
            return Predicted::Fails;
        }
        inst.in_txn = true;
        inst.touched.clear();
        Predicted::Ok
    }

    pub fn send(&mut self, name: &str, tp: &TopicPartition, values: &[String]) -> Predicted {
        let recovers = self.abort_recovers(&self.instances[name]);
        let inst = self.instances.get_mut(name).expect("initialized");
        if inst.poison != Poison::None || !inst.in_txn {
            return Predicted::Fails;
        }
        if inst.fence != Fence::None {
            inst.poison = if recovers { Poison::Abortable } else { Poison::Fatal };
            return Predicted::Fails;
        }
        inst.touched.insert(tp.clone());
        let tid = inst.transactional_id.clone();
        let outcomes = &mut self.outcomes;
        let (txn, parts) = self.open.entry(tid).or_insert_with(|| {
            outcomes.push(Outcome::Open);
            (outcomes.len() - 1, BTreeSet::new())
        });
        parts.insert(tp.clone());
        let txn = *txn;
        let first = self.partitions[tp].entries.len() as Offset;
        for v in values {
            self.append(tp, Entry::Data { value: v.clone(), txn: Some(txn) });
        }
        Predicted::Wrote { first_offset: first, last_offset: first + values.len() as Offset - 1 }
    }

    /// `commit` or `abort`. An instance whose transaction wrote nothing ends it locally (Kafka's client
    /// sends no EndTxn), so that succeeds even when fenced.
    pub fn end_txn(&mut self, name: &str, commit: bool) -> Predicted {
        let recovers = self.abort_recovers(&self.instances[name]);
        let inst = self.instances.get_mut(name).expect("initialized");
        let abortable_only = inst.poison == Poison::Abortable;
        if inst.poison == Poison::Fatal || !inst.in_txn || (abortable_only && commit) {
            return Predicted::Fails;
        }
        if inst.touched.is_empty() {
            inst.in_txn = false;
            return Predicted::Ended { markers: BTreeMap::new() };
        }
        if inst.fence != Fence::None {
            if recovers && !commit {
                // The coordinator already aborted this transaction; the client takes the bumped epoch.
                *inst = Instance {
                    in_txn: false,
                    touched: BTreeSet::new(),
                    fence: Fence::None,
                    poison: Poison::None,
                    ..inst.clone()
                };
                return Predicted::Ended { markers: BTreeMap::new() };
            }
            inst.poison = Poison::Fatal;
            return Predicted::Fails;
        }
        inst.in_txn = false;
        inst.touched.clear();
        let tid = inst.transactional_id.clone();
        Predicted::Ended { markers: self.end(&tid, if commit { Outcome::Committed } else { Outcome::Aborted }) }
    }

    /// The process dies: the instance is gone, its transaction stays open at the coordinator.
    pub fn crash(&mut self, name: &str) {
        self.instances.remove(name);
    }

    /// The coordinator times out `tid`'s open transaction; the instance that owned it is fenced.
    pub fn expire(&mut self, tid: &str) -> Predicted {
        if !self.open.contains_key(tid) {
            return Predicted::Ended { markers: BTreeMap::new() };
        }
        for inst in self.instances.values_mut().filter(|i| i.transactional_id == tid && i.fence == Fence::None) {
            inst.fence = Fence::TimedOut;
        }
        Predicted::Ended { markers: self.end(tid, Outcome::Aborted) }
    }

    /// A plain or idempotent write: no transaction.
    pub fn write_nontxn(&mut self, tp: &TopicPartition, values: &[String]) -> Predicted {
        let first = self.partitions[tp].entries.len() as Offset;
        for v in values {
            self.append(tp, Entry::Data { value: v.clone(), txn: None });
        }
        Predicted::Wrote { first_offset: first, last_offset: first + values.len() as Offset - 1 }
    }

    /// With one replica the high watermark is the log end.
    pub fn high_watermark(&self, tp: &TopicPartition) -> Offset {
        self.partitions[tp].entries.len() as Offset
    }

    /// The first offset on `tp` of any transaction without an outcome; else the high watermark.
    pub fn last_stable_offset(&self, tp: &TopicPartition) -> Offset {
        self.partitions[tp]
            .entries
            .iter()
            .position(|e| matches!(e, Entry::Data { txn: Some(t), .. } if self.outcomes[*t] == Outcome::Open))
            .map(|o| o as Offset)
            .unwrap_or_else(|| self.high_watermark(tp))
    }

    /// What a fresh consumer of `isolation` delivers from `from` once it has drained the partition, and
    /// its position then; `None` if `from` is past the log end.
    pub fn read(
        &self,
        tp: &TopicPartition,
        isolation: IsolationLevel,
        from: Offset,
    ) -> Option<(Vec<(Offset, String)>, Offset)> {
        let p = &self.partitions[tp];
        if from > p.entries.len() as Offset {
            return None;
        }
        let bound = match isolation {
            IsolationLevel::ReadCommitted => self.last_stable_offset(tp),
            IsolationLevel::ReadUncommitted => self.high_watermark(tp),
        };
        let delivered = (from..bound.max(from))
            .filter_map(|o| match &p.entries[o as usize] {
                Entry::Data { value, txn } => {
                    let visible = isolation == IsolationLevel::ReadUncommitted
                        || txn.is_none_or(|t| self.outcomes[t] == Outcome::Committed);
                    visible.then(|| (o, value.clone()))
                }
                Entry::Marker { .. } => None,
            })
            .collect();
        Some((delivered, bound.max(from)))
    }
}
