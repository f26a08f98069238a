//! Conversation messages: what a door sends to record them and what it gets back. The
//! operations are [`Engine`](crate::Engine) methods (`ops`).

use cairn_ingest::messages::KeyedMessage;
use cairn_ingest::{MessageInput, MessageReceipt};
use cairn_models::{Scope, StoredPoint};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /v1/messages` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MessagesBody {
    pub scope: Scope,
    /// 1 to 1000 messages.
    pub messages: Vec<PostedMessage>,
}

/// One message to record, verbatim: a [`MessageInput`] plus the caller's optional
/// idempotency key `message_id` (`MessageInput` in the OpenAPI document; its own type
/// because serde's `flatten` does not combine with `deny_unknown_fields`).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[cfg_attr(feature = "jsonschema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[schema(as = MessageInput)]
pub struct PostedMessage {
    /// The conversation (`[A-Za-z0-9_.-]+`, at most 128 characters).
    #[schema(pattern = "^[A-Za-z0-9_.-]{1,128}$")]
    pub conversation_id: String,
    pub role: cairn_models::Role,
    /// The message, stored verbatim (at most 32 KiB).
    pub content: String,
    /// When it was said (default: now). An explicit time is also an idempotency key (with
    /// role and content) when there is no `message_id` or `turn_id`.
    #[serde(default)]
    pub ts: Option<cairn_ingest::Timestamp>,
    /// The agent turn it belongs to: one message per turn and role, so a replay of the
    /// turn collapses onto it.
    #[serde(default)]
    #[schema(pattern = "^[A-Za-z0-9_.-]{1,128}$")]
    pub turn_id: Option<String>,
    /// Your idempotency key (per conversation and role): the same key and content again is
    /// a replay, other content under it `409 conflict`. A message without `message_id`,
    /// `turn_id` or `ts` is always recorded as a new message.
    #[serde(default)]
    #[schema(pattern = "^[A-Za-z0-9_.-]{1,128}$")]
    pub message_id: Option<String>,
    /// Display name of the speaker (at most 256 bytes).
    #[serde(default)]
    pub speaker: Option<String>,
    /// At most 16 KiB serialized.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    #[cfg_attr(feature = "jsonschema", schemars(with = "Option<serde_json::Map<String, serde_json::Value>>"))]
    pub metadata: Option<serde_json::Value>,
}

impl From<PostedMessage> for KeyedMessage {
    fn from(m: PostedMessage) -> Self {
        KeyedMessage {
            state: None,
            message: MessageInput {
                conversation_id: m.conversation_id,
                role: m.role,
                content: m.content,
                ts: m.ts,
                turn_id: m.turn_id,
                speaker: m.speaker,
                metadata: m.metadata,
            },
            message_id: m.message_id,
        }
    }
}

/// `POST /v1/messages` response.
#[derive(Debug, Serialize, ToSchema)]
pub struct MessagesResponse {
    pub receipts: Vec<MessageReceipt>,
}

/// A stored message as listed.
#[derive(Debug, Serialize, ToSchema)]
pub struct MessageView {
    /// The message's stable id (its point id): `GET /v1/messages/{id}` reads the message by
    /// it; deleting takes the `msg:` ref.
    #[schema(value_type = String)]
    pub id: uuid::Uuid,
    /// `msg:<conversation>/<seq>`.
    #[serde(rename = "ref")]
    pub reference: String,
    pub seq: u64,
    pub role: Option<cairn_models::Role>,
    pub content: String,
    pub turn_id: Option<String>,
    pub trust_origin: cairn_models::TrustOrigin,
    /// Epoch ms.
    pub ts: i64,
    pub agent: String,
    pub session: String,
    pub speaker: Option<String>,
    /// The caller's metadata, as sent.
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
}

/// `GET /v1/conversations/{id}/messages`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConversationPage {
    pub conversation_id: String,
    pub messages: Vec<MessageView>,
    pub total: usize,
}

/// A conversation of a partition.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ConversationInfo {
    pub conversation_id: String,
    /// Messages stored now.
    pub messages: usize,
    /// Epoch ms of its first and last stored message.
    pub first_ts: i64,
    pub last_ts: i64,
}

/// A message found by [`search_messages`](crate::Engine::search_messages).
#[derive(Debug, Serialize, ToSchema)]
pub struct MessageHit {
    pub message: MessageView,
    /// Cosine similarity of the query and the message (-1 to 1).
    pub score: f32,
}

/// `GET /v1/conversations`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConversationList {
    pub conversations: Vec<ConversationInfo>,
    pub total: usize,
}

impl MessageView {
    pub(crate) fn of(id: uuid::Uuid, p: StoredPoint) -> Self {
        MessageView {
            id,
            reference: p.reference(),
            seq: p.seq.unwrap_or(0),
            role: p.role,
            content: p.text.unwrap_or_default(),
            turn_id: p.turn_id,
            trust_origin: p.trust,
            ts: p.ts,
            agent: p.agent,
            session: p.session,
            speaker: p.speaker,
            metadata: p.metadata,
        }
    }
}
