//! The verification gate, end to end: a real worker runs the run's `--verify`
//! commands when the scripted model answers; a model that breaks another test ends
//! `verification_failed` with nothing pushed to the real `git daemon` and the patch still
//! downloadable; one that recovers after being told is delivered; a worker killed with
//! SIGKILL in the middle of a check hands it to another worker, which runs it again in a
//! workspace restored from the same snapshot.

#![allow(clippy::unwrap_used)]

use std::{path::Path, time::Duration};

use crate::common;

use baton_tests::*;
use common::*;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

const LIB: &str = "add() { echo $(( $1 - $2 )); }\nsub() { echo $(( $1 - $2 )); }\n";
const TEST_ADD: &str = ". ./lib.sh\nif [ \"$(add 2 3)\" = 5 ]; then echo PASS add; else echo FAIL add: got $(add 2 3); exit 1; fi\n";
const TEST_SUB: &str = ". ./lib.sh\nif [ \"$(sub 5 3)\" = 2 ]; then echo PASS sub; else echo FAIL sub: got $(sub 5 3); exit 1; fi\n";

/// A bare repository with `lib.sh` (add is wrong, sub is right) and a test for each, served
/// by a real `git daemon`.
struct Project {
    _repos: GitRepos,
    repo: BareRepo,
    daemon: GitDaemon,
}

fn project() -> Project {
    let repos = GitRepos::new().unwrap();
    let repo = repos
        .create(
            "acme/calc.git",
            &[
                ("lib.sh", LIB),
                ("test_add.sh", TEST_ADD),
                ("test_sub.sh", TEST_SUB),
            ],
        )
        .unwrap();
    let daemon = GitDaemon::start(&repos).unwrap();
    Project {
        _repos: repos,
        repo,
        daemon,
    }
}

/// A worker that can push (a commit identity).
fn worker(server: &DevServer, queue: &str, dir: &Path, root: &Path) -> Worker {
    let config = dir.join(format!("{queue}.toml"));
    std::fs::write(
        &config,
        "[git]\nauthor_name = \"baton\"\nauthor_email = \"baton@example.invalid\"\n",
    )
    .unwrap();
    let config = config.display().to_string();
    let mut w =
        Worker::spawn_with_workspace(server, queue, root, &[("BATON_CONFIG", config.as_str())])
            .unwrap();
    w.wait_ready_blocking(Duration::from_secs(30)).unwrap();
    w
}

/// `write_file lib.sh` with this content.
fn write_lib(content: &str) -> Value {
    json!({"text": "Editing lib.sh.", "tool_calls": [{"name": "write_file",
        "arguments": {"path": "lib.sh", "content": content}}]})
}

fn answer(text: &str) -> Value {
    json!({ "text": text })
}

const BROKEN_SUB: &str = "add() { echo $(( $1 + $2 )); }\nsub() { echo $(( $1 + $2 )); }\n";
const FIXED: &str = "add() { echo $(( $1 + $2 )); }\nsub() { echo $(( $1 - $2 )); }\n";

fn verified_submit(
    server: &DevServer,
    queue: &str,
    run: &str,
    script: &Path,
    url: &str,
    extra: &[&str],
) -> CmdOutput {
    let script = script.display().to_string();
    let mut args = vec![
        "submit",
        "--task-queue",
        queue,
        "--id",
        run,
        "--script",
        &script,
        "--no-approval",
        "--git",
        url,
        "--deliver",
        "branch",
        "--verify",
        "sh test_add.sh",
        "--verify",
        "sh test_sub.sh",
    ];
    args.extend_from_slice(extra);
    args.extend(["fix add() in lib.sh", "--wait", "--json"]);
    baton_with_timeout(server, &args, &[], None, Duration::from_secs(180)).unwrap()
}

#[test]
fn a_fix_that_breaks_another_test_is_not_delivered_and_one_that_recovers_is() {
    let server = DevServer::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let project = project();
    let queue = unique("verify");
    let _w = worker(&server, &queue, tmp.path(), &tmp.path().join("ws"));
    let url = project.daemon.url("acme/calc.git");

    // Breaks sub() and claims success twice: two rounds fail, the run fails, nothing is pushed.
    let bad = script(
        tmp.path(),
        "bad",
        json!([
            write_lib(BROKEN_SUB),
            answer("Fixed add(); all tests pass."),
            answer("They pass now.")
        ]),
    );
    let run = unique("run-bad");
    let out = verified_submit(&server, &queue, &run, &bad, &url, &[]);
    assert_eq!(out.code, 1, "verification_failed exits 1: {out}");
    let r = out.json().unwrap();
    assert_eq!(r["status"], "FAILED", "{r}");
    assert_eq!(r["reason"], "verification_failed", "{r}");
    assert!(
        r["detail"].as_str().unwrap().contains("round 2 of 2"),
        "{r}"
    );
    let checks = r["verification"].as_array().unwrap();
    assert_eq!(checks.len(), 2, "round 2 ran both commands: {r}");
    assert_eq!(checks[0]["exit_code"], 0, "{r}");
    assert_eq!(checks[1]["command"], "sh test_sub.sh", "{r}");
    assert_eq!(checks[1]["exit_code"], 1, "{r}");
    assert!(
        checks[1]["output_tail"]
            .as_str()
            .unwrap()
            .contains("FAIL sub: got 8"),
        "{r}"
    );
    assert_eq!(checks[1]["round"], 2, "{r}");
    assert_eq!(
        r["turns"], 3,
        "the model was told once and answered again: {r}"
    );
    assert!(
        r["delivered"]["error"]
            .as_str()
            .unwrap()
            .contains("verification did not pass"),
        "{r}"
    );
    assert_eq!(
        project.repo.branch_head(&format!("baton/{run}")).unwrap(),
        None
    );
    assert_eq!(project.repo.branches().unwrap(), vec!["main".to_owned()]);
    // The patch is still there.
    let diff = baton(&server, &["diff", &run]).unwrap();
    assert_eq!(diff.code, 0, "{diff}");
    assert!(
        diff.stdout.contains("+sub() { echo $(( $1 + $2 )); }"),
        "{diff}"
    );
    // The model was told what failed (a synthetic user turn in the transcript).
    let history = history_text(&server, &run);
    assert!(
        history.contains("[baton: verification failed]"),
        "the failure went to the model"
    );
    // watch shows each check as it ran.
    let watch = baton(&server, &["watch", &run, "--json"]).unwrap();
    let kinds: Vec<String> = watch
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| v["kind"].as_str().unwrap_or_default().to_owned())
        .filter(|k| k.starts_with("verification"))
        .collect();
    assert_eq!(
        kinds,
        [
            "verification_started",
            "verification_finished",
            "verification_started",
            "verification_finished",
            "verification_started",
            "verification_finished",
            "verification_started",
            "verification_finished"
        ],
        "{watch}"
    );

    // Told of the failure, the model fixes sub() too: round 2 passes and the branch is pushed.
    let good = script(
        tmp.path(),
        "good",
        json!([
            write_lib(BROKEN_SUB),
            answer("Fixed add()."),
            write_lib(FIXED),
            answer("Fixed add() without breaking sub().")
        ]),
    );
    let run = unique("run-good");
    let out = verified_submit(&server, &queue, &run, &good, &url, &[]);
    assert_eq!(out.code, 0, "{out}");
    let r = out.json().unwrap();
    assert_eq!(r["reason"], "completed", "{r}");
    let checks = r["verification"].as_array().unwrap();
    assert_eq!(checks.len(), 2, "{r}");
    for (check, name) in checks.iter().zip(["add", "sub"]) {
        assert_eq!(check["exit_code"], 0, "{r}");
        assert_eq!(check["passed"], true, "{r}");
        assert_eq!(check["round"], 2, "{r}");
        assert!(
            check["output_tail"]
                .as_str()
                .unwrap()
                .contains(&format!("PASS {name}")),
            "{r}"
        );
    }
    assert_eq!(r["delivered"]["ok"], true, "{r}");
    let branch = format!("baton/{run}");
    assert_eq!(project.repo.show(&branch, "lib.sh").unwrap(), FIXED);
    // Verification left nothing in the tree it checked.
    let files: Vec<&str> = r["changes"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(files, ["lib.sh"], "{r}");
}

#[test]
fn a_worker_killed_during_a_check_hands_it_to_another_that_starts_from_the_same_snapshot() {
    let server = DevServer::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let project = project();
    let queue = unique("verify-kill");
    let root = tmp.path().join("ws");
    let mut first = worker(&server, &queue, tmp.path(), &root);
    let fix = script(
        tmp.path(),
        "fix",
        json!([write_lib(FIXED), answer("Fixed add().")]),
    );
    let run = unique("run-kill");
    // The check leaves a stamp, waits, then tests: a retry that found the first attempt's
    // stamp would fail, so passing proves the workspace was restored before it ran again.
    let check = "if [ -e verify.stamp ]; then echo stale stamp of an earlier attempt; exit 3; fi; \
                 echo \"$BATON_ATTEMPT\" > verify.stamp; sleep 6; sh test_add.sh && sh test_sub.sh";
    submit(
        &server,
        &queue,
        &run,
        &[
            "--script",
            &fix.display().to_string(),
            "--no-approval",
            "--git",
            &project.daemon.url("acme/calc.git"),
            "--deliver",
            "branch",
            "--verify",
            check,
        ],
        "fix add() in lib.sh",
    );
    let stamp = root.join(&run).join("verify.stamp");
    wait_until_blocking(Duration::from_secs(90), "the check to start", || {
        Ok(stamp.exists().then_some(()))
    })
    .unwrap();
    let status = baton(&server, &["status", &run, "--json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(status["state"], "VERIFYING", "{status}");
    assert!(
        status["last_event"]
            .as_str()
            .unwrap()
            .starts_with("verifying (1/1, round 1)"),
        "{status}"
    );
    first.kill9();
    let second = worker(&server, &queue, tmp.path(), &root);
    let r = result(&server, &run, 0);
    assert_eq!(r["reason"], "completed", "{r}\n{}", second.log());
    let checks = r["verification"].as_array().unwrap();
    assert_eq!(checks.len(), 1, "{r}");
    assert_eq!(checks[0]["exit_code"], 0, "{r}");
    assert!(
        checks[0]["output_tail"]
            .as_str()
            .unwrap()
            .contains("PASS sub"),
        "{r}"
    );
    assert!(
        second.log().contains("verification started"),
        "the second worker ran the check: {}",
        second.log()
    );
    assert_eq!(r["delivered"]["ok"], true, "{r}");
    assert_eq!(
        project
            .repo
            .show(&format!("baton/{run}"), "lib.sh")
            .unwrap(),
        FIXED
    );
    assert!(
        !stamp.exists(),
        "the check's stamp was cleared after it ran"
    );
}
