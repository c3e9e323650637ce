#!/usr/bin/env bash
# Creates the venv of `baton-bench peer` (default: <repo>/target/peer-venv, or $1) and installs
# requirements.txt into it. Idempotent: does nothing, quietly, when the venv already holds
# exactly these requirements (a stamp file keeps a copy of the requirements it installed).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${1:-$here/../../target/peer-venv}"
requirements="$here/requirements.txt"
stamp="$venv/.baton-peer-requirements"
if [[ -x "$venv/bin/python" ]] && cmp -s "$requirements" "$stamp"; then
    exit 0
fi
if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
cp "$requirements" "$stamp"
