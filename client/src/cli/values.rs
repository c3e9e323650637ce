//! The closed sets of values some flags take (`ValueEnum`s).

use clap::ValueEnum;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum Exhausted {
    /// End the run with the matching reason.
    Stop,
    /// Pause until a human extends the limit (approve) or ends the run (deny).
    Ask,
}

/// `--reasoning-effort`: OpenAI's `reasoning_effort` / Responses `reasoning.effort`, and
/// Anthropic adaptive thinking's `output_config.effort` (`low|medium|high|max`).
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ReasoningEffort {
    /// No reasoning (gpt-5.1 and later; gpt-5 refuses it).
    None,
    /// Very few reasoning tokens (gpt-5; gpt-5.1 and later refuse it).
    Minimal,
    /// Faster, cheaper answers.
    Low,
    /// The models' default.
    Medium,
    /// More thorough reasoning.
    High,
    /// The most reasoning (gpt-5.1-codex-max and later).
    Xhigh,
    /// Anthropic adaptive thinking's highest effort (Opus).
    Max,
}

/// `--cache-ttl`: how long the provider keeps the run's cached prompt prefix.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum CacheTtl {
    /// Five minutes (the default; refreshed by every call that reads it).
    #[value(name = "5m")]
    FiveMinutes,
    /// One hour, for runs that wait on humans between calls (writes bill at 2x input).
    #[value(name = "1h")]
    OneHour,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum TimeoutAction {
    /// Deny the undecided calls; the run goes on.
    Deny,
    /// End the run as approval_timed_out.
    Fail,
}

/// What happens to a cut-off side-effecting call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OnRetry {
    /// Run it again (from the workspace snapshot it started from).
    Rerun,
    /// Wait for a human: approve runs it again, deny skips it.
    Ask,
}

/// What a run does when an MCP server it names cannot be used at its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum McpUnavailable {
    /// The run ends `tools_unavailable`, naming the server and why.
    Fail,
    /// The run goes on without that server's tools (an event says why).
    Continue,
}

/// How the processes a tool starts are confined on the workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum SandboxMode {
    /// Read-only filesystem except the run's workspace and a private temp dir (default).
    WorkspaceWrite,
    /// Nothing writable but a private temp dir.
    ReadOnly,
    /// No confinement: commands run as the worker's user (refused unless the worker sets
    /// allow_sandbox_off = true).
    Off,
}

/// What a connection to a host not on a run's `--allow-host` list does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OnUnknownHost {
    /// Refused: the tool sees HTTP 403 from the proxy, the run records it.
    Deny,
    /// Refused, and the run asks a human whether to allow that host for the rest of the run.
    Ask,
}

/// What `--deliver` does with the run's changes when it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum DeliverMode {
    /// Commit the change set and push it to branch baton/<run id> (or --branch) of the --git
    /// repository.
    Branch,
    /// That, then open a GitHub pull request into the source ref.
    Pr,
}

impl DeliverMode {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Branch => baton_core::machine::DELIVER_BRANCH,
            Self::Pr => baton_core::machine::DELIVER_PR,
        }
    }
}

// Each flag's values map onto the spec's enum of the same name: the set is written once in the
// proto contract, and the compiler checks the mapping.

impl From<Exhausted> for baton_proto::limits::OnExhausted {
    fn from(value: Exhausted) -> Self {
        match value {
            Exhausted::Stop => Self::Stop,
            Exhausted::Ask => Self::Ask,
        }
    }
}

impl From<OnRetry> for baton_proto::approval_policy::OnRetry {
    fn from(value: OnRetry) -> Self {
        match value {
            OnRetry::Rerun => Self::Rerun,
            OnRetry::Ask => Self::Ask,
        }
    }
}

impl From<McpUnavailable> for baton_proto::run_spec::McpUnavailable {
    fn from(value: McpUnavailable) -> Self {
        match value {
            McpUnavailable::Fail => Self::Fail,
            McpUnavailable::Continue => Self::Continue,
        }
    }
}

impl From<OnUnknownHost> for baton_proto::sandbox_policy::OnUnknownHost {
    fn from(value: OnUnknownHost) -> Self {
        match value {
            OnUnknownHost::Deny => Self::Deny,
            OnUnknownHost::Ask => Self::Ask,
        }
    }
}
