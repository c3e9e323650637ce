//! Landlock: the ruleset (read and execute everywhere but the hidden directories, write where
//! the mode allows, network and scopes), and the kernel's ABI version.

use std::os::fd::OwnedFd;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, Scope,
};
use nix::errno::Errno;

use crate::{SandboxError, SandboxMode};
/// The Landlock ABI whose access rights we ask for (the newest one tested).
const ABI_USED: ABI = ABI::V7;

/// Character devices ordinary shells and tools write to. Not `/dev/tty`: a command has no
/// controlling terminal (a session of its own), and must not reach the worker's either when
/// it keeps the caller's session.
const DEVICES: [&str; 3] = ["/dev/null", "/dev/zero", "/dev/full"];

/// `landlock_create_ruleset` flag asking for the ABI version.
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;

/// The Landlock ABI version of the running kernel, if it has Landlock.
pub(crate) fn landlock_abi() -> Result<i32, String> {
    // SAFETY: a query without pointers.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if abi >= 1 {
        return Ok(i32::try_from(abi).unwrap_or(i32::MAX));
    }
    Err(match Errno::last() {
        Errno::ENOSYS => "Landlock unavailable: the kernel was built without it".to_owned(),
        Errno::EOPNOTSUPP => {
            "Landlock unavailable: it is disabled at boot (add landlock to the lsm= kernel \
             parameter)"
                .to_owned()
        }
        e => format!("Landlock unavailable: {e}"),
    })
}

/// The Landlock ruleset: read and execute everywhere but `hidden` and the directory the
/// private temp dirs are made in (other calls' `TMPDIR`s: only `temp`, this call's, is
/// granted), the workspace too, write where `mode` allows.
pub(super) fn ruleset(
    mode: SandboxMode,
    network: bool,
    workspace: &Path,
    temp: &Path,
    hidden: &[PathBuf],
) -> Result<OwnedFd, SandboxError> {
    let failed = |e: landlock::RulesetError| SandboxError::setup("Landlock ruleset", e);
    let path = |p: &Path| PathFd::new(p).map_err(|e| SandboxError::setup("Landlock ruleset", e));
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(ABI_USED))
        .map_err(failed)?
        .scope(Scope::from_all(ABI_USED))
        .map_err(failed)?;
    if !network {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(ABI_USED))
            .map_err(failed)?;
    }
    let mut created = ruleset.create().map_err(failed)?;
    let hidden: Vec<PathBuf> = hidden
        .iter()
        .cloned()
        .chain(temp.parent().map(Path::to_path_buf))
        .collect();
    for readable in readable_except(&hidden)
        .iter()
        .map(PathBuf::as_path)
        .chain([workspace])
    {
        // Landlock refuses rules on pipes and sockets (`EBADFD`), which the links of a
        // hidden path's neighbours may lead to (`/dev/stdout` when a hidden path is under
        // `/dev`, e.g. `TMPDIR=/dev/shm`): nothing to read there anyway.
        if std::fs::metadata(readable)
            .is_ok_and(|m| m.file_type().is_fifo() || m.file_type().is_socket())
        {
            continue;
        }
        // An entry may vanish between listing and opening: skip it.
        if let Ok(fd) = PathFd::new(readable) {
            created = created
                .add_rule(PathBeneath::new(fd, AccessFs::from_read(ABI_USED)))
                .map_err(failed)?;
        }
    }
    for device in DEVICES {
        if let Ok(fd) = PathFd::new(device) {
            created = created
                .add_rule(PathBeneath::new(fd, AccessFs::from_file(ABI_USED)))
                .map_err(failed)?;
        }
    }
    let writable = match mode {
        SandboxMode::WorkspaceWrite => vec![workspace, temp],
        SandboxMode::ReadOnly | SandboxMode::Off => vec![temp],
    };
    for dir in writable {
        created = created
            .add_rule(PathBeneath::new(path(dir)?, AccessFs::from_all(ABI_USED)))
            .map_err(failed)?;
    }
    Option::<OwnedFd>::from(created).ok_or_else(|| SandboxError::Unavailable {
        reason: "Landlock unavailable: no ruleset could be created".to_owned(),
    })
}

/// `landlock_path_beneath_attr` (packed, as in the kernel's uapi header).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// `LANDLOCK_RULE_PATH_BENEATH`.
const LANDLOCK_RULE_PATH_BENEATH: libc::c_uint = 1;

/// In the child, once the PID namespace's init mounted a fresh `/proc`: adds read access to
/// it to `ruleset` (the rule for the host's `/proc` does not cover a mount on top of it).
/// System calls only.
pub(super) fn add_proc_rule(ruleset: libc::c_int) -> std::io::Result<()> {
    // Execute, read file, read dir: in every Landlock ABI, so always handled.
    let read = AccessFs::from_read(ABI::V1).bits();
    // SAFETY: open(2) with a C string, landlock_add_rule(2) with a valid attribute struct,
    // close(2) of the descriptor just opened.
    unsafe {
        let fd = libc::open(
            c"/proc".as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let attr = PathBeneathAttr {
            allowed_access: read,
            parent_fd: fd,
        };
        let rc = libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            LANDLOCK_RULE_PATH_BENEATH,
            &raw const attr,
            0u32,
        );
        let error = std::io::Error::last_os_error();
        libc::close(fd);
        if rc < 0 {
            return Err(error);
        }
    }
    Ok(())
}

/// The paths to grant read access under so that everything is readable except what lies in
/// `hidden` (Landlock only grants): `/` when nothing is hidden, else the entries of every
/// directory on the way to a hidden one that do not lead to one. The directories on the way
/// themselves are not listable (`ls /` fails when a hidden path is under `/`), but they can be
/// walked through. A symbolic link leading into (or above) a hidden path is left out.
fn readable_except(hidden: &[PathBuf]) -> Vec<PathBuf> {
    let hidden: Vec<PathBuf> = hidden
        .iter()
        .filter_map(|h| std::fs::canonicalize(h).ok())
        .filter(|h| h.parent().is_some())
        .collect();
    if hidden.is_empty() {
        return vec![PathBuf::from("/")];
    }
    let mut readable = Vec::new();
    let mut ancestors = vec![PathBuf::from("/")];
    while let Some(dir) = ancestors.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let entry = entry.path();
            let target = std::fs::canonicalize(&entry).unwrap_or_else(|_| entry.clone());
            let touches = |p: &Path| hidden.iter().any(|h| h.starts_with(p) || p.starts_with(h));
            if !touches(&entry) && !touches(&target) {
                readable.push(entry);
            } else if target == entry && !hidden.iter().any(|h| entry.starts_with(h)) {
                // On the way to a hidden directory: look inside.
                ancestors.push(entry);
            }
        }
    }
    readable.sort();
    readable
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use tempfile::TempDir;

    use super::*;

    #[test]
    fn readable_paths_leave_out_hidden_ones_and_links_into_them() {
        let dir = TempDir::new().unwrap();
        let hidden = dir.path().join("h");
        std::fs::create_dir_all(hidden.join("x")).unwrap();
        std::fs::create_dir_all(dir.path().join("open")).unwrap();
        std::os::unix::fs::symlink(&hidden, dir.path().join("link")).unwrap();
        let readable = readable_except(std::slice::from_ref(&hidden));
        let dir = std::fs::canonicalize(dir.path()).unwrap();
        assert!(readable.contains(&dir.join("open")), "{readable:?}");
        assert!(
            !readable.iter().any(|p| p.starts_with(dir.join("h"))),
            "{readable:?}"
        );
        assert!(!readable.contains(&dir.join("link")), "{readable:?}");
        assert!(!readable.contains(&PathBuf::from("/")), "{readable:?}");
        assert_eq!(readable_except(&[]), vec![PathBuf::from("/")]);
    }
}
