//! The REST calls baton makes, with one authentication per repository ([`Auth`]: a token from
//! the environment, or the GitHub App's installation token for that repository). Every
//! request carries GitHub's media type and API version; 5xx, network failures and secondary
//! rate limits are [`GitHubError::Transient`], other refusals carry GitHub's own words.

use std::sync::Arc;
use std::time::Duration;

use reqwest::{Client, RequestBuilder, Response, StatusCode};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::{App, GitHubError};

const API_TIMEOUT: Duration = Duration::from_secs(60);

/// How requests for a repository authenticate.
#[derive(Clone)]
pub enum Auth {
    /// One token for every repository (a personal or fine-grained token).
    Token(String),
    /// The app's installation token for the repository asked about.
    App(Arc<App>),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Token(_) => f.write_str("Auth::Token(..)"),
            Self::App(app) => write!(f, "Auth::App({})", app.id()),
        }
    }
}

impl Auth {
    /// The bearer token for `owner/repo`.
    pub async fn token_for(&self, owner: &str, repo: &str) -> Result<String, GitHubError> {
        match self {
            Self::Token(token) => Ok(token.clone()),
            Self::App(app) => Ok(app.installation_token(owner, repo).await?.token),
        }
    }
}

/// The API's base URL and an HTTP client.
#[derive(Clone, Debug)]
pub(crate) struct Endpoint {
    base: String,
    client: Client,
}

impl Endpoint {
    pub(crate) fn new(base: &str) -> Self {
        Self {
            base: base.trim_end_matches('/').to_owned(),
            // A builder with only a timeout set does not fail; fall back to the default.
            client: Client::builder()
                .timeout(API_TIMEOUT)
                .build()
                .unwrap_or_default(),
        }
    }

    pub(crate) fn get(&self, path: &str) -> RequestBuilder {
        self.client.get(format!("{}{path}", self.base))
    }

    pub(crate) fn post(&self, path: &str) -> RequestBuilder {
        self.client.post(format!("{}{path}", self.base))
    }

    pub(crate) fn patch(&self, path: &str) -> RequestBuilder {
        self.client.patch(format!("{}{path}", self.base))
    }

    /// Sends `request` with `bearer`; 5xx, 429, secondary rate limits and network failures
    /// come back as [`GitHubError::Transient`], any other answer as it is.
    pub(crate) async fn send(
        &self,
        request: RequestBuilder,
        bearer: &str,
        what: &str,
    ) -> Result<Response, GitHubError> {
        let response = request
            .header("Accept", "application/vnd.github+json")
            .header("X-GitHub-Api-Version", "2022-11-28")
            .header("User-Agent", "baton")
            .bearer_auth(bearer)
            .send()
            .await
            .map_err(|e| {
                GitHubError::Transient(format!(
                    "cannot reach the GitHub API at {} to {what}: {}",
                    self.base,
                    e.without_url()
                ))
            })?;
        let status = response.status();
        let limited = status == StatusCode::TOO_MANY_REQUESTS
            || (status == StatusCode::FORBIDDEN && response.headers().contains_key("retry-after"));
        if status.is_server_error() || limited {
            let said = said(response).await;
            return Err(GitHubError::Transient(format!(
                "the GitHub API could not {what} (HTTP {}): {said}",
                status.as_u16()
            )));
        }
        Ok(response)
    }

    /// `response` if it is a success, else a refusal naming `what`.
    pub(crate) async fn success(
        &self,
        response: Response,
        what: &str,
    ) -> Result<Response, GitHubError> {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let said = said(response).await;
        Err(GitHubError::Refused(format!(
            "GitHub refused to {what} (HTTP {}): {said}",
            status.as_u16()
        )))
    }

    pub(crate) async fn parse<T: DeserializeOwned>(
        &self,
        response: Response,
        what: &str,
    ) -> Result<T, GitHubError> {
        response.json::<T>().await.map_err(|e| {
            GitHubError::Transient(format!("GitHub's answer when asked to {what}: {e}"))
        })
    }
}

/// GitHub's `message`, then each `errors[].message` (or its `code` on `field`).
pub async fn said(response: Response) -> String {
    let text = response.text().await.unwrap_or_default();
    let Ok(value) = serde_json::from_str::<Value>(&text) else {
        return text.chars().take(300).collect();
    };
    let mut parts: Vec<String> = value
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .into_iter()
        .collect();
    for error in value
        .get("errors")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let text = error
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| {
                let code = error.get("code").and_then(Value::as_str)?;
                let field = error.get("field").and_then(Value::as_str).unwrap_or("");
                Some(format!("{code} {field}").trim().to_owned())
            });
        parts.extend(text);
    }
    parts.join(": ")
}

/// A repository permission, lowest first (GitHub's `role_name`s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Permission {
    /// No access.
    None,
    /// Read.
    Read,
    /// Triage.
    Triage,
    /// Write (push).
    Write,
    /// Maintain.
    Maintain,
    /// Admin.
    Admin,
}

impl Permission {
    /// `read`, `triage`, `write`, `maintain`, `admin` (also `none`).
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text.trim().to_ascii_lowercase().as_str() {
            "none" => Self::None,
            "read" | "pull" => Self::Read,
            "triage" => Self::Triage,
            "write" | "push" => Self::Write,
            "maintain" => Self::Maintain,
            "admin" => Self::Admin,
            _ => return None,
        })
    }

    /// The name GitHub uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Read => "read",
            Self::Triage => "triage",
            Self::Write => "write",
            Self::Maintain => "maintain",
            Self::Admin => "admin",
        }
    }
}

/// A repository as `GET /repos/{owner}/{repo}` describes it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Repository {
    /// `owner/repo`.
    pub full_name: String,
    /// The default branch.
    pub default_branch: String,
    /// The HTTPS clone URL.
    pub clone_url: String,
}

/// A pull request's head and base, as `GET /repos/{owner}/{repo}/pulls/{n}` gives them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PullRequest {
    /// Its number.
    pub number: u64,
    /// Where it lives on the web.
    pub html_url: String,
    /// Its head.
    pub head: Branch,
    /// Its base.
    pub base: Branch,
}

/// One side of a pull request.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Branch {
    /// The branch name.
    #[serde(rename = "ref")]
    pub name: String,
    /// The commit.
    pub sha: String,
    /// The repository it is in (absent when that repository was deleted).
    pub repo: Option<BranchRepository>,
}

/// The repository of a pull request's side.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct BranchRepository {
    /// `owner/repo`.
    pub full_name: String,
}

/// A comment that was made.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Comment {
    /// Its id (for edits).
    pub id: u64,
    /// Where it lives on the web.
    pub html_url: String,
}

/// A comment as listed.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct IssueComment {
    /// Its id.
    pub id: u64,
    /// Its text.
    #[serde(default)]
    pub body: String,
}

/// A check run's state (`POST`/`PATCH .../check-runs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRun<'a> {
    /// Shown on the commit (e.g. `baton`).
    pub name: &'a str,
    /// The commit.
    pub head_sha: &'a str,
    /// Finds it again.
    pub external_id: &'a str,
    /// queued, in_progress or completed.
    pub status: &'a str,
    /// With completed: success, failure, cancelled, neutral, action_required.
    pub conclusion: &'a str,
    /// Output title.
    pub title: &'a str,
    /// Output summary (markdown).
    pub summary: &'a str,
}

impl CheckRun<'_> {
    fn body(&self, create: bool) -> Value {
        let mut body = json!({
            "name": self.name,
            "external_id": self.external_id,
            "status": self.status,
            "output": {"title": self.title, "summary": self.summary},
        });
        if create {
            body["head_sha"] = json!(self.head_sha);
        }
        if self.status == "completed" && !self.conclusion.is_empty() {
            body["conclusion"] = json!(self.conclusion);
        }
        body
    }
}

#[derive(Debug, Deserialize)]
struct CheckRunId {
    id: u64,
    #[serde(default)]
    external_id: Option<String>,
}

/// GitHub's REST API for one configuration of credentials.
#[derive(Clone, Debug)]
pub struct GitHub {
    endpoint: Endpoint,
    auth: Auth,
}

impl GitHub {
    /// The API at `api_url` (e.g. `https://api.github.com`) with `auth`.
    pub fn new(api_url: &str, auth: Auth) -> Self {
        Self {
            endpoint: Endpoint::new(api_url),
            auth,
        }
    }

    /// How requests authenticate.
    pub fn auth(&self) -> &Auth {
        &self.auth
    }

    async fn call<T: DeserializeOwned>(
        &self,
        owner: &str,
        repo: &str,
        request: RequestBuilder,
        what: &str,
    ) -> Result<T, GitHubError> {
        let token = self.auth.token_for(owner, repo).await?;
        let response = self.endpoint.send(request, &token, what).await?;
        let response = self.endpoint.success(response, what).await?;
        self.endpoint.parse(response, what).await
    }

    /// `user`'s permission on `owner/repo`
    /// (`GET /repos/{owner}/{repo}/collaborators/{user}/permission`): its `role_name` when
    /// given, else `permission`; a user GitHub does not know has none.
    pub async fn permission(
        &self,
        owner: &str,
        repo: &str,
        user: &str,
    ) -> Result<Permission, GitHubError> {
        #[derive(Deserialize)]
        struct Answer {
            permission: String,
            #[serde(default)]
            role_name: Option<String>,
        }
        let what = format!("read {user}'s permission on {owner}/{repo}");
        let token = self.auth.token_for(owner, repo).await?;
        let response = self
            .endpoint
            .send(
                self.endpoint.get(&format!(
                    "/repos/{owner}/{repo}/collaborators/{user}/permission"
                )),
                &token,
                &what,
            )
            .await?;
        if response.status() == StatusCode::NOT_FOUND {
            return Ok(Permission::None);
        }
        let response = self.endpoint.success(response, &what).await?;
        let answer: Answer = self.endpoint.parse(response, &what).await?;
        Ok(answer
            .role_name
            .as_deref()
            .and_then(Permission::parse)
            .or_else(|| Permission::parse(&answer.permission))
            .unwrap_or(Permission::None))
    }

    /// Whether `user` is an active member of team `org/team`
    /// (`GET /orgs/{org}/teams/{team}/memberships/{user}`; 404: not a member), with the
    /// credentials of `owner/repo` (an app needs the organization permission Members: read).
    pub async fn team_member(
        &self,
        (owner, repo): (&str, &str),
        org: &str,
        team: &str,
        user: &str,
    ) -> Result<bool, GitHubError> {
        #[derive(Deserialize)]
        struct Membership {
            state: String,
        }
        let what = format!("read {user}'s membership of team {org}/{team}");
        let token = self.auth.token_for(owner, repo).await?;
        let response = self
            .endpoint
            .send(
                self.endpoint
                    .get(&format!("/orgs/{org}/teams/{team}/memberships/{user}")),
                &token,
                &what,
            )
            .await?;
        if response.status() == StatusCode::NOT_FOUND {
            return Ok(false);
        }
        let response = self.endpoint.success(response, &what).await?;
        let membership: Membership = self.endpoint.parse(response, &what).await?;
        Ok(membership.state == "active")
    }

    /// `GET /repos/{owner}/{repo}`.
    pub async fn repository(&self, owner: &str, repo: &str) -> Result<Repository, GitHubError> {
        let request = self.endpoint.get(&format!("/repos/{owner}/{repo}"));
        self.call(owner, repo, request, &format!("read {owner}/{repo}"))
            .await
    }

    /// The commit `reference` (a branch, tag or sha) names
    /// (`GET /repos/{owner}/{repo}/commits/{reference}`).
    pub async fn commit_sha(
        &self,
        owner: &str,
        repo: &str,
        reference: &str,
    ) -> Result<String, GitHubError> {
        #[derive(Deserialize)]
        struct Commit {
            sha: String,
        }
        let request = self
            .endpoint
            .get(&format!("/repos/{owner}/{repo}/commits/{reference}"));
        let what = format!("read commit {reference} of {owner}/{repo}");
        let commit: Commit = self.call(owner, repo, request, &what).await?;
        Ok(commit.sha)
    }

    /// `GET /repos/{owner}/{repo}/pulls/{number}`.
    pub async fn pull_request(
        &self,
        owner: &str,
        repo: &str,
        number: u64,
    ) -> Result<PullRequest, GitHubError> {
        let request = self
            .endpoint
            .get(&format!("/repos/{owner}/{repo}/pulls/{number}"));
        let what = format!("read pull request #{number} of {owner}/{repo}");
        self.call(owner, repo, request, &what).await
    }

    /// Comments `body` on issue or pull request `number`
    /// (`POST /repos/{owner}/{repo}/issues/{number}/comments`).
    pub async fn comment(
        &self,
        owner: &str,
        repo: &str,
        number: u64,
        body: &str,
    ) -> Result<Comment, GitHubError> {
        let request = self
            .endpoint
            .post(&format!("/repos/{owner}/{repo}/issues/{number}/comments"))
            .json(&json!({ "body": body }));
        let what = format!("comment on #{number} of {owner}/{repo}");
        self.call(owner, repo, request, &what).await
    }

    /// The comments of issue or pull request `number`, oldest first, up to 100 per page, at
    /// most `pages` pages (`GET /repos/{owner}/{repo}/issues/{number}/comments`).
    pub async fn comments(
        &self,
        owner: &str,
        repo: &str,
        number: u64,
        pages: u32,
    ) -> Result<Vec<IssueComment>, GitHubError> {
        let mut all = Vec::new();
        for page in 1..=pages.max(1) {
            let request = self
                .endpoint
                .get(&format!("/repos/{owner}/{repo}/issues/{number}/comments"))
                .query(&[("per_page", "100"), ("page", &page.to_string())]);
            let what = format!("list the comments of #{number} of {owner}/{repo}");
            let got: Vec<IssueComment> = self.call(owner, repo, request, &what).await?;
            let last = got.len() < 100;
            all.extend(got);
            if last {
                break;
            }
        }
        Ok(all)
    }

    /// Makes check run `check` (`POST /repos/{owner}/{repo}/check-runs`), or updates it when
    /// `id` is known or a check run of the same name and external id is on the commit
    /// already (`GET /repos/{owner}/{repo}/commits/{sha}/check-runs?check_name=`); its id.
    pub async fn check_run(
        &self,
        owner: &str,
        repo: &str,
        id: u64,
        check: &CheckRun<'_>,
    ) -> Result<u64, GitHubError> {
        #[derive(Deserialize)]
        struct Listed {
            check_runs: Vec<CheckRunId>,
        }
        let mut id = id;
        if id == 0 {
            let request = self
                .endpoint
                .get(&format!(
                    "/repos/{owner}/{repo}/commits/{}/check-runs",
                    check.head_sha
                ))
                .query(&[("check_name", check.name), ("per_page", "100")]);
            let what = format!("list the check runs of {owner}/{repo}@{}", check.head_sha);
            let listed: Listed = self.call(owner, repo, request, &what).await?;
            id = listed
                .check_runs
                .into_iter()
                .find(|c| c.external_id.as_deref() == Some(check.external_id))
                .map_or(0, |c| c.id);
        }
        let (request, what) = if id == 0 {
            (
                self.endpoint
                    .post(&format!("/repos/{owner}/{repo}/check-runs"))
                    .json(&check.body(true)),
                format!("make a check run on {owner}/{repo}@{}", check.head_sha),
            )
        } else {
            (
                self.endpoint
                    .patch(&format!("/repos/{owner}/{repo}/check-runs/{id}"))
                    .json(&check.body(false)),
                format!("update check run {id} of {owner}/{repo}"),
            )
        };
        let made: CheckRunId = self.call(owner, repo, request, &what).await?;
        Ok(made.id)
    }

    /// Replaces comment `id`'s body (`PATCH /repos/{owner}/{repo}/issues/comments/{id}`).
    pub async fn edit_comment(
        &self,
        owner: &str,
        repo: &str,
        id: u64,
        body: &str,
    ) -> Result<Comment, GitHubError> {
        let request = self
            .endpoint
            .patch(&format!("/repos/{owner}/{repo}/issues/comments/{id}"))
            .json(&json!({ "body": body }));
        let what = format!("edit comment {id} of {owner}/{repo}");
        self.call(owner, repo, request, &what).await
    }
}
