//! Progress where people look (`RunSpec.github`, runs `baton serve` starts): before a step that
//! changes what a person should see, the run asks for a report ([`RunState::progress_request`]:
//! activity `report_progress`): one comment on the issue or pull request, edited as the run
//! goes (working with turn, tokens and cost; the calls waiting for approval, whole, with the
//! commands to answer; the result with the diffstat, the pull request and the checks), and a
//! check run per task on the commit the task works on (in progress, then completed). Reports
//! are keyed, so each state is reported once; runs without `github` report nothing.

use std::fmt::Write as _;

use baton_proto::{
    ProgressReported, ProgressRequest, RunResult, RunState as StateName, TerminationReason,
};
use serde::{Deserialize, Serialize};

use super::{RunState, Step};

/// A working task is reported again every this many turns.
pub const PROGRESS_EVERY_TURNS: u32 = 5;
/// Longest answer a comment quotes (bytes); the rest is in `baton result`.
const ANSWER_BYTES: usize = 6_000;
/// Longest arguments a comment shows per call (bytes; GitHub takes 65,536 per comment).
const ARGUMENTS_BYTES: usize = 8_000;

/// What was reported, and where.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct GitHubProgress {
    /// The key of the last report: a state is reported once.
    #[serde(default)]
    pub key: String,
    /// The run's comment, once made.
    #[serde(default)]
    pub comment_id: u64,
    /// The current task's check run, once made.
    #[serde(default)]
    pub check_run_id: u64,
    /// The task `check_run_id` belongs to.
    #[serde(default)]
    pub check_task: u32,
}

/// The marker that finds the run's comment again (a report whose answer was lost).
pub fn comment_marker(run_id: &str) -> String {
    format!("<!-- baton-run: {run_id} -->")
}

impl RunState {
    /// The report due before `step`, if the run reports to GitHub and what it shows changed.
    pub fn progress_request(&mut self, step: &Step) -> Option<ProgressRequest> {
        let thread = self.spec.github.clone()?;
        let task = self.task_number();
        let (key, check_status, conclusion, title) = match step {
            Step::CollectChanges(_) | Step::Deliver(_) => return None,
            Step::AwaitApproval { .. } => {
                let ids: Vec<String> = self
                    .pending_calls()
                    .into_iter()
                    .map(|c| c.call_id)
                    .collect();
                (
                    format!("waiting:{task}:{}", ids.join(",")),
                    "in_progress",
                    "",
                    format!("Waiting for approval of {}", ids.join(", ")),
                )
            }
            Step::AwaitMessage { .. } => (
                format!("idle:{task}"),
                "completed",
                "success",
                format!("Task {task} answered"),
            ),
            Step::Finish(result) => {
                let conclusion = match result.status() {
                    StateName::Completed => "success",
                    StateName::Cancelled => "cancelled",
                    _ => "failure",
                };
                (
                    "done".to_owned(),
                    "completed",
                    conclusion,
                    ended_title(result),
                )
            }
            _ => {
                let turns = self.turn.saturating_sub(self.follow_ups.task_turn);
                (
                    format!("working:{task}:{}", turns / PROGRESS_EVERY_TURNS),
                    "in_progress",
                    "",
                    format!("Working on task {task}"),
                )
            }
        };
        if key == self.github.key {
            return None;
        }
        self.github.key = key;
        if self.github.check_task != task {
            self.github.check_task = task;
            self.github.check_run_id = 0;
        }
        let summary = self.progress_text(step, &title);
        let mut comment = summary.clone();
        let _ = write!(comment, "\n\n{}", comment_marker(&self.run_id));
        let head_sha = self
            .outputs
            .start
            .as_ref()
            .map(|s| s.commit.clone())
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| thread.head_sha.clone());
        Some(ProgressRequest {
            thread: Some(thread),
            run_id: self.run_id.clone(),
            comment,
            check_status: if head_sha.is_empty() {
                String::new()
            } else {
                check_status.to_owned()
            },
            conclusion: conclusion.to_owned(),
            title,
            summary,
            head_sha,
            comment_id: self.github.comment_id,
            check_run_id: self.github.check_run_id,
            check_external_id: format!("{}/task-{task}", self.run_id),
        })
    }

    /// The first report, before the workspace is prepared: the run is queued (its check run
    /// on the commit `baton serve` saw). `None` once reported, or without a thread.
    pub fn progress_queued(&mut self) -> Option<ProgressRequest> {
        let thread = self.spec.github.clone()?;
        if !self.github.key.is_empty() || self.result().is_some() {
            return None;
        }
        self.github.key = "queued:1".to_owned();
        self.github.check_task = 1;
        let title = "Queued".to_owned();
        let summary = format!(
            "**baton** run `{}`: queued; it starts once its workspace is ready.\n",
            self.run_id
        );
        Some(ProgressRequest {
            comment: format!("{summary}\n\n{}", comment_marker(&self.run_id)),
            check_status: if thread.head_sha.is_empty() {
                String::new()
            } else {
                "queued".to_owned()
            },
            head_sha: thread.head_sha.clone(),
            thread: Some(thread),
            run_id: self.run_id.clone(),
            conclusion: String::new(),
            title,
            summary,
            comment_id: 0,
            check_run_id: 0,
            check_external_id: format!("{}/task-1", self.run_id),
        })
    }

    /// The report went out: later ones edit the same comment and check run.
    pub(crate) fn on_progress_reported(&mut self, reported: ProgressReported) {
        if reported.comment_id != 0 {
            self.github.comment_id = reported.comment_id;
        }
        if reported.check_run_id != 0 {
            self.github.check_run_id = reported.check_run_id;
        }
    }

    /// The report could not go out (the run goes on; the next state is reported as usual).
    pub(crate) fn on_progress_failed(&mut self, detail: &str, now_ms: i64) {
        self.note(
            now_ms,
            &format!("progress could not be posted to GitHub: {detail}"),
        );
    }

    /// The comment's text for `step`.
    fn progress_text(&self, step: &Step, title: &str) -> String {
        let usage = self.usage;
        let mut text = format!(
            "**baton** run `{}`: {title}\n\nTask {}, turn {}, {} tokens, ${:.2}\n",
            self.run_id,
            self.task_number(),
            self.turn,
            usage.total_tokens,
            usage.cost_usd
        );
        match step {
            Step::AwaitApproval { .. } => {
                text.push_str("\nWaiting for approval:\n");
                for call in self.pending_calls() {
                    let mut arguments = call.arguments.clone();
                    crate::view::cut_text(&mut arguments, ARGUMENTS_BYTES);
                    let _ = write!(
                        text,
                        "\n- `{}` **{}**\n\n````json\n{}\n````\n",
                        call.call_id,
                        call.tool,
                        arguments.replace("````", "` ` ` `")
                    );
                }
                text.push_str(
                    "\nReply `/approve <call id>`, `/approve all` (exactly the calls above) or \
                     `/deny <call id> <reason>`.\n",
                );
            }
            Step::AwaitMessage { timeout_seconds } => {
                if let Some(result) = self.result() {
                    answer_text(&mut text, &self.with_outputs(result.clone()));
                }
                let _ = write!(
                    text,
                    "\nComment `/baton <more>` within {} to give this run its next task.\n",
                    human_seconds(*timeout_seconds)
                );
            }
            Step::Finish(result) => answer_text(&mut text, result),
            _ => {}
        }
        text
    }
}

fn ended_title(result: &RunResult) -> String {
    match result.reason() {
        TerminationReason::Completed => "Completed".to_owned(),
        TerminationReason::Cancelled => "Cancelled".to_owned(),
        other => format!("Ended: {}", other.as_str_name()),
    }
}

/// The answer, the changes, the pull request and the checks of `result`.
fn answer_text(text: &mut String, result: &RunResult) {
    if !result.detail.is_empty() && result.reason() != TerminationReason::Completed {
        let _ = writeln!(text, "\n{}", result.detail);
    }
    if !result.answer.is_empty() {
        let mut answer = result.answer.clone();
        crate::view::cut_text(&mut answer, ANSWER_BYTES);
        let quoted: Vec<String> = answer.lines().map(|l| format!("> {l}")).collect();
        let _ = writeln!(text, "\n{}", quoted.join("\n"));
    }
    if let Some(changes) = &result.changes
        && changes.files_changed > 0
    {
        let _ = writeln!(
            text,
            "\n{} file{} changed, +{} -{}:\n",
            changes.files_changed,
            if changes.files_changed == 1 { "" } else { "s" },
            changes.insertions,
            changes.deletions
        );
        for file in &changes.files {
            let _ = writeln!(
                text,
                "- `{}` {} (+{} -{})",
                file.path, file.status, file.insertions, file.deletions
            );
        }
    }
    if let Some(delivered) = &result.delivered {
        if !delivered.pull_request_url.is_empty() {
            let _ = writeln!(
                text,
                "\nPull request: {} (commit {})",
                delivered.pull_request_url,
                delivered.commit.get(..12).unwrap_or(&delivered.commit)
            );
        } else if !delivered.error.is_empty() {
            let _ = writeln!(text, "\nNot delivered: {}", delivered.error);
        }
    }
    if !result.verification.is_empty() {
        text.push_str("\nChecks:\n");
        for check in &result.verification {
            let _ = writeln!(
                text,
                "- `{}`: {}",
                check.command.replace('`', "'"),
                if check.exit_code == 0 {
                    "passed".to_owned()
                } else {
                    check.status.clone()
                }
            );
        }
    }
}

fn human_seconds(secs: u32) -> String {
    match secs {
        s if s % 86_400 == 0 => format!("{} d", s / 86_400),
        s if s % 3_600 == 0 => format!("{} h", s / 3_600),
        s if s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}
