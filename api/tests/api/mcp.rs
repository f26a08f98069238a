//! The MCP door with a real MCP client (`rmcp`): Streamable HTTP at `/mcp` on a real server
//! on loopback (the same app and listener as the REST API), and the local transport that
//! `cairn mcp` runs over stdio (here over an in-memory pipe). Real engine and model.

// Test helpers may panic on setup failures: that is a test failure, not a bug to handle.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use cairn_api::Auth;
use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject, Tool};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};
use tower::ServiceExt as _;

use crate::common::{scope, test_app};

type Client = RunningService<RoleClient, ()>;

/// Connects the rmcp client over Streamable HTTP, with `key` as the bearer token.
async fn connect(url: &str, key: Option<&str>) -> Result<Client, String> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_string());
    if let Some(k) = key {
        config = config.auth_header(k);
    }
    ().serve(StreamableHttpClientTransport::from_config(config))
        .await
        .map_err(|e| format!("{e:?}"))
}

async fn call(client: &Client, tool: &str, args: Value) -> CallToolResult {
    let args: JsonObject = args.as_object().unwrap().clone();
    client
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args))
        .await
        .unwrap_or_else(|e| panic!("{tool}: protocol error {e:?}"))
}

fn text(r: &CallToolResult) -> String {
    r.content[0].as_text().unwrap().text.clone()
}

/// The structured result of a successful call.
fn ok(r: &CallToolResult) -> Value {
    assert_ne!(r.is_error, Some(true), "tool error: {}", text(r));
    r.structured_content.clone().unwrap()
}

/// The stable code of a tool error: the text starts with it, and the structured content is
/// the HTTP API's error body.
fn code(r: &CallToolResult) -> String {
    assert_eq!(r.is_error, Some(true), "expected a tool error: {}", text(r));
    let t = text(r);
    let (prefix, _) = t.split_once(": ").unwrap();
    let structured = r.structured_content.clone().unwrap();
    assert_eq!(structured["error"]["code"], prefix, "{structured}");
    assert!(structured["error"]["message"].is_string(), "{structured}");
    prefix.to_string()
}

fn refs(pack: &Value) -> Vec<String> {
    crate::common::refs_of(pack)
}

fn sorted_keys(v: &Value) -> Vec<String> {
    let mut keys: Vec<String> = v
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    keys.sort();
    keys
}

fn sorted_strings(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = v
        .as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default();
    out.sort();
    out
}

/// Each tool's argument names and required arguments: the stable part of the schemas.
fn schema_summary(tools: &[Tool]) -> Value {
    let summary: BTreeMap<String, Value> = tools
        .iter()
        .map(|t| {
            let schema = Value::Object(t.input_schema.as_ref().clone());
            (
                t.name.to_string(),
                json!({
                    "properties": sorted_keys(&schema["properties"]),
                    "required": sorted_strings(&schema["required"]),
                }),
            )
        })
        .collect();
    json!(summary)
}

/// The scope argument's schema (inline or under `$defs`).
fn scope_schema(tool: &Tool) -> Value {
    let schema = Value::Object(tool.input_schema.as_ref().clone());
    let scope = &schema["properties"]["scope"];
    match scope.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let name = r.rsplit('/').next().unwrap();
            schema["$defs"][name].clone()
        }
        None => scope.clone(),
    }
}

/// One raw `initialize` POST to `/mcp` through the router, with `host` and `key`: the status
/// (the body, an event stream, is not read).
async fn raw_initialize(app: &crate::common::TestApp, host: &str, key: Option<&str>) -> StatusCode {
    let req = crate::common::mcp_initialize(host, key);
    app.router.clone().oneshot(req).await.unwrap().status()
}

/// Ending a session with `DELETE /mcp` answers `204 No Content` (the official Python SDK
/// treats anything but 200/204 as a failed termination), and the session is gone after it.
#[tokio::test]
async fn mcp_session_delete_answers_no_content() {
    let app = test_app(Auth::default(), 1 << 20);
    let req = crate::common::mcp_initialize("127.0.0.1", None);
    let res = app.router.clone().oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let session = res.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let delete = |session: &str| {
        Request::builder()
            .method("DELETE")
            .uri("/mcp")
            .header("host", "127.0.0.1")
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-06-18")
            .body(Body::empty())
            .unwrap()
    };
    let res = app.router.clone().oneshot(delete(&session)).await.unwrap();
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    // A message on the closed session is refused: the DELETE really ended it.
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    let req = Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-06-18")
        .body(Body::from(ping.to_string()))
        .unwrap();
    let res = app.router.clone().oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn mcp_http_tools_and_round_trip() {
    let app = test_app(Auth::default(), 1 << 20);
    let url = format!("{}/mcp", crate::common::serve(&app).await);
    let client = connect(&url, None).await.unwrap();
    let info = client.peer_info().unwrap();
    assert_eq!(info.server_info.as_ref().unwrap().name, "cairn");
    assert!(info
        .instructions
        .as_deref()
        .unwrap_or("")
        .contains("recall"));

    // The tools, their stable argument names, and descriptions written for a model.
    let tools = client.list_all_tools().await.unwrap();
    let mut names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    names.sort();
    assert_eq!(names, cairn_api::mcp::TOOLS);
    assert_eq!(
        schema_summary(&tools),
        json!({
            "add_entity": {
                "properties": ["aliases", "description", "name", "scope", "subtype", "trust_origin", "type"],
                "required": ["name", "scope", "type"],
            },
            "add_fact": {
                "properties": ["confidence", "evidence_refs", "object", "predicate", "scope", "subject", "supersede", "trust_origin", "valid_from", "valid_until"],
                "required": ["object", "predicate", "scope", "subject"],
            },
            "add_preference": {
                "properties": ["category", "context", "preference", "scope", "trust_origin"],
                "required": ["category", "preference", "scope"],
            },
            "list_facts": {
                "properties": ["history", "namespace", "predicate", "subject", "tenant", "user"],
                "required": ["tenant", "user"],
            },
            "record_trace": {
                "properties": ["outcome", "scope", "steps", "success", "task", "trace_key"],
                "required": ["scope", "task"],
            },
            "similar_traces": {
                "properties": ["limit", "namespace", "success_only", "task", "tenant", "user"],
                "required": ["task", "tenant", "user"],
            },
            "complete_turn": {
                "properties": ["assistant_message", "metadata", "mode", "refers_to", "scope", "source", "turn_id", "user_message"],
                "required": ["assistant_message", "scope", "turn_id", "user_message"],
            },
            "forget": {"properties": ["hard", "ref", "scope"], "required": ["ref", "scope"]},
            "list_documents": {
                "properties": ["limit", "namespace", "offset", "tenant", "user"],
                "required": ["tenant", "user"],
            },
            "prepare_turn": {
                "properties": ["filters", "mode", "scope", "token_budget", "turn_id", "user_message"],
                "required": ["scope", "user_message"],
            },
            "propose_memory": {
                "properties": ["confidence", "content", "evidence_refs", "knowledge", "memory_type", "metadata", "scope", "source_agent"],
                "required": ["confidence", "content", "evidence_refs", "memory_type", "scope", "source_agent"],
            },
            "recall": {
                "properties": ["filters", "query", "scope", "token_budget"],
                "required": ["query", "scope"],
            },
            "remember": {"properties": ["document", "messages", "scope"], "required": ["scope"]},
        })
    );
    for t in &tools {
        let description = t.description.as_deref().unwrap_or("");
        assert!(description.len() > 150, "{}: {description}", t.name);
        assert_eq!(
            t.input_schema.get("additionalProperties"),
            Some(&json!(false)),
            "{}",
            t.name
        );
        if !["list_documents", "list_facts", "similar_traces"].contains(&t.name.as_ref()) {
            let s = scope_schema(t);
            assert_eq!(
                sorted_keys(&s["properties"]),
                ["agent", "namespace", "session", "tenant", "user"],
                "{}: {s}",
                t.name
            );
            assert_eq!(sorted_strings(&s["required"]), ["tenant", "user"], "{s}");
        }
    }
    let recall_tool = tools.iter().find(|t| t.name == "recall").unwrap();
    assert_eq!(
        recall_tool.annotations.as_ref().unwrap().read_only_hint,
        Some(true)
    );
    let forget_tool = tools.iter().find(|t| t.name == "forget").unwrap();
    assert_eq!(
        forget_tool.annotations.as_ref().unwrap().destructive_hint,
        Some(true)
    );

    let scope = scope("acme");

    // remember a document → recall cites it.
    let r = call(
        &client,
        "remember",
        json!({"scope": scope, "document": {
            "source": "office-guide.md",
            "text": "# Office guide\n\n## Kitchen\n\nThe kitchen on floor 3 has two espresso machines. Clean the milk frother after use.\n",
            "media_type": "text/markdown",
        }}),
    )
    .await;
    let doc = ok(&r)["document"].clone();
    let doc_id = doc["doc_id"].as_str().unwrap().to_string();
    assert_eq!(doc["status"], "created", "{doc}");
    assert!(text(&r).contains(&format!("doc:{doc_id}")), "{}", text(&r));

    let r = call(
        &client,
        "recall",
        json!({"scope": scope, "query": "How many espresso machines are in the kitchen?", "token_budget": 400}),
    )
    .await;
    let pack = ok(&r);
    assert!(
        refs(&pack)
            .iter()
            .any(|x| x.starts_with(&format!("doc:{doc_id}#"))),
        "{pack}"
    );
    assert_eq!(text(&r), pack["context_markdown"].as_str().unwrap());
    assert!(text(&r).contains("espresso"), "{}", text(&r));
    assert!(pack["token_count"].as_u64().unwrap() <= 400);

    // prepare_turn → complete_turn → recall finds the turn's messages.
    let r = call(
        &client,
        "prepare_turn",
        json!({"scope": scope, "user_message": "Where can I park my bike at the office?"}),
    )
    .await;
    let envelope = ok(&r);
    assert_eq!(envelope["contract_version"], "agent-turn-v1");
    let turn_id = envelope["turn_id"].as_str().unwrap().to_string();
    assert!(
        text(&r).starts_with(&format!("turn_id: {turn_id}\n")),
        "{}",
        text(&r)
    );

    let complete = json!({
        "turn_id": turn_id,
        "scope": scope,
        "user_message": "Where can I park my bike at the office? The facilities team told me the bike cage code is 4417.",
        "assistant_message": "Park it in the bike cage behind building D; the cage code is 4417.",
        "refers_to": [format!("doc:{doc_id}#0")],
    });
    let r = call(&client, "complete_turn", complete.clone()).await;
    let receipt = ok(&r);
    assert_eq!(receipt["turn_id"], turn_id.as_str());
    let user_ref = receipt["user_message_ref"].as_str().unwrap().to_string();
    let assistant_ref = receipt["assistant_message_ref"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(user_ref.starts_with("msg:s1/"), "{receipt}");
    // A replay is the same receipt; other content for the same turn id is turn_conflict.
    let r = call(&client, "complete_turn", complete.clone()).await;
    assert_eq!(ok(&r), receipt);
    let mut other = complete.clone();
    other["assistant_message"] = json!("Something else entirely.");
    let r = call(&client, "complete_turn", other).await;
    assert_eq!(code(&r), "turn_conflict");
    assert!(text(&r).contains("\nhint: "), "{}", text(&r));

    let r = call(
        &client,
        "recall",
        json!({"scope": scope, "query": "What is the bike cage code?"}),
    )
    .await;
    let pack = ok(&r);
    let cited = refs(&pack);
    assert!(
        cited.contains(&user_ref) || cited.contains(&assistant_ref),
        "{cited:?} should cite {user_ref} or {assistant_ref}"
    );
    assert!(text(&r).contains("4417"), "{}", text(&r));

    // list_documents pages through the service's listing.
    let r = call(
        &client,
        "list_documents",
        json!({"tenant": "acme", "user": "alice", "namespace": "kb", "limit": 10}),
    )
    .await;
    let list = ok(&r);
    assert_eq!(list["total"], 1, "{list}");
    assert_eq!(list["documents"][0]["doc_id"], doc_id.as_str());
    let r = call(
        &client,
        "list_documents",
        json!({"tenant": "acme", "user": "alice", "namespace": "kb", "offset": 1}),
    )
    .await;
    assert_eq!(ok(&r)["documents"], json!([]));

    // remember messages: a keyed message is idempotent.
    let messages = json!({"scope": scope, "messages": [{
        "conversation_id": "c1", "role": "user",
        "content": "My dentist appointment is on Tuesday.", "message_id": "m1",
    }]});
    let r = call(&client, "remember", messages.clone()).await;
    let receipts = ok(&r)["messages"].clone();
    assert_eq!(receipts[0]["ref"], "msg:c1/0", "{receipts}");
    assert_eq!(receipts[0]["created"], true);
    let r = call(&client, "remember", messages).await;
    assert_eq!(ok(&r)["messages"][0]["created"], false);

    // propose_memory: a pending candidate citing the document.
    let r = call(
        &client,
        "propose_memory",
        json!({"scope": scope, "source_agent": "planner", "memory_type": "fact",
               "content": "The office kitchen has two espresso machines.",
               "evidence_refs": [format!("doc:{doc_id}")], "confidence": 0.9}),
    )
    .await;
    let proposed = ok(&r);
    assert_eq!(proposed["created"], true, "{proposed}");
    assert_eq!(proposed["candidate"]["status"], "pending");
    let cand_ref = proposed["candidate"]["ref"].as_str().unwrap().to_string();

    // Tool errors carry the service's stable codes.
    let r = call(
        &client,
        "forget",
        json!({"scope": scope, "ref": "doc:00000000000000000000000000000000"}),
    )
    .await;
    assert_eq!(code(&r), "not_found");
    let r = call(
        &client,
        "forget",
        json!({"scope": scope, "ref": "nonsense"}),
    )
    .await;
    assert_eq!(code(&r), "invalid_request");
    let r = call(&client, "recall", json!({"scope": scope})).await;
    assert_eq!(code(&r), "invalid_request");
    assert!(text(&r).contains("query"), "{}", text(&r));
    let r = call(&client, "remember", json!({"scope": scope})).await;
    assert_eq!(code(&r), "invalid_request");
    let r = call(
        &client,
        "recall",
        json!({"scope": {"tenant": "bad tenant!", "user": "alice"}, "query": "x"}),
    )
    .await;
    assert_eq!(code(&r), "invalid_request");
    let r = call(
        &client,
        "propose_memory",
        json!({"scope": scope, "source_agent": "planner", "memory_type": "fact",
               "content": "Unsupported claim.", "evidence_refs": ["evt:doesnotexist"],
               "confidence": 0.5}),
    )
    .await;
    assert_eq!(code(&r), "evidence_not_found");

    // forget the document: its candidate is invalidated, recall no longer cites it.
    let r = call(
        &client,
        "forget",
        json!({"scope": scope, "ref": format!("doc:{doc_id}")}),
    )
    .await;
    let report = ok(&r);
    assert!(
        sorted_strings(&report["removed"]).contains(&format!("doc:{doc_id}")),
        "{report}"
    );
    assert_eq!(report["invalidated"], json!([cand_ref]), "{report}");
    let r = call(
        &client,
        "recall",
        json!({"scope": scope, "query": "How many espresso machines are in the kitchen?"}),
    )
    .await;
    assert!(
        !refs(&ok(&r))
            .iter()
            .any(|x| x.starts_with(&format!("doc:{doc_id}"))),
        "{}",
        text(&r)
    );

    // The MCP calls went through the same metrics as the REST routes.
    let metrics = app.state.metrics.render();
    assert!(metrics.contains("route=\"/mcp\""), "{metrics}");
    assert!(metrics.contains("cairn_recalls_total"), "{metrics}");

    client.cancel().await.unwrap();
}

#[tokio::test]
async fn mcp_http_api_keys() {
    let hash = cairn_models::ids::sha256_hex(b"key-a");
    let app = test_app(Auth::parse(&format!("{hash}:acme")).unwrap(), 1 << 20);
    let url = format!("{}/mcp", crate::common::serve(&app).await);

    // No key, or an unknown one: 401 before the protocol runs.
    for key in [None, Some("wrong-key")] {
        let e = connect(&url, key).await.err().unwrap();
        assert!(e.contains("401"), "{key:?}: {e}");
    }

    let client = connect(&url, Some("key-a")).await.unwrap();
    let r = call(
        &client,
        "recall",
        json!({"scope": scope("acme"), "query": "anything"}),
    )
    .await;
    assert_eq!(ok(&r)["coverage"], "none");
    // A key for acme reaches no other tenant, whatever the tool.
    for (tool, args) in [
        ("recall", json!({"scope": scope("globex"), "query": "x"})),
        (
            "prepare_turn",
            json!({"scope": scope("globex"), "user_message": "x"}),
        ),
        (
            "complete_turn",
            json!({"turn_id": "t1", "scope": scope("globex"), "user_message": "x", "assistant_message": "y"}),
        ),
        (
            "remember",
            json!({"scope": scope("globex"), "document": {"source": "a", "text": "b"}}),
        ),
        ("forget", json!({"scope": scope("globex"), "ref": "conv:c"})),
        (
            "list_documents",
            json!({"tenant": "globex", "user": "alice"}),
        ),
        (
            "propose_memory",
            json!({"scope": scope("globex"), "source_agent": "a", "memory_type": "fact",
                   "content": "x", "evidence_refs": ["evt:e"], "confidence": 0.5}),
        ),
    ] {
        let r = call(&client, tool, args).await;
        assert_eq!(code(&r), "scope_forbidden", "{tool}");
    }
    client.cancel().await.unwrap();

    // With keys, rmcp's Host allow-list does not stand in the way of a real host name (a
    // reverse proxy, a LAN name); the key is what admits.
    assert_eq!(
        raw_initialize(&app, "memory.example.com", Some("key-a")).await,
        StatusCode::OK
    );
    assert_eq!(
        raw_initialize(&app, "memory.example.com", None).await,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn mcp_http_keyless_mode_is_loopback_only() {
    let app = test_app(Auth::default(), 1 << 20);
    assert_eq!(
        raw_initialize(&app, "127.0.0.1:7878", None).await,
        StatusCode::OK
    );
    assert_eq!(
        raw_initialize(&app, "localhost", None).await,
        StatusCode::OK
    );
    // The app's guard answers first, in the REST API's error shape.
    let (status, body) = crate::common::with_headers(
        &app,
        "POST",
        "/mcp",
        Some(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})),
        &[
            ("host", "evil.example.com"),
            ("accept", "application/json, text/event-stream"),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(
        crate::common::code(&body),
        Some("forbidden_origin"),
        "{body}"
    );
    // `/mcp` is no REST route: not in the OpenAPI document.
    assert!(!cairn_api::openapi_json().contains("/mcp"));
}

#[tokio::test]
async fn mcp_local_transport_is_the_local_operator() {
    // Keys on the HTTP side do not matter: the local transport (stdio in `cairn mcp`) is the
    // operator's, like the CLI.
    let hash = cairn_models::ids::sha256_hex(b"key-a");
    let app = test_app(Auth::parse(&format!("{hash}:acme")).unwrap(), 1 << 20);
    let (client_io, server_io) = tokio::io::duplex(1 << 16);
    let (read, write) = tokio::io::split(server_io);
    let server = tokio::spawn(cairn_api::mcp::serve_io(
        Arc::clone(&app.state.engine),
        read,
        write,
    ));
    let client = ().serve(client_io).await.unwrap();
    let tools = client.list_all_tools().await.unwrap();
    let mut names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    names.sort();
    assert_eq!(names, cairn_api::mcp::TOOLS);

    for tenant in ["acme", "globex"] {
        let s = scope(tenant);
        let r = call(
            &client,
            "remember",
            json!({"scope": s, "document": {"source": "wifi.txt",
                "text": format!("The guest wifi of {tenant} is called {tenant}-Guest.")}}),
        )
        .await;
        let doc_id = ok(&r)["document"]["doc_id"].as_str().unwrap().to_string();
        let r = call(
            &client,
            "recall",
            json!({"scope": s, "query": "What is the guest wifi called?"}),
        )
        .await;
        let pack = ok(&r);
        assert!(
            refs(&pack)
                .iter()
                .any(|x| x.starts_with(&format!("doc:{doc_id}#"))),
            "{pack}"
        );
        assert!(
            text(&r).contains(&format!("{tenant}-Guest")),
            "{}",
            text(&r)
        );
    }
    client.cancel().await.unwrap();
    server.await.unwrap().unwrap();
}

/// The knowledge and reasoning tools over Streamable HTTP: facts (conflict, then
/// supersession, history), a preference, an entity, a whole trace in one call, similar
/// traces, and recall citing what they stored.
#[tokio::test]
async fn mcp_knowledge_and_reasoning_tools() {
    let app = test_app(Auth::default(), 1 << 20);
    let url = format!("{}/mcp", crate::common::serve(&app).await);
    let client = connect(&url, None).await.unwrap();
    let sc = scope("mcpknow");

    let first = ok(&call(
        &client,
        "add_fact",
        json!({"scope": sc, "subject": "Morag Dunbar", "predicate": "lives_in", "object": "Oban"}),
    )
    .await);
    let oban = first["fact"]["id"].as_str().unwrap().to_string();
    let second = call(
        &client,
        "add_fact",
        json!({"scope": sc, "subject": "Morag Dunbar", "predicate": "LIVES IN", "object": "Tobermory"}),
    )
    .await;
    assert!(
        text(&second).contains("Conflicts with"),
        "{}",
        text(&second)
    );
    assert_eq!(ok(&second)["conflicts_with"], json!([oban]));
    // The user confirms the move: supersede. Oban becomes history.
    let moved = ok(&call(
        &client,
        "add_fact",
        json!({"scope": sc, "subject": "Morag Dunbar", "predicate": "lives_in",
               "object": "Portree", "supersede": true, "valid_from": "2026-01-01T00:00:00Z"}),
    )
    .await);
    assert_eq!(moved["superseded"].as_array().unwrap().len(), 2, "{moved}");
    let current = ok(&call(
        &client,
        "list_facts",
        json!({"tenant": "mcpknow", "user": "alice", "namespace": "kb", "subject": "morag dunbar"}),
    )
    .await);
    let objects: Vec<&str> = current["facts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["object"].as_str().unwrap())
        .collect();
    assert_eq!(objects, ["Portree"]);
    let history = ok(&call(
        &client,
        "list_facts",
        json!({"tenant": "mcpknow", "user": "alice", "namespace": "kb", "history": true}),
    )
    .await);
    assert_eq!(history["facts"].as_array().unwrap().len(), 3);

    let pref = ok(&call(
        &client,
        "add_preference",
        json!({"scope": sc, "category": "communication", "preference": "Prefers email over phone calls"}),
    )
    .await);
    let ent = ok(&call(
        &client,
        "add_entity",
        json!({"scope": sc, "name": "Skerryvore", "type": "LOCATION", "description": "A lighthouse off Tiree"}),
    )
    .await);
    assert_eq!(ent["type"], "location");

    let trace_args = json!({"scope": sc, "task": "Book a ferry from Oban to Mull",
               "steps": [
                   {"thought": "Check the timetable", "action": "search",
                    "tool_calls": [{"tool_name": "ferry_timetable", "arguments": {"from": "Oban"}, "duration_ms": 120}]},
                   {"thought": "Book the 10:00 sailing", "action": "book",
                    "tool_calls": [{"tool_name": "book_ticket", "arguments": {"sailing": "10:00"}, "status": "failure", "error": "sold out"},
                                   {"tool_name": "book_ticket", "arguments": {"sailing": "12:00"}}]}
               ],
               "outcome": "Booked the 12:00 sailing", "success": true, "trace_key": "ferry-1"});
    let trace = ok(&call(&client, "record_trace", trace_args.clone()).await);
    assert_eq!(trace["steps"].as_array().unwrap().len(), 2);
    assert_eq!(trace["steps"][1]["step_number"], 2);
    assert_eq!(trace["steps"][1]["tool_calls"].as_array().unwrap().len(), 2);
    assert_eq!(trace["success"], true);
    // The same call again (a retry) stores nothing new; other steps under the key are a
    // conflict.
    let again = ok(&call(&client, "record_trace", trace_args.clone()).await);
    assert_eq!(again["id"], trace["id"]);
    assert_eq!(again["steps"].as_array().unwrap().len(), 2);
    assert_eq!(again["steps"][1]["tool_calls"].as_array().unwrap().len(), 2);
    let mut other = trace_args.clone();
    other["steps"][0]["thought"] = json!("Something else");
    assert_eq!(
        code(&call(&client, "record_trace", other).await),
        "conflict"
    );

    let similar = ok(&call(
        &client,
        "similar_traces",
        json!({"tenant": "mcpknow", "user": "alice", "namespace": "kb",
               "task": "reserve a boat ticket to the Isle of Mull", "success_only": true}),
    )
    .await);
    assert_eq!(similar["traces"][0]["item"]["id"], trace["id"]);

    // Recall cites the knowledge: the current fact, the preference, the trace.
    let pack = ok(&call(
        &client,
        "recall",
        json!({"scope": sc, "query": "Where does Morag Dunbar live now?"}),
    )
    .await);
    let cited = refs(&pack);
    assert!(
        cited.contains(&format!("fact:{}", moved["fact"]["id"].as_str().unwrap())),
        "{cited:?}"
    );
    assert!(
        !cited.iter().any(|r| r == &format!("fact:{oban}")),
        "superseded fact recalled: {cited:?}"
    );
    let pack = ok(&call(
        &client,
        "recall",
        json!({"scope": sc, "query": "How should I contact the user, email or phone?"}),
    )
    .await);
    assert!(refs(&pack).contains(&format!("pref:{}", pref["id"].as_str().unwrap())));

    // Bad input is a typed tool error, not a protocol failure.
    let bad = call(
        &client,
        "add_entity",
        json!({"scope": sc, "name": "Mull", "type": "planet"}),
    )
    .await;
    assert_eq!(code(&bad), "invalid_request");
    let forgot = ok(&call(
        &client,
        "forget",
        json!({"scope": sc, "ref": format!("trace:{}", trace["id"].as_str().unwrap())}),
    )
    .await);
    assert_eq!(forgot["removed"].as_array().unwrap().len(), 1);
    client.cancel().await.unwrap();
}
