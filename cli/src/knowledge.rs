//! `cairn entities|facts|prefs|traces ...` and `cairn forget`: knowledge and reasoning
//! memory from the command line. Each command opens the engine on the data directory and
//! calls one `Engine` operation as the local operator (`Principal::Local`) in the scope of
//! the global scope flags, printing a short human form or, with `--json`, the service's
//! own JSON.

use anyhow::Result;
use cairn_models::knowledge::{Cardinality, Entity, Fact, FactStatus, Preference, Trace};
use cairn_models::Scope;
use cairn_service::knowledge::{
    EntityRequest, FactQuery, FactRequest, MergeRequest, PredicateRequest, PreferenceRequest,
    RelationshipRequest,
};
use cairn_service::recall::ForgetRequest;
use cairn_service::{Engine, PageRequest, Principal};
use clap::{Subcommand, ValueEnum};
use serde::Serialize;

const WHO: Principal = Principal::Local;

/// `cairn entities ...`.
#[derive(Debug, Subcommand)]
pub enum EntitiesCommand {
    /// Store an entity, or enrich the one with the same name and type (same id).
    Add {
        name: String,
        /// person, organization, location, event, object or other.
        #[arg(long = "type")]
        entity_type: String,
        #[arg(long)]
        subtype: Option<String>,
        #[arg(long)]
        description: Option<String>,
        /// Another name it is found by (repeatable).
        #[arg(long = "alias")]
        aliases: Vec<String>,
    },
    /// The scope's entities (merged ones excluded), oldest first.
    List {
        #[arg(long = "type")]
        entity_type: Option<String>,
        #[arg(long)]
        offset: Option<usize>,
        /// Default 100, at most 1000.
        #[arg(long)]
        limit: Option<usize>,
    },
    /// Entities by meaning and name; with --exact, by exact name or alias.
    Search {
        query: String,
        #[arg(long = "type")]
        entity_type: Option<String>,
        #[arg(long, default_value_t = cairn_service::knowledge::DEFAULT_SEARCH)]
        limit: usize,
        /// Exact name or alias (case-insensitive) instead of a search by meaning.
        #[arg(long)]
        exact: bool,
    },
    /// One entity by id (a merged one answers itself, with `merged_into`).
    Show { id: String },
    /// Merge SOURCE into TARGET: relationships and names move to the target.
    Merge {
        source_id: String,
        target_id: String,
        #[arg(long)]
        canonical_name: Option<String>,
    },
    /// Store a typed, directed relationship between two entities.
    Relate {
        source_id: String,
        target_id: String,
        /// The relationship type (e.g. works_at).
        relationship_type: String,
    },
    /// Propose entity candidates from the stored messages (names mentioned in several
    /// messages, not yet known): pending until approved (`POST /v1/candidates/{id}/approve`).
    Suggest {
        /// Only this conversation.
        #[arg(long)]
        conversation: Option<String>,
        /// Names mentioned in at least this many messages.
        #[arg(long, default_value_t = 2)]
        min_mentions: usize,
        /// At most this many candidates (at most 50).
        #[arg(long, default_value_t = 10)]
        limit: usize,
    },
    /// Entities reachable over relationships (either direction), nearest first.
    Related {
        id: String,
        /// Hops, 1 to 3.
        #[arg(long, default_value_t = 1)]
        depth: u32,
        /// Only relationships of this type.
        #[arg(long = "type")]
        relationship_type: Option<String>,
    },
}

/// How many objects a predicate may have per subject.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CardinalityArg {
    /// A new object supersedes the current one.
    Single,
    /// Objects stand beside each other.
    Multi,
}

/// `cairn facts ...`.
#[derive(Debug, Subcommand)]
pub enum FactsCommand {
    /// Store a fact (subject, predicate, object).
    Add {
        subject: String,
        predicate: String,
        object: String,
        /// Replace the current fact(s) with the same subject and predicate.
        #[arg(long)]
        supersede: bool,
        /// RFC 3339 time from which it holds.
        #[arg(long)]
        valid_from: Option<String>,
        /// RFC 3339 time until which it holds (exclusive).
        #[arg(long)]
        valid_until: Option<String>,
        /// A ref it rests on: doc:, msg:, evt: or fact: (repeatable).
        #[arg(long = "evidence")]
        evidence: Vec<String>,
        /// 0 to 1 (default 1).
        #[arg(long)]
        confidence: Option<f64>,
    },
    /// Facts holding now, or with --history every one (superseded, expired, invalidated).
    List {
        #[arg(long)]
        subject: Option<String>,
        #[arg(long)]
        predicate: Option<String>,
        #[arg(long)]
        history: bool,
        #[arg(long)]
        offset: Option<usize>,
        /// Default 100, at most 1000.
        #[arg(long)]
        limit: Option<usize>,
    },
    /// One fact by id (current or not).
    Show { id: String },
    /// Open conflicts: current facts with the same subject and predicate, different
    /// objects and overlapping validity.
    Conflicts,
    /// Declare a predicate single-valued (a new object supersedes) or multi-valued.
    Declare {
        predicate: String,
        #[arg(value_enum)]
        cardinality: CardinalityArg,
    },
}

/// `cairn prefs ...`.
#[derive(Debug, Subcommand)]
pub enum PrefsCommand {
    /// Store a preference.
    Add {
        category: String,
        preference: String,
        #[arg(long)]
        context: Option<String>,
    },
    /// The scope's preferences, oldest first.
    List {
        #[arg(long)]
        category: Option<String>,
        #[arg(long)]
        offset: Option<usize>,
        /// Default 100, at most 1000.
        #[arg(long)]
        limit: Option<usize>,
    },
    /// Preferences by meaning.
    Search {
        query: String,
        #[arg(long)]
        category: Option<String>,
        #[arg(long, default_value_t = cairn_service::knowledge::DEFAULT_SEARCH)]
        limit: usize,
    },
}

/// `cairn traces ...`.
#[derive(Debug, Subcommand)]
pub enum TracesCommand {
    /// Traces, most recently started first: of the session given by --session (or
    /// CAIRN_SESSION), else of every session.
    List {
        #[arg(long)]
        offset: Option<usize>,
        /// Default 100, at most 1000.
        #[arg(long)]
        limit: Option<usize>,
    },
    /// A trace with its steps and tool calls.
    Show { id: String },
    /// Per tool: calls, successes, failures, success rate, mean and p95 duration.
    Stats {
        #[arg(long)]
        tool: Option<String>,
    },
    /// Past traces whose task means something like TASK, most similar first.
    Similar {
        task: String,
        /// Only traces completed successfully.
        #[arg(long)]
        success_only: bool,
        #[arg(long, default_value_t = cairn_service::knowledge::DEFAULT_SEARCH)]
        limit: usize,
    },
}

/// An id given bare or as its ref (`ent:<id>`, `fact:<id>`, `trace:<id>`).
fn bare<'a>(prefix: &str, id: &'a str) -> &'a str {
    id.strip_prefix(prefix)
        .and_then(|r| r.strip_prefix(':'))
        .unwrap_or(id)
}

fn epoch_ms(flag: &str, v: Option<String>) -> Result<Option<i64>> {
    v.map(|v| {
        chrono::DateTime::parse_from_rfc3339(&v)
            .map(|t| t.timestamp_millis())
            .map_err(|e| anyhow::anyhow!("{flag} {v:?} is not an RFC 3339 time: {e}"))
    })
    .transpose()
}

fn day(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M").to_string())
        .unwrap_or_else(|| ms.to_string())
}

/// Prints `value` as JSON, or the human form.
fn emit<T: Serialize>(json: bool, value: &T, human: impl FnOnce() -> String) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(value)?);
    } else {
        print!("{}", human());
    }
    Ok(())
}

fn entity_line(e: &Entity) -> String {
    let mut s = format!(
        "ent:{}  {} ({}{})",
        e.id,
        e.canonical_name.as_deref().unwrap_or(&e.name),
        e.entity_type.as_str(),
        e.subtype
            .as_deref()
            .map(|t| format!(", {t}"))
            .unwrap_or_default()
    );
    if e.canonical_name.as_ref().is_some_and(|c| *c != e.name) {
        s.push_str(&format!("  name {}", e.name));
    }
    if !e.aliases.is_empty() {
        s.push_str(&format!("  aka {}", e.aliases.join(", ")));
    }
    if let Some(m) = &e.merged_into {
        s.push_str(&format!("  (merged into ent:{m})"));
    }
    s.push('\n');
    if let Some(d) = e.description.as_deref().filter(|d| !d.trim().is_empty()) {
        s.push_str(&format!("    {d}\n"));
    }
    s
}

fn status_word(s: FactStatus) -> &'static str {
    match s {
        FactStatus::Current => "current",
        FactStatus::Superseded => "superseded",
        FactStatus::Invalidated => "invalidated",
    }
}

fn fact_line(f: &Fact) -> String {
    let mut s = format!("fact:{}  {:<11} {}", f.id, status_word(f.status), f.text());
    if f.confidence < 1.0 {
        s.push_str(&format!("  (confidence {:.2})", f.confidence));
    }
    if let Some(by) = &f.superseded_by {
        s.push_str(&format!("  (superseded by fact:{by})"));
    }
    s.push('\n');
    s
}

fn pref_line(p: &Preference) -> String {
    let mut s = format!("pref:{}  [{}] {}", p.id, p.category, p.preference);
    if let Some(c) = p.context.as_deref().filter(|c| !c.trim().is_empty()) {
        s.push_str(&format!("  (context: {c})"));
    }
    s.push('\n');
    s
}

fn trace_status(t: &Trace) -> &'static str {
    match (t.success, t.completed_at) {
        (Some(true), _) => "succeeded",
        (Some(false), _) => "failed",
        (None, Some(_)) => "completed",
        (None, None) => "in progress",
    }
}

fn trace_line(t: &Trace) -> String {
    let mut s = format!(
        "trace:{}  {}  session {}  {:<11}  {}\n",
        t.id,
        day(t.started_at),
        t.session_id,
        trace_status(t),
        t.task
    );
    if let Some(o) = &t.outcome {
        s.push_str(&format!("    outcome: {o}\n"));
    }
    s
}

fn lines<T>(items: &[T], none: &str, line: impl Fn(&T) -> String) -> String {
    if items.is_empty() {
        format!("{none}\n")
    } else {
        items.iter().map(line).collect()
    }
}

pub async fn entities(
    engine: &Engine,
    scope: &Scope,
    json: bool,
    cmd: EntitiesCommand,
) -> Result<()> {
    let partition = scope.partition();
    match cmd {
        EntitiesCommand::Add {
            name,
            entity_type,
            subtype,
            description,
            aliases,
        } => {
            let e = engine
                .add_entity(
                    &WHO,
                    EntityRequest {
                        scope: scope.clone(),
                        name,
                        entity_type,
                        subtype,
                        description,
                        aliases,
                        trust_origin: None,
                    },
                )
                .await?;
            engine.flush().await?;
            emit(json, &e, || entity_line(&e))
        }
        EntitiesCommand::List {
            entity_type,
            offset,
            limit,
        } => {
            let all = engine
                .list_entities(
                    &WHO,
                    &partition,
                    entity_type.as_deref(),
                    PageRequest::new(offset, limit),
                )
                .await?
                .items;
            emit(json, &all, || {
                lines(
                    &all,
                    &format!("no entities in {}", partition.key()),
                    entity_line,
                )
            })
        }
        EntitiesCommand::Search {
            query,
            entity_type,
            limit,
            exact,
        } => {
            if exact {
                let found = engine.entities_by_name(&WHO, &partition, &query).await?;
                emit(json, &found, || {
                    lines(&found, "no entity of that name", entity_line)
                })
            } else {
                let found = engine
                    .search_entities(&WHO, &partition, &query, entity_type.as_deref(), limit)
                    .await?;
                emit(json, &found, || {
                    lines(&found, "no entities found", |s| {
                        format!("{:.4}  {}", s.score, entity_line(&s.item))
                    })
                })
            }
        }
        EntitiesCommand::Show { id } => {
            let e = engine
                .get_entity(&WHO, &partition, bare("ent", &id))
                .await?;
            emit(json, &e, || entity_line(&e))
        }
        EntitiesCommand::Merge {
            source_id,
            target_id,
            canonical_name,
        } => {
            let e = engine
                .merge_entities(
                    &WHO,
                    MergeRequest {
                        scope: scope.clone(),
                        source_id: bare("ent", &source_id).to_string(),
                        target_id: bare("ent", &target_id).to_string(),
                        canonical_name,
                    },
                )
                .await?;
            engine.flush().await?;
            emit(json, &e, || {
                format!(
                    "merged ent:{} into\n{}",
                    bare("ent", &source_id),
                    entity_line(&e)
                )
            })
        }
        EntitiesCommand::Relate {
            source_id,
            target_id,
            relationship_type,
        } => {
            let r = engine
                .add_relationship(
                    &WHO,
                    RelationshipRequest {
                        scope: scope.clone(),
                        source_id: bare("ent", &source_id).to_string(),
                        target_id: bare("ent", &target_id).to_string(),
                        relationship_type,
                        properties: None,
                        trust_origin: None,
                    },
                )
                .await?;
            engine.flush().await?;
            emit(json, &r, || {
                format!(
                    "rel:{}  ent:{} -[{}]-> ent:{}\n",
                    r.id, r.source_id, r.relationship_type, r.target_id
                )
            })
        }
        EntitiesCommand::Suggest {
            conversation,
            min_mentions,
            limit,
        } => {
            let found = engine
                .suggest_entities(
                    &WHO,
                    cairn_service::suggestions::SuggestRequest {
                        scope: scope.clone(),
                        conversation_id: conversation,
                        min_mentions: Some(min_mentions),
                        limit: Some(limit),
                    },
                )
                .await?;
            engine.flush().await?;
            emit(json, &found, || {
                lines(&found, "no new names mentioned often enough", |s| {
                    format!(
                        "{}  {} ({}), {} mentions{}\n",
                        s.candidate.reference,
                        s.name,
                        s.entity_type.as_str(),
                        s.mentions,
                        if s.created { "" } else { " (proposed before)" }
                    )
                })
            })
        }
        EntitiesCommand::Related {
            id,
            depth,
            relationship_type,
        } => {
            let found = engine
                .related_entities(
                    &WHO,
                    &partition,
                    bare("ent", &id),
                    relationship_type.as_deref(),
                    Some(depth),
                )
                .await?;
            emit(json, &found, || {
                lines(&found, "no related entities", |r| {
                    format!(
                        "depth {}  via {}  {}",
                        r.depth,
                        r.via.relationship_type,
                        entity_line(&r.entity)
                    )
                })
            })
        }
    }
}

pub async fn facts(engine: &Engine, scope: &Scope, json: bool, cmd: FactsCommand) -> Result<()> {
    let partition = scope.partition();
    match cmd {
        FactsCommand::Add {
            subject,
            predicate,
            object,
            supersede,
            valid_from,
            valid_until,
            evidence,
            confidence,
        } => {
            let o = engine
                .add_fact(
                    &WHO,
                    FactRequest {
                        scope: scope.clone(),
                        subject,
                        predicate,
                        object,
                        valid_from: epoch_ms("--valid-from", valid_from)?.map(Into::into),
                        valid_until: epoch_ms("--valid-until", valid_until)?.map(Into::into),
                        confidence,
                        evidence_refs: evidence,
                        supersede,
                        trust_origin: None,
                    },
                )
                .await?;
            engine.flush().await?;
            emit(json, &o, || {
                let mut s = fact_line(&o.fact);
                for id in &o.superseded {
                    s.push_str(&format!("  superseded fact:{id}\n"));
                }
                for id in &o.conflicts_with {
                    s.push_str(&format!(
                        "  conflicts with fact:{id} (both stay current; see `cairn facts conflicts`)\n"
                    ));
                }
                s
            })
        }
        FactsCommand::List {
            subject,
            predicate,
            history,
            offset,
            limit,
        } => {
            let all = engine
                .list_facts(
                    &WHO,
                    &partition,
                    FactQuery {
                        subject,
                        predicate,
                        history,
                        at: None,
                    },
                    PageRequest::new(offset, limit),
                )
                .await?
                .items;
            emit(json, &all, || lines(&all, "no facts", fact_line))
        }
        FactsCommand::Show { id } => {
            let f = engine.get_fact(&WHO, &partition, bare("fact", &id)).await?;
            emit(json, &f, || {
                let mut s = fact_line(&f);
                s.push_str(&format!(
                    "    confidence {:.2}, written {}\n",
                    f.confidence,
                    day(f.created_at)
                ));
                if !f.evidence_refs.is_empty() {
                    let refs: Vec<String> = f.evidence_refs.iter().map(|r| r.to_string()).collect();
                    s.push_str(&format!("    evidence: {}\n", refs.join(", ")));
                }
                if !f.supersedes.is_empty() {
                    s.push_str(&format!(
                        "    supersedes: fact:{}\n",
                        f.supersedes.join(", fact:")
                    ));
                }
                if !f.invalidated_by.is_empty() {
                    let refs: Vec<String> =
                        f.invalidated_by.iter().map(|r| r.to_string()).collect();
                    s.push_str(&format!("    invalidated by: {}\n", refs.join(", ")));
                }
                s
            })
        }
        FactsCommand::Conflicts => {
            let all = engine
                .fact_conflicts(&WHO, &partition, PageRequest::ALL)
                .await?
                .items;
            emit(json, &all, || {
                lines(&all, "no open conflicts", |c| {
                    let mut s = format!(
                        "{} {}: {} current objects\n",
                        c.subject,
                        c.predicate,
                        c.facts.len()
                    );
                    for f in &c.facts {
                        s.push_str("  ");
                        s.push_str(&fact_line(f));
                    }
                    s
                })
            })
        }
        FactsCommand::Declare {
            predicate,
            cardinality,
        } => {
            let p = engine
                .declare_predicate(
                    &WHO,
                    PredicateRequest {
                        scope: scope.clone(),
                        predicate,
                        cardinality: match cardinality {
                            CardinalityArg::Single => Cardinality::Single,
                            CardinalityArg::Multi => Cardinality::Multi,
                        },
                    },
                )
                .await?;
            engine.flush().await?;
            emit(json, &p, || {
                format!(
                    "predicate {}: {}\n",
                    p.name,
                    match p.cardinality {
                        Cardinality::Single => "single (a new object supersedes the current one)",
                        Cardinality::Multi => "multi (objects stand beside each other)",
                    }
                )
            })
        }
    }
}

pub async fn prefs(engine: &Engine, scope: &Scope, json: bool, cmd: PrefsCommand) -> Result<()> {
    let partition = scope.partition();
    match cmd {
        PrefsCommand::Add {
            category,
            preference,
            context,
        } => {
            let p = engine
                .add_preference(
                    &WHO,
                    PreferenceRequest {
                        scope: scope.clone(),
                        category,
                        preference,
                        context,
                        trust_origin: None,
                    },
                )
                .await?;
            engine.flush().await?;
            emit(json, &p, || pref_line(&p))
        }
        PrefsCommand::List {
            category,
            offset,
            limit,
        } => {
            let all = engine
                .list_preferences(
                    &WHO,
                    &partition,
                    category.as_deref(),
                    PageRequest::new(offset, limit),
                )
                .await?
                .items;
            emit(json, &all, || lines(&all, "no preferences", pref_line))
        }
        PrefsCommand::Search {
            query,
            category,
            limit,
        } => {
            let found = engine
                .search_preferences(&WHO, &partition, &query, category.as_deref(), limit)
                .await?;
            emit(json, &found, || {
                lines(&found, "no preferences found", |s| {
                    format!("{:.4}  {}", s.score, pref_line(&s.item))
                })
            })
        }
    }
}

/// `session`: the session named by `--session` / `CAIRN_SESSION`, if any.
pub async fn traces(
    engine: &Engine,
    scope: &Scope,
    session: Option<&str>,
    json: bool,
    cmd: TracesCommand,
) -> Result<()> {
    let partition = scope.partition();
    match cmd {
        TracesCommand::List { offset, limit } => {
            let all = engine
                .list_traces(&WHO, &partition, session, PageRequest::new(offset, limit))
                .await?
                .items;
            emit(json, &all, || lines(&all, "no traces", trace_line))
        }
        TracesCommand::Show { id } => {
            let v = engine
                .get_trace(&WHO, &partition, bare("trace", &id))
                .await?;
            emit(json, &v, || {
                let mut s = trace_line(&v.trace);
                for st in &v.steps {
                    s.push_str(&format!("  step {}\n", st.step.step_number));
                    for (what, text) in [
                        ("thought", &st.step.thought),
                        ("action", &st.step.action),
                        ("observation", &st.step.observation),
                    ] {
                        if let Some(t) = text {
                            s.push_str(&format!("    {what}: {t}\n"));
                        }
                    }
                    for c in &st.tool_calls {
                        s.push_str(&format!(
                            "    tool {} {}{}{}\n",
                            c.tool_name,
                            c.status.as_str(),
                            c.duration_ms
                                .map(|d| format!(" {d} ms"))
                                .unwrap_or_default(),
                            c.error
                                .as_deref()
                                .map(|e| format!(" ({e})"))
                                .unwrap_or_default()
                        ));
                    }
                }
                s
            })
        }
        TracesCommand::Stats { tool } => {
            let all = engine.tool_stats(&WHO, &partition, tool.as_deref()).await?;
            emit(json, &all, || {
                if all.is_empty() {
                    return "no tool calls\n".to_string();
                }
                let ms = |v: Option<f64>| v.map(|v| format!("{v:.0}")).unwrap_or("-".into());
                let mut s = format!(
                    "{:<24} {:>6} {:>6} {:>6} {:>6} {:>7} {:>8} {:>8}\n",
                    "TOOL", "CALLS", "OK", "FAILED", "OTHER", "RATE", "AVG MS", "P95 MS"
                );
                for t in &all {
                    s.push_str(&format!(
                        "{:<24} {:>6} {:>6} {:>6} {:>6} {:>6.1}% {:>8} {:>8}\n",
                        t.name,
                        t.total_calls,
                        t.successful_calls,
                        t.failed_calls,
                        t.other_calls,
                        t.success_rate * 100.0,
                        ms(t.avg_duration_ms),
                        ms(t.p95_duration_ms.map(|v| v as f64)),
                    ));
                }
                s
            })
        }
        TracesCommand::Similar {
            task,
            success_only,
            limit,
        } => {
            let found = engine
                .similar_traces(&WHO, &partition, &task, limit, success_only)
                .await?;
            emit(json, &found, || {
                lines(&found, "no similar traces", |s| {
                    format!("{:.4}  {}", s.score, trace_line(&s.item))
                })
            })
        }
    }
}

/// `cairn forget <ref>`.
pub async fn forget(
    engine: &Engine,
    scope: &Scope,
    reference: String,
    hard: bool,
    json: bool,
) -> Result<()> {
    let report = engine
        .forget(
            &WHO,
            ForgetRequest {
                scope: scope.clone(),
                reference,
                hard,
            },
        )
        .await?;
    engine.flush().await?;
    emit(json, &report, || {
        let mut s = format!(
            "forgot {}{}\n",
            report.reference,
            if report.hard { " (hard)" } else { "" }
        );
        for (what, refs) in [
            ("removed", &report.removed),
            ("invalidated", &report.invalidated),
            ("narrowed", &report.narrowed),
            ("tombstoned", &report.tombstoned_turns),
        ] {
            if !refs.is_empty() {
                s.push_str(&format!("  {what}: {}\n", refs.join(", ")));
            }
        }
        s
    })
}
