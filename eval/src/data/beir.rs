//! BEIR readers: `corpus.jsonl` (re-exported from `cairn_ingest::beir`, which `cairn
//! ingest` uses too), `queries.jsonl` and `qrels/<split>.tsv`.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;

use serde::Deserialize;

use crate::{EvalError, Result};

pub use cairn_ingest::beir::{read_corpus, BeirDoc};

/// Relevance judgements: query id → document id → graded score.
pub type Qrels = HashMap<String, HashMap<String, f64>>;

/// One BEIR query.
#[derive(Debug, Clone, Deserialize)]
pub struct BeirQuery {
    #[serde(rename = "_id")]
    pub id: String,
    pub text: String,
}

/// Reads `queries.jsonl`.
pub fn read_queries(path: &Path) -> Result<Vec<BeirQuery>> {
    let file = std::fs::File::open(path).map_err(|e| EvalError::io(path, e))?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| EvalError::io(path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        let q: BeirQuery = serde_json::from_str(&line)
            .map_err(|e| EvalError::data(path, format!("line {}: {e}", i + 1)))?;
        out.push(q);
    }
    Ok(out)
}

/// Reads `qrels/<split>.tsv` (header `query-id corpus-id score`): query → doc → score.
pub fn read_qrels(path: &Path) -> Result<Qrels> {
    let text = std::fs::read_to_string(path).map_err(|e| EvalError::io(path, e))?;
    let mut out: Qrels = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let cols: Vec<&str> = line.split('\t').map(str::trim).collect();
        if line.trim().is_empty() || (i == 0 && cols.first() == Some(&"query-id")) {
            continue;
        }
        let [q, d, s] = cols[..] else {
            return Err(EvalError::data(
                path,
                format!("line {}: expected 3 tab-separated columns", i + 1),
            ));
        };
        let score: f64 = s
            .parse()
            .map_err(|_| EvalError::data(path, format!("line {}: bad score {s:?}", i + 1)))?;
        out.entry(q.to_string())
            .or_default()
            .insert(d.to_string(), score);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qrels_parse_with_header() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("q.tsv");
        std::fs::write(&p, "query-id\tcorpus-id\tscore\n1\td1\t1\n1\td2\t2\n").unwrap();
        let q = read_qrels(&p).unwrap();
        assert_eq!(q["1"]["d2"], 2.0);
        std::fs::write(&p, "query-id\tcorpus-id\tscore\n1\td1\n").unwrap();
        assert!(read_qrels(&p).is_err());
    }
}
