//! gRPC health service (grpc.health.v1) for Kubernetes probes: NOT_SERVING until the worker is
//! connected to Temporal and polling, and again from the moment it starts shutting down.

use std::net::SocketAddr;

use anyhow::Context;
use tonic::transport::{Server, server::TcpIncoming};
use tonic_health::{ServingStatus, server::HealthReporter};
use tracing::{info, warn};

/// Name of the worker's own health entry (besides the overall "" entry probes ask for).
pub(crate) const SERVICE: &str = "baton.worker";

/// Reports the worker's health.
pub(crate) struct Health {
    reporter: HealthReporter,
}

impl Health {
    /// Binds `addr` (failing at once if it cannot) and serves NOT_SERVING until told otherwise.
    pub(crate) async fn start(addr: SocketAddr) -> anyhow::Result<Self> {
        let (reporter, service) = tonic_health::server::health_reporter();
        let health = Self { reporter };
        health.set(ServingStatus::NotServing).await;
        let incoming = TcpIncoming::bind(addr)
            .with_context(|| format!("cannot listen for health checks on {addr}"))?;
        tokio::spawn(async move {
            if let Err(e) = Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await
            {
                warn!(cause = %e, "health service stopped");
            }
        });
        info!(%addr, "health service listening");
        Ok(health)
    }

    /// Connected and polling.
    pub(crate) async fn serving(&self) {
        self.set(ServingStatus::Serving).await;
    }

    /// Shutting down (or not ready).
    pub(crate) async fn not_serving(&self) {
        self.set(ServingStatus::NotServing).await;
    }

    async fn set(&self, status: ServingStatus) {
        self.reporter.set_service_status("", status).await;
        self.reporter.set_service_status(SERVICE, status).await;
    }
}
