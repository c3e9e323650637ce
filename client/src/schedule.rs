//! `baton schedule`: runs started by Temporal Schedules, not a cron of our
//! own. `create` builds and checks the run's spec exactly as `submit` does (so a bad schedule
//! is refused now, not at 3 a.m.), labels it `baton.schedule=NAME`, and hands it to the server
//! with the start times and the overlap policy; the other commands are thin over the
//! schedule's handle.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use baton_proto::RunPriority;
use baton_workflows::AgentRun;
use futures::StreamExt;
use serde::Serialize;
use temporalio_client::{
    Client, NamespacedClient, RpcOptions,
    grpc::WorkflowService,
    schedules::{
        BackfillScheduleOptions, CreateScheduleOptions, DeleteScheduleOptions,
        ListSchedulesOptions, PauseScheduleOptions, ScheduleAction, ScheduleBackfill,
        ScheduleError, ScheduleOverlapPolicy, ScheduleSpec, TriggerScheduleOptions,
        UnpauseScheduleOptions,
    },
};

use temporalio_common::protos::temporal::api::{
    schedule::v1::schedule_action::Action,
    workflowservice::v1::{
        DescribeScheduleRequest, DescribeScheduleResponse, UpdateScheduleRequest,
    },
};

use crate::{
    cli::{OnOverlap, ScheduleCommand, ScheduleCreateArgs},
    connect::{connect, short},
    exit::{self, Exit},
    json, launch, submit,
};

/// The label every scheduled run carries (`baton list --label baton.schedule=NAME`).
pub(crate) use baton_workflows::SCHEDULE_LABEL;

pub(crate) async fn run(command: ScheduleCommand) -> Result<i32, Exit> {
    match command {
        ScheduleCommand::Create(args) => create(*args).await,
        ScheduleCommand::List(args) => list(args.json).await,
        ScheduleCommand::Describe(args) => describe(&args.name, args.json).await,
        ScheduleCommand::Pause(args) => {
            let handle = connect().await?.get_schedule_handle(&args.name);
            let note = args
                .note
                .unwrap_or_else(|| "paused with baton schedule pause".into());
            handle
                .pause(Some(note), PauseScheduleOptions::default())
                .await
                .map_err(|e| failed(&args.name, "pause", &e))?;
            done(
                &args.name,
                "paused",
                args.json,
                &format!("paused schedule {}", args.name),
            )
        }
        ScheduleCommand::Unpause(args) => {
            let handle = connect().await?.get_schedule_handle(&args.name);
            let note = args
                .note
                .unwrap_or_else(|| "unpaused with baton schedule unpause".into());
            handle
                .unpause(Some(note), UnpauseScheduleOptions::default())
                .await
                .map_err(|e| failed(&args.name, "unpause", &e))?;
            done(
                &args.name,
                "unpaused",
                args.json,
                &format!("unpaused schedule {}", args.name),
            )
        }
        ScheduleCommand::Trigger(args) => {
            let handle = connect().await?.get_schedule_handle(&args.name);
            handle
                .trigger(
                    ScheduleOverlapPolicy::Unspecified,
                    TriggerScheduleOptions::default(),
                )
                .await
                .map_err(|e| failed(&args.name, "trigger", &e))?;
            done(
                &args.name,
                "triggered",
                args.json,
                &format!("triggered schedule {}", args.name),
            )
        }
        ScheduleCommand::Backfill(args) => {
            if args.to <= args.from {
                return Err(Exit::usage("--to must be after --from"));
            }
            let handle = connect().await?.get_schedule_handle(&args.name);
            handle
                .backfill(
                    [ScheduleBackfill::new(args.from, args.to).build()],
                    BackfillScheduleOptions::default(),
                )
                .await
                .map_err(|e| failed(&args.name, "backfill", &e))?;
            done(
                &args.name,
                "backfilled",
                args.json,
                &format!("backfilled schedule {}", args.name),
            )
        }
        ScheduleCommand::Delete(args) => {
            let handle = connect().await?.get_schedule_handle(&args.name);
            handle
                .delete(DeleteScheduleOptions::default())
                .await
                .map_err(|e| failed(&args.name, "delete", &e))?;
            done(
                &args.name,
                "deleted",
                args.json,
                &format!("deleted schedule {} (the runs it started go on)", args.name),
            )
        }
    }
}

/// Says what was done: one JSON object with `--json`, else a line on stderr.
fn done(name: &str, action: &str, as_json: bool, text: &str) -> Result<i32, Exit> {
    if as_json {
        println!(
            "{}",
            json::line(&serde_json::json!({"schedule": name, "action": action}))?
        );
    } else {
        eprintln!("{text}");
    }
    Ok(exit::COMPLETED)
}

/// An RPC on schedule `name` failed: a missing schedule is the user's mistake (exit 2).
fn failed(name: &str, what: &str, e: &ScheduleError) -> Exit {
    let text = e.to_string();
    if text.to_lowercase().contains("not found") {
        return Exit::usage(format!(
            "there is no schedule '{name}'; `baton schedule list` shows them"
        ));
    }
    Exit::infra(format!("cannot {what} schedule {name}: {}", short(&text)))
}

async fn create(args: ScheduleCreateArgs) -> Result<i32, Exit> {
    if args.run.id.is_some() {
        return Err(Exit::usage(
            "--id names one run; a schedule's runs are named after it (NAME-<start time>): drop --id",
        ));
    }
    if args.run.waiting.wait {
        return Err(Exit::usage(
            "--wait follows one run; a schedule's runs start later: follow them with `baton list \
             --label baton.schedule=NAME` and `baton watch RUN`",
        ));
    }
    let mut spec = submit::build_spec(&args.run)?;
    spec.labels
        .insert(SCHEDULE_LABEL.to_owned(), args.name.clone());
    if let Some(n) = args.pause_after_failures {
        spec.labels.insert(
            baton_workflows::PAUSE_AFTER_FAILURES_LABEL.to_owned(),
            n.to_string(),
        );
    }
    crate::workspace::check_flags(&args.run)?;
    let client = connect().await?;
    crate::workspace::apply_source(&args.run, &client, &mut spec).await?;
    let spec = launch::fit_in_history(spec).await?;
    let when = match (&args.cron, args.every) {
        (Some(cron), _) => ScheduleSpec::builder()
            .cron_strings(vec![cron.clone()])
            .timezone_name(args.timezone.clone().unwrap_or_default())
            .build(),
        (None, Some(every)) => ScheduleSpec::from_interval(every),
        (None, None) => return Err(Exit::usage("say when: --cron EXPR or --every DURATION")),
    };
    let overlap = match args.on_overlap {
        OnOverlap::Skip => ScheduleOverlapPolicy::Skip,
        OnOverlap::BufferOne => ScheduleOverlapPolicy::BufferOne,
        OnOverlap::Allow => ScheduleOverlapPolicy::AllowAll,
    };
    // The SDK's schedule action has no priority field: a schedule with one is created paused,
    // then given its priority (and its pause state) in one raw update, so no run starts
    // without it.
    let priority = spec.priority.clone();
    let action =
        ScheduleAction::start_workflow(AgentRun::run, spec, &args.run.task_queue, &args.name);
    let options = CreateScheduleOptions::builder()
        .action(action)
        .spec(when)
        .overlap_policy(overlap)
        .paused(args.paused || priority.is_some())
        .note(format!("created with baton schedule create {}", args.name))
        .build();
    let handle = client
        .create_schedule(&args.name, options)
        .await
        .map_err(|e| {
            let text = e.to_string();
            if text.to_lowercase().contains("already") {
                Exit::usage(format!(
                    "a schedule named '{}' exists already; choose another name, or `baton \
                     schedule delete {}` first",
                    args.name, args.name
                ))
            } else if text.to_lowercase().contains("invalid") {
                Exit::usage(format!("the server refused the schedule: {}", short(&text)))
            } else {
                Exit::infra(format!(
                    "cannot create schedule {}: {}",
                    args.name,
                    short(&text)
                ))
            }
        })?;
    if args.catchup_window.is_some() || args.pause_on_failure {
        let (window, pause) = (args.catchup_window, args.pause_on_failure);
        handle
            .update(
                move |u| {
                    if let Some(w) = window {
                        u.set_catchup_window(w);
                    }
                    u.set_pause_on_failure(pause);
                },
                RpcOptions::default(),
            )
            .await
            .map_err(|e| failed(&args.name, "configure", &e))?;
    }
    let priority_applied = match &priority {
        Some(p) => Some(
            match set_priority(&client, &args.name, p, args.paused).await {
                Ok(applied) => applied,
                Err(e) => {
                    // Nothing starts from a schedule that lacks what its creator asked for.
                    let _ = handle.delete(DeleteScheduleOptions::default()).await;
                    return Err(e);
                }
            },
        ),
        None => None,
    };
    if priority_applied == Some(false) {
        eprintln!(
            "warning: the server did not keep the schedule's priority: it predates task \
             priorities (Temporal 1.27); its runs are queued in arrival order"
        );
    }
    if args.run.json {
        println!(
            "{}",
            json::line(&Created {
                schedule: &args.name,
                task_queue: &args.run.task_queue,
                paused: args.paused,
                priority_applied,
            })?
        );
    } else {
        eprintln!(
            "created schedule {} on task queue '{}'{}; its runs are labelled {SCHEDULE_LABEL}={}",
            args.name,
            args.run.task_queue,
            if args.paused { " (paused)" } else { "" },
            args.name
        );
    }
    Ok(exit::COMPLETED)
}

/// Gives schedule `name`'s start action the run's Temporal priority and sets its pause state
/// (the schedule was created paused): one describe, one update with its conflict token.
/// Whether the server kept the priority (it echoes the field back).
async fn set_priority(
    client: &Client,
    name: &str,
    asked: &RunPriority,
    paused: bool,
) -> Result<bool, Exit> {
    let mut service = client.clone();
    let cannot = |what: &str, s: tonic::Status| {
        Exit::infra(format!(
            "cannot {what} schedule {name} to give it its priority: {}; the schedule was \
             removed, create it again",
            short(s.message())
        ))
    };
    let described = raw_schedule(client, name)
        .await
        .map_err(|s| cannot("describe", s))?;
    let mut schedule = described.schedule.unwrap_or_default();
    if let Some(Action::StartWorkflow(start)) =
        schedule.action.as_mut().and_then(|a| a.action.as_mut())
    {
        start.priority = Some(launch::temporal_priority(asked).into());
    }
    schedule.state.get_or_insert_default().paused = paused;
    WorkflowService::update_schedule(
        &mut service,
        tonic::Request::new(UpdateScheduleRequest {
            namespace: client.namespace(),
            schedule_id: name.to_owned(),
            schedule: Some(schedule),
            conflict_token: described.conflict_token,
            identity: client.identity(),
            request_id: uuid::Uuid::new_v4().to_string(),
            ..Default::default()
        }),
    )
    .await
    .map_err(|s| cannot("update", s))?;
    Ok(priority_of(client, name).await.as_ref() == Some(asked))
}

/// Schedule `name` as the server holds it, with its conflict token.
async fn raw_schedule(
    client: &Client,
    name: &str,
) -> Result<DescribeScheduleResponse, tonic::Status> {
    let mut service = client.clone();
    let request = DescribeScheduleRequest {
        namespace: client.namespace(),
        schedule_id: name.to_owned(),
    };
    Ok(
        WorkflowService::describe_schedule(&mut service, tonic::Request::new(request))
            .await?
            .into_inner(),
    )
}

/// The priority schedule `name` gives its runs, as baton asked for it (none when the server
/// keeps none).
async fn priority_of(client: &Client, name: &str) -> Option<RunPriority> {
    let schedule = raw_schedule(client, name).await.ok()?.schedule?;
    let Some(Action::StartWorkflow(start)) = schedule.action?.action else {
        return None;
    };
    let p = start.priority?;
    let kept = RunPriority {
        priority_key: u32::try_from(p.priority_key).unwrap_or(0),
        fairness_key: p.fairness_key,
        fairness_weight: p.fairness_weight,
    };
    (kept != RunPriority::default()).then_some(kept)
}

#[derive(Serialize)]
struct Created<'a> {
    schedule: &'a str,
    task_queue: &'a str,
    paused: bool,
    /// With `--priority`/`--fairness-key` (or a `team` label): whether the server kept it.
    #[serde(skip_serializing_if = "Option::is_none")]
    priority_applied: Option<bool>,
}

/// A schedule as `list --json` and `describe --json` print it.
#[derive(Serialize)]
struct Line {
    schedule: String,
    paused: bool,
    note: String,
    /// Workflow ids (run ids) of its recent runs, oldest first.
    recent_runs: Vec<String>,
    /// Its next start times, Unix milliseconds.
    next_starts_ms: Vec<i64>,
    /// `describe` only: runs started in all, and the runs still running.
    #[serde(skip_serializing_if = "Option::is_none")]
    runs_started: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    running: Option<Vec<String>>,
    /// `describe` only: its policies.
    #[serde(skip_serializing_if = "Option::is_none")]
    policies: Option<Policies>,
    /// `describe` only: the Temporal priority its runs start with, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<PriorityLine>,
}

/// A schedule's run priority, as `submit --priority/--fairness-key/--fairness-weight` take it
/// (0 / "" = the server's default).
#[derive(Serialize)]
struct PriorityLine {
    priority: u32,
    fairness_key: String,
    fairness_weight: f32,
}

#[derive(Serialize)]
struct Policies {
    /// `skip`, `buffer_one`, `allow` (or the server's name for another policy).
    on_overlap: String,
    catchup_window_secs: i64,
    pause_on_failure: bool,
}

fn policies_of(d: &temporalio_client::schedules::ScheduleDescription) -> Option<Policies> {
    let p = d.raw().schedule.as_ref()?.policies.as_ref()?;
    let on_overlap = match p.overlap_policy {
        0 | 1 => "skip".to_owned(),
        2 => "buffer_one".to_owned(),
        6 => "allow".to_owned(),
        n => format!("policy {n}"),
    };
    Some(Policies {
        on_overlap,
        catchup_window_secs: p.catchup_window.as_ref().map_or(0, |w| w.seconds),
        pause_on_failure: p.pause_on_failure,
    })
}

fn ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn human(line: &Line) -> String {
    let next = line
        .next_starts_ms
        .first()
        .map(|t| {
            let now = ms(SystemTime::now());
            format!("next in {}", render_secs((t - now).max(0) / 1000))
        })
        .unwrap_or_else(|| "no next start".into());
    format!(
        "{}  {}  {next}  last runs: {}{}",
        line.schedule,
        if line.paused { "PAUSED" } else { "active" },
        if line.recent_runs.is_empty() {
            "none".into()
        } else {
            line.recent_runs.join(", ")
        },
        if line.note.is_empty() {
            String::new()
        } else {
            format!("  ({})", line.note)
        }
    )
}

fn render_secs(secs: i64) -> String {
    let d = Duration::from_secs(u64::try_from(secs).unwrap_or(0));
    match d.as_secs() {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s => format!("{}h", s / 3600),
    }
}

async fn list(as_json: bool) -> Result<i32, Exit> {
    let client: Client = connect().await?;
    let mut stream = client.list_schedules(ListSchedulesOptions::default());
    let mut any = false;
    while let Some(item) = stream.next().await {
        let s = item.map_err(|e| {
            Exit::infra(format!("cannot list schedules: {}", short(&e.to_string())))
        })?;
        any = true;
        let line = Line {
            schedule: s.schedule_id().to_owned(),
            paused: s.paused(),
            note: s.note().unwrap_or_default().to_owned(),
            recent_runs: s
                .recent_actions()
                .into_iter()
                .map(|a| a.workflow_id)
                .collect(),
            next_starts_ms: s.future_action_times().into_iter().map(ms).collect(),
            runs_started: None,
            running: None,
            policies: None,
            priority: None,
        };
        if as_json {
            println!("{}", json::line(&line)?);
        } else {
            println!("{}", human(&line));
        }
    }
    if !any && !as_json {
        eprintln!("no schedules (create one with `baton schedule create NAME --cron ... TASK`)");
    }
    Ok(exit::COMPLETED)
}

async fn describe(name: &str, as_json: bool) -> Result<i32, Exit> {
    let client = connect().await?;
    let handle = client.get_schedule_handle(name);
    let d = handle
        .describe(RpcOptions::default())
        .await
        .map_err(|e| failed(name, "describe", &e))?;
    let line = Line {
        schedule: name.to_owned(),
        paused: d.paused(),
        note: d.note().unwrap_or_default().to_owned(),
        recent_runs: d
            .recent_actions()
            .into_iter()
            .map(|a| a.workflow_id)
            .collect(),
        next_starts_ms: d.future_action_times().into_iter().map(ms).collect(),
        runs_started: Some(d.action_count()),
        running: Some(
            d.running_actions()
                .into_iter()
                .map(|a| a.workflow_id)
                .collect(),
        ),
        policies: policies_of(&d),
        priority: priority_of(&client, name).await.map(|p| PriorityLine {
            priority: p.priority_key,
            fairness_key: p.fairness_key,
            fairness_weight: p.fairness_weight,
        }),
    };
    if as_json {
        println!("{}", json::line(&line)?);
    } else {
        println!("{}", human(&line));
        println!(
            "runs started: {}, running: {}",
            d.action_count(),
            line.running.as_ref().map_or(0, Vec::len)
        );
    }
    Ok(exit::COMPLETED)
}
