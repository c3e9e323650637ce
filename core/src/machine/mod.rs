//! The agent state machine: a pure transition function over an explicit [`RunState`].
//!
//! The workflow asks [`RunState::next_step`] what to do, does it (an activity, a wait for
//! approval), and feeds the outcome back as an [`Input`] ([`RunState::apply`]). Nothing here
//! does I/O or reads a clock: time comes in as arguments, so every transition is unit-tested
//! without a server and replays identically.
//!
//! # Transitions
//!
//! The inputs are one enum, [`Input`], applied by [`RunState::apply`] (a `match` the compiler
//! checks). Every transition, phase × trigger → next phase and the [`Step`] or effect, is the
//! table [`TRANSITIONS`], data that a test checks against [`InputKind::ALL`] and that
//! `docs/src/architecture/machine.md` is rendered from.
//!
//! An input in a phase the table does not list for it changes nothing. The workflow never
//! sends one (it feeds each step's outcome back in the phase that asked for it), so each such
//! branch is explicit and tested: a model reply or failure outside `Thinking`, a compaction
//! outcome outside `Compacting`, tool progress or results outside `Executing`, an approval
//! timeout outside `AwaitingApproval` record a note `<input> ignored: the run is <phase>, not
//! <phase>`; a decision outside `AwaitingApproval` is refused with a
//! [`DecisionError`](crate::error::DecisionError) (and a note); a deadline, a cancellation or
//! a user message for a `Finished` run record nothing (the first ending stands and stays the
//! run's last event). Tests: `machine/tests/phases.rs`.
//!
//! # Files
//!
//! - `mod.rs`: the types, [`RunState::new`], [`RunState::next_step`].
//! - `input.rs`: [`Input`], [`InputKind`] and [`RunState::apply`].
//! - `transitions.rs`: the transition table, [`TRANSITIONS`].
//! - `turn.rs`: the LLM request, the model's reply (finish reasons, length continuations, call
//!   ids), LLM failures, the turn guards, workspace instructions, user messages.
//! - `batch.rs`: planning a batch of tool calls (validation, policy), tools started, finished
//!   and their results, loop detection and the circuit breaker.
//! - `approvals.rs`: decisions, approval timeout, questions to a human, limit extensions.
//! - `context.rs`: eliding old tool outputs, the token estimate, compaction.
//! - `end.rs`: how a run ends (result, open calls answered), deadline and cancellation.
//! - `checkpoint.rs`: continue-as-new (checkpoint and resume).
//! - `fork.rs`: a forked run's first state ([`RunState::fork`], `baton fork`).
//! - `environment.rs`: the run's environment set up before the first model call.
//! - `verify.rs`: the verification gate (`RunSpec.verify`) between the answer and the end.
//! - `outputs.rs`: the workspace source, the change set and delivery when the run ends.
//! - `mcp.rs`: the run's MCP servers listed at its start.
//! - `subagents.rs`: `spawn_agent` calls (checked, the child's spec), children's events and
//!   usage.
//! - `status.rs`: status, pending calls, events, [`describe_event`].

use std::{collections::BTreeSet, fmt};

use baton_proto::{
    AssistantMessage, CompactRequest, Item, LlmRequest, RunEvent, RunResult, RunSpec,
    TerminationReason, ToolCall, ToolDefinition, ToolRequest, ToolResult, ToolRule, Usage,
    UserMessage, WorkspaceInstructions, item,
};
use serde::{Deserialize, Serialize};

use crate::{error::StateError, policy, tools};

mod approvals;
mod batch;
mod checkpoint;
mod context;
mod conversation;
mod end;
mod environment;
mod fork;
mod github;
mod input;
mod mcp;
mod network;
mod outputs;
mod persisted;
mod plan;
mod status;
mod subagents;
mod transitions;
mod turn;
mod verify;

pub use conversation::{FollowUps, MAX_MESSAGE_IDS};
pub use github::{GitHubProgress, PROGRESS_EVERY_TURNS, comment_marker};
pub use input::{Applied, Input, InputKind};
pub use outputs::{DELIVER_BRANCH, DELIVER_PR, Outputs, WorkspaceStart};
pub use plan::{Runner, ToolPlan};
pub use status::describe_event;
pub use transitions::{On, TRANSITIONS, Transition};
pub use verify::{
    DEFAULT_VERIFY_ATTEMPTS, MAX_VERIFY_ATTEMPTS, MAX_VERIFY_COMMAND_BYTES, MAX_VERIFY_COMMANDS,
    VerifyState,
};

/// Default maximum number of LLM calls in a run.
pub const DEFAULT_MAX_TURNS: u32 = 50;
/// How many times in a row a `length` finish is answered with "continue" before the run fails.
pub const MAX_LENGTH_CONTINUATIONS: u32 = 3;
/// Default timeout of one tool call, in seconds.
pub const DEFAULT_TOOL_TIMEOUT_SECONDS: u32 = 600;
/// Default number of tool calls of one batch run at once.
pub const DEFAULT_MAX_PARALLEL_TOOLS: u32 = 4;
/// Events kept for `watch`/`events`; older ones are dropped (the conversation keeps everything).
pub const MAX_EVENTS: usize = 2_000;
/// Default history budget of one run segment, in events, before it continues as new.
pub const DEFAULT_HISTORY_EVENTS_BUDGET: u32 = 5_000;
/// Format of [`Continuation::state`](baton_proto::Continuation::state).
pub const CHECKPOINT_FORMAT: u32 = 1;
/// Events a continued run carries into its next segment (for `watch`).
pub const CARRIED_EVENTS: usize = 64;
/// Longest text of a carried event; the rest is cut.
pub const CARRIED_EVENT_TEXT: usize = 2_048;
/// Assistant turns a continued run keeps whole in memory (loop detection, the last answer);
/// older items become stubs and live only in the blob store.
pub const RESIDENT_TURNS: usize = 8;
/// How much of a user message its event note (`status`'s last event, `watch`) repeats.
pub const USER_MESSAGE_NOTE_BYTES: usize = 200;
/// Largest checkpoint carried across continue-as-new (payloads stay under 256 KiB).
pub const MAX_CHECKPOINT_BYTES: usize = 192 * 1024;

/// On a context overflow, tool outputs older than this many assistant turns are elided from
/// the model's view before the turn is retried.
pub const KEEP_RECENT_TURNS: usize = 2;
/// Compaction starts this many tokens below the context window (or a quarter of the window,
/// if that is smaller).
pub const COMPACTION_BUFFER_TOKENS: u32 = 13_000;
pub use crate::view::ELIDE_MIN_BYTES;

/// Tool name of a question to a human ("continue or abort?") shown as a pending call.
pub const QUESTION_TOOL: &str = "baton.continue";
/// Call-id prefix of such a question.
pub const QUESTION_CALL_PREFIX: &str = "baton_continue_";
pub use network::{ALLOW_HOST_CALL_PREFIX, ALLOW_HOST_TOOL};

/// The hidden message that asks the model to go on after its output was cut off.
pub const CONTINUE_PROMPT: &str = "Your previous reply was cut off by the output token limit. \
Continue exactly where you left off: no apology, no repetition, no preamble.";

/// What the workflow must do next.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Call the model (activity `llm_generate`).
    CallLlm(LlmRequest),
    /// Wait for approval decisions, at most `timeout_seconds` (`None`: forever).
    AwaitApproval {
        /// How long to wait before the policy's timeout action applies.
        timeout_seconds: Option<u32>,
    },
    /// Run these tool calls as `plan` says (activities, local activities, child workflows;
    /// in groups), then report their results in the same order with [`Input::ToolResults`].
    RunTools {
        /// The approved calls of the batch, in call order.
        requests: Vec<ToolRequest>,
        /// Where each call runs, and which run at once.
        plan: ToolPlan,
    },
    /// Summarize the older part of the conversation (activity `compact_context`), then report
    /// with [`Input::Compacted`] or [`Input::CompactionFailed`].
    Compact(CompactRequest),
    /// Collect the change set of the finished run (activity `collect_changes`), then report
    /// with [`Input::Changes`] or [`Input::ChangesFailed`].
    CollectChanges(baton_proto::CollectRequest),
    /// Run one verification command (activity `run_verification`), then report with
    /// [`Input::Verified`] or [`Input::VerifyFailed`].
    Verify(baton_proto::VerifyRequest),
    /// Deliver the change set (activity `deliver`), then report with
    /// [`Input::Delivered`] or [`Input::DeliveryFailed`].
    Deliver(baton_proto::DeliverRequest),
    /// A conversation answered its task: wait for the next message (then
    /// [`RunState::next_step`] begins the next task) at most `timeout_seconds`, then report
    /// [`Input::IdleTimeout`].
    AwaitMessage {
        /// The idle timeout.
        timeout_seconds: u32,
    },
    /// The run is over.
    Finish(RunResult),
}

/// How one call of a batch stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Disposition {
    /// May run: approved by policy or by a human.
    Run {
        /// Who approved it (`None`: the policy).
        approver: Option<String>,
    },
    /// Waiting for a human decision.
    Pending,
    /// Will not run; the model gets this error text as the call's result.
    Refused {
        /// The error observation.
        content: String,
    },
}

/// One tool call of the current batch and its disposition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedCall {
    /// The call as the model made it (id normalised).
    pub call: ToolCall,
    /// Whether it runs.
    pub disposition: Disposition,
}

/// What a batch is, and so what deciding its calls does.
#[derive(Debug, Clone, PartialEq)]
pub enum BatchKind {
    /// The model's tool calls: approved ones run, denied ones are answered with the refusal.
    Tools,
    /// A one-call question to a human (continue or end the run?): approving continues the
    /// run, denying ends it.
    Question {
        /// The question as asked.
        text: String,
        /// For a question about an exhausted limit: the reason the run ends with when denied;
        /// approving extends the limit. `None`: a loop or the circuit breaker asked.
        extend: Option<TerminationReason>,
    },
    /// Calls cut off by a worker failure that may have taken effect: approving runs them
    /// again, denying skips them.
    Retry,
    /// Host questions (`on_unknown_host = "ask"`, `network.rs`): approving allows a host for
    /// the rest of the run, denying keeps it refused; nothing runs.
    Hosts,
}

/// The tool calls of one assistant message, or a question for a human ([`BatchKind`]).
/// Persisted across continue-as-new in the shape of `persisted::BatchRepr`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "persisted::BatchRepr", into = "persisted::BatchRepr")]
pub struct Batch {
    /// In the order the model made them.
    pub calls: Vec<PlannedCall>,
    /// When approval was first requested (workflow time, Unix ms).
    pub requested_at_ms: i64,
    /// What the batch is.
    pub kind: BatchKind,
    /// Calls whose execution has started (their `tool_started` events are out).
    pub started: Vec<String>,
    /// Results of the calls that completed so far (their `tool_finished` events are out).
    pub done: Vec<ToolResult>,
}

impl Batch {
    fn pending(&self) -> impl Iterator<Item = &PlannedCall> {
        self.calls
            .iter()
            .filter(|c| c.disposition == Disposition::Pending)
    }
}

/// Where the run is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Phase {
    /// The next step is an LLM call.
    Thinking,
    /// A batch waits for human decisions.
    AwaitingApproval(Batch),
    /// A batch is decided; its runnable calls execute next.
    Executing(Batch),
    /// The older conversation up to (not including) item `upto` is being summarized.
    Compacting {
        /// First conversation index that stays verbatim.
        upto: usize,
        /// Estimated tokens before.
        tokens_before: u32,
    },
    /// The model answered; the answer waits while the verification commands run
    /// (`verify.rs`).
    Verifying {
        /// The final answer.
        answer: String,
        /// Its JSON value under the output schema ("" without one).
        output: String,
    },
    /// Over.
    Finished(Box<RunResult>),
}

/// The whole state of a run. A continue-as-new checkpoint carries it in the shape of
/// `persisted::RunStateV1`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunState {
    /// The workflow id: the run id users see.
    pub run_id: String,
    /// The spec with defaults filled in.
    pub spec: RunSpec,
    /// Tools the model may call.
    pub tools: Vec<ToolDefinition>,
    /// Workflow time the run started (Unix ms).
    pub started_at_ms: i64,
    /// The full conversation, in order.
    pub conversation: Vec<Item>,
    /// LLM calls made so far.
    pub turn: u32,
    /// Tokens used so far.
    pub usage: Usage,
    /// `length` finishes in a row.
    pub consecutive_length: u32,
    /// Text of replies cut off by `length`, joined to the reply that completes them.
    pub partial_text: String,
    /// Where the run is.
    pub phase: Phase,
    /// Recent events (for `watch`), with increasing `seq`.
    pub events: Vec<RunEvent>,
    /// Sequence number of the next event.
    pub next_seq: u32,
    /// Messages from users (signal `message`) to add before the next LLM call.
    pub inbox: Vec<String>,
    /// Call ids seen in this run, to keep them unique.
    pub seen_call_ids: BTreeSet<String>,
    /// Tool results before this conversation index (of at least [`ELIDE_MIN_BYTES`]) are
    /// shown to the model as a short placeholder (the conversation keeps the output).
    pub elide_before: usize,
    /// The current turn already hit a context overflow and was retried after trimming.
    pub overflow_retried: bool,
    /// Allow rules learned from approvals with `remember: true`.
    pub remembered: Vec<ToolRule>,
    /// Consecutive turns in which a tool call failed (circuit breaker).
    pub error_streak: u32,
    /// Summary that replaces the older conversation in the model's view.
    pub summary: Option<Summary>,
    /// Tokens the last LLM call reported (input + output) and the conversation length then;
    /// cleared when the model's view changes (elision, compaction).
    pub calibration: Option<(u32, usize)>,
    /// Turn in which compaction last failed (not retried in the same turn).
    pub compaction_failed_turn: Option<u32>,
    /// What the workspace contributes to the system prompt (read once, at the start).
    pub instructions: Option<WorkspaceInstructions>,
    /// The limits the run started with; an extension adds them again.
    pub base_limits: Option<baton_proto::Limits>,
    /// The part of the conversation in the blob store: (head segment id, items). Requests
    /// carry only the items after it.
    pub stored: Option<(String, usize)>,
    /// Blob id of the stored system prompt and tools.
    pub context_ref: Option<String>,
    /// Segments of this run before the current one (continue-as-new).
    pub segment: u32,
    /// The latest snapshot of the run's workspace in the blob store (from tool results).
    pub workspace_snapshot: Option<String>,
    /// The turn at which the current segment started.
    pub segment_start_turn: u32,
    /// The workspace source's start, the change set and delivery.
    pub outputs: Outputs,
    /// The model's context window as the worker's model table gives it (the latest reply's
    /// `LlmResponse.context_window`; 0 = unknown): compaction uses it when the run's
    /// `ModelConfig.context_window` is 0. Kept apart from the spec, which status shows as
    /// submitted.
    pub model_context_window: u32,
    /// The most prompt tokens a request may carry as the worker computed it for the latest
    /// reply (`LlmResponse.prompt_capacity`: input cap, window less reserved output; 0 =
    /// unknown): compaction uses it before either window.
    pub prompt_capacity: u32,
    /// The current turn's overflow asked for a compaction (once per turn).
    pub overflow_compacted: bool,
    /// The next context check compacts whatever the estimate says (set by an overflow).
    pub compact_now: bool,
    /// An estimate the provider refused as too long: 9/10 of the estimate at the overflow,
    /// so later turns compact before they get there again.
    pub refused_at: Option<u32>,
    /// The spec's MCP servers were listed (their tools are in `tools`): never again in this
    /// run, later segments included.
    pub mcp_listed: bool,
    /// `spawn_agent` calls that ran (each took a child run id), over the whole run.
    pub subagents_started: u32,
    /// The verification gate's rounds and results (`verify.rs`).
    pub verify: VerifyState,
    /// A conversation's tasks and the message ids it took (`conversation.rs`).
    pub follow_ups: FollowUps,
    /// What was reported to the run's GitHub issue or pull request (`github.rs`).
    pub github: GitHubProgress,
}

/// A compaction summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The summary text.
    pub text: String,
    /// Conversation items before this index are replaced by the summary in the model's view.
    pub upto: usize,
}

/// Why an LLM call failed for good, as far as the state machine cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LlmFailure {
    /// The request did not fit the model's context window.
    ContextOverflow,
    /// The worker's side failed (its blob store), not the provider.
    Infrastructure,
    /// Anything else retries could not fix.
    Fatal,
}

impl Phase {
    /// The phase in words, as notes about ignored inputs name it.
    pub fn name(&self) -> &'static str {
        match self {
            Phase::Thinking => "thinking",
            Phase::AwaitingApproval(_) => "awaiting approval",
            Phase::Executing(_) => "executing tools",
            Phase::Compacting { .. } => "compacting",
            Phase::Verifying { .. } => "verifying",
            Phase::Finished(_) => "finished",
        }
    }
}

impl RunState {
    /// A new run. Fails if the spec names unknown tools (the CLI checks this too).
    pub fn new(run_id: &str, spec: RunSpec, now_ms: i64) -> Result<Self, StateError> {
        let spec = normalize(spec);
        let mut tools = tools::definitions(&spec.tools)
            .map_err(|unknown| StateError::UnknownTools { unknown })?;
        if !crate::subagent::may_spawn(&spec) {
            tools.retain(|t| t.name != tools::SPAWN_AGENT);
        }
        if let Some(p) = &spec.approval {
            policy::validate(p).map_err(|detail| StateError::InvalidPolicy { detail })?;
        }
        outputs::validate(&spec)?;
        verify::validate(&spec)?;
        environment::validate(&spec)?;
        crate::mcp::validate(&spec.mcp, spec.mcp_unavailable)
            .map_err(|detail| StateError::InvalidMcp { detail })?;
        let conversation = vec![user(&spec.task, false)];
        let mut state = Self::blank(run_id, spec, tools, conversation, now_ms);
        state.base_limits = state.spec.limits;
        state.note(now_ms, "run started");
        Ok(state)
    }

    /// A run that could not start (e.g. a spec naming unknown tools, a [`StateError`] from
    /// [`RunState::new`] or [`RunState::resume`]): it ends at once, `detail` saying why.
    pub fn invalid(run_id: &str, spec: RunSpec, now_ms: i64, detail: impl fmt::Display) -> Self {
        let mut state = Self::blank(run_id, spec, Vec::new(), Vec::new(), now_ms);
        state.finish(now_ms, TerminationReason::InternalError, detail.to_string());
        state
    }

    fn blank(
        run_id: &str,
        spec: RunSpec,
        tools: Vec<ToolDefinition>,
        conversation: Vec<Item>,
        now_ms: i64,
    ) -> Self {
        Self {
            run_id: run_id.to_owned(),
            tools,
            started_at_ms: now_ms,
            conversation,
            spec,
            turn: 0,
            usage: Usage::default(),
            consecutive_length: 0,
            partial_text: String::new(),
            phase: Phase::Thinking,
            events: Vec::new(),
            next_seq: 0,
            inbox: Vec::new(),
            seen_call_ids: BTreeSet::new(),
            elide_before: 0,
            stored: None,
            context_ref: None,
            segment: 0,
            workspace_snapshot: None,
            segment_start_turn: 0,
            overflow_retried: false,
            remembered: Vec::new(),
            error_streak: 0,
            summary: None,
            calibration: None,
            compaction_failed_turn: None,
            instructions: None,
            base_limits: None,
            outputs: Outputs::default(),
            model_context_window: 0,
            prompt_capacity: 0,
            overflow_compacted: false,
            compact_now: false,
            refused_at: None,
            mcp_listed: false,
            subagents_started: 0,
            verify: VerifyState::default(),
            follow_ups: FollowUps::default(),
            github: GitHubProgress::default(),
        }
    }

    /// What to do next. Applies the turn guards (max turns, token and cost budgets, deadline) before an
    /// LLM call, which may end the run.
    pub fn next_step(&mut self, now_ms: i64) -> Step {
        match &self.phase {
            Phase::Finished(result) => {
                let result = (**result).clone();
                match self.outputs_step(&result, now_ms) {
                    Some(step) => step,
                    None if let Some(step) = self.between_tasks_step(now_ms) => step,
                    None => {
                        let result = self.with_outputs(result);
                        self.announce(now_ms, &result);
                        Step::Finish(result)
                    }
                }
            }
            Phase::AwaitingApproval(_) => Step::AwaitApproval {
                timeout_seconds: self.approval_timeout(),
            },
            Phase::Compacting { upto, .. } => Step::Compact(self.compact_request(*upto)),
            Phase::Verifying { .. } => self.verify_step(now_ms),
            Phase::Executing(batch) => self.run_tools_step(batch, now_ms),
            Phase::Thinking => {
                if let Some((reason, detail)) = self.guard(now_ms) {
                    if self.ask_on_exhausted() {
                        self.ask_question(
                            format!("{detail}. Extend the limit (approve) or end the run (deny)?"),
                            Some(reason),
                            now_ms,
                        );
                    } else {
                        self.finish(now_ms, reason, detail);
                    }
                    return self.next_step(now_ms);
                }
                for text in std::mem::take(&mut self.inbox) {
                    self.conversation.push(user(&text, false));
                }
                if let Some(step) = self.context_hygiene(now_ms) {
                    return step;
                }
                Step::CallLlm(self.llm_request())
            }
        }
    }

    fn limits(&self) -> baton_proto::Limits {
        self.spec.limits.unwrap_or_default()
    }
}

/// Fills in defaults so the rest of the machine never sees zeros that mean "default".
fn normalize(mut spec: RunSpec) -> RunSpec {
    let mut limits = spec.limits.unwrap_or_default();
    if limits.max_turns == 0 {
        limits.max_turns = DEFAULT_MAX_TURNS;
    }
    if limits.tool_timeout_seconds == 0 {
        limits.tool_timeout_seconds = DEFAULT_TOOL_TIMEOUT_SECONDS;
    }
    if limits.max_parallel_tools == 0 {
        limits.max_parallel_tools = DEFAULT_MAX_PARALLEL_TOOLS;
    }
    spec.limits = Some(limits);
    // A spec without any policy (e.g. started with the plain `temporal` CLI) still asks before
    // an MCP tool that is not read-only: the server's tools act on the world. Only runs that
    // name MCP servers have such tools, so older runs are unaffected. An explicit policy (the
    // `baton` CLI always sends one) says for itself.
    spec.approval
        .get_or_insert_with(|| baton_proto::ApprovalPolicy {
            require_approval: vec![crate::mcp::EVERY_TOOL.to_owned()],
            ..Default::default()
        });
    spec.model.get_or_insert_with(Default::default);
    spec
}

fn user(text: &str, synthetic: bool) -> Item {
    Item {
        kind: Some(item::Kind::User(UserMessage {
            text: text.to_owned(),
            synthetic,
        })),
    }
}

fn assistant_item(message: AssistantMessage) -> Item {
    Item {
        kind: Some(item::Kind::Assistant(message)),
    }
}

fn add_usage(total: &mut Usage, u: &Usage) {
    total.input_tokens = total.input_tokens.saturating_add(u.input_tokens);
    total.output_tokens = total.output_tokens.saturating_add(u.output_tokens);
    total.cache_read_tokens = total.cache_read_tokens.saturating_add(u.cache_read_tokens);
    total.cache_write_tokens = total
        .cache_write_tokens
        .saturating_add(u.cache_write_tokens);
    total.reasoning_tokens = total.reasoning_tokens.saturating_add(u.reasoning_tokens);
    total.estimated_calls = total.estimated_calls.saturating_add(u.estimated_calls);
    if u.cost_usd.is_finite() && u.cost_usd > 0.0 {
        total.cost_usd += u.cost_usd;
    }
    let t = if u.total_tokens > 0 {
        u.total_tokens
    } else {
        u.input_tokens.saturating_add(u.output_tokens)
    };
    total.total_tokens = total.total_tokens.saturating_add(t);
}

#[cfg(test)]
mod tests;
