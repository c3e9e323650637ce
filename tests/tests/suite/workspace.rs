//! Work in, results out, end to end against real servers: a checkout uploaded with
//! `--workspace-from` and its fix handed back as a patch that applies to a fresh clone; a
//! `--git` source (real `git daemon`, real `git http-backend` with a token) delivered as a
//! pushed branch and a pull request on a GitHub REST stand-in, through a kill -9 during
//! delivery; the change set of a killed run against an undisturbed one; `baton apply` on a
//! conflicting tree; bad input.

#![allow(clippy::unwrap_used)]

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use crate::common;

use baton_tests::*;
use common::*;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

const LIB_BUGGY: &str = "add() { echo $(( $1 - $2 )); }\n";
const TEST_SH: &str =
    ". ./lib.sh\nif [ \"$(add 2 3)\" = 5 ]; then echo PASS; else echo FAIL; exit 1; fi\n";
const TARGET_MARKER: &str = "TARGET-MARKER-7f3a9c";
const ENV_MARKER: &str = "ENV-MARKER-91c2d4";

/// `git` in `dir` with a fixed identity; panics on failure; returns stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = run_git(dir, args).unwrap();
    assert_eq!(out.code, 0, "git {args:?} failed: {out}");
    out.stdout.trim().to_owned()
}

/// A git repository with a small project whose test fails (`sh test.sh`), committed, plus
/// ignored files holding markers. Returns the commit.
fn failing_project(dir: &Path) -> String {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    std::fs::write(dir.join("lib.sh"), LIB_BUGGY).unwrap();
    std::fs::write(dir.join("test.sh"), TEST_SH).unwrap();
    std::fs::write(dir.join(".gitignore"), "target/\n.env\n").unwrap();
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "parser with a failing test"]);
    std::fs::create_dir_all(dir.join("target")).unwrap();
    std::fs::write(dir.join("target/build.out"), TARGET_MARKER).unwrap();
    std::fs::write(dir.join(".env"), format!("API_KEY={ENV_MARKER}\n")).unwrap();
    git(dir, &["rev-parse", "HEAD"])
}

/// The script of a run that fixes `lib.sh` with `edit_file` and runs the test with `shell`.
fn fix_script(dir: &Path) -> String {
    script(
        dir,
        "fix",
        json!([
            {"text": "Fixing add.", "tool_calls": [{"name": "edit_file", "arguments":
                {"path": "lib.sh", "old_text": "$(( $1 - $2 ))", "new_text": "$(( $1 + $2 ))"}}]},
            {"text": "Running the test.", "tool_calls": [{"name": "shell", "arguments":
                {"command": "sh test.sh"}}]},
            {"text": "Fixed add() in lib.sh: it subtracted. The test passes."}
        ]),
    )
    .display()
    .to_string()
}

fn submit_wait(server: &DevServer, args: &[&str]) -> CmdOutput {
    let mut all = vec!["submit"];
    all.extend_from_slice(args);
    all.extend(["--wait", "--json"]);
    baton_with_timeout(server, &all, &[], None, Duration::from_secs(180)).unwrap()
}

fn checksums(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut all: Vec<(PathBuf, Vec<u8>)> = files_under(dir)
        .into_iter()
        .filter(|p| !p.components().any(|c| c.as_os_str() == ".git"))
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    all.sort();
    all
}

#[test]
fn a_checkout_goes_in_and_its_fix_comes_out_as_a_patch_that_applies_to_a_fresh_clone() {
    let server = DevServer::start().unwrap();
    let queue = unique("ws-from");
    let _w = worker(&server, &queue, &[]);
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("project");
    let commit = failing_project(&project);
    let run = unique("run-fix");
    let out = submit_wait(
        &server,
        &[
            "--task-queue",
            &queue,
            "--id",
            &run,
            "--script",
            &fix_script(tmp.path()),
            "--no-approval",
            "--workspace-from",
            project.to_str().unwrap(),
            "fix the failing test",
        ],
    );
    assert_eq!(out.code, 0, "{out}");
    let r = out.json().unwrap();
    assert_eq!(r["status"], "COMPLETED", "{r}");
    let changes = &r["changes"];
    assert_eq!(changes["files_changed"], 1, "{r}");
    assert_eq!(changes["insertions"], 1, "{r}");
    assert_eq!(changes["deletions"], 1, "{r}");
    assert_eq!(changes["base_commit"], commit.as_str(), "{r}");
    assert_eq!(changes["files"][0]["path"], "lib.sh", "{r}");
    assert!(changes["patch"].as_str().unwrap().len() == 64, "{r}");
    // The agent's test run passed in the workspace.
    let transcript = baton(&server, &["transcript", &run, "--json"]).unwrap();
    assert!(transcript.stdout.contains("PASS"), "{transcript}");

    // Ignored files never reached the blob store.
    for file in files_under(&server.blob_dir()) {
        let bytes = std::fs::read(&file).unwrap();
        for marker in [TARGET_MARKER, ENV_MARKER] {
            assert!(
                !contains_bytes(&bytes, marker.as_bytes()),
                "{marker} is in the blob store ({})",
                file.display()
            );
        }
    }

    // The patch applies to a fresh clone at the same commit, and the test passes there.
    let diff = baton(&server, &["diff", &run])
        .unwrap()
        .ensure_success()
        .unwrap();
    assert!(
        diff.stdout.starts_with("diff --git a/lib.sh b/lib.sh"),
        "{diff}"
    );
    let clone = tmp.path().join("clone");
    git(
        tmp.path(),
        &["clone", "-q", project.to_str().unwrap(), "clone"],
    );
    git(&clone, &["checkout", "-q", &commit]);
    let patch = tmp.path().join("run.patch");
    std::fs::write(&patch, &diff.stdout).unwrap();
    git(&clone, &["apply", "--check", patch.to_str().unwrap()]);
    let applied = baton_with(
        &server,
        &["apply", &run, "-C", clone.to_str().unwrap()],
        &[],
        None,
    )
    .unwrap();
    assert_eq!(applied.code, 0, "{applied}");
    let test = std::process::Command::new("sh")
        .arg("test.sh")
        .current_dir(&clone)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&test.stdout).trim(), "PASS");

    let stat = baton(&server, &["diff", &run, "--stat"])
        .unwrap()
        .ensure_success()
        .unwrap();
    assert!(stat.stdout.contains("lib.sh"), "{stat}");
    assert!(
        stat.stdout
            .contains("1 file changed, 1 insertion(+), 1 deletion(-)"),
        "{stat}"
    );

    // A tree where the hunk conflicts: exit 2, the file named, nothing changed.
    let conflicted = tmp.path().join("conflicted");
    git(
        tmp.path(),
        &["clone", "-q", project.to_str().unwrap(), "conflicted"],
    );
    std::fs::write(conflicted.join("lib.sh"), "add() { echo 0; }\n").unwrap();
    std::fs::write(conflicted.join("other.txt"), "untouched\n").unwrap();
    let before = checksums(&conflicted);
    let refused = baton_with(
        &server,
        &["apply", &run, "-C", conflicted.to_str().unwrap()],
        &[],
        None,
    )
    .unwrap();
    assert_eq!(refused.code, 2, "{refused}");
    assert!(refused.stderr.contains("lib.sh"), "{refused}");
    assert_eq!(
        checksums(&conflicted),
        before,
        "apply changed files on a conflict"
    );

    // The final files, downloaded.
    let down = tmp.path().join("down");
    let got = baton(
        &server,
        &["download", &run, down.to_str().unwrap(), "--path", "*.sh"],
    )
    .unwrap()
    .ensure_success()
    .unwrap();
    assert!(got.stderr.contains("2 files"), "{got}");
    assert!(
        std::fs::read_to_string(down.join("lib.sh"))
            .unwrap()
            .contains("$1 + $2")
    );
    assert!(!down.join(".gitignore").exists(), "--path filters");
}

#[test]
fn bad_sources_get_clear_errors_before_or_at_the_start() {
    let server = DevServer::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    let out = baton(
        &server,
        &["submit", "--workspace-from", missing.to_str().unwrap(), "x"],
    )
    .unwrap();
    assert_eq!(out.code, 2, "{out}");
    assert!(out.stderr.contains("no such directory"), "{out}");

    let big = tmp.path().join("big");
    std::fs::create_dir_all(&big).unwrap();
    std::fs::write(big.join("huge.bin"), vec![7u8; 64 * 1024]).unwrap();
    std::fs::write(big.join("small.txt"), "hi").unwrap();
    let out = baton(
        &server,
        &[
            "submit",
            "--workspace-from",
            big.to_str().unwrap(),
            "--max-upload-size",
            "16KiB",
            "x",
        ],
    )
    .unwrap();
    assert_eq!(out.code, 2, "{out}");
    assert!(
        out.stderr.contains("huge.bin"),
        "the largest path is named: {out}"
    );
    assert!(
        files_under(&server.blob_dir()).is_empty(),
        "nothing uploaded"
    );

    let out = baton(&server, &["submit", "--deliver", "pr", "x"]).unwrap();
    assert_eq!(out.code, 2, "{out}");
    assert!(out.stderr.contains("--git"), "{out}");
}

/// Names of the worker's token variables (not `BATON_*`: those are settings).
const GIT_TOKEN_ENV: &str = "ACME_GIT_TOKEN";
const GH_TOKEN_ENV: &str = "ACME_GH_TOKEN";
const GH_TOKEN: &str = "ghp_standin_token_5d1e";

/// A worker whose settings file names `git_token` as the credentials of `remote`'s git HTTP
/// server (plain HTTP on loopback, which the credential must allow), and `remote`'s GitHub
/// stand-in as its API.
fn git_worker(
    server: &DevServer,
    queue: &str,
    dir: &Path,
    remote: &Remote,
    git_token: &str,
    workspace: Option<&Path>,
) -> Worker {
    let http_host = format!("127.0.0.1:{}", remote.http.port());
    let api_url = remote.github.api_url();
    let config = dir.join(format!("{queue}.toml"));
    std::fs::write(
        &config,
        format!(
            "[git]\nauthor_name = \"baton\"\nauthor_email = \"baton@example.invalid\"\n\
             [git.credentials.\"{http_host}\"]\ntoken_env = \"{GIT_TOKEN_ENV}\"\n\
             allow_plain_http_on_loopback = true\n\
             [git.github]\napi_url = \"{api_url}\"\ntoken_env = \"{GH_TOKEN_ENV}\"\n"
        ),
    )
    .unwrap();
    let config = config.display().to_string();
    let env = [
        ("BATON_CONFIG", config.as_str()),
        (GIT_TOKEN_ENV, git_token),
        (GH_TOKEN_ENV, GH_TOKEN),
    ];
    let mut w = match workspace {
        Some(root) => Worker::spawn_with_workspace(server, queue, root, &env).unwrap(),
        None => Worker::spawn(server, queue, &env).unwrap(),
    };
    w.wait_ready_blocking(Duration::from_secs(30)).unwrap();
    w
}

/// A script that writes one file, then answers.
fn write_script(dir: &Path, name: &str, slow: bool) -> String {
    let mut turns = vec![
        json!({"text": "Adding the changelog.", "tool_calls": [{"name": "write_file",
        "arguments": {"path": "CHANGELOG.md", "content": "# Changes\n\n- fixed the parser\n"}}]}),
    ];
    if slow {
        turns.push(json!({"text": "Waiting.", "tool_calls": [{"name": "shell",
            "arguments": {"command": "sleep 6; echo slept >> notes.txt"}}]}));
    }
    turns.push(json!({"text": "Added CHANGELOG.md.\n\nIt lists the parser fix."}));
    script(dir, name, Value::Array(turns)).display().to_string()
}

struct Remote {
    repos: GitRepos,
    repo: BareRepo,
    daemon: GitDaemon,
    http: GitHttp,
    github: GitHubStandIn,
    v1: String,
    head: String,
}

fn remote() -> Remote {
    let repos = GitRepos::new().unwrap();
    let repo = repos
        .create(
            "acme/parser.git",
            &[
                ("README.md", "parser\n"),
                ("src/lib.rs", "pub fn parse() {}\n"),
            ],
        )
        .unwrap();
    let v1 = repo.branch_head("main").unwrap().unwrap();
    repo.tag("v1", &v1).unwrap();
    let head = repo
        .commit(&[("src/lib.rs", "pub fn parse() -> u8 { 1 }\n")], "second")
        .unwrap();
    let daemon = GitDaemon::start(&repos).unwrap();
    let http = GitHttp::start(&repos, "http-token-77").unwrap();
    let github = GitHubStandIn::start(GH_TOKEN, &repos).unwrap();
    Remote {
        repos,
        repo,
        daemon,
        http,
        github,
        v1,
        head,
    }
}

#[test]
fn a_git_source_at_a_tag_and_at_a_sha_is_delivered_as_one_commit_and_one_pull_request() {
    let server = DevServer::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let remote = remote();
    let queue = unique("git-deliver");
    let _w = git_worker(&server, &queue, tmp.path(), &remote, "http-token-77", None);
    let url = remote.daemon.url("acme/parser.git");

    // At a tag, delivered as a pull request.
    let run = unique("run-pr");
    let out = submit_wait(
        &server,
        &[
            "--task-queue",
            &queue,
            "--id",
            &run,
            "--script",
            &write_script(tmp.path(), "pr", false),
            "--no-approval",
            "--git",
            &url,
            "--ref",
            "v1",
            "--deliver",
            "pr",
            "--branch",
            "changelog-v1",
            "add a changelog",
        ],
    );
    assert_eq!(out.code, 0, "{out}");
    let r = out.json().unwrap();
    assert_eq!(r["changes"]["base_commit"], remote.v1.as_str(), "{r}");
    let delivered = &r["delivered"];
    assert_eq!(delivered["ok"], true, "{r}");
    let branch = "changelog-v1".to_owned();
    assert_eq!(delivered["branch"], branch.as_str(), "{r}");
    let commits = remote.repo.commits(&branch).unwrap();
    assert_eq!(commits.len(), 2, "one new commit on top of v1: {commits:?}");
    assert_eq!(commits[1].0, remote.v1, "{commits:?}");
    assert_eq!(commits[0].0, delivered["commit"].as_str().unwrap());
    assert_eq!(commits[0].1, "Added CHANGELOG.md.");
    assert_eq!(
        remote.repo.show(&branch, "CHANGELOG.md").unwrap(),
        "# Changes\n\n- fixed the parser\n"
    );
    let pulls = remote.github.pulls();
    assert_eq!(pulls.len(), 1, "{pulls:?}");
    assert_eq!(
        delivered["pull_request_url"],
        pulls[0].html_url.as_str(),
        "{r}"
    );
    let body = pulls[0].body.clone().unwrap_or_default();
    assert!(
        body.contains("CHANGELOG.md"),
        "the body has the diffstat: {body}"
    );

    // At a commit sha, over HTTP with the worker's token, delivered as a branch.
    let run = unique("run-sha");
    let out = submit_wait(
        &server,
        &[
            "--task-queue",
            &queue,
            "--id",
            &run,
            "--script",
            &write_script(tmp.path(), "sha", false),
            "--no-approval",
            "--git",
            &remote.http.url("acme/parser.git"),
            "--ref",
            &remote.head,
            "--deliver",
            "branch",
            "add a changelog",
        ],
    );
    assert_eq!(out.code, 0, "{out}");
    let r = out.json().unwrap();
    assert_eq!(r["changes"]["base_commit"], remote.head.as_str(), "{r}");
    // Exactly one new commit on `baton/<run id>` (the default branch name).
    let commits = remote.repo.commits(&format!("baton/{run}")).unwrap();
    assert_eq!(commits.len(), 3, "{commits:?}");
    assert_eq!(commits[1].0, remote.head);
    assert_eq!(
        remote.github.pulls().len(),
        1,
        "a branch delivery opens no pull request"
    );
    // The token never reached the run's history.
    assert!(!history_text(&server, &run).contains("http-token-77"));
}

#[test]
fn a_worker_killed_during_delivery_still_leaves_one_commit_and_one_pull_request() {
    let server = DevServer::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let remote = remote();
    let queue = unique("git-kill");
    let root = tmp.path().join("workspaces");
    let mut first = git_worker(&server, &queue, tmp.path(), &remote, "x", Some(&root));
    remote.github.delay_create(Duration::from_secs(30));
    let run = unique("run-kill");
    submit(
        &server,
        &queue,
        &run,
        &[
            "--script",
            &write_script(tmp.path(), "kill", false),
            "--no-approval",
            "--git",
            &remote.daemon.url("acme/parser.git"),
            "--deliver",
            "pr",
        ],
        "add a changelog",
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(remote.github.wait_create_started(Duration::from_secs(90)))
        .unwrap();
    first.kill9();
    let _second = git_worker(&server, &queue, tmp.path(), &remote, "x", Some(&root));
    remote.github.delay_create(Duration::ZERO);
    let r = ended(&server, &run, 0);
    assert!(r.delivered.as_ref().unwrap().ok, "{r:?}");
    let branch = format!("baton/{run}");
    assert_eq!(
        remote.repo.commits(&branch).unwrap().len(),
        3,
        "exactly one new commit"
    );
    let pulls = remote.github.pulls();
    assert_eq!(pulls.len(), 1, "exactly one pull request: {pulls:?}");
    let creates = remote
        .github
        .requests()
        .iter()
        .filter(|q| q.method == "POST")
        .count();
    assert_eq!(
        creates, 1,
        "the retry found the pull request instead of opening another"
    );
    assert_eq!(
        r.delivered.as_ref().unwrap().pull_request_url,
        pulls[0].html_url.as_str()
    );
}

#[test]
fn the_change_set_of_a_run_killed_midway_equals_the_undisturbed_one() {
    let server = DevServer::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let remote = remote();
    let url = remote.daemon.url("acme/parser.git");
    let queue = unique("cs-calm");
    let calm = {
        let _w = worker(&server, &queue, &[]);
        let run = unique("run-calm");
        submit(
            &server,
            &queue,
            &run,
            &[
                "--script",
                &write_script(tmp.path(), "calm", true),
                "--no-approval",
                "--git",
                &url,
                "--ref",
                "v1",
            ],
            "go",
        );
        result(&server, &run, 0)
    };
    let queue = unique("cs-kill");
    let root = tmp.path().join("ws");
    let mut first = Worker::spawn_with_workspace(&server, &queue, &root, &[]).unwrap();
    first.wait_ready_blocking(Duration::from_secs(30)).unwrap();
    let run = unique("run-killed");
    submit(
        &server,
        &queue,
        &run,
        &[
            "--script",
            &write_script(tmp.path(), "killed", true),
            "--no-approval",
            "--git",
            &url,
            "--ref",
            "v1",
        ],
        "go",
    );
    wait_until_blocking(Duration::from_secs(60), "the slow shell call", || {
        Ok(history_text(&server, &run)
            .contains("sleep 6")
            .then_some(()))
    })
    .unwrap();
    first.kill9();
    // Another machine: an empty workspace root, the workspace comes from snapshots.
    let mut second = Worker::spawn(&server, &queue, &[]).unwrap();
    second.wait_ready_blocking(Duration::from_secs(30)).unwrap();
    let killed = result(&server, &run, 0);
    assert_eq!(calm["changes"]["files_changed"], 2, "{calm}");
    assert_eq!(
        killed["changes"]["patch"], calm["changes"]["patch"],
        "same patch blob: {killed}"
    );
    assert_eq!(killed["changes"]["files"], calm["changes"]["files"]);
    drop(remote.repos);
}

#[test]
fn unreachable_missing_and_refused_git_sources_end_the_run_as_workspace_unavailable() {
    let server = DevServer::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let remote = remote();
    let queue = unique("git-bad");
    let _w = git_worker(&server, &queue, tmp.path(), &remote, "wrong-token", None);
    let script = write_script(tmp.path(), "bad", false);
    let cases = [
        (remote.daemon.url("acme/parser.git"), "v9", "v9"),
        (remote.daemon.url("acme/nothing.git"), "", "nothing"),
        (remote.http.url("acme/parser.git"), "", "credentials"),
        (
            "git://127.0.0.1:1/acme/parser.git".to_owned(),
            "",
            "127.0.0.1:1",
        ),
    ];
    for (url, git_ref, said) in cases {
        let run = unique("run-bad-git");
        let mut args = vec![
            "--task-queue",
            queue.as_str(),
            "--id",
            run.as_str(),
            "--script",
            script.as_str(),
            "--no-approval",
            "--git",
            url.as_str(),
        ];
        if !git_ref.is_empty() {
            args.extend(["--ref", git_ref]);
        }
        args.push("go");
        let out = submit_wait(&server, &args);
        assert_eq!(out.code, 1, "{url} {git_ref}: {out}");
        let r = out.json().unwrap();
        assert_eq!(r["reason"], "workspace_unavailable", "{r}");
        let detail = r["detail"].as_str().unwrap();
        assert!(
            detail.to_lowercase().contains(&said.to_lowercase()),
            "{url}: {detail}"
        );
        assert_eq!(r["turns"], 0, "no model call: {r}");
        assert!(!detail.contains("wrong-token"), "{detail}");
    }
}

#[test]
fn an_output_schema_gets_a_corrective_turn_and_the_result_carries_the_value() {
    let server = DevServer::start().unwrap();
    let queue = unique("schema");
    let _w = worker(&server, &queue, &[]);
    let tmp = tempfile::tempdir().unwrap();
    let schema = tmp.path().join("schema.json");
    std::fs::write(
        &schema,
        r#"{"type": "object", "required": ["fixed", "files"],
            "properties": {"fixed": {"type": "boolean"}, "files": {"type": "array", "items": {"type": "string"}}}}"#,
    )
    .unwrap();
    let schema = schema.display().to_string();
    // A run answering `answers` in turn, under the schema (each script under its own name:
    // one named "schema" would overwrite the schema's file).
    let run_with = |name: &str, answers: Value| {
        let turns: Vec<Value> = answers
            .as_array()
            .unwrap()
            .iter()
            .map(|text| json!({ "text": text }))
            .collect();
        let answers = script(tmp.path(), name, Value::Array(turns))
            .display()
            .to_string();
        let run = unique("run-schema");
        let args = ["--task-queue", &queue, "--id", &run, "--script", &answers];
        let out = submit_wait(
            &server,
            &[&args[..], &["--output-schema", &schema, "report"]].concat(),
        );
        let r = out.json().unwrap();
        (out.code, r)
    };
    // The first answer is prose; after the corrective turn, JSON that matches.
    let (code, r) = run_with(
        "answers",
        json!(["I fixed it.", "{\"fixed\": true, \"files\": [\"lib.sh\"]}"]),
    );
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["turns"], 2, "one corrective turn: {r}");
    assert_eq!(
        r["output"],
        json!({"fixed": true, "files": ["lib.sh"]}),
        "{r}"
    );
    // Two misses: the run fails with the validation error.
    let (code, r) = run_with("wrong", json!(["done", "{\"fixed\": \"yes\"}"]));
    assert_eq!(code, 1, "{r}");
    assert_eq!(r["reason"], "output_invalid", "{r}");
    assert!(r["detail"].as_str().unwrap().contains("/fixed"), "{r}");

    // A schema that is not one is refused before the run starts.
    std::fs::write(tmp.path().join("bad.json"), r#"{"type": 12}"#).unwrap();
    let bad = tmp.path().join("bad.json").display().to_string();
    let out = baton(&server, &["submit", "--output-schema", &bad, "x"]).unwrap();
    assert_eq!(out.code, 2, "{out}");
    assert!(out.stderr.contains("not a valid JSON Schema"), "{out}");
}

/// `prepare_workspace`'s result in the run's history.
fn prepared(server: &DevServer, run: &str) -> Value {
    let history = server.workflow_history_json(run, None).unwrap();
    completed_activities(&history)
        .into_iter()
        .find(|a| a.name == "prepare_workspace")
        .map(|a| a.result)
        .unwrap_or_else(|| panic!("no prepare_workspace in {run}'s history"))
}

fn bytes_written(prepared: &Value) -> u64 {
    match &prepared["bytes_written"] {
        Value::Null => 0,
        Value::String(s) => s.parse().unwrap(),
        v => v.as_u64().unwrap(),
    }
}

/// A worker keeps the trees of finished runs; a new run on the same tree
/// takes one over and the restore writes only the file that differs (the first run fixed
/// `lib.sh`); a worker with no room for kept trees removes a run's tree once it ended.
#[test]
fn a_new_run_on_a_tree_the_worker_has_seen_writes_only_what_differs() {
    let server = DevServer::start().unwrap();
    let queue = unique("ws-kept");
    let w = worker(&server, &queue, &[]);
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("project");
    failing_project(&project);
    let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
    std::fs::write(project.join("data.bin"), &data).unwrap();
    let submit = |queue: &str, run: &str| {
        let out = submit_wait(
            &server,
            &[
                "--task-queue",
                queue,
                "--id",
                run,
                "--script",
                &fix_script(tmp.path()),
                "--no-approval",
                "--workspace-from",
                project.to_str().unwrap(),
                "fix the failing test",
            ],
        );
        assert_eq!(out.code, 0, "{out}");
        let r = out.json().unwrap();
        assert_eq!(r["status"], "COMPLETED", "{r}");
        r
    };

    let first = unique("run-kept-1");
    let r1 = submit(&queue, &first);
    let p1 = prepared(&server, &first);
    assert_ne!(p1["reused_tree"], true, "{p1}");
    assert!(bytes_written(&p1) >= data.len() as u64, "{p1}");
    assert!(w.workspace_root().join(&first).join("data.bin").exists());

    let second = unique("run-kept-2");
    let r2 = submit(&queue, &second);
    let p2 = prepared(&server, &second);
    assert_eq!(p2["reused_tree"], true, "{p2}");
    // Only lib.sh, which the first run had fixed, was written back.
    assert_eq!(bytes_written(&p2), LIB_BUGGY.len() as u64, "{p2}");
    assert!(
        !w.workspace_root().join(&first).exists(),
        "the first tree was taken over"
    );
    assert_eq!(
        std::fs::read(w.workspace_root().join(&second).join("data.bin")).unwrap(),
        data
    );
    // The second run did the same work on a correct tree.
    assert_eq!(
        r2["changes"]["files_changed"],
        r1["changes"]["files_changed"]
    );
    let (d1, d2) = (
        baton(&server, &["diff", &first])
            .unwrap()
            .ensure_success()
            .unwrap(),
        baton(&server, &["diff", &second])
            .unwrap()
            .ensure_success()
            .unwrap(),
    );
    assert_eq!(d1.stdout, d2.stdout);
    let transcript = baton(&server, &["transcript", &second, "--json"]).unwrap();
    assert!(transcript.stdout.contains("PASS"), "{transcript}");

    // No room for kept trees: a run's tree goes once the run has ended.
    let tight = unique("ws-tight");
    let t = worker(&server, &tight, &[("BATON_WORKSPACE_CACHE_BYTES", "0")]);
    let third = unique("run-kept-3");
    submit(&tight, &third);
    let tree = t.workspace_root().join(&third);
    wait_until_blocking(
        Duration::from_secs(20),
        "the ended run's tree removed from a worker with workspace_cache_bytes = 0",
        || Ok((!tree.exists()).then_some(())),
    )
    .unwrap();
}
