//! End-to-end: real dev server, real `baton-worker` processes, real `baton` CLI.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use baton_tests::*;
use common::*;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(60);

/// The script of the approval tests: list files, then a shell batch that needs approval, then
/// the answer.
fn approval_script(dir: &std::path::Path, name: &str, shell_calls: &[&str]) -> String {
    let calls: Vec<Value> = shell_calls
        .iter()
        .map(|c| json!({"name": "shell", "arguments": {"command": c}}))
        .collect();
    script(
        dir,
        name,
        json!([
            {"text": "Looking around.", "tool_calls": [{"name": "list_files", "arguments": {}}]},
            {"text": "Now the shell.", "tool_calls": calls},
            {"text": "All done."}
        ]),
    )
    .display()
    .to_string()
}

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
    let status = wait_state(&server, &a, "AWAITING_APPROVAL", T);
    assert_eq!(status["pending"].as_array().unwrap().len(), 2, "{status}");

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
    let r = result(&server, &b, 0);
    assert_eq!(r["status"], "COMPLETED");
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
    let r = result(&server, &c, 0);
    assert_eq!(r["status"], "COMPLETED");
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
fn openai_provider_round_trip_and_no_key_in_history() {
    const KEY: &str = "sk-test-8f3a2c9d1e-never-in-history";
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    llm.push_tool_calls(&[
        ("call_a", "list_files", "{}"),
        (
            "call_b",
            "shell",
            r#"{"command":"echo hello-from-shell key=[$OPENAI_API_KEY]"}"#,
        ),
    ]);
    llm.push_text("The workspace is empty and the shell said hello.");
    let queue = unique("openai");
    let base = llm.base_url();
    let _w = worker(
        &server,
        &queue,
        &[("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", KEY)],
    );
    let run = submit(
        &server,
        &queue,
        &unique("run-openai"),
        &[
            "--provider",
            "openai",
            "--model",
            "gpt-test",
            "--require-approval",
            "shell",
        ],
        "Say hello from the shell.",
    );
    let status = wait_state(&server, &run, "AWAITING_APPROVAL", T);
    assert_eq!(status["pending"][0]["call_id"], "call_b");
    assert_eq!(baton(&server, &["approve", &run, "--all"]).unwrap().code, 0);
    let r = result(&server, &run, 0);
    assert_eq!(
        r["answer"],
        "The workspace is empty and the shell said hello."
    );

    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2);
    for req in &reqs {
        assert_eq!(req.path, "/v1/chat/completions");
        assert_eq!(
            req.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
        assert_eq!(req.body["model"], "gpt-test");
        let tools: Vec<&str> = req.body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            tools,
            vec![
                "shell",
                "read_file",
                "write_file",
                "edit_file",
                "list_files",
                "search_files",
                "glob"
            ]
        );
        let shell = &req.body["tools"][0]["function"];
        assert_eq!(shell["parameters"]["type"], "object");
        assert_eq!(shell["parameters"]["required"], json!(["command"]));
    }
    let first = reqs[0].messages();
    assert_eq!(first.len(), 2);
    assert_eq!(first[0]["role"], "system");
    assert_eq!(
        first[1],
        json!({"role": "user", "content": "Say hello from the shell."})
    );
    let second = reqs[1].messages();
    let roles: Vec<&str> = second.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, vec!["system", "user", "assistant", "tool", "tool"]);
    assert_eq!(second[2]["tool_calls"][0]["id"], "call_a");
    assert_eq!(second[2]["tool_calls"][1]["function"]["name"], "shell");
    assert_eq!(second[3]["tool_call_id"], "call_a");
    assert_eq!(second[4]["tool_call_id"], "call_b");
    let out = second[4]["content"].as_str().unwrap();
    assert!(
        out.contains("exit code: 0") && out.contains("hello-from-shell"),
        "{out}"
    );
    assert!(
        out.contains("key=[]"),
        "the worker's API key leaked into a tool's environment: {out}"
    );

    // The key reached the provider but never the history (payloads decoded before the grep).
    let text = history_text(&server, &run);
    assert!(text.contains("hello-from-shell"), "decoding works");
    assert!(
        !text.contains(KEY),
        "the API key is in the workflow history"
    );
    let raw = serde_json::to_string(&server.workflow_history_json(&run, None).unwrap()).unwrap();
    assert!(!raw.contains(KEY));
}

#[test]
fn malformed_arguments_and_unknown_tools_are_observations() {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    llm.push_tool_calls(&[
        ("c1", "shell", r#"{"command": "ls"#),
        ("c2", "teleport", "{}"),
        ("c3", "read_file", r#"{"path": "../../etc/passwd"}"#),
    ]);
    llm.push_text("I could not do it.");
    let queue = unique("malformed");
    let base = llm.base_url();
    let _w = worker(&server, &queue, &[("OPENAI_BASE_URL", base.as_str())]);
    let run = submit(
        &server,
        &queue,
        &unique("run-bad-args"),
        &["--provider", "openai"],
        "go",
    );
    // The malformed shell call never waits for approval: it cannot run.
    let r = result(&server, &run, 0);
    assert_eq!(r["answer"], "I could not do it.");
    let msgs = llm.requests()[1].messages();
    let tool_msgs: Vec<&str> = msgs
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(tool_msgs.len(), 3);
    assert!(
        tool_msgs[0].starts_with("ERROR:") && tool_msgs[0].contains("not valid JSON"),
        "{}",
        tool_msgs[0]
    );
    assert!(
        tool_msgs[1].contains("Unknown tool 'teleport'"),
        "{}",
        tool_msgs[1]
    );
    assert!(
        tool_msgs[2].starts_with("ERROR:") && tool_msgs[2].contains("outside the workspace"),
        "{}",
        tool_msgs[2]
    );
}

#[test]
fn provider_errors_end_the_run_with_the_provider_message() {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    llm.push_error(
        401,
        json!({"error": {"message": "Incorrect API key provided: sk-bad", "type": "invalid_request_error"}}),
    );
    let queue = unique("autherr");
    let base = llm.base_url();
    let _w = worker(&server, &queue, &[("OPENAI_BASE_URL", base.as_str())]);
    let run = submit(
        &server,
        &queue,
        &unique("run-401"),
        &["--provider", "openai"],
        "go",
    );
    let r = result(&server, &run, 1);
    assert_eq!(r["status"], "FAILED");
    assert_eq!(r["reason"], "provider_error");
    assert!(
        r["detail"]
            .as_str()
            .unwrap()
            .contains("Incorrect API key provided"),
        "{r}"
    );
    assert_eq!(llm.request_count(), 1, "a 401 is not retried");
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
    let r = result(&server, &run, 0);
    assert_eq!(r["status"], "COMPLETED");
    assert!(history_text(&server, &run).contains("after-restart"));
}

#[test]
fn bad_input_is_refused_with_clear_messages() {
    let dir = tempfile::tempdir().unwrap();
    let good = script(dir.path(), "ok", json!([{"text": "hi"}]));
    let good = good.display().to_string();
    // These fail before any connection is attempted.
    let unreachable = "127.0.0.1:1";
    let out = baton_at(
        unreachable,
        &["submit", "--script", &good, "--tool", "nope", "x"],
    )
    .unwrap();
    assert_eq!(out.code, 2, "{out}");
    assert!(out.stderr.contains("unknown tool(s): nope"), "{out}");
    let out = baton_at(
        unreachable,
        &["submit", "--script", "/nonexistent/script.json", "x"],
    )
    .unwrap();
    assert_eq!(out.code, 2, "{out}");
    assert!(
        out.stderr
            .contains("cannot read script file /nonexistent/script.json"),
        "{out}"
    );
    std::fs::write(dir.path().join("broken.json"), "{not json").unwrap();
    let broken = dir.path().join("broken.json").display().to_string();
    let out = baton_at(unreachable, &["submit", "--script", &broken, "x"]).unwrap();
    assert_eq!(out.code, 2, "{out}");
    assert!(out.stderr.contains("is not valid JSON"), "{out}");
    let out = baton_at(unreachable, &["submit", "--bogus-flag", "x"]).unwrap();
    assert_eq!(out.code, 2, "{out}");
    // Limits of zero, an empty id and flags that would be silently ignored are refused.
    for (args, said) in [
        (vec!["--max-turns", "0"], "--max-turns"),
        (vec!["--max-tokens", "0"], "--max-tokens"),
        (vec!["--context-window", "0"], "--context-window"),
        (vec!["--deadline", "0s"], "is zero"),
        (vec!["--tool-timeout", "0"], "is zero"),
        (vec!["--id", ""], "the run id is empty"),
        (vec!["--label", "a=1", "--label", "a=2"], "is given twice"),
        (
            vec!["--on-approval-timeout", "fail"],
            "without an approval timeout",
        ),
        (
            vec!["--provider", "openai"],
            "--script is for the scripted provider",
        ),
    ] {
        let mut all = vec!["submit", "--script", good.as_str()];
        all.extend(args);
        all.push("x");
        let out = baton_at(unreachable, &all).unwrap();
        assert_eq!(out.code, 2, "{all:?}: {out}");
        assert!(out.stderr.contains(said), "{all:?}: {out}");
    }
    let out = baton_at(
        unreachable,
        &[
            "submit",
            "--script",
            &good,
            "--prompt-file",
            "/nonexistent/task.md",
        ],
    )
    .unwrap();
    assert_eq!(out.code, 2, "{out}");
    assert!(
        out.stderr
            .contains("cannot read the prompt file /nonexistent/task.md"),
        "{out}"
    );
    // With --json, stdout holds one JSON object even when the flags are wrong or the server
    // cannot be reached.
    for (args, code, said) in [
        (
            vec!["submit", "--json", "--deadline", "0", "x"],
            2,
            "is zero",
        ),
        (vec!["submit", "--json"], 2, "PROMPT"),
        (
            vec!["status", "some-run", "--json"],
            5,
            "cannot reach Temporal",
        ),
        (
            vec!["result", "some-run", "--json"],
            5,
            "cannot reach Temporal",
        ),
    ] {
        let out = baton_at(unreachable, &args).unwrap();
        assert_eq!(out.code, code, "{args:?}: {out}");
        let v = out.json().unwrap();
        assert_eq!(v["exit_code"], code, "{args:?}: {v}");
        assert!(v["error"].as_str().unwrap().contains(said), "{args:?}: {v}");
    }
    let out = baton_at(unreachable, &["status", "some-run"]).unwrap();
    assert!(out.stderr.contains("connection refused"), "{out}");
    // Policy files: the error names the file and the field.
    for (name, text, said) in [
        (
            "neg.toml",
            "timeout_seconds = -5\n",
            "field `timeout_seconds` = -5",
        ),
        (
            "tool.toml",
            "require_approval = [\"nosuch\"]\n",
            "tool.toml: require_approval names unknown tool(s): nosuch",
        ),
        ("p.yaml", "mode: x\n", "YAML is not supported"),
        ("p.policy", "{{not json", "is neither JSON"),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let path = path.display().to_string();
        let out = baton_at(
            unreachable,
            &["submit", "--script", &good, "--policy", &path, "x"],
        )
        .unwrap();
        assert_eq!(out.code, 2, "{name}: {out}");
        assert!(out.stderr.contains(said), "{name}: {out}");
    }
    let out = baton_at(unreachable, &["deny", "some-run", "--all", "--remember"]).unwrap();
    assert_eq!(out.code, 2, "{out}");
    assert!(out.stderr.contains("--remember is for approve"), "{out}");
    // A valid submit against an unreachable server.
    let out = baton_at(unreachable, &["submit", "--script", &good, "x"]).unwrap();
    assert_eq!(out.code, 5, "{out}");
    assert!(out.stderr.contains("cannot reach Temporal at"), "{out}");
    assert!(out.stderr.contains("TEMPORAL_ADDRESS"), "{out}");
    let out = baton_at(unreachable, &["status", "some-run"]).unwrap();
    assert_eq!(out.code, 5, "{out}");
}

#[test]
fn wait_json_contract_max_turns_and_unknown_run() {
    let server = DevServer::start().unwrap();
    let queue = unique("contract");
    let _w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let done = script(dir.path(), "done", json!([{"text": "42"}]))
        .display()
        .to_string();
    let run = unique("run-json");
    let out = baton(
        &server,
        &[
            "submit",
            "--task-queue",
            &queue,
            "--id",
            &run,
            "--script",
            &done,
            "--wait",
            "--json",
            "q",
        ],
    )
    .unwrap();
    assert_eq!(out.code, 0, "{out}");
    let v = out.json().unwrap();
    for key in ["run_id", "status", "reason", "answer", "turns", "usage"] {
        assert!(v.get(key).is_some(), "missing {key} in {v}");
    }
    assert_eq!(v["run_id"], run.as_str());
    assert_eq!(v["status"], "COMPLETED");
    assert_eq!(v["answer"], "42");

    let looping = script(
        dir.path(),
        "loop",
        json!([
            {"tool_calls": [{"name": "list_files", "arguments": {}}]},
            {"text": "Listing once more.", "tool_calls": [{"name": "list_files", "arguments": {}}]},
            {"tool_calls": [{"name": "list_files", "arguments": {}}]}
        ]),
    )
    .display()
    .to_string();
    let out = baton(
        &server,
        &[
            "submit",
            "--task-queue",
            &queue,
            "--script",
            &looping,
            "--max-turns",
            "2",
            "--wait",
            "--json",
            "loop",
        ],
    )
    .unwrap();
    assert_eq!(out.code, 1, "{out}");
    let v = out.json().unwrap();
    assert_eq!(v["status"], "FAILED");
    assert_eq!(v["reason"], "max_turns_exceeded");
    assert_eq!(v["turns"], 2);
    // The last thing the agent said is not an answer.
    assert_eq!(v["answer"], "", "{v}");
    assert_eq!(v["last_text"], "Listing once more.", "{v}");

    // --wait-timeout while awaiting approval: exit 3, the run goes on.
    let needs = approval_script(dir.path(), "needs", &["true"]);
    let out = baton(
        &server,
        &[
            "submit",
            "--task-queue",
            &queue,
            "--script",
            &needs,
            "--wait",
            "--wait-timeout",
            "3s",
            "--json",
            "w",
        ],
    )
    .unwrap();
    assert_eq!(out.code, 3, "{out}");
    let v = out.json().unwrap();
    assert_eq!(v["status"], "AWAITING_APPROVAL");
    // The run goes on: no reason yet; times are numbers, as in `watch --json`.
    assert_eq!(v["reason"], Value::Null, "{v}");
    assert!(v["pending"][0]["requested_at_ms"].is_i64(), "{v}");
    // A later step re-attaches with a bound of its own.
    let waiting = v["run_id"].as_str().unwrap();
    let out = baton(
        &server,
        &[
            "result",
            waiting,
            "--wait",
            "--wait-timeout",
            "2s",
            "--json",
        ],
    )
    .unwrap();
    assert_eq!(out.code, 3, "{out}");
    assert!(out.stderr.contains("it goes on"), "{out}");

    let out = baton(&server, &["status", "no-such-run"]).unwrap();
    assert_eq!(out.code, 2, "{out}");
    assert!(out.stderr.contains("no run with id 'no-such-run'"), "{out}");
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
    let r = result(&server, &run, 0);
    assert_eq!(r["status"], "COMPLETED");
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
    let r = result(&server, &run, 1);
    assert_eq!(r["reason"], "approval_timed_out");

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

#[test]
fn worker_exits_cleanly_on_sigterm() {
    let server = DevServer::start().unwrap();
    let queue = unique("sigterm");
    let mut w = worker(&server, &queue, &[("BATON_GRACEFUL_SHUTDOWN_SECS", "2")]);
    let status = w.terminate_timeout(Duration::from_secs(15)).unwrap();
    assert!(
        status.success(),
        "worker exit status {status:?}\n{}",
        w.log()
    );
    assert!(w.log().contains("shutting down"), "{}", w.log());
    assert!(w.log().contains("worker stopped"), "{}", w.log());
}

#[test]
fn pending_and_list_find_runs_through_visibility() {
    let server = DevServer::start().unwrap();
    let queue = unique("visibility");
    let _w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let waiting_script = approval_script(dir.path(), "w", &["echo later"]);
    let done_script = script(dir.path(), "d", json!([{"text": "done"}]))
        .display()
        .to_string();
    let label = unique("repo");
    let waiting = submit(
        &server,
        &queue,
        &unique("run-waiting"),
        &[
            "--script",
            &waiting_script,
            "--label",
            &format!("repo={label}"),
            "--label",
            "submitter=ann",
        ],
        "w",
    );
    let done = submit(
        &server,
        &queue,
        &unique("run-done"),
        &[
            "--script",
            &done_script,
            "--label",
            &format!("repo={label}"),
        ],
        "d",
    );
    wait_state(&server, &waiting, "AWAITING_APPROVAL", T);
    result(&server, &done, 0);

    let pending = wait_until_blocking(T, "the waiting run in `baton pending`", || {
        let v = baton(&server, &["pending", "--json"])?.json()?;
        let runs = v["runs"].as_array().cloned().unwrap_or_default();
        Ok(runs.into_iter().find(|r| r["run_id"] == waiting.as_str()))
    })
    .unwrap();
    assert_eq!(pending["pending"][0]["call_id"], "call_2_1");
    assert_eq!(pending["pending"][0]["tool"], "shell");
    assert!(pending["pending"][0]["waiting_seconds"].as_i64().is_some());
    let human = baton(&server, &["pending"]).unwrap();
    assert!(
        human.stdout.contains(&waiting) && human.stdout.contains("baton approve"),
        "{human}"
    );
    let v = baton(&server, &["pending", "--json"])
        .unwrap()
        .json()
        .unwrap();
    assert!(
        !v["runs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["run_id"] == done.as_str()),
        "a finished run is not pending"
    );

    let both = wait_until_blocking(T, "both runs listed by label", || {
        let v = baton(
            &server,
            &["list", "--label", &format!("repo={label}"), "--json"],
        )?
        .json()?;
        let ids: Vec<String> = v["runs"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|r| r["run_id"].as_str().unwrap_or_default().to_owned())
            .collect();
        Ok((ids.len() == 2).then_some(ids))
    })
    .unwrap();
    assert!(both.contains(&waiting) && both.contains(&done));
    let completed = wait_until_blocking(T, "the completed run by state", || {
        let v = baton(
            &server,
            &[
                "list",
                "--label",
                &format!("repo={label}"),
                "--state",
                "completed",
                "--json",
            ],
        )?
        .json()?;
        let runs = v["runs"].as_array().cloned().unwrap_or_default();
        Ok((runs.len() == 1).then_some(runs))
    })
    .unwrap();
    assert_eq!(completed[0]["run_id"], done.as_str());
    let by_submitter = server
        .temporal(&[
            "workflow",
            "list",
            "--query",
            "BatonSubmitter = 'ann'",
            "-o",
            "json",
        ])
        .unwrap();
    assert!(by_submitter.stdout.contains(&waiting), "{by_submitter}");
    // Approving still works and the run leaves `pending`.
    assert_eq!(
        baton(&server, &["approve", &waiting, "--all"])
            .unwrap()
            .code,
        0
    );
    result(&server, &waiting, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_worker_serves_grpc_health_for_probes() {
    let mut server = DevServer::start().unwrap();
    let queue = unique("health");
    let port = free_port().unwrap();
    let addr = format!("127.0.0.1:{port}");
    let mut w = Worker::spawn(&server, &queue, &[("BATON_HEALTH_ADDR", addr.as_str())]).unwrap();
    w.wait_ready(T).await.unwrap();
    let url = format!("http://{addr}");
    let check = async |service: &str| -> anyhow::Result<i32> {
        use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
        let channel = tonic::transport::Channel::from_shared(url.clone())?
            .connect()
            .await?;
        let r = HealthClient::new(channel)
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await?
            .into_inner();
        Ok(r.status)
    };
    const SERVING: i32 = 1;
    const NOT_SERVING: i32 = 2;
    let until = async |service: &str, want: i32, timeout: Duration| {
        wait_until(
            timeout,
            &format!("health of {service:?} = {want}"),
            async || Ok((check(service).await? == want).then_some(())),
        )
        .await
        .unwrap();
    };
    until("", SERVING, T).await;
    assert_eq!(check("baton.worker").await.unwrap(), SERVING);
    assert_eq!(check("baton.worker.liveness").await.unwrap(), SERVING);

    // Temporal goes away: readiness turns NOT_SERVING (after 15 s of failed checks), liveness
    // does not (restarting the worker would not help), and both come back with Temporal.
    server.stop();
    let stopped = Instant::now();
    until("", NOT_SERVING, Duration::from_secs(60)).await;
    assert!(
        stopped.elapsed() >= Duration::from_secs(10),
        "NOT_SERVING after only {:?}: a short blip must not flip readiness",
        stopped.elapsed()
    );
    assert_eq!(check("baton.worker").await.unwrap(), NOT_SERVING);
    assert_eq!(check("baton.worker.liveness").await.unwrap(), SERVING);
    assert!(
        w.log()
            .contains("Temporal is unreachable: health NOT_SERVING"),
        "{}",
        w.log()
    );
    server.restart().unwrap();
    until("", SERVING, Duration::from_secs(60)).await;
    assert!(
        w.log().contains("Temporal is reachable again"),
        "{}",
        w.log()
    );

    let exit = w.terminate_timeout(Duration::from_secs(20)).unwrap();
    assert!(exit.success());
    let reconnect = tonic::transport::Channel::from_shared(url)
        .unwrap()
        .connect()
        .await;
    assert!(reconnect.is_err(), "the port closes with the worker");
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
    let status = wait_state(&server, &run, "AWAITING_APPROVAL", T);
    assert_eq!(
        status["pending"].as_array().unwrap().len(),
        2,
        "nothing was sent: {status}"
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

/// Start-up errors name what to fix, and the exit code says whose they are: 2 for the
/// worker's configuration, 1 for the rest (Temporal unreachable).
#[tokio::test(flavor = "multi_thread")]
async fn worker_start_up_errors_say_what_to_fix_and_whose_they_are() {
    let server = DevServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let closed = format!("127.0.0.1:{}", free_port().unwrap());
    let key = format!("my key={}", codec_key());
    for (env, code, says) in [
        (
            ("BATON_CODEC_KEYS", key.as_str()),
            2,
            "an id cannot contain spaces",
        ),
        (
            ("BATON_WORKSPACE_ROOT", file.to_str().unwrap()),
            2,
            "cannot create the workspace root (workspace_root)",
        ),
        (("BATON_STORE__BACKEND", "floppy"), 2, "floppy"),
        (
            ("TEMPORAL_ADDRESS", closed.as_str()),
            1,
            "cannot reach Temporal",
        ),
        (
            ("TEMPORAL_NAMESPACE", "no-such-namespace"),
            2,
            "namespace 'no-such-namespace' does not exist",
        ),
    ] {
        let mut w = Worker::spawn(&server, &unique("startup"), &[env]).unwrap();
        let exit = w.wait_exit(Duration::from_secs(60)).await;
        let log = w.log();
        assert_eq!(exit.and_then(|e| e.code()), Some(code), "{env:?}: {log}");
        assert!(log.contains(says), "{env:?}: {log}");
        assert!(
            !log.contains(&codec_key_material(&key)),
            "the key leaked: {log}"
        );
    }
}

/// A worker whose settings cannot be read reports it as a JSON log line when the environment
/// asks for JSON logs (a log pipeline would drop plain text).
#[tokio::test(flavor = "multi_thread")]
async fn invalid_settings_are_reported_as_json_when_logs_are_json() {
    let server = DevServer::start().unwrap();
    let mut w = Worker::spawn(
        &server,
        &unique("json-settings"),
        &[
            ("BATON_LOG_FORMAT", "json"),
            ("BATON_MAX_CACHED_WORKFLOWS", "many"),
        ],
    )
    .unwrap();
    let exit = w.wait_exit(Duration::from_secs(30)).await;
    let log = w.log();
    assert_eq!(exit.and_then(|e| e.code()), Some(2), "{log}");
    let line: Value = serde_json::from_str(log.lines().last().unwrap()).unwrap();
    assert_eq!(line["level"], "ERROR", "{log}");
    assert!(
        line["cause"]
            .as_str()
            .unwrap()
            .contains("max_cached_workflows"),
        "{log}"
    );
}

/// The base64 part of a `BATON_CODEC_KEYS` entry.
fn codec_key_material(entry: &str) -> String {
    entry
        .split_once('=')
        .map(|(_, k)| k.to_owned())
        .unwrap_or_default()
}

/// Approvals are attributed to the Temporal client identity that sent them (from history, not
/// the self-declared approver), and a policy's `approvers` restrict who may decide: a refused
/// update fails with the reason, a refused signal is ignored and noted, and the run waits on.
#[test]
fn approvals_are_attributed_and_restricted_by_identity() {
    let server = DevServer::start().unwrap();
    let queue = unique("approvers");
    let w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned();
    let policy = dir.path().join("policy.json");
    std::fs::write(
        &policy,
        r#"{"require_approval": ["shell"],
            "approvers": [{"tool": "shell", "identities": ["alice@*", "ci:github:*@acme/app/*"]}]}"#,
    )
    .unwrap();
    let s = approval_script(dir.path(), "s", &["echo approved-ok > ok.txt"]);
    let run = submit(
        &server,
        &queue,
        &unique("run-id"),
        &["--script", &s, "--policy", policy.to_str().unwrap()],
        "guarded task",
    );
    wait_state(&server, &run, "AWAITING_APPROVAL", T);
    let as_user = |user: &str, args: &[&str]| {
        let mut all = vec!["approve", run.as_str(), "--all"];
        all.extend_from_slice(args);
        // The approver name claims to be alice: only the identity counts.
        all.extend_from_slice(&["--approver", "alice"]);
        baton_with(&server, &all, &[("USER", user)], None).unwrap()
    };

    // bob's update is rejected by the validator, with what is allowed.
    let bob = as_user("bob", &[]);
    assert_eq!(bob.code, 2, "{bob}");
    assert!(
        bob.stderr.contains(&format!(
            "identity 'bob@{host}' may not decide calls of tool 'shell'"
        )),
        "{bob}"
    );
    assert!(bob.stderr.contains("alice@*"), "{bob}");
    // bob's signal is ignored (and noted); the run keeps waiting.
    let bob_signal = as_user("bob", &["--signal"]);
    assert_eq!(
        bob_signal.code, 0,
        "a signal cannot be refused: {bob_signal}"
    );
    wait_until_blocking(T, "the ignored signal noted in the status", || {
        let t = baton(&server, &["status", &run, "--json"])?.stdout;
        Ok(t.contains(&format!(
            "approval ignored: identity 'bob@{host}' may not decide"
        ))
        .then_some(()))
    })
    .unwrap();
    let status = wait_state(&server, &run, "AWAITING_APPROVAL", T);
    assert_eq!(status["pending"].as_array().unwrap().len(), 1, "{status}");
    assert!(!w.workspace_root().join(&run).join("ok.txt").exists());

    // alice may; the decision records her identity next to the name she gave.
    let alice = as_user("alice", &[]);
    assert_eq!(alice.code, 0, "{alice}");
    let r = result(&server, &run, 0);
    assert_eq!(r["status"], "COMPLETED", "{r}");
    assert!(w.workspace_root().join(&run).join("ok.txt").exists());
    let watch = baton(&server, &["watch", &run, "--json"]).unwrap();
    let decided: Vec<Value> = watch
        .json_lines()
        .unwrap()
        .into_iter()
        .filter(|l| l["kind"] == "approval_decided")
        .collect();
    assert_eq!(decided.len(), 1, "{watch}");
    assert_eq!(
        decided[0]["approval_decided"]["identity"],
        json!(format!("alice@{host}"))
    );

    // A CI job is named by the CI's variables.
    let s2 = approval_script(dir.path(), "s2", &["echo from-ci"]);
    let ci = submit(
        &server,
        &queue,
        &unique("run-ci"),
        &["--script", &s2, "--policy", policy.to_str().unwrap()],
        "ci task",
    );
    wait_state(&server, &ci, "AWAITING_APPROVAL", T);
    let from_ci = baton_with(
        &server,
        &["approve", &ci, "--all"],
        &[
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_ACTOR", "carol"),
            ("GITHUB_REPOSITORY", "acme/app"),
            ("GITHUB_RUN_ID", "99"),
        ],
        None,
    )
    .unwrap();
    assert_eq!(from_ci.code, 0, "{from_ci}");
    let r = result(&server, &ci, 0);
    assert_eq!(r["status"], "COMPLETED", "{r}");
}

/// `--local-read-tools`: read-only calls run as local activities (markers in history, no
/// activity task of their own, one workflow task per turn); a mutating call of the same run
/// stays a regular activity.
#[test]
fn read_only_tools_can_run_as_local_activities() {
    let server = DevServer::start().unwrap();
    let queue = unique("local-reads");
    let w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let s = script(
        dir.path(),
        "local",
        json!([
            {"text": "Writing.", "tool_calls": [{"name": "write_file", "arguments": {"path": "n.txt", "content": "local-read-ok\n"}}]},
            {"text": "Reading.", "tool_calls": [{"name": "read_file", "arguments": {"path": "n.txt"}}]},
            {"text": "Listing.", "tool_calls": [{"name": "list_files", "arguments": {}}]},
            {"text": "Done."}
        ]),
    );
    let run = submit(
        &server,
        &queue,
        &unique("run-local"),
        &[
            "--script",
            s.to_str().unwrap(),
            "--no-approval",
            "--local-read-tools",
        ],
        "read locally",
    );
    let r = result(&server, &run, 0);
    assert_eq!(r["status"], "COMPLETED", "{r}");
    assert_eq!(r["turns"], 4);
    let history = server.workflow_history_json(&run, None).unwrap();
    let events = history["events"].as_array().unwrap();
    let scheduled: Vec<&str> = events
        .iter()
        .filter_map(|e| e.pointer("/activityTaskScheduledEventAttributes/activityType/name"))
        .filter_map(Value::as_str)
        .collect();
    // read_instructions, 4 model calls, and the write_file call: the reads are not there.
    assert_eq!(
        scheduled.iter().filter(|n| **n == "run_tool").count(),
        1,
        "{scheduled:?}"
    );
    let local_markers = events
        .iter()
        .filter(|e| {
            e.pointer("/markerRecordedEventAttributes/markerName")
                .and_then(Value::as_str)
                == Some("core_local_activity")
        })
        .count();
    assert_eq!(local_markers, 2, "one local activity marker per read");
    // The model saw what the local read returned.
    assert!(decode_history_payloads(&history).contains("local-read-ok"));
    assert!(w.workspace_root().join(&run).join("n.txt").exists());
}

/// `--sandbox off` runs commands as the worker's user: a worker honours it only when its
/// operator allows it (`allow_sandbox_off`); otherwise the call fails, saying so, and the
/// run goes on.
#[test]
fn sandbox_off_needs_the_workers_consent() {
    let server = DevServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let s = script(
        dir.path(),
        "off",
        json!([
            {"text": "Unconfined.", "tool_calls": [{"name": "shell", "arguments": {"command": "echo unconfined > off.txt"}}]},
            {"text": "Done."}
        ]),
    )
    .display()
    .to_string();
    let args = ["--script", s.as_str(), "--no-approval", "--sandbox", "off"];

    let strict_queue = unique("no-off");
    let strict = worker(&server, &strict_queue, &[]);
    let run = submit(&server, &strict_queue, &unique("run-off"), &args, "off");
    assert_eq!(result(&server, &run, 0)["answer"], "Done.");
    assert!(!strict.workspace_root().join(&run).join("off.txt").exists());
    let text = history_text(&server, &run);
    assert!(
        text.contains("which this worker does not allow") && text.contains("allow_sandbox_off"),
        "the model is told why: {text}"
    );

    let lax_queue = unique("allow-off");
    let lax = worker(&server, &lax_queue, &[("BATON_ALLOW_SANDBOX_OFF", "true")]);
    let run = submit(&server, &lax_queue, &unique("run-off"), &args, "off");
    assert_eq!(result(&server, &run, 0)["answer"], "Done.");
    assert_eq!(
        std::fs::read_to_string(lax.workspace_root().join(&run).join("off.txt")).unwrap(),
        "unconfined\n"
    );
}

/// Two runs on one worker: the second one's shell commands can read neither the first one's
/// workspace nor the blob store holding its conversation (they run as the same user).
#[test]
fn a_run_cannot_read_another_runs_workspace_or_the_store() {
    let server = DevServer::start().unwrap();
    let queue = unique("isolation");
    let w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let victim_s = script(
        dir.path(),
        "victim",
        json!([
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "creds.txt", "content": "db_password=hunter2-VICTIM\n"}}]},
            {"text": "Stored."}
        ]),
    )
    .display()
    .to_string();
    let victim = submit(
        &server,
        &queue,
        &unique("run-victim"),
        &["--script", &victim_s, "--no-approval"],
        "confidential prompt XYZZY-PLUGH",
    );
    assert_eq!(result(&server, &victim, 0)["answer"], "Stored.");
    assert!(w.workspace_root().join(&victim).join("creds.txt").exists());

    let blobs = server.blob_dir().display().to_string();
    let command = format!(
        "cat ../{victim}/creds.txt; grep -rah 'XYZZY\\|hunter2' {blobs} ../..; ls ..; echo thief-done"
    );
    let thief_s = script(
        dir.path(),
        "thief",
        json!([
            {"tool_calls": [{"name": "shell", "arguments": {"command": command}}]},
            {"text": "Looked."}
        ]),
    )
    .display()
    .to_string();
    let thief = submit(
        &server,
        &queue,
        &unique("run-thief"),
        &["--script", &thief_s, "--no-approval"],
        "look around",
    );
    assert_eq!(result(&server, &thief, 0)["answer"], "Looked.");
    let transcript = baton(&server, &["transcript", &thief, "--json"])
        .unwrap()
        .json()
        .unwrap();
    let output = transcript["items"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|i| i["tool_result"]["content"].as_str())
        .unwrap()
        .to_owned();
    assert!(output.contains("thief-done"), "{output}");
    assert!(output.contains("Permission denied"), "{output}");
    for secret in ["hunter2-VICTIM", "XYZZY-PLUGH"] {
        assert!(
            !output.contains(secret),
            "{secret} leaked to another run: {output}"
        );
    }
    // `ls ..` would have listed the other run.
    assert!(!output.contains(&format!("{victim}\n")), "{output}");
}
