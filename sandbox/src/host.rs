//! What this host can enforce: the probe every [`Sandbox::prepare`](crate::Sandbox::prepare)
//! runs, and the line the worker logs about it at start.

use tracing::{info, warn};

use crate::{SandboxSettings, imp};

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
