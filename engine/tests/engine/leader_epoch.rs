//! Kafka's leader-epoch tests ported to the engine: `LeaderEpochFileCacheTest` (the cache alone) and two
//! `AbstractFetcherThreadTest` truncation cases run at the log level (a follower's log fetching from a
//! leader's log until they agree), all at Kafka commit 1eb7644349cb. Kafka's (UNDEFINED_EPOCH,
//! UNDEFINED_EPOCH_OFFSET) answer is `None` here.

use txnsim_engine::leader_epoch_cache::{EpochEndOffset, EpochEntry, LeaderEpochFileCache};
use txnsim_engine::record::{BatchBody, CompressionType, Record, RecordBatch};
use txnsim_engine::replica_manager::truncation_offset;
use txnsim_engine::{Mutations, Offset, PartitionLog};

fn end(epoch: i32, end_offset: Offset) -> Option<EpochEndOffset> {
    Some(EpochEndOffset { epoch, end_offset })
}

fn entry(epoch: i32, start_offset: Offset) -> EpochEntry {
    EpochEntry { epoch, start_offset }
}

fn cache(assigns: &[(i32, Offset)]) -> LeaderEpochFileCache {
    let mut c = LeaderEpochFileCache::default();
    for (e, o) in assigns {
        c.assign(*e, *o);
    }
    c
}

/// LeaderEpochFileCacheTest#shouldAddEpochAndMessageOffsetToCache
#[test]
fn should_add_epoch_and_message_offset_to_cache() {
    let c = cache(&[(2, 10)]);
    assert_eq!(c.latest_epoch(), Some(2));
    assert_eq!(c.entries(), &[entry(2, 10)]);
    assert_eq!(c.end_offset_for(2, 11), end(2, 11), "the latest epoch ends at the log end");
}

/// LeaderEpochFileCacheTest#shouldReturnLogEndOffsetIfLatestEpochRequested
#[test]
fn should_return_log_end_offset_if_latest_epoch_requested() {
    assert_eq!(cache(&[(2, 11), (2, 12)]).end_offset_for(2, 14), end(2, 14));
}

/// LeaderEpochFileCacheTest#shouldNotOverwriteLogEndOffsetForALeaderEpochOnceItHasBeenAssigned and
/// #shouldNotUpdateEpochAndStartOffsetIfItDidNotChange
#[test]
fn should_not_overwrite_the_start_of_an_assigned_epoch() {
    assert_eq!(cache(&[(2, 9), (2, 10)]).entries(), &[entry(2, 9)], "a later start of the same epoch is ignored");
    assert_eq!(cache(&[(2, 6), (2, 7)]).entries(), &[entry(2, 6)]);
}

/// LeaderEpochFileCacheTest#shouldEnforceMonotonicallyIncreasingStartOffsets and
/// #shouldEnforceOffsetsIncreaseMonotonically
#[test]
fn should_enforce_monotonically_increasing_start_offsets() {
    assert_eq!(cache(&[(2, 9), (3, 9)]).entries(), &[entry(3, 9)], "a new epoch at the same offset replaces the old");
    assert_eq!(cache(&[(2, 6), (3, 5)]).entries(), &[entry(3, 5)], "the last assignment wins");
}

/// LeaderEpochFileCacheTest#shouldReturnUnsupportedIfNoEpochRecorded and
/// #shouldReturnInvalidOffsetIfEpochIsRequestedWhichIsNotCurrentlyTracked
#[test]
fn should_return_undefined_for_unknown_epochs() {
    assert_eq!(LeaderEpochFileCache::default().end_offset_for(0, 0), None, "an empty cache knows no epoch");
    assert_eq!(cache(&[(2, 100)]).end_offset_for(3, 100), None, "an epoch above every known one is undefined");
}

/// LeaderEpochFileCacheTest#shouldReturnFirstEpochIfRequestedEpochLessThanFirstEpoch
#[test]
fn should_return_first_epoch_start_if_requested_epoch_is_below_every_epoch() {
    assert_eq!(cache(&[(5, 11), (6, 12), (7, 13)]).end_offset_for(4, 0), end(4, 11));
}

/// LeaderEpochFileCacheTest#shouldTruncateIfMatchingEpochButEarlierStartingOffset
#[test]
fn should_truncate_if_matching_epoch_but_earlier_starting_offset() {
    let c = cache(&[(5, 11), (6, 12), (7, 13), (7, 12)]);
    assert_eq!(c.end_offset_for(5, 0), end(5, 12));
    assert_eq!(c.end_offset_for(6, 0), end(5, 12), "epoch 6 was dropped: epoch 7 now starts where it did");
}

/// LeaderEpochFileCacheTest#shouldGetFirstOffsetOfSubsequentEpochWhenOffsetRequestedForPreviousEpoch and
/// #shouldReturnNextAvailableEpochIfThereIsNoExactEpochForTheOneRequested
#[test]
fn should_end_an_epoch_where_the_next_known_epoch_starts() {
    let c = cache(&[(1, 11), (1, 12), (2, 13), (2, 14), (3, 15), (3, 16)]);
    assert_eq!(c.end_offset_for(2, 17), end(2, 15));
    let c = cache(&[(0, 10), (2, 13), (4, 17)]);
    assert_eq!(c.end_offset_for(1, 0), end(0, 13), "an untracked epoch answers the largest epoch below it");
    assert_eq!(c.end_offset_for(2, 0), end(2, 17));
    assert_eq!(c.end_offset_for(3, 0), end(2, 17));
}

/// LeaderEpochFileCacheTest#shouldEnforceMonotonicallyIncreasingEpochs
#[test]
fn should_enforce_monotonically_increasing_epochs() {
    let c = cache(&[(1, 5), (2, 6), (1, 7)]);
    assert_eq!(c.latest_epoch(), Some(1), "the later epochs are removed");
    assert_eq!(c.end_offset_for(1, 8), end(1, 8));
    assert_eq!(c.end_offset_for(2, 8), None);
    assert_eq!(c.entries(), &[entry(1, 7)]);
}

/// LeaderEpochFileCacheTest#shouldDropEntriesOnEpochBoundaryWhenRemovingLatestEntries and
/// #shouldDropEntriesBetweenEpochBoundaryWhenRemovingNewest
#[test]
fn should_drop_the_epochs_a_truncation_removes() {
    let mut c = cache(&[(2, 6), (3, 8), (4, 11)]);
    c.truncate_from_end(8);
    assert_eq!(c.entries(), &[entry(2, 6)], "removal is inclusive of an epoch starting at the offset");
    let mut c = cache(&[(2, 6), (3, 8), (4, 11)]);
    c.truncate_from_end(9);
    assert_eq!(c.latest_epoch(), Some(3));
    assert_eq!(c.entries(), &[entry(2, 6), entry(3, 8)]);
}

/// A log of one-record batches at consecutive offsets, each written under its epoch.
fn log_of(batches: &[(i32, &str)]) -> PartitionLog {
    let mut log = PartitionLog::new();
    for (offset, (epoch, value)) in batches.iter().enumerate() {
        let offset = offset as Offset;
        let batch = RecordBatch {
            base_offset: offset,
            last_offset: offset,
            producer: None,
            is_transactional: false,
            body: BatchBody::Data(vec![Record { offset, value: value.to_string() }]),
            partition_leader_epoch: *epoch,
            compression: CompressionType::None,
        };
        log.append_as_follower(&batch, 0, &Mutations::none());
    }
    log
}

/// One follower fetch at its log end with its last epoch: a diverging answer truncates it, else it
/// appends what the leader has and takes the leader's HW. Returns whether it truncated.
fn fetch_once(follower: &mut PartitionLog, leader: &PartitionLog) -> bool {
    let none = Mutations::none();
    let last_fetched = follower.leader_epoch_cache.latest_epoch();
    let diverging = leader.diverging_epoch(follower.log_end_offset(), last_fetched).expect("a fetch in range");
    if let Some(d) = diverging {
        let offset = truncation_offset(follower, d);
        follower.truncate_to(offset, 0, &none);
        return true;
    }
    let data = leader.read(follower.log_end_offset(), None, &none).expect("a fetch in range");
    for b in &data.batches {
        follower.append_as_follower(b, 0, &none);
    }
    follower.update_high_watermark(data.high_watermark, &none);
    false
}

fn batches(log: &PartitionLog) -> Vec<RecordBatch> {
    log.batches().cloned().collect()
}

/// AbstractFetcherThreadTest#testDivergingEpochs @ 1eb7644349cb: the follower's last epoch (4) is unknown
/// to the leader, whose epoch 2 ends at offset 2; the follower truncates there (its last fetched epoch
/// becomes 2), then fetches the leader's epoch-5 batch.
#[test]
fn diverging_epochs_truncate_to_the_leaders_end_of_the_shared_epoch() {
    let mut follower = log_of(&[(0, "a"), (2, "b"), (4, "c")]);
    let mut leader = log_of(&[(0, "a"), (2, "b"), (5, "d")]);
    leader.update_high_watermark(2, &Mutations::none());
    assert_eq!(follower.leader_epoch_cache.latest_epoch(), Some(4));
    assert!(fetch_once(&mut follower, &leader), "the first fetch finds the divergence");
    assert_eq!(follower.leader_epoch_cache.latest_epoch(), Some(2), "verifyLastFetchedEpoch(partition, Some(2))");
    assert_eq!(follower.log_end_offset(), 2);
    assert!(!fetch_once(&mut follower, &leader), "the second fetch appends");
    assert_eq!(batches(&follower), batches(&leader), "the follower's log is the leader's");
    assert_eq!(follower.leader_epoch_cache.latest_epoch(), Some(5), "verifyLastFetchedEpoch(partition, Some(5))");
}

/// AbstractFetcherThreadTest#testTruncation @ 1eb7644349cb: no epoch is shared but the leader's
/// answers walk the follower back one epoch at a time (to 2, 1, then 0), and it then fetches the
/// leader's whole log; log start, log end and HW end equal.
#[test]
fn truncation_walks_back_epoch_by_epoch_until_the_logs_agree() {
    let mut follower = log_of(&[(0, "a"), (2, "b"), (4, "c")]);
    let mut leader = log_of(&[(1, "a"), (3, "b"), (5, "c")]);
    leader.update_high_watermark(2, &Mutations::none());
    let mut ends = Vec::new();
    while fetch_once(&mut follower, &leader) {
        ends.push(follower.log_end_offset());
        assert!(ends.len() <= 3, "truncation does not converge: {ends:?}");
    }
    assert_eq!(ends, vec![2, 1, 0], "each diverging answer truncates to the end of a smaller epoch");
    assert_eq!(batches(&follower), batches(&leader), "Failed to reconcile leader and follower logs");
    assert_eq!(follower.log_start_offset(), leader.log_start_offset());
    assert_eq!(follower.log_end_offset(), leader.log_end_offset());
    assert_eq!(follower.high_watermark(), leader.high_watermark());
}

/// AbstractFetcherThread.getOffsetTruncationState, the branch "the follower does not know about the epoch
/// that leader replied with" (derived): on logs whose epochs start at different offsets on the two sides,
/// the follower's last epoch 4 is answered with the leader's epoch 3 ending at 2; the follower has no
/// epoch 3, so it truncates to the end of its own largest epoch below it (epoch 2, ending at 4), not to
/// the leader's offset, and asks again: epoch 0 is shared and ends at 1 on both sides.
#[test]
fn a_follower_without_the_leaders_epoch_truncates_to_its_own_epoch_below_it() {
    let mut follower = log_of(&[(0, "a"), (2, "b"), (2, "c"), (2, "d"), (4, "e")]);
    let mut leader = log_of(&[(0, "a"), (3, "x"), (5, "y"), (5, "z"), (5, "w")]);
    leader.update_high_watermark(1, &Mutations::none());
    let first = leader.diverging_epoch(follower.log_end_offset(), Some(4)).expect("in range");
    assert_eq!(first, Some(EpochEndOffset { epoch: 3, end_offset: 2 }), "the leader answers its epoch 3, ending at 2");
    let mut ends = Vec::new();
    while fetch_once(&mut follower, &leader) {
        ends.push(follower.log_end_offset());
        assert!(ends.len() <= 3, "truncation does not converge: {ends:?}");
    }
    assert_eq!(ends, vec![4, 1], "first to the end of its own epoch 2, then to the shared epoch 0's end");
    assert_eq!(batches(&follower), batches(&leader), "the follower's log is the leader's");
}

/// The latest epoch entry of a two-record log written under epoch 19 after it leads from `epoch` at its
/// log end and, replaced before appending, truncates to `offset` as a follower, under `mutations`.
fn latest_entry_after_noop_truncation(
    epoch: i32,
    offset: Offset,
    mutations: &Mutations,
) -> (Option<EpochEntry>, Offset) {
    let mut log = log_of(&[(19, "a"), (19, "b")]);
    log.assign_leader_epoch(epoch);
    assert_eq!(log.leader_epoch_cache.entries().last(), Some(&entry(epoch, 2)), "becoming leader records the epoch");
    assert!(!log.truncate_to(offset, 0, mutations), "a truncation at or past the log end removes no batch");
    (log.leader_epoch_cache.entries().last().copied(), log.log_end_offset())
}

/// UnifiedLogTest#testTruncateToEndOffsetClearsEpochCache @ 1eb7644349cb: "Truncations greater than or
/// equal to the log end offset should clear the epoch cache" (`assertEquals(Some(new EpochEntry(19, 27)),
/// ...latestEntry)`, here at offset 0 instead of 27).
#[test]
fn truncation_to_the_log_end_clears_the_leaders_trivial_epoch_entry() {
    for (epoch, offset) in [(20, 2), (24, 3)] {
        let (latest, end) = latest_entry_after_noop_truncation(epoch, offset, &Mutations::none());
        assert_eq!(latest, Some(entry(19, 0)), "epoch {epoch} truncated to {offset}: the trivial entry is gone");
        assert_eq!(end, 2, "assertEquals(29, log.logEndOffset): no batch removed");
    }
}

/// Under `epoch-cache-kept-on-noop-truncation` the trivial entry stays, so the follower keeps fetching
/// with an epoch its new leader never wrote: the port above catches it.
#[test]
fn epoch_cache_kept_on_noop_truncation_is_caught_by_the_port() {
    let m = Mutations::one(txnsim_engine::Mutation::EpochCacheKeptOnNoopTruncation);
    assert_eq!(
        latest_entry_after_noop_truncation(20, 2, &m).0,
        Some(entry(20, 2)),
        "the entry survives the truncation"
    );
}
