//! Grading a run and summing an evaluation up: pass rate, pass@k, medians, failures by
//! reason, and two configurations side by side. Pure: what the runs returned in, a report out.

use std::collections::BTreeMap;

use baton_proto::{RunResult, RunState};

use super::suite::Planned;
use crate::json::{
    Eval, EvalCompare, EvalConfig, EvalRun, FailureCount, PassAtK, TaskDiff, TaskResult,
};

/// `state` of a run that has not ended.
pub(crate) const RUNNING: &str = "RUNNING";
/// `failure` of a completed run whose change set misses an expected file.
pub(crate) const EXPECTED_CHANGE_MISSING: &str = "expected_change_missing";

/// A run that has not ended (or not started: `state`).
pub(crate) fn open(run: &Planned, state: &str) -> EvalRun {
    EvalRun {
        run_id: run.run_id.clone(),
        task: run.task.clone(),
        config: run.config.clone(),
        repeat: run.repeat,
        state: state.to_owned(),
        reason: String::new(),
        passed: false,
        failure: String::new(),
        failed_check: None,
        turns: 0,
        total_tokens: 0,
        cost_usd: 0.0,
        seconds: 0.0,
    }
}

/// Whether `result` (of `run`, `seconds` from start to close) passed: it completed, every
/// verification command of its last round passed, and it changed every `expect_changed` path.
pub(crate) fn grade(
    run: &Planned,
    expect_changed: &[String],
    result: &RunResult,
    seconds: f64,
) -> EvalRun {
    let failed_check = result
        .verification
        .iter()
        .find(|v| v.exit_code != 0 || v.timed_out)
        .map(|v| v.command.clone());
    let changed: Vec<&str> = result
        .changes
        .iter()
        .flat_map(|c| c.files.iter().map(|f| f.path.as_str()))
        .collect();
    let missing = expect_changed
        .iter()
        .any(|p| !changed.contains(&p.as_str()));
    let reason = result.reason().as_str_name().to_owned();
    let failure = if result.status() != RunState::Completed {
        if reason.is_empty() || result.reason == 0 {
            result.status().as_str_name().to_lowercase()
        } else {
            reason.clone()
        }
    } else if failed_check.is_some() {
        "verification_failed".to_owned()
    } else if missing {
        EXPECTED_CHANGE_MISSING.to_owned()
    } else {
        String::new()
    };
    let usage = result.usage.unwrap_or_default();
    EvalRun {
        state: result.status().as_str_name().to_owned(),
        reason,
        passed: failure.is_empty(),
        failure,
        failed_check,
        turns: result.turns,
        total_tokens: u64::from(usage.total_tokens),
        cost_usd: usage.cost_usd,
        seconds,
        ..open(run, "")
    }
}

/// Whether `run` has ended.
pub(crate) fn ended(run: &EvalRun) -> bool {
    run.state != RUNNING && run.state != super::NOT_STARTED
}

/// The middle value (the mean of the middle two for an even count; 0 for none).
pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// The unbiased estimate of pass@k from `n` runs with `c` passes: the chance that at least
/// one of k runs drawn from them passed, 1 - C(n-c, k) / C(n, k), as a product.
pub(crate) fn pass_at_k(n: u32, c: u32, k: u32) -> f64 {
    if k == 0 || k > n {
        return 0.0;
    }
    if n - c < k {
        return 1.0;
    }
    let none = ((n - c + 1)..=n).fold(1.0, |p, i| p * (1.0 - f64::from(k) / f64::from(i)));
    1.0 - none
}

/// Rounded to 6 decimals, so that the JSON reads as the table does.
pub(crate) fn round(v: f64) -> f64 {
    // `+ 0.0`: an empty sum is -0.0.
    (v * 1e6).round() / 1e6 + 0.0
}

/// The tasks (in suite order) and what `config` did on each.
fn task_results(runs: &[&EvalRun], tasks: &[String]) -> Vec<TaskResult> {
    tasks
        .iter()
        .map(|t| {
            let of_task = runs.iter().filter(|r| &r.task == t && ended(r));
            let (mut ended_n, mut passed) = (0, 0);
            for r in of_task {
                ended_n += 1;
                passed += usize::from(r.passed);
            }
            TaskResult {
                task: t.clone(),
                ended: ended_n,
                passed,
            }
        })
        .collect()
}

fn summary(config: &str, runs: &[EvalRun], tasks: &[String], repeat: u32) -> EvalConfig {
    let mine: Vec<&EvalRun> = runs.iter().filter(|r| r.config == config).collect();
    let done: Vec<&EvalRun> = mine.iter().copied().filter(|r| ended(r)).collect();
    let passed = done.iter().filter(|r| r.passed).count();
    let per_task = task_results(&mine, tasks);
    // pass@k over the tasks whose every run ended: a task half done would weigh as if fewer
    // runs had been asked for.
    let whole: Vec<&TaskResult> = per_task
        .iter()
        .filter(|t| t.ended as u32 >= repeat)
        .collect();
    let pass_at = (1..=repeat)
        .map(|k| PassAtK {
            k,
            value: if whole.is_empty() {
                0.0
            } else {
                round(
                    whole
                        .iter()
                        .map(|t| pass_at_k(t.ended as u32, t.passed as u32, k))
                        .sum::<f64>()
                        / whole.len() as f64,
                )
            },
        })
        .collect();
    let mut failures: BTreeMap<&str, usize> = BTreeMap::new();
    for r in done.iter().filter(|r| !r.passed) {
        *failures.entry(r.failure.as_str()).or_default() += 1;
    }
    let mut failures: Vec<FailureCount> = failures
        .into_iter()
        .map(|(reason, runs)| FailureCount {
            reason: reason.to_owned(),
            runs,
        })
        .collect();
    failures.sort_by(|a, b| b.runs.cmp(&a.runs).then(a.reason.cmp(&b.reason)));
    EvalConfig {
        config: config.to_owned(),
        runs: mine.len(),
        ended: done.len(),
        passed,
        pass_rate: if done.is_empty() {
            0.0
        } else {
            round(passed as f64 / done.len() as f64)
        },
        pass_at_k: pass_at,
        median_turns: median(done.iter().map(|r| f64::from(r.turns)).collect()),
        median_seconds: round(median(done.iter().map(|r| r.seconds).collect())),
        median_cost_usd: round(median(done.iter().map(|r| r.cost_usd).collect())),
        total_tokens: done.iter().map(|r| r.total_tokens).sum(),
        cost_usd: round(done.iter().map(|r| r.cost_usd).sum()),
        failures,
        tasks: per_task,
    }
}

fn rate(t: &TaskResult) -> Option<f64> {
    (t.ended > 0).then(|| t.passed as f64 / t.ended as f64)
}

fn compare(a: &EvalConfig, b: &EvalConfig) -> EvalCompare {
    let tasks = a
        .tasks
        .iter()
        .zip(&b.tasks)
        .map(|(ta, tb)| TaskDiff {
            task: ta.task.clone(),
            a: ta.clone(),
            b: tb.clone(),
            verdict: match (rate(ta), rate(tb)) {
                (Some(ra), Some(rb)) if rb > ra + 1e-9 => "better",
                (Some(ra), Some(rb)) if rb < ra - 1e-9 => "worse",
                (Some(_), Some(_)) => "same",
                _ => "not_ended",
            }
            .to_owned(),
        })
        .collect();
    EvalCompare {
        a: a.config.clone(),
        b: b.config.clone(),
        pass_rate_delta: round(b.pass_rate - a.pass_rate),
        median_turns_delta: b.median_turns - a.median_turns,
        cost_usd_delta: round(b.cost_usd - a.cost_usd),
        tasks,
    }
}

/// What the report is about, beside its runs.
pub(crate) struct Header<'a> {
    pub(crate) eval_id: &'a str,
    pub(crate) suite: &'a str,
    pub(crate) repeat: u32,
    pub(crate) tasks: Vec<String>,
    pub(crate) configs: Vec<String>,
    pub(crate) compare: Option<(String, String)>,
    pub(crate) submitted: usize,
    pub(crate) seconds: f64,
}

/// The report of `runs` (every planned run, ended or not).
pub(crate) fn build(header: Header<'_>, runs: Vec<EvalRun>) -> Eval {
    let configs: Vec<EvalConfig> = header
        .configs
        .iter()
        .map(|c| summary(c, &runs, &header.tasks, header.repeat))
        .collect();
    let compare = header.compare.as_ref().and_then(|(a, b)| {
        let a = configs.iter().find(|c| &c.config == a)?;
        let b = configs.iter().find(|c| &c.config == b)?;
        Some(compare(a, b))
    });
    Eval {
        eval_id: header.eval_id.to_owned(),
        suite: header.suite.to_owned(),
        repeat: header.repeat,
        complete: runs.iter().all(ended),
        submitted: header.submitted,
        seconds: round(header.seconds),
        configs,
        compare,
        runs,
    }
}

fn percent(v: f64) -> String {
    format!("{:.0}%", v * 100.0)
}

/// The report for people: a table per configuration, the failures, the comparison.
pub(crate) fn render(eval: &Eval) -> String {
    let ended: usize = eval.configs.iter().map(|c| c.ended).sum();
    let planned: usize = eval.configs.iter().map(|c| c.runs).sum();
    let mut out = format!(
        "evaluation {} (suite {}, repeat {}): {ended} of {planned} runs ended, {} started now, \
         {:.1} s\n\n",
        eval.eval_id, eval.suite, eval.repeat, eval.submitted, eval.seconds
    );
    let width = eval
        .configs
        .iter()
        .map(|c| c.config.chars().count())
        .max()
        .unwrap_or(0)
        .max(6);
    let ks: String = (1..=eval.repeat)
        .map(|k| format!("  {:>7}", format!("pass@{k}")))
        .collect();
    out.push_str(&format!(
        "{:<width$}  {:<10}{ks}  {:>6}  {:>9}  {:>10}  {:>8}\n",
        "config", "passed", "turns", "tokens", "cost $", "time s"
    ));
    for c in &eval.configs {
        let ks: String = c
            .pass_at_k
            .iter()
            .map(|p| format!("  {:>7.2}", p.value))
            .collect();
        out.push_str(&format!(
            "{:<width$}  {:<10}{ks}  {:>6}  {:>9}  {:>10.4}  {:>8.1}\n",
            c.config,
            format!(
                "{}/{} {}",
                c.passed,
                c.ended,
                if c.ended == 0 {
                    "-".to_owned()
                } else {
                    percent(c.pass_rate)
                }
            ),
            c.median_turns,
            c.total_tokens,
            c.cost_usd,
            c.median_seconds
        ));
    }
    out.push_str("(turns and time: medians per run; tokens and cost: sums)\n");
    let failing: Vec<&EvalConfig> = eval
        .configs
        .iter()
        .filter(|c| !c.failures.is_empty())
        .collect();
    if !failing.is_empty() {
        out.push_str("\nfailures:\n");
        for c in failing {
            let reasons: Vec<String> = c
                .failures
                .iter()
                .map(|f| format!("{} {}", f.reason, f.runs))
                .collect();
            out.push_str(&format!("  {:<width$}  {}\n", c.config, reasons.join(", ")));
        }
    }
    if let Some(cmp) = &eval.compare {
        out.push_str(&format!(
            "\n{} against {}: pass rate {:+.0} points, median turns {:+}, cost {:+.4} $\n",
            cmp.b,
            cmp.a,
            cmp.pass_rate_delta * 100.0,
            cmp.median_turns_delta,
            cmp.cost_usd_delta
        ));
        let tw = cmp
            .tasks
            .iter()
            .map(|t| t.task.chars().count())
            .max()
            .unwrap_or(0)
            .max(4);
        out.push_str(&format!("  {:<tw$}  {:>8}  {:>8}\n", "task", cmp.a, cmp.b));
        for t in &cmp.tasks {
            out.push_str(&format!(
                "  {:<tw$}  {:>8}  {:>8}  {}\n",
                t.task,
                format!("{}/{}", t.a.passed, t.a.ended),
                format!("{}/{}", t.b.passed, t.b.ended),
                t.verdict
            ));
        }
    }
    if !eval.complete {
        out.push_str(&format!(
            "\nnot every run has ended: `baton eval SUITE --id {}` picks the evaluation up again\n",
            eval.eval_id
        ));
    }
    out
}

#[cfg(test)]
#[path = "report_tests.rs"]
mod tests;
