//! `--output-schema`: a run's final answer as JSON matching a JSON Schema. Pure: the schema and
//! the answer come in, the value or the reasons it does not match go out (remote `$ref`s are
//! not fetched).

use serde_json::Value;

/// At most this many validation errors are told (to the model, and in the run's detail).
const MAX_ERRORS: usize = 5;

/// Checks that `schema` (JSON text) is a JSON Schema that can be compiled.
pub fn check_schema(schema: &str) -> Result<(), String> {
    compile(schema).map(|_| ())
}

fn compile(schema: &str) -> Result<jsonschema::Validator, String> {
    let value: Value =
        serde_json::from_str(schema).map_err(|e| format!("the output schema is not JSON: {e}"))?;
    jsonschema::validator_for(&value)
        .map_err(|e| format!("the output schema is not a valid JSON Schema: {e}"))
}

/// The JSON value in a final answer: the whole reply, or the one fenced ```json block in it.
fn json_of(answer: &str) -> Result<Value, String> {
    let trimmed = answer.trim();
    if let Ok(v) = serde_json::from_str(trimmed) {
        return Ok(v);
    }
    let fenced = trimmed
        .split_once("```")
        .and_then(|(_, rest)| rest.split_once('\n'))
        .and_then(|(_, body)| body.rsplit_once("```"))
        .map(|(body, _)| body.trim());
    match fenced.map(serde_json::from_str::<Value>) {
        Some(Ok(v)) => Ok(v),
        Some(Err(e)) => Err(format!("the JSON in the reply does not parse: {e}")),
        None => Err(
            "the reply is not JSON (it must be a single JSON value, with nothing around it)"
                .to_owned(),
        ),
    }
}

/// The answer's JSON value if it matches `schema`, else why not (in words, at most
/// `MAX_ERRORS` reasons, each with the JSON pointer it is about).
pub fn validate(schema: &str, answer: &str) -> Result<Value, String> {
    let validator = compile(schema)?;
    let value = json_of(answer)?;
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .take(MAX_ERRORS)
        .map(|e| {
            let at = e.instance_path.to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("at {at}: {e}")
            }
        })
        .collect();
    if errors.is_empty() {
        Ok(value)
    } else {
        Err(errors.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: &str = r#"{"type": "object", "required": ["fixed", "files"],
        "properties": {"fixed": {"type": "boolean"}, "files": {"type": "array", "items": {"type": "string"}}}}"#;

    #[test]
    fn a_matching_answer_gives_its_value_fenced_or_not() {
        let v = validate(SCHEMA, r#"{"fixed": true, "files": ["a.rs"]}"#).unwrap();
        assert_eq!(v["files"][0], "a.rs");
        let fenced = "Here it is:\n```json\n{\"fixed\": false, \"files\": []}\n```\n";
        assert_eq!(validate(SCHEMA, fenced).unwrap()["fixed"], false);
    }

    #[test]
    fn a_mismatch_says_where_and_what() {
        let e = validate(SCHEMA, r#"{"fixed": "yes", "files": [1]}"#).unwrap_err();
        assert!(e.contains("/fixed"), "{e}");
        assert!(e.contains("/files/0"), "{e}");
        let e = validate(SCHEMA, "I fixed it.").unwrap_err();
        assert!(e.contains("not JSON"), "{e}");
        let e = validate(SCHEMA, r#"{"files": []}"#).unwrap_err();
        assert!(e.contains("fixed"), "{e}");
    }

    #[test]
    fn a_bad_schema_is_refused() {
        assert!(check_schema("{not json").unwrap_err().contains("not JSON"));
        let e = check_schema(r#"{"type": 12}"#).unwrap_err();
        assert!(e.contains("not a valid JSON Schema"), "{e}");
        assert!(check_schema(SCHEMA).is_ok());
    }
}
