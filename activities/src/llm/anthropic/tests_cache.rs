//! Prompt caching: breakpoint placement and count, a stable prefix across turns and across a
//! compaction, the TTL values, cache usage of whole and streamed answers.

use std::time::Duration;

use baton_core::view::model_view;
use baton_proto::{LlmRequest, ModelConfig, ViewSpec};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::{
    Anthropic,
    cache::{MAX_BREAKPOINTS, cache_control, count_breakpoints, strip_breakpoints},
    request_body_for,
    tests::{assistant, provider, sample_request},
};
use crate::llm::test_items::{result, usage, user};
use crate::llm::{
    LlmError, Provider,
    test_server::{Reply, serve_once},
};

/// The request of a run after `turns` tool turns (each: one call, its result), seen through
/// `spec`.
fn turn_request(turns: usize, spec: &ViewSpec) -> LlmRequest {
    let mut conversation = vec![user("fix the bug in src/")];
    for t in 0..turns {
        let id = format!("toolu_{t}");
        conversation.push(assistant(
            "",
            &[(&id, "read_file", r#"{"path":"src/a.rs"}"#)],
        ));
        conversation.push(result(&id, &format!("contents of read {t}"), false));
    }
    LlmRequest {
        conversation: model_view(&conversation, spec),
        ..sample_request()
    }
}

/// The stable prefix in the API's cache order (tools, then system) as sent: the bytes up to
/// and including the system prompt's breakpoint, the first one that covers both.
fn prefix(body: &Value) -> String {
    format!("{}{}", body["tools"], body["system"])
}

/// Paths of the blocks that carry `cache_control`.
fn breakpoints(body: &Value) -> Vec<String> {
    fn walk(v: &Value, path: String, out: &mut Vec<String>) {
        match v {
            Value::Object(map) => {
                if map.contains_key("cache_control") {
                    out.push(path.clone());
                }
                for (k, v) in map {
                    walk(v, format!("{path}/{k}"), out);
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    walk(v, format!("{path}/{i}"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(body, String::new(), &mut out);
    out
}

#[test]
fn the_prefix_is_byte_identical_across_turns_and_a_compaction() {
    let plain = ViewSpec::default();
    let compacted = ViewSpec {
        summary: "Read src/a.rs twice; the bug is in fn a.".into(),
        summary_upto: 3,
        ..Default::default()
    };
    let bodies: Vec<Value> = [(1, &plain), (2, &plain), (3, &plain), (3, &compacted)]
        .into_iter()
        .map(|(turns, spec)| request_body_for(&turn_request(turns, spec), true).unwrap())
        .collect();
    let first = prefix(&bodies[0]);
    assert!(
        first.contains(r#""cache_control":{"type":"ephemeral"}"#),
        "{first}"
    );
    for body in &bodies {
        assert_eq!(prefix(body), first);
        assert!(count_breakpoints(body) <= MAX_BREAKPOINTS);
    }
    // Breakpoints: the last tool, the system block, the last message's last block, the
    // previous user message's last block.
    assert_eq!(
        breakpoints(&bodies[1]),
        [
            "/messages/2/content/0",
            "/messages/4/content/0",
            "/system/0",
            "/tools/1"
        ]
    );
    assert_eq!(
        bodies[1]["messages"][4]["content"][0]["tool_use_id"],
        json!("toolu_1")
    );
    // Each request starts with the previous one's messages (breakpoints aside): the
    // previous moving end is a prefix the cache can read.
    for pair in bodies[..3].windows(2) {
        let (mut before, mut after) = (pair[0]["messages"].clone(), pair[1]["messages"].clone());
        strip_breakpoints(&mut before);
        strip_breakpoints(&mut after);
        let n = before.as_array().unwrap().len();
        assert_eq!(
            Value::Array(after.as_array().unwrap()[..n].to_vec()),
            before
        );
    }
    // The compacted view: the summary replaces the older turns; the prefix stays.
    // (the summary is a user message, merged with the task's).
    let summary = &bodies[3]["messages"][0]["content"][1]["text"];
    assert!(
        summary.as_str().unwrap().contains("the bug is in fn a"),
        "{summary}"
    );
    assert_eq!(bodies[3]["messages"].as_array().unwrap().len(), 5);
}

#[test]
fn no_tools_no_system_still_marks_the_moving_end() {
    let req = LlmRequest {
        system_prompt: String::new(),
        tools: Vec::new(),
        ..turn_request(1, &ViewSpec::default())
    };
    let body = request_body_for(&req, false).unwrap();
    assert_eq!(
        breakpoints(&body),
        ["/messages/0/content/0", "/messages/2/content/0"]
    );
    assert!(body.get("system").is_none());
}

#[test]
fn cache_ttl_values() {
    assert_eq!(cache_control("").unwrap(), json!({"type": "ephemeral"}));
    assert_eq!(cache_control("5m").unwrap(), json!({"type": "ephemeral"}));
    assert_eq!(
        cache_control("1h").unwrap(),
        json!({"type": "ephemeral", "ttl": "1h"})
    );
    let err = cache_control("10m").unwrap_err();
    assert!(matches!(err, LlmError::Config(_)), "{err}");
    assert!(err.to_string().contains(r#""10m""#), "{err}");
    assert!(err.to_string().contains(r#""5m" or "1h""#), "{err}");

    let mut req = sample_request();
    req.model = Some(ModelConfig {
        cache_ttl: "1h".into(),
        ..req.model.unwrap_or_default()
    });
    let body = request_body_for(&req, false).unwrap();
    assert_eq!(
        body["tools"][1]["cache_control"],
        json!({"type": "ephemeral", "ttl": "1h"})
    );
    assert_eq!(
        body["system"][0]["cache_control"],
        json!({"type": "ephemeral", "ttl": "1h"})
    );
}

#[tokio::test]
async fn a_bad_ttl_is_refused_before_anything_is_sent() {
    let mut req = sample_request();
    req.model = Some(ModelConfig {
        cache_ttl: "forever".into(),
        ..Default::default()
    });
    // Port 9 (discard) on loopback: a request that went out would be a transport error.
    let p = Anthropic::new("http://127.0.0.1:9", None, "", Duration::from_secs(2)).unwrap();
    let err = p.generate(&req).await.unwrap_err();
    assert!(matches!(err, LlmError::Config(_)), "{err}");
}

#[tokio::test]
async fn streamed_cache_usage_is_read_and_counted_in_the_input() {
    let fixture = include_str!("fixtures/cached_stream.sse");
    let (base, _server) = serve_once(Reply::sse_chunked(fixture, 7, true)).await;
    let r = provider(&base).generate(&sample_request()).await.unwrap();
    // input_tokens 21 + written 188 + read 1800.
    assert_eq!(r.usage, Some(usage(2009, 12, 1800, 188)));
    assert_eq!(r.message.unwrap().text, "Done.");
}

#[test]
fn a_compaction_request_carries_no_cache_breakpoint() {
    // The summary prompt is unique and never read back, so writing it to the
    // cache (1.25x input for 5 min, 2x for 1 h) would only cost.
    let request = crate::llm::compact::summary_request(&baton_proto::CompactRequest {
        task: "fix the bug".into(),
        items: vec![user("a long transcript")],
        model: Some(ModelConfig {
            provider: "anthropic".into(),
            cache_ttl: "1h".into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    let body = super::request_body_for(&request, true).unwrap();
    assert!(!body.to_string().contains("cache_control"), "{body}");
    // A turn of the run still gets its breakpoints.
    let turn = turn_request(2, &ViewSpec::default());
    let body = super::request_body_for(&turn, true).unwrap();
    assert!(body.to_string().contains("cache_control"), "{body}");
}
