//! Everything that can happen to a run, as one enum: the workflow reports each outcome of a
//! step, each signal and update, and each timer as an [`Input`] to [`RunState::apply`]. The
//! `match` in `apply` is checked by the compiler (a new input does not compile until it is
//! handled), and every [`InputKind`] has a row in the transition table
//! ([`TRANSITIONS`](super::transitions::TRANSITIONS)), which a test checks.

use baton_proto::{
    ApprovalDecision, ApprovalOutcome, Changes, CompactResponse, Delivered, LlmResponse,
    McpToolList, PreparedWorkspace, ProgressReported, SendOutcome, SetupResult, ToolResult,
    Verification, WorkspaceInstructions,
};

use super::{LlmFailure, RunState};
use crate::error::DecisionError;

/// Declares [`Input`], [`InputKind`] (its variants without their data) and
/// [`InputKind::ALL`] from one list, so no kind can be left out of `ALL`.
macro_rules! inputs {
    ($( $(#[$doc:meta])* $name:ident { $($field:ident : $ty:ty),* $(,)? } ),* $(,)?) => {
        /// One thing that happened to the run, with what the machine needs to know of it.
        /// Times are workflow time, Unix ms (`now_ms`).
        #[derive(Debug, Clone, PartialEq)]
        pub enum Input {
            $( $(#[$doc])* $name { $($field: $ty),* } ),*
        }

        /// The kind of an [`Input`], without its data: what the transition table's rows name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum InputKind {
            $( $(#[$doc])* $name ),*
        }

        impl InputKind {
            /// Every kind, in declaration order.
            pub const ALL: &'static [InputKind] = &[$(InputKind::$name),*];
        }

        impl Input {
            /// This input's kind.
            pub fn kind(&self) -> InputKind {
                match self {
                    $( Input::$name { .. } => InputKind::$name ),*
                }
            }
        }
    };
}

inputs! {
    /// The workspace was prepared from the spec's source (activity `prepare_workspace`).
    WorkspacePrepared { prepared: PreparedWorkspace, now_ms: i64 },
    /// The workspace could not be prepared.
    WorkspaceFailed { detail: String, now_ms: i64 },
    /// The run's environment was set up (activity `setup_environment`), or its setup failed.
    EnvironmentReady { result: SetupResult, now_ms: i64 },
    /// The environment activity failed for good.
    EnvironmentFailed { detail: String, now_ms: i64 },
    /// The workspace's instructions (`AGENTS.md`), or `None` when they could not be read.
    Instructions { instructions: Option<WorkspaceInstructions>, now_ms: i64 },
    /// The run's MCP servers were listed, one outcome per server.
    McpListed { outcomes: Vec<Result<McpToolList, String>>, now_ms: i64 },
    /// The model replied (activity `llm_generate`).
    LlmResponse { response: LlmResponse, now_ms: i64 },
    /// The model call failed for good.
    LlmFailure { failure: LlmFailure, detail: String, now_ms: i64 },
    /// The older conversation was summarized (activity `compact_context`).
    Compacted { response: CompactResponse, now_ms: i64 },
    /// The compaction failed for good.
    CompactionFailed { detail: String, now_ms: i64 },
    /// A human decided a pending call (signal `approval` or update `approve`).
    Decision { decision: ApprovalDecision, now_ms: i64 },
    /// The approval wait's timer fired.
    ApprovalTimeout { now_ms: i64 },
    /// These calls of the batch started.
    ToolsStarted { ids: Vec<String>, now_ms: i64 },
    /// These calls of the batch finished (the rest still run).
    ToolsFinished { results: Vec<ToolResult>, now_ms: i64 },
    /// The whole batch finished: every call's result, in call order.
    ToolResults { results: Vec<ToolResult>, now_ms: i64 },
    /// A `spawn_agent` call's child run started.
    SubagentStarted { call_id: String, run_id: String, task: String, now_ms: i64 },
    /// A verification command ran (activity `run_verification`).
    Verified { verification: Verification, now_ms: i64 },
    /// A verification command could not be run.
    VerifyFailed { detail: String, now_ms: i64 },
    /// The run's change set was collected (activity `collect_changes`).
    Changes { changes: Changes, now_ms: i64 },
    /// The change set could not be collected.
    ChangesFailed { detail: String, now_ms: i64 },
    /// The change set was delivered (activity `deliver`), or delivery reported an error.
    Delivered { delivered: Delivered, now_ms: i64 },
    /// The delivery activity failed for good.
    DeliveryFailed { detail: String, now_ms: i64 },
    /// A user message (signal `message` or update `send`): guidance for a working run, the
    /// next task of an idle conversation. `id` ("" for none) is taken once.
    Message { text: String, id: String, now_ms: i64 },
    /// An idle conversation's timer fired.
    IdleTimeout { now_ms: i64 },
    /// The run's deadline passed.
    DeadlinePassed { now_ms: i64 },
    /// The run was cancelled.
    Cancelled { reason: Option<String>, now_ms: i64 },
    /// Progress was posted to GitHub (activity `report_progress`).
    ProgressReported { reported: ProgressReported },
    /// Progress could not be posted.
    ProgressFailed { detail: String, now_ms: i64 },
}

/// What applying an input gave back, for the inputs that answer their sender.
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    /// Nothing to answer.
    Done,
    /// A decision's outcome, or why it was refused (the update's answer).
    Decided(Result<ApprovalOutcome, DecisionError>),
    /// A message's outcome (the update `send`'s answer).
    Sent(SendOutcome),
}

impl RunState {
    /// Applies one input: the machine's only entry point besides [`RunState::next_step`]. What
    /// each input does in each phase is the transition table
    /// ([`TRANSITIONS`](super::transitions::TRANSITIONS)).
    pub fn apply(&mut self, input: Input) -> Applied {
        use Input as I;
        match input {
            I::WorkspacePrepared { prepared, now_ms } => {
                self.on_workspace_prepared(prepared, now_ms);
            }
            I::WorkspaceFailed { detail, now_ms } => self.on_workspace_failed(&detail, now_ms),
            I::EnvironmentReady { result, now_ms } => self.on_environment_ready(result, now_ms),
            I::EnvironmentFailed { detail, now_ms } => {
                self.on_environment_failed(&detail, now_ms);
            }
            I::Instructions {
                instructions,
                now_ms,
            } => self.on_instructions(instructions, now_ms),
            I::McpListed { outcomes, now_ms } => self.on_mcp_listed(outcomes, now_ms),
            I::LlmResponse { response, now_ms } => self.on_llm_response(response, now_ms),
            I::LlmFailure {
                failure,
                detail,
                now_ms,
            } => self.on_llm_failure(failure, detail, now_ms),
            I::Compacted { response, now_ms } => self.on_compacted(response, now_ms),
            I::CompactionFailed { detail, now_ms } => self.on_compaction_failed(&detail, now_ms),
            I::Decision { decision, now_ms } => {
                return Applied::Decided(self.on_decision(decision, now_ms));
            }
            I::ApprovalTimeout { now_ms } => self.on_approval_timeout(now_ms),
            I::ToolsStarted { ids, now_ms } => self.on_tools_started(&ids, now_ms),
            I::ToolsFinished { results, now_ms } => self.on_tools_finished(&results, now_ms),
            I::ToolResults { results, now_ms } => self.on_tool_results(results, now_ms),
            I::SubagentStarted {
                call_id,
                run_id,
                task,
                now_ms,
            } => self.on_subagent_started(&call_id, &run_id, &task, now_ms),
            I::Verified {
                verification,
                now_ms,
            } => self.on_verified(verification, now_ms),
            I::VerifyFailed { detail, now_ms } => self.on_verify_failed(&detail, now_ms),
            I::Changes { changes, now_ms } => self.on_changes(changes, now_ms),
            I::ChangesFailed { detail, now_ms } => self.on_changes_failed(&detail, now_ms),
            I::Delivered { delivered, now_ms } => self.on_delivered(delivered, now_ms),
            I::DeliveryFailed { detail, now_ms } => self.on_delivery_failed(&detail, now_ms),
            I::Message { text, id, now_ms } => {
                return Applied::Sent(self.on_message(text, &id, now_ms));
            }
            I::IdleTimeout { now_ms } => self.on_idle_timeout(now_ms),
            I::DeadlinePassed { now_ms } => self.on_deadline_passed(now_ms),
            I::Cancelled { reason, now_ms } => self.on_cancelled(reason, now_ms),
            I::ProgressReported { reported } => self.on_progress_reported(reported),
            I::ProgressFailed { detail, now_ms } => self.on_progress_failed(&detail, now_ms),
        }
        Applied::Done
    }
}

impl Applied {
    /// The decision's outcome; `Err(NothingPending)` when the input was not a decision (not
    /// reached: only [`Input::Decision`] gives a decision back).
    pub fn decided(self) -> Result<ApprovalOutcome, DecisionError> {
        match self {
            Applied::Decided(outcome) => outcome,
            _ => Err(DecisionError::NothingPending),
        }
    }

    /// The message's outcome; the default when the input was not a message.
    pub fn sent(self) -> SendOutcome {
        match self {
            Applied::Sent(outcome) => outcome,
            _ => SendOutcome::default(),
        }
    }
}
