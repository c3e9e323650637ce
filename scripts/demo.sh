#!/usr/bin/env bash
# The demo: starts a local Temporal dev server (persistent, .baton/temporal.db) and a worker,
# then runs a scripted agent that inspects files and asks to run a shell command that needs
# approval; shows the pending approval, approves it with the CLI, and prints the answer.
#
#   scripts/demo.sh          # run the demo, then stop what it started
#   KEEP=1 scripts/demo.sh   # leave the dev server (UI on http://127.0.0.1:8233) and worker up
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ADDRESS=${TEMPORAL_ADDRESS:-127.0.0.1:7233}
export TEMPORAL_ADDRESS=$ADDRESS
UI=http://127.0.0.1:$(( ${ADDRESS##*:} + 1000 ))  # the dev server's default UI port
mkdir -p .baton
started_server=""
started_worker=""
cleanup() {
  if [ -z "${KEEP:-}" ]; then
    [ -n "$started_worker" ] && kill "$started_worker" 2>/dev/null && wait "$started_worker" 2>/dev/null || true
    [ -n "$started_server" ] && kill "$started_server" 2>/dev/null && wait "$started_server" 2>/dev/null || true
  fi
}
trap cleanup EXIT

ensure_temporal
echo "== building baton (debug)"
cargo build --quiet --workspace --bins
BIN=${CARGO_TARGET_DIR:-target}/debug
BATON=$BIN/baton

if temporal operator namespace describe --namespace default --address "$ADDRESS" >/dev/null 2>&1; then
  echo "== using the Temporal server already running at $ADDRESS"
  for sa in BatonState=Keyword BatonAwaitingApproval=Bool BatonTurns=Int BatonSubmitter=Keyword BatonLabels=KeywordList; do
    temporal operator search-attribute create --address "$ADDRESS" --name "${sa%%=*}" --type "${sa##*=}" >/dev/null 2>&1 || true
  done
else
  echo "== starting the Temporal dev server at $ADDRESS (UI $UI, data .baton/temporal.db)"
  temporal server start-dev --ip 127.0.0.1 --port "${ADDRESS##*:}" --db-filename .baton/temporal.db \
    --search-attribute BatonState=Keyword --search-attribute BatonAwaitingApproval=Bool \
    --search-attribute BatonTurns=Int --search-attribute BatonSubmitter=Keyword \
    --search-attribute BatonLabels=KeywordList \
    --log-level error >.baton/temporal.log 2>&1 &
  started_server=$!
  wait_for_temporal "$ADDRESS"
fi

echo "== starting a worker (log: .baton/worker.log)"
# The demo's worker serves the demo's run even when .baton/temporal.db remembers an older build
# as the deployment's current one (a rebuilt checkout running the demo again).
# Tools run as the sandbox user, which must be able to traverse every parent of the
# workspace root; a checkout in a private directory (a `mktemp -d` clone, a 0700 home) is
# not, so the runs' workspaces live under the temp directory, which every user traverses.
demo_root=${TMPDIR:-/tmp}/baton-demo-$(id -u)
mkdir -p "$demo_root/workspaces"
chmod 0711 "$demo_root" "$demo_root/workspaces"
BATON_DEPLOYMENT__PROMOTE=always BATON_WORKSPACE_ROOT="$demo_root/workspaces" \
  "$BIN/baton-worker" >.baton/worker.log 2>&1 &
started_worker=$!
for _ in $(seq 1 100); do
  grep -q "worker started" .baton/worker.log && break
  if ! kill -0 "$started_worker" 2>/dev/null; then
    echo "the worker exited at start-up; its log (.baton/worker.log):" >&2
    cat .baton/worker.log >&2
    started_worker=""
    exit 1
  fi
  sleep 0.1
done

echo "== submitting the demo run (scripted model; shell calls need approval)"
RUN=$($BATON submit --script examples/demo-script.json --require-approval shell \
  "Look at the workspace notes and count the open TODO items.")
echo "run id: $RUN"

echo "== waiting for the agent to ask for approval"
for _ in $(seq 1 150); do
  state=$($BATON status "$RUN" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
  [ "$state" = "AWAITING_APPROVAL" ] && break
  sleep 0.2
done
$BATON status "$RUN"

echo "== approving from the CLI: baton approve $RUN --all"
$BATON approve "$RUN" --all --reason "looks safe"

echo "== the run, turn by turn"
$BATON watch "$RUN"

echo "== result"
$BATON result "$RUN" --wait
if [ -n "${KEEP:-}" ]; then
  echo "left running: dev server (UI $UI) and worker pid $started_worker"
fi
