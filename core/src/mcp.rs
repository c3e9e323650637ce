//! MCP tools in a run, the pure part: the names the model sees, a server's listed
//! tools as [`ToolDefinition`]s, and the checks of a spec's `mcp` entries.
//!
//! A run names servers (`RunSpec.mcp`); the workers configure them. The run's first steps list
//! each server's tools (activity `mcp_list_tools`), the machine records the list in its state
//! (carried across continue-as-new), and replay reads it from history: nothing here depends on
//! what a worker process happens to know.

use std::collections::BTreeSet;

use baton_proto::{McpOrigin, McpTool, McpToolList, McpUse, ToolDefinition, run_spec};

/// Prefix of every MCP tool's name as the model sees it: `mcp__<server>__<tool>`.
pub const PREFIX: &str = "mcp__";
/// The policy pattern of every MCP tool (asked for by default when not read-only).
pub const EVERY_TOOL: &str = "mcp__*";
/// Separator between the server and the tool in a model-facing name.
pub const SEPARATOR: &str = "__";
/// Longest tool name the providers accept (OpenAI and Anthropic: `^[a-zA-Z0-9_-]{1,64}$`).
pub const MAX_NAME_LEN: usize = 64;
/// Longest server name (so that a tool name keeps room for the tool's own name).
pub const MAX_SERVER_LEN: usize = 32;
/// Most MCP tools one run takes in all; more are left out (a note says which server lost
/// some), so that the tool list stays small in history and in every model request.
pub const MAX_TOOLS: usize = 128;
/// A tool's description beyond this many bytes is cut (it goes to the model on every call).
pub const MAX_DESCRIPTION_BYTES: usize = 2048;

/// Whether `name` is a valid server name: ASCII letters, digits, `-` and `_`, no `__` (it
/// separates server and tool), not starting or ending with `_`, at most [`MAX_SERVER_LEN`].
pub fn check_server_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_SERVER_LEN
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !name.contains(SEPARATOR)
        && !name.starts_with('_')
        && !name.ends_with('_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid MCP server name '{name}': use 1 to {MAX_SERVER_LEN} ASCII letters, digits, \
             '-' or '_' (no '__', not starting or ending with '_')"
        ))
    }
}

/// Checks a spec's `mcp` entries and `mcp_unavailable`; the error says what to fix.
pub fn validate(servers: &[McpUse], on_unavailable: i32) -> Result<(), String> {
    if run_spec::McpUnavailable::try_from(on_unavailable).is_err() {
        return Err(format!(
            "unknown mcp_unavailable value {on_unavailable}; use \"fail\" or \"continue\""
        ));
    }
    for entry in servers {
        check_server_name(&entry.server)?;
        if let Some(empty) = entry.tools.iter().find(|t| t.trim().is_empty()) {
            return Err(format!(
                "MCP server '{}': an empty tool name in its tool list ('{empty}'); write --mcp {}:tool1,tool2",
                entry.server, entry.server
            ));
        }
    }
    Ok(())
}

/// The spec's entries with each server once (its tool lists merged; one entry without a list
/// means every tool), in the order first named.
pub fn merged(servers: &[McpUse]) -> Vec<McpUse> {
    let mut out: Vec<McpUse> = Vec::new();
    for entry in servers {
        match out.iter_mut().find(|e| e.server == entry.server) {
            None => out.push(entry.clone()),
            Some(existing) => {
                if existing.tools.is_empty() || entry.tools.is_empty() {
                    existing.tools.clear();
                } else {
                    for t in &entry.tools {
                        if !existing.tools.contains(t) {
                            existing.tools.push(t.clone());
                        }
                    }
                }
            }
        }
    }
    out
}

/// Whether a model-facing tool name is an MCP tool's.
pub fn is_mcp_name(name: &str) -> bool {
    name.starts_with(PREFIX)
}

/// Whether `pattern` is a valid MCP tool pattern for policy rules: `mcp__*`,
/// `mcp__<server>__*` or `mcp__<server>__<tool>` (wildcards `*` and `?` allowed in the tool
/// part).
pub fn is_tool_pattern(pattern: &str) -> bool {
    let Some(rest) = pattern.strip_prefix(PREFIX) else {
        return false;
    };
    if rest == "*" {
        return true;
    }
    let Some((server, tool)) = rest.split_once(SEPARATOR) else {
        return false;
    };
    check_server_name(server).is_ok() && !tool.is_empty()
}

/// The model-facing name of `tool` of `server`: `mcp__<server>__<tool>`, characters the
/// providers refuse replaced by `_`, cut to [`MAX_NAME_LEN`] with a hash of the whole name
/// when too long, and made unique among `taken` (a `_2`, `_3`, ... suffix).
pub fn tool_name(server: &str, tool: &str, taken: &BTreeSet<String>) -> String {
    let clean: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut name = format!("{PREFIX}{server}{SEPARATOR}{clean}");
    if name.len() > MAX_NAME_LEN {
        let hash = format!("{:08x}", fnv1a(tool.as_bytes()) as u32);
        name.truncate(MAX_NAME_LEN - hash.len() - 1);
        name.push('_');
        name.push_str(&hash);
    }
    if !taken.contains(&name) {
        return name;
    }
    for n in 2u32.. {
        let suffix = format!("_{n}");
        let mut candidate = name.clone();
        candidate.truncate(MAX_NAME_LEN - suffix.len());
        candidate.push_str(&suffix);
        if !taken.contains(&candidate) {
            return candidate;
        }
    }
    unreachable!("u32 suffixes run out")
}

/// 64-bit FNV-1a: a stable hash (the same on every worker and every replay).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// What a server's listed tools add to a run: their definitions (named for the model, taken
/// names updated) and how many were left out by [`MAX_TOOLS`] (`room` is how many the run
/// may still take).
pub fn definitions(
    list: &McpToolList,
    taken: &mut BTreeSet<String>,
    room: usize,
) -> (Vec<ToolDefinition>, usize) {
    let mut out = Vec::new();
    for tool in list.tools.iter().take(room) {
        let name = tool_name(&list.server, &tool.name, taken);
        taken.insert(name.clone());
        out.push(definition(&list.server, name, tool));
    }
    (out, list.tools.len().saturating_sub(room))
}

fn definition(server: &str, name: String, tool: &McpTool) -> ToolDefinition {
    let mut description = if tool.description.trim().is_empty() {
        tool.title.clone()
    } else {
        tool.description.clone()
    };
    crate::view::cut_text(&mut description, MAX_DESCRIPTION_BYTES);
    let parameters = schema_of(&tool.input_schema);
    ToolDefinition {
        name,
        description,
        parameters,
        // Hints from the server: only an explicit readOnlyHint makes a tool read-only.
        read_only: tool.read_only_hint == Some(true),
        mcp: Some(McpOrigin {
            server: server.to_owned(),
            tool: tool.name.clone(),
            destructive_hint: tool.destructive_hint,
            idempotent_hint: tool.idempotent_hint,
            open_world_hint: tool.open_world_hint,
            title: tool.title.clone(),
        }),
    }
}

/// The schema sent to the providers: the server's object schema, or an empty object schema
/// when it has none or it is not a JSON object (providers refuse tools without one).
fn schema_of(input_schema: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(input_schema) {
        Ok(serde_json::Value::Object(mut schema)) => {
            // Some providers refuse `$schema`; it says nothing the model needs.
            schema.remove("$schema");
            schema
                .entry("type")
                .or_insert_with(|| serde_json::Value::String("object".to_owned()));
            serde_json::Value::Object(schema).to_string()
        }
        _ => r#"{"type":"object","properties":{}}"#.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(server: &str, names: &[&str]) -> McpToolList {
        McpToolList {
            server: server.into(),
            tools: names
                .iter()
                .map(|n| McpTool {
                    name: (*n).into(),
                    input_schema: r#"{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"path":{"type":"string"}}}"#.into(),
                    read_only_hint: n.starts_with("read").then_some(true),
                    ..Default::default()
                })
                .collect(),
            listed: names.len() as u32,
            ..Default::default()
        }
    }

    #[test]
    fn names_fit_the_providers_rules_and_stay_unique() {
        let mut taken = BTreeSet::new();
        assert_eq!(tool_name("fs", "read_file", &taken), "mcp__fs__read_file");
        assert_eq!(
            tool_name("everything", "get-tiny-image", &taken),
            "mcp__everything__get-tiny-image"
        );
        assert_eq!(tool_name("fs", "a.b/c d", &taken), "mcp__fs__a_b_c_d");
        let long = "x".repeat(100);
        let name = tool_name("fs", &long, &taken);
        assert_eq!(name.len(), MAX_NAME_LEN);
        assert_ne!(name, tool_name("fs", &"x".repeat(101), &taken));
        taken.insert("mcp__fs__a_b".to_owned());
        assert_eq!(tool_name("fs", "a.b", &taken), "mcp__fs__a_b_2");
        taken.insert("mcp__fs__a_b_2".to_owned());
        assert_eq!(tool_name("fs", "a/b", &taken), "mcp__fs__a_b_3");
        for n in [&name, "mcp__fs__a_b_3"] {
            assert!(
                n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            );
        }
    }

    #[test]
    fn listed_tools_become_definitions_read_only_only_when_the_server_says_so() {
        let mut taken = BTreeSet::new();
        let (defs, left_out) = definitions(
            &listed("fs", &["read_text_file", "write_file"]),
            &mut taken,
            10,
        );
        assert_eq!(left_out, 0);
        assert_eq!(defs[0].name, "mcp__fs__read_text_file");
        assert!(defs[0].read_only);
        assert!(!defs[1].read_only, "no hint: mutating");
        let origin = defs[1].mcp.as_ref().unwrap();
        assert_eq!(
            (origin.server.as_str(), origin.tool.as_str()),
            ("fs", "write_file")
        );
        let schema: serde_json::Value = serde_json::from_str(&defs[0].parameters).unwrap();
        assert!(schema.get("$schema").is_none());
        assert_eq!(schema["type"], "object");
        // The run's cap leaves the rest out.
        let (defs, left_out) = definitions(&listed("b", &["t1", "t2", "t3"]), &mut taken, 1);
        assert_eq!((defs.len(), left_out), (1, 2));
    }

    #[test]
    fn schemas_that_are_not_objects_become_empty_object_schemas() {
        for bad in ["", "[]", "not json", "true"] {
            assert_eq!(schema_of(bad), r#"{"type":"object","properties":{}}"#);
        }
    }

    #[test]
    fn specs_are_checked_and_merged() {
        let use_ = |s: &str, t: &[&str]| McpUse {
            server: s.into(),
            tools: t.iter().map(|t| (*t).into()).collect(),
        };
        assert!(validate(&[use_("fs", &[])], 0).is_ok());
        for bad in ["", "a__b", "_a", "a b", &"x".repeat(40)] {
            let err = validate(&[use_(bad, &[])], 0).unwrap_err();
            assert!(err.contains("invalid MCP server name"), "{err}");
        }
        assert!(validate(&[use_("fs", &[" "])], 0).is_err());
        assert!(validate(&[], 7).unwrap_err().contains("mcp_unavailable"));
        let merged = merged(&[
            use_("fs", &["a"]),
            use_("gh", &[]),
            use_("fs", &["b", "a"]),
            use_("gh", &["x"]),
        ]);
        assert_eq!(merged, vec![use_("fs", &["a", "b"]), use_("gh", &[])]);
    }

    #[test]
    fn tool_patterns() {
        for ok in [
            "mcp__*",
            "mcp__fs__*",
            "mcp__fs__write_file",
            "mcp__fs__read_*",
        ] {
            assert!(is_tool_pattern(ok), "{ok}");
        }
        for bad in ["mcp__", "mcp__fs", "mcp__fs__", "shell", "mcp__bad name__x"] {
            assert!(!is_tool_pattern(bad), "{bad}");
        }
    }
}
