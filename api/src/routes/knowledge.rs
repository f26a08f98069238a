//! Knowledge memory: entities, relationships, preferences, facts and predicate declarations.
//! Deleting any of them is `POST /v1/forget` with its ref (`ent:`, `rel:`, `pref:`, `fact:`).

use axum::extract::{Path, State};
use cairn_models::knowledge::{Entity, Fact, Predicate, Preference, Relationship};
use cairn_service::access::{partition, PageRequest};
use cairn_service::knowledge::{
    EntityRequest, FactConflict, FactOutcome, FactQuery, FactRequest, MergeRequest,
    PredicateRequest, PreferenceRequest, RelatedEntity, RelationshipRequest, Scored,
};
use cairn_service::suggestions::{SuggestRequest, Suggestion};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{default_ns, detached, query_error, CommonErrors, QueryResult, ScopeQuery};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::json::Json;
use crate::SharedState;

pub(super) fn router() -> OpenApiRouter<SharedState> {
    OpenApiRouter::default()
        .routes(routes!(add_entity, list_entities))
        .routes(routes!(search_entities))
        .routes(routes!(entities_by_name))
        .routes(routes!(merge_entities))
        .routes(routes!(suggest_entities))
        .routes(routes!(get_entity))
        .routes(routes!(related_entities))
        .routes(routes!(entity_relationships))
        .routes(routes!(add_relationship, list_relationships))
        .routes(routes!(add_preference, list_preferences))
        .routes(routes!(search_preferences))
        .routes(routes!(add_fact, list_facts))
        .routes(routes!(fact_conflicts))
        .routes(routes!(get_fact))
        .routes(routes!(declare_predicate, list_predicates))
}

// ---- query strings -----------------------------------------------------------------------

/// `GET /v1/entities` query string.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EntityListQuery {
    pub tenant: String,
    pub user: String,
    /// Default `default`.
    #[serde(default = "default_ns")]
    #[param(required = false)]
    pub namespace: String,
    /// Only entities of this type (`person`, `organization`, `location`, `event`, `object`,
    /// `other`; any case).
    #[serde(default, rename = "type")]
    pub entity_type: Option<String>,
    /// Page size (default 100, at most 1000).
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub offset: Option<usize>,
}

/// `GET /v1/entities/search` query string.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EntitySearchQuery {
    pub tenant: String,
    pub user: String,
    /// Default `default`.
    #[serde(default = "default_ns")]
    #[param(required = false)]
    pub namespace: String,
    /// What to look for (1 to 8192 bytes).
    pub q: String,
    /// Only entities of this type.
    #[serde(default, rename = "type")]
    pub entity_type: Option<String>,
    /// Most results (default 10, at most 100).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// `GET /v1/entities/by-name` query string.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ByNameQuery {
    pub tenant: String,
    pub user: String,
    /// Default `default`.
    #[serde(default = "default_ns")]
    #[param(required = false)]
    pub namespace: String,
    /// The name or alias, matched exactly but case- and space-insensitively.
    pub name: String,
}

/// `GET /v1/entities/{id}/related` query string.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RelatedQuery {
    pub tenant: String,
    pub user: String,
    /// Default `default`.
    #[serde(default = "default_ns")]
    #[param(required = false)]
    pub namespace: String,
    /// Follow only edges of this type (compared in canonical form: `Works at` = `WORKS_AT`).
    #[serde(default)]
    pub relationship_type: Option<String>,
    /// Hops to follow, 1 to 3 (default 1).
    #[serde(default)]
    pub depth: Option<u32>,
}

/// `GET /v1/relationships` query string.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RelationshipQuery {
    pub tenant: String,
    pub user: String,
    /// Default `default`.
    #[serde(default = "default_ns")]
    #[param(required = false)]
    pub namespace: String,
    /// Only the relationships with this entity at either end.
    #[serde(default)]
    pub entity_id: Option<String>,
    /// Page size (default 100, at most 1000).
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub offset: Option<usize>,
}

/// `GET /v1/preferences` query string.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PreferenceListQuery {
    pub tenant: String,
    pub user: String,
    /// Default `default`.
    #[serde(default = "default_ns")]
    #[param(required = false)]
    pub namespace: String,
    /// Only preferences of this category (case-insensitive).
    #[serde(default)]
    pub category: Option<String>,
    /// Page size (default 100, at most 1000).
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub offset: Option<usize>,
}

/// `GET /v1/preferences/search` query string.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PreferenceSearchQuery {
    pub tenant: String,
    pub user: String,
    /// Default `default`.
    #[serde(default = "default_ns")]
    #[param(required = false)]
    pub namespace: String,
    /// What to look for (1 to 8192 bytes).
    pub q: String,
    /// Only preferences of this category (case-insensitive).
    #[serde(default)]
    pub category: Option<String>,
    /// Most results (default 10, at most 100).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// `GET /v1/facts` query string.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct FactListQuery {
    pub tenant: String,
    pub user: String,
    /// Default `default`.
    #[serde(default = "default_ns")]
    #[param(required = false)]
    pub namespace: String,
    /// Only facts about this subject: its name, or the name or an alias of the entity so
    /// named (case-insensitive).
    #[serde(default)]
    pub subject: Option<String>,
    /// Only facts with this predicate (canonical form: `works at` = `WORKS_AT`).
    #[serde(default)]
    pub predicate: Option<String>,
    /// Every fact, superseded, expired and invalidated ones too (default: only those that
    /// hold at `at`).
    #[serde(default)]
    pub history: bool,
    /// The time "now" means, in epoch ms (default: now).
    #[serde(default)]
    pub at: Option<i64>,
    /// Page size (default 100, at most 1000).
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub offset: Option<usize>,
}

// ---- responses ---------------------------------------------------------------------------

/// `GET /v1/entities`, `GET /v1/entities/by-name`.
#[derive(Debug, Serialize, ToSchema)]
pub struct EntityList {
    pub entities: Vec<Entity>,
    /// All matching entities (the page may hold fewer).
    pub total: usize,
}

/// `GET /v1/entities/search`: best first.
#[derive(Debug, Serialize, ToSchema)]
pub struct EntitySearch {
    pub results: Vec<Scored<Entity>>,
}

/// `GET /v1/entities/{id}/related`: nearest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct RelatedList {
    pub related: Vec<RelatedEntity>,
}

/// `GET /v1/relationships`, `GET /v1/entities/{id}/relationships`: oldest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct RelationshipList {
    pub relationships: Vec<Relationship>,
    pub total: usize,
}

/// `GET /v1/preferences`: oldest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct PreferenceList {
    pub preferences: Vec<Preference>,
    pub total: usize,
}

/// `GET /v1/preferences/search`: best first.
#[derive(Debug, Serialize, ToSchema)]
pub struct PreferenceSearch {
    pub results: Vec<Scored<Preference>>,
}

/// `GET /v1/facts`: oldest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct FactList {
    pub facts: Vec<Fact>,
    pub total: usize,
}

/// `GET /v1/facts/conflicts`.
#[derive(Debug, Serialize, ToSchema)]
pub struct FactConflictList {
    pub conflicts: Vec<FactConflict>,
    pub total: usize,
}

/// `GET /v1/predicates`: by name.
#[derive(Debug, Serialize, ToSchema)]
pub struct PredicateList {
    pub predicates: Vec<Predicate>,
    pub total: usize,
}

// ---- entities ----------------------------------------------------------------------------

/// Store an entity (`ent:<id>`). Idempotent: the same name (case-insensitive) and type is
/// the same entity; writing it again adds the new aliases and replaces the description and
/// subtype when given. Writing the name of an entity that was merged answers its survivor.
/// `400 invalid_request` for an unknown type.
#[utoipa::path(post, path = "/entities", tag = "knowledge", request_body = EntityRequest,
    responses((status = 200, description = "The stored entity", body = Entity), CommonErrors))]
async fn add_entity(
    State(state): State<SharedState>,
    caller: Caller,
    Json(body): Json<EntityRequest>,
) -> Result<Json<Entity>, ApiError> {
    let who = caller.principal().clone();
    detached(async move { Ok(Json(state.engine.add_entity(&who, body).await?)) }).await
}

/// The scope's entities, oldest first, optionally of one type. Merged entities are not
/// listed (their survivors are).
#[utoipa::path(get, path = "/entities", tag = "knowledge", params(EntityListQuery),
    responses((status = 200, description = "One page of entities", body = EntityList), CommonErrors))]
async fn list_entities(
    State(state): State<SharedState>,
    caller: Caller,
    query: QueryResult<EntityListQuery>,
) -> Result<Json<EntityList>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = partition(&q.tenant, &q.user, &q.namespace)?;
    let who = caller.principal().clone();
    let page = state
        .engine
        .list_entities(
            &who,
            &partition,
            q.entity_type.as_deref(),
            PageRequest::new(q.offset, q.limit),
        )
        .await?;
    Ok(Json(EntityList {
        entities: page.items,
        total: page.total,
    }))
}

/// Entities by meaning and name (dense and BM25 search over name, type, aliases and
/// description), best first. Merged entities are not found (their survivors are).
#[utoipa::path(get, path = "/entities/search", tag = "knowledge", params(EntitySearchQuery),
    responses((status = 200, description = "The best matches, with their rank scores", body = EntitySearch), CommonErrors))]
async fn search_entities(
    State(state): State<SharedState>,
    caller: Caller,
    query: QueryResult<EntitySearchQuery>,
) -> Result<Json<EntitySearch>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = partition(&q.tenant, &q.user, &q.namespace)?;
    let who = caller.principal().clone();
    let results = state
        .engine
        .search_entities(
            &who,
            &partition,
            &q.q,
            q.entity_type.as_deref(),
            q.limit.unwrap_or(cairn_service::knowledge::DEFAULT_SEARCH),
        )
        .await?;
    Ok(Json(EntitySearch { results }))
}

/// The entities whose name or an alias is `name`, exactly but case- and
/// space-insensitively: exact name matches first, then the oldest. A merged entity's
/// name finds its survivor.
#[utoipa::path(get, path = "/entities/by-name", tag = "knowledge", params(ByNameQuery),
    responses((status = 200, description = "The entities of that name", body = EntityList), CommonErrors))]
async fn entities_by_name(
    State(state): State<SharedState>,
    caller: Caller,
    query: QueryResult<ByNameQuery>,
) -> Result<Json<EntityList>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = partition(&q.tenant, &q.user, &q.namespace)?;
    let who = caller.principal().clone();
    let entities = state
        .engine
        .entities_by_name(&who, &partition, &q.name)
        .await?;
    let total = entities.len();
    Ok(Json(EntityList { entities, total }))
}

/// Merge a duplicate (`source_id`) into a survivor (`target_id`): the duplicate's
/// relationships move to the survivor, its name and aliases become the survivor's aliases,
/// and its id keeps resolving (`GET /v1/entities/{id}` answers it with `merged_into`).
/// Idempotent: merging again answers the survivor. `409 conflict` when the source was
/// merged into another entity or the target was itself merged; `400` to merge an entity
/// into itself.
#[utoipa::path(post, path = "/entities/merge", tag = "knowledge", request_body = MergeRequest,
    responses(
        (status = 200, description = "The survivor", body = Entity),
        (status = 404, description = "`not_found`: no such entity in this scope", body = ErrorBody),
        (status = 409, description = "`conflict`: already merged elsewhere, or the target was merged", body = ErrorBody),
        CommonErrors,
    ))]
async fn merge_entities(
    State(state): State<SharedState>,
    caller: Caller,
    Json(body): Json<MergeRequest>,
) -> Result<Json<Entity>, ApiError> {
    let who = caller.principal().clone();
    detached(async move { Ok(Json(state.engine.merge_entities(&who, body).await?)) }).await
}

/// `POST /v1/entities/suggest` answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct SuggestionList {
    pub suggestions: Vec<Suggestion>,
}

/// Propose entity candidates from the stored messages, without a language model: names
/// (capitalized phrases) mentioned in at least `min_mentions` messages (default 2) and not
/// known as an entity yet, each citing the messages that mention it (type `person` when the
/// name is also a message speaker, else `other`). They are pending candidates: nothing is
/// known until a trusted caller approves one (`POST /v1/candidates/{id}/approve`), which
/// writes the entity. Idempotent: the same messages give the same candidates.
#[utoipa::path(post, path = "/entities/suggest", tag = "knowledge", request_body = SuggestRequest,
    responses(
        (status = 200, description = "The proposed candidates", body = SuggestionList),
        CommonErrors,
    ))]
async fn suggest_entities(
    State(state): State<SharedState>,
    caller: Caller,
    Json(body): Json<SuggestRequest>,
) -> Result<Json<SuggestionList>, ApiError> {
    let who = caller.principal().clone();
    detached(async move {
        let suggestions = state.engine.suggest_entities(&who, body).await?;
        Ok(Json(SuggestionList { suggestions }))
    })
    .await
}

/// One entity. A merged entity answers itself, with `merged_into` naming its survivor.
#[utoipa::path(get, path = "/entities/{id}", tag = "knowledge",
    params(("id" = String, Path, description = "Entity id"), ScopeQuery),
    responses(
        (status = 200, description = "The entity", body = Entity),
        (status = 404, description = "`not_found`: no such entity in this scope", body = ErrorBody),
        CommonErrors,
    ))]
async fn get_entity(
    State(state): State<SharedState>,
    caller: Caller,
    Path(id): Path<String>,
    query: QueryResult<ScopeQuery>,
) -> Result<Json<Entity>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = q.partition()?;
    let who = caller.principal().clone();
    Ok(Json(state.engine.get_entity(&who, &partition, &id).await?))
}

/// The entities reachable from an entity over relationships in either direction, up to
/// `depth` hops (1 to 3), nearest first, each with the edge it was reached over. A merged
/// entity starts from its survivor; the start itself is never in the answer.
#[utoipa::path(get, path = "/entities/{id}/related", tag = "knowledge",
    params(("id" = String, Path, description = "Entity id"), RelatedQuery),
    responses(
        (status = 200, description = "The related entities", body = RelatedList),
        (status = 404, description = "`not_found`: no such entity in this scope", body = ErrorBody),
        CommonErrors,
    ))]
async fn related_entities(
    State(state): State<SharedState>,
    caller: Caller,
    Path(id): Path<String>,
    query: QueryResult<RelatedQuery>,
) -> Result<Json<RelatedList>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = partition(&q.tenant, &q.user, &q.namespace)?;
    let who = caller.principal().clone();
    let related = state
        .engine
        .related_entities(
            &who,
            &partition,
            &id,
            q.relationship_type.as_deref(),
            q.depth,
        )
        .await?;
    Ok(Json(RelatedList { related }))
}

/// The relationships with an entity at either end, oldest first.
#[utoipa::path(get, path = "/entities/{id}/relationships", tag = "knowledge",
    params(("id" = String, Path, description = "Entity id"), ScopeQuery),
    responses(
        (status = 200, description = "One page of relationships", body = RelationshipList),
        (status = 404, description = "`not_found`: no such entity in this scope", body = ErrorBody),
        CommonErrors,
    ))]
async fn entity_relationships(
    State(state): State<SharedState>,
    caller: Caller,
    Path(id): Path<String>,
    query: QueryResult<ScopeQuery>,
) -> Result<Json<RelationshipList>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = q.partition()?;
    let who = caller.principal().clone();
    state.engine.get_entity(&who, &partition, &id).await?;
    let page = state
        .engine
        .list_relationships(&who, &partition, Some(&id), q.page())
        .await?;
    Ok(Json(RelationshipList {
        relationships: page.items,
        total: page.total,
    }))
}

// ---- relationships -----------------------------------------------------------------------

/// Store a typed, directed edge between two entities of the scope (`rel:<id>`).
/// Idempotent: the same ends and type are the same relationship (its properties are
/// replaced). An end that was merged is replaced by its survivor.
#[utoipa::path(post, path = "/relationships", tag = "knowledge", request_body = RelationshipRequest,
    responses(
        (status = 200, description = "The stored relationship", body = Relationship),
        (status = 404, description = "`not_found`: an end is no entity of this scope", body = ErrorBody),
        CommonErrors,
    ))]
async fn add_relationship(
    State(state): State<SharedState>,
    caller: Caller,
    Json(body): Json<RelationshipRequest>,
) -> Result<Json<Relationship>, ApiError> {
    let who = caller.principal().clone();
    detached(async move { Ok(Json(state.engine.add_relationship(&who, body).await?)) }).await
}

/// The scope's relationships (or those touching `entity_id`), oldest first.
#[utoipa::path(get, path = "/relationships", tag = "knowledge", params(RelationshipQuery),
    responses((status = 200, description = "One page of relationships", body = RelationshipList), CommonErrors))]
async fn list_relationships(
    State(state): State<SharedState>,
    caller: Caller,
    query: QueryResult<RelationshipQuery>,
) -> Result<Json<RelationshipList>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = partition(&q.tenant, &q.user, &q.namespace)?;
    let who = caller.principal().clone();
    let page = state
        .engine
        .list_relationships(
            &who,
            &partition,
            q.entity_id.as_deref(),
            PageRequest::new(q.offset, q.limit),
        )
        .await?;
    Ok(Json(RelationshipList {
        relationships: page.items,
        total: page.total,
    }))
}

// ---- preferences -------------------------------------------------------------------------

/// Store a preference of the user (`pref:<id>`). Idempotent: the same category and text is
/// the same preference (its context is replaced when given).
#[utoipa::path(post, path = "/preferences", tag = "knowledge", request_body = PreferenceRequest,
    responses((status = 200, description = "The stored preference", body = Preference), CommonErrors))]
async fn add_preference(
    State(state): State<SharedState>,
    caller: Caller,
    Json(body): Json<PreferenceRequest>,
) -> Result<Json<Preference>, ApiError> {
    let who = caller.principal().clone();
    detached(async move { Ok(Json(state.engine.add_preference(&who, body).await?)) }).await
}

/// The scope's preferences, oldest first, optionally of one category.
#[utoipa::path(get, path = "/preferences", tag = "knowledge", params(PreferenceListQuery),
    responses((status = 200, description = "One page of preferences", body = PreferenceList), CommonErrors))]
async fn list_preferences(
    State(state): State<SharedState>,
    caller: Caller,
    query: QueryResult<PreferenceListQuery>,
) -> Result<Json<PreferenceList>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = partition(&q.tenant, &q.user, &q.namespace)?;
    let who = caller.principal().clone();
    let page = state
        .engine
        .list_preferences(
            &who,
            &partition,
            q.category.as_deref(),
            PageRequest::new(q.offset, q.limit),
        )
        .await?;
    Ok(Json(PreferenceList {
        preferences: page.items,
        total: page.total,
    }))
}

/// Preferences by meaning (dense and BM25 search), best first, optionally of one category.
#[utoipa::path(get, path = "/preferences/search", tag = "knowledge", params(PreferenceSearchQuery),
    responses((status = 200, description = "The best matches, with their rank scores", body = PreferenceSearch), CommonErrors))]
async fn search_preferences(
    State(state): State<SharedState>,
    caller: Caller,
    query: QueryResult<PreferenceSearchQuery>,
) -> Result<Json<PreferenceSearch>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = partition(&q.tenant, &q.user, &q.namespace)?;
    let who = caller.principal().clone();
    let results = state
        .engine
        .search_preferences(
            &who,
            &partition,
            &q.q,
            q.category.as_deref(),
            q.limit.unwrap_or(cairn_service::knowledge::DEFAULT_SEARCH),
        )
        .await?;
    Ok(Json(PreferenceSearch { results }))
}

// ---- facts -------------------------------------------------------------------------------

/// Store a fact (`fact:<id>`): a subject–predicate–object triple with validity, confidence
/// and evidence. A current fact with the same subject and predicate, another object and an
/// overlapping validity is *superseded* when `supersede` is set or the predicate is declared
/// single-valued (`PUT /v1/predicates`); stands beside it when the predicate is
/// multi-valued; otherwise both stay current, the answer names it in `conflicts_with`,
/// and recall shows the conflict. Idempotent: the same triple (and `valid_from`) is the
/// same fact, its evidence added. Every evidence ref (`doc:`, `msg:`, `evt:`, `fact:`) must
/// be stored in the scope (`422 evidence_not_found`); forgetting it later invalidates the
/// fact.
#[utoipa::path(post, path = "/facts", tag = "knowledge", request_body = FactRequest,
    responses(
        (status = 200, description = "The stored fact, what it superseded and what it conflicts with", body = FactOutcome),
        (status = 422, description = "`evidence_not_found`: an evidence ref does not exist in this scope", body = ErrorBody),
        CommonErrors,
    ))]
async fn add_fact(
    State(state): State<SharedState>,
    caller: Caller,
    Json(body): Json<FactRequest>,
) -> Result<Json<FactOutcome>, ApiError> {
    let who = caller.principal().clone();
    detached(async move { Ok(Json(state.engine.add_fact(&who, body).await?)) }).await
}

/// The scope's facts, oldest first: those that hold now (or at `at`), or with `history`
/// every one, superseded, expired and invalidated ones too.
#[utoipa::path(get, path = "/facts", tag = "knowledge", params(FactListQuery),
    responses((status = 200, description = "One page of facts", body = FactList), CommonErrors))]
async fn list_facts(
    State(state): State<SharedState>,
    caller: Caller,
    query: QueryResult<FactListQuery>,
) -> Result<Json<FactList>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = partition(&q.tenant, &q.user, &q.namespace)?;
    let who = caller.principal().clone();
    let query = FactQuery {
        subject: q.subject.clone(),
        predicate: q.predicate.clone(),
        history: q.history,
        at: q.at,
    };
    let page = state
        .engine
        .list_facts(&who, &partition, query, PageRequest::new(q.offset, q.limit))
        .await?;
    Ok(Json(FactList {
        facts: page.items,
        total: page.total,
    }))
}

/// The scope's open conflicts: current facts with the same subject and predicate,
/// different objects and overlapping validity, whose predicate is not declared. Resolve
/// one by writing the right fact with `supersede: true`, by declaring the predicate, or by
/// forgetting the wrong fact (`POST /v1/forget` with its `fact:` ref).
#[utoipa::path(get, path = "/facts/conflicts", tag = "knowledge", params(ScopeQuery),
    responses((status = 200, description = "One page of conflicts, by subject and predicate", body = FactConflictList), CommonErrors))]
async fn fact_conflicts(
    State(state): State<SharedState>,
    caller: Caller,
    query: QueryResult<ScopeQuery>,
) -> Result<Json<FactConflictList>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = q.partition()?;
    let who = caller.principal().clone();
    let page = state
        .engine
        .fact_conflicts(&who, &partition, q.page())
        .await?;
    Ok(Json(FactConflictList {
        conflicts: page.items,
        total: page.total,
    }))
}

/// One fact, whatever its status (current, superseded or invalidated).
#[utoipa::path(get, path = "/facts/{id}", tag = "knowledge",
    params(("id" = String, Path, description = "Fact id"), ScopeQuery),
    responses(
        (status = 200, description = "The fact", body = Fact),
        (status = 404, description = "`not_found`: no such fact in this scope", body = ErrorBody),
        CommonErrors,
    ))]
async fn get_fact(
    State(state): State<SharedState>,
    caller: Caller,
    Path(id): Path<String>,
    query: QueryResult<ScopeQuery>,
) -> Result<Json<Fact>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = q.partition()?;
    let who = caller.principal().clone();
    Ok(Json(state.engine.get_fact(&who, &partition, &id).await?))
}

/// Declare how many objects a predicate may have per subject: `single` (a new object
/// supersedes the current one: `lives_in`, `works_at`) or `multi` (objects stand side by
/// side: `knows`, `likes`). Undeclared predicates are neither: a second object is an open
/// conflict. Idempotent; declaring again replaces the cardinality for later writes.
#[utoipa::path(put, path = "/predicates", tag = "knowledge", request_body = PredicateRequest,
    responses((status = 200, description = "The declaration, under the predicate's canonical name", body = Predicate), CommonErrors))]
async fn declare_predicate(
    State(state): State<SharedState>,
    caller: Caller,
    Json(body): Json<PredicateRequest>,
) -> Result<Json<Predicate>, ApiError> {
    let who = caller.principal().clone();
    detached(async move { Ok(Json(state.engine.declare_predicate(&who, body).await?)) }).await
}

/// The scope's declared predicates, by name.
#[utoipa::path(get, path = "/predicates", tag = "knowledge", params(ScopeQuery),
    responses((status = 200, description = "One page of declared predicates", body = PredicateList), CommonErrors))]
async fn list_predicates(
    State(state): State<SharedState>,
    caller: Caller,
    query: QueryResult<ScopeQuery>,
) -> Result<Json<PredicateList>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = q.partition()?;
    let who = caller.principal().clone();
    let page = state
        .engine
        .list_predicates(&who, &partition, q.page())
        .await?;
    Ok(Json(PredicateList {
        predicates: page.items,
        total: page.total,
    }))
}
