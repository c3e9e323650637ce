//! Live model output in `baton watch`: while a run's `llm_generate` streams, its
//! heartbeat details ([`StreamProgress`]: the attempt, the last KiB of text and reasoning, their
//! total lengths in chars, tool-call names) are read from a describe of the run, and
//! [`Follower`] turns successive details into what is new since the last look ([`Delta`]).
//!
//! No duplicates across retries: details of another attempt than the pending one are dropped
//! (the server keeps an attempt's last details until the next attempt's first beat), and when
//! the attempt rises the follower starts again from nothing, so no text of attempt 1 is ever
//! given as attempt 2's.

use baton_proto::{AssistantMessage, StreamProgress};
use temporalio_common::data_converters::{DataConverter, SerializationContextData};

use crate::style::Style;
use temporalio_common::protos::temporal::api::{
    enums::v1::PendingActivityState, workflowservice::v1::DescribeWorkflowExecutionResponse,
};

/// The activity whose details are a stream.
const MODEL_CALL: &str = "llm_generate";

/// A pending model call as a describe shows it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Streaming {
    /// Tells one model call of the run from the next.
    pub(crate) activity_id: String,
    /// The pending attempt (1 for the first).
    pub(crate) attempt: u32,
    /// Whether a worker runs it now.
    pub(crate) started: bool,
    /// Its details, when they are this attempt's.
    pub(crate) progress: Option<StreamProgress>,
}

/// The pending model call of `desc`, if any, its details decoded with `dc` (details that cannot
/// be read, such as an older worker's, count as none).
pub(crate) async fn read(
    dc: &DataConverter,
    desc: &DescribeWorkflowExecutionResponse,
) -> Option<Streaming> {
    let p = desc.pending_activities.iter().find(|p| {
        p.activity_type
            .as_ref()
            .is_some_and(|t| t.name == MODEL_CALL)
    })?;
    let attempt = u32::try_from(p.attempt).unwrap_or(0);
    let beat_ms = p.last_heartbeat_time.as_ref().map(|t| (t.seconds, t.nanos));
    let start_ms = p.last_started_time.as_ref().map(|t| (t.seconds, t.nanos));
    // A heartbeat from before this attempt started is an earlier attempt's.
    let current = matches!((beat_ms, start_ms), (Some(b), Some(s)) if b >= s);
    let mut progress = None;
    if current
        && let Some(payload) = p
            .heartbeat_details
            .as_ref()
            .and_then(|d| d.payloads.first())
    {
        progress = dc
            .from_payload::<StreamProgress>(&SerializationContextData::None, payload.clone())
            .await
            .ok()
            .filter(|d| d.attempt == attempt);
    }
    Some(Streaming {
        activity_id: p.activity_id.clone(),
        attempt,
        started: matches!(p.state(), PendingActivityState::Started),
        progress,
    })
}

/// What is new in a model call since the last look.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Delta {
    pub(crate) attempt: u32,
    /// This is the first delta of a new attempt of a call whose earlier attempt showed some:
    /// that partial output is abandoned.
    pub(crate) restarted: bool,
    pub(crate) text: String,
    pub(crate) reasoning: String,
    /// Tool calls the model started since.
    pub(crate) tool_calls: Vec<String>,
    /// Chars of text that went by between two looks and are no longer in the details' tail
    /// (a watcher that fell far behind); the final message has them.
    pub(crate) missed_chars: u64,
}

impl Delta {
    pub(crate) fn is_empty(&self) -> bool {
        self.text.is_empty() && self.reasoning.is_empty() && self.tool_calls.is_empty()
    }
}

/// Follows the model calls of one run, one after the other.
#[derive(Debug, Default)]
pub(crate) struct Follower {
    call: String,
    attempt: u32,
    text_chars: u32,
    reasoning_chars: u32,
    tool_calls: usize,
    /// The text given so far for this attempt.
    text: String,
    /// Whether anything of this call was given (its text, reasoning or tool calls).
    shown: bool,
}

impl Follower {
    /// What is new in `s` since the last update, `None` when nothing is.
    pub(crate) fn update(&mut self, s: &Streaming) -> Option<Delta> {
        if s.activity_id != self.call {
            *self = Self {
                call: s.activity_id.clone(),
                attempt: s.attempt,
                ..Self::default()
            };
        }
        if s.attempt < self.attempt {
            // A describe older than one already seen.
            return None;
        }
        let mut restarted = false;
        if s.attempt > self.attempt {
            restarted = self.shown;
            *self = Self {
                call: s.activity_id.clone(),
                attempt: s.attempt,
                ..Self::default()
            };
        }
        let mut delta = Delta {
            attempt: self.attempt,
            restarted,
            ..Delta::default()
        };
        if let Some(p) = s.progress.as_ref().filter(|p| p.attempt == self.attempt) {
            let (text, missed) = new_suffix(&p.text_tail, p.text_chars, self.text_chars);
            let (reasoning, _) =
                new_suffix(&p.reasoning_tail, p.reasoning_chars, self.reasoning_chars);
            self.text_chars = self.text_chars.max(p.text_chars);
            self.reasoning_chars = self.reasoning_chars.max(p.reasoning_chars);
            delta.text = text;
            delta.reasoning = reasoning;
            delta.missed_chars = missed;
            delta.tool_calls = p.tool_calls.iter().skip(self.tool_calls).cloned().collect();
            self.tool_calls = self.tool_calls.max(p.tool_calls.len());
        }
        self.text.push_str(&delta.text);
        self.shown |= !delta.is_empty();
        (restarted || !delta.is_empty()).then_some(delta)
    }

    /// The model call of a run's `assistant` event has ended with `message`: what of it this
    /// follower has not given yet (the last moments of a stream go by between two looks), or
    /// `None` when nothing of that call was given or what was given is not the start of its
    /// text (then the whole message is what to show).
    pub(crate) fn finish(&mut self, message: &AssistantMessage) -> Option<Delta> {
        if !std::mem::take(&mut self.shown) {
            return None;
        }
        let rest = message.text.strip_prefix(self.text.as_str())?;
        let delta = Delta {
            attempt: self.attempt,
            text: rest.to_owned(),
            tool_calls: message
                .tool_calls
                .iter()
                .skip(self.tool_calls)
                .map(|c| c.name.clone())
                .collect(),
            ..Delta::default()
        };
        self.text.clear();
        Some(delta)
    }
}

/// A model call's new output for people: its text as it comes under its turn's header
/// (`open`: the header and some text are on screen), and for a retried attempt a line saying
/// the text above is abandoned, then the new attempt's from its start.
pub(crate) fn human(d: &Delta, turn: u32, open: &mut bool, style: &Style) -> String {
    let mut out = String::new();
    if d.restarted {
        if std::mem::take(open) {
            out.push('\n');
        }
        out.push_str(&style.yellow(&format!(
            "(model call retried, attempt {}: the text above is abandoned)",
            d.attempt
        )));
        out.push('\n');
    }
    if !d.text.is_empty() {
        if !*open {
            out.push_str(&style.bold(&format!("── turn {turn} ──")));
            out.push('\n');
            *open = true;
        }
        // The model's text as it comes: escaped, an escape sequence split over two
        // deltas included (its escape character is in one of them).
        out.push_str(&crate::safe_text::escape(&d.text));
    }
    out
}

/// The part of a text of `total` chars ending in `tail` that comes after its first `seen`
/// chars, and how many chars of that part are no longer in the tail.
fn new_suffix(tail: &str, total: u32, seen: u32) -> (String, u64) {
    let new = u64::from(total.saturating_sub(seen));
    let in_tail = tail.chars().count() as u64;
    if new >= in_tail {
        (tail.to_owned(), new - in_tail)
    } else {
        let skip = usize::try_from(in_tail - new).unwrap_or(usize::MAX);
        (tail.chars().skip(skip).collect(), 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_proto::ToolCall;
    use pretty_assertions::assert_eq;

    /// Details of `attempt` for the text so far, its tail cut to `keep` chars.
    fn details(attempt: u32, text: &str, keep: usize, tools: &[&str]) -> StreamProgress {
        let chars: Vec<char> = text.chars().collect();
        StreamProgress {
            attempt,
            seq: chars.len() as u32,
            text_tail: chars[chars.len().saturating_sub(keep)..].iter().collect(),
            text_chars: chars.len() as u32,
            tool_calls: tools.iter().map(|t| (*t).to_owned()).collect(),
            ..Default::default()
        }
    }

    fn at(call: &str, attempt: u32, progress: Option<StreamProgress>) -> Streaming {
        Streaming {
            activity_id: call.into(),
            attempt,
            started: true,
            progress,
        }
    }

    #[test]
    fn deltas_across_polls_add_up_to_the_text() {
        let full = "Hé wörld, this is a streamed answer ✓ 🦀 that goes on and on.";
        let mut f = Follower::default();
        let mut given = String::new();
        // Looks at growing prefixes, some skipped, tails of 24 chars.
        for upto in [0, 3, 10, 11, 11, 25, 40, full.chars().count()] {
            let text: String = full.chars().take(upto).collect();
            if let Some(d) = f.update(&at("1", 1, Some(details(1, &text, 24, &[])))) {
                assert_eq!((d.attempt, d.restarted, d.missed_chars), (1, false, 0));
                given.push_str(&d.text);
            }
            assert_eq!(given, text);
        }
        // Nothing new: no delta.
        assert_eq!(f.update(&at("1", 1, Some(details(1, full, 16, &[])))), None);
    }

    #[test]
    fn a_look_that_fell_behind_the_tail_says_what_it_missed() {
        let mut f = Follower::default();
        f.update(&at("1", 1, Some(details(1, "abc", 4, &[]))));
        let d = f
            .update(&at("1", 1, Some(details(1, "abcdefghij", 4, &[]))))
            .unwrap();
        assert_eq!((d.text.as_str(), d.missed_chars), ("ghij", 3));
    }

    #[test]
    fn a_new_attempt_starts_over_and_never_repeats_the_old_one() {
        let mut f = Follower::default();
        let d = f
            .update(&at("1", 1, Some(details(1, "first try", 64, &["shell"]))))
            .unwrap();
        assert_eq!(d.tool_calls, vec!["shell".to_owned()]);
        // Attempt 2 pending; the server still shows attempt 1's details: they are dropped,
        // the abandoned output is announced once.
        let d = f
            .update(&at("1", 2, Some(details(1, "first try, more", 64, &[]))))
            .unwrap();
        assert_eq!(
            d,
            Delta {
                attempt: 2,
                restarted: true,
                ..Delta::default()
            }
        );
        assert_eq!(
            f.update(&at("1", 2, Some(details(1, "first try, more", 64, &[])))),
            None
        );
        let d = f
            .update(&at("1", 2, Some(details(2, "Second", 64, &[]))))
            .unwrap();
        assert_eq!(
            (d.attempt, d.restarted, d.text.as_str()),
            (2, false, "Second")
        );
        // A stale describe of attempt 1 changes nothing.
        assert_eq!(f.update(&at("1", 1, Some(details(1, "x", 64, &[])))), None);
        // The call ends: the rest of attempt 2's text, never attempt 1's.
        let message = AssistantMessage {
            text: "Second answer".into(),
            tool_calls: vec![ToolCall {
                name: "read_file".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let d = f.finish(&message).unwrap();
        assert_eq!(
            (d.attempt, d.text.as_str(), d.tool_calls),
            (2, " answer", vec!["read_file".to_owned()])
        );
        // Finished once.
        assert_eq!(f.finish(&message), None);
    }

    #[test]
    fn people_see_the_text_under_its_header_and_a_retry_replaces_it() {
        let style = Style::plain();
        let mut open = false;
        let text = |attempt, t: &str, restarted| Delta {
            attempt,
            restarted,
            text: t.into(),
            ..Delta::default()
        };
        let mut shown = human(&Delta::default(), 2, &mut open, &style);
        assert!(!open);
        shown += &human(&text(1, "Hello", false), 2, &mut open, &style);
        shown += &human(&text(1, " wor", false), 2, &mut open, &style);
        shown += &human(&text(2, "", true), 2, &mut open, &style);
        shown += &human(&text(2, "Hi", false), 2, &mut open, &style);
        assert_eq!(
            shown,
            "── turn 2 ──\nHello wor\n(model call retried, attempt 2: the text above is \
             abandoned)\n── turn 2 ──\nHi"
        );
        assert!(open);
    }

    #[test]
    fn a_retry_of_a_call_that_showed_nothing_is_silent_and_the_next_call_starts_fresh() {
        let mut f = Follower::default();
        assert_eq!(f.update(&at("1", 1, None)), None);
        assert_eq!(f.update(&at("1", 2, None)), None);
        let d = f
            .update(&at("1", 2, Some(details(2, "ok", 64, &[]))))
            .unwrap();
        assert!(!d.restarted);
        // The next turn's call: counts start again (its text is not a continuation).
        let d = f
            .update(&at("2", 1, Some(details(1, "next", 64, &[]))))
            .unwrap();
        assert_eq!((d.attempt, d.text.as_str()), (1, "next"));
        // A final text that does not start with what was given: show the whole message.
        let other = AssistantMessage {
            text: "different".into(),
            ..Default::default()
        };
        assert_eq!(f.finish(&other), None);
    }
}
