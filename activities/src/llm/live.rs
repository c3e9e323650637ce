//! What a streaming model call has received so far, published for `baton watch`:
//! the wire formats' stream readers add each text and reasoning delta and each tool call's
//! name to a [`Live`]; the transport hands it to a [`LiveSink`] after each event; the
//! `llm_generate` activity beats it as [`StreamProgress`] heartbeat details, which `watch`
//! reads from a describe of the run. Heartbeats write no history events.
//!
//! Bounded whatever the answer's length: the details carry the last [`TEXT_TAIL_BYTES`] of
//! text and [`REASONING_TAIL_BYTES`] of reasoning plus their total lengths in chars, and at
//! most [`MAX_TOOL_NAMES`] names (a payload over 2 MiB would fail the attempt; over 512 KiB the
//! server warns at every beat).

use std::time::Duration;

use baton_proto::{StreamProgress, Usage};
use tokio::sync::watch;

/// The last bytes of the answer's text the details carry (a watcher that polls less often
/// than this much text arrives misses the rest; the final message has it all).
pub const TEXT_TAIL_BYTES: usize = 8 * 1024;
/// The last bytes of the reasoning the details carry.
pub const REASONING_TAIL_BYTES: usize = 4 * 1024;
/// Tool-call names the details carry at most (and bytes of each).
pub const MAX_TOOL_NAMES: usize = 64;
const MAX_NAME_BYTES: usize = 128;

/// The least time between two heartbeats of a streaming call: about ten updates a second
/// (the worker's heartbeat throttle, `HEARTBEAT_THROTTLE`, is no longer).
pub const STREAM_BEAT: Duration = Duration::from_millis(100);

/// The end of a growing text: the last `keep` bytes or more (cut at a char boundary) and the
/// count of all chars pushed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Tail {
    buf: String,
    chars: u64,
}

impl Tail {
    fn push(&mut self, delta: &str, keep: usize) {
        self.buf.push_str(delta);
        self.chars += delta.chars().count() as u64;
        // Trimmed only once it is twice the window: amortized O(1) per byte.
        if self.buf.len() > 2 * keep {
            let cut = boundary_from(&self.buf, self.buf.len() - keep);
            self.buf.drain(..cut);
        }
    }

    /// The last `keep` bytes or fewer, whole chars.
    fn last(&self, keep: usize) -> &str {
        &self.buf[boundary_from(&self.buf, self.buf.len().saturating_sub(keep))..]
    }
}

/// The first char boundary of `s` at or after `at`.
fn boundary_from(s: &str, at: usize) -> usize {
    (at..=s.len())
        .find(|i| s.is_char_boundary(*i))
        .unwrap_or(s.len())
}

/// What a stream has received so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Live {
    text: Tail,
    reasoning: Tail,
    tool_calls: Vec<String>,
    /// What the provider reported it bills for this attempt so far.
    usage: Option<Usage>,
    /// Changes so far.
    seq: u32,
}

impl Live {
    /// Adds a text delta.
    pub fn text(&mut self, delta: &str) {
        if !delta.is_empty() {
            self.text.push(delta, TEXT_TAIL_BYTES);
            self.seq = self.seq.wrapping_add(1);
        }
    }

    /// Adds a reasoning (thinking, reasoning summary) delta.
    pub fn reasoning(&mut self, delta: &str) {
        if !delta.is_empty() {
            self.reasoning.push(delta, REASONING_TAIL_BYTES);
            self.seq = self.seq.wrapping_add(1);
        }
    }

    /// A tool call started with this name.
    pub fn tool_call(&mut self, name: &str) {
        if self.tool_calls.len() < MAX_TOOL_NAMES && !name.is_empty() {
            let cut = (0..=name.len().min(MAX_NAME_BYTES))
                .rev()
                .find(|i| name.is_char_boundary(*i))
                .unwrap_or(0);
            self.tool_calls.push(name[..cut].to_owned());
            self.seq = self.seq.wrapping_add(1);
        }
    }

    /// The provider reported this usage for the attempt so far (cumulative).
    pub fn usage(&mut self, usage: Usage) {
        if self.usage.as_ref() != Some(&usage) {
            self.usage = Some(usage);
            self.seq = self.seq.wrapping_add(1);
        }
    }

    /// The usage the provider reported for the attempt so far, if any.
    pub fn billed(&self) -> Option<&Usage> {
        self.usage.as_ref()
    }

    /// The number of changes so far.
    pub fn seq(&self) -> u32 {
        self.seq
    }

    /// The heartbeat details of attempt `attempt`.
    pub fn progress(&self, attempt: u32) -> StreamProgress {
        StreamProgress {
            attempt,
            seq: self.seq,
            text_tail: self.text.last(TEXT_TAIL_BYTES).to_owned(),
            reasoning_tail: self.reasoning.last(REASONING_TAIL_BYTES).to_owned(),
            text_chars: saturate(self.text.chars),
            reasoning_chars: saturate(self.reasoning.chars),
            tool_calls: self.tool_calls.clone(),
            billed: self.usage,
            billed_before: None,
        }
    }
}

fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Where a stream reader publishes its [`Live`]: the sending side of the channel the
/// activity's heartbeat task watches.
#[derive(Debug)]
pub struct LiveSink(watch::Sender<Live>);

impl LiveSink {
    /// A sink and the receiver that sees each published change.
    pub fn channel() -> (Self, watch::Receiver<Live>) {
        let (tx, rx) = watch::channel(Live::default());
        (Self(tx), rx)
    }

    /// What was published last.
    pub fn current(&self) -> Live {
        self.0.borrow().clone()
    }

    /// Publishes `live` if it changed since the last publication (buffers reused).
    pub fn publish(&self, live: &Live) {
        self.0.send_if_modified(|current| {
            let changed = current.seq != live.seq;
            if changed {
                current.clone_from(live);
            }
            changed
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_tail_keeps_the_last_bytes_at_char_boundaries_and_counts_every_char() {
        let mut live = Live::default();
        let mut all = String::new();
        // 3-byte and 4-byte chars so that cuts fall inside them.
        for i in 0..5_000 {
            let delta = if i % 3 == 0 { "✓🦀" } else { "ab" };
            live.text(delta);
            all.push_str(delta);
        }
        let p = live.progress(2);
        assert_eq!(p.attempt, 2);
        assert_eq!(p.seq, 5_000);
        assert_eq!(p.text_chars as usize, all.chars().count());
        assert!(p.text_tail.len() <= TEXT_TAIL_BYTES);
        assert!(p.text_tail.len() > TEXT_TAIL_BYTES - 4);
        assert!(all.ends_with(&p.text_tail));
        // The buffer is trimmed: it never holds much more than twice the window.
        assert!(live.text.buf.len() <= 2 * TEXT_TAIL_BYTES + 8);
        assert_eq!(p.reasoning_tail, "");
        assert_eq!(p.reasoning_chars, 0);
    }

    #[test]
    fn tool_names_are_bounded_and_empty_deltas_change_nothing() {
        let mut live = Live::default();
        live.text("");
        live.reasoning("");
        live.tool_call("");
        assert_eq!(live.seq(), 0);
        for i in 0..100 {
            live.tool_call(&format!("tool_{i}"));
        }
        live.tool_call(&"é".repeat(100));
        let p = live.progress(1);
        assert_eq!(p.tool_calls.len(), MAX_TOOL_NAMES);
        assert_eq!(p.tool_calls[63], "tool_63");
        let mut other = Live::default();
        other.tool_call(&"é".repeat(100));
        assert_eq!(other.tool_calls[0], "é".repeat(64));
    }

    #[test]
    fn the_sink_publishes_changes_only() {
        let (sink, mut rx) = LiveSink::channel();
        let mut live = Live::default();
        sink.publish(&live);
        assert!(!rx.has_changed().unwrap());
        live.reasoning("thinking");
        sink.publish(&live);
        assert!(rx.has_changed().unwrap());
        assert_eq!(
            rx.borrow_and_update().progress(1).reasoning_tail,
            "thinking"
        );
        sink.publish(&live);
        assert!(!rx.has_changed().unwrap());
    }
}
