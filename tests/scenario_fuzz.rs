//! The scenario parser never panics: random bytes, random JSON, and corpus files with one value swapped
//! for a random one (wrong types, negative and huge numbers, nulls) or one field removed all end in a
//! clean one-line error or a scenario that runs to a verdict. Where a scalar's JSON type changes, the
//! error names exactly that field (op index and path), not the value.

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::LazyLock;
use txnsim::scenario::{self, RunOptions, ScenarioError};

const FILE: &str = "fuzz.json";

/// The corpus files' JSON, the skeletons the mutations start from (read once, not once a case).
static SKELETONS: LazyLock<Vec<Value>> = LazyLock::new(|| {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/scenarios");
    let files = scenario::collect_files(&root).expect("seeds/scenarios is readable");
    files
        .iter()
        .map(|f| serde_json::from_str(&std::fs::read_to_string(f).expect("corpus file reads")).expect("corpus JSON"))
        .collect()
});

/// One step into a JSON value.
#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

/// Every path to a value in `v`, except inside the descriptive fields the parser drops.
fn paths(v: &Value, prefix: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    out.push(prefix.clone());
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                if scenario::DESCRIPTIVE_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                prefix.push(Step::Key(k.clone()));
                paths(child, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                prefix.push(Step::Index(i));
                paths(child, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

fn at<'a>(v: &'a mut Value, path: &[Step]) -> &'a mut Value {
    path.iter().fold(v, |v, s| match s {
        Step::Key(k) => &mut v[k.as_str()],
        Step::Index(i) => &mut v[*i],
    })
}

/// Where the parser should report a bad value at `path`: (op index, field), in its own notation.
fn expected_location(path: &[Step]) -> (Option<usize>, Option<String>) {
    let render = |steps: &[Step]| {
        let mut s = String::new();
        for step in steps {
            match step {
                Step::Key(k) if s.is_empty() => s.push_str(k),
                Step::Key(k) => s.push_str(&format!(".{k}")),
                Step::Index(i) => s.push_str(&format!("[{i}]")),
            }
        }
        (!s.is_empty()).then_some(s)
    };
    match path {
        [Step::Key(s), Step::Index(_), Step::Key(ops), Step::Index(i), rest @ ..]
            if s == "scenarios" && ops == "ops" =>
        {
            (Some(*i), render(rest))
        }
        [Step::Key(s), Step::Index(_), rest @ ..] if s == "scenarios" => (None, render(rest)),
        _ => (None, render(path)),
    }
}

/// Whether the field at `path` takes more than one JSON type: an expected group offset is an offset, null
/// or a Kafka error name (`group_offsets[k].offsets.<partition>`).
fn takes_several_types(path: &[Step]) -> bool {
    path.windows(3)
        .any(|w| matches!(w, [Step::Key(g), Step::Index(_), Step::Key(o)] if g == "group_offsets" && o == "offsets"))
}

/// Which JSON type a scalar has, telling integers from fractions (a fraction where an integer is due is
/// a wrong type too).
fn scalar_kind(v: &Value) -> Option<&'static str> {
    match v {
        Value::Bool(_) => Some("bool"),
        Value::Number(n) if n.is_f64() => Some("fraction"),
        Value::Number(_) => Some("integer"),
        Value::String(_) => Some("string"),
        _ => None,
    }
}

fn arb_scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        Just(json!(-1)),
        Just(json!(-5)),
        Just(json!(u64::MAX)),
        Just(json!(i64::MIN)),
        Just(json!(u32::MAX as u64 + 1)),
        Just(json!(1e300)),
        Just(json!(0.5)),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        "[a-z_]{0,12}".prop_map(Value::String),
        Just(json!("PRODUCER_FENCED")),
        Just(json!("read_committed")),
    ]
}

fn arb_json() -> impl Strategy<Value = Value> {
    arb_scalar().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,10}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// What a mutated file must come to: a one-line error naming the file, or scenarios that run.
fn assert_clean(text: &str) -> Result<Result<(), ScenarioError>, TestCaseError> {
    match scenario::parse(FILE, text) {
        Err(e) => {
            let line = e.to_string();
            prop_assert!(line.starts_with(FILE), "the error names the file: {line}");
            prop_assert_eq!(line.lines().count(), 1, "one line of error: {}", line);
            Ok(Err(e))
        }
        Ok(scenarios) => {
            for sc in &scenarios {
                // A verdict either way; a panic here fails the case.
                scenario::run(sc, &RunOptions::default());
            }
            Ok(Ok(()))
        }
    }
}

fn config() -> Config {
    Config {
        cases: 256,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn random_bytes_are_a_clean_error(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let text = String::from_utf8_lossy(&bytes);
        prop_assert!(assert_clean(&text)?.is_err(), "random bytes parsed as a scenario file: {:?}", text);
    }

    #[test]
    fn random_json_is_clean(v in arb_json(), wrap in 0..3usize) {
        // The value alone, as a file's scenario list, and as a scenario's ops.
        let file = match wrap {
            0 => v,
            1 => json!({"format": scenario::FORMAT, "scenarios": [v]}),
            _ => json!({"format": scenario::FORMAT, "scenarios": [{"name": "s", "layer": "producer", "ops": [v]}]}),
        };
        let _verdict = assert_clean(&file.to_string())?;
    }

    #[test]
    fn a_corpus_file_with_one_value_swapped_is_clean_and_names_its_field(
        file in any::<prop::sample::Index>(),
        spot in any::<prop::sample::Index>(),
        replacement in prop_oneof![3 => arb_scalar(), 1 => arb_json()],
        remove in any::<bool>(),
    ) {
        let root = file.get(&SKELETONS);
        let mut all = Vec::new();
        paths(root, &mut Vec::new(), &mut all);
        swap_and_check(root, spot.get(&all[1..]).as_slice(), &replacement, remove)?;
    }
}

/// `root` with the value at `path` replaced (or its key removed) must come to a clean error or a verdict;
/// where a scalar's JSON type changed, the error names exactly that field.
fn swap_and_check(root: &Value, path: &[Step], replacement: &Value, remove: bool) -> Result<(), TestCaseError> {
    let mut root = root.clone();
    let original = at(&mut root, path).clone();
    let removed = match (remove, path.split_last()) {
        (true, Some((Step::Key(k), parent))) => {
            at(&mut root, parent).as_object_mut().expect("a key's parent is an object").remove(k);
            true
        }
        _ => {
            *at(&mut root, path) = replacement.clone();
            false
        }
    };
    let outcome = assert_clean(&root.to_string())?;
    let retyped = !removed
        && !takes_several_types(path)
        && scalar_kind(replacement).is_some()
        && scalar_kind(&original).is_some()
        && scalar_kind(replacement) != scalar_kind(&original);
    if retyped {
        let Err(e) = outcome else {
            return Err(TestCaseError::fail(format!("{original} -> {replacement} at {path:?} parsed")));
        };
        let (op_index, field) = expected_location(path);
        prop_assert_eq!((e.op_index, e.field.clone()), (op_index, field), "{}", e);
    }
    Ok(())
}

/// Every value of every corpus file swapped for each of these, and every key removed: how the hang and
/// the panics behind a CI run that never finished were found (a partition count of 2^32 - 1, a batch
/// ending at u64::MAX, a loaded producer id at the end of its block, a wait of 2^32 ms).
#[test]
#[ignore = "deep: 412,359 cases, 5 minutes in a release build; `cargo test --release --test scenario_fuzz -- --ignored`"]
fn every_corpus_value_swapped_for_each_extreme_is_clean() {
    let extremes = [
        json!(u64::MAX),
        json!(u64::MAX - 1),
        json!(u32::MAX as u64 + 1),
        json!(u32::MAX),
        json!(i64::MAX),
        json!(i64::MIN),
        json!(i32::MAX),
        json!(i16::MAX),
        json!(1_000_000),
        json!(0),
        json!(1),
        json!(-1),
        json!(-5),
        json!(1e300),
        json!(0.5),
        json!(true),
        json!(null),
        json!(""),
        json!("p"),
        json!("t"),
        json!("PRODUCER_FENCED"),
        json!("read_committed"),
        json!([]),
        json!({}),
    ];
    let mut cases = 0;
    for (f, root) in SKELETONS.iter().enumerate() {
        let mut all = Vec::new();
        paths(root, &mut Vec::new(), &mut all);
        for path in &all[1..] {
            let mut probe = root.clone();
            let scalar = scalar_kind(at(&mut probe, path)).is_some();
            // A container is swapped only for another shape; its scalars are swapped one by one.
            let fits = |r: &&Value| scalar || !(r.is_number() || r.is_string() || r.is_boolean());
            for (replacement, remove) in extremes.iter().filter(fits).map(|r| (r, false)).chain([(&json!(null), true)])
            {
                cases += 1;
                if let Err(e) = swap_and_check(root, path, replacement, remove) {
                    panic!(
                        "corpus file {f}, {path:?}, {}: {e}",
                        if remove { "removed".into() } else { replacement.to_string() }
                    );
                }
            }
        }
    }
    println!("{cases} cases clean");
}
