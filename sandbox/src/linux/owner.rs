//! Handing a workspace to the sandbox user: a change of owner that follows no symlink and
//! stays inside the tree even while a process renames things in it, walked iteratively
//! (`tree.rs`: a tool may nest directories far deeper than a recursion's stack allows).

use std::os::fd::OwnedFd;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat};
use nix::unistd::{Gid, Uid, fchownat};
use tracing::warn;

use crate::tree::{entries, walk};

/// Makes `uid`:`gid` the owner of the tree at `root` (a directory), except the worker's
/// state directory `state_dir` at its top, symlinks (their owner does not matter) and files
/// with several links (one may be outside the tree). Every step is relative to an open
/// directory and follows no symlink, so a process renaming things meanwhile cannot make it
/// change anything outside the tree.
pub(super) fn give_tree(root: &Path, state_dir: &str, uid: u32, gid: u32) -> std::io::Result<()> {
    let dir = nix::fcntl::open(
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let owner = (Uid::from_raw(uid), Gid::from_raw(gid));
    let mut skipped = 0usize;
    walk(
        dir,
        |dir, stat, top| {
            give(dir, stat, owner)?;
            let mut subdirs = Vec::new();
            for entry in entries(dir)? {
                if top && entry.name.as_bytes() == state_dir.as_bytes() {
                    continue;
                }
                if entry.is_dir {
                    subdirs.push(entry.name);
                } else {
                    give_file(dir, &entry.name, owner, &mut skipped)?;
                }
            }
            Ok(subdirs)
        },
        |_, _| Ok(()),
    )?;
    if skipped > 0 {
        warn!(
            workspace = %root.display(),
            skipped,
            "files with several hard links were not handed to the sandbox user"
        );
    }
    Ok(())
}

/// Hands over the entry `name` of `dir` that is not a directory (unless it is a symlink, has
/// several links or is right already).
fn give_file(
    dir: &OwnedFd,
    name: &std::ffi::CStr,
    owner: (Uid, Gid),
    skipped: &mut usize,
) -> Result<(), Errno> {
    let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let file = match openat(dir, name, flags, Mode::empty()) {
        Ok(file) => file,
        // Removed meanwhile.
        Err(Errno::ENOENT) => return Ok(()),
        Err(e) => return Err(e),
    };
    let stat = fstat(&file)?;
    let kind = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
    if kind == SFlag::S_IFLNK || stat.st_uid == owner.0.as_raw() {
        return Ok(());
    }
    if stat.st_nlink > 1 && kind != SFlag::S_IFDIR {
        *skipped += 1;
        return Ok(());
    }
    give(&file, &stat, owner)
}

/// Changes the owner of the open file `fd` (whose status is `stat`) unless it is right.
fn give(fd: &OwnedFd, stat: &FileStat, (uid, gid): (Uid, Gid)) -> Result<(), Errno> {
    if stat.st_uid == uid.as_raw() && stat.st_gid == gid.as_raw() {
        return Ok(());
    }
    fchownat(fd, c"", Some(uid), Some(gid), AtFlags::AT_EMPTY_PATH)
}
