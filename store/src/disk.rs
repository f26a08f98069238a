//! Keeping the embedded shard's memory-mapped files off a full disk.
//!
//! The shard writes vectors, payloads and indexes through memory maps of files it creates at
//! their full length with `set_len`, which leaves them sparse: their blocks are allocated only
//! when a page is first written. On a full filesystem that first write cannot get a block, and
//! the kernel answers the page fault with `SIGBUS`, which ends the process; there is no error
//! to return. Reserving the blocks up front (`fallocate` inside the engine) was tried: an empty
//! store then took 185 MB of disk.
//!
//! So the store checks before it writes: a write runs only while the filesystem has room for
//! every byte the shard's files could still dirty without allocating (their *holes*: apparent
//! length minus allocated blocks, which on ext4 include delayed-allocation reservations) plus
//! a reserve for the write itself and the next file the engine creates. Otherwise the write is
//! refused as [`StoreError::Full`] (`507 insufficient_storage`) before it touches a map, and
//! works again as soon as space is freed. Opening an existing store checks the same (the
//! journal replay writes), and refuses with a message rather than fault.
//!
//! Walking the shard's files costs a `stat` per file (a few hundred at a million points), so
//! the holes are re-measured at most every [`HOLES_TTL`] while the disk has plenty of room,
//! and on every check once it is within twice the need.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::{Result, StoreError};

/// Default room kept free beyond the shard's holes: a large ingest batch (its vectors,
/// payloads, index entries and journal record) and the next file the engine creates.
pub const DEFAULT_RESERVE_BYTES: u64 = 64 * 1024 * 1024;

/// How long a measurement of the holes is reused while the disk has plenty of room.
const HOLES_TTL: Duration = Duration::from_millis(250);

/// What a write needs free, and what the disk has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskNeed {
    /// Bytes the shard's files could still dirty without allocating.
    pub holes: u64,
    /// The configured reserve.
    pub reserve: u64,
    /// Available bytes on the data directory's filesystem.
    pub available: u64,
}

impl DiskNeed {
    /// Bytes that must be available for a write to run.
    pub fn needed(&self) -> u64 {
        self.holes.saturating_add(self.reserve)
    }

    pub fn fits(&self) -> bool {
        self.reserve == 0 || self.available >= self.needed()
    }
}

/// The check of one shard directory.
#[derive(Debug)]
pub(crate) struct DiskGuard {
    root: PathBuf,
    reserve: u64,
    /// The last measurement of the holes, and when it was taken.
    holes: Mutex<Option<(Instant, u64)>>,
}

impl DiskGuard {
    pub fn new(root: &Path, reserve: u64) -> Self {
        DiskGuard {
            root: root.to_path_buf(),
            reserve,
            holes: Mutex::new(None),
        }
    }

    /// Where the disk stands now (the holes measured afresh).
    pub fn need(&self) -> DiskNeed {
        let holes = self.measure();
        DiskNeed {
            holes,
            reserve: self.reserve,
            available: fs4::available_space(&self.root).unwrap_or(u64::MAX),
        }
    }

    /// `Ok` when a write may run; [`StoreError::Full`] naming the figures when it would risk
    /// writing into a hole on a disk without the blocks for it.
    pub fn check(&self, what: &str) -> Result<()> {
        if self.reserve == 0 {
            return Ok(());
        }
        // A filesystem that cannot say how much room it has is not refused.
        let Ok(available) = fs4::available_space(&self.root) else {
            return Ok(());
        };
        let cached = *self.holes.lock().unwrap_or_else(|p| p.into_inner());
        let holes = match cached {
            Some((at, holes))
                if at.elapsed() < HOLES_TTL
                    && available >= holes.saturating_add(self.reserve).saturating_mul(2) =>
            {
                holes
            }
            _ => self.measure(),
        };
        let need = DiskNeed {
            holes,
            reserve: self.reserve,
            available,
        };
        if need.fits() {
            Ok(())
        } else {
            Err(StoreError::Full(format!(
                "{what} refused: No space left on device for the store's memory-mapped files \
                 ({} MiB available on the data directory's filesystem; the shard's files may \
                 still need {} MiB of blocks, plus the {} MiB reserve, CAIRN_DISK_RESERVE_MB); \
                 free space and retry, no restart needed",
                mib(need.available),
                mib(need.holes),
                mib(need.reserve)
            )))
        }
    }

    /// Walks the shard's files and sums their holes; remembers the sum.
    fn measure(&self) -> u64 {
        let holes = holes_under(&self.root);
        *self.holes.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), holes));
        holes
    }
}

fn mib(bytes: u64) -> u64 {
    bytes.div_ceil(1024 * 1024)
}

/// Sum over the regular files under `dir` of apparent length minus allocated bytes. Files
/// that vanish during the walk (an optimizer swapping segments) are skipped.
pub(crate) fn holes_under(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                total = total.saturating_add(meta.len().saturating_sub(meta.blocks() * 512));
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sparse_file_counts_its_hole_and_a_written_one_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let sparse = std::fs::File::create(dir.path().join("sparse")).unwrap();
        sparse.set_len(8 << 20).unwrap();
        std::fs::create_dir(dir.path().join("seg")).unwrap();
        std::fs::write(dir.path().join("seg/full"), vec![1u8; 1 << 20]).unwrap();
        let holes = holes_under(dir.path());
        // The sparse file's 8 MiB (a filesystem may allocate a block or so of it).
        assert!(holes > 7 << 20 && holes <= 8 << 20, "{holes}");
    }

    #[test]
    fn a_reserve_larger_than_the_disk_refuses_with_the_figures() {
        let dir = tempfile::tempdir().unwrap();
        let guard = DiskGuard::new(dir.path(), u64::MAX / 4);
        let err = guard.check("write").unwrap_err();
        assert!(matches!(err, StoreError::Full(_)), "{err}");
        assert!(err.to_string().contains("No space left"), "{err}");
        assert_eq!(err.kind(), cairn_models::ErrorKind::StorageFull);
        // Off: never refuses.
        DiskGuard::new(dir.path(), 0).check("write").unwrap();
        // A small reserve on a disk with room passes.
        DiskGuard::new(dir.path(), 1).check("write").unwrap();
    }
}
