//! Crash consistency of a real `cairn serve` process: nothing acknowledged is lost, no
//! reference is reused, and an interrupted write path finishes when it is retried.
//!
//! - [`every_write_path_recovers_from_a_crash_at_every_step`]: one scenario touching every
//!   write path (document create and update, message batch, turn complete, candidate
//!   proposal and approval, entities, a relationship and a merge, facts with evidence,
//!   a trace with a step and a tool call, forget of a message and of a document, a
//!   superseding and a conflicting fact) runs once cleanly, then
//!   once per crash point: the server is started with a failpoint armed
//!   (`CAIRN_FAILPOINTS`, see `cairn_models::failpoint`), dies there, is restarted without
//!   it, and the interrupted request and the rest of the scenario are sent again. The final
//!   state must equal the clean run's. The crash points are every store write (after the
//!   shard applied it but before it was journaled, and after it was durable) and each named
//!   step of the write paths.
//! - [`acknowledged_writes_survive_random_kill_9`]: concurrent writers against a server that
//!   is `kill -9`ed at varying moments, several rounds over one data directory; every
//!   acknowledged document, message and turn is there after each restart.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const TENANT: &str = "crash";

pub(crate) struct Server {
    child: Child,
    pub(crate) base: String,
    agent: ureq::Agent,
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

pub(crate) fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into()
}

impl Server {
    pub(crate) fn start(data: &Path, failpoints: Option<&str>) -> Server {
        Server::try_start(data, failpoints, &data.with_extension("stderr.log"), &[])
            .unwrap_or_else(|(status, log)| panic!("cairn serve exited at start ({status}): {log}"))
    }

    /// Starts `cairn serve` on `data` with its stderr in `log` and `env` set; `Err` with the
    /// exit status and the log when the process exits instead of becoming ready.
    pub(crate) fn try_start(
        data: &Path,
        failpoints: Option<&str>,
        log: &Path,
        env: &[(&str, &str)],
    ) -> Result<Server, (std::process::ExitStatus, String)> {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cairn"));
        cmd.arg("--data-dir")
            .arg(data)
            .args(["serve", "--addr", "127.0.0.1:0"])
            .env("CAIRN_LOG", "error")
            .env_remove("CAIRN_FAILPOINTS")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap());
        if let Some(f) = failpoints {
            cmd.env("CAIRN_FAILPOINTS", f);
        }
        cmd.envs(env.iter().copied());
        let mut child = cmd.spawn().unwrap();
        let agent = agent();
        let started = Instant::now();
        let base = loop {
            if let Some(status) = child.try_wait().unwrap() {
                return Err((status, std::fs::read_to_string(log).unwrap_or_default()));
            }
            if let Some(addr) = bound_addr(log) {
                let base = format!("http://{addr}");
                if let Ok(r) = agent.get(&format!("{base}/readyz")).call() {
                    if r.status() == 200 {
                        break base;
                    }
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "server not ready"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        Ok(Server { child, base, agent })
    }

    /// Whether the process still runs.
    pub(crate) fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// SIGTERM (a graceful stop), then the exit status.
    pub(crate) fn stop(mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if started.elapsed() > Duration::from_secs(60) {
                let _ = self.child.kill();
                return self.child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `Err` when the connection failed (the server died).
    pub(crate) fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Value), String> {
        send(&self.agent, &self.base, method, path, body)
    }

    pub(crate) fn kill(mut self) {
        let _ = self.child.kill(); // SIGKILL
        let _ = self.child.wait();
    }

    /// Waits for the process to die on its own (a failpoint aborted it).
    fn wait_dead(mut self) {
        let started = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "server still alive"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

pub(crate) fn send(
    agent: &ureq::Agent,
    base: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<(u16, Value), String> {
    let url = format!("{base}{path}");
    let resp = match method {
        "POST" => agent
            .post(&url)
            .header("content-type", "application/json")
            .send(body.map(|b| b.to_string()).unwrap_or_default()),
        "GET" => agent.get(&url).call(),
        "DELETE" => agent.delete(&url).call(),
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
    json!({"tenant": TENANT, "user": "u", "namespace": "n", "agent": "a", "session": "s"})
}

const Q: &str = "tenant=crash&user=u&namespace=n";

/// One step of the scenario: a request whose path or body may use earlier answers.
struct Step {
    name: &'static str,
    method: &'static str,
    path: fn(&BTreeMap<&'static str, String>) -> String,
    body: fn(&BTreeMap<&'static str, String>) -> Value,
    /// What to remember from the answer.
    keep: fn(&Value, &mut BTreeMap<&'static str, String>),
}

const V1: &str = "# Handbook\n\nThe office opens at 8am. Visitors sign in at the front desk.\n\n## Parking\n\nStaff park on level 2 of the garage.";
const V2: &str = "# Handbook\n\nThe office opens at 9am. Visitors sign in at the front desk.\n\n## Parking\n\nStaff park on level 3 of the garage.\n\n## Lunch\n\nThe canteen serves lunch from noon.";

fn nothing(_: &Value, _: &mut BTreeMap<&'static str, String>) {}

fn scenario() -> Vec<Step> {
    vec![
        Step {
            name: "document create",
            method: "POST",
            path: |_| "/v1/documents".into(),
            body: |_| json!({"scope": scope(), "source": "handbook.md", "text": V1, "media_type": "text/markdown"}),
            keep: nothing,
        },
        Step {
            name: "document update",
            method: "POST",
            path: |_| "/v1/documents".into(),
            body: |_| json!({"scope": scope(), "source": "handbook.md", "text": V2, "media_type": "text/markdown"}),
            keep: |v, k| {
                k.insert("doc", v["doc_id"].as_str().unwrap().to_string());
            },
        },
        Step {
            name: "message batch",
            method: "POST",
            path: |_| "/v1/messages".into(),
            body: |_| {
                json!({"scope": scope(), "messages": [
                    {"conversation_id": "c1", "role": "user", "content": "My locker number is 42.", "turn_id": "m1"},
                    {"conversation_id": "c1", "role": "assistant", "content": "Noted: locker 42.", "turn_id": "m1"}
                ]})
            },
            keep: nothing,
        },
        Step {
            name: "turn complete",
            method: "POST",
            path: |_| "/v1/turns/t1/complete".into(),
            body: |_| {
                json!({"scope": scope(), "user_message": "My manager is Priya Raman.",
                       "assistant_message": "Got it, Priya Raman is your manager."})
            },
            keep: nothing,
        },
        Step {
            name: "candidate proposal",
            method: "POST",
            path: |_| "/v1/candidates".into(),
            body: |_| {
                json!({"scope": scope(), "source_agent": "notes-bot", "memory_type": "fact",
                       "content": "The user's locker is number 42.", "evidence_refs": ["msg:c1/0"],
                       "confidence": 0.9})
            },
            keep: |v, k| {
                k.insert(
                    "cand",
                    v["candidate"]["candidate_id"].as_str().unwrap().to_string(),
                );
            },
        },
        Step {
            name: "candidate approve",
            method: "POST",
            path: |k| format!("/v1/candidates/{}/approve", k["cand"]),
            body: |_| json!({"scope": scope(), "note": "checked"}),
            keep: nothing,
        },
        Step {
            name: "entity",
            method: "POST",
            path: |_| "/v1/entities".into(),
            body: |_| json!({"scope": scope(), "name": "Priya Raman", "type": "person", "description": "The user's manager"}),
            keep: |v, k| {
                k.insert("priya", v["id"].as_str().unwrap().to_string());
            },
        },
        Step {
            name: "duplicate entity",
            method: "POST",
            path: |_| "/v1/entities".into(),
            body: |_| json!({"scope": scope(), "name": "P. Raman", "type": "person"}),
            keep: |v, k| {
                k.insert("dup", v["id"].as_str().unwrap().to_string());
            },
        },
        Step {
            name: "relationship",
            method: "POST",
            path: |_| "/v1/relationships".into(),
            body: |k| json!({"scope": scope(), "source_id": k["dup"], "target_id": k["priya"], "relationship_type": "same_team"}),
            keep: nothing,
        },
        Step {
            name: "merge",
            method: "POST",
            path: |_| "/v1/entities/merge".into(),
            body: |k| json!({"scope": scope(), "source_id": k["dup"], "target_id": k["priya"]}),
            keep: nothing,
        },
        Step {
            name: "fact with message evidence",
            method: "POST",
            path: |_| "/v1/facts".into(),
            body: |_| json!({"scope": scope(), "subject": "user", "predicate": "has_locker", "object": "42", "evidence_refs": ["msg:c1/0"]}),
            keep: nothing,
        },
        Step {
            name: "fact with document evidence",
            method: "POST",
            path: |_| "/v1/facts".into(),
            body: |k| json!({"scope": scope(), "subject": "office", "predicate": "opens_at", "object": "9am", "evidence_refs": [format!("doc:{}", k["doc"])]}),
            keep: nothing,
        },
        Step {
            name: "trace",
            method: "POST",
            path: |_| "/v1/traces".into(),
            body: |_| json!({"scope": scope(), "task": "Find the user's locker", "trace_key": "locker-1"}),
            keep: |v, k| {
                k.insert("trace", v["id"].as_str().unwrap().to_string());
            },
        },
        Step {
            name: "trace step",
            method: "POST",
            path: |k| format!("/v1/traces/{}/steps", k["trace"]),
            body: |_| json!({"scope": scope(), "thought": "Search the messages", "action": "recall", "step_number": 1}),
            keep: |v, k| {
                k.insert("step", v["id"].as_str().unwrap().to_string());
            },
        },
        Step {
            name: "tool call",
            method: "POST",
            path: |k| format!("/v1/steps/{}/tool-calls", k["step"]),
            body: |_| json!({"scope": scope(), "tool_name": "recall", "arguments": {"q": "locker"}, "result": {"found": "42"}, "duration_ms": 12, "call_number": 1}),
            keep: nothing,
        },
        Step {
            name: "trace complete",
            method: "POST",
            path: |k| format!("/v1/traces/{}/complete", k["trace"]),
            body: |_| json!({"scope": scope(), "outcome": "Locker 42", "success": true}),
            keep: nothing,
        },
        Step {
            name: "forget a message",
            method: "POST",
            path: |_| "/v1/forget".into(),
            body: |_| json!({"scope": scope(), "ref": "msg:c1/0"}),
            keep: nothing,
        },
        Step {
            name: "forget a document",
            method: "POST",
            path: |_| "/v1/forget".into(),
            body: |k| json!({"scope": scope(), "ref": format!("doc:{}", k["doc"])}),
            keep: nothing,
        },
        Step {
            name: "message after forgets",
            method: "POST",
            path: |_| "/v1/messages".into(),
            body: |_| {
                json!({"scope": scope(), "messages": [
                    {"conversation_id": "c1", "role": "user", "content": "I moved to locker 7.", "turn_id": "m2"}
                ]})
            },
            keep: nothing,
        },
        Step {
            name: "superseding fact",
            method: "POST",
            path: |_| "/v1/facts".into(),
            body: |_| json!({"scope": scope(), "subject": "user", "predicate": "has_locker", "object": "7", "supersede": true, "valid_from": 1_750_000_000_000_i64}),
            keep: nothing,
        },
        Step {
            name: "conflicting fact",
            method: "POST",
            path: |_| "/v1/facts".into(),
            body: |_| json!({"scope": scope(), "subject": "user", "predicate": "has_locker", "object": "8", "valid_from": 1_760_000_000_000_i64}),
            keep: nothing,
        },
    ]
}

/// Drops what legitimately differs between runs (clocks and durations).
fn normalize(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|k, _| {
                !(k == "ts"
                    || k.ends_with("_at")
                    || k.ends_with("_ms")
                    || k == "elapsed"
                    || k == "request_id")
            });
            map.values_mut().for_each(normalize);
        }
        Value::Array(items) => items.iter_mut().for_each(normalize),
        _ => {}
    }
}

/// Everything observable about the scope, then a `kill -9` and the CLI's counts after
/// recovery.
fn snapshot(server: Server, data: &Path) -> Value {
    let get = |path: &str| {
        let (s, v) = server.send("GET", path, None).unwrap();
        assert!(s == 200 || s == 404, "{path}: {s} {v}");
        json!({"status": s, "body": v})
    };
    let mut state = json!({
        "documents": get(&format!("/v1/documents?{Q}")),
        "conversation": get(&format!("/v1/conversations/c1/messages?{Q}")),
        "turn_messages": get(&format!("/v1/conversations/s/messages?{Q}")),
        "candidates": get(&format!("/v1/candidates?{Q}")),
        "entities": get(&format!("/v1/entities?{Q}")),
        "relationships": get(&format!("/v1/relationships?{Q}")),
        "facts": get(&format!("/v1/facts?{Q}&history=true")),
        "conflicts": get(&format!("/v1/facts/conflicts?{Q}")),
        "traces": get(&format!("/v1/traces?{Q}")),
    });
    // The trace with its steps and calls (its id is keyed, so the same in every run).
    let traces = state["traces"]["body"]["traces"].clone();
    if let Some(id) = traces.get(0).and_then(|t| t["id"].as_str()) {
        state["trace"] = get(&format!("/v1/traces/{id}?{Q}"));
    }
    let (s, pack) = server
        .send(
            "POST",
            "/v1/recall",
            Some(&json!({"scope": scope(), "query": "Which locker and which manager?"})),
        )
        .unwrap();
    assert_eq!(s, 200, "{pack}");
    let mut refs: Vec<String> = pack["citations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["ref"].as_str().unwrap_or_default().to_string())
        .collect();
    refs.sort();
    state["recall_refs"] = json!(refs);
    server.kill();
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("--data-dir")
        .arg(data)
        .args([
            "--tenant",
            TENANT,
            "--user",
            "u",
            "--namespace",
            "n",
            "stats",
            "--json",
        ])
        .env("CAIRN_LOG", "error")
        .env_remove("CAIRN_FAILPOINTS")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stats: Value = serde_json::from_slice(&out.stdout).unwrap();
    state["counts"] = stats["counts"].clone();
    state["all_points"] = stats["all_scopes_points"].clone();
    normalize(&mut state);
    state
}

/// Runs the scenario; with `failpoints`, the server dies at the armed point, is restarted
/// without it and the interrupted step is retried. Returns the final state and whether a
/// crash happened.
fn run(data: &Path, failpoints: Option<&str>) -> (Value, bool) {
    let mut server = Server::start(data, failpoints);
    let mut kept = BTreeMap::new();
    let mut crashed = false;
    for step in scenario() {
        let path = (step.path)(&kept);
        let body = (step.body)(&kept);
        let answer = match server.send(step.method, &path, Some(&body)) {
            Ok(a) => a,
            Err(e) => {
                assert!(!crashed, "crashed twice ({e})");
                crashed = true;
                server.wait_dead();
                server = Server::start(data, None);
                server
                    .send(step.method, &path, Some(&body))
                    .unwrap_or_else(|e| panic!("{}: retry failed: {e}", step.name))
            }
        };
        assert!(
            answer.0 == 200 || answer.0 == 201,
            "{} ({failpoints:?}): {} {}",
            step.name,
            answer.0,
            answer.1
        );
        (step.keep)(&answer.1, &mut kept);
    }
    (snapshot(server, data), crashed)
}

#[test]
fn every_write_path_recovers_from_a_crash_at_every_step() {
    let root = tempfile::tempdir().unwrap();
    let (clean, crashed) = run(&root.path().join("clean"), None);
    assert!(!crashed);
    // The scenario's own expectations, so a wrong clean run cannot pass by agreement.
    assert_eq!(
        clean["documents"]["body"]["documents"],
        json!([]),
        "{clean}"
    );
    let conv = clean["conversation"]["body"]["messages"]
        .as_array()
        .unwrap();
    let conv_refs: Vec<&str> = conv.iter().map(|m| m["ref"].as_str().unwrap()).collect();
    assert_eq!(conv_refs, vec!["msg:c1/1", "msg:c1/2"], "{clean}");
    assert_eq!(clean["counts"]["chunks"], 0, "{clean}");
    // Knowledge: the merged duplicate resolves to Priya, the message-backed and the
    // document-backed facts were invalidated by the forgets, locker 7 superseded nothing
    // current (42 was invalidated first) and conflicts with 8; the trace has its step
    // and call.
    let facts = clean["facts"]["body"]["facts"].as_array().unwrap();
    let status = |object: &str| {
        facts
            .iter()
            .find(|f| f["object"] == object)
            .map(|f| f["status"].as_str().unwrap().to_string())
    };
    assert_eq!(status("42").as_deref(), Some("invalidated"), "{clean}");
    assert_eq!(status("9am").as_deref(), Some("invalidated"), "{clean}");
    assert_eq!(status("7").as_deref(), Some("current"), "{clean}");
    assert_eq!(status("8").as_deref(), Some("current"), "{clean}");
    assert_eq!(
        clean["conflicts"]["body"]["conflicts"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "{clean}"
    );
    assert_eq!(
        clean["entities"]["body"]["entities"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "{clean}"
    );
    assert_eq!(
        clean["trace"]["body"]["steps"][0]["tool_calls"][0]["tool_name"], "recall",
        "{clean}"
    );
    assert_eq!(clean["trace"]["body"]["success"], true, "{clean}");

    let mut points: Vec<String> = Vec::new();
    for name in [
        "ingest.doc.after_chunks",
        "ingest.doc.after_flip",
        "ingest.messages.before_write",
        "turn.after_messages",
        "approve.after_status",
        "knowledge.fact.after_new",
        "knowledge.merge.after_relationships",
        "forget.after_derived",
        "forget.after_evidence",
    ] {
        points.push(name.to_string());
        points.push(format!("{name}@2"));
    }
    // Every store write, before it is journaled and after it is durable. The sweep ends
    // when the scenario runs through without reaching the point.
    let mut tried = 0;
    let mut crashes = 0;
    let mut mismatches = Vec::new();
    let mut check = |spec: &str| -> bool {
        let dir = root.path().join(format!("fp-{tried}"));
        tried += 1;
        let (state, crashed) = run(&dir, Some(spec));
        if crashed {
            crashes += 1;
        }
        if state != clean {
            mismatches.push(format!("{spec}: {state}"));
        }
        let _ = std::fs::remove_dir_all(&dir);
        crashed
    };
    for p in &points {
        check(p);
    }
    for point in ["store.after_apply", "store.after_sync"] {
        for k in 1.. {
            if !check(&format!("{point}@{k}")) {
                break;
            }
        }
    }
    println!(
        "crash points tried: {tried}, crashed: {crashes}, final state differs: {}",
        mismatches.len()
    );
    assert!(
        mismatches.is_empty(),
        "clean: {clean}\nafter crash and retry:\n{}",
        mismatches.join("\n")
    );
    assert!(
        crashes >= 20,
        "the sweep reached few crash points: {crashes}"
    );
}

#[test]
fn acknowledged_writes_survive_random_kill_9() {
    let data = tempfile::tempdir().unwrap();
    let data = data.path().join("d");
    #[derive(Default)]
    struct Acked {
        documents: BTreeMap<String, String>, // source -> doc_id
        messages: BTreeMap<String, String>,  // ref -> content
        turns: BTreeMap<String, Value>,      // turn id -> receipt
        refs_seen: BTreeMap<String, String>, // every msg ref ever handed out -> content
    }
    let acked = Arc::new(Mutex::new(Acked::default()));
    let mut serial = 0usize;
    let rounds = 5;
    let mut reused = Vec::new();
    for round in 0..rounds {
        let server = Server::start(&data, None);
        let stop = Arc::new(AtomicBool::new(false));
        let mut writers = Vec::new();
        for w in 0..4usize {
            let base = server.base.clone();
            let stop = Arc::clone(&stop);
            let acked = Arc::clone(&acked);
            let first = serial + w * 10_000;
            writers.push(std::thread::spawn(move || {
                let agent = agent();
                for i in first.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let r = match i % 3 {
                        0 => {
                            let source = format!("note-{i}.md");
                            let text = format!("Note {i}: the codeword for round {round} writer {w} is zebra-{i}.");
                            send(&agent, &base, "POST", "/v1/documents", Some(&json!({
                                "scope": scope(), "source": source, "text": text, "media_type": "text/markdown"})))
                            .map(|(s, v)| {
                                if s == 200 {
                                    acked.lock().unwrap().documents.insert(source, v["doc_id"].as_str().unwrap().to_string());
                                }
                            })
                        }
                        1 => {
                            let content = format!("message {i} from writer {w}");
                            send(&agent, &base, "POST", "/v1/messages", Some(&json!({
                                "scope": scope(), "messages": [{"conversation_id": "chat", "role": "user",
                                "content": content, "turn_id": format!("k{i}")}]})))
                            .map(|(s, v)| {
                                if s == 200 {
                                    let r = v["receipts"][0]["ref"].as_str().unwrap().to_string();
                                    let mut a = acked.lock().unwrap();
                                    a.messages.insert(r.clone(), content.clone());
                                    a.refs_seen.insert(r, content);
                                }
                            })
                        }
                        _ => {
                            let turn = format!("turn-{i}");
                            send(&agent, &base, "POST", &format!("/v1/turns/{turn}/complete"), Some(&json!({
                                "scope": scope(), "user_message": format!("question {i}"),
                                "assistant_message": format!("answer {i}")})))
                            .map(|(s, v)| {
                                if s == 200 {
                                    acked.lock().unwrap().turns.insert(turn, v);
                                }
                            })
                        }
                    };
                    if r.is_err() {
                        break; // the server was killed
                    }
                }
            }));
        }
        // Kill at a varying moment.
        std::thread::sleep(Duration::from_millis(700 + (round as u64 * 530) % 1900));
        server.kill();
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().unwrap();
        }
        serial += 100_000;

        // Restart and verify every acknowledged write.
        let server = Server::start(&data, None);
        let a = acked.lock().unwrap();
        let mut lost = Vec::new();
        let (s, docs) = server
            .send("GET", &format!("/v1/documents?{Q}&limit=10000"), None)
            .unwrap();
        assert_eq!(s, 200, "{docs}");
        let listed: BTreeMap<String, String> = docs["documents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                (
                    d["source"].as_str().unwrap().to_string(),
                    d["doc_id"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        for (source, id) in &a.documents {
            if listed.get(source) != Some(id) {
                lost.push(format!("document {source}"));
            }
        }
        let mut stored: BTreeMap<String, String> = BTreeMap::new();
        loop {
            let (s, conv) = server
                .send(
                    "GET",
                    &format!(
                        "/v1/conversations/chat/messages?{Q}&limit=100&offset={}",
                        stored.len()
                    ),
                    None,
                )
                .unwrap();
            if s != 200 {
                break;
            }
            let page = conv["messages"].as_array().unwrap();
            for m in page {
                stored.insert(
                    m["ref"].as_str().unwrap().to_string(),
                    m["content"].as_str().unwrap_or_default().to_string(),
                );
            }
            if page.is_empty() || stored.len() as u64 >= conv["total"].as_u64().unwrap() {
                break;
            }
        }
        for (r, content) in &a.messages {
            if stored.get(r) != Some(content) {
                lost.push(format!("message {r}"));
            }
        }
        // A ref handed out once never names other content.
        for (r, content) in &stored {
            if let Some(seen) = a.refs_seen.get(r) {
                if seen != content {
                    reused.push(format!("{r}: {seen:?} then {content:?}"));
                }
            }
        }
        for (turn, receipt) in &a.turns {
            let i = turn.trim_start_matches("turn-");
            let (s, v) = server
                .send(
                    "POST",
                    &format!("/v1/turns/{turn}/complete"),
                    Some(&json!({
                    "scope": scope(), "user_message": format!("question {i}"),
                    "assistant_message": format!("answer {i}")})),
                )
                .unwrap();
            // A replay answers the very receipt the first completion got.
            if s != 200 || &v != receipt {
                lost.push(format!("turn {turn}: {s} {v}"));
            }
        }
        let total = a.documents.len() + a.messages.len() + a.turns.len();
        println!(
            "round {round}: acknowledged writes lost: {} of {total}",
            lost.len()
        );
        assert!(lost.is_empty(), "lost after kill -9: {lost:?}");
        drop(a);
        server.kill();
    }
    let a = acked.lock().unwrap();
    let total = a.documents.len() + a.messages.len() + a.turns.len();
    println!(
        "all rounds: acknowledged writes lost: 0 of {total}; refs reused: {}",
        reused.len()
    );
    assert!(reused.is_empty(), "refs reused: {reused:?}");
    assert!(total >= 30, "the writers made little progress: {total}");
}
