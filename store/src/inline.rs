//! Content by reference: what a turn adds to workflow history is written to the
//! blob store once and carried as a reference with a short preview everywhere after.
//!
//! Measured before this (suite `history_budget`, 40 scripted turns, server
//! `historySizeBytes`): turns adding ~1.2 KB of assistant text and a 3 KB tool output cost
//! 14.6 KB of history each against 4.6 KB for turns adding ~100 bytes: the tool output went
//! into the `run_tool` completion and again into the next `llm_generate` input
//! (`ConversationRef.added`), the text into the `llm_generate` completion and again into the
//! next input, the arguments into the `run_tool` input too.
//!
//! Design:
//! - One worker setting, `[history] inline_bytes` (default [`DEFAULT_INLINE_BYTES`], checked
//!   against [`MIN_INLINE_BYTES`]..=[`MAX_INLINE_BYTES`] at start-up), given to the activities.
//!   The workflow never reads it: it records what the activities returned.
//! - A tool output over it ([`offload_result`], in the tool activity): the whole content goes
//!   to the store (`ToolResult.content_stored`: blob id and size), `content` becomes a
//!   [`preview`]: its first [`PREVIEW_BYTES`] and a marker with the size and the blob id (for
//!   people reading the Temporal UI).
//! - Assistant text over it, in replies with tool calls (a final answer stays whole: it is the
//!   run's result and what `--output-schema` checks): `text_stored`, a preview.
//! - Tool-call arguments over it: the exact arguments go to the store (`arguments_ref`), the
//!   inline arguments keep `command` and `path` whole (what approval rules match) up to
//!   64 KiB and other strings cut to a preview; `cut.digest` = SHA-256 of the canonical JSON
//!   (loop detection compares it), `cut.subject_cut` = a matched field was cut anyway (the
//!   policy then asks a human). The new fields are messages, absent from payloads when unset,
//!   so content kept inline costs no bytes more.
//! - The LLM activities restore every reference before a provider sees the request
//!   (`Conversations::with_full_content`); the view keeps sizes right through the stored
//!   sizes (elision, token estimates); `baton transcript` reads the
//!   store. Old payloads have none of these fields (proto3 defaults) and read as before.

use baton_core::{guards, view::cut_text};
use baton_proto::{CutArguments, StoredText, ToolCall, ToolResult};

use crate::{BlobId, BlobStore, StoreError};

/// Default of `[history] inline_bytes`.
pub const DEFAULT_INLINE_BYTES: usize = 1024;
/// Smallest accepted `[history] inline_bytes` (below it a preview would be most of the text).
pub const MIN_INLINE_BYTES: usize = 256;
/// Largest accepted `[history] inline_bytes`.
pub const MAX_INLINE_BYTES: usize = 64 * 1024;
/// Bytes of content a preview keeps.
pub const PREVIEW_BYTES: usize = 200;
/// Fields approval rules match, kept whole in cut arguments up to [`KEEP_WHOLE_UP_TO`].
const KEEP_WHOLE: [&str; 2] = ["command", "path"];
const KEEP_WHOLE_UP_TO: usize = 64 * 1024;

/// `text`'s first [`PREVIEW_BYTES`] and a marker saying where the rest is.
pub fn preview(text: &str, id: &BlobId) -> String {
    let mut out = text.to_owned();
    cut_text(&mut out, PREVIEW_BYTES);
    out.push_str(&format!(
        "\n[baton: {} bytes in all, in the blob store as {}]",
        text.len(),
        id.as_str()
    ));
    out
}

/// Stores `text` when it is over `limit` bytes: `text` becomes its preview; returns where
/// the whole text is.
pub async fn offload_text(
    store: &dyn BlobStore,
    limit: usize,
    text: &mut String,
) -> Result<Option<StoredText>, StoreError> {
    if text.len() <= limit {
        return Ok(None);
    }
    let id = store.put(text.clone().into_bytes()).await?;
    let bytes = text.len().min(u32::MAX as usize) as u32;
    *text = preview(text, &id);
    Ok(Some(StoredText {
        blob: id.to_string(),
        bytes,
    }))
}

/// A tool result with its content over `limit` by reference (see the module doc).
pub async fn offload_result(
    store: &dyn BlobStore,
    limit: usize,
    result: &mut ToolResult,
) -> Result<(), StoreError> {
    if result.content_stored.is_none() {
        result.content_stored = offload_text(store, limit, &mut result.content).await?;
    }
    Ok(())
}

/// A call with its arguments over `limit` by reference (see the module doc).
pub async fn offload_arguments(
    store: &dyn BlobStore,
    limit: usize,
    call: &mut ToolCall,
) -> Result<(), StoreError> {
    if call.arguments.len() <= limit || !call.arguments_ref.is_empty() {
        return Ok(());
    }
    let id = store.put(call.arguments.clone().into_bytes()).await?;
    call.arguments_ref = id.to_string();
    let digest = arguments_digest(&call.arguments);
    let bytes = call.arguments.len().min(u32::MAX as usize) as u32;
    let (shortened, subject_cut) = shorten_arguments(&call.arguments, PREVIEW_BYTES);
    call.arguments = shortened;
    call.cut = Some(CutArguments {
        digest,
        subject_cut,
        bytes,
    });
    Ok(())
}

/// Hex SHA-256 of `arguments` in canonical JSON form (`{"a":1,"b":2}` and `{"b":2,"a":1}`
/// have the same digest, as loop detection compares them).
pub fn arguments_digest(arguments: &str) -> String {
    BlobId::of(guards::normalize_json(arguments).as_bytes()).to_string()
}

/// Arguments with long string values cut to `cut_to` bytes (still valid JSON when they
/// were), `command` and `path` kept whole up to 64 KiB; and whether one of those was cut.
pub fn shorten_arguments(arguments: &str, cut_to: usize) -> (String, bool) {
    fn cut(value: &mut serde_json::Value, key: Option<&str>, cut_to: usize, subject: &mut bool) {
        match value {
            serde_json::Value::String(s) => {
                let matched = key.is_some_and(|k| KEEP_WHOLE.contains(&k));
                let keep = if matched { KEEP_WHOLE_UP_TO } else { cut_to };
                if s.len() > keep {
                    *subject |= matched;
                    let total = s.len();
                    cut_text(s, keep);
                    s.push_str(&format!(
                        " [cut: {total} bytes in all, kept in the blob store]"
                    ));
                }
            }
            serde_json::Value::Array(items) => {
                items.iter_mut().for_each(|v| cut(v, None, cut_to, subject))
            }
            serde_json::Value::Object(map) => {
                for (k, v) in map.iter_mut() {
                    cut(v, Some(k.as_str()), cut_to, subject);
                }
            }
            _ => {}
        }
    }
    let mut subject_cut = false;
    match serde_json::from_str::<serde_json::Value>(arguments) {
        Ok(mut value) => {
            cut(&mut value, None, cut_to, &mut subject_cut);
            (value.to_string(), subject_cut)
        }
        Err(_) => {
            // Not JSON: no rule can read a field of it; the tool will refuse it too.
            let mut s = arguments.to_owned();
            cut_text(&mut s, cut_to);
            (s, true)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::local::LocalStore;

    #[tokio::test]
    async fn content_over_the_limit_becomes_a_preview_with_its_size_and_blob_id() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(LocalStore::new(dir.path()).unwrap());
        let content = "line of output\n".repeat(300);
        let mut result = ToolResult {
            call_id: "c1".into(),
            content: content.clone(),
            ..Default::default()
        };
        offload_result(store.as_ref(), 1024, &mut result)
            .await
            .unwrap();
        let stored = result.content_stored.clone().unwrap();
        assert_eq!(stored.bytes as usize, content.len());
        let id = BlobId::parse(&stored.blob).unwrap();
        assert_eq!(store.get(&id).await.unwrap(), content.as_bytes());
        assert!(
            result.content.len() < PREVIEW_BYTES + 120,
            "{}",
            result.content
        );
        assert!(result.content.starts_with("line of output\n"));
        assert!(result.content.ends_with(&format!(
            "[baton: {} bytes in all, in the blob store as {}]",
            content.len(),
            stored.blob
        )));
        // At the limit: left alone.
        let mut small = ToolResult {
            content: "x".repeat(1024),
            ..Default::default()
        };
        offload_result(store.as_ref(), 1024, &mut small)
            .await
            .unwrap();
        assert!(small.content_stored.is_none() && small.content.len() == 1024);
    }

    #[tokio::test]
    async fn long_arguments_keep_what_rules_match_and_a_digest_of_the_exact_text() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(LocalStore::new(dir.path()).unwrap());
        let exact = serde_json::json!({"path": "src/a.rs", "content": "y".repeat(4000)});
        let mut call = ToolCall {
            name: "write_file".into(),
            arguments: exact.to_string(),
            ..Default::default()
        };
        offload_arguments(store.as_ref(), 1024, &mut call)
            .await
            .unwrap();
        let shown: serde_json::Value = serde_json::from_str(&call.arguments).unwrap();
        assert_eq!(shown["path"], "src/a.rs");
        let cut = call.cut.clone().unwrap();
        assert!(!cut.subject_cut);
        assert_eq!(cut.bytes as usize, exact.to_string().len());
        assert!(call.arguments.len() < 400, "{}", call.arguments);
        let id = BlobId::parse(&call.arguments_ref).unwrap();
        assert_eq!(store.get(&id).await.unwrap(), exact.to_string().as_bytes());
        // Key order does not change the digest; content does.
        let reordered = format!(r#"{{"content":"{}","path":"src/a.rs"}}"#, "y".repeat(4000));
        assert_eq!(cut.digest, arguments_digest(&reordered));
        let other = format!(r#"{{"content":"{}z","path":"src/a.rs"}}"#, "y".repeat(4000));
        assert_ne!(cut.digest, arguments_digest(&other));

        // A command too long to keep whole is cut, and says so.
        let (_, cut) = shorten_arguments(
            &serde_json::json!({"command": "x".repeat(KEEP_WHOLE_UP_TO + 1)}).to_string(),
            PREVIEW_BYTES,
        );
        assert!(cut);
        let (_, cut) = shorten_arguments("not json at all", PREVIEW_BYTES);
        assert!(cut, "arguments no rule can read count as cut");
    }
}
