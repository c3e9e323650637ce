//! What `baton fork` reads of the run it forks: its spec (the input of its first segment), its
//! task queue and the tree it started from (the results of `prepare_workspace` and
//! `read_instructions` in that segment's history), and its conversation (query `transcript`,
//! with the items a continued run holds only as stubs read from the blob store, as they are
//! stored: previews stay previews).

use std::time::Duration;

use baton_proto::{Item, PreparedWorkspace, RunSpec, WorkspaceInstructions, item};
use baton_store::{SharedStore, conversation::Conversations};
use baton_workflows::AgentRun;
use temporalio_client::{
    Client, NamespacedClient, WorkflowDescribeOptions, WorkflowHandle, WorkflowQueryOptions,
    grpc::WorkflowService,
};
use temporalio_common::{
    data_converters::SerializationContextData,
    protos::temporal::api::{
        common::v1::{Payloads, WorkflowExecution},
        history::v1::{HistoryEvent, history_event::Attributes},
        workflowservice::v1::GetWorkflowExecutionHistoryRequest,
    },
};

use crate::{
    connect::{handle, interaction_error, short},
    exit::Exit,
};

/// Events read from the start of the source's first segment: its workspace is prepared and
/// its instructions read before the first turn, within the first few workflow tasks.
const START_EVENTS: i32 = 200;
/// How long the source's worker may take to answer its queries.
const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// The run being forked.
pub(crate) struct Source {
    /// Its spec as submitted (the first segment's input, without `continued`).
    pub(crate) spec: RunSpec,
    /// The task queue it runs on.
    pub(crate) task_queue: String,
    /// The tree it started from: (snapshot, git commit); "" when unknown (snapshots off).
    pub(crate) start: (String, String),
    /// Its conversation, every item as the run holds it whole (no stubs left).
    pub(crate) conversation: Vec<Item>,
    /// The head of its stored conversation ("" = nothing stored).
    pub(crate) head: String,
}

/// Reads run `run`, whose conversation is in `store`.
pub(crate) async fn read(client: &Client, run: &str, store: &SharedStore) -> Result<Source, Exit> {
    let h = handle(client, run);
    let desc = h
        .describe(WorkflowDescribeOptions::default())
        .await
        .map_err(|e| interaction_error(run, e))?;
    let latest = history_start(client, run, desc.run_id(), 1).await?;
    let started = started(&latest).ok_or_else(|| unreadable(run, "it has no start event"))?;
    let task_queue = started
        .task_queue
        .as_ref()
        .map(|q| q.name.clone())
        .unwrap_or_default();
    let first_run = match started.first_execution_run_id.as_str() {
        "" => desc.run_id().to_owned(),
        id => id.to_owned(),
    };
    let first = history_start(client, run, &first_run, START_EVENTS).await?;
    let spec_payloads = started_input(&first).ok_or_else(|| unreadable(run, "no input"))?;
    let spec: RunSpec = decode(client, spec_payloads)
        .await
        .map_err(|e| unreadable(run, &format!("its input is not a run spec ({e})")))?;
    let start = start_tree(client, &first).await;
    let (mut conversation, head) = conversation(&h, run).await?;
    resolve_stubs(&mut conversation, &head, store, run).await?;
    Ok(Source {
        spec: RunSpec {
            continued: None,
            ..spec
        },
        task_queue,
        start,
        conversation,
        head,
    })
}

/// The first `events` events of execution `run_id` of workflow `id`.
async fn history_start(
    client: &Client,
    id: &str,
    run_id: &str,
    events: i32,
) -> Result<Vec<HistoryEvent>, Exit> {
    let mut grpc = client.clone();
    let request = GetWorkflowExecutionHistoryRequest {
        namespace: client.namespace(),
        execution: Some(WorkflowExecution {
            workflow_id: id.to_owned(),
            run_id: run_id.to_owned(),
        }),
        maximum_page_size: events,
        ..Default::default()
    };
    let response =
        WorkflowService::get_workflow_execution_history(&mut grpc, tonic::Request::new(request))
            .await
            .map_err(|e| {
                Exit::infra(format!(
                    "cannot read the history of {id}: {}",
                    short(e.message())
                ))
            })?;
    Ok(response
        .into_inner()
        .history
        .map(|h| h.events)
        .unwrap_or_default())
}

fn started(
    events: &[HistoryEvent],
) -> Option<
    &temporalio_common::protos::temporal::api::history::v1::WorkflowExecutionStartedEventAttributes,
> {
    match &events.first()?.attributes {
        Some(Attributes::WorkflowExecutionStartedEventAttributes(a)) => Some(a),
        _ => None,
    }
}

fn started_input(events: &[HistoryEvent]) -> Option<&Payloads> {
    started(events)?.input.as_ref()
}

fn unreadable(run: &str, why: &str) -> Exit {
    Exit::usage(format!(
        "run {run} cannot be forked: {why}; is it a baton run (workflow type AgentRun)?"
    ))
}

/// The first payload of `payloads`, decoded with the client's data converter (the codec's
/// keys, when payloads are encrypted).
async fn decode<T: serde::de::DeserializeOwned + Send + 'static>(
    client: &Client,
    payloads: &Payloads,
) -> Result<T, String> {
    let payload = payloads
        .payloads
        .first()
        .ok_or_else(|| "no payload".to_owned())?;
    client
        .data_converter()
        .from_payload::<T>(&SerializationContextData::None, payload.clone())
        .await
        .map_err(|e| e.to_string())
}

/// The tree a run started from, by the rule of its machine: the prepared workspace (a
/// source), else the snapshot `read_instructions` took of its workspace; ("", "") when neither
/// is in `events` (snapshots off, or a run that never got that far).
async fn start_tree(client: &Client, events: &[HistoryEvent]) -> (String, String) {
    let result_of = |activity: &str| {
        let scheduled = events.iter().find_map(|e| match &e.attributes {
            Some(Attributes::ActivityTaskScheduledEventAttributes(a))
                if a.activity_type.as_ref().is_some_and(|t| t.name == activity) =>
            {
                Some(e.event_id)
            }
            _ => None,
        })?;
        events.iter().find_map(|e| match &e.attributes {
            Some(Attributes::ActivityTaskCompletedEventAttributes(a))
                if a.scheduled_event_id == scheduled =>
            {
                a.result.clone()
            }
            _ => None,
        })
    };
    if let Some(result) = result_of("prepare_workspace")
        && let Ok(prepared) = decode::<PreparedWorkspace>(client, &result).await
    {
        return (prepared.snapshot, prepared.commit);
    }
    if let Some(result) = result_of("read_instructions")
        && let Ok(read) = decode::<WorkspaceInstructions>(client, &result).await
    {
        return (read.snapshot, String::new());
    }
    (String::new(), String::new())
}

/// The run's conversation (queries `transcript` and `stored`) and its stored head.
async fn conversation(
    h: &WorkflowHandle<Client, AgentRun>,
    run: &str,
) -> Result<(Vec<Item>, String), Exit> {
    let no_worker = || {
        Exit::infra(format!(
            "no worker answered for {run} within {} s; the conversation to fork is read from a \
             worker: start one (baton-worker) on the run's task queue and retry",
            QUERY_TIMEOUT.as_secs()
        ))
    };
    let failed = |e: String| {
        Exit::infra(format!(
            "cannot read the conversation of {run}: {}",
            short(&e)
        ))
    };
    let transcript = h.query(AgentRun::transcript, (), WorkflowQueryOptions::default());
    let items = tokio::time::timeout(QUERY_TIMEOUT, transcript)
        .await
        .map_err(|_| no_worker())?
        .map_err(|e| failed(e.to_string()))?;
    let stored = h.query(AgentRun::stored, (), WorkflowQueryOptions::default());
    let stored = tokio::time::timeout(QUERY_TIMEOUT, stored)
        .await
        .map_err(|_| no_worker())?
        .map_err(|e| failed(e.to_string()))?;
    Ok((items, stored.head))
}

/// The error for a stored conversation the CLI cannot read.
pub(crate) fn store_error(run: &str, e: impl std::fmt::Display) -> Exit {
    Exit::usage(format!(
        "cannot read the stored conversation of {run} from the blob store ({e}); a fork \
         starts from it, so set BATON_STORE__DIR (or BATON_STORE__S3__*) to the workers' store"
    ))
}

/// Replaces the stubs of a continued run's conversation with the items stored under `head`.
async fn resolve_stubs(
    items: &mut [Item],
    head: &str,
    store: &SharedStore,
    run: &str,
) -> Result<(), Exit> {
    let is_stub = |i: &Item| matches!(i.kind, Some(item::Kind::Stub(_)));
    if !items.iter().any(is_stub) {
        return Ok(());
    }
    let stored = Conversations::new(store.clone())
        .load(head)
        .await
        .map_err(|e| store_error(run, e))?;
    for (n, slot) in items.iter_mut().enumerate() {
        if is_stub(slot)
            && let Some(full) = stored.get(n)
        {
            *slot = full.clone();
        }
    }
    Ok(())
}
