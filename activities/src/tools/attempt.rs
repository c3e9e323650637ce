//! One attempt of a tool call, built-in or MCP, in four phases: `admit` (is this attempt to
//! run at all: a superseded one is not, a cut-off mutating call under `on_retry = "ask"` waits
//! for a human), `prepare` (heartbeats start, an earlier attempt's processes die, the
//! workspace is put at the call's base snapshot), `execute` (the tool itself, stopped on
//! cancellation) and `finish` (the re-run note, outputs offloaded, the snapshot after).

use std::{
    path::PathBuf,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use baton_proto::{McpOrigin, ToolCall, ToolRequest, ToolResult};
use baton_store::BlobId;
use temporalio_common::error::ApplicationFailure;
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use baton_sandbox::Sandbox;

use super::activity::{
    HEARTBEAT_EVERY, ToolProgress, ToolService, infrastructure, permanent, sandbox_failure,
};
use super::retry::{kill_earlier_attempts, mark_rerun, not_rerun};
use super::{ToolContext, ToolError, orphans};
use crate::heartbeat::{self, Heartbeat};
use crate::mcp::{McpError, RunScope};

/// What one tool attempt runs.
pub(crate) enum Kind {
    /// A built-in tool, in the run's workspace.
    Builtin,
    /// A tool of an MCP server (which touches the workspace only with `sandbox = true`).
    Mcp(McpOrigin),
}

/// Who an attempt is and where it works, known before anything runs.
struct Attempt {
    run_id: String,
    /// 1 for the first attempt, counted by the server.
    number: u32,
    call: ToolCall,
    workspace: PathBuf,
    /// The call works in the run's workspace (a built-in tool, or an MCP server run in it):
    /// only then is the workspace restored and snapshotted.
    in_workspace: bool,
    /// A snapshot is taken after the call (mutating, in the workspace, snapshots on).
    snapshots: bool,
    /// An attempt after a failed one, or a cut-off call a human said to run again.
    retry: bool,
}

/// The heartbeat details of a running attempt: its age, and the base snapshot known so far
/// (a retry of a retry must not lose it).
#[derive(Clone)]
struct Progress {
    started: tokio::time::Instant,
    base: Arc<Mutex<String>>,
}

impl Progress {
    fn new(base: String) -> Self {
        Self {
            started: tokio::time::Instant::now(),
            base: Arc::new(Mutex::new(base)),
        }
    }

    fn set_base(&self, base: &str) {
        *self.base.lock().unwrap_or_else(PoisonError::into_inner) = base.to_owned();
    }

    fn details(&self) -> ToolProgress {
        ToolProgress {
            elapsed_secs: self.started.elapsed().as_secs(),
            base_snapshot: self
                .base
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }
}

/// Test hook of debug builds only (the e2e test of the slow-read safeguard): a read-only call
/// whose arguments mention `slow-read` waits `BATON_TEST_READ_DELAY_MS` first. Release
/// builds never read it.
fn test_read_delay(request: &ToolRequest) -> Option<Duration> {
    if !cfg!(debug_assertions) || request.mutating {
        return None;
    }
    let call = request.call.as_ref()?;
    if !call.arguments.contains("slow-read") {
        return None;
    }
    let ms: u64 = std::env::var("BATON_TEST_READ_DELAY_MS")
        .ok()?
        .parse()
        .ok()?;
    Some(Duration::from_millis(ms))
}

impl ToolService {
    /// One attempt of a tool call, built-in or MCP.
    pub(crate) async fn attempt(
        &self,
        ctx: ActivityContext,
        request: ToolRequest,
        kind: Kind,
    ) -> Result<ToolResult, ActivityError> {
        let Some(call) = request.call.clone() else {
            return Err(permanent("a tool activity needs a call".into()));
        };
        let info = ctx.info();
        let run_id = info.workflow_id.clone().unwrap_or_default();
        let workspace = self.workspace_of(&run_id);
        let _in_use = self.hold_workspace(&run_id).await;
        // MCP servers do not touch the workspace (no restore, no snapshot, no orphans) unless
        // they run in it (`sandbox = true`).
        let in_workspace = match &kind {
            Kind::Builtin => true,
            Kind::Mcp(origin) => self.mcp.is_sandboxed(&origin.server),
        };
        let this = Attempt {
            number: info.attempt,
            retry: info.attempt > 1 || request.retry_confirmed,
            snapshots: self.snapshots && request.mutating && in_workspace,
            run_id,
            call,
            workspace,
            in_workspace,
        };
        let previous: ToolProgress = ctx
            .heartbeat_details()
            .deserialize()
            .ok()
            .flatten()
            .unwrap_or_default();
        if let Some(refused) = admit(&ctx, &request, &this, &previous).await {
            return refused;
        }
        let _beat = self.prepare(&ctx, &request, &kind, &this, previous).await?;
        let Attempt { run_id, call, .. } = &this;
        if ctx.is_cancelled() {
            // Superseded while it set up (the server timed this attempt out and retried the
            // call: the heartbeat was answered "not found"), or the run was cancelled.
            info!(run_id, tool = %call.name, call_id = %call.id, attempt = this.number, "tool cancelled before it started");
            return Err(ActivityError::cancelled());
        }
        info!(run_id, tool = %call.name, call_id = %call.id, attempt = this.number, "tool started");
        let call = self.with_whole_arguments(call.clone()).await?;
        let (outcome, read_only) = self.execute(&ctx, &request, &kind, &this, &call).await;
        self.finish(&this, outcome?, read_only).await
    }

    /// Heartbeats start and the workspace is put where the call starts: the earlier attempt's
    /// processes killed (built-in tools), its base snapshot restored or, for the first
    /// mutating call of a run, taken now. Returns the heartbeat, which beats until dropped.
    async fn prepare(
        &self,
        ctx: &ActivityContext,
        request: &ToolRequest,
        kind: &Kind,
        this: &Attempt,
        previous: ToolProgress,
    ) -> Result<Heartbeat, ActivityError> {
        // The snapshot this call starts from: the run's latest, or the one an earlier attempt
        // recorded in its heartbeats.
        let base = if request.snapshot.is_empty() {
            previous.base_snapshot
        } else {
            request.snapshot.clone()
        };
        // The attempt beats from here to its end, its restore and snapshot included.
        let progress = Progress::new(base.clone());
        let beat = {
            let progress = progress.clone();
            Heartbeat::start(ctx, HEARTBEAT_EVERY, move || progress.details())
        };
        if let Some(delay) = test_read_delay(request) {
            tokio::time::sleep(delay).await;
        }
        if matches!(kind, Kind::Builtin) && this.retry {
            kill_earlier_attempts(&this.run_id, &this.call.id, this.number).await;
        }
        let base = self.starting_tree(this, base).await?;
        progress.set_base(&base);
        if this.snapshots && request.snapshot.is_empty() {
            // The base is not in the call's input (the run had no snapshot yet): a retry of
            // this call must start from it, so record it before the call runs. Calls with a
            // base in their input skip this: a heartbeat now would only make the server
            // re-arm its heartbeat timer, and a SIGKILLed worker's call would be retried later.
            let _ = ctx.record_heartbeat(progress.details()).await;
        }
        Ok(beat)
    }

    /// The snapshot a call starts from, its tree made so: a known `base` restored into the
    /// workspace (only what differs; on a retry of a mutating call, checked against a tree an
    /// earlier attempt may have changed), or, for the first mutating call of a run, one taken
    /// now so a retry can start again from the same state.
    async fn starting_tree(&self, this: &Attempt, base: String) -> Result<String, ActivityError> {
        if self.snapshots && this.in_workspace && !base.is_empty() {
            let verify = this.snapshots && this.retry;
            self.ensure_snapshot(&this.run_id, &this.workspace, &base, verify)
                .await?;
            Ok(base)
        } else if this.snapshots && base.is_empty() {
            Ok(self
                .take_snapshot(&this.run_id, &this.workspace)
                .await
                .unwrap_or_default())
        } else {
            Ok(base)
        }
    }

    /// Runs the call by its kind; says too whether it was read-only (a read-only call run
    /// again gets no re-run note).
    async fn execute(
        &self,
        ctx: &ActivityContext,
        request: &ToolRequest,
        kind: &Kind,
        this: &Attempt,
        call: &ToolCall,
    ) -> (Result<ToolResult, ActivityError>, bool) {
        let timeout = Duration::from_secs(u64::from(request.timeout_seconds.max(1)));
        let run_id = &this.run_id;
        match kind {
            Kind::Builtin => {
                let read_only =
                    baton_core::tools::definition(&call.name).is_some_and(|d| d.read_only);
                let sandbox = match Sandbox::resolve(request.sandbox.as_ref(), self.sandbox()) {
                    Ok(sandbox) => sandbox,
                    Err(e) => return (Err(sandbox_failure(&e)), read_only),
                };
                let tool_ctx = ToolContext {
                    workspace: this.workspace.clone(),
                    timeout,
                    env: vec![
                        ("BATON_RUN_ID".to_owned(), run_id.clone()),
                        (
                            orphans::CALL_ENV.to_owned(),
                            format!("{run_id}/{}", call.id),
                        ),
                        ("BATON_ATTEMPT".to_owned(), this.number.to_string()),
                    ],
                    cancel: CancellationToken::new(),
                    sandbox,
                };
                (self.builtin(ctx, &tool_ctx, run_id, call).await, read_only)
            }
            Kind::Mcp(origin) => {
                let run = if this.in_workspace {
                    match self.run_scope(&origin.server, run_id, request.sandbox.as_ref()) {
                        Ok(scope) => Some(scope),
                        Err(e) => return (Err(McpError::into_failure(e)), !request.mutating),
                    }
                } else {
                    None
                };
                let outcome = self
                    .mcp(ctx, run_id, origin, call, timeout, run.as_ref())
                    .await;
                (outcome, !request.mutating)
            }
        }
    }

    /// The result as the workflow gets it: noted when a call with effects ran again, long
    /// outputs in the blob store, the workspace's snapshot after a mutating call.
    async fn finish(
        &self,
        this: &Attempt,
        mut result: ToolResult,
        read_only: bool,
    ) -> Result<ToolResult, ActivityError> {
        let Attempt { run_id, call, .. } = this;
        if this.number > 1 && !read_only {
            mark_rerun(&mut result, this.number, run_id, &call.id);
        }
        self.offload_outputs(run_id, &mut result).await;
        if this.snapshots
            && let Some(id) = self.take_snapshot(run_id, &this.workspace).await
        {
            result.snapshot = id;
        }
        info!(run_id, tool = %call.name, call_id = %call.id, is_error = result.is_error, "tool finished");
        Ok(result)
    }

    /// `call` with its whole arguments: those too long for history are in the blob store.
    async fn with_whole_arguments(&self, mut call: ToolCall) -> Result<ToolCall, ActivityError> {
        if call.arguments_ref.is_empty() {
            return Ok(call);
        }
        let id = BlobId::parse(&call.arguments_ref)
            .map_err(|e| infrastructure(format!("bad arguments reference: {e}")))?;
        let bytes = self
            .store()
            .get(&id)
            .await
            .map_err(|e| infrastructure(format!("cannot read the call's arguments: {e}")))?;
        call.arguments = String::from_utf8_lossy(&bytes).into_owned();
        Ok(call)
    }

    /// Runs a built-in tool; on cancellation the tool stops (and reaps) its processes itself,
    /// then returns.
    async fn builtin(
        &self,
        ctx: &ActivityContext,
        tool_ctx: &ToolContext,
        run_id: &str,
        call: &ToolCall,
    ) -> Result<ToolResult, ActivityError> {
        let run = super::execute(tool_ctx, call);
        tokio::pin!(run);
        let outcome = tokio::select! {
            r = &mut run => r,
            _ = ctx.cancelled() => {
                tool_ctx.cancel.cancel();
                run.await
            }
        };
        match outcome {
            Ok(result) => Ok(result),
            Err(ToolError::Cancelled) => {
                info!(run_id, tool = %call.name, call_id = %call.id, "tool cancelled");
                Err(ActivityError::cancelled())
            }
            Err(ToolError::Sandbox(e)) => {
                warn!(run_id, tool = %call.name, call_id = %call.id, cause = %e, retryable = e.is_retryable(), "tool not sandboxed");
                Err(sandbox_failure(&e))
            }
            Err(e) => {
                warn!(run_id, tool = %call.name, call_id = %call.id, cause = %e, "tool infrastructure failure");
                Err(ActivityError::application(ApplicationFailure::new(
                    e.to_string(),
                )))
            }
        }
    }

    /// Calls an MCP tool within `timeout`; a cancelled activity drops the call (rmcp tells
    /// the server).
    async fn mcp(
        &self,
        ctx: &ActivityContext,
        run_id: &str,
        origin: &McpOrigin,
        call: &ToolCall,
        timeout: Duration,
        run: Option<&RunScope>,
    ) -> Result<ToolResult, ActivityError> {
        let work = crate::mcp::call::execute(&self.mcp, self.store(), origin, call, timeout, run);
        match heartbeat::until_cancelled(ctx, work).await {
            Err(cancelled) => {
                info!(run_id, server = %origin.server, tool = %origin.tool, call_id = %call.id, "MCP call cancelled");
                Err(cancelled)
            }
            Ok(Ok(result)) => Ok(result),
            Ok(Err(e)) => {
                warn!(run_id, server = %origin.server, tool = %origin.tool, call_id = %call.id, cause = %e, unavailable = e.is_unavailable(), "MCP call failed");
                Err(e.into_failure())
            }
        }
    }
}

/// Whether this attempt runs at all: `Some` is its answer when it does not. A superseded
/// attempt (the server timed it out before this worker took it up) is cancelled; a cut-off
/// mutating call under policy `on_retry = "ask"` does not run again until a human says so.
async fn admit(
    ctx: &ActivityContext,
    request: &ToolRequest,
    this: &Attempt,
    previous: &ToolProgress,
) -> Option<Result<ToolResult, ActivityError>> {
    let Attempt {
        run_id,
        call,
        number: attempt,
        ..
    } = this;
    if heartbeat::superseded(ctx, previous.clone()).await {
        warn!(run_id, call_id = %call.id, attempt, "attempt not run: the server timed it out before this worker took it up (a stalled worker), and retried it");
        return Some(Err(ActivityError::cancelled()));
    }
    if *attempt > 1 && request.mutating && request.confirm_retries && !request.retry_confirmed {
        // The first attempt may have taken effect; a human decides.
        info!(run_id, tool = %call.name, call_id = %call.id, attempt, "tool not re-run: waiting for a human");
        return Some(Ok(not_rerun(call, request, previous, *attempt)));
    }
    None
}
