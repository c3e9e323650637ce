//! What every request to a model mock must satisfy, in both wire formats, because the real
//! APIs refuse it otherwise (or because it would leak a secret):
//!
//! * **Tool results answer tool calls.** OpenAI: a `role: tool` message answers (by
//!   `tool_call_id`) a call of the nearest assistant message with `tool_calls`, with only
//!   other tool messages in between, and that assistant message's calls are all answered
//!   before any other message. Anthropic: the `tool_result` blocks (by `tool_use_id`) of a
//!   user message answer the `tool_use` blocks of the assistant message right before it, all
//!   of them, and come first in the content. Neither API takes an answer to a call never
//!   made, an answer given twice, or a call left unanswered.
//! * **Anthropic thinking and caching** (the Messages API's 400s): with `thinking` enabled,
//!   no `temperature`, `max_tokens` above `budget_tokens`, and the last assistant message
//!   with `tool_use` starts with a thinking block; every `thinking` block's `signature` (and
//!   `redacted_thinking` block's `data`) is one this mock issued
//!   ([`crate::MockAnthropic::sign`]): an altered or invented block is refused; at most 4
//!   `cache_control` breakpoints.
//! * **Chat Completions message content**. OpenAI: an assistant message's
//!   `content` is "Required unless `tool_calls` or `function_call` is specified" (API
//!   reference, Create chat completion, `messages[].content`,
//!   <https://platform.openai.com/docs/api-reference/chat/create>); other messages always
//!   need it. OpenAI answers `400 Invalid value for 'content': expected a string, got null.`
//!   (openai/openai-cookbook#503). Ollama's `/v1` refuses `content: null` on any message,
//!   tool calls or not: `400 invalid message content type: <nil>` (its OpenAI compatibility
//!   layer, `openai/openai.go`; pydantic/pydantic-ai#5206).
//! * **`prompt_cache_key`**. OpenAI, both APIs: at most 64 characters
//!   (API reference, Create chat completion / Create a model response, `prompt_cache_key`,
//!   <https://platform.openai.com/docs/api-reference/responses/create>); a longer one is
//!   `400 Invalid 'prompt_cache_key': string too long. Expected a string with maximum length
//!   64, but got a string with length N instead.` (code `string_above_max_length`;
//!   theopenco/llmgateway#3110, earendil-works/pi#4720 for Responses).
//! * **Gemini's OpenAI compatibility refuses fields it does not know**:
//!   `400 Invalid JSON payload received. Unknown name "prompt_cache_key": Cannot find field.`,
//!   in Google's error shape, a JSON array of `{"error": {code, message, status, details}}`
//!   (<https://ai.google.dev/gemini-api/docs/openai> lists what it supports;
//!   liliMozi/openhanako#2494, #394 for `store`). [`GEMINI_FIELDS`] is what it takes.
//! * **Anthropic text blocks must hold non-whitespace text**: a `text`
//!   block (in `messages` or `system`) that is empty is `400 messages: text content blocks
//!   must be non-empty`, one of only whitespace `400 messages: text content blocks must
//!   contain non-whitespace text` (Messages API errors, quoted in LibreChat-AI/agents#124 and
//!   NousResearch/hermes-agent#69517; <https://docs.claude.com/en/api/messages> `content`).
//! * **Anthropic `max_tokens` within the model's output limit**: `400
//!   max_tokens: 8192 > 4096, which is the maximum allowed number of output tokens for
//!   claude-3-haiku-20240307` (the models overview's "Max output" column,
//!   <https://docs.claude.com/en/docs/about-claude/models/overview>; continuedev/continue#4225).
//!   [`ANTHROPIC_MAX_OUTPUT`] holds the limits of the models the tests use.
//! * **No `temperature` for reasoning models**, OpenAI, both APIs: `400
//!   Unsupported parameter: 'temperature' is not supported with this model.` for the o-series
//!   and gpt-5 family (reasoning models guide,
//!   <https://platform.openai.com/docs/guides/reasoning>; openai-python#2072,
//!   OpenHands/software-agent-sdk#1837).
//! * **Prompts within the model's input capacity**: gpt-5's 272K input
//!   cap, Anthropic's prompt + `max_tokens` within 200K; see `mock_window.rs`.
//! * **No API key in the body.** The key the worker sends (`Authorization: Bearer <key>` or
//!   `x-api-key: <key>`) never occurs in the JSON body: a tool output or a prompt carrying the
//!   worker's own key would send it to the provider in clear and into the history.
//!
//! [`violations`] lists what a request breaks; the mock answers such a request 400 with the
//! reason and keeps it ([`crate::MockServer::violations`]), and a mock dropped with
//! violations it was not asked about panics, so the test fails.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::mock_http::{Dialect, Flavor};

/// What `body` (raw bytes `raw`, sent with `headers`, lowercase names) breaks of the rules
/// above for a mock of `flavor` playing `dialect`; empty when the request is fine.
pub(crate) fn violations(
    flavor: Flavor,
    dialect: Dialect,
    headers: &BTreeMap<String, String>,
    raw: &[u8],
    body: &Value,
) -> Vec<String> {
    let mut found = Vec::new();
    if let Some(key) = api_key(headers) {
        let text = String::from_utf8_lossy(raw);
        if text.contains(key) {
            found.push(format!(
                "the API key the client authenticates with ({} chars) occurs in the request body",
                key.len()
            ));
        }
    }
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    match flavor {
        Flavor::OpenAi => {
            openai_pairing(messages, &mut found);
            openai_content(dialect, messages, &mut found);
            match dialect {
                Dialect::OpenAi => {
                    prompt_cache_key(body, &mut found);
                    reasoning_temperature(body, &mut found);
                }
                Dialect::Gemini => gemini_fields(body, &mut found),
                Dialect::Ollama => {}
            }
        }
        Flavor::Anthropic => {
            anthropic_pairing(messages, &mut found);
            anthropic_thinking(body, messages, &mut found);
            anthropic_breakpoints(body, &mut found);
            anthropic_text_blocks(body, messages, &mut found);
            anthropic_max_tokens(body, &mut found);
        }
        // No `messages`: its `input` items are checked by `mock_responses::violations`.
        Flavor::Responses => {
            prompt_cache_key(body, &mut found);
            reasoning_temperature(body, &mut found);
        }
    }
    crate::mock_window::window(flavor, body, &mut found);
    found
}

/// The key of `Authorization: Bearer <key>` or `x-api-key: <key>`, if any and not empty.
fn api_key(headers: &BTreeMap<String, String>) -> Option<&str> {
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.strip_prefix("Bearer "));
    bearer
        .or(headers.get("x-api-key").map(String::as_str))
        .map(str::trim)
        .filter(|k| !k.is_empty())
}

fn str_field<'a>(v: &'a Value, name: &str) -> &'a str {
    v.get(name).and_then(Value::as_str).unwrap_or_default()
}

/// The ids of the calls an OpenAI assistant message makes.
fn openai_calls(message: &Value) -> Vec<String> {
    message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .map(|c| str_field(c, "id").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn openai_pairing(messages: &[Value], found: &mut Vec<String>) {
    // Calls of the latest assistant message not answered yet, and every call made so far.
    let mut open: Vec<String> = Vec::new();
    let mut made: BTreeSet<String> = BTreeSet::new();
    let mut answered: BTreeSet<String> = BTreeSet::new();
    for (i, m) in messages.iter().enumerate() {
        let role = str_field(m, "role");
        if role == "tool" {
            let id = str_field(m, "tool_call_id");
            if let Some(pos) = open.iter().position(|c| c == id) {
                open.remove(pos);
                answered.insert(id.to_owned());
            } else if answered.contains(id) {
                found.push(format!("messages[{i}]: tool call {id:?} is answered twice"));
            } else if made.contains(id) {
                found.push(format!(
                    "messages[{i}]: the tool message answering {id:?} does not follow the \
                     assistant message that made the call"
                ));
            } else {
                found.push(format!(
                    "messages[{i}]: the tool message answers {id:?}, a call no earlier \
                     assistant message made"
                ));
            }
            continue;
        }
        if !open.is_empty() {
            found.push(format!(
                "messages[{i}] ({role}) comes before the tool calls {open:?} were answered"
            ));
            open.clear();
        }
        if role == "assistant" {
            open = openai_calls(m);
            made.extend(open.iter().cloned());
        }
    }
    if !open.is_empty() {
        found.push(format!(
            "the conversation ends with the tool calls {open:?} unanswered"
        ));
    }
}

/// Whether an OpenAI model name (after any `vendor/`) is a reasoning model's.
fn is_reasoning_model(model: &str) -> bool {
    let name = model.rsplit('/').next().unwrap_or(model);
    ["o1", "o3", "o4", "gpt-5"]
        .iter()
        .any(|p| name.starts_with(p))
}

fn reasoning_temperature(body: &Value, found: &mut Vec<String>) {
    if body.get("temperature").is_some() && is_reasoning_model(str_field(body, "model")) {
        found.push(
            "Unsupported parameter: 'temperature' is not supported with this model.".to_owned(),
        );
    }
}

/// OpenAI's cap on `prompt_cache_key`, in characters.
const MAX_PROMPT_CACHE_KEY: usize = 64;

fn prompt_cache_key(body: &Value, found: &mut Vec<String>) {
    let Some(key) = body.get("prompt_cache_key") else {
        return;
    };
    let n = key.as_str().map(|k| k.chars().count());
    match n {
        Some(n) if n <= MAX_PROMPT_CACHE_KEY => {}
        Some(n) => found.push(format!(
            "Invalid 'prompt_cache_key': string too long. Expected a string with maximum \
             length {MAX_PROMPT_CACHE_KEY}, but got a string with length {n} instead. \
             (code: string_above_max_length)"
        )),
        None => found.push(format!(
            "Invalid type for 'prompt_cache_key': expected a string, but got {key}."
        )),
    }
}

/// The top-level request fields Gemini's OpenAI compatibility takes (its documentation's
/// supported parameters; `extra_body` carries Google's own).
pub(crate) const GEMINI_FIELDS: &[&str] = &[
    "model",
    "messages",
    "tools",
    "tool_choice",
    "stream",
    "stream_options",
    "temperature",
    "top_p",
    "n",
    "stop",
    "max_tokens",
    "max_completion_tokens",
    "reasoning_effort",
    "response_format",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "extra_body",
];

fn gemini_fields(body: &Value, found: &mut Vec<String>) {
    for name in body.as_object().into_iter().flat_map(|o| o.keys()) {
        if !GEMINI_FIELDS.contains(&name.as_str()) {
            found.push(format!(
                "Invalid JSON payload received. Unknown name \"{name}\": Cannot find field."
            ));
        }
    }
}

/// Messages whose `content` the server refuses: null or absent (see the module doc; an
/// OpenAI assistant message may leave it null when it has `tool_calls`, an Ollama one may
/// not).
fn openai_content(dialect: Dialect, messages: &[Value], found: &mut Vec<String>) {
    for (i, m) in messages.iter().enumerate() {
        let content = m.get("content").unwrap_or(&Value::Null);
        if !content.is_null() {
            continue;
        }
        let calls = m
            .get("tool_calls")
            .and_then(Value::as_array)
            .is_some_and(|c| !c.is_empty());
        match dialect {
            Dialect::Ollama => found.push("invalid message content type: <nil>".to_owned()),
            Dialect::OpenAi | Dialect::Gemini if str_field(m, "role") == "assistant" && calls => {}
            Dialect::OpenAi | Dialect::Gemini => found.push(format!(
                "Invalid value for 'content': expected a string, got null. \
                 (param: messages.[{i}].content)"
            )),
        }
    }
}

/// The content blocks of an Anthropic message (a plain string content has none).
fn blocks(message: &Value) -> &[Value] {
    message
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn anthropic_pairing(messages: &[Value], found: &mut Vec<String>) {
    // The tool_use ids of the previous message (when it was the assistant's).
    let mut open: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = str_field(m, "role");
        let content = blocks(m);
        let results: Vec<&str> = content
            .iter()
            .filter(|b| str_field(b, "type") == "tool_result")
            .map(|b| str_field(b, "tool_use_id"))
            .collect();
        if role == "user" {
            let first_other = content
                .iter()
                .position(|b| str_field(b, "type") != "tool_result");
            let last_result = content
                .iter()
                .rposition(|b| str_field(b, "type") == "tool_result");
            if let (Some(other), Some(result)) = (first_other, last_result)
                && other < result
            {
                found.push(format!(
                    "messages[{i}]: tool_result blocks do not come first in the content"
                ));
            }
            let mut seen = BTreeSet::new();
            for id in &results {
                if !seen.insert(*id) {
                    found.push(format!("messages[{i}]: tool_use {id:?} is answered twice"));
                } else if !open.iter().any(|c| c == id) {
                    found.push(format!(
                        "messages[{i}]: tool_result answers {id:?}, which is not a tool_use of \
                         the assistant message right before it"
                    ));
                }
            }
            let unanswered: Vec<&String> =
                open.iter().filter(|c| !seen.contains(c.as_str())).collect();
            if !unanswered.is_empty() {
                found.push(format!(
                    "messages[{i}] does not answer the tool_use blocks {unanswered:?} of the \
                     message before it"
                ));
            }
            open.clear();
        } else {
            if !results.is_empty() {
                found.push(format!(
                    "messages[{i}] ({role}) carries tool_result blocks, which only a user \
                     message may"
                ));
            }
            if !open.is_empty() {
                found.push(format!(
                    "messages[{i}] ({role}) comes before the tool_use blocks {open:?} were \
                     answered"
                ));
            }
            open = content
                .iter()
                .filter(|b| str_field(b, "type") == "tool_use")
                .map(|b| str_field(b, "id").to_owned())
                .collect();
        }
    }
    if !open.is_empty() {
        found.push(format!(
            "the conversation ends with the tool_use blocks {open:?} unanswered"
        ));
    }
}

fn anthropic_text_blocks(body: &Value, messages: &[Value], found: &mut Vec<String>) {
    let system = body
        .get("system")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let in_messages = messages.iter().flat_map(|m| blocks(m).iter());
    for b in system.iter().chain(in_messages) {
        if str_field(b, "type") != "text" {
            continue;
        }
        let text = str_field(b, "text");
        if text.is_empty() {
            found.push("messages: text content blocks must be non-empty".to_owned());
        } else if text.trim().is_empty() {
            found.push("messages: text content blocks must contain non-whitespace text".to_owned());
        }
    }
}

/// Output limits of Anthropic models by name prefix (the models overview's "Max output").
pub(crate) const ANTHROPIC_MAX_OUTPUT: &[(&str, u64)] = &[
    ("claude-3-haiku", 4_096),
    ("claude-3-5-haiku", 8_192),
    ("claude-3-5-sonnet", 8_192),
    ("claude-opus-4-1", 32_000),
    ("claude-opus-4", 32_000),
    ("claude-opus-4-5", 64_000),
    ("claude-sonnet-4", 64_000),
    ("claude-haiku-4-5", 64_000),
];

fn anthropic_max_tokens(body: &Value, found: &mut Vec<String>) {
    let model = str_field(body, "model");
    let limit = ANTHROPIC_MAX_OUTPUT
        .iter()
        .filter(|(prefix, _)| model.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, limit)| *limit);
    let asked = body.get("max_tokens").and_then(Value::as_u64);
    if let (Some(limit), Some(asked)) = (limit, asked)
        && asked > limit
    {
        found.push(format!(
            "max_tokens: {asked} > {limit}, which is the maximum allowed number of output \
             tokens for {model}"
        ));
    }
}

/// The documented cap on `cache_control` breakpoints per request.
const MAX_BREAKPOINTS: usize = 4;

fn anthropic_breakpoints(body: &Value, found: &mut Vec<String>) {
    let n = crate::MockAnthropic::count_breakpoints(body);
    if n > MAX_BREAKPOINTS {
        found.push(format!(
            "A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {n}."
        ));
    }
}

fn anthropic_thinking(body: &Value, messages: &[Value], found: &mut Vec<String>) {
    for (i, m) in messages.iter().enumerate() {
        for (j, b) in blocks(m).iter().enumerate() {
            let valid = match str_field(b, "type") {
                "thinking" => crate::MockAnthropic::verify(
                    str_field(b, "thinking"),
                    str_field(b, "signature"),
                ),
                "redacted_thinking" => crate::MockAnthropic::verify_redacted(str_field(b, "data")),
                _ => true,
            };
            if !valid {
                found.push(format!(
                    "messages.{i}.content.{j}: Invalid `signature` in `{}` block",
                    str_field(b, "type")
                ));
            }
        }
    }
    let Some(thinking) = body.get("thinking") else {
        return;
    };
    let model = str_field(body, "model");
    let kind = str_field(thinking, "type");
    // Adaptive thinking only (Anthropic's adaptive thinking page; AWS Bedrock "Adaptive
    // thinking": "Manual extended thinking ... is not supported on these models and will
    // return a 400 error"); older models do not know `adaptive`.
    let adaptive_only = ["claude-opus-4-7", "claude-mythos"]
        .iter()
        .any(|p| model.starts_with(p));
    let adaptive_ok = adaptive_only
        || ["claude-opus-4-6", "claude-sonnet-4-6"]
            .iter()
            .any(|p| model.starts_with(p));
    match kind {
        "enabled" if adaptive_only => found.push(format!(
            "thinking.type.enabled is not supported for {model}: use thinking.type.adaptive and \
             output_config.effort to control thinking behavior"
        )),
        "adaptive" if !adaptive_ok && model.starts_with("claude-") => found.push(format!(
            "thinking.type: adaptive thinking is not supported on {model}; use thinking.type \
             enabled with budget_tokens"
        )),
        "enabled" | "adaptive" => {}
        _ => return,
    }
    if kind == "enabled" {
        let budget = thinking.get("budget_tokens").and_then(Value::as_u64);
        let max_tokens = body.get("max_tokens").and_then(Value::as_u64);
        if budget.is_none_or(|b| b < 1024) {
            found.push(
                "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
                    .into(),
            );
        }
        if let (Some(b), Some(m)) = (budget, max_tokens)
            && m <= b
        {
            found.push(format!(
                "`max_tokens` must be greater than `thinking.budget_tokens` ({m} <= {b})"
            ));
        }
    }
    if body.get("temperature").is_some() {
        found.push(
            "`temperature` may only be set to 1 when thinking is enabled (mock: it must not be sent)"
                .into(),
        );
    }
    // The assistant turn the request continues (after the last user message that is not
    // only tool results) starts with a thinking block: its first assistant message, not
    // every one (without interleaved thinking the later calls of a tool loop have none).
    let is_turn_start = |m: &Value| {
        str_field(m, "role") == "user"
            && match m.get("content") {
                Some(Value::Array(b)) => b.iter().any(|b| str_field(b, "type") != "tool_result"),
                _ => true,
            }
    };
    let start = messages
        .iter()
        .rposition(is_turn_start)
        .map_or(0, |i| i + 1);
    let first_of_turn = messages
        .iter()
        .enumerate()
        .skip(start)
        .find(|(_, m)| str_field(m, "role") == "assistant");
    if let Some((i, m)) = first_of_turn {
        let first = blocks(m)
            .first()
            .map(|b| str_field(b, "type"))
            .unwrap_or("");
        if first != "thinking" && first != "redacted_thinking" {
            found.push(format!(
                "messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but \
                 found `{first}`. When `thinking` is enabled, a final `assistant` message must \
                 start with a thinking block (preceeding the lastmost set of `tool_use` and \
                 `tool_result` blocks). We recommend you include thinking blocks from previous \
                 turns. To avoid this requirement, disable `thinking`. Please consult our \
                 documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(flavor: Flavor, body: &Value) -> Vec<String> {
        check_as(flavor, Dialect::OpenAi, body)
    }

    fn check_as(flavor: Flavor, dialect: Dialect, body: &Value) -> Vec<String> {
        violations(
            flavor,
            dialect,
            &BTreeMap::new(),
            body.to_string().as_bytes(),
            body,
        )
    }

    #[test]
    fn openai_refuses_a_prompt_cache_key_over_64_and_gemini_refuses_it_at_all() {
        let body = |key: &str| {
            json!({"model": "m", "messages": [{"role": "user", "content": "u"}],
                   "stream": true, "prompt_cache_key": key})
        };
        let fits = body(&"k".repeat(64));
        let long = body(&"k".repeat(198));
        for flavor in [Flavor::OpenAi, Flavor::Responses] {
            assert_eq!(check(flavor, &fits), Vec::<String>::new());
            let found = check(flavor, &long);
            assert_eq!(found.len(), 1, "{found:?}");
            assert!(
                found[0].starts_with("Invalid 'prompt_cache_key': string too long.")
                    && found[0].contains("got a string with length 198"),
                "{found:?}"
            );
        }
        // Ollama ignores fields it does not use.
        assert_eq!(
            check_as(Flavor::OpenAi, Dialect::Ollama, &long),
            Vec::<String>::new()
        );
        let found = check_as(Flavor::OpenAi, Dialect::Gemini, &fits);
        assert_eq!(
            found,
            [
                "Invalid JSON payload received. Unknown name \"prompt_cache_key\": Cannot find field."
            ]
        );
        let mut without = fits.clone();
        without.as_object_mut().unwrap().remove("prompt_cache_key");
        assert_eq!(
            check_as(Flavor::OpenAi, Dialect::Gemini, &without),
            Vec::<String>::new()
        );
    }

    #[test]
    fn openai_refuses_temperature_for_reasoning_models() {
        let body = |model: &str| json!({"model": model, "temperature": 0.2, "messages": []});
        for flavor in [Flavor::OpenAi, Flavor::Responses] {
            assert_eq!(
                check(flavor, &body("gpt-5-mini")),
                ["Unsupported parameter: 'temperature' is not supported with this model."]
            );
            assert_eq!(check(flavor, &body("openai/o3-mini")).len(), 1);
            assert_eq!(check(flavor, &body("gpt-4.1")), Vec::<String>::new());
        }
    }

    #[test]
    fn openai_refuses_null_content_without_tool_calls_and_ollama_refuses_it_always() {
        let call =
            json!({"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}});
        let with_calls = json!({"messages": [
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": null, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "a", "content": "1"}
        ]});
        let empty_turn = json!({"messages": [
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": null},
            {"role": "user", "content": "continue"}
        ]});
        let absent = json!({"messages": [{"role": "user", "content": "u"}, {"role": "assistant"}]});
        let mut as_strings = with_calls.clone();
        as_strings["messages"][1]["content"] = json!("");
        assert_eq!(check(Flavor::OpenAi, &with_calls), Vec::<String>::new());
        let found = check(Flavor::OpenAi, &empty_turn);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("Invalid value for 'content': expected a string, got null."),
            "{found:?}"
        );
        assert!(found[0].contains("messages.[1].content"), "{found:?}");
        assert_eq!(check(Flavor::OpenAi, &absent).len(), 1);
        let found = check_as(Flavor::OpenAi, Dialect::Ollama, &with_calls);
        assert_eq!(found, vec!["invalid message content type: <nil>"]);
        assert_eq!(
            check_as(Flavor::OpenAi, Dialect::Ollama, &empty_turn).len(),
            1
        );
        assert_eq!(
            check_as(Flavor::OpenAi, Dialect::Ollama, &as_strings),
            Vec::<String>::new()
        );
    }

    #[test]
    fn openai_tool_messages_must_answer_the_calls_right_before_them() {
        let call = |id: &str| json!({"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}});
        let ok = json!({"messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": null, "tool_calls": [call("a"), call("b")]},
            {"role": "tool", "tool_call_id": "b", "content": "1"},
            {"role": "tool", "tool_call_id": "a", "content": "2"},
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": "more"}
        ]});
        assert_eq!(check(Flavor::OpenAi, &ok), Vec::<String>::new());
        let orphan = json!({"messages": [
            {"role": "user", "content": "u"},
            {"role": "tool", "tool_call_id": "zz", "content": "1"}
        ]});
        assert!(check(Flavor::OpenAi, &orphan)[0].contains("a call no earlier assistant"));
        let unanswered = json!({"messages": [
            {"role": "assistant", "content": null, "tool_calls": [call("a")]},
            {"role": "user", "content": "u"}
        ]});
        assert!(check(Flavor::OpenAi, &unanswered)[0].contains("before the tool calls"));
        let twice = json!({"messages": [
            {"role": "assistant", "content": null, "tool_calls": [call("a")]},
            {"role": "tool", "tool_call_id": "a", "content": "1"},
            {"role": "tool", "tool_call_id": "a", "content": "1"}
        ]});
        assert!(check(Flavor::OpenAi, &twice)[0].contains("answered twice"));
    }

    #[test]
    fn anthropic_tool_results_must_answer_the_message_before_and_come_first() {
        let ok = json!({"messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "t"},
                {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
                {"type": "text", "text": "and also"}
            ]}
        ]});
        assert_eq!(check(Flavor::Anthropic, &ok), Vec::<String>::new());
        let orphan = json!({"messages": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t9"}]}
        ]});
        assert!(check(Flavor::Anthropic, &orphan)[0].contains("not a tool_use"));
        let late_result = json!({"messages": [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
            {"role": "user", "content": [
                {"type": "text", "text": "first"},
                {"type": "tool_result", "tool_use_id": "t1"}
            ]}
        ]});
        assert!(check(Flavor::Anthropic, &late_result)[0].contains("do not come first"));
        let unanswered = json!({"messages": [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "text", "text": "no answer"}]}
        ]});
        assert!(check(Flavor::Anthropic, &unanswered)[0].contains("does not answer"));
    }

    #[test]
    fn the_api_key_must_not_be_in_the_body() {
        let body = json!({"messages": [{"role": "user", "content": "my key is sk-secret-1"}]});
        let raw = body.to_string();
        for (name, value) in [
            ("authorization", "Bearer sk-secret-1"),
            ("x-api-key", "sk-secret-1"),
        ] {
            let headers = BTreeMap::from([(name.to_owned(), value.to_owned())]);
            let found = violations(
                Flavor::OpenAi,
                Dialect::OpenAi,
                &headers,
                raw.as_bytes(),
                &body,
            );
            assert_eq!(found.len(), 1, "{found:?}");
            assert!(found[0].contains("API key"), "{found:?}");
        }
        let other = BTreeMap::from([("x-api-key".to_owned(), "sk-other".to_owned())]);
        assert!(
            violations(
                Flavor::Anthropic,
                Dialect::OpenAi,
                &other,
                raw.as_bytes(),
                &body
            )
            .is_empty()
        );
    }

    #[test]
    fn anthropic_thinking_must_come_back_signed_before_the_tool_use() {
        use crate::MockAnthropic;
        let thinking = MockAnthropic::thinking_block("look first");
        let turn = |content: Value| {
            json!({
                "model": "m", "max_tokens": 3048,
                "thinking": {"type": "enabled", "budget_tokens": 2048},
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "go"}]},
                    {"role": "assistant", "content": content},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]},
                ]
            })
        };
        let call = json!({"type": "tool_use", "id": "t1", "name": "shell", "input": {}});
        let redacted = MockAnthropic::redacted_block("hidden");
        assert_eq!(
            check(Flavor::Anthropic, &turn(json!([thinking, redacted, call]))),
            Vec::<String>::new()
        );
        let missing = check(Flavor::Anthropic, &turn(json!([call])));
        assert!(
            missing[0].contains("messages.1.content.0.type: Expected `thinking`"),
            "{missing:?}"
        );
        let mut altered = thinking.clone();
        altered["thinking"] = json!("look first!");
        let found = check(Flavor::Anthropic, &turn(json!([altered, call])));
        assert!(
            found[0].contains("Invalid `signature` in `thinking` block"),
            "{found:?}"
        );
        let mut bad_redacted = redacted.clone();
        bad_redacted["data"] = json!("00.0000000000000000");
        let found = check(
            Flavor::Anthropic,
            &turn(json!([thinking, bad_redacted, call])),
        );
        assert!(
            found[0].contains("Invalid `signature` in `redacted_thinking`"),
            "{found:?}"
        );
        // Thinking off: no block is required.
        let mut off = turn(json!([call]));
        off.as_object_mut().unwrap().remove("thinking");
        assert_eq!(check(Flavor::Anthropic, &off), Vec::<String>::new());
        // temperature and a max_tokens at the budget are refused with thinking on.
        let mut warm = turn(json!([thinking, call]));
        warm["temperature"] = json!(0.5);
        warm["max_tokens"] = json!(2048);
        assert_eq!(check(Flavor::Anthropic, &warm).len(), 2);
    }

    /// Only the first assistant message of the turn a request continues
    /// must start with thinking (a compaction can leave one without); adaptive-only models
    /// refuse budgeted thinking, older ones refuse adaptive.
    #[test]
    fn anthropic_thinking_rules_follow_the_turn_and_the_model() {
        use crate::MockAnthropic;
        let thinking = MockAnthropic::thinking_block("look first");
        let call = |id: &str| json!({"type": "tool_use", "id": id, "name": "shell", "input": {}});
        let answer = |id: &str| json!({"type": "tool_result", "tool_use_id": id});
        let body = |first: Value, second: Value| {
            json!({
                "model": "claude-sonnet-4-5", "max_tokens": 3048,
                "thinking": {"type": "enabled", "budget_tokens": 2048},
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "go"}]},
                    {"role": "assistant", "content": first},
                    {"role": "user", "content": [answer("t1")]},
                    {"role": "assistant", "content": second},
                    {"role": "user", "content": [answer("t2")]},
                ]
            })
        };
        // A later call of the same turn without thinking: fine (no interleaving).
        let ok = body(json!([thinking, call("t1")]), json!([call("t2")]));
        assert_eq!(check(Flavor::Anthropic, &ok), Vec::<String>::new());
        // After a compaction the turn starts at the summary: its first assistant message
        // has no thinking block.
        let mut compacted = ok.clone();
        compacted["messages"][0]["content"] =
            json!([{"type": "text", "text": "task"}, {"type": "text", "text": "summary"}]);
        compacted["messages"][1]["content"] = json!([call("t1")]);
        let found = check(Flavor::Anthropic, &compacted);
        assert!(
            found[0].starts_with("messages.1.content.0.type: Expected `thinking`"),
            "{found:?}"
        );
        // Models and shapes.
        let mut old_shape = ok.clone();
        old_shape["model"] = json!("claude-opus-4-7");
        let found = check(Flavor::Anthropic, &old_shape);
        assert!(
            found[0].contains("thinking.type.enabled is not supported"),
            "{found:?}"
        );
        let mut adaptive = old_shape.clone();
        adaptive["thinking"] = json!({"type": "adaptive"});
        assert_eq!(check(Flavor::Anthropic, &adaptive), Vec::<String>::new());
        adaptive["model"] = json!("claude-sonnet-4-5");
        let found = check(Flavor::Anthropic, &adaptive);
        assert!(
            found[0].contains("adaptive thinking is not supported"),
            "{found:?}"
        );
    }

    #[test]
    fn anthropic_refuses_empty_and_whitespace_only_text_blocks() {
        let body = |text: &str| {
            json!({"system": [{"type": "text", "text": "s"}], "messages": [
                {"role": "user", "content": [{"type": "text", "text": "go"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": text},
                    {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
                ]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]}
            ]})
        };
        assert_eq!(
            check(Flavor::Anthropic, &body("ok\n")),
            Vec::<String>::new()
        );
        assert_eq!(
            check(Flavor::Anthropic, &body("\n\n")),
            ["messages: text content blocks must contain non-whitespace text"]
        );
        assert_eq!(
            check(Flavor::Anthropic, &body("")),
            ["messages: text content blocks must be non-empty"]
        );
        let mut system = body("ok");
        system["system"][0]["text"] = json!(" ");
        assert_eq!(check(Flavor::Anthropic, &system).len(), 1);
    }

    #[test]
    fn anthropic_refuses_max_tokens_above_the_models_limit() {
        let body = |model: &str, max: u64| {
            json!({"model": model, "max_tokens": max, "messages": [
                {"role": "user", "content": [{"type": "text", "text": "go"}]}]})
        };
        assert_eq!(
            check(Flavor::Anthropic, &body("claude-3-haiku-20240307", 8192)),
            [
                "max_tokens: 8192 > 4096, which is the maximum allowed number of output tokens \
              for claude-3-haiku-20240307"
            ]
        );
        assert_eq!(
            check(Flavor::Anthropic, &body("claude-3-haiku-20240307", 4096)),
            Vec::<String>::new()
        );
        assert_eq!(
            check(Flavor::Anthropic, &body("claude-sonnet-4-5", 8192)),
            Vec::<String>::new()
        );
        // A model the mock does not know is not refused.
        assert_eq!(
            check(Flavor::Anthropic, &body("mock-model", 1_000_000)),
            Vec::<String>::new()
        );
    }

    #[test]
    fn anthropic_takes_at_most_four_breakpoints() {
        let cc = json!({"type": "ephemeral"});
        let text = json!({"type": "text", "text": "x", "cache_control": cc});
        let body =
            |n: usize| json!({"messages": [{"role": "user", "content": vec![text.clone(); n]}]});
        assert_eq!(check(Flavor::Anthropic, &body(4)), Vec::<String>::new());
        assert!(check(Flavor::Anthropic, &body(5))[0].contains("A maximum of 4 blocks"));
    }
}
