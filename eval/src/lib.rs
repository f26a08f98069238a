//! Cairn's retrieval-quality harness: public benchmarks (BEIR, LoCoMo) run through the real
//! ingest and recall paths, with metrics and reports.
//!
//! Nothing here is mocked: the harness assembles the same store (embedded Qdrant), embedder
//! (the local ONNX model) and write/read paths the service uses ([`stack`]), in a throwaway
//! data directory per run, with a persistent embedding cache so a re-run embeds nothing.
//!
//! - [`beir`]: BEIR folders (SciFact...) in four retrieval modes ([`retrieval::Mode`]):
//!   store dense, store BM25, the real hybrid recall path, and Qdrant-side RRF. nDCG@10,
//!   Recall@10/100, MRR@10 and per-query latency; a fusion sweep; published figures beside.
//! - [`locomo`]: LoCoMo conversations recorded as messages; per-category nDCG@10,
//!   Recall@5/10 against the evidence turns.
//! - [`packs`]: MemoryPack quality per token budget, and coverage calibration with
//!   unanswerable probes (top-cosine distributions and a `min_relevance` recommendation).
//! - [`scenario`]: declarative behaviour scenarios (JSON under `eval/scenarios/`).
//! - [`metrics`]: nDCG, recall, MRR (unit- and property-tested), latency percentiles.
//! - [`report`] and [`chart`]: JSON, Markdown and SVG outputs with run provenance.
//!
//! The `cairn eval` subcommands (in the `api` crate) are thin wrappers over [`beir::run`],
//! [`locomo::run`] and [`scenario::run_dir`], plus [`write_beir`] / [`write_locomo`].

pub mod beir;
pub mod chart;
mod error;
pub mod locomo;
pub mod metrics;
pub mod packs;
pub mod report;
pub mod retrieval;
pub mod scenario;
pub mod stack;

use std::path::{Path, PathBuf};

pub use error::{EvalError, Result};
pub use retrieval::{Fusion, Mode};
pub use stack::{EvalEnv, Event, Observer};

use chart::{BarSeries, Curve};

fn pack_curve(name: &str, p: &packs::PackReport) -> Curve {
    Curve {
        name: format!("{name} (budgets {})", budgets_label(p)),
        points: p
            .curve
            .iter()
            .map(|b| (b.mean_tokens, b.evidence_recall))
            .collect(),
    }
}

fn budgets_label(p: &packs::PackReport) -> String {
    p.curve
        .iter()
        .map(|b| b.budget.to_string())
        .collect::<Vec<_>>()
        .join("/")
}

/// Writes a BEIR report to `dir`: `<stem>.json`, `<stem>.md`, `<stem>-modes.svg` and, with
/// packs, `<stem>-packs.svg`. Returns the paths written.
pub fn write_beir(report: &beir::BeirReport, dir: &Path) -> Result<Vec<PathBuf>> {
    let stem = report.stem();
    let mut out = vec![
        report::write_file(dir, &format!("{stem}.json"), &report::to_json(report)?)?,
        report::write_file(dir, &format!("{stem}.md"), &report.markdown())?,
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
                "Cairn hybrid, tuned (k {}, sparse weight {}, identifiers {})",
                best.fusion.rrf_k, best.fusion.sparse_weight, best.fusion.identifiers
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
    }
    Ok(out)
}

/// Writes a LoCoMo report to `dir`: `locomo.json`, `locomo.md`, `locomo-categories.svg`
/// and, with packs, `locomo-packs.svg`.
pub fn write_locomo(report: &locomo::LocomoReport, dir: &Path) -> Result<Vec<PathBuf>> {
    let stem = report.stem();
    let mut out = vec![
        report::write_file(dir, &format!("{stem}.json"), &report::to_json(report)?)?,
        report::write_file(dir, &format!("{stem}.md"), &report.markdown())?,
    ];
    if let Some(first) = report.modes.first() {
        let groups: Vec<String> = first
            .categories
            .iter()
            .map(|c| c.category.clone())
            .chain(std::iter::once("overall".to_string()))
            .collect();
        let mut series: Vec<BarSeries> = report
            .modes
            .iter()
            .map(|m| BarSeries {
                name: format!("Cairn {}", m.mode),
                values: m
                    .categories
                    .iter()
                    .chain(std::iter::once(&m.overall))
                    .map(|c| Some(c.ndcg10))
                    .collect(),
            })
            .collect();
        let published = |f: fn(&locomo::CategoryScores) -> Option<f64>| -> Vec<Option<f64>> {
            first
                .categories
                .iter()
                .map(f)
                .chain(std::iter::once(None))
                .collect()
        };
        series.push(BarSeries {
            name: "bge-small-en-v1.5 (published, 10 conv.)".into(),
            values: published(|c| c.published_dense),
        });
        series.push(BarSeries {
            name: "BM25 (published, 10 conv.)".into(),
            values: published(|c| c.published_bm25),
        });
        let svg = dir.join(format!("{stem}-categories.svg"));
        chart::grouped_bars(
            &svg,
            "LoCoMo: nDCG@10 per question category",
            &groups,
            &series,
            1.0,
        )?;
        out.push(svg);
    }
    if let Some(p) = &report.packs {
        let svg = dir.join(format!("{stem}-packs.svg"));
        chart::curves(
            &svg,
            "LoCoMo: MemoryPack evidence recall per token",
            "mean tokens used by the pack",
            "evidence turns cited (fraction)",
            &[pack_curve("locomo", p)],
        )?;
        out.push(svg);
    }
    Ok(out)
}
