//! Two `cairn serve` processes on one Qdrant collection (two replicas behind a load
//! balancer): everything a single process serializes with a mutex stays correct when the
//! two write concurrently, because the service also takes the store-wide lease of the same
//! section (`MemoryStore::lock`, a lease point in the collection).
//!
//! Checked, each with requests spread over both processes at once:
//! - message sequence numbers of one conversation are 0..n, no gap, no repeat;
//! - identical completions of one turn store one turn and all get the same receipt; differing
//!   completions of another turn: exactly one is stored, the others are `409 turn_conflict`;
//! - trace steps added without a number are numbered 1..n;
//! - superseding writes of one single-valued fact leave exactly one current fact;
//! - concurrent approvals of one candidate write one reviewed memory.
//!
//! Needs a Qdrant server: `CAIRN_QDRANT_URL=http://127.0.0.1:6334`. Without it the test says
//! so and does not run (CI runs the embedded path; the README's "Scaling out" section shows
//! how to build and start a server locally).

// Test setup may panic on failure: that is a test failure, not a bug to handle.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

struct Server {
    child: Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address `cairn serve --addr 127.0.0.1:0` bound, read from the "listening on" line
/// of its stderr log; `None` until it is there. The OS picks the port: picking a "free"
/// one here and passing it on races every other test starting a server meanwhile (two
/// tests once talked to one server that way).
fn bound_addr(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let rest = text.split("listening on http://").nth(1)?;
    Some(rest.split_whitespace().next()?.to_string())
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into()
}

fn start(data: &Path, url: &str, collection: &str) -> Server {
    let log = data.with_extension("stderr.log");
    let child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("--data-dir")
        .arg(data)
        .args(["serve", "--addr", "127.0.0.1:0"])
        .args(["--qdrant-url", url, "--qdrant-collection", collection])
        .env("CAIRN_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut server = Server {
        child,
        base: String::new(),
    };
    let started = Instant::now();
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            panic!(
                "cairn serve exited at start ({status}): {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        if let Some(addr) = bound_addr(&log) {
            server.base = format!("http://{addr}");
            if let Ok((200, ready)) = send(&server.base, "GET", "/readyz", None) {
                assert_eq!(ready["backend"], "qdrant", "{ready}");
                assert_eq!(ready["collection"], collection, "{ready}");
                break;
            }
        }
        assert!(started.elapsed() < Duration::from_secs(120), "not ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

fn send(
    base: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<(u16, Value), String> {
    let agent = agent();
    let url = format!("{base}{path}");
    let resp = match method {
        "POST" => agent
            .post(&url)
            .header("content-type", "application/json")
            .send(body.map(|b| b.to_string()).unwrap_or_default()),
        "GET" => agent.get(&url).call(),
        other => panic!("{other}"),
    };
    let mut resp = resp.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let text = resp
        .body_mut()
        .read_to_string()
        .map_err(|e| e.to_string())?;
    Ok((
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    ))
}

fn scope() -> Value {
    json!({"tenant": "replicas", "user": "u", "namespace": "n", "agent": "a", "session": "s"})
}

const Q: &str = "tenant=replicas&user=u&namespace=n";

/// Sends every request of `jobs` at once (one thread each), alternating between the two
/// processes; returns the answers in job order.
fn concurrently(
    bases: &[String; 2],
    jobs: Vec<(&'static str, String, Value)>,
) -> Vec<(u16, Value)> {
    let barrier = Arc::new(std::sync::Barrier::new(jobs.len()));
    let handles: Vec<_> = jobs
        .into_iter()
        .enumerate()
        .map(|(i, (method, path, body))| {
            let base = bases[i % 2].clone();
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                send(&base, method, &path, Some(&body)).unwrap()
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn two_processes_on_one_collection_stay_serialized() {
    let Some(url) = std::env::var("CAIRN_QDRANT_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
    else {
        eprintln!(
            "CAIRN_QDRANT_URL is not set: the two-replica test needs a Qdrant server, not run"
        );
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let collection = format!("replicas_{}", uuid::Uuid::new_v4().simple());
    let a = start(&tmp.path().join("a"), &url, &collection);
    let b = start(&tmp.path().join("b"), &url, &collection);
    let bases = [a.base.clone(), b.base.clone()];

    // Message sequence numbers: 16 single-message appends to one conversation at once.
    let jobs = (0..16)
        .map(|i| {
            (
                "POST",
                "/v1/messages".to_string(),
                json!({"scope": scope(), "messages": [
                    {"conversation_id": "c1", "role": "user", "content": format!("message number {i}")}
                ]}),
            )
        })
        .collect();
    for (status, body) in concurrently(&bases, jobs) {
        assert!((200..300).contains(&status), "{status} {body}");
    }
    let (status, page) = send(
        &bases[1],
        "GET",
        &format!("/v1/conversations/c1/messages?{Q}&limit=100"),
        None,
    )
    .unwrap();
    assert_eq!(status, 200, "{page}");
    let seqs: Vec<u64> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (0..16).collect::<Vec<u64>>(), "{page}");

    // One turn completed 8 times at once with the same content: one turn, one receipt.
    let same = json!({"scope": scope(), "user_message": "Where is the spare key?",
                      "assistant_message": "Under the blue flowerpot."});
    let jobs = (0..8)
        .map(|_| ("POST", "/v1/turns/t1/complete".to_string(), same.clone()))
        .collect();
    let answers = concurrently(&bases, jobs);
    for (status, body) in &answers {
        assert!((200..300).contains(status), "{status} {body}");
        assert_eq!(body["digest"], answers[0].1["digest"]);
        assert_eq!(body["user_message_ref"], answers[0].1["user_message_ref"]);
    }
    // Another turn completed 6 times at once with different content: one wins.
    let jobs = (0..6)
        .map(|i| {
            (
                "POST",
                "/v1/turns/t2/complete".to_string(),
                json!({"scope": scope(), "user_message": format!("question {i}"),
                       "assistant_message": format!("answer {i}")}),
            )
        })
        .collect();
    let answers = concurrently(&bases, jobs);
    let stored: Vec<_> = answers
        .iter()
        .filter(|(s, _)| (200..300).contains(s))
        .collect();
    assert_eq!(stored.len(), 1, "{answers:?}");
    for (status, body) in answers.iter().filter(|(s, _)| !(200..300).contains(s)) {
        assert_eq!(*status, 409, "{body}");
        assert_eq!(body["error"]["code"], "turn_conflict", "{body}");
    }
    let (_, page) = send(
        &bases[0],
        "GET",
        &format!("/v1/conversations/s/messages?{Q}&limit=100"),
        None,
    )
    .unwrap();
    let turn_messages = page["messages"]
        .as_array()
        .map(|m| m.len())
        .unwrap_or_default();
    assert_eq!(turn_messages, 4, "two turns of two messages: {page}");

    // Trace steps without a number: 1..12.
    let (status, trace) = send(
        &bases[0],
        "POST",
        "/v1/traces",
        Some(&json!({"scope": scope(), "task": "count the steps"})),
    )
    .unwrap();
    assert!((200..300).contains(&status), "{trace}");
    let trace_id = trace["id"].as_str().unwrap().to_string();
    let jobs = (0..12)
        .map(|i| {
            (
                "POST",
                format!("/v1/traces/{trace_id}/steps"),
                json!({"scope": scope(), "thought": format!("step {i}")}),
            )
        })
        .collect();
    for (status, body) in concurrently(&bases, jobs) {
        assert!((200..300).contains(&status), "{status} {body}");
    }
    let (_, view) = send(
        &bases[1],
        "GET",
        &format!("/v1/traces/{trace_id}?{Q}&limit=100"),
        None,
    )
    .unwrap();
    let numbers: BTreeSet<u64> = view["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step_number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, (1..=12).collect::<BTreeSet<u64>>(), "{view}");
    assert_eq!(view["steps"].as_array().unwrap().len(), 12);

    // Superseding writes of one fact at once: exactly one current fact.
    let jobs = (0..8)
        .map(|i| {
            (
                "POST",
                "/v1/facts".to_string(),
                json!({"scope": scope(), "subject": "user", "predicate": "lives_in",
                       "object": format!("city {i}"), "supersede": true}),
            )
        })
        .collect();
    for (status, body) in concurrently(&bases, jobs) {
        assert!((200..300).contains(&status), "{status} {body}");
    }
    let (_, facts) = send(
        &bases[0],
        "GET",
        &format!("/v1/facts?{Q}&subject=user&predicate=lives_in&history=true&limit=100"),
        None,
    )
    .unwrap();
    let current: Vec<&Value> = facts["facts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["status"] == "current")
        .collect();
    assert_eq!(current.len(), 1, "{facts}");
    assert_eq!(facts["facts"].as_array().unwrap().len(), 8, "{facts}");

    // Concurrent approvals of one candidate: one decision, one memory.
    let (status, proposed) = send(
        &bases[0],
        "POST",
        "/v1/candidates",
        Some(
            &json!({"scope": scope(), "source_agent": "notes-bot", "memory_type": "fact",
                     "content": "The spare key is under the blue flowerpot.",
                     "evidence_refs": ["msg:c1/0"], "confidence": 0.9}),
        ),
    )
    .unwrap();
    assert!((200..300).contains(&status), "{proposed}");
    let id = proposed["candidate"]["candidate_id"]
        .as_str()
        .unwrap()
        .to_string();
    let jobs = (0..6)
        .map(|_| {
            (
                "POST",
                format!("/v1/candidates/{id}/approve"),
                json!({"scope": scope(), "note": "checked"}),
            )
        })
        .collect();
    let answers = concurrently(&bases, jobs);
    let memory_refs: BTreeSet<String> = answers
        .iter()
        .filter(|(s, _)| (200..300).contains(s))
        .map(|(_, v)| v["memory_ref"].to_string())
        .collect();
    assert!(!memory_refs.is_empty(), "{answers:?}");
    assert_eq!(memory_refs.len(), 1, "{answers:?}");
    let (_, stats) = send(&bases[1], "GET", &format!("/v1/stats?{Q}"), None).unwrap();
    eprintln!("stats after the concurrent run: {stats}");
    drop((a, b));
}
