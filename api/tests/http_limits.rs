//! Input errors and limits over HTTP: typed errors, caps naming the limit, Host/Origin checks
//! in key-less mode, 405 and bad parameters in the error shape, request timeouts. Through
//! `tower::ServiceExt::oneshot`, on the real engine and model.

// Test helpers may panic on setup failures: that is a test failure, not a bug to handle.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use cairn_api::{app, AppState, Auth, Metrics, ServerConfig};
use serde_json::{json, Value};

use common::{
    assert_documented, call, checked, code, multipart, raw, scope, test_app, with_headers, TestApp,
};

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
        .store()
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
