//! What a query names and asks about: identifiers (for exact-match retrieval) and aspects
//! (for coverage).

use std::sync::OnceLock;

use regex::Regex;

use crate::text::{content_stems, is_stopword, stem};

fn re(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    cell.get_or_init(|| Regex::new(pattern).expect("static regex"))
}

/// Concrete identifiers named by the query, in order of appearance, at most `max`:
/// quoted strings, ids (letters mixed with digits or `_-./`, acronyms), capitalized phrases
/// (names), numbers with units.
pub fn identifiers(query: &str, max: usize) -> Vec<String> {
    static QUOTED: OnceLock<Regex> = OnceLock::new();
    static ID: OnceLock<Regex> = OnceLock::new();
    static UNIT: OnceLock<Regex> = OnceLock::new();
    static CAPS: OnceLock<Regex> = OnceLock::new();

    let mut found: Vec<(usize, String)> = Vec::new();
    let mut taken: Vec<(usize, usize)> = Vec::new();
    let mut add = |start: usize, end: usize, s: &str, found: &mut Vec<(usize, String)>| {
        if taken.iter().any(|&(a, b)| start < b && a < end) {
            return;
        }
        let s = s.trim();
        if s.chars().count() < 2 {
            return;
        }
        taken.push((start, end));
        found.push((start, s.to_string()));
    };

    for m in re(
        &QUOTED,
        r#""([^"]{2,64})"|“([^”]{2,64})”|`([^`]{2,64})`|'([^']{2,64})'"#,
    )
    .captures_iter(query)
    {
        let whole = m.get(0).map_or((0, 0), |g| (g.start(), g.end()));
        if let Some(g) = (1..=4).find_map(|i| m.get(i)) {
            add(whole.0, whole.1, g.as_str(), &mut found);
        }
    }
    for m in re(
        &UNIT,
        r"(?i)\b\d+(?:[.,]\d+)?\s?(?:%|kg|g|km|m|cm|mm|mi|ms|s|sec|min|h|hrs?|hours?|days?|weeks?|months?|years?|gb|mb|kb|tb|usd|eur|gbp|dollars?|euros?)\b|[$€£]\s?\d+(?:[.,]\d+)?",
    )
    .find_iter(query)
    {
        add(m.start(), m.end(), m.as_str(), &mut found);
    }
    for m in re(
        &ID,
        r"\b(?:[A-Za-z]+[-_./]?\d[\w./-]*|\d+[A-Za-z][\w./-]*|[A-Za-z]+(?:[_./-][A-Za-z0-9]+)+|[A-Z]{2,}[A-Z0-9]*)\b",
    )
    .find_iter(query)
    {
        let s = m.as_str();
        // Plain words joined by hyphens ("follow-up") are not identifiers.
        let has_marker = s.chars().any(|c| c.is_ascii_digit() || c == '_' || c == '.' || c == '/')
            || s.chars().filter(|c| c.is_ascii_uppercase()).count() >= 2;
        if has_marker {
            add(m.start(), m.end(), s.trim_end_matches('.'), &mut found);
        }
    }
    for m in re(
        &CAPS,
        r"\b[A-Z][\w'’]*(?:\s+(?:of|de|van|von|the|and)?\s*[A-Z][\w'’]*)*",
    )
    .find_iter(query)
    {
        let phrase = m.as_str();
        let mut words: Vec<&str> = phrase.split_whitespace().collect();
        // Drop a leading question or function word ("What", "Did", "The").
        while let Some(first) = words.first() {
            let w = first.trim_end_matches(['\'', '’', 's']).to_lowercase();
            if is_stopword(&first.to_lowercase()) || is_stopword(&w) {
                words.remove(0);
            } else {
                break;
            }
        }
        if words.is_empty() {
            continue;
        }
        let cleaned = words
            .join(" ")
            .trim_end_matches("'s")
            .trim_end_matches("’s")
            .to_string();
        let start = m.start() + phrase.find(words[0]).unwrap_or(0);
        add(start, m.end(), &cleaned, &mut found);
    }
    found.sort_by_key(|(pos, _)| *pos);
    let mut out: Vec<String> = Vec::new();
    for (_, s) in found {
        if out.len() >= max {
            break;
        }
        if !out.iter().any(|o| o.eq_ignore_ascii_case(&s)) {
            out.push(s);
        }
        if out.len() >= max {
            break;
        }
    }
    out
}

/// Whether `identifier` (from [`identifiers`] of `query`) is specific enough that finding it
/// verbatim is evidence on its own: it carries a digit or one of `_ . / -` inside a word
/// ("INV-2024-001", "order_42", "v2.3"), or the query quotes it. A name or an acronym
/// ("Caroline", "UK") is not: many unrelated texts share one.
pub fn is_specific(identifier: &str, query: &str) -> bool {
    let marked = identifier.split_whitespace().any(|w| {
        w.chars().any(|c| c.is_ascii_digit())
            || w.trim_matches(|c: char| !c.is_alphanumeric())
                .contains(['_', '.', '/', '-'])
    });
    let quoted = ["\"", "“", "`", "'"].iter().any(|q| {
        let close = if *q == "“" { "”" } else { q };
        query.contains(&format!("{q}{identifier}{close}"))
    });
    marked || quoted
}

/// Key aspects of the query: its identifiers and its content words (stemmed, deduplicated).
/// Each must be supported by some cited item for coverage to be `full`.
pub fn aspects(query: &str, identifiers: &[String]) -> Vec<Aspect> {
    let mut out: Vec<Aspect> = identifiers
        .iter()
        .map(|i| Aspect {
            label: i.clone(),
            stems: content_stems(i),
            identifier: true,
        })
        .filter(|a| !a.stems.is_empty())
        .collect();
    for word in crate::text::words(query) {
        if word.chars().count() < 3 || is_stopword(&word) {
            continue;
        }
        let s = stem(&word);
        if out.iter().any(|a| a.stems.contains(&s)) {
            continue;
        }
        out.push(Aspect {
            label: word,
            stems: vec![s],
            identifier: false,
        });
    }
    out
}

/// One thing the query asks about.
#[derive(Debug, Clone, PartialEq)]
pub struct Aspect {
    /// How it is named in unknowns.
    pub label: String,
    /// Stems that must all occur in one item.
    pub stems: Vec<String>,
    pub identifier: bool,
}

impl Aspect {
    /// Whether a text (given as its stem set) supports this aspect.
    pub fn supported_by(&self, item_stems: &std::collections::HashSet<String>) -> bool {
        self.stems.iter().all(|s| {
            item_stems.contains(s)
                || item_stems.contains(&stem(s))
                || item_stems.iter().any(|t| same_root(s, t))
        })
    }
}

/// Whether two stems are one word family the stemmer left apart: one is a prefix of the
/// other ("keep" / "keeper": a root of at least [`MIN_ROOT`] characters plus at most
/// [`MAX_SUFFIX`]), or both extend a common root of at least [`MIN_SHARED_ROOT`] characters
/// by at most [`MAX_SUFFIX`] - 1 each ("embedding" / "embedder").
fn same_root(a: &str, b: &str) -> bool {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    let (ns, nl) = (short.chars().count(), long.chars().count());
    if long.starts_with(short) {
        return ns >= MIN_ROOT && nl - ns <= MAX_SUFFIX;
    }
    let shared = short
        .chars()
        .zip(long.chars())
        .take_while(|(x, y)| x == y)
        .count();
    shared >= MIN_SHARED_ROOT && nl - shared < MAX_SUFFIX && ns - shared < MAX_SUFFIX
}

/// Shortest root [`same_root`] accepts as a prefix: shorter ones join unrelated words.
const MIN_ROOT: usize = 4;
/// Shortest common root of two words that both extend it ("format" / "formal" share five
/// characters and are not one family).
const MIN_SHARED_ROOT: usize = 6;
/// Longest derivational suffix [`same_root`] accepts ("-er", "-ing", "-ment", "-ation").
const MAX_SUFFIX: usize = 5;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_identifiers() {
        let ids = identifiers(
            r#"What did Alex say about "blue harbor" and ticket INV-2024-001 for 25 kg in Project Zephyr?"#,
            8,
        );
        assert_eq!(
            ids,
            vec![
                "Alex",
                "blue harbor",
                "INV-2024-001",
                "25 kg",
                "Project Zephyr"
            ]
        );
        assert_eq!(
            identifiers("When is the appointment?", 8),
            Vec::<String>::new()
        );
        assert_eq!(
            identifiers("What is QX-9 and order_42 and v2.3?", 8),
            vec!["QX-9", "order_42", "v2.3"]
        );
        assert!(identifiers("A B C D E F G H I J K L M N O P Q R", 3).len() <= 3);
        assert!(identifiers("ticket ZX-4471 for Alex", 0).is_empty());
    }

    #[test]
    fn specific_identifiers_are_ids_and_quotes_not_names() {
        let q = r#"Where is INV-2024-001, order_42 and "blue harbor" for Caroline in the UK?"#;
        assert!(is_specific("INV-2024-001", q));
        assert!(is_specific("order_42", q));
        assert!(is_specific("blue harbor", q));
        assert!(!is_specific("Caroline", q));
        assert!(!is_specific("UK", q));
    }

    #[test]
    fn a_word_family_supports_its_members() {
        let q = "Who keeps the Skerryvore lighthouse?";
        let a = aspects(q, &identifiers(q, 8));
        let item: std::collections::HashSet<String> =
            crate::text::content_stems("The keeper of the Skerryvore lighthouse is Morag Dunbar.")
                .into_iter()
                .collect();
        assert!(a.iter().all(|a| a.supported_by(&item)), "{a:?} vs {item:?}");
        // Short roots do not join unrelated words.
        assert!(!same_root("car", "card"));
        assert!(same_root("embed", "embedding"));
        assert!(!same_root("form", "formulation"));
        assert!(same_root("embedding", "embedder"));
        assert!(!same_root("format", "formal"));
    }

    #[test]
    fn aspects_skip_function_words() {
        let ids = identifiers("When is Alex's dentist appointment?", 8);
        let a = aspects("When is Alex's dentist appointment?", &ids);
        let labels: Vec<&str> = a.iter().map(|a| a.label.as_str()).collect();
        assert_eq!(labels, vec!["Alex", "dentist", "appointment"]);
    }
}
