//! Tools and the sandbox end to end: malformed calls and unknown tools as observations,
//! read-only tools as local activities, `--sandbox off` and the worker's consent, and runs
//! that cannot read each other's workspaces or the blob store.

#![allow(clippy::unwrap_used)]

use crate::common;

use baton_tests::*;
use common::*;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

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
    let r = ended(&server, &run, 0);
    assert_eq!(r.answer, "I could not do it.");
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

/// The tools `run` ran as regular `run_tool` activities (by call name), its local activity
/// markers (one per local activity, whatever its attempts), and its decoded history.
fn scheduled_and_local(server: &DevServer, run: &str) -> (Vec<String>, usize, String) {
    let history = server.workflow_history_json(run, None).unwrap();
    let events = history["events"].as_array().unwrap();
    let activities = completed_activities(&history)
        .into_iter()
        .filter(|a| a.name == "run_tool")
        .map(|a| {
            a.input["call"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    let local_markers = events
        .iter()
        .filter(|e| {
            e.pointer("/markerRecordedEventAttributes/markerName")
                .and_then(Value::as_str)
                == Some("core_local_activity")
        })
        .count();
    (activities, local_markers, decode_history_payloads(&history))
}

fn reads_script(dir: &std::path::Path, last_read: Value) -> std::path::PathBuf {
    script(
        dir,
        "local",
        json!([
            {"text": "Writing.", "tool_calls": [{"name": "write_file", "arguments": {"path": "n.txt", "content": "local-read-ok slow-read-target\n"}}]},
            {"text": "Reading.", "tool_calls": [{"name": "read_file", "arguments": {"path": "n.txt"}}]},
            {"text": "Looking.", "tool_calls": [last_read]},
            {"text": "Done."}
        ]),
    )
}

/// By default (patch `local-read-tools-v1`; `--local-read-tools` says the same) read-only calls
/// run as local activities (markers in history, no activity task of their own, one workflow
/// task per turn); a mutating call of the same run stays a regular activity. A read that takes
/// longer than its 3 s budget runs again as a regular activity, whose result the model gets.
#[test]
fn read_only_tools_run_as_local_activities_and_a_slow_one_moves_to_an_activity() {
    let server = DevServer::start().unwrap();
    let queue = unique("local-reads");
    // Debug builds only: reads whose arguments say "slow-read" wait 4 s first.
    let w = worker(&server, &queue, &[("BATON_TEST_READ_DELAY_MS", "4000")]);
    let dir = tempfile::tempdir().unwrap();
    let fast = json!({"name": "list_files", "arguments": {}});
    let s = reads_script(dir.path(), fast);
    let run = submit(
        &server,
        &queue,
        &unique("run-local"),
        &["--script", s.to_str().unwrap(), "--no-approval"],
        "read locally",
    );
    let r = ended(&server, &run, 0);
    assert_eq!(r.status, "COMPLETED", "{r:?}");
    assert_eq!(r.turns, 4);
    let (tools, local, text) = scheduled_and_local(&server, &run);
    // Each read ran as a local activity (one marker each); the write as a regular activity.
    // A read shows up as an activity too only if its local attempt ran out of its budget,
    // which a loaded machine can make happen to a quick read.
    assert_eq!(local, 2, "one local activity marker per read");
    assert_eq!(tools[0], "write_file", "{tools:?}");
    assert!(
        tools[1..]
            .iter()
            .all(|t| t == "read_file" || t == "list_files"),
        "{tools:?}"
    );
    // The model saw what the local read returned.
    assert!(text.contains("local-read-ok"));
    assert!(w.workspace_root().join(&run).join("n.txt").exists());

    let slow = json!({"name": "search_files", "arguments": {"pattern": "slow-read"}});
    let s = reads_script(dir.path(), slow);
    let run = submit(
        &server,
        &queue,
        &unique("run-slow"),
        &["--script", s.to_str().unwrap(), "--no-approval"],
        "read slowly",
    );
    let r = ended(&server, &run, 0);
    assert_eq!(r.status, "COMPLETED", "{r:?}");
    let (tools, local, text) = scheduled_and_local(&server, &run);
    // The write, and the slow search once its local attempt ran out of budget.
    assert_eq!(
        tools.first().map(String::as_str),
        Some("write_file"),
        "{tools:?}"
    );
    assert_eq!(
        tools.last().map(String::as_str),
        Some("search_files"),
        "{tools:?}"
    );
    assert_eq!(local, 2, "the read's and the slow search's local attempts");
    assert!(
        text.contains("n.txt:1: local-read-ok slow-read-target"),
        "{text}"
    );
}

/// `--remote-read-tools`: every call is a regular activity, as before the patch.
#[test]
fn remote_read_tools_keeps_reads_as_activities() {
    let server = DevServer::start().unwrap();
    let queue = unique("remote-reads");
    let _w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let s = reads_script(dir.path(), json!({"name": "list_files", "arguments": {}}));
    let run = submit(
        &server,
        &queue,
        &unique("run-remote"),
        &[
            "--script",
            s.to_str().unwrap(),
            "--no-approval",
            "--remote-read-tools",
        ],
        "read remotely",
    );
    assert_eq!(result(&server, &run, 0)["status"], "COMPLETED");
    let (tools, local, _) = scheduled_and_local(&server, &run);
    assert_eq!(tools, vec!["write_file", "read_file", "list_files"]);
    assert_eq!(local, 0);
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
