//! [`BatonCodec`]: the `PayloadCodec` that compresses and encrypts payloads.
//!
//! An encoded payload has metadata `encoding = "binary/encrypted"`, `encryption-key-id = <id>`
//! and `encryption-cipher = "AES256GCM-zstd"`; its data is a random 96-bit nonce followed by
//! the AES-256-GCM ciphertext (with its 16-byte tag) of the zstd-compressed protobuf encoding
//! of the original payload (its metadata and data). The key id and cipher are authenticated
//! as associated data. Payloads without `binary/encrypted` decode unchanged, so histories
//! written before encryption was turned on stay readable.

use std::io::Read as _;
use std::sync::Arc;

use aes_gcm::aead::{Aead, AeadCore, OsRng, Payload as AeadInput};
use futures::FutureExt as _;
use futures::future::BoxFuture;
use prost::Message as _;
use temporalio_common::data_converters::{
    PayloadCodec, PayloadConversionError, SerializationContextData,
};
use temporalio_common::protos::temporal::api::common::v1::Payload;

use crate::error::CodecError;
use crate::keys::Keyring;

/// The `encoding` metadata value of an encrypted payload.
pub const ENCODING: &str = "binary/encrypted";
/// Metadata key naming the key that encrypted the payload.
pub const KEY_ID_KEY: &str = "encryption-key-id";
/// Metadata key naming the format, so another could follow.
pub const CIPHER_KEY: &str = "encryption-cipher";
/// This codec's format: AES-256-GCM over zstd over a protobuf `Payload`.
pub const CIPHER: &str = "AES256GCM-zstd";

const ENCODING_KEY: &str = "encoding";
const NONCE_LEN: usize = 12;
/// zstd level: fast, and most of the gain on JSON.
const ZSTD_LEVEL: i32 = 3;
/// Largest decompressed payload accepted (a guard against decompression bombs; Temporal's own
/// payload limit is far lower).
const MAX_DECODED: u64 = 256 * 1024 * 1024;

/// Encrypts with the keyring's active key, decrypts with any of its keys.
#[derive(Clone, Debug)]
pub struct BatonCodec {
    keys: Arc<Keyring>,
}

impl BatonCodec {
    /// A codec over `keys`.
    pub fn new(keys: Keyring) -> Self {
        Self {
            keys: Arc::new(keys),
        }
    }

    /// The keyring.
    pub fn keys(&self) -> &Keyring {
        &self.keys
    }

    /// Compresses and encrypts one payload with the active key.
    pub fn encode_payload(&self, payload: &Payload) -> Result<Payload, CodecError> {
        let id = self.keys.active_id();
        let cipher = self
            .keys
            .active_cipher()
            .ok_or_else(|| CodecError::UnknownKey { key_id: id.into() })?;
        let plain = zstd::bulk::compress(&payload.encode_to_vec(), ZSTD_LEVEL)
            .map_err(|e| CodecError::Encrypt(format!("zstd: {e}")))?;
        let nonce = aes_gcm::Aes256Gcm::generate_nonce(&mut OsRng);
        let aad = aad(id);
        let sealed = cipher
            .encrypt(
                &nonce,
                AeadInput {
                    msg: &plain,
                    aad: &aad,
                },
            )
            .map_err(|_| CodecError::Encrypt("AES-256-GCM failed".to_owned()))?;
        let mut data = Vec::with_capacity(NONCE_LEN + sealed.len());
        data.extend_from_slice(&nonce);
        data.extend_from_slice(&sealed);
        Ok(Payload {
            metadata: [
                (ENCODING_KEY.to_owned(), ENCODING.as_bytes().to_vec()),
                (KEY_ID_KEY.to_owned(), id.as_bytes().to_vec()),
                (CIPHER_KEY.to_owned(), CIPHER.as_bytes().to_vec()),
            ]
            .into_iter()
            .collect(),
            data,
            ..Default::default()
        })
    }

    /// Decrypts and decompresses one payload; a payload that is not `binary/encrypted` is
    /// returned as it is.
    pub fn decode_payload(&self, payload: Payload) -> Result<Payload, CodecError> {
        if !is_encrypted(&payload) {
            return Ok(payload);
        }
        let meta = |k: &str| {
            payload
                .metadata
                .get(k)
                .map(|v| String::from_utf8_lossy(v).into_owned())
        };
        match meta(CIPHER_KEY) {
            Some(c) if c == CIPHER => {}
            other => {
                return Err(CodecError::Malformed(format!(
                    "cipher {:?}, baton reads {CIPHER:?}",
                    other.unwrap_or_default()
                )));
            }
        }
        let id = meta(KEY_ID_KEY)
            .ok_or_else(|| CodecError::Malformed(format!("no {KEY_ID_KEY} metadata")))?;
        let cipher = self
            .keys
            .cipher(&id)
            .ok_or_else(|| CodecError::UnknownKey { key_id: id.clone() })?;
        if payload.data.len() < NONCE_LEN {
            return Err(CodecError::Malformed("shorter than a nonce".to_owned()));
        }
        let (nonce, sealed) = payload.data.split_at(NONCE_LEN);
        let aad = aad(&id);
        let plain = cipher
            .decrypt(
                nonce.into(),
                AeadInput {
                    msg: sealed,
                    aad: &aad,
                },
            )
            .map_err(|_| CodecError::Tampered { key_id: id.clone() })?;
        let mut inner = Vec::new();
        zstd::stream::read::Decoder::new(plain.as_slice())
            .map_err(|e| CodecError::Malformed(format!("zstd: {e}")))?
            .take(MAX_DECODED + 1)
            .read_to_end(&mut inner)
            .map_err(|e| CodecError::Malformed(format!("zstd: {e}")))?;
        if inner.len() as u64 > MAX_DECODED {
            return Err(CodecError::Malformed(format!(
                "decompresses to more than {MAX_DECODED} bytes"
            )));
        }
        Payload::decode(inner.as_slice())
            .map_err(|e| CodecError::Malformed(format!("inner payload: {e}")))
    }

    /// [`BatonCodec::encode_payload`] over a batch.
    pub fn encode_all(&self, payloads: Vec<Payload>) -> Result<Vec<Payload>, CodecError> {
        payloads.iter().map(|p| self.encode_payload(p)).collect()
    }

    /// [`BatonCodec::decode_payload`] over a batch.
    pub fn decode_all(&self, payloads: Vec<Payload>) -> Result<Vec<Payload>, CodecError> {
        payloads
            .into_iter()
            .map(|p| self.decode_payload(p))
            .collect()
    }
}

/// Whether `payload` is in this codec's (or any) `binary/encrypted` envelope.
pub fn is_encrypted(payload: &Payload) -> bool {
    payload.metadata.get(ENCODING_KEY).map(Vec::as_slice) == Some(ENCODING.as_bytes())
}

/// The key id of an encrypted payload.
pub fn key_id(payload: &Payload) -> Option<String> {
    is_encrypted(payload)
        .then(|| payload.metadata.get(KEY_ID_KEY))
        .flatten()
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

fn aad(key_id: &str) -> Vec<u8> {
    format!("{CIPHER}:{key_id}").into_bytes()
}

fn conversion(e: CodecError) -> PayloadConversionError {
    PayloadConversionError::EncodingError(Box::new(e))
}

impl PayloadCodec for BatonCodec {
    fn encode(
        &self,
        _: &SerializationContextData,
        payloads: Vec<Payload>,
    ) -> BoxFuture<'static, Result<Vec<Payload>, PayloadConversionError>> {
        let result = self.encode_all(payloads).map_err(conversion);
        async move { result }.boxed()
    }

    fn decode(
        &self,
        _: &SerializationContextData,
        payloads: Vec<Payload>,
    ) -> BoxFuture<'static, Result<Vec<Payload>, PayloadConversionError>> {
        let result = self.decode_all(payloads).map_err(conversion);
        async move { result }.boxed()
    }
}

/// The codec of a process without keys: writes payloads plain, reads plain ones, and refuses
/// an encrypted one with the error that names its key id and `BATON_CODEC_KEYS` (without it,
/// the SDK's JSON converter would only say "Wrong encoding").
#[derive(Debug, Clone, Copy, Default)]
pub struct NoKeysCodec;

impl PayloadCodec for NoKeysCodec {
    fn encode(
        &self,
        _: &SerializationContextData,
        payloads: Vec<Payload>,
    ) -> BoxFuture<'static, Result<Vec<Payload>, PayloadConversionError>> {
        async move { Ok(payloads) }.boxed()
    }

    fn decode(
        &self,
        _: &SerializationContextData,
        payloads: Vec<Payload>,
    ) -> BoxFuture<'static, Result<Vec<Payload>, PayloadConversionError>> {
        let result = match payloads.iter().find(|p| is_encrypted(p)) {
            Some(p) => Err(conversion(CodecError::UnknownKey {
                key_id: key_id(p).unwrap_or_else(|| "?".to_owned()),
            })),
            None => Ok(payloads),
        };
        async move { result }.boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const K1: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const K2: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";

    fn codec(keys: &str) -> BatonCodec {
        BatonCodec::new(Keyring::parse(keys, None).unwrap().unwrap())
    }

    fn json(text: &str) -> Payload {
        Payload {
            metadata: [("encoding".to_owned(), b"json/plain".to_vec())]
                .into_iter()
                .collect(),
            data: serde_json::to_vec(text).unwrap(),
            ..Default::default()
        }
    }

    fn contains(haystack: &[u8], needle: &str) -> bool {
        haystack
            .windows(needle.len())
            .any(|w| w == needle.as_bytes())
    }

    #[test]
    fn round_trip_hides_the_data_and_keeps_the_metadata() {
        let c = codec(&format!("k1={K1}"));
        let original = json("the secret prompt");
        let sealed = c.encode_payload(&original).unwrap();
        assert_eq!(key_id(&sealed).as_deref(), Some("k1"));
        assert_eq!(sealed.metadata["encoding"], b"binary/encrypted");
        assert!(!contains(&sealed.data, "secret"));
        assert!(!sealed.metadata.values().any(|v| contains(v, "json/plain")));
        assert_eq!(c.decode_payload(sealed.clone()).unwrap(), original);
        // A fresh nonce each time.
        assert_ne!(c.encode_payload(&original).unwrap().data, sealed.data);
        // Empty payloads (binary/null) too.
        let empty = Payload::default();
        assert_eq!(
            c.decode_payload(c.encode_payload(&empty).unwrap()).unwrap(),
            empty
        );
    }

    #[test]
    fn plain_payloads_decode_as_they_are() {
        let c = codec(&format!("k1={K1}"));
        let plain = json("from before encryption");
        assert_eq!(c.decode_payload(plain.clone()).unwrap(), plain);
    }

    #[test]
    fn rotation_old_key_decrypts_new_key_encrypts() {
        let old = codec(&format!("k1={K1}"));
        let sealed_old = old.encode_payload(&json("old run")).unwrap();
        let rotated = codec(&format!("k2={K2},k1={K1}"));
        assert_eq!(rotated.decode_payload(sealed_old).unwrap(), json("old run"));
        let sealed_new = rotated.encode_payload(&json("new run")).unwrap();
        assert_eq!(key_id(&sealed_new).as_deref(), Some("k2"));
        // The old deployment cannot read the new key's payloads, and says what to set.
        let err = old.decode_payload(sealed_new).unwrap_err().to_string();
        assert!(
            err.contains("key id 'k2'") && err.contains("BATON_CODEC_KEYS"),
            "{err}"
        );
    }

    #[test]
    fn tampering_is_detected() {
        let c = codec(&format!("k1={K1},k2={K2}"));
        let sealed = c.encode_payload(&json("integrity")).unwrap();
        let mut flipped = sealed.clone();
        let last = flipped.data.len() - 1;
        flipped.data[last] ^= 1;
        let err = c.decode_payload(flipped).unwrap_err();
        assert!(matches!(err, CodecError::Tampered { .. }), "{err}");
        // Relabelling the key id fails too (the id is authenticated).
        let mut relabelled = sealed.clone();
        relabelled
            .metadata
            .insert(KEY_ID_KEY.to_owned(), b"k2".to_vec());
        let err = c.decode_payload(relabelled).unwrap_err();
        assert!(matches!(err, CodecError::Tampered { .. }), "{err}");
        let mut truncated = sealed;
        truncated.data.truncate(5);
        let err = c.decode_payload(truncated).unwrap_err();
        assert!(matches!(err, CodecError::Malformed(_)), "{err}");
    }

    #[test]
    fn an_unknown_key_id_names_the_id_and_the_variable() {
        let c = codec(&format!("k1={K1}"));
        let other = codec(&format!("prod-2024={K2}"));
        let sealed = other.encode_payload(&json("x")).unwrap();
        let err = c.decode_payload(sealed).unwrap_err().to_string();
        assert!(err.contains("'prod-2024'"), "{err}");
        assert!(err.contains("BATON_CODEC_KEYS"), "{err}");
    }

    #[test]
    fn compression_shrinks_a_repetitive_payload() {
        let c = codec(&format!("k1={K1}"));
        let big = json(&"tool output line that repeats\n".repeat(2000));
        let sealed = c.encode_payload(&big).unwrap();
        assert!(
            sealed.data.len() * 10 < big.data.len(),
            "{} -> {}",
            big.data.len(),
            sealed.data.len()
        );
        assert_eq!(c.decode_payload(sealed).unwrap(), big);
    }
}
