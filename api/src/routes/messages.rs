//! Conversation messages: record, list, delete.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use cairn_ingest::messages::{KeyedMessage, KeylessMessages};
use cairn_ingest::{MessageInput, MessageReceipt};
use cairn_models::limits;
use cairn_models::{PointKind, Ref, Scope, StoredPoint};
use cairn_store::Filter;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{detached, query_error, CommonErrors, DeleteQuery, QueryResult, ScopeQuery};
use crate::error::{ApiError, ErrorBody};
use crate::evidence::scroll_all;
use crate::forget::{self, ForgetReport};
use crate::json::Json;
use crate::SharedState;

pub(super) fn router() -> OpenApiRouter<SharedState> {
    OpenApiRouter::default()
        .routes(routes!(post_messages))
        .routes(routes!(delete_message))
        .routes(routes!(list_conversation))
        .routes(routes!(delete_conversation))
}

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
}

/// `GET /v1/conversations/{id}/messages`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConversationPage {
    pub conversation_id: String,
    pub messages: Vec<MessageView>,
    pub total: usize,
}

/// Record conversation messages verbatim. A message is identified by an explicit key: its
/// `message_id`, else its `turn_id` (with the role), else its `ts` (with role and content).
/// Recording a key again with the same content is a replay (`created: false`); with other
/// content, `409 conflict`. A message without any key is always new: two posts of "ok"
/// are two messages. Limits: content 32 KiB, metadata 16 KiB (`413 payload_too_large`).
#[utoipa::path(post, path = "/messages", tag = "messages", request_body = MessagesBody,
    responses(
        (status = 200, description = "One receipt per message", body = MessagesResponse),
        (status = 409, description = "`conflict`: a turn id already has other content", body = ErrorBody),
        CommonErrors,
    ))]
async fn post_messages(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Json(body): Json<MessagesBody>,
) -> Result<Json<MessagesResponse>, ApiError> {
    body.scope.validate()?;
    state.auth.check_scope(&headers, &body.scope)?;
    if body.messages.is_empty() {
        return Err(ApiError::InvalidRequest("send 1 to 1000 messages".into()));
    }
    limits::check_count(
        "messages",
        body.messages.len(),
        limits::MAX_MESSAGES_PER_REQUEST,
    )?;
    let messages: Vec<KeyedMessage> = body.messages.into_iter().map(Into::into).collect();
    detached(async move {
        let receipts = state
            .engine
            .ingestor
            .record_messages_with(&body.scope, messages, KeylessMessages::New)
            .await?;
        let created = receipts.iter().filter(|r| r.created).count() as u64;
        state.metrics.add("messages_recorded", created);
        state.engine.note_written(created);
        Ok(Json(MessagesResponse { receipts }))
    })
    .await
}

/// A conversation's messages in order.
#[utoipa::path(get, path = "/conversations/{id}/messages", tag = "messages",
    params(("id" = String, Path, description = "Conversation id"), ScopeQuery),
    responses(
        (status = 200, description = "One page of messages, by sequence number", body = ConversationPage),
        (status = 404, description = "`not_found`: no such conversation in this scope", body = ErrorBody),
        CommonErrors,
    ))]
async fn list_conversation(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    query: QueryResult<ScopeQuery>,
) -> Result<Json<ConversationPage>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = q.partition(&state, &headers)?;
    let filter = Filter::new()
        .eq("kind", PointKind::Message.as_str())
        .eq("conversation_id", id.as_str());
    let mut all: Vec<StoredPoint> = scroll_all(state.engine.store.as_ref(), &partition, filter)
        .await?
        .into_iter()
        .map(|h| h.point)
        .collect();
    if all.is_empty() {
        return Err(ApiError::NotFound(format!(
            "no conversation {id} in this scope"
        )));
    }
    all.sort_by_key(|p| p.seq.unwrap_or(0));
    let total = all.len();
    let messages = q
        .page(all)
        .into_iter()
        .map(|p| MessageView {
            reference: p.reference(),
            seq: p.seq.unwrap_or(0),
            role: p.role,
            content: p.text.unwrap_or_default(),
            turn_id: p.turn_id,
            trust_origin: p.trust,
            ts: p.ts,
            agent: p.agent,
            session: p.session,
        })
        .collect();
    Ok(Json(ConversationPage {
        conversation_id: id,
        messages,
        total,
    }))
}

/// Delete one message (`msg:<conversation>/<seq>`, URL-encoded) and what derives from it.
/// A completed turn whose message is deleted keeps a tombstone: its id cannot be completed
/// again (`409 turn_conflict`).
#[utoipa::path(delete, path = "/messages/{ref}", tag = "forget",
    params(("ref" = String, Path, description = "`msg:<conversation>/<seq>`, URL-encoded (`msg:c1%2F0`)"), DeleteQuery),
    responses(
        (status = 200, description = "What was removed and invalidated", body = ForgetReport),
        (status = 404, description = "`not_found`: no such message in this scope", body = ErrorBody),
        CommonErrors,
    ))]
async fn delete_message(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Path(reference): Path<String>,
    query: QueryResult<DeleteQuery>,
) -> Result<Json<ForgetReport>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = q.partition(&state, &headers)?;
    let parsed = Ref::parse_input(&reference)?;
    if !matches!(parsed, Ref::Msg { .. }) {
        return Err(ApiError::InvalidRequest(format!(
            "{reference} is not a message ref (msg:<conversation>/<seq>)"
        )));
    }
    detached(async move {
        let report = forget::forget(&state.engine, &partition, &parsed, q.hard).await?;
        state.metrics.add("forgets", 1);
        Ok(Json(report))
    })
    .await
}

/// Delete a whole conversation and what derives from it (tombstoning its completed turns).
#[utoipa::path(delete, path = "/conversations/{id}", tag = "forget",
    params(("id" = String, Path, description = "Conversation id"), DeleteQuery),
    responses(
        (status = 200, description = "What was removed and invalidated", body = ForgetReport),
        (status = 404, description = "`not_found`: no such conversation in this scope", body = ErrorBody),
        CommonErrors,
    ))]
async fn delete_conversation(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    query: QueryResult<DeleteQuery>,
) -> Result<Json<ForgetReport>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = q.partition(&state, &headers)?;
    cairn_models::scope::validate_component("conversation_id", &id)?;
    detached(async move {
        let report = forget::forget(&state.engine, &partition, &Ref::Conv(id), q.hard).await?;
        state.metrics.add("forgets", 1);
        Ok(Json(report))
    })
    .await
}
