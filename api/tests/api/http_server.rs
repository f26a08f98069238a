//! End to end on a real server on loopback (a blocking client against `axum::serve`), and
//! the committed OpenAPI document (drift test).

// Test helpers may panic on setup failures: that is a test failure, not a bug to handle.
#![allow(clippy::unwrap_used)]

use cairn_api::Auth;
use serde_json::{json, Value};

use crate::common::{assert_documented, multipart, refs_of, scope, serve, test_app, Client, Q};

/// The committed `api/openapi.json` is the generated document. Regenerate it with
/// `UPDATE_OPENAPI=1 cargo test --release --workspace --test api http_server::openapi_document_is_committed`.
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
         UPDATE_OPENAPI=1 cargo test --release --workspace --test api http_server::openapi_document_is_committed\n\
         and commit the result"
    );
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
