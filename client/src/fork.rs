//! `baton fork RUN --at-turn N [--id NEW] [--instructions TEXT]`: a new run whose conversation
//! is RUN's up to the end of its turn N and whose workspace is RUN's then, so another
//! instruction can be tried from a known state without paying for the turns before it again.
//!
//! The conversation goes by reference ([`ForkSource`]): the segment of RUN's stored chain that
//! holds the most of it (read from the blob store, like the workers'), the few items after it
//! inline, and the rest held as stubs (the model activity loads them), so the fork's history
//! starts small. The workspace is restored from the last snapshot RUN's tool calls took by turn
//! N (else the tree RUN started from) through the spec's `workspace`; the fork's change set is
//! against the tree RUN started from. The spec is RUN's own, with the fork's labels, limits
//! and instructions.

use std::borrow::Cow;

use baton_core::{fork, machine::DEFAULT_MAX_TURNS};
use baton_proto::{
    ConversationRef, ForkSource, GitSource, RunSpec, SnapshotSource, WorkspaceSource,
    workspace_source,
};
use baton_store::conversation::Conversations;
use temporalio_client::{Client, WorkflowDescribeOptions, errors::WorkflowInteractionError};

use crate::{
    blobs,
    cli::ForkArgs,
    connect::{connect, handle, short},
    exit::Exit,
    fork_source::{self, Source, store_error},
    json,
    launch::{self, Launch, MAX_INPUT_BYTES},
};

/// The label naming the run a fork was made from.
pub(crate) const FORK_OF_LABEL: &str = "baton.fork_of";

/// `baton fork`. Output as `submit`'s: the run id (`--json`: [`json::Forked`]), or with
/// `--wait` its result.
pub(crate) async fn run(args: ForkArgs) -> Result<i32, Exit> {
    let store = blobs::open().map_err(|e| store_error(&args.run, e))?;
    let client = connect().await?;
    let run_id = match &args.id {
        Some(id) => {
            ensure_new(&client, id).await?;
            id.clone()
        }
        None => launch::new_run_id(),
    };
    let source = fork_source::read(&client, &args.run, &store).await?;
    let spec = fork_spec(&args, &source, &Conversations::new(store)).await?;
    let bytes = launch::input_bytes(&spec);
    if bytes > MAX_INPUT_BYTES {
        return Err(Exit::usage(format!(
            "the fork's input would be {} KiB (workflow inputs are limited to {} KiB): the \
             items of turn {} after the stored part of {}'s conversation are too large to \
             carry; fork at another turn",
            bytes / 1024,
            MAX_INPUT_BYTES / 1024,
            args.at_turn,
            args.run
        )));
    }
    let (items, stored) = spec
        .fork
        .as_ref()
        .and_then(|f| f.conversation.as_ref())
        .map(|c| (c.stored_items as usize + c.added.len(), c.stored_items))
        .unwrap_or_default();
    let spec = launch::fit_in_history(spec).await?;
    let task_queue = match (&args.task_queue, source.task_queue.as_str()) {
        (Some(queue), _) => queue.clone(),
        (None, "") => baton_workflows::DEFAULT_TASK_QUEUE.to_owned(),
        (None, queue) => queue.to_owned(),
    };
    if let Some(p) = launch::start(&client, spec, &run_id, &task_queue).await?
        && !p.applied
    {
        eprintln!("{}", p.describe());
    }
    let how = Launch {
        waiting: args.waiting,
        json: args.json,
        started: format!(
            "forked run {} at turn {} as run {run_id} on task queue '{task_queue}' (a \
             conversation of {items} items, {stored} of them by reference)",
            args.run, args.at_turn
        ),
        started_json: json::line(&json::Forked {
            run_id: Cow::from(&run_id),
            status: Cow::from("RUNNING"),
            task_queue: Cow::from(&task_queue),
            fork_of: Cow::from(&args.run),
            at_turn: args.at_turn,
        })?,
    };
    launch::follow(&client, &run_id, &how).await
}

/// Refuses an id some run already has (ended ones too: a fork never reuses a workspace).
async fn ensure_new(client: &Client, id: &str) -> Result<(), Exit> {
    match handle(client, id)
        .describe(WorkflowDescribeOptions::default())
        .await
    {
        Ok(desc) => Err(Exit::usage(format!(
            "a run with id '{id}' already exists ({:?}); a fork is a new run: choose another \
             --id or omit it",
            desc.status()
        ))),
        Err(WorkflowInteractionError::NotFound(_)) => Ok(()),
        Err(e) => Err(Exit::infra(format!(
            "cannot check whether run '{id}' exists: {}",
            short(&e.to_string())
        ))),
    }
}

/// The fork's spec: the source's, with the fork source, its workspace, labels and limits.
pub(crate) async fn fork_spec(
    args: &ForkArgs,
    source: &Source,
    conversations: &Conversations,
) -> Result<RunSpec, Exit> {
    let run = &args.run;
    let end = fork::turn_end(&source.conversation, args.at_turn)
        .map_err(|e| Exit::usage(format!("cannot fork {run}: {e}")))?;
    let prefix = &source.conversation[..end];
    let instructions = args.instructions.clone().unwrap_or_default();
    if instructions.trim().is_empty() && fork::ends_with_reply(prefix) {
        return Err(Exit::usage(format!(
            "cannot fork {run}: turn {} is its last reply (the model asked for nothing more), so \
             the fork would have nothing to answer; say what it should do with --instructions \
             TEXT",
            args.at_turn
        )));
    }
    let (head, stored) = conversations
        .segment_within(&source.head, end as u32)
        .await
        .map_err(|e| store_error(run, e))?
        .unwrap_or_default();
    let mut limits = source.spec.limits.unwrap_or_default();
    if let Some(max) = args.max_turns {
        limits.max_turns = max;
    }
    let max_turns = match limits.max_turns {
        0 => DEFAULT_MAX_TURNS,
        n => n,
    };
    if args.at_turn >= max_turns {
        return Err(Exit::usage(format!(
            "cannot fork {run} at turn {}: its limit is {max_turns} turns in all, so the fork \
             could not call the model once; raise it with --max-turns",
            args.at_turn
        )));
    }
    let snapshot = fork::workspace_at(prefix)
        .unwrap_or(&source.start.0)
        .to_owned();
    // A fork of a fork hands its changes back against the first run's tree.
    let (base_snapshot, base_commit) = match &source.spec.fork {
        Some(f) => (f.base_snapshot.clone(), f.base_commit.clone()),
        None => source.start.clone(),
    };
    let mut labels = source.spec.labels.clone();
    labels.insert(
        "submitter".to_owned(),
        crate::connect::local_user(&|k| std::env::var(k).ok()),
    );
    labels.insert(FORK_OF_LABEL.to_owned(), run.clone());
    labels.extend(args.labels.iter().cloned());
    Ok(RunSpec {
        workspace: workspace(source, &snapshot, run, args.at_turn),
        labels,
        limits: Some(limits),
        continued: None,
        fork: Some(ForkSource {
            run_id: run.clone(),
            at_turn: args.at_turn,
            conversation: Some(ConversationRef {
                head,
                stored_items: stored,
                added: prefix[stored as usize..].to_vec(),
            }),
            held: fork::held(prefix, stored as usize),
            snapshot,
            base_snapshot,
            base_commit,
            instructions,
        }),
        ..source.spec.clone()
    })
}

/// Where the fork's workspace comes from: the snapshot at the turn (with the source's git
/// repository, so a delivery it asked for still has somewhere to go); without one, the
/// source's own source.
fn workspace(source: &Source, snapshot: &str, run: &str, at_turn: u32) -> Option<WorkspaceSource> {
    if snapshot.is_empty() {
        return source.spec.workspace.clone();
    }
    let git: Option<GitSource> = match source
        .spec
        .workspace
        .as_ref()
        .and_then(|w| w.source.as_ref())
    {
        Some(workspace_source::Source::Git(g)) => Some(g.clone()),
        Some(workspace_source::Source::Snapshot(s)) => s.git.clone(),
        None => None,
    };
    Some(WorkspaceSource {
        source: Some(workspace_source::Source::Snapshot(SnapshotSource {
            id: snapshot.to_owned(),
            commit: String::new(),
            from_run: run.to_owned(),
            origin: format!("fork of {run} at turn {at_turn}"),
            git,
        })),
    })
}
