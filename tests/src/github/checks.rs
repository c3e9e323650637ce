//! Check runs on the stand-in: `POST /repos/{owner}/{repo}/check-runs`,
//! `PATCH /repos/{owner}/{repo}/check-runs/{id}` and
//! `GET /repos/{owner}/{repo}/commits/{sha}/check-runs`, with GitHub's refusals: only a GitHub
//! App may make or change check runs (403 `You must authenticate via a GitHub App.`), a
//! `head_sha` that is no commit of the repository or a `completed` status without a
//! `conclusion` is 422. Every status a check run was given is kept, in order.

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::{Answer, Hub};
use crate::git_server::BareRepo;

/// A check run on the stand-in.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckRunRecord {
    /// Its id.
    pub id: u64,
    /// `acme/parser`.
    pub repo: String,
    /// Its name.
    pub name: String,
    /// The commit.
    pub head_sha: String,
    /// Its external id.
    pub external_id: String,
    /// Every status it was given, in order (`queued`, `in_progress`, `completed`).
    pub statuses: Vec<String>,
    /// Its conclusion once completed.
    pub conclusion: Option<String>,
    /// Its output's title and summary, as last given.
    pub title: String,
    /// Its output's summary.
    pub summary: String,
}

impl CheckRunRecord {
    fn json(&self) -> Value {
        json!({
            "id": self.id,
            "name": self.name,
            "head_sha": self.head_sha,
            "external_id": self.external_id,
            "status": self.statuses.last(),
            "conclusion": self.conclusion,
            "output": {"title": self.title, "summary": self.summary},
            "app": {"slug": "baton-app"},
        })
    }
}

/// The check-run routes; `None` for other paths.
pub(crate) fn route(
    hub: &Hub,
    repo: &BareRepo,
    full_name: &str,
    method: &str,
    rest: &[&str],
    body: &Result<Value, ()>,
    by_app: bool,
) -> Option<Answer> {
    let write = matches!(
        (method, rest),
        ("POST", ["check-runs"]) | ("PATCH", ["check-runs", _])
    );
    let list = matches!((method, rest), ("GET", ["commits", _, "check-runs"]));
    if !write && !list {
        return None;
    }
    if write && !by_app {
        return Some(Answer::message(
            StatusCode::FORBIDDEN,
            "You must authenticate via a GitHub App.",
        ));
    }
    let body = body.as_ref().ok().cloned().unwrap_or(Value::Null);
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    Some(match (method, rest) {
        ("GET", ["commits", sha, "check-runs"]) => {
            let st = hub.lock();
            let found: Vec<Value> = st
                .check_runs
                .iter()
                .filter(|c| c.repo == full_name && c.head_sha == *sha)
                .map(CheckRunRecord::json)
                .collect();
            Answer::new(
                StatusCode::OK,
                json!({"total_count": found.len(), "check_runs": found}),
            )
        }
        ("POST", ["check-runs"]) => {
            let (Some(name), Some(head_sha)) = (text(&body, "name"), text(&body, "head_sha"))
            else {
                return Some(Answer::invalid(
                    json!({"resource": "CheckRun", "code": "missing_field", "field": "head_sha"}),
                ));
            };
            let is_commit = repo
                .git(&["cat-file", "-t", &head_sha])
                .is_ok_and(|t| t.trim() == "commit");
            if !is_commit {
                return Some(Answer::invalid(
                    json!({"resource": "CheckRun", "code": "invalid", "field": "head_sha"}),
                ));
            }
            let status = text(&body, "status").unwrap_or_else(|| "queued".to_owned());
            if let Some(refusal) = refuse_status(&status, &body) {
                return Some(refusal);
            }
            let mut st = hub.lock();
            let id = 7000 + st.check_runs.len() as u64 + 1;
            let record = CheckRunRecord {
                id,
                repo: full_name.to_owned(),
                name,
                head_sha,
                external_id: text(&body, "external_id").unwrap_or_default(),
                statuses: vec![status],
                conclusion: text(&body, "conclusion"),
                title: text(&body["output"], "title").unwrap_or_default(),
                summary: text(&body["output"], "summary").unwrap_or_default(),
            };
            let json = record.json();
            st.check_runs.push(record);
            Answer::new(StatusCode::CREATED, json)
        }
        ("PATCH", ["check-runs", id]) => {
            let mut st = hub.lock();
            let Some(record) = st
                .check_runs
                .iter_mut()
                .find(|c| c.repo == full_name && id.parse() == Ok(c.id))
            else {
                return Some(Answer::not_found());
            };
            if let Some(status) = text(&body, "status") {
                if let Some(refusal) = refuse_status(&status, &body) {
                    return Some(refusal);
                }
                record.statuses.push(status);
            }
            if let Some(conclusion) = text(&body, "conclusion") {
                record.conclusion = Some(conclusion);
            }
            if let Some(title) = text(&body["output"], "title") {
                record.title = title;
            }
            if let Some(summary) = text(&body["output"], "summary") {
                record.summary = summary;
            }
            Answer::new(StatusCode::OK, record.json())
        }
        _ => Answer::not_found(),
    })
}

/// GitHub's refusal of a status: unknown, or `completed` without a conclusion.
fn refuse_status(status: &str, body: &Value) -> Option<Answer> {
    if !matches!(status, "queued" | "in_progress" | "completed") {
        return Some(Answer::invalid(
            json!({"resource": "CheckRun", "code": "invalid", "field": "status"}),
        ));
    }
    let conclusion = body.get("conclusion").and_then(Value::as_str);
    if status == "completed" && conclusion.is_none() {
        return Some(Answer::invalid(
            json!({"resource": "CheckRun", "code": "missing_field", "field": "conclusion"}),
        ));
    }
    None
}
