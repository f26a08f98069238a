//! One wire vocabulary: where the doors used to disagree, HTTP now takes what MCP takes (and
//! the reverse), because both parse the same types. Through `tower::ServiceExt::oneshot`, on
//! the real engine and model.

use axum::http::StatusCode;
use cairn_api::Auth;
use serde_json::{json, Value};

use crate::common::{call, code, refs_of as cited, scope, test_app};

fn recall_body(filters: Value) -> Value {
    json!({"scope": scope("acme"), "query": "When is the dentist appointment?", "filters": filters})
}

#[tokio::test]
async fn kinds_times_and_scopes_read_the_same_on_every_door() {
    let app = test_app(Auth::default(), 1 << 20);
    let messages = json!({"scope": scope("acme"), "messages": [
        {"conversation_id": "c1", "role": "user", "content": "My dentist appointment is on Tuesday.",
         "ts": "2025-03-01T10:00:00Z"},
        {"conversation_id": "c1", "role": "user", "content": "The dentist moved it to Thursday.",
         "ts": 1_743_500_000_000_i64},
    ]});
    let (s, v) = call(&app, "POST", "/v1/messages", Some(messages), None).await;
    assert_eq!(s, StatusCode::OK, "{v}");

    // A kind recall never searches is refused with the kinds it takes, not silently dropped
    // (it used to be dropped on HTTP and refused on MCP).
    let (s, v) = call(
        &app,
        "POST",
        "/v1/recall",
        Some(recall_body(json!({"kinds": ["turn"]}))),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(code(&v), Some("invalid_request"), "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("not searchable") && msg.contains("message"),
        "{msg}"
    );
    let (s, v) = call(
        &app,
        "POST",
        "/v1/recall",
        Some(recall_body(json!({"kinds": ["message"]}))),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(cited(&v).len(), 2, "{v}");

    // `since` and `until` take RFC 3339 as every other time does, and mean the same instant
    // as its epoch milliseconds; text that is no time is refused.
    let march_15 = 1_742_000_000_000_i64; // 2025-03-15T00:53:20Z
    let (s, by_ms) = call(
        &app,
        "POST",
        "/v1/recall",
        Some(recall_body(json!({"since": march_15}))),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{by_ms}");
    let (s, by_text) = call(
        &app,
        "POST",
        "/v1/recall",
        Some(recall_body(json!({"since": "2025-03-15T00:53:20Z"}))),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{by_text}");
    assert_eq!(cited(&by_ms), vec!["msg:c1/1".to_string()], "{by_ms}");
    assert_eq!(cited(&by_text), cited(&by_ms));
    let (s, v) = call(
        &app,
        "POST",
        "/v1/recall",
        Some(recall_body(json!({"until": "last week"}))),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("last week"),
        "{v}"
    );

    // A misspelt scope field is refused instead of falling back to the default namespace,
    // and nothing is written.
    let before = app.state.engine.store().count_all().await.unwrap();
    let typo = json!({"scope": {"tenant": "acme", "user": "alice", "namepsace": "kb"},
        "messages": [{"conversation_id": "c2", "role": "user", "content": "hello"}]});
    let (s, v) = call(&app, "POST", "/v1/messages", Some(typo), None).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("namepsace"),
        "{v}"
    );
    assert_eq!(app.state.engine.store().count_all().await.unwrap(), before);

    // Citations carry typed refs that print as before.
    let (_, pack) = call(
        &app,
        "POST",
        "/v1/recall",
        Some(recall_body(json!({}))),
        None,
    )
    .await;
    for r in cited(&pack) {
        assert!(cairn_models::Ref::parse(&r).is_ok(), "{r}");
    }
}
