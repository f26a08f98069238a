//! Cairn's retrieval-quality harness: public benchmarks (BEIR, LoCoMo) run through the real
//! ingest and recall paths, with metrics and reports.
//!
//! Nothing here is mocked: the harness assembles the same store (embedded Qdrant), embedder
//! (the local ONNX model) and write/read paths the service uses ([`stack`]), in a throwaway
//! data directory per run, with a persistent embedding cache so a re-run embeds nothing.
//!
//! - [`data`]: the dataset readers (BEIR files, LoCoMo JSON, probe questions), shared by
//!   the runners below, which never depend on each other.
//! - [`beir`]: BEIR folders (SciFact...) in four retrieval modes ([`retrieval::Mode`]):
//!   store dense, store BM25, the real hybrid recall path, and Qdrant-side RRF. nDCG@10,
//!   Recall@10/100, MRR@10 and per-query latency; a fusion sweep; published figures beside.
//! - [`locomo`]: LoCoMo conversations recorded as messages; per-category nDCG@10,
//!   Recall@5/10 against the evidence turns.
//! - [`packs`]: MemoryPack quality per token budget, and coverage calibration with
//!   unanswerable probes (top-cosine distributions and a `min_relevance` recommendation).
//! - [`scenario`]: declarative behaviour scenarios (JSON under `eval/scenarios/`).
//! - [`metrics`]: nDCG, recall, MRR (unit- and property-tested), latency percentiles.
//! - [`report`] and [`chart`]: JSON, Markdown and SVG outputs with run provenance; each
//!   benchmark's own report is `beir::report` / `locomo::report`.
//! - [`stack`]: the one assembly of model, store, write and read paths, shared with
//!   `cairn bench` ([`stack::Workspace::open`] with [`stack::WorkspaceOptions`]).
//!
//! The `cairn eval` subcommands (in the `cli` crate) are thin wrappers over [`beir::run`],
//! [`locomo::run`] and [`scenario::run_dir`], plus [`write_beir`] / [`write_locomo`].

pub mod beir;
pub mod chart;
pub mod data;
mod error;
pub mod locomo;
pub mod metrics;
pub mod packs;
pub mod report;
pub mod retrieval;
pub mod scenario;
pub mod stack;

pub use beir::write_beir;
pub use error::{EvalError, Result};
pub use locomo::write_locomo;
pub use retrieval::{Fusion, Mode};
pub use stack::{EvalEnv, Event, Observer};
