//! The local backend: one file per blob under a directory, `root/<first 2 hex>/<other 62>`.
//!
//! Writes go to a uniquely named temporary file in the blob's directory, are synced, then
//! renamed into place, so a reader never sees a partial blob and any number of writers
//! (tasks or processes, even on a shared volume) may store the same blob at once: each
//! rename installs identical bytes. A blob that already exists is not rewritten.

use std::{
    fs, io,
    io::Write,
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
};

use crate::{BlobId, BlobStore, StoreError};

/// Temporary files of this process get distinct names from this counter (and the pid).
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A blob store in a local (or shared) directory.
#[derive(Debug, Clone)]
pub struct LocalStore {
    root: PathBuf,
}

impl LocalStore {
    /// A store rooted at `root`, which is created (with its parents) if missing.
    pub fn new(root: impl Into<PathBuf>) -> Result<Self, StoreError> {
        let root = root.into();
        fs::create_dir_all(&root).map_err(|e| {
            StoreError::Config(format!(
                "cannot create the blob directory {} (set store.dir to a writable directory): {e}",
                root.display()
            ))
        })?;
        if !root.is_dir() {
            return Err(StoreError::Config(format!(
                "the blob directory {} is not a directory (set store.dir to a directory)",
                root.display()
            )));
        }
        Ok(Self { root })
    }

    /// The directory the blobs live in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where blob `id` lives: `root/<first 2 hex>/<rest>`.
    pub fn path_of(&self, id: &BlobId) -> PathBuf {
        let (dir, file) = id.as_str().split_at(2);
        self.root.join(dir).join(file)
    }
}

fn backend(op: String, e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend {
        op,
        detail: e.to_string(),
    }
}

fn short(id: &BlobId) -> &str {
    id.as_str().get(..12).unwrap_or(id.as_str())
}

/// Runs blocking file-system work off the async runtime.
async fn blocking<T: Send + 'static>(
    op: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(op)
        .await
        .map_err(|e| backend("blocking file-system task".to_owned(), e))?
}

/// Writes `bytes` to `path` atomically (temp file in the same directory + rename), unless
/// `path` already exists.
fn write_atomic(path: &Path, bytes: &[u8], id: &BlobId) -> Result<(), StoreError> {
    let op = || format!("write of blob {}.. to {}", short(id), path.display());
    if path.try_exists().map_err(|e| backend(op(), e))? {
        return Ok(());
    }
    let dir = path
        .parent()
        .ok_or_else(|| backend(op(), "the blob path has no parent directory"))?;
    fs::create_dir_all(dir).map_err(|e| backend(op(), e))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Temp names are unique per process (pid + counter) and, across hosts sharing a volume
    // (where pids repeat), made unlikely to collide by the clock; a collision is retried.
    let mut attempt = 0;
    let (tmp, mut file) = loop {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let tmp = dir.join(format!(
            ".{name}.{}.{}.{nanos:x}.tmp",
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
        {
            Ok(file) => break (tmp, file),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 8 => attempt += 1,
            Err(e) => return Err(backend(op(), e)),
        }
    };
    let written = (|| -> io::Result<()> {
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)?;
        // Make the new directory entry durable too.
        fs::File::open(dir)?.sync_all()
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(backend(op(), e));
    }
    Ok(())
}

#[async_trait::async_trait]
impl BlobStore for LocalStore {
    async fn put(&self, bytes: Vec<u8>) -> Result<BlobId, StoreError> {
        let id = BlobId::of(&bytes);
        let path = self.path_of(&id);
        let for_write = id.clone();
        blocking(move || write_atomic(&path, &bytes, &for_write)).await?;
        Ok(id)
    }

    async fn get(&self, id: &BlobId) -> Result<Vec<u8>, StoreError> {
        let path = self.path_of(id);
        let id = id.clone();
        blocking(move || match fs::read(&path) {
            Ok(bytes) if BlobId::of(&bytes) == id => Ok(bytes),
            Ok(_) => Err(StoreError::Corrupt(id)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(StoreError::NotFound(id)),
            Err(e) => Err(backend(
                format!("read of blob {}.. from {}", short(&id), path.display()),
                e,
            )),
        })
        .await
    }

    async fn contains(&self, id: &BlobId) -> Result<bool, StoreError> {
        let path = self.path_of(id);
        let id = id.clone();
        blocking(move || {
            path.try_exists().map_err(|e| {
                backend(
                    format!("lookup of blob {}.. in {}", short(&id), path.display()),
                    e,
                )
            })
        })
        .await
    }

    async fn put_ref(&self, name: &str, id: &BlobId) -> Result<(), StoreError> {
        crate::blob::check_ref_name(name)?;
        let path = self.root.join("refs").join(name);
        let value = id.to_string();
        blocking(move || replace_file(&path, value.as_bytes())).await
    }

    async fn get_ref(&self, name: &str) -> Result<Option<BlobId>, StoreError> {
        crate::blob::check_ref_name(name)?;
        let path = self.root.join("refs").join(name);
        blocking(move || match fs::read_to_string(&path) {
            Ok(text) => BlobId::parse(text.trim()).map(Some),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(backend(format!("read of reference {}", path.display()), e)),
        })
        .await
    }

    fn describe(&self) -> String {
        format!("local:{}", self.root.display())
    }
}

/// Writes `bytes` to `path`, replacing what is there atomically (temp file + rename).
fn replace_file(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let op = || format!("write of reference {}", path.display());
    let dir = path
        .parent()
        .ok_or_else(|| backend(op(), "the reference path has no parent directory"))?;
    fs::create_dir_all(dir).map_err(|e| backend(op(), e))?;
    let tmp = dir.join(format!(
        ".ref.{}.{}.tmp",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let written = fs::write(&tmp, bytes).and_then(|()| fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(backend(op(), e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use super::*;
    use crate::{get_json, put_json};

    fn store() -> (tempfile::TempDir, LocalStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path().join("blobs")).unwrap();
        (dir, store)
    }

    #[tokio::test]
    async fn roundtrip_uses_the_two_level_layout() {
        let (_dir, store) = store();
        let id = store.put(b"hello blob".to_vec()).await.unwrap();
        assert_eq!(id, BlobId::of(b"hello blob"));
        let path = store.root().join(&id.as_str()[..2]).join(&id.as_str()[2..]);
        assert!(path.is_file(), "{}", path.display());
        assert_eq!(store.get(&id).await.unwrap(), b"hello blob");
        assert!(store.contains(&id).await.unwrap());

        let empty = store.put(Vec::new()).await.unwrap();
        assert_eq!(store.get(&empty).await.unwrap(), Vec::<u8>::new());

        let value = serde_json::json!({"turns": [1, 2, 3]});
        let jid = put_json(&store, &value).await.unwrap();
        let back: serde_json::Value = get_json(&store, &jid).await.unwrap();
        assert_eq!(back, value);
    }

    #[tokio::test]
    async fn put_is_idempotent_and_does_not_rewrite() {
        let (_dir, store) = store();
        let id = store.put(b"same".to_vec()).await.unwrap();
        let path = store.path_of(&id);
        let before = fs::metadata(&path).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(store.put(b"same".to_vec()).await.unwrap(), id);
        assert_eq!(fs::metadata(&path).unwrap().modified().unwrap(), before);
        let files: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(files.len(), 1, "no temp files left behind: {files:?}");
    }

    #[tokio::test]
    async fn references_are_set_replaced_and_read_back() {
        let (_dir, store) = store();
        assert_eq!(store.get_ref("env/abc").await.unwrap(), None);
        let (a, b) = (BlobId::of(b"a"), BlobId::of(b"b"));
        store.put_ref("env/abc", &a).await.unwrap();
        assert_eq!(store.get_ref("env/abc").await.unwrap(), Some(a));
        store.put_ref("env/abc", &b).await.unwrap();
        assert_eq!(store.get_ref("env/abc").await.unwrap(), Some(b.clone()));
        for bad in ["", "../x", "env//x", "Env/x", "env/./x"] {
            assert!(store.put_ref(bad, &b).await.is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn missing_blob_is_not_found() {
        let (_dir, store) = store();
        let id = BlobId::of(b"never stored");
        assert!(matches!(
            store.get(&id).await,
            Err(StoreError::NotFound(missing)) if missing == id
        ));
        assert!(!store.contains(&id).await.unwrap());
    }

    #[tokio::test]
    async fn corrupt_blob_is_detected() {
        let (_dir, store) = store();
        let id = store.put(b"original".to_vec()).await.unwrap();
        fs::write(store.path_of(&id), b"tampered").unwrap();
        let err = store.get(&id).await.unwrap_err();
        assert!(
            matches!(&err, StoreError::Corrupt(bad) if *bad == id),
            "{err}"
        );
        assert!(err.to_string().contains("corrupt"), "{err}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_puts_of_the_same_blob_agree() {
        let (_dir, store) = store();
        let store = Arc::new(store);
        let bytes: Vec<u8> = (0..256 * 1024).map(|i| (i % 251) as u8).collect();
        let expected = BlobId::of(&bytes);
        let tasks: Vec<_> = (0..32)
            .map(|_| {
                let store = Arc::clone(&store);
                let bytes = bytes.clone();
                tokio::spawn(async move { store.put(bytes).await })
            })
            .collect();
        for task in tasks {
            assert_eq!(task.await.unwrap().unwrap(), expected);
        }
        assert_eq!(store.get(&expected).await.unwrap(), bytes);
        let dir = store.path_of(&expected);
        let files: Vec<_> = fs::read_dir(dir.parent().unwrap()).unwrap().collect();
        assert_eq!(files.len(), 1, "no temp files left behind: {files:?}");
    }

    #[test]
    fn new_fails_clearly_when_the_root_is_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("not-a-dir");
        fs::write(&file, b"x").unwrap();
        let err = LocalStore::new(&file).unwrap_err().to_string();
        assert!(err.contains("not-a-dir"), "{err}");
        assert!(err.contains("store.dir"), "{err}");
    }
}
