//! The repository's own documents stay true: every complete scenario file shown in the docs (a block
//! with no `...` elision) parses and passes, and every repository path the README and docs/ name exists.
//! And its layout stays as DESIGN-level docs describe it: no import cycle among the engine's or the
//! model's modules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use txnsim::scenario::{self, RunOptions};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The fenced ```json blocks of a markdown file.
fn json_blocks(text: &str) -> Vec<String> {
    text.split("```json\n").skip(1).map(|rest| rest.split("```").next().unwrap_or_default().to_string()).collect()
}

#[test]
fn scenario_files_shown_in_the_docs_pass() {
    let mut ran = 0;
    for doc in ["README.md", "docs/scenario-format.md"] {
        for block in json_blocks(&read(doc))
            .iter()
            .filter(|b| b.contains("\"format\": \"txnsim-scenario/v1\"") && !b.contains("..."))
        {
            let scenarios =
                scenario::parse(doc, block).unwrap_or_else(|e| panic!("an example in {doc} does not parse: {e}"));
            for sc in &scenarios {
                let report = scenario::run(sc, &RunOptions::default());
                assert_eq!(report.difference, None, "the example scenario {} in {doc} fails", sc.name);
                ran += 1;
            }
        }
    }
    assert!(ran >= 2, "expected the README's and the format reference's examples, ran {ran}");
}

/// Repository paths the docs name (`docs/...`, `seeds/...`, `src/...`, crate folders) must exist, so a
/// reader never follows a pointer to nothing.
#[test]
fn paths_named_in_the_docs_exist() {
    let prefixes = [
        "docs/",
        "seeds/",
        "src/",
        "engine/",
        "properties/",
        "model/",
        "sim/",
        "kafka/",
        "tests/",
        "scripts/",
        "conform/",
    ];
    let mut missing = Vec::new();
    for doc in [
        "README.md",
        "docs/scenario-format.md",
        "docs/invariants.md",
        "docs/seed-experiment.md",
        "docs/extending.md",
        "docs/real-kafka.md",
        "docs/design.md",
        "docs/conform.md",
    ] {
        let text = read(doc);
        for token in text.split(|c: char| c.is_whitespace() || "`()[]<>\"',;:".contains(c)) {
            let token = token.trim_end_matches('.');
            let path = token.strip_prefix("../").unwrap_or(token);
            let relative = if doc.starts_with("docs/") && path.starts_with("img/") {
                format!("docs/{path}")
            } else {
                path.to_string()
            };
            if prefixes.iter().any(|p| relative.starts_with(p))
                && !relative.contains('*')
                && !relative.contains("FILE")
                && !relative.contains("NAME")
                && !Path::new(ROOT).join(&relative).exists()
            {
                missing.push(format!("{doc}: {relative}"));
            }
        }
    }
    assert!(missing.is_empty(), "the docs name paths that do not exist:\n{}", missing.join("\n"));
}

/// A crate whose library says `test = false` in its Cargo.toml has its unit tests never built, so a
/// `#[cfg(test)]` module in its sources would pass by not running: refuse one.
#[test]
fn no_unit_tests_hide_in_a_library_built_without_them() {
    fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path);
            }
        }
    }
    let mut checked = 0;
    for krate in [".", "engine", "properties", "properties/suites", "model", "sim", "kafka"] {
        let manifest = read(&format!("{krate}/Cargo.toml"));
        if !manifest.contains("[lib]\ntest = false") {
            continue;
        }
        checked += 1;
        let mut files = Vec::new();
        sources(&Path::new(ROOT).join(krate).join("src"), &mut files);
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            assert!(
                !text.contains("#[cfg(test)]"),
                "{} has a #[cfg(test)] module, but {krate}/Cargo.toml builds its library with `test = false`, \
                 so it never runs: move the test to {krate}/tests/ or drop `test = false`",
                file.display()
            );
        }
    }
    assert!(checked >= 5, "expected five libraries built without unit tests, found {checked}");
}

/// The repository cites Kafka's sources (class and method, KIP, JIRA) or its own pages, never a document
/// it does not carry: no tracked file names the project's outside notes (on Kafka's semantics, the
/// scenarios, the design, the toolchain) or the folder that holds them.
#[test]
fn no_file_cites_a_document_outside_the_repository() {
    // Spelled in pieces so that this file does not cite them itself.
    let outside = [
        concat!("KAFKA_", "SEMANTICS"),
        concat!("SCENARIOS", ".md"),
        concat!("DESIGN", ".md"),
        concat!("TOOLCHAIN", ".md"),
        concat!("shared", "/"),
    ];
    let listed = std::process::Command::new("git").args(["ls-files"]).current_dir(ROOT).output().expect("git ls-files");
    assert!(listed.status.success(), "git ls-files failed");
    let citing: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|f| {
            let text = std::fs::read_to_string(Path::new(ROOT).join(f)).ok()?;
            let named: Vec<&str> = outside.iter().copied().filter(|o| text.contains(o)).collect();
            (!named.is_empty()).then(|| format!("{f} ({})", named.join(", ")))
        })
        .collect();
    assert!(citing.is_empty(), "files citing documents the repository does not hold: {citing:?}");
}

/// Each module of the crate whose sources are in `dir` (a file, or a folder's files together) with the
/// modules of the same crate it names as `crate::module`.
fn module_imports(dir: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(Path::new(ROOT).join(dir)).expect("a source folder").flatten() {
        let path = entry.path();
        if path.is_dir() {
            let inner = std::fs::read_dir(&path).expect("a module folder").flatten().map(|e| e.path());
            files.extend(inner.filter(|p| p.extension().is_some_and(|e| e == "rs")));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    let mut imports: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(Path::new(ROOT).join(dir)).expect("inside").to_string_lossy().into_owned();
        let module = rel.split('/').next().unwrap_or_default().trim_end_matches(".rs").to_string();
        if module == "lib" || module == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let named = text.split("crate::").skip(1).map(|rest| {
            rest.chars().take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_').collect::<String>()
        });
        let entry = imports.entry(module.clone()).or_default();
        entry.extend(named.filter(|m| !m.is_empty() && *m != module));
    }
    let known: BTreeSet<String> = imports.keys().cloned().collect();
    imports.values_mut().for_each(|deps| deps.retain(|d| known.contains(d)));
    imports
}

/// A cycle of imports among `imports`' modules, as the modules along it, if there is one.
fn import_cycle(imports: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    // Depth-first, with the path so far: a module met again on the path closes a cycle.
    fn visit(
        m: &str,
        imports: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == m) {
            let mut cycle = path[at..].to_vec();
            cycle.push(m.to_string());
            return Some(cycle);
        }
        if !done.insert(m.to_string()) {
            return None;
        }
        path.push(m.to_string());
        for dep in &imports[m] {
            if let Some(cycle) = visit(dep, imports, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    imports.keys().find_map(|m| visit(m, imports, &mut Vec::new(), &mut done))
}

/// The engine's message types are leaves (`protocol/`), Kafka's internal topics live in `topic.rs`, and
/// the model's state types in `state.rs`, so no module of either crate imports one that imports it back
/// (a cycle makes every module of it depend on all the others).
#[test]
fn the_engine_and_the_model_have_no_import_cycle() {
    for dir in ["engine/src", "model/src"] {
        let imports = module_imports(dir);
        assert!(imports.len() > 5, "{dir}: the modules were found ({imports:?})");
        if let Some(cycle) = import_cycle(&imports) {
            panic!("{dir} has an import cycle: {}", cycle.join(" -> "));
        }
    }
}

/// The cycle finder finds one where there is one.
#[test]
fn an_import_cycle_is_found() {
    let edge = |a: &str, b: &[&str]| (a.to_string(), b.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>());
    let acyclic: BTreeMap<_, _> = [edge("a", &["b"]), edge("b", &["c"]), edge("c", &[])].into_iter().collect();
    assert_eq!(import_cycle(&acyclic), None);
    let cyclic: BTreeMap<_, _> = [edge("a", &["b"]), edge("b", &["c"]), edge("c", &["a"])].into_iter().collect();
    assert_eq!(import_cycle(&cyclic), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
}

/// The counts the README states about the corpus are the corpus's: every scenario, the network ones, and
/// those on replicated clusters.
#[test]
fn the_readme_counts_the_corpus_as_it_is() {
    let root = Path::new(ROOT).join("seeds/scenarios");
    let mut scenarios = Vec::new();
    for file in scenario::collect_files(&root).expect("the corpus") {
        let text = std::fs::read_to_string(&file).expect("a corpus file");
        scenarios.extend(scenario::parse(&file.to_string_lossy(), &text).expect("the corpus parses"));
    }
    let network = scenarios.iter().filter(|s| s.layer == scenario::Layer::Network).count();
    let replicated = scenarios.iter().filter(|s| s.topology.brokers > 1).count();
    let readme = read("README.md").split_whitespace().collect::<Vec<_>>().join(" ");
    for claim in [
        format!("runs the {} scenarios of `seeds/scenarios`", scenarios.len()),
        format!("({network} of them `network` scenarios"),
        format!("and {replicated} on replicated clusters"),
    ] {
        assert!(readme.contains(&claim), "README.md should say {claim:?}");
    }
}
