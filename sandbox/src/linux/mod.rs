//! The Linux mechanisms: [`prepare`] builds everything in the parent ([`landlock`] ruleset,
//! [`seccomp`] programs, [`limits`], the workspace handed over by [`owner`]); [`child`] is the
//! `pre_exec` hook that applies them between `fork` and `exec`.

mod child;
mod landlock;
mod limits;
mod netns;
mod owner;
mod pidns;
mod seccomp;

use std::path::Path;

pub(crate) use self::child::Child;
pub(crate) use self::landlock::landlock_abi;
pub use self::netns::PROXY_PORT;
pub(crate) use self::netns::probe as probe_network;
pub(crate) use self::pidns::probe as probe_pid_namespace;
use crate::temp::{PrivateTemp, temp_env};
use crate::{Network, Prepared, Sandbox, SandboxError, SandboxMode};

pub(crate) fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

pub(crate) fn probe() -> Result<(), String> {
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

pub(crate) fn prepare(
    sandbox: &Sandbox,
    workspace: &Path,
    state_dir: &str,
) -> Result<Prepared, SandboxError> {
    let settings = &sandbox.settings;
    let user = (is_root() && settings.uid != 0).then_some((settings.uid, settings.gid));
    let temp = PrivateTemp::new()
        .map_err(|e| SandboxError::setup("cannot create the private temp dir", e))?;
    if let Some((uid, gid)) = user {
        std::os::unix::fs::chown(temp.path(), Some(uid), Some(gid)).map_err(|e| {
            SandboxError::setup("cannot hand the private temp dir to the sandbox user", e)
        })?;
    }
    // Read-only runs leave ownership alone: an owner could still chmod or touch files,
    // which Landlock does not cover.
    if let Some((uid, gid)) = user.filter(|_| sandbox.mode == SandboxMode::WorkspaceWrite) {
        owner::give_tree(workspace, state_dir, uid, gid).map_err(|e| {
            SandboxError::setup(
                format!(
                    "cannot hand the workspace '{}' to uid {uid}",
                    workspace.display()
                ),
                e,
            )
        })?;
    }
    let ruleset = landlock::ruleset(
        sandbox.mode,
        sandbox.network.sockets(),
        workspace,
        temp.path(),
        &settings.hidden,
    )?;
    let programs = seccomp::programs(sandbox.network.sockets())?;
    let (netns, policy) = match &sandbox.network {
        Network::Proxied(policy) => (
            Some(netns::NetNs::new().map_err(|e| {
                SandboxError::setup("cannot make the socket pair for the proxy", e)
            })?),
            Some(policy.clone()),
        ),
        Network::Off | Network::Unfiltered => (None, None),
    };
    let mut env = temp_env(temp.path(), user.is_some());
    if policy.is_some() {
        env.extend(crate::net::proxy_env());
    }
    // Checked once per worker (cached): without it, the process-group kill is all there is.
    let pids = (settings.pid_probe)().is_ok().then(pidns::OwnPids::new);
    let maps = (!is_root() && (pids.is_some() || netns.is_some())).then(netns::IdMaps::own);
    let max_processes = match user {
        Some(_) => settings.max_processes,
        None => limits::tasks_of(nix::unistd::getuid().as_raw()) + settings.max_processes,
    };
    Ok(Prepared {
        env,
        temp,
        policy,
        proxy: None,
        child: Child {
            ruleset: Some(ruleset),
            programs,
            max_file_size: limits::capped(libc::RLIMIT_FSIZE, settings.max_file_size),
            max_processes: limits::capped(libc::RLIMIT_NPROC, max_processes),
            user,
            netns,
            pids,
            maps,
        },
    })
}
