//! What `run` does, phase by phase: connect ([`connect`]), open storage and clear what killed
//! workers left ([`clear_leftovers`]), set up the services the activities share
//! ([`Services`]), build the Temporal workers ([`Workers`]), hand signals to a shutdown task
//! ([`on_signals`]), then poll until stopped. Each phase fails with what to fix; configuration
//! errors are marked `Misconfigured` (exit code 2).

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use baton_activities::{
    HEARTBEAT_THROTTLE,
    llm::{LlmService, Providers},
    mcp::{McpPool, McpService},
    tools::ToolService,
    workspace::WorkspaceService,
};
use baton_codec::BatonCodec;
use baton_store::SharedStore;
use baton_workflows::AgentRun;
use temporalio_client::{
    Client, ClientOptions, Connection, NamespacedClient, envconfig::LoadClientConfigProfileOptions,
};
use temporalio_common::telemetry::TelemetryOptions;
use temporalio_sdk::{Runtime, Worker, WorkerOptions, runtime::RuntimeOptions};
use tokio::signal::unix::{SignalKind, signal};
use tracing::{info, warn};

use crate::health::{self, Health};
use crate::metrics::{self, Metrics};
use crate::observers::{ActivityObserver, Resident, RunObserver};
use crate::senders::{SenderRecorder, SenderStamp, Senders};
use crate::settings::Settings;
use crate::storage::{Storage, open_storage, sandbox_settings};
use crate::{
    ConfigContext, deployment, provider_pause, run_trace, schedule_guard, search_attributes,
};

/// Runs the worker until a signal stops it (or it fails).
pub(crate) async fn run(settings: Settings) -> anyhow::Result<()> {
    // Probes see NOT_SERVING until the worker is connected and polling.
    let health = match settings.health_addr {
        Some(addr) => Some(Arc::new(
            Health::start(addr).await.misconfigured("health_addr")?,
        )),
        None => None,
    };
    let connected = connect(&settings).await?;
    let storage = open_storage(&settings)?;
    clear_leftovers();
    let services = Services::start(&settings, &connected, storage).await?;
    let metrics = metrics::start(&settings).misconfigured("metrics_addr / otel_endpoint")?;
    if let Some(m) = &metrics {
        metrics::spawn_visibility_poller(
            connected.client.clone(),
            settings.task_queue.clone(),
            m.baton.clone(),
            Duration::from_secs(settings.metrics_poll_secs.max(1)),
        );
    }
    let runtime = temporal_runtime(metrics.as_ref())?;
    let mut workers = Workers::build(&settings, &runtime, &connected, &services, metrics)?;
    if let Some(h) = &health {
        h.clone().watch_temporal(connected.client.clone());
    }
    tokio::spawn(deployment::promote(
        connected.client.clone(),
        settings.deployment.clone(),
        connected.identity.clone(),
    ));
    on_signals(&settings, &workers, health.clone())?;
    if let Some(h) = &health {
        h.serving().await;
    }
    info!(
        task_queue = %settings.task_queue,
        temporal = %connected.address,
        identity = %connected.identity,
        workspace_root = %services.workspace_root.display(),
        store = %services.store.describe(),
        snapshots = settings.workspace_snapshots,
        workspace_cache_bytes = settings.workspace_cache_bytes,
        deployment = %settings.deployment.name,
        build_id = %settings.deployment.build_id(),
        "worker started"
    );
    workers.run().await?;
    services.mcp.close_all().await;
    // Every holder of the span queue goes, so the exporter sends what is left and ends.
    drop(workers);
    drop(services.traces);
    if let Some(flush) = services.trace_flush {
        flush.flush().await;
    }
    info!("worker stopped");
    Ok(())
}

/// Removes what workers killed on this host left behind: their tools' temp dirs, and tool
/// processes still running (they must not go on writing into workspaces).
fn clear_leftovers() {
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
}

/// Temporal's runtime on the current tokio runtime, its worker metrics in `metrics`.
fn temporal_runtime(metrics: Option<&Metrics>) -> anyhow::Result<Runtime> {
    let mut telemetry = TelemetryOptions::builder().build();
    telemetry.metrics = metrics.map(|m| m.meter.clone());
    let options = RuntimeOptions::builder()
        .telemetry_options(telemetry)
        .build()
        .map_err(|e| anyhow::anyhow!("bad Temporal runtime options: {e}"))?;
    Runtime::from_current_tokio(options)
        .map_err(|e| anyhow::anyhow!("cannot start the Temporal runtime: {e}"))
}

/// What the activities share: storage, the sandboxed tool service, MCP servers, the model
/// providers' pauses, the GitHub App, the run traces.
struct Services {
    workspace_root: std::path::PathBuf,
    store: SharedStore,
    cache_counters: Option<Arc<baton_store::cached::CacheCounters>>,
    tools: ToolService,
    mcp: McpPool,
    models: baton_activities::llm::ModelTable,
    github_app: Option<Arc<baton_github::App>>,
    pauses: provider_pause::QueuePauses,
    traces: Option<run_trace::Traces>,
    trace_flush: Option<run_trace::TraceFlush>,
}

impl Services {
    async fn start(
        settings: &Settings,
        connected: &Connected,
        storage: Storage,
    ) -> anyhow::Result<Self> {
        let Storage {
            workspace_root,
            store,
            cache_counters,
            local_store,
        } = storage;
        let sandbox =
            sandbox_settings(settings, &connected.frontend, &workspace_root, local_store).await?;
        info!(
            hidden = %sandbox.hidden.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
            "paths sandboxed commands may not read"
        );
        // The providers are built once here to check their settings; each model worker
        // builds its own.
        drop(
            Providers::new(&settings.providers())
                .misconfigured("cannot set up the model providers")?,
        );
        let models = settings.models().misconfigured("[models]")?;
        let github_app = settings
            .git
            .github
            .app(&|name| std::env::var(name).ok())
            .map_err(anyhow::Error::msg)
            .misconfigured("[git.github]")?
            .map(Arc::new);
        fence_tool_env(settings);
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
                let (traces, flush) = run_trace::Traces::start(
                    endpoint,
                    settings.otel.capture_content,
                    &connected.identity,
                );
                info!(endpoint = %endpoint, capture_content = settings.otel.capture_content, "exporting run traces over OTLP/gRPC");
                (Some(traces), Some(flush))
            }
            None => (None, None),
        };
        // A provider's Retry-After pauses its queue for the whole fleet.
        let pauses = provider_pause::QueuePauses::new(
            connected.client.clone(),
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
        Ok(Self {
            workspace_root,
            store,
            cache_counters,
            tools,
            mcp,
            models,
            github_app,
            pauses,
            traces,
            trace_flush,
        })
    }

    /// A model-call service of its own (each worker registers one).
    fn llm_service(&self, settings: &Settings) -> anyhow::Result<LlmService> {
        Ok(LlmService::new(
            Providers::new(&settings.providers())
                .misconfigured("cannot set up the model providers")?,
            self.store.clone(),
        )
        .with_models(self.models.clone())
        .with_inline_bytes(settings.history.inline_bytes)
        .with_pause(Arc::new(self.pauses.clone())))
    }
}

/// Tools get an allow-listed environment (the settings may add names); the variables that hold
/// the worker's secrets never reach one.
fn fence_tool_env(settings: &Settings) {
    use baton_activities::tools::shell::{hide_env, pass_env};
    pass_env(settings.tool_env.iter().cloned());
    // The variables the git settings name hold tokens.
    hide_env(settings.git.secret_env_names());
    // So do the variables the MCP settings name (tokens, keys of MCP servers).
    hide_env(settings.mcp.secret_env_names());
    // Setup commands' secrets reach setup commands only.
    hide_env(settings.environments.secrets.clone());
    for (server, variable) in settings.mcp.unset_env(|name| std::env::var(name).ok()) {
        warn!(
            server = %server,
            variable = %variable,
            "mcp.servers.{server} names the environment variable {variable}, which is not set"
        );
    }
}

/// The Temporal workers of this process: the main one (the workflow and every activity) and
/// one activity-only worker per hosted provider's model queue.
struct Workers {
    main: Worker,
    models: Vec<Worker>,
}

impl Workers {
    fn build(
        settings: &Settings,
        runtime: &Runtime,
        connected: &Connected,
        services: &Services,
        metrics: Option<Metrics>,
    ) -> anyhow::Result<Self> {
        let client = &connected.client;
        let observer = || {
            ActivityObserver::new(metrics.as_ref().map(|m| m.baton.clone()))
                .with_traces(services.traces.clone())
        };
        // Each hosted provider's model calls have a task queue of their own, rate-limited
        // fleet-wide by the server when the settings give a rate.
        let models = model_workers(settings, runtime, client, services, &observer)?;
        let tools = services.tools.clone();
        let mut options = WorkerOptions::new(settings.task_queue.clone())
            .register_workflow::<AgentRun>()
            .map_err(|e| anyhow::anyhow!("cannot register the AgentRun workflow: {e}"))?
            .register_activities(services.llm_service(settings)?)
            .register_activities(tools.clone())
            .register_activities(
                McpService::new(services.mcp.clone()).with_workspaces(tools.clone()),
            )
            .register_activities(baton_activities::progress::ProgressService::new(
                settings
                    .git
                    .github
                    .client(services.github_app.clone(), &|name| {
                        std::env::var(name).ok()
                    }),
            ))
            .register_activities({
                let workspaces = WorkspaceService::new(tools, settings.git.clone())
                    .with_environments(settings.environments.clone())
                    .with_github_app(services.github_app.clone());
                match services.cache_counters.clone() {
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
        // Approval decisions carry the Temporal client identity they came from (history),
        // which approval policies match; see `senders.rs`.
        let senders = Arc::new(Senders::default());
        options.worker_interceptor(SenderRecorder(senders.clone()));
        options.workflow_interceptor(SenderStamp::constructor(senders));
        options.workflow_interceptor(schedule_guard::start(client.clone()));
        if let Some(traces) = &services.traces {
            // After SenderStamp: reads the identity it stamps on approval decisions.
            options.workflow_interceptor(run_trace::RunTracer::constructor(traces.clone()));
        }
        let main = Worker::new(runtime, client.clone(), options)
            .map_err(|e| anyhow::anyhow!("cannot create the worker: {e}"))?;
        Ok(Self { main, models })
    }

    /// Stops every worker's polling (running activities get the grace period).
    fn shutdown(&self) -> impl Fn() + Send + 'static {
        let handles: Vec<_> = std::iter::once(self.main.shutdown_handle())
            .chain(self.models.iter().map(|w| w.shutdown_handle()))
            .collect();
        move || handles.iter().for_each(|s| s())
    }

    /// Polls until every worker has stopped.
    async fn run(&mut self) -> anyhow::Result<()> {
        let models = futures::future::try_join_all(self.models.iter_mut().map(|w| w.run()));
        tokio::try_join!(self.main.run(), models)
            .map_err(|e| anyhow::anyhow!("worker stopped with an error: {e}"))?;
        Ok(())
    }
}

/// One activity-only worker per hosted provider, on the provider's task queue
/// (`activities::model_queue`), whose server-side rate is the provider section's
/// `max_requests_per_second`: model calls are rate-limited for the whole fleet.
fn model_workers(
    settings: &Settings,
    runtime: &Runtime,
    client: &Client,
    services: &Services,
    observer: &dyn Fn() -> ActivityObserver,
) -> anyhow::Result<Vec<Worker>> {
    let mut workers = Vec::new();
    for (provider, rate) in settings.model_queues() {
        let Some(queue) = baton_workflows::activities::model_queue(&settings.task_queue, provider)
        else {
            continue;
        };
        let options = WorkerOptions::new(queue.clone())
            .register_activities(services.llm_service(settings)?)
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

/// SIGTERM or SIGINT: probes see draining, the workers stop polling and running activities get
/// the grace period. A second signal (Ctrl-C again at a terminal) exits at once.
fn on_signals(
    settings: &Settings,
    workers: &Workers,
    health: Option<Arc<Health>>,
) -> anyhow::Result<()> {
    let shutdown = workers.shutdown();
    let mut term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    let grace = settings.graceful_shutdown_secs;
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
        if let Some(h) = &health {
            h.draining().await;
        }
        shutdown();
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
        // Running activities are abandoned and time out on the server, to be retried on
        // another worker.
        warn!("second signal: exiting now without waiting for running activities");
        // Nothing of their calls may go on writing into workspaces: the calls are retried.
        let worker = baton_activities::tools::orphans::this_worker();
        baton_activities::tools::orphans::kill_of_worker(&worker);
        std::process::exit(130);
    });
    Ok(())
}

/// The worker's Temporal client, and what it connected with.
pub(crate) struct Connected {
    client: Client,
    address: String,
    frontend: url::Url,
    identity: String,
}

/// Connects to Temporal (the connection settings, the payload codec, the identity), then
/// checks what would only fail later: the namespace exists and takes these credentials, and
/// baton's search attributes are registered.
pub(crate) async fn connect(settings: &Settings) -> anyhow::Result<Connected> {
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
