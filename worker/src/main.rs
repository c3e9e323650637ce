//! `baton-worker`: hosts the `AgentRun` workflow and baton's activities on one task queue.
//!
//! Settings come from `baton.toml` and `BATON_*` variables ([`settings`]); the Temporal
//! connection from `TEMPORAL_ADDRESS` / `TEMPORAL_NAMESPACE` / profiles, like the `temporal`
//! CLI. On SIGTERM or SIGINT the worker stops polling, gives running activities the grace
//! period, then exits; a second signal exits at once.
//!
//! - [`settings`]: the typed settings (defaults, `baton.toml`, `BATON_*`).
//! - [`health`]: gRPC health for probes (readiness, liveness).
//! - [`hidden`]: what sandboxed commands may not read (workspaces, store, credential files).
//! - [`metrics`]: the Prometheus exporter (core and baton metrics, visibility poller).
//! - [`observers`]: activity and run observers behind those metrics; the `Resident` interceptor.
//! - [`senders`]: who sent an approval (worker + workflow interceptors).
//! - `otel`: OpenTelemetry trace export (feature `otel`).

mod deployment;
mod health;
mod hidden;
mod metrics;
mod observers;
#[cfg(feature = "otel")]
mod otel;
mod provider_pause;
mod run_trace;
mod schedule_guard;
mod search_attributes;
mod senders;
mod settings;
mod storage;

use std::time::Duration;

use anyhow::Context;
use baton_activities::{
    HEARTBEAT_THROTTLE,
    llm::{LlmService, Providers},
    mcp::{McpPool, McpService},
    tools::ToolService,
    workspace::WorkspaceService,
};
use baton_codec::BatonCodec;
use baton_workflows::AgentRun;
use temporalio_client::{
    Client, ClientOptions, Connection, NamespacedClient, envconfig::LoadClientConfigProfileOptions,
};
use temporalio_common::telemetry::TelemetryOptions;
use temporalio_sdk::{Runtime, Worker, WorkerOptions, runtime::RuntimeOptions};
use tokio::signal::unix::{SignalKind, signal};
use tracing::{error, info, warn};

use observers::{ActivityObserver, Resident, RunObserver};
use senders::{SenderRecorder, SenderStamp, Senders};
use settings::{LogFormat, Settings};
#[cfg(test)]
use storage::traversable;
use storage::{Storage, open_storage, sandbox_settings};

#[tokio::main]
async fn main() {
    let settings = match Settings::load() {
        Ok(s) => s,
        Err(e) => {
            // Logging is not set up yet; a JSON log pipeline still gets a JSON line when the
            // environment asks for one.
            if std::env::var("BATON_LOG_FORMAT").is_ok_and(|f| f.trim() == "json") {
                tracing_subscriber::fmt()
                    .json()
                    .flatten_event(true)
                    .with_writer(std::io::stderr)
                    .init();
                error!(cause = format!("{e:#}"), "worker failed: invalid settings");
            } else {
                eprintln!("baton-worker: {e:#}");
            }
            std::process::exit(2);
        }
    };
    let flush = match init_tracing(&settings) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("baton-worker: {e:#}");
            std::process::exit(2);
        }
    };
    use baton_workflows::workflow::variant;
    match variant::set_from(std::env::var(variant::VARIANT_ENV).ok().as_deref()) {
        Ok(false) => {}
        Ok(true) => warn!(
            "{}={}: this worker runs a TEST variant of the workflow code",
            variant::VARIANT_ENV,
            variant::EXTRA_STEP
        ),
        Err(e) => {
            error!("{e}");
            std::process::exit(2);
        }
    }
    for name in &settings.ignored_env {
        match settings::did_you_mean(name) {
            Some(meant) => tracing::warn!(
                variable = %name,
                did_you_mean = %meant,
                "ignoring {name}, which names no setting: did you mean {meant}?"
            ),
            None => tracing::warn!(
                variable = %name,
                "ignoring {name}, which names no setting (see docs/src/operations/configuration.md)"
            ),
        }
    }
    let outcome = run(settings).await;
    if let Err(e) = &outcome {
        error!(cause = format!("{e:#}"), "worker failed");
    }
    flush.run();
    if let Err(e) = outcome {
        std::process::exit(exit_code(&e));
    }
}

/// The worker's exit code for a start-up or run error: 2 when its configuration must change
/// (settings, keys, store, directories, ports), 1 for everything else (Temporal unreachable, the
/// worker failing while it ran).
fn exit_code(e: &anyhow::Error) -> i32 {
    if e.downcast_ref::<Misconfigured>().is_some() {
        2
    } else {
        1
    }
}

/// Marks an error as the configuration's (exit code 2): used as the error's context.
#[derive(Debug)]
struct Misconfigured(String);

impl std::fmt::Display for Misconfigured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `.misconfigured(...)`: [`anyhow::Context`] whose context marks the configuration's errors.
trait ConfigContext<T> {
    fn misconfigured(self, what: impl Into<String>) -> anyhow::Result<T>;
}

impl<T, E> ConfigContext<T> for Result<T, E>
where
    Result<T, E>: Context<T, E>,
{
    fn misconfigured(self, what: impl Into<String>) -> anyhow::Result<T> {
        self.context(Misconfigured(what.into()))
    }
}

/// Telemetry to flush before the process exits (exported spans with the `otel` feature).
#[derive(Default)]
struct Flush {
    #[cfg(feature = "otel")]
    traces: Option<otel::Traces>,
}

impl Flush {
    fn run(self) {
        #[cfg(feature = "otel")]
        if let Some(traces) = self.traces {
            traces.shutdown();
        }
    }
}

/// Installs the log subscriber: `RUST_LOG` filter (default `info`), text or JSON lines on
/// stderr. JSON lines carry the event's fields at the top level and the enclosing spans under
/// `spans` (activities run in an `activity` span with `run_id`, `turn`, `call_id`). With the
/// `otel` feature and `otel_endpoint` set, spans are also exported over OTLP.
fn init_tracing(settings: &Settings) -> anyhow::Result<Flush> {
    use tracing_subscriber::{Layer, layer::SubscriberExt, util::SubscriberInitExt};
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only on a terminal: a log file or collector gets plain text.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(colour);
    let lines = match settings.log_format {
        LogFormat::Json => lines.json().flatten_event(true).boxed(),
        LogFormat::Text => lines.boxed(),
    };
    let subscriber = tracing_subscriber::registry().with(filter).with(lines);
    #[cfg(feature = "otel")]
    if let Some(endpoint) = &settings.otel_endpoint {
        let (layer, traces) = otel::layer(endpoint)?;
        subscriber.with(layer).init();
        return Ok(Flush {
            traces: Some(traces),
        });
    }
    subscriber.init();
    Ok(Flush::default())
}

async fn run(settings: Settings) -> anyhow::Result<()> {
    // Probes see NOT_SERVING until the worker is connected and polling.
    let health = match settings.health_addr {
        Some(addr) => Some(std::sync::Arc::new(
            health::Health::start(addr)
                .await
                .misconfigured("health_addr")?,
        )),
        None => None,
    };
    let Connected {
        client,
        address,
        frontend,
        identity,
    } = connect(&settings).await?;

    let Storage {
        workspace_root,
        store,
        cache_counters,
        local_store,
    } = open_storage(&settings)?;
    let swept = baton_sandbox::sweep_stale_temp_dirs();
    if swept > 0 {
        info!(
            swept,
            "removed the tool temp dirs of workers that were killed"
        );
    }
    let orphans = baton_activities::tools::orphans::kill_orphans();
    if orphans > 0 {
        warn!(
            killed = orphans,
            "killed tool processes left running by workers that were killed"
        );
    }
    let sandbox = sandbox_settings(&settings, &frontend, &workspace_root, local_store).await?;
    info!(
        hidden = %sandbox.hidden.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
        "paths sandboxed commands may not read"
    );
    let providers =
        Providers::new(&settings.providers()).misconfigured("cannot set up the model providers")?;
    let models = settings.models().misconfigured("[models]")?;
    let github_app = settings
        .git
        .github
        .app(&|name| std::env::var(name).ok())
        .map_err(anyhow::Error::msg)
        .misconfigured("[git.github]")?
        .map(std::sync::Arc::new);

    let metrics = metrics::start(&settings).misconfigured("metrics_addr / otel_endpoint")?;
    let mut telemetry = TelemetryOptions::builder().build();
    telemetry.metrics = metrics.as_ref().map(|m| m.meter.clone());
    let runtime_options = RuntimeOptions::builder()
        .telemetry_options(telemetry)
        .build()
        .map_err(|e| anyhow::anyhow!("bad Temporal runtime options: {e}"))?;
    let runtime = Runtime::from_current_tokio(runtime_options)
        .map_err(|e| anyhow::anyhow!("cannot start the Temporal runtime: {e}"))?;
    if let Some(m) = &metrics {
        metrics::spawn_visibility_poller(
            client.clone(),
            settings.task_queue.clone(),
            m.baton.clone(),
            Duration::from_secs(settings.metrics_poll_secs.max(1)),
        );
    }
    // Tools get an allow-listed environment; the settings may add names.
    baton_activities::tools::shell::pass_env(settings.tool_env.iter().cloned());
    // The variables the git settings name hold tokens: never in a tool's environment.
    baton_activities::tools::shell::hide_env(settings.git.secret_env_names());
    // So do the variables the MCP settings name (tokens, keys of MCP servers).
    baton_activities::tools::shell::hide_env(settings.mcp.secret_env_names());
    // Setup commands' secrets reach setup commands only.
    baton_activities::tools::shell::hide_env(settings.environments.secrets.clone());
    for (server, variable) in settings.mcp.unset_env(|name| std::env::var(name).ok()) {
        warn!(
            server = %server,
            variable = %variable,
            "mcp.servers.{server} names the environment variable {variable}, which is not set"
        );
    }
    // MCP servers start on first use, one connection per server shared by every run.
    let mcp = McpPool::new(settings.mcp.clone());
    mcp.start_reaper();
    if mcp.servers().next().is_some() {
        info!(
            servers = %mcp.servers().collect::<Vec<_>>().join(", "),
            "MCP servers configured"
        );
    }
    let tools = ToolService::new(
        workspace_root.clone(),
        store.clone(),
        settings.workspace_snapshots,
    )
    .with_sandbox(sandbox)
    .with_inline_bytes(settings.history.inline_bytes)
    .with_mcp(mcp.clone())
    .with_kept_workspaces(baton_activities::tools::kept::KeptSettings {
        enabled: settings.workspace_snapshots,
        budget_bytes: settings.workspace_cache_bytes,
        idle: Duration::from_secs(settings.workspace_idle_secs),
    });
    tools.start_workspace_sweeper();
    // One trace per run, when a collector is named.
    let (traces, trace_flush) = match &settings.otel.traces_endpoint {
        Some(endpoint) => {
            let (traces, flush) =
                run_trace::Traces::start(endpoint, settings.otel.capture_content, &identity);
            info!(endpoint = %endpoint, capture_content = settings.otel.capture_content, "exporting run traces over OTLP/gRPC");
            (Some(traces), Some(flush))
        }
        None => (None, None),
    };
    // A provider's Retry-After pauses its queue for the whole fleet.
    let pauses = provider_pause::QueuePauses::new(
        client.clone(),
        settings
            .model_queues()
            .into_iter()
            .filter_map(|(provider, _)| {
                let queue =
                    baton_workflows::activities::model_queue(&settings.task_queue, provider)?;
                Some((provider.to_owned(), queue))
            })
            .collect(),
    );
    pauses.start_sweeper();
    let llm_service = || -> anyhow::Result<LlmService> {
        Ok(LlmService::new(
            Providers::new(&settings.providers())
                .misconfigured("cannot set up the model providers")?,
            store.clone(),
        )
        .with_models(models.clone())
        .with_inline_bytes(settings.history.inline_bytes)
        .with_pause(std::sync::Arc::new(pauses.clone())))
    };
    // Each hosted provider's model calls have a task queue of their own, rate-limited
    // fleet-wide by the server when the settings give a rate.
    let observer = || {
        ActivityObserver::new(metrics.as_ref().map(|m| m.baton.clone())).with_traces(traces.clone())
    };
    let mut model_workers = model_workers(&settings, &runtime, &client, &llm_service, &observer)?;
    drop(providers);
    let mut options = WorkerOptions::new(settings.task_queue.clone())
        .register_workflow::<AgentRun>()
        .map_err(|e| anyhow::anyhow!("cannot register the AgentRun workflow: {e}"))?
        .register_activities(llm_service()?)
        .register_activities(tools.clone())
        .register_activities(McpService::new(mcp.clone()).with_workspaces(tools.clone()))
        .register_activities(baton_activities::progress::ProgressService::new(
            settings
                .git
                .github
                .client(github_app.clone(), &|name| std::env::var(name).ok()),
        ))
        .register_activities({
            let workspaces = WorkspaceService::new(tools, settings.git.clone())
                .with_environments(settings.environments.clone())
                .with_github_app(github_app.clone());
            match cache_counters {
                Some(counters) => workspaces.with_cache_counters(counters),
                None => workspaces,
            }
        })
        .deployment_options(settings.deployment.options())
        .max_cached_workflows(settings.max_cached_workflows)
        .sticky_queue_schedule_to_start_timeout(Duration::from_secs(
            settings.sticky_queue_timeout_secs.max(1),
        ))
        .graceful_shutdown_period(settings.graceful_shutdown())
        // Each heartbeat of the activities is sent (the default throttles to 0.8 x the
        // heartbeat timeout, which would leave a 4 s timeout a 0.8 s margin), a streaming
        // model call's up to ten a second (what `baton watch` shows as it streams).
        .max_heartbeat_throttle_interval(HEARTBEAT_THROTTLE)
        .activity_inbound_interceptor(observer())
        .build();
    if let Some(m) = &metrics {
        options.workflow_interceptor(RunObserver::constructor(m.baton.clone()));
    }
    options.workflow_interceptor(Resident::constructor());
    // Approval decisions carry the Temporal client identity they came from (history), which
    // approval policies match; see `senders.rs`.
    let senders = std::sync::Arc::new(Senders::default());
    options.worker_interceptor(SenderRecorder(senders.clone()));
    options.workflow_interceptor(SenderStamp::constructor(senders));
    options.workflow_interceptor(schedule_guard::start(client.clone()));
    if let Some(traces) = &traces {
        // After SenderStamp: reads the identity it stamps on approval decisions.
        options.workflow_interceptor(run_trace::RunTracer::constructor(traces.clone()));
    }
    if let Some(h) = &health {
        h.clone().watch_temporal(client.clone());
    }
    tokio::spawn(deployment::promote(
        client.clone(),
        settings.deployment.clone(),
        identity.clone(),
    ));
    let mut worker = Worker::new(&runtime, client, options)
        .map_err(|e| anyhow::anyhow!("cannot create the worker: {e}"))?;

    let shutdowns: Vec<_> = std::iter::once(worker.shutdown_handle())
        .chain(model_workers.iter().map(|w| w.shutdown_handle()))
        .collect();
    let shutdown = move || shutdowns.iter().for_each(|s| s());
    let mut term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    let grace = settings.graceful_shutdown_secs;
    let health_on_shutdown = health.clone();
    tokio::spawn(async move {
        let which = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        info!(
            signal = which,
            grace_secs = grace,
            "shutting down: no new tasks, running activities get the grace period"
        );
        if let Some(h) = &health_on_shutdown {
            h.draining().await;
        }
        shutdown();
        // A second signal (Ctrl-C again at a terminal) means now: running activities are
        // abandoned and time out on the server, to be retried on another worker.
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
        warn!("second signal: exiting now without waiting for running activities");
        // Nothing of their calls may go on writing into workspaces: the calls are retried.
        let worker = baton_activities::tools::orphans::this_worker();
        baton_activities::tools::orphans::kill_of_worker(&worker);
        std::process::exit(130);
    });
    if let Some(h) = &health {
        h.serving().await;
    }

    info!(
        task_queue = %settings.task_queue,
        temporal = %address,
        identity = %identity,
        workspace_root = %workspace_root.display(),
        store = %store.describe(),
        snapshots = settings.workspace_snapshots,
        workspace_cache_bytes = settings.workspace_cache_bytes,
        deployment = %settings.deployment.name,
        build_id = %settings.deployment.build_id(),
        "worker started"
    );
    let model_runs = futures::future::try_join_all(model_workers.iter_mut().map(|w| w.run()));
    tokio::try_join!(worker.run(), model_runs)
        .map_err(|e| anyhow::anyhow!("worker stopped with an error: {e}"))?;
    mcp.close_all().await;
    // Every holder of the span queue goes, so the exporter sends what is left and ends.
    drop(worker);
    drop(model_workers);
    drop(traces);
    if let Some(flush) = trace_flush {
        flush.flush().await;
    }
    info!("worker stopped");
    Ok(())
}

/// One activity-only worker per hosted provider, on the provider's task queue
/// (`activities::model_queue`), whose server-side rate is the provider section's
/// `max_requests_per_second`: model calls are rate-limited for the whole fleet.
fn model_workers(
    settings: &Settings,
    runtime: &Runtime,
    client: &Client,
    llm_service: &dyn Fn() -> anyhow::Result<LlmService>,
    observer: &dyn Fn() -> ActivityObserver,
) -> anyhow::Result<Vec<Worker>> {
    let mut workers = Vec::new();
    for (provider, rate) in settings.model_queues() {
        let Some(queue) = baton_workflows::activities::model_queue(&settings.task_queue, provider)
        else {
            continue;
        };
        let options = WorkerOptions::new(queue.clone())
            .register_activities(llm_service()?)
            .deployment_options(settings.deployment.options())
            .graceful_shutdown_period(settings.graceful_shutdown())
            .max_heartbeat_throttle_interval(HEARTBEAT_THROTTLE)
            .maybe_max_task_queue_activities_per_second(rate)
            .activity_inbound_interceptor(observer())
            .build();
        let worker = Worker::new(runtime, client.clone(), options)
            .map_err(|e| anyhow::anyhow!("cannot create the worker of {queue}: {e}"))?;
        if let Some(rate) = rate {
            info!(provider, task_queue = %queue, max_requests_per_second = rate, "model calls rate-limited fleet-wide");
        }
        workers.push(worker);
    }
    Ok(workers)
}

/// The worker's Temporal client, and what it connected with.
struct Connected {
    client: Client,
    address: String,
    frontend: url::Url,
    identity: String,
}

/// Connects to Temporal (the connection settings, the payload codec, the identity), then
/// checks what would only fail later: the namespace exists and takes these credentials, and
/// baton's search attributes are registered.
async fn connect(settings: &Settings) -> anyhow::Result<Connected> {
    let (conn_opts, mut client_opts) =
        ClientOptions::load_from_config(LoadClientConfigProfileOptions::default())
            .map_err(|e| anyhow::anyhow!("{e:?}"))
            .misconfigured("cannot load the Temporal connection settings (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, profile)")?;
    // Payload encryption (docs/src/security/codec.md): the SDK worker takes the data converter
    // from the client.
    match baton_codec::Keyring::from_env()
        .misconfigured("cannot load the payload encryption keys")?
    {
        Some(keys) => {
            info!(
                active_key = keys.active_id(),
                keys = keys.ids().count(),
                "payload encryption on"
            );
            client_opts.data_converter = baton_codec::data_converter(BatonCodec::new(keys));
        }
        None => info!("payload encryption off (no {})", baton_codec::KEYS_ENV),
    }
    let address = conn_opts.target.to_string();
    let frontend = conn_opts.target.clone();
    let mut conn_opts = conn_opts;
    let identity = settings.identity.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/etc/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_else(|_| "localhost".to_owned());
        format!("baton-worker@{host}:{}", std::process::id())
    });
    conn_opts.identity = identity.clone();
    let connection = Connection::connect(conn_opts).await.with_context(|| {
        format!(
            "cannot reach Temporal at {address}: start a dev server with `temporal server start-dev` or set TEMPORAL_ADDRESS"
        )
    })?;
    let client =
        Client::new(connection, client_opts).context("cannot create the Temporal client")?;
    // A namespace that does not exist would only show once the worker polls (after "worker
    // started"): say so now, as the configuration's error it is.
    match health::describe_namespace(&client, Duration::from_secs(30)).await {
        Err(Some(status)) if status.code() == tonic::Code::NotFound => {
            return Err(anyhow::anyhow!("{}", status.message())).misconfigured(format!(
                "namespace '{}' does not exist on {address}; set TEMPORAL_NAMESPACE (or the \
                 profile's namespace) to an existing one, or create it (`temporal operator \
                 namespace create`)",
                client.namespace()
            ));
        }
        Err(Some(status))
            if status.code() == tonic::Code::PermissionDenied
                || status.code() == tonic::Code::Unauthenticated =>
        {
            return Err(anyhow::anyhow!("{}", status.message())).misconfigured(format!(
                "Temporal at {address} refused this worker's credentials for namespace '{}' \
                 ({:?}); check TEMPORAL_API_KEY / the TLS client certificate",
                client.namespace(),
                status.code()
            ));
        }
        // Anything else (slow, unavailable) the worker rides out as it polls.
        _ => {}
    }
    match search_attributes::check(&client, settings.register_search_attributes).await {
        search_attributes::Checked::Complete => {}
        search_attributes::Checked::Unknown(why) => warn!(
            cause = %why,
            "could not list the namespace's search attributes; if one of baton's is missing, \
             every run stops at its first workflow task"
        ),
        search_attributes::Checked::Missing(what) => {
            return Err(anyhow::anyhow!(
                "the worker stops here rather than start runs that cannot make progress"
            ))
            .misconfigured(what);
        }
    }
    Ok(Connected {
        client,
        address,
        frontend,
        identity,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(dir: &std::path::Path, bits: u32) {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(bits)).unwrap();
    }

    /// The owner's bits apply to the owner, the group's to the group, the others' to the rest;
    /// the first directory on the way that stops the sandbox user is named with its fix.
    #[test]
    fn the_first_directory_the_sandbox_user_cannot_traverse_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let parent = dir.path().join("parent");
        let root = parent.join("root");
        std::fs::create_dir_all(&root).unwrap();
        mode(dir.path(), 0o711);
        mode(&parent, 0o700);
        let err = format!("{:#}", traversable(&root, 65534, 65534).unwrap_err());
        let parent_at = std::fs::canonicalize(&parent).unwrap();
        assert!(
            err.contains(&format!(
                "the sandbox user (uid 65534, gid 65534) cannot traverse {} (mode 0700",
                parent_at.display()
            )) && err.contains(&format!("run `chmod o+x {}`", parent_at.display())),
            "{err}"
        );
        mode(&parent, 0o701);
        traversable(&root, 65534, 65534).unwrap();
        // The root itself counts too.
        mode(&root, 0o700);
        let err = format!("{:#}", traversable(&root, 65534, 65534).unwrap_err());
        assert!(err.contains("the workspace root (workspace_root)"), "{err}");
        mode(&root, 0o755);
        // A directory of the sandbox user's own, or of its group, with only that class's bit.
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::chown(&parent, Some(65534), Some(0)).unwrap();
            mode(&parent, 0o700);
            traversable(&root, 65534, 65534).unwrap();
            std::os::unix::fs::chown(&parent, Some(0), Some(65534)).unwrap();
            mode(&parent, 0o710);
            traversable(&root, 65534, 65534).unwrap();
            // The group's bit does not apply to the owner: 0070 keeps the owner out.
            std::os::unix::fs::chown(&parent, Some(65534), Some(65534)).unwrap();
            mode(&parent, 0o071);
            assert!(traversable(&root, 65534, 65534).is_err());
        }
    }
}
