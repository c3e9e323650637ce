//! `baton send`: a message for a run. To a running run it is guidance before the next model
//! call; to a conversation between tasks (`--start`'s runs, GitHub follow-ups) it is the next
//! task. `--start` makes the conversation when it does not exist (update-with-start: two sends
//! at once make one run). Every message has an id (`--message-id`, default new): the run takes
//! an id once, so a retried send is harmless. [`deliver`] is shared with `baton serve`.

use std::time::Duration;

use baton_proto::{RunSpec, RunState, SendMessage, SendOutcome};
use baton_workflows::AgentRun;
use clap::Parser;
use serde::Serialize;
use temporalio_client::{
    Client, WorkflowExecuteUpdateOptions, WorkflowExecutionStatus, WorkflowHandle,
    WorkflowIdConflictPolicy, WorkflowIdReusePolicy, WorkflowSignalOptions,
    WorkflowUpdateWithStartOptions,
    errors::{WorkflowInteractionError, WorkflowUpdateError, WorkflowUpdateWithStartError},
};

use crate::{
    cli::{Cli, Command, SendArgs, SubmitArgs},
    connect::{connect, handle, interaction_error, not_found, short},
    exit::{self, Exit},
    inspect, json, launch,
    waiting::{self, Waited},
};

/// How long a send waits for a worker to take the update before it falls back to the signal
/// (kept by the server, taken when a worker runs the run).
const UPDATE_BUDGET: Duration = Duration::from_secs(10);
/// How often `--wait` looks at the run.
const POLL: Duration = Duration::from_millis(400);

/// What `send --json` prints.
#[derive(Debug, Serialize)]
pub(crate) struct Sent<'a> {
    pub(crate) run_id: &'a str,
    pub(crate) message_id: &'a str,
    /// The message is in the run (now, or before: `duplicate`); false when sent as a signal.
    pub(crate) accepted: bool,
    /// The id was taken before (or is the run's own task): nothing changed.
    pub(crate) duplicate: bool,
    /// The task the message belongs to (1 = the run's first; 0 = unknown: sent as a signal).
    pub(crate) task: u32,
    /// No worker answered in time: sent as a signal, taken when one runs the run.
    pub(crate) as_signal: bool,
    /// With `--wait`: the answer to the message's task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) answer: Option<String>,
    /// With `--wait`: `IDLE` (the conversation waits for more), or how the run ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) state: Option<&'static str>,
}

/// How a message is to reach a run.
pub(crate) struct Outgoing {
    pub(crate) run_id: String,
    pub(crate) message: SendMessage,
    /// Start the run with this spec on this task queue when it does not exist (or has ended).
    pub(crate) start: Option<(RunSpec, String)>,
}

/// `baton send`.
pub(crate) async fn run(args: SendArgs) -> Result<i32, Exit> {
    let (run_id, text) = match (&args.id, args.words.as_slice()) {
        (Some(id), [text]) => (id.clone(), text.clone()),
        (None, [run, text]) => (run.clone(), text.clone()),
        (Some(_), [_, _]) => {
            return Err(Exit::usage(
                "give the run once: `baton send RUN TEXT` or `baton send --id RUN TEXT`",
            ));
        }
        _ => {
            return Err(Exit::usage(
                "give the run and the message: `baton send RUN \"use the staging database\"`",
            ));
        }
    };
    if text.trim().is_empty() {
        return Err(Exit::usage(
            "the message is empty; give the text the agent should read, e.g. \
             baton send RUN \"use the staging database\"",
        ));
    }
    if !args.start && !args.submit.is_empty() {
        return Err(Exit::usage(
            "flags after `--` are for the run --start makes; add --start (and --id)",
        ));
    }
    let message = SendMessage {
        text: text.clone(),
        id: args
            .message_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
    };
    let start = if args.start {
        Some(conversation_spec(&args, &run_id, &text, &message.id).await?)
    } else {
        None
    };
    let client = connect().await?;
    let outgoing = Outgoing {
        run_id: run_id.clone(),
        message: message.clone(),
        start,
    };
    let delivered = deliver(&client, outgoing).await?;
    let mut sent = Sent {
        run_id: &run_id,
        message_id: &message.id,
        accepted: delivered.outcome.accepted,
        duplicate: delivered.outcome.duplicate,
        task: delivered.outcome.task,
        as_signal: delivered.as_signal,
        answer: None,
        state: None,
    };
    if !args.json {
        eprintln!("{}", describe(&sent));
    }
    if !args.wait {
        if args.json {
            json::print(&sent)?;
        }
        return Ok(exit::COMPLETED);
    }
    let h = handle(&client, &run_id);
    let task = sent.task.max(1);
    match waiting::until_detached(args.wait_timeout, answer_of(&h, &run_id, task)).await {
        Waited::Done(answered) => {
            let answered = answered?;
            let (state, code) = match &answered {
                Answered::Idle(_) => ("IDLE", exit::COMPLETED),
                Answered::Ended(result) => {
                    (result.status().as_str_name(), exit::for_result(result))
                }
            };
            let text = match &answered {
                Answered::Idle(text) => text.clone(),
                Answered::Ended(result) => result.answer.clone(),
            };
            if args.json {
                sent.answer = Some(text);
                sent.state = Some(state);
                json::print(&sent)?;
            } else {
                println!("{}", crate::safe_text::escape(&text));
                if state == "IDLE" {
                    eprintln!(
                        "run {run_id} waits for the next message: baton send {run_id} \"...\""
                    );
                }
            }
            Ok(code)
        }
        Waited::TimedOut | Waited::Detached => {
            if args.json {
                json::print(&sent)?;
            } else {
                eprintln!("{}", waiting::stopped(&run_id));
            }
            Ok(exit::WAIT_TIMEOUT)
        }
    }
}

/// One line on what a send did.
fn describe(sent: &Sent<'_>) -> String {
    if sent.duplicate {
        format!(
            "message {} is in {} already (task {}); nothing changed",
            sent.message_id, sent.run_id, sent.task
        )
    } else if sent.as_signal {
        format!(
            "message sent to {} as a signal (no worker answered within {}s); the agent sees it \
             when a worker runs the run",
            sent.run_id,
            UPDATE_BUDGET.as_secs()
        )
    } else {
        format!(
            "message taken by {} (task {}); the agent sees it before its next model call",
            sent.run_id, sent.task
        )
    }
}

/// The spec of the conversation `--start` makes: `baton submit` with the flags after `--`,
/// this message as its task.
async fn conversation_spec(
    args: &SendArgs,
    run_id: &str,
    text: &str,
    message_id: &str,
) -> Result<(RunSpec, String), Exit> {
    let mut argv: Vec<String> = vec!["baton".into(), "submit".into()];
    argv.extend(args.submit.iter().cloned());
    argv.extend(["--id".into(), run_id.into(), "--".into(), text.into()]);
    let submit = submit_args(&argv, "the flags for the new run (after --)")?;
    let client = connect().await?;
    let mut spec = conversation(&submit, args.idle_timeout, message_id)?;
    crate::workspace::check_flags(&submit)?;
    crate::workspace::apply_source(&submit, &client, &mut spec).await?;
    let spec = launch::fit_in_history(spec).await?;
    Ok((spec, submit.task_queue.clone()))
}

/// `baton submit` flags as [`SubmitArgs`], or a usage error naming the bad flag (`whose`
/// they are, e.g. "the flags for the new run (after --)").
pub(crate) fn submit_args(argv: &[String], whose: &str) -> Result<SubmitArgs, Exit> {
    match Cli::try_parse_from(argv) {
        Ok(Cli {
            command: Command::Submit(mut submit),
            json,
        }) => {
            submit.json = json;
            Ok(submit)
        }
        Ok(_) => Err(Exit::usage(format!("{whose} are not `baton submit` flags"))),
        Err(e) => Err(Exit::usage(format!(
            "{whose} are not valid `baton submit` flags: {}",
            e.to_string().lines().next().unwrap_or_default()
        ))),
    }
}

/// The spec of a conversation from `baton submit` flags: waits `idle` after each answer, its
/// task is message `message_id`.
pub(crate) fn conversation(
    submit: &SubmitArgs,
    idle: Duration,
    message_id: &str,
) -> Result<RunSpec, Exit> {
    let mut spec = crate::submit::build_spec(submit)?;
    spec.idle_timeout_seconds = u32::try_from(idle.as_secs()).unwrap_or(u32::MAX).max(1);
    spec.task_message_id = message_id.to_owned();
    Ok(spec)
}

/// What [`deliver`] did.
pub(crate) struct Delivered {
    pub(crate) outcome: SendOutcome,
    pub(crate) as_signal: bool,
}

/// Sends `outgoing`: with a start spec as update-with-start (the run is made when it does not
/// exist or has ended; the message is its task then, and its update says so: not a
/// duplicate, task 1), else as update `send` (the signal when no worker answers within
/// [`UPDATE_BUDGET`]). The run takes a message id once: the same message sent again answers
/// `duplicate`.
pub(crate) async fn deliver(client: &Client, outgoing: Outgoing) -> Result<Delivered, Exit> {
    let Outgoing {
        run_id,
        message,
        start,
    } = outgoing;
    let value = serde_json::to_value(&message)
        .map_err(|e| Exit::infra(format!("cannot encode the message: {e}")))?;
    if let Some((spec, task_queue)) = start {
        // A run that has ended would be started again by this message: unless it took the
        // message already (a webhook redelivered after the conversation ended).
        if taken_by_ended_run(client, &run_id, &message.id).await {
            return Ok(Delivered {
                outcome: SendOutcome {
                    accepted: true,
                    duplicate: true,
                    task: 0,
                },
                as_signal: false,
            });
        }
        let options = WorkflowUpdateWithStartOptions::new(
            task_queue,
            run_id.clone(),
            WorkflowIdConflictPolicy::UseExisting,
        )
        .id_reuse_policy(WorkflowIdReusePolicy::AllowDuplicate)
        .task_timeout(launch::WORKFLOW_TASK_TIMEOUT)
        .priority(
            spec.priority
                .as_ref()
                .map(launch::temporal_priority)
                .unwrap_or_default(),
        )
        .build();
        return match client
            .execute_update_with_start_workflow(AgentRun::run, spec, AgentRun::send, value, options)
            .await
        {
            Ok(outcome) => Ok(Delivered {
                outcome,
                as_signal: false,
            }),
            Err(WorkflowUpdateWithStartError::Update(WorkflowUpdateError::Failed(failure))) => {
                Err(Exit::usage(format!(
                    "run {run_id} did not take the message: {}",
                    failure.message
                )))
            }
            Err(e) => Err(Exit::infra(format!(
                "cannot start or reach run {run_id}: {}",
                short(&e.to_string())
            ))),
        };
    }
    let h = handle(client, &run_id);
    // A new update id each time: the run itself knows message ids (across continue-as-new
    // too), and says `duplicate` for one it took.
    let update = h.execute_update(
        AgentRun::send,
        value.clone(),
        WorkflowExecuteUpdateOptions::default(),
    );
    match tokio::time::timeout(UPDATE_BUDGET, update).await {
        Ok(Ok(outcome)) => Ok(Delivered {
            outcome,
            as_signal: false,
        }),
        Ok(Err(WorkflowUpdateError::NotFound(_))) => Err(ended(&h, &run_id).await),
        Ok(Err(WorkflowUpdateError::Failed(failure))) => Err(Exit::usage(failure.message)),
        Ok(Err(e)) => Err(Exit::infra(format!(
            "the message could not be delivered: {}",
            short(&e.to_string())
        ))),
        Err(_) => {
            // No worker answered in time: the server keeps a signal until one does; the run
            // takes its id once.
            match h
                .signal(
                    AgentRun::message,
                    value,
                    WorkflowSignalOptions::builder()
                        .request_id(message.id.clone())
                        .build(),
                )
                .await
            {
                Ok(()) => Ok(Delivered {
                    outcome: SendOutcome::default(),
                    as_signal: true,
                }),
                Err(WorkflowInteractionError::NotFound(_)) => Err(ended(&h, &run_id).await),
                Err(e) => Err(interaction_error(&run_id, e)),
            }
        }
    }
}

/// Whether run `run_id` exists, has ended, and took message `id`. Any doubt (no such run, no
/// worker to answer the query) is `false`: the message goes on its way.
async fn taken_by_ended_run(client: &Client, run_id: &str, id: &str) -> bool {
    let h = handle(client, run_id);
    let Ok(description) = h
        .describe(temporalio_client::WorkflowDescribeOptions::default())
        .await
    else {
        return false;
    };
    if description.status() == WorkflowExecutionStatus::Running {
        return false;
    }
    let query = h.query(
        AgentRun::message_taken,
        id.to_owned(),
        temporalio_client::WorkflowQueryOptions::default(),
    );
    matches!(
        tokio::time::timeout(UPDATE_BUDGET, query).await,
        Ok(Ok(true))
    )
}

async fn ended(h: &WorkflowHandle<Client, AgentRun>, run: &str) -> Exit {
    match h
        .describe(temporalio_client::WorkflowDescribeOptions::default())
        .await
    {
        Ok(d) => Exit::usage(format!(
            "run {run} has already ended ({:?}); no agent is there to read a message (`baton \
             result {run}` shows how it ended; `baton send --start --id {run}` starts it again \
             as a conversation)",
            d.status()
        )),
        Err(_) => not_found(run),
    }
}

/// How the task of a message came out.
enum Answered {
    /// The conversation answered and waits for more.
    Idle(String),
    /// The run ended.
    Ended(Box<baton_proto::RunResult>),
}

/// Waits until task `task` is answered: the run is idle at that task or later, or it ended.
async fn answer_of(
    h: &WorkflowHandle<Client, AgentRun>,
    run: &str,
    task: u32,
) -> Result<Answered, Exit> {
    loop {
        let snap = inspect::snapshot(h, run).await?;
        if snap.temporal_status != WorkflowExecutionStatus::Running {
            return inspect::wait_result(h, run)
                .await
                .map(|r| Answered::Ended(Box::new(r)));
        }
        if snap.status.state() == RunState::Idle && snap.status.task >= task {
            return Ok(Answered::Idle(snap.status.answer));
        }
        tokio::time::sleep(POLL).await;
    }
}
