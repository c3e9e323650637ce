//! baton's own metrics, and the log span every activity runs in.
//!
//! # Where the numbers come from (and why they do not double-count on replay)
//!
//! Workflow code replays: anything it records while its history is re-executed would be counted
//! again after every cache eviction, worker restart or query of a closed run. So nothing in
//! `AgentRun` records metrics. Instead:
//!
//! - **Activities** ([`ActivityObserver`], an SDK activity inbound interceptor registered on the
//!   worker): every execution of `llm_generate`, `compact_context`, `run_tool` and
//!   `mcp_call_tool` happens exactly once per attempt and never replays, so LLM calls, turns
//!   (successful `llm_generate` calls), tokens by provider/model and tool calls by
//!   server/tool/outcome/duration are counted there, from the
//!   activity's typed input and output. Retried attempts count as separate calls (they are).
//! - **Run lifecycle and approval waits** ([`RunObserver`], an SDK workflow interceptor): it
//!   runs with the workflow but records only when `is_replaying()` is false, which the SDK
//!   documents as the way to keep external observability from duplicating on replay. It reads
//!   only deterministic values (workflow time, the run's own search attributes), so it never
//!   changes the commands the workflow produces. A run counts as started on its first,
//!   non-replayed activation (not for a continue-as-new continuation), as completed (by
//!   [`baton_proto::TerminationReason`]) when its final activation is produced live, and an
//!   approval wait is the workflow time between `BatonAwaitingApproval` turning true and false.
//!   A workflow task that is lost with its worker and redone elsewhere can count twice; that
//!   is rare and the same as for a retried activity.
//! - **Gauges of what is open now** (runs by state, approvals pending): the worker polls
//!   Temporal visibility (`BatonState`, `BatonAwaitingApproval`), which stays correct across
//!   cache evictions and worker restarts; see the worker's `metrics` module. Every worker of a
//!   task queue reports the same queue-wide value: aggregate them with `max`, not `sum`.
//!
//! All instruments are created on the [`CoreMeter`] the worker gives Temporal's runtime, so
//! baton's metrics are exported next to Temporal's own (`temporal_*`) from one registry.

use std::{
    cell::Cell,
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    task::Poll,
    time::{Duration, Instant, SystemTime},
};

use baton_proto::{
    CompactRequest, CompactResponse, LlmRequest, LlmResponse, RunResult, ToolRequest, ToolResult,
    Usage,
};
use baton_workflows::workflow::{SA_AWAITING_APPROVAL, WORKFLOW_TYPE};
use futures::FutureExt;
use temporalio_common::telemetry::metrics::{
    CoreMeter, Counter, Gauge, GaugeF64, HistogramDuration, MetricAttributes, MetricKeyValue,
    MetricParameters, NewAttributes,
};
use temporalio_sdk::{
    WorkflowTermination,
    activities::ActivityError,
    interceptors::{
        ActivityInboundInterceptor, ExecuteActivityInput, ExecuteActivityOutput,
        ExecuteActivityResult, Next,
    },
    workflow_interceptors::{
        ExecuteWorkflowInput, ExecuteWorkflowResult, WorkflowInterceptor,
        WorkflowInterceptorConstructor, WorkflowInterceptorContext, WorkflowInterceptorFuture,
        WorkflowNext,
    },
};

use tracing::{Instrument, field};

/// Counter: runs started (`baton_runs_started_total` in Prometheus).
pub(crate) const RUNS_STARTED: &str = "baton_runs_started";
/// Counter: runs finished, label `reason` (`completed`, `max_turns_exceeded`, `cancelled`, ...,
/// `workflow_failed`).
pub(crate) const RUNS_COMPLETED: &str = "baton_runs_completed";
/// Counter: turns (successful `llm_generate` calls), labels `provider`, `model`.
pub(crate) const TURNS: &str = "baton_turns";
/// Counter: LLM calls (every attempt), labels `provider`, `model`, `kind` (`generate` |
/// `compact`), `outcome` (`ok` | `error` | `cancelled`).
pub(crate) const LLM_CALLS: &str = "baton_llm_calls";
/// Counter: LLM tokens, labels `provider`, `model`, `kind`, `direction` (`input` | `output`).
pub(crate) const LLM_TOKENS: &str = "baton_llm_tokens";
/// Counter: prompt tokens read from / written to the provider's prompt cache (parts of the
/// `input` tokens above), labels `provider`, `model`, `kind`, `cache` (`read` | `write`).
pub(crate) const LLM_CACHE_TOKENS: &str = "baton_llm_cache_tokens";
/// Estimated cost in USD under the worker's model table (`[models]`), labels `provider`,
/// `model`, `kind`. Exported as a gauge that only grows (Temporal's meter has no float
/// counter): read it with `increase()`/`rate()` like a counter; it restarts at 0 with the
/// worker.
pub(crate) const LLM_COST: &str = "baton_llm_cost_usd_total";
/// Histogram (seconds): duration of an LLM call attempt, labels `provider`, `kind`, `outcome`.
pub(crate) const LLM_CALL_DURATION: &str = "baton_llm_call_duration_seconds";
/// Counter: tool calls (every attempt), labels `server` (`builtin`, or the MCP server's name),
/// `tool` (the built-in tool's name, or the MCP server's own name of its tool), `outcome`
/// (`ok` | `error` | `cancelled` | `infrastructure_failure`).
pub(crate) const TOOL_CALLS: &str = "baton_tool_calls";
/// Histogram (seconds): duration of a tool call attempt, labels `server`, `tool`, `outcome`.
pub(crate) const TOOL_CALL_DURATION: &str = "baton_tool_call_duration_seconds";
/// Counter: connections tool processes asked the worker's proxy for, labels
/// `outcome` (`allowed` | `refused`) and `kind` (the refusal's: `not_allowed`, `private`,
/// `protected`, `unresolved`, `unreachable`, `bad_request`; `none` when allowed, `unrecorded`
/// past the 32 a call keeps).
pub(crate) const TOOL_NETWORK: &str = "baton_tool_network";
/// Histogram (seconds): how long a run waited for a human decision.
pub(crate) const APPROVAL_WAIT: &str = "baton_approval_wait_seconds";
/// Gauge: runs of the worker's task queue waiting for approval now (from visibility).
pub(crate) const APPROVALS_PENDING: &str = "baton_approvals_pending";
/// Gauge: open runs of the worker's task queue, label `state` (`THINKING`, ...; from
/// visibility).
pub(crate) const RUNS_OPEN: &str = "baton_runs_open";
/// Gauge: workflow instances (SDK workflow contexts) in this worker's memory: its workflow
/// cache; above `max_cached_workflows` means instances leak. Per worker, unlike the
/// visibility gauges.
pub(crate) const WORKFLOWS_RESIDENT: &str = "baton_workflows_resident";

/// Bucket boundaries (seconds) of baton's histograms, keyed by metric name, for the exporter's
/// histogram bucket overrides.
pub(crate) fn histogram_buckets() -> HashMap<String, Vec<f64>> {
    let calls = vec![
        0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    ];
    let waits = vec![
        1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 14_400.0, 43_200.0, 86_400.0,
    ];
    HashMap::from([
        (LLM_CALL_DURATION.to_owned(), calls.clone()),
        (TOOL_CALL_DURATION.to_owned(), calls),
        (APPROVAL_WAIT.to_owned(), waits),
    ])
}

/// baton's instruments, created once on the worker's meter.
pub(crate) struct BatonMetrics {
    meter: Arc<dyn CoreMeter>,
    runs_started: Counter,
    runs_completed: Counter,
    turns: Counter,
    llm_calls: Counter,
    llm_tokens: Counter,
    llm_cache_tokens: Counter,
    llm_cost: GaugeF64,
    /// The running totals behind `llm_cost`, by (provider, model, kind).
    llm_cost_totals: Mutex<HashMap<(String, String, &'static str), f64>>,
    llm_duration: HistogramDuration,
    tool_calls: Counter,
    tool_duration: HistogramDuration,
    tool_network: Counter,
    approval_wait: HistogramDuration,
    approvals_pending: Gauge,
    runs_open: Gauge,
    workflows_resident: Gauge,
}

impl std::fmt::Debug for BatonMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatonMetrics")
            .field("meter", &self.meter)
            .finish_non_exhaustive()
    }
}

fn params(name: &'static str, description: &'static str) -> MetricParameters {
    MetricParameters::builder()
        .name(name)
        .description(description)
        .build()
}

impl BatonMetrics {
    /// Creates baton's instruments on `meter`.
    pub(crate) fn new(meter: Arc<dyn CoreMeter>) -> Self {
        Self {
            runs_started: meter.counter(params(RUNS_STARTED, "Agent runs started")),
            runs_completed: meter.counter(params(
                RUNS_COMPLETED,
                "Agent runs finished, by termination reason",
            )),
            turns: meter.counter(params(TURNS, "Turns: successful llm_generate calls")),
            llm_calls: meter.counter(params(LLM_CALLS, "LLM call attempts, by outcome")),
            llm_tokens: meter.counter(params(LLM_TOKENS, "LLM tokens, input and output")),
            llm_cache_tokens: meter.counter(params(
                LLM_CACHE_TOKENS,
                "Prompt tokens read from or written to the provider's prompt cache",
            )),
            llm_cost: meter.gauge_f64(params(
                LLM_COST,
                "Estimated LLM cost in USD under the worker's model table (only grows)",
            )),
            llm_cost_totals: Mutex::new(HashMap::new()),
            llm_duration: meter
                .histogram_duration(params(LLM_CALL_DURATION, "Duration of LLM call attempts")),
            tool_calls: meter.counter(params(TOOL_CALLS, "Tool call attempts, by outcome")),
            tool_duration: meter
                .histogram_duration(params(TOOL_CALL_DURATION, "Duration of tool call attempts")),
            tool_network: meter.counter(params(
                TOOL_NETWORK,
                "Connections tool processes asked the proxy for, allowed or refused",
            )),
            approval_wait: meter.histogram_duration(params(
                APPROVAL_WAIT,
                "Time runs waited for an approval decision",
            )),
            approvals_pending: meter.gauge(params(
                APPROVALS_PENDING,
                "Runs of this task queue waiting for approval (from visibility)",
            )),
            runs_open: meter.gauge(params(
                RUNS_OPEN,
                "Open runs of this task queue by state (from visibility)",
            )),
            workflows_resident: meter.gauge(params(
                WORKFLOWS_RESIDENT,
                "Workflow instances in this worker's memory (at most its workflow cache)",
            )),
            meter,
        }
    }

    fn labels<const N: usize>(&self, kvs: [(&'static str, &str); N]) -> MetricAttributes {
        self.meter.new_attributes(NewAttributes::from(
            kvs.map(|(k, v)| MetricKeyValue::new(k, v.to_owned())),
        ))
    }

    /// Records one LLM call attempt and, when it succeeded, its tokens (and a turn for
    /// `llm_generate`).
    fn llm_call(&self, call: &LlmCall, outcome: &str, usage: Option<&Usage>, took: Duration) {
        let (provider, model, kind) = (call.provider.as_str(), call.model.as_str(), call.kind);
        self.llm_calls.add(
            1,
            &self.labels([
                ("provider", provider),
                ("model", model),
                ("kind", kind),
                ("outcome", outcome),
            ]),
        );
        self.llm_duration.record(
            took,
            &self.labels([("provider", provider), ("kind", kind), ("outcome", outcome)]),
        );
        if outcome == OK && kind == GENERATE {
            self.turns
                .add(1, &self.labels([("provider", provider), ("model", model)]));
        }
        if let Some(usage) = usage {
            let counts = [
                (&self.llm_tokens, ("direction", "input"), usage.input_tokens),
                (
                    &self.llm_tokens,
                    ("direction", "output"),
                    usage.output_tokens,
                ),
                (
                    &self.llm_cache_tokens,
                    ("cache", "read"),
                    usage.cache_read_tokens,
                ),
                (
                    &self.llm_cache_tokens,
                    ("cache", "write"),
                    usage.cache_write_tokens,
                ),
            ];
            for (counter, label, tokens) in counts {
                counter.add(
                    u64::from(tokens),
                    &self.labels([
                        ("provider", provider),
                        ("model", model),
                        ("kind", kind),
                        label,
                    ]),
                );
            }
            self.add_cost(call, usage.cost_usd);
        }
    }

    /// Adds one call's estimated cost to the running total of its provider/model/kind.
    fn add_cost(&self, call: &LlmCall, usd: f64) {
        if !(usd.is_finite() && usd > 0.0) {
            return;
        }
        let total = {
            let mut totals = self
                .llm_cost_totals
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let total = totals
                .entry((call.provider.clone(), call.model.clone(), call.kind))
                .or_insert(0.0);
            *total += usd;
            *total
        };
        self.llm_cost.record(
            total,
            &self.labels([
                ("provider", call.provider.as_str()),
                ("model", call.model.as_str()),
                ("kind", call.kind),
            ]),
        );
    }

    /// Records one tool call attempt.
    fn tool_call(&self, tool: &ToolLabels, outcome: &str, took: Duration) {
        let labels = self.labels([
            ("server", tool.server.as_str()),
            ("tool", tool.tool.as_str()),
            ("outcome", outcome),
        ]);
        self.tool_calls.add(1, &labels);
        self.tool_duration.record(took, &labels);
    }

    /// Records what a tool call's processes did through the proxy.
    fn tool_network(&self, result: &ToolResult) {
        let add = |outcome: &str, kind: &str, n: u64| {
            if n > 0 {
                self.tool_network
                    .add(n, &self.labels([("outcome", outcome), ("kind", kind)]));
            }
        };
        add("allowed", "none", u64::from(result.network_allowed));
        for refusal in &result.network_refusals {
            add("refused", refusal.kind.as_str(), 1);
        }
        let unrecorded = result
            .network_refused
            .saturating_sub(result.network_refusals.len() as u32);
        add("refused", "unrecorded", u64::from(unrecorded));
    }

    /// Sets the gauge of runs waiting for approval.
    pub(crate) fn set_approvals_pending(&self, runs: u64) {
        self.approvals_pending.record(runs, &self.labels([]));
    }

    /// Sets the gauge of open runs in `state`.
    pub(crate) fn set_runs_open(&self, state: &str, runs: u64) {
        self.runs_open
            .record(runs, &self.labels([("state", state)]));
    }

    /// Sets the gauge of workflow instances in this worker's memory.
    pub(crate) fn set_workflows_resident(&self, instances: u64) {
        self.workflows_resident.record(instances, &self.labels([]));
    }

    fn run_started(&self) {
        self.runs_started.add(1, &self.labels([]));
    }

    fn run_completed(&self, reason: &str) {
        self.runs_completed
            .add(1, &self.labels([("reason", reason)]));
    }

    fn approval_waited(&self, took: Duration) {
        self.approval_wait.record(took, &self.labels([]));
    }
}

const OK: &str = "ok";
const GENERATE: &str = "generate";

/// An LLM call as seen by the interceptor.
struct LlmCall {
    provider: String,
    model: String,
    kind: &'static str,
}

/// What an activity execution is, from its typed input.
enum Observed {
    Llm(LlmCall),
    Tool(ToolLabels),
    Other,
}

/// The `server` label of built-in tools' calls.
pub(crate) const BUILTIN_SERVER: &str = "builtin";

/// The labels of a tool call: `server` and `tool`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ToolLabels {
    server: String,
    tool: String,
}

impl ToolLabels {
    /// A built-in call: `builtin` and its name; an MCP call: the server and its own name of
    /// the tool.
    pub(crate) fn of(request: &ToolRequest) -> Option<Self> {
        let call = request.call.as_ref()?;
        Some(match &request.mcp {
            Some(mcp) => Self {
                server: mcp.server.clone(),
                tool: mcp.tool.clone(),
            },
            None => Self {
                server: BUILTIN_SERVER.to_owned(),
                tool: call.name.clone(),
            },
        })
    }
}

/// Outcome label of a `run_tool` attempt: `ok`, `error` (the tool ran and failed: the model
/// sees an error observation), `cancelled`, or `infrastructure_failure` (the activity failed).
pub(crate) fn tool_outcome(result: &ExecuteActivityResult) -> &'static str {
    match result {
        Ok(value) => match value.downcast_ref::<ToolResult>() {
            Some(r) if r.is_error => "error",
            _ => OK,
        },
        Err(ActivityError::Cancelled { .. }) => "cancelled",
        Err(_) => "infrastructure_failure",
    }
}

/// Outcome label of an LLM call attempt: `ok`, `cancelled` or `error`.
pub(crate) fn llm_outcome(result: &ExecuteActivityResult) -> &'static str {
    match result {
        Ok(_) => OK,
        Err(ActivityError::Cancelled { .. }) => "cancelled",
        Err(_) => "error",
    }
}

/// Activity inbound interceptor: runs every activity in an `activity` span carrying `run_id`
/// (and `turn`, `call_id`, `tool`, `provider`, `model` when the input has them), so every log
/// line an activity writes names its run; and, with metrics on, records LLM and tool metrics.
#[derive(Debug, Default)]
pub(crate) struct ActivityObserver {
    metrics: Option<Arc<BatonMetrics>>,
    /// The run traces' exporter, with `[otel] endpoint`.
    traces: Option<crate::run_trace::Traces>,
}

impl ActivityObserver {
    /// Spans only, or spans and metrics.
    pub(crate) fn new(metrics: Option<Arc<BatonMetrics>>) -> Self {
        Self {
            metrics,
            traces: None,
        }
    }

    /// Each attempt also becomes a span of its run's trace.
    pub(crate) fn with_traces(mut self, traces: Option<crate::run_trace::Traces>) -> Self {
        self.traces = traces;
        self
    }
}

impl ActivityInboundInterceptor for ActivityObserver {
    fn execute_activity<'a>(
        &'a self,
        input: ExecuteActivityInput,
        next: Next<'a, ExecuteActivityInput, ExecuteActivityOutput<'a>>,
    ) -> ExecuteActivityOutput<'a> {
        let info = input.activity_info();
        let span = tracing::info_span!(
            "activity",
            activity = %info.activity_type,
            run_id = info.workflow_id.as_deref().unwrap_or_default(),
            attempt = info.attempt,
            turn = field::Empty,
            call_id = field::Empty,
            tool = field::Empty,
            server = field::Empty,
            provider = field::Empty,
            model = field::Empty,
        );
        let model = |m: Option<&baton_proto::ModelConfig>| {
            m.map(|m| (m.provider.clone(), m.model.clone()))
                .unwrap_or_default()
        };
        let observed = if let Some(r) = input.args_ref::<LlmRequest>() {
            // 1-based, like `RunStatus.turn` after the call (`LlmRequest.turn` is 0-based).
            span.record("turn", r.turn.saturating_add(1));
            let (provider, model) = model(r.model.as_ref());
            Observed::Llm(LlmCall {
                provider,
                model,
                kind: GENERATE,
            })
        } else if let Some(r) = input.args_ref::<CompactRequest>() {
            let (provider, model) = model(r.model.as_ref());
            Observed::Llm(LlmCall {
                provider,
                model,
                kind: "compact",
            })
        } else if let Some(request) = input.args_ref::<ToolRequest>()
            && let (Some(call), Some(labels)) = (request.call.as_ref(), ToolLabels::of(request))
        {
            span.record("call_id", call.id.as_str());
            span.record("tool", call.name.as_str());
            if let Some(mcp) = &request.mcp {
                span.record("server", mcp.server.as_str());
            }
            Observed::Tool(labels)
        } else {
            Observed::Other
        };
        if let Observed::Llm(call) = &observed {
            span.record("provider", call.provider.as_str());
            span.record("model", call.model.as_str());
        }
        let traced = self.traces.clone().and_then(|traces| {
            let what = match &observed {
                Observed::Llm(call) => crate::run_trace::What::Chat {
                    provider: call.provider.clone(),
                    model: call.model.clone(),
                    compaction: call.kind != GENERATE,
                },
                Observed::Tool(_) => {
                    crate::run_trace::What::tool(input.args_ref::<ToolRequest>()?)?
                }
                Observed::Other => return None,
            };
            Some((
                traces,
                crate::run_trace::AttemptSpan {
                    run: info.workflow_id.clone().unwrap_or_default(),
                    segment: info.workflow_run_id.clone().unwrap_or_default(),
                    activity_id: info.activity_id.clone(),
                    activity_type: info.activity_type.clone(),
                    attempt: info.attempt,
                    start: SystemTime::now(),
                    what,
                },
            ))
        });
        let metrics = self.metrics.clone();
        let started = Instant::now();
        async move {
            let result = next.run(input).await;
            if let Some((traces, attempt)) = &traced {
                use crate::run_trace::Outcome;
                let failure;
                let outcome = match &result {
                    Ok(v) => {
                        if let Some(r) = v.downcast_ref::<LlmResponse>() {
                            Outcome::Llm(r)
                        } else if let Some(r) = v.downcast_ref::<ToolResult>() {
                            Outcome::Tool(r)
                        } else {
                            Outcome::Other
                        }
                    }
                    Err(e) => {
                        failure = activity_error_type(e);
                        Outcome::Failed(&failure)
                    }
                };
                traces.activity(attempt, outcome);
            }
            if let Some(m) = metrics {
                let took = started.elapsed();
                match &observed {
                    Observed::Llm(call) => {
                        let usage = result.as_ref().ok().and_then(|v| {
                            v.downcast_ref::<LlmResponse>()
                                .and_then(|r| r.usage.as_ref())
                                .or_else(|| {
                                    v.downcast_ref::<CompactResponse>()
                                        .and_then(|r| r.usage.as_ref())
                                })
                        });
                        m.llm_call(call, llm_outcome(&result), usage, took);
                    }
                    Observed::Tool(labels) => {
                        m.tool_call(labels, tool_outcome(&result), took);
                        if let Some(r) = result.as_ref().ok().and_then(|v| v.downcast_ref()) {
                            m.tool_network(r);
                        }
                    }
                    Observed::Other => {}
                }
            }
            result
        }
        .instrument(span)
        .boxed()
    }
}

/// What a failed attempt's span names as its `error.type`: the application failure's type
/// (`RateLimited`, `ToolTimeout`, ...), else what kind of failure it was.
fn activity_error_type(e: &ActivityError) -> String {
    match e {
        ActivityError::Application(f) => f
            .type_name()
            .filter(|t| !t.is_empty())
            .unwrap_or("activity_failed")
            .to_owned(),
        ActivityError::Cancelled { .. } => "cancelled".to_owned(),
        _ => "activity_failed".to_owned(),
    }
}

static RESIDENT: AtomicUsize = AtomicUsize::new(0);

/// Workflow interceptor that counts the workflow instances alive in this process.
///
/// The SDK builds one per workflow instance and keeps it in the instance's context, so it
/// lives exactly as long as the context: the worker's workflow cache, plus any instance the SDK
/// fails to free. An SDK timer, wait or activity started with the run's own cancellation token
/// and dropped before it completes (a timer that lost a `select!`, anything in flight at
/// eviction) keeps its context alive through a reference cycle; `AgentRun` avoids that with
/// step tokens, and this count (gauge [`WORKFLOWS_RESIDENT`], checked by a test) shows it.
/// It intercepts nothing.
pub(crate) struct Resident(());

impl Resident {
    /// The constructor to register on the worker (`WorkerOptions::workflow_interceptor`).
    pub(crate) fn constructor() -> WorkflowInterceptorConstructor {
        WorkflowInterceptorConstructor::new(|_| {
            RESIDENT.fetch_add(1, Ordering::Relaxed);
            Resident(())
        })
    }

    /// Workflow instances alive in this process now.
    pub(crate) fn count() -> usize {
        RESIDENT.load(Ordering::Relaxed)
    }
}

impl Drop for Resident {
    fn drop(&mut self) {
        RESIDENT.fetch_sub(1, Ordering::Relaxed);
    }
}

impl WorkflowInterceptor for Resident {}

/// Workflow interceptor recording run starts, run completions and approval waits, only when
/// the workflow is not replaying (see the module docs).
pub(crate) struct RunObserver {
    metrics: Arc<BatonMetrics>,
    /// A continue-as-new continuation is not a new run.
    continued: bool,
    approvals: ApprovalWatch,
}

impl RunObserver {
    /// The constructor to register on the worker (`WorkerOptions::workflow_interceptor`).
    pub(crate) fn constructor(metrics: Arc<BatonMetrics>) -> WorkflowInterceptorConstructor {
        WorkflowInterceptorConstructor::new(move |ctx| RunObserver {
            metrics: metrics.clone(),
            continued: ctx.continued_from_run_id().is_some()
                || ctx.workflow_type() != WORKFLOW_TYPE,
            approvals: ApprovalWatch::default(),
        })
    }
}

/// Notices a run's `BatonAwaitingApproval` turning true and back, after each step of the run.
#[derive(Default)]
pub(crate) struct ApprovalWatch {
    /// Workflow time at which it last turned true (rebuilt on replay).
    since: Cell<Option<SystemTime>>,
}

impl ApprovalWatch {
    /// The wait for a human that ended at this step, outside replay: its start and end in
    /// workflow time.
    pub(crate) fn ended_wait(
        &self,
        ctx: &WorkflowInterceptorContext,
    ) -> Option<(SystemTime, SystemTime)> {
        let awaiting = ctx
            .search_attributes()
            .get(&SA_AWAITING_APPROVAL)
            .unwrap_or(false);
        let now = ctx.workflow_time()?;
        match (self.since.get(), awaiting) {
            (None, true) => {
                self.since.set(Some(now));
                None
            }
            (Some(since), false) => {
                self.since.set(None);
                (!ctx.is_replaying()).then_some((since, now))
            }
            _ => None,
        }
    }
}

/// `run`, calling `each` after every poll with the run's result once there is one.
pub(crate) fn after_each_poll<'a>(
    mut run: WorkflowInterceptorFuture<'a, ExecuteWorkflowResult>,
    mut each: impl FnMut(Option<&ExecuteWorkflowResult>) + 'a,
) -> WorkflowInterceptorFuture<'a, ExecuteWorkflowResult> {
    WorkflowInterceptorFuture::new(std::future::poll_fn(move |cx| {
        let polled = run.poll_unpin(cx);
        match &polled {
            Poll::Ready(result) => each(Some(result)),
            Poll::Pending => each(None),
        }
        polled
    }))
}

/// The `reason` label of a finished run; `None` when the run did not finish (continue-as-new,
/// eviction).
pub(crate) fn completion_reason(result: &ExecuteWorkflowResult) -> Option<String> {
    let reason = |r: &RunResult| r.reason().as_str_name().to_owned();
    match result {
        Ok(value) => Some(
            value
                .downcast_ref::<RunResult>()
                .map(reason)
                .unwrap_or_else(|| "unknown".to_owned()),
        ),
        Err(WorkflowTermination::Cancelled { details }) => Some(
            details
                .as_ref()
                .and_then(|d| d.as_any().downcast_ref::<RunResult>())
                .map(reason)
                .unwrap_or_else(|| "cancelled".to_owned()),
        ),
        Err(WorkflowTermination::Failed(_)) => Some("workflow_failed".to_owned()),
        Err(_) => None,
    }
}

impl WorkflowInterceptor for RunObserver {
    fn execute<'a>(
        &'a self,
        ctx: WorkflowInterceptorContext,
        input: ExecuteWorkflowInput,
        next: WorkflowNext<
            'a,
            ExecuteWorkflowInput,
            WorkflowInterceptorFuture<'a, ExecuteWorkflowResult>,
        >,
    ) -> WorkflowInterceptorFuture<'a, ExecuteWorkflowResult> {
        if self.continued {
            return next.run(input);
        }
        if !ctx.is_replaying() {
            self.metrics.run_started();
        }
        after_each_poll(next.run(input), move |result| {
            if let Some((since, until)) = self.approvals.ended_wait(&ctx) {
                self.metrics
                    .approval_waited(until.duration_since(since).unwrap_or_default());
            }
            if let Some(result) = result
                && !ctx.is_replaying()
                && let Some(reason) = completion_reason(result)
            {
                self.metrics.run_completed(&reason);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use temporalio_sdk::interceptors::ActivityExecutionValue;

    fn ok<T: ActivityExecutionValue>(v: T) -> ExecuteActivityResult {
        Ok(Box::new(v))
    }

    #[test]
    fn tool_outcomes() {
        let result = |is_error| ToolResult {
            is_error,
            ..Default::default()
        };
        assert_eq!(tool_outcome(&ok(result(false))), "ok");
        assert_eq!(tool_outcome(&ok(result(true))), "error");
        assert_eq!(tool_outcome(&Err(ActivityError::cancelled())), "cancelled");
        let failed = Err(ActivityError::application(
            temporalio_common::error::ApplicationFailure::new("disk full".to_owned()),
        ));
        assert_eq!(tool_outcome(&failed), "infrastructure_failure");
        assert_eq!(llm_outcome(&failed), "error");
        assert_eq!(llm_outcome(&ok(LlmResponse::default())), "ok");
    }

    /// Built-in calls count under `server="builtin"`; MCP calls under their server and the
    /// server's own tool name (not the model-facing `mcp__<server>__<tool>`).
    #[test]
    fn tool_calls_are_labelled_by_server_and_tool() {
        let call = |name: &str| baton_proto::ToolCall {
            id: "c1".into(),
            name: name.into(),
            ..Default::default()
        };
        let builtin = ToolRequest {
            call: Some(call("shell")),
            ..Default::default()
        };
        assert_eq!(
            ToolLabels::of(&builtin),
            Some(ToolLabels {
                server: "builtin".into(),
                tool: "shell".into()
            })
        );
        let mcp = ToolRequest {
            call: Some(call("mcp__fs__read_text_file")),
            mcp: Some(baton_proto::McpOrigin {
                server: "fs".into(),
                tool: "read_text_file".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            ToolLabels::of(&mcp),
            Some(ToolLabels {
                server: "fs".into(),
                tool: "read_text_file".into()
            })
        );
        assert_eq!(ToolLabels::of(&ToolRequest::default()), None);
    }

    #[test]
    fn completion_reasons() {
        let done = RunResult {
            reason: baton_proto::TerminationReason::MaxTurnsExceeded as i32,
            ..Default::default()
        };
        let out: ExecuteWorkflowResult = Ok(Box::new(done.clone()));
        assert_eq!(
            completion_reason(&out).as_deref(),
            Some("max_turns_exceeded")
        );
        let cancelled: ExecuteWorkflowResult = Err(WorkflowTermination::cancelled());
        assert_eq!(completion_reason(&cancelled).as_deref(), Some("cancelled"));
        let evicted: ExecuteWorkflowResult = Err(WorkflowTermination::Evicted);
        assert_eq!(completion_reason(&evicted), None);
    }

    #[test]
    fn histogram_buckets_cover_baton_histograms() {
        let buckets = histogram_buckets();
        for name in [LLM_CALL_DURATION, TOOL_CALL_DURATION, APPROVAL_WAIT] {
            let b = &buckets[name];
            assert!(b.windows(2).all(|w| w[0] < w[1]), "{name}: {b:?}");
        }
    }
}
