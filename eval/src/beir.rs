//! BEIR benchmarks (`corpus.jsonl`, `queries.jsonl`, `qrels/<split>.tsv`) through the real
//! ingest and retrieval paths.
//!
//! Each document is ingested as source `beir:<doc id>` with text `title + " " + text` (what
//! BEIR's published dense figures embed). In `document` mode a document is one chunk (the
//! model truncates it at 512 tokens), as the published figures embed it; in `chunked` mode
//! it is split like any other document (256-token chunks, 32 overlap) and a document's score
//! is its best chunk's. Only queries with a positive judgement in the split are evaluated.
//!
//! `--limit N` (quick runs): the first N such queries in `queries.jsonl` order, and a corpus
//! made of every document judged for them plus the first `limit_corpus` documents of
//! `corpus.jsonl` (file order kept). Such figures come from a much smaller corpus and are not
//! comparable with published ones.

use std::collections::{HashMap, HashSet};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::Instant;

use cairn_ingest::beir::{read_corpus, BeirDoc};
use cairn_ingest::{DocumentInput, MediaType};
use cairn_models::{PointKind, StoredPoint};
use serde::{Deserialize, Serialize};

use crate::metrics::{mean, Latency};
use crate::packs::{PackQuery, PackReport};
use crate::report::{f3, RunInfo};
use crate::retrieval::{Fusion, Mode, QueryScores, QuerySpec, Retriever};
use crate::stack::{eval_scope, EvalEnv, Event, Observer, Workspace};
use crate::{EvalError, Result};

/// Source prefix of ingested BEIR documents.
pub const SOURCE_PREFIX: &str = "beir:";

/// How documents are split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DocMode {
    /// One vector per document (truncated by the model at its max length).
    Document,
    /// The default chunking; a document scores as its best chunk.
    Chunked,
}

impl DocMode {
    pub fn as_str(self) -> &'static str {
        match self {
            DocMode::Document => "document",
            DocMode::Chunked => "chunked",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "document" => Some(DocMode::Document),
            "chunked" => Some(DocMode::Chunked),
            _ => None,
        }
    }
}

/// Options of a BEIR run.
#[derive(Debug, Clone)]
pub struct BeirOptions {
    /// The BEIR folder.
    pub data: PathBuf,
    pub split: String,
    pub modes: Vec<Mode>,
    pub doc_mode: DocMode,
    /// First N judged queries and a corpus subset (see the module docs).
    pub limit: Option<usize>,
    /// Corpus documents (besides the judged ones) kept with `limit`.
    pub limit_corpus: usize,
    /// Fusion of the hybrid modes.
    pub fusion: Fusion,
    /// Also evaluate a grid of fusion parameters for the `hybrid` mode.
    pub sweep: bool,
    /// Pack budgets (empty: no pack evaluation).
    pub budgets: Vec<usize>,
    /// Unanswerable probe queries: a BEIR `queries.jsonl` or a LoCoMo JSON file.
    pub probes: Option<PathBuf>,
    /// Most probes used from `probes`.
    pub probe_limit: usize,
    /// Queries whose relevant documents are deleted at the end and asked again as in-domain
    /// unanswerable probes (0: none).
    pub holdout: usize,
}

impl BeirOptions {
    pub fn new(data: PathBuf, split: &str) -> Self {
        BeirOptions {
            data,
            split: split.to_string(),
            modes: Mode::ALL.to_vec(),
            doc_mode: DocMode::Document,
            limit: None,
            limit_corpus: 1000,
            fusion: Fusion::default(),
            sweep: false,
            budgets: crate::packs::DEFAULT_BUDGETS.to_vec(),
            probes: None,
            probe_limit: 200,
            holdout: 100,
        }
    }
}

/// One BEIR query.
#[derive(Debug, Clone, Deserialize)]
pub struct BeirQuery {
    #[serde(rename = "_id")]
    pub id: String,
    pub text: String,
}

/// Reads `queries.jsonl`.
pub fn read_queries(path: &Path) -> Result<Vec<BeirQuery>> {
    let file = std::fs::File::open(path).map_err(|e| EvalError::io(path, e))?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| EvalError::io(path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        let q: BeirQuery = serde_json::from_str(&line)
            .map_err(|e| EvalError::data(path, format!("line {}: {e}", i + 1)))?;
        out.push(q);
    }
    Ok(out)
}

/// Reads `qrels/<split>.tsv` (header `query-id corpus-id score`): query → doc → score.
pub fn read_qrels(path: &Path) -> Result<HashMap<String, HashMap<String, f64>>> {
    let text = std::fs::read_to_string(path).map_err(|e| EvalError::io(path, e))?;
    let mut out: HashMap<String, HashMap<String, f64>> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let cols: Vec<&str> = line.split('\t').map(str::trim).collect();
        if line.trim().is_empty() || (i == 0 && cols.first() == Some(&"query-id")) {
            continue;
        }
        let [q, d, s] = cols[..] else {
            return Err(EvalError::data(
                path,
                format!("line {}: expected 3 tab-separated columns", i + 1),
            ));
        };
        let score: f64 = s
            .parse()
            .map_err(|_| EvalError::data(path, format!("line {}: bad score {s:?}", i + 1)))?;
        out.entry(q.to_string())
            .or_default()
            .insert(d.to_string(), score);
    }
    Ok(out)
}

/// Reads probe questions from a BEIR `queries.jsonl` or a LoCoMo JSON file.
pub fn read_probe_texts(path: &Path, limit: usize) -> Result<Vec<String>> {
    let texts: Vec<String> = if path.extension().is_some_and(|e| e == "jsonl") {
        read_queries(path)?.into_iter().map(|q| q.text).collect()
    } else {
        crate::locomo::read_samples(path)?
            .into_iter()
            .flat_map(|s| s.qa.into_iter().map(|q| q.question))
            .collect()
    };
    Ok(texts.into_iter().take(limit).collect())
}

/// The evaluated queries and the corpus to ingest.
#[derive(Debug)]
pub struct Selection {
    pub queries: Vec<QuerySpec>,
    pub corpus: Vec<BeirDoc>,
    pub corpus_total: usize,
    pub judged_queries_total: usize,
    pub description: String,
}

/// Applies `limit` (see the module docs).
pub fn select(
    queries: Vec<BeirQuery>,
    qrels: &HashMap<String, HashMap<String, f64>>,
    corpus: Vec<BeirDoc>,
    limit: Option<usize>,
    limit_corpus: usize,
) -> Selection {
    let judged: Vec<QuerySpec> = queries
        .into_iter()
        .filter_map(|q| {
            let rel = qrels.get(&q.id)?;
            rel.values().any(|s| *s > 0.0).then(|| QuerySpec {
                id: q.id.clone(),
                text: q.text,
                qrels: rel.clone(),
                group: None,
                conversation: None,
            })
        })
        .collect();
    let judged_total = judged.len();
    let corpus_total = corpus.len();
    match limit {
        None => Selection {
            queries: judged,
            corpus,
            corpus_total,
            judged_queries_total: judged_total,
            description: "every judged query, whole corpus".into(),
        },
        Some(n) => {
            let queries: Vec<QuerySpec> = judged.into_iter().take(n).collect();
            let needed: HashSet<&String> = queries.iter().flat_map(|q| q.qrels.keys()).collect();
            let corpus: Vec<BeirDoc> = corpus
                .into_iter()
                .enumerate()
                .filter(|(i, d)| *i < limit_corpus || needed.contains(&d.id))
                .map(|(_, d)| d)
                .collect();
            let description = format!(
                "--limit {n}: the first {} judged queries; corpus = their {} judged documents + the first {limit_corpus} documents of corpus.jsonl ({} documents; not comparable with published figures)",
                queries.len(),
                needed.len(),
                corpus.len()
            );
            Selection {
                queries,
                corpus,
                corpus_total,
                judged_queries_total: judged_total,
                description,
            }
        }
    }
}

/// Ingest figures.
#[derive(Debug, Clone, Serialize)]
pub struct IngestSummary {
    pub documents: usize,
    pub failed: usize,
    pub failures: Vec<String>,
    pub chunks: u64,
    pub seconds: f64,
    pub documents_per_second: f64,
    /// Vectors computed by the model (the rest came from the embedding cache).
    pub vectors_computed: u64,
    /// The `optimize()` call after the ingest (made after ≥ 1,000 chunks).
    pub optimize: Option<crate::stack::Optimize>,
}

/// Aggregate figures of one mode.
#[derive(Debug, Clone, Serialize)]
pub struct ModeSummary {
    pub mode: Mode,
    pub queries: usize,
    pub ndcg10: f64,
    pub recall10: f64,
    pub recall100: f64,
    pub mrr10: f64,
    pub latency: Latency,
}

impl ModeSummary {
    pub fn of(mode: Mode, scores: &[QueryScores]) -> Self {
        let col = |f: fn(&QueryScores) -> f64| mean(&scores.iter().map(f).collect::<Vec<_>>());
        ModeSummary {
            mode,
            queries: scores.len(),
            ndcg10: col(|s| s.ndcg10),
            recall10: col(|s| s.recall10),
            recall100: col(|s| s.recall100),
            mrr10: col(|s| s.mrr10),
            latency: Latency::of(&scores.iter().map(|s| s.latency_ms).collect::<Vec<_>>()),
        }
    }
}

/// A published figure to compare with.
#[derive(Debug, Clone, Serialize)]
pub struct Reference {
    pub system: String,
    pub ndcg10: Option<f64>,
    pub recall100: Option<f64>,
    pub source: String,
}

/// One setting of the fusion grid.
#[derive(Debug, Clone, Serialize)]
pub struct SweepRow {
    pub fusion: Fusion,
    pub summary: ModeSummary,
}

/// The report of a BEIR run.
#[derive(Debug, Clone, Serialize)]
pub struct BeirReport {
    pub run: RunInfo,
    pub dataset: String,
    pub split: String,
    pub doc_mode: DocMode,
    pub selection: String,
    pub queries: usize,
    pub judged_queries_total: usize,
    pub corpus_documents: usize,
    pub corpus_total: usize,
    /// Candidates per leg and ranking depth.
    pub depth: usize,
    pub fusion: Fusion,
    pub ingest: IngestSummary,
    /// Query embedding by the model (uncached): what every mode but bm25 pays on top of the
    /// latencies below, where query vectors come from the embedding cache.
    pub query_embedding: Latency,
    pub modes: Vec<ModeSummary>,
    pub references: Vec<Reference>,
    pub sweep: Vec<SweepRow>,
    pub packs: Option<PackReport>,
}

/// Published SciFact figures (the data folder's README; MTEB results).
pub fn references(dataset: &str, split: &str) -> Vec<Reference> {
    if dataset != "scifact" {
        return Vec::new();
    }
    let r = |system: &str, ndcg10, recall100, source: &str| Reference {
        system: system.into(),
        ndcg10: Some(ndcg10),
        recall100,
        source: source.into(),
    };
    if split == "train" {
        vec![
            r(
                "BM25 (bm25s)",
                0.696,
                Some(0.928),
                "MTEB results, SciFact train",
            ),
            r(
                "BAAI/bge-small-en-v1.5",
                0.7475,
                Some(0.9652),
                "MTEB results, SciFact train",
            ),
            r(
                "all-MiniLM-L6-v2",
                0.6602,
                Some(0.9324),
                "MTEB results, SciFact train",
            ),
        ]
    } else if split == "test" {
        vec![r(
            "BAAI/bge-small-en (v1, fp32)",
            0.713,
            None,
            "published test figure; Cairn's int8 export measured 0.710 on test",
        )]
    } else {
        Vec::new()
    }
}

/// The fusion grid of `--sweep`.
pub fn sweep_grid() -> Vec<Fusion> {
    let mut out = Vec::new();
    for identifiers in [Fusion::default().identifiers, 0] {
        for k in [10.0, 30.0, 60.0, 100.0] {
            for sw in [0.5, 0.75, 1.0, 1.5] {
                out.push(Fusion {
                    rrf_k: k,
                    dense_weight: 1.0,
                    sparse_weight: sw,
                    identifiers,
                    identifier_weight: Fusion::default().identifier_weight,
                });
            }
        }
    }
    out
}

fn doc_of(p: &StoredPoint) -> Option<String> {
    p.source
        .as_deref()?
        .strip_prefix(SOURCE_PREFIX)
        .map(str::to_string)
}

/// Runs a BEIR evaluation.
pub async fn run(env: &EvalEnv, opts: &BeirOptions, observer: &Observer) -> Result<BeirReport> {
    if opts.modes.is_empty() {
        return Err(EvalError::Options("no retrieval mode given".into()));
    }
    let dataset = opts
        .data
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "beir".into());
    let run_info = RunInfo::collect(env.embedder.model_id());
    let qrels = read_qrels(&opts.data.join("qrels").join(format!("{}.tsv", opts.split)))?;
    let queries = read_queries(&opts.data.join("queries.jsonl"))?;
    let corpus_path = opts.data.join("corpus.jsonl");
    let corpus = read_corpus(&corpus_path)?;
    let sel = select(queries, &qrels, corpus, opts.limit, opts.limit_corpus);
    if sel.queries.is_empty() {
        return Err(EvalError::Options(format!(
            "no judged query in split {:?}",
            opts.split
        )));
    }

    let ws = Workspace::new(&env.embedder, opts.doc_mode == DocMode::Document).await?;
    let scope = eval_scope(&format!("beir-{}", sanitize(&dataset)))?;
    let inputs: Vec<DocumentInput> = sel
        .corpus
        .iter()
        .map(|d| {
            DocumentInput::text(
                format!("{SOURCE_PREFIX}{}", d.id),
                d.full_text(),
                MediaType::Text,
            )
        })
        .collect();
    let cache_before = env.cache_bytes();
    let ingest = ws.ingest(&scope, inputs, observer).await?;
    let vectors_computed =
        env.cache_bytes().saturating_sub(cache_before) / env.cache_record_bytes();
    let mut doc_ids: HashMap<String, String> = HashMap::new();
    let mut failures = Vec::new();
    for o in &ingest.outcomes {
        match &o.result {
            Ok(r) => {
                doc_ids.insert(r.source.clone(), r.doc_id.clone());
            }
            Err(e) => failures.push(format!("{}: {e}", o.source)),
        }
    }
    let ingest_summary = IngestSummary {
        documents: doc_ids.len(),
        failed: failures.len(),
        failures: failures.iter().take(20).cloned().collect(),
        chunks: ingest.chunks,
        seconds: ingest.seconds,
        documents_per_second: doc_ids.len() as f64 / ingest.seconds.max(1e-9),
        vectors_computed,
        optimize: ingest.optimize,
    };

    // Query vectors: timed on an uncached model, then cached for the modes.
    observer(Event::Phase("query embedding".into()));
    let uncached = env.uncached().await?;
    let mut embed_ms = Vec::new();
    for q in sel.queries.iter().take(200) {
        let t = Instant::now();
        uncached.embed_query(&q.text).await?;
        embed_ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    drop(uncached);
    for q in &sel.queries {
        env.embedder.embed_query(&q.text).await?;
    }

    let depth = match opts.doc_mode {
        DocMode::Document => 100,
        DocMode::Chunked => 300,
    };
    let retriever = Retriever::new(&ws, scope.clone(), PointKind::Chunk, depth, opts.fusion);
    let mut modes = Vec::new();
    for mode in &opts.modes {
        let scores = retriever
            .evaluate(*mode, &sel.queries, &doc_of, observer)
            .await?;
        modes.push(ModeSummary::of(*mode, &scores));
    }

    let mut sweep = Vec::new();
    if opts.sweep {
        for fusion in sweep_grid() {
            let r = Retriever::new(&ws, scope.clone(), PointKind::Chunk, depth, fusion);
            let scores = r
                .evaluate(Mode::Hybrid, &sel.queries, &doc_of, observer)
                .await?;
            sweep.push(SweepRow {
                fusion,
                summary: ModeSummary::of(Mode::Hybrid, &scores),
            });
        }
    }

    let packs = if opts.budgets.is_empty() {
        None
    } else {
        Some(pack_eval(&ws, &scope, &sel, &doc_ids, opts, observer).await?)
    };

    Ok(BeirReport {
        run: run_info,
        references: references(&sanitize(&dataset), &opts.split),
        dataset,
        split: opts.split.clone(),
        doc_mode: opts.doc_mode,
        selection: sel.description.clone(),
        queries: sel.queries.len(),
        judged_queries_total: sel.judged_queries_total,
        corpus_documents: sel.corpus.len(),
        corpus_total: sel.corpus_total,
        depth,
        fusion: opts.fusion,
        ingest: ingest_summary,
        query_embedding: Latency::of(&embed_ms),
        modes,
        sweep,
        packs,
    })
}

async fn pack_eval(
    ws: &Workspace,
    scope: &cairn_models::Scope,
    sel: &Selection,
    doc_ids: &HashMap<String, String>,
    opts: &BeirOptions,
    observer: &Observer,
) -> Result<PackReport> {
    let answerable: Vec<PackQuery> = sel
        .queries
        .iter()
        .map(|q| PackQuery {
            text: q.text.clone(),
            evidence: q
                .qrels
                .iter()
                .filter(|(_, s)| **s > 0.0)
                .map(|(d, _)| d.clone())
                .collect(),
            conversation: None,
        })
        .collect();
    let mut probe_sets: Vec<(String, String, Vec<PackQuery>)> = Vec::new();
    if let Some(path) = &opts.probes {
        let probes = read_probe_texts(path, opts.probe_limit)?;
        probe_sets.push((
            "foreign".into(),
            format!(
                "the first {} questions of {} (another dataset) asked against this corpus",
                probes.len(),
                path.display()
            ),
            probes
                .into_iter()
                .map(|text| PackQuery {
                    text,
                    evidence: HashSet::new(),
                    conversation: None,
                })
                .collect(),
        ));
    }
    let cited =
        |c: &cairn_models::Citation| c.source.strip_prefix(SOURCE_PREFIX).map(str::to_string);
    // Held-out probes are asked after their evidence is deleted, so they are evaluated in a
    // second pass below; the first pass has the answerable set and foreign probes.
    let mut report = crate::packs::evaluate(
        ws,
        scope,
        &answerable,
        &probe_sets,
        &opts.budgets,
        &cited,
        "answerable",
        observer,
    )
    .await?;
    if opts.holdout > 0 {
        let held: Vec<&QuerySpec> = sel.queries.iter().take(opts.holdout).collect();
        observer(Event::Phase(format!(
            "held-out: deleting the relevant documents of {} queries",
            held.len()
        )));
        let partition = scope.partition();
        let mut deleted = 0usize;
        let mut to_delete: HashSet<&String> = HashSet::new();
        for q in &held {
            to_delete.extend(q.qrels.keys());
        }
        for doc in to_delete {
            if let Some(doc_id) = doc_ids.get(&format!("{SOURCE_PREFIX}{doc}")) {
                let gone =
                    cairn_ingest::catalog::delete_document(ws.store.as_ref(), &partition, doc_id)
                        .await?;
                deleted += usize::from(gone.is_some());
            }
        }
        let probes: Vec<PackQuery> = held
            .iter()
            .map(|q| PackQuery {
                text: q.text.clone(),
                evidence: HashSet::new(),
                conversation: None,
            })
            .collect();
        let extra = crate::packs::evaluate(
            ws,
            scope,
            &[],
            &[(
                "held-out".into(),
                format!(
                    "in-domain: the first {} judged queries asked again after their {deleted} relevant documents were deleted (catalog::delete_document)",
                    probes.len()
                ),
                probes,
            )],
            &[],
            &cited,
            "unused",
            observer,
        )
        .await?;
        let mut sets = report.calibration.sets.clone();
        sets.extend(extra.calibration.sets.into_iter().filter(|s| !s.answerable));
        report.calibration =
            crate::packs::calibrate(sets, report.calibration.current_min_relevance);
    }
    Ok(report)
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect()
}

fn fusion_label(f: &Fusion) -> String {
    format!(
        "RRF k {}, dense weight {}, sparse weight {}, identifiers {}",
        f.rrf_k, f.dense_weight, f.sparse_weight, f.identifiers
    )
}

impl BeirReport {
    /// The sweep setting with the best nDCG@10 (the first on ties).
    pub fn best_sweep(&self) -> Option<&SweepRow> {
        self.sweep
            .iter()
            .fold(None, |best: Option<&SweepRow>, r| match best {
                Some(b) if b.summary.ndcg10 >= r.summary.ndcg10 => Some(b),
                _ => Some(r),
            })
    }

    /// File stem of this run's reports.
    pub fn stem(&self) -> String {
        format!(
            "beir-{}-{}-{}",
            sanitize(&self.dataset),
            sanitize(&self.split),
            self.doc_mode.as_str()
        )
    }

    /// The Markdown report.
    pub fn markdown(&self) -> String {
        let mut md = format!(
            "# BEIR {} ({} split, {} mode)\n\n{}\n",
            self.dataset,
            self.split,
            self.doc_mode.as_str(),
            self.run.markdown()
        );
        md.push_str(&format!(
            "\n## Data\n\n- {} queries evaluated ({} judged queries in the split); {} of {} corpus documents ingested.\n- Selection: {}.\n- Documents are ingested through `Ingestor::ingest_documents` as source `beir:<id>` with text `title + \" \" + text`; {}.\n- Ranking depth {} (candidates per leg), fusion of the hybrid modes: {}.\n",
            self.queries,
            self.judged_queries_total,
            self.corpus_documents,
            self.corpus_total,
            self.selection,
            match self.doc_mode {
                DocMode::Document => "one vector per document (whole text, truncated by the model at 512 tokens)",
                DocMode::Chunked => "256-token chunks with 32 overlap; a document scores as its best chunk",
            },
            self.depth,
            fusion_label(&self.fusion)
        ));
        let i = &self.ingest;
        md.push_str(&format!(
            "\n## Ingest\n\n{} documents ({} failed) → {} chunks in {:.1} s ({:.1} documents/s); {} vectors computed by the model, the rest read from the embedding cache. {}\n",
            i.documents,
            i.failed,
            i.chunks,
            i.seconds,
            i.documents_per_second,
            i.vectors_computed,
            match i.optimize {
                None => "`optimize()` not called (under 1,000 chunks, as in `cairn ingest`): dense search is exact.".to_string(),
                Some(o) if o.optimized => format!(
                    "`optimize()` (called after ≥ 1,000 chunks, as `cairn ingest` does) built the index in {:.1} s: dense search uses HNSW.",
                    o.seconds
                ),
                Some(o) => format!(
                    "`optimize()` (called after ≥ 1,000 chunks, as `cairn ingest` does) returned false in {:.1} s: nothing to optimize (no HNSW index; the vectors are below the engine's indexing threshold), so dense search is exact.",
                    o.seconds
                ),
            }
        ));
        for f in &i.failures {
            md.push_str(&format!("- failed: {f}\n"));
        }
        md.push_str("\n## Retrieval quality\n\n| system | nDCG@10 | Recall@10 | Recall@100 | MRR@10 | p50 ms | p95 ms |\n|---|---:|---:|---:|---:|---:|---:|\n");
        let row = |label: String, m: &ModeSummary| {
            format!(
                "| {label} | {:.3} | {:.3} | {:.3} | {:.3} | {:.1} | {:.1} |\n",
                m.ndcg10, m.recall10, m.recall100, m.mrr10, m.latency.p50_ms, m.latency.p95_ms
            )
        };
        for m in &self.modes {
            md.push_str(&row(format!("Cairn `{}`", m.mode), m));
        }
        if let Some(best) = self.best_sweep() {
            md.push_str(&row(
                format!(
                    "Cairn `hybrid`, best of the sweep ({})",
                    fusion_label(&best.fusion)
                ),
                &best.summary,
            ));
        }
        for r in &self.references {
            md.push_str(&format!(
                "| {} (published) | {} | – | {} | – | – | – |\n",
                r.system,
                f3(r.ndcg10),
                f3(r.recall100)
            ));
        }
        if self.modes.iter().any(|m| m.mode == Mode::HybridQdrant) {
            md.push_str("\n`hybrid-qdrant`: Qdrant orders candidates with equal fused scores (e.g. rank 1 in one leg only, for two documents) in no fixed order, so its figures move slightly from run to run; `hybrid` breaks ties by point id.\n");
        }
        md.push_str(&format!(
            "\nLatency is per query, one query at a time, from the call to the ranked list; query vectors come from the embedding cache. Query embedding by the model (uncached, {} queries): p50 {:.1} ms, p95 {:.1} ms — add it for every mode except `bm25`.\n",
            self.query_embedding.samples, self.query_embedding.p50_ms, self.query_embedding.p95_ms
        ));
        if !self.references.is_empty() {
            md.push_str("\nReferences: ");
            let srcs: Vec<String> = self
                .references
                .iter()
                .map(|r| format!("{}: {}", r.system, r.source))
                .collect();
            md.push_str(&srcs.join("; "));
            md.push_str(".\n");
        }
        if let Some(best) = self.best_sweep() {
            md.push_str("\n## Fusion sweep (`hybrid` mode, tuned on this split)\n\n`identifiers` = `RecallConfig::max_identifiers` (0: no identifier probes).\n\n| RRF k | dense weight | sparse weight | identifiers | nDCG@10 | Recall@10 | Recall@100 | MRR@10 |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n");
            for r in &self.sweep {
                let mark = if std::ptr::eq(r, best) { "**" } else { "" };
                let m = &r.summary;
                md.push_str(&format!(
                    "| {} | {} | {} | {} | {mark}{:.3}{mark} | {:.3} | {:.3} | {:.3} |\n",
                    r.fusion.rrf_k,
                    r.fusion.dense_weight,
                    r.fusion.sparse_weight,
                    r.fusion.identifiers,
                    m.ndcg10,
                    m.recall10,
                    m.recall100,
                    m.mrr10
                ));
            }
        }
        if let Some(p) = &self.packs {
            md.push_str("\n## MemoryPacks\n\n");
            md.push_str(&p.markdown());
        }
        md
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(id: &str) -> BeirDoc {
        BeirDoc {
            id: id.into(),
            title: String::new(),
            text: format!("text {id}"),
        }
    }

    #[test]
    fn limit_keeps_judged_documents_and_the_first_ones() {
        let queries = vec![
            BeirQuery {
                id: "q0".into(),
                text: "no judgement".into(),
            },
            BeirQuery {
                id: "q1".into(),
                text: "a".into(),
            },
            BeirQuery {
                id: "q2".into(),
                text: "b".into(),
            },
        ];
        let mut qrels: HashMap<String, HashMap<String, f64>> = HashMap::new();
        qrels.insert("q1".into(), HashMap::from([("d9".to_string(), 1.0)]));
        qrels.insert("q2".into(), HashMap::from([("d5".to_string(), 1.0)]));
        let corpus: Vec<BeirDoc> = (0..10).map(|i| doc(&format!("d{i}"))).collect();
        let sel = select(queries.clone(), &qrels, corpus.clone(), Some(1), 2);
        assert_eq!(sel.queries.len(), 1);
        assert_eq!(sel.queries[0].id, "q1");
        let ids: Vec<&str> = sel.corpus.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids, vec!["d0", "d1", "d9"]);
        let all = select(queries, &qrels, corpus, None, 2);
        assert_eq!(all.queries.len(), 2);
        assert_eq!(all.corpus.len(), 10);
    }

    #[test]
    fn qrels_parse_with_header() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("q.tsv");
        std::fs::write(&p, "query-id\tcorpus-id\tscore\n1\td1\t1\n1\td2\t2\n").unwrap();
        let q = read_qrels(&p).unwrap();
        assert_eq!(q["1"]["d2"], 2.0);
        std::fs::write(&p, "query-id\tcorpus-id\tscore\n1\td1\n").unwrap();
        assert!(read_qrels(&p).is_err());
    }
}
