//! Messages and forgetting over HTTP: message keys, deleting messages, tombstoned turns, forget
//! (soft and hard). Through `tower::ServiceExt::oneshot`, on the real engine and model.

// Test helpers may panic on setup failures: that is a test failure, not a bug to handle.
#![allow(clippy::unwrap_used)]

use axum::http::StatusCode;
use cairn_api::Auth;
use serde_json::{json, Value};

use crate::common::{call, checked, code, refs_of, scope, test_app, Q};

#[tokio::test]
async fn deleting_messages_tombstones_turns_and_forget_removes_documents() {
    let app = test_app(Auth::default(), 1 << 20);
    let body = json!({"scope": scope("acme"), "user_message": "My dentist appointment is on Tuesday at 10am.",
        "assistant_message": "Got it: dentist on Tuesday at 10am."});
    let (s, r1) = checked(
        &app,
        "POST",
        "/v1/turns/{turn_id}/complete",
        "/v1/turns/t1/complete",
        Some(body.clone()),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{r1}");
    // Delete the user message: the turn keeps a tombstone, so its id cannot be reused.
    let (s, report) = checked(
        &app,
        "DELETE",
        "/v1/messages/{ref}",
        &format!("/v1/messages/msg:s1%2F0?{Q}"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{report}");
    assert_eq!(report["removed"], json!(["msg:s1/0"]));
    assert_eq!(report["tombstoned_turns"], json!(["turn:t1"]));
    let (s, v) = call(
        &app,
        "GET",
        &format!("/v1/conversations/s1/messages?{Q}"),
        None,
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["total"], 1, "only the assistant message is left: {v}");
    for b in [body.clone(), {
        let mut changed = body.clone();
        changed["assistant_message"] = json!("Something else.");
        changed
    }] {
        let (s, v) = checked(
            &app,
            "POST",
            "/v1/turns/{turn_id}/complete",
            "/v1/turns/t1/complete",
            Some(b),
        )
        .await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (StatusCode::CONFLICT, Some("turn_conflict")),
            "{v}"
        );
    }
    // Deleting it again answers the recorded outcome (a retry whose first answer was lost
    // learns what happened); in another tenant it is 404 (never reveals existence).
    let (s, again) = call(
        &app,
        "DELETE",
        &format!("/v1/messages/msg:s1%2F0?{Q}"),
        None,
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{again}");
    assert_eq!(again["removed"], json!(["msg:s1/0"]), "{again}");
    assert_eq!(again["tombstoned_turns"], json!(["turn:t1"]), "{again}");
    for uri in [
        "/v1/messages/msg:s1%2F1?tenant=other&user=alice&namespace=kb".to_string(),
        "/v1/conversations/s1?tenant=other&user=alice&namespace=kb".to_string(),
    ] {
        let (s, v) = call(&app, "DELETE", &uri, None, None).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{uri}: {v}");
    }
    let (s, v) = call(
        &app,
        "DELETE",
        &format!("/v1/messages/doc:abc?{Q}"),
        None,
        None,
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    insta::assert_json_snapshot!("delete_message_wrong_ref", v);
    let (s, v) = call(
        &app,
        "DELETE",
        &format!("/v1/messages/msg:s1%2F1?{Q}&force=1"),
        None,
        None,
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "unknown query parameter: {v}");

    // A second turn, then the whole conversation.
    let mut body2 = body.clone();
    body2["user_message"] = json!("I moved it to Thursday.");
    let (s, _) = call(&app, "POST", "/v1/turns/t2/complete", Some(body2), None).await;
    assert_eq!(s, StatusCode::OK);
    let (s, report) = checked(
        &app,
        "DELETE",
        "/v1/conversations/{id}",
        &format!("/v1/conversations/s1?{Q}"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{report}");
    assert_eq!(
        report["removed"],
        json!(["msg:s1/1", "msg:s1/2", "msg:s1/3"])
    );
    assert_eq!(report["tombstoned_turns"], json!(["turn:t1", "turn:t2"]));
    let (s, _) = call(
        &app,
        "GET",
        &format!("/v1/conversations/s1/messages?{Q}"),
        None,
        None,
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (_, pack) = call(
        &app,
        "POST",
        "/v1/recall",
        Some(json!({"scope": scope("acme"), "query": "When is my dentist appointment?"})),
        None,
    )
    .await;
    assert!(refs_of(&pack).is_empty(), "{pack}");

    // Forget a document by one of its chunk refs: the whole document goes.
    let doc = json!({"scope": scope("acme"), "source": "kb/vpn.md", "media_type": "text/markdown",
        "text": "# VPN\n\nInstall the client, sign in with your company account and choose the Frankfurt gateway."});
    let (_, v) = call(&app, "POST", "/v1/documents", Some(doc), None).await;
    let doc_id = v["doc_id"].as_str().unwrap().to_string();
    let forget = json!({"scope": scope("acme"), "ref": format!("doc:{doc_id}#0")});
    let (s, v) = call(
        &app,
        "POST",
        "/v1/forget",
        Some(json!({"scope": scope("other"), "ref": format!("doc:{doc_id}")})),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "other tenant: {v}");
    let (s, report) = checked(
        &app,
        "POST",
        "/v1/forget",
        "/v1/forget",
        Some(forget.clone()),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{report}");
    assert_eq!(
        report["removed"],
        json!([format!("doc:{doc_id}"), format!("doc:{doc_id}#0")])
    );
    // Forgetting it again answers the same receipt (idempotent), not a 404.
    let (s, again) = call(&app, "POST", "/v1/forget", Some(forget), None).await;
    assert_eq!((s, &again), (StatusCode::OK, &report));
    let (s, v) = call(
        &app,
        "POST",
        "/v1/forget",
        Some(json!({"scope": scope("acme"), "ref": "document:1"})),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    insta::assert_json_snapshot!("forget_bad_ref", v);
    let stats = cairn_ingest::catalog::stats(
        app.state.engine.store().as_ref(),
        &cairn_models::Scope::new("acme", "alice", "kb", "bot", "s1")
            .unwrap()
            .partition(),
    )
    .await
    .unwrap();
    assert_eq!(
        (stats.documents, stats.chunks, stats.messages, stats.turns),
        (0, 0, 0, 2),
        "only the two turn tombstones are left"
    );
}

#[tokio::test]
async fn keyless_messages_are_new_and_explicit_keys_are_idempotent() {
    let app = test_app(Auth::default(), 1 << 20);
    let sc = scope("acme");
    let post = |m: Value| json!({"scope": sc, "messages": [m]});
    let ok = json!({"conversation_id": "c1", "role": "user", "content": "ok"});
    let (s, a) = call(&app, "POST", "/v1/messages", Some(post(ok.clone())), None).await;
    assert_eq!(s, StatusCode::OK, "{a}");
    let (_, b) = call(&app, "POST", "/v1/messages", Some(post(ok)), None).await;
    assert_eq!(a["receipts"][0]["created"], true);
    assert_eq!(b["receipts"][0]["created"], true);
    assert_ne!(a["receipts"][0]["ref"], b["receipts"][0]["ref"]);
    let (_, v) = call(
        &app,
        "GET",
        "/v1/conversations/c1/messages?tenant=acme&user=alice&namespace=kb",
        None,
        None,
    )
    .await;
    assert_eq!(v["total"], 2, "two posts, two messages: {v}");

    // With a message_id: a replay collapses, other content conflicts.
    let keyed =
        json!({"conversation_id": "c1", "role": "user", "content": "ok", "message_id": "m-1"});
    let (_, first) = call(
        &app,
        "POST",
        "/v1/messages",
        Some(post(keyed.clone())),
        None,
    )
    .await;
    let (_, again) = call(&app, "POST", "/v1/messages", Some(post(keyed)), None).await;
    assert_eq!(first["receipts"][0]["created"], true);
    assert_eq!(again["receipts"][0]["created"], false);
    assert_eq!(first["receipts"][0]["ref"], again["receipts"][0]["ref"]);
    let other =
        json!({"conversation_id": "c1", "role": "user", "content": "not ok", "message_id": "m-1"});
    let (s, v) = call(&app, "POST", "/v1/messages", Some(post(other)), None).await;
    assert_eq!((s, code(&v)), (StatusCode::CONFLICT, Some("conflict")));
    // An explicit ts is a key too.
    let timed =
        json!({"conversation_id": "c1", "role": "user", "content": "ok", "ts": 1714557600000i64});
    let (_, t1) = call(
        &app,
        "POST",
        "/v1/messages",
        Some(post(timed.clone())),
        None,
    )
    .await;
    let (_, t2) = call(&app, "POST", "/v1/messages", Some(post(timed)), None).await;
    assert_eq!(t1["receipts"][0]["created"], true);
    assert_eq!(t2["receipts"][0]["created"], false);
    // The same explicit key twice in one batch collapses.
    let dup = json!({"conversation_id": "c2", "role": "user", "content": "x", "message_id": "d"});
    let (_, v) = call(
        &app,
        "POST",
        "/v1/messages",
        Some(json!({"scope": sc, "messages": [dup.clone(), dup]})),
        None,
    )
    .await;
    assert_eq!(v["receipts"][0]["ref"], v["receipts"][1]["ref"]);
    assert_eq!(v["receipts"][1]["created"], false);
}

/// A hard forget purges the cached vectors of the forgotten texts (from memory and from the
/// cache file); a soft forget keeps them; queries are never cached.
#[tokio::test]
async fn hard_forget_purges_cached_vectors_and_queries_are_not_cached() {
    let app = test_app(Auth::default(), 1 << 20);
    let embedder = &app.state.engine.embedder();
    let base = embedder.cached_len();
    let text = "# Vault\n\nThe vault combination is 31-47-09.\n\n## Access\n\nOnly the night manager opens the vault.";
    let (s, doc) = call(
        &app,
        "POST",
        "/v1/documents",
        Some(json!({"scope": scope("acme"), "source": "vault.md", "text": text, "media_type": "text/markdown"})),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{doc}");
    let chunks = doc["chunks"].as_u64().unwrap() as usize;
    assert_eq!(embedder.cached_len(), base + chunks);
    let (s, msg) = call(
        &app,
        "POST",
        "/v1/messages",
        Some(
            json!({"scope": scope("acme"), "messages": [{"conversation_id": "v", "role": "user",
            "content": "Remember: the alarm code is 8812.", "message_id": "m1"}]}),
        ),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{msg}");
    assert_eq!(embedder.cached_len(), base + chunks + 1);
    // A recall embeds a query: nothing is added to the cache.
    let (s, _) = call(
        &app,
        "POST",
        "/v1/recall",
        Some(json!({"scope": scope("acme"), "query": "What opens the vault?"})),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        embedder.cached_len(),
        base + chunks + 1,
        "query vectors are not cached"
    );
    // Soft forget of the message: the vector stays cached.
    let forget = |r: &str, hard: bool| json!({"scope": scope("acme"), "ref": r, "hard": hard});
    let (s, _) = call(
        &app,
        "POST",
        "/v1/forget",
        Some(forget("msg:v/0", false)),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(embedder.cached_len(), base + chunks + 1);
    // Hard forget of the document: its chunks' vectors are purged.
    let doc_ref = format!("doc:{}", doc["doc_id"].as_str().unwrap());
    let (s, report) = call(
        &app,
        "POST",
        "/v1/forget",
        Some(forget(&doc_ref, true)),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{report}");
    assert_eq!(
        embedder.cached_len(),
        base + 1,
        "the document's vectors are purged"
    );
}
