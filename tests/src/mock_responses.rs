//! A scripted mock of the OpenAI Responses HTTP API (`POST /v1/responses`), stateless like
//! the real one with `store: false`: every reasoning item it answers with carries an opaque
//! `encrypted_content` it issued, and a request that sends back a reasoning item it did not
//! issue, or issued differently, is refused (400) the way the real API refuses one it cannot
//! verify.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::mock_http::{Flavor, MockServer, Transcript, fragments, sse_event, text_pieces};

/// The endpoint the mock scripts.
pub const RESPONSES_PATH: &str = "/v1/responses";

/// Input tokens reported by every scripted reply.
const INPUT_TOKENS: usize = 42;

/// A local HTTP server speaking the OpenAI Responses wire format.
///
/// `POST /v1/responses` answers with the next queued [`crate::MockResponse`] (FIFO); when
/// the queue is empty it answers 500 (`server_error`). Any other path answers 404. Every
/// request is captured with its arrival time.
///
/// If the request has `"stream": true` and the scripted answer is a 2xx `response` object,
/// it is sent as the documented event sequence (each record `event: <type>\ndata: <json>`,
/// with a `sequence_number`): `response.created`, `response.in_progress`; per output item
/// `response.output_item.added` (a message with empty `content`, a function call with
/// `arguments: ""`, a reasoning item with empty `summary`), its deltas (word-sized
/// `response.output_text.delta`s between `content_part.added`/`.done`, >= 2
/// `response.function_call_arguments.delta` fragments then `.done`) and
/// `response.output_item.done` with the whole item; then `response.completed` (or
/// `response.incomplete`) with the whole response. Cut, slow and in-stream-error deliveries
/// work as for the other mocks (the error event: `event: error` with `code` and `message`).
///
/// Besides the checks every mock makes (`mock_checks.rs`), this one refuses a request whose
/// `input` replays a `reasoning` item it never issued or altered (compared as JSON values
/// with the item it answered with), and a `function_call_output` answering no earlier
/// `function_call`.
pub struct MockResponses {
    server: MockServer,
}

impl std::ops::Deref for MockResponses {
    type Target = MockServer;

    fn deref(&self) -> &MockServer {
        &self.server
    }
}

impl MockResponses {
    /// Starts the server on `127.0.0.1:<free port>`.
    pub fn start() -> anyhow::Result<MockResponses> {
        Ok(MockResponses {
            server: MockServer::start(Flavor::Responses)?,
        })
    }

    /// `http://127.0.0.1:<port>/v1` (clients append `/responses`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.server.addr())
    }

    /// A reasoning output item with an opaque `encrypted_content` of this mock's making and a
    /// one-part summary.
    pub fn reasoning_item(summary: &str) -> Value {
        let id = uuid::Uuid::new_v4().simple().to_string();
        json!({
            "id": format!("rs_{id}"),
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": summary}],
            "encrypted_content": format!("gAAAAB{id}mock=="),
        })
    }

    /// A `response` whose output is a reasoning item (`summary`) and the message `text`.
    pub fn text_reply(summary: &str, text: &str) -> Value {
        let message = json!({
            "type": "message",
            "id": format!("msg_{}", uuid::Uuid::new_v4().simple()),
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        });
        let words = text.split_whitespace().count().max(1);
        response(vec![Self::reasoning_item(summary), message], words)
    }

    /// A `response` whose output is a reasoning item (`summary`) and function calls:
    /// `calls` = `[(call_id, name, arguments_json_text)]`.
    pub fn tool_calls_reply(summary: &str, calls: &[(&str, &str, &str)]) -> Value {
        let mut output = vec![Self::reasoning_item(summary)];
        for (call_id, name, arguments) in calls {
            output.push(json!({
                "type": "function_call",
                "id": format!("fc_{}", uuid::Uuid::new_v4().simple()),
                "call_id": call_id,
                "name": name,
                "arguments": arguments,
                "status": "completed",
            }));
        }
        response(output, 10 * calls.len().max(1))
    }

    /// An output `message` item with `text`.
    pub fn message_item(text: &str) -> Value {
        json!({
            "type": "message",
            "id": format!("msg_{}", uuid::Uuid::new_v4().simple()),
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        })
    }

    /// An output `function_call` item.
    pub fn function_call_item(call_id: &str, name: &str, arguments: &str) -> Value {
        json!({
            "type": "function_call",
            "id": format!("fc_{}", uuid::Uuid::new_v4().simple()),
            "call_id": call_id,
            "name": name,
            "arguments": arguments,
            "status": "completed",
        })
    }

    /// A completed `response` with these output items, in this order.
    pub fn reply(output: Vec<Value>) -> Value {
        response(output, 10)
    }

    /// An `incomplete` response (out of output tokens) with these output items.
    pub fn incomplete_reply(output: Vec<Value>) -> Value {
        let mut r = response(output, 10);
        r["status"] = json!("incomplete");
        r["incomplete_details"] = json!({"reason": "max_output_tokens"});
        r
    }

    /// An OpenAI-style error body.
    pub fn error_body(message: &str, error_type: &str, code: Option<&str>) -> Value {
        json!({"error": {"message": message, "type": error_type, "param": null, "code": code}})
    }

    /// The body of a 429 rate-limit answer.
    pub fn rate_limit_body() -> Value {
        Self::error_body(
            "Rate limit reached for requests (mock)",
            "requests",
            Some("rate_limit_exceeded"),
        )
    }
}

/// A completed `response` object with `output` and its usage.
fn response(output: Vec<Value>, output_tokens: usize) -> Value {
    json!({
        "id": format!("resp_{}", uuid::Uuid::new_v4().simple()),
        "object": "response",
        "created_at": 1_741_476_542,
        "status": "completed",
        "error": null,
        "incomplete_details": null,
        "model": "mock",
        "output": output,
        "store": false,
        "usage": {
            "input_tokens": INPUT_TOKENS,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 4},
            "total_tokens": INPUT_TOKENS + output_tokens,
        },
    })
}

/// Whether `body` is a `response` object (a reply the mock streams).
pub(crate) fn is_response(body: &Value) -> bool {
    body.get("object").and_then(Value::as_str) == Some("response")
}

/// What followed an issued reasoning item: its type, and for a message its text (what the
/// mock compares a replayed follower with); `null` when the reasoning item came last.
fn follower_of(item: Option<&Value>) -> Value {
    match item {
        None => Value::Null,
        Some(item) if item["type"] == "message" => json!({
            "type": "message",
            "text": message_text(item),
        }),
        Some(item) => json!({"type": item["type"]}),
    }
}

/// The text of a message item (its `output_text` parts, joined).
fn message_text(item: &Value) -> String {
    item["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|part| part["text"].as_str())
        .collect()
}

/// Remembers the reasoning items of a reply the mock is about to send, by their
/// `encrypted_content`: `{"item": <the item>, "follower": <follower_of>}`.
pub(crate) fn issue(body: &Value, issued: &mut BTreeMap<String, Value>) {
    if !is_response(body) {
        return;
    }
    let output = body["output"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (at, item) in output.iter().enumerate() {
        if item["type"] == "reasoning"
            && let Some(content) = item["encrypted_content"].as_str()
        {
            issued.insert(
                content.to_owned(),
                json!({"item": item, "follower": follower_of(output.get(at + 1))}),
            );
        }
    }
}

/// What the real API would refuse in a request's `input`: reasoning items it cannot verify
/// (never `issued`, or altered), reasoning items sent without the item that followed them
/// when issued (`400 Item 'rs_..' of type 'reasoning' was provided without its required
/// following item`, continuedev/continue#8933, vercel/ai#7099: reasoning and the item after
/// it "must appear as consecutive pairs", openai/openai-dotnet#1050; the mock takes the
/// follower's type, and a message's text, as the pair), and tool outputs answering no
/// earlier call.
pub(crate) fn violations(body: &Value, issued: &BTreeMap<String, Value>) -> Vec<String> {
    let mut found = Vec::new();
    let mut calls = BTreeSet::new();
    let input = body["input"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (at, item) in input.iter().enumerate() {
        let id = item["id"].as_str().unwrap_or("?");
        match item["type"].as_str() {
            Some("reasoning") => match item["encrypted_content"].as_str() {
                None => found.push(format!(
                    "input[{at}]: reasoning item {id} has no encrypted_content (with store=false \
                     only encrypted reasoning can be sent back)"
                )),
                Some(content) => match issued.get(content) {
                    None => found.push(format!(
                        "input[{at}]: the encrypted content of reasoning item {id} could not be \
                         verified (this server never issued it)"
                    )),
                    Some(original) if original["item"] != *item => found.push(format!(
                        "input[{at}]: reasoning item {id} was altered: sent {item}, issued {}",
                        original["item"]
                    )),
                    Some(original) => {
                        let wanted = &original["follower"];
                        let next = input.get(at + 1);
                        if wanted.is_null() || follower_of(next) != *wanted {
                            found.push(format!(
                                "Item '{id}' of type 'reasoning' was provided without its \
                                 required following item (input[{at}] is followed by {}, \
                                 issued before {wanted})",
                                next.map_or("nothing".to_owned(), |n| follower_of(Some(n))
                                    .to_string())
                            ));
                        }
                    }
                },
            },
            Some("function_call") => {
                calls.insert(item["call_id"].as_str().unwrap_or_default().to_owned());
            }
            Some("function_call_output") => {
                let call = item["call_id"].as_str().unwrap_or_default();
                if !calls.contains(call) {
                    found.push(format!(
                        "input[{at}]: no tool call found for function call output with call_id {call}"
                    ));
                }
            }
            _ => {}
        }
    }
    found
}

/// The record of an in-stream `error` event carrying `error` (an error body).
pub(crate) fn error_record(error: &Value) -> String {
    let e = error.get("error").unwrap_or(error);
    sse_event(
        "error",
        &json!({
            "type": "error",
            "sequence_number": 99,
            "code": e.get("code").cloned().unwrap_or(Value::Null),
            "message": e.get("message").cloned().unwrap_or(json!("mock error")),
            "param": null,
        }),
    )
}

/// The documented event sequence of a `response` object (see [`MockResponses`]).
pub(crate) fn sse_transcript(body: &Value) -> Transcript {
    let mut records = Vec::new();
    let push = |records: &mut Vec<String>, kind: &str, mut data: Value| {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(records.len());
        records.push(sse_event(kind, &data));
    };
    let mut pending = body.clone();
    pending["status"] = json!("in_progress");
    pending["output"] = json!([]);
    pending["usage"] = Value::Null;
    push(
        &mut records,
        "response.created",
        json!({"response": pending}),
    );
    push(
        &mut records,
        "response.in_progress",
        json!({"response": pending}),
    );
    let output = body["output"].as_array().cloned().unwrap_or_default();
    for (index, item) in output.iter().enumerate() {
        let id = item["id"].clone();
        let mut added = item.clone();
        match item["type"].as_str() {
            Some("message") => added["content"] = json!([]),
            Some("function_call") => added["arguments"] = json!(""),
            Some("reasoning") => {
                added["summary"] = json!([]);
                if let Some(a) = added.as_object_mut() {
                    a.remove("encrypted_content");
                }
            }
            _ => {}
        }
        push(
            &mut records,
            "response.output_item.added",
            json!({"output_index": index, "item": added}),
        );
        match item["type"].as_str() {
            Some("message") => {
                for (ci, part) in item["content"].as_array().into_iter().flatten().enumerate() {
                    let at = json!({"item_id": id, "output_index": index, "content_index": ci});
                    let with = |mut v: Value, extra: Value| {
                        if let (Some(v), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
                            v.extend(extra.clone());
                        }
                        v
                    };
                    let text = part["text"].as_str().unwrap_or_default();
                    let empty = json!({"type": "output_text", "text": "", "annotations": []});
                    push(
                        &mut records,
                        "response.content_part.added",
                        with(at.clone(), json!({"part": empty})),
                    );
                    for piece in text_pieces(text) {
                        push(
                            &mut records,
                            "response.output_text.delta",
                            with(at.clone(), json!({"delta": piece})),
                        );
                    }
                    push(
                        &mut records,
                        "response.output_text.done",
                        with(at.clone(), json!({"text": text})),
                    );
                    push(
                        &mut records,
                        "response.content_part.done",
                        with(at, json!({"part": part})),
                    );
                }
            }
            Some("function_call") => {
                let arguments = item["arguments"].as_str().unwrap_or_default();
                for fragment in fragments(arguments) {
                    push(
                        &mut records,
                        "response.function_call_arguments.delta",
                        json!({"item_id": id, "output_index": index, "delta": fragment}),
                    );
                }
                push(
                    &mut records,
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": index, "arguments": arguments}),
                );
            }
            _ => {}
        }
        push(
            &mut records,
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
    }
    // A cut stream stops around the middle, never at the terminal event.
    let cut_at = (records.len() / 2).max(1);
    let terminal = match body["status"].as_str() {
        Some("incomplete") => "response.incomplete",
        Some("failed") => "response.failed",
        _ => "response.completed",
    };
    push(&mut records, terminal, json!({"response": body}));
    Transcript { records, cut_at }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The input of a request that replays `items` after a user message.
    fn input(items: &[&Value]) -> Value {
        let mut all = vec![json!({"role": "user", "content": "go"})];
        all.extend(items.iter().map(|v| (*v).clone()));
        all.push(json!({"role": "user", "content": "next"}));
        json!({"input": all})
    }

    #[test]
    fn a_reasoning_item_must_come_back_before_the_item_that_followed_it() {
        let rs1 = MockResponses::reasoning_item("one");
        let rs2 = MockResponses::reasoning_item("two");
        let (m1, m2) = (
            MockResponses::message_item("First. "),
            MockResponses::message_item("Second."),
        );
        let mut issued = BTreeMap::new();
        issue(
            &MockResponses::reply(vec![rs1.clone(), m1.clone(), rs2.clone(), m2.clone()]),
            &mut issued,
        );
        // As issued: fine.
        assert!(violations(&input(&[&rs1, &m1, &rs2, &m2]), &issued).is_empty());
        // The two messages merged: rs1's follower is not its own, rs2 has none.
        let merged = MockResponses::message_item("First. Second.");
        let found = violations(&input(&[&rs1, &merged, &rs2]), &issued);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found[0].contains("without its required following item"),
            "{found:?}"
        );
        // A reasoning-only answer replayed: nothing follows it.
        let rs3 = MockResponses::reasoning_item("three");
        issue(
            &MockResponses::incomplete_reply(vec![rs3.clone()]),
            &mut issued,
        );
        let found = violations(&input(&[&rs3]), &issued);
        assert_eq!(found.len(), 1, "{found:?}");
    }
}
