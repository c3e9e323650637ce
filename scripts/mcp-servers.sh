#!/usr/bin/env bash
# Installs the reference MCP servers the end-to-end tests run (npm packages pinned in
# tests/mcp/package-lock.json) into ${BATON_MCP_SERVERS_DIR:-/tmp/baton-mcp-servers-<uid>},
# unless that install is already up to date, and prints the directory. Needs node and npm (npm
# registry). Not under the checkout: a `sandbox = true` server runs as the sandbox user, which
# must be able to read it, and a checkout may sit in a directory only its owner can enter.
set -euo pipefail
umask 022
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${BATON_MCP_SERVERS_DIR:-/tmp/baton-mcp-servers-$(id -u)}"
case "$dir" in /*) ;; *) dir="$root/$dir" ;; esac
if [ -e "$dir" ] && [ ! -O "$dir" ]; then
  echo "$dir exists and belongs to another user; set BATON_MCP_SERVERS_DIR to another directory" >&2
  exit 1
fi
lock="$root/tests/mcp/package-lock.json"
stamp="$dir/.installed-lock"
if [ -f "$stamp" ] && cmp -s "$stamp" "$lock" &&
  [ -f "$dir/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js" ] &&
  [ -f "$dir/node_modules/@modelcontextprotocol/server-everything/dist/index.js" ]; then
  echo "$dir"
  exit 0
fi
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || {
  echo "node and npm are needed for the MCP tests (apt-get install nodejs npm)" >&2
  exit 1
}
mkdir -p "$dir"
cp "$root/tests/mcp/package.json" "$lock" "$dir/"
(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2) || {
  echo "npm could not install the MCP servers of tests/mcp/package.json into $dir" >&2
  exit 1
}
# Readable by everyone (the sandbox user) whatever the npm cache's modes.
chmod -R a+rX "$dir"
cp "$lock" "$stamp"
echo "$dir"
