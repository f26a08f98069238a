//! Reader for BEIR-format corpora (`corpus.jsonl`: `{"_id", "title", "text"}` per line).

use std::io::BufRead;
use std::path::Path;

use crate::IngestError;

/// One BEIR document.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct BeirDoc {
    #[serde(rename = "_id")]
    pub id: String,
    #[serde(default)]
    pub title: String,
    pub text: String,
}

impl BeirDoc {
    /// The text BEIR's published dense figures embed: `title + " " + text`.
    pub fn full_text(&self) -> String {
        if self.title.is_empty() {
            self.text.clone()
        } else {
            format!("{} {}", self.title, self.text)
        }
    }
}

/// Reads every document of a `corpus.jsonl`.
pub fn read_corpus(path: &Path) -> Result<Vec<BeirDoc>, IngestError> {
    let file = std::fs::File::open(path).map_err(|e| IngestError::Io {
        path: path.display().to_string(),
        source: e,
    })?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| IngestError::Io {
            path: path.display().to_string(),
            source: e,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let doc: BeirDoc = serde_json::from_str(&line).map_err(|e| {
            IngestError::InvalidInput(format!("{} line {}: {e}", path.display(), i + 1))
        })?;
        out.push(doc);
    }
    Ok(out)
}
