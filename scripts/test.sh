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
# 4 at once on 2 cores: the e2e tests spend much of their time waiting on servers, timers
# and heartbeat timeouts (the CPU was idle a quarter of the time at 3). Measured on this 2-core
# machine: the e2e binary took 514 s at 3 and 386 s at 4, with no failure. Lower it with
# BATON_TEST_THREADS on a slower machine.
cargo test --workspace -- --test-threads="${BATON_TEST_THREADS:-4}" "$@"
