//! Fleet upgrades: two worker builds whose workflow code differs (build B runs the
//! test-only variant `BATON_TEST_WORKFLOW_VARIANT=extra-step`). Runs started on build A stay on
//! A's workers after B becomes current, new runs go to B, a run of A that continues as new moves
//! to B; `baton replay-check` with B's code names A's runs and the event where they part, and
//! with A's code passes; `baton fleet status` shows the open runs per build.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::{collections::BTreeSet, time::Duration};

use baton_tests::*;
use common::*;
use serde_json::{Value, json};

const VARIANT: (&str, &str) = ("BATON_TEST_WORKFLOW_VARIANT", "extra-step");

/// The build ids of the workers that completed each workflow task of one run (segment).
fn task_builds(server: &DevServer, id: &str, run_id: Option<&str>) -> Vec<String> {
    let history = server.workflow_history_json(id, run_id).unwrap();
    history["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e.get("workflowTaskCompletedEventAttributes"))
        .map(|a| {
            a["deploymentVersion"]["buildId"]
                .as_str()
                .or_else(|| a["workerVersion"]["buildId"].as_str())
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

fn replay_check(server: &DevServer, env: &[(&str, &str)]) -> (i32, Value) {
    let out = baton_with_timeout(
        server,
        &["replay-check", "--no-cache", "--json"],
        env,
        None,
        Duration::from_secs(120),
    )
    .unwrap();
    let v = out.json().unwrap_or_else(|e| panic!("{e}: {out}"));
    (out.code, v)
}

#[test]
fn pinned_runs_stay_on_their_build_move_on_continue_as_new_and_replay_check_gates_the_new_one() {
    let server = DevServer::start_baton(&[]).unwrap();
    let queue = unique("fleet");
    let dir = tempfile::tempdir().unwrap();
    let a_env = [("BATON_DEPLOYMENT__BUILD_ID", "fleet-a")];
    let mut a = worker(&server, &queue, &a_env);

    // R1 waits for approval; R2 continues as new at every turn (its 2nd segment waits).
    let r1_script = shell_script(dir.path(), "r1", "Shell first.", &["echo r1 > r1.txt"]);
    let r1 = submit(
        &server,
        &queue,
        &unique("r1"),
        &["--script", &r1_script],
        "r1",
    );
    let look = json!({"text": "Looking.", "tool_calls": [{"name": "list_files", "arguments": {}}]});
    let r2_script = script(
        dir.path(),
        "r2",
        json!([
            {"text": "Shell first.", "tool_calls": [{"name": "shell", "arguments": {"command": "echo r2 > r2.txt"}}]},
            look,
            {"text": "All done."}
        ]),
    );
    let r2 = submit(
        &server,
        &queue,
        &unique("r2"),
        &[
            "--script",
            r2_script.to_str().unwrap(),
            "--segment-turns",
            "1",
        ],
        "r2",
    );
    wait_state(&server, &r1, "AWAITING_APPROVAL", Duration::from_secs(60));
    wait_state(&server, &r2, "AWAITING_APPROVAL", Duration::from_secs(60));

    // The gate: A's own code replays every open and recent run; B's code parts from each.
    let (code, report) = replay_check(&server, &[]);
    assert_eq!(code, 0, "{report}");
    assert!(report["replayed"].as_u64().unwrap() >= 3, "{report}");
    assert_eq!(report["diverged"], json!([]), "{report}");
    let (code, report) = replay_check(&server, &[VARIANT]);
    assert_eq!(code, 1, "{report}");
    let diverged: BTreeSet<String> = report["diverged"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["workflow_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        diverged,
        BTreeSet::from([r1.clone(), r2.clone()]),
        "{report}"
    );
    for d in report["diverged"].as_array().unwrap() {
        assert_eq!(d["kind"], "nondeterminism", "{d}");
        assert!(d["event_id"].as_i64().unwrap() > 0, "names the event: {d}");
    }
    println!("replay-check with build B: {report}");

    // Build B rolls out and becomes current the way an operator does it.
    let b_env = [
        ("BATON_DEPLOYMENT__BUILD_ID", "fleet-b"),
        ("BATON_DEPLOYMENT__PROMOTE", "never"),
        VARIANT,
    ];
    let mut b = worker(&server, &queue, &b_env);
    wait_until_blocking(Duration::from_secs(30), "build B registered", || {
        let out = server.temporal(&[
            "worker",
            "deployment",
            "set-current-version",
            "--deployment-name",
            "baton",
            "--build-id",
            "fleet-b",
            "--yes",
        ])?;
        Ok((out.code == 0).then_some(()))
    })
    .unwrap();
    let r3_script = shell_script(dir.path(), "r3", "Shell first.", &["echo r3 > r3.txt"]);
    // The server tells the task queue's partitions about the new current build a moment after
    // set-current-version returns, and a run started before they know still starts on A (seen
    // once in a loaded full run). A run that did is cancelled and started again: what is tested
    // is where runs go once B is current, not how fast the server's routing spreads.
    let mut r3 = String::new();
    wait_until_blocking(
        Duration::from_secs(90),
        "a new run starts on build B",
        || {
            r3 = submit(
                &server,
                &queue,
                &unique("r3"),
                &["--script", &r3_script],
                "r3",
            );
            wait_state(&server, &r3, "AWAITING_APPROVAL", Duration::from_secs(60));
            if task_builds(&server, &r3, None).first().map(String::as_str) == Some("fleet-b") {
                return Ok(Some(()));
            }
            let out = baton(
                &server,
                &["cancel", &r3, "--reason", "started before B's routing"],
            )?;
            anyhow::ensure!(out.code == 0, "{out}");
            wait_state(&server, &r3, "CANCELLED", Duration::from_secs(30));
            Ok(None)
        },
    )
    .unwrap();

    // Visibility follows the runs' ends a moment later too.
    let mut fleet = Value::Null;
    wait_until_blocking(
        Duration::from_secs(30),
        "fleet status counts r3 on B",
        || {
            fleet = baton(&server, &["fleet", "status", "--json"])?.json()?;
            let open = |build: &str| {
                fleet["builds"].as_array().and_then(|builds| {
                    builds.iter().find(|b| b["build_id"] == build).map(|b| {
                        (
                            b["state"].as_str().unwrap_or_default().to_owned(),
                            b["open_runs"].as_u64().unwrap_or_default(),
                        )
                    })
                })
            };
            Ok((open("fleet-b") == Some(("current".to_owned(), 1))
                && open("fleet-a").map(|o| o.1) == Some(2))
            .then_some(()))
        },
    )
    .unwrap_or_else(|e| panic!("{e}: {fleet}"));
    println!("fleet status: {fleet}");

    // Patch markers: the open runs are counted, pinned or not.
    let plain_queue = unique("fleet-unversioned");
    let _plain = worker(&server, &plain_queue, &[("BATON_DEPLOYMENT__NAME", "")]);
    let r4_script = shell_script(dir.path(), "r4", "Shell first.", &["echo r4 > r4.txt"]);
    let r4 = submit(
        &server,
        &plain_queue,
        &unique("r4"),
        &["--script", &r4_script],
        "r4",
    );
    wait_state(&server, &r4, "AWAITING_APPROVAL", Duration::from_secs(60));
    let patches = baton(&server, &["fleet", "patches", "--json"]).unwrap();
    let patches = patches.json().unwrap();
    println!("fleet patches: {patches}");
    assert_eq!(patches["open_runs"], 4, "{patches}");
    // This build checks no marker (the baseline folded them all), so nothing stands in the
    // way of a rollout, and the runs record none. What each verdict would say for markers in
    // use is the unit test `fleet::tests::a_marker_in_use_can_move_on_...`.
    assert_eq!(patches["markers"], json!([]), "{patches}");
    let described = server.workflow_describe_json(&r4).unwrap();
    assert!(
        !described.to_string().contains("TemporalChangeVersion"),
        "a run recorded a patch marker: {described}"
    );
    let out = baton(&server, &["cancel", &r4]).unwrap();
    assert_eq!(out.code, 0, "{out}");

    for run in [&r1, &r2, &r3] {
        let status = baton(&server, &["status", run, "--json"])
            .unwrap()
            .json()
            .unwrap();
        let call = status["pending"][0]["call_id"].as_str().unwrap().to_owned();
        let out = baton(&server, &["approve", run, &call]).unwrap();
        assert_eq!(out.code, 0, "{out}");
    }
    for run in [&r1, &r2, &r3] {
        let r = ended(&server, run, 0);
        assert_eq!(r.answer, "All done.", "{r:?}");
    }

    // R1 stayed on A to its end; R3 ran on B; R2's segments ran on A until it continued as
    // new after B became current.
    let r1_builds = task_builds(&server, &r1, None);
    assert!(r1_builds.iter().all(|b| b == "fleet-a"), "{r1_builds:?}");
    let r3_builds = task_builds(&server, &r3, None);
    assert!(r3_builds.iter().all(|b| b == "fleet-b"), "{r3_builds:?}");
    let r2_segments = segments(&server, &r2);
    assert!(r2_segments.len() >= 3, "{r2_segments:?}");
    let first = task_builds(&server, &r2, Some(&r2_segments[0]));
    assert!(first.iter().all(|b| b == "fleet-a"), "{first:?}");
    let last = task_builds(&server, &r2, r2_segments.last().map(String::as_str));
    assert!(last.iter().all(|b| b == "fleet-b"), "{last:?}");
    // Build A still ran the runs pinned to it; both workers are still up.
    assert!(a.is_running() && b.is_running());
    assert!(std::fs::read_to_string(a.workspace_root().join(&r1).join("r1.txt")).is_ok());

    // B's workers go away while a run pinned to B waits: A does not take it, and status says
    // which build it waits for; B back, it finishes.
    let r5_script = shell_script(dir.path(), "r5", "Shell first.", &["echo r5 > r5.txt"]);
    let r5 = submit(
        &server,
        &queue,
        &unique("r5"),
        &["--script", &r5_script],
        "r5",
    );
    let status = wait_status(&server, &r5, "AWAITING_APPROVAL", Duration::from_secs(60));
    let call = status.status.pending[0].call_id.to_string();
    b.terminate().unwrap();
    let out = baton(&server, &["approve", &r5, &call, "--signal"]).unwrap();
    assert_eq!(out.code, 0, "{out}");
    let status = wait_until_blocking(Duration::from_secs(30), "status names build B", || {
        let v = baton(&server, &["status", &r5, "--json"])?.json()?;
        Ok(v["last_event"]
            .as_str()
            .is_some_and(|e| e.contains("waiting for a worker of build fleet-b"))
            .then_some(v))
    })
    .unwrap();
    println!("status of a run pinned to a build with no worker: {status}");
    let _b_again = worker(&server, &queue, &b_env);
    let r = ended(&server, &r5, 0);
    assert_eq!(r.answer, "All done.", "{r:?}");
    assert!(
        task_builds(&server, &r5, None)
            .iter()
            .all(|b| b == "fleet-b")
    );
}

#[test]
fn replay_check_decrypts_histories_with_the_codec_keys_and_says_when_it_cannot() {
    let server = DevServer::start_baton(&[]).unwrap();
    let queue = unique("fleet-sealed");
    let keys = format!("k1={}", codec_key());
    let with_keys = [("BATON_CODEC_KEYS", keys.as_str())];
    let _w = worker(&server, &queue, &with_keys);
    let dir = tempfile::tempdir().unwrap();
    let script = shell_script(dir.path(), "sealed", "Shell first.", &["echo s > s.txt"]);
    let id = unique("sealed");
    let submit = [
        "submit",
        "--task-queue",
        &queue,
        "--id",
        &id,
        "--script",
        &script,
        "go",
    ];
    let out = baton_with(&server, &submit, &with_keys, None).unwrap();
    assert_eq!(out.code, 0, "{out}");
    wait_until_blocking(Duration::from_secs(60), "the run waits", || {
        let v = baton_with(&server, &["status", &id, "--json"], &with_keys, None)?.json()?;
        Ok((v["state"] == "AWAITING_APPROVAL").then_some(()))
    })
    .unwrap();
    let (code, report) = replay_check(&server, &with_keys);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["replayed"], 1, "{report}");
    let out = baton_with_timeout(
        &server,
        &["replay-check", "--no-cache"],
        &[],
        None,
        Duration::from_secs(120),
    )
    .unwrap();
    assert_eq!(out.code, 2, "{out}");
    assert!(out.stderr.contains("BATON_CODEC_KEYS"), "{out}");
}
