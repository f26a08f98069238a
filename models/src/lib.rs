//! Domain types and contracts of Cairn. This crate does no I/O.
//!
//! - [`scope`]: the identity scope (tenant, user, namespace, agent, session) and its partition.
//! - [`ids`]: content-addressed identifiers (document ids, point ids) — stable across runs.
//! - [`refs`]: the reference grammar (`doc:<id>#<n>`, `msg:<conversation>/<seq>`, ...).
//! - [`record`]: what is stored per point (document chunks, conversation messages, documents).
//! - [`state`]: Cairn's typed state of its own records (candidates, turns, forgets), and
//!   reading the older layout that kept it in `metadata`.
//! - [`pack`]: the MemoryPack and the `agent-turn-v1` envelope returned by recall.
//! - [`limits`]: caps on what a caller may store, and canonical JSON for digests.
//! - [`error`]: the error classification every crate maps its errors onto.
//! - [`knowledge`]: knowledge memory (entities, preferences, facts, relationships) and
//!   reasoning memory (traces, steps, tool calls).
//! - [`grant`]: agent grants (operations, status, history) and agent keys.
//! - [`failpoint`]: named crash points for the crash-consistency tests.

pub mod error;
pub mod failpoint;
pub mod grant;
pub mod ids;
pub mod knowledge;
pub mod limits;
pub mod pack;
pub mod record;
pub mod refs;
pub mod scope;
pub mod state;
pub mod text;
pub mod time;

pub use error::{ErrorCode, ErrorKind, ModelError};
pub use failpoint::failpoint;
pub use pack::{
    AnswerSignals, Answerability, Citation, Conflict, ConflictSide, Coverage, MemoryPack,
    SelectedNode, SelectionReason, TurnEnvelope, TurnMode, CONTRACT_VERSION,
};
pub use record::{
    DocumentInfo, PackLabel, PointKind, RecallRole, Role, SearchKind, StoredPoint, TrustOrigin,
};
pub use refs::Ref;
pub use scope::{Partition, Scope};
pub use state::RecordState;
pub use time::Timestamp;
