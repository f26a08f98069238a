//! Knowledge memory (entities, preferences, facts, relationships, merges) and reasoning
//! memory (traces, steps, tool calls) through the engine: a real data directory, the real
//! embedding model, no mocks. Covers supersession and conflicts, validity windows, merges,
//! the forget cascade into facts, tenant isolation of every new kind, tool statistics,
//! similar-trace ranking, concurrent writers, and recall over knowledge.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};

use cairn_embed::{EmbedConfig, Embedder};
use cairn_ingest::messages::KeyedMessage;
use cairn_ingest::MessageInput;
use cairn_models::grant::GrantPreset;
use cairn_models::knowledge::{Cardinality, Fact, FactStatus, ToolStatus};
use cairn_models::Ref;
use cairn_models::{MemoryPack, Partition, Role, Scope};
use cairn_recall::RecallFilters;
use cairn_service::candidates::{CandidateRequest, DecisionRequest};
use cairn_service::documents::DocumentBody;
use cairn_service::grants::GrantRequest;
use cairn_service::knowledge::{
    EntityRequest, FactConflict, FactOutcome, FactQuery, FactRequest, MergeRequest,
    PredicateRequest, PreferenceRequest, RelationshipRequest,
};
use cairn_service::reasoning::{
    CompleteTraceRequest, StepRequest, ToolCallRequest, ToolStats, TraceRequest,
};
use cairn_service::recall::{ForgetRequest, RecallBody};
use cairn_service::{Auth, Engine, PageRequest, Principal, ServiceError};
use tempfile::TempDir;

const DAY: i64 = 86_400_000;

/// The model, loaded once per test process: every engine of this file shares its worker.
fn embedder() -> Embedder {
    static EMBEDDER: OnceLock<Embedder> = OnceLock::new();
    EMBEDDER
        .get_or_init(|| {
            Embedder::open(&EmbedConfig::default(), None)
                .expect("embedding model (run scripts/setup.sh first)")
        })
        .clone()
}

/// An engine over a fresh data directory (kept alive as long as the engine).
struct Env {
    engine: Arc<Engine>,
    _dir: TempDir,
}

fn open() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::with_embedder(dir.path(), embedder(), crate::engine_options(dir.path()))
        .expect("engine");
    Env {
        engine: Arc::new(engine),
        _dir: dir,
    }
}

fn scope(tenant: &str, user: &str) -> Scope {
    Scope::new(tenant, user, "kb", "bot", "s1").unwrap()
}

fn now() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

const LOCAL: Principal = Principal::Local;

fn fact_req(sc: &Scope, subject: &str, predicate: &str, object: &str) -> FactRequest {
    FactRequest {
        scope: sc.clone(),
        subject: subject.into(),
        predicate: predicate.into(),
        object: object.into(),
        valid_from: None,
        valid_until: None,
        confidence: None,
        evidence_refs: vec![],
        supersede: false,
        trust_origin: None,
    }
}

async fn add_fact(e: &Engine, sc: &Scope, s: &str, p: &str, o: &str) -> FactOutcome {
    e.add_fact(&LOCAL, fact_req(sc, s, p, o)).await.unwrap()
}

async fn declare(e: &Engine, sc: &Scope, predicate: &str, cardinality: Cardinality) {
    e.declare_predicate(
        &LOCAL,
        PredicateRequest {
            scope: sc.clone(),
            predicate: predicate.into(),
            cardinality,
        },
    )
    .await
    .unwrap();
}

fn entity_req(
    sc: &Scope,
    name: &str,
    entity_type: &str,
    description: Option<&str>,
) -> EntityRequest {
    EntityRequest {
        scope: sc.clone(),
        name: name.into(),
        entity_type: entity_type.into(),
        subtype: None,
        description: description.map(str::to_string),
        aliases: vec![],
        trust_origin: None,
    }
}

fn rel_req(sc: &Scope, source: &str, rel: &str, target: &str) -> RelationshipRequest {
    RelationshipRequest {
        scope: sc.clone(),
        source_id: source.into(),
        target_id: target.into(),
        relationship_type: rel.into(),
        properties: None,
        trust_origin: None,
    }
}

fn merge_req(sc: &Scope, source: &str, target: &str) -> MergeRequest {
    MergeRequest {
        scope: sc.clone(),
        source_id: source.into(),
        target_id: target.into(),
        canonical_name: None,
    }
}

fn step_req(sc: &Scope, thought: &str) -> StepRequest {
    StepRequest {
        scope: sc.clone(),
        thought: Some(thought.into()),
        action: None,
        observation: None,
        step_number: None,
    }
}

fn call_req(
    sc: &Scope,
    tool: &str,
    status: ToolStatus,
    duration_ms: Option<u64>,
) -> ToolCallRequest {
    ToolCallRequest {
        scope: sc.clone(),
        tool_name: tool.into(),
        arguments: Some(serde_json::json!({"q": tool})),
        result: None,
        status: Some(status),
        duration_ms,
        error: None,
        call_number: None,
    }
}

async fn start(e: &Engine, sc: &Scope, task: &str) -> String {
    e.start_trace(
        &LOCAL,
        TraceRequest {
            scope: sc.clone(),
            task: task.into(),
            trace_key: None,
        },
    )
    .await
    .unwrap()
    .id
}

async fn complete(e: &Engine, sc: &Scope, trace: &str, success: Option<bool>) {
    e.complete_trace(
        &LOCAL,
        trace,
        CompleteTraceRequest {
            scope: sc.clone(),
            outcome: success.map(|ok| if ok { "done".into() } else { "gave up".into() }),
            success,
        },
    )
    .await
    .unwrap();
}

/// Records one message per text in conversation `conv`; answers their refs.
async fn messages(e: &Arc<Engine>, sc: &Scope, conv: &str, texts: &[&str]) -> Vec<String> {
    let batch: Vec<KeyedMessage> = texts
        .iter()
        .map(|t| {
            KeyedMessage::from(MessageInput {
                conversation_id: conv.into(),
                role: Role::User,
                content: (*t).into(),
                ts: None,
                turn_id: None,
                speaker: None,
                metadata: None,
            })
        })
        .collect();
    e.record_messages(&LOCAL, sc, batch)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.reference)
        .collect()
}

async fn facts(e: &Engine, p: &Partition, query: FactQuery) -> Vec<Fact> {
    e.list_facts(&LOCAL, p, query, PageRequest::ALL)
        .await
        .unwrap()
        .items
}

async fn conflicts(e: &Engine, p: &Partition) -> Vec<FactConflict> {
    e.fact_conflicts(&LOCAL, p, PageRequest::ALL)
        .await
        .unwrap()
        .items
}

fn ids<'a>(facts: impl IntoIterator<Item = &'a Fact>) -> BTreeSet<String> {
    facts.into_iter().map(|f| f.id.clone()).collect()
}

fn history() -> FactQuery {
    FactQuery {
        history: true,
        ..FactQuery::default()
    }
}

fn about(subject: &str) -> FactQuery {
    FactQuery {
        subject: Some(subject.into()),
        ..FactQuery::default()
    }
}

fn is_not_found<T: std::fmt::Debug>(r: Result<T, ServiceError>) -> bool {
    matches!(r, Err(ServiceError::NotFound(_)))
}

// ---- 1. supersession and conflicts --------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn undeclared_predicates_conflict_and_supersede_on_request() {
    let env = open();
    let e = &env.engine;
    let sc = scope("acme", "alice");
    let p = sc.partition();

    // An undeclared predicate: a second object stands beside the first as an open conflict.
    let acme = add_fact(e, &sc, "Alice", "works at", "Acme").await;
    assert!(acme.conflicts_with.is_empty() && acme.superseded.is_empty());
    let beta = add_fact(e, &sc, "alice", "WORKS_AT", "Beta").await;
    assert_eq!(beta.conflicts_with, vec![acme.fact.id.clone()]);
    assert!(beta.superseded.is_empty());
    let current = facts(e, &p, about("Alice")).await;
    assert_eq!(ids(&current), ids([&acme.fact, &beta.fact]));
    let open = conflicts(e, &p).await;
    assert_eq!(open.len(), 1, "{open:?}");
    assert_eq!(open[0].subject, "alice");
    assert_eq!(open[0].predicate, "works_at");
    assert_eq!(ids(&open[0].facts), ids([&acme.fact, &beta.fact]));

    // `supersede` replaces both current objects.
    let mut req = fact_req(&sc, "Alice", "works_at", "Gamma");
    req.supersede = true;
    let gamma = e.add_fact(&LOCAL, req).await.unwrap();
    let replaced: BTreeSet<String> = gamma.superseded.iter().cloned().collect();
    assert_eq!(replaced, ids([&acme.fact, &beta.fact]));
    assert!(gamma.conflicts_with.is_empty());
    assert_eq!(
        gamma
            .fact
            .supersedes
            .iter()
            .cloned()
            .collect::<BTreeSet<_>>(),
        replaced
    );
    for old in [&acme.fact.id, &beta.fact.id] {
        let f = e.get_fact(&LOCAL, &p, old).await.unwrap();
        assert_eq!(f.status, FactStatus::Superseded);
        assert_eq!(f.superseded_by.as_deref(), Some(gamma.fact.id.as_str()));
        let until = f.valid_until.expect("a superseded fact's window is closed");
        assert!(until <= now());
    }
    let current = facts(e, &p, about("Alice")).await;
    assert_eq!(ids(&current), ids([&gamma.fact]));
    let all = facts(e, &p, history()).await;
    assert_eq!(all.len(), 3, "history keeps superseded facts");
    assert!(conflicts(e, &p).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn declared_predicates_supersede_or_coexist() {
    let env = open();
    let e = &env.engine;
    let sc = scope("acme", "alice");
    let p = sc.partition();
    declare(e, &sc, "Lives in", Cardinality::Single).await;
    declare(e, &sc, "likes", Cardinality::Multi).await;
    let names: Vec<String> = e
        .list_predicates(&LOCAL, &p, PageRequest::ALL)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["likes", "lives_in"]);

    // Single-valued: the new object supersedes without being asked to.
    let paris = add_fact(e, &sc, "Bob", "lives_in", "Paris").await;
    let rome = add_fact(e, &sc, "Bob", "LIVES-IN", "Rome").await;
    assert_eq!(rome.superseded, vec![paris.fact.id.clone()]);
    assert!(rome.conflicts_with.is_empty());
    let old = e.get_fact(&LOCAL, &p, &paris.fact.id).await.unwrap();
    assert_eq!(old.status, FactStatus::Superseded);
    assert_eq!(old.superseded_by.as_deref(), Some(rome.fact.id.as_str()));

    // Multi-valued: objects stand side by side, no conflict.
    let tea = add_fact(e, &sc, "Bob", "likes", "tea").await;
    let coffee = add_fact(e, &sc, "Bob", "likes", "coffee").await;
    assert!(coffee.conflicts_with.is_empty() && coffee.superseded.is_empty());
    let likes = facts(
        e,
        &p,
        FactQuery {
            subject: Some("bob".into()),
            predicate: Some("Likes".into()),
            ..FactQuery::default()
        },
    )
    .await;
    assert_eq!(ids(&likes), ids([&tea.fact, &coffee.fact]));
    assert!(conflicts(e, &p).await.is_empty());

    // Re-asserting the superseded object makes it current again, and (single-valued) it
    // supersedes the one that replaced it: the latest write is what holds.
    let again = add_fact(e, &sc, "Bob", "lives in", "Paris").await;
    assert_eq!(again.fact.id, paris.fact.id);
    assert_eq!(again.fact.status, FactStatus::Current);
    assert_eq!(again.fact.superseded_by, None);
    assert_eq!(
        again.fact.valid_until, None,
        "its closed window is reopened"
    );
    assert_eq!(again.superseded, vec![rome.fact.id.clone()]);
    let lives = facts(
        e,
        &p,
        FactQuery {
            predicate: Some("lives_in".into()),
            ..FactQuery::default()
        },
    )
    .await;
    assert_eq!(ids(&lives), ids([&again.fact]));
    assert_eq!(
        e.get_fact(&LOCAL, &p, &rome.fact.id).await.unwrap().status,
        FactStatus::Superseded
    );

    // Facts written before their predicate was declared single-valued stay in conflict
    // until one is superseded: listed as such (recall shows them alike).
    add_fact(e, &sc, "Carl", "employer", "Acme").await;
    add_fact(e, &sc, "Carl", "employer", "Beta").await;
    declare(e, &sc, "employer", Cardinality::Single).await;
    let open = conflicts(e, &p).await;
    assert_eq!(open.len(), 1, "{open:?}");
    assert_eq!(
        (open[0].subject.as_str(), open[0].predicate.as_str()),
        ("carl", "employer")
    );
    let gamma = add_fact(e, &sc, "Carl", "employer", "Gamma").await;
    assert_eq!(gamma.superseded.len(), 2);
    assert!(conflicts(e, &p).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_triple_is_one_fact_and_a_superseded_one_can_come_back() {
    let env = open();
    let e = &env.engine;
    let sc = scope("acme", "alice");
    let p = sc.partition();
    let refs = messages(
        e,
        &sc,
        "c1",
        &[
            "Alice said she works at Acme.",
            "HR confirmed Alice is at Acme.",
        ],
    )
    .await;

    let mut req = fact_req(&sc, "Alice", "works_at", "Acme");
    req.evidence_refs = vec![refs[0].clone()];
    let first = e.add_fact(&LOCAL, req).await.unwrap();
    // Case and spacing of the triple do not make another fact; evidence accumulates.
    let mut req = fact_req(&sc, " alice ", "Works At", "ACME");
    req.evidence_refs = vec![refs[1].clone(), refs[0].clone()];
    let second = e.add_fact(&LOCAL, req).await.unwrap();
    assert_eq!(second.fact.id, first.fact.id);
    assert_eq!(second.fact.created_at, first.fact.created_at);
    let evidence: Vec<String> = second
        .fact
        .evidence_refs
        .iter()
        .map(|r| r.to_string())
        .collect();
    let want: BTreeSet<String> = refs.iter().cloned().collect();
    assert_eq!(evidence.iter().cloned().collect::<BTreeSet<_>>(), want);
    assert_eq!(evidence.len(), 2, "evidence is not duplicated");
    // A third write with nothing new changes nothing.
    let third = add_fact(e, &sc, "Alice", "works_at", "Acme").await;
    assert_eq!(third.fact, second.fact);
    assert_eq!(facts(e, &p, history()).await.len(), 1);

    // Superseded, then asserted again without `supersede` (undeclared predicate): current
    // again, beside the fact that replaced it: an open conflict the caller must resolve.
    let mut req = fact_req(&sc, "Alice", "works_at", "Beta");
    req.supersede = true;
    let beta = e.add_fact(&LOCAL, req).await.unwrap();
    assert_eq!(beta.superseded, vec![first.fact.id.clone()]);
    let back = add_fact(e, &sc, "Alice", "works_at", "Acme").await;
    assert_eq!(back.fact.id, first.fact.id);
    assert_eq!(back.fact.status, FactStatus::Current);
    assert_eq!(back.fact.superseded_by, None);
    assert_eq!(back.fact.valid_until, None);
    assert_eq!(back.conflicts_with, vec![beta.fact.id.clone()]);
    assert_eq!(back.fact.evidence_refs.len(), 2, "its evidence is kept");
    let current = facts(e, &p, FactQuery::default()).await;
    assert_eq!(ids(&current), ids([&back.fact, &beta.fact]));
    assert_eq!(conflicts(e, &p).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn fact_requests_are_validated() {
    let env = open();
    let e = &env.engine;
    let sc = scope("acme", "alice");
    let bad = |f: fn(&mut FactRequest)| {
        let mut req = fact_req(&sc, "Alice", "works_at", "Acme");
        f(&mut req);
        req
    };
    for req in [
        bad(|r| r.subject = " ".into()),
        bad(|r| r.predicate = "--".into()),
        bad(|r| r.confidence = Some(1.5)),
        bad(|r| r.evidence_refs = vec!["ent:00000000-0000-0000-0000-000000000000".into()]),
    ] {
        assert!(
            matches!(
                e.add_fact(&LOCAL, req).await,
                Err(ServiceError::InvalidRequest(_))
            ),
            "refused as invalid"
        );
    }
    let mut req = fact_req(&sc, "Alice", "works_at", "Acme");
    req.evidence_refs = vec!["msg:nowhere/3".into()];
    assert!(matches!(
        e.add_fact(&LOCAL, req).await,
        Err(ServiceError::EvidenceNotFound(_))
    ));
}

// ---- 2. validity windows ------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn validity_windows_decide_what_holds_and_what_conflicts() {
    let env = open();
    let e = &env.engine;
    let sc = scope("acme", "alice");
    let p = sc.partition();
    let t = now();

    let mut req = fact_req(&sc, "Carol", "works_at", "Initech");
    req.valid_from = Some((t - 10 * DAY).into());
    req.valid_until = Some((t - 5 * DAY).into());
    let old = e.add_fact(&LOCAL, req).await.unwrap();
    assert!(facts(e, &p, FactQuery::default()).await.is_empty());
    assert_eq!(ids(&facts(e, &p, history()).await), ids([&old.fact]));
    let at = |ms: i64| FactQuery {
        at: Some(ms),
        ..FactQuery::default()
    };
    assert_eq!(ids(&facts(e, &p, at(t - 7 * DAY)).await), ids([&old.fact]));
    assert!(facts(e, &p, at(t - 11 * DAY)).await.is_empty());
    assert!(
        facts(e, &p, at(t - 5 * DAY)).await.is_empty(),
        "valid_until is exclusive"
    );

    // The next job starts where the last ended: disjoint windows, no conflict.
    let mut req = fact_req(&sc, "Carol", "works_at", "Globex");
    req.valid_from = Some((t - 5 * DAY).into());
    let new = e.add_fact(&LOCAL, req).await.unwrap();
    assert!(new.conflicts_with.is_empty() && new.superseded.is_empty());
    assert!(conflicts(e, &p).await.is_empty());
    assert_eq!(
        ids(&facts(e, &p, FactQuery::default()).await),
        ids([&new.fact])
    );
    assert_eq!(
        e.get_fact(&LOCAL, &p, &old.fact.id).await.unwrap().status,
        FactStatus::Current,
        "an expired fact is history by its window, not superseded"
    );

    // An overlapping window does conflict.
    let mut req = fact_req(&sc, "Carol", "works_at", "Hooli");
    req.valid_from = Some((t - 6 * DAY).into());
    req.valid_until = Some((t - 4 * DAY).into());
    let overlap = e.add_fact(&LOCAL, req).await.unwrap();
    assert_eq!(
        overlap
            .conflicts_with
            .iter()
            .cloned()
            .collect::<BTreeSet<_>>(),
        ids([&old.fact, &new.fact])
    );

    for (from, until) in [(t, t), (t, t - 1)] {
        let mut req = fact_req(&sc, "Carol", "works_at", "Nowhere");
        req.valid_from = Some(from.into());
        req.valid_until = Some(until.into());
        assert!(matches!(
            e.add_fact(&LOCAL, req).await,
            Err(ServiceError::InvalidRequest(_))
        ));
    }
}

// ---- 3. merges ----------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn merged_entities_resolve_to_their_survivor() {
    let env = open();
    let e = &env.engine;
    let sc = scope("acme", "alice");
    let p = sc.partition();
    let robert = e
        .add_entity(&LOCAL, entity_req(&sc, "Robert Smith", "person", None))
        .await
        .unwrap();
    let bob = e
        .add_entity(
            &LOCAL,
            entity_req(&sc, "Bob Smith", "PERSON", Some("Plays the trumpet")),
        )
        .await
        .unwrap();
    let acme = e
        .add_entity(&LOCAL, entity_req(&sc, "Acme", "organization", None))
        .await
        .unwrap();
    let paris = e
        .add_entity(&LOCAL, entity_req(&sc, "Paris", "location", None))
        .await
        .unwrap();
    // One edge out of the duplicate, one into it, one between the two (dropped by the merge).
    e.add_relationship(&LOCAL, rel_req(&sc, &bob.id, "works_at", &acme.id))
        .await
        .unwrap();
    e.add_relationship(&LOCAL, rel_req(&sc, &paris.id, "home_of", &bob.id))
        .await
        .unwrap();
    e.add_relationship(&LOCAL, rel_req(&sc, &bob.id, "same_as", &robert.id))
        .await
        .unwrap();
    let jazz = add_fact(e, &sc, "Bob Smith", "likes", "jazz").await;

    let survivor = e
        .merge_entities(&LOCAL, merge_req(&sc, &bob.id, &robert.id))
        .await
        .unwrap();
    assert_eq!(survivor.id, robert.id);
    assert_eq!(survivor.aliases, vec!["Bob Smith".to_string()]);
    assert_eq!(survivor.description.as_deref(), Some("Plays the trumpet"));

    let old = e.get_entity(&LOCAL, &p, &bob.id).await.unwrap();
    assert_eq!(old.merged_into.as_deref(), Some(robert.id.as_str()));
    let by_name = e.entities_by_name(&LOCAL, &p, "BOB  smith").await.unwrap();
    assert_eq!(
        by_name.iter().map(|x| &x.id).collect::<Vec<_>>(),
        [&robert.id]
    );
    let listed = e
        .list_entities(&LOCAL, &p, None, PageRequest::ALL)
        .await
        .unwrap()
        .items;
    assert!(listed.iter().all(|x| x.id != bob.id));
    assert_eq!(listed.len(), 3);
    let found = e
        .search_entities(&LOCAL, &p, "Bob Smith trumpet player", None, 10)
        .await
        .unwrap();
    assert!(found.iter().all(|s| s.item.id != bob.id));
    assert_eq!(found.first().map(|s| &s.item.id), Some(&robert.id));

    // The edges moved; the one between the two is gone.
    let related: BTreeSet<String> = e
        .related_entities(&LOCAL, &p, &robert.id, None, None)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.entity.id)
        .collect();
    assert_eq!(related, [acme.id.clone(), paris.id.clone()].into());
    let via_old: BTreeSet<String> = e
        .related_entities(&LOCAL, &p, &bob.id, None, None)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.entity.id)
        .collect();
    assert_eq!(via_old, related, "the old id traverses from the survivor");
    assert!(e
        .list_relationships(&LOCAL, &p, Some(&bob.id), PageRequest::ALL)
        .await
        .unwrap()
        .items
        .is_empty());
    assert_eq!(
        e.list_relationships(&LOCAL, &p, None, PageRequest::ALL)
            .await
            .unwrap()
            .items
            .len(),
        2
    );

    // Idempotent; refused into itself and into a merged entity.
    let again = e
        .merge_entities(&LOCAL, merge_req(&sc, &bob.id, &robert.id))
        .await
        .unwrap();
    assert_eq!(again, survivor);
    assert!(matches!(
        e.merge_entities(&LOCAL, merge_req(&sc, &robert.id, &robert.id))
            .await,
        Err(ServiceError::InvalidRequest(_))
    ));
    assert!(matches!(
        e.merge_entities(&LOCAL, merge_req(&sc, &acme.id, &bob.id))
            .await,
        Err(ServiceError::Conflict(_))
    ));

    // Writing the merged name again answers the survivor.
    let rewritten = e
        .add_entity(&LOCAL, entity_req(&sc, "bob smith", "person", None))
        .await
        .unwrap();
    assert_eq!(rewritten.id, robert.id);
    // A relationship naming the merged id lands on the survivor.
    let r = e
        .add_relationship(&LOCAL, rel_req(&sc, &bob.id, "knows", &paris.id))
        .await
        .unwrap();
    assert_eq!(r.source_id, robert.id);

    // Facts written about the merged name are found by the survivor's name.
    let about_robert = facts(e, &p, about("Robert Smith")).await;
    assert_eq!(ids(&about_robert), ids([&jazz.fact]));

    // Merged on: the first name answers the entity at the end of the chain.
    let rob = e
        .add_entity(&LOCAL, entity_req(&sc, "R. Smith", "person", None))
        .await
        .unwrap();
    e.merge_entities(&LOCAL, merge_req(&sc, &robert.id, &rob.id))
        .await
        .unwrap();
    for name in ["Bob Smith", "Robert Smith"] {
        let got = e
            .add_entity(&LOCAL, entity_req(&sc, name, "person", None))
            .await
            .unwrap();
        assert_eq!(got.id, rob.id, "{name}");
        assert_eq!(got.merged_into, None);
        let by_name = e.entities_by_name(&LOCAL, &p, name).await.unwrap();
        assert_eq!(by_name.iter().map(|x| &x.id).collect::<Vec<_>>(), [&rob.id]);
    }
    assert_eq!(
        ids(&facts(e, &p, about("R. Smith")).await),
        ids([&jazz.fact])
    );
}

// ---- 4. the forget cascade into facts -----------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn forgetting_evidence_invalidates_or_narrows_facts() {
    let env = open();
    let e = &env.engine;
    let sc = scope("acme", "alice");
    let p = sc.partition();
    let refs = messages(
        e,
        &sc,
        "c1",
        &[
            "Alice told me she works at Acme.",
            "Alice lives in Oslo, says her badge.",
            "Alice mentioned Oslo again.",
        ],
    )
    .await;
    let with = |s: &str, pr: &str, o: &str, ev: Vec<String>| {
        let mut r = fact_req(&sc, s, pr, o);
        r.evidence_refs = ev;
        r
    };
    let only = e
        .add_fact(
            &LOCAL,
            with("Alice", "works_at", "Acme", vec![refs[0].clone()]),
        )
        .await
        .unwrap()
        .fact;
    let two = e
        .add_fact(
            &LOCAL,
            with(
                "Alice",
                "lives_in",
                "Oslo",
                vec![refs[0].clone(), refs[1].clone()],
            ),
        )
        .await
        .unwrap()
        .fact;
    // A fact resting on another fact, and one resting on it and on a message.
    let derived = e
        .add_fact(
            &LOCAL,
            with(
                "Alice",
                "commutes_to",
                "Acme",
                vec![format!("fact:{}", only.id)],
            ),
        )
        .await
        .unwrap()
        .fact;
    let mixed = e
        .add_fact(
            &LOCAL,
            with(
                "Alice",
                "badge_site",
                "Oslo",
                vec![format!("fact:{}", only.id), refs[2].clone()],
            ),
        )
        .await
        .unwrap()
        .fact;

    let report = e.delete_message(&LOCAL, &p, &refs[0], false).await.unwrap();
    assert_eq!(report.removed, vec![refs[0].clone()]);
    let invalidated: BTreeSet<String> = report.invalidated.iter().cloned().collect();
    // The fact resting only on the message, and (transitively) the one resting only on it.
    assert_eq!(
        invalidated,
        [format!("fact:{}", only.id), format!("fact:{}", derived.id)].into()
    );
    let narrowed: BTreeSet<String> = report.narrowed.iter().cloned().collect();
    assert_eq!(
        narrowed,
        [format!("fact:{}", two.id), format!("fact:{}", mixed.id)].into()
    );
    let f = e.get_fact(&LOCAL, &p, &only.id).await.unwrap();
    assert_eq!(f.status, FactStatus::Invalidated);
    assert_eq!(f.invalidated_by, vec![Ref::parse(&refs[0]).unwrap()]);
    assert_eq!(
        e.get_fact(&LOCAL, &p, &derived.id).await.unwrap().status,
        FactStatus::Invalidated
    );
    let f = e.get_fact(&LOCAL, &p, &two.id).await.unwrap();
    assert_eq!(f.status, FactStatus::Current);
    assert_eq!(f.evidence_refs, vec![Ref::parse(&refs[1]).unwrap()]);
    let f = e.get_fact(&LOCAL, &p, &mixed.id).await.unwrap();
    assert_eq!(f.status, FactStatus::Current);
    assert_eq!(f.evidence_refs, vec![Ref::parse(&refs[2]).unwrap()]);
    assert_eq!(
        ids(&facts(e, &p, FactQuery::default()).await),
        ids([&two, &mixed])
    );
    assert_eq!(facts(e, &p, history()).await.len(), 4);

    // A retry answers the receipt.
    let retry = e.delete_message(&LOCAL, &p, &refs[0], false).await.unwrap();
    assert_eq!(retry, report);

    // Hard: the invalidated facts' records (which restate the evidence) are deleted.
    let hard = e.delete_message(&LOCAL, &p, &refs[0], true).await.unwrap();
    assert!(hard.hard);
    assert!(hard.invalidated.contains(&format!("fact:{}", only.id)));
    assert!(is_not_found(e.get_fact(&LOCAL, &p, &only.id).await));
    assert!(is_not_found(e.get_fact(&LOCAL, &p, &derived.id).await));
    assert_eq!(ids(&facts(e, &p, history()).await), ids([&two, &mixed]));

    // A hard forget of the last message of a narrowed fact deletes it at once.
    let report = e.delete_message(&LOCAL, &p, &refs[1], true).await.unwrap();
    assert_eq!(report.invalidated, vec![format!("fact:{}", two.id)]);
    assert!(is_not_found(e.get_fact(&LOCAL, &p, &two.id).await));

    // An invalidated fact asserted again on new evidence is current, resting on that
    // evidence alone: the forgotten ref is not cited again, so a retry of its forget
    // leaves it alone.
    let more = messages(
        e,
        &sc,
        "c2",
        &["Alice's contract names Oslo as her residence."],
    )
    .await;
    let lone = e
        .add_fact(
            &LOCAL,
            with("Alice", "resident_of", "Oslo", vec![refs[2].clone()]),
        )
        .await
        .unwrap()
        .fact;
    let report = e.delete_message(&LOCAL, &p, &refs[2], false).await.unwrap();
    assert!(report.invalidated.contains(&format!("fact:{}", lone.id)));
    let back = e
        .add_fact(&LOCAL, with("Alice", "resident_of", "Oslo", more.clone()))
        .await
        .unwrap()
        .fact;
    assert_eq!(back.id, lone.id);
    assert_eq!(back.status, FactStatus::Current);
    assert_eq!(back.evidence_refs, vec![Ref::parse(&more[0]).unwrap()]);
    assert_eq!(
        back.invalidated_by,
        vec![Ref::parse(&refs[2]).unwrap()],
        "history kept"
    );
    let retry = e.delete_message(&LOCAL, &p, &refs[2], false).await.unwrap();
    assert_eq!(retry, report);
    assert_eq!(
        e.get_fact(&LOCAL, &p, &lone.id).await.unwrap().status,
        FactStatus::Current
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn forgetting_a_fact_invalidates_the_facts_resting_on_it() {
    let env = open();
    let e = &env.engine;
    let sc = scope("acme", "alice");
    let p = sc.partition();
    let refs = messages(e, &sc, "c1", &["Bob says he likes green tea."]).await;
    let mut req = fact_req(&sc, "Bob", "likes", "green tea");
    req.evidence_refs = refs.clone();
    let base = e.add_fact(&LOCAL, req).await.unwrap().fact;
    let mut req = fact_req(&sc, "Bob", "drinks", "tea");
    req.evidence_refs = vec![format!("fact:{}", base.id)];
    let derived = e.add_fact(&LOCAL, req).await.unwrap().fact;

    let forget = |reference: String, hard: bool| ForgetRequest {
        scope: sc.clone(),
        reference,
        hard,
    };
    let report = e
        .forget(&LOCAL, forget(format!("fact:{}", base.id), false))
        .await
        .unwrap();
    assert_eq!(report.removed, vec![format!("fact:{}", base.id)]);
    assert_eq!(report.invalidated, vec![format!("fact:{}", derived.id)]);
    assert!(is_not_found(e.get_fact(&LOCAL, &p, &base.id).await));
    let d = e.get_fact(&LOCAL, &p, &derived.id).await.unwrap();
    assert_eq!(d.status, FactStatus::Invalidated);
    assert!(facts(e, &p, FactQuery::default()).await.is_empty());
    // The message itself is untouched.
    assert_eq!(
        e.conversation(&LOCAL, &p, "c1", PageRequest::ALL)
            .await
            .unwrap()
            .items
            .len(),
        1
    );

    let retry = e
        .forget(&LOCAL, forget(format!("fact:{}", base.id), false))
        .await
        .unwrap();
    assert_eq!(retry, report);
    assert!(is_not_found(
        e.forget(
            &LOCAL,
            forget("fact:00000000-0000-0000-0000-000000000000".into(), false)
        )
        .await
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn forgetting_entities_and_traces_removes_what_hangs_on_them() {
    let env = open();
    let e = &env.engine;
    let sc = scope("acme", "alice");
    let p = sc.partition();
    let ent = |name: &'static str, t: &'static str| entity_req(&sc, name, t, None);
    let alice = e.add_entity(&LOCAL, ent("Alice", "person")).await.unwrap();
    let al = e.add_entity(&LOCAL, ent("Al", "person")).await.unwrap();
    let acme = e
        .add_entity(&LOCAL, ent("Acme", "organization"))
        .await
        .unwrap();
    let oslo = e.add_entity(&LOCAL, ent("Oslo", "location")).await.unwrap();
    e.add_relationship(&LOCAL, rel_req(&sc, &alice.id, "works_at", &acme.id))
        .await
        .unwrap();
    e.add_relationship(&LOCAL, rel_req(&sc, &oslo.id, "home_of", &alice.id))
        .await
        .unwrap();
    e.add_relationship(&LOCAL, rel_req(&sc, &acme.id, "based_in", &oslo.id))
        .await
        .unwrap();
    e.merge_entities(&LOCAL, merge_req(&sc, &al.id, &alice.id))
        .await
        .unwrap();

    let forget = |reference: String| ForgetRequest {
        scope: sc.clone(),
        reference,
        hard: false,
    };
    let report = e
        .forget(&LOCAL, forget(format!("ent:{}", alice.id)))
        .await
        .unwrap();
    assert_eq!(
        report.removed,
        vec![format!("ent:{}", alice.id), format!("ent:{}", al.id)]
    );
    assert!(is_not_found(e.get_entity(&LOCAL, &p, &alice.id).await));
    // The entity merged into it is the same one under another name: gone with it.
    assert!(is_not_found(e.get_entity(&LOCAL, &p, &al.id).await));
    assert!(e
        .entities_by_name(&LOCAL, &p, "Al")
        .await
        .unwrap()
        .is_empty());
    let rels = e
        .list_relationships(&LOCAL, &p, None, PageRequest::ALL)
        .await
        .unwrap()
        .items;
    assert_eq!(rels.len(), 1, "only the edge not touching Alice stays");
    assert_eq!(
        (rels[0].source_id.as_str(), rels[0].target_id.as_str()),
        (acme.id.as_str(), oslo.id.as_str())
    );
    let related: Vec<String> = e
        .related_entities(&LOCAL, &p, &acme.id, None, Some(3))
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.entity.id)
        .collect();
    assert_eq!(related, vec![oslo.id.clone()]);
    // Its names are free again.
    let fresh = e.add_entity(&LOCAL, ent("Al", "person")).await.unwrap();
    assert_eq!(fresh.merged_into, None);
    let retry = e
        .forget(&LOCAL, forget(format!("ent:{}", alice.id)))
        .await
        .unwrap();
    assert_eq!(retry, report);

    // A trace with steps and tool calls.
    let trace = start(e, &sc, "Find Alice's office address").await;
    for i in 0..2 {
        let step = e
            .add_step(&LOCAL, &trace, step_req(&sc, &format!("step {i}")))
            .await
            .unwrap();
        e.record_tool_call(
            &LOCAL,
            &step.id,
            call_req(&sc, "search", ToolStatus::Success, Some(5)),
        )
        .await
        .unwrap();
    }
    let other = start(e, &sc, "Another task that stays").await;
    e.add_step(&LOCAL, &other, step_req(&sc, "kept"))
        .await
        .unwrap();
    assert_eq!(
        e.get_trace(&LOCAL, &p, &trace).await.unwrap().steps.len(),
        2
    );
    let report = e
        .forget(&LOCAL, forget(format!("trace:{trace}")))
        .await
        .unwrap();
    assert_eq!(report.removed, vec![format!("trace:{trace}")]);
    assert!(is_not_found(e.get_trace(&LOCAL, &p, &trace).await));
    assert!(
        e.tool_stats(&LOCAL, &p, None).await.unwrap().is_empty(),
        "its tool calls are gone"
    );
    let left = e
        .list_traces(&LOCAL, &p, None, PageRequest::ALL)
        .await
        .unwrap()
        .items;
    assert_eq!(left.iter().map(|t| &t.id).collect::<Vec<_>>(), [&other]);
    assert_eq!(
        e.get_trace(&LOCAL, &p, &other).await.unwrap().steps.len(),
        1
    );
    let retry = e
        .forget(&LOCAL, forget(format!("trace:{trace}")))
        .await
        .unwrap();
    assert_eq!(retry, report);

    // Preferences and relationships are forgettable by their refs too.
    let pref = e
        .add_preference(
            &LOCAL,
            PreferenceRequest {
                scope: sc.clone(),
                category: "food".into(),
                preference: "No mushrooms".into(),
                context: None,
                trust_origin: None,
            },
        )
        .await
        .unwrap();
    e.forget(&LOCAL, forget(format!("pref:{}", pref.id)))
        .await
        .unwrap();
    assert!(e
        .list_preferences(&LOCAL, &p, None, PageRequest::ALL)
        .await
        .unwrap()
        .items
        .is_empty());
    e.forget(&LOCAL, forget(format!("rel:{}", rels[0].id)))
        .await
        .unwrap();
    assert!(e
        .list_relationships(&LOCAL, &p, None, PageRequest::ALL)
        .await
        .unwrap()
        .items
        .is_empty());
}

// ---- 5. tenant isolation ------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn every_kind_stays_in_its_tenant_and_user() {
    let env = open();
    let e = &env.engine;
    let a = scope("acme", "alice");
    let pa = a.partition();
    let alice = e
        .add_entity(
            &LOCAL,
            entity_req(&a, "Alice Johnson", "person", Some("Engineer at Acme")),
        )
        .await
        .unwrap();
    let acme = e
        .add_entity(&LOCAL, entity_req(&a, "Acme", "organization", None))
        .await
        .unwrap();
    e.add_relationship(&LOCAL, rel_req(&a, &alice.id, "works_at", &acme.id))
        .await
        .unwrap();
    e.add_preference(
        &LOCAL,
        PreferenceRequest {
            scope: a.clone(),
            category: "travel".into(),
            preference: "Prefers window seats".into(),
            context: None,
            trust_origin: None,
        },
    )
    .await
    .unwrap();
    let f1 = add_fact(e, &a, "Alice Johnson", "works_at", "Acme").await;
    add_fact(e, &a, "Alice Johnson", "works_at", "Globex").await;
    let trace = start(e, &a, "Book a flight to Lisbon").await;
    let step = e
        .add_step(&LOCAL, &trace, step_req(&a, "search flights"))
        .await
        .unwrap();
    e.record_tool_call(
        &LOCAL,
        &step.id,
        call_req(&a, "flights", ToolStatus::Success, Some(9)),
    )
    .await
    .unwrap();
    complete(e, &a, &trace, Some(true)).await;
    // The owner sees it all (the control for the checks below).
    assert_eq!(
        e.list_entities(&LOCAL, &pa, None, PageRequest::ALL)
            .await
            .unwrap()
            .items
            .len(),
        2
    );
    assert_eq!(
        e.fact_conflicts(&LOCAL, &pa, PageRequest::ALL)
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    assert_eq!(e.tool_stats(&LOCAL, &pa, None).await.unwrap().len(), 1);
    assert_eq!(
        e.similar_traces(&LOCAL, &pa, "flight to Lisbon", 5, false)
            .await
            .unwrap()
            .len(),
        1
    );

    for other in [scope("globex", "alice"), scope("acme", "bob")] {
        let p = other.partition();
        let who = format!("{}/{}", p.tenant, p.user);
        assert!(
            is_not_found(e.get_entity(&LOCAL, &p, &alice.id).await),
            "{who}"
        );
        assert!(e
            .entities_by_name(&LOCAL, &p, "Alice Johnson")
            .await
            .unwrap()
            .is_empty());
        assert!(e
            .search_entities(&LOCAL, &p, "Alice Johnson engineer", None, 10)
            .await
            .unwrap()
            .is_empty());
        assert!(e
            .list_entities(&LOCAL, &p, None, PageRequest::ALL)
            .await
            .unwrap()
            .items
            .is_empty());
        assert!(is_not_found(
            e.related_entities(&LOCAL, &p, &alice.id, None, None).await
        ));
        assert!(e
            .list_relationships(&LOCAL, &p, None, PageRequest::ALL)
            .await
            .unwrap()
            .items
            .is_empty());
        assert!(e
            .list_relationships(&LOCAL, &p, Some(&alice.id), PageRequest::ALL)
            .await
            .unwrap()
            .items
            .is_empty());
        assert!(e
            .search_preferences(&LOCAL, &p, "window seat", None, 10)
            .await
            .unwrap()
            .is_empty());
        assert!(e
            .list_preferences(&LOCAL, &p, None, PageRequest::ALL)
            .await
            .unwrap()
            .items
            .is_empty());
        assert!(is_not_found(e.get_fact(&LOCAL, &p, &f1.fact.id).await));
        assert!(facts(e, &p, history()).await.is_empty());
        assert!(facts(e, &p, about("Alice Johnson")).await.is_empty());
        assert!(conflicts(e, &p).await.is_empty());
        assert!(is_not_found(e.get_trace(&LOCAL, &p, &trace).await));
        assert!(e
            .list_traces(&LOCAL, &p, None, PageRequest::ALL)
            .await
            .unwrap()
            .items
            .is_empty());
        assert!(e
            .similar_traces(&LOCAL, &p, "flight to Lisbon", 5, false)
            .await
            .unwrap()
            .is_empty());
        assert!(e.tool_stats(&LOCAL, &p, None).await.unwrap().is_empty());
        // Writes naming another partition's records find nothing to attach to.
        assert!(is_not_found(
            e.add_step(&LOCAL, &trace, step_req(&other, "sneak")).await
        ));
        assert!(is_not_found(
            e.record_tool_call(
                &LOCAL,
                &step.id,
                call_req(&other, "x", ToolStatus::Success, None)
            )
            .await
        ));
        assert!(is_not_found(
            e.complete_trace(
                &LOCAL,
                &trace,
                CompleteTraceRequest {
                    scope: other.clone(),
                    outcome: None,
                    success: Some(false)
                }
            )
            .await
        ));
        assert!(is_not_found(
            e.add_relationship(&LOCAL, rel_req(&other, &alice.id, "knows", &acme.id))
                .await
        ));
        assert!(is_not_found(
            e.merge_entities(&LOCAL, merge_req(&other, &alice.id, &acme.id))
                .await
        ));
        assert!(is_not_found(
            e.forget(
                &LOCAL,
                ForgetRequest {
                    scope: other.clone(),
                    reference: format!("trace:{trace}"),
                    hard: false
                }
            )
            .await
        ));
    }
    // Nothing leaked the other way either: A's records are intact.
    assert_eq!(
        e.get_trace(&LOCAL, &pa, &trace).await.unwrap().steps.len(),
        1
    );
    assert_eq!(facts(e, &pa, FactQuery::default()).await.len(), 2);

    // An agent of another user of the same tenant is refused A's scope outright.
    let issued = e
        .issue_grant(
            &LOCAL,
            GrantRequest {
                tenant: "acme".into(),
                user: "bob".into(),
                agent: "helper".into(),
                operations: vec![],
                preset: Some(GrantPreset::Trusted),
                note: None,
                public_key: None,
            },
        )
        .await
        .unwrap();
    let agent = e
        .principal(&Auth::default(), Some(&issued.key), None)
        .await
        .unwrap();
    let own = Scope::new("acme", "bob", "kb", "helper", "s1").unwrap();
    // The control: in its own user's scope the agent may read and write.
    assert!(e
        .list_facts(
            &agent,
            &own.partition(),
            FactQuery::default(),
            PageRequest::ALL
        )
        .await
        .unwrap()
        .items
        .is_empty());
    e.add_fact(&agent, fact_req(&own, "Bob", "likes", "tea"))
        .await
        .unwrap();
    let forbidden = |r: Result<(), ServiceError>| matches!(r, Err(ServiceError::ScopeForbidden));
    let mut as_agent = a.clone();
    as_agent.agent = "helper".into();
    assert!(forbidden(
        e.get_entity(&agent, &pa, &alice.id).await.map(drop)
    ));
    assert!(forbidden(
        e.entities_by_name(&agent, &pa, "Alice Johnson")
            .await
            .map(drop)
    ));
    assert!(forbidden(
        e.list_entities(&agent, &pa, None, PageRequest::ALL)
            .await
            .map(drop)
    ));
    assert!(forbidden(
        e.related_entities(&agent, &pa, &alice.id, None, None)
            .await
            .map(drop)
    ));
    assert!(forbidden(
        e.list_preferences(&agent, &pa, None, PageRequest::ALL)
            .await
            .map(drop)
    ));
    assert!(forbidden(
        e.get_fact(&agent, &pa, &f1.fact.id).await.map(drop)
    ));
    assert!(forbidden(
        e.list_facts(&agent, &pa, history(), PageRequest::ALL)
            .await
            .map(drop)
    ));
    assert!(forbidden(
        e.fact_conflicts(&agent, &pa, PageRequest::ALL)
            .await
            .map(drop)
    ));
    assert!(forbidden(e.get_trace(&agent, &pa, &trace).await.map(drop)));
    assert!(forbidden(
        e.list_traces(&agent, &pa, None, PageRequest::ALL)
            .await
            .map(drop)
    ));
    assert!(forbidden(
        e.similar_traces(&agent, &pa, "flight", 5, false)
            .await
            .map(drop)
    ));
    assert!(forbidden(e.tool_stats(&agent, &pa, None).await.map(drop)));
    assert!(forbidden(
        e.add_fact(&agent, fact_req(&as_agent, "Alice", "likes", "x"))
            .await
            .map(drop)
    ));
    assert!(forbidden(
        e.add_step(&agent, &trace, step_req(&as_agent, "sneak"))
            .await
            .map(drop)
    ));
    assert!(forbidden(
        e.add_entity(&agent, entity_req(&as_agent, "Mallory", "person", None))
            .await
            .map(drop)
    ));
}

// ---- 6. tool statistics -------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn tool_statistics_add_up_across_traces_and_steps() {
    let env = open();
    let e = &env.engine;
    let sc = scope("acme", "alice");
    let p = sc.partition();
    use ToolStatus::*;
    let t1 = start(e, &sc, "first task").await;
    let t2 = start(e, &sc, "second task").await;
    let s1 = e.add_step(&LOCAL, &t1, step_req(&sc, "a")).await.unwrap();
    let s2 = e.add_step(&LOCAL, &t1, step_req(&sc, "b")).await.unwrap();
    let s3 = e.add_step(&LOCAL, &t2, step_req(&sc, "c")).await.unwrap();
    let calls = [
        (&s1, "search", Success, Some(100)),
        (&s1, "search", Success, Some(200)),
        (&s2, "search", Failure, Some(50)),
        (&s3, "search", Timeout, Some(1000)),
        (&s1, "fetch", Success, Some(10)),
        (&s2, "fetch", Pending, None),
        (&s3, "fetch", Cancelled, None),
        (&s3, "fetch", Error, Some(30)),
        (&s2, "calc", Success, None),
    ];
    for (step, tool, status, ms) in calls {
        e.record_tool_call(&LOCAL, &step.id, call_req(&sc, tool, status, ms))
            .await
            .unwrap();
    }
    let stats = e.tool_stats(&LOCAL, &p, None).await.unwrap();
    let want = vec![
        ToolStats {
            name: "calc".into(),
            total_calls: 1,
            successful_calls: 1,
            failed_calls: 0,
            other_calls: 0,
            success_rate: 1.0,
            avg_duration_ms: None,
            p95_duration_ms: None,
        },
        ToolStats {
            name: "fetch".into(),
            total_calls: 4,
            successful_calls: 1,
            failed_calls: 1,
            other_calls: 2,
            success_rate: 0.5,
            avg_duration_ms: Some(20.0),
            // Nearest rank of 2 values: ceil(0.95 * 2) = 2nd.
            p95_duration_ms: Some(30),
        },
        ToolStats {
            name: "search".into(),
            total_calls: 4,
            successful_calls: 2,
            failed_calls: 2,
            other_calls: 0,
            success_rate: 0.5,
            avg_duration_ms: Some(337.5),
            p95_duration_ms: Some(1000),
        },
    ];
    assert_eq!(stats, want);
    let one = e.tool_stats(&LOCAL, &p, Some("fetch")).await.unwrap();
    assert_eq!(one, vec![want[1].clone()]);
    assert!(e
        .tool_stats(&LOCAL, &p, Some("nope"))
        .await
        .unwrap()
        .is_empty());
    // Names are stored trimmed, and asked for alike.
    assert_eq!(
        e.tool_stats(&LOCAL, &p, Some(" fetch ")).await.unwrap(),
        vec![want[1].clone()]
    );

    // Calls are numbered per step and listed in order under their steps.
    let view = e.get_trace(&LOCAL, &p, &t1).await.unwrap();
    let numbers: Vec<(u32, Vec<(u32, String)>)> = view
        .steps
        .iter()
        .map(|s| {
            (
                s.step.step_number,
                s.tool_calls
                    .iter()
                    .map(|c| (c.call_number, c.tool_name.clone()))
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        numbers,
        vec![
            (
                1,
                vec![
                    (1, "search".into()),
                    (2, "search".into()),
                    (3, "fetch".into())
                ]
            ),
            (
                2,
                vec![
                    (1, "search".into()),
                    (2, "fetch".into()),
                    (3, "calc".into())
                ]
            ),
        ]
    );
}

// ---- 7. similar traces --------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn similar_traces_rank_by_task_meaning() {
    let env = open();
    let e = &env.engine;
    let sc = scope("acme", "alice");
    let p = sc.partition();
    assert!(e
        .similar_traces(&LOCAL, &p, "book a flight", 5, false)
        .await
        .unwrap()
        .is_empty());

    let flight = start(
        e,
        &sc,
        "Book a flight from Berlin to Lisbon for the conference",
    )
    .await;
    complete(e, &sc, &flight, Some(true)).await;
    let migration = start(
        e,
        &sc,
        "Fix the failing database migration in the billing service",
    )
    .await;
    complete(e, &sc, &migration, Some(true)).await;
    let poem = start(e, &sc, "Write a birthday poem for grandmother").await;
    complete(e, &sc, &poem, Some(false)).await;
    let report = start(e, &sc, "Summarize the quarterly sales report spreadsheet").await;

    let first = |q: &'static str, success_only: bool| {
        let p = p.clone();
        async move {
            e.similar_traces(&LOCAL, &p, q, 10, success_only)
                .await
                .unwrap()
        }
    };
    let hits = first("reserve plane tickets to Portugal", false).await;
    assert_eq!(hits[0].item.id, flight, "{hits:?}");
    let hits = first(
        "repair the broken schema upgrade of the payments database",
        false,
    )
    .await;
    assert_eq!(hits[0].item.id, migration, "{hits:?}");
    let hits = first("compose verses for my grandma's birthday", false).await;
    assert_eq!(hits[0].item.id, poem, "{hits:?}");
    let hits = first("condense the sales figures of the last quarter", false).await;
    assert_eq!(hits[0].item.id, report, "{hits:?}");
    assert!(
        hits.windows(2).all(|w| w[0].score >= w[1].score),
        "best first"
    );

    // Only completed, successful ones: the failed poem and the unfinished report drop out.
    let hits = first("compose verses for my grandma's birthday", true).await;
    let found: BTreeSet<&String> = hits.iter().map(|h| &h.item.id).collect();
    assert_eq!(found, [&flight, &migration].into());
    assert!(hits.iter().all(|h| h.item.success == Some(true)));

    for limit in [1, 2] {
        let hits = e
            .similar_traces(&LOCAL, &p, "book a flight", limit, false)
            .await
            .unwrap();
        assert_eq!(hits.len(), limit);
        assert_eq!(hits[0].item.id, flight);
    }
}

// ---- 8. races -----------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_never_number_alike_or_leave_two_current() {
    let env = open();
    let e = Arc::clone(&env.engine);
    let sc = scope("acme", "alice");
    let p = sc.partition();
    let trace = start(&e, &sc, "a busy task").await;

    let mut tasks = Vec::new();
    for i in 0..16 {
        let (e, sc, trace) = (Arc::clone(&e), sc.clone(), trace.clone());
        tasks.push(tokio::spawn(async move {
            e.add_step(&LOCAL, &trace, step_req(&sc, &format!("thought {i}")))
                .await
                .unwrap()
        }));
    }
    let mut steps = Vec::new();
    for t in tasks {
        steps.push(t.await.unwrap());
    }
    let mut numbers: Vec<u32> = steps.iter().map(|s| s.step_number).collect();
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=16).collect::<Vec<u32>>());
    let view = e.get_trace(&LOCAL, &p, &trace).await.unwrap();
    assert_eq!(
        view.steps
            .iter()
            .map(|s| s.step.step_number)
            .collect::<Vec<_>>(),
        (1..=16).collect::<Vec<u32>>()
    );

    let step = steps[0].id.clone();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (e, sc, step) = (Arc::clone(&e), sc.clone(), step.clone());
        tasks.push(tokio::spawn(async move {
            e.record_tool_call(
                &LOCAL,
                &step,
                call_req(&sc, "search", ToolStatus::Success, Some(i)),
            )
            .await
            .unwrap()
            .call_number
        }));
    }
    let mut numbers = Vec::new();
    for t in tasks {
        numbers.push(t.await.unwrap());
    }
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=16).collect::<Vec<u32>>());
    assert_eq!(
        e.tool_stats(&LOCAL, &p, None).await.unwrap()[0].total_calls,
        16
    );

    let mut tasks = Vec::new();
    for i in 0..8 {
        let (e, sc) = (Arc::clone(&e), sc.clone());
        tasks.push(tokio::spawn(async move {
            let mut req = fact_req(&sc, "Dana", "located_in", &format!("Room {i}"));
            req.supersede = true;
            e.add_fact(&LOCAL, req).await.unwrap()
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let current = facts(e.as_ref(), &p, about("Dana")).await;
    assert_eq!(current.len(), 1, "{current:?}");
    let all = facts(e.as_ref(), &p, history()).await;
    assert_eq!(all.len(), 8);
    for f in all.iter().filter(|f| f.id != current[0].id) {
        assert_eq!(f.status, FactStatus::Superseded);
        assert!(f.superseded_by.is_some());
    }
    assert!(conflicts(&e, &p).await.is_empty());

    // One trace key, different tasks at once: exactly one start wins, the others are told
    // the key is taken; none replaces the winner.
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (e, sc) = (Arc::clone(&e), sc.clone());
        tasks.push(tokio::spawn(async move {
            e.start_trace(
                &LOCAL,
                TraceRequest {
                    scope: sc,
                    task: format!("task number {i}"),
                    trace_key: Some("nightly-run".into()),
                },
            )
            .await
        }));
    }
    let mut won = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(trace) => won.push(trace),
            Err(ServiceError::Conflict(_)) => {}
            Err(other) => panic!("{other:?}"),
        }
    }
    assert_eq!(won.len(), 1, "{won:?}");
    let stored = e.get_trace(&LOCAL, &p, &won[0].id).await.unwrap();
    assert_eq!(stored.trace, won[0]);
}

// ---- 9. recall ----------------------------------------------------------------------------

fn refs_of(pack: &MemoryPack) -> Vec<String> {
    pack.citations
        .iter()
        .map(|c| c.reference.to_string())
        .collect()
}

async fn recall(e: &Engine, sc: &Scope, query: &str, budget: usize, history: bool) -> MemoryPack {
    let pack = e
        .recall(
            &LOCAL,
            RecallBody {
                scope: sc.clone(),
                query: query.into(),
                token_budget: Some(budget),
                filters: RecallFilters {
                    include_history: history,
                    ..RecallFilters::default()
                },
            },
        )
        .await
        .unwrap();
    assert!(
        pack.token_count <= budget,
        "{} > {budget}: {}",
        pack.token_count,
        pack.context_markdown
    );
    pack
}

#[tokio::test(flavor = "multi_thread")]
async fn recall_cites_knowledge_shows_fact_conflicts_and_hides_history() {
    let env = open();
    let e = &env.engine;
    let sc = scope("acme", "alice");
    e.ingest_text(
        &LOCAL,
        DocumentBody {
            scope: sc.clone(),
            source: "handbook.md".into(),
            text: "# Office\n\nThe Oslo office is on the fourth floor. Visitors sign in at the front desk."
                .into(),
            media_type: "text/markdown".into(),
            metadata: None,
        },
    )
    .await
    .unwrap();
    messages(
        e,
        &sc,
        "c1",
        &["Can you remind me to water the plants on Friday?"],
    )
    .await;
    let pref = e
        .add_preference(
            &LOCAL,
            PreferenceRequest {
                scope: sc.clone(),
                category: "travel".into(),
                preference: "Alice prefers a window seat on flights".into(),
                context: Some("long-haul trips".into()),
                trust_origin: None,
            },
        )
        .await
        .unwrap();
    let ent = e
        .add_entity(
            &LOCAL,
            entity_req(
                &sc,
                "Marguerite Okafor",
                "person",
                Some("Head of the Lagos design studio, mentor of the interns"),
            ),
        )
        .await
        .unwrap();
    let acme = add_fact(e, &sc, "Alice", "works_at", "Acme Corp")
        .await
        .fact;
    let globex = add_fact(e, &sc, "Alice", "works_at", "Globex").await.fact;
    let berlin = add_fact(e, &sc, "Alice", "lives_in", "Berlin").await.fact;
    let mut req = fact_req(&sc, "Alice", "lives_in", "Madrid");
    req.supersede = true;
    let madrid = e.add_fact(&LOCAL, req).await.unwrap().fact;
    let trace = start(e, &sc, "Plan the company offsite trip to Lisbon").await;
    complete(e, &sc, &trace, Some(true)).await;

    let pack = recall(e, &sc, "Where does Alice work?", 1000, false).await;
    let cited = refs_of(&pack);
    assert!(cited.contains(&format!("fact:{}", acme.id)), "{cited:?}");
    assert!(cited.contains(&format!("fact:{}", globex.id)), "{cited:?}");
    let conflict = pack
        .conflicts
        .iter()
        .find(|c| c.topic == "alice works at _")
        .unwrap_or_else(|| panic!("{:?}", pack.conflicts));
    let values: BTreeSet<&str> = conflict.sides.iter().map(|s| s.value.as_str()).collect();
    assert_eq!(values, ["Acme Corp", "Globex"].into());
    assert!(
        pack.context_markdown.contains("· fact ·"),
        "{}",
        pack.context_markdown
    );

    let pack = recall(
        e,
        &sc,
        "Which seat does Alice like on flights?",
        1000,
        false,
    )
    .await;
    assert!(
        refs_of(&pack).contains(&format!("pref:{}", pref.id)),
        "{}",
        pack.context_markdown
    );
    let pack = recall(e, &sc, "Who is Marguerite Okafor?", 1000, false).await;
    assert!(
        refs_of(&pack).contains(&format!("ent:{}", ent.id)),
        "{}",
        pack.context_markdown
    );
    let pack = recall(
        e,
        &sc,
        "How did we plan the offsite in Lisbon?",
        1000,
        false,
    )
    .await;
    assert!(
        refs_of(&pack).contains(&format!("trace:{trace}")),
        "{}",
        pack.context_markdown
    );

    // Superseded facts are history: recalled only on request.
    let pack = recall(e, &sc, "Where does Alice live?", 1000, false).await;
    let cited = refs_of(&pack);
    assert!(cited.contains(&format!("fact:{}", madrid.id)), "{cited:?}");
    assert!(!cited.contains(&format!("fact:{}", berlin.id)), "{cited:?}");
    assert!(pack.conflicts.iter().all(|c| c.topic != "alice lives in _"));
    let pack = recall(e, &sc, "Where does Alice live?", 1000, true).await;
    let cited = refs_of(&pack);
    assert!(cited.contains(&format!("fact:{}", berlin.id)), "{cited:?}");
    assert!(cited.contains(&format!("fact:{}", madrid.id)), "{cited:?}");
    // History is not a conflict with what replaced it, and reads as history.
    assert!(
        pack.conflicts.iter().all(|c| c.topic != "alice lives in _"),
        "{:?}",
        pack.conflicts
    );
    assert!(
        pack.context_markdown.contains("· fact · superseded ·"),
        "{}",
        pack.context_markdown
    );
    // The open conflict is still one with history included.
    let pack = recall(e, &sc, "Where does Alice work?", 1000, true).await;
    assert!(pack.conflicts.iter().any(|c| c.topic == "alice works at _"));

    // Small budgets hold, whatever the kinds.
    for budget in [200, 400] {
        for q in [
            "Where does Alice work?",
            "Which seat does Alice like on flights?",
            "Who is Marguerite Okafor?",
            "How did we plan the offsite in Lisbon?",
        ] {
            let pack = recall(e, &sc, q, budget, false).await;
            assert!(pack.token_count <= budget);
        }
    }
}

// ---- knowledge through the review queue --------------------------------------------------

fn proposal(sc: &Scope, knowledge: serde_json::Value, evidence: &[String]) -> CandidateRequest {
    serde_json::from_value(serde_json::json!({
        "scope": sc,
        "source_agent": "scout",
        "memory_type": knowledge["kind"],
        "content": "Morag Dunbar keeps the Skerryvore lighthouse",
        "evidence_refs": evidence,
        "confidence": 0.8,
        "knowledge": knowledge,
    }))
    .unwrap()
}

/// A third party's fact reaches knowledge only through approval, as `third_party_agent`,
/// citing the candidate's evidence; forgetting that evidence invalidates both.
#[tokio::test(flavor = "multi_thread")]
async fn proposed_knowledge_is_written_only_when_approved() {
    let env = open();
    let e = &env.engine;
    let sc = scope("acme", "alice");
    let p = sc.partition();
    let evidence = messages(
        e,
        &sc,
        "c1",
        &["Morag Dunbar has kept the Skerryvore lighthouse since 2019."],
    )
    .await;
    let fact = serde_json::json!({"kind": "fact", "subject": "Morag Dunbar",
        "predicate": "keeps", "object": "Skerryvore lighthouse"});

    // Refused up front: a kind that contradicts memory_type, a proposal no write accepts.
    let mut wrong = proposal(&sc, fact.clone(), &evidence);
    wrong.memory_type = "preference".into();
    assert!(matches!(
        e.propose(&LOCAL, wrong).await,
        Err(ServiceError::InvalidRequest(_))
    ));
    let empty = proposal(
        &sc,
        serde_json::json!({"kind": "fact", "subject": " ", "predicate": "keeps", "object": "x"}),
        &evidence,
    );
    assert!(matches!(
        e.propose(&LOCAL, empty).await,
        Err(ServiceError::InvalidRequest(_))
    ));
    let planet = proposal(
        &sc,
        serde_json::json!({"kind": "entity", "name": "Tiree", "type": "planet"}),
        &evidence,
    );
    assert!(matches!(
        e.propose(&LOCAL, planet).await,
        Err(ServiceError::InvalidRequest(_))
    ));

    let proposed = e
        .propose(&LOCAL, proposal(&sc, fact, &evidence))
        .await
        .unwrap();
    let id = proposed.candidate.candidate_id.clone();
    // Pending: nothing known yet.
    assert!(facts(e, &p, history()).await.is_empty());
    assert!(proposed.candidate.knowledge_ref.is_none());

    let approved = e
        .decide(
            &LOCAL,
            &id,
            DecisionRequest {
                scope: sc.clone(),
                note: None,
            },
            true,
        )
        .await
        .unwrap();
    let fact_ref = approved.knowledge_ref.clone().expect("knowledge_ref");
    let known = facts(e, &p, FactQuery::default()).await;
    assert_eq!(known.len(), 1);
    assert_eq!(fact_ref, format!("fact:{}", known[0].id));
    assert_eq!(
        known[0]
            .evidence_refs
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        evidence
    );
    assert!((known[0].confidence - 0.8).abs() < 1e-9);
    // Recorded as the third party's, cited so in recall.
    let pack = recall(e, &sc, "Who keeps the Skerryvore lighthouse?", 1000, false).await;
    let cite = pack
        .citations
        .iter()
        .find(|c| c.reference.to_string() == fact_ref)
        .expect("the approved fact is recalled");
    assert_eq!(
        cite.trust_origin,
        cairn_models::TrustOrigin::ThirdPartyAgent
    );
    // Approving again is a replay: the same fact, nothing new.
    let again = e
        .decide(
            &LOCAL,
            &id,
            DecisionRequest {
                scope: sc.clone(),
                note: None,
            },
            true,
        )
        .await
        .unwrap();
    assert_eq!(again.knowledge_ref.as_deref(), Some(fact_ref.as_str()));
    assert_eq!(facts(e, &p, history()).await.len(), 1);

    // Forgetting the evidence invalidates the candidate and its fact.
    let report = e
        .forget(
            &LOCAL,
            ForgetRequest {
                scope: sc.clone(),
                reference: evidence[0].clone(),
                hard: false,
            },
        )
        .await
        .unwrap();
    assert!(
        report.invalidated.contains(&format!("cand:{id}")),
        "{report:?}"
    );
    assert!(report.invalidated.contains(&fact_ref), "{report:?}");
    assert!(facts(e, &p, FactQuery::default()).await.is_empty());
    let all = facts(e, &p, history()).await;
    assert_eq!(all[0].status, FactStatus::Invalidated);

    // A rejected proposal never becomes knowledge.
    let doc = e
        .ingest_text(
            &LOCAL,
            DocumentBody {
                scope: sc.clone(),
                source: "notes.md".into(),
                text: "Ewan prefers window seats on ferries.".into(),
                media_type: "text/markdown".into(),
                metadata: None,
            },
        )
        .await
        .unwrap();
    let pref = proposal(
        &sc,
        serde_json::json!({"kind": "preference", "category": "travel", "preference": "window seats on ferries"}),
        &[format!("doc:{}", doc.doc_id)],
    );
    let cand = e
        .propose(&LOCAL, pref)
        .await
        .unwrap()
        .candidate
        .candidate_id;
    e.decide(
        &LOCAL,
        &cand,
        DecisionRequest {
            scope: sc.clone(),
            note: Some("not the user's".into()),
        },
        false,
    )
    .await
    .unwrap();
    assert!(e
        .list_preferences(&LOCAL, &p, None, PageRequest::ALL)
        .await
        .unwrap()
        .items
        .is_empty());
}

/// `counts` (`GET /v1/stats`, `cairn stats`) reports what is known now: merged entities and
/// fact history are left out.
#[tokio::test(flavor = "multi_thread")]
async fn counts_report_what_is_known_now() {
    let env = open();
    let e = &env.engine;
    let sc = scope("acme", "alice");
    let a = e
        .add_entity(&LOCAL, entity_req(&sc, "Alice Johnson", "person", None))
        .await
        .unwrap();
    let b = e
        .add_entity(&LOCAL, entity_req(&sc, "A. Johnson", "person", None))
        .await
        .unwrap();
    let acme = e
        .add_entity(&LOCAL, entity_req(&sc, "Acme", "organization", None))
        .await
        .unwrap();
    e.add_relationship(&LOCAL, rel_req(&sc, &a.id, "works_at", &acme.id))
        .await
        .unwrap();
    e.merge_entities(&LOCAL, merge_req(&sc, &b.id, &a.id))
        .await
        .unwrap();
    add_fact(e, &sc, "Alice", "lives_in", "Paris").await;
    let mut moved = fact_req(&sc, "Alice", "lives_in", "Lisbon");
    moved.supersede = true;
    e.add_fact(&LOCAL, moved).await.unwrap();
    e.add_preference(
        &LOCAL,
        PreferenceRequest {
            scope: sc.clone(),
            category: "food".into(),
            preference: "Vegetarian".into(),
            context: None,
            trust_origin: None,
        },
    )
    .await
    .unwrap();
    start(e, &sc, "Plan the offsite").await;
    let c = e.counts(&LOCAL, &sc.partition()).await.unwrap();
    assert_eq!(
        (
            c.entities,
            c.facts,
            c.preferences,
            c.relationships,
            c.traces
        ),
        (2, 1, 1, 1, 1),
        "{c:?}"
    );
    // Another user's counts see none of it.
    let other = e
        .counts(&LOCAL, &scope("acme", "bob").partition())
        .await
        .unwrap();
    assert_eq!((other.entities, other.facts, other.traces), (0, 0, 0));
}

/// The LLM-free extractor proposes names mentioned in several messages as entity
/// candidates citing those messages; nothing is known until one is approved.
#[tokio::test(flavor = "multi_thread")]
async fn suggested_entities_are_candidates_until_approved() {
    use cairn_service::suggestions::SuggestRequest;
    let env = open();
    let e = &env.engine;
    let sc = scope("acme", "alice");
    let p = sc.partition();
    let batch: Vec<KeyedMessage> = [
        (
            Some("Morag Dunbar"),
            "Thanks! The lamp at Skerryvore is out again.",
        ),
        (None, "I will tell Morag Dunbar about the Skerryvore lamp."),
        (
            Some("Morag Dunbar"),
            "Ewan can bring the spare bulb on Tuesday.",
        ),
        (None, "Great. Ewan and Morag Dunbar meet at the pier."),
        (None, "Thanks again."),
    ]
    .iter()
    .map(|(speaker, text)| {
        KeyedMessage::from(MessageInput {
            conversation_id: "c1".into(),
            role: Role::User,
            content: (*text).into(),
            ts: None,
            turn_id: None,
            speaker: speaker.map(str::to_string),
            metadata: None,
        })
    })
    .collect();
    e.record_messages(&LOCAL, &sc, batch).await.unwrap();
    let req = || SuggestRequest {
        scope: sc.clone(),
        conversation_id: None,
        min_mentions: None,
        limit: None,
    };
    let found = e.suggest_entities(&LOCAL, req()).await.unwrap();
    let names: Vec<(&str, &str, usize)> = found
        .iter()
        .map(|s| (s.name.as_str(), s.entity_type.as_str(), s.mentions))
        .collect();
    // "Thanks" and "Ewan" only start sentences (a one-word name counts mid-sentence only),
    // "Tuesday" is named once: none is proposed. A speaker's name is a person.
    assert_eq!(
        names,
        [("Morag Dunbar", "person", 2), ("Skerryvore", "other", 2)]
    );
    let morag = &found[0].candidate;
    assert_eq!(morag.status.as_str(), "pending");
    assert_eq!(morag.source_agent, "cairn-extractor");
    assert_eq!(morag.evidence_refs, ["msg:c1/1", "msg:c1/3"]);
    // Pending: nothing known yet. Running again proposes the same candidates.
    assert!(e
        .list_entities(&LOCAL, &p, None, PageRequest::ALL)
        .await
        .unwrap()
        .items
        .is_empty());
    let again = e.suggest_entities(&LOCAL, req()).await.unwrap();
    assert!(again.iter().all(|s| !s.created));
    assert_eq!(again[0].candidate.candidate_id, morag.candidate_id);

    e.decide(
        &LOCAL,
        &morag.candidate_id,
        DecisionRequest {
            scope: sc.clone(),
            note: None,
        },
        true,
    )
    .await
    .unwrap();
    let known = e
        .entities_by_name(&LOCAL, &p, "morag dunbar")
        .await
        .unwrap();
    assert_eq!(known.len(), 1);
    assert_eq!(known[0].entity_type.as_str(), "person");
    // A known name is not proposed again.
    let after = e.suggest_entities(&LOCAL, req()).await.unwrap();
    assert!(after.iter().all(|s| s.name != "Morag Dunbar"), "{after:?}");
}
