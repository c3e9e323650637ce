//! baton's payload codec: what Temporal stores of a run (workflow input and result, activity
//! arguments and results, signals, updates, queries, memo, heartbeat details, failure messages)
//! is compressed with zstd and encrypted with AES-256-GCM before it leaves the process, and
//! decrypted when it comes back.
//!
//! - [`keys`]: the keyring (`BATON_CODEC_KEYS`, `BATON_CODEC_ACTIVE_KEY`): keys by id, the
//!   active one encrypts, all of them decrypt.
//! - [`codec`]: [`BatonCodec`], the `PayloadCodec` (payload format in its docs).
//! - [`CodecError`] (module [`error`]): what can go wrong, never showing key material.
//!
//! [`data_converter`] builds the `DataConverter` both binaries put on their Temporal client
//! (the worker's SDK takes it from the client); [`data_converter_from_env`] returns `None`
//! when no keys are configured, which keeps payloads plain JSON as before.

pub mod codec;
pub mod error;
pub mod keys;

pub use codec::{BatonCodec, ENCODING, KEY_ID_KEY, NoKeysCodec};
pub use error::CodecError;
pub use keys::{ACTIVE_KEY_ENV, KEYS_ENV, Keyring};

use temporalio_common::data_converters::{
    DataConverter, DefaultFailureConverter, PayloadConverter,
};

/// A data converter with the default payload converter (JSON), failure messages and stack
/// traces moved into an encoded attribute (so the codec encrypts them too), and `codec`.
pub fn data_converter(codec: BatonCodec) -> DataConverter {
    DataConverter::new(
        PayloadConverter::default(),
        DefaultFailureConverter::new(true),
        codec,
    )
}

/// The data converter of a process without keys: payloads plain, and an encrypted one read
/// by mistake fails with a message naming its key id and `BATON_CODEC_KEYS`.
pub fn plain_converter() -> DataConverter {
    DataConverter::new(
        PayloadConverter::default(),
        DefaultFailureConverter::new(false),
        NoKeysCodec,
    )
}

/// The data converter for the keys in the environment, or `None` when `BATON_CODEC_KEYS` is
/// unset or empty (no codec: payloads stay plain, as without encryption).
pub fn data_converter_from_env() -> Result<Option<DataConverter>, CodecError> {
    Ok(Keyring::from_env()?.map(|keys| data_converter(BatonCodec::new(keys))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;
    use pretty_assertions::assert_eq;
    use temporalio_common::data_converters::SerializationContextData;
    use temporalio_common::error::{ApplicationFailure, OutgoingError, OutgoingWorkflowError};
    use temporalio_common::payload_visitor::{decode_payloads, encode_payloads};

    const K1: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

    fn converter() -> DataConverter {
        data_converter(BatonCodec::new(
            Keyring::parse(&format!("k1={K1}"), None).unwrap().unwrap(),
        ))
    }

    #[test]
    fn values_round_trip_encrypted() {
        let dc = converter();
        let ctx = SerializationContextData::None;
        let value = serde_json::json!({"prompt": "a secret plan"});
        let payload = block_on(dc.to_payload(&ctx, &value)).unwrap();
        assert_eq!(codec::key_id(&payload).as_deref(), Some("k1"));
        assert!(!String::from_utf8_lossy(&payload.data).contains("secret"));
        let back: serde_json::Value = block_on(dc.from_payload(&ctx, payload)).unwrap();
        assert_eq!(back, value);
    }

    #[test]
    fn failure_messages_are_encoded_then_encrypted() {
        let dc = converter();
        let ctx = SerializationContextData::None;
        let mut failure = dc.to_failure(
            &ctx,
            OutgoingError::Workflow(OutgoingWorkflowError::Application(Box::new(
                ApplicationFailure::new("stderr: the secret path"),
            ))),
        );
        assert_eq!(failure.message, "Encoded failure");
        block_on(encode_payloads(&mut failure, dc.codec(), &ctx)).unwrap();
        let attrs = failure.encoded_attributes.clone().unwrap();
        assert_eq!(codec::key_id(&attrs).as_deref(), Some("k1"));
        assert!(!format!("{failure:?}").contains("secret"));
        block_on(decode_payloads(&mut failure, dc.codec(), &ctx)).unwrap();
        let message = dc
            .to_error(
                &ctx,
                failure,
                temporalio_common::data_converters::NoopDecodeHint,
            )
            .unwrap()
            .to_string();
        assert!(message.contains("the secret path"), "{message}");
    }

    #[test]
    fn no_keys_no_converter() {
        assert!(Keyring::parse("", None).unwrap().is_none());
    }
}
