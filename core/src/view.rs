//! The model's view of a conversation, as pure functions shared by the workflow (which only
//! needs its size) and the LLM activities (which build it from the conversation they load from
//! the blob store). Both sides must agree exactly, so the rule lives here once.
//!
//! The view is: the task (item 0); after a compaction, the summary in place of items
//! `1..summary_upto`; then the remaining items, with large tool outputs before `elide_before`
//! replaced by a short placeholder and full outputs never included.

use baton_proto::{Item, ItemStub, ToolResult, UserMessage, ViewSpec, item};

/// Tool outputs shorter than this are never elided (the placeholder would not be smaller).
pub const ELIDE_MIN_BYTES: usize = 256;

/// The summary message that stands for the older turns after a compaction.
pub fn summary_item(summary: &str) -> Item {
    Item {
        kind: Some(item::Kind::User(UserMessage {
            text: format!(
                "[baton] Older turns of this run were summarized to fit the context window. \
                 Summary:\n{summary}"
            ),
            synthetic: true,
        })),
    }
}

/// The placeholder shown instead of an elided tool output.
pub fn elided_placeholder(r: &ToolResult) -> String {
    format!(
        "[{} bytes of output from {} were removed to fit the context window; run the tool \
         again if you still need them]",
        content_bytes(r),
        r.name
    )
}

/// Whether item `index` is shown as a placeholder under `elide_before`.
pub fn is_elided(item: &Item, index: usize, elide_before: usize) -> bool {
    index < elide_before && tool_output_chars(item).is_some_and(|n| n >= ELIDE_MIN_BYTES)
}

/// Bytes of a tool result's whole content (kept by reference: its recorded size, not the
/// preview's).
pub fn content_bytes(r: &ToolResult) -> usize {
    r.content_stored
        .as_ref()
        .map_or(r.content.len(), |s| s.bytes as usize)
}

/// Bytes of a reply's whole text (see [`content_bytes`]).
pub fn text_bytes(a: &baton_proto::AssistantMessage) -> usize {
    a.text_stored
        .as_ref()
        .map_or(a.text.len(), |s| s.bytes as usize)
}

/// Characters of a tool result's content (also of a stubbed one); `None` for other items.
pub fn tool_output_chars(item: &Item) -> Option<usize> {
    match &item.kind {
        Some(item::Kind::ToolResult(r)) => Some(content_bytes(r)),
        Some(item::Kind::Stub(s)) if s.kind == STUB_TOOL_RESULT => Some(s.chars as usize),
        _ => None,
    }
}

/// Whether the item is an assistant message (also a stubbed one).
pub fn is_assistant(item: &Item) -> bool {
    match &item.kind {
        Some(item::Kind::Assistant(_)) => true,
        Some(item::Kind::Stub(s)) => s.kind == STUB_ASSISTANT,
        _ => false,
    }
}

/// Items `from..to` as the model sees them.
pub fn items(conversation: &[Item], elide_before: usize, from: usize, to: usize) -> Vec<Item> {
    conversation
        .iter()
        .enumerate()
        .take(to)
        .skip(from)
        .map(|(i, it)| match &it.kind {
            Some(item::Kind::ToolResult(r)) if is_elided(it, i, elide_before) => Item {
                kind: Some(item::Kind::ToolResult(ToolResult {
                    content: elided_placeholder(r),
                    content_stored: None,
                    full_output: String::new(),
                    full_output_ref: String::new(),
                    snapshot: String::new(),
                    ..r.clone()
                })),
            },
            Some(item::Kind::ToolResult(r)) => Item {
                kind: Some(item::Kind::ToolResult(ToolResult {
                    full_output: String::new(),
                    full_output_ref: String::new(),
                    snapshot: String::new(),
                    ..r.clone()
                })),
            },
            _ => it.clone(),
        })
        .collect()
}

/// The whole view under `spec`.
pub fn model_view(conversation: &[Item], spec: &ViewSpec) -> Vec<Item> {
    let mut view = Vec::new();
    let start = if spec.summary.is_empty() {
        0
    } else {
        view.extend(conversation.first().cloned());
        view.push(summary_item(&spec.summary));
        spec.summary_upto as usize
    };
    view.extend(items(
        conversation,
        spec.elide_before as usize,
        start,
        conversation.len(),
    ));
    view
}

/// What a compaction summarizes: the previous summary (if any) and items `from..upto` as the
/// model saw them.
pub fn compaction_input(
    conversation: &[Item],
    spec: &ViewSpec,
    from: usize,
    upto: usize,
) -> Vec<Item> {
    let mut out = Vec::new();
    if !spec.summary.is_empty() {
        out.push(Item {
            kind: Some(item::Kind::User(UserMessage {
                text: format!("Summary so far:\n{}", spec.summary),
                synthetic: true,
            })),
        });
    }
    out.extend(items(conversation, spec.elide_before as usize, from, upto));
    out
}

/// Characters an item contributes to the view (for token estimates).
pub fn item_chars(i: &Item) -> usize {
    match &i.kind {
        Some(item::Kind::User(u)) => u.text.len(),
        Some(item::Kind::Assistant(a)) => {
            text_bytes(a)
                + a.tool_calls
                    .iter()
                    .map(|c| {
                        let arguments = c
                            .cut
                            .as_ref()
                            .map_or(c.arguments.len(), |k| k.bytes as usize);
                        c.name.len() + arguments + c.id.len()
                    })
                    .sum::<usize>()
        }
        Some(item::Kind::ToolResult(r)) => content_bytes(r) + r.call_id.len(),
        Some(item::Kind::Stub(s)) => s.chars as usize,
        None => 0,
    }
}

/// Characters of items `from..to` as the model sees them (stubs counted by their size).
pub fn view_chars(conversation: &[Item], elide_before: usize, from: usize, to: usize) -> usize {
    conversation
        .iter()
        .enumerate()
        .take(to)
        .skip(from)
        .map(|(i, it)| {
            if is_elided(it, i, elide_before) {
                // The placeholder's size, independent of the content.
                130 + stub_tool(it).len()
            } else {
                item_chars(it)
            }
        })
        .sum()
}

fn stub_tool(item: &Item) -> &str {
    match &item.kind {
        Some(item::Kind::ToolResult(r)) => &r.name,
        Some(item::Kind::Stub(s)) => &s.tool,
        _ => "",
    }
}

/// Cuts `s` to at most `max` bytes on a character boundary and marks the cut with `…`.
pub fn cut_text(s: &mut String, max: usize) {
    if s.len() <= max {
        return;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s.push('…');
}

/// Turn `turn` of a script as a one-turn script (`first_turn` = `turn`); past the end, an
/// empty script whose `first_turn` is the script's end, so the provider can say it is too short.
pub fn script_turn(script: &baton_proto::Script, turn: u32) -> baton_proto::Script {
    let one: Vec<_> = turn
        .checked_sub(script.first_turn)
        .and_then(|i| script.turns.get(i as usize))
        .cloned()
        .into_iter()
        .collect();
    baton_proto::Script {
        first_turn: if one.is_empty() {
            script.first_turn + script.turns.len() as u32
        } else {
            turn
        },
        turns: one,
        subagents: Vec::new(),
    }
}

/// Stub kind of a user message.
pub const STUB_USER: &str = "user";
/// Stub kind of an assistant message.
pub const STUB_ASSISTANT: &str = "assistant";
/// Stub kind of a tool result.
pub const STUB_TOOL_RESULT: &str = "tool_result";

/// What a continued run keeps of an item it no longer holds.
pub fn stub(item: &Item) -> Item {
    if matches!(item.kind, Some(item::Kind::Stub(_)) | None) {
        return item.clone();
    }
    let (kind, tool) = match &item.kind {
        Some(item::Kind::User(_)) => (STUB_USER, String::new()),
        Some(item::Kind::Assistant(_)) => (STUB_ASSISTANT, String::new()),
        Some(item::Kind::ToolResult(r)) => (STUB_TOOL_RESULT, r.name.clone()),
        _ => ("", String::new()),
    };
    let chars = item_chars(item);
    Item {
        kind: Some(item::Kind::Stub(ItemStub {
            kind: kind.to_owned(),
            chars: chars.min(u32::MAX as usize) as u32,
            tool,
        })),
    }
}

/// Index of the first item of the last `turns` assistant turns of `conversation`, at most
/// `stored` (0 when it has no more turns than that; `stored` for `turns` = 0): the items from
/// 1 up to it may be held as stubs (the blob store has them), the task and the rest stay whole.
pub fn resident_from(conversation: &[Item], turns: usize, stored: usize) -> usize {
    let assistants: Vec<usize> = conversation
        .iter()
        .enumerate()
        .filter(|(_, i)| is_assistant(i))
        .map(|(n, _)| n)
        .collect();
    let from = match assistants.len().checked_sub(turns) {
        Some(k) => assistants.get(k).copied().unwrap_or(conversation.len()),
        None => 0,
    };
    from.min(stored)
}

/// Stubs items `1..resident_from` (the task stays whole).
pub fn stub_before(conversation: &mut [Item], resident_from: usize) {
    for (n, item) in conversation.iter_mut().enumerate() {
        if n > 0 && n < resident_from {
            *item = stub(item);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn user(t: &str) -> Item {
        Item {
            kind: Some(item::Kind::User(UserMessage {
                text: t.to_owned(),
                synthetic: false,
            })),
        }
    }

    fn output(n: usize) -> Item {
        Item {
            kind: Some(item::Kind::ToolResult(ToolResult {
                call_id: "c".into(),
                name: "shell".into(),
                content: "x".repeat(n),
                full_output_ref: "ab".into(),
                ..Default::default()
            })),
        }
    }

    #[test]
    fn elides_large_outputs_before_the_cut_only() {
        let conv = vec![user("task"), output(1000), output(10), output(1000)];
        let view = model_view(
            &conv,
            &ViewSpec {
                elide_before: 3,
                ..Default::default()
            },
        );
        let contents: Vec<usize> = view
            .iter()
            .map(|i| match &i.kind {
                Some(item::Kind::ToolResult(r)) => {
                    assert!(r.full_output_ref.is_empty());
                    r.content.len()
                }
                _ => 0,
            })
            .collect();
        assert!(contents[1] < 200, "{contents:?}");
        assert_eq!(contents[2], 10);
        assert_eq!(contents[3], 1000);
    }

    #[test]
    fn elision_and_a_summary_leave_reasoning_parts_as_they_are() {
        let turn = Item {
            kind: Some(item::Kind::Assistant(baton_proto::AssistantMessage {
                text: "reading".into(),
                reasoning_parts: vec![baton_proto::ReasoningPart {
                    provider: "anthropic".into(),
                    kind: "thinking".into(),
                    data: r#"{"type":"thinking","thinking":"t","signature":"EqQB"}"#.into(),
                    ..Default::default()
                }],
                ..Default::default()
            })),
        };
        let conv = vec![
            user("task"),
            turn.clone(),
            output(1000),
            turn.clone(),
            output(1000),
            turn.clone(),
        ];
        let view = model_view(
            &conv,
            &ViewSpec {
                summary: "S".into(),
                summary_upto: 3,
                elide_before: 5,
            },
        );
        // task, summary, turn (3), elided output (4), turn (5): the turns are untouched.
        assert_eq!(view.len(), 5);
        assert_eq!(view[2], turn);
        assert_eq!(view[4], turn);
        assert_ne!(view[3], conv[4], "the old output is elided");
    }

    #[test]
    fn summary_replaces_the_older_items() {
        let conv = vec![user("task"), user("a"), user("b"), user("c")];
        let view = model_view(
            &conv,
            &ViewSpec {
                summary: "S".into(),
                summary_upto: 3,
                elide_before: 0,
            },
        );
        assert_eq!(view.len(), 3);
        assert_eq!(view[0], conv[0]);
        assert_eq!(view[2], conv[3]);
    }

    #[test]
    fn stubs_keep_sizes_for_estimates() {
        let conv = vec![user("task"), output(1000), output(10)];
        let stubbed: Vec<Item> = conv.iter().map(stub).collect();
        assert_eq!(view_chars(&conv, 0, 0, 3), view_chars(&stubbed, 0, 0, 3));
        assert_eq!(view_chars(&conv, 2, 0, 3), view_chars(&stubbed, 2, 0, 3));
        assert!(is_assistant(&stub(&Item {
            kind: Some(item::Kind::Assistant(Default::default()))
        })));
    }

    #[test]
    fn outputs_by_reference_count_and_elide_by_their_whole_size() {
        let by_ref = Item {
            kind: Some(item::Kind::ToolResult(ToolResult {
                call_id: "c".into(),
                name: "shell".into(),
                content: "preview\n[baton: 3000 bytes in all, in the blob store as ab]".into(),
                content_stored: Some(baton_proto::StoredText {
                    blob: "ab".into(),
                    bytes: 3000,
                }),
                ..Default::default()
            })),
        };
        assert_eq!(tool_output_chars(&by_ref), Some(3000));
        assert_eq!(item_chars(&by_ref), 3001);
        let conv = vec![user("task"), by_ref.clone(), by_ref];
        let view = model_view(
            &conv,
            &ViewSpec {
                elide_before: 2,
                ..Default::default()
            },
        );
        let result = |i: &Item| match &i.kind {
            Some(item::Kind::ToolResult(r)) => r.clone(),
            other => panic!("{other:?}"),
        };
        // Elided: the placeholder names the whole size, and nothing is restored into it.
        let elided = result(&view[1]);
        assert!(elided.content.contains("3000 bytes"), "{}", elided.content);
        assert!(elided.content_stored.is_none());
        // Shown: the reference stays, for the LLM activity to restore.
        assert_eq!(result(&view[2]).content_stored.unwrap().blob, "ab");
    }
}
