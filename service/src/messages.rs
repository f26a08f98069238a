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
    #[schema(value_type = crate::schema::Scope)]
    pub scope: Scope,
    /// 1 to 1000 messages.
    #[schema(value_type = Vec<crate::schema::MessageInput>)]
    pub messages: Vec<PostedMessage>,
}

/// One message of `POST /v1/messages`: a [`MessageInput`] plus the optional idempotency key
/// `message_id`. (Its own type because serde's `flatten` does not combine with
/// `deny_unknown_fields`.)
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostedMessage {
    pub conversation_id: String,
    pub role: cairn_models::Role,
    pub content: String,
    #[serde(default)]
    pub ts: Option<cairn_ingest::Timestamp>,
    #[serde(default)]
    pub turn_id: Option<String>,
    #[serde(default)]
    pub message_id: Option<String>,
    #[serde(default)]
    pub speaker: Option<String>,
    #[serde(default)]
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
    #[schema(value_type = Vec<crate::schema::MessageReceipt>)]
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
    #[schema(value_type = Option<crate::schema::Role>)]
    pub role: Option<cairn_models::Role>,
    pub content: String,
    pub turn_id: Option<String>,
    #[schema(value_type = crate::schema::TrustOrigin)]
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
