//! Knowledge memory through the `cairn` binary, as a user runs it: entities (the same name
//! and type twice is one entity), conflicting facts and `facts conflicts`, supersession and
//! `facts list` against `--history`, a preference cited by `cairn recall`, `cairn forget`
//! of a fact, and the human forms of the commands.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn cairn(data: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("--data-dir")
        .arg(data)
        .args(["--tenant", "acme", "--user", "kim"])
        .args(args)
        .env("CAIRN_LOG", "error")
        .env_remove("CAIRN_SESSION")
        .output()
        .unwrap()
}

/// Runs a command that must succeed and print JSON.
fn json(data: &Path, args: &[&str]) -> Value {
    let out = cairn(data, args);
    assert!(
        out.status.success(),
        "cairn {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "cairn {args:?}: not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Runs a command that must succeed; its stdout.
fn text(data: &Path, args: &[&str]) -> String {
    let out = cairn(data, args);
    assert!(
        out.status.success(),
        "cairn {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn ids(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn entities_facts_preferences_and_recall_through_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();

    // The same name and type twice is one entity; the second write adds its alias.
    let a = json(
        data,
        &[
            "entities",
            "add",
            "Alice Johnson",
            "--type",
            "person",
            "--alias",
            "Ali",
            "--description",
            "Engineer at Acme",
            "--json",
        ],
    );
    let b = json(
        data,
        &[
            "entities",
            "add",
            "alice  JOHNSON",
            "--type",
            "PERSON",
            "--alias",
            "AJ",
            "--json",
        ],
    );
    assert_eq!(a["id"], b["id"], "{a}\n{b}");
    assert_eq!(b["aliases"], serde_json::json!(["Ali", "AJ"]));
    let alice = a["id"].as_str().unwrap().to_string();
    let acme = json(
        data,
        &[
            "entities",
            "add",
            "Acme",
            "--type",
            "organization",
            "--json",
        ],
    );
    let acme = acme["id"].as_str().unwrap().to_string();
    assert_eq!(
        ids(&json(data, &["entities", "list", "--json"])),
        [alice.clone(), acme.clone()]
    );
    assert_eq!(
        ids(&json(
            data,
            &["entities", "list", "--type", "organization", "--json"]
        )),
        vec![acme.clone()]
    );
    let found = json(data, &["entities", "search", "aj", "--exact", "--json"]);
    assert_eq!(ids(&found), vec![alice.clone()]);
    let found = json(data, &["entities", "search", "an engineer", "--json"]);
    assert_eq!(found[0]["item"]["id"], alice.as_str(), "{found}");
    // Relationships, by bare id or ref.
    json(
        data,
        &[
            "entities",
            "relate",
            &format!("ent:{alice}"),
            &acme,
            "works_at",
            "--json",
        ],
    );
    let related = json(data, &["entities", "related", &acme, "--json"]);
    assert_eq!(related[0]["entity"]["id"], alice.as_str(), "{related}");
    assert_eq!(related[0]["depth"], 1);
    // A duplicate merged into Alice answers through her.
    let dup = json(
        data,
        &[
            "entities",
            "add",
            "A. Johnson",
            "--type",
            "person",
            "--json",
        ],
    );
    let dup = dup["id"].as_str().unwrap().to_string();
    let merged = json(data, &["entities", "merge", &dup, &alice, "--json"]);
    assert_eq!(merged["id"], alice.as_str());
    assert!(merged["aliases"]
        .as_array()
        .unwrap()
        .iter()
        .any(|x| x == "A. Johnson"));
    let shown = json(data, &["entities", "show", &dup, "--json"]);
    assert_eq!(shown["merged_into"], alice.as_str());
    assert_eq!(ids(&json(data, &["entities", "list", "--json"])).len(), 2);
    let human = text(data, &["entities", "list"]);
    assert!(
        human.contains(&format!("ent:{alice}  Alice Johnson (person)  aka Ali, AJ")),
        "{human}"
    );

    // Two objects for an undeclared predicate: both stay current, as a conflict.
    let paris = json(
        data,
        &[
            "facts",
            "add",
            "Kim",
            "lives in",
            "Paris",
            "--valid-from",
            "2020-01-01T00:00:00Z",
            "--json",
        ],
    );
    let paris = paris["fact"]["id"].as_str().unwrap().to_string();
    let berlin = json(
        data,
        &[
            "facts",
            "add",
            "Kim",
            "lives_in",
            "Berlin",
            "--confidence",
            "0.8",
            "--json",
        ],
    );
    assert_eq!(berlin["conflicts_with"], serde_json::json!([paris]));
    let berlin = berlin["fact"]["id"].as_str().unwrap().to_string();
    let conflicts = json(data, &["facts", "conflicts", "--json"]);
    assert_eq!(conflicts.as_array().unwrap().len(), 1, "{conflicts}");
    assert_eq!(conflicts[0]["subject"], "kim");
    assert_eq!(conflicts[0]["predicate"], "lives_in");
    let mut sides = ids(&conflicts[0]["facts"]);
    sides.sort();
    let mut both = vec![paris.clone(), berlin.clone()];
    both.sort();
    assert_eq!(sides, both);
    let human = text(data, &["facts", "conflicts"]);
    assert!(human.contains("kim lives_in: 2 current objects"), "{human}");
    assert!(human.contains(&format!("fact:{paris}")), "{human}");

    // Recall shows both sides and lists the conflict.
    let env = json(data, &["recall", "Where does Kim live?", "--json"]);
    let pack = &env["memory_pack"];
    let refs: Vec<&str> = pack["citations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["ref"].as_str().unwrap())
        .collect();
    assert!(
        refs.contains(&format!("fact:{paris}").as_str())
            && refs.contains(&format!("fact:{berlin}").as_str()),
        "{}",
        pack["context_markdown"]
    );
    assert_eq!(pack["conflicts"].as_array().unwrap().len(), 1, "{pack}");

    // A superseding fact: current list against history.
    let madrid = json(
        data,
        &[
            "facts",
            "add",
            "Kim",
            "lives in",
            "Madrid",
            "--supersede",
            "--valid-from",
            "2024-06-01T00:00:00Z",
            "--evidence",
            &format!("fact:{paris}"),
            "--json",
        ],
    );
    let mut superseded: Vec<String> = madrid["superseded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect();
    superseded.sort();
    assert_eq!(superseded, both);
    let madrid = madrid["fact"]["id"].as_str().unwrap().to_string();
    assert_eq!(
        ids(&json(data, &["facts", "list", "--json"])),
        vec![madrid.clone()]
    );
    let history = json(data, &["facts", "list", "--history", "--json"]);
    assert_eq!(
        ids(&history),
        [paris.clone(), berlin.clone(), madrid.clone()]
    );
    assert_eq!(history[0]["status"], "superseded");
    assert_eq!(history[0]["superseded_by"], madrid.as_str());
    assert_eq!(
        ids(&json(
            data,
            &[
                "facts",
                "list",
                "--subject",
                "KIM",
                "--predicate",
                "Lives-In",
                "--json"
            ]
        )),
        vec![madrid.clone()]
    );
    assert_eq!(
        json(data, &["facts", "conflicts", "--json"]),
        serde_json::json!([])
    );
    let human = text(data, &["facts", "list", "--history"]);
    assert!(
        human.contains(&format!(
            "fact:{paris}  superseded  Kim lives in Paris (from 2020-01-01 until 2024-06-01)"
        )),
        "{human}"
    );
    assert!(
        human.contains(&format!("fact:{madrid}  current     Kim lives in Madrid")),
        "{human}"
    );
    let shown = json(
        data,
        &["facts", "show", &format!("fact:{madrid}"), "--json"],
    );
    assert_eq!(
        shown["evidence_refs"],
        serde_json::json!([format!("fact:{paris}")])
    );
    // Bad input is a clear error, not a panic.
    let out = cairn(
        data,
        &[
            "facts",
            "add",
            "Kim",
            "lives in",
            "Rome",
            "--valid-from",
            "yesterday",
        ],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("RFC 3339"));

    // A declared multi-valued predicate never conflicts.
    let p = json(data, &["facts", "declare", "speaks", "multi", "--json"]);
    assert_eq!(p["cardinality"], "multi");
    json(data, &["facts", "add", "Kim", "speaks", "French", "--json"]);
    let spanish = json(
        data,
        &["facts", "add", "Kim", "speaks", "Spanish", "--json"],
    );
    assert_eq!(spanish["conflicts_with"], serde_json::json!([]));
    assert_eq!(
        json(data, &["facts", "conflicts", "--json"]),
        serde_json::json!([])
    );

    // A preference is cited by recall for a related question.
    let pref = json(
        data,
        &[
            "prefs",
            "add",
            "food",
            "Vegetarian, no mushrooms",
            "--context",
            "when booking restaurants",
            "--json",
        ],
    );
    let pref = pref["id"].as_str().unwrap().to_string();
    json(
        data,
        &[
            "prefs",
            "add",
            "communication",
            "Short answers in bullet points",
            "--json",
        ],
    );
    let listed = json(data, &["prefs", "list", "--category", "Food", "--json"]);
    assert_eq!(ids(&listed), vec![pref.clone()]);
    let human = text(data, &["prefs", "list"]);
    assert!(
        human.contains(&format!(
            "pref:{pref}  [food] Vegetarian, no mushrooms  (context: when booking restaurants)"
        )),
        "{human}"
    );
    let env = json(
        data,
        &["recall", "Book a restaurant for dinner on Friday", "--json"],
    );
    let pack = &env["memory_pack"];
    let cited: Vec<&str> = pack["citations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["ref"].as_str().unwrap())
        .collect();
    assert!(
        cited.contains(&format!("pref:{pref}").as_str()),
        "{}",
        pack["context_markdown"]
    );
    let md = text(data, &["recall", "Book a restaurant for dinner on Friday"]);
    assert!(md.contains(&format!("`pref:{pref}`")), "{md}");
    assert!(md.contains("Vegetarian, no mushrooms"), "{md}");

    // Another user of the tenant sees none of it.
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("--data-dir")
        .arg(data)
        .args([
            "--tenant", "acme", "--user", "lee", "facts", "list", "--json",
        ])
        .env("CAIRN_LOG", "error")
        .output()
        .unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap(),
        serde_json::json!([])
    );

    // Traces: none written here (agents write them over HTTP or MCP); the reads answer.
    assert_eq!(
        json(data, &["traces", "list", "--json"]),
        serde_json::json!([])
    );
    assert_eq!(
        json(data, &["traces", "stats", "--json"]),
        serde_json::json!([])
    );
    assert_eq!(
        json(data, &["traces", "similar", "book a table", "--json"]),
        serde_json::json!([])
    );
    let out = cairn(data, &["traces", "show", "no-such-trace"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no trace"));

    // Forgetting a preference by its ref: recall no longer cites it.
    let report = json(data, &["forget", &format!("pref:{pref}"), "--json"]);
    assert_eq!(report["ref"], format!("pref:{pref}"));
    assert_eq!(
        ids(&json(
            data,
            &["prefs", "list", "--category", "food", "--json"]
        )),
        Vec::<String>::new()
    );
    let md = text(data, &["recall", "Book a restaurant for dinner on Friday"]);
    assert!(!md.contains(&format!("pref:{pref}")), "{md}");
}
