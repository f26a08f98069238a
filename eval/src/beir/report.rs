//! The BEIR report: aggregate figures per mode, the fusion sweep, published references,
//! Markdown, and the files written by [`write_beir`].

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::options::DocMode;
use crate::chart::{self, BarSeries};
use crate::metrics::{mean, Latency};
use crate::packs::{
    pack_curve, reliability_curves, PackRecallRatio, PackReport, Recall10Reference,
};
use crate::report::{f3, sanitize, RunInfo};
use crate::retrieval::{Fusion, Mode, QueryScores};
use crate::stack::Optimize;
use crate::Result;

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
    pub optimize: Option<Optimize>,
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
    /// Pack evidence recall at 1,000 tokens over the recall path's Recall@10
    /// ([`BeirReport::measure_pack_recall_ratio`], set when the report is built).
    pub pack_recall_ratio: Option<PackRecallRatio>,
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

fn fusion_label(f: &Fusion) -> String {
    format!(
        "recall path: dense share {} (short items) to {} (long items), identifiers {} (weight {}); Qdrant-side RRF: k {}, dense weight {}, sparse weight {}",
        f.dense_short, f.dense_long, f.identifiers, f.identifier_weight, f.rrf_k, f.dense_weight, f.sparse_weight
    )
}

impl BeirReport {
    /// The `hybrid` mode's Recall@10: the packs are built for the same queries.
    pub fn pack_recall_reference(&self) -> Option<Recall10Reference> {
        let m = self.modes.iter().find(|m| m.mode == Mode::Hybrid)?;
        Some(Recall10Reference {
            label: "`hybrid` mode (the recall path), same queries".into(),
            queries: m.queries,
            recall10: m.recall10,
        })
    }

    /// Pack evidence recall at 1,000 tokens over the `hybrid` Recall@10.
    pub fn measure_pack_recall_ratio(&self) -> Option<PackRecallRatio> {
        self.packs
            .as_ref()?
            .recall_ratio(self.pack_recall_reference()?)
    }

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
            md.push_str("\n## Fusion sweep (`hybrid` mode, tuned on this split)\n\n`identifiers` = `RecallConfig::max_identifiers` (0: no identifier probes).\n\n| dense share (short) | dense share (long) | identifiers | nDCG@10 | Recall@10 | Recall@100 | MRR@10 |\n|---:|---:|---:|---:|---:|---:|---:|\n");
            for r in &self.sweep {
                let mark = if std::ptr::eq(r, best) { "**" } else { "" };
                let m = &r.summary;
                md.push_str(&format!(
                    "| {} | {} | {} | {mark}{:.3}{mark} | {:.3} | {:.3} | {:.3} |\n",
                    r.fusion.dense_short,
                    r.fusion.dense_long,
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
            md.push_str(&p.markdown(self.pack_recall_ratio.as_ref()));
        }
        md
    }
}

/// Writes a BEIR report to `dir`: `<stem>.json`, `<stem>.md`, `<stem>-modes.svg` and, with
/// packs, `<stem>-packs.svg` and `<stem>-reliability.svg`. Returns the paths written.
pub fn write_beir(report: &BeirReport, dir: &Path) -> Result<Vec<PathBuf>> {
    let stem = report.stem();
    let mut out = vec![
        crate::report::write_file(
            dir,
            &format!("{stem}.json"),
            &crate::report::to_json(report)?,
        )?,
        crate::report::write_file(dir, &format!("{stem}.md"), &report.markdown())?,
    ];
    let groups: Vec<String> = ["nDCG@10", "Recall@10", "Recall@100", "MRR@10"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut series: Vec<BarSeries> = report
        .modes
        .iter()
        .map(|m| BarSeries {
            name: format!("Cairn {}", m.mode),
            values: vec![
                Some(m.ndcg10),
                Some(m.recall10),
                Some(m.recall100),
                Some(m.mrr10),
            ],
        })
        .collect();
    if let Some(best) = report.best_sweep() {
        let m = &best.summary;
        series.push(BarSeries {
            name: format!(
                "Cairn hybrid, tuned (dense share {}–{}, identifiers {})",
                best.fusion.dense_short, best.fusion.dense_long, best.fusion.identifiers
            ),
            values: vec![
                Some(m.ndcg10),
                Some(m.recall10),
                Some(m.recall100),
                Some(m.mrr10),
            ],
        });
    }
    series.extend(report.references.iter().map(|r| BarSeries {
        name: format!("{} (published)", r.system),
        values: vec![r.ndcg10, None, r.recall100, None],
    }));
    let modes_svg = dir.join(format!("{stem}-modes.svg"));
    chart::grouped_bars(
        &modes_svg,
        &format!(
            "{} {} ({} mode): retrieval quality per mode",
            report.dataset,
            report.split,
            report.doc_mode.as_str()
        ),
        &groups,
        &series,
        1.0,
    )?;
    out.push(modes_svg);
    if let Some(p) = &report.packs {
        let svg = dir.join(format!("{stem}-packs.svg"));
        chart::curves(
            &svg,
            &format!("{}: MemoryPack evidence recall per token", report.dataset),
            "mean tokens used by the pack",
            "relevant evidence cited (fraction)",
            &[pack_curve(&report.dataset, p)],
        )?;
        out.push(svg);
        let svg = dir.join(format!("{stem}-reliability.svg"));
        chart::curves(
            &svg,
            &format!(
                "{}: answerability score reliability (budget {})",
                report.dataset, p.calibration.budget
            ),
            "mean answerability score (per bin)",
            "answerable with evidence cited (fraction)",
            &reliability_curves(&p.calibration),
        )?;
        out.push(svg);
    }
    Ok(out)
}
