//! Encrypted history end to end: a worker and `baton` with `BATON_CODEC_KEYS` write nothing of
//! a run (prompt, tool output, approval reason, provider errors) in plain text to the server,
//! read all of it back, survive a key rotation, and `baton codec-server` decodes the history
//! for the `temporal` CLI. Also approver identities: approvals attributed to the Temporal
//! client that sent them, and policies that restrict who may decide.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

use baton_tests::*;
use common::*;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(60);

/// `baton ARGS` with the given codec keys, asserting the exit code.
fn b(server: &DevServer, keys: &str, args: &[&str], code: i32) -> CmdOutput {
    let out = baton_with_timeout(
        server,
        args,
        &[("BATON_CODEC_KEYS", keys)],
        None,
        Duration::from_secs(120),
    )
    .unwrap();
    assert_eq!(out.code, code, "{out}");
    out
}

/// Sends one raw HTTP/1.1 request (`Host` and `Connection: close` added) to 127.0.0.1:`port`
/// and returns the whole response.
fn http(port: u16, request: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(T)).unwrap();
    let (head, body) = request.split_once("\r\n\r\n").unwrap();
    write!(
        stream,
        "{head}\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n{body}"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

/// A worker on `queue` with the given codec keys, ready to poll.
fn encrypted_worker(server: &DevServer, llm: &MockOpenAi, queue: &str, keys: &str) -> Worker {
    let base = llm.base_url();
    let w = worker(
        server,
        queue,
        &[
            ("OPENAI_BASE_URL", base.as_str()),
            ("BATON_CODEC_KEYS", keys),
        ],
    );
    assert!(w.log().contains("payload encryption on"), "{}", w.log());
    w
}

/// Asserts no marker is in the history in plain text (raw JSON and every payload decoded), and
/// every payload outside search attributes is encrypted with `key_id`.
fn assert_sealed(server: &DevServer, run: &str, markers: &[&str], key_id: &str) {
    let history = server.workflow_history_json(run, None).unwrap();
    let text = history_search_text(&history);
    for m in markers {
        assert!(
            !text.contains(m),
            "{m} is in the history of {run} in plain text"
        );
    }
    let payloads = history_payloads(&history);
    // The run's input, each activity's input and result, and the run's result are all there
    // to be checked.
    for kind in [
        "workflowExecutionStartedEventAttributes/input",
        "activityTaskScheduledEventAttributes/input",
        "activityTaskCompletedEventAttributes/result",
        "workflowExecutionCompletedEventAttributes/result",
    ] {
        assert!(
            payloads.iter().any(|p| p.path.contains(kind)),
            "no {kind} payload in the history of {run}: {payloads:?}"
        );
    }
    // Patch markers are written by the SDK core itself, not through the codec: they hold the
    // patch id only.
    let plain: Vec<&PayloadSeen> = payloads
        .iter()
        .filter(|p| {
            !p.path
                .contains("markerRecordedEventAttributes/details/patch-data/")
        })
        .filter(|p| p.encoding != "binary/encrypted" || p.key_id.as_deref() != Some(key_id))
        .collect();
    assert!(
        plain.is_empty(),
        "payloads of {run} not encrypted with {key_id}: {plain:#?}"
    );
    // Failures keep only a placeholder message; the real one is in the encrypted attributes.
    for e in history["events"].as_array().unwrap() {
        for (kind, key) in [
            ("activityTaskFailedEventAttributes", "failure"),
            ("activityTaskStartedEventAttributes", "lastFailure"),
        ] {
            if let Some(f) = e[kind][key].as_object() {
                assert_eq!(f["message"], "Encoded failure", "{f:?}");
                assert!(f.contains_key("encodedAttributes"), "{f:?}");
            }
        }
    }
}

#[test]
fn history_is_encrypted_keys_rotate_and_the_codec_server_decodes() {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    let queue = unique("encrypted");
    let tag = unique("m");
    let k1 = codec_key();
    let k2 = codec_key();
    let keys1 = format!("k1={k1}");
    let keys2 = format!("k2={k2},k1={k1}");

    let prompt = format!("prompt-{tag}");
    let reason = format!("reason-{tag}");
    // The command computes its output markers, so they are not in the command text itself.
    let out_mark = format!("stdout-42-{tag}");
    let err_mark = format!("stderr-42-{tag}");
    let command = format!(
        "echo stdout-$((6*7))-{tag} keys=[$BATON_CODEC_KEYS]; echo stderr-$((6*7))-{tag} >&2; exit 3"
    );
    let e500 = format!("upstream-500-{tag}");
    let e400 = format!("rejected-400-{tag}");
    let arguments = serde_json::json!({ "command": command }).to_string();
    llm.push_tool_calls(&[("call_1", "shell", &arguments)]);
    llm.push_error(500, MockOpenAi::error_body(&e500, "server_error"));
    llm.push_error(400, MockOpenAi::error_body(&e400, "invalid_request_error"));

    let mut w1 = encrypted_worker(&server, &llm, &queue, &keys1);
    let run1 = unique("run-enc");
    let task = format!("Please run the check for {prompt}.");
    b(
        &server,
        &keys1,
        &[
            "submit",
            "--task-queue",
            &queue,
            "--id",
            &run1,
            "--provider",
            "openai",
            "--require-approval",
            "shell",
            &task,
        ],
        0,
    );

    // (a) The approval: status (decrypted query or memo) shows the pending command.
    let status = wait_until_blocking(T, "run 1 awaiting approval", || {
        let v = b(&server, &keys1, &["status", &run1, "--json"], 0).json()?;
        Ok((v["state"] == "AWAITING_APPROVAL").then_some(v))
    })
    .unwrap();
    assert!(
        status["pending"][0]["arguments"]
            .as_str()
            .unwrap()
            .contains(&tag),
        "{status}"
    );
    b(
        &server,
        &keys1,
        &["approve", &run1, "--all", "--reason", &reason],
        0,
    );

    // (b) the tool fails with the stderr marker, (c) the provider answers 500 then 400: the run
    // ends with the provider's message.
    let out = b(&server, &keys1, &["result", &run1, "--wait", "--json"], 1);
    let result: Value = out.json().unwrap();
    assert_eq!(result["reason"], "provider_error", "{result}");
    assert!(
        result["detail"].as_str().unwrap().contains(&e400),
        "{result}"
    );
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 3, "one tool call, a 500, a 400");
    let seen = reqs[1].body.to_string();
    assert!(
        seen.contains(&prompt) && seen.contains(&out_mark) && seen.contains(&err_mark),
        "the model saw the prompt and the tool output: {seen}"
    );
    assert!(
        seen.contains("keys=[]"),
        "the keys leaked into a tool: {seen}"
    );

    // Everything is readable with the key...
    let transcript = b(&server, &keys1, &["transcript", &run1], 0).stdout;
    for m in [&prompt, &out_mark, &err_mark] {
        assert!(
            transcript.contains(m.as_str()),
            "{m} missing:\n{transcript}"
        );
    }
    let events = b(&server, &keys1, &["watch", &run1, "--json"], 1).stdout;
    assert!(events.contains(&reason), "the approval reason: {events}");
    assert!(events.contains(&e400), "{events}");

    // ...and none of it is in the server's history in plain text.
    let markers = [
        prompt.as_str(),
        &reason,
        &out_mark,
        &err_mark,
        &e500,
        &e400,
        &tag,
    ];
    assert_sealed(&server, &run1, &markers, "k1");
    let history = server.workflow_history_json(&run1, None).unwrap();
    let retried = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["activityTaskStartedEventAttributes"]["lastFailure"].is_object());
    assert!(
        retried,
        "the 500 is recorded as the last failure of the retried call"
    );
    let failed = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["activityTaskFailedEventAttributes"]["failure"].is_object());
    assert!(failed, "the 400 is recorded as the failure of the call");

    // With no worker, status reads the (encrypted) memo.
    w1.terminate().unwrap();
    let status = b(&server, &keys1, &["status", &run1, "--json"], 0)
        .json()
        .unwrap();
    assert_eq!(
        (status["source"].as_str(), status["state"].as_str()),
        (Some("memo"), Some("FAILED")),
        "{status}"
    );

    // Rotation: the new key first, the old one after it.
    let mut w2 = encrypted_worker(&server, &llm, &queue, &keys2);
    let transcript = b(&server, &keys2, &["transcript", &run1], 0).stdout;
    assert!(
        transcript.contains(&err_mark),
        "old run readable:\n{transcript}"
    );
    let answer2 = format!("answer2-{tag}");
    llm.push_text(&answer2);
    let run2 = unique("run-enc2");
    let task2 = format!("second {prompt}");
    b(
        &server,
        &keys2,
        &[
            "submit",
            "--task-queue",
            &queue,
            "--id",
            &run2,
            "--provider",
            "openai",
            "--no-approval",
            &task2,
        ],
        0,
    );
    let r2 = b(&server, &keys2, &["result", &run2, "--wait", "--json"], 0)
        .json()
        .unwrap();
    assert_eq!(r2["answer"], answer2.as_str());
    assert_sealed(&server, &run2, &[&answer2, &tag], "k2");
    assert_sealed(&server, &run1, &markers, "k1");
    // Without the old key, the old run's payloads cannot be read, and the error says why.
    let k2_only = format!("k2={k2}");
    let denied = b(&server, &k2_only, &["result", &run1, "--json"], 5);
    let said = denied.to_string();
    assert!(
        said.contains("'k1'") && said.contains("BATON_CODEC_KEYS"),
        "{denied}"
    );
    // Without any key, the same: not the JSON converter's "Wrong encoding".
    for args in [["status", run1.as_str()], ["result", run1.as_str()]] {
        let denied = b(&server, "", &args, 5).to_string();
        assert!(
            denied.contains("'k1'") && denied.contains("BATON_CODEC_KEYS"),
            "{args:?}: {denied}"
        );
    }

    // The codec server decodes both runs for the `temporal` CLI.
    let port = free_port().unwrap();
    let token = unique("token");
    let mut codec = baton_spawn(
        &server,
        &[
            "codec-server",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--cors-origin",
            "http://localhost:8233",
        ],
        &[("BATON_CODEC_KEYS", &keys2), ("BATON_CODEC_TOKEN", &token)],
    )
    .unwrap();
    wait_until_blocking(T, "codec server listening", || {
        assert!(codec.is_running(), "codec server exited");
        Ok(TcpStream::connect(("127.0.0.1", port)).ok().map(|_| ()))
    })
    .unwrap();
    let endpoint = format!("http://127.0.0.1:{port}");
    let auth = format!("Bearer {token}");
    for (run, mark) in [(&run1, &err_mark), (&run2, &answer2)] {
        let shown = server
            .temporal(&[
                "workflow",
                "show",
                "-w",
                run,
                "-o",
                "json",
                "--codec-endpoint",
                &endpoint,
                "--codec-auth",
                &auth,
            ])
            .unwrap()
            .ensure_success()
            .unwrap();
        let text = history_search_text(&shown.json().unwrap());
        assert!(text.contains(mark.as_str()), "{run} not decoded: {text}");
    }
    // Without the token: 401 (the `temporal` CLI would retry it until its deadline). A
    // browser's preflight from the Web UI's origin needs no token.
    let no_token = http(
        port,
        "POST /default/decode HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
    );
    assert!(no_token.starts_with("HTTP/1.1 401"), "{no_token}");
    let preflight = http(
        port,
        "OPTIONS /default/decode HTTP/1.1\r\nOrigin: http://localhost:8233\r\n\
         Access-Control-Request-Method: POST\r\n\r\n",
    )
    .to_lowercase();
    assert!(preflight.starts_with("http/1.1 204"), "{preflight}");
    assert!(
        preflight.contains("access-control-allow-origin: http://localhost:8233")
            && preflight
                .contains("access-control-allow-headers: content-type, authorization, x-namespace"),
        "{preflight}"
    );
    codec.signal(Signal::SIGTERM).unwrap();
    let stopped = codec.wait(Duration::from_secs(10)).unwrap();
    assert_eq!(stopped.code, 0, "{stopped}");
    w2.terminate().unwrap();
}

/// Approvals are attributed to the Temporal client identity that sent them (from history, not
/// the self-declared approver), and a policy's `approvers` restrict who may decide: a refused
/// update fails with the reason, a refused signal is ignored and noted, and the run waits on.
#[test]
fn approvals_are_attributed_and_restricted_by_identity() {
    let server = DevServer::start().unwrap();
    let queue = unique("approvers");
    let w = worker(&server, &queue, &[]);
    let dir = tempfile::tempdir().unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned();
    let policy = dir.path().join("policy.json");
    std::fs::write(
        &policy,
        r#"{"require_approval": ["shell"],
            "approvers": [{"tool": "shell", "identities": ["alice@*", "ci:github:*@acme/app/*"]}]}"#,
    )
    .unwrap();
    let s = approval_script(dir.path(), "s", &["echo approved-ok > ok.txt"]);
    let run = submit(
        &server,
        &queue,
        &unique("run-id"),
        &["--script", &s, "--policy", policy.to_str().unwrap()],
        "guarded task",
    );
    wait_state(&server, &run, "AWAITING_APPROVAL", T);
    let as_user = |user: &str, args: &[&str]| {
        let mut all = vec!["approve", run.as_str(), "--all"];
        all.extend_from_slice(args);
        // The approver name claims to be alice: only the identity counts.
        all.extend_from_slice(&["--approver", "alice"]);
        baton_with(&server, &all, &[("USER", user)], None).unwrap()
    };

    // bob's update is rejected by the validator, with what is allowed.
    let bob = as_user("bob", &[]);
    assert_eq!(bob.code, 2, "{bob}");
    assert!(
        bob.stderr.contains(&format!(
            "identity 'bob@{host}' may not decide calls of tool 'shell'"
        )),
        "{bob}"
    );
    assert!(bob.stderr.contains("alice@*"), "{bob}");
    // bob's signal is ignored (and noted); the run keeps waiting.
    let bob_signal = as_user("bob", &["--signal"]);
    assert_eq!(
        bob_signal.code, 0,
        "a signal cannot be refused: {bob_signal}"
    );
    wait_until_blocking(T, "the ignored signal noted in the status", || {
        let t = baton(&server, &["status", &run, "--json"])?.stdout;
        Ok(t.contains(&format!(
            "approval ignored: identity 'bob@{host}' may not decide"
        ))
        .then_some(()))
    })
    .unwrap();
    let status = wait_status(&server, &run, "AWAITING_APPROVAL", T);
    assert_eq!(status.status.pending.len(), 1, "{status:?}");
    assert!(!w.workspace_root().join(&run).join("ok.txt").exists());

    // alice may; the decision records her identity next to the name she gave.
    let alice = as_user("alice", &[]);
    assert_eq!(alice.code, 0, "{alice}");
    let r = ended(&server, &run, 0);
    assert_eq!(r.status, "COMPLETED", "{r:?}");
    assert!(w.workspace_root().join(&run).join("ok.txt").exists());
    let watch = baton(&server, &["watch", &run, "--json"]).unwrap();
    let decided: Vec<Value> = watch
        .json_lines()
        .unwrap()
        .into_iter()
        .filter(|l| l["kind"] == "approval_decided")
        .collect();
    assert_eq!(decided.len(), 1, "{watch}");
    assert_eq!(
        decided[0]["approval_decided"]["identity"],
        json!(format!("alice@{host}"))
    );

    // A CI job is named by the CI's variables.
    let s2 = approval_script(dir.path(), "s2", &["echo from-ci"]);
    let ci = submit(
        &server,
        &queue,
        &unique("run-ci"),
        &["--script", &s2, "--policy", policy.to_str().unwrap()],
        "ci task",
    );
    wait_state(&server, &ci, "AWAITING_APPROVAL", T);
    let from_ci = baton_with(
        &server,
        &["approve", &ci, "--all"],
        &[
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_ACTOR", "carol"),
            ("GITHUB_REPOSITORY", "acme/app"),
            ("GITHUB_RUN_ID", "99"),
        ],
        None,
    )
    .unwrap();
    assert_eq!(from_ci.code, 0, "{from_ci}");
    let r = ended(&server, &ci, 0);
    assert_eq!(r.status, "COMPLETED", "{r:?}");
}
