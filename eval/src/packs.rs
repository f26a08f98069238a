//! MemoryPack quality and coverage calibration.
//!
//! - Quality per token: for each answerable query and token budget, the pack from
//!   `Recaller::recall` (the production configuration) is scored by the fraction of the
//!   query's relevant evidence among the pack's citations, beside the tokens it used.
//! - Calibration: answerable queries and *unanswerable probes* (questions about things absent
//!   from the scope) go through the same recall; we count how often the pack's coverage is
//!   `none` / `partial` / `full`, and summarize the top dense cosine (query vs best item) of
//!   each set. Coverage is `none` exactly when no candidate reaches `min_relevance` and none
//!   has an identifier hit, so the cosine distributions say which `min_relevance` separates
//!   the sets best.

use std::collections::HashSet;

use cairn_models::{Citation, Coverage, Scope};
use cairn_recall::{RecallConfig, RecallFilters, RecallRequest, Recaller};
use serde::Serialize;

use crate::chart::Curve;
use crate::metrics::{mean, Distribution};
use crate::report::f3;
use crate::stack::{Event, Observer, Workspace};
use crate::Result;

/// Budgets of the quality-per-token curve.
pub const DEFAULT_BUDGETS: [usize; 4] = [250, 500, 1000, 2000];
/// Budget at which coverage is calibrated (the recall default).
pub const CALIBRATION_BUDGET: usize = 1000;

/// One query for the pack evaluation.
#[derive(Debug, Clone)]
pub struct PackQuery {
    pub text: String,
    /// Ids of the relevant evidence (empty for unanswerable probes).
    pub evidence: HashSet<String>,
    pub conversation: Option<String>,
}

/// Counts of pack coverage values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CoverageCounts {
    pub none: usize,
    pub partial: usize,
    pub full: usize,
}

impl CoverageCounts {
    fn add(&mut self, c: Coverage) {
        match c {
            Coverage::None => self.none += 1,
            Coverage::Partial => self.partial += 1,
            Coverage::Full => self.full += 1,
        }
    }

    pub fn total(&self) -> usize {
        self.none + self.partial + self.full
    }

    fn frac(&self, n: usize) -> f64 {
        if self.total() == 0 {
            0.0
        } else {
            n as f64 / self.total() as f64
        }
    }
}

/// One point of the quality-per-token curve.
#[derive(Debug, Clone, Serialize)]
pub struct BudgetPoint {
    pub budget: usize,
    /// Mean fraction of the relevant evidence cited by the pack.
    pub evidence_recall: f64,
    /// Fraction of queries whose pack cites at least one relevant item.
    pub any_evidence: f64,
    pub mean_tokens: f64,
    pub mean_citations: f64,
    /// Evidence recall per 1,000 tokens used.
    pub evidence_per_1k_tokens: f64,
    pub coverage: CoverageCounts,
}

/// A set of queries run through recall for calibration.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeSet {
    pub name: String,
    pub answerable: bool,
    pub description: String,
    pub coverage: CoverageCounts,
    /// Queries where at least one candidate had an identifier hit (bypasses the gate).
    pub identifier_hits: usize,
    /// Top dense cosine per query (kept for the threshold table).
    #[serde(skip)]
    pub top_cosine: Vec<f64>,
    pub top_cosine_distribution: Distribution,
}

/// One row of the threshold table.
#[derive(Debug, Clone, Serialize)]
pub struct ThresholdRow {
    pub min_relevance: f64,
    /// Fraction of answerable queries whose top cosine reaches the threshold.
    pub answerable_kept: f64,
    /// Per unanswerable set, the fraction whose top cosine stays below it.
    pub unanswerable_rejected: Vec<(String, f64)>,
    /// Balanced accuracy against all unanswerable probes pooled.
    pub balanced_accuracy: f64,
}

/// Coverage calibration of one run.
#[derive(Debug, Clone, Serialize)]
pub struct Calibration {
    pub budget: usize,
    pub current_min_relevance: f64,
    pub sets: Vec<ProbeSet>,
    pub thresholds: Vec<ThresholdRow>,
    /// The threshold with the best balanced accuracy (answerable kept vs pooled
    /// unanswerable rejected; ties go to the lower threshold).
    pub recommended_min_relevance: f64,
    pub rule: String,
}

/// Pack quality and calibration of one run.
#[derive(Debug, Clone, Serialize)]
pub struct PackReport {
    pub queries: usize,
    pub curve: Vec<BudgetPoint>,
    pub calibration: Calibration,
}

/// Scores one query's pack.
struct PackScore {
    evidence_recall: f64,
    tokens: usize,
    citations: usize,
    coverage: Coverage,
}

fn request(scope: &Scope, q: &PackQuery, budget: usize) -> RecallRequest {
    RecallRequest {
        scope: scope.clone(),
        query: q.text.clone(),
        budget: Some(budget),
        filters: RecallFilters {
            conversation_id: q.conversation.clone(),
            ..RecallFilters::default()
        },
    }
}

/// Top dense cosine of the query's candidates, and whether any had an identifier hit.
async fn top_cosine(recaller: &Recaller, scope: &Scope, q: &PackQuery) -> Result<(f64, bool)> {
    let ranked = recaller
        .retrieve(&request(scope, q, CALIBRATION_BUDGET))
        .await?;
    let top = ranked
        .iter()
        .filter_map(|r| r.reason.dense_score)
        .fold(f32::MIN, f32::max);
    let ident = ranked.iter().any(|r| !r.reason.identifier_hits.is_empty());
    Ok((
        if ranked.is_empty() {
            0.0
        } else {
            f64::from(top)
        },
        ident,
    ))
}

/// Runs the pack evaluation: the curve over `budgets` for `answerable`, then calibration
/// with the `unanswerable` probe sets (name, description, queries).
#[allow(clippy::too_many_arguments)]
pub async fn evaluate(
    ws: &Workspace,
    scope: &Scope,
    answerable: &[PackQuery],
    unanswerable: &[(String, String, Vec<PackQuery>)],
    budgets: &[usize],
    cited_id: &(dyn Fn(&Citation) -> Option<String> + Sync),
    answerable_name: &str,
    observer: &Observer,
) -> Result<PackReport> {
    let recaller = ws.recaller(RecallConfig::default());
    let current = f64::from(recaller.config().min_relevance);
    observer(Event::Phase(format!(
        "packs: {} queries × {} budgets",
        answerable.len(),
        budgets.len()
    )));
    let mut per_budget: Vec<Vec<PackScore>> = budgets.iter().map(|_| Vec::new()).collect();
    let mut ans = ProbeSet {
        name: answerable_name.to_string(),
        answerable: true,
        description: "benchmark queries with relevant evidence in the scope".into(),
        coverage: CoverageCounts::default(),
        identifier_hits: 0,
        top_cosine: Vec::new(),
        top_cosine_distribution: Distribution::of(&[]),
    };
    for q in answerable {
        for (i, budget) in budgets.iter().enumerate() {
            let pack = recaller.recall(&request(scope, q, *budget)).await?;
            let cited: HashSet<String> = pack.citations.iter().filter_map(cited_id).collect();
            let found = q.evidence.iter().filter(|e| cited.contains(*e)).count();
            per_budget[i].push(PackScore {
                evidence_recall: if q.evidence.is_empty() {
                    0.0
                } else {
                    found as f64 / q.evidence.len() as f64
                },
                tokens: pack.token_count,
                citations: pack.citations.len(),
                coverage: pack.coverage,
            });
            if *budget == CALIBRATION_BUDGET {
                ans.coverage.add(pack.coverage);
            }
        }
        if !budgets.contains(&CALIBRATION_BUDGET) {
            let pack = recaller
                .recall(&request(scope, q, CALIBRATION_BUDGET))
                .await?;
            ans.coverage.add(pack.coverage);
        }
        let (top, ident) = top_cosine(&recaller, scope, q).await?;
        ans.top_cosine.push(top);
        ans.identifier_hits += usize::from(ident);
    }
    ans.top_cosine_distribution = Distribution::of(&ans.top_cosine);

    let curve = budgets
        .iter()
        .zip(&per_budget)
        .map(|(budget, scores)| {
            let recall: Vec<f64> = scores.iter().map(|s| s.evidence_recall).collect();
            let tokens: Vec<f64> = scores.iter().map(|s| s.tokens as f64).collect();
            let cites: Vec<f64> = scores.iter().map(|s| s.citations as f64).collect();
            let mut coverage = CoverageCounts::default();
            for s in scores {
                coverage.add(s.coverage);
            }
            let mean_tokens = mean(&tokens);
            BudgetPoint {
                budget: *budget,
                evidence_recall: mean(&recall),
                any_evidence: if scores.is_empty() {
                    0.0
                } else {
                    scores.iter().filter(|s| s.evidence_recall > 0.0).count() as f64
                        / scores.len() as f64
                },
                mean_tokens,
                mean_citations: mean(&cites),
                evidence_per_1k_tokens: if mean_tokens > 0.0 {
                    mean(&recall) / mean_tokens * 1000.0
                } else {
                    0.0
                },
                coverage,
            }
        })
        .collect();

    let mut sets = vec![ans];
    for (name, description, probes) in unanswerable {
        observer(Event::Phase(format!(
            "calibration: {} probes ({name})",
            probes.len()
        )));
        let mut set = ProbeSet {
            name: name.clone(),
            answerable: false,
            description: description.clone(),
            coverage: CoverageCounts::default(),
            identifier_hits: 0,
            top_cosine: Vec::new(),
            top_cosine_distribution: Distribution::of(&[]),
        };
        for q in probes {
            let pack = recaller
                .recall(&request(scope, q, CALIBRATION_BUDGET))
                .await?;
            set.coverage.add(pack.coverage);
            let (top, ident) = top_cosine(&recaller, scope, q).await?;
            set.top_cosine.push(top);
            set.identifier_hits += usize::from(ident);
        }
        set.top_cosine_distribution = Distribution::of(&set.top_cosine);
        sets.push(set);
    }
    let calibration = calibrate(sets, current);
    Ok(PackReport {
        queries: answerable.len(),
        curve,
        calibration,
    })
}

/// Builds the threshold table and the recommendation from scored probe sets.
pub fn calibrate(sets: Vec<ProbeSet>, current: f64) -> Calibration {
    let answerable: Vec<f64> = sets
        .iter()
        .filter(|s| s.answerable)
        .flat_map(|s| s.top_cosine.iter().copied())
        .collect();
    let pooled: Vec<f64> = sets
        .iter()
        .filter(|s| !s.answerable)
        .flat_map(|s| s.top_cosine.iter().copied())
        .collect();
    let frac = |xs: &[f64], pred: &dyn Fn(f64) -> bool| -> f64 {
        if xs.is_empty() {
            0.0
        } else {
            xs.iter().filter(|x| pred(**x)).count() as f64 / xs.len() as f64
        }
    };
    let mut thresholds = Vec::new();
    for step in 40..=95 {
        let t = f64::from(step) / 100.0;
        let kept = frac(&answerable, &|x| x >= t);
        let rejected_pooled = frac(&pooled, &|x| x < t);
        thresholds.push(ThresholdRow {
            min_relevance: t,
            answerable_kept: kept,
            unanswerable_rejected: sets
                .iter()
                .filter(|s| !s.answerable)
                .map(|s| (s.name.clone(), frac(&s.top_cosine, &|x| x < t)))
                .collect(),
            balanced_accuracy: (kept + rejected_pooled) / 2.0,
        });
    }
    let recommended = thresholds
        .iter()
        .fold(None::<&ThresholdRow>, |best, r| match best {
            Some(b) if b.balanced_accuracy >= r.balanced_accuracy - 1e-12 => Some(b),
            _ => Some(r),
        })
        .map_or(current, |r| r.min_relevance);
    Calibration {
        budget: CALIBRATION_BUDGET,
        current_min_relevance: current,
        sets,
        thresholds,
        recommended_min_relevance: recommended,
        rule: "maximize balanced accuracy = (answerable queries whose top cosine ≥ t + pooled unanswerable probes whose top cosine < t) / 2, t in 0.40..0.95 step 0.01, ties to the lower t".into(),
    }
}

impl PackReport {
    /// Markdown sections: the curve, coverage per set, cosine distributions, thresholds.
    pub fn markdown(&self) -> String {
        let mut md = String::new();
        md.push_str(&format!(
            "### Pack quality per token budget ({} answerable queries, production recall configuration)\n\n",
            self.queries
        ));
        md.push_str("| budget | evidence recall | ≥1 evidence cited | mean tokens used | mean citations | evidence recall / 1k tokens | coverage none / partial / full |\n|---:|---:|---:|---:|---:|---:|---|\n");
        for p in &self.curve {
            md.push_str(&format!(
                "| {} | {:.3} | {:.3} | {:.0} | {:.1} | {:.3} | {} / {} / {} |\n",
                p.budget,
                p.evidence_recall,
                p.any_evidence,
                p.mean_tokens,
                p.mean_citations,
                p.evidence_per_1k_tokens,
                p.coverage.none,
                p.coverage.partial,
                p.coverage.full
            ));
        }
        let c = &self.calibration;
        md.push_str(&format!(
            "\n### Coverage calibration (budget {})\n\n| set | answerable | n | coverage none | partial | full | identifier hit | top cosine p5 / p25 / p50 / p75 / p95 |\n|---|---|---:|---:|---:|---:|---:|---|\n",
            c.budget
        ));
        for s in &c.sets {
            let d = &s.top_cosine_distribution;
            md.push_str(&format!(
                "| {} | {} | {} | {:.3} | {:.3} | {:.3} | {} | {:.3} / {:.3} / {:.3} / {:.3} / {:.3} |\n",
                s.name,
                if s.answerable { "yes" } else { "no" },
                s.coverage.total(),
                s.coverage.frac(s.coverage.none),
                s.coverage.frac(s.coverage.partial),
                s.coverage.frac(s.coverage.full),
                s.identifier_hits,
                d.p5,
                d.p25,
                d.p50,
                d.p75,
                d.p95
            ));
        }
        md.push('\n');
        for s in &c.sets {
            md.push_str(&format!("- `{}`: {}\n", s.name, s.description));
        }
        let names: Vec<String> = c
            .thresholds
            .first()
            .map(|r| {
                r.unanswerable_rejected
                    .iter()
                    .map(|(n, _)| format!("{n} rejected"))
                    .collect()
            })
            .unwrap_or_default();
        md.push_str(&format!(
            "\n#### Top-cosine threshold (`min_relevance`)\n\n| min_relevance | answerable kept | {} | balanced accuracy |\n|---:|---:|{}---:|\n",
            names.join(" | "),
            "---:|".repeat(names.len())
        ));
        for r in &c.thresholds {
            let step = (r.min_relevance * 100.0).round() as i64;
            let is_marked = (r.min_relevance - c.recommended_min_relevance).abs() < 1e-9
                || (r.min_relevance - c.current_min_relevance).abs() < 1e-6;
            if step % 5 != 0 && !is_marked {
                continue;
            }
            let mut label = format!("{:.2}", r.min_relevance);
            if (r.min_relevance - c.current_min_relevance).abs() < 1e-6 {
                label.push_str(" (current)");
            }
            if (r.min_relevance - c.recommended_min_relevance).abs() < 1e-9 {
                label.push_str(" (best)");
            }
            let rej: Vec<String> = r
                .unanswerable_rejected
                .iter()
                .map(|(_, v)| f3(Some(*v)))
                .collect();
            md.push_str(&format!(
                "| {} | {:.3} | {} | {:.3} |\n",
                label,
                r.answerable_kept,
                rej.join(" | "),
                r.balanced_accuracy
            ));
        }
        md.push_str(&format!(
            "\nRecommended `min_relevance` for this run: **{:.2}** (current {:.2}); rule: {}.\n",
            c.recommended_min_relevance, c.current_min_relevance, c.rule
        ));
        md
    }
}

/// The evidence-recall-per-token curve of a pack report, for a chart: one point per budget,
/// named after the dataset and its budgets.
pub fn pack_curve(name: &str, p: &PackReport) -> Curve {
    let budgets = p
        .curve
        .iter()
        .map(|b| b.budget.to_string())
        .collect::<Vec<_>>()
        .join("/");
    Curve {
        name: format!("{name} (budgets {budgets})"),
        points: p
            .curve
            .iter()
            .map(|b| (b.mean_tokens, b.evidence_recall))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(name: &str, answerable: bool, xs: &[f64]) -> ProbeSet {
        ProbeSet {
            name: name.into(),
            answerable,
            description: String::new(),
            coverage: CoverageCounts::default(),
            identifier_hits: 0,
            top_cosine: xs.to_vec(),
            top_cosine_distribution: Distribution::of(xs),
        }
    }

    #[test]
    fn recommends_the_separating_threshold() {
        let c = calibrate(
            vec![
                set("a", true, &[0.80, 0.85, 0.90]),
                set("u", false, &[0.60, 0.65, 0.70]),
            ],
            0.55,
        );
        // Everything in (0.70, 0.80] separates perfectly; the lowest such step is 0.71.
        assert!(
            (c.recommended_min_relevance - 0.71).abs() < 1e-9,
            "{}",
            c.recommended_min_relevance
        );
        let row = c
            .thresholds
            .iter()
            .find(|r| (r.min_relevance - 0.55).abs() < 1e-9)
            .unwrap();
        assert!((row.answerable_kept - 1.0).abs() < 1e-9);
        assert!((row.unanswerable_rejected[0].1 - 0.0).abs() < 1e-9);
        assert!(c.markdown_ok());
    }

    impl Calibration {
        fn markdown_ok(&self) -> bool {
            let r = PackReport {
                queries: 0,
                curve: vec![],
                calibration: self.clone(),
            };
            let md = r.markdown();
            md.contains("(best)") && md.contains("(current)")
        }
    }
}
