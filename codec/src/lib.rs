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
    DataConverter, DefaultFailureConverter, PayloadConverter, SerializationContextData,
};
use temporalio_common::payload_visitor::decode_payloads;
use temporalio_common::protos::temporal::api::failure::v1::Failure;

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

/// The message of a failure read from the server outside a workflow or activity (e.g. a pending
/// activity's last failure in a describe): decoded with `dc`'s codec, and taken from the
/// encoded attributes when [`data_converter`] moved it there. An error says why it cannot be
/// read (an encrypted failure without its key names the key id and `BATON_CODEC_KEYS`).
pub async fn failure_message(dc: &DataConverter, failure: &Failure) -> Result<String, String> {
    let mut failure = failure.clone();
    decode_payloads(&mut failure, dc.codec(), &SerializationContextData::None)
        .await
        .map_err(|e| e.to_string())?;
    let message = match &failure.encoded_attributes {
        Some(attributes) => serde_json::from_slice::<serde_json::Value>(&attributes.data)
            .map_err(|e| format!("the failure's encoded attributes are not readable: {e}"))?
            .get("message")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        None => failure.message,
    };
    Ok(message)
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
    fn failure_messages_are_read_back_with_the_key_and_refused_without() {
        let ctx = SerializationContextData::None;
        let app = || {
            OutgoingError::Workflow(OutgoingWorkflowError::Application(Box::new(
                ApplicationFailure::new("rate limited (429): slow down"),
            )))
        };
        let dc = converter();
        let mut failure = dc.to_failure(&ctx, app());
        block_on(encode_payloads(&mut failure, dc.codec(), &ctx)).unwrap();
        assert_eq!(
            block_on(failure_message(&dc, &failure)).unwrap(),
            "rate limited (429): slow down"
        );
        let refused = block_on(failure_message(&plain_converter(), &failure)).unwrap_err();
        assert!(
            refused.contains("k1") && refused.contains(KEYS_ENV),
            "{refused}"
        );
        // A plain failure (no codec on the writer's side) reads as it is.
        let plain = plain_converter().to_failure(&ctx, app());
        assert_eq!(
            block_on(failure_message(&plain_converter(), &plain)).unwrap(),
            "rate limited (429): slow down"
        );
    }

    #[test]
    fn no_keys_no_converter() {
        assert!(Keyring::parse("", None).unwrap().is_none());
    }
}
