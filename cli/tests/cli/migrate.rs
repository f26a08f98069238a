//! `cairn migrate` through the binary: a data directory with documents and messages in two
//! tenants copied to another data directory (always), and to a Qdrant server and back
//! (when `CAIRN_QDRANT_URL` names one). Each time: the same point count on both sides, the
//! same citations from `cairn recall`, a second run that changes nothing, and the report's
//! verification. A source directory without a store and a target holding other points are
//! refused.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const QUESTION: &str = "Where is the assembly point if there is a fire?";

/// The binary with the given data directory, on the embedded store whatever the
/// environment says (a server is only ever named explicitly here).
fn cairn(data: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .env("CAIRN_LOG", "error")
        .env_remove("CAIRN_QDRANT_URL")
        .env_remove("CAIRN_QDRANT_COLLECTION")
        .env_remove("CAIRN_SESSION")
        .output()
        .unwrap()
}

fn ok(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what} failed ({:?}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): stdout={} stderr={}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A data directory with two documents and a conversation in tenant `acme`, and a
/// document in tenant `other`.
fn populate(data: &Path) {
    let docs = tempfile::tempdir().unwrap();
    std::fs::write(
        docs.path().join("safety.md"),
        "# Safety\n\n## Fire\n\nIn case of fire, leave by the nearest staircase. The assembly point is the car park behind building D. Fire wardens wear yellow vests.\n\n## First aid\n\nFirst aid kits are next to every kitchen.\n",
    )
    .unwrap();
    std::fs::write(
        docs.path().join("wifi.txt"),
        "The guest wifi network is called Harbor-Guest and its password changes every Monday.",
    )
    .unwrap();
    let dir = docs.path().to_str().unwrap();
    ok(
        cairn(data, &["--tenant", "acme", "ingest", dir]),
        "ingest acme",
    );
    let messages = docs.path().join("chat.jsonl");
    std::fs::write(
        &messages,
        concat!(
            r#"{"conversation_id": "c1", "role": "user", "content": "During the last fire drill we met at the car park behind building D.", "turn_id": "t1"}"#,
            "\n",
            r#"{"conversation_id": "c1", "role": "assistant", "content": "Noted: the fire assembly point is the car park behind building D.", "turn_id": "t1"}"#,
            "\n",
            r#"{"conversation_id": "c1", "role": "user", "content": "My locker number is 42.", "turn_id": "t2"}"#,
            "\n"
        ),
    )
    .unwrap();
    ok(
        cairn(
            data,
            &[
                "--tenant",
                "acme",
                "ingest",
                "--messages",
                messages.to_str().unwrap(),
            ],
        ),
        "ingest messages",
    );
    let other = docs.path().join("other.txt");
    std::fs::write(
        &other,
        "Tenant other keeps its fire extinguishers in the lobby.",
    )
    .unwrap();
    ok(
        cairn(
            data,
            &["--tenant", "other", "ingest", other.to_str().unwrap()],
        ),
        "ingest other",
    );
}

/// Every point of the data directory's store.
fn points(data: &Path) -> u64 {
    let out = ok(cairn(data, &["stats", "--json"]), "stats");
    json(&out)["all_scopes_points"].as_u64().unwrap()
}

/// The refs `cairn recall` cites for [`QUESTION`] in tenant `acme`, sorted.
fn cited(out: Output) -> Vec<String> {
    let env = json(&ok(out, "recall"));
    let mut refs: Vec<String> = env["memory_pack"]["citations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["ref"].as_str().unwrap().to_string())
        .collect();
    refs.sort();
    refs
}

fn recall(data: &Path) -> Vec<String> {
    cited(cairn(
        data,
        &["--tenant", "acme", "recall", QUESTION, "--json"],
    ))
}

/// `cairn migrate`; its exit status and report.
fn migrate(cwd_data: &Path, args: &[&str]) -> (Output, Value) {
    let mut all = vec!["migrate"];
    all.extend_from_slice(args);
    let out = cairn(cwd_data, &all);
    let report = json(&out);
    (out, report)
}

/// A successful migration's report: verified, with `n` points on both sides.
fn assert_verified(report: &Value, n: u64) {
    assert_eq!(report["verified"], true, "{report:#}");
    assert_eq!(report["points_copied"], n, "{report:#}");
    assert_eq!(report["counts"]["source_after"], n, "{report:#}");
    assert_eq!(report["counts"]["target_after"], n, "{report:#}");
    let total = report["sample"]["total"].as_u64().unwrap();
    assert!(total > 0, "{report:#}");
    assert_eq!(report["sample"]["matched"], total, "{report:#}");
    assert!(report["problems"].as_array().unwrap().is_empty());
}

#[test]
fn directory_to_directory_copies_verifies_and_is_idempotent() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    populate(&a);
    let n = points(&a);
    let before = recall(&a);
    assert!(!before.is_empty());

    let (out, report) = migrate(
        tmp.path(),
        &["--from", a.to_str().unwrap(), "--to", b.to_str().unwrap()],
    );
    let out = ok(out, "migrate a -> b");
    assert_verified(&report, n);
    assert_eq!(report["counts"]["target_before"], 0);
    assert_eq!(report["source"]["kind"], "embedded");
    assert_eq!(report["target"]["kind"], "embedded");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("{n} points copied")), "{stderr}");
    eprintln!(
        "dir -> dir: {n} points in {} ms",
        report["elapsed_ms"].as_u64().unwrap()
    );

    assert_eq!(points(&b), n);
    assert_eq!(recall(&b), before);

    // Again: the same points over themselves.
    let (out, report) = migrate(
        tmp.path(),
        &["--from", a.to_str().unwrap(), "--to", b.to_str().unwrap()],
    );
    ok(out, "migrate a -> b again");
    assert_verified(&report, n);
    assert_eq!(report["counts"]["target_before"], n);
    assert_eq!(points(&b), n);

    // A typo in --from is refused, and creates nothing (neither it nor the target).
    let typo = tmp.path().join("typo");
    let never = tmp.path().join("never");
    let out = cairn(
        tmp.path(),
        &[
            "migrate",
            "--from",
            typo.to_str().unwrap(),
            "--to",
            never.to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no Cairn store"), "{stderr}");
    assert!(!typo.exists() && !never.exists());

    // A copy onto itself is refused.
    let out = cairn(
        tmp.path(),
        &[
            "migrate",
            "--from",
            a.to_str().unwrap(),
            "--to",
            a.to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("same store"));

    // A target that holds other points: the copy happens, the verification says why it
    // fails, and the report still comes out.
    let c = tmp.path().join("c");
    let extra = tmp.path().join("extra.txt");
    std::fs::write(&extra, "Something only the target knows about.").unwrap();
    ok(
        cairn(&c, &["--tenant", "zed", "ingest", extra.to_str().unwrap()]),
        "ingest into c",
    );
    let held = points(&c);
    let (out, report) = migrate(
        tmp.path(),
        &["--from", a.to_str().unwrap(), "--to", c.to_str().unwrap()],
    );
    assert!(!out.status.success());
    assert_eq!(report["verified"], false);
    assert_eq!(report["counts"]["target_before"], held);
    assert_eq!(report["counts"]["target_after"], n + held);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not in the source")
            && stderr.contains(&format!("held {held} points before the copy")),
        "{stderr}"
    );
}

/// The gRPC URL of the test server, if there is one.
fn server() -> Option<String> {
    std::env::var("CAIRN_QDRANT_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
}

/// Deletes a collection this test created (best effort, through the REST port next to the
/// gRPC one).
fn drop_collection(grpc: &str, name: &str) {
    let rest = grpc.trim_end_matches('/').replace(":6334", ":6333");
    let _ = ureq::delete(&format!("{rest}/collections/{name}")).call();
}

#[test]
fn directory_to_server_and_back() {
    let Some(url) = server() else {
        eprintln!("directory_to_server_and_back did not run: CAIRN_QDRANT_URL is not set");
        return;
    };
    let collection = format!("migrate_test_{}", uuid::Uuid::new_v4().simple());
    struct Cleanup<'a>(&'a str, &'a str);
    impl Drop for Cleanup<'_> {
        fn drop(&mut self) {
            drop_collection(self.0, self.1);
        }
    }
    let _cleanup = Cleanup(&url, &collection);

    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    let d = tmp.path().join("d");
    populate(&a);
    let n = points(&a);
    let before = recall(&a);
    assert!(!before.is_empty());

    let to_server = [
        "--from",
        a.to_str().unwrap(),
        "--to",
        url.as_str(),
        "--collection",
        collection.as_str(),
    ];
    let (out, report) = migrate(tmp.path(), &to_server);
    ok(out, "migrate dir -> server");
    assert_verified(&report, n);
    assert_eq!(report["counts"]["target_before"], 0);
    assert_eq!(report["target"]["kind"], "qdrant");
    assert_eq!(report["target"]["collection"], collection.as_str());
    eprintln!(
        "dir -> server: {n} points in {} ms",
        report["elapsed_ms"].as_u64().unwrap()
    );
    // Idempotent.
    let (out, report) = migrate(tmp.path(), &to_server);
    ok(out, "migrate dir -> server again");
    assert_verified(&report, n);
    assert_eq!(report["counts"]["target_before"], n);

    // Recall served from the server collection cites the same.
    let on_server = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("--data-dir")
        .arg(tmp.path().join("server-client"))
        .args(["--qdrant-url", &url, "--qdrant-collection", &collection])
        .args(["--tenant", "acme", "recall", QUESTION, "--json"])
        .env("CAIRN_LOG", "error")
        .env_remove("CAIRN_SESSION")
        .output()
        .unwrap();
    assert_eq!(cited(on_server), before);

    let (out, report) = migrate(
        tmp.path(),
        &[
            "--from",
            url.as_str(),
            "--collection",
            collection.as_str(),
            "--to",
            d.to_str().unwrap(),
        ],
    );
    ok(out, "migrate server -> dir");
    assert_verified(&report, n);
    assert_eq!(report["source"]["kind"], "qdrant");
    eprintln!(
        "server -> dir: {n} points in {} ms",
        report["elapsed_ms"].as_u64().unwrap()
    );
    assert_eq!(points(&d), n);
    assert_eq!(recall(&d), before);
}
