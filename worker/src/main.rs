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
//! - [`start`]: `run`, phase by phase (connect, storage, services, workers, signals).

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
mod start;
mod storage;

use anyhow::Context;
use tracing::{error, warn};

use settings::{LogFormat, Settings};
#[cfg(test)]
use storage::traversable;

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
    let outcome = start::run(settings).await;
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
