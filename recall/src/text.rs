//! Small text utilities shared by identifier extraction, coverage and conflict detection:
//! word tokens, stopwords, a light suffix stemmer, sentence splitting.

/// English function words and question words: never aspects of a query, never part of a
/// conflict's subject.
const STOPWORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "also",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "doing",
    "down",
    "during",
    "each",
    "either",
    "ever",
    "few",
    "for",
    "from",
    "further",
    "get",
    "got",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "know",
    "let",
    "like",
    "may",
    "me",
    "might",
    "more",
    "most",
    "much",
    "must",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "please",
    "same",
    "she",
    "should",
    "so",
    "some",
    "such",
    "tell",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "us",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "whose",
    "why",
    "will",
    "with",
    "would",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
    "ago",
    "many",
    "often",
    "did",
    "does",
    "anything",
    "something",
    "thing",
    "things",
    "one",
    "ones",
    "recently",
    "currently",
    "kind",
    "sort",
];

pub fn is_stopword(word: &str) -> bool {
    // Called for every word of every candidate passage: a set, not a scan of the list.
    static SET: std::sync::LazyLock<std::collections::HashSet<&'static str>> =
        std::sync::LazyLock::new(|| STOPWORDS.iter().copied().collect());
    SET.contains(word)
}

/// Lowercase word tokens (letters, digits, inner apostrophes and hyphens), with possessive
/// `'s` removed ("alex's" → "alex").
pub fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let flush = |cur: &mut String, out: &mut Vec<String>| {
        let w = cur.trim_matches(|c| c == '\'' || c == '-' || c == '’');
        if !w.is_empty() {
            let w = w
                .strip_suffix("'s")
                .or_else(|| w.strip_suffix("’s"))
                .unwrap_or(w);
            out.push(w.to_lowercase());
        }
        cur.clear();
    };
    for c in text.chars() {
        if c.is_alphanumeric() || ((c == '\'' || c == '’' || c == '-') && !cur.is_empty()) {
            cur.push(c);
        } else {
            flush(&mut cur, &mut out);
        }
    }
    flush(&mut cur, &mut out);
    out
}

/// A light English stemmer: enough to match "appointments" with "appointment", "filed" with
/// "file" and "painting" with "paint", conservative enough not to merge unrelated words.
/// Query and memory words go through the same function, so only consistency matters.
pub fn stem(word: &str) -> String {
    let w = word.to_lowercase();
    let mut base = w.clone();
    for suffix in ["ingly", "edly", "ing", "ies", "ied", "es", "ed", "ly", "s"] {
        if suffix == "s" && w.ends_with("ss") {
            continue;
        }
        if let Some(b) = w.strip_suffix(suffix) {
            if b.chars().count() >= 3 {
                base = match suffix {
                    "ies" | "ied" => format!("{b}y"),
                    _ => b.to_string(),
                };
                break;
            }
        }
    }
    // "stopped" → "stopp" → "stop"
    let chars: Vec<char> = base.chars().collect();
    if chars.len() >= 4 {
        let (a, b) = (chars[chars.len() - 2], chars[chars.len() - 1]);
        if a == b && !"aeioulsz".contains(b) {
            base.pop();
        }
    }
    // "file" / "filed" / "filing" all end as "fil".
    if base.chars().count() >= 4 && base.ends_with('e') {
        base.pop();
    }
    base
}

/// Content words of a text, stemmed: no stopwords, at least 2 characters.
pub fn content_stems(text: &str) -> Vec<String> {
    words(text)
        .into_iter()
        .filter(|w| w.chars().count() >= 2 && !is_stopword(w))
        .map(|w| stem(&w))
        .collect()
}

/// Splits text into sentences at `.`, `!`, `?` followed by whitespace, and at line breaks.
/// Returns byte ranges into `text`, trimmed, non-empty.
pub fn sentences(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let end_here = if b == b'\n' {
            Some(i)
        } else if matches!(b, b'.' | b'!' | b'?')
            && bytes.get(i + 1).is_none_or(|n| n.is_ascii_whitespace())
        {
            Some(i + 1)
        } else {
            None
        };
        if let Some(end) = end_here {
            push_trimmed(text, start, end, &mut out);
            start = end;
        }
        i += 1;
    }
    push_trimmed(text, start, text.len(), &mut out);
    out
}

fn push_trimmed(text: &str, start: usize, end: usize, out: &mut Vec<(usize, usize)>) {
    let s = &text[start..end];
    let lead = s.len() - s.trim_start().len();
    let trail = s.len() - s.trim_end().len();
    if s.trim().is_empty() {
        return;
    }
    out.push((start + lead, end - trail));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_and_stems() {
        assert_eq!(
            words("Alex's dentist-appointment, on 3pm!"),
            vec!["alex", "dentist-appointment", "on", "3pm"]
        );
        assert_eq!(stem("appointments"), "appointment");
        assert_eq!(stem("painting"), "paint");
        assert_eq!(stem("studies"), "study");
        assert_eq!(stem("is"), "is");
        assert_eq!(stem("filed"), stem("file"));
        assert_eq!(stem("filing"), stem("files"));
        assert_eq!(stem("stopped"), "stop");
        assert_eq!(stem("class"), "class");
        assert_eq!(
            content_stems("What is Alex's favourite colour?"),
            vec!["alex", "favourit", "colour"]
        );
    }

    #[test]
    fn sentence_split() {
        let t = "First one. Second one!\nThird v1.2 stays? Last";
        let s: Vec<&str> = sentences(t).iter().map(|(a, b)| &t[*a..*b]).collect();
        assert_eq!(
            s,
            vec!["First one.", "Second one!", "Third v1.2 stays?", "Last"]
        );
    }
}
