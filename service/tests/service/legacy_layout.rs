//! A data directory written by the layout before typed record state (system state inside
//! the caller's `metadata`) opens and behaves as before: turns replay their receipts and
//! stay conflicts for other content, approved candidates keep their review, are recalled and
//! are invalidated when their evidence is forgotten, turn messages keep their links.
//!
//! The old records are written here exactly as the previous `main` wrote them (payload JSON
//! with the state in `metadata`, no `state` field), then the engine is closed and the data
//! directory opened again.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use cairn_embed::EmbedConfig;
use cairn_ingest::MessageInput;
use cairn_models::ids::{candidate_record_id, memory_point_id, sha256_hex, turn_record_id};
use cairn_models::state::{CandidateStatus, RecordState};
use cairn_models::{limits, PointKind, Ref, Role, Scope, StoredPoint, TrustOrigin};
use cairn_service::documents::DocumentBody;
use cairn_service::recall::{ForgetRequest, RecallBody};
use cairn_service::turns::CompleteRequest;
use cairn_service::{Engine, PageRequest, Principal, ServiceError};
use cairn_store::UpsertPoint;
use serde_json::json;

fn open(dir: &std::path::Path) -> Arc<Engine> {
    Arc::new(
        Engine::open_with(dir, &EmbedConfig::default(), crate::engine_options(dir))
            .expect("engine (run scripts/setup.sh first)"),
    )
}

fn scope() -> Scope {
    Scope::new("acme", "alice", "kb", "bot", "s1").unwrap()
}

fn complete(user: &str, assistant: &str) -> CompleteRequest {
    CompleteRequest {
        scope: scope(),
        user_message: user.into(),
        assistant_message: assistant.into(),
        source: None,
        mode: Default::default(),
        metadata: Some(json!({"caller": 1})),
        refers_to: vec![],
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_data_directory_of_the_old_layout_opens_and_behaves_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let who = Principal::Local;
    let sc = scope();
    let partition = sc.partition();
    let cand_id = "c0ffee";
    let receipt = json!({
        "turn_id": "t-old",
        "user_message_ref": "msg:s1/0",
        "assistant_message_ref": "msg:s1/1",
        "stored_at": "2026-11-01T10:00:00.000Z",
        "digest": "",
    });
    let doc_id;
    {
        let engine = open(dir.path());
        let report = engine
            .ingest_text(
                &who,
                DocumentBody {
                    scope: sc.clone(),
                    source: "runbook.md".into(),
                    text: "The Skerryvore lighthouse keeper is Morag Dunbar.".into(),
                    media_type: "text/markdown".into(),
                    metadata: None,
                },
            )
            .await
            .unwrap();
        doc_id = report.doc_id.clone();
        let store = engine.store();

        // A completed turn as the old layout stored it: links inside each message's
        // metadata (with the caller's metadata nested), the receipt inside the record's.
        let req = complete("Who keeps Skerryvore?", "Morag Dunbar.");
        let content = json!({
            "user_message": req.user_message, "assistant_message": req.assistant_message,
            "source": null, "mode": "text", "metadata": req.metadata, "refers_to": [],
        });
        let digest = sha256_hex(limits::canonical_json(&content).as_bytes());
        let mut receipt = receipt.clone();
        receipt["digest"] = json!(digest);
        let link_meta = json!({"part_of": "conversation:s1", "refers_to": [format!("doc:{doc_id}#0")],
            "mode": "text", "source": null, "metadata": {"caller": 1}});
        let msg = |role, content: &str| MessageInput {
            conversation_id: "s1".into(),
            role,
            content: content.into(),
            ts: None,
            turn_id: Some("t-old".into()),
            speaker: None,
            metadata: Some(link_meta.clone()),
        };
        engine
            .ingestor()
            .record_messages(
                &sc,
                vec![
                    msg(Role::User, &req.user_message),
                    msg(Role::Assistant, &req.assistant_message),
                ],
            )
            .await
            .unwrap();
        let mut turn = StoredPoint::new(PointKind::Turn, &sc, TrustOrigin::AgentOutput, 1);
        turn.turn_id = Some("t-old".into());
        turn.conversation_id = Some("s1".into());
        turn.content_hash = Some(digest);
        turn.metadata = Some(json!({"receipt": receipt, "refers_to": [], "deleted": false}));
        // A second, tombstoned turn.
        let mut gone = turn.clone();
        gone.turn_id = Some("t-gone".into());
        gone.metadata = Some(json!({"receipt": receipt, "refers_to": [], "deleted": true,
            "deleted_at": 2}));

        // An approved candidate and its memory, as the old layout stored them.
        let mut cand = StoredPoint::new(
            PointKind::Candidate,
            &Scope::new("acme", "alice", "kb", "scout", "s1").unwrap(),
            TrustOrigin::ThirdPartyAgent,
            3,
        );
        cand.doc_id = Some(cand_id.into());
        cand.text = Some("Morag Dunbar keeps the Skerryvore light.".into());
        cand.metadata = Some(json!({
            "status": "approved", "source_agent": "scout", "memory_type": "fact",
            "evidence_refs": [format!("doc:{doc_id}")], "confidence": 0.9, "decided_at": 4,
            "note": "checked", "invalidated_by": [], "metadata": {"k": "v"},
        }));
        let mut memory = cand.clone();
        memory.kind = PointKind::Memory;
        memory.source = Some(format!("agent scout; evidence doc:{doc_id}"));
        memory.metadata = Some(json!({"candidate_id": cand_id, "memory_type": "fact",
            "confidence": 0.9, "evidence_refs": [format!("doc:{doc_id}")]}));
        let text = memory.text.clone().unwrap();
        let dense = engine
            .embedder()
            .embed_documents(vec![text.clone()])
            .await
            .unwrap()
            .pop();
        store
            .upsert(vec![
                UpsertPoint::record(turn_record_id(&sc, "t-old"), turn),
                UpsertPoint::record(turn_record_id(&sc, "t-gone"), gone),
                UpsertPoint::record(candidate_record_id(&partition, cand_id), cand),
                UpsertPoint {
                    id: memory_point_id(&partition, cand_id),
                    dense,
                    bm25_text: Some(text),
                    sparse: None,
                    payload: memory,
                },
            ])
            .await
            .unwrap();
        // Closed without a flush: the reopen replays the journal too.
    }

    let engine = open(dir.path());
    // Reading turns the old metadata into typed state; the caller's metadata stays.
    let hits = engine
        .store()
        .retrieve(&partition, &[turn_record_id(&sc, "t-old")], false)
        .await
        .unwrap();
    assert!(matches!(&hits[0].point.state, Some(RecordState::Turn(t)) if !t.deleted));
    assert_eq!(hits[0].point.metadata, None);
    let messages = engine
        .conversation(&who, &partition, "s1", PageRequest::ALL)
        .await
        .unwrap()
        .items;
    assert_eq!(messages.len(), 2);

    // The old turn replays its stored receipt; other content is still a conflict; the
    // tombstoned id cannot be completed.
    let again = engine
        .complete_turn(
            &who,
            "t-old",
            complete("Who keeps Skerryvore?", "Morag Dunbar."),
        )
        .await
        .unwrap();
    assert_eq!(again.user_message_ref, "msg:s1/0");
    assert_eq!(again.stored_at, "2026-11-01T10:00:00.000Z");
    let err = engine
        .complete_turn(&who, "t-old", complete("Who keeps Skerryvore?", "Nobody."))
        .await
        .unwrap_err();
    assert!(matches!(err, ServiceError::TurnConflict(_)), "{err}");
    let err = engine
        .complete_turn(
            &who,
            "t-gone",
            complete("Who keeps Skerryvore?", "Morag Dunbar."),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ServiceError::TurnConflict(_)), "{err}");

    // The approved candidate keeps its review and the caller's metadata, and is recalled.
    let listed = engine
        .list_candidates(&who, &partition, None, PageRequest::ALL)
        .await
        .unwrap()
        .items;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].status, CandidateStatus::Approved);
    assert_eq!(listed[0].metadata, Some(json!({"k": "v"})));
    assert_eq!(listed[0].evidence_refs, vec![format!("doc:{doc_id}")]);
    let pack = engine
        .recall(
            &who,
            RecallBody {
                scope: sc.clone(),
                query: "Who keeps the Skerryvore lighthouse?".into(),
                token_budget: None,
                filters: Default::default(),
            },
        )
        .await
        .unwrap();
    let cited: Vec<String> = pack
        .citations
        .iter()
        .map(|c| c.reference.to_string())
        .collect();
    let cited: Vec<&str> = cited.iter().map(String::as_str).collect();
    assert!(
        cited.contains(&Ref::mem(cand_id).to_string().as_str()),
        "{cited:?}"
    );
    assert!(
        cited
            .iter()
            .any(|c| c.starts_with(&format!("doc:{doc_id}"))),
        "{cited:?}"
    );

    // Forgetting the evidence invalidates the old candidate through the typed state.
    let report = engine
        .forget(
            &who,
            ForgetRequest {
                scope: sc.clone(),
                reference: format!("doc:{doc_id}"),
                hard: false,
            },
        )
        .await
        .unwrap();
    assert_eq!(report.invalidated, vec![Ref::cand(cand_id).to_string()]);
    let listed = engine
        .list_candidates(&who, &partition, None, PageRequest::ALL)
        .await
        .unwrap()
        .items;
    assert_eq!(listed[0].status, CandidateStatus::Invalidated);
    assert_eq!(listed[0].invalidated_by, vec![format!("doc:{doc_id}")]);
    engine.flush().await.unwrap();
}
