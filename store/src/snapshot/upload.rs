//! Uploading a directory of the submitting machine as a snapshot (`baton submit
//! --workspace-from DIR`): walk it under its ignore rules, refuse it whole if it is over the
//! size limit, hash every file, upload the blobs the store lacks, then the manifest. A worker
//! [`restore`]s the returned id like any other snapshot.
//!
//! Left out: what `.gitignore` files (root and nested, git semantics), `.git/info/exclude` and
//! `.batonignore` files (same syntax, taking precedence over `.gitignore`) ignore; `.git` at
//! any depth (a repository's directory, or the `.git` file of a worktree or submodule);
//! [`LOCAL_DIR`] at the root. Ignore files above DIR do not apply. Symbolic links are
//! recorded as links and never followed. Nothing is written into DIR.
//!
//! [`restore`]: fn@super::restore

use std::{
    collections::BTreeMap,
    ffi::OsStr,
    fs, io,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{Arc, Mutex},
};

use super::{
    Entry, LOCAL_DIR, SnapshotError, SnapshotId, blocking, executable, hash_file, io_err,
    send::{send_blobs, send_manifest},
};
use crate::{BlobId, BlobStore};

/// The default limit on the total size of an upload (512 MiB).
pub const DEFAULT_MAX_UPLOAD: u64 = 512 * 1024 * 1024;

/// The custom ignore file, in `.gitignore` syntax.
pub const IGNORE_FILE: &str = ".batonignore";

/// How many of the largest paths a [`UploadError::TooLarge`] names.
const LARGEST_SHOWN: usize = 5;

/// How [`upload_dir`] uploads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadOptions {
    /// The most bytes the files may hold together; more is refused before anything is sent.
    pub max_total_bytes: u64,
}

impl Default for UploadOptions {
    fn default() -> Self {
        Self {
            max_total_bytes: DEFAULT_MAX_UPLOAD,
        }
    }
}

/// What [`upload_dir`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uploaded {
    /// The snapshot id.
    pub id: SnapshotId,
    /// Regular files in the snapshot.
    pub files: usize,
    /// Bytes of all the files in the snapshot.
    pub total_bytes: u64,
    /// File blobs sent (the store lacked them); the manifest is not counted.
    pub uploaded: usize,
    /// Bytes of the file blobs sent.
    pub uploaded_bytes: u64,
    /// `git rev-parse HEAD` of the directory (full sha) when it is in a git work tree with a
    /// commit. The snapshot is the working tree, uncommitted changes included.
    pub commit: Option<String>,
    /// Paths left out although not ignored, sorted: sockets, pipes and devices, names or link
    /// targets that are not UTF-8, unreadable files and directories.
    pub skipped: Vec<String>,
}

/// Failures of [`upload_dir`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UploadError {
    /// The path to upload is missing, not a directory, or unreadable.
    #[error("{}: {detail}", path.display())]
    NotADirectory {
        /// The path given.
        path: PathBuf,
        /// What is wrong with it and what to pass instead.
        detail: String,
    },
    /// The files hold more than the limit; nothing was uploaded.
    #[error("{}", too_large(*total, *limit, largest))]
    TooLarge {
        /// Bytes of all the files that would be uploaded.
        total: u64,
        /// The limit ([`UploadOptions::max_total_bytes`]).
        limit: u64,
        /// The largest files, largest first, with their sizes.
        largest: Vec<(String, u64)>,
    },
    /// An ignore file could not be read or holds a pattern that does not parse; nothing was
    /// uploaded (uploading what the file meant to leave out could leak it).
    #[error("{}: cannot apply the ignore rules: {detail}; fix or remove the pattern", path.display())]
    IgnoreRules {
        /// The directory whose ignore files failed.
        path: PathBuf,
        /// The parser's or the filesystem's error.
        detail: String,
    },
    /// Reading the tree or writing to the store failed.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
}

fn too_large(total: u64, limit: u64, largest: &[(String, u64)]) -> String {
    let paths: Vec<String> = largest
        .iter()
        .map(|(path, size)| format!("{path} ({})", human_size(*size)))
        .collect();
    format!(
        "the directory holds {} to upload, over the limit of {}; largest: {}. Raise the limit \
         with --max-upload-size, or leave paths out with a .batonignore file (.gitignore syntax)",
        human_size(total),
        human_size(limit),
        paths.join(", ")
    )
}

/// A size for people: bytes below 1 KiB, else KiB/MiB/GiB with one decimal.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 3] = ["KiB", "MiB", "GiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Uploads the tree at `dir` to `store` as a snapshot; see the module doc for what is left
/// out. The total size is checked before anything is sent ([`UploadError::TooLarge`]), and
/// only the blobs the store lacks are sent. Files changed while uploading are recorded as
/// found when sent.
pub async fn upload_dir(
    store: &dyn BlobStore,
    dir: &Path,
    options: &UploadOptions,
) -> Result<Uploaded, UploadError> {
    check_dir(dir)?;
    let limit = options.max_total_bytes;
    let owned = dir.to_path_buf();
    let walked = blocking(dir, move || Ok(walk(&owned))).await??;
    check_size(&walked.sizes, limit)?;

    let owned = dir.to_path_buf();
    let Hashed {
        mut entries,
        mut skipped,
        wanted,
        sizes,
    } = blocking(dir, move || hash_all(&owned, walked, limit)).await?;
    check_size(&sizes, limit)?;

    let sent = send_blobs(store, dir, wanted, limit, &mut entries, &mut skipped).await?;
    skipped.sort();
    let total_bytes = entries
        .values()
        .map(|e| match e {
            Entry::File { size, .. } => *size,
            _ => 0,
        })
        .sum();
    let (id, files) = send_manifest(store, dir, entries, None).await?;
    let owned = dir.to_path_buf();
    let commit = blocking(dir, move || Ok(head_commit(&owned))).await?;
    if !skipped.is_empty() {
        tracing::debug!(skipped = skipped.len(), dir = %dir.display(), "paths left out of the upload");
    }
    Ok(Uploaded {
        id,
        files,
        total_bytes,
        uploaded: sent.uploaded,
        uploaded_bytes: sent.bytes,
        commit,
        skipped,
    })
}

fn check_dir(dir: &Path) -> Result<(), UploadError> {
    let not = |detail: String| UploadError::NotADirectory {
        path: dir.to_path_buf(),
        detail,
    };
    match fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(not(
            "not a directory; pass the directory to upload (e.g. `.`), not a file".to_owned(),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(not(
            "no such directory; pass the directory to upload (e.g. `.`)".to_owned(),
        )),
        Err(e) => Err(not(format!(
            "cannot read it ({e}); pass a directory you can read"
        ))),
    }
}

fn check_size(sizes: &BTreeMap<String, u64>, limit: u64) -> Result<(), UploadError> {
    let total: u64 = sizes.values().sum();
    if total <= limit {
        return Ok(());
    }
    let mut largest: Vec<(String, u64)> = sizes.iter().map(|(p, s)| (p.clone(), *s)).collect();
    largest.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    largest.truncate(LARGEST_SHOWN);
    Err(UploadError::TooLarge {
        total,
        limit,
        largest,
    })
}

/// The tree as walked: entries (files without their blob yet) and the files' sizes.
struct Walked {
    entries: BTreeMap<String, Entry>,
    sizes: BTreeMap<String, u64>,
    skipped: Vec<String>,
}

fn walk(dir: &Path) -> Result<Walked, UploadError> {
    let not_utf8 = Arc::new(Mutex::new(Vec::new()));
    let mut builder = ignore::WalkBuilder::new(dir);
    builder
        .standard_filters(false)
        .hidden(false)
        .ignore(false)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(false)
        .require_git(false)
        .parents(false)
        .follow_links(false)
        .add_custom_ignore_filename(IGNORE_FILE);
    let (root, seen) = (dir.to_path_buf(), Arc::clone(&not_utf8));
    builder.filter_entry(move |entry| keep(&root, entry, &seen));

    let mut walked = Walked {
        entries: BTreeMap::new(),
        sizes: BTreeMap::new(),
        skipped: Vec::new(),
    };
    for item in builder.build() {
        let entry = match item {
            Ok(entry) => entry,
            Err(err) => {
                unreadable(dir, &err, &mut walked)?;
                continue;
            }
        };
        if let Some(err) = entry.error() {
            return Err(UploadError::IgnoreRules {
                path: entry.path().to_path_buf(),
                detail: err.to_string(),
            });
        }
        if entry.depth() == 0 {
            continue;
        }
        let Some(rel) = relative(dir, entry.path()) else {
            continue;
        };
        add(&mut walked, rel, entry.path())?;
    }
    let mut names = not_utf8.lock().unwrap_or_else(|e| e.into_inner());
    walked.skipped.append(&mut names);
    drop(names);
    Ok(walked)
}

/// The walk's filter: leaves out `.git` anywhere, `.baton` at the root, and names that are not
/// UTF-8 (recorded in `not_utf8`). Runs after the ignore rules, so ignored paths are not
/// recorded.
fn keep(root: &Path, entry: &ignore::DirEntry, not_utf8: &Mutex<Vec<String>>) -> bool {
    if entry.depth() == 0 {
        return true;
    }
    let name = entry.file_name();
    if name == OsStr::new(".git") || (entry.depth() == 1 && name == OsStr::new(LOCAL_DIR)) {
        return false;
    }
    if name.to_str().is_none() {
        let path = entry.path();
        let rel = path.strip_prefix(root).unwrap_or(path);
        not_utf8
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(rel.to_string_lossy().into_owned());
        return false;
    }
    true
}

fn relative(root: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?.to_str()?;
    (!rel.is_empty()).then(|| rel.to_owned())
}

/// Records the entry at `path` (not followed if a link).
fn add(walked: &mut Walked, rel: String, path: &Path) -> Result<(), UploadError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(path, "inspect", e).into()),
    };
    let kind = meta.file_type();
    if kind.is_dir() {
        walked.entries.insert(rel, Entry::Dir);
    } else if kind.is_symlink() {
        match fs::read_link(path) {
            Ok(target) => match target.into_os_string().into_string() {
                Ok(target) => {
                    walked.entries.insert(rel, Entry::Symlink { target });
                }
                Err(_) => walked.skipped.push(rel),
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(path, "read the symbolic link", e).into()),
        }
    } else if kind.is_file() {
        walked.entries.insert(
            rel.clone(),
            Entry::File {
                blob: String::new(),
                size: meta.len(),
                executable: executable(&meta),
            },
        );
        walked.sizes.insert(rel, meta.len());
    } else {
        walked.skipped.push(rel);
    }
    Ok(())
}

/// A directory the walk could not list: left out (with anything recorded under it) and
/// reported as skipped. An error without a path inside `dir` fails the upload.
fn unreadable(dir: &Path, err: &ignore::Error, walked: &mut Walked) -> Result<(), UploadError> {
    let rel = error_path(err).and_then(|path| relative(dir, path));
    let Some(rel) = rel else {
        return Err(SnapshotError::Io {
            path: dir.to_path_buf(),
            detail: format!("cannot walk the directory: {err}"),
        }
        .into());
    };
    let prefix = format!("{rel}/");
    walked
        .entries
        .retain(|path, _| path != &rel && !path.starts_with(&prefix));
    walked
        .sizes
        .retain(|path, _| path != &rel && !path.starts_with(&prefix));
    walked.skipped.push(rel);
    Ok(())
}

fn error_path(err: &ignore::Error) -> Option<&Path> {
    match err {
        ignore::Error::WithPath { path, .. } => Some(path),
        ignore::Error::WithDepth { err, .. } | ignore::Error::WithLineNumber { err, .. } => {
            error_path(err)
        }
        _ => None,
    }
}

/// The tree with every file hashed.
struct Hashed {
    entries: BTreeMap<String, Entry>,
    skipped: Vec<String>,
    /// Blob -> the paths holding it.
    wanted: BTreeMap<BlobId, Vec<String>>,
    /// The files' sizes as hashed.
    sizes: BTreeMap<String, u64>,
}

/// Hashes every file of `walked`. A file that grew past `limit` keeps a size over the limit,
/// so the second size check refuses the upload.
fn hash_all(dir: &Path, walked: Walked, limit: u64) -> Result<Hashed, SnapshotError> {
    let Walked {
        mut entries,
        sizes: walked_sizes,
        mut skipped,
    } = walked;
    let mut wanted: BTreeMap<BlobId, Vec<String>> = BTreeMap::new();
    let mut sizes = BTreeMap::new();
    for rel in walked_sizes.into_keys() {
        let path = dir.join(&rel);
        match hash_file(&path, limit) {
            Ok(Some((blob, size))) => {
                if let Some(Entry::File {
                    blob: entry_blob,
                    size: entry_size,
                    ..
                }) = entries.get_mut(&rel)
                {
                    *entry_blob = blob.to_string();
                    *entry_size = size;
                }
                wanted.entry(blob).or_default().push(rel.clone());
                sizes.insert(rel, size);
            }
            Ok(None) => {
                sizes.insert(rel, limit.saturating_add(1));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                entries.remove(&rel);
            }
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                entries.remove(&rel);
                skipped.push(rel);
            }
            Err(e) => return Err(io_err(&path, "read", e)),
        }
    }
    Ok(Hashed {
        entries,
        skipped,
        wanted,
        sizes,
    })
}

/// `git rev-parse HEAD` of `dir` when it is inside a git work tree with a commit; `None` when
/// git is missing, `dir` is not in a work tree, or HEAD has no commit yet.
fn head_commit(dir: &Path) -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let output = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .env_remove("GIT_INDEX_FILE")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()?;
        if !output.status.success() {
            return None;
        }
        String::from_utf8(output.stdout)
            .ok()
            .map(|s| s.trim().to_owned())
    };
    if git(&["rev-parse", "--is-inside-work-tree"])? != "true" {
        return None;
    }
    let sha = git(&["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])?;
    let hex = sha.bytes().all(|b| b.is_ascii_hexdigit());
    (hex && (sha.len() == 40 || sha.len() == 64)).then_some(sha)
}

#[cfg(test)]
#[path = "upload_tests.rs"]
mod tests;
