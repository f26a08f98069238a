//! HTTP fuzzing through `tower::ServiceExt::oneshot`, on the real engine and model: every
//! route of the OpenAPI document (plus wrong methods), generated path parameters, query
//! strings and bodies (well-shaped with wrong values, wrong shapes, invalid JSON, huge
//! strings, deep nesting, unicode). No answer may be a 5xx other than `503 unavailable` or
//! `504 timeout`, every error body must be the documented shape with a known code, and the
//! server must still be healthy afterwards.

// Test helpers may panic on setup failures: that is a test failure, not a bug to handle.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use cairn_api::Auth;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{json, Map, Value};
use tower::ServiceExt;

use crate::common::test_app;

/// Cases to run: enough to reach every route many times, bounded in time (the real model
/// embeds every well-formed recall and write).
const CASES: u32 = 500;

/// Every (method, path template) of the OpenAPI document.
fn routes() -> Vec<(String, String)> {
    let doc: Value = serde_json::from_str(&cairn_api::openapi_json()).unwrap();
    let mut out = Vec::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            if ["get", "post", "put", "delete", "patch"].contains(&method.as_str()) {
                out.push((method.to_ascii_uppercase(), path.clone()));
            }
        }
    }
    out.sort();
    out
}

const KEYS: &[&str] = &[
    "scope",
    "name",
    "type",
    "description",
    "aliases",
    "category",
    "preference",
    "context",
    "subject",
    "predicate",
    "object",
    "valid_from",
    "valid_until",
    "supersede",
    "cardinality",
    "source_id",
    "target_id",
    "relationship_type",
    "properties",
    "task",
    "trace_key",
    "thought",
    "action",
    "observation",
    "tool_name",
    "arguments",
    "result",
    "status",
    "duration_ms",
    "error",
    "outcome",
    "success",
    "knowledge",
    "query",
    "messages",
    "source",
    "text",
    "metadata",
    "media_type",
    "user_message",
    "assistant_message",
    "turn_id",
    "mode",
    "token_budget",
    "filters",
    "refers_to",
    "ref",
    "hard",
    "content",
    "source_agent",
    "memory_type",
    "evidence_refs",
    "confidence",
    "note",
    "ts",
    "conversation_id",
    "role",
    "message_id",
    "trust",
    "kinds",
    "since",
    "tenant",
    "user",
];

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(KEYS).prop_map(str::to_string),
        1 => "[a-z_]{1,10}",
        1 => "\\PC{0,6}",
    ]
}

fn string() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[A-Za-z0-9_.-]{1,16}",
        2 => "\\PC{0,40}",
        1 => proptest::sample::select(vec![
            "", " ", "acme", "alice", "user", "assistant", "tool", "robot", "text/markdown",
            "application/pdf", "doc:abc#0", "msg:c1/0", "conv:c1", "turn:t", "evt:x", "cand:x",
            "mem:x", "fact", "2024-05-01T10:00:00Z", "not a time", "pending", "null",
            "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ✓ é ü", "\u{0}\u{1b}[31m", "../../etc/passwd",
        ])
        .prop_map(str::to_string),
        1 => (1usize..5).prop_map(|n| "x".repeat(n * 20_000)),
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        proptest::sample::select(vec![0i64, -1, 1, 5, 1000, 32_769, i64::MAX])
            .prop_map(Value::from),
        string().prop_map(Value::from),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((key(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn scope_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => Just(json!({"tenant": "acme", "user": "alice", "namespace": "kb", "agent": "bot", "session": "s1"})),
        1 => Just(json!({"tenant": "acme", "user": "alice"})),
        1 => json_value(),
        1 => string().prop_map(|t| json!({"tenant": t, "user": "alice"})),
    ]
}

/// A body: mostly objects with a valid scope and known fields of random values, so the
/// handlers' validation (not only the JSON parser) is exercised.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let shaped = (
        scope_value(),
        proptest::collection::vec((key(), json_value()), 0..6),
    )
        .prop_map(|(scope, fields)| {
            let mut m: Map<String, Value> = fields.into_iter().collect();
            m.insert("scope".into(), scope);
            Value::Object(m).to_string().into_bytes()
        });
    let messages = (
        scope_value(),
        proptest::collection::vec(
            (
                string(),
                proptest::sample::select(vec!["user", "assistant", "x"]),
                string(),
                json_value(),
            ),
            0..4,
        ),
    )
        .prop_map(|(scope, ms)| {
            let ms: Vec<Value> = ms
                .into_iter()
                .map(|(c, r, content, meta)| {
                    json!({"conversation_id": c, "role": r, "content": content, "metadata": meta})
                })
                .collect();
            json!({"scope": scope, "messages": ms})
                .to_string()
                .into_bytes()
        });
    prop_oneof![
        5 => shaped,
        2 => messages,
        2 => json_value().prop_map(|v| v.to_string().into_bytes()),
        1 => proptest::collection::vec(any::<u8>(), 0..200),
        1 => "\\PC{0,200}".prop_map(String::into_bytes),
        1 => (1usize..400).prop_map(|d| format!("{}{}", "[".repeat(d), "]".repeat(d)).into_bytes()),
        1 => (1usize..300).prop_map(|d| {
            format!("{}1{}", "{\"a\":".repeat(d), "}".repeat(d)).into_bytes()
        }),
        1 => Just(Vec::new()),
    ]
}

fn path_param() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[A-Za-z0-9_.-]{1,20}",
        1 => Just("msg:c1%2F0".to_string()),
        1 => "(%[0-9A-F]{2}){1,6}",
        1 => "[a-z]{1,5}%20[a-z]{1,5}",
        1 => (1usize..4).prop_map(|n| "p".repeat(n * 300)),
        1 => Just("%E2%9C%93".to_string()),
    ]
}

fn query() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        Just("acme".to_string()),
        Just("alice".to_string()),
        Just("kb".to_string()),
        Just("-1".to_string()),
        Just("99999999999999999999999".to_string()),
        Just("true".to_string()),
        Just("pending".to_string()),
        Just("%FF".to_string()),
        Just(String::new()),
        "[A-Za-z0-9]{0,10}",
    ];
    let pair = (
        proptest::sample::select(vec![
            "tenant",
            "user",
            "namespace",
            "limit",
            "offset",
            "hard",
            "status",
            "foo",
        ]),
        value,
    );
    prop_oneof![
        3 => proptest::collection::vec(pair, 0..6).prop_map(|ps| {
            ps.into_iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&")
        }),
        1 => Just("tenant=acme&user=alice&namespace=kb".to_string()),
        1 => "\\PC{0,20}".prop_map(|s| s.replace(['#', ' '], "")),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    route: usize,
    method_override: Option<&'static str>,
    params: Vec<String>,
    query: String,
    body: Vec<u8>,
    content_type: Option<&'static str>,
}

fn case(n_routes: usize) -> impl Strategy<Value = Case> {
    (
        0..n_routes,
        prop_oneof![
            8 => Just(None),
            1 => proptest::sample::select(vec!["PUT", "PATCH", "DELETE", "GET", "POST"]).prop_map(Some),
        ],
        proptest::collection::vec(path_param(), 2),
        query(),
        body(),
        prop_oneof![
            6 => Just(Some("application/json")),
            1 => Just(None),
            1 => Just(Some("text/plain")),
            1 => Just(Some("multipart/form-data; boundary=x")),
            1 => Just(Some("multipart/form-data")),
        ],
    )
        .prop_map(|(route, method_override, params, query, body, content_type)| Case {
            route,
            method_override,
            params,
            query,
            body,
            content_type,
        })
}

fn fill(template: &str, params: &[String]) -> String {
    let mut out = String::new();
    let mut i = 0;
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let end = rest[start..]
            .find('}')
            .map_or(rest.len(), |e| start + e + 1);
        out.push_str(&params[i % params.len()]);
        i += 1;
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

fn check_error_shape(status: StatusCode, bytes: &[u8]) -> Result<(), String> {
    let v: Value = serde_json::from_slice(bytes).map_err(|_| {
        format!(
            "{status}: error body is not JSON: {:?}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
        )
    })?;
    let e = v["error"]
        .as_object()
        .ok_or_else(|| format!("{status}: no error object: {v}"))?;
    let code = e["code"].as_str().unwrap_or("");
    if !cairn_api::error::CODES.contains(&code) {
        return Err(format!("{status}: unknown code {code:?}: {v}"));
    }
    if !e.get("message").is_some_and(Value::is_string) {
        return Err(format!("{status}: no message: {v}"));
    }
    if e.get("hint").is_some_and(|h| !h.is_string()) {
        return Err(format!("{status}: hint is not a string: {v}"));
    }
    if let Some(k) = e
        .keys()
        .find(|k| !["code", "message", "hint"].contains(&k.as_str()))
    {
        return Err(format!("{status}: unexpected field {k}: {v}"));
    }
    if v.as_object().map_or(0, Map::len) != 1 {
        return Err(format!("{status}: extra top-level fields: {v}"));
    }
    Ok(())
}

#[test]
fn http_fuzz_never_5xx_and_errors_keep_their_shape() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let app = test_app(Auth::default(), 1 << 20);
    let router = app.router.clone();
    let routes = routes();
    assert!(routes.len() >= 20, "{routes:?}");
    let ran = AtomicUsize::new(0);
    let statuses = std::sync::Mutex::new(std::collections::BTreeMap::<u16, usize>::new());
    let started = std::time::Instant::now();

    let mut runner = TestRunner::new(Config {
        cases: CASES,
        max_shrink_iters: 64,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&case(routes.len()), |c| {
        ran.fetch_add(1, Ordering::Relaxed);
        let (method, template) = &routes[c.route];
        let method = c.method_override.unwrap_or(method.as_str());
        let path = fill(template, &c.params);
        let uri = if c.query.is_empty() {
            path
        } else {
            format!("{path}?{}", c.query)
        };
        let Ok(uri) = uri.parse::<axum::http::Uri>() else {
            // Not a URI a client could send.
            *statuses.lock().unwrap().entry(0).or_default() += 1;
            return Ok(());
        };
        let mut req = Request::builder().method(method).uri(uri.clone());
        if let Some(ct) = c.content_type {
            req = req.header("content-type", ct);
        }
        let req = req.body(Body::from(c.body.clone())).unwrap();
        let (status, bytes) = rt.block_on(async {
            let resp = router.clone().oneshot(req).await.unwrap();
            let status = resp.status();
            let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .unwrap();
            (status, bytes)
        });
        *statuses.lock().unwrap().entry(status.as_u16()).or_default() += 1;
        if status.is_server_error()
            && status != StatusCode::SERVICE_UNAVAILABLE
            && status != StatusCode::GATEWAY_TIMEOUT
        {
            return Err(TestCaseError::fail(format!(
                "{method} {uri}: {status}: {}",
                String::from_utf8_lossy(&bytes)
            )));
        }
        if status.is_client_error() || status.is_server_error() {
            check_error_shape(status, &bytes)
                .map_err(|e| TestCaseError::fail(format!("{method} {uri}: {e}")))?;
        }
        Ok(())
    });
    let n = ran.load(Ordering::Relaxed);
    println!(
        "fuzz cases run: {n} ({} routes, {:.1} s; statuses {:?}, 0 = URI not sendable)",
        routes.len(),
        started.elapsed().as_secs_f64(),
        statuses.lock().unwrap()
    );
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(n >= CASES as usize, "ran {n} of {CASES} cases");

    let healthy = rt.block_on(async {
        let req = Request::builder()
            .uri("/healthz")
            .body(Body::empty())
            .unwrap();
        router.clone().oneshot(req).await.unwrap().status()
    });
    assert_eq!(healthy, StatusCode::OK);
    drop(router);
    drop(app);
}
