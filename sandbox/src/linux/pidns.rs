//! A PID and mount namespace of its own for each confined process, so that nothing it starts
//! outlives it (`setsid`, `setpgid`, double forks, `nohup` included) and it sees only its own
//! processes in a `/proc` of its own.
//!
//! `unshare(CLONE_NEWPID)` moves only the caller's *children* into the new namespace, so the
//! hook splits the process it runs in into three, before the change of user (root) or inside
//! the process's own user namespace (a worker that is not root):
//!
//! - the **supervisor**, the process the worker spawned (its pid is the one the worker waits
//!   for and kills): outside the namespace. It dies with the worker (`PR_SET_PDEATHSIG`), waits
//!   for the init and exits as the command did (same code, or killed by the same signal);
//! - the **init**, pid 1 of the namespace: mounts a fresh `/proc` (mount propagation to the
//!   host turned off first), reaps every orphan of the namespace and exits when the command
//!   does, handing the command's wait status to the supervisor over a pipe. It dies with the
//!   supervisor (`PR_SET_PDEATHSIG`). When it exits, the kernel kills every process left in
//!   the namespace: that is what makes the call's end the end of all its processes;
//! - the **command**, pid 2: carries on with the hook (change of user, Landlock, seccomp) and
//!   executes. It is an ordinary process (pid 1 would ignore signals it has no handler for,
//!   `kill $$` included).
//!
//! The supervisor and the init never execute anything: they run a few system calls on memory
//! prepared before the fork, like the rest of the hook, and close every descriptor they do not
//! need (the output pipes and std's exec-error pipe among them, so that neither keeps the
//! worker waiting). Being copies of the worker's image, they share its memory pages until the
//! worker writes to them (copy-on-write): the cost is the pages the worker changes while the
//! call runs, at most.

use std::io;
use std::os::fd::RawFd;

/// The init's name in `ps` (its command line is the worker's: it never executes).
const INIT_NAME: &std::ffi::CStr = c"baton-init";

/// What the hook needs to split the process, prepared in the parent.
#[derive(Debug, Clone, Copy)]
pub(super) struct OwnPids {
    /// The worker's pid: the supervisor checks it is still its parent.
    worker: libc::pid_t,
}

impl OwnPids {
    pub(super) fn new() -> Self {
        Self {
            worker: libc::pid_t::try_from(std::process::id()).unwrap_or(0),
        }
    }

    /// In the child, after `unshare(CLONE_NEWPID | CLONE_NEWNS)`: splits into the supervisor,
    /// the init and the command (see the module docs). Returns in the command only.
    pub(super) fn split(&self) -> io::Result<()> {
        let mut status = [-1; 2];
        // SAFETY: pipe2(2) writes two descriptors into the array.
        check(unsafe { libc::pipe2(status.as_mut_ptr(), libc::O_CLOEXEC) })?;
        let [status_read, status_write] = status;
        // Armed before the fork, checked after: if the worker is gone already, stop. Not
        // dumpable (inherited by the init): their /proc files (the worker's environment
        // among them) stay closed to the command (execve makes the command dumpable again).
        // SAFETY: prctl(2) without pointers, getppid(2).
        unsafe {
            check(libc::prctl(libc::PR_SET_DUMPABLE, 0))?;
            check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL))?;
            if libc::getppid() != self.worker {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
        }
        match fork()? {
            0 => {}
            init => {
                // SAFETY: closing a descriptor this process owns.
                unsafe { libc::close(status_write) };
                supervise(init, status_read)
            }
        }
        // The init, pid 1 of the new namespace.
        // SAFETY: closing a descriptor this process owns.
        unsafe { libc::close(status_read) };
        // A failure here or in the command's part of the hook reaches the worker's spawn as
        // usual (std's exec-error pipe); the supervisor then ends as the failed process did.
        init_mounts()?;
        match fork()? {
            0 => {
                // The command.
                // SAFETY: closing a descriptor this process owns.
                unsafe { libc::close(status_write) };
                Ok(())
            }
            command => reap(command, status_write),
        }
    }
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn fork() -> io::Result<libc::pid_t> {
    // SAFETY: fork(2) of this single-threaded child (the hook runs after the worker's fork).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pid)
}

/// The init's mounts: nothing propagates to the host's mount namespace, and a `/proc` that
/// shows this namespace's processes only.
fn init_mounts() -> io::Result<()> {
    // SAFETY: mount(2) with valid C strings (or null where the kernel allows it).
    unsafe {
        check(libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ))?;
        check(libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        ))?;
    }
    Ok(())
}

/// Closes every descriptor but `keep`.
fn close_all_but(keep: RawFd) {
    let keep = keep.cast_unsigned();
    // SAFETY: close_range(2) without pointers; only descriptors this process owns.
    unsafe {
        if keep > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, keep - 1, 0u32);
        }
        libc::syscall(libc::SYS_close_range, keep + 1, u32::MAX, 0u32);
    }
}

/// Restores the default action of SIGCHLD (the worker's handler is of no use here, and the
/// waits below must see every child).
fn default_sigchld() {
    // SAFETY: signal(2) with a constant handler.
    unsafe {
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
    }
}

/// Waits for `pid` (retrying on signals); its wait status.
fn wait_for(pid: libc::pid_t) -> Option<libc::c_int> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid(2) into a local integer.
        let rc = unsafe { libc::waitpid(pid, &raw mut status, libc::__WALL) };
        if rc == pid {
            return Some(status);
        }
        if rc < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return None;
        }
    }
}

/// The supervisor: waits for the init and ends as the command did. Never returns.
fn supervise(init: libc::pid_t, status_read: RawFd) -> ! {
    close_all_but(status_read);
    default_sigchld();
    let own = wait_for(init);
    let mut status: i32 = 0;
    // SAFETY: read(2) into a local integer; the init wrote it before exiting (or never did).
    let read = unsafe { libc::read(status_read, (&raw mut status).cast(), size_of::<i32>()) };
    let status = if read == size_of::<i32>() as isize {
        status
    } else {
        // The init died without a word (killed, or its set-up failed): end as it did.
        own.unwrap_or(libc::SIGKILL)
    };
    end_as(status)
}

/// The init: reaps every process of the namespace until the command ends, then hands its
/// status to the supervisor and exits (the kernel kills whatever is left). Never returns.
fn reap(command: libc::pid_t, status_write: RawFd) -> ! {
    // SAFETY: prctl(2) with a valid C string; the death signal armed, then checked against
    // the supervisor still reading the status pipe (it cannot be seen from here by pid).
    unsafe {
        libc::prctl(libc::PR_SET_NAME, INIT_NAME.as_ptr());
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        let mut poll = libc::pollfd {
            fd: status_write,
            events: 0,
            revents: 0,
        };
        if libc::poll(&raw mut poll, 1, 0) > 0 && poll.revents & libc::POLLERR != 0 {
            exit(1)
        }
    }
    close_all_but(status_write);
    default_sigchld();
    loop {
        let mut status = 0;
        // SAFETY: waitpid(2) into a local integer.
        let pid = unsafe { libc::waitpid(-1, &raw mut status, libc::__WALL) };
        if pid == command {
            // SAFETY: write(2) of a local integer.
            unsafe {
                libc::write(status_write, (&raw const status).cast(), size_of::<i32>());
            }
            exit(0)
        }
        if pid < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            exit(1)
        }
    }
}

fn exit(code: libc::c_int) -> ! {
    // SAFETY: _exit(2) ends this process without running the worker's atexit handlers.
    unsafe { libc::_exit(code) }
}

/// Ends this process as wait status `status` says: the same exit code, or the same signal.
fn end_as(status: libc::c_int) -> ! {
    if libc::WIFEXITED(status) {
        exit(libc::WEXITSTATUS(status))
    }
    let signal = if libc::WIFSIGNALED(status) {
        libc::WTERMSIG(status)
    } else {
        libc::SIGKILL
    };
    // SAFETY: signal(2)/sigprocmask(2)/kill(2) on this process with local values.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut set);
        libc::sigaddset(&raw mut set, signal);
        libc::sigprocmask(libc::SIG_UNBLOCK, &raw const set, std::ptr::null_mut());
        libc::kill(libc::getpid(), signal);
    }
    exit(128 + signal)
}

/// Whether this host lets the worker give a process a PID and mount namespace of its own with
/// a fresh `/proc`: a short-lived `true` started through the same steps.
pub(crate) fn probe() -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let root = super::is_root();
    let program = ["/bin/true", "/usr/bin/true"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .ok_or("no `true` program to probe with")?;
    let mut command = std::process::Command::new(program);
    let maps = super::netns::IdMaps::own();
    let pids = OwnPids::new();
    // SAFETY: the hook only makes raw system calls on memory owned by the closure.
    unsafe {
        command.pre_exec(move || {
            super::netns::unshare_with(
                libc::CLONE_NEWPID | libc::CLONE_NEWNS,
                (!root).then_some(&maps),
            )?;
            pids.split()
        });
    }
    let what = if root {
        "unshare(CLONE_NEWPID | CLONE_NEWNS) + a fresh /proc"
    } else {
        "unshare(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS) + a fresh /proc (unprivileged user \
         namespaces)"
    };
    match command.status() {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("{what}: the probe exited with {status}")),
        Err(e) => Err(format!("{what} failed: {e}")),
    }
}
