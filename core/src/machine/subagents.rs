//! Subagents ([`crate::subagent`]): `spawn_agent` calls checked when their batch is
//! planned, the child's spec and run id in the step that runs them, the child's start and
//! end as events, and its usage added to this run's.

use baton_proto::{RunSpec, SubagentFinished, SubagentStarted, ToolCall, ToolResult, run_event};

use super::{Batch, Disposition, PlannedCall, RunState, add_usage};
use crate::{
    subagent::{self, Parent},
    tools::SPAWN_AGENT,
    view,
};

impl RunState {
    /// The spec of the child a `spawn_agent` call would start now, or the model's error.
    fn child_spec(&self, call: &ToolCall, now_ms: i64) -> Result<RunSpec, String> {
        let parent = Parent {
            run_id: &self.run_id,
            spec: &self.spec,
            tools: &self.tools,
            remembered: &self.remembered,
            usage: &self.usage,
            elapsed_ms: now_ms - self.started_at_ms,
        };
        subagent::child_spec(&parent, call)
    }

    /// Refuses the `spawn_agent` calls of a new batch that cannot start a child: bad
    /// arguments, or more than the run's `max_subagents`.
    pub(super) fn check_spawns(&self, calls: &mut [PlannedCall], now_ms: i64) {
        let max = subagent::max_subagents(&self.spec);
        let mut count = self.subagents_started;
        for planned in calls.iter_mut() {
            if planned.call.name != SPAWN_AGENT
                || matches!(planned.disposition, Disposition::Refused { .. })
            {
                continue;
            }
            let refusal = if count >= max {
                Some(format!(
                    "This run has started its limit of {max} subagents (limits.max_subagents). \
                     Do the rest yourself. No subagent started."
                ))
            } else {
                self.child_spec(&planned.call, now_ms).err()
            };
            match refusal {
                Some(content) => planned.disposition = Disposition::Refused { content },
                None => count += 1,
            }
        }
    }

    /// The child spec and run id of each `spawn_agent` call of `batch` that runs, by call id.
    pub(super) fn spawns(&self, batch: &Batch, now_ms: i64) -> Vec<(String, RunSpec, String)> {
        let mut ordinal = self.subagents_started;
        batch
            .calls
            .iter()
            .filter(|c| {
                c.call.name == SPAWN_AGENT && matches!(c.disposition, Disposition::Run { .. })
            })
            .filter_map(|c| {
                let mut spec = self.child_spec(&c.call, now_ms).ok()?;
                ordinal += 1;
                // A scripted parent (demo, tests) carries its children's scripts.
                if let Some(model) = &mut spec.model
                    && let Some(script) = model.script.take()
                {
                    model.script = script.subagents.get(ordinal as usize - 1).cloned();
                }
                let id = subagent::child_run_id(&self.run_id, ordinal);
                Some((c.call.id.clone(), spec, id))
            })
            .collect()
    }

    /// A child run started (the workflow tells as its start is confirmed).
    pub(crate) fn on_subagent_started(
        &mut self,
        call_id: &str,
        run_id: &str,
        task: &str,
        now_ms: i64,
    ) {
        let mut task = task.to_owned();
        view::cut_text(&mut task, subagent::ANSWER_PREVIEW_BYTES);
        self.push_event(
            now_ms,
            run_event::Kind::SubagentStarted(SubagentStarted {
                call_id: call_id.to_owned(),
                run_id: run_id.to_owned(),
                task,
            }),
        );
    }

    /// The result of a `spawn_agent` call that ran joined the conversation: the child's usage
    /// counts as this run's, and the count of children goes up (a child that could not start
    /// keeps its run id taken).
    pub(super) fn on_spawn_result(&mut self, result: &ToolResult) {
        if result.name != SPAWN_AGENT {
            return;
        }
        self.subagents_started += 1;
        if let Some(outcome) = &result.subagent
            && let Some(usage) = &outcome.usage
        {
            add_usage(&mut self.usage, usage);
        }
    }

    /// The `tool_finished` event of a result, and for a subagent's, its `subagent_finished`.
    pub(super) fn push_tool_finished(&mut self, now_ms: i64, result: ToolResult) {
        let finished = result.subagent.clone().map(|outcome| {
            let mut answer = result.content.clone();
            view::cut_text(&mut answer, subagent::ANSWER_PREVIEW_BYTES);
            SubagentFinished {
                call_id: result.call_id.clone(),
                outcome: Some(outcome),
                answer,
            }
        });
        self.push_event(now_ms, run_event::Kind::ToolFinished(result));
        if let Some(f) = finished {
            self.push_event(now_ms, run_event::Kind::SubagentFinished(f));
        }
    }
}
