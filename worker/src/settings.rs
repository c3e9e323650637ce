//! Worker settings: defaults, then `baton.toml` (or the file named by `BATON_CONFIG`), then
//! `BATON_*` environment variables. The Temporal connection itself follows Temporal's own
//! conventions (`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, profiles) and is not part of this.

use std::{path::PathBuf, time::Duration};

use anyhow::Context;
use serde::Deserialize;

/// Everything a worker can be told.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct Settings {
    /// Path of the settings file (only meaningful as `BATON_CONFIG`).
    pub(crate) config: Option<PathBuf>,
    /// Task queue to poll.
    pub(crate) task_queue: String,
    /// Runs' workspaces live in `<workspace_root>/<run id>`.
    pub(crate) workspace_root: PathBuf,
    /// On SIGTERM/SIGINT, running activities get this long to finish before they are cancelled.
    pub(crate) graceful_shutdown_secs: u64,
    /// How long a workflow task waits on this worker's sticky queue before any worker may take
    /// it (low, so a dead worker's runs move on quickly).
    pub(crate) sticky_queue_timeout_secs: u64,
    /// Workflows kept in this worker's cache.
    pub(crate) max_cached_workflows: usize,
    /// Log format: `text` or `json`.
    pub(crate) log_format: String,
    /// Worker identity shown in Temporal (default: `baton-worker@<host>:<pid>`).
    pub(crate) identity: Option<String>,
    /// OpenAI-compatible provider.
    pub(crate) openai: OpenAiSettings,
}

/// The `[openai]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct OpenAiSettings {
    /// Base URL (`OPENAI_BASE_URL` overrides it).
    pub(crate) base_url: String,
    /// Name of the environment variable holding the API key (the key itself never goes in a
    /// file or a workflow input).
    pub(crate) api_key_env: String,
    /// Timeout of one HTTP request, in seconds.
    pub(crate) request_timeout_secs: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            config: None,
            task_queue: baton_workflows::DEFAULT_TASK_QUEUE.to_owned(),
            workspace_root: PathBuf::from(".baton/workspaces"),
            graceful_shutdown_secs: 30,
            sticky_queue_timeout_secs: 3,
            max_cached_workflows: 1000,
            log_format: "text".to_owned(),
            identity: None,
            openai: OpenAiSettings::default(),
        }
    }
}

impl Default for OpenAiSettings {
    fn default() -> Self {
        Self {
            base_url: baton_activities::llm::openai::DEFAULT_BASE_URL.to_owned(),
            api_key_env: "OPENAI_API_KEY".to_owned(),
            request_timeout_secs: 280,
        }
    }
}

impl Settings {
    /// Loads defaults, the settings file and `BATON_*` variables (`BATON_OPENAI__BASE_URL` for
    /// nested keys).
    pub(crate) fn load() -> anyhow::Result<Self> {
        let file = std::env::var_os("BATON_CONFIG")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("baton.toml"));
        let explicit = std::env::var_os("BATON_CONFIG").is_some();
        let built = config::Config::builder()
            .add_source(config::File::from(file.clone()).required(explicit))
            .add_source(
                config::Environment::with_prefix("BATON")
                    .prefix_separator("_")
                    .separator("__")
                    .try_parsing(true),
            )
            .build()
            .with_context(|| format!("cannot read settings from {}", file.display()))?;
        let settings: Settings = built.try_deserialize().with_context(|| {
            format!(
                "invalid settings (from {} and BATON_* variables); see README \"Configuration\"",
                file.display()
            )
        })?;
        Ok(settings)
    }

    /// The OpenAI base URL: `OPENAI_BASE_URL` wins over the file.
    pub(crate) fn openai_base_url(&self) -> String {
        std::env::var("OPENAI_BASE_URL")
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| self.openai.base_url.clone())
    }

    /// The OpenAI API key, from the environment variable the settings name.
    pub(crate) fn openai_api_key(&self) -> Option<String> {
        std::env::var(&self.openai.api_key_env)
            .ok()
            .filter(|v| !v.is_empty())
    }

    /// Grace period on shutdown.
    pub(crate) fn graceful_shutdown(&self) -> Duration {
        Duration::from_secs(self.graceful_shutdown_secs)
    }
}
