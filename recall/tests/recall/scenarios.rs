//! Recall scenarios through the real engine and model.

// Test helpers may panic on setup failures: that is a test failure, not a bug to handle.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use cairn_ingest::fixtures::embedder;
use cairn_ingest::{DocumentInput, IngestConfig, Ingestor, MediaType, MessageInput, Progress};
use cairn_models::{Coverage, Role, Scope, TrustOrigin};
use cairn_recall::{RecallConfig, RecallFilters, RecallRequest, Recaller};
use cairn_store::{EdgeStore, MemoryStore, StoreConfig};

// Field order matters: the store must be dropped (and flushed) before its directory.
struct Env {
    ingestor: Arc<Ingestor>,
    recaller: Recaller,
    _dir: tempfile::TempDir,
}

fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let e = embedder();
    let store: Arc<dyn MemoryStore> =
        Arc::new(EdgeStore::open(&StoreConfig::new(dir.path(), e.spec().dim)).unwrap());
    let ingestor = Arc::new(
        Ingestor::new(
            Arc::clone(&store),
            e.clone(),
            IngestConfig::for_model(e.spec().max_tokens),
        )
        .unwrap(),
    );
    let recaller = Recaller::new(store, e, RecallConfig::default());
    Env {
        ingestor,
        recaller,
        _dir: dir,
    }
}

fn scope(user: &str) -> Scope {
    Scope::new("acme", user, "default", "agent", "s1").unwrap()
}

fn noop() -> Arc<dyn Fn(Progress) + Send + Sync> {
    Arc::new(|_| {})
}

async fn docs(env: &Env, s: &Scope, docs: &[(&str, &str)]) {
    let inputs = docs
        .iter()
        .map(|(src, text)| DocumentInput::text(*src, *text, MediaType::Text))
        .collect();
    for o in env.ingestor.ingest_documents(s, inputs, noop()).await {
        o.result.unwrap();
    }
}

fn req(s: &Scope, q: &str) -> RecallRequest {
    RecallRequest {
        scope: s.clone(),
        query: q.to_string(),
        budget: Some(800),
        filters: RecallFilters::default(),
    }
}

const CORPUS: &[(&str, &str)] = &[
    ("kb/onboarding.txt", "New employees receive their laptop on the first day from the IT desk on floor 2. Accounts are created by the IT team before arrival."),
    ("kb/expenses.txt", "Expense reports must be filed within 30 days. Meals are reimbursed up to 40 euros per day when travelling."),
    ("kb/garden.txt", "Tomatoes need six hours of sun. Water them in the morning and stake the plants when they reach knee height."),
    ("kb/vpn.txt", "To connect to the VPN install the client, sign in with your company account and choose the Frankfurt gateway."),
];

#[tokio::test]
async fn fresh_scope_has_no_coverage_and_says_so() {
    let env = env();
    let pack = env
        .recaller
        .recall(&req(&scope("nobody"), "Where do I pick up my laptop?"))
        .await
        .unwrap();
    assert_eq!(pack.coverage, Coverage::None);
    assert!(pack.citations.is_empty());
    assert!(!pack.unknowns.is_empty());
    assert!(pack.context_markdown.contains("Coverage: **none**"));
}

#[tokio::test]
async fn answerable_question_is_fully_covered_with_the_right_citation_first() {
    let env = env();
    let s = scope("alice");
    docs(&env, &s, CORPUS).await;
    let pack = env
        .recaller
        .recall(&req(&s, "How many days do I have to file expense reports?"))
        .await
        .unwrap();
    assert_eq!(
        pack.citations[0].source, "kb/expenses.txt",
        "{}",
        pack.context_markdown
    );
    assert_eq!(pack.coverage, Coverage::Full, "{}", pack.context_markdown);
    assert!(pack.context_markdown.contains("[1]"));
    assert!(pack.token_count <= pack.token_budget);
    // Every selected item is cited, and the reason is recorded.
    assert_eq!(pack.selected_nodes.len(), pack.citations.len());
    assert!(pack.selected_nodes[0].reason.dense_rank.is_some());

    // An unrelated question about something absent is not covered.
    let pack = env
        .recaller
        .recall(&req(
            &s,
            "What is the airspeed velocity of an unladen swallow?",
        ))
        .await
        .unwrap();
    assert_ne!(pack.coverage, Coverage::Full, "{}", pack.context_markdown);
}

fn user_msg(conv: &str, text: &str, turn: &str, ts: i64) -> MessageInput {
    MessageInput {
        conversation_id: conv.into(),
        role: Role::User,
        content: text.into(),
        ts: Some(cairn_ingest::Timestamp::Millis(ts)),
        turn_id: Some(turn.into()),
        speaker: None,
        metadata: None,
    }
}

#[tokio::test]
async fn contradicting_statements_are_surfaced_as_a_conflict() {
    let env = env();
    let s = scope("alex");
    env.ingestor
        .record_messages(
            &s,
            vec![
                user_msg(
                    "c1",
                    "Alex's dentist appointment is on Tuesday.",
                    "t1",
                    1_714_000_000_000,
                ),
                user_msg(
                    "c2",
                    "Alex's dentist appointment is on Thursday.",
                    "t2",
                    1_714_600_000_000,
                ),
            ],
        )
        .await
        .unwrap();
    let pack = env
        .recaller
        .recall(&req(&s, "When is Alex's dentist appointment?"))
        .await
        .unwrap();
    assert_eq!(
        pack.coverage,
        Coverage::Partial,
        "{}",
        pack.context_markdown
    );
    assert_eq!(pack.conflicts.len(), 1, "{:?}", pack.conflicts);
    let values: Vec<&str> = pack.conflicts[0]
        .sides
        .iter()
        .map(|s| s.value.as_str())
        .collect();
    assert!(
        values.contains(&"tuesday") && values.contains(&"thursday"),
        "{values:?}"
    );
    assert!(pack.context_markdown.contains("Conflicts"));
    assert!(pack.unknowns.iter().any(|u| u.contains("Conflicting")));
}

#[tokio::test]
async fn assistant_output_is_labelled_as_such() {
    let env = env();
    let s = scope("bob");
    env.ingestor
        .record_messages(
            &s,
            vec![MessageInput {
                conversation_id: "c1".into(),
                role: Role::Assistant,
                content: "Your flight to Lisbon departs at 7:45 from terminal 2.".into(),
                ts: None,
                turn_id: Some("t1".into()),
                speaker: None,
                metadata: None,
            }],
        )
        .await
        .unwrap();
    let pack = env
        .recaller
        .recall(&req(&s, "When does my flight to Lisbon depart?"))
        .await
        .unwrap();
    assert_eq!(pack.citations[0].trust_origin, TrustOrigin::AgentOutput);
    assert!(
        pack.context_markdown
            .contains("assistant said (unverified)"),
        "{}",
        pack.context_markdown
    );
    assert!(!pack.context_markdown.contains("user said"));
}

#[tokio::test]
async fn a_named_identifier_is_found_lexically() {
    let env = env();
    let s = scope("carol");
    let mut corpus = CORPUS.to_vec();
    corpus.push((
        "kb/tickets.txt",
        "Ticket ZX-4471 tracks the broken projector in room 5. Facilities will replace the lamp.",
    ));
    docs(&env, &s, &corpus).await;
    let pack = env
        .recaller
        .recall(&req(&s, "status of ZX-4471"))
        .await
        .unwrap();
    assert_eq!(
        pack.citations[0].source, "kb/tickets.txt",
        "{}",
        pack.context_markdown
    );
    assert_eq!(
        pack.selected_nodes[0].reason.identifier_hits,
        vec!["ZX-4471".to_string()]
    );
}

#[tokio::test]
async fn scopes_are_isolated() {
    let env = env();
    let a = scope("alice");
    let b = scope("bob");
    docs(&env, &a, &CORPUS[..2]).await;
    let pack = env
        .recaller
        .recall(&req(&b, "How many days do I have to file expense reports?"))
        .await
        .unwrap();
    assert!(pack.citations.is_empty(), "{}", pack.context_markdown);
    assert_eq!(pack.coverage, Coverage::None);
    // Invalid scopes and budgets are typed errors.
    let mut bad = req(&a, "x");
    bad.scope.tenant = "no spaces".into();
    assert_eq!(
        env.recaller.recall(&bad).await.unwrap_err().kind(),
        cairn_models::ErrorKind::BadInput
    );
    let mut bad = req(&a, "x");
    bad.budget = Some(10);
    assert_eq!(
        env.recaller.recall(&bad).await.unwrap_err().kind(),
        cairn_models::ErrorKind::BadInput
    );
}
