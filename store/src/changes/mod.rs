//! A run's change set: what differs between two workspace snapshots, as a git-style patch
//! that `git apply` accepts (in a git checkout or a plain directory), with per-file counts
//! like `git diff --numstat`; and [`extract`], which writes chosen files of a snapshot into a
//! directory (`baton download`).
//!
//! Only regular files and symbolic links are compared (git tracks no directories). Left out:
//! `.git` at any depth with everything under it, and paths ignored by the tree's
//! `.gitignore`/`.batonignore` files (those of the after snapshot for added and modified
//! paths, those of the base snapshot for deleted ones; see `ignore`). The patch is
//! deterministic: files sorted by path, full 40-hex blob ids on every `index` line.
//!
//! - `ignore`: the ignore rules of a snapshot ([`Rules`](ignore::Rules)).
//! - `patch`: one file's entry in the patch (headers, hunks, quoting, git blob ids).
//! - `binary`: `GIT binary patch` literals (zlib + git's base85).
//! - `stat`: [`diffstat`].
//! - `extract`: [`extract`].
//! - `merge`: [`merge`], a subagent's change set landed on its parent's tree (three-way, by file).
//! - `tests/`: round trips through real `git apply` (`apply.rs`), output next to git's own
//!   (`git_output.rs`), `extract` and refused manifests (`extract.rs`).

mod binary;
mod extract;
mod ignore;
mod merge;
mod patch;
mod stat;
#[cfg(test)]
mod tests;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::PathBuf,
};

use futures::{StreamExt, TryStreamExt, stream};

pub use extract::{Extracted, extract, git_dir_of};
pub use merge::{Entries, MergeError, Merged, merge, three_way};
pub use stat::diffstat;

use crate::{
    BlobId, BlobStore, StoreError, get_json,
    snapshot::{Manifest, SnapshotError, SnapshotId, Target, check_manifest},
};

/// Concurrent blob reads while computing a change set.
const FETCH_CONCURRENCY: usize = 4;

/// Failures of computing a change set or extracting files.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChangesError {
    /// The blob store failed (a snapshot or file blob is missing or unreadable).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A snapshot's manifest is malformed or unsafe (paths outside the root, unknown
    /// version, ..).
    #[error("snapshot manifest rejected: {0}")]
    BadManifest(String),
    /// A file could not be written while extracting, or something stands in the way (a file
    /// or symbolic link where a directory is needed, a directory where a file goes).
    #[error("extract: {}: {detail}", path.display())]
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// What failed and what to do.
        detail: String,
    },
}

/// How a file differs between the two snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum FileStatus {
    /// Only in the after snapshot.
    Added,
    /// Content changed (and maybe its executable bit).
    Modified,
    /// Only in the base snapshot.
    Deleted,
    /// Only the executable bit changed.
    Mode,
    /// A file became a symbolic link or back (a delete and an add in the patch).
    Type,
}

impl FileStatus {
    /// The name used in the wire contract's `FileChange.status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "added",
            Self::Modified => "modified",
            Self::Deleted => "deleted",
            Self::Mode => "mode",
            Self::Type => "type",
        }
    }

    /// The status named `name` (as [`FileStatus::as_str`] writes it); `None` for a name this
    /// version does not know.
    pub fn parse(name: &str) -> Option<Self> {
        [
            Self::Added,
            Self::Modified,
            Self::Deleted,
            Self::Mode,
            Self::Type,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }
}

/// The diffstat of a change set as the wire contract carries it ([`diffstat`] of its listed
/// files, with a line saying so when the list was cut).
pub fn diffstat_of(changes: &baton_proto::Changes) -> String {
    let files: Vec<FileDiff> = changes.files.iter().map(FileDiff::from).collect();
    let mut text = diffstat(&files);
    if changes.files_truncated {
        text.push_str(&format!(
            " (the first {} of {} files; the patch has them all)\n",
            changes.files.len(),
            changes.files_changed
        ));
    }
    text
}

/// A file of a change set as the wire contract carries it (an unknown status reads as
/// `Modified`).
impl From<&baton_proto::FileChange> for FileDiff {
    fn from(f: &baton_proto::FileChange) -> Self {
        Self {
            path: f.path.clone(),
            status: FileStatus::parse(&f.status).unwrap_or(FileStatus::Modified),
            insertions: f.insertions,
            deletions: f.deletions,
            binary: f.binary,
        }
    }
}

/// One changed path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDiff {
    /// '/'-separated path relative to the workspace root.
    pub path: String,
    /// How it changed.
    pub status: FileStatus,
    /// Lines added (0 for binary files).
    pub insertions: u32,
    /// Lines removed (0 for binary files).
    pub deletions: u32,
    /// Whether the patch carries it as a `GIT binary patch`.
    pub binary: bool,
}

/// The change set between two snapshots.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeSet {
    /// The git-style patch (empty when nothing changed).
    pub patch: Vec<u8>,
    /// The changed paths, sorted by path.
    pub files: Vec<FileDiff>,
    /// Lines added over all files.
    pub insertions: u64,
    /// Lines removed over all files.
    pub deletions: u64,
}

/// A file or link as git sees it: mode and content.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Item {
    File { blob: BlobId, executable: bool },
    Link { target: String },
}

impl Item {
    fn of(target: &Target) -> Option<Self> {
        match target {
            Target::Dir => None,
            Target::File {
                blob, executable, ..
            } => Some(Self::File {
                blob: blob.clone(),
                executable: *executable,
            }),
            Target::Symlink { target } => Some(Self::Link {
                target: target.clone(),
            }),
        }
    }

    /// The git mode.
    fn mode(&self) -> &'static str {
        match self {
            Self::File {
                executable: false, ..
            } => "100644",
            Self::File {
                executable: true, ..
            } => "100755",
            Self::Link { .. } => "120000",
        }
    }

    async fn content(&self, store: &dyn BlobStore) -> Result<Vec<u8>, StoreError> {
        match self {
            Self::File { blob, .. } => store.get(blob).await,
            Self::Link { target } => Ok(target.as_bytes().to_vec()),
        }
    }
}

/// One changed path before its contents are read.
struct Pending {
    path: String,
    old: Option<Item>,
    new: Option<Item>,
}

/// The change set from snapshot `base` (`None`: the empty tree) to snapshot `after`.
///
/// Both manifests are validated first ([`ChangesError::BadManifest`]); then the contents of
/// the changed files (and the ignore files) are read from `store`.
pub async fn change_set(
    store: &dyn BlobStore,
    base: Option<&SnapshotId>,
    after: &SnapshotId,
) -> Result<ChangeSet, ChangesError> {
    let old = match base {
        Some(id) => load(store, id).await?,
        None => BTreeMap::new(),
    };
    let new = load(store, after).await?;
    let old_rules = ignore::Rules::load(store, &old).await?;
    let new_rules = ignore::Rules::load(store, &new).await?;

    let paths: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    let mut pending = Vec::new();
    for path in paths {
        if in_git_dir(path) {
            continue;
        }
        let before = old.get(path).and_then(Item::of);
        let now = new.get(path).and_then(Item::of);
        let ignored = match &now {
            Some(_) => new_rules.ignored(path),
            None => before.is_some() && old_rules.ignored(path),
        };
        if ignored || before == now {
            continue;
        }
        pending.push(Pending {
            path: path.clone(),
            old: before,
            new: now,
        });
    }

    // Rendered in path order as the contents arrive; at most a few files held at once.
    let mut reads = std::pin::pin!(
        stream::iter(pending)
            .map(|p| async move {
                let old = match &p.old {
                    Some(item) => Some(item.content(store).await?),
                    None => None,
                };
                let new = match &p.new {
                    Some(item) => Some(item.content(store).await?),
                    None => None,
                };
                Ok::<_, ChangesError>((p, old, new))
            })
            .buffered(FETCH_CONCURRENCY)
    );
    let mut set = ChangeSet::default();
    while let Some((p, old_bytes, new_bytes)) = reads.try_next().await? {
        let old = p.old.as_ref().zip(old_bytes.as_deref());
        let new = p.new.as_ref().zip(new_bytes.as_deref());
        let diff = patch::render(&p.path, old, new, &mut set.patch)?;
        set.insertions += u64::from(diff.insertions);
        set.deletions += u64::from(diff.deletions);
        set.files.push(diff);
    }
    Ok(set)
}

/// Reads and validates the manifest of snapshot `id`.
async fn load(
    store: &dyn BlobStore,
    id: &SnapshotId,
) -> Result<BTreeMap<String, Target>, ChangesError> {
    checked(id, get_json(store, id).await?)
}

/// Validates the manifest of snapshot `id`.
fn checked(id: &SnapshotId, manifest: Manifest) -> Result<BTreeMap<String, Target>, ChangesError> {
    check_manifest(manifest).map_err(|e| match e {
        SnapshotError::BadManifest(detail) => {
            ChangesError::BadManifest(format!("snapshot {id}: {detail}"))
        }
        other => ChangesError::BadManifest(format!("snapshot {id}: {other}")),
    })
}

/// Whether `path` is a `.git` entry (at any depth) or lies under one.
fn in_git_dir(path: &str) -> bool {
    path.split('/').any(|c| c == ".git")
}

/// The parent directory of `path` ("" at the root).
fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}
