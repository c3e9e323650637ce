//! Sending a scanned tree to the store, shared by [`take`] and [`upload_dir`]: ask which file
//! blobs the store lacks, upload those from the files (a file found changed since it was
//! hashed is recorded as found), then the manifest.
//!
//! [`take`]: fn@super::take
//! [`upload_dir`]: fn@super::upload_dir

use std::{
    collections::BTreeMap,
    io::{self, Read},
    path::Path,
};

use futures::{StreamExt, TryStreamExt, stream};

use super::{
    Entry, MANIFEST_VERSION, Manifest, SnapshotError, SnapshotId, TRANSFER_CONCURRENCY, blocking,
    io_err, libc_errno,
};
use crate::{BlobId, BlobStore};

/// Concurrent `contains` calls while sending a tree.
const CHECK_CONCURRENCY: usize = 16;

/// What [`send_blobs`] did.
#[derive(Debug, Default)]
pub(super) struct Sent {
    /// File blobs uploaded (the store lacked them).
    pub(super) uploaded: usize,
    /// Bytes of the uploaded file blobs.
    pub(super) bytes: u64,
    /// Paths whose entry was replaced or removed because the file changed since it was
    /// hashed; their earlier hash is no longer worth remembering.
    pub(super) changed: Vec<String>,
}

/// Uploads the blobs among `wanted` (blob -> the paths holding it) that the store lacks,
/// reading each from the first path that still holds it. Files found changed are updated in
/// `entries` (new content, stored too), removed if gone, or moved to `skipped` if they became
/// unreadable or bigger than `max` bytes.
pub(super) async fn send_blobs(
    store: &dyn BlobStore,
    root: &Path,
    wanted: BTreeMap<BlobId, Vec<String>>,
    max: u64,
    entries: &mut BTreeMap<String, Entry>,
    skipped: &mut Vec<String>,
) -> Result<Sent, SnapshotError> {
    let missing: Vec<(BlobId, Vec<String>)> = stream::iter(wanted)
        .map(|(id, paths)| async move {
            let present = store.contains(&id).await?;
            Ok::<_, SnapshotError>((!present).then_some((id, paths)))
        })
        .buffer_unordered(CHECK_CONCURRENCY)
        .try_filter_map(|found| async move { Ok(found) })
        .try_collect()
        .await?;
    let uploads: Vec<Upload> = stream::iter(missing)
        .map(|(id, paths)| upload(store, root, id, paths, max))
        .buffer_unordered(TRANSFER_CONCURRENCY)
        .try_collect()
        .await?;

    let mut sent = Sent::default();
    for upload in uploads {
        sent.uploaded += upload.uploaded;
        sent.bytes += upload.bytes;
        for (path, change) in upload.changed {
            match change {
                Changed::Now { blob, size } => {
                    let executable = matches!(
                        entries.get(&path),
                        Some(Entry::File {
                            executable: true,
                            ..
                        })
                    );
                    let entry = Entry::File {
                        blob: blob.to_string(),
                        size,
                        executable,
                    };
                    entries.insert(path.clone(), entry);
                }
                Changed::Gone => {
                    entries.remove(&path);
                }
                Changed::Skipped => {
                    entries.remove(&path);
                    skipped.push(path.clone());
                }
            }
            sent.changed.push(path);
        }
    }
    Ok(sent)
}

/// Stores the manifest of `entries` (unless it is `known`, a manifest the store is known to
/// hold) and returns its id with the number of regular files in it.
pub(super) async fn send_manifest(
    store: &dyn BlobStore,
    root: &Path,
    entries: BTreeMap<String, Entry>,
    known: Option<&SnapshotId>,
) -> Result<(SnapshotId, usize), SnapshotError> {
    let manifest = Manifest {
        version: MANIFEST_VERSION,
        entries,
    };
    let files = manifest
        .entries
        .values()
        .filter(|e| matches!(e, Entry::File { .. }))
        .count();
    let bytes = serde_json::to_vec(&manifest).map_err(|e| SnapshotError::Io {
        path: root.to_path_buf(),
        detail: format!("cannot encode the snapshot manifest: {e}"),
    })?;
    let expected = BlobId::of(&bytes);
    let id = if known == Some(&expected) {
        expected
    } else {
        store.put(bytes).await?
    };
    Ok((id, files))
}

/// The content of the regular file `rel` beneath `root` (reached without following links);
/// `None` if it holds more than `max` bytes.
fn read_limited(root: &Path, rel: &str, max: u64) -> io::Result<Option<Vec<u8>>> {
    let mut bytes = Vec::new();
    crate::beneath::open_regular_in(root, Path::new(rel))
        .map_err(|e| e.into_io())?
        .take(max.saturating_add(1))
        .read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= max).then_some(bytes))
}

/// A file found different while uploading from what was hashed.
enum Changed {
    /// It now holds this (already stored) content.
    Now { blob: BlobId, size: u64 },
    /// It is gone.
    Gone,
    /// It became unreadable or too big.
    Skipped,
}

#[derive(Default)]
struct Upload {
    uploaded: usize,
    bytes: u64,
    changed: Vec<(String, Changed)>,
}

enum FileRead {
    Bytes(Vec<u8>, BlobId),
    Gone,
    Skipped,
}

/// Uploads blob `id` from the first of `paths` that still holds it; paths found holding
/// something else are reported (with their new content stored).
async fn upload(
    store: &dyn BlobStore,
    root: &Path,
    id: BlobId,
    paths: Vec<String>,
    max: u64,
) -> Result<Upload, SnapshotError> {
    let mut out = Upload::default();
    for path in paths {
        let abs = root.join(&path);
        let (owned_root, rel) = (root.to_path_buf(), path.clone());
        let read = blocking(root, move || match read_limited(&owned_root, &rel, max) {
            Ok(Some(bytes)) => {
                let id = BlobId::of(&bytes);
                Ok(FileRead::Bytes(bytes, id))
            }
            Ok(None) => Ok(FileRead::Skipped),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(FileRead::Gone),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Ok(FileRead::Skipped),
            // Not a regular file any more (a link, a directory): left to a later snapshot.
            Err(e)
                if crate::beneath::is_link_error(&e)
                    || matches!(
                        e.raw_os_error(),
                        Some(libc_errno::EISDIR | libc_errno::EINVAL)
                    ) =>
            {
                Ok(FileRead::Skipped)
            }
            Err(e) => Err(io_err(&abs, "read", e)),
        })
        .await?;
        match read {
            FileRead::Bytes(bytes, actual) => {
                let size = bytes.len() as u64;
                if actual == id {
                    store.put(bytes).await?;
                    out.uploaded += 1;
                    out.bytes += size;
                    return Ok(out);
                }
                if !store.contains(&actual).await? {
                    store.put(bytes).await?;
                    out.uploaded += 1;
                    out.bytes += size;
                }
                out.changed
                    .push((path, Changed::Now { blob: actual, size }));
            }
            FileRead::Gone => out.changed.push((path, Changed::Gone)),
            FileRead::Skipped => out.changed.push((path, Changed::Skipped)),
        }
    }
    Ok(out)
}
