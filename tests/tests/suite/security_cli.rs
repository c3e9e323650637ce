//! What comes back to the user's machine and what the CLI shows (security
//! review #8 and #9), end to end with a real dev server, worker and `baton` CLI: `baton
//! download` and `baton apply` of a run whose tree holds `.git/config` (with
//! `core.fsmonitor`) and hooks write none of it.

#![allow(clippy::unwrap_used)]

use std::{path::Path, time::Duration};

use crate::common;

use baton_tests::*;
use common::*;
use pretty_assertions::assert_eq;
use serde_json::json;

/// `git` in `dir` without the user's configuration; panics on failure.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = run_git(dir, args).unwrap();
    assert_eq!(out.code, 0, "git {args:?} failed: {out}");
    out.stdout.trim().to_owned()
}

/// Every file and link under `dir` with its content (links: their target), sorted.
fn tree(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            let rel = path.strip_prefix(dir).unwrap().display().to_string();
            let kind = entry.file_type().unwrap();
            if kind.is_symlink() {
                out.push((
                    rel,
                    format!("-> {}", std::fs::read_link(&path).unwrap().display()),
                ));
            } else if kind.is_dir() {
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                out.push((rel, String::from_utf8_lossy(&bytes).into_owned()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn download_and_apply_write_nothing_of_the_runs_git_dirs() {
    let server = DevServer::start().unwrap();
    let queue = unique("sec-cli-git");
    let _w = worker(&server, &queue, &[]);
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    git(&project, &["init", "-q", "-b", "main"]);
    std::fs::write(project.join("README.md"), "readme\n").unwrap();
    git(&project, &["add", "-A"]);
    git(&project, &["commit", "-q", "-m", "start"]);

    // The run's shell writes git's files (a `--workspace-from` tree has no `.git` of its
    // own), in three spellings, and one ordinary file.
    let pwned = tmp.path().join("pwned");
    let command = format!(
        "mkdir -p .git/hooks .GIT sub/.git && \
         printf '[core]\\n\\tfsmonitor = \"touch {p}\"\\n' > .git/config && \
         printf '#!/bin/sh\\ntouch {p}\\n' > .git/hooks/post-checkout && \
         chmod +x .git/hooks/post-checkout && \
         printf '[core]\\n\\tfsmonitor = \"touch {p}\"\\n' > .GIT/config && \
         echo x > sub/.git/config && echo fixed > fixed.txt",
        p = pwned.display()
    );
    let script = script(
        tmp.path(),
        "git-files",
        json!([
            {"text": "Writing.", "tool_calls": [{"name": "shell", "arguments": {"command": command}}]},
            {"text": "Done."}
        ]),
    );
    let run = unique("run-git-files");
    let out = baton_with_timeout(
        &server,
        &[
            "submit",
            "--task-queue",
            &queue,
            "--id",
            &run,
            "--script",
            script.to_str().unwrap(),
            "--no-approval",
            "--workspace-from",
            project.to_str().unwrap(),
            "--wait",
            "--json",
            "write git files",
        ],
        &[],
        None,
        Duration::from_secs(180),
    )
    .unwrap();
    assert_eq!(out.code, 0, "{out}");
    let r = out.json().unwrap();
    assert_eq!(r["status"], "COMPLETED", "{r}");

    // `baton download`: the ordinary files, none of git's; exit 0, stderr names what was
    // left out.
    let down = tmp.path().join("down");
    let got = baton(&server, &["download", &run, down.to_str().unwrap()]).unwrap();
    assert_eq!(got.code, 0, "{got}");
    assert_eq!(
        tree(&down),
        [
            ("README.md".to_owned(), "readme\n".to_owned()),
            ("fixed.txt".to_owned(), "fixed\n".to_owned()),
        ]
    );
    for dir in [".git", ".GIT", "sub/.git"] {
        assert!(
            std::fs::symlink_metadata(down.join(dir)).is_err(),
            "{dir} was written: {got}"
        );
        assert!(
            got.stderr.contains(&format!("left out {dir}/")),
            "{dir}: {got}"
        );
    }
    assert!(got.stderr.contains("wrote 2 files"), "{got}");
    let json = baton(
        &server,
        &[
            "download",
            &run,
            tmp.path().join("down2").to_str().unwrap(),
            "--json",
        ],
    )
    .unwrap();
    assert_eq!(json.code, 0, "{json}");
    let v = json.json().unwrap();
    assert_eq!(v["files"], 2, "{v}");
    assert_eq!(
        v["left_out"],
        json!([
            {"path": ".GIT", "entries": 1},
            {"path": ".git", "entries": 2},
            {"path": "sub/.git", "entries": 1}
        ]),
        "{v}"
    );
    // Downloading into the user's checkout leaves its git files alone.
    let checkout = tmp.path().join("checkout");
    git(
        tmp.path(),
        &["clone", "-q", project.to_str().unwrap(), "checkout"],
    );
    let config_before = std::fs::read(checkout.join(".git/config")).unwrap();
    let into = baton(&server, &["download", &run, checkout.to_str().unwrap()]).unwrap();
    assert_eq!(into.code, 0, "{into}");
    assert_eq!(
        std::fs::read(checkout.join(".git/config")).unwrap(),
        config_before
    );
    assert!(!checkout.join(".git/hooks/post-checkout").exists());
    assert!(!checkout.join(".GIT").exists());
    git(&checkout, &["status", "--short"]);
    assert!(!pwned.exists(), "a command from the run's tree ran");

    // `baton apply`: the change set holds `.GIT/config` (only `.git` itself is left out of
    // change sets); the whole patch is refused, nothing changes.
    let clone = tmp.path().join("clone");
    git(
        tmp.path(),
        &["clone", "-q", project.to_str().unwrap(), "clone"],
    );
    let before = tree(&clone);
    let applied = baton(&server, &["apply", &run, "-C", clone.to_str().unwrap()]).unwrap();
    assert_eq!(applied.code, 2, "{applied}");
    assert!(
        applied
            .stderr
            .contains("'.GIT/config': inside a .git directory")
            && applied.stderr.contains("nothing was changed"),
        "{applied}"
    );
    assert_eq!(tree(&clone), before, "apply changed files");
    assert!(!pwned.exists(), "a command from the run's tree ran");
}

/// `baton <args>` on a terminal (a pty from util-linux `script`), `input` typed in; returns
/// what the terminal showed, its `\r\n` line ends as `\n`.
fn baton_on_a_terminal(server: &DevServer, args: &[&str], input: &str) -> CmdOutput {
    let mut line = bin_path("baton").unwrap().display().to_string();
    for a in args {
        line.push_str(&format!(" '{a}'"));
    }
    let mut cmd = clean_command("script");
    cmd.args(["-qec", &line, "/dev/null"])
        .env("TEMPORAL_ADDRESS", server.address())
        .env("TEMPORAL_NAMESPACE", server.namespace())
        .env("BATON_STORE__DIR", server.blob_dir());
    let mut out = RunningCmd::spawn(cmd, Some(input))
        .unwrap()
        .wait(Duration::from_secs(120))
        .unwrap();
    out.stdout = out.stdout.replace("\r\n", "\n");
    out
}

/// No raw carriage return (a `\n` line end aside), escape or C1 control, nor a bidi override.
fn assert_printable(what: &str, text: &str) {
    let bad: Vec<char> = text
        .chars()
        .filter(
            |c| matches!(c, '\r' | '\x1b' | '\x07' | '\u{80}'..='\u{9f}' | '\u{202a}'..='\u{202e}'),
        )
        .collect();
    assert!(bad.is_empty(), "{what} prints {bad:?} raw:\n{text:?}");
}

/// Review #9a: a command holding `\r` and `\x1b[2K` (which would hide its start on a
/// terminal) is shown escaped by the approval prompt and every listing; its output's escape
/// sequences (an OSC 52 clipboard write, a line erase) are shown escaped by `transcript`
/// and `watch`; `--json` keeps them exact.
#[test]
fn approval_prompts_listings_and_transcripts_show_control_characters_escaped() {
    let server = DevServer::start().unwrap();
    let queue = unique("sec-cli-ctl");
    let _w = worker(&server, &queue, &[]);
    let tmp = tempfile::tempdir().unwrap();
    // What runs: the printf (the rest is a comment to sh). What a raw terminal shows of it:
    // `$ ls -la`.
    let command = "printf 'out\\033]52;c;cHduZWQ=\\007 \\r\\033[2Kdone \\342\\200\\256x\\n' \
                   #\r\x1b[2K$ ls -la";
    let script = shell_script(tmp.path(), "ctl", "Listing.", &[command]);
    let run = submit(
        &server,
        &queue,
        &unique("run-ctl"),
        &["--script", &script],
        "list",
    );
    let status = wait_state(&server, &run, "AWAITING_APPROVAL", Duration::from_secs(60));
    assert_eq!(status["pending"][0]["call_id"], "call_1_1", "{status}");
    let arguments: serde_json::Value =
        serde_json::from_str(status["pending"][0]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments["command"], command, "--json is exact");

    // The listings.
    let pending = baton(&server, &["pending"]).unwrap();
    assert_eq!(pending.code, 0, "{pending}");
    assert!(pending.stdout.contains("call_1_1"), "{pending}");
    assert_printable("pending", &pending.stdout);
    let shown = baton(&server, &["status", &run]).unwrap();
    assert_printable("status", &shown.stdout);
    let listed = baton(&server, &["approve", &run]).unwrap();
    assert_eq!(listed.code, 2, "no terminal: {listed}");
    assert!(listed.stderr.contains("call_1_1"), "{listed}");
    assert_printable("approve without a terminal", &listed.stderr);

    // The prompt, on a terminal: the whole command, its `\r` and escape visible.
    let prompt = baton_on_a_terminal(&server, &["approve", &run], "a\n\n");
    assert_eq!(prompt.code, 0, "{prompt}");
    assert_printable("the approval prompt", &prompt.stdout);
    assert!(
        prompt.stdout.contains("    $ printf 'out")
            && prompt.stdout.contains(" #\\r\\x1b[2K$ ls -la"),
        "{prompt}"
    );
    assert!(prompt.stdout.contains("call_1_1: approved"), "{prompt}");
    let r = result(&server, &run, 0);
    assert_eq!(r["status"], "COMPLETED", "{r}");

    // The output, in the transcript and in watch: escaped; in --json: exact.
    let transcript = baton(&server, &["transcript", &run]).unwrap();
    assert_eq!(transcript.code, 0, "{transcript}");
    assert_printable("transcript", &transcript.stdout);
    assert!(
        transcript
            .stdout
            .contains("out\\x1b]52;c;cHduZWQ=\\x07 \\r\\x1b[2Kdone \\u{202e}x"),
        "{transcript}"
    );
    let watch = baton(&server, &["watch", &run]).unwrap();
    assert_printable("watch", &watch.stdout);
    assert!(watch.stdout.contains("\\x1b]52"), "{watch}");
    let json = baton(&server, &["transcript", &run, "--json"]).unwrap();
    assert!(
        json.stdout
            .contains(r"out\u001b]52;c;cHduZWQ=\u0007 \r\u001b[2Kdone"),
        "{json}"
    );
}

/// Review #9b: arguments over the workers' 1 KiB inline limit are cut in the run's history
/// (and so in `PendingCall`); `pending` says so and names `baton show`, `pending --json` and
/// `show` give them whole, and the approval prompt shows them whole.
#[test]
fn long_arguments_awaiting_approval_can_be_seen_whole() {
    let server = DevServer::start().unwrap();
    let queue = unique("sec-cli-long");
    let _w = worker(&server, &queue, &[]);
    let tmp = tempfile::tempdir().unwrap();
    let content = format!(
        "{}TAIL-MARKER-5e1d rm -rf \x1b[2K ~\n",
        "harmless line\n".repeat(150)
    );
    assert!(content.len() > 2048);
    let arguments = json!({"path": "notes.txt", "content": content});
    // Over 1 KiB too, but short enough for the prompt to show all of it.
    let shorter = json!({"path": "short.txt", "content": format!(
        "{}SHORT-MARKER-77b0\n",
        "harmless line\n".repeat(80)
    )});
    assert!(shorter.to_string().len() > 1024);
    let script = script(
        tmp.path(),
        "long",
        json!([
            {"text": "Writing.", "tool_calls": [
                {"name": "write_file", "arguments": arguments},
                {"name": "write_file", "arguments": shorter}
            ]},
            {"text": "Done."}
        ]),
    );
    let run = submit(
        &server,
        &queue,
        &unique("run-long"),
        &[
            "--script",
            script.to_str().unwrap(),
            "--require-approval",
            "write_file",
        ],
        "write",
    );
    let status = wait_status(&server, &run, "AWAITING_APPROVAL", Duration::from_secs(60));
    let cut = status.status.pending[0].arguments.as_ref();
    assert!(
        cut.contains("kept in the blob store]") && !cut.contains("TAIL-MARKER-5e1d"),
        "the history keeps them cut: {status:?}"
    );

    // `pending`: says they are cut and how to see them whole.
    let listed = baton(&server, &["pending"]).unwrap();
    assert_eq!(listed.code, 0, "{listed}");
    assert!(
        listed.stdout.contains(&format!(
            "(arguments cut in the run's history; see them whole: baton show {run} call_1_1)"
        )),
        "{listed}"
    );
    // `pending --json`: whole.
    let pending = baton(&server, &["pending", "--json"]).unwrap();
    assert_eq!(pending.code, 0, "{pending}");
    let v = pending.json().unwrap();
    let ours = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run_id"] == run.as_str())
        .unwrap();
    let call = &ours["pending"][0];
    assert_eq!(call["call_id"], "call_1_1", "{v}");
    assert_eq!(call["arguments_cut"], true, "{v}");
    let whole: serde_json::Value =
        serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(whole, arguments, "pending --json has them whole");

    // `show`: whole, exact in --json, escaped for people.
    let shown = baton(&server, &["show", &run, "call_1_1", "--json"]).unwrap();
    assert_eq!(shown.code, 0, "{shown}");
    let s = shown.json().unwrap();
    assert_eq!(s["tool"], "write_file", "{s}");
    assert_eq!(s["cut_in_history"], true, "{s}");
    let exact = s["arguments"].as_str().unwrap();
    assert_eq!(s["bytes"], exact.len(), "{s}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(exact).unwrap(),
        arguments
    );
    let human = baton(&server, &["show", &run, "call_1_1"]).unwrap();
    assert_eq!(human.code, 0, "{human}");
    assert!(
        human
            .stdout
            .contains("TAIL-MARKER-5e1d rm -rf \\u001b[2K ~"),
        "{human}"
    );
    assert!(
        human.stdout.contains("(whole, from the blob store"),
        "{human}"
    );
    assert_printable("show", &human.stdout);
    let unknown = baton(&server, &["show", &run, "call_9_9"]).unwrap();
    assert_eq!(unknown.code, 2, "{unknown}");
    assert!(unknown.stderr.contains("no call call_9_9"), "{unknown}");

    // The prompt: the whole arguments (up to 2,000 characters, then where the rest is).
    let prompt = baton_on_a_terminal(&server, &["approve", &run], "d\nnot now\nd\nno\n");
    assert_eq!(prompt.code, 0, "{prompt}");
    assert!(prompt.stdout.contains("SHORT-MARKER-77b0"), "{prompt}");
    assert!(!prompt.stdout.contains("may be cut"), "{prompt}");
    assert!(
        prompt.stdout.contains(&format!(
            "(the first 2000 of {} characters; all of them: baton show {run} call_1_1)",
            // The prompt counts the JSON text's characters, as the model wrote it.
            exact.chars().count()
        )),
        "{prompt}"
    );
    assert!(prompt.stdout.contains("call_1_1: denied"), "{prompt}");
    assert!(prompt.stdout.contains("call_1_2: denied"), "{prompt}");
    let r = ended(&server, &run, 0);
    assert_eq!(r.status, "COMPLETED", "{r:?}");
}

/// The call ids of every `approve` update the run's history accepted, in order.
fn approve_updates(server: &DevServer, run: &str) -> Vec<String> {
    let history = server.workflow_history_json(run, None).unwrap();
    history["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| {
            e.as_object()?
                .iter()
                .find(|(k, _)| k.starts_with("workflowExecutionUpdateAccepted"))
                .map(|(_, v)| v.clone())
        })
        .map(|accepted| {
            let text = decode_history_payloads(&accepted["acceptedRequest"]["input"]);
            let decision: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
            decision["call_id"].as_str().unwrap().to_owned()
        })
        .collect()
}

/// Review #9c: `approve --all` decides the calls it listed, by id, not `*` (which the
/// workflow applies to whatever is pending when it arrives).
#[test]
fn approve_all_decides_the_listed_calls_by_id() {
    let server = DevServer::start().unwrap();
    let queue = unique("sec-cli-all");
    let w = worker(&server, &queue, &[]);
    let tmp = tempfile::tempdir().unwrap();
    let script = approval_script(tmp.path(), "all", &["echo one > one.txt", "echo two"]);
    let run = submit(
        &server,
        &queue,
        &unique("run-all"),
        &["--script", &script],
        "two",
    );
    let status = wait_status(&server, &run, "AWAITING_APPROVAL", Duration::from_secs(60));
    assert_eq!(status.status.pending.len(), 2, "{status:?}");

    let all = baton(&server, &["approve", &run, "--all", "--approver", "alice"]).unwrap();
    assert_eq!(all.code, 0, "{all}");
    // It says what it decides, then each decision.
    assert!(
        all.stderr.contains("approving the 2 call(s) of run")
            && all.stderr.contains("call_2_1  shell")
            && all.stderr.contains("call_2_2  shell"),
        "{all}"
    );
    assert!(all.stdout.contains("call_2_1: approved"), "{all}");
    assert!(all.stdout.contains("call_2_2: approved"), "{all}");
    let r = ended(&server, &run, 0);
    assert_eq!(r.status, "COMPLETED", "{r:?}");
    assert!(w.workspace_root().join(&run).join("one.txt").exists());
    assert_eq!(approve_updates(&server, &run), ["call_2_1", "call_2_2"]);
}
