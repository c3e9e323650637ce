//! What a run asks for ([`SandboxPolicy`] -> [`SandboxMode`] + network) and what the worker
//! allows ([`SandboxSettings`]), resolved together into a [`Sandbox`].

use std::path::PathBuf;
use std::sync::Arc;

use baton_proto::SandboxPolicy;
use tracing::info;

use crate::SandboxError;
use crate::host::probe_host;

/// The sandbox modes a run may ask for, for messages.
pub const MODES: &str = "\"workspace-write\" (the default), \"read-only\" or \"off\"";

/// The default uid and gid tool processes run as when the worker is root (`nobody`).
pub const DEFAULT_SANDBOX_ID: u32 = 65534;

/// The default bound on the sandbox user's processes (see the crate docs).
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
    /// The bound on processes (see the crate docs).
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
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use pretty_assertions::assert_eq;

    use super::*;

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
        .prepare(Path::new("/"), ".baton")
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
        assert!(off.prepare(Path::new("/"), ".baton").unwrap().is_none());
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
}
