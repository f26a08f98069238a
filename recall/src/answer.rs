//! Answerability: how likely the cited items answer the query, as a calibrated score, and
//! the coverage rating derived from it. A pure function of signals the read path already
//! has; no model call, no I/O.
//!
//! # Signals
//!
//! - from the ranking ([`RankSignals`], computed by [`crate::Recaller`] from every candidate
//!   before selection): the best dense cosine, its margin over the 10th best (a real answer
//!   stands out; a topical neighbour is one of many), and whether the two legs agree on
//!   their best item;
//! - from the packed text ([`lexical_signals`]): the weighted share of the query's aspects
//!   (content words, identifiers counted twice) that the cited items support together, that
//!   the best single item supports, and the share of identifiers found.
//!
//! # Model
//!
//! A logistic regression over those signals, `p = σ(b + Σ wᵢ·xᵢ)`, fitted on training data
//! only (SciFact train and LoCoMo conversations 1–5: answerable queries against in-domain
//! unanswerable probes whose evidence was deleted and foreign probes; the fit and its figures
//! are in `eval/results/README.md`). Coverage is `full` at `p ≥` [`full_at`], `none` below
//! [`NONE_BELOW`], `partial` between; both thresholds were chosen on the same data for the
//! targets "`full` on at most 3 % of unanswerable probes" and "`none` on most of them". The
//! `full` threshold follows the length of the cited evidence ([`full_at`]).

use std::collections::HashSet;

use cairn_models::{AnswerSignals, Coverage};

use crate::query::Aspect;

/// Ranking signals of one recall.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RankSignals {
    /// Best dense cosine among the candidates.
    pub top_dense: f32,
    /// `top_dense` minus the 10th best dense cosine (or the last, with fewer).
    pub dense_margin: f32,
    /// `top_dense` minus the second best dense cosine.
    pub dense_gap: f32,
    /// `(b1 − b10) / b1` of the BM25 scores (the 10th or the last; 0 without a match).
    pub sparse_margin: f32,
    /// 1 when the dense leg's best item is among the sparse leg's first three, or the other
    /// way round; else 0.
    pub leg_agreement: f32,
}

impl RankSignals {
    /// A confident retrieval (a clear dense match both legs agree on): for packs built from
    /// items that did not come through a ranking, such as tests of the pack alone.
    pub const CONFIDENT: RankSignals = RankSignals {
        top_dense: 0.9,
        dense_margin: 0.2,
        dense_gap: 0.1,
        sparse_margin: 0.5,
        leg_agreement: 1.0,
    };

    /// From the dense cosines and BM25 scores (each best first) and the two legs' first
    /// items.
    pub fn of<K: PartialEq>(
        dense_scores: &[f32],
        sparse_scores: &[f32],
        dense_top: &[K],
        sparse_top: &[K],
    ) -> Self {
        let top_dense = dense_scores.first().copied().unwrap_or(0.0);
        let tenth = |xs: &[f32]| xs.get(9).or(xs.last()).copied().unwrap_or(0.0);
        let b1 = sparse_scores.first().copied().unwrap_or(0.0);
        let sparse_margin = if b1 > 0.0 {
            ((b1 - tenth(sparse_scores)) / b1).clamp(0.0, 1.0)
        } else {
            0.0
        };
        let agree = |a: &[K], b: &[K]| a.first().is_some_and(|x| b.iter().take(3).any(|y| y == x));
        RankSignals {
            top_dense,
            dense_margin: (top_dense - tenth(dense_scores)).max(0.0),
            dense_gap: (top_dense - dense_scores.get(1).copied().unwrap_or(top_dense)).max(0.0),
            sparse_margin,
            leg_agreement: if agree(dense_top, sparse_top) || agree(sparse_top, dense_top) {
                1.0
            } else {
                0.0
            },
        }
    }
}

/// Weight of an aspect: an identifier counts twice a content word (in the lexical signals
/// here and in the pack's choice of passage).
pub fn aspect_weight(a: &Aspect) -> usize {
    if a.identifier {
        2
    } else {
        1
    }
}

/// `(aspect_support, best_item_support, identifier_support)` of the cited items, given per
/// item as which of `aspects` it supports (in order). With no aspect at all every share is
/// 1 (nothing is left unsupported).
pub fn lexical_signals(aspects: &[Aspect], items: &[&[bool]]) -> (f32, f32, f32) {
    let weight = |a: &Aspect| aspect_weight(a) as f32;
    let total: f32 = aspects.iter().map(weight).sum();
    if total <= 0.0 {
        return (1.0, 1.0, 1.0);
    }
    let by = |i: usize, item: &[bool]| item.get(i).copied().unwrap_or(false);
    let any = |i: usize| items.iter().any(|s| by(i, s));
    let union: f32 = aspects
        .iter()
        .enumerate()
        .filter(|(i, _)| any(*i))
        .map(|(_, a)| weight(a))
        .sum();
    let best: f32 = items
        .iter()
        .map(|s| {
            aspects
                .iter()
                .enumerate()
                .filter(|(i, _)| by(*i, s))
                .map(|(_, a)| weight(a))
                .sum::<f32>()
        })
        .fold(0.0, f32::max);
    let idents: Vec<usize> = (0..aspects.len())
        .filter(|&i| aspects[i].identifier)
        .collect();
    let ident_share = if idents.is_empty() {
        1.0
    } else {
        idents.iter().filter(|&&i| any(i)).count() as f32 / idents.len() as f32
    };
    (union / total, best / total, ident_share)
}

/// Which of `aspects` a text (given as its stem set) supports, in order.
pub fn supports(aspects: &[Aspect], stems: &HashSet<String>) -> Vec<bool> {
    aspects.iter().map(|a| a.supported_by(stems)).collect()
}

/// Coefficients of the model: intercept, then one per signal in the order of
/// [`features`]. Fitted by weighted logistic regression (scikit-learn, C = 1): the positive
/// class is an answerable query whose judged evidence is cited; each corpus weighs the
/// same, and within it the positives and each probe set (foreign, held-out or
/// cross-conversation) weigh equally. `top_dense` and `top_item_dense` are nearly
/// collinear, hence their opposite signs. Fitted on packs recalled at `min_relevance` 0.60 with
/// queries embedded without an instruction (2026-12-07): their cosines run 0.02–0.03
/// higher than with bge's instruction, and the coefficients fitted with it (intercept
/// −4.307) rated 79 % of LoCoMo's cross-conversation probes `none` where these rate 93 %.
const COEF: [f32; 10] = [
    -6.354, -0.298, 3.579, 1.916, 3.905, 0.496, 1.454, 1.656, 0.094, 3.374,
];

/// `coverage` is `full` at or above [`full_at`], a threshold that follows the length in
/// words of the first cited item: [`FULL_AT_SHORT`] up to [`SHORT_EVIDENCE_WORDS`],
/// [`FULL_AT_LONG`] from [`LONG_EVIDENCE_WORDS`], log-linear between (as the fusion's dense
/// share). Why the length: the signals are lexical and embedding overlaps, and a long
/// passage on the question's topic overlaps it as much whether or not it states the answer
/// (SciFact's held-out probes: the claim's own abstract deleted, its topical neighbours
/// left, are rated `full` 3 % of the time at 0.85 and 10 % at 0.8), while a short message
/// that carries the question's words and names is nearly always the answer (LoCoMo's
/// probes from another conversation: 0.5 % at the short threshold). One threshold had to
/// be the long one, which withheld `full` from most answerable chat questions (36 %).
///
/// The short threshold holds only for evidence that carries what the question asks:
/// with less than [`SHORT_MIN_SUPPORT`] of the query's aspects supported (weighted as in
/// [`lexical_signals`]), a pack needs the long threshold whatever its length, so a question
/// half answered by a short note ("Who keeps the lighthouse, and what is the keeper's
/// salary?") stays `partial` and names the missing half. Values chosen on the training
/// sets (figures in `eval/results/README.md`): the short end is 0.05 above the lowest value
/// at which every unanswerable set stays at most 3 % `full`, for a margin on unseen data.
pub const FULL_AT_LONG: f32 = 0.85;
/// See [`FULL_AT_LONG`].
pub const FULL_AT_SHORT: f32 = 0.6;
/// Evidence up to this many words gets [`FULL_AT_SHORT`] (a chat message, a note).
pub const SHORT_EVIDENCE_WORDS: f32 = 48.0;
/// Evidence from this many words gets [`FULL_AT_LONG`] (an abstract, a document chunk).
pub const LONG_EVIDENCE_WORDS: f32 = 128.0;
/// Least weighted share of the query's aspects the cited items must support for a
/// threshold under [`FULL_AT_LONG`].
pub const SHORT_MIN_SUPPORT: f32 = 0.75;

/// The `full` threshold of a pack whose first cited item has `words` words and whose cited
/// items support `aspect_support` of the query's aspects.
pub fn full_at(words: usize, aspect_support: f32) -> f32 {
    if aspect_support < SHORT_MIN_SUPPORT {
        return FULL_AT_LONG;
    }
    crate::fusion::by_length(
        words,
        (SHORT_EVIDENCE_WORDS, LONG_EVIDENCE_WORDS),
        (FULL_AT_SHORT, FULL_AT_LONG),
    )
}

/// `coverage` is `none` below this score: the highest threshold (step 0.1) that rates at
/// most 10 % of answerable training queries `none` in the fit (SciFact 9 %, LoCoMo 6 %;
/// 0.4 would rate 15 % and 11 % `none`).
/// Reproduce both with `eval/scripts/fit_answerability.py`.
pub const NONE_BELOW: f32 = 0.3;

fn features(s: &AnswerSignals) -> [f32; 9] {
    [
        s.top_dense,
        s.dense_margin,
        s.dense_gap,
        s.sparse_margin,
        s.leg_agreement,
        s.aspect_support,
        s.best_item_support,
        s.identifier_support,
        s.top_item_dense,
    ]
}

/// The estimated probability that the cited items answer the query.
pub fn score(s: &AnswerSignals) -> f32 {
    let z = COEF[0]
        + features(s)
            .iter()
            .zip(&COEF[1..])
            .map(|(x, w)| x * w)
            .sum::<f32>();
    let p = 1.0 / (1.0 + (-z).exp());
    if p.is_finite() {
        p
    } else {
        0.0
    }
}

/// The rating of a score, given the pack's `full` threshold ([`full_at`]).
pub fn coverage(score: f32, full_at: f32) -> Coverage {
    if score >= full_at {
        Coverage::Full
    } else if score < NONE_BELOW {
        Coverage::None
    } else {
        Coverage::Partial
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::{aspects, identifiers};
    use crate::text::content_stems;

    fn stems(t: &str) -> HashSet<String> {
        content_stems(t).into_iter().collect()
    }

    #[test]
    fn lexical_signals_weigh_identifiers_double() {
        let q = "Who keeps the Skerryvore lighthouse?";
        let a = aspects(q, &identifiers(q, 8));
        let item = supports(
            &a,
            &stems("The keeper of the Skerryvore lighthouse is Morag Dunbar."),
        );
        let (union, best, ident) = lexical_signals(&a, &[&item]);
        assert_eq!((union, best, ident), (1.0, 1.0, 1.0));
        let other = supports(&a, &stems("The lighthouse at the harbour was repainted."));
        let (union, _, ident) = lexical_signals(&a, &[&other]);
        assert!(union < 0.6, "{union}");
        assert_eq!(ident, 0.0);
    }

    #[test]
    fn word_families_count_as_support() {
        let q = "How are embeddings kept off the async runtime?";
        let a = aspects(q, &identifiers(q, 8));
        let item = stems("Embedder is a handle to one ONNX session on its own OS thread. Async callers send jobs over a queue.");
        let supported: Vec<&str> = a
            .iter()
            .filter(|x| x.supported_by(&item))
            .map(|x| x.label.as_str())
            .collect();
        assert_eq!(supported, vec!["embeddings", "async"], "{a:?} {item:?}");
    }

    #[test]
    fn no_aspect_means_nothing_unsupported() {
        assert_eq!(lexical_signals(&[], &[]), (1.0, 1.0, 1.0));
    }

    #[test]
    fn rank_signals_measure_margin_and_agreement() {
        let scores = [0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5];
        let bm25 = [20.0, 10.0, 5.0];
        let r = RankSignals::of(&scores, &bm25, &["a", "b"], &["c", "a"]);
        assert!((r.dense_margin - 0.3).abs() < 1e-6);
        assert!((r.dense_gap - 0.1).abs() < 1e-6);
        assert!((r.sparse_margin - 0.75).abs() < 1e-6);
        assert_eq!(r.leg_agreement, 1.0);
        let r = RankSignals::of(&scores[..2], &[], &["a"], &["x", "y", "z", "a"]);
        assert!((r.dense_margin - 0.1).abs() < 1e-6);
        assert_eq!(r.sparse_margin, 0.0);
        assert_eq!(r.leg_agreement, 0.0);
        assert_eq!(
            RankSignals::of::<&str>(&[], &[], &[], &[]),
            RankSignals::default()
        );
    }

    #[test]
    fn score_is_a_probability_and_monotone_in_each_signal() {
        let base = AnswerSignals::default();
        let p0 = score(&base);
        assert!((0.0..=1.0).contains(&p0));
        let better = AnswerSignals {
            dense_margin: 0.2,
            ..base
        };
        assert!(score(&better) >= p0);
        let better = AnswerSignals {
            aspect_support: 1.0,
            ..base
        };
        assert!(score(&better) >= p0);
    }

    #[test]
    fn thresholds_split_the_scale() {
        for words in [1, 20, 80, 300] {
            let f = full_at(words, 1.0);
            assert_eq!(coverage(0.0, f), Coverage::None);
            assert_eq!(coverage(NONE_BELOW, f), Coverage::Partial);
            assert_eq!(coverage(f - 0.01, f), Coverage::Partial);
            assert_eq!(coverage(f, f), Coverage::Full);
            assert_eq!(coverage(1.0, f), Coverage::Full);
        }
    }

    #[test]
    fn full_threshold_follows_the_evidence_length() {
        assert_eq!(full_at(0, 1.0), FULL_AT_SHORT);
        assert_eq!(full_at(SHORT_EVIDENCE_WORDS as usize, 1.0), FULL_AT_SHORT);
        assert!((full_at(LONG_EVIDENCE_WORDS as usize, 1.0) - FULL_AT_LONG).abs() < 1e-6);
        assert_eq!(full_at(100_000, 1.0), FULL_AT_LONG);
        let mut last = 0.0;
        for w in 0..400 {
            let f = full_at(w, 1.0);
            assert!(f >= last && f > NONE_BELOW);
            last = f;
            // Evidence that leaves a quarter of the question unsupported gets no discount.
            assert_eq!(full_at(w, SHORT_MIN_SUPPORT - 0.01), FULL_AT_LONG);
            assert_eq!(full_at(w, SHORT_MIN_SUPPORT), f);
        }
    }
}
