//! The catalogue's two tables as the repository documents them: `docs/invariants.md` lists every
//! invariant and every mutation exactly as `properties/src/catalogue.rs` and `engine/src/mutation.rs`
//! state them, and `caught_by` agrees with the seed corpus (`seeds/*.toml`), so neither can drift.

use std::path::Path;
use txnsim_engine::Mutation;
use txnsim_properties::catalogue::{catchers, caught_by};
use txnsim_properties::Invariant;

fn repo_file(path: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The invariant table as `docs/invariants.md` must hold it.
fn invariant_table() -> String {
    let mut t = String::from(
        "| invariant | kind | what must hold | Kafka source | bites with mutation |\n|---|---|---|---|---|\n",
    );
    for i in Invariant::catalogue() {
        t.push_str(&format!(
            "| `{}` | {:?} | {} | {} | `{}` |\n",
            i.name(),
            i.kind(),
            i.statement(),
            i.source(),
            i.mutation().name()
        ));
    }
    t
}

/// The mutation table as `docs/invariants.md` must hold it.
fn mutation_table() -> String {
    let mut t = String::from("| mutation | what it breaks | Kafka | caught by |\n|---|---|---|---|\n");
    for m in Mutation::ALL {
        let caught: Vec<String> = catchers(m).into_iter().map(|i| format!("`{i}`")).collect();
        t.push_str(&format!("| `{}` | {} | {} | {} |\n", m.name(), m.mechanism(), m.kafka(), caught.join(", ")));
    }
    t
}

/// `docs/invariants.md` holds `want` verbatim; on a difference the message is the table to paste.
fn assert_doc_holds(what: &str, want: &str) {
    let doc = repo_file("docs/invariants.md");
    assert!(
        doc.contains(want),
        "docs/invariants.md does not hold the {what} table as the code states it; replace its table with:\n\n{want}"
    );
}

#[test]
fn invariants_doc_lists_the_catalogue() {
    assert_doc_holds("invariant", &invariant_table());
}

#[test]
fn invariants_doc_lists_every_mutation() {
    assert_doc_holds("mutation", &mutation_table());
}

/// Every mutation is caught by some invariant, and every seed file's (mutation, invariant) pair is in
/// `caught_by`: the list `txnsim mutations` prints is the one the seeds prove.
#[test]
fn caught_by_agrees_with_the_seed_corpus() {
    // A mutation no invariant catches is a departure that costs only errors or aborts; that a ported
    // scenario catches each such one is `tests/scenarios.rs#every_scenario_reachable_mutation_fails_some_scenario`.
    let corpus = txnsim_sim::seeds::load_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds"))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut pairs = 0;
    for (path, seed) in &corpus {
        let (Some(m), Some(inv)) = (seed.mutation().expect("load_dir checked it"), seed.invariant.as_deref()) else {
            continue;
        };
        let inv = Invariant::from_name(inv).unwrap_or_else(|| panic!("{}: unknown invariant {inv}", path.display()));
        assert!(
            caught_by(m).contains(&inv),
            "{} shows {} caught by {}, which caught_by({}) does not list",
            path.display(),
            m.name(),
            inv.name(),
            m.name()
        );
        pairs += 1;
    }
    assert!(pairs >= 10, "expected the seed corpus's mutation seeds, found {pairs}");
}

#[test]
fn mutations_command_prints_mechanism_source_and_catchers() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_txnsim")).arg("mutations").output().expect("run txnsim");
    assert!(out.status.success(), "txnsim mutations failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text, txnsim_properties::catalogue::mutations_text(), "the CLI prints the library's text");
    for want in [
        "skip-aborted-index-on-fetch\n    a fetch does not consult the aborted-transaction index",
        "    kafka: KAFKA-5376\n    caught by: aborted-read\n",
        "lso-inclusive\n",
        "    caught by: precommitted-read\n",
    ] {
        assert!(text.contains(want), "txnsim mutations lacks {want:?}:\n{text}");
    }
}
