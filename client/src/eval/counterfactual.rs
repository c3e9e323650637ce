//! `baton eval SUITE --from-runs QUERY --at-turn N|each --config B`: counterfactual replay.
//! The closed runs the query finds are each forked at turn N (the existing fork: the
//! conversation up to N goes by reference, so no model is called for those turns) with
//! configuration B's model, instructions, policy and limits, run to their end, graded by the
//! original's own verification commands, and compared with the original: the first reply
//! after N that differs, the outcome, the cost.
//!
//! Like an evaluation of tasks, it resumes by `--id`: the forks' ids are
//! `EVAL.ORIGINAL.CONFIG.atN`, and the originals are those the query found as of the first
//! invocation (label `baton.eval.as_of`), so a resumed evaluation forks the same runs.

use std::time::{Instant, SystemTime};

use baton_proto::{RunResult, RunSpec};
use baton_store::{SharedStore, conversation::Conversations};
use baton_workflows::workflow::SA_LABELS;
use futures::StreamExt;
use temporalio_client::{Client, WorkflowDescribeOptions};

use super::{
    NOT_STARTED, diverge, report,
    suite::{self, Config, Planned, Suite},
};
use crate::{
    blobs,
    cli::{AtTurn, EvalArgs, ForkArgs, WaitArgs, parse_label},
    connect,
    exit::{self, Exit},
    fork_source::{self, Source},
    inspect,
    json::{self, Counterfactual, CounterfactualSummary, FirstDifference, Pair, PairSide, Skipped},
    launch,
};

/// Label: when the evaluation first listed its originals (RFC 3339).
const LABEL_AS_OF: &str = "baton.eval.as_of";

/// An original run, read.
struct Original {
    run_id: String,
    source: Source,
    result: RunResult,
}

/// One fork to make (or find) and compare.
struct ForkAt {
    original: usize,
    at_turn: u32,
    run: Planned,
}

/// `baton eval --from-runs`.
pub(crate) async fn run(
    args: &EvalArgs,
    suite: &Suite,
    query: &str,
    at: AtTurn,
    started: Instant,
) -> Result<i32, Exit> {
    let [name] = args.configs.as_slice() else {
        return Err(Exit::usage(
            "--from-runs forks each run under one configuration: give exactly one --config NAME",
        ));
    };
    if !args.compare.is_empty() {
        return Err(Exit::usage(
            "--compare is for suites of tasks; --from-runs compares each fork with its original",
        ));
    }
    if args.repeat.is_some() {
        return Err(Exit::usage(
            "--repeat is for suites of tasks; --from-runs forks each run once per turn",
        ));
    }
    let config = suite
        .config(name)
        .ok_or_else(|| Exit::usage(format!("the suite has no config '{name}'")))?;
    if !config.flags.is_empty() {
        return Err(Exit::usage(format!(
            "config '{name}' has flags, which a fork cannot take (it keeps its original's tools, \
             sandbox and workspace); --from-runs applies a config's provider, model, reasoning \
             effort, script, instructions, policy and limits: use a config without flags"
        )));
    }
    let eval_id = args.id.clone().unwrap_or_else(super::new_eval_id);
    let at_text = at.to_string();
    let digest = suite::digest_of(&[&suite.digest, query, &at_text, name]);
    let store = blobs::open().map_err(|e| {
        Exit::usage(format!(
            "--from-runs reads the runs' conversations from the workers' blob store, which \
             cannot be opened ({e}); set BATON_STORE__DIR (or BATON_STORE__S3__*)"
        ))
    })?;
    let client = connect::connect().await?;
    let existing = super::existing_runs(&client, &eval_id, &digest).await?;
    let as_of = existing
        .iter()
        .flatten()
        .find_map(|l| {
            l.strip_prefix(&format!("{LABEL_AS_OF}="))
                .map(str::to_owned)
        })
        .unwrap_or_else(|| humantime::format_rfc3339_seconds(SystemTime::now()).to_string());
    let (originals, mut skipped) =
        read_originals(&client, &store, query, &as_of, args.limit, args.concurrency).await?;
    let mut plan = Vec::new();
    for (i, o) in originals.iter().enumerate() {
        let turns = baton_core::fork::turns(&o.source.conversation);
        let at_turns: Vec<u32> = match at {
            AtTurn::Turn(n) if n < turns => vec![n],
            AtTurn::Turn(n) => {
                skipped.push(Skipped {
                    run_id: o.run_id.clone(),
                    reason: format!("it has {turns} turns: nothing follows turn {n}"),
                });
                continue;
            }
            AtTurn::Each => (1..turns).collect(),
        };
        for n in at_turns {
            plan.push(ForkAt {
                original: i,
                at_turn: n,
                run: Planned {
                    run_id: format!("{eval_id}.{}.{name}.at{n}", o.run_id),
                    task: o.run_id.clone(),
                    config: name.clone(),
                    repeat: 1,
                },
            });
        }
    }
    eprintln!(
        "evaluation {eval_id}: {} forks of {} runs (as of {as_of}) under config '{name}', {} \
         already started, {} at once\n  resume: baton eval {} --id {eval_id} --from-runs ... \
         (the same arguments)",
        plan.len(),
        originals.len(),
        existing.len(),
        args.concurrency,
        args.suite.display()
    );
    let deadline = args.wait_timeout.map(|t| started + t);
    let labels = Labels {
        suite: format!("{}={}/{name}", suite::LABEL_SUITE, suite.name),
        id: format!("{}={eval_id}", suite::LABEL_ID),
        digest: format!("{}={digest}", suite::LABEL_DIGEST),
        as_of: format!("{LABEL_AS_OF}={as_of}"),
    };
    let total = plan.len();
    let mut done = 0;
    let mut submitted = 0;
    let mut pairs: Vec<(usize, Pair)> = Vec::new();
    let ctx = Ctx {
        client: &client,
        store: &store,
        config,
        labels: &labels,
        deadline,
    };
    let mut going = futures::stream::iter(plan.iter().enumerate())
        .map(|(i, p)| {
            let ctx = &ctx;
            let original = &originals[p.original];
            async move { (i, pair(ctx, original, p).await) }
        })
        .buffer_unordered(args.concurrency as usize);
    while let Some((i, outcome)) = going.next().await {
        match outcome {
            Ok((pair, new)) => {
                submitted += usize::from(new);
                if report::ended(&pair.fork) {
                    done += 1;
                    eprintln!("[{done}/{total}] {}", super::progress(&pair.fork));
                }
                pairs.push((i, pair));
            }
            Err(Refused(why)) => {
                let p = &plan[i];
                skipped.push(Skipped {
                    run_id: p.run.task.clone(),
                    reason: format!("at turn {}: {why}", p.at_turn),
                });
            }
        }
    }
    drop(going);
    pairs.sort_by_key(|(i, _)| *i);
    let pairs: Vec<Pair> = pairs.into_iter().map(|(_, p)| p).collect();
    let report = Counterfactual {
        eval_id: eval_id.clone(),
        suite: suite.name.clone(),
        config: name.clone(),
        query: query.to_owned(),
        at_turn: at_text,
        as_of,
        complete: pairs.iter().all(|p| report::ended(&p.fork)),
        submitted,
        seconds: started.elapsed().as_secs_f64(),
        originals: originals.len(),
        skipped,
        summary: summary(&pairs),
        pairs,
    };
    if args.json {
        json::print(&report)?;
    } else {
        print!("{}", render(&report));
    }
    Ok(if report.complete {
        exit::COMPLETED
    } else {
        exit::WAIT_TIMEOUT
    })
}

/// The closed runs `query` finds, closed before `as_of`, newest first, at most `limit`; not
/// an evaluation's own runs. Each read whole (spec, conversation, result); the runs that
/// cannot be read are skipped, with why.
async fn read_originals(
    client: &Client,
    store: &SharedStore,
    query: &str,
    as_of: &str,
    limit: u32,
    concurrency: u32,
) -> Result<(Vec<Original>, Vec<Skipped>), Exit> {
    let full = format!(
        "WorkflowType = '{}' AND ExecutionStatus != 'Running' AND CloseTime < '{as_of}' AND \
         ({query})",
        baton_workflows::WORKFLOW_TYPE
    );
    // Evaluations' own runs are left out below: ask for more than the limit.
    let listed = crate::visibility::query_runs(client, &full, limit as usize * 4)
        .await
        .map_err(|e| {
            Exit::usage(format!(
                "{} (--from-runs: {full}); check the query (a Temporal visibility query, e.g. \
                 \"BatonLabels = 'team=infra'\")",
                e.message
            ))
        })?;
    let own = format!("{}=", suite::LABEL_ID);
    let ids: Vec<String> = listed
        .iter()
        .filter(|run| {
            let labels = run.search_attributes().get(&SA_LABELS).unwrap_or_default();
            !labels.iter().any(|l| l.starts_with(&own))
        })
        .take(limit as usize)
        .map(|run| run.id().to_owned())
        .collect();
    let read = futures::stream::iter(ids)
        .map(|id| async move {
            let read = async {
                if let Err(e) = parse_label(&format!("{}={id}", suite::LABEL_TASK)) {
                    return Err(Exit::usage(e));
                }
                let source = fork_source::read(client, &id, store).await?;
                let h = connect::handle(client, &id);
                let result = inspect::wait_result(&h, &id).await?;
                Ok(Original {
                    run_id: id.clone(),
                    source,
                    result,
                })
            };
            read.await.map_err(|e: Exit| Skipped {
                run_id: id.clone(),
                reason: e.message,
            })
        })
        .buffered(concurrency as usize)
        .collect::<Vec<_>>()
        .await;
    let mut originals = Vec::new();
    let mut skipped = Vec::new();
    for r in read {
        match r {
            Ok(o) => originals.push(o),
            Err(s) => skipped.push(s),
        }
    }
    Ok((originals, skipped))
}

/// The labels every fork of the evaluation carries.
struct Labels {
    suite: String,
    id: String,
    digest: String,
    as_of: String,
}

struct Ctx<'a> {
    client: &'a Client,
    store: &'a SharedStore,
    config: &'a Config,
    labels: &'a Labels,
    deadline: Option<Instant>,
}

/// Why a pair has no fork (a fork the original cannot have at that turn).
struct Refused(String);

impl From<Exit> for Refused {
    fn from(e: Exit) -> Self {
        Refused(e.message)
    }
}

/// The fork of `original` at `p.at_turn`: started unless it exists, waited for, graded and
/// compared. Also whether this call started it.
async fn pair(ctx: &Ctx<'_>, original: &Original, p: &ForkAt) -> Result<(Pair, bool), Refused> {
    let run_id = &p.run.run_id;
    let h = connect::handle(ctx.client, run_id);
    let side = original_side(original);
    let open = |state: &str| Pair {
        original: side.clone(),
        at_turn: p.at_turn,
        fork: report::open(&p.run, state),
        first_difference: None,
    };
    let mut new = false;
    if h.describe(WorkflowDescribeOptions::default())
        .await
        .is_err()
    {
        if ctx.deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok((open(NOT_STARTED), false));
        }
        let spec = fork_spec(ctx, original, p).await?;
        let queue = match original.source.task_queue.as_str() {
            "" => baton_workflows::DEFAULT_TASK_QUEUE.to_owned(),
            q => q.to_owned(),
        };
        new = super::start_once(ctx.client, spec, run_id, &queue).await?;
    }
    let Some((result, seconds)) = super::wait_ended(&h, run_id, ctx.deadline).await? else {
        return Ok((open(report::RUNNING), new));
    };
    let fork = report::grade(&p.run, &[], &result, seconds);
    let forked = fork_source::read(ctx.client, run_id, ctx.store).await?;
    let first_difference = diverge::first_difference(
        &original.source.conversation,
        &forked.conversation,
        p.at_turn,
    )
    .map(|d| FirstDifference {
        turn: d.turn,
        original: d.original,
        fork: d.fork,
    });
    Ok((
        Pair {
            original: side,
            at_turn: p.at_turn,
            fork,
            first_difference,
        },
        new,
    ))
}

fn original_side(o: &Original) -> PairSide {
    let graded = report::grade(&report_planned(&o.run_id), &[], &o.result, 0.0);
    PairSide {
        run_id: o.run_id.clone(),
        state: graded.state,
        reason: graded.reason,
        passed: graded.passed,
        turns: graded.turns,
        cost_usd: graded.cost_usd,
    }
}

fn report_planned(run_id: &str) -> Planned {
    Planned {
        run_id: run_id.to_owned(),
        task: run_id.to_owned(),
        config: String::new(),
        repeat: 1,
    }
}

/// The fork's spec: `baton fork`'s, with the configuration's model, instructions, approval
/// and limits in place of the original's.
async fn fork_spec(ctx: &Ctx<'_>, original: &Original, p: &ForkAt) -> Result<RunSpec, Exit> {
    let labels = [
        &ctx.labels.suite,
        &ctx.labels.id,
        &format!("{}={}", suite::LABEL_TASK, original.run_id),
        &ctx.labels.digest,
        &ctx.labels.as_of,
    ]
    .iter()
    .map(|l| parse_label(l).map_err(Exit::usage))
    .collect::<Result<Vec<_>, Exit>>()?;
    let args = ForkArgs {
        run: original.run_id.clone(),
        at_turn: p.at_turn,
        instructions: None,
        id: Some(p.run.run_id.clone()),
        max_turns: ctx.config.max_turns,
        labels,
        task_queue: None,
        waiting: WaitArgs {
            wait: false,
            wait_timeout: None,
        },
        json: false,
    };
    let mut spec = crate::fork::fork_spec(
        &args,
        &original.source,
        &Conversations::new(ctx.store.clone()),
    )
    .await?;
    let mut argv = vec!["baton".to_owned(), "submit".to_owned()];
    ctx.config.flags_into(&original.run_id, &mut argv);
    argv.extend(["--".to_owned(), "(config)".to_owned()]);
    let submit =
        crate::converse::submit_args(&argv, &format!("config '{}''s flags", ctx.config.name))?;
    let b = crate::submit::build_spec(&submit)?;
    spec.model = b.model;
    spec.approval = b.approval;
    if ctx.config.instructions.is_some() {
        spec.system_prompt = b.system_prompt;
    }
    if ctx.config.max_cost_usd.is_some() {
        let limits = spec.limits.get_or_insert_default();
        limits.max_cost_usd = b.limits.unwrap_or_default().max_cost_usd;
    }
    launch::fit_in_history(spec).await
}

/// The summary over the pairs whose fork ended.
pub(crate) fn summary(pairs: &[Pair]) -> CounterfactualSummary {
    let done: Vec<&Pair> = pairs.iter().filter(|p| report::ended(&p.fork)).collect();
    let mut seen = std::collections::BTreeSet::new();
    let original_cost: f64 = pairs
        .iter()
        .filter(|p| seen.insert(p.original.run_id.as_str()))
        .map(|p| p.original.cost_usd)
        .sum();
    CounterfactualSummary {
        pairs: pairs.len(),
        ended: done.len(),
        differing: done.iter().filter(|p| p.first_difference.is_some()).count(),
        outcome_changed: done
            .iter()
            .filter(|p| p.original.passed != p.fork.passed)
            .count(),
        original_passed: done.iter().filter(|p| p.original.passed).count(),
        fork_passed: done.iter().filter(|p| p.fork.passed).count(),
        fork_cost_usd: report::round(done.iter().map(|p| p.fork.cost_usd).sum()),
        original_cost_usd: report::round(original_cost),
    }
}

fn verdict(passed: bool) -> &'static str {
    if passed { "passed" } else { "failed" }
}

/// The report for people: one block per fork, then the summary.
pub(crate) fn render(r: &Counterfactual) -> String {
    let mut out = format!(
        "evaluation {} (suite {}): {} runs forked at turn {} under config '{}', as of {}; {} \
         forks started now, {:.1} s\n\n",
        r.eval_id, r.suite, r.originals, r.at_turn, r.config, r.as_of, r.submitted, r.seconds
    );
    for p in &r.pairs {
        out.push_str(&format!(
            "{} at turn {} -> {}\n  original: {} {} ({} turns, {:.4} $)\n",
            p.original.run_id,
            p.at_turn,
            p.fork.run_id,
            p.original.state,
            verdict(p.original.passed),
            p.original.turns,
            p.original.cost_usd
        ));
        if !report::ended(&p.fork) {
            out.push_str(&format!("  fork:     {}\n", p.fork.state));
            continue;
        }
        out.push_str(&format!(
            "  fork:     {} {} ({} turns, {:.4} $ after turn {})\n",
            p.fork.state,
            verdict(p.fork.passed),
            p.fork.turns,
            p.fork.cost_usd,
            p.at_turn
        ));
        match &p.first_difference {
            None => out.push_str("  the same replies after the fork point\n"),
            Some(d) => out.push_str(&format!(
                "  first difference at turn {}:\n    original: {}\n    fork:     {}\n",
                d.turn, d.original, d.fork
            )),
        }
    }
    for s in &r.skipped {
        out.push_str(&format!("skipped {}: {}\n", s.run_id, s.reason));
    }
    let s = &r.summary;
    out.push_str(&format!(
        "\n{} of {} forks ended; {} differ from their original; passed: originals {}, forks {} \
         ({} changed); cost: forks {:.4} $ after the fork point, originals {:.4} $ in all\n",
        s.ended,
        s.pairs,
        s.differing,
        s.original_passed,
        s.fork_passed,
        s.outcome_changed,
        s.fork_cost_usd,
        s.original_cost_usd
    ));
    if !r.complete {
        out.push_str(&format!(
            "not every fork has ended: the same command with --id {} picks it up again\n",
            r.eval_id
        ));
    }
    out
}
