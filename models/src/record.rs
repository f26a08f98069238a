//! What Cairn stores per point, as a flat payload (so every field can be indexed and filtered).

use serde::{Deserialize, Serialize};

use crate::refs::Ref;

/// Where a memory came from, and so how far it can be trusted. Shown on every citation:
/// assistant output is never presented as something the user said. `document`: text of an
/// ingested document; `user_reported`: something the user said (their own claim, not
/// verified); `agent_output`: something an assistant or agent produced; `tool_output`: the
/// output of a tool call; `third_party_agent`: proposed by a third-party agent and approved
/// by a trusted caller; `system`: a system message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "jsonschema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum TrustOrigin {
    // Variants carry no doc comments: schemars would turn the enum into a `oneOf` of
    // constants, which some MCP clients render poorly; the enum's doc describes them.
    Document,
    UserReported,
    AgentOutput,
    ToolOutput,
    ThirdPartyAgent,
    System,
}

impl TrustOrigin {
    pub fn as_str(self) -> &'static str {
        match self {
            TrustOrigin::Document => "document",
            TrustOrigin::UserReported => "user_reported",
            TrustOrigin::AgentOutput => "agent_output",
            TrustOrigin::ToolOutput => "tool_output",
            TrustOrigin::ThirdPartyAgent => "third_party_agent",
            TrustOrigin::System => "system",
        }
    }

    /// The words used in the MemoryPack Markdown for this origin.
    pub fn label(self) -> &'static str {
        match self {
            TrustOrigin::Document => "document",
            TrustOrigin::UserReported => "user said",
            TrustOrigin::AgentOutput => "assistant said (unverified)",
            TrustOrigin::ToolOutput => "tool output",
            TrustOrigin::ThirdPartyAgent => "third-party agent (approved)",
            TrustOrigin::System => "system message",
        }
    }
}

/// Role of a conversation message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "jsonschema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
    System,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::System => "system",
            Role::Tool => "tool",
        }
    }

    /// Default trust origin of a message with this role.
    pub fn trust(self) -> TrustOrigin {
        match self {
            Role::User => TrustOrigin::UserReported,
            Role::Assistant => TrustOrigin::AgentOutput,
            Role::System => TrustOrigin::System,
            Role::Tool => TrustOrigin::ToolOutput,
        }
    }
}

/// Kind of a stored point. Recall searches `chunk`, `message`, `memory`, `entity`,
/// `preference`, `fact` and `trace`; the other kinds are Cairn's own records.
// (`PointKind::recall_role` decides which; this doc is also the OpenAPI description, so it
// carries no rustdoc links.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum PointKind {
    /// A chunk of a document version (searchable).
    Chunk,
    /// A conversation message (searchable).
    Message,
    /// The registry record of a document source: its current version (not searchable).
    Document,
    /// The record of a completed agent turn (not searchable).
    Turn,
    /// Evidence posted by a third-party agent (`evt:<id>`, id in `doc_id`; not searchable:
    /// unvetted claims reach recall only through an approved candidate).
    Event,
    /// A memory proposed by a third-party agent, with its review status (`cand:<id>`, id in
    /// `doc_id`; not searchable).
    Candidate,
    /// An approved candidate as a searchable memory (`mem:<id>`, id in `doc_id`).
    Memory,
    /// The record of a conversation: the next message sequence number in `seq`, kept when
    /// messages are deleted so a `msg:<conversation>/<seq>` ref is never reused (not
    /// searchable).
    Conversation,
    /// The receipt of a forget: the forgotten ref in `source` and the report of what it
    /// removed, so a retry after a crash or a lost answer learns the outcome instead of a
    /// `404` (not searchable; holds refs, never the forgotten content).
    Forget,
    /// An agent grant (operations, status, the hash of the agent's key; not searchable).
    Grant,
    /// A knowledge entity (`ent:<id>`, searchable by name and description).
    Entity,
    /// A user preference (`pref:<id>`, searchable).
    Preference,
    /// A subject–predicate–object fact (`fact:<id>`, searchable).
    Fact,
    /// A typed edge between two entities (`rel:<id>`; not searchable).
    Relationship,
    /// A declared predicate and its cardinality (internal `pred:<name>`; not searchable).
    Predicate,
    /// A reasoning trace (`trace:<id>`, searchable by task).
    Trace,
    /// One step of a trace (cited as its trace; not searchable).
    Step,
    /// One tool call of a step (cited as its trace; not searchable).
    ToolCall,
}

impl PointKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PointKind::Chunk => "chunk",
            PointKind::Message => "message",
            PointKind::Document => "document",
            PointKind::Turn => "turn",
            PointKind::Event => "event",
            PointKind::Candidate => "candidate",
            PointKind::Memory => "memory",
            PointKind::Conversation => "conversation",
            PointKind::Forget => "forget",
            PointKind::Grant => "grant",
            PointKind::Entity => "entity",
            PointKind::Preference => "preference",
            PointKind::Fact => "fact",
            PointKind::Relationship => "relationship",
            PointKind::Predicate => "predicate",
            PointKind::Trace => "trace",
            PointKind::Step => "step",
            PointKind::ToolCall => "tool_call",
        }
    }

    /// Every kind, in declaration order ([`PointKind::index`] is the position here).
    pub const ALL: [PointKind; 18] = [
        PointKind::Chunk,
        PointKind::Message,
        PointKind::Document,
        PointKind::Turn,
        PointKind::Event,
        PointKind::Candidate,
        PointKind::Memory,
        PointKind::Conversation,
        PointKind::Forget,
        PointKind::Grant,
        PointKind::Entity,
        PointKind::Preference,
        PointKind::Fact,
        PointKind::Relationship,
        PointKind::Predicate,
        PointKind::Trace,
        PointKind::Step,
        PointKind::ToolCall,
    ];

    /// The kind's position in [`PointKind::ALL`]. Exhaustive, so a new kind does not compile
    /// until it has a place there (a unit test checks the two agree).
    pub fn index(self) -> usize {
        match self {
            PointKind::Chunk => 0,
            PointKind::Message => 1,
            PointKind::Document => 2,
            PointKind::Turn => 3,
            PointKind::Event => 4,
            PointKind::Candidate => 5,
            PointKind::Memory => 6,
            PointKind::Conversation => 7,
            PointKind::Forget => 8,
            PointKind::Grant => 9,
            PointKind::Entity => 10,
            PointKind::Preference => 11,
            PointKind::Fact => 12,
            PointKind::Relationship => 13,
            PointKind::Predicate => 14,
            PointKind::Trace => 15,
            PointKind::Step => 16,
            PointKind::ToolCall => 17,
        }
    }

    /// How recall treats points of this kind; `None`: recall never searches them. The one
    /// place that decides what is searchable, searched by default, offered to MCP clients and
    /// how a pack labels it: a new kind does not compile until it is decided here.
    pub fn recall_role(self) -> Option<RecallRole> {
        let role = |label| {
            Some(RecallRole {
                default: true,
                label,
            })
        };
        match self {
            PointKind::Chunk | PointKind::Memory => role(PackLabel::Source),
            PointKind::Message => role(PackLabel::Conversation),
            PointKind::Entity | PointKind::Preference | PointKind::Fact | PointKind::Trace => {
                role(PackLabel::Knowledge)
            }
            PointKind::Document
            | PointKind::Turn
            | PointKind::Event
            | PointKind::Candidate
            | PointKind::Conversation
            | PointKind::Forget
            | PointKind::Grant
            | PointKind::Relationship
            | PointKind::Predicate
            | PointKind::Step
            | PointKind::ToolCall => None,
        }
    }

    /// Whether recall searches points of this kind.
    pub fn searchable(self) -> bool {
        self.recall_role().is_some()
    }

    /// The kinds recall can search, in declaration order.
    pub fn searchable_kinds() -> impl Iterator<Item = PointKind> {
        Self::ALL.into_iter().filter(|k| k.searchable())
    }

    /// The kinds recall searches when the caller names none, in declaration order.
    pub fn default_recall_kinds() -> impl Iterator<Item = PointKind> {
        Self::ALL
            .into_iter()
            .filter(|k| k.recall_role().is_some_and(|r| r.default))
    }
}

/// A kind recall searches: what a caller may name in a recall's `kinds` filter, on every
/// door. Any other kind is refused when parsed, with the kinds allowed; the schemas (OpenAPI
/// and MCP's JSON Schema) list exactly [`PointKind::searchable_kinds`], so they follow
/// [`PointKind::recall_role`] without a list of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct SearchKind(PointKind);

impl SearchKind {
    /// What the schemas say of the kinds.
    const DESCRIPTION: &'static str = "What kind of memory: document chunks (`chunk`), \
        conversation messages (`message`), approved memories (`memory`), knowledge \
        (`entity`, `preference`, `fact`) and reasoning traces (`trace`).";

    /// The kind, when recall searches it.
    pub fn new(kind: PointKind) -> Option<SearchKind> {
        kind.searchable().then_some(SearchKind(kind))
    }

    pub fn kind(self) -> PointKind {
        self.0
    }

    fn names() -> Vec<&'static str> {
        PointKind::searchable_kinds().map(|k| k.as_str()).collect()
    }
}

impl From<SearchKind> for PointKind {
    fn from(k: SearchKind) -> Self {
        k.0
    }
}

impl<'de> Deserialize<'de> for SearchKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let kind = PointKind::deserialize(d)?;
        SearchKind::new(kind).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "kind `{}` is not searchable: expected one of {}",
                kind.as_str(),
                SearchKind::names().join(", ")
            ))
        })
    }
}

#[cfg(feature = "jsonschema")]
impl schemars::JsonSchema for SearchKind {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SearchKind".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": SearchKind::DESCRIPTION,
            "type": "string",
            "enum": SearchKind::names(),
        })
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for SearchKind {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .description(Some(SearchKind::DESCRIPTION))
            .enum_values(Some(SearchKind::names()))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for SearchKind {}

/// How recall treats a searchable kind ([`PointKind::recall_role`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecallRole {
    /// Searched when the caller names no kinds.
    pub default: bool,
    /// What the pack's label line shows for it.
    pub label: PackLabel,
}

/// What a pack's label line names for a memory, beside its origin and date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackLabel {
    /// Where the text came from: source, PDF page, heading (chunks, approved memories).
    Source,
    /// The conversation, the message's sequence number and speaker.
    Conversation,
    /// The kind itself (`fact`, `entity`, …) and whether it is history.
    Knowledge,
}

/// The payload of a stored point. One flat struct for every kind: fields that do not apply
/// to a kind are absent. Timestamps are Unix epoch milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredPoint {
    pub kind: PointKind,
    pub tenant: String,
    pub user: String,
    pub namespace: String,
    pub agent: String,
    pub session: String,
    pub trust: TrustOrigin,
    /// When the memory was created (message time, or ingest time for documents).
    pub ts: i64,
    /// Exact text (chunk text, or the verbatim message content).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Document source (file path or caller key), or a message's source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doc_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_index: Option<u32>,
    /// Number of chunks of the document (document records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_count: Option<u32>,
    /// Character span `[start, end)` of the chunk in the extracted document text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<(u64, u64)>,
    /// 1-based PDF page of the chunk's first character.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<u32>,
    /// Markdown heading path of the chunk ("Guide > Install").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heading: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    /// Per-conversation sequence number (ordering of messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// Speaker name, when the message names one (e.g. "Caroline").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speaker: Option<String>,
    /// Hash of the content (change detection).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_hash: Option<String>,
    /// Media type of a document ("text/markdown", "application/pdf", ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// Caller metadata, stored as given (only the caller's: Cairn's own state is `state`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<serde_json::Value>,
    /// Cairn's state of this record, typed per kind (candidate review, turn receipt,
    /// forget receipt, a turn message's links...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<crate::state::RecordState>,
    /// Exact-match lookup keys of a knowledge or reasoning record (an entity's names, a
    /// fact's subject and predicate, a step's trace...), see [`crate::knowledge::key`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<Vec<String>>,
}

impl StoredPoint {
    /// A point of `kind` in `scope` with every optional field empty.
    pub fn new(kind: PointKind, scope: &crate::Scope, trust: TrustOrigin, ts: i64) -> Self {
        StoredPoint {
            kind,
            tenant: scope.tenant.clone(),
            user: scope.user.clone(),
            namespace: scope.namespace.clone(),
            agent: scope.agent.clone(),
            session: scope.session.clone(),
            trust,
            ts,
            text: None,
            source: None,
            doc_id: None,
            version: None,
            chunk_index: None,
            chunk_count: None,
            span: None,
            page: None,
            heading: None,
            conversation_id: None,
            seq: None,
            turn_id: None,
            role: None,
            speaker: None,
            content_hash: None,
            media_type: None,
            metadata: None,
            state: None,
            keys: None,
        }
    }

    /// The stable reference used in citations: `doc:<id>#<chunk>` or `msg:<conversation>/<seq>`
    /// (and for records, `doc:<id>`, `turn:<id>`, `evt:<id>`, `cand:<id>`, `mem:<id>`,
    /// `conv:<id>`, `forget:<ref>`).
    pub fn reference(&self) -> String {
        self.to_ref().to_string()
    }

    /// This point's [`Ref`]. A field the kind needs but the payload lacks reads as `?`
    /// (`0` for a chunk index or sequence number); a forget receipt whose `source` is not a
    /// ref names `doc:?`.
    pub fn to_ref(&self) -> Ref {
        let or_unknown = |v: &Option<String>| v.clone().unwrap_or_else(|| "?".to_string());
        match self.kind {
            PointKind::Chunk => Ref::chunk(or_unknown(&self.doc_id), self.chunk_index.unwrap_or(0)),
            PointKind::Message => {
                Ref::msg(or_unknown(&self.conversation_id), self.seq.unwrap_or(0))
            }
            PointKind::Document => Ref::doc(or_unknown(&self.doc_id)),
            PointKind::Turn => Ref::turn(or_unknown(&self.turn_id)),
            PointKind::Event => Ref::evt(or_unknown(&self.doc_id)),
            PointKind::Candidate => Ref::cand(or_unknown(&self.doc_id)),
            PointKind::Memory => Ref::mem(or_unknown(&self.doc_id)),
            PointKind::Conversation => Ref::conv(or_unknown(&self.conversation_id)),
            PointKind::Grant => Ref::Grant(self.agent.clone()),
            PointKind::Entity => Ref::Ent(or_unknown(&self.doc_id)),
            PointKind::Preference => Ref::Pref(or_unknown(&self.doc_id)),
            PointKind::Fact => Ref::Fact(or_unknown(&self.doc_id)),
            PointKind::Relationship => Ref::Rel(or_unknown(&self.doc_id)),
            PointKind::Predicate => Ref::Pred(or_unknown(&self.doc_id)),
            PointKind::Trace => Ref::Trace(or_unknown(&self.doc_id)),
            // A step and a tool call are cited as the trace they belong to.
            PointKind::Step | PointKind::ToolCall => Ref::Trace(match &self.state {
                Some(crate::state::RecordState::Step(s)) => s.trace_id.clone(),
                Some(crate::state::RecordState::ToolCall(c)) => c.trace_id.clone(),
                _ => "?".to_string(),
            }),
            PointKind::Forget => Ref::forget(
                self.source
                    .as_deref()
                    .and_then(|s| Ref::parse(s).ok())
                    .unwrap_or_else(|| Ref::doc("?")),
            ),
        }
    }
}

impl StoredPoint {
    /// The full scope the point was written in (its partition plus agent and session).
    pub fn scope(&self) -> crate::Scope {
        crate::Scope {
            tenant: self.tenant.clone(),
            user: self.user.clone(),
            namespace: self.namespace.clone(),
            agent: self.agent.clone(),
            session: self.session.clone(),
        }
    }

    /// The text this point's dense vector was computed from (before the model's document
    /// prefix): a chunk's heading path, a blank line and its text; a message's speaker, `: `
    /// and its content; a trace's task; otherwise the text. Must agree with what the write path embeds
    /// (`ingest::Chunk::embedding_text`, `Ingestor::record_messages`), because forgetting
    /// uses it to purge cached vectors.
    pub fn embedded_text(&self) -> Option<String> {
        if let (PointKind::Trace, Some(crate::state::RecordState::Trace(t))) =
            (self.kind, &self.state)
        {
            // A trace is embedded by its task alone (similar traces are similar tasks).
            return Some(t.task.clone());
        }
        let text = self.text.as_ref()?;
        Some(match (self.kind, &self.heading, &self.speaker) {
            (PointKind::Chunk, Some(h), _) => format!("{h}\n\n{text}"),
            (PointKind::Message, _, Some(s)) => format!("{s}: {text}"),
            _ => text.clone(),
        })
    }
}

/// A stored document (its current version), as listed by `cairn documents` and
/// `GET /v1/documents`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DocumentInfo {
    pub doc_id: String,
    pub source: String,
    pub version: u32,
    pub chunks: u32,
    pub media_type: Option<String>,
    /// Unix epoch milliseconds.
    pub ingested_at: i64,
}

#[cfg(test)]
mod tests {
    #[test]
    fn search_kinds_are_exactly_the_searchable_kinds() {
        use super::{PointKind, SearchKind};
        for kind in PointKind::ALL {
            let parsed = serde_json::from_value::<SearchKind>(serde_json::json!(kind.as_str()));
            match parsed {
                Ok(k) => {
                    assert!(kind.searchable(), "{kind:?} parsed");
                    assert_eq!(k.kind(), kind);
                    assert_eq!(serde_json::to_value(k).unwrap(), kind.as_str());
                }
                Err(e) => {
                    assert!(!kind.searchable(), "{kind:?} refused: {e}");
                    let e = e.to_string();
                    assert!(e.contains("not searchable") && e.contains("chunk"), "{e}");
                }
            }
        }
        assert!(serde_json::from_value::<SearchKind>(serde_json::json!("nonsense")).is_err());
    }

    #[test]
    fn all_kinds_are_listed_once_in_order() {
        for (i, k) in super::PointKind::ALL.iter().enumerate() {
            assert_eq!(k.index(), i, "{k:?}");
        }
        let names: std::collections::BTreeSet<&str> =
            super::PointKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), super::PointKind::ALL.len());
        let searchable: Vec<&str> = super::PointKind::searchable_kinds()
            .map(|k| k.as_str())
            .collect();
        assert_eq!(
            searchable,
            [
                "chunk",
                "message",
                "memory",
                "entity",
                "preference",
                "fact",
                "trace"
            ]
        );
    }

    use super::*;

    fn point(kind: PointKind) -> StoredPoint {
        StoredPoint::new(kind, &crate::Scope::default(), TrustOrigin::System, 0)
    }

    #[test]
    fn references_print_as_before() {
        let mut p = point(PointKind::Chunk);
        assert_eq!(p.reference(), "doc:?#0");
        p.doc_id = Some("d1".into());
        p.chunk_index = Some(4);
        assert_eq!(p.reference(), "doc:d1#4");
        p.kind = PointKind::Document;
        assert_eq!(p.reference(), "doc:d1");
        for (kind, want) in [
            (PointKind::Event, "evt:d1"),
            (PointKind::Candidate, "cand:d1"),
            (PointKind::Memory, "mem:d1"),
        ] {
            p.kind = kind;
            assert_eq!(p.reference(), want);
        }
        let mut m = point(PointKind::Message);
        assert_eq!(m.reference(), "msg:?/0");
        m.conversation_id = Some("c1".into());
        m.seq = Some(12);
        assert_eq!(m.reference(), "msg:c1/12");
        m.kind = PointKind::Conversation;
        assert_eq!(m.reference(), "conv:c1");
        let mut t = point(PointKind::Turn);
        assert_eq!(t.reference(), "turn:?");
        t.turn_id = Some("t1".into());
        assert_eq!(t.reference(), "turn:t1");
        let mut f = point(PointKind::Forget);
        f.source = Some("msg:c1/3".into());
        assert_eq!(f.reference(), "forget:msg:c1/3");
        assert_eq!(f.to_ref(), Ref::forget(Ref::msg("c1", 3)));
    }
}
