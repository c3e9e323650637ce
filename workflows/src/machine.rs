//! The agent state machine: a pure transition function over an explicit [`RunState`].
//!
//! The workflow asks [`RunState::next_step`] what to do, does it (an activity, a wait for
//! approval), and feeds the outcome back (`on_llm_response`, `on_decision`, `on_tool_results`,
//! ...). Nothing here does I/O or reads a clock: time comes in as arguments, so every
//! transition is unit-tested without a server and replays identically.

use std::collections::BTreeSet;

use baton_proto::{
    ApprovalDecision, ApprovalOutcome, ApprovalTimeoutAction, AssistantMessage, CompactRequest,
    CompactResponse, Continuation, ConversationRef, EventsPage, FinishReason, Item, LlmRequest,
    LlmResponse, PendingCall, RunEvent, RunResult, RunSpec, RunState as StateName, RunStatus,
    TerminationReason, ToolCall, ToolDefinition, ToolRequest, ToolResult, ToolRule, Usage,
    UserMessage, ViewSpec, WorkspaceInstructions, item, run_event,
};
use serde::{Deserialize, Serialize};

use crate::{
    error::DecisionError,
    guards,
    policy::{self, Assessment},
    prompt, tools, view,
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
/// Format of [`Continuation::state`].
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
    /// Run these tool calls (activity `run_tool`), at most `max_parallel` at once, then report
    /// their results in the same order with [`RunState::on_tool_results`].
    RunTools {
        /// The approved calls of the batch, in call order.
        requests: Vec<ToolRequest>,
        /// Concurrency limit.
        max_parallel: u32,
    },
    /// Summarize the older part of the conversation (activity `compact_context`), then report
    /// with [`RunState::on_compacted`] or [`RunState::on_compaction_failed`].
    Compact(CompactRequest),
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

/// The tool calls of one assistant message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    /// In the order the model made them.
    pub calls: Vec<PlannedCall>,
    /// When approval was first requested (workflow time, Unix ms).
    pub requested_at_ms: i64,
    /// Set when this "batch" is a question to a human (continue or abort?) rather than tool
    /// calls: approving continues the run, denying ends it.
    #[serde(default)]
    pub question: Option<String>,
    /// For a question about an exhausted limit: the termination reason it would end with.
    /// Approving extends the limit.
    #[serde(default)]
    pub extend: Option<i32>,
    /// Calls cut off by a worker failure that may have taken effect: approving runs them
    /// again, denying skips them.
    #[serde(default)]
    pub retry: bool,
    /// Calls whose execution has started (their `tool_started` events are out).
    #[serde(default)]
    pub started: Vec<String>,
    /// Results of the calls that completed so far (their `tool_finished` events are out).
    #[serde(default)]
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
    /// Over.
    Finished(RunResult),
}

/// The whole state of a run. Serializable, so it can be carried across continue-as-new.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    #[serde(default)]
    pub elide_before: usize,
    /// The current turn already hit a context overflow and was retried after trimming.
    #[serde(default)]
    pub overflow_retried: bool,
    /// Allow rules learned from approvals with `remember: true`.
    #[serde(default)]
    pub remembered: Vec<ToolRule>,
    /// Rules match shell commands strictly ([`policy::Matching::Strict`]): set by the
    /// workflow for runs since patch `strict-shell-rules-v1`; older histories replay with
    /// legacy matching.
    #[serde(default)]
    pub strict_rules: bool,
    /// Consecutive turns in which a tool call failed (circuit breaker).
    #[serde(default)]
    pub error_streak: u32,
    /// Summary that replaces the older conversation in the model's view.
    #[serde(default)]
    pub summary: Option<Summary>,
    /// Tokens the last LLM call reported (input + output) and the conversation length then;
    /// cleared when the model's view changes (elision, compaction).
    #[serde(default)]
    pub calibration: Option<(u32, usize)>,
    /// Turn in which compaction last failed (not retried in the same turn).
    #[serde(default)]
    pub compaction_failed_turn: Option<u32>,
    /// What the workspace contributes to the system prompt (read once, at the start).
    #[serde(default)]
    pub instructions: Option<WorkspaceInstructions>,
    /// The limits the run started with; an extension adds them again.
    #[serde(default)]
    pub base_limits: Option<baton_proto::Limits>,
    /// The part of the conversation in the blob store: (head segment id, items). Requests
    /// carry only the items after it.
    #[serde(default)]
    pub stored: Option<(String, usize)>,
    /// Blob id of the stored system prompt and tools.
    #[serde(default)]
    pub context_ref: Option<String>,
    /// Segments of this run before the current one (continue-as-new).
    #[serde(default)]
    pub segment: u32,
    /// The latest snapshot of the run's workspace in the blob store (from tool results).
    #[serde(default)]
    pub workspace_snapshot: Option<String>,
    /// The turn at which the current segment started.
    #[serde(default)]
    pub segment_start_turn: u32,
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

impl RunState {
    /// A new run. Fails if the spec names unknown tools (the CLI checks this too).
    pub fn new(run_id: &str, spec: RunSpec, now_ms: i64) -> Result<Self, String> {
        let spec = normalize(spec);
        let tools = tools::definitions(&spec.tools)
            .map_err(|unknown| format!("unknown tools in spec: {}", unknown.join(", ")))?;
        if let Some(p) = &spec.approval {
            policy::validate(p).map_err(|e| format!("invalid approval policy: {e}"))?;
        }
        let conversation = vec![user(&spec.task, false)];
        let mut state = Self::blank(run_id, spec, tools, conversation, now_ms);
        state.base_limits = state.spec.limits.clone();
        state.note(now_ms, "run started");
        Ok(state)
    }

    /// A run that could not start (e.g. a spec naming unknown tools): it ends at once.
    pub fn invalid(run_id: &str, spec: RunSpec, now_ms: i64, detail: String) -> Self {
        let mut state = Self::blank(run_id, spec, Vec::new(), Vec::new(), now_ms);
        state.finish(now_ms, TerminationReason::InternalError, detail);
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
            strict_rules: false,
            error_streak: 0,
            summary: None,
            calibration: None,
            compaction_failed_turn: None,
            instructions: None,
            base_limits: None,
        }
    }

    /// What to do next. Applies the turn guards (max turns, token budget, deadline) before an
    /// LLM call, which may end the run.
    pub fn next_step(&mut self, now_ms: i64) -> Step {
        match &self.phase {
            Phase::Finished(result) => Step::Finish(result.clone()),
            Phase::AwaitingApproval(_) => Step::AwaitApproval {
                timeout_seconds: self.approval_timeout(),
            },
            Phase::Compacting { upto, .. } => Step::Compact(self.compact_request(*upto)),
            Phase::Executing(batch) => {
                let requests: Vec<ToolRequest> = batch
                    .calls
                    .iter()
                    .filter(|c| matches!(c.disposition, Disposition::Run { .. }))
                    .map(|c| ToolRequest {
                        call: Some(c.call.clone()),
                        timeout_seconds: self.tool_timeout(&c.call),
                        snapshot: self.workspace_snapshot.clone().unwrap_or_default(),
                        mutating: !tools::definition(&c.call.name).is_some_and(|d| d.read_only),
                        confirm_retries: self
                            .spec
                            .approval
                            .as_ref()
                            .is_some_and(|p| p.on_retry == "ask"),
                        retry_confirmed: batch.retry,
                        sandbox: self.spec.sandbox.clone(),
                    })
                    .collect();
                Step::RunTools {
                    requests,
                    max_parallel: self.limits().max_parallel_tools,
                }
            }
            Phase::Thinking => {
                if let Some((reason, detail)) = self.guard(now_ms) {
                    if self.ask_on_exhausted() {
                        self.ask_question(
                            format!("{detail}. Extend the limit (approve) or end the run (deny)?"),
                            now_ms,
                        );
                        if let Phase::AwaitingApproval(batch) = &mut self.phase {
                            batch.extend = Some(reason as i32);
                        }
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

    /// The request for the next LLM call. The conversation goes by reference: the part
    /// already in the blob store is named, only the items after it travel (and land in
    /// history); the activity builds the model's view with [`view::model_view`]. The system
    /// prompt and tools travel once, then by reference too.
    pub fn llm_request(&self) -> LlmRequest {
        let (context, system_prompt, tools) = match &self.context_ref {
            Some(id) => (id.clone(), String::new(), Vec::new()),
            None => (String::new(), self.system_prompt(), self.tools.clone()),
        };
        LlmRequest {
            model: self.request_model(),
            system_prompt,
            conversation: Vec::new(),
            tools,
            history: Some(self.conversation_ref()),
            view: Some(self.view_spec()),
            context,
            turn: self.turn,
        }
    }

    /// The conversation as the activities receive it: the stored head and the items after.
    pub fn conversation_ref(&self) -> ConversationRef {
        let (head, stored) = match &self.stored {
            Some((head, n)) if *n <= self.conversation.len() => (head.clone(), *n),
            _ => (String::new(), 0),
        };
        ConversationRef {
            head,
            stored_items: stored as u32,
            added: self.conversation[stored..].to_vec(),
        }
    }

    /// How the model's view is made from the conversation now.
    pub fn view_spec(&self) -> ViewSpec {
        ViewSpec {
            summary: self
                .summary
                .as_ref()
                .map(|s| s.text.clone())
                .unwrap_or_default(),
            summary_upto: self.summary.as_ref().map(|s| s.upto as u32).unwrap_or(0),
            elide_before: self.elide_before as u32,
        }
    }

    /// The model config a request carries: a script is cut to the one turn this call needs.
    fn request_model(&self) -> Option<baton_proto::ModelConfig> {
        let mut model = self.spec.model.clone()?;
        if let Some(script) = &mut model.script {
            *script = view::script_turn(script, self.turn);
        }
        Some(model)
    }

    /// The conversation as the model sees it (see [`view::model_view`]); after a continue-as-new
    /// older items are stubs here, so use it for sizes, not content.
    pub fn model_view(&self) -> Vec<Item> {
        view::model_view(&self.conversation, &self.view_spec())
    }

    /// Whether the run should continue as new before its next step: the server suggests it,
    /// or the segment used its event or turn budget. Never while finished.
    pub fn wants_continue_as_new(&self, history_length: u32, suggested: bool) -> bool {
        if matches!(self.phase, Phase::Finished(_)) {
            return false;
        }
        let limits = self.limits();
        let events_budget = match limits.history_events_budget {
            0 => DEFAULT_HISTORY_EVENTS_BUDGET,
            n => n,
        };
        let turns = self.turn.saturating_sub(self.segment_start_turn);
        suggested
            || history_length >= events_budget
            || (limits.segment_turns > 0 && turns >= limits.segment_turns)
    }

    /// The state to carry into the next segment: this state without the spec (the next
    /// segment's input carries it), with the conversation before the last
    /// [`RESIDENT_TURNS`] turns reduced to stubs (the blob store holds it: only items already
    /// stored are stubbed) and only the last [`CARRIED_EVENTS`] events, their texts cut.
    pub fn checkpoint(&self) -> Result<Continuation, String> {
        let mut state = self.clone();
        state.spec = RunSpec::default();
        state.segment += 1;
        state.segment_start_turn = state.turn;
        let stored = self.stored.as_ref().map(|s| s.1).unwrap_or(0);
        let mut resident_turns = RESIDENT_TURNS;
        let mut carried = CARRIED_EVENTS;
        loop {
            let assistants: Vec<usize> = self
                .conversation
                .iter()
                .enumerate()
                .filter(|(_, i)| view::is_assistant(i))
                .map(|(n, _)| n)
                .collect();
            let resident_from = assistants
                .len()
                .checked_sub(resident_turns)
                .and_then(|k| assistants.get(k).copied())
                .unwrap_or(0)
                .min(stored);
            for (n, item) in state.conversation.iter_mut().enumerate() {
                if n > 0 && n < resident_from {
                    *item = view::stub(item);
                }
            }
            let skip = self.events.len().saturating_sub(carried);
            state.events = self.events[skip..].iter().map(trim_event).collect();
            let json = serde_json::to_string(&state).map_err(|e| e.to_string())?;
            if json.len() <= MAX_CHECKPOINT_BYTES || (resident_turns <= 1 && carried == 0) {
                return Ok(Continuation {
                    segment: state.segment,
                    state: json,
                    format: CHECKPOINT_FORMAT,
                });
            }
            resident_turns = (resident_turns / 2).max(1);
            carried /= 2;
        }
    }

    /// A run continued from [`RunState::checkpoint`], with `spec` (the input without its
    /// continuation).
    pub fn resume(run_id: &str, spec: RunSpec, continued: &Continuation) -> Result<Self, String> {
        if continued.format != CHECKPOINT_FORMAT {
            return Err(format!(
                "continued run state has format {}, this worker reads format {CHECKPOINT_FORMAT}",
                continued.format
            ));
        }
        let mut state: RunState = serde_json::from_str(&continued.state)
            .map_err(|e| format!("continued run state is unreadable: {e}"))?;
        state.run_id = run_id.to_owned();
        state.spec = normalize(spec);
        Ok(state)
    }

    /// The system prompt of the run (see [`crate::prompt`]).
    pub fn system_prompt(&self) -> String {
        prompt::build(
            self.started_at_ms,
            self.instructions.as_ref(),
            self.spec.sandbox.as_ref(),
            &self.spec.system_prompt,
        )
    }

    /// The workspace's contribution to the system prompt arrived (`None`: it could not be
    /// read; the run goes on without it).
    pub fn on_instructions(&mut self, instructions: Option<WorkspaceInstructions>, now_ms: i64) {
        match &instructions {
            Some(i) if !i.agents_md.is_empty() => self.note(
                now_ms,
                &format!(
                    "AGENTS.md found ({} bytes){}",
                    i.agents_md.len(),
                    if i.truncated { ", cut at 32 KiB" } else { "" }
                ),
            ),
            Some(_) => {}
            None => self.note(
                now_ms,
                "could not read the workspace's instructions; going on without them",
            ),
        }
        if let Some(i) = &instructions
            && !i.snapshot.is_empty()
            && self.workspace_snapshot.is_none()
        {
            self.workspace_snapshot = Some(i.snapshot.clone());
        }
        self.instructions = instructions;
    }

    /// The model answered.
    pub fn on_llm_response(&mut self, response: LlmResponse, now_ms: i64) {
        if !response.history_head.is_empty()
            && response.history_items as usize <= self.conversation.len()
        {
            self.stored = Some((
                response.history_head.clone(),
                response.history_items as usize,
            ));
        }
        if !response.context.is_empty() {
            self.context_ref = Some(response.context.clone());
        }
        self.turn += 1;
        self.overflow_retried = false;
        if let Some(u) = &response.usage {
            add_usage(&mut self.usage, u);
            let tokens = u.input_tokens.saturating_add(u.output_tokens);
            // The reply is pushed below; count it through the reported output tokens.
            self.calibration = (tokens > 0).then_some((tokens, self.conversation.len() + 1));
        }
        self.usage.llm_calls += 1;
        let mut message = response.message.unwrap_or_default();
        let finish = FinishReason::try_from(message.finish_reason).unwrap_or_default();
        match finish {
            FinishReason::Length => {
                self.consecutive_length += 1;
                message.tool_calls.clear();
                self.partial_text.push_str(&message.text);
                self.push_event(now_ms, run_event::Kind::Assistant(message.clone()));
                if self.consecutive_length > MAX_LENGTH_CONTINUATIONS {
                    let detail = format!(
                        "the model's output was cut off by the token limit {} times in a row",
                        self.consecutive_length
                    );
                    self.conversation.push(assistant_item(message));
                    self.finish(now_ms, TerminationReason::OutputTruncated, detail);
                    return;
                }
                self.conversation.push(assistant_item(message));
                self.conversation.push(user(CONTINUE_PROMPT, true));
            }
            FinishReason::ContentFilter => {
                self.push_event(now_ms, run_event::Kind::Assistant(message.clone()));
                self.conversation.push(assistant_item(message));
                self.finish(
                    now_ms,
                    TerminationReason::ContentFiltered,
                    "the provider's content filter stopped the reply".to_owned(),
                );
            }
            FinishReason::Stop | FinishReason::ToolCalls | FinishReason::Unspecified => {
                self.consecutive_length = 0;
                for (i, call) in message.tool_calls.iter_mut().enumerate() {
                    if call.id.is_empty() || self.seen_call_ids.contains(&call.id) {
                        call.id = format!("call_{}_{}", self.turn, i + 1);
                    }
                    self.seen_call_ids.insert(call.id.clone());
                }
                self.push_event(now_ms, run_event::Kind::Assistant(message.clone()));
                let calls = message.tool_calls.clone();
                let text = message.text.clone();
                self.conversation.push(assistant_item(message));
                if let Some(why) = self.loop_check() {
                    self.on_loop(why, now_ms);
                    return;
                }
                if calls.is_empty() {
                    let answer = std::mem::take(&mut self.partial_text) + &text;
                    self.complete(now_ms, answer);
                    return;
                }
                self.partial_text.clear();
                self.plan_batch(calls, now_ms);
            }
        }
    }

    /// The LLM activity failed for good (retries exhausted or a non-retryable error). A context
    /// overflow is answered once per turn by eliding old tool outputs from the model's view and
    /// retrying; a second overflow (or nothing left to elide) ends the run.
    pub fn on_llm_failure(&mut self, failure: LlmFailure, detail: String, now_ms: i64) {
        match failure {
            LlmFailure::Fatal => self.finish(now_ms, TerminationReason::ProviderError, detail),
            LlmFailure::Infrastructure => {
                self.finish(now_ms, TerminationReason::InternalError, detail)
            }
            LlmFailure::ContextOverflow => {
                let (count, bytes) = if self.overflow_retried {
                    (0, 0)
                } else {
                    self.elide_old_tool_outputs()
                };
                if count == 0 {
                    self.finish(now_ms, TerminationReason::ContextOverflow, detail);
                } else {
                    self.overflow_retried = true;
                    self.note(
                        now_ms,
                        &format!(
                            "context overflow: removed {count} old tool outputs ({bytes} bytes) \
                             from the model's view; retrying the turn"
                        ),
                    );
                }
            }
        }
    }

    /// Elides tool outputs older than the last [`KEEP_RECENT_TURNS`] assistant turns from the
    /// model's view. Returns how many outputs and bytes were elided.
    pub fn elide_old_tool_outputs(&mut self) -> (usize, usize) {
        let assistants: Vec<usize> = self
            .conversation
            .iter()
            .enumerate()
            .filter(|(_, i)| view::is_assistant(i))
            .map(|(n, _)| n)
            .collect();
        let Some(&cutoff) = assistants
            .len()
            .checked_sub(KEEP_RECENT_TURNS)
            .and_then(|k| assistants.get(k))
        else {
            return (0, 0);
        };
        let from = self
            .summary
            .as_ref()
            .map(|s| s.upto)
            .unwrap_or(0)
            .max(self.elide_before);
        let mut count = 0;
        let mut bytes = 0;
        for entry in self.conversation.iter().take(cutoff).skip(from) {
            if let Some(size) = view::tool_output_chars(entry)
                && size >= ELIDE_MIN_BYTES
            {
                count += 1;
                bytes += size;
            }
        }
        self.elide_before = self.elide_before.max(cutoff);
        if count > 0 {
            self.calibration = None;
        }
        (count, bytes)
    }

    /// Estimated tokens of the next request: the last call's reported usage plus an estimate of
    /// what was added since, or (after the view changed) an estimate of the whole view.
    pub fn estimate_tokens(&self) -> u32 {
        let len_now = self.conversation.len();
        let estimate = match self.calibration {
            Some((tokens, len)) if len <= len_now => {
                let added = view::view_chars(&self.conversation, self.elide_before, len, len_now);
                u64::from(tokens) + (added / 4) as u64
            }
            _ => {
                let overhead = self.system_prompt().len()
                    + self
                        .tools
                        .iter()
                        .map(|t| t.description.len() + t.parameters.len() + t.name.len())
                        .sum::<usize>();
                let view = match &self.summary {
                    Some(summary) => {
                        view::item_chars(&view::summary_item(&summary.text))
                            + view::view_chars(&self.conversation, self.elide_before, 0, 1)
                            + view::view_chars(
                                &self.conversation,
                                self.elide_before,
                                summary.upto,
                                len_now,
                            )
                    }
                    None => view::view_chars(&self.conversation, self.elide_before, 0, len_now),
                };
                ((view + overhead) / 4) as u64
            }
        };
        estimate.min(u64::from(u32::MAX)) as u32
    }

    /// The token count above which the context is compacted (`None`: window unknown).
    pub fn compaction_threshold(&self) -> Option<u32> {
        let window = self.spec.model.as_ref().map(|m| m.context_window)?;
        if window == 0 {
            return None;
        }
        let buffer = COMPACTION_BUFFER_TOKENS.min(window / 4);
        Some(window - buffer)
    }

    /// Before an LLM call: when the estimate passes the threshold, elide old tool outputs,
    /// then, if still over, ask for a summary of the older turns.
    fn context_hygiene(&mut self, now_ms: i64) -> Option<Step> {
        let limit = self.compaction_threshold()?;
        let before = self.estimate_tokens();
        if before <= limit {
            return None;
        }
        let (count, _) = self.elide_old_tool_outputs();
        let after = self.estimate_tokens();
        if count > 0 {
            self.note(
                now_ms,
                &format!(
                    "compaction: removed {count} old tool outputs from the model's view \
                     (~{before} -> ~{after} tokens)"
                ),
            );
        }
        if after <= limit || self.compaction_failed_turn == Some(self.turn) {
            return None;
        }
        let upto = self.compaction_cut()?;
        self.phase = Phase::Compacting {
            upto,
            tokens_before: after,
        };
        Some(Step::Compact(self.compact_request(upto)))
    }

    /// Where the verbatim part of the conversation starts after a compaction: the first item
    /// of the last [`KEEP_RECENT_TURNS`] assistant turns (so tool results keep their calls).
    fn compaction_cut(&self) -> Option<usize> {
        let from = self.summary.as_ref().map(|s| s.upto).unwrap_or(1);
        let assistants: Vec<usize> = self
            .conversation
            .iter()
            .enumerate()
            .skip(from)
            .filter(|(_, i)| view::is_assistant(i))
            .map(|(n, _)| n)
            .collect();
        let k = assistants.len().checked_sub(KEEP_RECENT_TURNS)?;
        let cut = *assistants.get(k)?;
        (cut > from).then_some(cut)
    }

    fn compact_request(&self, upto: usize) -> CompactRequest {
        let from = self.summary.as_ref().map(|s| s.upto).unwrap_or(1);
        let mut model = self.spec.model.clone();
        if let Some(m) = &mut model {
            m.script = None;
        }
        CompactRequest {
            model,
            task: self.spec.task.clone(),
            items: Vec::new(),
            history: Some(self.conversation_ref()),
            view: Some(self.view_spec()),
            from: from as u32,
            upto: upto as u32,
        }
    }

    /// The summary arrived: it replaces the older turns in the model's view.
    pub fn on_compacted(&mut self, response: CompactResponse, now_ms: i64) {
        let Phase::Compacting {
            upto,
            tokens_before,
        } = self.phase
        else {
            return;
        };
        if let Some(u) = &response.usage {
            add_usage(&mut self.usage, u);
        }
        self.summary = Some(Summary {
            text: response.summary,
            upto,
        });
        self.calibration = None;
        self.phase = Phase::Thinking;
        let after = self.estimate_tokens();
        self.note(
            now_ms,
            &format!(
                "compaction: summarized the conversation before item {upto} (~{tokens_before} -> ~{after} tokens)"
            ),
        );
    }

    /// The summary could not be made: go on without it (not retried this turn).
    pub fn on_compaction_failed(&mut self, detail: &str, now_ms: i64) {
        if matches!(self.phase, Phase::Compacting { .. }) {
            self.phase = Phase::Thinking;
        }
        self.compaction_failed_turn = Some(self.turn);
        self.note(
            now_ms,
            &format!("compaction failed, continuing without it: {detail}"),
        );
    }

    /// Checks a decision without applying it (update validator).
    pub fn validate_decision(&self, decision: &ApprovalDecision) -> Result<(), DecisionError> {
        let batch = match &self.phase {
            Phase::AwaitingApproval(batch) => batch,
            Phase::Finished(_) => return Err(DecisionError::RunOver),
            _ => return Err(DecisionError::NothingPending),
        };
        let targets: Vec<&ToolCall> = if decision.call_id == "*" {
            let pending: Vec<&ToolCall> = batch.pending().map(|c| &c.call).collect();
            if pending.is_empty() {
                return Err(DecisionError::NothingPending);
            }
            pending
        } else {
            match batch.calls.iter().find(|c| c.call.id == decision.call_id) {
                None => {
                    return Err(DecisionError::UnknownCall {
                        call_id: decision.call_id.clone(),
                        pending: batch.pending().map(|c| c.call.id.clone()).collect(),
                    });
                }
                Some(c) if c.disposition != Disposition::Pending => {
                    return Err(DecisionError::AlreadyDecided {
                        call_id: decision.call_id.clone(),
                    });
                }
                Some(c) => vec![&c.call],
            }
        };
        let approvers = self
            .spec
            .approval
            .as_ref()
            .map(|p| p.approvers.as_slice())
            .unwrap_or_default();
        for call in targets {
            if let Err(allowed) = policy::may_decide(approvers, &call.name, &decision.identity) {
                return Err(DecisionError::NotAllowed {
                    identity: decision.identity.clone(),
                    tool: call.name.clone(),
                    allowed,
                });
            }
        }
        Ok(())
    }

    /// Applies an approval decision (signal `approval` or update `approve`). Once no call of
    /// the batch is pending, the batch moves on to execution.
    pub fn on_decision(
        &mut self,
        decision: ApprovalDecision,
        now_ms: i64,
    ) -> Result<ApprovalOutcome, DecisionError> {
        if let Err(e) = self.validate_decision(&decision) {
            self.note(now_ms, &format!("approval ignored: {e}"));
            return Err(e);
        }
        let matching = self.matching();
        let Phase::AwaitingApproval(batch) = &mut self.phase else {
            return Err(DecisionError::NothingPending);
        };
        // Who decided, as the model is told: the name the sender gave, else the Temporal
        // client identity the decision came from (which the decision event records too).
        let approver = match (decision.approver.as_str(), decision.identity.as_str()) {
            ("", "") => "unknown".to_owned(),
            ("", identity) => identity.to_owned(),
            (name, _) => name.to_owned(),
        };
        let mut applied = Vec::new();
        let mut learned = Vec::new();
        for planned in batch.calls.iter_mut() {
            let matches = decision.call_id == "*" || planned.call.id == decision.call_id;
            if !matches || planned.disposition != Disposition::Pending {
                continue;
            }
            if decision.approved
                && decision.remember
                && let Some(rule) = policy::remembered_rule(&planned.call, matching)
            {
                learned.push(rule);
            }
            planned.disposition = if decision.approved {
                Disposition::Run {
                    approver: Some(approver.clone()),
                }
            } else if batch.retry {
                Disposition::Refused {
                    content: format!(
                        "A worker failed while this call ran; it may or may not have taken \
                         effect. {approver} chose not to run it again: {}. Check its effects \
                         before you go on.",
                        if decision.reason.is_empty() {
                            "no reason given"
                        } else {
                            &decision.reason
                        }
                    ),
                }
            } else {
                let reason = if decision.reason.is_empty() {
                    "no reason given".to_owned()
                } else {
                    decision.reason.clone()
                };
                Disposition::Refused {
                    content: format!(
                        "The call was denied by {approver}: {reason}. It did not run. Do not \
                         retry it unchanged; take another approach or explain why it is needed."
                    ),
                }
            };
            applied.push(planned.call.id.clone());
        }
        let still_pending = batch.pending().count() as u32;
        let mut remembered = Vec::with_capacity(learned.len());
        for rule in learned {
            let shown = format!(
                "{} {}",
                rule.tool,
                if rule.pattern.is_empty() {
                    "*"
                } else {
                    &rule.pattern
                }
            );
            self.note(
                now_ms,
                &format!("{approver} allowed {shown} for the rest of the run"),
            );
            remembered.push(shown);
            self.remembered.push(rule);
        }
        for call_id in &applied {
            let d = ApprovalDecision {
                call_id: call_id.clone(),
                approver: approver.clone(),
                ..decision.clone()
            };
            self.push_event(now_ms, run_event::Kind::ApprovalDecided(d));
        }
        self.advance_if_decided(now_ms);
        Ok(ApprovalOutcome {
            call_ids: applied,
            approved: decision.approved,
            still_pending,
            remembered,
        })
    }

    /// Nobody decided in time: deny the undecided calls, or end the run, by policy.
    pub fn on_approval_timeout(&mut self, now_ms: i64) {
        let action = self
            .spec
            .approval
            .as_ref()
            .map(|p| p.on_timeout())
            .unwrap_or_default();
        let Phase::AwaitingApproval(batch) = &mut self.phase else {
            return;
        };
        match action {
            ApprovalTimeoutAction::Fail => {
                let ids: Vec<String> = batch.pending().map(|c| c.call.id.clone()).collect();
                self.finish(
                    now_ms,
                    TerminationReason::ApprovalTimedOut,
                    format!("no approval decision in time for {}", ids.join(", ")),
                );
            }
            ApprovalTimeoutAction::Deny => {
                for planned in batch.calls.iter_mut() {
                    if planned.disposition == Disposition::Pending {
                        planned.disposition = Disposition::Refused {
                            content: "The call was denied: approval timed out. It did not run."
                                .to_owned(),
                        };
                    }
                }
                self.note(now_ms, "approval timed out: undecided calls denied");
                self.advance_if_decided(now_ms);
            }
        }
    }

    /// The calls `ids` of the current batch start executing now (the workflow tells as it
    /// schedules them: mutating calls go one at a time).
    pub fn on_tools_started(&mut self, ids: &[String], now_ms: i64) {
        let Phase::Executing(batch) = &mut self.phase else {
            return;
        };
        let mut started = Vec::new();
        for planned in &batch.calls {
            if ids.contains(&planned.call.id) && !batch.started.contains(&planned.call.id) {
                batch.started.push(planned.call.id.clone());
                started.push(planned.call.clone());
            }
        }
        for call in started {
            self.push_event(now_ms, run_event::Kind::ToolStarted(call));
        }
    }

    /// Calls of the current batch completed (as each group of it does): `watch` sees them
    /// finish now, and if the run ends before the batch does, they keep their results.
    /// [`RunState::on_tool_results`] takes them all again at the end of the batch.
    pub fn on_tools_finished(&mut self, results: &[ToolResult], now_ms: i64) {
        let Phase::Executing(batch) = &mut self.phase else {
            return;
        };
        let mut finished = Vec::new();
        for r in results {
            if r.interrupted || batch.done.iter().any(|d| d.call_id == r.call_id) {
                continue;
            }
            batch.done.push(r.clone());
            finished.push(r.clone());
        }
        for r in finished {
            self.push_event(now_ms, run_event::Kind::ToolFinished(r));
        }
    }

    /// Results of the calls of the last [`Step::RunTools`], in the same order. Refused calls
    /// get their error observation; everything goes into the conversation in call order.
    pub fn on_tool_results(&mut self, results: Vec<ToolResult>, now_ms: i64) {
        let Phase::Executing(batch) = std::mem::replace(&mut self.phase, Phase::Thinking) else {
            return;
        };
        let mut results = results.into_iter();
        let mut any_error = false;
        let mut interrupted = Vec::new();
        for planned in batch.calls {
            let result = match planned.disposition {
                Disposition::Run { .. } => {
                    let mut r = results.next().unwrap_or_else(|| ToolResult {
                        content: "internal error: the tool produced no result".to_owned(),
                        is_error: true,
                        ..Default::default()
                    });
                    r.call_id = planned.call.id.clone();
                    r.name = planned.call.name.clone();
                    r
                }
                Disposition::Refused { content } => ToolResult {
                    call_id: planned.call.id.clone(),
                    name: planned.call.name.clone(),
                    content,
                    is_error: true,
                    ..Default::default()
                },
                Disposition::Pending => ToolResult {
                    call_id: planned.call.id.clone(),
                    name: planned.call.name.clone(),
                    content: "internal error: the call was never decided".to_owned(),
                    is_error: true,
                    ..Default::default()
                },
            };
            if result.interrupted {
                // The workspace as the cut-off call found it.
                if !result.snapshot.is_empty() {
                    self.workspace_snapshot = Some(result.snapshot.clone());
                }
                interrupted.push(PlannedCall {
                    call: planned.call,
                    disposition: Disposition::Pending,
                });
                continue;
            }
            any_error |= result.is_error;
            if !result.snapshot.is_empty() {
                self.workspace_snapshot = Some(result.snapshot.clone());
            }
            if !batch.done.iter().any(|d| d.call_id == result.call_id) {
                self.push_event(now_ms, run_event::Kind::ToolFinished(result.clone()));
            }
            self.conversation.push(Item {
                kind: Some(item::Kind::ToolResult(result)),
            });
        }
        self.circuit_breaker(any_error, now_ms);
        if !interrupted.is_empty() && matches!(self.phase, Phase::Thinking) {
            self.ask_about_retries(interrupted, now_ms);
        }
    }

    fn loops_policy(&self) -> Option<&baton_proto::LoopPolicy> {
        self.spec.approval.as_ref().and_then(|p| p.loops.as_ref())
    }

    fn loop_check(&self) -> Option<String> {
        if self.loops_policy().is_some_and(|l| l.disabled) {
            return None;
        }
        guards::detect_loop(&self.conversation)
    }

    /// A loop was detected: stop, or ask a human, by policy.
    fn on_loop(&mut self, why: String, now_ms: i64) {
        let ask = self.loops_policy().is_some_and(|l| l.on_loop == "ask");
        if ask {
            self.ask_question(
                format!("Loop detected: {why}. Continue the run (approve) or abort it (deny)?"),
                now_ms,
            );
        } else {
            self.finish(now_ms, TerminationReason::LoopDetected, why);
        }
    }

    /// Counts failing turns: alerts the model after the first threshold, then pauses for a
    /// human after the second.
    fn circuit_breaker(&mut self, any_error: bool, now_ms: i64) {
        if !any_error {
            self.error_streak = 0;
            return;
        }
        self.error_streak += 1;
        if self.loops_policy().is_some_and(|l| l.disabled) {
            return;
        }
        let (alert_after, pause_after) = guards::breaker_thresholds(self.loops_policy());
        if self.error_streak == alert_after {
            self.conversation
                .push(user(&guards::breaker_alert(self.error_streak), true));
            self.note(
                now_ms,
                &format!(
                    "circuit breaker: {} failing turns in a row; the model was told to change strategy",
                    self.error_streak
                ),
            );
        } else if self.error_streak == alert_after + pause_after {
            self.ask_question(
                format!(
                    "The agent's tool calls failed in {} turns in a row, even after it was told to change strategy. Continue the run (approve) or abort it (deny)?",
                    self.error_streak
                ),
                now_ms,
            );
        }
    }

    /// Calls cut off by a worker failure wait for a human: run again (approve) or skip (deny).
    fn ask_about_retries(&mut self, calls: Vec<PlannedCall>, now_ms: i64) {
        let ids: Vec<&str> = calls.iter().map(|c| c.call.id.as_str()).collect();
        self.note(
            now_ms,
            &format!(
                "{} cut off by a worker failure and may have taken effect; policy on_retry = \
                 ask: approve to run again, deny to skip",
                ids.join(", ")
            ),
        );
        for c in &calls {
            self.push_event(
                now_ms,
                run_event::Kind::ApprovalRequested(PendingCall {
                    call_id: c.call.id.clone(),
                    tool: c.call.name.clone(),
                    arguments: c.call.arguments.clone(),
                    requested_at_ms: now_ms,
                }),
            );
        }
        self.phase = Phase::AwaitingApproval(Batch {
            calls,
            requested_at_ms: now_ms,
            question: None,
            extend: None,
            retry: true,
            started: Vec::new(),
            done: Vec::new(),
        });
    }

    /// Pauses the run with a question for a human, answered like an approval.
    fn ask_question(&mut self, question: String, now_ms: i64) {
        let call = ToolCall {
            id: format!("{QUESTION_CALL_PREFIX}{}", self.turn),
            name: QUESTION_TOOL.to_owned(),
            arguments: serde_json::json!({ "question": question }).to_string(),
            arguments_ref: String::new(),
        };
        self.push_event(
            now_ms,
            run_event::Kind::ApprovalRequested(PendingCall {
                call_id: call.id.clone(),
                tool: call.name.clone(),
                arguments: call.arguments.clone(),
                requested_at_ms: now_ms,
            }),
        );
        self.phase = Phase::AwaitingApproval(Batch {
            calls: vec![PlannedCall {
                call,
                disposition: Disposition::Pending,
            }],
            requested_at_ms: now_ms,
            question: Some(question),
            extend: None,
            retry: false,
            started: Vec::new(),
            done: Vec::new(),
        });
    }

    /// Whether limits pause for a human instead of ending the run.
    fn ask_on_exhausted(&self) -> bool {
        self.limits().on_exhausted == "ask"
    }

    /// Adds the starting limit again to the one that was reached.
    fn extend_limits(&mut self, reason: TerminationReason, now_ms: i64) {
        let base = self.base_limits.clone().unwrap_or_default();
        let turn = self.turn;
        let used = self.usage.total_tokens;
        let elapsed_s = ((now_ms - self.started_at_ms).max(0) / 1000) as u32;
        let limits = self.spec.limits.get_or_insert_with(Default::default);
        let what = match reason {
            TerminationReason::MaxTurnsExceeded => {
                limits.max_turns = turn + base.max_turns.max(1);
                format!("turns extended to {}", limits.max_turns)
            }
            _ if limits.max_total_tokens > 0 && used >= limits.max_total_tokens => {
                limits.max_total_tokens = used.saturating_add(base.max_total_tokens.max(1));
                format!("token budget extended to {}", limits.max_total_tokens)
            }
            _ => {
                limits.deadline_seconds = elapsed_s.saturating_add(base.deadline_seconds.max(60));
                format!("deadline extended to {} s", limits.deadline_seconds)
            }
        };
        self.note(now_ms, &what);
    }

    /// The run's deadline in workflow time (Unix ms), if it has one.
    pub fn deadline_ms(&self) -> Option<i64> {
        let secs = self.limits().deadline_seconds;
        (secs > 0).then(|| self.started_at_ms + i64::from(secs) * 1000)
    }

    /// Whether the workflow should stop work in flight when the deadline passes (limits that
    /// ask a human are checked between turns instead).
    pub fn deadline_interrupts(&self) -> bool {
        self.deadline_ms().is_some() && !self.ask_on_exhausted()
    }

    /// The deadline passed while an activity or approval wait was in flight (which the
    /// workflow cancelled).
    pub fn on_deadline_passed(&mut self, now_ms: i64) {
        if matches!(self.phase, Phase::Finished(_)) {
            return;
        }
        let secs = self.limits().deadline_seconds;
        self.finish(
            now_ms,
            TerminationReason::BudgetExceeded,
            format!("the run passed its deadline of {secs} s; work in flight was stopped"),
        );
    }

    /// Workflow cancellation was requested.
    pub fn on_cancelled(&mut self, reason: Option<String>, now_ms: i64) {
        if matches!(self.phase, Phase::Finished(_)) {
            return;
        }
        let detail = match reason {
            Some(r) if !r.is_empty() => format!("cancelled: {r}"),
            _ => "cancelled".to_owned(),
        };
        self.finish(now_ms, TerminationReason::Cancelled, detail);
    }

    /// A user message (signal `message`) for the model, added before the next LLM call.
    pub fn on_user_message(&mut self, text: String, now_ms: i64) {
        if matches!(self.phase, Phase::Finished(_)) {
            return;
        }
        // The text too (cut, on one line), so `watch` and `status` show what was said.
        let mut said = text.split_whitespace().collect::<Vec<_>>().join(" ");
        crate::view::cut_text(&mut said, USER_MESSAGE_NOTE_BYTES);
        self.note(now_ms, &format!("user message: {said}"));
        self.inbox.push(text);
    }

    /// The answer of query `status`.
    pub fn status(&self) -> RunStatus {
        let (state, reason) = match &self.phase {
            Phase::Thinking => (StateName::Thinking, TerminationReason::Unspecified),
            Phase::AwaitingApproval(_) => {
                (StateName::AwaitingApproval, TerminationReason::Unspecified)
            }
            Phase::Executing(_) => (StateName::Executing, TerminationReason::Unspecified),
            Phase::Compacting { .. } => (StateName::Compacting, TerminationReason::Unspecified),
            Phase::Finished(r) => (r.status(), r.reason()),
        };
        RunStatus {
            state: state as i32,
            turn: self.turn,
            pending: self.pending_calls(),
            usage: Some(self.usage),
            last_event: self.events.last().map(describe_event).unwrap_or_default(),
            reason: reason as i32,
        }
    }

    /// Calls waiting for a decision.
    pub fn pending_calls(&self) -> Vec<PendingCall> {
        match &self.phase {
            Phase::AwaitingApproval(batch) => batch
                .pending()
                .map(|c| PendingCall {
                    call_id: c.call.id.clone(),
                    tool: c.call.name.clone(),
                    arguments: c.call.arguments.clone(),
                    requested_at_ms: batch.requested_at_ms,
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// How many calls wait for a decision ([`RunState::pending_calls`] without building them:
    /// the approval wait checks it on every activation).
    pub fn pending_count(&self) -> usize {
        match &self.phase {
            Phase::AwaitingApproval(batch) => batch.pending().count(),
            _ => 0,
        }
    }

    /// Whether every call of the pending batch is decided (the approval wait can end).
    pub fn approvals_settled(&self) -> bool {
        !matches!(self.phase, Phase::AwaitingApproval(_))
    }

    /// Events with `seq >= since` (query `events`).
    pub fn events_since(&self, since: u32) -> EventsPage {
        EventsPage {
            events: self
                .events
                .iter()
                .filter(|e| e.seq >= since)
                .cloned()
                .collect(),
            finished: matches!(self.phase, Phase::Finished(_)),
        }
    }

    /// How this run's rules match shell commands.
    pub fn matching(&self) -> policy::Matching {
        if self.strict_rules {
            policy::Matching::Strict
        } else {
            policy::Matching::Legacy
        }
    }

    /// The result, once finished.
    pub fn result(&self) -> Option<&RunResult> {
        match &self.phase {
            Phase::Finished(r) => Some(r),
            _ => None,
        }
    }

    fn limits(&self) -> baton_proto::Limits {
        self.spec.limits.clone().unwrap_or_default()
    }

    fn approval_timeout(&self) -> Option<u32> {
        self.spec
            .approval
            .as_ref()
            .map(|p| p.timeout_seconds)
            .filter(|t| *t > 0)
    }

    fn tool_timeout(&self, call: &ToolCall) -> u32 {
        let default = self.limits().tool_timeout_seconds;
        if call.name != tools::SHELL {
            return default;
        }
        serde_json::from_str::<serde_json::Value>(&call.arguments)
            .ok()
            .and_then(|v| v.get("timeout_seconds").and_then(|t| t.as_u64()))
            .filter(|t| *t > 0)
            .map(|t| t.min(u64::from(u32::MAX)) as u32)
            .unwrap_or(default)
    }

    /// The turn guards: max turns, token budget, deadline.
    fn guard(&self, now_ms: i64) -> Option<(TerminationReason, String)> {
        let limits = self.limits();
        if self.turn >= limits.max_turns {
            return Some((
                TerminationReason::MaxTurnsExceeded,
                format!(
                    "the run reached its limit of {} turns without a final answer",
                    limits.max_turns
                ),
            ));
        }
        if limits.max_total_tokens > 0 && self.usage.total_tokens >= limits.max_total_tokens {
            return Some((
                TerminationReason::BudgetExceeded,
                format!(
                    "the run used {} tokens, its budget is {}",
                    self.usage.total_tokens, limits.max_total_tokens
                ),
            ));
        }
        if limits.deadline_seconds > 0 {
            let deadline = self.started_at_ms + i64::from(limits.deadline_seconds) * 1000;
            if now_ms >= deadline {
                return Some((
                    TerminationReason::BudgetExceeded,
                    format!(
                        "the run passed its deadline of {} s",
                        limits.deadline_seconds
                    ),
                ));
            }
        }
        None
    }

    /// Validates and assesses every call of a batch before any of it runs.
    fn plan_batch(&mut self, calls: Vec<ToolCall>, now_ms: i64) {
        let policy = self.spec.approval.clone().unwrap_or_default();
        let matching = self.matching();
        let planned: Vec<PlannedCall> = calls
            .into_iter()
            .map(|call| {
                let disposition = match self.check_call(&call) {
                    Err(content) => Disposition::Refused { content },
                    Ok(def) => {
                        match policy::assess(&call, def, &policy, &self.remembered, matching) {
                            Assessment::AutoApprove => Disposition::Run { approver: None },
                            Assessment::AskHuman => Disposition::Pending,
                            Assessment::Reject { reason } => {
                                Disposition::Refused { content: reason }
                            }
                        }
                    }
                };
                PlannedCall { call, disposition }
            })
            .collect();
        let batch = Batch {
            calls: planned,
            requested_at_ms: now_ms,
            question: None,
            extend: None,
            retry: false,
            started: Vec::new(),
            done: Vec::new(),
        };
        let pending: Vec<PendingCall> = batch
            .pending()
            .map(|c| PendingCall {
                call_id: c.call.id.clone(),
                tool: c.call.name.clone(),
                arguments: c.call.arguments.clone(),
                requested_at_ms: now_ms,
            })
            .collect();
        if pending.is_empty() {
            self.phase = Phase::Executing(batch);
        } else {
            self.phase = Phase::AwaitingApproval(batch);
            for p in pending {
                self.push_event(now_ms, run_event::Kind::ApprovalRequested(p));
            }
        }
    }

    /// A call must name an enabled tool and carry a JSON object of arguments.
    fn check_call(&self, call: &ToolCall) -> Result<&ToolDefinition, String> {
        let Some(def) = self.tools.iter().find(|t| t.name == call.name) else {
            let names: Vec<&str> = self.tools.iter().map(|t| t.name.as_str()).collect();
            return Err(format!(
                "Unknown tool '{}'. The available tools are: {}. Call one of them.",
                call.name,
                names.join(", ")
            ));
        };
        let args = if call.arguments.trim().is_empty() {
            "{}"
        } else {
            call.arguments.as_str()
        };
        match serde_json::from_str::<serde_json::Value>(args) {
            Ok(serde_json::Value::Object(_)) => Ok(def),
            Ok(other) => Err(format!(
                "The arguments of '{}' must be a JSON object matching its schema, got: {}. \
                 The call did not run.",
                call.name, other
            )),
            Err(e) => Err(format!(
                "The arguments of '{}' are not valid JSON ({e}). Send a JSON object matching \
                 the tool's schema: {}. The call did not run.",
                call.name, def.parameters
            )),
        }
    }

    fn advance_if_decided(&mut self, now_ms: i64) {
        if let Phase::AwaitingApproval(batch) = &self.phase
            && batch.pending().next().is_none()
        {
            let Phase::AwaitingApproval(batch) =
                std::mem::replace(&mut self.phase, Phase::Thinking)
            else {
                return;
            };
            if batch.question.is_none() {
                self.phase = Phase::Executing(batch);
                return;
            }
            // A question: approved continues (phase stays Thinking), denied ends the run.
            let reason = batch
                .extend
                .and_then(|r| TerminationReason::try_from(r).ok())
                .unwrap_or(TerminationReason::LoopDetected);
            match batch.calls.first().map(|c| &c.disposition) {
                Some(Disposition::Refused { content }) => {
                    // The refusal was written for the model ("... Do not retry it"); the
                    // result only needs who ended the run and why.
                    let detail = content.replace("The call was denied", "The run was ended");
                    let detail = match detail.split_once(" It did not run.") {
                        Some((said, _)) => said.to_owned(),
                        None => detail,
                    };
                    self.finish(now_ms, reason, detail);
                }
                _ if batch.extend.is_some() => self.extend_limits(reason, now_ms),
                _ => {
                    self.error_streak = 0;
                    self.note(now_ms, "a human chose to continue the run");
                }
            }
        }
    }

    fn complete(&mut self, now_ms: i64, answer: String) {
        let result = RunResult {
            run_id: self.run_id.clone(),
            status: StateName::Completed as i32,
            reason: TerminationReason::Completed as i32,
            answer,
            turns: self.turn,
            usage: Some(self.usage),
            detail: String::new(),
        };
        self.push_event(now_ms, run_event::Kind::Finished(result.clone()));
        self.phase = Phase::Finished(result);
    }

    fn finish(&mut self, now_ms: i64, reason: TerminationReason, detail: String) {
        let status = match reason {
            TerminationReason::Completed => StateName::Completed,
            TerminationReason::Cancelled => StateName::Cancelled,
            _ => StateName::Failed,
        };
        self.close_open_calls(now_ms, &detail);
        let result = RunResult {
            run_id: self.run_id.clone(),
            status: status as i32,
            reason: reason as i32,
            answer: self.last_assistant_text(),
            turns: self.turn,
            usage: Some(self.usage),
            detail,
        };
        self.push_event(now_ms, run_event::Kind::Finished(result.clone()));
        self.phase = Phase::Finished(result);
    }

    /// The run ends (`detail`: why) with tool calls of the model's last turn unanswered (in
    /// flight, or waiting for a decision): each gets a result saying so, in the conversation
    /// and as an event, so a transcript or `watch` never shows a call without an outcome.
    fn close_open_calls(&mut self, now_ms: i64, detail: &str) {
        let (batch, running) = match &self.phase {
            Phase::Executing(batch) => (batch, true),
            Phase::AwaitingApproval(batch) if batch.question.is_none() => (batch, false),
            _ => return,
        };
        // (result, whether its `tool_finished` event is still to be told)
        let results: Vec<(ToolResult, bool)> = batch
            .calls
            .iter()
            .map(|planned| {
                let id = &planned.call.id;
                if let Some(done) = batch.done.iter().find(|r| &r.call_id == id) {
                    return (done.clone(), false);
                }
                let content = match &planned.disposition {
                    Disposition::Refused { content } => content.clone(),
                    Disposition::Run { .. } if running && batch.started.contains(id) => format!(
                        "stopped: the run ended while this call ran ({detail}); it may have \
                         taken effect in part"
                    ),
                    Disposition::Run { .. } => {
                        format!("not run: the run ended before this call ran ({detail})")
                    }
                    Disposition::Pending => {
                        format!("not run: the run ended before this call was decided ({detail})")
                    }
                };
                let result = ToolResult {
                    call_id: planned.call.id.clone(),
                    name: planned.call.name.clone(),
                    content,
                    is_error: true,
                    ..Default::default()
                };
                (result, true)
            })
            .collect();
        for (result, tell) in results {
            if tell {
                self.push_event(now_ms, run_event::Kind::ToolFinished(result.clone()));
            }
            self.conversation.push(Item {
                kind: Some(item::Kind::ToolResult(result)),
            });
        }
    }

    fn last_assistant_text(&self) -> String {
        self.conversation
            .iter()
            .rev()
            .find_map(|i| match &i.kind {
                Some(item::Kind::Assistant(a)) if !a.text.is_empty() => Some(a.text.clone()),
                _ => None,
            })
            .unwrap_or_default()
    }

    /// Records a note event (shown by `watch` and as `last_event`).
    pub fn note(&mut self, now_ms: i64, text: &str) {
        self.push_event(now_ms, run_event::Kind::Note(text.to_owned()));
    }

    fn push_event(&mut self, now_ms: i64, kind: run_event::Kind) {
        self.events.push(RunEvent {
            seq: self.next_seq,
            turn: self.turn,
            at_ms: now_ms,
            kind: Some(kind),
        });
        self.next_seq += 1;
        if self.events.len() > MAX_EVENTS {
            let excess = self.events.len() - MAX_EVENTS;
            self.events.drain(..excess);
        }
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
    spec.approval.get_or_insert_with(Default::default);
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
    let t = if u.total_tokens > 0 {
        u.total_tokens
    } else {
        u.input_tokens.saturating_add(u.output_tokens)
    };
    total.total_tokens = total.total_tokens.saturating_add(t);
}

/// An event as carried across continue-as-new: long texts cut.
fn trim_event(e: &RunEvent) -> RunEvent {
    let cut = |t: &mut String| view::cut_text(t, CARRIED_EVENT_TEXT);
    let mut e = e.clone();
    match &mut e.kind {
        Some(run_event::Kind::Assistant(a)) => {
            cut(&mut a.text);
            cut(&mut a.reasoning);
            for c in &mut a.tool_calls {
                cut(&mut c.arguments);
            }
        }
        Some(run_event::Kind::ToolFinished(r)) => {
            cut(&mut r.content);
            r.full_output.clear();
        }
        Some(run_event::Kind::ToolStarted(c)) => cut(&mut c.arguments),
        Some(run_event::Kind::Note(n)) => cut(n),
        _ => {}
    }
    e
}

/// One line describing an event, for `status.last_event`.
pub fn describe_event(e: &RunEvent) -> String {
    match &e.kind {
        Some(run_event::Kind::Assistant(a)) if a.tool_calls.is_empty() => {
            format!("turn {}: model replied", e.turn)
        }
        Some(run_event::Kind::Assistant(a)) => format!(
            "turn {}: model called {}",
            e.turn,
            a.tool_calls
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Some(run_event::Kind::ApprovalRequested(p)) => {
            format!("approval requested for {} ({})", p.call_id, p.tool)
        }
        Some(run_event::Kind::ApprovalDecided(d)) => format!(
            "{} {} by {}",
            d.call_id,
            if d.approved { "approved" } else { "denied" },
            d.approver
        ),
        Some(run_event::Kind::ToolStarted(c)) => format!("running {} ({})", c.name, c.id),
        Some(run_event::Kind::ToolFinished(r)) => format!(
            "{} ({}) {}",
            r.name,
            r.call_id,
            if r.is_error { "failed" } else { "finished" }
        ),
        Some(run_event::Kind::Finished(r)) => format!("run ended: {}", r.reason().as_str_name()),
        Some(run_event::Kind::Note(n)) => n.clone(),
        None => String::new(),
    }
}

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
