//! Renaming clients, for the model's symmetry reduction. Two producers that differ only in their names
//! (client id, transactional id, the record values they write) are interchangeable: a state and its copy
//! with the names permuted have the same futures, up to the permutation. `Rename` makes that copy. The
//! names are strings deep in engine state, some in private fields, so each type renames its own.

use crate::protocol::{Envelope, Message, NodeId};
use crate::record::{BatchBody, ProduceBatch, RecordBatch};
use std::collections::{BTreeMap, VecDeque};

/// Rewrites one client-owned string (a client id, a transactional id or a record value) in place.
pub type Names<'a> = &'a dyn Fn(&mut String);

/// A value whose client-owned strings can be rewritten. Broker ids, topic names, producer ids, offsets
/// and every counter are not names and stay. Map keys are not renamed unless the impl says so: the
/// only string-keyed map in a node's state, `TransactionCoordinator::txns`, rebuilds itself.
pub trait Rename {
    fn rename(&mut self, names: Names<'_>);
}

impl Rename for String {
    fn rename(&mut self, names: Names<'_>) {
        names(self)
    }
}

impl<T: Rename> Rename for Option<T> {
    fn rename(&mut self, names: Names<'_>) {
        if let Some(t) = self {
            t.rename(names)
        }
    }
}

impl<T: Rename> Rename for Vec<T> {
    fn rename(&mut self, names: Names<'_>) {
        self.iter_mut().for_each(|t| t.rename(names))
    }
}

impl<T: Rename> Rename for VecDeque<T> {
    fn rename(&mut self, names: Names<'_>) {
        self.iter_mut().for_each(|t| t.rename(names))
    }
}

/// Values only: see the trait.
impl<K: Ord, V: Rename> Rename for BTreeMap<K, V> {
    fn rename(&mut self, names: Names<'_>) {
        self.values_mut().for_each(|v| v.rename(names))
    }
}

impl Rename for NodeId {
    fn rename(&mut self, names: Names<'_>) {
        match self {
            NodeId::Broker(_) => {}
            NodeId::Client(name) => names(name),
        }
    }
}

impl Rename for RecordBatch {
    fn rename(&mut self, names: Names<'_>) {
        match &mut self.body {
            BatchBody::Data(records) => records.iter_mut().for_each(|r| names(&mut r.value)),
            BatchBody::Control(_) => {}
        }
    }
}

impl Rename for ProduceBatch {
    fn rename(&mut self, names: Names<'_>) {
        self.values.rename(names)
    }
}

impl Rename for Message {
    fn rename(&mut self, names: Names<'_>) {
        match self {
            Message::InitProducerIdRequest { transactional_id, .. } => transactional_id.rename(names),
            Message::AddPartitionsToTxnRequest { transactional_id, .. }
            | Message::AddOffsetsToTxnRequest { transactional_id, .. }
            | Message::EndTxnRequest { transactional_id, .. }
            | Message::TxnLogAppendRequest { transactional_id }
            | Message::TxnLogAppendResponse { transactional_id, .. } => names(transactional_id),
            Message::ProduceRequest { transactional_id, batch, .. } => {
                transactional_id.rename(names);
                batch.rename(names);
            }
            Message::FetchResponse { result: Ok(data), .. } => data.batches.rename(names),
            Message::ReplicaFetchResponse { partitions } => {
                for r in partitions.iter_mut().filter_map(|p| p.result.as_mut().ok()) {
                    r.data.batches.rename(names);
                }
            }
            Message::InitProducerIdResponse { .. }
            | Message::AddPartitionsToTxnResponse { .. }
            | Message::AddOffsetsToTxnResponse { .. }
            | Message::ProduceResponse { .. }
            | Message::EndTxnResponse { .. }
            | Message::WriteTxnMarkersRequest { .. }
            | Message::WriteTxnMarkersResponse { .. }
            | Message::FetchRequest { .. }
            | Message::FetchResponse { result: Err(_), .. }
            | Message::ReplicaFetchRequest { .. }
            | Message::ListOffsetsRequest { .. }
            | Message::ListOffsetsResponse { .. }
            | Message::Metadata(_)
            | Message::Group(_) => {}
        }
    }
}

impl Rename for Envelope {
    fn rename(&mut self, names: Names<'_>) {
        self.from.rename(names);
        self.to.rename(names);
        self.message.rename(names);
    }
}
