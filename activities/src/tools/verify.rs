//! Activity `run_verification`: one of the run's verification commands, run by the
//! workflow when the model answers, not chosen by the model.
//!
//! The workspace is brought to the request's snapshot first (forced on a retry: an earlier
//! attempt's command may have written into it on this worker, and that attempt's processes
//! are killed), the command runs with `sh -c` under the run's sandbox without network, and the
//! tree is restored to the snapshot afterwards: verification leaves nothing behind (build
//! outputs, caches), so the model's next turn and the change set see the tree it checked.

use std::time::Duration;

use baton_proto::{SandboxPolicy, Verification, VerifyRequest};
use baton_sandbox::Sandbox;
use serde::{Deserialize, Serialize};
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::activity::{HEARTBEAT_EVERY, ToolService};
use super::{ToolContext, ToolError, orphans, shell};
use crate::heartbeat::{self, Heartbeat};

/// The end of a command's output kept in its [`Verification`] (and told to the model).
pub const OUTPUT_TAIL_BYTES: usize = 4096;

/// Progress a running check reports in its heartbeats.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct VerifyProgress {
    elapsed_secs: u64,
}

/// The sandbox a check runs under: the run's mode (a read-only run's checks may still build,
/// since the tree is restored after them), never any network.
pub(crate) fn check_policy(run: Option<&SandboxPolicy>) -> SandboxPolicy {
    let mode = match run.map(|p| p.mode.as_str()) {
        Some("off") => "off",
        _ => "workspace-write",
    };
    SandboxPolicy {
        mode: mode.to_owned(),
        ..SandboxPolicy::default()
    }
}

/// The last `max` bytes of `text` (on a character boundary), marked when cut.
fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("[... {} bytes before]\n{}", start, &text[start..])
}

/// A failure of the activity: retried, or (`retryable` false) not, as `BadInput`.
pub(crate) fn failure(message: String, retryable: bool) -> ActivityError {
    if retryable {
        super::activity::infrastructure(message)
    } else {
        super::activity::permanent(message)
    }
}

impl ToolService {
    /// Runs one verification command; its exit code is the result, not an activity failure.
    pub(crate) async fn verification(
        &self,
        ctx: ActivityContext,
        request: VerifyRequest,
    ) -> Result<Verification, ActivityError> {
        let info = ctx.info();
        let run_id = info.workflow_id.clone().unwrap_or_default();
        let attempt = info.attempt;
        if heartbeat::superseded(&ctx, VerifyProgress::default()).await {
            warn!(
                run_id,
                attempt, "verification attempt not run: the server retried it already"
            );
            return Err(ActivityError::cancelled());
        }
        let started = tokio::time::Instant::now();
        let _beat = Heartbeat::start(&ctx, HEARTBEAT_EVERY, move || VerifyProgress {
            elapsed_secs: started.elapsed().as_secs(),
        });
        let workspace = self.workspace_of(&run_id);
        let _in_use = self.hold_workspace(&run_id).await;
        let key = format!("{run_id}/verify-{}-{}", request.round, request.index);
        if attempt > 1 {
            let owned = key.clone();
            let killed = tokio::task::spawn_blocking(move || orphans::kill_call(&owned))
                .await
                .unwrap_or_default();
            if killed > 0 {
                warn!(
                    run_id,
                    attempt, killed, "killed processes left by an earlier attempt of this check"
                );
            }
        }
        if request.snapshot.is_empty() {
            tokio::fs::create_dir_all(&workspace).await.map_err(|e| {
                failure(
                    format!("cannot create the workspace {}: {e}", workspace.display()),
                    true,
                )
            })?;
        } else {
            self.ensure_snapshot(&run_id, &workspace, &request.snapshot, attempt > 1)
                .await?;
        }
        let sandbox = Sandbox::resolve(
            Some(&check_policy(request.sandbox.as_ref())),
            self.sandbox(),
        )
        .map_err(|e| failure(e.to_string(), e.is_retryable()))?;
        let tool_ctx = ToolContext {
            workspace: workspace.clone(),
            timeout: Duration::from_secs(u64::from(request.timeout_seconds.max(1))),
            env: vec![
                ("BATON_RUN_ID".to_owned(), run_id.clone()),
                (orphans::CALL_ENV.to_owned(), key),
                ("BATON_ATTEMPT".to_owned(), attempt.to_string()),
                ("BATON_VERIFY".to_owned(), "1".to_owned()),
            ],
            cancel: CancellationToken::new(),
            sandbox,
        };
        info!(run_id, round = request.round, index = request.index, command = %request.command, attempt, "verification started");
        let outcome = run_recorded(&ctx, &tool_ctx, &request.command, self.store(), &[]).await;
        // Whatever the command left behind goes before anything else sees the tree.
        if !request.snapshot.is_empty() {
            self.ensure_snapshot(&run_id, &workspace, &request.snapshot, true)
                .await?;
        }
        let mut verification = outcome?;
        verification.round = request.round;
        info!(
            run_id,
            round = request.round,
            index = request.index,
            exit_code = verification.exit_code,
            duration_ms = verification.duration_ms,
            "verification finished"
        );
        Ok(verification)
    }
}

/// Runs `command` under `tool_ctx` (stopped when the activity is cancelled) and records how
/// it went: exit code, duration, the end of its output, the whole output in the store. Every
/// value of `scrub` (a secret) is replaced by `[secret NAME]` in what is kept.
pub(crate) async fn run_recorded(
    ctx: &ActivityContext,
    tool_ctx: &ToolContext,
    command: &str,
    store: &baton_store::SharedStore,
    scrub: &[(String, String)],
) -> Result<Verification, ActivityError> {
    let clock = std::time::Instant::now();
    let run = shell::run_command(tool_ctx, command, tool_ctx.timeout);
    tokio::pin!(run);
    let outcome = tokio::select! {
        r = &mut run => r,
        () = ctx.cancelled() => {
            tool_ctx.cancel.cancel();
            run.await
        }
    };
    let duration_ms = u64::try_from(clock.elapsed().as_millis()).unwrap_or(u64::MAX);
    let ran = match outcome {
        Ok(ran) => ran,
        Err(ToolError::Cancelled) => return Err(ActivityError::cancelled()),
        Err(ToolError::Sandbox(e)) => return Err(failure(e.to_string(), e.is_retryable())),
        Err(e) => return Err(failure(e.to_string(), true)),
    };
    let status = if ran.timed_out {
        format!("timed out after {} s", tool_ctx.timeout.as_secs())
    } else {
        ran.status_line.clone()
    };
    let output = ran
        .full
        .strip_prefix(ran.status_line.as_str())
        .unwrap_or(&ran.full)
        .trim_start_matches('\n');
    let output = scrubbed(output, scrub);
    let output_tail = tail(&output, OUTPUT_TAIL_BYTES);
    let output_blob = if output_tail.len() < output.len() {
        match store.put(output.as_bytes().to_vec()).await {
            Ok(id) => id.to_string(),
            Err(e) => {
                warn!(cause = %e, "command output not stored; only its tail is kept");
                String::new()
            }
        }
    } else {
        String::new()
    };
    Ok(Verification {
        command: command.to_owned(),
        exit_code: ran.exit_code.unwrap_or(-1),
        duration_ms,
        output_tail,
        output_blob,
        timed_out: ran.timed_out,
        round: 0,
        status,
    })
}

/// `text` with every secret value replaced by `[secret NAME]`.
pub(crate) fn scrubbed(text: &str, secrets: &[(String, String)]) -> String {
    let mut text = text.to_owned();
    for (name, value) in secrets {
        if !value.is_empty() {
            text = text.replace(value.as_str(), &format!("[secret {name}]"));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_is_cut_on_a_character_boundary_and_says_so() {
        let text = format!("{}é{}", "a".repeat(10), "b".repeat(5));
        assert_eq!(tail(&text, 100), text);
        let cut = tail(&text, 6);
        assert!(cut.ends_with("bbbbb"), "{cut}");
        assert!(cut.starts_with("[... 12 bytes before]\n"), "{cut}");
    }

    #[test]
    fn secrets_are_scrubbed_from_what_is_kept() {
        let secrets = [
            ("NPM_TOKEN".to_owned(), "s3cr3t".to_owned()),
            ("EMPTY".to_owned(), String::new()),
        ];
        assert_eq!(
            scrubbed("auth s3cr3t ok s3cr3t", &secrets),
            "auth [secret NPM_TOKEN] ok [secret NPM_TOKEN]"
        );
    }

    #[test]
    fn checks_never_get_the_network_and_keep_an_off_sandbox_off() {
        let run = SandboxPolicy {
            mode: "read-only".into(),
            network: true,
            allowed_hosts: vec!["example.com".into()],
            ..SandboxPolicy::default()
        };
        let policy = check_policy(Some(&run));
        assert_eq!(policy.mode, "workspace-write");
        assert!(!policy.network && policy.allowed_hosts.is_empty());
        let off = SandboxPolicy {
            mode: "off".into(),
            ..SandboxPolicy::default()
        };
        assert_eq!(check_policy(Some(&off)).mode, "off");
        assert_eq!(check_policy(None).mode, "workspace-write");
    }
}
