//! `txnsim scenario --show --html FILE`, `replay --html FILE` and `check --html FILE` write one
//! self-contained page, and the step data it embeds is the run's own step table, so the picture shows
//! what the text says. For the seed experiment the data holds the article's numbers: read_uncommitted 3
//! / read_committed 0 while the transaction is open, read_committed 3 after the commit, and from offset 0
//! read_uncommitted 6 / read_committed 3 with the gap.

use clap::Parser;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use txnsim::html::CellKind;
use txnsim::scenario::{self, RunOptions};
use txnsim_model::cli::CheckArgs;

const SEED: &str = "seeds/scenarios/seed_experiment.json";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A page file of its own for each test (tests run in parallel), in a folder removed when the first
/// value is dropped.
fn page_path(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new().prefix("txnsim-html-").tempdir().expect("temp dir");
    let page = dir.path().join(name);
    (dir, page)
}

/// Runs txnsim with `args` then `--html <page>` from the repository root.
fn txnsim_html(args: &[&str], page: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_txnsim"))
        .current_dir(root())
        .args(args)
        .arg("--html")
        .arg(page)
        .output()
        .expect("run txnsim")
}

/// The page's text and the step data it embeds.
fn embedded(page: &Path) -> (String, Value) {
    let html = std::fs::read_to_string(page).expect("the page was written");
    let open = "<script type=\"application/json\" id=\"steps\">";
    let start = html.find(open).expect("the page embeds its step data") + open.len();
    let len = html[start..].find("</script>").expect("the data element is closed");
    let data: Value = serde_json::from_str(&html[start..start + len]).expect("the embedded step data is JSON");
    (html, data)
}

/// Writes the seed experiment's page as `name`.
fn seed_page(name: &str) -> (String, Vec<String>, Value) {
    let (_dir, page) = page_path(name);
    let out = txnsim_html(&["scenario", "--show", SEED], &page);
    assert!(out.status.success(), "txnsim scenario --html failed: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
    let (html, data) = embedded(&page);
    (html, stdout, data)
}

#[test]
fn the_page_embeds_the_runners_step_table() {
    let (_, stdout, data) = seed_page("table.html");
    let sc = scenario::load(&root().join(SEED)).expect("the seed parses").remove(0);
    let report = scenario::run(&sc, &RunOptions { show: true, ..RunOptions::default() });
    let story = scenario::story(&sc, report.steps.clone(), "PASS".into());
    // The same data the runner's table is drawn from, with the file as the CLI named it.
    let mut want = txnsim::html::step_data(&[story]);
    want["stories"][0]["file"] = data["stories"][0]["file"].clone();
    assert_eq!(data, want, "the page's step data differs from the runner's step table");
    // And the data agrees with the text table the same run printed, step by step.
    let steps = data["stories"][0]["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), sc.ops.len(), "one step per op");
    for st in steps {
        let op_line =
            format!("[{}] {}  =>  {}", st["index"], st["op"].as_str().unwrap(), st["outcome"].as_str().unwrap());
        let at =
            stdout.iter().position(|l| *l == op_line).unwrap_or_else(|| panic!("the text table lacks {op_line:?}"));
        let p = &st["partitions"][0];
        let numbers = format!(
            "      t/0  LEO {}  HW {}  LSO {}  log:",
            p["log_end_offset"], p["high_watermark"], p["last_stable_offset"]
        );
        assert!(
            stdout[at + 1].starts_with(&numbers),
            "step {}: text {:?}, data {numbers:?}",
            st["index"],
            stdout[at + 1]
        );
    }
}

fn counts(step: &Value) -> (usize, usize) {
    let p = &step["partitions"][0];
    (
        p["read_uncommitted"]["offsets"].as_array().expect("offsets").len(),
        p["read_committed"]["offsets"].as_array().expect("offsets").len(),
    )
}

#[test]
fn the_seed_page_shows_the_articles_numbers() {
    let (html, _, data) = seed_page("numbers.html");
    let steps = data["stories"][0]["steps"].as_array().expect("steps");
    // Op 2 produced the open transaction's three records; op 5 committed; op 8 aborted the second one.
    assert_eq!(counts(&steps[2]), (3, 0), "while the transaction is open: read_uncommitted 3, read_committed 0");
    assert_eq!(counts(&steps[5]), (3, 3), "after the commit read_committed catches up");
    let last = &steps[8]["partitions"][0];
    assert_eq!(last["read_uncommitted"]["offsets"], serde_json::json!([0, 1, 2, 4, 5, 6]), "read_uncommitted from 0");
    assert_eq!(last["read_committed"]["offsets"], serde_json::json!([0, 1, 2]), "read_committed from 0");
    assert_eq!(last["read_committed"]["position"], 8, "read_committed passes offsets 3..7 without delivering them");
    let kinds: Vec<&str> = last["cells"].as_array().unwrap().iter().map(|c| c["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["data", "data", "data", "commit", "data", "data", "data", "abort"], "the log's cells");
    let status: Vec<&str> = last["cells"].as_array().unwrap().iter().filter_map(|c| c["status"].as_str()).collect();
    assert_eq!(status, ["committed", "committed", "committed", "aborted", "aborted", "aborted"]);
    assert_eq!(steps[2]["partitions"][0]["cells"][0]["status"], "open", "op 2's records are an open transaction's");
    assert_eq!(steps[2]["partitions"][0]["cells"][0]["txn"], "p #1");
    assert_eq!(last["cells"][4]["txn"], "p #2", "the aborted records are p's second transaction");
    // Self-contained: nothing is fetched from anywhere.
    for external in ["http://", "https://", "<link", "src=", "@import", "url("] {
        assert!(!html.contains(external), "the page refers to something outside itself: {external:?}");
    }
}

#[test]
fn html_needs_show_and_a_writable_path() {
    unwritable_page_fails_first(&["scenario", "--show", SEED]);
    let out = txnsim_html(&["scenario", SEED], Path::new("page.html"));
    assert_eq!(out.status.code(), Some(2), "--html without --show is a usage error");
}

/// `args --html <a path in no directory>` exits 2 with one line naming the path, having run nothing.
fn unwritable_page_fails_first(args: &[&str]) {
    let out = txnsim_html(args, Path::new("/nonexistent-dir/page.html"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: an unwritable page is bad input: {stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: one line of error: {stderr}");
    assert!(stderr.contains("/nonexistent-dir/page.html"), "{args:?}: the error names the path: {stderr}");
    assert!(
        out.stdout.is_empty(),
        "{args:?}: a bad page path stops before anything runs: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The screenshot script is valid shell and, called without a page, prints its usage and exits 2 (it is
/// run by hand with Chromium installed; this checks only what needs no browser).
#[test]
fn screenshot_script_explains_itself() {
    let script = root().join("scripts/screenshot.sh");
    let syntax = Command::new("bash").arg("-n").arg(&script).output().expect("run bash");
    assert!(syntax.status.success(), "scripts/screenshot.sh: {}", String::from_utf8_lossy(&syntax.stderr));
    let usage = Command::new("bash").arg(&script).output().expect("run bash");
    assert_eq!(usage.status.code(), Some(2), "no arguments is a usage error");
    let text = String::from_utf8_lossy(&usage.stdout);
    assert!(text.contains("scripts/screenshot.sh PAGE.html OUT.png [STEP]"), "usage: {text}");
}

const REPLAYED: &str = "seeds/lso-inclusive-standard-7.toml";

/// `replay --html`: the page's data is the replay's own steps, each step's numbers are those the trace
/// recorded at its event, and the mutation's bug is in the picture (read_committed past the LSO).
#[test]
fn the_replay_page_embeds_the_replays_steps() {
    let (_dir, page) = page_path("replay.html");
    let out = txnsim_html(&["replay", REPLAYED], &page);
    assert_eq!(out.status.code(), Some(1), "the saved seed fails: {}", String::from_utf8_lossy(&out.stderr));
    let (_, data) = embedded(&page);
    let args = txnsim_sim::cli::ReplayArgs {
        file: Some(root().join(REPLAYED)),
        seed: None,
        profile: txnsim_sim::Profile::Standard,
        mutation: None,
        proposal: None,
        json: None,
        html: None,
    };
    let spec = txnsim_sim::cli::replay_spec(&args).expect("the seed file loads");
    let report = txnsim_sim::run_seed(&spec);
    let story = txnsim::html::runs::replay_story(&spec, &report).expect("the replay draws");
    assert_eq!(
        data,
        txnsim::html::step_data(std::slice::from_ref(&story)),
        "the page's data differs from the replay's"
    );
    // Each step is the broker after one event: its numbers are the ones that event recorded.
    let last = report.broker.as_ref().expect("a traced run keeps it");
    let at = txnsim_sim::trace::broker_steps(&report.events, last, &report.log_snapshots);
    assert_eq!(at.len(), story.steps.len(), "one step per drawn event");
    assert!(story.steps.len() > 10, "the replay moves its logs many times: {} steps", story.steps.len());
    let stdout = String::from_utf8_lossy(&out.stdout);
    for (step, s) in story.steps.iter().zip(&at) {
        let event = &report.events[s.event];
        assert!(
            stdout.contains(&event.line()),
            "step {}'s event is a line of the replay: {}",
            step.index,
            event.line()
        );
        let Some(recorded) = event.fields.get("partitions") else {
            assert_eq!(event.kind, "violation", "only violations are drawn without broker numbers");
            assert!(step.differs, "a violation's step is marked");
            continue;
        };
        for p in &step.partitions {
            let want = &recorded[&p.name];
            let got = (p.log_end_offset, p.high_watermark, p.last_stable_offset);
            assert_eq!(
                Some(got),
                want["leo"].as_u64().zip(want["hw"].as_u64()).zip(want["lso"].as_u64()).map(|((a, b), c)| (a, b, c)),
                "step {} ({}): {} drawn as LEO/HW/LSO {got:?}, the trace recorded {want}",
                step.index,
                step.op,
                p.name
            );
        }
    }
    // lso-inclusive: a fresh read_committed reader delivers the record at the LSO.
    let leaks = story
        .steps
        .iter()
        .flat_map(|s| &s.partitions)
        .any(|p| p.read_committed.offsets.iter().any(|o| *o >= p.last_stable_offset));
    assert!(leaks, "some step shows read_committed delivering at or above the LSO");
}

/// A replay's readers read every partition from its leader, whichever broker coordinates: at the end of
/// standard seed 7 (where t/1 is led by a broker other than the coordinator's), a fresh read_uncommitted
/// reader of each partition reaches its HW and a read_committed one its LSO.
#[test]
fn the_replay_page_reads_each_partition_from_its_leader() {
    let spec = txnsim_sim::RunSpec { trace: true, ..txnsim_sim::RunSpec::new(7, txnsim_sim::Profile::Standard, None) };
    let report = txnsim_sim::run_seed(&spec);
    let story = txnsim::html::runs::replay_story(&spec, &report).expect("the replay draws");
    let last = story.steps.last().expect("steps");
    assert_eq!(last.partitions.len(), 3, "t/0, t/1 and t/2");
    for p in &last.partitions {
        assert_eq!(
            (p.read_uncommitted.position, p.read_committed.position),
            (Some(p.high_watermark), Some(p.last_stable_offset)),
            "{}: fresh readers reach the HW and the LSO ({:?})",
            p.name,
            p.read_uncommitted.error
        );
        assert!(!p.read_uncommitted.offsets.is_empty(), "{}: the read_uncommitted reader delivers records", p.name);
    }
}

/// `txnsim check`'s flags, parsed as the binary parses them.
#[derive(Parser)]
struct CheckCli {
    #[command(flatten)]
    args: CheckArgs,
}

/// Bounds small enough for a debug build, with a bug they reach: an abort leaves no index entry.
const TINY_CHECK: [&str; 11] = [
    "check",
    "--records",
    "1",
    "--partitions",
    "1",
    "--polls",
    "0",
    "--txn-timeouts",
    "0",
    "--mutation",
    "no-aborted-index-entry",
];

/// `check --html`: the page's data is the counterexample's own steps, from the start to the violating
/// state, where the log holds an ABORT marker and the aborted index nothing.
#[test]
fn the_check_page_embeds_the_counterexample() {
    let (_dir, page) = page_path("check.html");
    let out = txnsim_html(&TINY_CHECK, &page);
    assert_eq!(out.status.code(), Some(1), "the mutation is caught: {}", String::from_utf8_lossy(&out.stderr));
    let (_, data) = embedded(&page);
    let cli = CheckCli::parse_from(TINY_CHECK.iter().copied().chain(["--html", "unused.html"]));
    let bounds = cli.args.bounds.bounds().expect("valid bounds");
    let report = txnsim_model::cli::check(&bounds, &cli.args, &mut std::io::sink());
    let stories = txnsim::html::runs::check_stories(&bounds, &report);
    assert_eq!(data, txnsim::html::step_data(&stories), "the page's data differs from the counterexample's");
    assert_eq!(stories.len(), 1, "one violated property, one counterexample");
    let steps = &stories[0].steps;
    assert_eq!(stories[0].title, "counterexample for aborted-index-exact");
    // The report numbers its steps from 1 after `0. start`; the page has the same steps in that order.
    let text = report.lines.join("\n");
    let printed = text.matches(" ‖ ").count();
    assert_eq!(steps.len(), printed, "a step on the page for each numbered step of the report");
    for s in &steps[1..] {
        assert!(text.contains(&s.op), "step {} ({:?}) is a step of the report", s.index, s.op);
    }
    let last = steps.last().expect("steps");
    assert!(last.differs && steps.iter().filter(|s| s.differs).count() == 1, "only the violating state is marked");
    let p = &last.partitions[0];
    assert_eq!(
        p.cells.last().map(|c| c.kind),
        Some(CellKind::Abort),
        "the log ends with the ABORT marker: {:?}",
        p.cells
    );
    assert!(p.aborted_index.is_empty(), "the bug: the abort wrote no index entry");
    assert_eq!(p.read_committed.offsets, [0], "so read_committed delivers the aborted record");
}

#[test]
fn replay_and_check_pages_to_an_unwritable_path_fail_first() {
    unwritable_page_fails_first(&["replay", REPLAYED]);
    unwritable_page_fails_first(&TINY_CHECK);
}
