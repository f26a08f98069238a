//! Cairn's read path: hybrid retrieval and token-budgeted MemoryPacks.
//!
//! 1. The query is embedded (query prefix) on the embedder's worker.
//! 2. Two legs run inside the partition: dense (cosine) and sparse (BM25), plus bounded
//!    identifier probes: each identifier the query names ([`query::identifiers`], at most 8)
//!    is searched lexically and kept only where the text contains it verbatim.
//! 3. The legs are fused by a length-aware convex combination of their min–max normalized
//!    scores (short items lean on BM25, long ones on the embedding; see [`fusion`]);
//!    identifier hits get a small shared bonus. Per item, why it was selected (dense rank,
//!    sparse rank, identifier hits) is kept as data. The fusion is the pure function
//!    [`fusion::fuse`].
//! 4. Chunks of superseded document versions are dropped (the registry names the current
//!    version), near-duplicates removed, and a diverse top list chosen by MMR. A message
//!    that asks a question brings its reply (the next message of its conversation).
//! 5. [`pack::build_pack`] writes the Markdown within the token budget, with conflicts,
//!    coverage and unknowns.

pub mod answer;
pub mod conflict;
pub mod fusion;
pub mod pack;
pub mod query;
pub mod text;
pub mod tokens;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use cairn_embed::Embedder;
use cairn_models::ids::{document_record_id, predicate_record_id};
use cairn_models::knowledge::{
    key, normalize_name, normalize_predicate, Cardinality, Fact, FactStatus,
};
use cairn_models::{
    ErrorKind, MemoryPack, PointKind, RecordState, Scope, SearchKind, SelectionReason, StoredPoint,
    TrustOrigin,
};
use cairn_store::{Filter, Hit, MemoryStore, SearchMode, SearchRequest};
use fusion::{FusionParams, IdentifierLeg, Legs};
use uuid::Uuid;

pub use pack::{build_pack, PackInput, PackItem, TokenCounter, MAX_BUDGET, MIN_BUDGET};

/// Errors of the read path.
#[derive(Debug, thiserror::Error)]
pub enum RecallError {
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error(transparent)]
    Store(#[from] cairn_store::StoreError),
    #[error(transparent)]
    Embed(#[from] cairn_embed::EmbedError),
    #[error("internal error: {0}")]
    Internal(String),
}

impl RecallError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            RecallError::InvalidRequest(_) => ErrorKind::BadInput,
            RecallError::Store(e) => e.kind(),
            RecallError::Embed(e) => e.kind(),
            RecallError::Internal(_) => ErrorKind::Internal,
        }
    }
}

/// Retrieval and pack settings.
#[derive(Debug, Clone)]
pub struct RecallConfig {
    /// Token budget when the caller gives none.
    pub default_budget: usize,
    /// Candidates per leg.
    pub prefetch: usize,
    /// The dense leg's share in the fusion for items of at most `short_words` words (the
    /// sparse leg gets the rest); see [`fusion`].
    pub dense_short: f32,
    /// The dense leg's share for items of at least `long_words` words.
    pub dense_long: f32,
    pub short_words: f32,
    pub long_words: f32,
    /// Most identifiers extracted from a query (0 turns identifier probes off).
    pub max_identifiers: usize,
    /// Weight of the identifier probes in the fusion: an identifier found verbatim in one
    /// item adds `identifier_weight` to its 0..1 fused score (split among the items that
    /// contain it).
    pub identifier_weight: f32,
    /// Most items offered to the pack.
    pub max_items: usize,
    /// MMR trade-off: 1.0 = pure relevance, 0.0 = pure diversity.
    pub mmr_lambda: f32,
    /// Cosine similarity above which two items count as duplicates.
    pub duplicate_similarity: f32,
    /// Minimum query–item cosine similarity for an item to count as relevant (items with
    /// an identifier hit are exempt). For bge-small-en-v1.5 with queries embedded without
    /// an instruction (setup.sh's model directory). The eval reports recommend 0.65 on both
    /// training sets (best balanced accuracy of the top cosine alone), but the gate also
    /// decides what a pack may cite: at 0.65 LoCoMo's pack evidence recall at 1,000 tokens
    /// fell from 0.717 to 0.683 and a short preference ("allergic to peanuts", cosine 0.638
    /// to "Any dietary restrictions?") was no longer cited. Rejecting unanswerable queries
    /// is the answerability model's job (`answer.rs`), fitted at this gate.
    pub min_relevance: f32,
}

impl Default for RecallConfig {
    fn default() -> Self {
        RecallConfig {
            default_budget: 1000,
            prefetch: 50,
            dense_short: 0.3,
            dense_long: 0.6,
            short_words: 32.0,
            long_words: 256.0,
            max_identifiers: 8,
            identifier_weight: 0.05,
            max_items: 12,
            mmr_lambda: 0.75,
            duplicate_similarity: 0.97,
            min_relevance: 0.60,
        }
    }
}

/// How far under `min_relevance` an item's cosine may be when the sparse leg supports it
/// (see `Recaller::admit_supported`).
const SUPPORTED_MARGIN: f32 = 0.25;
/// Normalized BM25 score from which the sparse leg counts as supporting an item.
const SUPPORTED_SPARSE: f32 = 0.1;
/// Questioning message hits whose reply is looked up (one scroll each).
const REPLY_HITS: usize = 6;
/// Tokens of a short item's block (text, label, citation) for the item cap.
const TOKENS_PER_SHORT_ITEM: usize = 64;

/// Optional narrowing of a recall, inside the scope's tenant, user and namespace (which are
/// always applied).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "jsonschema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RecallFilters {
    /// Only memories written by this agent.
    #[serde(default)]
    pub agent: Option<String>,
    /// Only memories of this session.
    #[serde(default)]
    pub session: Option<String>,
    /// Only messages of this conversation.
    #[serde(default)]
    pub conversation_id: Option<String>,
    /// Only chunks of this document source.
    #[serde(default)]
    pub source: Option<String>,
    /// Only these trust origins (at most 16).
    #[serde(default)]
    pub trust: Option<Vec<TrustOrigin>>,
    /// Only memories at or after this time (inclusive; RFC 3339 or Unix epoch milliseconds,
    /// held as epoch ms).
    #[serde(default, with = "cairn_models::time::opt_millis")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<cairn_models::Timestamp>))]
    #[cfg_attr(
        feature = "jsonschema",
        schemars(with = "Option<cairn_models::Timestamp>")
    )]
    pub since: Option<i64>,
    /// Only memories at or before this time (inclusive; RFC 3339 or Unix epoch milliseconds).
    #[serde(default, with = "cairn_models::time::opt_millis")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<cairn_models::Timestamp>))]
    #[cfg_attr(
        feature = "jsonschema",
        schemars(with = "Option<cairn_models::Timestamp>")
    )]
    pub until: Option<i64>,
    /// Only these kinds (at most 16); default all of them. A kind recall never searches is
    /// refused.
    #[serde(default)]
    pub kinds: Option<Vec<SearchKind>>,
    /// Also recall history: superseded, expired and invalidated facts, merged entities.
    #[serde(default)]
    pub include_history: bool,
}

impl RecallFilters {
    fn to_filter(&self) -> Filter {
        let kinds: Vec<String> = match &self.kinds {
            Some(k) => k.iter().map(|k| k.kind().as_str().to_string()).collect(),
            // `PointKind::recall_role` decides which.
            None => PointKind::default_recall_kinds()
                .map(|k| k.as_str().to_string())
                .collect(),
        };
        let mut f = Filter::new().any_of("kind", kinds);
        if !self.include_history {
            f = f.not_eq("keys", key::INACTIVE);
        }
        if let Some(a) = &self.agent {
            f = f.eq("agent", a.as_str());
        }
        if let Some(s) = &self.session {
            f = f.eq("session", s.as_str());
        }
        if let Some(c) = &self.conversation_id {
            f = f.eq("conversation_id", c.as_str());
        }
        if let Some(s) = &self.source {
            f = f.eq("source", s.as_str());
        }
        if let Some(t) = &self.trust {
            f = f.any_of("trust", t.iter().map(|t| t.as_str().to_string()).collect());
        }
        if self.since.is_some() || self.until.is_some() {
            f = f.range(
                "ts",
                self.since.map(|v| v as f64),
                self.until.map(|v| v as f64),
            );
        }
        f
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The fact a point holds, if it is one.
pub fn fact_of(p: &StoredPoint) -> Option<&Fact> {
    match (&p.kind, &p.state) {
        (PointKind::Fact, Some(RecordState::Fact(f))) => Some(f),
        _ => None,
    }
}

/// The ranking signals of the answerability score, from every candidate of a recall.
fn rank_signals(ranked: &[Ranked]) -> answer::RankSignals {
    let mut by_dense: Vec<(u32, f32, Uuid)> = ranked
        .iter()
        .filter_map(|r| Some((r.reason.dense_rank?, r.reason.dense_score?, r.hit.id)))
        .collect();
    by_dense.sort_by_key(|d| d.0);
    let mut by_sparse: Vec<(u32, f32, Uuid)> = ranked
        .iter()
        .filter_map(|r| Some((r.reason.sparse_rank?, r.sparse_score?, r.hit.id)))
        .collect();
    by_sparse.sort_by_key(|d| d.0);
    let scores: Vec<f32> = by_dense.iter().map(|d| d.1).collect();
    let sparse_scores: Vec<f32> = by_sparse.iter().map(|d| d.1).collect();
    let dense_top: Vec<Uuid> = by_dense.iter().take(3).map(|d| d.2).collect();
    let sparse_top: Vec<Uuid> = by_sparse.iter().take(3).map(|d| d.2).collect();
    answer::RankSignals::of(&scores, &sparse_scores, &dense_top, &sparse_top)
}

/// One recall.
#[derive(Debug, Clone)]
pub struct RecallRequest {
    pub scope: Scope,
    pub query: String,
    pub budget: Option<usize>,
    pub filters: RecallFilters,
}

/// What a pack joins to the selected items besides their own text.
#[derive(Debug, Default)]
pub struct Context {
    /// Each current fact's open-conflict siblings, by the fact's point id.
    pub siblings: HashMap<Uuid, Vec<Hit>>,
    /// Canonical predicates declared multi-valued (their facts never conflict).
    pub multi_valued: HashSet<String>,
    /// The reply to each message hit that asks a question (the next message of its
    /// conversation), by the hit's point id.
    pub replies: HashMap<Uuid, Hit>,
}

/// Whether a message asks a question: its reply is joined to it in the pack.
fn asks(hit: &Hit) -> bool {
    hit.point.kind == PointKind::Message
        && hit
            .point
            .text
            .as_deref()
            .is_some_and(|t| t.trim_end().ends_with('?'))
}

/// A ranked, explained candidate (before packing).
#[derive(Debug, Clone)]
pub struct Ranked {
    pub hit: Hit,
    pub reason: SelectionReason,
    /// The item's normalized BM25 score (0..1) in this query's sparse leg, if it was there.
    pub sparse_norm: Option<f32>,
    /// The item's BM25 score, if the sparse leg returned it.
    pub sparse_score: Option<f32>,
    pub relevant: bool,
}

/// The read path. Cheap to clone (handles and settings) and to share behind an `Arc`.
#[derive(Debug, Clone)]
pub struct Recaller {
    store: Arc<dyn MemoryStore>,
    embedder: Embedder,
    config: RecallConfig,
    /// The pack's token counter: the embedder's tokenizer, word counts cached across
    /// recalls ([`tokens`]).
    tokens: Arc<tokens::WordTokens>,
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    // Vectors are L2-normalized by the embedder: the dot product is the cosine. Eight
    // running sums, not one: a single float sum is one chain of dependent additions the
    // compiler may not reorder, and selection's dedup and MMR take thousands of these per
    // recall (`Recaller::select` was 3 % of a recall benchmark's CPU, `perf`).
    const LANES: usize = 8;
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    let mut acc = [0.0f32; LANES];
    for (x, y) in ca.zip(cb) {
        for i in 0..LANES {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

impl Recaller {
    pub fn new(store: Arc<dyn MemoryStore>, embedder: Embedder, config: RecallConfig) -> Self {
        let tokens = Arc::new(tokens::WordTokens::new(embedder.tokenizer().clone()));
        Recaller {
            store,
            embedder,
            config,
            tokens,
        }
    }

    pub fn config(&self) -> &RecallConfig {
        &self.config
    }

    pub fn embedder(&self) -> &Embedder {
        &self.embedder
    }

    /// Validates a request; returns the budget to use.
    pub fn check(&self, req: &RecallRequest) -> Result<usize, RecallError> {
        req.scope
            .validate()
            .map_err(|e| RecallError::InvalidRequest(e.to_string()))?;
        if req.query.trim().is_empty() {
            return Err(RecallError::InvalidRequest(
                "query must not be empty".into(),
            ));
        }
        if req.query.len() > cairn_models::limits::MAX_QUERY_BYTES {
            return Err(RecallError::InvalidRequest(format!(
                "query is {} bytes; the limit is {} bytes",
                req.query.len(),
                cairn_models::limits::MAX_QUERY_BYTES
            )));
        }
        let budget = req.budget.unwrap_or(self.config.default_budget);
        if !(MIN_BUDGET..=MAX_BUDGET).contains(&budget) {
            return Err(RecallError::InvalidRequest(format!(
                "token_budget {budget} is outside {MIN_BUDGET}..={MAX_BUDGET}"
            )));
        }
        Ok(budget)
    }

    /// Recalls a MemoryPack for the request.
    pub async fn recall(&self, req: &RecallRequest) -> Result<MemoryPack, RecallError> {
        let budget = self.check(req)?;
        let ranked = self.retrieve(req).await?;
        let (siblings, multi_valued) = self.fact_siblings(req, &ranked).await?;
        let replies = self.replies(req, &ranked, budget).await?;
        // Selection (dedup and MMR, quadratic in the pool) and the pack (tokenizing every
        // candidate, conflict frames) are CPU work of milliseconds to tens of them: on the
        // blocking pool, so they never hold an async worker that other requests need.
        let this = self.clone();
        let query = req.query.clone();
        let partition = req.scope.partition();
        tokio::task::spawn_blocking(move || {
            let context = Context {
                siblings,
                multi_valued,
                replies,
            };
            this.assemble(&query, &partition, budget, ranked, context)
        })
        .await
        .map_err(|e| RecallError::Internal(format!("pack task: {e}")))
    }

    /// The CPU part of a recall after retrieval: admission under the gate, selection (the
    /// item cap from the budget), each fact's open-conflict siblings and each questioning
    /// message's reply joined to it, and the pack. Blocking work of a few
    /// milliseconds: [`Recaller::recall`] runs it on the blocking pool; `cairn bench recall`
    /// times it on its own.
    pub fn assemble(
        &self,
        query: &str,
        partition: &cairn_models::Partition,
        budget: usize,
        mut ranked: Vec<Ranked>,
        context: Context,
    ) -> MemoryPack {
        let Context {
            mut siblings,
            multi_valued,
            mut replies,
        } = context;
        let multi_valued = &multi_valued;
        let rank = rank_signals(&ranked);
        let anything_relevant = ranked.iter().any(|r| r.relevant);
        if anything_relevant {
            self.admit_supported(&mut ranked);
        }
        let cap = self.item_cap(budget);
        let selected = self.select(ranked, cap);
        let identifiers = query::identifiers(query, self.config.max_identifiers);
        let aspects = query::aspects(query, &identifiers);
        let mut items: Vec<PackItem> = Vec::new();
        let mut seen: HashSet<Uuid> = selected.iter().map(|r| r.hit.id).collect();
        for r in selected {
            let id = r.hit.id;
            let reason = r.reason.clone();
            let reply = replies.remove(&id);
            items.push(PackItem {
                reference: r.hit.point.to_ref(),
                point: r.hit.point,
                reason: r.reason,
            });
            // A fact's open conflicts travel with it: both sides are shown, always. A
            // message that asks is followed by its reply, where the answer usually is.
            let extra = siblings.remove(&id).unwrap_or_default();
            for sib in extra.into_iter().chain(reply) {
                if seen.insert(sib.id) {
                    items.push(PackItem {
                        reference: sib.point.to_ref(),
                        point: sib.point,
                        reason: SelectionReason {
                            dense_rank: None,
                            sparse_rank: None,
                            dense_score: None,
                            identifier_hits: Vec::new(),
                            fused_score: reason.fused_score,
                        },
                    });
                }
            }
        }
        let input = PackInput {
            partition,
            query,
            aspects: &aspects,
            budget,
            anything_relevant,
            multi_valued,
            rank,
        };
        build_pack(&input, &items, self.tokens.as_ref())
    }

    /// Hybrid retrieval: every candidate, fused and explained, best first, current document
    /// versions only.
    pub async fn retrieve(&self, req: &RecallRequest) -> Result<Vec<Ranked>, RecallError> {
        let partition = req.scope.partition();
        let filter = req.filters.to_filter();
        let prefetch = self.config.prefetch.max(1);
        let identifiers = query::identifiers(&req.query, self.config.max_identifiers);
        // The dense leg waits for the query vector; the BM25 leg and the identifier probes
        // need none, so they run on the store's threads while the model embeds the query.
        let semantic = async {
            let qvec = self.embedder.embed_query(&req.query).await?;
            let dense_req = SearchRequest {
                mode: SearchMode::Dense(qvec.clone()),
                filter: filter.clone(),
                limit: prefetch,
                with_vectors: true,
            };
            let hits = self.store.search(&partition, dense_req).await?;
            Ok::<_, RecallError>((qvec, hits))
        };
        let lexical = async {
            let sparse_req = SearchRequest {
                mode: SearchMode::Sparse(req.query.clone()),
                filter: filter.clone(),
                limit: prefetch,
                with_vectors: true,
            };
            // The BM25 leg and the probes side by side, not one after another: at a million
            // chunks of real text one probe of a common term costs milliseconds, and a
            // scientific question names several identifiers.
            let probes = identifiers.iter().map(|ident| {
                self.store.search(
                    &partition,
                    SearchRequest {
                        mode: SearchMode::Sparse(ident.clone()),
                        filter: filter.clone(),
                        limit: 5,
                        with_vectors: true,
                    },
                )
            });
            let (sparse, probes) = tokio::try_join!(
                self.store.search(&partition, sparse_req),
                futures_util::future::try_join_all(probes)
            )?;
            Ok::<_, RecallError>((sparse, probes))
        };
        let ((qvec, dense), (sparse, probes)) = tokio::try_join!(semantic, lexical)?;

        let mut ident_legs: Vec<IdentifierLeg<Uuid>> = Vec::with_capacity(identifiers.len());
        let mut ident_hits: Vec<Hit> = Vec::new();
        for (ident, hits) in identifiers.iter().zip(probes) {
            let needle = ident.to_lowercase();
            let found: Vec<Hit> = hits
                .into_iter()
                .filter(|h| {
                    h.point
                        .text
                        .as_deref()
                        .is_some_and(|t| t.to_lowercase().contains(&needle))
                })
                .collect();
            ident_legs.push(IdentifierLeg {
                identifier: ident.clone(),
                items: found.iter().map(|h| h.id).collect(),
            });
            ident_hits.extend(found);
        }

        let dense_leg: Vec<(Uuid, f32)> = dense.iter().map(|h| (h.id, h.score)).collect();
        let sparse_leg: Vec<(Uuid, f32)> = sparse.iter().map(|h| (h.id, h.score)).collect();
        let sparse_scores: HashMap<Uuid, f32> = sparse_leg.iter().copied().collect();
        // Each item's point as first seen: dense leg, then sparse, then identifier probes.
        let mut points: HashMap<Uuid, Hit> = HashMap::new();
        for h in dense.into_iter().chain(sparse).chain(ident_hits) {
            points.entry(h.id).or_insert(h);
        }
        let fused = fusion::fuse(
            &Legs {
                dense: &dense_leg,
                sparse: &sparse_leg,
                identifiers: &ident_legs,
            },
            &FusionParams::from(&self.config),
            |id| {
                points
                    .get(id)
                    .and_then(|h| h.point.text.as_deref())
                    .map_or(0, |t| t.split_whitespace().count())
            },
        );

        let mut ranked: Vec<Ranked> = fused
            .into_iter()
            .filter_map(|f| {
                let hit = points.remove(&f.key)?;
                let dense_score = hit.dense.as_deref().map(|v| cosine(&qvec, v));
                // A hit on a specific identifier (an id, a quoted string) is evidence of its
                // own; a name or an acronym is not: another dataset's question that shares
                // a capitalised word must not pass the gate on it.
                let relevant = dense_score.unwrap_or(0.0) >= self.config.min_relevance
                    || f.identifier_hits
                        .iter()
                        .any(|i| query::is_specific(i, &req.query));
                Some(Ranked {
                    sparse_norm: f.sparse_norm,
                    sparse_score: sparse_scores.get(&f.key).copied(),
                    hit,
                    reason: SelectionReason {
                        dense_rank: f.dense_rank,
                        sparse_rank: f.sparse_rank,
                        dense_score,
                        identifier_hits: f.identifier_hits,
                        fused_score: f.fused_score,
                    },
                    relevant,
                })
            })
            .collect();
        // Keeps the fused order (best first, ties by id).
        self.drop_superseded(&partition, &mut ranked).await?;
        if !req.filters.include_history {
            // Facts that do not hold now (outside their validity window) are history.
            let now = now_ms();
            ranked.retain(|r| fact_of(&r.hit.point).is_none_or(|f| f.holds_at(now)));
        }
        Ok(ranked)
    }

    /// The reply to each of the best message hits that asks a question: the next message
    /// of its conversation, under the same filters. In a conversation the turn a question
    /// matches best is often the question itself ("What did you research?"), and the
    /// answer is the turn after it; on LoCoMo 1–5 joining it raised pack evidence recall at
    /// 1,000 tokens from 0.677 to 0.694 (joining any neighbour that supports a query
    /// aspect the hit lacks lowered it to 0.649: it crowds out ranked evidence). One short
    /// scroll per questioning hit, for at most [`REPLY_HITS`] of them.
    async fn replies(
        &self,
        req: &RecallRequest,
        ranked: &[Ranked],
        budget: usize,
    ) -> Result<HashMap<Uuid, Hit>, RecallError> {
        let partition = req.scope.partition();
        let mut out = HashMap::new();
        let questions = ranked
            .iter()
            .filter(|r| r.relevant)
            .take(self.item_cap(budget))
            .filter(|r| asks(&r.hit))
            .take(REPLY_HITS);
        for r in questions {
            let (Some(conv), Some(seq)) = (&r.hit.point.conversation_id, r.hit.point.seq) else {
                continue;
            };
            let next = (seq + 1) as f64;
            let filter = req
                .filters
                .to_filter()
                .eq("kind", PointKind::Message.as_str())
                .eq("conversation_id", conv.as_str())
                .range("seq", Some(next), Some(next));
            let (page, _) = self.store.scroll(&partition, filter, 1, None).await?;
            if let Some(reply) = page.into_iter().next() {
                out.insert(r.hit.id, reply);
            }
        }
        Ok(out)
    }

    /// For the relevant facts among `ranked`: the other current facts with the same subject
    /// and predicate, a different object and an overlapping validity (an open conflict),
    /// by the fact's point id; and the predicates declared multi-valued (whose facts never
    /// conflict).
    async fn fact_siblings(
        &self,
        req: &RecallRequest,
        ranked: &[Ranked],
    ) -> Result<(HashMap<Uuid, Vec<Hit>>, HashSet<String>), RecallError> {
        let mut out: HashMap<Uuid, Vec<Hit>> = HashMap::new();
        // Only current facts have open conflicts: a superseded or invalidated one (recalled
        // as history) is not in conflict with the facts that replaced it.
        let facts: Vec<(Uuid, &Fact)> = ranked
            .iter()
            .filter(|r| r.relevant)
            .take(self.config.max_items.max(1) * 4)
            .filter_map(|r| fact_of(&r.hit.point).map(|f| (r.hit.id, f)))
            .filter(|(_, f)| f.status == FactStatus::Current)
            .collect();
        if facts.is_empty() {
            return Ok((out, HashSet::new()));
        }
        let partition = req.scope.partition();
        let predicates: HashSet<String> = facts
            .iter()
            .map(|(_, f)| normalize_predicate(&f.predicate))
            .collect();
        let ids: Vec<Uuid> = predicates
            .iter()
            .map(|p| predicate_record_id(&partition, p))
            .collect();
        let multi: HashSet<String> = self
            .store
            .retrieve(&partition, &ids, false)
            .await?
            .into_iter()
            .filter_map(|h| match h.point.state {
                Some(RecordState::Predicate(p)) if p.cardinality == Cardinality::Multi => {
                    Some(p.name)
                }
                _ => None,
            })
            .collect();
        let keys: Vec<String> = facts
            .iter()
            .filter(|(_, f)| !multi.contains(&normalize_predicate(&f.predicate)))
            .map(|(_, f)| key::subject_predicate(&f.subject, &f.predicate))
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        if keys.is_empty() {
            return Ok((out, multi));
        }
        let filter = Filter::new()
            .eq("kind", PointKind::Fact.as_str())
            .any_of("keys", keys)
            .not_eq("keys", key::INACTIVE);
        let candidates = self.store.scroll_all(&partition, filter).await?;
        let now = now_ms();
        for (id, f) in facts {
            let sibs: Vec<Hit> = candidates
                .iter()
                .filter(|h| {
                    fact_of(&h.point).is_some_and(|g| {
                        g.id != f.id
                            && normalize_name(&g.subject) == normalize_name(&f.subject)
                            && normalize_predicate(&g.predicate)
                                == normalize_predicate(&f.predicate)
                            && normalize_name(&g.object) != normalize_name(&f.object)
                            && g.overlaps(f)
                            && (req.filters.include_history || g.holds_at(now))
                    })
                })
                .cloned()
                .collect();
            if !sibs.is_empty() {
                out.insert(id, sibs);
            }
        }
        Ok((out, multi))
    }

    /// Drops chunks whose document id is not the current version of their source (a reader
    /// racing an ingest, or leftovers of an interrupted one).
    async fn drop_superseded(
        &self,
        partition: &cairn_models::Partition,
        ranked: &mut Vec<Ranked>,
    ) -> Result<(), RecallError> {
        let sources: HashSet<String> = ranked
            .iter()
            .filter(|r| r.hit.point.kind == PointKind::Chunk)
            .filter_map(|r| r.hit.point.source.clone())
            .collect();
        if sources.is_empty() {
            return Ok(());
        }
        let ids: Vec<Uuid> = sources
            .iter()
            .map(|s| document_record_id(partition, s))
            .collect();
        let current: HashMap<String, String> = self
            .store
            .retrieve(partition, &ids, false)
            .await?
            .into_iter()
            .filter_map(|h| Some((h.point.source?, h.point.doc_id?)))
            .collect();
        ranked.retain(|r| {
            r.hit.point.kind != PointKind::Chunk
                || match (&r.hit.point.source, &r.hit.point.doc_id) {
                    (Some(s), Some(d)) => current.get(s) == Some(d),
                    _ => false,
                }
        });
        Ok(())
    }

    /// Once the query has passed the relevance gate (some item is relevant on its own), items
    /// just under the gate that a leg clearly supports are admitted too: the dense cosine
    /// of a short chat message that answers a question is often under `min_relevance`
    /// (LoCoMo's evidence turns), while its BM25 score stands out.
    fn admit_supported(&self, ranked: &mut [Ranked]) {
        let floor = self.config.min_relevance - SUPPORTED_MARGIN;
        for r in ranked.iter_mut().filter(|r| !r.relevant) {
            let dense = r.reason.dense_score.unwrap_or(0.0);
            r.relevant = dense >= floor && r.sparse_norm.unwrap_or(0.0) >= SUPPORTED_SPARSE;
        }
    }

    /// Most items offered to a pack of `budget` tokens: enough to fill it with short items
    /// (a chat message, its label and citation take about [`TOKENS_PER_SHORT_ITEM`]), never
    /// fewer than `max_items`.
    pub fn item_cap(&self, budget: usize) -> usize {
        self.config
            .max_items
            .max(budget / TOKENS_PER_SHORT_ITEM)
            .max(1)
    }

    /// Relevant items only, near-duplicates removed, then maximal marginal relevance, at
    /// most `cap` (see [`Recaller::item_cap`]).
    pub fn select(&self, ranked: Vec<Ranked>, cap: usize) -> Vec<Ranked> {
        // MMR picks `cap`; looking further down than a few times that only costs time
        // (dedup and MMR are quadratic in the pool).
        let cap = cap.max(1);
        let pool: Vec<Ranked> = ranked
            .into_iter()
            .filter(|r| r.relevant)
            .take(cap * 4)
            .collect();
        let mut kept: Vec<Ranked> = Vec::new();
        for r in pool {
            let dup = kept.iter().any(|k| {
                let same_text = k.hit.point.text == r.hit.point.text;
                let close = match (&k.hit.dense, &r.hit.dense) {
                    (Some(a), Some(b)) => cosine(a, b) >= self.config.duplicate_similarity,
                    _ => false,
                };
                same_text || close
            });
            if !dup {
                kept.push(r);
            }
        }
        let max_score = kept
            .iter()
            .map(|r| r.reason.fused_score)
            .fold(f32::MIN, f32::max)
            .max(f32::EPSILON);
        let lambda = self.config.mmr_lambda;
        let mut selected: Vec<Ranked> = Vec::new();
        // Each candidate's highest similarity to the items selected so far, updated with
        // the newest selection only (a full rescan is cubic in the cap).
        let mut max_sim = vec![0.0f32; kept.len()];
        while !kept.is_empty() && selected.len() < cap {
            if let Some(last) = selected.last() {
                for (c, sim) in kept.iter().zip(max_sim.iter_mut()) {
                    if let (Some(a), Some(b)) = (&last.hit.dense, &c.hit.dense) {
                        *sim = sim.max(cosine(a, b));
                    }
                }
            }
            let (best, _) = kept
                .iter()
                .zip(&max_sim)
                .enumerate()
                .map(|(i, (c, sim))| {
                    let rel = c.reason.fused_score / max_score;
                    (i, lambda * rel - (1.0 - lambda) * sim)
                })
                .fold((0, f32::MIN), |acc, x| if x.1 > acc.1 { x } else { acc });
            max_sim.remove(best);
            selected.push(kept.remove(best));
        }
        selected
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        /// The lane-split dot product is the plain one, up to float rounding, whatever the
        /// length (tails shorter than a lane included).
        #[test]
        fn cosine_is_the_dot_product(
            pairs in proptest::collection::vec((-1.0f32..1.0, -1.0f32..1.0), 0..400)
        ) {
            let (a, b): (Vec<f32>, Vec<f32>) = pairs.into_iter().unzip();
            let naive: f64 = a.iter().zip(&b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
            prop_assert!((f64::from(super::cosine(&a, &b)) - naive).abs() < 1e-4);
        }
    }
}
