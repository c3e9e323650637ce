//! Payload encryption helpers: random codec keys and a look at how each payload of a history is
//! encoded.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

/// A random AES-256 key, base64 (as `head -c32 /dev/urandom | base64` prints it).
pub fn codec_key() -> String {
    let mut bytes = uuid::Uuid::new_v4().as_bytes().to_vec();
    bytes.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    STANDARD.encode(bytes)
}

/// One payload found in a history (`temporal workflow show -o json
/// --no-json-shorthand-payloads`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadSeen {
    /// JSON path to it, e.g. `/events/0/workflowExecutionStartedEventAttributes/input/payloads/0`.
    pub path: String,
    /// Its `encoding` metadata, decoded (`binary/encrypted`, `json/plain`, ...).
    pub encoding: String,
    /// Its `encryption-key-id` metadata, decoded, if any.
    pub key_id: Option<String>,
}

/// Every payload of `history` (objects with a `metadata.encoding`), search attributes
/// (`indexedFields`, plain by design) left out.
pub fn history_payloads(history: &Value) -> Vec<PayloadSeen> {
    let mut out = Vec::new();
    walk(history, String::new(), &mut out);
    out
}

fn walk(v: &Value, path: String, out: &mut Vec<PayloadSeen>) {
    match v {
        Value::Object(map) => {
            if let Some(meta) = map.get("metadata").and_then(Value::as_object)
                && let Some(encoding) = meta.get("encoding").and_then(meta_text)
            {
                out.push(PayloadSeen {
                    path: path.clone(),
                    encoding,
                    key_id: meta.get("encryption-key-id").and_then(meta_text),
                });
            }
            for (k, child) in map {
                if k != "indexedFields" {
                    walk(child, format!("{path}/{k}"), out);
                }
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                walk(child, format!("{path}/{i}"), out);
            }
        }
        _ => {}
    }
}

fn meta_text(v: &Value) -> Option<String> {
    let s = v.as_str()?;
    STANDARD
        .decode(s)
        .ok()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}
