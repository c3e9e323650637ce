//! Restoring a snapshot: make the tree match the manifest exactly, writing only what differs
//! and never through a symbolic link.

use nix::fcntl::OFlag;
use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    io::{self, Write},
    os::unix::fs::{MetadataExt, PermissionsExt},
    path::{Path, PathBuf},
    sync::Arc,
};

use futures::{StreamExt, TryStreamExt, stream};

use super::{
    LOCAL_DIR, Manifest, SnapshotError, SnapshotId, TRANSFER_CONCURRENCY, blocking,
    cache::{CacheEntry, LocalState, STATE_VERSION, Stamp, read_state, write_state},
    child_path, executable, hash_beneath, io_err, libc_errno,
    manifest::{Target, check_manifest},
    temp_name,
};
use crate::{BlobId, BlobStore, get_json};

/// What [`restore`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restored {
    /// Files whose content was written and symbolic links (re)created.
    pub written: usize,
    /// Entries removed because the snapshot does not have them (or has something of another
    /// kind there); a removed directory counts once, with its contents.
    pub deleted: usize,
    /// Directories created.
    pub dirs_created: usize,
    /// Files whose content was right but whose execute bits were changed.
    pub modes_fixed: usize,
    /// Files already matching the snapshot.
    pub unchanged: usize,
    /// Bytes of file content written.
    pub bytes_written: u64,
}

/// Makes the workspace at `root` match snapshot `id` exactly, then records `id` as the local
/// snapshot.
///
/// The manifest is validated before anything is touched ([`SnapshotError::BadManifest`] for
/// absolute paths, `.`/`..`/empty components, entries under `.baton`, entries whose parent is
/// not a directory of the snapshot). Then: entries the snapshot lacks or has as another kind
/// are deleted; directories are created; files whose content differs are written (temporary
/// file + rename) with their execute bits; symbolic links are recreated. Symbolic links in the
/// tree are never written through: one standing where the snapshot has a directory is removed.
/// `.baton` at the root is left alone. `root` is created if missing.
///
/// Expects no one else to write the tree meanwhile (the local cache is refreshed from what
/// was written). If it fails halfway, [`local_snapshot`] is `None` until a restore succeeds.
///
/// [`local_snapshot`]: super::local_snapshot
pub async fn restore(
    store: &dyn BlobStore,
    root: &Path,
    id: &SnapshotId,
) -> Result<Restored, SnapshotError> {
    let manifest: Manifest = get_json(store, id).await?;
    let targets = Arc::new(check_manifest(manifest)?);

    let (mut restored, writes) = {
        let (owned, targets) = (root.to_path_buf(), Arc::clone(&targets));
        blocking(root, move || reconcile(&owned, &targets)).await?
    };

    let written: Vec<(usize, u64)> = stream::iter(writes)
        .map(|(blob, dests)| async move {
            let bytes = store.get(&blob).await?;
            let owned = root.to_path_buf();
            blocking(root, move || {
                for (rel, executable) in &dests {
                    write_file(&owned, rel, &bytes, *executable)?;
                }
                Ok((dests.len(), bytes.len() as u64 * dests.len() as u64))
            })
            .await
        })
        .buffer_unordered(TRANSFER_CONCURRENCY)
        .try_collect()
        .await?;
    restored.written += written.iter().map(|w| w.0).sum::<usize>();
    restored.bytes_written += written.iter().map(|w| w.1).sum::<u64>();

    let (owned, id) = (root.to_path_buf(), id.clone());
    blocking(root, move || record_restored(&owned, &targets, &id)).await?;
    Ok(restored)
}

/// Files still to write: blob -> (path, executable).
type Writes = BTreeMap<BlobId, Vec<(String, bool)>>;

/// Deletes what the snapshot lacks, fixes modes, creates directories and links; returns the
/// files whose content must be written.
fn reconcile(
    root: &Path,
    targets: &BTreeMap<String, Target>,
) -> Result<(Restored, Writes), SnapshotError> {
    fs::create_dir_all(root).map_err(|e| io_err(root, "create the workspace root", e))?;
    let mut state = read_state(root);
    if state.last_snapshot.take().is_some() {
        write_state(root, &state)?;
    }

    let mut restored = Restored::default();
    let mut writes = Writes::new();
    // Entries already right (or scheduled for writing in place).
    let mut settled = BTreeSet::new();
    let mut stack = vec![String::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        let listing = fs::read_dir(&dir).map_err(|e| io_err(&dir, "list the directory", e))?;
        for item in listing {
            let item = item.map_err(|e| io_err(&dir, "list the directory", e))?;
            let name = item.file_name();
            if rel.is_empty() && name == LOCAL_DIR {
                continue;
            }
            let path = item.path();
            let Some(name) = name.to_str() else {
                remove_any(&path)?;
                restored.deleted += 1;
                continue;
            };
            let child = child_path(&rel, name);
            let meta = match fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err(&path, "inspect", e)),
            };
            let kind = meta.file_type();
            let keep = match targets.get(&child) {
                Some(Target::Dir) if kind.is_dir() => {
                    stack.push(child.clone());
                    true
                }
                Some(Target::Symlink { target }) if kind.is_symlink() => fs::read_link(&path)
                    .map(|t| t.as_os_str() == target.as_str())
                    .unwrap_or(false),
                Some(Target::File {
                    blob,
                    size,
                    executable: exec,
                }) if kind.is_file() => {
                    if meta.len() == *size
                        && current_blob(root, &state, &child, &path, &meta)?.as_ref() == Some(blob)
                    {
                        if executable(&meta) != *exec {
                            set_executable(&path, &meta, *exec)?;
                            restored.modes_fixed += 1;
                        } else {
                            restored.unchanged += 1;
                        }
                    } else {
                        writes
                            .entry(blob.clone())
                            .or_default()
                            .push((child.clone(), *exec));
                    }
                    true
                }
                _ => false,
            };
            if keep {
                settled.insert(child);
            } else {
                remove_any(&path)?;
                restored.deleted += 1;
            }
        }
    }

    // Parents sort before their children, so directories are created top-down.
    for (rel, target) in targets {
        if settled.contains(rel) {
            continue;
        }
        match target {
            Target::Dir => {
                let path = prepare_parents(root, rel)?;
                if make_real_dir(&path)? {
                    restored.dirs_created += 1;
                }
            }
            Target::Symlink { target } => {
                let path = prepare_parents(root, rel)?;
                if fs::symlink_metadata(&path).is_ok() {
                    remove_any(&path)?;
                }
                std::os::unix::fs::symlink(target, &path)
                    .map_err(|e| io_err(&path, "create the symbolic link", e))?;
                restored.written += 1;
            }
            Target::File {
                blob, executable, ..
            } => writes
                .entry(blob.clone())
                .or_default()
                .push((rel.clone(), *executable)),
        }
    }
    Ok((restored, writes))
}

/// The blob the file at `path` holds (from the cache when its stamp matches); `None` if it
/// cannot be read (it is then rewritten).
fn current_blob(
    root: &Path,
    state: &LocalState,
    rel: &str,
    path: &Path,
    meta: &fs::Metadata,
) -> Result<Option<BlobId>, SnapshotError> {
    if let Some(blob) = state
        .files
        .get(rel)
        .and_then(|c| c.blob_if(Stamp::of(meta)))
    {
        return Ok(Some(blob));
    }
    match hash_beneath(root, rel, u64::MAX) {
        Ok(found) => Ok(found.map(|(blob, _)| blob)),
        // Unreadable, or no longer a regular file reached without links: rewritten.
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Ok(None),
        Err(e)
            if crate::beneath::is_link_error(&e)
                || matches!(
                    e.raw_os_error(),
                    Some(libc_errno::EISDIR | libc_errno::EINVAL)
                ) =>
        {
            Ok(None)
        }
        Err(e) => Err(io_err(path, "read", e)),
    }
}

/// Removes whatever is at `path` without following symbolic links.
fn remove_any(path: &Path) -> Result<(), SnapshotError> {
    let result = match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    };
    result.map_err(|e| io_err(path, "remove", e))
}

/// Makes `path` a real directory (removing a file or symbolic link there); whether it was
/// created.
fn make_real_dir(path: &Path) -> Result<bool, SnapshotError> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => return Ok(false),
        Ok(_) => remove_any(path)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(path, "inspect", e)),
    }
    fs::create_dir(path).map_err(|e| io_err(path, "create the directory", e))?;
    Ok(true)
}

/// Makes every parent of `rel` (a checked path) a real directory below `root`, so nothing is
/// written through a symbolic link; returns the absolute path of `rel`.
fn prepare_parents(root: &Path, rel: &str) -> Result<PathBuf, SnapshotError> {
    let mut path = root.to_path_buf();
    let mut components = rel.split('/').peekable();
    while let Some(component) = components.next() {
        path.push(component);
        if components.peek().is_some() {
            make_real_dir(&path)?;
        }
    }
    Ok(path)
}

/// Sets the execute bits of a file to its read bits (`exec`) or clears them.
fn set_executable(path: &Path, meta: &fs::Metadata, exec: bool) -> Result<(), SnapshotError> {
    let mode = meta.mode() & 0o7777;
    let mode = if exec {
        mode | ((mode & 0o444) >> 2) | 0o100
    } else {
        mode & !0o111
    };
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|e| io_err(path, "change the mode of", e))
}

/// Writes `bytes` to `rel` below `root` through a temporary file in the same directory. The
/// directory is reached beneath `root` without following links (a process of the
/// run may swap a parent for a link after `prepare_parents` made it real), so the write lands
/// in the workspace or fails.
fn write_file(root: &Path, rel: &str, bytes: &[u8], exec: bool) -> Result<(), SnapshotError> {
    let path = prepare_parents(root, rel)?;
    let rel_path = Path::new(rel);
    let (dir, name) = crate::beneath::Beneath::open(root)
        .and_then(|root| root.parent_of(rel_path))
        .map_err(|e| io_err(&path, "open the directory of", e))?;
    let tmp = std::ffi::OsString::from(temp_name());
    let written = dir
        .open_entry(
            &tmp,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL,
            if exec { 0o755 } else { 0o644 },
        )
        .and_then(|mut file| file.write_all(bytes));
    if let Err(e) = written {
        let _ = dir.remove_entry(&tmp, false);
        return Err(io_err(&path, "write", e));
    }
    if let Ok(meta) = fs::symlink_metadata(&path)
        && meta.is_dir()
    {
        remove_any(&path)?;
    }
    dir.rename_entry(&tmp, &name).map_err(|e| {
        let _ = dir.remove_entry(&tmp, false);
        io_err(&path, "replace", e)
    })
}

/// Records `id` as the local snapshot, caching the stamps of the files just restored.
fn record_restored(
    root: &Path,
    targets: &BTreeMap<String, Target>,
    id: &SnapshotId,
) -> Result<(), SnapshotError> {
    let mut files = BTreeMap::new();
    for (rel, target) in targets {
        if let Target::File { blob, .. } = target {
            let path = root.join(rel);
            let meta =
                fs::symlink_metadata(&path).map_err(|e| io_err(&path, "inspect restored", e))?;
            files.insert(rel.clone(), CacheEntry::new(Stamp::of(&meta), blob));
        }
    }
    write_state(
        root,
        &LocalState {
            version: STATE_VERSION,
            last_snapshot: Some(id.to_string()),
            files,
        },
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::os::unix::fs::symlink;

    use pretty_assertions::assert_eq;

    use super::*;
    use crate::{
        StoreError, put_json,
        snapshot::{
            Entry, MANIFEST_VERSION, local_snapshot, take,
            test_support::{MemStore, chmod, sample, tree, write},
        },
    };

    #[tokio::test]
    async fn take_then_restore_elsewhere_gives_an_identical_tree() {
        let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        sample(src.path());
        let store = MemStore::default();

        let taken = take(&store, src.path()).await.unwrap();
        assert_eq!(taken.files, 5);
        // README.md and copy.md share a blob.
        assert_eq!(taken.uploaded, 4);
        assert_eq!(taken.skipped, Vec::<String>::new());
        let manifest: Manifest = get_json(&store, &taken.id).await.unwrap();
        assert!(manifest.entries.keys().all(|p| !p.starts_with(".baton")));
        assert_eq!(manifest.entries.get("empty/inner"), Some(&Entry::Dir));

        let target = dst.path().join("elsewhere/ws");
        let restored = restore(&store, &target, &taken.id).await.unwrap();
        assert_eq!(tree(&target), tree(src.path()));
        assert_eq!(
            tree(&target).get("bin/run.sh").map(String::as_str),
            Some("file (exec): #!/bin/sh\necho hi\n")
        );
        assert_eq!(
            restored,
            Restored {
                written: 7,
                dirs_created: 7,
                bytes_written: restored.bytes_written,
                ..Restored::default()
            }
        );
        assert!(!target.join(".baton/private").exists());
    }

    #[tokio::test]
    async fn restore_fixes_extra_modified_and_misplaced_entries() {
        let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        sample(src.path());
        let store = MemStore::default();
        let taken = take(&store, src.path()).await.unwrap();

        let d = dst.path();
        sample(d);
        write(d, "extra.txt", "not in the snapshot\n");
        write(d, "extra-dir/deep/file", "nor this\n");
        write(d, "README.md", "modified\n");
        chmod(d, "bin/run.sh", 0o644);
        // A file where a directory should be, a directory where a file should be.
        fs::remove_dir_all(d.join("src")).unwrap();
        write(d, "src", "I am a file\n");
        fs::remove_file(d.join("copy.md")).unwrap();
        write(d, "copy.md/inside", "I am a directory\n");
        // A link where a file should be, a link with the wrong target.
        fs::remove_file(d.join("sub/.baton/kept")).unwrap();
        symlink("/etc/hostname", d.join("sub/.baton/kept")).unwrap();
        fs::remove_file(d.join("link")).unwrap();
        symlink("copy.md", d.join("link")).unwrap();
        fs::remove_dir_all(d.join("empty")).unwrap();

        let restored = restore(&store, d, &taken.id).await.unwrap();
        assert_eq!(tree(d), tree(src.path()));
        assert_eq!(
            restored,
            Restored {
                // README.md, copy.md, src/lib/mod.rs, sub/.baton/kept, link, src/dangling
                written: 6,
                // extra.txt, extra-dir, src (file), copy.md (dir), sub/.baton/kept, link
                deleted: 6,
                // src, src/lib, empty, empty/inner
                dirs_created: 4,
                modes_fixed: 1,
                unchanged: 0,
                bytes_written: restored.bytes_written,
            }
        );
        assert_eq!(
            fs::read_to_string(d.join(".baton/private")).unwrap(),
            "local state\n"
        );
    }

    #[tokio::test]
    async fn restore_over_a_matching_tree_changes_nothing() {
        let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        sample(src.path());
        sample(dst.path());
        let store = MemStore::default();
        let taken = take(&store, src.path()).await.unwrap();
        let restored = restore(&store, dst.path(), &taken.id).await.unwrap();
        assert_eq!(
            restored,
            Restored {
                unchanged: 5,
                ..Restored::default()
            }
        );
    }

    #[tokio::test]
    async fn restore_never_writes_through_a_symbolic_link() {
        let (src, dst, outside) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        write(src.path(), "d/f", "content\n");
        let store = MemStore::default();
        let taken = take(&store, src.path()).await.unwrap();

        symlink(outside.path(), dst.path().join("d")).unwrap();
        restore(&store, dst.path(), &taken.id).await.unwrap();
        assert_eq!(tree(dst.path()), tree(src.path()));
        assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 0);
    }

    #[tokio::test]
    async fn a_failed_restore_clears_the_local_snapshot() {
        let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        write(src.path(), "a.txt", "a\n");
        let store = MemStore::default();
        let first = take(&store, src.path()).await.unwrap();
        restore(&store, dst.path(), &first.id).await.unwrap();

        // A manifest whose blob is missing from the store.
        let manifest = Manifest {
            version: MANIFEST_VERSION,
            entries: [(
                "b.txt".to_owned(),
                Entry::File {
                    blob: BlobId::of(b"absent").to_string(),
                    size: 6,
                    executable: false,
                },
            )]
            .into(),
        };
        let id = put_json(&store, &manifest).await.unwrap();
        let err = restore(&store, dst.path(), &id).await.unwrap_err();
        assert!(matches!(err, SnapshotError::Store(StoreError::NotFound(_))));
        assert_eq!(local_snapshot(dst.path()), None);
    }
}
