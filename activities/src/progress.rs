//! Activity `report_progress`: a run's comment on its GitHub issue or pull request and its
//! task's check run, brought up to date with the worker's GitHub credentials (the GitHub App's
//! installation token for the repository, or `[git.github] token_env`).
//!
//! Idempotent: a comment whose id the run does not know yet is found again by the run's
//! marker in its body, a check run by its external id, so an attempt that died after making
//! one leaves one.

use std::sync::Arc;

use baton_core::machine::comment_marker;
use baton_github::{CheckRun, GitHub, GitHubError};
use baton_proto::{ProgressReported, ProgressRequest};
use baton_workflows::activities::FailureType;
use temporalio_common::error::ApplicationFailure;
use temporalio_macros::activities;
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use tracing::info;

/// The check run's name on the commit.
pub const CHECK_NAME: &str = "baton";
/// How many pages of an issue's comments are searched for the run's marker.
const COMMENT_PAGES: u32 = 10;

/// The GitHub activities, with the worker's credentials (none: every report is refused).
pub struct ProgressService {
    github: Option<GitHub>,
}

impl ProgressService {
    /// Reports with `github`.
    pub fn new(github: Option<GitHub>) -> Self {
        Self { github }
    }
}

fn refused(message: String) -> ActivityError {
    ActivityError::application(
        ApplicationFailure::builder(message)
            .type_name(FailureType::GitHubRefused.as_str().to_owned())
            .non_retryable(true)
            .build(),
    )
}

fn failed(e: GitHubError) -> ActivityError {
    if e.is_transient() {
        ActivityError::application(ApplicationFailure::new(e.to_string()))
    } else {
        refused(e.to_string())
    }
}

#[activities]
impl ProgressService {
    /// Brings the run's comment and check run up to date.
    #[activity(definition = baton_workflows::activities::ReportProgress)]
    pub async fn report_progress(
        self: Arc<Self>,
        ctx: ActivityContext,
        request: ProgressRequest,
    ) -> Result<ProgressReported, ActivityError> {
        let github = self.github.as_ref().ok_or_else(|| {
            refused(
                "the worker has no GitHub credentials: set [git.github] app_id and \
                 private_key_file (or token_env)"
                    .to_owned(),
            )
        })?;
        let thread = request.thread.clone().unwrap_or_default();
        let Some((owner, repo)) = thread.repo.split_once('/') else {
            return Err(refused(format!(
                "'{}' is not a GitHub repository (owner/name)",
                thread.repo
            )));
        };
        let number = thread.number;
        let marker = comment_marker(&request.run_id);
        let mut comment_id = request.comment_id;
        if comment_id != 0 {
            match github
                .edit_comment(owner, repo, comment_id, &request.comment)
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_transient() => return Err(failed(e)),
                // Deleted by someone: find or make it again.
                Err(_) => comment_id = 0,
            }
        }
        if comment_id == 0 {
            let found = github
                .comments(owner, repo, number, COMMENT_PAGES)
                .await
                .map_err(failed)?
                .into_iter()
                .find(|c| c.body.contains(&marker));
            comment_id = match found {
                Some(comment) => {
                    github
                        .edit_comment(owner, repo, comment.id, &request.comment)
                        .await
                        .map_err(failed)?;
                    comment.id
                }
                None => {
                    github
                        .comment(owner, repo, number, &request.comment)
                        .await
                        .map_err(failed)?
                        .id
                }
            };
        }
        let mut check_run_id = 0;
        if !request.check_status.is_empty() && !request.head_sha.is_empty() {
            let check = CheckRun {
                name: CHECK_NAME,
                head_sha: &request.head_sha,
                external_id: &request.check_external_id,
                status: &request.check_status,
                conclusion: &request.conclusion,
                title: &request.title,
                summary: &request.summary,
            };
            check_run_id = github
                .check_run(owner, repo, request.check_run_id, &check)
                .await
                .map_err(failed)?;
        }
        let run_id = ctx.info().workflow_id.clone().unwrap_or_default();
        info!(run_id, repo = %thread.repo, number, comment_id, check_run_id, status = %request.check_status, "progress reported");
        Ok(ProgressReported {
            comment_id,
            check_run_id,
        })
    }
}
