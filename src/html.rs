//! One log, two readings, as a picture: a self-contained HTML page (inline CSS and JS, no network)
//! that steps through a run. Each partition's log is a strip of offset cells (data coloured by
//! transaction, COMMIT and ABORT markers, aborted records, the log start), the HW and LSO are marks on
//! it, and below it what a read_uncommitted and a read_committed reader deliver from the log start, gaps
//! included. The page embeds its step data as JSON (`<script type="application/json" id="steps">`), so a
//! test can compare it with the run's own step table. The data types here know nothing of where the
//! steps come from: the scenario runner builds them (`scenario::show`), and `runs` builds them for a
//! simulation replay and for the model's counterexamples.

pub mod runs;

use serde::Serialize;
use std::fs::File;
use std::io::Write;
use std::path::Path;

/// The `format` field of the embedded step data.
pub const FORMAT: &str = "txnsim-steps/v1";

/// One run: a title, where it comes from, its steps in order and how it ended.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Story {
    pub title: String,
    pub file: String,
    pub source: Option<String>,
    pub steps: Vec<Step>,
    /// `PASS`, or `FAIL` and the first difference.
    pub verdict: String,
    /// The run passed (the page draws the verdict in a passing colour).
    pub passed: bool,
}

/// The state after one op (or event): what it was, what it returned, and every partition.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Step {
    pub index: usize,
    pub op: String,
    pub outcome: String,
    /// The op's outcome departed from the expectation.
    pub differs: bool,
    pub partitions: Vec<PartitionView>,
    /// A network scenario's messages in flight after the op (`Produce request p -> broker-0`), then
    /// those it holds (`held: ...`); empty for the other layers, which run to quiescence.
    pub in_flight: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PartitionView {
    /// `topic/partition`.
    pub name: String,
    pub log_start_offset: u64,
    pub log_end_offset: u64,
    pub high_watermark: u64,
    pub last_stable_offset: u64,
    /// Base offsets of every segment after the first.
    pub segment_bases: Vec<u64>,
    /// The log from its start offset, one cell per record or marker, in offset order.
    pub cells: Vec<Cell>,
    pub aborted_index: Vec<AbortedEntry>,
    /// What a fresh consumer of each level delivers, reading from the log start to the end.
    pub read_uncommitted: Reading,
    pub read_committed: Reading,
    /// On a replicated cluster, every replica of the partition (leader first is not implied: in
    /// assignment order); empty when it has one.
    pub replicas: Vec<ReplicaView>,
}

/// One broker's copy of a partition: its own log end and HW, and whether it leads, is in the ISR, is down.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplicaView {
    pub broker: u32,
    pub leader: bool,
    pub in_isr: bool,
    pub down: bool,
    pub log_end_offset: u64,
    pub high_watermark: u64,
    pub cells: Vec<Cell>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CellKind {
    Data,
    Commit,
    Abort,
    /// A control batch whose marker compaction removed (KAFKA-10702).
    EmptyControl,
}

/// A data record's transaction, as the log shows it: its producer's next marker on the partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TxnStatus {
    Open,
    Committed,
    Aborted,
    NonTransactional,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cell {
    pub offset: u64,
    pub kind: CellKind,
    /// A data record's value.
    pub value: Option<String>,
    /// The writer: its transactional id, else `pid N`; none for a plain producer's record.
    pub producer: Option<String>,
    /// The transaction a data record belongs to (`tx #2`: that producer's second on this partition).
    pub txn: Option<String>,
    /// A data record's transaction state.
    pub status: Option<TxnStatus>,
    /// Its batch's codec (`gzip`, ...), absent when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compression: Option<&'static str>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AbortedEntry {
    pub producer: String,
    pub first_offset: u64,
    pub last_offset: u64,
    pub last_stable_offset: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Reading {
    pub from: u64,
    pub offsets: Vec<u64>,
    pub values: Vec<String>,
    /// The consumer's position afterwards; none when the read failed.
    pub position: Option<u64>,
    pub error: Option<String>,
}

#[derive(Serialize)]
struct Embedded<'a> {
    format: &'static str,
    stories: &'a [Story],
}

/// The step data exactly as the page embeds it.
pub fn step_data(stories: &[Story]) -> serde_json::Value {
    serde_json::to_value(Embedded { format: FORMAT, stories }).expect("plain data serialises")
}

/// The page. `<` inside the JSON is written `\u003c`, so no value can close the script element.
pub fn render(title: &str, stories: &[Story]) -> String {
    let data = step_data(stories).to_string().replace('<', "\\u003c");
    PAGE.replace("{{TITLE}}", &escape(title)).replace("{{DATA}}", &data)
}

/// Opens the page's file before anything runs, so a bad path fails first; the error names the path.
pub fn create(path: &Path) -> Result<File, String> {
    File::create(path).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Writes the page into the file `create` opened at `path`.
pub fn write(mut file: File, path: &Path, title: &str, stories: &[Story]) -> Result<(), String> {
    file.write_all(render(title, stories).as_bytes()).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

const PAGE: &str = include_str!("html/page.html");
