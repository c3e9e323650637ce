//! The private temp dir of each confined process (`TMPDIR`, and `HOME` under the sandbox
//! user), and the sweep of those a killed worker left behind.
//!
//! They are made in a directory of their own in the system temp dir (`baton-tools-<uid>`,
//! [`temp_root`]), which Landlock hides from every confined process but its own dir: a call
//! cannot read another's.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The name prefix of every private temp dir; `<prefix><worker pid>-` is a worker's.
const TEMP_PREFIX: &str = "baton-tool-";

/// The name prefix of the directory of the private temp dirs (`<prefix><worker uid>`).
const TEMP_ROOT: &str = "baton-tools-";

/// The directory the private temp dirs are made in (`<system temp dir>/baton-tools-<uid>`),
/// made if missing: the worker's, traversable by the sandbox user, not listable by it.
/// Refused when it is not the worker's own directory (someone else made it first).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn temp_root() -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let own = nix::unistd::geteuid().as_raw();
    let root = std::env::temp_dir().join(format!("{TEMP_ROOT}{own}"));
    match std::fs::DirBuilder::new().mode(0o711).create(&root) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(&root)?;
    if !meta.is_dir() || meta.uid() != own || meta.mode() & 0o022 != 0 {
        return Err(std::io::Error::other(format!(
            "{} is not a directory of uid {own} that only it may write (uid {}, mode {:o}): \
             remove it, or point the worker's TMPDIR elsewhere",
            root.display(),
            meta.uid(),
            meta.mode() & 0o7777
        )));
    }
    // A umask may have taken the execute bits.
    if meta.mode() & 0o711 != 0o711 {
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o711))?;
    }
    Ok(root)
}

/// The name prefix of the private temp dirs of worker process `pid`.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn temp_prefix(pid: u32) -> String {
    format!("{TEMP_PREFIX}{pid}-")
}

/// A private temp dir, made in [`temp_root`] and removed when dropped (walking it iteratively:
/// a tool may nest directories deeper than `remove_dir_all`'s recursion survives).
#[derive(Debug)]
pub(crate) struct PrivateTemp(PathBuf);

impl PrivateTemp {
    /// A new private temp dir of this worker.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn new() -> std::io::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix(&temp_prefix(std::process::id()))
            .tempdir_in(temp_root()?)?;
        Ok(Self(dir.keep()))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for PrivateTemp {
    fn drop(&mut self) {
        if let Err(e) = crate::tree::remove_tree(&self.0) {
            tracing::warn!(
                dir = %self.0.display(),
                cause = %e,
                "cannot remove a tool's private temp dir; the next worker start sweeps it"
            );
        }
    }
}

/// The environment pointing a process at its private temp dir `temp` (and `HOME` there too
/// when `home`: the sandbox user's own home is not its to write).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn temp_env(temp: &Path, home: bool) -> Vec<(&'static str, OsString)> {
    let mut env: Vec<(&'static str, OsString)> = ["TMPDIR", "TMP", "TEMP"]
        .into_iter()
        .map(|name| (name, temp.as_os_str().to_owned()))
        .collect();
    if home {
        env.push(("HOME", temp.as_os_str().to_owned()));
    }
    env
}

/// Removes the private temp dirs (in the system temp dir) that workers no longer running left
/// behind: a worker killed outright (`kill -9`, OOM) cannot remove those of its calls in
/// flight, and what a command wrote there (build caches, downloads) would pile up. Dirs of
/// live processes are left alone. Returns how many were removed.
pub fn sweep_stale_temp_dirs() -> usize {
    // Older workers made them in the system temp dir itself.
    let system = std::env::temp_dir();
    let own = nix::unistd::geteuid().as_raw();
    sweep_temp_dirs_in(&system.join(format!("{TEMP_ROOT}{own}"))) + sweep_temp_dirs_in(&system)
}

fn sweep_temp_dirs_in(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(TEMP_PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let alive = Path::new("/proc").join(pid.to_string()).exists();
        if !alive && crate::tree::remove_tree(&entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use tempfile::TempDir;

    use super::*;

    #[test]
    fn temp_dirs_of_dead_workers_are_swept() {
        let dir = TempDir::new().unwrap();
        let dead = dir.path().join(format!("{}x1", temp_prefix(4_194_305)));
        let live = dir
            .path()
            .join(format!("{}x2", temp_prefix(std::process::id())));
        let other = dir.path().join("baton-tool-abc");
        for d in [&dead, &live, &other] {
            std::fs::create_dir_all(d.join("cache")).unwrap();
        }
        assert_eq!(sweep_temp_dirs_in(dir.path()), 1);
        assert!(!dead.exists() && live.exists() && other.exists());
    }
}
