//! `serve --timeline FILE`: one line per event in `replay`'s format (time, node, event; broker lines end
//! with every partition's LEO/HW/LSO), plus what each broker step wrote: data batches, markers and
//! aborted-index entries, so a test can check offsets without decoding the log.

use std::collections::BTreeMap;
use txnsim_engine::record::BatchBody;
use txnsim_engine::topic::GROUP_METADATA_TOPIC;
use txnsim_engine::{Broker, Offset, TimeMs, TopicPartition};

/// Off until `enable`: then lines accumulate until the server drains them.
#[derive(Default)]
pub struct Timeline {
    enabled: bool,
    lines: Vec<String>,
    /// Per broker and partition: the log end and the number of index entries already described.
    seen: BTreeMap<(String, TopicPartition), (Offset, usize)>,
}

impl Timeline {
    pub fn enable(&mut self) {
        self.enabled = true;
    }

    pub fn take_lines(&mut self) -> Vec<String> {
        std::mem::take(&mut self.lines)
    }

    pub fn event(&mut self, now_ms: TimeMs, node: &str, text: impl FnOnce() -> String) {
        if self.enabled {
            // `replay` prints microseconds after the point; the wire driver's clock is in milliseconds.
            self.lines.push(format!("{now_ms:>7}.000ms {node:<9} {}", text()));
        }
    }

    /// A broker step: its line with the partitions' offsets, then one line per batch or index entry it added.
    pub fn broker_step(&mut self, now_ms: TimeMs, broker: &Broker, line: String) {
        if !self.enabled {
            return;
        }
        let node = broker.node().to_string();
        let m = &broker.config.mutations;
        // Of `__consumer_offsets`' 50 partitions only those written so far: the rest would bury the line.
        let summary: Vec<String> = broker
            .replica_manager
            .logs
            .iter()
            .filter(|(tp, log)| tp.topic != GROUP_METADATA_TOPIC || log.log_end_offset() > 0)
            .map(|(tp, log)| {
                format!("{tp} {}/{}/{}", log.log_end_offset(), log.high_watermark(), log.last_stable_offset(m))
            })
            .collect();
        self.event(now_ms, &node, || format!("{line} | LEO/HW/LSO {}", summary.join(" ")));
        let mut added = Vec::new();
        for (tp, log) in &broker.replica_manager.logs {
            let key = (node.clone(), tp.clone());
            let (end, entries) = self.seen.get(&key).copied().unwrap_or((0, 0));
            for b in log.batches().filter(|b| b.base_offset >= end) {
                added.push(match &b.body {
                    BatchBody::Data(records) => format!(
                        "appends [{}] at {tp}@{}..{} pid {}",
                        records.iter().map(|r| r.value.as_str()).collect::<Vec<_>>().join(","),
                        b.base_offset,
                        b.last_offset,
                        b.producer_id().unwrap_or(-1)
                    ),
                    BatchBody::Control(marker) => format!(
                        "writes {} marker for pid {} at {tp}@{}",
                        marker.map_or("empty", |m| m.result.name()),
                        b.producer_id().unwrap_or(-1),
                        b.base_offset
                    ),
                });
            }
            let index: Vec<_> = log.aborted_index().collect();
            for e in index.iter().skip(entries) {
                added.push(format!(
                    "aborted index {tp}: pid {} first {} last {} LSO {}",
                    e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset
                ));
            }
            self.seen.insert(key, (log.log_end_offset(), index.len()));
        }
        for text in added {
            self.event(now_ms, &node, || text);
        }
    }
}
