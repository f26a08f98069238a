//! All of `service`'s integration tests in one binary: each file here was its own test
//! binary, and every one of them linked the whole engine (qdrant-edge, ONNX Runtime bindings),
//! so the test build spent most of its time and disk in the linker. One binary per crate links
//! once; the modules keep their names, so `cargo test -p <crate> --test service <module>::` runs one.

// Test helpers may panic on setup failures: that is a test failure, not a bug to handle.
#![allow(clippy::unwrap_used)]

mod knowledge;
mod legacy_layout;
mod module_graph;

/// The store the suite runs on, configured as `cairn` would from this process's environment
/// for the data directory `dir`: embedded by default, a Qdrant server when `CAIRN_QDRANT_URL`
/// is set (then `CAIRN_QDRANT_COLLECTION='t_{dir}'` gives each directory its collection).
pub fn engine_options(dir: &std::path::Path) -> cairn_service::EngineOptions {
    cairn_config::engine_options_from(&|k| std::env::var(k).ok(), dir)
        .expect("store configuration from the environment")
}
