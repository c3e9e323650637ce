//! The model activity: `llm_generate` and `compact_context` ([`LlmService`]), heartbeating
//! while they wait, and the [`Providers`] they dispatch to by `ModelConfig.provider`, built
//! from the worker's [`ProviderSettings`].

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use baton_core::view;
use baton_proto::{
    CompactRequest, CompactResponse, LlmRequest, LlmResponse, StreamProgress, Usage,
};
use baton_workflows::activities::FailureType;
use temporalio_common::error::ApplicationFailure;
use temporalio_macros::activities;
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use tracing::{info, warn};

use super::{
    LlmError, ModelTable, Provider, RetryBudget, anthropic, cache_key, compact, estimate,
    live::{Live, LiveSink, STREAM_BEAT},
    openai, responses, scripted,
};
use crate::heartbeat::{Heartbeat, until_cancelled};
use baton_store::{
    SharedStore,
    conversation::{ConversationError, Conversations},
};

/// How often a model activity heartbeats: five beats per `LLM_HEARTBEAT` (10 s), so four in a
/// row may be late or lost before the server takes a live call for dead (one
/// `RecordActivityTaskHeartbeat` call each, see `heartbeat`).
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);

/// Provider settings of a worker. Keys live here, never in workflow inputs; `Debug` never
/// prints them.
#[derive(Clone)]
pub struct ProviderSettings {
    /// Base URL of the OpenAI-compatible endpoint.
    pub openai_base_url: String,
    /// Its API key, if it needs one.
    pub openai_api_key: Option<String>,
    /// Whether to stream Chat Completions (default true).
    pub openai_stream: bool,
    /// Model-name prefixes of reasoning models, sent `max_completion_tokens` and no
    /// `temperature` (default [`openai::DEFAULT_REASONING_MODELS`]).
    pub openai_reasoning_models: Vec<String>,
    /// Whether to send the run's `prompt_cache_key` (None: unless the base URL is Gemini's,
    /// [`cache_key::endpoint_takes_prompt_cache_key`]; false for other servers that reject
    /// unknown fields).
    pub openai_prompt_cache_key: Option<bool>,
    /// The `content` of a text-less assistant message with tool calls (None: by the base
    /// URL, [`openai::default_tool_call_content`]: `null` for OpenAI's own API, `""` for
    /// other servers).
    pub openai_tool_call_content: Option<openai::ToolCallContent>,
    /// Base URL of the Anthropic Messages API (default `https://api.anthropic.com`).
    pub anthropic_base_url: String,
    /// Its API key (`x-api-key`); without one the header is not sent.
    pub anthropic_api_key: Option<String>,
    /// The `anthropic-version` header (default `2023-06-01`).
    pub anthropic_version: String,
    /// Whether to stream Messages (default true).
    pub anthropic_stream: bool,
    /// More model-name prefixes that take adaptive thinking (beside
    /// `anthropic::thinking::ADAPTIVE_THINKING_MODELS`).
    pub anthropic_adaptive_thinking_models: Vec<String>,
    /// `anthropic-beta` values sent with every Messages request.
    pub anthropic_betas: Vec<String>,
    /// Base URL of the OpenAI Responses API (default `https://api.openai.com/v1`).
    pub openai_responses_base_url: String,
    /// Its API key (a bearer token), if it needs one.
    pub openai_responses_api_key: Option<String>,
    /// Whether to stream Responses (default true).
    pub openai_responses_stream: bool,
    /// Whether to send the run's `prompt_cache_key` to the Responses API (None: unless the
    /// base URL is Gemini's).
    pub openai_responses_prompt_cache_key: Option<bool>,
    /// Request timeout and retry budget by provider name (`openai`, `anthropic`, ...); a
    /// provider without an entry gets [`RetryBudget::default`].
    pub budgets: BTreeMap<String, RetryBudget>,
}

impl ProviderSettings {
    /// The request timeout and retry budget of `provider`.
    pub fn budget(&self, provider: &str) -> RetryBudget {
        self.budgets.get(provider).copied().unwrap_or_default()
    }
}

impl std::fmt::Debug for ProviderSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = |k: &Option<String>| k.as_ref().map(|_| "<set>");
        f.debug_struct("ProviderSettings")
            .field("openai_base_url", &self.openai_base_url)
            .field("openai_api_key", &key(&self.openai_api_key))
            .field("openai_stream", &self.openai_stream)
            .field("openai_reasoning_models", &self.openai_reasoning_models)
            .field("openai_prompt_cache_key", &self.openai_prompt_cache_key)
            .field("openai_tool_call_content", &self.openai_tool_call_content)
            .field("anthropic_base_url", &self.anthropic_base_url)
            .field("anthropic_api_key", &key(&self.anthropic_api_key))
            .field("anthropic_version", &self.anthropic_version)
            .field("anthropic_stream", &self.anthropic_stream)
            .field(
                "anthropic_adaptive_thinking_models",
                &self.anthropic_adaptive_thinking_models,
            )
            .field("anthropic_betas", &self.anthropic_betas)
            .field("openai_responses_base_url", &self.openai_responses_base_url)
            .field(
                "openai_responses_api_key",
                &key(&self.openai_responses_api_key),
            )
            .field("openai_responses_stream", &self.openai_responses_stream)
            .field(
                "openai_responses_prompt_cache_key",
                &self.openai_responses_prompt_cache_key,
            )
            .field("budgets", &self.budgets)
            .finish()
    }
}

impl Default for ProviderSettings {
    fn default() -> Self {
        Self {
            openai_base_url: openai::DEFAULT_BASE_URL.to_owned(),
            openai_api_key: None,
            openai_stream: true,
            openai_reasoning_models: openai::default_reasoning_models(),
            openai_prompt_cache_key: None,
            openai_tool_call_content: None,
            anthropic_base_url: anthropic::DEFAULT_BASE_URL.to_owned(),
            anthropic_api_key: None,
            anthropic_version: anthropic::DEFAULT_VERSION.to_owned(),
            anthropic_stream: true,
            anthropic_adaptive_thinking_models: Vec::new(),
            anthropic_betas: Vec::new(),
            openai_responses_base_url: responses::DEFAULT_BASE_URL.to_owned(),
            openai_responses_api_key: None,
            openai_responses_stream: true,
            openai_responses_prompt_cache_key: None,
            budgets: BTreeMap::new(),
        }
    }
}

/// The providers a worker can call, by name.
#[derive(Debug)]
pub struct Providers {
    by_name: BTreeMap<&'static str, Box<dyn Provider>>,
    budgets: BTreeMap<String, RetryBudget>,
}

impl Providers {
    /// Builds the providers from worker settings: `openai`, `anthropic`, `openai-responses`,
    /// `scripted`.
    pub fn new(settings: &ProviderSettings) -> Result<Self, LlmError> {
        let openai = openai::OpenAi::new(
            settings.openai_base_url.clone(),
            settings.openai_api_key.clone(),
            settings.budget(openai::PROVIDER).request_timeout,
        )?
        .stream_idle_timeout(settings.budget(openai::PROVIDER).stream_idle)
        .streaming(settings.openai_stream)
        .reasoning_models(settings.openai_reasoning_models.clone())
        .prompt_cache_key(settings.openai_prompt_cache_key.unwrap_or_else(|| {
            cache_key::endpoint_takes_prompt_cache_key(&settings.openai_base_url)
        }))
        .tool_call_content(
            settings
                .openai_tool_call_content
                .unwrap_or_else(|| openai::default_tool_call_content(&settings.openai_base_url)),
        );
        let anthropic = anthropic::Anthropic::new(
            settings.anthropic_base_url.clone(),
            settings.anthropic_api_key.clone(),
            settings.anthropic_version.clone(),
            settings.budget(anthropic::PROVIDER).request_timeout,
        )?
        .stream_idle_timeout(settings.budget(anthropic::PROVIDER).stream_idle)
        .streaming(settings.anthropic_stream)
        .adaptive_thinking_models(settings.anthropic_adaptive_thinking_models.clone())
        .betas(settings.anthropic_betas.clone());
        let responses = responses::OpenAiResponses::new(
            settings.openai_responses_base_url.clone(),
            settings.openai_responses_api_key.clone(),
            settings.budget(responses::PROVIDER).request_timeout,
        )?
        .stream_idle_timeout(settings.budget(responses::PROVIDER).stream_idle)
        .streaming(settings.openai_responses_stream)
        .prompt_cache_key(
            settings
                .openai_responses_prompt_cache_key
                .unwrap_or_else(|| {
                    cache_key::endpoint_takes_prompt_cache_key(&settings.openai_responses_base_url)
                }),
        );
        Ok(Self::empty()
            .with(openai)
            .with(anthropic)
            .with(responses)
            .with(scripted::Scripted)
            .with_budgets(settings.budgets.clone()))
    }

    /// No providers at all.
    pub fn empty() -> Self {
        Self {
            by_name: BTreeMap::new(),
            budgets: BTreeMap::new(),
        }
    }

    /// Sets the retry budgets by provider name (a provider without one gets the default).
    pub fn with_budgets(mut self, budgets: BTreeMap<String, RetryBudget>) -> Self {
        self.budgets = budgets;
        self
    }

    /// The retry budget of `provider`.
    pub fn budget(&self, provider: &str) -> RetryBudget {
        self.budgets.get(provider).copied().unwrap_or_default()
    }

    /// Adds (or replaces) the provider serving `provider.name()`.
    pub fn with(mut self, provider: impl Provider + 'static) -> Self {
        self.by_name.insert(provider.name(), Box::new(provider));
        self
    }

    /// The names served, sorted.
    pub fn names(&self) -> Vec<&'static str> {
        self.by_name.keys().copied().collect()
    }

    /// One model call, dispatched on `request.model.provider`.
    pub async fn generate(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        self.provider_for(request)?.generate(request).await
    }

    /// One model call whose stream's progress goes to `live` (for `baton watch`).
    pub async fn generate_live(
        &self,
        request: &LlmRequest,
        live: &LiveSink,
    ) -> Result<LlmResponse, LlmError> {
        self.provider_for(request)?
            .generate_live(request, live)
            .await
    }

    /// The provider `request.model.provider` names.
    fn provider_for(&self, request: &LlmRequest) -> Result<&dyn Provider, LlmError> {
        let name = request
            .model
            .as_ref()
            .map(|m| m.provider.as_str())
            .unwrap_or_default();
        match self.by_name.get(name) {
            Some(provider) => Ok(provider.as_ref()),
            None if name.is_empty() => Err(LlmError::Config(format!(
                "the run names no provider; submit with --provider {}",
                self.names().join("|")
            ))),
            None => Err(LlmError::Config(format!(
                "unknown provider '{name}'; this worker serves: {}",
                self.names().join(", ")
            ))),
        }
    }
}

/// Told when a provider asked the fleet to wait (a 429 with `Retry-After`): the worker pauses
/// the provider's task queue for everyone (`baton-worker`'s `provider_pause.rs`), so the other
/// runs' calls wait too instead of meeting the same 429.
pub trait ProviderPause: Send + Sync {
    /// `provider` said to come back after `wait`.
    fn pause(&self, provider: &str, wait: Duration);
}

/// Implements the `llm_generate` activity contract.
pub struct LlmService {
    providers: Providers,
    conversations: Conversations,
    models: ModelTable,
    pause: Option<Arc<dyn ProviderPause>>,
}

impl LlmService {
    /// A service over these providers, keeping conversations in `store`, with the shipped
    /// model table.
    pub fn new(providers: Providers, store: SharedStore) -> Self {
        Self {
            providers,
            conversations: Conversations::new(store),
            models: ModelTable::defaults(),
            pause: None,
        }
    }

    /// Tells `pause` of each 429 that says when to come back.
    pub fn with_pause(mut self, pause: Arc<dyn ProviderPause>) -> Self {
        self.pause = Some(pause);
        self
    }

    /// A failed call: a 429 with `Retry-After` pauses the provider for the fleet.
    fn failed(&self, e: &LlmError) {
        if let (
            Some(pause),
            LlmError::RateLimited {
                provider,
                retry_after: Some(wait),
                ..
            },
        ) = (&self.pause, e)
        {
            pause.pause(provider, *wait);
        }
    }

    /// The model table that prices calls and gives context windows (the worker's
    /// `[models]` applied).
    pub fn with_models(mut self, models: ModelTable) -> Self {
        self.models = models;
        self
    }

    /// Keeps reply texts and tool-call arguments longer than `bytes` in the blob store, a
    /// preview in history (`[history] inline_bytes`).
    pub fn with_inline_bytes(mut self, bytes: usize) -> Self {
        self.conversations = self.conversations.with_inline_bytes(bytes);
        self
    }
}

/// Attempts of a model call whose blob store fails (the workflow's retry policy paces them:
/// 1 s doubling to 60 s, about 2 min in all). The provider budgets do not apply: it is not
/// the provider that failed.
pub const STORE_MAX_ATTEMPTS: u32 = 8;

/// What the provider billed for the failed attempts of this call so far: the previous
/// attempt's heartbeat details (`StreamProgress.billed_before` + `billed`); none on a first
/// attempt or when nothing was billed.
fn billed_so_far(ctx: &ActivityContext) -> Option<Usage> {
    if ctx.info().attempt <= 1 {
        return None;
    }
    let previous: StreamProgress = ctx.heartbeat_details().deserialize().ok().flatten()?;
    match (previous.billed_before, previous.billed) {
        (None, None) => None,
        (before, billed) => Some(estimate::sum_usage(before, billed)),
    }
}

/// The last heartbeat of a failing attempt: what the provider billed for it (`billed`) and
/// before it (`carried`), which the failure carries to the server (its last heartbeat details)
/// for the next attempt to count.
async fn bill_next_attempt(
    ctx: &ActivityContext,
    attempt: u32,
    carried: Option<Usage>,
    billed: Option<Usage>,
) {
    if billed.is_none() {
        return;
    }
    let details = StreamProgress {
        attempt,
        billed,
        billed_before: carried,
        ..Default::default()
    };
    let _ = ctx.record_heartbeat(details).await;
}

/// A blob store failure on `attempt`, as an activity failure: retried (the store may be back,
/// or another worker may reach it) until [`STORE_MAX_ATTEMPTS`], with a message saying what to
/// check.
fn store_failure(e: ConversationError, attempt: u32) -> ActivityError {
    let mut message = format!(
        "{e} (check the workers' [store] settings: every worker must use the same blob store)"
    );
    let last = attempt >= STORE_MAX_ATTEMPTS;
    if last {
        message.push_str(&format!("; gave up after {attempt} attempts"));
    }
    warn!(error = %message, "the blob store failed during a model call");
    ActivityError::application(
        ApplicationFailure::builder(message)
            .type_name(FailureType::StoreUnavailable.as_str().to_owned())
            .non_retryable(last)
            .build(),
    )
}

#[activities]
impl LlmService {
    /// Calls the model; heartbeats while waiting; honours cancellation.
    #[activity(definition = baton_workflows::activities::LlmGenerate)]
    pub async fn llm_generate(
        self: Arc<Self>,
        ctx: ActivityContext,
        mut request: LlmRequest,
    ) -> Result<LlmResponse, ActivityError> {
        let info = ctx.info();
        let run_id = info.workflow_id.clone().unwrap_or_default();
        // Stable over the run (continue-as-new keeps the workflow id): the providers' prompt
        // cache routing key, within OpenAI's 64 characters.
        request.cache_key = cache_key::prompt_cache_key(&run_id);
        let attempt = info.attempt;
        let provider = request
            .model
            .as_ref()
            .map(|m| m.provider.clone())
            .unwrap_or_default();
        info!(run_id, provider, attempt, "llm call started");
        // The whole attempt beats, blob store reads and writes included; while the answer
        // streams, up to ten times a second with what it has received so far (`baton
        // watch`), under this attempt's number: the server keeps an attempt's last details
        // until the next attempt's first beat.
        // What the provider billed for the failed attempts before this one, carried in the
        // heartbeat details from attempt to attempt.
        let carried = billed_so_far(&ctx);
        let (live, changes) = LiveSink::channel();
        let before = carried;
        let _beat = Heartbeat::start_on_change(
            &ctx,
            HEARTBEAT_EVERY,
            STREAM_BEAT,
            changes,
            move |so_far: &Live| StreamProgress {
                billed_before: before,
                ..so_far.progress(attempt)
            },
        );
        let mut resolved = self
            .conversations
            .resolve(request)
            .await
            .map_err(|e| store_failure(e, attempt))?;
        let asked = resolved
            .request
            .model
            .as_ref()
            .map_or(0, |m| m.max_output_tokens);
        if let Some(model) = resolved.request.model.as_mut() {
            self.models.clamp_output_limit(model);
        }
        let call = self.providers.generate_live(&resolved.request, &live);
        match until_cancelled(&ctx, call).await? {
            Ok(mut response) => {
                info!(run_id, provider, attempt, "llm call finished");
                estimate::fill_unreported_usage(&resolved.request, &mut response);
                let raised = resolved
                    .request
                    .model
                    .as_ref()
                    .and_then(|m| self.models.raised_output_limit(m, asked, &response));
                if let Some(raised) = raised {
                    // Stopped at the default max_tokens: once more with the model's limit,
                    // both calls billed (the first one's usage is added to the second's).
                    info!(
                        run_id,
                        provider,
                        attempt,
                        raised,
                        "max_tokens stop: asking again with a larger max_tokens"
                    );
                    let mut again = resolved.request.clone();
                    if let Some(m) = again.model.as_mut() {
                        m.max_output_tokens = raised;
                    }
                    let call = self.providers.generate_live(&again, &live);
                    match until_cancelled(&ctx, call).await? {
                        Ok(mut second) => {
                            estimate::fill_unreported_usage(&again, &mut second);
                            second.usage = Some(estimate::sum_usage(
                                response.usage.take(),
                                second.usage.take(),
                            ));
                            response = second;
                            resolved.request = again;
                        }
                        Err(e) => {
                            warn!(run_id, provider, attempt, cause = %e, "the call with a larger max_tokens failed; keeping the truncated answer");
                        }
                    }
                }
                self.models
                    .annotate(resolved.request.model.as_ref(), &mut response);
                if let Some(mut retried) = carried {
                    self.models
                        .price(resolved.request.model.as_ref(), &mut retried);
                    info!(
                        run_id,
                        provider,
                        attempt,
                        input_tokens = retried.input_tokens,
                        output_tokens = retried.output_tokens,
                        "counting what the provider billed for earlier failed attempts"
                    );
                    response.retried = Some(retried);
                }
                if let Err(e) = self.conversations.complete(&resolved, &mut response).await {
                    // The provider billed this answer; the next attempt counts it.
                    bill_next_attempt(&ctx, attempt, carried, response.usage).await;
                    return Err(store_failure(e, attempt));
                }
                Ok(response)
            }
            Err(e) => {
                warn!(run_id, provider, attempt, retryable = e.is_retryable(), cause = %e, "llm call failed");
                self.failed(&e);
                bill_next_attempt(&ctx, attempt, carried, live.current().billed().copied()).await;
                Err(e.into_failure(attempt, &self.providers.budget(&provider)))
            }
        }
    }

    /// Summarizes the older part of a conversation with the run's model (compaction).
    #[activity(definition = baton_workflows::activities::CompactContext)]
    pub async fn compact_context(
        self: Arc<Self>,
        ctx: ActivityContext,
        mut request: CompactRequest,
    ) -> Result<CompactResponse, ActivityError> {
        let attempt = ctx.info().attempt;
        let _beat = Heartbeat::start(&ctx, HEARTBEAT_EVERY, || ());
        if let Some(history) = request.history.take() {
            let (_, items) = self
                .conversations
                .materialize(&history)
                .await
                .map_err(|e| store_failure(e, attempt))?;
            request.items = view::compaction_input(
                &items,
                &request.view.clone().unwrap_or_default(),
                request.from as usize,
                request.upto as usize,
            );
        }
        // The summary is made from the whole content, not history's previews.
        self.conversations
            .with_full_content(&mut request.items)
            .await
            .map_err(|e| store_failure(e, attempt))?;
        let run_id = ctx.info().workflow_id.clone().unwrap_or_default();
        let provider = request
            .model
            .as_ref()
            .map(|m| m.provider.clone())
            .unwrap_or_default();
        info!(
            run_id,
            provider,
            items = request.items.len(),
            "compaction started"
        );
        if provider == "scripted" {
            // A scripted model has no one to summarize with: keep an extract instead.
            return Ok(compact::extract(&request));
        }
        let mut llm_request = compact::summary_request(&request);
        if let Some(model) = llm_request.model.as_mut() {
            self.models.clamp_output_limit(model);
        }
        match until_cancelled(&ctx, self.providers.generate(&llm_request)).await? {
            Ok(mut response) => {
                estimate::fill_unreported_usage(&llm_request, &mut response);
                self.models
                    .annotate(llm_request.model.as_ref(), &mut response);
                Ok(compact::response(response))
            }
            Err(e) => {
                warn!(run_id, provider, attempt, cause = %e, "compaction call failed");
                self.failed(&e);
                Err(e.into_failure(attempt, &self.providers.budget(&provider)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_proto::{ModelConfig, Script, ScriptedTurn};
    use pretty_assertions::assert_eq;

    fn request(provider: &str) -> LlmRequest {
        LlmRequest {
            model: Some(ModelConfig {
                provider: provider.into(),
                script: Some(Script {
                    turns: vec![ScriptedTurn {
                        text: "scripted answer".into(),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn dispatches_by_provider_name() {
        let providers = Providers::new(&ProviderSettings::default()).unwrap();
        assert_eq!(
            providers.names(),
            vec!["anthropic", "openai", "openai-responses", "scripted"]
        );
        let r = providers.generate(&request("scripted")).await.unwrap();
        assert_eq!(r.message.unwrap().text, "scripted answer");
        let err = providers.generate(&request("gemini")).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown provider 'gemini'; this worker serves: anthropic, openai, openai-responses, scripted"
        );
        assert!(!err.is_retryable());
        let err = providers.generate(&request("")).await.unwrap_err();
        assert!(
            err.to_string()
                .contains("--provider anthropic|openai|openai-responses|scripted"),
            "{err}"
        );
    }

    #[test]
    fn settings_defaults_and_debug_hides_keys() {
        let s = ProviderSettings {
            openai_api_key: Some("sk-openai-secret".into()),
            anthropic_api_key: Some("sk-ant-secret".into()),
            openai_responses_api_key: Some("sk-responses-secret".into()),
            ..Default::default()
        };
        assert!(s.openai_stream && s.anthropic_stream && s.openai_responses_stream);
        assert_eq!(s.openai_responses_base_url, "https://api.openai.com/v1");
        assert_eq!(s.anthropic_base_url, "https://api.anthropic.com");
        assert_eq!(s.anthropic_version, "2023-06-01");
        assert_eq!(s.openai_base_url, "https://api.openai.com/v1");
        let shown = format!("{s:?} {:?}", Providers::new(&s).unwrap());
        assert!(!shown.contains("secret"), "{shown}");
    }

    #[test]
    fn a_failing_store_is_retried_until_its_own_attempt_limit() {
        let failure = |attempt: u32| {
            let e = ConversationError::Mismatch {
                head: "h".into(),
                expected: 3,
                found: 1,
            };
            match store_failure(e, attempt) {
                ActivityError::Application(f) => f,
                _ => panic!("not an application failure"),
            }
        };
        let f = failure(STORE_MAX_ATTEMPTS - 1);
        assert!(!f.is_non_retryable());
        assert_eq!(f.type_name(), Some(FailureType::StoreUnavailable.as_str()));
        let f = failure(STORE_MAX_ATTEMPTS);
        assert!(f.is_non_retryable());
        assert!(
            f.source_error()
                .to_string()
                .ends_with("same blob store); gave up after 8 attempts"),
            "{}",
            f.source_error()
        );
    }
}
