//! A batch of tool calls: planning it (validation, the approval policy), the step that runs
//! it, the calls as they start and finish, their results, and the guards over them (loop
//! detection, the circuit breaker).

use baton_proto::{
    Item, PendingCall, TerminationReason, ToolCall, ToolDefinition, ToolRequest, ToolResult, item,
    run_event,
};

use super::{Batch, BatchKind, Disposition, Phase, PlannedCall, RunState, Step, ToolPlan, user};
use crate::{
    guards,
    policy::{self, Assessment},
    tools,
};

/// Bytes of invalid tool-call arguments quoted back to the model in the error.
const INVALID_ARGUMENTS_SHOWN: usize = 2048;

impl RunState {
    /// The step of an `Executing` batch: its calls allowed to run, in call order.
    pub(super) fn run_tools_step(&self, batch: &Batch, now_ms: i64) -> Step {
        let spawns = self.spawns(batch, now_ms);
        let requests: Vec<ToolRequest> =
            batch
                .calls
                .iter()
                .filter(|c| matches!(c.disposition, Disposition::Run { .. }))
                .map(|c| (c, self.tool_def(&c.call.name)))
                .map(|(c, def)| ToolRequest {
                    call: Some(c.call.clone()),
                    timeout_seconds: self.tool_timeout(&c.call),
                    snapshot: self.workspace_snapshot.clone().unwrap_or_default(),
                    mutating: !def.is_some_and(|d| d.read_only),
                    mcp: def.and_then(|d| d.mcp.clone()),
                    confirm_retries: self.spec.approval.as_ref().is_some_and(|p| {
                        p.on_retry() == baton_proto::approval_policy::OnRetry::Ask
                    }),
                    retry_confirmed: batch.kind == BatchKind::Retry,
                    sandbox: self.spec.sandbox.clone(),
                    subagent: None,
                    subagent_run_id: String::new(),
                })
                .map(|mut r| {
                    let id = r.call.as_ref().map(|c| c.id.as_str()).unwrap_or_default();
                    if let Some((_, spec, run_id)) = spawns.iter().find(|(call, ..)| call == id) {
                        r.subagent = Some(spec.clone());
                        r.subagent_run_id = run_id.clone();
                    }
                    r
                })
                .collect();
        let plan = ToolPlan::new(
            &requests,
            self.limits().max_parallel_tools,
            self.spec.local_read_tools,
            self.spec.remote_read_tools,
        );
        Step::RunTools { requests, plan }
    }

    /// Validates and assesses every call of a batch before any of it runs.
    pub(super) fn plan_batch(&mut self, calls: Vec<ToolCall>, now_ms: i64) {
        let policy = self.spec.approval.clone().unwrap_or_default();
        let planned: Vec<PlannedCall> = calls
            .into_iter()
            .map(|call| {
                let disposition = match self.check_call(&call) {
                    Err(content) => Disposition::Refused { content },
                    Ok(def) => match policy::assess(&call, def, &policy, &self.remembered) {
                        Assessment::AutoApprove => Disposition::Run { approver: None },
                        Assessment::AskHuman => Disposition::Pending,
                        Assessment::Reject { reason } => Disposition::Refused { content: reason },
                    },
                };
                PlannedCall { call, disposition }
            })
            .collect();
        let mut planned = planned;
        self.check_spawns(&mut planned, now_ms);
        let batch = Batch {
            calls: planned,
            requested_at_ms: now_ms,
            kind: BatchKind::Tools,
            started: Vec::new(),
            done: Vec::new(),
        };
        let pending: Vec<PendingCall> = batch
            .pending()
            .map(|c| PendingCall {
                call_id: c.call.id.clone(),
                tool: c.call.name.clone(),
                arguments: c.call.arguments.clone(),
                requested_at_ms: now_ms,
            })
            .collect();
        if pending.is_empty() {
            self.phase = Phase::Executing(batch);
        } else {
            self.phase = Phase::AwaitingApproval(batch);
            for p in pending {
                self.push_event(now_ms, run_event::Kind::ApprovalRequested(p));
            }
        }
    }

    /// The definition of an enabled tool (built-in or MCP).
    pub(super) fn tool_def(&self, name: &str) -> Option<&ToolDefinition> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// A call must name an enabled tool and carry a JSON object of arguments.
    fn check_call(&self, call: &ToolCall) -> Result<&ToolDefinition, String> {
        let Some(def) = self.tools.iter().find(|t| t.name == call.name) else {
            let names: Vec<&str> = self.tools.iter().map(|t| t.name.as_str()).collect();
            return Err(format!(
                "Unknown tool '{}'. The available tools are: {}. Call one of them.",
                call.name,
                names.join(", ")
            ));
        };
        let args = if call.arguments.trim().is_empty() {
            "{}"
        } else {
            call.arguments.as_str()
        };
        match serde_json::from_str::<serde_json::Value>(args) {
            Ok(serde_json::Value::Object(_)) => Ok(def),
            Ok(other) => Err(format!(
                "The arguments of '{}' must be a JSON object matching its schema, got: {}. \
                 The call did not run.",
                call.name, other
            )),
            Err(e) => {
                // The replayed turn carries `{}` in their place (servers refuse invalid JSON),
                // so this is where the model sees what it wrote.
                let mut sent = args.to_owned();
                crate::view::cut_text(&mut sent, INVALID_ARGUMENTS_SHOWN);
                Err(format!(
                    "The arguments of '{}' are not valid JSON ({e}). You sent: {sent}\n\
                     Send a JSON object matching the tool's schema: {}. The call did not run.",
                    call.name, def.parameters
                ))
            }
        }
    }

    fn tool_timeout(&self, call: &ToolCall) -> u32 {
        let default = self.limits().tool_timeout_seconds;
        if call.name != tools::SHELL {
            return default;
        }
        serde_json::from_str::<serde_json::Value>(&call.arguments)
            .ok()
            .and_then(|v| v.get("timeout_seconds").and_then(|t| t.as_u64()))
            .filter(|t| *t > 0)
            // The model may shorten the run's tool timeout, never extend it.
            .map(|t| t.min(u64::from(default)) as u32)
            .unwrap_or(default)
    }

    /// The calls `ids` of the current batch start executing now (the workflow tells as it
    /// schedules them: mutating calls go one at a time).
    pub(crate) fn on_tools_started(&mut self, ids: &[String], now_ms: i64) {
        let Phase::Executing(batch) = &mut self.phase else {
            self.ignored(now_ms, "tools started", "executing tools");
            return;
        };
        let mut started = Vec::new();
        for planned in &batch.calls {
            if ids.contains(&planned.call.id) && !batch.started.contains(&planned.call.id) {
                batch.started.push(planned.call.id.clone());
                started.push(planned.call.clone());
            }
        }
        for call in started {
            self.push_event(now_ms, run_event::Kind::ToolStarted(call));
        }
    }

    /// Calls of the current batch completed (as each group of it does): `watch` sees them
    /// finish now, and if the run ends before the batch does, they keep their results.
    /// [`Input::ToolResults`] takes them all again at the end of the batch.
    pub(crate) fn on_tools_finished(&mut self, results: &[ToolResult], now_ms: i64) {
        let Phase::Executing(batch) = &mut self.phase else {
            self.ignored(now_ms, "tools finished", "executing tools");
            return;
        };
        let mut finished = Vec::new();
        for r in results {
            if r.interrupted || batch.done.iter().any(|d| d.call_id == r.call_id) {
                continue;
            }
            batch.done.push(r.clone());
            finished.push(r.clone());
        }
        for r in finished {
            self.push_tool_finished(now_ms, r);
        }
    }

    /// Results of the calls of the last [`Step::RunTools`], in the same order. Refused calls
    /// get their error observation; everything goes into the conversation in call order.
    pub(crate) fn on_tool_results(&mut self, results: Vec<ToolResult>, now_ms: i64) {
        let batch = match std::mem::replace(&mut self.phase, Phase::Thinking) {
            Phase::Executing(batch) => batch,
            other => {
                self.phase = other;
                self.ignored(now_ms, "tool results", "executing tools");
                return;
            }
        };
        let mut unknown_hosts = Vec::new();
        let mut results = results.into_iter();
        let mut any_error = false;
        let mut interrupted = Vec::new();
        for planned in batch.calls {
            let result = match planned.disposition {
                Disposition::Run { .. } => {
                    let mut r = results.next().unwrap_or_else(|| ToolResult {
                        content: "internal error: the tool produced no result".to_owned(),
                        is_error: true,
                        ..Default::default()
                    });
                    // MCP tools change the workspace only when their server runs in it (then
                    // the call leaves a snapshot).
                    let touches = if crate::mcp::is_mcp_name(&planned.call.name) {
                        !r.snapshot.is_empty()
                    } else {
                        !tools::definition(&planned.call.name).is_some_and(|d| d.read_only)
                    };
                    self.outputs.touched |= touches;
                    r.call_id = planned.call.id.clone();
                    r.name = planned.call.name.clone();
                    self.on_spawn_result(&r);
                    r
                }
                Disposition::Refused { content } => ToolResult {
                    call_id: planned.call.id.clone(),
                    name: planned.call.name.clone(),
                    content,
                    is_error: true,
                    ..Default::default()
                },
                Disposition::Pending => ToolResult {
                    call_id: planned.call.id.clone(),
                    name: planned.call.name.clone(),
                    content: "internal error: the call was never decided".to_owned(),
                    is_error: true,
                    ..Default::default()
                },
            };
            if result.interrupted {
                // The workspace as the cut-off call found it.
                if !result.snapshot.is_empty() {
                    self.workspace_snapshot = Some(result.snapshot.clone());
                }
                interrupted.push(PlannedCall {
                    call: planned.call,
                    disposition: Disposition::Pending,
                });
                continue;
            }
            any_error |= result.is_error;
            unknown_hosts.extend(super::network::unknown_hosts(&result));
            if !result.snapshot.is_empty() {
                self.workspace_snapshot = Some(result.snapshot.clone());
            }
            if !batch.done.iter().any(|d| d.call_id == result.call_id) {
                self.push_tool_finished(now_ms, result.clone());
            }
            self.conversation.push(Item {
                kind: Some(item::Kind::ToolResult(result)),
            });
        }
        self.circuit_breaker(any_error, now_ms);
        if !interrupted.is_empty() && matches!(self.phase, Phase::Thinking) {
            self.ask_about_retries(interrupted, now_ms);
        } else {
            self.ask_about_hosts(unknown_hosts, now_ms);
        }
    }

    fn loops_policy(&self) -> Option<&baton_proto::LoopPolicy> {
        self.spec.approval.as_ref().and_then(|p| p.loops.as_ref())
    }

    pub(super) fn loop_check(&self) -> Option<String> {
        if self.loops_policy().is_some_and(|l| l.disabled) {
            return None;
        }
        guards::detect_loop(&self.conversation)
    }

    /// A loop was detected: stop, or ask a human, by policy.
    pub(super) fn on_loop(&mut self, why: String, now_ms: i64) {
        let ask = self
            .loops_policy()
            .is_some_and(|l| l.on_loop() == baton_proto::loop_policy::OnLoop::Ask);
        if ask {
            self.ask_question(
                format!("Loop detected: {why}. Continue the run (approve) or abort it (deny)?"),
                None,
                now_ms,
            );
        } else {
            self.finish(now_ms, TerminationReason::LoopDetected, why);
        }
    }

    /// Counts failing turns: alerts the model after the first threshold, then pauses for a
    /// human after the second.
    fn circuit_breaker(&mut self, any_error: bool, now_ms: i64) {
        if !any_error {
            self.error_streak = 0;
            return;
        }
        self.error_streak += 1;
        if self.loops_policy().is_some_and(|l| l.disabled) {
            return;
        }
        let (alert_after, pause_after) = guards::breaker_thresholds(self.loops_policy());
        if self.error_streak == alert_after {
            self.conversation
                .push(user(&guards::breaker_alert(self.error_streak), true));
            self.note(
                now_ms,
                &format!(
                    "circuit breaker: {} failing turns in a row; the model was told to change strategy",
                    self.error_streak
                ),
            );
        } else if self.error_streak == alert_after + pause_after {
            self.ask_question(
                format!(
                    "The agent's tool calls failed in {} turns in a row, even after it was told to change strategy. Continue the run (approve) or abort it (deny)?",
                    self.error_streak
                ),
                None,
                now_ms,
            );
        }
    }
}
