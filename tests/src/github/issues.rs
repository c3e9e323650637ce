//! Issues, comments, permissions and repositories on the stand-in:
//! `GET /repos/{owner}/{repo}`, `GET /repos/{owner}/{repo}/commits/{ref}`,
//! `GET /repos/{owner}/{repo}/collaborators/{user}/permission`,
//! `GET|POST /repos/{owner}/{repo}/issues/{n}/comments`,
//! `PATCH /repos/{owner}/{repo}/issues/comments/{id}`, in GitHub's shapes and with its
//! refusals (422 `missing_field` for a comment without a body, 404 for what is not there).

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::{Answer, Hub};
use crate::git_server::BareRepo;

/// A comment on the stand-in.
#[derive(Debug, Clone, PartialEq)]
pub struct IssueComment {
    /// Its id.
    pub id: u64,
    /// `acme/parser`.
    pub repo: String,
    /// The issue or pull request.
    pub issue: u64,
    /// Its text (after every edit).
    pub body: String,
    /// Who wrote it: the app's bot for an installation token, else `baton-test`.
    pub author: String,
    /// Edits made to it.
    pub edits: u32,
}

impl IssueComment {
    fn json(&self) -> Value {
        json!({
            "id": self.id,
            "node_id": format!("IC_{}", self.id),
            "html_url": format!("https://github.com/{}/issues/{}#issuecomment-{}", self.repo, self.issue, self.id),
            "body": self.body,
            "user": {"login": self.author, "type": if self.author.ends_with("[bot]") { "Bot" } else { "User" }},
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
        })
    }
}

/// The repository, permission and comment routes of `repo` (`owner/name`); `None` for other
/// paths. `author` is who the request's token acts as.
pub(crate) fn route(
    hub: &Hub,
    repo: &BareRepo,
    full_name: &str,
    method: &str,
    rest: &[&str],
    body: &Result<Value, ()>,
    author: &str,
) -> Option<Answer> {
    Some(match (method, rest) {
        ("GET", []) => {
            let default_branch = repo
                .git(&["symbolic-ref", "--short", "HEAD"])
                .map(|b| b.trim().to_owned())
                .unwrap_or_else(|_| "main".to_owned());
            let clone_base = hub.lock().clone_base.clone();
            Answer::new(
                StatusCode::OK,
                json!({"full_name": full_name, "name": full_name.split('/').nth(1),
                       "private": false, "default_branch": default_branch,
                       "clone_url": format!("{clone_base}/{full_name}.git")}),
            )
        }
        ("GET", ["commits", reference]) => match repo.git(&[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{reference}^{{commit}}"),
        ]) {
            Ok(sha) if !sha.trim().is_empty() => Answer::new(
                StatusCode::OK,
                json!({"sha": sha.trim(), "commit": {"message": ""}}),
            ),
            _ => Answer::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                json!({"message": format!("No commit found for SHA: {reference}"),
                       "documentation_url": super::DOCS, "status": "422"}),
            ),
        },
        ("GET", ["collaborators", user, "permission"]) => {
            let role = hub
                .lock()
                .permissions
                .get(&user.to_ascii_lowercase())
                .cloned()
                // A public repository: anyone may read.
                .unwrap_or_else(|| "read".to_owned());
            let permission = match role.as_str() {
                "maintain" => "write",
                "triage" => "read",
                other => other,
            };
            Answer::new(
                StatusCode::OK,
                json!({"permission": permission, "role_name": role, "user": {"login": user}}),
            )
        }
        ("GET", ["issues", number, "comments"]) => {
            let st = hub.lock();
            let listed: Vec<Value> = st
                .comments
                .iter()
                .filter(|c| c.repo == full_name && number.parse() == Ok(c.issue))
                .map(IssueComment::json)
                .collect();
            Answer::new(StatusCode::OK, Value::Array(listed))
        }
        ("POST", ["issues", number, "comments"]) => {
            let Ok(issue) = number.parse::<u64>() else {
                return Some(Answer::not_found());
            };
            let Some(text) = text_of(body) else {
                return Some(missing_body());
            };
            let mut st = hub.lock();
            st.next_comment_id += 1;
            let comment = IssueComment {
                id: 9000 + st.next_comment_id,
                repo: full_name.to_owned(),
                issue,
                body: text,
                author: author.to_owned(),
                edits: 0,
            };
            let json = comment.json();
            st.comments.push(comment);
            Answer::new(StatusCode::CREATED, json)
        }
        ("PATCH", ["issues", "comments", id]) => {
            let Some(text) = text_of(body) else {
                return Some(missing_body());
            };
            let mut st = hub.lock();
            let found = st
                .comments
                .iter_mut()
                .find(|c| c.repo == full_name && id.parse() == Ok(c.id));
            match found {
                Some(comment) => {
                    comment.body = text;
                    comment.edits += 1;
                    Answer::new(StatusCode::OK, comment.json())
                }
                None => Answer::not_found(),
            }
        }
        _ => return None,
    })
}

fn text_of(body: &Result<Value, ()>) -> Option<String> {
    body.as_ref()
        .ok()?
        .get("body")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

fn missing_body() -> Answer {
    Answer::invalid(json!({"resource": "IssueComment", "code": "missing_field", "field": "body"}))
}
