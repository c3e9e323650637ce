//! What this host can enforce: the probe every [`Sandbox::prepare`](crate::Sandbox::prepare)
//! runs, and the line the worker logs about it at start.

use std::sync::OnceLock;

use tracing::{info, warn};

use crate::{SandboxSettings, imp};

/// Whether this host can sandbox: Landlock and seccomp filters available.
pub fn probe_host() -> Result<(), String> {
    imp::probe()
}

/// Whether this host can give a tool process a network namespace of its own (probed once per
/// worker process, by starting `true` through the same steps).
pub fn probe_network() -> Result<(), String> {
    static PROBED: OnceLock<Result<(), String>> = OnceLock::new();
    PROBED.get_or_init(imp::probe_network).clone()
}

/// Whether this host lets the worker give a tool process a PID and mount namespace of its
/// own with a fresh `/proc` (probed once per worker process, by starting `true` through the
/// same steps).
pub fn probe_pid_namespace() -> Result<(), String> {
    static PROBED: OnceLock<Result<(), String>> = OnceLock::new();
    PROBED.get_or_init(imp::probe_pid_namespace).clone()
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
                format!(
                    "uid {} gid {} without supplementary groups",
                    settings.uid, settings.gid
                )
            } else {
                // Only CAP_SETGID can drop groups, and a user namespace made without root
                // must deny setgroups: what the worker's groups can read, its tools can, but
                // for the hidden paths (Landlock).
                "the worker's uid and groups (a worker that is not root cannot drop them: \
                 every file its groups may read is readable to tools unless it is in the \
                 hidden paths)"
                    .to_owned()
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
    match (settings.pid_probe)() {
        Ok(()) => info!(
            "tool processes get a PID and mount namespace of their own: nothing a call starts \
             outlives it (setsid and double forks included), and its /proc shows only its own \
             processes"
        ),
        Err(reason) => warn!(
            reason,
            "this host cannot give tool processes a PID namespace: a call's processes are \
             killed by process group only, so one that leaves its group (setsid, setpgid) \
             outlives the call and keeps its write access to the workspace, and /proc shows \
             every process of the host (other runs' command lines included)"
        ),
    }
    match (settings.network_probe)() {
        Ok(()) => info!(
            proxy_port = crate::PROXY_PORT,
            "tool processes that may use the network get a network namespace of their own; \
             their only way out is the worker's proxy, which enforces each run's hosts"
        ),
        Err(reason) if settings.allow_unfiltered_network => warn!(
            reason,
            "this host cannot give tool processes a network namespace; \
             allow_unfiltered_network is set: runs that ask for the network reach any host, \
             the Temporal frontend and this worker's ports included"
        ),
        Err(reason) => warn!(
            reason,
            "this host cannot give tool processes a network namespace: tool processes of runs \
             that ask for the network (--network, --allow-host) will be refused; set \
             allow_unfiltered_network = true to let them reach any host unfiltered"
        ),
    }
}

#[cfg(test)]
#[cfg(target_os = "linux")]
mod tests {
    use super::*;

    #[test]
    fn this_host_can_sandbox() {
        // The CI machines run Linux with Landlock; a regression here would make every sandboxed
        // test pass vacuously through the refusal path.
        assert_eq!(probe_host(), Ok(()));
        assert!(landlock_abi().unwrap() >= 1);
    }
}
