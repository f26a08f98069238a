//! Ranking metrics (as `trec_eval` / BEIR compute them) and latency statistics.
//!
//! - nDCG@k: graded gains (gain = the qrels score, linear as in `trec_eval`), discount
//!   `1 / log2(rank + 1)`, ideal DCG from the qrels' own scores sorted descending.
//! - Recall@k: relevant documents in the top k / relevant documents in total.
//! - MRR@k: 1 / rank of the first relevant document within the top k, else 0.
//!
//! A document counts as relevant when its qrels score is > 0. Repeated ids in a ranking
//! count once (at their first position), so a ranking of chunks mapped to documents can be
//! passed as is.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use serde::Serialize;

/// The first occurrence of each id, in order, truncated at `k`.
fn top_unique<T: Eq + Hash>(ranked: &[T], k: usize) -> Vec<&T> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for id in ranked {
        if out.len() >= k {
            break;
        }
        if seen.insert(id) {
            out.push(id);
        }
    }
    out
}

fn discount(rank0: usize) -> f64 {
    1.0 / ((rank0 + 2) as f64).log2()
}

/// nDCG@k of `ranked` against graded `qrels` (id → gain). 0 when nothing is relevant.
pub fn ndcg_at_k<T: Eq + Hash>(ranked: &[T], qrels: &HashMap<T, f64>, k: usize) -> f64 {
    let dcg: f64 = top_unique(ranked, k)
        .into_iter()
        .enumerate()
        .map(|(i, id)| qrels.get(id).copied().filter(|g| *g > 0.0).unwrap_or(0.0) * discount(i))
        .sum();
    let mut ideal: Vec<f64> = qrels.values().copied().filter(|g| *g > 0.0).collect();
    ideal.sort_by(|a, b| b.total_cmp(a));
    let idcg: f64 = ideal
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, g)| g * discount(i))
        .sum();
    if idcg <= 0.0 {
        0.0
    } else {
        dcg / idcg
    }
}

/// Recall@k: relevant ids among the first k / all relevant ids. 0 when nothing is relevant.
pub fn recall_at_k<T: Eq + Hash>(ranked: &[T], qrels: &HashMap<T, f64>, k: usize) -> f64 {
    let relevant = qrels.values().filter(|g| **g > 0.0).count();
    if relevant == 0 {
        return 0.0;
    }
    let found = top_unique(ranked, k)
        .into_iter()
        .filter(|id| qrels.get(*id).is_some_and(|g| *g > 0.0))
        .count();
    found as f64 / relevant as f64
}

/// MRR@k: reciprocal rank of the first relevant id among the first k, else 0.
pub fn mrr_at_k<T: Eq + Hash>(ranked: &[T], qrels: &HashMap<T, f64>, k: usize) -> f64 {
    top_unique(ranked, k)
        .into_iter()
        .position(|id| qrels.get(id).is_some_and(|g| *g > 0.0))
        .map_or(0.0, |i| 1.0 / (i + 1) as f64)
}

/// Arithmetic mean (0 for an empty slice).
pub fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        0.0
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

/// Nearest-rank percentile `p` (0–100) of `xs` (0 for an empty slice).
pub fn percentile(xs: &[f64], p: f64) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// Latency summary in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub mean_ms: f64,
    pub samples: usize,
}

impl Latency {
    pub fn of(ms: &[f64]) -> Self {
        Latency {
            p50_ms: percentile(ms, 50.0),
            p95_ms: percentile(ms, 95.0),
            mean_ms: mean(ms),
            samples: ms.len(),
        }
    }
}

/// Distribution summary of a score (min, quartiles, max).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Distribution {
    pub n: usize,
    pub min: f64,
    pub p5: f64,
    pub p25: f64,
    pub p50: f64,
    pub p75: f64,
    pub p95: f64,
    pub max: f64,
    pub mean: f64,
}

impl Distribution {
    pub fn of(xs: &[f64]) -> Self {
        let min = xs.iter().copied().reduce(f64::min).unwrap_or(0.0);
        let max = xs.iter().copied().reduce(f64::max).unwrap_or(0.0);
        Distribution {
            n: xs.len(),
            min,
            p5: percentile(xs, 5.0),
            p25: percentile(xs, 25.0),
            p50: percentile(xs, 50.0),
            p75: percentile(xs, 75.0),
            p95: percentile(xs, 95.0),
            max,
            mean: mean(xs),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&'static str, f64)]) -> HashMap<&'static str, f64> {
        pairs.iter().copied().collect()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn ndcg_hand_computed() {
        // Relevant a (gain 2) at rank 3, b (gain 1) at rank 1; c is relevant but missed.
        let qrels = q(&[("a", 2.0), ("b", 1.0), ("c", 1.0)]);
        let ranked = ["b", "x", "a", "y"];
        let dcg = 1.0 / 2f64.log2() + 2.0 / 4f64.log2();
        let idcg = 2.0 / 2f64.log2() + 1.0 / 3f64.log2() + 1.0 / 4f64.log2();
        assert!(close(ndcg_at_k(&ranked, &qrels, 10), dcg / idcg));
        // Cut at 2: only b counts; the ideal is cut at 2 as well.
        let idcg2 = 2.0 + 1.0 / 3f64.log2();
        assert!(close(ndcg_at_k(&ranked, &qrels, 2), 1.0 / idcg2));
        // Perfect order gives 1.
        assert!(close(ndcg_at_k(&["a", "b", "c"], &qrels, 10), 1.0));
        // Nothing relevant retrieved gives 0; an empty qrels gives 0.
        assert!(close(ndcg_at_k(&["x", "y"], &qrels, 10), 0.0));
        assert!(close(ndcg_at_k(&["x"], &q(&[]), 10), 0.0));
        // Score-0 judgements are not relevant.
        assert!(close(
            ndcg_at_k(&["z", "a"], &q(&[("a", 1.0), ("z", 0.0)]), 10),
            1.0 / 3f64.log2()
        ));
    }

    #[test]
    fn duplicates_count_once() {
        let qrels = q(&[("a", 1.0), ("b", 1.0)]);
        // Chunks of "a" twice: the second occurrence is skipped, "b" is at rank 2.
        let ranked = ["a", "a", "b"];
        assert!(close(ndcg_at_k(&ranked, &qrels, 10), 1.0));
        assert!(close(recall_at_k(&ranked, &qrels, 2), 1.0));
    }

    #[test]
    fn recall_and_mrr_hand_computed() {
        let qrels = q(&[("a", 1.0), ("b", 1.0), ("c", 1.0), ("d", 1.0)]);
        let ranked = ["x", "b", "y", "a", "z"];
        assert!(close(recall_at_k(&ranked, &qrels, 1), 0.0));
        assert!(close(recall_at_k(&ranked, &qrels, 2), 0.25));
        assert!(close(recall_at_k(&ranked, &qrels, 10), 0.5));
        assert!(close(mrr_at_k(&ranked, &qrels, 10), 0.5));
        assert!(close(mrr_at_k(&ranked, &qrels, 1), 0.0));
        assert!(close(mrr_at_k(&["a"], &qrels, 10), 1.0));
        assert!(close(recall_at_k(&ranked, &q(&[]), 10), 0.0));
    }

    #[test]
    fn percentiles_nearest_rank() {
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        assert!(close(percentile(&xs, 50.0), 50.0));
        assert!(close(percentile(&xs, 95.0), 95.0));
        assert!(close(percentile(&xs, 0.0), 1.0));
        assert!(close(percentile(&xs, 100.0), 100.0));
        assert!(close(percentile(&[3.0, 1.0, 2.0], 50.0), 2.0));
        assert!(close(percentile(&[], 50.0), 0.0));
        let l = Latency::of(&[1.0, 2.0, 3.0, 4.0]);
        assert!(close(l.p50_ms, 2.0) && close(l.p95_ms, 4.0) && close(l.mean_ms, 2.5));
        let d = Distribution::of(&[0.5, 0.7, 0.6]);
        assert!(close(d.min, 0.5) && close(d.max, 0.7) && close(d.p50, 0.6));
    }

    proptest::proptest! {
        #[test]
        fn metrics_are_bounded_and_perfect_ranking_scores_one(
            gains in proptest::collection::vec(0u8..4, 1..12),
            order in proptest::collection::vec(0usize..30, 0..40),
            k in 1usize..20,
        ) {
            let qrels: HashMap<usize, f64> =
                gains.iter().enumerate().map(|(i, g)| (i, f64::from(*g))).collect();
            for m in [ndcg_at_k(&order, &qrels, k), recall_at_k(&order, &qrels, k), mrr_at_k(&order, &qrels, k)] {
                proptest::prop_assert!((0.0..=1.0 + 1e-12).contains(&m), "{m}");
            }
            // Ideal ranking: ids by gain, descending.
            let mut ideal: Vec<usize> = (0..gains.len()).collect();
            ideal.sort_by(|a, b| gains[*b].cmp(&gains[*a]));
            let any_relevant = gains.iter().any(|g| *g > 0);
            let n = ndcg_at_k(&ideal, &qrels, k);
            let expected = if any_relevant { 1.0 } else { 0.0 };
            proptest::prop_assert!((n - expected).abs() < 1e-9, "nDCG {} of the ideal ranking", n);
            // Recall@k over the whole ideal list is 1 when k covers every relevant id.
            let relevant = gains.iter().filter(|g| **g > 0).count();
            if any_relevant && k >= relevant {
                proptest::prop_assert!((recall_at_k(&ideal, &qrels, k) - 1.0).abs() < 1e-9);
                proptest::prop_assert!((mrr_at_k(&ideal, &qrels, k) - 1.0).abs() < 1e-9);
            }
        }
    }
}
