//! The `pre_exec` hook: what the forked child does before `exec`, with system calls only.
//! Most of the crate's `unsafe` is here.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::limits::Resource;
use super::netns::{IdMaps, NetNsChild};
use super::pidns::OwnPids;

/// What the child does between fork and exec, prepared by the parent.
#[derive(Debug)]
pub(crate) struct Child {
    pub(super) ruleset: Option<OwnedFd>,
    pub(super) programs: Vec<Vec<libc::sock_filter>>,
    pub(super) max_file_size: libc::rlim_t,
    pub(super) max_processes: libc::rlim_t,
    pub(super) user: Option<(u32, u32)>,
    pub(super) netns: Option<super::netns::NetNs>,
    /// A PID and mount namespace of its own (`pidns.rs`), where the host has them.
    pub(super) pids: Option<OwnPids>,
    /// A worker that is not root: the id maps of the user namespace the other namespaces
    /// are made in.
    pub(super) maps: Option<IdMaps>,
}

impl Child {
    pub(crate) fn apply(&self, command: &mut tokio::process::Command) {
        let ruleset: RawFd = self.ruleset.as_ref().map_or(-1, AsRawFd::as_raw_fd);
        let programs = self.programs.clone();
        let setup = Setup {
            max_file_size: self.max_file_size,
            max_processes: self.max_processes,
            user: self.user,
            netns: self.netns.as_ref().and_then(super::netns::NetNs::child),
            pids: self.pids,
        };
        let maps = self.maps.clone();
        // SAFETY: the closure runs in the forked child before `exec`. It only makes raw
        // system calls (async-signal-safe), does not allocate (the programs and the id maps
        // were built in the parent and are only read), and reports failures as OS errors.
        unsafe {
            command.pre_exec(move || confine(ruleset, &programs, setup, maps.as_ref()));
        }
    }

    /// Closes the parent's copy of the ruleset; with a network namespace, returns the proxy's
    /// listener the process sent from it.
    pub(crate) fn spawned(&mut self) -> Option<std::io::Result<std::net::TcpListener>> {
        self.ruleset = None;
        self.netns.as_mut().map(super::netns::NetNs::receive)
    }

    /// Whether the process gets a PID namespace of its own.
    pub(crate) fn own_pids(&self) -> bool {
        self.pids.is_some()
    }
}

/// The plain values of the set-up, copied into the hook.
#[derive(Debug, Clone, Copy)]
struct Setup {
    max_file_size: libc::rlim_t,
    max_processes: libc::rlim_t,
    user: Option<(u32, u32)>,
    netns: Option<NetNsChild>,
    pids: Option<OwnPids>,
}

/// Runs in the child: limits, a session of its own, namespaces (network, PID + mount: as root
/// before the change of user, otherwise in a user namespace of their own), the split into
/// supervisor, init and command (`pidns.rs`), user, no_new_privs, Landlock, seccomp (which
/// forbids `unshare`, hence last). System calls only.
fn confine(
    ruleset: RawFd,
    programs: &[Vec<libc::sock_filter>],
    setup: Setup,
    maps: Option<&IdMaps>,
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
    limit(libc::RLIMIT_FSIZE, setup.max_file_size)?;
    limit(libc::RLIMIT_CORE, 0)?;
    limit(libc::RLIMIT_NPROC, setup.max_processes)?;
    // A session of its own: no controlling terminal (the worker's `/dev/tty`), and a process
    // group whose id is this pid. A caller that made the process a group leader already
    // (`process_group(0)`) keeps that group: the command then makes its session itself,
    // below, when it has a PID namespace (it is not a group leader there).
    // SAFETY: setsid(2) without arguments.
    let own_session = unsafe { libc::setsid() } >= 0;
    let mut flags = 0;
    if setup.netns.is_some() {
        flags |= libc::CLONE_NEWNET;
    }
    if setup.pids.is_some() {
        flags |= libc::CLONE_NEWPID | libc::CLONE_NEWNS;
    }
    // As root: before dropping to the sandbox user, who may not make namespaces without a
    // user namespace; otherwise in a user namespace of their own.
    if flags != 0 {
        super::netns::unshare_with(flags, maps)?;
    }
    if let Some(netns) = &setup.netns {
        netns.serve()?;
    }
    if let Some(pids) = &setup.pids {
        // Returns in the command only, pid 2 of the new namespace.
        pids.split()?;
        if !own_session {
            // SAFETY: setsid(2) without arguments.
            check(unsafe { libc::setsid() }.into())?;
        }
        // The init mounted a fresh /proc over the host's: Landlock skips the host's (now
        // hidden) mount point when it walks up, so the new one needs its own rule.
        super::landlock::add_proc_rule(ruleset)?;
    }
    if let Some((uid, gid)) = setup.user {
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
