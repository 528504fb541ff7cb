//! A partition log's leader-epoch cache (`LeaderEpochFileCache`, KIP-101, KIP-279): for each leader epoch
//! the offset at which that leader began writing. A new leader records its epoch at its log end; every
//! appended batch records the epoch it was written under. A leader answers a follower's "where does my
//! last epoch end?" from it (`endOffsetFor`), and a follower truncates by it.

use crate::types::Offset;

/// `EpochEntry`: the leader of `epoch` wrote its first batch at `start_offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: Offset,
}

/// The epoch and end offset `end_offset_for` answers (`OffsetsForLeaderEpoch`'s `EpochEndOffset`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct EpochEndOffset {
    pub epoch: i32,
    pub end_offset: Offset,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LeaderEpochFileCache {
    /// Ascending in both epoch and start offset.
    entries: Vec<EpochEntry>,
}

impl LeaderEpochFileCache {
    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|e| e.epoch)
    }

    /// `assign`: a no-op unless the epoch is new or starts earlier than recorded; entries at or above the
    /// new epoch, or starting at or after its offset, are dropped first (`maybeTruncateNonMonotonicEntries`).
    pub fn assign(&mut self, epoch: i32, start_offset: Offset) {
        let needed = self.entries.last().is_none_or(|e| e.epoch != epoch || start_offset < e.start_offset);
        if !needed {
            return;
        }
        while self.entries.last().is_some_and(|e| e.epoch >= epoch || e.start_offset >= start_offset) {
            self.entries.pop();
        }
        self.entries.push(EpochEntry { epoch, start_offset });
    }

    /// `endOffsetFor(requestedEpoch, logEndOffset)`: the largest epoch at or below `requested` and the
    /// offset where the next epoch starts (the log end for the latest epoch); `None` where Kafka answers
    /// `UNDEFINED_EPOCH` (the requested epoch is newer than any here).
    pub fn end_offset_for(&self, requested: i32, log_end_offset: Offset) -> Option<EpochEndOffset> {
        if self.latest_epoch() == Some(requested) {
            return Some(EpochEndOffset { epoch: requested, end_offset: log_end_offset });
        }
        let higher = self.entries.iter().find(|e| e.epoch > requested)?;
        let floor = self.entries.iter().rev().find(|e| e.epoch <= requested);
        // Below every known epoch: the first later epoch's start, under the requested epoch.
        let epoch = floor.map_or(requested, |f| f.epoch);
        Some(EpochEndOffset { epoch, end_offset: higher.start_offset })
    }

    /// `truncateFromEnd`: drops the epochs that start at or after `end_offset` (the log was truncated there).
    pub fn truncate_from_end(&mut self, end_offset: Offset) {
        self.entries.retain(|e| e.start_offset < end_offset);
    }
}
