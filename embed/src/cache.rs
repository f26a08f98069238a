//! On-disk embedding cache of document texts, bounded, with purging.
//!
//! File layout: an 8-byte magic, the dimension (u32 LE), then records of a 16-byte key and
//! `dim` little-endian f32. A record is appended only after its vector was computed; a crash
//! can leave at most one torn record at the tail, which loading ignores (and the next append
//! truncates away), so the cache never serves a partial vector.
//!
//! Bounds: at most `max_entries` vectors (memory and disk). When an append passes the bound
//! the least recently used quarter is evicted and the file is rewritten (compaction: a
//! temporary file, fsync, atomic rename), so both the map and the file stay bounded.
//!
//! Purging: [`EmbeddingCache::purge`] removes the vectors of texts that were hard-forgotten
//! and compacts at once, so their bytes leave the file too (an embedding can leak its text).
//!
//! Only document texts are cached: query vectors are computed per request and never
//! persisted (a log of what users asked is not the cache's business).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use crate::Result;

const MAGIC: &[u8; 8] = b"CAIRNEC1";

/// Default bound on cached vectors (bge-small: 1.5 KiB each, so about 75 MiB).
pub const DEFAULT_MAX_ENTRIES: usize = 50_000;

/// Cache key of a text under a model: 128 bits of sha256(model id, text).
pub type CacheKey = [u8; 16];

/// A persistent, bounded map from (model, text) to embedding.
#[derive(Debug)]
pub struct EmbeddingCache {
    path: PathBuf,
    dim: usize,
    max_entries: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Entry {
    vector: Vec<f32>,
    /// Logical clock of the last use, for LRU eviction.
    used: u64,
}

#[derive(Debug)]
struct Inner {
    map: HashMap<CacheKey, Entry>,
    file: File,
    clock: u64,
}

impl EmbeddingCache {
    /// Opens (or creates) the cache file for one model, bounded to `max_entries` vectors.
    pub fn open(path: &Path, dim: usize, max_entries: usize) -> Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let record = 16 + dim * 4;
        let mut map = HashMap::new();
        let mut clock = 0u64;
        let header_ok = bytes.len() >= 12
            && &bytes[..8] == MAGIC
            && u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize == dim;
        let valid_len = if header_ok {
            let n = (bytes.len() - 12) / record;
            for i in 0..n {
                let rec = &bytes[12 + i * record..12 + (i + 1) * record];
                let mut key = [0u8; 16];
                key.copy_from_slice(&rec[..16]);
                let vector = rec[16..]
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                // Later records are newer: file order is a fair first LRU order.
                clock += 1;
                map.insert(
                    key,
                    Entry {
                        vector,
                        used: clock,
                    },
                );
            }
            12 + n * record
        } else {
            // Missing, foreign or for another dimension: start over.
            file.set_len(0)?;
            file.seek(SeekFrom::Start(0))?;
            file.write_all(MAGIC)?;
            file.write_all(&(dim as u32).to_le_bytes())?;
            12
        };
        // Drop a torn tail record so appends stay aligned.
        file.set_len(valid_len as u64)?;
        file.seek(SeekFrom::End(0))?;
        let cache = EmbeddingCache {
            path: path.to_path_buf(),
            dim,
            max_entries: max_entries.max(1),
            inner: Mutex::new(Inner { map, file, clock }),
        };
        {
            // A cache written under a larger bound (or by an older, unbounded version).
            let mut inner = cache.lock();
            if inner.map.len() > cache.max_entries {
                cache.evict_and_compact(&mut inner)?;
            }
        }
        Ok(cache)
    }

    pub fn key(model_id: &str, text: &str) -> CacheKey {
        let mut h = Sha256::new();
        h.update(model_id.as_bytes());
        h.update([0u8]);
        h.update(text.as_bytes());
        let digest = h.finalize();
        let mut key = [0u8; 16];
        key.copy_from_slice(&digest[..16]);
        key
    }

    pub fn get(&self, key: &CacheKey) -> Option<Vec<f32>> {
        let mut inner = self.lock();
        inner.clock += 1;
        let now = inner.clock;
        inner.map.get_mut(key).map(|e| {
            e.used = now;
            e.vector.clone()
        })
    }

    /// Stores vectors; written to the file before returning. May evict and compact.
    pub fn put_many(&self, entries: &[(CacheKey, Vec<f32>)]) -> Result<()> {
        let mut inner = self.lock();
        let mut buf = Vec::with_capacity(entries.len() * (16 + self.dim * 4));
        let mut fresh = std::collections::HashSet::new();
        for (key, v) in entries {
            if v.len() != self.dim || inner.map.contains_key(key) || fresh.contains(key) {
                continue;
            }
            buf.extend_from_slice(key);
            for x in v {
                buf.extend_from_slice(&x.to_le_bytes());
            }
            fresh.insert(*key);
        }
        if buf.is_empty() {
            return Ok(());
        }
        let end = inner.file.stream_position()?;
        if let Err(e) = inner.file.write_all(&buf) {
            // A partial append (a full disk) would leave every later record misaligned: cut
            // the file back to its last whole record. The entries stay out of the map.
            let _ = inner.file.set_len(end);
            let _ = inner.file.seek(SeekFrom::Start(end));
            return Err(e.into());
        }
        for (key, v) in entries {
            if v.len() == self.dim && fresh.contains(key) {
                inner.clock += 1;
                let used = inner.clock;
                inner.map.insert(
                    *key,
                    Entry {
                        vector: v.clone(),
                        used,
                    },
                );
            }
        }
        if inner.map.len() > self.max_entries {
            self.evict_and_compact(&mut inner)?;
        }
        Ok(())
    }

    /// Removes these keys' vectors from memory and from the file (the file is rewritten
    /// when any was present). Returns how many were removed.
    pub fn purge(&self, keys: &[CacheKey]) -> Result<usize> {
        let mut inner = self.lock();
        let removed = keys
            .iter()
            .filter(|k| inner.map.remove(*k).is_some())
            .count();
        if removed > 0 {
            self.compact(&mut inner)?;
        }
        Ok(removed)
    }

    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn max_entries(&self) -> usize {
        self.max_entries
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keeps the most recently used three quarters of the bound, then compacts. Evicting a
    /// quarter at a time makes the rewrite cost amortized over many appends.
    fn evict_and_compact(&self, inner: &mut Inner) -> Result<()> {
        let keep = self.max_entries - self.max_entries / 4;
        if inner.map.len() > keep {
            let mut uses: Vec<u64> = inner.map.values().map(|e| e.used).collect();
            let cut = uses.len() - keep;
            let (_, nth, _) = uses.select_nth_unstable(cut - 1);
            let threshold = *nth;
            inner.map.retain(|_, e| e.used > threshold);
        }
        self.compact(inner)
    }

    /// Rewrites the file with exactly the entries in memory: a temporary file, fsync,
    /// rename over the old one. A crash leaves either file, both valid.
    fn compact(&self, inner: &mut Inner) -> Result<()> {
        let tmp = self.path.with_extension("compact");
        let mut entries: Vec<(&CacheKey, &Entry)> = inner.map.iter().collect();
        entries.sort_by_key(|(_, e)| e.used);
        let mut buf: Vec<u8> = Vec::with_capacity(12 + entries.len() * (16 + self.dim * 4));
        buf.extend_from_slice(MAGIC);
        buf.extend_from_slice(&(self.dim as u32).to_le_bytes());
        for (key, e) in entries {
            buf.extend_from_slice(key.as_slice());
            for x in &e.vector {
                buf.extend_from_slice(&x.to_le_bytes());
            }
        }
        {
            let mut f = File::create(&tmp)?;
            f.write_all(&buf)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            // Make the rename itself durable; best effort where directories cannot be opened.
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        let mut file = OpenOptions::new().read(true).write(true).open(&self.path)?;
        file.seek(SeekFrom::End(0))?;
        inner.file = file;
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the map inconsistent with the file in
        // a harmful way (the map is only extended after the write), so poison is ignored.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn persists_and_ignores_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.bin");
        let k1 = EmbeddingCache::key("m", "a");
        let k2 = EmbeddingCache::key("m", "b");
        {
            let c = EmbeddingCache::open(&path, 3, 100).unwrap();
            c.put_many(&[(k1, vec![1.0, 2.0, 3.0]), (k2, vec![4.0, 5.0, 6.0])])
                .unwrap();
        }
        // Tear the last record.
        let len = std::fs::metadata(&path).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len - 5)
            .unwrap();
        let c = EmbeddingCache::open(&path, 3, 100).unwrap();
        assert_eq!(c.get(&k1), Some(vec![1.0, 2.0, 3.0]));
        assert_eq!(c.get(&k2), None);
        c.put_many(&[(k2, vec![7.0, 8.0, 9.0])]).unwrap();
        drop(c);
        let c = EmbeddingCache::open(&path, 3, 100).unwrap();
        assert_eq!(c.get(&k2), Some(vec![7.0, 8.0, 9.0]));
        assert_eq!(c.len(), 2);
        // Another dimension starts a fresh cache instead of misreading.
        let c4 = EmbeddingCache::open(&path, 4, 100).unwrap();
        assert!(c4.is_empty());
    }

    #[test]
    fn stays_bounded_and_evicts_the_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.bin");
        let c = EmbeddingCache::open(&path, 2, 8).unwrap();
        let key = |i: usize| EmbeddingCache::key("m", &i.to_string());
        for i in 0..8 {
            c.put_many(&[(key(i), vec![i as f32, 0.0])]).unwrap();
        }
        // Use 0 and 1 again: they become the most recent.
        assert!(c.get(&key(0)).is_some() && c.get(&key(1)).is_some());
        for i in 8..40 {
            c.put_many(&[(key(i), vec![i as f32, 0.0])]).unwrap();
            assert!(c.len() <= 8, "bound exceeded: {}", c.len());
        }
        let record = 16 + 2 * 4;
        let on_disk = std::fs::metadata(&path).unwrap().len() as usize;
        assert!(
            on_disk <= 12 + 8 * record,
            "file not bounded: {on_disk} bytes"
        );
        // The newest are kept; the file agrees with memory after a reopen.
        assert!(c.get(&key(39)).is_some());
        assert!(c.get(&key(2)).is_none());
        let n = c.len();
        drop(c);
        let c = EmbeddingCache::open(&path, 2, 8).unwrap();
        assert_eq!(c.len(), n);
        assert_eq!(c.get(&key(39)), Some(vec![39.0, 0.0]));
        // Reopening with a smaller bound shrinks it.
        drop(c);
        let c = EmbeddingCache::open(&path, 2, 3).unwrap();
        assert!(c.len() <= 3);
    }

    #[test]
    fn purge_removes_the_bytes_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.bin");
        let c = EmbeddingCache::open(&path, 2, 100).unwrap();
        let secret = EmbeddingCache::key("m", "secret");
        let other = EmbeddingCache::key("m", "other");
        c.put_many(&[(secret, vec![1.25, 2.5]), (other, vec![3.0, 4.0])])
            .unwrap();
        assert_eq!(c.purge(&[secret]).unwrap(), 1);
        assert_eq!(c.purge(&[secret]).unwrap(), 0);
        assert!(c.get(&secret).is_none());
        let bytes = std::fs::read(&path).unwrap();
        assert!(
            !bytes.windows(16).any(|w| w == secret),
            "the purged key is still in the file"
        );
        // Appends after a compaction land in the new file.
        let third = EmbeddingCache::key("m", "third");
        c.put_many(&[(third, vec![5.0, 6.0])]).unwrap();
        drop(c);
        let c = EmbeddingCache::open(&path, 2, 100).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(&third), Some(vec![5.0, 6.0]));
        assert_eq!(c.get(&other), Some(vec![3.0, 4.0]));
    }
}
