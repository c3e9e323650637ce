//! Test helpers shared by the snapshot tests: an in-memory store and workspace builders.
#![allow(clippy::unwrap_used)]

use std::{
    collections::BTreeMap,
    fs,
    os::unix::fs::{PermissionsExt, symlink},
    path::Path,
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, SystemTime},
};

use super::{LOCAL_DIR, child_path, executable};
use crate::{BlobId, BlobStore, StoreError};

/// An in-memory store counting puts.
#[derive(Debug, Default)]
pub(super) struct MemStore {
    blobs: Mutex<BTreeMap<BlobId, Vec<u8>>>,
    refs: Mutex<BTreeMap<String, BlobId>>,
    puts: AtomicUsize,
}

#[async_trait::async_trait]
impl BlobStore for MemStore {
    async fn put(&self, bytes: Vec<u8>) -> Result<BlobId, StoreError> {
        self.puts.fetch_add(1, Ordering::SeqCst);
        let id = BlobId::of(&bytes);
        self.blobs.lock().unwrap().insert(id.clone(), bytes);
        Ok(id)
    }

    async fn get(&self, id: &BlobId) -> Result<Vec<u8>, StoreError> {
        self.blobs
            .lock()
            .unwrap()
            .get(id)
            .cloned()
            .ok_or_else(|| StoreError::NotFound(id.clone()))
    }

    async fn contains(&self, id: &BlobId) -> Result<bool, StoreError> {
        Ok(self.blobs.lock().unwrap().contains_key(id))
    }

    async fn put_ref(&self, name: &str, id: &BlobId) -> Result<(), StoreError> {
        self.refs
            .lock()
            .unwrap()
            .insert(name.to_owned(), id.clone());
        Ok(())
    }

    async fn get_ref(&self, name: &str) -> Result<Option<BlobId>, StoreError> {
        Ok(self.refs.lock().unwrap().get(name).cloned())
    }

    fn describe(&self) -> String {
        "memory".to_owned()
    }
}

pub(crate) fn write(root: &Path, rel: &str, content: impl AsRef<[u8]>) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, content).unwrap();
}

pub(crate) fn chmod(root: &Path, rel: &str, mode: u32) {
    fs::set_permissions(root.join(rel), fs::Permissions::from_mode(mode)).unwrap();
}

/// Everything under `root` but `.baton` at the root, as path -> description.
pub(super) fn tree(root: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, rel: &str, out: &mut BTreeMap<String, String>) {
        for item in fs::read_dir(root.join(rel)).unwrap() {
            let name = item.unwrap().file_name().into_string().unwrap();
            if rel.is_empty() && name == LOCAL_DIR {
                continue;
            }
            let child = child_path(rel, &name);
            let path = root.join(&child);
            let meta = fs::symlink_metadata(&path).unwrap();
            let description = if meta.is_symlink() {
                format!("link -> {}", fs::read_link(&path).unwrap().display())
            } else if meta.is_dir() {
                walk(root, &child, out);
                "dir".to_owned()
            } else {
                let exec = if executable(&meta) { " (exec)" } else { "" };
                format!("file{exec}: {}", fs::read_to_string(&path).unwrap())
            };
            out.insert(child, description);
        }
    }
    let mut out = BTreeMap::new();
    walk(root, "", &mut out);
    out
}

/// Sets every file's mtime an hour back, so the cache may trust it.
pub(super) fn age(root: &Path) {
    let past = SystemTime::now() - Duration::from_secs(3600);
    for rel in tree(root).keys() {
        let path = root.join(rel);
        if fs::symlink_metadata(&path).unwrap().is_file() {
            fs::File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(past)
                .unwrap();
        }
    }
}

/// A workspace with a bit of everything.
pub(super) fn sample(root: &Path) {
    write(root, "README.md", "hello\n");
    write(root, "copy.md", "hello\n");
    write(root, "bin/run.sh", "#!/bin/sh\necho hi\n");
    chmod(root, "bin/run.sh", 0o755);
    write(root, "src/lib/mod.rs", "pub fn f() {}\n");
    write(root, "sub/.baton/kept", "only the root .baton is special\n");
    fs::create_dir_all(root.join("empty/inner")).unwrap();
    symlink("README.md", root.join("link")).unwrap();
    symlink("../nowhere", root.join("src/dangling")).unwrap();
    write(root, ".baton/private", "local state\n");
}

pub(super) fn puts(store: &MemStore) -> usize {
    store.puts.load(Ordering::SeqCst)
}
