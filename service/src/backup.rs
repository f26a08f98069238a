//! Online backup and verified restore of the embedded store (`cairn backup`, `cairn
//! restore`, `POST /v1/admin/backup`).
//!
//! A backup is a data directory of its own: [`cairn_store::EdgeStore::backup_to`] copies the
//! live store into a new embedded store while reads and writes go on, consistent at one
//! instant (the cut; every write acknowledged before the backup began is in it), and
//! [`Engine::backup`] adds a manifest ([`MANIFEST`]: when, which model and dimension, how
//! many points). A restore copies the backup into a new data directory with
//! [`crate::migrate::copy`], which verifies the copy (point counts, and a recall sample
//! searched on both stores with each sampled point's payload and vector read back), and
//! checks the count against the manifest, so a restore that reports success serves what the
//! backup held.

use std::path::{Path, PathBuf};

use cairn_store::{BackupProgress, QdrantStore, ServerConfig, SnapshotFile, SyncPolicy};
use serde::{Deserialize, Serialize};

use crate::migrate::{self, CopyProgress, CopyReport, Side};
use crate::{Engine, Principal, ServiceError};

/// The manifest's file name in a backup directory.
pub const MANIFEST: &str = "cairn-backup.json";

/// What a backup holds, written next to its store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BackupManifest {
    /// Manifest format (1).
    pub format: u32,
    /// When the cut was taken (RFC 3339).
    pub created_at: String,
    /// The Cairn version that wrote it.
    pub cairn_version: String,
    /// The embedding model (name and weights hash) whose vectors it holds.
    pub model: String,
    /// The dense vectors' dimension.
    pub dim: usize,
    /// Points in the store at the cut, and in the backup.
    pub points: u64,
    /// Writes made while the points were copied, replayed onto the copy.
    pub replayed: u64,
    pub elapsed_ms: u64,
    /// Where the backup was written.
    pub path: String,
    /// A backup of a Qdrant server store: the server's snapshot of the collection, in this
    /// directory (`points` is then its count just after the snapshot). Absent for the
    /// embedded store, whose backup is a data directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub snapshot: Option<SnapshotFile>,
}

/// What a verified restore did.
#[derive(Debug, Clone, Serialize)]
pub struct RestoreReport {
    pub manifest: BackupManifest,
    /// Points in the restored store.
    pub points: u64,
    /// A backup that is a data directory: the verified copy into the target.
    pub copy: Option<CopyReport>,
    /// A server snapshot recovered into a collection: the restored store's own recall
    /// sample (each sampled point found by a search of its text and read back unchanged).
    pub sample: Option<migrate::SampleReport>,
}

impl Engine {
    /// Backs the whole store up into `to` (a new or empty directory, absolute, outside the
    /// data directory) while the service keeps serving; writes the manifest last, so a
    /// directory with a manifest holds a complete backup. Only the operator may: a backup
    /// holds every tenant (the CLI, or a key-less server on loopback).
    pub async fn backup(
        &self,
        who: &Principal,
        to: &Path,
        progress: &(dyn Fn(BackupProgress) + Send + Sync),
    ) -> Result<BackupManifest, ServiceError> {
        if !matches!(who, Principal::Local) {
            return Err(ServiceError::Forbidden(
                "a backup holds every tenant: only the operator may take one (the `cairn \
                 backup` command, or a key-less server on loopback)"
                    .into(),
            ));
        }
        if !to.is_absolute() {
            return Err(ServiceError::InvalidRequest(format!(
                "backup target {} must be an absolute path (on the server's machine)",
                to.display()
            )));
        }
        let data = std::path::absolute(self.data_dir()).unwrap_or_else(|_| self.data_dir().into());
        if to.starts_with(&data) {
            return Err(ServiceError::InvalidRequest(format!(
                "backup target {} is inside the data directory {}",
                to.display(),
                data.display()
            )));
        }
        let started = chrono::Utc::now();
        let report = self.store.backup(to, progress).await?;
        let manifest = BackupManifest {
            format: 1,
            created_at: started.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            cairn_version: env!("CARGO_PKG_VERSION").to_string(),
            model: self.embedder().model_id().to_string(),
            dim: self.embedder().spec().dim,
            points: report.points,
            replayed: report.replayed,
            elapsed_ms: report.elapsed_ms,
            path: to.display().to_string(),
            snapshot: report.snapshot,
        };
        write_manifest(to, &manifest)?;
        tracing::info!(
            points = manifest.points,
            replayed = manifest.replayed,
            elapsed_ms = manifest.elapsed_ms,
            to = %to.display(),
            "backup written"
        );
        Ok(manifest)
    }
}

/// Writes the manifest durably (a temporary file, `fsync`, rename, `fsync` of the directory).
fn write_manifest(dir: &Path, manifest: &BackupManifest) -> Result<(), ServiceError> {
    let io = |what: &str, e: std::io::Error| {
        let message = format!("backup manifest ({what}): {e}");
        if cairn_models::error::is_disk_full(&e) {
            ServiceError::InsufficientStorage(message)
        } else {
            ServiceError::Unavailable(message)
        }
    };
    let tmp = dir.join(format!("{MANIFEST}.tmp"));
    let body = serde_json::to_vec_pretty(manifest)
        .map_err(|e| ServiceError::Internal(format!("manifest: {e}")))?;
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp).map_err(|e| io("create", e))?;
        f.write_all(&body).map_err(|e| io("write", e))?;
        f.sync_all().map_err(|e| io("sync", e))?;
    }
    std::fs::rename(&tmp, dir.join(MANIFEST)).map_err(|e| io("rename", e))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io("sync directory", e))
}

/// Reads a backup's manifest; a directory without one is not a (complete) backup.
pub fn read_manifest(dir: &Path) -> Result<BackupManifest, ServiceError> {
    let path = dir.join(MANIFEST);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        ServiceError::NotFound(format!(
            "{} is not a complete Cairn backup (no {MANIFEST}: {e})",
            dir.display()
        ))
    })?;
    serde_json::from_str(&text)
        .map_err(|e| ServiceError::InvalidRequest(format!("{}: {e}", path.display())))
}

/// Restores the backup in `from` into a new store, with vectors of `dim` dimensions (the
/// model's: a backup of another model is refused), and verifies it. The target is the
/// embedded store of `data_dir` (which must hold none), or, with `server`, a collection on a
/// Qdrant server that does not exist yet. A data-directory backup is copied with
/// [`migrate::copy`] (its checks, and the count against the manifest); a server snapshot is
/// recovered by the server after its SHA-256 is checked, then counted (exactly against the
/// manifest when no write ran during the snapshot) and sampled. An error names what failed;
/// the new store is then not to be used.
pub async fn restore(
    from: &Path,
    data_dir: &Path,
    server: Option<ServerConfig>,
    dim: usize,
    progress: &(dyn Fn(CopyProgress) + Send + Sync),
) -> Result<RestoreReport, ServiceError> {
    let manifest = read_manifest(from)?;
    if manifest.dim != dim {
        return Err(ServiceError::InvalidRequest(format!(
            "the backup holds {}-d vectors ({}); this model makes {dim}-d vectors",
            manifest.dim, manifest.model
        )));
    }
    if let Some(snapshot) = manifest.snapshot.clone() {
        let Some(config) = server else {
            return Err(ServiceError::InvalidRequest(format!(
                "{} holds a Qdrant server snapshot of collection {}: restore it onto a server \
                 (--qdrant-url URL --qdrant-collection NEW)",
                from.display(),
                snapshot.collection
            )));
        };
        return recover_snapshot(from, manifest, &snapshot, config, dim).await;
    }
    let target_side = match server {
        Some(config) => Side::Server(config),
        None => {
            if data_dir.join("qdrant").exists() {
                return Err(ServiceError::InvalidRequest(format!(
                    "{} already holds a store: restore into a new data directory",
                    data_dir.display()
                )));
            }
            Side::Embedded(data_dir.to_path_buf())
        }
    };
    let source_side = Side::Embedded(PathBuf::from(from));
    let source = migrate::open_source(&source_side, &target_side, dim, SyncPolicy::Os).await?;
    let target = migrate::open_target(&target_side, dim, SyncPolicy::Always).await?;
    if target.count_all().await? != 0 {
        return Err(ServiceError::InvalidRequest(format!(
            "the target ({}) already holds points: restore into a new store",
            target.backend().location
        )));
    }
    let copy = migrate::copy(
        source.as_ref(),
        target.as_ref(),
        migrate::DEFAULT_PAGE,
        progress,
    )
    .await?
    .check()?;
    if copy.counts.target_after != manifest.points {
        return Err(ServiceError::Conflict(format!(
            "restored {} points but the backup's manifest says {}",
            copy.counts.target_after, manifest.points
        )));
    }
    Ok(RestoreReport {
        points: copy.counts.target_after,
        manifest,
        copy: Some(copy),
        sample: None,
    })
}

/// [`restore`] of a server snapshot.
async fn recover_snapshot(
    from: &Path,
    manifest: BackupManifest,
    snapshot: &SnapshotFile,
    config: ServerConfig,
    dim: usize,
) -> Result<RestoreReport, ServiceError> {
    let store = QdrantStore::new(ServerConfig { dim, ..config })?;
    store
        .recover_snapshot(&from.join(&snapshot.file), &snapshot.sha256)
        .await?;
    let points = cairn_store::MemoryStore::count_all(&store).await? as u64;
    let (low, high) = (
        snapshot.points_before.min(snapshot.points_after),
        snapshot.points_before.max(snapshot.points_after),
    );
    if snapshot.points_before == snapshot.points_after && points != snapshot.points_after {
        return Err(ServiceError::Conflict(format!(
            "restored {points} points but the snapshot held {} (no write ran while it was taken)",
            snapshot.points_after
        )));
    }
    if points < low || points > high {
        tracing::warn!(
            points,
            low,
            high,
            "the restored count lies outside the counts around the snapshot (writes that \
             added and removed points ran while it was taken)"
        );
    }
    let sample = migrate::self_sample(&store).await?;
    if sample.matched != sample.total {
        return Err(ServiceError::Conflict(format!(
            "restored {points} points but {} of {} sampled points fail their check: {}",
            sample.total - sample.matched,
            sample.total,
            sample
                .mismatches
                .iter()
                .map(|m| format!("{} ({})", m.point, m.reason))
                .collect::<Vec<_>>()
                .join("; ")
        )));
    }
    Ok(RestoreReport {
        manifest,
        points,
        copy: None,
        sample: Some(sample),
    })
}
