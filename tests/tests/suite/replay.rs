//! Replay: every history committed under `tests/histories/` must replay against the current
//! `AgentRun` code. A change that makes the workflow nondeterministic (a reordered, added or
//! removed command) fails here. Record a new history with
//! `cargo test -p baton-tests --test all -- --ignored record_approval_history` (or
//! `record_budget_history`, `record_mcp_history`, `record_subagent_history`,
//! `record_fork_history`, `record_conversation_history`). Every patch marker of the workflow's
//! registry (`baton_workflows::workflow::patches`) must be recorded by one of these histories
//! while it is active, and be gone from the workflow's code once retired. Histories from
//! before the 0.1.0 baseline, which folded the first eleven markers, are kept in
//! `tests/histories/retired/` and no longer replay.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    time::Duration,
};

use base64::Engine as _;
use baton_tests::*;
use baton_workflows::{
    AgentRun,
    workflow::patches::{PATCH_MARKER_NAME, REGISTRY, Stage},
};
use common::*;
use serde_json::{Value, json};
use temporalio_client::{
    Client, ClientOptions, Connection, ConnectionOptions, WorkflowExecutionInfo,
    WorkflowFetchHistoryOptions, WorkflowHandle, WorkflowHistory,
};
use temporalio_sdk::workflow_replayer::{WorkflowReplayer, WorkflowReplayerOptions};

/// File the recorder writes; older recordings stay and must keep replaying.
const RECORD_AS: &str = "approval-run.json";
/// Prefix of the files `record_budget_history` writes (`<prefix>-segment-<n>.json`).
const RECORD_BUDGET_AS: &str = "budget-run";
/// Prefix of the files `record_mcp_history` writes (`<prefix>-segment-<n>.json`).
const RECORD_MCP_AS: &str = "mcp-run";
/// File `record_fork_history` writes: the history of a forked run.
const RECORD_FORK_AS: &str = "fork-run.json";

/// File `record_conversation_history` writes: a conversation of two tasks.
const RECORD_CONVERSATION_AS: &str = "conversation-run.json";

/// Prefix of the files `record_subagent_history` writes (`<prefix>-{parent,child}.json`).
const RECORD_SUBAGENT_AS: &str = "subagent-run";

/// Histories replayed against the current code.
fn histories_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("histories")
}

/// Histories of retired patch markers: kept as the record, no longer replayed.
fn retired_dir() -> PathBuf {
    histories_dir().join("retired")
}

/// The `.json` files directly in `dir`, sorted (none if `dir` does not exist).
fn history_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

/// The patch ids a history records: its `MarkerRecorded` events with the core patch marker
/// name, whose details hold `{"id": .., "deprecated": ..}` as a JSON payload.
fn patch_markers(history: &Value) -> BTreeSet<String> {
    let events = history["events"]
        .as_array()
        .unwrap_or_else(|| panic!("not a history saved with fetch_history().to_json()"));
    events
        .iter()
        .filter_map(|e| e["attributes"].get("MarkerRecordedEventAttributes"))
        .filter(|m| m["marker_name"] == PATCH_MARKER_NAME)
        .flat_map(|m| {
            let details = m["details"].as_object().cloned().unwrap_or_default();
            details.into_values().flat_map(|d| {
                let payloads = d["payloads"].as_array().cloned().unwrap_or_default();
                payloads.into_iter().filter_map(|p| {
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(p["data"].as_str()?)
                        .ok()?;
                    let data: Value = serde_json::from_slice(&bytes).ok()?;
                    data["id"].as_str().map(str::to_owned)
                })
            })
        })
        .collect()
}

/// File name -> patch ids recorded, for every history in `dir`.
fn markers_by_file(dir: &Path) -> BTreeMap<String, BTreeSet<String>> {
    history_files(dir)
        .iter()
        .map(|f| {
            let history: Value = serde_json::from_slice(&std::fs::read(f).unwrap())
                .unwrap_or_else(|e| panic!("{} is not JSON: {e}", f.display()));
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            (name, patch_markers(&history))
        })
        .collect()
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
    let files = history_files(&histories_dir());
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

/// Each registered patch marker is recorded by a committed history (the new path replays), and
/// the histories the registry names record it. Markers in use (active or deprecated) count only
/// in the replayed histories; a retired marker's histories are in `retired/`. An active marker
/// that every replayed history records has an old path no history takes: it is due for
/// retirement.
#[test]
fn every_patch_marker_is_covered_by_a_recorded_history() {
    let replayed = markers_by_file(&histories_dir());
    let retired = markers_by_file(&retired_dir());
    let mut problems = Vec::new();
    for patch in REGISTRY {
        if patch.stage == Stage::Active && replayed.values().all(|m| m.contains(patch.id)) {
            problems.push(format!(
                "every replayed history records patch marker {}, so no supported history takes \
                 its old path: deprecate it (workflows/src/workflow/patches.rs) and delete that \
                 path",
                patch.id
            ));
        }
        let (files, dir) = match patch.stage {
            Stage::Active | Stage::Deprecated => (&replayed, "tests/histories"),
            Stage::Retired => (&retired, "tests/histories/retired"),
        };
        if !files.values().any(|markers| markers.contains(patch.id)) {
            problems.push(format!(
                "patch marker {} ({}) is recorded by no history in {dir}: record one that takes \
                 its new path (AGENTS.md \"Record a new replay history\")",
                patch.id, patch.changed
            ));
        }
        for named in patch.covered_by {
            if !files.get(*named).is_some_and(|m| m.contains(patch.id)) {
                problems.push(format!(
                    "the patch registry says {dir}/{named} covers {}, but it does not record it",
                    patch.id
                ));
            }
        }
    }
    for (file, markers) in &replayed {
        for id in markers {
            if !REGISTRY.iter().any(|p| p.id == id) {
                problems.push(format!(
                    "tests/histories/{file} records patch marker {id}, which the registry \
                     (workflows/src/workflow/patches.rs) does not list"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A retired marker's old path is gone with it: its id is nowhere in the workflow's code but
/// the registry, and the workflow checks no marker the registry does not list as in use.
#[test]
fn retired_markers_are_gone_from_the_workflow_code() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut sources = Vec::new();
    for dir in ["workflows/src", "core/src"] {
        rust_files(&root.join(dir), &mut sources);
    }
    let mut problems = Vec::new();
    for file in &sources {
        if file.ends_with("workflow/patches.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        for patch in REGISTRY.iter().filter(|p| p.stage == Stage::Retired) {
            if text.contains(&format!("\"{}\"", patch.id)) {
                problems.push(format!(
                    "{} still names retired marker {}",
                    file.display(),
                    patch.id
                ));
            }
        }
        let checks = text.matches(".patched(").count() + text.matches(".deprecate_patch(").count();
        let in_use = REGISTRY
            .iter()
            .filter(|p| p.stage != Stage::Retired)
            .count();
        if checks > 0 && in_use == 0 {
            problems.push(format!(
                "{} checks a patch marker, but the registry lists none in use",
                file.display()
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The oldest retired history was recorded before any marker: it took every old path, and those
/// paths are gone, so it must no longer replay (a replayer that accepted it would mean an old
/// path, or the test, is still there).
#[tokio::test]
async fn a_history_from_before_the_baseline_no_longer_replays() {
    let file = retired_dir().join("approval-run.json");
    let bytes = std::fs::read(&file).unwrap();
    let history: Value = serde_json::from_slice(&bytes).unwrap();
    assert!(
        patch_markers(&history).is_empty(),
        "{} records patch markers: it is not the pre-marker history",
        file.display()
    );
    let history = WorkflowHistory::from_json(&bytes).unwrap();
    let err = replayer()
        .replay_workflow(history)
        .await
        .expect_err("a history that took the retired markers' old paths still replays");
    assert!(
        err.to_string().to_lowercase().contains("nondetermin"),
        "replay failed, but not for nondeterminism: {err}"
    );
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

/// Records `tests/histories/<RECORD_AS>`: a run from an uploaded directory with a batch of two shell calls, one
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
    // Since v9 the run starts from an uploaded directory (prepare_workspace) and ends by
    // collecting its change set (collect_changes).
    let source = dir.path().join("source");
    std::fs::create_dir_all(&source).unwrap();
    std::fs::write(source.join("README.md"), "recorded\n").unwrap();
    let source = source.display().to_string();
    let run = "approval-run";
    submit(
        &server,
        &queue,
        run,
        &["--script", &s, "--workspace-from", &source],
        "record a history",
    );
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

    let json = fetch_history(&server, run, None).await;
    std::fs::write(histories_dir().join(RECORD_AS), json).unwrap();
}

/// Records `tests/histories/<RECORD_BUDGET_AS>-segment-{1,2}.json`: a run whose first turn asks
/// for a batch of three mutating calls (run one at a time, snapshots chained), which continues
/// as new after two turns (its segment's turn budget) and answers in its second segment.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "records a history; run by hand after an intended workflow change"]
async fn record_budget_history() {
    let server = DevServer::start().unwrap();
    let queue = unique("record");
    let _w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let s = script(
        dir.path(),
        "budget",
        json!([
            {"text": "Three changes.", "tool_calls": [
                {"name": "write_file", "arguments": {"path": "a.txt", "content": "one\n"}},
                {"name": "write_file", "arguments": {"path": "b.txt", "content": "two\n"}},
                {"name": "shell", "arguments": {"command": "cat a.txt b.txt > both.txt"}}
            ]},
            {"text": "Checking.", "tool_calls": [
                {"name": "read_file", "arguments": {"path": "both.txt"}}
            ]},
            {"text": "Done."}
        ]),
    )
    .display()
    .to_string();
    let run = "budget-run";
    submit(
        &server,
        &queue,
        run,
        &["--script", &s, "--no-approval", "--segment-turns", "2"],
        "record a continued history",
    );
    let answer = result(&server, run, 0);
    assert_eq!(answer["answer"], "Done.", "{answer}");

    let second = fetch_history(&server, run, None).await;
    let started = &serde_json::from_slice::<Value>(&second).unwrap()["events"][0]["attributes"]["WorkflowExecutionStartedEventAttributes"];
    let first_run = started["continued_execution_run_id"].as_str().unwrap();
    assert!(!first_run.is_empty(), "the last segment continues another");
    let first = fetch_history(&server, run, Some(first_run)).await;
    // The baseline checks no marker: continuing as new and chaining the mutating calls' snapshots
    // are unconditional.
    let markers = patch_markers(&serde_json::from_slice(&first).unwrap());
    assert!(markers.is_empty(), "segment 1 records markers: {markers:?}");
    for (n, json) in [(1, first), (2, second)] {
        let file = format!("{RECORD_BUDGET_AS}-segment-{n}.json");
        std::fs::write(histories_dir().join(file), json).unwrap();
    }
}

/// Records `tests/histories/<RECORD_MCP_AS>-segment-{1,2}.json`: a run with two
/// MCP servers, server-filesystem over stdio and server-everything over HTTP: both listed once
/// before the first turn, a read-only call and an echo without approval, a mutating call
/// approved, then (after continue-as-new, which carries the listed tools) an image call and
/// the answer. The second segment lists nothing.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "records a history; run by hand after an intended workflow change"]
async fn record_mcp_history() {
    let server = DevServer::start().unwrap();
    let queue = unique("record");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let data = data.canonicalize().unwrap();
    std::fs::write(data.join("notes.txt"), "recorded notes\n").unwrap();
    let everything = EverythingServer::start().unwrap();
    let config = worker_config(
        dir.path(),
        &[
            fs_server_toml("fs", &data, &dir.path().join("fs.log")).unwrap(),
            http_server_toml("everything", &everything.url()),
        ],
        "",
    )
    .unwrap();
    let config = config.display().to_string();
    let _w = worker(&server, &queue, &[("BATON_CONFIG", &config)]);
    let notes = data.join("notes.txt").display().to_string();
    let out = data.join("out.txt").display().to_string();
    let s = script(
        dir.path(),
        "mcp",
        json!([
            {"text": "Reading.", "tool_calls": [
                {"name": "mcp__fs__read_text_file", "arguments": {"path": notes}},
                {"name": "mcp__everything__echo", "arguments": {"message": "recorded"}}
            ]},
            {"text": "Writing.", "tool_calls": [
                {"name": "mcp__fs__write_file", "arguments": {"path": out, "content": "out\n"}}
            ]},
            {"text": "A picture.", "tool_calls": [
                {"name": "mcp__everything__get-tiny-image", "arguments": {}}
            ]},
            {"text": "Done."}
        ]),
    )
    .display()
    .to_string();
    let run = "mcp-run";
    submit(
        &server,
        &queue,
        run,
        &[
            "--script",
            &s,
            "--mcp",
            "fs",
            "--mcp",
            "everything:echo,get-tiny-image",
            "--segment-turns",
            "2",
        ],
        "record an MCP history",
    );
    wait_state(&server, run, "AWAITING_APPROVAL", Duration::from_secs(60));
    assert_eq!(baton(&server, &["approve", run, "--all"]).unwrap().code, 0);
    let answer = result(&server, run, 0);
    assert_eq!(answer["answer"], "Done.", "{answer}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "out\n");
    assert_eq!(everything.counts().lists, 1, "listed once in the whole run");

    let second = fetch_history(&server, run, None).await;
    let started = &serde_json::from_slice::<Value>(&second).unwrap()["events"][0]["attributes"]["WorkflowExecutionStartedEventAttributes"];
    let first_run = started["continued_execution_run_id"].as_str().unwrap();
    assert!(!first_run.is_empty(), "the last segment continues another");
    let first = fetch_history(&server, run, Some(first_run)).await;
    let listings = |json: &[u8]| {
        String::from_utf8_lossy(json)
            .matches("\"mcp_list_tools\"")
            .count()
    };
    assert!(listings(&first) >= 2, "segment 1 lists both servers");
    assert_eq!(listings(&second), 0, "segment 2 lists nothing");
    for (n, json) in [(1, first), (2, second)] {
        let file = format!("{RECORD_MCP_AS}-segment-{n}.json");
        std::fs::write(histories_dir().join(file), json).unwrap();
    }
}

/// Records `tests/histories/<RECORD_SUBAGENT_AS>-{parent,child}.json`: a parent
/// whose first turn spawns two subagents (child workflows) that each write a file; the second
/// child's change set lands through `merge_changes` (the first one's took the tree as it was),
/// then the parent answers. The child's history is recorded too (a run with a parent).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "records a history; run by hand after an intended workflow change"]
async fn record_subagent_history() {
    use super::subagents::{calls, scripted, spawn, write};
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    let scripts = scripted(&llm);
    let queue = unique("record");
    let base = llm.base_url();
    let _w = worker(&server, &queue, &[("OPENAI_BASE_URL", base.as_str())]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README"), "recorded\n").unwrap();
    let parent = RECORD_SUBAGENT_AS;
    let (a, b) = (format!("{parent}.sub-1"), format!("{parent}.sub-2"));
    {
        let mut scripts = scripts.lock().unwrap();
        scripts.insert(
            parent.to_owned(),
            vec![
                calls(&[
                    spawn("call_a", "write a.txt"),
                    spawn("call_b", "write b.txt"),
                ]),
                MockOpenAi::text_reply("Both written."),
            ],
        );
        scripts.insert(
            a.clone(),
            vec![
                write("call_wa", "a.txt", "a\n"),
                MockOpenAi::text_reply("a done"),
            ],
        );
        scripts.insert(
            b.clone(),
            vec![
                write("call_wb", "b.txt", "b\n"),
                MockOpenAi::text_reply("b done"),
            ],
        );
    }
    let workspace = dir.path().display().to_string();
    submit(
        &server,
        &queue,
        parent,
        &[
            "--provider",
            "openai",
            "--subagents",
            "--no-approval",
            "--workspace-from",
            &workspace,
        ],
        "record a subagent history",
    );
    let r = ended(&server, parent, 0);
    assert_eq!(r.changes.as_ref().unwrap().files_changed, 2, "{r:?}");
    let parent_json = fetch_history(&server, parent, None).await;
    let text = String::from_utf8_lossy(&parent_json);
    assert_eq!(
        text.matches("StartChildWorkflowExecutionInitiated").count(),
        2
    );
    assert!(
        text.contains("merge_changes"),
        "the second child's changes were merged"
    );
    let child_json = fetch_history(&server, &b, None).await;
    for (name, json) in [("parent", parent_json), ("child", child_json)] {
        let file = format!("{RECORD_SUBAGENT_AS}-{name}.json");
        std::fs::write(histories_dir().join(file), json).unwrap();
    }
}

/// Records `tests/histories/<RECORD_FORK_AS>`: `baton fork` at turn 9 of a run of
/// ten turns that each write a file, with instructions. The fork's input holds the older turns
/// as stubs under a stored head; it prepares its workspace from the snapshot of turn 9, writes
/// the tenth file, answers and collects its change set.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "records a history; run by hand after an intended workflow change"]
async fn record_fork_history() {
    let server = DevServer::start().unwrap();
    let queue = unique("record");
    let _w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let mut turns: Vec<Value> = (1..=10)
        .map(|k| {
            json!({"text": format!("File {k}."), "tool_calls": [{"name": "write_file",
                "arguments": {"path": format!("f{k}"), "content": format!("{k}\n")}}]})
        })
        .collect();
    turns.push(json!({"text": "Done."}));
    let s = script(dir.path(), "fork", Value::Array(turns))
        .display()
        .to_string();
    let source = "fork-source";
    submit(
        &server,
        &queue,
        source,
        &["--script", &s, "--no-approval"],
        "write ten files",
    );
    assert_eq!(result(&server, source, 0)["turns"], 11);
    let run = "fork-run";
    let out = baton(
        &server,
        &[
            "fork",
            source,
            "--at-turn",
            "9",
            "--id",
            run,
            "--instructions",
            "Write the last file.",
            "--wait",
            "--json",
        ],
    )
    .unwrap();
    assert_eq!(out.code, 0, "{out}");
    let answer = out.json().unwrap();
    assert_eq!(
        (answer["answer"].as_str(), answer["turns"].as_u64()),
        (Some("Done."), Some(11))
    );
    std::fs::write(
        histories_dir().join(RECORD_FORK_AS),
        fetch_history(&server, run, None).await,
    )
    .unwrap();
}

/// Records `tests/histories/<RECORD_CONVERSATION_AS>`: `baton send --start` makes
/// a conversation whose first task writes a file and answers; it waits idle, a second message
/// (and the first one again, a duplicate) makes task 2, which writes another file; then no
/// message comes for its idle timeout and it ends with task 2's answer.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "records a history; run by hand after an intended workflow change"]
async fn record_conversation_history() {
    let server = DevServer::start().unwrap();
    let queue = unique("record");
    let _w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let write = |path: &str| {
        json!({"text": "Writing.", "tool_calls": [{"name": "write_file",
            "arguments": {"path": path, "content": "x\n"}}]})
    };
    let s = script(
        dir.path(),
        "conversation",
        json!([write("a.txt"), {"text": "Task one."}, write("b.txt"), {"text": "Task two."}]),
    )
    .display()
    .to_string();
    let run = "conversation-run";
    let send = |args: &[&str]| {
        let out = baton(&server, args).unwrap();
        assert_eq!(out.code, 0, "{out}");
        out.json().unwrap()
    };
    let first = send(&[
        "send",
        "--start",
        "--id",
        run,
        "--idle-timeout",
        "3s",
        "--message-id",
        "m1",
        "--wait",
        "--json",
        "first task",
        "--",
        "--task-queue",
        &queue,
        "--script",
        &s,
        "--no-approval",
    ]);
    assert_eq!(first["answer"], "Task one.");
    let again = send(&["send", run, "first task", "--message-id", "m1", "--json"]);
    assert_eq!(again["duplicate"], true);
    let second = send(&[
        "send",
        run,
        "second task",
        "--message-id",
        "m2",
        "--wait",
        "--json",
    ]);
    assert_eq!(second["answer"], "Task two.");
    assert_eq!(result(&server, run, 0)["answer"], "Task two.");
    std::fs::write(
        histories_dir().join(RECORD_CONVERSATION_AS),
        fetch_history(&server, run, None).await,
    )
    .unwrap();
}

/// The recorded fork replays, and it is a fork: its input holds stubs under a stored head.
#[tokio::test]
async fn the_recorded_fork_replays_from_its_fork_source() {
    let bytes = std::fs::read(histories_dir().join(RECORD_FORK_AS)).unwrap();
    let history: Value = serde_json::from_slice(&bytes).unwrap();
    let data = history["events"][0]["attributes"]["WorkflowExecutionStartedEventAttributes"]
        ["input"]["payloads"][0]["data"]
        .as_str()
        .unwrap();
    let input: Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap(),
    )
    .unwrap();
    let fork = &input["fork"];
    assert_eq!(
        (fork["run_id"].as_str(), fork["at_turn"].as_u64()),
        (Some("fork-source"), Some(9))
    );
    assert!(!fork["conversation"]["head"].as_str().unwrap().is_empty());
    let stubs = fork["held"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i.get("stub").is_some())
        .count();
    assert!(stubs > 0, "{fork}");
    replayer()
        .replay_workflow(WorkflowHistory::from_json(&bytes).unwrap())
        .await
        .unwrap();
}

/// The history of run `run_id` of workflow `id` (`None`: its latest run), as the SDK's replayer
/// reads it.
async fn fetch_history(server: &DevServer, id: &str, run_id: Option<&str>) -> Vec<u8> {
    let conn = Connection::connect(
        ConnectionOptions::new(server.url().parse::<temporalio_client::Url>().unwrap()).build(),
    )
    .await
    .unwrap();
    let client = Client::new(conn, ClientOptions::new("default").build()).unwrap();
    let info = WorkflowExecutionInfo::builder()
        .namespace("default")
        .workflow_id(id)
        .maybe_run_id(run_id.map(str::to_owned))
        .build();
    WorkflowHandle::<_, AgentRun>::new(client, info)
        .fetch_history(WorkflowFetchHistoryOptions::default())
        .to_json()
        .await
        .unwrap()
}
