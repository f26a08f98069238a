#![allow(clippy::unwrap_used)]
//! Every scenario under `eval/scenarios/` passes, through the real engine and model.

use std::path::Path;

use cairn_eval::scenario;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_passes() {
    let env = crate::eval_env().await;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let results = scenario::run_dir(&env, &dir).await.unwrap();
    assert!(results.len() >= 6, "{} scenarios found", results.len());
    let summary = scenario::summary(&results);
    println!("{summary}");
    assert!(results.iter().all(|r| r.passed), "{summary}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_expectation_is_reported() {
    let env = crate::eval_env().await;
    let s: scenario::Scenario = serde_json::from_value(serde_json::json!({
        "name": "wrong on purpose",
        "scopes": {"a": {"tenant": "t", "user": "u"}},
        "steps": [
            {"op": "ingest_document", "scope": "a", "source": "x.txt", "text": "The sky is blue.",
             "expect": {"status": "updated"}},
            {"op": "recall", "scope": "a", "query": "What colour is the sky?",
             "expect": {"cited_sources": ["y.txt"], "conflicts": 2}},
            {"op": "stats", "scope": "missing"},
            {"op": "add_fact", "scope": "a", "subject": "Sky", "predicate": "colour", "object": "blue",
             "as": "blue", "expect": {"superseded": ["$blue"]}},
            {"op": "add_preference", "scope": "a", "category": "c", "preference": " ",
             "expect": {"same_as": "$blue"}},
            {"op": "recall", "scope": "a", "query": "What colour is the sky?",
             "expect": {"cited_refs": ["$nope"], "not_cited_refs": ["$blue"]}}
        ]
    }))
    .unwrap();
    let r = scenario::run(&env, &s).await.unwrap();
    assert!(!r.passed);
    let all = r.failures.join("\n");
    // `$name`s: a name is known after its step only and stands for the record's ref;
    // a knowledge write the service refuses is an unexpected error.
    assert!(all.contains("no step named \"blue\""), "{all}");
    assert!(all.contains("no step named \"nope\""), "{all}");
    assert!(all.contains("ref \"fact:"), "{all}");
    assert!(all.contains("unexpected bad_input error"), "{all}");
    assert!(all.contains("status: expected \"updated\""), "{all}");
    assert!(all.contains("source \"y.txt\" not cited"), "{all}");
    assert!(all.contains("conflicts: expected 2"), "{all}");
    assert!(all.contains("unknown scope"), "{all}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn known_bugs_are_reported_apart_from_failures() {
    let env = crate::eval_env().await;
    let s: scenario::Scenario = serde_json::from_value(serde_json::json!({
        "name": "a documented bug",
        "scopes": {"a": {"tenant": "t", "user": "u"}},
        "steps": [
            {"op": "ingest_document", "scope": "a", "source": "x.txt", "text": "The sky is blue."},
            {"op": "recall", "scope": "a", "query": "What colour is the sky?",
             "expect": {"conflicts": 2, "first_source": "x.txt"}}
        ],
        "known_bugs": [
            {"step": 2, "contains": "conflicts: expected 2", "bug": "pretend bug"},
            {"step": 1, "contains": "never happens", "bug": "fixed bug"}
        ]
    }))
    .unwrap();
    let r = scenario::run(&env, &s).await.unwrap();
    assert!(r.passed, "{:?}", r.failures);
    assert!(
        r.failures.is_empty(),
        "the pack dump of an explained step is dropped too"
    );
    assert_eq!(r.known_bugs.len(), 1);
    assert!(r.known_bugs[0].contains("pretend bug"));
    assert_eq!(r.notices.len(), 1);
    assert!(r.notices[0].contains("no longer reproduces"));
}

#[test]
fn scenario_files_reject_unknown_fields() {
    let bad = serde_json::json!({
        "name": "typo",
        "scopes": {},
        "steps": [{"op": "recall", "scope": "a", "query": "q", "expect": {"coverag": "full"}}]
    });
    assert!(serde_json::from_value::<scenario::Scenario>(bad).is_err());
}
