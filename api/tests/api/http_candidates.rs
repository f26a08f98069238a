//! Third-party events and candidate memories over HTTP: propose, review, recall only once
//! approved. Through `tower::ServiceExt::oneshot`, on the real engine and model.

// Test helpers may panic on setup failures: that is a test failure, not a bug to handle.
#![allow(clippy::unwrap_used)]

use axum::http::StatusCode;
use cairn_api::Auth;
use serde_json::{json, Value};

use crate::common::{call, checked, refs_of, scope, test_app, Q};

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
