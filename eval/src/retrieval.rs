//! Retrieval modes under evaluation and the per-query evaluation loop shared by the
//! benchmarks.

use std::collections::HashMap;
use std::time::Instant;

use cairn_models::{PointKind, Scope, SearchKind, StoredPoint};
use cairn_recall::{RecallConfig, RecallFilters, RecallRequest, Recaller};
use cairn_store::{Filter, SearchMode, SearchRequest};
use serde::{Deserialize, Serialize};

use crate::metrics::{mrr_at_k, ndcg_at_k, recall_at_k};
use crate::stack::{Event, Observer, Workspace};
use crate::{EvalError, Result};

/// A retrieval mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// The store's dense (cosine) search alone.
    Dense,
    /// The store's sparse BM25 search alone.
    Bm25,
    /// The real recall path, `Recaller::retrieve`: dense + BM25 legs and identifier probes,
    /// fused by weighted RRF in Cairn, superseded versions dropped.
    Hybrid,
    /// The store's `SearchMode::Hybrid`: prefetch both legs, RRF inside Qdrant.
    HybridQdrant,
}

impl Mode {
    pub const ALL: [Mode; 4] = [Mode::Dense, Mode::Bm25, Mode::Hybrid, Mode::HybridQdrant];

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Dense => "dense",
            Mode::Bm25 => "bm25",
            Mode::Hybrid => "hybrid",
            Mode::HybridQdrant => "hybrid-qdrant",
        }
    }

    pub fn parse(s: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.as_str() == s.trim())
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Fusion parameters of the hybrid modes. `dense_short`, `dense_long`, `identifiers` and
/// `identifier_weight` are the recall path's (`hybrid`, see `cairn_recall::fusion`);
/// `rrf_k`, `dense_weight` and `sparse_weight` are Qdrant's own weighted RRF
/// (`hybrid-qdrant`), the baseline the recall path is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Fusion {
    pub dense_short: f32,
    pub dense_long: f32,
    pub identifiers: usize,
    pub identifier_weight: f32,
    pub rrf_k: f32,
    pub dense_weight: f32,
    pub sparse_weight: f32,
}

impl Default for Fusion {
    fn default() -> Self {
        let c = RecallConfig::default();
        Fusion {
            dense_short: c.dense_short,
            dense_long: c.dense_long,
            identifiers: c.max_identifiers,
            identifier_weight: c.identifier_weight,
            rrf_k: 10.0,
            dense_weight: 1.0,
            sparse_weight: 0.75,
        }
    }
}

impl Fusion {
    /// The recall configuration with these fusion parameters and `depth` candidates per leg.
    pub fn recall_config(&self, depth: usize) -> RecallConfig {
        RecallConfig {
            prefetch: depth,
            dense_short: self.dense_short,
            dense_long: self.dense_long,
            max_identifiers: self.identifiers,
            identifier_weight: self.identifier_weight,
            ..RecallConfig::default()
        }
    }
}

/// One query to evaluate.
#[derive(Debug, Clone)]
pub struct QuerySpec {
    pub id: String,
    pub text: String,
    /// Relevant ids with their graded gain.
    pub qrels: HashMap<String, f64>,
    /// A grouping key (LoCoMo category), if any.
    pub group: Option<String>,
    /// The conversation the query is restricted to (LoCoMo).
    pub conversation: Option<String>,
}

/// Scores of one query under one mode.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct QueryScores {
    pub ndcg10: f64,
    pub recall5: f64,
    pub recall10: f64,
    pub recall100: f64,
    pub mrr10: f64,
    pub latency_ms: f64,
}

/// Searches one workspace in every mode, restricted to one point kind.
#[derive(Debug)]
pub struct Retriever<'a> {
    pub ws: &'a Workspace,
    pub scope: Scope,
    pub kind: PointKind,
    /// Candidates per leg and results kept (ranked lists are cut here).
    pub depth: usize,
    pub fusion: Fusion,
    recaller: Recaller,
}

impl<'a> Retriever<'a> {
    pub fn new(
        ws: &'a Workspace,
        scope: Scope,
        kind: PointKind,
        depth: usize,
        fusion: Fusion,
    ) -> Self {
        let recaller = ws.recaller(fusion.recall_config(depth));
        Retriever {
            ws,
            scope,
            kind,
            depth,
            fusion,
            recaller,
        }
    }

    fn filter(&self, conversation: Option<&str>) -> Filter {
        let mut f = Filter::new().eq("kind", self.kind.as_str());
        if let Some(c) = conversation {
            f = f.eq("conversation_id", c);
        }
        f
    }

    /// The ranked points of `mode` for `query`, best first, at most `depth`.
    pub async fn rank(
        &self,
        mode: Mode,
        query: &str,
        conversation: Option<&str>,
    ) -> Result<Vec<StoredPoint>> {
        let partition = self.scope.partition();
        let search = |mode: SearchMode| SearchRequest {
            mode,
            filter: self.filter(conversation),
            limit: self.depth,
            with_vectors: false,
        };
        let hits = match mode {
            Mode::Dense => {
                let v = self.ws.embedder.embed_query(query).await?;
                self.ws
                    .store
                    .search(&partition, search(SearchMode::Dense(v)))
                    .await?
            }
            Mode::Bm25 => {
                self.ws
                    .store
                    .search(&partition, search(SearchMode::Sparse(query.to_string())))
                    .await?
            }
            Mode::HybridQdrant => {
                let v = self.ws.embedder.embed_query(query).await?;
                self.ws
                    .store
                    .search(
                        &partition,
                        search(SearchMode::Hybrid {
                            dense: v,
                            text: query.to_string(),
                            prefetch: self.depth,
                            k: self.fusion.rrf_k.round().max(1.0) as usize,
                            weights: (self.fusion.dense_weight, self.fusion.sparse_weight),
                        }),
                    )
                    .await?
            }
            Mode::Hybrid => {
                let ranked = self
                    .recaller
                    .retrieve(&self.request(query, conversation))
                    .await?;
                return Ok(ranked
                    .into_iter()
                    .take(self.depth)
                    .map(|r| r.hit.point)
                    .collect());
            }
        };
        Ok(hits.into_iter().map(|h| h.point).collect())
    }

    /// The recall request the hybrid mode sends.
    pub fn request(&self, query: &str, conversation: Option<&str>) -> RecallRequest {
        RecallRequest {
            scope: self.scope.clone(),
            query: query.to_string(),
            budget: None,
            filters: RecallFilters {
                conversation_id: conversation.map(str::to_string),
                // The harness searches chunks or messages, both of which recall searches; a
                // kind it never searches names none (and so finds nothing), as before.
                kinds: Some(SearchKind::new(self.kind).into_iter().collect()),
                ..RecallFilters::default()
            },
        }
    }

    /// Runs every query in `mode`, one at a time (so latencies are not inflated by
    /// concurrency). `to_id` maps a ranked point to the id the qrels use (a document's
    /// chunks map to the document: its score is its best chunk's).
    pub async fn evaluate(
        &self,
        mode: Mode,
        queries: &[QuerySpec],
        to_id: &(dyn Fn(&StoredPoint) -> Option<String> + Sync),
        observer: &Observer,
    ) -> Result<Vec<QueryScores>> {
        observer(Event::Phase(format!("{mode}: {} queries", queries.len())));
        let mut out = Vec::with_capacity(queries.len());
        for q in queries {
            let started = Instant::now();
            let points = self.rank(mode, &q.text, q.conversation.as_deref()).await?;
            let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
            let ids: Vec<String> = points.iter().filter_map(to_id).collect();
            out.push(QueryScores {
                ndcg10: ndcg_at_k(&ids, &q.qrels, 10),
                recall5: recall_at_k(&ids, &q.qrels, 5),
                recall10: recall_at_k(&ids, &q.qrels, 10),
                recall100: recall_at_k(&ids, &q.qrels, 100),
                mrr10: mrr_at_k(&ids, &q.qrels, 10),
                latency_ms,
            });
        }
        Ok(out)
    }
}

impl Retriever<'_> {
    /// Writes, per query, the dense and BM25 lists (qrel id and leg score, best first,
    /// `depth` deep) and the identifiers the recall path would probe, as JSON lines: the
    /// input of offline fusion and answerability analysis (`--dump-legs`).
    pub async fn dump_legs(
        &self,
        queries: &[QuerySpec],
        to_id: &(dyn Fn(&StoredPoint) -> Option<String> + Sync),
        path: &std::path::Path,
    ) -> Result<()> {
        use std::io::Write;
        let partition = self.scope.partition();
        let io = |e| EvalError::io(path, e);
        let mut out = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
        for q in queries {
            let search = |mode: SearchMode| SearchRequest {
                mode,
                filter: self.filter(q.conversation.as_deref()),
                limit: self.depth,
                with_vectors: false,
            };
            let v = self.ws.embedder.embed_query(&q.text).await?;
            let dense = self
                .ws
                .store
                .search(&partition, search(SearchMode::Dense(v)))
                .await?;
            let sparse = self
                .ws
                .store
                .search(&partition, search(SearchMode::Sparse(q.text.clone())))
                .await?;
            // Texts of the first ten only: enough to study the head, small enough to keep.
            let leg = |hits: Vec<cairn_store::Hit>| -> Vec<(String, f32, Option<String>)> {
                hits.into_iter()
                    .enumerate()
                    .filter_map(|(i, h)| {
                        let id = to_id(&h.point)?;
                        Some((id, h.score, h.point.text.filter(|_| i < 10)))
                    })
                    .collect()
            };
            let line = serde_json::json!({
                "id": q.id,
                "text": q.text,
                "group": q.group,
                "qrels": q.qrels,
                "identifiers": cairn_recall::query::identifiers(&q.text, self.fusion.identifiers),
                "dense": leg(dense),
                "sparse": leg(sparse),
            });
            writeln!(out, "{line}").map_err(io)?;
        }
        out.flush().map_err(io)?;
        Ok(())
    }
}

/// Parses a comma-separated mode list ("dense,bm25").
pub fn parse_modes(list: &str) -> Result<Vec<Mode>> {
    let mut out = Vec::new();
    for part in list.split(',').filter(|p| !p.trim().is_empty()) {
        let m = Mode::parse(part).ok_or_else(|| {
            EvalError::Options(format!(
                "unknown mode {part:?} (expected dense, bm25, hybrid, hybrid-qdrant)"
            ))
        })?;
        if !out.contains(&m) {
            out.push(m);
        }
    }
    if out.is_empty() {
        return Err(EvalError::Options("no retrieval mode given".into()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse() {
        assert_eq!(
            parse_modes("dense, hybrid-qdrant,dense").unwrap(),
            vec![Mode::Dense, Mode::HybridQdrant]
        );
        assert!(parse_modes("sparse").is_err());
        assert!(parse_modes("").is_err());
        assert_eq!(Mode::parse("bm25"), Some(Mode::Bm25));
    }
}
