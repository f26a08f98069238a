//! HTTP routes through `tower::ServiceExt::oneshot`, on the real engine and model.

// Test helpers may panic on setup failures: that is a test failure, not a bug to handle.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use cairn_api::{app, AppState, Auth, Engine, Metrics, ServerConfig};
use cairn_embed::EmbedConfig;
use cairn_recall::RecallConfig;
use serde_json::{json, Value};
use tower::ServiceExt;

// Field order matters: the engine must be dropped (and flushed) before its directory.
struct TestApp {
    router: axum::Router,
    state: Arc<AppState>,
    _dir: tempfile::TempDir,
}

fn test_app(auth: Auth, max_body: usize) -> TestApp {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open_with(
        dir.path(),
        &EmbedConfig::from_env(),
        RecallConfig::default(),
        None,
    )
    .expect("engine (run scripts/setup.sh first)");
    let state = Arc::new(AppState {
        engine: Arc::new(engine),
        auth,
        metrics: Metrics::default(),
        config: ServerConfig {
            max_body_bytes: max_body,
            ..ServerConfig::default()
        },
    });
    TestApp {
        router: app(Arc::clone(&state)),
        state,
        _dir: dir,
    }
}

async fn call(
    app: &TestApp,
    method: &str,
    uri: &str,
    body: Option<Value>,
    key: Option<&str>,
) -> (StatusCode, Value) {
    let mut req = Request::builder().method(method).uri(uri);
    if let Some(k) = key {
        req = req.header("authorization", format!("Bearer {k}"));
    }
    let req = match body {
        Some(b) => req
            .header("content-type", "application/json")
            .body(Body::from(b.to_string()))
            .unwrap(),
        None => req.body(Body::empty()).unwrap(),
    };
    raw(app, req).await
}

async fn raw(app: &TestApp, req: Request<Body>) -> (StatusCode, Value) {
    let resp = app.router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, value)
}

fn scope(tenant: &str) -> Value {
    json!({"tenant": tenant, "user": "alice", "namespace": "kb", "agent": "bot", "session": "s1"})
}

#[tokio::test]
async fn health_documents_and_recall() {
    let app = test_app(Auth::default(), 1 << 20);
    let (s, v) = call(&app, "GET", "/healthz", None, None).await;
    assert_eq!((s, v["status"].as_str()), (StatusCode::OK, Some("ok")));
    let (s, v) = call(&app, "GET", "/readyz", None, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");

    let doc = json!({"scope": scope("acme"), "source": "kb/vpn.md", "media_type": "text/markdown",
        "text": "# VPN\n\nInstall the client, sign in with your company account and choose the Frankfurt gateway."});
    let (s, v) = call(&app, "POST", "/v1/documents", Some(doc.clone()), None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["status"], "created");
    let doc_id = v["doc_id"].as_str().unwrap().to_string();
    let (_, v) = call(&app, "POST", "/v1/documents", Some(doc), None).await;
    assert_eq!(v["status"], "unchanged");

    let (s, v) = call(
        &app,
        "GET",
        "/v1/documents?tenant=acme&user=alice&namespace=kb",
        None,
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["total"], 1);
    let (s, _) = call(
        &app,
        "GET",
        &format!("/v1/documents/{doc_id}?tenant=acme&user=alice&namespace=kb"),
        None,
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    // Another tenant cannot see it: 404, as if it did not exist.
    let (s, v) = call(
        &app,
        "GET",
        &format!("/v1/documents/{doc_id}?tenant=other&user=alice&namespace=kb"),
        None,
        None,
    )
    .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );

    let (s, v) = call(
        &app,
        "POST",
        "/v1/recall",
        Some(json!({"scope": scope("acme"), "query": "Which VPN gateway should I choose?"})),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["citations"][0]["source"], "kb/vpn.md");
    let (_, v) = call(
        &app,
        "POST",
        "/v1/recall",
        Some(json!({"scope": scope("other"), "query": "Which VPN gateway should I choose?"})),
        None,
    )
    .await;
    assert_eq!(v["coverage"], "none");

    let (s, _) = call(
        &app,
        "DELETE",
        &format!("/v1/documents/{doc_id}?tenant=acme&user=alice&namespace=kb"),
        None,
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = call(
        &app,
        "GET",
        &format!("/v1/documents/{doc_id}?tenant=acme&user=alice&namespace=kb"),
        None,
        None,
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (_, v) = call(
        &app,
        "POST",
        "/v1/recall",
        Some(json!({"scope": scope("acme"), "query": "Which VPN gateway should I choose?"})),
        None,
    )
    .await;
    assert_eq!(
        v["citations"].as_array().unwrap().len(),
        0,
        "deleted document is gone: {v}"
    );

    let (s, v) = call(&app, "GET", "/metrics", None, None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(v.as_str().unwrap().contains(
        "cairn_http_requests_total{method=\"POST\",route=\"/v1/recall\",status=\"200\"}"
    ));
}

#[tokio::test]
async fn bad_input_gets_typed_errors() {
    let app = test_app(Auth::default(), 4096);
    let post = |body: &str, ct: Option<&str>| {
        let mut r = Request::builder().method("POST").uri("/v1/recall");
        if let Some(ct) = ct {
            r = r.header("content-type", ct);
        }
        r.body(Body::from(body.to_string())).unwrap()
    };
    let (s, malformed) = raw(&app, post("{\"scope\": ", Some("application/json"))).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    insta::assert_json_snapshot!("malformed_json", malformed);
    let (s, wrong_type) = raw(
        &app,
        post(
            r#"{"scope": {"tenant": 1, "user": "u"}, "query": "x"}"#,
            Some("application/json"),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    insta::assert_json_snapshot!("wrong_type", wrong_type);
    let (s, no_ct) = raw(&app, post("{}", None)).await;
    assert_eq!(s, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    insta::assert_json_snapshot!("missing_content_type", no_ct);
    let big = json!({"scope": scope("acme"), "query": "x".repeat(10_000)}).to_string();
    let (s, too_large) = raw(&app, post(&big, Some("application/json"))).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    insta::assert_json_snapshot!("payload_too_large", too_large);
    let bad_scope =
        json!({"scope": {"tenant": "acme corp", "user": "u"}, "query": "x"}).to_string();
    let (s, bad_scope) = raw(&app, post(&bad_scope, Some("application/json"))).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    insta::assert_json_snapshot!("bad_scope", bad_scope);
    let (s, unknown) = call(&app, "GET", "/v1/nope", None, None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    insta::assert_json_snapshot!("unknown_route", unknown);
    let (s, v) = call(&app, "POST", "/v1/documents", Some(json!({"scope": scope("acme"), "source": "x.pdf", "text": "x", "media_type": "application/pdf"})), None).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Some("unsupported_media_type")
        )
    );
    let (s, v) = call(
        &app,
        "POST",
        "/v1/documents",
        Some(json!({"scope": scope("acme"), "source": "e.txt", "text": "  "})),
        None,
    )
    .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("empty_document"))
    );
    // The server still answers after all that.
    let (s, _) = call(&app, "GET", "/healthz", None, None).await;
    assert_eq!(s, StatusCode::OK);
}

#[tokio::test]
async fn agent_turns_prepare_and_complete_idempotently() {
    let app = test_app(Auth::default(), 1 << 20);
    let (s, env) = call(&app, "POST", "/v1/turns/prepare", Some(json!({"scope": scope("acme"), "user_message": "Remind me when my dentist appointment is", "turn_id": "turn-1"})), None).await;
    assert_eq!(s, StatusCode::OK, "{env}");
    assert_eq!(env["contract_version"], "agent-turn-v1");
    assert_eq!(env["turn_id"], "turn-1");
    assert_eq!(env["memory_pack"]["coverage"], "none");
    // prepare persisted nothing
    assert_eq!(app.state.engine.store.count_all().await.unwrap(), 0);

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
    let points = app.state.engine.store.count_all().await.unwrap();
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
        app.state.engine.store.count_all().await.unwrap(),
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
    assert_eq!(app.state.engine.store.count_all().await.unwrap(), points);

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
        app.state.engine.store.as_ref(),
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
    ] {
        let (s, v) = call(&app, method, uri, body, Some("key-a")).await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (StatusCode::FORBIDDEN, Some("scope_forbidden")),
            "{method} {uri}"
        );
    }
}
