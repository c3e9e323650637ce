//! Activity and timer options: timeouts, retry policies, cancellation, and the step token every
//! one of them carries.

use std::time::Duration;

use baton_proto::ToolRequest;
use temporalio_common::RetryPolicy;
use temporalio_workflow::{
    ActivityCancellationType, ActivityOptions, LocalActivityOptions, TimerOptions,
    WorkflowCancellationToken, WorkflowContext,
};

use super::AgentRun;
use crate::activities::FailureType;

/// LLM activity: start-to-close timeout of one attempt. An envelope: the worker's
/// `request_timeout_secs` of each provider (checked against it at start-up) bounds the request.
pub const LLM_START_TO_CLOSE: Duration = Duration::from_secs(60 * 60);
/// LLM activity: heartbeat timeout (the activity heartbeats every 2 s while it runs), so a
/// model call on a killed worker is retried within ~10 s (was 30 s; a model call is
/// idempotent, a retry costs its tokens again). See [`TOOL_HEARTBEAT`] for why changing it is
/// safe for running workflows.
pub const LLM_HEARTBEAT: Duration = Duration::from_secs(10);
/// LLM activity: the most attempts of one call. An envelope: the activity gives up sooner, on
/// the worker's `max_attempts` of the provider, and sets each retry's delay itself.
pub const LLM_MAX_ATTEMPTS: u32 = 100;
/// Tool activity (and workspace activities): heartbeat timeout, so a SIGKILLed worker's call is
/// retried elsewhere within ~4 s (BENCHMARKS.md "Hand-off latency"; was 10 s). The activities
/// beat every 1 s from a task of their own, one heartbeat call each (`activities/src/heartbeat.rs`),
/// so a heartbeat may be up to 2 s late before a live attempt is taken for dead: the margin
/// of the old 10 s, whose heartbeats the SDK sent every 8 s. Also the longest Temporal outage a
/// running tool survives.
///
/// Changing a heartbeat timeout changes no workflow command, only an attribute of the
/// `ScheduleActivityTask` command, which replay does not compare (core matches activity id
/// and type): recorded histories replay (`suite::replay::`); an activity already scheduled
/// keeps the timeout it was scheduled with, the run's later ones get the new one.
pub const TOOL_HEARTBEAT: Duration = Duration::from_secs(3);
/// Tool activity: attempts (infrastructure failures only; ordinary failures are results: a
/// worker killed under the call, a heartbeat timeout, a store that failed). 10 (was 5): in the
/// chaos test (a worker of three killed every 3-6 s) a call meets a dying worker on perhaps one
/// attempt in six or seven, so five in a row happen across its 480 calls now and then, and the
/// model would see "The tool could not be run" for a call that only met bad luck (one such run
/// lost a step in a full-suite run of session 11; the test now prints the activity events when
/// a workspace differs). The backoff (0.2 s doubling to 30 s) spreads the later attempts over
/// about two minutes.
pub const TOOL_MAX_ATTEMPTS: u32 = 10;
/// Workspace activities (prepare, collect, deliver): attempts. An unreachable git host ends
/// the run after these.
const WORKSPACE_MAX_ATTEMPTS: u32 = 5;
/// MCP tool call: attempts. A server that is down is retried like a provider outage: with
/// backoff up to 30 s, about 4 minutes in all.
pub const MCP_MAX_ATTEMPTS: u32 = 12;
/// MCP listing: attempts (a server that does not start or answer in time; one this worker does
/// not have or that refuses the handshake fails at once).
pub const MCP_LIST_MAX_ATTEMPTS: u32 = 4;

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
pub(super) fn step_token(ctx: &WorkflowContext<AgentRun>) -> WorkflowCancellationToken {
    ctx.cancellation_token().child_token()
}

pub(super) fn timer_options(duration: Duration, token: &WorkflowCancellationToken) -> TimerOptions {
    TimerOptions::builder(duration)
        .cancellation_token(token.clone())
        .build()
}

/// Options of the model activities (`llm_generate`, `compact_context`): `summary` names the
/// activity in the UI. The retry policy is an envelope: the activity applies the worker's
/// budget of the provider (last attempt non-retryable, next retry delay on every failure), so
/// the backoff here only paces failures that never reach it (a worker that died, a blob store
/// failure).
pub(super) fn llm_options(
    summary: &str,
    queue: Option<String>,
    token: &WorkflowCancellationToken,
) -> ActivityOptions {
    let non_retryable = [
        FailureType::ProviderFatal,
        FailureType::ContextOverflow,
        FailureType::BadInput,
    ];
    ActivityOptions::with_start_to_close_timeout(LLM_START_TO_CLOSE)
        .heartbeat_timeout(LLM_HEARTBEAT)
        .retry_policy(
            RetryPolicy::builder()
                .initial_interval(Duration::from_secs(1))
                .backoff_coefficient(2.0)
                .maximum_interval(Duration::from_secs(60))
                .maximum_attempts(LLM_MAX_ATTEMPTS)
                .non_retryable_error_types(non_retryable.map(FailureType::as_str))
                .build(),
        )
        .cancellation_type(ActivityCancellationType::TryCancel)
        .cancellation_token(token.clone())
        .summary(summary.to_owned())
        .maybe_task_queue(queue)
        .build()
}

pub(super) fn instructions_options(token: &WorkflowCancellationToken) -> ActivityOptions {
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

/// Options of `prepare_workspace`: a clone of a large repository or a restore of a large
/// snapshot takes minutes; the activity heartbeats, so a dead worker's attempt moves on soon.
/// A source that cannot exist fails at once (`WorkspaceUnavailable` is not retried).
pub(super) fn prepare_options(token: &WorkflowCancellationToken) -> ActivityOptions {
    workspace_options("prepare_workspace", Duration::from_secs(30 * 60), token)
}

/// Options of `collect_changes` (reads two snapshots' manifests and the changed files).
pub(super) fn collect_options(token: &WorkflowCancellationToken) -> ActivityOptions {
    workspace_options("collect_changes", Duration::from_secs(10 * 60), token)
}

/// Options of `deliver` (a fetch of the base commit, a push, GitHub API calls). Idempotent, so
/// retried like the others.
pub(super) fn deliver_options(token: &WorkflowCancellationToken) -> ActivityOptions {
    workspace_options("deliver", Duration::from_secs(15 * 60), token)
}

/// Options of `report_progress` (a few GitHub API calls): retried for a minute or so, never
/// for a refusal; a report that fails for good leaves a note and the run goes on.
pub(super) fn report_options(token: &WorkflowCancellationToken) -> ActivityOptions {
    let retry = backoff(
        Duration::from_secs(1),
        Duration::from_secs(20),
        6,
        &[FailureType::GitHubRefused, FailureType::BadInput],
    );
    ActivityOptions::with_start_to_close_timeout(Duration::from_secs(60))
        .retry_policy(retry)
        .cancellation_token(token.clone())
        .summary("report_progress".to_owned())
        .build()
}

/// Options of `merge_changes` (reads three manifests and the ignore files, writes one).
pub(super) fn merge_options(token: &WorkflowCancellationToken) -> ActivityOptions {
    workspace_options("merge_changes", Duration::from_secs(5 * 60), token)
}

fn workspace_options(
    summary: &str,
    start_to_close: Duration,
    token: &WorkflowCancellationToken,
) -> ActivityOptions {
    let retry = backoff(
        Duration::from_secs(1),
        Duration::from_secs(30),
        WORKSPACE_MAX_ATTEMPTS,
        &[FailureType::WorkspaceUnavailable, FailureType::BadInput],
    );
    heartbeating(start_to_close, retry, token, summary.to_owned())
}

/// Options of `setup_environment`: every setup command's timeout and ten minutes for the
/// restores, snapshot and upload; heartbeating, retried like a workspace activity.
pub(super) fn setup_options(
    request: &baton_proto::SetupRequest,
    token: &WorkflowCancellationToken,
) -> ActivityOptions {
    let env = request.environment.clone().unwrap_or_default();
    let each = match env.setup_timeout_seconds {
        0 => baton_core::environment::DEFAULT_SETUP_TIMEOUT_SECONDS,
        n => n,
    };
    let commands = env.setup.len().max(env.maintenance.len()).max(1) as u64;
    let budget = Duration::from_secs(commands * u64::from(each) + 10 * 60);
    workspace_options("setup_environment", budget, token)
}

/// Options of `run_verification`: the command's own timeout and a minute for the restore, a
/// heartbeat like a tool call's (a killed worker's check runs again elsewhere within seconds,
/// from the same snapshot), retried like a workspace activity; cancelling it waits until its
/// processes are gone.
pub(super) fn verify_options(
    request: &baton_proto::VerifyRequest,
    token: &WorkflowCancellationToken,
) -> ActivityOptions {
    let retry = backoff(
        Duration::from_secs(1),
        Duration::from_secs(30),
        WORKSPACE_MAX_ATTEMPTS,
        &[FailureType::BadInput],
    );
    let mut summary = format!("verify: {}", request.command);
    baton_core::view::cut_text(&mut summary, 200);
    ActivityOptions::with_start_to_close_timeout(Duration::from_secs(
        u64::from(request.timeout_seconds.max(1)) + 60,
    ))
    .activity_id(format!("verify-{}-{}", request.round, request.index))
    .heartbeat_timeout(TOOL_HEARTBEAT)
    .retry_policy(retry)
    .cancellation_type(ActivityCancellationType::WaitCancellationCompleted)
    .cancellation_token(token.clone())
    .summary(summary)
    .build()
}

/// Options of `mcp_list_tools` for `server`: the server may have to start (a stdio process)
/// before it answers; the activity heartbeats while it waits.
pub(super) fn mcp_list_options(server: &str, token: &WorkflowCancellationToken) -> ActivityOptions {
    let retry = backoff(
        Duration::from_secs(1),
        Duration::from_secs(10),
        MCP_LIST_MAX_ATTEMPTS,
        &[FailureType::McpUnavailable, FailureType::BadInput],
    );
    heartbeating(
        Duration::from_secs(2 * 60),
        retry,
        token,
        format!("mcp_list_tools: {server}"),
    )
}

/// An activity that heartbeats (within [`TOOL_HEARTBEAT`]), retried by `retry`, cancelled
/// with `token`, shown as `summary`.
fn heartbeating(
    start_to_close: Duration,
    retry: RetryPolicy,
    token: &WorkflowCancellationToken,
    summary: String,
) -> ActivityOptions {
    ActivityOptions::with_start_to_close_timeout(start_to_close)
        .heartbeat_timeout(TOOL_HEARTBEAT)
        .retry_policy(retry)
        .cancellation_type(ActivityCancellationType::TryCancel)
        .cancellation_token(token.clone())
        .summary(summary)
        .build()
}

/// Exponential backoff (doubling) from `initial` up to `max`, at most `attempts`, never
/// retrying `non_retryable`.
fn backoff(
    initial: Duration,
    max: Duration,
    attempts: u32,
    non_retryable: &[FailureType],
) -> RetryPolicy {
    RetryPolicy::builder()
        .initial_interval(initial)
        .backoff_coefficient(2.0)
        .maximum_interval(max)
        .maximum_attempts(attempts)
        .non_retryable_error_types(non_retryable.iter().map(|t| t.as_str()))
        .build()
}

/// Options of `mcp_call_tool`: like a tool call's, with the longer retry of an outage.
pub(super) fn mcp_tool_options(
    request: &ToolRequest,
    token: &WorkflowCancellationToken,
) -> ActivityOptions {
    let retry = backoff(
        Duration::from_millis(200),
        Duration::from_secs(30),
        MCP_MAX_ATTEMPTS,
        &[FailureType::BadInput, FailureType::McpUnavailable],
    );
    tool_activity_options(request, retry, token)
}

/// How long a read-only call may run as a local activity, retries included, before it runs
/// again as a regular activity (the slow-read safeguard): a
/// local activity holds the workflow task open while it runs, and a quick read is the point.
/// Under 80% of the shortest workflow task timeout baton sets (5 s), so the SDK never has to
/// heartbeat the workflow task for it: a late heartbeat on a loaded worker would time the task
/// out and start the read over.
pub const LOCAL_READ_BUDGET: Duration = Duration::from_secs(3);

/// A tool call run as a local activity: a read-only call. `bounded`: within
/// [`LOCAL_READ_BUDGET`], after which the workflow runs it as a regular activity; otherwise
/// (runs with `remote_read_tools` that still asked for `local_read_tools`) within the tool's
/// own timeout.
pub(super) fn local_tool_options(
    request: &ToolRequest,
    token: &WorkflowCancellationToken,
    bounded: bool,
) -> LocalActivityOptions {
    let tool = ToolActivity::of(request);
    let builder = LocalActivityOptions::builder()
        .activity_id(tool.activity_id)
        .retry_policy(tool_retry_policy())
        .cancel_type(ActivityCancellationType::WaitCancellationCompleted)
        .cancellation_token(token.clone())
        .summary(tool.summary);
    if bounded {
        builder
            .start_to_close_timeout(LOCAL_READ_BUDGET.min(tool.timeout))
            .schedule_to_close_timeout(LOCAL_READ_BUDGET.min(tool.timeout))
            .build()
    } else {
        builder.start_to_close_timeout(tool.timeout).build()
    }
}

pub(super) fn tool_options(
    request: &ToolRequest,
    token: &WorkflowCancellationToken,
) -> ActivityOptions {
    tool_activity_options(request, tool_retry_policy(), token)
}

fn tool_activity_options(
    request: &ToolRequest,
    retry: RetryPolicy,
    token: &WorkflowCancellationToken,
) -> ActivityOptions {
    let tool = ToolActivity::of(request);
    ActivityOptions::with_start_to_close_timeout(tool.timeout)
        .activity_id(tool.activity_id)
        .heartbeat_timeout(TOOL_HEARTBEAT)
        .retry_policy(retry)
        .cancellation_type(ActivityCancellationType::WaitCancellationCompleted)
        .cancellation_token(token.clone())
        .summary(tool.summary)
        .build()
}

/// What a tool activity is called, how long it may take, and its one-line summary.
struct ToolActivity {
    activity_id: String,
    timeout: Duration,
    summary: String,
}

impl ToolActivity {
    fn of(request: &ToolRequest) -> Self {
        let call = request.call.clone().unwrap_or_default();
        let timeout = Duration::from_secs(u64::from(request.timeout_seconds.max(1)) + 60);
        let mut summary = format!("{}: {}", call.name, call.arguments);
        baton_core::view::cut_text(&mut summary, 200);
        // A confirmed re-run is a new activity of the same call.
        let activity_id = if request.retry_confirmed {
            format!("{}-rerun", call.id)
        } else {
            call.id
        };
        Self {
            activity_id,
            timeout,
            summary,
        }
    }
}

fn tool_retry_policy() -> RetryPolicy {
    // A retry is a worker failure being handed to another worker: no reason to wait long
    // before the first one.
    backoff(
        Duration::from_millis(200),
        Duration::from_secs(30),
        TOOL_MAX_ATTEMPTS,
        &[FailureType::BadInput],
    )
}
