//! The keyring: AES-256 keys by id, from `BATON_CODEC_KEYS` (`id=<base64 of 32 bytes>`, comma
//! separated) and `BATON_CODEC_ACTIVE_KEY`. The active key (the explicit one, else the first
//! listed) encrypts; every listed key decrypts, so rotating is "put the new key first, keep the
//! old ones after it".

use std::collections::BTreeMap;

use aes_gcm::{Aes256Gcm, KeyInit};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};

use crate::error::CodecError;

/// Keys by id: `k2=<base64>,k1=<base64>`.
pub const KEYS_ENV: &str = "BATON_CODEC_KEYS";
/// The id of the key that encrypts (default: the first one in [`KEYS_ENV`]).
pub const ACTIVE_KEY_ENV: &str = "BATON_CODEC_ACTIVE_KEY";

/// Longest key id accepted (it is stored in every payload's metadata).
const MAX_ID_LEN: usize = 64;
/// AES-256 key length in bytes.
const KEY_LEN: usize = 32;

/// AES-256-GCM keys by id and the id of the one that encrypts. Its `Debug` shows ids only.
#[derive(Clone)]
pub struct Keyring {
    active: String,
    keys: BTreeMap<String, Aes256Gcm>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyring")
            .field("active", &self.active)
            .field("ids", &self.keys.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Keyring {
    /// The keyring from [`KEYS_ENV`] and [`ACTIVE_KEY_ENV`]; `None` when no keys are set.
    pub fn from_env() -> Result<Option<Keyring>, CodecError> {
        let keys = std::env::var(KEYS_ENV).unwrap_or_default();
        let active = std::env::var(ACTIVE_KEY_ENV).ok();
        Self::parse(&keys, active.as_deref())
    }

    /// Parses `id=<base64 key>` entries separated by commas (or whitespace). `active` names the
    /// encrypting key; `None` or empty means the first entry. An empty `keys` is `None` (no
    /// encryption), unless `active` is set, which is an error.
    pub fn parse(keys: &str, active: Option<&str>) -> Result<Option<Keyring>, CodecError> {
        let bad = |reason: String| CodecError::BadConfig {
            variable: KEYS_ENV,
            reason,
        };
        let active = active.map(str::trim).filter(|a| !a.is_empty());
        let mut first = None;
        let mut map = BTreeMap::new();
        for entry in keys
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|e| !e.is_empty())
        {
            let Some((id, material)) = entry.split_once('=') else {
                return Err(bad(format!(
                    "entry {} has no '=': write id=<base64 of 32 bytes>, e.g. \
                     k1=$(head -c32 /dev/urandom | base64) (entries are separated by commas or \
                     whitespace, so an id cannot contain spaces)",
                    map.len() + 1
                )));
            };
            let id = id.trim();
            check_id(id).map_err(bad)?;
            let bytes = decode_key(material.trim()).ok_or_else(|| {
                bad(format!(
                    "the key of '{id}' is not base64; generate one with \
                     `head -c32 /dev/urandom | base64`"
                ))
            })?;
            if bytes.len() != KEY_LEN {
                return Err(bad(format!(
                    "the key of '{id}' is {} bytes, AES-256 needs {KEY_LEN}; generate one with \
                     `head -c32 /dev/urandom | base64`",
                    bytes.len()
                )));
            }
            let cipher = Aes256Gcm::new_from_slice(&bytes)
                .map_err(|_| bad(format!("the key of '{id}' is not a valid AES-256 key")))?;
            if map.insert(id.to_owned(), cipher).is_some() {
                return Err(bad(format!("key id '{id}' is listed twice")));
            }
            first.get_or_insert_with(|| id.to_owned());
        }
        let Some(first) = first else {
            return match active {
                Some(a) => Err(CodecError::BadConfig {
                    variable: ACTIVE_KEY_ENV,
                    reason: format!("names key '{a}' but {KEYS_ENV} is empty"),
                }),
                None => Ok(None),
            };
        };
        let active = match active {
            Some(a) if !map.contains_key(a) => {
                return Err(CodecError::BadConfig {
                    variable: ACTIVE_KEY_ENV,
                    reason: format!(
                        "names key '{a}', which is not in {KEYS_ENV} (ids: {})",
                        map.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                });
            }
            Some(a) => a.to_owned(),
            None => first,
        };
        Ok(Some(Keyring { active, keys: map }))
    }

    /// The id of the key that encrypts.
    pub fn active_id(&self) -> &str {
        &self.active
    }

    /// All key ids, sorted.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.keys.keys().map(String::as_str)
    }

    pub(crate) fn active_cipher(&self) -> Option<&Aes256Gcm> {
        self.keys.get(&self.active)
    }

    pub(crate) fn cipher(&self, id: &str) -> Option<&Aes256Gcm> {
        self.keys.get(id)
    }
}

fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("an entry has an empty key id: write id=<base64 key>".to_owned());
    }
    if id.len() > MAX_ID_LEN
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(format!(
            "key id '{}' must be 1-{MAX_ID_LEN} characters of A-Z a-z 0-9 . _ -",
            id.chars().take(MAX_ID_LEN).collect::<String>()
        ));
    }
    Ok(())
}

fn decode_key(s: &str) -> Option<Vec<u8>> {
    [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
        .iter()
        .find_map(|engine| engine.decode(s).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const K1: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const K2: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";

    #[test]
    fn first_key_is_active_unless_named() {
        let ring = Keyring::parse(&format!("k2={K2}, k1={K1}"), None)
            .unwrap()
            .unwrap();
        assert_eq!(ring.active_id(), "k2");
        assert_eq!(ring.ids().collect::<Vec<_>>(), vec!["k1", "k2"]);
        let ring = Keyring::parse(&format!("k2={K2},k1={K1}"), Some("k1"))
            .unwrap()
            .unwrap();
        assert_eq!(ring.active_id(), "k1");
    }

    #[test]
    fn no_keys_is_no_encryption() {
        assert!(Keyring::parse("", None).unwrap().is_none());
        assert!(Keyring::parse(" , ", Some("")).unwrap().is_none());
        let err = Keyring::parse("", Some("k1")).unwrap_err().to_string();
        assert!(err.contains("BATON_CODEC_ACTIVE_KEY"), "{err}");
    }

    #[test]
    fn bad_entries_are_explained_without_the_key() {
        let short = "c2hvcnQ=";
        for (keys, active, expect) in [
            ("k1", None, "has no '='"),
            (&format!("my key={K1}"), None, "an id cannot contain spaces"),
            (&format!("k1={short}") as &str, None, "is 5 bytes"),
            ("k1=!!!", None, "not base64"),
            (&format!("k/1={K1}"), None, "key id"),
            (&format!("k1={K1},k1={K2}"), None, "listed twice"),
            (&format!("k1={K1}"), Some("k9"), "'k9', which is not in"),
        ] {
            let err = Keyring::parse(keys, active).unwrap_err().to_string();
            assert!(err.contains(expect), "{keys}: {err}");
            assert!(!err.contains(K1) && !err.contains(short), "{err}");
        }
    }

    #[test]
    fn debug_shows_ids_only() {
        let ring = Keyring::parse(&format!("k1={K1},k2={K2}"), None)
            .unwrap()
            .unwrap();
        let shown = format!("{ring:?}");
        assert_eq!(shown, r#"Keyring { active: "k1", ids: ["k1", "k2"] }"#);
    }
}
