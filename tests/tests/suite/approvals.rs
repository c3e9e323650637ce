//! Approvals end to end (real dev server, real `baton-worker` processes, real `baton` CLI):
//! approve/deny through the CLI and as a raw Temporal signal, a signal sent while no worker runs,
//! malformed signals and the approval timeout, and a partly applied approval. Approver
//! identities are in `security.rs`; policies and remembered approvals in `agent_loop.rs`.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::{Duration, Instant};

use baton_tests::*;
use common::*;
use pretty_assertions::assert_eq;
use serde_json::json;

const T: Duration = Duration::from_secs(60);

#[test]
fn approvals_via_baton_cli_temporal_signal_and_denial() {
    let server = DevServer::start().unwrap();
    let queue = unique("approvals");
    let w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();

    // 1. Approved with `baton approve`, one call at a time, through the validated update.
    let s1 = approval_script(
        dir.path(),
        "a",
        &["echo first-ok > first.txt", "echo second-ok"],
    );
    let a = submit(
        &server,
        &queue,
        &unique("run-a"),
        &["--script", &s1, "--require-approval", "shell"],
        "task a",
    );
    let status = wait_state(&server, &a, "AWAITING_APPROVAL", T);
    let pending = status["pending"].as_array().unwrap();
    assert_eq!(pending.len(), 2, "{status}");
    assert_eq!(pending[0]["call_id"], "call_2_1");
    assert_eq!(pending[0]["tool"], "shell");
    assert_eq!(
        pending[0]["arguments"],
        r#"{"command":"echo first-ok > first.txt"}"#
    );
    assert_eq!(status["turn"], 2);
    // Nothing of the batch ran while it waits.
    assert!(!w.workspace_root().join(&a).join("first.txt").exists());

    let unknown = baton(&server, &["approve", &a, "call_9_9"]).unwrap();
    assert_eq!(unknown.code, 2, "{unknown}");
    assert!(
        unknown.stderr.contains("unknown call id 'call_9_9'"),
        "{unknown}"
    );
    assert!(
        unknown.stderr.contains("call_2_1"),
        "lists the pending ids: {unknown}"
    );

    // Several ids with one that is not pending: none of them is sent.
    let typo = baton(&server, &["approve", &a, "call_2_1", "call_9_9"]).unwrap();
    assert_eq!(typo.code, 2, "{typo}");
    assert!(
        typo.stderr.contains("call_9_9 of run") && typo.stderr.contains("nothing was sent"),
        "{typo}"
    );
    let status = wait_status(&server, &a, "AWAITING_APPROVAL", T);
    assert_eq!(status.status.pending.len(), 2, "{status:?}");

    let first = baton(&server, &["approve", &a, "call_2_1", "--approver", "alice"]).unwrap();
    assert_eq!(first.code, 0, "{first}");
    assert!(first.stdout.contains("1 call(s) still awaiting"), "{first}");
    let dup = baton(&server, &["approve", &a, "call_2_1"]).unwrap();
    assert_eq!(dup.code, 2, "a duplicate approval is refused: {dup}");
    assert!(dup.stderr.contains("already been decided"), "{dup}");
    // Still waiting for the second call.
    let status = wait_state(&server, &a, "AWAITING_APPROVAL", T);
    assert_eq!(status["pending"].as_array().unwrap().len(), 1);
    let second = baton(&server, &["approve", &a, "call_2_2", "--approver", "alice"]).unwrap();
    assert_eq!(second.code, 0, "{second}");
    let r = result(&server, &a, 0);
    assert_eq!(r["status"], "COMPLETED");
    assert_eq!(r["reason"], "completed");
    assert_eq!(r["answer"], "All done.");
    assert_eq!(r["turns"], 3);
    assert_eq!(
        std::fs::read_to_string(w.workspace_root().join(&a).join("first.txt")).unwrap(),
        "first-ok\n"
    );
    let text = history_text(&server, &a);
    assert!(text.contains("second-ok"), "the model saw the shell output");

    // 2. Approved with the plain temporal CLI (signal, documented JSON).
    let s2 = approval_script(dir.path(), "b", &["echo via-signal"]);
    let b = submit(
        &server,
        &queue,
        &unique("run-b"),
        &["--script", &s2],
        "task b",
    );
    wait_state(&server, &b, "AWAITING_APPROVAL", T);
    let sig = server
        .temporal(&[
            "workflow",
            "signal",
            "--workflow-id",
            &b,
            "--name",
            "approval",
            "--input",
            r#"{"call_id": "call_2_1", "approved": true, "approver": "ci-bot", "reason": "ok"}"#,
        ])
        .unwrap();
    assert_eq!(sig.code, 0, "{sig}");
    let r = ended(&server, &b, 0);
    assert_eq!(r.status, "COMPLETED");
    assert!(history_text(&server, &b).contains("via-signal"));

    // 3. Denied: the call does not run and the model sees the denial.
    let s3 = approval_script(dir.path(), "c", &["touch ran.txt"]);
    let c = submit(
        &server,
        &queue,
        &unique("run-c"),
        &["--script", &s3],
        "task c",
    );
    wait_state(&server, &c, "AWAITING_APPROVAL", T);
    let deny = baton(
        &server,
        &[
            "deny",
            &c,
            "--all",
            "--reason",
            "not today",
            "--approver",
            "tester",
        ],
    )
    .unwrap();
    assert_eq!(deny.code, 0, "{deny}");
    let r = ended(&server, &c, 0);
    assert_eq!(r.status, "COMPLETED");
    assert!(
        !w.workspace_root().join(&c).join("ran.txt").exists(),
        "denied call ran"
    );
    let text = history_text(&server, &c);
    assert!(
        text.contains("The call was denied by tester: not today"),
        "the third LLM call carries the denial as an error observation"
    );
    // After the end, a decision is refused with a clear message.
    let late = baton(&server, &["approve", &c, "--all"]).unwrap();
    assert_eq!(late.code, 2, "{late}");
    assert!(late.stderr.contains("already ended"), "{late}");
}

#[test]
fn signal_without_worker_is_applied_later_and_status_answers_fast() {
    let server = DevServer::start().unwrap();
    let queue = unique("noworker");
    let dir = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let s = approval_script(dir.path(), "s", &["echo after-restart"]);
    let mut w = Worker::spawn_with_workspace(&server, &queue, workspace.path(), &[]).unwrap();
    w.wait_ready_blocking(T).unwrap();
    let run = submit(
        &server,
        &queue,
        &unique("run-nw"),
        &["--script", &s],
        "task",
    );
    wait_state(&server, &run, "AWAITING_APPROVAL", T);
    w.kill9();

    // No worker: status answers promptly from what the run recorded.
    let started = Instant::now();
    let out = baton(&server, &["status", &run, "--json"]).unwrap();
    let took = started.elapsed();
    assert_eq!(out.code, 0, "{out}");
    assert!(
        took < Duration::from_secs(2),
        "status took {took:?} with no worker"
    );
    let v = out.json().unwrap();
    assert_eq!(v["state"], "AWAITING_APPROVAL");
    assert_eq!(v["pending"][0]["call_id"], "call_2_1");
    let human = baton(&server, &["status", &run]).unwrap();
    assert!(human.stdout.contains("call_2_1"), "{human}");

    // A decision for a call that is not pending is refused from the recorded status, even
    // with no worker to validate it (it would be reported as sent, then ignored).
    for args in [
        vec!["approve", run.as_str(), "call_9_9"],
        vec!["approve", run.as_str(), "call_9_9", "--signal"],
    ] {
        let out = baton(&server, &args).unwrap();
        assert_eq!(out.code, 2, "{args:?}: {out}");
        assert!(
            out.stderr.contains("call_9_9 of run")
                && out.stderr.contains("awaiting: call_2_1")
                && out.stderr.contains("nothing was sent"),
            "{args:?}: {out}"
        );
    }
    // A decision sent while no worker runs is kept by the server...
    let sig = baton(&server, &["approve", &run, "call_2_1", "--signal"]).unwrap();
    assert_eq!(sig.code, 0, "{sig}");
    // ...and applied once a worker starts.
    let mut w2 = Worker::spawn_with_workspace(&server, &queue, workspace.path(), &[]).unwrap();
    w2.wait_ready_blocking(T).unwrap();
    let r = ended(&server, &run, 0);
    assert_eq!(r.status, "COMPLETED");
    assert!(history_text(&server, &run).contains("after-restart"));
}

#[test]
fn malformed_signals_approval_timeout_and_watch() {
    let server = DevServer::start().unwrap();
    let queue = unique("misc");
    let _w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();

    // A malformed approval signal must not wedge the run.
    let s = approval_script(dir.path(), "m", &["echo survived-garbage"]);
    let run = submit(
        &server,
        &queue,
        &unique("run-garbage"),
        &["--script", &s],
        "m",
    );
    wait_state(&server, &run, "AWAITING_APPROVAL", T);
    for input in [r#""not an object""#, r#"{"call_id": 5, "approved": "yes"}"#] {
        let out = server
            .temporal(&[
                "workflow",
                "signal",
                "--workflow-id",
                &run,
                "--name",
                "approval",
                "--input",
                input,
            ])
            .unwrap();
        assert_eq!(out.code, 0, "{out}");
    }
    // The validated update refuses it with the expected shape.
    let out = server
        .temporal(&[
            "workflow",
            "update",
            "execute",
            "--workflow-id",
            &run,
            "--name",
            "approve",
            "--input",
            r#"{"approved": true}"#,
        ])
        .unwrap();
    assert_ne!(out.code, 0, "{out}");
    assert!(
        format!("{}{}", out.stdout, out.stderr).contains("has no call_id"),
        "{out}"
    );
    let status = wait_state(&server, &run, "AWAITING_APPROVAL", T);
    assert_eq!(status["pending"][0]["call_id"], "call_2_1");
    assert!(
        status["last_event"].as_str().unwrap().contains("ignored"),
        "{status}"
    );
    let approved = baton(&server, &["approve", &run, "--all"]).unwrap();
    assert_eq!(approved.code, 0, "{approved}");
    assert!(
        approved.stdout.contains("call_2_1: approved"),
        "sent as a validated update: {approved}"
    );
    assert_eq!(result(&server, &run, 0)["status"], "COMPLETED");

    // Nobody decides within the approval timeout: the call is denied and the run goes on.
    let s = approval_script(dir.path(), "t", &["touch never.txt"]);
    let run = submit(
        &server,
        &queue,
        &unique("run-timeout"),
        &["--script", &s, "--approval-timeout", "2s"],
        "t",
    );
    let r = ended(&server, &run, 0);
    assert_eq!(r.status, "COMPLETED");
    assert!(history_text(&server, &run).contains("approval timed out"));

    // ... or, by policy, the run fails.
    let run = submit(
        &server,
        &queue,
        &unique("run-timeout-fail"),
        &[
            "--script",
            &s,
            "--approval-timeout",
            "2s",
            "--on-approval-timeout",
            "fail",
        ],
        "t",
    );
    let r = ended(&server, &run, 1);
    assert_eq!(r.reason, "approval_timed_out");

    // `watch` replays a finished run's events from the start, as JSON lines or text.
    let out = baton(&server, &["watch", &run, "--json"]).unwrap();
    assert_eq!(out.code, 1, "watch exits with the run's code: {out}");
    let lines = out.json_lines().unwrap();
    let kinds: Vec<String> = lines
        .iter()
        .filter_map(|l| {
            [
                "assistant",
                "approval_requested",
                "tool_started",
                "tool_finished",
                "finished",
                "note",
            ]
            .iter()
            .find(|k| !l[**k].is_null())
            .map(|k| k.to_string())
        })
        .collect();
    assert_eq!(kinds.first().map(String::as_str), Some("note"), "{kinds:?}");
    assert!(
        kinds.contains(&"approval_requested".to_string()),
        "{kinds:?}"
    );
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("finished"),
        "{kinds:?}"
    );
    assert!(lines.iter().all(|l| l["run_id"] == run.as_str()));
    let human = baton(&server, &["watch", &run]).unwrap();
    assert!(human.stdout.contains("── turn 2 ──"), "{human}");
    assert!(human.stdout.contains("awaits approval"), "{human}");
    assert!(human.stdout.contains("approval_timed_out"), "{human}");
}

/// `approve ID1 ID2` where only the first may be decided by this identity: the command says
/// that the first was applied (exit 2, also in `--json`), and a repeated id sends nothing.
#[test]
fn a_partly_applied_approval_says_what_was_applied() {
    let server = DevServer::start().unwrap();
    let queue = unique("partial");
    let _w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "require_approval = [\"*\"]\n[[approvers]]\ntool = \"write_file\"\nidentities = [\"nobody@*\"]\n",
    )
    .unwrap();
    let s = script(
        dir.path(),
        "two",
        json!([
            {"tool_calls": [
                {"name": "shell", "arguments": {"command": "echo one"}},
                {"name": "write_file", "arguments": {"path": "two.txt", "content": "2"}}
            ]},
            {"text": "done"}
        ]),
    )
    .display()
    .to_string();
    let run = submit(
        &server,
        &queue,
        &unique("run-partial"),
        &["--script", &s, "--policy", policy.to_str().unwrap()],
        "two calls",
    );
    wait_state(&server, &run, "AWAITING_APPROVAL", T);
    let twice = baton(&server, &["approve", &run, "call_1_1", "call_1_1"]).unwrap();
    assert_eq!(twice.code, 2, "{twice}");
    assert!(twice.stderr.contains("given more than once"), "{twice}");
    let status = wait_status(&server, &run, "AWAITING_APPROVAL", T);
    assert_eq!(
        status.status.pending.len(),
        2,
        "nothing was sent: {status:?}"
    );

    let out = baton(
        &server,
        &["approve", &run, "call_1_1", "call_1_2", "--json"],
    )
    .unwrap();
    assert_eq!(out.code, 2, "{out}");
    let error = out.json().unwrap()["error"].as_str().unwrap().to_owned();
    assert!(
        error.starts_with("call_1_1 was approved already; then call_1_2: ")
            && error.contains("may not decide"),
        "{error}"
    );
    let status = wait_state(&server, &run, "AWAITING_APPROVAL", T);
    let pending: Vec<&str> = status["pending"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["call_id"].as_str().unwrap())
        .collect();
    assert_eq!(pending, ["call_1_2"], "{status}");
    // The memo (what `pending` and a worker-less `status` read) follows the partial decision.
    wait_until_blocking(T, "pending to show only call_1_2", || {
        let v = baton(&server, &["pending", "--json"])?.json()?;
        let calls: Vec<String> = v["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| r["run_id"] == run.as_str())
            .flat_map(|r| r["pending"].as_array().cloned().unwrap_or_default())
            .filter_map(|p| p["call_id"].as_str().map(str::to_owned))
            .collect();
        Ok((calls == ["call_1_2"]).then_some(()))
    })
    .unwrap();
    assert_eq!(baton(&server, &["cancel", &run]).unwrap().code, 0);
}
