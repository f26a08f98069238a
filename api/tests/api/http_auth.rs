//! API keys over HTTP: keys bound to tenants, proposer keys, other tenants' keys. Through
//! `tower::ServiceExt::oneshot`, on the real engine and model.

// Test helpers may panic on setup failures: that is a test failure, not a bug to handle.
#![allow(clippy::unwrap_used)]

use axum::http::StatusCode;
use cairn_api::Auth;
use serde_json::json;

use crate::common::{call, scope, test_app, Q};

#[tokio::test]
async fn api_keys_bind_tenants() {
    let hash = cairn_models::ids::sha256_hex(b"key-a");
    let app = test_app(Auth::parse(&format!("{hash}:acme")).unwrap(), 1 << 20);
    let q = json!({"scope": scope("acme"), "query": "anything"});
    let (s, v) = call(&app, "POST", "/v1/recall", Some(q.clone()), None).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("unauthorized"))
    );
    let (s, _) = call(&app, "POST", "/v1/recall", Some(q), Some("key-a")).await;
    assert_eq!(s, StatusCode::OK);
    for (method, uri, body) in [
        (
            "POST",
            "/v1/recall",
            Some(json!({"scope": scope("globex"), "query": "x"})),
        ),
        (
            "POST",
            "/v1/documents",
            Some(json!({"scope": scope("globex"), "source": "a", "text": "b"})),
        ),
        (
            "POST",
            "/v1/turns/prepare",
            Some(json!({"scope": scope("globex"), "user_message": "x"})),
        ),
        (
            "POST",
            "/v1/turns/t1/complete",
            Some(json!({"scope": scope("globex"), "user_message": "x", "assistant_message": "y"})),
        ),
        (
            "POST",
            "/v1/messages",
            Some(
                json!({"scope": scope("globex"), "messages": [{"conversation_id": "c", "role": "user", "content": "x"}]}),
            ),
        ),
        ("GET", "/v1/documents?tenant=globex&user=alice", None),
        ("GET", "/v1/documents/abc?tenant=globex&user=alice", None),
        ("DELETE", "/v1/documents/abc?tenant=globex&user=alice", None),
        (
            "GET",
            "/v1/conversations/c/messages?tenant=globex&user=alice",
            None,
        ),
        (
            "DELETE",
            "/v1/messages/msg:c%2F0?tenant=globex&user=alice",
            None,
        ),
        (
            "DELETE",
            "/v1/conversations/c?tenant=globex&user=alice",
            None,
        ),
        (
            "POST",
            "/v1/forget",
            Some(json!({"scope": scope("globex"), "ref": "conv:c"})),
        ),
        (
            "POST",
            "/v1/events",
            Some(json!({"scope": scope("globex"), "source_agent": "crm", "content": "x"})),
        ),
        ("GET", "/v1/events/abc?tenant=globex&user=alice", None),
        (
            "POST",
            "/v1/candidates",
            Some(
                json!({"scope": scope("globex"), "source_agent": "crm", "memory_type": "fact",
                "content": "x", "evidence_refs": ["evt:abc"], "confidence": 0.5}),
            ),
        ),
        ("GET", "/v1/candidates?tenant=globex&user=alice", None),
        ("GET", "/v1/candidates/abc?tenant=globex&user=alice", None),
        (
            "POST",
            "/v1/candidates/abc/approve",
            Some(json!({"scope": scope("globex")})),
        ),
        (
            "POST",
            "/v1/candidates/abc/reject",
            Some(json!({"scope": scope("globex")})),
        ),
    ] {
        let (s, v) = call(&app, method, uri, body, Some("key-a")).await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (StatusCode::FORBIDDEN, Some("scope_forbidden")),
            "{method} {uri}"
        );
    }
}

#[tokio::test]
async fn proposer_keys_and_other_tenants_keys() {
    let full = cairn_models::ids::sha256_hex(b"key-a");
    let agent = cairn_models::ids::sha256_hex(b"agent-a");
    let other = cairn_models::ids::sha256_hex(b"key-b");
    let app = test_app(
        Auth::parse(&format!(
            "{full}:acme\n{agent}:acme::proposer\n{other}:globex"
        ))
        .unwrap(),
        1 << 20,
    );
    let sc = scope("acme");
    let (s, e) = call(
        &app,
        "POST",
        "/v1/events",
        Some(json!({"scope": sc, "source_agent": "crm", "content": "Alex renewed the premium plan."})),
        Some("agent-a"),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{e}");
    let (s, c) = call(
        &app,
        "POST",
        "/v1/candidates",
        Some(json!({"scope": sc, "source_agent": "crm", "memory_type": "fact",
            "content": "Alex is on the premium plan.", "evidence_refs": [e["ref"]], "confidence": 0.8})),
        Some("agent-a"),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{c}");
    let id = c["candidate"]["candidate_id"].as_str().unwrap().to_string();
    // A proposer key can do nothing else: not decide, not read.
    let (s, v) = call(
        &app,
        "POST",
        &format!("/v1/candidates/{id}/approve"),
        Some(json!({"scope": sc})),
        Some("agent-a"),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    insta::assert_json_snapshot!("proposer_forbidden", v);
    for (method, uri, body) in [
        (
            "POST",
            "/v1/recall".to_string(),
            Some(json!({"scope": sc, "query": "plan"})),
        ),
        ("GET", format!("/v1/candidates?{Q}"), None),
        (
            "POST",
            "/v1/forget".to_string(),
            Some(json!({"scope": sc, "ref": e["ref"]})),
        ),
    ] {
        let (s, v) = call(&app, method, &uri, body, Some("agent-a")).await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (StatusCode::FORBIDDEN, Some("forbidden")),
            "{uri}"
        );
    }
    // Another tenant's key, in its own scope: 404 for acme's ids, never their existence.
    let g = scope("globex");
    let gq = "tenant=globex&user=alice&namespace=kb";
    let evt_id = e["event_id"].as_str().unwrap();
    for (method, uri, body) in [
        ("GET", format!("/v1/events/{evt_id}?{gq}"), None),
        ("GET", format!("/v1/candidates/{id}?{gq}"), None),
        (
            "POST",
            format!("/v1/candidates/{id}/approve"),
            Some(json!({"scope": g})),
        ),
        (
            "POST",
            format!("/v1/candidates/{id}/reject"),
            Some(json!({"scope": g})),
        ),
        (
            "POST",
            "/v1/forget".to_string(),
            Some(json!({"scope": g, "ref": e["ref"]})),
        ),
        (
            "POST",
            "/v1/forget".to_string(),
            Some(json!({"scope": g, "ref": format!("cand:{id}")})),
        ),
    ] {
        let (s, v) = call(&app, method, &uri, body, Some("key-b")).await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (StatusCode::NOT_FOUND, Some("not_found")),
            "{method} {uri}: {v}"
        );
    }
    let (s, v) = call(
        &app,
        "POST",
        "/v1/candidates",
        Some(
            json!({"scope": g, "source_agent": "crm", "memory_type": "fact",
            "content": "x", "evidence_refs": [e["ref"]], "confidence": 0.8}),
        ),
        Some("key-b"),
    )
    .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("evidence_not_found"))
    );
    // The owner decides.
    let (s, v) = call(
        &app,
        "POST",
        &format!("/v1/candidates/{id}/approve"),
        Some(json!({"scope": sc})),
        Some("key-a"),
    )
    .await;
    assert_eq!(
        (s, v["status"].as_str()),
        (StatusCode::OK, Some("approved"))
    );
}

/// With keys configured, a request without a valid key is refused before its body is read:
/// a malformed body, a body that breaks the schema, a 15 MiB body and a multipart upload all
/// answer `401 unauthorized` with nothing about the body (before, the first two answered
/// `400` with schema detail, and the large one was parsed first).
#[tokio::test]
async fn keys_are_checked_before_bodies() {
    use axum::body::Body;
    use axum::http::Request;

    let hash = cairn_models::ids::sha256_hex(b"key-a");
    let app = test_app(Auth::parse(&format!("{hash}:acme")).unwrap(), 32 << 20);
    let big = format!(
        "{{\"scope\": {}, \"source\": \"big\", \"text\": \"{}\"}}",
        scope("acme"),
        "word ".repeat(3 << 20)
    );
    let bodies: Vec<(&str, &str, String)> = vec![
        ("/v1/recall", "application/json", "{not json".into()),
        (
            "/v1/recall",
            "application/json",
            json!({"scope": 7, "query": []}).to_string(),
        ),
        ("/v1/documents", "application/json", big),
        (
            "/v1/documents/upload",
            "multipart/form-data; boundary=b0",
            String::from_utf8(crate::common::multipart(
                "b0",
                &[("tenant", "acme"), ("tenant", "twice")],
                ("a.txt", "text/plain", b"text"),
            ))
            .unwrap(),
        ),
    ];
    for (key, expect) in [(None, "no key"), (Some("wrong-key"), "a wrong key")] {
        for (uri, content_type, body) in &bodies {
            let mut req = Request::builder()
                .method("POST")
                .uri(*uri)
                .header("content-type", *content_type);
            if let Some(k) = key {
                req = req.header("authorization", format!("Bearer {k}"));
            }
            let req = req.body(Body::from(body.clone())).unwrap();
            let (s, v) = crate::common::raw(&app, req).await;
            assert_eq!(
                (s, v["error"]["code"].as_str()),
                (StatusCode::UNAUTHORIZED, Some("unauthorized")),
                "{uri} with {expect}: {v}"
            );
            let text = v.to_string();
            assert!(
                !text.contains("scope") && !text.contains("multipart") && !text.contains("JSON"),
                "{uri} with {expect} tells about the body: {text}"
            );
        }
    }
}
