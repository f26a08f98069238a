//! Append-only on-disk embedding cache.
//!
//! File layout: an 8-byte magic, the dimension (u32 LE), then records of a 16-byte key and
//! `dim` little-endian f32. A record is appended only after its vector was computed; a crash
//! can leave at most one torn record at the tail, which loading ignores (and the next append
//! truncates away), so the cache never serves a partial vector.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use crate::Result;

const MAGIC: &[u8; 8] = b"CAIRNEC1";

/// Cache key of a text under a model: 128 bits of sha256(model id, text).
pub type CacheKey = [u8; 16];

/// A persistent map from (model, text) to embedding.
#[derive(Debug)]
pub struct EmbeddingCache {
    path: PathBuf,
    dim: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    map: HashMap<CacheKey, Vec<f32>>,
    file: File,
}

impl EmbeddingCache {
    /// Opens (or creates) the cache file for one model.
    pub fn open(path: &Path, dim: usize) -> Result<Self> {
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
        let header_ok = bytes.len() >= 12
            && &bytes[..8] == MAGIC
            && u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize == dim;
        let valid_len = if header_ok {
            let n = (bytes.len() - 12) / record;
            for i in 0..n {
                let rec = &bytes[12 + i * record..12 + (i + 1) * record];
                let mut key = [0u8; 16];
                key.copy_from_slice(&rec[..16]);
                let v = rec[16..]
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                map.insert(key, v);
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
        Ok(EmbeddingCache {
            path: path.to_path_buf(),
            dim,
            inner: Mutex::new(Inner { map, file }),
        })
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
        self.lock().map.get(key).cloned()
    }

    /// Stores vectors; written to the file before returning.
    pub fn put_many(&self, entries: &[(CacheKey, Vec<f32>)]) -> Result<()> {
        let mut inner = self.lock();
        let mut buf = Vec::with_capacity(entries.len() * (16 + self.dim * 4));
        for (key, v) in entries {
            if v.len() != self.dim || inner.map.contains_key(key) {
                continue;
            }
            buf.extend_from_slice(key);
            for x in v {
                buf.extend_from_slice(&x.to_le_bytes());
            }
        }
        inner.file.write_all(&buf)?;
        for (key, v) in entries {
            if v.len() == self.dim {
                inner.map.insert(*key, v.clone());
            }
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the map inconsistent with the file in
        // a harmful way (the map is only extended after the write), so poison is ignored.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn persists_and_ignores_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.bin");
        let k1 = EmbeddingCache::key("m", "a");
        let k2 = EmbeddingCache::key("m", "b");
        {
            let c = EmbeddingCache::open(&path, 3).unwrap();
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
        let c = EmbeddingCache::open(&path, 3).unwrap();
        assert_eq!(c.get(&k1), Some(vec![1.0, 2.0, 3.0]));
        assert_eq!(c.get(&k2), None);
        c.put_many(&[(k2, vec![7.0, 8.0, 9.0])]).unwrap();
        drop(c);
        let c = EmbeddingCache::open(&path, 3).unwrap();
        assert_eq!(c.get(&k2), Some(vec![7.0, 8.0, 9.0]));
        assert_eq!(c.len(), 2);
        // Another dimension starts a fresh cache instead of misreading.
        let c4 = EmbeddingCache::open(&path, 4).unwrap();
        assert!(c4.is_empty());
    }
}
