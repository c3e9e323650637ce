//! An evaluation suite: the TOML file `baton eval` reads (tasks and configurations), checked
//! whole before anything starts, and each planned run as the `baton submit` arguments that
//! start it, so that a suite's run is built and checked exactly as `submit` builds and checks
//! one.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

use serde::Deserialize;

use crate::exit::Exit;

/// Longest task, configuration or evaluation id: run ids are `EVAL.TASK.CONFIG.K`.
const MAX_ID_CHARS: usize = 40;

/// A suite file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SuiteFile {
    /// Default: the file's name without `.toml`.
    name: Option<String>,
    /// Default `--repeat`.
    repeat: Option<u32>,
    #[serde(default, rename = "task")]
    tasks: Vec<TaskFile>,
    #[serde(default, rename = "config")]
    configs: Vec<ConfigFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskFile {
    id: String,
    git: Option<String>,
    #[serde(rename = "ref")]
    git_ref: Option<String>,
    dir: Option<PathBuf>,
    prompt: String,
    #[serde(default)]
    verify: Vec<String>,
    verify_attempts: Option<u32>,
    #[serde(default)]
    expect_changed: Vec<String>,
    #[serde(default)]
    flags: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    name: String,
    provider: Option<String>,
    model: Option<String>,
    reasoning_effort: Option<String>,
    instructions: Option<String>,
    policy: Option<PathBuf>,
    max_turns: Option<u32>,
    max_cost_usd: Option<f64>,
    script: Option<String>,
    #[serde(default)]
    flags: Vec<String>,
}

/// Where a task's workspace comes from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Source {
    Git {
        url: String,
        git_ref: Option<String>,
    },
    Dir(PathBuf),
}

/// One task: a workspace, a prompt, and the commands that grade a run of it.
#[derive(Debug, Clone)]
pub(crate) struct Task {
    pub(crate) id: String,
    pub(crate) source: Source,
    pub(crate) prompt: String,
    pub(crate) verify: Vec<String>,
    pub(crate) verify_attempts: Option<u32>,
    /// Paths the run's change set must touch, on top of the verification passing.
    pub(crate) expect_changed: Vec<String>,
    pub(crate) flags: Vec<String>,
}

/// One configuration: the model and how the agent runs.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) name: String,
    pub(crate) provider: Option<String>,
    pub(crate) model: Option<String>,
    pub(crate) reasoning_effort: Option<String>,
    pub(crate) instructions: Option<String>,
    pub(crate) policy: Option<PathBuf>,
    pub(crate) max_turns: Option<u32>,
    pub(crate) max_cost_usd: Option<f64>,
    /// A scripted model's script; `{task}` stands for the task's id.
    pub(crate) script: Option<String>,
    pub(crate) flags: Vec<String>,
}

/// A suite, checked: ids valid and unique, each task with one source and its verification,
/// paths resolved against the suite file's directory, each script there.
#[derive(Debug, Clone)]
pub(crate) struct Suite {
    pub(crate) name: String,
    pub(crate) repeat: Option<u32>,
    pub(crate) tasks: Vec<Task>,
    pub(crate) configs: Vec<Config>,
    /// FNV-1a of the file's bytes: a resumed evaluation must run the same suite.
    pub(crate) digest: String,
}

/// The suite in file `path`.
pub(crate) fn load(path: &Path) -> Result<Suite, Exit> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Exit::usage(format!("cannot read the suite {}: {e}", path.display())))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    parse(&text, base, &stem).map_err(|e| Exit::usage(format!("suite {}: {e}", path.display())))
}

/// The suite in `text`, its relative paths taken from `base`; `stem` names it when the file
/// does not.
pub(crate) fn parse(text: &str, base: &Path, stem: &str) -> Result<Suite, String> {
    let file: SuiteFile = toml::from_str(text).map_err(|e| e.to_string())?;
    let name = file.name.unwrap_or_else(|| stem.to_owned());
    check_id("the suite's name", &name)?;
    if file.repeat == Some(0) {
        return Err("repeat = 0 runs nothing; give 1 or more".to_owned());
    }
    if file.configs.is_empty() {
        return Err(
            "a suite needs at least one [[config]] (docs/src/guide/evaluating.md)".to_owned(),
        );
    }
    let mut ids = BTreeSet::new();
    let mut tasks = Vec::new();
    for t in file.tasks {
        check_id("a task id", &t.id)?;
        if !ids.insert(t.id.clone()) {
            return Err(format!(
                "task '{}' is listed twice; task ids are unique",
                t.id
            ));
        }
        tasks.push(task(t, base)?);
    }
    let mut names = BTreeSet::new();
    let mut configs = Vec::new();
    for c in file.configs {
        check_id("a config name", &c.name)?;
        if !names.insert(c.name.clone()) {
            return Err(format!(
                "config '{}' is listed twice; names are unique",
                c.name
            ));
        }
        configs.push(config(c, base, &tasks)?);
    }
    Ok(Suite {
        name,
        repeat: file.repeat,
        tasks,
        configs,
        digest: digest(text.as_bytes()),
    })
}

fn task(t: TaskFile, base: &Path) -> Result<Task, String> {
    let source = match (t.git, t.dir) {
        (Some(url), None) => Source::Git {
            url,
            git_ref: t.git_ref,
        },
        (None, Some(dir)) if t.git_ref.is_none() => Source::Dir(base.join(dir)),
        (None, Some(_)) => {
            return Err(format!(
                "task '{}': ref goes with git, not dir (a directory is taken as it is)",
                t.id
            ));
        }
        _ => {
            return Err(format!(
                "task '{}' needs exactly one source: git = \"URL\" (with an optional ref) or \
                 dir = \"PATH\"",
                t.id
            ));
        }
    };
    if t.prompt.trim().is_empty() {
        return Err(format!("task '{}' has an empty prompt", t.id));
    }
    if t.verify.is_empty() {
        return Err(format!(
            "task '{}' has no verify commands: an evaluation grades each run by them; add \
             verify = [\"...\"]",
            t.id
        ));
    }
    Ok(Task {
        id: t.id,
        source,
        prompt: t.prompt,
        verify: t.verify,
        verify_attempts: t.verify_attempts,
        expect_changed: t.expect_changed,
        flags: t.flags,
    })
}

fn config(c: ConfigFile, base: &Path, tasks: &[Task]) -> Result<Config, String> {
    let script = match c.script {
        None => None,
        Some(script) => {
            let full = base.join(&script).display().to_string();
            for t in tasks {
                let path = PathBuf::from(full.replace("{task}", &t.id));
                if !path.is_file() {
                    return Err(format!(
                        "config '{}': the script {} (for task '{}') is not a file",
                        c.name,
                        path.display(),
                        t.id
                    ));
                }
            }
            Some(full)
        }
    };
    Ok(Config {
        name: c.name,
        provider: c.provider,
        model: c.model,
        reasoning_effort: c.reasoning_effort,
        instructions: c.instructions,
        policy: c.policy.map(|p| base.join(p)),
        max_turns: c.max_turns,
        max_cost_usd: c.max_cost_usd,
        script,
        flags: c.flags,
    })
}

/// Ids make run ids and labels: letters, digits, `-` and `_`.
pub(crate) fn check_id(what: &str, id: &str) -> Result<(), String> {
    let valid = !id.is_empty()
        && id.chars().count() <= MAX_ID_CHARS
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "{what} '{id}' is not 1 to {MAX_ID_CHARS} letters, digits, '-' or '_' (it is part of \
             run ids and labels)"
        ))
    }
}

/// FNV-1a (64 bits) of `bytes`, in hex: stable across builds, unlike `std`'s hasher.
fn digest(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// One run of an evaluation: task × config × repeat.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Planned {
    pub(crate) run_id: String,
    pub(crate) task: String,
    pub(crate) config: String,
    /// 1-based.
    pub(crate) repeat: u32,
}

/// Label keys an evaluation's runs carry (`baton list --label baton.eval.id=EVAL`).
pub(crate) const LABEL_SUITE: &str = "baton.eval";
pub(crate) const LABEL_ID: &str = "baton.eval.id";
pub(crate) const LABEL_TASK: &str = "baton.eval.task";
pub(crate) const LABEL_DIGEST: &str = "baton.eval.digest";

impl Suite {
    /// Every run of evaluation `eval_id` with `repeat` runs per task and config (`only`: these
    /// configs, when not empty): each task and config once before any twice, so that runs
    /// started first cover the whole suite.
    pub(crate) fn plan(&self, eval_id: &str, repeat: u32, only: &[String]) -> Vec<Planned> {
        let mut runs = Vec::new();
        for k in 1..=repeat {
            for t in &self.tasks {
                for c in self
                    .configs
                    .iter()
                    .filter(|c| only.is_empty() || only.contains(&c.name))
                {
                    runs.push(Planned {
                        run_id: format!("{eval_id}.{}.{}.{k}", t.id, c.name),
                        task: t.id.clone(),
                        config: c.name.clone(),
                        repeat: k,
                    });
                }
            }
        }
        runs
    }

    pub(crate) fn task(&self, id: &str) -> Option<&Task> {
        self.tasks.iter().find(|t| t.id == id)
    }

    pub(crate) fn config(&self, name: &str) -> Option<&Config> {
        self.configs.iter().find(|c| c.name == name)
    }

    /// The `baton submit` arguments (after `baton submit`) that start `run` of evaluation
    /// `eval_id` on `task_queue`.
    pub(crate) fn submit_argv(
        &self,
        eval_id: &str,
        run: &Planned,
        task_queue: &str,
    ) -> Vec<String> {
        let (Some(t), Some(c)) = (self.task(&run.task), self.config(&run.config)) else {
            return Vec::new();
        };
        let mut argv: Vec<String> = Vec::new();
        let mut flag = |name: &str, value: String| {
            argv.push(name.to_owned());
            argv.push(value);
        };
        flag("--id", run.run_id.clone());
        flag("--task-queue", task_queue.to_owned());
        flag("--label", format!("{LABEL_SUITE}={}/{}", self.name, c.name));
        flag("--label", format!("{LABEL_ID}={eval_id}"));
        flag("--label", format!("{LABEL_TASK}={}", t.id));
        flag("--label", format!("{LABEL_DIGEST}={}", self.digest));
        match &t.source {
            Source::Git { url, git_ref } => {
                flag("--git", url.clone());
                if let Some(r) = git_ref {
                    flag("--ref", r.clone());
                }
            }
            Source::Dir(dir) => flag("--workspace-from", dir.display().to_string()),
        }
        for v in &t.verify {
            flag("--verify", v.clone());
        }
        if let Some(n) = t.verify_attempts {
            flag("--verify-attempts", n.to_string());
        }
        c.flags_into(&t.id, &mut argv);
        argv.extend(t.flags.iter().cloned());
        argv.extend(c.flags.iter().cloned());
        argv.push("--".to_owned());
        argv.push(t.prompt.clone());
        argv
    }
}

impl Config {
    /// The `submit` flags of this configuration's model, instructions, limits and approval
    /// (not its free `flags`), with `{task}` in the script standing for `task`.
    pub(crate) fn flags_into(&self, task: &str, argv: &mut Vec<String>) {
        let mut flag = |name: &str, value: String| {
            argv.push(name.to_owned());
            argv.push(value);
        };
        if let Some(p) = &self.provider {
            flag("--provider", p.clone());
        }
        if let Some(m) = &self.model {
            flag("--model", m.clone());
        }
        if let Some(e) = &self.reasoning_effort {
            flag("--reasoning-effort", e.clone());
        }
        if let Some(s) = &self.script {
            flag("--script", s.replace("{task}", task));
        }
        if let Some(i) = &self.instructions {
            flag("--instructions", i.clone());
        }
        if let Some(n) = self.max_turns {
            flag("--max-turns", n.to_string());
        }
        if let Some(usd) = self.max_cost_usd {
            flag("--max-cost", usd.to_string());
        }
        // An evaluation runs unattended: nothing waits for a person unless the config's
        // policy says so.
        match &self.policy {
            Some(p) => flag("--policy", p.display().to_string()),
            None => argv.push("--no-approval".to_owned()),
        }
    }
}

/// FNV-1a of several parts, each ended by a newline: an evaluation's arguments beside its
/// suite.
pub(crate) fn digest_of(parts: &[&str]) -> String {
    digest(parts.join("\n").as_bytes())
}

#[cfg(test)]
#[path = "suite_tests.rs"]
mod tests;
