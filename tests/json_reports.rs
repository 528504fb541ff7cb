//! Every `--json` report validates against its schema under schemas/, from real runs: passing and
//! failing scenarios, a holding and a violated model check, and the two catalogues; and the exit codes
//! are the table's (0 pass, 1 a problem found, 2 bad input).

use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs txnsim from the repository root; its exit code and its stdout parsed as JSON.
fn json_of(args: &[&str]) -> (i32, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_txnsim")).args(args).current_dir(root()).output().expect("run txnsim");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!("{args:?} printed no JSON ({e}): {stdout} {}", String::from_utf8_lossy(&out.stderr))
    });
    (out.status.code().unwrap_or(-1), value)
}

fn assert_valid(schema_file: &str, report: &Value) {
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("schemas").join(schema_file)).expect("schema reads"))
            .expect("schema is JSON");
    let validator = jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("{schema_file} is no schema: {e}"));
    let errors: Vec<String> =
        validator.iter_errors(report).map(|e| format!("{} at {}", e, e.instance_path())).collect();
    assert!(errors.is_empty(), "output does not match {schema_file}:\n{}", errors.join("\n"));
}

#[test]
fn scenario_reports_match_their_schema() {
    let (code, pass) = json_of(&["scenario", "--json", "seeds/scenarios"]);
    assert_eq!(code, 0, "the corpus passes");
    assert_valid("scenario.schema.json", &pass);
    assert_eq!(pass["failed"], 0);
    assert!(pass["passed"].as_u64().is_some_and(|n| n >= 31), "{}", pass["passed"]);

    let (code, fail) =
        json_of(&["scenario", "--json", "--show", "--mutation", "no-aborted-index-entry", "seeds/scenarios"]);
    assert_eq!(code, 1, "a mutation that bites fails some scenario");
    assert_valid("scenario.schema.json", &fail);
    assert_eq!(fail["mutation"], "no-aborted-index-entry");
    let failed =
        fail["scenarios"].as_array().expect("a list").iter().find(|s| s["result"] == "fail").expect("one fails");
    assert!(failed["difference"]["field"].is_string(), "{failed}");
    assert!(failed["table"].as_array().is_some_and(|t| !t.is_empty()), "--show adds the step table: {failed}");
}

#[test]
fn check_reports_match_their_schema() {
    // Bounds small enough for a debug build: one record on one partition, no readers.
    let tiny = ["check", "--json", "--records", "1", "--partitions", "1", "--polls", "0", "--txn-timeouts", "0"];
    let (code, holds) = json_of(&tiny);
    assert_eq!(code, 0, "{holds}");
    assert_valid("check.schema.json", &holds);
    assert_eq!((holds["complete"].clone(), holds["violated"].clone()), (Value::Bool(true), Value::Bool(false)));

    let mut violated_args = tiny.to_vec();
    violated_args.extend(["--mutation", "no-aborted-index-entry"]);
    let (code, violated) = json_of(&violated_args);
    assert_eq!(code, 1, "{violated}");
    assert_valid("check.schema.json", &violated);
    let path = &violated["paths"][0];
    assert_eq!(path["kind"], "counterexample");
    assert_eq!(path["property"], "aborted-index-exact", "{violated}");
}

#[test]
fn catalogue_reports_match_their_schemas() {
    let (code, invariants) = json_of(&["invariants", "--json"]);
    assert_eq!(code, 0);
    assert_valid("invariants.schema.json", &invariants);
    assert_eq!(
        invariants["invariants"].as_array().map(Vec::len),
        Some(txnsim_properties::Invariant::catalogue().count())
    );

    let (code, mutations) = json_of(&["mutations", "--json"]);
    assert_eq!(code, 0);
    assert_valid("mutations.schema.json", &mutations);
    assert_eq!(mutations["mutations"].as_array().map(Vec::len), Some(txnsim_engine::Mutation::ALL.len()));
}

#[test]
fn a_report_that_breaks_its_schema_is_caught() {
    // The validation above can fail: a report without its format field is refused.
    let (_, mut invariants) = json_of(&["invariants", "--json"]);
    invariants.as_object_mut().expect("an object").remove("format");
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("schemas/invariants.schema.json")).expect("reads"))
            .expect("JSON");
    assert!(!jsonschema::is_valid(&schema, &invariants), "a report without 'format' must not validate");
}
