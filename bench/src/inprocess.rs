//! (c) The in-process floor: the same agent loop without Temporal. [`RunState`] is driven step
//! by step in this process; each model call goes through the same conversation store and HTTP
//! provider code as the `llm_generate` activity (to the same mock), each tool call through the
//! same tool code as `run_tool` ([`tools::execute`]). What is left out is exactly what
//! Temporal adds: workflow tasks, activity tasks, payload serialization and history.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail, ensure};
use baton_activities::{
    llm::{ProviderSettings, Providers},
    tools::{self, ToolContext},
};
use baton_core::{RunState, Step, machine::Input};
use baton_proto::{LlmRequest, LlmResponse, RunState as StateName, WorkspaceInstructions};
use baton_store::{StoreSettings, conversation::Conversations};
use baton_tests::MockOpenAi;
use tokio_util::sync::CancellationToken;

use crate::scenario;

/// Timings of one in-process run.
pub(crate) struct InProcessRun {
    /// From creating the run's state to its result.
    pub(crate) wall: Duration,
    /// Milliseconds of each turn: from one model call's start to the next one's (the last to
    /// the result).
    pub(crate) turn_ms: Vec<f64>,
}

/// The activities' machinery, built once like a worker builds it: a local blob store and the
/// providers, with the mock as the OpenAI endpoint.
pub(crate) struct InProcess {
    conversations: Conversations,
    providers: Providers,
    workspace_root: PathBuf,
    _dir: tempfile::TempDir,
}

impl InProcess {
    /// Sets up the store in a temp dir and the providers against `llm` (streaming or not).
    pub(crate) fn new(llm: &MockOpenAi, stream: bool) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("baton-bench-inprocess-")
            .tempdir()
            .context("creating a temp dir")?;
        let blobs = baton_store::open(&StoreSettings {
            dir: dir.path().join("blobs"),
            ..Default::default()
        })?;
        let providers = Providers::new(&ProviderSettings {
            openai_base_url: llm.base_url(),
            openai_stream: stream,
            ..Default::default()
        })?;
        Ok(Self {
            conversations: Conversations::new(Arc::clone(&blobs)),
            providers,
            workspace_root: dir.path().join("workspaces"),
            _dir: dir,
        })
    }

    /// Runs one agent loop of `turns` turns as run `id`.
    pub(crate) async fn run(
        &self,
        llm: &MockOpenAi,
        id: &str,
        turns: u32,
    ) -> anyhow::Result<InProcessRun> {
        scenario::push_replies(llm, turns);
        let workspace = self.workspace_root.join(id);
        scenario::write_notes(&workspace)?;
        let tool_ctx = ToolContext {
            workspace: workspace.clone(),
            timeout: Duration::from_secs(600),
            env: Vec::new(),
            cancel: CancellationToken::new(),
            sandbox: baton_sandbox::Sandbox::off(),
        };
        let started = Instant::now();
        let mut run = RunState::new(id, scenario::spec(turns), now_ms())
            .map_err(|e| anyhow::anyhow!("invalid spec: {e}"))?;
        // What the `read_instructions` activity returns for a workspace without AGENTS.md.
        run.apply(Input::Instructions {
            instructions: Some(WorkspaceInstructions {
                workspace: workspace.display().to_string(),
                ..Default::default()
            }),
            now_ms: now_ms(),
        });
        let mut turn_starts = Vec::new();
        let result = loop {
            match run.next_step(now_ms()) {
                Step::CallLlm(request) => {
                    turn_starts.push(Instant::now());
                    let response = self.generate(request).await?;
                    run.apply(Input::LlmResponse {
                        response,
                        now_ms: now_ms(),
                    });
                }
                Step::RunTools { requests, .. } => {
                    let mut results = Vec::with_capacity(requests.len());
                    for request in requests {
                        let call = request.call.context("a tool request without a call")?;
                        let result = tools::execute(&tool_ctx, &call).await?;
                        ensure!(
                            !result.is_error,
                            "tool call {call:?} failed: {}",
                            result.content
                        );
                        results.push(result);
                    }
                    run.apply(Input::ToolResults {
                        results,
                        now_ms: now_ms(),
                    });
                }
                Step::Finish(result) => break result,
                other => bail!("unexpected step in the in-process loop: {other:?}"),
            }
        };
        let end = Instant::now();
        let wall = started.elapsed();
        ensure!(
            result.status() == StateName::Completed && result.turns == turns,
            "in-process run {id} did not complete {turns} turns: {result:?}"
        );
        turn_starts.push(end);
        let turn_ms = turn_starts
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs_f64() * 1000.0)
            .collect();
        Ok(InProcessRun { wall, turn_ms })
    }

    /// One model call the way the `llm_generate` activity makes it: the by-reference request
    /// is resolved against the conversation store (storing the new items and, once, the system
    /// prompt and tools), the model's view is built, the provider is called, and the reply is
    /// bounded for history.
    async fn generate(&self, request: LlmRequest) -> anyhow::Result<LlmResponse> {
        let resolved = self.conversations.resolve(request).await?;
        let mut response = self.providers.generate(&resolved.request).await?;
        self.conversations
            .complete(&resolved, &mut response)
            .await?;
        Ok(response)
    }
}

/// Wall-clock time in Unix milliseconds (the workflow uses workflow time instead).
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}
