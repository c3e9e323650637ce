//! The `baton watch --json` lines ([`WatchLine`]): one per run event, plus the
//! `assistant_delta` lines of a streaming model call. docs/src/reference/json.md
//! documents them; `json_tests.rs` pins them against its examples.

use baton_proto::{
    ApprovalDecision, AssistantMessage, FinishReason, RunEvent, RunResult, ToolCall, ToolResult,
    run_event,
};
use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::{Check, CheckStarted, Ended, Pending};

/// One `baton watch --json` line: `{"run_id", "seq", "turn", "at_ms", "kind", <kind>: {..}}`.
#[derive(Debug, Serialize, Deserialize)]
pub struct WatchLine<'a> {
    pub run_id: Cow<'a, str>,
    /// Null on a `finished` line built from the run's result (no worker replayed its events).
    pub seq: Option<u32>,
    pub turn: u32,
    /// Workflow time, Unix milliseconds; null as `seq`.
    pub at_ms: Option<i64>,
    /// The name of the key the event is under.
    pub kind: Cow<'a, str>,
    #[serde(flatten)]
    pub event: Event<'a>,
}

impl<'a> WatchLine<'a> {
    /// The line of a recorded event (`None` for an event of no kind).
    pub fn of(run_id: &'a str, e: &'a RunEvent) -> Option<Self> {
        let event = Event::from(e.kind.as_ref()?);
        Some(Self {
            run_id: Cow::from(run_id),
            seq: Some(e.seq),
            turn: e.turn,
            at_ms: Some(e.at_ms),
            kind: Cow::from(event.kind()),
            event,
        })
    }

    /// An `assistant_delta` line: what the model of `turn` wrote since the previous one (not
    /// an event of the run: `seq` and `at_ms` are null).
    pub(crate) fn delta(run_id: &'a str, turn: u32, d: &'a crate::live::Delta) -> Self {
        let event = Event::AssistantDelta(AssistantDelta {
            attempt: d.attempt,
            text: Cow::from(&d.text),
            reasoning: Cow::from(&d.reasoning),
            tool_calls: Cow::from(&d.tool_calls),
        });
        Self {
            run_id: Cow::from(run_id),
            seq: None,
            turn,
            at_ms: None,
            kind: Cow::from(event.kind()),
            event,
        }
    }

    /// The `finished` line built from a run's result, when no worker could replay its events.
    pub fn finished(run_id: &'a str, r: &'a RunResult) -> Self {
        let event = Event::Finished(Ended::finished(r));
        Self {
            run_id: Cow::from(run_id),
            seq: None,
            turn: r.turns,
            at_ms: None,
            kind: Cow::from(event.kind()),
            event,
        }
    }
}

/// A watch line's event, under a key named like its kind.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
// Built once per printed line and dropped: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum Event<'a> {
    Assistant(Assistant<'a>),
    AssistantDelta(AssistantDelta<'a>),
    ApprovalRequested(Pending<'a>),
    ApprovalDecided(ApprovalDecided<'a>),
    ToolStarted(Call<'a>),
    ToolFinished(ToolFinished<'a>),
    /// Something baton did (run started, instructions read, approval timed out, ...).
    Note {
        text: Cow<'a, str>,
    },
    SubagentStarted(SubagentStartedLine<'a>),
    SubagentFinished(SubagentFinishedLine<'a>),
    VerificationStarted(CheckStarted<'a>),
    VerificationFinished(Check<'a>),
    Finished(Ended<'a>),
}

impl Event<'_> {
    /// The kind, as the key serde writes the event under (pinned by a test).
    pub fn kind(&self) -> &'static str {
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
            run_event::Kind::Note(text) => Self::Note {
                text: Cow::from(text),
            },
            run_event::Kind::Finished(r) => Self::Finished(Ended::finished(r)),
            run_event::Kind::SubagentStarted(s) => Self::SubagentStarted(SubagentStartedLine {
                call_id: Cow::from(&s.call_id),
                child_run_id: Cow::from(&s.run_id),
                task: Cow::from(&s.task),
            }),
            run_event::Kind::SubagentFinished(f) => {
                Self::SubagentFinished(SubagentFinishedLine::from(f))
            }
            run_event::Kind::VerificationStarted(v) => Self::VerificationStarted(CheckStarted {
                command: Cow::from(&v.command),
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
#[derive(Debug, Serialize, Deserialize)]
pub struct SubagentStartedLine<'a> {
    pub call_id: Cow<'a, str>,
    pub child_run_id: Cow<'a, str>,
    pub task: Cow<'a, str>,
}

/// `subagent_finished`: how the child ended and whether its change set landed here
/// (`merge`: `merged`, `unchanged`, `conflict: <paths>`, `error: <why>`).
#[derive(Debug, Serialize, Deserialize)]
pub struct SubagentFinishedLine<'a> {
    pub call_id: Cow<'a, str>,
    pub child_run_id: Cow<'a, str>,
    /// `COMPLETED`, `FAILED`, `CANCELLED`.
    pub status: Cow<'a, str>,
    pub reason: Cow<'a, str>,
    pub turns: u32,
    pub total_tokens: u32,
    pub files_changed: u32,
    pub merge: Cow<'a, str>,
    /// The child's answer as the parent's model got it (cut).
    pub answer: Cow<'a, str>,
}

impl<'a> From<&'a baton_proto::SubagentFinished> for SubagentFinishedLine<'a> {
    fn from(f: &'a baton_proto::SubagentFinished) -> Self {
        let outcome = f.outcome.as_ref();
        Self {
            call_id: Cow::from(&f.call_id),
            child_run_id: Cow::from(outcome.map_or("", |o| o.run_id.as_str())),
            status: Cow::from(outcome.map_or("", |o| o.status().as_str_name())),
            reason: Cow::from(outcome.map_or("", |o| o.reason().as_str_name())),
            turns: outcome.map_or(0, |o| o.turns),
            total_tokens: outcome
                .and_then(|o| o.usage.as_ref())
                .map_or(0, |u| u.total_tokens),
            files_changed: outcome.map_or(0, |o| o.files_changed),
            merge: Cow::from(outcome.map_or("", |o| o.merge.as_str())),
            answer: Cow::from(&f.answer),
        }
    }
}

/// A model reply: `assistant`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Assistant<'a> {
    pub text: Cow<'a, str>,
    /// The provider's thinking text, often `""`.
    pub reasoning: Cow<'a, str>,
    /// `stop`, `tool_calls`, `length`, `content_filter`, or `""`.
    pub finish_reason: Cow<'a, str>,
    pub tool_calls: Vec<Call<'a>>,
}

impl<'a> From<&'a AssistantMessage> for Assistant<'a> {
    fn from(a: &'a AssistantMessage) -> Self {
        Self {
            text: Cow::from(&a.text),
            reasoning: Cow::from(&a.reasoning),
            finish_reason: match a.finish_reason() {
                FinishReason::Unspecified => Cow::from(""),
                other => Cow::from(other.as_str_name()),
            },
            tool_calls: a.tool_calls.iter().map(Call::from).collect(),
        }
    }
}

/// Model output as it streams: `assistant_delta`. `attempt` is the model call's attempt; a
/// new attempt's deltas start from its beginning (the earlier attempt's are abandoned).
#[derive(Debug, Serialize, Deserialize)]
pub struct AssistantDelta<'a> {
    pub attempt: u32,
    /// Text since the previous line of this attempt.
    pub text: Cow<'a, str>,
    /// Thinking text since the previous line.
    pub reasoning: Cow<'a, str>,
    /// Names of the tool calls the model started since.
    pub tool_calls: Cow<'a, [String]>,
}

/// A tool call: in `assistant`'s `tool_calls`, and `tool_started`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Call<'a> {
    pub call_id: Cow<'a, str>,
    pub tool: Cow<'a, str>,
    /// The JSON text the model wrote.
    pub arguments: Cow<'a, str>,
}

impl<'a> From<&'a ToolCall> for Call<'a> {
    fn from(c: &'a ToolCall) -> Self {
        Self {
            call_id: Cow::from(&c.id),
            tool: Cow::from(&c.name),
            arguments: Cow::from(&c.arguments),
        }
    }
}

/// `approval_decided`.
#[derive(Debug, Serialize, Deserialize)]
pub struct ApprovalDecided<'a> {
    pub call_id: Cow<'a, str>,
    pub approved: bool,
    /// The name the sender gave.
    pub approver: Cow<'a, str>,
    /// The Temporal client identity the decision came from (from history).
    pub identity: Cow<'a, str>,
    pub reason: Cow<'a, str>,
    pub remember: bool,
}

impl<'a> From<&'a ApprovalDecision> for ApprovalDecided<'a> {
    fn from(d: &'a ApprovalDecision) -> Self {
        Self {
            call_id: Cow::from(&d.call_id),
            approved: d.approved,
            approver: Cow::from(&d.approver),
            identity: Cow::from(&d.identity),
            reason: Cow::from(&d.reason),
            remember: d.remember,
        }
    }
}

/// `tool_finished`: what the model sees (`baton transcript` has full outputs).
#[derive(Debug, Serialize, Deserialize)]
pub struct ToolFinished<'a> {
    pub call_id: Cow<'a, str>,
    pub tool: Cow<'a, str>,
    pub is_error: bool,
    pub content: Cow<'a, str>,
    /// Connections the proxy refused the call's processes (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_refusals: Vec<NetworkRefusal<'a>>,
    /// How many were refused in all (absent when none; the list keeps the first 32).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub network_refused: u32,
}

/// One connection the proxy refused.
#[derive(Debug, Serialize, Deserialize)]
pub struct NetworkRefusal<'a> {
    pub host: Cow<'a, str>,
    pub port: u32,
    /// `not_allowed`, `private`, `protected`, `unresolved`, `unreachable` or `bad_request`.
    pub kind: Cow<'a, str>,
    pub reason: Cow<'a, str>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl<'a> From<&'a ToolResult> for ToolFinished<'a> {
    fn from(r: &'a ToolResult) -> Self {
        Self {
            call_id: Cow::from(&r.call_id),
            tool: Cow::from(&r.name),
            is_error: r.is_error,
            content: Cow::from(&r.content),
            network_refusals: r
                .network_refusals
                .iter()
                .map(|n| NetworkRefusal {
                    host: Cow::from(&n.host),
                    port: n.port,
                    kind: Cow::from(&n.kind),
                    reason: Cow::from(&n.reason),
                })
                .collect(),
            network_refused: r.network_refused,
        }
    }
}
