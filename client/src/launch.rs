//! Starting a run and what follows, for `submit` and `fork`: the input kept small enough for
//! history, the workflow started with baton's options, then the run id printed, or the run
//! followed (on a terminal) and waited for.

use std::{
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

use baton_proto::{RunPriority, RunSpec};
use baton_workflows::AgentRun;
use temporalio_client::{
    Client, WorkflowDescribeOptions, WorkflowIdReusePolicy, WorkflowStartOptions,
    errors::WorkflowStartError,
};
use temporalio_common::Priority;

use crate::{
    connect::short,
    exit::{self, Exit},
    inspect, json, render,
    style::Style,
    waiting::{self, Waited},
    watch::{self, FollowOptions},
};

/// Workflow task timeout of a run: low, so a run whose worker died moves on in seconds.
pub(crate) const WORKFLOW_TASK_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest workflow input baton submits (history payloads stay under 256 KiB).
pub(crate) const MAX_INPUT_BYTES: usize = 256 * 1024;
/// A script makes the input pass this, it goes to the blob store instead.
const INLINE_SCRIPT_BYTES: usize = 64 * 1024;

/// How a started run is reported and followed.
pub(crate) struct Launch {
    pub(crate) waiting: crate::cli::WaitArgs,
    pub(crate) json: bool,
    /// What started, for people (stderr), e.g. "submitted run r1 to task queue 'baton'".
    pub(crate) started: String,
    /// Without `--wait`, the `--json` object saying so (one line).
    pub(crate) started_json: String,
}

/// A new run id.
pub(crate) fn new_run_id() -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("run-{}", &id[..12])
}

/// Size of the run's input as the workflow receives it (JSON).
pub(crate) fn input_bytes(spec: &RunSpec) -> usize {
    serde_json::to_vec(spec).map_or(usize::MAX, |v| v.len())
}

/// Keeps the run's input small enough for history: a large script goes to the blob store
/// (the workers load it by id); a task still too large is refused with what to do instead.
pub(crate) async fn fit_in_history(mut spec: RunSpec) -> Result<RunSpec, Exit> {
    if input_bytes(&spec) > INLINE_SCRIPT_BYTES
        && let Some(model) = spec.model.as_mut()
        && let Some(script) = model.script.take()
    {
        let store = crate::blobs::open().map_err(|e| {
            Exit::usage(format!(
                "the script is too large to send inline and the blob store cannot be opened \
                 ({e}); set BATON_STORE__DIR (or BATON_STORE__S3__*) to the workers' store"
            ))
        })?;
        let id = baton_store::put_json(store.as_ref(), &script)
            .await
            .map_err(|e| Exit::infra(format!("cannot store the script: {e}")))?;
        model.script_ref = id.to_string();
    }
    let bytes = input_bytes(&spec);
    if bytes > MAX_INPUT_BYTES {
        return Err(Exit::usage(format!(
            "the run's input is {} KiB; workflow inputs are limited to {} KiB. Put long \
             material in a file in the workspace and refer to it in the prompt",
            bytes / 1024,
            MAX_INPUT_BYTES / 1024
        )));
    }
    Ok(spec)
}

/// How a started run's priority came out (`submit --priority`/`--fairness-key`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PriorityOutcome {
    pub(crate) asked: RunPriority,
    /// The server keeps the priority with the run (its description echoes it), so the run's
    /// tasks and every activity it starts carry it.
    pub(crate) applied: bool,
}

impl PriorityOutcome {
    /// What a person reads on stderr after the start.
    pub(crate) fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.asked.priority_key != 0 {
            parts.push(format!("priority {}", self.asked.priority_key));
        }
        if !self.asked.fairness_key.is_empty() {
            parts.push(format!("fairness key '{}'", self.asked.fairness_key));
        }
        if self.asked.fairness_weight != 0.0 {
            parts.push(format!("weight {}", self.asked.fairness_weight));
        }
        if self.applied {
            format!(
                "{} (kept by the server; fairness between keys needs a server with \
                 matching.enableFairness)",
                parts.join(", ")
            )
        } else {
            format!(
                "warning: the server did not keep {}: it predates task priorities (Temporal \
                 1.27); the run is queued in arrival order",
                parts.join(", ")
            )
        }
    }
}

/// The Temporal priority of `asked`.
pub(crate) fn temporal_priority(asked: &RunPriority) -> Priority {
    Priority::builder()
        .maybe_priority_key((asked.priority_key != 0).then_some(asked.priority_key))
        .maybe_fairness_key((!asked.fairness_key.is_empty()).then(|| asked.fairness_key.clone()))
        .maybe_fairness_weight((asked.fairness_weight != 0.0).then_some(asked.fairness_weight))
        .build()
}

/// How a start went ([`start_new`]).
pub(crate) enum Started {
    /// The run started, with how its priority came out (when it asked for one).
    New(Option<PriorityOutcome>),
    /// A run with that id exists (or, under `RejectDuplicate`, ever existed): nothing started.
    Existed,
}

/// Starts run `run_id` of `spec` on `task_queue`, with the spec's priority, if it has one
/// (then says whether the server kept it); a run that has the id already is a usage error.
pub(crate) async fn start(
    client: &Client,
    spec: RunSpec,
    run_id: &str,
    task_queue: &str,
) -> Result<Option<PriorityOutcome>, Exit> {
    match start_new(
        client,
        spec,
        run_id,
        task_queue,
        WorkflowIdReusePolicy::Unspecified,
    )
    .await?
    {
        Started::New(priority) => Ok(priority),
        Started::Existed => Err(Exit::usage(format!(
            "a run with id '{run_id}' already exists; choose another --id or omit it"
        ))),
    }
}

/// [`start`] under the id reuse policy `reuse`, saying when the id was taken instead of
/// failing (`baton eval` starts each of its runs at most once with `RejectDuplicate`).
pub(crate) async fn start_new(
    client: &Client,
    spec: RunSpec,
    run_id: &str,
    task_queue: &str,
    reuse: WorkflowIdReusePolicy,
) -> Result<Started, Exit> {
    // The SDK does not pass the static summary through the codec: with encryption on, the task
    // must not appear there in plain text.
    let summary = (!crate::connect::encrypting()).then(|| render::one_line(&spec.task, 120));
    let asked = spec.priority.clone();
    let options = WorkflowStartOptions::new(task_queue.to_owned(), run_id.to_owned())
        .task_timeout(WORKFLOW_TASK_TIMEOUT)
        .id_reuse_policy(reuse)
        .maybe_static_summary(summary)
        .priority(asked.as_ref().map(temporal_priority).unwrap_or_default())
        .build();
    match client.start_workflow(AgentRun::run, spec, options).await {
        Ok(_) => {}
        Err(WorkflowStartError::AlreadyStarted { .. }) => return Ok(Started::Existed),
        Err(e) => {
            return Err(Exit::infra(format!(
                "cannot start the run: {}",
                short(&e.to_string())
            )));
        }
    }
    let Some(asked) = asked else {
        return Ok(Started::New(None));
    };
    let applied = priority_kept(client, run_id, &asked).await;
    Ok(Started::New(Some(PriorityOutcome { asked, applied })))
}

/// Whether the server's description of run `run_id` carries the priority it was started with
/// (a server without task priorities drops the field).
async fn priority_kept(client: &Client, run_id: &str, asked: &RunPriority) -> bool {
    let Ok(description) = crate::connect::handle(client, run_id)
        .describe(WorkflowDescribeOptions::default())
        .await
    else {
        return false;
    };
    let kept = description
        .raw_description
        .workflow_execution_info
        .and_then(|info| info.priority)
        .unwrap_or_default();
    (asked.priority_key == 0 || u32::try_from(kept.priority_key).ok() == Some(asked.priority_key))
        && kept.fairness_key == asked.fairness_key
        && (asked.fairness_weight == 0.0
            || (kept.fairness_weight - asked.fairness_weight).abs() < 1e-6)
}

/// After the start: prints the run id (and how to follow it), or with `--wait` follows the
/// run on a terminal and prints its result (exit code as for `result`).
pub(crate) async fn follow(client: &Client, run_id: &str, how: &Launch) -> Result<i32, Exit> {
    let h = crate::connect::handle(client, run_id);
    if !how.waiting.wait {
        if how.json {
            println!("{}", how.started_json);
        } else {
            println!("{run_id}");
            eprintln!(
                "{}\n  follow:  baton watch {run_id}\n  status:  baton status {run_id}\n  result:  baton result {run_id} --wait",
                how.started
            );
        }
        return Ok(exit::COMPLETED);
    }
    // On a terminal (and without --json), show the live view of `baton watch` while waiting;
    // --json prints exactly one JSON object on stdout, whatever happens.
    let live = !how.json && std::io::IsTerminal::is_terminal(&std::io::stdout());
    let seen_turn = AtomicU32::new(0);
    let wait = async {
        if live {
            eprintln!(
                "{}; following it (Ctrl-C detaches, the run goes on)",
                how.started
            );
            let options = FollowOptions {
                since_turn: 0,
                json: false,
                show_end: false,
                style: Style::detect(),
                children: false,
            };
            watch::follow(&h, run_id, options, &seen_turn).await?;
        }
        inspect::wait_result(&h, run_id).await
    };
    // Ctrl-C detaches like a --wait-timeout (the futures, and so the spinner line, are gone
    // once the wait ends).
    match waiting::until_detached(how.waiting.wait_timeout, wait).await {
        Waited::Done(result) => inspect::print_result(&result?, how.json),
        Waited::Detached if !how.json => {
            eprintln!(
                "{}",
                waiting::detached(run_id, seen_turn.load(Ordering::Relaxed))
            );
            Ok(exit::WAIT_TIMEOUT)
        }
        Waited::TimedOut | Waited::Detached => {
            let snap = inspect::snapshot(&h, run_id).await?;
            if how.json {
                json::print(&json::StoppedWaiting::new(run_id, Some(&snap.status)))?;
            } else {
                eprintln!(
                    "run {run_id} is still going ({}); it continues without you.\n  {}",
                    snap.status.state().as_str_name(),
                    if snap.status.pending.is_empty() {
                        format!("follow it with: baton watch {run_id}")
                    } else {
                        format!("it waits for approval: baton status {run_id}")
                    }
                );
            }
            Ok(exit::WAIT_TIMEOUT)
        }
    }
}
