//! What can go wrong configuring keys or encoding and decoding payloads.

use thiserror::Error;

use crate::keys::KEYS_ENV;

/// A codec or key configuration error. Messages never contain key material.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CodecError {
    /// `BATON_CODEC_KEYS` (or `BATON_CODEC_ACTIVE_KEY`) cannot be used.
    #[error("invalid {variable}: {reason}")]
    BadConfig {
        /// The variable at fault.
        variable: &'static str,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// A payload names a key id this process was not given.
    #[error(
        "payload is encrypted with key id '{key_id}', which this process does not have: add \
         '{key_id}=<base64 key>' to {KEYS_ENV} (old keys stay listed after the active one so \
         older runs stay readable)"
    )]
    UnknownKey {
        /// The key id recorded in the payload's metadata.
        key_id: String,
    },
    /// Authentication failed: the payload was altered, or the key under this id is not the one
    /// it was encrypted with.
    #[error(
        "payload encrypted with key id '{key_id}' failed authentication: it was altered, or \
         the key configured under '{key_id}' is not the one that encrypted it"
    )]
    Tampered {
        /// The key id recorded in the payload's metadata.
        key_id: String,
    },
    /// The encrypted payload is not in baton's format (truncated, wrong metadata, bad inner
    /// protobuf, decompression failure).
    #[error("malformed encrypted payload: {0}")]
    Malformed(String),
    /// Encryption itself failed (should not happen with valid keys).
    #[error("cannot encrypt a payload: {0}")]
    Encrypt(String),
}
