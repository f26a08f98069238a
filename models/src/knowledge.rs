//! Knowledge memory and reasoning memory: the records Cairn keeps about what is *known*
//! (entities, preferences, facts, relationships) and how an agent *worked* (reasoning traces,
//! their steps and tool calls).
//!
//! Each record is one stored point whose typed body is its [`RecordState`](crate::RecordState)
//! and whose id is its point id (a UUID, printed lowercase and hyphenated). Entities,
//! preferences, facts and relationships get content-addressed ids (the same entity name and
//! type, the same triple, the same edge written twice is one record); traces get a random id
//! unless the caller gives one, steps and tool calls a position within their trace.
//!
//! The header of a knowledge point carries [`StoredPoint::keys`](crate::StoredPoint::keys):
//! prefixed lookup keys ([`key`]) that filters match exactly (an entity's names, a fact's
//! subject and predicate, a step's trace, a tool call's tool), and [`key::INACTIVE`] on
//! records recall must skip by default (superseded and invalidated facts, merged entities).

use serde::{Deserialize, Serialize};

use crate::refs::Ref;

/// The lookup keys of knowledge records: `<prefix>:<value>`, values normalized with
/// [`normalize_name`] where they are names.
pub mod key {
    /// On records recall skips unless asked (a superseded or invalidated fact, an entity
    /// merged into another).
    pub const INACTIVE: &str = "inactive";

    /// An entity's name or alias.
    pub fn name(name: &str) -> String {
        format!("name:{}", super::normalize_name(name))
    }
    /// A fact's subject and predicate.
    pub fn subject_predicate(subject: &str, predicate: &str) -> String {
        format!(
            "sp:{}|{}",
            super::normalize_name(subject),
            super::normalize_predicate(predicate)
        )
    }
    /// A fact's evidence ref.
    pub fn evidence(r: &crate::Ref) -> String {
        format!("ev:{r}")
    }
    /// A preference's category.
    pub fn category(category: &str) -> String {
        format!("cat:{}", super::normalize_name(category))
    }
    /// A relationship's or fact's end: an entity id.
    pub fn entity(id: &str) -> String {
        format!("ent:{id}")
    }
    /// A step's or tool call's trace.
    pub fn trace(id: &str) -> String {
        format!("trace:{id}")
    }
    /// A tool call's step.
    pub fn step(id: &str) -> String {
        format!("step:{id}")
    }
    /// A tool call's tool.
    pub fn tool(name: &str) -> String {
        format!("tool:{name}")
    }
    /// A completed trace's outcome: `outcome:success` or `outcome:failure`.
    pub fn outcome(success: bool) -> String {
        format!("outcome:{}", if success { "success" } else { "failure" })
    }
}

/// Case- and space-insensitive form of a name (entity names, aliases, fact subjects and
/// objects, categories): lowercased, runs of whitespace collapsed to one space, trimmed.
pub fn normalize_name(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// A predicate's canonical form: lowercased, every run of characters other than letters
/// and digits one `_` ("Works at", "WORKS_AT" and "works-at" are one predicate).
pub fn normalize_predicate(s: &str) -> String {
    let mut out = String::new();
    for c in s.trim().chars() {
        if c.is_alphanumeric() {
            out.extend(c.to_lowercase());
        } else if !out.ends_with('_') && !out.is_empty() {
            out.push('_');
        }
    }
    out.trim_end_matches('_').to_string()
}

/// The kind of an entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum EntityType {
    Person,
    Organization,
    Location,
    Event,
    Object,
    /// Anything else (say what in `subtype`).
    Other,
}

impl EntityType {
    pub const ALL: [EntityType; 6] = [
        EntityType::Person,
        EntityType::Organization,
        EntityType::Location,
        EntityType::Event,
        EntityType::Object,
        EntityType::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EntityType::Person => "person",
            EntityType::Organization => "organization",
            EntityType::Location => "location",
            EntityType::Event => "event",
            EntityType::Object => "object",
            EntityType::Other => "other",
        }
    }

    /// Parses a type name in any case (`PERSON`, `person`).
    pub fn parse(s: &str) -> Option<EntityType> {
        let s = s.trim().to_lowercase();
        EntityType::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

/// A person, organization, place, event or thing the memory knows about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Entity {
    /// A UUID (lowercase, hyphenated); the record's ref is `ent:<id>`.
    pub id: String,
    pub name: String,
    #[serde(rename = "type")]
    pub entity_type: EntityType,
    #[serde(default)]
    pub subtype: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    /// Other names it is found by (exact, case-insensitive), including the names of the
    /// entities merged into it.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// The name to show, when it differs from `name` (set by a merge).
    #[serde(default)]
    pub canonical_name: Option<String>,
    /// Set when this entity was merged into another: the survivor's id. A merged entity
    /// stays readable (its old id resolves) but is not recalled or listed.
    #[serde(default)]
    pub merged_into: Option<String>,
    /// Epoch ms.
    pub created_at: i64,
    pub updated_at: i64,
}

impl Entity {
    /// The text its vector is computed from: name, type, aliases and description.
    pub fn text(&self) -> String {
        let mut s = format!(
            "{} ({}{})",
            self.canonical_name.as_deref().unwrap_or(&self.name),
            self.entity_type.as_str(),
            self.subtype
                .as_deref()
                .map(|t| format!(", {t}"))
                .unwrap_or_default()
        );
        // The names it also goes by: its aliases and, when it shows a canonical name, its
        // name; never the name shown already.
        let shown = normalize_name(self.canonical_name.as_deref().unwrap_or(&self.name));
        let mut others: Vec<&str> = Vec::new();
        for n in std::iter::once(self.name.as_str()).chain(self.aliases.iter().map(String::as_str))
        {
            let key = normalize_name(n);
            if key != shown && !others.iter().any(|o| normalize_name(o) == key) {
                others.push(n);
            }
        }
        if !others.is_empty() {
            s.push_str(&format!(", also known as {}", others.join(", ")));
        }
        if let Some(d) = self.description.as_deref().filter(|d| !d.trim().is_empty()) {
            s.push_str(": ");
            s.push_str(d);
        }
        s
    }
}

/// A preference of the user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Preference {
    /// A UUID (lowercase, hyphenated); the record's ref is `pref:<id>`.
    pub id: String,
    pub category: String,
    pub preference: String,
    #[serde(default)]
    pub context: Option<String>,
    pub created_at: i64,
}

impl Preference {
    /// The text its vector is computed from.
    pub fn text(&self) -> String {
        match self.context.as_deref().filter(|c| !c.trim().is_empty()) {
            Some(c) => format!(
                "Preference ({}): {} (context: {c})",
                self.category, self.preference
            ),
            None => format!("Preference ({}): {}", self.category, self.preference),
        }
    }
}

/// Where a fact stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum FactStatus {
    /// Recalled (within its validity window).
    Current,
    /// Replaced by a newer fact (`superseded_by`); kept as history, recalled only on request.
    Superseded,
    /// Its evidence was forgotten; kept for review unless the forget was hard.
    Invalidated,
}

/// A subject–predicate–object statement with validity, confidence and evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Fact {
    /// A UUID (lowercase, hyphenated); the record's ref is `fact:<id>`.
    pub id: String,
    pub subject: String,
    /// As written; compared in its canonical form ([`normalize_predicate`]).
    pub predicate: String,
    pub object: String,
    /// Epoch ms from which it holds (absent: always did).
    #[serde(default)]
    pub valid_from: Option<i64>,
    /// Epoch ms until which it holds, exclusive (absent: still does).
    #[serde(default)]
    pub valid_until: Option<i64>,
    /// 0 to 1.
    pub confidence: f64,
    /// What it rests on: `doc:`, `msg:`, `evt:` or another `fact:`.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<String>))]
    pub evidence_refs: Vec<Ref>,
    pub status: FactStatus,
    #[serde(default)]
    pub superseded_by: Option<String>,
    /// The facts this one replaced.
    #[serde(default)]
    pub supersedes: Vec<String>,
    /// The forgotten refs that invalidated or narrowed it.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<String>))]
    pub invalidated_by: Vec<Ref>,
    pub created_at: i64,
}

impl Fact {
    /// The text its vector is computed from and the pack shows: the triple in words.
    pub fn text(&self) -> String {
        let predicate = normalize_predicate(&self.predicate).replace('_', " ");
        let mut s = format!("{} {} {}", self.subject, predicate, self.object);
        match (self.valid_from, self.valid_until) {
            (Some(f), Some(u)) => s.push_str(&format!(" (from {} until {})", day(f), day(u))),
            (Some(f), None) => s.push_str(&format!(" (since {})", day(f))),
            (None, Some(u)) => s.push_str(&format!(" (until {})", day(u))),
            (None, None) => {}
        }
        s
    }

    /// Whether it holds at `at` (epoch ms): current and inside its window.
    pub fn holds_at(&self, at: i64) -> bool {
        self.status == FactStatus::Current
            && self.valid_from.is_none_or(|f| f <= at)
            && self.valid_until.is_none_or(|u| at < u)
    }

    /// Whether its validity window overlaps `other`'s.
    pub fn overlaps(&self, other: &Fact) -> bool {
        let start = |f: &Fact| f.valid_from.unwrap_or(i64::MIN);
        let end = |f: &Fact| f.valid_until.unwrap_or(i64::MAX);
        start(self) < end(other) && start(other) < end(self)
    }
}

fn day(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|d| d.format("%Y-%m-%d").to_string())
        .unwrap_or_else(|| ms.to_string())
}

/// How many objects a predicate may have for one subject at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Cardinality {
    /// One: a new object supersedes the current one (`lives_in`, `works_at`).
    Single,
    /// Many: new objects stand beside the others, no conflict (`knows`, `likes`).
    Multi,
}

/// A declared predicate. Undeclared predicates are neither: a different object for the
/// same subject stands beside the current one as an open conflict that recall shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Predicate {
    /// Canonical form ([`normalize_predicate`]).
    pub name: String,
    pub cardinality: Cardinality,
    pub updated_at: i64,
}

/// A typed, directed edge between two entities.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Relationship {
    /// A UUID (lowercase, hyphenated); the record's ref is `rel:<id>`.
    pub id: String,
    pub source_id: String,
    pub target_id: String,
    pub relationship_type: String,
    /// A JSON object.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub properties: serde_json::Value,
    pub created_at: i64,
}

/// A reasoning trace: one task an agent worked on in a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Trace {
    /// A UUID (lowercase, hyphenated); the record's ref is `trace:<id>`.
    pub id: String,
    /// The session (Cairn scope `session`) it ran in.
    pub session_id: String,
    pub task: String,
    #[serde(default)]
    pub outcome: Option<String>,
    #[serde(default)]
    pub success: Option<bool>,
    pub started_at: i64,
    #[serde(default)]
    pub completed_at: Option<i64>,
}

impl Trace {
    /// The text its vector is computed from (the task: similar traces are found by task)
    /// and the pack shows (with the outcome).
    pub fn text(&self) -> String {
        let mut s = format!("Task: {}", self.task);
        match (self.success, &self.outcome) {
            (Some(ok), Some(o)) => s.push_str(&format!(
                "\nOutcome ({}): {o}",
                if ok { "succeeded" } else { "failed" }
            )),
            (Some(ok), None) => s.push_str(if ok {
                "\nOutcome: succeeded"
            } else {
                "\nOutcome: failed"
            }),
            (None, Some(o)) => s.push_str(&format!("\nOutcome: {o}")),
            (None, None) => s.push_str("\n(in progress)"),
        }
        s
    }
}

/// One step of a trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Step {
    pub id: String,
    pub trace_id: String,
    /// 1, 2, 3... in the order the steps were added.
    pub step_number: u32,
    #[serde(default)]
    pub thought: Option<String>,
    #[serde(default)]
    pub action: Option<String>,
    #[serde(default)]
    pub observation: Option<String>,
    pub created_at: i64,
}

/// The status of a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "jsonschema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    Pending,
    #[default]
    Success,
    Failure,
    Error,
    Timeout,
    Cancelled,
}

impl ToolStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolStatus::Pending => "pending",
            ToolStatus::Success => "success",
            ToolStatus::Failure => "failure",
            ToolStatus::Error => "error",
            ToolStatus::Timeout => "timeout",
            ToolStatus::Cancelled => "cancelled",
        }
    }

    /// Whether the call ended without success (pending and cancelled calls are neither).
    pub fn failed(self) -> bool {
        matches!(
            self,
            ToolStatus::Failure | ToolStatus::Error | ToolStatus::Timeout
        )
    }
}

/// A tool call made in a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolCall {
    pub id: String,
    pub trace_id: String,
    pub step_id: String,
    /// 1, 2, 3... within the step.
    pub call_number: u32,
    pub tool_name: String,
    /// Any JSON value (usually an object), stored as given.
    pub arguments: serde_json::Value,
    /// Any JSON value, stored as given.
    #[serde(default)]
    pub result: Option<serde_json::Value>,
    pub status: ToolStatus,
    #[serde(default)]
    pub duration_ms: Option<u64>,
    #[serde(default)]
    pub error: Option<String>,
    pub created_at: i64,
}

/// The structured knowledge a candidate proposes (a third-party agent's claim): written as
/// a fact, preference or entity with trust origin `third_party_agent` only when a trusted
/// caller approves the candidate; a fact cites the candidate's evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "jsonschema", derive(schemars::JsonSchema))]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ProposedKnowledge {
    Fact {
        subject: String,
        predicate: String,
        object: String,
        /// RFC 3339 or epoch ms (held as epoch ms), like a fact's own validity.
        #[serde(default, with = "crate::time::opt_millis")]
        #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::Timestamp>))]
        #[cfg_attr(feature = "jsonschema", schemars(with = "Option<crate::Timestamp>"))]
        valid_from: Option<i64>,
        #[serde(default, with = "crate::time::opt_millis")]
        #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::Timestamp>))]
        #[cfg_attr(feature = "jsonschema", schemars(with = "Option<crate::Timestamp>"))]
        valid_until: Option<i64>,
    },
    Preference {
        category: String,
        preference: String,
        #[serde(default)]
        context: Option<String>,
    },
    Entity {
        name: String,
        #[serde(rename = "type")]
        entity_type: String,
        #[serde(default)]
        description: Option<String>,
        #[serde(default)]
        aliases: Vec<String>,
    },
}

impl ProposedKnowledge {
    /// `fact`, `preference` or `entity`: the candidate's `memory_type` must say the same.
    pub fn kind(&self) -> &'static str {
        match self {
            ProposedKnowledge::Fact { .. } => "fact",
            ProposedKnowledge::Preference { .. } => "preference",
            ProposedKnowledge::Entity { .. } => "entity",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_predicates_normalize() {
        assert_eq!(normalize_name("  Alice   JOHNSON "), "alice johnson");
        assert_eq!(normalize_predicate("WORKS_AT"), "works_at");
        assert_eq!(normalize_predicate("works at"), "works_at");
        assert_eq!(normalize_predicate(" Works--at! "), "works_at");
        assert_eq!(EntityType::parse("PERSON"), Some(EntityType::Person));
        assert_eq!(EntityType::parse("planet"), None);
    }

    fn fact(from: Option<i64>, until: Option<i64>) -> Fact {
        Fact {
            id: "f".into(),
            subject: "Alice".into(),
            predicate: "WORKS_AT".into(),
            object: "Acme".into(),
            valid_from: from,
            valid_until: until,
            confidence: 1.0,
            evidence_refs: vec![],
            status: FactStatus::Current,
            superseded_by: None,
            supersedes: vec![],
            invalidated_by: vec![],
            created_at: 0,
        }
    }

    #[test]
    fn validity_windows() {
        let f = fact(Some(10), Some(20));
        assert!(!f.holds_at(9));
        assert!(f.holds_at(10));
        assert!(f.holds_at(19));
        assert!(!f.holds_at(20), "valid_until is exclusive");
        assert!(f.overlaps(&fact(Some(19), None)));
        assert!(
            !f.overlaps(&fact(Some(20), None)),
            "adjacent windows do not overlap"
        );
        assert!(!f.overlaps(&fact(None, Some(10))));
        assert!(fact(None, None).overlaps(&f));
        assert_eq!(
            f.text(),
            "Alice works at Acme (from 1970-01-01 until 1970-01-01)"
        );
        let mut s = fact(None, None);
        s.status = FactStatus::Superseded;
        assert!(!s.holds_at(0));
    }
}
