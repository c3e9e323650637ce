//! Replay: every history committed under `tests/histories/` must replay against the current
//! `AgentRun` code. A change that makes the workflow nondeterministic (a reordered, added or
//! removed command) fails here. Record a new history with
//! `cargo test -p baton-tests --test replay -- --ignored record_approval_history`.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::{path::PathBuf, time::Duration};

use baton_tests::*;
use baton_workflows::AgentRun;
use common::*;
use serde_json::json;
use temporalio_client::{
    Client, ClientOptions, Connection, ConnectionOptions, WorkflowFetchHistoryOptions,
    WorkflowHistory,
};
use temporalio_sdk::workflow_replayer::{WorkflowReplayer, WorkflowReplayerOptions};

/// File the recorder writes; older recordings stay and must keep replaying.
const RECORD_AS: &str = "approval-run-v8.json";

fn histories_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("histories")
}

fn replayer() -> WorkflowReplayer {
    WorkflowReplayer::new(
        WorkflowReplayerOptions::new()
            .register_workflow::<AgentRun>()
            .unwrap()
            .build(),
    )
    .unwrap()
}

#[tokio::test]
async fn committed_histories_replay_against_current_code() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(histories_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no histories under tests/histories");
    let replayer = replayer();
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        let history = WorkflowHistory::from_json(&bytes).unwrap();
        replayer
            .replay_workflow(history)
            .await
            .unwrap_or_else(|e| panic!("{} no longer replays: {e}", file.display()));
    }
}

#[tokio::test]
async fn a_tampered_history_is_detected() {
    // The same history with the workflow's first activity renamed must fail replay, or the test
    // above could never fail.
    let bytes = std::fs::read(histories_dir().join("approval-run.json")).unwrap();
    let text = String::from_utf8(bytes).unwrap();
    assert!(text.contains("llm_generate"));
    let tampered = text.replacen("llm_generate", "llm_generate_v0", 1);
    let history = WorkflowHistory::from_json(tampered.as_bytes()).unwrap();
    assert!(replayer().replay_workflow(history).await.is_err());
}

/// Records `tests/histories/<RECORD_AS>`: a run with a batch of two shell calls, one
/// approved with `--remember` (update) and one denied (signal), a call the remembered rule
/// allows, a chained call it does not (denied), then the answer.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "records a history; run by hand after an intended workflow change"]
async fn record_approval_history() {
    let server = DevServer::start().unwrap();
    let queue = unique("record");
    let _w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let s = script(
        dir.path(),
        "record",
        json!([
            {"text": "Looking.", "tool_calls": [{"name": "list_files", "arguments": {}}]},
            {"text": "Two commands.", "tool_calls": [
                {"name": "shell", "arguments": {"command": "echo approved"}},
                {"name": "shell", "arguments": {"command": "echo denied"}}
            ]},
            {"text": "Again.", "tool_calls": [
                {"name": "shell", "arguments": {"command": "echo approved again"}}
            ]},
            {"text": "Chained.", "tool_calls": [
                {"name": "shell", "arguments": {"command": "echo approved; echo chained"}}
            ]},
            {"text": "Done."}
        ]),
    )
    .display()
    .to_string();
    let run = "approval-run";
    submit(&server, &queue, run, &["--script", &s], "record a history");
    wait_state(&server, run, "AWAITING_APPROVAL", Duration::from_secs(60));
    assert_eq!(
        baton(&server, &["approve", run, "call_2_1", "--remember"])
            .unwrap()
            .code,
        0
    );
    assert_eq!(
        baton(
            &server,
            &["deny", run, "call_2_2", "--signal", "--reason", "no"]
        )
        .unwrap()
        .code,
        0
    );
    // Turn 3 runs on the remembered rule; turn 4's chained command asks.
    wait_until_blocking(Duration::from_secs(60), "the chained call asks", || {
        let v = baton(&server, &["status", run, "--json"])?.json()?;
        Ok((v["state"] == "AWAITING_APPROVAL" && v["turn"] == 4).then_some(()))
    })
    .unwrap();
    assert_eq!(baton(&server, &["deny", run, "--all"]).unwrap().code, 0);
    result(&server, run, 0);

    let conn = Connection::connect(
        ConnectionOptions::new(server.url().parse::<temporalio_client::Url>().unwrap()).build(),
    )
    .await
    .unwrap();
    let client = Client::new(conn, ClientOptions::new("default").build()).unwrap();
    let json = client
        .get_workflow_handle::<AgentRun>(run)
        .fetch_history(WorkflowFetchHistoryOptions::default())
        .to_json()
        .await
        .unwrap();
    std::fs::write(histories_dir().join(RECORD_AS), json).unwrap();
}
