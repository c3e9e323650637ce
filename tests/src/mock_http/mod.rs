//! Plumbing shared by the scripted LLM mocks ([`crate::MockOpenAi`],
//! [`crate::MockAnthropic`], [`crate::MockResponses`]): scripted answers, request capture, the server
//! thread, and the streaming machinery (SSE transcripts, keep-alives, cut
//! connections).
//!
//! - `script.rs`: scripted answers and captured requests.
//! - `flavor.rs`: wire formats, server dialects, SSE helpers.
//! - `server.rs`: the server thread and its request handler.
//! - `stream.rs`: how an answer is delivered.

mod flavor;
mod script;
mod server;
mod stream;

pub use flavor::*;
pub use script::*;
pub use server::*;
pub(crate) use stream::*;
