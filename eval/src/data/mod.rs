//! Dataset readers: files in, plain values out. No store, no model, no run logic.
//!
//! - [`beir`]: BEIR folders (`corpus.jsonl`, `queries.jsonl`, `qrels/<split>.tsv`).
//! - [`locomo`]: LoCoMo JSON (samples, sessions, evidence ids) and its messages.
//!
//! The experiment runners ([`crate::beir`], [`crate::locomo`]) depend on these readers and
//! never on each other: what both need (e.g. [`read_probe_texts`], which reads either
//! format) lives here.

pub mod beir;
pub mod locomo;

use std::path::Path;

use crate::Result;

/// Reads probe questions (unanswerable queries from another dataset) from a BEIR
/// `queries.jsonl` (by extension) or a LoCoMo JSON file: the first `limit` of them.
pub fn read_probe_texts(path: &Path, limit: usize) -> Result<Vec<String>> {
    let texts: Vec<String> = if path.extension().is_some_and(|e| e == "jsonl") {
        beir::read_queries(path)?
            .into_iter()
            .map(|q| q.text)
            .collect()
    } else {
        locomo::read_samples(path)?
            .into_iter()
            .flat_map(|s| s.qa.into_iter().map(|q| q.question))
            .collect()
    };
    Ok(texts.into_iter().take(limit).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_from_either_format() {
        let dir = tempfile::tempdir().unwrap();
        let q = dir.path().join("queries.jsonl");
        std::fs::write(
            &q,
            "{\"_id\": \"1\", \"text\": \"first?\"}\n\n{\"_id\": \"2\", \"text\": \"second?\"}\n",
        )
        .unwrap();
        assert_eq!(read_probe_texts(&q, 1).unwrap(), vec!["first?"]);
        let l = dir.path().join("locomo.json");
        std::fs::write(
            &l,
            r#"[{"sample_id": "c", "conversation": {}, "qa": [
                {"question": "a?", "category": 1}, {"question": "b?", "category": 2}]}]"#,
        )
        .unwrap();
        assert_eq!(read_probe_texts(&l, 10).unwrap(), vec!["a?", "b?"]);
    }
}
