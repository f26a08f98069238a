//! Agent turns (agent-turn-v1) over HTTP: prepare and complete, idempotent retries, legacy
//! receipt digests. Through `tower::ServiceExt::oneshot`, on the real engine and model.

// Test helpers may panic on setup failures: that is a test failure, not a bug to handle.
#![allow(clippy::unwrap_used)]

use axum::body::Body;
use axum::http::{Request, StatusCode};
use cairn_api::Auth;
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::common::{call, code, scope, test_app};

#[tokio::test]
async fn agent_turns_prepare_and_complete_idempotently() {
    let app = test_app(Auth::default(), 1 << 20);
    let (s, env) = call(&app, "POST", "/v1/turns/prepare", Some(json!({"scope": scope("acme"), "user_message": "Remind me when my dentist appointment is", "turn_id": "turn-1"})), None).await;
    assert_eq!(s, StatusCode::OK, "{env}");
    assert_eq!(env["contract_version"], "agent-turn-v1");
    assert_eq!(env["turn_id"], "turn-1");
    assert_eq!(env["memory_pack"]["coverage"], "none");
    // prepare persisted nothing
    assert_eq!(app.state.engine.store().count_all().await.unwrap(), 0);

    let body = json!({"scope": scope("acme"), "user_message": "My dentist appointment is on Tuesday at 10am.",
        "assistant_message": "Got it: dentist on Tuesday at 10am."});
    let (s, r1) = call(
        &app,
        "POST",
        "/v1/turns/turn-1/complete",
        Some(body.clone()),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{r1}");
    assert_eq!(r1["user_message_ref"], "msg:s1/0");
    assert_eq!(r1["assistant_message_ref"], "msg:s1/1");
    let points = app.state.engine.store().count_all().await.unwrap();
    let (s, r2) = call(
        &app,
        "POST",
        "/v1/turns/turn-1/complete",
        Some(body.clone()),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(r1, r2, "a replay returns the same receipt");
    assert_eq!(
        app.state.engine.store().count_all().await.unwrap(),
        points,
        "a replay writes nothing"
    );

    let mut changed = body.clone();
    changed["assistant_message"] = json!("Got it: dentist on Wednesday.");
    let (s, v) = call(
        &app,
        "POST",
        "/v1/turns/turn-1/complete",
        Some(changed),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT);
    insta::assert_json_snapshot!("turn_conflict", v);
    assert_eq!(app.state.engine.store().count_all().await.unwrap(), points);

    // Concurrent identical completions of a new turn store exactly one turn.
    let mut body3 = body.clone();
    body3["user_message"] = json!("I moved it to Thursday.");
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let router = app.router.clone();
        let b = body3.to_string();
        tasks.push(tokio::spawn(async move {
            let req = Request::builder()
                .method("POST")
                .uri("/v1/turns/turn-2/complete")
                .header("content-type", "application/json")
                .body(Body::from(b))
                .unwrap();
            let resp = router.oneshot(req).await.unwrap();
            let st = resp.status();
            let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .unwrap();
            (st, bytes)
        }));
    }
    let mut receipts = Vec::new();
    for t in tasks {
        let (st, bytes) = t.await.unwrap();
        assert_eq!(st, StatusCode::OK);
        receipts.push(bytes);
    }
    assert!(receipts.windows(2).all(|w| w[0] == w[1]));
    let stats = cairn_ingest::catalog::stats(
        app.state.engine.store().as_ref(),
        &cairn_models::Scope::new("acme", "alice", "kb", "bot", "s1")
            .unwrap()
            .partition(),
    )
    .await
    .unwrap();
    assert_eq!((stats.turns, stats.messages), (2, 4));

    // The conversation is listed in order, and recall cites it with trust labels.
    let (s, v) = call(
        &app,
        "GET",
        "/v1/conversations/s1/messages?tenant=acme&user=alice&namespace=kb",
        None,
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let seqs: Vec<u64> = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, vec![0, 1, 2, 3]);
    let (_, v) = call(
        &app,
        "POST",
        "/v1/recall",
        Some(json!({"scope": scope("acme"), "query": "When is my dentist appointment?"})),
        None,
    )
    .await;
    assert!(!v["citations"].as_array().unwrap().is_empty(), "{v}");
    let (s, v) = call(
        &app,
        "POST",
        "/v1/turns/bad%20id/complete",
        Some(body),
        None,
    )
    .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_request"))
    );
}

#[tokio::test]
async fn a_turn_retried_with_reordered_metadata_is_the_same_turn() {
    let app = test_app(Auth::default(), 1 << 20);
    let body = |meta: &str| {
        let meta: Value = serde_json::from_str(meta).unwrap();
        json!({"scope": scope("acme"), "user_message": "Where is the VPN guide?",
            "assistant_message": "In kb/vpn.md.", "metadata": meta})
    };
    let (s, first) = call(
        &app,
        "POST",
        "/v1/turns/t-order/complete",
        Some(body(
            r#"{"a": 1, "b": {"x": 1, "y": [1, {"q": 1, "p": 2}]}}"#,
        )),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{first}");
    let (s, again) = call(
        &app,
        "POST",
        "/v1/turns/t-order/complete",
        Some(body(
            r#"{"b": {"y": [1, {"p": 2, "q": 1}], "x": 1}, "a": 1}"#,
        )),
        None,
    )
    .await;
    assert_eq!((s, &again), (StatusCode::OK, &first));
    // Different values are still a conflict.
    let (s, v) = call(
        &app,
        "POST",
        "/v1/turns/t-order/complete",
        Some(body(
            r#"{"a": 2, "b": {"x": 1, "y": [1, {"q": 1, "p": 2}]}}"#,
        )),
        None,
    )
    .await;
    assert_eq!((s, code(&v)), (StatusCode::CONFLICT, Some("turn_conflict")));
}

#[tokio::test]
async fn receipts_with_a_legacy_digest_still_match_their_exact_replay() {
    let app = test_app(Auth::default(), 1 << 20);
    let meta = json!({"b": 1, "a": 2});
    let body = json!({"scope": scope("acme"), "user_message": "Hello there",
        "assistant_message": "Hi!", "metadata": meta});
    let (s, first) = call(
        &app,
        "POST",
        "/v1/turns/t-old/complete",
        Some(body.clone()),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{first}");
    // Rewrite the stored record as an older server wrote it: the digest of the JSON with
    // metadata as sent.
    let legacy = json!({
        "user_message": "Hello there",
        "assistant_message": "Hi!",
        "source": null,
        "mode": "text",
        "metadata": meta,
        "refers_to": [],
    });
    let sc = cairn_models::Scope::new("acme", "alice", "kb", "bot", "s1").unwrap();
    let id = cairn_models::ids::turn_record_id(&sc, "t-old");
    let store = &app.state.engine.store();
    let mut hit = store
        .retrieve(&sc.partition(), &[id], false)
        .await
        .unwrap()
        .pop()
        .unwrap();
    let legacy_digest = cairn_models::ids::sha256_hex(legacy.to_string().as_bytes());
    assert_ne!(
        hit.point.content_hash.as_deref(),
        Some(legacy_digest.as_str())
    );
    hit.point.content_hash = Some(legacy_digest);
    store
        .upsert(vec![cairn_store::UpsertPoint::record(id, hit.point)])
        .await
        .unwrap();
    let (s, again) = call(&app, "POST", "/v1/turns/t-old/complete", Some(body), None).await;
    assert_eq!((s, &again), (StatusCode::OK, &first));
}
