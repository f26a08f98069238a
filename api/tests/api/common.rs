//! Shared helpers of the API integration tests (`mod common;` in each test file): the
//! in-process app on the real engine and model, requests through
//! `tower::ServiceExt::oneshot`, OpenAPI conformance checks, and a real server on loopback
//! with a blocking client.

// Not every test file uses every helper.
#![allow(dead_code)]

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use cairn_api::{app, AppState, Auth, Engine, Metrics, ServerConfig};
use cairn_embed::EmbedConfig;
use serde_json::{json, Value};
use tower::ServiceExt;

// Field order matters: the engine must be dropped (and flushed) before its directory.
pub struct TestApp {
    pub router: axum::Router,
    pub state: Arc<AppState>,
    pub _dir: tempfile::TempDir,
}

/// An app on a fresh data directory with `auth` and the largest request body `max_body`
/// (other settings default).
pub fn test_app(auth: Auth, max_body: usize) -> TestApp {
    app_with(
        auth,
        ServerConfig {
            max_body_bytes: max_body,
            ..ServerConfig::default()
        },
    )
}

/// An app on a fresh data directory with `auth` and `config`.
pub fn app_with(auth: Auth, config: ServerConfig) -> TestApp {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open_with(
        dir.path(),
        &EmbedConfig::default(),
        engine_options(dir.path()),
    )
    .expect("engine (run scripts/setup.sh first)");
    let state = Arc::new(AppState {
        engine: Arc::new(engine),
        auth,
        metrics: Metrics::default(),
        config,
    });
    TestApp {
        router: app(Arc::clone(&state)),
        state,
        _dir: dir,
    }
}

pub async fn call(
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

pub async fn raw(app: &TestApp, req: Request<Body>) -> (StatusCode, Value) {
    let resp = app.router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, value)
}

pub fn scope(tenant: &str) -> Value {
    json!({"tenant": tenant, "user": "alice", "namespace": "kb", "agent": "bot", "session": "s1"})
}

// ---------- OpenAPI conformance ----------

/// Checks `value` against an OpenAPI 3.1 schema of `doc`: types, enums, required fields,
/// and no undocumented fields. Returns what does not conform.
pub fn conform(doc: &Value, schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
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
pub fn assert_documented(method: &str, template: &str, status: u16, body: &Value) {
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
pub async fn checked(
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

pub fn refs_of(pack: &Value) -> Vec<String> {
    pack["citations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["ref"].as_str().unwrap().to_string())
        .collect()
}

pub const Q: &str = "tenant=acme&user=alice&namespace=kb";

// ---------- a real server on loopback ----------

/// Serves `app` on 127.0.0.1 port 0; returns the base URL.
pub async fn serve(app: &TestApp) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = app.router.clone();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}")
}

/// A blocking HTTP client (ureq) that returns every status as data.
#[derive(Clone)]
pub struct Client {
    base: String,
    agent: ureq::Agent,
}

impl Client {
    pub fn new(base: String) -> Self {
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

    pub fn send(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> (u16, Value) {
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
    pub async fn json(
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

pub fn multipart(boundary: &str, fields: &[(&str, &str)], file: (&str, &str, &[u8])) -> Vec<u8> {
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

// ---------- requests with headers ----------

pub async fn with_headers(
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

/// A raw MCP `initialize` POST to `/mcp` with `host` and, when given, a bearer `key`.
pub fn mcp_initialize(host: &str, key: Option<&str>) -> Request<Body> {
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}
        }
    });
    let mut req = Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", host)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(k) = key {
        req = req.header("authorization", format!("Bearer {k}"));
    }
    req.body(Body::from(body.to_string())).unwrap()
}

pub fn code(v: &Value) -> Option<&str> {
    v["error"]["code"].as_str()
}

/// The store the suite runs on, configured as `cairn` would from this process's environment
/// for the data directory `dir`: embedded by default, a Qdrant server when `CAIRN_QDRANT_URL`
/// is set (then `CAIRN_QDRANT_COLLECTION='t_{dir}'` gives each directory its collection).
pub fn engine_options(dir: &std::path::Path) -> cairn_service::EngineOptions {
    cairn_config::engine_options_from(&|k| std::env::var(k).ok(), dir)
        .expect("store configuration from the environment")
}
