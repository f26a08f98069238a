//! Cairn's own write-ahead journal in front of the embedded shard.
//!
//! Why it exists: `qdrant-edge` 0.7.2 writes every update to its WAL but `EdgeShard::load`
//! never replays that WAL, so anything applied after the last `flush()` is lost when the
//! process dies (a tester lost every acknowledged write to `kill -9`). Flushing the shard
//! after every write would fix it at the price of rewriting segment files per request.
//! Instead every store write is appended here as a self-contained record (point ids,
//! vectors, BM25 text, payload; or the ids / filter of a delete) before the call returns,
//! and replayed into the shard on open.
//!
//! Ordering: the edge store appends under the same mutex that applies the operation to the
//! shard, so the journal's order is the shard's order. Replaying the whole journal, in
//! order, over whatever subset of it the segments happened to persist ends in the same
//! state: upserts overwrite whole points and deletes are idempotent, and every point whose
//! persisted state is "ahead" is touched again by a later record.
//!
//! Durability ([`SyncPolicy`]): with `Always` (the default) a write returns only after
//! `fdatasync` covered its record, so it survives power loss; concurrent writers share one
//! `fdatasync` (group commit: whoever syncs covers every record appended before it
//! started). With `Os` the record is in the kernel's page cache when the write returns: it
//! survives `kill -9` of the process, not a power cut or kernel crash.
//!
//! Checkpoints: once the journal passes [`CHECKPOINT_BYTES`] (and on every explicit
//! `flush`), the store flushes the shard's segments with the writers stopped and empties
//! the journal. A crash between the two only means some records are replayed twice.
//!
//! Record format: `len: u32 LE | crc32(body): u32 LE | body`. The body of an upsert is
//! binary (format 2): `0x02 | json_len: u32 LE | JSON of the [`Op`] without its dense vectors
//! | the dense vectors as little-endian f32`, in point order, each point's JSON saying how
//! many floats it has (`dense_len`). Every other body, and every record written before
//! format 2, is the JSON of the `Op` (it starts with `{`), and both decode. Vectors as JSON
//! numbers cost a float-to-text and a text-to-float conversion per component and ~11 bytes
//! instead of 4. A torn or corrupt tail (the crash happened mid-append; that write was never
//! acknowledged) ends the replay and is cut off.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use cairn_models::{Partition, StoredPoint};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{Filter, Result, StoreError};

/// Journal size after which the store checkpoints (flushes the shard, empties the journal).
pub const CHECKPOINT_BYTES: u64 = 64 * 1024 * 1024;

/// Largest record accepted on replay (a larger length field means a corrupt tail).
const MAX_RECORD: u32 = 512 * 1024 * 1024;

/// When an acknowledged write is on stable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncPolicy {
    /// `fdatasync` before a write returns (group-committed): survives power loss.
    #[default]
    Always,
    /// Written to the OS before a write returns: survives the process being killed, not a
    /// power cut or a kernel crash.
    Os,
}

impl SyncPolicy {
    /// `always` or `os` (`fsync` and `none` are accepted as their aliases). `None` for
    /// anything else: the caller reports it rather than silently downgrading durability.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "always" | "fsync" => Some(SyncPolicy::Always),
            "os" | "none" => Some(SyncPolicy::Os),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SyncPolicy::Always => "always",
            SyncPolicy::Os => "os",
        }
    }
}

/// A journaled point: everything needed to upsert it again.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct JPoint {
    pub id: Uuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dense: Option<Vec<f32>>,
    /// Format 2: the number of floats of this point's dense vector in the record's binary
    /// part (the JSON then has no `dense`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dense_len: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bm25_text: Option<String>,
    /// A copied sparse vector (takes precedence over `bm25_text`); absent in records
    /// written before copies existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sparse: Option<crate::SparseVector>,
    pub payload: StoredPoint,
}

/// One journaled store operation.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Op {
    Upsert {
        points: Vec<JPoint>,
    },
    DeleteIds {
        ids: Vec<Uuid>,
    },
    DeleteWhere {
        partition: Partition,
        filter: Filter,
    },
}

/// The journal file and its group-commit state.
#[derive(Debug)]
pub(crate) struct Journal {
    path: PathBuf,
    policy: SyncPolicy,
    /// Appends (the caller also holds the store's write mutex, which fixes the order).
    file: Mutex<File>,
    /// A second handle for `fdatasync`, so syncing never waits for an append in progress.
    sync_file: File,
    /// Number of the last record appended.
    appended: AtomicU64,
    /// Number of the last record known to be on stable storage. Its mutex is the group
    /// commit: one writer syncs, the others wait and usually find their record covered.
    synced: Mutex<u64>,
    bytes: AtomicU64,
}

/// What replaying found.
#[derive(Debug, Default)]
pub(crate) struct Replay {
    pub ops: Vec<Op>,
    /// Bytes of a torn or corrupt tail that were cut off.
    pub dropped_tail: u64,
}

fn io(path: &Path, e: std::io::Error) -> StoreError {
    let message = format!("journal {}: {e}", path.display());
    if cairn_models::error::is_disk_full(&e) {
        StoreError::Full(message)
    } else {
        StoreError::Unavailable(message)
    }
}

impl Journal {
    /// Opens (or creates) the journal and reads every intact record in it.
    pub fn open(path: &Path, policy: SyncPolicy) -> Result<(Self, Replay)> {
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .map_err(|e| io(path, e))?;
        let mut data = Vec::new();
        file.seek(SeekFrom::Start(0)).map_err(|e| io(path, e))?;
        file.read_to_end(&mut data).map_err(|e| io(path, e))?;
        let (ops, good) = decode_all(&data);
        let dropped_tail = (data.len() - good) as u64;
        if dropped_tail > 0 {
            // Cut the torn tail so new records follow the last intact one.
            file.set_len(good as u64).map_err(|e| io(path, e))?;
            file.sync_all().map_err(|e| io(path, e))?;
        }
        let sync_file = file.try_clone().map_err(|e| io(path, e))?;
        Ok((
            Journal {
                path: path.to_path_buf(),
                policy,
                file: Mutex::new(file),
                sync_file,
                appended: AtomicU64::new(0),
                synced: Mutex::new(0),
                bytes: AtomicU64::new(good as u64),
            },
            Replay { ops, dropped_tail },
        ))
    }

    pub fn policy(&self) -> SyncPolicy {
        self.policy
    }

    /// Current size in bytes.
    pub fn len(&self) -> u64 {
        self.bytes.load(Ordering::Acquire)
    }

    /// Appends one record; returns its number for [`Journal::sync`]. The caller holds the
    /// store's write mutex.
    #[cfg(test)]
    pub fn append(&self, op: &Op) -> Result<u64> {
        self.append_encoded(&encode(op)?)
    }

    /// Appends a record made by [`encode`] (encoding is done before taking the store's
    /// write mutex, to keep it short).
    pub fn append_encoded(&self, record: &[u8]) -> Result<u64> {
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = file.write_all(record) {
            // A partial record would hide every later one from replay: cut it off.
            let good = self.bytes.load(Ordering::Acquire);
            let _ = file.set_len(good);
            return Err(io(&self.path, e));
        }
        self.bytes.fetch_add(record.len() as u64, Ordering::AcqRel);
        Ok(self.appended.fetch_add(1, Ordering::AcqRel) + 1)
    }

    /// Returns once record `seq` is as durable as the policy promises.
    pub fn sync(&self, seq: u64) -> Result<()> {
        if self.policy == SyncPolicy::Os {
            return Ok(());
        }
        let mut synced = self.synced.lock().unwrap_or_else(|p| p.into_inner());
        if *synced >= seq {
            return Ok(());
        }
        // Everything appended before this point is covered by this one fdatasync.
        let target = self.appended.load(Ordering::Acquire);
        self.sync_file.sync_data().map_err(|e| io(&self.path, e))?;
        *synced = target;
        Ok(())
    }

    /// Empties the journal. Only call after the shard has flushed everything the journal
    /// holds, with writers stopped.
    pub fn truncate(&self) -> Result<()> {
        let file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        file.set_len(0).map_err(|e| io(&self.path, e))?;
        file.sync_all().map_err(|e| io(&self.path, e))?;
        self.bytes.store(0, Ordering::Release);
        let appended = self.appended.load(Ordering::Acquire);
        let mut synced = self.synced.lock().unwrap_or_else(|p| p.into_inner());
        *synced = (*synced).max(appended);
        Ok(())
    }
}

/// First byte of a format-2 body (a JSON body starts with `{`).
const FORMAT_2: u8 = 0x02;

/// A point of a format-2 upsert: its JSON without the vector.
#[derive(Serialize)]
struct JPointHead<'a> {
    id: &'a Uuid,
    #[serde(skip_serializing_if = "Option::is_none")]
    dense_len: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bm25_text: &'a Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sparse: &'a Option<crate::SparseVector>,
    payload: &'a StoredPoint,
}

#[derive(Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum OpHead<'a> {
    Upsert { points: Vec<JPointHead<'a>> },
}

/// The body of `op`: format 2 for upserts, JSON for deletes.
fn encode_body(op: &Op) -> Result<Vec<u8>> {
    let Op::Upsert { points } = op else {
        return to_json(op);
    };
    let len_of = |d: &Vec<f32>| {
        u32::try_from(d.len()).map_err(|_| StoreError::Invalid("vector too long".into()))
    };
    let heads = points
        .iter()
        .map(|p| {
            Ok(JPointHead {
                id: &p.id,
                dense_len: p.dense.as_ref().map(len_of).transpose()?,
                bm25_text: &p.bm25_text,
                sparse: &p.sparse,
                payload: &p.payload,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let head = to_json(&OpHead::Upsert { points: heads })?;
    let floats: usize = points
        .iter()
        .filter_map(|p| p.dense.as_ref())
        .map(Vec::len)
        .sum();
    let mut body = Vec::with_capacity(5 + head.len() + floats * 4);
    body.push(FORMAT_2);
    let head_len = u32::try_from(head.len())
        .map_err(|_| StoreError::Invalid(format!("write of {} bytes", head.len())))?;
    body.extend_from_slice(&head_len.to_le_bytes());
    body.extend_from_slice(&head);
    for d in points.iter().filter_map(|p| p.dense.as_ref()) {
        for x in d {
            body.extend_from_slice(&x.to_le_bytes());
        }
    }
    Ok(body)
}

fn to_json<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| StoreError::Engine(e.to_string()))
}

/// Decodes a body of either format; `None` for a body that does not decode.
fn decode_body(body: &[u8]) -> Option<Op> {
    if body.first() != Some(&FORMAT_2) {
        return serde_json::from_slice::<Op>(body).ok();
    }
    let head_len = u32::from_le_bytes(body.get(1..5)?.try_into().ok()?) as usize;
    let head = body.get(5..5usize.checked_add(head_len)?)?;
    let mut floats = body.get(5 + head_len..)?;
    let mut op = serde_json::from_slice::<Op>(head).ok()?;
    if let Op::Upsert { points } = &mut op {
        for p in points.iter_mut() {
            if let Some(n) = p.dense_len.take() {
                let bytes = (n as usize).checked_mul(4)?;
                let (mine, rest) = (floats.get(..bytes)?, floats.get(bytes..)?);
                p.dense = Some(
                    mine.chunks_exact(4)
                        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                        .collect(),
                );
                floats = rest;
            }
        }
    }
    floats.is_empty().then_some(op)
}

/// A record: length, checksum and the body of `op`.
pub(crate) fn encode(op: &Op) -> Result<Vec<u8>> {
    let body = encode_body(op)?;
    let len = u32::try_from(body.len())
        .ok()
        .filter(|&l| l <= MAX_RECORD)
        .ok_or_else(|| StoreError::Invalid(format!("write of {} bytes", body.len())))?;
    let mut out = Vec::with_capacity(body.len() + 8);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Decodes records from the start; returns them and the length of the intact prefix.
fn decode_all(data: &[u8]) -> (Vec<Op>, usize) {
    let mut ops = Vec::new();
    let mut at = 0usize;
    while data.len() - at >= 8 {
        let word = |i: usize| u32::from_le_bytes([data[i], data[i + 1], data[i + 2], data[i + 3]]);
        let len = word(at);
        let crc = word(at + 4);
        if len > MAX_RECORD || data.len() - at - 8 < len as usize {
            break;
        }
        let body = &data[at + 8..at + 8 + len as usize];
        if crc32fast::hash(body) != crc {
            break;
        }
        match decode_body(body) {
            Some(op) => ops.push(op),
            None => break,
        }
        at += 8 + len as usize;
    }
    (ops, at)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use cairn_models::{PointKind, Scope, TrustOrigin};

    fn op(i: u128) -> Op {
        let scope = Scope::new("t", "u", "n", "a", "s").unwrap();
        let mut p = StoredPoint::new(PointKind::Chunk, &scope, TrustOrigin::Document, 1);
        p.text = Some(format!("text {i}"));
        Op::Upsert {
            points: vec![JPoint {
                id: Uuid::from_u128(i),
                dense_len: None,
                sparse: None,
                dense: Some(vec![0.25, -1.5e-7, 3.0]),
                bm25_text: Some("bm25".into()),
                payload: p,
            }],
        }
    }

    fn ids(ops: &[Op]) -> Vec<Uuid> {
        ops.iter()
            .flat_map(|o| match o {
                Op::Upsert { points } => points.iter().map(|p| p.id).collect(),
                Op::DeleteIds { ids } => ids.clone(),
                Op::DeleteWhere { .. } => vec![],
            })
            .collect()
    }

    #[test]
    fn records_round_trip_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        {
            let (j, replay) = Journal::open(&path, SyncPolicy::Always).unwrap();
            assert!(replay.ops.is_empty());
            for i in 0..3 {
                let seq = j.append(&op(i)).unwrap();
                j.sync(seq).unwrap();
            }
        }
        // A crash mid-append: half a record at the end.
        let full = std::fs::read(&path).unwrap();
        let mut torn = full.clone();
        torn.extend_from_slice(&encode(&op(9)).unwrap()[..20]);
        std::fs::write(&path, &torn).unwrap();
        let (j, replay) = Journal::open(&path, SyncPolicy::Os).unwrap();
        assert_eq!(
            ids(&replay.ops),
            (0..3).map(Uuid::from_u128).collect::<Vec<_>>()
        );
        assert_eq!(replay.dropped_tail, 20);
        assert_eq!(std::fs::read(&path).unwrap(), full, "the tail is cut off");
        // Vectors survive bit for bit.
        if let Op::Upsert { points } = &replay.ops[0] {
            assert_eq!(points[0].dense.as_deref(), Some(&[0.25, -1.5e-7, 3.0][..]));
        }
        // New records follow the intact prefix.
        j.append(&op(4)).unwrap();
        drop(j);
        let (_, replay) = Journal::open(&path, SyncPolicy::Os).unwrap();
        assert_eq!(replay.ops.len(), 4);
    }

    /// Records written before format 2 (the JSON of the op, vectors as numbers) still replay,
    /// beside format-2 records.
    #[test]
    fn json_records_of_the_previous_format_still_replay() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let old_body = serde_json::to_vec(&op(7)).unwrap();
        assert_eq!(old_body[0], b'{');
        let mut data = Vec::new();
        data.extend_from_slice(&(old_body.len() as u32).to_le_bytes());
        data.extend_from_slice(&crc32fast::hash(&old_body).to_le_bytes());
        data.extend_from_slice(&old_body);
        data.extend_from_slice(&encode(&op(8)).unwrap());
        std::fs::write(&path, &data).unwrap();
        let (_, replay) = Journal::open(&path, SyncPolicy::Os).unwrap();
        assert_eq!(
            ids(&replay.ops),
            vec![Uuid::from_u128(7), Uuid::from_u128(8)]
        );
        for o in &replay.ops {
            let Op::Upsert { points } = o else { panic!() };
            assert_eq!(points[0].dense.as_deref(), Some(&[0.25, -1.5e-7, 3.0][..]));
            assert_eq!(points[0].dense_len, None);
        }
    }

    proptest::proptest! {
        /// Format 2 round-trips every upsert exactly: vectors bit for bit (any f32, NaN
        /// payloads included), points without vectors, in order.
        #[test]
        fn format_2_round_trips_upserts(
            vectors in proptest::collection::vec(
                proptest::option::of(proptest::collection::vec(proptest::num::f32::ANY, 0..40)),
                1..6,
            )
        ) {
            let scope = Scope::new("t", "u", "n", "a", "s").unwrap();
            let points: Vec<JPoint> = vectors
                .iter()
                .enumerate()
                .map(|(i, d)| JPoint {
                    id: Uuid::from_u128(i as u128),
                    dense: d.clone(),
                    dense_len: None,
                    bm25_text: Some(format!("text {i}")),
                    sparse: None,
                    payload: StoredPoint::new(PointKind::Chunk, &scope, TrustOrigin::Document, 1),
                })
                .collect();
            let op = Op::Upsert { points };
            let record = encode(&op).unwrap();
            let (ops, used) = decode_all(&record);
            proptest::prop_assert_eq!(used, record.len());
            let Some(Op::Upsert { points: back }) = ops.into_iter().next() else {
                return Err(proptest::test_runner::TestCaseError::fail("no upsert"));
            };
            proptest::prop_assert_eq!(back.len(), vectors.len());
            for (p, d) in back.iter().zip(&vectors) {
                let bits = |v: &Option<Vec<f32>>| {
                    v.as_ref().map(|v| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
                };
                proptest::prop_assert_eq!(bits(&p.dense), bits(d));
                proptest::prop_assert_eq!(p.dense_len, None);
            }
        }
    }

    #[test]
    fn a_corrupt_record_ends_the_replay() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let (j, _) = Journal::open(&path, SyncPolicy::Os).unwrap();
        j.append(&op(1)).unwrap();
        let first = j.len() as usize;
        j.append(&op(2)).unwrap();
        drop(j);
        let mut data = std::fs::read(&path).unwrap();
        data[first + 12] ^= 0xff;
        std::fs::write(&path, &data).unwrap();
        let (_, replay) = Journal::open(&path, SyncPolicy::Os).unwrap();
        assert_eq!(ids(&replay.ops), vec![Uuid::from_u128(1)]);
    }

    #[test]
    fn truncate_empties_and_group_commit_covers_earlier_records() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let (j, _) = Journal::open(&path, SyncPolicy::Always).unwrap();
        let a = j.append(&op(1)).unwrap();
        let b = j.append(&op(2)).unwrap();
        j.sync(b).unwrap();
        // Record a was covered by b's sync.
        assert!(*j.synced.lock().unwrap() >= a);
        j.truncate().unwrap();
        assert_eq!(j.len(), 0);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    }

    #[test]
    fn policy_parses() {
        assert_eq!(SyncPolicy::parse("ALWAYS"), Some(SyncPolicy::Always));
        assert_eq!(SyncPolicy::parse("os"), Some(SyncPolicy::Os));
        assert_eq!(SyncPolicy::parse("sometimes"), None);
    }
}
