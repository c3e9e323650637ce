//! The `scripted` provider: replays the assistant turns carried in the run's model config.
//! Turn N of the run (N = assistant messages so far) answers with `script.turns[N]`, so a
//! retried or replayed call gets the same answer. Used by the demo and tests.

use baton_proto::{AssistantMessage, FinishReason, LlmRequest, LlmResponse, ToolCall, Usage, item};

use super::{
    LlmError,
    provider::{GenerateFuture, Provider},
};

/// The scripted provider, as a [`Provider`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Scripted;

impl Provider for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }

    fn generate<'a>(&'a self, request: &'a LlmRequest) -> GenerateFuture<'a> {
        Box::pin(std::future::ready(generate(request)))
    }
}

/// Answers from the script in the request.
pub fn generate(request: &LlmRequest) -> Result<LlmResponse, LlmError> {
    let turns = request
        .model
        .as_ref()
        .and_then(|m| m.script.as_ref())
        .map(|s| s.turns.as_slice())
        .unwrap_or_default();
    let first = request
        .model
        .as_ref()
        .and_then(|m| m.script.as_ref())
        .map(|s| s.first_turn as usize)
        .unwrap_or_default();
    // Requests carry the call's index (and only the script turn they need); older requests
    // carried the whole script and the index was the number of replies so far.
    let index = if request.turn > 0 || first > 0 {
        request.turn as usize
    } else {
        request
            .conversation
            .iter()
            .filter(|i| matches!(i.kind, Some(item::Kind::Assistant(_))))
            .count()
    };
    let Some(turn) = index.checked_sub(first).and_then(|i| turns.get(i)) else {
        return Err(LlmError::Config(format!(
            "the script has {} turns and the run asked for turn {}; add turns to the script \
             (the last one without tool calls ends the run)",
            turns.len() + first,
            index + 1
        )));
    };
    let tool_calls: Vec<ToolCall> = turn
        .tool_calls
        .iter()
        .enumerate()
        .map(|(i, c)| ToolCall {
            id: if c.id.is_empty() {
                format!("call_{}_{}", index + 1, i + 1)
            } else {
                c.id.clone()
            },
            ..c.clone()
        })
        .collect();
    let finish = match FinishReason::try_from(turn.finish_reason).unwrap_or_default() {
        FinishReason::Unspecified if tool_calls.is_empty() => FinishReason::Stop,
        FinishReason::Unspecified => FinishReason::ToolCalls,
        other => other,
    };
    let input_chars: usize = request
        .conversation
        .iter()
        .map(|i| match &i.kind {
            Some(item::Kind::User(u)) => u.text.len(),
            Some(item::Kind::Assistant(a)) => a.text.len(),
            Some(item::Kind::ToolResult(r)) => r.content.len(),
            Some(item::Kind::Stub(_)) | None => 0,
        })
        .sum::<usize>()
        + request.system_prompt.len();
    let input_tokens = (input_chars / 4) as u32 + 1;
    let output_tokens = (turn.text.len() / 4) as u32 + 1;
    Ok(LlmResponse {
        message: Some(AssistantMessage {
            text: turn.text.clone(),
            tool_calls,
            finish_reason: finish as i32,
            ..Default::default()
        }),
        usage: Some(Usage {
            input_tokens,
            output_tokens,
            total_tokens: input_tokens + output_tokens,
            llm_calls: 0,
            ..Default::default()
        }),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_proto::{Item, ModelConfig, Script, ScriptedTurn};

    fn request(assistant_turns: usize, script: Vec<ScriptedTurn>) -> LlmRequest {
        let mut conversation = vec![Item {
            kind: Some(item::Kind::User(Default::default())),
        }];
        for _ in 0..assistant_turns {
            conversation.push(Item {
                kind: Some(item::Kind::Assistant(Default::default())),
            });
        }
        LlmRequest {
            model: Some(ModelConfig {
                provider: "scripted".into(),
                script: Some(Script {
                    turns: script,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            conversation,
            ..Default::default()
        }
    }

    #[test]
    fn picks_the_turn_by_assistant_count_and_fills_ids() {
        let script = vec![
            ScriptedTurn {
                tool_calls: vec![ToolCall {
                    name: "list_files".into(),
                    arguments: "{}".into(),
                    ..Default::default()
                }],
                ..Default::default()
            },
            ScriptedTurn {
                text: "done".into(),
                ..Default::default()
            },
        ];
        let first = generate(&request(0, script.clone())).unwrap();
        let m = first.message.unwrap();
        assert_eq!(m.tool_calls[0].id, "call_1_1");
        assert_eq!(m.finish_reason, FinishReason::ToolCalls as i32);
        let second = generate(&request(1, script.clone())).unwrap();
        let m = second.message.unwrap();
        assert_eq!(m.text, "done");
        assert_eq!(m.finish_reason, FinishReason::Stop as i32);
        let err = generate(&request(2, script)).unwrap_err();
        assert!(err.to_string().contains("the script has 2 turns"), "{err}");
        assert!(!err.is_retryable());
    }
}
