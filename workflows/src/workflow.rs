//! The `AgentRun` workflow: drives the pure [`RunState`] machine, executing the steps it asks
//! for as activities, durable timers and waits for approval signals/updates.

use std::time::{Duration, UNIX_EPOCH};

use baton_proto::{
    ApprovalDecision, ApprovalOutcome, EventsPage, EventsRequest, InstructionsRequest, RunResult,
    RunSpec, RunStatus, ToolRequest, ToolResult,
};
use futures::FutureExt;
use temporalio_common::{RetryPolicy, error::IncomingError, search_attributes::SearchAttributeKey};
use temporalio_macros::{workflow, workflow_methods};
use temporalio_workflow::{
    ActivityCancellationType, ActivityExecutionError, ActivityOptions, ContinueAsNewOptions,
    LocalActivityOptions, MemoValue, SyncWorkflowContext, TimerOptions, TimerResult,
    WaitConditionOptions, WorkflowCancellationToken, WorkflowContext, WorkflowContextView,
    WorkflowResult, WorkflowTermination,
};

use crate::{
    activities::{
        BAD_INPUT, CONTEXT_OVERFLOW, LlmActivities, PROVIDER_FATAL, STORE_UNAVAILABLE,
        ToolActivities,
    },
    machine::{LlmFailure, RunState, Step},
};

/// Patch marker: the run reads its workspace's instructions (AGENTS.md) before the first
/// turn. Histories recorded before it replay without that activity.
pub const PATCH_READ_INSTRUCTIONS: &str = "read-instructions-v1";

/// Patch marker: the run keeps its search attributes (`BatonState`, ...) current. Histories
/// recorded before it replay without those commands.
pub const PATCH_SEARCH_ATTRIBUTES: &str = "search-attributes-v1";

/// Patch marker: the run continues as new when its segment's history passes its budget.
/// Histories recorded before it never do.
pub const PATCH_CONTINUE_AS_NEW: &str = "continue-as-new-v1";

/// Patch marker: a batch with a mutating call runs its calls one at a time, each starting
/// from the workspace snapshot the previous one left (workspace hand-off between workers).
pub const PATCH_SERIAL_MUTATING: &str = "serial-mutating-tools-v1";

/// Patch marker: a step that runs only read-only tool calls does not update the status memo
/// and search attributes (it takes milliseconds; the status keeps showing the turn that asked
/// for it, and the live `status` query still shows the step). Histories recorded before it
/// publish every step.
pub const PATCH_QUIET_READ_STEPS: &str = "quiet-read-steps-v1";

/// Patch marker: the status memo and search attributes are refreshed when the run's coarse
/// state changes (running, waiting for a human, ended, or the pending calls change) and every
/// [`STATUS_EVERY_TURNS`] turns, not on every step: each refresh is a history event and a
/// visibility write, the largest per-turn cost baton added to the server (BENCHMARKS.md). The
/// live `status` query stays exact. Histories recorded before it follow the older rules.
pub const PATCH_STATUS_ON_CHANGE: &str = "status-on-change-v1";
/// Shell rules and remembered approvals match strictly (`policy::Matching::Strict`): an allow
/// never covers a compound command. Checked once per execution, at its start.
pub const PATCH_STRICT_SHELL_RULES: &str = "strict-shell-rules-v1";
/// Patch marker: a decision that leaves other calls of the batch pending refreshes the status
/// memo (and search attributes) at once, not when the whole batch is decided.
pub const PATCH_MEMO_ON_DECISION: &str = "memo-on-decision-v1";
/// Turns between two refreshes of the status memo while the coarse state does not change.
pub const STATUS_EVERY_TURNS: u32 = 10;

/// Search attribute: the run's state (`THINKING`, `AWAITING_APPROVAL`, ...). Keyword.
pub const SA_STATE: SearchAttributeKey<String> = SearchAttributeKey::keyword("BatonState");
/// Search attribute: a call waits for a human. Bool.
pub const SA_AWAITING_APPROVAL: SearchAttributeKey<bool> =
    SearchAttributeKey::bool("BatonAwaitingApproval");
/// Search attribute: LLM calls so far. Int.
pub const SA_TURNS: SearchAttributeKey<i64> = SearchAttributeKey::int("BatonTurns");
/// Search attribute: who submitted the run (label `submitter`). Keyword.
pub const SA_SUBMITTER: SearchAttributeKey<String> = SearchAttributeKey::keyword("BatonSubmitter");
/// Search attribute: the run's labels as `key=value`. KeywordList.
pub const SA_LABELS: SearchAttributeKey<Vec<String>> =
    SearchAttributeKey::keyword_list("BatonLabels");
/// `--search-attribute` arguments of `temporal server start-dev` registering them.
pub const SEARCH_ATTRIBUTE_DEFINITIONS: [(&str, &str); 5] = [
    ("BatonState", "Keyword"),
    ("BatonAwaitingApproval", "Bool"),
    ("BatonTurns", "Int"),
    ("BatonSubmitter", "Keyword"),
    ("BatonLabels", "KeywordList"),
];

/// Workflow type name.
pub const WORKFLOW_TYPE: &str = "AgentRun";
/// Name of the approval signal (as in `#[signal(name = ..)]` below).
pub const APPROVAL_SIGNAL: &str = "approval";
/// Name of the approval update (as in `#[update(name = ..)]` below).
pub const APPROVE_UPDATE: &str = "approve";
/// Default task queue.
pub const DEFAULT_TASK_QUEUE: &str = "baton";
/// Memo key holding the latest [`RunStatus`], so `baton status` can answer without a worker.
pub const STATUS_MEMO_KEY: &str = "status";

/// LLM activity: start-to-close timeout.
pub const LLM_START_TO_CLOSE: Duration = Duration::from_secs(5 * 60);
/// LLM activity: heartbeat timeout (the activity heartbeats while it waits on the provider).
pub const LLM_HEARTBEAT: Duration = Duration::from_secs(30);
/// LLM activity: attempts before the run ends with `provider_error`.
pub const LLM_MAX_ATTEMPTS: u32 = 8;
/// Tool activity: heartbeat timeout, so a dead worker's call moves on within seconds.
pub const TOOL_HEARTBEAT: Duration = Duration::from_secs(10);
/// Tool activity: attempts (infrastructure failures only; ordinary failures are results).
pub const TOOL_MAX_ATTEMPTS: u32 = 5;

/// One agent run.
#[workflow]
pub struct AgentRun {
    run: RunState,
    /// Search attribute values last sent (state, awaiting approval, turns); not part of the
    /// run's state: rebuilt identically on replay.
    indexed: Option<(String, bool, u32)>,
    /// What the last status refresh showed (coarse state, pending call ids) and at which turn
    /// (patch `status-on-change-v1`); rebuilt identically on replay.
    published: Option<(String, Vec<String>, u32)>,
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
        if ctx.patched(PATCH_STRICT_SHELL_RULES) {
            ctx.state_mut(|s| s.run.strict_rules = true);
        }
        // Runs recorded before the prompt builder existed did not read the workspace.
        // A continued run read them in its first segment.
        if ctx.state(|s| s.run.segment == 0)
            && ctx.patched(PATCH_READ_INSTRUCTIONS)
            && ctx.state(|s| s.run.result().is_none())
        {
            let token = step_token(ctx);
            let outcome = ctx
                .execute_activity(
                    ToolActivities::read_instructions,
                    InstructionsRequest {},
                    instructions_options(&token),
                )
                .await;
            let now = now_ms(ctx.workflow_time());
            ctx.state_mut(|s| s.run.on_instructions(outcome.ok(), now));
        }
        loop {
            let (length, suggested) = (ctx.history_length(), ctx.continue_as_new_suggested());
            if ctx.state(|s| s.run.wants_continue_as_new(length, suggested))
                && ctx.patched(PATCH_CONTINUE_AS_NEW)
            {
                return continue_as_new(ctx, length, suggested);
            }
            let now = now_ms(ctx.workflow_time());
            let step = ctx.state_mut(|s| s.run.next_step(now));
            if ctx.patched(PATCH_STATUS_ON_CHANGE) {
                let status = set_details(ctx);
                let key = status_key(&status);
                let due = ctx.state(|s| match &s.published {
                    None => true,
                    Some((state, pending, turn)) => {
                        (state, pending) != (&key.0, &key.1)
                            || status.turn >= turn + STATUS_EVERY_TURNS
                            || matches!(step, Step::Finish(_))
                    }
                });
                if due {
                    publish_status(ctx);
                    ctx.state_mut(|s| s.published = Some((key.0, key.1, status.turn)));
                }
            } else {
                let quiet = matches!(&step, Step::RunTools { requests, .. }
                    if requests.iter().all(|r| !r.mutating))
                    && ctx.patched(PATCH_QUIET_READ_STEPS);
                if quiet {
                    set_details(ctx);
                } else {
                    publish_status(ctx);
                }
            }
            match step {
                Step::Finish(result) => {
                    if result.status() == baton_proto::RunState::Cancelled {
                        return Err(WorkflowTermination::cancelled_with_details(result));
                    }
                    return Ok(result);
                }
                Step::CallLlm(request) => {
                    let token = step_token(ctx);
                    let call = ctx.execute_activity(
                        LlmActivities::llm_generate,
                        request,
                        llm_options("llm_generate", &token),
                    );
                    let (outcome, late) = until_deadline(ctx, &token, call, true).await;
                    let Some(outcome) = settle(ctx, late, outcome) else {
                        continue;
                    };
                    let now = now_ms(ctx.workflow_time());
                    match outcome {
                        Ok(response) => ctx.state_mut(|s| s.run.on_llm_response(response, now)),
                        Err(e) => {
                            let detail = failure_message(&e);
                            let kind = match failure_type(&e) {
                                Some(CONTEXT_OVERFLOW) => LlmFailure::ContextOverflow,
                                Some(STORE_UNAVAILABLE) => LlmFailure::Infrastructure,
                                _ => LlmFailure::Fatal,
                            };
                            ctx.state_mut(|s| s.run.on_llm_failure(kind, detail, now));
                        }
                    }
                }
                Step::Compact(request) => {
                    let token = step_token(ctx);
                    let call = ctx.execute_activity(
                        LlmActivities::compact_context,
                        request,
                        llm_options("compact_context", &token),
                    );
                    let (outcome, late) = until_deadline(ctx, &token, call, true).await;
                    let Some(outcome) = settle(ctx, late, outcome) else {
                        continue;
                    };
                    let now = now_ms(ctx.workflow_time());
                    match outcome {
                        Ok(response) => ctx.state_mut(|s| s.run.on_compacted(response, now)),
                        Err(e) => {
                            let detail = failure_message(&e);
                            ctx.state_mut(|s| s.run.on_compaction_failed(&detail, now));
                        }
                    }
                }
                Step::AwaitApproval { timeout_seconds } => {
                    let token = step_token(ctx);
                    // Until every call is decided; a decision that leaves others pending
                    // refreshes the status memo (`baton pending`, and `status` with no worker,
                    // read it), behind a patch: it adds commands to histories.
                    let settled = || async {
                        loop {
                            let seen = ctx.state(|s| s.run.pending_count());
                            let _ = ctx
                                .wait_condition_with_options(
                                    |s: &Self| {
                                        s.run.approvals_settled() || s.run.pending_count() != seen
                                    },
                                    WaitConditionOptions::builder()
                                        .cancellation_token(token.clone())
                                        .build(),
                                )
                                .await;
                            if token.is_cancelled() || ctx.state(|s| s.run.approvals_settled()) {
                                return;
                            }
                            if ctx.patched(PATCH_MEMO_ON_DECISION) {
                                publish_status(ctx);
                                let status = ctx.state(|s| s.run.status());
                                let key = status_key(&status);
                                ctx.state_mut(|s| {
                                    s.published = Some((key.0, key.1, status.turn));
                                });
                            } else {
                                // Histories from before: wait for the whole batch, as they did.
                                let _ = ctx
                                    .wait_condition_with_options(
                                        |s: &Self| s.run.approvals_settled(),
                                        WaitConditionOptions::builder()
                                            .cancellation_token(token.clone())
                                            .build(),
                                    )
                                    .await;
                                return;
                            }
                        }
                    };
                    let wait = async {
                        match timeout_seconds {
                            None => {
                                let _ = settled().await;
                                false
                            }
                            Some(secs) => {
                                let mut timer = ctx.timer(timer_options(
                                    Duration::from_secs(u64::from(secs)),
                                    &token,
                                ));
                                let mut settled = std::pin::pin!(settled().fuse());
                                temporalio_workflow::select! {
                                    _ = settled => false,
                                    fired = timer => matches!(fired, TimerResult::Fired),
                                }
                            }
                        }
                    };
                    let (timed_out, late) = until_deadline(ctx, &token, wait, false).await;
                    let Some(timed_out) = settle(ctx, late, timed_out) else {
                        continue;
                    };
                    if timed_out {
                        let now = now_ms(ctx.workflow_time());
                        ctx.state_mut(|s| s.run.on_approval_timeout(now));
                    }
                }
                Step::RunTools {
                    requests,
                    max_parallel,
                } => {
                    let token = step_token(ctx);
                    let work = run_tools(ctx, requests, max_parallel, &token);
                    let (results, late) = until_deadline(ctx, &token, work, true).await;
                    let Some(results) = settle(ctx, late, results) else {
                        continue;
                    };
                    let now = now_ms(ctx.workflow_time());
                    ctx.state_mut(|s| s.run.on_tool_results(results, now));
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
                let _ = self.run.on_decision(d, now);
            }
            Err(e) => self.run.note(now, &format!("approval signal ignored: {e}")),
        }
    }

    /// Guidance from a user (a JSON string, or `{"text": "..."}`), added to the conversation
    /// before the next LLM call.
    #[signal(name = "message")]
    pub fn message(&mut self, ctx: &mut SyncWorkflowContext<Self>, text: serde_json::Value) {
        let now = now_ms(ctx.workflow_time());
        let text = match &text {
            serde_json::Value::String(s) => Some(s.clone()),
            other => other
                .get("text")
                .and_then(|t| t.as_str())
                .map(str::to_owned),
        };
        match text {
            Some(t) if !t.trim().is_empty() => self.run.on_user_message(t, now),
            _ => self.run.note(
                now,
                "message signal ignored: send a JSON string or {\"text\": \"...\"}",
            ),
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
            .and_then(|d| self.run.on_decision(d, now).ok())
            .unwrap_or_default()
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
    publish_status(ctx);
    let spec = ctx.state(|s| RunSpec {
        continued: Some(continued),
        ..s.run.spec.clone()
    });
    match ctx.continue_as_new(spec, ContinueAsNewOptions::default()) {
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

/// Runs approved calls as activities, at most `max_parallel` at once, results in call order.
/// A call whose activity fails for good (after retries) becomes an error observation.
async fn run_tools(
    ctx: &WorkflowContext<AgentRun>,
    requests: Vec<ToolRequest>,
    max_parallel: u32,
    token: &WorkflowCancellationToken,
) -> Vec<ToolResult> {
    let mut results = Vec::with_capacity(requests.len());
    // Calls that change the workspace run one at a time, each from the snapshot the previous
    // one left: they may run on different workers, whose copies cannot be merged.
    let serial = requests.len() > 1
        && requests.iter().any(|r| r.mutating)
        && ctx.patched(PATCH_SERIAL_MUTATING);
    let chunk = if serial {
        1
    } else {
        max_parallel.max(1) as usize
    };
    let mut snapshot = requests
        .first()
        .map(|r| r.snapshot.clone())
        .unwrap_or_default();
    // Read-only calls as local activities (the run asked for it; they change nothing, so
    // running one again after a worker failure is harmless).
    let local = ctx.state(|s| s.run.spec.local_read_tools) && requests.iter().all(|r| !r.mutating);
    for group in requests.chunks(chunk) {
        let ids: Vec<String> = group
            .iter()
            .filter_map(|r| r.call.as_ref().map(|c| c.id.clone()))
            .collect();
        let now = now_ms(ctx.workflow_time());
        ctx.state_mut(|s| s.run.on_tools_started(&ids, now));
        let with_snapshot = |r: &ToolRequest| ToolRequest {
            snapshot: snapshot.clone(),
            ..r.clone()
        };
        let outcomes = if local {
            let futures: Vec<_> = group
                .iter()
                .map(|r| {
                    let opts = local_tool_options(r, token);
                    ctx.execute_local_activity(ToolActivities::run_tool, with_snapshot(r), opts)
                })
                .collect();
            temporalio_workflow::join_all(futures).await
        } else {
            let futures: Vec<_> = group
                .iter()
                .map(|r| {
                    let opts = tool_options(r, token);
                    ctx.execute_activity(ToolActivities::run_tool, with_snapshot(r), opts)
                })
                .collect();
            temporalio_workflow::join_all(futures).await
        };
        // Once the step is cancelled, a failed call was (most likely) stopped by it: the
        // machine says so at the run's end, rather than "could not be run".
        let stopped = token.is_cancelled();
        let finished_before = results.len();
        for (request, outcome) in group.iter().zip(outcomes) {
            let call = request.call.clone().unwrap_or_default();
            results.push(match outcome {
                Ok(result) => {
                    if !result.snapshot.is_empty() {
                        snapshot = result.snapshot.clone();
                    }
                    result
                }
                Err(_) if stopped => continue,
                Err(e) => ToolResult {
                    call_id: call.id,
                    name: call.name,
                    content: format!("The tool could not be run: {}", failure_message(&e)),
                    is_error: true,
                    ..Default::default()
                },
            });
        }
        let now = now_ms(ctx.workflow_time());
        ctx.state_mut(|s| s.run.on_tools_finished(&results[finished_before..], now));
        if token.is_cancelled() {
            break;
        }
    }
    results
}

/// Awaits `work`, racing the run's deadline (a durable timer) when the deadline interrupts
/// work in flight. When it passes first, `token` is cancelled (stopping the activities that
/// carry it) and, if `drain`, the work is awaited to its cancelled end. Returns the work's
/// output (`None` if it was abandoned) and whether the deadline passed.
async fn until_deadline<T>(
    ctx: &WorkflowContext<AgentRun>,
    token: &WorkflowCancellationToken,
    work: impl Future<Output = T>,
    drain: bool,
) -> (Option<T>, bool) {
    let deadline = ctx.state(|s| {
        s.run
            .deadline_interrupts()
            .then(|| s.run.deadline_ms())
            .flatten()
    });
    let Some(deadline) = deadline else {
        return (Some(work.await), false);
    };
    let left = (deadline - now_ms(ctx.workflow_time())).max(0) as u64;
    let mut work = std::pin::pin!(work.fuse());
    let mut timer = ctx.timer(timer_options(Duration::from_millis(left.max(1)), token));
    temporalio_workflow::select! {
        out = work => (Some(out), false),
        fired = timer => {
            let late = matches!(fired, TimerResult::Fired);
            token.cancel();
            if drain {
                (Some((&mut work).await), late)
            } else {
                (None, late)
            }
        }
    }
}

/// After a step's work: applies workflow cancellation or a passed deadline to the machine.
/// Returns the work's output when the step should be reported normally.
fn settle<T>(ctx: &mut WorkflowContext<AgentRun>, late: bool, output: Option<T>) -> Option<T> {
    let now = now_ms(ctx.workflow_time());
    if let Some(reason) = cancel_reason(ctx) {
        ctx.state_mut(|s| s.run.on_cancelled(reason, now));
        return None;
    }
    if late {
        ctx.state_mut(|s| s.run.on_deadline_passed(now));
        return None;
    }
    output
}

fn llm_options(summary: &str, token: &WorkflowCancellationToken) -> ActivityOptions {
    ActivityOptions::with_start_to_close_timeout(LLM_START_TO_CLOSE)
        .heartbeat_timeout(LLM_HEARTBEAT)
        .retry_policy(
            RetryPolicy::builder()
                .initial_interval(Duration::from_secs(1))
                .backoff_coefficient(2.0)
                .maximum_interval(Duration::from_secs(60))
                .maximum_attempts(LLM_MAX_ATTEMPTS)
                .non_retryable_error_types([PROVIDER_FATAL, CONTEXT_OVERFLOW, BAD_INPUT])
                .build(),
        )
        .cancellation_type(ActivityCancellationType::TryCancel)
        .cancellation_token(token.clone())
        .summary(summary.to_owned())
        .build()
}

/// What a tool activity is called (its id), how long it may take, and its one-line summary.
fn tool_identity(request: &ToolRequest) -> (String, Duration, String) {
    let call = request.call.clone().unwrap_or_default();
    let timeout = Duration::from_secs(u64::from(request.timeout_seconds.max(1)) + 60);
    let mut summary = format!("{}: {}", call.name, call.arguments);
    crate::view::cut_text(&mut summary, 200);
    // A confirmed re-run is a new activity of the same call.
    let activity_id = if request.retry_confirmed {
        format!("{}-rerun", call.id)
    } else {
        call.id
    };
    (activity_id, timeout, summary)
}

fn tool_retry_policy() -> RetryPolicy {
    RetryPolicy::builder()
        // A retry is a worker failure being handed to another worker: no reason to wait long
        // before the first one.
        .initial_interval(Duration::from_millis(200))
        .backoff_coefficient(2.0)
        .maximum_interval(Duration::from_secs(30))
        .maximum_attempts(TOOL_MAX_ATTEMPTS)
        .non_retryable_error_types([BAD_INPUT])
        .build()
}

fn local_tool_options(
    request: &ToolRequest,
    token: &WorkflowCancellationToken,
) -> LocalActivityOptions {
    let (activity_id, timeout, summary) = tool_identity(request);
    LocalActivityOptions::builder()
        .activity_id(activity_id)
        .start_to_close_timeout(timeout)
        .retry_policy(tool_retry_policy())
        .cancel_type(ActivityCancellationType::WaitCancellationCompleted)
        .cancellation_token(token.clone())
        .summary(summary)
        .build()
}

fn tool_options(request: &ToolRequest, token: &WorkflowCancellationToken) -> ActivityOptions {
    let (activity_id, timeout, summary) = tool_identity(request);
    ActivityOptions::with_start_to_close_timeout(timeout)
        .activity_id(activity_id)
        .heartbeat_timeout(TOOL_HEARTBEAT)
        .retry_policy(tool_retry_policy())
        .cancellation_type(ActivityCancellationType::WaitCancellationCompleted)
        .cancellation_token(token.clone())
        .summary(summary)
        .build()
}

/// The cancellation token of one step's timers, waits and activities: a child of the run's,
/// owned by the step.
///
/// Everything the SDK starts with the run's own token registers a callback in that token,
/// which the run's context owns, and the callback holds the context: a reference cycle that
/// only the operation's completion breaks. An operation dropped before it completes (the
/// timer that lost a `select!`, or anything in flight when the run is evicted from the
/// worker's cache) would then keep the whole context alive for the life of the worker. A
/// child token is owned by the step's future and freed with it (the run's token holds it
/// weakly), and the run's cancellation still reaches it.
fn step_token(ctx: &WorkflowContext<AgentRun>) -> WorkflowCancellationToken {
    ctx.cancellation_token().child_token()
}

fn timer_options(duration: Duration, token: &WorkflowCancellationToken) -> TimerOptions {
    TimerOptions::builder(duration)
        .cancellation_token(token.clone())
        .build()
}

fn instructions_options(token: &WorkflowCancellationToken) -> ActivityOptions {
    ActivityOptions::with_start_to_close_timeout(Duration::from_secs(30))
        .cancellation_token(token.clone())
        .retry_policy(
            RetryPolicy::builder()
                .initial_interval(Duration::from_millis(500))
                .maximum_attempts(3)
                .build(),
        )
        .summary("read_instructions".to_owned())
        .build()
}

/// Keeps the run's memo and UI details current, so `baton status` works with no worker.
fn publish_status(ctx: &WorkflowContext<AgentRun>) {
    let status = set_details(ctx);
    if let Ok(value) = serde_json::to_value(&status) {
        let _ = ctx.upsert_memo([(STATUS_MEMO_KEY, Some(MemoValue::new(value)))]);
    }
    if !ctx.patched(PATCH_SEARCH_ATTRIBUTES) {
        return;
    }
    let indexed = (
        status.state().as_str_name().to_owned(),
        !status.pending.is_empty(),
        status.turn,
    );
    let previous = ctx.state(|s| s.indexed.clone());
    if previous.as_ref() == Some(&indexed) {
        return;
    }
    let mut updates = Vec::new();
    if previous.is_none() {
        let labels = ctx.state(|s| s.run.spec.labels.clone());
        let mut pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        pairs.sort();
        updates.extend(SA_LABELS.try_value_set(pairs).ok());
        if let Some(submitter) = labels.get("submitter") {
            updates.extend(SA_SUBMITTER.try_value_set(submitter.clone()).ok());
        }
    }
    updates.extend(SA_STATE.try_value_set(indexed.0.clone()).ok());
    updates.extend(SA_AWAITING_APPROVAL.try_value_set(indexed.1).ok());
    updates.extend(SA_TURNS.try_value_set(i64::from(indexed.2)).ok());
    ctx.upsert_search_attributes(updates);
    ctx.state_mut(|s| s.indexed = Some(indexed));
}

/// What a status refresh is keyed on: the coarse state (thinking, running tools and
/// compacting are all "running") and the calls waiting for a decision.
fn status_key(status: &RunStatus) -> (String, Vec<String>) {
    let state = match status.state() {
        baton_proto::RunState::Thinking
        | baton_proto::RunState::Executing
        | baton_proto::RunState::Compacting => "RUNNING".to_owned(),
        other => other.as_str_name().to_owned(),
    };
    let pending = status.pending.iter().map(|p| p.call_id.clone()).collect();
    (state, pending)
}

/// Sets the run's current details (shown by the Web UI; answered by a query, so no command
/// and no history event) and returns the status they describe.
fn set_details(ctx: &WorkflowContext<AgentRun>) -> RunStatus {
    let status = ctx.state(|s| s.run.status());
    let details = format!(
        "{} · turn {} · {}",
        status.state().as_str_name(),
        status.turn,
        status.last_event
    );
    ctx.set_current_details(details);
    status
}

fn cancel_reason(ctx: &WorkflowContext<AgentRun>) -> Option<Option<String>> {
    let token = ctx.cancellation_token();
    token.is_cancelled().then(|| token.reason())
}

/// The message a person (or the model) should see for a failed activity: the underlying
/// failure, not the wrapper's "activity task failed".
pub fn failure_message(e: &ActivityExecutionError) -> String {
    let mut message = e.to_string();
    let mut cause = e.cause();
    while let Some(c) = cause {
        message = c.to_string();
        cause = c.cause();
    }
    message
}

/// The application failure type (`ApplicationFailure::type_name`) behind an activity error.
fn failure_type(e: &ActivityExecutionError) -> Option<&str> {
    let mut cause = e.cause();
    while let Some(c) = cause {
        if let IncomingError::Application(app) = c
            && let Some(t) = app.type_name()
        {
            return Some(t);
        }
        cause = c.cause();
    }
    None
}

fn now_ms(t: Option<std::time::SystemTime>) -> i64 {
    t.and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}
