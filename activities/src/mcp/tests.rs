//! The MCP activities against the reference servers (npm, installed by
//! `scripts/mcp-servers.sh`): skipped, with the reason printed, when `node` is absent.
