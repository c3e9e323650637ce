//! Priority and fair shares, end to end: runs submitted with `--priority`
//! and `--fairness-key` (or a `team` label) carry them into Temporal, and a dev server with
//! fairness on (`matching.enableFairness`) lets one team's run through a backlog of another
//! team's 200 runs; bad values are refused at submit; schedules start their runs with them.

#![allow(clippy::unwrap_used)]

use std::{sync::Arc, time::Duration};

use crate::common;

use baton_tests::*;
use common::*;
use pretty_assertions::assert_eq;
use serde_json::Value;

/// Team A's backlog, submitted before team B's one run.
const BACKLOG: usize = 200;

/// The dev server with fairness on, one partition per task queue (fairness is per partition).
fn fair_server() -> DevServer {
    DevServer::start_baton(&[
        "--dynamic-config-value",
        "matching.enableFairness=true",
        "--dynamic-config-value",
        "matching.numTaskqueueReadPartitions=1",
        "--dynamic-config-value",
        "matching.numTaskqueueWritePartitions=1",
    ])
    .unwrap()
}

/// Run `run` (its latest segment) as the official Temporal CLI describes it.
fn described_by_temporal(server: &DevServer, run: &str) -> Value {
    server
        .temporal(&["workflow", "describe", "--workflow-id", run, "-o", "json"])
        .unwrap()
        .ensure_success()
        .unwrap()
        .json()
        .unwrap()
}

fn submit_json(server: &DevServer, args: &[&str]) -> CmdOutput {
    let mut all = vec!["submit"];
    all.extend_from_slice(args);
    all.push("--json");
    baton(server, &all).unwrap()
}

#[test]
fn one_run_of_team_b_goes_before_the_50th_of_team_as_200_queued_before_it() {
    let server = fair_server();
    let llm = MockOpenAi::start().unwrap();
    llm.set_responder(Arc::new(|_req| {
        Some(MockResponse::ok(MockOpenAi::text_reply("Done.")))
    }));
    let queue = unique("fair");
    // No worker yet: every run waits in the backlog in submit order.
    let submit = |team: &str, n: usize| {
        let id = format!("{queue}-{team}-{n}");
        let out = submit_json(
            &server,
            &[
                "--task-queue",
                &queue,
                "--id",
                &id,
                "--provider",
                "openai",
                "--no-approval",
                "--label",
                &format!("team={team}"),
                &format!("task of team {team}, number {n}: say done"),
            ],
        );
        assert_eq!(out.code, 0, "{out}");
        let v = out.json().unwrap();
        assert_eq!(v["priority_applied"], true, "{v}");
    };
    std::thread::scope(|s| {
        let submit = &submit;
        let workers: Vec<_> = (0..4)
            .map(|t| {
                s.spawn(move || {
                    for n in (t..BACKLOG).step_by(4) {
                        submit("a", n);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
    });
    submit("b", 0);
    let base = llm.base_url();
    let _w = worker(&server, &queue, &[("OPENAI_BASE_URL", base.as_str())]);
    let requests = wait_until_blocking(
        Duration::from_secs(240),
        "a model call of every run",
        || {
            let requests = llm.requests();
            Ok((requests.len() > BACKLOG).then_some(requests))
        },
    )
    .unwrap();
    let team_of = |body: &Value| {
        let text = body.to_string();
        if text.contains("task of team b") {
            'b'
        } else {
            'a'
        }
    };
    let order: Vec<char> = requests.iter().map(|r| team_of(&r.body)).collect();
    let b_at = order.iter().position(|t| *t == 'b').unwrap();
    println!(
        "team B's first model call came after {b_at} of team A's (of {BACKLOG} queued before it)"
    );
    assert!(
        b_at < 50,
        "team B's run waited behind {b_at} of team A's runs: fairness did not apply"
    );
}

#[test]
fn priorities_and_fairness_keys_are_kept_by_the_server_and_bad_ones_refused() {
    let server = DevServer::start().unwrap();
    let queue = unique("prio");
    let run = unique("run-prio");
    let out = submit_json(
        &server,
        &[
            "--task-queue",
            &queue,
            "--id",
            &run,
            "--provider",
            "openai",
            "--priority",
            "1",
            "--fairness-key",
            "tenant-42",
            "--fairness-weight",
            "2.5",
            "say hi",
        ],
    );
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.json().unwrap()["priority_applied"], true, "{out}");
    // What the server holds, read with the official Temporal CLI.
    let d = described_by_temporal(&server, &run);
    let p = &d["workflowExecutionInfo"]["priority"];
    assert_eq!(p["priorityKey"], 1, "{d}");
    assert_eq!(p["fairnessKey"], "tenant-42", "{d}");
    assert_eq!(p["fairnessWeight"], 2.5, "{d}");

    // A run without any: no priority, no field.
    let plain = unique("run-plain");
    let out = submit_json(
        &server,
        &[
            "--task-queue",
            &queue,
            "--id",
            &plain,
            "--provider",
            "openai",
            "say hi",
        ],
    );
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.json().unwrap().get("priority_applied"), None, "{out}");

    for (args, says) in [
        (vec!["--priority", "0"], "0 is not in 1..=5"),
        (vec!["--priority", "6"], "6 is not in 1..=5"),
        (vec!["--fairness-key", &"k".repeat(65)], "at most 64"),
        (
            vec!["--fairness-weight", "2"],
            "give one with --fairness-key",
        ),
        (
            vec!["--fairness-key", "t", "--fairness-weight", "0"],
            "between 0.001 and 1000",
        ),
        (
            vec!["--label", &format!("team={}", "t".repeat(70))],
            "shorten the label",
        ),
    ] {
        let mut all = vec!["--task-queue", queue.as_str(), "--provider", "openai"];
        all.extend(args.iter().copied());
        all.push("say hi");
        let out = submit_json(&server, &all);
        assert_eq!(out.code, 2, "{args:?}: {out}");
        assert!(
            out.stderr.contains(says) || out.stdout.contains(says),
            "{args:?}: {out}"
        );
    }
}

#[test]
fn a_schedule_starts_its_runs_with_its_priority_and_the_team_labels_fairness_key() {
    let server = DevServer::start().unwrap();
    let queue = unique("prio-sched");
    let name = unique("nightly");
    let out = baton(
        &server,
        &[
            "schedule",
            "create",
            &name,
            "--every",
            "1h",
            "--task-queue",
            &queue,
            "--provider",
            "openai",
            "--priority",
            "2",
            "--label",
            "team=ops",
            "--json",
            "say hi",
        ],
    )
    .unwrap();
    assert_eq!(out.code, 0, "{out}");
    let created = out.json().unwrap();
    assert_eq!(created["priority_applied"], true, "{created}");
    assert_eq!(
        created["paused"], false,
        "created active as asked: {created}"
    );
    let described = baton(&server, &["schedule", "describe", &name, "--json"]).unwrap();
    let d = described.json().unwrap();
    assert_eq!(d["paused"], false, "{d}");
    assert_eq!(d["priority"]["priority"], 2, "{d}");
    assert_eq!(d["priority"]["fairness_key"], "ops", "{d}");

    let out = baton(&server, &["schedule", "trigger", &name]).unwrap();
    assert_eq!(out.code, 0, "{out}");
    let run = wait_until_blocking(Duration::from_secs(30), "the triggered run", || {
        let d = baton(&server, &["schedule", "describe", &name, "--json"])
            .unwrap()
            .json()
            .unwrap();
        Ok(d["recent_runs"][0].as_str().map(str::to_owned))
    })
    .unwrap();
    let p = &described_by_temporal(&server, &run)["workflowExecutionInfo"]["priority"];
    assert_eq!(p["priorityKey"], 2, "{p}");
    assert_eq!(p["fairnessKey"], "ops", "{p}");
    let out = baton(&server, &["schedule", "delete", &name]).unwrap();
    assert_eq!(out.code, 0, "{out}");
}

#[test]
fn a_run_continued_as_new_keeps_its_priority() {
    let server = DevServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let queue = unique("prio-can");
    let mut turns: Vec<Value> = (0..6)
        .map(|n| {
            serde_json::json!({"text": "Looking.", "tool_calls": [
                {"name": "write_file", "arguments": {"path": format!("n{n}.txt"), "content": "x"}}
            ]})
        })
        .collect();
    turns.push(serde_json::json!({"text": "Done."}));
    let script = script(dir.path(), "looks", Value::Array(turns));
    let run = unique("run-can");
    let out = submit_json(
        &server,
        &[
            "--task-queue",
            &queue,
            "--id",
            &run,
            "--script",
            script.to_str().unwrap(),
            "--history-budget",
            "20",
            "--no-approval",
            "--priority",
            "4",
            "--fairness-key",
            "tenant-7",
            "look around",
        ],
    );
    assert_eq!(out.code, 0, "{out}");
    let _w = worker(&server, &queue, &[]);
    let r = ended(&server, &run, 0);
    assert_eq!(r.reason, "completed", "{r:?}");
    assert!(
        segments(&server, &run).len() > 1,
        "the run continued as new"
    );
    let p = &described_by_temporal(&server, &run)["workflowExecutionInfo"]["priority"];
    assert_eq!(p["priorityKey"], 4, "the last segment's priority: {p}");
    assert_eq!(p["fairnessKey"], "tenant-7", "{p}");
}
