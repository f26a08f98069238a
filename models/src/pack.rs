//! The MemoryPack (what recall returns) and the `agent-turn-v1` envelope around it.
//! These shapes are a public contract: HTTP responses and `cairn recall --json` are snapshot
//! tested, so change them only deliberately.

use serde::{Deserialize, Serialize};

use crate::{Partition, PointKind, Ref, Role, Scope, TrustOrigin};

/// Version string of the agent-turn contract.
pub const CONTRACT_VERSION: &str = "agent-turn-v1";

/// How well the pack supports the query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Coverage {
    /// Nothing relevant enough was found.
    None,
    /// Something relevant, but some aspect is unsupported or the memories conflict.
    Partial,
    /// Every key aspect and identifier of the query is supported by a cited item.
    Full,
}

impl Coverage {
    pub fn as_str(self) -> &'static str {
        match self {
            Coverage::None => "none",
            Coverage::Partial => "partial",
            Coverage::Full => "full",
        }
    }
}

/// Why an item was selected, as data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SelectionReason {
    /// 1-based rank in the dense (embedding) leg, if it appeared there.
    pub dense_rank: Option<u32>,
    /// 1-based rank in the sparse (BM25) leg, if it appeared there.
    pub sparse_rank: Option<u32>,
    /// Cosine similarity of the query and the item embeddings.
    pub dense_score: Option<f32>,
    /// Query identifiers the item contains verbatim.
    pub identifier_hits: Vec<String>,
    /// Fused score used for ranking.
    pub fused_score: f32,
}

/// One cited source. `n` is the marker `[n]` used in the Markdown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Citation {
    pub n: u32,
    /// Stable reference: `doc:<id>#<chunk>`, `msg:<conversation>/<seq>`, `mem:<id>`,
    /// `ent:<id>`, `pref:<id>`, `fact:<id>` or `trace:<id>`.
    #[serde(rename = "ref")]
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub reference: Ref,
    /// File path / caller key of a document, or the conversation for a message.
    pub source: String,
    /// What the cited point is (serialized as its snake_case name, e.g. `chunk`).
    pub kind: PointKind,
    pub doc_id: Option<String>,
    pub chunk_index: Option<u32>,
    /// Character span `[start, end)` of the cited text in the document.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Vec<u64>>))]
    pub span: Option<(u64, u64)>,
    pub page: Option<u32>,
    pub conversation_id: Option<String>,
    pub turn_id: Option<String>,
    pub role: Option<Role>,
    pub trust_origin: TrustOrigin,
    /// Unix epoch milliseconds.
    pub timestamp: i64,
    pub score: f32,
}

/// One side of a conflict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ConflictSide {
    /// Citation number of the item stating this side.
    pub citation: u32,
    /// The sentence stating it.
    pub statement: String,
    /// The differing value(s) (e.g. "tuesday"), or "negated"/"affirmed".
    pub value: String,
    pub timestamp: i64,
    pub trust_origin: TrustOrigin,
}

/// Two memories that state different values for the same subject and attribute.
/// Both sides are always shown; Cairn never picks one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Conflict {
    /// The shared statement with the differing values blanked ("alex's dentist appointment is on _").
    pub topic: String,
    pub sides: Vec<ConflictSide>,
}

/// A selected memory, as data (the Markdown shows the same items).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SelectedNode {
    pub citation: u32,
    /// The cited memory's ref, as in the citation.
    #[serde(rename = "ref")]
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub reference: Ref,
    pub kind: PointKind,
    pub trust_origin: TrustOrigin,
    /// The text as included in the pack (possibly shortened at a sentence boundary).
    pub text: String,
    pub truncated: bool,
    pub reason: SelectionReason,
}

/// The signals behind a pack's answerability score.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AnswerSignals {
    /// Best query–candidate dense cosine.
    pub top_dense: f32,
    /// `top_dense` minus the 10th best candidate's cosine.
    pub dense_margin: f32,
    /// `top_dense` minus the second best candidate's cosine.
    pub dense_gap: f32,
    /// How far the best BM25 score stands above the 10th: `(b1 − b10) / b1` (0 without a
    /// BM25 match).
    pub sparse_margin: f32,
    /// 1 when the dense and BM25 legs agree on their best item (it is in the other's top 3).
    pub leg_agreement: f32,
    /// Weighted share of the query's aspects (identifiers double) the cited items support.
    pub aspect_support: f32,
    /// The same share for the best single cited item.
    pub best_item_support: f32,
    /// Share of the query's identifiers found in the cited items (1 when it names none).
    pub identifier_support: f32,
    /// Dense cosine of the first cited item (0 when nothing is cited).
    pub top_item_dense: f32,
}

/// How likely the cited items answer the query, and the thresholds that turn it into
/// `coverage`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Answerability {
    /// Estimated probability (0..1) that the cited items answer the query.
    pub score: f32,
    /// `coverage` is `full` at or above this score (unless the memories conflict). This
    /// pack's own threshold: lower for short evidence that supports most of the query
    /// (a chat message, a note), higher for long passages.
    pub full_at: f32,
    /// `coverage` is `none` below this score.
    pub none_below: f32,
    pub signals: AnswerSignals,
}

/// A token-budgeted memory context for one query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemoryPack {
    pub identity_scope: Partition,
    pub query: String,
    pub coverage: Coverage,
    /// The score behind `coverage` (always sent; the default only reads packs stored before
    /// it existed).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub answerability: Answerability,
    /// Markdown for the prompt. Data, not instructions.
    pub context_markdown: String,
    pub selected_nodes: Vec<SelectedNode>,
    pub citations: Vec<Citation>,
    pub conflicts: Vec<Conflict>,
    /// Aspects of the query no cited item supports, in words an agent can act on.
    pub unknowns: Vec<String>,
    /// Tokens of `context_markdown`, counted with the pack tokenizer.
    pub token_count: usize,
    pub token_budget: usize,
}

/// Mode of an agent turn: text or voice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "jsonschema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum TurnMode {
    #[default]
    Text,
    Voice,
}

/// The `agent-turn-v1` envelope returned by `prepare` (and `cairn recall --json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TurnEnvelope {
    #[cfg_attr(feature = "openapi", schema(example = "agent-turn-v1"))]
    pub contract_version: String,
    pub turn_id: String,
    pub scope: Scope,
    pub user_message: String,
    pub mode: TurnMode,
    pub memory_pack: MemoryPack,
}
