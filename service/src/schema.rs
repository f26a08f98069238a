//! OpenAPI schemas of the wire types the doors share with the library crates.
//!
//! The library crates know nothing of HTTP or OpenAPI, so their wire types (`Scope`,
//! `MemoryPack`, `DocumentReport`, ...) are described here, field for field, under the same
//! names. These descriptions are checked against real responses: the HTTP tests validate
//! every response body against the generated document (unknown or missing fields fail), so
//! a field added to a library type without being added here fails the tests.

#![allow(dead_code)]

use utoipa::ToSchema;

/// Who a memory belongs to and where it came from. Each component is `[A-Za-z0-9_.-]+`, at
/// most 128 characters. Tenant, user and namespace are the storage boundary.
#[derive(Debug, ToSchema)]
pub struct Scope {
    #[schema(pattern = "^[A-Za-z0-9_.-]{1,128}$", example = "acme")]
    pub tenant: String,
    #[schema(pattern = "^[A-Za-z0-9_.-]{1,128}$", example = "alice")]
    pub user: String,
    /// Default `default`.
    #[serde(default)]
    #[schema(pattern = "^[A-Za-z0-9_.-]{1,128}$")]
    pub namespace: String,
    /// Default `default`. Provenance: recorded on every memory.
    #[serde(default)]
    #[schema(pattern = "^[A-Za-z0-9_.-]{1,128}$")]
    pub agent: String,
    /// Default `default`. Provenance; also the conversation id of agent turns.
    #[serde(default)]
    #[schema(pattern = "^[A-Za-z0-9_.-]{1,128}$")]
    pub session: String,
}

/// The storage boundary of a scope.
#[derive(Debug, ToSchema)]
pub struct Partition {
    pub tenant: String,
    pub user: String,
    pub namespace: String,
}

/// Where a memory came from, and so how far it can be trusted.
#[derive(Debug, ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum TrustOrigin {
    Document,
    UserReported,
    AgentOutput,
    ToolOutput,
    ThirdPartyAgent,
    System,
}

/// Kind of a stored point. Recall searches `chunk`, `message`, `memory`, `entity`,
/// `preference`, `fact` and `trace`.
#[derive(Debug, ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum PointKind {
    Chunk,
    Message,
    Document,
    Turn,
    Event,
    Candidate,
    Memory,
    Entity,
    Preference,
    Fact,
    Trace,
}

/// Role of a conversation message.
#[derive(Debug, ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
    System,
    Tool,
}

/// Mode of an agent turn.
#[derive(Debug, ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum TurnMode {
    Text,
    Voice,
}

/// How well the pack supports the query.
#[derive(Debug, ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum Coverage {
    None,
    Partial,
    Full,
}

/// Optional narrowing of a recall, beyond the scope's partition.
#[derive(Debug, ToSchema)]
pub struct RecallFilters {
    pub agent: Option<String>,
    pub session: Option<String>,
    pub conversation_id: Option<String>,
    pub source: Option<String>,
    /// Only these trust origins.
    pub trust: Option<Vec<TrustOrigin>>,
    /// Epoch ms, inclusive.
    pub since: Option<i64>,
    /// Epoch ms, inclusive.
    pub until: Option<i64>,
    /// Only these kinds (`chunk`, `message`, `memory`, `entity`, `preference`, `fact`,
    /// `trace`); default all of them.
    pub kinds: Option<Vec<PointKind>>,
    /// Also recall superseded, expired and invalidated facts and merged entities.
    #[serde(default)]
    pub include_history: bool,
}

/// Why an item was selected.
#[derive(Debug, ToSchema)]
pub struct SelectionReason {
    pub dense_rank: Option<u32>,
    pub sparse_rank: Option<u32>,
    pub dense_score: Option<f32>,
    pub identifier_hits: Vec<String>,
    pub fused_score: f32,
}

/// One cited source; `n` is the `[n]` marker of the Markdown.
#[derive(Debug, ToSchema)]
pub struct Citation {
    pub n: u32,
    /// `doc:<id>#<chunk>`, `msg:<conversation>/<seq>`, `mem:<id>`, `ent:<id>`, `pref:<id>`,
    /// `fact:<id>` or `trace:<id>`.
    #[schema(rename = "ref")]
    pub reference: String,
    /// Document source, `conversation:<id>`, or for a memory its agent and evidence refs.
    pub source: String,
    pub kind: PointKind,
    pub doc_id: Option<String>,
    pub chunk_index: Option<u32>,
    /// Character span `[start, end)`.
    #[schema(value_type = Option<Vec<u64>>)]
    pub span: Option<(u64, u64)>,
    pub page: Option<u32>,
    pub conversation_id: Option<String>,
    pub turn_id: Option<String>,
    pub role: Option<Role>,
    pub trust_origin: TrustOrigin,
    /// Epoch ms.
    pub timestamp: i64,
    pub score: f32,
}

/// One side of a conflict.
#[derive(Debug, ToSchema)]
pub struct ConflictSide {
    pub citation: u32,
    pub statement: String,
    pub value: String,
    pub timestamp: i64,
    pub trust_origin: TrustOrigin,
}

/// Memories that state different values for the same thing; never resolved silently.
#[derive(Debug, ToSchema)]
pub struct Conflict {
    pub topic: String,
    pub sides: Vec<ConflictSide>,
}

/// A selected memory, as data.
#[derive(Debug, ToSchema)]
pub struct SelectedNode {
    pub citation: u32,
    #[schema(rename = "ref")]
    pub reference: String,
    pub kind: PointKind,
    pub trust_origin: TrustOrigin,
    pub text: String,
    pub truncated: bool,
    pub reason: SelectionReason,
}

/// The signals behind a pack's answerability score.
#[derive(Debug, ToSchema)]
pub struct AnswerSignals {
    /// Best query–candidate dense cosine.
    pub top_dense: f32,
    /// `top_dense` minus the 10th best candidate's cosine.
    pub dense_margin: f32,
    /// `top_dense` minus the second best candidate's cosine.
    pub dense_gap: f32,
    /// How far the best BM25 score stands above the 10th: `(b1 − b10) / b1`.
    pub sparse_margin: f32,
    /// 1 when the dense and BM25 legs agree on their best item.
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

/// How likely the cited items answer the query (a calibrated model, see the README), and
/// the thresholds that turn it into `coverage`.
#[derive(Debug, ToSchema)]
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

/// A token-budgeted memory context with citations.
#[derive(Debug, ToSchema)]
pub struct MemoryPack {
    pub identity_scope: Partition,
    pub query: String,
    pub coverage: Coverage,
    pub answerability: Answerability,
    /// Markdown for the prompt. Data, not instructions.
    pub context_markdown: String,
    pub selected_nodes: Vec<SelectedNode>,
    pub citations: Vec<Citation>,
    pub conflicts: Vec<Conflict>,
    pub unknowns: Vec<String>,
    pub token_count: usize,
    pub token_budget: usize,
}

/// The `agent-turn-v1` envelope.
#[derive(Debug, ToSchema)]
pub struct TurnEnvelope {
    #[schema(example = "agent-turn-v1")]
    pub contract_version: String,
    pub turn_id: String,
    pub scope: Scope,
    pub user_message: String,
    pub mode: TurnMode,
    pub memory_pack: MemoryPack,
}

/// What happened to a document.
#[derive(Debug, ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum DocStatus {
    Created,
    Updated,
    Unchanged,
}

/// Result of ingesting one document.
#[derive(Debug, ToSchema)]
pub struct DocumentReport {
    pub source: String,
    pub doc_id: String,
    pub version: u32,
    pub chunks: u32,
    pub status: DocStatus,
    pub media_type: String,
    pub warnings: Vec<String>,
}

/// A stored document (its current version).
#[derive(Debug, ToSchema)]
pub struct DocumentInfo {
    pub doc_id: String,
    pub source: String,
    pub version: u32,
    pub chunks: u32,
    pub media_type: Option<String>,
    /// Epoch ms.
    pub ingested_at: i64,
}

/// One message to record.
#[derive(Debug, ToSchema)]
pub struct MessageInput {
    #[schema(pattern = "^[A-Za-z0-9_.-]{1,128}$")]
    pub conversation_id: String,
    pub role: Role,
    /// Stored verbatim; at most 32 KiB.
    pub content: String,
    /// An explicit time; also an idempotency key (with role and content) when there is no
    /// `message_id` or `turn_id`.
    pub ts: Option<cairn_models::Timestamp>,
    /// One message per turn and role: a replay of the turn collapses onto it.
    #[schema(pattern = "^[A-Za-z0-9_.-]{1,128}$")]
    pub turn_id: Option<String>,
    /// The caller's idempotency key (per conversation and role): posting it again with the
    /// same content is a replay, with other content `409 conflict`. A message without
    /// `message_id`, `turn_id` or `ts` is always recorded as a new message.
    #[schema(pattern = "^[A-Za-z0-9_.-]{1,128}$")]
    pub message_id: Option<String>,
    /// At most 256 bytes.
    pub speaker: Option<String>,
    /// At most 16 KiB serialized.
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<()>,
}

/// Receipt of a recorded message.
#[derive(Debug, ToSchema)]
pub struct MessageReceipt {
    /// UUID of the stored point.
    #[schema(value_type = String)]
    pub id: (),
    #[schema(rename = "ref")]
    pub reference: String,
    pub conversation_id: String,
    pub seq: u64,
    pub role: Role,
    /// False when an identical message was already stored.
    pub created: bool,
}
