//! Why a sandbox could not be set up.

use crate::MODES;

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
    /// The run asks for the network and this host cannot filter it.
    #[error(
        "this run asks for the network (--network or --allow-host), but this worker cannot give \
         tool processes a network namespace to filter it ({reason}); run the worker where \
         unprivileged user namespaces are allowed (or as root with CAP_SYS_ADMIN), submit \
         without --network, or have the worker's operator set allow_unfiltered_network = true \
         (tools then reach any host, the Temporal frontend included)"
    )]
    NetworkUnavailable {
        /// Why not.
        reason: String,
    },
    /// A host of the run's allow list is malformed.
    #[error(transparent)]
    BadHost(#[from] crate::net::NetError),
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

    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn setup(
        context: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self::Setup {
            context: context.into(),
            source: source.into(),
        }
    }
}
