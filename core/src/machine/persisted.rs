//! The persisted shapes of the machine's state: what `RunState` is in a continue-as-new
//! checkpoint (`Continuation.state`, serde JSON): [`RunStateV1`], and [`BatchRepr`] for a
//! batch. The in-memory types may change shape; these keep the JSON that earlier segments
//! wrote, so a checkpoint taken by one build resumes in the next. The golden tests pin the
//! JSON (below, and `tests/checkpoint_v1.json`).

use std::collections::BTreeSet;

use baton_proto::{
    Item, RunEvent, RunSpec, TerminationReason, ToolDefinition, ToolResult, ToolRule, Usage,
    WorkspaceInstructions,
};
use serde::{Deserialize, Serialize};

use super::{
    Batch, BatchKind, FollowUps, GitHubProgress, Outputs, Phase, PlannedCall, RunState, Summary,
    VerifyState,
};

/// A [`Batch`] as checkpoints hold it: its kind as four optional fields.
#[derive(Serialize, Deserialize)]
pub(super) struct BatchRepr {
    calls: Vec<PlannedCall>,
    requested_at_ms: i64,
    #[serde(default)]
    question: Option<String>,
    /// A `TerminationReason` as its number.
    #[serde(default)]
    extend: Option<i32>,
    #[serde(default)]
    retry: bool,
    #[serde(default)]
    hosts: bool,
    #[serde(default)]
    started: Vec<String>,
    #[serde(default)]
    done: Vec<ToolResult>,
}

impl From<BatchRepr> for Batch {
    fn from(r: BatchRepr) -> Self {
        let kind = match (r.question, r.retry, r.hosts) {
            (Some(text), _, _) => BatchKind::Question {
                text,
                extend: r
                    .extend
                    .and_then(|reason| TerminationReason::try_from(reason).ok()),
            },
            (None, true, _) => BatchKind::Retry,
            (None, false, true) => BatchKind::Hosts,
            (None, false, false) => BatchKind::Tools,
        };
        Batch {
            calls: r.calls,
            requested_at_ms: r.requested_at_ms,
            kind,
            started: r.started,
            done: r.done,
        }
    }
}

impl From<Batch> for BatchRepr {
    fn from(b: Batch) -> Self {
        let (question, extend, retry, hosts) = match b.kind {
            BatchKind::Tools => (None, None, false, false),
            BatchKind::Question { text, extend } => {
                (Some(text), extend.map(|r| r as i32), false, false)
            }
            BatchKind::Retry => (None, None, true, false),
            BatchKind::Hosts => (None, None, false, true),
        };
        BatchRepr {
            calls: b.calls,
            requested_at_ms: b.requested_at_ms,
            question,
            extend,
            retry,
            hosts,
            started: b.started,
            done: b.done,
        }
    }
}

/// A [`RunState`] as a continue-as-new checkpoint holds it (`Continuation.state` in format
/// [`CHECKPOINT_FORMAT`](super::CHECKPOINT_FORMAT) 1). Each field is `RunState`'s of the same
/// name (documented there). The conversions destructure both structs whole: a field added to
/// `RunState` does not compile until it is given its place here (with `#[serde(default)]`, so
/// that older checkpoints still read) or a value when read back.
#[derive(Serialize, Deserialize)]
pub(super) struct RunStateV1 {
    run_id: String,
    spec: RunSpec,
    tools: Vec<ToolDefinition>,
    started_at_ms: i64,
    conversation: Vec<Item>,
    turn: u32,
    usage: Usage,
    consecutive_length: u32,
    partial_text: String,
    phase: Phase,
    events: Vec<RunEvent>,
    next_seq: u32,
    inbox: Vec<String>,
    seen_call_ids: BTreeSet<String>,
    #[serde(default)]
    elide_before: usize,
    #[serde(default)]
    overflow_retried: bool,
    #[serde(default)]
    remembered: Vec<ToolRule>,
    #[serde(default)]
    error_streak: u32,
    #[serde(default)]
    summary: Option<Summary>,
    #[serde(default)]
    calibration: Option<(u32, usize)>,
    #[serde(default)]
    compaction_failed_turn: Option<u32>,
    #[serde(default)]
    instructions: Option<WorkspaceInstructions>,
    #[serde(default)]
    base_limits: Option<baton_proto::Limits>,
    #[serde(default)]
    stored: Option<(String, usize)>,
    #[serde(default)]
    context_ref: Option<String>,
    #[serde(default)]
    segment: u32,
    #[serde(default)]
    workspace_snapshot: Option<String>,
    #[serde(default)]
    segment_start_turn: u32,
    #[serde(default)]
    outputs: Outputs,
    #[serde(default)]
    model_context_window: u32,
    #[serde(default)]
    prompt_capacity: u32,
    #[serde(default)]
    overflow_compacted: bool,
    #[serde(default)]
    compact_now: bool,
    #[serde(default)]
    refused_at: Option<u32>,
    #[serde(default)]
    mcp_listed: bool,
    #[serde(default)]
    subagents_started: u32,
    #[serde(default)]
    verify: VerifyState,
    #[serde(default)]
    follow_ups: FollowUps,
    #[serde(default)]
    github: GitHubProgress,
}

/// `From` both ways between two structs with the same fields: the field list is written once,
/// and each side is destructured whole, so a field either struct lacks does not compile.
macro_rules! same_fields {
    ($a:ident <=> $b:ident { $($field:ident),* $(,)? }) => {
        impl From<$a> for $b {
            fn from(s: $a) -> Self {
                let $a { $($field),* } = s;
                Self { $($field),* }
            }
        }
        impl From<$b> for $a {
            fn from(s: $b) -> Self {
                let $b { $($field),* } = s;
                Self { $($field),* }
            }
        }
    };
}

same_fields!(RunState <=> RunStateV1 {
    run_id,
    spec,
    tools,
    started_at_ms,
    conversation,
    turn,
    usage,
    consecutive_length,
    partial_text,
    phase,
    events,
    next_seq,
    inbox,
    seen_call_ids,
    elide_before,
    overflow_retried,
    remembered,
    error_streak,
    summary,
    calibration,
    compaction_failed_turn,
    instructions,
    base_limits,
    stored,
    context_ref,
    segment,
    workspace_snapshot,
    segment_start_turn,
    outputs,
    model_context_window,
    prompt_capacity,
    overflow_compacted,
    compact_now,
    refused_at,
    mcp_listed,
    subagents_started,
    verify,
    follow_ups,
    github,
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::Disposition;
    use baton_proto::ToolCall;

    fn batch(kind: BatchKind) -> Batch {
        Batch {
            calls: vec![PlannedCall {
                call: ToolCall {
                    id: "c1".into(),
                    name: "shell".into(),
                    arguments: "{}".into(),
                    ..Default::default()
                },
                disposition: Disposition::Pending,
            }],
            requested_at_ms: 7,
            kind,
            started: Vec::new(),
            done: Vec::new(),
        }
    }

    /// The checkpoint JSON of each kind of batch, as earlier builds wrote it: a change here
    /// breaks resuming their checkpoints.
    #[test]
    fn a_batch_keeps_its_checkpoint_json() {
        let call = r#""calls":[{"call":{"id":"c1","name":"shell","arguments":"{}","arguments_ref":""},"disposition":"Pending"}],"requested_at_ms":7"#;
        let tail = r#""started":[],"done":[]"#;
        let cases = [
            (
                BatchKind::Tools,
                r#""question":null,"extend":null,"retry":false,"hosts":false"#,
            ),
            (
                BatchKind::Question {
                    text: "go on?".into(),
                    extend: Some(TerminationReason::MaxTurnsExceeded),
                },
                &*format!(
                    r#""question":"go on?","extend":{},"retry":false,"hosts":false"#,
                    TerminationReason::MaxTurnsExceeded as i32
                ),
            ),
            (
                BatchKind::Retry,
                r#""question":null,"extend":null,"retry":true,"hosts":false"#,
            ),
            (
                BatchKind::Hosts,
                r#""question":null,"extend":null,"retry":false,"hosts":true"#,
            ),
        ];
        for (kind, fields) in cases {
            let b = batch(kind);
            let json = serde_json::to_string(&b).unwrap();
            assert_eq!(json, format!("{{{call},{fields},{tail}}}"));
            let back: Batch = serde_json::from_str(&json).unwrap();
            assert_eq!(back, b);
        }
        // A checkpoint written before `started`/`done` existed still resumes.
        let old =
            format!(r#"{{{call},"question":null,"extend":null,"retry":false,"hosts":false}}"#);
        assert_eq!(
            serde_json::from_str::<Batch>(&old).unwrap(),
            batch(BatchKind::Tools)
        );
    }
}
