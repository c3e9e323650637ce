//! The model activity and its providers.
//!
//! - [`activity`]: the `llm_generate` and `compact_context` activities ([`LlmService`]) and
//!   the [`Providers`] they dispatch to, built from [`ProviderSettings`].
//! - [`provider`]: the [`Provider`] trait every backend implements.
//! - [`cache_key`]: the run's `prompt_cache_key` (within OpenAI's 64 characters) and which
//!   endpoints take it.
//! - `transport`: what the HTTP providers share: the request sent, HTTP failures classified,
//!   the event stream read until the wire format's end-of-stream rule completes it.
//! - [`openai`]: OpenAI-compatible Chat Completions (`request.rs` builds the body,
//!   `response.rs` parses whole and streamed answers).
//! - [`anthropic`]: Anthropic Messages (the same split).
//! - [`responses`]: OpenAI Responses (`openai-responses`; the same split), encrypted
//!   reasoning items carried turn to turn.
//! - [`models`]: the model table (context windows, output limits, prices) and a call's cost.
//! - [`scripted`]: replays a script carried in the run's model config (demo, tests).
//! - [`sse`]: the Server-Sent Events parser the streaming providers share.
//! - [`live`]: what a stream has received so far, beaten as heartbeat details for `baton watch`.
//! - [`compact`]: the `compact_context` activity's prompt and parsing.
//! - [`estimate`]: the usage of a call whose server reported none, estimated from the text
//!   and marked (`Usage.estimated_calls`).
//! - [`error`]: the failure taxonomy and its mapping to Temporal failures.
//! - [`retry`]: a provider's request timeout and retry budget ([`RetryBudget`]): the last
//!   attempt, the delay before the next one.

pub mod activity;
pub mod anthropic;
pub mod cache_key;
pub mod compact;
#[cfg(test)]
mod conformance;
#[cfg(test)]
mod cost_tests;
pub mod error;
pub mod estimate;
pub mod live;
pub mod models;
pub mod openai;
pub mod provider;
pub mod responses;
pub mod retry;
pub mod scripted;
pub mod sse;
#[cfg(test)]
mod test_items;
#[cfg(test)]
mod test_server;
mod transport;

pub use activity::{HEARTBEAT_EVERY, LlmService, ProviderPause, ProviderSettings, Providers};
pub use error::LlmError;
pub use models::{ModelInfo, ModelSettings, ModelTable, ModelTableError};
pub use provider::Provider;
pub use retry::RetryBudget;
