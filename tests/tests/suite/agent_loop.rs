//! The agent loop end to end with scripted models: policies, remembered approvals, CI mode,
//! the circuit breaker and loop detection.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::Path;
use std::time::Duration;

use baton_tests::*;
use common::*;
use pretty_assertions::assert_eq;
use serde_json::json;

const T: Duration = Duration::from_secs(60);

fn wait_json(server: &DevServer, queue: &str, extra: &[&str], code: i32) -> serde_json::Value {
    let mut args = vec![
        "submit",
        "--task-queue",
        queue,
        "--wait",
        "--wait-timeout",
        "90s",
        "--json",
    ];
    args.extend_from_slice(extra);
    args.push("task");
    let out = baton(server, &args).unwrap();
    assert_eq!(out.code, code, "{out}");
    out.json().unwrap()
}

#[test]
fn breaker_alerts_the_model_which_recovers_and_loops_are_stopped() {
    let server = DevServer::start().unwrap();
    let queue = unique("loop");
    let _w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();

    let failing = |i: u32| json!({"text": format!("Trying file {i}."), "tool_calls": [{"name": "read_file", "arguments": {"path": format!("missing-{i}.txt")}}]});
    let s = script(
        dir.path(),
        "breaker",
        json!([
            failing(1), failing(2), failing(3),
            {"text": "Changing strategy: listing first.", "tool_calls": [{"name": "list_files", "arguments": {}}]},
            {"text": "Recovered."}
        ]),
    )
    .display()
    .to_string();
    let r = wait_json(&server, &queue, &["--script", &s], 0);
    assert_eq!(r["answer"], "Recovered.");
    let run = r["run_id"].as_str().unwrap();
    let text = history_text(&server, run);
    assert!(text.contains("[baton circuit breaker] The last 3 turns each had a failing tool call"));

    let same = json!({"tool_calls": [{"name": "list_files", "arguments": {"recursive": true}}]});
    let s = script(
        dir.path(),
        "loop",
        json!([same, same, same, {"text": "unreachable"}]),
    )
    .display()
    .to_string();
    let r = wait_json(&server, &queue, &["--script", &s], 1);
    assert_eq!(r["reason"], "loop_detected");
    assert_eq!(r["turns"], 3);
    assert!(
        r["detail"]
            .as_str()
            .unwrap()
            .contains("same tool calls (list_files) 3 times")
    );
    let out = baton(&server, &["result", r["run_id"].as_str().unwrap()]).unwrap();
    assert!(
        out.stdout.contains("the agent was repeating itself"),
        "{out}"
    );
}

#[test]
fn remembered_approval_and_ci_mode_and_policy_files() {
    let server = DevServer::start().unwrap();
    let queue = unique("policy");
    let w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();

    // edit_file needs approval; approving with --remember covers later edits of that file.
    let edit = |old: &str, new: &str| json!({"tool_calls": [{"name": "edit_file", "arguments": {"path": "notes.txt", "old_text": old, "new_text": new}}]});
    let s = script(
        dir.path(),
        "remember",
        json!([
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "notes.txt", "content": "alpha beta\n"}}]},
            edit("alpha", "ALPHA"),
            edit("beta", "BETA"),
            {"text": "Both edits done."}
        ]),
    )
    .display()
    .to_string();
    let run = unique("run-remember");
    submit(
        &server,
        &queue,
        &run,
        &["--script", &s, "--require-approval", "edit_file"],
        "edit",
    );
    let status = wait_status(&server, &run, "AWAITING_APPROVAL", T);
    assert_eq!(status.status.pending[0].tool, "edit_file");
    let out = baton(&server, &["approve", &run, "--all", "--remember"]).unwrap();
    assert_eq!(out.code, 0, "{out}");
    let r = ended(&server, &run, 0);
    assert_eq!(r.answer, "Both edits done.");
    assert_eq!(
        std::fs::read_to_string(w.workspace_root().join(&run).join("notes.txt")).unwrap(),
        "ALPHA BETA\n"
    );
    let events = baton(&server, &["watch", &run, "--json"])
        .unwrap()
        .json_lines()
        .unwrap();
    let asked = events
        .iter()
        .filter(|e| !e["approval_requested"].is_null())
        .count();
    assert_eq!(
        asked, 1,
        "the second edit of the same file was not asked again"
    );

    // A remembered shell approval covers the same simple command, not a chained one or a
    // longer program name: those wait for a human again.
    let sh = |command: &str| json!({"tool_calls": [{"name": "shell", "arguments": {"command": command}}]});
    let s = script(
        dir.path(),
        "remember-shell",
        json!([
            sh("ls"),
            sh("ls -a"),
            sh("ls; echo PWNED > pwned.txt"),
            sh("lsblk"),
            {"text": "Listed."}
        ]),
    )
    .display()
    .to_string();
    let run = unique("run-remember-shell");
    submit(&server, &queue, &run, &["--script", &s], "list");
    wait_state(&server, &run, "AWAITING_APPROVAL", T);
    let out = baton(&server, &["approve", &run, "--all", "--remember"]).unwrap();
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stdout
            .contains("allowed for the rest of the run: shell ls *"),
        "{out}"
    );
    // `ls -a` runs on the remembered rule; the chained command asks.
    let status = wait_until_blocking(T, "the chained command asks", || {
        let v = baton(&server, &["status", &run, "--json"])?.json()?;
        Ok((v["state"] == "AWAITING_APPROVAL" && v["turn"] == 3).then_some(v))
    })
    .unwrap();
    assert_eq!(
        status["pending"][0]["arguments"],
        json!({"command": "ls; echo PWNED > pwned.txt"}).to_string(),
        "{status}"
    );
    assert!(!w.workspace_root().join(&run).join("pwned.txt").exists());
    let out = baton(&server, &["deny", &run, "--all", "--reason", "no chaining"]).unwrap();
    assert_eq!(out.code, 0, "{out}");
    let status = wait_until_blocking(T, "lsblk asks", || {
        let v = baton(&server, &["status", &run, "--json"])?.json()?;
        Ok((v["state"] == "AWAITING_APPROVAL" && v["turn"] == 4).then_some(v))
    })
    .unwrap();
    assert_eq!(
        status["pending"][0]["arguments"],
        json!({"command": "lsblk"}).to_string()
    );
    assert_eq!(baton(&server, &["deny", &run, "--all"]).unwrap().code, 0);
    assert_eq!(result(&server, &run, 0)["answer"], "Listed.");
    assert!(!w.workspace_root().join(&run).join("pwned.txt").exists());

    // CI mode: an `ask` call is denied at once, the run does not block.
    let s = script(
        dir.path(),
        "ci",
        json!([
            {"tool_calls": [{"name": "shell", "arguments": {"command": "make deploy"}}]},
            {"text": "Could not deploy without approval."}
        ]),
    )
    .display()
    .to_string();
    let r = wait_json(&server, &queue, &["--script", &s, "--never-ask"], 0);
    assert_eq!(r["answer"], "Could not deploy without approval.");
    assert!(history_text(&server, r["run_id"].as_str().unwrap()).contains("policy mode never_ask"));

    // A TOML policy file: ordered rules, first match wins.
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        r#"
mode = "never_ask"
[[rules]]
tool = "shell"
pattern = "echo *"
action = "allow"
[[rules]]
tool = "shell"
pattern = "rm *"
action = "deny"
reason = "no deleting here"
[[rules]]
tool = "shell"
action = "ask"
"#,
    )
    .unwrap();
    let s = script(
        dir.path(),
        "rules",
        json!([
            {"tool_calls": [
                {"name": "shell", "arguments": {"command": "echo allowed-by-rule"}},
                {"name": "shell", "arguments": {"command": "rm -rf important"}},
                {"name": "shell", "arguments": {"command": "curl example.com"}}
            ]},
            {"text": "done"}
        ]),
    )
    .display()
    .to_string();
    let policy = policy.display().to_string();
    let r = wait_json(&server, &queue, &["--script", &s, "--policy", &policy], 0);
    let text = history_text(&server, r["run_id"].as_str().unwrap());
    assert!(text.contains("allowed-by-rule"));
    assert!(text.contains("forbids this call: no deleting here"));
    assert!(text.contains("policy mode never_ask"));

    // A bad policy file is refused before anything starts.
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"rules": [{"tool": "shell", "action": "sometimes"}]}"#,
    )
    .unwrap();
    let bad = bad.display().to_string();
    let out = baton(
        &server,
        &[
            "submit",
            "--task-queue",
            &queue,
            "--script",
            &s,
            "--policy",
            &bad,
            "x",
        ],
    )
    .unwrap();
    assert_eq!(out.code, 2, "{out}");
    assert!(out.stderr.contains("unknown action 'sometimes'"), "{out}");
}

#[test]
fn a_run_over_its_context_window_is_compacted_and_completes() {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    let queue = unique("compact");
    let base = llm.base_url();
    let _w = worker(&server, &queue, &[("OPENAI_BASE_URL", base.as_str())]);
    // Replies report realistic usage; the third puts the run past 4,500 of its 6,000 tokens.
    for (i, (args, prompt_tokens)) in [
        ("{}", 1_000),
        (r#"{"path":"."}"#, 3_000),
        (r#"{"recursive":true}"#, 5_200),
    ]
    .into_iter()
    .enumerate()
    {
        let mut reply = MockOpenAi::tool_calls_reply(&[(&format!("call_{i}"), "list_files", args)]);
        reply["usage"] = json!({"prompt_tokens": prompt_tokens, "completion_tokens": 20, "total_tokens": prompt_tokens + 20});
        llm.push(reply);
    }
    llm.push_text("SUMMARY: listed the empty workspace once.");
    llm.push_text("Done after compaction.");
    let out = baton(
        &server,
        &[
            "submit",
            "--task-queue",
            &queue,
            "--provider",
            "openai",
            "--no-approval",
            "--context-window",
            "6000",
            "--wait",
            "--json",
            "inspect the workspace",
        ],
    )
    .unwrap();
    assert_eq!(out.code, 0, "{out}");
    let r = out.json().unwrap();
    assert_eq!(r["answer"], "Done after compaction.");
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 5);
    // The summary request: the summarizer's instructions, no tools, the older turns quoted.
    let summary_req = &reqs[3];
    assert!(summary_req.body.get("tools").is_none());
    let msgs = summary_req.messages();
    assert!(
        msgs[0]["content"]
            .as_str()
            .unwrap()
            .contains("You compress the history")
    );
    let quoted = msgs[1]["content"].as_str().unwrap();
    assert!(
        quoted.contains("inspect the workspace") && quoted.contains("call_0"),
        "{quoted}"
    );
    // The next call sees the summary instead of the oldest turn.
    let last = reqs[4].messages();
    let text = serde_json::to_string(&last).unwrap();
    assert!(text.contains("SUMMARY: listed the empty workspace once."));
    assert!(
        !text.contains("call_0"),
        "the summarized turn is gone from the model's view"
    );
    assert!(text.contains("call_1") && text.contains("call_2"));
    // The compaction is one of the run's events (the status memo is refreshed only on state
    // changes, so the history need not carry it).
    let watch = baton(&server, &["watch", r["run_id"].as_str().unwrap(), "--json"]).unwrap();
    assert!(
        watch.stdout.contains("summarized the conversation"),
        "{watch}"
    );
}

#[test]
fn the_system_prompt_carries_workspace_agents_md_and_run_instructions() {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    let queue = unique("prompt");
    let base = llm.base_url();
    let workspace = tempfile::tempdir().unwrap();
    let mut w = Worker::spawn_with_workspace(
        &server,
        &queue,
        workspace.path(),
        &[("OPENAI_BASE_URL", base.as_str())],
    )
    .unwrap();
    w.wait_ready_blocking(T).unwrap();
    let run = unique("run-prompt");
    std::fs::create_dir_all(workspace.path().join(&run)).unwrap();
    std::fs::write(
        workspace.path().join(&run).join("AGENTS.md"),
        "# House rules\nAlways run `make check` before finishing.\n",
    )
    .unwrap();
    llm.push_text("ok");
    let out = baton(
        &server,
        &[
            "submit",
            "--task-queue",
            &queue,
            "--id",
            &run,
            "--provider",
            "openai",
            "--instructions",
            "Only touch files under docs/.",
            "--wait",
            "--json",
            "go",
        ],
    )
    .unwrap();
    assert_eq!(out.code, 0, "{out}");
    let system = llm.requests()[0].messages()[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    let agents = system
        .find("Always run `make check` before finishing.")
        .expect("AGENTS.md");
    let extra = system
        .find("Only touch files under docs/.")
        .expect("instructions");
    assert!(agents < extra, "{system}");
    assert!(
        system.contains(&format!(
            "Your workspace is {};",
            workspace.path().join(&run).display()
        )),
        "{system}"
    );
    assert!(system.contains("Today's date is 20"), "{system}");
}

#[test]
fn the_deadline_is_a_durable_timer_that_stops_work_in_flight() {
    let server = DevServer::start().unwrap();
    let queue = unique("deadline");
    let _w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let marker = format!("{}", 90 + (std::process::id() % 9));
    let sleep_arg = format!("{marker}.{}", std::process::id());
    let s = script(
        dir.path(),
        "deadline",
        json!([
            {"tool_calls": [{"name": "shell", "arguments": {"command": format!("sleep {sleep_arg}")}}]},
            {"text": "never"}
        ]),
    )
    .display()
    .to_string();
    let started = std::time::Instant::now();
    let r = wait_json(
        &server,
        &queue,
        &["--script", &s, "--no-approval", "--deadline", "4s"],
        1,
    );
    assert_eq!(r["reason"], "budget_exceeded");
    assert!(
        r["detail"].as_str().unwrap().contains("deadline of 4 s"),
        "{r}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    let gone = wait_until_blocking(Duration::from_secs(20), "the tool to be stopped", || {
        Ok(pids_matching(&sleep_arg).is_empty().then_some(()))
    });
    for pid in pids_matching(&sleep_arg) {
        let _ = send_signal(pid, Signal::SIGKILL);
    }
    gone.unwrap();
}

#[test]
fn baton_send_adds_guidance_to_the_next_turn() {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    let queue = unique("send");
    let base = llm.base_url();
    let _w = worker(&server, &queue, &[("OPENAI_BASE_URL", base.as_str())]);
    llm.push_tool_calls(&[("c1", "shell", r#"{"command":"make all"}"#)]);
    llm.push_text("Listed instead.");
    let run = unique("run-send");
    submit(&server, &queue, &run, &["--provider", "openai"], "build it");
    wait_state(&server, &run, "AWAITING_APPROVAL", T);
    let out = baton(
        &server,
        &["send", &run, "Do not build; just list the files."],
    )
    .unwrap();
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        baton(
            &server,
            &["deny", &run, "--all", "--reason", "see my message"]
        )
        .unwrap()
        .code,
        0
    );
    let r = ended(&server, &run, 0);
    assert_eq!(r.answer, "Listed instead.");
    let msgs = llm.requests()[1].messages();
    let last = msgs.last().unwrap();
    assert_eq!(last["role"], "user");
    assert_eq!(last["content"], "Do not build; just list the files.");
    // `watch` shows what was said, not only that something was.
    let watch = baton(&server, &["watch", &run]).unwrap();
    assert!(
        watch
            .stdout
            .contains("user message: Do not build; just list the files."),
        "{watch}"
    );
}

#[test]
fn big_tool_outputs_reach_the_model_as_a_preview_and_the_transcript_in_full() {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    let queue = unique("transcript");
    let base = llm.base_url();
    let _w = worker(&server, &queue, &[("OPENAI_BASE_URL", base.as_str())]);
    llm.push_tool_calls(&[(
        "c1",
        "shell",
        r#"{"command":"head -c 60000 /dev/zero | tr '\\0' q; echo; echo END-OF-OUTPUT"}"#,
    )]);
    llm.push_text("Printed a lot.");
    let run = unique("run-transcript");
    submit(
        &server,
        &queue,
        &run,
        &["--provider", "openai", "--no-approval"],
        "print a lot",
    );
    result(&server, &run, 0);
    let sent = llm.requests()[1].messages();
    let tool = sent.iter().find(|m| m["role"] == "tool").unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(tool.len() <= 16 * 1024, "{}", tool.len());
    assert!(
        tool.contains("bytes cut from the middle"),
        "the model is told what was cut"
    );
    let out = baton(&server, &["transcript", &run]).unwrap();
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("END-OF-OUTPUT"));
    assert!(
        out.stdout.matches('q').count() >= 60_000,
        "the full output is in the transcript"
    );
    let json = baton(&server, &["transcript", &run, "--json"])
        .unwrap()
        .json()
        .unwrap();
    let items = json["items"].as_array().unwrap();
    assert!(items.iter().any(|i| {
        i["tool_result"]["full_output"]
            .as_str()
            .is_some_and(|f| f.len() > 60_000)
    }));
}

/// A repository's `AGENTS.md` is not trusted. Links to the worker's own environment,
/// to a file outside the workspace and to `/dev/zero` put nothing of them into any model
/// request, and the worker lives through all three (the run goes on without the file).
#[test]
fn a_hostile_agents_md_link_reaches_no_model_request_and_kills_no_worker() {
    const ENV_MARKER: &str = "worker-env-marker-91d2c";
    const FILE_MARKER: &str = "OUTSIDE-MARKER-7f3a";
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    let queue = unique("agents-md");
    let base = llm.base_url();
    let mut w = Worker::spawn(
        &server,
        &queue,
        &[
            ("OPENAI_BASE_URL", base.as_str()),
            ("BATON_TEST_MARKER_TOKEN", ENV_MARKER),
        ],
    )
    .unwrap();
    w.wait_ready_blocking(T).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let outside = tmp.path().join("outside.txt");
    std::fs::write(&outside, format!("{FILE_MARKER}\n")).unwrap();
    for (i, target) in [
        Path::new("/proc/self/environ"),
        outside.as_path(),
        Path::new("/dev/zero"),
    ]
    .into_iter()
    .enumerate()
    {
        let project = tmp.path().join(format!("project-{i}"));
        std::fs::create_dir_all(&project).unwrap();
        std::fs::write(project.join("README"), "hello\n").unwrap();
        std::os::unix::fs::symlink(target, project.join("AGENTS.md")).unwrap();
        llm.push_text("ok");
        let out = baton(
            &server,
            &[
                "submit",
                "--task-queue",
                &queue,
                "--id",
                &unique("run-agents-md"),
                "--provider",
                "openai",
                "--workspace-from",
                project.to_str().unwrap(),
                "--wait",
                "--json",
                "go",
            ],
        )
        .unwrap();
        assert_eq!(out.code, 0, "{}: {out}", target.display());
        assert!(w.is_running(), "the worker died on {}", target.display());
    }
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    for request in requests {
        let body = request.body.to_string();
        for marker in [
            ENV_MARKER,
            FILE_MARKER,
            "OPENAI_BASE_URL",
            "BATON_TEST_MARKER",
        ] {
            assert!(!body.contains(marker), "{marker} reached the model: {body}");
        }
    }
    assert!(
        w.log().contains("AGENTS.md left out of the instructions"),
        "{}",
        w.log()
    );
}
