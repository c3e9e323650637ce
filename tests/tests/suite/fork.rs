//! `baton fork RUN --at-turn N` end to end: the fork's first model request holds
//! exactly RUN's first N turns and the instructions, its workspace is RUN's after turn N, its
//! history starts small (the conversation goes by reference), and bad input is refused with
//! what to do.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crate::common;

use base64::Engine as _;
use baton_tests::*;
use common::*;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(60);

/// The input of the first execution of `run` (its spec), decoded, and its size in bytes.
fn first_input(server: &DevServer, run: &str) -> (Value, usize) {
    let first = segments(server, run).remove(0);
    let history = server.workflow_history_json(run, Some(&first)).unwrap();
    let data = history["events"][0]["workflowExecutionStartedEventAttributes"]["input"]["payloads"]
        [0]["data"]
        .as_str()
        .unwrap_or_else(|| panic!("no input in {}", history["events"][0]));
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap();
    (serde_json::from_slice(&bytes).unwrap(), bytes.len())
}

/// `baton fork ARGS --json`, its exit code asserted; the JSON it printed (the fork, its
/// result with `--wait`, or the error).
fn fork(server: &DevServer, args: &[&str], code: i32) -> Value {
    let mut all = vec!["fork"];
    all.extend_from_slice(args);
    all.push("--json");
    let out = baton(server, &all).unwrap();
    assert_eq!(out.code, code, "{out}");
    out.json().unwrap()
}

#[test]
fn a_fork_at_turn_3_has_the_first_three_turns_their_workspace_and_a_small_history() {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    let queue = unique("fork");
    let base = llm.base_url();
    let w = worker(&server, &queue, &[("OPENAI_BASE_URL", base.as_str())]);
    // Turns 1..6 each write f<k> (8 KiB, so the conversation's text is large); turn 3 with
    // the shell, which waits for approval: a user's message sent then joins turn 4.
    let write = |k: u32| {
        let content = format!("file {k}\n{}\n", "x".repeat(8 * 1024));
        let arguments = json!({"path": format!("f{k}"), "content": content}).to_string();
        MockOpenAi::tool_calls_reply(&[(&format!("w{k}"), "write_file", &arguments)])
    };
    for k in 1..=6 {
        if k == 3 {
            llm.push_tool_calls(&[("w3", "shell", r#"{"command":"echo three > f3"}"#)]);
        } else {
            llm.push(write(k));
        }
    }
    llm.push_text("Wrote six files.");
    let run = unique("run-source");
    submit(
        &server,
        &queue,
        &run,
        &["--provider", "openai"],
        "write six files",
    );
    wait_state(&server, &run, "AWAITING_APPROVAL", T);
    let out = baton(&server, &["send", &run, "a message during turn 3"]).unwrap();
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(baton(&server, &["approve", &run, "--all"]).unwrap().code, 0);
    assert_eq!(result(&server, &run, 0)["turns"], 7);
    let source_requests = llm.requests();
    assert_eq!(source_requests.len(), 7);
    let after_turn_3 = source_requests[3].messages();
    assert_eq!(
        after_turn_3[8],
        json!({"role": "user", "content": "a message during turn 3"}),
        "the user's message opened turn 4"
    );

    // The fork writes g, lists the workspace, answers.
    llm.push(MockOpenAi::tool_calls_reply(&[(
        "g1",
        "write_file",
        r#"{"path": "g", "content": "instead\n"}"#,
    )]));
    llm.push_tool_calls(&[("l1", "list_files", "{}")]);
    llm.push_text("Wrote g instead.");
    let started = fork(
        &server,
        &[&run, "--at-turn", "3", "--instructions", "Write g instead."],
        0,
    );
    assert_eq!(started["fork_of"], run.as_str(), "{started}");
    assert_eq!(started["task_queue"], queue.as_str(), "RUN's queue");
    let id = started["run_id"].as_str().unwrap().to_owned();
    let r = ended(&server, &id, 0);
    assert_eq!(r.answer, "Wrote g instead.", "{r:?}");
    assert_eq!(r.turns, 6, "turns count on from 3: {r:?}");
    assert_eq!(
        r.usage.as_ref().unwrap().llm_calls,
        3,
        "usage starts at zero: {r:?}"
    );

    // The first request: the task, assistant 1..3 with their calls and results, then the
    // instructions; nothing of the user's message or of turns 4..6.
    let requests = llm.requests();
    let first = requests[7].messages();
    assert_eq!(first.len(), 9, "{first:#?}");
    assert_eq!(first[1..8], after_turn_3[1..8]);
    assert_eq!(
        first[8],
        json!({"role": "user", "content": "Write g instead."})
    );
    assert!(
        first[2]["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap()
            .contains(&"x".repeat(8 * 1024)),
        "the model sees the stored turns whole"
    );
    let text = serde_json::to_string(&first[1..]).unwrap();
    assert!(!text.contains("file 4") && !text.contains("w4"), "{text}");

    // Its workspace is RUN's after turn 3, and its change set counts from RUN's start.
    let listed = requests[9].messages();
    let listing = listed.iter().rev().find(|m| m["role"] == "tool").unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    for name in ["f1", "f2", "f3", "g"] {
        assert!(listing.contains(name), "{name} in {listing}");
    }
    assert!(!listing.contains("f4"), "{listing}");
    let workspace = w.workspace_root().join(&id);
    assert_eq!(
        std::fs::read_to_string(workspace.join("f3")).unwrap(),
        "three\n"
    );
    assert!(!workspace.join("f4").exists());
    let files: Vec<&str> = r
        .changes
        .as_ref()
        .unwrap()
        .files
        .iter()
        .map(|f| &*f.path)
        .collect();
    assert_eq!(files, ["f1", "f2", "f3", "g"], "{r:?}");
    let diff = baton(&server, &["diff", &id]).unwrap();
    assert!(diff.stdout.contains("+three"), "{diff}");

    // Its history starts small: the input names a stored head and carries the two items after
    // it (assistant 3 and its result: call 4 stored the user's message too, so call 3's
    // segment is the head), not the conversation's text.
    let (input, input_bytes) = first_input(&server, &id);
    let source = &input["fork"];
    assert_eq!(source["run_id"], run.as_str());
    assert_eq!(source["at_turn"], 3);
    assert!(!source["conversation"]["head"].as_str().unwrap().is_empty());
    assert_eq!(source["conversation"]["stored_items"], 5, "{source}");
    assert_eq!(source["conversation"]["added"].as_array().unwrap().len(), 2);
    assert_eq!(input["labels"]["baton.fork_of"], run.as_str());
    let transcript = baton(&server, &["transcript", &run, "--json"]).unwrap();
    let conversation_bytes = transcript.stdout.len();
    eprintln!("fork input {input_bytes} bytes; source conversation {conversation_bytes} bytes");
    assert!(conversation_bytes > 32 * 1024, "{conversation_bytes}");
    assert!(
        input_bytes * 4 < conversation_bytes,
        "input {input_bytes} bytes, conversation {conversation_bytes}"
    );
    // `status` and `transcript` of the fork work as for any run.
    let transcript = baton(&server, &["transcript", &id, "--json"]).unwrap();
    assert_eq!(transcript.code, 0, "{transcript}");
    assert!(transcript.stdout.contains("Write g instead."));
    let label = format!("baton.fork_of={run}");
    wait_until_blocking(T, "the fork listed by its label", || {
        let out = baton(&server, &["list", "--label", &label, "--json"])?;
        Ok(out.stdout.contains(&id).then_some(()))
    })
    .unwrap();
}

#[test]
fn bad_forks_are_refused_with_what_to_do() {
    let server = DevServer::start().unwrap();
    let queue = unique("fork-bad");
    let _w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let s = script(
        dir.path(),
        "short",
        json!([
            {"text": "Looking.", "tool_calls": [{"name": "list_files", "arguments": {}}]},
            {"text": "Nothing here."}
        ]),
    )
    .display()
    .to_string();
    let run = unique("run-short");
    submit(&server, &queue, &run, &["--script", &s], "look");
    assert_eq!(result(&server, &run, 0)["turns"], 2);
    let refused = |args: &[&str], env: &[(&str, &str)], says: &str| {
        let mut all = vec!["fork"];
        all.extend_from_slice(args);
        let out = baton_with(&server, &all, env, None).unwrap();
        assert_eq!(out.code, 2, "{args:?}: {out}");
        assert!(out.stderr.contains(says), "{args:?}: {out}");
    };
    refused(
        &["no-such-run", "--at-turn", "1"],
        &[],
        "no run with id 'no-such-run'",
    );
    refused(&[&run, "--at-turn", "0"], &[], "turns count from 1");
    refused(
        &[&run, "--at-turn", "3", "--instructions", "x"],
        &[],
        "the run has 2 turns so far; pick a turn from 1 to 2",
    );
    refused(&[&run, "--at-turn", "2"], &[], "with --instructions TEXT");
    let empty = tempfile::tempdir().unwrap();
    let empty = empty.path().display().to_string();
    refused(
        &[&run, "--at-turn", "1"],
        &[("BATON_STORE__DIR", &empty)],
        "set BATON_STORE__DIR (or BATON_STORE__S3__*) to the workers' store",
    );
    refused(
        &[&run, "--at-turn", "1", "--id", &run],
        &[],
        &format!("a run with id '{run}' already exists"),
    );
    refused(
        &[&run, "--at-turn", "1", "--max-turns", "1"],
        &[],
        "raise it with --max-turns",
    );
    let failed = fork(&server, &[&run, "--at-turn", "9"], 2);
    assert_eq!(failed["exit_code"], 2, "{failed}");

    // A fork at turn 1 of a scripted run replays the script from turn 2, and waits.
    let id = unique("run-forked");
    let r = fork(&server, &[&run, "--at-turn", "1", "--id", &id, "--wait"], 0);
    assert_eq!(
        (r["answer"].as_str(), r["turns"].as_u64()),
        (Some("Nothing here."), Some(2))
    );
}

#[test]
fn a_continued_run_forks_from_its_first_segments_spec_and_its_stored_items() {
    let server = DevServer::start().unwrap();
    let queue = unique("fork-continued");
    let _w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let mut turns: Vec<Value> = (1..=12)
        .map(|k| json!({"text": format!("Note {k}."), "tool_calls": [{"name": "write_file", "arguments": {"path": format!("n{k}"), "content": format!("{k}\n")}}]}))
        .collect();
    turns.push(json!({"text": "Wrote twelve notes."}));
    let s = script(dir.path(), "long", Value::Array(turns))
        .display()
        .to_string();
    let run = unique("run-continued");
    submit(
        &server,
        &queue,
        &run,
        &[
            "--script",
            &s,
            "--segment-turns",
            "4",
            "--label",
            "team=infra",
        ],
        "write notes",
    );
    assert_eq!(result(&server, &run, 0)["turns"], 13);
    assert!(
        segments(&server, &run).len() >= 3,
        "the run continued as new"
    );
    let transcript = baton(&server, &["transcript", &run, "--json"]).unwrap();
    assert_eq!(transcript.code, 0, "{transcript}");
    // The early turns are stubs in the run's last segment: the fork reads them from the store.
    let id = unique("run-fork-of-continued");
    let r = fork(
        &server,
        &[
            &run,
            "--at-turn",
            "2",
            "--id",
            &id,
            "--instructions",
            "Write them again.",
            "--wait",
        ],
        0,
    );
    assert_eq!(r["answer"], "Wrote twelve notes.", "{r}");
    assert_eq!(r["turns"], 13, "{r}");
    let (input, _) = first_input(&server, &id);
    assert!(input.get("continued").is_none(), "{input}");
    assert_eq!(input["task"], "write notes");
    assert_eq!(input["labels"]["team"], "infra");
    assert_eq!(input["limits"]["segment_turns"], 4);
    let held = input["fork"]["held"].as_array().unwrap();
    assert_eq!(held.len(), 5, "task, two turns, stored by call 3");
    assert!(held.iter().all(|i| i.get("stub").is_none()), "{held:?}");
    // The fork continued as new too (RUN's segment budget): its later inputs name the
    // source without carrying its items.
    let history = server.workflow_history_json(&id, None).unwrap();
    let text = decode_history_payloads(&history["events"][0]);
    assert!(
        text.contains("\"continued\"") && text.contains("\"held\":[]"),
        "{text}"
    );
}
