#!/usr/bin/env bash
# Runs the whole test suite: unit tests and the end-to-end tests, which start their own
# Temporal dev servers (on free loopback ports), workers and mock model servers, and stop them.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_temporal
ensure_moto
ensure_otlp_receiver
ensure_git
ensure_openssl
ensure_mcp_servers
ensure_llama_server
cargo build --workspace --bins
# 3 at once on 2 cores: at 4, two of the e2e tests that each start a dev server and workers
# timed out once each in session 16 (a dev server unreachable, a real model slowed down).
cargo test --workspace -- --test-threads="${BATON_TEST_THREADS:-3}" "$@"
