//! The model's context: eliding old tool outputs, the token estimate, and compaction (a
//! summary of the older turns in place of them).

use baton_proto::{CompactRequest, CompactResponse};

use super::{
    COMPACTION_BUFFER_TOKENS, ELIDE_MIN_BYTES, KEEP_RECENT_TURNS, Phase, RunState, Step, Summary,
    add_usage,
};
use crate::view;

impl RunState {
    /// Conversation indices of the assistant turns, in order.
    pub(super) fn assistant_turns(&self) -> Vec<usize> {
        self.conversation
            .iter()
            .enumerate()
            .filter(|(_, i)| view::is_assistant(i))
            .map(|(n, _)| n)
            .collect()
    }

    /// Elides tool outputs older than the last [`KEEP_RECENT_TURNS`] assistant turns from the
    /// model's view. Returns how many outputs and bytes were elided.
    pub fn elide_old_tool_outputs(&mut self) -> (usize, usize) {
        let assistants = self.assistant_turns();
        let Some(&cutoff) = assistants
            .len()
            .checked_sub(KEEP_RECENT_TURNS)
            .and_then(|k| assistants.get(k))
        else {
            return (0, 0);
        };
        let from = self
            .summary
            .as_ref()
            .map(|s| s.upto)
            .unwrap_or(0)
            .max(self.elide_before);
        let mut count = 0;
        let mut bytes = 0;
        for entry in self.conversation.iter().take(cutoff).skip(from) {
            if let Some(size) = view::tool_output_chars(entry)
                && size >= ELIDE_MIN_BYTES
            {
                count += 1;
                bytes += size;
            }
        }
        self.elide_before = self.elide_before.max(cutoff);
        if count > 0 {
            self.calibration = None;
        }
        (count, bytes)
    }

    /// Estimated tokens of the next request: the last call's reported usage plus an estimate of
    /// what was added since, or (after the view changed) an estimate of the whole view.
    pub fn estimate_tokens(&self) -> u32 {
        let len_now = self.conversation.len();
        let estimate = match self.calibration {
            Some((tokens, len)) if len <= len_now => {
                let added = view::view_chars(&self.conversation, self.elide_before, len, len_now);
                u64::from(tokens) + (added / 4) as u64
            }
            _ => {
                let overhead = self.system_prompt().len()
                    + self
                        .tools
                        .iter()
                        .map(|t| t.description.len() + t.parameters.len() + t.name.len())
                        .sum::<usize>();
                let view = match &self.summary {
                    Some(summary) => {
                        view::item_chars(&view::summary_item(&summary.text))
                            + view::view_chars(&self.conversation, self.elide_before, 0, 1)
                            + view::view_chars(
                                &self.conversation,
                                self.elide_before,
                                summary.upto,
                                len_now,
                            )
                    }
                    None => view::view_chars(&self.conversation, self.elide_before, 0, len_now),
                };
                ((view + overhead) / 4) as u64
            }
        };
        estimate.min(u64::from(u32::MAX)) as u32
    }

    /// The token count above which the context is compacted (`None`: capacity unknown): the
    /// prompt capacity the worker reported for the latest reply (input cap, window less the
    /// reserved output), else the run's `ModelConfig.context_window`, else the window of the
    /// worker's model table; less a buffer, and never above an estimate the provider refused.
    pub fn compaction_threshold(&self) -> Option<u32> {
        // Within the turn that overflowed, its own ladder (elide, summarize) answers it; the
        // refused estimate bounds the later turns.
        let refused_at = self
            .refused_at
            .filter(|_| !(self.overflow_retried || self.overflow_compacted));
        let capacity = Some(self.prompt_capacity)
            .filter(|c| *c > 0)
            .or(self
                .spec
                .model
                .as_ref()
                .map(|m| m.context_window)
                .filter(|w| *w > 0))
            .unwrap_or(self.model_context_window);
        if capacity == 0 {
            return refused_at;
        }
        let buffer = COMPACTION_BUFFER_TOKENS.min(capacity / 4);
        let threshold = capacity - buffer;
        Some(refused_at.map_or(threshold, |r| r.min(threshold)))
    }

    /// Whether an overflow that eliding could not fix may be answered by a compaction: once per
    /// turn, not after a failed compaction this turn, and only with older turns left to
    /// summarize.
    pub(super) fn may_compact_on_overflow(&self) -> bool {
        !self.overflow_compacted
            && self.compaction_failed_turn != Some(self.turn)
            && self.compaction_cut().is_some()
    }

    /// Before an LLM call: when the estimate passes the threshold, elide old tool outputs,
    /// then, if still over, ask for a summary of the older turns. After an overflow
    /// (`compact_now`) the summary is asked for whatever the estimate says.
    pub(super) fn context_hygiene(&mut self, now_ms: i64) -> Option<Step> {
        let after = if std::mem::take(&mut self.compact_now) {
            if self.compaction_failed_turn == Some(self.turn) {
                return None;
            }
            self.estimate_tokens()
        } else {
            let limit = self.compaction_threshold()?;
            let before = self.estimate_tokens();
            if before <= limit {
                return None;
            }
            let (count, _) = self.elide_old_tool_outputs();
            let after = self.estimate_tokens();
            if count > 0 {
                self.note(
                    now_ms,
                    &format!(
                        "compaction: removed {count} old tool outputs from the model's view \
                         (~{before} -> ~{after} tokens)"
                    ),
                );
            }
            if after <= limit || self.compaction_failed_turn == Some(self.turn) {
                return None;
            }
            after
        };
        let upto = self.compaction_cut()?;
        self.phase = Phase::Compacting {
            upto,
            tokens_before: after,
        };
        Some(Step::Compact(self.compact_request(upto)))
    }

    /// Where the verbatim part of the conversation starts after a compaction: the first item
    /// of the last [`KEEP_RECENT_TURNS`] assistant turns (so tool results keep their calls).
    fn compaction_cut(&self) -> Option<usize> {
        let from = self.summary.as_ref().map(|s| s.upto).unwrap_or(1);
        let assistants: Vec<usize> = self
            .assistant_turns()
            .into_iter()
            .filter(|n| *n >= from)
            .collect();
        let k = assistants.len().checked_sub(KEEP_RECENT_TURNS)?;
        let cut = *assistants.get(k)?;
        (cut > from).then_some(cut)
    }

    pub(super) fn compact_request(&self, upto: usize) -> CompactRequest {
        let from = self.summary.as_ref().map(|s| s.upto).unwrap_or(1);
        let mut model = self.spec.model.clone();
        if let Some(m) = &mut model {
            m.script = None;
        }
        CompactRequest {
            model,
            task: self.spec.task.clone(),
            items: Vec::new(),
            history: Some(self.conversation_ref()),
            view: Some(self.view_spec()),
            from: from as u32,
            upto: upto as u32,
        }
    }

    /// The summary arrived: it replaces the older turns in the model's view.
    pub(crate) fn on_compacted(&mut self, response: CompactResponse, now_ms: i64) {
        let Phase::Compacting {
            upto,
            tokens_before,
        } = self.phase
        else {
            self.ignored(now_ms, "compaction result", "compacting");
            return;
        };
        if let Some(u) = &response.usage {
            add_usage(&mut self.usage, u);
        }
        self.summary = Some(Summary {
            text: response.summary,
            upto,
        });
        self.calibration = None;
        self.phase = Phase::Thinking;
        let after = self.estimate_tokens();
        self.note(
            now_ms,
            &format!(
                "compaction: summarized the conversation before item {upto} (~{tokens_before} -> ~{after} tokens)"
            ),
        );
    }

    /// The summary could not be made: go on without it (not retried this turn).
    pub(crate) fn on_compaction_failed(&mut self, detail: &str, now_ms: i64) {
        if !matches!(self.phase, Phase::Compacting { .. }) {
            self.ignored(now_ms, "compaction failure", "compacting");
            return;
        }
        self.phase = Phase::Thinking;
        self.compaction_failed_turn = Some(self.turn);
        self.note(
            now_ms,
            &format!("compaction failed, continuing without it: {detail}"),
        );
    }
}
