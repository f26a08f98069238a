//! Input errors and limits over HTTP: typed errors, caps naming the limit, Host/Origin checks
//! in key-less mode, 405 and bad parameters in the error shape, request timeouts. Through
//! `tower::ServiceExt::oneshot`, on the real engine and model.

// Test helpers may panic on setup failures: that is a test failure, not a bug to handle.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use cairn_api::{app, AppState, Auth, Metrics, ServerConfig};
use serde_json::{json, Value};

use crate::common::{
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
                ..ServerConfig::default()
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

/// An upload form is read as strictly as a JSON body: two `file` parts, a field given twice
/// and a missing `tenant` or `user` are `400 invalid_request` (before, the first file was
/// dropped, the last field won and the tenant silently became `default`), and nothing is
/// stored by any of them.
#[tokio::test]
async fn upload_forms_are_strict() {
    let app = test_app(Auth::default(), 1 << 20);
    let upload = |body: Vec<u8>| {
        Request::builder()
            .method("POST")
            .uri("/v1/documents/upload")
            .header("content-type", "multipart/form-data; boundary=b0")
            .body(Body::from(body))
            .unwrap()
    };
    let file = ("a.txt", "text/plain", &b"The first file's text."[..]);
    // Two file parts: the second appended to a well-formed form.
    let mut two = multipart("b0", &[("tenant", "acme"), ("user", "alice")], file);
    let end = b"--b0--\r\n";
    two.truncate(two.len() - end.len());
    two.extend(
        b"--b0\r\nContent-Disposition: form-data; name=\"file\"; filename=\"b.txt\"\r\n\
          Content-Type: text/plain\r\n\r\nThe second file's text.\r\n--b0--\r\n",
    );
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("two files", two, "more than one `file` part"),
        (
            "tenant twice",
            multipart(
                "b0",
                &[("tenant", "acme"), ("tenant", "globex"), ("user", "alice")],
                file,
            ),
            "`tenant` is given twice",
        ),
        (
            "source twice",
            multipart(
                "b0",
                &[
                    ("tenant", "acme"),
                    ("user", "alice"),
                    ("source", "a"),
                    ("source", "b"),
                ],
                file,
            ),
            "`source` is given twice",
        ),
        (
            "no tenant",
            multipart("b0", &[("user", "alice")], file),
            "no `tenant` field",
        ),
        (
            "no user",
            multipart("b0", &[("tenant", "acme")], file),
            "no `user` field",
        ),
    ];
    for (what, body, says) in cases {
        let (s, v) = raw(&app, upload(body)).await;
        assert_eq!(
            (s, code(&v)),
            (StatusCode::BAD_REQUEST, Some("invalid_request")),
            "{what}: {v}"
        );
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{what}: {message}");
    }
    for (tenant, user) in [
        ("acme", "alice"),
        ("globex", "alice"),
        ("default", "alice"),
        ("acme", "default"),
    ] {
        let (s, v) = call(
            &app,
            "GET",
            &format!("/v1/documents?tenant={tenant}&user={user}"),
            None,
            None,
        )
        .await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(v["total"], 0, "{tenant}/{user}: {v}");
    }
    // The same form with one of each is stored.
    let (s, v) = raw(
        &app,
        upload(multipart(
            "b0",
            &[("tenant", "acme"), ("user", "alice")],
            file,
        )),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["source"], "a.txt");
}

/// Slow and idle clients cannot hold the server: on a real listener with a 1 s header timeout
/// and a cap of 16 connections, 24 connections that each send half a header (more than the
/// cap) are all closed by the server, `/healthz` and a recall sent after them, waiting in the
/// backlog while every slot is held, are answered once slots free up, and an idle keep-alive
/// connection is closed after its request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_connections_are_closed() {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};

    let base = test_app(Auth::default(), 1 << 20);
    let state = Arc::new(AppState {
        engine: Arc::clone(&base.state.engine),
        auth: Auth::default(),
        metrics: Metrics::default(),
        config: ServerConfig {
            header_read_timeout: Duration::from_secs(1),
            max_connections: 16,
            ..ServerConfig::default()
        },
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(cairn_api::serve(listener, state, async {
        let _ = stopped.await;
    }));

    let outcome = tokio::task::spawn_blocking(move || {
        // Reads until the server closes the connection; the bytes read.
        fn until_closed(mut c: std::net::TcpStream) -> (Vec<u8>, Duration) {
            let start = Instant::now();
            c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                match c.read(&mut buf) {
                    Ok(0) | Err(_) => return (got, start.elapsed()),
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
        }
        let slow: Vec<std::net::TcpStream> = (0..24)
            .map(|_| {
                let mut c = std::net::TcpStream::connect(addr).unwrap();
                c.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: ")
                    .unwrap();
                c
            })
            .collect();
        // Connect behind them (the kernel's backlog) and are answered once slots free.
        let mut late = std::net::TcpStream::connect(addr).unwrap();
        late.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .unwrap();
        let recall =
            json!({"scope": {"tenant": "acme", "user": "alice"}, "query": "anything stored?"})
                .to_string();
        let mut late_recall = std::net::TcpStream::connect(addr).unwrap();
        late_recall
            .write_all(
                format!(
                    "POST /v1/recall HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
                     Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{recall}",
                    recall.len()
                )
                .as_bytes(),
            )
            .unwrap();
        let slow_closed: Vec<(Vec<u8>, Duration)> = slow.into_iter().map(until_closed).collect();
        let (late_reply, _) = until_closed(late);
        let (recall_reply, _) = until_closed(late_recall);
        // Idle keep-alive: one complete request, then nothing.
        let mut idle = std::net::TcpStream::connect(addr).unwrap();
        idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .unwrap();
        let (idle_reply, idle_open) = until_closed(idle);
        (slow_closed, late_reply, recall_reply, idle_reply, idle_open)
    })
    .await
    .unwrap();
    let (slow_closed, late_reply, recall_reply, idle_reply, idle_open) = outcome;
    for (i, (reply, open)) in slow_closed.iter().enumerate() {
        // Closed by the server (a read timeout of 30 s would show as 30 s), with at most a
        // `408 Request Timeout` and never a served request.
        assert!(
            *open < Duration::from_secs(30),
            "slow connection {i} open for {open:?}"
        );
        let text = String::from_utf8_lossy(reply);
        assert!(
            !text.contains("200 OK"),
            "slow connection {i} was served: {text}"
        );
    }
    let late_text = String::from_utf8_lossy(&late_reply);
    assert!(
        late_text.starts_with("HTTP/1.1 200"),
        "/healthz behind them: {late_text}"
    );
    let recall_text = String::from_utf8_lossy(&recall_reply);
    assert!(
        recall_text.starts_with("HTTP/1.1 200") && recall_text.contains("context_markdown"),
        "recall behind them: {recall_text}"
    );
    let idle_text = String::from_utf8_lossy(&idle_reply);
    assert!(
        idle_text.starts_with("HTTP/1.1 200"),
        "idle connection: {idle_text}"
    );
    assert!(
        idle_open < Duration::from_secs(30),
        "idle connection open for {idle_open:?}"
    );
    eprintln!(
        "slow connections closed after {:?}..{:?}; idle keep-alive closed after {idle_open:?}",
        slow_closed.iter().map(|c| c.1).min().unwrap(),
        slow_closed.iter().map(|c| c.1).max().unwrap()
    );
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(30), server)
        .await
        .expect("serve drains and returns")
        .unwrap()
        .unwrap();
}
