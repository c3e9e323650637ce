//! Loop guards (`docs/src/architecture/design.md` §3 step 7), as pure functions over the
//! conversation: the circuit breaker's thresholds and loop detection (near-identical replies,
//! repeated tool batches).

use std::collections::BTreeSet;

use baton_proto::{AssistantMessage, FinishReason, Item, LoopPolicy, item};

/// Consecutive failing turns before the "change strategy" alert.
pub const DEFAULT_BREAKER_ALERT_AFTER: u32 = 3;
/// Further failing turns after the alert before the run pauses for a human.
pub const DEFAULT_BREAKER_PAUSE_AFTER: u32 = 3;
/// Replies this similar (Jaccard over character bigrams) count as repeats.
pub const SIMILARITY_THRESHOLD: f64 = 0.90;
/// How many repeats in a row make a loop.
pub const LOOP_WINDOW: usize = 3;
/// Replies shorter than this never count as repeats ("ok", "done").
pub const MIN_TEXT_FOR_SIMILARITY: usize = 24;

/// The alert given to the model when the breaker trips.
pub fn breaker_alert(streak: u32) -> String {
    format!(
        "[baton circuit breaker] The last {streak} turns each had a failing tool call. Stop \
         repeating what fails. Re-read the error messages, check your assumptions (paths, \
         arguments, the tool you chose) and change strategy; if the task cannot be done, say \
         so and explain why."
    )
}

/// Effective thresholds: (alert after, pause after the alert).
pub fn breaker_thresholds(policy: Option<&LoopPolicy>) -> (u32, u32) {
    let p = policy.cloned().unwrap_or_default();
    let alert = if p.breaker_alert_after == 0 {
        DEFAULT_BREAKER_ALERT_AFTER
    } else {
        p.breaker_alert_after
    };
    let pause = if p.breaker_pause_after == 0 {
        DEFAULT_BREAKER_PAUSE_AFTER
    } else {
        p.breaker_pause_after
    };
    (alert, pause)
}

/// Jaccard similarity of the sets of character bigrams of `a` and `b` (1.0 = same set).
pub fn similarity(a: &str, b: &str) -> f64 {
    let grams = |s: &str| -> BTreeSet<(char, char)> {
        let chars: Vec<char> = s.chars().collect();
        chars.windows(2).map(|w| (w[0], w[1])).collect()
    };
    let (x, y) = (grams(a), grams(b));
    if x.is_empty() && y.is_empty() {
        return 1.0;
    }
    let inter = x.intersection(&y).count() as f64;
    let union = x.union(&y).count() as f64;
    inter / union
}

/// Why the conversation looks like a loop, if it does: the last [`LOOP_WINDOW`] complete
/// assistant replies are pairwise near-identical, or made the same tool-call batch.
pub fn detect_loop(conversation: &[Item]) -> Option<String> {
    let replies: Vec<&AssistantMessage> = conversation
        .iter()
        .rev()
        .filter_map(|i| match &i.kind {
            Some(item::Kind::Assistant(a)) if a.finish_reason != FinishReason::Length as i32 => {
                Some(a)
            }
            _ => None,
        })
        .take(LOOP_WINDOW)
        .collect();
    if replies.len() < LOOP_WINDOW {
        return None;
    }
    // Arguments kept by reference are cut in history: their digest (of the exact arguments)
    // stands for them.
    let batch = |a: &AssistantMessage| -> Vec<(String, String)> {
        a.tool_calls
            .iter()
            .map(|c| match &c.cut {
                None => (c.name.clone(), normalize_json(&c.arguments)),
                Some(cut) => (c.name.clone(), format!("sha256:{}", cut.digest)),
            })
            .collect()
    };
    let first = batch(replies[0]);
    if !first.is_empty() && replies.iter().all(|r| batch(r) == first) {
        let names: Vec<&str> = first.iter().map(|(n, _)| n.as_str()).collect();
        return Some(format!(
            "the model made the same tool calls ({}) {LOOP_WINDOW} times in a row",
            names.join(", ")
        ));
    }
    let blob = |r: &AssistantMessage| r.text_stored.as_ref().map(|t| t.blob.clone());
    if replies.iter().any(|r| r.text_stored.is_some()) {
        // Long texts are in the blob store and history holds previews, which may agree where
        // the texts do not: only the same whole text (the same blob) counts as a repeat.
        let same = replies.iter().all(|r| blob(r) == blob(replies[0]));
        return same.then(|| {
            format!("the model's last {LOOP_WINDOW} replies are identical (the same long text)")
        });
    }
    let texts: Vec<&str> = replies.iter().map(|r| r.text.trim()).collect();
    if texts
        .iter()
        .all(|t| t.chars().count() >= MIN_TEXT_FOR_SIMILARITY)
    {
        let mut lowest = 1.0_f64;
        for i in 0..texts.len() {
            for j in i + 1..texts.len() {
                lowest = lowest.min(similarity(texts[i], texts[j]));
            }
        }
        if lowest > SIMILARITY_THRESHOLD {
            return Some(format!(
                "the model's last {LOOP_WINDOW} replies are near-identical (similarity >= {lowest:.2})"
            ));
        }
    }
    None
}

/// JSON text in a canonical form, so `{"a":1, "b":2}` and `{"b":2,"a":1}` compare equal.
pub fn normalize_json(text: &str) -> String {
    serde_json::from_str::<serde_json::Value>(text)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| text.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_proto::ToolCall;

    fn assistant(text: &str, calls: &[(&str, &str)]) -> Item {
        Item {
            kind: Some(item::Kind::Assistant(AssistantMessage {
                text: text.into(),
                tool_calls: calls
                    .iter()
                    .enumerate()
                    .map(|(i, (n, a))| ToolCall {
                        id: format!("c{i}"),
                        name: (*n).into(),
                        arguments: (*a).into(),
                        ..Default::default()
                    })
                    .collect(),
                finish_reason: FinishReason::Stop as i32,
                ..Default::default()
            })),
        }
    }

    #[test]
    fn similarity_of_bigram_sets() {
        assert_eq!(similarity("abc", "abc"), 1.0);
        assert_eq!(similarity("ab", "cd"), 0.0);
        assert!((similarity("abcd", "abce") - 0.5).abs() < 1e-9); // {ab,bc} of {ab,bc,cd,ce}
    }

    #[test]
    fn three_identical_batches_are_a_loop() {
        let conv = vec![
            assistant("", &[("read_file", r#"{"path":"a"}"#)]),
            assistant("", &[("read_file", r#"{ "path": "a" }"#)]),
            assistant("", &[("read_file", r#"{"path":"a"}"#)]),
        ];
        assert!(detect_loop(&conv).unwrap().contains("same tool calls"));
        // Near miss: one argument differs.
        let conv = vec![
            assistant("", &[("read_file", r#"{"path":"a"}"#)]),
            assistant("", &[("read_file", r#"{"path":"b"}"#)]),
            assistant("", &[("read_file", r#"{"path":"a"}"#)]),
        ];
        assert_eq!(detect_loop(&conv), None);
        // Two repeats are not yet a loop.
        assert_eq!(detect_loop(&conv[..2]), None);
    }

    #[test]
    fn near_identical_replies_are_a_loop_and_near_misses_are_not() {
        let t = "I will now check the configuration file for the missing key.";
        let conv = vec![
            assistant(t, &[]),
            assistant(&format!("{t}!"), &[]),
            assistant(t, &[]),
        ];
        assert!(detect_loop(&conv).unwrap().contains("near-identical"));
        let different = vec![
            assistant(t, &[]),
            assistant(
                "Let me look at the test output to see which assertion fails.",
                &[],
            ),
            assistant(t, &[]),
        ];
        assert_eq!(detect_loop(&different), None);
        // A near miss just under the threshold must not trigger.
        let a = "abcdefghijklmnopqrstuvwxyz";
        let b = "abcdefghijklmnopqrstuvwxyZ"; // 24 of 26 bigrams shared: 24/26 = 0.923
        let c = "abcdefghijklmnopqrstuvWXYZ"; // vs a: 21/29 = 0.72
        assert!(similarity(a, b) > SIMILARITY_THRESHOLD);
        assert!(similarity(a, c) < SIMILARITY_THRESHOLD);
        let conv = vec![assistant(a, &[]), assistant(b, &[]), assistant(c, &[])];
        assert_eq!(detect_loop(&conv), None);
        // Short replies never count.
        let conv = vec![
            assistant("ok", &[]),
            assistant("ok", &[]),
            assistant("ok", &[]),
        ];
        assert_eq!(detect_loop(&conv), None);
    }

    #[test]
    fn thresholds_default_to_three_and_three() {
        assert_eq!(breaker_thresholds(None), (3, 3));
        let p = LoopPolicy {
            breaker_alert_after: 2,
            breaker_pause_after: 5,
            ..Default::default()
        };
        assert_eq!(breaker_thresholds(Some(&p)), (2, 5));
    }

    #[test]
    fn calls_and_texts_by_reference_are_compared_by_their_whole_content() {
        // Arguments cut for history look the same; their digests (of the exact arguments)
        // differ: not a loop. The same digests are.
        let by_ref = |digest: &str| {
            let mut item = assistant("", &[("write_file", r#"{"path":"a","content":"x…"}"#)]);
            if let Some(item::Kind::Assistant(a)) = &mut item.kind {
                a.tool_calls[0].cut = Some(baton_proto::CutArguments {
                    digest: digest.into(),
                    subject_cut: false,
                    bytes: 4000,
                });
            }
            item
        };
        let conv = vec![by_ref("d1"), by_ref("d2"), by_ref("d1")];
        assert_eq!(detect_loop(&conv), None);
        let conv = vec![by_ref("d1"), by_ref("d1"), by_ref("d1")];
        assert!(detect_loop(&conv).unwrap().contains("same tool calls"));

        // Long texts with the same preview but different blobs are not repeats.
        let preview = "I will now look at the parser module and the retry config again";
        let text = |blob: &str, call: &str| {
            let mut item = assistant(preview, &[("read_file", call)]);
            if let Some(item::Kind::Assistant(a)) = &mut item.kind {
                a.text_stored = Some(baton_proto::StoredText {
                    blob: blob.into(),
                    bytes: 4000,
                });
            }
            item
        };
        let conv = vec![
            text("b1", r#"{"path":"a"}"#),
            text("b2", r#"{"path":"b"}"#),
            text("b3", r#"{"path":"c"}"#),
        ];
        assert_eq!(detect_loop(&conv), None);
        let conv = vec![
            text("b1", r#"{"path":"a"}"#),
            text("b1", r#"{"path":"b"}"#),
            text("b1", r#"{"path":"c"}"#),
        ];
        assert!(detect_loop(&conv).unwrap().contains("identical"));
    }
}
