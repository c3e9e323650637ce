//! Workspace hand-off between workers: snapshots in the blob store follow a run to
//! whichever worker takes it, and a chaos test kills workers at random while 20 runs write
//! files.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::{
    collections::BTreeMap,
    path::Path,
    time::{Duration, Instant},
};

use baton_store::{BlobId, LocalStore, snapshot};
use baton_tests::*;
use common::*;
use serde_json::{Value, json};

/// The files of a directory tree (not `.baton`), path -> content.
fn files_of(root: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            if rel == ".baton" {
                continue;
            }
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                out.insert(rel, std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// The run's last workspace snapshot, restored into a fresh directory: the workspace as the
/// run left it, wherever that was.
fn final_workspace(server: &DevServer, run: &str) -> BTreeMap<String, String> {
    let out = baton(server, &["transcript", run, "--json"]).unwrap();
    assert_eq!(out.code, 0, "{out}");
    let items = out.json().unwrap()["items"].as_array().unwrap().clone();
    let snapshot_id = items
        .iter()
        .rev()
        .find_map(|i| {
            i["tool_result"]["snapshot"]
                .as_str()
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| panic!("run {run} recorded no snapshot"))
        .to_owned();
    let dir = tempfile::tempdir().unwrap();
    let store = LocalStore::new(server.blob_dir()).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(snapshot::restore(
        &store,
        dir.path(),
        &BlobId::parse(&snapshot_id).unwrap(),
    ))
    .unwrap();
    files_of(dir.path())
}

#[test]
fn a_run_moves_to_a_worker_with_another_workspace_root_and_finds_its_files() {
    let server = DevServer::start().unwrap();
    let queue = unique("handoff");
    let dir = tempfile::tempdir().unwrap();
    let script = script(
        dir.path(),
        "handoff",
        json!([
            {"text": "write", "tool_calls": [{"name": "write_file", "arguments": json!({"path": "src/a.txt", "content": "alpha\n"}).to_string()}]},
            {"text": "more", "tool_calls": [{"name": "write_file", "arguments": json!({"path": "b.txt", "content": "beta\n"}).to_string()}]},
            {"text": "check", "tool_calls": [{"name": "shell", "arguments": json!({"command": "cat src/a.txt b.txt && pwd"}).to_string()}]},
            {"text": "done"}
        ]),
    );
    let root_a = tempfile::tempdir().unwrap();
    let root_b = tempfile::tempdir().unwrap();
    let mut a = Worker::spawn_with_workspace(&server, &queue, root_a.path(), &[]).unwrap();
    a.wait_ready_blocking(Duration::from_secs(30)).unwrap();
    let run = unique("run-handoff");
    // The shell call waits for a human: the files are written on A by then.
    submit(
        &server,
        &queue,
        &run,
        &["--script", script.to_str().unwrap()],
        "write then check",
    );
    let status = wait_status(&server, &run, "AWAITING_APPROVAL", Duration::from_secs(60));
    let call = status.status.pending[0].call_id.to_string();
    assert!(root_a.path().join(&run).join("src/a.txt").exists());
    a.kill9();
    let mut b = Worker::spawn_with_workspace(&server, &queue, root_b.path(), &[]).unwrap();
    b.wait_ready_blocking(Duration::from_secs(30)).unwrap();
    let out = baton(&server, &["approve", &run, &call]).unwrap();
    assert_eq!(out.code, 0, "{out}");
    result(&server, &run, 0);
    // The shell call ran on B, in B's root, and saw what A wrote.
    let text = history_text(&server, &run);
    let ws_b = root_b.path().join(&run);
    assert!(text.contains("alpha\\nbeta\\n"), "the tool saw A's files");
    assert!(text.contains(&ws_b.canonicalize().unwrap().display().to_string()));
    assert_eq!(
        std::fs::read_to_string(ws_b.join("src/a.txt")).unwrap(),
        "alpha\n"
    );
    assert!(b.log().contains("workspace restored"), "{}", b.log());

    // The run's first snapshot came with its instructions, so every write carried its base
    // snapshot in its input: a retry needs nothing from the attempt's heartbeats.
    let activities = completed_activities(&server.workflow_history_json(&run, None).unwrap());
    let initial = activities
        .iter()
        .find(|a| a.name == "read_instructions")
        .map(|a| a.result["snapshot"].as_str().unwrap().to_owned())
        .unwrap();
    assert_eq!(initial.len(), 64, "a snapshot id: {initial:?}");
    let bases: Vec<&str> = activities
        .iter()
        .filter(|a| a.name == "run_tool")
        .map(|a| a.input["snapshot"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(bases.len(), 3, "{activities:?}");
    assert_eq!(bases[0], initial);
    assert!(bases.iter().all(|b| b.len() == 64), "{bases:?}");
    assert!(bases[1] != initial, "the first write changed the workspace");
}

/// What a run of the chaos script leaves in its workspace when nothing fails.
fn expected_files(run: usize, steps: usize) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    let log: String = (0..steps).map(|i| format!("r{run} step {i}\n")).collect();
    files.insert("log.txt".to_owned(), log);
    files.insert("last.txt".to_owned(), format!("{}", steps - 1));
    for k in 0..3 {
        let lines: String = (0..steps)
            .filter(|i| i % 3 == k)
            .map(|i| format!("{i}\n"))
            .collect();
        files.insert(format!("d{k}/f.txt"), lines);
    }
    files
}

#[test]
fn chaos_twenty_runs_survive_random_kill_9_of_their_workers() {
    const RUNS: usize = 20;
    const STEPS: usize = 24;
    const WORKERS: usize = 3;
    const MIN_CHAOS: Duration = Duration::from_secs(120);
    let server = DevServer::start().unwrap();
    let queue = unique("chaos");
    let dir = tempfile::tempdir().unwrap();
    let roots = tempfile::tempdir().unwrap();
    let mut incarnation = 0;
    let spawn = |incarnation: &mut usize| {
        *incarnation += 1;
        // A restarted worker is a new pod: a fresh, empty workspace root.
        let root = roots.path().join(format!("w{incarnation}"));
        std::fs::create_dir_all(&root).unwrap();
        let mut w = Worker::spawn_with_workspace(&server, &queue, &root, &[]).unwrap();
        w.wait_ready_blocking(Duration::from_secs(30)).unwrap();
        w
    };
    let mut workers: Vec<Worker> = (0..WORKERS).map(|_| spawn(&mut incarnation)).collect();
    let mut runs = Vec::new();
    for r in 0..RUNS {
        let mut turns: Vec<Value> = (0..STEPS)
            .map(|i| {
                let command = format!(
                    "echo 'r{r} step {i}' >> log.txt; printf '%s' {i} > last.txt; \
                     mkdir -p d{k}; echo {i} >> d{k}/f.txt; sleep 1.5; echo done {i}",
                    k = i % 3
                );
                json!({"text": format!("step {i}"),
                       "tool_calls": [{"name": "shell", "arguments": json!({"command": command}).to_string()}]})
            })
            .collect();
        turns.push(json!({"text": format!("run {r} done")}));
        let script = script(dir.path(), &format!("chaos{r}"), json!(turns));
        let run = unique(&format!("chaos-{r}"));
        submit(
            &server,
            &queue,
            &run,
            &[
                "--script",
                script.to_str().unwrap(),
                "--no-approval",
                "--max-turns",
                "100",
            ],
            "write files step by step",
        );
        runs.push(run);
    }
    // The killer: every few seconds a random worker dies (SIGKILL) and a new one starts.
    let started = Instant::now();
    let mut seed: u64 = 0x5eed_1234_abcd_0001;
    let mut kills = 0;
    let mut last_done = None;
    let mut last_kill = started;
    let done = |server: &DevServer, run: &str| {
        server
            .workflow_status(run)
            .map(|s| s != "WORKFLOW_EXECUTION_STATUS_RUNNING")
            .unwrap_or(false)
    };
    loop {
        let all_done = runs.iter().all(|r| done(&server, r));
        if all_done && started.elapsed() >= MIN_CHAOS {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "runs did not finish in 10 minutes"
        );
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let pause = Duration::from_millis(3_000 + (seed >> 33) % 3_000);
        // The point of the test: the next kill comes at a random moment, 3-6 s after the last
        // one (counted from that kill, so a slow worker start on a loaded machine does not
        // thin out the kills), whatever the runs are doing.
        std::thread::sleep((last_kill + pause).saturating_duration_since(Instant::now()));
        if all_done && last_done.is_none() {
            last_done = Some(started.elapsed());
        }
        // The killer keeps going for the whole chaos period.
        let victim = ((seed >> 17) % WORKERS as u64) as usize;
        workers[victim].kill9();
        last_kill = Instant::now();
        kills += 1;
        workers[victim] = spawn(&mut incarnation);
    }
    let elapsed = started.elapsed();
    // Every run completed, with exactly the files a run without faults leaves.
    let mut retried = 0;
    for (r, run) in runs.iter().enumerate() {
        let result = result(&server, run, 0);
        assert_eq!(result["answer"], format!("run {r} done"), "{result}");
        let history = server.workflow_history_json(run, None).unwrap();
        let workspace = final_workspace(&server, run);
        if workspace != expected_files(r, STEPS) {
            // Say which step went wrong and how: its tool activity's attempts and failures.
            let activities: Vec<String> = history["events"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| {
                    let t = e["eventType"].as_str().unwrap_or_default();
                    t.contains("ACTIVITY_TASK") && !t.ends_with("SCHEDULED")
                })
                .map(|e| e.to_string().chars().take(600).collect())
                .collect();
            panic!(
                "workspace of run {r}: {workspace:?}\nexpected {:?}\nits activity events:\n{}",
                expected_files(r, STEPS),
                activities.join("\n")
            );
        }
        retried += history["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| {
                e["activityTaskStartedEventAttributes"]["attempt"]
                    .as_u64()
                    .unwrap_or(1)
                    > 1
            })
            .count();
    }
    println!(
        "chaos: {RUNS} runs x {STEPS} tool calls, {kills} kills over {elapsed:?} (all runs \
         done after {:?}), {retried} activity attempts retried; every workspace matches the \
         no-fault result",
        last_done.unwrap_or(elapsed)
    );
    assert!(kills >= 15, "the killer ran: {kills}");
}
