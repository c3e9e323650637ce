//! The worker's MCP connections ([`McpPool`]): one per server, shared by every run (requests
//! multiplex on it), made on first use, checked before each use (a stdio server that exited is
//! replaced), retired on any transport or timeout error (the next user reconnects; users
//! already holding it finish), closed after `[mcp] idle_secs` unused and at worker shutdown.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};

use super::client::{self, Connection};
use super::error::McpError;
use super::settings::{McpServerSettings, McpSettings};

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
    slots: Arc<BTreeMap<String, Slot>>,
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
            .map(|name| (name.clone(), Slot::default()))
            .collect();
        Self {
            settings: Arc::new(settings),
            slots: Arc::new(slots),
        }
    }

    /// The servers this worker has.
    pub fn servers(&self) -> impl Iterator<Item = &str> {
        self.slots.keys().map(String::as_str)
    }

    /// The server's settings, or `NotConfigured`.
    fn settings_of(&self, server: &str) -> Result<(&McpServerSettings, &Slot), McpError> {
        match (self.settings.servers.get(server), self.slots.get(server)) {
            (Some(settings), Some(slot)) => Ok((settings, slot)),
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

    /// The server's connection: the pooled one if it is alive, else a new one.
    pub(crate) async fn lease(&self, server: &str) -> Result<Lease, McpError> {
        let (settings, slot) = self.settings_of(server)?;
        let mut live = slot.live.lock().await;
        if let Some(connection) = live.as_ref()
            && connection.is_closed()
        {
            info!(server, "MCP connection closed; reconnecting");
            *live = None;
        }
        let connection = match live.as_ref() {
            Some(connection) => connection.clone(),
            None => {
                let started = Instant::now();
                let connection = Arc::new(client::connect(server, settings).await?);
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
        let Some(slot) = self.slots.get(server) else {
            return;
        };
        let mut live = slot.live.lock().await;
        if live.as_ref().is_some_and(|c| Arc::ptr_eq(c, connection)) {
            warn!(server, cause = why, "MCP connection retired");
            *live = None;
        }
    }

    /// Closes the connections nobody used for `idle` (those in use stay).
    pub async fn close_idle(&self, idle: Duration) -> usize {
        let mut closed = 0;
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
        for (server, slot) in self.slots.iter() {
            if slot.live.lock().await.take().is_some() {
                info!(server = %server, "MCP connection closed: worker shutting down");
            }
        }
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
