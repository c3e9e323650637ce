//! Running from GitHub: `baton serve` takes signed webhook deliveries (payloads written from
//! GitHub's documented examples, `tests/github/*.json`) and a worker acts as a GitHub App
//! against the GitHub stand-in, which checks the app's JWTs and scopes its installation
//! tokens, and a git server that takes pushes made with those tokens only.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use baton_tests::*;
use common::*;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

const SECRET: &str = "webhook-secret-5e1f";
const APP_ID: &str = "31337";
const RUN: &str = "gh-acme-parser-7";

/// The repository, the stand-in acting as GitHub with the app installed on `acme`, a git
/// server taking the app's tokens, a worker with the app's key, and `baton serve`.
struct Hub {
    _repos: GitRepos,
    repo: BareRepo,
    http: GitHttp,
    github: GitHubStandIn,
    serve: Option<RunningCmd>,
    port: u16,
    runtime: tokio::runtime::Runtime,
    worker: Worker,
    queue: String,
    worker_config: String,
}

fn app_key(dir: &Path) -> (PathBuf, String) {
    let out = std::process::Command::new("openssl")
        .args(["genrsa", "-traditional", "2048"])
        .output()
        .unwrap_or_else(|e| {
            panic!("openssl makes the app's test key (apt-get install openssl): {e}")
        });
    assert!(out.status.success());
    let pem = String::from_utf8(out.stdout).unwrap();
    let path = dir.join("app.pem");
    std::fs::write(&path, &pem).unwrap();
    (path, pem)
}

/// Two writes then an answer, twice: one per task.
fn two_task_script(dir: &Path) -> String {
    let write = |path: &str, content: &str| {
        json!({"text": "Writing.", "tool_calls": [{"name": "write_file",
            "arguments": {"path": path, "content": content}}]})
    };
    let append = json!({"text": "Writing.", "tool_calls": [{"name": "shell",
        "arguments": {"command": "printf -- '- fixed the parser\\n' >> CHANGELOG.md"}}]});
    script(
        dir,
        "gh",
        json!([
            append,
            {"text": "Added CHANGELOG.md."},
            write("TESTING.md", "Run cargo test.\n"),
            {"text": "Added TESTING.md too."}
        ]),
    )
    .display()
    .to_string()
}

impl Hub {
    fn start(server: &DevServer, dir: &Path) -> Hub {
        let script = two_task_script(dir);
        Hub::start_with(server, dir, &script, &["--no-approval"])
    }

    /// A hub whose runs follow `script`, with more `baton submit` flags.
    fn start_with(server: &DevServer, dir: &Path, script: &str, flags: &[&str]) -> Hub {
        let repos = GitRepos::new().unwrap();
        let repo = repos
            .create("acme/parser.git", &[("README.md", "parser\n")])
            .unwrap();
        let (key_path, pem) = app_key(dir);
        let github =
            GitHubStandIn::start_app("no-static-token", &repos, APP_ID, &pem, "acme").unwrap();
        let http = GitHttp::start_accepting(&repos, "no-static-token", Some(github.token_check()))
            .unwrap();
        github.set_clone_base(&http.base_url());
        github.set_permission("ann", "maintain");
        github.set_permission("bob", "read");
        let queue = unique("gh");
        let key = key_path.display();
        let worker_config = dir.join("worker.toml");
        std::fs::write(
            &worker_config,
            format!(
                "[git]\nauthor_name = \"baton-app[bot]\"\nauthor_email = \"bot@example.invalid\"\n\
                 [git.credentials.\"127.0.0.1:{}\"]\ngithub_app = true\n\
                 allow_plain_http_on_loopback = true\n\
                 [git.github]\napi_url = \"{}\"\napp_id = \"{APP_ID}\"\nprivate_key_file = \"{key}\"\n",
                http.port(),
                github.api_url()
            ),
        )
        .unwrap();
        let worker_config = worker_config.display().to_string();
        let first = worker(server, &queue, &[("BATON_CONFIG", &worker_config)]);
        let port = free_port().unwrap();
        let serve_config = dir.join("serve.toml");
        let flags: Vec<String> = flags.iter().map(|f| format!(", \"{f}\"")).collect();
        std::fs::write(
            &serve_config,
            format!(
                "listen = \"127.0.0.1:{port}\"\n[github]\napi_url = \"{}\"\napp_id = \"{APP_ID}\"\n\
                 private_key_file = \"{key}\"\nwebhook_secret_env = \"TEST_WEBHOOK_SECRET\"\n\
                 [[repos]]\nname = \"acme/*\"\nidle_timeout = \"10m\"\n\
                 submit = [\"--task-queue\", \"{queue}\", \"--script\", \"{script}\"{}]\n",
                github.api_url(),
                flags.concat()
            ),
        )
        .unwrap();
        let serve = baton_spawn(
            server,
            &["serve", "--config", &serve_config.display().to_string()],
            &[("TEST_WEBHOOK_SECRET", SECRET)],
        )
        .unwrap();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let hub = Hub {
            _repos: repos,
            repo,
            http,
            github,
            serve: Some(serve),
            port,
            runtime,
            worker: first,
            queue,
            worker_config,
        };
        wait_until_blocking(Duration::from_secs(30), "baton serve answers", || {
            let url = format!("http://127.0.0.1:{port}/healthz");
            Ok(hub
                .runtime
                .block_on(reqwest::get(&url))
                .is_ok_and(|r| r.status().is_success())
                .then_some(()))
        })
        .unwrap();
        hub
    }

    /// kill -9 of the worker, and another one in its place.
    fn replace_worker(&mut self, server: &DevServer) {
        self.worker.kill9();
        self.worker = worker(
            server,
            &self.queue,
            &[("BATON_CONFIG", &self.worker_config)],
        );
    }

    /// A payload from the fixture `name`, for issue `number`, its clone URL the git server's.
    fn payload(&self, name: &str, number: u64, edit: impl FnOnce(&mut Value)) -> Vec<u8> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("github")
            .join(name);
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        v["issue"]["number"] = json!(number);
        v["repository"]["clone_url"] = json!(self.http.url("acme/parser.git"));
        edit(&mut v);
        serde_json::to_vec(&v).unwrap()
    }

    fn labeled(&self, number: u64) -> Vec<u8> {
        self.payload("issues-labeled.json", number, |_| {})
    }

    fn comment(&self, number: u64, login: &str, body: &str) -> Vec<u8> {
        self.payload("issue-comment-created.json", number, |v| {
            v["comment"]["body"] = json!(body);
            v["comment"]["user"]["login"] = json!(login);
            v["sender"]["login"] = json!(login);
        })
    }

    /// Posts a delivery signed with `secret`; the status and the JSON answer.
    fn post(&self, event: &str, delivery: &str, body: &[u8], secret: &str) -> (u16, Value) {
        let signature = baton_github::signature::sign(secret.as_bytes(), body);
        let url = format!("http://127.0.0.1:{}/github/webhook", self.port);
        self.runtime.block_on(async {
            let response = reqwest::Client::new()
                .post(&url)
                .header("X-GitHub-Event", event)
                .header("X-GitHub-Delivery", delivery)
                .header("X-Hub-Signature-256", signature)
                .header("Content-Type", "application/json")
                .body(body.to_vec())
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            (status, response.json().await.unwrap_or(Value::Null))
        })
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        if let Some(mut serve) = self.serve.take() {
            let _ = serve.signal(nix::sys::signal::Signal::SIGTERM);
            let _ = serve.wait(Duration::from_secs(10));
        }
    }
}

/// The id of the call `RUN` waits for approval of, once it waits.
fn pending_call(server: &DevServer) -> String {
    let waiting = wait_until_blocking(Duration::from_secs(60), "the call waits", || {
        let v = baton(server, &["status", RUN, "--json"])?
            .json()
            .unwrap_or_default();
        Ok((v["state"] == "AWAITING_APPROVAL").then_some(v))
    })
    .unwrap();
    waiting["pending"][0]["call_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn wait_idle(server: &DevServer, run: &str, task: u64) -> Value {
    wait_until_blocking(Duration::from_secs(90), "the run answers its task", || {
        let out = baton(server, &["status", run, "--json"])?;
        let v = out.json().unwrap_or_default();
        Ok((v["state"] == "IDLE" && v["task"].as_u64() >= Some(task)).then_some(v))
    })
    .unwrap()
}

#[test]
fn a_labelled_issue_starts_one_run_that_opens_one_pull_request_with_the_apps_token() {
    let server = DevServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start(&server, dir.path());

    // A delivery with a wrong signature: 401, nothing started.
    let (status, answer) = hub.post("issues", "d-forged", &hub.labeled(9), "not-the-secret");
    assert_eq!(status, 401, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("does not match"));

    let body = hub.labeled(7);
    let (status, answer) = hub.post("issues", "d-1", &body, SECRET);
    assert_eq!(
        (status, answer["run_id"].as_str()),
        (200, Some(RUN)),
        "{answer}"
    );
    // The same delivery again (GitHub's redelivery): the same run, nothing twice.
    let (status, again) = hub.post("issues", "d-1", &body, SECRET);
    assert_eq!(
        (status, again["duplicate"].as_bool()),
        (200, Some(true)),
        "{again}"
    );

    let status = wait_idle(&server, RUN, 1);
    assert_eq!(status["answer"], "Added CHANGELOG.md.", "{status}");
    assert_eq!(executions(&server, RUN), 1);
    assert_eq!(
        executions(&server, "gh-acme-parser-9"),
        0,
        "the forged delivery"
    );

    // One pull request, opened and pushed with an installation token scoped to the repo.
    let pulls = hub.github.pulls();
    assert_eq!(pulls.len(), 1, "{pulls:?}");
    assert_eq!(
        (pulls[0].head.as_str(), pulls[0].base.as_str()),
        ("baton/gh-acme-parser-7", "main")
    );
    let tokens = hub.github.issued_tokens();
    assert!(!tokens.is_empty());
    assert!(
        tokens
            .iter()
            .all(|t| t.repos == vec!["acme/parser".to_owned()]),
        "{tokens:?}"
    );
    let create = hub
        .github
        .requests()
        .into_iter()
        .find(|r| r.method == "POST" && r.path == "/repos/acme/parser/pulls")
        .unwrap();
    let presented = create.header("authorization").unwrap().to_owned();
    assert!(
        tokens.iter().any(|t| presented.ends_with(&t.token)),
        "the pull request was opened with an installation token"
    );
    let commits = hub.repo.commits("baton/gh-acme-parser-7").unwrap();
    assert_eq!(commits.len(), 2, "one commit on main: {commits:?}");
    assert_eq!(hub.http.refused_credentials(), 0);
    assert!(
        hub.github.refused_requests().is_empty(),
        "{:?}",
        hub.github.refused_requests()
    );
    // The run's one comment holds the answer and the change; the task's check run went
    // in progress, then completed with the diffstat, on the commit the task started from.
    let progress = progress_comments(&hub);
    assert_eq!(progress.len(), 1, "{progress:?}");
    assert_eq!(progress[0].author, "baton-app[bot]");
    assert!(
        progress[0].body.contains("Added CHANGELOG.md."),
        "{}",
        progress[0].body
    );
    assert!(
        progress[0].body.contains("`CHANGELOG.md` added"),
        "{}",
        progress[0].body
    );
    let main = hub.repo.branch_head("main").unwrap().unwrap();
    let checks = hub.github.check_runs();
    assert_eq!(checks.len(), 1, "{checks:?}");
    assert_eq!(checks[0].head_sha, main);
    assert_eq!(checks[0].external_id, format!("{RUN}/task-1"));
    let statuses: Vec<&str> = checks[0].statuses.iter().map(String::as_str).collect();
    assert_eq!(statuses.first(), Some(&"queued"), "{statuses:?}");
    assert!(statuses.contains(&"in_progress"), "{statuses:?}");
    assert_eq!(statuses.last(), Some(&"completed"), "{statuses:?}");
    assert_eq!(checks[0].conclusion.as_deref(), Some("success"));
    assert!(
        checks[0].summary.contains("`CHANGELOG.md` added"),
        "{}",
        checks[0].summary
    );

    // A follow-up comment is the same run's next task; the pull request gets a second commit.
    let (status, answer) = hub.post(
        "issue_comment",
        "d-2",
        &hub.comment(7, "ann", "/baton also say how to run the tests"),
        SECRET,
    );
    assert_eq!(
        (status, answer["task"].as_u64()),
        (200, Some(2)),
        "{answer}"
    );
    let status = wait_idle(&server, RUN, 2);
    assert_eq!(status["answer"], "Added TESTING.md too.", "{status}");
    assert_eq!(executions(&server, RUN), 1, "the same run");
    let commits = hub.repo.commits("baton/gh-acme-parser-7").unwrap();
    assert_eq!(
        commits.len(),
        3,
        "a second commit on top of the first: {commits:?}"
    );
    assert_eq!(
        hub.repo
            .show("baton/gh-acme-parser-7", "TESTING.md")
            .unwrap(),
        "Run cargo test.\n"
    );
    assert_eq!(hub.github.pulls().len(), 1, "the same pull request");
    let progress = progress_comments(&hub);
    assert_eq!(progress.len(), 1, "still one comment: {progress:?}");
    assert!(
        progress[0].body.contains("Added TESTING.md too."),
        "{}",
        progress[0].body
    );
    let checks = hub.github.check_runs();
    assert_eq!(checks.len(), 2, "one check run per task: {checks:?}");
    assert_eq!(
        checks[1].head_sha, commits[1].0,
        "task 2 works on task 1's commit"
    );

    // Cancelled while idle: the run ends with its last answer, said in the same comment.
    let out = baton(&server, &["cancel", RUN]).unwrap();
    assert_eq!(out.code, 0, "{out}");
    let result = baton(&server, &["result", RUN, "--wait", "--json"]).unwrap();
    assert_eq!(
        result.json().unwrap()["answer"],
        "Added TESTING.md too.",
        "{result}"
    );
    wait_until_blocking(
        Duration::from_secs(30),
        "the comment says the run ended",
        || {
            let progress = progress_comments(&hub);
            Ok(progress[0].body.contains("Completed").then_some(()))
        },
    )
    .unwrap();
    assert_eq!(progress_comments(&hub).len(), 1);

    // A comment on the pull request starts that pull request's run, on its head branch.
    let pull = hub.payload("issue-comment-created.json", 1, |v| {
        v["issue"]["pull_request"] =
            json!({"url": "https://api.github.com/repos/acme/parser/pulls/1"});
        v["issue"]["title"] = json!("Keep a changelog");
        v["comment"]["body"] = json!("/baton tidy up the wording");
    });
    let (status, answer) = hub.post("issue_comment", "d-pr", &pull, SECRET);
    assert_eq!(
        (status, answer["run_id"].as_str()),
        (200, Some("gh-acme-parser-1")),
        "{answer}"
    );
    let head = hub
        .repo
        .branch_head("baton/gh-acme-parser-7")
        .unwrap()
        .unwrap();
    wait_idle(&server, "gh-acme-parser-1", 1);
    let check = hub
        .github
        .check_runs()
        .into_iter()
        .find(|c| c.external_id == "gh-acme-parser-1/task-1")
        .unwrap();
    assert_eq!(
        check.head_sha, head,
        "the run works on the pull request's head"
    );
    // Its commit is pushed onto the pull request's branch (fast-forward), no new pull request.
    let commits = hub.repo.commits("baton/gh-acme-parser-7").unwrap();
    assert_eq!(commits.len(), 4, "{commits:?}");
    assert_eq!(commits[1].0, head);
    assert_eq!(
        hub.repo
            .show("baton/gh-acme-parser-7", "CHANGELOG.md")
            .unwrap(),
        "- fixed the parser\n- fixed the parser\n"
    );
    assert_eq!(hub.github.pulls().len(), 1);
    let _ = baton(&server, &["cancel", "gh-acme-parser-1"]);
}

/// The run's progress comments (its marker in the body).
fn progress_comments(hub: &Hub) -> Vec<IssueComment> {
    hub.github
        .comments()
        .into_iter()
        .filter(|c| c.body.contains(&format!("<!-- baton-run: {RUN} -->")))
        .collect()
}

#[test]
fn a_comment_from_a_reader_starts_nothing_and_is_told_why() {
    let server = DevServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start(&server, dir.path());
    let (status, answer) = hub.post(
        "issue_comment",
        "d-bob",
        &hub.comment(8, "bob", "/baton delete the tests"),
        SECRET,
    );
    assert_eq!(status, 200, "{answer}");
    assert!(answer["refused"].as_str().is_some(), "{answer}");
    let replies = hub.github.comments();
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(replies[0].issue, 8);
    assert!(
        replies[0].body.contains("@bob") && replies[0].body.contains("write permission"),
        "{}",
        replies[0].body
    );
    // Comments not for baton, and baton's own, start nothing and get no reply.
    let (_, ignored) = hub.post(
        "issue_comment",
        "d-x",
        &hub.comment(8, "ann", "LGTM"),
        SECRET,
    );
    assert!(ignored["ignored"].is_string(), "{ignored}");
    let (status, _) = hub.post(
        "ping",
        "d-ping",
        br#"{"zen": "Keep it logically awesome."}"#,
        SECRET,
    );
    assert_eq!(status, 200);
    assert_eq!(hub.github.comments().len(), 1);
    assert_eq!(executions(&server, "gh-acme-parser-8"), 0);
}

#[test]
fn a_call_waiting_for_approval_is_posted_and_a_maintainers_approve_comment_runs_it() {
    let server = DevServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let script = script(
        dir.path(),
        "approve",
        json!([
            {"text": "Recording it.", "tool_calls": [{"name": "shell",
                "arguments": {"command": "echo approved >> ran.txt"}}]},
            {"text": "Recorded."}
        ]),
    )
    .display()
    .to_string();
    let mut hub = Hub::start_with(&server, dir.path(), &script, &[]);
    let (status, answer) = hub.post("issues", "d-1", &hub.labeled(7), SECRET);
    assert_eq!(status, 200, "{answer}");
    let call = pending_call(&server);
    // The call is posted, whole, with how to answer it.
    let posted = wait_until_blocking(Duration::from_secs(30), "the call is posted", || {
        Ok(progress_comments(&hub)
            .into_iter()
            .find(|c| c.body.contains(&format!("`{call}` **shell**"))))
    })
    .unwrap();
    assert!(
        posted.body.contains("echo approved >> ran.txt"),
        "{}",
        posted.body
    );
    assert!(posted.body.contains("/approve"), "{}", posted.body);

    // An outsider's approval changes nothing and is told why.
    let (status, refused) = hub.post(
        "issue_comment",
        "d-bob",
        &hub.comment(7, "bob", &format!("/approve {call}")),
        SECRET,
    );
    assert_eq!(status, 200, "{refused}");
    assert!(
        refused["refused"]
            .as_str()
            .unwrap()
            .contains("nothing changed"),
        "{refused}"
    );
    let v = baton(&server, &["status", RUN, "--json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(v["state"], "AWAITING_APPROVAL", "{v}");

    // A maintainer's approval runs it, decided as github:ann; the same comment redelivered
    // decides nothing twice.
    let approve = hub.comment(7, "ann", &format!("/approve {call}"));
    let (status, decided) = hub.post("issue_comment", "d-ann", &approve, SECRET);
    assert_eq!(
        (status, decided["decided"].as_bool()),
        (200, Some(true)),
        "{decided}"
    );
    // The worker that took the approval dies before the call is done; another goes on.
    hub.replace_worker(&server);
    let (status, again) = hub.post("issue_comment", "d-ann", &approve, SECRET);
    assert_eq!(
        (status, again["decided"].as_bool()),
        (200, Some(true)),
        "{again}"
    );
    let idle = wait_idle(&server, RUN, 1);
    assert_eq!(idle["answer"], "Recorded.", "{idle}");
    let _ = baton(&server, &["cancel", RUN]);
    let events = baton(&server, &["watch", RUN, "--json"]).unwrap();
    let decided: Vec<Value> = events
        .json_lines()
        .unwrap()
        .into_iter()
        .filter(|l| l["kind"] == "approval_decided")
        .collect();
    assert_eq!(decided.len(), 1, "{decided:?}");
    assert_eq!(
        decided[0]["approval_decided"]["approver"], "github:ann",
        "{decided:?}"
    );
    let replies: Vec<IssueComment> = hub
        .github
        .comments()
        .into_iter()
        .filter(|c| c.body.starts_with("@bob"))
        .collect();
    assert_eq!(replies.len(), 1, "{replies:?}");
    // The call's effect is there once: the delivered tree has one line.
    let commits = hub.repo.commits("baton/gh-acme-parser-7").unwrap();
    assert_eq!(commits.len(), 2, "{commits:?}");
    assert_eq!(
        hub.repo.show("baton/gh-acme-parser-7", "ran.txt").unwrap(),
        "approved\n"
    );
}

#[test]
fn a_team_approver_decides_as_a_member_and_a_maintainer_outside_the_team_cannot() {
    let server = DevServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let script = script(
        dir.path(),
        "team",
        json!([
            {"text": "Recording it.", "tool_calls": [{"name": "shell",
                "arguments": {"command": "echo ok > ran.txt"}}]},
            {"text": "Recorded."}
        ]),
    )
    .display()
    .to_string();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "require_approval = [\"shell\"]\n[[approvers]]\ntool = \"shell\"\n\
         identities = [\"github-team:acme/reviewers\"]\n",
    )
    .unwrap();
    let hub = Hub::start_with(
        &server,
        dir.path(),
        &script,
        &["--policy", &policy.display().to_string()],
    );
    hub.github.set_permission("carol", "write");
    hub.github.set_team("acme/reviewers", &["carol"]);
    let (status, answer) = hub.post("issues", "d-1", &hub.labeled(7), SECRET);
    assert_eq!(status, 200, "{answer}");
    let call = pending_call(&server);

    // A maintainer outside the team: refused by the run's policy, told so.
    let (_, refused) = hub.post(
        "issue_comment",
        "d-ann",
        &hub.comment(7, "ann", "/approve all"),
        SECRET,
    );
    assert_eq!(refused["decided"], false, "{refused}");
    let reply = refused["reply"].as_str().unwrap();
    assert!(reply.contains("github-team:acme/reviewers"), "{reply}");
    let v = baton(&server, &["status", RUN, "--json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(v["state"], "AWAITING_APPROVAL", "{v}");

    // A member of the team: decided as the team's member.
    let (_, decided) = hub.post(
        "issue_comment",
        "d-carol",
        &hub.comment(7, "carol", &format!("/approve {call}")),
        SECRET,
    );
    assert_eq!(decided["decided"], true, "{decided}");
    wait_idle(&server, RUN, 1);
    let _ = baton(&server, &["cancel", RUN]);
    let events = baton(&server, &["watch", RUN, "--json"]).unwrap();
    let approver: Vec<String> = events
        .json_lines()
        .unwrap()
        .into_iter()
        .filter(|l| l["kind"] == "approval_decided")
        .map(|l| {
            l["approval_decided"]["approver"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    assert_eq!(approver, vec!["github-team:acme/reviewers/carol"]);
}
