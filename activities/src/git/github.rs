//! The pull request of a `pr` delivery, through GitHub's REST API: the one already open (or
//! closed) for the head branch if there is one (a retry after a kill opens no second), else a
//! new one. 5xx and network failures are worth a retry; other refusals carry GitHub's words.

use std::time::Duration;

use baton_github::{owner_and_repo, rest::said};
use reqwest::{Client, Response, StatusCode};
use serde::Deserialize;
use serde_json::json;

use super::deliver::Stop;
use super::settings::GitHubSettings;

const API_TIMEOUT: Duration = Duration::from_secs(60);

/// The pull request to have.
pub(crate) struct Wanted<'a> {
    pub(crate) git_url: &'a str,
    pub(crate) branch: &'a str,
    pub(crate) base: &'a str,
    pub(crate) title: &'a str,
    pub(crate) body: &'a str,
    pub(crate) draft: bool,
}

/// The pull request found or opened.
#[derive(Debug, Deserialize)]
pub(crate) struct PullRequest {
    #[serde(rename = "html_url")]
    pub(crate) url: String,
    pub(crate) number: u64,
}

/// Finds the pull request of `wanted.branch`, or opens it.
pub(crate) async fn pull_request(
    settings: &GitHubSettings,
    wanted: Wanted<'_>,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<PullRequest, Stop> {
    let token = env(settings.token_var())
        .filter(|token| !token.is_empty())
        .ok_or_else(|| {
            Stop::Refused(if settings.uses_app() {
                "cannot open the pull request: the worker has no installation token of its \
                 GitHub App ([git.github] app_id) for the repository"
                    .to_owned()
            } else {
                format!(
                    "cannot open the pull request: environment variable {} (the GitHub token, \
                     [git.github] token_env) is not set on the workers; set it there",
                    settings.token_env
                )
            })
        })?;
    let (owner, repo) = owner_and_repo(wanted.git_url).ok_or_else(|| {
        Stop::Refused(format!(
            "cannot tell the GitHub owner and repository from {}: a pull request needs a URL \
             ending in /<owner>/<repo>",
            wanted.git_url
        ))
    })?;
    if wanted.base.is_empty() {
        return Err(Stop::Refused(
            "cannot open the pull request: the run has no base branch (the source ref was a \
             commit on a remote without a default branch)"
                .into(),
        ));
    }
    let api = Api {
        client: Client::builder()
            .timeout(API_TIMEOUT)
            .build()
            .map_err(|e| Stop::Transient(format!("cannot make an HTTP client: {e}")))?,
        pulls: format!(
            "{}/repos/{owner}/{repo}/pulls",
            settings.api_url.trim_end_matches('/')
        ),
        token,
        token_env: if settings.uses_app() {
            "the GitHub App's installation token ([git.github] app_id)"
        } else {
            &settings.token_env
        },
    };
    let head = format!("{owner}:{}", wanted.branch);
    if let Some(found) = api.find(&head).await? {
        return Ok(found);
    }
    let response = api
        .send(api.client.post(&api.pulls).json(&json!({
            "title": wanted.title,
            "head": wanted.branch,
            "base": wanted.base,
            "body": wanted.body,
            "draft": wanted.draft,
        })))
        .await?;
    let status = response.status();
    if status == StatusCode::CREATED || status.is_success() {
        return response.json::<PullRequest>().await.map_err(|e| {
            Stop::Transient(format!("GitHub's answer to opening the pull request: {e}"))
        });
    }
    let said = said(response).await;
    if status == StatusCode::UNPROCESSABLE_ENTITY && said.contains("already exists") {
        // Opened by an attempt that did not live to see the answer.
        if let Some(found) = api.find(&head).await? {
            return Ok(found);
        }
    }
    Err(api.refused("open the pull request", status, &said))
}

struct Api<'a> {
    client: Client,
    pulls: String,
    token: String,
    token_env: &'a str,
}

impl Api<'_> {
    async fn find(&self, head: &str) -> Result<Option<PullRequest>, Stop> {
        let response = self
            .send(
                self.client
                    .get(&self.pulls)
                    .query(&[("head", head), ("state", "all")]),
            )
            .await?;
        let status = response.status();
        if !status.is_success() {
            let said = said(response).await;
            return Err(self.refused("look for an existing pull request", status, &said));
        }
        let found: Vec<PullRequest> = response.json().await.map_err(|e| {
            Stop::Transient(format!("GitHub's list of pull requests did not parse: {e}"))
        })?;
        Ok(found.into_iter().next())
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<Response, Stop> {
        let response = request
            .header("Accept", "application/vnd.github+json")
            .bearer_auth(&self.token)
            .header("X-GitHub-Api-Version", "2022-11-28")
            .header("User-Agent", "baton")
            .send()
            .await
            .map_err(|e| {
                Stop::Transient(format!(
                    "cannot reach the GitHub API at {}: {}",
                    self.pulls,
                    e.without_url()
                ))
            })?;
        if response.status().is_server_error() {
            let status = response.status();
            let said = said(response).await;
            return Err(Stop::Transient(format!(
                "the GitHub API failed ({status}) at {}: {said}",
                self.pulls
            )));
        }
        Ok(response)
    }

    fn refused(&self, what: &str, status: StatusCode, said: &str) -> Stop {
        let advice = match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                format!(" (check the token in {} on the workers)", self.token_env)
            }
            StatusCode::NOT_FOUND => format!(
                " (check the repository, and that the token in {} may see it)",
                self.token_env
            ),
            _ => String::new(),
        };
        Stop::Refused(format!(
            "GitHub refused to {what} (HTTP {}): {said}{advice}",
            status.as_u16()
        ))
    }
}

#[cfg(test)]
mod tests {
    use baton_github::owner_and_repo;

    #[test]
    fn owner_and_repo_from_urls() {
        let of = |url| owner_and_repo(url).map(|(o, r)| format!("{o}/{r}"));
        assert_eq!(
            of("https://github.com/acme/tool.git").as_deref(),
            Some("acme/tool")
        );
        assert_eq!(
            of("https://github.com/acme/tool/").as_deref(),
            Some("acme/tool")
        );
        assert_eq!(
            of("git@github.com:acme/tool.git").as_deref(),
            Some("acme/tool")
        );
        assert_eq!(
            of("git://127.0.0.1:9418/acme/tool").as_deref(),
            Some("acme/tool")
        );
        assert_eq!(of("tool"), None);
    }
}
