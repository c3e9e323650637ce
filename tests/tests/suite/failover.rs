//! Durability end to end: a worker killed mid-tool, and a cancelled run whose tool has
//! background children. They share the test process with the other suites (`--test-threads`),
//! so they wait for the tool's processes to run before cutting them off, not a fixed time, and
//! the kill -9 test holds back other tests' worker start-ups (`pause_worker_starts`) until its
//! retry has killed the dead worker's processes: a starting worker would sweep them first.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::{Duration, Instant};

use baton_tests::*;
use common::*;
use serde_json::json;

use baton_workflows::workflow::TOOL_HEARTBEAT;

/// How often a tool call heartbeats (`baton_activities::tools::HEARTBEAT_EVERY`).
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);

fn marker() -> String {
    // A fractional sleep duration unique to this test, so pgrep finds only our processes.
    let n = unique("m");
    let digits: String = n.chars().filter(|c| c.is_ascii_digit()).take(6).collect();
    format!("0{digits}")
}

fn kill_leftovers(pattern: &str) {
    for pid in pids_matching(pattern) {
        let _ = send_signal(pid, Signal::SIGKILL);
    }
}

/// Which of `workers` started the run's shell call (waiting up to 30 s), and the log line
/// that shows it.
fn worker_running_the_tool(workers: &[Worker], run: &str) -> (usize, String) {
    let needle = format!("tool started run_id=\"{run}\" tool=shell");
    let victim = wait_until_blocking(
        Duration::from_secs(30),
        "a worker to start the tool",
        || Ok(workers.iter().position(|w| w.log().contains(&needle))),
    )
    .unwrap();
    (victim, needle)
}

/// The first file named `name` under `dir`.
fn find_file(dir: &std::path::Path, name: &str) -> Option<std::path::PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if entry.file_name() == name {
            return Some(path);
        }
        if path.is_dir()
            && let Some(found) = find_file(&path, name)
        {
            return Some(found);
        }
    }
    None
}

#[test]
fn a_run_survives_kill_9_of_the_worker_running_its_tool() {
    const SLEEP: u64 = 20;
    let server = DevServer::start().unwrap();
    let queue = unique("failover");
    // Two interchangeable workers sharing one workspace root (the shared-volume deployment).
    let workspace = tempfile::tempdir().unwrap();
    let mut workers = fleet(&server, &queue, 2, workspace.path(), &[]);
    let dir = tempfile::tempdir().unwrap();
    let m = marker();
    let sleep_arg = format!("{SLEEP}.{m}");
    // A background job that outlives `sh`: without baton killing it, the first attempt's copy
    // would write after the retry restored the workspace (14 s > the 4 s heartbeat timeout
    // after which the retry starts), and late.txt would have two lines.
    let late_arg = format!("14.{m}");
    let command = format!(
        "(sleep {late_arg}; echo late-{m} >> late.txt) & sleep {sleep_arg} && echo slept-{m} >> done.txt && echo finished-{m}"
    );
    let s = script(
        dir.path(),
        "failover",
        json!([
            {"text": "Long tool.", "tool_calls": [{"name": "shell", "arguments": {"command": command}}]},
            {"text": "Survived."}
        ]),
    )
    .display()
    .to_string();

    let started = Instant::now();
    let run = submit(
        &server,
        &queue,
        &unique("run-failover"),
        &["--script", &s, "--no-approval"],
        "sleep",
    );
    let (victim, needle) = worker_running_the_tool(&workers, &run);
    // Once the command and its background job run, kill their worker outright.
    wait_until_blocking(
        Duration::from_secs(30),
        "the tool and its background job",
        || {
            Ok(
                (!pids_matching(&sleep_arg).is_empty() && !pids_matching(&late_arg).is_empty())
                    .then_some(()),
            )
        },
    )
    .unwrap();
    // Until the survivor's retry killed them, no other test's worker may start: it would
    // sweep the dead worker's processes first (`pause_worker_starts`).
    let quiet = pause_worker_starts();
    // With a PID namespace per tool process, the call's processes die with their
    // worker; without one, the survivor's retry kills them by their environment markers.
    let own_namespace = workers[victim]
        .log()
        .contains("get a PID and mount namespace of their own");
    workers[victim].kill9();
    let killed_at = started.elapsed();
    if own_namespace {
        wait_until_blocking(
            Duration::from_secs(3),
            "the call's processes to die with their worker",
            || {
                Ok(
                    (pids_matching(&sleep_arg).is_empty() && pids_matching(&late_arg).is_empty())
                        .then_some(()),
                )
            },
        )
        .unwrap();
    } else {
        let _ = wait_until_blocking(
            Duration::from_secs(60),
            "the retry to kill the leftovers",
            || {
                Ok(workers[1 - victim]
                    .log()
                    .contains("killed processes left by an earlier attempt of this call")
                    .then_some(()))
            },
        );
    }
    drop(quiet);

    let r = ended(&server, &run, 0);
    let elapsed = started.elapsed();
    kill_leftovers(&sleep_arg);
    kill_leftovers(&late_arg);
    assert_eq!(r.status, "COMPLETED");
    assert_eq!(r.answer, "Survived.");
    let survivor = &workers[1 - victim];
    assert!(
        own_namespace
            || survivor
                .log()
                .contains("killed processes left by an earlier attempt of this call"),
        "{}",
        survivor.log()
    );
    let late = find_file(workspace.path(), "late.txt").expect("late.txt in the run's workspace");
    assert_eq!(
        std::fs::read_to_string(&late).unwrap(),
        format!("late-{m}\n"),
        "only the retry's background job wrote"
    );
    assert!(
        survivor.log().contains(&needle),
        "the surviving worker retried the tool:\n{}",
        survivor.log()
    );
    let text = history_text(&server, &run);
    assert!(text.contains(&format!("finished-{m}")));
    assert!(
        text.contains("this call ran again (attempt 2) after its worker failed"),
        "the retried side-effecting call is marked for the model"
    );
    let limit = Duration::from_secs(SLEEP) + TOOL_HEARTBEAT + Duration::from_secs(15);
    eprintln!("killed after {killed_at:?}; run finished after {elapsed:?} (limit {limit:?})");
    assert!(elapsed < limit, "took {elapsed:?}, limit {limit:?}");
}

#[test]
fn cancelling_a_run_stops_its_tool_and_all_its_children() {
    let server = DevServer::start().unwrap();
    let queue = unique("cancel");
    let _w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let m = marker();
    let sleep_arg = format!("300.{m}");
    let command = format!("sleep {sleep_arg} & sleep {sleep_arg}");
    let s = script(
        dir.path(),
        "cancel",
        json!([
            {"tool_calls": [{"name": "shell", "arguments": {"command": command}}]},
            {"text": "never reached"}
        ]),
    )
    .display()
    .to_string();
    let run = submit(
        &server,
        &queue,
        &unique("run-cancel"),
        &["--script", &s, "--no-approval"],
        "sleep",
    );
    wait_until_blocking(Duration::from_secs(30), "both sleeps to run", || {
        Ok((pids_matching(&sleep_arg).len() >= 2).then_some(()))
    })
    .unwrap();

    let out = server
        .temporal(&["workflow", "cancel", "--workflow-id", &run])
        .unwrap();
    assert_eq!(out.code, 0, "{out}");
    let r = ended(&server, &run, 4);
    assert_eq!(r.status, "CANCELLED");
    assert_eq!(r.reason, "cancelled");
    let gone = wait_until_blocking(Duration::from_secs(20), "no sleep process left", || {
        Ok(pids_matching(&sleep_arg).is_empty().then_some(()))
    });
    kill_leftovers(&sleep_arg);
    gone.unwrap();
    let status = server.workflow_status(&run).unwrap();
    assert!(status.contains("CANCELED"), "{status}");

    // `baton cancel` on another run works the same way.
    let run2 = submit(
        &server,
        &queue,
        &unique("run-cancel2"),
        &["--script", &s, "--no-approval"],
        "sleep",
    );
    wait_until_blocking(Duration::from_secs(30), "sleeps of the second run", || {
        Ok((pids_matching(&sleep_arg).len() >= 2).then_some(()))
    })
    .unwrap();
    let out = baton(&server, &["cancel", &run2, "--reason", "changed my mind"]).unwrap();
    assert_eq!(out.code, 0, "{out}");
    let r = ended(&server, &run2, 4);
    assert_eq!(r.detail, "cancelled: changed my mind");
    let gone = wait_until_blocking(Duration::from_secs(20), "no sleep process left", || {
        Ok(pids_matching(&sleep_arg).is_empty().then_some(()))
    });
    kill_leftovers(&sleep_arg);
    gone.unwrap();
}

#[test]
fn sigterm_hands_a_running_tool_to_another_worker_after_the_grace_period() {
    let server = DevServer::start().unwrap();
    let queue = unique("sigterm-handoff");
    let workspace = tempfile::tempdir().unwrap();
    let mut workers = fleet(
        &server,
        &queue,
        2,
        workspace.path(),
        &[("BATON_GRACEFUL_SHUTDOWN_SECS", "2")],
    );
    let dir = tempfile::tempdir().unwrap();
    let m = marker();
    let sleep_arg = format!("12.{m}");
    let s = script(
        dir.path(),
        "sigterm",
        json!([
            {"tool_calls": [{"name": "shell", "arguments": {"command": format!("sleep {sleep_arg}; echo rested-{m}")}}]},
            {"text": "Handed over."}
        ]),
    )
    .display()
    .to_string();
    let run = submit(
        &server,
        &queue,
        &unique("run-sigterm"),
        &["--script", &s, "--no-approval"],
        "sleep",
    );
    let (victim, needle) = worker_running_the_tool(&workers, &run);
    let sent = Instant::now();
    let status = workers[victim]
        .terminate_timeout(Duration::from_secs(20))
        .unwrap();
    let exited = sent.elapsed();
    let survivor = 1 - victim;
    wait_until_blocking(
        Duration::from_secs(30),
        "the survivor to start the tool",
        || Ok(workers[survivor].log().contains(&needle).then_some(())),
    )
    .unwrap();
    let handed_over = sent.elapsed();
    let r = ended(&server, &run, 0);
    kill_leftovers(&sleep_arg);
    assert_eq!(r.answer, "Handed over.");
    eprintln!(
        "SIGTERM: worker exited after {exited:?} ({status:?}); tool restarted elsewhere after {handed_over:?}"
    );
    assert!(
        exited < Duration::from_secs(10),
        "graceful shutdown took {exited:?}"
    );
    // Through a heartbeat timeout it would take the grace period, then at least the timeout
    // less one beat (the last beat came at most one beat before the worker exited).
    assert!(
        handed_over < Duration::from_secs(2) + TOOL_HEARTBEAT - HEARTBEAT_EVERY,
        "the tool moved after {handed_over:?}, not faster than a heartbeat timeout"
    );
}

/// A worker that stalls (SIGSTOP here; a frozen VM in life) past the heartbeat timeout looks
/// dead to the server, which retries the call. The stalled worker's open polls take retries
/// too (each times out in turn) until one reaches the other worker. When the stalled worker
/// wakes, its running attempt's next heartbeat is answered "not found": the attempt is
/// cancelled and its process group killed, even a process the retry cannot find by its
/// idempotency key (it cleared its environment); and the retries its polls took, timed out
/// already, are not run.
#[test]
fn a_stalled_workers_call_is_retried_elsewhere_and_its_attempt_stops_when_it_wakes() {
    let server = DevServer::start().unwrap();
    let queue = unique("stall");
    let workspace = tempfile::tempdir().unwrap();
    let mut workers = fleet(
        &server,
        &queue,
        2,
        workspace.path(),
        &[("BATON_ALLOW_SANDBOX_OFF", "true")],
    );
    let dir = tempfile::tempdir().unwrap();
    let marks = dir.path().join("marks");
    let m = marker();
    // Outlives any retry delay (the stalled worker's polls may take a few attempts first).
    let sleep_arg = format!("300.{m}");
    let command = format!(
        "echo \"attempt $BATON_ATTEMPT\" >> '{marks}'; if [ \"$BATON_ATTEMPT\" = 1 ]; then \
         exec env -i sh -c 'sleep {sleep_arg}; echo late >> {marks}'; fi",
        marks = marks.display()
    );
    let s = script(
        dir.path(),
        "stall",
        json!([
            {"tool_calls": [{"name": "shell", "arguments": {"command": command}}]},
            {"text": "Moved on."}
        ]),
    )
    .display()
    .to_string();
    let run = submit(
        &server,
        &queue,
        &unique("run-stall"),
        &["--script", &s, "--no-approval", "--sandbox", "off"],
        "sleep",
    );
    let (victim, _) = worker_running_the_tool(&workers, &run);
    wait_until_blocking(Duration::from_secs(30), "the first attempt's sleep", || {
        Ok((!pids_matching(&sleep_arg).is_empty()).then_some(()))
    })
    .unwrap();
    workers[victim].signal(Signal::SIGSTOP).unwrap();
    let stopped = Instant::now();
    let retried = wait_until_blocking(Duration::from_secs(60), "a retry", || {
        let text = std::fs::read_to_string(&marks).unwrap_or_default();
        Ok((text.lines().count() >= 2).then_some(()))
    });
    let retried_after = stopped.elapsed();
    let r = retried.map(|()| result(&server, &run, 0));
    let still_running = !pids_matching(&sleep_arg).is_empty();
    workers[victim].signal(Signal::SIGCONT).unwrap();
    let woke = Instant::now();
    let gone = wait_until_blocking(
        Duration::from_secs(10),
        "the woken worker to stop its superseded tool",
        || Ok(pids_matching(&sleep_arg).is_empty().then_some(())),
    );
    let stopped_after = woke.elapsed();
    kill_leftovers(&sleep_arg);
    let r = r.unwrap();
    gone.unwrap();
    eprintln!("retried {retried_after:?} after the stall; stopped {stopped_after:?} after waking");
    assert_eq!(r["answer"], "Moved on.");
    assert!(
        still_running,
        "the retry killed the first attempt's sleep: the test needs one it cannot find"
    );
    let log = workers[victim].log();
    assert!(
        log.contains(&format!("tool cancelled run_id=\"{run}\"")),
        "the woken worker cancelled its attempt:\n{log}"
    );
    // Only the first attempt and the one retry that ran elsewhere: the superseded attempt never
    // finished, and no timed-out retry ran on the woken worker.
    let marks = std::fs::read_to_string(&marks).unwrap();
    let lines: Vec<&str> = marks.lines().collect();
    assert_eq!(lines.len(), 2, "{marks}");
    assert_eq!(lines[0], "attempt 1");
    assert!(
        lines[1].starts_with("attempt ") && lines[1] != "attempt 1",
        "{marks}"
    );
}

#[test]
fn with_on_retry_ask_a_cut_off_call_waits_for_a_human_before_it_runs_again() {
    let server = DevServer::start().unwrap();
    let queue = unique("onretry");
    let workspace = tempfile::tempdir().unwrap();
    let mut workers = fleet(&server, &queue, 2, workspace.path(), &[]);
    let dir = tempfile::tempdir().unwrap();
    let m = marker();
    let sleep_arg = format!("20.{m}");
    let command =
        format!("echo deploy-{m} >> deploys.txt && sleep {sleep_arg} && echo finished-{m}");
    let s = script(
        dir.path(),
        "onretry",
        json!([
            {"text": "Deploy.", "tool_calls": [{"name": "shell", "arguments": {"command": command}}]},
            {"text": "Deployed."}
        ]),
    )
    .display()
    .to_string();
    let run = submit(
        &server,
        &queue,
        &unique("run-onretry"),
        &["--script", &s, "--no-approval", "--on-retry", "ask"],
        "deploy once",
    );
    let (victim, _) = worker_running_the_tool(&workers, &run);
    let deploys = workspace.path().join(&run).join("deploys.txt");
    // Once the command deployed and sleeps, cut it off.
    wait_until_blocking(
        Duration::from_secs(30),
        "the deploy to be under way",
        || {
            let deployed = std::fs::read_to_string(&deploys).unwrap_or_default();
            Ok(
                (deployed.lines().count() == 1 && !pids_matching(&sleep_arg).is_empty())
                    .then_some(()),
            )
        },
    )
    .unwrap();
    workers[victim].kill9();
    kill_leftovers(&sleep_arg);
    // The retry on the other worker does not run the command: a human decides.
    let status = wait_status(&server, &run, "AWAITING_APPROVAL", Duration::from_secs(60));
    let call = status.status.pending[0].call_id.to_string();
    assert_eq!(status.status.pending[0].tool, "shell", "{status:?}");
    assert_eq!(
        std::fs::read_to_string(&deploys).unwrap().lines().count(),
        1
    );
    let out = baton(
        &server,
        &["approve", &run, &call, "--reason", "not deployed yet"],
    )
    .unwrap();
    assert_eq!(out.code, 0, "{out}");
    let r = ended(&server, &run, 0);
    kill_leftovers(&sleep_arg);
    assert_eq!(r.answer, "Deployed.", "{r:?}");
    let text = history_text(&server, &run);
    assert!(
        text.contains(&format!("finished-{m}")),
        "it ran again once approved"
    );
    // Snapshots restored the workspace the call started from: one deploy line, not two.
    assert_eq!(
        std::fs::read_to_string(&deploys).unwrap().lines().count(),
        1,
        "the re-run started from the snapshot the cut-off attempt started from"
    );
}
