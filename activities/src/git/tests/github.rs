//! `deliver` in mode `pr`: the push goes to a real bare repository, the pull request to a
//! stand-in of GitHub's pulls API that records every request and, like GitHub, refuses
//! requests without the token, the API headers or a user agent.

use std::sync::{Arc, Mutex};

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use axum::{Json, Router};
use baton_proto::Delivered;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tempfile::TempDir;

use super::super::{GitSettings, deliver};
use super::Origin;
use super::deliver::request;

const TOKEN: &str = "ghp-test-token";

/// What POST answers.
#[derive(Clone)]
enum OnPost {
    Create,
    /// A validation error with these `errors[].message`s.
    Invalid(Vec<&'static str>),
    /// Another attempt opened it a moment ago: it exists, and GitHub says so.
    AlreadyOpened,
}

struct Hub {
    /// `METHOD path?query` and the JSON body of each request, in order.
    requests: Vec<(String, Value)>,
    pulls: Vec<Value>,
    on_post: OnPost,
}

type Shared = Arc<Mutex<Hub>>;

fn refusal(headers: &HeaderMap) -> Option<(StatusCode, Json<Value>)> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if header("authorization") != Some(&format!("Bearer {TOKEN}")) {
        return Some((
            StatusCode::UNAUTHORIZED,
            Json(json!({ "message": "Bad credentials" })),
        ));
    }
    if header("accept") != Some("application/vnd.github+json")
        || header("x-github-api-version") != Some("2022-11-28")
        || header("user-agent") != Some("baton")
    {
        return Some((
            StatusCode::BAD_REQUEST,
            Json(json!({ "message": "missing API headers" })),
        ));
    }
    None
}

fn open(hub: &mut Hub, head: &str) -> Value {
    let number = hub.pulls.len() + 1;
    let pull = json!({
        "number": number,
        "html_url": format!("https://github.example/acme/tool/pull/{number}"),
        "head": { "label": format!("acme:{head}") },
    });
    hub.pulls.push(pull.clone());
    pull
}

async fn list(
    State(hub): State<Shared>,
    headers: HeaderMap,
    Query(query): Query<std::collections::BTreeMap<String, String>>,
) -> (StatusCode, Json<Value>) {
    let mut hub = hub.lock().unwrap();
    hub.requests.push((
        format!(
            "GET head={} state={}",
            query.get("head").map_or("", String::as_str),
            query.get("state").map_or("", String::as_str)
        ),
        Value::Null,
    ));
    if let Some(refused) = refusal(&headers) {
        return refused;
    }
    let head = query.get("head").cloned().unwrap_or_default();
    let found: Vec<Value> = hub
        .pulls
        .iter()
        .filter(|pull| pull["head"]["label"] == head.as_str())
        .cloned()
        .collect();
    (StatusCode::OK, Json(Value::Array(found)))
}

async fn create(
    State(hub): State<Shared>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    let mut hub = hub.lock().unwrap();
    hub.requests.push(("POST".into(), body.clone()));
    if let Some(refused) = refusal(&headers) {
        return refused;
    }
    let head = body["head"].as_str().unwrap_or_default().to_owned();
    match hub.on_post.clone() {
        OnPost::Create => (StatusCode::CREATED, Json(open(&mut hub, &head))),
        OnPost::Invalid(messages) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({
                "message": "Validation Failed",
                "errors": messages.iter().map(|m| json!({ "resource": "PullRequest", "code": "custom", "message": m })).collect::<Vec<_>>(),
            })),
        ),
        OnPost::AlreadyOpened => {
            open(&mut hub, &head);
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                Json(json!({
                    "message": "Validation Failed",
                    "errors": [{ "resource": "PullRequest", "code": "custom",
                                 "message": format!("A pull request already exists for acme:{head}.") }],
                })),
            )
        }
    }
}

/// The stand-in on a loopback port; the settings pointing at it.
async fn hub(on_post: OnPost) -> (Shared, GitSettings, tokio::task::JoinHandle<()>) {
    let shared = Arc::new(Mutex::new(Hub {
        requests: Vec::new(),
        pulls: Vec::new(),
        on_post,
    }));
    let app = Router::new()
        .route("/api/repos/acme/tool/pulls", get(list).post(create))
        .with_state(shared.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let mut settings = GitSettings::default();
    settings.github.api_url = format!("http://{address}/api/");
    settings.github.token_env = "BATON_TEST_GITHUB_TOKEN".into();
    (shared, settings, server)
}

fn token(name: &str) -> Option<String> {
    (name == "BATON_TEST_GITHUB_TOKEN").then(|| TOKEN.to_owned())
}

async fn deliver_pr(
    settings: &GitSettings,
    origin: &Origin,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Delivered {
    let mut request = request(&origin.url(), &origin.first, "pr", "");
    if let Some(delivery) = request.delivery.as_mut() {
        delivery.draft = true;
    }
    let scratch = TempDir::new().unwrap();
    deliver(
        settings,
        &request,
        &origin.patch(),
        "run-1",
        "the answer\n\n 3 files changed",
        scratch.path(),
        env,
    )
    .await
    .unwrap()
}

fn requests(hub: &Shared) -> Vec<String> {
    hub.lock()
        .unwrap()
        .requests
        .iter()
        .map(|(line, _)| line.clone())
        .collect()
}

#[tokio::test]
async fn opens_one_pull_request_and_finds_it_on_a_retry() {
    let origin = Origin::new();
    let (hub, settings, server) = hub(OnPost::Create).await;
    let delivered = deliver_pr(&settings, &origin, &token).await;
    assert_eq!(delivered.error, "");
    assert_eq!(delivered.mode, "pr");
    assert_eq!(delivered.branch, "baton/run-1");
    assert_eq!(
        delivered.pull_request_url,
        "https://github.example/acme/tool/pull/1"
    );
    assert_eq!(delivered.pull_request_number, 1);
    let list = "GET head=acme:baton/run-1 state=all".to_owned();
    assert_eq!(requests(&hub), vec![list.clone(), "POST".into()]);
    assert_eq!(
        hub.lock().unwrap().requests[1].1,
        json!({
            "title": "Fix the parser so that the failing test passes",
            "head": "baton/run-1",
            "base": "main",
            "body": "the answer\n\n 3 files changed",
            "draft": true,
        })
    );

    let again = deliver_pr(&settings, &origin, &token).await;
    assert_eq!(again, delivered);
    assert_eq!(requests(&hub), vec![list.clone(), "POST".into(), list]);
    server.abort();
}

#[tokio::test]
async fn a_pull_request_opened_by_an_earlier_attempt_meanwhile_is_used() {
    let origin = Origin::new();
    let (hub, settings, server) = hub(OnPost::AlreadyOpened).await;
    let delivered = deliver_pr(&settings, &origin, &token).await;
    assert_eq!(delivered.error, "");
    assert_eq!(delivered.pull_request_number, 1);
    assert_eq!(requests(&hub).len(), 3, "list, post, list again");
    server.abort();
}

#[tokio::test]
async fn a_validation_error_and_a_missing_token_come_back_in_words() {
    let origin = Origin::new();
    let (hub, settings, server) = hub(OnPost::Invalid(vec![
        "No commits between main and baton/run-1",
    ]))
    .await;
    let delivered = deliver_pr(&settings, &origin, &token).await;
    assert_eq!(
        delivered.error,
        "GitHub refused to open the pull request (HTTP 422): Validation Failed: No commits \
         between main and baton/run-1"
    );
    assert_eq!(delivered.commit.len(), 40, "the branch was pushed");
    assert_eq!(delivered.pull_request_url, "");

    let before = requests(&hub).len();
    let delivered = deliver_pr(&settings, &origin, &super::no_env).await;
    assert_eq!(
        delivered.error,
        "cannot open the pull request: environment variable BATON_TEST_GITHUB_TOKEN (the GitHub \
         token, [git.github] token_env) is not set on the workers; set it there"
    );
    assert_eq!(requests(&hub).len(), before, "no request without a token");

    let wrong = |name: &str| (name == "BATON_TEST_GITHUB_TOKEN").then(|| "wrong".to_owned());
    let delivered = deliver_pr(&settings, &origin, &wrong).await;
    assert_eq!(
        delivered.error,
        "GitHub refused to look for an existing pull request (HTTP 401): Bad credentials (check \
         the token in BATON_TEST_GITHUB_TOKEN on the workers)"
    );
    server.abort();
}
