//! Handing a workspace to the sandbox user: a change of owner that follows no symlink and
//! stays inside the tree even while a process renames things in it.

use std::ffi::CStr;
use std::os::fd::OwnedFd;
use std::path::Path;

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat};
use nix::unistd::{Gid, Uid, fchownat};
use tracing::warn;

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
    let mut skipped = 0usize;
    give_dir(
        dir,
        (Uid::from_raw(uid), Gid::from_raw(gid)),
        Some(state_dir),
        &mut skipped,
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

fn give_dir(
    dir: OwnedFd,
    owner: (Uid, Gid),
    state_dir: Option<&str>,
    skipped: &mut usize,
) -> Result<(), Errno> {
    give(&dir, &fstat(&dir)?, owner)?;
    let names: Vec<std::ffi::CString> = {
        let mut listing = Dir::openat(
            &dir,
            c".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        listing
            .iter()
            .filter_map(Result::ok)
            .map(|entry| entry.file_name().to_owned())
            .filter(|name| {
                let name = name.as_bytes();
                name != b"."
                    && name != b".."
                    && state_dir.is_none_or(|kept| name != kept.as_bytes())
            })
            .collect()
    };
    for name in names {
        let name: &CStr = &name;
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        match openat(&dir, name, flags, Mode::empty()) {
            Ok(sub) => give_dir(sub, owner, None, skipped)?,
            Err(Errno::ENOTDIR | Errno::ELOOP) => {
                let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
                let file = match openat(&dir, name, flags, Mode::empty()) {
                    Ok(file) => file,
                    Err(Errno::ENOENT) => continue,
                    Err(e) => return Err(e),
                };
                let stat = fstat(&file)?;
                let kind = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
                if kind == SFlag::S_IFLNK || stat.st_uid == owner.0.as_raw() {
                    continue;
                }
                if stat.st_nlink > 1 {
                    *skipped += 1;
                    continue;
                }
                give(&file, &stat, owner)?;
            }
            // Removed meanwhile.
            Err(Errno::ENOENT) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Changes the owner of the open file `fd` (whose status is `stat`) unless it is right.
fn give(fd: &OwnedFd, stat: &FileStat, (uid, gid): (Uid, Gid)) -> Result<(), Errno> {
    if stat.st_uid == uid.as_raw() && stat.st_gid == gid.as_raw() {
        return Ok(());
    }
    fchownat(fd, c"", Some(uid), Some(gid), AtFlags::AT_EMPTY_PATH)
}
