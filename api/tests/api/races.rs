//! Concurrency and crash-retry behaviour, on the in-process app with the real model and the
//! real embedded store: replays of an old version racing a new one, forgetting a document
//! while it is ingested, completing a turn while its conversation is forgotten, and forget
//! retries that find only derived records (or orphaned chunks) left behind. Every test
//! checks the final stored state, not only the status codes.
//!
//! `CAIRN_RACE_TRIALS` sets the number of trials of the interleaving tests (default 40).

// Test helpers may panic on setup failures: that is a test failure, not a bug to handle.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use cairn_api::{Auth, ServerConfig};
use cairn_models::ids::{memory_point_id, turn_record_id};
use cairn_models::{Partition, PointKind, Scope};
use cairn_store::Filter;
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::common::{app_with, TestApp};

fn trials() -> usize {
    std::env::var("CAIRN_RACE_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40)
}

/// One request; `delay_ms` first, so concurrent requests start staggered.
async fn send(
    router: axum::Router,
    delay_ms: u64,
    method: &'static str,
    uri: String,
    body: Option<Value>,
) -> (StatusCode, Value) {
    if delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
    }
    let req = Request::builder().method(method).uri(uri);
    let req = match body {
        Some(b) => req
            .header("content-type", "application/json")
            .body(Body::from(b.to_string()))
            .unwrap(),
        None => req.body(Body::empty()).unwrap(),
    };
    let resp = router.oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, value)
}

async fn call(
    app: &TestApp,
    method: &'static str,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    send(app.router.clone(), 0, method, uri.to_string(), body).await
}

const Q: &str = "tenant=acme&user=alice&namespace=kb";

fn scope_json(session: &str) -> Value {
    json!({"tenant": "acme", "user": "alice", "namespace": "kb", "agent": "bot", "session": session})
}

fn scope(session: &str) -> Scope {
    Scope::new("acme", "alice", "kb", "bot", session).unwrap()
}

fn partition() -> Partition {
    scope("s1").partition()
}

fn doc_body(source: &str, text: &str) -> Value {
    json!({"scope": scope_json("s1"), "source": source, "media_type": "text/markdown", "text": text})
}

/// A document of several chunks whose first paragraph carries `tag` (a searchable
/// identifier); the rest is shared between documents of the same topic, so its chunk
/// embeddings come from the cache after the first trial.
fn long_text(tag: &str, topic: &str) -> String {
    let mut s = format!("# {topic}\n\nThis page is filed under reference code {tag}.\n\n");
    for i in 0..48 {
        s.push_str(&format!(
            "Step {i} of the {topic} procedure: inspect component {i}, compare it with the \
             checklist entry {i} and write the outcome into the {topic} log book.\n\n"
        ));
    }
    s
}

/// What is stored for a source: the registry's (doc id, version, chunk count) and the chunk
/// points per document id.
async fn doc_state(
    app: &TestApp,
    source: &str,
) -> (Option<(String, u32, u32)>, BTreeMap<String, usize>) {
    let engine = &app.state.engine;
    let p = partition();
    let registry = engine
        .ingestor()
        .current_record(&p, source)
        .await
        .unwrap()
        .map(|r| {
            (
                r.doc_id.unwrap(),
                r.version.unwrap_or(1),
                r.chunk_count.unwrap_or(0),
            )
        });
    let mut chunks = BTreeMap::new();
    let filter = Filter::new()
        .eq("kind", PointKind::Chunk.as_str())
        .eq("source", source);
    for h in engine.store().scroll_all(&p, filter).await.unwrap() {
        *chunks.entry(h.point.doc_id.unwrap()).or_insert(0) += 1;
    }
    (registry, chunks)
}

/// Asserts the source is either fully present (the registry's version with all its chunks and
/// no other version's) or fully gone; returns the current document id.
async fn assert_whole(app: &TestApp, source: &str, ctx: &str) -> Option<(String, u32)> {
    let (registry, chunks) = doc_state(app, source).await;
    match registry {
        Some((doc, version, n)) => {
            assert!(n > 0, "{ctx}: registry with 0 chunks");
            assert_eq!(
                chunks.get(&doc).copied(),
                Some(n as usize),
                "{ctx}: the registry names {doc} v{version} with {n} chunks; stored: {chunks:?}"
            );
            assert_eq!(
                chunks.len(),
                1,
                "{ctx}: other versions' chunks left: {chunks:?}"
            );
            Some((doc, version))
        }
        None => {
            assert!(
                chunks.is_empty(),
                "{ctx}: no registry record but chunks {chunks:?}"
            );
            None
        }
    }
}

/// Waits for a background index build (started after 1,000 written chunks) to finish, so
/// it does not outlive the test's data directory.
async fn settle(app: &TestApp) {
    while app.state.engine.optimizing() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn refs_of(pack: &Value) -> Vec<String> {
    pack["citations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["ref"].as_str().unwrap().to_string())
        .collect()
}

async fn recall(app: &TestApp, query: &str) -> Value {
    let (s, pack) = call(
        app,
        "POST",
        "/v1/recall",
        Some(json!({"scope": scope_json("s1"), "query": query})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{pack}");
    pack
}

async fn count(app: &TestApp, filter: Filter) -> usize {
    app.state
        .engine
        .store()
        .count(&partition(), filter)
        .await
        .unwrap()
}

/// Finding 1: text A stored, then B posted while 7 staggered replays of A run. Whatever
/// wins, the registry's version must have all its chunks, recall must find it (and not the
/// other version), and posting the winning text again must agree ("unchanged").
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replays_of_an_old_version_racing_a_new_one_never_break_the_registry() {
    let app = app_with(Auth::default(), ServerConfig::default());
    let n = trials();
    let mut outcomes = BTreeMap::new();
    for trial in 0..n {
        let source = format!("kb/replay-{trial}.md");
        let tag_a = format!("RACE{trial:04}A");
        let tag_b = format!("RACE{trial:04}B");
        let a = long_text(&tag_a, "VPN gateway");
        let b = long_text(&tag_b, "printer fleet");
        let (s, first) = call(&app, "POST", "/v1/documents", Some(doc_body(&source, &a))).await;
        assert_eq!(s, StatusCode::OK, "{first}");
        assert!(
            first["chunks"].as_u64().unwrap() >= 3,
            "want a multi-chunk document: {first}"
        );
        let doc_a = first["doc_id"].as_str().unwrap().to_string();

        let mut tasks = tokio::task::JoinSet::new();
        let b_delay = (trial % 3) as u64;
        tasks.spawn(send(
            app.router.clone(),
            b_delay,
            "POST",
            "/v1/documents".into(),
            Some(doc_body(&source, &b)),
        ));
        // Replays spread over the time B takes to chunk, embed and commit, at a spacing
        // that varies per trial, so some land before, some during and some after B's flip.
        let step = [1, 4, 9, 16, 25][trial % 5];
        for i in 0..7u64 {
            tasks.spawn(send(
                app.router.clone(),
                i * step,
                "POST",
                "/v1/documents".into(),
                Some(doc_body(&source, &a)),
            ));
        }
        let mut doc_b = None;
        while let Some(r) = tasks.join_next().await {
            let (s, v) = r.unwrap();
            assert_eq!(s, StatusCode::OK, "trial {trial}: {v}");
            if v["doc_id"].as_str() != Some(doc_a.as_str()) {
                doc_b = v["doc_id"].as_str().map(str::to_string);
            }
        }
        let doc_b = doc_b.unwrap();

        let ctx = format!("trial {trial}");
        let (current, _) = assert_whole(&app, &source, &ctx)
            .await
            .unwrap_or_else(|| panic!("{ctx}: the document vanished"));
        let (text, tag, other_doc, other_tag) = if current == doc_a {
            (&a, &tag_a, &doc_b, &tag_b)
        } else {
            assert_eq!(current, doc_b, "{ctx}");
            (&b, &tag_b, &doc_a, &tag_a)
        };
        *outcomes
            .entry(if current == doc_a { "A" } else { "B" })
            .or_insert(0) += 1;

        let pack = recall(&app, &format!("Which page has reference code {tag}?")).await;
        assert_ne!(pack["coverage"], "none", "{ctx}: {pack}");
        let refs = refs_of(&pack);
        assert!(
            refs.iter()
                .any(|r| r.starts_with(&format!("doc:{current}#"))),
            "{ctx}: recall does not cite the current version: {refs:?}"
        );
        let pack = recall(&app, &format!("Which page has reference code {other_tag}?")).await;
        assert!(
            !refs_of(&pack)
                .iter()
                .any(|r| r.starts_with(&format!("doc:{other_doc}#"))),
            "{ctx}: recall cites the superseded version: {pack}"
        );

        let (registry, _) = doc_state(&app, &source).await;
        let (_, version, chunks) = registry.unwrap();
        let (s, again) = call(&app, "POST", "/v1/documents", Some(doc_body(&source, text))).await;
        assert_eq!(s, StatusCode::OK, "{again}");
        assert_eq!(
            (
                again["status"].as_str(),
                again["doc_id"].as_str(),
                again["version"].as_u64(),
                again["chunks"].as_u64()
            ),
            (
                Some("unchanged"),
                Some(current.as_str()),
                Some(u64::from(version)),
                Some(u64::from(chunks))
            ),
            "{ctx}: {again}"
        );
        assert_whole(&app, &source, &ctx).await;
    }
    eprintln!("{n} trials; final version per trial: {outcomes:?}");
    settle(&app).await;
}

/// Finding 2: forgetting a document while a new version of the same source is ingested
/// (and the old version is forgotten and replayed). The source ends fully present or fully
/// gone, never as a registry record naming missing chunks.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forget_during_ingest_leaves_the_document_whole_or_gone() {
    let app = app_with(Auth::default(), ServerConfig::default());
    let n = trials();
    let (mut present, mut gone) = (0, 0);
    for trial in 0..n {
        let source = format!("kb/forget-{trial}.md");
        let v1 = long_text(&format!("FORG{trial:04}X"), "VPN gateway");
        let v2 = long_text(&format!("FORG{trial:04}Y"), "printer fleet");
        // V2's id, learnt in another tenant (ids depend on the content only).
        let mut probe = doc_body(&source, &v2);
        probe["scope"]["tenant"] = json!("probe");
        let (_, p) = call(&app, "POST", "/v1/documents", Some(probe)).await;
        let id2 = p["doc_id"].as_str().unwrap().to_string();
        let (s, r1) = call(&app, "POST", "/v1/documents", Some(doc_body(&source, &v1))).await;
        assert_eq!(s, StatusCode::OK, "{r1}");
        let id1 = r1["doc_id"].as_str().unwrap().to_string();

        let d = |k: usize| ((trial * k) % 7) as u64;
        let forget = |id: &str| json!({"scope": scope_json("s1"), "ref": format!("doc:{id}")});
        let mut tasks = tokio::task::JoinSet::new();
        tasks.spawn(send(
            app.router.clone(),
            d(1),
            "POST",
            "/v1/documents".into(),
            Some(doc_body(&source, &v2)),
        ));
        tasks.spawn(send(
            app.router.clone(),
            d(3),
            "POST",
            "/v1/forget".into(),
            Some(forget(&id2)),
        ));
        tasks.spawn(send(
            app.router.clone(),
            d(5),
            "POST",
            "/v1/forget".into(),
            Some(forget(&id1)),
        ));
        if trial % 2 == 1 {
            tasks.spawn(send(
                app.router.clone(),
                d(2),
                "POST",
                "/v1/documents".into(),
                Some(doc_body(&source, &v1)),
            ));
        }
        while let Some(r) = tasks.join_next().await {
            let (s, v) = r.unwrap();
            assert!(
                s == StatusCode::OK || s == StatusCode::NOT_FOUND,
                "trial {trial}: {s} {v}"
            );
        }
        let ctx = format!("trial {trial}");
        match assert_whole(&app, &source, &ctx).await {
            Some((current, version)) => {
                present += 1;
                let text = if current == id1 { &v1 } else { &v2 };
                let (_, again) =
                    call(&app, "POST", "/v1/documents", Some(doc_body(&source, text))).await;
                assert_eq!(
                    (again["status"].as_str(), again["version"].as_u64()),
                    (Some("unchanged"), Some(u64::from(version))),
                    "{ctx}: {again}"
                );
            }
            None => gone += 1,
        }
    }
    eprintln!("{n} trials: {present} present, {gone} gone");
    settle(&app).await;
}

/// Completing a turn while its conversation is forgotten: the turn is either completed with
/// both messages (and replays return its receipt), or tombstoned with none (and its id is
/// refused); never half a turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn completing_a_turn_while_forgetting_its_conversation_is_all_or_nothing() {
    let app = app_with(Auth::default(), ServerConfig::default());
    let n = trials();
    let (mut kept, mut tombstoned) = (0, 0);
    for trial in 0..n {
        let session = format!("c{trial}");
        let turn = format!("t{trial}");
        let body = json!({"scope": scope_json(&session),
            "user_message": format!("Remind me that locker {trial} holds the spare keys."),
            "assistant_message": format!("Noted: locker {trial} holds the spare keys.")});
        let complete = tokio::spawn(send(
            app.router.clone(),
            (trial % 3) as u64,
            "POST",
            format!("/v1/turns/{turn}/complete"),
            Some(body.clone()),
        ));
        let forget = tokio::spawn(send(
            app.router.clone(),
            (trial % 4) as u64,
            "POST",
            "/v1/forget".into(),
            Some(json!({"scope": scope_json(&session), "ref": format!("conv:{session}")})),
        ));
        let mut results = BTreeMap::new();
        results.insert("complete", complete.await.unwrap());
        results.insert("forget", forget.await.unwrap());
        let ctx = format!("trial {trial}");
        let (s, receipt) = &results["complete"];
        assert_eq!(*s, StatusCode::OK, "{ctx}: {receipt}");
        let (fs, report) = &results["forget"];

        let record = app
            .state
            .engine
            .store()
            .retrieve(
                &partition(),
                &[turn_record_id(&scope(&session), &turn)],
                false,
            )
            .await
            .unwrap();
        assert_eq!(record.len(), 1, "{ctx}: the turn record is missing");
        let deleted = matches!(
            &record[0].point.state,
            Some(cairn_models::RecordState::Turn(t)) if t.deleted
        );
        let messages = count(
            &app,
            Filter::new()
                .eq("kind", PointKind::Message.as_str())
                .eq("turn_id", turn.as_str()),
        )
        .await;
        let (rs, replay) = call(
            &app,
            "POST",
            &format!("/v1/turns/{turn}/complete"),
            Some(body),
        )
        .await;
        if deleted {
            tombstoned += 1;
            assert_eq!(messages, 0, "{ctx}: a tombstoned turn kept messages");
            assert_eq!(*fs, StatusCode::OK, "{ctx}: {report}");
            assert_eq!(
                report["tombstoned_turns"],
                json!([format!("turn:{turn}")]),
                "{ctx}"
            );
            assert_eq!(
                report["removed"].as_array().unwrap().len(),
                2,
                "{ctx}: {report}"
            );
            assert_eq!(
                (rs, replay["error"]["code"].as_str()),
                (StatusCode::CONFLICT, Some("turn_conflict")),
                "{ctx}: {replay}"
            );
        } else {
            kept += 1;
            assert_eq!(messages, 2, "{ctx}: a completed turn lacks messages");
            assert_eq!(*fs, StatusCode::NOT_FOUND, "{ctx}: {report}");
            assert_eq!((rs, &replay), (StatusCode::OK, receipt), "{ctx}");
        }
    }
    eprintln!("{n} trials: {kept} completed, {tombstoned} tombstoned");
    settle(&app).await;
}

async fn propose_and_approve(app: &TestApp, content: &str, evidence: &str) -> String {
    let (s, v) = call(
        app,
        "POST",
        "/v1/candidates",
        Some(
            json!({"scope": scope_json("s1"), "source_agent": "ops-bot", "memory_type": "fact",
            "content": content, "evidence_refs": [evidence], "confidence": 0.9}),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let id = v["candidate"]["candidate_id"].as_str().unwrap().to_string();
    let (s, v) = call(
        app,
        "POST",
        &format!("/v1/candidates/{id}/approve"),
        Some(json!({"scope": scope_json("s1")})),
    )
    .await;
    assert_eq!(
        (s, v["status"].as_str()),
        (StatusCode::OK, Some("approved")),
        "{v}"
    );
    id
}

async fn candidate(app: &TestApp, id: &str) -> Value {
    let (s, v) = call(app, "GET", &format!("/v1/candidates/{id}?{Q}"), None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v
}

async fn memories(app: &TestApp) -> usize {
    count(app, Filter::new().eq("kind", PointKind::Memory.as_str())).await
}

/// Findings 3 and 5: a forget retried after a crash that had already deleted the evidence
/// still invalidates what derives from it (200, not 404); orphaned chunks are forgettable
/// by document id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_retries_finish_derived_work_and_remove_orphans() {
    let app = app_with(Auth::default(), ServerConfig::default());
    let store = Arc::clone(app.state.engine.store());
    let p = partition();

    // A document cited by an approved memory; the document's evidence is then deleted
    // behind forget's back (what a crash after the evidence step of the old order left).
    let text = long_text("ORPH0001D", "badge reader");
    let (_, r) = call(
        &app,
        "POST",
        "/v1/documents",
        Some(doc_body("kb/badge.md", &text)),
    )
    .await;
    let doc = r["doc_id"].as_str().unwrap().to_string();
    let cand = propose_and_approve(
        &app,
        "Badge readers are inspected by the facilities team.",
        &format!("doc:{doc}#0"),
    )
    .await;
    assert_eq!(memories(&app).await, 1);
    cairn_ingest::catalog::delete_document(store.as_ref(), &p, &doc)
        .await
        .unwrap()
        .unwrap();
    let forget = json!({"scope": scope_json("s1"), "ref": format!("doc:{doc}")});
    let (s, report) = call(&app, "POST", "/v1/forget", Some(forget.clone())).await;
    assert_eq!(s, StatusCode::OK, "{report}");
    assert_eq!(
        report["invalidated"],
        json!([format!("cand:{cand}")]),
        "{report}"
    );
    assert_eq!(
        report["removed"],
        json!([]),
        "nothing was left to remove: {report}"
    );
    let c = candidate(&app, &cand).await;
    assert_eq!(
        (c["status"].as_str(), &c["memory_ref"]),
        (Some("invalidated"), &Value::Null),
        "{c}"
    );
    assert_eq!(memories(&app).await, 0, "the memory is still stored");
    let pack = recall(&app, "Who inspects the badge readers?").await;
    assert!(
        !refs_of(&pack).iter().any(|r| r.starts_with("mem:")),
        "{pack}"
    );
    // Done now: a further retry has nothing to do and answers the recorded outcome.
    let (s, v) = call(&app, "POST", "/v1/forget", Some(forget)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v, report,
        "a retry returns the receipt of the finished forget"
    );

    // The same for a message cited by a pending candidate.
    let (_, m) = call(
        &app,
        "POST",
        "/v1/messages",
        Some(
            json!({"scope": scope_json("s1"), "messages": [{"conversation_id": "cm", "role": "user",
            "content": "The spare projector is in room 4.12."}]}),
        ),
    )
    .await;
    let msg = m["receipts"][0]["ref"].as_str().unwrap().to_string();
    let (s, v) = call(
        &app,
        "POST",
        "/v1/candidates",
        Some(json!({"scope": scope_json("s1"), "source_agent": "ops-bot", "memory_type": "fact",
            "content": "The spare projector is kept in room 4.12.", "evidence_refs": [msg], "confidence": 0.8})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let pending = v["candidate"]["candidate_id"].as_str().unwrap().to_string();
    store
        .delete_where(
            &p,
            Filter::new()
                .eq("kind", PointKind::Message.as_str())
                .eq("conversation_id", "cm"),
        )
        .await
        .unwrap();
    let (s, report) = call(
        &app,
        "POST",
        "/v1/forget",
        Some(json!({"scope": scope_json("s1"), "ref": msg})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{report}");
    assert_eq!(
        report["invalidated"],
        json!([format!("cand:{pending}")]),
        "{report}"
    );
    assert_eq!(candidate(&app, &pending).await["status"], "invalidated");

    // Orphaned chunks (no registry record names their id): DELETE /v1/documents/<id> and
    // POST /v1/forget remove them.
    for (i, via_delete) in [(2, true), (3, false)] {
        let source = format!("kb/orphan-{i}.md");
        let text = long_text(&format!("ORPH000{i}O"), "badge reader");
        let (_, r) = call(
            &app,
            "POST",
            "/v1/documents",
            Some(doc_body(&source, &text)),
        )
        .await;
        let id = r["doc_id"].as_str().unwrap().to_string();
        let chunks = r["chunks"].as_u64().unwrap();
        store
            .delete_where(
                &p,
                Filter::new()
                    .eq("kind", PointKind::Document.as_str())
                    .eq("source", source.as_str()),
            )
            .await
            .unwrap();
        assert_eq!(
            doc_state(&app, &source).await.1.get(&id).copied(),
            Some(chunks as usize)
        );
        if via_delete {
            let (s, v) = call(&app, "DELETE", &format!("/v1/documents/{id}?{Q}"), None).await;
            assert_eq!(s, StatusCode::OK, "{v}");
            assert_eq!(
                (
                    v["doc_id"].as_str(),
                    v["source"].as_str(),
                    v["chunks"].as_u64()
                ),
                (Some(id.as_str()), Some(source.as_str()), Some(chunks)),
                "{v}"
            );
        } else {
            let (s, v) = call(
                &app,
                "POST",
                "/v1/forget",
                Some(json!({"scope": scope_json("s1"), "ref": format!("doc:{id}")})),
            )
            .await;
            assert_eq!(s, StatusCode::OK, "{v}");
            let mut want = vec![format!("doc:{id}")];
            want.extend((0..chunks).map(|c| format!("doc:{id}#{c}")));
            assert_eq!(v["removed"], json!(want), "{v}");
        }
        assert!(doc_state(&app, &source).await.1.is_empty(), "orphans left");
        // A repeat answers the recorded outcome: the document that was deleted.
        let (s, v) = call(&app, "DELETE", &format!("/v1/documents/{id}?{Q}"), None).await;
        assert_eq!(
            (s, v["doc_id"].as_str()),
            (StatusCode::OK, Some(id.as_str())),
            "{v}"
        );
    }
}

/// Finding 4: approving again an approved candidate whose memory point is missing (a crash
/// between the status and the memory) writes the memory again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approving_again_repairs_a_missing_memory() {
    let app = app_with(Auth::default(), ServerConfig::default());
    let (s, e) = call(
        &app,
        "POST",
        "/v1/events",
        Some(json!({"scope": scope_json("s1"), "source_agent": "ops-bot",
            "content": "Ticket 5521: the cafeteria moved to building C."})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{e}");
    let evt = e["ref"].as_str().unwrap().to_string();
    let id = propose_and_approve(&app, "The cafeteria is in building C.", &evt).await;
    assert_eq!(memories(&app).await, 1);
    let p = partition();
    app.state
        .engine
        .store()
        .delete_ids(&p, vec![memory_point_id(&p, &id)])
        .await
        .unwrap();
    assert_eq!(memories(&app).await, 0);
    let (s, v) = call(
        &app,
        "POST",
        &format!("/v1/candidates/{id}/approve"),
        Some(json!({"scope": scope_json("s1")})),
    )
    .await;
    assert_eq!(
        (s, v["status"].as_str()),
        (StatusCode::OK, Some("approved")),
        "{v}"
    );
    assert_eq!(memories(&app).await, 1, "the memory was not written again");
    let pack = recall(&app, "Where is the cafeteria?").await;
    assert!(refs_of(&pack).contains(&format!("mem:{id}")), "{pack}");
}
