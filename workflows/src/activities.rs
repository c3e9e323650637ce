//! Activity contracts: names, inputs and outputs of the activities the workflow calls. The
//! bodies live in `baton-activities`, registered on the worker.

#![allow(unused_variables, clippy::unimplemented)]

use baton_proto::{
    CompactRequest, CompactResponse, InstructionsRequest, LlmRequest, LlmResponse, ToolRequest,
    ToolResult, WorkspaceInstructions,
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

    /// Reads what the system prompt needs from the run's workspace (its path, AGENTS.md).
    #[activity(name = "read_instructions")]
    pub fn read_instructions(
        request: InstructionsRequest,
    ) -> Result<WorkspaceInstructions, ActivityError> {
        unimplemented!()
    }
}

/// Marker of the `compact_context` activity, for implementations.
pub use llm_activities::CompactContext;
/// Marker of the `llm_generate` activity, for implementations (`#[activity(definition = ..)]`).
pub use llm_activities::LlmGenerate;
/// Marker of the `read_instructions` activity, for implementations.
pub use tool_activities::ReadInstructions;
/// Marker of the `run_tool` activity, for implementations.
pub use tool_activities::RunTool;

/// Failure type of a provider error that retrying cannot fix (bad key, bad request, unknown
/// model).
pub const PROVIDER_FATAL: &str = "ProviderFatal";
/// Failure type of a request too large for the model's context window.
pub const CONTEXT_OVERFLOW: &str = "ContextOverflow";
/// Failure type of a model call that failed for good because the blob store holding the
/// conversation could not be used (not the provider's doing: the run ends `internal_error`).
pub const STORE_UNAVAILABLE: &str = "StoreUnavailable";
/// Failure type of a malformed activity input.
pub const BAD_INPUT: &str = "BadInput";
