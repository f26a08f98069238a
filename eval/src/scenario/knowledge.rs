//! Scenario steps for knowledge memory (entities, preferences, predicates, facts) and
//! reasoning memory (traces): each writes or reads through the service's own `Engine`
//! methods as the local operator, exactly as the HTTP, MCP and CLI doors do.
//!
//! A writing step may name what it wrote (`"as": "old"`); later expectations refer to it as
//! `"$old"` wherever a ref is expected (`cited_refs`, `not_cited_refs`, `conflict_refs`, the
//! fact lists below), and it stands for the record's ref (`fact:<id>`, `pref:<id>`,
//! `ent:<id>`, `trace:<id>`). A literal ref works too.
//!
//! ```json
//! {"op": "add_preference", "scope": "a", "category": "food", "preference": "vegetarian", "as": "veg"},
//! {"op": "declare_predicate", "scope": "a", "predicate": "lives_in", "cardinality": "single"},
//! {"op": "add_fact", "scope": "a", "subject": "Sam", "predicate": "works at", "object": "Acme",
//!  "valid_from": "2024-01-01T00:00:00Z", "supersede": true, "as": "acme",
//!  "expect": {"superseded": ["$old"], "conflicts_with": []}},
//! {"op": "add_entity", "scope": "a", "name": "Sam", "type": "person", "aliases": ["Sammy"],
//!  "as": "sam", "expect": {"same_as": "$sam0"}},
//! {"op": "trace", "scope": "a", "task": "...", "steps": [{"thought": "...", "action": "...",
//!  "observation": "...", "tool_calls": [{"tool_name": "grep", "duration_ms": 40}]}],
//!  "outcome": "...", "success": true, "as": "t"},
//! {"op": "fact_conflicts", "scope": "a", "expect": {"count": 1, "facts": ["$a", "$b"]}},
//! {"op": "list_facts", "scope": "a", "subject": "Sam", "history": true,
//!  "expect": {"count": 2, "includes": ["$old"]}},
//! {"op": "similar_traces", "scope": "a", "task": "...", "success_only": true,
//!  "expect": {"first": "$t"}}
//! ```

use std::collections::BTreeMap;

use cairn_models::knowledge::Cardinality;
use cairn_models::Scope;
use cairn_service::knowledge::{
    EntityRequest, FactQuery, FactRequest, PredicateRequest, PreferenceRequest,
};
use cairn_service::reasoning::{RecordTraceRequest, RecordedStep};
use cairn_service::{Engine, PageRequest, Principal, ServiceError};
use serde::Deserialize;

use super::{check, check_error};

/// Names given by `"as"`, each standing for a ref.
pub(crate) type Names = BTreeMap<String, String>;

/// `"$name"` → the ref it names; anything else is a literal ref.
pub(crate) fn resolve(names: &Names, s: &str) -> Result<String, String> {
    match s.strip_prefix('$') {
        Some(n) => names
            .get(n)
            .cloned()
            .ok_or_else(|| format!("no step named {n:?} (\"as\") before this one")),
        None => Ok(s.to_string()),
    }
}

/// Resolves every entry, recording an unknown name as a failure (and dropping it).
pub(crate) fn resolve_all(names: &Names, wanted: &[String], f: &mut Vec<String>) -> Vec<String> {
    wanted
        .iter()
        .filter_map(|w| match resolve(names, w) {
            Ok(r) => Some(r),
            Err(e) => {
                f.push(e);
                None
            }
        })
        .collect()
}

fn remember(names: &mut Names, name: Option<&String>, reference: String) {
    if let Some(n) = name {
        names.insert(n.clone(), reference);
    }
}

/// Epoch ms of an RFC 3339 time.
fn epoch_ms(field: &str, v: Option<&String>, f: &mut Vec<String>) -> Option<i64> {
    let v = v?;
    match chrono::DateTime::parse_from_rfc3339(v) {
        Ok(t) => Some(t.timestamp_millis()),
        Err(e) => {
            f.push(format!("{field} {v:?} is not an RFC 3339 time: {e}"));
            None
        }
    }
}

/// The error expectation of a service call; true when it succeeded as expected.
fn outcome<T>(
    f: &mut Vec<String>,
    expected: Option<&String>,
    r: Result<T, ServiceError>,
) -> Option<T> {
    match r {
        Ok(v) => check_error(f, expected, Ok(())).then_some(v),
        Err(e) => {
            check_error(f, expected, Err((e.kind(), e.to_string())));
            None
        }
    }
}

/// Every wanted ref (resolved) is among `have` (or, with `present` false, none is).
fn must_list(
    f: &mut Vec<String>,
    what: &str,
    names: &Names,
    wanted: &[String],
    have: &[String],
    present: bool,
) {
    for w in resolve_all(names, wanted, f) {
        if have.contains(&w) != present {
            f.push(format!(
                "{what}: {w} {} (have: {have:?})",
                if present { "missing" } else { "present" }
            ));
        }
    }
}

// ---- entities ----------------------------------------------------------------------------

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntityStep {
    pub scope: String,
    pub name: String,
    /// `person`, `organization`, `location`, `event`, `object` or `other`.
    #[serde(rename = "type")]
    pub entity_type: String,
    #[serde(default)]
    pub subtype: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Names the entity (`$name` = `ent:<id>`).
    #[serde(default, rename = "as")]
    pub name_as: Option<String>,
    #[serde(default)]
    pub expect: EntityExpect,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntityExpect {
    /// The answer is this earlier entity (the same name and type is one entity).
    pub same_as: Option<String>,
    /// These aliases are among the entity's.
    #[serde(default)]
    pub aliases: Vec<String>,
    pub error: Option<String>,
}

pub(crate) async fn add_entity(
    engine: &Engine,
    scope: &Scope,
    s: &EntityStep,
    names: &mut Names,
    f: &mut Vec<String>,
) {
    let r = engine
        .add_entity(
            &Principal::Local,
            EntityRequest {
                scope: scope.clone(),
                name: s.name.clone(),
                entity_type: s.entity_type.clone(),
                subtype: s.subtype.clone(),
                description: s.description.clone(),
                aliases: s.aliases.clone(),
                trust_origin: None,
            },
        )
        .await;
    let Some(e) = outcome(f, s.expect.error.as_ref(), r) else {
        return;
    };
    let reference = format!("ent:{}", e.id);
    if let Some(same) = &s.expect.same_as {
        match resolve(names, same) {
            Ok(want) => check(f, "entity", Some(&want), &reference),
            Err(m) => f.push(m),
        }
    }
    for a in &s.expect.aliases {
        if !e.aliases.iter().any(|x| x.eq_ignore_ascii_case(a)) {
            f.push(format!("alias {a:?} missing (aliases: {:?})", e.aliases));
        }
    }
    remember(names, s.name_as.as_ref(), reference);
}

// ---- preferences -------------------------------------------------------------------------

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreferenceStep {
    pub scope: String,
    pub category: String,
    pub preference: String,
    #[serde(default)]
    pub context: Option<String>,
    /// Names the preference (`$name` = `pref:<id>`).
    #[serde(default, rename = "as")]
    pub name_as: Option<String>,
    #[serde(default)]
    pub expect: WriteExpect,
}

/// Expectations of a write with nothing else to check.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteExpect {
    /// The answer is this earlier record (an idempotent write).
    pub same_as: Option<String>,
    pub error: Option<String>,
}

pub(crate) async fn add_preference(
    engine: &Engine,
    scope: &Scope,
    s: &PreferenceStep,
    names: &mut Names,
    f: &mut Vec<String>,
) {
    let r = engine
        .add_preference(
            &Principal::Local,
            PreferenceRequest {
                scope: scope.clone(),
                category: s.category.clone(),
                preference: s.preference.clone(),
                context: s.context.clone(),
                trust_origin: None,
            },
        )
        .await;
    let Some(p) = outcome(f, s.expect.error.as_ref(), r) else {
        return;
    };
    let reference = format!("pref:{}", p.id);
    if let Some(same) = &s.expect.same_as {
        match resolve(names, same) {
            Ok(want) => check(f, "preference", Some(&want), &reference),
            Err(m) => f.push(m),
        }
    }
    remember(names, s.name_as.as_ref(), reference);
}

// ---- facts -------------------------------------------------------------------------------

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PredicateStep {
    pub scope: String,
    pub predicate: String,
    /// `single` or `multi`.
    pub cardinality: Cardinality,
    #[serde(default)]
    pub expect: WriteExpect,
}

pub(crate) async fn declare_predicate(
    engine: &Engine,
    scope: &Scope,
    s: &PredicateStep,
    f: &mut Vec<String>,
) {
    let r = engine
        .declare_predicate(
            &Principal::Local,
            PredicateRequest {
                scope: scope.clone(),
                predicate: s.predicate.clone(),
                cardinality: s.cardinality,
            },
        )
        .await;
    outcome(f, s.expect.error.as_ref(), r);
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FactStep {
    pub scope: String,
    pub subject: String,
    pub predicate: String,
    pub object: String,
    /// RFC 3339.
    #[serde(default)]
    pub valid_from: Option<String>,
    /// RFC 3339 (exclusive).
    #[serde(default)]
    pub valid_until: Option<String>,
    #[serde(default)]
    pub confidence: Option<f64>,
    /// Refs (or `$name`s) the fact rests on.
    #[serde(default)]
    pub evidence: Vec<String>,
    /// Replace the current fact(s) with the same subject and predicate.
    #[serde(default)]
    pub supersede: bool,
    /// Names the fact (`$name` = `fact:<id>`).
    #[serde(default, rename = "as")]
    pub name_as: Option<String>,
    #[serde(default)]
    pub expect: FactExpect,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FactExpect {
    /// Exactly these facts were superseded by this write (in any order).
    pub superseded: Option<Vec<String>>,
    /// Exactly these current facts now conflict with this one (in any order).
    pub conflicts_with: Option<Vec<String>>,
    /// The answer is this earlier fact (the same triple is one fact).
    pub same_as: Option<String>,
    pub error: Option<String>,
}

fn fact_refs(ids: &[String]) -> Vec<String> {
    let mut v: Vec<String> = ids.iter().map(|id| format!("fact:{id}")).collect();
    v.sort();
    v
}

pub(crate) async fn add_fact(
    engine: &Engine,
    scope: &Scope,
    s: &FactStep,
    names: &mut Names,
    f: &mut Vec<String>,
) {
    let valid_from = epoch_ms("valid_from", s.valid_from.as_ref(), f);
    let valid_until = epoch_ms("valid_until", s.valid_until.as_ref(), f);
    let evidence_refs = resolve_all(names, &s.evidence, f);
    if !f.is_empty() {
        return;
    }
    let r = engine
        .add_fact(
            &Principal::Local,
            FactRequest {
                scope: scope.clone(),
                subject: s.subject.clone(),
                predicate: s.predicate.clone(),
                object: s.object.clone(),
                valid_from: valid_from.map(Into::into),
                valid_until: valid_until.map(Into::into),
                confidence: s.confidence,
                evidence_refs,
                supersede: s.supersede,
                trust_origin: None,
            },
        )
        .await;
    let Some(o) = outcome(f, s.expect.error.as_ref(), r) else {
        return;
    };
    let reference = format!("fact:{}", o.fact.id);
    let mut exact = |what: &str, wanted: &Option<Vec<String>>, have: Vec<String>| {
        if let Some(w) = wanted {
            let mut w = resolve_all(names, w, f);
            w.sort();
            check(f, what, Some(&w), &have);
        }
    };
    exact("superseded", &s.expect.superseded, fact_refs(&o.superseded));
    exact(
        "conflicts_with",
        &s.expect.conflicts_with,
        fact_refs(&o.conflicts_with),
    );
    if let Some(same) = &s.expect.same_as {
        match resolve(names, same) {
            Ok(want) => check(f, "fact", Some(&want), &reference),
            Err(m) => f.push(m),
        }
    }
    remember(names, s.name_as.as_ref(), reference);
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConflictsStep {
    pub scope: String,
    #[serde(default)]
    pub expect: ConflictsExpect,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConflictsExpect {
    /// Open conflicts (one per subject and predicate).
    pub count: Option<usize>,
    /// Facts that are part of some open conflict.
    #[serde(default)]
    pub facts: Vec<String>,
    /// Facts that are part of none.
    #[serde(default)]
    pub not_facts: Vec<String>,
}

pub(crate) async fn fact_conflicts(
    engine: &Engine,
    scope: &Scope,
    s: &ConflictsStep,
    names: &Names,
    f: &mut Vec<String>,
) {
    let r = engine
        .fact_conflicts(&Principal::Local, &scope.partition(), PageRequest::ALL)
        .await
        .map(|p| p.items);
    let Some(conflicts) = outcome(f, None, r) else {
        return;
    };
    check(f, "conflicts", s.expect.count.as_ref(), &conflicts.len());
    let have: Vec<String> = conflicts
        .iter()
        .flat_map(|c| c.facts.iter().map(|x| format!("fact:{}", x.id)))
        .collect();
    must_list(f, "conflicting fact", names, &s.expect.facts, &have, true);
    must_list(
        f,
        "conflicting fact",
        names,
        &s.expect.not_facts,
        &have,
        false,
    );
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListFactsStep {
    pub scope: String,
    #[serde(default)]
    pub subject: Option<String>,
    #[serde(default)]
    pub predicate: Option<String>,
    /// Every fact, superseded and expired ones too.
    #[serde(default)]
    pub history: bool,
    #[serde(default)]
    pub expect: ListExpect,
}

/// Expectations of a list of records.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListExpect {
    pub count: Option<usize>,
    /// The first record (a ref or `$name`).
    pub first: Option<String>,
    #[serde(default)]
    pub includes: Vec<String>,
    #[serde(default)]
    pub excludes: Vec<String>,
    /// Substrings of the listed records' JSON, each found in some record.
    #[serde(default)]
    pub contains: Vec<String>,
    pub error: Option<String>,
}

fn check_list(
    f: &mut Vec<String>,
    names: &Names,
    e: &ListExpect,
    refs: &[String],
    texts: &[String],
) {
    check(f, "count", e.count.as_ref(), &refs.len());
    if let Some(first) = &e.first {
        match resolve(names, first) {
            Ok(want) => check(f, "first", Some(&Some(want)), &refs.first().cloned()),
            Err(m) => f.push(m),
        }
    }
    must_list(f, "listed", names, &e.includes, refs, true);
    must_list(f, "listed", names, &e.excludes, refs, false);
    for c in &e.contains {
        if !texts.iter().any(|t| t.contains(c.as_str())) {
            f.push(format!("no listed record contains {c:?}"));
        }
    }
}

pub(crate) async fn list_facts(
    engine: &Engine,
    scope: &Scope,
    s: &ListFactsStep,
    names: &Names,
    f: &mut Vec<String>,
) {
    let r = engine
        .list_facts(
            &Principal::Local,
            &scope.partition(),
            FactQuery {
                subject: s.subject.clone(),
                predicate: s.predicate.clone(),
                history: s.history,
                ..FactQuery::default()
            },
            PageRequest::ALL,
        )
        .await
        .map(|p| p.items);
    let Some(facts) = outcome(f, s.expect.error.as_ref(), r) else {
        return;
    };
    let refs: Vec<String> = facts.iter().map(|x| format!("fact:{}", x.id)).collect();
    let texts: Vec<String> = facts
        .iter()
        .map(|x| serde_json::to_string(x).unwrap_or_default())
        .collect();
    check_list(f, names, &s.expect, &refs, &texts);
}

// ---- traces ------------------------------------------------------------------------------

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceStep {
    pub scope: String,
    pub task: String,
    /// The steps with their tool calls, as MCP's `record_trace` takes them.
    #[serde(default)]
    pub steps: Vec<RecordedStep>,
    /// With `outcome` or `success` the trace is completed; without both it stays open.
    #[serde(default)]
    pub outcome: Option<String>,
    #[serde(default)]
    pub success: Option<bool>,
    /// Idempotency key: the same key again answers the same trace.
    #[serde(default)]
    pub trace_key: Option<String>,
    /// Names the trace (`$name` = `trace:<id>`).
    #[serde(default, rename = "as")]
    pub name_as: Option<String>,
    #[serde(default)]
    pub expect: WriteExpect,
}

/// Records the trace in one call, as MCP's `record_trace` does (`Engine::record_trace`:
/// steps and tool calls numbered in order, completed when told how it ended).
pub(crate) async fn trace(
    engine: &Engine,
    scope: &Scope,
    s: &TraceStep,
    names: &mut Names,
    f: &mut Vec<String>,
) {
    let run = async {
        let view = engine
            .record_trace(
                &Principal::Local,
                RecordTraceRequest {
                    scope: scope.clone(),
                    task: s.task.clone(),
                    steps: s.steps.clone(),
                    outcome: s.outcome.clone(),
                    success: s.success,
                    trace_key: s.trace_key.clone(),
                },
            )
            .await?;
        Ok::<_, ServiceError>(view.trace)
    };
    let Some(t) = outcome(f, s.expect.error.as_ref(), run.await) else {
        return;
    };
    let reference = format!("trace:{}", t.id);
    if let Some(same) = &s.expect.same_as {
        match resolve(names, same) {
            Ok(want) => check(f, "trace", Some(&want), &reference),
            Err(m) => f.push(m),
        }
    }
    remember(names, s.name_as.as_ref(), reference);
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimilarTracesStep {
    pub scope: String,
    pub task: String,
    #[serde(default)]
    pub success_only: bool,
    /// Most traces (default 5).
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub expect: ListExpect,
}

pub(crate) async fn similar_traces(
    engine: &Engine,
    scope: &Scope,
    s: &SimilarTracesStep,
    names: &Names,
    f: &mut Vec<String>,
) {
    let r = engine
        .similar_traces(
            &Principal::Local,
            &scope.partition(),
            &s.task,
            s.limit.unwrap_or(5),
            s.success_only,
        )
        .await;
    let Some(traces) = outcome(f, s.expect.error.as_ref(), r) else {
        return;
    };
    let refs: Vec<String> = traces
        .iter()
        .map(|x| format!("trace:{}", x.item.id))
        .collect();
    let texts: Vec<String> = traces
        .iter()
        .map(|x| serde_json::to_string(&x.item).unwrap_or_default())
        .collect();
    check_list(f, names, &s.expect, &refs, &texts);
}
