//! An independent reading of a partition log: which transactions it holds, where they start and end,
//! and how each ended. Invariants compare the engine's own bookkeeping (producer state, LSO, aborted
//! index) against this, recomputed from the batches alone.

use std::collections::BTreeMap;
use txnsim_engine::record::{BatchBody, RecordBatch};
use txnsim_engine::{CoordinatorEpoch, Offset, PartitionLog, ProducerEpoch, ProducerId, TransactionResult};

/// A marker as found in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MarkerAt {
    pub offset: Offset,
    pub producer_id: ProducerId,
    pub epoch: ProducerEpoch,
    pub result: TransactionResult,
    pub coordinator_epoch: CoordinatorEpoch,
}

/// One transaction on one partition: its data batches and the marker that closed it, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnSpan {
    pub producer_id: ProducerId,
    pub first_offset: Offset,
    /// `(base_offset, last_offset)` of each data batch.
    pub batches: Vec<(Offset, Offset)>,
    /// Offsets of the records it holds (compaction may leave gaps).
    pub record_offsets: Vec<Offset>,
    pub marker: Option<MarkerAt>,
    /// No earlier batch or marker of this producer is in the log: if segments were dropped, the
    /// transaction may have begun in one of them.
    pub first_of_producer: bool,
    /// The AbortedTxn `last_stable_offset` Kafka would write for it if aborted: the first offset of the
    /// earliest other producer's open transaction when the marker was appended, else marker + 1.
    pub index_lso: Option<Offset>,
}

impl TxnSpan {
    pub fn outcome(&self) -> Option<TransactionResult> {
        self.marker.map(|m| m.result)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogFacts {
    /// Every transaction, in order of first offset.
    pub txns: Vec<TxnSpan>,
    /// Markers that closed nothing (empty transactions on this partition, or resends).
    pub stray_markers: Vec<MarkerAt>,
    /// Non-transactional batches from a producer that had a transaction open: `(offset, pid)`.
    pub nontxn_in_open_txn: Vec<(Offset, ProducerId)>,
    /// Which transaction (index into `txns`) each data record belongs to, by offset; `None` for
    /// non-transactional records.
    pub record_txn: BTreeMap<Offset, Option<usize>>,
    /// Value of each data record, by offset.
    pub values: BTreeMap<Offset, String>,
}

impl MarkerAt {
    /// The marker a batch holds, with its writer; none for data and for empty control batches.
    pub fn of(b: &RecordBatch) -> Option<MarkerAt> {
        match (&b.body, b.producer) {
            (BatchBody::Control(Some(m)), Some(p)) => Some(MarkerAt {
                offset: b.base_offset,
                producer_id: p.producer_id,
                epoch: p.epoch,
                result: m.result,
                coordinator_epoch: m.coordinator_epoch,
            }),
            _ => None,
        }
    }
}

/// Reads a log batch by batch into its `LogFacts`, so a log that grew is read from where reading
/// stopped (the scenario runner checks every state of logs of thousands of transactions).
#[derive(Clone, Debug, Default)]
pub struct LogFactsBuilder {
    pub facts: LogFacts,
    /// Each producer's open transaction (index into `facts.txns`).
    open: BTreeMap<ProducerId, usize>,
    seen: std::collections::BTreeSet<ProducerId>,
}

impl LogFactsBuilder {
    /// The open transactions, in order of first offset.
    pub fn open_txns(&self) -> Vec<usize> {
        let mut open: Vec<usize> = self.open.values().copied().collect();
        open.sort_unstable();
        open
    }

    /// A builder for the log from `first` on that still knows the transactions open at `first`, which
    /// began below it. Kafka's producer state keeps a transaction whose first batches went with dropped
    /// segments (`ProducerStateManager.onLogStartOffsetIncremented` removes only completed ones), so the
    /// LSO and the ABORT's aborted-index entry still start at the transaction's first offset.
    pub fn carried_below(&self, first: Offset) -> LogFactsBuilder {
        let mut carried = LogFactsBuilder::default();
        let open_at_first = |t: &&TxnSpan| t.first_offset < first && t.marker.is_none_or(|m| m.offset >= first);
        for t in self.facts.txns.iter().filter(open_at_first) {
            carried.facts.txns.push(TxnSpan {
                batches: Vec::new(),
                record_offsets: Vec::new(),
                marker: None,
                index_lso: None,
                first_of_producer: false,
                ..t.clone()
            });
            carried.open.insert(t.producer_id, carried.facts.txns.len() - 1);
            carried.seen.insert(t.producer_id);
        }
        carried
    }

    /// Reads the next batch (batches come in offset order); the transaction it closed, if it did.
    pub fn push(&mut self, b: &RecordBatch) -> Option<usize> {
        let facts = &mut self.facts;
        let first_of_producer = b.producer_id().is_some_and(|pid| self.seen.insert(pid));
        match &b.body {
            BatchBody::Data(records) => {
                let pid = b.producer_id();
                let txn = match (pid, b.is_transactional) {
                    (Some(pid), true) => {
                        let idx = *self.open.entry(pid).or_insert_with(|| {
                            facts.txns.push(TxnSpan {
                                producer_id: pid,
                                first_offset: b.base_offset,
                                batches: Vec::new(),
                                record_offsets: Vec::new(),
                                marker: None,
                                first_of_producer,
                                index_lso: None,
                            });
                            facts.txns.len() - 1
                        });
                        facts.txns[idx].batches.push((b.base_offset, b.last_offset));
                        facts.txns[idx].record_offsets.extend(records.iter().map(|r| r.offset));
                        Some(idx)
                    }
                    (Some(pid), false) => {
                        if self.open.contains_key(&pid) {
                            facts.nontxn_in_open_txn.push((b.base_offset, pid));
                        }
                        None
                    }
                    (None, _) => None,
                };
                for r in records {
                    facts.record_txn.insert(r.offset, txn);
                    facts.values.insert(r.offset, r.value.clone());
                }
                None
            }
            BatchBody::Control(_) => {
                let at = MarkerAt::of(b)?;
                match self.open.remove(&at.producer_id) {
                    Some(idx) => {
                        let other_open = self.open.values().map(|&i| facts.txns[i].first_offset).min();
                        facts.txns[idx].marker = Some(at);
                        facts.txns[idx].index_lso = Some(other_open.unwrap_or(at.offset + 1));
                        Some(idx)
                    }
                    None => {
                        facts.stray_markers.push(at);
                        None
                    }
                }
            }
        }
    }
}

impl LogFacts {
    pub fn of(log: &PartitionLog) -> LogFacts {
        LogFacts::of_batches(log.batches())
    }

    pub fn of_batches<'a>(batches: impl Iterator<Item = &'a RecordBatch>) -> LogFacts {
        let mut builder = LogFactsBuilder::default();
        for b in batches {
            builder.push(b);
        }
        builder.facts
    }

    /// Every marker in offset order.
    pub fn markers(&self) -> Vec<MarkerAt> {
        let mut all: Vec<MarkerAt> =
            self.txns.iter().filter_map(|t| t.marker).chain(self.stray_markers.iter().copied()).collect();
        all.sort_by_key(|m| m.offset);
        all
    }

    /// The LSO Kafka's rules give a replica holding this log at `high_watermark`: the first offset of the
    /// earliest transaction without a marker below `peak`, clamped to `[log_start, high_watermark]`.
    /// `peak` is the highest HW since the replica last rebuilt its producer state: a transaction whose
    /// marker fell below it left `unreplicatedTxns` for good, even if the HW moved back since
    /// (`UnifiedLog.updateHighWatermarkMetadata` warns of a non-monotonic update and goes on).
    pub fn expected_lso(&self, log_start: Offset, high_watermark: Offset, peak: Offset) -> Offset {
        let first_unstable = self
            .txns
            .iter()
            .filter(|t| t.marker.is_none_or(|m| m.offset >= peak))
            .map(|t| t.first_offset)
            .min()
            .map(|o| o.max(log_start));
        match first_unstable {
            Some(o) if o < high_watermark => o,
            _ => high_watermark,
        }
    }

    /// The transaction a record at `offset` belongs to, if it is transactional.
    pub fn txn_of(&self, offset: Offset) -> Option<&TxnSpan> {
        self.record_txn.get(&offset).copied().flatten().map(|i| &self.txns[i])
    }

    /// Whether a read_committed reader may deliver the record at `offset` once it is below the LSO.
    pub fn is_committed_data(&self, offset: Offset) -> bool {
        match self.record_txn.get(&offset) {
            None => false,
            Some(None) => true,
            Some(Some(i)) => self.txns[*i].outcome() == Some(TransactionResult::Commit),
        }
    }
}
