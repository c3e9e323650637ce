//! A tool call run again after its worker failed: the result of one policy `on_retry = "ask"`
//! does not re-run, the earlier attempt's processes killed, and the note that tells the model
//! the call may have had effects twice.

use baton_proto::{ToolCall, ToolRequest, ToolResult};
use tracing::warn;

use super::activity::ToolProgress;
use super::orphans;

/// The result of a cut-off call that policy `on_retry = "ask"` does not re-run: a human
/// decides. Its snapshot is the workspace as the cut-off call found it (a re-run starts there).
pub(crate) fn not_rerun(
    call: &ToolCall,
    request: &ToolRequest,
    previous: &ToolProgress,
    attempt: u32,
) -> ToolResult {
    ToolResult {
        call_id: call.id.clone(),
        name: call.name.clone(),
        content: format!(
            "[baton: a worker failed while this call ran (attempt {attempt}); it was not run \
             again]"
        ),
        interrupted: true,
        snapshot: if request.snapshot.is_empty() {
            previous.base_snapshot.clone()
        } else {
            request.snapshot.clone()
        },
        ..Default::default()
    }
}

/// Kills what an earlier attempt of call `call_id` left running on this host (its worker was
/// killed outright): it must not write into this attempt's workspace.
pub(crate) async fn kill_earlier_attempts(run_id: &str, call_id: &str, attempt: u32) {
    let key = format!("{run_id}/{call_id}");
    let killed = tokio::task::spawn_blocking(move || orphans::kill_call(&key))
        .await
        .unwrap_or_default();
    if killed > 0 {
        warn!(
            run_id,
            call_id, attempt, killed, "killed processes left by an earlier attempt of this call"
        );
    }
}

/// Tells the model (and the transcript) that a call that may have side effects ran again;
/// the idempotency key lets scripts deduplicate.
pub(crate) fn mark_rerun(result: &mut ToolResult, attempt: u32, run_id: &str, call_id: &str) {
    result.content = format!(
        "[baton: this call ran again (attempt {attempt}) after its worker failed; an earlier \
         attempt may already have had effects. Idempotency key: {run_id}/{call_id}]\n{}",
        result.content
    );
}
