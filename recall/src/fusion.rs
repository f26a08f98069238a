//! Rank fusion of the retrieval legs: a pure function, no store, no embedder, no I/O.
//!
//! [`Recaller::retrieve`](crate::Recaller::retrieve) runs the legs (dense, sparse, one lexical
//! probe per query identifier) and hands their results here as data; [`fuse`] returns every
//! item once, with its fused score and the ranks and identifier hits that explain it.
//!
//! # Why reciprocal rank fusion
//!
//! Cosine similarities and BM25 scores live on unrelated scales (BM25 is unbounded and
//! depends on the collection), so their values cannot be added. RRF uses only each item's
//! rank in each leg: an item at rank `r` (from 1) in a leg of weight `w` earns `w / (k + r)`,
//! and its fused score is the sum over the legs it appears in. `k` flattens the head of
//! each leg (the larger `k`, the less rank 1 beats rank 5). The ranks are kept as data
//! ([`Fused::dense_rank`], [`Fused::sparse_rank`]) to explain the selection.
//!
//! # Not Qdrant's weighting
//!
//! Qdrant's own weighted RRF (the store's `SearchMode::Hybrid`, and its reference
//! implementation `InMemoryStore`) scores `1 / (r / w + k − 1)`: the weight scales the
//! rank, not the term. Recall adds `w / (k + r)`. With weights other than 1 the two do not
//! rank alike. Recall's formula is deliberately kept: the evaluation figures were measured
//! with it.
//!
//! # The identifier bonus
//!
//! An identifier the query names (an id, a quoted string, an acronym...) found verbatim in
//! an item counts like rank 1 in a third leg of weight `identifier_weight`, that is
//! `identifier_weight / (k + 1)`, *shared* among the items that contain it: each of the
//! `n` items gets `1 / n` of it. A rare identifier ("ZX-4471", in one item) lifts that
//! item; a common one ("UK", in all five probed items) barely reorders anything. (A full
//! rank-1 bonus per identifier cost SciFact's nDCG@10 0.08, its claims being full of
//! acronyms and numbers.) An item's shares are summed over the identifiers it contains:
//! `identifier_weight * Σ (1 / n_i) / (k + 1)`.
//!
//! # Order
//!
//! Fused score descending; ties (bit-for-bit equal scores, e.g. rank 3 in one leg only
//! against rank 3 in the other with equal weights) by key ascending. That is the order
//! `retrieve` used before this module existed, kept so that rankings do not move.
//!
//! # Arithmetic
//!
//! Scores are `f32`, each term computed as `w / (k + i + 1)` (`i` the 0-based position) and
//! added in the order dense, sparse, identifiers: the same operations, in the same order, as
//! before, so scores are identical to the bit, and so are ties.

use std::collections::HashMap;
use std::hash::Hash;

/// Fusion weights and the RRF constant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FusionParams {
    /// RRF constant `k` (≥ 0).
    pub k: f32,
    /// Weight of the dense leg; 0 removes its contribution (ranks are still reported).
    pub dense_weight: f32,
    /// Weight of the sparse leg; 0 removes its contribution (ranks are still reported).
    pub sparse_weight: f32,
    /// Weight of the identifier "leg"; 0 removes the bonus (hits are still reported).
    pub identifier_weight: f32,
}

impl From<&crate::RecallConfig> for FusionParams {
    fn from(c: &crate::RecallConfig) -> Self {
        FusionParams {
            k: c.rrf_k,
            dense_weight: c.dense_weight,
            sparse_weight: c.sparse_weight,
            identifier_weight: c.identifier_weight,
        }
    }
}

/// The items one identifier was found in (verbatim), in probe order.
#[derive(Debug, Clone, PartialEq)]
pub struct IdentifierLeg<K> {
    pub identifier: String,
    pub items: Vec<K>,
}

/// The legs to fuse, as data. Leg scores are not inputs: RRF uses ranks only.
///
/// A key repeated within one leg (or within one identifier's items) counts once, at its
/// first position; the repeat still occupies its position, so the keys after it keep the
/// ranks the leg gave them. The stores never return an id twice in one search, so this
/// only defines the function on every input. Identifiers are expected distinct
/// ([`crate::query::identifiers`] makes them so); each entry is shared among its own items.
#[derive(Debug, Clone, Copy)]
pub struct Legs<'a, K> {
    /// Dense (embedding) leg, best first.
    pub dense: &'a [K],
    /// Sparse (BM25) leg, best first.
    pub sparse: &'a [K],
    /// Identifier probes, in the query's order. Empty when identifier probes are off
    /// (`max_identifiers = 0`).
    pub identifiers: &'a [IdentifierLeg<K>],
}

/// One fused item: the data of a `SelectionReason` that fusion decides.
#[derive(Debug, Clone, PartialEq)]
pub struct Fused<K> {
    pub key: K,
    pub fused_score: f32,
    /// 1-based rank in the dense leg, if the item appeared there.
    pub dense_rank: Option<u32>,
    /// 1-based rank in the sparse leg, if the item appeared there.
    pub sparse_rank: Option<u32>,
    /// Identifiers the item contains, in the order of [`Legs::identifiers`].
    pub identifier_hits: Vec<String>,
}

/// The RRF term of 0-based `position` in a leg of weight `weight`: `weight / (k + rank)`.
fn rrf_term(weight: f32, k: f32, position: usize) -> f32 {
    // Written as before the extraction (`k + position + 1.0`), for bit-identical scores.
    weight / (k + position as f32 + 1.0)
}

fn rank_of(position: usize) -> u32 {
    u32::try_from(position + 1).unwrap_or(u32::MAX)
}

/// Fuses the legs: every item of any leg once, best first (see the module docs for the
/// formula and the order).
pub fn fuse<K>(legs: &Legs<'_, K>, params: &FusionParams) -> Vec<Fused<K>>
where
    K: Clone + Eq + Hash + Ord,
{
    let k = params.k;
    let mut items: Vec<Fused<K>> = Vec::new();
    let mut index: HashMap<K, usize> = HashMap::new();
    let mut slot = |key: &K, items: &mut Vec<Fused<K>>| -> usize {
        *index.entry(key.clone()).or_insert_with(|| {
            items.push(Fused {
                key: key.clone(),
                fused_score: 0.0,
                dense_rank: None,
                sparse_rank: None,
                identifier_hits: Vec::new(),
            });
            items.len() - 1
        })
    };

    for (position, key) in legs.dense.iter().enumerate() {
        let i = slot(key, &mut items);
        if items[i].dense_rank.is_none() {
            items[i].dense_rank = Some(rank_of(position));
            items[i].fused_score += rrf_term(params.dense_weight, k, position);
        }
    }
    for (position, key) in legs.sparse.iter().enumerate() {
        let i = slot(key, &mut items);
        if items[i].sparse_rank.is_none() {
            items[i].sparse_rank = Some(rank_of(position));
            items[i].fused_score += rrf_term(params.sparse_weight, k, position);
        }
    }

    // Each identifier's share, 1 / (number of distinct items containing it), summed per
    // item in the identifiers' order; the weighted bonus is added once per item.
    let mut bonus: Vec<f32> = vec![0.0; items.len()];
    for leg in legs.identifiers {
        let mut members: Vec<usize> = Vec::new();
        for key in &leg.items {
            let i = slot(key, &mut items);
            if !members.contains(&i) {
                members.push(i);
            }
        }
        bonus.resize(items.len(), 0.0);
        let share = 1.0 / members.len() as f32;
        for i in members {
            bonus[i] += share;
            items[i].identifier_hits.push(leg.identifier.clone());
        }
    }
    for (item, b) in items.iter_mut().zip(&bonus) {
        if !item.identifier_hits.is_empty() {
            item.fused_score += params.identifier_weight * b / (k + 1.0);
        }
    }

    items.sort_by(|a, b| {
        b.fused_score
            .total_cmp(&a.fused_score)
            .then_with(|| a.key.cmp(&b.key))
    });
    items
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    const DEFAULTS: FusionParams = FusionParams {
        k: 10.0,
        dense_weight: 1.0,
        sparse_weight: 0.75,
        identifier_weight: 0.5,
    };

    fn ident<K: Clone>(name: &str, items: &[K]) -> IdentifierLeg<K> {
        IdentifierLeg {
            identifier: name.to_string(),
            items: items.to_vec(),
        }
    }

    /// (key, score, dense rank, sparse rank, identifier hits), for compact assertions.
    type Row<'a> = (&'a str, f32, Option<u32>, Option<u32>, Vec<&'a str>);

    fn rows<'a>(fused: &'a [Fused<&'a str>]) -> Vec<Row<'a>> {
        fused
            .iter()
            .map(|f| {
                (
                    f.key,
                    f.fused_score,
                    f.dense_rank,
                    f.sparse_rank,
                    f.identifier_hits.iter().map(String::as_str).collect(),
                )
            })
            .collect()
    }

    /// Keys and ranks exactly, scores to 1e-6 against hand-computed values.
    fn assert_rows(got: &[Fused<&str>], want: &[Row<'_>]) {
        let got = rows(got);
        assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
        for (g, w) in got.iter().zip(want) {
            assert_eq!((g.0, g.2, g.3, &g.4), (w.0, w.2, w.3, &w.4), "{got:?}");
            assert!((g.1 - w.1).abs() < 1e-6, "{}: {} vs {}", g.0, g.1, w.1);
        }
    }

    #[test]
    fn empty_legs_fuse_to_nothing() {
        let legs: Legs<'_, &str> = Legs {
            dense: &[],
            sparse: &[],
            identifiers: &[],
        };
        assert!(fuse(&legs, &DEFAULTS).is_empty());
    }

    #[test]
    fn one_leg_only_keeps_its_order() {
        let legs = Legs {
            dense: &["c", "a", "b"],
            sparse: &[],
            identifiers: &[],
        };
        // 1/11, 1/12, 1/13.
        assert_rows(
            &fuse(&legs, &DEFAULTS),
            &[
                ("c", 0.090_909_09, Some(1), None, vec![]),
                ("a", 0.083_333_33, Some(2), None, vec![]),
                ("b", 0.076_923_08, Some(3), None, vec![]),
            ],
        );
        let legs = Legs {
            dense: &[],
            sparse: &["c", "a"],
            identifiers: &[],
        };
        // 0.75/11, 0.75/12.
        assert_rows(
            &fuse(&legs, &DEFAULTS),
            &[
                ("c", 0.068_181_82, None, Some(1), vec![]),
                ("a", 0.062_5, None, Some(2), vec![]),
            ],
        );
    }

    #[test]
    fn legs_that_agree_add_up() {
        let legs = Legs {
            dense: &["x", "y"],
            sparse: &["x", "y"],
            identifiers: &[],
        };
        // x: 1/11 + 0.75/11 = 1.75/11; y: 1.75/12.
        assert_rows(
            &fuse(&legs, &DEFAULTS),
            &[
                ("x", 0.159_090_9, Some(1), Some(1), vec![]),
                ("y", 0.145_833_33, Some(2), Some(2), vec![]),
            ],
        );
    }

    #[test]
    fn legs_that_disagree_favour_the_heavier_leg() {
        let legs = Legs {
            dense: &["a", "b", "c"],
            sparse: &["c", "b"],
            identifiers: &[],
        };
        // b: 1/12 + 0.75/12 = 0.1458333; c: 1/13 + 0.75/11 = 0.1451049; a: 1/11.
        assert_rows(
            &fuse(&legs, &DEFAULTS),
            &[
                ("b", 0.145_833_33, Some(2), Some(2), vec![]),
                ("c", 0.145_104_9, Some(3), Some(1), vec![]),
                ("a", 0.090_909_09, Some(1), None, vec![]),
            ],
        );
    }

    #[test]
    fn equal_scores_are_ordered_by_key() {
        let equal = FusionParams {
            sparse_weight: 1.0,
            ..DEFAULTS
        };
        // Mirror images: both 1/11 + 1/12, and both 1/11 alone, bit for bit.
        let legs = Legs {
            dense: &["b", "a"],
            sparse: &["a", "b"],
            identifiers: &[],
        };
        let fused = fuse(&legs, &equal);
        assert_eq!(
            fused[0].fused_score.to_bits(),
            fused[1].fused_score.to_bits()
        );
        assert_rows(
            &fused,
            &[
                ("a", 0.174_242_42, Some(2), Some(1), vec![]),
                ("b", 0.174_242_42, Some(1), Some(2), vec![]),
            ],
        );
        let legs = Legs {
            dense: &["z"],
            sparse: &["m"],
            identifiers: &[],
        };
        assert_rows(
            &fuse(&legs, &equal),
            &[
                ("m", 0.090_909_09, None, Some(1), vec![]),
                ("z", 0.090_909_09, Some(1), None, vec![]),
            ],
        );
    }

    #[test]
    fn identifier_bonus_is_shared_among_the_items_containing_it() {
        let identifiers = [ident("ZX-4471", &["c"]), ident("UK", &["b", "c"])];
        let legs = Legs {
            dense: &["a", "b", "c"],
            sparse: &[],
            identifiers: &identifiers,
        };
        // c: 1/13 + 0.5 * (1 + 1/2) / 11 = 0.0769231 + 0.0681818
        // b: 1/12 + 0.5 * (1/2) / 11    = 0.0833333 + 0.0227273
        // a: 1/11
        assert_rows(
            &fuse(&legs, &DEFAULTS),
            &[
                ("c", 0.145_104_9, Some(3), None, vec!["ZX-4471", "UK"]),
                ("b", 0.106_060_6, Some(2), None, vec!["UK"]),
                ("a", 0.090_909_09, Some(1), None, vec![]),
            ],
        );
    }

    #[test]
    fn an_identifier_hit_alone_brings_its_item_in() {
        let identifiers = [ident("RFC-9110", &["d", "e"])];
        let legs = Legs {
            dense: &["a"],
            sparse: &[],
            identifiers: &identifiers,
        };
        // a: 1/11; d, e: 0.5 * (1/2) / 11 each, tied, by key.
        assert_rows(
            &fuse(&legs, &DEFAULTS),
            &[
                ("a", 0.090_909_09, Some(1), None, vec![]),
                ("d", 0.022_727_27, None, None, vec!["RFC-9110"]),
                ("e", 0.022_727_27, None, None, vec!["RFC-9110"]),
            ],
        );
    }

    #[test]
    fn weight_zero_disables_a_leg_but_keeps_its_ranks() {
        let no_dense = FusionParams {
            dense_weight: 0.0,
            ..DEFAULTS
        };
        let legs = Legs {
            dense: &["a", "b", "only-dense"],
            sparse: &["b", "a"],
            identifiers: &[],
        };
        // b: 0.75/11, a: 0.75/12; the dense ranks explain but do not score.
        assert_rows(
            &fuse(&legs, &no_dense),
            &[
                ("b", 0.068_181_82, Some(2), Some(1), vec![]),
                ("a", 0.062_5, Some(1), Some(2), vec![]),
                ("only-dense", 0.0, Some(3), None, vec![]),
            ],
        );
        let no_sparse = FusionParams {
            sparse_weight: 0.0,
            ..DEFAULTS
        };
        assert_rows(
            &fuse(&legs, &no_sparse),
            &[
                ("a", 0.090_909_09, Some(1), Some(2), vec![]),
                ("b", 0.083_333_33, Some(2), Some(1), vec![]),
                ("only-dense", 0.076_923_08, Some(3), None, vec![]),
            ],
        );
        let no_identifiers = FusionParams {
            identifier_weight: 0.0,
            ..DEFAULTS
        };
        let identifiers = [ident("ZX-4471", &["b"])];
        let legs = Legs {
            dense: &["a", "b"],
            sparse: &[],
            identifiers: &identifiers,
        };
        assert_rows(
            &fuse(&legs, &no_identifiers),
            &[
                ("a", 0.090_909_09, Some(1), None, vec![]),
                ("b", 0.083_333_33, Some(2), None, vec!["ZX-4471"]),
            ],
        );
    }

    #[test]
    fn max_identifiers_zero_means_no_bonus() {
        let query = "what did ZX-4471 ship to the UK";
        assert!(!crate::query::identifiers(query, 8).is_empty());
        let names = crate::query::identifiers(query, 0);
        assert!(names.is_empty());
        // The probes run per identifier: none, so the identifier leg is empty.
        let identifiers: Vec<IdentifierLeg<&str>> =
            names.iter().map(|n| ident(n, &["b"])).collect();
        let legs = Legs {
            dense: &["a", "b"],
            sparse: &["b"],
            identifiers: &identifiers,
        };
        // b: 1/12 + 0.75/11 = 0.1515152; a: 1/11.
        assert_rows(
            &fuse(&legs, &DEFAULTS),
            &[
                ("b", 0.151_515_15, Some(2), Some(1), vec![]),
                ("a", 0.090_909_09, Some(1), None, vec![]),
            ],
        );
    }

    #[test]
    fn a_key_repeated_in_a_leg_counts_once_at_its_first_rank() {
        let identifiers = [ident("UK", &["a", "a", "b"])];
        let legs = Legs {
            dense: &["a", "a", "b", "a"],
            sparse: &[],
            identifiers: &identifiers,
        };
        // a: 1/11 + 0.5 * (1/2) / 11 = 0.1136364; b keeps its position, rank 3:
        // 1/13 + 0.5 * (1/2) / 11 = 0.0996503. "UK" is shared by two items, not three.
        assert_rows(
            &fuse(&legs, &DEFAULTS),
            &[
                ("a", 0.113_636_36, Some(1), None, vec!["UK"]),
                ("b", 0.099_650_35, Some(3), None, vec!["UK"]),
            ],
        );
    }

    /// The reference, written the obvious way: a map of key → sum of `w / (k + rank)`
    /// terms, the identifier shares summed per item, then a sort. Each term is the same
    /// `f32` expression as in [`fuse`], added in the same leg order, so ties are ties in
    /// both.
    #[allow(clippy::type_complexity)]
    fn naive(
        dense: &[u8],
        sparse: &[u8],
        identifiers: &[IdentifierLeg<u8>],
        p: &FusionParams,
    ) -> Vec<(u8, f32, Option<u32>, Option<u32>, Vec<String>)> {
        fn first_occurrences(keys: &[u8]) -> Vec<u8> {
            let mut seen = HashSet::new();
            keys.iter()
                .copied()
                .filter(|key| seen.insert(*key))
                .collect()
        }
        let mut score: HashMap<u8, f32> = HashMap::new();
        let mut dense_rank: HashMap<u8, u32> = HashMap::new();
        let mut sparse_rank: HashMap<u8, u32> = HashMap::new();
        let mut hits: HashMap<u8, Vec<String>> = HashMap::new();
        let mut shares: HashMap<u8, Vec<f32>> = HashMap::new();
        // `i` is the 0-based position in the leg as given (a repeated key is skipped but
        // still occupies its position): rank = i + 1, so `k + i + 1.0` is `k + rank`.
        let mut seen = HashSet::new();
        for (i, key) in dense.iter().copied().enumerate() {
            if seen.insert(key) {
                *score.entry(key).or_insert(0.0) += p.dense_weight / (p.k + i as f32 + 1.0);
                dense_rank.insert(key, i as u32 + 1);
            }
        }
        let mut seen = HashSet::new();
        for (i, key) in sparse.iter().copied().enumerate() {
            if seen.insert(key) {
                *score.entry(key).or_insert(0.0) += p.sparse_weight / (p.k + i as f32 + 1.0);
                sparse_rank.insert(key, i as u32 + 1);
            }
        }
        for leg in identifiers {
            // Shared among the distinct items that contain it.
            let items = first_occurrences(&leg.items);
            for key in &items {
                hits.entry(*key).or_default().push(leg.identifier.clone());
                shares
                    .entry(*key)
                    .or_default()
                    .push(1.0 / items.len() as f32);
            }
        }
        for (key, shares) in &shares {
            let bonus: f32 = shares.iter().sum();
            *score.entry(*key).or_insert(0.0) += p.identifier_weight * bonus / (p.k + 1.0);
        }
        let mut out: Vec<_> = score
            .into_iter()
            .map(|(key, s)| {
                (
                    key,
                    s,
                    dense_rank.get(&key).copied(),
                    sparse_rank.get(&key).copied(),
                    hits.remove(&key).unwrap_or_default(),
                )
            })
            .collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        out
    }

    fn weight() -> impl Strategy<Value = f32> {
        // Exact, repeated values make ties common; arbitrary ones cover the rest.
        prop_oneof![Just(0.0f32), Just(0.5), Just(0.75), Just(1.0), 0.0f32..2.0]
    }

    fn params() -> impl Strategy<Value = FusionParams> {
        (
            prop_oneof![
                Just(0.0f32),
                Just(1.0),
                Just(10.0),
                Just(60.0),
                0.0f32..100.0
            ],
            weight(),
            weight(),
            weight(),
        )
            .prop_map(
                |(k, dense_weight, sparse_weight, identifier_weight)| FusionParams {
                    k,
                    dense_weight,
                    sparse_weight,
                    identifier_weight,
                },
            )
    }

    /// Keys from a small alphabet so that the legs overlap; duplicates within a leg occur.
    fn leg() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(0u8..20, 0..16)
    }

    fn identifier_legs() -> impl Strategy<Value = Vec<IdentifierLeg<u8>>> {
        prop::collection::vec(prop::collection::vec(0u8..20, 0..6), 0..4).prop_map(|legs| {
            legs.into_iter()
                .enumerate()
                .map(|(i, items)| IdentifierLeg {
                    identifier: format!("ID-{i}"),
                    items,
                })
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        #[test]
        fn fuse_matches_the_naive_reference(
            dense in leg(),
            sparse in leg(),
            identifiers in identifier_legs(),
            p in params(),
        ) {
            let legs = Legs { dense: &dense, sparse: &sparse, identifiers: &identifiers };
            let got = fuse(&legs, &p);
            let want = naive(&dense, &sparse, &identifiers, &p);
            prop_assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                // Same order, ties included: the same key at every position.
                prop_assert_eq!(g.key, w.0, "order differs: {:?} vs {:?}", got, want);
                prop_assert!((g.fused_score - w.1).abs() <= 1e-6, "{:?} vs {:?}", g, w);
                prop_assert_eq!(g.dense_rank, w.2);
                prop_assert_eq!(g.sparse_rank, w.3);
                prop_assert_eq!(&g.identifier_hits, &w.4);
            }
        }
    }
}
