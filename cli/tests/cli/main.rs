//! All of `cli`'s integration tests in one binary: each file here was its own test
//! binary, and every one of them linked the whole engine (qdrant-edge, ONNX Runtime bindings),
//! so the test build spent most of its time and disk in the linker. One binary per crate links
//! once; the modules keep their names, so `cargo test -p <crate> --test cli <module>::` runs one.

// Test helpers may panic on setup failures: that is a test failure, not a bug to handle.
#![allow(clippy::unwrap_used)]

mod backup;
mod cli;
mod cli_knowledge;
mod config;
mod crash;
mod disk_full;
mod hostile;
mod mcp_stdio;
mod migrate;
mod replicas;
