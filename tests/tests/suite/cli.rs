//! End-to-end: the `baton` CLI against a real dev server, real workers and the real binary:
//! bad input refused with clear messages, the `--wait --json` contract, pending/list through
//! visibility, approve without call ids, watch and its JSON lines, cancel, colour rules, and
//! a `submit --wait` that rides out a server restart.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::{
    collections::BTreeSet,
    path::Path,
    time::{Duration, Instant},
};

use baton_tests::*;
use common::*;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(60);

/// Single-quotes `s` for `sh`.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Runs `baton <args>` on a pseudo-terminal (util-linux `script`), so that its stdin and
/// stdout are terminals; `input` is typed into it. `None` when `script` is not installed.
fn baton_on_tty(
    server: &DevServer,
    args: &[&str],
    env: &[(&str, &str)],
    input: &str,
) -> Option<CmdOutput> {
    let found = std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("`script` (util-linux) is not installed: skipping the terminal checks");
        return None;
    }
    let mut line = sh_quote(&bin_path("baton").unwrap().display().to_string());
    for a in args {
        line.push(' ');
        line.push_str(&sh_quote(a));
    }
    let mut cmd = clean_command("script");
    cmd.args(["-q", "-e", "-c", &line, "/dev/null"])
        .env("TEMPORAL_ADDRESS", server.address())
        .env("TEMPORAL_NAMESPACE", server.namespace())
        .env("TERM", "xterm");
    for (k, v) in env {
        cmd.env(k, v);
    }
    Some(run_cmd(cmd, Some(input), Duration::from_secs(120)).unwrap())
}

fn has_ansi(text: &str) -> bool {
    text.contains('\x1b')
}

/// The ids of the runs in `baton pending --json`.
fn pending_ids(server: &DevServer) -> anyhow::Result<(BTreeSet<String>, Value)> {
    let v = baton(server, &["pending", "--json"])?.json()?;
    let ids = v["runs"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|r| r["run_id"].as_str().map(str::to_owned))
        .collect();
    Ok((ids, v))
}

#[test]
fn pending_lists_exactly_the_waiting_runs_and_approving_them_completes_them() {
    let started = Instant::now();
    let server = DevServer::start().unwrap();
    let queue = unique("pending");
    let _w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();

    let two = submit(
        &server,
        &queue,
        &unique("run-two-calls"),
        &[
            "--script",
            &shell_script(
                dir.path(),
                "two",
                "Two calls.",
                &["echo one-a", "echo one-b"],
            ),
            "--require-approval",
            "shell",
        ],
        "two",
    );
    let one = submit(
        &server,
        &queue,
        &unique("run-one-call"),
        &[
            "--script",
            &shell_script(dir.path(), "one", "One call.", &["echo two-a"]),
        ],
        "one",
    );
    // Busy (a tool running) but not waiting for anyone.
    let busy = submit(
        &server,
        &queue,
        &unique("run-busy"),
        &[
            "--script",
            &shell_script(dir.path(), "busy", "Sleeping.", &["sleep 120"]),
            "--no-approval",
        ],
        "busy",
    );
    wait_state(&server, &two, "AWAITING_APPROVAL", T);
    wait_state(&server, &one, "AWAITING_APPROVAL", T);
    wait_state(&server, &busy, "EXECUTING", T);

    let expected: BTreeSet<String> = [two.clone(), one.clone()].into();
    let (_, pending) = wait_until_blocking(T, "exactly the two waiting runs pending", || {
        let (ids, v) = pending_ids(&server)?;
        Ok((ids == expected).then_some((ids, v)))
    })
    .unwrap();
    let runs = pending["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{pending}");
    let by_id = |id: &str| runs.iter().find(|r| r["run_id"] == id).unwrap().clone();
    let waited_at_most = started.elapsed().as_secs() + 1;
    let calls = |r: &Value| -> Vec<(String, String, String)> {
        r["pending"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let waited = c["waiting_seconds"].as_u64().unwrap();
                assert!(waited <= waited_at_most, "waited {waited}s: {c}");
                (
                    c["call_id"].as_str().unwrap().to_owned(),
                    c["tool"].as_str().unwrap().to_owned(),
                    c["arguments"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let s = |a: &str, b: &str, c: &str| (a.to_owned(), b.to_owned(), c.to_owned());
    assert_eq!(
        calls(&by_id(&two)),
        vec![
            s("call_1_1", "shell", r#"{"command":"echo one-a"}"#),
            s("call_1_2", "shell", r#"{"command":"echo one-b"}"#),
        ]
    );
    assert_eq!(
        calls(&by_id(&one)),
        vec![s("call_1_1", "shell", r#"{"command":"echo two-a"}"#)]
    );
    assert_eq!(by_id(&two)["turn"], 1);
    let human = baton(&server, &["pending"]).unwrap();
    assert!(
        human.stdout.contains(&two) && human.stdout.contains(&one),
        "{human}"
    );
    assert!(!human.stdout.contains(&busy), "{human}");
    assert!(human.stdout.contains("(waiting "), "{human}");

    // `approve RUN` with no call id and no terminal never prompts: exit 2, the pending ids and
    // the exact command to run.
    let refused = baton_with(&server, &["approve", &two], &[], Some("a\n")).unwrap();
    assert_eq!(refused.code, 2, "{refused}");
    assert!(
        refused.stderr.contains("call_1_1") && refused.stderr.contains("call_1_2"),
        "{refused}"
    );
    let command = refused
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("approve them with: "))
        .unwrap_or_else(|| panic!("no command in {refused}"));
    assert_eq!(command, format!("baton approve {two} call_1_1 call_1_2"));
    let deny_refused = baton(&server, &["deny", &one]).unwrap();
    assert_eq!(deny_refused.code, 2, "{deny_refused}");
    assert!(
        deny_refused
            .stderr
            .contains(&format!("baton deny {one} call_1_1 --reason")),
        "{deny_refused}"
    );
    // Nothing was decided by the refused commands.
    assert_eq!(
        wait_state(&server, &two, "AWAITING_APPROVAL", T)["pending"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // The printed command works as printed.
    let args: Vec<&str> = command.split_whitespace().skip(1).collect();
    let approved = baton(&server, &args).unwrap();
    assert_eq!(approved.code, 0, "{approved}");

    // On a terminal, `approve RUN` asks per call: approve, with a reason.
    let asked = baton_on_tty(
        &server,
        &["approve", &one, "--approver", "tty-user"],
        &[],
        "a\nlooks fine\n",
    );
    match &asked {
        Some(out) => {
            assert_eq!(out.code, 0, "{out}");
            assert!(out.stdout.contains("$ echo two-a"), "{out}");
            assert!(out.stdout.contains("call_1_1: approved"), "{out}");
        }
        None => assert_eq!(baton(&server, &["approve", &one, "--all"]).unwrap().code, 0),
    }

    assert_eq!(result(&server, &two, 0)["status"], "COMPLETED");
    assert_eq!(result(&server, &one, 0)["status"], "COMPLETED");
    if asked.is_some() {
        let events = baton(&server, &["watch", &one, "--json"]).unwrap();
        let decided = events
            .json_lines()
            .unwrap()
            .into_iter()
            .find(|l| l["kind"] == "approval_decided")
            .unwrap();
        assert_eq!(decided["approval_decided"]["approver"], "tty-user");
        assert_eq!(decided["approval_decided"]["reason"], "looks fine");
    }
    let completed = wait_until_blocking(T, "both runs listed as COMPLETED", || {
        let v = baton(&server, &["list", "--state", "COMPLETED", "--json"])?.json()?;
        let runs = v["runs"].as_array().cloned().unwrap_or_default();
        let ids: BTreeSet<String> = runs
            .iter()
            .filter_map(|r| r["run_id"].as_str().map(str::to_owned))
            .collect();
        Ok(ids.is_superset(&expected).then_some(runs))
    })
    .unwrap();
    assert!(completed.iter().all(|r| r["state"] == "COMPLETED"));
    assert!(!completed.iter().any(|r| r["run_id"] == busy.as_str()));
    wait_until_blocking(T, "nothing pending any more", || {
        Ok(pending_ids(&server)?.0.is_empty().then_some(()))
    })
    .unwrap();
    assert_eq!(baton(&server, &["cancel", &busy]).unwrap().code, 0);
    result(&server, &busy, 4);
}

/// The kinds of `watch --json` lines, notes left out.
fn kinds(lines: &[Value]) -> Vec<&str> {
    lines
        .iter()
        .map(|l| l["kind"].as_str().unwrap())
        .filter(|k| *k != "note")
        .collect()
}

/// Every line follows the documented schema.
fn assert_schema(run: &str, lines: &[Value]) {
    let mut last_seq = None;
    for l in lines {
        let obj = l.as_object().unwrap();
        let kind = l["kind"].as_str().unwrap();
        let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        keys.sort_unstable();
        let mut want = vec!["at_ms", "kind", "run_id", "seq", "turn", kind];
        want.sort_unstable();
        assert_eq!(keys, want, "{l}");
        assert_eq!(l["run_id"], run);
        let seq = l["seq"].as_u64().unwrap();
        assert!(last_seq < Some(seq), "seq goes up: {l}");
        last_seq = Some(seq);
        assert!(l["turn"].as_u64().is_some() && l["at_ms"].as_i64().unwrap() > 0);
        let body = l[kind].as_object().unwrap();
        let fields: &[&str] = match kind {
            "assistant" => &["text", "reasoning", "finish_reason", "tool_calls"],
            "approval_requested" => &["call_id", "tool", "arguments", "requested_at_ms"],
            "approval_decided" => &[
                "call_id", "approved", "approver", "identity", "reason", "remember",
            ],
            "tool_started" => &["call_id", "tool", "arguments"],
            "tool_finished" => &["call_id", "tool", "is_error", "content"],
            "note" => &["text"],
            "finished" => &[
                "status",
                "reason",
                "answer",
                "turns",
                "usage",
                "detail",
                "exit_code",
            ],
            other => panic!("undocumented kind {other}: {l}"),
        };
        // Present when the run has them: its outputs.
        let optional = ["changes", "delivered", "output"];
        let mut got: Vec<&str> = body
            .keys()
            .map(String::as_str)
            .filter(|k| !(kind == "finished" && optional.contains(k)))
            .collect();
        got.sort_unstable();
        let mut want = fields.to_vec();
        want.sort_unstable();
        assert_eq!(got, want, "{l}");
    }
}

#[test]
fn watch_json_follows_and_replays_the_whole_run_and_since_starts_at_a_turn() {
    let server = DevServer::start().unwrap();
    let queue = unique("watch");
    let _w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let run = submit(
        &server,
        &queue,
        &unique("run-watch"),
        &[
            "--script",
            &shell_script(dir.path(), "w", "Checking.", &["echo watched"]),
            "--require-approval",
            "shell",
        ],
        "watch me",
    );
    wait_state(&server, &run, "AWAITING_APPROVAL", T);
    // Attached while the run waits; it follows to the end.
    let live = baton_spawn(&server, &["watch", &run, "--json"], &[]).unwrap();
    let out = baton(
        &server,
        &["approve", &run, "call_1_1", "--approver", "alice"],
    )
    .unwrap();
    assert_eq!(out.code, 0, "{out}");
    let live = live.wait(T).unwrap();
    assert_eq!(live.code, 0, "{live}");
    assert_eq!(result(&server, &run, 0)["answer"], "All done.");

    let replay = baton(&server, &["watch", &run, "--json"]).unwrap();
    assert_eq!(replay.code, 0, "{replay}");
    let lines = replay.json_lines().unwrap();
    assert_eq!(
        live.json_lines().unwrap(),
        lines,
        "following and replaying give the same lines"
    );
    assert_schema(&run, &lines);
    assert_eq!(
        kinds(&lines),
        vec![
            "assistant",
            "approval_requested",
            "approval_decided",
            "tool_started",
            "tool_finished",
            "assistant",
            "finished"
        ]
    );
    assert_eq!(lines[0]["kind"], "note", "the run's start comes first");
    let of = |kind: &str| -> Vec<&Value> {
        lines
            .iter()
            .filter(|l| l["kind"] == kind)
            .map(|l| &l[kind])
            .collect()
    };
    let assistant = of("assistant");
    assert_eq!(assistant[0]["text"], "Checking.");
    assert_eq!(assistant[0]["finish_reason"], "tool_calls");
    assert_eq!(
        assistant[0]["tool_calls"],
        json!([{"call_id": "call_1_1", "tool": "shell", "arguments": r#"{"command":"echo watched"}"#}])
    );
    assert_eq!(assistant[1]["text"], "All done.");
    assert_eq!(assistant[1]["finish_reason"], "stop");
    assert_eq!(of("approval_requested")[0]["call_id"], "call_1_1");
    assert_eq!(of("approval_requested")[0]["tool"], "shell");
    assert!(
        of("approval_requested")[0]["requested_at_ms"]
            .as_i64()
            .unwrap()
            > 0
    );
    let decided = of("approval_decided")[0];
    assert_eq!(
        (
            &decided["call_id"],
            &decided["approved"],
            &decided["approver"]
        ),
        (&json!("call_1_1"), &json!(true), &json!("alice"))
    );
    // The sender's Temporal client identity, from history (`<user>@<host>` for the CLI).
    assert!(
        decided["identity"].as_str().unwrap().contains('@'),
        "{decided}"
    );
    assert_eq!(of("tool_started")[0]["call_id"], "call_1_1");
    let finished_tool = of("tool_finished")[0];
    assert_eq!(finished_tool["is_error"], false);
    assert!(
        finished_tool["content"]
            .as_str()
            .unwrap()
            .contains("watched"),
        "{finished_tool}"
    );
    let end = lines.last().unwrap();
    assert_eq!(end["kind"], "finished");
    let f = &end["finished"];
    assert_eq!(f["status"], "COMPLETED");
    assert_eq!(f["reason"], "completed");
    assert_eq!(f["answer"], "All done.");
    assert_eq!(f["turns"], 2);
    assert_eq!(f["exit_code"], 0);
    for k in ["input_tokens", "output_tokens", "total_tokens", "llm_calls"] {
        assert!(f["usage"][k].as_u64().is_some(), "usage.{k}: {end}");
    }
    let turns: Vec<u64> = lines
        .iter()
        .filter(|l| l["kind"] == "assistant")
        .map(|l| l["turn"].as_u64().unwrap())
        .collect();
    assert_eq!(turns, vec![1, 2]);

    // --since TURN: events of that turn on, and always the end.
    let since = baton(&server, &["watch", &run, "--json", "--since", "2"]).unwrap();
    assert_eq!(since.code, 0, "{since}");
    let since_lines = since.json_lines().unwrap();
    assert_schema(&run, &since_lines);
    assert_eq!(kinds(&since_lines), vec!["assistant", "finished"]);
    assert!(since_lines.iter().all(|l| l["turn"].as_u64() >= Some(2)));
    assert_eq!(&since_lines, &lines[lines.len() - since_lines.len()..]);
    let past = baton(&server, &["watch", &run, "--json", "--since", "9"]).unwrap();
    assert_eq!(past.code, 0, "{past}");
    assert_eq!(kinds(&past.json_lines().unwrap()), vec!["finished"]);

    // The same, for people.
    let human = baton(&server, &["watch", &run]).unwrap();
    assert_eq!(human.code, 0, "{human}");
    for want in [
        "── turn 1 ──",
        "Checking.",
        "awaits approval",
        "call_1_1 approved by alice",
        "✔ shell [call_1_1]",
        "── turn 2 ──",
        "All done.",
        "COMPLETED",
    ] {
        assert!(human.stdout.contains(want), "missing {want:?}: {human}");
    }
    let human_since = baton(&server, &["watch", &run, "--since", "2"]).unwrap();
    assert!(
        !human_since.stdout.contains("── turn 1 ──"),
        "{human_since}"
    );
    assert!(human_since.stdout.contains("── turn 2 ──"), "{human_since}");

    let unknown = baton(&server, &["watch", "no-such-run", "--json"]).unwrap();
    assert_eq!(unknown.code, 2, "{unknown}");
    // The JSON lines end with the error, as for every --json command.
    let lines = unknown.json_lines().unwrap();
    assert_eq!(lines.len(), 1, "{unknown}");
    assert_eq!(lines[0]["exit_code"], 2, "{unknown}");
    assert!(
        lines[0]["error"]
            .as_str()
            .unwrap()
            .contains("no run with id 'no-such-run'"),
        "{unknown}"
    );
}

#[test]
fn cancel_ends_a_waiting_run_as_cancelled_and_result_and_watch_exit_4() {
    let server = DevServer::start().unwrap();
    let queue = unique("cancel-ops");
    let _w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let run = submit(
        &server,
        &queue,
        &unique("run-cancel-waiting"),
        &[
            "--script",
            &shell_script(dir.path(), "c", "About to.", &["touch never.txt"]),
        ],
        "c",
    );
    wait_state(&server, &run, "AWAITING_APPROVAL", T);
    // `watch --json | grep -m1 approval_requested` ends when grep does (exit 3: detached),
    // although the waiting run writes nothing new for the watcher to fail on.
    let line = format!(
        "{} watch {} --json | grep -m1 approval_requested; echo \"codes=${{PIPESTATUS[*]}}\"",
        sh_quote(&bin_path("baton").unwrap().display().to_string()),
        sh_quote(&run)
    );
    let mut cmd = clean_command("bash");
    cmd.args(["-c", &line])
        .env("TEMPORAL_ADDRESS", server.address())
        .env("TEMPORAL_NAMESPACE", server.namespace());
    let piped = run_cmd(cmd, None, Duration::from_secs(30)).unwrap();
    assert!(
        piped.stdout.contains("approval_requested") && piped.stdout.contains("codes=3 0"),
        "{piped}"
    );
    let out = baton(&server, &["cancel", &run, "--reason", "not needed"]).unwrap();
    assert_eq!(out.code, 0, "{out}");
    let r = ended(&server, &run, 4);
    assert_eq!(r.status, "CANCELLED");
    assert_eq!(r.reason, "cancelled");
    // Without --wait too, once it has ended.
    let out = baton(&server, &["result", &run]).unwrap();
    assert_eq!(out.code, 4, "{out}");
    assert!(out.stdout.contains("CANCELLED"), "{out}");
    let status = status(&server, &run);
    assert_eq!(status.status.state, "CANCELLED", "{status:?}");
    let watch = baton(&server, &["watch", &run, "--json"]).unwrap();
    assert_eq!(watch.code, 4, "{watch}");
    let lines = watch.json_lines().unwrap();
    let end = lines.last().unwrap();
    assert_eq!(end["kind"], "finished", "{watch}");
    assert_eq!(end["finished"]["status"], "CANCELLED", "{watch}");
    assert_eq!(end["finished"]["exit_code"], 4, "{watch}");
    // The call that waited for a decision has an outcome, in `watch` and in the transcript.
    let closed = &lines[lines.len() - 2];
    let said = "not run: the run ended before this call was decided (cancelled: not needed)";
    assert_eq!(closed["kind"], "tool_finished", "{watch}");
    assert_eq!(closed["tool_finished"]["content"], said, "{watch}");
    assert_eq!(closed["tool_finished"]["is_error"], true, "{watch}");
    let transcript = baton(&server, &["transcript", &run]).unwrap();
    assert_eq!(transcript.code, 0, "{transcript}");
    assert!(transcript.stdout.contains(said), "{transcript}");
    // Nothing left to cancel or approve.
    let again = baton(&server, &["cancel", &run]).unwrap();
    assert_eq!(again.code, 2, "{again}");
    assert!(again.stderr.contains("already ended"), "{again}");
    let late = baton(&server, &["approve", &run]).unwrap();
    assert_eq!(late.code, 2, "{late}");
    assert!(late.stderr.contains("already ended"), "{late}");
    let late = baton(&server, &["approve", &run, "--all", "--signal"]).unwrap();
    assert_eq!(late.code, 2, "{late}");
    assert!(late.stderr.contains("already ended"), "{late}");
    let late = baton(&server, &["send", &run, "one more thing"]).unwrap();
    assert_eq!(late.code, 2, "{late}");
    assert!(
        late.stderr.contains("already ended") && late.stderr.contains("baton result"),
        "{late}"
    );
    let empty = baton(&server, &["send", &run, " "]).unwrap();
    assert_eq!(empty.code, 2, "{empty}");
    assert!(empty.stderr.contains("the message is empty"), "{empty}");
}

/// Cancelling in the middle of a batch: the call that completed keeps its real result, the
/// one running is "stopped", the one not started "not run"; `watch` saw each start and end
/// when it happened (mutating calls run one at a time).
#[test]
fn cancel_mid_batch_keeps_what_completed_and_tells_what_did_not_run() {
    let server = DevServer::start().unwrap();
    let queue = unique("cancel-batch");
    let w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let run = submit(
        &server,
        &queue,
        &unique("run-cancel-batch"),
        &[
            "--no-approval",
            "--script",
            &shell_script(
                dir.path(),
                "b",
                "Three steps.",
                &[
                    "echo first-done >> y.txt; echo first-out",
                    "sleep 60",
                    "touch never.txt",
                ],
            ),
        ],
        "b",
    );
    let status = wait_until_blocking(T, "the second call running", || {
        let v = baton(&server, &["status", &run, "--json"])?.json()?;
        let running = v["activities"]
            .as_array()
            .is_some_and(|a| a.iter().any(|a| a["activity_id"] == "call_1_2"));
        Ok(running.then_some(v))
    })
    .unwrap();
    assert_eq!(
        status["activities"].as_array().unwrap().len(),
        1,
        "{status}"
    );
    let human = baton(&server, &["status", &run]).unwrap();
    assert!(
        human
            .stdout
            .contains("now:     tool call call_1_2: running for"),
        "{human}"
    );
    let out = baton(&server, &["cancel", &run]).unwrap();
    assert_eq!(out.code, 0, "{out}");
    result(&server, &run, 4);

    let watch = baton(&server, &["watch", &run, "--json"]).unwrap();
    let lines = watch.json_lines().unwrap();
    let tools: Vec<String> = lines
        .iter()
        .filter_map(|l| match l["kind"].as_str() {
            Some("tool_started") => {
                Some(format!("start {}", l["tool_started"]["call_id"].as_str()?))
            }
            Some("tool_finished") => Some(format!(
                "end {}: {}",
                l["tool_finished"]["call_id"].as_str()?,
                l["tool_finished"]["content"].as_str()?.lines().next()?
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        tools,
        [
            "start call_1_1",
            "end call_1_1: exit code: 0",
            "start call_1_2",
            "end call_1_2: stopped: the run ended while this call ran (cancelled: cancelled from \
             baton CLI); it may have taken effect in part",
            "end call_1_3: not run: the run ended before this call ran (cancelled: cancelled \
             from baton CLI)",
        ],
        "{watch}"
    );
    let transcript = baton(&server, &["transcript", &run]).unwrap();
    assert!(transcript.stdout.contains("first-out"), "{transcript}");
    let ws = w.workspace_root();
    assert!(!walk_has(ws, "never.txt"), "the third call never ran");
}

/// Whether a file named `name` is anywhere under `dir`.
fn walk_has(dir: &Path, name: &str) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name() == name || (e.path().is_dir() && walk_has(&e.path(), name)))
    })
}

#[test]
fn no_colour_or_spinner_without_a_terminal_or_with_no_color() {
    let server = DevServer::start().unwrap();
    let queue = unique("colour");
    let _w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let run = submit(
        &server,
        &queue,
        &unique("run-colour"),
        &[
            "--script",
            &shell_script(dir.path(), "c", "Colourful.", &["echo hi"]),
        ],
        "c",
    );
    wait_state(&server, &run, "AWAITING_APPROVAL", T);
    assert_eq!(baton(&server, &["approve", &run, "--all"]).unwrap().code, 0);
    result(&server, &run, 0);

    // Piped stdout: plain, whatever NO_COLOR says (the harness sets NO_COLOR=1).
    for env in [&[][..], &[("NO_COLOR", "")][..]] {
        let out = baton_with(&server, &["watch", &run], env, None).unwrap();
        assert_eq!(out.code, 0, "{out}");
        assert!(out.stdout.contains("── turn 1 ──"), "{out}");
        assert!(!has_ansi(&out.stdout) && !has_ansi(&out.stderr), "{out}");
    }
    // On a terminal: plain with NO_COLOR set, coloured without it (so the check above can fail).
    let Some(plain) = baton_on_tty(&server, &["watch", &run], &[("NO_COLOR", "1")], "") else {
        return;
    };
    assert_eq!(plain.code, 0, "{plain}");
    assert!(plain.stdout.contains("── turn 1 ──"), "{plain}");
    assert!(!has_ansi(&plain.stdout), "{plain}");
    let coloured = baton_on_tty(&server, &["watch", &run], &[("NO_COLOR", "")], "").unwrap();
    assert_eq!(coloured.code, 0, "{coloured}");
    assert!(has_ansi(&coloured.stdout), "{coloured}");

    // `submit --wait` follows the run live on a terminal: the same rule for its spinner.
    let quick = shell_script(dir.path(), "q", "Quick.", &["sleep 1"]);
    let submit_args = [
        "submit",
        "--task-queue",
        &queue,
        "--script",
        &quick,
        "--no-approval",
        "--wait",
        "q",
    ];
    let plain = baton_on_tty(&server, &submit_args, &[("NO_COLOR", "1")], "").unwrap();
    assert_eq!(plain.code, 0, "{plain}");
    assert!(plain.stdout.contains("── turn 1 ──"), "live view: {plain}");
    assert!(!has_ansi(&plain.stdout), "{plain}");
    let coloured = baton_on_tty(&server, &submit_args, &[("NO_COLOR", "")], "").unwrap();
    assert_eq!(coloured.code, 0, "{coloured}");
    assert!(has_ansi(&coloured.stdout), "{coloured}");
}

/// A run terminated with the plain `temporal` CLI while it waited never recorded its end:
/// `status`, `list` and `result` still agree that it ended (as CANCELLED, nothing pending,
/// with the turns it made), and `list --state` counts it by how it closed.
#[test]
fn a_terminated_run_reads_as_ended_everywhere() {
    let server = DevServer::start().unwrap();
    let queue = unique("terminated");
    let _w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let run = submit(
        &server,
        &queue,
        &unique("run-terminated"),
        &[
            "--script",
            &shell_script(dir.path(), "t", "About to.", &["touch never.txt"]),
        ],
        "t",
    );
    wait_state(&server, &run, "AWAITING_APPROVAL", T);
    server
        .temporal(&[
            "workflow",
            "terminate",
            "--workflow-id",
            &run,
            "--reason",
            "ops",
        ])
        .unwrap()
        .ensure_success()
        .unwrap();

    let status = status(&server, &run);
    assert_eq!(status.status.state, "CANCELLED", "{status:?}");
    assert_eq!(status.temporal_status, "Terminated", "{status:?}");
    assert!(status.status.pending.is_empty(), "{status:?}");
    let human = baton(&server, &["status", &run]).unwrap();
    assert!(!human.stdout.contains("baton approve"), "{human}");

    let r = ended(&server, &run, 4);
    assert_eq!(r.status, "CANCELLED", "{r:?}");
    assert_eq!(r.turns, 1, "the turn it made: {r:?}");

    let ids = |state: &str| listed(&server, &["list", "--state", state, "--json"]).unwrap();
    assert!(!ids("AWAITING_APPROVAL").contains(&run));
    assert!(ids("cancelled").contains(&run));
    let all: json::Runs<json::ListedRun> = baton(&server, &["list", "--json"])
        .unwrap()
        .parse()
        .unwrap();
    let row = all.runs.iter().find(|r| r.run_id == run.as_str()).unwrap();
    assert_eq!(row.state, "CANCELLED", "{row:?}");

    let bogus = baton(&server, &["list", "--state", "BOGUS"]).unwrap();
    assert_eq!(bogus.code, 2, "{bogus}");
    assert!(
        bogus.stderr.contains("AWAITING_APPROVAL") && bogus.stderr.contains("BOGUS"),
        "{bogus}"
    );
}

/// `submit --wait` (a CI job's step) outlives a restart of the Temporal server: it says it
/// lost the connection, keeps waiting, and prints the result once the run ends.
/// Whether the run's last workflow task completed (none is scheduled or running).
fn workflow_task_settled(server: &DevServer, run: &str) -> anyhow::Result<bool> {
    const TASK_EVENTS: [&str; 3] = [
        "workflowTaskScheduledEventAttributes",
        "workflowTaskStartedEventAttributes",
        "workflowTaskCompletedEventAttributes",
    ];
    let history = server.workflow_history_json(run, None)?;
    let events = history["events"].as_array().cloned().unwrap_or_default();
    let last = events
        .iter()
        .rev()
        .find_map(|e| TASK_EVENTS.into_iter().find(|k| e.get(k).is_some()));
    Ok(last == Some(TASK_EVENTS[2]))
}

#[test]
fn submit_wait_survives_a_server_restart() {
    let mut server = DevServer::start().unwrap();
    let queue = unique("restart");
    let _w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let run = unique("run-restart");
    let s = shell_script(dir.path(), "r", "About to.", &["echo restarted-ok"]);
    let waiting = baton_spawn(
        &server,
        &[
            "submit",
            "--task-queue",
            &queue,
            "--id",
            &run,
            "--script",
            &s,
            "--wait",
            "--json",
            "r",
        ],
        &[],
    )
    .unwrap();
    wait_state(&server, &run, "AWAITING_APPROVAL", T);
    // `watch` rides it out too.
    let watching = baton_spawn(&server, &["watch", &run], &[]).unwrap();
    // Once watch follows the run and the worker is done with its workflow task, the outage.
    wait_until_blocking(T, "watch to follow and the worker to settle", || {
        Ok(
            (!watching.stdout_so_far().is_empty() && workflow_task_settled(&server, &run)?)
                .then_some(()),
        )
    })
    .unwrap();
    server.stop();
    // The point of the test: the server stays down longer than the SDK's own retries of a
    // call (about 10 s), so both clients must ride out the outage themselves.
    std::thread::sleep(Duration::from_secs(15));
    server.restart().unwrap();
    wait_state(&server, &run, "AWAITING_APPROVAL", T);
    let out = baton(&server, &["approve", &run, "--all"]).unwrap();
    assert_eq!(out.code, 0, "{out}");
    let done = waiting.wait(Duration::from_secs(120)).unwrap();
    assert_eq!(done.code, 0, "{done}");
    let v = done.json().unwrap();
    assert_eq!(v["status"], "COMPLETED", "{v}");
    assert!(
        done.stderr.contains("lost the connection to Temporal"),
        "{done}"
    );
    let watched = watching.wait(Duration::from_secs(60)).unwrap();
    assert_eq!(watched.code, 0, "{watched}");
    assert!(watched.stdout.contains("All done."), "{watched}");
    assert!(
        watched
            .stderr
            .contains("lost the connection to Temporal while watching"),
        "{watched}"
    );
}

#[test]
fn bad_input_is_refused_with_clear_messages() {
    let dir = tempfile::tempdir().unwrap();
    let good = script(dir.path(), "ok", json!([{"text": "hi"}]));
    let good = good.display().to_string();
    // These fail before any connection is attempted.
    let unreachable = "127.0.0.1:1";
    let out = baton_at(
        unreachable,
        &["submit", "--script", &good, "--tool", "nope", "x"],
    )
    .unwrap();
    assert_eq!(out.code, 2, "{out}");
    assert!(out.stderr.contains("unknown tool(s): nope"), "{out}");
    let out = baton_at(
        unreachable,
        &["submit", "--script", "/nonexistent/script.json", "x"],
    )
    .unwrap();
    assert_eq!(out.code, 2, "{out}");
    assert!(
        out.stderr
            .contains("cannot read script file /nonexistent/script.json"),
        "{out}"
    );
    std::fs::write(dir.path().join("broken.json"), "{not json").unwrap();
    let broken = dir.path().join("broken.json").display().to_string();
    let out = baton_at(unreachable, &["submit", "--script", &broken, "x"]).unwrap();
    assert_eq!(out.code, 2, "{out}");
    assert!(out.stderr.contains("is not valid JSON"), "{out}");
    let out = baton_at(unreachable, &["submit", "--bogus-flag", "x"]).unwrap();
    assert_eq!(out.code, 2, "{out}");
    // Limits of zero, an empty id and flags that would be silently ignored are refused.
    for (args, said) in [
        (vec!["--max-turns", "0"], "--max-turns"),
        (vec!["--max-tokens", "0"], "--max-tokens"),
        (vec!["--context-window", "0"], "--context-window"),
        (vec!["--deadline", "0s"], "is zero"),
        (vec!["--tool-timeout", "0"], "is zero"),
        (vec!["--id", ""], "the run id is empty"),
        (vec!["--label", "a=1", "--label", "a=2"], "is given twice"),
        (
            vec!["--on-approval-timeout", "fail"],
            "without an approval timeout",
        ),
        (
            vec!["--provider", "openai"],
            "--script is for the scripted provider",
        ),
    ] {
        let mut all = vec!["submit", "--script", good.as_str()];
        all.extend(args);
        all.push("x");
        let out = baton_at(unreachable, &all).unwrap();
        assert_eq!(out.code, 2, "{all:?}: {out}");
        assert!(out.stderr.contains(said), "{all:?}: {out}");
    }
    let out = baton_at(
        unreachable,
        &[
            "submit",
            "--script",
            &good,
            "--prompt-file",
            "/nonexistent/task.md",
        ],
    )
    .unwrap();
    assert_eq!(out.code, 2, "{out}");
    assert!(
        out.stderr
            .contains("cannot read the prompt file /nonexistent/task.md"),
        "{out}"
    );
    // With --json, stdout holds one JSON object even when the flags are wrong or the server
    // cannot be reached.
    for (args, code, said) in [
        (
            vec!["submit", "--json", "--deadline", "0", "x"],
            2,
            "is zero",
        ),
        (vec!["submit", "--json"], 2, "PROMPT"),
        (
            vec!["status", "some-run", "--json"],
            5,
            "cannot reach Temporal",
        ),
        (
            vec!["result", "some-run", "--json"],
            5,
            "cannot reach Temporal",
        ),
    ] {
        let out = baton_at(unreachable, &args).unwrap();
        assert_eq!(out.code, code, "{args:?}: {out}");
        let v = out.json().unwrap();
        assert_eq!(v["exit_code"], code, "{args:?}: {v}");
        assert!(v["error"].as_str().unwrap().contains(said), "{args:?}: {v}");
    }
    let out = baton_at(unreachable, &["status", "some-run"]).unwrap();
    assert!(out.stderr.contains("connection refused"), "{out}");
    // Policy files: the error names the file and the field.
    for (name, text, said) in [
        (
            "neg.toml",
            "timeout_seconds = -5\n",
            "field `timeout_seconds` = -5",
        ),
        (
            "tool.toml",
            "require_approval = [\"nosuch\"]\n",
            "tool.toml: require_approval names unknown tool(s): nosuch",
        ),
        ("p.yaml", "mode: x\n", "YAML is not supported"),
        ("p.policy", "{{not json", "is neither JSON"),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let path = path.display().to_string();
        let out = baton_at(
            unreachable,
            &["submit", "--script", &good, "--policy", &path, "x"],
        )
        .unwrap();
        assert_eq!(out.code, 2, "{name}: {out}");
        assert!(out.stderr.contains(said), "{name}: {out}");
    }
    let out = baton_at(unreachable, &["deny", "some-run", "--all", "--remember"]).unwrap();
    assert_eq!(out.code, 2, "{out}");
    assert!(out.stderr.contains("--remember is for approve"), "{out}");
    // A valid submit against an unreachable server.
    let out = baton_at(unreachable, &["submit", "--script", &good, "x"]).unwrap();
    assert_eq!(out.code, 5, "{out}");
    assert!(out.stderr.contains("cannot reach Temporal at"), "{out}");
    assert!(out.stderr.contains("TEMPORAL_ADDRESS"), "{out}");
    let out = baton_at(unreachable, &["status", "some-run"]).unwrap();
    assert_eq!(out.code, 5, "{out}");
}

#[test]
fn wait_json_contract_max_turns_and_unknown_run() {
    let server = DevServer::start().unwrap();
    let queue = unique("contract");
    let _w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let done = script(dir.path(), "done", json!([{"text": "42"}]))
        .display()
        .to_string();
    let run = unique("run-json");
    let out = baton(
        &server,
        &[
            "submit",
            "--task-queue",
            &queue,
            "--id",
            &run,
            "--script",
            &done,
            "--wait",
            "--json",
            "q",
        ],
    )
    .unwrap();
    assert_eq!(out.code, 0, "{out}");
    let v = out.json().unwrap();
    for key in ["run_id", "status", "reason", "answer", "turns", "usage"] {
        assert!(v.get(key).is_some(), "missing {key} in {v}");
    }
    assert_eq!(v["run_id"], run.as_str());
    assert_eq!(v["status"], "COMPLETED");
    assert_eq!(v["answer"], "42");

    let looping = script(
        dir.path(),
        "loop",
        json!([
            {"tool_calls": [{"name": "list_files", "arguments": {}}]},
            {"text": "Listing once more.", "tool_calls": [{"name": "list_files", "arguments": {}}]},
            {"tool_calls": [{"name": "list_files", "arguments": {}}]}
        ]),
    )
    .display()
    .to_string();
    let out = baton(
        &server,
        &[
            "submit",
            "--task-queue",
            &queue,
            "--script",
            &looping,
            "--max-turns",
            "2",
            "--wait",
            "--json",
            "loop",
        ],
    )
    .unwrap();
    assert_eq!(out.code, 1, "{out}");
    let v: json::Ended = out.parse().unwrap();
    assert_eq!(v.status, "FAILED");
    assert_eq!(v.reason, "max_turns_exceeded");
    assert_eq!(v.turns, 2);
    // The last thing the agent said is not an answer.
    assert_eq!(v.answer, "", "{v:?}");
    assert_eq!(v.last_text.as_deref(), Some("Listing once more."), "{v:?}");

    // --wait-timeout while awaiting approval: exit 3, the run goes on.
    let needs = approval_script(dir.path(), "needs", &["true"]);
    let out = baton(
        &server,
        &[
            "submit",
            "--task-queue",
            &queue,
            "--script",
            &needs,
            "--wait",
            "--wait-timeout",
            "3s",
            "--json",
            "w",
        ],
    )
    .unwrap();
    assert_eq!(out.code, 3, "{out}");
    let v = out.json().unwrap();
    assert_eq!(v["status"], "AWAITING_APPROVAL");
    // The run goes on: no reason yet; times are numbers, as in `watch --json`.
    assert_eq!(v["reason"], Value::Null, "{v}");
    assert!(v["pending"][0]["requested_at_ms"].is_i64(), "{v}");
    // A later step re-attaches with a bound of its own.
    let waiting = v["run_id"].as_str().unwrap();
    let out = baton(
        &server,
        &[
            "result",
            waiting,
            "--wait",
            "--wait-timeout",
            "2s",
            "--json",
        ],
    )
    .unwrap();
    assert_eq!(out.code, 3, "{out}");
    assert!(out.stderr.contains("it goes on"), "{out}");

    let out = baton(&server, &["status", "no-such-run"]).unwrap();
    assert_eq!(out.code, 2, "{out}");
    assert!(out.stderr.contains("no run with id 'no-such-run'"), "{out}");
}

#[test]
fn pending_and_list_find_runs_through_visibility() {
    let server = DevServer::start().unwrap();
    let queue = unique("visibility");
    let _w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let waiting_script = approval_script(dir.path(), "w", &["echo later"]);
    let done_script = script(dir.path(), "d", json!([{"text": "done"}]))
        .display()
        .to_string();
    let label = unique("repo");
    let waiting = submit(
        &server,
        &queue,
        &unique("run-waiting"),
        &[
            "--script",
            &waiting_script,
            "--label",
            &format!("repo={label}"),
            "--label",
            "submitter=ann",
        ],
        "w",
    );
    let done = submit(
        &server,
        &queue,
        &unique("run-done"),
        &[
            "--script",
            &done_script,
            "--label",
            &format!("repo={label}"),
        ],
        "d",
    );
    wait_state(&server, &waiting, "AWAITING_APPROVAL", T);
    result(&server, &done, 0);

    let pending = wait_until_blocking(T, "the waiting run in `baton pending`", || {
        let v: json::Runs<json::PendingRun> = baton(&server, &["pending", "--json"])?.parse()?;
        Ok(v.runs.into_iter().find(|r| r.run_id == waiting.as_str()))
    })
    .unwrap();
    assert_eq!(pending.pending[0].call_id, "call_2_1");
    assert_eq!(pending.pending[0].tool, "shell");
    assert!(pending.pending[0].waiting_seconds >= 0);
    let human = baton(&server, &["pending"]).unwrap();
    assert!(
        human.stdout.contains(&waiting) && human.stdout.contains("baton approve"),
        "{human}"
    );
    let v: json::Runs<json::PendingRun> = baton(&server, &["pending", "--json"])
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        !v.runs.iter().any(|r| r.run_id == done.as_str()),
        "a finished run is not pending"
    );

    let both = wait_until_blocking(T, "both runs listed by label", || {
        let ids = listed(
            &server,
            &["list", "--label", &format!("repo={label}"), "--json"],
        )?;
        Ok((ids.len() == 2).then_some(ids))
    })
    .unwrap();
    assert!(both.contains(&waiting) && both.contains(&done));
    let completed = wait_until_blocking(T, "the completed run by state", || {
        let ids = listed(
            &server,
            &[
                "list",
                "--label",
                &format!("repo={label}"),
                "--state",
                "completed",
                "--json",
            ],
        )?;
        Ok((ids.len() == 1).then_some(ids))
    })
    .unwrap();
    assert_eq!(completed, [done.as_str()]);
    let by_submitter = server
        .temporal(&[
            "workflow",
            "list",
            "--query",
            "BatonSubmitter = 'ann'",
            "-o",
            "json",
        ])
        .unwrap();
    assert!(by_submitter.stdout.contains(&waiting), "{by_submitter}");
    // Approving still works and the run leaves `pending`.
    assert_eq!(
        baton(&server, &["approve", &waiting, "--all"])
            .unwrap()
            .code,
        0
    );
    result(&server, &waiting, 0);
}
