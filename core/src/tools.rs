//! The built-in tool catalog: what the model is told about each tool, and whether it only
//! reads. Pure data, shared by the workflow (for approval and validation) and the activities
//! (which implement the tools).

use baton_proto::ToolDefinition;

/// Name of the shell tool.
pub const SHELL: &str = "shell";
/// Name of the read-file tool.
pub const READ_FILE: &str = "read_file";
/// Name of the write-file tool.
pub const WRITE_FILE: &str = "write_file";
/// Name of the list-files tool.
pub const LIST_FILES: &str = "list_files";
/// Name of the edit-file tool (exact string replacement).
pub const EDIT_FILE: &str = "edit_file";
/// Name of the regex search tool.
pub const SEARCH_FILES: &str = "search_files";
/// Name of the glob tool.
pub const GLOB: &str = "glob";
/// Name of the subagent tool: starts a child run. Not one of the default tools: a
/// run has it only when its spec names it.
pub const SPAWN_AGENT: &str = "spawn_agent";

/// Every built-in tool's name, in the order the model sees them.
pub const BUILTIN_TOOLS: [&str; 7] = [
    SHELL,
    READ_FILE,
    WRITE_FILE,
    EDIT_FILE,
    LIST_FILES,
    SEARCH_FILES,
    GLOB,
];

/// Output sent to the model per tool result is capped at this many bytes.
pub const OUTPUT_CAP_BYTES: usize = 16 * 1024;
/// The fuller output kept for the transcript (beyond the model's preview) is capped at this.
pub const FULL_OUTPUT_CAP_BYTES: usize = 192 * 1024;

/// The definition of a built-in tool, or `None` if no tool has that name.
pub fn definition(name: &str) -> Option<ToolDefinition> {
    let (description, parameters, read_only) = match name {
        SHELL => (
            "Run a shell command (`sh -c`) in the workspace directory. Returns the exit code, \
             stdout and stderr. Output beyond 16 KiB is cut, keeping its start and end.",
            r#"{"type":"object","properties":{"command":{"type":"string","description":"The command line to run."},"timeout_seconds":{"type":"integer","minimum":1,"description":"Stop the command after this many seconds (default and most: the run's tool timeout)."}},"required":["command"],"additionalProperties":false}"#,
            false,
        ),
        READ_FILE => (
            "Read a UTF-8 text file in the workspace. Optionally a range of lines.",
            r#"{"type":"object","properties":{"path":{"type":"string","description":"Path relative to the workspace."},"offset":{"type":"integer","minimum":1,"description":"First line to return (1-based)."},"limit":{"type":"integer","minimum":1,"description":"Number of lines to return."}},"required":["path"],"additionalProperties":false}"#,
            true,
        ),
        WRITE_FILE => (
            "Create or overwrite a file in the workspace with the given content. Parent \
             directories are created.",
            r#"{"type":"object","properties":{"path":{"type":"string","description":"Path relative to the workspace."},"content":{"type":"string","description":"The whole new content of the file."}},"required":["path","content"],"additionalProperties":false}"#,
            false,
        ),
        LIST_FILES => (
            "List the files and directories under a directory of the workspace.",
            r#"{"type":"object","properties":{"path":{"type":"string","description":"Directory relative to the workspace (default: the workspace itself)."},"recursive":{"type":"boolean","description":"List subdirectories too (default false)."}},"additionalProperties":false}"#,
            true,
        ),
        EDIT_FILE => (
            "Replace an exact piece of text in a workspace file. `old_text` must occur exactly \
             once (include surrounding lines to make it unique) unless `replace_all` is true. \
             Fails, changing nothing, when the text is missing or not unique.",
            r#"{"type":"object","properties":{"path":{"type":"string","description":"Path relative to the workspace."},"old_text":{"type":"string","description":"The exact text to replace, whitespace included."},"new_text":{"type":"string","description":"The replacement."},"replace_all":{"type":"boolean","description":"Replace every occurrence (default false)."}},"required":["path","old_text","new_text"],"additionalProperties":false}"#,
            false,
        ),
        SEARCH_FILES => (
            "Search the workspace's text files with a regular expression (Rust regex syntax). \
             Returns `path:line: text` for each matching line, up to `max_results`.",
            r#"{"type":"object","properties":{"pattern":{"type":"string","description":"Regular expression."},"path":{"type":"string","description":"Directory or file to search, relative to the workspace (default: the workspace)."},"glob":{"type":"string","description":"Only search files whose path matches this glob, e.g. *.rs or src/**/*.py."},"case_insensitive":{"type":"boolean","description":"Ignore case (default false)."},"max_results":{"type":"integer","minimum":1,"description":"Stop after this many matching lines (default 200)."}},"required":["pattern"],"additionalProperties":false}"#,
            true,
        ),
        SPAWN_AGENT => (
            "Delegate a self-contained part of the task to a subagent: a new agent run with its \
             own copy of the workspace as it is now. It sees only `task` (not this \
             conversation), so say everything it needs. Returns its final answer; the files it \
             changed are merged into this workspace. Several calls in one reply run in parallel.",
            r#"{"type":"object","properties":{"task":{"type":"string","description":"What the subagent should do and report back, self-contained."},"tools":{"type":"array","items":{"type":"string"},"description":"Tools it may use, from yours (default: all of yours)."},"policy":{"type":"object","properties":{"require_approval":{"type":"array","items":{"type":"string"},"description":"Tools whose calls wait for a human in the subagent, on top of your own approval policy."},"sandbox":{"type":"string","enum":["workspace-write","read-only"],"description":"read-only: its commands cannot change files."}},"additionalProperties":false,"description":"Narrows your own approval policy and sandbox for the subagent."},"max_turns":{"type":"integer","minimum":1,"description":"Model calls it may make (default and at most: your own limit)."}},"required":["task"],"additionalProperties":false}"#,
            false,
        ),
        GLOB => (
            "Find files in the workspace whose relative path matches a glob pattern such as \
             `**/*.rs` or `src/*.toml`. Returns sorted paths.",
            r#"{"type":"object","properties":{"pattern":{"type":"string","description":"Glob pattern, relative to the workspace (or to `path`)."},"path":{"type":"string","description":"Directory to search from (default: the workspace)."}},"required":["pattern"],"additionalProperties":false}"#,
            true,
        ),
        _ => return None,
    };
    Some(ToolDefinition {
        name: name.to_owned(),
        description: description.to_owned(),
        parameters: parameters.to_owned(),
        read_only,
        mcp: None,
    })
}

/// Definitions of the named tools; empty `names` means every built-in tool. Unknown names are
/// returned as the error so callers can say which ones are wrong.
pub fn definitions(names: &[String]) -> Result<Vec<ToolDefinition>, Vec<String>> {
    if names.is_empty() {
        return Ok(BUILTIN_TOOLS.iter().filter_map(|n| definition(n)).collect());
    }
    let unknown: Vec<String> = names
        .iter()
        .filter(|n| definition(n).is_none())
        .cloned()
        .collect();
    if !unknown.is_empty() {
        return Err(unknown);
    }
    let mut out: Vec<ToolDefinition> = Vec::new();
    for name in names {
        if !out.iter().any(|d| &d.name == name) {
            out.extend(definition(name));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_schema_is_a_json_object_schema() {
        for name in BUILTIN_TOOLS {
            let def = definition(name).unwrap();
            let schema: serde_json::Value = serde_json::from_str(&def.parameters).unwrap();
            assert_eq!(schema["type"], "object", "{name}");
        }
    }

    #[test]
    fn unknown_names_are_reported() {
        let err = definitions(&["shell".into(), "nope".into()]).unwrap_err();
        assert_eq!(err, vec!["nope".to_string()]);
        assert_eq!(definitions(&[]).unwrap().len(), BUILTIN_TOOLS.len());
    }
}
