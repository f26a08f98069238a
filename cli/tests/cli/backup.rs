//! Online backup and verified restore against a real `cairn serve`: writers keep writing
//! while `cairn backup --server` takes the backup; `cairn restore` copies it into a new data
//! directory and verifies it (counts against the manifest, a recall sample on both stores);
//! a server on the restored directory holds every write acknowledged before the backup
//! began, and its restored store answers recall.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::crash::{agent, send, Server};

fn scope() -> Value {
    json!({"tenant": "bk", "user": "u", "namespace": "n", "agent": "a", "session": "s"})
}

const Q: &str = "tenant=bk&user=u&namespace=n";

/// Every message content of conversation `c` (paged).
fn contents(server: &Server, c: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut offset = 0;
    loop {
        let (s, v) = server
            .send(
                "GET",
                &format!("/v1/conversations/{c}/messages?{Q}&limit=1000&offset={offset}"),
                None,
            )
            .unwrap();
        assert_eq!(s, 200, "{v}");
        let page = v["messages"].as_array().unwrap();
        out.extend(
            page.iter()
                .map(|m| m["content"].as_str().unwrap().to_string()),
        );
        if page.len() < 1000 {
            return out;
        }
        offset += page.len();
    }
}

/// Runs `cairn` on the embedded store unless `args` name a server (`--qdrant-url`): the
/// environment's `CAIRN_QDRANT_URL` (a run of every suite on a server) is blanked.
fn cairn(args: &[&str], data: Option<&Path>) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cairn"));
    cmd.env("CAIRN_QDRANT_URL", "");
    if let Some(d) = data {
        cmd.arg("--data-dir").arg(d);
    }
    let out = cmd.args(args).env("CAIRN_LOG", "warn").output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn online_backup_under_writes_restores_verified() {
    let dir = tempfile::tempdir().unwrap();
    let (data, backup, restored) = (
        dir.path().join("data"),
        dir.path().join("backup"),
        dir.path().join("restored"),
    );
    // The embedded store's backup (the server's is the test below), also when every suite
    // runs on a server: a blank CAIRN_QDRANT_URL means none.
    let embedded = [("CAIRN_QDRANT_URL", "")];
    let log = dir.path().join("serve.log");
    let server =
        Server::try_start(&data, None, &log, &embedded).unwrap_or_else(|(s, l)| panic!("{s}: {l}"));

    // What is stored before: documents and a conversation.
    for i in 0..4 {
        let text = format!(
            "Project note {i}: the Kestrel {i} release ships from warehouse {i} after review."
        );
        let (s, v) = server
            .send(
                "POST",
                "/v1/documents",
                Some(&json!({"scope": scope(), "source": format!("notes/{i}.md"), "text": text})),
            )
            .unwrap();
        assert_eq!(s, 200, "{v}");
    }
    // Writers: messages one at a time, each acknowledged one recorded.
    let acked: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (acked, stop, base) = (Arc::clone(&acked), Arc::clone(&stop), server.base.clone());
            std::thread::spawn(move || {
                let agent = agent();
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let content = format!("writer {w} message {i} about shipment {i}");
                    let body = json!({"scope": scope(), "messages": [{"conversation_id": "c1", "role": "user",
                        "content": content, "message_id": format!("w{w}-{i}")}]});
                    let (s, v) = send(&agent, &base, "POST", "/v1/messages", Some(&body)).unwrap();
                    assert_eq!(s, 200, "{v}");
                    acked.lock().unwrap().push(content);
                    i += 1;
                }
            })
        })
        .collect();
    while acked.lock().unwrap().len() < 40 {
        std::thread::sleep(Duration::from_millis(20));
    }
    let before_backup: Vec<String> = acked.lock().unwrap().clone();
    let (ok, out, err) = cairn(
        &[
            "backup",
            "--server",
            &server.base,
            "--to",
            backup.to_str().unwrap(),
        ],
        None,
    );
    assert!(ok, "cairn backup failed: {err}");
    let during = acked.lock().unwrap().len() - before_backup.len();
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let manifest: Value = serde_json::from_str(&out).unwrap();
    eprintln!(
        "backup: {} points, {} writes replayed, {} ms; {} messages acknowledged before it began, {during} while it ran",
        manifest["points"], manifest["replayed"], manifest["elapsed_ms"], before_backup.len()
    );
    assert!(
        during > 0,
        "no write happened while the backup ran: the test proves nothing"
    );
    assert!(backup.join("cairn-backup.json").is_file());

    // A second backup into the same (now non-empty) directory is refused, nothing touched.
    let (ok, _, err) = cairn(
        &[
            "backup",
            "--server",
            &server.base,
            "--to",
            backup.to_str().unwrap(),
        ],
        None,
    );
    assert!(!ok && err.contains("not empty"), "{err}");

    // Restore, verified.
    let (ok, out, err) = cairn(
        &["restore", "--from", backup.to_str().unwrap()],
        Some(&restored),
    );
    assert!(ok, "cairn restore failed: {err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["copy"]["verified"], true, "{report}");
    assert_eq!(
        report["copy"]["counts"]["target_after"], manifest["points"],
        "{report}"
    );
    assert!(
        report["copy"]["sample"]["total"].as_u64().unwrap() > 0,
        "{report}"
    );
    // Restoring onto a store is refused.
    let (ok, _, err) = cairn(
        &["restore", "--from", backup.to_str().unwrap()],
        Some(&restored),
    );
    assert!(!ok && err.contains("already holds a store"), "{err}");

    // The restored data directory serves everything acknowledged before the backup began.
    server.kill();
    let again = Server::try_start(&restored, None, &log, &embedded)
        .unwrap_or_else(|(s, l)| panic!("{s}: {l}"));
    let have = contents(&again, "c1");
    let missing: Vec<&String> = before_backup
        .iter()
        .filter(|c| !have.contains(*c))
        .collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged messages missing after restore: {missing:?}",
        missing.len()
    );
    still_a_store(&again, &have, "w0-0", "writer 0 message 0 about shipment 0");
    let (s, v) = again
        .send("GET", &format!("/v1/documents?{Q}"), None)
        .unwrap();
    assert_eq!((s, v["total"].as_u64()), (200, Some(4)), "{v}");
    let (s, v) = again.send("POST", "/v1/recall", Some(&json!({"scope": scope(), "query": "Which warehouse does the Kestrel 2 release ship from?"}))).unwrap();
    assert_eq!(s, 200, "{v}");
    assert!(
        v["context_markdown"]
            .as_str()
            .unwrap()
            .contains("warehouse 2"),
        "{v}"
    );
    again.kill();
}

/// The number of messages the conversation holds (the route's `total`, duplicates counted).
fn message_total(server: &Server, c: &str) -> u64 {
    let (s, v) = server
        .send(
            "GET",
            &format!("/v1/conversations/{c}/messages?{Q}&limit=1"),
            None,
        )
        .unwrap();
    assert_eq!(s, 200, "{v}");
    v["total"].as_u64().unwrap()
}

/// The restored store behaves as a store, not a read-only copy: replaying an acknowledged
/// message (same id, same text) adds nothing, a new message is stored once and recalled.
fn still_a_store(server: &Server, have: &BTreeSet<String>, replay_id: &str, replay: &str) {
    assert!(have.contains(replay), "{replay} not restored");
    let total = message_total(server, "c1");
    assert_eq!(total, have.len() as u64, "restored messages are distinct");
    let post = |id: &str, content: &str| {
        let body = json!({"scope": scope(), "messages": [{"conversation_id": "c1", "role": "user",
            "content": content, "message_id": id}]});
        let (s, v) = server.send("POST", "/v1/messages", Some(&body)).unwrap();
        assert_eq!(s, 200, "{v}");
    };
    post(replay_id, replay);
    assert_eq!(
        message_total(server, "c1"),
        total,
        "a replay added a message"
    );
    let new = "after the restore: the Osprey crate left dock 9 on Tuesday";
    post("after-restore", new);
    post("after-restore", new);
    assert_eq!(
        message_total(server, "c1"),
        total + 1,
        "the new message is stored once"
    );
    let (s, v) = server
        .send(
            "POST",
            "/v1/recall",
            Some(
                &json!({"scope": scope(), "query": "Which dock did the Osprey crate leave from?"}),
            ),
        )
        .unwrap();
    assert_eq!(s, 200, "{v}");
    assert!(
        v["context_markdown"].as_str().unwrap().contains("dock 9"),
        "{v}"
    );
}

/// The gRPC URL of the test's Qdrant server, if there is one.
fn qdrant() -> Option<String> {
    std::env::var("CAIRN_QDRANT_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
}

/// Deletes the collections a test created (best effort, through the REST port next to the
/// gRPC one), also when it fails.
struct DropCollections(String, Vec<String>);

impl Drop for DropCollections {
    fn drop(&mut self) {
        let rest = self.0.trim_end_matches('/').replace(":6334", ":6333");
        for name in &self.1 {
            let _ = ureq::delete(&format!("{rest}/collections/{name}")).call();
        }
    }
}

/// The same on a Qdrant server: `cairn backup` takes the server's own snapshot of the
/// collection while writers keep writing, downloads it (SHA-256 checked); `cairn restore`
/// recovers it into a new collection and verifies it (count, a recall sample); a server on
/// the restored collection holds every write acknowledged before the backup began.
#[test]
fn server_backup_is_a_snapshot_and_restores_verified() {
    let Some(url) = qdrant() else {
        eprintln!(
            "server_backup_is_a_snapshot_and_restores_verified did not run: CAIRN_QDRANT_URL is not set"
        );
        return;
    };
    let id = uuid::Uuid::new_v4().simple().to_string();
    let (live, restored) = (format!("backup_live_{id}"), format!("backup_restored_{id}"));
    let _cleanup = DropCollections(url.clone(), vec![live.clone(), restored.clone()]);
    let dir = tempfile::tempdir().unwrap();
    let (data, backup) = (dir.path().join("data"), dir.path().join("backup"));
    let log = dir.path().join("serve.log");
    let env = [
        ("CAIRN_QDRANT_URL", url.as_str()),
        ("CAIRN_QDRANT_COLLECTION", live.as_str()),
    ];
    let server =
        Server::try_start(&data, None, &log, &env).unwrap_or_else(|(s, l)| panic!("{s}: {l}"));
    for i in 0..4 {
        let text = format!(
            "Project note {i}: the Kestrel {i} release ships from warehouse {i} after review."
        );
        let (s, v) = server
            .send(
                "POST",
                "/v1/documents",
                Some(&json!({"scope": scope(), "source": format!("notes/{i}.md"), "text": text})),
            )
            .unwrap();
        assert_eq!(s, 200, "{v}");
    }
    let acked: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (acked, stop, base) = (Arc::clone(&acked), Arc::clone(&stop), server.base.clone());
        std::thread::spawn(move || {
            let agent = agent();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let content = format!("server writer message {i} about shipment {i}");
                let body = json!({"scope": scope(), "messages": [{"conversation_id": "c1", "role": "user",
                    "content": content, "message_id": format!("s-{i}")}]});
                let (s, v) = send(&agent, &base, "POST", "/v1/messages", Some(&body)).unwrap();
                assert_eq!(s, 200, "{v}");
                acked.lock().unwrap().push(content);
                i += 1;
            }
        })
    };
    while acked.lock().unwrap().len() < 20 {
        std::thread::sleep(Duration::from_millis(20));
    }
    let before_backup: Vec<String> = acked.lock().unwrap().clone();
    let (ok, out, err) = cairn(
        &[
            "backup",
            "--server",
            &server.base,
            "--to",
            backup.to_str().unwrap(),
        ],
        None,
    );
    assert!(ok, "cairn backup failed: {err}");
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    let manifest: Value = serde_json::from_str(&out).unwrap();
    let snapshot = &manifest["snapshot"];
    assert_eq!(snapshot["collection"], live.as_str(), "{manifest}");
    let file = backup.join(snapshot["file"].as_str().unwrap());
    assert_eq!(
        std::fs::metadata(&file).unwrap().len(),
        snapshot["bytes"].as_u64().unwrap(),
        "{manifest}"
    );
    eprintln!(
        "server backup: {} points ({} before the snapshot), {} bytes, {} ms",
        snapshot["points_after"],
        snapshot["points_before"],
        snapshot["bytes"],
        manifest["elapsed_ms"]
    );

    // A snapshot is restored onto a server only, into a collection that does not exist.
    let (ok, _, err) = cairn(
        &["restore", "--from", backup.to_str().unwrap()],
        Some(&dir.path().join("x")),
    );
    assert!(!ok && err.contains("server snapshot"), "{err}");
    let restore = |collection: &str| {
        cairn(
            &[
                "--qdrant-url",
                &url,
                "--qdrant-collection",
                collection,
                "restore",
                "--from",
                backup.to_str().unwrap(),
            ],
            Some(&dir.path().join("r")),
        )
    };
    let (ok, _, err) = restore(&live);
    assert!(!ok && err.contains("already exists"), "{err}");
    let (ok, out, err) = restore(&restored);
    assert!(ok, "cairn restore failed: {err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    let sample = &report["sample"];
    assert!(sample["total"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(sample["matched"], sample["total"], "{report}");
    assert!(
        report["points"].as_u64().unwrap() >= snapshot["points_before"].as_u64().unwrap(),
        "{report}"
    );

    // A snapshot whose bytes changed is refused before it reaches the server.
    {
        use std::io::{Seek, SeekFrom, Write};
        let copy = dir.path().join("tampered");
        std::fs::create_dir(&copy).unwrap();
        std::fs::copy(
            backup.join("cairn-backup.json"),
            copy.join("cairn-backup.json"),
        )
        .unwrap();
        let bad = copy.join(snapshot["file"].as_str().unwrap());
        std::fs::copy(&file, &bad).unwrap();
        let mut f = std::fs::OpenOptions::new().write(true).open(&bad).unwrap();
        f.seek(SeekFrom::Start(1000)).unwrap();
        f.write_all(b"tampered").unwrap();
        let other = format!("backup_tampered_{id}");
        let (ok, _, err) = cairn(
            &[
                "--qdrant-url",
                &url,
                "--qdrant-collection",
                &other,
                "restore",
                "--from",
                copy.to_str().unwrap(),
            ],
            Some(&dir.path().join("t")),
        );
        assert!(!ok && err.contains("SHA-256"), "{err}");
    }

    // The restored collection serves everything acknowledged before the backup began.
    server.kill();
    let env = [
        ("CAIRN_QDRANT_URL", url.as_str()),
        ("CAIRN_QDRANT_COLLECTION", restored.as_str()),
    ];
    let again = Server::try_start(&dir.path().join("data2"), None, &log, &env)
        .unwrap_or_else(|(s, l)| panic!("{s}: {l}"));
    let have = contents(&again, "c1");
    let missing: Vec<&String> = before_backup
        .iter()
        .filter(|c| !have.contains(*c))
        .collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged messages missing after restore: {missing:?}",
        missing.len()
    );
    still_a_store(
        &again,
        &have,
        "s-0",
        "server writer message 0 about shipment 0",
    );
    let (s, v) = again
        .send("GET", &format!("/v1/documents?{Q}"), None)
        .unwrap();
    assert_eq!((s, v["total"].as_u64()), (200, Some(4)), "{v}");
    let (s, v) = again.send("POST", "/v1/recall", Some(&json!({"scope": scope(), "query": "Which warehouse does the Kestrel 2 release ship from?"}))).unwrap();
    assert_eq!(s, 200, "{v}");
    assert!(
        v["context_markdown"]
            .as_str()
            .unwrap()
            .contains("warehouse 2"),
        "{v}"
    );
    again.kill();
}
