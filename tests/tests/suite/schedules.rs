//! Schedules, end to end on the dev server's real Temporal Schedules: a
//! schedule every second of a run that takes about three starts runs one after another (skip
//! overlap: never two at once), labelled `baton.schedule=NAME`; `pause` stops new runs,
//! `trigger` starts one anyway, `delete` removes it; a schedule whose run spec is invalid is
//! refused at create with exit 2.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use crate::common;

use baton_tests::*;
use common::*;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

/// The schedule's runs as `baton list --label` shows them: (run id, state).
fn runs_of(server: &DevServer, name: &str) -> Vec<(String, String)> {
    let label = format!("baton.schedule={name}");
    let out = baton(server, &["list", "--label", &label, "--json"]).unwrap();
    assert_eq!(out.code, 0, "{out}");
    let listed = out.json().unwrap();
    listed["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["run_id"].as_str().unwrap_or_default().to_owned(),
                v["state"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn describe(server: &DevServer, name: &str) -> Value {
    let out = baton(server, &["schedule", "describe", name, "--json"]).unwrap();
    assert_eq!(out.code, 0, "{out}");
    out.json().unwrap()
}

fn ended(state: &str) -> bool {
    matches!(state, "COMPLETED" | "FAILED" | "CANCELLED")
}

#[test]
fn a_schedule_starts_runs_one_at_a_time_and_pause_trigger_and_delete_work() {
    let server = DevServer::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let queue = unique("sched");
    let w = worker(&server, &queue, &[]);
    let slow = script(
        tmp.path(),
        "slow",
        json!([
            {"text": "Working.", "tool_calls": [{"name": "shell", "arguments": {"command": "sleep 3"}}]},
            {"text": "Done."}
        ]),
    )
    .display()
    .to_string();
    let name = unique("nightly");
    let out = baton(
        &server,
        &[
            "schedule",
            "create",
            &name,
            "--every",
            "1s",
            "--task-queue",
            &queue,
            "--script",
            &slow,
            "--no-approval",
            "--json",
            "tidy up",
        ],
    )
    .unwrap();
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.json().unwrap()["schedule"], name.as_str(), "{out}");

    // Runs one after another: never two open at once (skip), until two have completed.
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut most_open = 0;
    loop {
        let runs = runs_of(&server, &name);
        let open = runs.iter().filter(|(_, s)| !ended(s)).count();
        most_open = most_open.max(open);
        let completed = runs.iter().filter(|(_, s)| s == "COMPLETED").count();
        if completed >= 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "two runs did not complete: {runs:?}\n{}",
            w.log()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(most_open, 1, "skip overlap: one run at a time");
    let runs = runs_of(&server, &name);
    assert!(
        runs.iter()
            .all(|(id, _)| id.starts_with(&format!("{name}-"))),
        "{runs:?}"
    );
    let first = &runs.iter().find(|(_, s)| s == "COMPLETED").unwrap().0;
    let r = crate::common::ended(&server, first, 0);
    assert_eq!(r.answer, "Done.", "{r:?}");

    // Paused: no new runs.
    let out = baton(
        &server,
        &[
            "schedule",
            "pause",
            &name,
            "--note",
            "maintenance window",
            "--json",
        ],
    )
    .unwrap();
    assert_eq!(out.code, 0, "{out}");
    let said = out.json().unwrap();
    assert_eq!(
        (said["schedule"].as_str(), said["action"].as_str()),
        (Some(name.as_str()), Some("paused")),
        "{out}"
    );
    // Let a run that was starting settle, then count.
    std::thread::sleep(Duration::from_secs(2));
    let d = describe(&server, &name);
    assert_eq!(d["paused"], true, "{d}");
    assert_eq!(d["note"], "maintenance window", "{d}");
    let started = d["runs_started"].as_i64().unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        describe(&server, &name)["runs_started"],
        started,
        "a paused schedule starts nothing"
    );
    let listed = baton(&server, &["schedule", "list", "--json"]).unwrap();
    assert!(
        listed
            .stdout
            .lines()
            .any(|l| l.contains(&name) && l.contains("\"paused\":true")),
        "{listed}"
    );

    // Trigger: one run now, even paused.
    let out = baton(&server, &["schedule", "trigger", &name]).unwrap();
    assert_eq!(out.code, 0, "{out}");
    wait_until_blocking(Duration::from_secs(30), "the triggered run", || {
        Ok((describe(&server, &name)["runs_started"].as_i64() == Some(started + 1)).then_some(()))
    })
    .unwrap();

    // Delete: gone.
    let out = baton(&server, &["schedule", "delete", &name]).unwrap();
    assert_eq!(out.code, 0, "{out}");
    let out = baton(&server, &["schedule", "describe", &name]).unwrap();
    assert_eq!(out.code, 2, "{out}");
    assert!(out.stderr.contains("no schedule"), "{out}");
}

#[test]
fn a_schedule_with_an_invalid_run_is_refused_at_create() {
    let server = DevServer::start().unwrap();
    for (args, said) in [
        (
            &["--every", "1h", "--tool", "nope", "x"][..],
            "unknown tool",
        ),
        (
            &["--every", "1h", "--verify", " ", "x"][..],
            "verification command 1 is empty",
        ),
        (&["--every", "1h", "--id", "r1", "x"][..], "drop --id"),
        (&["x"][..], "--cron"),
    ] {
        let name = unique("bad");
        let mut all = vec!["schedule", "create", name.as_str()];
        all.extend_from_slice(args);
        let out = baton(&server, &all).unwrap();
        assert_eq!(out.code, 2, "{args:?}: {out}");
        assert!(out.stderr.contains(said), "{args:?}: {out}");
        let out = baton(&server, &["schedule", "describe", &name]).unwrap();
        assert_eq!(out.code, 2, "nothing was created for {args:?}: {out}");
    }
}

#[test]
fn policies_are_kept_and_a_backfill_starts_the_missed_runs() {
    let server = DevServer::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let queue = unique("sched-fill");
    let _w = worker(&server, &queue, &[]);
    let quick = script(tmp.path(), "quick", json!([{"text": "Done."}]))
        .display()
        .to_string();
    let name = unique("weekly");
    let out = baton(
        &server,
        &[
            "schedule",
            "create",
            &name,
            "--every",
            "1h",
            "--paused",
            "--on-overlap",
            "allow",
            "--catchup-window",
            "10m",
            "--pause-on-failure",
            "--task-queue",
            &queue,
            "--script",
            &quick,
            "x",
        ],
    )
    .unwrap();
    assert_eq!(out.code, 0, "{out}");
    let d = describe(&server, &name);
    assert_eq!(d["paused"], true, "{d}");
    assert_eq!(d["policies"]["on_overlap"], "allow", "{d}");
    assert_eq!(d["policies"]["catchup_window_secs"], 600, "{d}");
    assert_eq!(d["policies"]["pause_on_failure"], true, "{d}");
    assert_eq!(d["runs_started"], 0, "{d}");

    // Three hours that an hourly schedule missed: three runs, even paused.
    let out = baton(
        &server,
        &[
            "schedule",
            "backfill",
            &name,
            "--from",
            "2026-01-01T00:30:00Z",
            "--to",
            "2026-01-01T03:30:00Z",
        ],
    )
    .unwrap();
    assert_eq!(out.code, 0, "{out}");
    wait_until_blocking(Duration::from_secs(60), "three backfilled runs", || {
        let done = runs_of(&server, &name)
            .iter()
            .filter(|(_, s)| s == "COMPLETED")
            .count();
        Ok((done == 3).then_some(()))
    })
    .unwrap();
    let out = baton(
        &server,
        &[
            "schedule",
            "backfill",
            &name,
            "--from",
            "2026-01-02T00:00:00Z",
            "--to",
            "yesterday",
        ],
    )
    .unwrap();
    assert_eq!(out.code, 2, "{out}");
    assert!(out.stderr.contains("RFC 3339"), "{out}");
}

#[test]
fn starts_missed_while_the_server_was_down_are_made_up_within_the_catch_up_window() {
    let mut server = DevServer::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let queue = unique("sched-catchup");
    let _w = worker(&server, &queue, &[]);
    let quick = script(tmp.path(), "quick", json!([{"text": "Done."}]))
        .display()
        .to_string();
    let name = unique("often");
    let out = baton(
        &server,
        &[
            "schedule",
            "create",
            &name,
            "--every",
            "1s",
            "--on-overlap",
            "allow",
            "--catchup-window",
            "1m",
            "--task-queue",
            &queue,
            "--script",
            &quick,
            "x",
        ],
    )
    .unwrap();
    assert_eq!(out.code, 0, "{out}");
    wait_until_blocking(Duration::from_secs(30), "a first run", || {
        Ok((!runs_of(&server, &name).is_empty()).then_some(()))
    })
    .unwrap();
    server.stop();
    let down = std::time::SystemTime::now();
    std::thread::sleep(Duration::from_secs(6));
    let up = std::time::SystemTime::now();
    server.restart().unwrap();
    // The runs whose start time (the suffix of their id) fell while the server was down.
    let missed = |runs: &[(String, String)]| {
        runs.iter()
            .filter_map(|(id, _)| id.strip_prefix(&format!("{name}-")))
            .filter_map(|t| humantime::parse_rfc3339_weak(t).ok())
            .filter(|t| *t > down + Duration::from_millis(1500) && *t < up)
            .count()
    };
    let made_up = wait_until_blocking(Duration::from_secs(60), "the missed starts", || {
        let runs = runs_of(&server, &name);
        let n = missed(&runs);
        Ok((n >= 3).then_some(n))
    });
    let _ = baton(&server, &["schedule", "delete", &name]);
    let n = made_up.unwrap_or_else(|e| panic!("{e}: {:?}", runs_of(&server, &name)));
    assert!(n >= 3, "{n}");
}

/// Runs of a schedule created with `--pause-after-failures 2` (`extra`) that end as `script`
/// says, on a worker of their own; the schedule's description once `done` says so.
fn pausing_schedule(turns: Value, done: impl Fn(&Value, &[(String, String)]) -> bool) -> Value {
    let server = DevServer::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let queue = unique("sched-fail");
    let w = worker(&server, &queue, &[]);
    let script = script(tmp.path(), "runs", turns).display().to_string();
    let name = unique("flaky");
    let out = baton(
        &server,
        &[
            "schedule",
            "create",
            &name,
            "--every",
            "1s",
            "--task-queue",
            &queue,
            "--script",
            &script,
            "--no-approval",
            "--max-turns",
            "1",
            "--pause-after-failures",
            "2",
            "--json",
            "tidy up",
        ],
    )
    .unwrap();
    assert_eq!(out.code, 0, "{out}");
    let d = wait_until_blocking(Duration::from_secs(90), "the schedule's runs", || {
        let d = describe(&server, &name);
        let runs = runs_of(&server, &name);
        Ok(done(&d, &runs).then_some(d))
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", w.log()));
    let out = baton(&server, &["schedule", "delete", &name]).unwrap();
    assert_eq!(out.code, 0, "{out}");
    d
}

#[test]
fn a_schedule_pauses_itself_after_n_runs_in_a_row_end_without_completing() {
    // Every run wants a second turn that --max-turns 1 refuses: max_turns_exceeded.
    let d = pausing_schedule(
        json!([
            {"text": "Looking.", "tool_calls": [{"name": "list_files", "arguments": {}}]},
            {"text": "Done."}
        ]),
        |d, _| d["paused"] == true,
    );
    let note = d["note"].as_str().unwrap();
    assert!(
        note.starts_with("paused by baton: the last 2 run(s) ended without completing"),
        "{d}"
    );
    assert!(note.contains("(max_turns_exceeded)"), "{d}");
    assert!(d["runs_started"].as_i64().unwrap() >= 2, "{d}");
}

#[test]
fn a_schedule_whose_runs_complete_is_not_paused() {
    let d = pausing_schedule(json!([{"text": "Done."}]), |_, runs| {
        runs.iter().filter(|(_, s)| s == "COMPLETED").count() >= 3
    });
    assert_eq!(d["paused"], false, "{d}");
}
