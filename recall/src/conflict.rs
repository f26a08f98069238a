//! Conflict detection between memories.
//!
//! Method: every sentence of every selected item becomes a *frame*: its content words (no
//! stopwords, stemmed, possessives folded) minus its *values* and minus negations. Values are
//! weekdays, months, numbers, times, dates and capitalized words that follow a copula or a
//! preposition ("is on Tuesday", "is Sarah"); before it they belong to the subject ("Invoice
//! 42 is paid" and "Invoice 43 is paid" are about different invoices). Two sentences from
//! different items conflict when
//! - their frames share a word and overlap by Jaccard ≥ 0.6, both state values,
//!   and the value sets differ ("Alex's dentist appointment is on Tuesday" / "... moved to
//!   Thursday"); or
//! - their frames and values are equal and exactly one is negated ("Sam is allergic to
//!   peanuts" / "Sam is not allergic to peanuts").
//!
//! Limits: it is lexical. Paraphrases with no shared words, values spelled as words ("the
//! second of May"), implicit contradictions ("moved to Berlin" vs "lives in Paris") and
//! compatible differences (a range and a value inside it) are not recognised. Both sides are
//! always reported; the detector never decides which is right.

use std::collections::BTreeSet;

use crate::text::{is_stopword, sentences, stem, words};

const WEEKDAYS: &[&str] = &[
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];
const MONTHS: &[&str] = &[
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];
const NEGATIONS: &[&str] = &["not", "never", "no", "n't", "cannot", "nobody", "nothing"];
const COPULAS: &[&str] = &[
    "is", "are", "was", "were", "be", "been", "named", "called", "to", "on", "at", "in", "with",
];

/// A sentence reduced to what it says about what.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub sentence: String,
    pub subject: BTreeSet<String>,
    pub values: BTreeSet<String>,
    pub negated: bool,
    /// Hashes of `subject` and `values`, sorted: comparisons run on these (the pack
    /// compares every pair of sentences of every pair of items).
    subject_ids: Vec<u64>,
    value_ids: Vec<u64>,
}

fn ids(words: &BTreeSet<String>) -> Vec<u64> {
    use std::hash::{Hash, Hasher};
    let mut out: Vec<u64> = words
        .iter()
        .map(|w| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            w.hash(&mut h);
            h.finish()
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Size of the intersection of two sorted, deduplicated slices.
fn shared(a: &[u64], b: &[u64]) -> usize {
    let (mut i, mut j, mut n) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                n += 1;
                i += 1;
                j += 1;
            }
        }
    }
    n
}

fn is_value_word(w: &str) -> bool {
    WEEKDAYS.contains(&w) || MONTHS.contains(&w) || w.chars().any(|c| c.is_ascii_digit())
}

/// Frames of every sentence of `text`.
pub fn frames(text: &str) -> Vec<Frame> {
    sentences(text)
        .into_iter()
        .map(|(a, b)| frame(&text[a..b]))
        .filter(|f| !f.subject.is_empty())
        .collect()
}

fn frame(sentence: &str) -> Frame {
    let mut subject = BTreeSet::new();
    let mut values = BTreeSet::new();
    let mut negated = false;
    let mut after_copula = false;
    // Raw tokens keep their case, to spot names after a copula.
    let raw: Vec<&str> = sentence
        .split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '’' || c == ':'))
        .filter(|t| !t.is_empty())
        .collect();
    for (i, token) in raw.iter().enumerate() {
        // A clock time ("9:30") is one value; `words` would split it at the colon.
        let clock = token.trim_matches(':');
        let lower_words = if clock.contains(':')
            && clock
                .split(':')
                .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
        {
            vec![clock.to_string()]
        } else {
            words(token)
        };
        let Some(w) = lower_words.first() else {
            continue;
        };
        if w.ends_with("n't") || NEGATIONS.contains(&w.as_str()) {
            negated = true;
            continue;
        }
        let capitalized = token.chars().next().is_some_and(char::is_uppercase);
        if after_copula && (is_value_word(w) || (capitalized && i > 0)) {
            values.insert(w.clone());
            continue;
        }
        if COPULAS.contains(&w.as_str()) {
            after_copula = true;
        }
        if !is_stopword(w) && w.chars().count() >= 2 {
            subject.insert(stem(w));
        }
    }
    Frame {
        sentence: sentence.trim().to_string(),
        subject_ids: ids(&subject),
        value_ids: ids(&values),
        subject,
        values,
        negated,
    }
}

/// How two frames disagree, if they do.
#[derive(Debug, Clone, PartialEq)]
pub enum Disagreement {
    /// Same subject, different values.
    Values,
    /// Same statement, opposite polarity.
    Polarity,
}

pub fn disagree(a: &Frame, b: &Frame) -> Option<Disagreement> {
    let common = shared(&a.subject_ids, &b.subject_ids);
    if common == 0 {
        return None;
    }
    let union = a.subject_ids.len() + b.subject_ids.len() - common;
    let jaccard = common as f32 / union as f32;
    if jaccard >= 0.6
        && !a.value_ids.is_empty()
        && !b.value_ids.is_empty()
        && a.value_ids != b.value_ids
        && a.negated == b.negated
    {
        return Some(Disagreement::Values);
    }
    if common == a.subject_ids.len()
        && common == b.subject_ids.len()
        && a.value_ids == b.value_ids
        && a.negated != b.negated
    {
        return Some(Disagreement::Polarity);
    }
    None
}

/// A topic label for a disagreement: the first sentence with its values blanked.
pub fn topic(frame: &Frame) -> String {
    let mut out = Vec::new();
    for token in frame.sentence.split_whitespace() {
        let w = words(token);
        if w.first().is_some_and(|w| frame.values.contains(w)) {
            if out.last() != Some(&"_".to_string()) {
                out.push("_".to_string());
            }
        } else {
            out.push(token.to_string());
        }
    }
    out.join(" ").trim_end_matches(['.', '!', '?']).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(s: &str) -> Frame {
        frames(s).remove(0)
    }

    #[test]
    fn differing_days_conflict() {
        let a = one("Alex's dentist appointment is on Tuesday.");
        let b = one("Alex's dentist appointment is on Thursday.");
        assert_eq!(disagree(&a, &b), Some(Disagreement::Values));
        assert_eq!(topic(&a), "Alex's dentist appointment is on _");
        let c = one("The dentist appointment for Alex was moved to Thursday at 3pm");
        assert_eq!(disagree(&a, &c), Some(Disagreement::Values));
    }

    #[test]
    fn names_and_numbers_conflict() {
        assert!(disagree(&one("My manager is Sarah"), &one("My manager is Tom")).is_some());
        assert!(disagree(
            &one("The rent is 1200 euros a month"),
            &one("The rent is 1350 euros a month")
        )
        .is_some());
    }

    #[test]
    fn clock_times_are_whole_values() {
        let a = one("The standup starts at 9:30.");
        let b = one("The standup starts at 9:45.");
        assert_eq!(disagree(&a, &b), Some(Disagreement::Values));
        assert!(a.values.contains("9:30"), "{:?}", a.values);
        assert_eq!(disagree(&a, &one("The standup starts at 9:30")), None);
    }

    #[test]
    fn negation_conflicts() {
        let a = one("Sam is allergic to peanuts");
        let b = one("Sam is not allergic to peanuts");
        assert_eq!(disagree(&a, &b), Some(Disagreement::Polarity));
        let c = one("Sam isn't allergic to peanuts");
        assert_eq!(disagree(&a, &c), Some(Disagreement::Polarity));
    }

    #[test]
    fn unrelated_or_agreeing_statements_do_not_conflict() {
        let a = one("Alex's dentist appointment is on Tuesday.");
        assert_eq!(
            disagree(&a, &one("Alex's dentist appointment is on Tuesday")),
            None
        );
        assert_eq!(disagree(&a, &one("The cafeteria opens on Monday")), None);
        assert_eq!(
            disagree(&one("Sam likes tea"), &one("Sam likes coffee a lot")),
            None
        );
    }
}
