//! Fusion of the retrieval legs: a pure function, no store, no embedder, no I/O.
//!
//! [`Recaller::retrieve`](crate::Recaller::retrieve) runs the legs (dense, sparse, one lexical
//! probe per query identifier) and hands their results here as data, scores included;
//! [`fuse`] returns every item once, with its fused score and the ranks, leg scores and
//! identifier hits that explain it.
//!
//! # Length-aware convex combination of normalized scores
//!
//! Each leg's scores are min–max normalized over what the leg returned for this query (its
//! best item 1, its last 0; an item a leg did not return gets 0 from it), then combined
//! per item as `α·dense + (1 − α)·sparse`. Unlike reciprocal rank fusion this keeps how
//! *far* apart items are in each leg: a BM25 hit that stands far above the rest (an exact
//! phrase in a chat message) is not flattened to "rank 1".
//!
//! `α`, the dense leg's share, depends on the item's length in words: a short text's
//! embedding is a weak signal (a chat line "Got any fav tunes?" sits close to every music
//! question) while exact terms in it are strong evidence; a long passage's embedding
//! carries its meaning and BM25 on it is diluted. `α` is [`FusionParams::dense_short`] up
//! to [`FusionParams::short_words`] words, [`FusionParams::dense_long`] from
//! [`FusionParams::long_words`] words, and log-linear between. No corpus flag: a scope
//! that mixes chat messages and documents gets the right weight per item.
//!
//! The values were chosen on training data only (SciFact train, LoCoMo conversations 1–5,
//! both dumped with `cairn eval … --dump-legs`): a single `α` cannot serve both (LoCoMo
//! wants ≈ 0.3, where SciFact loses 0.03 nDCG@10; SciFact wants ≈ 0.6, where LoCoMo's
//! adversarial questions lose 0.08). See `eval/results/README.md` for the figures.
//!
//! # The identifier bonus
//!
//! An identifier the query names (an id, a quoted string, an acronym, a name...) found
//! verbatim in an item adds `identifier_weight` on the same 0..1 scale, *shared* among the
//! items that contain it (each of `n` items gets `1 / n` of it). A rare identifier
//! ("ZX-4471", in one item) lifts that item; a common one (a person's name in every
//! message of a conversation) barely reorders anything, so a shared capitalised word
//! cannot outrank meaning.
//!
//! # Order
//!
//! Fused score descending; ties (bit-for-bit equal scores) by key ascending, so rankings
//! are deterministic.

use std::collections::HashMap;
use std::hash::Hash;

/// Fusion settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FusionParams {
    /// Dense share `α` for items of at most `short_words` words.
    pub dense_short: f32,
    /// Dense share `α` for items of at least `long_words` words.
    pub dense_long: f32,
    pub short_words: f32,
    pub long_words: f32,
    /// Bonus of one identifier found in exactly one item, on the 0..1 scale of the legs.
    pub identifier_weight: f32,
}

impl From<&crate::RecallConfig> for FusionParams {
    fn from(c: &crate::RecallConfig) -> Self {
        FusionParams {
            dense_short: c.dense_short,
            dense_long: c.dense_long,
            short_words: c.short_words,
            long_words: c.long_words,
            identifier_weight: c.identifier_weight,
        }
    }
}

impl FusionParams {
    /// The dense leg's share for an item of `words` words (see the module docs).
    pub fn dense_share(&self, words: usize) -> f32 {
        by_length(
            words,
            (self.short_words, self.long_words),
            (self.dense_short, self.dense_long),
        )
        .clamp(0.0, 1.0)
    }
}

/// A value that follows a text's length in words: `short` up to `short_words`, `long` from
/// `long_words`, log-linear between (the geometric middle of the two lengths gets the
/// arithmetic middle of the two values). Shared by the fusion's dense share and the
/// answerability's `full` threshold ([`crate::answer::full_at`]), which both tell a chat
/// line from an abstract by its length.
pub(crate) fn by_length(
    words: usize,
    (short_words, long_words): (f32, f32),
    (short, long): (f32, f32),
) -> f32 {
    let lo = short_words.max(1.0);
    let hi = long_words.max(lo);
    let w = (words.max(1) as f32).clamp(lo, hi);
    let t = if hi > lo {
        (w.ln() - lo.ln()) / (hi.ln() - lo.ln())
    } else {
        1.0
    };
    short + (long - short) * t
}

/// The items one identifier was found in (verbatim), in probe order.
#[derive(Debug, Clone, PartialEq)]
pub struct IdentifierLeg<K> {
    pub identifier: String,
    pub items: Vec<K>,
}

/// The legs to fuse, as data: each leg's items best first, with the leg's score.
///
/// A key repeated within one leg (or within one identifier's items) counts once, at its
/// first position. The stores never return an id twice in one search, so this only
/// defines the function on every input. Identifiers are expected distinct
/// ([`crate::query::identifiers`] makes them so); each entry is shared among its own items.
#[derive(Debug, Clone, Copy)]
pub struct Legs<'a, K> {
    /// Dense (embedding) leg, best first, with cosine similarities.
    pub dense: &'a [(K, f32)],
    /// Sparse (BM25) leg, best first, with BM25 scores.
    pub sparse: &'a [(K, f32)],
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
    /// The item's normalized sparse score (0..1), if the sparse leg returned it.
    pub sparse_norm: Option<f32>,
    /// Identifiers the item contains, in the order of [`Legs::identifiers`].
    pub identifier_hits: Vec<String>,
}

fn rank_of(position: usize) -> u32 {
    u32::try_from(position + 1).unwrap_or(u32::MAX)
}

/// Min–max normalization of one leg's first occurrences: `(key, position, normalized)`.
/// Non-finite scores count as the leg's lowest.
fn normalized<K: Clone + Eq + Hash>(leg: &[(K, f32)]) -> Vec<(K, usize, f32)> {
    let mut seen: HashMap<&K, ()> = HashMap::new();
    let firsts: Vec<(usize, &K, f32)> = leg
        .iter()
        .enumerate()
        .filter(|(_, (k, _))| seen.insert(k, ()).is_none())
        .map(|(i, (k, s))| (i, k, *s))
        .collect();
    let finite = firsts.iter().map(|f| f.2).filter(|s| s.is_finite());
    let (lo, hi) = finite.fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), s| {
        (lo.min(s), hi.max(s))
    });
    firsts
        .into_iter()
        .map(|(i, k, s)| {
            let n = if !s.is_finite() || !lo.is_finite() {
                0.0
            } else if hi > lo {
                (s - lo) / (hi - lo)
            } else {
                1.0
            };
            (k.clone(), i, n)
        })
        .collect()
}

/// Fuses the legs: every item of any leg once, best first (see the module docs for the
/// formula and the order). `words` gives an item's length in words.
pub fn fuse<K>(
    legs: &Legs<'_, K>,
    params: &FusionParams,
    words: impl Fn(&K) -> usize,
) -> Vec<Fused<K>>
where
    K: Clone + Eq + Hash + Ord,
{
    struct Acc {
        dense: f32,
        sparse: f32,
        bonus: f32,
    }
    let mut items: Vec<(Fused<K>, Acc)> = Vec::new();
    let mut index: HashMap<K, usize> = HashMap::new();
    let mut slot = |key: &K, items: &mut Vec<(Fused<K>, Acc)>| -> usize {
        *index.entry(key.clone()).or_insert_with(|| {
            items.push((
                Fused {
                    key: key.clone(),
                    fused_score: 0.0,
                    dense_rank: None,
                    sparse_rank: None,
                    sparse_norm: None,
                    identifier_hits: Vec::new(),
                },
                Acc {
                    dense: 0.0,
                    sparse: 0.0,
                    bonus: 0.0,
                },
            ));
            items.len() - 1
        })
    };

    for (key, position, n) in normalized(legs.dense) {
        let i = slot(&key, &mut items);
        items[i].0.dense_rank = Some(rank_of(position));
        items[i].1.dense = n;
    }
    for (key, position, n) in normalized(legs.sparse) {
        let i = slot(&key, &mut items);
        items[i].0.sparse_rank = Some(rank_of(position));
        items[i].0.sparse_norm = Some(n);
        items[i].1.sparse = n;
    }
    for leg in legs.identifiers {
        let mut members: Vec<usize> = Vec::new();
        for key in &leg.items {
            let i = slot(key, &mut items);
            if !members.contains(&i) {
                members.push(i);
            }
        }
        let share = 1.0 / members.len() as f32;
        for i in members {
            items[i].1.bonus += share;
            items[i].0.identifier_hits.push(leg.identifier.clone());
        }
    }
    let mut out: Vec<Fused<K>> = items
        .into_iter()
        .map(|(mut f, acc)| {
            let alpha = params.dense_share(words(&f.key));
            f.fused_score = alpha * acc.dense
                + (1.0 - alpha) * acc.sparse
                + params.identifier_weight * acc.bonus;
            f
        })
        .collect();
    out.sort_by(|a, b| {
        b.fused_score
            .total_cmp(&a.fused_score)
            .then_with(|| a.key.cmp(&b.key))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    const DEFAULTS: FusionParams = FusionParams {
        dense_short: 0.3,
        dense_long: 0.6,
        short_words: 32.0,
        long_words: 256.0,
        identifier_weight: 0.1,
    };

    fn ident<K: Clone>(name: &str, items: &[K]) -> IdentifierLeg<K> {
        IdentifierLeg {
            identifier: name.to_string(),
            items: items.to_vec(),
        }
    }

    fn keys<K: Clone>(fused: &[Fused<K>]) -> Vec<K> {
        fused.iter().map(|f| f.key.clone()).collect()
    }

    fn short(_: &&str) -> usize {
        10
    }

    fn long(_: &&str) -> usize {
        300
    }

    #[test]
    fn dense_share_follows_the_length() {
        let p = DEFAULTS;
        assert!((p.dense_share(1) - 0.3).abs() < 1e-6);
        assert!((p.dense_share(32) - 0.3).abs() < 1e-6);
        assert!((p.dense_share(256) - 0.6).abs() < 1e-6);
        assert!((p.dense_share(10_000) - 0.6).abs() < 1e-6);
        // Log-linear: the geometric middle (≈ 90.5 words) gets the arithmetic middle.
        assert!((p.dense_share(91) - 0.45).abs() < 0.002);
        let mut last = 0.0;
        for w in 0..400 {
            let a = p.dense_share(w);
            assert!(a >= last);
            last = a;
        }
    }

    #[test]
    fn empty_legs_fuse_to_nothing() {
        let legs: Legs<'_, &str> = Legs {
            dense: &[],
            sparse: &[],
            identifiers: &[],
        };
        assert!(fuse(&legs, &DEFAULTS, short).is_empty());
    }

    #[test]
    fn one_leg_only_keeps_its_order_and_scales_to_its_share() {
        let dense = [("c", 0.9), ("a", 0.8), ("b", 0.7)];
        let legs = Legs {
            dense: &dense,
            sparse: &[],
            identifiers: &[],
        };
        let got = fuse(&legs, &DEFAULTS, long);
        assert_eq!(keys(&got), vec!["c", "a", "b"]);
        assert!((got[0].fused_score - 0.6).abs() < 1e-6);
        assert!((got[1].fused_score - 0.3).abs() < 1e-6);
        assert_eq!(got[2].fused_score, 0.0);
        assert_eq!(
            got.iter().map(|f| f.dense_rank).collect::<Vec<_>>(),
            vec![Some(1), Some(2), Some(3)]
        );
        assert!(got.iter().all(|f| f.sparse_rank.is_none()));
    }

    #[test]
    fn short_items_lean_on_the_sparse_leg_and_long_ones_on_the_dense_leg() {
        // "x" is the dense leg's best, "y" the sparse leg's best.
        let dense = [("x", 0.80), ("y", 0.70), ("z", 0.60)];
        let sparse = [("y", 20.0), ("x", 10.0), ("z", 0.0)];
        let legs = Legs {
            dense: &dense,
            sparse: &sparse,
            identifiers: &[],
        };
        assert_eq!(keys(&fuse(&legs, &DEFAULTS, short))[0], "y");
        assert_eq!(keys(&fuse(&legs, &DEFAULTS, long))[0], "x");
    }

    #[test]
    fn a_sparse_hit_far_above_the_rest_is_not_flattened_to_a_rank() {
        // BM25 27 vs 11: the exact-phrase message wins although dense ranks it third.
        let dense = [("q1", 0.69), ("q2", 0.67), ("hit", 0.64), ("z", 0.55)];
        let sparse = [("hit", 27.0), ("o1", 11.4), ("o2", 11.4), ("z", 5.0)];
        let legs = Legs {
            dense: &dense,
            sparse: &sparse,
            identifiers: &[],
        };
        assert_eq!(keys(&fuse(&legs, &DEFAULTS, short))[0], "hit");
    }

    #[test]
    fn equal_scores_are_ordered_by_key() {
        let dense = [("b", 0.5), ("a", 0.5)];
        let legs = Legs {
            dense: &dense,
            sparse: &[],
            identifiers: &[],
        };
        let got = fuse(&legs, &DEFAULTS, short);
        assert_eq!(keys(&got), vec!["a", "b"]);
        assert_eq!(got[0].fused_score, got[1].fused_score);
    }

    #[test]
    fn identifier_bonus_is_shared_among_the_items_containing_it() {
        let dense = [("a", 0.9), ("b", 0.9), ("c", 0.9)];
        let ids = [ident("ZX-4471", &["c"]), ident("Alex", &["a", "b", "c"])];
        let legs = Legs {
            dense: &dense,
            sparse: &[],
            identifiers: &ids,
        };
        let got = fuse(&legs, &DEFAULTS, short);
        assert_eq!(keys(&got), vec!["c", "a", "b"]);
        let want_c = 0.3 + 0.1 * (1.0 + 1.0 / 3.0);
        assert!((got[0].fused_score - want_c).abs() < 1e-6);
        assert_eq!(got[0].identifier_hits, vec!["ZX-4471", "Alex"]);
        assert!((got[1].fused_score - (0.3 + 0.1 / 3.0)).abs() < 1e-6);
    }

    #[test]
    fn a_shared_name_does_not_outrank_meaning() {
        // Every item names "Caroline"; the one that answers leads both legs.
        let dense = [("answer", 0.80), ("m1", 0.70), ("m2", 0.69)];
        let sparse = [("answer", 15.0), ("m1", 9.0), ("m2", 8.0)];
        let ids = [ident("Caroline", &["m1", "m2", "answer"])];
        let legs = Legs {
            dense: &dense,
            sparse: &sparse,
            identifiers: &ids,
        };
        assert_eq!(keys(&fuse(&legs, &DEFAULTS, short))[0], "answer");
    }

    #[test]
    fn an_identifier_hit_alone_brings_its_item_in() {
        let dense = [("a", 0.9)];
        let ids = [ident("INV-7", &["z"])];
        let legs = Legs {
            dense: &dense,
            sparse: &[],
            identifiers: &ids,
        };
        let got = fuse(&legs, &DEFAULTS, short);
        assert_eq!(keys(&got), vec!["a", "z"]);
        assert_eq!(got[1].dense_rank, None);
        assert_eq!(got[1].identifier_hits, vec!["INV-7"]);
        assert!((got[1].fused_score - 0.1).abs() < 1e-6);
    }

    #[test]
    fn a_key_repeated_in_a_leg_counts_once_at_its_first_rank() {
        let dense = [("a", 0.9), ("b", 0.8), ("a", 0.1), ("c", 0.5)];
        let legs = Legs {
            dense: &dense,
            sparse: &[],
            identifiers: &[],
        };
        let got = fuse(&legs, &DEFAULTS, short);
        assert_eq!(keys(&got), vec!["a", "b", "c"]);
        assert_eq!(got[2].dense_rank, Some(4));
    }

    #[test]
    fn non_finite_scores_count_as_the_lowest() {
        let dense = [("a", f32::NAN), ("b", 0.8), ("c", 0.5)];
        let legs = Legs {
            dense: &dense,
            sparse: &[],
            identifiers: &[],
        };
        let got = fuse(&legs, &DEFAULTS, short);
        assert_eq!(keys(&got), vec!["b", "a", "c"]);
        assert!(got.iter().all(|f| f.fused_score.is_finite()));
    }

    /// The reference, written the obvious way: per leg a map key → normalized score of the
    /// first occurrence, the shares per item, then `α·d + (1−α)·s + w·bonus` and a sort.
    #[allow(clippy::type_complexity)]
    fn naive(
        dense: &[(u8, f32)],
        sparse: &[(u8, f32)],
        identifiers: &[IdentifierLeg<u8>],
        p: &FusionParams,
        words: &dyn Fn(&u8) -> usize,
    ) -> Vec<(u8, f32, Option<u32>, Option<u32>, Vec<String>)> {
        fn leg(entries: &[(u8, f32)]) -> HashMap<u8, (u32, f32)> {
            let mut firsts: Vec<(u8, u32, f32)> = Vec::new();
            for (i, (k, s)) in entries.iter().enumerate() {
                if !firsts.iter().any(|f| f.0 == *k) {
                    firsts.push((*k, i as u32 + 1, *s));
                }
            }
            let lo = firsts.iter().map(|f| f.2).fold(f32::INFINITY, f32::min);
            let hi = firsts.iter().map(|f| f.2).fold(f32::NEG_INFINITY, f32::max);
            firsts
                .into_iter()
                .map(|(k, r, s)| {
                    let n = if hi > lo { (s - lo) / (hi - lo) } else { 1.0 };
                    (k, (r, n))
                })
                .collect()
        }
        let d = leg(dense);
        let s = leg(sparse);
        let mut hits: HashMap<u8, Vec<String>> = HashMap::new();
        let mut bonus: HashMap<u8, f32> = HashMap::new();
        for l in identifiers {
            let mut members: Vec<u8> = Vec::new();
            for k in &l.items {
                if !members.contains(k) {
                    members.push(*k);
                }
            }
            for k in &members {
                hits.entry(*k).or_default().push(l.identifier.clone());
                *bonus.entry(*k).or_insert(0.0) += 1.0 / members.len() as f32;
            }
        }
        let all: HashSet<u8> = d
            .keys()
            .chain(s.keys())
            .chain(bonus.keys())
            .copied()
            .collect();
        let mut out: Vec<_> = all
            .into_iter()
            .map(|k| {
                let a = p.dense_share(words(&k));
                let score = a * d.get(&k).map_or(0.0, |x| x.1)
                    + (1.0 - a) * s.get(&k).map_or(0.0, |x| x.1)
                    + p.identifier_weight * bonus.get(&k).copied().unwrap_or(0.0);
                (
                    k,
                    score,
                    d.get(&k).map(|x| x.0),
                    s.get(&k).map(|x| x.0),
                    hits.remove(&k).unwrap_or_default(),
                )
            })
            .collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        out
    }

    fn params() -> impl Strategy<Value = FusionParams> {
        (
            0.0f32..1.0,
            0.0f32..1.0,
            1.0f32..64.0,
            64.0f32..512.0,
            prop_oneof![Just(0.0f32), 0.0f32..0.5],
        )
            .prop_map(
                |(dense_short, dense_long, short_words, long_words, identifier_weight)| {
                    FusionParams {
                        dense_short,
                        dense_long,
                        short_words,
                        long_words,
                        identifier_weight,
                    }
                },
            )
    }

    /// Keys from a small alphabet so that the legs overlap; duplicates within a leg occur;
    /// scores from a few values so that ties are common.
    fn leg() -> impl Strategy<Value = Vec<(u8, f32)>> {
        prop::collection::vec(
            (0u8..20, prop_oneof![Just(0.5f32), Just(1.0), 0.0f32..30.0]),
            0..16,
        )
        .prop_map(|mut v| {
            // Best first, as the stores return them.
            v.sort_by(|a, b| b.1.total_cmp(&a.1));
            v
        })
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
            let words = |k: &u8| (*k as usize) * 25;
            let legs = Legs { dense: &dense, sparse: &sparse, identifiers: &identifiers };
            let got = fuse(&legs, &p, words);
            let want = naive(&dense, &sparse, &identifiers, &p, &words);
            prop_assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                // Same expressions in the same order: the same order, ties included.
                prop_assert_eq!(g.key, w.0, "order differs: {:?} vs {:?}", got, want);
                prop_assert!((g.fused_score - w.1).abs() <= 1e-6, "{:?} vs {:?}", g, w);
            }
            // The same set of keys, each once; the order is by score, then key.
            let got_keys: HashSet<u8> = got.iter().map(|f| f.key).collect();
            let want_keys: HashSet<u8> = want.iter().map(|w| w.0).collect();
            prop_assert_eq!(got_keys.len(), got.len());
            prop_assert_eq!(got_keys, want_keys);
            for pair in got.windows(2) {
                prop_assert!(
                    pair[0].fused_score > pair[1].fused_score
                        || (pair[0].fused_score == pair[1].fused_score && pair[0].key < pair[1].key),
                    "{:?}", pair
                );
            }
            for g in &got {
                let w = want.iter().find(|w| w.0 == g.key).unwrap();
                prop_assert_eq!(g.dense_rank, w.2);
                prop_assert_eq!(g.sparse_rank, w.3);
                prop_assert_eq!(&g.identifier_hits, &w.4);
                // Scores stay on the 0..1 scale plus the identifier bonus.
                prop_assert!(g.fused_score >= 0.0);
                prop_assert!(g.fused_score <= 1.0 + p.identifier_weight * identifiers.len() as f32 + 1e-5);
            }
        }
    }
}
