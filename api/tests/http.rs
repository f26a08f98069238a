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
    assert_documented("GET", "/readyz", 200, &v);
    let (s, v) = call(&app, "GET", "/v1/openapi.json", None, None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["openapi"], "3.1.0");
    assert!(v["paths"]["/v1/forget"]["post"].is_object());

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

/// The committed `api/openapi.json` is the generated document. Regenerate it with
/// `UPDATE_OPENAPI=1 cargo test --release -p cairn-api --test http openapi_document_is_committed`.
#[test]
fn openapi_document_is_committed() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi.json");
    let generated = cairn_api::openapi_json();
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "api/openapi.json is out of date with the code; regenerate it with\n  \
         UPDATE_OPENAPI=1 cargo test --release -p cairn-api --test http openapi_document_is_committed\n\
         and commit the result"
    );
}

// ---------- OpenAPI conformance ----------

/// Checks `value` against an OpenAPI 3.1 schema of `doc`: types, enums, required fields,
/// and no undocumented fields. Returns what does not conform.
fn conform(doc: &Value, schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let name = r.trim_start_matches("#/components/schemas/");
        let target = &doc["components"]["schemas"][name];
        assert!(!target.is_null(), "unresolved {r}");
        return conform(doc, target, value, at, errors);
    }
    if let Some(options) = schema.get("oneOf").and_then(Value::as_array) {
        let ok = options.iter().any(|o| {
            let mut e = Vec::new();
            conform(doc, o, value, at, &mut e);
            e.is_empty()
        });
        if !ok {
            errors.push(format!("{at}: matches no oneOf branch: {value}"));
        }
        return;
    }
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for s in all {
            conform(doc, s, value, at, errors);
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        if !allowed.contains(value) {
            errors.push(format!("{at}: {value} is not one of {allowed:?}"));
        }
    }
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !types.is_empty() {
        let ok = types.iter().any(|t| match *t {
            "null" => value.is_null(),
            "string" => value.is_string(),
            "boolean" => value.is_boolean(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "array" => value.is_array(),
            "object" => value.is_object(),
            _ => false,
        });
        if !ok {
            errors.push(format!("{at}: {value} is not of type {types:?}"));
            return;
        }
    }
    if let Some(obj) = value.as_object() {
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for req in schema["required"].as_array().into_iter().flatten() {
                let req = req.as_str().unwrap();
                if !obj.contains_key(req) {
                    errors.push(format!("{at}: missing required field {req}"));
                }
            }
            for (k, v) in obj {
                match props.get(k) {
                    Some(s) => conform(doc, s, v, &format!("{at}.{k}"), errors),
                    None => errors.push(format!("{at}: undocumented field {k}")),
                }
            }
        }
    }
    if let (Some(items), Some(arr)) = (schema.get("items"), value.as_array()) {
        for (i, v) in arr.iter().enumerate() {
            conform(doc, items, v, &format!("{at}[{i}]"), errors);
        }
    }
}

/// Asserts that a response body conforms to the OpenAPI document's schema for
/// (method, path template, status).
fn assert_documented(method: &str, template: &str, status: u16, body: &Value) {
    let doc: Value = serde_json::from_str(&cairn_api::openapi_json()).unwrap();
    let op = &doc["paths"][template][method.to_ascii_lowercase()];
    assert!(!op.is_null(), "{method} {template} is not documented");
    let response = &op["responses"][status.to_string()];
    assert!(
        !response.is_null(),
        "{method} {template}: status {status} is not documented"
    );
    let schema = &response["content"]["application/json"]["schema"];
    let mut errors = Vec::new();
    conform(&doc, schema, body, "body", &mut errors);
    assert!(
        errors.is_empty(),
        "{method} {template} {status}: the response does not match api/openapi.json:\n{}",
        errors.join("\n")
    );
}

/// `call`, then check the response against the OpenAPI document.
async fn checked(
    app: &TestApp,
    method: &str,
    template: &str,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let (s, v) = call(app, method, uri, body, None).await;
    assert_documented(method, template, s.as_u16(), &v);
    (s, v)
}

fn refs_of(pack: &Value) -> Vec<String> {
    pack["citations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["ref"].as_str().unwrap().to_string())
        .collect()
}

const Q: &str = "tenant=acme&user=alice&namespace=kb";

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
        app.state.engine.store.as_ref(),
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
async fn candidates_are_recalled_only_once_approved() {
    let app = test_app(Auth::default(), 1 << 20);
    let sc = scope("acme");
    // Evidence: an event and a message.
    let event = json!({"scope": sc, "source_agent": "travel-bot", "ts": "2024-05-01T10:00:00Z",
        "content": "Booking 4411: Alex chose seat 14A (window) on the Lisbon flight."});
    let (s, e1) = checked(
        &app,
        "POST",
        "/v1/events",
        "/v1/events",
        Some(event.clone()),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{e1}");
    assert_eq!(e1["created"], true);
    let (_, e2) = call(&app, "POST", "/v1/events", Some(event), None).await;
    assert_eq!(
        (e2["created"].as_bool(), &e2["ref"]),
        (Some(false), &e1["ref"])
    );
    let evt = e1["ref"].as_str().unwrap().to_string();
    let (s, v) = checked(
        &app,
        "GET",
        "/v1/events/{id}",
        &format!("/v1/events/{}?{Q}", e1["event_id"].as_str().unwrap()),
        None,
    )
    .await;
    assert_eq!(
        (s, v["source_agent"].as_str()),
        (StatusCode::OK, Some("travel-bot"))
    );
    let (_, m) = call(
        &app,
        "POST",
        "/v1/messages",
        Some(
            json!({"scope": sc, "messages": [{"conversation_id": "c9", "role": "user",
            "content": "I always take a window seat when I fly long distance."}]}),
        ),
        None,
    )
    .await;
    let msg = m["receipts"][0]["ref"].as_str().unwrap().to_string();
    // Events are not searchable.
    let query = json!({"scope": sc, "query": "Which seat does Alex prefer on long flights?"});
    let (_, pack) = call(&app, "POST", "/v1/recall", Some(query.clone()), None).await;
    assert!(
        !refs_of(&pack).iter().any(|r| r.starts_with("evt:")),
        "{pack}"
    );

    let propose = |content: &str, evidence: Vec<String>| {
        json!({"scope": sc, "source_agent": "travel-bot", "memory_type": "preference",
            "content": content, "evidence_refs": evidence, "confidence": 0.9})
    };
    let (s, v) = call(
        &app,
        "POST",
        "/v1/candidates",
        Some(propose(
            "Alex prefers window seats.",
            vec!["evt:0000".into()],
        )),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    insta::assert_json_snapshot!("evidence_not_found", v);
    let (s, v) = call(
        &app,
        "POST",
        "/v1/candidates",
        Some(
            json!({"scope": sc, "source_agent": "travel-bot", "memory_type": "preference",
            "content": "x", "evidence_refs": [evt], "confidence": 1.5}),
        ),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");

    let window = propose(
        "Alex prefers window seats on long flights.",
        vec![msg.clone(), evt.clone()],
    );
    let (s, c1) = checked(
        &app,
        "POST",
        "/v1/candidates",
        "/v1/candidates",
        Some(window.clone()),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{c1}");
    assert_eq!(
        (c1["created"].as_bool(), c1["candidate"]["status"].as_str()),
        (Some(true), Some("pending"))
    );
    let id = c1["candidate"]["candidate_id"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, again) = call(&app, "POST", "/v1/candidates", Some(window), None).await;
    assert_eq!(
        (
            again["created"].as_bool(),
            again["candidate"]["candidate_id"].as_str()
        ),
        (Some(false), Some(id.as_str())),
        "deterministic ids"
    );
    let (_, c2) = call(
        &app,
        "POST",
        "/v1/candidates",
        Some(propose(
            "Alex prefers aisle seats on long flights.",
            vec![evt.clone()],
        )),
        None,
    )
    .await;
    let id2 = c2["candidate"]["candidate_id"]
        .as_str()
        .unwrap()
        .to_string();

    // Pending: never recalled.
    let (_, pack) = call(&app, "POST", "/v1/recall", Some(query.clone()), None).await;
    assert!(
        !refs_of(&pack).iter().any(|r| r.starts_with("mem:")),
        "{pack}"
    );
    let (s, list) = checked(
        &app,
        "GET",
        "/v1/candidates",
        &format!("/v1/candidates?{Q}&status=pending"),
        None,
    )
    .await;
    assert_eq!((s, list["total"].as_u64()), (StatusCode::OK, Some(2)));

    // Approve (twice: idempotent), reject the other (twice), and the conflicts.
    let decision = json!({"scope": sc, "note": "confirmed with Alex"});
    let (s, a1) = checked(
        &app,
        "POST",
        "/v1/candidates/{id}/approve",
        &format!("/v1/candidates/{id}/approve"),
        Some(decision.clone()),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{a1}");
    assert_eq!(a1["status"], "approved");
    assert_eq!(a1["memory_ref"], format!("mem:{id}"));
    let (_, a2) = call(
        &app,
        "POST",
        &format!("/v1/candidates/{id}/approve"),
        Some(decision.clone()),
        None,
    )
    .await;
    assert_eq!(a1, a2, "approve is idempotent");
    let (s, r1) = call(
        &app,
        "POST",
        &format!("/v1/candidates/{id2}/reject"),
        Some(json!({"scope": sc})),
        None,
    )
    .await;
    assert_eq!(
        (s, r1["status"].as_str()),
        (StatusCode::OK, Some("rejected"))
    );
    let (_, r2) = call(
        &app,
        "POST",
        &format!("/v1/candidates/{id2}/reject"),
        Some(json!({"scope": sc})),
        None,
    )
    .await;
    assert_eq!(r1, r2, "reject is idempotent");
    let (s, v) = checked(
        &app,
        "POST",
        "/v1/candidates/{id}/approve",
        &format!("/v1/candidates/{id2}/approve"),
        Some(decision.clone()),
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT);
    insta::assert_json_snapshot!("approve_rejected_candidate", v);
    let (s, _) = call(
        &app,
        "POST",
        &format!("/v1/candidates/{id}/reject"),
        Some(decision.clone()),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT);
    let (s, _) = call(
        &app,
        "POST",
        &format!("/v1/candidates/{id}/approve"),
        Some(json!({"scope": scope("other")})),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "another tenant's candidate");

    // Approved: recalled as a third-party memory citing its evidence; rejected: never.
    let (s, pack) = checked(
        &app,
        "POST",
        "/v1/recall",
        "/v1/recall",
        Some(query.clone()),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let mem = pack["citations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["ref"] == format!("mem:{id}"))
        .unwrap_or_else(|| panic!("approved memory not recalled: {pack}"))
        .clone();
    assert_eq!(mem["trust_origin"], "third_party_agent");
    assert_eq!(mem["kind"], "memory");
    let source = mem["source"].as_str().unwrap();
    assert!(source.contains(&msg) && source.contains(&evt), "{source}");
    assert!(!refs_of(&pack).contains(&format!("mem:{id2}")));
    assert!(pack["context_markdown"]
        .as_str()
        .unwrap()
        .contains("third-party agent (approved)"));

    // Forgetting one piece of evidence narrows it; forgetting the last invalidates it.
    let (s, report) = call(
        &app,
        "POST",
        "/v1/forget",
        Some(json!({"scope": sc, "ref": evt})),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{report}");
    assert_eq!(report["narrowed"], json!([format!("cand:{id}")]));
    assert_eq!(
        report["invalidated"],
        json!([]),
        "a rejected candidate stays rejected"
    );
    let (_, v) = call(&app, "GET", &format!("/v1/candidates/{id}?{Q}"), None, None).await;
    assert_eq!(
        (v["status"].as_str(), &v["evidence_refs"]),
        (Some("approved"), &json!([msg]))
    );
    let (s, report) = call(
        &app,
        "DELETE",
        &format!("/v1/messages/{}?{Q}", msg.replace('/', "%2F")),
        None,
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{report}");
    assert_eq!(report["invalidated"], json!([format!("cand:{id}")]));
    let (_, v) = call(&app, "GET", &format!("/v1/candidates/{id}?{Q}"), None, None).await;
    assert_eq!(v["status"], "invalidated");
    assert_eq!(v["memory_ref"], Value::Null);
    let (_, pack) = call(&app, "POST", "/v1/recall", Some(query), None).await;
    assert!(
        !refs_of(&pack).iter().any(|r| r.starts_with("mem:")),
        "{pack}"
    );
    let (s, _) = call(
        &app,
        "POST",
        &format!("/v1/candidates/{id}/approve"),
        Some(decision),
        None,
    )
    .await;
    assert_eq!(
        s,
        StatusCode::CONFLICT,
        "an invalidated candidate cannot be approved"
    );
    let (_, list) = call(
        &app,
        "GET",
        &format!("/v1/candidates?{Q}&status=approved"),
        None,
        None,
    )
    .await;
    assert_eq!(list["total"], 0);
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

// ---------- a real server on loopback ----------

/// Serves `app` on 127.0.0.1 port 0; returns the base URL.
async fn serve(app: &TestApp) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = app.router.clone();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}")
}

/// A blocking HTTP client (ureq) that returns every status as data.
#[derive(Clone)]
struct Client {
    base: String,
    agent: ureq::Agent,
}

impl Client {
    fn new(base: String) -> Self {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        Client { base, agent }
    }

    fn finish(mut resp: ureq::http::Response<ureq::Body>) -> (u16, Value) {
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap();
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    fn send(&self, method: &str, path: &str, content_type: &str, body: Vec<u8>) -> (u16, Value) {
        let url = format!("{}{path}", self.base);
        let resp = match method {
            "POST" => self
                .agent
                .post(&url)
                .header("content-type", content_type)
                .send(&body[..]),
            "GET" => self.agent.get(&url).call(),
            "DELETE" => self.agent.delete(&url).call(),
            other => panic!("{other}"),
        };
        Self::finish(resp.unwrap())
    }

    /// Runs the request on the blocking pool and checks the response against the OpenAPI
    /// document.
    async fn json(
        &self,
        method: &str,
        template: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let c = self.clone();
        let (m, p) = (method.to_string(), path.to_string());
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let (s, v) = tokio::task::spawn_blocking(move || c.send(&m, &p, "application/json", bytes))
            .await
            .unwrap();
        assert_documented(method, template, s, &v);
        (s, v)
    }
}

fn multipart(boundary: &str, fields: &[(&str, &str)], file: (&str, &str, &[u8])) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in fields {
        out.extend(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n")
                .as_bytes(),
        );
    }
    let (filename, content_type, bytes) = file;
    out.extend(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\nContent-Type: {content_type}\r\n\r\n"
        )
        .as_bytes(),
    );
    out.extend(bytes);
    out.extend(format!("\r\n--{boundary}--\r\n").as_bytes());
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_to_end_on_a_real_server() {
    let app = test_app(Auth::default(), 1 << 20);
    let client = Client::new(serve(&app).await);
    let sc = scope("acme");

    // The served OpenAPI document is the generated one.
    let c = client.clone();
    let (s, doc) =
        tokio::task::spawn_blocking(move || c.send("GET", "/v1/openapi.json", "", vec![]))
            .await
            .unwrap();
    assert_eq!(s, 200);
    assert_eq!(
        doc,
        serde_json::from_str::<Value>(&cairn_api::openapi_json()).unwrap()
    );

    // Upload a PDF.
    let pdf = cairn_ingest::fixtures::simple_pdf(&[
        "Travel policy\nEmployees book trains for trips under 500 km.",
        "Hotels\nHotel stays are limited to 150 euros per night in every city.",
    ]);
    let body = multipart(
        "cairn-boundary-7",
        &[
            ("tenant", "acme"),
            ("user", "alice"),
            ("namespace", "kb"),
            ("agent", "bot"),
            ("session", "s1"),
        ],
        ("travel-policy.pdf", "application/pdf", &pdf),
    );
    let c = client.clone();
    let (s, report) = tokio::task::spawn_blocking(move || {
        c.send(
            "POST",
            "/v1/documents/upload",
            "multipart/form-data; boundary=cairn-boundary-7",
            body,
        )
    })
    .await
    .unwrap();
    assert_eq!(s, 200, "{report}");
    assert_documented("POST", "/v1/documents/upload", s, &report);
    assert_eq!(
        (report["status"].as_str(), report["media_type"].as_str()),
        (Some("created"), Some("application/pdf"))
    );
    let doc_id = report["doc_id"].as_str().unwrap().to_string();
    let (s, pack) = client
        .json(
            "POST",
            "/v1/recall",
            "/v1/recall",
            Some(json!({"scope": sc, "query": "How much can a hotel night cost?"})),
        )
        .await;
    assert_eq!(s, 200);
    let cite = &pack["citations"][0];
    assert_eq!(
        (cite["doc_id"].as_str(), cite["page"].as_u64()),
        (Some(doc_id.as_str()), Some(2)),
        "{pack}"
    );

    // An agent turn: prepare, complete twice (same receipt), complete with other text (409).
    let (s, env) = client
        .json("POST", "/v1/turns/prepare", "/v1/turns/prepare",
            Some(json!({"scope": sc, "user_message": "When is my dentist appointment?", "turn_id": "e2e-1"})))
        .await;
    assert_eq!((s, env["turn_id"].as_str()), (200, Some("e2e-1")));
    let turn = json!({"scope": sc, "user_message": "My dentist appointment is on Tuesday at 10am.",
        "assistant_message": "Noted: dentist on Tuesday at 10am."});
    let template = "/v1/turns/{turn_id}/complete";
    let (s1, r1) = client
        .json(
            "POST",
            template,
            "/v1/turns/e2e-1/complete",
            Some(turn.clone()),
        )
        .await;
    let (s2, r2) = client
        .json(
            "POST",
            template,
            "/v1/turns/e2e-1/complete",
            Some(turn.clone()),
        )
        .await;
    assert_eq!((s1, s2), (200, 200), "{r1} {r2}");
    assert_eq!(r1, r2, "a replay returns the same receipt");
    let mut changed = turn.clone();
    changed["assistant_message"] = json!("Noted: dentist on Wednesday.");
    let (s, v) = client
        .json("POST", template, "/v1/turns/e2e-1/complete", Some(changed))
        .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (409, Some("turn_conflict"))
    );

    // Recall cites the conversation.
    let dentist = json!({"scope": sc, "query": "When is my dentist appointment?"});
    let (_, pack) = client
        .json("POST", "/v1/recall", "/v1/recall", Some(dentist.clone()))
        .await;
    let refs = refs_of(&pack);
    assert!(refs.contains(&"msg:s1/0".to_string()), "{pack}");
    let user = pack["citations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["ref"] == "msg:s1/0")
        .unwrap();
    assert_eq!(
        (user["turn_id"].as_str(), user["trust_origin"].as_str()),
        (Some("e2e-1"), Some("user_reported"))
    );

    // Forget the conversation: recall no longer cites it, and the turn id stays used.
    let (s, report) = client
        .json(
            "POST",
            "/v1/forget",
            "/v1/forget",
            Some(json!({"scope": sc, "ref": "conv:s1", "hard": true})),
        )
        .await;
    assert_eq!(s, 200, "{report}");
    assert_eq!(report["removed"], json!(["msg:s1/0", "msg:s1/1"]));
    assert_eq!(report["tombstoned_turns"], json!(["turn:e2e-1"]));
    let (_, pack) = client
        .json("POST", "/v1/recall", "/v1/recall", Some(dentist))
        .await;
    assert!(
        !refs_of(&pack).iter().any(|r| r.starts_with("msg:s1/")),
        "{pack}"
    );
    let (s, v) = client
        .json("POST", template, "/v1/turns/e2e-1/complete", Some(turn))
        .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (409, Some("turn_conflict"))
    );
    // The document is untouched by that; forgetting it works over the wire too.
    let (s, _) = client
        .json(
            "DELETE",
            "/v1/documents/{id}",
            &format!("/v1/documents/{doc_id}?{Q}"),
            None,
        )
        .await;
    assert_eq!(s, 200);

    // Typed 4xx over the wire.
    let c = client.clone();
    let (s, v) = tokio::task::spawn_blocking(move || {
        c.send(
            "POST",
            "/v1/forget",
            "application/json",
            b"{\"scope\": ".to_vec(),
        )
    })
    .await
    .unwrap();
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (400, Some("invalid_request"))
    );
    let (s, v) = client
        .json("POST", "/v1/events", "/v1/events",
            Some(json!({"scope": {"tenant": "a/b", "user": "u"}, "source_agent": "x", "content": "y"})))
        .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (400, Some("invalid_request"))
    );
    let c = client.clone();
    // Just over the 1 MiB limit, so the client has sent it all before the server answers.
    let big = json!({"scope": sc, "ref": format!("doc:{}", "a".repeat((1 << 20) + 100))})
        .to_string()
        .into_bytes();
    let (s, v) =
        tokio::task::spawn_blocking(move || c.send("POST", "/v1/forget", "application/json", big))
            .await
            .unwrap();
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (413, Some("payload_too_large"))
    );
}

#[tokio::test]
async fn the_index_is_rebuilt_in_the_background_after_many_writes() {
    let app = test_app(Auth::default(), 1 << 20);
    let doc = json!({"scope": scope("acme"), "source": "kb/vpn.md", "media_type": "text/markdown",
        "text": "# VPN\n\nInstall the client, sign in with your company account and choose the Frankfurt gateway."});
    let (s, _) = call(&app, "POST", "/v1/documents", Some(doc), None).await;
    assert_eq!(s, StatusCode::OK);
    let engine = Arc::clone(&app.state.engine);
    engine.note_written(cairn_api::engine::OPTIMIZE_AFTER_CHUNKS);
    assert!(
        engine.optimizing(),
        "a build starts once enough chunks were written"
    );
    let started = std::time::Instant::now();
    while engine.optimizing() && started.elapsed() < std::time::Duration::from_secs(60) {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(!engine.optimizing(), "the build finishes");
    // Reads and writes go on as before on the optimized shard.
    let (s, v) = call(
        &app,
        "POST",
        "/v1/recall",
        Some(json!({"scope": scope("acme"), "query": "Which VPN gateway should I choose?"})),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["citations"][0]["source"], "kb/vpn.md");
}

// ---------- caps, keys, origins, method fallback ----------

async fn with_headers(
    app: &TestApp,
    method: &str,
    uri: &str,
    body: Option<Value>,
    headers: &[(&str, &str)],
) -> (StatusCode, Value) {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
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

fn code(v: &Value) -> Option<&str> {
    v["error"]["code"].as_str()
}

#[tokio::test]
async fn caps_are_typed_errors_naming_the_limit() {
    let app = test_app(Auth::default(), 4 << 20);
    let sc = scope("acme");
    // Document metadata: copied onto every chunk, so capped at 16 KiB.
    let big_meta = json!({"blob": "x".repeat(17 * 1024)});
    let (s, v) = checked(
        &app,
        "POST",
        "/v1/documents",
        "/v1/documents",
        Some(json!({"scope": sc, "source": "a.txt", "text": "Some text here.", "metadata": big_meta})),
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("payload_too_large"))
    );
    assert!(
        v["error"]["message"].as_str().unwrap().contains("16384"),
        "{v}"
    );
    // Source over 1024 bytes, JSON and multipart.
    let (s, v) = call(
        &app,
        "POST",
        "/v1/documents",
        Some(json!({"scope": sc, "source": "s".repeat(1025), "text": "Some text here."})),
        None,
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("payload_too_large"))
    );
    assert!(
        v["error"]["message"].as_str().unwrap().contains("1024"),
        "{v}"
    );
    let long_source = "s".repeat(1025);
    let body = multipart(
        "b0",
        &[
            ("tenant", "acme"),
            ("user", "alice"),
            ("source", &long_source),
        ],
        ("a.txt", "text/plain", b"Some text here."),
    );
    let req = Request::builder()
        .method("POST")
        .uri("/v1/documents/upload")
        .header("content-type", "multipart/form-data; boundary=b0")
        .body(Body::from(body))
        .unwrap();
    let (s, v) = raw(&app, req).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("payload_too_large"))
    );
    // Message content (32 KiB) and metadata (16 KiB).
    let msg = |content: String, meta: Value| json!({"scope": sc, "messages": [{"conversation_id": "c1", "role": "user", "content": content, "metadata": meta}]});
    let (s, v) = checked(
        &app,
        "POST",
        "/v1/messages",
        "/v1/messages",
        Some(msg("y".repeat(33 * 1024), Value::Null)),
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("payload_too_large"))
    );
    assert!(
        v["error"]["message"].as_str().unwrap().contains("32768"),
        "{v}"
    );
    let (s, v) = call(
        &app,
        "POST",
        "/v1/messages",
        Some(msg("hi".into(), json!({"k": "z".repeat(17 * 1024)}))),
        None,
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("payload_too_large"))
    );
    // Item counts.
    let many: Vec<Value> = (0..1001)
        .map(|i| json!({"conversation_id": "c1", "role": "user", "content": format!("m{i}")}))
        .collect();
    let (s, v) = checked(
        &app,
        "POST",
        "/v1/messages",
        "/v1/messages",
        Some(json!({"scope": sc, "messages": many})),
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::BAD_REQUEST, Some("too_many_items"))
    );
    assert!(
        v["error"]["message"].as_str().unwrap().contains("1000"),
        "{v}"
    );
    let trust: Vec<&str> = std::iter::repeat_n("document", 17).collect();
    let (s, v) = checked(
        &app,
        "POST",
        "/v1/recall",
        "/v1/recall",
        Some(json!({"scope": sc, "query": "q", "filters": {"trust": trust}})),
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::BAD_REQUEST, Some("too_many_items"))
    );
    let refs: Vec<String> = (0..65).map(|i| format!("doc:x#{i}")).collect();
    let (s, v) = call(
        &app,
        "POST",
        "/v1/turns/t-many/complete",
        Some(
            json!({"scope": sc, "user_message": "a", "assistant_message": "b", "refers_to": refs}),
        ),
        None,
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::BAD_REQUEST, Some("too_many_items"))
    );
    // A huge Markdown heading is indexed, but each chunk carries at most 256 bytes of it.
    let text = format!(
        "# {}\n\n{}",
        "H".repeat(50_000),
        "Body text about the heading cap. ".repeat(200)
    );
    let (s, v) = call(
        &app,
        "POST",
        "/v1/documents",
        Some(
            json!({"scope": sc, "source": "long.md", "media_type": "text/markdown", "text": text}),
        ),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (points, _) = app
        .state
        .engine
        .store
        .scroll(
            &cairn_models::Scope::new("acme", "alice", "kb", "bot", "s1")
                .unwrap()
                .partition(),
            cairn_store::Filter::new()
                .eq("source", "long.md")
                .eq("kind", "chunk"),
            1000,
            None,
        )
        .await
        .unwrap();
    assert!(points.len() > 1);
    for p in &points {
        assert!(p.point.heading.as_deref().map_or(0, str::len) <= 256);
    }
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

#[tokio::test]
async fn keyless_mode_refuses_foreign_hosts_and_origins() {
    let app = test_app(Auth::default(), 1 << 20);
    let uri = "/v1/documents?tenant=acme&user=alice&namespace=kb";
    for host in [
        "localhost",
        "localhost:7878",
        "127.0.0.1:7878",
        "[::1]:7878",
    ] {
        let (s, v) = with_headers(&app, "GET", uri, None, &[("host", host)]).await;
        assert_eq!(s, StatusCode::OK, "{host}: {v}");
    }
    for host in [
        "evil.example",
        "evil.example:7878",
        "localhost.evil.example",
        "10.0.0.5",
    ] {
        let (s, v) = with_headers(&app, "GET", uri, None, &[("host", host)]).await;
        assert_eq!(
            (s, code(&v)),
            (StatusCode::FORBIDDEN, Some("forbidden_origin")),
            "{host}"
        );
        assert_documented("GET", "/v1/documents", 403, &v);
    }
    let doc = json!({"scope": scope("acme"), "source": "o.txt", "text": "Origin test."});
    let (s, v) = with_headers(
        &app,
        "POST",
        "/v1/documents",
        Some(doc.clone()),
        &[
            ("host", "127.0.0.1:7878"),
            ("origin", "http://evil.example"),
        ],
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::FORBIDDEN, Some("forbidden_origin"))
    );
    let (s, _) = with_headers(
        &app,
        "POST",
        "/v1/documents",
        Some(doc.clone()),
        &[("host", "127.0.0.1:7878"), ("origin", "null")],
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, v) = with_headers(
        &app,
        "POST",
        "/v1/documents",
        Some(doc.clone()),
        &[
            ("host", "localhost:7878"),
            ("origin", "http://localhost:3000"),
        ],
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");

    // With keys, the keys protect: any host passes with a valid key.
    let h = cairn_models::ids::sha256_hex(b"k1");
    let keyed = test_app(Auth::parse(&format!("{h}:acme")).unwrap(), 1 << 20);
    let (s, v) = with_headers(
        &keyed,
        "GET",
        uri,
        None,
        &[
            ("host", "memory.example.com"),
            ("origin", "https://app.example.com"),
            ("authorization", "Bearer k1"),
        ],
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
}

#[tokio::test]
async fn wrong_methods_and_bad_params_use_the_error_shape() {
    let app = test_app(Auth::default(), 1 << 20);
    let (s, v) = call(&app, "PUT", "/v1/recall", Some(json!({})), None).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::METHOD_NOT_ALLOWED, Some("method_not_allowed"))
    );
    assert!(v["error"]["message"].is_string());
    let (s, v) = call(&app, "DELETE", "/healthz", None, None).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::METHOD_NOT_ALLOWED, Some("method_not_allowed"))
    );
    // A path parameter that is not UTF-8 once decoded.
    let (s, v) = call(
        &app,
        "GET",
        "/v1/documents/%FF%FE?tenant=acme&user=alice",
        None,
        None,
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::BAD_REQUEST, Some("invalid_request")),
        "{v}"
    );
    // Missing query parameters.
    let (s, v) = call(&app, "GET", "/v1/documents", None, None).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::BAD_REQUEST, Some("invalid_request"))
    );
    // A multipart route without a multipart body.
    let (s, v) = call(&app, "POST", "/v1/documents/upload", Some(json!({})), None).await;
    assert!(s.is_client_error(), "{s}");
    assert!(
        cairn_api::error::CODES.contains(&code(&v).unwrap_or("")),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_outlive_the_request_timeout_and_a_retry_gets_the_outcome() {
    let patient = test_app(Auth::default(), 1 << 20);
    // A second router on the same engine that gives up after a millisecond.
    let hasty = TestApp {
        router: app(Arc::new(AppState {
            engine: Arc::clone(&patient.state.engine),
            auth: Auth::default(),
            metrics: Metrics::default(),
            config: ServerConfig {
                max_body_bytes: 1 << 20,
                request_timeout: std::time::Duration::from_millis(1),
            },
        })),
        state: Arc::clone(&patient.state),
        _dir: tempfile::tempdir().unwrap(),
    };
    let text = "The quarterly report is due on the first Monday of April. ".repeat(40);
    let doc = json!({"scope": scope("acme"), "source": "report.txt", "text": text});
    let (s, v) = call(&hasty, "POST", "/v1/documents", Some(doc.clone()), None).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::GATEWAY_TIMEOUT, Some("timeout"))
    );
    assert!(
        v["error"]["hint"].as_str().unwrap().contains("retry"),
        "{v}"
    );
    let turn = json!({"scope": scope("acme"), "user_message": "When is the report due?",
        "assistant_message": "On the first Monday of April."});
    let (s, _) = call(
        &hasty,
        "POST",
        "/v1/turns/t-slow/complete",
        Some(turn.clone()),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::GATEWAY_TIMEOUT);

    // The work went on: the retries find it done.
    let started = std::time::Instant::now();
    loop {
        let (_, v) = call(
            &patient,
            "GET",
            "/v1/conversations/s1/messages?tenant=acme&user=alice&namespace=kb",
            None,
            None,
        )
        .await;
        let (_, d) = call(
            &patient,
            "GET",
            "/v1/documents?tenant=acme&user=alice&namespace=kb",
            None,
            None,
        )
        .await;
        if v["total"] == 2 && d["total"] == 1 {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "{v} {d}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (s, v) = call(&patient, "POST", "/v1/documents", Some(doc), None).await;
    assert_eq!(
        (s, v["status"].as_str()),
        (StatusCode::OK, Some("unchanged"))
    );
    // The turn is whole (both messages, then its receipt); the retry returns that receipt
    // (or completes it if the receipt write was still under way) without new messages.
    let (s, r) = call(
        &patient,
        "POST",
        "/v1/turns/t-slow/complete",
        Some(turn),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    let (_, v) = call(
        &patient,
        "GET",
        "/v1/conversations/s1/messages?tenant=acme&user=alice&namespace=kb",
        None,
        None,
    )
    .await;
    assert_eq!(v["total"], 2);
    assert_eq!(r["user_message_ref"], "msg:s1/0");
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
    let store = &app.state.engine.store;
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

/// A hard forget purges the cached vectors of the forgotten texts (from memory and from the
/// cache file); a soft forget keeps them; queries are never cached.
#[tokio::test]
async fn hard_forget_purges_cached_vectors_and_queries_are_not_cached() {
    let app = test_app(Auth::default(), 1 << 20);
    let embedder = &app.state.engine.embedder;
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
