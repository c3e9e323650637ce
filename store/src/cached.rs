//! A worker's local read-through cache of a blob store: blobs this worker
//! read or wrote are kept on its disk, bounded by a byte budget, least recently used first out,
//! so a run restoring a tree the worker has seen (the same repository at another commit, an
//! environment it set up or restored) downloads only the files it lacks.
//!
//! Blobs are content-addressed, so a cached copy is never stale: it is verified against its id
//! on every read (a corrupt one is dropped and read from the store again). References are
//! mutable and always go to the store. Use is recorded as the file's modification time, which
//! eviction sorts by.

use std::{
    fs,
    io::{self, Write},
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::SystemTime,
};

use crate::{BlobId, BlobStore, SharedStore, StoreError};

/// What a [`CachedStore`] did, for logs and benchmarks.
#[derive(Debug, Default)]
pub struct CacheCounters {
    /// Reads answered from the local copy.
    pub hits: AtomicU64,
    /// Reads that went to the store.
    pub misses: AtomicU64,
    /// Bytes read from the store.
    pub downloaded_bytes: AtomicU64,
}

/// A blob store with a local read-through cache.
#[derive(Debug)]
pub struct CachedStore {
    inner: SharedStore,
    local: Arc<LocalCache>,
    counters: Arc<CacheCounters>,
}

/// The cache's directory and budget (file-system work, run off the async threads).
#[derive(Debug)]
struct LocalCache {
    dir: PathBuf,
    budget: u64,
    /// Bytes the cache holds (as far as this process knows: counted at start and on insert).
    used: AtomicU64,
    /// One eviction at a time.
    evicting: Mutex<()>,
}

impl CachedStore {
    /// `inner` with a cache of at most `budget` bytes in `dir` (created if missing; what an
    /// earlier process left there is kept and counted).
    pub fn new(inner: SharedStore, dir: &Path, budget: u64) -> Result<Self, StoreError> {
        fs::create_dir_all(dir).map_err(|e| {
            StoreError::Config(format!(
                "cannot create the blob cache directory {} (set store.cache_dir to a writable \
                 directory, or store.cache_bytes = 0 to turn the cache off): {e}",
                dir.display()
            ))
        })?;
        let used = entries(dir).iter().map(|e| e.1).sum();
        Ok(Self {
            inner,
            local: Arc::new(LocalCache {
                dir: dir.to_path_buf(),
                budget,
                used: AtomicU64::new(used),
                evicting: Mutex::new(()),
            }),
            counters: Arc::default(),
        })
    }

    /// What the cache did so far.
    pub fn counters(&self) -> Arc<CacheCounters> {
        self.counters.clone()
    }

    /// Bytes the cache holds.
    pub fn used_bytes(&self) -> u64 {
        self.local.used.load(Ordering::Relaxed)
    }
}

impl LocalCache {
    fn path_of(&self, id: &BlobId) -> PathBuf {
        let (dir, file) = id.as_str().split_at(2);
        self.dir.join(dir).join(file)
    }

    /// The cached copy of `id`, if there is a sound one (its use recorded).
    fn read_local(&self, id: &BlobId) -> Option<Vec<u8>> {
        let path = self.path_of(id);
        let bytes = fs::read(&path).ok()?;
        if BlobId::of(&bytes) != *id {
            let _ = fs::remove_file(&path);
            return None;
        }
        if let Ok(file) = fs::File::options().write(true).open(&path) {
            let _ = file.set_modified(SystemTime::now());
        }
        Some(bytes)
    }

    /// Keeps a copy of `bytes` (best effort: a full disk only costs the cache).
    fn keep(&self, id: &BlobId, bytes: &[u8]) {
        if self.budget == 0 || bytes.len() as u64 > self.budget / 4 {
            return;
        }
        let path = self.path_of(id);
        if path.exists() {
            return;
        }
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let dir = path.parent().unwrap_or(&self.dir).to_path_buf();
        let tmp = dir.join(format!(
            ".tmp.{}.{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let written = (|| -> io::Result<()> {
            fs::create_dir_all(&dir)?;
            let mut file = fs::File::create(&tmp)?;
            file.write_all(bytes)?;
            drop(file);
            fs::rename(&tmp, &path)
        })();
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        if written.is_ok() {
            let used =
                self.used.fetch_add(bytes.len() as u64, Ordering::Relaxed) + bytes.len() as u64;
            if used > self.budget {
                self.evict();
            }
        }
    }

    /// Removes the least recently used blobs until the cache holds at most 80% of its budget.
    fn evict(&self) {
        let Ok(_one) = self.evicting.try_lock() else {
            return;
        };
        let mut all = entries(&self.dir);
        all.sort_by_key(|e| e.2);
        let mut used: u64 = all.iter().map(|e| e.1).sum();
        let target = self.budget / 10 * 8;
        for (path, size, _) in all {
            if used <= target {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                used -= size;
            }
        }
        self.used.store(used, Ordering::Relaxed);
    }
}

/// The cached blobs under `dir`: (path, size, last use).
fn entries(dir: &Path) -> Vec<(PathBuf, u64, SystemTime)> {
    let mut out = Vec::new();
    let Ok(top) = fs::read_dir(dir) else {
        return out;
    };
    for sub in top.flatten() {
        let Ok(files) = fs::read_dir(sub.path()) else {
            continue;
        };
        for file in files.flatten() {
            if let Ok(meta) = file.metadata()
                && meta.is_file()
                && !file.file_name().to_string_lossy().starts_with(".tmp.")
            {
                let used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                out.push((file.path(), meta.len(), used));
            }
        }
    }
    out
}

async fn blocking<T: Send + 'static>(op: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(op).await.ok()
}

#[async_trait::async_trait]
impl BlobStore for CachedStore {
    async fn put(&self, bytes: Vec<u8>) -> Result<BlobId, StoreError> {
        let id = self.inner.put(bytes.clone()).await?;
        // Written by this worker: likely read again soon (its own runs' snapshots).
        let local = self.local.clone();
        let kept_id = id.clone();
        blocking(move || local.keep(&kept_id, &bytes)).await;
        Ok(id)
    }

    async fn get(&self, id: &BlobId) -> Result<Vec<u8>, StoreError> {
        let local = self.local.clone();
        let wanted = id.clone();
        if let Some(Some(bytes)) = blocking(move || local.read_local(&wanted)).await {
            self.counters.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(bytes);
        }
        let bytes = self.inner.get(id).await?;
        self.counters.misses.fetch_add(1, Ordering::Relaxed);
        self.counters
            .downloaded_bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        let local = self.local.clone();
        let (kept_id, kept) = (id.clone(), bytes.clone());
        blocking(move || local.keep(&kept_id, &kept)).await;
        Ok(bytes)
    }

    async fn contains(&self, id: &BlobId) -> Result<bool, StoreError> {
        // A local copy proves nothing about the store (it may have lost the blob): ask it.
        self.inner.contains(id).await
    }

    async fn put_ref(&self, name: &str, id: &BlobId) -> Result<(), StoreError> {
        self.inner.put_ref(name, id).await
    }

    async fn get_ref(&self, name: &str) -> Result<Option<BlobId>, StoreError> {
        self.inner.get_ref(name).await
    }

    fn describe(&self) -> String {
        format!(
            "{} (cached in {})",
            self.inner.describe(),
            self.local.dir.display()
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::LocalStore;

    fn stores(budget: u64) -> (tempfile::TempDir, CachedStore) {
        let dir = tempfile::tempdir().unwrap();
        let inner: SharedStore = Arc::new(LocalStore::new(dir.path().join("store")).unwrap());
        let cached = CachedStore::new(inner, &dir.path().join("cache"), budget).unwrap();
        (dir, cached)
    }

    #[tokio::test]
    async fn a_blob_read_twice_is_downloaded_once_and_a_written_one_not_at_all() {
        let (_dir, store) = stores(1 << 20);
        let written = store.put(b"written here".to_vec()).await.unwrap();
        assert_eq!(store.get(&written).await.unwrap(), b"written here");
        let counters = store.counters();
        assert_eq!(
            counters.misses.load(Ordering::Relaxed),
            0,
            "a blob this worker wrote is local"
        );

        // A blob another worker wrote: read once from the store, then locally.
        let dir = tempfile::tempdir().unwrap();
        let inner = Arc::new(LocalStore::new(dir.path()).unwrap());
        let cached = CachedStore::new(inner.clone(), &dir.path().join("cache"), 1 << 20).unwrap();
        let id = inner.put(b"from elsewhere".to_vec()).await.unwrap();
        for _ in 0..3 {
            assert_eq!(cached.get(&id).await.unwrap(), b"from elsewhere");
        }
        let c = cached.counters();
        assert_eq!(
            (
                c.misses.load(Ordering::Relaxed),
                c.hits.load(Ordering::Relaxed)
            ),
            (1, 2)
        );
        assert_eq!(c.downloaded_bytes.load(Ordering::Relaxed), 14);
    }

    #[tokio::test]
    async fn a_corrupt_copy_is_dropped_and_read_again() {
        let (_dir, store) = stores(1 << 20);
        let id = store.put(b"content".to_vec()).await.unwrap();
        fs::write(store.local.path_of(&id), b"garbage").unwrap();
        assert_eq!(store.get(&id).await.unwrap(), b"content");
        assert_eq!(store.counters().misses.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn the_budget_evicts_the_least_recently_used() {
        let (_dir, store) = stores(4_000);
        let mut ids = Vec::new();
        for i in 0..4u8 {
            ids.push(store.put(vec![i; 900]).await.unwrap());
            // Distinct use times.
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // The first is used again: the second is now the least recently used.
        store.get(&ids[0]).await.unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        store.put(vec![9; 900]).await.unwrap();
        assert!(store.used_bytes() <= 3_200, "{}", store.used_bytes());
        assert!(store.local.path_of(&ids[0]).exists(), "recently used stays");
        assert!(
            !store.local.path_of(&ids[1]).exists(),
            "least recently used goes"
        );
        // Evicted blobs are still in the store.
        assert_eq!(store.get(&ids[1]).await.unwrap(), vec![1; 900]);
    }
}
