//! Connecting to Temporal the way the `temporal` CLI does (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
//! profiles), with errors that say what to do.

use std::time::Duration;

use baton_workflows::AgentRun;
use temporalio_client::{
    Client, ClientOptions, Connection, WorkflowHandle, envconfig::LoadClientConfigProfileOptions,
    errors::WorkflowInteractionError,
};

use crate::exit::Exit;

/// How long to try to reach the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A connected client.
pub(crate) async fn connect() -> Result<Client, Exit> {
    let (mut conn_opts, client_opts) =
        ClientOptions::load_from_config(LoadClientConfigProfileOptions::default())
            .map_err(|e| Exit::usage(format!("invalid Temporal connection settings: {e}")))?;
    let address = conn_opts.target.to_string();
    conn_opts.identity = format!(
        "baton-cli@{}",
        std::env::var("USER").unwrap_or_else(|_| "unknown".to_owned())
    );
    conn_opts.connect_timeout = Some(CONNECT_TIMEOUT);
    let unreachable = |detail: String| {
        Exit::infra(format!(
            "cannot reach Temporal at {address}: {detail}\n  start a local server with \
             `temporal server start-dev` (or `scripts/demo.sh`), or set TEMPORAL_ADDRESS to your \
             cluster's frontend (host:port)"
        ))
    };
    let connection =
        match tokio::time::timeout(CONNECT_TIMEOUT * 2, Connection::connect(conn_opts)).await {
            Err(_) => return Err(unreachable("timed out".to_owned())),
            Ok(Err(e)) => return Err(unreachable(short(&e.to_string()))),
            Ok(Ok(c)) => c,
        };
    Client::new(connection, client_opts)
        .map_err(|e| Exit::infra(format!("cannot create the Temporal client: {e}")))
}

/// A handle on a run (workflow id).
pub(crate) fn handle(client: &Client, run: &str) -> WorkflowHandle<Client, AgentRun> {
    client.get_workflow_handle::<AgentRun>(run.to_owned())
}

/// Maps a describe/signal/cancel error: not found is the user's mistake (2), the rest is
/// infrastructure (5).
pub(crate) fn interaction_error(run: &str, e: WorkflowInteractionError) -> Exit {
    match e {
        WorkflowInteractionError::NotFound(_) => not_found(run),
        other => Exit::infra(format!(
            "Temporal request failed: {}",
            short(&other.to_string())
        )),
    }
}

/// The run does not exist.
pub(crate) fn not_found(run: &str) -> Exit {
    Exit::usage(format!(
        "no run with id '{run}' in this namespace; check the id (and TEMPORAL_NAMESPACE)"
    ))
}

/// First line of an error, without gRPC noise.
pub(crate) fn short(s: &str) -> String {
    s.lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(400)
        .collect()
}
