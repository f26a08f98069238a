//! Documents and recall over HTTP: ingest, list, get, delete, recall, and the background index
//! rebuild. Through `tower::ServiceExt::oneshot`, on the real engine and model.

// Test helpers may panic on setup failures: that is a test failure, not a bug to handle.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use axum::http::StatusCode;
use cairn_api::Auth;
use serde_json::json;

use crate::common::{assert_documented, call, scope, test_app};

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
async fn the_index_is_rebuilt_in_the_background_after_many_writes() {
    let app = test_app(Auth::default(), 1 << 20);
    let doc = json!({"scope": scope("acme"), "source": "kb/vpn.md", "media_type": "text/markdown",
        "text": "# VPN\n\nInstall the client, sign in with your company account and choose the Frankfurt gateway."});
    let (s, _) = call(&app, "POST", "/v1/documents", Some(doc), None).await;
    assert_eq!(s, StatusCode::OK);
    let engine = Arc::clone(&app.state.engine);
    engine.note_written(cairn_service::OPTIMIZE_AFTER_CHUNKS);
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

#[tokio::test]
async fn chunks_counts_and_conversations_are_listed() {
    let app = test_app(Auth::default(), 1 << 20);
    let q = crate::common::Q;
    let text =
        "# Guide\n\n## Install\n\nRun the installer.\n\n## Use\n\nOpen the app and sign in.\n";
    let (s, doc) = call(
        &app,
        "POST",
        "/v1/documents",
        Some(
            json!({"scope": scope("acme"), "source": "guide.md", "text": text,
            "media_type": "text/markdown"}),
        ),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{doc}");
    let id = doc["doc_id"].as_str().unwrap();
    let (s, v) = call(
        &app,
        "GET",
        &format!("/v1/documents/{id}/chunks?{q}"),
        None,
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_documented("get", "/v1/documents/{id}/chunks", 200, &v);
    let chunks = v["chunks"].as_array().unwrap();
    assert_eq!(v["total"], doc["chunks"], "{v}");
    assert_eq!(chunks[0]["ref"], format!("doc:{id}#0"));
    assert!(chunks[0]["span"][1].as_u64().unwrap() > 0, "{v}");
    let all: String = chunks.iter().map(|c| c["text"].as_str().unwrap()).collect();
    assert!(all.contains("Run the installer."), "{v}");
    let (s, v) = call(
        &app,
        "GET",
        &format!("/v1/documents/nosuch/chunks?{q}"),
        None,
        None,
    )
    .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );

    for (conv, n) in [("c-old", 1), ("c-new", 2)] {
        let messages: Vec<_> = (0..n)
            .map(|i| {
                json!({"conversation_id": conv, "role": "user", "content": format!("m{i}"),
                "ts": 1_000 * (i + 1) + if conv == "c-new" { 10_000 } else { 0 }})
            })
            .collect();
        let (s, v) = call(
            &app,
            "POST",
            "/v1/messages",
            Some(json!({"scope": scope("acme"), "messages": messages})),
            None,
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{v}");
    }
    let (s, v) = call(&app, "GET", &format!("/v1/conversations?{q}"), None, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_documented("get", "/v1/conversations", 200, &v);
    assert_eq!(v["total"], 2);
    assert_eq!(v["conversations"][0]["conversation_id"], "c-new", "{v}");
    assert_eq!(v["conversations"][0]["messages"], 2);
    assert_eq!(v["conversations"][1]["first_ts"], 1_000);

    let (s, v) = call(&app, "GET", &format!("/v1/stats?{q}"), None, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_documented("get", "/v1/stats", 200, &v);
    assert_eq!(v["documents"], 1);
    assert_eq!(v["messages"], 3);
    assert_eq!(v["chunks"], doc["chunks"]);
}
