//! The worker's MCP connections ([`McpPool`]): one per server, shared by every run (requests
//! multiplex on it), made on first use, checked before each use (a stdio server that exited is
//! replaced), retired on any transport or timeout error (the next user reconnects; users
//! already holding it finish), closed after `[mcp] idle_secs` unused and at worker shutdown.
//! A `sandbox = true` server has one connection per run and sandbox ([`RunScope`]) instead.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{Instrument, info, warn};

use super::client::{self, Connection};
use super::error::McpError;
use super::settings::{McpServerSettings, McpSettings};

/// An HTTP connection unused this long is pinged before it is handed out.
const PING_AFTER: Duration = Duration::from_secs(15);

/// How long that ping may take.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// A slot per server: its live connection, if any, and when it was last handed out. The
/// async lock makes concurrent first users share one start.
#[derive(Default)]
struct Slot {
    live: tokio::sync::Mutex<Option<Arc<Connection>>>,
    last_used: Mutex<Option<Instant>>,
}

/// MCP connections of this worker, by server. Clones share them.
#[derive(Clone)]
pub struct McpPool {
    settings: Arc<McpSettings>,
    slots: Arc<BTreeMap<String, Arc<Slot>>>,
    /// The connections of `sandbox = true` servers, by server, run id and sandbox.
    runs: Arc<Mutex<BTreeMap<RunKey, Arc<Slot>>>>,
    /// HTTP connections unused this long are pinged first ([`PING_AFTER`]).
    ping_after: Duration,
}

/// The key of a `sandbox = true` server's connection: server, run id, sandbox.
type RunKey = (String, String, String);

/// Where a `sandbox = true` server runs for one run: its workspace and its sandbox.
#[derive(Clone, Debug)]
pub(crate) struct RunScope {
    pub(crate) run_id: String,
    pub(crate) workspace: std::path::PathBuf,
    pub(crate) sandbox: baton_sandbox::Sandbox,
}

impl RunScope {
    /// The pool key of `server`'s connection for this run.
    fn key(&self, server: &str) -> RunKey {
        let sandbox = format!(
            "{}/{}",
            self.sandbox.mode.as_str(),
            self.sandbox.network.as_str()
        );
        (server.to_owned(), self.run_id.clone(), sandbox)
    }
}

impl std::fmt::Debug for McpPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpPool")
            .field("servers", &self.slots.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// A connection handed out for one operation.
pub(crate) struct Lease {
    pub(crate) connection: Arc<Connection>,
}

impl McpPool {
    /// A pool for the servers of `settings` (nothing starts until first used). Call
    /// [`McpPool::start_reaper`] from within a tokio runtime to close idle connections.
    pub fn new(settings: McpSettings) -> Self {
        let slots = settings
            .servers
            .keys()
            .map(|name| (name.clone(), Arc::default()))
            .collect();
        Self {
            settings: Arc::new(settings),
            slots: Arc::new(slots),
            runs: Arc::default(),
            ping_after: PING_AFTER,
        }
    }

    /// The servers this worker has.
    pub fn servers(&self) -> impl Iterator<Item = &str> {
        self.slots.keys().map(String::as_str)
    }

    /// The runs with a connection to a `sandbox = true` server (a process in their workspace).
    pub(crate) fn sandboxed_runs(&self) -> Vec<String> {
        let runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        runs.keys().map(|(_, run, _)| run.clone()).collect()
    }

    /// Whether `server` runs per run, in its workspace and sandbox (`sandbox = true`).
    pub(crate) fn is_sandboxed(&self, server: &str) -> bool {
        self.settings.servers.get(server).is_some_and(|s| s.sandbox)
    }

    /// The server's settings and its slot (for `run` when it is sandboxed), or
    /// `NotConfigured`.
    fn settings_of(
        &self,
        server: &str,
        run: Option<&RunScope>,
    ) -> Result<(&McpServerSettings, Arc<Slot>), McpError> {
        match (self.settings.servers.get(server), self.slots.get(server)) {
            (Some(settings), Some(slot)) if !settings.sandbox => Ok((settings, slot.clone())),
            (Some(settings), Some(_)) => {
                let Some(run) = run else {
                    return Err(McpError::BadSettings {
                        server: server.to_owned(),
                        problem: format!(
                            "mcp.servers.{server} has sandbox = true: it starts in a run's \
                             workspace, and this request named no run"
                        ),
                    });
                };
                let mut runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
                Ok((settings, runs.entry(run.key(server)).or_default().clone()))
            }
            _ => {
                let known: Vec<&str> = self.servers().collect();
                Err(McpError::NotConfigured {
                    server: server.to_owned(),
                    known: if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    },
                })
            }
        }
    }

    /// The server's connection (for `run`, when the server is sandboxed): the pooled one if
    /// it is alive, else a new one.
    pub(crate) async fn lease(
        &self,
        server: &str,
        run: Option<&RunScope>,
    ) -> Result<Lease, McpError> {
        let (settings, slot) = self.settings_of(server, run)?;
        let mut live = slot.live.lock().await;
        if let Some(connection) = live.as_ref()
            && connection.is_closed()
        {
            info!(server, "MCP connection closed; reconnecting");
            *live = None;
        }
        let unused_for = slot
            .last_used
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .map(|at| at.elapsed());
        if let Some(connection) = live.as_ref()
            && connection.is_http()
            && unused_for.is_some_and(|d| d >= self.ping_after)
            && !connection.answers_ping(PING_TIMEOUT).await
        {
            info!(server, "MCP server did not answer a ping; reconnecting");
            *live = None;
        }
        let connection = match live.as_ref() {
            Some(connection) => connection.clone(),
            None => {
                let started = Instant::now();
                // Not in the first user's span: the connection (and rmcp's logs of it)
                // serves every run.
                let span = tracing::info_span!(parent: None, "mcp_connection", server);
                let connection = client::connect(server, settings, run)
                    .instrument(span)
                    .await?;
                let connection = Arc::new(connection);
                info!(
                    server,
                    server_info = %connection.server_info(),
                    pid = connection.process_group(),
                    millis = started.elapsed().as_millis() as u64,
                    "MCP server connected"
                );
                *live = Some(connection.clone());
                connection
            }
        };
        *slot
            .last_used
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        Ok(Lease { connection })
    }

    /// Takes `connection` out of the pool (when it is still the pooled one): the next lease
    /// reconnects. Users holding it finish; the last one closes it.
    pub(crate) async fn retire(&self, server: &str, connection: &Arc<Connection>, why: &str) {
        for slot in self.all_slots() {
            let mut live = slot.live.lock().await;
            if live.as_ref().is_some_and(|c| Arc::ptr_eq(c, connection)) {
                warn!(server, cause = why, "MCP connection retired");
                *live = None;
            }
        }
    }

    /// Every slot: the shared ones and the per-run ones.
    fn all_slots(&self) -> Vec<Arc<Slot>> {
        let runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        self.slots.values().chain(runs.values()).cloned().collect()
    }

    /// Closes the connections nobody used for `idle` (those in use stay).
    pub async fn close_idle(&self, idle: Duration) -> usize {
        let mut closed = 0;
        // Per-run slots nobody used for that long are forgotten (their connection closes).
        let forgotten: Vec<Arc<Slot>> = {
            let mut runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
            let stale: Vec<_> =
                runs.iter()
                    .filter(|(_, slot)| {
                        let unused = slot.live.try_lock().is_ok_and(|live| {
                            live.as_ref().is_none_or(|c| Arc::strong_count(c) == 1)
                        });
                        unused
                            && Arc::strong_count(slot) == 1
                            && slot
                                .last_used
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .is_none_or(|at| at.elapsed() >= idle)
                    })
                    .map(|(key, _)| key.clone())
                    .collect();
            stale.iter().filter_map(|key| runs.remove(key)).collect()
        };
        for slot in forgotten {
            if slot.live.lock().await.take().is_some() {
                info!(
                    idle_secs = idle.as_secs(),
                    "MCP connection of a run closed: idle"
                );
                closed += 1;
            }
        }
        for (server, slot) in self.slots.iter() {
            let last = *slot
                .last_used
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if last.is_none_or(|at| at.elapsed() < idle) {
                continue;
            }
            let mut live = slot.live.lock().await;
            if live.as_ref().is_some_and(|c| Arc::strong_count(c) == 1) {
                info!(server = %server, idle_secs = idle.as_secs(), "MCP connection closed: idle");
                *live = None;
                closed += 1;
            }
        }
        closed
    }

    /// Closes every connection (worker shutdown): stdio servers are stopped.
    pub async fn close_all(&self) {
        for slot in self.all_slots() {
            if slot.live.lock().await.take().is_some() {
                info!("MCP connection closed: worker shutting down");
            }
        }
        self.runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Pings HTTP connections unused for `after` before handing them out (tests).
    #[cfg(test)]
    pub(crate) fn with_ping_after(mut self, after: Duration) -> Self {
        self.ping_after = after;
        self
    }

    /// Closes idle connections every so often, for as long as the runtime runs.
    pub fn start_reaper(&self) {
        let pool = self.clone();
        let idle = self.settings.idle();
        let every = (idle / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                pool.close_idle(idle).await;
            }
        });
    }
}
