//! The service's operations: what every door (HTTP, CLI, MCP, the evaluation harness) calls.
//!
//! Each operation takes the caller's [`Principal`], validates its input, authorizes it with
//! the one policy ([`authorize`]), takes the locks it needs in the documented order and
//! schedules the vector index build after writes. A door only translates: it reads its
//! transport's request into these types and writes the result (or the [`ServiceError`]'s
//! stable code) back.

use std::sync::Arc;

use cairn_ingest::catalog;
use cairn_ingest::messages::{KeyedMessage, KeylessMessages};
use cairn_ingest::{
    DocStatus, DocumentInput, DocumentReport, MessageInput, MessageReceipt, Outcome, Progress,
};
use cairn_models::scope::validate_component;
use cairn_models::{
    limits, DocumentInfo, MemoryPack, Partition, PointKind, Ref, Scope, TurnEnvelope,
};
use cairn_recall::RecallRequest;
use cairn_store::Filter;

use crate::auth::{authorize, bind_agent, Principal};
use crate::candidates::{
    self, CandidateRequest, CandidateStatus, CandidateView, DecisionRequest, ProposeResponse,
};
use crate::documents::{ChunkView, Counts, DocumentBody, FileUpload};
use crate::engine::Engine;
use crate::error::ServiceError;
use crate::events::{self, EventReceipt, EventRequest, EventView};
use crate::forget::{self, ForgetReport};
use crate::messages::{ConversationInfo, MessageHit, MessageView};
use crate::recall::{check_filters, ForgetRequest, RecallBody};
use crate::turns::{self, CompleteRequest, PrepareRequest, TurnReceipt};
use cairn_models::grant::Operation;

pub(crate) use crate::access::{admit, admit_write};
pub use crate::access::{page, partition, PAGE_DEFAULT, PAGE_MAX};

impl Engine {
    // ---- recall and agent turns ------------------------------------------------------

    /// A token-budgeted MemoryPack for a query.
    pub async fn recall(
        &self,
        who: &Principal,
        req: RecallBody,
    ) -> Result<MemoryPack, ServiceError> {
        admit(who, &req.scope, Operation::Recall)?;
        check_filters(&req.filters)?;
        Ok(self
            .recaller
            .recall(&RecallRequest {
                scope: req.scope,
                query: req.query,
                budget: req.token_budget,
                filters: req.filters,
            })
            .await?)
    }

    /// `agent-turn-v1` prepare: recall before the model call (persists nothing).
    pub async fn prepare_turn(
        &self,
        who: &Principal,
        req: PrepareRequest,
    ) -> Result<TurnEnvelope, ServiceError> {
        admit(who, &req.scope, Operation::Recall)?;
        check_filters(&req.filters)?;
        turns::prepare(self, req).await
    }

    /// `agent-turn-v1` complete: records the exact user and assistant messages, idempotently.
    pub async fn complete_turn(
        self: &Arc<Self>,
        who: &Principal,
        turn_id: &str,
        req: CompleteRequest,
    ) -> Result<TurnReceipt, ServiceError> {
        let mut req = req;
        admit_write(who, &mut req.scope, Operation::CompleteTurn)?;
        let receipt = turns::complete(self, turn_id, req).await?;
        // Replays write nothing; counting them as two messages only brings an index build
        // slightly forward.
        self.note_written(2);
        Ok(receipt)
    }

    // ---- documents -------------------------------------------------------------------

    /// Stores a text or Markdown document sent as JSON.
    pub async fn ingest_text(
        self: &Arc<Self>,
        who: &Principal,
        body: DocumentBody,
    ) -> Result<DocumentReport, ServiceError> {
        let mut body = body;
        admit_write(who, &mut body.scope, Operation::WriteDocuments)?;
        let (scope, input) = body.into_input()?;
        self.ingest_one(&scope, input).await
    }

    /// Stores an uploaded file (text, Markdown, PDF).
    pub async fn ingest_file(
        self: &Arc<Self>,
        who: &Principal,
        upload: FileUpload,
    ) -> Result<DocumentReport, ServiceError> {
        let mut upload = upload;
        admit_write(who, &mut upload.scope, Operation::WriteDocuments)?;
        let (scope, input) = upload.into_input()?;
        self.ingest_one(&scope, input).await
    }

    async fn ingest_one(
        self: &Arc<Self>,
        scope: &Scope,
        input: DocumentInput,
    ) -> Result<DocumentReport, ServiceError> {
        let noop: Arc<dyn Fn(Progress) + Send + Sync> = Arc::new(|_| {});
        let outcome = self
            .ingestor
            .ingest_documents(scope, vec![input], noop)
            .await
            .pop()
            .ok_or_else(|| ServiceError::Internal("ingest returned no outcome".into()))?;
        let report = outcome.result?;
        if report.status != DocStatus::Unchanged {
            self.note_written(u64::from(report.chunks));
        }
        Ok(report)
    }

    /// Stores a batch of documents (files, a corpus), reporting progress; one outcome per
    /// input, a failed file costing only itself. After the batch the vector index is built
    /// in place when the batch wrote at least `OPTIMIZE_AFTER_CHUNKS` chunks (the same
    /// threshold as the server's background build); the outcome says how long it took.
    pub async fn ingest_batch(
        self: &Arc<Self>,
        who: &Principal,
        scope: &Scope,
        inputs: Vec<DocumentInput>,
        progress: Arc<dyn Fn(Progress) + Send + Sync>,
    ) -> Result<BatchOutcome, ServiceError> {
        let mut scope = scope.clone();
        admit_write(who, &mut scope, Operation::WriteDocuments)?;
        let scope = &scope;
        let written = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counting: Arc<dyn Fn(Progress) + Send + Sync> = {
            let written = Arc::clone(&written);
            Arc::new(move |p| {
                if let Progress::Written { chunks } = &p {
                    written.fetch_add(*chunks as u64, std::sync::atomic::Ordering::Relaxed);
                }
                progress(p)
            })
        };
        let outcomes = self
            .ingestor
            .ingest_documents(scope, inputs, counting)
            .await;
        let chunks = written.load(std::sync::atomic::Ordering::Relaxed);
        let index_built = self.optimize_after_bulk(chunks).await?;
        Ok(BatchOutcome {
            outcomes,
            chunks,
            index_built,
        })
    }

    /// The partition's documents (current versions), sorted by source.
    pub async fn list_documents(
        &self,
        who: &Principal,
        partition: &Partition,
    ) -> Result<Vec<DocumentInfo>, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        Ok(catalog::list_documents(self.store.as_ref(), partition).await?)
    }

    /// One document.
    pub async fn get_document(
        &self,
        who: &Principal,
        partition: &Partition,
        id: &str,
    ) -> Result<DocumentInfo, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        catalog::get_document(self.store.as_ref(), partition, id)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("no document {id} in this scope")))
    }

    /// The chunks of a document's current version, in order.
    pub async fn document_chunks(
        &self,
        who: &Principal,
        partition: &Partition,
        id: &str,
    ) -> Result<Vec<ChunkView>, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        let not_found = || ServiceError::NotFound(format!("no document {id} in this scope"));
        validate_component("doc_id", id).map_err(|_| not_found())?;
        catalog::get_document(self.store.as_ref(), partition, id)
            .await?
            .ok_or_else(not_found)?;
        let filter = Filter::new()
            .eq("kind", PointKind::Chunk.as_str())
            .eq("doc_id", id);
        let mut chunks: Vec<ChunkView> = self
            .store
            .scroll_all(partition, filter)
            .await?
            .into_iter()
            .map(|h| ChunkView {
                reference: h.point.reference(),
                chunk_index: h.point.chunk_index.unwrap_or(0),
                page: h.point.page,
                span: h.point.span,
                heading: h.point.heading,
                text: h.point.text.unwrap_or_default(),
            })
            .collect();
        chunks.sort_by_key(|c| c.chunk_index);
        Ok(chunks)
    }

    /// Deletes a document (every source at this id, all its chunks) and what derives from it.
    pub async fn delete_document(
        &self,
        who: &Principal,
        partition: &Partition,
        id: &str,
        hard: bool,
    ) -> Result<DocumentInfo, ServiceError> {
        authorize(who, partition, Operation::Forget)?;
        let not_found = || ServiceError::NotFound(format!("no document {id} in this scope"));
        validate_component("doc_id", id).map_err(|_| not_found())?;
        let (mut deleted, _) = forget::forget_document(self, partition, id, hard).await?;
        deleted.pop().ok_or_else(not_found)
    }

    /// Counts per kind in the partition.
    pub async fn counts(
        &self,
        who: &Principal,
        partition: &Partition,
    ) -> Result<Counts, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        let s = catalog::stats(self.store.as_ref(), partition).await?;
        // Knowledge: what is known now (merged entities and fact history left out).
        let active = |kind: PointKind| {
            let filter = Filter::new()
                .eq("kind", kind.as_str())
                .not_eq("keys", cairn_models::knowledge::key::INACTIVE);
            async move { self.store.count(partition, filter).await }
        };
        Ok(Counts {
            documents: s.documents,
            chunks: s.chunks,
            messages: s.messages,
            turns: s.turns,
            entities: active(PointKind::Entity).await?,
            preferences: active(PointKind::Preference).await?,
            facts: active(PointKind::Fact).await?,
            relationships: active(PointKind::Relationship).await?,
            traces: active(PointKind::Trace).await?,
        })
    }

    /// Points stored in every scope (a health figure for the operator).
    pub async fn count_all(&self) -> Result<usize, ServiceError> {
        Ok(self.store.count_all().await?)
    }

    // ---- messages --------------------------------------------------------------------

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

    /// A conversation's messages in order; `not_found` when it has none in the partition.
    pub async fn conversation(
        &self,
        who: &Principal,
        partition: &Partition,
        id: &str,
    ) -> Result<Vec<MessageView>, ServiceError> {
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
        Ok(all
            .into_iter()
            .map(|(id, p)| MessageView::of(id, p))
            .collect())
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

    /// The partition's conversations, most recent activity first.
    pub async fn conversations(
        &self,
        who: &Principal,
        partition: &Partition,
    ) -> Result<Vec<ConversationInfo>, ServiceError> {
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
        Ok(out)
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

    /// Forgets what a ref names (`doc:`, `msg:`, `conv:`, `turn:`, `evt:`, `cand:`, `mem:`)
    /// and what derives from it.
    pub async fn forget(
        &self,
        who: &Principal,
        req: ForgetRequest,
    ) -> Result<ForgetReport, ServiceError> {
        admit(who, &req.scope, Operation::Forget)?;
        let reference = Ref::parse_input(&req.reference)?;
        forget::forget(self, &req.scope.partition(), &reference, req.hard).await
    }

    // ---- third-party events and candidates -------------------------------------------

    /// Stores a third-party event (idempotent).
    pub async fn post_event(
        &self,
        who: &Principal,
        req: EventRequest,
    ) -> Result<EventReceipt, ServiceError> {
        let mut req = req;
        bind_agent(who, &mut req.source_agent)?;
        admit(who, &req.scope, Operation::Propose)?;
        limits::check_metadata("metadata", req.metadata.as_ref())?;
        events::post_event(self, req).await
    }

    /// One event.
    pub async fn get_event(
        &self,
        who: &Principal,
        partition: &Partition,
        id: &str,
    ) -> Result<EventView, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        validate_component("event_id", id)?;
        events::get_event(self, partition, id).await
    }

    /// Proposes a candidate memory citing evidence (idempotent).
    pub async fn propose(
        &self,
        who: &Principal,
        req: CandidateRequest,
    ) -> Result<ProposeResponse, ServiceError> {
        let mut req = req;
        bind_agent(who, &mut req.source_agent)?;
        admit(who, &req.scope, Operation::Propose)?;
        limits::check_metadata("metadata", req.metadata.as_ref())?;
        limits::check_count(
            "evidence_refs",
            req.evidence_refs.len(),
            candidates::MAX_EVIDENCE,
        )?;
        candidates::propose(self, req).await
    }

    /// The partition's candidates, optionally of one status, oldest first.
    pub async fn list_candidates(
        &self,
        who: &Principal,
        partition: &Partition,
        status: Option<CandidateStatus>,
    ) -> Result<Vec<CandidateView>, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        candidates::list(self, partition, status).await
    }

    /// One candidate.
    pub async fn get_candidate(
        &self,
        who: &Principal,
        partition: &Partition,
        id: &str,
    ) -> Result<CandidateView, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        candidates::get(self, partition, id).await
    }

    /// Approves (`approve`) or rejects a candidate.
    pub async fn decide(
        &self,
        who: &Principal,
        id: &str,
        req: DecisionRequest,
        approve: bool,
    ) -> Result<CandidateView, ServiceError> {
        admit(who, &req.scope, Operation::DecideCandidates)?;
        candidates::decide(self, &req.scope, id, approve, req.note).await
    }
}

/// What [`Engine::ingest_batch`] did.
#[derive(Debug)]
pub struct BatchOutcome {
    /// One per input, in input order.
    pub outcomes: Vec<Outcome>,
    /// Chunks written.
    pub chunks: u64,
    /// The vector index build after the batch, when there was one.
    pub index_built: Option<crate::engine::IndexBuild>,
}
