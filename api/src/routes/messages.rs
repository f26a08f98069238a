//! Conversation messages: record, list, delete.

use axum::extract::{Path, State};
use cairn_ingest::messages::KeyedMessage;
use cairn_service::forget::ForgetReport;
use cairn_service::messages::{ConversationList, ConversationPage, MessagesBody, MessagesResponse};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{detached, query_error, who, CommonErrors, DeleteQuery, QueryResult, ScopeQuery};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::json::Json;
use crate::SharedState;

pub(super) fn router() -> OpenApiRouter<SharedState> {
    OpenApiRouter::default()
        .routes(routes!(post_messages))
        .routes(routes!(delete_message))
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
    let who = who(&state, &caller).await?;
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
    let who = who(&state, &caller).await?;
    let all = state.engine.conversations(&who, &partition).await?;
    let total = all.len();
    Ok(Json(ConversationList {
        conversations: q.page(all),
        total,
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
    let who = who(&state, &caller).await?;
    let all = state.engine.conversation(&who, &partition, &id).await?;
    let total = all.len();
    Ok(Json(ConversationPage {
        conversation_id: id,
        messages: q.page(all),
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
    caller: Caller,
    Path(reference): Path<String>,
    query: QueryResult<DeleteQuery>,
) -> Result<Json<ForgetReport>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = q.partition()?;
    let who = who(&state, &caller).await?;
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
    let who = who(&state, &caller).await?;
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
