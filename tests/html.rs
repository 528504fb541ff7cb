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
    let story = scenario::story(&sc, report.steps.clone(), "PASS".into(), true);
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

/// A network scenario's page has a step per op with every partition drawn (not "no ops"), the messages
/// in flight after each op, and, on a replicated cluster, each replica's log with who leads and the ISR:
/// in `partition_failover.json`'s first scenario the old leader's crash shows as a replica down and out
/// of the ISR, and the text table lists the same messages in flight.
#[test]
fn a_network_scenario_page_draws_every_op_with_its_messages_in_flight() {
    let (_dir, page) = page_path("network.html");
    let file = "seeds/scenarios/network/partition_failover.json";
    let out = txnsim_html(&["scenario", "--show", file], &page);
    assert!(out.status.success(), "the scenarios pass: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (_, data) = embedded(&page);
    let sc = scenario::load(&root().join(file)).expect("parses").remove(0);
    let ops = sc.network.as_ref().expect("a network scenario").ops.len();
    let steps = data["stories"][0]["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), ops, "one step per op");
    let mut flying = 0;
    for st in steps {
        let partitions = st["partitions"].as_array().expect("partitions");
        assert!(!partitions.is_empty(), "step {} draws its partitions", st["index"]);
        let in_flight: Vec<&str> =
            st["in_flight"].as_array().expect("in_flight").iter().map(|m| m.as_str().unwrap()).collect();
        if !in_flight.is_empty() {
            flying += 1;
            let line = format!("      in flight: {}", in_flight.join("; "));
            assert!(stdout.lines().any(|l| l == line), "the text table lists step {}'s messages: {line}", st["index"]);
        }
        for p in partitions {
            assert_eq!(p["replicas"].as_array().expect("replicas").len(), 3, "{}: 3 replicas drawn", p["name"]);
        }
    }
    assert!(flying > 0, "some op leaves messages in flight");
    let crashed = steps.iter().find(|st| st["op"].as_str().unwrap().starts_with("crash_broker")).expect("a crash");
    let broker: u64 = crashed["op"].as_str().unwrap().rsplit(' ').next().unwrap().parse().unwrap();
    let replicas = crashed["partitions"][0]["replicas"].as_array().unwrap();
    let down = replicas.iter().find(|r| r["broker"] == broker).expect("the crashed broker's replica");
    assert_eq!(
        (&down["down"], &down["leader"], &down["in_isr"]),
        (&Value::Bool(true), &Value::Bool(false), &Value::Bool(false))
    );
    assert_eq!(replicas.iter().filter(|r| r["leader"] == true).count(), 1, "another replica leads");
}

/// The pictures as a browser draws them. Each page kind (a scenario, a replicated scenario, a network
/// scenario, a replay, a counterexample and a passing check) is rendered by Debian's Chromium headless;
/// the DOM it built must show what the page's data says (cells, both readers' deliveries, replicas,
/// messages in flight, steps), and a screenshot of the seed experiment must hold its colours. The test
/// installs Chromium and a CJK font (the seed article's title is Chinese) with apt when they are missing
/// (`.ci/run` starts that install early); `CHROMIUM=/path` uses another Chrome.
#[test]
fn every_page_kind_draws_in_headless_chromium() {
    let chromium = chromium();
    let dir = tempfile::Builder::new().prefix("txnsim-chromium-").tempdir().expect("temp dir");
    let page = |name: &str, args: &[&str], code: i32| {
        let path = dir.path().join(name);
        let out = txnsim_html(args, &path);
        assert_eq!(out.status.code(), Some(code), "txnsim {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        let (_, data) = embedded(&path);
        (path, data)
    };

    // The seed experiment at its last step: the article's numbers in both counters and the log's cells.
    let (seed, data) = page("seed.html", &["scenario", "--show", SEED], 0);
    let dom = dump_dom(&chromium, &seed, "last");
    let last = &data["stories"][0]["steps"].as_array().unwrap().last().unwrap().clone();
    assert_drawn(&dom, last, "the seed experiment");
    assert!(
        dom.contains("<b>6</b>read_uncommitted from 0") && dom.contains("<b>3</b>read_committed from 0"),
        "counters: {}",
        excerpt(&dom, "counts")
    );
    assert!(dom.contains(r#"class="verdict pass""#), "a passing scenario's verdict is drawn as passing");
    assert!(!dom.contains("RU pos") && !dom.contains("RC pos"), "one spelling of the isolation levels");

    // The replicated seed: three replicas under the leader's log, each with its own strip.
    let (replicated, data) =
        page("replicated.html", &["scenario", "--show", "seeds/scenarios/seed_experiment_replicated.json"], 0);
    let dom = dump_dom(&chromium, &replicated, "last");
    assert_drawn(&dom, data["stories"][0]["steps"].as_array().unwrap().last().unwrap(), "the replicated seed");
    for b in 0..3 {
        assert!(
            dom.contains(&format!(">broker {b}<span")),
            "replica row of broker {b}: {}",
            excerpt(&dom, "partitions")
        );
    }

    // A network scenario at a step with messages in flight: the list is drawn beside the step.
    let (network, data) =
        page("network.html", &["scenario", "--show", "seeds/scenarios/network/partition_failover.json"], 0);
    let steps = data["stories"][0]["steps"].as_array().unwrap();
    let k = steps
        .iter()
        .position(|s| !s["in_flight"].as_array().unwrap().is_empty())
        .expect("a step with messages in flight");
    let dom = dump_dom(&chromium, &network, &k.to_string());
    assert_drawn(&dom, &steps[k], "a network scenario");
    let flight = excerpt(&dom, r#"id="inflight""#);
    assert_eq!(
        flight.matches("<li>").count(),
        steps[k]["in_flight"].as_array().unwrap().len(),
        "messages in flight: {flight}"
    );
    let stepno = format!(r#"id="stepno">op {} ({} of {})<"#, steps[k]["index"], k + 1, steps.len());
    assert!(dom.contains(&stepno), "the step counter reads {stepno}: {}", excerpt(&dom, r#"id="stepno""#));

    // A replay (RF 3): its last step's partitions, their replicas, and readers that read from the leader.
    let (replay, data) = page("replay.html", &["replay", "--seed", "7"], 0);
    let dom = dump_dom(&chromium, &replay, "last");
    let last = data["stories"][0]["steps"].as_array().unwrap().last().unwrap();
    assert_drawn(&dom, last, "a replay");
    assert!(dom.contains(">broker 2<span"), "the replay draws its replicas: {}", excerpt(&dom, "partitions"));

    // A counterexample fails in red; a check that finds none passes in green, its buttons disabled.
    let (failing, data) = page("check.html", &TINY_CHECK, 1);
    let dom = dump_dom(&chromium, &failing, "last");
    assert_drawn(&dom, data["stories"][0]["steps"].as_array().unwrap().last().unwrap(), "a counterexample");
    assert!(dom.contains(r#"class="verdict fail""#), "a counterexample's verdict is drawn as failing");
    let (passing, _) = page("pass.html", &TINY_CHECK[..TINY_CHECK.len() - 2], 0);
    let dom = dump_dom(&chromium, &passing, "0");
    assert!(
        dom.contains(r#"class="verdict pass""#),
        "a passing check's verdict is drawn as passing: {}",
        excerpt(&dom, "verdict")
    );
    for button in ["first", "prev", "next", "last"] {
        assert!(dom.contains(&format!(r#"<button id="{button}" title="#)), "button {button}");
        let tag = excerpt(&dom, &format!(r#"<button id="{button}""#));
        assert!(tag.split('>').next().unwrap().contains("disabled"), "with no steps {button} is disabled: {tag}");
    }

    // The screenshot: the seed's last step holds a COMMIT and an ABORT cell, the HW and LSO marks, and the
    // passing verdict, each in its colour.
    let png = dir.path().join("seed.png");
    chromium_run(&chromium, &seed, "last", &[&format!("--screenshot={}", png.display()), "--window-size=1400,900"]);
    let pixels = colour_counts(&png);
    for (what, rgb) in [
        ("COMMIT", (0x2b, 0x8a, 0x3e)),
        ("ABORT", (0xc9, 0x2a, 0x2a)),
        ("HW", (0x1c, 0x7e, 0xd6)),
        ("LSO", (0xd9, 0x48, 0x0f)),
    ] {
        let n = pixels.get(&rgb).copied().unwrap_or(0);
        assert!(n >= 100, "the screenshot shows {what} in {rgb:?}: {n} pixels");
    }
    // The seed article's title is Chinese: a font the page names for it is installed, so it is not drawn
    // as empty boxes.
    let fonts = Command::new("fc-list").args([":lang=zh", "family"]).output().expect("fc-list");
    let fonts = String::from_utf8_lossy(&fonts.stdout);
    let page_html = std::fs::read_to_string(&seed).unwrap();
    assert!(
        fonts.lines().flat_map(|l| l.split(',')).any(|f| page_html.contains(&format!("\"{}\"", f.trim()))),
        "a CJK font the page names is installed: {fonts}"
    );
}

/// Debian's packages the browser test needs, pinned (`.ci/run` and `scripts/screenshot.sh` read the same
/// file).
fn browser_packages() -> Vec<&'static str> {
    let list = include_str!("../scripts/browser-packages.txt");
    list.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).collect()
}

/// Waits (up to 15 minutes) while an apt-get runs: `.ci/run` installs the browser's packages beside the
/// build, and apt refuses a second install while one holds its locks.
fn wait_for_apt() {
    let running = || {
        std::fs::read_dir("/proc").into_iter().flatten().flatten().any(|e| {
            std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == "apt-get" || c.trim() == "dpkg")
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(900);
    while running() {
        assert!(std::time::Instant::now() < deadline, "an apt-get has run for 15 minutes");
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

/// Chromium (`CHROMIUM`, or Debian's), installed with its CJK font by apt when missing; once per run.
fn chromium() -> PathBuf {
    static FOUND: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    FOUND
        .get_or_init(|| {
            if let Some(c) = std::env::var_os("CHROMIUM") {
                return PathBuf::from(c);
            }
            let debian = PathBuf::from("/usr/bin/chromium");
            let cjk = || Command::new("fc-list").arg(":lang=zh").output().is_ok_and(|o| !o.stdout.is_empty());
            wait_for_apt();
            if debian.exists() && cjk() {
                return debian;
            }
            let packages = browser_packages();
            let how = format!("apt-get install -y {}", packages.join(" "));
            let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
            assert!(root, "the browser test needs Debian's Chromium and a CJK font, and only root can install them: run `sudo {how}` (or set CHROMIUM)");
            let install = |packages: &[&str]| {
                let mut apt = Command::new("apt-get");
                apt.args(["install", "-y", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=600"]).args(packages);
                txnsim_kafka::apache_kafka::run_bounded(apt, std::time::Duration::from_secs(900))
                    .map(|(s, o, e)| (s.success(), o + &e))
                    .unwrap_or_else(|e| panic!("{how}: {e}"))
            };
            let (ok, log) = install(&packages);
            if !ok {
                // A machine whose package lists predate the pinned version: refresh them once.
                let mut update = Command::new("apt-get");
                update.args(["update", "-o", "DPkg::Lock::Timeout=600"]);
                let updated = txnsim_kafka::apache_kafka::run_bounded(update, std::time::Duration::from_secs(600));
                let (ok, again) = install(&packages);
                if !ok {
                    // Debian's security archive keeps only the newest Chromium: once the pinned major is
                    // gone, take Debian's current one, and say so (what the test checks is the page).
                    let unpinned: Vec<&str> = packages.iter().map(|p| p.split('=').next().unwrap_or(p)).collect();
                    let (ok, last) = install(&unpinned);
                    assert!(ok, "{how} failed:\n{log}\nafter apt-get update ({:?}):\n{again}\nunpinned:\n{last}", updated.map(|u| u.0));
                    let mut note = std::io::stderr();
                    std::io::Write::write_all(&mut note, format!("note: {how} is no longer in Debian's archive; installed {}\n", unpinned.join(" ")).as_bytes()).ok();
                }
            }
            assert!(debian.exists() && cjk(), "{how} left no /usr/bin/chromium or no CJK font");
            debian
        })
        .clone()
}

/// Runs Chromium headless on `page` opened at step `step` (the page's `#step`), with `extra` flags; its
/// standard output. Flags as the machine's probe found them: no sandbox (containers run as root), and no
/// background networking (a closed network refuses it).
fn chromium_run(chromium: &Path, page: &Path, step: &str, extra: &[&str]) -> String {
    let profile = tempfile::tempdir().expect("a profile folder");
    let mut c = Command::new(chromium);
    c.args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--hide-scrollbars"])
        .args(["--disable-background-networking", "--disable-component-update", "--disable-sync"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(format!("file://{}#{step}", page.display()));
    let (status, out, err) = txnsim_kafka::apache_kafka::run_bounded(c, std::time::Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("{}: {e}", chromium.display()));
    assert!(status.success(), "Chromium on {} exited {status}:\n{err}", page.display());
    out
}

/// The page's DOM after its script drew step `step`.
fn dump_dom(chromium: &Path, page: &Path, step: &str) -> String {
    let dom = chromium_run(chromium, page, step, &["--dump-dom"]);
    assert!(dom.contains(r#"id="partitions""#), "Chromium dumped no page: {dom}");
    dom
}

/// Up to 1,500 characters of `dom` from the first `from` (for messages).
fn excerpt(dom: &str, from: &str) -> String {
    let at = dom.find(from).unwrap_or(0);
    dom[at..].chars().take(1500).collect()
}

/// The drawn step must be `step` of the data: its op line, and for each partition every cell of the log
/// strip and the readers' counts.
fn assert_drawn(dom: &str, step: &Value, what: &str) {
    let op = format!("[{}] {}", step["index"], step["op"].as_str().unwrap());
    let op = op.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    assert!(dom.contains(&op), "{what}: the op line {op:?} is drawn: {}", excerpt(dom, r#"id="op""#));
    let partitions = excerpt_all(dom, r#"<div id="partitions">"#, r#"<div class="legend""#);
    let mut want_cells = 0;
    for p in step["partitions"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        assert!(partitions.contains(&format!("<h2>{name}<span")), "{what}: partition {name} is drawn");
        for level in ["read_uncommitted", "read_committed"] {
            let r = &p[level];
            let n = r["offsets"].as_array().unwrap().len();
            let shown = if r["error"].is_null() { n.to_string() } else { "–".to_string() };
            let want = format!("<b>{shown}</b>{level} from");
            assert!(
                partitions.contains(&want),
                "{what}: {name}'s {level} counter shows {shown}: {}",
                excerpt(partitions, name)
            );
        }
        want_cells += p["cells"].as_array().unwrap().len();
        for r in p["replicas"].as_array().unwrap() {
            want_cells += r["cells"].as_array().unwrap().len();
        }
    }
    // Cells of a record or a marker: class `c` and one of these (holes, gaps and held cells are not).
    let kinds = ["commit", "abort", "control", "open", "committed", "aborted", "plain"];
    let drawn = partitions
        .split(r#"<div class="c "#)
        .skip(1)
        .filter(|rest| rest.split('"').next().and_then(|c| c.split(' ').next()).is_some_and(|k| kinds.contains(&k)))
        .count();
    let delivered = step["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            p["read_uncommitted"]["offsets"].as_array().unwrap().len()
                + p["read_committed"]["offsets"].as_array().unwrap().len()
        })
        .sum::<usize>();
    assert_eq!(drawn, want_cells + delivered, "{what}: log and replica cells plus delivered records drawn");
}

fn excerpt_all<'a>(dom: &'a str, from: &str, to: &str) -> &'a str {
    let start = dom.find(from).unwrap_or_else(|| panic!("the DOM has {from}"));
    let end = dom[start..].find(to).map_or(dom.len(), |e| start + e);
    &dom[start..end]
}

/// How many pixels of the PNG at `path` have each colour.
fn colour_counts(path: &Path) -> std::collections::HashMap<(u8, u8, u8), usize> {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).expect("the screenshot")));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("a sane size")];
    let info = reader.next_frame(&mut buf).expect("a frame");
    let channels = info.color_type.samples();
    let mut counts = std::collections::HashMap::new();
    for px in buf[..info.buffer_size()].chunks(channels) {
        *counts.entry((px[0], px[1], px[2])).or_insert(0) += 1;
    }
    counts
}
