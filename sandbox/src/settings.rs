//! What a run asks for ([`SandboxPolicy`] -> [`SandboxMode`] + [`Network`]) and what the
//! worker allows ([`SandboxSettings`]), resolved together into a [`Sandbox`].

use std::path::PathBuf;
use std::sync::Arc;

use baton_proto::SandboxPolicy;
use tracing::warn;

use crate::SandboxError;
use crate::host::{probe_host, probe_network, probe_pid_namespace};
use crate::net::{NetGuard, NetPolicy};

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
    /// Where this host cannot give tool processes a network namespace: let runs that ask for
    /// the network have the host's network, unfiltered (with a warning), instead of refusing
    /// their processes. Off by default.
    pub allow_unfiltered_network: bool,
    /// Whether this host can give a process a network namespace: `Err(reason)` if not.
    /// Replaceable for tests.
    pub network_probe: fn() -> Result<(), String>,
    /// Whether this host can give a process a PID and mount namespace of its own (so that
    /// nothing it starts outlives it, and it sees only its own processes in `/proc`):
    /// `Err(reason)` if not. Replaceable for tests.
    pub pid_probe: fn() -> Result<(), String>,
    /// What the proxy never connects to whatever a run's hosts say (the Temporal frontend,
    /// the worker's own ports) and the operator's private ranges.
    pub guard: Arc<NetGuard>,
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
            allow_unfiltered_network: false,
            network_probe: probe_network,
            pid_probe: probe_pid_namespace,
            guard: Arc::new(NetGuard::default()),
        }
    }
}

/// How a confined process reaches the network.
#[derive(Debug, Clone)]
pub enum Network {
    /// Not at all: no IPv4/IPv6 socket can be opened (seccomp, and Landlock for TCP).
    Off,
    /// A network namespace of its own whose only way out is the worker's proxy at
    /// `127.0.0.1:`[`PROXY_PORT`](crate::PROXY_PORT), which connects only where the run's
    /// policy allows (its hosts, or any public host when it lists none).
    Proxied(Arc<NetPolicy>),
    /// The host's network as it is: the sandbox is off, or this host cannot filter and the
    /// worker's settings allow that (`allow_unfiltered_network`).
    Unfiltered,
}

impl Network {
    /// Whether IP sockets may be opened at all.
    pub fn sockets(&self) -> bool {
        !matches!(self, Self::Off)
    }

    /// `off`, `proxied` or `unfiltered`, for logs and keys.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Proxied(_) => "proxied",
            Self::Unfiltered => "unfiltered",
        }
    }
}

/// How the processes of one tool call are confined: a run's policy with the worker's settings.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// What may be written.
    pub mode: SandboxMode,
    /// How the network is reached.
    pub network: Network,
    /// The worker's settings.
    pub settings: Arc<SandboxSettings>,
}

impl Sandbox {
    /// No confinement (mode `off`).
    pub fn off() -> Self {
        Self {
            mode: SandboxMode::Off,
            network: Network::Unfiltered,
            settings: Arc::new(SandboxSettings {
                allow_sandbox_off: true,
                ..SandboxSettings::default()
            }),
        }
    }

    /// The sandbox a run's policy asks for (no policy: `workspace-write`, no network). A run
    /// that asks for the network (`network`, or any `allowed_hosts`) gets it through the proxy;
    /// where this host cannot do that, it is refused unless the worker allows unfiltered
    /// network.
    pub fn resolve(
        policy: Option<&SandboxPolicy>,
        settings: Arc<SandboxSettings>,
    ) -> Result<Self, SandboxError> {
        let (mode, network, hosts) = match policy {
            Some(p) => (p.mode.as_str(), p.network, p.allowed_hosts.as_slice()),
            None => ("", false, &[][..]),
        };
        let mode = SandboxMode::parse(mode)?;
        let network = if mode == SandboxMode::Off {
            Network::Unfiltered
        } else if !network && hosts.is_empty() {
            Network::Off
        } else {
            let policy = NetPolicy::new(hosts, settings.guard.clone())?;
            match (settings.network_probe)() {
                Ok(()) => Network::Proxied(Arc::new(policy)),
                Err(reason) if settings.allow_unfiltered_network => {
                    warn!(
                        reason,
                        allowed_hosts = ?hosts,
                        "this host cannot filter the network of tool processes and \
                         allow_unfiltered_network is set: this call reaches any host"
                    );
                    Network::Unfiltered
                }
                Err(reason) => return Err(SandboxError::NetworkUnavailable { reason }),
            }
        };
        Ok(Self {
            mode,
            network,
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
                    ..Default::default()
                }),
                settings.clone(),
            )
            .map(|s| (s.mode, s.network.as_str()))
        };
        assert_eq!(
            resolve("", false, &[]).unwrap(),
            (SandboxMode::WorkspaceWrite, "off")
        );
        assert_eq!(
            resolve("read-only", true, &[]).unwrap(),
            (SandboxMode::ReadOnly, "proxied")
        );
        assert_eq!(
            resolve("workspace-write", false, &["example.com"]).unwrap(),
            (SandboxMode::WorkspaceWrite, "proxied")
        );
        let bad = resolve("", false, &["exa mple.com"]).unwrap_err();
        assert!(!bad.is_retryable());
        assert!(bad.to_string().contains("exa mple.com"), "{bad}");
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
        assert_eq!(
            (off.mode, off.network.as_str()),
            (SandboxMode::Off, "unfiltered")
        );
        assert!(off.prepare(Path::new("/"), ".baton").unwrap().is_none());
        let none = Sandbox::resolve(None, settings.clone()).unwrap();
        assert_eq!(
            (none.mode, none.network.as_str()),
            (SandboxMode::WorkspaceWrite, "off")
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
    fn a_host_without_network_namespaces_refuses_the_network_unless_allowed() {
        let policy = SandboxPolicy {
            network: true,
            ..Default::default()
        };
        let cannot = SandboxSettings {
            network_probe: || Err("unshare(CLONE_NEWNET) failed: EPERM".to_owned()),
            ..SandboxSettings::default()
        };
        let refused = Sandbox::resolve(Some(&policy), Arc::new(cannot.clone())).unwrap_err();
        assert!(!refused.is_retryable());
        let message = refused.to_string();
        assert!(
            message.contains("EPERM") && message.contains("allow_unfiltered_network = true"),
            "{message}"
        );
        // Runs that do not ask for the network are unaffected.
        let quiet = Sandbox::resolve(None, Arc::new(cannot.clone())).unwrap();
        assert_eq!(quiet.network.as_str(), "off");
        let allowing = SandboxSettings {
            allow_unfiltered_network: true,
            ..cannot
        };
        let unfiltered = Sandbox::resolve(Some(&policy), Arc::new(allowing)).unwrap();
        assert_eq!(unfiltered.network.as_str(), "unfiltered");
    }
}
