//! One trace per run, exported over OTLP/gRPC (`[otel] endpoint`) with the
//! OpenTelemetry GenAI semantic conventions:
//!
//! - `invoke_agent baton`: the run's root span, from its start (`RunResult.started_at_ms`, the
//!   first segment's) to its end, with the run's usage, cost and end reason;
//! - `chat <model>`: each attempt of a model call (`gen_ai.request.model`,
//!   `gen_ai.usage.input_tokens`/`output_tokens`/cache tokens, `baton.cost_usd`,
//!   `baton.attempt`), `compact <model>` for compactions;
//! - `execute_tool <tool>`: each attempt of a tool call (`gen_ai.tool.name`,
//!   `gen_ai.tool.call.id`);
//! - `approval`: each wait for a human (`baton.approval.waited_ms`, `baton.approval.approver`).
//!
//! Every id is derived, never random: the trace id from the run id (the workflow id, the same
//! across continue-as-new and on every worker), an activity span's id from the run, its
//! segment, its activity id and its attempt, the root's from the run. Any worker that takes
//! the run over therefore continues the same trace, without a context to hand over, and
//! replaying a run's history makes no span: activities are not run again on replay, and the
//! workflow-side spans (root, approvals) are made only outside replay.
//!
//! Prompts and outputs are not exported unless `[otel] capture_content = true` (then the
//! answer's text and a tool call's arguments and output, cut at [`MAX_CONTENT_BYTES`]).

use std::{
    cell::RefCell,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use baton_proto::{LlmResponse, RunResult, ToolRequest, ToolResult, Usage};
use baton_workflows::workflow::{APPROVAL_SIGNAL, APPROVE_UPDATE};
use opentelemetry_proto::tonic::{
    collector::trace::v1::{ExportTraceServiceRequest, trace_service_client::TraceServiceClient},
    common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value},
    resource::v1::Resource,
    trace::v1::{ResourceSpans, ScopeSpans, Span, Status, span::SpanKind, status::StatusCode},
};
use serde_json::Value;
use sha2::{Digest, Sha256};
use temporalio_sdk::{
    WorkflowTermination,
    workflow_interceptors::{
        ExecuteWorkflowInput, ExecuteWorkflowResult, HandleSignalInput, HandleSignalResult,
        HandleUpdateInput, HandleUpdateResult, WorkflowInterceptor, WorkflowInterceptorConstructor,
        WorkflowInterceptorContext, WorkflowInterceptorFuture, WorkflowNext,
    },
};
use tokio::sync::mpsc;
use tracing::warn;

use crate::observers::{ApprovalWatch, after_each_poll};

/// Spans sent in one export at most.
const BATCH: usize = 512;
/// How long a span waits for others to go with it.
const LINGER: Duration = Duration::from_millis(200);
/// Content attributes (with `capture_content`) are cut at this many bytes.
pub(crate) const MAX_CONTENT_BYTES: usize = 4096;

/// Where finished spans go: a background task batches them to the collector.
#[derive(Clone, Debug)]
pub(crate) struct Traces {
    tx: mpsc::UnboundedSender<Span>,
    capture_content: bool,
}

/// Sends what is still queued when the worker stops.
pub(crate) struct TraceFlush {
    task: tokio::task::JoinHandle<()>,
}

impl TraceFlush {
    /// Waits (at most 5 s) for the queued spans to be sent; `traces` must be dropped first.
    pub(crate) async fn flush(self) {
        let _ = tokio::time::timeout(Duration::from_secs(5), self.task).await;
    }
}

impl Traces {
    /// Exports to the OTLP/gRPC collector at `endpoint` (e.g. `http://127.0.0.1:4317`).
    pub(crate) fn start(endpoint: &str, capture_content: bool, worker: &str) -> (Self, TraceFlush) {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(send_batches(endpoint.to_owned(), worker.to_owned(), rx));
        (
            Self {
                tx,
                capture_content,
            },
            TraceFlush { task },
        )
    }

    fn export(&self, span: Span) {
        let _ = self.tx.send(span);
    }

    /// The span of one attempt of an activity of run `run` (`segment` = the workflow run id),
    /// from `start` to now, described by its request and result.
    pub(crate) fn activity(&self, attempt: &AttemptSpan, outcome: Outcome<'_>) {
        let mut span = Span {
            trace_id: trace_id(&attempt.run),
            span_id: span_id(&[
                "activity",
                &attempt.run,
                &attempt.segment,
                &attempt.activity_id,
                &attempt.attempt.to_string(),
            ]),
            parent_span_id: root_span_id(&attempt.run),
            kind: SpanKind::Client as i32,
            start_time_unix_nano: nanos(attempt.start),
            end_time_unix_nano: nanos(SystemTime::now()),
            ..Default::default()
        };
        let mut attrs = vec![
            string("gen_ai.conversation.id", &attempt.run),
            int("baton.attempt", i64::from(attempt.attempt)),
            string("baton.activity", &attempt.activity_type),
        ];
        match &attempt.what {
            What::Chat {
                provider,
                model,
                compaction,
            } => {
                span.name = format!("{} {model}", if *compaction { "compact" } else { "chat" });
                attrs.push(string("gen_ai.operation.name", "chat"));
                attrs.push(string("gen_ai.provider.name", provider));
                attrs.push(string("gen_ai.system", provider));
                attrs.push(string("gen_ai.request.model", model));
                if let Outcome::Llm(response) = &outcome {
                    if let Some(u) = &response.usage {
                        usage_attributes(&mut attrs, u);
                    }
                    if let Some(u) = &response.retried {
                        attrs.push(int("baton.retried.input_tokens", i64::from(u.input_tokens)));
                        attrs.push(int(
                            "baton.retried.output_tokens",
                            i64::from(u.output_tokens),
                        ));
                    }
                    if let Some(m) = &response.message {
                        if !m.tool_calls.is_empty() {
                            let names: Vec<&str> =
                                m.tool_calls.iter().map(|c| c.name.as_str()).collect();
                            attrs.push(string("baton.tool_calls", &names.join(",")));
                        }
                        if self.capture_content {
                            attrs.push(string("gen_ai.output.messages", cut(&m.text)));
                        }
                    }
                }
            }
            What::Tool {
                name,
                call_id,
                arguments,
            } => {
                span.name = format!("execute_tool {name}");
                span.kind = SpanKind::Internal as i32;
                attrs.push(string("gen_ai.operation.name", "execute_tool"));
                attrs.push(string("gen_ai.tool.name", name));
                attrs.push(string("gen_ai.tool.call.id", call_id));
                attrs.push(string("gen_ai.tool.type", "function"));
                if self.capture_content {
                    attrs.push(string("gen_ai.tool.call.arguments", cut(arguments)));
                }
                if let Outcome::Tool(result) = &outcome {
                    attrs.push(bool_attr("baton.tool.is_error", result.is_error));
                    if self.capture_content {
                        attrs.push(string("gen_ai.tool.call.result", cut(&result.content)));
                    }
                }
            }
        }
        if let Outcome::Failed(error) = &outcome {
            attrs.push(string("error.type", error));
            span.status = Some(Status {
                code: StatusCode::Error as i32,
                message: error.to_string(),
            });
        }
        span.attributes = attrs;
        self.export(span);
    }

    /// The root span of run `run`, which ended with `result` now.
    fn root(&self, run: &str, result: &RunResult) {
        let mut attrs = vec![
            string("gen_ai.operation.name", "invoke_agent"),
            string("gen_ai.agent.name", "baton"),
            string("gen_ai.conversation.id", run),
            string("baton.reason", result.reason().as_str_name()),
            int("baton.turns", i64::from(result.turns)),
        ];
        if let Some(u) = &result.usage {
            usage_attributes(&mut attrs, u);
        }
        let start = UNIX_EPOCH
            + Duration::from_millis(u64::try_from(result.started_at_ms).unwrap_or_default());
        self.export(Span {
            trace_id: trace_id(run),
            span_id: root_span_id(run),
            name: "invoke_agent baton".to_owned(),
            kind: SpanKind::Internal as i32,
            start_time_unix_nano: nanos(start),
            end_time_unix_nano: nanos(SystemTime::now()),
            attributes: attrs,
            ..Default::default()
        });
    }

    /// A wait of run `run` for a human, from `since` to `until` (workflow times).
    fn approval(&self, run: &str, since: SystemTime, until: SystemTime, approver: &str) {
        let waited = until.duration_since(since).unwrap_or_default();
        self.export(Span {
            trace_id: trace_id(run),
            span_id: span_id(&["approval", run, &nanos(since).to_string()]),
            parent_span_id: root_span_id(run),
            name: "approval".to_owned(),
            kind: SpanKind::Internal as i32,
            start_time_unix_nano: nanos(since),
            end_time_unix_nano: nanos(until),
            attributes: vec![
                string("gen_ai.conversation.id", run),
                int(
                    "baton.approval.waited_ms",
                    i64::try_from(waited.as_millis()).unwrap_or(i64::MAX),
                ),
                string("baton.approval.approver", approver),
            ],
            ..Default::default()
        });
    }
}

/// What an activity attempt's span describes, taken from its input before it runs.
pub(crate) struct AttemptSpan {
    pub(crate) run: String,
    pub(crate) segment: String,
    pub(crate) activity_id: String,
    pub(crate) activity_type: String,
    pub(crate) attempt: u32,
    pub(crate) start: SystemTime,
    pub(crate) what: What,
}

/// The kind of call an activity makes.
pub(crate) enum What {
    Chat {
        provider: String,
        model: String,
        compaction: bool,
    },
    Tool {
        name: String,
        call_id: String,
        arguments: String,
    },
}

impl What {
    /// A tool call's span of `request`.
    pub(crate) fn tool(request: &ToolRequest) -> Option<Self> {
        let call = request.call.as_ref()?;
        Some(What::Tool {
            name: call.name.clone(),
            call_id: call.id.clone(),
            arguments: call.arguments.clone(),
        })
    }
}

/// How the attempt ended.
pub(crate) enum Outcome<'a> {
    Llm(&'a LlmResponse),
    Tool(&'a ToolResult),
    Other,
    Failed(&'a str),
}

fn usage_attributes(attrs: &mut Vec<KeyValue>, u: &Usage) {
    attrs.push(int("gen_ai.usage.input_tokens", i64::from(u.input_tokens)));
    attrs.push(int(
        "gen_ai.usage.output_tokens",
        i64::from(u.output_tokens),
    ));
    attrs.push(int(
        "gen_ai.usage.cache_read.input_tokens",
        i64::from(u.cache_read_tokens),
    ));
    attrs.push(int(
        "gen_ai.usage.cache_creation.input_tokens",
        i64::from(u.cache_write_tokens),
    ));
    attrs.push(double("baton.cost_usd", u.cost_usd));
}

/// `text`, cut at [`MAX_CONTENT_BYTES`] (at a char boundary).
fn cut(text: &str) -> &str {
    let mut end = text.len().min(MAX_CONTENT_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn digest(parts: &[&str]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"baton-trace-v1");
    for p in parts {
        h.update([0]);
        h.update(p.as_bytes());
    }
    h.finalize().into()
}

/// The trace of run `run`.
pub(crate) fn trace_id(run: &str) -> Vec<u8> {
    digest(&["trace", run])[..16].to_vec()
}

/// The root span (`invoke_agent`) of run `run`.
pub(crate) fn root_span_id(run: &str) -> Vec<u8> {
    span_id(&["root", run])
}

fn span_id(parts: &[&str]) -> Vec<u8> {
    digest(parts)[..8].to_vec()
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn attr(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

fn string(key: &str, value: &str) -> KeyValue {
    attr(key, any_value::Value::StringValue(value.to_owned()))
}

fn int(key: &str, value: i64) -> KeyValue {
    attr(key, any_value::Value::IntValue(value))
}

fn double(key: &str, value: f64) -> KeyValue {
    attr(key, any_value::Value::DoubleValue(value))
}

fn bool_attr(key: &str, value: bool) -> KeyValue {
    attr(key, any_value::Value::BoolValue(value))
}

/// The background task: batches spans and exports them, reconnecting as needed; a batch the
/// collector refuses is dropped (and logged), never retried forever.
async fn send_batches(endpoint: String, worker: String, mut rx: mpsc::UnboundedReceiver<Span>) {
    let resource = Resource {
        attributes: vec![
            string("service.name", "baton-worker"),
            string("service.instance.id", &worker),
        ],
        ..Default::default()
    };
    let mut client: Option<TraceServiceClient<tonic::transport::Channel>> = None;
    while let Some(first) = rx.recv().await {
        let mut spans = vec![first];
        let linger = tokio::time::sleep(LINGER);
        tokio::pin!(linger);
        while spans.len() < BATCH {
            tokio::select! {
                next = rx.recv() => match next {
                    Some(span) => spans.push(span),
                    None => break,
                },
                () = &mut linger => break,
            }
        }
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(resource.clone()),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "baton".to_owned(),
                        version: env!("CARGO_PKG_VERSION").to_owned(),
                        ..Default::default()
                    }),
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        for _ in 0..3 {
            if client.is_none() {
                client = TraceServiceClient::connect(endpoint.clone()).await.ok();
            }
            let Some(c) = client.as_mut() else {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            };
            match c.export(request.clone()).await {
                Ok(_) => break,
                Err(e) => {
                    warn!(endpoint = %endpoint, error = %e.message(), "cannot export run traces");
                    client = None;
                }
            }
        }
    }
}

/// The workflow side of a run's trace: its approval waits and, when it ends, its root span.
pub(crate) struct RunTracer {
    traces: Traces,
    approvals: ApprovalWatch,
    /// Who sent the last approval decision.
    approver: RefCell<String>,
}

impl RunTracer {
    /// The constructor to register on the worker (after `SenderStamp`, whose identity it reads).
    pub(crate) fn constructor(traces: Traces) -> WorkflowInterceptorConstructor {
        WorkflowInterceptorConstructor::new(move |_| RunTracer {
            traces: traces.clone(),
            approvals: ApprovalWatch::default(),
            approver: RefCell::new(String::new()),
        })
    }

    fn note_decision(&self, decision: Option<&Value>) {
        let Some(d) = decision else {
            return;
        };
        let field = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or_default();
        let who = if field("approver").is_empty() {
            field("identity")
        } else {
            field("approver")
        };
        if !who.is_empty() {
            *self.approver.borrow_mut() = who.to_owned();
        }
    }
}

impl WorkflowInterceptor for RunTracer {
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
        after_each_poll(next.run(input), move |result| {
            if let Some((since, until)) = self.approvals.ended_wait(&ctx) {
                self.traces
                    .approval(ctx.workflow_id(), since, until, &self.approver.borrow());
            }
            if let Some(result) = result
                && !ctx.is_replaying()
                && let Some(result) = finished(result)
            {
                self.traces.root(ctx.workflow_id(), result);
            }
        })
    }

    fn handle_signal<'a>(
        &'a self,
        _ctx: WorkflowInterceptorContext,
        input: HandleSignalInput,
        next: WorkflowNext<
            'a,
            HandleSignalInput,
            WorkflowInterceptorFuture<'a, HandleSignalResult>,
        >,
    ) -> WorkflowInterceptorFuture<'a, HandleSignalResult> {
        if input.name() == APPROVAL_SIGNAL {
            self.note_decision(input.input_ref::<Value>());
        }
        next.run(input)
    }

    fn handle_update<'a>(
        &'a self,
        _ctx: WorkflowInterceptorContext,
        input: HandleUpdateInput,
        next: WorkflowNext<
            'a,
            HandleUpdateInput,
            WorkflowInterceptorFuture<'a, HandleUpdateResult>,
        >,
    ) -> WorkflowInterceptorFuture<'a, HandleUpdateResult> {
        if input.name() == APPROVE_UPDATE {
            self.note_decision(input.input_ref::<Value>());
        }
        next.run(input)
    }
}

/// The result of a run that ended (not one that continued as new or was evicted).
pub(crate) fn finished(result: &ExecuteWorkflowResult) -> Option<&RunResult> {
    match result {
        Ok(value) => value.downcast_ref::<RunResult>(),
        Err(WorkflowTermination::Cancelled { details }) => details
            .as_ref()
            .and_then(|d| d.as_any().downcast_ref::<RunResult>()),
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_derived_from_the_run_and_differ_between_runs_and_attempts() {
        assert_eq!(trace_id("run-1"), trace_id("run-1"));
        assert_eq!(trace_id("run-1").len(), 16);
        assert_ne!(trace_id("run-1"), trace_id("run-2"));
        assert_eq!(root_span_id("run-1").len(), 8);
        let a = span_id(&["activity", "run-1", "seg", "3", "1"]);
        let b = span_id(&["activity", "run-1", "seg", "3", "2"]);
        assert_ne!(a, b);
        assert_ne!(a, root_span_id("run-1"));
    }

    #[test]
    fn content_is_cut_at_a_char_boundary() {
        let s = "é".repeat(MAX_CONTENT_BYTES);
        let c = cut(&s);
        assert!(c.len() <= MAX_CONTENT_BYTES);
        assert!(s.starts_with(c));
    }
}
