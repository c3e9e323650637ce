//! One `tools/call` of an MCP server and its result as a [`ToolResult`]: text blocks joined by
//! lines; `structuredContent` (as JSON text) only when there is no text; images, audio and
//! blob resources decoded into the blob store as [`Attachment`]s with a text stub for the
//! model; embedded text resources inline after a `[resource <uri>]` line; resource links as
//! `[resource link: <name> <uri>]`. The text is capped like a built-in tool's output.
//!
//! What the model can correct comes back as an `is_error` result: the tool's own `isError`,
//! a JSON-RPC error to the call, arguments that are not an object, and a call that outlived
//! the run's tool timeout (cancelled on the server). A broken connection is an [`McpError`]
//! (the attempt fails and is retried on a fresh connection).

use std::time::Duration;

use base64::Engine;
use baton_core::tools::{FULL_OUTPUT_CAP_BYTES, OUTPUT_CAP_BYTES};
use baton_proto::{Attachment, McpOrigin, ToolCall, ToolResult};
use baton_store::SharedStore;
use rmcp::model::{CallToolRequestParams, ContentBlock, ResourceContents};
use rmcp::service::ServiceError;
use tracing::warn;

use super::client;
use super::error::McpError;
use super::pool::{McpPool, RunScope};
use crate::tools::output;

/// Calls `origin.tool` of `origin.server` with the call's arguments, within `timeout` (on the
/// run's own connection when the server is sandboxed).
pub(crate) async fn execute(
    pool: &McpPool,
    store: &SharedStore,
    origin: &McpOrigin,
    call: &ToolCall,
    timeout: Duration,
    run: Option<&RunScope>,
) -> Result<ToolResult, McpError> {
    let server = origin.server.as_str();
    let tool = origin.tool.as_str();
    let error = |text: String| ToolResult {
        call_id: call.id.clone(),
        name: call.name.clone(),
        content: text,
        is_error: true,
        ..Default::default()
    };
    let arguments = match parse_arguments(&call.arguments) {
        Ok(arguments) => arguments,
        Err(why) => {
            return Ok(error(format!(
                "invalid arguments for MCP tool '{tool}' of server '{server}': {why}. Pass a \
                 JSON object matching the tool's schema."
            )));
        }
    };
    let lease = pool.lease(server, run).await?;
    let connection = lease.connection;
    let mut params = CallToolRequestParams::new(tool.to_owned());
    if let Some(arguments) = arguments {
        params = params.with_arguments(arguments);
    }
    // Dropping the request (timeout, cancelled activity) sends notifications/cancelled.
    let answer = tokio::time::timeout(timeout, connection.peer().call_tool(params)).await;
    let result = match answer {
        Ok(Ok(result)) => result,
        Ok(Err(ServiceError::McpError(e))) => {
            return Ok(error(format!(
                "MCP server '{server}' refused the call of its tool '{tool}': {}: {}",
                e.code.0, e.message
            )));
        }
        Ok(Err(e)) => {
            let failure = connection.unreachable(format!(
                "tools/call of '{tool}' failed: {}",
                client::describe(&e)
            ));
            pool.retire(server, &connection, "tools/call failed").await;
            return Err(failure);
        }
        Err(_) => {
            // A server that hangs on one call may hang on all: the next call reconnects
            // (calls in flight on this connection finish first).
            pool.retire(server, &connection, "tools/call timed out")
                .await;
            return Ok(error(format!(
                "MCP tool '{tool}' of server '{server}' did not answer within {} s (the run's \
                 tool timeout); the call was cancelled. Try smaller work or another approach.",
                timeout.as_secs()
            )));
        }
    };
    let (text, attachments) =
        render(store, server, result.content, result.structured_content).await;
    let content = output::cap(&text, OUTPUT_CAP_BYTES);
    let full_output = if content == text {
        String::new()
    } else {
        output::cap(&text, FULL_OUTPUT_CAP_BYTES)
    };
    let mut answer = ToolResult {
        call_id: call.id.clone(),
        name: call.name.clone(),
        content,
        is_error: result.is_error == Some(true),
        full_output,
        attachments,
        ..Default::default()
    };
    // A sandboxed server's connections refused since the previous call (calls in parallel
    // on one server share them out as they end).
    if let Some(network) = connection.take_network_report() {
        crate::tools::add_network(&mut answer, network);
    }
    Ok(answer)
}

/// The call's arguments as a JSON object (`None` for none).
fn parse_arguments(
    text: &str,
) -> Result<Option<serde_json::Map<String, serde_json::Value>>, String> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(map)) => Ok(Some(map)),
        Ok(serde_json::Value::Null) => Ok(None),
        Ok(other) => Err(format!("they are {other}, not a JSON object")),
        Err(e) => Err(format!("they are not JSON ({e})")),
    }
}

/// The text the model sees and the attachments kept in the store.
async fn render(
    store: &SharedStore,
    server: &str,
    blocks: Vec<ContentBlock>,
    structured: Option<serde_json::Value>,
) -> (String, Vec<Attachment>) {
    let mut parts = Vec::new();
    let mut attachments = Vec::new();
    let mut has_text = false;
    for block in blocks {
        match block {
            ContentBlock::Text(t) => {
                has_text = true;
                parts.push(t.text);
            }
            ContentBlock::Image(i) => {
                let attachment = Attachment {
                    kind: "image".into(),
                    mime_type: i.mime_type,
                    ..Default::default()
                };
                parts.push(keep(store, server, attachment, &i.data, &mut attachments).await);
            }
            ContentBlock::Audio(a) => {
                let attachment = Attachment {
                    kind: "audio".into(),
                    mime_type: a.mime_type,
                    ..Default::default()
                };
                parts.push(keep(store, server, attachment, &a.data, &mut attachments).await);
            }
            ContentBlock::Resource(embedded) => match embedded.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => {
                    parts.push(format!("[resource {uri}]\n{text}"));
                }
                ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    ..
                } => {
                    let attachment = Attachment {
                        kind: "resource".into(),
                        mime_type: mime_type.unwrap_or_default(),
                        uri,
                        ..Default::default()
                    };
                    parts.push(keep(store, server, attachment, &blob, &mut attachments).await);
                }
                #[allow(unreachable_patterns)]
                _ => parts.push("[resource of a kind baton does not read]".into()),
            },
            ContentBlock::ResourceLink(link) => {
                parts.push(format!("[resource link: {} {}]", link.name, link.uri));
            }
            #[allow(unreachable_patterns)]
            _ => parts.push("[content of a kind baton does not read]".into()),
        }
    }
    if !has_text && let Some(value) = structured {
        parts.push(value.to_string());
    }
    (parts.join("\n"), attachments)
}

/// Decodes `base64` into the store, fills in the attachment and returns the model's stub.
async fn keep(
    store: &SharedStore,
    server: &str,
    mut attachment: Attachment,
    base64: &str,
    attachments: &mut Vec<Attachment>,
) -> String {
    let what = if attachment.uri.is_empty() {
        format!("{} {}", attachment.kind, attachment.mime_type)
    } else {
        format!(
            "{} {} {}",
            attachment.kind, attachment.uri, attachment.mime_type
        )
    };
    let what = what.trim_end().to_owned();
    let bytes = match base64::engine::general_purpose::STANDARD.decode(base64.trim()) {
        Ok(bytes) => bytes,
        Err(e) => return format!("[{what}: not valid base64 ({e}), left out]"),
    };
    attachment.bytes = bytes.len() as u64;
    match store.put(bytes).await {
        Ok(id) => {
            attachment.blob = id.to_string();
            let stub = format!(
                "[{what}, {} bytes, stored as blob {}]",
                attachment.bytes, attachment.blob
            );
            attachments.push(attachment);
            stub
        }
        Err(e) => {
            warn!(server, cause = %e, "MCP attachment not stored");
            format!("[{what}, {} bytes, not stored: {e}]", attachment.bytes)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_must_be_an_object() {
        assert_eq!(parse_arguments("").unwrap(), None);
        assert_eq!(parse_arguments("null").unwrap(), None);
        assert_eq!(
            parse_arguments(r#"{"a":1}"#).unwrap().unwrap()["a"],
            serde_json::json!(1)
        );
        assert!(
            parse_arguments("[1]")
                .unwrap_err()
                .contains("not a JSON object")
        );
        assert!(parse_arguments("{").unwrap_err().contains("not JSON"));
    }
}
