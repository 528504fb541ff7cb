//! The command line refuses bad flags and addresses with exit 2 before doing any work, instead of
//! panicking inside a library or running with a value it cannot honour.

use std::process::Command;

fn txnsim(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_txnsim")).args(args).output().expect("run txnsim");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn explore_on_a_busy_address_exits_2_with_one_line() {
    // Held for the whole test, so the Explorer cannot have the port.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    let addr = busy.local_addr().expect("local address").to_string();
    let (code, _, stderr) = txnsim(&["explore", "--addr", &addr]);
    assert_eq!(code, 2, "a busy address is bad input: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        stderr.trim(),
        format!("error: --addr {addr}: cannot listen there: Address already in use (os error 98)")
    );
}

#[test]
fn explore_on_a_malformed_address_exits_2_with_one_line() {
    let (code, _, stderr) = txnsim(&["explore", "--addr", "no-port-here"]);
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(stderr.trim(), "error: --addr no-port-here: cannot listen there: invalid socket address");
}

#[test]
fn out_of_range_check_flags_are_refused_before_checking() {
    for (args, needle) in [
        (["check", "--polls", "256"], "256 is not in 0..=255"),
        (["check", "--threads", "0"], "at least one thread is needed"),
        (["explore", "--threads", "0"], "at least one thread is needed"),
        (["check", "--threads", "100000"], "100000 threads is too many: give 1 to 1024"),
        (["explore", "--threads", "1025"], "1025 threads is too many: give 1 to 1024"),
        (["check", "--losses", "10"], "--losses must be at most 9, got 10"),
        (["check", "--producers", "0"], "--producers must be 1..=9, got 0"),
    ] {
        let (code, stdout, stderr) = txnsim(&args);
        assert_eq!(code, 2, "{args:?} is bad input: {stderr}");
        assert!(stdout.is_empty(), "{args:?} must not start a check: {stdout}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

#[test]
fn check_warns_when_the_bounds_cannot_reach_the_mutation() {
    // Tiny bounds without crashes: no second instance, so a fence never happens.
    let tiny = ["check", "--records", "1", "--partitions", "1", "--polls", "0", "--txn-timeouts", "0"];
    let mut args = tiny.to_vec();
    args.extend(["--mutation", "fence-abort-same-epoch"]);
    let (code, _, stderr) = txnsim(&args);
    assert_eq!(code, 0, "the unreachable bug is not found: {stderr}");
    assert!(stderr.contains("warning: mutation fence-abort-same-epoch needs a second producer instance"), "{stderr}");
    let mut args = tiny.to_vec();
    args.extend(["--mutation", "no-aborted-index-entry"]);
    let (code, _, stderr) = txnsim(&args);
    assert_eq!(code, 1, "a reachable bug is found: {stderr}");
    assert!(!stderr.contains("warning"), "no warning for a reachable mutation: {stderr}");
}

/// SIGINT or SIGTERM during `sweep` ends it with the summary of the seeds it ran, marked INCOMPLETE, exit 3;
/// a sweep whose parent set SIGINT to be ignored (a background job) still stops on SIGTERM.
#[test]
fn a_signalled_sweep_prints_its_summary_marked_incomplete() {
    use std::io::{BufRead, Read};
    use std::os::unix::process::CommandExt;
    use std::time::{Duration, Instant};
    for (signal, ignore_sigint) in [(libc::SIGTERM, false), (libc::SIGINT, false), (libc::SIGTERM, true)] {
        let sigint = if ignore_sigint { libc::SIG_IGN } else { libc::SIG_DFL };
        let mut command = Command::new(env!("CARGO_BIN_EXE_txnsim"));
        command.args(["sweep", "--seeds", "100000000", "--jobs", "1"]);
        // The test's own SIGINT disposition is inherited (ignored when the gate runs as a background
        // job): set the one this case needs. SAFETY: signal(2) is async-signal-safe, as pre_exec requires.
        unsafe {
            command.pre_exec(move || {
                libc::signal(libc::SIGINT, sigint);
                Ok(())
            });
        }
        let mut child = command
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start a sweep");
        // The first progress line says the seeds are running.
        let mut stderr = std::io::BufReader::new(child.stderr.take().expect("stderr"));
        let mut first = String::new();
        stderr.read_line(&mut first).expect("read stderr");
        if !first.starts_with("sweep: 0/100000000 seeds") {
            child.kill().ok();
            child.wait().ok();
            panic!("the sweep did not start: {first}");
        }
        let pid = child.id() as libc::pid_t;
        // SAFETY: kill(2) on our own child.
        unsafe {
            if ignore_sigint {
                libc::kill(pid, libc::SIGINT);
            }
            libc::kill(pid, signal);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() > deadline {
                // A sweep of 10^8 seeds left running would hold a core for days.
                child.kill().ok();
                child.wait().ok();
                panic!("the sweep did not stop within 60 s of signal {signal}");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut stdout = String::new();
        child.stdout.take().expect("stdout").read_to_string(&mut stdout).expect("read stdout");
        assert_eq!(status.code(), Some(3), "an interrupted sweep exits 3 (signal {signal}): {stdout}");
        let summary = stdout.lines().find(|l| l.starts_with("INCOMPLETE: interrupted after ")).unwrap_or_else(|| {
            panic!("no INCOMPLETE line after signal {signal}:\n{stdout}");
        });
        let ran = &stdout.lines().next().expect("a summary")["sweep standard: seeds 0..".len()..];
        let ran: u64 = ran.split(' ').next().and_then(|n| n.parse().ok()).expect("the seeds run");
        assert!(
            summary.ends_with(&format!("{ran} of 100000000 seeds (seeds 0..{ran}); the counts above cover those")),
            "the summary's seeds and the INCOMPLETE line agree: {summary}"
        );
    }
}

/// `check-history` on another of txnsim's files, or on one that is not JSON, says what it got.
#[test]
fn check_history_names_the_format_it_got() {
    let root = env!("CARGO_MANIFEST_DIR");
    for (file, want) in [
        ("seeds/scenarios/commit_abort.json", "a txnsim-scenario/v1 file, not a history (txnsim-target-history/v1)"),
        ("seeds/aborted-list-for-read-uncommitted-standard-0.toml", "not a history file: not JSON"),
    ] {
        let (code, _, stderr) = txnsim(&["check-history", &format!("{root}/{file}")]);
        assert_eq!(code, 2, "{file} is bad input: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{file}: one line: {stderr}");
        assert!(stderr.contains(want), "{file}: want {want:?}: {stderr}");
    }
}

/// A path to something endless is read up to a cap and refused, with the cap in the one-line error,
/// never read into memory without bound.
#[test]
fn an_endless_input_file_is_refused_at_its_size_cap() {
    for (args, cap) in [
        (["scenario", "/dev/zero"], "64 MiB"),
        (["replay", "/dev/zero"], "64 MiB"),
        (["check-history", "/dev/zero"], "256 MiB"),
    ] {
        let (code, stdout, stderr) = txnsim(&args);
        assert_eq!(code, 2, "{args:?} is bad input: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: one line: {stderr}");
        assert!(
            stderr.contains("/dev/zero: ") && stderr.contains(&format!("larger than the {cap}")),
            "{args:?}: {stderr}"
        );
    }
}

/// A scenario's `proposal` must name one of the engine's proposals: an unknown name is bad input, one
/// line naming the field, exit 2, before anything runs.
#[test]
fn a_scenario_with_an_unknown_proposal_exits_2_naming_it() {
    let root = env!("CARGO_MANIFEST_DIR");
    let text = std::fs::read_to_string(format!("{root}/seeds/scenarios/network/coordinator_load_above_hw.json"))
        .expect("the finding's scenario file");
    assert!(text.contains("\"proposal\": \"load-waits-for-hw\""), "the scenario file no longer names its proposal");
    let bad = text.replace("\"proposal\": \"load-waits-for-hw\"", "\"proposal\": \"load-waits-forever\"");
    let dir = std::env::temp_dir().join(format!("txnsim-bad-proposal-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("bad.json");
    std::fs::write(&path, bad).expect("write the bad scenario");
    let (code, stdout, stderr) = txnsim(&["scenario", path.to_str().expect("utf-8 path")]);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(code, 2, "an unknown proposal is bad input: {stdout}{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains("proposal") && stderr.contains("load-waits-forever"),
        "names the field and value: {stderr}"
    );
}
