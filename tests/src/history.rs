//! Making Temporal histories greppable.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use serde_json::Value;

/// Maximum depth of "payload inside a decoded payload" recursion.
const MAX_NESTING: usize = 4;

/// Decodes every Temporal `Payload` found anywhere in `history_json` and
/// returns the decoded texts joined by newlines.
///
/// A payload is any JSON object with a string `data` field (usually next to
/// `metadata`), as produced by `temporal workflow show -o json
/// --no-json-shorthand-payloads` or by the SDK's history `to_json()`. `data` is
/// base64 (standard alphabet); undecodable values are skipped; bytes are
/// converted lossily to UTF-8 so that text inside binary (e.g. protobuf)
/// payloads is still found. A decoded payload that is itself JSON is searched
/// for nested payloads too (their decoded text is appended as well).
///
/// Payload `data` is base64 in raw histories, so grepping the raw JSON for a
/// secret can never fail; grep this instead (or [`history_search_text`]).
pub fn decode_history_payloads(history_json: &Value) -> String {
    let mut out = Vec::new();
    walk(history_json, 0, &mut out);
    out.join("\n")
}

/// The raw JSON text of `history_json` followed by
/// [`decode_history_payloads`]: the text to search when asserting that
/// something does (or does not) appear anywhere in a history, whether the
/// payloads were shown base64-encoded or in JSON-shorthand form.
pub fn history_search_text(history_json: &Value) -> String {
    format!("{history_json}\n{}", decode_history_payloads(history_json))
}

/// One activity a run completed: its type, and its input and result payloads decoded as JSON
/// (`Null` where a payload is missing or not JSON).
#[derive(Debug, Clone)]
pub struct CompletedActivity {
    pub name: String,
    pub input: Value,
    pub result: Value,
}

/// The activities of `history_json` that completed, in completion order.
pub fn completed_activities(history_json: &Value) -> Vec<CompletedActivity> {
    let events = history_json["events"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let id_of = |v: &Value| {
        v.as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| v.to_string())
    };
    let first_payload = |p: &Value| {
        p["payloads"][0]["data"]
            .as_str()
            .and_then(decode_b64)
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or(Value::Null)
    };
    events
        .iter()
        .filter_map(|e| {
            let done = e.get("activityTaskCompletedEventAttributes")?;
            let scheduled_id = id_of(&done["scheduledEventId"]);
            let scheduled = events
                .iter()
                .find(|s| id_of(&s["eventId"]) == scheduled_id)?
                .get("activityTaskScheduledEventAttributes")?;
            Some(CompletedActivity {
                name: scheduled["activityType"]["name"].as_str()?.to_owned(),
                input: first_payload(&scheduled["input"]),
                result: first_payload(&done["result"]),
            })
        })
        .collect()
}

fn walk(v: &Value, depth: usize, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            if let Some(Value::String(data)) = map.get("data")
                && let Some(bytes) = decode_b64(data)
            {
                let text = String::from_utf8_lossy(&bytes).into_owned();
                let nested = (depth < MAX_NESTING)
                    .then(|| serde_json::from_str::<Value>(&text).ok())
                    .flatten();
                out.push(text);
                if let Some(nested) = nested {
                    walk(&nested, depth + 1, out);
                }
            }
            for child in map.values() {
                walk(child, depth, out);
            }
        }
        Value::Array(items) => {
            for child in items {
                walk(child, depth, out);
            }
        }
        _ => {}
    }
}

fn decode_b64(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    STANDARD
        .decode(s)
        .or_else(|_| STANDARD_NO_PAD.decode(s.trim_end_matches('=')))
        .ok()
}
