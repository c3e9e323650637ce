//! The prompt cache routing key OpenAI's APIs take (`prompt_cache_key`, Chat Completions and
//! Responses), derived from the run id, and which endpoints take it.
//!
//! OpenAI refuses a key over 64 characters (`400 Invalid 'prompt_cache_key': string too
//! long. Expected a string with maximum length 64`, code `string_above_max_length`), and a
//! run id has no such cap (`--id`, sub-agents' `.sub-N`). Gemini's OpenAI compatibility
//! refuses the field itself (`400 Invalid JSON payload received. Unknown name
//! "prompt_cache_key": Cannot find field.`).

use sha2::{Digest, Sha256};

/// The longest `prompt_cache_key` OpenAI takes, in characters.
pub const MAX_PROMPT_CACHE_KEY: usize = 64;

/// Hex digits of the run id's SHA-256 in a key derived from a long run id (96 bits).
const HASH_HEX: usize = 24;

/// The `prompt_cache_key` of a run: the run id when it fits in [`MAX_PROMPT_CACHE_KEY`]
/// ASCII characters, else its first characters, `~` and [`HASH_HEX`] hex digits of the
/// SHA-256 of the whole id: at most 64 characters, the same on every turn and every worker
/// (continue-as-new keeps the workflow id), different for two runs (a parent and its
/// `.sub-N` children included).
pub fn prompt_cache_key(run_id: &str) -> String {
    if run_id.len() <= MAX_PROMPT_CACHE_KEY && run_id.is_ascii() {
        return run_id.to_owned();
    }
    let hash = hex::encode(Sha256::digest(run_id.as_bytes()));
    let keep = MAX_PROMPT_CACHE_KEY - HASH_HEX - 1;
    let head: String = run_id.chars().filter(char::is_ascii).take(keep).collect();
    format!("{head}~{}", &hash[..HASH_HEX])
}

/// Whether the OpenAI-compatible endpoint at `base_url` takes `prompt_cache_key` when its
/// worker setting does not say: every endpoint but Gemini's OpenAI compatibility
/// (`generativelanguage.googleapis.com`, or a base URL ending in `/v1beta/openai` as
/// Gemini's does), which refuses fields it does not know. Servers that ignore unknown
/// fields (vLLM, llama.cpp, Ollama) are sent it.
pub fn endpoint_takes_prompt_cache_key(base_url: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(base_url) else {
        return true;
    };
    let gemini_host = url
        .host_str()
        .is_some_and(|h| h.eq_ignore_ascii_case("generativelanguage.googleapis.com"));
    let gemini_path = url.path().trim_end_matches('/').ends_with("/v1beta/openai");
    !(gemini_host || gemini_path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn short_ids_are_the_key_long_ones_are_cut_and_hashed_within_64() {
        assert_eq!(prompt_cache_key("run-0123456789ab"), "run-0123456789ab");
        let exactly = "r".repeat(64);
        assert_eq!(prompt_cache_key(&exactly), exactly);
        let long = format!("ci-{}", "x".repeat(197));
        assert_eq!(long.len(), 200);
        let key = prompt_cache_key(&long);
        assert_eq!(key.chars().count(), 64, "{key}");
        assert!(key.starts_with("ci-xxx") && key.contains('~'), "{key}");
        assert_eq!(prompt_cache_key(&long), key, "stable");
        let child = prompt_cache_key(&format!("{long}.sub-1"));
        assert_ne!(child, key, "a sub-agent has its own key");
        assert_eq!(child.chars().count(), 64);
        // Non-ASCII ids are hashed too (the limit counts characters; the key stays ASCII).
        let accented = prompt_cache_key("exécution");
        assert!(accented.is_ascii() && accented.len() <= 64, "{accented}");
        assert_ne!(accented, prompt_cache_key("excution"));
    }

    #[test]
    fn geminis_endpoint_does_not_take_the_key_others_do() {
        for (url, takes) in [
            ("https://api.openai.com/v1", true),
            ("http://127.0.0.1:11434/v1", true),
            (
                "https://generativelanguage.googleapis.com/v1beta/openai/",
                false,
            ),
            ("http://127.0.0.1:4000/v1beta/openai", false),
            ("not a url", true),
        ] {
            assert_eq!(endpoint_takes_prompt_cache_key(url), takes, "{url}");
        }
    }
}
