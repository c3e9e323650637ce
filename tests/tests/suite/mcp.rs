//! MCP tools in a run end to end against the reference servers installed from npm:
//! server-filesystem over stdio (through a `tee` that logs what the worker sent it) and
//! server-everything over streamable HTTP (behind a relay that counts the listings and calls
//! that reach it), with the OpenAI stand-in as the model so each test asserts on the next model
//! request. `harness` checks the harness itself; `flow` a run calling both servers, approval,
//! `never_ask` and policy rules, content types and metrics, a sandboxed server; `kill` kill -9
//! mid-call; `unavailable` servers that cannot be used.

#![allow(clippy::unwrap_used)]

mod flow;
mod harness;
mod kill;
mod unavailable;

use std::path::{Path, PathBuf};
use std::time::Duration;

use baton_tests::*;
use serde_json::Value;
use tempfile::TempDir;

use crate::common::*;

const T: Duration = Duration::from_secs(60);

/// A dev server, the model stand-in and a temp dir with a data dir for server-filesystem (its
/// one allowed directory, canonical) and the log of what the worker sent it.
struct Setup {
    server: DevServer,
    llm: MockOpenAi,
    dir: TempDir,
    data: PathBuf,
    fs_log: PathBuf,
}

impl Setup {
    fn start() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        let data = data.canonicalize().unwrap();
        Setup {
            server: DevServer::start().unwrap(),
            llm: MockOpenAi::start().unwrap(),
            fs_log: dir.path().join("fs-stdin.log"),
            dir,
            data,
        }
    }

    /// `[mcp.servers.fs]`: server-filesystem on the data dir.
    fn fs(&self) -> String {
        fs_server_toml("fs", &self.data, &self.fs_log).unwrap()
    }

    /// The worker settings file holding `servers`.
    fn config(&self, servers: &[String]) -> PathBuf {
        self.config_with(servers, "")
    }

    /// The worker settings file holding `extra` settings and `servers`.
    fn config_with(&self, servers: &[String], extra: &str) -> PathBuf {
        worker_config(self.dir.path(), servers, extra).unwrap()
    }

    /// A ready worker on `queue` using the model stand-in and the settings file `config`.
    fn worker(&self, queue: &str, config: &Path) -> Worker {
        spawn_worker(&self.server, queue, &self.env(config))
    }

    /// `n` ready workers on `queue` sharing one workspace root (see [`Setup::worker`]).
    fn workers(&self, queue: &str, n: usize, config: &Path) -> Vec<Worker> {
        let workspace = self.dir.path().join("workspace");
        spawn_fleet(&self.server, queue, n, &workspace, &self.env(config))
    }

    /// A worker on `queue` like [`Setup::workers`]' (same workspace root), not waited for.
    fn spawn_worker(&self, queue: &str, config: &Path) -> Worker {
        let workspace = self.dir.path().join("workspace");
        let env = self.env(config);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Worker::spawn_with_workspace(&self.server, queue, &workspace, &env).unwrap()
    }

    fn env<'a>(&'a self, config: &'a Path) -> [(&'a str, String); 2] {
        [
            ("OPENAI_BASE_URL", self.llm.base_url()),
            ("BATON_CONFIG", config.display().to_string()),
        ]
    }

    /// Submits a run with the openai provider and `extra` flags (`--mcp ...`); its id.
    fn submit(&self, queue: &str, name: &str, extra: &[&str]) -> String {
        let mut args = vec!["--provider", "openai"];
        args.extend_from_slice(extra);
        submit(&self.server, queue, &unique(name), &args, "use the tools")
    }

    /// What the server-filesystem process was sent so far.
    fn fs_sent(&self) -> String {
        std::fs::read_to_string(&self.fs_log).unwrap_or_default()
    }
}

fn spawn_worker(server: &DevServer, queue: &str, env: &[(&str, String)]) -> Worker {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    worker(server, queue, &env)
}

fn spawn_fleet(
    server: &DevServer,
    queue: &str,
    n: usize,
    ws: &Path,
    env: &[(&str, String)],
) -> Vec<Worker> {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    fleet(server, queue, n, ws, &env)
}

/// The names of the tools a model request offered.
fn tool_names(request: &CapturedRequest) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
        .collect()
}

/// The definition (`function` object) of tool `name` in a model request.
fn tool_def(request: &CapturedRequest, name: &str) -> Value {
    request.body["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|t| t["function"].clone())
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("no tool {name} in {:?}", tool_names(request)))
}

/// The tool results of a model request: `tool_call_id` -> content.
fn tool_results(request: &CapturedRequest) -> Vec<(String, String)> {
    request
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap_or_default().to_owned(),
                match &m["content"] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                },
            )
        })
        .collect()
}

/// The content of the result of call `id` in a model request.
fn result_of(request: &CapturedRequest, id: &str) -> String {
    tool_results(request)
        .into_iter()
        .find(|(call, _)| call == id)
        .map(|(_, content)| content)
        .unwrap_or_else(|| panic!("no result of {id} in {:?}", request.messages()))
}

/// `baton watch RUN --json` of a finished run: its event lines.
fn events(server: &DevServer, run: &str) -> Vec<Value> {
    baton(server, &["watch", run, "--json"])
        .unwrap()
        .json_lines()
        .unwrap()
}

/// The events of the run's history.
fn history_events(server: &DevServer, run: &str) -> Vec<Value> {
    let history = server.workflow_history_json(run, None).unwrap();
    history["events"].as_array().cloned().unwrap_or_default()
}

/// How many activities of type `name` the run's history schedules.
fn scheduled(server: &DevServer, run: &str, name: &str) -> usize {
    history_events(server, run)
        .iter()
        .filter(|e| e["activityTaskScheduledEventAttributes"]["activityType"]["name"] == name)
        .count()
}

/// The text of the worker's Prometheus endpoint at `addr`.
fn metrics(addr: &str) -> anyhow::Result<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let response = reqwest::get(format!("http://{addr}/metrics")).await?;
        Ok(response.error_for_status()?.text().await?)
    })
}
