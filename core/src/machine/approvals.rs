//! Human decisions: approvals and denials, the approval timeout, questions to a human
//! (continue or abort?), and extending an exhausted limit.

use baton_proto::{
    ApprovalDecision, ApprovalOutcome, ApprovalTimeoutAction, PendingCall, TerminationReason,
    ToolCall, run_event,
};

use super::{
    Batch, BatchKind, Disposition, Phase, PlannedCall, QUESTION_CALL_PREFIX, QUESTION_TOOL,
    RunState,
};
use crate::{error::DecisionError, policy};

impl RunState {
    /// Checks a decision without applying it (update validator).
    pub fn validate_decision(&self, decision: &ApprovalDecision) -> Result<(), DecisionError> {
        let batch = match &self.phase {
            Phase::AwaitingApproval(batch) => batch,
            Phase::Finished(_) => return Err(DecisionError::RunOver),
            _ => return Err(DecisionError::NothingPending),
        };
        let targets: Vec<&ToolCall> = if decision.call_id == "*" {
            let pending: Vec<&ToolCall> = batch.pending().map(|c| &c.call).collect();
            if pending.is_empty() {
                return Err(DecisionError::NothingPending);
            }
            pending
        } else {
            match batch.calls.iter().find(|c| c.call.id == decision.call_id) {
                None => {
                    return Err(DecisionError::UnknownCall {
                        call_id: decision.call_id.clone(),
                        pending: batch.pending().map(|c| c.call.id.clone()).collect(),
                    });
                }
                Some(c) if c.disposition != Disposition::Pending => {
                    return Err(DecisionError::AlreadyDecided {
                        call_id: decision.call_id.clone(),
                    });
                }
                Some(c) => vec![&c.call],
            }
        };
        let approvers = self
            .spec
            .approval
            .as_ref()
            .map(|p| p.approvers.as_slice())
            .unwrap_or_default();
        for call in targets {
            if let Err(allowed) = policy::may_decide(approvers, &call.name, &decision.identity) {
                return Err(DecisionError::NotAllowed {
                    identity: decision.identity.clone(),
                    tool: call.name.clone(),
                    allowed,
                });
            }
        }
        Ok(())
    }

    /// Applies an approval decision (signal `approval` or update `approve`). Once no call of
    /// the batch is pending, the batch moves on to execution.
    pub(crate) fn on_decision(
        &mut self,
        decision: ApprovalDecision,
        now_ms: i64,
    ) -> Result<ApprovalOutcome, DecisionError> {
        if let Err(e) = self.validate_decision(&decision) {
            self.note(now_ms, &format!("approval ignored: {e}"));
            return Err(e);
        }
        let Phase::AwaitingApproval(batch) = &mut self.phase else {
            // Not reached: `validate_decision` refused the decision (with a note) above.
            return Err(DecisionError::NothingPending);
        };
        // Who decided, as the model is told: the name the sender gave, else the Temporal
        // client identity the decision came from (which the decision event records too).
        let approver = match (decision.approver.as_str(), decision.identity.as_str()) {
            ("", "") => "unknown".to_owned(),
            ("", identity) => identity.to_owned(),
            (name, _) => name.to_owned(),
        };
        let mut applied = Vec::new();
        let mut learned = Vec::new();
        // A denied question ends the run: who ended it and why, for its result.
        let mut denial = None;
        for planned in batch.calls.iter_mut() {
            let matches = decision.call_id == "*" || planned.call.id == decision.call_id;
            if !matches || planned.disposition != Disposition::Pending {
                continue;
            }
            if decision.approved
                && decision.remember
                && let Some(rule) = policy::remembered_rule(&planned.call)
            {
                learned.push(rule);
            }
            planned.disposition = if decision.approved {
                Disposition::Run {
                    approver: Some(approver.clone()),
                }
            } else if batch.kind == BatchKind::Retry {
                Disposition::Refused {
                    content: format!(
                        "A worker failed while this call ran; it may or may not have taken \
                         effect. {approver} chose not to run it again: {}. Check its effects \
                         before you go on.",
                        if decision.reason.is_empty() {
                            "no reason given"
                        } else {
                            &decision.reason
                        }
                    ),
                }
            } else {
                let reason = if decision.reason.is_empty() {
                    "no reason given".to_owned()
                } else {
                    decision.reason.clone()
                };
                if matches!(batch.kind, BatchKind::Question { .. }) {
                    denial = Some(format!("The run was ended by {approver}: {reason}."));
                }
                Disposition::Refused {
                    content: format!(
                        "The call was denied by {approver}: {reason}. It did not run. Do not \
                         retry it unchanged; take another approach or explain why it is needed."
                    ),
                }
            };
            applied.push(planned.call.id.clone());
        }
        let still_pending = batch.pending().count() as u32;
        let mut remembered = Vec::with_capacity(learned.len());
        for rule in learned {
            let shown = format!(
                "{} {}",
                rule.tool,
                if rule.pattern.is_empty() {
                    "*"
                } else {
                    &rule.pattern
                }
            );
            self.note(
                now_ms,
                &format!("{approver} allowed {shown} for the rest of the run"),
            );
            remembered.push(shown);
            self.remembered.push(rule);
        }
        for call_id in &applied {
            let d = ApprovalDecision {
                call_id: call_id.clone(),
                approver: approver.clone(),
                ..decision.clone()
            };
            self.push_event(now_ms, run_event::Kind::ApprovalDecided(d));
        }
        self.advance_if_decided(now_ms, denial);
        Ok(ApprovalOutcome {
            call_ids: applied,
            approved: decision.approved,
            still_pending,
            remembered,
        })
    }

    /// Nobody decided in time: deny the undecided calls, or end the run, by policy.
    pub(crate) fn on_approval_timeout(&mut self, now_ms: i64) {
        let action = self
            .spec
            .approval
            .as_ref()
            .map(|p| p.on_timeout())
            .unwrap_or_default();
        let Phase::AwaitingApproval(batch) = &mut self.phase else {
            self.ignored(now_ms, "approval timeout", "awaiting approval");
            return;
        };
        match action {
            ApprovalTimeoutAction::Fail => {
                let ids: Vec<String> = batch.pending().map(|c| c.call.id.clone()).collect();
                self.finish(
                    now_ms,
                    TerminationReason::ApprovalTimedOut,
                    format!("no approval decision in time for {}", ids.join(", ")),
                );
            }
            ApprovalTimeoutAction::Deny => {
                for planned in batch.calls.iter_mut() {
                    if planned.disposition == Disposition::Pending {
                        planned.disposition = Disposition::Refused {
                            content: "The call was denied: approval timed out. It did not run."
                                .to_owned(),
                        };
                    }
                }
                self.note(now_ms, "approval timed out: undecided calls denied");
                self.advance_if_decided(
                    now_ms,
                    Some("The run was ended: approval timed out.".to_owned()),
                );
            }
        }
    }

    /// Once no call of the batch is pending, the batch moves on as its kind says. `denial`: who
    /// ended the run and why, when the batch was a question that was denied.
    fn advance_if_decided(&mut self, now_ms: i64, denial: Option<String>) {
        if let Phase::AwaitingApproval(batch) = &self.phase
            && batch.pending().next().is_none()
        {
            let Phase::AwaitingApproval(batch) =
                std::mem::replace(&mut self.phase, Phase::Thinking)
            else {
                return;
            };
            let approved = matches!(
                batch.calls.first().map(|c| &c.disposition),
                Some(Disposition::Run { .. })
            );
            match batch.kind {
                BatchKind::Hosts => self.on_hosts_decided(batch, now_ms),
                BatchKind::Tools | BatchKind::Retry => self.phase = Phase::Executing(batch),
                // A question: approved continues (the phase stays Thinking), denied ends the run.
                BatchKind::Question { extend, .. } => match (approved, extend) {
                    (false, extend) => self.finish(
                        now_ms,
                        extend.unwrap_or(TerminationReason::LoopDetected),
                        denial.unwrap_or_else(|| "The run was ended.".to_owned()),
                    ),
                    (true, Some(reason)) => self.extend_limits(reason, now_ms),
                    (true, None) => {
                        self.error_streak = 0;
                        self.note(now_ms, "a human chose to continue the run");
                    }
                },
            }
        }
    }

    /// Calls cut off by a worker failure wait for a human: run again (approve) or skip (deny).
    pub(super) fn ask_about_retries(&mut self, calls: Vec<PlannedCall>, now_ms: i64) {
        let ids: Vec<&str> = calls.iter().map(|c| c.call.id.as_str()).collect();
        self.note(
            now_ms,
            &format!(
                "{} cut off by a worker failure and may have taken effect; policy on_retry = \
                 ask: approve to run again, deny to skip",
                ids.join(", ")
            ),
        );
        for c in &calls {
            self.approval_requested(&c.call, now_ms);
        }
        self.phase = Phase::AwaitingApproval(Batch {
            calls,
            requested_at_ms: now_ms,
            kind: BatchKind::Retry,
            started: Vec::new(),
            done: Vec::new(),
        });
    }

    /// Records that `call` waits for a human (event `approval_requested`).
    pub(super) fn approval_requested(&mut self, call: &ToolCall, now_ms: i64) {
        self.push_event(
            now_ms,
            run_event::Kind::ApprovalRequested(PendingCall {
                call_id: call.id.clone(),
                tool: call.name.clone(),
                arguments: call.arguments.clone(),
                requested_at_ms: now_ms,
            }),
        );
    }

    /// Pauses the run with a question for a human, answered like an approval. `extend`: the
    /// exhausted limit's reason, when approving extends it.
    pub(super) fn ask_question(
        &mut self,
        question: String,
        extend: Option<TerminationReason>,
        now_ms: i64,
    ) {
        let call = ToolCall {
            id: format!("{QUESTION_CALL_PREFIX}{}", self.turn),
            name: QUESTION_TOOL.to_owned(),
            arguments: serde_json::json!({ "question": question }).to_string(),
            ..Default::default()
        };
        self.approval_requested(&call, now_ms);
        self.phase = Phase::AwaitingApproval(Batch {
            calls: vec![PlannedCall {
                call,
                disposition: Disposition::Pending,
            }],
            requested_at_ms: now_ms,
            kind: BatchKind::Question {
                text: question,
                extend,
            },
            started: Vec::new(),
            done: Vec::new(),
        });
    }

    /// Whether limits pause for a human instead of ending the run.
    pub(super) fn ask_on_exhausted(&self) -> bool {
        self.limits().on_exhausted() == baton_proto::limits::OnExhausted::Ask
    }

    /// Adds the starting limit again to the one that was reached.
    fn extend_limits(&mut self, reason: TerminationReason, now_ms: i64) {
        let base = self.base_limits.unwrap_or_default();
        let turn = self.turn;
        let used = self.usage.total_tokens;
        let cost = self.usage.cost_usd;
        let elapsed_s = ((now_ms - self.started_at_ms).max(0) / 1000) as u32;
        let limits = self.spec.limits.get_or_insert_with(Default::default);
        let what = match reason {
            TerminationReason::MaxTurnsExceeded => {
                limits.max_turns = turn + base.max_turns.max(1);
                format!("turns extended to {}", limits.max_turns)
            }
            _ if limits.max_total_tokens > 0 && used >= limits.max_total_tokens => {
                limits.max_total_tokens = used.saturating_add(base.max_total_tokens.max(1));
                format!("token budget extended to {}", limits.max_total_tokens)
            }
            _ if limits.max_cost_usd > 0.0 && cost >= limits.max_cost_usd => {
                let step = if base.max_cost_usd > 0.0 {
                    base.max_cost_usd
                } else {
                    limits.max_cost_usd
                };
                limits.max_cost_usd = cost + step;
                format!("cost budget extended to ${:.2}", limits.max_cost_usd)
            }
            _ => {
                limits.deadline_seconds = elapsed_s.saturating_add(base.deadline_seconds.max(60));
                format!("deadline extended to {} s", limits.deadline_seconds)
            }
        };
        self.note(now_ms, &what);
    }

    pub(super) fn approval_timeout(&self) -> Option<u32> {
        self.spec
            .approval
            .as_ref()
            .map(|p| p.timeout_seconds)
            .filter(|t| *t > 0)
    }
}
