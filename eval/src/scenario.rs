//! Declarative behaviour scenarios: JSON files of steps run against a fresh store through the
//! real write and read paths, with expectations checked after each step.
//!
//! A scenario file:
//!
//! ```json
//! {
//!   "name": "conflicting statements",
//!   "description": "what it shows",
//!   "scopes": {"alex": {"tenant": "acme", "user": "alex"}},
//!   "steps": [
//!     {"op": "record_messages", "scope": "alex", "messages": [
//!        {"conversation_id": "c1", "role": "user", "content": "...", "turn_id": "t1"}],
//!      "expect": {"created": 1}},
//!     {"op": "ingest_document", "scope": "alex", "source": "kb/a.txt", "text": "...",
//!      "expect": {"status": "created", "version": 1}},
//!     {"op": "recall", "scope": "alex", "query": "...",
//!      "expect": {"coverage": "partial", "conflicts": 1, "cited_sources": ["kb/a.txt"],
//!                 "first_trust": "user_reported"}},
//!     {"op": "delete_document", "scope": "alex", "source": "kb/a.txt", "expect": {"deleted": true}},
//!     {"op": "stats", "scope": "alex", "expect": {"documents": 0, "messages": 1}}
//!   ]
//! }
//! ```
//!
//! Scopes are `cairn_models::Scope` objects (namespace, agent and session default to
//! `default`). Every field of an expectation is optional; a step with an `error`
//! expectation passes only if the operation fails with that error kind
//! (`bad_input`, `not_found`, `conflict`, `unavailable`, `internal`).
//!
//! Knowledge and reasoning memory have their own steps (`add_entity`, `add_preference`,
//! `declare_predicate`, `add_fact`, `fact_conflicts`, `list_facts`, `trace`,
//! `similar_traces`; see [`knowledge`]), which call the service's `Engine` methods. A
//! writing step may name its record (`"as": "old"`) and a later expectation refer to it as
//! `"$old"` wherever a ref is expected. `recall` runs `Engine::recall` (the operation every
//! door calls); `"filters": {"include_history": true}` recalls superseded facts too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use cairn_ingest::{catalog, DocumentInput, MediaType, MessageInput, Progress};
use cairn_models::{Coverage, ErrorKind, MemoryPack, Scope, TrustOrigin};
use cairn_recall::RecallFilters;
use cairn_service::recall::RecallBody;
use cairn_service::Principal;
use serde::{Deserialize, Serialize};

use crate::stack::{EvalEnv, Workspace};
use crate::{EvalError, Result};

pub mod knowledge;

use knowledge::Names;

/// A scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub scopes: BTreeMap<String, Scope>,
    pub steps: Vec<Step>,
    /// Expectations known to fail because of a bug elsewhere: the expectation stays as it
    /// should be, and a failure of that step matching `contains` is reported as a known bug
    /// instead of a failure. A known bug that no longer reproduces is reported as a notice.
    #[serde(default)]
    pub known_bugs: Vec<KnownBug>,
}

/// A documented bug that makes one expectation of a scenario fail.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnownBug {
    /// 1-based step number.
    pub step: usize,
    /// A substring of the failure message.
    pub contains: String,
    /// Where the bug is and what it does.
    pub bug: String,
}

/// One step.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Step {
    IngestDocument(IngestStep),
    RecordMessages(RecordStep),
    Recall(Box<RecallStep>),
    DeleteDocument(DeleteStep),
    Stats(StatsStep),
    AddEntity(knowledge::EntityStep),
    AddPreference(knowledge::PreferenceStep),
    DeclarePredicate(knowledge::PredicateStep),
    AddFact(knowledge::FactStep),
    FactConflicts(knowledge::ConflictsStep),
    ListFacts(knowledge::ListFactsStep),
    Trace(knowledge::TraceStep),
    SimilarTraces(knowledge::SimilarTracesStep),
}

impl Step {
    /// What the step does, for failure messages, and the name of its scope.
    fn describe(&self) -> (String, &String) {
        match self {
            Step::IngestDocument(s) => (format!("ingest_document {}", s.source), &s.scope),
            Step::RecordMessages(s) => {
                (format!("record_messages ({})", s.messages.len()), &s.scope)
            }
            Step::Recall(s) => (format!("recall {:?}", s.query), &s.scope),
            Step::DeleteDocument(s) => (format!("delete_document {}", s.source), &s.scope),
            Step::Stats(s) => ("stats".to_string(), &s.scope),
            Step::AddEntity(s) => (format!("add_entity {:?}", s.name), &s.scope),
            Step::AddPreference(s) => (
                format!("add_preference {}: {:?}", s.category, s.preference),
                &s.scope,
            ),
            Step::DeclarePredicate(s) => (format!("declare_predicate {}", s.predicate), &s.scope),
            Step::AddFact(s) => (
                format!("add_fact {:?} {:?} {:?}", s.subject, s.predicate, s.object),
                &s.scope,
            ),
            Step::FactConflicts(s) => ("fact_conflicts".to_string(), &s.scope),
            Step::ListFacts(s) => ("list_facts".to_string(), &s.scope),
            Step::Trace(s) => (format!("trace {:?}", s.task), &s.scope),
            Step::SimilarTraces(s) => (format!("similar_traces {:?}", s.task), &s.scope),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestStep {
    pub scope: String,
    pub source: String,
    pub text: String,
    /// `text/plain` (default) or `text/markdown`.
    #[serde(default)]
    pub media_type: Option<String>,
    #[serde(default)]
    pub expect: IngestExpect,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestExpect {
    /// `created`, `updated` or `unchanged`.
    pub status: Option<String>,
    pub version: Option<u32>,
    pub chunks: Option<u32>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordStep {
    pub scope: String,
    pub messages: Vec<MessageInput>,
    #[serde(default)]
    pub expect: RecordExpect,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordExpect {
    /// Messages newly written.
    pub created: Option<usize>,
    /// Messages recognised as already stored (replays).
    pub replayed: Option<usize>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecallStep {
    pub scope: String,
    pub query: String,
    #[serde(default)]
    pub budget: Option<usize>,
    #[serde(default)]
    pub filters: RecallFilters,
    #[serde(default)]
    pub expect: RecallExpect,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecallExpect {
    pub coverage: Option<Coverage>,
    /// The coverage is one of these.
    pub coverage_in: Option<Vec<Coverage>>,
    pub conflicts: Option<usize>,
    /// Every one of these values appears on some side of some conflict.
    #[serde(default)]
    pub conflict_values: Vec<String>,
    /// Exact number of citations.
    pub citations: Option<usize>,
    pub min_citations: Option<usize>,
    #[serde(default)]
    pub cited_sources: Vec<String>,
    #[serde(default)]
    pub not_cited_sources: Vec<String>,
    /// Refs (or `$name`s of knowledge steps) that must be cited.
    #[serde(default)]
    pub cited_refs: Vec<String>,
    #[serde(default)]
    pub not_cited_refs: Vec<String>,
    /// Refs (or `$name`s) each cited by some side of some conflict.
    #[serde(default)]
    pub conflict_refs: Vec<String>,
    /// Refs (or `$name`s) on no side of any conflict.
    #[serde(default)]
    pub not_conflict_refs: Vec<String>,
    /// Citation kinds (`chunk`, `message`, `memory`, `entity`, `preference`, `fact`,
    /// `trace`) that must each appear among the citations.
    #[serde(default)]
    pub cited_kinds: Vec<String>,
    #[serde(default)]
    pub cited_turns: Vec<String>,
    #[serde(default)]
    pub not_cited_turns: Vec<String>,
    pub first_source: Option<String>,
    pub first_turn: Option<String>,
    pub first_trust: Option<TrustOrigin>,
    /// Trust origins that must all appear among the citations.
    #[serde(default)]
    pub trust_includes: Vec<TrustOrigin>,
    /// Identifier hits of the first selected item.
    #[serde(default)]
    pub first_identifier_hits: Vec<String>,
    #[serde(default)]
    pub contains: Vec<String>,
    #[serde(default)]
    pub not_contains: Vec<String>,
    #[serde(default)]
    pub unknowns_contain: Vec<String>,
    /// No unknown mentions any of these (e.g. a word the cited items do support).
    #[serde(default)]
    pub unknowns_not_contain: Vec<String>,
    /// Exact number of unknowns.
    pub unknowns: Option<usize>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeleteStep {
    pub scope: String,
    pub source: String,
    #[serde(default)]
    pub expect: DeleteExpect,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeleteExpect {
    pub deleted: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatsStep {
    pub scope: String,
    #[serde(default)]
    pub expect: StatsExpect,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatsExpect {
    pub documents: Option<usize>,
    pub chunks: Option<usize>,
    pub messages: Option<usize>,
    pub turns: Option<usize>,
}

/// The outcome of one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioResult {
    pub file: String,
    pub name: String,
    pub description: String,
    pub passed: bool,
    pub steps: usize,
    pub failures: Vec<String>,
    /// Failures explained by a documented known bug (they do not fail the scenario).
    pub known_bugs: Vec<String>,
    /// Known bugs that did not reproduce (fixed? then remove the entry).
    pub notices: Vec<String>,
    pub seconds: f64,
}

/// Reads a scenario file.
pub fn load(path: &Path) -> Result<Scenario> {
    let text = std::fs::read_to_string(path).map_err(|e| EvalError::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| EvalError::data(path, e.to_string()))
}

/// The scenario files of a directory (`*.json`), sorted by name.
pub fn files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| EvalError::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    out.sort();
    Ok(out)
}

/// Runs every scenario of `dir`, each in a fresh store. A file that does not parse is a
/// failed scenario, not an error of the run.
pub async fn run_dir(env: &EvalEnv, dir: &Path) -> Result<Vec<ScenarioResult>> {
    let mut results = Vec::new();
    for path in files(dir)? {
        let file = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        match load(&path) {
            Ok(s) => {
                let mut r = run(env, &s).await?;
                r.file = file;
                results.push(r);
            }
            Err(e) => results.push(ScenarioResult {
                file,
                name: String::new(),
                description: String::new(),
                passed: false,
                steps: 0,
                failures: vec![e.to_string()],
                known_bugs: Vec::new(),
                notices: Vec::new(),
                seconds: 0.0,
            }),
        }
    }
    Ok(results)
}

fn check<T: PartialEq + std::fmt::Debug>(
    failures: &mut Vec<String>,
    what: &str,
    expected: Option<&T>,
    actual: &T,
) {
    if let Some(e) = expected {
        if e != actual {
            failures.push(format!("{what}: expected {e:?}, got {actual:?}"));
        }
    }
}

/// The serialized (snake_case) name of an enum value.
fn name<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Checks the expected error (by kind name) against a step's result; true when the step
/// succeeded as expected and its other expectations should be checked.
fn check_error(
    failures: &mut Vec<String>,
    expected: Option<&String>,
    result: std::result::Result<(), (ErrorKind, String)>,
) -> bool {
    match (expected, result) {
        (Some(k), Err((got, msg))) => {
            if *k != name(&got) {
                failures.push(format!("expected a {k} error, got {}: {msg}", name(&got)));
            }
            false
        }
        (Some(k), Ok(())) => {
            failures.push(format!("expected a {k} error, but the step succeeded"));
            false
        }
        (None, Err((got, msg))) => {
            failures.push(format!("unexpected {} error: {msg}", name(&got)));
            false
        }
        (None, Ok(())) => true,
    }
}

/// Runs one scenario in a fresh store.
pub async fn run(env: &EvalEnv, scenario: &Scenario) -> Result<ScenarioResult> {
    let started = Instant::now();
    let ws = Workspace::new(env, false).await?;
    let engine = Arc::clone(&ws.engine);
    let mut names = Names::new();
    let mut failures: Vec<(usize, String)> = Vec::new();
    let noop: Arc<dyn Fn(Progress) + Send + Sync> = Arc::new(|_| {});
    for (i, step) in scenario.steps.iter().enumerate() {
        let mut f: Vec<String> = Vec::new();
        let (label, scope_name) = step.describe();
        let Some(scope) = scenario.scopes.get(scope_name) else {
            failures.push((
                i + 1,
                format!("step {} ({label}): unknown scope {scope_name:?}", i + 1),
            ));
            continue;
        };
        match step {
            Step::IngestDocument(s) => {
                let media = match s.media_type.as_deref() {
                    None => MediaType::Text,
                    Some(m) => MediaType::parse(m).unwrap_or(MediaType::Text),
                };
                let out = ws
                    .ingestor
                    .ingest_documents(
                        scope,
                        vec![DocumentInput::text(s.source.clone(), s.text.clone(), media)],
                        Arc::clone(&noop),
                    )
                    .await
                    .into_iter()
                    .next();
                match out.map(|o| o.result) {
                    Some(Ok(r)) => {
                        if check_error(&mut f, s.expect.error.as_ref(), Ok(())) {
                            check(&mut f, "status", s.expect.status.as_ref(), &name(&r.status));
                            check(&mut f, "version", s.expect.version.as_ref(), &r.version);
                            check(&mut f, "chunks", s.expect.chunks.as_ref(), &r.chunks);
                        }
                    }
                    Some(Err(e)) => {
                        check_error(
                            &mut f,
                            s.expect.error.as_ref(),
                            Err((e.kind(), e.to_string())),
                        );
                    }
                    None => f.push("no outcome".into()),
                }
            }
            Step::RecordMessages(s) => {
                match ws.ingestor.record_messages(scope, s.messages.clone()).await {
                    Ok(receipts) => {
                        if check_error(&mut f, s.expect.error.as_ref(), Ok(())) {
                            let created = receipts.iter().filter(|r| r.created).count();
                            check(&mut f, "created", s.expect.created.as_ref(), &created);
                            check(
                                &mut f,
                                "replayed",
                                s.expect.replayed.as_ref(),
                                &(receipts.len() - created),
                            );
                        }
                    }
                    Err(e) => {
                        check_error(
                            &mut f,
                            s.expect.error.as_ref(),
                            Err((e.kind(), e.to_string())),
                        );
                    }
                }
            }
            Step::Recall(s) => {
                let req = RecallBody {
                    scope: scope.clone(),
                    query: s.query.clone(),
                    token_budget: s.budget,
                    filters: s.filters.clone(),
                };
                match engine.recall(&Principal::Local, req).await {
                    Ok(pack) => {
                        if check_error(&mut f, s.expect.error.as_ref(), Ok(())) {
                            check_pack(&mut f, &s.expect, &pack, &names);
                            if !f.is_empty() {
                                f.push(format!("pack:\n{}", pack.context_markdown));
                            }
                        }
                    }
                    Err(e) => {
                        check_error(
                            &mut f,
                            s.expect.error.as_ref(),
                            Err((e.kind(), e.to_string())),
                        );
                    }
                }
            }
            Step::DeleteDocument(s) => {
                let partition = scope.partition();
                let result = async {
                    let docs = catalog::list_documents(ws.store.as_ref(), &partition).await?;
                    match docs.iter().find(|d| d.source == s.source) {
                        Some(d) => Ok::<bool, cairn_ingest::IngestError>(
                            catalog::delete_document(ws.store.as_ref(), &partition, &d.doc_id)
                                .await?
                                .is_some(),
                        ),
                        None => Ok(false),
                    }
                }
                .await;
                match result {
                    Ok(deleted) => check(&mut f, "deleted", s.expect.deleted.as_ref(), &deleted),
                    Err(e) => f.push(format!("unexpected {:?} error: {e}", e.kind())),
                }
            }
            Step::Stats(s) => match catalog::stats(ws.store.as_ref(), &scope.partition()).await {
                Ok(st) => {
                    check(
                        &mut f,
                        "documents",
                        s.expect.documents.as_ref(),
                        &st.documents,
                    );
                    check(&mut f, "chunks", s.expect.chunks.as_ref(), &st.chunks);
                    check(&mut f, "messages", s.expect.messages.as_ref(), &st.messages);
                    check(&mut f, "turns", s.expect.turns.as_ref(), &st.turns);
                }
                Err(e) => f.push(format!("unexpected {:?} error: {e}", e.kind())),
            },
            Step::AddEntity(s) => {
                knowledge::add_entity(&engine, scope, s, &mut names, &mut f).await
            }
            Step::AddPreference(s) => {
                knowledge::add_preference(&engine, scope, s, &mut names, &mut f).await
            }
            Step::DeclarePredicate(s) => {
                knowledge::declare_predicate(&engine, scope, s, &mut f).await
            }
            Step::AddFact(s) => knowledge::add_fact(&engine, scope, s, &mut names, &mut f).await,
            Step::FactConflicts(s) => {
                knowledge::fact_conflicts(&engine, scope, s, &names, &mut f).await
            }
            Step::ListFacts(s) => knowledge::list_facts(&engine, scope, s, &names, &mut f).await,
            Step::Trace(s) => knowledge::trace(&engine, scope, s, &mut names, &mut f).await,
            Step::SimilarTraces(s) => {
                knowledge::similar_traces(&engine, scope, s, &names, &mut f).await
            }
        }
        // The pack dump that follows a failed recall belongs with the failures it explains.
        failures.extend(
            f.into_iter()
                .map(|m| (i + 1, format!("step {} ({label}): {m}", i + 1))),
        );
    }
    drop(engine);
    let mut known = Vec::new();
    let mut notices = Vec::new();
    for kb in &scenario.known_bugs {
        let hits: Vec<usize> = failures
            .iter()
            .enumerate()
            .filter(|(_, (step, m))| *step == kb.step && m.contains(&kb.contains))
            .map(|(i, _)| i)
            .collect();
        if hits.is_empty() {
            notices.push(format!(
                "known bug at step {} no longer reproduces ({}): remove the entry if it is fixed",
                kb.step, kb.bug
            ));
        }
        for i in hits {
            known.push(format!("{} — known bug: {}", failures[i].1, kb.bug));
        }
    }
    let explained = |step: usize, m: &str| {
        scenario
            .known_bugs
            .iter()
            .any(|kb| kb.step == step && m.contains(&kb.contains))
    };
    // A step whose only failures are known bugs also drops its pack dump.
    let steps_with_real_failures: Vec<usize> = failures
        .iter()
        .filter(|(step, m)| !explained(*step, m) && !m.contains("): pack:\n"))
        .map(|(step, _)| *step)
        .collect();
    let failures: Vec<String> = failures
        .into_iter()
        .filter(|(step, m)| {
            !explained(*step, m)
                && (!m.contains("): pack:\n") || steps_with_real_failures.contains(step))
        })
        .map(|(_, m)| m)
        .collect();
    Ok(ScenarioResult {
        file: String::new(),
        name: scenario.name.clone(),
        description: scenario.description.clone(),
        passed: failures.is_empty(),
        steps: scenario.steps.len(),
        failures,
        known_bugs: known,
        notices,
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn check_pack(f: &mut Vec<String>, e: &RecallExpect, pack: &MemoryPack, names: &Names) {
    check(f, "coverage", e.coverage.as_ref(), &pack.coverage);
    if let Some(allowed) = &e.coverage_in {
        if !allowed.contains(&pack.coverage) {
            f.push(format!(
                "coverage: expected one of {allowed:?}, got {:?}",
                pack.coverage
            ));
        }
    }
    check(f, "conflicts", e.conflicts.as_ref(), &pack.conflicts.len());
    for v in &e.conflict_values {
        let found = pack
            .conflicts
            .iter()
            .flat_map(|c| &c.sides)
            .any(|s| s.value.split(", ").any(|x| x == v) || s.value == *v);
        if !found {
            let values: Vec<&str> = pack
                .conflicts
                .iter()
                .flat_map(|c| c.sides.iter().map(|s| s.value.as_str()))
                .collect();
            f.push(format!(
                "conflict value {v:?} not found (values: {values:?})"
            ));
        }
    }
    check(f, "citations", e.citations.as_ref(), &pack.citations.len());
    if let Some(min) = e.min_citations {
        if pack.citations.len() < min {
            f.push(format!(
                "citations: expected at least {min}, got {}",
                pack.citations.len()
            ));
        }
    }
    let sources: Vec<&str> = pack.citations.iter().map(|c| c.source.as_str()).collect();
    let refs: Vec<String> = pack
        .citations
        .iter()
        .map(|c| c.reference.to_string())
        .collect();
    let refs: Vec<&str> = refs.iter().map(String::as_str).collect();
    let turns: Vec<&str> = pack
        .citations
        .iter()
        .filter_map(|c| c.turn_id.as_deref())
        .collect();
    let mut must = |what: &str, wanted: &[String], have: &[&str], present: bool| {
        for w in wanted {
            if have.contains(&w.as_str()) != present {
                f.push(format!(
                    "{what} {w:?} {} (cited: {have:?})",
                    if present { "not cited" } else { "cited" }
                ));
            }
        }
    };
    must("source", &e.cited_sources, &sources, true);
    must("source", &e.not_cited_sources, &sources, false);
    let mut unresolved = Vec::new();
    let cited_refs = knowledge::resolve_all(names, &e.cited_refs, &mut unresolved);
    let not_cited_refs = knowledge::resolve_all(names, &e.not_cited_refs, &mut unresolved);
    let conflict_refs = knowledge::resolve_all(names, &e.conflict_refs, &mut unresolved);
    let not_conflict_refs = knowledge::resolve_all(names, &e.not_conflict_refs, &mut unresolved);
    must("ref", &cited_refs, &refs, true);
    must("ref", &not_cited_refs, &refs, false);
    let kinds: Vec<&str> = pack.citations.iter().map(|c| c.kind.as_str()).collect();
    must("kind", &e.cited_kinds, &kinds, true);
    must("turn", &e.cited_turns, &turns, true);
    must("turn", &e.not_cited_turns, &turns, false);
    let first = pack.citations.first();
    if let Some(s) = &e.first_source {
        check(
            f,
            "first source",
            Some(&Some(s.as_str())),
            &first.map(|c| c.source.as_str()),
        );
    }
    if let Some(t) = &e.first_turn {
        check(
            f,
            "first turn",
            Some(&Some(t.as_str())),
            &first.and_then(|c| c.turn_id.as_deref()),
        );
    }
    if let Some(t) = &e.first_trust {
        check(
            f,
            "first trust",
            Some(&Some(*t)),
            &first.map(|c| c.trust_origin),
        );
    }
    for t in &e.trust_includes {
        if !pack.citations.iter().any(|c| c.trust_origin == *t) {
            f.push(format!("no citation with trust origin {t:?}"));
        }
    }
    if !e.first_identifier_hits.is_empty() {
        let hits = pack
            .selected_nodes
            .first()
            .map(|n| n.reason.identifier_hits.clone())
            .unwrap_or_default();
        check(
            f,
            "first identifier hits",
            Some(&e.first_identifier_hits),
            &hits,
        );
    }
    f.extend(unresolved);
    let conflicting: Vec<String> = pack
        .conflicts
        .iter()
        .flat_map(|c| &c.sides)
        .filter_map(|s| {
            pack.citations
                .iter()
                .find(|c| c.n == s.citation)
                .map(|c| c.reference.to_string())
        })
        .collect();
    let conflicting: Vec<&str> = conflicting.iter().map(String::as_str).collect();
    for r in &conflict_refs {
        if !conflicting.contains(&r.as_str()) {
            f.push(format!(
                "ref {r:?} is on no side of a conflict (sides: {conflicting:?})"
            ));
        }
    }
    for r in &not_conflict_refs {
        if conflicting.contains(&r.as_str()) {
            f.push(format!(
                "ref {r:?} is on a side of a conflict (sides: {conflicting:?})"
            ));
        }
    }
    for s in &e.contains {
        if !pack.context_markdown.contains(s.as_str()) {
            f.push(format!("markdown lacks {s:?}"));
        }
    }
    for s in &e.not_contains {
        if pack.context_markdown.contains(s.as_str()) {
            f.push(format!("markdown contains {s:?}"));
        }
    }
    for s in &e.unknowns_contain {
        if !pack.unknowns.iter().any(|u| u.contains(s.as_str())) {
            f.push(format!(
                "no unknown mentions {s:?} (unknowns: {:?})",
                pack.unknowns
            ));
        }
    }
    for s in &e.unknowns_not_contain {
        if pack.unknowns.iter().any(|u| u.contains(s.as_str())) {
            f.push(format!(
                "an unknown mentions {s:?} (unknowns: {:?})",
                pack.unknowns
            ));
        }
    }
    if let Some(n) = e.unknowns {
        if pack.unknowns.len() != n {
            f.push(format!(
                "unknowns: expected {n}, got {} ({:?}; answerability {:.3})",
                pack.unknowns.len(),
                pack.unknowns,
                pack.answerability.score
            ));
        }
    }
}

/// A plain-text summary of scenario results.
pub fn summary(results: &[ScenarioResult]) -> String {
    let mut out = String::new();
    for r in results {
        out.push_str(&format!(
            "{} {} — {} ({} steps, {:.1} s)\n",
            if r.passed { "PASS" } else { "FAIL" },
            r.file,
            r.name,
            r.steps,
            r.seconds
        ));
        for f in &r.failures {
            for (i, line) in f.lines().enumerate() {
                out.push_str(if i == 0 { "    - " } else { "      " });
                out.push_str(line);
                out.push('\n');
            }
        }
        for k in &r.known_bugs {
            out.push_str(&format!("    ~ {k}\n"));
        }
        for n in &r.notices {
            out.push_str(&format!("    ! {n}\n"));
        }
    }
    let passed = results.iter().filter(|r| r.passed).count();
    let known: usize = results.iter().map(|r| r.known_bugs.len()).sum();
    out.push_str(&format!(
        "{passed}/{} scenarios passed; {known} expectation(s) failing on documented known bugs\n",
        results.len()
    ));
    out
}
