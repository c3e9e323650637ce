//! `baton eval SUITE`: every task of a suite under every configuration, `--repeat K` times,
//! as ordinary runs (labelled `baton.eval=SUITE/CONFIG`, `baton.eval.id=EVAL`), at most
//! `--concurrency` at once, graded by the tasks' verification commands and summed up per
//! configuration ([`report`]).
//!
//! The evaluation keeps no state of its own: its runs are durable and their ids say what
//! they are (`EVAL.TASK.CONFIG.K`). A CLI killed mid-way and started again with `--id EVAL`
//! starts only the runs that do not exist yet (each start refuses an id that was ever used,
//! open or closed) and waits for the others.
//!
//! With `--from-runs QUERY --at-turn N --config B` it replays stored runs counterfactually
//! instead ([`counterfactual`]): each is forked at turn N under configuration B.
//!
//! Modules: [`suite`] (the file, checked; each run as `submit` arguments), [`report`]
//! (grading, pass@k, the table), [`counterfactual`] and [`diverge`] (where a fork parts from
//! its original).

use std::time::Instant;

use baton_proto::RunSpec;
use baton_workflows::{AgentRun, workflow::SA_LABELS};
use futures::StreamExt;
use temporalio_client::{Client, WorkflowDescribeOptions, WorkflowIdReusePolicy};

use crate::{
    cli::{EvalArgs, SubmitArgs},
    connect,
    exit::{self, Exit},
    inspect, json, launch,
};

pub(crate) mod counterfactual;
pub(crate) mod diverge;
pub(crate) mod report;
pub(crate) mod suite;

use suite::{Planned, Suite};

/// `state` of a planned run that was not started (the wait ended first).
pub(crate) const NOT_STARTED: &str = "NOT_STARTED";

/// A new evaluation id.
pub(crate) fn new_eval_id() -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("eval-{}", &id[..8])
}

/// A planned run with its `submit` arguments, checked as `submit` checks them.
struct Prepared {
    run: Planned,
    submit: SubmitArgs,
    spec: RunSpec,
}

/// `baton eval`.
pub(crate) async fn run(args: EvalArgs) -> Result<i32, Exit> {
    let started = Instant::now();
    let suite = suite::load(&args.suite)?;
    for name in args.configs.iter().chain(&args.compare) {
        if suite.config(name).is_none() {
            let known: Vec<&str> = suite.configs.iter().map(|c| c.name.as_str()).collect();
            return Err(Exit::usage(format!(
                "the suite has no config '{name}'; its configs: {}",
                known.join(", ")
            )));
        }
    }
    if let [a, b] = args.compare.as_slice()
        && !args.configs.is_empty()
        && !(args.configs.contains(a) && args.configs.contains(b))
    {
        return Err(Exit::usage(format!(
            "--compare {a} {b} needs both configs run: add them to --config, or leave --config out"
        )));
    }
    if let (Some(query), Some(at)) = (&args.from_runs, args.at_turn) {
        return counterfactual::run(&args, &suite, query, at, started).await;
    }
    if suite.tasks.is_empty() {
        return Err(Exit::usage(format!(
            "suite {} has no [[task]] to run (a suite of configs alone is for --from-runs)",
            args.suite.display()
        )));
    }
    let repeat = args.repeat.or(suite.repeat).unwrap_or(1);
    let eval_id = args.id.clone().unwrap_or_else(new_eval_id);
    let plan = suite.plan(&eval_id, repeat, &args.configs);
    // Every run is built and checked before the first starts: a bad flag in a config fails
    // the evaluation before it costs anything.
    let prepared = plan
        .iter()
        .map(|run| prepare(&suite, &eval_id, run, &args.task_queue))
        .collect::<Result<Vec<_>, Exit>>()?;
    let client = connect::connect().await?;
    let existing = existing_runs(&client, &eval_id, &suite.digest).await?.len();
    eprintln!(
        "evaluation {eval_id}: {} runs ({} tasks x {} configs x {repeat}), {} already \
         started, {} at once\n  resume: baton eval {} --id {eval_id}",
        plan.len(),
        suite.tasks.len(),
        if args.configs.is_empty() {
            suite.configs.len()
        } else {
            args.configs.len()
        },
        existing,
        args.concurrency,
        args.suite.display()
    );
    let deadline = args.wait_timeout.map(|t| started + t);
    let total = plan.len();
    let mut done = 0usize;
    let mut submitted = 0usize;
    let mut runs: Vec<(usize, json::EvalRun)> = Vec::with_capacity(total);
    let mut going = futures::stream::iter(prepared.into_iter().enumerate())
        .map(|(i, p)| {
            let (client, suite) = (&client, &suite);
            async move { (i, one(client, suite, p, deadline).await) }
        })
        .buffer_unordered(args.concurrency as usize);
    while let Some((i, outcome)) = going.next().await {
        let (run, new) = outcome?;
        submitted += usize::from(new);
        if report::ended(&run) {
            done += 1;
            eprintln!("[{done}/{total}] {}", progress(&run));
        }
        runs.push((i, run));
    }
    drop(going);
    runs.sort_by_key(|(i, _)| *i);
    let mut configs: Vec<String> = Vec::new();
    for p in &plan {
        if !configs.contains(&p.config) {
            configs.push(p.config.clone());
        }
    }
    let eval = report::build(
        report::Header {
            eval_id: &eval_id,
            suite: &suite.name,
            repeat,
            tasks: suite.tasks.iter().map(|t| t.id.clone()).collect(),
            configs,
            compare: match args.compare.as_slice() {
                [a, b] => Some((a.clone(), b.clone())),
                _ => None,
            },
            submitted,
            seconds: started.elapsed().as_secs_f64(),
        },
        runs.into_iter().map(|(_, r)| r).collect(),
    );
    if args.json {
        json::print(&eval)?;
    } else {
        print!("{}", report::render(&eval));
    }
    Ok(if eval.complete {
        exit::COMPLETED
    } else {
        exit::WAIT_TIMEOUT
    })
}

/// One line per ended run, on stderr.
pub(crate) fn progress(run: &json::EvalRun) -> String {
    let verdict = if run.passed {
        "passed".to_owned()
    } else {
        format!("failed: {}", run.failure)
    };
    format!(
        "{} {} {verdict} ({} turns, {:.1} s)",
        run.run_id, run.state, run.turns, run.seconds
    )
}

/// `run`'s `submit` arguments, parsed and built into a spec as `submit` would.
fn prepare(
    suite: &Suite,
    eval_id: &str,
    run: &Planned,
    task_queue: &str,
) -> Result<Prepared, Exit> {
    let mut argv = vec!["baton".to_owned(), "submit".to_owned()];
    argv.extend(suite.submit_argv(eval_id, run, task_queue));
    let context = |e: Exit| {
        Exit::usage(format!(
            "task '{}' under config '{}': {}",
            run.task, run.config, e.message
        ))
    };
    let submit = crate::converse::submit_args(&argv, "its flags").map_err(context)?;
    let spec = crate::submit::build_spec(&submit).map_err(context)?;
    crate::workspace::check_flags(&submit).map_err(context)?;
    Ok(Prepared {
        run: run.clone(),
        submit,
        spec,
    })
}

/// The labels of each run of evaluation `eval_id` that exists already; an error when they
/// were started from another suite (a changed file, or another one under the same id) or with
/// other arguments (`digest`).
pub(crate) async fn existing_runs(
    client: &Client,
    eval_id: &str,
    digest: &str,
) -> Result<Vec<Vec<String>>, Exit> {
    let query = format!(
        "WorkflowType = '{}' AND BatonLabels = '{}={eval_id}'",
        baton_workflows::WORKFLOW_TYPE,
        suite::LABEL_ID
    );
    let expected = format!("{}={digest}", suite::LABEL_DIGEST);
    let mut found = Vec::new();
    for run in crate::visibility::query_runs(client, &query, 10_000).await? {
        let labels = run.search_attributes().get(&SA_LABELS).unwrap_or_default();
        if !labels.contains(&expected) {
            return Err(Exit::usage(format!(
                "evaluation {eval_id} was started from another suite or with other arguments, \
                 or this suite has changed since (run {} has no {expected}); finish it with the \
                 suite and arguments as they were, or start a new evaluation without --id",
                run.id()
            )));
        }
        found.push(labels);
    }
    Ok(found)
}

/// One run of the evaluation: started unless it exists, waited for until `deadline`, graded.
/// Also whether this call started it.
async fn one(
    client: &Client,
    suite: &Suite,
    p: Prepared,
    deadline: Option<Instant>,
) -> Result<(json::EvalRun, bool), Exit> {
    let run_id = p.run.run_id.clone();
    let h = connect::handle(client, &run_id);
    let mut new = false;
    if h.describe(WorkflowDescribeOptions::default())
        .await
        .is_err()
    {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok((report::open(&p.run, NOT_STARTED), false));
        }
        new = start(client, p.spec, &p.submit, &run_id).await?;
    }
    let Some((result, seconds)) = wait_ended(&h, &run_id, deadline).await? else {
        return Ok((report::open(&p.run, report::RUNNING), new));
    };
    let task = suite
        .task(&p.run.task)
        .ok_or_else(|| Exit::infra(format!("task '{}' left the suite", p.run.task)))?;
    Ok((
        report::grade(&p.run, &task.expect_changed, &result, seconds),
        new,
    ))
}

/// Starts `run_id` from `spec` (its workspace source applied now); false when a run with that
/// id already exists (an earlier invocation started it).
async fn start(
    client: &Client,
    mut spec: RunSpec,
    submit: &SubmitArgs,
    run_id: &str,
) -> Result<bool, Exit> {
    crate::workspace::apply_source(submit, client, &mut spec).await?;
    let spec = launch::fit_in_history(spec).await?;
    start_once(client, spec, run_id, &submit.task_queue).await
}

/// Starts run `run_id` of `spec` on `queue` unless a run ever had that id, open or closed:
/// false then. An evaluation's run is never started twice.
pub(crate) async fn start_once(
    client: &Client,
    spec: RunSpec,
    run_id: &str,
    queue: &str,
) -> Result<bool, Exit> {
    let started = launch::start_new(
        client,
        spec,
        run_id,
        queue,
        WorkflowIdReusePolicy::RejectDuplicate,
    )
    .await?;
    Ok(matches!(started, launch::Started::New(_)))
}

/// Run `run_id`'s result and its seconds from start to close, once it has ended; `None` when
/// `deadline` comes first.
pub(crate) async fn wait_ended(
    h: &temporalio_client::WorkflowHandle<Client, AgentRun>,
    run_id: &str,
    deadline: Option<Instant>,
) -> Result<Option<(baton_proto::RunResult, f64)>, Exit> {
    let waited = match deadline {
        None => Some(inspect::wait_result(h, run_id).await),
        Some(d) => tokio::time::timeout_at(d.into(), inspect::wait_result(h, run_id))
            .await
            .ok(),
    };
    let Some(result) = waited else {
        return Ok(None);
    };
    let result = result?;
    Ok(Some((result, run_seconds(h).await.unwrap_or_default())))
}

/// Seconds from the run's start to its close, by the server's clock.
async fn run_seconds(h: &temporalio_client::WorkflowHandle<Client, AgentRun>) -> Option<f64> {
    let d = h.describe(WorkflowDescribeOptions::default()).await.ok()?;
    let (start, close) = (d.start_time()?, d.close_time()?);
    Some(close.duration_since(start).ok()?.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first run of a one-task suite under a config with `config_body`, prepared.
    fn prepared(config_body: &str) -> Result<Prepared, Exit> {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "[[task]]\nid = \"t\"\ngit = \"git://127.0.0.1:1/r.git\"\nprompt = \"p\"\n\
             verify = [\"true\"]\n\n[[config]]\nname = \"c\"\n{config_body}\n"
        );
        let suite = suite::parse(&text, dir.path(), "s").unwrap();
        let plan = suite.plan("e", 1, &[]);
        prepare(&suite, "e", &plan[0], "q")
    }

    #[test]
    fn a_config_submit_refuses_fails_before_anything_starts_naming_task_and_config() {
        let ok = prepared("model = \"gpt-5\"").unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(ok.spec.model.unwrap().model, "gpt-5");
        assert_eq!(ok.spec.verify, ["true"]);
        assert!(ok.spec.labels.get("baton.eval") == Some(&"s/c".to_owned()));
        let cases = [
            ("flags = [\"--bogus\"]", "--bogus"),
            ("reasoning_effort = \"extreme\"", "extreme"),
            ("provider = \"acme\"", "unknown provider 'acme'"),
            ("max_turns = 0", "--max-turns"),
        ];
        for (body, expected) in cases {
            let Err(e) = prepared(body) else {
                panic!("{body} was accepted")
            };
            assert_eq!(e.code, exit::USAGE, "{body}: {}", e.message);
            assert!(
                e.message.starts_with("task 't' under config 'c': ")
                    && e.message.contains(expected),
                "{body}: {}",
                e.message
            );
        }
    }
}
