//! `X-Hub-Signature-256`: the HMAC-SHA256 of a webhook's raw body under the webhook secret,
//! as `sha256=<64 hex digits>`. Checked in constant time before the body is parsed.

use ring::hmac;

/// Why a delivery's signature was not accepted (said in the 401's body).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// No `X-Hub-Signature-256` header.
    #[error(
        "no X-Hub-Signature-256 header: set the webhook's secret in the GitHub App (or \
         repository) settings"
    )]
    Missing,
    /// Not `sha256=` and 64 hex digits.
    #[error("X-Hub-Signature-256 is not sha256=<64 hex digits>")]
    Malformed,
    /// Well formed, but not the body's HMAC under the configured secret.
    #[error(
        "X-Hub-Signature-256 does not match the body: the webhook's secret differs from \
         baton serve's"
    )]
    Mismatch,
}

/// Whether `header` (the value of `X-Hub-Signature-256`, if sent) signs `body` with `secret`.
pub fn verify(secret: &[u8], body: &[u8], header: Option<&str>) -> Result<(), SignatureError> {
    let header = header.ok_or(SignatureError::Missing)?;
    let hex = header
        .trim()
        .strip_prefix("sha256=")
        .ok_or(SignatureError::Malformed)?;
    let tag = decode_hex(hex).ok_or(SignatureError::Malformed)?;
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    hmac::verify(&key, body, &tag).map_err(|_| SignatureError::Mismatch)
}

/// `sha256=<hex>` for `body` under `secret` (what GitHub sends; used by tests and stand-ins).
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let tag = hmac::sign(&key, body);
    let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example in GitHub's "Validating webhook deliveries" page.
    const DOC_SECRET: &[u8] = b"It's a Secret to Everybody";
    const DOC_BODY: &[u8] = b"Hello, World!";
    const DOC_SIGNATURE: &str =
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    #[test]
    fn githubs_documented_example_verifies() {
        assert_eq!(sign(DOC_SECRET, DOC_BODY), DOC_SIGNATURE);
        assert_eq!(verify(DOC_SECRET, DOC_BODY, Some(DOC_SIGNATURE)), Ok(()));
        let upper = DOC_SIGNATURE.replace("757107ea", "757107EA");
        assert_eq!(verify(DOC_SECRET, DOC_BODY, Some(&upper)), Ok(()));
    }

    #[test]
    fn anything_else_is_refused() {
        assert_eq!(
            verify(DOC_SECRET, b"Hello, World?", Some(DOC_SIGNATURE)),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(b"another secret", DOC_BODY, Some(DOC_SIGNATURE)),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(DOC_SECRET, DOC_BODY, None),
            Err(SignatureError::Missing)
        );
        for bad in [
            "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
            "sha1=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
            "sha256=757107ea",
            "sha256=zz7107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
            "sha256=ü57107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e1",
        ] {
            assert_eq!(
                verify(DOC_SECRET, DOC_BODY, Some(bad)),
                Err(SignatureError::Malformed),
                "{bad}"
            );
        }
    }
}
