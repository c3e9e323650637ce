//! A call's whole arguments (security review #9b): arguments over the workers'
//! `[history] inline_bytes` (1 KiB) are kept in the blob store and the run's history holds
//! them cut (long strings but `command`/`path` to 200 bytes), which is all `PendingCall`
//! carries. An approver must not approve the rest blind: `baton show RUN CALL_ID` prints
//! them whole, `pending` says when they are cut (and `--json` gives them whole), and the
//! approval prompt shows them whole.
//!
//! Where they are: the call in the run's conversation (query `transcript`, so a worker must
//! answer; older items of a continued run under query `stored`'s head) names its
//! `arguments_ref`, read from the blob store the CLI is configured for (like the workers').

use std::borrow::Cow;

use std::{collections::BTreeMap, time::Duration};

use baton_proto::{Item, ToolCall, item};
use baton_store::{BlobId, conversation::Conversations};
use baton_workflows::AgentRun;
use temporalio_client::{Client, WorkflowHandle, WorkflowQueryOptions};

use crate::{
    ask, blobs,
    cli::ShowArgs,
    connect::{connect, handle, short},
    exit::{self, Exit},
    inspect, json,
    safe_text::escape_line,
};

/// How long a worker may take to answer the transcript query.
const QUERY_BUDGET: Duration = Duration::from_secs(10);

/// What `shorten_arguments` (store `inline.rs`) appends to a string it cut.
const CUT_MARKER: &str = " bytes in all, kept in the blob store]";

/// A call's arguments as the model wrote them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Whole {
    pub(crate) tool: String,
    pub(crate) arguments: String,
    /// The run's history keeps them cut; they were read from the blob store.
    pub(crate) cut_in_history: bool,
}

/// Whether a pending call's `arguments` may be the cut form: a string in it carries the cut
/// marker, or it is not JSON (non-JSON arguments are cut without a marker). A false "yes"
/// only costs a look-up.
pub(crate) fn looks_cut(arguments: &str) -> bool {
    arguments.contains(CUT_MARKER) || serde_json::from_str::<serde_json::Value>(arguments).is_err()
}

/// The line telling a reader that arguments are cut and how to see them whole.
pub(crate) fn cut_note(run: &str, call_id: &str) -> String {
    format!(
        "(arguments cut in the run's history; see them whole: baton show {} {})",
        crate::safe_text::escape_line(run),
        crate::safe_text::escape_line(call_id)
    )
}

/// The whole arguments of each of `ids` (calls of run `run`): found in the run's
/// conversation and, when kept by reference, read from the blob store. `Err` when the
/// conversation cannot be read at all; per call `Err` with why (not in the conversation,
/// blob store unreadable).
pub(crate) async fn whole_arguments(
    h: &WorkflowHandle<Client, AgentRun>,
    run: &str,
    ids: &[&str],
) -> Result<BTreeMap<String, Result<Whole, String>>, String> {
    let query = h.query(AgentRun::transcript, (), WorkflowQueryOptions::default());
    let items = match tokio::time::timeout(QUERY_BUDGET, query).await {
        Ok(Ok(items)) => items,
        Ok(Err(e)) => {
            return Err(format!(
                "cannot read the conversation of {run}: {}",
                short(&e.to_string())
            ));
        }
        Err(_) => {
            return Err(format!(
                "no worker answered for {run} within {} s (the conversation naming the \
                 arguments is read from a worker): start one on the run's task queue and retry",
                QUERY_BUDGET.as_secs()
            ));
        }
    };
    let mut calls = calls_in(&items);
    let missing = ids.iter().any(|id| !calls.contains_key(*id));
    let stubs = items
        .iter()
        .any(|i| matches!(i.kind, Some(item::Kind::Stub(_))));
    if missing && stubs {
        // Older items of a continued run are in the blob store.
        if let Ok(stored) = h
            .query(AgentRun::stored, (), WorkflowQueryOptions::default())
            .await
            && let Ok(store) = blobs::open()
            && let Ok(older) = Conversations::new(store).load(&stored.head).await
        {
            for (id, call) in calls_in(&older) {
                calls.entry(id).or_insert(call);
            }
        }
    }
    let mut store = None;
    let mut out = BTreeMap::new();
    for id in ids {
        let whole = match calls.get(*id) {
            None => Err(format!("run {run}'s conversation has no call {id}")),
            Some(call) if call.arguments_ref.is_empty() => Ok(Whole {
                tool: call.name.clone(),
                arguments: call.arguments.clone(),
                cut_in_history: false,
            }),
            Some(call) => read(&mut store, call).await.map(|arguments| Whole {
                tool: call.name.clone(),
                arguments,
                cut_in_history: true,
            }),
        };
        out.insert((*id).to_owned(), whole);
    }
    Ok(out)
}

/// `baton show RUN CALL_ID`: the call's whole arguments, from the conversation and the blob
/// store; a call the conversation does not hold (baton's own questions, `baton.allow_host`)
/// from the run's pending calls, which are never cut.
pub(crate) async fn show(args: ShowArgs) -> Result<i32, Exit> {
    let client = connect().await?;
    let h = handle(&client, &args.run);
    let snap = inspect::snapshot(&h, &args.run).await?;
    let found = whole_arguments(&h, &args.run, &[args.call_id.as_str()])
        .await
        .and_then(|mut all| {
            all.remove(&args.call_id)
                .unwrap_or_else(|| Err(format!("no call {}", args.call_id)))
        });
    let whole = match found {
        Ok(whole) => whole,
        Err(why) => match snap
            .status
            .pending
            .iter()
            .find(|p| p.call_id == args.call_id)
        {
            Some(p) if !looks_cut(&p.arguments) => Whole {
                tool: p.tool.clone(),
                arguments: p.arguments.clone(),
                cut_in_history: false,
            },
            Some(_) => {
                return Err(Exit::infra(format!(
                    "the arguments of {} are cut in run {}'s history and the whole could not \
                     be read: {why}",
                    escape_line(&args.call_id),
                    escape_line(&args.run)
                )));
            }
            None => {
                return Err(Exit::usage(format!(
                    "{why}; `baton pending` lists the calls awaiting a decision, `baton \
                     transcript {}` every call",
                    escape_line(&args.run)
                )));
            }
        },
    };
    if args.json {
        json::print(&json::Shown {
            run_id: Cow::from(&args.run),
            call_id: Cow::from(&args.call_id),
            tool: Cow::from(&whole.tool),
            arguments: Cow::from(&whole.arguments),
            bytes: whole.arguments.len(),
            cut_in_history: whole.cut_in_history,
        })?;
        return Ok(exit::COMPLETED);
    }
    println!(
        "call {} of run {}: {}, {} bytes of arguments{}",
        escape_line(&args.call_id),
        escape_line(&args.run),
        escape_line(&whole.tool),
        whole.arguments.len(),
        if whole.cut_in_history {
            " (whole, from the blob store; the run's history keeps them cut)"
        } else {
            ""
        }
    );
    println!(
        "{}",
        ask::show_arguments_upto(&whole.tool, &whole.arguments, usize::MAX)
    );
    Ok(exit::COMPLETED)
}

/// Every tool call of `items` by id (a later one wins: ids are unique in a run).
fn calls_in(items: &[Item]) -> BTreeMap<String, ToolCall> {
    items
        .iter()
        .filter_map(|i| match &i.kind {
            Some(item::Kind::Assistant(a)) => Some(a.tool_calls.iter()),
            _ => None,
        })
        .flatten()
        .map(|c| (c.id.clone(), c.clone()))
        .collect()
}

/// The exact arguments of `call` from the blob store (opened once, into `store`).
async fn read(
    store: &mut Option<baton_store::SharedStore>,
    call: &ToolCall,
) -> Result<String, String> {
    if store.is_none() {
        *store = Some(blobs::open().map_err(|e| {
            format!(
                "the whole arguments are in the workers' blob store, which cannot be opened \
                 here ({e}); set BATON_STORE__DIR or BATON_STORE__S3__* like the workers'"
            )
        })?);
    }
    let Some(store) = store.as_ref() else {
        return Err("the blob store is not open".to_owned());
    };
    let id = BlobId::parse(&call.arguments_ref)
        .map_err(|e| format!("call {}: bad arguments reference: {e}", call.id))?;
    let bytes = store.get(&id).await.map_err(|e| {
        format!(
            "cannot read the whole arguments of {} ({id}) from the blob store: {e}",
            call.id
        )
    })?;
    String::from_utf8(bytes)
        .map_err(|_| format!("the stored arguments of {} are not UTF-8 text", call.id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_arguments_are_recognised() {
        let (cut, _) = baton_store::inline::shorten_arguments(
            &serde_json::json!({"path": "a.txt", "content": "x".repeat(2048)}).to_string(),
            baton_store::inline::PREVIEW_BYTES,
        );
        assert!(looks_cut(&cut), "{cut}");
        assert!(!looks_cut(r#"{"path":"a.txt","content":"short"}"#));
        assert!(looks_cut("{not json"));
    }
}
