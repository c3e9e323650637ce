//! A local stand-in for the GitHub REST API endpoints baton uses to open pull requests
//! (`GET`/`POST /repos/{owner}/{repo}/pulls`, `GET /repos/{owner}/{repo}/pulls/{n}`), in
//! front of the bare repositories of a [`GitRepos`]: repository `acme/parser` is the bare
//! repo `acme/parser.git`, and the branches a pull request names are checked there with git.
//!
//! It refuses what GitHub refuses, with GitHub's status codes and bodies: no `User-Agent`
//! (403), no or a wrong token (401 `Bad credentials`; `Authorization: Bearer <token>` or
//! `token <token>`), an unknown repository (404), a body that is not JSON (400), a missing
//! `title`/`head`/`base` (422 `missing_field`), a `head` or `base` that is no branch of the
//! repository (422 `invalid`), no commits between them (422), a second open pull request for
//! the same head (422 `A pull request already exists for owner:branch.`, in `errors[0]
//! .message` as GitHub puts it). Like GitHub, a `head` filter without the `owner:` prefix is
//! silently ignored by the list endpoint. Every request is recorded ([`ApiRequest`]), and a
//! create can be held for a while after the pull request exists
//! ([`GitHubStandIn::delay_create`]), so a test can kill the worker in that window.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use axum::Router;
use axum::body::to_bytes;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

mod app;
mod checks;
mod issues;

pub use app::IssuedToken;
pub use checks::CheckRunRecord;
pub use issues::IssueComment;

use crate::git_server::{AcceptToken, BareRepo, GitRepos, repo_name};
use crate::http_thread::{HttpThread, header_map};
use crate::mock_http::json_response;

/// GitHub's documentation link in error bodies.
const DOCS: &str = "https://docs.github.com/rest";

/// A request the stand-in received.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiRequest {
    /// `"GET"`, `"POST"`, ...
    pub method: String,
    /// The path, e.g. `/repos/acme/parser/pulls`.
    pub path: String,
    /// The query parameters, decoded (`head` = `acme:baton/run-1`).
    pub query: BTreeMap<String, String>,
    /// Headers with lowercase names (the `authorization` header included: it never leaves
    /// the test process).
    pub headers: BTreeMap<String, String>,
    /// The body as JSON; a JSON string holding the text if it is not JSON; `Null` if empty.
    pub body: Value,
    /// The status the stand-in answered.
    pub status: u16,
    /// When it arrived.
    pub received_at: Instant,
}

impl ApiRequest {
    /// A header by (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }
}

/// A pull request the stand-in holds.
#[derive(Debug, Clone, PartialEq)]
pub struct PullRequest {
    /// Its number in its repository, from 1.
    pub number: u64,
    /// Owner of the repository (`acme`).
    pub owner: String,
    /// The repository (`parser`).
    pub repo: String,
    /// Title.
    pub title: String,
    /// Body (`None` when the request had none).
    pub body: Option<String>,
    /// The head branch (`baton/run-1`), without the owner.
    pub head: String,
    /// The commit the head branch pointed at when the pull request was opened.
    pub head_sha: String,
    /// The base branch (`main`).
    pub base: String,
    /// The commit the base branch pointed at then.
    pub base_sha: String,
    /// Whether it was opened as a draft.
    pub draft: bool,
    /// `"open"` or `"closed"`.
    pub state: String,
    /// `https://github.com/{owner}/{repo}/pull/{number}` (never fetched).
    pub html_url: String,
}

impl PullRequest {
    /// GitHub's JSON for it; `api_url` is the stand-in's base URL.
    fn json(&self, api_url: &str) -> Value {
        let full_name = format!("{}/{}", self.owner, self.repo);
        let side = |branch: &str, sha: &str| {
            json!({
                "label": format!("{}:{branch}", self.owner),
                "ref": branch,
                "sha": sha,
                "repo": {"name": self.repo, "full_name": full_name, "owner": {"login": self.owner},
                         "default_branch": "main", "private": false,
                         "clone_url": format!("https://github.com/{full_name}.git")},
            })
        };
        json!({
            "url": format!("{api_url}/repos/{full_name}/pulls/{}", self.number),
            "id": 1_000_000 + self.number,
            "html_url": self.html_url,
            "number": self.number,
            "state": self.state,
            "locked": false,
            "title": self.title,
            "body": self.body,
            "draft": self.draft,
            "merged": false,
            "user": {"login": "baton-test"},
            "head": side(&self.head, &self.head_sha),
            "base": side(&self.base, &self.base_sha),
        })
    }
}

#[derive(Default)]
struct HubState {
    api_url: String,
    requests: Vec<ApiRequest>,
    pulls: Vec<PullRequest>,
    create_delay: Duration,
    create_started: Option<Instant>,
    /// Installation tokens issued (app mode).
    tokens: Vec<IssuedToken>,
    comments: Vec<IssueComment>,
    next_comment_id: u64,
    check_runs: Vec<CheckRunRecord>,
    /// Repository roles by lowercase login (others: `read`, as on a public repository).
    permissions: BTreeMap<String, String>,
    /// Where clone URLs point (`GET /repos/{owner}/{repo}`'s `clone_url`).
    clone_base: String,
    /// Team members by `org/team` (lowercase).
    teams: BTreeMap<String, Vec<String>>,
}

struct Hub {
    token: String,
    root: PathBuf,
    state: Mutex<HubState>,
    app: Option<app::AppIdentity>,
}

impl Hub {
    fn lock(&self) -> MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The stand-in server on 127.0.0.1; stopped on drop, its request log printed when the test
/// panics. Point baton's GitHub API base URL at [`GitHubStandIn::api_url`].
pub struct GitHubStandIn {
    server: HttpThread,
    hub: Arc<Hub>,
}

impl GitHubStandIn {
    /// Starts it; `token` is the only token it accepts, `repos` the repositories it serves
    /// (they must outlive it).
    pub fn start(token: &str, repos: &GitRepos) -> anyhow::Result<GitHubStandIn> {
        Self::start_with(token, repos, None)
    }

    /// [`GitHubStandIn::start`] with a GitHub App `app_id`, installed on `owner` (installation
    /// 4242), whose JWTs must verify under the public key of `private_key_pem`; the installation
    /// tokens it issues are accepted for their repositories besides `token`.
    pub fn start_app(
        token: &str,
        repos: &GitRepos,
        app_id: &str,
        private_key_pem: &str,
        owner: &str,
    ) -> anyhow::Result<GitHubStandIn> {
        let public_key = baton_github::public_key_of(private_key_pem)
            .map_err(|e| anyhow::anyhow!("the app's key: {e}"))?;
        Self::start_with(
            token,
            repos,
            Some(app::AppIdentity {
                app_id: app_id.to_owned(),
                owner: owner.to_owned(),
                public_key,
                installation_id: 4242,
            }),
        )
    }

    fn start_with(
        token: &str,
        repos: &GitRepos,
        app: Option<app::AppIdentity>,
    ) -> anyhow::Result<GitHubStandIn> {
        let hub = Arc::new(Hub {
            token: token.to_owned(),
            root: repos.root().to_path_buf(),
            state: Mutex::default(),
            app,
        });
        let app = Router::new().fallback(handle).with_state(Arc::clone(&hub));
        let server = HttpThread::start("github stand-in", app)?;
        hub.lock().api_url = format!("http://{}", server.addr());
        Ok(GitHubStandIn { server, hub })
    }

    /// `http://127.0.0.1:<port>`: the API's base URL (GitHub's is `https://api.github.com`).
    pub fn api_url(&self) -> String {
        format!("http://{}", self.server.addr())
    }

    /// Gives `login` the repository role `role` (`read`, `triage`, `write`, `maintain`,
    /// `admin`) on every repository.
    pub fn set_permission(&self, login: &str, role: &str) {
        self.hub
            .lock()
            .permissions
            .insert(login.to_ascii_lowercase(), role.to_owned());
    }

    /// Makes `members` the active members of team `org/team`.
    pub fn set_team(&self, team: &str, members: &[&str]) {
        self.hub.lock().teams.insert(
            team.to_ascii_lowercase(),
            members.iter().map(|m| (*m).to_owned()).collect(),
        );
    }

    /// Clone URLs are `<base>/<owner>/<repo>.git` (e.g. a [`crate::GitHttp`]'s base URL).
    pub fn set_clone_base(&self, base: &str) {
        self.hub.lock().clone_base = base.trim_end_matches('/').to_owned();
    }

    /// Every comment, in order.
    pub fn comments(&self) -> Vec<IssueComment> {
        self.hub.lock().comments.clone()
    }

    /// Every check run, in order.
    pub fn check_runs(&self) -> Vec<CheckRunRecord> {
        self.hub.lock().check_runs.clone()
    }

    /// Every installation token issued, in order.
    pub fn issued_tokens(&self) -> Vec<IssuedToken> {
        self.hub.lock().tokens.clone()
    }

    /// For [`crate::GitHttp::start_accepting`]: a push or fetch with an unexpired installation
    /// token of the repository is let in.
    pub fn token_check(&self) -> AcceptToken {
        let hub = Arc::clone(&self.hub);
        Arc::new(move |password: &str, repo: &str| {
            app::token_valid(&hub.lock().tokens, password, repo)
        })
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<ApiRequest> {
        self.hub.lock().requests.clone()
    }

    /// The requests answered with a 4xx or 5xx status: what GitHub would have refused too.
    pub fn refused_requests(&self) -> Vec<ApiRequest> {
        let st = self.hub.lock();
        st.requests
            .iter()
            .filter(|r| r.status >= 400)
            .cloned()
            .collect()
    }

    /// Every pull request opened so far, in order.
    pub fn pulls(&self) -> Vec<PullRequest> {
        self.hub.lock().pulls.clone()
    }

    /// From now on, answer a create only `delay` after it arrived; the pull request exists
    /// from its arrival (as when the answer is lost on the way back).
    pub fn delay_create(&self, delay: Duration) {
        self.hub.lock().create_delay = delay;
    }

    /// When the first create that opened a pull request arrived.
    pub fn create_started(&self) -> Option<Instant> {
        self.hub.lock().create_started
    }

    /// Waits until a create opened a pull request (see [`GitHubStandIn::create_started`]).
    pub async fn wait_create_started(&self, timeout: Duration) -> anyhow::Result<Instant> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(at) = self.create_started() {
                return Ok(at);
            }
            if Instant::now() >= deadline {
                bail!(
                    "no pull request was created within {timeout:?}; requests so far:\n{}",
                    self.summary()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Closes pull request `number` of `repo` (`acme/parser`), as a person would on GitHub.
    pub fn close_pull(&self, repo: &str, number: u64) -> anyhow::Result<()> {
        let mut st = self.hub.lock();
        let pull = st
            .pulls
            .iter_mut()
            .find(|p| format!("{}/{}", p.owner, p.repo) == repo && p.number == number)
            .with_context(|| format!("no pull request {repo}#{number}"))?;
        pull.state = "closed".to_owned();
        Ok(())
    }

    /// One line per request: method, path, query, status (no headers: they hold the token).
    fn summary(&self) -> String {
        self.hub
            .lock()
            .requests
            .iter()
            .map(|r| format!("{} {} {:?} -> {}", r.method, r.path, r.query, r.status))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for GitHubStandIn {
    fn drop(&mut self) {
        self.server.stop();
        if thread::panicking() {
            eprintln!(
                "=== github stand-in {} requests ===\n{}",
                self.api_url(),
                self.summary()
            );
        }
    }
}

/// What a route answered; `created` when a create opened a pull request (its answer waits
/// for the create delay).
struct Answer {
    status: StatusCode,
    body: Value,
    created: bool,
}

impl Answer {
    fn new(status: StatusCode, body: Value) -> Answer {
        Answer {
            status,
            body,
            created: false,
        }
    }

    fn message(status: StatusCode, message: &str) -> Answer {
        Answer::new(
            status,
            json!({"message": message, "documentation_url": DOCS, "status": status.as_str()}),
        )
    }

    fn not_found() -> Answer {
        Answer::message(StatusCode::NOT_FOUND, "Not Found")
    }

    /// 422 `Validation Failed` with one error.
    fn invalid(error: Value) -> Answer {
        Answer::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({"message": "Validation Failed", "errors": [error], "documentation_url": DOCS,
                   "status": "422"}),
        )
    }

    /// 422 with a `custom` error saying `message`.
    fn custom(message: &str) -> Answer {
        Answer::invalid(json!({"resource": "PullRequest", "code": "custom", "message": message}))
    }
}

async fn handle(State(hub): State<Arc<Hub>>, req: Request) -> Response {
    let received_at = Instant::now();
    let (parts, body) = req.into_parts();
    let headers = header_map(&parts.headers);
    let query = Query::<BTreeMap<String, String>>::try_from_uri(&parts.uri)
        .map(|q| q.0)
        .unwrap_or_default();
    let bytes = to_bytes(body, 16 * 1024 * 1024).await.unwrap_or_default();
    let parsed: Result<Value, ()> = if bytes.is_empty() {
        Ok(Value::Null)
    } else {
        serde_json::from_slice(&bytes).map_err(|_| ())
    };
    let path = parts.uri.path().to_owned();
    let answer = route(&hub, &parts.method, &path, &query, &parts.headers, &parsed).await;
    let delay = {
        let mut st = hub.lock();
        if answer.created && st.create_started.is_none() {
            st.create_started = Some(received_at);
        }
        st.requests.push(ApiRequest {
            method: parts.method.to_string(),
            path,
            query,
            headers,
            body: parsed
                .unwrap_or_else(|()| Value::String(String::from_utf8_lossy(&bytes).into_owned())),
            status: answer.status.as_u16(),
            received_at,
        });
        if answer.created {
            st.create_delay
        } else {
            Duration::ZERO
        }
    };
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let mut response = json_response(answer.status, &answer.body);
    if answer.created
        && let Some(url) = answer.body.get("url").and_then(Value::as_str)
        && let Ok(location) = url.parse()
    {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response.into_response()
}

async fn route(
    hub: &Hub,
    method: &Method,
    path: &str,
    query: &BTreeMap<String, String>,
    headers: &HeaderMap,
    body: &Result<Value, ()>,
) -> Answer {
    if !headers.contains_key(header::USER_AGENT) {
        return Answer::message(
            StatusCode::FORBIDDEN,
            "Request forbidden by administrative rules. Please make sure your request has a \
             User-Agent header.",
        );
    }
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    if let Some(answer) = app::route(
        hub,
        method.as_str(),
        &segments,
        headers,
        body.as_ref().unwrap_or(&Value::Null),
    ) {
        return answer;
    }
    if let ["orgs", org, "teams", team, "memberships", user] = segments.as_slice() {
        return team_membership(hub, headers, org, team, user);
    }
    let ["repos", owner, name, rest @ ..] = segments.as_slice() else {
        return if authorized(headers, &hub.token) {
            Answer::not_found()
        } else {
            Answer::message(StatusCode::UNAUTHORIZED, "Bad credentials")
        };
    };
    let full_name = format!("{owner}/{name}");
    let author = if authorized(headers, &hub.token) {
        "baton-test".to_owned()
    } else if presented(headers)
        .is_some_and(|t| app::token_valid(&hub.lock().tokens, t, &full_name))
    {
        "baton-app[bot]".to_owned()
    } else {
        return Answer::message(StatusCode::UNAUTHORIZED, "Bad credentials");
    };
    let Some(repo) = served_repo(hub, owner, name) else {
        return Answer::not_found();
    };
    let rest = match rest {
        ["pulls", rest @ ..] => rest,
        other => {
            let by_app = author.ends_with("[bot]");
            return checks::route(hub, &repo, &full_name, method.as_str(), other, body, by_app)
                .or_else(|| {
                    issues::route(
                        hub,
                        &repo,
                        &full_name,
                        method.as_str(),
                        other,
                        body,
                        &author,
                    )
                })
                .unwrap_or_else(Answer::not_found);
        }
    };
    match (method, rest) {
        (&Method::GET, []) => list(hub, owner, name, query),
        (&Method::POST, []) => match body {
            Ok(body) => create(hub, repo, owner, name, body).await,
            Err(()) => Answer::message(StatusCode::BAD_REQUEST, "Problems parsing JSON"),
        },
        (&Method::GET, [number]) => {
            let st = hub.lock();
            let found = st
                .pulls
                .iter()
                .find(|p| p.owner == *owner && p.repo == *name && number.parse() == Ok(p.number));
            match found {
                Some(pull) => {
                    // As GitHub: the head as the branch is now, not as it was when opened.
                    let mut pull = pull.clone();
                    if let Ok(Some(sha)) = repo.branch_head(&pull.head) {
                        pull.head_sha = sha;
                    }
                    Answer::new(StatusCode::OK, pull.json(&st.api_url))
                }
                None => Answer::not_found(),
            }
        }
        _ => Answer::not_found(),
    }
}

/// `GET /orgs/{org}/teams/{team}/memberships/{user}`: an installation token of one of the
/// organization's repositories (or the static token) may ask; 404 for a non-member.
fn team_membership(hub: &Hub, headers: &HeaderMap, org: &str, team: &str, user: &str) -> Answer {
    let st = hub.lock();
    let prefix = format!("{}/", org.to_ascii_lowercase());
    let by_org_token = presented(headers).is_some_and(|t| {
        st.tokens.iter().any(|issued| {
            issued.token == t
                && issued.expires_at > std::time::SystemTime::now()
                && issued.repos.iter().any(|r| r.starts_with(&prefix))
        })
    });
    if !by_org_token && !authorized(headers, &hub.token) {
        return Answer::message(StatusCode::UNAUTHORIZED, "Bad credentials");
    }
    let members = st.teams.get(&format!("{org}/{team}").to_ascii_lowercase());
    if members.is_some_and(|m| m.iter().any(|login| login.eq_ignore_ascii_case(user))) {
        Answer::new(
            StatusCode::OK,
            json!({"state": "active", "role": "member",
                   "url": format!("https://api.github.com/orgs/{org}/teams/{team}/memberships/{user}")}),
        )
    } else {
        Answer::not_found()
    }
}

/// The token of `Authorization: Bearer <token>` or `token <token>`.
fn presented(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") || scheme.eq_ignore_ascii_case("token"))
        .then(|| token.trim())
}

/// `Authorization: Bearer <token>` or `token <token>`.
fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let Some((scheme, presented)) = value.split_once(' ') else {
        return false;
    };
    (scheme.eq_ignore_ascii_case("bearer") || scheme.eq_ignore_ascii_case("token"))
        && presented.trim() == token
}

/// The bare repository `{owner}/{name}.git`, if there is one.
fn served_repo(hub: &Hub, owner: &str, name: &str) -> Option<BareRepo> {
    let full = repo_name(&format!("{owner}/{name}")).ok()?;
    let path = hub.root.join(&full);
    path.join("HEAD")
        .is_file()
        .then(|| BareRepo::at(full, path))
}

fn list(hub: &Hub, owner: &str, name: &str, query: &BTreeMap<String, String>) -> Answer {
    let state = query.get("state").map_or("open", String::as_str);
    if !matches!(state, "open" | "closed" | "all") {
        return Answer::invalid(json!({"resource": "Issue", "field": "state", "code": "invalid"}));
    }
    // GitHub ignores a head filter without the `owner:` prefix and lists every pull request.
    let head = query.get("head").and_then(|h| h.split_once(':'));
    let base = query.get("base");
    let st = hub.lock();
    let found: Vec<Value> = st
        .pulls
        .iter()
        .rev() // newest first, GitHub's default order
        .filter(|p| p.owner == owner && p.repo == name)
        .filter(|p| state == "all" || p.state == state)
        .filter(|p| head.is_none_or(|(o, b)| p.owner == o && p.head == b))
        .filter(|p| base.is_none_or(|b| &p.base == b))
        .map(|p| p.json(&st.api_url))
        .collect();
    Answer::new(StatusCode::OK, Value::Array(found))
}

async fn create(hub: &Hub, repo: BareRepo, owner: &str, name: &str, body: &Value) -> Answer {
    if !body.is_object() {
        return Answer::message(StatusCode::BAD_REQUEST, "Problems parsing JSON");
    }
    let field = |f: &str| {
        body.get(f)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let missing: Vec<Value> = ["title", "head", "base"]
        .into_iter()
        .filter(|f| field(f).is_none())
        .map(|f| json!({"resource": "PullRequest", "code": "missing_field", "field": f}))
        .collect();
    let (Some(title), Some(head), Some(base)) = (field("title"), field("head"), field("base"))
    else {
        return Answer::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({"message": "Validation Failed", "errors": missing, "documentation_url": DOCS,
                   "status": "422"}),
        );
    };
    let head = match head.split_once(':') {
        Some((head_owner, branch)) if head_owner == owner => branch,
        Some(_) => {
            // A fork's branch: the stand-in has no forks.
            return Answer::invalid(
                json!({"resource": "PullRequest", "field": "head", "code": "invalid"}),
            );
        }
        None => head,
    };
    let (head_owned, base_owned) = (head.to_owned(), base.to_owned());
    let checked =
        tokio::task::spawn_blocking(move || branches_to_merge(&repo, &head_owned, &base_owned))
            .await
            .map_err(anyhow::Error::from)
            .and_then(|r| r);
    let (head_sha, base_sha) = match checked {
        Ok(Ok(shas)) => shas,
        Ok(Err(refusal)) => return refusal,
        Err(e) => {
            return Answer::message(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("stand-in: git failed: {e:#}"),
            );
        }
    };
    let mut st = hub.lock();
    let open_for_head = st
        .pulls
        .iter()
        .any(|p| p.owner == owner && p.repo == name && p.head == head && p.state == "open");
    if open_for_head {
        return Answer::custom(&format!(
            "A pull request already exists for {owner}:{head}."
        ));
    }
    let number = 1 + st
        .pulls
        .iter()
        .filter(|p| p.owner == owner && p.repo == name)
        .count() as u64;
    let pull = PullRequest {
        number,
        owner: owner.to_owned(),
        repo: name.to_owned(),
        title: title.to_owned(),
        body: body.get("body").and_then(Value::as_str).map(str::to_owned),
        head: head.to_owned(),
        head_sha,
        base: base.to_owned(),
        base_sha,
        draft: body.get("draft").and_then(Value::as_bool).unwrap_or(false),
        state: "open".to_owned(),
        html_url: format!("https://github.com/{owner}/{name}/pull/{number}"),
    };
    let json = pull.json(&st.api_url);
    st.pulls.push(pull);
    Answer {
        status: StatusCode::CREATED,
        body: json,
        created: true,
    }
}

/// The shas of `head` and `base` when both are branches of `repo` and `head` has commits
/// `base` lacks; otherwise GitHub's refusal.
fn branches_to_merge(
    repo: &BareRepo,
    head: &str,
    base: &str,
) -> anyhow::Result<Result<(String, String), Answer>> {
    let invalid = |field: &str| {
        Answer::invalid(json!({"resource": "PullRequest", "field": field, "code": "invalid"}))
    };
    let Some(head_sha) = repo.branch_head(head)? else {
        return Ok(Err(invalid("head")));
    };
    let Some(base_sha) = repo.branch_head(base)? else {
        return Ok(Err(invalid("base")));
    };
    let ahead = repo.git(&["rev-list", "--count", &format!("{base_sha}..{head_sha}")])?;
    if ahead.trim() == "0" {
        return Ok(Err(Answer::custom(&format!(
            "No commits between {base} and {head}"
        ))));
    }
    Ok(Ok((head_sha, base_sha)))
}
