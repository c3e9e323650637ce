//! The wire formats and servers a mock plays ([`Flavor`], [`Dialect`]) and the SSE text helpers.

use axum::http::Method;
use serde_json::Value;

/// Which server a Chat Completions mock plays: the API's own rules differ by server
/// (`mock_checks.rs` lists them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dialect {
    /// OpenAI itself (and every mock of the other wire formats).
    #[default]
    OpenAi,
    /// Ollama's `/v1` (OpenAI compatibility): refuses `content: null` on any message.
    Ollama,
    /// Gemini's OpenAI compatibility (`/v1beta/openai`): refuses fields it does not know,
    /// with Google's error shape.
    Gemini,
}

/// The Chat Completions path of Gemini's OpenAI compatibility.
pub(crate) const GEMINI_CHAT_COMPLETIONS_PATH: &str = "/v1beta/openai/chat/completions";

/// Which wire format a [`MockServer`] speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    OpenAi,
    Anthropic,
    Responses,
}

impl Flavor {
    pub(super) fn name(self) -> &'static str {
        match self {
            Flavor::OpenAi => "mock OpenAI",
            Flavor::Anthropic => "mock Anthropic",
            Flavor::Responses => "mock OpenAI Responses",
        }
    }

    pub(super) fn endpoint(self, dialect: Dialect) -> &'static str {
        match self {
            Flavor::OpenAi if dialect == Dialect::Gemini => GEMINI_CHAT_COMPLETIONS_PATH,
            Flavor::OpenAi => crate::mock_openai::CHAT_COMPLETIONS_PATH,
            Flavor::Anthropic => crate::mock_anthropic::MESSAGES_PATH,
            Flavor::Responses => crate::mock_responses::RESPONSES_PATH,
        }
    }

    pub(super) fn not_found_body(self, dialect: Dialect, method: &Method, path: &str) -> Value {
        let endpoint = self.endpoint(dialect);
        let message = format!("mock: unknown endpoint {method} {path} (only POST {endpoint})");
        match self {
            Flavor::OpenAi | Flavor::Responses => {
                crate::MockOpenAi::error_body(&message, "invalid_request_error")
            }
            Flavor::Anthropic => crate::MockAnthropic::error_body("not_found_error", &message),
        }
    }

    pub(super) fn bad_request_body(self, dialect: Dialect, message: &str) -> Value {
        match self {
            // Google's error, in a JSON array, as its OpenAI compatibility answers a field it
            // does not know (quoted in google-gemini issues and the review's finding 2).
            Flavor::OpenAi if dialect == Dialect::Gemini => serde_json::json!([{
                "error": {
                    "code": 400,
                    "message": message,
                    "status": "INVALID_ARGUMENT",
                    "details": [{
                        "@type": "type.googleapis.com/google.rpc.BadRequest",
                        "fieldViolations": [{"description": message}]
                    }]
                }
            }]),
            Flavor::OpenAi | Flavor::Responses => {
                crate::MockOpenAi::error_body(message, "invalid_request_error")
            }
            Flavor::Anthropic => crate::MockAnthropic::error_body("invalid_request_error", message),
        }
    }

    pub(super) fn exhausted_body(self) -> Value {
        match self {
            Flavor::OpenAi | Flavor::Responses => serde_json::json!({
                "error": {"message": "mock: no scripted response left", "type": "server_error"}
            }),
            Flavor::Anthropic => {
                crate::MockAnthropic::error_body("api_error", "mock: no scripted response left")
            }
        }
    }

    pub(super) fn is_streamable(self, body: &Value) -> bool {
        match self {
            Flavor::OpenAi => body.get("choices").is_some(),
            Flavor::Anthropic => body.get("type").and_then(Value::as_str) == Some("message"),
            Flavor::Responses => crate::mock_responses::is_response(body),
        }
    }

    pub(super) fn transcript(self, body: &Value, request: &Value) -> Transcript {
        match self {
            Flavor::OpenAi => crate::mock_openai::sse_transcript(body, request),
            Flavor::Anthropic => crate::mock_anthropic::sse_transcript(body),
            Flavor::Responses => crate::mock_responses::sse_transcript(body),
        }
    }

    pub(super) fn error_record(self, error: &Value) -> String {
        match self {
            Flavor::OpenAi => sse_data(error),
            Flavor::Anthropic => sse_event("error", error),
            Flavor::Responses => crate::mock_responses::error_record(error),
        }
    }
}

/// The SSE records of a streamed answer.
pub(crate) struct Transcript {
    /// Complete SSE records (`event: …\ndata: …\n\n` or `data: …\n\n`).
    pub(crate) records: Vec<String>,
    /// How many leading records a cut stream sends (never includes the
    /// finish event).
    pub(crate) cut_at: usize,
}

/// `data: <json>\n\n`.
pub(crate) fn sse_data(data: &Value) -> String {
    format!("data: {data}\n\n")
}

/// `event: <name>\ndata: <json>\n\n`.
pub(crate) fn sse_event(name: &str, data: &Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// Splits `text` into word-ish pieces (each keeps its trailing whitespace);
/// concatenating them gives `text` back. Empty text gives no piece.
pub(crate) fn text_pieces(text: &str) -> Vec<String> {
    text.split_inclusive(char::is_whitespace)
        .map(str::to_owned)
        .collect()
}

/// Splits `text` into at least 2 fragments (when it has at least 2 chars) of
/// at most ~16 chars, on char boundaries; concatenating them gives `text`.
pub(crate) fn fragments(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    let pieces = chars.len().div_ceil(16).max(2).min(chars.len());
    let size = chars.len().div_ceil(pieces);
    chars
        .chunks(size)
        .map(|c| c.iter().collect::<String>())
        .collect()
}
