//! Webhook deliveries: the events `baton serve` acts on, read from GitHub's payloads
//! (`X-GitHub-Event` names the event, `X-GitHub-Delivery` the delivery). Only the fields baton
//! uses are read; a payload missing one of them is refused with its name.

use serde::Deserialize;

/// The repository an event is about.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct EventRepository {
    /// `owner/repo`.
    pub full_name: String,
    /// Its default branch.
    pub default_branch: String,
    /// Its HTTPS clone URL.
    pub clone_url: String,
}

impl EventRepository {
    /// `(owner, repo)` of `full_name`.
    pub fn owner_and_name(&self) -> (&str, &str) {
        self.full_name
            .split_once('/')
            .unwrap_or(("", &self.full_name))
    }
}

/// A GitHub user as payloads carry it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct User {
    /// The login.
    pub login: String,
    /// `User` or `Bot`.
    #[serde(rename = "type", default)]
    pub kind: String,
}

/// An issue (or, with `pull_request` set, a pull request) as payloads carry it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Issue {
    /// Its number.
    pub number: u64,
    /// Its title.
    pub title: String,
    /// Its body (GitHub sends null for an empty one).
    #[serde(default)]
    pub body: Option<String>,
    /// Present when the issue is a pull request.
    #[serde(default)]
    pub pull_request: Option<serde_json::Value>,
    /// Its web page.
    #[serde(default)]
    pub html_url: String,
}

impl Issue {
    /// Whether this issue is a pull request.
    pub fn is_pull_request(&self) -> bool {
        self.pull_request.is_some()
    }
}

/// A comment as payloads carry it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct IssueComment {
    /// Its id.
    pub id: u64,
    /// Its text.
    pub body: String,
    /// Who wrote it.
    pub user: User,
}

/// A label as payloads carry it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Label {
    /// Its name.
    pub name: String,
}

/// The app installation that sent the event (absent for repository webhooks).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Installation {
    /// Its id.
    pub id: u64,
}

/// An event `baton serve` reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `ping`: sent when the webhook is made.
    Ping,
    /// `issues` with action `labeled`.
    IssueLabeled {
        /// The issue.
        issue: Issue,
        /// The label added.
        label: Label,
        /// Who added it.
        sender: User,
        /// Where.
        repository: EventRepository,
    },
    /// `issue_comment` with action `created`, on an issue or a pull request.
    CommentCreated {
        /// The issue or pull request.
        issue: Issue,
        /// The comment.
        comment: IssueComment,
        /// Where.
        repository: EventRepository,
    },
    /// Anything else: acknowledged, nothing done.
    Other {
        /// `X-GitHub-Event`.
        event: String,
        /// The payload's `action`, if any.
        action: String,
    },
}

/// Why a payload could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the {event} payload cannot be read: {reason}")]
pub struct PayloadError {
    event: String,
    reason: String,
}

impl Event {
    /// Reads the payload `body` of event `event` (`X-GitHub-Event`).
    pub fn parse(event: &str, body: &[u8]) -> Result<Self, PayloadError> {
        let fail = |reason: String| PayloadError {
            event: event.to_owned(),
            reason,
        };
        let value: serde_json::Value =
            serde_json::from_slice(body).map_err(|e| fail(format!("not JSON: {e}")))?;
        let action = value
            .get("action")
            .and_then(|a| a.as_str())
            .unwrap_or("")
            .to_owned();
        let field = |name: &str| {
            value
                .get(name)
                .cloned()
                .ok_or_else(|| fail(format!("no \"{name}\"")))
        };
        fn typed<T: serde::de::DeserializeOwned>(
            name: &str,
            v: serde_json::Value,
        ) -> Result<T, String> {
            serde_json::from_value(v).map_err(|e| format!("\"{name}\": {e}"))
        }
        Ok(match (event, action.as_str()) {
            ("ping", _) => Self::Ping,
            ("issues", "labeled") => Self::IssueLabeled {
                issue: typed("issue", field("issue")?).map_err(fail)?,
                label: typed("label", field("label")?).map_err(fail)?,
                sender: typed("sender", field("sender")?).map_err(fail)?,
                repository: typed("repository", field("repository")?).map_err(fail)?,
            },
            ("issue_comment", "created") => Self::CommentCreated {
                issue: typed("issue", field("issue")?).map_err(fail)?,
                comment: typed("comment", field("comment")?).map_err(fail)?,
                repository: typed("repository", field("repository")?).map_err(fail)?,
            },
            _ => Self::Other {
                event: event.to_owned(),
                action,
            },
        })
    }
}
