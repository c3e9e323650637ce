//! baton against a real OpenAI-compatible inference server, not a
//! mock: llama.cpp's server (`llama-cpp-python[server]`, chat format
//! `chatml-function-calling`) serving SmolLM2-135M-Instruct on loopback, behind a
//! [`RecordingProxy`] that records every request and the status it got. The model is tiny, so
//! the tests assert only what does not depend on its wits: every request baton sends is
//! answered 200 (streaming and not), a run ends completed or for a reason the model caused,
//! never `provider_error`, and its usage is what the server reported (non-streaming) or an
//! estimate that says so (llama-cpp-python streams no usage). Tool turns: the proxy answers the
//! first request itself with a `list_files` call, or has the server's model make one (a
//! `tool_choice` added to the forwarded request); either way the request carrying the call and
//! its result is judged by llama.cpp. llama-cpp-python refuses `"content": null` on an
//! assistant message, so baton sends `""` to servers other than OpenAI's own API by default
//! (these runs use the defaults); the last test pins what `null` gets. Installed by `. scripts/lib.sh &&
//! ensure_llama_server`; a missing server fails the tests.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use baton_tests::*;
use common::*;
use serde_json::Value;

/// How long one run may take on a loaded 2-core machine (a few model calls of a 135M model).
const RUN_TIMEOUT: Duration = Duration::from_secs(600);

/// How a run may end: on its own, or for a reason the model caused.
const MODEL_CAUSED: [&str; 4] = [
    "completed",
    "max_turns_exceeded",
    "loop_detected",
    "output_truncated",
];

/// The real server with the recording relay in front of it, and a dev server.
struct Setup {
    llama: LlamaServer,
    proxy: RecordingProxy,
    server: DevServer,
}

impl Setup {
    fn start() -> Setup {
        let llama = LlamaServer::start().unwrap();
        let proxy = RecordingProxy::start(&llama.base_url()).unwrap();
        let server = DevServer::start().unwrap();
        Setup {
            llama,
            proxy,
            server,
        }
    }

    /// Runs `prompt` with `--provider openai --model <the server's model> --max-turns 3
    /// --no-approval` (and `extra`) on a worker of its own that streams or not (with the
    /// extra environment `env`); the result and the Chat Completions exchanges the run made.
    fn run(
        &self,
        stream: bool,
        env: &[(&str, &str)],
        extra: &[&str],
        prompt: &str,
    ) -> (Value, Vec<Exchange>) {
        let queue = unique("llama");
        let base = self.proxy.base_url();
        let stream_setting = if stream { "true" } else { "false" };
        let mut vars = vec![
            ("OPENAI_BASE_URL", base.as_str()),
            ("BATON_OPENAI__STREAM", stream_setting),
        ];
        vars.extend_from_slice(env);
        let _w = worker(&self.server, &queue, &vars);
        let before = self.proxy.completions().len();
        let run = unique("run-llama");
        let mut args = vec![
            "submit",
            "--task-queue",
            &queue,
            "--id",
            &run,
            "--provider",
            "openai",
            "--model",
            self.llama.model(),
            "--max-turns",
            "3",
            // A 135M model on a loaded 2-core machine can ramble for thousands of tokens,
            // which took a streamed call past its limits in one CI run: bound each reply.
            "--max-output-tokens",
            "512",
            "--no-approval",
            "--wait",
            "--wait-timeout",
            "590s",
            "--json",
        ];
        args.extend_from_slice(extra);
        args.push(prompt);
        let out = baton_with_timeout(&self.server, &args, &[], None, RUN_TIMEOUT).unwrap();
        assert!(out.code == 0 || out.code == 1, "{out}");
        let result = out.json().unwrap();
        let exchanges = self.proxy.completions().split_off(before);
        eprintln!(
            "llama.cpp run (stream {stream}): {} ({}), {} calls, usage {}, answer {:?}",
            result["status"],
            result["reason"],
            exchanges.len(),
            result["usage"],
            result["answer"]
        );
        (result, exchanges)
    }
}

/// Every exchange was answered 200, with a body of the kind asked for.
fn assert_all_accepted(exchanges: &[Exchange], stream: bool) {
    assert!(!exchanges.is_empty(), "no request reached the server");
    for (n, e) in exchanges.iter().enumerate() {
        assert_eq!(
            e.status, 200,
            "request {n} refused by llama.cpp: {}\nrequest body: {}",
            e.response, e.request
        );
        assert_eq!(e.is_stream(), stream, "request {n}: {}", e.request);
        assert!(
            !e.response_documents().is_empty(),
            "request {n}: no completion in the answer: {:?}",
            e.response
        );
    }
}

/// The run ended on its own or for a model-caused reason, never `provider_error`.
fn assert_model_caused_end(r: &Value) {
    let reason = r["reason"].as_str().unwrap_or_default();
    assert!(MODEL_CAUSED.contains(&reason), "{r}");
    let wanted = if reason == "completed" {
        "COMPLETED"
    } else {
        "FAILED"
    };
    assert_eq!(r["status"], wanted, "{r}");
}

/// The run's usage: one model call per exchange; input and output tokens never 0; where the
/// server reported usage for every call (the proxy's canned answers included), exactly its
/// sums, and each call it reported none for counted in `estimated_calls`.
fn assert_usage(r: &Value, exchanges: &[Exchange]) {
    let usage = &r["usage"];
    let count = |key: &str| usage[key].as_u64().unwrap_or(0);
    assert_eq!(count("llm_calls"), exchanges.len() as u64, "{r}");
    assert!(count("input_tokens") > 0, "{r}");
    assert!(count("output_tokens") > 0, "{r}");
    let reported: Vec<Option<Value>> = exchanges.iter().map(Exchange::usage).collect();
    let unreported = reported.iter().filter(|u| u.is_none()).count() as u64;
    assert_eq!(count("estimated_calls"), unreported, "{r}\n{reported:?}");
    if unreported == 0 {
        let sum = |key: &str| -> u64 {
            reported
                .iter()
                .flatten()
                .map(|u| u[key].as_u64().unwrap_or(0))
                .sum()
        };
        assert_eq!(count("input_tokens"), sum("prompt_tokens"), "{r}");
        assert_eq!(count("output_tokens"), sum("completion_tokens"), "{r}");
    }
}

/// The request after a tool call: it carries the assistant message calling `list_files` as
/// `call_id` and that call's result, which lists the workspace when `listed` (the call had
/// no arguments).
fn assert_carries_call_and_result(request: &Exchange, call_id: &str, listed: bool) {
    let messages = request.messages();
    let call = messages
        .iter()
        .find(|m| m["role"] == "assistant" && m.get("tool_calls").is_some())
        .unwrap_or_else(|| panic!("no assistant tool_calls message: {}", request.request));
    assert_eq!(call["tool_calls"][0]["id"], call_id, "{}", request.request);
    assert_eq!(call["tool_calls"][0]["function"]["name"], "list_files");
    let result = messages
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap_or_else(|| panic!("no tool result: {}", request.request));
    assert_eq!(result["tool_call_id"], call_id);
    let content = result["content"].as_str().unwrap();
    assert!(!content.is_empty());
    if listed {
        assert!(
            content.contains("README.md") && content.contains("main.py"),
            "{content}"
        );
    }
}

/// A workspace with two files for `list_files` to find.
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README.md"), "# demo\nA small project.\n").unwrap();
    std::fs::write(dir.path().join("main.py"), "print('hello')\n").unwrap();
    dir
}

/// No request in the server's own log was answered with an error.
fn assert_log_has_no_errors(llama: &LlamaServer) {
    let log = llama.log();
    assert!(log.contains("\"POST /v1/chat/completions HTTP/1.1\" 200"));
    assert!(
        !log.contains("HTTP/1.1\" 4") && !log.contains("HTTP/1.1\" 5"),
        "{log}"
    );
}

#[test]
fn streaming_and_non_streaming_runs_are_accepted_by_llama_cpp_with_its_usage() {
    let setup = Setup::start();
    for stream in [true, false] {
        let (r, exchanges) = setup.run(
            stream,
            &[],
            &[],
            "Answer in one short sentence: what colour is the sky?",
        );
        assert_all_accepted(&exchanges, stream);
        assert_model_caused_end(&r);
        assert_usage(&r, &exchanges);
        assert!(exchanges.iter().all(|e| !e.canned && !e.rewritten));
        assert!(
            exchanges.iter().any(|e| !e.text().is_empty()),
            "the model said nothing: {r}"
        );
    }
    assert_log_has_no_errors(&setup.llama);
}

#[test]
fn a_tool_call_and_its_result_are_accepted_by_llama_cpp_streaming_and_not() {
    let setup = Setup::start();
    let dir = workspace();
    let workspace = dir.path().to_str().unwrap().to_owned();
    for stream in [true, false] {
        let call_id = format!("call_llama_{stream}");
        setup.proxy.answer_next(MockOpenAi::tool_calls_reply(&[(
            &call_id,
            "list_files",
            "{}",
        )]));
        let (r, exchanges) = setup.run(
            stream,
            &[],
            &["--workspace-from", &workspace],
            "List the files of the workspace, then name them in one sentence.",
        );
        assert_all_accepted(&exchanges, stream);
        assert_model_caused_end(&r);
        assert_usage(&r, &exchanges);
        assert!(exchanges[0].canned, "the first turn is the proxy's call");
        assert!(exchanges.len() >= 2, "no request after the tool call: {r}");
        // The second request, answered by llama.cpp, carries the call and its result.
        assert!(!exchanges[1].canned);
        assert_carries_call_and_result(&exchanges[1], &call_id, true);
        assert!(
            exchanges
                .iter()
                .filter(|e| e.has_tool_result())
                .all(|e| !e.canned && e.status == 200)
        );
    }
    assert_log_has_no_errors(&setup.llama);
}

#[test]
fn a_tool_call_the_llama_cpp_model_makes_is_parsed_and_answered_streaming_and_not() {
    let setup = Setup::start();
    let dir = workspace();
    let workspace = dir.path().to_str().unwrap().to_owned();
    for stream in [true, false] {
        setup.proxy.force_tool_next("list_files");
        let (r, exchanges) = setup.run(
            stream,
            &[],
            &["--workspace-from", &workspace],
            "List the files of the workspace, then name them in one sentence.",
        );
        assert_all_accepted(&exchanges, stream);
        assert_model_caused_end(&r);
        assert_usage(&r, &exchanges);
        assert!(exchanges[0].rewritten && !exchanges[0].canned);
        // The call as llama.cpp made it (its own id; a stream repeats it in every chunk).
        let documents = exchanges[0].response_documents();
        let call_id = documents
            .iter()
            .flat_map(|d| d["choices"].as_array().cloned().unwrap_or_default())
            .find_map(|c| {
                let key = if stream { "delta" } else { "message" };
                c[key]["tool_calls"][0]["id"].as_str().map(str::to_owned)
            })
            .unwrap_or_else(|| panic!("llama.cpp made no call: {}", exchanges[0].response));
        assert!(exchanges.len() >= 2, "no request after the tool call: {r}");
        assert!(!exchanges[1].rewritten);
        // The model picks the arguments (a path that may not exist): any result will do.
        assert_carries_call_and_result(&exchanges[1], &call_id, false);
        // Its arguments went back as the JSON object text they were.
        let call = exchanges[1]
            .messages()
            .into_iter()
            .find(|m| m["role"] == "assistant" && m.get("tool_calls").is_some())
            .unwrap();
        let arguments = call["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap();
        let parsed: Value = serde_json::from_str(arguments).unwrap();
        assert!(parsed.is_object(), "{arguments}");
    }
    assert_log_has_no_errors(&setup.llama);
}

/// Why the default for servers other than OpenAI's own API is `""`: `[openai]
/// tool_call_content = "null"` sends a text-less assistant message with tool calls as
/// `"content": null` (what OpenAI documents), and llama-cpp-python refuses it: its request
/// model types `content` as a string (and its templates need the key), so the request after
/// any tool call is answered HTTP 500 with a validation error, which no retry changes. With
/// the default (the tests above) it is accepted.
#[test]
fn llama_cpp_python_refuses_null_content_beside_tool_calls() {
    let setup = Setup::start();
    setup.proxy.answer_next(MockOpenAi::tool_calls_reply(&[(
        "call_null",
        "list_files",
        "{}",
    )]));
    let (r, exchanges) = setup.run(
        false,
        &[
            ("BATON_OPENAI__MAX_ATTEMPTS", "1"),
            ("BATON_OPENAI__TOOL_CALL_CONTENT", "null"),
        ],
        &[],
        "List the files of the workspace.",
    );
    assert_eq!(r["reason"], "provider_error", "{r}");
    assert_eq!(exchanges.len(), 2, "{r}");
    let refused = &exchanges[1];
    eprintln!(
        "refused by llama.cpp: {}\nanswer: {}",
        refused.request, refused.response
    );
    assert_eq!(refused.status, 500, "{}", refused.response);
    let messages = refused.messages();
    assert_eq!(messages[2]["role"], "assistant");
    assert_eq!(messages[2]["content"], Value::Null);
    assert!(
        refused.response.contains(
            "('body', 'messages', 2, 'ChatCompletionRequestAssistantMessage', 'content'), \
             'msg': 'Input should be a valid string', 'input': None"
        ),
        "{}",
        refused.response
    );
}
