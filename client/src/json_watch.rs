//! The `baton watch --json` lines ([`WatchLine`]): one per run event, plus the
//! `assistant_delta` lines of a streaming model call. docs/src/reference/json.md
//! documents them; `json_tests.rs` pins them against its examples.

use baton_proto::{
    ApprovalDecision, AssistantMessage, FinishReason, RunEvent, RunResult, ToolCall, ToolResult,
    run_event,
};
use serde::Serialize;

use super::{Check, CheckStarted, Ended, Pending};

/// One `baton watch --json` line: `{"run_id", "seq", "turn", "at_ms", "kind", <kind>: {..}}`.
#[derive(Debug, Serialize)]
pub(crate) struct WatchLine<'a> {
    pub(crate) run_id: &'a str,
    /// Null on a `finished` line built from the run's result (no worker replayed its events).
    pub(crate) seq: Option<u32>,
    pub(crate) turn: u32,
    /// Workflow time, Unix milliseconds; null as `seq`.
    pub(crate) at_ms: Option<i64>,
    /// The name of the key the event is under.
    pub(crate) kind: &'static str,
    #[serde(flatten)]
    pub(crate) event: Event<'a>,
}

impl<'a> WatchLine<'a> {
    /// The line of a recorded event (`None` for an event of no kind).
    pub(crate) fn of(run_id: &'a str, e: &'a RunEvent) -> Option<Self> {
        let event = Event::from(e.kind.as_ref()?);
        Some(Self {
            run_id,
            seq: Some(e.seq),
            turn: e.turn,
            at_ms: Some(e.at_ms),
            kind: event.kind(),
            event,
        })
    }

    /// An `assistant_delta` line: what the model of `turn` wrote since the previous one (not
    /// an event of the run: `seq` and `at_ms` are null).
    pub(crate) fn delta(run_id: &'a str, turn: u32, d: &'a crate::live::Delta) -> Self {
        let event = Event::AssistantDelta(AssistantDelta {
            attempt: d.attempt,
            text: &d.text,
            reasoning: &d.reasoning,
            tool_calls: &d.tool_calls,
        });
        Self {
            run_id,
            seq: None,
            turn,
            at_ms: None,
            kind: event.kind(),
            event,
        }
    }

    /// The `finished` line built from a run's result, when no worker could replay its events.
    pub(crate) fn finished(run_id: &'a str, r: &'a RunResult) -> Self {
        let event = Event::Finished(Ended::finished(r));
        Self {
            run_id,
            seq: None,
            turn: r.turns,
            at_ms: None,
            kind: event.kind(),
            event,
        }
    }
}

/// A watch line's event, under a key named like its kind.
#[derive(Debug, Serialize)]
#[serde(rename_all = "snake_case")]
// Built once per printed line and dropped: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Event<'a> {
    Assistant(Assistant<'a>),
    AssistantDelta(AssistantDelta<'a>),
    ApprovalRequested(Pending<'a>),
    ApprovalDecided(ApprovalDecided<'a>),
    ToolStarted(Call<'a>),
    ToolFinished(ToolFinished<'a>),
    /// Something baton did (run started, instructions read, approval timed out, ...).
    Note {
        text: &'a str,
    },
    SubagentStarted(SubagentStartedLine<'a>),
    SubagentFinished(SubagentFinishedLine<'a>),
    VerificationStarted(CheckStarted<'a>),
    VerificationFinished(Check<'a>),
    Finished(Ended<'a>),
}

impl Event<'_> {
    /// The kind, as the key serde writes the event under (pinned by a test).
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Assistant(_) => "assistant",
            Self::AssistantDelta(_) => "assistant_delta",
            Self::ApprovalRequested(_) => "approval_requested",
            Self::ApprovalDecided(_) => "approval_decided",
            Self::ToolStarted(_) => "tool_started",
            Self::ToolFinished(_) => "tool_finished",
            Self::Note { .. } => "note",
            Self::SubagentStarted(_) => "subagent_started",
            Self::SubagentFinished(_) => "subagent_finished",
            Self::VerificationStarted(_) => "verification_started",
            Self::VerificationFinished(_) => "verification_finished",
            Self::Finished(_) => "finished",
        }
    }
}

impl<'a> From<&'a run_event::Kind> for Event<'a> {
    fn from(kind: &'a run_event::Kind) -> Self {
        match kind {
            run_event::Kind::Assistant(a) => Self::Assistant(Assistant::from(a)),
            run_event::Kind::ApprovalRequested(p) => Self::ApprovalRequested(Pending::from(p)),
            run_event::Kind::ApprovalDecided(d) => Self::ApprovalDecided(ApprovalDecided::from(d)),
            run_event::Kind::ToolStarted(c) => Self::ToolStarted(Call::from(c)),
            run_event::Kind::ToolFinished(r) => Self::ToolFinished(ToolFinished::from(r)),
            run_event::Kind::Note(text) => Self::Note { text },
            run_event::Kind::Finished(r) => Self::Finished(Ended::finished(r)),
            run_event::Kind::SubagentStarted(s) => Self::SubagentStarted(SubagentStartedLine {
                call_id: &s.call_id,
                child_run_id: &s.run_id,
                task: &s.task,
            }),
            run_event::Kind::SubagentFinished(f) => {
                Self::SubagentFinished(SubagentFinishedLine::from(f))
            }
            run_event::Kind::VerificationStarted(v) => Self::VerificationStarted(CheckStarted {
                command: &v.command,
                round: v.round,
                index: v.index,
                of: v.of,
            }),
            run_event::Kind::VerificationFinished(v) => Self::VerificationFinished(Check::from(v)),
        }
    }
}

/// `subagent_started`: the run's `spawn_agent` call `call_id` started child run
/// `child_run_id` (`baton watch <child_run_id>` follows it; `--children` inline).
#[derive(Debug, Serialize)]
pub(crate) struct SubagentStartedLine<'a> {
    pub(crate) call_id: &'a str,
    pub(crate) child_run_id: &'a str,
    pub(crate) task: &'a str,
}

/// `subagent_finished`: how the child ended and whether its change set landed here
/// (`merge`: `merged`, `unchanged`, `conflict: <paths>`, `error: <why>`).
#[derive(Debug, Serialize)]
pub(crate) struct SubagentFinishedLine<'a> {
    pub(crate) call_id: &'a str,
    pub(crate) child_run_id: &'a str,
    /// `COMPLETED`, `FAILED`, `CANCELLED`.
    pub(crate) status: &'static str,
    pub(crate) reason: &'static str,
    pub(crate) turns: u32,
    pub(crate) total_tokens: u32,
    pub(crate) files_changed: u32,
    pub(crate) merge: &'a str,
    /// The child's answer as the parent's model got it (cut).
    pub(crate) answer: &'a str,
}

impl<'a> From<&'a baton_proto::SubagentFinished> for SubagentFinishedLine<'a> {
    fn from(f: &'a baton_proto::SubagentFinished) -> Self {
        let outcome = f.outcome.as_ref();
        Self {
            call_id: &f.call_id,
            child_run_id: outcome.map_or("", |o| o.run_id.as_str()),
            status: outcome.map_or("", |o| o.status().as_str_name()),
            reason: outcome.map_or("", |o| o.reason().as_str_name()),
            turns: outcome.map_or(0, |o| o.turns),
            total_tokens: outcome
                .and_then(|o| o.usage.as_ref())
                .map_or(0, |u| u.total_tokens),
            files_changed: outcome.map_or(0, |o| o.files_changed),
            merge: outcome.map_or("", |o| o.merge.as_str()),
            answer: &f.answer,
        }
    }
}

/// A model reply: `assistant`.
#[derive(Debug, Serialize)]
pub(crate) struct Assistant<'a> {
    pub(crate) text: &'a str,
    /// The provider's thinking text, often `""`.
    pub(crate) reasoning: &'a str,
    /// `stop`, `tool_calls`, `length`, `content_filter`, or `""`.
    pub(crate) finish_reason: &'static str,
    pub(crate) tool_calls: Vec<Call<'a>>,
}

impl<'a> From<&'a AssistantMessage> for Assistant<'a> {
    fn from(a: &'a AssistantMessage) -> Self {
        Self {
            text: &a.text,
            reasoning: &a.reasoning,
            finish_reason: match a.finish_reason() {
                FinishReason::Unspecified => "",
                other => other.as_str_name(),
            },
            tool_calls: a.tool_calls.iter().map(Call::from).collect(),
        }
    }
}

/// Model output as it streams: `assistant_delta`. `attempt` is the model call's attempt; a
/// new attempt's deltas start from its beginning (the earlier attempt's are abandoned).
#[derive(Debug, Serialize)]
pub(crate) struct AssistantDelta<'a> {
    pub(crate) attempt: u32,
    /// Text since the previous line of this attempt.
    pub(crate) text: &'a str,
    /// Thinking text since the previous line.
    pub(crate) reasoning: &'a str,
    /// Names of the tool calls the model started since.
    pub(crate) tool_calls: &'a [String],
}

/// A tool call: in `assistant`'s `tool_calls`, and `tool_started`.
#[derive(Debug, Serialize)]
pub(crate) struct Call<'a> {
    pub(crate) call_id: &'a str,
    pub(crate) tool: &'a str,
    /// The JSON text the model wrote.
    pub(crate) arguments: &'a str,
}

impl<'a> From<&'a ToolCall> for Call<'a> {
    fn from(c: &'a ToolCall) -> Self {
        Self {
            call_id: &c.id,
            tool: &c.name,
            arguments: &c.arguments,
        }
    }
}

/// `approval_decided`.
#[derive(Debug, Serialize)]
pub(crate) struct ApprovalDecided<'a> {
    pub(crate) call_id: &'a str,
    pub(crate) approved: bool,
    /// The name the sender gave.
    pub(crate) approver: &'a str,
    /// The Temporal client identity the decision came from (from history).
    pub(crate) identity: &'a str,
    pub(crate) reason: &'a str,
    pub(crate) remember: bool,
}

impl<'a> From<&'a ApprovalDecision> for ApprovalDecided<'a> {
    fn from(d: &'a ApprovalDecision) -> Self {
        Self {
            call_id: &d.call_id,
            approved: d.approved,
            approver: &d.approver,
            identity: &d.identity,
            reason: &d.reason,
            remember: d.remember,
        }
    }
}

/// `tool_finished`: what the model sees (`baton transcript` has full outputs).
#[derive(Debug, Serialize)]
pub(crate) struct ToolFinished<'a> {
    pub(crate) call_id: &'a str,
    pub(crate) tool: &'a str,
    pub(crate) is_error: bool,
    pub(crate) content: &'a str,
    /// Connections the proxy refused the call's processes (absent when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) network_refusals: Vec<NetworkRefusal<'a>>,
    /// How many were refused in all (absent when none; the list keeps the first 32).
    #[serde(skip_serializing_if = "is_zero")]
    pub(crate) network_refused: u32,
}

/// One connection the proxy refused.
#[derive(Debug, Serialize)]
pub(crate) struct NetworkRefusal<'a> {
    pub(crate) host: &'a str,
    pub(crate) port: u32,
    /// `not_allowed`, `private`, `protected`, `unresolved`, `unreachable` or `bad_request`.
    pub(crate) kind: &'a str,
    pub(crate) reason: &'a str,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl<'a> From<&'a ToolResult> for ToolFinished<'a> {
    fn from(r: &'a ToolResult) -> Self {
        Self {
            call_id: &r.call_id,
            tool: &r.name,
            is_error: r.is_error,
            content: &r.content,
            network_refusals: r
                .network_refusals
                .iter()
                .map(|n| NetworkRefusal {
                    host: &n.host,
                    port: n.port,
                    kind: &n.kind,
                    reason: &n.reason,
                })
                .collect(),
            network_refused: r.network_refused,
        }
    }
}
