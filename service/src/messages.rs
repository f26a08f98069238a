//! Conversation messages: what a door sends to record them, what it gets back, and the
//! operations on messages and conversations (record, import, read, search, delete).

use std::sync::Arc;

use cairn_ingest::messages::{KeyedMessage, KeylessMessages};
use cairn_ingest::{MessageInput, MessageReceipt};
use cairn_models::grant::Operation;
use cairn_models::scope::validate_component;
use cairn_models::{limits, Partition, PointKind, Ref, Scope, StoredPoint};
use cairn_store::Filter;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::access::{admit_write, Page, PageRequest, PAGE_MAX};
use crate::auth::{authorize, Principal};
use crate::engine::Engine;
use crate::error::ServiceError;
use crate::forget::{self, ForgetReport};

/// `POST /v1/messages` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MessagesBody {
    pub scope: Scope,
    /// 1 to 1000 messages.
    pub messages: Vec<PostedMessage>,
}

/// One message to record, verbatim, with the caller's optional idempotency key `message_id`.
// `MessageInput` (ingest's type) plus `message_id`, named `MessageInput` in the OpenAPI
// document; its own type because serde's `flatten` does not combine with
// `deny_unknown_fields`. No rustdoc links here: this doc is the schema's description.
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
    #[cfg_attr(
        feature = "jsonschema",
        schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")
    )]
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

impl Engine {
    /// Records 1 to [`limits::MAX_MESSAGES_PER_REQUEST`] messages verbatim. A message is
    /// identified by its key (`message_id`, else turn id and role, else `ts`, role and
    /// content); a message without any key is always new.
    pub async fn record_messages(
        self: &Arc<Self>,
        who: &Principal,
        scope: &Scope,
        messages: Vec<KeyedMessage>,
    ) -> Result<Vec<MessageReceipt>, ServiceError> {
        let mut scope = scope.clone();
        admit_write(who, &mut scope, Operation::WriteMessages)?;
        let scope = &scope;
        if messages.is_empty() {
            return Err(ServiceError::InvalidRequest(
                "send 1 to 1000 messages".into(),
            ));
        }
        limits::check_count("messages", messages.len(), limits::MAX_MESSAGES_PER_REQUEST)?;
        let receipts = self
            .ingestor
            .record_messages_with(scope, messages, KeylessMessages::New)
            .await?;
        self.note_written(receipts.iter().filter(|r| r.created).count() as u64);
        Ok(receipts)
    }

    /// Imports a whole conversation file (any length): messages without a key are keyed by
    /// content and occurrence, so importing the same file again stores nothing new.
    pub async fn import_messages(
        self: &Arc<Self>,
        who: &Principal,
        scope: &Scope,
        messages: Vec<MessageInput>,
    ) -> Result<Vec<MessageReceipt>, ServiceError> {
        let mut scope = scope.clone();
        admit_write(who, &mut scope, Operation::WriteMessages)?;
        let scope = &scope;
        let receipts = self.ingestor.record_messages(scope, messages).await?;
        self.note_written(receipts.iter().filter(|r| r.created).count() as u64);
        Ok(receipts)
    }

    /// A conversation's messages in order, one page of them; `not_found` when it has none in
    /// the partition.
    pub async fn conversation(
        &self,
        who: &Principal,
        partition: &Partition,
        id: &str,
        page: PageRequest,
    ) -> Result<Page<MessageView>, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        let filter = Filter::new()
            .eq("kind", PointKind::Message.as_str())
            .eq("conversation_id", id);
        let mut all: Vec<_> = self
            .store
            .scroll_all(partition, filter)
            .await?
            .into_iter()
            .map(|h| (h.id, h.point))
            .collect();
        if all.is_empty() {
            return Err(ServiceError::NotFound(format!(
                "no conversation {id} in this scope"
            )));
        }
        all.sort_by_key(|(_, p)| p.seq.unwrap_or(0));
        Ok(page.of(all
            .into_iter()
            .map(|(id, p)| MessageView::of(id, p))
            .collect()))
    }

    /// One message by its id (`MessageReceipt::id`); `not_found` when no message of the
    /// partition has it.
    pub async fn message_by_id(
        &self,
        who: &Principal,
        partition: &Partition,
        id: &str,
    ) -> Result<MessageView, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        let missing = || ServiceError::NotFound(format!("no message {id} in this scope"));
        let uuid = uuid::Uuid::parse_str(id).map_err(|_| missing())?;
        self.store
            .retrieve(partition, &[uuid], false)
            .await?
            .into_iter()
            .find(|h| h.point.kind == PointKind::Message)
            .map(|h| MessageView::of(h.id, h.point))
            .ok_or_else(missing)
    }

    /// Messages of the partition (or of one conversation) by meaning: cosine similarity of
    /// the query and each message, at least `min_score`, best first.
    pub async fn search_messages(
        &self,
        who: &Principal,
        partition: &Partition,
        query: &str,
        conversation: Option<&str>,
        limit: usize,
        min_score: Option<f32>,
    ) -> Result<Vec<MessageHit>, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        limits::check_bytes("query", query, limits::MAX_QUERY_BYTES)?;
        if query.trim().is_empty() {
            return Err(ServiceError::InvalidRequest("query is empty".into()));
        }
        let mut filter = Filter::new().eq("kind", PointKind::Message.as_str());
        if let Some(c) = conversation {
            validate_component("conversation_id", c)?;
            filter = filter.eq("conversation_id", c);
        }
        let dense = self.embedder.embed_query(query).await?;
        let hits = self
            .store
            .search(
                partition,
                cairn_store::SearchRequest {
                    mode: cairn_store::SearchMode::Dense(dense),
                    filter,
                    limit: limit.clamp(1, PAGE_MAX),
                    with_vectors: false,
                },
            )
            .await?;
        Ok(hits
            .into_iter()
            .filter(|h| min_score.is_none_or(|m| h.score >= m))
            .map(|h| MessageHit {
                score: h.score,
                message: MessageView::of(h.id, h.point),
            })
            .collect())
    }

    /// The partition's conversations, most recent activity first; one page of them.
    pub async fn conversations(
        &self,
        who: &Principal,
        partition: &Partition,
        page: PageRequest,
    ) -> Result<Page<ConversationInfo>, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        let filter = Filter::new().eq("kind", PointKind::Message.as_str());
        let mut by_id: std::collections::BTreeMap<String, ConversationInfo> = Default::default();
        for h in self.store.scroll_all(partition, filter).await? {
            let id = h.point.conversation_id.clone().unwrap_or_default();
            let ts = h.point.ts;
            let c = by_id.entry(id.clone()).or_insert_with(|| ConversationInfo {
                conversation_id: id,
                messages: 0,
                first_ts: ts,
                last_ts: ts,
            });
            c.messages += 1;
            c.first_ts = c.first_ts.min(ts);
            c.last_ts = c.last_ts.max(ts);
        }
        let mut out: Vec<ConversationInfo> = by_id.into_values().collect();
        out.sort_by(|a, b| {
            b.last_ts
                .cmp(&a.last_ts)
                .then_with(|| a.conversation_id.cmp(&b.conversation_id))
        });
        Ok(page.of(out))
    }

    /// Deletes one message (`msg:<conversation>/<seq>`) and what derives from it.
    pub async fn delete_message(
        &self,
        who: &Principal,
        partition: &Partition,
        reference: &str,
        hard: bool,
    ) -> Result<ForgetReport, ServiceError> {
        authorize(who, partition, Operation::Forget)?;
        let parsed = Ref::parse_input(reference)?;
        if !matches!(parsed, Ref::Msg { .. }) {
            return Err(ServiceError::InvalidRequest(format!(
                "{reference} is not a message ref (msg:<conversation>/<seq>)"
            )));
        }
        forget::forget(self, partition, &parsed, hard).await
    }

    /// Deletes a whole conversation and what derives from it.
    pub async fn delete_conversation(
        &self,
        who: &Principal,
        partition: &Partition,
        id: &str,
        hard: bool,
    ) -> Result<ForgetReport, ServiceError> {
        authorize(who, partition, Operation::Forget)?;
        validate_component("conversation_id", id)?;
        forget::forget(self, partition, &Ref::Conv(id.to_string()), hard).await
    }
}
