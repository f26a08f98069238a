//! What a BEIR run is asked to do: [`BeirOptions`] and the [`DocMode`] documents are split in.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::retrieval::{Fusion, Mode};

/// How documents are split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DocMode {
    /// One vector per document (truncated by the model at its max length).
    Document,
    /// The default chunking; a document scores as its best chunk.
    Chunked,
}

impl DocMode {
    pub fn as_str(self) -> &'static str {
        match self {
            DocMode::Document => "document",
            DocMode::Chunked => "chunked",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "document" => Some(DocMode::Document),
            "chunked" => Some(DocMode::Chunked),
            _ => None,
        }
    }
}

/// Options of a BEIR run.
#[derive(Debug, Clone)]
pub struct BeirOptions {
    /// The BEIR folder.
    pub data: PathBuf,
    pub split: String,
    pub modes: Vec<Mode>,
    pub doc_mode: DocMode,
    /// First N judged queries and a corpus subset (see the module docs).
    pub limit: Option<usize>,
    /// Corpus documents (besides the judged ones) kept with `limit`.
    pub limit_corpus: usize,
    /// Fusion of the hybrid modes.
    pub fusion: Fusion,
    /// Also evaluate a grid of fusion parameters for the `hybrid` mode.
    pub sweep: bool,
    /// Pack budgets (empty: no pack evaluation).
    pub budgets: Vec<usize>,
    /// Unanswerable probe queries: a BEIR `queries.jsonl` or a LoCoMo JSON file.
    pub probes: Option<PathBuf>,
    /// Most probes used from `probes`.
    pub probe_limit: usize,
    /// Queries whose relevant documents are deleted at the end and asked again as in-domain
    /// unanswerable probes (0: none).
    pub holdout: usize,
    /// Write every query's leg lists here (JSON lines, see `Retriever::dump_legs`).
    pub dump_legs: Option<PathBuf>,
}

impl BeirOptions {
    pub fn new(data: PathBuf, split: &str) -> Self {
        BeirOptions {
            data,
            split: split.to_string(),
            modes: Mode::ALL.to_vec(),
            doc_mode: DocMode::Document,
            limit: None,
            limit_corpus: 1000,
            fusion: Fusion::default(),
            sweep: false,
            budgets: crate::packs::DEFAULT_BUDGETS.to_vec(),
            probes: None,
            probe_limit: 200,
            holdout: 100,
            dump_legs: None,
        }
    }
}
