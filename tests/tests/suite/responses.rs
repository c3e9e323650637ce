//! The `openai-responses` provider end to end: a real worker and dev server against
//! [`MockResponses`], which refuses reasoning items it did not issue or that were altered.
//! A tool loop carries every turn's encrypted reasoning into the later requests verbatim, and
//! a 429 with an HTTP-date `Retry-After` is retried no earlier than that date.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicUsize, Ordering},
};
use std::time::{Duration, Instant, SystemTime};

use baton_tests::*;
use common::*;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn responses_worker(server: &DevServer, llm: &MockResponses, queue: &str) -> Worker {
    let base = llm.base_url();
    worker(server, queue, &[("OPENAI_BASE_URL", base.as_str())])
}

/// The reasoning items of a request's `input`, in order.
fn reasoning_inputs(request: &CapturedRequest) -> Vec<Value> {
    request.body["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "reasoning")
        .cloned()
        .collect()
}

#[test]
fn a_tool_loop_carries_the_encrypted_reasoning_of_every_turn() {
    let server = DevServer::start().unwrap();
    let llm = MockResponses::start().unwrap();
    let queue = unique("responses");
    let _w = responses_worker(&server, &llm, &queue);
    let replies = [
        MockResponses::tool_calls_reply("List first.", &[("call_1", "list_files", "{}")]),
        MockResponses::tool_calls_reply(
            "Then read.",
            &[("call_2", "read_file", r#"{"path":"missing.txt"}"#)],
        ),
        MockResponses::text_reply("Done.", "Listed and read."),
    ];
    for reply in &replies {
        llm.push(reply.clone());
    }
    let run = unique("run-responses");
    submit(
        &server,
        &queue,
        &run,
        &[
            "--provider",
            "openai-responses",
            "--model",
            "gpt-5-test",
            "--no-approval",
        ],
        "Look around.",
    );
    let r = result(&server, &run, 0);
    assert_eq!(r["answer"], "Listed and read.");

    let reqs = llm.requests();
    assert_eq!(reqs.len(), 3, "{reqs:#?}");
    let issued: Vec<Value> = replies.iter().map(|r| r["output"][0].clone()).collect();
    for req in &reqs {
        assert_eq!(req.path, RESPONSES_PATH);
        assert_eq!(req.body["model"], "gpt-5-test");
        assert_eq!(req.body["store"], false);
        assert_eq!(req.body["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(req.body["stream"], true);
        assert!(req.body["instructions"].as_str().unwrap().contains("baton"));
        // The activity keys the provider's prompt cache by the run.
        assert_eq!(req.body["prompt_cache_key"], run.as_str());
    }
    // Turn N sends back the reasoning items of turns 1..N-1, exactly as issued, each right
    // before the call it led to.
    assert_eq!(reasoning_inputs(&reqs[0]), Vec::<Value>::new());
    assert_eq!(reasoning_inputs(&reqs[1]), issued[..1].to_vec());
    assert_eq!(reasoning_inputs(&reqs[2]), issued[..2].to_vec());
    let input = reqs[2].body["input"].as_array().unwrap();
    let kinds: Vec<&str> = input
        .iter()
        .map(|i| i["type"].as_str().unwrap_or("user"))
        .collect();
    assert_eq!(
        kinds,
        [
            "user",
            "reasoning",
            "function_call",
            "function_call_output",
            "reasoning",
            "function_call",
            "function_call_output"
        ]
    );
    assert_eq!(input[2]["call_id"], "call_1");
    assert_eq!(input[3]["call_id"], "call_1");
    assert_eq!(input[5]["call_id"], "call_2");
    assert!(llm.violations().is_empty());
}

#[tokio::test]
async fn the_mock_refuses_reasoning_it_did_not_issue() {
    let llm = MockResponses::start().unwrap();
    let issued = MockResponses::tool_calls_reply("x", &[("c1", "list_files", "{}")]);
    llm.push(issued.clone());
    let client = reqwest::Client::new();
    let url = format!("{}/responses", llm.base_url());
    let send = |input: Value| {
        let request = client
            .post(&url)
            .json(&json!({"model": "m", "input": input, "store": false}));
        async move { request.send().await.unwrap() }
    };
    let first = send(json!([{"role": "user", "content": "hi"}])).await;
    assert_eq!(first.status(), 200);
    let item = issued["output"][0].clone();
    let call = issued["output"][1].clone();
    let answer = json!({"type": "function_call_output", "call_id": "c1", "output": "x"});
    let mut altered = item.clone();
    altered["summary"][0]["text"] = "edited".into();
    let mut forged = item.clone();
    forged["encrypted_content"] = "gAAAAABforged".into();
    for bad in [altered, forged] {
        let reply = send(json!([bad, call, answer])).await;
        assert_eq!(reply.status(), 400);
        let body: Value = reply.json().await.unwrap();
        assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    }
    assert_eq!(llm.take_violations().len(), 2);
    // A tool output answering no call is refused too.
    let orphan =
        send(json!([{"type": "function_call_output", "call_id": "c9", "output": "x"}])).await;
    assert_eq!(orphan.status(), 400);
    assert_eq!(llm.take_violations().len(), 1);
    // The item as issued passes (the queue is empty now: 500, not 400).
    assert_eq!(send(json!([item, call, answer])).await.status(), 500);
    assert!(llm.violations().is_empty());
}

#[test]
fn a_429_with_an_http_date_retry_after_is_retried_no_earlier_than_that_date() {
    let server = DevServer::start().unwrap();
    let llm = MockResponses::start().unwrap();
    let queue = unique("responses-429");
    let _w = responses_worker(&server, &llm, &queue);
    // The date is set when the first request arrives, ~3 s ahead: the worker's start-up
    // cannot eat into it.
    let calls = Arc::new(AtomicUsize::new(0));
    let sent: Arc<Mutex<Option<(Instant, SystemTime)>>> = Arc::default();
    let (calls_r, sent_r) = (Arc::clone(&calls), Arc::clone(&sent));
    llm.set_responder(Arc::new(move |_req| {
        if calls_r.fetch_add(1, Ordering::SeqCst) > 0 {
            return Some(MockResponse::ok(MockResponses::text_reply(
                "Waited.",
                "after the date",
            )));
        }
        let date = SystemTime::now() + Duration::from_secs(3);
        let header = httpdate::fmt_http_date(date);
        // The date as the client reads it (whole seconds), on the mock's monotonic clock.
        let parsed = httpdate::parse_http_date(&header).unwrap();
        let ahead = parsed
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        *sent_r.lock().unwrap() = Some((Instant::now() + ahead, parsed));
        Some(
            MockResponse::error(429, MockResponses::rate_limit_body())
                .header("retry-after", &header),
        )
    }));
    let run = unique("run-429-date");
    submit(
        &server,
        &queue,
        &run,
        &["--provider", "openai-responses", "--no-approval"],
        "go",
    );
    let r = ended(&server, &run, 0);
    assert_eq!(r.answer, "after the date");
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2);
    let (date_at, date) = sent.lock().unwrap().unwrap();
    assert!(
        reqs[1].received_at >= date_at,
        "retried {:?} before the Retry-After date {}",
        date_at - reqs[1].received_at,
        httpdate::fmt_http_date(date)
    );
    // The date is ~3 s ahead, less under a second lost to its whole-second resolution.
    let gap = reqs[1].received_at - reqs[0].received_at;
    assert!(gap >= Duration::from_secs(2), "retried after {gap:?}");
}

/// An answer of two messages, each after its own reasoning item, then a
/// reasoning-only `incomplete` answer. The mock refuses a reasoning item sent without the
/// item that followed it; every later request keeps the pairs as issued and leaves the
/// follower-less reasoning out, so the run finishes.
#[test]
fn reasoning_items_go_back_paired_with_the_items_that_followed_them() {
    let server = DevServer::start().unwrap();
    let llm = MockResponses::start().unwrap();
    let queue = unique("responses-pairs");
    let _w = responses_worker(&server, &llm, &queue);
    let (rs1, rs2, rs3) = (
        MockResponses::reasoning_item("Plan."),
        MockResponses::reasoning_item("Then list."),
        MockResponses::reasoning_item("Out of tokens while thinking."),
    );
    llm.push(MockResponses::reply(vec![
        rs1.clone(),
        MockResponses::message_item("I will look around. "),
        rs2.clone(),
        MockResponses::message_item("Listing now."),
        MockResponses::function_call_item("call_1", "list_files", "{}"),
    ]));
    llm.push(MockResponses::incomplete_reply(vec![rs3.clone()]));
    llm.push(MockResponses::text_reply(
        "Done.",
        "The workspace is empty.",
    ));
    let run = unique("run-responses-pairs");
    submit(
        &server,
        &queue,
        &run,
        &["--provider", "openai-responses", "--no-approval"],
        "Describe the workspace.",
    );
    let r = ended(&server, &run, 0);
    assert_eq!(r.answer, "The workspace is empty.", "{r:?}");
    assert_eq!(llm.take_violations(), Vec::<String>::new());
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 3);
    // The first answer's items, in their order, in both later requests; rs3 in neither.
    for req in &reqs[1..] {
        let input = req.body["input"].as_array().unwrap();
        let at = input.iter().position(|i| i == &rs1).unwrap();
        assert_eq!(input[at + 1]["content"][0]["text"], "I will look around. ");
        assert_eq!(input[at + 2], rs2);
        assert_eq!(input[at + 3]["content"][0]["text"], "Listing now.");
        assert_eq!(input[at + 4]["call_id"], "call_1");
        assert!(!input.contains(&rs3), "{input:?}");
    }
}
