//! Puts the files a recall reads per hit into the OS page cache before the store serves.
//!
//! Every recall reads, for each of its ~100 hits (two legs of 50, plus identifier probes),
//! the full f32 vector (`vector_storage-dense/matrix.dat`: the rescoring and the cosine every
//! hit is gated on) and the payload (`payload_storage/tracker.dat`, where each point's value
//! is, and `payload_storage/page_*.dat`: the text and the scope).
//! Both are memory-mapped under Qdrant's global random advice, so a page that is not in the
//! page cache costs one 4 KiB disk read inside the query. After a segment is built or the
//! store is opened, some of them are not: the segment builder pages out what it wrote
//! (`clear_cache`, "to avoid cache pollution", a server's concern), as does a segment's
//! `Drop`, and a reboot empties the cache. `perf stat` of a 1M-chunk `bench recall` counted
//! 5,561 major faults in 5 s of queries (filemap_fault under `CowVector::to_owned` and the
//! payload's `decompress_lz4`); with these files read once beforehand, 118.
//!
//! The int8 copies the HNSW search walks are made resident by patch 0006 when a segment loads;
//! the HNSW graph and the filtered keyword indexes are in RAM. This module covers the rest of
//! a recall's reads. It reads each file front to back, 1 MiB at a time into a buffer it throws
//! away, so the kernel reads ahead in large requests (`posix_fadvise(WILLNEED)` is capped at
//! the device's readahead size). The pages are the page cache's, file-backed and reclaimable:
//! they are not mapped by the read, so they add nothing to the process's RSS or anonymous
//! memory, and the kernel takes them back under pressure like any cached file.
//!
//! Bounded: when the files are larger than half of the memory the kernel reports available
//! (`MemAvailable`), nothing is read (a store that does not fit would only evict itself), and
//! queries fault in what they touch, as before.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What [`warm`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Warmed {
    /// Files read.
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Skipped because the files are over the bound (half of `MemAvailable`).
    pub skipped: bool,
}

/// The files under a shard directory (`<data-dir>/qdrant`) that recall reads per hit, with
/// their sizes: each segment's full dense vectors, its payload pages and their tracker.
pub fn hit_files(shard_dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let Ok(segments) = std::fs::read_dir(shard_dir.join("segments")) else {
        return out;
    };
    for seg in segments.flatten() {
        let seg = seg.path();
        let mut push = |p: PathBuf| {
            if let Ok(m) = std::fs::metadata(&p) {
                if m.is_file() {
                    out.push((p, m.len()));
                }
            }
        };
        push(seg.join("vector_storage-dense").join("matrix.dat"));
        if let Ok(pages) = std::fs::read_dir(seg.join("payload_storage")) {
            for page in pages.flatten() {
                let name = page.file_name();
                let name = name.to_string_lossy();
                if name == "tracker.dat" || (name.starts_with("page_") && name.ends_with(".dat")) {
                    push(page.path());
                }
            }
        }
    }
    out.sort();
    out
}

/// `MemAvailable` from `/proc/meminfo`, in bytes; `None` where there is none (not Linux).
fn mem_available() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Reads the files recall touches per hit into the page cache, when they fit in half of the
/// available memory (see the module docs). Never fails: an unreadable file is logged and left
/// to fault in page by page, as it would without this.
pub fn warm(shard_dir: &Path) -> Warmed {
    let files = hit_files(shard_dir);
    let bytes: u64 = files.iter().map(|(_, n)| n).sum();
    let bound = mem_available().map(|m| m / 2);
    if bound.is_some_and(|b| bytes > b) {
        tracing::info!(
            bytes,
            bound = bound.unwrap_or_default(),
            "store files over half the available memory; not read into the page cache"
        );
        return Warmed {
            files: files.len(),
            bytes,
            skipped: true,
        };
    }
    let t = Instant::now();
    let mut buf = vec![0u8; 1 << 20];
    for (path, _) in &files {
        let mut read = || -> std::io::Result<()> {
            let mut file = std::fs::File::open(path)?;
            while file.read(&mut buf)? > 0 {}
            Ok(())
        };
        if let Err(e) = read() {
            tracing::warn!(path = %path.display(), error = %e, "cannot read into the page cache");
        }
    }
    tracing::debug!(
        files = files.len(),
        bytes,
        ms = t.elapsed().as_millis() as u64,
        "store files read into the page cache"
    );
    Warmed {
        files: files.len(),
        bytes,
        skipped: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_vectors_and_payload_pages_of_every_segment_only() {
        let dir = tempfile::tempdir().unwrap();
        let shard = dir.path();
        for seg in ["a", "b"] {
            let s = shard.join("segments").join(seg);
            std::fs::create_dir_all(s.join("vector_storage-dense")).unwrap();
            std::fs::create_dir_all(s.join("payload_storage")).unwrap();
            std::fs::create_dir_all(s.join("payload_index")).unwrap();
            std::fs::write(s.join("vector_storage-dense/matrix.dat"), [0u8; 10]).unwrap();
            std::fs::write(s.join("vector_storage-dense/quantized.data"), [0u8; 7]).unwrap();
            std::fs::write(s.join("payload_storage/page_0.dat"), [0u8; 3]).unwrap();
            std::fs::write(s.join("payload_storage/tracker.dat"), [0u8; 5]).unwrap();
            std::fs::write(s.join("payload_storage/bitmask.dat"), [0u8; 2]).unwrap();
            std::fs::write(s.join("payload_index/page_0.dat"), [0u8; 5]).unwrap();
        }
        let files = hit_files(shard);
        let names: Vec<String> = files
            .iter()
            .map(|(p, _)| {
                p.strip_prefix(shard.join("segments"))
                    .unwrap()
                    .display()
                    .to_string()
            })
            .collect();
        assert_eq!(
            names,
            [
                "a/payload_storage/page_0.dat",
                "a/payload_storage/tracker.dat",
                "a/vector_storage-dense/matrix.dat",
                "b/payload_storage/page_0.dat",
                "b/payload_storage/tracker.dat",
                "b/vector_storage-dense/matrix.dat",
            ]
        );
        let w = warm(shard);
        assert_eq!(
            w,
            Warmed {
                files: 6,
                bytes: 36,
                skipped: false
            }
        );
    }

    #[test]
    fn a_shard_without_segments_reads_nothing() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            warm(dir.path()),
            Warmed {
                files: 0,
                bytes: 0,
                skipped: false
            }
        );
    }
}
