//! The `AgentRun` workflow: drives the pure [`RunState`] machine, executing the steps it asks
//! for as activities, durable timers and waits for approval signals/updates.
//!
//! - this file: the [`AgentRun`] type, its signals, update and queries, and the run loop (one
//!   `match` over [`Step`]);
//! - [`approval`](self::approval): the wait for approval decisions;
//! - [`batch`](self::batch): a batch of tool calls (parallel, serial mutating, local reads);
//! - [`deadline`](self::deadline): a step's work against the run's deadline and cancellation;
//! - [`options`](self::options): activity and timer options, the step token;
//! - [`outputs`](self::outputs): the workspace prepared from its source, the change set and
//!   delivery when the run ends;
//! - [`mcp`](self::mcp): the run's MCP servers listed before its first step;
//! - [`subagents`](self::subagents): `spawn_agent` calls as child workflows, their changes
//!   landed;
//! - [`status`](self::status): the memo, search attributes and UI details (three generations);
//! - [`patches`]: the registry of patch markers and the histories that cover them;
//! - [`variant`]: a test-only switch that makes this build's workflow code differ (fleet tests).

mod approval;
mod batch;
mod conversation;
mod deadline;
mod github;
mod mcp;
mod options;
mod outputs;
pub mod patches;
mod status;
mod subagents;
pub mod variant;

use std::time::{Duration, UNIX_EPOCH};

use baton_proto::{
    ApprovalDecision, ApprovalOutcome, EventsPage, EventsRequest, RunResult, RunSpec, RunStatus,
    SendMessage, SendOutcome,
};
use temporalio_common::error::IncomingError;
use temporalio_macros::{workflow, workflow_methods};
use temporalio_workflow::{
    ActivityExecutionError, ContinueAsNewOptions, ContinueAsNewVersioningBehavior,
    SyncWorkflowContext, WorkflowContext, WorkflowContextView, WorkflowResult, WorkflowTermination,
};

use self::{
    deadline::{OnDeadline, within_deadline},
    options::{instructions_options, llm_options, step_token},
};
pub use self::{
    options::{
        LLM_HEARTBEAT, LLM_MAX_ATTEMPTS, LLM_START_TO_CLOSE, LOCAL_READ_BUDGET,
        MCP_LIST_MAX_ATTEMPTS, MCP_MAX_ATTEMPTS, TOOL_HEARTBEAT, TOOL_MAX_ATTEMPTS,
    },
    status::{
        SA_AWAITING_APPROVAL, SA_LABELS, SA_STATE, SA_SUBMITTER, SA_TURNS,
        SEARCH_ATTRIBUTE_DEFINITIONS, STATUS_EVERY_TURNS, STATUS_MEMO_KEY,
    },
};
use baton_core::machine::{Input, LlmFailure, RunState, Step};

use crate::activities::{FailureType, LlmActivities, ToolActivities};

/// Workflow type name.
pub const WORKFLOW_TYPE: &str = "AgentRun";
/// Name of the approval signal (as in `#[signal(name = ..)]` below).
pub const APPROVAL_SIGNAL: &str = "approval";
/// Name of the approval update (as in `#[update(name = ..)]` below).
pub const APPROVE_UPDATE: &str = "approve";
/// Default task queue.
pub const DEFAULT_TASK_QUEUE: &str = "baton";

/// One agent run.
#[workflow]
pub struct AgentRun {
    run: RunState,
    /// Search attribute values last sent; not part of the run's state: rebuilt identically on
    /// replay.
    indexed: Option<status::Indexed>,
    /// What the last status refresh showed and at which turn; rebuilt identically on replay.
    published: Option<status::Published>,
}

#[workflow_methods]
impl AgentRun {
    #[init]
    fn new(ctx: &WorkflowContextView, spec: RunSpec) -> Self {
        let now = now_ms(ctx.start_time());
        let id = ctx.workflow_id().to_owned();
        let run = match spec.continued.clone() {
            Some(continued) => {
                let spec = RunSpec {
                    continued: None,
                    ..spec
                };
                RunState::resume(&id, spec.clone(), &continued)
                    .unwrap_or_else(|detail| RunState::invalid(&id, spec, now, detail))
            }
            None if spec.fork.is_some() => RunState::fork(&id, spec.clone(), now)
                .unwrap_or_else(|detail| RunState::invalid(&id, spec, now, detail)),
            None => RunState::new(&id, spec.clone(), now)
                .unwrap_or_else(|detail| RunState::invalid(&id, spec, now, detail)),
        };
        Self {
            run,
            indexed: None,
            published: None,
        }
    }

    /// Runs the agent loop until it finishes, fails or is cancelled.
    #[run(name = "AgentRun")]
    pub async fn run(ctx: &mut WorkflowContext<Self>) -> WorkflowResult<RunResult> {
        if variant::extra_step() {
            let token = step_token(ctx);
            let _ = ctx
                .timer(options::timer_options(Duration::from_millis(1), &token))
                .await;
        }
        // Only runs started for a GitHub issue or pull request (no command otherwise).
        github::report_queued(ctx).await;
        // Only runs with a workspace source have one (no command otherwise).
        outputs::prepare(ctx).await;
        // Only runs with an environment that has setup commands (no command otherwise).
        outputs::setup(ctx).await;
        // A continued run read the workspace's instructions in its first segment.
        if ctx.state(|s| s.run.segment == 0 && s.run.result().is_none()) {
            let token = step_token(ctx);
            let request = ctx.state(|s| s.run.instructions_request());
            let outcome = ctx
                .execute_activity(
                    ToolActivities::read_instructions,
                    request,
                    instructions_options(&token),
                )
                .await;
            let now = now_ms(ctx.workflow_time());
            apply(
                ctx,
                Input::Instructions {
                    instructions: outcome.ok(),
                    now_ms: now,
                },
            );
        }
        // Runs without MCP servers (every run recorded before them) schedule nothing here.
        mcp::discover(ctx).await;
        loop {
            let (length, suggested) = (ctx.history_length(), ctx.continue_as_new_suggested());
            if ctx.state(|s| s.run.wants_continue_as_new(length, suggested)) {
                return continue_as_new(ctx, length, suggested);
            }
            let now = now_ms(ctx.workflow_time());
            let step = ctx.state_mut(|s| s.run.next_step(now));
            status::before_step(ctx, &step);
            github::report(ctx, &step).await;
            match step {
                Step::Finish(result) => {
                    if result.status() == baton_proto::RunState::Cancelled {
                        return Err(WorkflowTermination::cancelled_with_details(result));
                    }
                    return Ok(result);
                }
                Step::CallLlm(request) => {
                    let token = step_token(ctx);
                    let queue = model_queue_of(ctx, request.model.as_ref());
                    let call = ctx.execute_activity(
                        LlmActivities::llm_generate,
                        request,
                        llm_options("llm_generate", queue, &token),
                    );
                    let Some(outcome) = within_deadline(ctx, &token, call, OnDeadline::Drain).await
                    else {
                        continue;
                    };
                    let now = now_ms(ctx.workflow_time());
                    match outcome {
                        Ok(response) => apply(
                            ctx,
                            Input::LlmResponse {
                                response,
                                now_ms: now,
                            },
                        ),
                        Err(e) => {
                            let detail = failure_message(&e);
                            let kind = match failure_type(&e) {
                                Some(FailureType::ContextOverflow) => LlmFailure::ContextOverflow,
                                Some(FailureType::StoreUnavailable) => LlmFailure::Infrastructure,
                                _ => LlmFailure::Fatal,
                            };
                            apply(
                                ctx,
                                Input::LlmFailure {
                                    failure: kind,
                                    detail,
                                    now_ms: now,
                                },
                            );
                        }
                    }
                }
                Step::Compact(request) => {
                    let token = step_token(ctx);
                    let queue = model_queue_of(ctx, request.model.as_ref());
                    let call = ctx.execute_activity(
                        LlmActivities::compact_context,
                        request,
                        llm_options("compact_context", queue, &token),
                    );
                    let Some(outcome) = within_deadline(ctx, &token, call, OnDeadline::Drain).await
                    else {
                        continue;
                    };
                    let now = now_ms(ctx.workflow_time());
                    match outcome {
                        Ok(response) => apply(
                            ctx,
                            Input::Compacted {
                                response,
                                now_ms: now,
                            },
                        ),
                        Err(e) => {
                            let detail = failure_message(&e);
                            apply(
                                ctx,
                                Input::CompactionFailed {
                                    detail,
                                    now_ms: now,
                                },
                            );
                        }
                    }
                }
                Step::Verify(request) => outputs::verify(ctx, request).await,
                Step::CollectChanges(request) => outputs::collect(ctx, request).await,
                Step::Deliver(request) => outputs::deliver(ctx, request).await,
                Step::AwaitApproval { timeout_seconds } => {
                    approval::await_approval(ctx, timeout_seconds).await;
                }
                Step::AwaitMessage { timeout_seconds } => {
                    conversation::await_message(ctx, timeout_seconds).await;
                }
                Step::RunTools { requests, plan } => {
                    let token = step_token(ctx);
                    let work = batch::run_tools(ctx, requests, plan, &token);
                    let Some(results) = within_deadline(ctx, &token, work, OnDeadline::Drain).await
                    else {
                        continue;
                    };
                    let now = now_ms(ctx.workflow_time());
                    apply(
                        ctx,
                        Input::ToolResults {
                            results,
                            now_ms: now,
                        },
                    );
                }
            }
        }
    }

    /// Fire-and-forget approval decision (e.g. from `temporal workflow signal`), an
    /// [`ApprovalDecision`] as JSON. Malformed decisions, and decisions for unknown or
    /// already-decided calls, are recorded as notes and otherwise ignored: a bad signal never
    /// wedges the run.
    #[signal(name = "approval")]
    pub fn approval(&mut self, ctx: &mut SyncWorkflowContext<Self>, decision: serde_json::Value) {
        let now = now_ms(ctx.workflow_time());
        match parse_decision(decision) {
            Ok(d) => {
                self.run.apply(Input::Decision {
                    decision: d,
                    now_ms: now,
                });
            }
            Err(e) => self.run.note(now, &format!("approval signal ignored: {e}")),
        }
    }

    /// Guidance from a user (a JSON string, or [`SendMessage`] as JSON: `{"text": "...",
    /// "id": "..."}`), added to the conversation before the next LLM call; a conversation
    /// between tasks takes it as its next task. A message whose id was taken before changes
    /// nothing.
    #[signal(name = "message")]
    pub fn message(&mut self, ctx: &mut SyncWorkflowContext<Self>, message: serde_json::Value) {
        let now = now_ms(ctx.workflow_time());
        match parse_message(message) {
            Ok(m) => {
                self.run.apply(Input::Message {
                    text: m.text,
                    id: m.id,
                    now_ms: now,
                });
            }
            Err(e) => self.run.note(now, &format!("message signal ignored: {e}")),
        }
    }

    #[update_validator(send)]
    fn validate_send(
        &self,
        _ctx: &WorkflowContextView,
        message: &serde_json::Value,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let message = parse_message(message.clone())?;
        if self.run.is_duplicate_message(&message.id) || self.run.takes_messages() {
            return Ok(());
        }
        Err(format!(
            "run {} has ended and takes no more messages; start a new run (baton send --start              with a new --id, or baton submit)",
            self.run.run_id
        )
        .into())
    }

    /// A message ([`SendMessage`] as JSON, or a JSON string), as signal `message` but
    /// validated: refused when the run has ended; says whether it was taken or a duplicate
    /// (the same id again), and the task it belongs to. With update-with-start, the message
    /// that starts a conversation is its task (`RunSpec.task_message_id`): a duplicate.
    #[update(name = "send")]
    pub fn send(
        &mut self,
        ctx: &mut SyncWorkflowContext<Self>,
        message: serde_json::Value,
    ) -> SendOutcome {
        let now = now_ms(ctx.workflow_time());
        // The validator ran against this same state.
        match parse_message(message) {
            Ok(m) => self
                .run
                .apply(Input::Message {
                    text: m.text,
                    id: m.id,
                    now_ms: now,
                })
                .sent(),
            Err(_) => SendOutcome::default(),
        }
    }

    #[update_validator(approve)]
    fn validate_approve(
        &self,
        _ctx: &WorkflowContextView,
        decision: &serde_json::Value,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let decision = parse_decision(decision.clone())?;
        self.run
            .validate_decision(&decision)
            .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
    }

    /// Validated approval decision (an [`ApprovalDecision`] as JSON): rejects malformed
    /// decisions and unknown or already-decided calls, returns what it applied.
    #[update(name = "approve")]
    pub fn approve(
        &mut self,
        ctx: &mut SyncWorkflowContext<Self>,
        decision: serde_json::Value,
    ) -> ApprovalOutcome {
        let now = now_ms(ctx.workflow_time());
        // The validator ran against this same state, so neither step can fail.
        parse_decision(decision)
            .ok()
            .and_then(|decision| {
                self.run
                    .apply(Input::Decision {
                        decision,
                        now_ms: now,
                    })
                    .decided()
                    .ok()
            })
            .unwrap_or_default()
    }

    /// Whether the run took message `id` (its task's or a later one): asked of a run that has
    /// ended, before a message with that id would start it again.
    #[query(name = "message_taken")]
    pub fn message_taken(&self, _ctx: &WorkflowContextView, id: String) -> bool {
        self.run.is_duplicate_message(&id)
    }

    /// State, turn, pending calls, usage and the last event.
    #[query(name = "status")]
    pub fn status(&self, _ctx: &WorkflowContextView) -> RunStatus {
        self.run.status()
    }

    /// Events with `seq >= since`, for `baton watch`.
    #[query(name = "events")]
    pub fn events(&self, _ctx: &WorkflowContextView, request: EventsRequest) -> EventsPage {
        self.run.events_since(request.since)
    }

    /// The whole conversation so far. After a continue-as-new, older items are stubs: read
    /// them from the blob store under the head of query `stored`.
    #[query(name = "transcript")]
    pub fn transcript(&self, _ctx: &WorkflowContextView) -> Vec<baton_proto::Item> {
        self.run.conversation.clone()
    }

    /// Where the conversation is in the blob store: its last stored segment and how many
    /// items that holds (`added` is empty).
    #[query(name = "stored")]
    pub fn stored(&self, _ctx: &WorkflowContextView) -> baton_proto::ConversationRef {
        let (head, stored_items) = self
            .run
            .stored
            .clone()
            .map(|(h, n)| (h, n as u32))
            .unwrap_or_default();
        baton_proto::ConversationRef {
            head,
            stored_items,
            added: Vec::new(),
        }
    }
}

/// Ends this segment of the run and continues it as new with its state carried by reference
/// (same workflow id: `status`, `watch`, `result` and approvals go on working).
/// The task queue of this run's model calls to `model`'s provider (`activities::model_queue`).
fn model_queue_of(
    ctx: &WorkflowContext<AgentRun>,
    model: Option<&baton_proto::ModelConfig>,
) -> Option<String> {
    let provider = model.map_or("", |m| m.provider.as_str());
    crate::activities::model_queue(ctx.task_queue(), provider)
}

fn continue_as_new(
    ctx: &mut WorkflowContext<AgentRun>,
    length: u32,
    suggested: bool,
) -> WorkflowResult<RunResult> {
    let now = now_ms(ctx.workflow_time());
    let checkpoint = ctx.state_mut(|s| {
        s.run.note(
            now,
            &format!(
                "history budget: continuing as new after {length} events{} (segment {})",
                if suggested {
                    ", as the server suggested"
                } else {
                    ""
                },
                s.run.segment + 1
            ),
        );
        s.run.checkpoint()
    });
    let continued = match checkpoint {
        Ok(c) => c,
        // Cannot happen with serde-serializable state.
        Err(e) => {
            return Err(WorkflowTermination::failed_application(
                temporalio_common::error::ApplicationFailure::new(format!(
                    "cannot carry the run's state into a new segment: {e}"
                )),
            ));
        }
    };
    status::publish_status(ctx);
    let spec = ctx.state(|s| RunSpec {
        continued: Some(continued),
        ..s.run.spec.clone()
    });
    // Pinned runs move to the deployment's current version here, between segments, never
    // mid-turn (a no-op for unversioned workers).
    let options = ContinueAsNewOptions::builder()
        .initial_versioning_behavior(ContinueAsNewVersioningBehavior::AutoUpgrade)
        .build();
    match ctx.continue_as_new(spec, options) {
        Err(termination) => Err(termination),
        Ok(never) => match never {},
    }
}

/// An approval decision from JSON, with an error that shows the expected shape.
fn parse_decision(value: serde_json::Value) -> Result<ApprovalDecision, String> {
    let decision: ApprovalDecision = serde_json::from_value(value).map_err(|e| {
        format!(
            "malformed decision ({e}); expected {{\"call_id\": \"<id>\" or \"*\", \"approved\": true|false, \"approver\": \"<who>\", \"reason\": \"<text>\"}}"
        )
    })?;
    if decision.call_id.is_empty() {
        return Err("the decision has no call_id; name a pending call or \"*\"".to_owned());
    }
    Ok(decision)
}

/// A message from JSON: a string, or `{"text": "...", "id": "..."}` (text not blank).
fn parse_message(value: serde_json::Value) -> Result<SendMessage, String> {
    let message = match value {
        serde_json::Value::String(text) => SendMessage {
            text,
            id: String::new(),
        },
        other => serde_json::from_value(other).map_err(|e| {
            format!("malformed message ({e}); send a JSON string or {{\"text\": \"...\", \"id\": \"...\"}}")
        })?,
    };
    if message.text.trim().is_empty() {
        return Err("the message is empty; send a JSON string or {\"text\": \"...\"}".to_owned());
    }
    Ok(message)
}

/// The message a person (or the model) should see for a failed activity: the underlying
/// failure, not the wrapper's "activity task failed".
pub fn failure_message(e: &ActivityExecutionError) -> String {
    innermost_message(e.to_string(), e.cause())
}

/// The message of the last cause in a failure's chain (`top` when it has none).
fn innermost_message(top: String, mut cause: Option<&IncomingError>) -> String {
    let mut message = top;
    while let Some(c) = cause {
        message = c.to_string();
        cause = c.cause();
    }
    message
}

/// The application failure type (`ApplicationFailure::type_name`) behind an activity error,
/// if it is one baton's activities raise.
fn failure_type(e: &ActivityExecutionError) -> Option<FailureType> {
    let mut cause = e.cause();
    while let Some(c) = cause {
        if let IncomingError::Application(app) = c
            && let Some(t) = app.type_name()
        {
            return FailureType::parse(t);
        }
        cause = c.cause();
    }
    None
}

/// Reports `input` to the run's machine (what it answers is for signals and updates only).
fn apply(ctx: &WorkflowContext<AgentRun>, input: Input) {
    ctx.state_mut(|s| {
        s.run.apply(input);
    });
}

fn now_ms(t: Option<std::time::SystemTime>) -> i64 {
    t.and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}
