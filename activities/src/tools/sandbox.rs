//! Confinement of the processes tools start (the `shell` tool), on Linux: Landlock, seccomp,
//! resource limits and an unprivileged user, applied in the child between `fork` and `exec`.
//!
//! A run's [`SandboxPolicy`] resolves to a [`Sandbox`] ([`Sandbox::resolve`]); for each process,
//! [`Sandbox::prepare`] does everything that allocates or may block in the parent (the private
//! temp dir, handing the workspace to the sandbox user, the Landlock ruleset, the compiled seccomp
//! programs) and [`Prepared::apply`] registers a `pre_exec` hook that only makes raw system calls,
//! in this order:
//!
//! 1. resource limits: `RLIMIT_FSIZE` ([`SandboxSettings::max_file_size`], 1 GiB by default),
//!    `RLIMIT_CORE` 0 (no core dumps), `RLIMIT_NPROC` (see below);
//! 2. when the worker runs as root: `setgroups(0)`, `setresgid`, `setresuid` to
//!    [`SandboxSettings::uid`]/[`gid`](SandboxSettings::gid) (65534, `nobody`, by default). The
//!    run's workspace is handed to that user first in `workspace-write` mode (owner changed, fd-relative and without
//!    following symlinks; the workspace's `.baton` state directory stays the worker's), and so
//!    are the output pipes (else `/dev/stdout` could not be opened); `HOME` is the temp dir;
//! 3. `PR_SET_NO_NEW_PRIVS`;
//! 4. `landlock_restrict_self`: read and execute everywhere, full access to the workspace
//!    (`workspace-write` only) and to the private temp dir, read/write to `/dev/null`,
//!    `/dev/zero`, `/dev/full` and `/dev/tty`; signals and abstract Unix sockets scoped to the
//!    sandbox (ABI 6+); TCP bind/connect denied when the network is off (ABI 4+);
//! 5. seccomp filters (a focused deny-list; everything else is allowed): without network,
//!    `socket()` of any family but `AF_UNIX` fails with `EACCES`; always, `ptrace`,
//!    `process_vm_readv`/`writev`, `bpf`, `perf_event_open`, `userfaultfd`, `io_uring_*`,
//!    `mount`, `umount2`, `pivot_root`, `unshare`, `setns`, the kernel keyring calls,
//!    `kexec_load` and `clone` with a namespace flag fail with `EPERM`; `clone3` fails with
//!    `ENOSYS` (its flags cannot be inspected; libc falls back to `clone`); x32 system calls fail
//!    with `ENOSYS` and those of another architecture kill the process.
//!
//! `RLIMIT_NPROC` counts the tasks of the *real uid*, across the whole host. As the sandbox user
//! it bounds the processes of every sandboxed call of the host together at
//! [`SandboxSettings::max_processes`]; when the worker is not root (the uid is kept) the bound is
//! the uid's current task count plus `max_processes`. Root is never bound by it, hence the
//! switch. Landlock being unavailable makes [`Sandbox::prepare`] refuse
//! ([`SandboxError::Unavailable`]) unless [`SandboxSettings::allow_unsandboxed`] is set.
//!
//! `SandboxPolicy::allowed_hosts` is not enforced: a non-empty list turns the network on (logged
//! at info level for each call).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use baton_proto::SandboxPolicy;
use tracing::{info, warn};

/// The sandbox modes a run may ask for, for messages.
pub const MODES: &str = "\"workspace-write\" (the default), \"read-only\" or \"off\"";

/// The default uid and gid tool processes run as when the worker is root (`nobody`).
pub const DEFAULT_SANDBOX_ID: u32 = 65534;

/// The default bound on the sandbox user's processes (see the module docs).
pub const DEFAULT_MAX_PROCESSES: u64 = 512;

/// The default largest file a sandboxed process may write (1 GiB).
pub const DEFAULT_MAX_FILE_SIZE: u64 = 1 << 30;

/// What a sandboxed process may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxMode {
    /// The run's workspace and a private temp dir (the default).
    WorkspaceWrite,
    /// Only a private temp dir.
    ReadOnly,
    /// No sandbox at all: processes run as the worker does.
    Off,
}

impl SandboxMode {
    /// Parses a `SandboxPolicy::mode` (empty means `workspace-write`).
    pub fn parse(mode: &str) -> Result<Self, SandboxError> {
        match mode.trim() {
            "" | "workspace-write" => Ok(Self::WorkspaceWrite),
            "read-only" => Ok(Self::ReadOnly),
            "off" => Ok(Self::Off),
            other => Err(SandboxError::UnknownMode(other.to_owned())),
        }
    }

    /// The mode's name in a `SandboxPolicy`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WorkspaceWrite => "workspace-write",
            Self::ReadOnly => "read-only",
            Self::Off => "off",
        }
    }
}

/// The worker's side of sandboxing (from its settings).
#[derive(Debug, Clone)]
pub struct SandboxSettings {
    /// Run tool processes unsandboxed (with a warning) where the host cannot sandbox them,
    /// instead of failing the call.
    pub allow_unsandboxed: bool,
    /// Honour runs that ask for no sandbox (`--sandbox off`). Off by default: on a worker
    /// shared by many teams, a submitter must not be able to run commands as the worker's
    /// user with its files, secrets and network.
    pub allow_sandbox_off: bool,
    /// The user tool processes run as when the worker is root.
    pub uid: u32,
    /// The group tool processes run as when the worker is root.
    pub gid: u32,
    /// The bound on processes (see the module docs).
    pub max_processes: u64,
    /// The largest file a process may write, in bytes.
    pub max_file_size: u64,
    /// Whether this host can enforce a sandbox: `Err(reason)` if not. Replaceable for tests.
    pub probe: fn() -> Result<(), String>,
    /// Directories sandboxed processes may not read (the worker sets its workspace root and
    /// its local blob store): every run's processes run as the same user, so without this
    /// one run could read another's workspace and every run's stored conversation. The
    /// run's own workspace stays readable.
    pub hidden: Vec<PathBuf>,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        Self {
            allow_unsandboxed: false,
            allow_sandbox_off: false,
            uid: DEFAULT_SANDBOX_ID,
            gid: DEFAULT_SANDBOX_ID,
            max_processes: DEFAULT_MAX_PROCESSES,
            max_file_size: DEFAULT_MAX_FILE_SIZE,
            probe: probe_host,
            hidden: Vec::new(),
        }
    }
}

/// How the processes of one tool call are confined: a run's policy with the worker's settings.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// What may be written.
    pub mode: SandboxMode,
    /// Whether IPv4/IPv6 (any non-Unix) sockets are allowed.
    pub network: bool,
    /// The worker's settings.
    pub settings: Arc<SandboxSettings>,
}

/// Why a sandbox could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The run's policy names no known mode.
    #[error("unknown sandbox mode '{0}': use {MODES}")]
    UnknownMode(String),
    /// The host cannot sandbox and the worker may not run unsandboxed.
    #[error(
        "this worker cannot sandbox tool processes ({reason}); run the worker on Linux >= 5.13 \
         with Landlock enabled, or set allow_unsandboxed = true in its config"
    )]
    Unavailable {
        /// What is missing.
        reason: String,
    },
    /// The run asked for no sandbox, which this worker does not allow.
    #[error(
        "this run asks for no sandbox (--sandbox off), which this worker does not allow: its \
         commands would run as the worker's own user, with its files and network; submit \
         without --sandbox off (use --network if the task needs the network), or have the \
         worker's operator set allow_sandbox_off = true"
    )]
    OffNotAllowed,
    /// A step of the set-up failed (the temp dir, handing over the workspace, the ruleset).
    #[error("cannot set up the sandbox: {context}: {source}")]
    Setup {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl SandboxError {
    /// Whether another attempt (maybe on another worker) may succeed: not for a bad policy or
    /// a host that cannot sandbox.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Setup { .. })
    }

    fn setup(
        context: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self::Setup {
            context: context.into(),
            source: source.into(),
        }
    }
}

impl Sandbox {
    /// No confinement (mode `off`).
    pub fn off() -> Self {
        Self {
            mode: SandboxMode::Off,
            network: true,
            settings: Arc::new(SandboxSettings {
                allow_sandbox_off: true,
                ..SandboxSettings::default()
            }),
        }
    }

    /// The sandbox a run's policy asks for (no policy: `workspace-write`, no network). Logs
    /// that an allow-list of hosts is advisory.
    pub fn resolve(
        policy: Option<&SandboxPolicy>,
        settings: Arc<SandboxSettings>,
    ) -> Result<Self, SandboxError> {
        let (mode, network, hosts) = match policy {
            Some(p) => (p.mode.as_str(), p.network, p.allowed_hosts.as_slice()),
            None => ("", false, &[][..]),
        };
        let mode = SandboxMode::parse(mode)?;
        if !hosts.is_empty() && mode != SandboxMode::Off {
            info!(
                allowed_hosts = ?hosts,
                "the sandbox does not enforce allowed_hosts: tool processes may reach any host"
            );
        }
        Ok(Self {
            mode,
            network: network || !hosts.is_empty() || mode == SandboxMode::Off,
            settings,
        })
    }

    /// Everything the parent does before spawning a confined process whose working directory is
    /// `workspace` (which must exist). `None`: run it unconfined (mode `off`, or the host cannot
    /// sandbox and the settings allow that, logged as a warning). Blocking: call it from a
    /// blocking thread.
    pub fn prepare(&self, workspace: &Path) -> Result<Option<Prepared>, SandboxError> {
        if self.mode == SandboxMode::Off {
            // File tools start no process and keep their own confinement; only processes
            // would run as the worker.
            if !self.settings.allow_sandbox_off {
                return Err(SandboxError::OffNotAllowed);
            }
            return Ok(None);
        }
        if let Err(reason) = (self.settings.probe)() {
            if self.settings.allow_unsandboxed {
                warn!(
                    reason,
                    mode = self.mode.as_str(),
                    "running a tool process unsandboxed: this host cannot sandbox and \
                     allow_unsandboxed is set"
                );
                return Ok(None);
            }
            return Err(SandboxError::Unavailable { reason });
        }
        imp::prepare(self, workspace).map(Some)
    }
}

/// A confined process's set-up, made in the parent; keep it until the process has ended (it
/// owns the private temp dir, removed when dropped).
#[derive(Debug)]
pub struct Prepared {
    temp: tempfile::TempDir,
    env: Vec<(&'static str, OsString)>,
    child: imp::Child,
}

impl Prepared {
    /// The private temp dir (`TMPDIR`).
    pub fn temp_dir(&self) -> &Path {
        self.temp.path()
    }

    /// Sets the environment and registers the `pre_exec` hook that confines the child. Register
    /// other hooks after this one: they then run confined, as the sandbox user (e.g.
    /// `PR_SET_PDEATHSIG`, which a change of user clears).
    pub fn apply(&mut self, command: &mut tokio::process::Command) {
        for (name, value) in &self.env {
            command.env(name, value);
        }
        self.child.apply(command);
    }

    /// Call once the process is spawned: closes the parent's copy of the Landlock ruleset.
    pub fn spawned(&mut self) {
        self.child.spawned();
    }
}

fn temp_env(temp: &Path, home: bool) -> Vec<(&'static str, OsString)> {
    let mut env: Vec<(&'static str, OsString)> = ["TMPDIR", "TMP", "TEMP"]
        .into_iter()
        .map(|name| (name, temp.as_os_str().to_owned()))
        .collect();
    if home {
        env.push(("HOME", temp.as_os_str().to_owned()));
    }
    env
}

/// The paths to grant read access under so that everything is readable except what lies in
/// `hidden` (Landlock only grants): `/` when nothing is hidden, else the entries of every
/// directory on the way to a hidden one that do not lead to one. The directories on the way
/// themselves are not listable (`ls /` fails when a hidden path is under `/`), but they can be
/// walked through. A symbolic link leading into (or above) a hidden path is left out.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
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

/// The name prefix of every private temp dir; `<prefix><worker pid>-` is a worker's.
const TEMP_PREFIX: &str = "baton-tool-";

/// The name prefix of the private temp dirs of worker process `pid`.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn temp_prefix(pid: u32) -> String {
    format!("{TEMP_PREFIX}{pid}-")
}

/// Removes the private temp dirs (in the system temp dir) that workers no longer running left
/// behind: a worker killed outright (`kill -9`, OOM) cannot remove those of its calls in
/// flight, and what a command wrote there (build caches, downloads) would pile up. Dirs of
/// live processes are left alone. Returns how many were removed.
pub fn sweep_stale_temp_dirs() -> usize {
    sweep_temp_dirs_in(&std::env::temp_dir())
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
        if !alive && std::fs::remove_dir_all(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Whether this host can sandbox: Landlock and seccomp filters available.
pub fn probe_host() -> Result<(), String> {
    imp::probe()
}

/// The Landlock ABI version of the running kernel, if it has Landlock.
pub fn landlock_abi() -> Result<i32, String> {
    imp::landlock_abi()
}

/// Describes the host's sandboxing at worker start: logged once.
pub fn log_host_support(settings: &SandboxSettings) {
    match (settings.probe)() {
        Ok(()) => {
            let abi = landlock_abi().unwrap_or_default();
            let user = if imp::is_root() {
                format!("uid {} gid {}", settings.uid, settings.gid)
            } else {
                "the worker's uid".to_owned()
            };
            info!(
                landlock_abi = abi,
                max_processes = settings.max_processes,
                "tool processes are sandboxed (Landlock + seccomp) and run as {user}"
            );
        }
        Err(reason) if settings.allow_unsandboxed => warn!(
            reason,
            "this host cannot sandbox tool processes; allow_unsandboxed is set: runs that ask \
             for a sandbox get none"
        ),
        Err(reason) => warn!(
            reason,
            "this host cannot sandbox tool processes: shell calls of runs that ask for a sandbox \
             (the default) will fail; set allow_unsandboxed = true to run them unsandboxed"
        ),
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use std::collections::BTreeMap;
    use std::ffi::CStr;
    use std::os::fd::{AsRawFd, OwnedFd, RawFd};
    use std::path::{Path, PathBuf};

    use landlock::{
        ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
        RulesetAttr, RulesetCreatedAttr, Scope,
    };
    use nix::dir::Dir;
    use nix::errno::Errno;
    use nix::fcntl::{AtFlags, OFlag, openat};
    use nix::sys::stat::{FileStat, Mode, SFlag, fstat};
    use nix::unistd::{Gid, Uid, fchownat};
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };
    use tracing::warn;

    use super::{Prepared, Sandbox, SandboxError, SandboxMode, temp_env};
    use baton_store::snapshot::LOCAL_DIR;

    /// The type of `RLIMIT_*` constants.
    #[cfg(target_env = "gnu")]
    type Resource = libc::__rlimit_resource_t;
    #[cfg(not(target_env = "gnu"))]
    type Resource = libc::c_int;

    /// The Landlock ABI whose access rights we ask for (the newest one tested).
    const ABI_USED: ABI = ABI::V7;

    /// Character devices ordinary shells and tools write to.
    const DEVICES: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"];

    /// `landlock_create_ruleset` flag asking for the ABI version.
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;

    pub(super) fn is_root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    pub(super) fn landlock_abi() -> Result<i32, String> {
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

    pub(super) fn probe() -> Result<(), String> {
        landlock_abi()?;
        // SAFETY: a query without pointers.
        if unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) } < 0 {
            return Err(format!(
                "seccomp unavailable: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(())
    }

    /// What the child does between fork and exec, prepared by the parent.
    #[derive(Debug)]
    pub(super) struct Child {
        ruleset: Option<OwnedFd>,
        programs: Vec<Vec<libc::sock_filter>>,
        max_file_size: libc::rlim_t,
        max_processes: libc::rlim_t,
        user: Option<(u32, u32)>,
    }

    pub(super) fn prepare(sandbox: &Sandbox, workspace: &Path) -> Result<Prepared, SandboxError> {
        let settings = &sandbox.settings;
        let user = (is_root() && settings.uid != 0).then_some((settings.uid, settings.gid));
        let temp = tempfile::Builder::new()
            .prefix(&super::temp_prefix(std::process::id()))
            .tempdir()
            .map_err(|e| SandboxError::setup("cannot create the private temp dir", e))?;
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(temp.path(), Some(uid), Some(gid)).map_err(|e| {
                SandboxError::setup("cannot hand the private temp dir to the sandbox user", e)
            })?;
        }
        // Read-only runs leave ownership alone: an owner could still chmod or touch files,
        // which Landlock does not cover.
        if let Some((uid, gid)) = user.filter(|_| sandbox.mode == SandboxMode::WorkspaceWrite) {
            give_tree(workspace, uid, gid).map_err(|e| {
                SandboxError::setup(
                    format!(
                        "cannot hand the workspace '{}' to uid {uid}",
                        workspace.display()
                    ),
                    e,
                )
            })?;
        }
        let ruleset = ruleset(
            sandbox.mode,
            sandbox.network,
            workspace,
            temp.path(),
            &settings.hidden,
        )?;
        let programs = seccomp_programs(sandbox.network)?;
        let max_processes = match user {
            Some(_) => settings.max_processes,
            None => tasks_of(nix::unistd::getuid().as_raw()) + settings.max_processes,
        };
        Ok(Prepared {
            env: temp_env(temp.path(), user.is_some()),
            temp,
            child: Child {
                ruleset: Some(ruleset),
                programs,
                max_file_size: capped(libc::RLIMIT_FSIZE, settings.max_file_size),
                max_processes: capped(libc::RLIMIT_NPROC, max_processes),
                user,
            },
        })
    }

    /// `value`, or the hard limit of `resource` if lower (only root may raise it).
    fn capped(resource: Resource, value: u64) -> libc::rlim_t {
        let mut current = libc::rlimit {
            rlim_cur: 0,
            rlim_max: libc::RLIM_INFINITY,
        };
        // SAFETY: `current` is a valid rlimit to fill.
        if unsafe { libc::getrlimit(resource, &mut current) } != 0 {
            return value;
        }
        value.min(current.rlim_max)
    }

    /// The Landlock ruleset: read and execute everywhere but `hidden`, the workspace too, write
    /// where `mode` allows.
    fn ruleset(
        mode: SandboxMode,
        network: bool,
        workspace: &Path,
        temp: &Path,
        hidden: &[PathBuf],
    ) -> Result<OwnedFd, SandboxError> {
        let failed = |e: landlock::RulesetError| SandboxError::setup("Landlock ruleset", e);
        let path =
            |p: &Path| PathFd::new(p).map_err(|e| SandboxError::setup("Landlock ruleset", e));
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
        for readable in super::readable_except(hidden)
            .iter()
            .map(PathBuf::as_path)
            .chain([workspace])
        {
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

    /// The system calls denied with `EPERM` whatever their arguments.
    const DENIED: [libc::c_long; 18] = [
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_kexec_load,
    ];

    /// `clone` flags creating namespaces (a user namespace gives capabilities inside it).
    const NAMESPACE_FLAGS: [libc::c_int; 7] = [
        libc::CLONE_NEWNS,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWCGROUP,
    ];

    /// The seccomp programs, compiled; installed in this order (for two denials of one call,
    /// the errno of the program installed last wins).
    fn seccomp_programs(network: bool) -> Result<Vec<Vec<libc::sock_filter>>, SandboxError> {
        let failed = |e: seccompiler::BackendError| SandboxError::setup("seccomp filter", e);
        let cond = |arg: u8, op: SeccompCmpOp, value: u64| {
            SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(failed)
        };
        let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(failed)?;

        let mut denied: BTreeMap<i64, Vec<SeccompRule>> =
            DENIED.iter().map(|&nr| (nr, Vec::new())).collect();
        let mut clone_rules = Vec::new();
        for flag in NAMESPACE_FLAGS {
            let flag = u64::from(flag.cast_unsigned());
            clone_rules.push(
                SeccompRule::new(vec![cond(0, SeccompCmpOp::MaskedEq(flag), flag)?])
                    .map_err(failed)?,
            );
        }
        denied.insert(libc::SYS_clone, clone_rules);
        let mut programs = vec![compile(denied, libc::EPERM, arch)?];

        if !network {
            let unix = u64::from(libc::AF_UNIX.cast_unsigned());
            let rule = SeccompRule::new(vec![cond(0, SeccompCmpOp::Ne, unix)?]).map_err(failed)?;
            programs.push(compile(
                BTreeMap::from([(libc::SYS_socket, vec![rule])]),
                libc::EACCES,
                arch,
            )?);
        }
        programs.push(compile(
            BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
            libc::ENOSYS,
            arch,
        )?);
        #[cfg(target_arch = "x86_64")]
        programs.push(x32_guard());
        Ok(programs)
    }

    fn compile(
        rules: BTreeMap<i64, Vec<SeccompRule>>,
        errno: libc::c_int,
        arch: TargetArch,
    ) -> Result<Vec<libc::sock_filter>, SandboxError> {
        let failed = |e: seccompiler::BackendError| SandboxError::setup("seccomp filter", e);
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(errno.cast_unsigned()),
            arch,
        )
        .map_err(failed)?;
        let program = seccompiler::BpfProgram::try_from(filter).map_err(failed)?;
        Ok(program
            .into_iter()
            .map(|i| libc::sock_filter {
                code: i.code,
                jt: i.jt,
                jf: i.jf,
                k: i.k,
            })
            .collect())
    }

    /// Denies x32 system calls (numbers with bit 30 set, same audit arch as x86_64), which
    /// would otherwise slip past rules written for x86_64 numbers.
    #[cfg(target_arch = "x86_64")]
    fn x32_guard() -> Vec<libc::sock_filter> {
        const X32_SYSCALL_BIT: u32 = 0x4000_0000;
        let stmt = |code: u32, k: u32| libc::sock_filter {
            code: code as u16,
            jt: 0,
            jf: 0,
            k,
        };
        vec![
            // Load seccomp_data.nr (offset 0).
            stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
            libc::sock_filter {
                code: (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16,
                jt: 0,
                jf: 1,
                k: X32_SYSCALL_BIT,
            },
            stmt(
                libc::BPF_RET | libc::BPF_K,
                libc::SECCOMP_RET_ERRNO | libc::ENOSYS.cast_unsigned(),
            ),
            stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
        ]
    }

    /// The tasks (threads) of `uid` now: what `RLIMIT_NPROC` counts.
    fn tasks_of(uid: u32) -> u64 {
        use std::os::unix::fs::MetadataExt;
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return 0;
        };
        let mut tasks = 0;
        for entry in entries.flatten() {
            let is_pid = entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
            if !is_pid || entry.metadata().ok().map(|m| m.uid()) != Some(uid) {
                continue;
            }
            if let Ok(threads) = std::fs::read_dir(entry.path().join("task")) {
                tasks += threads.count() as u64;
            }
        }
        tasks
    }

    /// Makes `uid`:`gid` the owner of the tree at `root` (a directory), except the worker's
    /// `.baton` state directory at its top, symlinks (their owner does not matter) and files
    /// with several links (one may be outside the tree). Every step is relative to an open
    /// directory and follows no symlink, so a process renaming things meanwhile cannot make it
    /// change anything outside the tree.
    fn give_tree(root: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
        let dir = nix::fcntl::open(
            root,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        let mut skipped = 0usize;
        give_dir(
            dir,
            (Uid::from_raw(uid), Gid::from_raw(gid)),
            true,
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
        top: bool,
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
                    name != b"." && name != b".." && !(top && name == LOCAL_DIR.as_bytes())
                })
                .collect()
        };
        for name in names {
            let name: &CStr = &name;
            let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            match openat(&dir, name, flags, Mode::empty()) {
                Ok(sub) => give_dir(sub, owner, false, skipped)?,
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

    impl Child {
        pub(super) fn apply(&self, command: &mut tokio::process::Command) {
            let ruleset: RawFd = self.ruleset.as_ref().map_or(-1, AsRawFd::as_raw_fd);
            let programs = self.programs.clone();
            let (max_file_size, max_processes, user) =
                (self.max_file_size, self.max_processes, self.user);
            // SAFETY: the closure runs in the forked child before `exec`. It only makes raw
            // system calls (async-signal-safe), does not allocate (the programs were built in
            // the parent and are only read), and reports failures as OS errors.
            unsafe {
                command.pre_exec(move || {
                    confine(ruleset, &programs, max_file_size, max_processes, user)
                });
            }
        }

        pub(super) fn spawned(&mut self) {
            self.ruleset = None;
        }
    }

    /// Runs in the child: limits, user, no_new_privs, Landlock, seccomp. System calls only.
    fn confine(
        ruleset: RawFd,
        programs: &[Vec<libc::sock_filter>],
        max_file_size: libc::rlim_t,
        max_processes: libc::rlim_t,
        user: Option<(u32, u32)>,
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
        limit(libc::RLIMIT_FSIZE, max_file_size)?;
        limit(libc::RLIMIT_CORE, 0)?;
        limit(libc::RLIMIT_NPROC, max_processes)?;
        if let Some((uid, gid)) = user {
            // The output pipes were made by root: hand them over, or `/dev/stdout` cannot be
            // opened. Pipes only: stdout might be a file in other callers.
            for fd in [libc::STDOUT_FILENO, libc::STDERR_FILENO] {
                // SAFETY: fstat(2) and fchown(2) on an open descriptor with a valid struct.
                unsafe {
                    let mut stat: libc::stat = std::mem::zeroed();
                    if libc::fstat(fd, &mut stat) == 0
                        && stat.st_mode & libc::S_IFMT == libc::S_IFIFO
                    {
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
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::path::Path;

    use super::{Prepared, Sandbox, SandboxError};

    pub(super) fn is_root() -> bool {
        false
    }

    pub(super) fn landlock_abi() -> Result<i32, String> {
        Err("Landlock unavailable: not Linux".to_owned())
    }

    pub(super) fn probe() -> Result<(), String> {
        landlock_abi().map(|_| ())
    }

    #[derive(Debug)]
    pub(super) struct Child;

    impl Child {
        pub(super) fn apply(&self, _command: &mut tokio::process::Command) {}
        pub(super) fn spawned(&mut self) {}
    }

    pub(super) fn prepare(_sandbox: &Sandbox, _workspace: &Path) -> Result<Prepared, SandboxError> {
        Err(SandboxError::Unavailable {
            reason: "Landlock unavailable: not Linux".to_owned(),
        })
    }
}

#[cfg(test)]
#[cfg(target_os = "linux")]
mod tests {
    use super::*;
    use crate::tools::tests::{call, context};
    use crate::tools::{ToolContext, ToolError, execute};
    use baton_proto::ToolResult;
    use baton_workflows::tools::{OUTPUT_CAP_BYTES, SHELL};
    use pretty_assertions::assert_eq;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::time::{Duration, Instant};
    use tempfile::TempDir;

    fn settings() -> SandboxSettings {
        SandboxSettings::default()
    }

    /// A context whose workspace is `<dir>/ws`, sandboxed with `mode`.
    fn sandboxed(dir: &TempDir, mode: SandboxMode, network: bool) -> ToolContext {
        with_settings(dir, mode, network, settings())
    }

    fn with_settings(
        dir: &TempDir,
        mode: SandboxMode,
        network: bool,
        settings: SandboxSettings,
    ) -> ToolContext {
        let mut ctx = context(dir);
        ctx.workspace = dir.path().join("ws");
        ctx.sandbox = Sandbox {
            mode,
            network,
            settings: Arc::new(settings),
        };
        ctx
    }

    async fn sh(ctx: &ToolContext, command: &str) -> ToolResult {
        try_sh(ctx, command).await.unwrap()
    }

    async fn try_sh(ctx: &ToolContext, command: &str) -> Result<ToolResult, ToolError> {
        execute(ctx, &call(SHELL, serde_json::json!({ "command": command }))).await
    }

    fn is_root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    /// `<dir>/outside`, writable by anyone: only the sandbox stops a write there.
    fn open_outside(dir: &TempDir) -> std::path::PathBuf {
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o777)).unwrap();
        outside
    }

    fn python() -> Option<&'static str> {
        Path::new("/usr/bin/python3")
            .exists()
            .then_some("/usr/bin/python3")
    }

    /// Waits (bounded) until `check` holds.
    async fn eventually(mut check: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if check() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        check()
    }

    #[tokio::test]
    async fn workspace_write_allows_the_workspace_and_tmpdir_only() {
        let dir = TempDir::new().unwrap();
        let outside = open_outside(&dir);
        let ctx = sandboxed(&dir, SandboxMode::WorkspaceWrite, false);
        std::fs::create_dir_all(&ctx.workspace).unwrap();
        std::fs::write(ctx.workspace.join("readme.txt"), "from the worker\n").unwrap();
        let result = sh(
            &ctx,
            &format!(
                "cat readme.txt; echo in > inside.txt && cat inside.txt; \
                 echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"; echo \"$TMPDIR\" > tmpdir.txt; \
                 echo null > /dev/null && echo to-stdout > /dev/stdout; \
                 echo x > {}/file || echo outside-refused; \
                 echo x > /tmp/baton-sandbox-test-$$ || echo tmp-refused",
                outside.display()
            ),
        )
        .await;
        assert!(result.content.starts_with(
            "exit code: 0\n--- stdout ---\nfrom the worker\nin\nt\nto-stdout\noutside-refused\ntmp-refused\n--- stderr ---\n"
        ), "{}", result.content);
        assert!(
            result.content.contains("Permission denied"),
            "{}",
            result.content
        );
        assert!(!outside.join("file").exists());
        assert_eq!(
            std::fs::read_to_string(ctx.workspace.join("inside.txt")).unwrap(),
            "in\n"
        );
        // The private temp dir was not /tmp, and is gone after the call.
        let tmpdir = std::fs::read_to_string(ctx.workspace.join("tmpdir.txt")).unwrap();
        let tmpdir = Path::new(tmpdir.trim());
        assert!(
            tmpdir
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("baton-tool-"),
            "{}",
            tmpdir.display()
        );
        assert!(
            eventually(|| !tmpdir.exists()).await,
            "{}",
            tmpdir.display()
        );
    }

    /// Every run's commands run as the same user: the workspace root (other runs) and the
    /// blob store are hidden, the run's own workspace and the system stay readable.
    #[tokio::test]
    async fn other_runs_and_the_store_are_not_readable() {
        let dir = TempDir::new().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let root = dir.path().join("workspaces");
        let blobs = dir.path().join("blobs");
        for d in [root.join("run-a"), root.join("run-b"), blobs.join("ab")] {
            std::fs::create_dir_all(&d).unwrap();
        }
        for d in [&root, &blobs, &root.join("run-b"), &blobs.join("ab")] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::write(root.join("run-b/secret.txt"), "victim-secret\n").unwrap();
        std::fs::write(blobs.join("ab/blob"), "stored-secret\n").unwrap();
        std::fs::write(root.join("run-a/own.txt"), "own-content\n").unwrap();
        for mode in [SandboxMode::WorkspaceWrite, SandboxMode::ReadOnly] {
            let mut ctx = with_settings(
                &dir,
                mode,
                false,
                SandboxSettings {
                    hidden: vec![root.clone(), blobs.clone()],
                    ..settings()
                },
            );
            ctx.workspace = root.join("run-a");
            let result = sh(
                &ctx,
                &format!(
                    "cat own.txt; cat ../run-b/secret.txt || echo denied-run; \
                     cat {}/ab/blob || echo denied-store; ls .. || echo denied-list; \
                     cat /etc/passwd > /dev/null && echo system-ok",
                    blobs.display()
                ),
            )
            .await;
            let out = &result.content;
            for want in [
                "own-content",
                "denied-run",
                "denied-store",
                "denied-list",
                "system-ok",
            ] {
                assert!(out.contains(want), "{mode:?}: {want} missing: {out}");
            }
            assert!(
                !out.contains("victim-secret") && !out.contains("stored-secret"),
                "{mode:?}: {out}"
            );
        }
    }

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

    #[tokio::test]
    async fn read_only_forbids_workspace_writes() {
        let dir = TempDir::new().unwrap();
        let ctx = sandboxed(&dir, SandboxMode::ReadOnly, false);
        std::fs::create_dir_all(&ctx.workspace).unwrap();
        std::fs::write(ctx.workspace.join("readme.txt"), "readable\n").unwrap();
        let result = sh(
            &ctx,
            "cat readme.txt; echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"; \
             echo x > new.txt || echo create-refused; echo x >> readme.txt || echo append-refused; \
             rm readme.txt || echo rm-refused",
        )
        .await;
        assert!(
            result.content.starts_with(
                "exit code: 0\n--- stdout ---\nreadable\nt\ncreate-refused\nappend-refused\nrm-refused\n"
            ),
            "{}",
            result.content
        );
        assert!(!ctx.workspace.join("new.txt").exists());
        assert_eq!(
            std::fs::read_to_string(ctx.workspace.join("readme.txt")).unwrap(),
            "readable\n"
        );
    }

    #[tokio::test]
    async fn network_off_denies_tcp_and_network_on_allows_it() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let connect = format!(
            "bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' && echo connected || echo refused"
        );

        let dir = TempDir::new().unwrap();
        let off = sandboxed(&dir, SandboxMode::WorkspaceWrite, false);
        let result = sh(&off, &connect).await;
        assert!(
            result.content.contains("refused") && result.content.contains("Permission denied"),
            "{}",
            result.content
        );
        assert!(
            tokio::time::timeout(Duration::from_millis(200), listener.accept())
                .await
                .is_err(),
            "the sandboxed process reached the listener"
        );
        // Unix sockets stay allowed.
        if let Some(python) = python() {
            let result = sh(
                &off,
                &format!(
                    "{python} -c 'import socket; socket.socket(socket.AF_UNIX).close(); print(\"unix-ok\")'"
                ),
            )
            .await;
            assert_eq!(result.content, "exit code: 0\n--- stdout ---\nunix-ok");
        }

        let on = sandboxed(&dir, SandboxMode::WorkspaceWrite, true);
        let (result, accepted) = tokio::join!(sh(&on, &connect), listener.accept());
        assert!(result.content.contains("connected"), "{}", result.content);
        assert!(accepted.is_ok());
    }

    #[tokio::test]
    async fn ptrace_and_user_namespaces_are_denied() {
        let Some(python) = python() else {
            eprintln!("skipped: /usr/bin/python3 is needed to call ptrace(2) and unshare(2)");
            return;
        };
        let script = "import ctypes, os\n\
                      libc = ctypes.CDLL(None, use_errno=True)\n\
                      for name, call in [('ptrace', lambda: libc.ptrace(0, 0, 0, 0)), \
                      ('unshare', lambda: libc.unshare(0x10000000))]:\n\
                      \x20   rc = call()\n\
                      \x20   print(name, rc, os.strerror(ctypes.get_errno()) if rc else 'ok')\n";
        let dir = TempDir::new().unwrap();
        let ctx = sandboxed(&dir, SandboxMode::WorkspaceWrite, true);
        std::fs::create_dir_all(&ctx.workspace).unwrap();
        std::fs::write(ctx.workspace.join("probe.py"), script).unwrap();
        let result = sh(&ctx, &format!("{python} probe.py")).await;
        assert_eq!(
            result.content,
            "exit code: 0\n--- stdout ---\nptrace -1 Operation not permitted\nunshare -1 Operation not permitted"
        );
        // Unsandboxed, PTRACE_TRACEME works: the filter made the difference.
        let mut off = ctx.clone();
        off.sandbox = Sandbox::off();
        let result = sh(&off, &format!("{python} probe.py")).await;
        assert!(result.content.contains("ptrace 0 ok"), "{}", result.content);
    }

    #[tokio::test]
    async fn huge_output_and_big_files_are_bounded() {
        let dir = TempDir::new().unwrap();
        let ctx = with_settings(
            &dir,
            SandboxMode::WorkspaceWrite,
            false,
            SandboxSettings {
                max_file_size: 1 << 20,
                ..settings()
            },
        );
        let result = sh(&ctx, "head -c 20000000 /dev/zero | tr '\\0' o").await;
        assert!(!result.is_error);
        assert!(result.content.len() <= OUTPUT_CAP_BYTES);
        assert!(
            result
                .content
                .contains("bytes cut from the middle of 20000000 ...]")
        );
        let result = sh(&ctx, "head -c 2000000 /dev/zero > big; echo \"rc=$?\"").await;
        assert!(!result.content.contains("rc=0"), "{}", result.content);
        assert_eq!(
            std::fs::metadata(ctx.workspace.join("big")).unwrap().len(),
            1 << 20
        );
    }

    #[tokio::test]
    async fn runs_as_the_sandbox_user_when_the_worker_is_root() {
        let dir = TempDir::new().unwrap();
        let ctx = sandboxed(&dir, SandboxMode::WorkspaceWrite, false);
        let result = sh(
            &ctx,
            "id -u; id -g; test \"$HOME\" = \"$TMPDIR\" && echo home-is-tmp; true",
        )
        .await;
        let expected = if is_root() {
            "65534\n65534\nhome-is-tmp".to_owned()
        } else {
            let uid = nix::unistd::getuid();
            let gid = nix::unistd::getgid();
            format!("{uid}\n{gid}")
        };
        assert_eq!(
            result.content,
            format!("exit code: 0\n--- stdout ---\n{expected}")
        );
    }

    #[tokio::test]
    async fn workspace_inside_a_private_directory_works() {
        // TempDir is mode 0700: the sandbox user cannot walk to the workspace by its path, but
        // the child enters it before changing user.
        let dir = TempDir::new().unwrap();
        let ctx = sandboxed(&dir, SandboxMode::WorkspaceWrite, false);
        let result = sh(&ctx, "pwd; echo x > f && cat f").await;
        let root = std::fs::canonicalize(dir.path()).unwrap().join("ws");
        assert_eq!(
            result.content,
            format!("exit code: 0\n--- stdout ---\n{}\nx", root.display())
        );
    }

    #[tokio::test]
    async fn the_workspace_is_handed_over_without_following_links() {
        if !is_root() {
            eprintln!("skipped: only a root worker hands the workspace to another user");
            return;
        }
        let dir = TempDir::new().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret"), "root's").unwrap();
        let ctx = sandboxed(&dir, SandboxMode::WorkspaceWrite, false);
        std::fs::create_dir_all(ctx.workspace.join("sub/.baton")).unwrap();
        std::fs::create_dir_all(ctx.workspace.join(".baton")).unwrap();
        std::fs::write(ctx.workspace.join("sub/by-root.txt"), "a\n").unwrap();
        std::os::unix::fs::symlink(&outside, ctx.workspace.join("link")).unwrap();
        std::fs::hard_link(outside.join("secret"), ctx.workspace.join("hard")).unwrap();

        let result = sh(
            &ctx,
            "echo b >> sub/by-root.txt && cat sub/by-root.txt; \
             echo x > .baton/state || echo state-refused",
        )
        .await;
        assert!(
            result
                .content
                .starts_with("exit code: 0\n--- stdout ---\na\nb\nstate-refused"),
            "{}",
            result.content
        );
        let owner = |p: &Path| std::fs::symlink_metadata(p).unwrap().uid();
        assert_eq!(owner(&ctx.workspace), 65534);
        assert_eq!(owner(&ctx.workspace.join("sub/.baton")), 65534);
        assert_eq!(owner(&ctx.workspace.join(".baton")), 0);
        assert_eq!(owner(&outside), 0);
        assert_eq!(owner(&outside.join("secret")), 0);
        assert_eq!(owner(&ctx.workspace.join("link")), 0);
    }

    #[tokio::test]
    async fn refuses_when_the_host_cannot_sandbox() {
        fn unavailable() -> Result<(), String> {
            Err("Landlock unavailable: disabled for this test".to_owned())
        }
        let dir = TempDir::new().unwrap();
        let ctx = with_settings(
            &dir,
            SandboxMode::WorkspaceWrite,
            false,
            SandboxSettings {
                probe: unavailable,
                ..settings()
            },
        );
        let err = try_sh(&ctx, "echo ran > ran.txt").await.unwrap_err();
        let ToolError::Sandbox(e) = &err else {
            panic!("{err:?}");
        };
        assert!(!e.is_retryable());
        assert_eq!(
            err.to_string(),
            "this worker cannot sandbox tool processes (Landlock unavailable: disabled for this \
             test); run the worker on Linux >= 5.13 with Landlock enabled, or set \
             allow_unsandboxed = true in its config"
        );
        assert!(!ctx.workspace.join("ran.txt").exists());

        // Allowed: it runs, unconfined.
        let allowed = with_settings(
            &dir,
            SandboxMode::WorkspaceWrite,
            false,
            SandboxSettings {
                probe: unavailable,
                allow_unsandboxed: true,
                ..settings()
            },
        );
        let result = sh(&allowed, "id -u").await;
        let uid = nix::unistd::getuid();
        assert_eq!(
            result.content,
            format!("exit code: 0\n--- stdout ---\n{uid}")
        );
    }

    #[tokio::test]
    async fn mode_off_runs_unconfined() {
        let dir = TempDir::new().unwrap();
        let outside = open_outside(&dir);
        let mut ctx = sandboxed(&dir, SandboxMode::Off, false);
        ctx.sandbox.settings = Arc::new(SandboxSettings {
            probe: || Err("never asked".to_owned()),
            allow_sandbox_off: true,
            ..settings()
        });
        let result = sh(
            &ctx,
            &format!("id -u; echo x > {}/file && echo wrote", outside.display()),
        )
        .await;
        let uid = nix::unistd::getuid();
        assert_eq!(
            result.content,
            format!("exit code: 0\n--- stdout ---\n{uid}\nwrote")
        );
    }

    #[test]
    fn policies_resolve() {
        let settings = Arc::new(SandboxSettings::default());
        let resolve = |mode: &str, network: bool, hosts: &[&str]| {
            Sandbox::resolve(
                Some(&SandboxPolicy {
                    mode: mode.to_owned(),
                    network,
                    allowed_hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
                }),
                settings.clone(),
            )
            .map(|s| (s.mode, s.network))
        };
        assert_eq!(
            resolve("", false, &[]).unwrap(),
            (SandboxMode::WorkspaceWrite, false)
        );
        assert_eq!(
            resolve("read-only", true, &[]).unwrap(),
            (SandboxMode::ReadOnly, true)
        );
        assert_eq!(
            resolve("workspace-write", false, &["example.com"]).unwrap(),
            (SandboxMode::WorkspaceWrite, true)
        );
        // No sandbox only where the worker allows it (checked when a process is prepared).
        assert_eq!(resolve("off", false, &[]).unwrap().0, SandboxMode::Off);
        let refused = Sandbox::resolve(
            Some(&SandboxPolicy {
                mode: "off".to_owned(),
                ..Default::default()
            }),
            settings.clone(),
        )
        .unwrap()
        .prepare(Path::new("/"))
        .unwrap_err();
        assert!(!refused.is_retryable());
        assert!(
            refused.to_string().contains("allow_sandbox_off = true"),
            "{refused}"
        );
        let allowing = Arc::new(SandboxSettings {
            allow_sandbox_off: true,
            ..SandboxSettings::default()
        });
        let off = Sandbox::resolve(
            Some(&SandboxPolicy {
                mode: "off".to_owned(),
                ..Default::default()
            }),
            allowing,
        )
        .unwrap();
        assert_eq!((off.mode, off.network), (SandboxMode::Off, true));
        assert!(off.prepare(Path::new("/")).unwrap().is_none());
        let none = Sandbox::resolve(None, settings.clone()).unwrap();
        assert_eq!(
            (none.mode, none.network),
            (SandboxMode::WorkspaceWrite, false)
        );
        let err = resolve("strict", false, &[]).unwrap_err();
        assert!(!err.is_retryable());
        assert_eq!(
            err.to_string(),
            "unknown sandbox mode 'strict': use \"workspace-write\" (the default), \
             \"read-only\" or \"off\""
        );
    }

    #[test]
    fn this_host_can_sandbox() {
        // The CI machines run Linux with Landlock; a regression here would make every sandboxed
        // test above pass vacuously through the refusal path.
        assert_eq!(probe_host(), Ok(()));
        assert!(landlock_abi().unwrap() >= 1);
    }
}
