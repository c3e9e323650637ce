//! Anything but Linux: no mechanism, so [`Sandbox::prepare`](crate::Sandbox::prepare) refuses
//! unless the settings allow running unsandboxed.

use std::path::Path;

use crate::{Prepared, Sandbox, SandboxError};

pub(crate) fn is_root() -> bool {
    false
}

pub(crate) fn landlock_abi() -> Result<i32, String> {
    Err("Landlock unavailable: not Linux".to_owned())
}

pub(crate) fn probe() -> Result<(), String> {
    landlock_abi().map(|_| ())
}

pub(crate) fn probe_network() -> Result<(), String> {
    Err("network namespaces unavailable: not Linux".to_owned())
}

pub(crate) fn probe_pid_namespace() -> Result<(), String> {
    Err("PID namespaces unavailable: not Linux".to_owned())
}

/// The port of the proxy inside a tool's network namespace (Linux only).
pub const PROXY_PORT: u16 = 3128;

#[derive(Debug)]
pub(crate) struct Child;

impl Child {
    pub(crate) fn apply(&self, _command: &mut tokio::process::Command) {}
    pub(crate) fn spawned(&mut self) -> Option<std::io::Result<std::net::TcpListener>> {
        None
    }
    pub(crate) fn own_pids(&self) -> bool {
        false
    }
}

pub(crate) fn prepare(
    _sandbox: &Sandbox,
    _workspace: &Path,
    _state_dir: &str,
) -> Result<Prepared, SandboxError> {
    Err(SandboxError::Unavailable {
        reason: "Landlock unavailable: not Linux".to_owned(),
    })
}
