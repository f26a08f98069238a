//! The LoCoMo report: per-category figures, published references, Markdown and the files
//! written by [`write_locomo`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::chart::{self, BarSeries};
use crate::data::locomo::category_name;
use crate::metrics::{mean, Latency};
use crate::packs::{reliability_curves, PackRecallRatio, PackReport, Recall10Reference};
use crate::report::{f3, RunInfo};
use crate::retrieval::{Fusion, Mode, QueryScores, QuerySpec};
use crate::Result;

/// Published per-category nDCG@10 on all 10 conversations (bge-small-en-v1.5, BM25).
pub fn published(c: u8) -> Option<(f64, f64)> {
    match c {
        4 => Some((0.462, 0.542)),
        1 => Some((0.299, 0.267)),
        2 => Some((0.537, 0.564)),
        3 => Some((0.265, 0.245)),
        5 => Some((0.255, 0.490)),
        _ => None,
    }
}

/// Figures of one category (or all) under one mode.
#[derive(Debug, Clone, Serialize)]
pub struct CategoryScores {
    pub category: String,
    pub questions: usize,
    pub ndcg10: f64,
    pub recall5: f64,
    pub recall10: f64,
    pub mrr10: f64,
    /// Published nDCG@10 (bge-small-en-v1.5, BM25) on all 10 conversations.
    pub published_dense: Option<f64>,
    pub published_bm25: Option<f64>,
}

/// One mode's results.
#[derive(Debug, Clone, Serialize)]
pub struct LocomoMode {
    pub mode: Mode,
    pub categories: Vec<CategoryScores>,
    pub overall: CategoryScores,
    pub latency: Latency,
}

/// The report of a LoCoMo run.
#[derive(Debug, Clone, Serialize)]
pub struct LocomoReport {
    pub run: RunInfo,
    pub data: String,
    pub conversations: Vec<String>,
    pub messages: usize,
    pub questions: usize,
    pub skipped_questions: usize,
    pub ingest_seconds: f64,
    pub vectors_computed: u64,
    pub fusion: Fusion,
    pub modes: Vec<LocomoMode>,
    pub packs: Option<PackReport>,
    /// Pack evidence recall at 1,000 tokens over the recall path's Recall@10
    /// ([`LocomoReport::measure_pack_recall_ratio`], set when the report is built).
    pub pack_recall_ratio: Option<PackRecallRatio>,
}

/// Categories whose questions make the pack evaluation's answerable set.
const PACK_CATEGORIES: std::ops::RangeInclusive<u8> = 1..=4;

/// Recall@10 over the categories in `PACK_CATEGORIES`, weighted by their question counts;
/// `None` without such questions. Categories are named `"<number> <name>"`.
fn recall10_over_pack_categories(mode: &LocomoMode) -> Option<(usize, f64)> {
    let rows: Vec<&CategoryScores> = mode
        .categories
        .iter()
        .filter(|c| {
            c.category
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u8>().ok())
                .is_some_and(|n| PACK_CATEGORIES.contains(&n))
        })
        .collect();
    let n: usize = rows.iter().map(|c| c.questions).sum();
    (n > 0).then(|| {
        (
            n,
            rows.iter()
                .map(|c| c.recall10 * c.questions as f64)
                .sum::<f64>()
                / n as f64,
        )
    })
}

fn aggregate(
    name: String,
    scores: &[&QueryScores],
    published: Option<(f64, f64)>,
) -> CategoryScores {
    let col = |f: fn(&QueryScores) -> f64| mean(&scores.iter().map(|s| f(s)).collect::<Vec<_>>());
    CategoryScores {
        category: name,
        questions: scores.len(),
        ndcg10: col(|s| s.ndcg10),
        recall5: col(|s| s.recall5),
        recall10: col(|s| s.recall10),
        mrr10: col(|s| s.mrr10),
        published_dense: published.map(|p| p.0),
        published_bm25: published.map(|p| p.1),
    }
}

impl LocomoMode {
    /// One mode's figures: per category (the query's `group`) and overall. `scores` are in
    /// the order of `queries`.
    pub fn of(mode: Mode, queries: &[QuerySpec], scores: &[QueryScores]) -> Self {
        let mut by_cat: BTreeMap<u8, Vec<&QueryScores>> = BTreeMap::new();
        for (q, s) in queries.iter().zip(scores) {
            let c: u8 = q.group.as_deref().and_then(|g| g.parse().ok()).unwrap_or(0);
            by_cat.entry(c).or_default().push(s);
        }
        let categories = by_cat
            .iter()
            .map(|(c, s)| aggregate(format!("{c} {}", category_name(*c)), s, published(*c)))
            .collect();
        let all: Vec<&QueryScores> = scores.iter().collect();
        LocomoMode {
            mode,
            categories,
            overall: aggregate("overall".into(), &all, None),
            latency: Latency::of(&scores.iter().map(|s| s.latency_ms).collect::<Vec<_>>()),
        }
    }
}

impl LocomoReport {
    /// The `hybrid` mode's Recall@10 over categories 1–4 (the pack evaluation's answerable
    /// questions), weighted by question count.
    pub fn pack_recall_reference(&self) -> Option<Recall10Reference> {
        let m = self.modes.iter().find(|m| m.mode == Mode::Hybrid)?;
        let (questions, recall10) = recall10_over_pack_categories(m)?;
        Some(Recall10Reference {
            label:
                "`hybrid` mode (the recall path) over categories 1–4, weighted by question count"
                    .into(),
            queries: questions,
            recall10,
        })
    }

    /// Pack evidence recall at 1,000 tokens over the `hybrid` Recall@10 of categories 1–4.
    pub fn measure_pack_recall_ratio(&self) -> Option<PackRecallRatio> {
        self.packs
            .as_ref()?
            .recall_ratio(self.pack_recall_reference()?)
    }

    pub fn stem(&self) -> String {
        "locomo".into()
    }

    pub fn markdown(&self) -> String {
        let mut md = format!("# LoCoMo retrieval\n\n{}\n", self.run.markdown());
        md.push_str(&format!(
            "\n## Data\n\n- `{}`: conversations {} — {} messages recorded with `Ingestor::record_messages` in {:.1} s ({} vectors computed, the rest from the embedding cache).\n- {} questions evaluated ({} skipped: no usable evidence id); each question is retrieved within its own conversation and scored against its evidence turns.\n- Fusion: `hybrid` (the recall path) dense share {} (short items) to {} (long items), identifiers {} (weight {}); `hybrid-qdrant` RRF k = {}, dense weight {}, sparse weight {}. Ranking depth 100.\n- Published figures are MTEB/LMEB LoCoMo nDCG@10 on all 10 conversations; ours are on the conversations above.\n",
            self.data,
            self.conversations.join(", "),
            self.messages,
            self.ingest_seconds,
            self.vectors_computed,
            self.questions,
            self.skipped_questions,
            self.fusion.dense_short,
            self.fusion.dense_long,
            self.fusion.identifiers,
            self.fusion.identifier_weight,
            self.fusion.rrf_k,
            self.fusion.dense_weight,
            self.fusion.sparse_weight
        ));
        md.push_str("\n## nDCG@10 per category\n\n| category | questions |");
        for m in &self.modes {
            md.push_str(&format!(" Cairn `{}` |", m.mode));
        }
        md.push_str(" bge-small-en-v1.5 (published) | BM25 (published) |\n|---|---:|");
        md.push_str(&"---:|".repeat(self.modes.len() + 2));
        md.push('\n');
        if let Some(first) = self.modes.first() {
            for (i, c) in first.categories.iter().enumerate() {
                md.push_str(&format!("| {} | {} |", c.category, c.questions));
                for m in &self.modes {
                    md.push_str(&format!(" {:.3} |", m.categories[i].ndcg10));
                }
                md.push_str(&format!(
                    " {} | {} |\n",
                    f3(c.published_dense),
                    f3(c.published_bm25)
                ));
            }
            md.push_str(&format!("| overall | {} |", first.overall.questions));
            for m in &self.modes {
                md.push_str(&format!(" {:.3} |", m.overall.ndcg10));
            }
            md.push_str(" – | – |\n");
        }
        md.push_str("\n## All metrics per mode\n\n| mode | category | nDCG@10 | Recall@5 | Recall@10 | MRR@10 |\n|---|---|---:|---:|---:|---:|\n");
        for m in &self.modes {
            for c in m.categories.iter().chain(std::iter::once(&m.overall)) {
                md.push_str(&format!(
                    "| {} | {} | {:.3} | {:.3} | {:.3} | {:.3} |\n",
                    m.mode, c.category, c.ndcg10, c.recall5, c.recall10, c.mrr10
                ));
            }
        }
        md.push_str("\n## Latency per question\n\n| mode | p50 ms | p95 ms |\n|---|---:|---:|\n");
        for m in &self.modes {
            md.push_str(&format!(
                "| {} | {:.1} | {:.1} |\n",
                m.mode, m.latency.p50_ms, m.latency.p95_ms
            ));
        }
        md.push_str("\nQuery vectors come from the embedding cache (see the BEIR report for the model's query embedding latency).\n");
        if let Some(p) = &self.packs {
            md.push_str("\n## MemoryPacks\n\n");
            md.push_str(&p.markdown(self.pack_recall_ratio.as_ref()));
        }
        md
    }
}

/// Writes a LoCoMo report to `dir`: `locomo.json`, `locomo.md`, `locomo-categories.svg`
/// and, with packs, `locomo-packs.svg` and `locomo-reliability.svg`.
pub fn write_locomo(report: &LocomoReport, dir: &Path) -> Result<Vec<PathBuf>> {
    let stem = report.stem();
    let mut out = vec![
        crate::report::write_file(
            dir,
            &format!("{stem}.json"),
            &crate::report::to_json(report)?,
        )?,
        crate::report::write_file(dir, &format!("{stem}.md"), &report.markdown())?,
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
        let published = |f: fn(&CategoryScores) -> Option<f64>| -> Vec<Option<f64>> {
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
            &[crate::packs::pack_curve("locomo", p)],
        )?;
        out.push(svg);
        let svg = dir.join(format!("{stem}-reliability.svg"));
        chart::curves(
            &svg,
            &format!(
                "LoCoMo: answerability score reliability (budget {})",
                p.calibration.budget
            ),
            "mean answerability score (per bin)",
            "answerable with evidence cited (fraction)",
            &reliability_curves(&p.calibration),
        )?;
        out.push(svg);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cat(category: &str, questions: usize, recall10: f64) -> CategoryScores {
        CategoryScores {
            category: category.into(),
            questions,
            ndcg10: 0.0,
            recall5: 0.0,
            recall10,
            mrr10: 0.0,
            published_dense: None,
            published_bm25: None,
        }
    }

    #[test]
    fn pack_reference_weights_categories_one_to_four() {
        let mode = LocomoMode {
            mode: Mode::Hybrid,
            categories: vec![
                cat("1 multi-hop", 10, 0.5),
                cat("2 temporal", 30, 0.9),
                cat("5 adversarial", 50, 0.0),
            ],
            overall: cat("overall", 90, 0.4),
            latency: Latency::of(&[]),
        };
        let (n, r) = recall10_over_pack_categories(&mode).unwrap();
        assert_eq!(n, 40);
        assert!((r - (10.0 * 0.5 + 30.0 * 0.9) / 40.0).abs() < 1e-12, "{r}");
        let only_adversarial = LocomoMode {
            categories: vec![cat("5 adversarial", 5, 0.3)],
            ..mode
        };
        assert!(recall10_over_pack_categories(&only_adversarial).is_none());
    }
}
