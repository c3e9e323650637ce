//! The persisted shapes of the machine's state: what `RunState` is in a continue-as-new
//! checkpoint (`Continuation.state`, serde JSON). The in-memory types may change shape; these
//! keep the JSON that earlier segments wrote, so a checkpoint taken by one build resumes in the
//! next. The golden test below pins the JSON.

use baton_proto::{TerminationReason, ToolResult};
use serde::{Deserialize, Serialize};

use super::{Batch, BatchKind, PlannedCall};

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
