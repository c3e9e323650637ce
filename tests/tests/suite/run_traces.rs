//! One trace per run, end to end: workers export to an OTLP/gRPC receiver
//! written with the official Python packages (`tests/otlp/receiver.py`, on
//! `opentelemetry-proto` and `grpcio`). A run calls the model, waits for an approval of a
//! shell call, and its worker is killed with SIGKILL while the approved call runs; another
//! worker replays the history (the approval wait among it) and finishes the run. The receiver
//! gets exactly one trace: one `invoke_agent` root, a `chat` span per model call with the
//! GenAI attributes, the `execute_tool` span, the `approval` span naming who approved, every
//! span a child of the root, no span twice, and no prompt or output.

#![allow(clippy::unwrap_used)]

use std::{collections::BTreeSet, path::PathBuf, sync::Arc, time::Duration};

use crate::common;

use baton_tests::*;
use common::*;
use pretty_assertions::assert_eq;
use serde_json::Value;

/// The Python OTLP/gRPC receiver, appending each span it gets to a JSON-lines file.
struct Receiver {
    _process: RunningCmd,
    file: PathBuf,
    port: u16,
}

impl Receiver {
    fn start(dir: &std::path::Path) -> Receiver {
        let file = dir.join("spans.jsonl");
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("otlp/receiver.py");
        let mut cmd = clean_command("python3");
        cmd.arg(&script).arg(&file);
        let process = RunningCmd::spawn(cmd, None).unwrap();
        let port = wait_until_blocking(Duration::from_secs(30), "the OTLP receiver", || {
            let out = process.stdout_so_far();
            Ok(out
                .lines()
                .find_map(|l| l.strip_prefix("listening on "))
                .and_then(|p| p.trim().parse().ok()))
        })
        .unwrap();
        Receiver {
            _process: process,
            file,
            port,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn spans(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.file)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Waits until a span satisfies `found`; all spans then.
    fn wait_for(&self, what: &str, found: impl Fn(&Value) -> bool) -> Vec<Value> {
        wait_until_blocking(Duration::from_secs(60), what, || {
            let spans = self.spans();
            Ok(spans.iter().any(&found).then_some(spans))
        })
        .unwrap()
    }
}

fn named(span: &Value, prefix: &str) -> bool {
    span["name"]
        .as_str()
        .unwrap_or_default()
        .starts_with(prefix)
}

#[test]
fn a_run_whose_worker_is_killed_mid_run_is_one_trace_without_duplicates() {
    let server = DevServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(dir.path());
    let llm = MockOpenAi::start().unwrap();
    llm.set_responder(Arc::new(|req| {
        let answered = req.messages().iter().any(|m| m["role"] == "tool");
        Some(MockResponse::ok(if answered {
            MockOpenAi::text_reply("Done: the greeting was printed.")
        } else {
            MockOpenAi::tool_calls_reply(&[(
                "call_1",
                "shell",
                r#"{"command":"sleep 4 && echo hello"}"#,
            )])
        }))
    }));
    let queue = unique("trace");
    let base = llm.base_url();
    let endpoint = receiver.endpoint();
    let env = [
        ("OPENAI_BASE_URL", base.as_str()),
        ("BATON_OTEL__TRACES_ENDPOINT", endpoint.as_str()),
    ];
    let mut a = worker(&server, &queue, &env);
    let run = submit(
        &server,
        &queue,
        &unique("traced"),
        &["--provider", "openai", "--model", "gpt-4o-mini"],
        "print a greeting",
    );
    let status = wait_status(&server, &run, "AWAITING_APPROVAL", Duration::from_secs(60));
    let call = status.status.pending[0].call_id.to_string();
    // Worker A exported its model call and, once approved, the approval wait; it dies while
    // the tool runs. Worker B replays the history (the wait among it: no second approval
    // span), runs the tool again and finishes the run.
    receiver.wait_for("worker A's chat span", |s| named(s, "chat "));
    let out = baton(&server, &["approve", &run, &call, "--approver", "alice"]).unwrap();
    assert_eq!(out.code, 0, "{out}");
    receiver.wait_for("worker A's approval span", |s| named(s, "approval"));
    a.kill9();
    let _b = worker(&server, &queue, &env);
    let r = ended(&server, &run, 0);
    assert_eq!(r.reason, "completed", "{r:?}");
    let spans = receiver.wait_for("the root span", |s| named(s, "invoke_agent"));

    // One trace.
    let traces: BTreeSet<&str> = spans
        .iter()
        .map(|s| s["trace_id"].as_str().unwrap())
        .collect();
    assert_eq!(traces.len(), 1, "{spans:#?}");
    // No span twice (a replay made none).
    let ids: Vec<&str> = spans
        .iter()
        .map(|s| s["span_id"].as_str().unwrap())
        .collect();
    let unique_ids: BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!(ids.len(), unique_ids.len(), "a span came twice: {spans:#?}");
    // The root, and everything under it.
    let roots: Vec<&Value> = spans.iter().filter(|s| named(s, "invoke_agent")).collect();
    assert_eq!(roots.len(), 1, "{spans:#?}");
    let root = roots[0];
    assert_eq!(root["parent_span_id"], "", "{root}");
    assert_eq!(root["attributes"]["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(root["attributes"]["gen_ai.conversation.id"], run.as_str());
    assert_eq!(root["attributes"]["baton.reason"], "completed");
    assert!(root["start"].as_u64() < root["end"].as_u64(), "{root}");
    for s in &spans {
        if !named(s, "invoke_agent") {
            assert_eq!(s["parent_span_id"], root["span_id"], "{s}");
            assert!(
                s["start"].as_u64() >= root["start"].as_u64(),
                "a span starts before its run: {s}"
            );
        }
    }
    // Two model calls, one on each worker, with the GenAI attributes.
    let chats: Vec<&Value> = spans.iter().filter(|s| named(s, "chat ")).collect();
    assert_eq!(chats.len(), 2, "{spans:#?}");
    let instances: BTreeSet<&str> = chats
        .iter()
        .map(|s| s["resource"]["service.instance.id"].as_str().unwrap())
        .collect();
    assert_eq!(instances.len(), 2, "each worker made one call: {chats:#?}");
    for c in &chats {
        let a = &c["attributes"];
        assert_eq!(a["gen_ai.operation.name"], "chat", "{c}");
        assert_eq!(a["gen_ai.request.model"], "gpt-4o-mini", "{c}");
        assert_eq!(a["gen_ai.provider.name"], "openai", "{c}");
        assert!(a["gen_ai.usage.input_tokens"].as_i64().unwrap() > 0, "{c}");
        assert!(a["gen_ai.usage.output_tokens"].as_i64().unwrap() > 0, "{c}");
        assert_eq!(a["baton.attempt"], 1, "{c}");
        assert!(
            a.get("gen_ai.output.messages").is_none(),
            "content is off: {c}"
        );
    }
    // The tool call and the approval wait.
    let tools: Vec<&Value> = spans.iter().filter(|s| named(s, "execute_tool ")).collect();
    assert_eq!(tools.len(), 1, "{spans:#?}");
    assert_eq!(tools[0]["attributes"]["gen_ai.tool.name"], "shell");
    assert_eq!(tools[0]["attributes"]["gen_ai.tool.call.id"], call.as_str());
    assert!(
        tools[0]["attributes"]
            .get("gen_ai.tool.call.arguments")
            .is_none()
    );
    let approvals: Vec<&Value> = spans.iter().filter(|s| named(s, "approval")).collect();
    assert_eq!(approvals.len(), 1, "{spans:#?}");
    assert_eq!(
        approvals[0]["attributes"]["baton.approval.approver"],
        "alice"
    );
    assert!(
        approvals[0]["attributes"]["baton.approval.waited_ms"]
            .as_i64()
            .unwrap()
            > 0
    );
    // Nothing of the conversation.
    let all = serde_json::to_string(&spans).unwrap();
    assert!(!all.contains("print a greeting"), "the task is in a span");
    assert!(!all.contains("echo hello"), "the arguments are in a span");
    // The tool span is the attempt that finished, on worker B.
    assert_eq!(tools[0]["attributes"]["baton.attempt"], 2, "{}", tools[0]);
}
