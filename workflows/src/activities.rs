//! Activity contracts: names, inputs and outputs of the activities the workflow calls. The
//! bodies live in `baton-activities`, registered on the worker.

#![allow(unused_variables, clippy::unimplemented)]

use baton_proto::{
    Changes, CollectRequest, CompactRequest, CompactResponse, DeliverRequest, Delivered,
    InstructionsRequest, LlmRequest, LlmResponse, McpListRequest, McpToolList, MergeRequest,
    MergeResult, PrepareRequest, PreparedWorkspace, ProgressReported, ProgressRequest,
    SetupRequest, SetupResult, ToolRequest, ToolResult, Verification, VerifyRequest,
    WorkspaceInstructions,
};
use temporalio_common::ActivityError;
use temporalio_macros::activity_definitions;

/// The model call.
pub struct LlmActivities;

#[activity_definitions]
impl LlmActivities {
    /// Calls the model named in the request's model config and returns its reply.
    #[activity(name = "llm_generate")]
    pub fn llm_generate(request: LlmRequest) -> Result<LlmResponse, ActivityError> {
        unimplemented!()
    }

    /// Summarizes the older part of a conversation with the run's model (compaction).
    #[activity(name = "compact_context")]
    pub fn compact_context(request: CompactRequest) -> Result<CompactResponse, ActivityError> {
        unimplemented!()
    }
}

/// Providers whose model calls go through a task queue of their own (see [`model_queue`]): the
/// ones that call a hosted API. The scripted provider answers from the run's spec and stays on
/// the run's queue.
pub const QUEUED_PROVIDERS: [&str; 3] = ["openai", "anthropic", "openai-responses"];

/// The task queue of `provider`'s model calls (`llm_generate`, `compact_context`) for runs on
/// `task_queue`: `<task_queue>-llm-<provider>`, which every worker of `task_queue` also polls,
/// so that a fleet-wide rate (the worker setting `max_requests_per_second` of the provider's
/// section, the queue's server-side rate limit) and a provider's `Retry-After` pause apply to
/// all of the fleet's calls to that provider at once. `None`: the run's own queue.
///
/// Changing it changes no command of a history (replay compares an activity's id and type,
/// not its queue), so runs in flight simply send their next calls there.
pub fn model_queue(task_queue: &str, provider: &str) -> Option<String> {
    QUEUED_PROVIDERS
        .contains(&provider)
        .then(|| format!("{task_queue}-llm-{provider}"))
}

/// Tool execution.
pub struct ToolActivities;

#[activity_definitions]
impl ToolActivities {
    /// Runs one tool call in the run's workspace. Ordinary failures come back as a result with
    /// `is_error`; only infrastructure failures fail the activity.
    #[activity(name = "run_tool")]
    pub fn run_tool(request: ToolRequest) -> Result<ToolResult, ActivityError> {
        unimplemented!()
    }

    /// Calls one tool of an MCP server (`request.mcp` names it). The tool's own errors
    /// (`isError`) come back as a result with `is_error`; a server that is down or breaks the
    /// protocol fails the attempt (retried); a server this worker does not have fails with
    /// [`FailureType::McpUnavailable`] (not retried).
    #[activity(name = "mcp_call_tool")]
    pub fn mcp_call_tool(request: ToolRequest) -> Result<ToolResult, ActivityError> {
        unimplemented!()
    }

    /// Reads what the system prompt needs from the run's workspace (its path, AGENTS.md).
    /// One verification command in the run's workspace at the request's snapshot
    /// (`RunSpec.verify`); the tree is put back before the next tool call.
    #[activity(name = "run_verification")]
    pub fn run_verification(request: VerifyRequest) -> Result<Verification, ActivityError> {
        unimplemented!()
    }

    #[activity(name = "read_instructions")]
    pub fn read_instructions(
        request: InstructionsRequest,
    ) -> Result<WorkspaceInstructions, ActivityError> {
        unimplemented!()
    }
}

/// MCP servers.
pub struct McpActivities;

#[activity_definitions]
impl McpActivities {
    /// Lists the tools of one MCP server (every page), filtered to the request's names. A
    /// server this worker does not have, or that refuses the handshake, fails with
    /// [`FailureType::McpUnavailable`] (not retried); one that does not start or answer in time
    /// fails the attempt (retried).
    #[activity(name = "mcp_list_tools")]
    pub fn mcp_list_tools(request: McpListRequest) -> Result<McpToolList, ActivityError> {
        unimplemented!()
    }
}

/// The run's workspace coming in and its changes going out.
pub struct WorkspaceActivities;

#[activity_definitions]
impl WorkspaceActivities {
    /// Puts the run's source (a snapshot, a git clone) into its workspace and snapshots it.
    /// A source that cannot exist (unknown URL or ref, refused credentials, missing
    /// snapshot) fails with [`FailureType::WorkspaceUnavailable`], not retried.
    #[activity(name = "prepare_workspace")]
    pub fn prepare_workspace(request: PrepareRequest) -> Result<PreparedWorkspace, ActivityError> {
        unimplemented!()
    }

    /// The change set between the run's starting and final snapshots, stored as a patch.
    /// The run's environment set up in its workspace: from the cache, or by
    /// running setup.
    #[activity(name = "setup_environment")]
    pub fn setup_environment(request: SetupRequest) -> Result<SetupResult, ActivityError> {
        unimplemented!()
    }

    #[activity(name = "collect_changes")]
    pub fn collect_changes(request: CollectRequest) -> Result<Changes, ActivityError> {
        unimplemented!()
    }

    /// Commits the change set on the run's base commit, pushes it, and opens a pull request
    /// when asked. Idempotent: a retry pushes the same commit and finds the pull request it
    /// opened. A refusal (protected branch, stale base, API error) is a result with `error`.
    #[activity(name = "deliver")]
    pub fn deliver(request: DeliverRequest) -> Result<Delivered, ActivityError> {
        unimplemented!()
    }

    /// Lands a subagent's change set on its parent's workspace snapshot (three-way, by file;
    /// no files are touched: manifests only). Conflicts are a result, not a failure.
    #[activity(name = "merge_changes")]
    pub fn merge_changes(request: MergeRequest) -> Result<MergeResult, ActivityError> {
        unimplemented!()
    }
}

/// Where people look: the run's GitHub issue or pull request.
pub struct GitHubActivities;

#[activity_definitions]
impl GitHubActivities {
    /// Brings the run's comment (found again by its marker when its id is not known) and the
    /// task's check run (found again by its external id) up to date. A refusal (no such
    /// repository, no permission) fails with [`FailureType::GitHubRefused`], not retried.
    #[activity(name = "report_progress")]
    pub fn report_progress(request: ProgressRequest) -> Result<ProgressReported, ActivityError> {
        unimplemented!()
    }
}

/// Marker of the `report_progress` activity, for implementations.
pub use git_hub_activities::ReportProgress;

/// Marker of the `collect_changes` activity, for implementations.
pub use workspace_activities::CollectChanges;
/// Marker of the `deliver` activity, for implementations.
pub use workspace_activities::Deliver;
/// Marker of the `merge_changes` activity, for implementations.
pub use workspace_activities::MergeChanges;
/// Marker of the `prepare_workspace` activity, for implementations.
pub use workspace_activities::PrepareWorkspace;
pub use workspace_activities::SetupEnvironment;

/// Marker of the `mcp_list_tools` activity, for implementations.
pub use mcp_activities::McpListTools;
/// Marker of the `mcp_call_tool` activity, for implementations.
pub use tool_activities::McpCallTool;

/// Marker of the `compact_context` activity, for implementations.
pub use llm_activities::CompactContext;
/// Marker of the `llm_generate` activity, for implementations (`#[activity(definition = ..)]`).
pub use llm_activities::LlmGenerate;
/// Marker of the `read_instructions` activity, for implementations.
pub use tool_activities::ReadInstructions;
/// Marker of the `run_tool` activity, for implementations.
pub use tool_activities::RunTool;
pub use tool_activities::RunVerification;

/// The application-failure types baton's activities raise (`ApplicationFailure::type_name`),
/// matched by the workflow and named in retry policies (`non_retryable_error_types`).
///
/// The strings are on the wire: recorded histories and retry policies of open runs carry them,
/// so [`FailureType::as_str`] must never change for an existing variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureType {
    /// A provider error that retrying cannot fix (bad key, bad request, unknown model).
    ProviderFatal,
    /// A request too large for the model's context window.
    ContextOverflow,
    /// A model call that failed for good because the blob store holding the conversation could
    /// not be used (not the provider's doing: the run ends `internal_error`).
    StoreUnavailable,
    /// A malformed activity input.
    BadInput,
    /// The provider asked to slow down (retried after the delay it named).
    RateLimited,
    /// The provider is overloaded or down for now (retried).
    ProviderUnavailable,
    /// The provider could not be reached: timeout, refused or reset connection (retried).
    ProviderUnreachable,
    /// The provider's reply could not be read (retried).
    ProviderBadResponse,
    /// The run's workspace source cannot be had: a git URL or ref that does not exist,
    /// refused credentials, a snapshot missing from the store (not retried).
    WorkspaceUnavailable,
    /// An MCP server that cannot be used by this worker: not configured, its program missing,
    /// or it refused the handshake (not retried).
    McpUnavailable,
    /// GitHub refused a report (no such repository, no permission, no app installed), or the
    /// worker has no GitHub credentials (not retried).
    GitHubRefused,
}

impl FailureType {
    /// Every failure type.
    pub const ALL: [Self; 11] = [
        Self::ProviderFatal,
        Self::ContextOverflow,
        Self::StoreUnavailable,
        Self::BadInput,
        Self::RateLimited,
        Self::ProviderUnavailable,
        Self::ProviderUnreachable,
        Self::ProviderBadResponse,
        Self::WorkspaceUnavailable,
        Self::McpUnavailable,
        Self::GitHubRefused,
    ];

    /// The type name on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::ProviderFatal => "ProviderFatal",
            Self::ContextOverflow => "ContextOverflow",
            Self::StoreUnavailable => "StoreUnavailable",
            Self::BadInput => "BadInput",
            Self::RateLimited => "RateLimited",
            Self::ProviderUnavailable => "ProviderUnavailable",
            Self::ProviderUnreachable => "ProviderUnreachable",
            Self::ProviderBadResponse => "ProviderBadResponse",
            Self::WorkspaceUnavailable => "WorkspaceUnavailable",
            Self::McpUnavailable => "McpUnavailable",
            Self::GitHubRefused => "GitHubRefused",
        }
    }

    /// The failure type a type name on the wire stands for (`None` for a type baton does not
    /// raise).
    pub fn parse(type_name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == type_name)
    }
}

impl std::fmt::Display for FailureType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::FailureType;

    #[test]
    fn failure_type_names_stay_as_recorded() {
        // Recorded histories and the retry policies of open runs carry these exact strings.
        let names: Vec<&str> = FailureType::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(
            names,
            [
                "ProviderFatal",
                "ContextOverflow",
                "StoreUnavailable",
                "BadInput",
                "RateLimited",
                "ProviderUnavailable",
                "ProviderUnreachable",
                "ProviderBadResponse",
                "WorkspaceUnavailable",
                "McpUnavailable",
                "GitHubRefused",
            ]
        );
        for t in FailureType::ALL {
            assert_eq!(FailureType::parse(t.as_str()), Some(t));
        }
        assert_eq!(FailureType::parse("ToolTimeout"), None);
    }
}
