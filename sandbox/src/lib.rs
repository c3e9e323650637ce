//! `baton-sandbox`: confinement of the processes tools start (the `shell` tool), on Linux:
//! Landlock, seccomp, resource limits and an unprivileged user, applied in the child between
//! `fork` and `exec`.
//!
//! # Layout
//! - [`settings`]: what a run asks for ([`SandboxMode`], from its `SandboxPolicy`) and what the
//!   worker allows ([`SandboxSettings`]), resolved into a [`Sandbox`].
//! - [`error`]: [`SandboxError`], and whether another attempt may help.
//! - `prepared`: the parent's half, [`Sandbox::prepare`] and [`Prepared`].
//! - `temp`: the private temp dir of each process and [`sweep_stale_temp_dirs`].
//! - `tree`: iterative, descriptor-relative walks of trees a tool made (hand-over, removal).
//! - `host`: what this host can enforce ([`probe_host`], [`log_host_support`]).
//! - [`net`]: network for tools: the filtering HTTP/HTTPS proxy a tool's network
//!   namespace reaches, host rules (`--allow-host`) and the decision per request.
//! - `linux/`: the mechanisms: `landlock.rs` (the ruleset), `seccomp.rs` (the BPF programs),
//!   `limits.rs` (rlimits), `owner.rs` (handing the workspace to the sandbox user), `child.rs`
//!   (the `pre_exec` hook), `netns.rs` (the network namespace), `pidns.rs` (the PID and mount
//!   namespace: supervisor, init, command); `unsupported.rs` stands in for them elsewhere.
//!
//! # Where the `unsafe` is, and why
//! Only in `linux/`: `child.rs` registers the `pre_exec` hook and makes the raw system calls of
//! the forked child (`setrlimit`, `setsid`, `unshare`, `fchown` of the output pipes,
//! `setgroups`/`setresgid`/`setresuid`, `PR_SET_NO_NEW_PRIVS`, `landlock_restrict_self`,
//! `seccomp`; `pidns.rs`: `fork`, `mount`, `waitpid`, `_exit`): between `fork` and
//! `exec` only async-signal-safe calls are allowed, so none of them goes through an allocating
//! wrapper. `landlock.rs`, `limits.rs` and `mod.rs` make three pointer-free (or
//! valid-struct) queries (`landlock_create_ruleset` for the ABI version, `getrlimit`,
//! `PR_GET_SECCOMP`). Each block says why it is sound in its `SAFETY` comment.
//!
//! # What a confined process gets
//! A run's `SandboxPolicy` resolves to a [`Sandbox`] ([`Sandbox::resolve`]); for each process,
//! [`Sandbox::prepare`] does everything that allocates or may block in the parent (the private
//! temp dir, handing the workspace to the sandbox user, the Landlock ruleset, the compiled seccomp
//! programs) and [`Prepared::apply`] registers a `pre_exec` hook that only makes raw system calls,
//! in this order:
//!
//! 1. resource limits: `RLIMIT_FSIZE` ([`SandboxSettings::max_file_size`], 1 GiB by default),
//!    `RLIMIT_CORE` 0 (no core dumps), `RLIMIT_NPROC` (see below);
//! 2. `setsid()`: a session of its own, without the worker's controlling terminal (a caller
//!    that made the process a group leader keeps its group; the command then makes the
//!    session itself inside its PID namespace);
//! 3. where the host has them ([`SandboxSettings::pid_probe`], logged at start): a PID and
//!    mount namespace of its own (see "Processes" below), with the network namespace when
//!    there is one; as root before the change of user, otherwise in a user namespace of its
//!    own;
//! 4. when the worker runs as root: `setgroups(0)`, `setresgid`, `setresuid` to
//!    [`SandboxSettings::uid`]/[`gid`](SandboxSettings::gid) (65534, `nobody`, by default). The
//!    run's workspace is handed to that user first in `workspace-write` mode (owner changed,
//!    fd-relative and without following symlinks; the worker's state directory at its top,
//!    named by the caller, stays the worker's), and so
//!    are the output pipes (else `/dev/stdout` could not be opened); `HOME` is the temp dir;
//! 5. `PR_SET_NO_NEW_PRIVS`;
//! 6. `landlock_restrict_self`: read and execute everywhere but the hidden paths and the
//!    directory of the private temp dirs (`<system temp dir>/baton-tools-<uid>`: another
//!    call's `TMPDIR`/`HOME` is not readable), full access to the workspace
//!    (`workspace-write` only) and to the private temp dir, read/write to `/dev/null`,
//!    `/dev/zero` and `/dev/full` (not `/dev/tty`); signals and abstract Unix sockets scoped to the
//!    sandbox (ABI 6+); TCP bind/connect denied when the network is off (ABI 4+);
//! 7. seccomp filters (a focused deny-list; everything else is allowed): without network,
//!    `socket()` of any family but `AF_UNIX` fails with `EACCES`; always, `ptrace`,
//!    `process_vm_readv`/`writev`, `bpf`, `perf_event_open`, `userfaultfd`, `io_uring_*`,
//!    `mount`, `umount2`, `pivot_root`, `unshare`, `setns`, the kernel keyring calls,
//!    `kexec_load` and `clone` with a namespace flag fail with `EPERM`; `clone3` fails with
//!    `ENOSYS` (its flags cannot be inspected; libc falls back to `clone`); x32 system calls fail
//!    with `ENOSYS` and those of another architecture kill the process.
//!
//! A worker that is not root keeps its uid *and its groups* for its tools: dropping
//! supplementary groups takes `CAP_SETGID`, and the user namespace such a worker makes must
//! deny `setgroups` (unmapped groups still grant access). Every file the worker's groups may
//! read (a `0440` key of its group) is readable to its tools unless it is in
//! [`SandboxSettings::hidden`], which Landlock enforces whatever the file's mode.
//!
//! `RLIMIT_NPROC` counts the tasks of the *real uid*, across the whole host. As the sandbox user
//! it bounds the processes of every sandboxed call of the host together at
//! [`SandboxSettings::max_processes`]; when the worker is not root (the uid is kept) the bound is
//! the uid's current task count plus `max_processes`. Root is never bound by it, hence the
//! switch. Landlock being unavailable makes [`Sandbox::prepare`] refuse
//! ([`SandboxError::Unavailable`]) unless [`SandboxSettings::allow_unsandboxed`] is set.
//!
//! # Processes
//! Where the host can (root, or unprivileged user namespaces), the process the worker spawns
//! splits into a supervisor (outside, the pid the worker waits for and kills), the init of a
//! new PID namespace (pid 1: mounts a fresh `/proc`, reaps orphans) and the command (pid 2),
//! chained by `PR_SET_PDEATHSIG` to the worker ([`Prepared::own_pid_namespace`], `pidns.rs`).
//! When the command ends, or any of the three is killed, the kernel kills every process left
//! in the namespace: nothing a call starts outlives it, however it left its process group
//! (`setsid`, `setpgid`, double forks, `nohup`), so no leftover keeps writing the workspace
//! while the worker works on it. Its `/proc` shows only its own processes (other calls'
//! command lines are out of sight). Without namespaces, only the process group is killed
//! (the caller's job), and the start-up log says so.
//!
//! # Network
//! A run that asks for the network (`SandboxPolicy::network` or any `allowed_hosts`) gets
//! [`Network::Proxied`]: each process starts in a network namespace of its own (`linux/netns.rs`,
//! before the change of user as root, in a user namespace of its own otherwise), whose only way
//! out is `127.0.0.1:`[`PROXY_PORT`] there, served from the worker by [`net::Proxy`]: HTTP and
//! HTTPS (`CONNECT`) only, each request checked against the run's hosts (none listed: any
//! public host) and the worker's [`net::NetGuard`] (the Temporal frontend and the worker's own
//! ports, never). `http_proxy`/`https_proxy` (both cases) and `ALL_PROXY` point there. Where
//! the host cannot make network namespaces, such runs are refused
//! ([`SandboxError::NetworkUnavailable`]) unless [`SandboxSettings::allow_unfiltered_network`].

pub mod error;
mod host;
pub mod net;
mod prepared;
pub mod settings;
mod temp;
mod tree;

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
use linux as imp;
#[cfg(not(target_os = "linux"))]
mod unsupported;
#[cfg(not(target_os = "linux"))]
use unsupported as imp;

#[cfg(test)]
#[cfg(target_os = "linux")]
mod tests;

pub use error::SandboxError;
pub use host::{landlock_abi, log_host_support, probe_host, probe_network, probe_pid_namespace};
pub use imp::PROXY_PORT;
pub use prepared::Prepared;
pub use settings::{
    DEFAULT_MAX_FILE_SIZE, DEFAULT_MAX_PROCESSES, DEFAULT_SANDBOX_ID, MODES, Network, Sandbox,
    SandboxMode, SandboxSettings,
};
pub use temp::sweep_stale_temp_dirs;
pub use tree::{remove_tree, tree_bytes};
