//! MCP tools in a run (issue 18) end to end against the reference servers installed from npm:
//! server-filesystem over stdio and server-everything over streamable HTTP (behind a relay that
//! counts what reaches it). `harness` checks the harness itself.

mod harness;
