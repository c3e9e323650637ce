//! The parent's half of confining one process: [`Sandbox::prepare`] does everything that
//! allocates or may block, [`Prepared::apply`] hands the child its `pre_exec` hook.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;

use tracing::warn;

use crate::net::{NetPolicy, NetReport, Proxy, ProxyHandle, SystemResolver};
use crate::{Sandbox, SandboxError, SandboxMode, imp};

impl Sandbox {
    /// Everything the parent does before spawning a confined process whose working directory is
    /// `workspace` (which must exist). `state_dir` names the worker's own directory at the top
    /// of the workspace, which stays the worker's when the workspace is handed to the sandbox
    /// user. `None`: run it unconfined (mode `off`, or the host cannot sandbox and the settings
    /// allow that, logged as a warning). Blocking: call it from a blocking thread.
    pub fn prepare(
        &self,
        workspace: &Path,
        state_dir: &str,
    ) -> Result<Option<Prepared>, SandboxError> {
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
        imp::prepare(self, workspace, state_dir).map(Some)
    }
}

/// A confined process's set-up, made in the parent; keep it until the process has ended (it
/// owns the private temp dir, removed when dropped).
#[derive(Debug)]
pub struct Prepared {
    pub(crate) temp: crate::temp::PrivateTemp,
    pub(crate) env: Vec<(&'static str, OsString)>,
    pub(crate) child: imp::Child,
    /// With a network namespace: the run's network policy, and the proxy once it serves.
    pub(crate) policy: Option<Arc<NetPolicy>>,
    pub(crate) proxy: Option<ProxyHandle>,
}

impl Prepared {
    /// The private temp dir (`TMPDIR`).
    pub fn temp_dir(&self) -> &Path {
        self.temp.path()
    }

    /// Whether the process gets a PID namespace of its own: nothing it starts outlives it (the
    /// kernel kills them all when it ends), and it dies with the worker (`PR_SET_PDEATHSIG`,
    /// set by the sandbox). Without one, only its process group can be killed.
    pub fn own_pid_namespace(&self) -> bool {
        self.child.own_pids()
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

    /// Call once the process is spawned (from a tokio runtime): closes the parent's copy of
    /// the Landlock ruleset; with a network namespace, starts the proxy on the listener the
    /// process made there. It serves until this is dropped. An error leaves the process without
    /// a network: end it.
    pub fn spawned(&mut self) -> Result<(), SandboxError> {
        let Some(listener) = self.child.spawned() else {
            return Ok(());
        };
        let Some(policy) = self.policy.clone() else {
            return Ok(());
        };
        let proxy = listener
            .and_then(|listener| Proxy::start(listener, policy, Arc::new(SystemResolver)))
            .map_err(|e| SandboxError::setup("cannot start the proxy of the tool's network", e))?;
        self.proxy = Some(proxy);
        Ok(())
    }

    /// What the proxy let through and refused so far (`None` without a network namespace).
    pub fn network_report(&self) -> Option<NetReport> {
        self.proxy.as_ref().map(ProxyHandle::report)
    }

    /// What the proxy let through and refused since the last call of this (`None` without a
    /// network namespace): for a process that serves many tool calls.
    pub fn take_network_report(&self) -> Option<NetReport> {
        self.proxy.as_ref().map(ProxyHandle::take_report)
    }
}
