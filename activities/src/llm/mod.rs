//! The `llm_generate` activity and its providers.
//!
//! - [`openai`]: OpenAI-compatible Chat Completions.
//! - [`scripted`]: replays a script carried in the run's model config (demo, tests).
//! - [`error`]: the failure taxonomy and its mapping to Temporal failures.

pub mod error;
pub mod openai;
pub mod scripted;

use std::{sync::Arc, time::Duration};

use baton_proto::{LlmRequest, LlmResponse};
use temporalio_macros::activities;
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use tracing::{info, warn};

pub use error::LlmError;

/// How often the activity heartbeats while it waits for the provider.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);

/// Provider settings of a worker. Keys live here, never in workflow inputs.
#[derive(Debug, Clone)]
pub struct ProviderSettings {
    /// Base URL of the OpenAI-compatible endpoint.
    pub openai_base_url: String,
    /// Its API key, if it needs one.
    pub openai_api_key: Option<String>,
    /// Timeout of one HTTP request to a provider.
    pub request_timeout: Duration,
}

impl Default for ProviderSettings {
    fn default() -> Self {
        Self {
            openai_base_url: openai::DEFAULT_BASE_URL.to_owned(),
            openai_api_key: None,
            request_timeout: Duration::from_secs(280),
        }
    }
}

/// The providers a worker can call, by name.
#[derive(Debug)]
pub struct Providers {
    openai: openai::OpenAi,
}

impl Providers {
    /// Builds the providers from worker settings.
    pub fn new(settings: &ProviderSettings) -> Result<Self, LlmError> {
        Ok(Self {
            openai: openai::OpenAi::new(
                settings.openai_base_url.clone(),
                settings.openai_api_key.clone(),
                settings.request_timeout,
            )?,
        })
    }

    /// One model call, dispatched on `request.model.provider`.
    pub async fn generate(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let provider = request
            .model
            .as_ref()
            .map(|m| m.provider.as_str())
            .unwrap_or_default();
        match provider {
            "openai" => self.openai.generate(request).await,
            "scripted" => scripted::generate(request),
            "" => Err(LlmError::Config(
                "the run names no provider; submit with --provider openai|scripted".to_owned(),
            )),
            other => Err(LlmError::Config(format!(
                "unknown provider '{other}'; this worker serves: openai, scripted"
            ))),
        }
    }
}

/// Implements the `llm_generate` activity contract.
pub struct LlmService {
    providers: Providers,
}

impl LlmService {
    /// A service over these providers.
    pub fn new(providers: Providers) -> Self {
        Self { providers }
    }
}

#[activities]
impl LlmService {
    /// Calls the model; heartbeats while waiting; honours cancellation.
    #[activity(definition = baton_workflows::activities::LlmGenerate)]
    pub async fn llm_generate(
        self: Arc<Self>,
        ctx: ActivityContext,
        request: LlmRequest,
    ) -> Result<LlmResponse, ActivityError> {
        let info = ctx.info();
        let run_id = info.workflow_id.clone().unwrap_or_default();
        let attempt = info.attempt;
        let provider = request
            .model
            .as_ref()
            .map(|m| m.provider.clone())
            .unwrap_or_default();
        let call = self.providers.generate(&request);
        tokio::pin!(call);
        let mut beat = tokio::time::interval(HEARTBEAT_EVERY);
        let outcome = loop {
            tokio::select! {
                r = &mut call => break r,
                _ = ctx.cancelled() => return Err(ActivityError::cancelled()),
                _ = beat.tick() => { let _ = ctx.record_heartbeat(()).await; }
            }
        };
        match outcome {
            Ok(response) => {
                info!(run_id, provider, attempt, "llm call finished");
                Ok(response)
            }
            Err(e) => {
                warn!(run_id, provider, attempt, retryable = e.is_retryable(), cause = %e, "llm call failed");
                Err(e.into_activity_error())
            }
        }
    }
}
