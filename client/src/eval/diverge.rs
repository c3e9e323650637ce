//! Where a fork parts from its original: both conversations past the fork's turn, turn by
//! turn, call by call. Pure.

use baton_proto::{Item, ToolCall, item};

/// The first turn after the fork point where the two conversations' replies differ.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Difference {
    pub(crate) turn: u32,
    /// What each side did there: `tool(arguments)`, `answer: text`, or `nothing` (the side
    /// had no such turn).
    pub(crate) original: String,
    pub(crate) fork: String,
}

/// One reply: its tool calls (name and arguments as JSON, so spacing does not count), or
/// its answer.
#[derive(Debug, PartialEq)]
enum Reply {
    Calls(Vec<(String, serde_json::Value)>),
    Answer(String),
}

fn replies_after(conversation: &[Item], at_turn: u32) -> Vec<Reply> {
    conversation
        .iter()
        .filter_map(|i| match &i.kind {
            Some(item::Kind::Assistant(a)) => Some(a),
            _ => None,
        })
        .skip(at_turn as usize)
        .map(|a| {
            if a.tool_calls.is_empty() {
                Reply::Answer(a.text.clone())
            } else {
                Reply::Calls(a.tool_calls.iter().map(call).collect())
            }
        })
        .collect()
}

fn call(c: &ToolCall) -> (String, serde_json::Value) {
    let args = serde_json::from_str(&c.arguments)
        .unwrap_or_else(|_| serde_json::Value::String(c.arguments.clone()));
    (c.name.clone(), args)
}

/// Longest text shown of an answer or of a call's arguments.
const SHOWN_CHARS: usize = 200;

fn cut(s: &str) -> String {
    if s.chars().count() <= SHOWN_CHARS {
        s.to_owned()
    } else {
        format!("{}...", s.chars().take(SHOWN_CHARS).collect::<String>())
    }
}

fn show_call((name, args): &(String, serde_json::Value)) -> String {
    format!("{name}({})", cut(&args.to_string()))
}

/// The first difference between `original` and `fork` after turn `at_turn`; `None` when
/// every reply after it is the same.
pub(crate) fn first_difference(
    original: &[Item],
    fork: &[Item],
    at_turn: u32,
) -> Option<Difference> {
    let (a, b) = (
        replies_after(original, at_turn),
        replies_after(fork, at_turn),
    );
    for k in 0..a.len().max(b.len()) {
        let turn = at_turn + k as u32 + 1;
        let (x, y) = (a.get(k), b.get(k));
        if x == y {
            continue;
        }
        // Within a reply with calls on both sides, name the first call that differs.
        if let (Some(Reply::Calls(xs)), Some(Reply::Calls(ys))) = (x, y) {
            let i = (0..xs.len().max(ys.len()))
                .find(|&i| xs.get(i) != ys.get(i))
                .unwrap_or(0);
            let side = |cs: &[(String, serde_json::Value)]| {
                cs.get(i).map_or("nothing".to_owned(), show_call)
            };
            return Some(Difference {
                turn,
                original: side(xs),
                fork: side(ys),
            });
        }
        let show = |r: Option<&Reply>| match r {
            None => "nothing".to_owned(),
            Some(Reply::Answer(text)) => format!("answer: {}", cut(text)),
            Some(Reply::Calls(cs)) => cs.first().map_or("nothing".to_owned(), show_call),
        };
        return Some(Difference {
            turn,
            original: show(x),
            fork: show(y),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use baton_proto::AssistantMessage;
    use pretty_assertions::assert_eq;

    use super::*;

    fn calls(calls: &[(&str, &str)]) -> Item {
        Item {
            kind: Some(item::Kind::Assistant(AssistantMessage {
                tool_calls: calls
                    .iter()
                    .map(|(name, args)| ToolCall {
                        name: name.to_string(),
                        arguments: args.to_string(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })),
        }
    }

    fn answer(text: &str) -> Item {
        Item {
            kind: Some(item::Kind::Assistant(AssistantMessage {
                text: text.into(),
                ..Default::default()
            })),
        }
    }

    #[test]
    fn the_first_differing_call_after_the_fork_point_is_named() {
        let w = |p: &str| format!(r#"{{"path": "{p}"}}"#);
        let original = [
            calls(&[("read_file", &w("a"))]),
            calls(&[("read_file", &w("b")), ("read_file", &w("c"))]),
            answer("done"),
        ];
        // Turn 1 is shared (it is the fork's prefix); turn 2's second call differs.
        let fork = [
            calls(&[("read_file", &w("a"))]),
            calls(&[("read_file", r#"{"path":"b"}"#), ("write_file", &w("c"))]),
            answer("done"),
        ];
        assert_eq!(
            first_difference(&original, &fork, 1),
            Some(Difference {
                turn: 2,
                original: r#"read_file({"path":"c"})"#.into(),
                fork: r#"write_file({"path":"c"})"#.into(),
            })
        );
        // Spacing in arguments does not count.
        assert_eq!(first_difference(&original, &original, 1), None);
        let same_calls = [
            calls(&[("read_file", &w("a"))]),
            calls(&[("read_file", r#"{"path":"b"}"#), ("read_file", &w("c"))]),
            answer("done"),
        ];
        assert_eq!(first_difference(&original, &same_calls, 1), None);
    }

    #[test]
    fn an_answer_against_a_call_or_a_missing_turn() {
        let original = [
            calls(&[("shell", r#"{"command":"ls"}"#)]),
            answer("two files"),
        ];
        let early = [
            calls(&[("shell", r#"{"command":"ls"}"#)]),
            answer("three files"),
        ];
        assert_eq!(
            first_difference(&original, &early, 1),
            Some(Difference {
                turn: 2,
                original: "answer: two files".into(),
                fork: "answer: three files".into(),
            })
        );
        let longer = [
            calls(&[("shell", r#"{"command":"ls"}"#)]),
            calls(&[("shell", r#"{"command":"ls -a"}"#)]),
            answer("two files"),
        ];
        assert_eq!(
            first_difference(&original, &longer, 1),
            Some(Difference {
                turn: 2,
                original: "answer: two files".into(),
                fork: r#"shell({"command":"ls -a"})"#.into(),
            })
        );
        assert_eq!(
            first_difference(&original, &original[..1], 1),
            Some(Difference {
                turn: 2,
                original: "answer: two files".into(),
                fork: "nothing".into(),
            })
        );
    }
}
