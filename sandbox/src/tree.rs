//! Walking directory trees a tool made: iteratively, as a tree can be nested far deeper than
//! a thread's stack allows a recursion to go (a command makes 30,000 levels in a second), and
//! with two descriptors open at a time whatever the depth: the walk goes back up through
//! `..`, checked to be the directory it came from. Every step is relative to an open
//! directory and follows no symlink; should the tree change under the walk so that `..` is
//! another directory, the walk stops (`ESTALE`) rather than go anywhere else.
//!
//! Used to hand a workspace to the sandbox user (`linux/owner.rs`) and to remove private temp
//! dirs ([`remove_tree`]: when a call ends, and in the sweep at start).

use std::ffi::{CStr, CString};
use std::os::fd::OwnedFd;
use std::path::Path;

use nix::dir::{Dir, Type};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat};
use nix::unistd::{UnlinkatFlags, unlinkat};

/// How a directory is opened for the walk.
const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// An entry of a directory, by name, and whether it is a directory (by its type in the
/// listing, or `fstatat` where the file system does not say).
pub(crate) struct Entry {
    pub(crate) name: CString,
    pub(crate) is_dir: bool,
}

/// The entries of the open directory `dir` but `.` and `..`.
pub(crate) fn entries(dir: &OwnedFd) -> Result<Vec<Entry>, Errno> {
    let mut listing = Dir::openat(dir, c".", DIR_FLAGS, Mode::empty())?;
    let mut entries = Vec::new();
    for entry in listing.iter() {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let is_dir = match entry.file_type() {
            Some(kind) => kind == Type::Directory,
            None => fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).is_ok_and(|stat| {
                SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR
            }),
        };
        entries.push(Entry {
            name: name.to_owned(),
            is_dir,
        });
    }
    Ok(entries)
}

/// A directory on the way down: its identity, its name in its parent, the subdirectories
/// left to visit.
struct Frame {
    id: (u64, u64),
    name: CString,
    pending: Vec<CString>,
}

fn id(stat: &FileStat) -> (u64, u64) {
    (stat.st_dev, stat.st_ino)
}

/// Walks the tree under the open directory `root`, depth first. `enter(dir, stat, top)` sees
/// each directory once (`top` for `root`) and returns the names of the subdirectories to
/// walk into (it deals with the other entries itself); `leave(parent, name)` is called once
/// the subdirectory `name` of `parent` was walked. Subdirectories that vanish or stop being
/// directories meanwhile are skipped.
pub(crate) fn walk(
    root: OwnedFd,
    mut enter: impl FnMut(&OwnedFd, &FileStat, bool) -> Result<Vec<CString>, Errno>,
    mut leave: impl FnMut(&OwnedFd, &CStr) -> Result<(), Errno>,
) -> Result<(), Errno> {
    let stat = fstat(&root)?;
    let mut frames = vec![Frame {
        id: id(&stat),
        name: CString::default(),
        pending: enter(&root, &stat, true)?,
    }];
    let mut current = root;
    while let Some(top) = frames.last_mut() {
        if let Some(name) = top.pending.pop() {
            let sub = match openat(&current, name.as_c_str(), DIR_FLAGS, Mode::empty()) {
                Ok(sub) => sub,
                Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP) => continue,
                Err(e) => return Err(e),
            };
            let stat = fstat(&sub)?;
            let pending = enter(&sub, &stat, false)?;
            frames.push(Frame {
                id: id(&stat),
                name,
                pending,
            });
            current = sub;
            continue;
        }
        let Some(done) = frames.pop() else { break };
        let Some(parent) = frames.last() else { break };
        let up = openat(&current, c"..", DIR_FLAGS, Mode::empty())?;
        if id(&fstat(&up)?) != parent.id {
            // Moved meanwhile: `..` is not where the walk came from.
            return Err(Errno::ESTALE);
        }
        leave(&up, &done.name)?;
        current = up;
    }
    Ok(())
}

/// Removes the directory `path` and everything in it, iteratively (see the module docs),
/// without following symlinks. A missing `path` is fine.
pub fn remove_tree(path: &Path) -> std::io::Result<()> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(std::io::Error::other(format!(
            "{} has no parent to remove it from",
            path.display()
        )));
    };
    let name = CString::new(std::os::unix::ffi::OsStrExt::as_bytes(name))
        .map_err(std::io::Error::other)?;
    let parent = nix::fcntl::open(
        if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        },
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let root = match openat(&parent, name.as_c_str(), DIR_FLAGS, Mode::empty()) {
        Ok(root) => root,
        Err(Errno::ENOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    walk(
        root,
        |dir, _, _| {
            let mut subdirs = Vec::new();
            for entry in entries(dir)? {
                if entry.is_dir {
                    subdirs.push(entry.name);
                    continue;
                }
                match unlinkat(dir, entry.name.as_c_str(), UnlinkatFlags::NoRemoveDir) {
                    Ok(()) | Err(Errno::ENOENT) => {}
                    // A directory after all (the listing did not say).
                    Err(Errno::EISDIR) => subdirs.push(entry.name),
                    Err(e) => return Err(e),
                }
            }
            Ok(subdirs)
        },
        |parent, name| match unlinkat(parent, name, UnlinkatFlags::RemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(e),
        },
    )?;
    match unlinkat(&parent, name.as_c_str(), UnlinkatFlags::RemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The disk space the tree at `path` takes (allocated blocks of every entry, directories
/// included), walked as [`remove_tree`] does, without following symlinks. A missing `path`
/// takes 0.
pub fn tree_bytes(path: &Path) -> std::io::Result<u64> {
    let root = match nix::fcntl::open(path, DIR_FLAGS, Mode::empty()) {
        Ok(root) => root,
        Err(Errno::ENOENT) => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    let mut bytes = 0u64;
    let blocks = |stat: &FileStat| {
        u64::try_from(stat.st_blocks)
            .unwrap_or(0)
            .saturating_mul(512)
    };
    walk(
        root,
        |dir, stat, _| {
            bytes = bytes.saturating_add(blocks(stat));
            let mut subdirs = Vec::new();
            for entry in entries(dir)? {
                if entry.is_dir {
                    subdirs.push(entry.name);
                    continue;
                }
                match fstatat(dir, entry.name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                    Ok(stat) => bytes = bytes.saturating_add(blocks(&stat)),
                    Err(Errno::ENOENT) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(subdirs)
        },
        |_, _| Ok(()),
    )?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use tempfile::TempDir;

    use super::*;

    #[test]
    fn a_tree_is_removed_without_following_links_out_of_it() {
        let dir = TempDir::new().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(outside.join("kept")).unwrap();
        std::fs::write(outside.join("kept/file"), "x").unwrap();
        let tree = dir.path().join("tree");
        std::fs::create_dir_all(tree.join("a/b/c")).unwrap();
        std::fs::create_dir_all(tree.join("a/e")).unwrap();
        std::fs::write(tree.join("a/b/c/f"), "x").unwrap();
        std::fs::write(tree.join("a/g"), "x").unwrap();
        symlink(&outside, tree.join("a/b/link")).unwrap();
        symlink(outside.join("kept/file"), tree.join("file-link")).unwrap();
        remove_tree(&tree).unwrap();
        assert!(!tree.exists());
        assert!(outside.join("kept/file").exists());
        // Gone already: fine.
        remove_tree(&tree).unwrap();
    }

    #[test]
    fn tree_bytes_counts_files_and_directories_but_not_what_links_point_at() {
        let dir = TempDir::new().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("big"), vec![7u8; 1 << 20]).unwrap();
        let tree = dir.path().join("tree");
        std::fs::create_dir_all(tree.join("a/b")).unwrap();
        std::fs::write(tree.join("a/b/f"), vec![1u8; 256 << 10]).unwrap();
        symlink(&outside, tree.join("a/link")).unwrap();
        let bytes = tree_bytes(&tree).unwrap();
        assert!(bytes >= 256 << 10, "{bytes}");
        assert!(bytes < 1 << 20, "the linked directory was counted: {bytes}");
        assert_eq!(tree_bytes(&dir.path().join("missing")).unwrap(), 0);
    }

    #[test]
    fn a_walk_stops_when_the_tree_moves_under_it() {
        let dir = TempDir::new().unwrap();
        let tree = dir.path().join("tree");
        std::fs::create_dir_all(tree.join("a/b")).unwrap();
        std::fs::create_dir_all(dir.path().join("elsewhere")).unwrap();
        let root = nix::fcntl::open(&tree, DIR_FLAGS, Mode::empty()).unwrap();
        let moved = std::cell::Cell::new(false);
        let result = walk(
            root,
            |dir, _, _| {
                let names: Vec<CString> = entries(dir)?.into_iter().map(|e| e.name).collect();
                // Once inside `a/b`, move `a` out of the tree.
                if names.is_empty() && !moved.get() {
                    std::fs::rename(tree.join("a"), tree.join("../elsewhere/a")).unwrap();
                    moved.set(true);
                }
                Ok(names)
            },
            |_, _| Ok(()),
        );
        assert!(moved.get());
        assert_eq!(result, Err(Errno::ESTALE));
    }
}
