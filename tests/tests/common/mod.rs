//! Helpers shared by the end-to-end test files.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

pub use baton_cli::json;
use baton_tests::*;
use serde_json::{Value, json};

mod metrics;
pub use metrics::{metrics_worker, scrape, scrape_until, value};

/// Writes a scripted-provider script into `dir` and returns its path.
pub fn script(dir: &Path, name: &str, turns: Value) -> PathBuf {
    let path = dir.join(format!("{name}.json"));
    std::fs::write(
        &path,
        serde_json::to_vec_pretty(&json!({ "turns": turns })).unwrap(),
    )
    .unwrap();
    path
}

/// Submits a run (no wait) and returns its id.
pub fn submit(server: &DevServer, queue: &str, id: &str, extra: &[&str], prompt: &str) -> String {
    let mut args = vec!["submit", "--task-queue", queue, "--id", id];
    args.extend_from_slice(extra);
    args.push(prompt);
    let out = baton(server, &args).unwrap();
    assert_eq!(out.code, 0, "submit failed: {out}");
    assert_eq!(out.stdout.trim(), id, "{out}");
    id.to_owned()
}

/// Polls `baton status RUN --json` until the run is in `state`; returns that status.
pub fn wait_status(
    server: &DevServer,
    run: &str,
    state: &str,
    timeout: Duration,
) -> json::Status<'static> {
    wait_until_blocking(timeout, &format!("run {run} in state {state}"), || {
        let status: json::Status = baton(server, &["status", run, "--json"])?.parse()?;
        Ok((status.status.state == state).then_some(status))
    })
    .unwrap()
}

/// [`wait_status`], as JSON.
pub fn wait_state(server: &DevServer, run: &str, state: &str, timeout: Duration) -> Value {
    serde_json::to_value(wait_status(server, run, state, timeout)).unwrap()
}

/// `baton result RUN --wait --json`, asserting the exit code.
fn result_output(server: &DevServer, run: &str, expect_code: i32) -> CmdOutput {
    let out = baton_with_timeout(
        server,
        &["result", run, "--wait", "--json"],
        &[],
        None,
        Duration::from_secs(120),
    )
    .unwrap();
    assert_eq!(out.code, expect_code, "unexpected exit code: {out}");
    out
}

/// `baton result RUN --wait --json`, asserting the exit code.
pub fn result(server: &DevServer, run: &str, expect_code: i32) -> Value {
    result_output(server, run, expect_code).json().unwrap()
}

/// `baton result RUN --wait --json` as the typed object a program reading it gets, asserting
/// the exit code.
pub fn ended(server: &DevServer, run: &str, expect_code: i32) -> json::Ended<'static> {
    result_output(server, run, expect_code).parse().unwrap()
}

/// `baton status RUN --json`, typed.
pub fn status(server: &DevServer, run: &str) -> json::Status<'static> {
    baton(server, &["status", run, "--json"])
        .unwrap()
        .parse()
        .unwrap()
}

/// The run ids of `baton list ARGS --json`.
pub fn listed(server: &DevServer, args: &[&str]) -> anyhow::Result<Vec<String>> {
    let runs: json::Runs<json::ListedRun> = baton(server, args)?.parse()?;
    Ok(runs
        .runs
        .into_iter()
        .map(|r| r.run_id.into_owned())
        .collect())
}

/// A started worker on `queue`, ready to poll.
pub fn worker(server: &DevServer, queue: &str, env: &[(&str, &str)]) -> Worker {
    let mut w = Worker::spawn(server, queue, env).unwrap();
    w.wait_ready_blocking(Duration::from_secs(30)).unwrap();
    w
}

/// Every text in the run's history, payloads decoded.
pub fn history_text(server: &DevServer, run: &str) -> String {
    let history = server.workflow_history_json(run, None).unwrap();
    decode_history_payloads(&history)
}

/// `n` interchangeable workers on `queue` sharing one workspace root (the shared-volume
/// deployment), all ready to poll.
pub fn fleet(
    server: &DevServer,
    queue: &str,
    n: usize,
    workspace: &Path,
    env: &[(&str, &str)],
) -> Vec<Worker> {
    (0..n)
        .map(|_| {
            let mut w = Worker::spawn_with_workspace(server, queue, workspace, env).unwrap();
            w.wait_ready_blocking(Duration::from_secs(30)).unwrap();
            w
        })
        .collect()
}

/// A script (its path): the turns `before`, then one turn saying `text` with `shell_calls` (a
/// batch that needs approval), then the answer "All done.".
fn shell_script_after(
    dir: &Path,
    name: &str,
    mut before: Vec<Value>,
    text: &str,
    shell_calls: &[&str],
) -> String {
    let calls: Vec<Value> = shell_calls
        .iter()
        .map(|c| json!({"name": "shell", "arguments": {"command": c}}))
        .collect();
    before.push(json!({"text": text, "tool_calls": calls}));
    before.push(json!({"text": "All done."}));
    script(dir, name, Value::Array(before))
        .display()
        .to_string()
}

/// The script of the approval tests: list files, then a shell batch that needs approval, then
/// the answer.
pub fn approval_script(dir: &Path, name: &str, shell_calls: &[&str]) -> String {
    let look =
        json!({"text": "Looking around.", "tool_calls": [{"name": "list_files", "arguments": {}}]});
    shell_script_after(dir, name, vec![look], "Now the shell.", shell_calls)
}

/// A script: one turn with `shell_calls` (a batch that needs approval), then the answer.
pub fn shell_script(dir: &Path, name: &str, text: &str, shell_calls: &[&str]) -> String {
    shell_script_after(dir, name, Vec::new(), text, shell_calls)
}

/// Run ids of every segment of workflow `id`, oldest first.
pub fn segments(server: &DevServer, id: &str) -> Vec<String> {
    let query = format!("WorkflowId = '{id}'");
    let out = server
        .temporal(&["workflow", "list", "--query", &query, "-o", "json"])
        .unwrap()
        .ensure_success()
        .unwrap();
    let mut runs: Vec<(String, String)> = out
        .json()
        .unwrap()
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|r| {
            (
                r["startTime"].as_str().unwrap_or_default().to_owned(),
                r["execution"]["runId"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    runs.sort();
    runs.into_iter().map(|(_, r)| r).collect()
}

/// Every file under `dir`, recursively (none when `dir` does not exist).
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if !dir.exists() {
        return out;
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

/// Whether `needle` occurs in `haystack`.
pub fn contains_bytes(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// How many executions (runs of the workflow id `run`) the server's visibility lists.
pub fn executions(server: &DevServer, run: &str) -> usize {
    let out = server
        .temporal(&[
            "workflow",
            "list",
            "--query",
            &format!("WorkflowId = '{run}'"),
            "--output",
            "json",
        ])
        .unwrap();
    assert_eq!(out.code, 0, "{out}");
    serde_json::from_str::<serde_json::Value>(out.stdout.trim())
        .ok()
        .and_then(|v| v.as_array().map(Vec::len))
        .unwrap_or(0)
}
