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
//!
//! This module is the runner (selection, ingest, modes, sweep, packs); the files are read by
//! [`crate::data::beir`], the options are in [`options`] and the report in [`report`].

pub mod options;
pub mod report;

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use cairn_ingest::{DocumentInput, MediaType};
use cairn_models::{PointKind, StoredPoint};

use crate::data::beir::{read_corpus, read_qrels, read_queries, BeirDoc, BeirQuery, Qrels};
use crate::data::read_probe_texts;
use crate::metrics::Latency;
use crate::packs::{PackQuery, PackReport};
use crate::report::{sanitize, RunInfo};
use crate::retrieval::{Fusion, Mode, QuerySpec, Retriever};
use crate::stack::{eval_scope, EvalEnv, Event, Observer, Workspace};
use crate::{EvalError, Result};

pub use options::{BeirOptions, DocMode};
pub use report::{
    references, write_beir, BeirReport, IngestSummary, ModeSummary, Reference, SweepRow,
};

/// Source prefix of ingested BEIR documents.
pub const SOURCE_PREFIX: &str = "beir:";

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
    qrels: &Qrels,
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

/// The fusion grid of `--sweep`: the recall path's dense shares, with and without
/// identifier probes.
pub fn sweep_grid() -> Vec<Fusion> {
    let mut out = Vec::new();
    for identifiers in [Fusion::default().identifiers, 0] {
        for dense_short in [0.2, 0.3, 0.4] {
            for dense_long in [0.5, 0.6, 0.7] {
                out.push(Fusion {
                    dense_short,
                    dense_long,
                    identifiers,
                    ..Fusion::default()
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

    let ws = Workspace::new(env, opts.doc_mode == DocMode::Document).await?;
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
    let vectors_computed = env.vectors_computed_since(cache_before);
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
    if let Some(path) = &opts.dump_legs {
        retriever.dump_legs(&sel.queries, &doc_of, path).await?;
    }
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
        let packs = pack_eval(&ws, &scope, &sel, &doc_ids, opts, observer).await?;
        if let Some(path) = &opts.dump_legs {
            crate::packs::dump_packs(&packs.calibration.sets, &path.with_extension("packs.jsonl"))?;
        }
        Some(packs)
    };

    let mut report = BeirReport {
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
        pack_recall_ratio: None,
    };
    report.pack_recall_ratio = report.measure_pack_recall_ratio();
    Ok(report)
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
}
