//! Conversations: `baton send --start --id KEY` makes the run with update-with-start (two sends
//! at once: one run, both messages), a later message is the idle run's next task, a message id
//! is taken once, and the run ends after its idle timeout with the last answer.

#![allow(clippy::unwrap_used)]

use crate::common;

use baton_tests::*;
use common::*;
use pretty_assertions::assert_eq;
use serde_json::json;

/// The user messages of `run`'s transcript, in order.
fn user_messages(server: &DevServer, run: &str) -> Vec<String> {
    let out = baton(server, &["transcript", run, "--json"]).unwrap();
    assert_eq!(out.code, 0, "{out}");
    let v = out.json().unwrap();
    v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|item| item.get("user").and_then(|u| u["text"].as_str()))
        .map(str::to_owned)
        .collect()
}

#[test]
fn two_sends_at_once_make_one_run_and_both_messages_reach_it_in_order() {
    let server = DevServer::start().unwrap();
    let queue = unique("talk");
    let _w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let s = script(
        dir.path(),
        "talk",
        json!([{"text": "Answer one."}, {"text": "Answer two."}, {"text": "Answer three."}]),
    )
    .display()
    .to_string();
    let run = unique("conversation");
    let send = |text: &str, id: &str| {
        baton(
            &server,
            &[
                "send",
                "--start",
                "--id",
                &run,
                "--message-id",
                id,
                "--json",
                text,
                "--",
                "--task-queue",
                &queue,
                "--script",
                &s,
            ],
        )
        .unwrap()
    };
    let (a, b) = std::thread::scope(|scope| {
        let a = scope.spawn(|| send("alpha: fix the parser", "m-alpha"));
        let b = scope.spawn(|| send("beta: and add a test", "m-beta"));
        (a.join().unwrap(), b.join().unwrap())
    });
    for out in [&a, &b] {
        assert_eq!(out.code, 0, "{out}");
        assert_eq!(out.json().unwrap()["accepted"], true, "{out}");
    }
    wait_until_blocking(
        std::time::Duration::from_secs(60),
        "both messages answered",
        || {
            let out = baton(&server, &["status", &run, "--json"])?;
            let v = out.json().unwrap_or_default();
            Ok((v["state"] == "IDLE" && user_messages(&server, &run).len() == 2).then_some(()))
        },
    )
    .unwrap();
    assert_eq!(executions(&server, &run), 1, "one run for two starts");
    let said = user_messages(&server, &run);
    let first_is_alpha = said[0].starts_with("alpha");
    let task_of = |out: &CmdOutput| out.json().unwrap()["task"].as_u64().unwrap();
    // The message that made the run is its task; the other came after it.
    let (starter, other) = if first_is_alpha { (&a, &b) } else { (&b, &a) };
    assert_eq!(starter.json().unwrap()["duplicate"], false, "{starter}");
    assert_eq!(other.json().unwrap()["duplicate"], false, "{other}");
    assert_eq!(task_of(starter), 1);
    assert!(said[1].starts_with(if first_is_alpha { "beta" } else { "alpha" }));
    assert_eq!(said.len(), 2, "each message once: {said:?}");

    // The same message again (a retried send) changes nothing.
    let again = send("beta: and add a test", "m-beta");
    assert_eq!(again.code, 0, "{again}");
    assert_eq!(again.json().unwrap()["duplicate"], true, "{again}");
    let again = send("alpha: fix the parser", "m-alpha");
    assert_eq!(again.json().unwrap()["duplicate"], true, "{again}");
    assert_eq!(user_messages(&server, &run).len(), 2);
    assert_eq!(executions(&server, &run), 1);
    let _ = baton(&server, &["cancel", &run]);
}

#[test]
fn a_follow_up_is_the_idle_runs_next_task_and_the_run_ends_after_its_idle_timeout() {
    let server = DevServer::start().unwrap();
    let queue = unique("talk");
    let _w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let s = script(
        dir.path(),
        "talk",
        json!([{"text": "Answer one."}, {"text": "Answer two."}]),
    )
    .display()
    .to_string();
    let run = unique("conversation");
    let first = baton(
        &server,
        &[
            "send",
            "--start",
            "--id",
            &run,
            "--idle-timeout",
            "10s",
            "--wait",
            "--json",
            "first task",
            "--",
            "--task-queue",
            &queue,
            "--script",
            &s,
        ],
    )
    .unwrap();
    assert_eq!(first.code, 0, "{first}");
    let v = first.json().unwrap();
    assert_eq!(
        (
            v["answer"].as_str(),
            v["state"].as_str(),
            v["task"].as_u64()
        ),
        (Some("Answer one."), Some("IDLE"), Some(1)),
        "{first}"
    );
    let status = baton(&server, &["status", &run, "--json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(status["state"], "IDLE", "{status}");
    let human = baton(&server, &["status", &run]).unwrap();
    assert!(human.stdout.contains("task:    1"), "{human}");
    assert!(
        human.stdout.contains(&format!("baton send {run}")),
        "{human}"
    );

    let second = baton(
        &server,
        &[
            "send",
            &run,
            "second task",
            "--message-id",
            "m2",
            "--wait",
            "--json",
        ],
    )
    .unwrap();
    assert_eq!(second.code, 0, "{second}");
    let v = second.json().unwrap();
    assert_eq!(
        (
            v["answer"].as_str(),
            v["task"].as_u64(),
            v["duplicate"].as_bool()
        ),
        (Some("Answer two."), Some(2), Some(false)),
        "{second}"
    );

    // No third message: the run ends after 10 s idle, with the last answer.
    let result = baton(&server, &["result", &run, "--wait", "--json"]).unwrap();
    assert_eq!(result.code, 0, "{result}");
    let r = result.json().unwrap();
    assert_eq!(
        (r["status"].as_str(), r["answer"].as_str()),
        (Some("COMPLETED"), Some("Answer two."))
    );
    assert_eq!(r["turns"], 2);
    assert_eq!(executions(&server, &run), 1);
    assert_eq!(
        user_messages(&server, &run),
        vec!["first task", "second task"]
    );

    let late = baton(&server, &["send", &run, "third"]).unwrap();
    assert_eq!(late.code, 2, "{late}");
    assert!(late.stderr.contains("has already ended"), "{late}");

    // A message the ended run took, sent again with --start (a webhook redelivered late):
    // nothing starts; a new message does start the conversation again.
    let start_again = |text: &str, id: &str| {
        baton(
            &server,
            &[
                "send",
                "--start",
                "--id",
                &run,
                "--message-id",
                id,
                "--json",
                text,
                "--",
                "--task-queue",
                &queue,
                "--script",
                &s,
            ],
        )
        .unwrap()
    };
    let again = start_again("second task", "m2");
    assert_eq!(again.code, 0, "{again}");
    assert_eq!(again.json().unwrap()["duplicate"], true, "{again}");
    assert_eq!(executions(&server, &run), 1, "nothing started");
    let fresh = start_again("a new day", "m3");
    assert_eq!(fresh.json().unwrap()["duplicate"], false, "{fresh}");
    wait_until_blocking(
        std::time::Duration::from_secs(30),
        "a new run of the conversation",
        || Ok((executions(&server, &run) == 2).then_some(())),
    )
    .unwrap();
    let _ = baton(&server, &["cancel", &run]);
}
