//! Cairn's memory service: every operation and every rule that is not about a transport.
//!
//! The doors (the HTTP API in `cairn-api`, the `cairn` CLI, MCP, the evaluation harness)
//! call the operations, methods of [`Engine`] defined in the module of their domain, each
//! with the caller's [`Principal`]. An operation validates its input, authorizes it with the
//! one policy ([`auth::authorize`], through [`access`]), takes the locks it needs in the
//! documented order, schedules the vector index build after writes and reports a
//! [`ServiceError`] whose stable code ([`cairn_models::ErrorCode`]) a door maps onto its
//! transport. A listing takes a [`PageRequest`] and answers one [`Page`] with the listing's
//! total. A door only translates. This crate depends on no HTTP crate.
//!
//! The modules, layered (each uses only those listed before it; checked by
//! `service/tests/service/module_graph.rs`):
//!
//! - [`error`], [`auth`], [`engine`]: the stable errors; API keys, principals and the
//!   authorization policy; assembling the service over a data directory, the vector index
//!   build.
//! - [`access`]: the partition a call names, admitting a scope, paging ([`Page`]).
//! - `records`, `evidence`: the record store of one kind; evidence refs.
//! - [`recall`]: recall (and the forget request); [`turns`]: the `agent-turn-v1` contract.
//! - [`events`], [`knowledge`], [`reasoning`], [`candidates`], [`grants`], [`suggestions`]:
//!   third-party evidence; entities, relationships, preferences, facts; reasoning traces;
//!   the review queue; agent grants; entity suggestions.
//! - [`forget`]: deleting evidence and what derives from it.
//! - [`documents`], [`messages`]: storing, reading, counting and deleting documents;
//!   recording, reading, searching and deleting messages and conversations.
//! - [`migrate`], [`backup`]: copying between stores; online backup and verified restore.

pub mod access;
pub mod auth;
pub mod backup;
pub mod candidates;
pub mod documents;
pub mod engine;
pub mod error;
pub mod events;
mod evidence;
pub mod forget;
pub mod grants;
pub mod knowledge;
pub mod messages;
pub mod migrate;
pub mod reasoning;
pub mod recall;
mod records;
pub mod suggestions;
pub mod turns;

pub use access::{Page, PageRequest};
pub use auth::{authorize, Auth, Principal};
pub use cairn_models::grant::Operation;
pub use documents::BatchOutcome;
pub use engine::{Backend, DiskSpace, Engine, EngineOptions, IndexBuild, OPTIMIZE_AFTER_CHUNKS};
pub use error::ServiceError;
