//! Conversation messages: record, read, search, list, delete.

use axum::extract::{Path, State};
use cairn_ingest::messages::KeyedMessage;
use cairn_service::access::partition;
use cairn_service::forget::ForgetReport;
use cairn_service::messages::{
    ConversationList, ConversationPage, MessageHit, MessageView, MessagesBody, MessagesResponse,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{
    default_ns, detached, query_error, CommonErrors, DeleteQuery, QueryResult, ScopeQuery,
};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::json::Json;
use crate::SharedState;

pub(super) fn router() -> OpenApiRouter<SharedState> {
    OpenApiRouter::default()
        .routes(routes!(post_messages))
        .routes(routes!(get_message, delete_message))
        .routes(routes!(search_messages))
        .routes(routes!(list_conversation))
        .routes(routes!(list_conversations))
        .routes(routes!(delete_conversation))
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
    caller: Caller,
    Json(body): Json<MessagesBody>,
) -> Result<Json<MessagesResponse>, ApiError> {
    let who = caller.principal().clone();
    let messages: Vec<KeyedMessage> = body.messages.into_iter().map(Into::into).collect();
    detached(async move {
        let receipts = state
            .engine
            .record_messages(&who, &body.scope, messages)
            .await?;
        let created = receipts.iter().filter(|r| r.created).count() as u64;
        state.metrics.add("messages_recorded", created);
        Ok(Json(MessagesResponse { receipts }))
    })
    .await
}

/// `GET /v1/messages/search` query string.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct MessageSearchQuery {
    pub tenant: String,
    pub user: String,
    /// Default `default`.
    #[serde(default = "default_ns")]
    #[param(required = false)]
    pub namespace: String,
    /// What to look for (1 to 8192 bytes).
    pub q: String,
    /// Only messages of this conversation.
    #[serde(default)]
    pub conversation_id: Option<String>,
    /// Most results (default 10, at most 1000).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Only messages at least this similar to the query (cosine, -1 to 1).
    #[serde(default)]
    pub min_score: Option<f32>,
}

/// `GET /v1/messages/search`: most similar first.
#[derive(Debug, Serialize, ToSchema)]
pub struct MessageSearch {
    pub results: Vec<MessageHit>,
}

/// One message by its id (the `id` of its receipt or listing).
#[utoipa::path(get, path = "/messages/{ref}", tag = "messages",
    params(("ref" = String, Path, description = "The message's id (`MessageView.id`, a UUID)"), ScopeQuery),
    responses(
        (status = 200, description = "The message", body = MessageView),
        (status = 404, description = "`not_found`: no message with that id in this scope", body = ErrorBody),
        CommonErrors,
    ))]
async fn get_message(
    State(state): State<SharedState>,
    caller: Caller,
    Path(id): Path<String>,
    query: QueryResult<ScopeQuery>,
) -> Result<Json<MessageView>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = q.partition()?;
    let who = caller.principal().clone();
    Ok(Json(
        state.engine.message_by_id(&who, &partition, &id).await?,
    ))
}

/// Messages of the scope (or of one conversation) by meaning: the cosine similarity of the
/// query and each message, most similar first, optionally at least `min_score`.
#[utoipa::path(get, path = "/messages/search", tag = "messages", params(MessageSearchQuery),
    responses((status = 200, description = "The most similar messages, with their scores", body = MessageSearch), CommonErrors))]
async fn search_messages(
    State(state): State<SharedState>,
    caller: Caller,
    query: QueryResult<MessageSearchQuery>,
) -> Result<Json<MessageSearch>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = partition(&q.tenant, &q.user, &q.namespace)?;
    let who = caller.principal().clone();
    let results = state
        .engine
        .search_messages(
            &who,
            &partition,
            &q.q,
            q.conversation_id.as_deref(),
            q.limit.unwrap_or(10),
            q.min_score,
        )
        .await?;
    Ok(Json(MessageSearch { results }))
}

/// The scope's conversations, most recent activity first.
#[utoipa::path(get, path = "/conversations", tag = "messages", params(ScopeQuery),
    responses((status = 200, description = "One page of conversations", body = ConversationList), CommonErrors))]
async fn list_conversations(
    State(state): State<SharedState>,
    caller: Caller,
    query: QueryResult<ScopeQuery>,
) -> Result<Json<ConversationList>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = q.partition()?;
    let who = caller.principal().clone();
    let page = state
        .engine
        .conversations(&who, &partition, q.page())
        .await?;
    Ok(Json(ConversationList {
        conversations: page.items,
        total: page.total,
    }))
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
    caller: Caller,
    Path(id): Path<String>,
    query: QueryResult<ScopeQuery>,
) -> Result<Json<ConversationPage>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = q.partition()?;
    let who = caller.principal().clone();
    let page = state
        .engine
        .conversation(&who, &partition, &id, q.page())
        .await?;
    Ok(Json(ConversationPage {
        conversation_id: id,
        messages: page.items,
        total: page.total,
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
    caller: Caller,
    Path(reference): Path<String>,
    query: QueryResult<DeleteQuery>,
) -> Result<Json<ForgetReport>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = q.partition()?;
    let who = caller.principal().clone();
    detached(async move {
        let report = state
            .engine
            .delete_message(&who, &partition, &reference, q.hard)
            .await?;
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
    caller: Caller,
    Path(id): Path<String>,
    query: QueryResult<DeleteQuery>,
) -> Result<Json<ForgetReport>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = q.partition()?;
    let who = caller.principal().clone();
    detached(async move {
        let report = state
            .engine
            .delete_conversation(&who, &partition, &id, q.hard)
            .await?;
        state.metrics.add("forgets", 1);
        Ok(Json(report))
    })
    .await
}
