//! Who sent an approval decision: the Temporal client identity of the signal `approval` or
//! update `approve`, as the server recorded it in the run's history (not the self-declared
//! `approver` field).
//!
//! The SDK hands a workflow's signal and update handlers only their input, so two
//! interceptors carry the identity across:
//! - [`SenderRecorder`] (a worker interceptor) reads each activation before the workflow sees
//!   it and notes the identity of every `approval` signal (in order) and `approve` update (by
//!   update id) of the run;
//! - [`SenderStamp`] (a workflow interceptor) writes that identity into the decision's
//!   `identity` field, overwriting whatever the sender put there, before the validator and
//!   the handler run.
//!
//! The identity comes from the activation, which is built from history, so a replay stamps
//! the same identity again: the workflow stays deterministic.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use baton_workflows::workflow::{APPROVAL_SIGNAL, APPROVE_UPDATE};
use serde_json::Value;
use temporalio_common::protos::coresdk::workflow_activation::{
    WorkflowActivation, workflow_activation_job::Variant,
};
use temporalio_sdk::{
    interceptors::WorkerInterceptor,
    workflow_interceptors::{
        HandleSignalInput, HandleSignalResult, HandleUpdateInput, HandleUpdateResult,
        SyncWorkflowInterceptorContext, ValidateUpdateInput, ValidateUpdateResult,
        WorkflowInterceptor, WorkflowInterceptorConstructor, WorkflowInterceptorContext,
        WorkflowInterceptorFuture, WorkflowNext,
    },
};

/// Identities seen in activations and not yet stamped, per run.
#[derive(Debug, Default)]
pub(crate) struct Senders {
    runs: Mutex<HashMap<String, RunSenders>>,
}

#[derive(Debug, Default)]
struct RunSenders {
    /// Identities of `approval` signals, in delivery order.
    signals: VecDeque<String>,
    /// Identities of `approve` updates, by update id.
    updates: HashMap<String, String>,
}

impl Senders {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, RunSenders>> {
        self.runs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes the senders of the decisions in `activation`; forgets a run leaving the cache.
    pub(crate) fn record(&self, activation: &WorkflowActivation) {
        let mut runs = self.lock();
        for job in &activation.jobs {
            match &job.variant {
                Some(Variant::SignalWorkflow(s)) if s.signal_name == APPROVAL_SIGNAL => runs
                    .entry(activation.run_id.clone())
                    .or_default()
                    .signals
                    .push_back(s.identity.clone()),
                Some(Variant::DoUpdate(u)) if u.name == APPROVE_UPDATE => {
                    let identity = u.meta.as_ref().map(|m| m.identity.clone());
                    runs.entry(activation.run_id.clone())
                        .or_default()
                        .updates
                        .insert(u.id.clone(), identity.unwrap_or_default());
                }
                Some(Variant::RemoveFromCache(_)) => {
                    runs.remove(&activation.run_id);
                }
                _ => {}
            }
        }
    }

    fn next_signal(&self, run_id: &str) -> String {
        let mut runs = self.lock();
        let Some(run) = runs.get_mut(run_id) else {
            return String::new();
        };
        let identity = run.signals.pop_front().unwrap_or_default();
        if run.signals.is_empty() && run.updates.is_empty() {
            runs.remove(run_id);
        }
        identity
    }

    fn update(&self, run_id: &str, update_id: &str, done: bool) -> String {
        let mut runs = self.lock();
        let Some(run) = runs.get_mut(run_id) else {
            return String::new();
        };
        let identity = if done {
            run.updates.remove(update_id)
        } else {
            run.updates.get(update_id).cloned()
        };
        if run.signals.is_empty() && run.updates.is_empty() {
            runs.remove(run_id);
        }
        identity.unwrap_or_default()
    }
}

/// Sets `decision["identity"]` to `identity` (the decision is a JSON object; anything else is
/// left for the handler to reject).
fn stamp(decision: Option<&mut Value>, identity: String) {
    if let Some(Value::Object(map)) = decision {
        map.insert("identity".to_owned(), Value::String(identity));
    }
}

/// The worker interceptor that feeds [`Senders`].
pub(crate) struct SenderRecorder(pub(crate) Arc<Senders>);

#[async_trait::async_trait(?Send)]
impl WorkerInterceptor for SenderRecorder {
    async fn on_workflow_activation(
        &self,
        activation: &WorkflowActivation,
    ) -> Result<(), anyhow::Error> {
        self.0.record(activation);
        Ok(())
    }
}

/// The workflow interceptor that stamps decisions with their sender's identity.
pub(crate) struct SenderStamp {
    senders: Arc<Senders>,
}

impl SenderStamp {
    /// The constructor to register on the worker (`WorkerOptions::workflow_interceptor`).
    pub(crate) fn constructor(senders: Arc<Senders>) -> WorkflowInterceptorConstructor {
        WorkflowInterceptorConstructor::new(move |_| SenderStamp {
            senders: senders.clone(),
        })
    }
}

impl WorkflowInterceptor for SenderStamp {
    fn handle_signal<'a>(
        &'a self,
        ctx: WorkflowInterceptorContext,
        mut input: HandleSignalInput,
        next: WorkflowNext<
            'a,
            HandleSignalInput,
            WorkflowInterceptorFuture<'a, HandleSignalResult>,
        >,
    ) -> WorkflowInterceptorFuture<'a, HandleSignalResult> {
        if input.name() == APPROVAL_SIGNAL {
            let identity = self.senders.next_signal(ctx.run_id());
            stamp(input.input_mut::<Value>(), identity);
        }
        next.run(input)
    }

    fn validate_update(
        &self,
        ctx: SyncWorkflowInterceptorContext,
        mut input: ValidateUpdateInput,
        next: WorkflowNext<'_, ValidateUpdateInput, ValidateUpdateResult>,
    ) -> ValidateUpdateResult {
        if input.name() != APPROVE_UPDATE {
            return next.run(input);
        }
        let (run_id, update_id) = (ctx.run_id().to_owned(), input.id().to_owned());
        let identity = self.senders.update(&run_id, &update_id, false);
        stamp(input.input_mut::<Value>(), identity);
        let result = next.run(input);
        if result.is_err() {
            // A rejected update never reaches its handler.
            self.senders.update(&run_id, &update_id, true);
        }
        result
    }

    fn handle_update<'a>(
        &'a self,
        ctx: WorkflowInterceptorContext,
        mut input: HandleUpdateInput,
        next: WorkflowNext<
            'a,
            HandleUpdateInput,
            WorkflowInterceptorFuture<'a, HandleUpdateResult>,
        >,
    ) -> WorkflowInterceptorFuture<'a, HandleUpdateResult> {
        if input.name() == APPROVE_UPDATE {
            let identity = self.senders.update(ctx.run_id(), input.id(), true);
            stamp(input.input_mut::<Value>(), identity);
        }
        next.run(input)
    }
}
