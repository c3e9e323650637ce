//! Heartbeat traffic, part of scenario 3 (`baton-bench handoff`): how many
//! `RecordActivityTaskHeartbeat` calls reach the server per minute of a running tool call and
//! per minute of a model call in flight.
//!
//! Counted by the server: a dev server of its own serves its metrics (`--metrics-port`), and
//! its frontend's `service_requests{operation="RecordActivityTaskHeartbeat"}` is read before
//! and after each run. (The worker's own /metrics has no client RPC counters: its connection
//! is made without a metrics meter.) One worker; a run whose one model call takes `secs` (the
//! mock answers late), then a run whose one shell call sleeps `secs`. Any worker build can be
//! measured this way (`BATON_BIN_DIR`).

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, ensure};
use baton_core::tools::SHELL;
use baton_tests::{DevServer, MockOpenAi, MockResponse, free_port, unique};
use temporalio_client::{Client, WorkflowGetResultOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::handoff::{Pool, shell_spec, start};
use crate::{bare, per_turn};

/// The operation label of a heartbeat call on the server's request counter.
const HEARTBEAT_OPERATION: &str = "RecordActivityTaskHeartbeat";

/// Heartbeat calls counted over one model call and one tool call of `secs` each.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Traffic {
    pub(crate) secs: u32,
    pub(crate) llm_calls: f64,
    pub(crate) tool_calls: f64,
}

impl Traffic {
    /// Heartbeat calls per minute of a model call in flight.
    pub(crate) fn per_llm_minute(&self) -> f64 {
        self.llm_calls * 60.0 / f64::from(self.secs.max(1))
    }

    /// Heartbeat calls per minute of a running tool call.
    pub(crate) fn per_tool_minute(&self) -> f64 {
        self.tool_calls * 60.0 / f64::from(self.secs.max(1))
    }
}

/// Measures with one worker of `llm`'s mock on a dev server of its own.
pub(crate) async fn measure(
    llm: &MockOpenAi,
    root: &Path,
    fast_server: bool,
    secs: u32,
) -> anyhow::Result<Traffic> {
    let metrics = format!("127.0.0.1:{}", free_port()?);
    let port = metrics
        .rsplit_once(':')
        .map(|(_, p)| p.to_owned())
        .unwrap_or_default();
    let mut args = vec!["--metrics-port", port.as_str()];
    if fast_server {
        args.extend(["--dynamic-config-value", per_turn::FAST_SERVER_CONFIG]);
    }
    let server = DevServer::start_baton(&args)?;
    let client = bare::connect(&server.url(), "baton-bench").await?;
    let queue = unique("heartbeats");
    let pool = Pool {
        server: &server,
        llm,
        queue: &queue,
        root,
    };
    let mut worker = pool.spawn_with(&[]).await?;
    let before = heartbeat_calls(&metrics).await?;

    llm.clear_queue();
    llm.push_response(
        MockResponse::ok(MockOpenAi::text_reply("done"))
            .delayed(Duration::from_secs(u64::from(secs))),
    );
    run_to_end(&client, &queue, &format!("{queue}-llm")).await?;
    let after_llm = heartbeat_calls(&metrics).await?;

    let arguments = serde_json::json!({ "command": format!("sleep {secs}") }).to_string();
    llm.clear_queue();
    llm.push_tool_calls(&[("call_1", SHELL, arguments.as_str())]);
    llm.push_text("done");
    run_to_end(&client, &queue, &format!("{queue}-tool")).await?;
    let after_tool = heartbeat_calls(&metrics).await?;
    worker.terminate()?;
    ensure!(
        after_tool > after_llm,
        "the server counted no heartbeat of a {secs} s tool call: is its metric still named \
         service_requests{{operation=\"{HEARTBEAT_OPERATION}\"}}?"
    );
    Ok(Traffic {
        secs,
        llm_calls: after_llm - before,
        tool_calls: after_tool - after_llm,
    })
}

async fn run_to_end(client: &Client, queue: &str, id: &str) -> anyhow::Result<()> {
    let handle = start(client, queue, id, shell_spec()).await?;
    handle
        .get_result(WorkflowGetResultOptions::default())
        .await
        .with_context(|| format!("waiting for {id}"))?;
    Ok(())
}

/// The server's count of heartbeat calls so far (`GET /metrics` of its frontend).
async fn heartbeat_calls(addr: &str) -> anyhow::Result<f64> {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to the dev server's metrics at {addr}"))?;
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut text = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut text))
        .await
        .context("reading /metrics")??;
    ensure!(text.starts_with("HTTP/1.1 200"), "GET /metrics: {text}");
    let operation = format!("operation=\"{HEARTBEAT_OPERATION}\"");
    Ok(text
        .lines()
        .filter(|l| l.starts_with("service_requests{"))
        .filter(|l| l.contains(&operation) && l.contains("service_name=\"frontend\""))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum())
}
