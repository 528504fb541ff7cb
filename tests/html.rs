//! `txnsim scenario --show --html FILE`: the page is self-contained, and the step data it embeds is the
//! runner's own step table, so the picture shows what the text table says. For the seed experiment the
//! data holds the article's numbers: read_uncommitted 3 / read_committed 0 while the transaction is open,
//! read_committed 3 after the commit, and from offset 0 read_uncommitted 6 / read_committed 3 with the gap.

use serde_json::Value;
use std::path::Path;
use std::process::Command;
use txnsim::scenario::{self, RunOptions};

const SEED: &str = "seeds/scenarios/seed_experiment.json";

/// Writes the seed experiment's page as `name` (each test its own file: tests run in parallel).
fn seed_page(name: &str) -> (String, Vec<String>, Value) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(SEED);
    let out_dir = std::env::temp_dir().join(format!("txnsim-html-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).expect("temp dir");
    let page = out_dir.join(name);
    let out = Command::new(env!("CARGO_BIN_EXE_txnsim"))
        .args(["scenario", "--show", "--html"])
        .arg(&page)
        .arg(&path)
        .output()
        .expect("run txnsim");
    assert!(out.status.success(), "txnsim scenario --html failed: {}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::read_to_string(&page).expect("the page was written");
    let stdout = String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
    let open = "<script type=\"application/json\" id=\"steps\">";
    let start = html.find(open).expect("the page embeds its step data") + open.len();
    let len = html[start..].find("</script>").expect("the data element is closed");
    let data: Value = serde_json::from_str(&html[start..start + len]).expect("the embedded step data is JSON");
    (html, stdout, data)
}

#[test]
fn the_page_embeds_the_runners_step_table() {
    let (_, stdout, data) = seed_page("table.html");
    let sc = scenario::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join(SEED)).expect("the seed parses").remove(0);
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
    let seed = Path::new(env!("CARGO_MANIFEST_DIR")).join(SEED);
    let out = Command::new(env!("CARGO_BIN_EXE_txnsim"))
        .args(["scenario", "--show", "--html", "/nonexistent-dir/page.html"])
        .arg(&seed)
        .output()
        .expect("run txnsim");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "an unwritable page is bad input: {stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line of error: {stderr}");
    assert!(stderr.contains("/nonexistent-dir/page.html"), "the error names the path: {stderr}");
    assert!(
        out.stdout.is_empty(),
        "a bad page path stops before anything runs: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_txnsim"))
        .args(["scenario", "--html", "page.html"])
        .arg(&seed)
        .output()
        .expect("run txnsim");
    assert_eq!(out.status.code(), Some(2), "--html without --show is a usage error");
}

/// The screenshot script is valid shell and, called without a page, prints its usage and exits 2 (it is
/// run by hand with Chromium installed; this checks only what needs no browser).
#[test]
fn screenshot_script_explains_itself() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/screenshot.sh");
    let syntax = Command::new("bash").arg("-n").arg(&script).output().expect("run bash");
    assert!(syntax.status.success(), "scripts/screenshot.sh: {}", String::from_utf8_lossy(&syntax.stderr));
    let usage = Command::new("bash").arg(&script).output().expect("run bash");
    assert_eq!(usage.status.code(), Some(2), "no arguments is a usage error");
    let text = String::from_utf8_lossy(&usage.stdout);
    assert!(text.contains("scripts/screenshot.sh PAGE.html OUT.png [STEP]"), "usage: {text}");
}
