//! Compaction: how the older part of a conversation is summarized for the model's view.

use baton_proto::{
    CompactRequest, CompactResponse, Item, LlmRequest, LlmResponse, UserMessage, item,
};

/// Instructions for the summarizing call.
pub const SUMMARY_PROMPT: &str = "You compress the history of an autonomous agent's run so it \
can continue with less context. Write a concise summary (at most ~600 words) of the \
conversation you are given: what was tried, what was found (file names, commands, errors, \
values that matter), what was changed, decisions and their reasons, and what remains to do \
for the task. Keep exact identifiers, paths and numbers. Do not invent anything. Output only \
the summary.";

/// Longest tool output quoted into the summary request.
const MAX_QUOTED_OUTPUT: usize = 4_000;

/// The LLM request that asks the run's model for a summary.
pub fn summary_request(request: &CompactRequest) -> LlmRequest {
    let mut transcript = format!(
        "Task of the run:\n{}\n\nConversation to summarize:\n",
        request.task
    );
    transcript.push_str(&render(&request.items));
    let mut model = request.model.clone().unwrap_or_default();
    model.script = None;
    LlmRequest {
        model: Some(model),
        system_prompt: SUMMARY_PROMPT.to_owned(),
        conversation: vec![Item {
            kind: Some(item::Kind::User(UserMessage {
                text: transcript,
                synthetic: true,
            })),
        }],
        tools: Vec::new(),
        // A unique prompt, never sent again: no cache breakpoints.
        one_off: true,
        ..Default::default()
    }
}

/// The summary from the model's reply.
pub fn response(reply: LlmResponse) -> CompactResponse {
    CompactResponse {
        summary: reply.message.map(|m| m.text).unwrap_or_default(),
        usage: reply.usage,
    }
}

/// A summary made without a model (scripted runs): the assistant's words and the tools it
/// used, turn by turn.
pub fn extract(request: &CompactRequest) -> CompactResponse {
    let mut lines = Vec::new();
    for entry in &request.items {
        match &entry.kind {
            Some(item::Kind::Assistant(a)) => {
                let calls: Vec<&str> = a.tool_calls.iter().map(|c| c.name.as_str()).collect();
                let text = a.text.lines().next().unwrap_or_default();
                lines.push(format!("- assistant: {text} [tools: {}]", calls.join(", ")));
            }
            Some(item::Kind::User(u)) if !u.synthetic => {
                lines.push(format!(
                    "- user: {}",
                    u.text.lines().next().unwrap_or_default()
                ));
            }
            _ => {}
        }
    }
    CompactResponse {
        summary: lines.join("\n"),
        usage: None,
    }
}

/// The items as plain text for the summarizer.
fn render(items: &[Item]) -> String {
    let mut out = String::new();
    for entry in items {
        match &entry.kind {
            Some(item::Kind::User(u)) => out.push_str(&format!("\n[user]\n{}\n", u.text)),
            Some(item::Kind::Assistant(a)) => {
                out.push_str(&format!("\n[assistant]\n{}\n", a.text));
                for c in &a.tool_calls {
                    out.push_str(&format!(
                        "[tool call {} {}] {}\n",
                        c.id, c.name, c.arguments
                    ));
                }
            }
            Some(item::Kind::ToolResult(r)) => {
                let mut content = r.content.clone();
                if content.len() > MAX_QUOTED_OUTPUT {
                    let mut cut = MAX_QUOTED_OUTPUT;
                    while !content.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    content.truncate(cut);
                    content.push_str("\n[... cut ...]");
                }
                out.push_str(&format!(
                    "[tool result {}{}]\n{}\n",
                    r.call_id,
                    if r.is_error { ", error" } else { "" },
                    content
                ));
            }
            Some(item::Kind::Stub(_)) | None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_proto::{AssistantMessage, ModelConfig, ToolCall, ToolResult};

    fn items() -> Vec<Item> {
        vec![
            Item {
                kind: Some(item::Kind::Assistant(AssistantMessage {
                    text: "Looking at the config.".into(),
                    tool_calls: vec![ToolCall {
                        id: "c1".into(),
                        name: "read_file".into(),
                        arguments: r#"{"path":"app.toml"}"#.into(),
                        ..Default::default()
                    }],
                    ..Default::default()
                })),
            },
            Item {
                kind: Some(item::Kind::ToolResult(ToolResult {
                    call_id: "c1".into(),
                    name: "read_file".into(),
                    content: "port = 8080".into(),
                    is_error: false,
                    full_output: String::new(),
                    ..Default::default()
                })),
            },
        ]
    }

    #[test]
    fn the_summary_request_carries_task_and_transcript_without_tools() {
        let req = summary_request(&CompactRequest {
            model: Some(ModelConfig {
                provider: "openai".into(),
                model: "m".into(),
                ..Default::default()
            }),
            task: "fix the port".into(),
            items: items(),
            ..Default::default()
        });
        assert!(req.tools.is_empty());
        assert_eq!(req.system_prompt, SUMMARY_PROMPT);
        let Some(item::Kind::User(u)) = &req.conversation[0].kind else {
            panic!("expected a user message");
        };
        assert!(u.text.contains("fix the port"));
        assert!(
            u.text
                .contains("[tool call c1 read_file] {\"path\":\"app.toml\"}")
        );
        assert!(u.text.contains("port = 8080"));
    }

    #[test]
    fn scripted_runs_get_an_extract() {
        let r = extract(&CompactRequest {
            items: items(),
            ..Default::default()
        });
        assert_eq!(
            r.summary,
            "- assistant: Looking at the config. [tools: read_file]"
        );
    }
}
