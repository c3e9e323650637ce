//! Files beneath a directory, reached without following a single symbolic link.
//!
//! The worker (often root) reads and writes a run's workspace while processes the run started
//! may still be changing it. Checking a path and then opening it by name is a race: between
//! the two, a directory on the way can become a symbolic link to anywhere. [`Beneath`] holds
//! an open directory and walks every relative path from it one component at a time with
//! `openat(.., O_NOFOLLOW)`, so each step is a real directory inside the one before, whatever
//! happens to the names meanwhile; a link anywhere on the way is an error ([`is_link_error`]),
//! never followed. Paths are relative with plain components only (`.` is skipped; `..`, an
//! absolute path and an empty component are refused).
//!
//! Callers resolve the links they allow first (e.g. `tools::workspace::resolve` in the
//! activities, which follows links that stay inside the workspace) and open the resolved path
//! here: a link found on that path afterwards was put there meanwhile.

use std::{
    ffi::{OsStr, OsString},
    fs::{File, Metadata},
    io::{self, Read},
    os::{
        fd::{AsFd, BorrowedFd, OwnedFd},
        unix::ffi::OsStrExt,
    },
    path::{Component, Path, PathBuf},
};

use nix::{
    errno::Errno,
    fcntl::{AtFlags, OFlag, openat, renameat},
    sys::stat::{Mode, SFlag, mkdirat},
    unistd::{UnlinkatFlags, unlinkat},
};

/// How a directory component is opened: a real directory, never a link.
const DIR_FLAGS: OFlag = OFlag::O_PATH
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// An open directory; every path given to its methods is taken relative to it.
#[derive(Debug)]
pub struct Beneath {
    dir: OwnedFd,
    /// What the directory was called when it was opened (for messages only).
    path: PathBuf,
}

/// What kind of entry [`Beneath::open_regular`] found instead of a regular file.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("not a regular file (a directory)")]
    Directory,
    #[error("not a regular file (a device, socket or pipe)")]
    Special,
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl Beneath {
    /// Opens the directory `path`, which the caller trusts (it chose it: links on the way to
    /// it are followed).
    pub fn open(path: &Path) -> io::Result<Self> {
        let dir = nix::fcntl::open(
            path,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(io::Error::from)?;
        Ok(Self {
            dir,
            path: path.to_path_buf(),
        })
    }

    /// The path this directory was opened at (it may have moved since).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory at `rel` (`""` or `"."`: this one again).
    pub fn open_dir(&self, rel: &Path) -> io::Result<Self> {
        let parts = components(rel)?;
        let mut dir = self.dup()?;
        for part in parts {
            dir = dir.step(part)?;
        }
        Ok(dir)
    }

    /// Like [`open_dir`](Self::open_dir), creating the missing directories (mode 0755 before
    /// the umask) on the way.
    pub fn create_dirs(&self, rel: &Path) -> io::Result<Self> {
        let parts = components(rel)?;
        let mut dir = self.dup()?;
        for part in parts {
            dir = match dir.step(part) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    match mkdirat(dir.dir.as_fd(), part, Mode::from_bits_truncate(0o755)) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(e) => return Err(e.into()),
                    }
                    dir.step(part)?
                }
                other => other?,
            };
        }
        Ok(dir)
    }

    /// The directory holding `rel` (opened, not created) and `rel`'s last name.
    pub fn parent_of(&self, rel: &Path) -> io::Result<(Self, OsString)> {
        let mut parts = components(rel)?;
        let name = parts.pop().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "the path names no entry")
        })?;
        let mut dir = self.dup()?;
        for part in parts {
            dir = dir.step(part)?;
        }
        Ok((dir, name.to_os_string()))
    }

    /// Opens the entry `name` of this directory with `flags` (plus `O_NOFOLLOW | O_CLOEXEC`);
    /// `mode` is used when it is created.
    pub fn open_entry(&self, name: &OsStr, flags: OFlag, mode: u32) -> io::Result<File> {
        check_name(name)?;
        let fd = openat(
            self.dir.as_fd(),
            name,
            flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(mode),
        )
        .map_err(io::Error::from)?;
        Ok(File::from(fd))
    }

    /// Opens the regular file at `rel` for reading. A FIFO, device or socket is refused
    /// without blocking on it, a directory too.
    pub fn open_regular(&self, rel: &Path) -> Result<File, OpenError> {
        let (dir, name) = self.parent_of(rel)?;
        dir.open_regular_entry(&name, OFlag::O_RDONLY)
    }

    /// Opens the regular file `name` of this directory with `flags` (`O_NONBLOCK` while
    /// opening, so that a FIFO does not block; it is refused after).
    pub fn open_regular_entry(&self, name: &OsStr, flags: OFlag) -> Result<File, OpenError> {
        let file = self.open_entry(name, flags | OFlag::O_NONBLOCK, 0o644)?;
        let meta = file.metadata()?;
        if meta.is_dir() {
            return Err(OpenError::Directory);
        }
        if !meta.is_file() {
            return Err(OpenError::Special);
        }
        clear_nonblock(&file)?;
        Ok(file)
    }

    /// The metadata of the entry at `rel` itself (a link is described, not followed).
    pub fn symlink_metadata(&self, rel: &Path) -> io::Result<Metadata> {
        let parts = components(rel)?;
        let Some((name, parents)) = parts.split_last() else {
            return File::from(self.dup()?.dir).metadata();
        };
        let mut dir = self.dup()?;
        for part in parents {
            dir = dir.step(part)?;
        }
        // O_PATH | O_NOFOLLOW opens a link itself; fstat describes what was opened.
        let fd = openat(
            dir.dir.as_fd(),
            *name,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(io::Error::from)?;
        File::from(fd).metadata()
    }

    /// Renames the entry `from` of this directory to `to` in the same directory.
    pub fn rename_entry(&self, from: &OsStr, to: &OsStr) -> io::Result<()> {
        check_name(from)?;
        check_name(to)?;
        renameat(self.dir.as_fd(), from, self.dir.as_fd(), to).map_err(io::Error::from)
    }

    /// Removes the entry `name` of this directory (a file or link; with `dir`, an empty
    /// directory).
    pub fn remove_entry(&self, name: &OsStr, dir: bool) -> io::Result<()> {
        check_name(name)?;
        let flags = if dir {
            UnlinkatFlags::RemoveDir
        } else {
            UnlinkatFlags::NoRemoveDir
        };
        unlinkat(self.dir.as_fd(), name, flags).map_err(io::Error::from)
    }

    /// The names in this directory (without `.` and `..`), unsorted.
    pub fn entries(&self) -> io::Result<Vec<OsString>> {
        let fd = openat(
            self.dir.as_fd(),
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(io::Error::from)?;
        let mut dir = nix::dir::Dir::from_fd(fd).map_err(io::Error::from)?;
        let mut names = Vec::new();
        for entry in dir.iter() {
            let entry = entry.map_err(io::Error::from)?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(OsStr::from_bytes(name).to_os_string());
            }
        }
        Ok(names)
    }

    /// The metadata of this directory.
    pub fn metadata(&self) -> io::Result<Metadata> {
        File::from(self.dir.try_clone()?).metadata()
    }

    /// The directory's descriptor (an `O_PATH` one).
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    fn dup(&self) -> io::Result<Self> {
        Ok(Self {
            dir: self.dir.try_clone()?,
            path: self.path.clone(),
        })
    }

    /// The subdirectory `part`: a real directory, not a link to one.
    fn step(&self, part: &OsStr) -> io::Result<Self> {
        let dir = openat(self.dir.as_fd(), part, DIR_FLAGS, Mode::empty()).map_err(|e| {
            match e {
                // O_NOFOLLOW | O_DIRECTORY on a link gives ENOTDIR (O_PATH) or ELOOP.
                Errno::ENOTDIR | Errno::ELOOP if self.is_link(part) => link_error(),
                e => io::Error::from(e),
            }
        })?;
        Ok(Self {
            dir,
            path: self.path.join(part),
        })
    }

    fn is_link(&self, name: &OsStr) -> bool {
        nix::sys::stat::fstatat(self.dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .is_ok_and(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK)
    }
}

/// Opens the regular file `rel` beneath the (trusted) directory `root`, following no link.
pub fn open_regular_in(root: &Path, rel: &Path) -> Result<File, OpenError> {
    Beneath::open(root)?.open_regular(rel)
}

impl OpenError {
    /// As an `io::Error`: a link on the way is `ELOOP` ([`is_link_error`]), a directory
    /// `EISDIR`, anything but a regular file `EINVAL`.
    pub fn into_io(self) -> io::Error {
        match self {
            OpenError::Io(e) => e,
            OpenError::Directory => io::Error::from_raw_os_error(Errno::EISDIR as i32),
            OpenError::Special => io::Error::from_raw_os_error(Errno::EINVAL as i32),
        }
    }
}

/// Reads at most `max` bytes of `file`; the bool says whether there was more.
pub fn read_bounded(file: File, max: usize) -> io::Result<(Vec<u8>, bool)> {
    let mut bytes = Vec::new();
    file.take(max as u64 + 1).read_to_end(&mut bytes)?;
    let more = bytes.len() > max;
    bytes.truncate(max);
    Ok((bytes, more))
}

/// Whether `err` says a symbolic link was found where a real file or directory had to be
/// (`ELOOP` from `O_NOFOLLOW`, or the walk's own error).
pub fn is_link_error(err: &io::Error) -> bool {
    err.raw_os_error() == Some(Errno::ELOOP as i32)
}

fn link_error() -> io::Error {
    io::Error::from_raw_os_error(Errno::ELOOP as i32)
}

/// The plain components of `rel`, refusing anything that could leave the directory.
fn components(rel: &Path) -> io::Result<Vec<&OsStr>> {
    let mut parts = Vec::new();
    for component in rel.components() {
        match component {
            Component::Normal(part) => parts.push(part),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "'{}' is not a plain relative path (no '..', not absolute)",
                        rel.display()
                    ),
                ));
            }
        }
    }
    Ok(parts)
}

fn check_name(name: &OsStr) -> io::Result<()> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.contains(&b'/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("'{}' is not a name in a directory", name.to_string_lossy()),
        ));
    }
    Ok(())
}

fn clear_nonblock(file: &File) -> io::Result<()> {
    use nix::fcntl::{FcntlArg, fcntl};
    let flags = fcntl(file, FcntlArg::F_GETFL).map_err(io::Error::from)?;
    let flags = OFlag::from_bits_truncate(flags) & !OFlag::O_NONBLOCK;
    fcntl(file, FcntlArg::F_SETFL(flags)).map_err(io::Error::from)?;
    Ok(())
}

/// For tests of code that must hold against a changing tree (here and in the activities).
#[doc(hidden)]
pub mod testing {
    use std::{
        path::Path,
        sync::{
            Arc,
            atomic::{AtomicBool, Ordering},
        },
        thread::JoinHandle,
    };

    use nix::fcntl::{RenameFlags, renameat2};

    /// A thread exchanging the entries `a` and `b` of a directory
    /// (`renameat2(RENAME_EXCHANGE)`) as fast as it can, until [`Racer::stop`].
    pub struct Racer {
        stop: Arc<AtomicBool>,
        thread: JoinHandle<u64>,
    }

    impl Racer {
        /// Starts swapping `dir/a` and `dir/b`.
        pub fn start(dir: &Path, a: &'static str, b: &'static str) -> std::io::Result<Self> {
            let stop = Arc::new(AtomicBool::new(false));
            let root = std::fs::File::open(dir)?;
            let flag = stop.clone();
            let thread = std::thread::spawn(move || {
                let mut swaps = 0u64;
                while !flag.load(Ordering::Relaxed) {
                    if renameat2(&root, a, &root, b, RenameFlags::RENAME_EXCHANGE).is_err() {
                        break;
                    }
                    swaps += 1;
                }
                swaps
            });
            Ok(Self { stop, thread })
        }

        /// Stops the thread; how many swaps it made.
        pub fn stop(self) -> u64 {
            self.stop.store(true, Ordering::Relaxed);
            self.thread.join().unwrap_or(0)
        }
    }
}

#[cfg(test)]
mod tests;
