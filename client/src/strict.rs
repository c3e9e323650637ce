//! Strict reading of the user's files: baton's wire types ignore fields they do not know (so
//! an older worker accepts a newer client's input), but a policy or script file with a
//! misspelt field is a mistake to report, not to ignore.

use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

/// Deserializes `value` as `T` and fails if it holds a field `T` does not have (naming it with
/// its path, e.g. `rules[1].acton`). Field names may be the proto names or their camelCase.
pub(crate) fn from_value<T: Serialize + DeserializeOwned>(value: Value) -> Result<T, String> {
    let parsed: T = serde_json::from_value(value.clone()).map_err(|e| {
        // The error of a generated deserializer does not always name the field ("data did
        // not match any variant of untagged enum"): find the first field that fails alone.
        let culprit = value.as_object().and_then(|fields| {
            fields.iter().find(|(key, v)| {
                let alone = Value::Object([((*key).clone(), (*v).clone())].into_iter().collect());
                serde_json::from_value::<T>(alone).is_err()
            })
        });
        match culprit {
            Some((key, v)) => format!("field `{key}` = {v}: {e}"),
            None => e.to_string(),
        }
    })?;
    let known = serde_json::to_value(&parsed).map_err(|e| e.to_string())?;
    if let Some(path) = unknown_field(&value, &known, "") {
        return Err(format!("unknown field `{path}`"));
    }
    Ok(parsed)
}

fn unknown_field(given: &Value, known: &Value, at: &str) -> Option<String> {
    match (given, known) {
        (Value::Object(given), Value::Object(known)) => given.iter().find_map(|(key, value)| {
            let path = if at.is_empty() {
                key.clone()
            } else {
                format!("{at}.{key}")
            };
            let entry = known.get(key).or_else(|| known.get(&snake_case(key)));
            match entry {
                // A map field (e.g. labels) has arbitrary keys: its values were kept.
                None => Some(path),
                Some(k) => unknown_field(value, k, &path),
            }
        }),
        (Value::Array(given), Value::Array(known)) => given
            .iter()
            .zip(known)
            .enumerate()
            .find_map(|(i, (g, k))| unknown_field(g, k, &format!("{at}[{i}]"))),
        _ => None,
    }
}

fn snake_case(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 4);
    for c in key.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_proto::{ApprovalPolicy, Script};
    use serde_json::json;

    #[test]
    fn misspelt_fields_are_named_with_their_path() {
        let ok: ApprovalPolicy = from_value(json!({
            "require_approval": ["shell"],
            "rules": [{"tool": "shell", "pattern": "ls*", "action": "allow"}],
            "approvers": [{"tool": "shell", "identities": ["a@*"]}],
        }))
        .unwrap();
        assert_eq!(ok.rules.len(), 1);
        let camel: ApprovalPolicy = from_value(json!({"requireApproval": ["shell"]})).unwrap();
        assert_eq!(camel.require_approval, vec!["shell".to_owned()]);
        assert_eq!(
            from_value::<ApprovalPolicy>(json!({"require_aproval": ["shell"]})).unwrap_err(),
            "unknown field `require_aproval`"
        );
        assert_eq!(
            from_value::<ApprovalPolicy>(json!({"rules": [
                {"tool": "shell", "action": "allow"},
                {"tool": "shell", "acton": "deny"}
            ]}))
            .unwrap_err(),
            "unknown field `rules[1].acton`"
        );
        assert_eq!(
            from_value::<Script>(json!({"turns": [{"text": "x", "tool_call": []}]})).unwrap_err(),
            "unknown field `turns[0].tool_call`"
        );
    }
}
