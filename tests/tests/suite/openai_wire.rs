//! The OpenAI Chat Completions wire end to end: a worker and dev server running
//! `--provider openai` against MockOpenAi in quirks mode, which refuses what DeepSeek, Gemini
//! and vLLM refuse: a tool loop that drops `reasoning_content` or a thought signature, or
//! sends invalid arguments back. A refusal ends the run as `content_filtered`.

#![allow(clippy::unwrap_used)]

use crate::common;

use baton_tests::*;
use common::*;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

/// A tool-call answer carrying DeepSeek's `reasoning_content` and a Gemini thought signature
/// on every call.
fn quirky_calls(reasoning: &str, calls: &[(&str, &str, &str)]) -> Value {
    let mut reply =
        MockOpenAi::with_reasoning_content(MockOpenAi::tool_calls_reply(calls), reasoning);
    for (i, (id, _, _)) in calls.iter().enumerate() {
        reply = MockOpenAi::with_thought_signature(reply, i, &format!("sig-{id}"));
    }
    reply
}

/// Runs `prompt` with `--provider openai --no-approval` (and `extra`) on a worker of its own
/// against `llm`, waits for its result (exit code `code`); the run id and the result.
fn run_openai(
    server: &DevServer,
    llm: &MockOpenAi,
    extra: &[&str],
    prompt: &str,
    code: i32,
) -> (String, Value) {
    run_openai_with(server, llm, &[], extra, prompt, code)
}

/// [`run_openai`] on a worker with the extra environment `env`.
fn run_openai_with(
    server: &DevServer,
    llm: &MockOpenAi,
    env: &[(&str, &str)],
    extra: &[&str],
    prompt: &str,
    code: i32,
) -> (String, Value) {
    let queue = unique("openai-wire");
    let base = llm.base_url();
    let mut vars = vec![("OPENAI_BASE_URL", base.as_str())];
    vars.extend_from_slice(env);
    let _w = worker(server, &queue, &vars);
    let mut args = vec!["--provider", "openai", "--no-approval"];
    args.extend_from_slice(extra);
    let run = submit(server, &queue, &unique("run-openai-wire"), &args, prompt);
    let result = result(server, &run, code);
    (run, result)
}

/// The assistant messages (with tool calls) of a request, in order.
fn assistant_calls(req: &CapturedRequest) -> Vec<Value> {
    req.messages()
        .into_iter()
        .filter(|m| m["role"] == "assistant" && m.get("tool_calls").is_some())
        .collect()
}

#[test]
fn reasoning_content_and_thought_signatures_round_trip_a_three_turn_tool_loop() {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start_quirks().unwrap();
    let turns = [
        quirky_calls(
            "I should look at the workspace first.",
            &[("call_1", "list_files", "{}")],
        ),
        // Invalid JSON arguments: the workflow answers with an error; `{}` goes back.
        quirky_calls(
            "Now read the file.",
            &[("call_2", "read_file", r#"{"path": "#)],
        ),
        quirky_calls(
            "Try again, two calls at once.",
            &[
                ("call_3", "glob", r#"{"pattern":"*"}"#),
                ("call_4", "list_files", "{}"),
            ],
        ),
    ];
    for reply in &turns {
        llm.push(reply.clone());
    }
    llm.push_text("The workspace is empty.");
    let (run, r) = run_openai(
        &server,
        &llm,
        &["--model", "deepseek-reasoner"],
        "What is in the workspace?",
        0,
    );
    assert_eq!(r["answer"], "The workspace is empty.", "{r}");

    let reqs = llm.requests();
    assert_eq!(reqs.len(), 4, "{:?}", llm.violations());
    assert!(llm.violations().is_empty(), "{:?}", llm.violations());
    for (n, req) in reqs.iter().enumerate() {
        // Turn n sends back every earlier turn's state, as the mock gave it.
        let sent = assistant_calls(req);
        assert_eq!(sent.len(), n, "request {n}");
        for (turn, message) in sent.iter().enumerate() {
            let given = &turns[turn]["choices"][0]["message"];
            assert_eq!(message["reasoning_content"], given["reasoning_content"]);
            let calls = message["tool_calls"].as_array().unwrap();
            for (i, call) in calls.iter().enumerate() {
                assert_eq!(call["id"], given["tool_calls"][i]["id"]);
                assert_eq!(
                    call["extra_content"],
                    given["tool_calls"][i]["extra_content"]
                );
            }
        }
        // The cached prefix: the system message and the tools, the same bytes every turn.
        let first = &reqs[0].body;
        assert_eq!(
            req.messages()[0].to_string(),
            first["messages"][0].to_string()
        );
        assert_eq!(req.body["tools"].to_string(), first["tools"].to_string());
        if let Some(key) = req.body.get("prompt_cache_key") {
            assert_eq!(key, &json!(run), "the cache key is the run id");
        }
    }
    // The invalid arguments went back as `{}`, and the model was told why.
    let third = reqs[2].messages();
    let replayed = &assistant_calls(&reqs[2])[1]["tool_calls"][0];
    assert_eq!(replayed["function"]["arguments"], "{}");
    let answer = third
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == "call_2")
        .unwrap();
    assert!(
        answer["content"]
            .as_str()
            .unwrap()
            .contains("not valid JSON"),
        "{answer}"
    );
}

#[tokio::test]
async fn quirks_mode_refuses_a_tool_call_turn_sent_back_without_its_reasoning_state() {
    // The mock's own check, against a request the way baton sent it before it sent
    // `prompt_cache_key`.
    let llm = MockOpenAi::start_quirks().unwrap();
    llm.push(quirky_calls("think", &[("call_1", "list_files", "{}")]));
    let url = format!("{}/chat/completions", llm.base_url());
    let first = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(post(&url, &first).await.0, 200);
    let dropped = json!({"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "list_files", "arguments": "{\"a\": "}}
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "[]"},
    ]});
    let (status, body) = post(&url, &dropped).await;
    assert_eq!(status, 400, "{body}");
    let violations = llm.take_violations().join("\n");
    for wanted in [
        "Missing `reasoning_content` field in the assistant message at message index 1",
        "Function call is missing a thought_signature",
        "function call `default_api:list_files` , position 1",
        "arguments is not the JSON text of an object",
    ] {
        assert!(violations.contains(wanted), "{wanted}: {violations}");
    }
}

/// POSTs `body` as JSON; the status and the body.
async fn post(url: &str, body: &Value) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(url)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

#[test]
fn a_refusal_ends_the_run_as_content_filtered_with_the_refusal_text() {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start_quirks().unwrap();
    llm.push(MockOpenAi::refusal_reply(
        "I'm sorry, I cannot assist with that request.",
    ));
    let (run, r) = run_openai(&server, &llm, &[], "Something the model refuses.", 1);
    assert_eq!(r["reason"], "content_filtered", "{r}");
    // What a user sees: the run failed as content_filtered, the refusal as its last text.
    assert_eq!(r["status"], "FAILED");
    assert_eq!(
        r["detail"],
        "the provider's content filter stopped the reply"
    );
    assert_eq!(
        r["last_text"],
        "I'm sorry, I cannot assist with that request."
    );
    assert_eq!(r["answer"], "");
    let text = history_text(&server, &run);
    assert!(
        text.contains("I'm sorry, I cannot assist with that request."),
        "the refusal is in the run's transcript"
    );
}

/// A reasoning model that spends its whole output budget twice (`length`,
/// no text), then calls a tool and answers. Every request the worker sends after those turns
/// is one the strict OpenAI mock and the Ollama-style mock take (OpenAI refuses an assistant
/// `content: null` without `tool_calls`, Ollama refuses `null` content on any message).
#[test]
fn a_run_that_hits_length_twice_then_finishes_is_accepted_by_openai_and_ollama() {
    let server = DevServer::start().unwrap();
    // OpenAI's own API gets `null` (its default there, set here as the mock is on
    // loopback); any other server gets `""` by default.
    for (name, llm, env) in [
        (
            "openai",
            MockOpenAi::start().unwrap(),
            vec![("BATON_OPENAI__TOOL_CALL_CONTENT", "null")],
        ),
        ("ollama", MockOpenAi::start_ollama().unwrap(), vec![]),
    ] {
        llm.push(MockOpenAi::length_reply(""));
        llm.push(MockOpenAi::length_reply(""));
        llm.push_tool_calls(&[("call_1", "list_files", "{}")]);
        llm.push_text("Nothing here.");
        let (_, r) = run_openai_with(&server, &llm, &env, &["--model", "gpt-5-mini"], "look", 0);
        assert_eq!(r["answer"], "Nothing here.", "{name}: {r}");
        assert_eq!(llm.take_violations(), Vec::<String>::new(), "{name}");
        let reqs = llm.requests();
        assert_eq!(reqs.len(), 4, "{name}");
        let last = reqs[3].messages();
        // The two empty turns are left out: the task, two continuation prompts, the call and
        // its result.
        let roles: Vec<&str> = last.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(
            roles,
            ["system", "user", "user", "user", "assistant", "tool"],
            "{name}"
        );
        let expected = if name == "ollama" {
            json!("")
        } else {
            Value::Null
        };
        assert_eq!(last[4]["content"], expected, "{name}");
    }
}

/// A run id of exactly 200 characters (OpenAI caps `prompt_cache_key` at 64).
fn long_run_id(name: &str) -> String {
    let mut id = format!("{}-", unique(name));
    while id.len() < 200 {
        id.push('x');
    }
    id.truncate(200);
    id
}

/// The `prompt_cache_key`s of `requests`, in order (None where a request has none).
fn cache_keys(requests: &[CapturedRequest]) -> Vec<Option<String>> {
    requests
        .iter()
        .map(|q| q.body["prompt_cache_key"].as_str().map(str::to_owned))
        .collect()
}

/// A 200-character `--id` whose run spawns a subagent (`<id>.sub-1`).
/// Every Chat Completions and Responses request carries a key of at most 64 characters (the
/// strict mocks refuse a longer one as OpenAI does), the parent's the same on both its
/// turns, the child's its own; Gemini's endpoint (which refuses fields it does not know)
/// gets none, unless the worker's setting insists, and then Gemini's refusal ends the run.
#[test]
fn a_long_run_id_gives_a_cache_key_within_64_and_gemini_gets_none() {
    let server = DevServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README"), "the project\n").unwrap();
    let workspace = dir.path().to_str().unwrap().to_owned();
    let spawn = json!({"task": "look around"}).to_string();
    let run_long = |provider: &str, base: &str, name: &str| {
        let queue = unique(name);
        let _w = worker(&server, &queue, &[("OPENAI_BASE_URL", base)]);
        let run = long_run_id(name);
        let args = [
            "--provider",
            provider,
            "--subagents",
            "--no-approval",
            "--workspace-from",
            workspace.as_str(),
        ];
        submit(&server, &queue, &run, &args, "split the work");
        result(&server, &run, 0)
    };

    let chat = MockOpenAi::start().unwrap();
    chat.push_tool_calls(&[("call_s", "spawn_agent", &spawn)]);
    chat.push_text("The child looked.");
    chat.push_text("Parent done.");
    let r = run_long("openai", &chat.base_url(), "long-chat");
    assert_eq!(r["answer"], "Parent done.", "{r}");

    let responses = MockResponses::start().unwrap();
    responses.push(MockResponses::tool_calls_reply(
        "Spawn one.",
        &[("call_s", "spawn_agent", &spawn)],
    ));
    responses.push(MockResponses::text_reply("Looked.", "The child looked."));
    responses.push(MockResponses::text_reply("Done.", "Parent done."));
    let r = run_long("openai-responses", &responses.base_url(), "long-resp");
    assert_eq!(r["answer"], "Parent done.", "{r}");

    for (api, requests) in [
        ("chat", chat.requests()),
        ("responses", responses.requests()),
    ] {
        let keys = cache_keys(&requests);
        assert_eq!(keys.len(), 3, "{api}: {keys:?}");
        for key in &keys {
            let key = key.as_deref().unwrap_or_else(|| panic!("{api}: no key"));
            assert!(key.chars().count() <= 64, "{api}: {key}");
        }
        // Parent, child, parent: the parent's key is stable across its turns.
        assert_eq!(keys[0], keys[2], "{api}");
        assert_ne!(keys[0], keys[1], "{api}: the child has its own key");
    }
    assert_eq!(chat.take_violations(), Vec::<String>::new());
    assert_eq!(responses.take_violations(), Vec::<String>::new());

    // Gemini's OpenAI compatibility (recognised by its `/v1beta/openai` base URL).
    let gemini = MockOpenAi::start_gemini().unwrap();
    gemini.push_text("Hello from Gemini.");
    let (_, r) = run_openai(&server, &gemini, &["--model", "gemini-2.5-flash"], "hi", 0);
    assert_eq!(r["answer"], "Hello from Gemini.", "{r}");
    assert_eq!(cache_keys(&gemini.requests()), [None]);
    // A worker that insists sends it, and the mock refuses it as Gemini does.
    gemini.push_text("never sent");
    let (_, r) = run_openai_with(
        &server,
        &gemini,
        &[("BATON_OPENAI__PROMPT_CACHE_KEY", "true")],
        &["--model", "gemini-2.5-flash"],
        "hi",
        1,
    );
    assert_eq!(r["reason"], "provider_error", "{r}");
    let refused = gemini.take_violations();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].contains("Unknown name \"prompt_cache_key\": Cannot find field."),
        "{refused:?}"
    );
    assert!(
        r["detail"].as_str().unwrap().contains("INVALID_ARGUMENT"),
        "Google's error shape reaches the run's detail: {r}"
    );
}
