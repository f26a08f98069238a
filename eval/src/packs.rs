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
//! - Answerability: from every pack at the calibration budget, the AUROC of
//!   `answerability.score` (answerable vs each unanswerable set and all pooled), its
//!   reliability over 10 score bins against "answerable with judged evidence cited", and the
//!   coverage targets (`full` / `none` shares per set) marked met or not.

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
    /// Queries whose pack cites at least one item (relevant or not).
    pub packs_citing: usize,
    /// Mean of tokens used / budget over the packs that cite at least one item (`None` when
    /// none does).
    pub budget_share_citing: Option<f64>,
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
    /// Every pack at the calibration budget (for the answerability figures and
    /// `--dump-legs`).
    #[serde(skip)]
    pub packs: Vec<PackRecord>,
    pub top_cosine_distribution: Distribution,
}

/// One pack at the calibration budget.
#[derive(Debug, Clone, Serialize)]
pub struct PackRecord {
    pub query: String,
    /// Whether any of the query's judged evidence is cited (always false for probes).
    pub evidence_cited: bool,
    pub coverage: Coverage,
    pub answerability: cairn_models::Answerability,
    pub unknowns: Vec<String>,
    /// The texts of the first cited items (at most [`DUMPED_PASSAGES`]), as packed: for
    /// studying signals that read the passages (`eval/scripts/reading_probe.py`).
    pub passages: Vec<String>,
}

/// Cited passages kept per dumped pack.
const DUMPED_PASSAGES: usize = 3;

impl PackRecord {
    fn of(q: &PackQuery, pack: &cairn_models::MemoryPack, cited: &HashSet<String>) -> Self {
        PackRecord {
            query: q.text.clone(),
            evidence_cited: q.evidence.iter().any(|e| cited.contains(e)),
            coverage: pack.coverage,
            answerability: pack.answerability,
            unknowns: pack.unknowns.clone(),
            passages: pack
                .selected_nodes
                .iter()
                .take(DUMPED_PASSAGES)
                .map(|n| n.text.clone())
                .collect(),
        }
    }
}

/// Writes every pack record of `sets` as JSON lines (set, answerable, record).
pub fn dump_packs(sets: &[ProbeSet], path: &std::path::Path) -> Result<()> {
    use std::io::Write;
    let io = |e| crate::EvalError::io(path, e);
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    for set in sets {
        for r in &set.packs {
            let line =
                serde_json::json!({"set": set.name, "answerable": set.answerable, "pack": r});
            writeln!(out, "{line}").map_err(io)?;
        }
    }
    out.flush().map_err(io)
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

/// AUROC of the answerability score: the answerable packs against one set of unanswerable
/// probes (or all of them pooled).
#[derive(Debug, Clone, Serialize)]
pub struct AurocRow {
    /// The unanswerable set, or `all unanswerable (pooled)`.
    pub unanswerable: String,
    pub answerable_packs: usize,
    pub unanswerable_packs: usize,
    /// `None` when either side has no pack.
    pub auroc: Option<f64>,
}

/// One equal-width bin of the reliability table.
#[derive(Debug, Clone, Serialize)]
pub struct ReliabilityBin {
    pub lower: f64,
    pub upper: f64,
    pub packs: usize,
    /// Mean answerability score of the bin's packs (`None` for an empty bin).
    pub mean_score: Option<f64>,
    /// Fraction of the bin's packs that are answerable *and* cite judged evidence: the event
    /// the score estimates.
    pub observed: Option<f64>,
}

/// One row of the coverage targets table.
#[derive(Debug, Clone, Serialize)]
pub struct CoverageTarget {
    /// The packs counted, in words.
    pub packs: String,
    /// The coverage value counted.
    pub coverage: Coverage,
    /// `true`: the share must be at least `threshold`; `false`: at most.
    pub at_least: bool,
    pub threshold: f64,
    /// Packs counted.
    pub n: usize,
    /// Share of those packs with `coverage` (`None` when `n` is 0).
    pub measured: Option<f64>,
    /// `None` when nothing was measured.
    pub met: Option<bool>,
}

impl CoverageTarget {
    fn new(packs: String, coverage: Coverage, at_least: bool, threshold: f64) -> Self {
        CoverageTarget {
            packs,
            coverage,
            at_least,
            threshold,
            n: 0,
            measured: None,
            met: None,
        }
    }

    fn measure<'a>(mut self, records: impl IntoIterator<Item = &'a PackRecord>) -> Self {
        let (mut n, mut hit) = (0usize, 0usize);
        for r in records {
            n += 1;
            hit += usize::from(r.coverage == self.coverage);
        }
        self.n = n;
        if n > 0 {
            let share = hit as f64 / n as f64;
            self.measured = Some(share);
            self.met = Some(if self.at_least {
                share >= self.threshold - 1e-12
            } else {
                share <= self.threshold + 1e-12
            });
        }
        self
    }

    /// "≥ 70 %" / "≤ 3 %".
    pub fn target_label(&self) -> String {
        format!(
            "`{}` {} {} %",
            self.coverage.as_str(),
            if self.at_least { "≥" } else { "≤" },
            pct(self.threshold)
        )
    }
}

fn pct(x: f64) -> String {
    let p = x * 100.0;
    if (p - p.round()).abs() < 1e-9 {
        format!("{p:.0}")
    } else {
        format!("{p:.1}")
    }
}

/// Shares of `full` on answerable packs whose evidence is cited (at least).
pub const TARGET_FULL_CITED: f64 = 0.70;
/// Shares of `full` on each unanswerable set (at most).
pub const TARGET_FULL_UNANSWERABLE: f64 = 0.03;
/// Share of `none` on foreign probes (at least).
pub const TARGET_NONE_FOREIGN: f64 = 0.95;
/// Share of `none` on in-domain probes whose evidence is absent (at least).
pub const TARGET_NONE_IN_DOMAIN: f64 = 0.60;
/// Pack evidence recall at the calibration budget over the retrieval Recall@10 (at least).
pub const TARGET_RECALL_RATIO: f64 = 0.9;
/// Mean share of the budget used at 2,000 tokens by packs that cite anything (at least).
pub const TARGET_BUDGET_SHARE: f64 = 0.9;
/// Budget at which the budget share is checked.
pub const BUDGET_SHARE_AT: usize = 2000;
/// Bins of the reliability table.
pub const RELIABILITY_BINS: usize = 10;

/// Quality of the answerability score (and of the coverage it yields) at the calibration
/// budget. Sets whose name starts with `adversarial` are left out throughout.
#[derive(Debug, Clone, Serialize)]
pub struct AnswerabilityQuality {
    pub answerable_packs: usize,
    /// Answerable packs that cite at least one judged evidence item.
    pub answerable_cited: usize,
    pub unanswerable_packs: usize,
    /// Answerable vs each unanswerable set, then vs all of them pooled.
    pub auroc: Vec<AurocRow>,
    /// 10 equal-width score bins over 0..1, answerable and unanswerable packs together.
    pub reliability: Vec<ReliabilityBin>,
    /// Σ bin share × |observed − mean score| (`None` without packs).
    pub expected_calibration_error: Option<f64>,
    pub targets: Vec<CoverageTarget>,
    /// For information: the coverage of every answerable pack...
    pub answerable_coverage: CoverageCounts,
    /// ...and of the answerable packs whose evidence is cited.
    pub answerable_cited_coverage: CoverageCounts,
}

/// Whether a set takes part in the pooled figures (the adversarial set is shown apart).
fn pooled(s: &ProbeSet) -> bool {
    !s.name.starts_with("adversarial")
}

/// Exact AUROC of `positives` against `negatives`: the Mann–Whitney U statistic over
/// P·N, ties counted half. `None` when either side is empty.
pub fn auroc(positives: &[f64], negatives: &[f64]) -> Option<f64> {
    if positives.is_empty() || negatives.is_empty() {
        return None;
    }
    let mut all: Vec<(f64, bool)> = positives
        .iter()
        .map(|x| (*x, true))
        .chain(negatives.iter().map(|x| (*x, false)))
        .collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    // Sum of the positives' 1-based ranks, tied values sharing their average rank.
    let mut rank_sum = 0.0;
    let mut i = 0;
    while i < all.len() {
        let mut j = i;
        while j + 1 < all.len() && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        let average_rank = (i + j + 2) as f64 / 2.0;
        let tied_positives = all[i..=j].iter().filter(|x| x.1).count();
        rank_sum += average_rank * tied_positives as f64;
        i = j + 1;
    }
    let (p, n) = (positives.len() as f64, negatives.len() as f64);
    Some((rank_sum - p * (p + 1.0) / 2.0) / (p * n))
}

/// The reliability table: `RELIABILITY_BINS` equal-width bins over 0..1 of (score, event)
/// pairs. A score of 1 falls in the last bin; scores outside 0..1 are clamped. Edges are
/// matched within 1e-6, so an `f32` score of 0.9 (0.8999999762 as `f64`) opens the 0.9–1.0
/// bin, as its printed value says.
pub fn reliability(points: &[(f64, bool)]) -> Vec<ReliabilityBin> {
    let k = RELIABILITY_BINS;
    let mut sums = vec![(0usize, 0.0f64, 0usize); k];
    for (score, event) in points {
        let s = if score.is_nan() {
            0.0
        } else {
            score.clamp(0.0, 1.0)
        };
        let b = ((s * k as f64 + 1e-6).floor() as usize).min(k - 1);
        sums[b].0 += 1;
        sums[b].1 += s;
        sums[b].2 += usize::from(*event);
    }
    sums.iter()
        .enumerate()
        .map(|(b, (n, total, events))| ReliabilityBin {
            lower: b as f64 / k as f64,
            upper: (b + 1) as f64 / k as f64,
            packs: *n,
            mean_score: (*n > 0).then(|| total / *n as f64),
            observed: (*n > 0).then(|| *events as f64 / *n as f64),
        })
        .collect()
}

/// Σ (bin packs / all packs) × |observed − mean score|.
pub fn expected_calibration_error(bins: &[ReliabilityBin]) -> Option<f64> {
    let total: usize = bins.iter().map(|b| b.packs).sum();
    if total == 0 {
        return None;
    }
    Some(
        bins.iter()
            .filter_map(|b| {
                Some(b.packs as f64 / total as f64 * (b.observed? - b.mean_score?).abs())
            })
            .sum(),
    )
}

/// The coverage targets: `full` on ≥ 70 % of the answerable packs whose evidence is cited,
/// `full` on ≤ 3 % of each unanswerable set, `none` on ≥ 95 % of the foreign probes and on
/// ≥ 60 % of the in-domain probes (`held-out`, else `cross-conversation`).
pub fn coverage_targets(sets: &[ProbeSet]) -> Vec<CoverageTarget> {
    let sets: Vec<&ProbeSet> = sets.iter().filter(|s| pooled(s)).collect();
    let answerable: Vec<&ProbeSet> = sets.iter().copied().filter(|s| s.answerable).collect();
    let names = |v: &[&ProbeSet]| {
        v.iter()
            .map(|s| format!("`{}`", s.name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut targets = vec![CoverageTarget::new(
        format!(
            "answerable packs whose judged evidence is cited ({})",
            names(&answerable)
        ),
        Coverage::Full,
        true,
        TARGET_FULL_CITED,
    )
    .measure(
        answerable
            .iter()
            .flat_map(|s| &s.packs)
            .filter(|r| r.evidence_cited),
    )];
    let unanswerable: Vec<&ProbeSet> = sets.iter().copied().filter(|s| !s.answerable).collect();
    for s in &unanswerable {
        targets.push(
            CoverageTarget::new(
                format!("unanswerable `{}` probes", s.name),
                Coverage::Full,
                false,
                TARGET_FULL_UNANSWERABLE,
            )
            .measure(&s.packs),
        );
    }
    if let Some(s) = unanswerable.iter().find(|s| s.name == "foreign") {
        targets.push(
            CoverageTarget::new(
                "foreign probes (`foreign`)".into(),
                Coverage::None,
                true,
                TARGET_NONE_FOREIGN,
            )
            .measure(&s.packs),
        );
    }
    let in_domain = unanswerable
        .iter()
        .find(|s| s.name == "held-out")
        .or_else(|| unanswerable.iter().find(|s| s.name == "cross-conversation"));
    if let Some(s) = in_domain {
        targets.push(
            CoverageTarget::new(
                format!("in-domain probes, evidence absent (`{}`)", s.name),
                Coverage::None,
                true,
                TARGET_NONE_IN_DOMAIN,
            )
            .measure(&s.packs),
        );
    }
    targets
}

/// AUROC, reliability and coverage targets of the answerability score from the sets' packs.
pub fn answerability_quality(sets: &[ProbeSet]) -> AnswerabilityQuality {
    let score = |r: &PackRecord| f64::from(r.answerability.score);
    let answerable: Vec<&PackRecord> = sets
        .iter()
        .filter(|s| pooled(s) && s.answerable)
        .flat_map(|s| &s.packs)
        .collect();
    let positives: Vec<f64> = answerable.iter().map(|r| score(r)).collect();
    let unanswerable: Vec<&ProbeSet> = sets.iter().filter(|s| pooled(s) && !s.answerable).collect();
    let mut rows: Vec<AurocRow> = unanswerable
        .iter()
        .map(|s| {
            let negatives: Vec<f64> = s.packs.iter().map(score).collect();
            AurocRow {
                unanswerable: s.name.clone(),
                answerable_packs: positives.len(),
                unanswerable_packs: negatives.len(),
                auroc: auroc(&positives, &negatives),
            }
        })
        .collect();
    let pooled_negatives: Vec<f64> = unanswerable
        .iter()
        .flat_map(|s| s.packs.iter().map(score))
        .collect();
    if !unanswerable.is_empty() {
        rows.push(AurocRow {
            unanswerable: "all unanswerable (pooled)".into(),
            answerable_packs: positives.len(),
            unanswerable_packs: pooled_negatives.len(),
            auroc: auroc(&positives, &pooled_negatives),
        });
    }
    let points: Vec<(f64, bool)> = answerable
        .iter()
        .map(|r| (score(r), r.evidence_cited))
        .chain(
            unanswerable
                .iter()
                .flat_map(|s| s.packs.iter().map(|r| (score(r), false))),
        )
        .collect();
    let bins = reliability(&points);
    let mut answerable_coverage = CoverageCounts::default();
    let mut answerable_cited_coverage = CoverageCounts::default();
    for r in &answerable {
        answerable_coverage.add(r.coverage);
        if r.evidence_cited {
            answerable_cited_coverage.add(r.coverage);
        }
    }
    AnswerabilityQuality {
        answerable_packs: answerable.len(),
        answerable_cited: answerable_cited_coverage.total(),
        unanswerable_packs: pooled_negatives.len(),
        auroc: rows,
        expected_calibration_error: expected_calibration_error(&bins),
        reliability: bins,
        targets: coverage_targets(sets),
        answerable_coverage,
        answerable_cited_coverage,
    }
}

/// Recall@10 of a retrieval mode over the pack evaluation's queries, to compare the pack's
/// evidence recall with.
#[derive(Debug, Clone, Serialize)]
pub struct Recall10Reference {
    /// Where the figure comes from, in words.
    pub label: String,
    pub queries: usize,
    pub recall10: f64,
}

/// Pack evidence recall at the calibration budget over a Recall@10.
#[derive(Debug, Clone, Serialize)]
pub struct PackRecallRatio {
    pub budget: usize,
    pub pack_evidence_recall: f64,
    pub reference: Recall10Reference,
    /// `None` when the Recall@10 is 0.
    pub ratio: Option<f64>,
    pub target: f64,
    pub met: Option<bool>,
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
    /// Quality of the answerability score (JSON key `answerability`).
    pub answerability: AnswerabilityQuality,
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
        packs: Vec::new(),
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
                ans.packs.push(PackRecord::of(q, &pack, &cited));
            }
        }
        if !budgets.contains(&CALIBRATION_BUDGET) {
            let pack = recaller
                .recall(&request(scope, q, CALIBRATION_BUDGET))
                .await?;
            ans.coverage.add(pack.coverage);
            let cited: HashSet<String> = pack.citations.iter().filter_map(cited_id).collect();
            ans.packs.push(PackRecord::of(q, &pack, &cited));
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
            let shares: Vec<f64> = scores
                .iter()
                .filter(|s| s.citations > 0)
                .map(|s| s.tokens as f64 / (*budget).max(1) as f64)
                .collect();
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
                packs_citing: shares.len(),
                budget_share_citing: (!shares.is_empty()).then(|| mean(&shares)),
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
            packs: Vec::new(),
            top_cosine_distribution: Distribution::of(&[]),
        };
        for q in probes {
            let pack = recaller
                .recall(&request(scope, q, CALIBRATION_BUDGET))
                .await?;
            set.coverage.add(pack.coverage);
            set.packs.push(PackRecord::of(q, &pack, &HashSet::new()));
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
    let answerability = answerability_quality(&sets);
    Calibration {
        budget: CALIBRATION_BUDGET,
        current_min_relevance: current,
        answerability,
        sets,
        thresholds,
        recommended_min_relevance: recommended,
        rule: "maximize balanced accuracy = (answerable queries whose top cosine ≥ t + pooled unanswerable probes whose top cosine < t) / 2, t in 0.40..0.95 step 0.01, ties to the lower t".into(),
    }
}

fn met_label(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "**not met**",
        None => "n/a",
    }
}

fn counts_label(c: &CoverageCounts) -> String {
    format!(
        "{} / {} / {} ({:.1} % / {:.1} % / {:.1} %)",
        c.none,
        c.partial,
        c.full,
        c.frac(c.none) * 100.0,
        c.frac(c.partial) * 100.0,
        c.frac(c.full) * 100.0
    )
}

/// "0.550" or "0.500–0.600" over the packs' values of one threshold.
fn threshold_range(sets: &[ProbeSet], f: fn(&cairn_models::Answerability) -> f32) -> String {
    let xs: Vec<f32> = sets
        .iter()
        .flat_map(|s| s.packs.iter().map(|r| f(&r.answerability)))
        .collect();
    let lo = xs.iter().copied().fold(f32::INFINITY, f32::min);
    let hi = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if xs.is_empty() {
        "–".into()
    } else if (hi - lo).abs() < 1e-6 {
        format!("{lo:.3}")
    } else {
        format!("{lo:.3}–{hi:.3}")
    }
}

impl AnswerabilityQuality {
    /// The answerability section: AUROC, reliability table, coverage targets.
    pub fn markdown(&self, budget: usize, sets: &[ProbeSet]) -> String {
        let mut md = format!(
            "\n#### Answerability score (budget {budget})\n\n{} answerable packs ({} cite judged evidence) and {} unanswerable probes; sets named `adversarial…` are left out. `answerability.score` estimates the probability that the cited items answer the query; coverage is `full` at score ≥ `full_at` ({}) and `none` below `none_below` ({}).\n",
            self.answerable_packs,
            self.answerable_cited,
            self.unanswerable_packs,
            threshold_range(sets, |a| a.full_at),
            threshold_range(sets, |a| a.none_below),
        );
        if self.answerable_packs + self.unanswerable_packs == 0 {
            md.push_str("\nNo pack records in this run.\n");
            return md;
        }
        md.push_str("\n| answerable vs | answerable packs | unanswerable packs | AUROC |\n|---|---:|---:|---:|\n");
        for r in &self.auroc {
            md.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                r.unanswerable,
                r.answerable_packs,
                r.unanswerable_packs,
                f3(r.auroc)
            ));
        }
        md.push_str("\nAUROC: the probability that an answerable pack scores above an unanswerable probe (Mann–Whitney U / (P·N), ties counted half).\n");
        md.push_str("\nReliability: 10 equal-width score bins over all the packs above; *observed* is the fraction of the bin's packs that are answerable **and** cite judged evidence (the event the score estimates).\n\n| score bin | packs | mean score | observed | observed − mean |\n|---|---:|---:|---:|---:|\n");
        for b in &self.reliability {
            let gap = match (b.observed, b.mean_score) {
                (Some(o), Some(m)) => format!("{:+.3}", o - m),
                _ => "–".into(),
            };
            md.push_str(&format!(
                "| {:.1}–{:.1} | {} | {} | {} | {} |\n",
                b.lower,
                b.upper,
                b.packs,
                f3(b.mean_score),
                f3(b.observed),
                gap
            ));
        }
        md.push_str(&format!(
            "\nExpected calibration error (packs-weighted mean |observed − mean score|): {}.\n",
            f3(self.expected_calibration_error)
        ));
        md.push_str("\n#### Coverage targets\n\n| packs | target | n | measured | met |\n|---|---|---:|---:|---|\n");
        for t in &self.targets {
            md.push_str(&format!(
                "| {} | {} | {} | {} | {} |\n",
                t.packs,
                t.target_label(),
                t.n,
                t.measured
                    .map_or("–".to_string(), |m| format!("{:.1} %", m * 100.0)),
                met_label(t.met)
            ));
        }
        md.push_str(&format!(
            "\nFor information, answerable coverage none / partial / full: all {} packs {}; the {} whose judged evidence is cited {}.\n",
            self.answerable_coverage.total(),
            counts_label(&self.answerable_coverage),
            self.answerable_cited_coverage.total(),
            counts_label(&self.answerable_cited_coverage)
        ));
        md
    }
}

impl PackReport {
    /// Pack evidence recall at the calibration budget over `reference`'s Recall@10; `None`
    /// when the curve has no point at the calibration budget.
    pub fn recall_ratio(&self, reference: Recall10Reference) -> Option<PackRecallRatio> {
        let p = self.curve.iter().find(|b| b.budget == CALIBRATION_BUDGET)?;
        let ratio = (reference.recall10 > 0.0).then(|| p.evidence_recall / reference.recall10);
        Some(PackRecallRatio {
            budget: CALIBRATION_BUDGET,
            pack_evidence_recall: p.evidence_recall,
            reference,
            ratio,
            target: TARGET_RECALL_RATIO,
            met: ratio.map(|r| r >= TARGET_RECALL_RATIO - 1e-12),
        })
    }

    /// Markdown sections: the curve (with the pack recall over `ratio`'s Recall@10, when
    /// given, and the budget share used), coverage per set, cosine distributions,
    /// thresholds, and the answerability score's quality.
    pub fn markdown(&self, ratio: Option<&PackRecallRatio>) -> String {
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
        md.push('\n');
        match (
            ratio,
            self.curve.iter().any(|b| b.budget == CALIBRATION_BUDGET),
        ) {
            (Some(r), _) => md.push_str(&format!(
                "- Pack evidence recall @{} / Recall@10 (target ≥ {}): {:.3} / {:.3} = **{}** — {}. Recall@10: {} ({} queries; the pack curve has {}).\n",
                r.budget,
                r.target,
                r.pack_evidence_recall,
                r.reference.recall10,
                f3(r.ratio),
                met_label(r.met),
                r.reference.label,
                r.reference.queries,
                self.queries
            )),
            (None, false) => md.push_str(&format!(
                "- Pack evidence recall @{CALIBRATION_BUDGET} / Recall@10 (target ≥ {TARGET_RECALL_RATIO}): not measured (no {CALIBRATION_BUDGET}-token budget in this run).\n"
            )),
            (None, true) => md.push_str(&format!(
                "- Pack evidence recall @{CALIBRATION_BUDGET} / Recall@10 (target ≥ {TARGET_RECALL_RATIO}): no Recall@10 reference.\n"
            )),
        }
        match self.curve.iter().find(|b| b.budget == BUDGET_SHARE_AT) {
            Some(b) => md.push_str(&format!(
                "- Mean share of the {}-token budget used by packs that cite anything (target ≥ {} %): {} ({} of {} packs cite) — {}.\n",
                b.budget,
                pct(TARGET_BUDGET_SHARE),
                b.budget_share_citing
                    .map_or("–".to_string(), |s| format!("**{:.1} %**", s * 100.0)),
                b.packs_citing,
                self.queries,
                met_label(
                    b.budget_share_citing
                        .map(|s| s >= TARGET_BUDGET_SHARE - 1e-12)
                ),
            )),
            None => md.push_str(&format!(
                "- Mean share of the {BUDGET_SHARE_AT}-token budget used by packs that cite anything (target ≥ {} %): not measured (no {BUDGET_SHARE_AT}-token budget in this run).\n",
                pct(TARGET_BUDGET_SHARE)
            )),
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
        md.push_str(&c.answerability.markdown(c.budget, &c.sets));
        md
    }
}

/// The reliability diagram's curves: observed fraction vs mean score per non-empty bin, and
/// the diagonal (perfect calibration) for reference.
pub fn reliability_curves(c: &Calibration) -> Vec<Curve> {
    vec![
        Curve {
            name: "observed: answerable with evidence cited (per score bin)".into(),
            points: c
                .answerability
                .reliability
                .iter()
                .filter_map(|b| Some((b.mean_score?, b.observed?)))
                .collect(),
        },
        Curve {
            name: "perfect calibration".into(),
            points: vec![(0.0, 0.0), (1.0, 1.0)],
        },
    ]
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
            packs: Vec::new(),
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

    fn rec(score: f32, coverage: Coverage, evidence_cited: bool) -> PackRecord {
        PackRecord {
            query: String::new(),
            evidence_cited,
            coverage,
            answerability: cairn_models::Answerability {
                score,
                full_at: 0.7,
                none_below: 0.3,
                ..Default::default()
            },
            unknowns: Vec::new(),
            passages: Vec::new(),
        }
    }

    fn with_packs(mut s: ProbeSet, packs: Vec<PackRecord>) -> ProbeSet {
        s.packs = packs;
        s
    }

    /// Pairwise definition of the AUROC, for comparison.
    fn auroc_pairwise(p: &[f64], n: &[f64]) -> f64 {
        let mut wins = 0.0;
        for a in p {
            for b in n {
                wins += if a > b {
                    1.0
                } else if a == b {
                    0.5
                } else {
                    0.0
                };
            }
        }
        wins / (p.len() * n.len()) as f64
    }

    #[test]
    fn auroc_counts_ties_half() {
        // Hand count: 0.9 beats all 3; 0.8 beats 0.5 and 0.3, ties 0.8 (2.5); each 0.5 ties
        // 0.5 and beats 0.3 (1.5 each): 8.5 of 12 pairs.
        let p = [0.9, 0.8, 0.5, 0.5];
        let n = [0.5, 0.3, 0.8];
        let a = auroc(&p, &n).unwrap();
        assert!((a - 8.5 / 12.0).abs() < 1e-12, "{a}");
        assert_eq!(auroc(&[0.9, 0.8], &[0.1, 0.2]), Some(1.0));
        assert_eq!(auroc(&[0.1], &[0.2, 0.3]), Some(0.0));
        assert_eq!(auroc(&[0.4, 0.4], &[0.4]), Some(0.5));
        assert_eq!(auroc(&[], &[0.4]), None);
        assert_eq!(auroc(&[0.4], &[]), None);
        // Against the pairwise definition on coarse values (many ties).
        let p: Vec<f64> = (0..37).map(|i| f64::from((i * 7) % 11) / 10.0).collect();
        let n: Vec<f64> = (0..23).map(|i| f64::from((i * 5) % 9) / 10.0).collect();
        let a = auroc(&p, &n).unwrap();
        assert!((a - auroc_pairwise(&p, &n)).abs() < 1e-12, "{a}");
    }

    #[test]
    fn reliability_bins_are_equal_width() {
        let bins = reliability(&[
            (0.0, false),
            (0.05, true),
            (0.1, false),
            (0.15, true),
            (0.95, true),
            (1.0, true),
            (1.2, false),
            (-0.5, false),
        ]);
        assert_eq!(bins.len(), 10);
        assert!((bins[3].lower - 0.3).abs() < 1e-12 && (bins[3].upper - 0.4).abs() < 1e-12);
        // 0.0, 0.05 and the clamped -0.5 in the first bin; 0.1 and 0.15 in the second.
        assert_eq!(bins[0].packs, 3);
        assert!((bins[0].mean_score.unwrap() - 0.05 / 3.0).abs() < 1e-12);
        assert!((bins[0].observed.unwrap() - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(bins[1].packs, 2);
        assert!((bins[1].observed.unwrap() - 0.5).abs() < 1e-12);
        // 0.95, 1.0 and the clamped 1.2 in the last bin.
        assert_eq!(bins[9].packs, 3);
        assert!((bins[9].mean_score.unwrap() - 2.95 / 3.0).abs() < 1e-12);
        assert!((bins[9].observed.unwrap() - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(bins[5].packs, 0);
        assert_eq!(bins[5].mean_score, None);
        assert_eq!(bins.iter().map(|b| b.packs).sum::<usize>(), 8);
        // ECE: (3/8)|1/3 − 0.05/3| + (2/8)|0.5 − 0.125| + (3/8)|2/3 − 2.95/3|.
        let ece = expected_calibration_error(&bins).unwrap();
        let want = 3.0 / 8.0 * (1.0 / 3.0 - 0.05 / 3.0)
            + 2.0 / 8.0 * (0.5 - 0.125)
            + 3.0 / 8.0 * (2.95 / 3.0 - 2.0 / 3.0);
        assert!((ece - want).abs() < 1e-12, "{ece} vs {want}");
        assert_eq!(expected_calibration_error(&reliability(&[])), None);
        // f32 scores on an edge open the bin above it.
        let edges = reliability(&[(f64::from(0.9f32), true), (f64::from(0.3f32), true)]);
        assert_eq!((edges[9].packs, edges[3].packs), (1, 1));
    }

    fn synthetic_sets() -> Vec<ProbeSet> {
        use Coverage::{Full, None as Empty, Partial};
        vec![
            with_packs(
                set("answerable", true, &[]),
                vec![
                    rec(0.95, Full, true),
                    rec(0.8, Full, true),
                    rec(0.75, Full, true),
                    rec(0.5, Partial, true),
                    rec(0.85, Full, false),
                    rec(0.2, Empty, false),
                ],
            ),
            with_packs(
                set("foreign", false, &[]),
                vec![
                    rec(0.1, Empty, false),
                    rec(0.05, Empty, false),
                    rec(0.2, Empty, false),
                    rec(0.4, Partial, false),
                ],
            ),
            with_packs(
                set("held-out", false, &[]),
                vec![
                    rec(0.8, Full, false),
                    rec(0.2, Empty, false),
                    rec(0.25, Empty, false),
                ],
            ),
            // Shown apart, never pooled: would spoil every figure if it were.
            with_packs(
                set("adversarial (category 5, not pooled)", false, &[]),
                vec![rec(0.99, Full, true); 5],
            ),
        ]
    }

    #[test]
    fn coverage_targets_are_marked_honestly() {
        let t = coverage_targets(&synthetic_sets());
        let find = |needle: &str, c: Coverage| {
            t.iter()
                .find(|r| r.packs.contains(needle) && r.coverage == c)
                .unwrap_or_else(|| panic!("{needle}: {t:?}"))
        };
        assert_eq!(t.len(), 5, "{t:?}");
        // 3 of the 4 cited answerable packs are full: 75 % ≥ 70 %.
        let a = find("answerable packs", Coverage::Full);
        assert_eq!(a.n, 4);
        assert!((a.measured.unwrap() - 0.75).abs() < 1e-12);
        assert_eq!(a.met, Some(true));
        // No foreign probe is full; 3 of 4 are none: 75 % < 95 %.
        assert_eq!(find("`foreign` probes", Coverage::Full).met, Some(true));
        let f = find("foreign probes", Coverage::None);
        assert!((f.measured.unwrap() - 0.75).abs() < 1e-12);
        assert_eq!(f.met, Some(false));
        // 1 of 3 held-out probes is full (33 % > 3 %); 2 of 3 none (67 % ≥ 60 %).
        assert_eq!(find("`held-out` probes", Coverage::Full).met, Some(false));
        let h = find("in-domain", Coverage::None);
        assert!(h.packs.contains("held-out"));
        assert_eq!(h.met, Some(true));
        assert!(t.iter().all(|r| !r.packs.contains("adversarial")));

        // LoCoMo: cross-conversation stands in for held-out; no foreign set, no foreign row.
        let mut sets = synthetic_sets();
        sets.retain(|s| s.name != "foreign");
        sets[1].name = "cross-conversation".into();
        let t = coverage_targets(&sets);
        assert_eq!(t.len(), 3, "{t:?}");
        assert!(t.iter().any(|r| r
            .packs
            .contains("in-domain probes, evidence absent (`cross-conversation`)")));
        assert!(!t.iter().any(|r| r.packs.contains("foreign")));

        // Nothing measured: n/a, never "met".
        let t = coverage_targets(&[set("answerable", true, &[])]);
        assert_eq!(t.len(), 1);
        assert_eq!((t[0].n, t[0].measured, t[0].met), (0, None, None));
    }

    #[test]
    fn answerability_quality_pools_all_but_adversarial() {
        let q = answerability_quality(&synthetic_sets());
        assert_eq!(
            (q.answerable_packs, q.answerable_cited, q.unanswerable_packs),
            (6, 4, 7)
        );
        let names: Vec<&str> = q.auroc.iter().map(|r| r.unanswerable.as_str()).collect();
        assert_eq!(
            names,
            vec!["foreign", "held-out", "all unanswerable (pooled)"]
        );
        let pos = [0.95, 0.8, 0.75, 0.5, 0.85, 0.2].map(|x: f32| f64::from(x));
        let foreign = [0.1, 0.05, 0.2, 0.4].map(|x: f32| f64::from(x));
        let held = [0.8, 0.2, 0.25].map(|x: f32| f64::from(x));
        let pooled: Vec<f64> = foreign.iter().chain(&held).copied().collect();
        assert!((q.auroc[0].auroc.unwrap() - auroc_pairwise(&pos, &foreign)).abs() < 1e-12);
        assert!((q.auroc[1].auroc.unwrap() - auroc_pairwise(&pos, &held)).abs() < 1e-12);
        assert!((q.auroc[2].auroc.unwrap() - auroc_pairwise(&pos, &pooled)).abs() < 1e-12);
        assert_eq!(q.auroc[2].unanswerable_packs, 7);
        assert_eq!(q.reliability.iter().map(|b| b.packs).sum::<usize>(), 13);
        // The 0.8–0.9 bin: answerable 0.8 (cited), 0.85 (not cited), held-out 0.8.
        let b = &q.reliability[8];
        assert_eq!(b.packs, 3);
        assert!((b.observed.unwrap() - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(q.answerable_coverage.full, 4);
        assert_eq!(q.answerable_cited_coverage.total(), 4);

        let c = calibrate(synthetic_sets(), 0.55);
        let md = PackReport {
            queries: 6,
            curve: vec![],
            calibration: c,
        }
        .markdown(None);
        for needle in [
            "AUROC",
            "all unanswerable (pooled)",
            "| 0.8–0.9 | 3 |",
            "**not met**",
            "Expected calibration error",
            "`full_at` (0.700)",
            "not measured (no 1000-token budget",
        ] {
            assert!(md.contains(needle), "{needle} missing:\n{md}");
        }
        let curves = reliability_curves(&calibrate(synthetic_sets(), 0.55));
        assert_eq!(curves[1].points, vec![(0.0, 0.0), (1.0, 1.0)]);
        assert_eq!(
            curves[0].points.len(),
            q.reliability.iter().filter(|b| b.packs > 0).count()
        );
    }

    fn point(budget: usize, recall: f64, share: Option<f64>) -> BudgetPoint {
        BudgetPoint {
            budget,
            evidence_recall: recall,
            any_evidence: 0.0,
            mean_tokens: 0.0,
            mean_citations: 0.0,
            evidence_per_1k_tokens: 0.0,
            coverage: CoverageCounts::default(),
            packs_citing: 2,
            budget_share_citing: share,
        }
    }

    #[test]
    fn recall_ratio_and_budget_share() {
        let r = PackReport {
            queries: 4,
            curve: vec![point(1000, 0.72, Some(0.5)), point(2000, 0.8, Some(0.93))],
            calibration: calibrate(vec![set("a", true, &[0.8])], 0.5),
        };
        let reference = Recall10Reference {
            label: "`hybrid`".into(),
            queries: 4,
            recall10: 0.8,
        };
        let ratio = r.recall_ratio(reference.clone()).unwrap();
        assert!((ratio.ratio.unwrap() - 0.9).abs() < 1e-12);
        assert_eq!(ratio.met, Some(true));
        let md = r.markdown(Some(&ratio));
        assert!(md.contains("= **0.900** — met"), "{md}");
        assert!(md.contains("**93.0 %** (2 of 4 packs cite) — met"), "{md}");
        let low = r
            .recall_ratio(Recall10Reference {
                recall10: 0.9,
                ..reference.clone()
            })
            .unwrap();
        assert_eq!(low.met, Some(false));
        let zero = r
            .recall_ratio(Recall10Reference {
                recall10: 0.0,
                ..reference.clone()
            })
            .unwrap();
        assert_eq!((zero.ratio, zero.met), (None, None));
        let no_1000 = PackReport {
            curve: vec![point(250, 0.5, None)],
            ..r.clone()
        };
        assert!(no_1000.recall_ratio(reference).is_none());
        assert!(no_1000.markdown(None).contains("no 2000-token budget"));
    }

    impl Calibration {
        fn markdown_ok(&self) -> bool {
            let r = PackReport {
                queries: 0,
                curve: vec![],
                calibration: self.clone(),
            };
            let md = r.markdown(None);
            md.contains("(best)") && md.contains("(current)")
        }
    }
}
