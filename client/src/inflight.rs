//! What a run is waiting on right now, as the server sees it: its pending activities (the model
//! call, tool call or compaction in flight), with their attempt, last failure and next retry.
//! Read from describe, so it works with no worker up, and it is what tells a user that a run
//! that says THINKING is in fact riding out a provider's rate limit.

use temporalio_common::data_converters::DataConverter;
use temporalio_common::protos::temporal::api::{
    enums::v1::PendingActivityState, workflow::v1::PendingActivityInfo,
    workflowservice::v1::DescribeWorkflowExecutionResponse,
};

use crate::render;

/// One pending activity of a run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct InFlight {
    /// The activity type: `llm_generate`, `run_tool`, `mcp_call_tool`, `mcp_list_tools`,
    /// `compact_context`, `read_instructions`, ...
    pub(crate) activity: String,
    /// For a tool call, its call id (with `-rerun` for a confirmed re-run).
    pub(crate) activity_id: String,
    pub(crate) state: PendingActivityState,
    /// 1 for the first try.
    pub(crate) attempt: i32,
    /// 0: no limit.
    pub(crate) maximum_attempts: i32,
    /// The last attempt's error, decoded (or why it cannot be read).
    pub(crate) last_failure: Option<String>,
    pub(crate) scheduled_at_ms: Option<i64>,
    pub(crate) started_at_ms: Option<i64>,
    pub(crate) last_heartbeat_at_ms: Option<i64>,
    /// When the next attempt starts, while the activity waits to be retried.
    pub(crate) next_attempt_at_ms: Option<i64>,
}

/// The pending activities in `desc`, their failures decoded with `dc`.
pub(crate) async fn read(
    dc: &DataConverter,
    desc: &DescribeWorkflowExecutionResponse,
) -> Vec<InFlight> {
    let mut out = Vec::with_capacity(desc.pending_activities.len());
    for p in &desc.pending_activities {
        out.push(one(dc, p).await);
    }
    out
}

/// An optional protobuf timestamp in milliseconds since the epoch (a macro: the SDK's timestamp
/// type is not one this crate can name).
macro_rules! ms {
    ($t:expr) => {
        $t.as_ref()
            .map(|t| t.seconds * 1000 + i64::from(t.nanos / 1_000_000))
    };
}

async fn one(dc: &DataConverter, p: &PendingActivityInfo) -> InFlight {
    let last_failure = match &p.last_failure {
        Some(f) => Some(
            baton_codec::failure_message(dc, f)
                .await
                .unwrap_or_else(|e| format!("(cannot be read: {e})")),
        ),
        None => None,
    };
    InFlight {
        activity: p
            .activity_type
            .as_ref()
            .map(|t| t.name.clone())
            .unwrap_or_default(),
        activity_id: p.activity_id.clone(),
        state: p.state(),
        attempt: p.attempt,
        maximum_attempts: p.maximum_attempts,
        last_failure,
        scheduled_at_ms: ms!(p.scheduled_time),
        started_at_ms: ms!(p.last_started_time),
        // A heartbeat of an earlier attempt says nothing about this one.
        last_heartbeat_at_ms: ms!(p.last_heartbeat_time)
            .filter(|beat| ms!(p.last_started_time).is_none_or(|started| *beat >= started)),
        next_attempt_at_ms: ms!(p.next_attempt_schedule_time),
    }
}

/// What an activity type is, for people.
fn what(activity: &str) -> &str {
    match activity {
        "llm_generate" => "model call",
        "run_tool" => "tool call",
        "mcp_call_tool" => "MCP tool call",
        "mcp_list_tools" => "listing an MCP server's tools",
        "compact_context" => "compaction",
        "read_instructions" => "reading the workspace's instructions",
        other => other,
    }
}

/// One line for `status`, e.g. `tool call call_1: retrying: attempt 3 of 5 in 12s; last error: ...`.
pub(crate) fn human(a: &InFlight, now_ms: i64) -> String {
    let since = |at: i64| render::duration(((now_ms - at).max(0) / 1000) as u64);
    // A model call's attempt limit in the workflow is only an envelope: the worker's budget of
    // the provider ends it sooner, and its last error says which attempt of how many it was.
    let model_call = matches!(a.activity.as_str(), "llm_generate" | "compact_context");
    let attempt = if a.maximum_attempts > 0 && !model_call {
        format!("attempt {} of {}", a.attempt, a.maximum_attempts)
    } else {
        format!("attempt {}", a.attempt)
    };
    let tool_call = matches!(a.activity.as_str(), "run_tool" | "mcp_call_tool");
    let mut line = if tool_call && !a.activity_id.is_empty() {
        format!(
            "{} {}: ",
            what(&a.activity),
            crate::safe_text::escape_line(&a.activity_id)
        )
    } else {
        format!("{}: ", what(&a.activity))
    };
    match a.state {
        PendingActivityState::Started | PendingActivityState::PauseRequested => {
            line.push_str(&format!(
                "running for {}",
                since(a.started_at_ms.unwrap_or(now_ms))
            ));
            if a.attempt > 1 {
                line.push_str(&format!(" ({attempt})"));
            }
            if let Some(beat) = a.last_heartbeat_at_ms {
                line.push_str(&format!(", last heartbeat {} ago", since(beat)));
            }
        }
        PendingActivityState::CancelRequested => line.push_str("being cancelled"),
        PendingActivityState::Paused => line.push_str(&format!("paused on the server ({attempt})")),
        PendingActivityState::Scheduled | PendingActivityState::Unspecified => {
            match a.next_attempt_at_ms {
                Some(next) if next > now_ms => line.push_str(&format!(
                    "retrying: {attempt} in {}",
                    render::duration(((next - now_ms) / 1000).max(1) as u64)
                )),
                _ if a.attempt > 1 => {
                    line.push_str(&format!("retrying: {attempt} waits for a worker"));
                }
                _ => line.push_str(&format!(
                    "waiting {} for a worker to pick it up (is one running on the run's task queue?)",
                    since(a.scheduled_at_ms.unwrap_or(now_ms))
                )),
            }
        }
    }
    if let Some(failure) = &a.last_failure {
        line.push_str(&format!("; last error: {}", render::one_line(failure, 300)));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_000_000_000;

    fn base(activity: &str, state: PendingActivityState) -> InFlight {
        InFlight {
            activity: activity.into(),
            activity_id: "call_2_1".into(),
            state,
            attempt: 1,
            maximum_attempts: 0,
            last_failure: None,
            scheduled_at_ms: Some(NOW - 35_000),
            started_at_ms: None,
            last_heartbeat_at_ms: None,
            next_attempt_at_ms: None,
        }
    }

    #[test]
    fn a_model_call_waiting_for_its_retry_says_when_and_why() {
        let a = InFlight {
            attempt: 3,
            maximum_attempts: 10,
            last_failure: Some("openai rate limited the request (429):\nslow down".into()),
            next_attempt_at_ms: Some(NOW + 12_400),
            ..base("llm_generate", PendingActivityState::Scheduled)
        };
        assert_eq!(
            human(&a, NOW),
            "model call: retrying: attempt 3 in 12s; last error: openai rate limited the \
             request (429): slow down"
        );
        let tool = InFlight {
            activity: "run_tool".into(),
            ..a
        };
        assert!(
            human(&tool, NOW).starts_with("tool call call_2_1: retrying: attempt 3 of 10 in 12s"),
            "{}",
            human(&tool, NOW)
        );
    }

    #[test]
    fn a_running_tool_shows_its_age_and_heartbeat() {
        let a = InFlight {
            started_at_ms: Some(NOW - 125_000),
            last_heartbeat_at_ms: Some(NOW - 3_000),
            ..base("run_tool", PendingActivityState::Started)
        };
        assert_eq!(
            human(&a, NOW),
            "tool call call_2_1: running for 2m 5s, last heartbeat 3s ago"
        );
    }

    #[test]
    fn a_call_no_worker_picked_up_says_so() {
        let a = base("llm_generate", PendingActivityState::Scheduled);
        assert_eq!(
            human(&a, NOW),
            "model call: waiting 35s for a worker to pick it up (is one running on the run's \
             task queue?)"
        );
    }
}
