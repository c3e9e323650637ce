//! Worker settings: defaults, then `baton.toml` (or the file named by `BATON_CONFIG`), then
//! `BATON_*` environment variables. The Temporal connection itself follows Temporal's own
//! conventions (`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, profiles) and is not part of this.

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use anyhow::Context;
use baton_activities::llm::RetryBudget;
use serde::Deserialize;

/// Everything a worker can be told.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct Settings {
    /// Path of the settings file (only meaningful as `BATON_CONFIG`); after [`Settings::load`],
    /// the file the settings were read from (`baton.toml` when none was named; it may not
    /// exist).
    pub(crate) config: Option<PathBuf>,
    /// Task queue to poll.
    pub(crate) task_queue: String,
    /// Runs' workspaces live in `<workspace_root>/<run id>`.
    pub(crate) workspace_root: PathBuf,
    /// Snapshot a run's workspace to the blob store after every mutating tool call, and
    /// restore it on a worker whose copy is missing or older (default true). Turn off when all
    /// workers share one volume for `workspace_root`.
    pub(crate) workspace_snapshots: bool,
    /// The disk the workspaces of this worker may take: idle ones beyond it
    /// are removed, least recently used first; a new run takes over the idle tree closest to
    /// its snapshot. Only with `workspace_snapshots` (default 10 GiB).
    pub(crate) workspace_cache_bytes: u64,
    /// A workspace unused this long is idle (may be reused or removed); one whose run finished
    /// is idle at once (default 600).
    pub(crate) workspace_idle_secs: u64,
    /// The blob store (`[store]`): conversations, full tool outputs, workspace snapshots.
    /// Every worker of a task queue must use the same one.
    pub(crate) store: baton_store::StoreSettings,
    /// On SIGTERM/SIGINT, running activities get this long to finish before they are cancelled.
    pub(crate) graceful_shutdown_secs: u64,
    /// How long a workflow task waits on this worker's sticky queue before any worker may take
    /// it (low, so a dead worker's runs move on quickly).
    pub(crate) sticky_queue_timeout_secs: u64,
    /// Workflows kept in this worker's cache.
    pub(crate) max_cached_workflows: usize,
    /// Git (`[git]`): commit author, credentials per host (by environment variable name),
    /// the GitHub API for pull requests.
    pub(crate) git: baton_activities::git::GitSettings,
    /// Repository environments (`[environments]`): the secrets setup commands may
    /// ask for, the image facts of the cache key, pinned environments per repository.
    pub(crate) environments: baton_activities::workspace::EnvironmentSettings,
    /// Log format: `text` (default) or `json` (one JSON object per line).
    pub(crate) log_format: LogFormat,
    /// Worker identity shown in Temporal (default: `baton-worker@<host>:<pid>`).
    pub(crate) identity: Option<String>,
    /// Address of the gRPC health service for probes, e.g. `0.0.0.0:8081` (default: off).
    pub(crate) health_addr: Option<std::net::SocketAddr>,
    /// Address of the Prometheus endpoint (`GET /metrics`), e.g. `127.0.0.1:9464` (default:
    /// off).
    pub(crate) metrics_addr: Option<std::net::SocketAddr>,
    /// How often the worker counts open runs and pending approvals in Temporal visibility for
    /// the metrics gauges, in seconds.
    pub(crate) metrics_poll_secs: u64,
    /// OTLP/HTTP collector to push traces and metrics to, e.g. `http://otel-collector:4318`
    /// (default: off; needs a worker built with the `otel` feature; exclusive with
    /// `metrics_addr`).
    pub(crate) otel_endpoint: Option<String>,
    /// Run the tool processes of runs that ask for a sandbox unsandboxed (with a warning) when
    /// this host cannot sandbox them (no Landlock), instead of failing those calls (default
    /// false). See docs/src/security/sandbox.md.
    pub(crate) allow_unsandboxed: bool,
    /// Honour runs submitted with `--sandbox off` (default false: their shell calls fail
    /// with a message saying so).
    pub(crate) allow_sandbox_off: bool,
    /// Create baton's search attributes on the namespace at start-up when they are missing
    /// (default false: the worker exits 2 naming them and the commands that create them).
    pub(crate) register_search_attributes: bool,
    /// Worker Versioning (`[deployment]`: `name`, `build_id`, `promote`); see `deployment.rs`.
    pub(crate) deployment: crate::deployment::DeploymentSettings,
    /// The uid sandboxed tool processes run as when the worker runs as root (default 65534,
    /// `nobody`; 0 keeps root, which no process limit binds).
    pub(crate) sandbox_uid: u32,
    /// The gid sandboxed tool processes run as when the worker runs as root (default 65534).
    pub(crate) sandbox_gid: u32,
    /// Bound on the processes of sandboxed tool calls (`RLIMIT_NPROC`): as the sandbox user,
    /// of all its processes on the host; when the worker is not root, on top of the processes
    /// its uid already has (default 512).
    pub(crate) sandbox_max_processes: u64,
    /// Where this host cannot give tool processes a network namespace (no user namespaces,
    /// no CAP_SYS_ADMIN): give runs that ask for the network the host's network, unfiltered,
    /// instead of refusing their tool processes (default false). See docs/src/security/overview.md.
    pub(crate) allow_unfiltered_network: bool,
    /// Address ranges (CIDRs) the tool proxy treats like the private ones: reached only when
    /// a run's `--allow-host` names them (e.g. a cluster whose pods and services use public
    /// addresses). Loopback, link-local, RFC 1918, CGNAT and unique-local are always private.
    pub(crate) sandbox_private_ranges: Vec<String>,
    /// Worker environment variables passed to tool commands beside the shipped list
    /// (`baton_activities::tools::shell::PASSED_ENV`: PATH, locale, toolchain homes); a name
    /// ending in `*` is a prefix. Names that look like secrets are never passed.
    pub(crate) tool_env: Vec<String>,
    /// What stays in workflow history (`[history]`).
    pub(crate) history: HistorySection,
    /// One trace per run, exported over OTLP/gRPC (`[otel]`).
    pub(crate) otel: OtelSection,
    /// OpenAI-compatible provider.
    pub(crate) openai: ProviderSection,
    /// Anthropic Messages provider.
    pub(crate) anthropic: ProviderSection,
    /// OpenAI Responses provider (`openai-responses`).
    pub(crate) openai_responses: ProviderSection,
    /// The model table (`[models."<name>"]`): context windows, output limits and prices (USD
    /// per million tokens) that override or extend the shipped ones
    /// (`baton_activities::llm::ModelTable::defaults`).
    pub(crate) models: BTreeMap<String, baton_activities::llm::ModelSettings>,
    /// MCP servers (`[mcp]`, `[mcp.servers.NAME]`): what runs may name with `--mcp NAME`.
    pub(crate) mcp: baton_activities::mcp::McpSettings,
    /// `BATON_*` variables that name no setting (e.g. the `BATON_*_SERVICE_HOST` variables
    /// Kubernetes injects for a Service named `baton-...`): ignored, and logged once.
    #[serde(skip)]
    pub(crate) ignored_env: Vec<String>,
}

/// The top-level settings keys: a `BATON_<KEY>` or `BATON_<KEY>__...` variable sets one.
const SETTING_KEYS: [&str; 33] = [
    "config",
    "task_queue",
    "workspace_root",
    "workspace_snapshots",
    "workspace_cache_bytes",
    "workspace_idle_secs",
    "store",
    "graceful_shutdown_secs",
    "sticky_queue_timeout_secs",
    "max_cached_workflows",
    "log_format",
    "identity",
    "health_addr",
    "metrics_addr",
    "metrics_poll_secs",
    "otel_endpoint",
    "allow_unsandboxed",
    "allow_sandbox_off",
    "register_search_attributes",
    "deployment",
    "sandbox_uid",
    "sandbox_gid",
    "sandbox_max_processes",
    "allow_unfiltered_network",
    "sandbox_private_ranges",
    "tool_env",
    "history",
    "otel",
    "openai",
    "anthropic",
    "openai_responses",
    "models",
    "mcp",
];

/// `BATON_*` variables that are read elsewhere, not settings: the payload encryption keys
/// (read by `baton_codec`, never stored in the settings) and the CLI's codec-server token.
const OTHER_BATON_VARS: [&str; 4] = [
    baton_codec::KEYS_ENV,
    baton_codec::ACTIVE_KEY_ENV,
    "BATON_CODEC_TOKEN",
    baton_workflows::workflow::variant::VARIANT_ENV,
];

/// The `BATON_*` variables of `vars` that name a setting, and the names of those that do not.
fn settings_env(
    vars: impl Iterator<Item = (String, String)>,
) -> (config::Map<String, String>, Vec<String>) {
    let mut kept = config::Map::new();
    let mut ignored = Vec::new();
    for (name, value) in vars {
        let Some(rest) = name.strip_prefix("BATON_") else {
            continue;
        };
        let key = rest.to_ascii_lowercase();
        let top = key.split("__").next().unwrap_or_default();
        if OTHER_BATON_VARS.contains(&name.as_str()) {
            continue;
        }
        if SETTING_KEYS.contains(&top) {
            kept.insert(name, value);
        } else {
            ignored.push(name);
        }
    }
    ignored.sort();
    (kept, ignored)
}

/// For an ignored `BATON_*` variable, the one it probably meant (`BATON_WORKSPACEROOT` ->
/// `BATON_WORKSPACE_ROOT`): the same letters without underscores, or at most two edits away.
pub(crate) fn did_you_mean(name: &str) -> Option<String> {
    let rest = name.strip_prefix("BATON_")?.to_ascii_lowercase();
    let (top, nested) = match rest.split_once("__") {
        Some((top, nested)) => (top.to_owned(), format!("__{}", nested.to_ascii_uppercase())),
        None => (rest.clone(), String::new()),
    };
    let squeeze = |s: &str| s.replace('_', "");
    SETTING_KEYS
        .iter()
        .map(|key| {
            let distance = if squeeze(key) == squeeze(&top) {
                0
            } else {
                edit_distance(key, &top)
            };
            (distance, key)
        })
        .filter(|(distance, _)| *distance <= 2)
        .min()
        .map(|(_, key)| format!("BATON_{}{nested}", key.to_ascii_uppercase()))
}

/// Levenshtein distance (small strings).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

/// How log lines are written (to stderr).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, with the fields of the enclosing spans (`run_id`, `turn`,
    /// `call_id` in activities).
    Json,
}

/// A provider table (`[openai]`, `[anthropic]`, `[openai_responses]`). Unset keys take the
/// provider's defaults.
#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct ProviderSection {
    /// Base URL (`OPENAI_BASE_URL` / `ANTHROPIC_BASE_URL` override it; `OPENAI_BASE_URL`
    /// both OpenAI sections).
    pub(crate) base_url: Option<String>,
    /// Name of the environment variable holding the API key (default `OPENAI_API_KEY` /
    /// `ANTHROPIC_API_KEY`; `OPENAI_API_KEY` for both OpenAI sections).
    pub(crate) api_key_env: Option<String>,
    /// The key itself, for a settings file mounted from a secret store; the environment
    /// variable wins. Never logged, never part of a workflow input.
    pub(crate) api_key: Option<String>,
    /// Stream responses over SSE (default true).
    pub(crate) stream: Option<bool>,
    /// Timeout of one HTTP request, a whole stream included, in seconds (default 1800).
    pub(crate) request_timeout_secs: Option<u64>,
    /// Longest silence of a stream before it is cut and retried, in seconds (default 300).
    pub(crate) stream_idle_secs: Option<u64>,
    /// Attempts of one model call before the run ends with `provider_error` (default 8).
    pub(crate) max_attempts: Option<u32>,
    /// Wait before the first retry, in seconds; it doubles with each attempt (default 1).
    pub(crate) backoff_initial_secs: Option<u64>,
    /// Cap of the doubling wait, in seconds (default 60).
    pub(crate) backoff_max_secs: Option<u64>,
    /// `anthropic-version` header (Anthropic only; default `2023-06-01`).
    pub(crate) version: Option<String>,
    /// More model-name prefixes that take adaptive thinking (Anthropic only; Opus 4.6/4.7
    /// and Sonnet 4.6 always do).
    pub(crate) adaptive_thinking_models: Option<Vec<String>>,
    /// `anthropic-beta` values sent with every request (Anthropic only; interleaved thinking
    /// is added by itself where a request needs it).
    pub(crate) betas: Option<Vec<String>>,
    /// Model-name prefixes of reasoning models, sent `max_completion_tokens` instead of
    /// `max_tokens` and no `temperature` (OpenAI only; default `o1`, `o3`, `o4`, `gpt-5`).
    pub(crate) reasoning_models: Option<Vec<String>>,
    /// Send the run's `prompt_cache_key` (both OpenAI sections; default: unless the base URL
    /// is Gemini's OpenAI compatibility; turn off for another server that rejects unknown
    /// fields).
    pub(crate) prompt_cache_key: Option<bool>,
    /// The `content` of an assistant message with tool calls and no text (OpenAI only):
    /// `"null"` (what OpenAI documents; the default for OpenAI's own API) or
    /// `"empty_string"` (the default for other base URLs: Ollama and llama-cpp-python refuse
    /// `null`).
    pub(crate) tool_call_content: Option<ToolCallContent>,
    /// The fleet's rate of model calls to this provider, per second: the server-side rate
    /// limit of the provider's task queue (`<task_queue>-llm-<provider>`), which every worker
    /// of the task queue shares (give every worker the same value; the last to poll wins).
    /// Default: none (a provider's 429s are still retried, and a `Retry-After` still pauses
    /// the queue for the whole fleet).
    pub(crate) max_requests_per_second: Option<f64>,
}

/// `[openai] tool_call_content`.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ToolCallContent {
    /// `"content": null`.
    Null,
    /// `"content": ""`.
    EmptyString,
}

impl std::fmt::Debug for ProviderSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderSection")
            .field("base_url", &self.base_url)
            .field("api_key_env", &self.api_key_env)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("stream", &self.stream)
            .field("request_timeout_secs", &self.request_timeout_secs)
            .field("stream_idle_secs", &self.stream_idle_secs)
            .field("max_attempts", &self.max_attempts)
            .field("backoff_initial_secs", &self.backoff_initial_secs)
            .field("backoff_max_secs", &self.backoff_max_secs)
            .field("version", &self.version)
            .field("adaptive_thinking_models", &self.adaptive_thinking_models)
            .field("betas", &self.betas)
            .field("reasoning_models", &self.reasoning_models)
            .field("prompt_cache_key", &self.prompt_cache_key)
            .field("tool_call_content", &self.tool_call_content)
            .field("max_requests_per_second", &self.max_requests_per_second)
            .finish()
    }
}

/// The built-in defaults of a provider.
struct ProviderDefaults {
    base_url: &'static str,
    base_url_env: &'static str,
    api_key_env: &'static str,
}

const OPENAI: ProviderDefaults = ProviderDefaults {
    base_url: baton_activities::llm::openai::DEFAULT_BASE_URL,
    base_url_env: "OPENAI_BASE_URL",
    api_key_env: "OPENAI_API_KEY",
};

/// The Responses API lives on the same host, with the same key, as Chat Completions: the
/// OpenAI SDKs read `OPENAI_BASE_URL` and `OPENAI_API_KEY` for both.
const OPENAI_RESPONSES: ProviderDefaults = ProviderDefaults {
    base_url: baton_activities::llm::responses::DEFAULT_BASE_URL,
    base_url_env: "OPENAI_BASE_URL",
    api_key_env: "OPENAI_API_KEY",
};

const ANTHROPIC: ProviderDefaults = ProviderDefaults {
    base_url: "https://api.anthropic.com",
    base_url_env: "ANTHROPIC_BASE_URL",
    api_key_env: "ANTHROPIC_API_KEY",
};

impl ProviderSection {
    /// The base URL: the environment override, else the file, else the default.
    fn base_url(&self, d: &ProviderDefaults) -> String {
        std::env::var(d.base_url_env)
            .ok()
            .filter(|v| !v.is_empty())
            .or_else(|| self.base_url.clone())
            .unwrap_or_else(|| d.base_url.to_owned())
    }

    /// The API key: the environment variable named by `api_key_env`, else `api_key`.
    fn api_key(&self, d: &ProviderDefaults) -> Option<String> {
        let env = self.api_key_env.as_deref().unwrap_or(d.api_key_env);
        std::env::var(env)
            .ok()
            .filter(|v| !v.is_empty())
            .or_else(|| self.api_key.clone().filter(|k| !k.is_empty()))
    }

    /// The request timeout and retry budget: the keys set, else the defaults.
    fn budget(&self) -> RetryBudget {
        let d = RetryBudget::default();
        let secs = |v: Option<u64>, default: Duration| v.map_or(default, Duration::from_secs);
        RetryBudget {
            request_timeout: secs(self.request_timeout_secs, d.request_timeout),
            max_attempts: self.max_attempts.unwrap_or(d.max_attempts),
            backoff_initial: secs(self.backoff_initial_secs, d.backoff_initial),
            backoff_max: secs(self.backoff_max_secs, d.backoff_max),
            stream_idle: secs(self.stream_idle_secs, d.stream_idle),
        }
    }
}

/// `[otel]`: each run's trace (`invoke_agent`, `chat`, `execute_tool` and `approval` spans,
/// GenAI semantic conventions), exported over OTLP/gRPC; see `run_trace.rs`. Apart from the
/// top-level `otel_endpoint` (the worker's own spans and metrics over OTLP/HTTP, cargo
/// feature `otel`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct OtelSection {
    /// The collector's OTLP/gRPC address, e.g. `http://127.0.0.1:4317` (default: no traces).
    pub(crate) traces_endpoint: Option<String>,
    /// Put the answer's text and tool calls' arguments and outputs on the spans (default
    /// false: they may hold code and secrets the run read).
    pub(crate) capture_content: bool,
}

impl OtelSection {
    fn check(&self) -> anyhow::Result<()> {
        if let Some(endpoint) = &self.traces_endpoint {
            let url = url::Url::parse(endpoint).map_err(|e| {
                anyhow::anyhow!(
                    "otel.traces_endpoint = {endpoint:?} is not a URL ({e}); write e.g. \
                     \"http://127.0.0.1:4317\""
                )
            })?;
            if !matches!(url.scheme(), "http" | "https") {
                anyhow::bail!(
                    "otel.traces_endpoint = {endpoint:?}: OTLP/gRPC needs an http:// or https:// \
                     URL, e.g. \"http://127.0.0.1:4317\""
                );
            }
        }
        Ok(())
    }
}

/// `[history]`: what stays in workflow history.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct HistorySection {
    /// Tool outputs, reply texts and tool-call arguments longer than this many bytes go to the
    /// blob store once; history carries a reference and a short preview (default 1024).
    pub(crate) inline_bytes: usize,
}

impl Default for HistorySection {
    fn default() -> Self {
        Self {
            inline_bytes: baton_store::inline::DEFAULT_INLINE_BYTES,
        }
    }
}

impl HistorySection {
    fn check(&self) -> anyhow::Result<()> {
        use baton_store::inline::{MAX_INLINE_BYTES, MIN_INLINE_BYTES};
        if !(MIN_INLINE_BYTES..=MAX_INLINE_BYTES).contains(&self.inline_bytes) {
            anyhow::bail!(
                "history.inline_bytes = {} is out of range: between {MIN_INLINE_BYTES} and \
                 {MAX_INLINE_BYTES} (content longer than this goes to the blob store; \
                 BATON_HISTORY__INLINE_BYTES sets it too)",
                self.inline_bytes
            );
        }
        Ok(())
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            config: None,
            task_queue: baton_workflows::DEFAULT_TASK_QUEUE.to_owned(),
            workspace_root: PathBuf::from(".baton/workspaces"),
            workspace_snapshots: true,
            workspace_cache_bytes: baton_activities::tools::kept::DEFAULT_CACHE_BYTES,
            workspace_idle_secs: baton_activities::tools::kept::DEFAULT_IDLE.as_secs(),
            store: baton_store::StoreSettings::default(),
            graceful_shutdown_secs: 30,
            sticky_queue_timeout_secs: 3,
            max_cached_workflows: 1000,
            git: baton_activities::git::GitSettings::default(),
            environments: baton_activities::workspace::EnvironmentSettings::default(),
            log_format: LogFormat::Text,
            identity: None,
            health_addr: None,
            metrics_addr: None,
            metrics_poll_secs: 15,
            otel_endpoint: None,
            allow_unsandboxed: false,
            allow_sandbox_off: false,
            register_search_attributes: false,
            deployment: crate::deployment::DeploymentSettings::default(),
            sandbox_uid: baton_sandbox::DEFAULT_SANDBOX_ID,
            sandbox_gid: baton_sandbox::DEFAULT_SANDBOX_ID,
            sandbox_max_processes: baton_sandbox::DEFAULT_MAX_PROCESSES,
            allow_unfiltered_network: false,
            sandbox_private_ranges: Vec::new(),
            tool_env: Vec::new(),
            history: HistorySection::default(),
            otel: OtelSection::default(),
            openai: ProviderSection::default(),
            anthropic: ProviderSection::default(),
            openai_responses: ProviderSection::default(),
            models: BTreeMap::new(),
            mcp: baton_activities::mcp::McpSettings::default(),
            ignored_env: Vec::new(),
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
        let (env, ignored_env) = settings_env(std::env::vars());
        let built = config::Config::builder()
            .add_source(config::File::from(file.clone()).required(explicit))
            .add_source(
                config::Environment::with_prefix("BATON")
                    .prefix_separator("_")
                    .separator("__")
                    .try_parsing(true)
                    .source(Some(env)),
            )
            .build()
            .with_context(|| format!("cannot read settings from {}", file.display()))?;
        let mut settings: Settings = built.try_deserialize().with_context(|| {
            format!(
                "invalid settings (from {} and BATON_* variables); see docs/src/operations/configuration.md",
                file.display()
            )
        })?;
        settings.ignored_env = ignored_env;
        settings.config = Some(file.clone());
        settings.check().with_context(|| {
            format!(
                "invalid settings (from {} and BATON_* variables); see docs/src/operations/configuration.md",
                file.display()
            )
        })?;
        Ok(settings)
    }

    /// The provider sections: the provider's name, the section's key in the settings, the
    /// section.
    fn provider_sections(&self) -> [(&'static str, &'static str, &ProviderSection); 3] {
        use baton_activities::llm::{anthropic, openai, responses};
        [
            (openai::PROVIDER, "openai", &self.openai),
            (anthropic::PROVIDER, "anthropic", &self.anthropic),
            (
                responses::PROVIDER,
                "openai_responses",
                &self.openai_responses,
            ),
        ]
    }

    /// Refuses values the worker must not start with (each error names its key).
    fn check(&self) -> anyhow::Result<()> {
        for (_, key, section) in self.provider_sections() {
            section.budget().check(key)?;
            if let Some(rate) = section.max_requests_per_second
                && !(rate.is_finite() && rate > 0.0)
            {
                anyhow::bail!(
                    "[{key}] max_requests_per_second = {rate}: give a rate above 0 (e.g. 5 or \
                     0.5), or leave it out for no fleet-wide limit"
                );
            }
        }
        self.deployment.check()?;
        self.history.check()?;
        self.otel.check()?;
        self.mcp.check().map_err(anyhow::Error::msg)?;
        self.environments.check().map_err(anyhow::Error::msg)?;
        Ok(())
    }

    /// Each provider with a task queue of its own (`activities::model_queue`): its name and
    /// fleet-wide rate (`max_requests_per_second`), if any.
    pub(crate) fn model_queues(&self) -> Vec<(&'static str, Option<f64>)> {
        self.provider_sections()
            .into_iter()
            .map(|(name, _, section)| (name, section.max_requests_per_second))
            .collect()
    }

    /// Provider settings for the activities.
    pub(crate) fn providers(&self) -> baton_activities::llm::ProviderSettings {
        baton_activities::llm::ProviderSettings {
            openai_base_url: self.openai.base_url(&OPENAI),
            openai_api_key: self.openai.api_key(&OPENAI),
            openai_stream: self.openai.stream.unwrap_or(true),
            openai_reasoning_models: self
                .openai
                .reasoning_models
                .clone()
                .unwrap_or_else(baton_activities::llm::openai::default_reasoning_models),
            openai_prompt_cache_key: self.openai.prompt_cache_key,
            openai_tool_call_content: self.openai.tool_call_content.map(|c| match c {
                ToolCallContent::EmptyString => {
                    baton_activities::llm::openai::ToolCallContent::EmptyString
                }
                ToolCallContent::Null => baton_activities::llm::openai::ToolCallContent::Null,
            }),
            anthropic_base_url: self.anthropic.base_url(&ANTHROPIC),
            anthropic_api_key: self.anthropic.api_key(&ANTHROPIC),
            anthropic_version: self
                .anthropic
                .version
                .clone()
                .unwrap_or_else(|| "2023-06-01".to_owned()),
            anthropic_stream: self.anthropic.stream.unwrap_or(true),
            anthropic_adaptive_thinking_models: self
                .anthropic
                .adaptive_thinking_models
                .clone()
                .unwrap_or_default(),
            anthropic_betas: self.anthropic.betas.clone().unwrap_or_default(),
            openai_responses_base_url: self.openai_responses.base_url(&OPENAI_RESPONSES),
            openai_responses_api_key: self.openai_responses.api_key(&OPENAI_RESPONSES),
            openai_responses_stream: self.openai_responses.stream.unwrap_or(true),
            openai_responses_prompt_cache_key: self.openai_responses.prompt_cache_key,
            budgets: self
                .provider_sections()
                .into_iter()
                .map(|(name, _, section)| (name.to_owned(), section.budget()))
                .collect(),
        }
    }

    /// The model table: the shipped one with `[models]` applied.
    pub(crate) fn models(
        &self,
    ) -> Result<baton_activities::llm::ModelTable, baton_activities::llm::ModelTableError> {
        baton_activities::llm::ModelTable::defaults().with_settings(&self.models)
    }

    /// Sandbox settings for the tool activity; `frontend` = the Temporal frontend's addresses
    /// (resolved and kept up to date by the caller), protected on every port; the worker's own
    /// listening addresses are protected endpoints.
    pub(crate) fn sandbox(
        &self,
        frontend: baton_sandbox::net::ProtectedHosts,
    ) -> anyhow::Result<baton_sandbox::SandboxSettings> {
        let private_ranges = self
            .sandbox_private_ranges
            .iter()
            .map(|range| {
                range.trim().parse::<ipnet::IpNet>().map_err(|e| {
                    anyhow::anyhow!(
                        "sandbox_private_ranges: '{range}' is not a CIDR ({e}); write ranges \
                         like \"10.0.0.0/8\" or \"fd00::/8\""
                    )
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let protected = [
            self.health_addr
                .map(|a| (a, "this worker's health port".to_owned())),
            self.metrics_addr
                .map(|a| (a, "this worker's metrics port".to_owned())),
        ]
        .into_iter()
        .flatten()
        .collect();
        Ok(baton_sandbox::SandboxSettings {
            allow_unsandboxed: self.allow_unsandboxed,
            allow_sandbox_off: self.allow_sandbox_off,
            uid: self.sandbox_uid,
            gid: self.sandbox_gid,
            max_processes: self.sandbox_max_processes.max(1),
            allow_unfiltered_network: self.allow_unfiltered_network,
            guard: std::sync::Arc::new(baton_sandbox::net::NetGuard {
                protected,
                protected_hosts: frontend,
                private_ranges,
                local_addrs: interface_addresses(),
            }),
            ..Default::default()
        })
    }

    /// Grace period on shutdown.
    pub(crate) fn graceful_shutdown(&self) -> Duration {
        Duration::from_secs(self.graceful_shutdown_secs)
    }
}

/// This host's interface addresses (the worker's own ports listen on them too).
fn interface_addresses() -> Vec<std::net::IpAddr> {
    let Ok(interfaces) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    let mut addrs: Vec<std::net::IpAddr> = interfaces
        .filter_map(|i| i.address)
        .filter_map(|a| {
            a.as_sockaddr_in()
                .map(|v4| std::net::IpAddr::V4(v4.ip()))
                .or_else(|| a.as_sockaddr_in6().map(|v6| std::net::IpAddr::V6(v6.ip())))
        })
        .collect();
    addrs.sort();
    addrs.dedup();
    addrs
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod env_tests {
    use super::*;

    #[test]
    fn a_mistyped_variable_gets_a_suggestion() {
        assert_eq!(
            did_you_mean("BATON_WORKSPACEROOT").as_deref(),
            Some("BATON_WORKSPACE_ROOT")
        );
        assert_eq!(
            did_you_mean("BATON_TASK_QEUE").as_deref(),
            Some("BATON_TASK_QUEUE")
        );
        assert_eq!(
            did_you_mean("BATON_STOR__DIR").as_deref(),
            Some("BATON_STORE__DIR")
        );
        assert_eq!(did_you_mean("BATON_SOMETHING_ELSE_ENTIRELY"), None);
    }

    #[test]
    fn only_variables_naming_a_setting_are_read() {
        let vars = [
            ("BATON_TASK_QUEUE", "q"),
            ("BATON_STORE__S3__BUCKET", "b"),
            ("BATON_OPENAI__BASE_URL", "http://x"),
            ("BATON_WORKER_METRICS_SERVICE_HOST", "10.0.0.1"),
            ("BATON_RUN_ID", "r"),
            ("BATON_CODEC_KEYS", "k1=c2VjcmV0"),
            ("PATH", "/bin"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        let (kept, ignored) = settings_env(vars.into_iter());
        let mut names: Vec<&String> = kept.keys().collect();
        names.sort();
        assert_eq!(
            names,
            [
                "BATON_OPENAI__BASE_URL",
                "BATON_STORE__S3__BUCKET",
                "BATON_TASK_QUEUE"
            ]
        );
        assert_eq!(
            ignored,
            ["BATON_RUN_ID", "BATON_WORKER_METRICS_SERVICE_HOST"]
        );
    }

    #[test]
    fn reasoning_models_default_and_are_replaced_by_the_file() {
        assert_eq!(
            read("").providers().openai_reasoning_models,
            ["o1", "o3", "o4", "gpt-5"]
        );
        let mine = read("[openai]\nreasoning_models = [\"o3\", \"my-deployment\"]\n");
        assert_eq!(
            mine.providers().openai_reasoning_models,
            ["o3", "my-deployment"]
        );
        assert_eq!(read("").providers().openai_prompt_cache_key, None);
        let off = read("[openai]\nprompt_cache_key = false\n");
        assert_eq!(off.providers().openai_prompt_cache_key, Some(false));
        let on = read("[openai_responses]\nprompt_cache_key = true\n");
        assert_eq!(on.providers().openai_responses_prompt_cache_key, Some(true));
        use baton_activities::llm::openai::ToolCallContent as Content;
        assert_eq!(read("").providers().openai_tool_call_content, None);
        let ollama = read("[openai]\ntool_call_content = \"empty_string\"\n");
        assert_eq!(
            ollama.providers().openai_tool_call_content,
            Some(Content::EmptyString)
        );
    }

    #[test]
    fn the_responses_section_is_its_own() {
        let settings: Settings = config::Config::builder()
            .add_source(config::File::from_str(
                "[openai]\nstream = true\n[openai_responses]\nstream = false\n",
                config::FileFormat::Toml,
            ))
            .build()
            .unwrap()
            .try_deserialize()
            .unwrap();
        let p = settings.providers();
        assert!(p.openai_stream);
        assert!(!p.openai_responses_stream);
        let (kept, _) = settings_env(
            [("BATON_OPENAI_RESPONSES__STREAM", "false")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .into_iter(),
        );
        assert!(kept.contains_key("BATON_OPENAI_RESPONSES__STREAM"));
    }

    #[test]
    fn model_tables_override_and_extend_the_shipped_ones() {
        let toml = r#"
[models."gpt-4.1"]
input_usd_per_mtok = 1.5

[models."my-org/Local-Coder"]
context_window = 32768
output_usd_per_mtok = 0.25
"#;
        let settings: Settings = config::Config::builder()
            .add_source(config::File::from_str(toml, config::FileFormat::Toml))
            .build()
            .unwrap()
            .try_deserialize()
            .unwrap();
        let table = settings.models().unwrap();
        let gpt41 = table.lookup("gpt-4.1-2025-04-14").unwrap();
        assert_eq!(
            (gpt41.input_usd_per_mtok, gpt41.output_usd_per_mtok),
            (1.5, 8.0)
        );
        let local = table.lookup("my-org/Local-Coder").unwrap();
        assert_eq!(
            (local.context_window, local.output_usd_per_mtok),
            (32_768, 0.25)
        );
        let typo = config::Config::builder()
            .add_source(config::File::from_str(
                "[models.\"gpt-4o\"]\ninput_usd = 1.0\n",
                config::FileFormat::Toml,
            ))
            .build()
            .unwrap()
            .try_deserialize::<Settings>()
            .unwrap_err();
        assert!(typo.to_string().contains("input_usd"), "{typo}");
    }

    fn read(toml: &str) -> Settings {
        config::Config::builder()
            .add_source(config::File::from_str(toml, config::FileFormat::Toml))
            .build()
            .unwrap()
            .try_deserialize()
            .unwrap()
    }

    #[test]
    fn retry_budgets_are_per_provider_section() {
        let defaults = read("").providers();
        assert_eq!(defaults.budget("openai"), RetryBudget::default());
        assert_eq!(
            RetryBudget::default().request_timeout,
            Duration::from_secs(1800)
        );
        assert_eq!(RetryBudget::default().stream_idle, Duration::from_secs(300));
        let idle = read("[openai]\nstream_idle_secs = 60\n").providers();
        assert_eq!(idle.budget("openai").stream_idle, Duration::from_secs(60));
        let s = read(
            "[openai]\nmax_attempts = 2\nbackoff_initial_secs = 3\n\
             [anthropic]\nrequest_timeout_secs = 1800\nbackoff_max_secs = 300\n",
        );
        s.check().unwrap();
        let p = s.providers();
        assert_eq!(
            p.budget("openai"),
            RetryBudget {
                max_attempts: 2,
                backoff_initial: Duration::from_secs(3),
                ..Default::default()
            }
        );
        assert_eq!(
            p.budget("anthropic"),
            RetryBudget {
                request_timeout: Duration::from_secs(1800),
                backoff_max: Duration::from_secs(300),
                ..Default::default()
            }
        );
    }

    #[test]
    fn an_absurd_retry_budget_is_refused_naming_the_key() {
        let refused = |toml: &str| format!("{:#}", read(toml).check().unwrap_err());
        assert_eq!(
            refused("[openai]\nmax_attempts = 0\n"),
            "openai.max_attempts = 0 is out of range: between 1 and 100 \
             (the workflow's attempt limit of the model activities)"
        );
        assert!(
            refused("[anthropic]\nbackoff_initial_secs = 30\nbackoff_max_secs = 10\n")
                .starts_with("anthropic.backoff_max_secs = 10 is out of range"),
        );
        assert!(
            refused("[openai]\nrequest_timeout_secs = 7200\n").starts_with(
                "openai.request_timeout_secs = 7200 is out of range: between 1 and 3300"
            ),
        );
    }

    #[test]
    fn every_provider_the_workflow_queues_has_a_section_and_a_rate() {
        let s = read("[anthropic]\nmax_requests_per_second = 2.5\n");
        s.check().unwrap();
        let queues = s.model_queues();
        let names: Vec<&str> = queues.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, baton_workflows::activities::QUEUED_PROVIDERS);
        assert_eq!(
            queues,
            vec![
                ("openai", None),
                ("anthropic", Some(2.5)),
                ("openai-responses", None)
            ]
        );
        for bad in ["0", "-1", "nan", "inf"] {
            let err = format!(
                "{:#}",
                read(&format!("[openai]\nmax_requests_per_second = {bad}\n"))
                    .check()
                    .unwrap_err()
            );
            assert!(
                err.starts_with("[openai] max_requests_per_second = "),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn an_absurd_inline_limit_is_refused_naming_the_key() {
        assert_eq!(read("").history.inline_bytes, 1024);
        read("[history]\ninline_bytes = 4096\n").check().unwrap();
        for bad in ["0", "100", "65537"] {
            let err = format!(
                "{:#}",
                read(&format!("[history]\ninline_bytes = {bad}\n"))
                    .check()
                    .unwrap_err()
            );
            assert!(
                err.starts_with(&format!(
                    "history.inline_bytes = {bad} is out of range: between 256 and 65536"
                )),
                "{err}"
            );
        }
    }

    #[test]
    fn mcp_servers_are_read_and_checked_naming_the_key() {
        let s = read(
            r#"
[mcp]
idle_secs = 60

[mcp.servers.fs]
command = "node"
args = ["server.js", "/srv"]
env = ["FS_TOKEN"]

[mcp.servers.web]
url = "http://127.0.0.1:3001/mcp"
bearer_token_env = "WEB_TOKEN"
headers = { "X-Api-Key" = "WEB_KEY" }
startup_timeout_secs = 5
"#,
        );
        s.check().unwrap();
        assert_eq!(s.mcp.idle_secs, 60);
        assert_eq!(s.mcp.servers["fs"].args, ["server.js", "/srv"]);
        assert_eq!(
            s.mcp.servers["web"].startup_timeout(),
            Duration::from_secs(5)
        );
        let refused = |toml: &str| format!("{:#}", read(toml).check().unwrap_err());
        assert!(
            refused("[mcp.servers.both]\ncommand = \"x\"\nurl = \"http://h/mcp\"\n")
                .starts_with("mcp.servers.both: set exactly one of `command`"),
        );
        assert!(refused("[mcp.servers.bad__name]\ncommand = \"x\"\n").contains("bad__name"));
        let typo = config::Config::builder()
            .add_source(config::File::from_str(
                "[mcp.servers.fs]\ncommand = \"x\"\nargv = []\n",
                config::FileFormat::Toml,
            ))
            .build()
            .unwrap()
            .try_deserialize::<Settings>()
            .unwrap_err();
        assert!(typo.to_string().contains("argv"), "{typo}");
        let (kept, _) = settings_env(
            [("BATON_MCP__SERVERS__FS__COMMAND", "node")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .into_iter(),
        );
        assert!(kept.contains_key("BATON_MCP__SERVERS__FS__COMMAND"));
    }

    #[test]
    fn the_kubernetes_settings_file_is_valid() {
        let s = read(include_str!("../../deploy/k8s/base/baton.toml"));
        s.check().unwrap();
        assert_eq!(s.providers().budget("anthropic"), RetryBudget::default());
    }
}
