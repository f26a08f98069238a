//! Cairn's retrieval-quality harness: public benchmarks (BEIR, LoCoMo) run through the real
//! ingest and recall paths, with metrics and reports.
