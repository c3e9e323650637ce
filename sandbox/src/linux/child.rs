//! The `pre_exec` hook: what the forked child does before `exec`, with system calls only.
//! Most of the crate's `unsafe` is here.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::limits::Resource;
use super::netns::NetNsChild;

/// What the child does between fork and exec, prepared by the parent.
#[derive(Debug)]
pub(crate) struct Child {
    pub(super) ruleset: Option<OwnedFd>,
    pub(super) programs: Vec<Vec<libc::sock_filter>>,
    pub(super) max_file_size: libc::rlim_t,
    pub(super) max_processes: libc::rlim_t,
    pub(super) user: Option<(u32, u32)>,
    pub(super) netns: Option<super::netns::NetNs>,
}

impl Child {
    pub(crate) fn apply(&self, command: &mut tokio::process::Command) {
        let ruleset: RawFd = self.ruleset.as_ref().map_or(-1, AsRawFd::as_raw_fd);
        let programs = self.programs.clone();
        let limits = Limits {
            max_file_size: self.max_file_size,
            max_processes: self.max_processes,
        };
        let (user, netns) = (self.user, self.netns.as_ref().and_then(|n| n.child()));
        // SAFETY: the closure runs in the forked child before `exec`. It only makes raw
        // system calls (async-signal-safe), does not allocate (the programs and the id maps
        // were built in the parent and are only read), and reports failures as OS errors.
        unsafe {
            command.pre_exec(move || confine(ruleset, &programs, limits, user, netns.as_ref()));
        }
    }

    /// Closes the parent's copy of the ruleset; with a network namespace, returns the proxy's
    /// listener the process sent from it.
    pub(crate) fn spawned(&mut self) -> Option<std::io::Result<std::net::TcpListener>> {
        self.ruleset = None;
        self.netns.as_mut().map(super::netns::NetNs::receive)
    }
}

#[derive(Debug, Clone, Copy)]
struct Limits {
    max_file_size: libc::rlim_t,
    max_processes: libc::rlim_t,
}

/// Runs in the child: limits, network namespace (as root), user, network namespace (not
/// root), no_new_privs, Landlock, seccomp (which forbids `unshare`, hence last). System calls
/// only.
fn confine(
    ruleset: RawFd,
    programs: &[Vec<libc::sock_filter>],
    limits: Limits,
    user: Option<(u32, u32)>,
    netns: Option<&NetNsChild>,
) -> std::io::Result<()> {
    let check = |rc: libc::c_long| {
        if rc < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    let limit = |resource: Resource, value| {
        let limit = libc::rlimit {
            rlim_cur: value,
            rlim_max: value,
        };
        // SAFETY: setrlimit(2) with a valid struct.
        check(unsafe { libc::setrlimit(resource, &limit) }.into())
    };
    limit(libc::RLIMIT_FSIZE, limits.max_file_size)?;
    limit(libc::RLIMIT_CORE, 0)?;
    limit(libc::RLIMIT_NPROC, limits.max_processes)?;
    // As root: before dropping to the sandbox user, who may not make a network namespace
    // without a user namespace.
    if let Some(netns) = netns.filter(|n| !n.rootless()) {
        netns.enter()?;
    }
    if let Some((uid, gid)) = user {
        // The output pipes were made by root: hand them over, or `/dev/stdout` cannot be
        // opened. Pipes only: stdout might be a file in other callers.
        for fd in [libc::STDOUT_FILENO, libc::STDERR_FILENO] {
            // SAFETY: fstat(2) and fchown(2) on an open descriptor with a valid struct.
            unsafe {
                let mut stat: libc::stat = std::mem::zeroed();
                if libc::fstat(fd, &mut stat) == 0 && stat.st_mode & libc::S_IFMT == libc::S_IFIFO {
                    check(libc::fchown(fd, uid, gid).into())?;
                }
            }
        }
        // SAFETY: raw set*id(2) calls on the only thread of the child (not glibc's
        // wrappers, which signal every thread of the parent's image).
        unsafe {
            check(libc::syscall(
                libc::SYS_setgroups,
                0usize,
                std::ptr::null::<libc::gid_t>(),
            ))?;
            check(libc::syscall(libc::SYS_setresgid, gid, gid, gid))?;
            check(libc::syscall(libc::SYS_setresuid, uid, uid, uid))?;
        }
    }
    if let Some(netns) = netns.filter(|n| n.rootless()) {
        netns.enter()?;
    }
    // SAFETY: prctl(2) without pointers.
    check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) }.into())?;
    // SAFETY: landlock_restrict_self(2) on the ruleset fd inherited from the parent.
    check(unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) })?;
    for program in programs {
        let program = libc::sock_fprog {
            len: u16::try_from(program.len()).unwrap_or(u16::MAX),
            filter: program.as_ptr().cast_mut(),
        };
        // SAFETY: seccomp(2) with a valid program; the kernel copies it.
        check(unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0u32,
                &raw const program,
            )
        })?;
    }
    Ok(())
}
