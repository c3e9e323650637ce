//! A turn: the LLM request, the model's reply (finish reasons, length continuations, call
//! ids), LLM failures, the turn guards checked before a call, and what joins the conversation
//! between turns (workspace instructions, user messages).

use baton_proto::{
    ConversationRef, FinishReason, Item, LlmRequest, LlmResponse, TerminationReason, ViewSpec,
    WorkspaceInstructions, run_event,
};

use super::{
    CONTINUE_PROMPT, LlmFailure, MAX_LENGTH_CONTINUATIONS, Phase, RunState,
    USER_MESSAGE_NOTE_BYTES, add_usage, assistant_item, user,
};
use crate::{prompt, view};

impl RunState {
    /// The request for the next LLM call. The conversation goes by reference: the part
    /// already in the blob store is named, only the items after it travel (and land in
    /// history); the activity builds the model's view with [`view::model_view`]. The system
    /// prompt and tools travel once, then by reference too.
    pub fn llm_request(&self) -> LlmRequest {
        let (context, system_prompt, tools) = match &self.context_ref {
            Some(id) => (id.clone(), String::new(), Vec::new()),
            None => (String::new(), self.system_prompt(), self.tools.clone()),
        };
        LlmRequest {
            model: self.request_model(),
            system_prompt,
            conversation: Vec::new(),
            tools,
            history: Some(self.conversation_ref()),
            view: Some(self.view_spec()),
            context,
            turn: self.turn,
            cache_key: String::new(),
            one_off: false,
        }
    }

    /// The conversation as the activities receive it: the stored head and the items after.
    pub fn conversation_ref(&self) -> ConversationRef {
        let (head, stored) = match &self.stored {
            Some((head, n)) if *n <= self.conversation.len() => (head.clone(), *n),
            _ => (String::new(), 0),
        };
        ConversationRef {
            head,
            stored_items: stored as u32,
            added: self.conversation[stored..].to_vec(),
        }
    }

    /// How the model's view is made from the conversation now.
    pub fn view_spec(&self) -> ViewSpec {
        ViewSpec {
            summary: self
                .summary
                .as_ref()
                .map(|s| s.text.clone())
                .unwrap_or_default(),
            summary_upto: self.summary.as_ref().map(|s| s.upto as u32).unwrap_or(0),
            elide_before: self.elide_before as u32,
        }
    }

    /// The model config a request carries: a script is cut to the one turn this call needs.
    fn request_model(&self) -> Option<baton_proto::ModelConfig> {
        let mut model = self.spec.model.clone()?;
        if let Some(script) = &mut model.script {
            *script = view::script_turn(script, self.turn);
        }
        Some(model)
    }

    /// The conversation as the model sees it (see [`view::model_view`]); after a continue-as-new
    /// older items are stubs here, so use it for sizes, not content.
    pub fn model_view(&self) -> Vec<Item> {
        view::model_view(&self.conversation, &self.view_spec())
    }

    /// The system prompt of the run (see [`crate::prompt`]).
    pub fn system_prompt(&self) -> String {
        let mut prompt = prompt::build(
            self.started_at_ms,
            self.instructions.as_ref(),
            self.spec.sandbox.as_ref(),
            &self.spec.system_prompt,
            &self.spec.output_schema,
        );
        let mut servers: Vec<&str> = Vec::new();
        for origin in self.tools.iter().filter_map(|t| t.mcp.as_ref()) {
            if !servers.contains(&origin.server.as_str()) {
                servers.push(&origin.server);
            }
        }
        if !servers.is_empty() {
            prompt.push_str(&prompt::mcp_text(&servers));
        }
        prompt
    }

    /// The workspace's contribution to the system prompt arrived (`None`: it could not be
    /// read; the run goes on without it).
    pub(crate) fn on_instructions(
        &mut self,
        instructions: Option<WorkspaceInstructions>,
        now_ms: i64,
    ) {
        match &instructions {
            Some(i) if !i.agents_md.is_empty() => self.note(
                now_ms,
                &format!(
                    "AGENTS.md found ({} bytes){}",
                    i.agents_md.len(),
                    if i.truncated { ", cut at 32 KiB" } else { "" }
                ),
            ),
            Some(_) => {}
            None => self.note(
                now_ms,
                "could not read the workspace's instructions; going on without them",
            ),
        }
        if let Some(i) = &instructions
            && !i.snapshot.is_empty()
            && self.workspace_snapshot.is_none()
        {
            self.workspace_snapshot = Some(i.snapshot.clone());
            // A run without a source starts from what its workspace holds (empty, or what an
            // earlier run of the same id left): its change set is against that.
            if self.outputs.start.is_none() {
                self.outputs.start = Some(super::WorkspaceStart {
                    snapshot: i.snapshot.clone(),
                    ..Default::default()
                });
            }
        }
        self.instructions = instructions;
    }

    /// The model answered.
    pub(crate) fn on_llm_response(&mut self, response: LlmResponse, now_ms: i64) {
        if !matches!(self.phase, Phase::Thinking) {
            // Only a `CallLlm` step (from `Thinking`) is answered by a reply.
            self.ignored(now_ms, "model reply", "thinking");
            return;
        }
        if !response.history_head.is_empty()
            && response.history_items as usize <= self.conversation.len()
        {
            self.stored = Some((
                response.history_head.clone(),
                response.history_items as usize,
            ));
        }
        if !response.context.is_empty() {
            self.context_ref = Some(response.context.clone());
        }
        if response.context_window > 0 {
            self.model_context_window = response.context_window;
        }
        if response.prompt_capacity > 0 {
            self.prompt_capacity = response.prompt_capacity;
        }
        self.turn += 1;
        self.overflow_retried = false;
        self.overflow_compacted = false;
        if let Some(u) = &response.usage {
            add_usage(&mut self.usage, u);
            let tokens = u.input_tokens.saturating_add(u.output_tokens);
            // The reply is pushed below; count it through the reported output tokens.
            self.calibration = (tokens > 0).then_some((tokens, self.conversation.len() + 1));
        }
        self.usage.llm_calls += 1;
        // Attempts that failed after the provider billed them count against the limits too.
        if let Some(u) = &response.retried {
            add_usage(&mut self.usage, u);
        }
        let mut message = response.message.unwrap_or_default();
        let finish = FinishReason::try_from(message.finish_reason).unwrap_or_default();
        match finish {
            FinishReason::Length => {
                self.consecutive_length += 1;
                message.tool_calls.clear();
                self.partial_text.push_str(&message.text);
                self.push_event(now_ms, run_event::Kind::Assistant(for_event(&message)));
                if self.consecutive_length > MAX_LENGTH_CONTINUATIONS {
                    let detail = format!(
                        "the model's output was cut off by the token limit {} times in a row",
                        self.consecutive_length
                    );
                    self.conversation.push(assistant_item(message));
                    self.finish(now_ms, TerminationReason::OutputTruncated, detail);
                    return;
                }
                self.conversation.push(assistant_item(message));
                self.conversation.push(user(CONTINUE_PROMPT, true));
            }
            FinishReason::ContentFilter => {
                self.push_event(now_ms, run_event::Kind::Assistant(for_event(&message)));
                self.conversation.push(assistant_item(message));
                self.finish(
                    now_ms,
                    TerminationReason::ContentFiltered,
                    "the provider's content filter stopped the reply".to_owned(),
                );
            }
            FinishReason::Stop | FinishReason::ToolCalls | FinishReason::Unspecified => {
                self.consecutive_length = 0;
                for (i, call) in message.tool_calls.iter_mut().enumerate() {
                    if call.id.is_empty() || self.seen_call_ids.contains(&call.id) {
                        let id = format!("call_{}_{}", self.turn, i + 1);
                        // A reasoning part of this call (a Gemini thought signature) follows it.
                        if let Some(part) = message
                            .reasoning_parts
                            .iter_mut()
                            .find(|p| !p.call_id.is_empty() && p.call_id == call.id)
                        {
                            part.call_id = id.clone();
                        }
                        call.id = id;
                    }
                    self.seen_call_ids.insert(call.id.clone());
                }
                self.push_event(now_ms, run_event::Kind::Assistant(for_event(&message)));
                let calls = message.tool_calls.clone();
                let text = message.text.clone();
                self.conversation.push(assistant_item(message));
                if let Some(why) = self.loop_check() {
                    self.on_loop(why, now_ms);
                    return;
                }
                if calls.is_empty() {
                    let answer = std::mem::take(&mut self.partial_text) + &text;
                    self.on_final_answer(answer, now_ms);
                    return;
                }
                self.partial_text.clear();
                self.plan_batch(calls, now_ms);
            }
        }
    }

    /// The LLM activity failed for good (retries exhausted or a non-retryable error). A context
    /// overflow is answered once per turn by eliding old tool outputs from the model's view and
    /// retrying; when that frees nothing, by a compaction (once per turn; the estimate the
    /// provider refused lowers the threshold for later turns); when neither is left, the run
    /// ends.
    pub(crate) fn on_llm_failure(&mut self, failure: LlmFailure, detail: String, now_ms: i64) {
        if !matches!(self.phase, Phase::Thinking) {
            self.ignored(now_ms, "model failure", "thinking");
            return;
        }
        match failure {
            LlmFailure::Fatal => self.finish(now_ms, TerminationReason::ProviderError, detail),
            LlmFailure::Infrastructure => {
                self.finish(now_ms, TerminationReason::InternalError, detail)
            }
            LlmFailure::ContextOverflow => {
                let refused = self.estimate_tokens().saturating_mul(9) / 10;
                self.refused_at = Some(self.refused_at.map_or(refused, |r| r.min(refused)));
                let (count, bytes) = if self.overflow_retried {
                    (0, 0)
                } else {
                    self.elide_old_tool_outputs()
                };
                if count > 0 {
                    self.overflow_retried = true;
                    self.note(
                        now_ms,
                        &format!(
                            "context overflow: removed {count} old tool outputs ({bytes} bytes) \
                             from the model's view; retrying the turn"
                        ),
                    );
                } else if self.may_compact_on_overflow() {
                    self.overflow_compacted = true;
                    self.compact_now = true;
                    self.note(
                        now_ms,
                        "context overflow: nothing left to remove from the model's view; \
                         summarizing the older turns, then retrying the turn",
                    );
                } else {
                    self.finish(now_ms, TerminationReason::ContextOverflow, detail);
                }
            }
        }
    }

    /// The turn guards: max turns, token budget, cost budget, deadline.
    pub(super) fn guard(&self, now_ms: i64) -> Option<(TerminationReason, String)> {
        let limits = self.limits();
        // A conversation's turn limit is per task (0 for other runs).
        if self.turn.saturating_sub(self.follow_ups.task_turn) >= limits.max_turns {
            return Some((
                TerminationReason::MaxTurnsExceeded,
                format!(
                    "the run reached its limit of {} turns without a final answer",
                    limits.max_turns
                ),
            ));
        }
        if limits.max_total_tokens > 0 && self.usage.total_tokens >= limits.max_total_tokens {
            return Some((
                TerminationReason::BudgetExceeded,
                format!(
                    "the run used {} tokens, its budget is {}",
                    self.usage.total_tokens, limits.max_total_tokens
                ),
            ));
        }
        if limits.max_cost_usd > 0.0 && self.usage.cost_usd >= limits.max_cost_usd {
            return Some((
                TerminationReason::BudgetExceeded,
                format!(
                    "the run cost ${:.2}, its budget is ${:.2}",
                    self.usage.cost_usd, limits.max_cost_usd
                ),
            ));
        }
        if limits.deadline_seconds > 0 {
            let deadline = self.started_at_ms + i64::from(limits.deadline_seconds) * 1000;
            if now_ms >= deadline {
                return Some((
                    TerminationReason::BudgetExceeded,
                    format!(
                        "the run passed its deadline of {} s",
                        limits.deadline_seconds
                    ),
                ));
            }
        }
        None
    }

    /// A user message (signal `message`) for the model, added before the next LLM call.
    pub(crate) fn on_user_message(&mut self, text: String, now_ms: i64) {
        if !self.takes_messages() {
            // Too late: no turn follows. Nothing is recorded, so the run's last event stays
            // its `finished` one (what `status` shows).
            return;
        }
        // The text too (cut, on one line), so `watch` and `status` show what was said.
        let mut said = text.split_whitespace().collect::<Vec<_>>().join(" ");
        crate::view::cut_text(&mut said, USER_MESSAGE_NOTE_BYTES);
        self.note(now_ms, &format!("user message: {said}"));
        self.inbox.push(text);
    }
}

/// The assistant message as an event shows it: without the provider's opaque reasoning
/// parts (they are for the provider only, and may be large).
fn for_event(message: &baton_proto::AssistantMessage) -> baton_proto::AssistantMessage {
    baton_proto::AssistantMessage {
        reasoning_parts: Vec::new(),
        ..message.clone()
    }
}
